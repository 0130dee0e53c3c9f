"""CUDA graphs: record work once, replay it with one launch.

The types live in the C extension and are re-exported by pygpu.driver:

    Graph          a graph being built: add_*_node(...) or Stream capture
    GraphNode      one node (pass it in another node's dependencies)
    GraphExec      Graph.instantiate(): launch(stream), update(graph),
                   set_kernel_node_params(node, *args, ...)

and this module adds capture_graph(), a context manager over
Stream.begin_capture()/end_capture() that ends a failed capture cleanly:

    with capture_graph(stream) as cap:
        kernel(a, b, block=(256, 1, 1), grid=(n // 256, 1), stream=stream)
    exe = cap.graph.instantiate()
    exe.launch(stream)

and captured(), a decorator that captures a function of GPUArrays once per
signature (shapes, dtypes, other arguments) and replays it:

    @captured
    def step(x, y):
        return 2 * x + y, gpuarray.sum(x * y)
    z, s = step(x, y)      # first call: warm-up, capture; later ones: copy in, replay

See the manual's "CUDA graphs" chapter (docs/graphs.md).
"""

from pygpu._driver import (  # noqa: F401  (re-exported API)
    Graph,
    GraphExec,
    GraphNode,
    capture_mode,
    graph_conditional_type,
    graph_instantiate_flags,
    graph_node_type,
)

import functools
import inspect
import threading
from typing import TYPE_CHECKING, Any, Callable, Generic, Literal, TypeVar, overload

if TYPE_CHECKING:
    from pygpu._driver import Stream

_R = TypeVar("_R")

__all__ = [
    "CONDITIONAL_PREAMBLE",
    "Graph",
    "GraphExec",
    "GraphNode",
    "Capture",
    "CapturedFunction",
    "capture_graph",
    "captured",
    "capture_mode",
    "graph_conditional_type",
    "graph_instantiate_flags",
    "graph_node_type",
]

#: Prepend to kernel source that sets a conditional node's value: under NVRTC
#: (which has no cuda_runtime.h) this declares the device runtime's
#: cudaGraphSetConditional; the driver resolves it when the module loads, as
#: it does printf's vprintf, so no libcudadevrt link is needed.
#: cudaGraphConditionalHandle (an unsigned long long) is predefined by NVRTC.
CONDITIONAL_PREAMBLE = (
    'extern "C" __device__ __cudart_builtin__ void '
    "cudaGraphSetConditional(cudaGraphConditionalHandle handle, unsigned int value);\n"
)


class Capture:
    """What capture_graph() yields: .stream, and .graph once the block ended."""

    __slots__ = ("stream", "graph", "mode")
    stream: "Stream"
    graph: "Graph | None"
    mode: "capture_mode | int"

    def __init__(self, stream: "Stream", mode: "capture_mode | int") -> None:
        self.stream = stream
        self.mode = mode
        self.graph = None

    def __enter__(self) -> "Capture":
        self.stream.begin_capture(mode=self.mode)
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> "Literal[False]":
        if exc_type is None:
            self.graph = self.stream.end_capture()
            return False
        # the block failed: end the capture (its graph, if any, is dropped)
        # and let the block's own exception through
        try:
            self.stream.end_capture()
        except Exception:
            pass
        return False

    def __repr__(self) -> str:
        return "<pygpu.graphs.Capture on %r: %r>" % (self.stream, self.graph)


def capture_graph(stream: "Stream", mode: "capture_mode | int" = capture_mode.GLOBAL) -> "Capture":
    """Capture the work queued on stream inside a with block into a Graph.

    with capture_graph(s) as cap: ...; then cap.graph.  Inside the block the
    default stream of this thread is `stream`: launches, copies, memsets and
    array operations given no stream are captured (docs/graphs.md, "The
    default stream inside a capture").  If the block raises, the capture is
    ended (nothing is kept) and the exception propagates; an operation that
    is illegal while capturing raises a LogicError saying so, and ending
    the invalidated capture raises one too."""
    return Capture(stream, mode)


# ---- captured(): a function of arrays as a CUDA graph ----


def _is_array(obj: object) -> bool:
    from pygpu.gpuarray import GPUArray

    return isinstance(obj, GPUArray)


