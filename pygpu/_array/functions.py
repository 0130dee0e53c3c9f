"""The module functions: creation, indexing, shape manipulation, conditionals,
logical functions and reductions.

Part of pygpu.gpuarray, which re-exports every name defined here."""

from typing import TYPE_CHECKING, Any, Callable, Sequence

import numpy as np

from pygpu import driver as drv
from pygpu import elementwise
from pygpu.tools import dtype_to_ctype

from pygpu import gpuarray as _ga
from pygpu._array.layout import _builtin_any, _builtin_max, _check_dtype, _compact_strides, splay
from pygpu._array.gate import _check_operands, _in_order_of, _same_order
from pygpu._array.copies import _copy_d2d
from pygpu._array.operators import _binary, _map, _operand_key, _sample, _unary

if TYPE_CHECKING:
    from pygpu.gpuarray import GPUArray


# ---- creation ----


def to_gpu(ary: "object", allocator: "Callable[[int], Any] | None" = None) -> "GPUArray":
    """A GPUArray with a copy of a NumPy array (its layout kept where dense)."""
    ary = _host_array(ary)
    result = _ga.GPUArray(
        ary.shape,
        ary.dtype,
        allocator,
        strides=_compact_strides(ary.shape, ary.strides, ary.itemsize),
    )
    result.set(ary)
    return result


def to_gpu_async(
    ary: object, allocator: "Callable[[int], Any] | None" = None, stream: "drv.Stream | None" = None
) -> "GPUArray":
    """to_gpu() with the copy enqueued on stream (page-locked ary for overlap)."""
    ary = _host_array(ary)
    result = _ga.GPUArray(
        ary.shape,
        ary.dtype,
        allocator,
        strides=_compact_strides(ary.shape, ary.strides, ary.itemsize),
    )
    result.set_async(ary, stream)
    return result


def _host_array(ary: object) -> "np.ndarray[Any, Any]":
    if isinstance(ary, _ga.GPUArray):
        raise TypeError("to_gpu() takes a host (NumPy) array, not a GPUArray; use .copy()")
    if not isinstance(ary, np.ndarray):
        ary = np.asarray(ary)
    if not ary.dtype.isnative:  # (big-endian data, from FITS files, ...): the same values
        ary = ary.astype(ary.dtype.newbyteorder("="))
    _check_dtype(ary.dtype)
    if _builtin_any(s < 0 for s in ary.strides):
        ary = np.ascontiguousarray(ary)
    return ary


def zeros(
    shape: "int | tuple[int, ...]",
    dtype: "np.typing.DTypeLike" = np.float64,
    allocator: "Callable[[int], Any] | None" = None,
    order: str = "C",
) -> "GPUArray":
    result = _ga.GPUArray(shape, dtype, allocator, order=order)
    if result.nbytes:
        drv.memset_d8(result.ptr, 0, result.nbytes)
    return result


def ones(
    shape: "int | tuple[int, ...]",
    dtype: "np.typing.DTypeLike" = np.float64,
    allocator: "Callable[[int], Any] | None" = None,
    order: str = "C",
) -> "GPUArray":
    result = _ga.GPUArray(shape, dtype, allocator, order=order)
    return result.fill(np.ones((), result.dtype)[()])


def _like(other, dtype, order):
    strides = None
    if order == "A":
        order = "F" if other._f and not other._c else "C"
    elif order == "K":
        if other._c or other.ndim <= 1:
            order = "C"
        elif other._f:
            order = "F"
        else:
            dt = np.dtype(dtype) if dtype is not None else other.dtype
            strides = _compact_strides(other.shape, other.strides, dt.itemsize)
            order = "C"
    elif order not in ("C", "F"):
        raise ValueError("order must be 'C', 'F', 'A' or 'K', not %r" % (order,))
    return _ga.GPUArray(
        other.shape,
        other.dtype if dtype is None else dtype,
        other.allocator,
        order=order,
        strides=strides,
    )


