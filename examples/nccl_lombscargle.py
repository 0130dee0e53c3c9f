"""The Lomb-Scargle periodogram over several GPUs with NCCL collectives
(pygpu.nccl, through NVIDIA's nccl4py): rank 0's samples are broadcast from
its device to every other device, each rank computes its share of the
frequencies, an all-gather gives every rank the whole periodogram and an
all-reduce sums the ranks' partial totals; the result is checked against
scipy.signal.lombscargle and every rank's copy against rank 0's.

    python3 examples/nccl_lombscargle.py [n_samples n_freqs [n_checked]]           # one process, every GPU
    python3 examples/nccl_lombscargle.py --procs [n_samples n_freqs [n_checked]]   # one process per GPU

GPUArrays and pygpu's default stream go to NCCL as they are (no copies).
n_checked frequencies, spread evenly, are compared with SciPy (default: all
of them up to 2**17).  The MPI version is examples/mpi_lombscargle.py.
"""

import os
import sys
import time
from typing import Any, List, Optional, Tuple

import numpy as np

import _common
from pygpu.compiler import kernel_source

OPTIONS = ["-DLOMBSCARGLE_BOUNDS=128"]
TOLERANCE = 1e-9
os.environ.setdefault("NCCL_NVLS_ENABLE", "0")  # NVLink multicast stays off


def make_data(nx: int, nf: int, seed: int) -> Tuple[Any, Any, Any]:
    rng = np.random.default_rng(seed)
    x = np.sort(rng.uniform(0, 20 * np.pi, nx))
    y = 2 * np.sin(1.7 * x) + np.cos(0.3 * x) + 0.5 * rng.standard_normal(nx)
    return x, y, np.linspace(0.05, 5.0, nf)


