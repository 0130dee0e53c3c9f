"""Element-wise kernels, as in pycuda.elementwise.

    from pygpu.elementwise import ElementwiseKernel
    lin_comb = ElementwiseKernel(
        "float a, float *x, float b, float *y, float *z",
        "z[i] = a*x[i] + b*y[i]", "linear_combination")
    lin_comb(5, x_gpu, 6, y_gpu, z_gpu)            # x_gpu... are GPUArrays
    lin_comb(5, x_gpu, 6, y_gpu, z_gpu, slice=slice(0, 100, 2))

The operation runs for each i in [0, n) (n: the size of the first array
argument) in a grid-stride loop; with range=/slice= i runs over that range
instead.  Kernels are compiled through SourceModule (its memory and disk
caches: a second process pays no compile) and remembered per context.

Below ElementwiseKernel: the kernel builders gpuarray's operators use
(get_axpbyz_kernel, get_binary_op_kernel, get_fill_kernel, ... with
PyCUDA's names and argument orders), and get_map_kernel, the generic
builder behind pygpu.gpuarray's operators (contiguous, strided and
broadcast operands).
"""

import builtins
from typing import TYPE_CHECKING, Any, NoReturn, Sequence
import re
import threading

import numpy as np

from pygpu import tools
from pygpu._errors import CompileError
from pygpu.tools import (
    ScalarArg,
    VectorArg,
    _parse_arguments,
    context_dependent_memoize,
    dtype_to_ctype,
)

if TYPE_CHECKING:  # annotations only (gpuarray imports this module)
    from pygpu._driver import Function, Stream

__all__ = [
    "ElementwiseKernel",
    "get_elwise_module",
    "get_elwise_range_module",
    "get_elwise_kernel_and_types",
    "get_elwise_kernel",
    "get_map_kernel",
    "get_copy_kernel",
    "get_axpbyz_kernel",
    "get_axpbz_kernel",
    "get_binary_op_kernel",
    "get_rdivide_elwise_kernel",
    "get_binary_func_kernel",
    "get_binary_func_scalar_kernel",
    "get_binary_minmax_kernel",
    "get_fill_kernel",
    "get_reverse_kernel",
    "get_real_kernel",
    "get_imag_kernel",
    "get_conj_kernel",
    "get_arange_kernel",
    "get_pow_array_kernel",
    "get_fmod_kernel",
    "get_modf_kernel",
    "get_frexp_kernel",
    "get_ldexp_kernel",
    "get_unary_func_kernel",
    "get_if_positive_kernel",
    "get_where_kernel",
    "get_scalar_op_kernel",
    "get_logical_not_kernel",
    "get_take_kernel",
    "get_linear_combination_kernel",
]

_lock = threading.Lock()
_prelude = None


def prelude():
    """The CUDA C every generated kernel starts with: the complex type
    (kernels/elementwise_complex.cuh) and the helpers
    (kernels/elementwise.cuh)."""
    global _prelude
    if _prelude is None:
        from pygpu.compiler import kernel_source

        text = (
            kernel_source("elementwise_complex.cuh")
            + "\n"
            + kernel_source("elementwise.cuh")
            + "\n"
        )
        _prelude = text.replace("#pragma once\n", "")
    return _prelude


# PyCUDA's own headers: their content is in the prelude already
_PYCUDA_HEADERS = (
    "#include <pycuda-complex.hpp>",
    '#include "pycuda-complex.hpp"',
    "#include <pycuda-helpers.hpp>",
    '#include "pycuda-helpers.hpp"',
)


def _clean_preamble(preamble):
    if not isinstance(preamble, str):
        raise TypeError("preamble must be a str, not %s" % type(preamble).__name__)
    for h in _PYCUDA_HEADERS:
        preamble = preamble.replace(h, "")
    return preamble


def _check_code(value, what):
    if not isinstance(value, str):
        raise TypeError("%s must be a str, not %s" % (what, type(value).__name__))
    return value


def _source(arguments, operation, name, preamble, loop_prep, after_loop, use_range, restrict=False):
    _check_code(operation, "operation")
    _check_code(loop_prep, "loop_prep")
    _check_code(after_loop, "after_loop")
    if not isinstance(name, str) or not name.isidentifier():
        raise ValueError("the kernel name must be a C identifier, not %r" % (name,))
    if restrict:
        # the arrays do not overlap (ElementwiseKernel checks at each call):
        # four elements a thread per round, whose loads the compiler may then
        # issue together ahead of the stores
        params = ", ".join(
            "%s *__restrict__ %s" % (dtype_to_ctype(a.dtype), a.name)
            if isinstance(a, VectorArg)
            else a.declarator()
            for a in arguments
        )
    else:
        params = ", ".join(a.declarator() for a in arguments)
    if restrict and not use_range:
        loop = (
            "  size_t pygpu_base = cta_start + tid;\n"
            "  for (; pygpu_base + 3 * total_threads < n; pygpu_base += 4 * total_threads) {\n"
            "#pragma unroll\n"
            "    for (int pygpu_u = 0; pygpu_u < 4; ++pygpu_u) {\n"
            "      i = pygpu_base + pygpu_u * total_threads;\n"
            "      %s;\n    }\n  }\n"
            "  for (i = pygpu_base; i < n; i += total_threads) {\n"
            "    %s;\n  }\n" % (operation, operation)
        )
        ivar = "size_t i;"
    elif use_range:
        loop = (
            "  if (step < 0) {\n"
            "    for (i = start + ((long)cta_start + (long)tid) * step; i > stop;"
            " i += (long)total_threads * step) {\n      %s;\n    }\n"
            "  } else {\n"
            "    for (i = start + ((long)cta_start + (long)tid) * step; i < stop;"
            " i += (long)total_threads * step) {\n      %s;\n    }\n"
            "  }\n" % (operation, operation)
        )
        ivar = "long i;"
    else:
        loop = (
            "  for (i = cta_start + tid; i < n; i += total_threads) {\n    %s;\n  }\n" % operation
        )
        ivar = "size_t i;"
    return (
        "%s\n%s\n\nextern \"C\" __global__ void %s(%s)\n{\n"
        "  size_t tid = threadIdx.x;\n"
        "  size_t total_threads = (size_t)gridDim.x * blockDim.x;\n"
        "  size_t cta_start = (size_t)blockDim.x * blockIdx.x;\n"
        "  %s\n  %s;\n%s  %s;\n}\n"
        % (prelude(), _clean_preamble(preamble), name, params, ivar, loop_prep, loop, after_loop)
    )


