"""pygpu.nccl's hot path: every collective from C through NCCL's entry
points (src/interop/nccl.c), without a GPU.

NCCL is a stand-in (tests/support/fakenccl.c) that plays one rank of a
communicator and runs the collective on the driver stand-in's memory (host
memory), the other ranks' data taken from one buffer: so each test checks
what reached NCCL (pointers, counts, types, operators, roots, streams) and
the results element by element against NumPy.  The loader's errors (NCCL
missing, not NCCL, not loaded) run in fresh processes."""

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import fakenccl
from pygpu import _driver
from pygpu import nccl as pnccl

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
standin = pytest.mark.standin


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


@pytest.fixture(scope="module")
def fake():
    path = fakenccl.build()
    loaded = _driver._nccl_loaded()
    if loaded is None:
        _driver._nccl_load([path])
    elif loaded != path:
        pytest.skip("another NCCL (%s) is loaded in this process" % loaded)
    f = fakenccl.FakeNccl(path)
    yield f
    f.set_peer(0)
    f.close()


@pytest.fixture
def comm(ctx, fake):
    """Rank 0 of 2 on device 0 (the other rank's data: fake.set_peer)."""
    c = pnccl.Communicator(fake.comm(2, 0, 0), ctx)
    yield c
    fake.set_peer(0)
    c.destroy()


def _gpu(a):
    from pygpu import gpuarray

    return gpuarray.to_gpu(np.ascontiguousarray(a))


# ---- the library ----


def test_nccl_missing_lists_every_place_tried(tmp_path):
    notlib = tmp_path / "libnotnccl.so"
    notlib.write_bytes(b"not a library")
    p = _py(
        """
        import sys
        from pygpu import _driver, driver
        try:
            _driver._nccl_load(["/nonexistent/libnccl.so.2", sys.argv[-1] if False else %r])
        except driver.CudaUnavailableError as e:
            print(e)
        print(_driver._nccl_loaded())
        """
        % str(notlib)
    )
    assert p.returncode == 0, p.stderr
    out = p.stdout
    assert out.startswith(
        "NCCL (libnccl.so.2) was not found; tried:\n  /nonexistent/libnccl.so.2: "
    )
    assert "\n  %s: " % notlib in out
    assert "pip install 'pygpu[nccl]' (nccl4py and nvidia-nccl-cu13), or set PYGPU_NCCL" in out
    assert out.rstrip().endswith("None")  # nothing was loaded


def test_a_library_that_is_not_nccl_is_refused(tmp_path):
    # a real shared library without NCCL's entry points (the driver stand-in)
    import fakecuda

    other = fakecuda.build()
    p = _py(
        """
        from pygpu import _driver, driver
        try:
            _driver._nccl_load([%r])
        except driver.CudaUnavailableError as e:
            print(e)
        """
        % other
    )
    assert p.returncode == 0, p.stderr
    assert "%s: not NCCL: missing NCCL entry points" % other in p.stdout


def test_a_communicator_before_nccl_is_loaded_says_so():
    p = _py("""
        from pygpu import _driver, driver, gpuarray
        try:
            _driver.NcclComm(1234, None, gpuarray.GPUArray)
        except driver.CudaUnavailableError as e:
            print(e)
        try:
            _driver._nccl_group_start()
        except driver.CudaUnavailableError as e:
            print(e)
    """)
    assert p.returncode == 0, p.stderr
    want = (
        "NCCL is not loaded: pygpu.nccl loads it (pygpu.nccl.load()) before the first communicator"
    )
    assert p.stdout.splitlines() == [want, want]


def test_a_group_before_the_driver_is_loaded(tmp_path):
    """The group reads the thread's context on entry: made before anything
    loaded the driver, it loads it (or says why it cannot) instead of
    calling an entry point that is not there yet (a segfault before the
    fix)."""
    import fakecuda

    code = """
        import sys
        sys.path.insert(0, %r)
        import fakenccl
        from pygpu import _driver, driver, nccl
        _driver._nccl_load([fakenccl.build()])
        try:
            with nccl.group():
                pass
            print("ran", driver.Context.get_current())
        except driver.CudaUnavailableError as e:
            print("unavailable:", e)
    """ % os.path.join(ROOT, "tests", "support")
    p = _py(code, {"PYGPU_LIBCUDA": fakecuda.build()})  # the driver stand-in
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "ran None"  # nothing made current
    p = _py(code, {"PYGPU_LIBCUDA": str(tmp_path / "libcuda.so.1")})  # no driver
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith("unavailable: no CUDA driver: could not load")


