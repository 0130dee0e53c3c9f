"""Issue 13, the driver layer outside the launch path: what hostile,
concurrent and edge-case use did to allocations, contexts, streams, events,
modules and host memory, each a test that failed before its fix.

Most run against the driver stand-in (make test's second pass), which counts
every use of a dead handle (the `standin` fixture fails a test that made
one) and can make a driver call slow (StandIn.delay) so that a race between
threads happens the same way every time; `make sanitize` runs them under
AddressSanitizer, where the old behaviour was a use after free."""

import ctypes
import gc
import inspect
import os
import subprocess
import sys
import textwrap
import threading
import time
import weakref

import numpy as np
import pytest

import pygpu.driver as cuda
from pygpu import compiler

from threaded import Thread as _Thread, run_in_threads

KERNELS = r"""
extern "C" __global__ void k(float *x, int n) { }
__device__ float table[4];
"""


@pytest.fixture(scope="module")
def ptx():
    return bytes(compiler.compile(KERNELS, target="ptx", arch="compute_90"))


def _wait_for_call(standin, name, before, timeout=10.0):
    """Until the stand-in has seen one more call of `name` than `before`."""
    end = time.monotonic() + timeout
    while standin.calls(name) <= before:
        assert time.monotonic() < end, "%s never started" % name
        time.sleep(0.002)


# ---- 1: Memcpy2D's bounds check ----


@pytest.mark.standin
def test_memcpy2d_extent_that_overflows_is_refused(standin, ctx):
    before = standin.calls("cuMemcpy2D")  # (counted since the process began)
    host = np.zeros(16, np.uint8)
    dev = cuda.mem_alloc(16)
    c = cuda.Memcpy2D()
    c.set_src_host(host)
    c.set_dst_device(dev)
    c.width_in_bytes, c.height = 16, 2**31 + 1
    c.src_pitch = c.dst_pitch = 2**33  # 2**33 * 2**31 wraps to 0
    with pytest.raises(
        ValueError,
        match="source's 2147483649 rows of pitch 8589934592 from row 0 reach past the end",
    ):
        c()
    c.src_pitch, c.dst_pitch = 16, 2**33
    c.height = 1
    c()  # one row: fits, and is copied
    c.height = 2**31 + 1
    with pytest.raises(ValueError, match="destination's 2147483649 rows .* reach past"):
        c()
    # width + offset past the largest Py_ssize_t
    c.height, c.width_in_bytes, c.src_x_in_bytes = 1, 2**62, 2**62
    c.src_pitch = c.dst_pitch = 2**63 - 1
    with pytest.raises(ValueError, match="each row must fit within its pitch"):
        c()
    assert standin.calls("cuMemcpy2D") == before + 1


# ---- 3: an allocation of a detached context ----


@pytest.mark.standin
def test_allocation_of_a_detached_context_is_a_logic_error(standin, ctx, rng):
    gc.collect()  # earlier tests' garbage is not this test's to count
    live = standin.live()["device"]
    other = cuda.Device(0).make_context()
    d = cuda.mem_alloc(64)
    e = cuda.mem_alloc(64)
    e.free()
    reaped = standin.reaped()
    other.detach()
    # pygpu gave the memory back itself, before the context went
    assert standin.live()["device"] == live and standin.reaped() == reaped
    assert d.freed and e.freed
    x = rng.standard_normal(16)
    out = np.empty(8)
    calls = standin.calls()
    for call in (
        lambda: cuda.memcpy_htod(d, x),
        lambda: cuda.memcpy_dtoh(out, d),
        lambda: cuda.memcpy_dtod(d, d, 8),
        lambda: cuda.memset_d8(d, 0, 8),
        lambda: cuda.memcpy_htod_async(d, x),
    ):
        with pytest.raises(cuda.LogicError, match="DeviceAllocation's context was detached"):
            call()
    with pytest.raises(cuda.LogicError, match="DeviceAllocation's context was detached"):
        int(d)
    with pytest.raises(cuda.LogicError, match="DeviceAllocation's context was detached"):
        d.__cuda_array_interface__
    with pytest.raises(cuda.LogicError, match="DeviceAllocation was freed"):
        int(e)  # freed by the user before: that is what it says
    assert standin.calls() == calls  # not one driver call
    d.free()
    del d, e
    gc.collect()
    assert standin.live()["device"] == live


