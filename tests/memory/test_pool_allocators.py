"""pygpu.tools' pool allocators and the debugging pool: PageLockedAllocator,
PageLockedMemoryPool(allocator=...), DeviceMemoryPool(allocator=...) with
its active/managed byte counts, and DebugMemoryPool (allocation stacks,
what is outstanding)."""

import gc
import io

import numpy as np
import pytest

import pygpu.driver as cuda
from pygpu import tools
from pygpu.tools import (
    DebugMemoryPool,
    DeviceMemoryPool,
    PageLockedAllocator,
    PageLockedMemoryPool,
    bin_size,
)


def _host_allocation(a):
    base = a
    while not isinstance(base, cuda.HostAllocation):
        base = base.base
    return base


# ---- no driver needed ----


def test_allocator_arguments_are_checked():
    with pytest.raises(TypeError, match="'float' object cannot be interpreted as an integer"):
        PageLockedAllocator(1.5)
    with pytest.raises(ValueError, match="PageLockedAllocator\\(\\): flags must be >= 0, got -1"):
        PageLockedAllocator(-1)
    with pytest.raises(ValueError, match="PageLockedAllocator: nbytes must be >= 0, got -8"):
        PageLockedAllocator()(-8)
    with pytest.raises(
        TypeError, match="PageLockedMemoryPool\\(\\): allocator must be callable .*, not str"
    ):
        PageLockedMemoryPool("pinned")
    with pytest.raises(
        TypeError,
        match="DeviceMemoryPool\\(\\): allocator must be callable "
        "\\(nbytes -> allocation\\), not int",
    ):
        DeviceMemoryPool(4096)
    with pytest.raises(ValueError, match="DebugMemoryPool\\(\\): stack_depth must be >= 1, got 0"):
        DebugMemoryPool(stack_depth=0)
    assert (
        repr(PageLockedAllocator(cuda.host_alloc_flags.PORTABLE)) == "PageLockedAllocator(flags=1)"
    )
    assert {"PageLockedAllocator", "DebugMemoryPool"} <= set(tools.__all__)


def test_pagelocked_pool_with_any_buffer_allocator(rng):
    """The pool takes blocks from any allocator of writable buffers (here
    plain bytearrays), hands out arrays over them and reuses them."""
    made = []

    def allocator(n):
        made.append(n)
        return bytearray(n)

    pool = PageLockedMemoryPool(allocator=allocator)
    a = pool.empty((7, 9), np.float32)
    assert made == [bin_size(7 * 9 * 4)]
    x = rng.standard_normal((7, 9)).astype(np.float32)
    a[:] = x
    np.testing.assert_array_equal(a, x)
    addr = a.__array_interface__["data"][0]
    del a
    gc.collect()
    assert (pool.active_blocks, pool.held_blocks) == (0, 1)
    b = pool.allocate((60,), np.float32)
    assert b.__array_interface__["data"][0] == addr and made == [256]
    z = pool.zeros(5, np.int64)
    assert not z.any() and len(made) == 2


@pytest.mark.parametrize(
    "block, exc, match",
    [
        (lambda n: b"\0" * n, ValueError, "the allocator returned a read-only buffer"),
        (
            lambda n: bytearray(n - 1),
            ValueError,
            "the allocator returned 255 bytes for a block of 256",
        ),
        (lambda n: object(), TypeError, "the allocator returned object, not a C-contiguous buffer"),
    ],
)
def test_pagelocked_pool_refuses_bad_blocks(block, exc, match):
    pool = PageLockedMemoryPool(allocator=block)
    with pytest.raises(exc, match="PageLockedMemoryPool: " + match):
        pool.empty(10, np.uint8)
    assert (pool.active_blocks, pool.held_blocks) == (0, 0)


def test_pagelocked_pool_frees_held_blocks_when_memory_runs_out():
    calls = []

    def allocator(n):
        calls.append(n)
        if len(calls) == 3:
            raise MemoryError("out of pinned memory")
        return bytearray(n)

    pool = PageLockedMemoryPool(allocator=allocator)
    a = pool.empty(1000, np.uint8)
    del a
    gc.collect()
    assert pool.held_blocks == 1
    b = pool.empty(300, np.uint8)  # a new size: allocator call 2
    c = pool.empty(5000, np.uint8)  # call 3 fails: held freed, call 4 succeeds
    assert len(calls) == 4 and pool.held_blocks == 0 and pool.active_blocks == 2
    del b, c


