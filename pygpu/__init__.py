"""pygpu: CUDA from Python the way PyCUDA meant it.

    import pygpu.driver as cuda        # contexts, memory, streams, launches
    from pygpu.compiler import SourceModule

Importing pygpu loads no CUDA library and touches no GPU.
"""
__version__ = "0.1.0"

from pygpu import driver  # noqa: E402,F401

__all__ = ["driver", "__version__"]

# PyCUDA's version names (pycuda.VERSION), for pygpu's own version
VERSION = tuple(int(p) for p in __version__.split(".")[:3] if p.isdigit())
VERSION_STATUS = ""
VERSION_TEXT = ".".join(str(x) for x in VERSION) + VERSION_STATUS
__all__ += ["VERSION", "VERSION_STATUS", "VERSION_TEXT"]

def load_ipython_extension(ipython):
    """``%load_ext pygpu``: the %%cuda and %cuda_timeit magics and rich
    displays (pygpu/ipython.py)."""
    from pygpu import ipython as _ipython
    _ipython.load_ipython_extension(ipython)


def unload_ipython_extension(ipython):
    from pygpu import ipython as _ipython
    _ipython.unload_ipython_extension(ipython)
