"""The CUDA driver stand-in: a fake libcuda for tests on machines without a GPU.

The stand-in (csrc/fake_*.c and their shared csrc/fakecuda.h, shipped
inside the package, built into one library) implements every
driver entry point pygpu resolves, backed by host memory: allocations,
copies, modules from PTX (their kernels' parameter layouts), streams, events
and contexts behave; launches are checked and recorded but run no kernel;
CUDA graphs are node lists that capture records and a launch replays.
It injects failures on demand, so error paths can be tested without a GPU.

    from pygpu.testing import standin
    path = standin.build()          # compiled once per source, in a cache dir
    # run a process with PYGPU_LIBCUDA=path, or: pytest --pygpu-standin

build() compiles it with the system C compiler ($CC, else cc) against the
CUDA headers (cuda.h, cudaTypedefs.h) found in $PYGPU_CUDA_INCLUDE,
$CUDA_HOME/include, $CUDA_PATH/include, pygpu's own header search, or
/usr/local/cuda/include, into $PYGPU_STANDIN_DIR (default: the pygpu cache
directory's standin/ folder) under a name that is a hash of everything that
went into it, so a changed source or flag builds a new library and a stale
one is never loaded.

StandIn() is the control side, through ctypes, of the stand-in loaded in
this process: failure injection (also sticky, as after an illegal address),
call counts and traces, live-handle counts and the bytes of the last launch.
"""

import ctypes
import glob
import hashlib
import os
import subprocess
import sys
import tempfile
from collections import namedtuple

__all__ = [
    "SOURCE",
    "SOURCES",
    "LIBNAME",
    "KINDS",
    "Launch",
    "StandIn",
    "StandInBuildError",
    "build",
    "active",
    "include_dir",
    "default_dir",
    "STICKY_CODES",
]

CSRC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "csrc")
#: the C files compiled into the one library: every csrc/*.c, by area
#: (fake_core.c, fake_device.c, fake_memory.c...), mirroring src/'s areas
SOURCES = sorted(glob.glob(os.path.join(CSRC, "*.c")))
#: the file with the library's entry points (cuInit, cuGetProcAddress_v2)
SOURCE = os.path.join(CSRC, "fake_core.c")
#: what a build depends on: the sources and the headers they include
#: (fakecuda.h; cuda_api.h and cuda_enums.h, links to src/core/)
DEPENDS = SOURCES + sorted(glob.glob(os.path.join(CSRC, "*.h")))
LIBNAME = "libfakecuda.so"

KINDS = (
    "contexts",
    "streams",
    "events",
    "modules",
    "device",
    "managed",
    "host",
    "registered",
    "arrays",
    "textures",
    "surfaces",
    "ipc",
    "pools",
    "vmm",
    "reservations",
)

#: CUresult codes after which a real context is unusable (the fault is sticky).
STICKY_CODES = {
    700: "CUDA_ERROR_ILLEGAL_ADDRESS",
    702: "CUDA_ERROR_LAUNCH_TIMEOUT",
    710: "CUDA_ERROR_ASSERT",
    714: "CUDA_ERROR_HARDWARE_STACK_ERROR",
    715: "CUDA_ERROR_ILLEGAL_INSTRUCTION",
    716: "CUDA_ERROR_MISALIGNED_ADDRESS",
    717: "CUDA_ERROR_INVALID_ADDRESS_SPACE",
    718: "CUDA_ERROR_INVALID_PC",
    719: "CUDA_ERROR_LAUNCH_FAILED",
    214: "CUDA_ERROR_ECC_UNCORRECTABLE",
}

Launch = namedtuple("Launch", "name grid block cluster shared stream cooperative pdl params")


class StandInBuildError(RuntimeError):
    """The stand-in could not be compiled (no C compiler, no cuda.h)."""


def include_dir():
    """The directory holding cuda.h that the stand-in is compiled against."""
    if os.environ.get("PYGPU_CUDA_INCLUDE"):
        return os.environ["PYGPU_CUDA_INCLUDE"]
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(var):
            return os.path.join(os.environ[var], "include")
    try:
        from pygpu import _loader

        for d in _loader.cuda_include_dirs():
            if os.path.isfile(os.path.join(d, "cuda.h")):
                return d
    except Exception:  # an older or partial pygpu: fall back to the usual place
        pass
    return "/usr/local/cuda/include"


