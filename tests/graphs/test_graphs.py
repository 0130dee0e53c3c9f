"""CUDA graphs: stream capture, explicit building, instantiation, updates,
lifetimes.

`standin`-marked tests run against the driver stand-in (make test's second
pass): it keeps graphs as host-side node lists, capture records a stream's
work as nodes, and a GraphExec's launch replays them (copies and memsets
move bytes, kernel nodes are recorded with their parameter bytes, host
callbacks run).  `gpu`-marked tests check results against NumPy on a GPU.
"""

import ctypes
import gc
import os
import struct
import subprocess
import sys
import threading
import weakref

import numpy as np
import pytest

import pygpu.driver as cuda
from pygpu import compiler, graphs
from pygpu.compiler import SourceModule

KERNELS = r"""
extern "C" __global__ void scale(float *x, float a, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] *= a;
}
extern "C" __global__ void other(float *x, float a, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] += a;
}
extern "C" __global__ void axpy(float *y, const float *x, float a, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}
extern "C" __global__ void mixed(char c, short h, int i, long long q, float f, double d,
                                 const float *p) { }
extern "C" __global__ void two(float *x, int n) { }
"""

# what a kernel needs to set a conditional node's value under NVRTC: the
# driver resolves cudaGraphSetConditional when the module loads
COND_KERNELS = (
    graphs.CONDITIONAL_PREAMBLE
    + r"""
// one step of a countdown: the while loop runs while it is > 0
extern "C" __global__ void step(cudaGraphConditionalHandle h, int *counter)
{
    if (threadIdx.x == 0 && blockIdx.x == 0) {
        int c = --(*counter);
        cudaGraphSetConditional(h, c > 0 ? 1u : 0u);
    }
}
extern "C" __global__ void set_from(cudaGraphConditionalHandle h, const int *value)
{
    if (threadIdx.x == 0 && blockIdx.x == 0)
        cudaGraphSetConditional(h, (unsigned int)*value);
}
extern "C" __global__ void add_const(float *x, float a, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] += a;
}
"""
)


@pytest.fixture
def mod(ctx):
    return SourceModule(KERNELS, no_extern_c=True)


def _unraisable():
    seen = []
    old = sys.unraisablehook
    sys.unraisablehook = seen.append
    return seen, old


# ---------------------------------------------------------------- no driver


def test_conditional_preamble_compiles_with_nvrtc():
    """The declaration pygpu ships compiles under NVRTC (no GPU needed); the
    handle is a 64-bit parameter and the call an external the driver
    resolves at load time."""
    ptx = bytes(compiler.compile(COND_KERNELS, target="ptx", arch="compute_90")).decode()
    assert ".extern .func cudaGraphSetConditional" in ptx
    entry = ptx[ptx.index(".entry step") :]
    assert ".param .u64 step_param_0" in entry


def test_public_names():
    for name in (
        "Graph",
        "GraphExec",
        "GraphNode",
        "capture_graph",
        "capture_mode",
        "graph_node_type",
        "graph_conditional_type",
        "graph_instantiate_flags",
    ):
        assert getattr(cuda, name) is getattr(graphs, name)
        assert name in cuda.__all__
    assert cuda.capture_mode.GLOBAL == 0 and cuda.capture_mode.RELAXED == 2
    assert cuda.graph_node_type.KERNEL == 0 and cuda.graph_node_type.CONDITIONAL == 13
    with pytest.raises(TypeError, match="cannot create 'pygpu.driver.GraphExec' instances"):
        cuda.GraphExec()


# ---------------------------------------------------------------- stand-in


def _layout(values):
    """Natural C layout of NumPy scalars."""
    out = b""
    for v in values:
        a = np.asarray(v)
        al = min(a.dtype.alignment, 8)
        out += b"\0" * (-len(out) % al)
        out += a.tobytes()
    return out


def _replayed(standin):
    """[(kernel name, parameter bytes)] of the last graph launch."""
    buf = ctypes.create_string_buffer(1 << 20)
    lib = standin.lib
    lib.fakecuda_replay_log.restype = ctypes.c_size_t
    lib.fakecuda_replay_log(buf, len(buf))
    out = []
    for line in buf.value.decode().splitlines():
        name, hexed = line.split(":")
        out.append((name, bytes.fromhex(hexed)))
    return out


def _live_graphs(standin):
    gc.collect()
    return standin.lib.fakecuda_live(b"graphs"), standin.lib.fakecuda_live(b"graph_execs")


@pytest.mark.standin
def test_kernel_nodes_pack_exactly_as_launches(standin, mod, rng):
    f = mod.get_function("mixed")
    g = cuda.Graph()
    want = []
    nodes = []
    for k in range(5):
        c = int(rng.integers(-128, 128))
        h = int(rng.integers(-(2**15), 2**15))
        i = int(rng.integers(-(2**31), 2**31))
        q = int(rng.integers(-(2**63), 2**63 - 1, dtype=np.int64))
        fl, d = float(rng.standard_normal()), float(rng.standard_normal())
        ptr = cuda.mem_alloc(64)
        f(c, h, i, q, fl, d, ptr, block=(3, 2, 1), grid=(4, 1, 1))
        eager = standin.last_launch().params
        nodes.append(
            g.add_kernel_node(
                f, c, h, i, q, fl, d, ptr, block=(3, 2, 1), grid=(4, 1, 1), dependencies=nodes[-1:]
            )
        )
        want.append(
            _layout(
                [
                    np.int8(c),
                    np.int16(h),
                    np.int32(i),
                    np.int64(q),
                    np.float32(fl),
                    np.float64(d),
                    np.uint64(int(ptr)),
                ]
            )
        )
        assert eager == want[-1]
    exe = g.instantiate()
    before = standin.launches()
    exe.launch()
    assert standin.launches() == before + 5
    assert _replayed(standin) == [("mixed", w) for w in want]
    rec = standin.last_launch()
    assert rec.grid == (4, 1, 1) and rec.block == (3, 2, 1)
    assert [n.index for n in nodes] == [0, 1, 2, 3, 4]
    assert all(n.kind == "kernel" and n.type == cuda.graph_node_type.KERNEL for n in nodes)
    assert nodes[3].dependencies == [nodes[2]] and nodes[0].dependencies == []
    assert nodes[1].function is f
    assert repr(nodes[1]) == "<pygpu.driver.GraphNode #1 kernel 'mixed'>"


@pytest.mark.standin
def test_kernel_node_argument_errors_name_node_and_parameter(standin, mod):
    f = mod.get_function("scale")
    d = cuda.mem_alloc(64)
    g = cuda.Graph()
    first = g.add_kernel_node(f, d, 2.0, 16, block=(16, 1, 1))
    with pytest.raises(
        TypeError,
        match=r"^graph node #1: kernel 'scale' takes 3 arguments "
        r"but 2 were given$",
    ):
        g.add_kernel_node(f, d, 2.0, block=(16, 1, 1))
    with pytest.raises(
        TypeError,
        match=r"^graph node #1: kernel 'scale': parameter 1 \(4 "
        r"bytes\) cannot take a str",
    ):
        g.add_kernel_node(f, d, "2", 16, block=(16, 1, 1))
    with pytest.raises(
        OverflowError,
        match=r"^graph node #1: kernel 'scale': parameter 2 is "
        r"4 bytes; 4294967296 does not fit$",
    ):
        g.add_kernel_node(f, d, 2.0, 2**32, block=(16, 1, 1))
    with pytest.raises(
        TypeError,
        match=r"^graph node #1: kernel 'scale': parameter 0: graph "
        r"nodes do not take In/Out/InOut",
    ):
        g.add_kernel_node(f, cuda.InOut(np.zeros(4, np.float32)), 2.0, 16, block=(4, 1, 1))
    with pytest.raises(
        TypeError,
        match=r"^graph node #1: kernel 'scale': add_kernel_node\(\) "
        r"needs block=\(x, y, z\)$",
    ):
        g.add_kernel_node(f, d, 2.0, 16)
    with pytest.raises(ValueError, match=r"^graph node #1: block\[1\] must be positive, got 0"):
        g.add_kernel_node(f, d, 2.0, 16, block=(16, 0, 1))
    with pytest.raises(
        ValueError,
        match=r"^graph node #1: kernel 'scale': block x dimension "
        r"2048 exceeds the device's limit of 1024$",
    ):
        g.add_kernel_node(f, d, 2.0, 16, block=(2048, 1, 1))
    with pytest.raises(
        TypeError,
        match=r"add_kernel_node\(\) got an unexpected keyword "
        r"argument 'stream'",
    ):
        g.add_kernel_node(f, d, 2.0, 16, block=(16, 1, 1), stream=None)
    with pytest.raises(TypeError, match=r"add_kernel_node\(\) takes a Function first, not str"):
        g.add_kernel_node("scale", d, 2.0, 16, block=(16, 1, 1))
    with pytest.raises(TypeError, match=r"dependencies\[0\] must be a GraphNode, not int"):
        g.add_kernel_node(f, d, 2.0, 16, block=(16, 1, 1), dependencies=[3])
    other = cuda.Graph().add_empty_node()
    with pytest.raises(
        ValueError,
        match=r"dependencies\[1\] \(node #0\) belongs to another "
        r"graph",
    ):
        g.add_kernel_node(f, d, 2.0, 16, block=(16, 1, 1), dependencies=[first, other])
    freed = cuda.mem_alloc(64)
    freed.free()
    # issue 16: the node named first, as for every other mistake
    with pytest.raises(
        cuda.LogicError,
        match=r"^graph node #1: kernel 'scale': parameter 0 is "
        r"a freed DeviceAllocation$",
    ):
        g.add_kernel_node(f, freed, 2.0, 16, block=(16, 1, 1))
    with pytest.raises(
        cuda.LogicError,
        match=r"^graph node #1 \(memcpy\): src: the "
        r"DeviceAllocation was freed$",
    ):
        g.add_memcpy_node(d, freed)
    with pytest.raises(
        cuda.LogicError,
        match=r"^graph node #1 \(memcpy\): dest: the "
        r"DeviceAllocation was freed$",
    ):
        g.add_memcpy_node(freed, np.zeros(4, np.float32))
    with pytest.raises(
        cuda.LogicError,
        match=r"^graph node #1 \(memset\): dest: the "
        r"DeviceAllocation was freed$",
    ):
        g.add_memset_node(freed, 0, 4)
    # nothing was added by the failures: the next node is #1
    assert g.add_kernel_node(f, d, 2.0, 16, block=(16, 1, 1)).index == 1
    assert len(g.nodes()) == 2


