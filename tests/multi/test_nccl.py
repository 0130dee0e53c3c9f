"""Collectives: pygpu.nccl (NCCL through nccl4py) and the path pygpu.mpi's
wrapper takes.

Without a GPU: the checks pygpu.nccl makes before NCCL sees a buffer
(contiguity, host memory, operators, complex sums, byte views), the primary
context rule, the context restored after NCCL, and nccl4py resolving
GPUArrays and pygpu streams as they are (pointer, count, dtype, device,
stream handle: no copy), on the driver stand-in; pygpu.mpi's path report
with a stand-in mpi4py.  On GPUs (``gpu``; skipped with the reason where
fewer are visible): every collective against NumPy on random data, with one
rank on 1 GPU and two ranks on 2 GPUs, in one process and one process per
GPU, pygpu streams, the benchmark; the example on 2 GPUs."""

import os
import subprocess
import sys
import textwrap
import types

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("NCCL_NVLS_ENABLE", "0")  # NVLink multicast stays off (device README)

from pygpu import nccl as pnccl  # noqa: E402


def _py(code, env=None):
    e = dict(os.environ)
    e.update(env or {})
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=300,
        env=e,
        cwd=ROOT,
    )


# ---- without a GPU ----


def test_without_nccl4py_the_error_says_what_to_install():
    p = _py("""
        import sys
        sys.modules["nccl"] = None           # nccl4py not installed
        from pygpu import nccl
        assert nccl.available() is False
        try:
            nccl.unique_id()
        except ImportError as e:
            print(e)
    """)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == (
        "pygpu.nccl needs NVIDIA's nccl4py and an NCCL library: pip "
        "install 'pygpu[nccl]' (nccl4py with nvidia-nccl-cu13)"
    )


class CAI:
    def __init__(self, shape, typestr, strides=None):
        self.__cuda_array_interface__ = {
            "shape": shape,
            "typestr": typestr,
            "strides": strides,
            "data": (4096, False),
            "version": 3,
        }


def test_contiguity_is_checked():
    assert pnccl.contiguous(CAI((4, 5), "<f4")) == ((4, 5), np.dtype(np.float32))
    assert pnccl.contiguous(CAI((4, 5), "<f4", (20, 4)))[0] == (4, 5)  # C order
    assert pnccl.contiguous(CAI((4, 5), "<f4", (4, 16)))[0] == (4, 5)  # Fortran order
    assert pnccl.contiguous(CAI((4, 1, 5), "<f8", (40, 8, 8)))[0] == (4, 1, 5)
    assert pnccl.contiguous(CAI((1,), "<f8", (800,)))[0] == (1,)  # one element
    with pytest.raises(
        ValueError,
        match=r"pygpu.nccl: sendbuf is not contiguous \(shape "
        r"\(4, 5\), strides \(40, 8\)\); NCCL takes "
        r"contiguous buffers: copy it first",
    ):
        pnccl.contiguous(CAI((4, 5), "<f4", (40, 8)), "sendbuf")


def test_host_memory_and_other_objects_are_refused():
    with pytest.raises(
        TypeError,
        match=r"pygpu.nccl: buf is in host memory \(ndarray\); "
        r"NCCL takes device arrays",
    ):
        pnccl.contiguous(np.zeros(3), "buf")
    with pytest.raises(TypeError, match="recvbuf must be a device array .* not list"):
        pnccl.contiguous([1, 2], "recvbuf")


def test_operators_by_name():
    assert pnccl._op_code("sum") == (0, "sum")
    assert pnccl._op_code("MAX") == (2, "max")
    assert pnccl._op_code(4) == (4, "avg")
    assert pnccl._op_code(np.int32(7)) == (7, "")  # an operator NCCL made (PreMulSum)
    with pytest.raises(
        ValueError,
        match="op must be one of sum, prod, max, min, avg "
        r"\(or an nccl4py operator\), not 'mean'",
    ):
        pnccl._op_code("mean")
    with pytest.raises(TypeError, match="op must be one of .* or an int .*, not float"):
        pnccl._op_code(1.5)