def test_candidates_put_nccl4pys_library_first(monkeypatch):
    monkeypatch.setenv("PYGPU_NCCL", "/opt/mine/libnccl.so.2")
    # nccl4py absent: every module of it (a submodule imported earlier in
    # this process would be found by its full name, past its parent)
    for name in [m for m in sys.modules if m == "nccl" or m.startswith("nccl.")] + ["nccl"]:
        monkeypatch.setitem(sys.modules, name, None)
    c = pnccl._candidates()
    assert c[0] == "/opt/mine/libnccl.so.2" and c[-1] == "libnccl.so.2"
    assert len(c) == len(set(c))


def test_load_returns_the_loaded_path(fake):
    assert pnccl.load() == fake.path
    assert _driver._nccl_version() == 23203


# ---- the collectives, element by element ----


@standin
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64])
@pytest.mark.parametrize("op", ["sum", "prod", "max", "min", "avg"])
def test_allreduce_from_c(comm, fake, rng, dtype, op):
    n = 37
    mine = (rng.standard_normal(n) * 50).astype(dtype)
    other = (rng.standard_normal(n) * 50).astype(dtype)
    a, peer = _gpu(mine), _gpu(other)
    fake.set_peer(peer.ptr)
    out = _gpu(np.zeros(n, dtype))
    before = fake.ncalls
    assert comm.allreduce(a, out, op=op) is out
    assert fake.ncalls == before + 1
    last = fake.last
    assert last.name == b"ncclAllReduce" and (last.send, last.recv) == (a.ptr, out.ptr)
    assert (last.count, last.op, last.comm) == (n, pnccl.OPS.index(op), comm._c.handle)
    want = {
        "sum": mine + other,
        "prod": mine * other,
        "max": np.maximum(mine, other),
        "min": np.minimum(mine, other),
        "avg": (mine + other) / 2,
    }[op]
    if np.dtype(dtype).kind == "i":
        # NCCL divides integers as C does: towards zero
        want = want.astype(dtype) if op != "avg" else np.trunc((mine + other) / 2).astype(dtype)
        np.testing.assert_array_equal(out.get(), want)
    else:
        np.testing.assert_allclose(out.get(), want.astype(dtype), rtol=1e-6)
    np.testing.assert_array_equal(a.get(), mine)  # not in place: the input kept


@standin
def test_in_place_and_the_types_nccl_is_given(comm, fake, rng):
    types = {
        np.int8: 0,
        np.uint8: 1,
        np.int32: 2,
        np.uint32: 3,
        np.int64: 4,
        np.uint64: 5,
        np.float16: 6,
        np.float32: 7,
        np.float64: 8,
    }
    for dt, code in types.items():
        a = _gpu(rng.integers(0, 100, (3, 4)).astype(dt))
        assert comm.broadcast(a, root=0) is a
        last = fake.last
        assert (last.name, last.send, last.recv) == (b"ncclBroadcast", a.ptr, a.ptr)
        assert (last.count, last.type, last.root) == (12, code, 0)


@standin
def test_complex_goes_as_pairs_of_reals(comm, fake, rng):
    z = (rng.standard_normal(6) + 1j * rng.standard_normal(6)).astype(np.complex128)
    w = (rng.standard_normal(6) + 1j * rng.standard_normal(6)).astype(np.complex128)
    a, peer = _gpu(z), _gpu(w)
    fake.set_peer(peer.ptr)
    comm.allreduce(a)
    assert (fake.last.count, fake.last.type) == (12, 8)
    np.testing.assert_allclose(a.get(), z + w, rtol=1e-12)
    with pytest.raises(
        TypeError,
        match=r"pygpu.nccl: sendbuf is complex \(complex128\): NCCL reduces it only "
        r"with sum or avg \(as pairs of reals\), not max",
    ):
        comm.allreduce(a, op="max")


