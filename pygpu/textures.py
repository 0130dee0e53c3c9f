"""CUDA arrays, texture and surface objects, TMA tensor maps: the Python side.

The types (Array, ArrayDescriptor, ArrayDescriptor3D, TextureObject,
SurfaceObject, TensorMap) and the driver's enums (array_format,
address_mode, filter_mode, resource_type, tensor_map_*) are C
(src/texture/cuarray.c, src/texture/texobj.c, src/texture/tensormap.c); this module adds PyCUDA's
helpers around them (matrix_to_array, np_to_array, gpuarray_to_array,
make_multichannel_2d_array), the read-backs (array_to_np, array_to_matrix),
Memcpy3D and Memcpy3DPeer, the memcpy_htoa/atoh copies (memcpy_dtoa/atod/atoa
are C) and the flag enums that cuda.h
defines as macros.  pygpu.driver re-exports all of it.
"""

import enum as _enum
from typing import TYPE_CHECKING as _TYPE_CHECKING
from typing import Any as _Any

import numpy as _np

from pygpu import _driver
from pygpu._driver import (  # noqa: F401  (re-exported through pygpu.driver)
    Array,
    ArrayDescriptor,
    ArrayDescriptor3D,
    SurfaceObject,
    TensorMap,
    TextureObject,
    address_mode,
    array_format,
    filter_mode,
    memory_type,
    memcpy_atoa,
    memcpy_atod,
    memcpy_dtoa,
    resource_type,
    tensor_map_data_type,
    tensor_map_float_oob_fill,
    tensor_map_interleave,
    tensor_map_l2_promotion,
    tensor_map_swizzle,
)

if _TYPE_CHECKING:
    from pygpu._driver import Context, Stream


class array3d_flags(_enum.IntFlag):
    """ArrayDescriptor3D.flags (CUDA_ARRAY3D_*), with PyCUDA's names."""

    LAYERED = 0x01
    ARRAY3D_LAYERED = 0x01
    ARRAY3D_2DARRAY = 0x01
    SURFACE_LDST = 0x02
    CUBEMAP = 0x04
    TEXTURE_GATHER = 0x08


# PyCUDA's array3d_flags also has the name 2DARRAY (reached with getattr:
# it is no identifier)
setattr(array3d_flags, "2DARRAY", array3d_flags.ARRAY3D_2DARRAY)


class read_mode(_enum.IntEnum):
    """How a texture of an integer format reads: ELEMENT_TYPE returns the
    integers (cudaReadModeElementType), NORMALIZED_FLOAT maps them to
    [0, 1] (unsigned) or [-1, 1] (signed) floats.  Float formats read floats
    either way."""

    ELEMENT_TYPE = 0
    NORMALIZED_FLOAT = 1


_FORMAT_DTYPES = {
    array_format.UNSIGNED_INT8: _np.uint8,
    array_format.UNSIGNED_INT16: _np.uint16,
    array_format.UNSIGNED_INT32: _np.uint32,
    array_format.SIGNED_INT8: _np.int8,
    array_format.SIGNED_INT16: _np.int16,
    array_format.SIGNED_INT32: _np.int32,
    array_format.HALF: _np.float16,
    array_format.FLOAT: _np.float32,
}


def dtype_to_array_format(dtype: "_np.typing.DTypeLike") -> "array_format":
    """The array_format of a NumPy dtype (PyCUDA's name); TypeError for
    dtypes no array format holds."""
    for fmt, dt in _FORMAT_DTYPES.items():
        if _np.dtype(dtype) == dt:
            return fmt
    raise TypeError("cannot convert dtype '%s' to array format" % _np.dtype(dtype))


def array_format_to_dtype(fmt: "array_format | int") -> "_np.dtype[_Any]":
    """The NumPy dtype of an array_format."""
    try:
        return _np.dtype(_FORMAT_DTYPES[array_format(fmt)])
    except (KeyError, ValueError):
        raise ValueError("array format %r has no NumPy dtype" % (fmt,)) from None


def _address(obj):
    """A device pointer's address: int(), else its CUDA Array Interface."""
    try:
        return int(obj)
    except TypeError:
        return int(obj.__cuda_array_interface__["data"][0])


def _is_buffer(obj):
    try:
        memoryview(obj).release()
    except TypeError:
        return False
    return True