@pytest.mark.standin
def test_copies_and_memsets_move_bytes_on_replay(standin, ctx, rng):
    n = 256
    host_in = rng.standard_normal(n).astype(np.float32)
    host_out = np.zeros(n, np.float32)
    d = cuda.mem_alloc(host_in.nbytes)
    d2 = cuda.mem_alloc(host_in.nbytes)
    g = cuda.Graph()
    up = g.add_memcpy_node(d, host_in)
    ms = g.add_memset_node(int(d) + 16, 0x3F800000, 4, element_size=4, dependencies=up)
    dd = g.add_memcpy_node(d2, d, dependencies=[ms])
    down = g.add_memcpy_node(host_out, d2, dependencies=dd)
    assert [x.kind for x in g.nodes()] == ["memcpy", "memset", "memcpy", "memcpy"]
    assert down.dependencies == [dd]
    exe = g.instantiate()
    assert not host_out.any()  # instantiating runs nothing
    for _ in range(2):
        exe.launch()
        want = host_in.copy()
        want[4:8] = 1.0
        np.testing.assert_array_equal(host_out, want)
        host_in[:] = rng.standard_normal(n)  # the node reads the buffer at each replay
    with pytest.raises(TypeError, match=r"dest and src are both host buffers"):
        g.add_memcpy_node(host_out, host_in)
    with pytest.raises(ValueError, match=r"2048 bytes do not fit \(dest has 1024, src 1024\)"):
        g.add_memcpy_node(d, host_in, 2048)
    with pytest.raises(TypeError, match=r"dest must be a C-contiguous writable host buffer"):
        g.add_memcpy_node(b"readonly", d, 4)
    with pytest.raises(ValueError, match=r"element_size must be 1, 2 or 4, not 3"):
        g.add_memset_node(d, 1, 4, element_size=3)
    with pytest.raises(ValueError, match=r"value 256 does not fit in 1 byte$"):
        g.add_memset_node(d, 256, 4)
    with pytest.raises(ValueError, match=r"2000 elements of 1 bytes do not fit in 1024 bytes"):
        g.add_memset_node(d, 1, 2000)


@pytest.mark.standin
def test_dependencies_queries_and_dot(standin, ctx, tmp_path):
    g = cuda.Graph()
    a = g.add_empty_node()
    b = g.add_empty_node()
    c = g.add_empty_node(dependencies=(a,))
    g.add_dependencies(b, c)
    assert c.dependencies == [a, b]
    e1, e2 = g.add_empty_node(), g.add_empty_node()
    g.add_dependencies([a, b], [e1, e2])
    assert e1.dependencies == [a] and e2.dependencies == [b]
    with pytest.raises(ValueError, match=r"2 source and 1 destination nodes"):
        g.add_dependencies([a, b], [c])
    with pytest.raises(TypeError, match=r"dependencies must be a GraphNode or a sequence"):
        g.add_empty_node(dependencies=5)
    assert g.nodes() == [a, b, c, e1, e2]
    assert c.graph is g and int(c) == c.handle != 0
    path = tmp_path / "g.dot"
    g.debug_dot(str(path))
    text = path.read_text()
    assert "node0 -> node2" in text and "node1 -> node2" in text
    with pytest.raises(AttributeError, match=r"node #0 is a empty node; only mem_alloc"):
        a.dptr


@pytest.mark.standin
def test_host_callbacks_run_in_order_and_errors_are_kept(standin, ctx):
    order = []
    g = cuda.Graph()
    n0 = g.add_host_node(lambda: order.append("first"))
    n1 = g.add_host_node(lambda: order.append("second"), dependencies=[n0])

    def boom():
        order.append("third")
        raise ValueError("callback failed on purpose")

    g.add_host_node(boom, dependencies=[n1])
    exe = g.instantiate()
    seen, old = _unraisable()
    try:
        exe.launch()
        exe.synchronize()
    finally:
        sys.unraisablehook = old
    assert order == ["first", "second", "third"]
    assert len(seen) == 1 and isinstance(seen[0].exc_value, ValueError)
    assert len(exe.callback_errors) == 1
    assert str(exe.callback_errors[0]) == "callback failed on purpose"
    assert exe.callback_errors is g.callback_errors
    with pytest.raises(TypeError, match=r"callback must be callable, not int"):
        g.add_host_node(3)


@pytest.mark.standin
def test_capture_records_instead_of_running(standin, mod, rng):
    f = mod.get_function("scale")
    s = cuda.Stream()
    n = 64
    x = cuda.pagelocked_empty(n, np.float32)
    x[:] = rng.standard_normal(n)
    out = cuda.pagelocked_zeros(n, np.float32)
    d = cuda.mem_alloc(x.nbytes)
    assert not s.is_capturing()
    launches = standin.launches()
    s.begin_capture()
    assert s.is_capturing()
    cuda.memcpy_htod_async(d, x, s)
    f(d, np.float32(3), np.int32(n), block=(64, 1, 1), stream=s)
    cuda.memset_d32_async(d, 0, 1, s)
    cuda.memcpy_dtoh_async(out, d, s)
    g = s.end_capture()
    assert not s.is_capturing()
    assert standin.launches() == launches and not out.any()  # nothing ran
    nodes = g.nodes()
    assert [k.kind for k in nodes] == ["memcpy", "kernel", "memset", "memcpy"]
    assert nodes[2].dependencies == [nodes[1]]
    exe = g.instantiate()
    exe.launch(s)
    s.synchronize()
    want = x.copy()
    want[0] = 0
    np.testing.assert_array_equal(out, want)  # copies replayed; the kernel is recorded
    assert _replayed(standin) == [
        ("scale", _layout([np.uint64(int(d)), np.float32(3), np.int32(n)]))
    ]
    # the context manager
    with cuda.capture_graph(s, mode=cuda.capture_mode.THREAD_LOCAL) as cap:
        cuda.memcpy_htod_async(d, x, s)
    assert [k.kind for k in cap.graph.nodes()] == ["memcpy"]


