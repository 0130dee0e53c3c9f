"""pygpu: CUDA from Python the way PyCUDA meant it.

    import pygpu.driver as cuda        # contexts, memory, streams, launches
    from pygpu.compiler import SourceModule

Importing pygpu loads no CUDA library and touches no GPU; ``import pygpu``
alone (as pytest's plugin loader does) does not even load the C extension
or NumPy: ``pygpu.driver`` is imported on first use.
"""

# The one place the version is written: pyproject.toml reads it from here
# ([tool.setuptools.dynamic]), python -m pygpu prints it.
__version__ = "0.1.0"

__all__ = ["driver", "__version__"]

# PyCUDA's version names (pycuda.VERSION), for pygpu's own version
VERSION = tuple(int(p) for p in __version__.split(".")[:3] if p.isdigit())
VERSION_STATUS = ""
VERSION_TEXT = ".".join(str(x) for x in VERSION) + VERSION_STATUS
__all__ += ["VERSION", "VERSION_STATUS", "VERSION_TEXT"]


def __getattr__(name):
    # pygpu.driver (and so pygpu._driver and NumPy) on first use
    if name == "driver":
        import importlib

        return importlib.import_module("pygpu.driver")
    raise AttributeError("module 'pygpu' has no attribute %r" % name)


def __dir__():
    return sorted(set(globals()) | {"driver"})


def load_ipython_extension(ipython):
    """``%load_ext pygpu``: the %%cuda and %cuda_timeit magics and rich
    displays (pygpu/ipython.py)."""
    from pygpu import ipython as _ipython

    _ipython.load_ipython_extension(ipython)


def unload_ipython_extension(ipython):
    from pygpu import ipython as _ipython

    _ipython.unload_ipython_extension(ipython)