# the sides' kinds as CUmemorytype values (src_memory_type, dst_memory_type)
_KIND_TYPES = {"h": 1, "d": 2, "a": 3, "u": 4}
_TYPE_KINDS = {v: k for k, v in _KIND_TYPES.items()}


class _MemcpyFields:
    """What PyCUDA's Memcpy2D, Memcpy3D and Memcpy3DPeer share: the fields
    (readable and writable, 0 until set), the sides' set_*() methods, and
    src/dst_memory_type and src/dst_device, which follow the set_*() calls
    (writing src_device is set_src_device(); writing src_memory_type
    changes how the side is read)."""

    src_x_in_bytes = src_y = src_z = src_lod = src_pitch = src_height = 0
    dst_x_in_bytes = dst_y = dst_z = dst_lod = dst_pitch = dst_height = 0
    width_in_bytes = height = 0
    depth = 1
    _src = _dst = None
    _src_kind = _dst_kind = None

    def set_src_host(self, buf):
        self._src, self._src_kind = buf, "h"

    def set_src_device(self, ptr):
        self._src, self._src_kind = ptr, "d"

    def set_src_array(self, ary):
        """A CUDA Array as the source."""
        self._src, self._src_kind = ary, "a"

    def set_src_unified(self, buf):
        """Memory of the unified address space (CU_MEMORYTYPE_UNIFIED): a
        host buffer (page-locked, managed or plain) or a device pointer."""
        self._src, self._src_kind = buf, "u"

    def set_dst_host(self, buf):
        self._dst, self._dst_kind = buf, "h"

    def set_dst_device(self, ptr):
        self._dst, self._dst_kind = ptr, "d"

    def set_dst_array(self, ary):
        """A CUDA Array as the destination."""
        self._dst, self._dst_kind = ary, "a"

    def set_dst_unified(self, buf):
        """Memory of the unified address space as the destination."""
        self._dst, self._dst_kind = buf, "u"

    @staticmethod
    def _resolve(kind, obj):
        """A unified side is read as host memory when it is a buffer."""
        if kind == "u":
            return "h" if _is_buffer(obj) else "d"
        return kind

    def _memory_type(self, kind):
        if kind is None:
            return 0
        return memory_type(_KIND_TYPES[kind])

    @staticmethod
    def _kind_of(value, what):
        try:
            return _TYPE_KINDS[int(value)]
        except (KeyError, TypeError, ValueError):
            raise ValueError(
                "%s must be a memory_type (HOST, DEVICE, ARRAY or UNIFIED), got %r" % (what, value)
            ) from None

    @property
    def src_memory_type(self):
        return self._memory_type(self._src_kind)

    @src_memory_type.setter
    def src_memory_type(self, value):
        self._src_kind = self._kind_of(value, "src_memory_type")

    @property
    def dst_memory_type(self):
        return self._memory_type(self._dst_kind)

    @dst_memory_type.setter
    def dst_memory_type(self, value):
        self._dst_kind = self._kind_of(value, "dst_memory_type")

    @property
    def src_device(self):
        return _address(self._src) if self._src_kind == "d" else 0

    @src_device.setter
    def src_device(self, ptr):
        self.set_src_device(ptr)

    @property
    def dst_device(self):
        return _address(self._dst) if self._dst_kind == "d" else 0

    @dst_device.setter
    def dst_device(self, ptr):
        self.set_dst_device(ptr)


