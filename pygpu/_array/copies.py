"""Copies between GPUArrays and host arrays, and PyCUDA's _memcpy_discontig.

Part of pygpu.gpuarray, which re-exports every name defined here."""

from typing import TYPE_CHECKING

import numpy as np

from pygpu import _driver
from pygpu import driver as drv

from pygpu import gpuarray as _ga
from pygpu._array.layout import _compact_strides, _is_dense
from pygpu._array.gate import _check_context, _check_operands, _needs_own_copy, _own_copy

if TYPE_CHECKING:
    pass


# ---- copies ----


def _elem_strides(a):
    out = []
    for s in a.strides:
        if s % a.itemsize:
            raise ValueError(
                "an array whose strides %r are not multiples of its item size "
                "(%d) cannot be used in an element-wise kernel" % (a.strides, a.itemsize)
            )
        out.append(s // a.itemsize)
    return out


def _copy_d2d(dst, src, stream):
    """dst[...] = src (same dtype; src broadcast to dst's shape)."""
    if not isinstance(src, _ga.GPUArray):
        raise TypeError("src must be a GPUArray, not %s" % type(src).__name__)
    if src.dtype != dst.dtype:
        raise TypeError("src and dst must have the same dtype (%s != %s)" % (src.dtype, dst.dtype))
    _check_operands("copy", (dst, src))
    if src.shape != dst.shape:
        try:
            np.broadcast_shapes(src.shape, dst.shape)
        except ValueError:
            raise ValueError(
                "could not broadcast an array of shape %r into shape %r" % (src.shape, dst.shape)
            ) from None
    if dst.size == 0:
        return
    if _needs_own_copy(src, dst):  # a[1:] = a[:-1], a[:] = a[::-1]: as NumPy, from a copy
        src = _own_copy(src, stream)
    if src.shape == dst.shape and src.strides == dst.strides and src._dense:
        if stream is None:
            drv.memcpy_dtod(dst.ptr, src.ptr, src.nbytes)
        else:
            drv.memcpy_dtod_async(dst.ptr, src.ptr, src.nbytes, stream)
        return
    _ga._map("copy", "{0}", [src], dst, stream, dst.dtype)


def _host_dense_view(host, dev):
    """host as a flat contiguous buffer in dev's element order, or None."""
    if not dev._dense:
        return None
    if (
        host.strides == dev.strides
        or (host.flags.c_contiguous and dev._c)
        or (host.flags.f_contiguous and dev._f)
    ):
        if host.flags.c_contiguous or host.flags.f_contiguous or host.strides == dev.strides:
            if _is_dense(host.shape, host.strides, host.itemsize):
                return (
                    np.lib.stride_tricks.as_strided(host, (host.size,), (host.itemsize,))
                    if host.ndim != 1 or host.strides != (host.itemsize,)
                    else host
                )
    return None


def _copy_h2d(dev, host, async_, stream):
    _check_operands("copy to the device", (dev,))
    flat = _host_dense_view(host, dev)
    if flat is not None and (
        host.strides == dev.strides
        or dev.ndim <= 1
        or (host.flags.c_contiguous and dev._c)
        or (host.flags.f_contiguous and dev._f)
    ):
        if async_ or stream is not None:
            drv.memcpy_htod_async(dev.ptr, flat, stream)
        else:
            drv.memcpy_htod(dev.ptr, flat)
        return
    # gather on the host into dev's dense order, or through a device temporary
    if dev._dense:
        order = _compact_strides(dev.shape, dev.strides, dev.itemsize)
        tmp = np.lib.stride_tricks.as_strided(np.empty(host.size, host.dtype), host.shape, order)
        tmp[...] = host
        drv.memcpy_htod(dev.ptr, np.lib.stride_tricks.as_strided(tmp, (tmp.size,), (tmp.itemsize,)))
        return
    tmp = _ga.to_gpu(np.ascontiguousarray(host), allocator=dev.allocator)
    _copy_d2d(dev, tmp, stream)


# glibc serves np.empty below 32 MiB (its largest dynamic mmap threshold) from
# memory it recycles, pages already in; from there up every np.empty is a
# fresh mapping whose pages the copy must fault in
_OWN_MAPPING_FROM = 32 << 20


def _host_empty(size, dtype):
    """A new, UNFILLED 1-D host array that a device-to-host copy fills
    whole before anyone reads it (get(), _copy_d2h's gather buffer: every
    caller writes every byte, and drops the array if the copy fails).

    From 32 MiB up it lies over a HostBlock (src/memory/hostblock.c): a private
    anonymous mapping started on a 2 MiB boundary and marked
    MADV_HUGEPAGE, so the staged copy's pieces start on huge pages, each
    thread faulting in its own in parallel.  When the array dies the
    mapping goes to the host cache, pages in, and the next array of its
    size (rounded up to 2 MiB) takes it: no page faults in that copy, but
    its bytes are the former array's, not zeros -- hence "unfilled"
    (docs/memory.md, "Pageable copies").  Smaller arrays, or where mmap is
    refused, come from np.empty."""
    nbytes = size * dtype.itemsize
    if nbytes < _OWN_MAPPING_FROM or dtype.hasobject:
        return np.empty(size, dtype)
    try:
        block = _driver._host_block(nbytes)
    except MemoryError:  # no address space: NumPy's turn
        return np.empty(size, dtype)
    return np.frombuffer(block, dtype, count=size)


def _copy_d2h(host, dev, async_, stream):
    _check_operands("copy from the device", (dev,))
    if not host.flags.writeable:
        raise ValueError("the destination array is read-only")
    src = dev
    if not dev._dense:
        src = _ga.GPUArray(dev.shape, dev.dtype, dev.allocator)
        _copy_d2d(src, dev, stream)
    if (
        host.strides == src.strides
        and _is_dense(host.shape, host.strides, host.itemsize)
        and host.flags.writeable
    ):
        flat = np.lib.stride_tricks.as_strided(host, (host.size,), (host.itemsize,))
        if async_:
            drv.memcpy_dtoh_async(flat, src.ptr, stream)
        else:
            drv.memcpy_dtoh(flat, src.ptr, stream)
        return
    order = _compact_strides(src.shape, src.strides, src.itemsize)
    buf = _host_empty(src.size, src.dtype)
    drv.memcpy_dtoh(buf, src.ptr, stream)
    host[...] = np.lib.stride_tricks.as_strided(buf, src.shape, order)


# ---- PyCUDA's _memcpy_discontig (reikna's Array.copy calls it) ----


def _discontig_plan(shape, sstrides, dstrides, itemsize):
    """The byte-level copy of an array of shape between two strided layouts,
    as [[count, src_stride, dst_stride], ...] from the fastest axis on (the
    first entry contiguous bytes on both sides, the width), its axes in
    src's order with contiguous runs merged; None where no pitched copy
    does it (a stride <= 0, overlapping axes, or dst's axes in another
    order than src's)."""
    axes = sorted((s, d, n) for s, d, n in zip(sstrides, dstrides, shape) if n != 1)
    dims = [[itemsize, 1, 1]]
    for s, d, n in axes:
        if s <= 0 or d <= 0:
            return None
        n0, s0, d0 = dims[-1]
        if s == s0 * n0 and d == d0 * n0:
            dims[-1][0] = n0 * n
        elif s >= s0 * n0 and d >= d0 * n0:
            dims.append([n, s, d])
        else:
            return None
    return dims


def _host_flat(host):
    """host's memory from element 0 on as a contiguous 1-D array (host's
    strides stay the offsets into it), or None where host has a stride
    that is not positive or not a multiple of its item size."""
    extent = host.itemsize
    for n, s in zip(host.shape, host.strides):
        if n > 1:
            if s <= 0 or s % host.itemsize:
                return None
            extent += (n - 1) * s
    return np.lib.stride_tricks.as_strided(host, (extent // host.itemsize,), (host.itemsize,))


def _memcpy_discontig(dst, src, async_=False, stream=None):
    """Copy the contents of src into dst (PyCUDA's signature and checks).

    src and dst: GPUArrays or NumPy arrays (at least one a GPUArray for a
    device copy) of the same shape and dtype, with any strides.  Where the
    two layouts nest (up to two strided axes besides a contiguous run, in
    the same order on both sides) it is one cuMemcpy, cuMemcpy2D or
    cuMemcpy3D, enqueued on stream when async_ is true, as PyCUDA's; other
    layouts (more strided axes, negative strides, dst's axes in another
    order), which PyCUDA refuses, are copied as GPUArray.set()/get() and
    element-wise copies do.  A device-to-device copy without async_ is
    queued on the default stream (no host side waits for it), so it is
    captured inside a capture."""
    if not isinstance(src, (_ga.GPUArray, np.ndarray)):
        raise TypeError("src must be GPUArray or ndarray")
    if not isinstance(dst, (_ga.GPUArray, np.ndarray)):
        raise TypeError("dst must be GPUArray or ndarray")
    if src.shape != dst.shape:
        raise ValueError("src and dst must be same shape")
    if src.dtype != dst.dtype:
        raise TypeError("src and dst must have same dtype")
    hsrc, hdst = isinstance(src, np.ndarray), isinstance(dst, np.ndarray)
    if hsrc and hdst:
        dst[...] = src
        return
    if hdst and not dst.flags.writeable:
        raise ValueError("the destination array is read-only")
    if dst.size == 0:
        return
    if hdst:
        _check_context(src, None)
    else:
        _check_context(dst, None)
        if not hsrc:
            _check_context(src, None)
    sflat = _host_flat(src) if hsrc else None
    if hsrc and sflat is None:
        src = np.ascontiguousarray(src)
        sflat = _host_flat(src)
    dflat = _host_flat(dst) if hdst else None
    plan = None
    if not hdst or dflat is not None:
        plan = _discontig_plan(src.shape, src.strides, dst.strides, src.itemsize)
    if plan is not None and len(plan) == 3 and (plan[2][1] % plan[1][1] or plan[2][2] % plan[1][2]):
        plan = None  # the slices' pitch is not a whole number of rows
    if plan is None or len(plan) > 3:
        if hsrc:
            _copy_h2d(dst, src, async_, stream)
        elif hdst:
            _copy_d2h(dst, src, async_, stream)
        else:
            _copy_d2d(dst, src, stream)
        return
    if len(plan) == 1:
        n = plan[0][0]
        if hsrc:
            if async_:
                drv.memcpy_htod_async(dst.ptr, sflat, stream)
            else:
                drv.memcpy_htod(dst.ptr, sflat)
        elif hdst:
            if async_:
                drv.memcpy_dtoh_async(dflat, src.ptr, stream)
            else:
                drv.memcpy_dtoh(dflat, src.ptr)
        elif async_:
            drv.memcpy_dtod_async(dst.ptr, src.ptr, n, stream)
        else:
            drv.memcpy_dtod(dst.ptr, src.ptr, n)
        return
    copy = drv.Memcpy2D() if len(plan) == 2 else drv.Memcpy3D()
    if hsrc:
        copy.set_src_host(sflat)
    else:
        copy.set_src_device(src.ptr)
    if hdst:
        copy.set_dst_host(dflat)
    else:
        copy.set_dst_device(dst.ptr)
    copy.width_in_bytes = plan[0][0]
    copy.height, copy.src_pitch, copy.dst_pitch = plan[1]
    if len(plan) == 3:
        depth, sz, dz = plan[2]
        copy.src_height, copy.dst_height = sz // copy.src_pitch, dz // copy.dst_pitch
        copy.depth = depth
    if async_:
        copy(stream)
    elif hsrc or hdst:
        copy()
    else:
        # device to device: no host side to wait for, so it is queued on the
        # default stream (as memcpy_dtod is), which inside a capture is the
        # capturing stream: captured, where a blocking copy would be refused
        copy(drv.Stream.null())
