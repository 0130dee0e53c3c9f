"""What the examples share: the no-GPU path and event timing."""

import sys
from typing import Callable, Sequence

import pygpu.driver as cuda
from pygpu.compiler import compile, kernel_source


def compile_only(name: str, options: Sequence[str] = (), arch: str = "compute_80") -> int:
    """Compile a shipped kernel file to PTX (NVRTC, no GPU needed); returns
    its size."""
    return len(compile(kernel_source(name), options=list(options), arch=arch, target="ptx"))


def gpu_or_exit(what: str) -> cuda.Device:
    """Make device 0's primary context current, or say there is no GPU and
    exit 0 (the compile step has already run)."""
    try:
        cuda.init()
        if cuda.Device.count() == 0:
            raise cuda.CudaUnavailableError("no CUDA device is visible")
    except cuda.CudaUnavailableError as e:
        print("no GPU: %s" % str(e).splitlines()[0])
        print("(%s compiled; run this on a machine with a CUDA GPU to launch it)" % what)
        sys.exit(0)
    import pygpu.autoinit  # noqa: F401

    dev = cuda.Context.get_device()
    print("device: %s" % dev.name())
    return dev


def time_ms(fn: Callable[[], object], repeat: int = 20, warmup: int = 2) -> float:
    """Median GPU time of fn() in milliseconds, measured with events."""
    for _ in range(warmup):
        fn()
    start, stop = cuda.Event(), cuda.Event()
    times: list[float] = []
    for _ in range(repeat):
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        times.append(stop.time_since(start))
    times.sort()
    return times[len(times) // 2]


def check(ok: object, what: str) -> None:
    if not ok:
        print("FAILED: %s" % what)
        sys.exit(1)
    print("ok: %s" % what)
