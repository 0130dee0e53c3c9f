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


class LinkError(Error):
    """A link failed: an undefined symbol, an input the linker rejects, LTO-IR
    without nvJitLink.  .log is the linker's error log, .info_log its info
    log, .routine the call that failed (nvJitLinkComplete, cuLinkComplete,
    ...), .code its result code and .name that code's name (for nvJitLink,
    ``NVJITLINK_ERROR_*``), .input the name of the input it failed on or
    None.  pygpu.linking.LinkError is this class."""

    def __init__(self, message, log="", info_log="", routine="", code=None, name=None,
                 input=None):
        super().__init__(message)
        self.log = log
        self.info_log = info_log
        self.routine = routine
        self.code = code
        self.name = name
        self.input = input


LinkError.__module__ = "pygpu.linking"
__all__.append("LinkError")