@pytest.mark.standin
def test_capture_errors_are_clear_and_end_cleanly(standin, ctx, rng):
    s = cuda.Stream()
    d = cuda.mem_alloc(64)
    base = _live_graphs(standin)
    host = np.zeros(16, np.float32)
    with pytest.raises(cuda.LogicError, match=r"end_capture\(\): this stream is not capturing"):
        s.end_capture()
    with pytest.raises(cuda.LogicError, match=r"the default streams cannot be captured"):
        cuda.Stream.null().begin_capture()
    with pytest.raises(ValueError, match=r"mode must be a capture_mode"):
        s.begin_capture(mode=7)
    s.begin_capture()
    with pytest.raises(cuda.LogicError, match=r"already capturing"):
        s.begin_capture()
    # inside this thread's capture the default stream is the capturing one: a
    # blocking copy is refused before the driver (which would invalidate the
    # capture), and the capture goes on; a device-side copy or memset given
    # no stream is captured
    calls = standin.calls("cuMemcpyHtoD"), standin.calls("cuMemsetD8")
    with pytest.raises(
        cuda.LogicError,
        match=r"^memcpy_htod\(\): this thread is capturing a "
        r"graph, and inside the capture the default "
        r"stream is the capturing stream, whose work is "
        r"recorded, not run: a blocking call cannot wait "
        r"for it; use memcpy_htod_async \(it is captured: "
        r"each replay reads the host buffer then\), or "
        r"call it after end_capture\(\)$",
    ):
        cuda.memcpy_htod(d, host)
    with pytest.raises(
        cuda.LogicError,
        match=r"^memcpy_dtoh\(\): the stream is capturing a "
        r"graph, whose work is recorded, not run: a "
        r"blocking call cannot wait for it; use the "
        r"_async form \(it is captured\), or call it "
        r"after end_capture\(\)$",
    ):
        cuda.memcpy_dtoh(host, d, stream=s)
    assert (standin.calls("cuMemcpyHtoD"), standin.calls("cuMemsetD8")) == calls
    cuda.memset_d8(d, 1, 8)  # captured on s
    cuda.memcpy_dtod_async(d, d, 8)  # async, no stream: captured on s
    cuda.memcpy_htod_async(d, host, s)
    assert [n.kind for n in s.end_capture().nodes()] == ["memset", "memcpy", "memcpy"]
    # in another thread the default stream is the legacy one, which would
    # wait for the blocking capturing stream: refused before the driver
    s.begin_capture()
    errors = []

    def legacy_work():
        ctx.push()
        try:
            for call in (
                lambda: cuda.memcpy_htod(d, host),
                lambda: cuda.memset_d8(d, 1, 8),
                lambda: cuda.memcpy_dtod_async(d, d, 8),
            ):
                with pytest.raises(cuda.LogicError) as e:
                    call()
                errors.append(str(e.value))
        finally:
            cuda.Context.pop()

    t = _Thread(legacy_work)
    t.start()
    t.join()
    assert t.error is None, t.error
    assert [e.split(":")[0] for e in errors] == [
        "memcpy_htod()",
        "memset_d8()",
        "memcpy_dtod_async()",
    ]
    assert all(
        e.endswith(
            "a stream of this context is capturing a graph, and work on the "
            "legacy default stream would wait for it (CUDA_ERROR_STREAM_CAPTURE_"
            "IMPLICIT, which would invalidate the capture); pass the capturing "
            "stream to the _async form, or call it before or after the capture"
        )
        for e in errors
    ), errors
    cuda.memset_d8_async(d, 1, 8, s)
    assert [n.kind for n in s.end_capture().nodes()] == ["memset"]
    # the legacy stream does not wait for a non-blocking stream: another
    # thread's synchronous copy runs
    nb = cuda.Stream(flags=cuda.stream_flags.NON_BLOCKING)
    nb.begin_capture()

    def sync_copy():
        ctx.push()
        try:
            cuda.memcpy_htod(d, host)
        finally:
            cuda.Context.pop()

    t = _Thread(sync_copy)
    t.start()
    t.join()
    assert t.error is None, t.error
    cuda.memset_d8_async(d, 1, 8, nb)
    assert [n.kind for n in nb.end_capture().nodes()] == ["memset"]
    # Context.synchronize() would wait for the capturing stream: refused
    # before the driver, and the capture goes on
    s.begin_capture()
    calls = standin.calls("cuCtxSynchronize")
    with pytest.raises(
        cuda.LogicError,
        match=r"^Context.synchronize\(\): a stream of this "
        r"context is capturing a graph \(its work is "
        r"recorded, not run\), which this call would wait "
        r"for \(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, "
        r"which would invalidate the capture\); call it "
        r"before or after the capture$",
    ):
        ctx.synchronize()
    assert standin.calls("cuCtxSynchronize") == calls
    cuda.memset_d8_async(d, 1, 8, s)
    assert [n.kind for n in s.end_capture().nodes()] == ["memset"]
    # an illegal call that reaches the driver: the capture is invalidated
    s.begin_capture()
    assert _driver_entry("cuCtxSynchronize", 2000, ctypes.CFUNCTYPE(ctypes.c_int))() == 900
    # (900: CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED)
    with pytest.raises(
        cuda.LogicError,
        match=r"CUDA_ERROR_STREAM_CAPTURE_INVALIDATED: .*"
        r"no graph was made; the stream is no longer "
        r"capturing",
    ):
        s.end_capture()
    assert not s.is_capturing()
    # synchronizing or querying the capturing stream: refused before the
    # driver (which would invalidate the capture), and the capture goes on
    s.begin_capture()
    calls = standin.calls("cuStreamSynchronize"), standin.calls("cuStreamQuery")
    with pytest.raises(
        cuda.LogicError,
        match=r"^Stream.synchronize\(\): this Stream is "
        r"capturing a graph \(its work is recorded, not "
        r"run\); end_capture\(\) first, then launch "
        r"the graph$",
    ):
        s.synchronize()
    with pytest.raises(
        cuda.LogicError,
        match=r"^Stream.is_done\(\): this Stream is "
        r"capturing a graph",
    ):
        s.is_done()
    with pytest.raises(
        cuda.LogicError,
        match=r"^Stream.synchronize\(\): this thread is "
        r"capturing a graph, and inside the capture the "
        r"default stream is the capturing stream",
    ):
        cuda.Stream.null().synchronize()
    assert (standin.calls("cuStreamSynchronize"), standin.calls("cuStreamQuery")) == calls
    cuda.memset_d8_async(d, 1, 8, s)
    assert [n.kind for n in s.end_capture().nodes()] == ["memset"]
    # the context manager ends a capture whose block failed, keeping its error
    with pytest.raises(KeyError, match="from the block"):
        with cuda.capture_graph(s) as cap:
            cuda.memcpy_htod_async(d, host, s)
            raise KeyError("from the block")
    assert not s.is_capturing() and cap.graph is None
    with pytest.raises(cuda.LogicError, match=r"^memcpy_dtoh\(\): this thread is capturing"):
        with cuda.capture_graph(s):
            cuda.memcpy_dtoh(host, d)
    assert not s.is_capturing()
    # a stream dropped while capturing ends its capture
    s2 = cuda.Stream()
    s2.begin_capture()
    cuda.memset_d8_async(d, 1, 8, s2)
    del s2
    gc.collect()
    assert _live_graphs(standin) == base


def _driver_entry(name, version, proto):
    """A driver entry point of the stand-in, called past pygpu."""
    lib = ctypes.CDLL(os.environ["PYGPU_LIBCUDA"])
    get = lib.cuGetProcAddress_v2
    get.argtypes = [
        ctypes.c_char_p,
        ctypes.POINTER(ctypes.c_void_p),
        ctypes.c_int,
        ctypes.c_uint64,
        ctypes.c_void_p,
    ]
    fn = ctypes.c_void_p()
    assert get(name.encode(), ctypes.byref(fn), version, 0, None) == 0
    return proto(fn.value)


@pytest.mark.standin
def test_capture_keeps_launch_arguments_alive(standin, mod, rng):
    f = mod.get_function("scale")
    s = cuda.Stream()
    d = cuda.mem_alloc(256)
    wd = weakref.ref(d)
    s.begin_capture()
    f(d, np.float32(2), np.int32(64), block=(64, 1, 1), stream=s)
    bound = f.configure((1, 1), (64, 1, 1), stream=s)
    bound(d, np.float32(5), np.int32(64))
    g = s.end_capture()
    live = standin.live()["device"]
    del d, bound
    gc.collect()
    assert wd() is not None and standin.live()["device"] == live  # the graph holds it
    exe = g.instantiate()
    del g
    gc.collect()
    exe.launch(s)
    assert [n for n, _ in _replayed(standin)] == ["scale", "scale"]
    del exe
    gc.collect()
    assert wd() is None


def test_capture_keeps_quick_launch_arguments_alive(standin, mod):
    # exact DeviceAllocation/int/float arguments take the quick launch, but
    # not on a capturing stream: a launcher configured before the capture,
    # __call__ and prepared_async_call all keep their allocation in the graph
    f = mod.get_function("scale")
    s = cuda.Stream()
    d = cuda.mem_alloc(256)
    wd = weakref.ref(d)
    bound = f.configure((1, 1), (64, 1, 1), stream=s)
    bound(d, 3.0, 64)  # not capturing: launched now
    assert standin.last_launch().stream == s.handle
    f.prepare("Pfi")
    s.begin_capture()
    bound(d, 2.0, 64)
    f(d, 2.0, 64, block=(64, 1, 1), stream=s)
    f.prepared_async_call((1, 1), (64, 1, 1), s, d, 2.0, 64)
    g = s.end_capture()
    del d, bound
    gc.collect()
    assert wd() is not None, "a captured launch's allocation was not kept"
    exe = g.instantiate()
    del g
    gc.collect()
    exe.launch(s)
    assert [n for n, _ in _replayed(standin)] == ["scale", "scale", "scale"]
    del exe
    gc.collect()
    assert wd() is None


@pytest.mark.standin
def test_capture_keeps_copy_and_memset_operands_alive(standin, ctx, rng):
    """A captured async copy's graph holds both sides (the host buffer
    too: the driver recorded only its address), a captured memset its
    destination, an event recorded or waited for during the capture the
    event; the caller may drop them all and replay."""
    s = cuda.Stream()
    n = 256
    x = rng.standard_normal(n)
    host_in = x.copy()
    host_out = np.zeros(n)
    a, b = cuda.mem_alloc(x.nbytes), cuda.mem_alloc(x.nbytes)
    c = cuda.mem_alloc(x.nbytes)
    ev = cuda.Event()
    refs = [weakref.ref(o) for o in (host_in, host_out, a, b, c)]
    ev_refs = sys.getrefcount(ev)  # an Event takes no weak reference
    s.begin_capture()
    cuda.memcpy_htod_async(a, host_in, s)
    cuda.memcpy_dtod_async(b, a, x.nbytes, s)
    cuda.memset_d8_async(c, 0x5A, x.nbytes, s)
    ev.record(s)
    s.wait_for_event(ev)
    cuda.memcpy_dtoh_async(host_out, b, stream=s)
    g = s.end_capture()
    out_ref = refs[1]
    del host_in, host_out, a, b, c
    gc.collect()
    assert all(r() is not None for r in refs), [r() is None for r in refs]
    assert sys.getrefcount(ev) == ev_refs + 2  # recorded and waited for
    exe = g.instantiate()
    del g
    gc.collect()
    exe.launch(s)
    s.synchronize()
    np.testing.assert_array_equal(out_ref(), x)  # replayed from the kept buffers
    del exe
    gc.collect()
    assert all(r() is None for r in refs)  # released with the graph
    assert sys.getrefcount(ev) == ev_refs