def test_device_pool_with_a_custom_allocator_counts_bytes():
    """Blocks from any allocator; active_bytes is what was asked for,
    managed_bytes the blocks in use and held (PyCUDA's)."""
    freed = []

    class Block(int):
        def free(self):
            freed.append(int(self))

    addrs = iter(range(0x10000, 0x100000, 0x1000))
    pool = DeviceMemoryPool(allocator=lambda n: Block(next(addrs)))
    a, b = pool.allocate(1000), pool.allocate(300)
    assert (pool.active_bytes, pool.managed_bytes) == (1300, bin_size(1000) + bin_size(300))
    a.free()
    assert (pool.active_bytes, pool.managed_bytes) == (300, bin_size(1000) + bin_size(300))
    assert pool.held_bytes == bin_size(1000)
    c = pool.allocate(999)  # the held block comes back
    assert int(c) == 0x10000 and pool.active_bytes == 1299
    pool.stop_holding()
    del b, c
    gc.collect()
    assert sorted(freed) == [0x10000, 0x11000] and pool.managed_bytes == 0


# ---- the driver stand-in ----


@pytest.mark.standin
def test_pagelocked_allocator_makes_pinned_blocks(standin, ctx, rng):
    alloc = PageLockedAllocator(cuda.host_alloc_flags.PORTABLE)
    before = standin.calls("cuMemHostAlloc")
    blk = alloc(4096)
    assert standin.calls("cuMemHostAlloc") == before + 1
    assert blk.dtype == np.uint8 and blk.shape == (4096,)
    ha = _host_allocation(blk)
    assert ha.size >= 4096 and ha.flags == cuda.host_alloc_flags.PORTABLE
    pool = PageLockedMemoryPool(allocator=PageLockedAllocator())
    a = pool.allocate((30, 40), np.float64)
    a[:] = rng.standard_normal((30, 40))
    d = cuda.mem_alloc(a.nbytes)
    s = cuda.Stream()
    cuda.memcpy_htod_async(d, a, s)
    b = pool.zeros((30, 40), np.float64)
    cuda.memcpy_dtoh_async(b, d, s)
    s.synchronize()
    np.testing.assert_array_equal(a, b)
    assert isinstance(_host_allocation(b), cuda.HostAllocation)
    # pygpu's earlier signature: an int is mem_flags
    p2 = PageLockedMemoryPool(cuda.host_alloc_flags.PORTABLE)
    assert _host_allocation(p2.empty(10)).flags == cuda.host_alloc_flags.PORTABLE


@pytest.mark.standin
def test_pagelocked_allocator_failures(standin, ctx):
    """Out of memory: the pool gives its held blocks back and tries again;
    any other failure is the driver's error, and nothing is lost."""
    live = standin.live()
    pool = PageLockedMemoryPool(allocator=PageLockedAllocator())
    a = pool.empty(1000, np.uint8)
    del a
    gc.collect()
    assert pool.held_blocks == 1
    calls = standin.calls("cuMemHostAlloc")
    standin.fail("cuMemHostAlloc", 1, 2)  # CUDA_ERROR_OUT_OF_MEMORY
    try:
        b = pool.empty(5000, np.uint8)
    finally:
        standin.cancel()
    assert standin.fired() and standin.calls("cuMemHostAlloc") == calls + 2
    assert (pool.held_blocks, pool.active_blocks) == (0, 1)
    standin.fail("cuMemHostAlloc", 1, 999)
    err = None
    try:
        pool.empty(9000, np.uint8)
    except cuda.Error as e:
        err = (e.code, e.routine, isinstance(e, MemoryError))
    finally:
        standin.cancel()
    assert err == (999, "cuMemHostAlloc", False)
    assert (pool.held_blocks, pool.active_blocks) == (0, 1)
    del b
    pool.stop_holding()
    gc.collect()
    assert standin.live() == live


@pytest.mark.standin
def test_debug_pool_records_where_each_allocation_was_made(standin, ctx, rng):
    log = io.StringIO()
    pool = DebugMemoryPool(logfile=log)

    def make_buffers():
        return [pool.allocate(1000) for _ in range(3)]

    def make_other():
        return pool.allocate(5000)

    bufs = make_buffers()
    other = make_other()
    x = rng.standard_normal(250).astype(np.float32)
    cuda.memcpy_htod(bufs[1], x)
    np.testing.assert_array_equal(cuda.from_device_like(bufs[1], x), x)
    out = pool.outstanding()
    assert [r.nbytes for r in out] == [5000, 1000, 1000, 1000]
    assert "make_other" in out[0].description and "make_buffers" in out[1].description
    assert "test_pool_allocators.py" in out[0].description
    assert "tools.py" not in out[0].description  # the pool's own frames left out
    assert out[1].stack[-1].name == "<listcomp>" or "make_buffers" in [f.name for f in out[1].stack]
    text = log.getvalue()
    assert text.count("Allocation of size 1000 occurring") == 3
    assert "Allocation of size 5000 occurring" in text
    assert "(pool: held:0, active:3)" in text  # logged before the fourth
    assert "(1000 bytes): 3x" in text  # the histogram before the fourth
    free, total = cuda.mem_get_info()
    assert "total:%d" % total in text
    rep = io.StringIO()
    pool.report(rep)
    lines = rep.getvalue().splitlines()
    assert lines[0] == (
        "DebugMemoryPool: 4 active block(s) (8000 bytes asked for), 0 held (0 bytes)"
    )
    assert lines[1].endswith("(5000 bytes): 1x") and "make_other" in lines[1]
    assert lines[2].endswith("(1000 bytes): 3x") and "make_buffers" in lines[2]
    # freed allocations are no longer outstanding; their blocks are held
    bufs[0].free()
    del bufs[2]
    gc.collect()
    assert [r.nbytes for r in pool.outstanding()] == [5000, 1000]
    assert (pool.active_blocks, pool.held_blocks) == (2, 2)
    del bufs, other
    gc.collect()
    assert pool.outstanding() == [] and pool.active_bytes == 0
    rep = io.StringIO()
    pool.report(rep)
    assert rep.getvalue().splitlines() == [
        "DebugMemoryPool: 0 active block(s) (0 bytes asked for), 4 held (%d bytes)"
        % (3 * bin_size(1000) + bin_size(5000))
    ]
    pool.stop_holding()


