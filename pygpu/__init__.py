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


class _MissingExtension:
    """The last finder on sys.meta_path, asked only for a module no other
    finder found: for pygpu._driver it raises an ImportError that says why
    the C extension is not there and what to do (pygpu/_extension.py),
    instead of the bare "cannot import name '_driver'" that a source tree
    without a build (a clone run after ``pip install .``) gives."""

    _pygpu_finder = True

    @staticmethod
    def find_spec(fullname, path=None, target=None):
        if fullname != __name__ + "._driver":
            return None
        from pygpu._extension import missing_extension_message

        raise ImportError(missing_extension_message(__path__[0]), name=fullname)


def _install_missing_extension_finder():
    import sys

    # one per process, also when pygpu is imported again (importlib.reload)
    sys.meta_path[:] = [f for f in sys.meta_path if not getattr(f, "_pygpu_finder", False)]
    sys.meta_path.append(_MissingExtension)


_install_missing_extension_finder()


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
