"""Issue 27: a small array operation's steady state is one launch.

The block cache (src/memory/blockcache.c, docs/memory.md "The block cache") keeps
freed stream-ordered blocks on the host side for reuse on the stream they
were freed on, and each thread remembers its current context
(src/device/context.c, docs/contexts.md "The current context"), so `c = a + b` on
small arrays in a loop makes no allocation, free or context query call to
the driver: only the launch.

`standin` tests run against the driver stand-in (which records every call,
keeps device memory in host memory and injects failures); `gpu` tests run
on a real GPU: threads on several streams allocating, launching and freeing
quickly on fresh random data, every result checked by content, and the
pool's own counters after free_all()/trim().
"""

import ctypes
import gc
import os
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest

import pygpu.driver as cuda
from pygpu import _driver, gpuarray, graphs

OOM = 2  # CUDA_ERROR_OUT_OF_MEMORY
INVALID_CONTEXT = 201


def _class(n):
    """The bytes of the cached block a request of n bytes gets."""
    if n <= 8192:
        return -(-n // 512) * 512
    b = (n - 1).bit_length() - 1
    step = 1 << (b - 2)
    return -(-n // step) * step


@pytest.fixture
def bc(ctx):
    """The current context's block cache, emptied before and after (and
    every other context's before)."""
    cache = cuda.block_cache(ctx)
    _driver._block_cache_trim(None, 0)
    yield cache
    gc.collect()
    cache.free_all()


def _mem_calls(trace):
    return [
        t for t in trace if t in ("cuMemAllocAsync", "cuMemFreeAsync", "cuMemAlloc", "cuMemFree")
    ]


# ---------------------------------------------------------------- the goal


@pytest.mark.standin
def test_small_operation_steady_state_is_one_launch(standin, ctx, bc, rng):
    """c = a + b on 1,000 float32 in a loop, results dropped: at most 2
    driver calls an operation (before the cache: 7, the launch,
    cuMemAllocAsync, cuMemFreeAsync and cuCtxGetCurrent four times)."""
    x = rng.standard_normal(1000).astype(np.float32)
    y = rng.standard_normal(1000).astype(np.float32)
    a, b = gpuarray.to_gpu(x), gpuarray.to_gpu(y)
    for _ in range(3):  # the kernel compiled and loaded, the block made
        c = a + b
        del c

    def loop():
        for _ in range(50):
            c = a + b
            del c

    _, trace = standin.trace(loop)
    assert len(trace) <= 2 * 50, trace[:20]
    assert trace.count("cuLaunchKernelEx") + trace.count("cuLaunchKernel") == 50, trace[:20]
    assert _mem_calls(trace) == [] and "cuCtxGetCurrent" not in trace, trace[:20]
    st = bc.stats()
    assert st["hits"] >= 50 and st["cached_blocks"] == 1 and st["cached_bytes"] == 4096
    # the same block each time, and the launch wrote into it
    c = a + b
    launch = standin.last_launch()
    assert int.from_bytes(launch.params[:8], "little") == int(c.gpudata)
    assert c.gpudata.size == 4000 and c.nbytes == 4000


def _small_ops(a, b):
    from pygpu import cumath
    from pygpu.elementwise import ElementwiseKernel

    k = ElementwiseKernel(
        "float *z, const float *x, const float *y, float a", "z[i] = a * x[i] + y[i]", "bc_axpb"
    )
    return {
        "sub": lambda: a - b,
        "less": lambda: a < b,
        "neg": lambda: -a,
        "abs": lambda: abs(a),
        "rpow": lambda: 2.0**a,
        "sin": lambda: cumath.sin(a),
        "astype": lambda: a.astype(np.float64),
        "fill": lambda: a.fill(np.float32(1.5)),
        "sum": lambda: gpuarray.sum(a),
        "dot": lambda: gpuarray.dot(a, b),
        "copy": lambda: a.copy(),
        "elementwise": lambda: k(gpuarray.empty_like(a), a, b, np.float32(2)),
    }


@pytest.mark.standin
@pytest.mark.parametrize("name", sorted(_small_ops(None, None)))
def test_other_small_operations_make_at_most_two_driver_calls(standin, ctx, bc, rng, name):
    """Operators, cumath, reductions, copies and ElementwiseKernel on 1,000
    elements: the per-context kernel caches and the gate ask no driver for
    the current context, and results come from the block cache."""
    a = gpuarray.to_gpu(rng.standard_normal(1000).astype(np.float32))
    b = gpuarray.to_gpu(rng.standard_normal(1000).astype(np.float32))
    op = _small_ops(a, b)[name]
    for _ in range(3):
        r = op()
        del r

    def loop():
        for _ in range(10):
            r = op()
            del r

    _, trace = standin.trace(loop)
    assert len(trace) <= 2 * 10 and "cuMemAllocAsync" not in trace, trace


@pytest.mark.standin
def test_scalar_and_reflected_operations_hit_the_cache(standin, ctx, bc, rng):
    a = gpuarray.to_gpu(rng.standard_normal(1000).astype(np.float32))
    for _ in range(2):
        c = a * 2.0
        c = 1.5 - a
    del c

    def loop():
        for _ in range(10):
            c = a * 2.0
            d = 1.5 - a
            del c, d

    _, trace = standin.trace(loop)
    assert len(trace) == 20 and _mem_calls(trace) == [], trace


# ---------------------------------------------------------------- the cache itself


@pytest.mark.standin
def test_hits_misses_and_size_classes(standin, ctx, bc):
    s0 = bc.stats()
    a = cuda.mem_alloc_async(1000)
    assert a.size == 1000  # the size asked for, not the block's
    p = int(a)
    assert bc.misses == s0["misses"] + 1 and bc.hits == s0["hits"]
    a.free()
    assert bc.cached_blocks == 1 and bc.cached_bytes == 1024
    b, trace = standin.trace(lambda: cuda.mem_alloc_async(600))  # same class: 1024 bytes
    assert int(b) == p and b.size == 600 and trace == []
    assert bc.hits == s0["hits"] + 1 and bc.cached_blocks == 0
    c = cuda.mem_alloc_async(1100)  # the next class: a miss
    assert int(c) != p and bc.misses == s0["misses"] + 2
    for n in (1, 512, 513, 8192, 8193, 10240, 10241, 16384, 16385, 300000, 1 << 20):
        cuda.mem_alloc_async(n).free()
    b.free()
    c.free()
    want = (
        sum(
            _class(n)
            for n in (1, 512, 513, 8192, 8193, 10240, 10241, 16384, 16385, 300000, 1 << 20)
        )
        + 1024
        + 1536
    )
    # (1 and 512 share a class; 8193 and 10240 too: each freed before the next came)
    assert bc.cached_bytes == want - 512 - 10240
    st = bc.stats()
    assert set(st) == {
        "hits",
        "misses",
        "cached_bytes",
        "cached_blocks",
        "returned_blocks",
        "full",
        "oom_flushes",
        "limit",
        "max_block",
    }
    assert "blocks" in repr(bc) and "hits" in repr(bc)


@pytest.mark.standin
def test_large_requests_are_not_cached(standin, ctx, bc):
    a = cuda.mem_alloc_async((1 << 20) + 1)
    _, trace = standin.trace(a.free)
    assert trace == ["cuMemFreeAsync"] and bc.cached_blocks == 0


@pytest.mark.standin
def test_the_allocation_keeps_its_requested_size_for_extent_checks(standin, ctx, bc):
    """A 1000-byte request lies in a 1024-byte block: an array of 1200 bytes
    over it is still refused (issue 25's extent check reads the size)."""
    a = cuda.mem_alloc_async(1000)
    with pytest.raises(
        ValueError,
        match=r"span bytes \[0, 1200\) of an allocation of 1000 "
        r"bytes",
    ):
        gpuarray.GPUArray((300,), np.float32, gpudata=a)


@pytest.mark.standin
def test_a_cached_block_is_never_handed_out_twice(standin, ctx, bc, rng):
    """Random allocations and frees of random sizes on two streams and the
    default one: live allocations never overlap, and each keeps the bytes
    written into it until it is freed."""
    streams = [None, cuda.Stream(), cuda.Stream()]
    live = {}
    for step in range(2500):
        if live and rng.random() < 0.45:
            key = list(live)[int(rng.integers(len(live)))]
            a, data = live.pop(key)
            back = np.empty_like(data)
            cuda.memcpy_dtoh(back, a)
            np.testing.assert_array_equal(back, data)
            a.free()
        else:
            n = int(rng.integers(1, 40000)) if rng.random() < 0.9 else int(rng.integers(1, 600))
            a = cuda.mem_alloc_async(n, streams[int(rng.integers(3))])
            data = rng.integers(0, 256, n, dtype=np.uint8)
            cuda.memcpy_htod(a, data)
            live[id(a)] = (a, data)
        if step % 50 == 0:
            spans = sorted((int(a), int(a) + a.size) for a, _ in live.values())
            for (lo0, hi0), (lo1, hi1) in zip(spans, spans[1:]):
                assert hi0 <= lo1, "two live allocations overlap"
    for a, data in live.values():
        back = np.empty_like(data)
        cuda.memcpy_dtoh(back, a)
        np.testing.assert_array_equal(back, data)
    assert bc.hits > 100


@pytest.mark.standin
def test_threads_on_streams_never_share_a_block(standin, ctx, bc):
    """8 threads, 3 streams each and the default stream: allocate, copy fresh
    random bytes in, copy them to a second block and back out (the copies
    release the GIL, so the threads interleave), free; no address is ever
    held by two users and every byte comes back."""
    from threaded import run_in_threads

    lock = threading.Lock()
    live = set()

    def take(d):
        with lock:
            assert int(d) not in live, "a block handed to two users"
            live.add(int(d))
        return d

    def give(d):
        with lock:
            live.discard(int(d))
        d.free()

    def work(tid):
        rng = np.random.default_rng()
        streams = [None] + [cuda.Stream() for _ in range(3)]
        for r in range(150):
            s = streams[r % 4]
            n = int(rng.integers(1, 50000))
            x = rng.integers(0, 256, n, dtype=np.uint8)
            d = take(cuda.mem_alloc_async(n, s))
            cuda.memcpy_htod(d, x)
            e = take(cuda.mem_alloc_async(n, s))
            cuda.memcpy_dtod(e, d, n)
            give(d)
            out = np.empty_like(x)
            cuda.memcpy_dtoh(out, e)
            np.testing.assert_array_equal(out, x)
            give(e)

    h0 = bc.hits
    run_in_threads(ctx, 8, work)
    assert bc.hits > h0


@pytest.mark.standin
def test_a_block_freed_on_one_stream_is_not_reused_on_another(standin, ctx, bc):
    s, t = cuda.Stream(), cuda.Stream()
    a = cuda.mem_alloc_async(1000, s)
    p = int(a)
    a.free()
    assert int(cuda.mem_alloc_async(1000, t)) != p
    assert int(cuda.mem_alloc_async(1000)) != p  # the default stream
    assert int(cuda.mem_alloc_async(1000, 1)) != p  # the legacy stream by name
    d = cuda.mem_alloc_async(1000, s)
    assert int(d) == p  # the same stream: reused


@pytest.mark.standin
def test_per_thread_and_foreign_streams_are_not_cached(standin, ctx, bc):
    t = cuda.Stream()
    foreign = cuda.Stream.from_handle(t.handle)  # pygpu does not own it
    for stream in (2, foreign):
        a = cuda.mem_alloc_async(1000, stream)
        _, trace = standin.trace(a.free)
        assert trace == ["cuMemFreeAsync"], (stream, trace)
    assert bc.cached_blocks == 0


@pytest.mark.standin
def test_a_destroyed_stream_gives_its_blocks_back_first(standin, ctx, bc):
    s = cuda.Stream()
    allocs = [cuda.mem_alloc_async(n, s) for n in (100, 5000, 70000)]
    del allocs
    assert bc.cached_blocks == 3
    box = [s]
    del s

    def drop():
        box.clear()
        gc.collect()

    _, trace = standin.trace(drop)
    assert trace.count("cuMemFreeAsync") == 3
    assert trace.index("cuStreamDestroy") > max(
        i for i, t in enumerate(trace) if t == "cuMemFreeAsync"
    ), trace
    assert bc.cached_blocks == 0


@pytest.mark.standin
def test_free_all_and_trim_give_every_block_back(standin, ctx, bc):
    sizes = (100, 1000, 5000, 20000, 300000, 1 << 20)
    allocs = [cuda.mem_alloc_async(n) for n in sizes]
    live = standin.live()["device"]
    del allocs
    assert bc.cached_blocks == 6 and bc.cached_bytes == sum(_class(n) for n in sizes)
    assert standin.live()["device"] == live  # kept, not freed
    # trim(keep): the largest go first, until at most keep bytes stay
    n, trace = standin.trace(lambda: bc.trim(keep=30000))
    assert n == 2 and trace.count("cuMemFreeAsync") == 2
    assert bc.cached_bytes == sum(_class(n) for n in sizes[:4]) <= 30000
    assert standin.live()["device"] == live - 2
    n, trace = standin.trace(bc.free_all)
    assert n == 4 and trace.count("cuMemFreeAsync") == 4
    assert bc.cached_blocks == 0 and bc.cached_bytes == 0
    assert standin.live()["device"] == live - 6
    assert bc.stats()["returned_blocks"] >= 6
    assert bc.free_all_blocks() == 0  # CuPy's name


@pytest.mark.standin
def test_out_of_memory_flushes_the_cache_and_retries_once(standin, ctx, bc):
    allocs = [cuda.mem_alloc_async(n) for n in (1000, 5000, 20000)]
    del allocs
    assert bc.cached_blocks == 3
    flushes = bc.stats()["oom_flushes"]
    standin.fail("cuMemAllocAsync", 1, OOM)
    a, trace = standin.trace(lambda: cuda.mem_alloc_async(100000))
    assert _mem_calls(trace) == ["cuMemAllocAsync"] + ["cuMemFreeAsync"] * 3 + [
        "cuMemAllocAsync"
    ], trace
    assert a.size == 100000 and bc.cached_blocks == 0
    assert bc.stats()["oom_flushes"] == flushes + 1
    # nothing cached: the error, after one try
    a.free()
    bc.free_all()
    standin.fail("cuMemAllocAsync", 1, OOM)
    with pytest.raises(cuda.MemoryError, match="^cuMemAllocAsync failed: CUDA_ERROR_OUT_OF_MEMORY"):
        standin.trace(lambda: cuda.mem_alloc_async(100000))
    assert bc.stats()["oom_flushes"] == flushes + 1


@pytest.mark.standin
def test_the_cache_keeps_at_most_its_limit(standin, ctx, bc):
    old = cuda.set_block_cache(limit=4096)
    try:
        assert cuda.block_cache_settings() == {"limit": 4096, "max_block": old["max_block"]}
        allocs = [cuda.mem_alloc_async(1024) for _ in range(6)]
        full = bc.stats()["full"]
        _, trace = standin.trace(lambda: allocs.clear())
        assert trace.count("cuMemFreeAsync") == 2  # 4 kept, 2 freed
        assert bc.cached_bytes == 4096 and bc.stats()["full"] == full + 2
        # off: what is cached goes back at once, nothing more is kept
        _, trace = standin.trace(lambda: cuda.set_block_cache(limit=0))
        assert trace.count("cuMemFreeAsync") == 4 and bc.cached_blocks == 0
        a = cuda.mem_alloc_async(1000)
        _, trace = standin.trace(a.free)
        assert trace == ["cuMemFreeAsync"] and bc.cached_blocks == 0
        # a smaller max_block: larger cached blocks go back
        cuda.set_block_cache(limit=old["limit"])
        cuda.mem_alloc_async(100000).free()
        cuda.mem_alloc_async(1000).free()
        assert bc.cached_blocks == 2
        _, trace = standin.trace(lambda: cuda.set_block_cache(max_block=4096))
        assert trace == ["cuMemFreeAsync"] and bc.cached_bytes == 1024
    finally:
        cuda.set_block_cache(**old)


def test_bad_settings_are_refused():
    with pytest.raises(TypeError, match=r"^set_block_cache\(\): limit must be an int, not str$"):
        cuda.set_block_cache(limit="64M")
    with pytest.raises(
        ValueError,
        match=r"^set_block_cache\(\): limit must be a byte count "
        r">= 0, not -1$",
    ):
        cuda.set_block_cache(limit=-1)
    with pytest.raises(
        ValueError,
        match=r"max_block=2147483648 is larger than the largest "
        r"cached size",
    ):
        cuda.set_block_cache(max_block=1 << 31)
    with pytest.raises(TypeError, match=r"^BlockCache\(\): context must be a Context, not int$"):
        cuda.block_cache(5)
    with pytest.raises(
        TypeError,
        match=r"^trim\(\): context must be a Context or None, not "
        r"str$",
    ):
        _driver._block_cache_trim("x")


@pytest.mark.standin
def test_bad_trim_argument(ctx, bc):
    with pytest.raises(ValueError, match=r"^trim\(\): keep must be a byte count >= 0, not -5$"):
        bc.trim(keep=-5)
    with pytest.raises(TypeError, match=r"^trim\(\): keep must be an int, not float$"):
        bc.trim(keep=1.5)


def _child(code, **env):
    e = dict(os.environ)
    e.update(env)
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=e,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "support"),
    )