def empty_like(
    other_ary: "GPUArray", dtype: "np.typing.DTypeLike | None" = None, order: str = "K"
) -> "GPUArray":
    if dtype is None and order == "K" and (other_ary._c or other_ary._f):
        # the common call: a dense array's shape, dtype, order (C where it is
        # C-contiguous, as NumPy's) and allocator, the layout remembered
        return _ga.GPUArray(
            other_ary.shape,
            other_ary.dtype,
            other_ary.allocator,
            order="C" if other_ary._c or len(other_ary.shape) <= 1 else "F",
        )
    return _like(other_ary, dtype, order)


def zeros_like(
    other_ary: "GPUArray", dtype: "np.typing.DTypeLike | None" = None, order: str = "K"
) -> "GPUArray":
    result = _like(other_ary, dtype, order)
    if result.nbytes:
        drv.memset_d8(result.ptr, 0, result.nbytes)
    return result


def ones_like(
    other_ary: "GPUArray", dtype: "np.typing.DTypeLike | None" = None, order: str = "K"
) -> "GPUArray":
    result = _like(other_ary, dtype, order)
    return result.fill(np.ones((), result.dtype)[()])


def arange(*args: Any, **kwargs: Any) -> "GPUArray":
    """Evenly spaced values in [start, stop) (numpy.arange's arguments)."""
    dtype = kwargs.pop("dtype", None)
    stream = kwargs.pop("stream", None)
    allocator = kwargs.pop("allocator", None)
    if args and isinstance(args[-1], np.dtype) and dtype is None:
        dtype, args = args[-1], args[:-1]
    start = kwargs.pop("start", None)
    stop = kwargs.pop("stop", None)
    step = kwargs.pop("step", None)
    if kwargs:
        raise TypeError("unexpected keyword argument(s): %s" % ", ".join(kwargs))
    if len(args) > 3:
        raise ValueError("too many arguments")
    pos = list(args)
    if len(pos) == 1:
        if stop is not None:
            start = pos[0]
        else:
            stop = pos[0]
    elif len(pos) >= 2:
        start, stop = pos[0], pos[1]
        if len(pos) == 3:
            step = pos[2]
    if stop is None:
        raise ValueError("stop argument required")
    start = 0 if start is None else start
    step = 1 if step is None else step
    if step == 0:
        raise ValueError("arange: step may not be 0")
    if dtype is None:  # NumPy's, from an empty range of the same argument types
        dtype = np.arange(start, start + 0 * stop, step).dtype
    dtype = _check_dtype(dtype)
    import math

    size = _builtin_max(0, int(math.ceil((stop - start) / step)))
    result = _ga.GPUArray((size,), dtype, allocator)
    if size:
        func = elementwise.get_arange_kernel(dtype)
        grid, block = splay(size)
        func.prepared_async_call(
            grid,
            block,
            stream,
            result.gpudata,
            elementwise._scalar_value(start, dtype, "arange start"),
            elementwise._scalar_value(step, dtype, "arange step"),
            size,
        )
    return result


# ---- indexing helpers ----


def take(
    a: "GPUArray",
    indices: "GPUArray",
    out: "GPUArray | None" = None,
    stream: "drv.Stream | None" = None,
) -> "GPUArray":
    """a[indices] for a 1-D index array (indices are not bounds-checked)."""
    if not isinstance(a, _ga.GPUArray) or not isinstance(indices, _ga.GPUArray):
        raise TypeError("take() takes GPUArrays")
    if indices.dtype.kind not in "iu":
        raise TypeError("take(): indices must be integers, not %s" % indices.dtype)
    if not (a.flags.forc and indices.flags.forc):
        raise RuntimeError("take(): only contiguous arrays may be used")
    if out is not None and not isinstance(out, _ga.GPUArray):
        raise TypeError("take(): out must be a GPUArray, not %s" % type(out).__name__)
    _check_operands("take()", (a, indices, out), contiguous=True)
    if out is None:
        out = _ga.GPUArray(indices.shape, a.dtype, a.allocator)
    elif out.shape != indices.shape or out.dtype != a.dtype:
        raise ValueError("take(): out must have the indices' shape and a's dtype")
    elif indices.ndim > 1 and not _same_order(indices, out):
        raise ValueError(
            "take(): out (strides %r) must have the indices' memory order "
            "(strides %r)" % (out.strides, indices.strides)
        )
    if indices.size:
        func = elementwise.get_take_kernel(a.dtype, indices.dtype)
        func.prepared_async_call(
            out._grid, out._block, stream, indices.gpudata, a.gpudata, out.gpudata, indices.size
        )
    return out


