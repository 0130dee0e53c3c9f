"""The Lomb-Scargle periodogram on the GPU, checked against
scipy.signal.lombscargle, following the optimisation steps of the CuPy/Numba
walk-through: float64 and float32, -use_fast_math, __launch_bounds__, and the
compile cache cold (a new cache directory), warm (this process) and on disk
(a new process would hit it).  Then pygpu.tools.autotune picks the block
size (the __launch_bounds__ to match) per dtype and prints what it measured.
Each step is an NVTX range, as the walk-through does with
cupy.prof.time_range: run it under
nsys profile --trace=cuda,nvtx python3 examples/lombscargle.py
to see them on the timeline.

    python3 examples/lombscargle.py [n_samples n_freqs]
"""

import os
import sys
import tempfile
import time
from typing import Any

import numpy as np

import _common
from pygpu import compiler, profiler
from pygpu.compiler import SourceModule, kernel_source

OPTION_SETS = [  # the walk-through's steps; each module has a float32 and a float64 kernel
    ("baseline", []),
    ("__launch_bounds__(128)", ["-DLOMBSCARGLE_BOUNDS=128"]),
    ("bounds + -use_fast_math", ["-DLOMBSCARGLE_BOUNDS=128", "-use_fast_math"]),
]
Array = np.ndarray[Any, np.dtype[Any]]
TOLERANCE = {np.float64: 1e-9, np.float32: 2e-3}  # max error / max |pgram|
FAST_MATH_TOLERANCE = 2e-2


def data(nx: int, nf: int, rng: np.random.Generator) -> tuple[Array, Array, Array]:
    x = np.sort(rng.uniform(0, 20 * np.pi, nx))
    y = 2 * np.sin(1.7 * x) + np.cos(0.3 * x) + 0.5 * rng.standard_normal(nx)
    freqs = np.linspace(0.05, 5.0, nf)
    return x, y, freqs


def main() -> None:
    nx, nf = (int(sys.argv[1]), int(sys.argv[2])) if len(sys.argv) == 3 else (4000, 20000)
    src = kernel_source("lombscargle.cu")
    for name, opts in OPTION_SETS:
        t = time.perf_counter()
        with profiler.time_range("compile %s" % name, "orange"):
            compiler.compile(src, options=opts, arch="compute_80", target="ptx", cache_dir=False)
        print(
            "compile %-24s to PTX: %6.1f ms (no GPU needed)"
            % (name, (time.perf_counter() - t) * 1e3)
        )
    _common.gpu_or_exit("lombscargle")
    import pygpu.driver as cuda
    from scipy import signal

    rng = np.random.default_rng()
    x, y, freqs = data(nx, nf, rng)
    t = time.perf_counter()
    with profiler.time_range("scipy_lombscargle", "gray"):
        expect = signal.lombscargle(x, y, freqs)
    scipy_ms = (time.perf_counter() - t) * 1e3
    print("scipy.signal.lombscargle, %d samples x %d frequencies: %.1f ms" % (nx, nf, scipy_ms))
    sms = cuda.Context.get_device().get_attribute(cuda.device_attribute.MULTIPROCESSOR_COUNT)
    with tempfile.TemporaryDirectory() as cache:
        os.environ["PYGPU_CACHE_DIR"] = cache  # starts cold
        for name, opts in OPTION_SETS:
            compiler.clear_cache(disk=False)
            t = time.perf_counter()
            SourceModule(src, options=opts, no_extern_c=True)  # compile (cold) and load
            cold = (time.perf_counter() - t) * 1e3
            compiler.clear_cache(disk=False)
            t = time.perf_counter()
            SourceModule(src, options=opts, no_extern_c=True)  # from the disk cache
            disk = (time.perf_counter() - t) * 1e3
            t = time.perf_counter()
            mod = SourceModule(src, options=opts, no_extern_c=True)  # this process: warm
            warm = (time.perf_counter() - t) * 1e3
            print(
                "%s: SourceModule cold %.1f ms, disk cache %.2f ms, warm %.3f ms"
                % (name, cold, disk, warm)
            )
            for dtype in (np.float64, np.float32):
                f = mod.get_function("lombscargle_" + np.dtype(dtype).name)
                dx, dy, df = (cuda.to_device(v.astype(dtype)) for v in (x, y, freqs))
                dp = cuda.mem_alloc(nf * np.dtype(dtype).itemsize)
                launch = f.configure((sms * 20, 1), (128, 1, 1))
                with profiler.time_range("%s %s loop" % (name, np.dtype(dtype).name), "green"):
                    ms = _common.time_ms(
                        lambda: launch(nx, nf, dx, dy, df, dp, dtype(0)), repeat=10
                    )
                got = cuda.from_device(dp, nf, dtype).astype(np.float64)
                err = np.max(np.abs(got - expect)) / np.max(np.abs(expect))
                tol = (
                    FAST_MATH_TOLERANCE
                    if "-use_fast_math" in opts and dtype == np.float32
                    else TOLERANCE[dtype]
                )
                print(
                    "  %-7s %8.3f ms (%6.0fx SciPy), %d registers, error %.1e"
                    % (np.dtype(dtype).name, ms, scipy_ms / ms, f.num_regs, err)
                )
                _common.check(
                    err <= tol,
                    "%s %s matches SciPy within %.0e" % (name, np.dtype(dtype).name, tol),
                )
    tune(src, x, y, freqs, expect, sms)


def tune(src: str, x: Array, y: Array, freqs: Array, expect: Array, sms: int) -> None:
    """The block size and its __launch_bounds__ chosen by timing, per dtype."""
    from pygpu import gpuarray
    from pygpu.tools import autotune

    nx, nf = len(x), len(freqs)
    for dtype in (np.float64, np.float32):
        name = np.dtype(dtype).name
        dx, dy, df = (gpuarray.to_gpu(v.astype(dtype)) for v in (x, y, freqs))
        dp = gpuarray.empty(nf, dtype)
        with profiler.time_range("autotune %s" % name, "purple"):
            launch = autotune(
                src,
                "lombscargle_" + name,
                [nx, nf, dx, dy, df, dp, dtype(0)],
                space={"LOMBSCARGLE_BOUNDS": [64, 128, 256, 512]},
                block=lambda c: c["LOMBSCARGLE_BOUNDS"],
                grid=(sms * 20, 1),
                no_extern_c=True,
                outputs=[5],
                repeat=10,
            )
        print("autotune %s:" % name)
        print(launch.format_table())
        with profiler.time_range("lombscargle %s tuned" % name, "red"):
            launch(nx, nf, dx, dy, df, dp, dtype(0))
            got = dp.get().astype(np.float64)
        err = np.max(np.abs(got - expect)) / np.max(np.abs(expect))
        _common.check(
            err <= TOLERANCE[dtype],
            "tuned %s (block %d) matches SciPy within %.0e"
            % (name, launch.choice["LOMBSCARGLE_BOUNDS"], TOLERANCE[dtype]),
        )


if __name__ == "__main__":
    main()