CHILD = """
    import gc
    import pygpu.driver as cuda
    import fakecuda
    fake = fakecuda.StandIn()
    cuda.init()
    ctx = cuda.Device(0).retain_primary_context()
    ctx.push()
"""


@pytest.mark.standin
def test_environment_turns_the_cache_off_or_sizes_it():
    r = _child(
        CHILD
        + """
    a = cuda.mem_alloc_async(1000)
    a.free()
    print(cuda.block_cache().cached_blocks, cuda.block_cache_settings())
    """,
        PYGPU_BLOCK_CACHE="0",
    )
    assert r.returncode == 0 and r.stdout == "0 {'limit': 0, 'max_block': 1048576}\n", r.stderr
    r = _child(
        CHILD
        + """
    print(cuda.block_cache_settings())
    """,
        PYGPU_BLOCK_CACHE="16M",
        PYGPU_BLOCK_CACHE_MAX="64KiB",
    )
    assert r.returncode == 0 and r.stdout == "{'limit': 16777216, 'max_block': 65536}\n", r.stderr
    r = _child(
        CHILD
        + """
    try:
        cuda.mem_alloc_async(1000)
    except ValueError as e:
        print(e)
    """,
        PYGPU_BLOCK_CACHE="lots",
    )
    assert r.returncode == 0 and r.stdout == (
        "environment variable PYGPU_BLOCK_CACHE='lots' is not a byte count (digits, "
        "optionally followed by K, M or G; or off)\n"
    ), r.stderr