def _module(source, options, keep):
    from pygpu.compiler import SourceModule

    if isinstance(options, list):
        options = tuple(options)
    return SourceModule(source, options=options, keep=keep, no_extern_c=True)


def get_elwise_module(
    arguments: "str | Sequence[Any]",
    operation: str,
    name: str = "kernel",
    keep: bool = False,
    options: "Sequence[str] | None" = None,
    preamble: str = "",
    loop_prep: str = "",
    after_loop: str = "",
    restrict: bool = False,
) -> Any:
    """The SourceModule of an element-wise kernel over i in [0, n); the
    arguments must end with the size n (PyCUDA's layout).  restrict=True
    declares the pointers __restrict__ (the arrays must not overlap) and
    takes four elements a thread per round."""
    arguments = _parse_arguments(arguments)
    return _module(
        _source(arguments, operation, name, preamble, loop_prep, after_loop, False, restrict),
        options,
        keep,
    )


def get_elwise_range_module(
    arguments: "str | Sequence[Any]",
    operation: str,
    name: str = "kernel",
    keep: bool = False,
    options: "Sequence[str] | None" = None,
    preamble: str = "",
    loop_prep: str = "",
    after_loop: str = "",
    restrict: bool = False,
) -> Any:
    """The SourceModule of an element-wise kernel over i in range(start,
    stop, step); the arguments must end with start, stop, step."""
    arguments = _parse_arguments(arguments)
    return _module(
        _source(arguments, operation, name, preamble, loop_prep, after_loop, True, restrict),
        options,
        keep,
    )


def get_elwise_kernel_and_types(
    arguments: "str | Sequence[Any]",
    operation: str,
    name: str = "kernel",
    keep: bool = False,
    options: "Sequence[str] | None" = None,
    use_range: bool = False,
    restrict: bool = False,
    **kwargs: Any,
) -> Any:
    """(module, prepared Function, arguments with n or start/stop/step
    appended)."""
    arguments = list(_parse_arguments(arguments))
    if use_range:
        arguments.extend(
            [ScalarArg(np.intp, "start"), ScalarArg(np.intp, "stop"), ScalarArg(np.intp, "step")]
        )
    else:
        arguments.append(ScalarArg(np.uintp, "n"))
    unknown = set(kwargs) - {"preamble", "loop_prep", "after_loop"}
    if unknown:
        raise TypeError("unexpected keyword argument(s): %s" % ", ".join(sorted(unknown)))
    builder = get_elwise_range_module if use_range else get_elwise_module
    mod = builder(arguments, operation, name, keep, options, restrict=restrict, **kwargs)
    func = mod.get_function(name)
    func.prepare("".join(a.struct_char for a in arguments))
    return mod, func, arguments


def get_elwise_kernel(
    arguments: "str | Sequence[Any]",
    operation: str,
    name: str = "kernel",
    keep: bool = False,
    options: "Sequence[str] | None" = None,
    **kwargs: Any,
) -> Any:
    """A prepared Function running operation for each i < n; call it with
    func.prepared_async_call(grid, block, stream, *args, n)."""
    return get_elwise_kernel_and_types(arguments, operation, name, keep, options, **kwargs)[1]


def _scalar_value(value, dtype, what):
    """A kernel scalar argument converted to dtype (what the launch packs)."""
    tp = type(value)
    kind = dtype.kind
    if tp is float and kind == "f":
        return value
    if tp is int and kind in "iuf" and not isinstance(value, bool):
        return dtype.type(value) if kind == "f" else value
    if kind == "V":
        try:
            return np.asarray(value, dtype)[()]
        except (TypeError, ValueError) as e:
            raise TypeError("%s: cannot make a %s from %r (%s)" % (what, dtype, value, e)) from None
    if isinstance(value, np.ndarray):
        if value.ndim != 0:
            raise TypeError("%s: expected a scalar, got an array of shape %s" % (what, value.shape))
        value = value[()]
    if hasattr(value, "__cuda_array_interface__") or hasattr(value, "gpudata"):
        raise TypeError("%s is a scalar (%s) but got an array" % (what, dtype))
    if kind not in "c" and isinstance(value, (complex, np.complexfloating)):
        raise TypeError("%s is %s, which cannot hold the complex value %r" % (what, dtype, value))
    try:
        return dtype.type(value)
    except (TypeError, ValueError, OverflowError) as e:
        raise TypeError("%s: cannot convert %r to %s (%s)" % (what, value, dtype, e)) from None


def _span(arg):
    """(start, end) of a dense array's bytes, or None where its address
    can't be read (a freed allocation: the launch names it)."""
    g = arg.gpudata
    try:
        ptr = g if g.__class__ is int else int(g)
    except Exception:
        return None
    return ptr, ptr + arg.nbytes


