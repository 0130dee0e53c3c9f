"""Lifetime rules under races and odd orders (a review's findings; each
test failed before its fix): another thread detaching a context or freeing
a buffer while a call runs with the GIL released, a free deferred by a
capture whose stream dies first, a failed pool allocation, a detached
context still current in another thread, a forked child and a context
whose release waits for its host views.

The races use the driver stand-in's delays (StandIn.delay: the entry point
sleeps with the GIL released, as a real driver call takes its time); the
ones that detach a primary context or fork run in a fresh process."""

import gc
import os
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest

import pygpu.driver as cuda

standin = pytest.mark.standin
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _py(code):
    """Run code in a fresh process on the same stand-in; its stdout."""
    p = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert p.returncode == 0, p.stdout + p.stderr
    return p.stdout


@standin
def test_ipc_open_while_another_thread_detaches_the_context(standin):
    """IPCMemoryHandle() kept only a borrowed pointer to the current context
    while cuIpcOpenMemHandle ran with the GIL released: another thread that
    detached it and dropped its last reference left a freed Context to be
    used (a segfault under PYTHONMALLOC=debug).  Now the open owns it and
    says the context went away, closing what it opened."""
    out = _py("""
        import gc, threading, time
        import pygpu.driver as cuda
        from pygpu.testing.standin import StandIn
        sd = StandIn()
        cuda.init()
        dev = cuda.Device(0)
        c2 = dev.make_context()               # the exporter: another context
        a = cuda.mem_alloc(4096)              # exported: alive
        h = cuda.mem_get_ipc_handle(a)
        c2.pop()
        out = []
        def opener():
            try:
                out.append(cuda.IPCMemoryHandle(h))
            except cuda.LogicError as e:
                out.append(str(e))
        t = threading.Thread(target=opener)
        sd.delay("cuIpcOpenMemHandle", 300)
        t.start(); time.sleep(0.15)
        p = dev.retain_primary_context()      # the opener's current context
        p.detach(); del p; gc.collect()
        t.join(); sd.cancel()
        print(out[0])
        print("open mappings:", sd.live()["ipc"])
    """)
    assert out.splitlines() == [
        "IPCMemoryHandle(): the context was detached (by another thread) while the handle "
        "was opened",
        "open mappings: 0",
    ]


@standin
def test_a_failed_pool_allocation_frees_its_memory_once(standin, ctx):
    """MemoryPool.allocate(n, stream): when the result's owner could not be
    made (no memory), the dying result freed the memory and allocate()
    freed it again."""
    pytest.importorskip("_testcapi")
    out = _py("""
        import _testcapi
        import pygpu.driver as cuda
        from pygpu.testing.standin import StandIn
        sd = StandIn()
        cuda.init()
        ctx = cuda.Device(0).retain_primary_context(); ctx.push()
        pool = cuda.MemoryPool(ipc=False)
        s = cuda.Stream()
        keep = [(i, -i) for i in range(20000)]   # no free 2-tuples left
        out = []
        def f():
            _testcapi.set_nomemory(1, 2)         # the owner tuple fails
            try:
                pool.allocate(4096, s)
            except MemoryError:
                out.append("MemoryError")
            finally:
                _testcapi.remove_mem_hooks()
        _, calls = sd.trace(f)
        print(out, calls.count("cuMemFreeAsync"), sd.stale())
    """)
    assert out.strip() == "['MemoryError'] 1 0"


@standin
def test_a_free_deferred_by_a_capture_outlives_its_stream(standin, ctx):
    """A cached block trimmed while two captures run is freed when the last
    ends; when its stream died before that, the free ran on the dead handle
    (a stale handle, and the block leaked).  Now the dying stream's work is
    waited for and the free runs on the legacy stream."""
    live = standin.live()
    A, B = cuda.Stream(), cuda.Stream()
    a = cuda.mem_alloc_async(1000, A)
    a.free()  # a block cached under A
    assert cuda.block_cache().stats()["cached_blocks"] >= 1
    A.begin_capture()
    B.begin_capture()
    try:
        assert cuda.block_cache().trim(0) >= 1  # deferred: captures run
        A.end_capture()
        del A, a
        gc.collect()  # A destroyed
    finally:
        B.end_capture()  # the deferred free runs
    assert standin.stale() == 0
    assert standin.live()["device"] == live["device"]