# ---- 7: free() while another thread copies ----


@pytest.mark.standin
@pytest.mark.parametrize("direction", ["htod", "dtoh", "dtod"])
def test_free_during_a_copy_waits_for_the_copy(standin, ctx, rng, direction):
    n = 4096
    x = rng.standard_normal(n)
    d = cuda.mem_alloc(x.nbytes)
    src = cuda.mem_alloc(x.nbytes)
    cuda.memcpy_htod(src, x)
    out = np.empty_like(x)
    routine, copy = {
        "htod": ("cuMemcpyHtoD", lambda: cuda.memcpy_htod(d, x)),
        "dtoh": ("cuMemcpyDtoH", lambda: cuda.memcpy_dtoh(out, d)),
        "dtod": ("cuMemcpyDtoD", lambda: cuda.memcpy_dtod(d, src, x.nbytes)),
    }[direction]
    if direction == "dtoh":
        cuda.memcpy_htod(d, x)
    live = standin.live()["device"]
    before = standin.calls(routine)
    standin.delay(routine, 300)
    t = _Thread(copy)
    t.start()
    _wait_for_call(standin, routine, before)
    d.free()  # returns at once ...
    during = standin.live()["device"]
    t.join()  # (before any assert: under ASan the old
    standin.delay(routine, 0)  # code's copy wrote to freed memory here)
    assert d.freed
    with pytest.raises(cuda.LogicError, match="was freed"):
        cuda.memset_d8(d, 0, 1)  # ... no new use starts ...
    assert during == live  # ... but the memory outlived the copy
    assert t.error is None, t.error
    assert standin.live()["device"] == live - 1
    if direction == "dtoh":
        np.testing.assert_array_equal(out, x)
    d.free()  # still idempotent


@pytest.mark.standin
def test_detach_waits_for_no_copy_but_refuses(standin, ctx, rng):
    other = cuda.Device(0).make_context()
    d = cuda.mem_alloc(4096)
    cuda.Context.pop()
    x = rng.standard_normal(512)
    before = standin.calls("cuMemcpyHtoD")
    standin.delay("cuMemcpyHtoD", 300)

    def copy():
        other.push()
        try:
            cuda.memcpy_htod(d, x)
        finally:
            cuda.Context.pop()

    t = _Thread(copy)
    t.start()
    _wait_for_call(standin, "cuMemcpyHtoD", before)
    with pytest.raises(
        cuda.LogicError,
        match="detach\\(\\): a copy into memory of this context is running in another thread",
    ):
        other.detach()
    assert not other.detached and not d.freed
    t.join()
    assert t.error is None, t.error
    other.detach()
    assert d.freed


class _FreesOnRead:
    """A device pointer whose __cuda_array_interface__ frees another
    allocation: Python code that runs while a copy reads its arguments."""

    def __init__(self, target, ptr, n):
        self.target, self.ptr, self.n = target, ptr, n

    @property
    def __cuda_array_interface__(self):
        self.target.free()
        return {
            "shape": (self.n,),
            "typestr": "|u1",
            "data": (self.ptr, False),
            "version": 3,
            "strides": None,
        }


@pytest.mark.standin
def test_allocation_freed_by_a_later_argument_is_refused(standin, ctx):
    d = cuda.mem_alloc(64)
    src = cuda.mem_alloc(64)
    calls = standin.calls("cuMemcpyDtoD")
    with pytest.raises(cuda.LogicError, match="the DeviceAllocation was freed"):
        cuda.memcpy_dtod(d, _FreesOnRead(d, int(src), 64), 64)
    assert standin.calls("cuMemcpyDtoD") == calls

    class Count:
        def __init__(self, target):
            self.target = target

        def __index__(self):
            self.target.free()
            return 8

    e = cuda.mem_alloc(64)
    with pytest.raises(cuda.LogicError, match="the DeviceAllocation was freed"):
        cuda.memset_d8(e, 1, Count(e))


# ---- 4: borrowed current context across the GIL release and the JIT handler ----


