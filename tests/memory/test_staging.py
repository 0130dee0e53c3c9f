"""Pageable-copy staging (src/memory/staging.c): which path each copy takes, the
bytes of staged copies (odd sizes, host and device offsets, piece
boundaries, thread counts), In/Out/InOut through staging, the settings and
their snapshot (issue 13, defect 16), teardown at detach, at exit and after
a fork.

The `driver` tests run against the driver stand-in (make test's second
pass), whose copies really move host memory, and on a GPU; `standin` ones
need the stand-in's call counters; `gpu` ones run a kernel."""

import os
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest

import pygpu.driver as cuda
from pygpu import _driver, compiler

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # tests/
KIB, MIB = 1 << 10, 1 << 20


def rand_bytes(rng, n):
    return rng.integers(0, 256, n, dtype=np.uint8)


def delta(before):
    now = cuda.staging_stats()
    return {k: now[k] - before[k] for k in now}


@pytest.fixture
def staging():
    """Restores the settings the test changes.  A test starts with cold=0
    (every copy from the threshold up staged, helpers asleep or not); the
    cold path's own tests set it."""
    old = cuda.set_staging(cold=0)
    yield cuda.set_staging
    cuda.set_staging(**old)


def _run(code, **env):
    e = dict(os.environ)
    e.update(env)
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=e,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=HERE,
    )


# ---- settings (no driver needed) ----


def test_settings_round_trip(staging):
    staging(
        threshold=3 * MIB,
        threads=5,
        chunk=512 * KIB,
        piece=128 * KIB,
        spin_us=40,
        prefault=False,
        cold=2 * MIB,
    )
    want = {
        "threshold": 3 * MIB,
        "threads": 5,
        "chunk": 512 * KIB,
        "piece": 128 * KIB,
        "spin_us": 40,
        "prefault": 0,
        "cold": 2 * MIB,
    }
    assert cuda.staging_settings() == want
    old = staging(threads=2, spin_us=0)  # None keeps the others
    assert old == want
    assert cuda.staging_settings() == dict(want, threads=2, spin_us=0)
    staging(**old)
    assert cuda.staging_settings() == old
    staging(prefault=1)
    assert cuda.staging_settings()["prefault"] == 1
    # the private tuple forms
    assert _driver._get_staging_tuning() == (128 * KIB, 40, 1, 2 * MIB)
    assert _driver._set_staging_tuning(64 * KIB, None, 0) == (128 * KIB, 40, 1, 2 * MIB)
    assert _driver._get_staging_tuning() == (64 * KIB, 40, 0, 2 * MIB)
    assert _driver._set_staging_tuning(cold=0) == (64 * KIB, 40, 0, 2 * MIB)
    assert cuda.staging_settings()["cold"] == 0
    # the private tuple form benchmarks/run.py uses
    assert _driver._set_staging(0, 4, 1 << 16) == (3 * MIB, 5, 512 * KIB)
    assert _driver._get_staging() == (0, 4, 1 << 16)


def test_staging_applies_by_size(staging):
    """What the In/Out path asks before it picks the staged copy."""
    staging(threshold=2 * MIB)
    assert not _driver._staging_applies(2 * MIB - 1)
    assert _driver._staging_applies(2 * MIB) and _driver._staging_applies(1 << 40)
    staging(threshold=0)
    assert not _driver._staging_applies(1 << 40)
    with pytest.raises(ValueError, match=r"_staging_applies\(\): nbytes must be >= 0"):
        _driver._staging_applies(-1)
    with pytest.raises(TypeError, match="cannot be interpreted as an integer"):
        _driver._staging_applies(1.5)


@pytest.mark.parametrize(
    "kwargs, exc, match",
    [
        ({"threads": 0}, ValueError, r"set_staging\(\): threads must be 1 to 16, not 0"),
        ({"threads": 17}, ValueError, r"set_staging\(\): threads must be 1 to 16, not 17"),
        ({"threads": 2**70}, ValueError, r"set_staging\(\): threads is too large"),
        (
            {"chunk": 4096},
            ValueError,
            r"set_staging\(\): chunk must be 64 KiB to 256 MiB, not 4096",
        ),
        ({"chunk": 1 << 30}, ValueError, r"chunk must be 64 KiB to 256 MiB, not 1073741824 bytes"),
        ({"threshold": -1}, ValueError, r"set_staging\(\): threshold must be >= 0"),
        ({"threshold": "1M"}, TypeError, r"set_staging\(\): threshold must be an int, not str"),
        ({"threads": 2.0}, TypeError, r"set_staging\(\): threads must be an int, not float"),
        ({"threads": True}, TypeError, r"threads must be an int, not bool"),
        (
            {"piece": 100000},
            ValueError,
            r"set_staging\(\): piece must be a multiple of 64 KiB "
            r"from 64 KiB to 256 MiB, not 100000 bytes",
        ),
        (
            {"piece": 0},
            ValueError,
            r"piece must be a multiple of 64 KiB from 64 KiB to 256 MiB, "
            r"not 0 bytes",
        ),
        ({"piece": 512 << 20}, ValueError, r"piece must be .* not 536870912 bytes"),
        (
            {"spin_us": 100001},
            ValueError,
            r"set_staging\(\): spin_us must be 0 to 100000, not 100001",
        ),
        ({"spin_us": -1}, ValueError, r"set_staging\(\): spin_us must be >= 0"),
        ({"spin_us": 1.5}, TypeError, r"set_staging\(\): spin_us must be an int, not float"),
        ({"prefault": 2}, ValueError, r"set_staging\(\): prefault must be 0 or 1, not 2"),
        ({"prefault": "yes"}, TypeError, r"set_staging\(\): prefault must be an int, not str"),
        (
            {"cold": (1 << 30) + 1},
            ValueError,
            r"set_staging\(\): cold must be 0 to 1073741824 bytes, not 1073741825",
        ),
        ({"cold": -1}, ValueError, r"set_staging\(\): cold must be >= 0"),
        ({"cold": "4M"}, TypeError, r"set_staging\(\): cold must be an int, not str"),
        # a refused setting among good ones changes none of them
        (
            {"threads": 0, "piece": 128 * KIB, "spin_us": 7},
            ValueError,
            r"threads must be 1 to 16, not 0",
        ),
        ({"threads": 3, "piece": 1}, ValueError, r"piece must be a multiple of 64 KiB"),
    ],
)
def test_bad_settings_are_refused_and_change_nothing(staging, kwargs, exc, match):
    before = cuda.staging_settings()
    with pytest.raises(exc, match=match):
        staging(**kwargs)
    assert cuda.staging_settings() == before


