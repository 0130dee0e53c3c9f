"""cuda.core's memory objects, known without importing cuda.core
(docs/interop.md).

cuda.core's ``Buffer`` (untyped device bytes: ``.handle``, ``.size``) and
``StridedMemoryView`` (``.ptr``, ``.shape``, ``.strides`` counted in
elements, ``.dtype``) have no ``__cuda_array_interface__``.  pygpu knows
them by their class, or one of its bases, being named ``Buffer`` or
``StridedMemoryView`` in a module under ``cuda.core`` (the rule is the C
launch path's, src/launch/args.c core_class, which kind() calls).  Nothing here
imports cuda.core; the public side is pygpu.cudacore.
"""

from pygpu import _driver
from pygpu import driver as drv

BUFFER, VIEW = "Buffer", "StridedMemoryView"


def kind(obj):
    """BUFFER, VIEW or None for obj's class (the C launch path's rule,
    src/launch/args.c core_class, called: one rule for both)."""
    return _driver._cuda_core_kind(obj)


def buffer_span(buf, what="a cuda.core Buffer"):
    """(address, bytes) of a cuda.core Buffer; a closed one (address 0 with
    bytes) is refused."""
    try:
        ptr = int(buf.handle)
        size = int(buf.size)
    except (TypeError, ValueError, AttributeError) as e:
        raise TypeError("%s without an int handle and size: %s" % (what, e)) from None
    if size < 0 or not 0 <= ptr < 1 << 64:
        raise ValueError("%s with address %#x and size %d is not device memory" % (what, ptr, size))
    if size and not ptr:
        raise drv.LogicError("%s was closed (its memory was released)" % what)
    return ptr, size


def view_parts(view):
    """(address, shape, byte strides, dtype, readonly) of a cuda.core
    StridedMemoryView of device memory."""
    import numpy as np

    if not getattr(view, "is_device_accessible", True):
        raise TypeError(
            "a cuda.core StridedMemoryView of host memory is not device memory: "
            "copy it to the device (gpuarray.to_gpu) instead"
        )
    dtype = view.dtype
    if dtype is None:
        raise TypeError("a cuda.core StridedMemoryView without a dtype cannot be a GPUArray")
    dtype = np.dtype(dtype)
    shape = tuple(int(n) for n in view.shape)
    if any(n < 0 for n in shape):
        raise ValueError("a cuda.core StridedMemoryView with a negative dimension: %r" % (shape,))
    strides = view.strides
    if strides is None:
        byte_strides = None
    else:
        strides = tuple(int(s) for s in strides)
        if len(strides) != len(shape):
            raise ValueError(
                "a cuda.core StridedMemoryView with %d strides for shape %r" % (len(strides), shape)
            )
        byte_strides = tuple(s * dtype.itemsize for s in strides)  # elements -> bytes
    ptr = int(view.ptr)
    return ptr, shape, byte_strides, dtype, bool(getattr(view, "readonly", False))
