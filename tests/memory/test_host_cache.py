"""The host cache (src/memory/hostblock.c): HostBlock, the 2 MiB-aligned anonymous
mapping that a large get() lands in, and the bounded process-wide cache its
mapping goes back to when it dies (docs/memory.md, "Pageable copies").

The blocks and the cache need no GPU: most tests make blocks through the
private constructor _driver._host_block and run anywhere.  `driver` tests
run get() against the driver stand-in (whose copies really move host
memory) and on a GPU; `gpu` ones need the GPU's staged copy."""

import os
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest

import pygpu.driver as cuda
from pygpu import _driver, gpuarray

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # tests/
MIB = 1 << 20
HUGE = 2 * MIB


@pytest.fixture
def host_cache():
    """An empty cache with the default limits; the old limits restored and
    the cache emptied after."""
    cuda.free_host_cache()
    old = cuda.set_host_cache(max_bytes=1 << 30, max_blocks=4)
    yield cuda.set_host_cache
    cuda.free_host_cache()
    cuda.set_host_cache(**old)


def delta(before):
    now = cuda.host_cache_stats()
    return {k: now[k] - before[k] for k in ("hits", "misses", "evictions")}


def rand_bytes(rng, n):
    return rng.integers(0, 256, n, dtype=np.uint8)


def view(block):
    return np.frombuffer(block, np.uint8)


def mapped(address, length):
    """True if [address, address+length) lies wholly in this process's
    mappings (/proc/self/maps)."""
    with open("/proc/self/maps") as f:
        ranges = [tuple(int(x, 16) for x in line.split()[0].split("-")) for line in f]
    end = address + length
    for lo, hi in sorted(ranges):
        if lo <= address < hi:
            address = hi
            if address >= end:
                return True
    return False


def owner(a):
    """What finally owns an array's memory (through views, memoryviews and
    as_strided's DummyArray)."""
    while True:
        if isinstance(a, memoryview):
            a = a.obj
        elif getattr(a, "base", None) is not None:
            a = a.base
        else:
            return a


def _run(code, **env):
    e = dict(os.environ)
    e.update(env)
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=e,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=os.path.join(HERE, "support"),
    )


# ---- the block ----