@standin
def test_moves_take_any_dtype_as_bytes(comm, fake, rng):
    dt = np.dtype([("i", np.int32), ("x", np.float64)], align=True)
    host = np.zeros(5, dt)
    host["i"] = rng.integers(-9, 9, 5)
    host["x"] = rng.standard_normal(5)
    s = _gpu(host)
    comm.send(s, peer=1)
    assert (fake.last.name, fake.last.count, fake.last.type, fake.last.root) == (
        b"ncclSend",
        5 * dt.itemsize,
        1,
        1,
    )
    assert fake.sent(host.nbytes) == host.tobytes()
    h16 = rng.integers(-999, 999, 9).astype(np.int16)  # NCCL has no int16: bytes
    peer = _gpu(h16)
    fake.set_peer(peer.ptr)
    r = _gpu(np.zeros(9, np.int16))
    assert comm.recv(r, peer=1) is r
    assert (fake.last.name, fake.last.count, fake.last.type) == (b"ncclRecv", 18, 1)
    np.testing.assert_array_equal(r.get(), h16)
    with pytest.raises(TypeError, match="pygpu.nccl: sendbuf is int16, which NCCL does not reduce"):
        comm.allreduce(r)


@standin
def test_allgather_reduce_scatter_reduce(comm, fake, rng):
    mine = rng.standard_normal(8).astype(np.float32)
    other = rng.standard_normal(16).astype(np.float32)
    a, peer = _gpu(mine), _gpu(other)
    fake.set_peer(peer.ptr)
    whole = _gpu(np.zeros(16, np.float32))
    assert comm.allgather(a, whole) is whole
    assert fake.last.count == 8
    np.testing.assert_array_equal(whole.get(), np.concatenate([mine, other[:8]]))
    big = rng.standard_normal(16).astype(np.float32)
    b = _gpu(big)
    part = _gpu(np.zeros(8, np.float32))
    assert comm.reduce_scatter(b, part, op="max") is part
    assert (fake.last.name, fake.last.count) == (b"ncclReduceScatter", 8)
    np.testing.assert_array_equal(part.get(), np.maximum(big[:8], other[:8]))  # rank 0's part
    out = _gpu(np.zeros(16, np.float32))
    assert comm.reduce(b, out, op="sum", root=0) is out
    assert (fake.last.name, fake.last.root) == (b"ncclReduce", 0)
    np.testing.assert_allclose(out.get(), big + other, rtol=1e-6)


@standin
def test_exact_gpuarrays_go_straight_to_c(comm, fake, rng, monkeypatch):
    # An exact, dense GPUArray of the communicator's context is proved in C
    # (launch/arrayslots.c, the operators' proof) and never reaches the
    # Python gate.  Before the proof was shared, NCCL's copy read the
    # instance dict, empty since GPUArray's attributes became slots: every
    # call took the Python path (27 us a call where NCCL's own took 0.8 on
    # an H200).
    def refused(*a, **k):
        raise AssertionError("the Python path was taken")

    monkeypatch.setattr(pnccl.Communicator, "_slow", refused)
    n = 24
    mine, other = rng.standard_normal(n), rng.standard_normal(n)
    a, out, peer = _gpu(mine), _gpu(np.zeros(n)), _gpu(other)
    fake.set_peer(peer.ptr)
    assert comm.allreduce(a, out) is out
    assert (fake.last.name, fake.last.send, fake.last.recv) == (b"ncclAllReduce", a.ptr, out.ptr)
    np.testing.assert_allclose(out.get(), mine + other, rtol=1e-12)
    f = _gpu(np.asfortranarray(rng.standard_normal((3, 8))))  # F-contiguous counts too
    assert comm.broadcast(f, root=0) is f
    assert (fake.last.name, fake.last.count, fake.last.send) == (b"ncclBroadcast", 24, f.ptr)
    # a view is not proved in C: the Python path it is
    with pytest.raises(AssertionError, match="the Python path was taken"):
        comm.allreduce(a[2:10])


@standin
def test_views_and_nccl4py_operators_take_the_python_path(comm, fake, rng):
    base = rng.standard_normal((4, 6))
    g = _gpu(base)
    view = g[1:3]  # contiguous rows: gpudata an address, so the full gate
    other = rng.standard_normal(12)
    peer = _gpu(other)
    fake.set_peer(peer.ptr)
    assert comm.allreduce(view) is view
    assert (fake.last.send, fake.last.count) == (view.ptr, 12)
    want = base.copy()
    want[1:3] += other.reshape(2, 6)
    np.testing.assert_allclose(g.get(), want)

    import enum

    class RedOp(enum.IntEnum):  # as nccl4py's NcclRedOp
        SUM, PROD, MAX, MIN, AVG = range(5)

    comm.allreduce(g, op=RedOp.MIN)
    assert fake.last.op == 3
    comm.allreduce(g, op="MAX")
    assert fake.last.op == 2