def default_dir():
    """$PYGPU_STANDIN_DIR, else <pygpu cache directory>/standin."""
    d = os.environ.get("PYGPU_STANDIN_DIR")
    if d:
        return d
    base = os.environ.get("PYGPU_CACHE_DIR")
    if not base:
        base = os.path.join(
            os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"),
            "pygpu",
        )
    return os.path.join(base, "standin")


def _command(out, extra):
    cc = os.environ.get("CC", "cc")
    return [
        cc,
        "-shared",
        "-fPIC",
        "-O1",
        "-g",
        "-std=gnu11",
        "-Wall",
        "-Wextra",
        "-Wno-unused-parameter",
        "-Wno-unused-variable",
        "-Werror=incompatible-pointer-types",
        "-fvisibility=hidden",
        "-I",
        include_dir(),
        "-o",
        out,
        *SOURCES,
        "-lpthread",
        *extra,
    ]


def _compile(out, extra):
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    fd, tmp = tempfile.mkstemp(
        dir=os.path.dirname(os.path.abspath(out)), prefix=".tmp-", suffix=".so"
    )
    os.close(fd)
    cmd = _command(tmp, extra)
    try:
        r = subprocess.run(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True
        )
    except OSError as e:
        os.unlink(tmp)
        raise StandInBuildError(
            "cannot run the C compiler %r to build the driver stand-in: %s (set CC)" % (cmd[0], e)
        ) from None
    if r.returncode != 0:
        os.unlink(tmp)
        raise StandInBuildError(
            "building the driver stand-in failed (%s; cuda.h looked for "
            "in %s, set PYGPU_CUDA_INCLUDE or CUDA_HOME):\n%s"
            % (" ".join(cmd[:1]), include_dir(), r.stdout.strip())
        )
    os.replace(tmp, out)  # atomic: a concurrent build or reader sees all or nothing


def build(out=None, cflags=None):
    """Compile the stand-in if needed; returns the library's path.

    out=None: a content-addressed file in default_dir() (its name hashes
    the sources, the flags, the compiler and the include directory).  With
    an explicit out, the file is rebuilt when it is older than the sources
    or was built with other flags or from another set of files (its
    out.flags stamp records both).  cflags (default $FAKECUDA_CFLAGS) adds
    compiler flags, e.g. the sanitizers'.
    """
    extra = (cflags if cflags is not None else os.environ.get("FAKECUDA_CFLAGS", "")).split()
    if out is None:
        h = hashlib.sha256()
        for p in DEPENDS:
            with open(p, "rb") as f:
                h.update(os.path.basename(p).encode() + b"\0" + hashlib.sha256(f.read()).digest())
        for part in [os.environ.get("CC", "cc"), include_dir()] + extra:
            h.update(part.encode() + b"\0")
        out = os.path.join(default_dir(), "fakecuda-%s" % h.hexdigest()[:20], LIBNAME)
        if not os.path.exists(out):
            _compile(out, extra)
        return out
    stamp = out + ".flags"
    # the flags, then the files: a file added or removed rebuilds too
    want = " ".join(extra) + "\n" + " ".join(os.path.basename(p) for p in DEPENDS)
    try:
        with open(stamp) as f:
            same = f.read() == want
        fresh = same and all(os.path.getmtime(out) >= os.path.getmtime(d) for d in DEPENDS)
    except OSError:
        fresh = False
    if not fresh:
        _compile(out, extra)
        with open(stamp, "w") as f:
            f.write(want)
    return out


def active():
    """True when pygpu is pointed at the stand-in (PYGPU_LIBCUDA)."""
    return os.path.basename(os.environ.get("PYGPU_LIBCUDA", "")) == LIBNAME


