"""Fat binaries through NVIDIA's nvFatbin library (CUDA 12.4 and later), for
PyCUDA's compile(..., target="fatbin").

NVRTC gives a cubin and PTX, not the fatbin container nvcc --fatbin writes;
nvFatbin packs them into one.  It is opened on first use with ctypes, from
the places NVRTC and nvJitLink are looked for: $PYGPU_NVFATBIN, the folder
of the NVRTC library in use (the same toolkit), NVIDIA's wheels on sys.path
(nvidia/cu13/lib, nvidia/nvfatbin/lib: pip install nvidia-nvfatbin),
$CONDA_PREFIX/lib, the system loader path, $CUDA_HOME and $CUDA_PATH,
/usr/local/cuda/lib64.  Where none opens, asking for a fatbin raises
CudaUnavailableError listing them; nothing else needs it.
"""

import ctypes
import glob
import os
import sys
import threading

from pygpu import _loader, driver

__all__ = ["candidates", "make_fatbin", "available"]

_SONAMES = ("libnvfatbin.so.13", "libnvfatbin.so.12", "libnvfatbin.so")
_WHEEL_DIRS = ("nvidia/cu13/lib", "nvidia/nvfatbin/lib", "nvidia/cu12/lib")

_lock = threading.Lock()
_lib = None


def candidates(environ=None, path=None):
    """The nvFatbin libraries to try, first match wins."""
    env = os.environ if environ is None else environ
    path = sys.path if path is None else path
    out = []
    if env.get("PYGPU_NVFATBIN"):
        out.append(env["PYGPU_NVFATBIN"])
    nvrtc = _loader._loaded_library("libnvrtc.so")
    if nvrtc:
        out.extend(os.path.join(os.path.dirname(nvrtc), so) for so in _SONAMES)
    for rel in _WHEEL_DIRS:
        for d in _loader._site_dirs(path, rel):
            out.extend(sorted(glob.glob(os.path.join(d, "libnvfatbin.so*"))))
    if env.get("CONDA_PREFIX"):
        out.extend(os.path.join(env["CONDA_PREFIX"], "lib", so) for so in _SONAMES)
    out.extend(_SONAMES)
    for var in ("CUDA_HOME", "CUDA_PATH"):
        root = env.get(var)
        if root:
            for sub in ("lib64", "lib"):
                out.extend(os.path.join(root, sub, so) for so in _SONAMES)
    out.extend(os.path.join("/usr/local/cuda/lib64", so) for so in _SONAMES)
    seen = set()
    return [c for c in out if not (c in seen or seen.add(c))]


def _load():
    global _lib
    with _lock:
        if _lib is not None:
            return _lib
        tried = candidates()
        for c in tried:
            try:
                lib = ctypes.CDLL(c)
                lib.nvFatbinCreate  # noqa: B018 (an nvFatbin, not another library)
            except (OSError, AttributeError):
                continue
            c_size_p, c_void_p = ctypes.POINTER(ctypes.c_size_t), ctypes.c_void_p
            lib.nvFatbinCreate.argtypes = [
                ctypes.POINTER(c_void_p),
                ctypes.POINTER(ctypes.c_char_p),
                ctypes.c_size_t,
            ]
            lib.nvFatbinDestroy.argtypes = [ctypes.POINTER(c_void_p)]
            lib.nvFatbinAddCubin.argtypes = [
                c_void_p,
                ctypes.c_char_p,
                ctypes.c_size_t,
                ctypes.c_char_p,
                ctypes.c_char_p,
            ]
            lib.nvFatbinAddPTX.argtypes = [
                c_void_p,
                ctypes.c_char_p,
                ctypes.c_size_t,
                ctypes.c_char_p,
                ctypes.c_char_p,
                ctypes.c_char_p,
            ]
            lib.nvFatbinSize.argtypes = [c_void_p, c_size_p]
            lib.nvFatbinGet.argtypes = [c_void_p, c_void_p]
            lib.nvFatbinGetErrorString.argtypes = [ctypes.c_int]
            lib.nvFatbinGetErrorString.restype = ctypes.c_char_p
            for f in (
                "nvFatbinCreate",
                "nvFatbinDestroy",
                "nvFatbinAddCubin",
                "nvFatbinAddPTX",
                "nvFatbinSize",
                "nvFatbinGet",
            ):
                getattr(lib, f).restype = ctypes.c_int
            _lib = lib
            return lib
        raise driver.CudaUnavailableError(
            "target='fatbin' needs NVIDIA's nvFatbin library (libnvfatbin.so, CUDA 12.4 or "
            "later), which was not found (pip install nvidia-nvfatbin, or set "
            "PYGPU_NVFATBIN); looked for: %s. target='cubin' or 'ptx' need no more than "
            "NVRTC" % ", ".join(tried)
        )


def available():
    """Whether nvFatbin can be opened."""
    try:
        _load()
    except driver.CudaUnavailableError:
        return False
    return True


def _check(lib, rc, what):
    if rc != 0:
        msg = lib.nvFatbinGetErrorString(rc)
        raise driver.CompileError(
            "%s failed: %s (nvFatbinResult %d)"
            % (what, msg.decode() if msg else "unknown error", rc)
        )


def make_fatbin(cubin, ptx, arch):
    """A fatbin (bytes) holding cubin for sm_<arch> and ptx for
    compute_<arch>, what nvcc --fatbin -arch=sm_<arch> writes."""
    lib = _load()
    handle = ctypes.c_void_p()
    _check(lib, lib.nvFatbinCreate(ctypes.byref(handle), None, 0), "nvFatbinCreate")
    try:
        a = str(arch).encode()
        cubin, ptx = bytes(cubin), bytes(ptx)
        _check(
            lib, lib.nvFatbinAddCubin(handle, cubin, len(cubin), a, b"kernel"), "nvFatbinAddCubin"
        )
        _check(lib, lib.nvFatbinAddPTX(handle, ptx, len(ptx), a, b"kernel", None), "nvFatbinAddPTX")
        size = ctypes.c_size_t()
        _check(lib, lib.nvFatbinSize(handle, ctypes.byref(size)), "nvFatbinSize")
        buf = ctypes.create_string_buffer(size.value)
        _check(lib, lib.nvFatbinGet(handle, buf), "nvFatbinGet")
        return buf.raw
    finally:
        lib.nvFatbinDestroy(ctypes.byref(handle))