def _key_of(value: Any, where: str) -> "tuple[Any, ...]":
    """The part of a call's signature one argument makes."""
    if _is_array(value):
        return ("array", value.shape, value.dtype, value.strides)
    try:
        hash(value)
    except TypeError:
        raise TypeError(
            "captured: %s is a %s, which is neither a GPUArray nor hashable; "
            "arguments other than GPUArrays are part of the signature a graph "
            "is captured for" % (where, type(value).__name__)
        ) from None
    return ("value", type(value), value)


def _outputs_ok(out: object) -> bool:
    if out is None or _is_array(out):
        return True
    if isinstance(out, (tuple, list)):
        return all(o is None or _is_array(o) for o in out)
    if isinstance(out, dict):
        return all(o is None or _is_array(o) for o in out.values())
    return False


class _Entry:
    __slots__ = ("inputs", "exe", "outputs", "graph")
    inputs: Any
    exe: Any
    outputs: Any
    graph: Any


class CapturedFunction(Generic[_R]):
    """What captured(fn) returns: call it as fn.  See captured()."""

    def __init__(
        self,
        fn: "Callable[..., _R]",
        stream: "Stream | None" = None,
        mode: "capture_mode | int" = capture_mode.GLOBAL,
        warmup: bool = True,
    ) -> None:
        functools.update_wrapper(self, fn)
        self.fn = fn
        self.stream = stream
        self.mode = mode
        self.warmup = warmup
        self.graphs: "dict[Any, Any]" = {}  # signature -> _Entry
        self._lock = threading.RLock()
        try:
            self._sig: "inspect.Signature | None" = inspect.signature(fn)
        except (TypeError, ValueError):
            self._sig = None

    def clear(self) -> None:
        """Forget every captured graph (and the buffers they own)."""
        with self._lock:
            self.graphs.clear()

    def __repr__(self) -> str:
        return "<pygpu.graphs.captured %s: %d graph(s)>" % (
            getattr(self.fn, "__qualname__", self.fn),
            len(self.graphs),
        )

    def _signature(self, args: "tuple[Any, ...]", kwargs: "dict[str, Any]") -> "tuple[Any, ...]":
        from pygpu import driver

        ctx = driver.Context.get_current()
        key: "list[Any]" = [ctx]
        for i, a in enumerate(args):
            key.append(_key_of(a, "argument %d" % i))
        for name in sorted(kwargs):
            key.append((name, _key_of(kwargs[name], "argument %r" % name)))
        return tuple(key)

    def _capture(self, args: "tuple[Any, ...]", kwargs: "dict[str, Any]") -> Any:
        from pygpu import driver, gpuarray

        e = _Entry()
        e.inputs = []
        given = []
        if self.stream is not None:
            # the first call's copies and warm-up run on the default stream:
            # after the caller's work on self.stream (which may be
            # NON_BLOCKING: the legacy stream would not wait for it)
            _after(driver.Stream.null(), self.stream)

        def static(a: Any) -> Any:
            if not _is_array(a):
                return a
            buf = gpuarray.empty(a.shape, a.dtype)
            buf.set(a)
            e.inputs.append(buf)
            given.append(a)
            return buf

        sargs = [static(a) for a in args]
        skw = {k: static(kwargs[k]) for k in sorted(kwargs)}
        name = getattr(self.fn, "__qualname__", "the function")
        if self.warmup:
            # compile and cache whatever the function makes on first use,
            # outside the capture
            out = self.fn(*sargs, **skw)
            if not _outputs_ok(out):
                raise TypeError(
                    "captured: %s must return GPUArrays (one, or a tuple, list "
                    "or dict of them) or None, not %s" % (name, type(out).__name__)
                )
            del out
            for buf, a in zip(e.inputs, given):  # the warm-up may have changed them
                buf.set(a)
        s = driver.Stream()
        with capture_graph(s, mode=self.mode) as cap:
            out = self.fn(*sargs, **skw)
        if not _outputs_ok(out):
            raise TypeError(
                "captured: %s must return GPUArrays (one, or a tuple, list or "
                "dict of them) or None, not %s" % (name, type(out).__name__)
            )
        e.graph = cap.graph
        e.exe = cap.graph.instantiate()  # type: ignore[union-attr]  # set: the block ended
        e.outputs = out
        if self.stream is not None:
            _after(self.stream, driver.Stream.null())  # the first launch after them
        return e

    def _bind(
        self, args: "tuple[Any, ...]", kwargs: "dict[str, Any]"
    ) -> "tuple[tuple[Any, ...], dict[str, Any]]":
        """args and kwargs as the function's signature binds them (so f(x,
        y=y) and f(x, y) are one signature), defaults applied."""
        if self._sig is None:
            return args, kwargs
        bound = self._sig.bind(*args, **kwargs)
        bound.apply_defaults()
        return bound.args, bound.kwargs

    def __call__(self, *args: Any, **kwargs: Any) -> _R:
        args, kwargs = self._bind(args, kwargs)
        key = self._signature(args, kwargs)
        with self._lock:
            e = self.graphs.get(key)
            if e is None:
                e = self._capture(args, kwargs)
                self.graphs[key] = e
            else:
                for buf, a in zip(e.inputs, _arrays_in(args, kwargs)):
                    buf.set(a, stream=self.stream)
            e.exe.launch(self.stream)
            return e.outputs