# what in an operation the four-a-round loop would change: break leaves
# the round only (not the thread's loop), goto labels and inline assembly
# are pasted several times, and an assignment to i is undone by the next
# element (continue goes on to the next element in both forms)
_NO_RESTRICT = re.compile(
    r"\b(break|goto|asm|__asm__|__asm)\b"
    r"|(?<![\w.>])i\s*(?:[-+*/%&|^]|<<|>>)?=(?!=)"
    r"|(?<![\w.>])i\s*(?:\+\+|--)|(?:\+\+|--)\s*i\b"
)


def _restrict_allowed(operation):
    """Whether operation may run in the __restrict__ form (four elements a
    thread per round): no break, goto, inline assembly or assignment to i."""
    return _NO_RESTRICT.search(operation) is None


def _disjoint(spans):
    """True when no two of the (start, end) byte ranges overlap: the kernel
    may then declare its pointers __restrict__.  An array passed twice, or
    two views of one buffer that share bytes, take the plain kernel (so
    does an array whose address can't be read: None)."""
    n = len(spans)
    if None in spans:
        return False
    if n < 2:
        return True
    if n <= 4:  # the common few: pairwise
        for j in range(1, n):
            s, e = spans[j]
            for k in range(j):
                s2, e2 = spans[k]
                if s < e2 and s2 < e:
                    return False
        return True
    spans = sorted(spans)
    end = spans[0][1]
    for s, e in spans[1:]:
        if s < end:
            return False
        end = e
    return True