# ---------------------------------------------------------------- what bypasses it


@pytest.mark.standin
def test_allocations_inside_a_capture_bypass_the_cache(standin, ctx, bc):
    s = cuda.Stream(flags=cuda.stream_flags.NON_BLOCKING)
    kept = cuda.mem_alloc_async(1000, s)
    p = int(kept)
    kept.free()
    del kept  # cached under s
    before = cuda.mem_alloc_async(1000)  # made before the capture, on the default stream
    s0 = bc.stats()
    with graphs.capture_graph(s) as cap:
        a, trace = standin.trace(lambda: cuda.mem_alloc_async(1000, s))
        assert _mem_calls(trace) == ["cuMemAllocAsync"] and int(a) != p  # a graph node
        _, trace = standin.trace(a.free)  # a free node
        assert _mem_calls(trace) == ["cuMemFreeAsync"]
        _, trace = standin.trace(before.free)  # the driver's, as before
        assert _mem_calls(trace) == ["cuMemFreeAsync"]
        del a
    assert cap.graph is not None
    s1 = bc.stats()
    assert (s1["hits"], s1["misses"], s1["cached_blocks"]) == (s0["hits"], s0["misses"], 1)
    assert int(cuda.mem_alloc_async(1000, s)) == p  # still there, reused now


