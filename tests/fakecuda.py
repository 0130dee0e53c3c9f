"""Build and drive the CUDA driver stand-in (tests/standin/fakecuda.c).

    python3 tests/fakecuda.py build [PATH]    # prints the library's path

The library is loaded by pygpu through PYGPU_LIBCUDA; this module reaches the
same library through ctypes for what only a test needs: failure injection,
call traces, live-handle counts and the bytes of the last launch.
"""
import ctypes
import os
import subprocess
import sys
from collections import namedtuple

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
SOURCE = os.path.join(HERE, "standin", "fakecuda.c")
DEPENDS = [SOURCE, os.path.join(ROOT, "src", "cuda_api.h"), os.path.join(ROOT, "src", "cuda_enums.h")]
DEFAULT_LIB = os.path.join(ROOT, "build", "standin", "libfakecuda.so")
LIBNAME = "libfakecuda.so"

KINDS = ("contexts", "streams", "events", "modules", "device", "managed", "host", "registered")

Launch = namedtuple("Launch", "name grid block cluster shared stream cooperative pdl params")


def include_dir():
    for var in ("PYGPU_CUDA_INCLUDE",):
        if os.environ.get(var):
            return os.environ[var]
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(var):
            return os.path.join(os.environ[var], "include")
    return "/usr/local/cuda/include"


def build(out=DEFAULT_LIB, cflags=None):
    """Compile the stand-in if it is missing or older than its sources;
    returns its path.  FAKECUDA_CFLAGS adds flags (the sanitizer build)."""
    extra = (cflags if cflags is not None else os.environ.get("FAKECUDA_CFLAGS", "")).split()
    stamp = out + ".flags"
    want = " ".join(extra)
    fresh = (os.path.exists(out) and os.path.exists(stamp)
             and open(stamp).read() == want
             and all(os.path.getmtime(out) >= os.path.getmtime(d) for d in DEPENDS))
    if fresh:
        return out
    os.makedirs(os.path.dirname(out), exist_ok=True)
    cc = os.environ.get("CC", "cc")
    cmd = [cc, "-shared", "-fPIC", "-O1", "-g", "-std=gnu11", "-Wall", "-Wextra",
           "-Wno-unused-parameter", "-Wno-unused-variable", "-Werror=incompatible-pointer-types",
           "-fvisibility=hidden", "-I", include_dir(), "-o", out + ".tmp", SOURCE,
           "-lpthread"] + extra
    subprocess.run(cmd, check=True)
    os.replace(out + ".tmp", out)
    with open(stamp, "w") as f:
        f.write(want)
    return out


def active():
    """True when pygpu is pointed at the stand-in (PYGPU_LIBCUDA)."""
    return os.path.basename(os.environ.get("PYGPU_LIBCUDA", "")) == LIBNAME


class StandIn:
    """The stand-in loaded in this process (the one pygpu uses)."""

    def __init__(self, path=None):
        path = path or os.environ["PYGPU_LIBCUDA"]
        lib = self.lib = ctypes.CDLL(path)
        lib.fakecuda_fail.argtypes = [ctypes.c_char_p, ctypes.c_long, ctypes.c_int]
        lib.fakecuda_delay.argtypes = [ctypes.c_char_p, ctypes.c_long]
        lib.fakecuda_calls.argtypes = [ctypes.c_char_p]
        lib.fakecuda_calls.restype = ctypes.c_long
        lib.fakecuda_live.argtypes = [ctypes.c_char_p]
        lib.fakecuda_live.restype = ctypes.c_long
        lib.fakecuda_trace_get.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
        lib.fakecuda_trace_get.restype = ctypes.c_size_t
        lib.fakecuda_thread_last_params.restype = ctypes.c_size_t
        lib.fakecuda_thread_last_params.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
        lib.fakecuda_last_launch.restype = ctypes.c_size_t
        lib.fakecuda_last_launch.argtypes = [
            ctypes.c_char_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_uint),
            ctypes.POINTER(ctypes.c_uint), ctypes.POINTER(ctypes.c_void_p),
            ctypes.POINTER(ctypes.c_int), ctypes.c_char_p, ctypes.c_size_t]

    def fail(self, name, nth=1, code=999):
        """Make the nth next call of `name` ('*': any) return `code`."""
        if self.lib.fakecuda_fail(name.encode(), nth, code) != 0:
            raise ValueError("the stand-in has no entry point %r" % name)

    def cancel(self):
        self.lib.fakecuda_fail(b"*", 0, 0)
        self.lib.fakecuda_delay(b"*", 0)

    def delay(self, name, ms):
        """Make every later call of `name` sleep ms milliseconds where the
        driver would be busy (0: no more)."""
        if self.lib.fakecuda_delay(name.encode(), ms) != 0:
            raise ValueError("the stand-in has no entry point %r" % name)

    def fired(self):
        return bool(self.lib.fakecuda_fired())

    def deinit(self, on=True):
        self.lib.fakecuda_deinit(1 if on else 0)

    def calls(self, name=None):
        return self.lib.fakecuda_calls(name.encode() if name else None)

    def live(self):
        return {k: self.lib.fakecuda_live(k.encode()) for k in KINDS}

    def stale(self):
        return self.lib.fakecuda_live(b"stale")

    def forget_registrations(self):
        """Drop leaked host registrations (after a provoked failed unregister)."""
        return self.lib.fakecuda_forget_registrations()

    def reaped(self):
        return self.lib.fakecuda_live(b"reaped")

    def launches(self):
        return self.lib.fakecuda_live(b"launches")

    def trace(self, fn):
        """Run fn(); return (its result, the entry points it called)."""
        self.lib.fakecuda_trace(1)
        try:
            result = fn()
        finally:
            self.lib.fakecuda_trace(0)
        n = self.lib.fakecuda_trace_get(None, 0)
        buf = ctypes.create_string_buffer(n + 1)
        self.lib.fakecuda_trace_get(buf, n + 1)
        return result, buf.value.decode().split()

    def thread_last_params(self):
        """The parameter bytes of the calling thread's last launch."""
        buf = ctypes.create_string_buffer(4096)
        n = self.lib.fakecuda_thread_last_params(buf, 4096)
        return buf.raw[:n]

    def last_launch(self):
        name = ctypes.create_string_buffer(256)
        dims = (ctypes.c_uint * 9)()
        shared = ctypes.c_uint()
        stream = ctypes.c_void_p()
        flags = ctypes.c_int()
        params = ctypes.create_string_buffer(4096)
        n = self.lib.fakecuda_last_launch(name, 256, dims, ctypes.byref(shared),
                                          ctypes.byref(stream), ctypes.byref(flags), params, 4096)
        return Launch(name.value.decode(), tuple(dims[0:3]), tuple(dims[3:6]), tuple(dims[6:9]),
                      shared.value, stream.value or 0, bool(flags.value & 1),
                      bool(flags.value & 2), params.raw[:n])


if __name__ == "__main__":
    if sys.argv[1:2] == ["build"] and len(sys.argv) <= 3:
        print(build(*sys.argv[2:3]))
    else:
        sys.exit("usage: python3 tests/fakecuda.py build [PATH]")