def multi_take(
    arrays: "Sequence[GPUArray]",
    indices: "GPUArray",
    out: "Sequence[GPUArray | None] | None" = None,
    stream: "drv.Stream | None" = None,
) -> "list[GPUArray]":
    """[take(a, indices) for a in arrays]."""
    if out is None:
        out = [None] * len(arrays)
    elif len(out) != len(arrays):
        raise ValueError("out and arrays must have the same length")
    return [take(a, indices, o, stream) for a, o in zip(arrays, out)]


def multi_put(
    arrays: "Sequence[GPUArray]",
    dest_indices: "GPUArray",
    dest_shape: Any = None,
    out: "Sequence[GPUArray] | None" = None,
    stream: "drv.Stream | None" = None,
) -> "Sequence[GPUArray]":
    """out[k][dest_indices] = arrays[k]."""
    if not arrays:
        return []
    dtype = arrays[0].dtype
    if _builtin_any(a.dtype != dtype for a in arrays):
        raise TypeError("arrays must all have the same dtype")
    if out is None:
        out = [_ga.GPUArray(dest_shape, dtype, arrays[0].allocator) for _ in arrays]
    elif len(out) != len(arrays):
        raise ValueError("out and arrays must have the same length")
    k = elementwise.ElementwiseKernel(
        "%s *idx, %s *src, %s *dst"
        % (dtype_to_ctype(dest_indices.dtype), dtype_to_ctype(dtype), dtype_to_ctype(dtype)),
        "dst[idx[i]] = src[i]",
        "put",
    )
    for a, o in zip(arrays, out):
        if o.dtype != dtype:
            raise TypeError("arrays and out must have the same dtype")
        k(dest_indices, a, o, stream=stream)
    return out


def multi_take_put(
    arrays: "Sequence[GPUArray]",
    dest_indices: "GPUArray",
    src_indices: "GPUArray",
    dest_shape: Any = None,
    out: "Sequence[GPUArray] | None" = None,
    stream: "drv.Stream | None" = None,
    src_offsets: Any = None,
) -> "Sequence[GPUArray]":
    """out[k][dest_indices] = arrays[k][src_indices + src_offsets[k]]."""
    if not arrays:
        return []
    dtype = arrays[0].dtype
    if _builtin_any(a.dtype != dtype for a in arrays):
        raise TypeError("arrays must all have the same dtype")
    if src_indices.dtype != dest_indices.dtype:
        raise TypeError("src_indices and dest_indices must have the same dtype")
    if src_indices.ndim != 1:
        raise ValueError("src_indices must be 1D")
    if src_indices.shape != dest_indices.shape:
        raise ValueError("src_indices and dest_indices must have the same shape")
    if src_offsets is not None and len(src_offsets) != len(arrays):
        raise ValueError("src_indices and src_offsets must have the same length")
    if out is None:
        out = [_ga.GPUArray(dest_shape, dtype, arrays[0].allocator) for _ in arrays]
    elif len(out) != len(arrays):
        raise ValueError("out and arrays must have the same length")
    it = dtype_to_ctype(src_indices.dtype)
    k = elementwise.ElementwiseKernel(
        "%s *didx, %s *sidx, %s *src, %s *dst, long offset"
        % (it, it, dtype_to_ctype(dtype), dtype_to_ctype(dtype)),
        "dst[didx[i]] = src[sidx[i] + offset]",
        "take_put",
    )
    for j, (a, o) in enumerate(zip(arrays, out)):
        k(
            dest_indices,
            src_indices,
            a,
            o,
            0 if src_offsets is None else src_offsets[j],
            stream=stream,
        )
    return out


# ---- shape manipulation ----