@standin
def test_streams_reach_nccl(comm, fake, rng):
    from pygpu import driver

    a = _gpu(rng.standard_normal(4))
    fake.set_peer(a.ptr)
    s = driver.Stream()
    comm.allreduce(a, stream=s)
    assert fake.last.stream == s.handle
    comm.allreduce(a)  # the legacy default stream
    assert fake.last.stream is None

    class Foreign:
        def __cuda_stream__(self):
            return (0, s.handle)

    comm.allreduce(a, stream=Foreign())
    assert fake.last.stream == s.handle
    comm.stream = s  # the communicator's own
    comm.broadcast(a)
    assert fake.last.stream == s.handle
    with pytest.raises(
        TypeError, match="stream must be a pygpu Stream, an object with __cuda_stream__"
    ):
        comm.allreduce(a, stream="s")


@standin
def test_group_calls_reach_nccl(comm, fake, rng):
    a = _gpu(rng.standard_normal(4))
    before = fake.group_calls
    with pnccl.group([comm]):
        comm.send(a, peer=1)
        assert fake.last.group_depth == 1
        comm.recv(a, peer=1)
    assert fake.group_calls == before + 1 and fake.last.name == b"ncclGroupEnd"
    with pytest.raises(pnccl.NcclError, match="ncclGroupEnd failed: ncclRemoteError"):
        with pnccl.group([comm]):
            comm.send(a, peer=1)
            fake.fail(6, "peer 1 went away")  # the group's end fails


@standin
def test_group_leaves_the_threads_context_as_it_was(comm, fake, rng):
    from pygpu import driver

    a = _gpu(rng.standard_normal(4))
    ctx = comm.context
    for comms in ([comm], (comm,), iter([comm]), {comm: 1}, [comm._c], None, []):
        with pnccl.group(comms):
            assert driver.Context.get_current() is ctx  # nothing pushed
        assert driver.Context.get_current() is ctx
    # no context current: NCCL needs none (it sets its device itself), the
    # group makes none current, and none is current afterwards
    driver.Context.pop()
    try:
        assert driver.Context.get_current() is None
        before = fake.group_calls
        with pnccl.group([comm]):
            assert driver.Context.get_current() is None
            comm.broadcast(a, root=0)
            assert driver.Context.get_current() is None
        assert fake.group_calls == before + 1
        assert driver.Context.get_current() is None
    finally:
        ctx.push()
    # an exception inside the group goes on, and the group is ended
    before = fake.group_calls
    with pytest.raises(KeyError):
        with pnccl.group([comm]):
            comm.broadcast(a, root=0)
            raise KeyError("inside")
    assert fake.group_calls == before + 1 and fake.last.name == b"ncclGroupEnd"
    g = pnccl.group([comm])
    with g:
        with pytest.raises(driver.LogicError, match="this group is already entered"):
            g.__enter__()
    with pytest.raises(TypeError, match="comms must be pygpu.nccl Communicators, not int"):
        pnccl.group([3])
    with pytest.raises(TypeError, match="comms must be pygpu.nccl Communicators, not str"):
        pnccl.group(iter([comm, "x"]))
    with pytest.raises(TypeError, match="comms must be pygpu.nccl Communicators, not object"):
        pnccl.group(comms=(comm, object()))
    with pytest.raises(TypeError, match="'int' object is not iterable"):
        pnccl.group(3)


# ---- errors, each before NCCL ----


@standin
def test_freed_arrays_are_refused(comm, fake, rng):
    a = _gpu(rng.standard_normal(8))
    b = _gpu(rng.standard_normal(8))
    b.gpudata.free()
    n = fake.ncalls
    with pytest.raises(
        _driver.LogicError, match="pygpu.nccl allreduce recvbuf: the array's memory was freed"
    ):
        comm.allreduce(a, b)
    a.gpudata.free()
    with pytest.raises(
        _driver.LogicError, match="pygpu.nccl broadcast sendbuf: the array's memory was freed"
    ):
        comm.broadcast(a)
    assert fake.ncalls == n  # NCCL never saw them