@pytest.mark.parametrize("n", [1, 4095, HUGE, 5 * MIB + 3])
def test_a_block_is_aligned_writable_bytes_of_the_size_asked(host_cache, rng, n):
    b = _driver._host_block(n)
    m = memoryview(b)
    assert m.format == "B" and m.itemsize == 1 and m.nbytes == n and not m.readonly
    assert m.c_contiguous and m.obj is b
    assert b.size == n and b.mapped == -(-n // HUGE) * HUGE and b.address % HUGE == 0
    assert not b.reused and mapped(b.address, b.mapped)
    a = view(b)
    assert a.ctypes.data == b.address and a.flags.writeable and a.base is b
    data = rand_bytes(rng, n)
    a[:] = data
    m.release()
    del a
    np.testing.assert_array_equal(view(b), data)  # the bytes stay with the block
    assert bytes(memoryview(b)) == data.tobytes()
    assert repr(b) == "<pygpu.driver.HostBlock %d bytes at 0x%x, new mapping>" % (n, b.address)


def test_host_block_refuses_bad_sizes_and_direct_construction(host_cache):
    for bad in (0, -5):
        with pytest.raises(ValueError, match=r"_host_block\(\): nbytes must be > 0, not %d" % bad):
            _driver._host_block(bad)
    with pytest.raises(TypeError, match="'str' object cannot be interpreted as an integer"):
        _driver._host_block("8")
    with pytest.raises(OverflowError, match=r"_host_block\(\): nbytes \d+ is too large"):
        _driver._host_block(sys.maxsize)
    with pytest.raises(MemoryError, match=r"cannot map \d+ bytes of host memory: "):
        _driver._host_block(sys.maxsize // 2)  # far beyond any address space
    with pytest.raises(TypeError, match="cannot create 'pygpu.driver.HostBlock' instances"):
        cuda.HostBlock()
    assert cuda.HostBlock is _driver.HostBlock


# ---- recycling ----


def test_a_freed_block_is_reused_by_the_next_request_of_its_rounded_size(host_cache, rng):
    before = cuda.host_cache_stats()
    b = _driver._host_block(5 * MIB + 3)
    addr = b.address
    data = rand_bytes(rng, b.size)
    view(b)[:] = data
    del b
    s = cuda.host_cache_stats()
    assert s["cached_blocks"] == 1 and s["cached_bytes"] == 6 * MIB
    assert mapped(addr, 6 * MIB)  # kept, not unmapped
    other = _driver._host_block(8 * MIB)  # another size: a new mapping
    assert other.address != addr and not other.reused
    c = _driver._host_block(6 * MIB)  # rounds to the same 6 MiB
    assert c.address == addr and c.reused and c.size == 6 * MIB
    # recycled, NOT zeroed: the former block's bytes (get() overwrites them all)
    np.testing.assert_array_equal(view(c)[: data.size], data)
    assert "recycled" in repr(c)
    assert delta(before) == {"hits": 1, "misses": 2, "evictions": 0}
    assert cuda.host_cache_stats()["cached_blocks"] == 0


def test_a_block_still_referenced_is_never_reused(host_cache, rng):
    """Checked by address and by content on fresh random data: blocks of one
    size live at once each get their own mapping, a view keeps its block out
    of the cache, and only the one freed is taken again."""
    n = 3 * MIB + 17
    arrays = [view(_driver._host_block(n)) for _ in range(3)]
    datas = [rand_bytes(rng, n) for _ in arrays]
    for a, d in zip(arrays, datas):
        a[:] = d
    del a  # the loop's name held the last one
    tail = arrays[0][100:]  # a view: holds block 0
    del arrays[0]
    addrs = {a.base.address for a in arrays} | {tail.base.base.address}
    assert len(addrs) == 3
    fresh = view(_driver._host_block(n))
    assert fresh.ctypes.data not in addrs and not fresh.base.reused
    fresh[:] = rand_bytes(rng, n)
    np.testing.assert_array_equal(tail, datas[0][100:])
    freed = arrays.pop(1).base.address  # the last reference to block 2
    again = view(_driver._host_block(n))
    assert again.base.reused and again.ctypes.data == freed
    again[:] = rand_bytes(rng, n)
    np.testing.assert_array_equal(tail, datas[0][100:])
    np.testing.assert_array_equal(arrays[0], datas[1])  # block 1, alive throughout
    third = view(_driver._host_block(n))  # nothing of its size is free now
    assert not third.base.reused and third.ctypes.data not in addrs


def test_threads_never_share_a_block(host_cache):
    """8 threads take and drop blocks of 3 sizes, each filling its block
    with its own random bytes and checking them after others ran."""
    errors = []

    def work(seed):
        r = np.random.default_rng(seed)
        try:
            for i in range(40):
                n = int(r.choice([HUGE, 3 * MIB, 4 * MIB]))
                b = _driver._host_block(n)
                a = view(b)
                d = rand_bytes(r, 4096)
                a[:4096] = d
                a[-4096:] = d
                for _ in range(3):
                    os.sched_yield()
                if not (np.array_equal(a[:4096], d) and np.array_equal(a[-4096:], d)):
                    errors.append(
                        "thread %d, round %d: block %#x changed under it" % (seed, i, b.address)
                    )
                del a, b
        except Exception as e:  # reported below
            errors.append(repr(e))

    ts = [threading.Thread(target=work, args=(s,)) for s in range(8)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert errors == []
    s = cuda.host_cache_stats()
    assert s["cached_blocks"] <= 4 and s["cached_bytes"] <= 1 << 30


# ---- limits ----


def test_the_block_cap_evicts_the_least_recently_freed(host_cache):
    host_cache(max_blocks=2)
    before = cuda.host_cache_stats()
    blocks = [_driver._host_block(k * HUGE) for k in (1, 2, 3)]
    addrs = [(b.address, b.mapped) for b in blocks]
    for i in range(3):  # freed in order: 2, 4, 6 MiB
        blocks[i] = None
    s = cuda.host_cache_stats()
    assert s["cached_blocks"] == 2 and s["cached_bytes"] == 10 * MIB
    assert delta(before)["evictions"] == 1
    assert not mapped(*addrs[0])  # the oldest unmapped
    assert mapped(*addrs[1]) and mapped(*addrs[2])
    b = _driver._host_block(HUGE)
    assert not b.reused
    assert _driver._host_block(2 * HUGE).address == addrs[1][0]


def test_the_byte_cap_evicts_and_a_block_above_it_is_unmapped(host_cache):
    host_cache(max_bytes=10 * MIB)
    blocks = [_driver._host_block(4 * MIB) for _ in range(3)]
    addrs = [b.address for b in blocks]
    for i in range(3):  # 4 + 4 fit, the third evicts the first
        blocks[i] = None
    s = cuda.host_cache_stats()
    assert s["cached_blocks"] == 2 and s["cached_bytes"] == 8 * MIB
    assert not mapped(addrs[0], 4 * MIB) and mapped(addrs[1], 4 * MIB)
    big = _driver._host_block(12 * MIB)  # never fits: unmapped when it dies
    big_addr = big.address
    del big
    assert not mapped(big_addr, 12 * MIB)
    assert cuda.host_cache_stats()["cached_bytes"] == 8 * MIB
    # lowering a limit evicts at once, least recently freed first
    host_cache(max_blocks=1)
    assert not mapped(addrs[1], 4 * MIB) and mapped(addrs[2], 4 * MIB)
    assert cuda.host_cache_stats()["cached_blocks"] == 1


def test_zero_bytes_turns_the_cache_off(host_cache):
    b = _driver._host_block(4 * MIB)
    del b
    assert cuda.host_cache_stats()["cached_blocks"] == 1
    old = host_cache(max_bytes=0)
    assert old == {"max_bytes": 1 << 30, "max_blocks": 4}
    assert cuda.host_cache_stats()["cached_blocks"] == 0  # emptied at once
    before = cuda.host_cache_stats()
    for _ in range(2):
        b = _driver._host_block(4 * MIB)
        addr = b.address
        assert not b.reused
        del b
        assert not mapped(addr, 4 * MIB)
    assert delta(before) == {"hits": 0, "misses": 2, "evictions": 0}


def test_set_host_cache_round_trip_and_refusals(host_cache):
    old = host_cache(max_bytes=64 * MIB, max_blocks=7)
    assert old == {"max_bytes": 1 << 30, "max_blocks": 4}
    assert host_cache(max_blocks=3) == {"max_bytes": 64 * MIB, "max_blocks": 7}  # None keeps
    s = cuda.host_cache_stats()
    assert (s["max_bytes"], s["max_blocks"]) == (64 * MIB, 3)
    with pytest.raises(
        ValueError,
        match=r"set_host_cache\(\): max_blocks must be 0 to 64, "
        r"not 65",
    ):
        host_cache(max_blocks=65)
    with pytest.raises(
        ValueError,
        match=r"set_host_cache\(\): max_bytes must be 0 to \d+, "
        r"not -1",
    ):
        host_cache(max_bytes=-1)
    with pytest.raises(
        TypeError,
        match=r"set_host_cache\(\): max_bytes must be an int or "
        r"None, not str",
    ):
        host_cache(max_bytes="1G")
    with pytest.raises(
        TypeError,
        match=r"set_host_cache\(\): max_blocks must be an int or "
        r"None, not bool",
    ):
        host_cache(max_blocks=True)
    s = cuda.host_cache_stats()
    assert (s["max_bytes"], s["max_blocks"]) == (64 * MIB, 3)  # refused: nothing changed


def test_stats_and_free_host_cache(host_cache, rng):
    cuda.host_cache_stats(reset=True)
    blocks = [_driver._host_block(n) for n in (HUGE, HUGE, 3 * MIB)]
    addrs = [(b.address, b.mapped) for b in blocks]
    for i in range(3):
        blocks[i] = None
    again = _driver._host_block(HUGE)
    s = cuda.host_cache_stats()
    assert s == {
        "hits": 1,
        "misses": 3,
        "evictions": 0,
        "cached_bytes": 6 * MIB,
        "cached_blocks": 2,
        "max_bytes": 1 << 30,
        "max_blocks": 4,
    }
    assert cuda.free_host_cache() == 6 * MIB
    assert cuda.free_host_cache() == 0
    s = cuda.host_cache_stats(reset=True)
    assert s["cached_blocks"] == 0 and s["cached_bytes"] == 0 and s["hits"] == 1
    assert [mapped(*a) for a in addrs] == [a[0] == again.address for a in addrs]
    s = cuda.host_cache_stats()
    assert (s["hits"], s["misses"], s["evictions"]) == (0, 0, 0)
    # a block in use is not touched by free_host_cache
    a = view(again)
    data = rand_bytes(rng, a.size)
    a[:] = data
    cuda.free_host_cache()
    np.testing.assert_array_equal(a, data)


# ---- the environment, fork, exit (subprocesses) ----


def test_environment_variable_sets_the_byte_cap():
    code = """
        import pygpu.driver as cuda
        from pygpu import _driver
        s = cuda.host_cache_stats()
        b = _driver._host_block(4 << 20)
        del b
        print(s["max_bytes"], s["max_blocks"], cuda.host_cache_stats()["cached_blocks"])
    """
    r = _run(code, PYGPU_HOST_CACHE_BYTES="64M")
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == [str(64 << 20), "4", "1"]
    r = _run(code, PYGPU_HOST_CACHE_BYTES="0")
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["0", "4", "0"]
    r = _run(code, PYGPU_HOST_CACHE_BYTES="lots")
    assert r.returncode == 1
    assert (
        "ValueError: environment variable PYGPU_HOST_CACHE_BYTES='lots' is not a byte "
        "count (digits, optionally followed by K, M or G; 0 turns the host cache off)" in r.stderr
    )


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no os.fork here")
def test_a_forked_child_starts_with_an_empty_cache():
    r = _run("""
        import os
        import numpy as np
        import pygpu.driver as cuda
        from pygpu import _driver
        b = _driver._host_block(4 << 20)
        np.frombuffer(b, np.uint8)[:] = 7
        addr = b.address
        del b
        rfd, wfd = os.pipe()
        pid = os.fork()
        if pid == 0:
            s = cuda.host_cache_stats()
            c = _driver._host_block(4 << 20)
            os.write(wfd, b"%d %d %d %d" % (s["cached_blocks"], s["cached_bytes"],
                                            c.reused, np.frombuffer(c, np.uint8).max()))
            os._exit(0)
        os.close(wfd)
        child = os.read(rfd, 100).decode()
        os.waitpid(pid, 0)
        s = cuda.host_cache_stats()
        c = _driver._host_block(4 << 20)
        print(child, s["cached_blocks"], c.address == addr, c.reused,
              int(np.frombuffer(c, np.uint8).min()))
    """)
    assert r.returncode == 0, r.stderr
    # child: empty, a new mapping (zeros); parent: its cached block, bytes intact
    assert r.stdout.split() == ["0", "0", "0", "0", "1", "True", "True", "7"]


def test_the_cache_is_emptied_at_exit():
    # atexit runs its hooks last registered first: this one runs after pygpu's
    r = _run("""
        import atexit
        def after():
            s = cuda.host_cache_stats()
            b = _driver._host_block(4 << 20)
            del b
            print(s["cached_blocks"], s["max_bytes"], cuda.host_cache_stats()["cached_blocks"])
        atexit.register(after)
        import pygpu.driver as cuda
        from pygpu import _driver
        blocks = [_driver._host_block(4 << 20) for _ in range(2)]
        del blocks
        assert cuda.host_cache_stats()["cached_blocks"] == 2
    """)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["0", "0", "0"]


# ---- get()'s destinations ----


def test_host_empty_takes_cached_blocks_from_32_mib(host_cache, rng):
    """_host_empty (get()'s new arrays) puts 32 MiB and more over a
    HostBlock, reused once freed; smaller arrays and object dtypes are
    NumPy's."""
    f4 = np.dtype(np.float32)
    a = gpuarray._host_empty(8 * MIB + 3, f4)
    assert isinstance(a.base, cuda.HostBlock) and a.base.size == a.nbytes
    assert a.ctypes.data % HUGE == 0 and a.flags.writeable and a.flags.c_contiguous
    addr = a.ctypes.data
    del a
    b = gpuarray._host_empty(8 * MIB + 100, f4)  # the same 34 MiB mapping
    assert b.ctypes.data == addr and b.base.reused
    data = rng.standard_normal(b.size).astype(np.float32)
    b[:] = data
    np.testing.assert_array_equal(b, data)
    small = gpuarray._host_empty(8 * MIB - 1, f4)
    assert not isinstance(small.base, cuda.HostBlock)
    objs = gpuarray._host_empty(5 * MIB, np.dtype(object))
    assert not isinstance(objs.base, cuda.HostBlock)


def test_host_empty_has_only_the_callers_that_write_every_byte():
    """A recycled block holds a former array's bytes: _host_empty may only
    serve code that overwrites the whole array before anyone reads it.  Its
    two callers do (get() without ary: the copy covers every byte, and its
    array is not returned if the copy fails; _copy_d2h's gather buffer: one
    memcpy of all of it).  A new caller must be checked the same way, then
    added here."""
    import glob
    import pygpu

    root = os.path.dirname(pygpu.__file__)
    calls = []
    for path in sorted(glob.glob(os.path.join(root, "**", "*.py"), recursive=True)):
        with open(path, encoding="utf-8") as f:
            for line in f:
                if "_host_empty(" in line and "def _host_empty(" not in line:
                    calls.append((os.path.relpath(path, root), line.strip()))
    assert sorted(calls) == sorted(
        [
            ("gpuarray.py", "flat = _host_empty(self.size, self.dtype)"),
            (os.path.join("_array", "copies.py"), "buf = _host_empty(src.size, src.dtype)"),
        ]
    )


@pytest.mark.driver
def test_get_twice_reuses_the_first_arrays_mapping(ctx, rng, host_cache):
    """get() of 64 MiB into fresh arrays twice, on fresh random data each
    time: both equal NumPy's; the second took the first's mapping once the
    first was dropped, and not while it lived; an F-order one of the same
    size takes it again."""
    n = 16 * MIB
    x = rng.standard_normal(n).astype(np.float32)
    g = gpuarray.to_gpu(x)
    before = cuda.host_cache_stats()
    y = g.get()
    np.testing.assert_array_equal(y, x)
    assert isinstance(owner(y), cuda.HostBlock) and not owner(y).reused
    addr = y.ctypes.data
    x2 = rng.standard_normal(n).astype(np.float32)
    g.set(x2)
    held = g.get()  # y alive: its own new mapping
    assert held.ctypes.data != addr and not owner(held).reused
    held_addr = held.ctypes.data
    np.testing.assert_array_equal(held, x2)
    np.testing.assert_array_equal(y, x)
    del y, held  # both mappings cached, held's last
    x3 = rng.standard_normal(n).astype(np.float32)
    g.set(x3)
    z = g.get()
    np.testing.assert_array_equal(z, x3)
    assert owner(z).reused and z.ctypes.data == held_addr  # the last one freed
    assert delta(before) == {"hits": 1, "misses": 2, "evictions": 0}
    # a 2-D F-order get() lands in a recycled block, right
    a = np.asfortranarray(rng.standard_normal((4096, 4096)).astype(np.float32))
    ga = gpuarray.to_gpu(a)
    del z
    b = ga.get()
    np.testing.assert_array_equal(b, a)
    assert b.flags.f_contiguous and owner(b).reused and b.ctypes.data == held_addr


@pytest.mark.standin
def test_a_failed_get_returns_no_array_and_its_block_is_overwritten_next(
    standin, ctx, rng, host_cache
):
    """A get() whose copy fails midway raises and returns nothing; its
    block (part old bytes, part copied) goes back to the cache, and the
    next get() that takes it overwrites every byte (fresh random data)."""
    import gc

    n = 8 * MIB + 5  # float32: 32 MiB + 20 bytes, a HostBlock
    x = rng.standard_normal(n).astype(np.float32)
    g = gpuarray.to_gpu(x)
    first = g.get()  # a block whose bytes are x
    np.testing.assert_array_equal(first, x)
    del first
    x2 = rng.standard_normal(n).astype(np.float32)
    g.set(x2)
    before = cuda.host_cache_stats()
    standin.fail("cuMemcpyDtoHAsync", 4, 999)
    with pytest.raises(
        cuda.Error,
        match=r"^cuMemcpyDtoHAsync \(staged\) failed: "
        r"CUDA_ERROR_UNKNOWN",
    ):
        g.get()
    assert standin.fired()
    gc.collect()  # the traceback's frames held the array
    assert delta(before) == {"hits": 1, "misses": 0, "evictions": 0}
    assert cuda.host_cache_stats()["cached_blocks"] == 1
    x3 = rng.standard_normal(n).astype(np.float32)
    g.set(x3)
    y = g.get()
    assert owner(y).reused
    np.testing.assert_array_equal(y, x3)


@pytest.mark.gpu
def test_gpu_get_of_64_mib_twice_into_fresh_arrays(ctx, rng, host_cache):
    """The staged copy on a GPU: get() of 64 MiB into a fresh array twice,
    fresh random data each time, both equal NumPy's; the second reused the
    first's cached mapping (no page faulted in: no prefault counted).
    Strided views of 32 and 64 MiB, twice each: right, in HostBlocks."""
    n = 16 * MIB
    x = rng.standard_normal(n).astype(np.float32)
    g = gpuarray.to_gpu(x)
    before = cuda.host_cache_stats()
    y = g.get()
    np.testing.assert_array_equal(y, x)
    addr = y.ctypes.data
    assert delta(before) == {"hits": 0, "misses": 1, "evictions": 0}
    del y
    x2 = rng.standard_normal(n).astype(np.float32)
    g.set(x2)
    staged = cuda.staging_stats()
    y2 = g.get()
    np.testing.assert_array_equal(y2, x2)
    assert delta(before) == {"hits": 1, "misses": 1, "evictions": 0}
    assert y2.ctypes.data == addr and owner(y2).reused
    settings = cuda.staging_settings()
    if 0 < settings["threshold"] <= x.nbytes:
        now = cuda.staging_stats()
        assert now["staged_dtoh"] - staged["staged_dtoh"] == 1
        assert now["prefault_bytes"] == staged["prefault_bytes"]  # pages already in
    # strided views (gathered on the device into a temporary, then copied
    # into a recycled block): every element right, the block reused
    a = np.asfortranarray(rng.standard_normal((8192, 4096)).astype(np.float32))
    ga = gpuarray.to_gpu(a)
    for sl in [(slice(None, None, 2), slice(1, None, 2)), (slice(1, None, 2), slice(None))]:
        for k in range(2):
            before = cuda.host_cache_stats()
            got = ga[sl].get()
            np.testing.assert_array_equal(got, a[sl])
            assert isinstance(owner(got), cuda.HostBlock)
            if k:  # the first one's mapping
                assert delta(before)["hits"] == 1 and owner(got).reused
            del got