standin = pytest.mark.standin


@standin
def test_nccl4py_takes_gpuarrays_and_streams_as_they_are(ctx, rng):
    """nccl4py's own buffer resolution (DLPack) and stream resolution
    (__cuda_stream__) on pygpu's objects: the same pointer, no copy."""
    pytest.importorskip("nccl.core", exc_type=ImportError)
    from nccl.core.buffer import NcclBuffer
    from nccl.core.cuda import get_stream_ptr
    from nccl.core.typing import NcclDataType
    from pygpu import driver, gpuarray

    a = gpuarray.to_gpu(rng.standard_normal((3, 5)))
    b = NcclBuffer(a)
    assert (b.ptr, b.count, b.dtype, b.device_id) == (a.ptr, 15, NcclDataType.FLOAT64, 0)
    s = driver.Stream()
    assert get_stream_ptr(s) == s.handle != 0


@standin
def test_communicator_needs_the_primary_context(ctx):
    from pygpu import driver

    other = driver.Device(0).make_context()  # a second, non-primary context
    try:
        with pytest.raises(
            ValueError, match="pygpu.nccl: the context must be its device's primary context"
        ):
            pnccl.Communicator(None, other)
        with pytest.raises(
            ValueError, match="pygpu.nccl: the current context is not its device's primary context"
        ):
            pnccl._primary(None)
    finally:
        driver.Context.pop()
    assert pnccl._primary(None).handle == ctx.handle
    assert pnccl._primary(1).is_primary and pnccl._primary(1).device.ordinal == 1


@standin
def test_no_current_context_is_a_clear_error():
    p = _py("""
        from pygpu import nccl
        try:
            nccl._primary(None)
        except ValueError as e:
            print(e)
    """)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == (
        "pygpu.nccl: no context is current; give device= (an "
        "ordinal) or make one current (pygpu.autoinit)"
    )


@standin
def test_the_current_context_comes_back_after_nccl(ctx):
    """NCCL sets the runtime's device (cudaSetDevice replaces the current
    context): afterwards the thread's context is what it was."""
    from pygpu import driver

    c1 = driver.Device(1).retain_primary_context()
    with pnccl._current(c1):
        assert driver.Context.get_current().handle == c1.handle
        driver.Context.pop()  # as cudaSetDevice(0) would: replaced
        ctx.push()
    assert driver.Context.get_current().handle == ctx.handle
    with pnccl._current(ctx):  # already current: nothing pushed
        driver.Context.pop()
        c1.push()  # replaced by NCCL
    assert driver.Context.get_current().handle == ctx.handle


@standin
def test_from_mpi_shares_rank_0s_id_and_picks_the_node_local_device(ctx, monkeypatch):
    made = []
    monkeypatch.setattr(pnccl, "unique_id", lambda: "uid-of-rank-0")
    monkeypatch.setattr(
        pnccl.Communicator,
        "init",
        classmethod(
            lambda cls, nranks, rank, uid, device=None, stream=None: (
                made.append((nranks, rank, uid, device, stream)) or "comm"
            )
        ),
    )
    MPI = types.SimpleNamespace(COMM_TYPE_SHARED=1)
    mod = types.ModuleType("mpi4py")
    mod.MPI = MPI
    monkeypatch.setitem(sys.modules, "mpi4py", mod)

    class Local:
        def Get_rank(self):
            return 3  # 4th rank on its node

        def Free(self):
            pass

    class World:
        def __init__(self, rank):
            self.rank = rank

        def Get_rank(self):
            return self.rank

        def Get_size(self):
            return 8

        def bcast(self, obj, root=0):
            assert root == 0
            return obj if self.rank == 0 else "uid-of-rank-0"

        def Split_type(self, kind):
            assert kind == MPI.COMM_TYPE_SHARED
            return Local()

    assert pnccl.from_mpi(World(5)) == "comm"
    assert pnccl.from_mpi(World(0), device=0) == "comm"
    # the stand-in has 2 devices: node rank 3 takes device 1
    assert made == [(8, 5, "uid-of-rank-0", 1, None), (8, 0, "uid-of-rank-0", 0, None)]