class Rank:
    """One rank's device arrays and kernel (in its device's primary context)."""

    def __init__(self, comm: Any, nx: int, nf: int) -> None:
        import pygpu.driver as cuda
        from pygpu import gpuarray
        from pygpu.compiler import SourceModule

        self.comm = comm
        self.nx, self.nf = nx, nf
        n = comm.nranks
        self.share = -(-nf // n)
        with comm.context:
            self.x = gpuarray.zeros(nx, np.float64)
            self.y = gpuarray.zeros(nx, np.float64)
            self.freqs = gpuarray.zeros(self.share * n, np.float64)
            self.out = gpuarray.empty(self.share, np.float64)
            self.whole = gpuarray.empty(self.share * n, np.float64)
            mod = SourceModule(kernel_source("lombscargle.cu"), options=OPTIONS, no_extern_c=True)
            self.func = mod.get_function("lombscargle_float64")
            self.sms = cuda.Context.get_device().get_attribute(
                cuda.device_attribute.MULTIPROCESSOR_COUNT
            )
            self.total: Any = None

    def load(self, x: Any, y: Any, freqs: Any) -> None:
        """Rank 0's data (the other ranks get it by broadcast)."""
        with self.comm.context:
            self.x.set(x)
            self.y.set(y)
            pad = np.full(self.share * self.comm.nranks - len(freqs), freqs[-1])
            self.freqs.set(np.concatenate([freqs, pad]))

    def broadcast(self) -> None:
        for a in (self.x, self.y, self.freqs):
            self.comm.broadcast(a, root=0)  # in place, from rank 0's device

    def compute(self) -> None:
        from pygpu import gpuarray

        r = self.comm.rank
        with self.comm.context:
            mine = self.freqs[r * self.share : (r + 1) * self.share].copy()
            self.func(
                np.int32(self.nx),
                np.int32(self.share),
                self.x,
                self.y,
                mine,
                self.out,
                np.float64(0),
                block=(128, 1, 1),
                grid=(self.sms * 20, 1),
            )
            # this rank's part of the total power (its padding left out)
            real = max(0, min(self.share, self.nf - r * self.share))
            self.total = gpuarray.sum(self.out[:real]) if real else gpuarray.zeros((), np.float64)

    def gather(self) -> None:
        self.comm.allgather(self.out, self.whole)
        self.comm.allreduce(self.total)  # in place, a sum

    def result(self) -> Tuple[Any, float]:
        with self.comm.context:
            return self.whole.get()[: self.nf], float(self.total.get())


def one_process(nx: int, nf: int, seed: int) -> List[Tuple[Any, float, float]]:
    """Every GPU from this process: one communicator per device, the calls
    of all ranks issued together in NCCL groups."""
    from pygpu import nccl

    comms = nccl.Communicator.init_all()
    ranks = [Rank(c, nx, nf) for c in comms]
    ranks[0].load(*make_data(nx, nf, seed))
    with nccl.group(comms):
        for r in ranks:
            r.broadcast()
    best = float("inf")
    for _ in range(4):  # the first round warms up
        t = time.perf_counter()
        for r in ranks:
            r.compute()
        with nccl.group(comms):
            for r in ranks:
                r.gather()
        for c in comms:
            c.synchronize()
        best = min(best, time.perf_counter() - t)
    out = [r.result() + (best,) for r in ranks]
    for c in comms:
        c.destroy()
    return out


def rank_main(comm: Any, nx: int, nf: int, seed: int) -> Tuple[Any, float, float]:
    """One rank in its own process (pygpu.nccl.spawn runs it)."""
    r = Rank(comm, nx, nf)
    if comm.rank == 0:
        r.load(*make_data(nx, nf, seed))
    r.broadcast()
    best = float("inf")
    for _ in range(4):
        t = time.perf_counter()
        r.compute()
        r.gather()
        comm.synchronize()
        best = min(best, time.perf_counter() - t)
    return r.result() + (best,)


def main(argv: Optional[List[str]] = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    procs = "--procs" in argv
    args = [int(a) for a in argv if a != "--procs"]
    nx, nf = (args[0], args[1]) if len(args) >= 2 else (1024, 1 << 20)
    nchecked = args[2] if len(args) >= 3 else min(nf, 1 << 17)
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
        print("no GPU: %s" % str(e).splitlines()[0])
        return
    from pygpu import nccl

    if not nccl.available():
        print("no NCCL: nccl4py is not importable; pip install 'pygpu[nccl]'")
        return
    print(
        "%d device%s: %s; %s"
        % (
            ndev,
            "" if ndev == 1 else "s",
            ", ".join(cuda.Device(i).name() for i in range(ndev)),
            "one process per GPU" if procs else "one process",
        )
    )
    seed = int(np.random.default_rng().integers(1 << 31))
    if procs:
        results = nccl.spawn(rank_main, ndev, args=(nx, nf, seed))
    else:
        results = one_process(nx, nf, seed)
    got, total, best = results[0]
    print(
        "%d samples x %d frequencies on %d GPU%s: %.2f ms (compute, all-gather, "
        "all-reduce)" % (nx, nf, ndev, "" if ndev == 1 else "s", best * 1e3)
    )
    from scipy import signal

    x, y, freqs = make_data(nx, nf, seed)
    pick = np.unique(np.linspace(0, nf - 1, nchecked).astype(np.int64))
    expect = signal.lombscargle(x, y, freqs[pick])
    err = np.max(np.abs(got[pick] - expect)) / np.max(np.abs(expect))
    _common.check(
        got.shape == (nf,) and err <= TOLERANCE,
        "%d of %d frequencies match SciPy (error %.1e <= %.0e)" % (len(pick), nf, err, TOLERANCE),
    )
    _common.check(
        all(np.array_equal(r[0], got) for r in results), "every rank gathered the same periodogram"
    )
    want = float(np.sum(got))
    _common.check(
        all(abs(r[1] - want) <= 1e-9 * abs(want) for r in results),
        "the all-reduced total power %.6g equals the periodogram's sum on every rank" % total,
    )


if __name__ == "__main__":
    main()
