"""``import pygpu.autoprimaryctx`` makes a device's primary context current,
like pycuda.autoprimaryctx.

The device is $CUDA_DEVICE's, else the first one whose primary context can
be retained (pygpu.tools.make_default_context's choice); the context is
retained, pushed on this thread and popped at interpreter exit.  Exports
``device`` and ``context``.  (pygpu.autoinit uses the primary context
too: the two differ only in how the device is chosen.)
"""

import atexit

from pygpu import driver
from pygpu.tools import make_default_context

__all__ = ["device", "context", "make_default_context"]

driver.init()


def _retain_primary_context(dev):
    ctx = dev.retain_primary_context()
    ctx.push()
    return ctx


context = make_default_context(_retain_primary_context)
device = context.get_device()


def _finish_up():
    global context
    if context is None:
        return
    try:
        context.pop()
    except driver.Error:  # another pop came first, or the driver is gone
        pass
    context = None
    from pygpu.tools import clear_context_caches

    clear_context_caches()


atexit.register(_finish_up)