class StandIn:
    """The control side of the stand-in loaded in this process (the library
    PYGPU_LIBCUDA names, which pygpu loaded or will load)."""

    def __init__(self, path=None):
        path = path or os.environ.get("PYGPU_LIBCUDA", "")
        if os.path.basename(path) != LIBNAME:
            raise RuntimeError(
                "not running against the driver stand-in (PYGPU_LIBCUDA=%r); "
                "use pytest --pygpu-standin or build() and set PYGPU_LIBCUDA" % path
            )
        lib = self.lib = ctypes.CDLL(path)
        lib.fakecuda_fail.argtypes = [ctypes.c_char_p, ctypes.c_long, ctypes.c_int]
        lib.fakecuda_fail_sticky.argtypes = [ctypes.c_char_p, ctypes.c_long, ctypes.c_int]
        lib.fakecuda_calls.argtypes = [ctypes.c_char_p]
        lib.fakecuda_calls.restype = ctypes.c_long
        lib.fakecuda_live.argtypes = [ctypes.c_char_p]
        lib.fakecuda_live.restype = ctypes.c_long
        lib.fakecuda_trace_get.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
        lib.fakecuda_trace_get.restype = ctypes.c_size_t
        lib.fakecuda_last_launch.restype = ctypes.c_size_t
        lib.fakecuda_delay.argtypes = [ctypes.c_char_p, ctypes.c_long]
        lib.fakecuda_thread_last_params.restype = ctypes.c_size_t
        lib.fakecuda_thread_last_params.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
        lib.fakecuda_last_launch.argtypes = [
            ctypes.c_char_p,
            ctypes.c_size_t,
            ctypes.POINTER(ctypes.c_uint),
            ctypes.POINTER(ctypes.c_uint),
            ctypes.POINTER(ctypes.c_void_p),
            ctypes.POINTER(ctypes.c_int),
            ctypes.c_char_p,
            ctypes.c_size_t,
        ]

    def fail(self, name, nth=1, code=999, sticky=False):
        """Make the nth next call of `name` ('*': any) return `code`.  With
        sticky=True every later call returns it too (but device lookups and
        the context stack), as after a kernel's illegal address: the process
        cannot use the driver again."""
        fn = self.lib.fakecuda_fail_sticky if sticky else self.lib.fakecuda_fail
        if fn(name.encode(), nth, code) != 0:
            raise ValueError("the stand-in has no entry point %r" % name)

    def sticky(self):
        """The sticky error code in force, 0 if none."""
        return self.lib.fakecuda_sticky()

    def cancel(self):
        """Cancel a pending injected failure and any delay (a sticky error
        in force stays)."""
        self.lib.fakecuda_fail(b"*", 0, 0)
        self.lib.fakecuda_delay(b"*", 0)

    def delay(self, name, ms):
        """Make every later call of `name` sleep ms milliseconds where the
        driver would be busy (0: no more)."""
        if self.lib.fakecuda_delay(name.encode(), ms) != 0:
            raise ValueError("the stand-in has no entry point %r" % name)

    def thread_last_params(self):
        """The parameter bytes of the calling thread's last launch."""
        buf = ctypes.create_string_buffer(4096)
        n = self.lib.fakecuda_thread_last_params(buf, 4096)
        return buf.raw[:n]

    def fired(self):
        return bool(self.lib.fakecuda_fired())

    def deinit(self, on=True):
        self.lib.fakecuda_deinit(1 if on else 0)

    def calls(self, name=None):
        return self.lib.fakecuda_calls(name.encode() if name else None)

    def live(self):
        """Live handles by kind: contexts, streams, events, modules, device,
        managed, host, registered."""
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

    def last_launch(self):
        """The last launch: kernel name, grid, block, cluster, shared bytes,
        stream handle, flags and the packed parameter bytes."""
        name = ctypes.create_string_buffer(256)
        dims = (ctypes.c_uint * 9)()
        shared = ctypes.c_uint()
        stream = ctypes.c_void_p()
        flags = ctypes.c_int()
        params = ctypes.create_string_buffer(4096)
        n = self.lib.fakecuda_last_launch(
            name,
            256,
            dims,
            ctypes.byref(shared),
            ctypes.byref(stream),
            ctypes.byref(flags),
            params,
            4096,
        )
        return Launch(
            name.value.decode(),
            tuple(dims[0:3]),
            tuple(dims[3:6]),
            tuple(dims[6:9]),
            shared.value,
            stream.value or 0,
            bool(flags.value & 1),
            bool(flags.value & 2),
            params.raw[:n],
        )


if __name__ == "__main__":
    if sys.argv[1:2] == ["build"] and len(sys.argv) <= 3:
        print(build(*sys.argv[2:3]))
    else:
        sys.exit("usage: python -m pygpu.testing.standin build [PATH]")