@pytest.mark.standin
def test_held_memory_is_freed_to_the_driver(standin, ctx, bc, rng):
    """An allocation a graph node holds: its free waits for the graph
    (issue 25) and then goes to the driver, never into the cache."""
    x = rng.standard_normal(250).astype(np.float32)
    d = cuda.mem_alloc_async(x.nbytes)
    g = cuda.Graph()
    g.add_memcpy_node(d, x)
    d.free()
    assert d.holders == ("graph node #0 (memcpy)",)
    box = [g]
    del g

    def drop():
        box.clear()
        gc.collect()

    _, trace = standin.trace(drop)
    assert trace.count("cuMemFreeAsync") == 1 and bc.cached_blocks == 0, trace


# ---------------------------------------------------------------- teardown


@pytest.mark.standin
def test_detach_gives_the_blocks_back_before_the_context_goes(standin, ctx):
    c2 = cuda.Device(0).make_context()
    try:
        allocs = [cuda.mem_alloc_async(n) for n in (1000, 5000)]
        del allocs
        assert cuda.block_cache(c2).cached_blocks == 2
        live = standin.live()["device"]
        _, trace = standin.trace(c2.detach)
    finally:
        if not c2.detached:
            c2.detach()
    assert trace.count("cuMemFreeAsync") == 2, trace
    assert trace.index("cuCtxDestroy") > trace.index("cuMemFreeAsync"), trace
    assert standin.live()["device"] == live - 2
    assert cuda.Context.get_current() == ctx