@pytest.mark.standin
def test_whole_graph_update(standin, mod, rng):
    f, o = mod.get_function("scale"), mod.get_function("other")
    d = cuda.mem_alloc(256)

    def build(a, extra=False, kind="kernel", fn=f):
        g = cuda.Graph()
        m = g.add_memset_node(d, 0, 64, element_size=4)
        if kind == "kernel":
            g.add_kernel_node(fn, d, np.float32(a), np.int32(64), block=(64, 1, 1), dependencies=m)
        else:
            g.add_empty_node(dependencies=m)
        if extra:
            g.add_empty_node()
        return g

    exe = build(1.5).instantiate()
    exe.launch()
    assert _replayed(standin)[0][1][8:12] == struct.pack("<f", 1.5)
    exe.update(build(-4.25))
    exe.launch()
    assert _replayed(standin)[0][1][8:12] == struct.pack("<f", -4.25)
    exe.update(build(7.0, fn=o))  # another kernel of the same context
    exe.launch()
    assert _replayed(standin)[0][0] == "other"
    with pytest.raises(
        cuda.LogicError,
        match=r"cuGraphExecUpdate failed: "
        r"CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE: .*update\(\): "
        r"the topology differs .* \(at node #2, empty\)",
    ):
        exe.update(build(1.0, extra=True))
    with pytest.raises(
        cuda.LogicError,
        match=r"update\(\): a node's type differs \(at node "
        r"#1, empty\)",
    ):
        exe.update(build(1.0, kind="empty"))
    with pytest.raises(TypeError, match=r"update\(\) takes a Graph, not int"):
        exe.update(3)
    exe.launch()  # still the last good parameters
    assert _replayed(standin)[0][0] == "other"


@pytest.mark.standin
def test_kernel_node_parameter_updates(standin, ctx, mod, rng):
    f, o, two = mod.get_function("scale"), mod.get_function("other"), mod.get_function("two")
    d, d2 = cuda.mem_alloc(256), cuda.mem_alloc(256)
    g = cuda.Graph()
    k = g.add_kernel_node(f, d, np.float32(2), np.int32(64), block=(64, 1, 1))
    e = g.add_empty_node(dependencies=k)
    exe = g.instantiate()
    exe.set_kernel_node_params(
        k, d2, np.float32(-1), np.int32(32), block=(32, 1, 1), grid=(3, 2, 1), shared=128
    )
    exe.launch()
    rec = standin.last_launch()
    assert rec.params == _layout([np.uint64(int(d2)), np.float32(-1), np.int32(32)])
    assert rec.block == (32, 1, 1) and rec.grid == (3, 2, 1) and rec.shared == 128
    # configuration kept when not given; a new kernel of the same context
    exe.set_kernel_node_params(k, d, np.float32(5), np.int32(64), function=o)
    exe.launch()
    rec = standin.last_launch()
    assert rec.name == "other" and rec.block == (32, 1, 1) and rec.grid == (3, 2, 1)
    with pytest.raises(
        TypeError,
        match=r"^graph node #0: kernel 'two' takes 2 arguments but "
        r"3 were given$",
    ):
        exe.set_kernel_node_params(k, d, np.float32(5), np.int32(64), function=two)
    with pytest.raises(
        TypeError,
        match=r"^graph node #0: kernel 'scale': parameter 2 \(4 "
        r"bytes\) cannot take a list",
    ):
        exe.set_kernel_node_params(k, d, 1.0, [1])
    with pytest.raises(TypeError, match=r"node #1 is a empty node, not a kernel node"):
        exe.set_kernel_node_params(e, d, 1.0, 1)
    other = cuda.Graph()
    on = other.add_kernel_node(f, d, 1.0, 1, block=(1, 1, 1))
    with pytest.raises(
        ValueError,
        match=r"node #0 is not a node of the graph this GraphExec "
        r"was instantiated from",
    ):
        exe.set_kernel_node_params(on, d, 1.0, 1)
    with pytest.raises(TypeError, match=r"function must be a Function, not str"):
        exe.set_kernel_node_params(k, d, 1.0, 1, function="scale")
    # a kernel of another context cannot take a node's place
    dev = cuda.Context.get_device()
    other_ctx = dev.make_context()
    try:
        m2 = SourceModule(KERNELS, no_extern_c=True)
        f2 = m2.get_function("scale")
    finally:
        cuda.Context.pop()
    with pytest.raises(
        ValueError,
        match=r"node #0: kernel 'scale' belongs to another "
        r"context than the graph",
    ):
        exe.set_kernel_node_params(k, d, 1.0, 1, function=f2)
    del f2, m2
    other_ctx.detach()
    # captured nodes: the function must be named
    s = cuda.Stream()
    s.begin_capture()
    f(d, np.float32(2), np.int32(64), block=(64, 1, 1), stream=s)
    cg = s.end_capture()
    cexe = cg.instantiate()
    (cnode,) = cg.nodes()
    with pytest.raises(TypeError, match=r"node #0 was captured; pass function="):
        cexe.set_kernel_node_params(cnode, d, 3.0, 64)
    cexe.set_kernel_node_params(cnode, d2, np.float32(3), np.int32(64), function=f)
    cexe.launch()
    assert standin.last_launch().params == _layout(
        [np.uint64(int(d2)), np.float32(3), np.int32(64)]
    )
    assert standin.last_launch().block == (64, 1, 1)
    # the driver refusing is explained, not a bare code
    standin.fail("cuGraphExecKernelNodeSetParams", 1, 1)
    with pytest.raises(
        cuda.LogicError,
        match=r"CUDA_ERROR_INVALID_VALUE: .*the driver refused "
        r"kernel 'other' for node #0 \(it launched "
        r"'scale'; the new kernel is not compatible",
    ):
        exe.set_kernel_node_params(k, d, 1.0, 1, function=o)


@pytest.mark.standin
def test_graph_exec_alone_keeps_everything_alive(standin, mod, rng):
    """Everything but the GraphExec is deleted; its replay touches only live
    memory (the stand-in counts a use of freed memory as stale, which the
    fixture fails on) and the callback still runs."""
    gc.collect()  # earlier tests' garbage (cycles holding memory) is not this test's
    base = standin.live()
    gbase = _live_graphs(standin)
    n = 128
    out = np.zeros(n, np.float32)
    calls = []

    def make():
        f = mod.get_function("scale")
        x = rng.standard_normal(n).astype(np.float32)
        d = cuda.mem_alloc(x.nbytes)
        g = cuda.Graph()
        a = g.add_memcpy_node(d, x)
        b = g.add_kernel_node(f, d, np.float32(2), np.int32(n), block=(128, 1, 1), dependencies=a)
        c = g.add_memcpy_node(out, d, dependencies=b)
        g.add_host_node(lambda: calls.append(len(calls)), dependencies=c)
        return g.instantiate(), x.copy()

    exe, x = make()
    del mod
    gc.collect()
    exe.launch()
    exe.synchronize()
    np.testing.assert_array_equal(out, x)
    assert calls == [0]
    assert _replayed(standin)[0][0] == "scale"
    assert standin.live()["device"] == base["device"] + 1
    del exe
    gc.collect()
    assert standin.live()["device"] == base["device"]
    assert _live_graphs(standin) == gbase


@pytest.mark.standin
def test_cycles_through_callbacks_are_collected(standin, ctx):
    base = _live_graphs(standin)
    g = cuda.Graph()
    g.add_host_node(lambda: g)  # callback -> graph -> callback
    exe = g.instantiate()
    body_holder = cuda.Graph()
    h = body_holder.conditional_handle(default=0)
    node = body_holder.add_conditional_node(h, "if")
    node.bodies[0].add_host_node(lambda: node)
    wg, wb = weakref.ref(g), weakref.ref(body_holder)
    del g, exe, body_holder, node
    gc.collect()
    assert wg() is None and wb() is None
    assert _live_graphs(standin) == base


@pytest.mark.standin
def test_conditional_nodes_on_the_standin(standin, ctx):
    lib = standin.lib
    lib.fakecuda_set_conditional.argtypes = [ctypes.c_ulonglong, ctypes.c_uint]
    g = cuda.Graph()
    h = g.conditional_handle(default=5)
    assert isinstance(h, int) and h != 0
    loop = g.add_conditional_node(h, "while")
    (body,) = loop.bodies
    assert body.parent is g and loop.kind == "conditional"
    runs, left = [], [5]

    def step():
        runs.append(1)
        left[0] -= 1
        lib.fakecuda_set_conditional(h, left[0])  # what a kernel would do

    body.add_host_node(step)
    hi = g.conditional_handle(default=0)
    branch = g.add_conditional_node(hi, "if", 2, dependencies=loop)
    taken = []
    branch.bodies[0].add_host_node(lambda: taken.append("then"))
    branch.bodies[1].add_host_node(lambda: taken.append("else"))
    hs = g.conditional_handle(default=2)
    sw = g.add_conditional_node(hs, cuda.graph_conditional_type.SWITCH, 3, dependencies=branch)
    for i, b in enumerate(sw.bodies):
        b.add_host_node(lambda i=i: taken.append("case%d" % i))
    exe = g.instantiate()
    exe.launch()
    assert len(runs) == 5 and taken == ["else", "case2"]
    left[0] = 5
    exe.launch()  # default values are assigned at each launch
    assert len(runs) == 10 and taken == ["else", "case2", "else", "case2"]
    with pytest.raises(ValueError, match=r"kind must be 'if', 'while' or 'switch', not 'for'"):
        g.add_conditional_node(h, "for")
    with pytest.raises(ValueError, match=r"size 2 is not valid for 'while'"):
        g.add_conditional_node(h, "while", 2)
    with pytest.raises(
        TypeError,
        match=r"handle must be the int from conditional_handle\(\), "
        r"not float",
    ):
        g.add_conditional_node(1.0, "if")
    with pytest.raises(ValueError, match=r"this graph is the body of a conditional node"):
        body.instantiate()