class Memcpy3D(_MemcpyFields):
    """A 3-D copy between host memory, device memory and CUDA arrays, set up
    attribute by attribute as in PyCUDA:

        c = Memcpy3D()
        c.set_src_host(a); c.set_dst_array(ary)
        c.width_in_bytes = c.src_pitch = a.strides[1]
        c.height = c.src_height = a.shape[1]; c.depth = a.shape[0]
        c()            # or c(stream)

    Offsets (src_x_in_bytes, src_y, src_z, dst_*) default to 0; a host or
    device side needs its pitch (bytes between rows) and, when depth > 1,
    its height (rows between slices).  Every extent is checked against the
    buffer, allocation or array before the driver is called."""

    _what = "Memcpy3D"

    def _sides(self, depth):
        if self._src_kind is None or self._dst_kind is None:
            raise ValueError("%s: set a source and a destination first" % self._what)
        if self.src_lod or self.dst_lod:
            raise ValueError(
                "%s: src_lod and dst_lod must be 0 (mipmapped arrays are not "
                "supported)" % self._what
            )
        src = (
            self._resolve(self._src_kind, self._src),
            self._src,
            self.src_x_in_bytes,
            self.src_y,
            self.src_z if depth is None else 0,
            self.src_pitch,
            self.src_height,
        )
        dst = (
            self._resolve(self._dst_kind, self._dst),
            self._dst,
            self.dst_x_in_bytes,
            self.dst_y,
            self.dst_z if depth is None else 0,
            self.dst_pitch,
            self.dst_height,
        )
        return src, dst

    def __call__(self, stream: "Stream | None" = None) -> None:
        """c() copies now; c(stream) enqueues on a stream."""
        src, dst = self._sides(None)
        _driver._memcpy_3d(
            self._what, src, dst, self.width_in_bytes, self.height, self.depth, stream
        )


class Memcpy3DPeer(Memcpy3D):
    """A Memcpy3D between contexts (cuMemcpy3DPeer, cuMemcpy3DPeerAsync
    given a stream), e.g. from device memory of one GPU into a CUDA array
    of another:

        c = Memcpy3DPeer()
        c.set_src_device(d0); c.set_src_context(ctx0)
        c.set_dst_array(ary1); c.set_dst_context(ctx1)
        c.width_in_bytes = c.src_pitch = ...; c.height = ...; c()

    A context left unset is the side's own (an Array's or a
    DeviceAllocation's), else the current one; the driver ignores the
    context of an array side.  Every extent is checked as Memcpy3D's."""

    _what = "Memcpy3DPeer"

    def __init__(self):
        super().__init__()
        self._src_context = self._dst_context = None

    def set_src_context(self, ctx: "Context") -> None:
        self._src_context = ctx

    def set_dst_context(self, ctx: "Context") -> None:
        self._dst_context = ctx

    def __call__(self, stream: "Stream | None" = None) -> None:
        """c() copies now; c(stream) enqueues on a stream."""
        src, dst = self._sides(None)
        _driver._memcpy_3d_peer(
            self._what,
            src,
            dst,
            self.width_in_bytes,
            self.height,
            self.depth,
            stream,
            self._src_context,
            self._dst_context,
        )


def _as_host(ary, what):
    if not isinstance(ary, _np.ndarray):
        raise TypeError("%s takes a NumPy array, not %s" % (what, type(ary).__name__))
    return ary


def _order(order, what):
    if not isinstance(order, str) or order.upper() not in ("C", "F"):
        raise ValueError("%s: order must be 'C' or 'F', not %r" % (what, order))
    return order.upper()


def _channels_format(dtype, what):
    """PyCUDA's rule: float64/complex types travel as 2 or 4 SIGNED_INT32 channels."""
    dtype = _np.dtype(dtype)
    if dtype == _np.complex64 or dtype == _np.float64:
        return array_format.SIGNED_INT32, 2
    if dtype == _np.complex128:
        return array_format.SIGNED_INT32, 4
    try:
        return dtype_to_array_format(dtype), 1
    except TypeError:
        raise TypeError("%s: no array format holds dtype %s" % (what, dtype)) from None


def matrix_to_array(
    matrix: "_np.ndarray[_Any, _Any]", order: str, allow_double_hack: bool = False
) -> "Array":
    """A 2-D CUDA array holding a 2-D NumPy array: order "C" maps rows to
    the array's rows, "F" its columns.  float64 needs allow_double_hack
    (two SIGNED_INT32 channels, read back with __hiloint2double)."""
    order = _order(order, "matrix_to_array()")
    matrix = _as_host(matrix, "matrix_to_array()")
    if matrix.ndim != 2:
        raise ValueError("matrix_to_array(): the array must be 2-D, not %d-D" % matrix.ndim)
    matrix = _np.asarray(matrix, order=order)  # type: ignore[call-overload]  # "C" or "F"
    if order == "C":
        h, w = matrix.shape
    else:
        w, h = matrix.shape
    if matrix.dtype == _np.float64 and allow_double_hack:
        fmt, nch = array_format.SIGNED_INT32, 2
    else:
        fmt, nch = dtype_to_array_format(matrix.dtype), 1
    ary = Array(ArrayDescriptor(w, h, fmt, nch))
    _host_to_array(matrix, ary, w * matrix.itemsize, h, 1)
    return ary