@pytest.mark.standin
def test_dropping_a_created_context_gives_the_blocks_back_first(standin, ctx):
    c2 = cuda.Device(0).make_context()
    allocs = [cuda.mem_alloc_async(n) for n in (1000, 5000, 9000)]
    del allocs
    cuda.Context.pop()
    box = [c2]
    del c2

    def drop():
        box.clear()
        gc.collect()

    _, trace = standin.trace(drop)
    assert trace.count("cuMemFreeAsync") == 3, trace
    assert trace.index("cuCtxDestroy") > max(
        i for i, t in enumerate(trace) if t == "cuMemFreeAsync"
    ), trace
    assert cuda.Context.get_current() == ctx


@pytest.mark.standin
def test_detaching_a_primary_context_gives_the_blocks_back_first(standin, ctx):
    p1 = cuda.Device(1).retain_primary_context()
    p1.push()
    try:
        allocs = [cuda.mem_alloc_async(n) for n in (1000, 5000)]
        del allocs
        assert cuda.block_cache(p1).cached_blocks == 2
        _, trace = standin.trace(p1.detach)
    finally:
        if not p1.detached:
            p1.detach()
    assert trace.count("cuMemFreeAsync") == 2, trace
    assert trace.index("cuDevicePrimaryCtxRelease") > trace.index("cuMemFreeAsync"), trace
    assert cuda.Context.get_current() == ctx


