"""pygpu.gl: CUDA/OpenGL interop, shaped like pycuda.gl.

Port PyCUDA code by changing ``import pycuda.gl as cudagl`` to
``import pygpu.gl as cudagl``.  Importing it loads no GL library and touches
no GPU: the OpenGL objects are made by the caller (any GL binding: PyOpenGL,
moderngl, pyglet, or :mod:`pygpu.gl.egl` for a headless context), and
registered here by their GL names, with an OpenGL context current in the
calling thread.

- :class:`RegisteredBuffer` (a GL buffer object) and :class:`RegisteredImage`
  (a texture or renderbuffer) own a CUDA graphics resource, unregistered at
  ``unregister()`` or when the object dies.
- ``robj.map(stream=None)`` gives a :class:`RegisteredMapping`, which unmaps
  at ``unmap()``, at the end of a ``with`` block or when it dies; while mapped,
  ``device_ptr_and_size()`` is the buffer's device address (a kernel's pointer
  argument) and ``array(index, level)`` an image's :class:`pygpu.driver.Array`.
- :class:`BufferObject` / :class:`BufferObjectMapping` are PyCUDA's
  pre-CUDA-3.0 names, deprecated there as here; they work over the same
  graphics resources.
"""

import enum as _enum
import warnings as _warnings
from typing import Literal as _Literal

from pygpu import _driver
from pygpu import driver as _drv

RegisteredObject = _driver.RegisteredObject
RegisteredBuffer = _driver.RegisteredBuffer
RegisteredImage = _driver.RegisteredImage
RegisteredMapping = _driver.RegisteredMapping

__all__ = [
    "init",
    "make_context",
    "graphics_map_flags",
    "BufferObject",
    "BufferObjectMapping",
    "RegisteredBuffer",
    "RegisteredImage",
    "RegisteredMapping",
    "RegisteredObject",
]


class graphics_map_flags(_enum.IntEnum):
    """CUgraphicsMapResourceFlags: what CUDA does with a mapped resource
    (PyCUDA passes these as the registration flags; the values agree with
    :class:`pygpu.driver.graphics_register_flags`'s first three)."""

    NONE = 0
    READ_ONLY = 1
    WRITE_DISCARD = 2

    def __str__(self) -> str:
        return self.name


def init() -> None:
    """PyCUDA's ``gl_init()`` (cuGLInit), deprecated since CUDA 3.0: warns,
    then initialises the driver (:func:`pygpu.driver.init`).  Registration
    needs no special initialisation."""
    _warnings.warn(
        "gl_init() has been deprecated since CUDA 3.0 and PyCUDA 2011.1.",
        DeprecationWarning,
        stacklevel=2,
    )
    _drv.init()


def make_context(dev: "_drv.Device", flags: int = 0) -> "_drv.Context":
    """A new context on ``dev`` for GL interop, pushed on this thread (what
    PyCUDA's ``make_gl_context`` does; cuGLCtxCreate is, since CUDA 5, the
    plain cuCtxCreate, which this calls).  Any context works for interop,
    the primary one (``pygpu.autoinit``) too, as long as its device is the
    GPU that runs the OpenGL context."""
    if not isinstance(dev, _drv.Device):
        raise TypeError(
            "make_context(): dev must be a pygpu.driver.Device, not %s" % type(dev).__name__
        )
    return dev.make_context(flags)


class BufferObject:
    """PyCUDA's deprecated ``BufferObject(handle)``: a GL buffer object
    registered with CUDA (here over cuGraphicsGLRegisterBuffer, as
    :class:`RegisteredBuffer`).  Use :class:`RegisteredBuffer` in new code."""

    def __init__(self, handle: int) -> None:
        _warnings.warn(
            "buffer_object has been deprecated since CUDA 3.0 and PyCUDA 2011.1.",
            DeprecationWarning,
            stacklevel=2,
        )
        self._registered = RegisteredBuffer(handle)

    def handle(self) -> int:
        """The GL buffer name."""
        return self._registered.gl_handle()

    def unregister(self) -> None:
        """Unregister now (unmapping first); a second call is a LogicError."""
        self._registered.unregister()

    def map(self) -> "BufferObjectMapping":
        """Map for CUDA: a :class:`BufferObjectMapping`."""
        _warnings.warn(
            "map_buffer_object has been deprecated since CUDA 3.0 and PyCUDA 2011.1.",
            DeprecationWarning,
            stacklevel=2,
        )
        return BufferObjectMapping(self, self._registered.map())


class BufferObjectMapping:
    """PyCUDA's deprecated mapping of a :class:`BufferObject`: ``device_ptr()``,
    ``size()``, ``unmap()`` (also when it dies)."""

    def __init__(self, buffer_object: "BufferObject", mapping: "_drv.RegisteredMapping") -> None:
        if not isinstance(mapping, RegisteredMapping):
            raise TypeError("BufferObjectMapping is made by BufferObject.map()")
        self._buffer_object = buffer_object
        self._mapping = mapping
        self._ptr, self._size = mapping.device_ptr_and_size()

    def unmap(self) -> None:
        """Give the buffer back to OpenGL; a second call is a LogicError."""
        self._mapping.unmap()

    def device_ptr(self) -> int:
        """The mapped buffer's device address (an int)."""
        return self._ptr

    def size(self) -> int:
        """The mapped buffer's size in bytes."""
        return self._size

    def __enter__(self) -> "BufferObjectMapping":
        return self

    def __exit__(self, *exc: object) -> "_Literal[False]":
        if self._mapping.mapped:
            self._mapping.unmap()
        return False