def _host_to_array(src, ary, width_in_bytes, height, depth, device=False):
    c = Memcpy3D()
    if device:
        c.set_src_device(src)
    else:
        c.set_src_host(src)
    c.set_dst_array(ary)
    c.width_in_bytes = c.src_pitch = width_in_bytes
    c.height = c.src_height = height
    c.depth = depth
    c()


def _to_array(obj, order, allowSurfaceBind, layered, what, device):  # noqa: N803
    order = _order(order, what)
    shape = tuple(int(n) for n in obj.shape)
    fmt, nch = _channels_format(obj.dtype, what)
    itemsize = _np.dtype(obj.dtype).itemsize
    if len(shape) == 2:
        h, w = shape if order == "C" else shape[::-1]
        d = 1
    elif len(shape) == 3:
        d, h, w = shape if order == "C" else shape[::-1]
    else:
        raise ValueError("%s: CUDA arrays from 2-D or 3-D data, not %d-D" % (what, len(shape)))
    if layered and len(shape) != 3:
        raise ValueError("%s: a layered array needs 3-D data (layers, rows, columns)" % what)
    flags = 0
    if layered or (allowSurfaceBind and len(shape) == 2):
        flags |= array3d_flags.LAYERED
    if allowSurfaceBind:
        flags |= array3d_flags.SURFACE_LDST
    if len(shape) == 3 or flags:
        desc = ArrayDescriptor3D(w, h, d, fmt, nch, int(flags))
    else:
        desc = ArrayDescriptor(w, h, fmt, nch)
    ary = Array(desc)
    _host_to_array(obj if not device else _device_ptr(obj), ary, w * itemsize, h, d, device)
    return ary


def _device_ptr(gpuarray):
    if not (gpuarray.flags.c_contiguous or gpuarray.flags.f_contiguous):
        raise ValueError("gpuarray_to_array(): the GPUArray is not contiguous")
    return gpuarray.gpudata if hasattr(gpuarray, "gpudata") else int(gpuarray.ptr)


def np_to_array(
    nparray: "_np.ndarray[_Any, _Any]",
    order: str,
    allowSurfaceBind: bool = False,
    layered: bool = False,
) -> "Array":  # noqa: N803
    """A CUDA array holding a 2-D or 3-D NumPy array (C order: shape (rows,
    columns) or (depth, rows, columns); F order the reverse).  float64 and
    complex types travel as SIGNED_INT32 channels, as PyCUDA does.
    allowSurfaceBind makes it surface-writable (SURFACE_LDST; 2-D data
    becomes a one-layer LAYERED array, PyCUDA's rule); layered makes 3-D
    data a LAYERED array of depth layers."""
    nparray = _as_host(nparray, "np_to_array()")
    nparray = _np.asarray(nparray, order=_order(order, "np_to_array()"))
    return _to_array(nparray, order, allowSurfaceBind, layered, "np_to_array()", False)


def gpuarray_to_array(
    gpuarray: _Any, order: str, allowSurfaceBind: bool = False, layered: bool = False
) -> "Array":  # noqa: N803
    """np_to_array for a contiguous GPUArray (a device-to-array copy)."""
    return _to_array(gpuarray, order, allowSurfaceBind, layered, "gpuarray_to_array()", True)


def make_multichannel_2d_array(ndarray: "_np.ndarray[_Any, _Any]", order: str) -> "Array":
    """A 2-D CUDA array of 1, 2 or 4 channels: C order takes shape (rows,
    columns, channels), F order (channels, columns, rows)."""
    order = _order(order, "make_multichannel_2d_array()")
    ndarray = _as_host(ndarray, "make_multichannel_2d_array()")
    if ndarray.ndim != 3:
        raise ValueError(
            "make_multichannel_2d_array(): the array must be 3-D, not %d-D" % ndarray.ndim
        )
    ndarray = _np.asarray(ndarray, order=order)  # type: ignore[call-overload]  # "C" or "F"
    if order == "C":
        h, w, nch = ndarray.shape
    else:
        nch, w, h = ndarray.shape
    if nch not in (1, 2, 4):
        raise ValueError(
            "make_multichannel_2d_array(): %d channels; CUDA arrays have 1, 2 or 4" % nch
        )
    ary = Array(ArrayDescriptor(w, h, dtype_to_array_format(ndarray.dtype), nch))
    _host_to_array(ndarray, ary, w * nch * ndarray.itemsize, h, 1)
    return ary


