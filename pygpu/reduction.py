"""Reductions of vectors (PyCUDA's pycuda.reduction).

    from pygpu.reduction import ReductionKernel
    dot = ReductionKernel(np.float32, neutral="0", reduce_expr="a+b",
                          map_expr="x[i]*y[i]", arguments="const float *x, const float *y")
    d = dot(x_gpu, y_gpu)          # a 0-d GPUArray; d.get() is the value

A reduction is one or two kernel launches (kernels/reduction.cuh): a
grid-stride first stage sized to the GPU (SM count times the blocks that fit
on one) and, when it used more than one block, either a one-block second
stage over the per-block results or (launch=1) the last block of the first
stage finishing the reduction after an atomic ticket.  Arguments read as
``x[i]`` are read in 16-byte vector loads where their alignment allows (a
few elements at either end one at a time).  The result and the per-block
results share one allocation, so an allocator= is called once per call.
reduce_expr must be associative and commutative: elements are combined in
no particular order.

The kernel's shape comes from ``config=`` (a dict or ``"key=value,..."``)
or the environment variable PYGPU_REDUCTION_CONFIG, read when a kernel is
built; keys: block (threads a block), unroll (vector loads a thread has in
flight), vec (bytes a vector load, 0 for scalar loads), bps (blocks an SM in
the grid, 0 for as many as fit), launch (1 or 2 launches).
"""

import builtins
from typing import TYPE_CHECKING, Any, Callable, Sequence
import os
import re
import string
import threading

import numpy as np

from pygpu import compiler, driver
from pygpu._ctypes_util import (
    complex_source,
    context_dependent_memoize,
    dtype_to_ctype,
    is_vector,
    needs_complex,
    parse_arguments,
)

if TYPE_CHECKING:  # annotations only (gpuarray imports this module)
    from pygpu._driver import Stream
    from pygpu.gpuarray import GPUArray

__all__ = [
    "ReductionKernel",
    "get_sum_kernel",
    "get_any_kernel",
    "get_all_kernel",
    "get_subset_sum_kernel",
    "get_dot_kernel",
    "get_vdot_kernel",
    "get_subset_dot_kernel",
    "get_minmax_neutral",
    "get_minmax_kernel",
    "get_subset_minmax_kernel",
    "reduction_source",
]

BLOCK = 256  # threads per block, both stages (the default config's)
_PER_THREAD = 16  # below block * _PER_THREAD elements per block, use fewer blocks
_SCALAR_CHARS = set("bBhHiIlLqQfde?")

# ---- kernel configuration: config= or an environment variable ----


def _check_block(v):
    return 32 <= v <= 1024 and v % 32 == 0, "a multiple of 32 from 32 to 1024"


def _range_check(lo, hi):
    return lambda v: (lo <= v <= hi, "from %d to %d" % (lo, hi))


def _choice_check(*values):
    return lambda v: (v in values, "one of %s" % ", ".join(str(x) for x in values))


# key: (check, meaning).  The defaults (REDUCTION_DEFAULTS): 512 threads (the
# fastest block in the H200 sweep, by <1%) and
# as many blocks as fit (2,048 threads an SM on an H100), each thread with
# four 16-byte loads in flight: 128 KiB an SM, above the ~40 KiB an SM that
# 3.35 TB/s at ~1.5 us of loaded latency needs (Little's law); two launches
# (the second reads a few thousand bytes).
REDUCTION_CONFIG_KEYS = {
    "block": (_check_block, "threads a block"),
    "unroll": (_range_check(1, 16), "vector loads a thread has in flight"),
    "vec": (_choice_check(0, 4, 8, 16), "bytes a vector load (0: scalar loads)"),
    "bps": (_range_check(0, 32), "blocks an SM in the grid (0: as many as fit)"),
    "launch": (_choice_check(1, 2), "kernel launches (1: the last block finishes)"),
}
REDUCTION_DEFAULTS = {"block": 512, "unroll": 4, "vec": 16, "bps": 0, "launch": 2}


