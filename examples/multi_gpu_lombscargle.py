"""The Lomb-Scargle periodogram split across every GPU of the machine, in one
process: each device's primary context gets the samples and a contiguous
share of the frequencies, the kernels of all devices run at once, and the
shares are gathered and checked against scipy.signal.lombscargle.

    python3 examples/multi_gpu_lombscargle.py [n_samples n_freqs [n_checked]]

n_checked frequencies, spread evenly, are compared with SciPy (default: all
of them up to 2**17, else 2**17), so a large run stays quick to check.
"""

import sys
import time
from types import ModuleType
from typing import Any, Sequence

import numpy as np

import _common
from pygpu.compiler import kernel_source

Array = np.ndarray[Any, np.dtype[Any]]
OPTIONS = ["-DLOMBSCARGLE_BOUNDS=128"]
TOLERANCE = 1e-9  # float64: max error / max |pgram|


def data(nx: int, nf: int, rng: np.random.Generator) -> tuple[Array, Array, Array]:
    x = np.sort(rng.uniform(0, 20 * np.pi, nx))
    y = 2 * np.sin(1.7 * x) + np.cos(0.3 * x) + 0.5 * rng.standard_normal(nx)
    freqs = np.linspace(0.05, 5.0, nf)
    return x, y, freqs


def shares(n: int, parts: int) -> list[tuple[int, int]]:
    """Contiguous [start, stop) ranges splitting n items into parts."""
    bounds = [n * k // parts for k in range(parts + 1)]
    return list(zip(bounds[:-1], bounds[1:]))


class Worker:
    """One device: its primary context, the kernel loaded there, the inputs
    and its share of the output."""

    def __init__(self, cuda: ModuleType, ordinal: int, x: Array, y: Array, freqs: Array) -> None:
        from pygpu.compiler import SourceModule

        self.cuda = cuda
        self.ordinal = ordinal
        self.ctx = cuda.Device(ordinal).retain_primary_context()
        self.n = len(freqs)
        with self.ctx:
            mod = SourceModule(kernel_source("lombscargle.cu"), options=OPTIONS, no_extern_c=True)
            self.func = mod.get_function("lombscargle_float64")
            self.sms = cuda.Context.get_device().get_attribute(
                cuda.device_attribute.MULTIPROCESSOR_COUNT
            )
            self.dx, self.dy = cuda.to_device(x), cuda.to_device(y)
            self.df = cuda.to_device(freqs)
            self.dp = cuda.mem_alloc(max(self.n, 1) * 8)
            self.stream = cuda.Stream()
            self.start, self.stop = cuda.Event(), cuda.Event()

    def launch(self, nx: int) -> None:
        """Queue the kernel (returns at once)."""
        if self.n == 0:
            return
        with self.ctx:
            self.start.record(self.stream)
            self.func(
                np.int32(nx),
                np.int32(self.n),
                self.dx,
                self.dy,
                self.df,
                self.dp,
                np.float64(0),
                block=(128, 1, 1),
                grid=(self.sms * 20, 1),
                stream=self.stream,
            )
            self.stop.record(self.stream)

    def wait(self) -> float:
        with self.ctx:
            self.stream.synchronize()
            return self.stop.time_since(self.start) if self.n else 0.0

    def result(self) -> Array:
        with self.ctx:
            out: Array = self.cuda.from_device(self.dp, self.n, np.float64)
            return out


def run(
    cuda: ModuleType, ordinals: Sequence[int], x: Array, y: Array, freqs: Array, repeat: int = 3
) -> tuple[Array, float, list[float]]:
    """The periodogram over the devices `ordinals`: (pgram, best wall-clock
    seconds of launch-all-then-wait-all, each device's kernel ms)."""
    workers = [
        Worker(cuda, o, x, y, freqs[a:b])
        for o, (a, b) in zip(ordinals, shares(len(freqs), len(ordinals)))
    ]
    best, kernel_ms = float("inf"), [0.0] * len(workers)
    for _ in range(repeat + 1):  # the first round warms up
        t = time.perf_counter()
        for w in workers:
            w.launch(len(x))
        ms = [w.wait() for w in workers]
        wall = time.perf_counter() - t
        if wall < best:
            best, kernel_ms = wall, ms
    return np.concatenate([w.result() for w in workers]), best, kernel_ms


def main() -> None:
    args = [int(a) for a in sys.argv[1:]]
    nx, nf = (args[0], args[1]) if len(args) >= 2 else (1024, 1 << 20)
    nchecked = args[2] if len(args) >= 3 else min(nf, 1 << 17)
    n = _common.compile_only("lombscargle.cu", OPTIONS)
    print("compile lombscargle.cu to PTX: %d bytes (no GPU needed)" % n)
    _common.gpu_or_exit("multi_gpu_lombscargle")
    import pygpu.driver as cuda
    from scipy import signal

    ndev = cuda.Device.count()
    print(
        "%d device%s: %s"
        % (ndev, "" if ndev == 1 else "s", ", ".join(cuda.Device(i).name() for i in range(ndev)))
    )
    rng = np.random.default_rng()
    x, y, freqs = data(nx, nf, rng)
    one, t1, _ = run(cuda, [0], x, y, freqs)
    every, tn, ms = run(cuda, list(range(ndev)), x, y, freqs)
    print(
        "%d samples x %d frequencies: 1 GPU %.2f ms, %d GPUs %.2f ms (%.2fx); "
        "kernel ms per device: %s"
        % (nx, nf, t1 * 1e3, ndev, tn * 1e3, t1 / tn, ", ".join("%.2f" % m for m in ms))
    )
    pick = np.unique(np.linspace(0, nf - 1, nchecked).astype(np.int64))
    expect = signal.lombscargle(x, y, freqs[pick])
    scale = np.max(np.abs(expect))
    for name, got in (("1 GPU", one), ("%d GPUs" % ndev, every)):
        err = np.max(np.abs(got[pick] - expect)) / scale
        _common.check(
            got.shape == (nf,) and err <= TOLERANCE,
            "%s: %d of %d frequencies match SciPy (error %.1e <= %.0e)"
            % (name, len(pick), nf, err, TOLERANCE),
        )
    _common.check(np.array_equal(one, every), "the split result equals the 1-GPU result")


if __name__ == "__main__":
    main()
