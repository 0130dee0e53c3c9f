"""CUDA graphs: explicit building, queries, host callbacks, instantiation,
updates, lifetimes, conditional and other node kinds.

`standin`-marked tests run against the driver stand-in (make test's second
pass): it keeps graphs as host-side node lists, capture records a stream's
work as nodes, and a GraphExec's launch replays them (copies and memsets
move bytes, kernel nodes are recorded with their parameter bytes, host
callbacks run).  Stream capture is in test_graph_capture.py, a driver
without graphs and the failure injection in test_graph_faults.py, memory
that graphs hold in test_graph_holds.py, the GPU tests in test_graphs_gpu.py.
"""

import ctypes
import gc
import os
import struct
import subprocess
import sys
import weakref

import numpy as np
import pytest

import pygpu.driver as cuda
from pygpu import compiler, graphs
from pygpu.compiler import SourceModule

from graph_shared import (
    COND_KERNELS,
    KERNELS,
    layout as _layout,
    live_graphs as _live_graphs,
    replayed as _replayed,
    unraisable as _unraisable,
)


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