@standin
def test_grow_while_another_thread_frees_the_buffer(standin, ctx):
    """VirtualBuffer.grow() released the GIL in cuMemCreate without marking
    the buffer in use: a free() meanwhile, then the new chunk mapped into
    the freed buffer and never released.  Now the free waits for the grow
    and releases everything."""
    live = standin.live()
    v = cuda.VirtualBuffer(1)
    standin.delay("cuMemCreate", 300)
    errors = []

    def grow():
        try:
            v.grow(v.granularity * 3)
        except Exception as e:  # noqa: BLE001 - the test reads it
            errors.append(e)

    t = threading.Thread(target=grow)
    t.start()
    time.sleep(0.1)
    try:
        v.free()  # while cuMemCreate runs
    finally:
        t.join()
        standin.cancel()
    assert errors == [] and v.freed
    with pytest.raises(cuda.LogicError, match="grow\\(\\): the VirtualBuffer was freed"):
        v.grow(v.granularity * 4)
    del v
    gc.collect()
    now = standin.live()
    assert (now["vmm"], now["reservations"]) == (live["vmm"], live["reservations"])
    assert standin.stale() == 0


@standin
def test_a_detached_context_still_current_in_another_thread_is_refused(standin):
    """A created context detached while a page-locked array keeps its handle
    alive, still current in another thread: a call there wrapped the handle
    as a foreign context and allocated in it, memory the deferred release
    then destroyed under a live object.  Now it is a LogicError."""
    c = cuda.Device(0).make_context()
    view = cuda.pagelocked_empty(256, np.float32)
    pushed, detached = threading.Event(), threading.Event()
    out = []

    def worker():
        c.push()
        pushed.set()
        detached.wait()
        try:
            out.append(cuda.mem_alloc(4096))
        except cuda.LogicError as e:
            out.append(str(e))
        finally:
            cuda.Context.pop()

    t = threading.Thread(target=worker)
    t.start()
    pushed.wait()
    c.pop()
    c.detach()  # deferred: `view` lives
    detached.set()
    t.join()
    assert out == [
        "the current context was detached (its release waits for its page-locked or "
        "managed arrays): pop it, or make another context current"
    ]
    del view
    gc.collect()
    assert standin.stale() == 0


@standin
def test_a_forked_child_never_touches_a_context_waiting_for_its_views(standin):
    """fork() marked only contexts not yet detached: a child dropping an
    inherited page-locked or managed array of a context whose release waited
    for it pushed the parent's context, freed and destroyed it.  Now the
    child makes no driver call."""
    if not hasattr(os, "fork"):
        pytest.skip("no fork here")
    out = _py("""
        import gc, os
        import numpy as np
        import pygpu.driver as cuda
        from pygpu.testing.standin import StandIn
        sd = StandIn()
        cuda.init()
        c = cuda.Device(0).make_context()
        arr = cuda.pagelocked_empty(1024, np.float32)
        m = cuda.managed_empty(1024, np.float32)
        c.pop(); c.detach(); del c            # release deferred: the views live
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            def drop():
                global arr, m
                del arr, m
                gc.collect()
            _, calls = sd.trace(drop)
            os.write(w, repr(calls).encode())
            os._exit(0)
        os.close(w)
        os.waitpid(pid, 0)
        print(os.read(r, 4096).decode())
        del arr, m
        gc.collect()
        print(sd.live()["contexts"], sd.stale())
    """)
    assert out.splitlines() == ["[]", "0 0"]


@standin
def test_a_detached_contexts_allocation_says_so(standin):
    """int(a), a.__cuda_array_interface__ and a VirtualBuffer's methods said
    "was freed" for memory that went with its detached context."""
    c = cuda.Device(0).make_context()
    a = cuda.mem_alloc(64)
    v = cuda.VirtualBuffer(1)
    c.pop()
    c.detach()
    gone = "context was detached: its memory is gone"
    with pytest.raises(cuda.LogicError, match="the DeviceAllocation's " + gone):
        int(a)
    with pytest.raises(cuda.LogicError, match="the DeviceAllocation's " + gone):
        a.__cuda_array_interface__
    with pytest.raises(cuda.LogicError, match=r"grow\(\): the VirtualBuffer's " + gone):
        v.grow(v.granularity * 2)
    assert standin.stale() == 0
