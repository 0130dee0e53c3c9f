"""The operand gate: every array a kernel or a copy reads or writes is proved
alive, in the current context and within its allocation here.

Part of pygpu.gpuarray, which re-exports every name defined here."""

from typing import TYPE_CHECKING


from pygpu import driver as drv
from pygpu.tools import PooledDeviceAllocation

from pygpu import gpuarray as _ga
from pygpu._array.layout import _DA, _builtin_all, _compact_strides, _get_current

if TYPE_CHECKING:
    pass


# ---- the operand gate ----
#
# Every array entry point (operators, module functions, methods, the
# generators' calls, cumath, curandom, reductions, scans, copies, DLPack
# export) checks its GPUArray operands here before anything reaches the
# driver.  The fast paths skip only what they prove themselves: an exact,
# dense GPUArray whose gpudata is a DeviceAllocation of the current context
# with nbytes <= its size (its data starts at the allocation, so it lies
# within it), and a freed DeviceAllocation is refused by the launch itself;
# anything else (a view, a pooled block, a subclass, foreign memory) comes
# here.


def _allocation(a):
    """The allocation a's elements lie in (a DeviceAllocation or a pooled
    block), or None where pygpu cannot know it (foreign memory, a raw
    pointer)."""
    g = a.gpudata
    if isinstance(g, (_DA, PooledDeviceAllocation)):
        return g
    b = a.base
    if isinstance(b, _ga.GPUArray):
        g = b.gpudata
        if isinstance(g, (_DA, PooledDeviceAllocation)):
            return g
        b = b.base
    if isinstance(b, (_DA, PooledDeviceAllocation)):
        return b
    return None


def _extent(shape, strides, itemsize):
    """(lo, hi): the bytes an array's elements occupy, relative to element
    0, as [lo, hi); None for an empty array."""
    lo = hi = 0
    for n, s in zip(shape, strides):
        if n == 0:
            return None
        d = (n - 1) * s
        if d < 0:
            lo += d
        else:
            hi += d
    return lo, hi + itemsize


def _needs_own_copy(a, out):
    """a (an input) shares bytes with out (written) in a way an element-wise
    kernel cannot read safely: their byte ranges meet but element k of out
    is not where element k of a is (a view at another offset or in another
    order, a broadcast element, another item size).  NumPy reads such an
    input as if copied first; so must pygpu."""
    if a is out:
        return False
    ea = _extent(a.shape, a.strides, a.itemsize)
    eo = _extent(out.shape, out.strides, out.itemsize)
    if ea is None or eo is None:
        return False
    pa, po = a.ptr, out.ptr
    if pa + ea[1] <= po + eo[0] or po + eo[1] <= pa + ea[0]:
        return False  # apart
    return not (
        pa == po
        and a.shape == out.shape
        and a.strides == out.strides
        and a.itemsize == out.itemsize
    )


def _own_copy(a, stream):
    """A copy of a, made on `stream` (ordered before the kernel that reads
    it there)."""
    strides = _compact_strides(a.shape, a.strides, a.itemsize) if a._dense else None
    new = _ga.GPUArray(a.shape, a.dtype, a.allocator, strides=strides)
    _ga._copy_d2d(new, a, stream)
    return new


def _check_extent(ptr, shape, strides, itemsize, g, what):
    """The elements at ptr lie within allocation g, else ValueError naming
    both sizes."""
    ext = _extent(shape, strides, itemsize)
    if ext is None:
        return
    start = int(g)
    size = g.size
    lo, hi = ptr + ext[0] - start, ptr + ext[1] - start
    if lo < 0 or hi > size:
        raise ValueError(
            "%s: the array's elements span bytes [%d, %d) of an allocation of "
            "%d bytes (shape %r, strides %r, %d-byte items): they lie outside "
            "its memory" % (what, lo, hi, size, shape, strides, itemsize)
        )


