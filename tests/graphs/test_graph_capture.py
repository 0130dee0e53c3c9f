"""CUDA graphs: stream capture on the driver stand-in.  Capture records a
stream's work instead of running it; misuse during a capture (blocking
calls, synchronizing, the legacy stream) is refused before the driver and
the capture goes on; a captured graph keeps its launch arguments and its
copies' and memsets' operands alive.
"""

import ctypes
import gc
import os
import sys
import weakref

import numpy as np
import pytest

import pygpu.driver as cuda

from graph_shared import layout as _layout, live_graphs as _live_graphs, replayed as _replayed
from threaded import Thread as _Thread


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


@pytest.mark.standin
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
