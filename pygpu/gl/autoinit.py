"""``import pygpu.gl.autoinit``: like pycuda.gl.autoinit, a new context for
OpenGL interop on the default device ($PYGPU_DEVICE, else 0), pushed on this
thread and popped at exit.  Exports ``context`` and ``device``.

Make the OpenGL context current first (as with PyCUDA): the CUDA context
must be on the GPU that runs it.
"""

import atexit

import pygpu.driver as cuda
import pygpu.gl as cudagl
from pygpu.tools import make_default_context

__all__ = ["context", "device"]

cuda.init()
if cuda.Device.count() < 1:
    raise cuda.CudaUnavailableError("pygpu.gl.autoinit: no CUDA device")

context = make_default_context(lambda dev: cudagl.make_context(dev))
device = context.get_device()


def _pop():
    try:
        cuda.Context.pop()
    except cuda.Error:
        pass


atexit.register(_pop)