def parse_config(config, keys, defaults, what):
    """defaults updated with config: a dict, or a str "key=value,..." of
    integers (None or "": the defaults).  what names the source in errors
    (the environment variable, or 'config')."""
    out = dict(defaults)
    if config is None:
        return out
    if isinstance(config, str):
        items = []
        seen = set()
        for part in config.split(","):
            part = part.strip()
            if not part:
                continue
            key, eq, value = part.partition("=")
            key, value = key.strip(), value.strip()
            if not eq or not key:
                raise ValueError("%s: %r is not key=value" % (what, part))
            if key in seen:
                raise ValueError("%s: %r is given twice" % (what, key))
            seen.add(key)
            try:
                number = int(value, 0)
            except ValueError:
                raise ValueError("%s: %s=%s is not an integer" % (what, key, value)) from None
            items.append((key, number))
    elif isinstance(config, dict):
        items = list(config.items())
    else:
        raise TypeError(
            "%s must be a dict or a str 'key=value,...', not %s" % (what, type(config).__name__)
        )
    for key, value in items:
        if key not in keys:
            raise ValueError("%s: %r is not a known key (known: %s)" % (what, key, ", ".join(keys)))
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
            raise TypeError("%s: %s must be an int, not %s" % (what, key, type(value).__name__))
        ok, rule = keys[key][0](int(value))
        if not ok:
            raise ValueError("%s: %s=%d: %s must be %s" % (what, key, value, keys[key][1], rule))
        out[key] = int(value)
    return out


def reduction_config(config: "str | dict[str, Any] | None" = None) -> "dict[str, Any]":
    """The reduction kernel configuration: config (a dict or "key=value,...")
    over the defaults, or, where config is None, PYGPU_REDUCTION_CONFIG."""
    if config is None:
        return parse_config(
            os.environ.get("PYGPU_REDUCTION_CONFIG") or None,
            REDUCTION_CONFIG_KEYS,
            REDUCTION_DEFAULTS,
            "PYGPU_REDUCTION_CONFIG",
        )
    return parse_config(config, REDUCTION_CONFIG_KEYS, REDUCTION_DEFAULTS, "config")


_VECTOR_KINDS = set("biufc")
_WRITE_AFTER = re.compile(r"\s*(=(?!=)|\+\+|--|[-+*/%&|^]=|<<=|>>=)")


def _vector_arguments(map_expr, args):
    """The vector arguments that map_expr reads only as name[i] (never
    writes): these can be read in vector loads.  [(position, name, itemsize)]"""
    found = []
    for pos, a in enumerate(args):
        if not is_vector(a):
            continue
        dt = np.dtype(a.dtype)
        if dt.kind not in _VECTOR_KINDS or dt.itemsize not in (1, 2, 4, 8, 16):
            continue
        name = re.escape(a.name)
        uses = list(re.finditer(r"(?<!\.)(?<!->)\b%s\b" % name, map_expr))
        reads = list(re.finditer(r"(?<!\.)(?<!->)\b%s\s*\[\s*i\s*\]" % name, map_expr))
        if not reads or len(uses) != len(reads):
            continue
        if builtins.any(
            _WRITE_AFTER.match(map_expr, m.end())
            or map_expr[: m.start()].rstrip().endswith(("++", "--"))
            for m in reads
        ):
            continue
        found.append((pos, a.name, dt.itemsize))
    return found