def test_spawn_checks_its_arguments():
    with pytest.raises(ValueError, match="pygpu.nccl.spawn: nranks must be at least 1, not 0"):
        pnccl.spawn(print, 0)
    with pytest.raises(ValueError, match="pygpu.nccl.spawn: 1 devices for 2 ranks"):
        pnccl.spawn(print, 2, devices=[0])


def test_example_without_a_gpu_compiles_and_exits_0(tmp_path):
    e = dict(
        os.environ,
        PYGPU_LIBCUDA=str(tmp_path / "no-libcuda.so"),
        PYGPU_CACHE_DIR=str(tmp_path / "cache"),
    )
    r = subprocess.run(
        [sys.executable, os.path.join(ROOT, "examples", "nccl_lombscargle.py")],
        capture_output=True,
        text=True,
        timeout=300,
        env=e,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert "compile" in r.stdout and "no GPU:" in r.stdout, r.stdout
    assert r.stderr == ""


@standin
def test_example_without_nccl4py_says_so(tmp_path):
    from pygpu.testing import standin as st

    p = _py(
        """
        import runpy, sys
        sys.modules["nccl"] = None
        sys.path.insert(0, "examples")
        sys.argv = ["nccl_lombscargle.py"]
        runpy.run_path("examples/nccl_lombscargle.py", run_name="__main__")
    """,
        env={"PYGPU_LIBCUDA": st.build(), "PYGPU_CACHE_DIR": str(tmp_path / "cache")},
    )
    assert p.returncode == 0, p.stderr
    assert p.stdout.splitlines()[-1] == (
        "no NCCL: nccl4py is not importable; pip install 'pygpu[nccl]'"
    )


def test_benchmark_without_two_gpus_exits_0(tmp_path):
    r = subprocess.run(
        [sys.executable, os.path.join(ROOT, "benchmarks", "nccl_allreduce.py")],
        capture_output=True,
        text=True,
        timeout=300,
        env=dict(os.environ, PYGPU_LIBCUDA=str(tmp_path / "none.so")),
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.startswith("nccl_allreduce: not run: "), r.stdout


# ---- pygpu.mpi: which path it takes ----


@pytest.fixture
def fake_mpi(monkeypatch):
    """A stand-in mpi4py (names only) and a communicator that records."""
    MPI = types.SimpleNamespace(
        SUM="SUM", IN_PLACE=object(), BOTTOM=object(), ANY_SOURCE=-1, ANY_TAG=-1
    )
    mod = types.ModuleType("mpi4py")
    mod.MPI = MPI
    monkeypatch.setitem(sys.modules, "mpi4py", mod)
    monkeypatch.setitem(sys.modules, "mpi4py.MPI", MPI)

    class Comm:
        def __init__(self):
            self.got = []

        def Get_rank(self):
            return 0

        def Allreduce(self, send, recv, op):
            self.got.append(("Allreduce", send, recv, op))

        def Bcast(self, buf, root):
            self.got.append(("Bcast", buf, root))

    return MPI, Comm


def test_mpi_cuda_aware_passes_device_buffers_directly(fake_mpi, monkeypatch):
    from pygpu import mpi

    MPI, Comm = fake_mpi
    monkeypatch.setenv("PYGPU_MPI_CUDA_AWARE", "1")
    assert mpi.cuda_aware_why() == (True, "PYGPU_MPI_CUDA_AWARE=1")
    comm = Comm()
    s = mpi.staged(comm)
    assert (s.path, s.stage, s.last_path) == ("direct", False, None)
    assert s.why == "the MPI library is CUDA-aware (PYGPU_MPI_CUDA_AWARE=1)"
    assert repr(s) == (
        "<pygpu.mpi.Staged: device buffers passed directly; the MPI library "
        "is CUDA-aware (PYGPU_MPI_CUDA_AWARE=1)>"
    )
    a, b = CAI((4,), "<f8"), CAI((4,), "<f8")
    s.sync = False
    s.Allreduce(a, b, op=MPI.SUM)
    assert comm.got == [("Allreduce", a, b, "SUM")]  # the device buffers themselves
    assert s.last_path == "direct"
    s.Bcast(np.zeros(3), root=0)  # a host buffer
    assert s.last_path == "host"
    assert s.calls == {"direct": 1, "staged": 0, "host": 1}


def test_mpi_not_cuda_aware_stages_and_says_why(fake_mpi, monkeypatch):
    from pygpu import mpi

    _MPI, Comm = fake_mpi
    monkeypatch.setenv("PYGPU_MPI_CUDA_AWARE", "0")
    s = mpi.staged(Comm())
    assert (s.path, s.why) == (
        "staged",
        "the MPI library is not known to be CUDA-aware (PYGPU_MPI_CUDA_AWARE=0)",
    )
    monkeypatch.delenv("PYGPU_MPI_CUDA_AWARE")
    ok, why = mpi.cuda_aware_why()  # this process has no MPI library loaded
    assert ok is False and why.startswith("the MPI library does not say")
    t = mpi.staged(Comm(), stage=False)
    assert (t.path, t.why) == ("direct", "stage=False was given")


# ---- on 2 GPUs ----

gpu = pytest.mark.gpu


def _need(n=2):
    pytest.importorskip("nccl.core")
    from pygpu import driver

    driver.init()
    if driver.Device.count() < n:
        pytest.skip("needs %d GPUs (e.g. nvidia-h100-x2), %d visible" % (n, driver.Device.count()))


@pytest.fixture(params=[1, 2], ids=["1rank", "2ranks"])
def comms(request):
    """Communicators of one process on 1 GPU (NCCL's one-rank path: the
    same C calls, collectives over one rank) and on 2 GPUs."""
    _need(request.param)
    cs = pnccl.Communicator.init_all(list(range(request.param)))
    yield cs
    for c in cs:
        c.destroy()


def _put(comm, host):
    from pygpu import gpuarray

    with comm.context:
        return gpuarray.to_gpu(host)


def _get(comm, a):
    with comm.context:
        return a.get()


@gpu
@pytest.mark.parametrize(
    "dtype", [np.float32, np.float64, np.int32, np.int64, np.complex64, np.complex128]
)
def test_gpu_allreduce_sum_in_one_process(comms, rng, dtype):
    hosts = [(rng.standard_normal((64, 33)) * 100).astype(dtype) for _ in comms]
    if np.dtype(dtype).kind == "c":
        hosts = [(h + 1j * rng.standard_normal(h.shape)).astype(dtype) for h in hosts]
    a = [_put(c, h) for c, h in zip(comms, hosts)]
    out = [_put(c, np.zeros_like(h)) for c, h in zip(comms, hosts)]
    with pnccl.group(comms):
        for c, x, y in zip(comms, a, out):
            c.allreduce(x, y)
    for c in comms:
        c.synchronize()
    want = sum(hosts[1:], hosts[0])
    for c, x, y, h in zip(comms, a, out, hosts):
        np.testing.assert_allclose(_get(c, y), want, rtol=1e-6)
        np.testing.assert_array_equal(_get(c, x), h)  # the input untouched


@gpu
@pytest.mark.parametrize("op", ["max", "min", "prod", "avg"])
def test_gpu_allreduce_ops_in_place(comms, rng, op):
    hosts = [rng.uniform(0.5, 2.0, 1000) for _ in comms]
    a = [_put(c, h) for c, h in zip(comms, hosts)]
    with pnccl.group(comms):
        for c, x in zip(comms, a):
            assert c.allreduce(x, op=op) is x
    stack = np.stack(hosts)
    want = {"max": np.max, "min": np.min, "prod": np.prod, "avg": np.mean}[op](stack, axis=0)
    for c, x in zip(comms, a):
        c.synchronize()
        np.testing.assert_allclose(_get(c, x), want, rtol=1e-12)


@gpu
def test_gpu_broadcast_reduce_allgather_reduce_scatter(comms, rng):
    h = [rng.standard_normal(4096) for _ in comms]
    a = [_put(c, x) for c, x in zip(comms, h)]
    n = len(comms)
    with pnccl.group(comms):
        for c, x in zip(comms, a):
            c.broadcast(x, root=n - 1)
    for c, x in zip(comms, a):
        c.synchronize()
        np.testing.assert_array_equal(_get(c, x), h[n - 1])
    # reduce to rank 0
    h = [rng.standard_normal(2048) for _ in comms]
    a = [_put(c, x) for c, x in zip(comms, h)]
    r = [_put(c, np.zeros(2048)) for c in comms]
    with pnccl.group(comms):
        for c, x, y in zip(comms, a, r):
            c.reduce(x, y, root=0)
    comms[0].synchronize()
    np.testing.assert_allclose(_get(comms[0], r[0]), sum(h[1:], h[0]), rtol=1e-12)
    # all-gather and reduce-scatter (int32, a structured dtype for the gather)
    dt = np.dtype([("i", np.int32), ("x", np.float64)], align=True)
    hs = [np.zeros(100, dt) for _ in comms]
    for k, x in enumerate(hs):
        x["i"] = rng.integers(-1000, 1000, 100)
        x["x"] = rng.standard_normal(100)
    s = [_put(c, x) for c, x in zip(comms, hs)]
    g = [_put(c, np.zeros(100 * n, dt)) for c in comms]
    hi = [rng.integers(-1000, 1000, 512).astype(np.int32) for _ in comms]
    si = [_put(c, x) for c, x in zip(comms, hi)]
    part = 512 // n
    ri = [_put(c, np.zeros(part, np.int32)) for c in comms]
    with pnccl.group(comms):
        for c, x, y, p, q in zip(comms, s, g, si, ri):
            c.allgather(x, y)
            c.reduce_scatter(p, q)
    total = sum(hi[1:], hi[0])
    for k, (c, y, q) in enumerate(zip(comms, g, ri)):
        c.synchronize()
        np.testing.assert_array_equal(_get(c, y), np.concatenate(hs))
        np.testing.assert_array_equal(_get(c, q), total[k * part : (k + 1) * part])


@gpu
def test_gpu_send_recv_and_pygpu_streams(comms, rng):
    from pygpu import driver

    h = [rng.standard_normal(10000).astype(np.float32) for _ in comms]
    a = [_put(c, x) for c, x in zip(comms, h)]
    b = [_put(c, np.zeros(10000, np.float32)) for c in comms]
    streams = []
    for c in comms:
        with c.context:
            streams.append(driver.Stream())
    n = len(comms)
    with pnccl.group(comms):  # a ring: each sends to the next (one rank: to itself)
        for k, (c, x, y, s) in enumerate(zip(comms, a, b, streams)):
            c.send(x, peer=(k + 1) % n, stream=s)
            c.recv(y, peer=(k - 1) % n, stream=s)
    for c, s in zip(comms, streams):
        with c.context:
            s.synchronize()
    for k, (c, y) in enumerate(zip(comms, b)):
        np.testing.assert_array_equal(_get(c, y), h[(k - 1) % n])
    # work queued on a pygpu stream, then an all-reduce on it: ordered there
    for c, x, s, k in zip(comms, a, streams, (2.0, 3.0)):
        c.stream = s
        with c.context:
            x.fill(np.float32(k), stream=s)
    with pnccl.group(comms):
        for c, x in zip(comms, a):
            c.allreduce(x)
    for c, x in zip(comms, a):
        c.synchronize()
        np.testing.assert_array_equal(
            _get(c, x), np.full(10000, 5.0 if n == 2 else 2.0, np.float32)
        )


@gpu
def test_gpu_noncontiguous_is_refused_before_nccl(comms, rng):
    a = _put(comms[0], rng.standard_normal((8, 8)))
    with pytest.raises(ValueError, match="pygpu.nccl: sendbuf is not contiguous"):
        comms[0].allreduce(a[:, ::2])


def _rank_fn(comm, seed):
    """One rank's work in its own process (pygpu.nccl.spawn)."""
    from pygpu import gpuarray

    rng = np.random.default_rng(seed + comm.rank)
    h = rng.standard_normal(50000)
    a = gpuarray.to_gpu(h)
    comm.allreduce(a)
    b = gpuarray.to_gpu(h) if comm.rank == 0 else gpuarray.zeros(50000, np.float64)
    comm.broadcast(b, root=0)
    n = comm.nranks
    r = gpuarray.zeros(50000, np.float64)
    from pygpu import nccl

    with nccl.group():  # a ring (one rank: to itself)
        comm.send(gpuarray.to_gpu(h * 2), (comm.rank + 1) % n)
        comm.recv(r, (comm.rank - 1) % n)
    comm.synchronize()
    return comm.rank, comm.device, h, a.get(), b.get(), r.get()


@gpu
@pytest.mark.parametrize("n", [1, 2])
def test_gpu_one_process_per_gpu(rng, n):
    _need(n)
    seed = int(rng.integers(1 << 30))
    out = pnccl.spawn(_rank_fn, n, args=(seed,), timeout=300)
    assert [(r[0], r[1]) for r in out] == [(k, k) for k in range(n)]
    hs = [r[2] for r in out]
    total = sum(hs[1:], hs[0])
    for k, (_, _, h, a, b, x) in enumerate(out):
        np.testing.assert_allclose(a, total, rtol=1e-12)
        np.testing.assert_array_equal(a, out[0][3])
        np.testing.assert_array_equal(b, hs[0])
        np.testing.assert_array_equal(x, 2 * hs[(k - 1) % n])


@gpu
@pytest.mark.parametrize("mode", [[], ["--procs"]])
def test_gpu_example_on_two_gpus(mode, tmp_path):
    _need(2)
    pytest.importorskip("scipy")
    r = subprocess.run(
        [sys.executable, os.path.join(ROOT, "examples", "nccl_lombscargle.py")]
        + mode
        + ["1024", "200000"],
        capture_output=True,
        text=True,
        timeout=600,
        env=dict(os.environ, PYGPU_CACHE_DIR=str(tmp_path)),
    )
    print(r.stdout)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "2 devices" in r.stdout and r.stdout.count("ok: ") == 3, r.stdout


@gpu
def test_gpu_benchmark_runs_and_checks(tmp_path):
    _need(1)  # one GPU: a one-rank communicator
    try:
        r = subprocess.run(
            [
                sys.executable,
                "-u",
                os.path.join(ROOT, "benchmarks", "nccl_allreduce.py"),
                "--sizes",
                "4K,16M",
                "--iters",
                "5",
                "--turn-s",
                "0.01",
                "--repeat",
                "2",
            ],
            capture_output=True,
            text=True,
            timeout=180,
        )
    except subprocess.TimeoutExpired as e:
        pytest.fail(
            "the benchmark did not finish in 180 s; it printed:\n%s\n%s" % (e.stdout, e.stderr)
        )
    print(r.stdout)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "ok: the all-reduce of" in r.stdout
    assert r.stdout.count("\n| ") >= 3