@pytest.mark.standin
def test_mem_alloc_free_child_and_event_nodes(standin, ctx, rng):
    base = standin.live()["device"]
    n = 32
    x = rng.standard_normal(n).astype(np.float32)
    out = np.zeros_like(x)
    ev = cuda.Event()
    child = cuda.Graph()
    g = cuda.Graph()
    alloc = g.add_mem_alloc_node(x.nbytes)
    assert alloc.kind == "mem_alloc" and alloc.dptr != 0 and alloc.bytesize == x.nbytes
    up = g.add_memcpy_node(alloc.dptr, x, x.nbytes, dependencies=alloc)
    child.add_memcpy_node(out, alloc.dptr, x.nbytes)
    ch = g.add_child_graph_node(child, dependencies=up)
    rec = g.add_event_record_node(ev, dependencies=ch)
    wait = g.add_event_wait_node(ev, dependencies=rec)
    g.add_mem_free_node(alloc, dependencies=wait)
    assert [k.kind for k in g.nodes()] == [
        "mem_alloc",
        "memcpy",
        "graph",
        "event_record",
        "wait_event",
        "mem_free",
    ]
    exe = g.instantiate()
    exe.upload()
    exe.launch()
    np.testing.assert_array_equal(out, x)
    assert ev.query()
    with pytest.raises(TypeError, match=r"node #1 is a memcpy node, not a mem_alloc node"):
        g.add_mem_free_node(up)
    with pytest.raises(ValueError, match=r"a graph cannot contain itself"):
        g.add_child_graph_node(g)
    with pytest.raises(TypeError, match=r"add_event_record_node\(\) takes an Event, not int"):
        g.add_event_record_node(1)
    with pytest.raises(ValueError, match=r"nbytes must be positive"):
        g.add_mem_alloc_node(0)
    del exe, g, alloc, up, ch, rec, wait
    gc.collect()
    assert standin.live()["device"] == base