def test_settings_from_the_environment():
    code = """
        import pygpu.driver as cuda
        print(cuda.staging_settings())
    """
    r = _run(
        code,
        PYGPU_STAGING_THRESHOLD="2M",
        PYGPU_STAGING_THREADS="3",
        PYGPU_STAGING_CHUNK="512KiB",
        PYGPU_STAGING_PIECE="128K",
        PYGPU_STAGING_SPIN_US="50",
        PYGPU_STAGING_PREFAULT="0",
        PYGPU_STAGING_COLD="1M",
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout == (
        "{'threshold': 2097152, 'threads': 3, 'chunk': 524288, "
        "'piece': 131072, 'spin_us': 50, 'prefault': 0, 'cold': 1048576}\n"
    )
    # the defaults (docs/memory.md)
    r = _run(
        code,
        PYGPU_STAGING_THRESHOLD="",
        PYGPU_STAGING_THREADS="",
        PYGPU_STAGING_CHUNK="",
        PYGPU_STAGING_PIECE="",
        PYGPU_STAGING_SPIN_US="",
        PYGPU_STAGING_PREFAULT="",
        PYGPU_STAGING_COLD="",
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout == (
        "{'threshold': 1048576, 'threads': 6, 'chunk': 2097152, "
        "'piece': 262144, 'spin_us': 300, 'prefault': 1, 'cold': 4194304}\n"
    )


@pytest.mark.parametrize(
    "var, value, match",
    [
        (
            "PYGPU_STAGING_THRESHOLD",
            "abc",
            r"environment variable PYGPU_STAGING_THRESHOLD='abc' is not a byte count",
        ),
        ("PYGPU_STAGING_THRESHOLD", "-5", r"PYGPU_STAGING_THRESHOLD='-5' is not a byte count"),
        ("PYGPU_STAGING_THRESHOLD", "4 MiBs", r"PYGPU_STAGING_THRESHOLD='4 MiBs' is not"),
        ("PYGPU_STAGING_THRESHOLD", "99999999999999999999", r"is not a byte count"),
        (
            "PYGPU_STAGING_THREADS",
            "40",
            r"environment variable PYGPU_STAGING_THREADS: threads must be 1 to 16, not 40",
        ),
        (
            "PYGPU_STAGING_CHUNK",
            "1K",
            r"environment variable PYGPU_STAGING_CHUNK: chunk must be 64 KiB to 256 MiB, not 1024",
        ),
        (
            "PYGPU_STAGING_PIECE",
            "96K",
            r"environment variable PYGPU_STAGING_PIECE: piece must be a multiple of 64 KiB",
        ),
        (
            "PYGPU_STAGING_SPIN_US",
            "1M",
            r"environment variable PYGPU_STAGING_SPIN_US: spin_us must be 0 to 100000, not 1048576",
        ),
        ("PYGPU_STAGING_SPIN_US", "x", r"PYGPU_STAGING_SPIN_US='x' is not a byte count"),
        (
            "PYGPU_STAGING_PREFAULT",
            "2",
            r"environment variable PYGPU_STAGING_PREFAULT: prefault must be 0 or 1, not 2",
        ),
    ],
)
def test_bad_environment_is_a_clear_error(var, value, match):
    r = _run(
        """
        import pygpu.driver as cuda
        try:
            cuda.staging_settings()
        except ValueError as e:
            print(e)
    """,
        **{var: value},
    )
    assert r.returncode == 0, r.stderr
    import re

    assert re.search(match, r.stdout), r.stdout


# ---- which path a copy takes, and its bytes ----


@pytest.mark.driver
def test_large_pageable_copy_is_staged_and_small_is_not(ctx, rng, staging):
    staging(threshold=1 * MIB, threads=3, chunk=64 * KIB)
    n = 3 * MIB + 4097
    x = rand_bytes(rng, n)
    dev = cuda.mem_alloc(n)
    before = cuda.staging_stats()
    cuda.memcpy_htod(dev, x)
    out = rand_bytes(rng, n)
    cuda.memcpy_dtoh(out, dev)
    np.testing.assert_array_equal(out, x)
    d = delta(before)
    assert d["staged_htod"] == 1 and d["staged_dtoh"] == 1 and d["staged_bytes"] == 2 * n
    assert d["below_threshold"] == 0
    s = cuda.staging_stats()
    # the caller starts at once; helpers join as they wake (maybe none: the
    # stand-in's copies are quick)
    assert 1 <= s["last_threads"] <= 3 and s["last_piece"] == 64 * KIB
    assert s["helper_threads"] >= 2

    small = rand_bytes(rng, MIB - 1)  # one byte under the threshold
    before = cuda.staging_stats()
    cuda.memcpy_htod(dev, small)
    back = np.zeros_like(small)
    cuda.memcpy_dtoh(back, dev)
    np.testing.assert_array_equal(back, small)
    d = delta(before)
    assert d["staged_htod"] == 0 and d["staged_dtoh"] == 0 and d["below_threshold"] == 2

    staging(threshold=0)  # off
    before = cuda.staging_stats()
    cuda.memcpy_htod(dev, x)
    assert delta(before)["staged_htod"] == 0


@pytest.mark.driver
def test_page_locked_memory_is_not_staged(ctx, rng, staging):
    staging(threshold=256 * KIB, threads=2, chunk=64 * KIB)
    n = MIB + 3
    h = cuda.pagelocked_empty(n, np.uint8)
    h[:] = rand_bytes(rng, n)
    dev = cuda.mem_alloc(n)
    before = cuda.staging_stats()
    cuda.memcpy_htod(dev, h)
    out = cuda.pagelocked_zeros_like(h)
    cuda.memcpy_dtoh(out, dev)
    np.testing.assert_array_equal(out, h)
    d = delta(before)
    assert d["pinned"] == 2 and d["staged_htod"] == 0 and d["staged_dtoh"] == 0


P = 64 * KIB  # the piece size with chunk=64 KiB


@pytest.mark.driver
@pytest.mark.parametrize("threads", [1, 2, 3, 16])
@pytest.mark.parametrize(
    "n, hoff, doff",
    [
        (P, 0, 0),
        (P + 1, 1, 3),
        (3 * P - 1, 7, 0),
        (3 * P, 0, 5),
        (3 * P + 1, 13, 1),
        (7 * P + 12345, 4095, 4096),
        (MIB + 7, 3, 17),
        (40 * P - 3, 1, 2),
    ],
)
def test_staged_bytes_at_piece_boundaries(ctx, rng, staging, threads, n, hoff, doff):
    """Every byte lands, nothing around it is touched, on the device and on
    the host, for sizes around piece boundaries, unaligned offsets and more
    threads than pieces."""
    staging(threshold=P, threads=threads, chunk=P)
    guard = 64
    dev = cuda.mem_alloc(doff + n + guard)
    cuda.memset_d8(dev, 0x5A, doff + n + guard)
    host = rand_bytes(rng, hoff + n + guard)
    src = host[hoff : hoff + n]  # a view at an odd address
    before = cuda.staging_stats()
    cuda.memcpy_htod(int(dev) + doff, src)
    whole = np.empty(doff + n + guard, np.uint8)
    cuda.memcpy_dtoh(whole, dev)  # staged too: checks the device bytes
    assert (whole[:doff] == 0x5A).all() and (whole[doff + n :] == 0x5A).all()
    np.testing.assert_array_equal(whole[doff : doff + n], src)
    back_host = rand_bytes(rng, hoff + n + guard)
    keep = back_host.copy()
    cuda.memcpy_dtoh(back_host[hoff : hoff + n], int(dev) + doff)
    np.testing.assert_array_equal(back_host[hoff : hoff + n], src)
    np.testing.assert_array_equal(back_host[:hoff], keep[:hoff])
    np.testing.assert_array_equal(back_host[hoff + n :], keep[hoff + n :])
    d = delta(before)
    assert d["staged_htod"] == 1 and d["staged_dtoh"] == 2
    npieces = -(-n // P)
    assert 1 <= cuda.staging_stats()["last_threads"] <= min(threads, npieces)


@pytest.mark.driver
@pytest.mark.parametrize("n", [5 * MIB + 13, 17 * MIB + 1])
def test_pieces_follow_the_copy_size(ctx, rng, staging, n):
    """With a large chunk, a copy is cut into about four pieces a thread
    (64 KiB multiples, at least `piece`, at most the chunk)."""
    staging(threshold=MIB, threads=3, chunk=2 * MIB)
    x = rng.standard_normal(n // 8)
    dev = cuda.mem_alloc(x.nbytes)
    cuda.memcpy_htod(dev, x)
    out = np.empty_like(x)
    cuda.memcpy_dtoh(out, dev)
    np.testing.assert_array_equal(out, x)
    want = -(-x.nbytes // 12)
    want = -(-want // (64 * KIB)) * 64 * KIB
    assert cuda.staging_stats()["last_piece"] == min(max(want, 256 * KIB), 2 * MIB)
    staging(piece=1024 * KIB)  # the smallest piece is a setting
    cuda.memcpy_dtoh(out, dev)
    np.testing.assert_array_equal(out, x)
    assert cuda.staging_stats()["last_piece"] == min(max(want, 1024 * KIB), 2 * MIB)


@pytest.mark.driver
def test_threads_copying_at_once_all_land(ctx, rng, staging):
    """Copies from four threads into one context: one staged at a time, the
    others the driver's; every byte right, and every copy counted once."""
    staging(threshold=MIB, threads=3, chunk=64 * KIB)
    n, rounds = 2 * MIB + 5, 4
    srcs = [rand_bytes(rng, n) for _ in range(4)]
    outs = [np.zeros(n, np.uint8) for _ in range(4)]
    errors = []
    before = cuda.staging_stats()

    def work(i):
        try:
            ctx.push()
            try:
                d = cuda.mem_alloc(n)
                for _ in range(rounds):
                    cuda.memcpy_htod(d, srcs[i])
                    cuda.memcpy_dtoh(outs[i], d)
                    np.testing.assert_array_equal(outs[i], srcs[i])
            finally:
                cuda.Context.pop()
        except Exception as e:  # reported below
            errors.append(e)

    ts = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert errors == []
    d = delta(before)
    assert d["staged_htod"] + d["staged_dtoh"] + d["busy"] == 4 * rounds * 2
    assert d["staged_htod"] >= 1


@pytest.mark.driver
def test_settings_changed_during_copies_each_copy_is_whole(ctx, rng, staging):
    """Defect 16: another thread changes the settings while copies run with
    the GIL released; each copy runs with the settings it started with (a
    snapshot taken under the GIL) and every byte is right."""
    staging(threshold=MIB, threads=4, chunk=64 * KIB)
    stop = threading.Event()
    changes = [0]

    def flip():
        configs = [(4, 64 * KIB), (2, 128 * KIB), (7, 64 * KIB), (1, 256 * KIB)]
        i = 0
        while not stop.is_set():
            t, c = configs[i % len(configs)]
            cuda.set_staging(threads=t, chunk=c)
            changes[0] += 1
            i += 1
            time.sleep(0.001)

    t = threading.Thread(target=flip)
    t.start()
    try:
        dev = cuda.mem_alloc(3 * MIB)
        for k in range(30):
            n = 3 * MIB - int(rng.integers(0, 4096))
            x = rand_bytes(rng, n)
            cuda.memcpy_htod(dev, x)
            out = np.zeros(n, np.uint8)
            cuda.memcpy_dtoh(out, dev)
            np.testing.assert_array_equal(out, x)
    finally:
        stop.set()
        t.join()
    assert changes[0] > 0


@pytest.mark.standin
def test_a_running_copy_keeps_its_settings(standin, ctx, rng, staging):
    """Defect 16: the settings are changed from another thread once the
    stand-in has seen the copy's first pieces (tried until the change lands
    while the copy runs: threads are scheduled by the OS); that copy finishes
    with the old thread count and piece size, the next one uses the new."""
    n = 64 * MIB + 3
    pieces = -(-n // (64 * KIB))
    x = rand_bytes(rng, n)
    dev = cuda.mem_alloc(n)
    for attempt in range(10):
        staging(threshold=MIB, threads=4, chunk=64 * KIB)
        cuda.memcpy_htod(dev, x[:MIB])  # the helpers exist before the copy
        start = standin.calls("cuMemcpyHtoDAsync")
        changed_at = []

        def change_when_running():
            give_up = time.monotonic() + 30
            while standin.calls("cuMemcpyHtoDAsync") < start + 2 and time.monotonic() < give_up:
                pass
            cuda.set_staging(threads=2, chunk=128 * KIB)  # needs the GIL: the copy let it go
            changed_at.append(standin.calls("cuMemcpyHtoDAsync"))

        t = threading.Thread(target=change_when_running)
        standin.delay("cuMemcpyHtoDAsync", 1)  # the copy outlasts the change on a busy host
        t.start()
        try:
            cuda.memcpy_htod(dev, x)
        finally:
            standin.delay("cuMemcpyHtoDAsync", 0)
        t.join()
        assert standin.calls("cuMemcpyHtoDAsync") == start + pieces
        s = cuda.staging_stats()
        assert (s["last_threads"], s["last_piece"]) == (4, 64 * KIB)
        assert cuda.staging_settings()["threads"] == 2
        if changed_at[0] < start + pieces:
            break  # the change came while the copy ran
    else:
        pytest.fail("in 10 tries the settings never changed while the copy ran")
    out = np.zeros(n, np.uint8)
    cuda.memcpy_dtoh(out, dev)
    np.testing.assert_array_equal(out, x)
    s = cuda.staging_stats()
    assert (s["last_threads"], s["last_piece"]) == (2, 128 * KIB)


@pytest.mark.standin
@pytest.mark.parametrize(
    "routine, nth",
    [
        ("cuMemcpyHtoDAsync", 1),
        ("cuMemcpyHtoDAsync", 5),
        ("cuEventRecord", 3),
        ("cuEventSynchronize", 2),
        ("cuStreamSynchronize", 1),
        ("cuStreamSynchronize", 2),
    ],
)
def test_a_failed_piece_is_an_error_and_the_next_copy_is_whole(
    standin, ctx, rng, staging, routine, nth
):
    staging(threshold=MIB, threads=3, chunk=64 * KIB)
    n = 2 * MIB + 77
    dev = cuda.mem_alloc(n)
    cuda.memcpy_htod(dev, rand_bytes(rng, n))  # helpers made
    standin.fail(routine, nth, 999)
    with pytest.raises(
        cuda.Error, match=r"^%s( \(staged\))? failed: CUDA_ERROR_UNKNOWN" % routine
    ) as e:
        cuda.memcpy_htod(dev, rand_bytes(rng, n))
    assert e.value.code == 999
    assert standin.fired()
    x = rand_bytes(rng, n)
    cuda.memcpy_htod(dev, x)
    out = np.zeros(n, np.uint8)
    cuda.memcpy_dtoh(out, dev)
    np.testing.assert_array_equal(out, x)


@pytest.mark.standin
@pytest.mark.parametrize(
    "routine, nth",
    [
        ("cuMemcpyDtoHAsync", 4),
        ("cuEventSynchronize", 1),
        ("cuEventSynchronize", 6),
    ],
)
def test_a_failed_piece_out_is_an_error_and_the_next_copy_is_whole(
    standin, ctx, rng, staging, routine, nth
):
    staging(threshold=MIB, threads=3, chunk=64 * KIB)
    n = 2 * MIB + 77
    x = rand_bytes(rng, n)
    dev = cuda.mem_alloc(n)
    cuda.memcpy_htod(dev, x)
    out = np.zeros(n, np.uint8)
    cuda.memcpy_dtoh(out, dev)
    standin.fail(routine, nth, 999)
    with pytest.raises(cuda.Error, match=r"^%s \(staged\) failed: CUDA_ERROR_UNKNOWN" % routine):
        cuda.memcpy_dtoh(out, dev)
    out = np.zeros(n, np.uint8)
    cuda.memcpy_dtoh(out, dev)
    np.testing.assert_array_equal(out, x)


# ---- issue 27: the caller starts at once, helpers join, pause, prefault ----


def fresh_pages(n):
    """n bytes of never-touched anonymous memory (np.empty may come from
    malloc's reused, resident heap)."""
    import mmap

    return np.frombuffer(mmap.mmap(-1, n, flags=mmap.MAP_PRIVATE), np.uint8)


@pytest.mark.standin
@pytest.mark.parametrize("direction", ["htod", "dtoh"])
def test_helpers_join_a_copy_of_slow_pieces(standin, ctx, rng, staging, direction):
    """The caller starts alone; helpers claim pieces as they wake: with
    1 ms a piece (129 pieces) every thread ends up copying some."""
    staging(threshold=MIB, threads=4, chunk=64 * KIB, spin_us=0)
    n = 8 * MIB + 11
    x = rand_bytes(rng, n)
    dev = cuda.mem_alloc(n)
    cuda.memcpy_htod(dev, x)  # helpers made
    routine = "cuMemcpyHtoDAsync" if direction == "htod" else "cuMemcpyDtoHAsync"
    y = rand_bytes(rng, n)
    out = rand_bytes(rng, n)
    time.sleep(0.05)  # helpers asleep (spin_us=0)
    before = cuda.staging_stats()
    standin.delay(routine, 1)
    try:
        if direction == "htod":
            cuda.memcpy_htod(dev, y)
        else:
            cuda.memcpy_dtoh(out, dev)
    finally:
        standin.delay(routine, 0)
    s = cuda.staging_stats()
    assert s["last_threads"] == 4, s
    assert s["helper_wakeups"] - before["helper_wakeups"] >= 1
    back = np.zeros(n, np.uint8)
    cuda.memcpy_dtoh(back, dev)
    np.testing.assert_array_equal(back, y if direction == "htod" else x)
    if direction == "dtoh":
        np.testing.assert_array_equal(out, x)


@pytest.mark.standin
def test_helpers_wake_while_the_default_stream_drains(standin, ctx, rng, staging):
    """A staged copy nudges sleeping helpers before it waits for the legacy
    default stream (here 30 ms: the stand-in's cuStreamSynchronize delayed,
    as behind a kernel): they poll by the time the copy is posted, none is
    woken late.  With spin_us=0 the nudged helpers sleep again at once, and
    the copy finds them asleep (the counter's control)."""
    n = 2 * MIB + 3
    x = rand_bytes(rng, n)
    dev = cuda.mem_alloc(n)
    for spin_us, late in ((100000, False), (0, True)):
        staging(threshold=MIB, threads=3, chunk=64 * KIB, spin_us=0)
        cuda.memcpy_htod(dev, rand_bytes(rng, n))  # helpers exist, and sleep at once
        time.sleep(0.03)
        staging(spin_us=spin_us)
        before = cuda.staging_stats()
        standin.delay("cuStreamSynchronize", 30)
        try:
            cuda.memcpy_htod(dev, x)
        finally:
            standin.delay("cuStreamSynchronize", 0)
        d = delta(before)
        assert d["staged_htod"] == 1 and d["helper_wakeups"] >= 1, d
        assert (d["late_wakeups"] > 0) == late, (spin_us, d)
        out = np.zeros(n, np.uint8)
        cuda.memcpy_dtoh(out, dev)
        np.testing.assert_array_equal(out, x)


@pytest.mark.driver
@pytest.mark.parametrize("spin_us", [0, 300])
def test_copies_after_a_pause_are_whole(ctx, rng, staging, spin_us):
    """A staged copy 50 ms after the last (helpers asleep) starts on the
    calling thread at once: every byte right, at sizes around the threshold
    and the pieces, both ways; the path counters say it was staged."""
    staging(threshold=MIB, threads=6, chunk=2 * MIB, piece=256 * KIB, spin_us=spin_us)
    dev = cuda.mem_alloc(9 * MIB)
    for n in (MIB, MIB + 1, 2 * MIB - 3, 3 * MIB + 4097, 9 * MIB):
        x = rand_bytes(rng, n)
        time.sleep(0.05)
        before = cuda.staging_stats()
        cuda.memcpy_htod(dev, x)
        out = fresh_pages(n + 1)[1:]  # odd address, never touched
        time.sleep(0.05)
        cuda.memcpy_dtoh(out, dev)
        np.testing.assert_array_equal(out, x)
        d = delta(before)
        assert (d["staged_htod"], d["staged_dtoh"]) == (1, 1), (n, d)


@pytest.mark.driver
def test_a_small_copy_while_the_helpers_sleep_is_plain_and_wakes_them(ctx, rng, staging):
    """Below `cold` bytes, a copy made while every helper sleeps takes the
    plain driver call (counted as cold) and wakes them, so the copy after it
    is staged; from `cold` up, or with cold=0, a copy after a pause is
    staged.  Every byte right each time."""
    staging(threshold=MIB, threads=4, chunk=2 * MIB, piece=256 * KIB, spin_us=0, cold=4 * MIB)
    dev = cuda.mem_alloc(5 * MIB)
    x = rand_bytes(rng, 2 * MIB)
    cuda.memcpy_htod(dev, x)  # makes the helpers
    for htod in (True, False):
        time.sleep(0.05)  # spin_us=0: all asleep by now
        before = cuda.staging_stats()
        y = rand_bytes(rng, 2 * MIB)
        out = np.empty_like(y)
        if htod:
            cuda.memcpy_htod(dev, y)
            cuda.memcpy_dtoh(out, dev)  # right after: staged or cold, whole
        else:
            cuda.memcpy_htod(dev, y)
            time.sleep(0.05)
            before = cuda.staging_stats()
            cuda.memcpy_dtoh(out, dev)
        np.testing.assert_array_equal(out, y)
        d = delta(before)
        assert d["cold"] >= 1 and d["staged_htod" if htod else "staged_dtoh"] == 0, d
    # woken by the cold copy (they poll spin_us once awake): the next copy,
    # once they are up, is staged
    # (a few tries: on a loaded machine the woken helpers may not be
    # scheduled within their 100 ms of polling, and sleep again first)
    staging(spin_us=100000)
    for _ in range(5):
        time.sleep(0.2)  # asleep again after their 100 ms
        before = cuda.staging_stats()
        y = rand_bytes(rng, 2 * MIB)
        cuda.memcpy_htod(dev, y)
        give_up = time.monotonic() + 2
        while (
            cuda.staging_stats()["helper_wakeups"] - before["helper_wakeups"] < 3
            and time.monotonic() < give_up
        ):
            time.sleep(0.001)
        cuda.memcpy_htod(dev, y[::-1].copy())
        d = delta(before)
        assert d["cold"] >= 1, d  # the first copy of each try: the helpers slept
        if (d["cold"], d["staged_htod"]) == (1, 1):
            break
    assert (d["cold"], d["staged_htod"]) == (1, 1), d
    out = np.empty_like(y)
    cuda.memcpy_dtoh(out, dev)
    np.testing.assert_array_equal(out, y[::-1])
    out = np.empty_like(y)
    cuda.memcpy_dtoh(out, dev)
    np.testing.assert_array_equal(out, y[::-1])
    # from cold bytes up: staged after a pause too
    staging(spin_us=0)
    z = rand_bytes(rng, 4 * MIB + 3)
    time.sleep(0.05)
    before = cuda.staging_stats()
    cuda.memcpy_htod(dev, z)
    d = delta(before)
    assert (d["cold"], d["staged_htod"]) == (0, 1), d
    out = np.empty_like(z)
    cuda.memcpy_dtoh(out, dev)
    np.testing.assert_array_equal(out, z)


@pytest.mark.driver
def test_back_to_back_copies_find_the_helpers_awake(ctx, rng, staging):
    """Within spin_us of their last piece the helpers poll instead of
    sleeping: copies back to back wake none (0.1 s of polling covers a busy
    host's scheduling gaps)."""
    staging(threshold=MIB, threads=3, chunk=64 * KIB, spin_us=100000)
    n = 2 * MIB + 1
    x = rand_bytes(rng, n)
    out = np.zeros(n, np.uint8)
    c = cuda.Device(0).make_context()  # helpers started now, polling from the start
    try:
        dev = cuda.mem_alloc(n)
        before = cuda.staging_stats()
        for _ in range(5):
            cuda.memcpy_htod(dev, x)
            cuda.memcpy_dtoh(out, dev)
        np.testing.assert_array_equal(out, x)
        d = delta(before)
        dev.free()
    finally:
        cuda.Context.pop()
        c.detach()
    assert d["staged_htod"] == 5 and d["staged_dtoh"] == 5
    assert d["helper_wakeups"] == 0, d


@pytest.mark.driver
@pytest.mark.parametrize(
    "n",
    [
        256 * KIB - 1,
        256 * KIB,
        256 * KIB + 1,
        3 * 256 * KIB + 7,
        MIB + 1,
        8 * MIB + 3,
        13 * MIB - 5,
    ],
)
def test_the_piece_setting_sets_the_smallest_piece(ctx, rng, staging, n):
    staging(threshold=64 * KIB, threads=2, chunk=MIB, piece=256 * KIB)
    x = rng.integers(0, 256, n, dtype=np.uint8)
    dev = cuda.mem_alloc(n)
    cuda.memcpy_htod(dev, x)
    out = fresh_pages(n)
    cuda.memcpy_dtoh(out, dev)
    np.testing.assert_array_equal(out, x)
    want = -(-n // 8)  # four pieces a thread
    want = -(-want // (64 * KIB)) * 64 * KIB
    assert cuda.staging_stats()["last_piece"] == min(max(want, 256 * KIB), MIB)


@pytest.mark.driver
def test_prefault_faults_a_fresh_destination_in(ctx, rng, staging):
    """prefault=1: a fresh destination's pages are populated ahead of the
    memcpy (counted), a resident one's are not touched twice, prefault=0
    leaves them to the memcpy; the bytes are right every time."""
    staging(threshold=MIB, threads=3, chunk=256 * KIB, prefault=1)
    n = 8 * MIB + 123
    x = rand_bytes(rng, n)
    dev = cuda.mem_alloc(n)
    cuda.memcpy_htod(dev, x)
    out = fresh_pages(n + 4096)[5 : n + 5]  # unaligned, with pages either side
    before = cuda.staging_stats()
    cuda.memcpy_dtoh(out, dev)
    np.testing.assert_array_equal(out, x)
    got = delta(before)["prefault_bytes"]
    # pieces whose first page was not resident: all of them, or (transparent
    # huge pages on) those that start a huge page the pieces before had not
    assert 0 < got <= n, got
    before = cuda.staging_stats()
    cuda.memcpy_dtoh(out, dev)  # now resident
    np.testing.assert_array_equal(out, x)
    assert delta(before)["prefault_bytes"] == 0
    staging(prefault=0)
    out = fresh_pages(n)
    before = cuda.staging_stats()
    cuda.memcpy_dtoh(out, dev)
    np.testing.assert_array_equal(out, x)
    assert delta(before)["prefault_bytes"] == 0
    staging(prefault=1)  # host to device never prefaults
    before = cuda.staging_stats()
    cuda.memcpy_htod(dev, fresh_pages(n))
    assert delta(before)["prefault_bytes"] == 0
    back = rand_bytes(rng, n)
    cuda.memcpy_dtoh(back, dev)
    assert not back.any()  # untouched anonymous memory reads as zeros


@pytest.mark.driver
def test_many_short_jobs_back_to_back(ctx, rng, staging):
    """200 staged copies of one to a few pieces, spin on and off: helpers
    that wake for a job that has ended must leave it untouched (the gate);
    every copy's bytes are right."""
    staging(threshold=64 * KIB, threads=8, chunk=64 * KIB, piece=64 * KIB)
    dev = cuda.mem_alloc(400 * KIB)
    for i in range(200):
        if i % 50 == 0:
            staging(spin_us=(0, 20, 300, 0)[i // 50])
        n = int(rng.integers(64 * KIB, 400 * KIB))
        x = rand_bytes(rng, n)
        cuda.memcpy_htod(dev, x)
        out = np.zeros(n, np.uint8)
        cuda.memcpy_dtoh(out, dev)
        np.testing.assert_array_equal(out, x)


@pytest.mark.driver
def test_contexts_stage_at_once_from_several_threads(rng, staging):
    """Four threads, each with its own context (so its own helpers): their
    staged copies run at the same time; every byte right, none took the
    busy path, and every helper is joined at detach."""
    import gc

    staging(threshold=MIB, threads=3, chunk=64 * KIB, spin_us=50)
    cuda.init()
    base = cuda.staging_stats()["helper_threads"]
    seeds = rng.integers(0, 1 << 30, 4)
    errors = []
    before = cuda.staging_stats()

    def work(i):
        try:
            r = np.random.default_rng(int(seeds[i]))
            c = cuda.Device(0).make_context()
            try:
                d = cuda.mem_alloc(3 * MIB)
                for _ in range(6):
                    n = int(r.integers(MIB, 3 * MIB))
                    x = rand_bytes(r, n)
                    cuda.memcpy_htod(d, x)
                    out = fresh_pages(n)
                    cuda.memcpy_dtoh(out, d)
                    np.testing.assert_array_equal(out, x)
                d.free()
            finally:
                cuda.Context.pop()
                c.detach()
        except Exception as e:  # reported below
            errors.append(e)

    ts = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert errors == []
    d = delta(before)
    assert d["staged_htod"] == 24 and d["staged_dtoh"] == 24 and d["busy"] == 0
    gc.collect()
    assert cuda.staging_stats()["helper_threads"] == base


@pytest.mark.driver
def test_get_of_a_large_array_lands_in_its_own_aligned_mapping(ctx, rng):
    """GPUArray.get() of 32 MiB or more returns an array over its own
    2 MiB-aligned anonymous mapping, a HostBlock (staging's pieces start on
    huge pages; tests/memory/test_host_cache.py has its recycling), writable, equal
    to what went in, for 1-D, 2-D C and F order; a smaller one is NumPy's
    (glibc recycles resident memory for it).  (Strided views:
    test_gpu_get_of_fresh_arrays.)"""
    from pygpu import gpuarray

    def owner(a):
        while True:
            if isinstance(a, memoryview):
                a = a.obj
            elif getattr(a, "base", None) is not None:  # ndarray, as_strided's DummyArray
                a = a.base
            else:
                return a

    x = rng.standard_normal((8 * MIB + 3,)).astype(np.float32)
    y = gpuarray.to_gpu(x).get()
    np.testing.assert_array_equal(y, x)
    assert isinstance(owner(y), cuda.HostBlock) and owner(y).size == x.nbytes
    assert y.ctypes.data % (2 * MIB) == 0 and y.flags.writeable and y.flags.c_contiguous
    y[:] = 1  # writable memory of its own
    assert y.sum() == x.size
    for a in (
        rng.standard_normal((2100, 2000)),
        np.asfortranarray(rng.standard_normal((2000, 2100))),
    ):
        g = gpuarray.to_gpu(a)
        b = g.get()
        np.testing.assert_array_equal(b, a)
        assert (
            b.flags.c_contiguous == a.flags.c_contiguous
            and b.flags.f_contiguous == a.flags.f_contiguous
        )
        assert b.ctypes.data % (2 * MIB) == 0
    small = rng.standard_normal(4 * MIB - 1)  # just under 32 MiB: np.empty's
    s = gpuarray.to_gpu(small).get()
    np.testing.assert_array_equal(s, small)
    assert not isinstance(owner(s), cuda.HostBlock)
    import pickle

    np.testing.assert_array_equal(pickle.loads(pickle.dumps(y)), y)


@pytest.mark.gpu
@pytest.mark.parametrize("mib", [1, 5, 64, 256])
def test_gpu_get_of_fresh_arrays(ctx, rng, mib):
    """.get() into a new array with the default settings after a pause
    (helpers asleep): dense 1-D and 2-D, C and F order, and a strided view
    (gathered on the device first), every element right; the staged path
    and, for a fresh destination, the prefault counted."""
    from pygpu import gpuarray

    n = mib * MIB // 4 + 3
    x = rng.standard_normal(n).astype(np.float32)
    g = gpuarray.to_gpu(x)
    time.sleep(0.05)
    before = cuda.staging_stats()
    cache_before = cuda.host_cache_stats()
    y = g.get()
    np.testing.assert_array_equal(y, x)
    d = delta(before)
    fresh = cuda.host_cache_stats()["misses"] > cache_before["misses"]
    settings = cuda.staging_settings()
    # after the pause every helper sleeps: below `cold` the plain call
    cold = settings["threshold"] <= x.nbytes < settings["cold"]
    staged = x.nbytes >= settings["threshold"] > 0 and not cold
    assert (d["staged_dtoh"], d["cold"]) == (1 if staged else 0, 1 if cold else 0), d
    if staged and x.nbytes >= 32 * MIB and settings["prefault"] and fresh:
        assert d["prefault_bytes"] > 0  # get()'s own new mapping: fresh pages
    a = np.asfortranarray(rng.standard_normal((n // 1000 + 1, 500)).astype(np.float32))
    ga = gpuarray.to_gpu(a)
    time.sleep(0.05)
    np.testing.assert_array_equal(ga.get(), a)
    np.testing.assert_array_equal(ga[::3, 1::2].get(), a[::3, 1::2])
    c = np.ascontiguousarray(a)
    np.testing.assert_array_equal(gpuarray.to_gpu(c)[1::2].get(), c[1::2])


# ---- helpers' lifetime ----


@pytest.mark.driver
def test_helpers_are_joined_at_detach_and_at_dealloc(ctx, rng, staging):
    import gc

    staging(threshold=MIB, threads=5, chunk=64 * KIB)
    base = cuda.staging_stats()["helper_threads"]
    for how in ("detach", "drop"):
        c = cuda.Device(0).make_context()
        try:
            x = rand_bytes(rng, 2 * MIB)
            d = cuda.mem_alloc(x.nbytes)
            cuda.memcpy_htod(d, x)
            out = np.zeros_like(x)
            cuda.memcpy_dtoh(out, d)
            np.testing.assert_array_equal(out, x)
            assert cuda.staging_stats()["helper_threads"] == base + 4
            d.free()
        finally:
            cuda.Context.pop()
        if how == "detach":
            c.detach()
        del c, d
        gc.collect()
        assert cuda.staging_stats()["helper_threads"] == base, how


@pytest.mark.driver
def test_new_settings_remake_the_helpers(ctx, rng, staging):
    staging(threshold=MIB, threads=2, chunk=64 * KIB)
    c = cuda.Device(0).make_context()
    try:
        base = cuda.staging_stats()["helper_threads"]
        x = rand_bytes(rng, 2 * MIB)
        d = cuda.mem_alloc(x.nbytes)
        for threads in (2, 6, 1, 4):
            staging(threads=threads)
            cuda.memcpy_htod(d, x)
            assert cuda.staging_stats()["helper_threads"] == base + threads - 1
            out = np.zeros_like(x)
            cuda.memcpy_dtoh(out, d)
            np.testing.assert_array_equal(out, x)
    finally:
        cuda.Context.pop()
        c.detach()


EXIT_SCRIPT = """
    import threading, numpy as np
    import pygpu.driver as cuda
    cuda.init()
    ctx = cuda.Device(0).retain_primary_context()
    ctx.push()
    cuda.set_staging(threshold=1 << 20, threads=4, chunk=1 << 16)
    x = np.random.default_rng().integers(0, 256, (8 << 20) + 1, dtype=np.uint8)
    d = cuda.mem_alloc(x.nbytes)
    cuda.memcpy_htod(d, x)
    out = np.zeros_like(x)
    cuda.memcpy_dtoh(out, d)
    assert (out == x).all()
    assert cuda.staging_stats()["helper_threads"] == 3
"""


@pytest.mark.driver
def test_exit_with_live_helpers_is_silent():
    r = _run(EXIT_SCRIPT + "    print('ok')\n")
    assert r.returncode == 0 and r.stdout == "ok\n" and r.stderr == "", r.stderr


@pytest.mark.driver
def test_exit_while_a_daemon_thread_copies_is_silent():
    r = _run(
        EXIT_SCRIPT
        + """
    started = threading.Event()
    def loop():
        ctx.push()
        d2 = cuda.mem_alloc(x.nbytes)
        while True:
            cuda.memcpy_htod(d2, x)
            started.set()
    threading.Thread(target=loop, daemon=True).start()
    started.wait()
    print('ok')
    """
    )
    assert r.returncode == 0 and r.stdout == "ok\n" and r.stderr == "", r.stderr


@pytest.mark.standin
def test_a_forked_child_makes_its_own_helpers():
    """The child has none of its parent's threads and starts none (CUDA is
    refused in a child forked after it was initialised); the parent's keep
    working."""
    r = _run(
        EXIT_SCRIPT
        + """
    import os, warnings
    warnings.simplefilter("ignore", DeprecationWarning)   # fork() with threads, 3.12+
    pid = os.fork()
    if pid == 0:
        # none of the parent's helpers; and CUDA itself is refused in a child
        # forked after it was initialised (tests/multi/test_multi.py)
        assert cuda.staging_stats()["helper_threads"] == 0
        y = np.random.default_rng().integers(0, 256, 3 << 20, dtype=np.uint8)
        try:
            cuda.memcpy_htod(d, y)
        except cuda.CudaUnavailableError as e:
            assert "forked from one that had initialised CUDA" in str(e), e
        else:
            raise AssertionError("a forked child used CUDA")
        assert cuda.staging_stats()["helper_threads"] == 0
        print('child ok', flush=True)
        raise SystemExit(0)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    cuda.memcpy_htod(d, x[::-1].copy())
    cuda.memcpy_dtoh(out, d)
    assert (out == x[::-1]).all()
    print('ok')
    """
    )
    assert r.returncode == 0 and r.stdout == "child ok\nok\n" and r.stderr == "", r.stderr


# ---- In / Out / InOut ----

COPY_KERNELS = r"""
extern "C" __global__ void twice(float *x, long long n)
{
    long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (i < n) x[i] *= 2.0f;
}
extern "C" __global__ void add(float *out, const float *a, const float *b, long long n)
{
    long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (i < n) out[i] = a[i] + b[i];
}
"""


@pytest.fixture(scope="module")
def ptx():
    return bytes(compiler.compile(COPY_KERNELS, target="ptx", arch="compute_90"))


@pytest.mark.standin
@pytest.mark.parametrize("use_stream", [False, True])
def test_inout_of_a_large_array_is_staged(standin, ctx, rng, staging, ptx, use_stream):
    """The stand-in runs no kernel: InOut's round trip through the device
    brings back exactly what went in, and both copies went through staging;
    a small array's copies are queued on the stream instead."""
    staging(threshold=MIB, threads=3, chunk=64 * KIB)
    f = cuda.module_from_buffer(ptx).get_function("twice")
    s = cuda.Stream() if use_stream else None
    for _ in range(2):  # a pool block may come back: fresh data each time
        x = rng.standard_normal((MIB + 4097) // 4).astype(np.float32)
        want = x.copy()
        before = cuda.staging_stats()
        f(cuda.InOut(x), np.int64(x.size), block=(256, 1, 1), grid=(1, 1), stream=s)
        np.testing.assert_array_equal(x, want)
        d = delta(before)
        assert d["staged_htod"] == 1 and d["staged_dtoh"] == 1
    small = rng.standard_normal(1000).astype(np.float32)
    want = small.copy()
    before = cuda.staging_stats()
    f(cuda.InOut(small), np.int64(small.size), block=(256, 1, 1), stream=s)
    np.testing.assert_array_equal(small, want)
    d = delta(before)
    assert d["staged_htod"] == 0 and d["staged_dtoh"] == 0


@pytest.mark.standin
def test_in_and_out_of_large_arrays_are_staged(standin, ctx, rng, staging, ptx):
    staging(threshold=MIB, threads=2, chunk=64 * KIB)
    f = cuda.module_from_buffer(ptx).get_function("add")
    n = (2 * MIB + 12) // 4
    a = rng.standard_normal(n).astype(np.float32)
    b = rng.standard_normal(n).astype(np.float32)
    out = np.zeros(n, np.float32)
    before = cuda.staging_stats()
    f(cuda.Out(out), cuda.In(a), cuda.In(b), np.int64(n), block=(256, 1, 1))
    d = delta(before)
    assert d["staged_htod"] == 2 and d["staged_dtoh"] == 1


@pytest.mark.gpu
@pytest.mark.parametrize("use_stream", [False, True])
def test_gpu_inout_and_in_out_through_staging(ctx, rng, staging, ptx, use_stream):
    staging(threshold=4 * MIB)
    mod = cuda.module_from_buffer(ptx)
    twice, add = mod.get_function("twice"), mod.get_function("add")
    s = cuda.Stream() if use_stream else None
    n = (24 * MIB + 4) // 4
    grid = (-(-n // 256), 1)
    for _ in range(2):
        x = rng.standard_normal(n).astype(np.float32)
        want = x * 2
        before = cuda.staging_stats()
        twice(cuda.InOut(x), np.int64(n), block=(256, 1, 1), grid=grid, stream=s)
        np.testing.assert_array_equal(x, want)
        d = delta(before)
        assert d["staged_htod"] == 1 and d["staged_dtoh"] == 1
    a = rng.standard_normal(n).astype(np.float32)
    b = rng.standard_normal(n).astype(np.float32)
    out = np.zeros(n, np.float32)
    before = cuda.staging_stats()
    add(cuda.Out(out), cuda.In(a), cuda.In(b), np.int64(n), block=(256, 1, 1), grid=grid, stream=s)
    np.testing.assert_array_equal(out, a + b)
    d = delta(before)
    assert d["staged_htod"] == 2 and d["staged_dtoh"] == 1


@pytest.mark.gpu
@pytest.mark.parametrize("mib", [1, 4, 16, 64, 256])
def test_gpu_default_settings_copies(ctx, rng, mib):
    """With the default settings, at each size: every byte right both ways,
    through whichever path the threshold picks."""
    n = mib * MIB + 3
    x = rand_bytes(rng, n)
    dev = cuda.mem_alloc(n)
    before = cuda.staging_stats()
    cuda.memcpy_htod(dev, x)
    out = np.zeros_like(x)
    cuda.memcpy_dtoh(out, dev)
    np.testing.assert_array_equal(out, x)
    settings = cuda.staging_settings()
    d = delta(before)
    if n >= settings["threshold"] > 0:
        # staged, or below `cold` with the helpers asleep the plain call
        assert d["staged_htod"] + d["cold"] >= 1 and d["staged_htod"] <= 1, d
        if n >= settings["cold"]:
            assert d["staged_htod"] == 1, d
    else:
        assert d["staged_htod"] == 0 and d["cold"] == 0, d


# ---- benchmarks/staging_sweep.py ----

SWEEP = os.path.join(os.path.dirname(HERE), "benchmarks", "staging_sweep.py")


def test_sweep_without_a_driver_says_so_and_exits_0():
    r = subprocess.run(
        [sys.executable, SWEEP],
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ, PYGPU_LIBCUDA="/nonexistent/libcuda.so.1"),
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(
        "staging_sweep: no GPU (no CUDA driver: could not load /nonexistent/libcuda.so.1"
    ), r.stdout
    assert r.stdout.rstrip().endswith("nothing measured")


@pytest.mark.driver
def test_sweep_quick_run_prints_the_tables_goals_and_a_recommendation(tmp_path):
    out = tmp_path / "sweep.json"
    r = subprocess.run(
        [sys.executable, SWEEP, "--quick", "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    for series in (
        "htod",
        "htod-pause",
        "dtoh",
        "dtoh-pause",
        "fresh",
        "fresh-pause",
        "get",
        "get-pause",
        "dtoh-busy",
    ):
        assert "\n%s, GB/s\n| size             |     1M |     4M |\n" % series in r.stdout
    assert "| plain            |" in r.stdout and "| pinned           |" in r.stdout
    assert "| defaults         |" in r.stdout
    assert "goal: get() of 4M into a fresh array >= 50% of pinned D->H: " in r.stdout
    assert "goal: staged beats plain from 1 MiB up after a pause (both directions): " in r.stdout
    assert "\nrecommended " in r.stdout and "PYGPU_STAGING_THRESHOLD=" in r.stdout
    import json

    data = json.load(open(out))
    assert data["sizes"] == ["1M", "4M"] and set(data["plain"]) == {
        "htod",
        "htod-pause",
        "dtoh",
        "dtoh-pause",
        "fresh",
        "fresh-pause",
        "get",
        "get-pause",
        "dtoh-busy",
    }
    assert list(data["staged"]) == ["defaults"]
    assert all(v > 0 for fig in data["staged"]["defaults"].values() for v in fig.values())
    assert set(data["goals"]) == {"get_fresh_vs_pinned", "staged_from_1MiB_after_a_pause"}


def _sweep_module():
    import importlib.util

    spec = importlib.util.spec_from_file_location("staging_sweep", SWEEP)
    sw = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(sw)
    return sw


def test_sweep_threshold_rule():
    """The rule on made-up figures: the smallest size from which staged
    beats plain by the margin at every larger size, over every series."""
    sw = _sweep_module()
    sizes = [1, 2, 4, 8]
    plain = {"a": {s: 10.0 for s in sizes}, "b": {s: 10.0 for s in sizes}}
    staged = {
        "a": {1: 5, 2: 12, 4: 20, 8: 30},  # wins from 2
        "b": {1: 50, 2: 9, 4: 40, 8: 50},
    }  # from 4
    assert sw.threshold_for(sizes, plain, staged, ["a"], 0.03) == 2
    assert sw.threshold_for(sizes, plain, staged, ["a", "b"], 0.03) == 4
    staged["b"][8] = 10.2  # within the margin is not a win
    assert sw.threshold_for(sizes, plain, staged, ["a", "b"], 0.03) is None
    assert sw.gmean_speedup(sizes, plain, staged, ["a"], 4) == pytest.approx(math_gmean([2, 3]))


def test_sweep_configs_change_one_knob_at_a_time():
    sw = _sweep_module()
    a = sw.parse_args([])
    defaults = {
        "threshold": MIB,
        "threads": 6,
        "chunk": 2 * MIB,
        "piece": 256 * KIB,
        "spin_us": 300,
        "prefault": 1,
    }
    got = sw.configs(a, defaults)
    assert got[0] == ("defaults", None, {})
    assert [n for n, _, _ in got[1:]] == [
        "piece=64K",
        "piece=128K",
        "piece=512K",
        "piece=1M",
        "spin_us=0",
        "spin_us=50",
        "spin_us=2000",
        "prefault=0",
        "threads=4",
        "threads=8",
        "threads=12",
        "chunk=4M",
    ]
    assert all(len(change) == 1 for _, _, change in got[1:])
    assert sw.parse_size("256K") == 256 * KIB and sw.label(256 * MIB) == "256M"
    q = sw.parse_args(["--quick"])
    assert q.sizes == [MIB, 4 * MIB] and sw.configs(q, defaults) == [("defaults", None, {})]


def math_gmean(xs):
    import math

    return math.exp(sum(math.log(x) for x in xs) / len(xs))
