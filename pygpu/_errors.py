"""Exceptions of the Python layer that sit below both pygpu.driver and
pygpu.compiler, so neither imports the other to name them (the layers are
_driver <- _errors <- driver, compiler; no compiler <-> driver cycle)."""
from pygpu._driver import Error

__all__ = ["CompileError"]


class CompileError(Error):
    """NVRTC rejected the source.  .log is NVRTC's log, .source the source it
    compiled, .options the options; the message shows the failing lines.
    The same class is pygpu.driver.CompileError (PyCUDA's place for it)."""

    def __init__(self, message, log="", source="", options=()):
        super().__init__(message)
        self.log = log
        self.source = source
        self.options = list(options)
        self.routine = "nvrtcCompileProgram"


CompileError.__module__ = "pygpu.compiler"