@pytest.mark.standin
def test_interpreter_exit_gives_the_blocks_back_before_the_context_goes(tmp_path):
    out = tmp_path / "trace"
    r = _child(
        CHILD
        + """
    allocs = [cuda.mem_alloc_async(n) for n in (1000, 5000, 70000)]
    del allocs
    assert cuda.block_cache(ctx).cached_blocks == 3
    fake.lib.fakecuda_trace(1)
    print("ok")
    """,
        FAKECUDA_TRACE_AT_EXIT=str(out),
    )
    assert r.returncode == 0 and r.stdout == "ok\n" and r.stderr == "", r.stderr
    trace = out.read_text().split()
    assert trace.count("cuMemFreeAsync") == 3, trace
    if "cuDevicePrimaryCtxRelease" in trace:
        assert trace.index("cuDevicePrimaryCtxRelease") > max(
            i for i, t in enumerate(trace) if t == "cuMemFreeAsync"
        ), trace


@pytest.mark.standin
def test_forked_child_drops_the_cache_without_the_driver():
    r = _child(
        CHILD
        + """
    import os
    allocs = [cuda.mem_alloc_async(n) for n in (1000, 5000)]
    del allocs
    pid = os.fork()
    if pid == 0:
        try:
            cuda.mem_alloc_async(1000)
        except cuda.CudaUnavailableError:
            pass
        else:
            os._exit(3)
        del ctx
        gc.collect()
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    print(os.waitstatus_to_exitcode(status), cuda.block_cache(ctx).cached_blocks)
    """
    )
    assert r.returncode == 0 and r.stdout == "0 2\n", r.stderr


# ---------------------------------------------------------------- the current context


def _entry(name, *argtypes):
    """A driver entry point of the stand-in, called behind pygpu's back."""
    from pygpu.testing.standin import StandIn

    lib = StandIn().lib
    fn = ctypes.c_void_p()
    status = ctypes.c_int()
    lib.cuGetProcAddress_v2.argtypes = [
        ctypes.c_char_p,
        ctypes.POINTER(ctypes.c_void_p),
        ctypes.c_int,
        ctypes.c_uint64,
        ctypes.POINTER(ctypes.c_int),
    ]
    assert (
        lib.cuGetProcAddress_v2(name.encode(), ctypes.byref(fn), 12000, 0, ctypes.byref(status))
        == 0
    )
    return ctypes.CFUNCTYPE(ctypes.c_int, *argtypes)(fn.value)


@pytest.mark.standin
def test_the_current_context_is_remembered(standin, ctx):
    cur, trace = standin.trace(_driver._current_context)
    assert cur == ctx and trace == []
    cur, trace = standin.trace(cuda.Context.get_current)  # always the driver's answer
    assert cur == ctx and trace == ["cuCtxGetCurrent"]
    c2 = cuda.Device(0).make_context()
    try:
        cur, trace = standin.trace(_driver._current_context)
        assert cur == c2 and trace == []
        cuda.Context.pop()
        cur, trace = standin.trace(_driver._current_context)
        assert cur == ctx and trace == ["cuCtxGetCurrent"]  # asked once after a pop
        cur, trace = standin.trace(_driver._current_context)
        assert cur == ctx and trace == []
        with c2:
            cur, trace = standin.trace(_driver._current_context)
            assert cur == c2 and trace == []
        assert _driver._current_context() == ctx
    finally:
        c2.detach()


