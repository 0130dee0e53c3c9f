"""DLPack export and import for pygpu.gpuarray (ctypes over the DLPack C
structs; https://dmlc.github.io/dlpack/latest/c_api.html).

export(): a capsule "dltensor" (or "dltensor_versioned" when the consumer
asks for max_version >= (1, 0)) whose DLManagedTensor lives in this module's
table until the consumer calls its deleter, or until the capsule dies
unconsumed; the table entry keeps the GPUArray (and so its memory) alive.

import_(): calls the producer's __dlpack__, renames the capsule "used_..."
as the protocol asks, and returns a GPUArray whose base calls the
producer's deleter when the array dies.
"""

from typing import Any
import ctypes
import threading

import numpy as np

kDLCUDA, kDLCUDAHost, kDLCUDAManaged = 2, 3, 13
_CODES = {"i": 0, "u": 1, "f": 2, "c": 5, "b": 6}
_KINDS = {0: "i", 1: "u", 2: "f", 5: "c", 6: "b"}
_BITS = {"i": (8, 16, 32, 64), "u": (8, 16, 32, 64), "f": (16, 32, 64), "c": (64, 128), "b": (8,)}
_KIND_NAMES = {"i": "int", "u": "uint", "f": "float", "c": "complex", "b": "bool"}
_MAX_NDIM = 64


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


_Deleter = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


class DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", _Deleter)]


class DLPackVersion(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class DLManagedTensorVersioned(ctypes.Structure):
    _fields_ = [
        ("version", DLPackVersion),
        ("manager_ctx", ctypes.c_void_p),
        ("deleter", _Deleter),
        ("flags", ctypes.c_uint64),
        ("dl_tensor", DLTensor),
    ]


_api = ctypes.pythonapi
# the destructor gets the dying capsule as a raw pointer: wrapping it in a
# py_object would take a reference to an object being deallocated
_CapsuleDestructor = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
_api.PyCapsule_New.restype = ctypes.py_object
_api.PyCapsule_New.argtypes = [ctypes.c_void_p, ctypes.c_char_p, _CapsuleDestructor]
_api.PyCapsule_IsValid.restype = ctypes.c_int
_api.PyCapsule_IsValid.argtypes = [ctypes.py_object, ctypes.c_char_p]
_api.PyCapsule_GetPointer.restype = ctypes.c_void_p
_api.PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
_api.PyCapsule_SetName.restype = ctypes.c_int
_api.PyCapsule_SetName.argtypes = [ctypes.py_object, ctypes.c_char_p]

_raw_is_valid = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p)(
    ("PyCapsule_IsValid", _api)
)
_raw_get_pointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", _api)
)

_NAME = b"dltensor"
_NAME_V = b"dltensor_versioned"
_USED = b"used_dltensor"
_USED_V = b"used_dltensor_versioned"

_lock = threading.Lock()
_live: dict[Any, Any] = {}  # manager_ctx -> (struct, shape, strides, array)
_next = [1]


def _release(key):
    with _lock:
        _live.pop(key, None)


@_Deleter
def _deleter(ptr):
    # ptr: the DLManagedTensor[Versioned]; manager_ctx is at a known offset
    try:
        for offset in (
            DLManagedTensor.manager_ctx.offset,
            DLManagedTensorVersioned.manager_ctx.offset,
        ):
            key = ctypes.c_void_p.from_address(ptr + offset).value
            with _lock:
                entry = _live.get(key)
            if entry is not None and ctypes.addressof(entry[0]) == ptr:
                _release(key)
                return
    except Exception:  # never raise into C
        pass


@_CapsuleDestructor
def _capsule_destructor(capsule):
    try:
        for name in (_NAME, _NAME_V):
            if _raw_is_valid(capsule, name):
                # never consumed: we still own the tensor
                _deleter(_raw_get_pointer(capsule, name))
                return
    except Exception:
        pass