@pytest.mark.standin
def test_pagelocked_empty_while_another_thread_detaches(standin, ctx):
    before = standin.calls("cuMemHostAlloc")
    standin.delay("cuMemHostAlloc", 300)

    def alloc():
        # only the module state holds the Context: the detach below drops it
        cuda.Device(1).retain_primary_context().push()
        return cuda.pagelocked_empty(1000, np.float32)

    t = _Thread(alloc)
    t.start()
    _wait_for_call(standin, "cuMemHostAlloc", before)
    cuda.Device(1).retain_primary_context().detach()
    gc.collect()
    t.join()
    standin.delay("cuMemHostAlloc", 0)
    assert t.result is None
    assert isinstance(t.error, cuda.LogicError), t.error
    assert "pagelocked_empty(): the context was detached by another thread" in str(t.error)


@pytest.mark.standin
def test_message_handler_that_detaches_the_context(standin, ctx, ptx):
    cuda.Device(1).retain_primary_context().push()  # held by the module state only
    seen = []

    def handler(ok, info, err):
        seen.append(ok)
        cuda.Context.get_current().detach()
        gc.collect()

    with pytest.raises(
        cuda.LogicError,
        match="module_from_buffer\\(\\): the context was detached while the module loaded",
    ):
        cuda.module_from_buffer(ptx, message_handler=handler)
    assert seen == [True]
    # the dead primary context was popped: the fixture's is current again
    assert cuda.Context.get_current() == ctx


# ---- 5: a buffer format that hides an object field ----


class _Hidden(ctypes.Structure):
    # exported as 'T{<d:a:b:<O:c:}': the ':' in the first name hid the 'O'
    _fields_ = [("a:b", ctypes.c_double), ("c", ctypes.py_object)]


class _Plain(ctypes.Structure):
    _fields_ = [("Obs", ctypes.c_double), ("x", ctypes.c_double)]


def test_object_field_behind_a_colon_in_a_field_name_is_refused():
    hidden = (_Hidden * 4)()
    sentinel = object()
    for i in range(4):
        hidden[i].c = sentinel
    assert ":<O:" in memoryview(hidden).format
    for call in (
        lambda: cuda.memcpy_dtoh(hidden, 0x10000),
        lambda: cuda.memcpy_htod(0x10000, hidden),
        lambda: cuda.memcpy_dtoh(memoryview(hidden), 0x10000),
    ):
        with pytest.raises(
            TypeError,
            match="the host buffer holds Python objects \\(format 'T\\{<d:a:b:<O:c:\\}'\\)",
        ):
            call()
    assert all(h.c is sentinel for h in hidden)


@pytest.mark.standin
def test_object_free_structures_still_copy(standin, ctx, rng):
    vals = rng.standard_normal(8)
    plain = (_Plain * 4)()
    d = cuda.mem_alloc(64)
    cuda.memcpy_htod(d, vals)
    cuda.memcpy_dtoh(plain, d)  # 'T{<d:Obs:<d:x:}': an 'O' in a name only
    np.testing.assert_array_equal([v for p in plain for v in (p.Obs, p.x)], vals)
    rec = np.zeros(4, np.dtype([("Obs", "f8"), ("x", "f8")]))
    cuda.memcpy_dtoh(memoryview(rec), d)
    np.testing.assert_array_equal(rec.view(np.float64), vals)
    objs = np.array([object()] * 8)
    with pytest.raises(TypeError, match="holds Python objects"):
        cuda.memcpy_dtoh(memoryview(objs), d)


# ---- 6: jit options that are pygpu's own buffers ----


@pytest.mark.parametrize(
    "name",
    [
        "ERROR_LOG_BUFFER",
        "INFO_LOG_BUFFER",
        "ERROR_LOG_BUFFER_SIZE_BYTES",
        "INFO_LOG_BUFFER_SIZE_BYTES",
    ],
)
def test_jit_log_buffer_options_are_refused(name):
    opt = getattr(cuda.jit_option, name)
    with pytest.raises(
        ValueError, match="jit_option.%s belongs to pygpu, which passes its own log buffers" % name
    ):
        cuda.module_from_buffer(b".version 8.0\n", options=[(opt, 0x10)])


