"""Beyond one process and one GPU: IPC handles (legacy memory and events,
memory pools, virtual memory), their pickling to spawned processes, fork()
detection, several devices in one process, and MPI through mpi4py.

Three tiers: CPU tests run anywhere; `standin` tests run in make test's
second pass against the driver stand-in (which shares pool and virtual
memory between processes for real, through memfds); `gpu` tests need a GPU
(some need 2 and say so when they skip)."""

import concurrent.futures
import gc
import multiprocessing
import os
import pickle
import shutil
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import multi_children
import pygpu.driver as cuda
from pygpu import _driver, ipc

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SPAWN = multiprocessing.get_context("spawn")


# ---- CPU: handles, pickling, argument checks (no driver needed) ----


def test_shared_fd_pickles_to_a_spawned_process(tmp_path, rng):
    data = rng.bytes(4096)
    path = tmp_path / "blob"
    path.write_bytes(data)
    sfd = ipc.SharedFd(os.open(path, os.O_RDONLY))
    with SPAWN.Pool(1) as pool:
        got = pool.apply(multi_children.read_shared_fd, (sfd, len(data)))
    assert got == data
    assert not sfd.closed  # the parent's descriptor is still its own
    sfd.close()
    sfd.close()  # idempotent
    assert sfd.closed


def test_shared_fd_goes_through_concurrent_futures(tmp_path, rng):
    data = rng.bytes(1000)
    path = tmp_path / "blob"
    path.write_bytes(data)
    sfd = ipc.SharedFd(os.open(path, os.O_RDONLY))
    with concurrent.futures.ProcessPoolExecutor(1, mp_context=SPAWN) as ex:
        assert ex.submit(multi_children.read_shared_fd, sfd, len(data)).result() == data


def test_shared_fd_checks_its_argument():
    with pytest.raises(TypeError, match="SharedFd\\(\\): fd must be an int, not str"):
        ipc.SharedFd("3")
    with pytest.raises(ValueError, match="SharedFd\\(\\): -1 is not a file descriptor"):
        ipc.SharedFd(-1)
    r, w = os.pipe()
    os.close(w)
    s = ipc.SharedFd(r)
    s.close()
    with pytest.raises(ValueError, match="the SharedFd was closed"):
        s.fileno()


def test_legacy_handles_pickle_as_bytes(rng):
    # what mem_get_ipc_handle / ipc_handle give: a bytearray of 64 bytes
    h = bytearray(rng.bytes(64))
    assert pickle.loads(pickle.dumps(h)) == h


def test_ipc_constructors_check_the_handle_before_the_driver():
    with pytest.raises(
        TypeError, match="IPCMemoryHandle\\(\\): the handle must be bytes or a bytearray .* not int"
    ):
        cuda.IPCMemoryHandle(42)
    with pytest.raises(
        ValueError, match="IPCMemoryHandle\\(\\): the handle has 3 bytes; a CUDA IPC handle has 64"
    ):
        cuda.IPCMemoryHandle(b"abc")
    with pytest.raises(ValueError, match="Event.from_ipc_handle\\(\\): the handle has 65 bytes"):
        cuda.Event.from_ipc_handle(bytearray(65))
    with pytest.raises(TypeError, match="from_ipc_handle\\(\\): the handle must be bytes"):
        cuda.Event.from_ipc_handle("x" * 64)
    with pytest.raises(TypeError, match="IPCMemoryHandle\\(\\): flags must be an int"):
        cuda.IPCMemoryHandle(bytes(64), flags="lazy")


def test_ipc_helpers_check_their_types():
    with pytest.raises(TypeError, match="export_pool\\(\\) takes a MemoryPool, not int"):
        ipc.export_pool(3)
    with pytest.raises(TypeError, match="import_pool\\(\\) takes a PoolHandle, not bytes"):
        ipc.import_pool(b"x")
    with pytest.raises(TypeError, match="export_buffer\\(\\) takes a VirtualBuffer, not bytes"):
        ipc.export_buffer(b"x")
    with pytest.raises(TypeError, match="import_buffer\\(\\) takes a BufferHandle, not list"):
        ipc.import_buffer([])


def test_not_forked_here():
    assert cuda.forked_from() is None


def test_driver_exports_the_new_names():
    for name in (
        "IPCMemoryHandle",
        "MemoryPool",
        "VirtualBuffer",
        "mem_get_ipc_handle",
        "ipc_mem_flags",
        "forked_from",
    ):
        assert name in cuda.__all__ and getattr(cuda, name) is getattr(_driver, name)
    assert cuda.ipc_mem_flags.LAZY_ENABLE_PEER_ACCESS == 1
    assert issubclass(cuda.IPCMemoryHandle, cuda.DeviceAllocation)
    assert issubclass(cuda.VirtualBuffer, cuda.DeviceAllocation)


def test_mpi_cuda_aware_override(monkeypatch):
    pytest.importorskip("mpi4py")
    from pygpu import mpi

    monkeypatch.setenv("PYGPU_MPI_CUDA_AWARE", "1")
    assert mpi.cuda_aware() is True
    monkeypatch.setenv("PYGPU_MPI_CUDA_AWARE", "0")
    assert mpi.cuda_aware() is False
    monkeypatch.setenv("PYGPU_MPI_CUDA_AWARE", "yes")
    with pytest.raises(ValueError, match="PYGPU_MPI_CUDA_AWARE must be 0 or 1, not 'yes'"):
        mpi.cuda_aware()


def test_mpi_device_buffer_reads_the_cai():
    from pygpu import mpi

    class Dev:
        def __init__(self, shape, strides, typestr="<f8"):
            self.__cuda_array_interface__ = {
                "shape": shape,
                "strides": strides,
                "typestr": typestr,
                "data": (4096, False),
                "version": 3,
            }

    assert mpi.device_buffer(np.zeros(3)) is None
    assert mpi.device_buffer(Dev((4, 5), None)) == (4096, 160, np.dtype("<f8"))
    assert mpi.device_buffer(Dev((4, 5), (40, 8))) == (4096, 160, np.dtype("<f8"))
    with pytest.raises(ValueError, match="the device buffer is not C-contiguous"):
        mpi.device_buffer(Dev((4, 5), (8, 32)))


