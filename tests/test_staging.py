"""Pageable-copy staging (src/staging.c): which path each copy takes, the
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

HERE = os.path.dirname(os.path.abspath(__file__))
KIB, MIB = 1 << 10, 1 << 20


def rand_bytes(rng, n):
    return rng.integers(0, 256, n, dtype=np.uint8)


def delta(before):
    now = cuda.staging_stats()
    return {k: now[k] - before[k] for k in now}


@pytest.fixture
def staging():
    """Restores the settings the test changes."""
    old = cuda.set_staging()
    yield cuda.set_staging
    cuda.set_staging(**old)


def _run(code, **env):
    e = dict(os.environ)
    e.update(env)
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=e,
                          capture_output=True, text=True, timeout=120, cwd=HERE)


# ---- settings (no driver needed) ----

def test_settings_round_trip(staging):
    staging(threshold=3 * MIB, threads=5, chunk=512 * KIB)
    assert cuda.staging_settings() == {"threshold": 3 * MIB, "threads": 5, "chunk": 512 * KIB}
    old = staging(threads=2)             # None keeps the others
    assert old == {"threshold": 3 * MIB, "threads": 5, "chunk": 512 * KIB}
    assert cuda.staging_settings() == {"threshold": 3 * MIB, "threads": 2, "chunk": 512 * KIB}
    staging(**old)
    assert cuda.staging_settings() == old
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


@pytest.mark.parametrize("kwargs, exc, match", [
    ({"threads": 0}, ValueError, r"set_staging\(\): threads must be 1 to 16, not 0"),
    ({"threads": 17}, ValueError, r"set_staging\(\): threads must be 1 to 16, not 17"),
    ({"threads": 2 ** 70}, ValueError, r"set_staging\(\): threads is too large"),
    ({"chunk": 4096}, ValueError, r"set_staging\(\): chunk must be 64 KiB to 256 MiB, not 4096"),
    ({"chunk": 1 << 30}, ValueError, r"chunk must be 64 KiB to 256 MiB, not 1073741824 bytes"),
    ({"threshold": -1}, ValueError, r"set_staging\(\): threshold must be >= 0"),
    ({"threshold": "1M"}, TypeError, r"set_staging\(\): threshold must be an int, not str"),
    ({"threads": 2.0}, TypeError, r"set_staging\(\): threads must be an int, not float"),
    ({"threads": True}, TypeError, r"threads must be an int, not bool"),
])
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
    r = _run(code, PYGPU_STAGING_THRESHOLD="2M", PYGPU_STAGING_THREADS="3",
             PYGPU_STAGING_CHUNK="512KiB")
    assert r.returncode == 0, r.stderr
    assert r.stdout == "{'threshold': 2097152, 'threads': 3, 'chunk': 524288}\n"
    r = _run(code, PYGPU_STAGING_THRESHOLD="0", PYGPU_STAGING_THREADS="",
             PYGPU_STAGING_CHUNK="65536")
    assert r.returncode == 0, r.stderr
    assert r.stdout == "{'threshold': 0, 'threads': 6, 'chunk': 65536}\n"


@pytest.mark.parametrize("var, value, match", [
    ("PYGPU_STAGING_THRESHOLD", "abc",
     r"environment variable PYGPU_STAGING_THRESHOLD='abc' is not a byte count"),
    ("PYGPU_STAGING_THRESHOLD", "-5", r"PYGPU_STAGING_THRESHOLD='-5' is not a byte count"),
    ("PYGPU_STAGING_THRESHOLD", "4 MiBs", r"PYGPU_STAGING_THRESHOLD='4 MiBs' is not"),
    ("PYGPU_STAGING_THRESHOLD", "99999999999999999999", r"is not a byte count"),
    ("PYGPU_STAGING_THREADS", "40",
     r"environment variable PYGPU_STAGING_THREADS: threads must be 1 to 16, not 40"),
    ("PYGPU_STAGING_CHUNK", "1K",
     r"environment variable PYGPU_STAGING_CHUNK: chunk must be 64 KiB to 256 MiB, not 1024"),
])
def test_bad_environment_is_a_clear_error(var, value, match):
    r = _run("""
        import pygpu.driver as cuda
        try:
            cuda.staging_settings()
        except ValueError as e:
            print(e)
    """, **{var: value})
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
    assert s["last_threads"] == 3 and s["last_piece"] == 64 * KIB
    assert s["helper_threads"] >= 2

    small = rand_bytes(rng, MIB - 1)     # one byte under the threshold
    before = cuda.staging_stats()
    cuda.memcpy_htod(dev, small)
    back = np.zeros_like(small)
    cuda.memcpy_dtoh(back, dev)
    np.testing.assert_array_equal(back, small)
    d = delta(before)
    assert d["staged_htod"] == 0 and d["staged_dtoh"] == 0 and d["below_threshold"] == 2

    staging(threshold=0)                 # off
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


P = 64 * KIB      # the piece size with chunk=64 KiB


@pytest.mark.driver
@pytest.mark.parametrize("threads", [1, 2, 3, 16])
@pytest.mark.parametrize("n, hoff, doff", [
    (P, 0, 0), (P + 1, 1, 3), (3 * P - 1, 7, 0), (3 * P, 0, 5), (3 * P + 1, 13, 1),
    (7 * P + 12345, 4095, 4096), (MIB + 7, 3, 17), (40 * P - 3, 1, 2),
])
def test_staged_bytes_at_piece_boundaries(ctx, rng, staging, threads, n, hoff, doff):
    """Every byte lands, nothing around it is touched, on the device and on
    the host, for sizes around piece boundaries, unaligned offsets and more
    threads than pieces."""
    staging(threshold=P, threads=threads, chunk=P)
    guard = 64
    dev = cuda.mem_alloc(doff + n + guard)
    cuda.memset_d8(dev, 0x5A, doff + n + guard)
    host = rand_bytes(rng, hoff + n + guard)
    src = host[hoff:hoff + n]                       # a view at an odd address
    before = cuda.staging_stats()
    cuda.memcpy_htod(int(dev) + doff, src)
    whole = np.empty(doff + n + guard, np.uint8)
    cuda.memcpy_dtoh(whole, dev)                    # staged too: checks the device bytes
    assert (whole[:doff] == 0x5A).all() and (whole[doff + n:] == 0x5A).all()
    np.testing.assert_array_equal(whole[doff:doff + n], src)
    back_host = rand_bytes(rng, hoff + n + guard)
    keep = back_host.copy()
    cuda.memcpy_dtoh(back_host[hoff:hoff + n], int(dev) + doff)
    np.testing.assert_array_equal(back_host[hoff:hoff + n], src)
    np.testing.assert_array_equal(back_host[:hoff], keep[:hoff])
    np.testing.assert_array_equal(back_host[hoff + n:], keep[hoff + n:])
    d = delta(before)
    assert d["staged_htod"] == 1 and d["staged_dtoh"] == 2
    npieces = -(-n // P)
    assert cuda.staging_stats()["last_threads"] == min(threads, npieces)


@pytest.mark.driver
@pytest.mark.parametrize("n", [5 * MIB + 13, 17 * MIB + 1])
def test_pieces_follow_the_copy_size(ctx, rng, staging, n):
    """With a large chunk, a copy is cut into about two pieces a thread
    (64 KiB multiples, at least 256 KiB, at most the chunk)."""
    staging(threshold=MIB, threads=3, chunk=2 * MIB)
    x = rng.standard_normal(n // 8)
    dev = cuda.mem_alloc(x.nbytes)
    cuda.memcpy_htod(dev, x)
    out = np.empty_like(x)
    cuda.memcpy_dtoh(out, dev)
    np.testing.assert_array_equal(out, x)
    want = -(-x.nbytes // 6)
    want = -(-want // (64 * KIB)) * 64 * KIB
    assert cuda.staging_stats()["last_piece"] == min(max(want, 256 * KIB), 2 * MIB)


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
        cuda.memcpy_htod(dev, x[:MIB])            # the helpers exist before the copy
        start = standin.calls("cuMemcpyHtoDAsync")
        changed_at = []

        def change_when_running():
            give_up = time.monotonic() + 30
            while standin.calls("cuMemcpyHtoDAsync") < start + 2 and time.monotonic() < give_up:
                pass
            cuda.set_staging(threads=2, chunk=128 * KIB)   # needs the GIL: the copy let it go
            changed_at.append(standin.calls("cuMemcpyHtoDAsync"))

        t = threading.Thread(target=change_when_running)
        standin.delay("cuMemcpyHtoDAsync", 1)    # the copy outlasts the change on a busy host
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
            break                                  # the change came while the copy ran
    else:
        pytest.fail("in 10 tries the settings never changed while the copy ran")
    out = np.zeros(n, np.uint8)
    cuda.memcpy_dtoh(out, dev)
    np.testing.assert_array_equal(out, x)
    s = cuda.staging_stats()
    assert (s["last_threads"], s["last_piece"]) == (2, 128 * KIB)


@pytest.mark.standin
@pytest.mark.parametrize("routine, nth", [
    ("cuMemcpyHtoDAsync", 1), ("cuMemcpyHtoDAsync", 5), ("cuEventRecord", 3),
    ("cuEventSynchronize", 2), ("cuStreamSynchronize", 1), ("cuStreamSynchronize", 3),
])
def test_a_failed_piece_is_an_error_and_the_next_copy_is_whole(standin, ctx, rng, staging,
                                                               routine, nth):
    staging(threshold=MIB, threads=3, chunk=64 * KIB)
    n = 2 * MIB + 77
    dev = cuda.mem_alloc(n)
    cuda.memcpy_htod(dev, rand_bytes(rng, n))     # helpers made
    standin.fail(routine, nth, 999)
    with pytest.raises(cuda.Error, match=r"^%s( \(staged\))? failed: CUDA_ERROR_UNKNOWN"
                       % routine) as e:
        cuda.memcpy_htod(dev, rand_bytes(rng, n))
    assert e.value.code == 999
    assert standin.fired()
    x = rand_bytes(rng, n)
    cuda.memcpy_htod(dev, x)
    out = np.zeros(n, np.uint8)
    cuda.memcpy_dtoh(out, dev)
    np.testing.assert_array_equal(out, x)


@pytest.mark.standin
@pytest.mark.parametrize("routine, nth", [
    ("cuMemcpyDtoHAsync", 4), ("cuEventSynchronize", 1), ("cuEventSynchronize", 6),
])
def test_a_failed_piece_out_is_an_error_and_the_next_copy_is_whole(standin, ctx, rng,
                                                                   staging, routine, nth):
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
    r = _run(EXIT_SCRIPT + """
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
    """)
    assert r.returncode == 0 and r.stdout == "ok\n" and r.stderr == "", r.stderr


@pytest.mark.standin
def test_a_forked_child_makes_its_own_helpers():
    """The child has none of its parent's threads and starts none (CUDA is
    refused in a child forked after it was initialised); the parent's keep
    working."""
    r = _run(EXIT_SCRIPT + """
    import os, warnings
    warnings.simplefilter("ignore", DeprecationWarning)   # fork() with threads, 3.12+
    pid = os.fork()
    if pid == 0:
        # none of the parent's helpers; and CUDA itself is refused in a child
        # forked after it was initialised (tests/test_multi.py)
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
    """)
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
    for _ in range(2):                  # a pool block may come back: fresh data each time
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
    add(cuda.Out(out), cuda.In(a), cuda.In(b), np.int64(n), block=(256, 1, 1), grid=grid,
        stream=s)
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
    staged = n >= cuda.staging_settings()["threshold"] > 0
    assert delta(before)["staged_htod"] == (1 if staged else 0)


# ---- benchmarks/staging_sweep.py ----

SWEEP = os.path.join(os.path.dirname(HERE), "benchmarks", "staging_sweep.py")


def test_sweep_without_a_driver_says_so_and_exits_0():
    r = subprocess.run([sys.executable, SWEEP], capture_output=True, text=True, timeout=120,
                       env=dict(os.environ, PYGPU_LIBCUDA="/nonexistent/libcuda.so.1"))
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("staging_sweep: no GPU (no CUDA driver: could not load "
                               "/nonexistent/libcuda.so.1"), r.stdout
    assert r.stdout.rstrip().endswith("nothing measured")


@pytest.mark.driver
def test_sweep_quick_run_prints_the_table_and_a_recommendation(tmp_path):
    out = tmp_path / "sweep.json"
    r = subprocess.run([sys.executable, SWEEP, "--quick", "--json", str(out)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "| MiB | H->D plain | H->D staged | D->H plain | D->H staged |" in r.stdout
    assert "\nrecommended: " in r.stdout and "PYGPU_STAGING_THRESHOLD=" in r.stdout
    import json
    data = json.load(open(out))
    assert data["sizes_mib"] == [1, 2] and set(data["plain"]) == {"1", "2"}
    assert all(v > 0 for fig in data["staged"].values() for s in fig.values() for v in s)


def test_sweep_recommendation_rule():
    """The rule on made-up figures: the lowest threshold from which a
    configuration wins everywhere above, scored over the whole sweep."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("staging_sweep", SWEEP)
    sw = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(sw)
    sizes = [1, 2, 4, 8]
    plain = {s: (10.0, 10.0) for s in sizes}
    configs = {
        "a": {1: (5, 5), 2: (12, 12), 4: (20, 20), 8: (30, 30)},      # wins from 2
        "b": {1: (5, 5), 2: (9, 30), 4: (40, 40), 8: (50, 50)},       # from 4, faster there
        "c": {1: (50, 50), 2: (50, 50), 4: (50, 50), 8: (9, 50)},     # loses at the top
    }
    score, threshold, key = sw.recommend(sizes, plain, configs, 0.03)
    want_a = math_gmean([1, 1, 1.2, 1.2, 2, 2, 3, 3])
    want_b = math_gmean([1, 1, 1, 1, 4, 4, 5, 5])
    assert (threshold, key) == ((4, "b") if want_b > want_a else (2, "a"))
    assert score == pytest.approx(max(want_a, want_b))
    assert sw.recommend(sizes, plain, {"c": configs["c"]}, 0.03) == (1.0, 0, None)
    # within the margin is not a win
    assert sw.recommend([1], {1: (10.0, 10.0)}, {"d": {1: (10.2, 10.2)}}, 0.03)[2] is None


def math_gmean(xs):
    import math
    return math.exp(sum(math.log(x) for x in xs) / len(xs))