def _run(code, **env):
    import subprocess
    import textwrap

    e = dict(os.environ)
    e.update(env)
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=e,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.standin
def test_driver_without_graphs_keeps_the_rest(standin):
    """A driver lacking a graph entry point loses graphs, with a clear
    error, and nothing else; one lacking conditional nodes, only those."""
    r = _run(
        """
    import numpy as np
    import pygpu.driver as cuda
    cuda.init()
    cuda.Device(0).retain_primary_context().push()
    d = cuda.to_device(np.arange(4, dtype=np.float32))
    print(cuda.from_device(d, 4, np.float32).sum())
    for make in (cuda.Graph, lambda: cuda.Stream().begin_capture()):
        try:
            make()
        except cuda.LogicError as e:
            print(type(e).__name__, e)
    """,
        FAKECUDA_HIDE="cuGraphExecUpdate",
    )
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == "6.0"
    want = (
        "LogicError CUDA graphs need the driver entry point cuGraphExecUpdate, which "
        "this driver does not provide (a CUDA 11.4 or newer driver has it)"
    )
    assert lines[1:] == [want, want]
    r = _run(
        """
    import pygpu.driver as cuda
    cuda.init()
    cuda.Device(0).retain_primary_context().push()
    g = cuda.Graph()
    g.add_empty_node()
    try:
        g.conditional_handle()
    except cuda.LogicError as e:
        print(e)
    """,
        FAKECUDA_HIDE="cuGraphConditionalHandleCreate",
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout == "conditional graph nodes need a CUDA 12.3 or newer driver\n"


def _scenarios(mod_src):
    rng = np.random.default_rng()

    def explicit():
        m = SourceModule(mod_src, no_extern_c=True)
        f = m.get_function("scale")
        x = rng.standard_normal(64).astype(np.float32)
        out = np.zeros_like(x)
        d = cuda.mem_alloc(x.nbytes)
        g = cuda.Graph()
        a = g.add_memcpy_node(d, x)
        b = g.add_kernel_node(f, d, np.float32(2), np.int32(64), block=(64, 1, 1), dependencies=a)
        c = g.add_memset_node(d, 0, 4, dependencies=b)
        e = g.add_memcpy_node(out, d, dependencies=c)
        g.add_host_node(lambda: None, dependencies=e)
        g.add_dependencies(a, e)
        al = g.add_mem_alloc_node(64)
        g.add_mem_free_node(al, dependencies=al)
        g.nodes()
        e.dependencies
        g.debug_dot(os.devnull)
        exe = g.instantiate()
        exe.upload()
        exe.launch()
        exe.synchronize()
        want = x.copy()
        want[0] = 0
        np.testing.assert_array_equal(out, want)
        return exe

    def capture():
        s = cuda.Stream()
        x = rng.standard_normal(64).astype(np.float32)
        out = np.zeros_like(x)
        d = cuda.mem_alloc(x.nbytes)
        s.begin_capture()
        try:
            cuda.memcpy_htod_async(d, x, s)
            cuda.memcpy_dtoh_async(out, d, s)
        finally:
            g = s.end_capture()
        s.is_capturing()
        exe = g.instantiate()
        exe.launch(s)
        np.testing.assert_array_equal(out, x)
        return exe

    def update():
        m = SourceModule(mod_src, no_extern_c=True)
        f = m.get_function("scale")
        d = cuda.mem_alloc(64)
        gs = []
        for a in (1.0, 2.0):
            g = cuda.Graph()
            gs.append((g, g.add_kernel_node(f, d, a, 16, block=(16, 1, 1))))
        exe = gs[0][0].instantiate()
        exe.update(gs[1][0])
        exe.set_kernel_node_params(gs[0][1], d, 3.0, 16)
        s = cuda.Stream()
        s.begin_capture()
        try:
            f(d, 1.0, 16, block=(16, 1, 1), stream=s)
        finally:
            cg = s.end_capture()
        ce = cg.instantiate()
        ce.set_kernel_node_params(cg.nodes()[0], d, 2.0, 16, function=f)
        ce.launch(s)
        return exe, ce

    def conditional():
        g = cuda.Graph()
        h = g.conditional_handle(default=0)
        node = g.add_conditional_node(h, "if")
        node.bodies[0].add_empty_node()
        e = cuda.Event()
        g.add_event_record_node(e, dependencies=node)
        g.add_child_graph_node(cuda.Graph(), dependencies=node)
        return g.instantiate()

    return {"explicit": explicit, "capture": capture, "update": update, "conditional": conditional}


GRAPH_RELEASES = {
    "cuGraphDestroy",
    "cuGraphExecDestroy",
    "cuEventDestroy",
    "cuStreamDestroy",
    "cuMemFree",
    "cuModuleUnload",
    "cuEventSynchronize",
    "cuCtxPushCurrent",
    "cuCtxPopCurrent",
    "cuCtxGetCurrent",
    # best effort around the calls that are unsafe during a capture
    # (a free relaxes this thread's capture mode, then restores it)
    "cuThreadExchangeStreamCaptureMode",
}


@pytest.mark.standin
@pytest.mark.parametrize("scenario", ["explicit", "capture", "update", "conditional"])
def test_failure_injection_at_every_call(standin, ctx, scenario):
    """Each driver call of the scenario fails once in turn: a cuda.Error with
    that code, no unraisable error, and no graph, exec, stream or allocation
    left behind."""
    op = _scenarios(KERNELS)[scenario]

    def run():
        r = op()
        del r
        gc.collect()

    def live():
        d = standin.live()
        d["graphs"], d["execs"] = _live_graphs(standin)
        return d

    run()
    base = live()
    _, trace = standin.trace(run)
    assert live() == base
    seen, sites = {}, []
    for name in trace:
        seen[name] = seen.get(name, 0) + 1
        sites.append((name, seen[name]))
    assert any(n.startswith("cuGraph") for n, _ in sites)
    unraisable, old = _unraisable()
    try:
        for name, k in sites:
            where = "%s: call %d of %s" % (scenario, k, name)
            stale = standin.stale()
            standin.fail(name, k, 999)
            err = None
            try:
                run()
            except cuda.Error as e:
                err = (e.code, e.routine, str(e))
            finally:
                standin.cancel()
                while cuda.Context.get_current() not in (None, ctx):
                    cuda.Context.pop()
                if cuda.Context.get_current() is None:
                    ctx.push()
            gc.collect()
            assert standin.fired(), where + ": the call did not happen"
            if err is None:
                assert name in GRAPH_RELEASES, where + ": the failure was lost"
            else:
                assert err[0] == 999 and err[2].startswith(err[1]), where + ": %r" % (err,)
            assert not unraisable, "%s: %r" % (where, unraisable[0].exc_value)
            assert standin.stale() == stale, where + ": a dead handle was used"
            now = live()
            leaked = {x: now[x] - base[x] for x in now if now[x] != base[x]}
            if name in GRAPH_RELEASES:
                # a failed release (or the push before it) loses that handle, as a
                # real driver would; a GraphExec's is two (the exec and its event), a
                # Graph's takes its mem_alloc nodes' memory with it
                assert (
                    sum(leaked.values()) <= 1
                    or leaked == {"execs": 1, "events": 1}
                    or leaked == {"graphs": 1, "device": 1}
                ), where + ": %s" % leaked
            else:
                assert not leaked, where + ": leaked %s" % leaked
            base = now
    finally:
        sys.unraisablehook = old


# ---------------------------------------------------------------- issue 25


@pytest.mark.standin
def test_free_of_memory_a_graph_holds_is_deferred(standin, mod, rng):
    """Defect 6: free() of an allocation that a kernel node, a memcpy node and
    a memset node use freed it at once, and the replay then used freed memory
    (on an H100: CUDA_ERROR_ILLEGAL_ADDRESS).  Now the free waits for the
    graph: the replay reads and writes live memory."""
    n = 256
    x = rng.standard_normal(n).astype(np.float32)
    out = np.zeros(n, np.float32)
    d = cuda.mem_alloc(x.nbytes)
    base = standin.live()["device"]
    g = cuda.Graph()
    up = g.add_memcpy_node(d, x)
    k = g.add_kernel_node(mod.get_function("scale"), d, 2.0, n, block=(256, 1, 1), dependencies=up)
    ms = g.add_memset_node(int(d) + 8, 0x3F800000, 2, element_size=4, dependencies=k)
    g.add_memcpy_node(out, d, dependencies=ms)
    exe = g.instantiate()
    d.free()
    assert d.freed
    for _ in range(2):
        exe.launch()
        want = x.copy()
        want[2:4] = 1.0
        np.testing.assert_array_equal(out, want)  # the stand-in runs no kernel
        x[:] = rng.standard_normal(n)
    assert standin.live()["device"] == base  # still there
    assert d.holders == (
        "graph node #0 (memcpy)",
        "graph node #1 (kernel 'scale')",
        "graph node #3 (memcpy)",
    )  # the int address of #2 holds nothing
    assert "waits for 3 holders" in repr(d)
    # no new use starts
    with pytest.raises(
        cuda.LogicError,
        match=r"^graph node #4: kernel 'scale': parameter 0 is "
        r"a freed DeviceAllocation$",
    ):
        g.add_kernel_node(mod.get_function("scale"), d, 2.0, n, block=(256, 1, 1))
    with pytest.raises(cuda.LogicError, match=r"the DeviceAllocation was freed"):
        cuda.memcpy_htod(d, x)
    with pytest.raises(
        cuda.LogicError,
        match=r"^graph node #1: kernel 'scale': parameter 0 is "
        r"a freed DeviceAllocation$",
    ):
        exe.set_kernel_node_params(k, d, 3.0, n)
    d.free()  # idempotent
    del exe, g, up, k, ms
    gc.collect()
    assert standin.live()["device"] == base - 1  # the last holder went: freed now
    assert d.holders == () and "freed" in repr(d)


@pytest.mark.standin
def test_set_kernel_node_params_holds_the_new_arguments(standin, mod, rng):
    n = 64
    a, b = cuda.mem_alloc(4 * n), cuda.mem_alloc(4 * n)
    g = cuda.Graph()
    k = g.add_kernel_node(mod.get_function("scale"), a, 2.0, n, block=(64, 1, 1))
    exe = g.instantiate()
    exe.set_kernel_node_params(k, b, 3.0, n)
    addr = int(b)
    base = standin.live()["device"]
    b.free()
    assert b.holders == ("graph node #0 (kernel 'scale')",)
    exe.launch()
    assert _replayed(standin) == [
        ("scale", _layout([np.uint64(addr), np.float32(3.0), np.int32(n)]))
    ]
    assert standin.live()["device"] == base
    del exe
    gc.collect()
    assert standin.live()["device"] == base - 1


@pytest.mark.standin
def test_captured_graph_holds_what_it_uses(standin, ctx, rng):
    """A captured copy's device memory is held: freed after the capture, it
    stays until the graph goes, and the replay reads it."""
    n = 128
    x = rng.standard_normal(n).astype(np.float32)
    out = np.zeros(n, np.float32)
    d = cuda.to_device(x)
    s = cuda.Stream()
    with graphs.capture_graph(s) as cap:
        cuda.memcpy_dtoh_async(out, d, s)
    exe = cap.graph.instantiate()
    gc.collect()
    base = standin.live()["device"]
    d.free()
    assert d.holders == ("a captured graph",)
    exe.launch(s)
    s.synchronize()
    np.testing.assert_array_equal(out, x)
    del exe, cap
    gc.collect()
    assert standin.live()["device"] == base - 1


@pytest.mark.standin
def test_first_async_allocation_inside_a_capture(standin, ctx, rng):
    """Defect 10: the first mem_alloc_async of a context set the default
    pool's release threshold, a call that is illegal while a stream captures
    in GLOBAL mode: the capture was invalidated (CUDA_ERROR_STREAM_CAPTURE_
    INVALIDATED on an H100).  The stand-in now rules such calls as the driver
    does.  A fresh context has not set its pool up yet."""
    n = 256
    out = np.zeros(n, np.uint32)
    other = cuda.Device(0).make_context()
    try:
        s = cuda.Stream()
        value = int(rng.integers(1, 2**31))
        with graphs.capture_graph(s) as cap:
            tmp = cuda.mem_alloc_async(4 * n, s)
            cuda.memset_d32_async(tmp, value, n, s)
            cuda.memcpy_dtoh_async(out, tmp, s)
            tmp.free()  # a free node, after the copy
        assert [x.kind for x in cap.graph.nodes()] == ["mem_alloc", "memset", "memcpy", "mem_free"]
        exe = cap.graph.instantiate()
        exe.launch(s)
        s.synchronize()
        assert (out == value).all()
        standin.lib.fakecuda_pool_release_threshold.restype = ctypes.c_ulonglong
        assert standin.lib.fakecuda_pool_release_threshold(0) == 2**64 - 1
        del exe, cap, tmp
    finally:
        cuda.Context.pop()
        other.detach()


@pytest.mark.standin
@pytest.mark.parametrize("mode", ["GLOBAL", "THREAD_LOCAL"])
def test_implicit_frees_and_allocations_never_invalidate_a_capture(standin, ctx, rng, mode):
    """cuMemAlloc and cuMemFree are unsafe while a stream captures; pygpu's
    own (mem_alloc, a dying DeviceAllocation) run relaxed, so they never
    invalidate the user's capture."""
    n = 64
    x = rng.standard_normal(n).astype(np.float32)
    out = np.zeros(n, np.float32)
    d = cuda.to_device(x)
    doomed = cuda.mem_alloc(256)
    s = cuda.Stream()
    with graphs.capture_graph(s, mode=getattr(cuda.capture_mode, mode)) as cap:
        scratch = cuda.mem_alloc(4 * n)  # made now, not captured
        del doomed  # a dying object frees its memory
        gc.collect()
        cuda.memcpy_dtoh_async(out, d, s)
        scratch.free()
    exe = cap.graph.instantiate()
    exe.launch(s)
    s.synchronize()
    np.testing.assert_array_equal(out, x)


@pytest.mark.standin
def test_another_threads_allocations_during_a_global_capture(standin, ctx, rng):
    """A GLOBAL capture forbids unsafe calls in every thread: pygpu's
    allocations and frees in another thread meanwhile run relaxed and leave
    the capture valid."""
    n = 64
    x = rng.standard_normal(n).astype(np.float32)
    out = np.zeros(n, np.float32)
    d = cuda.to_device(x)
    s = cuda.Stream()

    def other():
        ctx.push()
        try:
            for _ in range(3):
                cuda.mem_alloc(1024).free()
        finally:
            cuda.Context.pop()

    with graphs.capture_graph(s) as cap:
        t = _Thread(other)
        t.start()
        t.join()
        cuda.memcpy_dtoh_async(out, d, s)
    assert t.error is None, t.error
    cap.graph.instantiate().launch(s)
    s.synchronize()
    np.testing.assert_array_equal(out, x)


class _Thread(threading.Thread):
    def __init__(self, fn):
        super().__init__(daemon=True)
        self.fn, self.error = fn, None

    def run(self):
        try:
            self.fn()
        except BaseException as e:  # noqa: B036 - handed to the test
            self.error = e


@pytest.mark.standin
def test_the_standin_rules_unsafe_calls_during_capture(standin, ctx):
    """The stand-in invalidates a GLOBAL capture on a call the driver
    forbids during one (what made defect 10 visible without a GPU)."""
    lib = ctypes.CDLL(os.environ["PYGPU_LIBCUDA"])
    get = lib.cuGetProcAddress_v2
    get.argtypes = [
        ctypes.c_char_p,
        ctypes.POINTER(ctypes.c_void_p),
        ctypes.c_int,
        ctypes.c_uint64,
        ctypes.c_void_p,
    ]
    fn = ctypes.c_void_p()
    assert get(b"cuMemAlloc", ctypes.byref(fn), 3020, 0, None) == 0
    mem_alloc = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_uint64), ctypes.c_size_t)(
        fn.value
    )
    s = cuda.Stream()
    s.begin_capture()
    p = ctypes.c_uint64()
    assert mem_alloc(ctypes.byref(p), 64) == 900  # CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED
    with pytest.raises(cuda.LogicError, match="CUDA_ERROR_STREAM_CAPTURE_INVALIDATED"):
        s.end_capture()