@pytest.mark.standin
def test_the_remembered_context_is_per_thread_and_forgotten_on_detach(standin, ctx):
    assert _driver._current_context() == ctx
    seen = []

    def other_thread():
        c3 = cuda.Device(0).make_context()  # current in that thread only
        seen.append(_driver._current_context() == c3)
        assert _driver._current_context() == c3
        seen.append(True)
        c3.detach()  # any detach: every thread asks again

    t = threading.Thread(target=other_thread)
    cur, trace = standin.trace(_driver._current_context)
    assert cur == ctx and trace == []
    t.start()
    t.join()
    assert seen == [True, True]
    cur, trace = standin.trace(_driver._current_context)
    assert cur == ctx and trace == ["cuCtxGetCurrent"]


@pytest.mark.standin
def test_a_context_error_makes_the_thread_ask_again(standin, ctx, rng):
    d = cuda.mem_alloc(400)
    x = rng.standard_normal(100).astype(np.float32)
    assert _driver._current_context() == ctx
    standin.fail("cuMemcpyHtoD", 1, INVALID_CONTEXT)
    with pytest.raises(cuda.Error, match="^cuMemcpyHtoD failed: CUDA_ERROR_INVALID_CONTEXT"):
        cuda.memcpy_htod(d, x)
    cur, trace = standin.trace(_driver._current_context)
    assert cur == ctx and trace == ["cuCtxGetCurrent"]


@pytest.mark.standin
def test_a_context_made_current_behind_pygpus_back(standin, ctx, rng):
    """Code outside pygpu pushes another context without telling pygpu
    (docs/contexts.md says to call Context.get_current() then).  Until it
    does, operations stay in the context pygpu remembers: the launch finds
    its context is not current (the driver refuses the kernel) and runs in
    it; Context.get_current() then takes the driver's answer."""
    x = rng.standard_normal(1000).astype(np.float32)
    y = rng.standard_normal(1000).astype(np.float32)
    a, b = gpuarray.to_gpu(x), gpuarray.to_gpu(y)
    c = a + b
    del c
    other = cuda.Device(1).make_context()
    cuda.Context.pop()
    push = _entry("cuCtxPushCurrent", ctypes.c_void_p)
    pop = _entry("cuCtxPopCurrent", ctypes.POINTER(ctypes.c_void_p))
    assert _driver._current_context() == ctx
    assert push(other.handle) == 0
    try:
        c, trace = standin.trace(lambda: a + b)
        assert trace.count("cuLaunchKernelEx") == 2, trace  # refused, then in its context
        assert trace[-3:] == ["cuCtxPushCurrent", "cuLaunchKernelEx", "cuCtxPopCurrent"], trace
        launch = standin.last_launch()
        assert int.from_bytes(launch.params[:8], "little") == int(c.gpudata)
        assert c.gpudata.context == ctx
        assert cuda.Context.get_current() == other
        with pytest.raises(ValueError, match="on different devices"):
            a + b
    finally:
        h = ctypes.c_void_p()
        assert pop(ctypes.byref(h)) == 0
        assert cuda.Context.get_current() == ctx
        other.detach()
    assert _driver._current_context() == ctx


# ---------------------------------------------------------------- on a GPU

SPIN_SAXPY = r"""
extern "C" __global__ void saxpy(float *out, const float *x, const float *y, float a, int n,
                                 long long spin)
{
    long long t0 = clock64();
    while (clock64() - t0 < spin) { }
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        out[i] = a * x[i] + y[i];
}
"""