def _check_one(a, ctx, what):
    """The gate for one operand (see _check_operands)."""
    if a.__class__ is not _ga.GPUArray and not isinstance(a, _ga.GPUArray):
        raise TypeError("%s: expected a GPUArray, not %s" % (what, type(a).__name__))
    g = a.gpudata
    cls = g.__class__
    if cls is _DA:
        alloc = g
    else:
        alloc = _allocation(a)
        if alloc is None:
            return
    if alloc.__class__ is _DA or isinstance(alloc, _DA):
        if alloc.freed:
            raise drv.LogicError("%s: the array's memory was freed" % what)
        if ctx is not None:
            gctx = alloc.context
            if gctx is not ctx and gctx != ctx:
                raise ValueError("%s: %s" % (what, _elsewhere_message(gctx, ctx)))
    elif alloc._alloc is None:  # a pooled block given back
        raise drv.LogicError("%s: the array's memory was freed" % what)
    if a.size:
        if a._c or a._f:  # dense, positive strides: [ptr, ptr + nbytes)
            start = int(alloc)
            p = g if cls is int else int(g)
            if start <= p and p + a.nbytes <= start + alloc.size:
                return
        _check_extent(a.ptr, a.shape, a.strides, a.itemsize, alloc, what)


_NO_CTX = object()


def _check_operands(
    what, arrays, ctx=_NO_CTX, contiguous=False, same_size=False, same_layout=False, dtype=None
):
    """The operand gate (see above).  arrays: the GPUArray operands (None
    entries are skipped).  Each one's memory must not be freed (LogicError),
    must live in ctx, the current context by default (ValueError naming
    both devices), and its elements must lie within its allocation
    (ValueError naming the sizes); with dtype, be of that dtype (TypeError);
    with contiguous, be C- or F-contiguous (RuntimeError, PyCUDA's class).
    same_size: all hold as many elements (ValueError naming the sizes);
    same_layout: arrays of one shape have one memory order, as a kernel that
    pairs elements by memory position needs (ValueError).  Returns ctx."""
    if ctx is _NO_CTX:
        ctx = _get_current()
    first = None
    for a in arrays:
        if a is None:
            continue
        _check_one(a, ctx, what)
        if dtype is not None and a.dtype != dtype:
            raise TypeError("%s: the array is %s, not %s" % (what, a.dtype, dtype))
        if contiguous and not (a._c or a._f):
            raise RuntimeError(
                "%s: only contiguous arrays may be used (strides %r for "
                "shape %r)" % (what, a.strides, a.shape)
            )
        if first is None:
            first = a
            continue
        if same_size and a.size != first.size:
            raise ValueError(
                "%s: the arrays have %d and %d elements (shapes %r and %r); "
                "they must have as many" % (what, first.size, a.size, first.shape, a.shape)
            )
        if same_layout and a.shape == first.shape and a.size > 1 and not _same_order(first, a):
            raise ValueError(
                "%s: arrays of shape %r in different memory orders (strides %r "
                "and %r) would be paired by memory position, not by index; "
                "copy one into the other's order first" % (what, a.shape, first.strides, a.strides)
            )
    return ctx


def _same_order(a, b):
    """Element k of a and of b (same shape) sit at the same position in
    memory order."""
    if a.strides == b.strides and a.itemsize == b.itemsize:
        return True
    if (a._c and b._c) or (a._f and b._f):
        return True
    sa, sb = a.itemsize, b.itemsize
    return _builtin_all(
        n == 1 or x * sb == y * sa for n, x, y in zip(a.shape, a.strides, b.strides)
    )


def _in_order_of(b, a, allocator=None):
    """b (a's shape) in a's memory order (a: C- or F-contiguous): b itself
    when it is already, else a copy (pairs elements by index)."""
    if _same_order(a, b) and (b._c or b._f):
        return b
    order = "F" if a._f and not a._c else "C"
    out = _ga.GPUArray(b.shape, b.dtype, allocator or b.allocator, order=order)
    _ga._copy_d2d(out, b, None)
    return out


def _check_context(a, ctx):
    _check_one(a, ctx, "the operation")


def _check_devices(arrays, ctx):
    """Each array's memory lives in ctx (the current context): else a
    ValueError naming both devices (LogicError when freed)."""
    for a in arrays:
        _check_one(a, ctx, "the operation")


def _elsewhere_message(actx, ctx):
    adev, cdev = actx.device.ordinal, ctx.device.ordinal
    if adev != cdev:
        return (
            "GPUArray operands on different devices: an operand lives on device %d "
            "but the operation runs in the current context, on device %d; copy it to "
            "device %d first (driver.memcpy_peer, or .get() and to_gpu() there), or "
            "make device %d's context current" % (adev, cdev, cdev, adev)
        )
    return (
        "the array was allocated in another context (%r) than the current one (%r), "
        "both on device %d" % (actx, ctx, adev)
    )