def test_jit_pointer_and_unknown_options_are_refused():
    with pytest.raises(
        ValueError, match="jit_option.GLOBAL_SYMBOL_NAMES describes a C array of pointers"
    ):
        cuda.module_from_buffer(
            b".version 8.0\n", options=[(cuda.jit_option.GLOBAL_SYMBOL_NAMES, 0x10)]
        )
    with pytest.raises(ValueError, match="12345 is not a jit_option pygpu knows"):
        cuda.module_from_buffer(b".version 8.0\n", options=[(12345, 1)])


@pytest.mark.standin
def test_jit_scalar_options_still_load(standin, ctx, ptx):
    m = cuda.module_from_buffer(
        ptx, options=[(cuda.jit_option.MAX_REGISTERS, 32), (cuda.jit_option.OPTIMIZATION_LEVEL, 3)]
    )
    assert m.get_function("k") is not None


# ---- 11: register_host_memory lets go of its source ----


@pytest.mark.standin
def test_register_host_memory_releases_the_source(standin, ctx):
    empty = np.zeros(0)
    ref = weakref.ref(empty)
    view = cuda.register_host_memory(empty)
    del empty, view
    gc.collect()
    assert ref() is None, "a 0-byte registration kept its array alive"

    a = np.ones(1000)
    ref = weakref.ref(a)
    standin.fail("cuMemHostRegister", 1, 999)
    with pytest.raises(cuda.RuntimeError, match="cuMemHostRegister failed"):
        cuda.register_host_memory(a)
    del a
    gc.collect()
    assert ref() is None, "a failed registration kept its array alive"


# ---- 14: the stream argument of the blocking copies ----


@pytest.mark.standin
def test_blocking_copies_honour_their_stream(standin, ctx, rng):
    x = rng.standard_normal(256)
    s = cuda.Stream()
    d, d2 = cuda.mem_alloc(x.nbytes), cuda.mem_alloc(x.nbytes)
    out = np.empty_like(x)
    _, trace = standin.trace(lambda: cuda.memcpy_htod(d, x, stream=s))
    assert trace[-2:] == ["cuMemcpyHtoDAsync", "cuStreamSynchronize"], trace
    _, trace = standin.trace(lambda: cuda.memcpy_dtod(d2, d, x.nbytes, stream=s))
    assert trace[-2:] == ["cuMemcpyDtoDAsync", "cuStreamSynchronize"], trace
    _, trace = standin.trace(lambda: cuda.memcpy_dtoh(out, d2, stream=s))
    assert trace[-2:] == ["cuMemcpyDtoHAsync", "cuStreamSynchronize"], trace
    np.testing.assert_array_equal(out, x)
    _, trace = standin.trace(lambda: cuda.memcpy_peer(d, d2, x.nbytes, ctx, ctx, stream=s))
    assert trace[-2:] == ["cuMemcpyPeerAsync", "cuStreamSynchronize"], trace
    # a stream of another context is refused by the driver, so it was passed
    other = cuda.Device(0).make_context()
    foreign = cuda.Stream()
    cuda.Context.pop()
    with pytest.raises(
        cuda.LogicError, match="cuMemcpyHtoDAsync failed: CUDA_ERROR_INVALID_HANDLE"
    ):
        cuda.memcpy_htod(d, x, stream=foreign)
    del foreign
    other.detach()


def test_blocking_copies_list_their_stream():
    for name in ("memcpy_htod", "memcpy_dtoh", "memcpy_dtod", "memcpy_peer"):
        params = inspect.signature(getattr(cuda, name)).parameters
        assert "stream" in params and params["stream"].default is None, name


# ---- 15: integers that were truncated ----


