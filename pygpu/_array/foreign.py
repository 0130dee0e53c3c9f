"""Foreign arrays: asarray() over CUDA array interface, DLPack and cuda.core
producers.

Part of pygpu.gpuarray, which re-exports every name defined here."""

import numbers
from typing import TYPE_CHECKING

import numpy as np

from pygpu import _cudacore
from pygpu import driver as drv

from pygpu import gpuarray as _ga
from pygpu._array.layout import _c_strides, _check_dtype, _is_c, _is_f

if TYPE_CHECKING:
    from pygpu.gpuarray import GPUArray


# ---- foreign arrays ----

_CAI_STREAM_LEGACY, _CAI_STREAM_PER_THREAD = 1, 2


def asarray(obj: object, dtype: "np.typing.DTypeLike | None" = None) -> "GPUArray":
    """A GPUArray over obj's device memory, without copying: obj is a
    GPUArray, has __cuda_array_interface__ (CuPy, PyTorch, Numba, ...) or
    __dlpack__, or is a cuda.core StridedMemoryView or Buffer (a Buffer is
    bytes: a 1-d array of dtype, uint8 unless given, over all of it).  The
    GPUArray keeps obj alive (its .base)."""
    core = None if isinstance(obj, _ga.GPUArray) else _cudacore.kind(obj)
    if isinstance(obj, _ga.GPUArray):
        result = obj
    elif core == _cudacore.BUFFER:
        return _from_core_buffer(obj, np.uint8 if dtype is None else dtype)
    elif core == _cudacore.VIEW:
        result = _from_core_view(obj)
    elif hasattr(obj, "__cuda_array_interface__"):
        result = _from_cai(obj)
    elif isinstance(obj, np.ndarray):
        raise TypeError(
            "asarray() wraps device arrays without copying; a NumPy array is "
            "in host memory: use gpuarray.to_gpu()"
        )
    elif hasattr(obj, "__dlpack__"):
        from pygpu import _dlpack

        result = _dlpack.import_(obj)
    else:
        raise TypeError(
            "asarray() takes an object with __cuda_array_interface__ or "
            "__dlpack__, or a cuda.core Buffer or StridedMemoryView, not %s" % type(obj).__name__
        )
    if dtype is not None and np.dtype(dtype) != result.dtype:
        raise TypeError(
            "asarray() does not copy: the array is %s, not %s" % (result.dtype, np.dtype(dtype))
        )
    return result


def _from_core_buffer(buf, dtype):
    """A 1-d GPUArray of dtype over all of a cuda.core Buffer."""
    ptr, size = _cudacore.buffer_span(buf)
    dtype = _check_dtype(dtype)
    if size % dtype.itemsize:
        raise ValueError(
            "a cuda.core Buffer of %d bytes is not a whole number of %s items (%d bytes each)"
            % (size, dtype, dtype.itemsize)
        )
    n = size // dtype.itemsize
    _check_core_device(buf if size else None)
    return _ga._new(
        _ga.GPUArray,
        (n,),
        dtype,
        (dtype.itemsize,),
        ptr if n else None,
        buf,
        _ga._default_allocator,
        n,
        True,
        True,
    )


def _from_core_view(view):
    """A GPUArray over a cuda.core StridedMemoryView of device memory."""
    ptr, shape, strides, dtype, _ = _cudacore.view_parts(view)
    dtype = _check_dtype(dtype)
    if strides is None:
        strides = _c_strides(dtype.itemsize, shape)
    size = 1
    for n in shape:
        size *= n
    if size and not ptr:
        raise ValueError("a cuda.core StridedMemoryView of shape %r has a NULL pointer" % (shape,))
    _check_core_device(view if size else None)
    return _ga._new(
        _ga.GPUArray,
        shape,
        dtype,
        strides,
        ptr if (ptr or size) else None,
        view,
        _ga._default_allocator,
        size,
        _is_c(shape, strides, dtype.itemsize),
        _is_f(shape, strides, dtype.itemsize),
    )


def _check_core_device(obj):
    """cuda.core memory on another device than the current context's is
    refused, as DLPack's is (where cuda.core can say its device)."""
    try:
        device_id = obj.device_id if obj is not None else None
    except Exception:  # a Buffer from a handle asks the driver; no answer, no check
        return
    if isinstance(device_id, bool) or not isinstance(device_id, int) or device_id < 0:
        return
    ctx = drv.Context.get_current()
    if ctx is not None and ctx.device.ordinal != device_id:
        raise ValueError(
            "the cuda.core memory is on CUDA device %d but the current context is on "
            "device %d: make device %d's context current to use it there, or copy it"
            % (device_id, ctx.device.ordinal, device_id)
        )