@standin
def test_wrong_dtypes_and_sizes_are_refused(comm, fake, rng):
    a = _gpu(rng.standard_normal(8))
    n = fake.ncalls
    with pytest.raises(
        TypeError,
        match=r"pygpu.nccl: allreduce: sendbuf is float64 but recvbuf is float32; NCCL "
        r"moves one type",
    ):
        comm.allreduce(a, _gpu(np.zeros(8, np.float32)))
    with pytest.raises(
        ValueError,
        match=r"pygpu.nccl: allreduce: sendbuf holds 8 elements and recvbuf 9; they must "
        r"hold as many",
    ):
        comm.allreduce(a, _gpu(np.zeros(9)))
    with pytest.raises(
        ValueError,
        match=r"pygpu.nccl: allgather: recvbuf holds 8 elements, not nranks \(2\) x "
        r"sendbuf's 8 = 16",
    ):
        comm.allgather(a, _gpu(np.zeros(8)))
    with pytest.raises(
        ValueError,
        match=r"pygpu.nccl: reduce_scatter: sendbuf holds 8 elements, not nranks \(2\) x "
        r"recvbuf's 8 = 16",
    ):
        comm.reduce_scatter(a, _gpu(np.zeros(8)))
    with pytest.raises(TypeError, match="pygpu.nccl: sendbuf is bool, which NCCL does not reduce"):
        comm.allreduce(_gpu(np.ones(4, bool)))
    with pytest.raises(ValueError, match="op must be one of sum, prod, max, min, avg"):
        comm.allreduce(a, op="mean")
    with pytest.raises(ValueError, match="pygpu.nccl: recvbuf is not contiguous"):
        comm.allreduce(a, _gpu(np.zeros(16))[::2])
    with pytest.raises(TypeError, match=r"pygpu.nccl: buf is in host memory \(ndarray\)"):
        comm.send(np.zeros(3), peer=1)
    assert fake.ncalls == n


@standin
def test_bad_ranks_are_refused(comm, fake, rng):
    a = _gpu(rng.standard_normal(4))
    n = fake.ncalls
    with pytest.raises(
        ValueError,
        match=r"pygpu.nccl: reduce: root 2 is not a rank of this communicator \(0 to 1\)",
    ):
        comm.reduce(a, root=2)
    with pytest.raises(ValueError, match="pygpu.nccl: broadcast: root -1 is not a rank"):
        comm.broadcast(a, root=-1)
    with pytest.raises(ValueError, match="pygpu.nccl: send: peer 5 is not a rank"):
        comm.send(a, peer=5)
    with pytest.raises(ValueError, match="pygpu.nccl: recv: peer 2 is not a rank"):
        comm.recv(a, peer=np.int64(2))  # the Python path converts, C checks
    with pytest.raises(TypeError):
        comm.send(a, peer=None)
    assert fake.ncalls == n
    with pytest.raises(
        ValueError, match=r"pygpu.nccl: rank 2 of 2 ranks: a rank is 0 to nranks - 1"
    ):
        pnccl.Communicator.init(2, 2, None, device=0)


@standin
def test_another_devices_arrays_and_streams_are_refused(comm, fake, rng):
    from pygpu import driver, gpuarray

    c1 = driver.Device(1).retain_primary_context()
    with c1:
        b = gpuarray.to_gpu(rng.standard_normal(4))
        s1 = driver.Stream()
    a = _gpu(rng.standard_normal(4))
    n = fake.ncalls
    with pytest.raises(ValueError, match="pygpu.nccl allreduce recvbuf: .*device 1"):
        comm.allreduce(a, b)
    with pytest.raises(
        ValueError,
        match="pygpu.nccl: the stream belongs to a context of device 1, the communicator",
    ):
        comm.allreduce(a, stream=s1)
    assert fake.ncalls == n


@standin
def test_a_communicator_on_another_device_than_its_context(ctx, fake):
    with pytest.raises(
        ValueError,
        match="pygpu.nccl: the communicator runs on device 1, but the context given is device 0's",
    ):
        pnccl.Communicator(fake.comm(2, 0, 1), ctx)


@standin
def test_nccl_errors_carry_code_name_routine_and_last_error(comm, fake, rng):
    a = _gpu(rng.standard_normal(4))
    fake.set_peer(a.ptr)
    fake.fail(4, "allreduce: invalid count")
    with pytest.raises(pnccl.NcclError) as ei:
        comm.allreduce(a)
    e = ei.value
    assert (e.code, e.name, e.routine) == (4, "ncclInvalidArgument", "ncclAllReduce")
    assert str(e) == (
        "ncclAllReduce failed: ncclInvalidArgument: invalid argument (allreduce: invalid count)"
    )
    assert isinstance(e, RuntimeError)
    comm.allreduce(a)  # the next call goes through