@pytest.mark.standin
def test_integer_arguments_are_never_truncated(standin, ctx):
    dev = cuda.Device(0)
    cases = [
        (lambda: cuda.Context.get_limit(2**32), "get_limit\\(\\): limit=4294967296"),
        (lambda: cuda.Context.set_limit(2**32, 1), "set_limit\\(\\): limit=4294967296"),
        (lambda: cuda.Context.set_cache_config(2**32), "set_cache_config\\(\\): config="),
        (lambda: dev.get_attribute(2**32 + 1), "get_attribute\\(\\): attr=4294967297"),
        (lambda: cuda.Stream(flags=2**64), "Stream\\(\\): flags=18446744073709551616"),
        (lambda: cuda.Stream(priority=2**32), "Stream\\(\\): priority="),
        (lambda: cuda.Event(flags=2**64), "Event\\(\\): flags="),
        (lambda: dev.make_context(flags=2**64), "make_context\\(\\): flags="),
        (lambda: cuda.mem_alloc_managed(16, flags=2**64), "mem_alloc_managed\\(\\): flags="),
        (
            lambda: cuda.register_host_memory(np.ones(4), flags=2**64),
            "register_host_memory\\(\\): flags=",
        ),
        (lambda: cuda.pagelocked_empty(4, mem_flags=2**64), "pagelocked_empty\\(\\): mem_flags="),
        (lambda: cuda.managed_empty(4, mem_flags=2**64), "managed_empty\\(\\): mem_flags="),
        (
            lambda: cuda.mem_alloc_pitch(16, 4, 2**32 + 4),
            "mem_alloc_pitch\\(\\): access_size=4294967300 is out of range",
        ),
        (lambda: ctx.enable_peer_access(ctx, flags=-1), "enable_peer_access\\(\\): flags=-1"),
    ]
    live = standin.live()
    for call, message in cases:
        with pytest.raises(OverflowError, match=message):
            call()
    assert standin.live() == live
    with pytest.raises(TypeError, match="get_limit\\(\\): limit must be an int, not float"):
        cuda.Context.get_limit(1.0)
    # in range, the values still arrive
    assert cuda.Context.get_limit(cuda.limit.STACK_SIZE) == 1024
    assert dev.get_attribute(cuda.device_attribute.MAX_THREADS_PER_BLOCK) > 0


@pytest.mark.standin
def test_symbol_names_with_nul_are_refused(standin, ctx, ptx):
    m = cuda.module_from_buffer(ptx)
    with pytest.raises(
        ValueError, match="get_function\\(\\): the name 'k\\\\x00x' contains a NUL character"
    ):
        m.get_function("k\0x")
    with pytest.raises(ValueError, match="get_global\\(\\): the name 'table\\\\x00' contains"):
        m.get_global("table\0")
    assert m.get_function("k") is not None


# ---- 16: mem_alloc_managed when the Python object cannot be made ----


@pytest.mark.standin
def test_allocations_are_given_back_when_the_object_cannot_be_made(standin, ctx):
    _testcapi = pytest.importorskip("_testcapi")
    for fn, kind in (
        (lambda: cuda.mem_alloc_managed(4096), "managed"),
        (lambda: cuda.mem_alloc(4096), "device"),
        (lambda: cuda.mem_alloc_pitch(64, 4, 4), "device"),
    ):
        live = standin.live()[kind]
        failed = 0
        for start in range(0, 12):
            _testcapi.set_nomemory(start, start + 1)
            try:
                r = fn()
            except MemoryError:
                failed += 1
                r = None
            finally:
                _testcapi.remove_mem_hooks()
            del r
            gc.collect()
            assert standin.live()[kind] == live, (kind, start)
        assert failed > 0


# ---- 12: a failed cuInit leaks nothing per call ----


@pytest.mark.standin
def test_failed_cuinit_leaks_nothing():
    script = textwrap.dedent("""
    import tracemalloc
    import pygpu.driver as cuda
    def attempt(n):
        for _ in range(n):
            try:
                cuda.init()
            except cuda.CudaUnavailableError as e:
                assert e.routine == "cuInit" and e.code == 100
    attempt(100)
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    attempt(5000)
    grown = tracemalloc.get_traced_memory()[0] - before
    print(grown)
    """)
    env = dict(os.environ, FAKECUDA_FAIL="cuInit:1:100")
    r = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 0, r.stderr
    assert int(r.stdout) < 20000, "%s bytes kept by 5000 failed init() calls" % r.stdout


# ---- 10: dead handles after detach ----


