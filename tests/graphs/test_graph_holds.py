"""CUDA graphs and the memory they use (issue 25), on the driver stand-in:
free() of memory a graph node or a captured graph holds waits for the
graph; allocations and frees, pygpu's own and other threads', never
invalidate a capture; the stand-in rules the calls unsafe during a
capture as the driver does.
"""

import ctypes
import gc
import os

import numpy as np
import pytest

import pygpu.driver as cuda
from pygpu import graphs

from graph_shared import layout as _layout, replayed as _replayed
from threaded import Thread as _Thread


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
