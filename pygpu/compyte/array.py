"""Stride and flag helpers for array-like objects (shape, strides, dtype,
nbytes), as pycuda.compyte.array."""

import math
from typing import Any, Protocol

import numpy as np
from numpy.lib.stride_tricks import as_strided

__all__ = [
    "ArrayFlags",
    "ArrayIsh",
    "as_strided",
    "bound",
    "c_contiguous_strides",
    "equal_strides",
    "f_contiguous_strides",
    "get_common_dtype",
    "is_c_contiguous_strides",
    "is_f_contiguous_strides",
    "may_share_memory",
]


def f_contiguous_strides(itemsize, shape):
    """Fortran-order strides (an axis of length 0 counts as 1)."""
    strides, step = [], itemsize
    for n in shape:
        strides.append(step)
        step *= max(1, n)
    return tuple(strides)


def c_contiguous_strides(itemsize, shape):
    """C-order strides (an axis of length 0 counts as 1)."""
    return tuple(reversed(f_contiguous_strides(itemsize, tuple(reversed(tuple(shape))))))


def equal_strides(strides1, strides2, shape):
    """Whether two stride tuples address the same elements of shape (axes
    of length 1 may differ)."""
    if tuple(strides1) == tuple(strides2):
        return True
    if not len(strides1) == len(strides2) == len(shape):
        return False
    return all(n == 1 or a == b for n, a, b in zip(shape, strides1, strides2))


def is_f_contiguous_strides(strides, itemsize, shape):
    return (
        equal_strides(strides, f_contiguous_strides(itemsize, shape), shape)
        or math.prod(shape) == 0
    )


def is_c_contiguous_strides(strides, itemsize, shape):
    return (
        equal_strides(strides, c_contiguous_strides(itemsize, shape), shape)
        or math.prod(shape) == 0
    )


class ArrayIsh(Protocol):
    """What these helpers read from an array."""

    shape: "tuple[int, ...]"
    strides: "tuple[int, ...]"
    dtype: "np.dtype[Any]"
    bytes: int


class ArrayFlags:
    """c_contiguous, f_contiguous and forc (either) of an array-like."""

    def __init__(self, ary):
        self.f_contiguous = is_f_contiguous_strides(ary.strides, ary.dtype.itemsize, ary.shape)
        self.c_contiguous = is_c_contiguous_strides(ary.strides, ary.dtype.itemsize, ary.shape)
        self.forc = self.f_contiguous or self.c_contiguous

    def __repr__(self):
        return "  C_CONTIGUOUS : %s\n  F_CONTIGUOUS : %s" % (self.c_contiguous, self.f_contiguous)

    __str__ = __repr__


def get_common_dtype(obj1, obj2, allow_double):
    """The dtype NumPy gives obj1 + obj2 (obj2 an array-like or a scalar);
    without allow_double, float64 becomes float32 and complex128 complex64."""
    a = np.zeros(1, dtype=obj1.dtype)
    try:
        b = np.zeros(1, dtype=obj2.dtype)
    except AttributeError:
        b = obj2
    result = (a + b).dtype
    if not allow_double:
        result = {
            np.dtype(np.float64): np.dtype(np.float32),
            np.dtype(np.complex128): np.dtype(np.complex64),
        }.get(result, result)
    return result


def bound(a):
    """(low, high): the byte range an array-like's elements reach, counted
    from a.bytes as PyCUDA's does (negative strides lower low)."""
    low = high = a.bytes
    for stride, n in zip(a.strides, a.shape):
        if stride < 0:
            low += stride * (n - 1)
        else:
            high += stride * (n - 1)
    return low, high


def may_share_memory(a, b):
    """False when a and b surely do not overlap: another class, or
    disjoint bounds."""
    if a is b:
        return True
    if a.__class__ is not b.__class__:
        return False
    a_lo, a_hi = bound(a)
    b_lo, b_hi = bound(b)
    return not (b_lo >= a_hi or a_lo >= b_hi)