@pytest.mark.standin
def test_objects_of_a_detached_context_never_reach_the_driver(standin, ctx):
    other = cuda.Device(0).make_context()
    s = cuda.Stream()
    e, e2 = cuda.Event(), cuda.Event()
    e2.record()
    h = cuda.pagelocked_empty(16, np.float32, mem_flags=cuda.host_alloc_flags.DEVICEMAP)
    ha = h.base
    del h  # its memory dies with the context
    cuda.Context.pop()
    live_event = cuda.Event()
    other.detach()
    cases = [
        s.is_done,
        lambda: s.priority,
        lambda: s.flags,
        s.synchronize,
        lambda: s.wait_for_event(live_event),
        lambda: cuda.Stream().wait_for_event(e),
        e.record,
        lambda: live_event.record(s),
        e.synchronize,
        e.query,
        lambda: e.time_since(e2),
        lambda: live_event.time_since(e2),
        lambda: e.time_till(live_event),
        ha.get_device_pointer,
        lambda: ctx.disable_peer_access(other),
        lambda: other.disable_peer_access(ctx),
        lambda: ctx.enable_peer_access(other),
        lambda: cuda.mem_alloc_async(16, stream=s),
        lambda: cuda.memcpy_htod_async(cuda.mem_alloc(8), np.ones(1), s),
    ]
    for call in cases:
        with pytest.raises(cuda.LogicError, match="detached"):
            call()
    # the fixture checks that no dead handle reached the stand-in


@pytest.mark.standin
def test_detaching_the_current_primary_context_pops_it(standin, ctx):
    p = cuda.Device(1).retain_primary_context()
    p.push()
    assert cuda.Context.get_current() == p
    p.detach()
    assert cuda.Context.get_current() == ctx  # what was below it
    d = cuda.mem_alloc(16)
    assert d.context == ctx

    def alone():
        # a thread where it was the only context: the next call gets a fresh one
        q = cuda.Device(1).retain_primary_context()
        q.push()
        q.detach()
        fresh = cuda.mem_alloc(16).context
        return fresh.is_primary and not fresh.detached

    t = _Thread(alone)
    t.start()
    t.join()
    assert t.error is None and t.result is True, t.error


# ==== issue 25: one hold protocol (hold.c), the driver side ====
#
# Everything that keeps a device address for later use holds the allocation;
# free() of held memory is deferred until the last holder goes.  Each test
# failed before: the memory went back to the driver at free() while its
# holder still used it.


@pytest.mark.standin
def test_free_under_a_texture_waits_for_the_texture(standin, ctx, rng):
    """Defect 6: DeviceAllocation.free() succeeded while a TextureObject read
    the memory (Array.free() refused the same case; both now defer)."""
    x = rng.standard_normal(64).astype(np.float32)
    d = cuda.to_device(x)
    t = cuda.TextureObject(d, format=cuda.array_format.FLOAT)
    gc.collect()
    base = standin.live()["device"]
    d.free()
    assert standin.live()["device"] == base  # kept for the texture
    assert d.freed and d.holders == ("a TextureObject",)
    with pytest.raises(cuda.LogicError, match="the DeviceAllocation was freed"):
        cuda.TextureObject(d, format=cuda.array_format.FLOAT)
    t.free()  # the last holder: freed now
    assert standin.live()["device"] == base - 1 and d.holders == ()
    del t
    # a GPU array's memory is held through its allocation
    from pygpu import gpuarray

    a = gpuarray.to_gpu(x)
    t = cuda.TextureObject(a)
    assert a.gpudata.holders == ("a TextureObject",)
    gc.collect()
    base = standin.live()["device"]
    a.gpudata.free()
    assert standin.live()["device"] == base
    del t
    gc.collect()
    assert standin.live()["device"] == base - 1


@pytest.mark.standin
def test_free_under_a_tensor_map_waits_for_the_map(standin, ctx):
    """Defect 6: DeviceAllocation.free() succeeded while a TensorMap
    described the memory."""
    d = cuda.mem_alloc(64 * 64 * 4)
    m = cuda.TensorMap(d, (8, 8), shape=(64, 64), dtype=np.float32)
    gc.collect()
    base = standin.live()["device"]
    d.free()
    assert standin.live()["device"] == base and d.holders == ("a TensorMap",)
    del m
    gc.collect()
    assert standin.live()["device"] == base - 1