def _dl_dtype(dtype):
    code = _CODES.get(dtype.kind)
    if code is None or dtype.fields is not None:
        raise BufferError("DLPack cannot describe dtype %s" % dtype)
    return DLDataType(code, dtype.itemsize * 8, 1)


def _element_strides(a):
    """a's strides in elements: DLPack has no byte strides, so a view whose
    byte strides are not multiples of its item size cannot be said."""
    out = []
    for s in a.strides:
        if s % a.itemsize:
            raise BufferError(
                "DLPack strides count elements: an array of %d-byte items with "
                "byte strides %r (not multiples of the item size) cannot be "
                "exported; copy it first (a.copy())" % (a.itemsize, a.strides)
            )
        out.append(s // a.itemsize)
    return out


def export(a, stream=None, max_version=None, dl_device=None, copy=None):
    from pygpu import driver as drv
    from pygpu import gpuarray

    try:
        # freed memory and extent (any context: the device id says where)
        gpuarray._check_operands("__dlpack__", (a,), ctx=None)
    except (drv.LogicError, ValueError) as e:
        raise BufferError(str(e)) from e
    elements = _element_strides(a)
    _dl_dtype(a.dtype)
    if max_version is not None:
        try:
            max_version = tuple(int(v) for v in max_version)
            if len(max_version) != 2:
                raise ValueError
        except (TypeError, ValueError):
            raise TypeError(
                "__dlpack__: max_version must be a (major, minor) tuple of ints, "
                "not %r" % (max_version,)
            ) from None
    dev = a.__dlpack_device__()
    if dl_device is not None and tuple(dl_device) != dev:
        raise BufferError(
            "the array is on device %r; it cannot be exported to %r without "
            "a copy" % (dev, tuple(dl_device))
        )
    if copy:
        raise BufferError("__dlpack__(copy=True) is not supported: copy the array first (a.copy())")
    if stream is not None and stream not in (-1, 1):
        if stream == 0:
            raise ValueError("__dlpack__: stream 0 is ambiguous and not allowed for CUDA")
        ev = drv.Event()
        ev.record(drv.Stream.null())
        s = drv.Stream.per_thread() if stream == 2 else drv.Stream.from_handle(stream)
        s.wait_for_event(ev)
    versioned = max_version is not None and max_version[0] >= 1
    nd = a.ndim
    shape = (ctypes.c_int64 * _max1(nd))(*a.shape)
    strides = (ctypes.c_int64 * _max1(nd))(*elements)
    t = DLTensor(
        a.ptr or None,
        DLDevice(*dev),
        nd,
        _dl_dtype(a.dtype),
        ctypes.cast(shape, ctypes.POINTER(ctypes.c_int64)),
        ctypes.cast(strides, ctypes.POINTER(ctypes.c_int64)),
        0,
    )
    with _lock:
        key = _next[0]
        _next[0] += 1
    if versioned:
        m = DLManagedTensorVersioned(DLPackVersion(1, 0), key, _deleter, 0, t)
        name = _NAME_V
    else:
        m = DLManagedTensor(t, key, _deleter)
        name = _NAME
    with _lock:
        _live[key] = (m, shape, strides, a)
    return _api.PyCapsule_New(ctypes.addressof(m), name, _capsule_destructor)


def _max1(n):
    return n if n > 0 else 1


class _Owner:
    """Calls the producer's deleter when the last view of its tensor dies;
    holds the producer's object too."""

    def __init__(self, obj, ptr, deleter):
        self.obj = obj
        self._ptr = ptr
        self._deleter = deleter

    def __del__(self):
        d, self._deleter = self._deleter, None
        if d:
            try:
                d(self._ptr)
            except Exception:
                pass


def import_(obj):
    from pygpu import gpuarray

    dev = getattr(obj, "__dlpack_device__", None)
    if dev is not None:
        dtype_, _ = dev()
        if int(dtype_) not in (kDLCUDA, kDLCUDAManaged, kDLCUDAHost):
            raise BufferError(
                "the DLPack tensor is not in CUDA memory (device type %d)" % int(dtype_)
            )
    try:
        capsule = obj.__dlpack__(stream=1, max_version=(1, 0))
    except TypeError:
        try:
            capsule = obj.__dlpack__(stream=1)
        except TypeError:
            capsule = obj.__dlpack__()
    if _api.PyCapsule_IsValid(capsule, _NAME_V):
        ptr = _api.PyCapsule_GetPointer(capsule, _NAME_V)
        m = DLManagedTensorVersioned.from_address(ptr)
        if m.version.major > 1:
            raise BufferError(
                "DLPack version %d.%d is newer than pygpu understands"
                % (m.version.major, m.version.minor)
            )
        t = m.dl_tensor
        used = _USED_V
    elif _api.PyCapsule_IsValid(capsule, _NAME):
        ptr = _api.PyCapsule_GetPointer(capsule, _NAME)
        m = DLManagedTensor.from_address(ptr)
        t = m.dl_tensor
        used = _USED
    else:
        raise BufferError("__dlpack__() did not return an unused DLPack capsule")
    if t.device.device_type not in (kDLCUDA, kDLCUDAManaged, kDLCUDAHost):
        raise BufferError(
            "the DLPack tensor is not in CUDA memory (device type %d)" % t.device.device_type
        )
    if t.device.device_type == kDLCUDA:
        from pygpu import driver as drv

        ctx = drv.Context.get_current()
        if ctx is not None and ctx.device.ordinal != t.device.device_id:
            raise BufferError(
                "the DLPack tensor is on CUDA device %d but the current context "
                "is on device %d: make device %d's context current to use it "
                "there, or copy it" % (t.device.device_id, ctx.device.ordinal, t.device.device_id)
            )
    if t.dtype.lanes != 1 or t.dtype.code not in _KINDS:
        raise BufferError(
            "DLPack dtype (code %d, %d bits, %d lanes) has no NumPy dtype"
            % (t.dtype.code, t.dtype.bits, t.dtype.lanes)
        )
    kind = _KINDS[t.dtype.code]
    bits = t.dtype.bits
    if bits not in _BITS[kind]:
        raise BufferError(
            "DLPack dtype (code %d, %d bits) is not one pygpu has: %s takes %s "
            "bits" % (t.dtype.code, bits, _KIND_NAMES[kind], ", ".join(str(b) for b in _BITS[kind]))
        )
    dtype = np.dtype("?" if kind == "b" else "%s%d" % (kind, bits // 8))
    nd = t.ndim
    if not 0 <= nd <= _MAX_NDIM:
        raise BufferError("DLPack tensor has %d dimensions (pygpu takes 0 to %d)" % (nd, _MAX_NDIM))
    if nd and not t.shape:
        raise BufferError("DLPack tensor of %d dimensions has no shape (a NULL pointer)" % nd)
    shape = tuple(t.shape[k] for k in range(nd))
    if any(n < 0 for n in shape):
        raise BufferError("DLPack tensor has a negative dimension: shape %r" % (shape,))
    if t.strides:
        strides = tuple(t.strides[k] * dtype.itemsize for k in range(nd))
    else:
        strides = gpuarray._c_strides(dtype.itemsize, shape)
    data = (t.data or 0) + t.byte_offset
    size = 1
    for n in shape:
        size *= n
    if size and not data:
        raise BufferError("DLPack tensor of shape %r has a NULL data pointer" % (shape,))
    _api.PyCapsule_SetName(capsule, used)
    deleter = m.deleter
    owner = _Owner(obj, ptr, deleter if ctypes.cast(deleter, ctypes.c_void_p).value else None)
    return gpuarray._new(
        gpuarray.GPUArray,
        shape,
        dtype,
        strides,
        data if (data or size) else None,
        owner,
        gpuarray._default_allocator,
        size,
        gpuarray._is_c(shape, strides, dtype.itemsize),
        gpuarray._is_f(shape, strides, dtype.itemsize),
    )