def _cai_ints(value, what, nonneg):
    try:
        items = tuple(value)
    except TypeError:
        raise TypeError(
            "invalid __cuda_array_interface__: '%s' must be a tuple of ints, not %r" % (what, value)
        ) from None
    out = []
    for n in items:
        if isinstance(n, (bool, np.bool_)) or not isinstance(n, (numbers.Integral, np.integer)):
            raise TypeError(
                "invalid __cuda_array_interface__: '%s' must hold ints, not %r" % (what, n)
            )
        n = int(n)
        if nonneg and n < 0:
            raise ValueError(
                "invalid __cuda_array_interface__: negative dimension in '%s' %r" % (what, items)
            )
        out.append(n)
    return tuple(out)


def _from_cai(obj):
    """A GPUArray over a __cuda_array_interface__ (v0-v3), every field
    checked: shape (non-negative ints), typestr (a dtype the GPU can hold),
    data ((pointer, read-only), no NULL pointer for elements), strides (None
    or one int per dimension), version (at most 3), mask (none), stream."""
    cai = obj.__cuda_array_interface__
    if not isinstance(cai, dict):
        raise TypeError("__cuda_array_interface__ is not a dict")
    for key in ("shape", "typestr", "data"):
        if key not in cai:
            raise TypeError("invalid __cuda_array_interface__ (no %r)" % key)
    version = cai.get("version")
    if version is not None:
        if isinstance(version, bool) or not isinstance(version, (numbers.Integral, np.integer)):
            raise TypeError(
                "invalid __cuda_array_interface__: 'version' must be an int, not %r" % (version,)
            )
        if not 0 <= version <= 3:
            raise ValueError(
                "__cuda_array_interface__ version %d is not one pygpu reads (0 to 3)" % version
            )
    shape = _cai_ints(cai["shape"], "shape", True)
    typestr = cai["typestr"]
    if not isinstance(typestr, str):
        raise TypeError(
            "invalid __cuda_array_interface__: 'typestr' must be a str, not %r" % (typestr,)
        )
    data = cai["data"]
    if not isinstance(data, (tuple, list)) or len(data) != 2:
        raise TypeError(
            "invalid __cuda_array_interface__: 'data' must be a (pointer, "
            "read_only) pair, not %r" % (data,)
        )
    ptr = data[0]
    if ptr is None:
        ptr = 0
    if isinstance(ptr, bool) or not isinstance(ptr, (numbers.Integral, np.integer)):
        raise TypeError(
            "invalid __cuda_array_interface__: the data pointer must be an int, not %r" % (ptr,)
        )
    ptr = int(ptr)
    if not 0 <= ptr < 1 << 64:
        raise ValueError(
            "invalid __cuda_array_interface__: data pointer %d is not an address" % ptr
        )
    descr = cai.get("descr")
    try:
        if descr and len(descr) > 1 or (descr and descr[0][0]):
            dtype = np.dtype([tuple(d) for d in descr])
        else:
            dtype = np.dtype(typestr)
    except (TypeError, ValueError) as e:
        raise TypeError(
            "invalid __cuda_array_interface__: typestr %r / descr give no dtype (%s)" % (typestr, e)
        ) from None
    dtype = _check_dtype(dtype)
    if dtype.byteorder == ">":
        raise TypeError("big-endian arrays (%s) cannot be used on the GPU" % typestr)
    strides = cai.get("strides")
    if strides is None:
        strides = _c_strides(dtype.itemsize, shape)
    else:
        strides = _cai_ints(strides, "strides", False)
        if len(strides) != len(shape):
            raise ValueError(
                "invalid __cuda_array_interface__: %d strides %r for %d "
                "dimensions (shape %r)" % (len(strides), strides, len(shape), shape)
            )
    if cai.get("mask") is not None:
        raise TypeError("masked arrays (__cuda_array_interface__ 'mask') are not supported")
    size = 1
    for n in shape:
        size *= n
    if size and not ptr:
        raise ValueError(
            "invalid __cuda_array_interface__: a NULL data pointer for %d "
            "elements (shape %r)" % (size, shape)
        )
    stream = cai.get("stream")
    if stream is not None:
        _sync_foreign_stream(stream)
    return _ga._new(
        _ga.GPUArray,
        shape,
        dtype,
        strides,
        ptr if (ptr or size) else None,
        obj,
        _ga._default_allocator,
        size,
        _is_c(shape, strides, dtype.itemsize),
        _is_f(shape, strides, dtype.itemsize),
    )


def _sync_foreign_stream(stream):
    """The producer's work on its stream is done before ours (on the legacy
    stream) starts."""
    stream = int(stream)
    if stream == _CAI_STREAM_LEGACY:
        return  # ordered with our default-stream work already
    if stream == 0:
        raise ValueError(
            "__cuda_array_interface__ 'stream' 0 is disallowed by the protocol (use None, 1 or 2)"
        )
    if stream == _CAI_STREAM_PER_THREAD:
        drv.Stream.per_thread().synchronize()
        return
    ev = drv.Event()
    ev.record(drv.Stream.from_handle(stream))
    drv.Stream.null().wait_for_event(ev)
