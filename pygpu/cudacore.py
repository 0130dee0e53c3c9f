"""Zero-copy exchange with NVIDIA's cuda.core (docs/interop.md).

cuda.core's objects come into pygpu as they are, no import of cuda.core
needed: a ``Buffer`` or ``StridedMemoryView`` wherever pygpu takes device
memory or an array (kernel arguments, ``memcpy_*``, ``gpuarray.asarray``,
``GPUArray(..., gpudata=buffer)``), a ``Stream`` wherever pygpu takes
``stream=`` (its ``__cuda_stream__``).

The other way, cuda.core takes pygpu's streams (``Stream.__cuda_stream__``)
in ``cuda.core.launch`` and its streams' ``wait``, and pygpu's arrays and
allocations in ``StridedMemoryView`` (DLPack with a consumer stream, or
``__cuda_array_interface__``).  cuda.core's ``launch`` takes only its own
``Buffer`` (or an int address) for a pointer parameter: :func:`as_buffer`
gives one over a pygpu array or allocation without copying, and keeps it
alive while the Buffer lives::

    from cuda.core import launch
    from pygpu import cudacore, gpuarray
    a = gpuarray.to_gpu(x)
    launch(stream, config, kernel, cudacore.as_buffer(a), np.int32(a.size))
"""

from __future__ import annotations

from typing import Any

from pygpu import _cudacore, gpuarray
from pygpu import driver as drv

__all__ = ["as_buffer", "as_view", "is_buffer", "is_view"]

INSTALL = "pip install cuda-core (NVIDIA's cuda.core; it needs cuda-bindings)"


def _core() -> Any:
    try:
        import cuda.core as core
    except ImportError as e:
        raise ImportError("pygpu.cudacore needs cuda.core (%s): %s" % (e, INSTALL)) from None
    return core


def is_buffer(obj: object) -> bool:
    """Whether pygpu reads obj as a cuda.core Buffer (its class, or a
    base, is named Buffer in a module under cuda.core)."""
    return _cudacore.kind(obj) == _cudacore.BUFFER


def is_view(obj: object) -> bool:
    """Whether pygpu reads obj as a cuda.core StridedMemoryView."""
    return _cudacore.kind(obj) == _cudacore.VIEW


def as_buffer(obj: object) -> Any:
    """A cuda.core ``Buffer`` over obj's device memory, without copying:
    obj is a pygpu DeviceAllocation, a contiguous GPUArray, or any device
    array pygpu takes (``__cuda_array_interface__``, DLPack, a cuda.core
    StridedMemoryView).  The Buffer's owner is obj: obj lives as long as
    the Buffer, which never frees the memory.  A cuda.core Buffer is
    returned as it is."""
    if is_buffer(obj):
        return obj
    if isinstance(obj, drv.DeviceAllocation):
        if obj.freed:
            raise drv.LogicError("as_buffer(): the DeviceAllocation was freed")
        ptr, size = int(obj), obj.size
    else:
        try:
            a = gpuarray.asarray(obj)
        except TypeError:
            raise TypeError(
                "as_buffer() takes a pygpu DeviceAllocation or GPUArray, or a device "
                "array (__cuda_array_interface__, __dlpack__, a cuda.core "
                "StridedMemoryView), not %s" % type(obj).__name__
            ) from None
        if not (a.flags.c_contiguous or a.flags.f_contiguous):
            raise ValueError(
                "as_buffer(): a Buffer is one range of bytes; this array (shape %r, "
                "strides %r) is not contiguous: copy it first (a.copy())" % (a.shape, a.strides)
            )
        ptr, size = a.ptr, a.nbytes
    return _core().Buffer.from_handle(ptr, size, owner=obj)


def _stream_ptr(stream: object) -> int:
    if stream is None:
        return -1  # cuda.core: no stream ordering
    if isinstance(stream, drv.Stream):
        # the null stream (handle 0) is the legacy default stream: 1 in
        # DLPack's and CAI's terms (0 is refused there as ambiguous)
        return int(stream.handle or 0) or 1
    f = getattr(stream, "__cuda_stream__", None)
    if f is not None:
        return int(f()[1])
    raise TypeError(
        "stream must be a pygpu Stream, an object with __cuda_stream__, or None, not %s"
        % type(stream).__name__
    )


def as_view(obj: object, stream: object = None) -> Any:
    """A cuda.core ``StridedMemoryView`` of a pygpu GPUArray (or any array
    cuda.core views: ``StridedMemoryView.from_any_interface``), ordered after the work pygpu queued before it on
    ``stream``, the stream the view will be used on (a pygpu or cuda.core
    Stream); ``stream=None`` asks for no ordering (cuda.core's
    ``stream_ptr=-1``)."""
    _core()
    from cuda.core.utils import StridedMemoryView

    ptr = _stream_ptr(stream)
    make = getattr(StridedMemoryView, "from_any_interface", None)
    if make is not None:  # cuda.core 1.x (the constructor is deprecated there)
        return make(obj, stream_ptr=ptr)
    return StridedMemoryView(obj, stream_ptr=ptr)