@standin
def test_destroyed_communicator(ctx, fake, rng):
    c = pnccl.Communicator(fake.comm(2, 0, 0), ctx)
    c.destroy()
    c.destroy()  # idempotent
    with pytest.raises(
        _driver.LogicError, match=r"pygpu.nccl: allreduce: the communicator was destroyed"
    ):
        c._c.allreduce(_gpu(np.zeros(2)), None, "sum", None)


@standin
def test_the_context_comes_back_where_nccl_switched_it(comm, fake, rng):
    """NCCL's cudaSetDevice makes its device's primary context current on
    the calling thread: after each call and group pygpu puts back what was
    current before (a context created on the same device, or none)."""
    from pygpu import driver, gpuarray

    a = gpuarray.to_gpu(rng.standard_normal(5))  # in the communicator's context
    fake.set_peer(a.ptr)
    want = a.get() * 2
    other = driver.Device(1).retain_primary_context()  # what NCCL switches to
    mine = driver.Device(0).make_context()  # pushed: current
    try:
        fake.set_device(os.environ["PYGPU_LIBCUDA"], other.handle)
        comm.allreduce(a)  # NCCL switched to `other`: `mine` is back
        assert driver.Context.get_current() is mine
        assert driver.mem_alloc(16).context is mine  # pygpu's next call runs in it
        with pnccl.group([comm]):
            comm.broadcast(a, root=0)
            assert driver.Context.get_current() is mine
        assert driver.Context.get_current() is mine
        driver.Context.pop()
        assert driver.Context.get_current() is comm.context
        np.testing.assert_array_equal(a.get(), want)
        # nothing current before: nothing current after
        comm.context.pop()
        try:
            assert driver.Context.get_current() is None
            comm.allreduce(a)
            assert driver.Context.get_current() is None
            with pnccl.group([comm]):
                comm.broadcast(a, root=0)
            assert driver.Context.get_current() is None
        finally:
            comm.context.push()
    finally:
        fake.set_device(None, None)
        if driver.Context.get_current() is mine:
            driver.Context.pop()
        mine.detach()


@standin
def test_the_context_comes_back_after_a_call_on_another_device(ctx, fake, rng):
    from pygpu import driver, gpuarray

    c1 = driver.Device(1).retain_primary_context()
    comm1 = pnccl.Communicator(fake.comm(2, 1, 1), c1)
    with c1:
        a = gpuarray.to_gpu(rng.standard_normal(3))
    fake.set_peer(a.ptr)
    comm1.allreduce(a)
    assert driver.Context.get_current().handle == ctx.handle
    assert comm1.rank == 1 and comm1.device == 1


# ---- capture: the graph keeps the arrays ----


@standin
def test_a_captured_collective_keeps_its_arrays(comm, fake, rng):
    from pygpu import driver, gpuarray

    s = driver.Stream()
    a = _gpu(rng.standard_normal(4))
    b = gpuarray.empty(4, np.float64)
    fake.set_peer(a.ptr)
    s.begin_capture()
    try:
        comm.allreduce(a, b, stream=s)
        assert fake.last.stream == s.handle
    finally:
        g = s.end_capture()
    # the graph holds both arrays' memory: a free() is deferred to its death
    assert b.gpudata.holders == ("a captured NCCL collective",)
    assert a.gpudata.holders == ("a captured NCCL collective",)
    b.gpudata.free()
    assert b.gpudata.freed and b.gpudata.holders == ("a captured NCCL collective",)
    del g
    import gc

    gc.collect()
    assert a.gpudata.holders == () and b.gpudata.holders == ()
    with pytest.raises(_driver.LogicError, match="the array's memory was freed"):
        comm.allreduce(a, b)


# ---- defects a review found (each test failed before its fix) ----