_CYCLE = r"""
import ctypes, os, sys
import pygpu.driver as cuda
cuda.init()
ctx = cuda.Device(0).retain_primary_context()
ctx.push()
g = cuda.Graph()
h = g.conditional_handle(default=1)
body = g.add_conditional_node(h, "if").bodies[0]
lib = ctypes.CDLL(os.environ["PYGPU_LIBCUDA"])
get = lib.cuGetProcAddress_v2
get.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.c_void_p), ctypes.c_int,
                ctypes.c_uint64, ctypes.c_void_p]
fn = ctypes.c_void_p()
assert get(b"cuGraphAddChildGraphNode", ctypes.byref(fn), 10000, 0, None) == 0
add = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p,
                       ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p)(fn.value)
node = ctypes.c_void_p()
rc = add(ctypes.byref(node), body.handle, None, 0, g.handle)
print("rc", rc, flush=True)
if rc == 0:
    g.instantiate().launch()
print("survived", flush=True)
"""


@pytest.mark.standin
def test_graph_inside_its_own_conditional_body_is_refused(standin, ctx):
    """Defect 11: the stand-in shipped to users (pygpu.testing) took a graph
    as a child of its own conditional body and crashed in the replay (a
    null member access).  It now refuses the cycle as invalid, and pygpu
    refuses it before the driver with a clear error."""
    r = subprocess.run(
        [sys.executable, "-c", _CYCLE],
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ),
    )
    assert r.returncode == 0, (r.returncode, r.stderr[-2000:])
    assert r.stdout.split() == ["rc", "1", "survived"]  # CUDA_ERROR_INVALID_VALUE
    g = cuda.Graph()
    h = g.conditional_handle(default=1)
    body = g.add_conditional_node(h, "if").bodies[0]
    inner = body.add_conditional_node(body.conditional_handle(default=1), "while").bodies[0]
    for b in (body, inner):
        with pytest.raises(
            ValueError,
            match=r"^add_child_graph_node\(\): a graph cannot "
            r"contain itself: this graph is a conditional "
            r"body inside the child graph$",
        ):
            b.add_child_graph_node(g)
    with pytest.raises(
        ValueError,
        match=r"a graph cannot contain itself: this graph is a "
        r"conditional body inside the child graph$",
    ):
        inner.add_child_graph_node(body)
    assert len(body.nodes()) == 1 and len(inner.nodes()) == 0
    g.instantiate().launch()


# ---------------------------------------------------------------- GPU

N = 1 << 14


@pytest.fixture
def gmod(ctx):
    return SourceModule(KERNELS, no_extern_c=True)


@pytest.fixture
def cmod(ctx):
    return SourceModule(COND_KERNELS, no_extern_c=True)