@pytest.mark.standin
def test_debug_pool_interactive_asks_for_mnemonics(standin, ctx, monkeypatch):
    answers = iter(["", "first buffer", "", "", "other", ""])
    asked = []

    def fake_input(prompt=""):
        asked.append(prompt)
        return next(answers)

    monkeypatch.setattr("builtins.input", fake_input)
    log = io.StringIO()
    pool = DebugMemoryPool(interactive=True, logfile=log)

    def site():
        return pool.allocate(100)

    a = site()  # "" (more info: the stack is printed), then the mnemonic, [Enter]
    b = site()  # the same site and size: no question, [Enter]
    c = pool.allocate(100)  # another site: its mnemonic, [Enter]
    assert asked == ["Enter mnemonic or [Enter] for more info:"] * 2 + ["  [Enter]"] * 2 + [
        "Enter mnemonic or [Enter] for more info:",
        "  [Enter]",
    ]
    assert sorted(r.description for r in pool.outstanding()) == [
        "first buffer",
        "first buffer",
        "other",
    ]
    assert "at: first buffer" in log.getvalue() and "in site" in log.getvalue()
    assert len(pool.stacktrace_mnemonics) == 2
    del a, b, c


@pytest.mark.standin
def test_debug_pool_allocation_failure_records_nothing(standin, ctx):
    pool = DebugMemoryPool(logfile=io.StringIO())
    keep = pool.allocate(300)
    del keep
    gc.collect()
    assert pool.held_blocks == 1
    standin.fail("cuMemAlloc", 1, 999)
    err = None
    try:
        pool.allocate(1 << 20)
    except cuda.Error as e:
        err = (e.code, e.routine)
    finally:
        standin.cancel()
    assert err == (999, "cuMemAlloc")
    assert pool.outstanding() == [] and pool.active_blocks == 0 and pool.active_bytes == 0
    assert pool.held_blocks == 1
    calls = standin.calls("cuMemAlloc")
    standin.fail("cuMemAlloc", 1, 2)  # out of memory once: mem_alloc's own retry
    try:
        big = pool.allocate(1 << 20)
    finally:
        standin.cancel()
    assert standin.fired() and standin.calls("cuMemAlloc") == calls + 2
    assert [r.nbytes for r in pool.outstanding()] == [1 << 20]
    del big


@pytest.mark.gpu
def test_gpu_debug_pool_blocks_hold_data(ctx, rng):
    from pygpu.compiler import SourceModule

    f = SourceModule(
        "__global__ void axpy(float a, float *x, const float *y, int n) {"
        " int i = blockIdx.x * blockDim.x + threadIdx.x;"
        " if (i < n) x[i] = a * x[i] + y[i]; }"
    ).get_function("axpy")
    pool = DebugMemoryPool(logfile=io.StringIO())
    n = 10000
    x = rng.standard_normal(n).astype(np.float32)
    y = rng.standard_normal(n).astype(np.float32)
    dx, dy = pool.allocate(x.nbytes), pool.allocate(y.nbytes)
    cuda.memcpy_htod(dx, x)
    cuda.memcpy_htod(dy, y)
    f(np.float32(2.5), dx, dy, np.int32(n), block=(256, 1, 1), grid=((n + 255) // 256, 1))
    got = cuda.from_device_like(dx, x)
    np.testing.assert_allclose(got, np.float32(2.5) * x + y, rtol=1e-6, atol=1e-6)
    assert [r.nbytes for r in pool.outstanding()] == [x.nbytes, y.nbytes]
    hp = PageLockedMemoryPool(allocator=PageLockedAllocator())
    h = hp.empty(n, np.float32)
    s = cuda.Stream()
    cuda.memcpy_dtoh_async(h, dy, s)
    s.synchronize()
    np.testing.assert_array_equal(h, y)
