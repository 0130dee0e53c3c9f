"""Profiling: NVTX ranges and marks for Nsight Systems, and cuProfilerStart/Stop::

    from pygpu import profiler

    with profiler.time_range("solve", color="green"):   # a named span on the timeline
        ...

    @profiler.time_range("step")                       # every call of step() is a range
    def step(...):
        ...

    profiler.mark("converged")                         # an instant event

Ranges are pushed and popped on the calling thread, in the NVTX domain
"pygpu"; they nest, and an exception leaving the block pops its range.  NVTX
(v3, called from pygpu's C extension) is a no-op until a profiler injects
itself (``nsys profile --trace=cuda,nvtx python script.py``): with none
attached a range costs about as much as an empty ``with`` (see
benchmarks/profiler.py).  NVTX_AVAILABLE is False when pygpu was built
without the NVTX headers (or with PYGPU_BUILD_NVTX=0); the API is then there,
checks its arguments the same way and does nothing, as with NVTX and no
profiler attached.

start()/stop() are cuProfilerStart/cuProfilerStop: with
``nsys profile --capture-range=cudaProfilerApi`` only what runs between them
is recorded.

annotate_all(True) (or PYGPU_NVTX=1 in the environment) also names every
NVRTC compile and module load with a range.  Kernel launches and copies need
no such switch: nsys's CUDA trace (``--trace=cuda``) shows each one by name.
"""

from typing import Any, Callable
import functools
import os

from pygpu import _driver

__all__ = [
    "time_range",
    "mark",
    "range_push",
    "range_pop",
    "start",
    "stop",
    "annotate_all",
    "annotating",
    "attached",
    "NVTX_AVAILABLE",
]

#: Whether pygpu was built with NVTX (the ranges reach a profiler).
NVTX_AVAILABLE = _driver.NVTX_AVAILABLE

#: time_range(name, color=None): a context manager and decorator (a C type,
#: so entering and leaving costs one C call each).
time_range = _driver.TimeRange


def _wrap(rng: Any, func: "Callable[..., Any]") -> "Callable[..., Any]":
    """time_range(...)(func): func with the range around every call."""

    @functools.wraps(func)
    def ranged(*args: Any, **kwargs: Any) -> Any:
        with rng:
            return func(*args, **kwargs)

    return ranged


_driver._nvtx_set_wrapper(_wrap)


def mark(name: str, color: "int | None" = None) -> None:
    """An instant NVTX event called name (a mark on the timeline)."""
    _driver._nvtx_mark(name, color)


def range_push(name: str, color: "int | None" = None) -> int:
    """Push a range on this thread by hand (prefer time_range); returns the
    nesting depth a profiler reports, negative with none attached (-2, NVTX's
    NVTX_NO_PUSH_POP_TRACKING; a build without NVTX returns the same)."""
    return _driver._nvtx_push(name, color)


def range_pop() -> int:
    """Pop this thread's innermost range pushed by range_push; returns the
    depth as range_push does (-2 with no profiler attached)."""
    return _driver._nvtx_pop()


def attached() -> bool:
    """Whether a profiler is attached to NVTX (an injection library such as
    Nsight Systems' was loaded through NVTX_INJECTION64_PATH).  The first
    call initializes NVTX."""
    return _driver._nvtx_attached()


def start() -> None:
    """cuProfilerStart: begin collecting (in the current context, the
    default device's primary context if none)."""
    _driver.profiler_start()


def stop() -> None:
    """cuProfilerStop: stop collecting."""
    _driver.profiler_stop()


_annotate = os.environ.get("PYGPU_NVTX", "") not in ("", "0")


def annotate_all(on: bool = True) -> None:
    """Name every NVRTC compile and module load with an NVTX range
    ("compile <name>", "load module").  PYGPU_NVTX=1 turns it on at import.
    Off, it costs one flag test per compile."""
    global _annotate
    _annotate = bool(on)


def annotating() -> bool:
    """Whether annotate_all is on."""
    return _annotate
