"""Issue 13 (defect 7's pattern for CUDA arrays): a CUDA Array freed, or its
context detached, from another thread while a copy that reads or writes it
runs with the GIL released.

Before the fix the freeing thread called cuArrayDestroy (or cuCtxDestroy)
while the copying thread's driver call still used the CUarray: a use after
free.  Now a copy holds the array (a busy count taken with the GIL held);
free() meanwhile returns at once and the array reads as freed to Python,
but cuArrayDestroy waits for the copy to end; detach() is refused while a
copy into one of the context's arrays runs.

Run against the driver stand-in, which makes the copy slow
(StandIn.delay) so the race happens the same way every time, and counts a
copy whose array was destroyed under it as a stale use (the `standin`
fixture fails a test that made one); `make sanitize` runs them under
AddressSanitizer."""

import time

import numpy as np
import pytest

import pygpu.driver as cuda

from threaded import Thread as _Thread

FMT = cuda.array_format
N = 1024  # float32 elements: 4 KiB
DELAY_MS = 300


def _wait_for_call(standin, name, before, timeout=10.0):
    """Until the stand-in has seen one more call of `name` than `before`."""
    end = time.monotonic() + timeout
    while standin.calls(name) <= before:
        assert time.monotonic() < end, "%s never started" % name
        time.sleep(0.002)


def _array1d(n=N):
    return cuda.Array(cuda.ArrayDescriptor(n, 0, FMT.FLOAT, 1))


def _peer_htoa(a, x):
    c = cuda.Memcpy3DPeer()
    c.set_src_host(x)
    c.set_dst_array(a)
    c.width_in_bytes = c.src_pitch = x.nbytes
    c.height = 1
    c()


def _memcpy2d_atoh_async(out, a):
    c = cuda.Memcpy2D()
    c.set_src_array(a)
    c.set_dst_host(out)
    c.width_in_bytes = c.dst_pitch = out.nbytes
    c.height = 1
    s = cuda.Stream()
    c(s)
    s.synchronize()


# case: (routine the stand-in delays, which array is freed, the copy, whether
#        the freed array is the copy's source (its bytes must arrive))
CASES = {
    "htoa": ("cuMemcpy3D", "a", lambda a, b, d, x, out: cuda.memcpy_htoa(a, 0, x), False),
    "atoh": ("cuMemcpy3D", "a", lambda a, b, d, x, out: cuda.memcpy_atoh(out, a, 0), True),
    "dtoa": (
        "cuMemcpyDtoA",
        "a",
        lambda a, b, d, x, out: cuda.memcpy_dtoa(a, 0, d, x.nbytes),
        False,
    ),
    "atod": (
        "cuMemcpyAtoD",
        "a",
        lambda a, b, d, x, out: cuda.memcpy_atod(d, a, 0, x.nbytes),
        True,
    ),
    "atoa_dest": (
        "cuMemcpyAtoA",
        "a",
        lambda a, b, d, x, out: cuda.memcpy_atoa(a, 0, b, 0, x.nbytes),
        False,
    ),
    "atoa_src": (
        "cuMemcpyAtoA",
        "a",
        lambda a, b, d, x, out: cuda.memcpy_atoa(b, 0, a, 0, x.nbytes),
        True,
    ),
    "memcpy2d_async": (
        "cuMemcpy3DAsync",
        "a",
        lambda a, b, d, x, out: _memcpy2d_atoh_async(out, a),
        True,
    ),
    "peer": ("cuMemcpy3DPeer", "a", lambda a, b, d, x, out: _peer_htoa(a, x), False),
}


