"""CUDA's vector types, the launch shape of element-wise kernels (splay), shapes
and strides, ArrayFlags.

Part of pygpu.gpuarray, which re-exports every name defined here."""

import builtins
import numbers
from typing import TYPE_CHECKING, Any

import numpy as np

from pygpu import driver as drv
from pygpu.tools import get_or_register_dtype


if TYPE_CHECKING:
    from pygpu.gpuarray import GPUArray

_builtin_min, _builtin_max, _builtin_sum = builtins.min, builtins.max, builtins.sum
_builtin_any, _builtin_all = builtins.any, builtins.all
# the current Context (or None), from this thread's remembered answer: no
# driver call per operation (docs/contexts.md, "The current context")
_get_current = drv._driver._current_context
_DA = drv.DeviceAllocation


# ---- CUDA vector types ----


class vec:  # noqa: N801  (PyCUDA's name)
    """The CUDA vector types as NumPy structured dtypes (vec.float3, ...)
    and their makers (vec.make_float3(x, y, z) -> a 0-d array)."""


def _make_maker(dtype, count):
    names = "xyzw"[:count]

    def make(*values):
        if len(values) != count:
            raise TypeError(
                "make_%s() takes %d values (%s), got %d"
                % (
                    dtype.name if hasattr(dtype, "name") else "vec",
                    count,
                    ", ".join(names),
                    len(values),
                )
            )
        return np.array(tuple(values), dtype=dtype)

    return make


def _create_vector_types():
    for base, tp, counts in [
        ("char", np.int8, (1, 2, 3, 4)),
        ("uchar", np.uint8, (1, 2, 3, 4)),
        ("short", np.int16, (1, 2, 3, 4)),
        ("ushort", np.uint16, (1, 2, 3, 4)),
        ("int", np.int32, (1, 2, 3, 4)),
        ("uint", np.uint32, (1, 2, 3, 4)),
        ("long", np.int64, (1, 2, 3, 4)),
        ("ulong", np.uint64, (1, 2, 3, 4)),
        ("longlong", np.int64, (1, 2)),
        ("ulonglong", np.uint64, (1, 2)),
        ("float", np.float32, (1, 2, 3, 4)),
        ("double", np.float64, (1, 2)),
    ]:
        for count in counts:
            name = "%s%d" % (base, count)
            dtype = np.dtype([(f, tp) for f in "xyzw"[:count]])
            get_or_register_dtype(name, dtype)
            setattr(vec, name, dtype)
            maker = _make_maker(dtype, count)
            maker.__name__ = "make_" + name
            maker.__doc__ = "A 0-d array of vec.%s from its %d fields." % (name, count)
            setattr(vec, "make_" + name, staticmethod(maker))


_create_vector_types()


# ---- launch configuration ----

_BLOCK = 256
_sm_count = None
_splay_cache: dict[Any, Any] = {}


def _sms():
    global _sm_count
    if _sm_count is None:
        try:
            _sm_count = drv.Context.get_device().get_attribute(
                drv.device_attribute.MULTIPROCESSOR_COUNT
            )
        except drv.Error:
            _sm_count = 128
    return _sm_count


def splay(n: int, dev: Any = None) -> "tuple[tuple[int, int], tuple[int, int, int]]":
    """(grid, block) for a grid-stride loop over n elements: 256 threads a
    block, at most 32 blocks per multiprocessor (the loop covers the rest).
    The multiprocessor count is read once per process: any grid is correct,
    only the speed depends on it."""
    n = int(n)
    found = _splay_cache.get(n)
    if found is None:
        blocks = _builtin_max(1, _builtin_min((n + _BLOCK - 1) // _BLOCK, 32 * _sms()))
        found = ((blocks, 1), (_BLOCK, 1, 1))
        if len(_splay_cache) > 4096:
            _splay_cache.clear()
        _splay_cache[n] = found
    return found


# ---- shapes and strides ----


def _c_strides(itemsize, shape):
    strides, s = [], itemsize
    for n in reversed(shape):
        strides.append(s)
        s *= _builtin_max(n, 1)
    return tuple(reversed(strides))


def _f_strides(itemsize, shape):
    strides, s = [], itemsize
    for n in shape:
        strides.append(s)
        s *= _builtin_max(n, 1)
    return tuple(strides)


def _is_c(shape, strides, itemsize):
    s = itemsize
    for n, st in zip(reversed(shape), reversed(strides)):
        if n == 0:
            return True
        if n != 1:
            if st != s:
                return False
            s *= n
    return True


def _is_f(shape, strides, itemsize):
    s = itemsize
    for n, st in zip(shape, strides):
        if n == 0:
            return True
        if n != 1:
            if st != s:
                return False
            s *= n
    return True


def _is_dense(shape, strides, itemsize):
    """No gaps, no overlap, positive strides: the elements fill
    [ptr, ptr + nbytes) in some axis order."""
    dims = sorted((st, n) for n, st in zip(shape, strides) if n != 1)
    if _builtin_any(n == 0 for n in shape):
        return True
    s = itemsize
    for st, n in dims:
        if st != s:
            return False
        s *= n
    return True


def _compact_strides(shape, strides, itemsize):
    """Dense strides in the axis order of the given ones (the layout a
    copy of the array keeps)."""
    order = sorted(range(len(shape)), key=lambda k: (abs(strides[k]), k))
    out = [0] * len(shape)
    s = itemsize
    for k in order:
        out[k] = s
        s *= _builtin_max(shape[k], 1)
    return tuple(out)


def _normalize_shape(shape):
    if isinstance(shape, np.ndarray):
        shape = shape.tolist()
    if isinstance(shape, (numbers.Integral, np.integer)):
        shape = (shape,)
    try:
        shape = tuple(shape)
    except TypeError:
        raise TypeError(
            "shape must be an int or a sequence of ints, not %s" % type(shape).__name__
        ) from None
    out = []
    for n in shape:
        if isinstance(n, (bool, np.bool_)) or not isinstance(n, (numbers.Integral, np.integer)):
            raise TypeError("shape entries must be ints, not %r" % (n,))
        n = int(n)
        if n < 0:
            raise ValueError("negative dimensions are not allowed: %r" % (shape,))
        out.append(n)
    return tuple(out)


def _check_dtype(dtype: Any) -> "np.dtype[Any]":
    dtype = np.dtype(dtype)
    if dtype.hasobject:
        raise TypeError(
            "GPUArray cannot hold dtype %s: Python objects have no device representation" % dtype
        )
    if dtype.itemsize == 0:
        raise TypeError("GPUArray cannot hold dtype %s (its items have no size)" % dtype)
    if not dtype.isnative:
        raise TypeError(
            "GPUArray cannot hold dtype %s: big-endian, not the GPU's byte order "
            "(little-endian); convert it first: a.astype(a.dtype.newbyteorder('='))" % dtype.str
        )
    return dtype


class ArrayFlags:
    """c_contiguous, f_contiguous and forc (either) of a GPUArray."""

    __slots__ = ("c_contiguous", "f_contiguous", "forc")

    def __init__(self, ary: "GPUArray") -> None:
        self.c_contiguous = ary._c
        self.f_contiguous = ary._f
        self.forc = ary._c or ary._f

    def __repr__(self):
        # PyCUDA's (and NumPy's) layout: two leading spaces, one flag a line
        return "  C_CONTIGUOUS : %s\n  F_CONTIGUOUS : %s" % (self.c_contiguous, self.f_contiguous)

    def __str__(self):
        return repr(self)