def _vector_plan(vec_bytes, found):
    """Elements a chunk (vec) for the vector-loaded arguments: vec_bytes over
    the smallest element, at most 64 bytes of the largest; 1: no vector path."""
    if not vec_bytes or not found:
        return 1
    v = builtins.max(1, vec_bytes // builtins.min(s for _, _, s in found))
    v = builtins.min(v, builtins.max(1, 64 // builtins.max(s for _, _, s in found)))
    return v


_template = None
_template_lock = threading.Lock()


def _get_template():
    global _template
    if _template is None:
        with _template_lock:
            _template = string.Template(compiler.kernel_source("reduction.cuh"))
    return _template


def _check_str(value, what):
    if not isinstance(value, str):
        raise TypeError("%s must be a str (a C expression), not %s" % (what, type(value).__name__))
    if not value.strip():
        raise ValueError("%s is empty" % what)
    if "\0" in value:
        raise ValueError("%s contains a NUL character" % what)
    return value


def _check_name(name):
    if not isinstance(name, str) or not name.isidentifier() or not name.isascii():
        raise ValueError("name must be a C identifier, not %r" % (name,))
    return name


def _neutral_text(neutral):
    if isinstance(neutral, str):
        return _check_str(neutral, "neutral")
    if isinstance(neutral, (bool, np.bool_)):
        return "true" if neutral else "false"
    if isinstance(neutral, (int, float, np.integer, np.floating)):
        return repr(neutral.item() if isinstance(neutral, np.generic) else neutral)
    raise TypeError(
        "neutral must be a str (a C expression) or a number, not %s" % type(neutral).__name__
    )


def reduction_source(
    dtype_out,
    neutral,
    reduce_expr,
    map_expr=None,
    arguments=None,
    name="reduce_kernel",
    preamble="",
    config=None,
):
    """The CUDA C source of a ReductionKernel and its parsed arguments:
    (source, [argument, ...]).  Checks the arguments the way the constructor
    does; config as ReductionKernel's."""
    return _reduction_source(
        dtype_out,
        neutral,
        reduce_expr,
        map_expr,
        arguments,
        name,
        preamble,
        reduction_config(config),
    )[:2]


def _reduction_source(dtype_out, neutral, reduce_expr, map_expr, arguments, name, preamble, cfg):
    """(source, arguments, [(position, name, itemsize) of vector-loaded
    arguments], elements a chunk)"""
    dtype_out = np.dtype(dtype_out)
    if dtype_out.hasobject:
        raise TypeError("ReductionKernel: dtype_out %s holds Python objects" % dtype_out)
    out_type = dtype_to_ctype(dtype_out)
    neutral = _neutral_text(neutral)
    reduce_expr = _check_str(reduce_expr, "reduce_expr")
    name = _check_name(name)
    if not isinstance(preamble, str):
        raise TypeError("preamble must be a str, not %s" % type(preamble).__name__)
    if arguments is None:
        raise TypeError("ReductionKernel needs arguments (e.g. 'const float *in')")
    args, arg_text = parse_arguments(arguments)
    if not builtins.any(is_vector(a) for a in args):
        raise ValueError(
            "ReductionKernel can only be used with functions that have at least one vector argument"
        )
    names = [a.name for a in args]
    for n in names:
        if n.startswith("pygpu_"):
            raise ValueError("argument name %r: names starting with 'pygpu_' are reserved" % n)
    if len(set(names)) != len(names):
        raise ValueError("argument names repeat: %s" % ", ".join(names))
    if map_expr is None:
        vectors = [a.name for a in args if is_vector(a)]
        if "in" in names:
            map_expr = "in[i]"
        elif len(vectors) == 1:
            map_expr = "%s[i]" % vectors[0]
        else:
            raise ValueError(
                "map_expr is needed: the arguments have no 'in' and "
                "more than one vector (%s)" % ", ".join(vectors)
            )
    else:
        map_expr = _check_str(map_expr, "map_expr")
    types = complex_source() if needs_complex(out_type, arg_text, preamble) else ""
    found = _vector_arguments(map_expr, args)
    vec = _vector_plan(cfg["vec"], found)
    if vec == 1:
        found = []
    vmap_expr = map_expr
    vloads = []
    for _, vname, _ in found:
        vmap_expr = re.sub(
            r"(?<!\.)(?<!->)\b%s\s*\[\s*i\s*\]" % re.escape(vname),
            "pygpu_v_%s[pygpu_c]" % vname,
            vmap_expr,
        )
        vloads.append(
            "typename pygpu_red_elem<decltype(&%s[0])>::type pygpu_v_%s[PYGPU_RED_VEC]; "
            "pygpu_red_vload<PYGPU_RED_VEC>(&%s[pygpu_i0], pygpu_v_%s);"
            % (vname, vname, vname, vname)
        )
    src = _get_template().substitute(
        types=types,
        preamble=preamble,
        out_type=out_type,
        neutral=neutral,
        reduce_expr=reduce_expr,
        map_expr=map_expr,
        vmap_expr=vmap_expr,
        vloads="\n            ".join(vloads),
        arguments=arg_text + ",",
        name=name,
        block=cfg["block"],
        unroll=cfg["unroll"],
        vec=vec,
    )
    return src, args, found, vec


def _scalar_char(dtype):
    c = dtype.char
    return c if c in _SCALAR_CHARS else "V"


def _max_blocks(func, block=BLOCK, per_sm=0):
    """Blocks of the first stage that fill the GPU: SMs times blocks per SM
    (per_sm; 0: as many as fit)."""
    try:
        dev = driver.Context.get_device()
        sms = dev.get_attribute(driver.device_attribute.MULTIPROCESSOR_COUNT)
    except driver.Error:
        sms = 1
    if per_sm <= 0:
        try:
            per_sm = func.max_active_blocks_per_multiprocessor(block)
        except driver.Error:
            per_sm = 0
        if per_sm <= 0:
            per_sm = builtins.max(1, 2048 // block)
    return builtins.max(1, int(sms) * int(per_sm))


def stream_alloc(nbytes, stream=None):
    """Device memory from the driver's stream-ordered pool on stream (so its
    free is ordered after the work queued there); cuMemAlloc where the
    driver has no pools."""
    try:
        if stream is None:
            return driver.mem_alloc_async(nbytes)
        if _capturing(stream):
            # a graph allocation (mem_alloc node) that the graph does not
            # free, as a result's, keeps the graph from being launched again
            # until it is freed: made at once instead, outside the graph,
            # which holds it (docs/graphs.md)
            return driver.mem_alloc(nbytes)
        return driver.mem_alloc_async(nbytes, stream)
    except driver.LogicError:
        return driver.mem_alloc(nbytes)


def _capturing(stream):
    """stream is a pygpu Stream that is capturing a graph."""
    return isinstance(stream, driver.Stream) and stream.is_capturing()


def _alloc(allocator, nbytes, stream):
    if allocator is not None:
        return allocator(nbytes)
    return stream_alloc(nbytes, stream)


_ga: Any = None  # pygpu.gpuarray, once a call needed it (it imports this module lazily)


def _gpuarray():
    global _ga
    if _ga is None:
        from pygpu import gpuarray

        _ga = gpuarray
    return _ga


def _array_allocator(ary):
    """ary's allocator, or None where it is the array module's default (then
    the stream-ordered pool on the launch's stream serves instead)."""
    allocator = getattr(ary, "allocator", None)
    if allocator is None:
        return None
    if allocator is getattr(_ga or _gpuarray(), "_default_allocator", None):
        return None
    return allocator


class ReductionKernel:
    """PyCUDA's ReductionKernel: reduce map_expr(i) over i with reduce_expr.

    dtype_out: the result's dtype; neutral: the neutral element (a C
    expression or a number); reduce_expr: combines a and b (both dtype_out);
    map_expr: element i's value (default 'in[i]', or the one vector's);
    arguments: a C parameter list (``'const float *x, float s'``).  Called with
    the arguments (GPUArrays for pointers, numbers for scalars), returns a
    0-d GPUArray.  Keywords: stream, allocator (called once), out (a GPUArray
    of dtype_out that receives the value), range (a slice or range of
    indices i) or slice (a slice of the first vector's indices).

    config: the kernel's shape, a dict or "key=value,..." (keys in
    REDUCTION_CONFIG_KEYS; default: PYGPU_REDUCTION_CONFIG, else
    REDUCTION_DEFAULTS).
    """

    def __init__(
        self,
        dtype_out: "np.typing.DTypeLike | None",
        neutral: "str | int | float",
        reduce_expr: str,
        map_expr: "str | None" = None,
        arguments: "str | Sequence[Any] | None" = None,
        name: str = "reduce_kernel",
        keep: bool = False,
        options: "Sequence[str] | None" = None,
        preamble: str = "",
        allocator: "Callable[[int], Any] | None" = None,
        config: "str | dict[str, Any] | None" = None,
    ) -> None:
        self.dtype_out = np.dtype(dtype_out)
        cfg = reduction_config(config)
        src, args, found, vec = _reduction_source(
            self.dtype_out, neutral, reduce_expr, map_expr, arguments, name, preamble, cfg
        )
        self.config = cfg
        self.block = cfg["block"]
        self.vec = vec
        # (position among the arguments, itemsize, alignment) of each vector-loaded one
        self._vec_args = tuple((pos, size, builtins.min(16, vec * size)) for pos, _, size in found)
        self._one_launch = cfg["launch"] == 1
        self.source = src
        self.arguments = args
        self.allocator = allocator
        self._vector_flags = tuple(is_vector(a) for a in args)
        self._first_vector = self._vector_flags.index(True)
        self._scalar_dtypes = tuple(
            None if v else np.dtype(a.dtype) for v, a in zip(self._vector_flags, args)
        )
        mod = compiler.SourceModule(src, options=options, keep=keep, no_extern_c=True)
        self.module = mod
        self.stage1 = mod.get_function(name + "_stage1")
        self.stage2 = mod.get_function(name + "_stage2")
        self.stage1.prepare(
            "P"
            + "".join(
                "P" if v else _scalar_char(d)
                for v, d in zip(self._vector_flags, self._scalar_dtypes)
            )
            + "qqQqQPP"
        )
        self.stage2.prepare("PPI")
        self._stage1 = self.stage1.prepared_async_call
        self._stage2 = self.stage2.prepared_async_call
        self.max_blocks = _max_blocks(self.stage1, self.block, cfg["bps"])
        self._per_block = self.block * _PER_THREAD
        self._item = self.dtype_out.itemsize
        self._offset = -(-builtins.max(self._item, 1) // 16) * 16  # partials' offset

    _gate = None

    def _convert(self, args):
        if len(args) != len(self._vector_flags):
            raise TypeError(
                "%s takes %d arguments (%s) but %d were given"
                % (
                    self.stage1.name[: -len("_stage1")],
                    len(self._vector_flags),
                    ", ".join(a.name for a in self.arguments),
                    len(args),
                )
            )
        out = []
        arrays = []
        ga = _ga or _gpuarray()
        for a, vec, dt, spec in zip(args, self._vector_flags, self._scalar_dtypes, self.arguments):
            if vec:
                if a.__class__ is ga.GPUArray:  # the common case, quickly
                    if not (a._c or a._f):
                        raise RuntimeError(
                            "ReductionKernel cannot deal with non-contiguous "
                            "arrays (argument %r)" % spec.name
                        )
                    arrays.append(a)
                    out.append(a.gpudata)
                    continue
                flags = getattr(a, "flags", None)
                if flags is None or not hasattr(a, "gpudata"):
                    raise TypeError(
                        "argument %r must be a GPUArray, not %s" % (spec.name, type(a).__name__)
                    )
                if not flags.forc:
                    raise RuntimeError(
                        "ReductionKernel cannot deal with non-contiguous "
                        "arrays (argument %r)" % spec.name
                    )
                arrays.append(a)
                out.append(a.gpudata)
            else:
                if dt.kind in "biufc":
                    out.append(dt.type(a))
                else:
                    out.append(np.array(a, dtype=dt)[()])
        # the operand gate: context, freed memory, extent, one memory order
        gate = self._gate
        if gate is None:
            gate = ga._check_operands
            self._gate = gate
            self._what = "ReductionKernel '%s'" % self.stage1.name[: -len("_stage1")]
        gate(self._what, arrays, same_layout=True)
        return out

    def __call__(
        self,
        *args: Any,
        stream: "Stream | None" = None,
        allocator: "Callable[[int], Any] | None" = None,
        out: "GPUArray | None" = None,
        range: Any = None,
        slice: "builtins.slice | None" = None,
        kernel_wrapper: "Callable[..., Any] | None" = None,
    ) -> "GPUArray":
        """Reduce; kernel_wrapper (PyCUDA's): a function given each stage's
        prepared_async_call that returns what is called in its place, as
        f(grid, block, stream, *args) (to time or trace the stages)."""
        inv = self._convert(args)
        repr_vec = args[self._first_vector]
        if range is not None and slice is not None:
            raise TypeError("give range= or slice=, not both")
        if range is not None:
            if isinstance(range, builtins.range):
                r = range
            elif isinstance(range, builtins.slice):
                if range.stop is None:
                    raise ValueError("range= needs a stop")
                r = builtins.range(
                    0 if range.start is None else range.start,
                    range.stop,
                    1 if range.step is None else range.step,
                )
            else:
                raise TypeError("range= must be a slice or a range, not %s" % type(range).__name__)
            start, step, count = r.start, r.step, len(r)
        elif slice is not None:
            if not isinstance(slice, builtins.slice):
                raise TypeError("slice= must be a slice, not %s" % type(slice).__name__)
            r = builtins.range(*slice.indices(repr_vec.size))
            start, step, count = r.start, r.step, len(r)
        else:
            start, step, count = 0, 1, repr_vec.size

        blocks = -(-count // self._per_block)
        if blocks > self.max_blocks:
            blocks = self.max_blocks
        elif blocks < 1:
            blocks = 1
        vbase, nvec = start, 0
        if self._vec_args and step == 1 and count >= 2 * self.vec:
            vbase, nvec = self._vector_span(inv, start, count)
        if allocator is None:
            allocator = self.allocator
            if allocator is None:
                allocator = _array_allocator(repr_vec)
        item = self._item
        one = self._one_launch and blocks > 1
        # the partial results (and the ticket, 16 bytes before them, with one launch)
        extra = 16 if one else 0
        if out is not None:
            if getattr(out, "dtype", None) != self.dtype_out:
                raise ValueError("out must have the same dtype as dtype_out")
            if out.size == 0:
                raise ValueError("out array is empty")
            from pygpu.gpuarray import _check_operands

            _check_operands("ReductionKernel out", (out,))
            result = out
            target = out.gpudata
            if blocks > 1:
                pbuf = _alloc(allocator, extra + blocks * item, stream)
                partial = int(pbuf) + extra
            else:
                partial = target
        else:
            result = None
            if blocks > 1:
                buf = _alloc(allocator, self._offset + extra + blocks * item, stream)
                partial = int(buf) + self._offset + extra
            else:
                buf = _alloc(allocator, builtins.max(item, 1), stream)
                partial = buf
            target = buf
        stage1, stage2 = self._stage1, self._stage2
        if kernel_wrapper is not None:
            stage1 = kernel_wrapper(stage1)
            stage2 = kernel_wrapper(stage2)
        if one:
            ticket = partial - 16
            if stream is None:
                driver.memset_d32_async(ticket, 0, 1)
            else:
                driver.memset_d32_async(ticket, 0, 1, stream)
            stage1(
                (blocks, 1),
                (self.block, 1, 1),
                stream,
                partial,
                *inv,
                start,
                step,
                count,
                vbase,
                nvec,
                ticket,
                target,
            )
        else:
            stage1(
                (blocks, 1),
                (self.block, 1, 1),
                stream,
                partial,
                *inv,
                start,
                step,
                count,
                vbase,
                nvec,
                0,
                0,
            )
            if blocks > 1:
                stage2((1, 1), (self.block, 1, 1), stream, target, partial, blocks)
        if result is None:
            result = _ga.GPUArray((), self.dtype_out, allocator=allocator, gpudata=buf)
        return result

    def _vector_span(self, inv, start, count):
        """(vbase, nvec): the vector loads cover indices vbase ... vbase +
        vec*nvec - 1, where every vector-loaded argument's element vbase is
        aligned to its load; (start, 0) where no such vbase is near start."""
        vec = self.vec
        pos, size, align = self._vec_args[0]
        rem = (int(inv[pos]) + start * size) % align
        if rem % size:
            return start, 0
        head = ((align - rem) % align) // size
        vbase = start + head
        for pos, size, align in self._vec_args[1:]:
            if (int(inv[pos]) + vbase * size) % align:
                return start, 0
        return vbase, (count - head) // vec


# ---- the kernels behind gpuarray.sum/dot/min/max/... ----


@context_dependent_memoize
def get_sum_kernel(
    dtype_out: "np.typing.DTypeLike | None", dtype_in: "np.typing.DTypeLike"
) -> "ReductionKernel":
    """gpuarray.sum's kernel: sum(in), in dtype_out (None: dtype_in)."""
    if dtype_out is None:
        dtype_out = dtype_in
    return ReductionKernel(
        dtype_out, "0", "a+b", arguments="const %s *in" % dtype_to_ctype(dtype_in)
    )


@context_dependent_memoize
def get_any_kernel(
    dtype_out: "np.typing.DTypeLike | None", dtype_in: "np.typing.DTypeLike"
) -> "ReductionKernel":
    """gpuarray.any's kernel."""
    if dtype_out is None:
        dtype_out = dtype_in
    return ReductionKernel(
        dtype_out,
        "0",
        "(a != 0) || (b != 0)",
        map_expr="in[i] != 0",
        arguments="const %s *in" % dtype_to_ctype(dtype_in),
    )


@context_dependent_memoize
def get_all_kernel(
    dtype_out: "np.typing.DTypeLike | None", dtype_in: "np.typing.DTypeLike"
) -> "ReductionKernel":
    """gpuarray.all's kernel."""
    if dtype_out is None:
        dtype_out = dtype_in
    return ReductionKernel(
        dtype_out,
        "1",
        "(a != 0) && (b != 0)",
        map_expr="in[i] != 0",
        arguments="const %s *in" % dtype_to_ctype(dtype_in),
    )


@context_dependent_memoize
def get_subset_sum_kernel(
    dtype_out: "np.typing.DTypeLike | None",
    dtype_subset: "np.typing.DTypeLike",
    dtype_in: "np.typing.DTypeLike",
) -> "ReductionKernel":
    """gpuarray.subset_sum's kernel: sum(in[lookup_tbl[i]]) over lookup_tbl."""
    if dtype_out is None:
        dtype_out = dtype_in
    return ReductionKernel(
        dtype_out,
        "0",
        "a+b",
        map_expr="in[lookup_tbl[i]]",
        arguments="const %s *lookup_tbl, const %s *in"
        % (dtype_to_ctype(dtype_subset), dtype_to_ctype(dtype_in)),
    )


@context_dependent_memoize
def _dot_kernel(dtype_out, dtype_a, dtype_b, conjugate_first):
    if dtype_out is None:
        dtype_out = np.result_type(dtype_a, dtype_b)
    a = "conj(a[i])" if conjugate_first and np.dtype(dtype_a).kind == "c" else "a[i]"
    return ReductionKernel(
        dtype_out,
        neutral="0",
        reduce_expr="a+b",
        map_expr=a + "*b[i]",
        arguments="const %s *a, const %s *b" % (dtype_to_ctype(dtype_a), dtype_to_ctype(dtype_b)),
    )


def get_dot_kernel(
    dtype_out: "np.typing.DTypeLike | None",
    dtype_a: "np.typing.DTypeLike | None",
    dtype_b: "np.typing.DTypeLike | None",
    conjugate_first: bool = False,
) -> Any:
    """gpuarray.dot's kernel: sum(a[i]*b[i]); with conjugate_first,
    sum(conj(a[i])*b[i]) (vdot)."""
    return _dot_kernel(dtype_out, np.dtype(dtype_a), np.dtype(dtype_b), bool(conjugate_first))


def get_vdot_kernel(
    dtype_out: "np.typing.DTypeLike | None",
    dtype_a: "np.typing.DTypeLike | None",
    dtype_b: "np.typing.DTypeLike | None",
) -> Any:
    """gpuarray.vdot's kernel: sum(conj(a[i])*b[i])."""
    return get_dot_kernel(dtype_out, dtype_a, dtype_b, conjugate_first=True)


@context_dependent_memoize
def get_subset_dot_kernel(
    dtype_out: "np.typing.DTypeLike | None",
    dtype_subset: "np.typing.DTypeLike",
    dtype_a: "np.typing.DTypeLike | None" = None,
    dtype_b: "np.typing.DTypeLike | None" = None,
) -> "ReductionKernel":
    """gpuarray.subset_dot's kernel: sum(a[t]*b[t]) for t in lookup_tbl."""
    if dtype_out is None:
        dtype_out = dtype_a
    if dtype_b is None:
        dtype_b = dtype_out if dtype_a is None else dtype_a
    if dtype_a is None:
        dtype_a = dtype_out
    # lookup_tbl first: the first vector gives the length
    return ReductionKernel(
        dtype_out,
        neutral="0",
        reduce_expr="a+b",
        map_expr="a[lookup_tbl[i]]*b[lookup_tbl[i]]",
        arguments="const %s *lookup_tbl, const %s *a, const %s *b"
        % (dtype_to_ctype(dtype_subset), dtype_to_ctype(dtype_a), dtype_to_ctype(dtype_b)),
    )


_INF = "__longlong_as_double(0x7ff0000000000000LL)"


def get_minmax_neutral(what: str, dtype: "np.typing.DTypeLike") -> str:
    """The neutral element of min or max over dtype, as a C expression."""
    dtype = np.dtype(dtype)
    if what not in ("min", "max"):
        raise ValueError("what is not min or max.")
    if dtype.kind == "f":
        return _INF if what == "min" else "(-%s)" % _INF
    if dtype.kind == "b":
        return "true" if what == "min" else "false"
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        if dtype.kind == "u":
            return "%dULL" % info.max if what == "min" else "0"
        return "%dLL" % info.max if what == "min" else "(%dLL - 1)" % (info.min + 1)
    raise TypeError("unsupported dtype specified")


def _minmax_expr(what, dtype):
    dtype = np.dtype(dtype)
    if dtype.kind not in "fiub":
        raise TypeError("unsupported dtype specified")
    op = "<" if what == "min" else ">"
    if dtype.kind == "f":
        # NaN wins, as in NumPy
        return "(a %s b || a != a) ? a : b" % op
    return "(a %s b) ? a : b" % op


@context_dependent_memoize
def get_minmax_kernel(what: str, dtype: "np.typing.DTypeLike") -> "ReductionKernel":
    """gpuarray.min/max's kernel (NaN propagates, as in NumPy)."""
    dtype = np.dtype(dtype)
    neutral = get_minmax_neutral(what, dtype)
    return ReductionKernel(
        dtype,
        neutral=neutral,
        reduce_expr=_minmax_expr(what, dtype),
        arguments="const %s *in" % dtype_to_ctype(dtype),
    )


@context_dependent_memoize
def get_subset_minmax_kernel(
    what: str, dtype: "np.typing.DTypeLike", dtype_subset: "np.typing.DTypeLike"
) -> "ReductionKernel":
    """gpuarray.subset_min/subset_max's kernel."""
    dtype = np.dtype(dtype)
    neutral = get_minmax_neutral(what, dtype)
    return ReductionKernel(
        dtype,
        neutral=neutral,
        reduce_expr=_minmax_expr(what, dtype),
        map_expr="in[lookup_tbl[i]]",
        arguments="const %s *lookup_tbl, const %s *in"
        % (dtype_to_ctype(dtype_subset), dtype_to_ctype(dtype)),
    )


# ---- PyCUDA's two-stage reduction kernel builder (pycuda.reduction's
# get_reduction_module and get_reduction_kernel_and_types) ----

_PYCUDA_STAGE_SOURCE = """
%(types)s
#define BLOCK_SIZE %(block_size)d
#define READ_AND_MAP(i) (%(map_expr)s)
#define REDUCE(a, b) (%(reduce_expr)s)

%(preamble)s

typedef %(out_type)s out_type;

// out[b] = REDUCE over the elements i = b*BLOCK_SIZE*seq_count + t + s*BLOCK_SIZE
// (t < BLOCK_SIZE, s < seq_count, i < n) of READ_AND_MAP(i); launched with
// BLOCK_SIZE threads a block and BLOCK_SIZE*sizeof(out_type) bytes of
// dynamic shared memory
extern "C" __global__ void %(name)s(out_type *out, %(arguments)s,
                                    unsigned int seq_count, size_t n)
{
    extern __shared__ __align__(16) unsigned char pygpu_reduction_smem[];
    out_type *sdata = (out_type *)pygpu_reduction_smem;
    const unsigned int tid = threadIdx.x;
    size_t i = (size_t)blockIdx.x * BLOCK_SIZE * seq_count + tid;
    out_type acc = %(neutral)s;
    for (unsigned int s = 0; s < seq_count && i < n; ++s, i += BLOCK_SIZE)
        acc = REDUCE(acc, READ_AND_MAP(i));
    sdata[tid] = acc;
    __syncthreads();
    for (unsigned int half = BLOCK_SIZE / 2; half > 0; half >>= 1) {
        if (tid < half)
            sdata[tid] = REDUCE(sdata[tid], sdata[tid + half]);
        __syncthreads();
    }
    if (tid == 0)
        out[blockIdx.x] = sdata[0];
}
"""


def get_reduction_module(
    out_type: str,
    block_size: int,
    neutral: str,
    reduce_expr: str,
    map_expr: "str | None",
    arguments: Any,
    name: str = "reduce_kernel",
    keep: bool = False,
    options: "Sequence[str] | None" = None,
    preamble: str = "",
) -> Any:
    """PyCUDA's one-stage reduction kernel as a SourceModule: ``name(out_type
    *out, arguments..., unsigned int seq_count, size_t n)`` reduces, in
    each block of block_size threads, seq_count * block_size consecutive
    values of map_expr (a C expression in i) with reduce_expr (in a and b)
    into out[blockIdx.x].  Launch it with block=(block_size, 1, 1) and
    shared=block_size * sizeof(out_type).  out_type and arguments are C
    text, as in PyCUDA."""
    block_size = int(block_size)
    if block_size < 1 or block_size & (block_size - 1) or block_size > 1024:
        raise ValueError(
            "get_reduction_module(): block_size must be a power of two from 1 "
            "to 1024, got %d" % block_size
        )
    for value, what in (
        (out_type, "out_type"),
        (reduce_expr, "reduce_expr"),
        (map_expr, "map_expr"),
        (arguments, "arguments"),
    ):
        _check_str(value, what)
    neutral = _neutral_text(neutral)
    name = _check_name(name)
    types = complex_source() if needs_complex(out_type, arguments, preamble) else ""
    src = _PYCUDA_STAGE_SOURCE % dict(
        types=types,
        block_size=block_size,
        map_expr=map_expr,
        reduce_expr=reduce_expr,
        preamble=preamble,
        out_type=out_type,
        name=name,
        arguments=arguments,
        neutral=neutral,
    )
    return compiler.SourceModule(src, options=options, keep=keep, no_extern_c=True)


def get_reduction_kernel_and_types(
    stage: int,
    out_type: str,
    block_size: int,
    neutral: str,
    reduce_expr: str,
    map_expr: "str | None" = None,
    arguments: Any = None,
    name: str = "reduce_kernel",
    keep: bool = False,
    options: "Sequence[str] | None" = None,
    preamble: str = "",
) -> Any:
    """(prepared Function, argument type chars) of a stage of PyCUDA's
    two-stage reduction: stage 1 maps the arguments (map_expr, default
    ``in[i]``); stage 2 reduces stage 1's per-block results, given as its
    first argument ``pycuda_reduction_inp`` (default map_expr
    ``pycuda_reduction_inp[i]``).  The Function is prepared as ``P``, the
    arguments' chars, ``I`` (seq_count), ``N`` (n)."""
    from pygpu.tools import parse_c_arg

    if stage == 1:
        if map_expr is None:
            map_expr = "in[i]"
    elif stage == 2:
        if map_expr is None:
            map_expr = "pycuda_reduction_inp[i]"
        in_arg = "const %s *pycuda_reduction_inp" % out_type
        arguments = in_arg + ", " + arguments if arguments else in_arg
    else:
        raise ValueError(
            "get_reduction_kernel_and_types(): stage must be 1 or 2, got %r" % (stage,)
        )
    if arguments is None:
        raise TypeError(
            "get_reduction_kernel_and_types(): stage 1 needs arguments (e.g. 'const float *in')"
        )
    mod = get_reduction_module(
        out_type,
        block_size,
        neutral,
        reduce_expr,
        map_expr,
        arguments,
        name,
        keep,
        options,
        preamble,
    )
    func = mod.get_function(name)
    arg_types = [parse_c_arg(a).struct_char for a in arguments.split(",")]
    func.prepare("P%sIN" % "".join(arg_types))
    return func, arg_types


__all__ += ["get_reduction_module", "get_reduction_kernel_and_types"]