@pytest.mark.standin
def test_virtual_buffer_grow_keeps_a_held_range_mapped(standin, ctx, rng):
    """Defect 5: grow() moved the buffer and unmapped the old range while a
    graph still held its address; the next replay used unmapped memory.  The
    old range now stays mapped to the same memory until the holder goes."""
    vb = cuda.VirtualBuffer(4096)
    x = rng.standard_normal(1024).astype(np.float32)
    out = np.zeros(1024, np.float32)
    g = cuda.Graph()
    up = g.add_memcpy_node(vb, x)
    g.add_memcpy_node(out, vb, dependencies=up)
    exe = g.instantiate()
    old = int(vb)
    reservations = standin.live()["reservations"]
    standin.fail("cuMemAddressReserve", 1, 2)  # no room after it: grow() moves it
    vb.grow(vb.mapped * 4)
    assert int(vb) != old
    exe.launch()
    np.testing.assert_array_equal(out, x)
    assert standin.live()["reservations"] == reservations + 1  # the old one is kept
    assert vb.holders == ("graph node #0 (memcpy)", "graph node #1 (memcpy)")
    got = np.empty(1024, np.float32)
    cuda.memcpy_dtoh(got, vb)  # the same memory at the new address
    np.testing.assert_array_equal(got, x)
    del exe, g, up
    gc.collect()
    assert standin.live()["reservations"] == reservations  # released with the holds
    vb.free()


@pytest.mark.standin
def test_ipc_export_holds_the_memory(standin, ctx):
    d = cuda.mem_alloc(256)
    cuda.mem_get_ipc_handle(d)
    cuda.mem_get_ipc_handle(d)  # one hold, however many exports
    assert d.holders == ("an IPC export (mem_get_ipc_handle)",)
    gc.collect()
    base = standin.live()["device"]
    d.free()
    assert standin.live()["device"] == base
    del d
    gc.collect()
    assert standin.live()["device"] == base - 1


@pytest.mark.standin
def test_get_function_of_a_detached_contexts_module(standin, ptx):
    """Issue 16: Module.get_function() on a detached context's module gave
    the cached Function (docs/contexts.md promises LogicError)."""
    c = cuda.Device(0).make_context()
    try:
        m = cuda.module_from_buffer(ptx)
        f = m.get_function("k")
        assert m.get_function("k") is f
    finally:
        cuda.Context.pop()
    c.detach()
    with pytest.raises(cuda.LogicError, match="detached"):
        m.get_function("k")
    with pytest.raises(cuda.LogicError, match="detached"):
        m.get_function("never_looked_up")


@pytest.mark.standin
def test_frees_racing_graph_replays_use_no_freed_memory(standin, ctx):
    """The thread hammer's shape on the stand-in (where ASan watches): 4
    threads replay graphs of copies while other threads free the memory the
    graphs use and read it through textures; the stand-in counts any use of
    freed memory (the fixture fails on one) and every replay is checked."""
    barrier = threading.Barrier(4)
    n = 4096

    def work(tid):
        rng = np.random.default_rng()
        s = cuda.Stream()
        barrier.wait()
        for r in range(30):
            x = rng.standard_normal(n).astype(np.float32)
            out = np.zeros(n, np.float32)
            d1, d2 = cuda.mem_alloc(x.nbytes), cuda.mem_alloc(x.nbytes)
            g = cuda.Graph()
            a = g.add_memcpy_node(d1, x)
            b = g.add_memcpy_node(d2, d1, dependencies=a)
            g.add_memcpy_node(out, d2, dependencies=b)
            exe = g.instantiate()
            tex = cuda.TextureObject(d2, format=cuda.array_format.FLOAT)
            racer = _Thread(lambda: (d1.free(), d2.free()))
            racer.start()
            for _ in range(3):
                exe.launch(s)
                s.synchronize()
                np.testing.assert_array_equal(out, x)
            racer.join()
            assert racer.error is None and d1.freed and d2.freed
            del exe, g, a, b
            gc.collect()
            assert d1.holders == () and d2.holders == ("a TextureObject",)
            del tex

    run_in_threads(ctx, 4, work)
    assert standin.stale() == 0