def concatenate(
    arrays: "Sequence[GPUArray]", axis: int = 0, allocator: "Callable[[int], Any] | None" = None
) -> "GPUArray":
    """Join arrays along an existing axis."""
    arrays = list(arrays)
    if not arrays:
        raise ValueError("need at least one array to concatenate")
    nd = arrays[0].ndim
    if nd == 0:
        raise ValueError("zero-dimensional arrays cannot be concatenated")
    ax = axis + nd if axis < 0 else axis
    if not 0 <= ax < nd:
        raise ValueError("axis %d is out of bounds for arrays of dimension %d" % (axis, nd))
    shape = list(arrays[0].shape)
    for i, a in enumerate(arrays[1:], 1):
        if a.ndim != nd:
            raise ValueError(
                "%d'th array has different number of axes (should have %d, "
                "has %d)" % (i, nd, a.ndim)
            )
        if a.shape[:ax] + a.shape[ax + 1 :] != arrays[0].shape[:ax] + arrays[0].shape[ax + 1 :]:
            raise ValueError("%d'th array has residual not matching other arrays" % i)
        shape[ax] += a.shape[ax]
    dtype = np.result_type(*(a.dtype for a in arrays))
    result = _ga.empty(tuple(shape), dtype, allocator=allocator or arrays[0].allocator)
    base = 0
    full = (slice(None),) * nd
    for a in arrays:
        m = a.shape[ax]
        result[full[:ax] + (slice(base, base + m),) + full[ax + 1 :]] = a
        base += m
    return result


def stack(
    arrays: "Sequence[GPUArray]", axis: int = 0, allocator: "Callable[[int], Any] | None" = None
) -> "GPUArray":
    """Join arrays along a new axis."""
    arrays = list(arrays)
    if not arrays:
        raise ValueError("need at least one array to stack")
    shape0 = arrays[0].shape
    if _builtin_any(a.shape != shape0 for a in arrays[1:]):
        raise ValueError("all input arrays must have the same shape")
    nd = len(shape0)
    ax = axis + nd + 1 if axis < 0 else axis
    if not 0 <= ax <= nd:
        raise ValueError("axis %d is out of bounds for array of dimension %d" % (axis, nd + 1))
    shape = shape0[:ax] + (len(arrays),) + shape0[ax:]
    result = _ga.empty(
        shape,
        np.result_type(*(a.dtype for a in arrays)),
        allocator=allocator or arrays[0].allocator,
    )
    for i, a in enumerate(arrays):
        result[(slice(None),) * ax + (i,)] = a
    return result


def transpose(a: "GPUArray", axes: Any = None) -> "GPUArray":
    return a.transpose(axes)


def reshape(a: "GPUArray", *shape: Any, **kwargs: Any) -> "GPUArray":
    return a.reshape(*shape, **kwargs)


# ---- conditionals and binary functions ----


def if_positive(
    criterion: "GPUArray",
    then_: Any,
    else_: Any,
    out: "GPUArray | None" = None,
    stream: "drv.Stream | None" = None,
) -> "GPUArray":
    """then_ where criterion > 0, else else_."""
    return _select(">", criterion, then_, else_, out, stream, "if_positive")


def where(
    criterion: "GPUArray",
    then_: Any,
    else_: Any,
    out: "GPUArray | None" = None,
    stream: "drv.Stream | None" = None,
) -> "GPUArray":
    """then_ where criterion != 0, else else_ (numpy.where with three
    arguments; scalars and broadcasting allowed)."""
    return _select("!=", criterion, then_, else_, out, stream, "where")


def _select(cmp, crit, then_, else_, out, stream, name):
    if not isinstance(crit, _ga.GPUArray):
        raise TypeError("%s: the criterion must be a GPUArray" % name)
    if name == "if_positive":
        for v in (then_, else_):
            if isinstance(v, _ga.GPUArray) and v.shape != crit.shape:
                raise ValueError("shapes do not match")
    kt, ke = _operand_key(then_), _operand_key(else_)
    if kt is None or ke is None:
        raise TypeError("%s: then_ and else_ must be GPUArrays or scalars" % name)
    if (
        name == "if_positive"
        and isinstance(then_, _ga.GPUArray)
        and isinstance(else_, _ga.GPUArray)
        and then_.dtype != else_.dtype
    ):
        raise ValueError("dtypes do not match")
    res = np.result_type(_sample(kt), _sample(ke))
    cdt = crit.dtype
    zero = "(%s) 0" % dtype_to_ctype(cdt)
    if cdt.kind == "c":
        test = "pygpu::real({0}) > 0" if cmp == ">" else "{0} != %s" % zero
    else:
        test = "{0} %s %s" % (cmp, zero)
    expr = "(%s) ? {1} : {2}" % test
    return _map(
        name,
        expr,
        [crit, then_, else_],
        out,
        stream,
        res,
        compute=res,
        scalar_dtypes=[res, res],
        crit_raw=True,
    )