@standin
def test_allgather_and_reduce_scatter_need_a_recvbuf_of_their_size(comm, fake, rng):
    """In place (recvbuf None, or sendbuf itself) an all-gather wrote
    nranks x size elements into a buffer of size (and a reduce-scatter read
    as many): refused before NCCL, on the C path and the Python path."""
    x = _gpu(rng.standard_normal(8))
    for buf in (x, x[1:5]):  # exact (C) and a view (Python path)
        n = fake.ncalls
        for call in (comm.allgather, comm.reduce_scatter):
            with pytest.raises(
                ValueError, match=r"pygpu.nccl: %s needs a recvbuf \(" % call.__name__
            ):
                call(buf, None)
        with pytest.raises(
            ValueError,
            match=r"allgather: recvbuf holds %d elements, not nranks \(2\) x sendbuf's %d = %d"
            % (buf.size, buf.size, 2 * buf.size),
        ):
            comm.allgather(buf, buf)
        with pytest.raises(
            ValueError,
            match=r"reduce_scatter: sendbuf holds %d elements, not nranks \(2\) x recvbuf's "
            r"%d = %d" % (buf.size, buf.size, 2 * buf.size),
        ):
            comm.reduce_scatter(buf, buf)
        assert fake.ncalls == n  # nothing reached NCCL


@standin
def test_a_group_keeps_its_calls_buffers_until_it_ends(comm, fake, rng):
    """Inside a group NCCL runs the calls at the outermost ncclGroupEnd:
    a temporary array given to a call, or one freed meanwhile, keeps its
    memory until then (the next allocation reused it before the fix)."""
    import gc
    import weakref

    from pygpu import gpuarray

    host = rng.standard_normal(64)
    for make in (lambda: _gpu(host), lambda: _gpu(np.concatenate([host, host]))[:64]):
        with pnccl.group([comm]):
            with pnccl.group([comm]):  # nested: only the outermost end launches
                comm.broadcast(make(), root=0)  # a temporary (exact, or a view)
                queued = fake.last.send
            gc.collect()
            y = gpuarray.to_gpu(rng.standard_normal(64))  # the next allocation
            assert y.ptr != queued
            freed = _gpu(host)
            comm.broadcast(freed, root=0)
            queued2 = fake.last.send
            wr = weakref.ref(freed.gpudata)
            freed.gpudata.free()  # deferred to the group's end
            del freed
            gc.collect()
            assert wr() is not None
            z = gpuarray.to_gpu(rng.standard_normal(64))
            assert z.ptr != queued2
        gc.collect()
        assert wr() is None  # released at the end


@standin
def test_capture_rules_follow_the_communicators_context(comm, fake, rng):
    """A call needs no context current, so the capture rules look at the
    communicator's context, not the current one: with another device's
    context current, a call on the default stream inside this thread's
    capture is recorded on the capturing stream (it ran eagerly on the
    legacy stream before the fix), and a blocking capture in the
    communicator's context refuses the legacy stream."""
    import threading

    from pygpu import driver

    a = _gpu(rng.standard_normal(4))
    fake.set_peer(a.ptr)
    c1 = driver.Device(1).retain_primary_context()
    s0 = driver.Stream(flags=driver.stream_flags.NON_BLOCKING)
    s0.begin_capture()
    try:
        with c1:
            comm.allreduce(a)
            assert fake.last.stream == s0.handle
    finally:
        s0.end_capture()
    started, done = threading.Event(), threading.Event()

    def capturer():
        comm.context.push()
        s = driver.Stream()  # blocking: the legacy stream would wait for it
        s.begin_capture()
        started.set()
        done.wait()
        s.end_capture()
        driver.Context.pop()

    t = threading.Thread(target=capturer)
    t.start()
    started.wait()
    try:
        n = fake.ncalls
        with c1:
            with pytest.raises(driver.LogicError, match="pygpu.nccl: a stream of this context is"):
                comm.allreduce(a)
        assert fake.ncalls == n
    finally:
        done.set()
        t.join()