def _mpi_env(env=None):
    """The environment for mpiexec: Open MPI refuses to start as root unless
    told (the lent GPU machines run tests as root)."""
    env = dict(os.environ if env is None else env)
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        env.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
        env.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
    return env


def _mpiexec():
    exe = shutil.which("mpiexec") or os.path.join(os.path.dirname(sys.executable), "mpiexec")
    return exe if os.path.exists(exe) else None


MPI_STAGED = r"""
import sys
import numpy as np
from mpi4py import MPI
import pygpu.driver as cuda
from pygpu import gpuarray, mpi
import pygpu.autoinit

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
s = mpi.staged(comm, stage=True)
seed = comm.bcast(int(np.random.SeedSequence().entropy % 2**63) if rank == 0 else None)
data = [np.random.default_rng([seed, r]).standard_normal(1000) for r in range(size)]
mine = gpuarray.to_gpu(data[rank])
# Allreduce, device in and out
out = gpuarray.empty(1000, np.float64)
s.Allreduce(mine, out, op=MPI.SUM)
np.testing.assert_allclose(out.get(), sum(data), rtol=1e-12)
# in place
acc = gpuarray.to_gpu(data[rank])
s.Allreduce(MPI.IN_PLACE, acc, op=MPI.MAX)
np.testing.assert_array_equal(acc.get(), np.maximum.reduce(data))
# Bcast of a device array
b = gpuarray.to_gpu(data[0]) if rank == 0 else gpuarray.empty(1000, np.float64)
s.Bcast(b, root=0)
np.testing.assert_array_equal(b.get(), data[0])
# Sendrecv around the ring, device in, device out; a DeviceAllocation (bytes)
got = gpuarray.empty(1000, np.float64)
s.Sendrecv(mine, dest=(rank + 1) % size, recvbuf=got, source=(rank - 1) % size)
np.testing.assert_array_equal(got.get(), data[(rank - 1) % size])
raw = cuda.to_device(data[rank])
back = cuda.mem_alloc(8000)
s.Sendrecv(raw, dest=(rank + 1) % size, recvbuf=back, source=(rank - 1) % size)
np.testing.assert_array_equal(cuda.from_device(back, 1000, np.float64), data[(rank - 1) % size])
# Gather / Allgather / Scatter / Reduce
g = gpuarray.empty(1000 * size, np.float64) if rank == 0 else None
s.Gather(mine, g, root=0)
if rank == 0:
    np.testing.assert_array_equal(g.get(), np.concatenate(data))
ag = gpuarray.empty(1000 * size, np.float64)
s.Allgather(mine, ag)
np.testing.assert_array_equal(ag.get(), np.concatenate(data))
sc = gpuarray.to_gpu(np.concatenate(data)) if rank == 0 else None
part = gpuarray.empty(1000, np.float64)
s.Scatter(sc, part, root=0)
np.testing.assert_array_equal(part.get(), data[rank])
red = gpuarray.empty(1000, np.float64) if rank == 0 else None
s.Reduce(mine, red, op=MPI.SUM, root=0)
if rank == 0:
    np.testing.assert_allclose(red.get(), sum(data), rtol=1e-12)
# Send/Recv; host buffers pass straight through
if rank == 0:
    s.Send(mine, dest=1, tag=7)
    h = np.empty(1000)
    s.Recv(h, source=1, tag=8)
    np.testing.assert_array_equal(h, data[1])
elif rank == 1:
    r = gpuarray.empty(1000, np.float64)
    s.Recv(r, source=0, tag=7)
    np.testing.assert_array_equal(r.get(), data[0])
    s.Send(data[1], dest=0, tag=8)
print("rank %d ok" % rank)
"""


