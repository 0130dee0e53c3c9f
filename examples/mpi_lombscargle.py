"""The Lomb-Scargle periodogram with MPI (mpi4py): one rank per GPU.  Rank 0
makes the data and broadcasts it (device buffers, through pygpu.mpi's
staged communicator, so any MPI works, CUDA-aware or not); each rank
computes its share of the frequencies on its GPU; the shares are gathered
on rank 0 into one device array and checked against scipy.signal.lombscargle.

    mpiexec -n 2 python3 examples/mpi_lombscargle.py [n_samples n_freqs [n_checked]]

Rank r uses device r modulo the number of devices it sees.  n_checked
frequencies, spread evenly, are compared with SciPy (default: all of them up
to 2**17).
"""

import sys
import time
from types import ModuleType
from typing import Any

import numpy as np

import _common
from pygpu.compiler import kernel_source

OPTIONS = ["-DLOMBSCARGLE_BOUNDS=128"]
TOLERANCE = 1e-9


def main() -> None:
    args = [int(a) for a in sys.argv[1:]]
    nx, nf = (args[0], args[1]) if len(args) >= 2 else (1024, 1 << 20)
    nchecked = args[2] if len(args) >= 3 else min(nf, 1 << 17)
    try:
        from mpi4py import MPI
    except (ImportError, RuntimeError, OSError) as e:  # no mpi4py, or no MPI library
        print(
            "compile lombscargle.cu to PTX: %d bytes (no GPU needed)"
            % _common.compile_only("lombscargle.cu", OPTIONS)
        )
        print("no GPU: mpi4py is not importable (%s); pip install mpi4py" % e)
        return
    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    if rank == 0:
        print(
            "compile lombscargle.cu to PTX: %d bytes (no GPU needed)"
            % _common.compile_only("lombscargle.cu", OPTIONS)
        )
    import pygpu.driver as cuda

    try:
        cuda.init()
        ndev = cuda.Device.count()
        if ndev == 0:
            raise cuda.CudaUnavailableError("no CUDA device is visible")
    except cuda.CudaUnavailableError as e:
        if rank == 0:
            print("no GPU: %s" % str(e).splitlines()[0])
        return
    ctx = cuda.Device(rank % ndev).retain_primary_context()
    ctx.push()
    try:
        work(cuda, MPI, comm, rank, size, nx, nf, nchecked)
    finally:
        cuda.Context.pop()


def work(
    cuda: ModuleType, MPI: Any, comm: Any, rank: int, size: int, nx: int, nf: int, nchecked: int
) -> None:
    from pygpu import gpuarray, mpi
    from pygpu.compiler import SourceModule

    scomm = mpi.staged(comm)
    if rank == 0:
        print(
            "%d ranks; MPI %s; %s"
            % (
                size,
                MPI.Get_library_version().splitlines()[0],
                "device buffers staged through pinned memory"
                if scomm.stage
                else "CUDA-aware: device buffers passed directly",
            )
        )
    print(
        "rank %d: device %d, %s"
        % (rank, cuda.Context.get_device().ordinal, cuda.Context.get_device().name()),
        flush=True,
    )
    # rank 0's data, broadcast from device memory to every rank's device
    share = -(-nf // size)  # frequencies per rank (the last padded)
    x = gpuarray.empty(nx, np.float64)
    y = gpuarray.empty(nx, np.float64)
    freqs = gpuarray.empty(share * size, np.float64)
    if rank == 0:
        rng = np.random.default_rng()
        hx = np.sort(rng.uniform(0, 20 * np.pi, nx))
        hy = 2 * np.sin(1.7 * hx) + np.cos(0.3 * hx) + 0.5 * rng.standard_normal(nx)
        hf = np.linspace(0.05, 5.0, nf)
        x.set(hx)
        y.set(hy)
        freqs.set(np.concatenate([hf, np.full(share * size - nf, hf[-1])]))
    for a in (x, y, freqs):
        scomm.Bcast(a, root=0)
    mine = freqs[rank * share : (rank + 1) * share].copy()
    out = gpuarray.empty(share, np.float64)
    mod = SourceModule(kernel_source("lombscargle.cu"), options=OPTIONS, no_extern_c=True)
    func = mod.get_function("lombscargle_float64")
    sms = cuda.Context.get_device().get_attribute(cuda.device_attribute.MULTIPROCESSOR_COUNT)

    def step() -> None:
        func(
            np.int32(nx),
            np.int32(share),
            x,
            y,
            mine,
            out,
            np.float64(0),
            block=(128, 1, 1),
            grid=(sms * 20, 1),
        )
        cuda.Context.synchronize()

    step()  # warm up
    best = float("inf")
    for _ in range(3):
        comm.Barrier()
        t = time.perf_counter()
        step()
        comm.Barrier()  # every rank's share done
        best = min(best, time.perf_counter() - t)
    gathered = gpuarray.empty(share * size, np.float64) if rank == 0 else None
    scomm.Gather(out, gathered, root=0)
    if rank != 0 or gathered is None:  # only rank 0 gathers
        return
    got = gathered.get()[:nf]
    print(
        "%d samples x %d frequencies on %d rank%s: %.2f ms"
        % (nx, nf, size, "" if size == 1 else "s", best * 1e3)
    )
    from scipy import signal

    hf = np.linspace(0.05, 5.0, nf)
    pick = np.unique(np.linspace(0, nf - 1, nchecked).astype(np.int64))
    expect = signal.lombscargle(x.get(), y.get(), hf[pick])
    err = np.max(np.abs(got[pick] - expect)) / np.max(np.abs(expect))
    _common.check(
        err <= TOLERANCE,
        "%d of %d frequencies match SciPy (error %.1e <= %.0e)" % (len(pick), nf, err, TOLERANCE),
    )


if __name__ == "__main__":
    main()
