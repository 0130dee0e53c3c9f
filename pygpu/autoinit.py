"""``import pygpu.autoinit`` makes a context current, like pycuda.autoinit.

It retains the primary context of device $PYGPU_DEVICE (default 0), the one
CuPy, PyTorch and cuda.core share, and pushes it on this thread.  Exports
``device`` and ``context``.
"""

import os

from pygpu import driver

__all__ = ["device", "context"]

driver.init()
device = driver.Device(int(os.environ.get("PYGPU_DEVICE", "0")))
context = device.retain_primary_context()
context.push()

from pygpu.tools import make_default_context  # noqa: E402,F401  (PyCUDA's autoinit has it)