def test_mpi_staged_helper_on_two_ranks(tmp_path):
    """pygpu.mpi.staged on 2 MPI ranks, every call, device buffers staged
    through pinned memory; the stand-in is the GPU (host memory), so this
    runs on any machine with mpi4py and an MPI (e.g. the mpich wheel)."""
    pytest.importorskip("mpi4py")
    exe = _mpiexec()
    if exe is None:
        pytest.skip(
            "no mpiexec on PATH or beside %s (install an MPI, e.g. the mpich "
            "wheel)" % sys.executable
        )
    import fakecuda

    lib = fakecuda.build()
    script = tmp_path / "staged.py"
    script.write_text(MPI_STAGED)
    env = _mpi_env(dict(os.environ, PYGPU_LIBCUDA=lib))
    r = subprocess.run(
        [exe, "-n", "2", sys.executable, str(script)],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert "rank 0 ok" in r.stdout and "rank 1 ok" in r.stdout, r.stdout + r.stderr


# ---- the stand-in: lifetimes, cross-process sharing, failures ----

standin = pytest.mark.standin


def _mine(live):
    """The stand-in's live handles of the kinds this file makes (large
    copies also start the staging helpers, which keep streams, events and
    pinned buffers until the context goes)."""
    return {k: live[k] for k in ("ipc", "pools", "vmm", "reservations", "device")}


@standin
def test_ipc_memory_opens_closes_and_never_frees(standin, ctx, rng):
    x = rng.standard_normal(300)
    a = cuda.to_device(x)
    h = cuda.mem_get_ipc_handle(a)
    assert isinstance(h, bytearray) and len(h) == 64
    base = standin.live()
    m = cuda.IPCMemoryHandle(pickle.loads(pickle.dumps(h)))
    assert isinstance(m, cuda.DeviceAllocation) and m.size == x.nbytes
    assert standin.live()["ipc"] == base["ipc"] + 1
    got = np.empty_like(x)
    cuda.memcpy_dtoh(got, m)
    np.testing.assert_array_equal(got, x)
    m.close()
    m.close()  # idempotent
    assert m.freed and "closed" in repr(m)
    assert standin.live() == base  # closed, the exporter's memory kept
    with pytest.raises(cuda.LogicError, match="the DeviceAllocation was freed"):
        cuda.memcpy_dtoh(got, m)
    m2 = cuda.IPCMemoryHandle(h, flags=cuda.ipc_mem_flags.LAZY_ENABLE_PEER_ACCESS)
    del m2
    gc.collect()  # closed on GC
    assert standin.live() == base
    cuda.memcpy_dtoh(got, a)  # the exporter's memory is intact
    np.testing.assert_array_equal(got, x)


@standin
def test_ipc_memory_errors(standin, ctx):
    a = cuda.mem_alloc(64)
    h = cuda.mem_get_ipc_handle(a)
    a.free()
    # the export holds the memory (another process may map it): free() is
    # deferred until the object dies (issue 25's hold protocol)
    assert a.holders == ("an IPC export (mem_get_ipc_handle)",)
    with pytest.raises(
        cuda.LogicError, match="mem_get_ipc_handle\\(\\): the DeviceAllocation was freed"
    ):
        cuda.mem_get_ipc_handle(a)
    del a
    gc.collect()
    with pytest.raises(
        cuda.Error,
        match="cuIpcOpenMemHandle failed: CUDA_ERROR_INVALID_VALUE"
        ".* the exporting process may have freed the memory "
        "or exited",
    ):
        cuda.IPCMemoryHandle(h)
    with pytest.raises(cuda.Error, match="cuIpcOpenMemHandle failed.*INVALID_VALUE"):
        cuda.IPCMemoryHandle(bytes(64))
    m = cuda.mem_alloc_managed(64)
    with pytest.raises(
        cuda.Error, match="cuIpcGetMemHandle failed.*only memory from mem_alloc\\(\\)"
    ):
        cuda.mem_get_ipc_handle(m)
    vb = cuda.VirtualBuffer(10)
    with pytest.raises(
        TypeError, match="VirtualBuffer memory cannot be exported with a legacy IPC handle \\(use"
    ):
        cuda.mem_get_ipc_handle(vb)


@standin
def test_ipc_memory_handle_goes_to_a_spawned_process(standin, ctx):
    """The bytes pickle to a spawn child; the stand-in shares legacy IPC
    memory within one process only, so the child gets a clean error."""
    a = cuda.mem_alloc(128)
    with SPAWN.Pool(1) as pool:
        kind, msg = pool.apply(multi_children.open_ipc_memory, (cuda.mem_get_ipc_handle(a),))
    assert kind == "LogicError" and "cuIpcOpenMemHandle failed: CUDA_ERROR_NOT_SUPPORTED" in msg, (
        msg
    )


@standin
def test_ipc_events(standin, ctx):
    e = cuda.Event(flags=cuda.event_flags.INTERPROCESS | cuda.event_flags.DISABLE_TIMING)
    e.record()
    h = e.ipc_handle()
    assert isinstance(h, bytearray) and len(h) == 64
    base = standin.live()["events"]
    e2 = cuda.Event.from_ipc_handle(pickle.loads(pickle.dumps(h)))
    assert standin.live()["events"] == base + 1
    e2.record().synchronize()
    assert e2.query()
    del e2
    gc.collect()
    assert standin.live()["events"] == base
    with SPAWN.Pool(1) as pool:
        assert pool.apply(multi_children.open_ipc_event, (h,)) is True
    plain = cuda.Event()
    with pytest.raises(
        cuda.Error,
        match="cuIpcGetEventHandle failed.*Event\\(flags=event_flags"
        ".INTERPROCESS \\| event_flags.DISABLE_TIMING\\)",
    ):
        plain.ipc_handle()


@standin
def test_pool_export_import_across_processes(standin, ctx, rng):
    """Pool memory written by the parent is read by a spawned child through
    the exported pool and pointer; what the child writes the parent reads."""
    n = 5000
    x = rng.standard_normal(n)
    pool = cuda.MemoryPool()
    assert pool.ipc and not pool.imported and pool.device == 0
    a = pool.allocate(x.nbytes)
    cuda.memcpy_htod(a, x)
    handle = ipc.export_pool(pool)
    data = pool.export_pointer(a)
    assert isinstance(data, bytes) and len(data) == 64
    seed = int(rng.integers(2**32))
    with SPAWN.Pool(1) as p:
        got, size = p.apply(multi_children.pool_child, (handle, data, n, seed))
    np.testing.assert_array_equal(got, x)
    assert size == x.nbytes
    back = np.empty(n)
    cuda.memcpy_dtoh(back, a)
    np.testing.assert_array_equal(back, multi_children.values(seed, n))
    # and within this process, through concurrent.futures
    with concurrent.futures.ProcessPoolExecutor(1, mp_context=SPAWN) as ex:
        got, _ = ex.submit(multi_children.pool_child, handle, data, n, seed + 1).result()
    np.testing.assert_array_equal(got, multi_children.values(seed, n))
    handle.close()
    base = standin.live()
    del a
    gc.collect()
    assert standin.live()["device"] == base["device"] - 1
    pool.destroy()
    pool.destroy()
    assert standin.live()["pools"] == base["pools"] - 1


@standin
def test_pool_errors(standin, ctx):
    private = cuda.MemoryPool(ipc=False)
    with pytest.raises(
        ValueError, match="export_pool\\(\\): the MemoryPool was made with ipc=False"
    ):
        ipc.export_pool(private)
    pool = cuda.MemoryPool()
    h = ipc.export_pool(pool)
    imported = ipc.import_pool(h)
    assert imported.imported and "imported" in repr(imported)
    with pytest.raises(
        ValueError,
        match="allocate\\(\\): a MemoryPool imported from another process cannot allocate",
    ):
        imported.allocate(16)
    with pytest.raises(
        ValueError, match="export_pool\\(\\): an imported MemoryPool cannot be exported again"
    ):
        ipc.export_pool(imported)
    with pytest.raises(
        ValueError, match="import_pointer\\(\\): data has 3 bytes; an exported pool pointer has 64"
    ):
        imported.import_pointer(b"abc")
    with pytest.raises(
        TypeError,
        match="import_pointer\\(\\): data must be the bytes of export_pointer\\(\\), not str",
    ):
        imported.import_pointer("x")
    with pytest.raises(
        cuda.Error, match="cuMemPoolImportPointer failed.*must come from export_pointer\\(\\)"
    ):
        imported.import_pointer(bytes(64))
    with pytest.raises(
        cuda.Error,
        match="cuMemPoolExportPointer failed.*only memory from this pool's allocate\\(\\)",
    ):
        pool.export_pointer(cuda.mem_alloc(64))
    with pytest.raises(ValueError, match="allocate\\(\\): nbytes must be > 0, got 0"):
        pool.allocate(0)
    with pytest.raises(ValueError, match="MemoryPool\\(\\): max_size must be >= 0, got -1"):
        cuda.MemoryPool(max_size=-1)
    r, w = os.pipe()
    os.close(w)
    with pytest.raises(
        cuda.Error,
        match="cuMemPoolImportFromShareableHandle failed.*must come from export_pool\\(\\)",
    ):
        ipc.import_pool(ipc.PoolHandle(r, 0))
    pool.destroy()
    with pytest.raises(cuda.LogicError, match="allocate\\(\\): the MemoryPool was destroyed"):
        pool.allocate(16)


@standin
def test_virtual_buffer_grows_keeping_contents(standin, ctx, rng):
    base = _mine(standin.live())
    vb = cuda.VirtualBuffer(100_000)
    g = vb.granularity
    assert vb.size == 100_000 and vb.mapped == -(-100_000 // g) * g and vb.nchunks == 1
    x = rng.standard_normal(100_000 // 8)
    cuda.memcpy_htod(vb, x)
    sizes, data = [100_000], x
    for n in (100_001, 700_000, 3_000_000, 3_000_000, 9_000_000):
        vb.grow(n, reserve=n + 4 * g if n == 3_000_000 else 0)
        assert vb.size == n and vb.mapped >= n and vb.reserved >= vb.mapped
        got = np.empty(len(data))
        cuda.memcpy_dtoh(got, vb)  # the old contents, across chunks
        np.testing.assert_array_equal(got, data)
        data = rng.standard_normal(n // 8)
        cuda.memcpy_htod(vb, data)  # the whole buffer is usable
        sizes.append(n)
    got = np.empty(len(data))
    cuda.memcpy_dtoh(got, vb)
    np.testing.assert_array_equal(got, data)
    with pytest.raises(
        ValueError,
        match="grow\\(\\): 10 bytes is less than the buffer's "
        "9000000 \\(a VirtualBuffer only grows\\)",
    ):
        vb.grow(10)
    cai = vb.__cuda_array_interface__
    assert cai["data"][0] == int(vb) and cai["shape"] == (9_000_000,)
    vb.free()
    vb.free()
    assert _mine(standin.live()) == base
    with pytest.raises(cuda.LogicError, match="grow\\(\\): the VirtualBuffer was freed"):
        vb.grow(10**7)
    vb2 = cuda.VirtualBuffer(1000)
    del vb2
    gc.collect()  # released on GC
    assert _mine(standin.live()) == base
    with pytest.raises(ValueError, match="VirtualBuffer\\(\\): nbytes must be >= 0, got -5"):
        cuda.VirtualBuffer(-5)
    with pytest.raises(TypeError, match="VirtualBuffer\\(\\): nbytes must be an int, not float"):
        cuda.VirtualBuffer(1.5)
    empty = cuda.VirtualBuffer()
    assert int(empty) == 0 and empty.size == 0
    empty.grow(10)
    assert empty.size == 10 and int(empty) != 0


@standin
def test_virtual_buffer_is_a_kernel_argument(standin, ctx):
    from pygpu import compiler

    ptx = bytes(
        compiler.compile(
            'extern "C" __global__ void k(double *p, int n) {}', target="ptx", arch="compute_90"
        )
    )
    f = cuda.module_from_buffer(ptx).get_function("k")
    vb = cuda.VirtualBuffer(4096)
    f(vb, np.int32(3), block=(32, 1, 1), grid=(1, 1))
    assert standin.last_launch().params[:8] == int(vb).to_bytes(8, "little")
    vb.grow(10**6)
    f(vb, np.int32(3), block=(32, 1, 1), grid=(1, 1))
    assert standin.last_launch().params[:8] == int(vb).to_bytes(8, "little")
    vb.free()
    with pytest.raises(cuda.LogicError, match="parameter 0 is a freed DeviceAllocation"):
        f(vb, np.int32(3), block=(32, 1, 1), grid=(1, 1))


@standin
def test_virtual_buffer_export_to_a_spawned_process(standin, ctx, rng):
    n = 40_000
    x = rng.standard_normal(n)
    vb = cuda.VirtualBuffer(x.nbytes // 2, shareable=True)
    vb.grow(x.nbytes)  # two chunks
    cuda.memcpy_htod(vb, x)
    assert vb.shareable and vb.nchunks == 2
    h = ipc.export_buffer(vb)
    assert h.nbytes == x.nbytes and len(h.chunks) == 2
    seed = int(rng.integers(2**32))
    with SPAWN.Pool(1) as p:
        got, size = p.apply(multi_children.buffer_child, (h, n, seed))
    np.testing.assert_array_equal(got, x)
    assert size == x.nbytes
    back = np.empty(n)
    cuda.memcpy_dtoh(back, vb)
    np.testing.assert_array_equal(back, multi_children.values(seed, n))
    h.close()
    with pytest.raises(
        ValueError, match="export_buffer\\(\\): the VirtualBuffer was made without shareable=True"
    ):
        ipc.export_buffer(cuda.VirtualBuffer(10))
    r, w = os.pipe()
    os.close(w)
    with pytest.raises(
        cuda.Error,
        match="cuMemImportFromShareableHandle failed.*must come from export_buffer\\(\\)",
    ):
        ipc.import_buffer(ipc.BufferHandle([(r, 65536)], 10, 0))


@standin
def test_memcpy_peer_contexts_default_to_the_allocations(standin, ctx, rng):
    x = rng.standard_normal(1000)
    a = cuda.to_device(x)
    c1 = cuda.Device(1).retain_primary_context()
    with c1:
        b = cuda.mem_alloc(x.nbytes)
    cuda.memcpy_peer(b, a, x.nbytes)  # PyCUDA: contexts optional
    np.testing.assert_array_equal(_read(b, c1, 1000), x)
    y = rng.standard_normal(1000)
    cuda.memcpy_htod(a, y)
    s = cuda.Stream()
    cuda.memcpy_peer_async(b, a, x.nbytes, dest_context=c1, src_context=ctx, stream=s)
    s.synchronize()
    np.testing.assert_array_equal(_read(b, c1, 1000), y)
    cuda.memcpy_peer(int(b), int(a), 800, c1)  # ints: src_context = current
    with pytest.raises(
        TypeError, match="memcpy_peer\\(\\): dest_context must be a Context or None, not int"
    ):
        cuda.memcpy_peer(b, a, 8, 1)
    with pytest.raises(
        ValueError, match="memcpy_peer\\(\\): 9000 bytes do not fit in the destination allocation"
    ):
        cuda.memcpy_peer(b, a, 9000)


def _read(alloc, c, n):
    with c:
        return cuda.from_device(alloc, n, np.float64)


@standin
def test_gpuarrays_on_two_devices_refuse_to_mix(standin, ctx, rng):
    from pygpu import gpuarray

    x = rng.standard_normal(100)
    a = gpuarray.to_gpu(x)
    c1 = cuda.Device(1).retain_primary_context()
    with c1:
        b = gpuarray.to_gpu(x)
    msg = (
        "GPUArray operands on different devices: an operand lives on device 1 but the "
        "operation runs in the current context, on device 0"
    )
    with pytest.raises(ValueError, match=msg):
        a + b
    with pytest.raises(ValueError, match=msg):
        b * 2.0
    with pytest.raises(ValueError, match=msg):
        2.0 - b
    with pytest.raises(ValueError, match=msg):
        a[:10] + b[:10]
    with c1:
        with pytest.raises(
            ValueError,
            match="an operand lives on device 0 but the operation "
            "runs in the current context, on device 1",
        ):
            a + b


FORK_CALLS = (
    "mem_alloc",
    "memcpy",
    "launch",
    "stream",
    "device",
    "inherited device",
    "inherited event",
    "null stream",
    "array",
    "peer",
)
FORK_SCRIPT = r"""
import os, sys
import numpy as np
import pygpu.driver as cuda
from pygpu.testing.standin import StandIn
from pygpu import compiler
sd = StandIn()
ptx = bytes(compiler.compile('extern "C" __global__ void k(double *p) {}', target="ptx",
                             arch="compute_75"))
cuda.init()
import pygpu.autoinit
a = cuda.to_device(np.arange(10.0))
f = cuda.module_from_buffer(ptx).get_function("k")
s = cuda.Stream()
dev = cuda.Device(0)
ev = cuda.Event()
from pygpu import gpuarray
ga = gpuarray.to_gpu(np.arange(4.0))
r, w = os.pipe()
pid = os.fork()
if pid == 0:
    os.close(r)
    out = []
    calls = sd.calls()
    assert cuda.forked_from() == os.getppid(), cuda.forked_from()
    for what, fn in [("mem_alloc", lambda: cuda.mem_alloc(8)),
                     ("memcpy", lambda: cuda.memcpy_htod(a, np.zeros(10))),
                     ("launch", lambda: f(a, block=(1, 1, 1), grid=(1, 1))),
                     ("stream", lambda: s.synchronize()),
                     ("device", lambda: cuda.Device(0).name()),
                     ("inherited device", lambda: dev.compute_capability()),
                     ("inherited event", lambda: ev.record()),
                     ("null stream", lambda: cuda.Stream.null().synchronize()),
                     ("array", lambda: (ga + 1).get()),
                     ("peer", lambda: dev.can_access_peer(dev))]:
        try:
            fn()
            out.append(what + ": no error")
        except cuda.CudaUnavailableError as e:
            msg = str(e)
            ok = ("forked from one that had initialised CUDA (pid %d)" % os.getppid() in msg
                  and "'spawn'" in msg)
            out.append(what + (": ok" if ok else ": wrong message " + msg))
        except Exception as e:
            out.append("%s: %s %s" % (what, type(e).__name__, e))
    repr(dev)
    del a, f, s, ev, ga
    import gc; gc.collect()
    out.append("driver calls in the child: %d" % (sd.calls() - calls))
    os.write(w, "\n".join(out).encode())
    os._exit(0)
os.close(w)
report = b""
while True:
    chunk = os.read(r, 4096)
    if not chunk:
        break
    report += chunk
os.waitpid(pid, 0)
print(report.decode())
b = np.empty(10)
cuda.memcpy_dtoh(b, a)          # the parent is untouched
assert (b == np.arange(10.0)).all()
print("parent ok")
"""


@standin
def test_a_forked_child_gets_a_clear_error(standin, tmp_path):
    script = tmp_path / "fork.py"
    script.write_text(FORK_SCRIPT)
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    lines = r.stdout.splitlines()
    for what in FORK_CALLS:
        assert what + ": ok" in lines, r.stdout
    assert "driver calls in the child: 0" in lines, r.stdout  # the inherited objects too
    assert "parent ok" in lines and r.stderr == "", r.stdout + r.stderr


@standin
def test_a_child_forked_before_cuda_may_use_it(standin, tmp_path):
    script = tmp_path / "fork_first.py"
    script.write_text(
        textwrap.dedent("""
        import os
        import numpy as np
        import pygpu.driver as cuda
        pid = os.fork()
        if pid == 0:
            import pygpu.autoinit
            x = np.arange(5.0)
            a = cuda.to_device(x)
            ok = (cuda.from_device(a, 5, np.float64) == x).all() and cuda.forked_from() is None
            os._exit(0 if ok else 3)
        _, status = os.waitpid(pid, 0)
        print("child", os.waitstatus_to_exitcode(status))
    """)
    )
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "child 0" in r.stdout, r.stdout + r.stderr


# failure injection at every driver call of every new operation


def _scenarios():
    rng = np.random.default_rng()

    def ipc_memory():
        x = rng.standard_normal(64)
        a = cuda.to_device(x)
        m = cuda.IPCMemoryHandle(cuda.mem_get_ipc_handle(a))
        got = np.empty_like(x)
        cuda.memcpy_dtoh(got, m)
        np.testing.assert_array_equal(got, x)
        m.close()
        return a

    def ipc_event():
        e = cuda.Event(flags=cuda.event_flags.INTERPROCESS | cuda.event_flags.DISABLE_TIMING)
        e2 = cuda.Event.from_ipc_handle(e.ipc_handle())
        e2.record()
        e2.synchronize()
        return e, e2

    def pool():
        x = rng.standard_normal(64)
        p = cuda.MemoryPool()
        a = p.allocate(x.nbytes)
        cuda.memcpy_htod(a, x)
        h = ipc.export_pool(p)
        q = ipc.import_pool(h)
        b = q.import_pointer(p.export_pointer(a))
        got = np.empty_like(x)
        cuda.memcpy_dtoh(got, b)
        np.testing.assert_array_equal(got, x)
        q.set_access(0)
        return p, a, h, q, b

    def virtual_buffer():
        x = rng.standard_normal(20000)
        vb = cuda.VirtualBuffer(x.nbytes // 2)
        cuda.memcpy_htod(vb, x[:10000])
        vb.grow(x.nbytes)
        got = np.empty(10000)
        cuda.memcpy_dtoh(got, vb)
        np.testing.assert_array_equal(got, x[:10000])
        cuda.memcpy_htod(vb, x)
        vb.grow(4 * x.nbytes, reserve=8 * x.nbytes)
        got = np.empty_like(x)
        cuda.memcpy_dtoh(got, vb)
        np.testing.assert_array_equal(got, x)
        return vb

    def shared_buffer():
        x = rng.standard_normal(100)
        vb = cuda.VirtualBuffer(x.nbytes, shareable=True)
        cuda.memcpy_htod(vb, x)
        h = ipc.export_buffer(vb)
        w = ipc.import_buffer(h)
        got = np.empty_like(x)
        cuda.memcpy_dtoh(got, w)
        np.testing.assert_array_equal(got, x)
        return vb, h, w

    def peer():
        x = rng.standard_normal(100)
        a = cuda.to_device(x)
        c1 = cuda.Device(1).retain_primary_context()
        with c1:
            b = cuda.mem_alloc(x.nbytes)
        cuda.memcpy_peer(b, a, x.nbytes)
        s = cuda.Stream()
        cuda.memcpy_peer_async(a, b, x.nbytes, stream=s)
        s.synchronize()
        return a, b

    return {k: v for k, v in locals().items() if callable(v) and k != "rng"}


SCENARIOS = sorted(_scenarios())
# releases (dealloc, close, free) and probes whose failure is swallowed: a
# failed release loses that one handle, as a real driver would; a failed
# address-space hint (cuMemAddressReserve after the buffer) is retried anywhere
MULTI_TOLERATED = {
    "cuIpcCloseMemHandle",
    "cuMemPoolDestroy",
    "cuMemUnmap",
    "cuMemRelease",
    "cuMemAddressFree",
    "cuMemAddressReserve",
}


@standin
@pytest.mark.parametrize("scenario", SCENARIOS)
def test_failure_at_every_new_call_site(standin, ctx, scenario):
    from injection import TOLERATED, codes as _codes, drop as _drop

    tolerated = TOLERATED | MULTI_TOLERATED
    op = _scenarios()[scenario]
    _drop(op)
    base = standin.live()
    _, trace = standin.trace(lambda: _drop(op))
    assert standin.live() == base, "leaks without any failure: %s" % standin.live()
    seen, sites = {}, []
    for name in trace:
        seen[name] = seen.get(name, 0) + 1
        sites.append((name, seen[name]))
    unraisable = []
    old_hook = sys.unraisablehook
    sys.unraisablehook = unraisable.append
    try:
        for name, k in sites:
            for code in _codes(name):
                base, stale = standin.live(), standin.stale()
                standin.fail(name, k, code)
                where = "%s: call %d of %s failing with %d" % (scenario, k, name, code)
                err = None
                try:
                    _drop(op)
                except cuda.Error as e:
                    err = (e.code, e.routine, str(e), repr(e))
                finally:
                    standin.cancel()
                    while cuda.Context.get_current() not in (None, ctx):
                        cuda.Context.pop()
                    if cuda.Context.get_current() is None:
                        ctx.push()
                gc.collect()
                assert standin.fired(), where + ": the call did not happen"
                if err is None:
                    assert name in tolerated or code == 2, where + ": the failure was lost"
                else:
                    assert err[0] == code, "%s: %s" % (where, err[3])
                    assert err[2].startswith(err[1]), "%s: %s" % (where, err[3])
                assert not unraisable, "%s: %r" % (where, unraisable[0].exc_value)
                now = standin.live()
                leaked = {k_: now[k_] - base[k_] for k_ in now if now[k_] != base[k_]}
                assert standin.stale() == stale, where + ": a dead handle was used"
                if name in tolerated:
                    # one object lost: a VirtualBuffer holds a reservation and its chunks
                    assert all(v > 0 for v in leaked.values()) and sum(leaked.values()) <= 8, (
                        where + ": %s" % leaked
                    )
                else:
                    assert not leaked, where + ": leaked %s" % leaked
    finally:
        sys.unraisablehook = old_hook


@standin
def test_missing_entry_points_are_clear_errors(tmp_path):
    """A driver without the IPC, pool or VMM entry points: each new API
    says which one it needs."""
    import fakecuda

    hide = "cuIpcGetMemHandle,cuIpcOpenEventHandle,cuMemPoolCreate,cuMemCreate,cuIpcGetEventHandle"
    code = textwrap.dedent("""
        import pygpu.driver as cuda, pygpu.autoinit
        a = cuda.mem_alloc(16)
        for fn in (lambda: cuda.mem_get_ipc_handle(a), lambda: cuda.MemoryPool(),
                   lambda: cuda.VirtualBuffer(10),
                   lambda: cuda.Event(flags=6).ipc_handle(),
                   lambda: cuda.Event.from_ipc_handle(bytes(64))):
            try:
                fn()
            except cuda.LogicError as e:
                print(e)
    """)
    env = dict(os.environ, PYGPU_LIBCUDA=fakecuda.build(), FAKECUDA_HIDE=hide)
    r = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == [
        "mem_get_ipc_handle() needs cuIpcGetMemHandle, which this CUDA driver does not provide",
        "MemoryPool() needs stream-ordered memory pools (CUDA 11.2+), which this CUDA driver "
        "does not provide",
        "VirtualBuffer() needs the virtual memory management API (cuMemCreate, CUDA 10.2+), "
        "which this CUDA driver does not provide",
        "Event.ipc_handle() needs cuIpcGetEventHandle, which this CUDA driver does not provide",
        "Event.from_ipc_handle() needs cuIpcOpenEventHandle, which this CUDA driver does not "
        "provide",
    ], r.stdout


# ---- on GPUs ----

gpu = pytest.mark.gpu


def _need_devices(n):
    if cuda.Device.count() < n:
        pytest.skip("needs %d GPUs, %d visible" % (n, cuda.Device.count()))


@gpu
def test_gpu_ipc_memory_and_event_across_processes(ctx, rng):
    """A spawned child opens the parent's memory and event, writes with a
    kernel, records the event; the parent waits on the event and reads."""
    n = 1 << 20
    a = cuda.mem_alloc(n * 8)
    cuda.memset_d8(a, 0, n * 8)
    cuda.Context.synchronize()  # done before the child writes
    ev = cuda.Event(flags=cuda.event_flags.INTERPROCESS | cuda.event_flags.DISABLE_TIMING)
    seed = int(rng.integers(2**32))
    parent, child = SPAWN.Pipe()
    p = SPAWN.Process(
        target=multi_children.gpu_ipc_writer,
        args=(cuda.mem_get_ipc_handle(a), ev.ipc_handle(), n, seed, child),
    )
    p.start()
    try:
        assert parent.poll(120), "the child said nothing in 120 s"
        msg = parent.recv()
        assert msg[0] == "recorded", msg
        assert msg[1] >= n * 8
        ev.synchronize()  # the child's kernel is done
        got = cuda.from_device(a, n, np.float64)
    finally:
        parent.send("done")
        p.join(60)
        if p.is_alive():
            p.terminate()
    assert p.exitcode == 0
    np.testing.assert_array_equal(got, 2.0 * multi_children.values(seed, n) + 1.0)


@gpu
def test_gpu_pool_export_import_across_processes(ctx, rng):
    n = 1 << 18
    x = rng.standard_normal(n)
    pool = cuda.MemoryPool()
    a = pool.allocate(x.nbytes)
    cuda.memcpy_htod(a, x)
    cuda.Context.synchronize()
    seed = int(rng.integers(2**32))
    with SPAWN.Pool(1) as p:
        got, size = p.apply(
            multi_children.pool_child, (ipc.export_pool(pool), pool.export_pointer(a), n, seed)
        )
    np.testing.assert_array_equal(got, x)
    assert size >= x.nbytes
    np.testing.assert_array_equal(
        cuda.from_device(a, n, np.float64), multi_children.values(seed, n)
    )


@gpu
def test_gpu_virtual_buffer_grows_keeping_contents(ctx, rng):
    from pygpu.compiler import SourceModule

    f = SourceModule(multi_children.KERNEL).get_function("affine")
    vb = cuda.VirtualBuffer(3 << 20)
    g = vb.granularity
    x = rng.standard_normal((3 << 20) // 8)
    cuda.memcpy_htod(vb, x)
    data = x
    for n in (5 << 20, 64 << 20, 200 << 20):
        vb.grow(n)
        got = cuda.from_device(vb, len(data), np.float64)
        np.testing.assert_array_equal(got, data)
        # a kernel reads and writes the whole buffer, across its chunks
        m = n // 8
        src = cuda.to_device(rng.standard_normal(m))
        f(vb, src, 2.0, -1.0, np.int32(m), block=(256, 1, 1), grid=((m + 255) // 256, 1))
        data = 2.0 * cuda.from_device(src, m, np.float64) - 1.0
        np.testing.assert_array_equal(cuda.from_device(vb, m, np.float64), data)
    assert vb.mapped % g == 0 and vb.nchunks >= 2


@gpu
def test_gpu_virtual_buffer_export_across_processes(ctx, rng):
    vb = cuda.VirtualBuffer(1, shareable=True)
    n = vb.granularity * 3 // 8
    x = rng.standard_normal(n)
    vb.grow(x.nbytes)
    cuda.memcpy_htod(vb, x)
    cuda.Context.synchronize()  # the copy has landed before the child reads
    seed = int(rng.integers(2**32))
    with SPAWN.Pool(1) as p:
        got, size = p.apply(multi_children.buffer_child, (ipc.export_buffer(vb), n, seed))
    np.testing.assert_array_equal(got, x)
    np.testing.assert_array_equal(
        cuda.from_device(vb, n, np.float64), multi_children.values(seed, n)
    )


@gpu
def test_gpu_peer_copies_and_access(ctx, rng):
    _need_devices(2)
    from pygpu.compiler import SourceModule

    n = 1 << 22
    x = rng.standard_normal(n)
    a = cuda.to_device(x)
    c1 = cuda.Device(1).retain_primary_context()
    with c1:
        b = cuda.mem_alloc(x.nbytes)
    cuda.memcpy_peer(b, a, x.nbytes)
    np.testing.assert_array_equal(_read(b, c1, n), x)
    y = rng.standard_normal(n)
    with c1:
        cuda.memcpy_htod(b, y)
        s = cuda.Stream()
        cuda.memcpy_peer_async(a, b, x.nbytes, stream=s)
        s.synchronize()
    np.testing.assert_array_equal(cuda.from_device(a, n, np.float64), y)
    if cuda.Device(1).can_access_peer(cuda.Device(0)):
        # a kernel on device 1 reads device 0's memory directly
        with c1:
            c1.enable_peer_access(ctx)
            try:
                f = SourceModule(multi_children.KERNEL).get_function("affine")
                f(b, a, 0.5, 2.0, np.int32(n), block=(256, 1, 1), grid=(n // 256, 1))
                cuda.Context.synchronize()
            finally:
                c1.disable_peer_access(ctx)
        np.testing.assert_array_equal(_read(b, c1, n), 0.5 * y + 2.0)


@gpu
def test_gpu_arrays_on_two_devices(ctx, rng):
    _need_devices(2)
    from pygpu import gpuarray

    x, y = rng.standard_normal(1000), rng.standard_normal(1000)
    a = gpuarray.to_gpu(x)
    c1 = cuda.Device(1).retain_primary_context()
    with c1:
        b = gpuarray.to_gpu(y)
        np.testing.assert_array_equal((b * 2.0).get(), y * 2.0)  # its own device: fine
    with pytest.raises(
        ValueError,
        match="operands on different devices: an operand lives on "
        "device 1 but the operation runs in the current "
        "context, on device 0",
    ):
        a + b
    bb = gpuarray.empty_like(a)
    cuda.memcpy_peer(bb.gpudata, b.gpudata, b.nbytes, ctx, c1)  # copied: then it works
    np.testing.assert_array_equal((a + bb).get(), x + y)


@gpu
def test_gpu_primary_contexts_from_threads(rng):
    """Each device's primary context, made current in its own thread."""
    import threading

    ndev = cuda.Device.count()
    xs = [rng.standard_normal(1000) for _ in range(ndev)]
    out, errors = [None] * ndev, []

    def work(i):
        try:
            with cuda.Device(i).retain_primary_context():
                a = cuda.to_device(xs[i])
                out[i] = (cuda.Context.get_device().ordinal, cuda.from_device(a, 1000, np.float64))
        except Exception as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(ndev)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    for i in range(ndev):
        assert out[i][0] == i
        np.testing.assert_array_equal(out[i][1], xs[i])


@gpu
def test_gpu_fork_child_gets_a_clear_error(tmp_path):
    script = tmp_path / "fork.py"
    script.write_text(
        FORK_SCRIPT.replace("sd = StandIn()", "")
        .replace("calls = sd.calls()", "calls = 0")
        .replace("(sd.calls() - calls)", "0")
    )
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    for what in FORK_CALLS:
        assert what + ": ok" in r.stdout.splitlines(), r.stdout
    assert "parent ok" in r.stdout


def _example(name, *args, mpi=0):
    cmd = [sys.executable, os.path.join(ROOT, "examples", name + ".py")] + [str(a) for a in args]
    if mpi:
        cmd = [_mpiexec(), "-n", str(mpi)] + cmd
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=_mpi_env())


@pytest.mark.parametrize("name", ["multi_gpu_lombscargle", "mpi_lombscargle"])
def test_examples_without_a_gpu_compile_and_exit_0(name, tmp_path):
    env = dict(
        os.environ,
        PYGPU_LIBCUDA=str(tmp_path / "no-libcuda.so"),
        PYGPU_CACHE_DIR=str(tmp_path / "cache"),
    )
    r = subprocess.run(
        [sys.executable, os.path.join(ROOT, "examples", name + ".py")],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert "compile" in r.stdout and "no GPU:" in r.stdout, r.stdout


@gpu
def test_gpu_multi_gpu_example(tmp_path):
    pytest.importorskip("scipy")
    r = _example("multi_gpu_lombscargle", 1024, 1 << 16, 1 << 16)  # every frequency checked
    print(r.stdout)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "FAILED" not in r.stdout and r.stdout.count("ok: ") == 3, r.stdout
    assert "65536 of 65536 frequencies match SciPy" in r.stdout, r.stdout


@gpu
def test_gpu_mpi_example_on_two_ranks(tmp_path):
    pytest.importorskip("scipy")
    pytest.importorskip("mpi4py")
    if _mpiexec() is None:
        pytest.skip(
            "no mpiexec on PATH or beside %s: install an MPI (the system's, or pip "
            "install mpich)" % sys.executable
        )
    _need_devices(2)
    r = _example("mpi_lombscargle", 1024, 1 << 16, 1 << 16, mpi=2)
    print(r.stdout)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "rank 0: device 0" in r.stdout and "rank 1: device 1" in r.stdout, r.stdout
    assert "ok: 65536 of 65536 frequencies match SciPy" in r.stdout, r.stdout


@gpu
@pytest.mark.parametrize("stage", [True, False], ids=["staged", "direct"])
def test_gpu_mpi_device_buffers_on_two_ranks(tmp_path, stage):
    """The same calls as the stand-in's staged test on real GPUs, one rank a
    device: staged through pinned memory, and (where the MPI library says
    it is CUDA-aware) device buffers handed straight to MPI."""
    pytest.importorskip("mpi4py")
    exe = _mpiexec()
    if exe is None:
        pytest.skip("no mpiexec on PATH or beside %s" % sys.executable)
    _need_devices(2)
    script = tmp_path / "mpi_gpu.py"
    body = MPI_STAGED.replace(
        "import pygpu.autoinit\n",
        "cuda.init()\n_ctx = cuda.Device(MPI.COMM_WORLD.Get_rank()).retain_primary_context()\n"
        "_ctx.push()\n",
    )
    body = body.replace(
        "s = mpi.staged(comm, stage=True)",
        "if not %r and not mpi.cuda_aware():\n"
        "    print('not CUDA-aware')\n"
        "    sys.exit(0)\n"
        "s = mpi.staged(comm, stage=%r)" % (stage, stage),
    )
    assert body.count("_ctx.push()") == 1 and body.count("stage=%r" % stage) == 1
    script.write_text(body)
    r = subprocess.run(
        [exe, "-n", "2", sys.executable, str(script)],
        capture_output=True,
        text=True,
        timeout=300,
        env=_mpi_env(),
    )
    assert r.returncode == 0, r.stdout + r.stderr
    if "not CUDA-aware" in r.stdout:
        pytest.skip("the MPI library here is not CUDA-aware (mpi.cuda_aware() is False)")
    assert "rank 0 ok" in r.stdout and "rank 1 ok" in r.stdout, r.stdout + r.stderr
