"""Exceptions of the Python layer that sit below both pygpu.driver and
pygpu.compiler, so neither imports the other to name them (the layers are
_driver <- _errors <- driver, compiler; no compiler <-> driver cycle)."""

from pygpu._driver import Error

__all__ = ["CompileError"]


class CompileError(Error):
    """The compiler rejected the source.

    Constructed as PyCUDA's: ``CompileError(msg, command_line, stdout=None,
    stderr=None)``, with those four attributes (``.stderr`` is NVRTC's log,
    ``.command_line`` the options NVRTC was given, as a list of str, and
    ``.stdout`` None: NVRTC prints nothing else).  pygpu's own: ``.log``
    (the same log), ``.source`` (the user's source, without SourceModule's
    ``extern "C"`` wrapper), ``.options`` (= ``.command_line``), ``.code``
    (nvrtcResult's number), ``.name`` and ``.routine``.  ``str()`` is
    PyCUDA's (the message, then ``[command: ...]``, ``[stdout: ...]`` and
    ``[stderr: ...]``); pygpu's message (``.msg``) already holds the log with
    the failing lines of the source, numbered as the user wrote them, so the
    log is not shown a second time.  The same class is
    pygpu.driver.CompileError (PyCUDA's place for it)."""

    def __init__(
        self,
        msg,
        command_line=None,
        stdout=None,
        stderr=None,
        *,
        log=None,
        source="",
        code=None,
        name=None,
        show_stderr=True,
    ):
        super().__init__(msg)
        self.msg = msg
        self.command_line = list(command_line) if command_line is not None else None
        self.stdout = stdout
        self.stderr = stderr
        self.log = stderr if log is None else log
        self.source = source
        self.options = list(self.command_line or ())
        self.code = code
        self.name = name
        self.routine = "nvrtcCompileProgram"
        self._show_stderr = show_stderr

    def __str__(self):
        result = str(self.msg)
        if self.command_line:
            try:
                result += "\n[command: %s]" % " ".join(str(c) for c in self.command_line)
            except TypeError:
                pass
        if self.stdout:
            result += "\n[stdout:\n%s]" % self.stdout
        if self.stderr and self._show_stderr:
            result += "\n[stderr:\n%s]" % self.stderr
        return result

    def __reduce__(self):
        return (
            _rebuild_compile_error,
            (type(self), self.msg, self.command_line, self.stdout, self.stderr, self.__dict__),
        )


def _rebuild_compile_error(cls, msg, command_line, stdout, stderr, state):
    e = cls.__new__(cls)
    CompileError.__init__(e, msg, command_line, stdout, stderr)
    e.__dict__.update(state)
    return e


CompileError.__module__ = "pygpu.compiler"


class LinkError(Error):
    """A link failed: an undefined symbol, an input the linker rejects, LTO-IR
    without nvJitLink.  .log is the linker's error log, .info_log its info
    log, .routine the call that failed (nvJitLinkComplete, cuLinkComplete,
    ...), .code its result code and .name that code's name (for nvJitLink,
    ``NVJITLINK_ERROR_*``), .input the name of the input it failed on or
    None.  pygpu.linking.LinkError is this class."""

    def __init__(self, message, log="", info_log="", routine="", code=None, name=None, input=None):
        super().__init__(message)
        self.log = log
        self.info_log = info_log
        self.routine = routine
        self.code = code
        self.name = name
        self.input = input


LinkError.__module__ = "pygpu.linking"
__all__.append("LinkError")
