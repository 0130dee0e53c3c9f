"""CUDA graphs on a GPU: captured and explicit graphs, every node kind,
host callbacks, updates and conditional nodes, checked against eager runs
and NumPy; replays after the caller dropped or freed what the graph uses
(issue 25).  `gpu`-marked: skipped without a GPU.
"""

import gc
import weakref

import numpy as np
import pytest

import pygpu.driver as cuda
from pygpu import graphs
from pygpu.compiler import SourceModule

from graph_shared import COND_KERNELS, KERNELS


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