@pytest.mark.gpu
def test_gpu_threads_on_streams_never_share_a_block(ctx):
    """8 threads, 3 streams each: fresh random data up into new stream-ordered
    blocks, a slow kernel, the result down into pinned memory, the blocks
    freed at once (into the cache) while the kernel and the copy still run,
    the next round reusing them; the array layer's a + b in between.  Every
    element of every result is checked, and no two live allocations ever
    share an address."""
    from pygpu.compiler import SourceModule
    from threaded import run_in_threads

    f = SourceModule(SPIN_SAXPY, options=["-fmad=false"]).get_function("saxpy")
    sizes = [1000, 4097, 30000, 250000]
    lock = threading.Lock()
    live = set()
    barrier = threading.Barrier(8)
    bc = cuda.block_cache(ctx)
    h0 = bc.hits

    def take(d):
        with lock:
            assert int(d) not in live, "a block handed to two users"
            live.add(int(d))
        return d

    def give(d):
        with lock:
            live.discard(int(d))
        d.free()

    def work(tid):
        rng = np.random.default_rng()
        streams = [cuda.Stream() for _ in range(3)]
        pending = []
        barrier.wait()
        for r in range(60):
            s = streams[r % 3]
            n = sizes[(tid + r) % len(sizes)]
            x = rng.standard_normal(n).astype(np.float32)
            y = rng.standard_normal(n).astype(np.float32)
            a = np.float32(rng.standard_normal())
            dx = take(cuda.mem_alloc_async(x.nbytes, s))
            dy = take(cuda.mem_alloc_async(y.nbytes, s))
            dout = take(cuda.mem_alloc_async(x.nbytes, s))
            cuda.memcpy_htod_async(dx, x, s)
            cuda.memcpy_htod_async(dy, y, s)
            f(
                dout,
                dx,
                dy,
                a,
                np.int32(n),
                np.int64(20000 if r % 4 == 0 else 0),
                block=(256, 1, 1),
                grid=(min(256, (n + 255) // 256), 1),
                stream=s,
            )
            out = cuda.pagelocked_empty(n, np.float32)
            cuda.memcpy_dtoh_async(out, dout, s)
            give(dx)
            give(dy)
            give(dout)  # freed while the copy may still run
            pending.append((s, out, a * x + y))
            if r % 5 == 4:
                for s_, out_, want in pending:
                    s_.synchronize()
                    np.testing.assert_array_equal(out_, want)
                pending.clear()
            u = rng.standard_normal(n).astype(np.float32)
            v = rng.standard_normal(n).astype(np.float32)
            np.testing.assert_array_equal((gpuarray.to_gpu(u) + gpuarray.to_gpu(v)).get(), u + v)
        for s_, out_, want in pending:
            s_.synchronize()
            np.testing.assert_array_equal(out_, want)

    run_in_threads(ctx, 8, work)
    assert bc.hits > h0


def _pool_used(ctx):
    """The default pool's CU_MEMPOOL_ATTR_USED_MEM_CURRENT, read through
    libcuda itself."""
    lib = ctypes.CDLL("libcuda.so.1")
    dev = ctypes.c_int()
    assert lib.cuDeviceGet(ctypes.byref(dev), ctx.device.ordinal) == 0
    pool = ctypes.c_void_p()
    assert lib.cuDeviceGetDefaultMemPool(ctypes.byref(pool), dev) == 0
    used = ctypes.c_uint64()
    assert lib.cuMemPoolGetAttribute(pool, 7, ctypes.byref(used)) == 0
    return used.value


@pytest.mark.gpu
def test_gpu_free_all_and_trim_return_memory_to_the_pool(ctx, rng):
    bc = cuda.block_cache(ctx)
    gc.collect()
    bc.free_all()
    cuda.Context.synchronize()
    used0 = _pool_used(ctx)
    x = rng.standard_normal(200000).astype(np.float32)  # 800 KB: a cached size
    arrays = [gpuarray.to_gpu(x) for _ in range(8)]
    for a in arrays:
        np.testing.assert_array_equal(a.get(), x)
    del arrays, a
    gc.collect()
    cuda.Context.synchronize()
    cached = bc.cached_bytes
    assert bc.cached_blocks == 8 and cached == 8 * _class(x.nbytes)
    used_full = _pool_used(ctx)
    assert used_full >= used0 + cached  # kept: still the pool's "used"
    assert bc.trim(keep=cached // 2) == 4
    cuda.Context.synchronize()
    assert bc.cached_bytes == cached // 2
    assert used_full - _pool_used(ctx) >= cached // 2  # given back to the pool
    bc.free_all()
    cuda.Context.synchronize()
    assert bc.cached_blocks == 0 and _pool_used(ctx) <= used0


@pytest.mark.gpu
def test_gpu_teardown_gives_blocks_back_and_a_new_context_works(rng):
    dev = cuda.Device(0)
    c2 = dev.make_context()
    try:
        x = rng.standard_normal(1000).astype(np.float32)
        for _ in range(5):
            a = gpuarray.to_gpu(x)
            np.testing.assert_array_equal((a + a).get(), x + x)
        del a
        gc.collect()
        assert cuda.block_cache(c2).cached_blocks >= 1
    finally:
        c2.detach()
    assert cuda.block_cache(c2).cached_blocks == 0
    c3 = dev.make_context()
    try:
        y = rng.standard_normal(1000).astype(np.float32)
        np.testing.assert_array_equal((gpuarray.to_gpu(y) * 2).get(), y * 2)
    finally:
        c3.detach()