class ElementwiseKernel:
    """A kernel applying operation for every index i of its array
    arguments (see the module docstring).  Arguments: a C declaration list
    (``"float a, float *x"``) or a list of VectorArg/ScalarArg."""

    def __init__(
        self,
        arguments: "str | Sequence[Any]",
        operation: str,
        name: str = "kernel",
        keep: bool = False,
        options: "Sequence[str] | None" = None,
        preamble: str = "",
        loop_prep: str = "",
        after_loop: str = "",
        *,
        restrict: bool = True,
    ) -> None:
        self.arguments = _parse_arguments(arguments)
        if not any(isinstance(a, VectorArg) for a in self.arguments):
            raise ValueError("ElementwiseKernel needs at least one array (pointer) argument")
        _check_code(operation, "operation")
        self.name = name
        self.operation = operation
        self.gen_kwargs = {
            "preamble": _clean_preamble(preamble),
            "loop_prep": loop_prep,
            "after_loop": after_loop,
        }
        self.keep = keep
        self.options = tuple(options) if isinstance(options, list) else options
        self._funcs: "dict[Any, Any]" = {}
        self._plan = None
        self._config = (-1, None, None)  # (n, grid, block) of the last call
        # restrict=False: always the plain kernel (for memory the operation
        # reaches other than through its array arguments)
        self._restrict_ok = bool(restrict) and _restrict_allowed(operation)

    def generate_stride_kernel_and_types(self, use_range: bool) -> Any:
        return self._kernel_and_types(use_range, False)

    def get_texref(self, name: str, use_range: bool = False) -> "NoReturn":
        """PyCUDA's texture references: gone since CUDA 12 (LogicError, as
        SourceModule.get_texref)."""
        from pygpu import compiler, driver

        raise driver.LogicError(compiler._NO_TEXREFS % ("get_texref", name, "GetTexRef"))

    def _kernel_and_types(self, use_range, restrict):
        key = (tools._current_context(), bool(use_range), restrict)
        found = self._funcs.get(key)
        if found is None:
            if restrict and not self._restrict_ok:
                return self._kernel_and_types(use_range, False)
            try:
                found = get_elwise_kernel_and_types(
                    list(self.arguments),
                    self.operation,
                    self.name,
                    self.keep,
                    self.options,
                    use_range=use_range,
                    restrict=restrict,
                    **self.gen_kwargs,
                )
            except CompileError:
                if not restrict:
                    raise
                # what compiles plainly but not four times over (a label in
                # the preamble's macros, say): the plain kernel from now on
                self._restrict_ok = False
                return self._kernel_and_types(use_range, False)
            self._funcs[key] = found
        return found

    def get_function(self, use_range: bool = False) -> "Function":
        """The prepared Function (compiled on first use)."""
        return self.generate_stride_kernel_and_types(use_range)[1]

    def _fast_call(self, args, stream):
        """The common call: every array an exact, dense GPUArray of its
        argument's dtype, every scalar a NumPy scalar of its dtype (or a
        Python float/int for a float/integer argument).  Launches and returns
        True; False (nothing done) sends the call through the checks."""
        plan = self._plan
        if plan is None:
            from pygpu import _driver
            from pygpu.gpuarray import GPUArray, _check_one
            from pygpu.driver import DeviceAllocation

            # the current context as this thread remembers it (no driver call:
            # docs/contexts.md, "The current context")
            plan = self._plan = (
                [
                    (isinstance(a, VectorArg), a.dtype, a.dtype.type, a.dtype.kind)
                    for a in self.arguments
                ],
                GPUArray,
                DeviceAllocation,
                _driver._current_context,
                _check_one,
                "kernel '%s'" % self.name,
            )
        plan, GPUArray, DA, get_current, check_one, what = plan
        if len(args) != len(plan):
            return False
        inv = []
        spans = []
        first = None
        ctx = get_current()
        for arg, (vec, dt, stype, kind) in zip(args, plan):
            tp = arg.__class__
            if vec:
                if (
                    tp is not GPUArray
                    or not (arg._c or arg._f)
                    or (arg.dtype is not dt and arg.dtype != dt)
                ):
                    return False
                # proved here: a DeviceAllocation of this context that holds
                # the array (a dense array whose data starts at the
                # allocation: nbytes <= size); the launch refuses a freed
                # one.  A view, a pooled block or foreign memory: the gate
                g = arg.gpudata
                if g.__class__ is not DA or g.context is not ctx or arg.nbytes > g.size:
                    if arg.size:
                        check_one(arg, ctx, what)  # the gate: raises, or it is fine
                if (
                    first is not None
                    and arg.shape == first.shape
                    and not ((arg._c and first._c) or (arg._f and first._f))
                ):
                    return False  # two memory orders: the gate names them
                if first is None:
                    first = arg
                if arg.size:
                    span = _span(arg)
                    if span is None:
                        return False
                    spans.append(span)
                    inv.append(arg.gpudata)
                else:
                    inv.append(0)
            elif (
                (tp is stype and (kind != "V" or arg.dtype == dt))
                or (tp is float and kind == "f")
                or (tp is int and kind in "iu")
            ):
                inv.append(arg)
            else:
                return False
        n = first.size
        if n:
            func = self._kernel_and_types(False, _disjoint(spans))[1]
            cfg = self._config
            if cfg[0] != n:
                cfg = self._config = (n, first._grid, first._block)
            func.prepared_async_call(cfg[1], cfg[2], stream, *inv, n)
        return True

    def __call__(
        self,
        *args: Any,
        range: Any = None,
        slice: "builtins.slice | None" = None,
        stream: "Stream | None" = None,
    ) -> None:
        if range is None and slice is None and self._fast_call(args, stream):
            return
        from pygpu.gpuarray import GPUArray, asarray, splay

        if len(args) != len(self.arguments):
            raise TypeError(
                "kernel '%s' takes %d arguments (%s), got %d"
                % (
                    self.name,
                    len(self.arguments),
                    ", ".join(a.name for a in self.arguments),
                    len(args),
                )
            )
        if range is not None and slice is not None:
            raise TypeError("may not specify both range and slice keyword arguments")
        use_range = range is not None or slice is not None
        from pygpu.gpuarray import _check_operands

        inv = []
        spans = []  # (start, end) of each array argument's bytes
        first: Any = None
        arrays = []
        for arg, descr in zip(args, self.arguments):
            if isinstance(descr, VectorArg):
                if not isinstance(arg, GPUArray):
                    if isinstance(arg, np.ndarray):
                        raise TypeError(
                            "kernel '%s': argument '%s' is an array (%s *) but got "
                            "a NumPy array, which is in host memory (copy it "
                            "with gpuarray.to_gpu)"
                            % (self.name, descr.name, dtype_to_ctype(descr.dtype))
                        )
                    if arg is None or not (
                        hasattr(arg, "__cuda_array_interface__") or hasattr(arg, "__dlpack__")
                    ):
                        raise TypeError(
                            "kernel '%s': argument '%s' is an array (%s *) but "
                            "got %s"
                            % (
                                self.name,
                                descr.name,
                                dtype_to_ctype(descr.dtype),
                                type(arg).__name__,
                            )
                        )
                    arg = asarray(arg)
                if not arg.flags.forc:
                    raise RuntimeError(
                        "elementwise kernel cannot deal with non-contiguous "
                        "arrays (argument '%s')" % descr.name
                    )
                if arg.dtype != descr.dtype and not (
                    arg.dtype.itemsize == descr.dtype.itemsize
                    and "V" in (arg.dtype.kind, descr.dtype.kind)
                ):
                    raise TypeError(
                        "kernel '%s': argument '%s' is %s * but the array is %s"
                        % (self.name, descr.name, dtype_to_ctype(descr.dtype), arg.dtype)
                    )
                if first is None:
                    first = arg
                arrays.append(arg)
                if arg.size:
                    spans.append(_span(arg))
                    inv.append(arg.gpudata)
                else:
                    inv.append(0)
            else:
                inv.append(
                    _scalar_value(
                        arg, descr.dtype, "kernel '%s': argument '%s'" % (self.name, descr.name)
                    )
                )
        # the operand gate: context, freed memory, extent, one memory order
        _check_operands("kernel '%s'" % self.name, arrays, same_layout=True)
        func = self._kernel_and_types(use_range, not use_range and _disjoint(spans))[1]
        if use_range:
            if slice is not None:
                start, stop, step = slice.indices(first.size)
            else:
                if not hasattr(range, "start"):
                    raise TypeError(
                        "range= takes a slice or range object, not %s" % type(range).__name__
                    )
                start, stop, step = range.start, range.stop, range.step
                start = 0 if start is None else start
                step = 1 if step is None else step
            if step == 0:
                raise ValueError("the step of range/slice may not be 0")
            count = max(0, -(-(stop - start) // step))
            if count == 0:
                return
            grid, block = splay(count)
            inv.extend((start, stop, step))
        else:
            n = first.size
            if n == 0:
                return
            grid, block = first._grid, first._block
            inv.append(n)
        func.prepared_async_call(grid, block, stream, *inv)


# ---- the generic map kernel behind gpuarray's operators ----


def _ct(dtype):
    return dtype_to_ctype(dtype)


def _collapse(shape, stride_lists):
    """Merge adjacent dimensions that are contiguous in every operand
    (strides in elements, C order: last index fastest); drop size-1 ones."""
    dims = [(n, [s[k] for s in stride_lists]) for k, n in enumerate(shape) if n != 1]
    if not dims:
        return (1,), [[0] for _ in stride_lists]
    out = [dims[-1]]
    for n, st in reversed(dims[:-1]):
        n0, st0 = out[-1]
        if all(a == b * n0 for a, b in zip(st, st0)):
            out[-1] = (n * n0, st0)
        else:
            out.append((n, st))
    out.reverse()
    shape = tuple(n for n, _ in out)
    strides = [[st[j] for _, st in out] for j in range(len(stride_lists))]
    return shape, strides


def _map_source(name, expr, kinds, dtypes, cdtypes, out_dtype, ndim):
    """kinds: per input 'a' (array), 'g' (device scalar: element 0), 's'
    (by value); cdtypes: the type each input is cast to before expr."""
    params = ["%s *__restrict__ z" % _ct(out_dtype)]
    reads = []
    for k, (kind, dt, cdt) in enumerate(zip(kinds, dtypes, cdtypes)):
        ct = _ct(dt)
        if kind == "s":
            params.append("%s s%d" % (ct, k))
            src = "s%d" % k
        elif kind == "g":
            params.append("const %s *__restrict__ x%d" % (ct, k))
            src = "x%d[0]" % k
        else:
            params.append("const %s *__restrict__ x%d" % (ct, k))
            src = "x%d[o%d]" % (k, k) if ndim else "x%d[i]" % k
        reads.append("((%s) (%s))" % (_ct(cdt), src) if cdt != dt else "(%s)" % src)
    body = "z[%s] = (%s) (%s);" % ("oz" if ndim else "i", _ct(out_dtype), expr.format(*reads))
    index = ""
    if ndim:
        arrays = [k for k, kind in enumerate(kinds) if kind == "a"]
        params += ["long long d%d" % d for d in range(ndim)]
        params += ["long long sz%d" % d for d in range(ndim)]
        for k in arrays:
            params += ["long long s%d_%d" % (k, d) for d in range(ndim)]
        names = ["z"] + ["%d" % k for k in arrays]
        index = "    long long r = (long long)i, q;\n"
        index += "".join("    long long o%s = 0;\n" % nm for nm in names)
        for d in reversed(range(ndim)):
            if d:
                index += "    q = r %% d%d; r /= d%d;\n" % (d, d)
            else:
                index += "    q = r;\n"
            index += "    oz += q * sz%d;\n" % d
            index += "".join("    o%d += q * s%d_%d;\n" % (k, k, d) for k in arrays)
    if ndim:
        loop = (
            "  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;\n"
            "       i += (size_t)gridDim.x * blockDim.x) {\n%s    %s\n  }\n" % (index, body)
        )
    else:
        # contiguous: four elements a thread per round, their loads issued
        # together (the pointers are __restrict__: each element is read and
        # written at its own index only), then the rest one at a time
        loop = (
            "  const size_t stride = (size_t)gridDim.x * blockDim.x;\n"
            "  size_t base = (size_t)blockIdx.x * blockDim.x + threadIdx.x;\n"
            "  for (; base + 3 * stride < n; base += 4 * stride) {\n"
            "#pragma unroll\n"
            "    for (int u = 0; u < 4; ++u) {\n"
            "      const size_t i = base + u * stride;\n      %s\n    }\n  }\n"
            "  for (size_t i = base; i < n; i += stride) {\n    %s\n  }\n" % (body, body)
        )
    return "%s\nextern \"C\" __global__ void %s(%s, unsigned long long n)\n{\n%s}\n" % (
        prelude(),
        name,
        ", ".join(params),
        loop,
    )


_map_cache: dict[Any, Any] = {}


def get_map_kernel(
    name: str,
    expr: str,
    kinds: Any,
    dtypes: Any,
    cdtypes: Any,
    out_dtype: "np.typing.DTypeLike | None",
    ndim: int = 0,
) -> Any:
    """A prepared Function computing z = expr(inputs) element by element:
    arguments (z, inputs..., [d_0.., z strides.., each array input's
    strides..,] n); strides in elements.  ndim=0: all arrays contiguous
    and read at i.  Remembered per context."""
    key = (tools._current_context(), name, expr, kinds, dtypes, cdtypes, out_dtype, ndim)
    f = _map_cache.get(key)
    if f is None:
        src = _map_source("pygpu_" + name, expr, kinds, dtypes, cdtypes, out_dtype, ndim)
        mod = _module(src, None, False)
        f = mod.get_function("pygpu_" + name)
        chars = "P"
        for kind, dt in zip(kinds, dtypes):
            chars += ScalarArg(dt, "_").struct_char if kind == "s" else "P"
        chars += "q" * (ndim * (2 + kinds.count("a"))) + "Q"
        f.prepare(chars)
        with _lock:
            _map_cache[key] = f
    return f


def map_source(name, expr, kinds, dtypes, cdtypes, out_dtype, ndim=0):
    """The CUDA source get_map_kernel compiles (for tests and the curious)."""
    return _map_source("pygpu_" + name, expr, kinds, dtypes, cdtypes, out_dtype, ndim)


def clear_caches() -> None:
    _map_cache.clear()


# ---- PyCUDA's kernel builders (names and argument orders as there) ----


def _real_dtype(dtype):
    return np.empty(0, dtype).real.dtype


def _cast_type(dtype_in, dtype_z):
    """The C type an operand is cast to in a complex result's arithmetic."""
    if dtype_z.kind == "c" and dtype_in.kind != "c":
        return _ct(_real_dtype(dtype_z))
    return _ct(dtype_z)


@context_dependent_memoize
def get_copy_kernel(
    dtype_dest: "np.typing.DTypeLike", dtype_src: "np.typing.DTypeLike"
) -> "Function":
    return get_elwise_kernel(
        "%s *dest, %s *src" % (_ct(dtype_dest), _ct(dtype_src)),
        "dest[i] = (%s) src[i]" % _ct(dtype_dest),
        "copy",
    )


@context_dependent_memoize
def get_axpbyz_kernel(
    dtype_x: "np.typing.DTypeLike",
    dtype_y: "np.typing.DTypeLike",
    dtype_z: "np.typing.DTypeLike",
    x_is_scalar: bool = False,
    y_is_scalar: bool = False,
) -> "Function":
    """z = a*x + b*y; arguments (a, x, b, y, z, n)."""
    dtype_x, dtype_y, dtype_z = np.dtype(dtype_x), np.dtype(dtype_y), np.dtype(dtype_z)
    xt, yt = _cast_type(dtype_x, dtype_z), _cast_type(dtype_y, dtype_z)
    x = "x[0]" if x_is_scalar else "x[i]"
    y = "y[0]" if y_is_scalar else "y[i]"
    return get_elwise_kernel(
        "%s a, %s *x, %s b, %s *y, %s *z"
        % (_ct(dtype_x), _ct(dtype_x), _ct(dtype_y), _ct(dtype_y), _ct(dtype_z)),
        "z[i] = (%s) (((%s) a) * ((%s) %s) + ((%s) b) * ((%s) %s))"
        % (_ct(dtype_z), xt, xt, x, yt, yt, y),
        "axpbyz",
    )


@context_dependent_memoize
def get_axpbz_kernel(dtype_x: "np.typing.DTypeLike", dtype_z: "np.typing.DTypeLike") -> "Function":
    """z = a*x + b; arguments (a, x, b, z, n)."""
    dtype_x, dtype_z = np.dtype(dtype_x), np.dtype(dtype_z)
    return get_elwise_kernel(
        "%s a, %s *x, %s b, %s *z" % (_ct(dtype_z), _ct(dtype_x), _ct(dtype_z), _ct(dtype_z)),
        "z[i] = a * ((%s) x[i]) + b" % _ct(dtype_z),
        "axpb",
    )


@context_dependent_memoize
def get_binary_op_kernel(
    dtype_x: "np.typing.DTypeLike",
    dtype_y: "np.typing.DTypeLike",
    dtype_z: "np.typing.DTypeLike",
    operator: str,
    x_is_scalar: bool = False,
    y_is_scalar: bool = False,
) -> "Function":
    """z = x <operator> y; arguments (x, y, z, n)."""
    dtype_x, dtype_y, dtype_z = np.dtype(dtype_x), np.dtype(dtype_y), np.dtype(dtype_z)
    if dtype_z.kind == "b" and dtype_x.kind == dtype_y.kind == "c":
        ct = _ct(np.result_type(dtype_x, dtype_y))
        xt = yt = ct
    elif dtype_z.kind == "b":
        ct = _ct(np.result_type(dtype_x, dtype_y))
        xt = yt = ct
    else:
        xt, yt = _cast_type(dtype_x, dtype_z), _cast_type(dtype_y, dtype_z)
    x = "x[0]" if x_is_scalar else "x[i]"
    y = "y[0]" if y_is_scalar else "y[i]"
    return get_elwise_kernel(
        "%s *x, %s *y, %s *z" % (_ct(dtype_x), _ct(dtype_y), _ct(dtype_z)),
        "z[i] = (%s) (((%s) %s) %s ((%s) %s))" % (_ct(dtype_z), xt, x, operator, yt, y),
        "multiply",
    )


@context_dependent_memoize
def get_rdivide_elwise_kernel(
    dtype_x: "np.typing.DTypeLike", dtype_z: "np.typing.DTypeLike"
) -> "Function":
    """z = y / x with y a scalar; arguments (x, y, z, n)."""
    dtype_x, dtype_z = np.dtype(dtype_x), np.dtype(dtype_z)
    return get_elwise_kernel(
        "%s *x, %s y, %s *z" % (_ct(dtype_x), _ct(dtype_z), _ct(dtype_z)),
        "z[i] = y / ((%s) x[i])" % _ct(dtype_z),
        "divide_r",
    )


@context_dependent_memoize
def get_binary_func_kernel(
    func: str,
    dtype_x: "np.typing.DTypeLike",
    dtype_y: "np.typing.DTypeLike",
    dtype_z: "np.typing.DTypeLike",
) -> "Function":
    """z = func(x, y); arguments (x, y, z, n)."""
    return get_elwise_kernel(
        "%s *x, %s *y, %s *z" % (_ct(dtype_x), _ct(dtype_y), _ct(dtype_z)),
        "z[i] = %s(x[i], y[i])" % func,
        _kname(func),
    )


@context_dependent_memoize
def get_binary_func_scalar_kernel(
    func: str,
    dtype_x: "np.typing.DTypeLike",
    dtype_y: "np.typing.DTypeLike",
    dtype_z: "np.typing.DTypeLike",
) -> "Function":
    """z = func(x, y) with y a scalar; arguments (x, y, z, n)."""
    return get_elwise_kernel(
        "%s *x, %s y, %s *z" % (_ct(dtype_x), _ct(dtype_y), _ct(dtype_z)),
        "z[i] = %s(x[i], y)" % func,
        _kname(func),
    )


def _kname(func):
    return "".join(c if c.isalnum() else "_" for c in func) + "_kernel"


def get_binary_minmax_kernel(
    func: str,
    dtype_x: "np.typing.DTypeLike",
    dtype_y: "np.typing.DTypeLike",
    dtype_z: "np.typing.DTypeLike",
    use_scalar: bool,
) -> "Function":
    """z = max/min(x, y) (NaN-propagating, as numpy.maximum); func is
    'max' or 'min'."""
    if func not in ("max", "min"):
        raise ValueError("func must be 'max' or 'min', not %r" % (func,))
    dtype_z = np.dtype(dtype_z)
    fn = "pygpu::%s<%s>" % ("maximum" if func == "max" else "minimum", _ct(dtype_z))
    if use_scalar:
        return get_binary_func_scalar_kernel(fn, dtype_x, dtype_y, dtype_z)
    return get_binary_func_kernel(fn, dtype_x, dtype_y, dtype_z)


@context_dependent_memoize
def get_fill_kernel(dtype: "np.typing.DTypeLike") -> "Function":
    """z = a; arguments (a, z, n)."""
    return get_elwise_kernel("%s a, %s *z" % (_ct(dtype), _ct(dtype)), "z[i] = a", "fill")


@context_dependent_memoize
def get_reverse_kernel(dtype: "np.typing.DTypeLike") -> "Function":
    """z[i] = y[n-1-i]; arguments (y, z, n)."""
    return get_elwise_kernel(
        "%s *y, %s *z" % (_ct(dtype), _ct(dtype)), "z[i] = y[n-1-i]", "reverse"
    )


@context_dependent_memoize
def get_real_kernel(dtype: "np.typing.DTypeLike", real_dtype: "np.typing.DTypeLike") -> "Function":
    return get_elwise_kernel(
        "%s *y, %s *z" % (_ct(dtype), _ct(real_dtype)), "z[i] = pygpu::real(y[i])", "real"
    )


@context_dependent_memoize
def get_imag_kernel(dtype: "np.typing.DTypeLike", real_dtype: "np.typing.DTypeLike") -> "Function":
    return get_elwise_kernel(
        "%s *y, %s *z" % (_ct(dtype), _ct(real_dtype)), "z[i] = pygpu::imag(y[i])", "imag"
    )


@context_dependent_memoize
def get_conj_kernel(dtype: "np.typing.DTypeLike", conj_dtype: "np.typing.DTypeLike") -> "Function":
    return get_elwise_kernel(
        "%s *y, %s *z" % (_ct(dtype), _ct(conj_dtype)),
        "z[i] = (%s) pygpu::conj(y[i])" % _ct(conj_dtype),
        "conj",
    )


@context_dependent_memoize
def get_arange_kernel(dtype: "np.typing.DTypeLike") -> "Function":
    """z[i] = start + i*step; arguments (z, start, step, n)."""
    return get_elwise_kernel(
        "%s *z, %s start, %s step" % (_ct(dtype), _ct(dtype), _ct(dtype)),
        "z[i] = (%s) (start + (%s) i * step)" % (_ct(dtype), _ct(dtype)),
        "arange",
    )


def _pow_expr(dtype_z, x, y):
    dtype_z = np.dtype(dtype_z)
    ct = _ct(dtype_z)
    if dtype_z.kind in "iub":
        return "pygpu::ipow<%s>((%s) %s, (%s) %s)" % (ct, ct, x, ct, y)
    return "pow((%s) %s, (%s) %s)" % (ct, x, ct, y)


@context_dependent_memoize
def get_pow_array_kernel(
    dtype_x: "np.typing.DTypeLike",
    dtype_y: "np.typing.DTypeLike",
    dtype_z: "np.typing.DTypeLike",
    is_base_array: bool,
    is_exp_array: bool,
) -> "Function":
    """z = x ** y; arguments (x, y, z, n), x or y a scalar where not an array."""
    if not (is_base_array or is_exp_array):
        raise ValueError("get_pow_array_kernel: the base or the exponent must be an array")
    x = "x[i]" if is_base_array else "x"
    y = "y[i]" if is_exp_array else "y"
    return get_elwise_kernel(
        "%s %sx, %s %sy, %s *z"
        % (
            _ct(dtype_x),
            "*" if is_base_array else "",
            _ct(dtype_y),
            "*" if is_exp_array else "",
            _ct(dtype_z),
        ),
        "z[i] = %s" % _pow_expr(dtype_z, x, y),
        "pow_method",
    )


@context_dependent_memoize
def get_fmod_kernel() -> "Function":
    return get_elwise_kernel(
        "float *arg, float *mod, float *z", "z[i] = fmod(arg[i], mod[i])", "fmod_kernel"
    )


@context_dependent_memoize
def get_modf_kernel() -> "Function":
    return get_elwise_kernel(
        "float *x, float *intpart, float *fracpart",
        "fracpart[i] = modf(x[i], &intpart[i])",
        "modf_kernel",
    )


@context_dependent_memoize
def get_frexp_kernel() -> "Function":
    return get_elwise_kernel(
        "float *x, float *significand, float *exponent",
        "int expt = 0; significand[i] = frexp(x[i], &expt); exponent[i] = expt",
        "frexp_kernel",
    )


@context_dependent_memoize
def get_ldexp_kernel() -> "Function":
    return get_elwise_kernel(
        "float *sig, float *expt, float *z", "z[i] = ldexp(sig[i], int(expt[i]))", "ldexp_kernel"
    )


@context_dependent_memoize
def get_unary_func_kernel(
    func_name: str, in_dtype: "np.typing.DTypeLike", out_dtype: "np.typing.DTypeLike | None" = None
) -> "Function":
    """z = func_name(y); arguments (y, z, n)."""
    if out_dtype is None:
        out_dtype = in_dtype
    return get_elwise_kernel(
        "%s *y, %s *z" % (_ct(in_dtype), _ct(out_dtype)),
        "z[i] = %s(y[i])" % func_name,
        _kname(func_name),
    )


@context_dependent_memoize
def get_if_positive_kernel(
    crit_dtype: "np.typing.DTypeLike", dtype: "np.typing.DTypeLike"
) -> "Function":
    return get_elwise_kernel(
        [
            VectorArg(crit_dtype, "crit"),
            VectorArg(dtype, "then_"),
            VectorArg(dtype, "else_"),
            VectorArg(dtype, "result"),
        ],
        "result[i] = crit[i] > 0 ? then_[i] : else_[i]",
        "if_positive",
    )


@context_dependent_memoize
def get_where_kernel(crit_dtype: "np.typing.DTypeLike", dtype: "np.typing.DTypeLike") -> "Function":
    return get_elwise_kernel(
        [
            VectorArg(crit_dtype, "crit"),
            VectorArg(dtype, "then_"),
            VectorArg(dtype, "else_"),
            VectorArg(dtype, "result"),
        ],
        "result[i] = crit[i] != 0 ? then_[i] : else_[i]",
        "where",
    )


@context_dependent_memoize
def get_scalar_op_kernel(
    dtype_x: "np.typing.DTypeLike",
    dtype_a: "np.typing.DTypeLike | None",
    dtype_y: "np.typing.DTypeLike",
    operator: str,
) -> "Function":
    """y = x <operator> a with a a scalar; arguments (x, a, y, n)."""
    return get_elwise_kernel(
        "%s *x, %s a, %s *y" % (_ct(dtype_x), _ct(dtype_a), _ct(dtype_y)),
        "y[i] = x[i] %s a" % operator,
        "scalarop_kernel",
    )


@context_dependent_memoize
def get_logical_not_kernel(
    dtype_x: "np.typing.DTypeLike", dtype_out: "np.typing.DTypeLike"
) -> "Function":
    return get_elwise_kernel(
        [VectorArg(dtype_x, "x"), VectorArg(dtype_out, "out")],
        "out[i] = (x[i] == 0)",
        "logical_not",
    )


@context_dependent_memoize
def get_take_kernel(
    dtype: "np.typing.DTypeLike", idx_dtype: "np.typing.DTypeLike", vec_count: int = 1
) -> "Function":
    """dest_k[i] = src_k[idx[i]]; arguments (idx, src_0.., dest_0.., n).
    (PyCUDA read the sources through texture references, which CUDA 12
    removed; here they are plain pointers.)"""
    args = (
        [VectorArg(idx_dtype, "idx")]
        + [VectorArg(dtype, "src%d" % k) for k in range(vec_count)]
        + [VectorArg(dtype, "dest%d" % k) for k in range(vec_count)]
    )
    body = "%s j = idx[i]; " % _ct(idx_dtype) + " ".join(
        "dest%d[i] = src%d[j];" % (k, k) for k in range(vec_count)
    )
    return get_elwise_kernel(args, body, "take")


@context_dependent_memoize
def get_linear_combination_kernel(
    summand_descriptors: Any, dtype_z: "np.typing.DTypeLike"
) -> "tuple[Function, list[Any]]":
    """z = sum_k a_k * x_k; summand_descriptors: ((is_gpu_scalar,
    scalar_dtype, vector_dtype), ...); arguments per summand (a_k or a
    device pointer to it, x_k), then z, n.  Returns (func, [])."""
    args: "list[Any]" = []
    summands: "list[str]" = []
    for k, (is_gpu_scalar, scalar_dtype, vector_dtype) in enumerate(summand_descriptors):
        if is_gpu_scalar:
            args.append(VectorArg(scalar_dtype, "a%d" % k))
            summands.append("a%d[0]*x%d[i]" % (k, k))
        else:
            args.append(ScalarArg(scalar_dtype, "a%d" % k))
            summands.append("a%d*x%d[i]" % (k, k))
        args.append(VectorArg(vector_dtype, "x%d" % k))
    args.append(VectorArg(dtype_z, "z"))
    func = get_elwise_kernel(args, "z[i] = " + " + ".join(summands), "linear_combination")
    return func, []


@context_dependent_memoize
def get_put_kernel(
    dtype: "np.typing.DTypeLike", idx_dtype: "np.typing.DTypeLike", vec_count: int = 1
) -> "Function":
    """PyCUDA's put kernel: for i < n, dest_k[gmem_dest_idx[i]] = src_k[i]
    for each of vec_count (dest_k, src_k) pairs.  A prepared Function of
    (gmem_dest_idx, dest0.., src0.., n)."""
    vec_count = int(vec_count)
    if vec_count < 1:
        raise ValueError("get_put_kernel(): vec_count must be >= 1, got %d" % vec_count)
    idx_tp = tools.dtype_to_ctype(idx_dtype)
    args = (
        [VectorArg(np.dtype(idx_dtype), "gmem_dest_idx")]
        + [VectorArg(np.dtype(dtype), "dest%d" % k) for k in range(vec_count)]
        + [VectorArg(np.dtype(dtype), "src%d" % k) for k in range(vec_count)]
        + [ScalarArg(np.dtype(np.uintp), "n")]
    )
    body = "%s dest_idx = gmem_dest_idx[i];\n" % idx_tp + "\n".join(
        "dest%d[dest_idx] = src%d[i];" % (k, k) for k in range(vec_count)
    )
    func = get_elwise_module(args, body, "put").get_function("put")
    func.prepare("P" + 2 * vec_count * "P" + np.dtype(np.uintp).char)
    return func
