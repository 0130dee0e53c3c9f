"""Context detach and host views (src/memory/lifetime.c): detach frees the
context's memory, except memory host code may still read through a live
view -- a managed array (managed_empty(), its .base the allocation), an
as_buffer() memoryview, a page-locked array (pagelocked_empty()).  That
memory stays, the GPU side refuses it (the allocation reads as detached),
and the context's own release waits for the last view, which frees it.

Before, detach freed managed memory under a live managed_empty() array and
an as_buffer() memoryview: the host then read freed memory (ASan:
heap-use-after-free; on an H200, a segfault at the next a.sum()).  The
stand-in counts live managed and page-locked blocks and contexts, so each
test fails there without the rule; `make sanitize` runs them under ASan.
"""

import gc

import numpy as np
import pytest

import pygpu.driver as cuda


def _made_context():
    return cuda.Device(0).make_context()  # created and pushed


@pytest.mark.standin
def test_detach_keeps_a_managed_array_readable(standin, rng):
    ctx = _made_context()
    live = standin.live()
    x = rng.standard_normal(1000)
    a = cuda.managed_empty(1000, np.float64)
    a[:] = x
    ctx.detach()
    assert ctx.detached
    # the memory is still there: the host reads every element back
    assert standin.live()["managed"] == live["managed"] + 1
    np.testing.assert_array_equal(a, x)
    a[::7] += 1.0  # and may write it
    assert float(a.sum()) == pytest.approx(float(x.sum() + len(x[::7])))
    # the GPU side refuses it: its context was detached
    with pytest.raises(cuda.LogicError, match="context was detached"):
        cuda.memcpy_htod(a.base, x)
    with pytest.raises(cuda.LogicError, match="context was detached"):
        a.base.as_buffer(8)
    # the context's release waits for the view; the last one frees both
    assert standin.live()["contexts"] == live["contexts"]
    del a
    gc.collect()
    assert standin.live()["managed"] == live["managed"]
    assert standin.live()["contexts"] == live["contexts"] - 1
    assert standin.stale() == 0


@pytest.mark.standin
def test_detach_keeps_an_as_buffer_memoryview_readable(standin, rng):
    ctx = _made_context()
    live = standin.live()
    x = rng.integers(1, 2**31, 256).astype(np.int32)
    m = cuda.mem_alloc_managed(x.nbytes)
    view = m.as_buffer(x.nbytes)
    np.frombuffer(view, np.int32)[:] = x
    del m  # the memoryview keeps the allocation alive
    ctx.detach()
    np.testing.assert_array_equal(np.frombuffer(view, np.int32), x)
    assert standin.live()["managed"] == live["managed"] + 1
    assert standin.live()["contexts"] == live["contexts"]
    view.release()
    del view
    gc.collect()
    assert standin.live()["managed"] == live["managed"]
    assert standin.live()["contexts"] == live["contexts"] - 1


@pytest.mark.standin
def test_detach_keeps_a_page_locked_array_readable(standin, rng):
    ctx = _made_context()
    live = standin.live()
    x = rng.standard_normal(500).astype(np.float32)
    h = cuda.pagelocked_empty(500, np.float32)
    h[:] = x
    dead = cuda.mem_alloc(1024)  # no view reaches it: freed now
    ctx.detach()
    assert standin.live()["device"] == live["device"]
    assert standin.live()["host"] == live["host"] + 1
    np.testing.assert_array_equal(h, x)
    with pytest.raises(cuda.LogicError, match="context was detached"):
        cuda.memcpy_htod(dead, x)
    assert standin.live()["contexts"] == live["contexts"]
    del h
    gc.collect()
    assert standin.live()["host"] == live["host"]
    assert standin.live()["contexts"] == live["contexts"] - 1


@pytest.mark.standin
def test_detach_of_a_primary_context_under_a_managed_array(standin, rng):
    """A primary context: detached now (the next use gets a fresh Context),
    released when the managed array dies."""
    ctx = cuda.Device(0).retain_primary_context()
    ctx.push()
    x = rng.standard_normal(64)
    a = cuda.managed_empty(64, np.float64)
    a[:] = x
    ctx.detach()
    np.testing.assert_array_equal(a, x)
    fresh = cuda.Device(0).retain_primary_context()
    assert fresh is not ctx and not fresh.detached
    fresh.push()
    try:
        b = cuda.mem_alloc(256)  # the device goes on working meanwhile
        cuda.memcpy_htod(b, x[:32])
        out = np.empty(32)
        cuda.memcpy_dtoh(out, b)
        np.testing.assert_array_equal(out, x[:32])
        del a
        gc.collect()
        assert standin.stale() == 0
    finally:
        cuda.Context.pop()


@pytest.mark.standin
def test_detach_with_no_view_frees_everything_now(standin):
    ctx = _made_context()
    live = standin.live()
    a = cuda.managed_empty(100, np.float64)
    del a  # no view left: nothing to keep
    m = cuda.mem_alloc_managed(400)
    ctx.detach()
    assert standin.live()["managed"] == live["managed"]
    assert standin.live()["contexts"] == live["contexts"] - 1
    assert m.freed


@pytest.mark.gpu
def test_gpu_detach_under_a_managed_array_neither_crashes_nor_reads_freed_memory(rng):
    ctx = cuda.Device(0).make_context()
    x = rng.standard_normal(1 << 20)
    a = cuda.managed_empty(1 << 20, np.float64)
    a[:] = x
    ctx.detach()
    np.testing.assert_array_equal(a, x)
    assert float(a.sum()) == pytest.approx(float(x.sum()))
    view = a.base  # the allocation: refused on the GPU side
    with pytest.raises(cuda.LogicError, match="context was detached"):
        cuda.memcpy_htod(view, x)
    del a, view
    gc.collect()