def _after(waiter: "Stream", stream: "Stream | None") -> None:
    """Later work on waiter waits for the work queued on stream so far."""
    from pygpu import driver

    ev = driver.Event(driver.event_flags.DISABLE_TIMING)
    ev.record(stream)
    waiter.wait_for_event(ev)


def _arrays_in(args: "tuple[Any, ...]", kwargs: "dict[str, Any]") -> "list[Any]":
    """The array arguments in the order _capture made their buffers."""
    out = [a for a in args if _is_array(a)]
    out += [kwargs[k] for k in sorted(kwargs) if _is_array(kwargs[k])]
    return out


@overload
def captured(
    fn: "Callable[..., _R]",
    *,
    stream: "Stream | None" = None,
    mode: "capture_mode | int" = capture_mode.GLOBAL,
    warmup: bool = True,
) -> "CapturedFunction[_R]": ...


@overload
def captured(
    fn: None = None,
    *,
    stream: "Stream | None" = None,
    mode: "capture_mode | int" = capture_mode.GLOBAL,
    warmup: bool = True,
) -> "Callable[[Callable[..., _R]], CapturedFunction[_R]]": ...


def captured(
    fn: "Callable[..., _R] | None" = None,
    *,
    stream: "Stream | None" = None,
    mode: "capture_mode | int" = capture_mode.GLOBAL,
    warmup: bool = True,
) -> "CapturedFunction[_R] | Callable[[Callable[..., _R]], CapturedFunction[_R]]":
    """Run a function of GPUArrays as a CUDA graph: captured once per
    signature, replayed after that.

        @captured
        def step(x, y, alpha):
            return alpha * x + y

    The signature of a call is the current context, each GPUArray
    argument's shape, dtype and strides, and every other argument's value
    (it must be hashable; it is baked into the graph).  The first call of a
    signature copies the array arguments into buffers the graph owns, runs
    the function once eagerly on them (warm-up: kernels are compiled, caches
    filled; warmup=False skips it), captures it (the array code runs as
    written: docs/graphs.md), instantiates the graph and launches it.  Each
    later call copies its array arguments into those buffers (device to
    device, in stream order) and launches the graph.

    Rules: the function returns GPUArrays (one, a tuple, list or dict of
    them) or None; **the same output arrays are returned by every call of a
    signature and overwritten by the next one** (copy what you keep);
    changes the function makes to its inputs stay in the graph's buffers;
    nothing inside may wait for the GPU (get(), synchronize(): a LogicError
    says so); Python control flow and random seeds are fixed at capture
    (use a generator's fill_* for new random numbers each replay; the
    warm-up draws from a generator too, so call c of a signature returns
    its draw c + 1, or draw c with warmup=False).
    Replays and copies run on `stream` (default: the legacy default stream,
    ordered with the caller's other array work).  fn.graphs holds the
    captured graphs; fn.clear() drops them."""
    if fn is None:
        return lambda f: CapturedFunction(f, stream=stream, mode=mode, warmup=warmup)
    return CapturedFunction(fn, stream=stream, mode=mode, warmup=warmup)