def _make_minmax(which: str) -> "Callable[..., GPUArray]":
    def f(
        a: Any, b: Any, out: "GPUArray | None" = None, stream: "drv.Stream | None" = None
    ) -> "GPUArray":
        if not isinstance(a, _ga.GPUArray) and not isinstance(b, _ga.GPUArray):
            raise TypeError("%s needs at least one GPUArray" % which)
        return _function_result(which, _binary(which, a, b, out=out, stream=stream), a, b)

    f.__name__ = which
    f.__doc__ = "numpy.%s element-wise (NaN-propagating) of arrays and scalars." % which
    return f


maximum = _make_minmax("maximum")
minimum = _make_minmax("minimum")


def _logical(op, x1, x2, out, allocator):
    if np.isscalar(x1) and np.isscalar(x2):
        r = _ga.empty((), np.bool_, allocator=allocator) if out is None else out
        r.fill(getattr(np, op)(x1, x2))
        return r
    if not isinstance(x1, _ga.GPUArray) and not isinstance(x2, _ga.GPUArray):
        raise ValueError("%s can take either scalar or GPUArrays as inputs" % op)
    return _function_result(op, _binary(op, x1, x2, out=out), x1, x2)


def _function_result(op, result, a, b):
    """A module function's result: NotImplemented (an operand _binary does
    not take) becomes the TypeError an operator would raise."""
    if result is NotImplemented:
        raise TypeError(
            "%s takes GPUArrays and scalars, not %s and %s"
            % (op, type(a).__name__, type(b).__name__)
        )
    return result


def logical_and(
    x1: Any,
    x2: Any,
    /,
    out: "GPUArray | None" = None,
    *,
    allocator: "Callable[[int], Any] | None" = None,
) -> "GPUArray":
    return _logical("logical_and", x1, x2, out, allocator)


def logical_or(
    x1: Any,
    x2: Any,
    /,
    out: "GPUArray | None" = None,
    *,
    allocator: "Callable[[int], Any] | None" = None,
) -> "GPUArray":
    return _logical("logical_or", x1, x2, out, allocator)


def logical_not(
    x: Any, /, out: "GPUArray | None" = None, *, allocator: "Callable[[int], Any] | None" = None
) -> "GPUArray":
    if np.isscalar(x):
        r = _ga.empty((), np.bool_, allocator=allocator) if out is None else out
        r.fill(np.logical_not(np.asarray(x)))
        return r
    return _unary("logical_not", x, out=out)


# ---- reductions: pygpu.reduction (imported when first used) ----


def sum(
    a: "GPUArray",
    dtype: "np.typing.DTypeLike | None" = None,
    stream: "drv.Stream | None" = None,
    allocator: "Callable[[int], Any] | None" = None,
) -> "GPUArray":
    from pygpu.reduction import get_sum_kernel

    krnl = get_sum_kernel(dtype, a.dtype)
    return krnl(a, stream=stream, allocator=allocator)


def any(
    a: "GPUArray",
    stream: "drv.Stream | None" = None,
    allocator: "Callable[[int], Any] | None" = None,
) -> "GPUArray":
    from pygpu.reduction import get_any_kernel

    krnl = get_any_kernel(np.dtype(bool), a.dtype)
    return krnl(a, stream=stream, allocator=allocator)


def all(
    a: "GPUArray",
    stream: "drv.Stream | None" = None,
    allocator: "Callable[[int], Any] | None" = None,
) -> "GPUArray":
    from pygpu.reduction import get_all_kernel

    krnl = get_all_kernel(np.dtype(bool), a.dtype)
    return krnl(a, stream=stream, allocator=allocator)


def subset_sum(
    subset: "GPUArray",
    a: "GPUArray",
    dtype: "np.typing.DTypeLike | None" = None,
    stream: "drv.Stream | None" = None,
    allocator: "Callable[[int], Any] | None" = None,
) -> "GPUArray":
    from pygpu.reduction import get_subset_sum_kernel

    krnl = get_subset_sum_kernel(dtype, subset.dtype, a.dtype)
    return krnl(subset, a, stream=stream, allocator=allocator)