def array_to_np(
    ary: "Array", dtype: "_np.typing.DTypeLike | None" = None, stream: "Stream | None" = None
) -> "_np.ndarray[_Any, _Any]":
    """The contents of a CUDA array as a new C-ordered NumPy array of shape
    ([depth,] [height,] width[, channels]) (1-D arrays drop height, 2-D
    depth, one channel the channel axis); dtype defaults to the format's
    (pass float64 for data stored by the double hack)."""
    d = ary.descriptor
    base = array_format_to_dtype(d.format)
    shape = [d.width]
    if d.height:
        shape.insert(0, d.height)
    if d.depth:
        shape.insert(0, d.depth)
    if d.num_channels > 1:
        shape.append(d.num_channels)
    out = _np.empty(shape, base)
    c = Memcpy3D()
    c.set_src_array(ary)
    c.set_dst_host(out)
    c.width_in_bytes = c.dst_pitch = d.width * d.num_channels * base.itemsize
    c.height = c.dst_height = max(d.height, 1)
    c.depth = max(d.depth, 1)
    c(stream)
    if stream is not None:
        stream.synchronize()
    if dtype is not None and _np.dtype(dtype) != base:
        out = out.view(dtype)
        if out.shape[-1] == 1 and d.num_channels > 1:
            out = out[..., 0]
    return out


def array_to_matrix(
    ary: "Array", order: str = "C", dtype: "_np.typing.DTypeLike | None" = None
) -> "_np.ndarray[_Any, _Any]":
    """The inverse of matrix_to_array: a 2-D CUDA array's contents as a
    NumPy matrix in the given order."""
    out = array_to_np(ary, dtype)
    if out.ndim != 2:
        raise ValueError(
            "array_to_matrix(): the array is not a 2-D single-channel array (use array_to_np)"
        )
    return out if _order(order, "array_to_matrix()") == "C" else _np.asfortranarray(out.T)


def memcpy_htoa(ary: "Array", index: int, src: _Any) -> None:
    """Copy a host buffer into a 1-D or 2-D CUDA array from byte offset index
    of its first row (PyCUDA's memcpy_htoa)."""
    n = memoryview(src).nbytes
    c = Memcpy3D()
    c.set_src_host(src)
    c.set_dst_array(ary)
    c.dst_x_in_bytes = index
    c.width_in_bytes = c.src_pitch = n
    c.height = 1
    c()


def memcpy_atoh(dest: _Any, ary: "Array", index: int) -> None:
    """Copy from byte offset index of a CUDA array's first row into a host
    buffer (PyCUDA's memcpy_atoh)."""
    n = memoryview(dest).nbytes
    c = Memcpy3D()
    c.set_src_array(ary)
    c.set_dst_host(dest)
    c.src_x_in_bytes = index
    c.width_in_bytes = c.dst_pitch = n
    c.height = 1
    c()


__all__ = [
    "Array",
    "ArrayDescriptor",
    "ArrayDescriptor3D",
    "Memcpy3D",
    "Memcpy3DPeer",
    "SurfaceObject",
    "TensorMap",
    "TextureObject",
    "address_mode",
    "array3d_flags",
    "array_format",
    "array_format_to_dtype",
    "array_to_matrix",
    "array_to_np",
    "dtype_to_array_format",
    "filter_mode",
    "gpuarray_to_array",
    "make_multichannel_2d_array",
    "matrix_to_array",
    "memcpy_atoa",
    "memcpy_atod",
    "memcpy_atoh",
    "memcpy_dtoa",
    "memcpy_htoa",
    "np_to_array",
    "read_mode",
    "resource_type",
    "tensor_map_data_type",
    "tensor_map_float_oob_fill",
    "tensor_map_interleave",
    "tensor_map_l2_promotion",
    "tensor_map_swizzle",
]