@standin
def test_python_path_buffers_are_held_and_checked(comm, fake, rng):
    """Buffers resolved by the Python path (views, other libraries' arrays)
    are held while NCCL runs like exact arrays (a free() from another
    thread then waits), and another library's array of another device is a
    ValueError (it reached NCCL before the fix)."""
    from pygpu import driver, gpuarray

    b = _gpu(rng.standard_normal(64))
    fake.set_peer(b.ptr)
    seen = {}

    def during():  # runs inside ncclAllReduce, the GIL released
        p = b.ptr
        b.gpudata.free()
        seen["reused"] = gpuarray.to_gpu(np.zeros(64)).ptr == p

    fake.set_device_hook(during)
    try:
        comm.allreduce(b[0:32])
    finally:
        fake.set_device(None, None)
    assert seen == {"reused": False}

    class Foreign:  # as CuPy, PyTorch or Numba show an array
        def __init__(self, a):
            self.__cuda_array_interface__ = a.__cuda_array_interface__

    c1 = driver.Device(1).retain_primary_context()
    with c1:
        other = gpuarray.to_gpu(rng.standard_normal(8))
    n = fake.ncalls
    with pytest.raises(
        ValueError,
        match="pygpu.nccl: sendbuf is memory of device 1, the communicator's device is 0",
    ):
        comm.allreduce(Foreign(other))
    assert fake.ncalls == n
    mine = _gpu(rng.standard_normal(8))
    fake.set_peer(mine.ptr)
    assert comm.allreduce(Foreign(mine)) is not None and fake.ncalls == n + 1


@standin
def test_a_captured_foreign_array_is_kept_with_the_graph(comm, fake, rng):
    import gc
    import weakref

    from pygpu import driver

    class Foreign:
        def __init__(self, a):
            self.a = a  # keeps the memory; the graph must keep this object
            self.__cuda_array_interface__ = a.__cuda_array_interface__

    f = Foreign(_gpu(rng.standard_normal(4)))
    fake.set_peer(f.a.ptr)
    wr = weakref.ref(f)
    s = driver.Stream()
    s.begin_capture()
    try:
        comm.allreduce(f, stream=s)
    finally:
        g = s.end_capture()
    del f
    gc.collect()
    assert wr() is not None  # the graph keeps it (dropped before the fix)
    del g
    gc.collect()
    assert wr() is None


@standin
def test_bytes_of_different_dtypes_are_refused(comm, fake, rng):
    """int16 and uint16 both go to NCCL as bytes: the dtypes are compared
    before (the broadcast reinterpreted int16 as uint16 before the fix)."""
    a = _gpu(rng.integers(-9, 9, 6).astype(np.int16))
    n = fake.ncalls
    for other, call in (
        (np.uint16, lambda r: comm.broadcast(a, root=0, recvbuf=r)),
        (np.float16, lambda r: comm.broadcast(a, root=0, recvbuf=r)),
        (np.uint16, lambda r: comm.allgather(a, r)),
    ):
        r = _gpu(np.zeros(12 if call.__code__.co_names[-1:] == ("allgather",) else 6, other))
        with pytest.raises(
            TypeError,
            match=r"sendbuf is int16 but recvbuf is %s; NCCL moves one type" % np.dtype(other),
        ):
            call(r)
    assert fake.ncalls == n


@standin
def test_context_save_asks_the_driver(comm, fake, rng):
    """Another library switched the thread's context behind pygpu's back:
    a call NCCL does not switch leaves it as that library set it (pygpu put
    back its own stale belief before the fix); the private group calls put
    back what NCCL's cudaSetDevice changes too."""
    import ctypes

    from pygpu import driver

    a = _gpu(rng.standard_normal(4))
    fake.set_peer(a.ptr)
    c1 = driver.Device(1).retain_primary_context()
    set_current = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p)(
        fakenccl.driver_entry(os.environ["PYGPU_LIBCUDA"], "cuCtxSetCurrent")
    )
    assert driver.Context.get_current() is comm.context  # remembered too
    assert set_current(c1.handle) == 0  # behind pygpu's back
    try:
        comm.allreduce(a)
        assert driver.Context.get_current() is c1
    finally:
        set_current(comm.context.handle)
    assert driver.Context.get_current() is comm.context
    fake.set_device(os.environ["PYGPU_LIBCUDA"], c1.handle)  # NCCL's cudaSetDevice
    try:
        _driver._nccl_group_start()
        _driver._nccl_group_end()
    finally:
        fake.set_device(None, None)
    assert driver.Context.get_current() is comm.context


@standin
def test_a_list_of_comms_changed_while_checked(comm, fake):
    """group(comms) reads the list's size at each item, and owns each item
    while checking it (a __getattr__ that emptied the list crashed the
    interpreter before the fix)."""
    comms = []

    class Shrinking:
        def __getattr__(self, name):
            comms.clear()
            return comm._c

    comms.extend([Shrinking(), Shrinking(), comm])
    with pnccl.group(comms):
        pass
    assert comms == []