@pytest.mark.standin
@pytest.mark.parametrize("case", sorted(CASES))
def test_array_free_during_a_copy_waits_for_the_copy(standin, ctx, rng, case):
    routine, _, copy, freed_is_source = CASES[case]
    x = rng.standard_normal(N).astype(np.float32)
    a, b = _array1d(), _array1d()
    d = cuda.mem_alloc(x.nbytes)
    cuda.memcpy_htod(d, x)
    cuda.memcpy_htoa(a, 0, x)  # the freed array holds x ...
    cuda.memcpy_htoa(b, 0, x[::-1].copy())  # ... the other one something else
    out = np.zeros_like(x)
    if case == "atod":
        cuda.memcpy_htod(d, np.zeros_like(x))
    live = standin.live()["arrays"]
    stale = standin.stale()
    before = standin.calls(routine)
    standin.delay(routine, DELAY_MS)
    t = _Thread(lambda: copy(a, b, d, x, out))
    try:
        t.start()
        _wait_for_call(standin, routine, before)
        a.free()  # returns at once ...
        during = standin.live()["arrays"]
        freed_at_once = a.freed
        with pytest.raises(cuda.LogicError, match="the Array was freed"):
            cuda.memcpy_htoa(a, 0, x)  # ... no new use starts ...
    finally:
        t.join()  # (before any assert: under ASan the old
        standin.delay(routine, 0)  # code's copy used a destroyed array)
    assert freed_at_once
    assert during == live  # ... but the array outlived the copy
    assert t.error is None, t.error
    assert standin.stale() == stale  # no copy touched a destroyed array
    assert standin.live()["arrays"] == live - 1
    assert a.freed and repr(a) == "<pygpu.driver.Array (freed)>"
    with pytest.raises(cuda.LogicError, match="the Array was freed"):
        a.handle
    with pytest.raises(cuda.LogicError, match="the Array was freed"):
        cuda.memcpy_atod(d, a, 0, x.nbytes)
    with pytest.raises(cuda.LogicError, match="the Array was freed"):
        cuda.TextureObject(a)
    if freed_is_source:  # the copy read the array's bytes
        if case == "atod":
            got = np.empty_like(x)
            cuda.memcpy_dtoh(got, d)
        elif case == "atoa_src":
            got = cuda.array_to_np(b)
        else:
            got = out
        np.testing.assert_array_equal(got, x)
    a.free()  # still idempotent
    assert standin.live()["arrays"] == live - 1


@pytest.mark.standin
def test_array_free_during_a_copy_then_dropped(standin, ctx, rng):
    # the last Python reference goes while the copy runs: the copy's hold
    # keeps the object, the destroy still waits for the copy
    x = rng.standard_normal(N).astype(np.float32)
    a = _array1d()
    live = standin.live()["arrays"]
    before = standin.calls("cuMemcpy3D")
    standin.delay("cuMemcpy3D", DELAY_MS)
    t = _Thread(lambda: cuda.memcpy_htoa(a, 0, x))
    try:
        t.start()
        _wait_for_call(standin, "cuMemcpy3D", before)
        a.free()
        del a
        during = standin.live()["arrays"]
    finally:
        t.join()
        standin.delay("cuMemcpy3D", 0)
    assert during == live
    assert t.error is None, t.error
    assert standin.live()["arrays"] == live - 1


@pytest.mark.standin
def test_detach_is_refused_while_an_array_copy_runs(standin, ctx, rng):
    other = cuda.Device(0).make_context()
    try:
        a = _array1d()
    finally:
        cuda.Context.pop()
    x = rng.standard_normal(N).astype(np.float32)
    before = standin.calls("cuMemcpy3D")
    standin.delay("cuMemcpy3D", DELAY_MS)

    def copy():
        other.push()
        try:
            cuda.memcpy_htoa(a, 0, x)
        finally:
            cuda.Context.pop()

    t = _Thread(copy)
    try:
        t.start()
        _wait_for_call(standin, "cuMemcpy3D", before)
        with pytest.raises(
            cuda.LogicError,
            match="detach\\(\\): a copy into memory of this context is running in another thread",
        ):
            other.detach()
        refused_alive = not other.detached and not a.freed
    finally:
        t.join()
        standin.delay("cuMemcpy3D", 0)
    assert refused_alive
    assert t.error is None, t.error
    other.push()
    try:
        np.testing.assert_array_equal(cuda.array_to_np(a), x)
    finally:
        cuda.Context.pop()
    other.detach()
    with pytest.raises(cuda.LogicError, match="the Array's context was detached"):
        cuda.memcpy_htoa(a, 0, x)