def _as_c(x, allocator):
    """x, or a C-ordered copy of it."""
    if x._c:
        return x
    out = _ga.GPUArray(x.shape, x.dtype, allocator or x.allocator)
    _copy_d2d(out, x, None)
    return out


def _dot_operands(what, a, b, allocator):
    """a and b for a dot product: gated, as many elements, b in a's memory
    order (elements paired by index, as NumPy pairs them; of two shapes,
    each one's elements in C order)."""
    for x in (a, b):
        if not isinstance(x, _ga.GPUArray):
            raise TypeError("%s takes GPUArrays, not %s" % (what, type(x).__name__))
    if a.size != b.size:
        raise ValueError(
            "%s: the arrays have %d and %d elements (shapes %r and %r); they "
            "must have as many" % (what, a.size, b.size, a.shape, b.shape)
        )
    # the rest of the gate: in the copy below if there is one, and in the
    # reduction's call
    if a.shape != b.shape:
        return _as_c(a, allocator), _as_c(b, allocator)
    return a, _in_order_of(b, a, allocator)


def dot(
    a: "GPUArray",
    b: "GPUArray",
    dtype: "np.typing.DTypeLike | None" = None,
    stream: "drv.Stream | None" = None,
    allocator: "Callable[[int], Any] | None" = None,
) -> "GPUArray":
    from pygpu.reduction import get_dot_kernel

    a, b = _dot_operands("dot()", a, b, allocator)
    if dtype is None:
        dtype = np.result_type(a.dtype, b.dtype)
    krnl = get_dot_kernel(dtype, a.dtype, b.dtype)
    return krnl(a, b, stream=stream, allocator=allocator)


def vdot(
    a: "GPUArray",
    b: "GPUArray",
    dtype: "np.typing.DTypeLike | None" = None,
    stream: "drv.Stream | None" = None,
    allocator: "Callable[[int], Any] | None" = None,
) -> "GPUArray":
    from pygpu.reduction import get_dot_kernel

    a, b = _dot_operands("vdot()", a, b, allocator)
    if dtype is None:
        dtype = np.result_type(a.dtype, b.dtype)
    krnl = get_dot_kernel(dtype, a.dtype, b.dtype, conjugate_first=True)
    return krnl(a, b, stream=stream, allocator=allocator)


def subset_dot(
    subset: "GPUArray",
    a: "GPUArray",
    b: "GPUArray",
    dtype: "np.typing.DTypeLike | None" = None,
    stream: "drv.Stream | None" = None,
    allocator: "Callable[[int], Any] | None" = None,
) -> "GPUArray":
    from pygpu.reduction import get_subset_dot_kernel

    krnl = get_subset_dot_kernel(dtype, subset.dtype, a.dtype, b.dtype)
    return krnl(subset, a, b, stream=stream, allocator=allocator)


def _make_minmax_reduction(what: str) -> "Callable[..., GPUArray]":
    def f(a: "GPUArray", stream: "drv.Stream | None" = None) -> "GPUArray":
        from pygpu.reduction import get_minmax_kernel

        if a.size == 0:  # NumPy's error (the kernel would give its neutral value)
            raise ValueError(
                "zero-size array to reduction operation %simum which has no identity" % what
            )
        krnl = get_minmax_kernel(what, a.dtype)
        return krnl(a, stream=stream)

    f.__name__ = what
    f.__doc__ = "The %simum of a's elements, as a 0-d GPUArray." % what
    return f


max = _make_minmax_reduction("max")
min = _make_minmax_reduction("min")


def _make_subset_minmax_reduction(what: str) -> "Callable[..., GPUArray]":
    def f(subset: "GPUArray", a: "GPUArray", stream: "drv.Stream | None" = None) -> "GPUArray":
        from pygpu.reduction import get_subset_minmax_kernel

        krnl = get_subset_minmax_kernel(what, a.dtype, subset.dtype)
        return krnl(subset, a, stream=stream)

    f.__name__ = "subset_" + what
    return f


subset_max = _make_subset_minmax_reduction("max")
subset_min = _make_subset_minmax_reduction("min")