@pytest.mark.gpu
def test_gpu_captured_and_explicit_equal_eager(gmod, rng):
    scale, axpy = gmod.get_function("scale"), gmod.get_function("axpy")
    x = rng.standard_normal(N).astype(np.float32)
    y = rng.standard_normal(N).astype(np.float32)
    a, b = np.float32(rng.uniform(0.5, 2)), np.float32(rng.uniform(-2, -0.5))
    want = (a * x + y) * b
    blk, grd = (256, 1, 1), (N // 256, 1)
    s = cuda.Stream()
    dx, dy = cuda.to_device(x), cuda.to_device(y)
    # eager
    axpy(dy, dx, a, np.int32(N), block=blk, grid=grd, stream=s)
    scale(dy, b, np.int32(N), block=blk, grid=grd, stream=s)
    eager = np.empty_like(y)
    cuda.memcpy_dtoh_async(eager, dy, s)
    s.synchronize()
    np.testing.assert_allclose(eager, want, rtol=1e-5, atol=1e-5)  # the GPU may fuse a*x+y
    # captured
    out = cuda.pagelocked_zeros(N, np.float32)
    hy = cuda.pagelocked_empty(N, np.float32)
    hy[:] = y
    with cuda.capture_graph(s) as cap:
        cuda.memcpy_htod_async(dy, hy, s)
        axpy(dy, dx, a, np.int32(N), block=blk, grid=grd, stream=s)
        scale(dy, b, np.int32(N), block=blk, grid=grd, stream=s)
        cuda.memcpy_dtoh_async(out, dy, s)
    s.synchronize()
    assert not out.any()
    exe = cap.graph.instantiate()
    for _ in range(3):
        out[:] = 0
        exe.launch(s)
        s.synchronize()
        np.testing.assert_array_equal(out, eager)
    # explicit (page-locked host buffers: copies the GPU can run asynchronously)
    out2 = cuda.pagelocked_zeros(N, np.float32)
    g = cuda.Graph()
    n1 = g.add_memcpy_node(dy, hy)
    n2 = g.add_kernel_node(axpy, dy, dx, a, np.int32(N), block=blk, grid=grd, dependencies=n1)
    n3 = g.add_kernel_node(scale, dy, b, np.int32(N), block=blk, grid=grd, dependencies=n2)
    g.add_memcpy_node(out2, dy, dependencies=n3)
    e2 = g.instantiate()
    e2.launch(s)
    s.synchronize()
    np.testing.assert_array_equal(out2, eager)


@pytest.mark.gpu
def test_gpu_capture_array_ops_and_async_alloc(gmod, rng):
    """gpuarray operations and stream-ordered allocations, captured."""
    from pygpu import gpuarray

    s = cuda.Stream()
    x = rng.standard_normal(N).astype(np.float32)
    y = rng.standard_normal(N).astype(np.float32)
    gx, gy = gpuarray.to_gpu(x), gpuarray.to_gpu(y)
    gz = gpuarray.empty_like(gx)
    scale = gmod.get_function("scale")
    out = cuda.pagelocked_zeros(N, np.float32)
    gx.mul_add(2.0, gy, 3.0, out=gz, stream=s)  # compile outside the capture
    s.synchronize()
    with cuda.capture_graph(s) as cap:
        gx.mul_add(2.0, gy, 3.0, out=gz, stream=s)
        tmp = cuda.mem_alloc_async(x.nbytes, s)
        cuda.memcpy_dtod_async(tmp, gz.gpudata, x.nbytes, s)
        scale(tmp, np.float32(0.5), np.int32(N), block=(256, 1, 1), grid=(N // 256, 1), stream=s)
        cuda.memcpy_dtoh_async(out, tmp, s)
        tmp.free()
    kinds = [n.kind for n in cap.graph.nodes()]
    assert "mem_alloc" in kinds and "mem_free" in kinds and kinds.count("kernel") == 2
    exe = cap.graph.instantiate()
    exe.launch(s)
    s.synchronize()
    np.testing.assert_allclose(out, (2 * x + 3 * y) * 0.5, rtol=1e-5, atol=1e-5)


@pytest.mark.gpu
def test_gpu_every_node_kind(gmod, rng):
    scale = gmod.get_function("scale")
    n = 4096
    x = cuda.pagelocked_empty(n, np.float32)
    x[:] = rng.standard_normal(n)
    out = cuda.pagelocked_zeros(n, np.float32)
    order = []
    ev = cuda.Event()
    s = cuda.Stream()
    g = cuda.Graph()
    alloc = g.add_mem_alloc_node(x.nbytes)
    up = g.add_memcpy_node(alloc.dptr, x, x.nbytes, dependencies=alloc)
    ms = g.add_memset_node(alloc.dptr, 0x40000000, 16, element_size=4, dependencies=up)  # 2.0
    child = cuda.Graph()
    child.add_kernel_node(
        scale, alloc.dptr, np.float32(3), np.int32(n), block=(256, 1, 1), grid=(n // 256, 1)
    )
    ch = g.add_child_graph_node(child, dependencies=ms)
    emp = g.add_empty_node(dependencies=ch)
    rec = g.add_event_record_node(ev, dependencies=emp)
    wt = g.add_event_wait_node(ev, dependencies=rec)
    down = g.add_memcpy_node(out, alloc.dptr, x.nbytes, dependencies=wt)
    host = g.add_host_node(lambda: order.append(out.copy()), dependencies=down)
    g.add_mem_free_node(alloc, dependencies=host)
    exe = g.instantiate()
    exe.upload(s)
    exe.launch(s)
    s.synchronize()
    want = x.copy()
    want[:16] = 2.0
    want *= 3
    np.testing.assert_array_equal(out, want)
    assert len(order) == 1
    np.testing.assert_array_equal(order[0], want)  # the callback ran after the copy
    assert ev.query()


@pytest.mark.gpu
def test_gpu_host_callback_ordering(gmod, rng):
    scale = gmod.get_function("scale")
    n = 1024
    x = rng.standard_normal(n).astype(np.float32)
    d = cuda.to_device(x)
    seen = []
    buf = cuda.pagelocked_zeros(n, np.float32)
    g = cuda.Graph()
    prev = None
    for k in range(4):
        kn = g.add_kernel_node(
            scale,
            d,
            np.float32(2),
            np.int32(n),
            block=(256, 1, 1),
            grid=(n // 256, 1),
            dependencies=prev,
        )
        cp = g.add_memcpy_node(buf, d, dependencies=kn)
        prev = g.add_host_node(lambda k=k: seen.append((k, buf.copy())), dependencies=cp)
    exe = g.instantiate()
    exe.launch()
    exe.synchronize()
    assert [k for k, _ in seen] == [0, 1, 2, 3]
    for k, got in seen:
        np.testing.assert_array_equal(got, x * np.float32(2) ** (k + 1))


@pytest.mark.gpu
def test_gpu_updates_change_arguments_and_configuration(gmod, rng):
    scale, other = gmod.get_function("scale"), gmod.get_function("other")
    n = 2048
    x = rng.standard_normal(n).astype(np.float32)
    d = cuda.to_device(x)
    d2 = cuda.to_device(x)
    g = cuda.Graph()
    k = g.add_kernel_node(
        scale, d, np.float32(2), np.int32(n // 2), block=(128, 1, 1), grid=(n // 256, 1)
    )
    exe = g.instantiate()
    exe.launch()
    exe.synchronize()
    want = x.copy()
    want[: n // 2] *= 2
    np.testing.assert_array_equal(cuda.from_device_like(d, x), want)
    # new arguments and a grid covering everything
    exe.set_kernel_node_params(
        k, d2, np.float32(-3), np.int32(n), block=(256, 1, 1), grid=(n // 256, 1)
    )
    exe.launch()
    exe.synchronize()
    np.testing.assert_array_equal(cuda.from_device_like(d2, x), x * np.float32(-3))
    # another kernel
    exe.set_kernel_node_params(k, d2, np.float32(1.5), np.int32(n), function=other)
    exe.launch()
    exe.synchronize()
    np.testing.assert_array_equal(cuda.from_device_like(d2, x), x * np.float32(-3) + 1.5)
    # whole-graph update
    g2 = cuda.Graph()
    g2.add_kernel_node(scale, d, np.float32(0.25), np.int32(n), block=(64, 1, 1), grid=(n // 64, 1))
    exe.update(g2)
    exe.launch()
    exe.synchronize()
    np.testing.assert_array_equal(cuda.from_device_like(d, x), want * np.float32(0.25))
    g3 = cuda.Graph()
    g3.add_empty_node()
    g3.add_empty_node()
    with pytest.raises(cuda.LogicError, match=r"update\(\): "):
        exe.update(g3)


@pytest.mark.gpu
def test_gpu_conditional_while_runs_data_dependent_times(cmod, rng):
    step, add = cmod.get_function("step"), cmod.get_function("add_const")
    n = 512
    x = rng.standard_normal(n).astype(np.float32)
    for iters in rng.integers(1, 20, size=3):
        d = cuda.to_device(x)
        counter = cuda.to_device(np.array([iters], np.int32))
        g = cuda.Graph()
        h = g.conditional_handle(default=1)
        loop = g.add_conditional_node(h, "while")
        (body,) = loop.bodies
        a = body.add_kernel_node(
            add, d, np.float32(1), np.int32(n), block=(256, 1, 1), grid=(n // 256, 1)
        )
        body.add_kernel_node(step, h, counter, block=(1, 1, 1), dependencies=a)
        exe = g.instantiate()
        exe.launch()
        exe.synchronize()
        want = x.copy()
        for _ in range(iters):  # float32 additions, one a loop iteration
            want += np.float32(1)
        np.testing.assert_array_equal(cuda.from_device_like(d, x), want)
        assert cuda.from_device(counter, 1, np.int32)[0] == 0


@pytest.mark.gpu
def test_gpu_conditional_if_else_and_switch(cmod, rng):
    set_from, add = cmod.get_function("set_from"), cmod.get_function("add_const")
    n = 256
    x = rng.standard_normal(n).astype(np.float32)
    for value in (0, 1, 2, 3):
        d = cuda.to_device(x)
        v = cuda.to_device(np.array([value], np.int32))
        g = cuda.Graph()
        hi = g.conditional_handle()
        hs = g.conditional_handle()
        s1 = g.add_kernel_node(set_from, hi, v, block=(1, 1, 1))
        s2 = g.add_kernel_node(set_from, hs, v, block=(1, 1, 1), dependencies=s1)
        ifn = g.add_conditional_node(hi, "if", 2, dependencies=s2)
        ifn.bodies[0].add_kernel_node(add, d, np.float32(100), np.int32(n), block=(256, 1, 1))
        ifn.bodies[1].add_kernel_node(add, d, np.float32(-100), np.int32(n), block=(256, 1, 1))
        sw = g.add_conditional_node(hs, "switch", 3, dependencies=ifn)
        for i, b in enumerate(sw.bodies):
            b.add_kernel_node(add, d, np.float32(i + 1), np.int32(n), block=(256, 1, 1))
        exe = g.instantiate()
        exe.launch()
        exe.synchronize()
        want = x + np.float32(100 if value else -100)
        if value < 3:
            want = want + np.float32(value + 1)
        np.testing.assert_array_equal(cuda.from_device_like(d, x), want)


@pytest.mark.gpu
def test_gpu_captured_copies_replay_after_the_caller_dropped_them(gmod, rng):
    """The same on a GPU: the host buffers of captured copies are dropped by
    the caller (and their memory would be reused), the replay still reads
    and writes them."""
    f = gmod.get_function("scale")
    s = cuda.Stream()
    n = 4096
    x = rng.standard_normal(n).astype(np.float32)
    host_in = cuda.pagelocked_empty(n, np.float32)
    host_in[:] = x
    host_out = cuda.pagelocked_zeros(n, np.float32)
    d = cuda.mem_alloc(x.nbytes)
    out_ref = weakref.ref(host_out)
    with cuda.capture_graph(s) as cap:
        cuda.memcpy_htod_async(d, host_in, s)
        f(d, np.float32(3), np.int32(n), block=(256, 1, 1), grid=(n // 256, 1), stream=s)
        cuda.memcpy_dtoh_async(host_out, d, stream=s)
    exe = cap.graph.instantiate()
    del host_in, host_out, d, cap
    gc.collect()
    junk = [np.full(n, 7, np.float32) for _ in range(64)]  # reuse freed memory, if any
    exe.launch(s)
    s.synchronize()
    np.testing.assert_array_equal(out_ref(), 3 * x)
    del junk


@pytest.mark.gpu
def test_gpu_graph_replays_after_its_allocations_are_freed(gmod, rng):
    """Issue 25, defect 6 on a GPU: free the allocation that a kernel node and
    two memcpy nodes use, then launch: the replay uses live memory (it used
    to die with CUDA_ERROR_ILLEGAL_ADDRESS)."""
    axpy = gmod.get_function("axpy")
    x = cuda.pagelocked_empty(N, np.float32)
    y = cuda.pagelocked_empty(N, np.float32)
    out = cuda.pagelocked_zeros(N, np.float32)
    dx, dy = cuda.mem_alloc(x.nbytes), cuda.mem_alloc(x.nbytes)
    g = cuda.Graph()
    ux = g.add_memcpy_node(dx, x)
    uy = g.add_memcpy_node(dy, y)
    k = g.add_kernel_node(
        axpy,
        dy,
        dx,
        np.float32(2.0),
        np.int32(N),
        block=(256, 1, 1),
        grid=(N // 256, 1, 1),
        dependencies=[ux, uy],
    )
    g.add_memcpy_node(out, dy, dependencies=k)
    exe = g.instantiate()
    dx.free()
    dy.free()
    assert dx.freed and len(dy.holders) == 3
    s = cuda.Stream()
    for _ in range(3):
        x[:] = rng.standard_normal(N)
        y[:] = rng.standard_normal(N)
        exe.launch(s)
        s.synchronize()
        np.testing.assert_allclose(out, 2 * x + y, rtol=1e-6, atol=1e-6)
    del exe, g, ux, uy, k
    gc.collect()
    assert dx.holders == () and dy.holders == ()


@pytest.mark.gpu
def test_gpu_capture_async_alloc_kernel_and_free_in_a_fresh_context(rng):
    """Issue 25, defect 10 on a GPU: in a context whose memory pool was never
    used, the first mem_alloc_async inside capture_graph() invalidated the
    capture.  Captured: an allocation, a copy up, a kernel, a copy down and
    the free; replayed on fresh random data."""
    cuda.Device(0).make_context()
    try:
        scale = SourceModule(KERNELS, no_extern_c=True).get_function("scale")
        s = cuda.Stream()
        x = cuda.pagelocked_empty(N, np.float32)
        out = cuda.pagelocked_zeros(N, np.float32)
        with graphs.capture_graph(s) as cap:
            tmp = cuda.mem_alloc_async(x.nbytes, s)
            cuda.memcpy_htod_async(tmp, x, s)
            scale(
                tmp, np.float32(0.5), np.int32(N), block=(256, 1, 1), grid=(N // 256, 1), stream=s
            )
            cuda.memcpy_dtoh_async(out, tmp, s)
            tmp.free()
            junk = cuda.mem_alloc(256)  # allocated now, relaxed: not part of the graph
            del junk
        kinds = [n.kind for n in cap.graph.nodes()]
        assert kinds.count("mem_alloc") == 1 and kinds.count("mem_free") == 1
        exe = cap.graph.instantiate()
        for _ in range(3):
            x[:] = rng.standard_normal(N)
            exe.launch(s)
            s.synchronize()
            np.testing.assert_array_equal(out, x * np.float32(0.5))
        del exe, cap
    finally:
        # popped, not detached: the pinned arrays keep the context until they go
        cuda.Context.pop()
