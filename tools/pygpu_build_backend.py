"""pygpu's build backend: setuptools' own, plus one decision.

Building pygpu._driver needs three CUDA headers (cuda.h, cudaTypedefs.h,
nvrtc.h) and nothing else from CUDA.  When a local toolkit (or a CUDA wheel
already importable) has them, the build uses those.  When none is found, the
build asks pip for NVIDIA's header-carrying wheels (HEADER_WHEELS), so
`pip install pygpu` from the sdist works in pip's isolated build environment
on a machine that has only a driver.  setup.py uses cuda_include_dirs() to
find the headers again at build time, in the same order.
"""
import glob
import os
import sys

from setuptools import build_meta as _setuptools
from setuptools.build_meta import *  # noqa: F401,F403  (the PEP 517/660 hooks we do not change)

HEADERS = ("cuda.h", "cudaTypedefs.h", "nvrtc.h")
# CUDA 13's wheels put every component's headers in site-packages/nvidia/cu13/include.
HEADER_WHEELS = ["nvidia-cuda-runtime>=13,<14", "nvidia-cuda-nvrtc>=13,<14"]
_WHEEL_DIRS = ("nvidia/cu13/include", "nvidia/cuda_runtime/include", "nvidia/cuda_nvrtc/include")


def local_candidates(environ=None):
    """Toolkit include directories, in the order they are tried."""
    env = os.environ if environ is None else environ
    out = []
    if env.get("PYGPU_CUDA_INCLUDE"):
        out.append(env["PYGPU_CUDA_INCLUDE"])
    for var in ("CUDA_HOME", "CUDA_PATH", "CUDA_ROOT"):
        if env.get(var):
            out.append(os.path.join(env[var], "include"))
    out += ["/usr/local/cuda/include", "/opt/cuda/include", "/usr/include"]
    return out


def wheel_candidates(path=None):
    """Include directories of NVIDIA's wheels on path (default sys.path)."""
    out = []
    for p in (sys.path if path is None else path):
        for rel in _WHEEL_DIRS:
            d = os.path.join(p, rel)
            if os.path.isdir(d):
                out.append(d)
    return out


def _has(d, header):
    return os.path.isfile(os.path.join(d, header))


def cuda_include_dirs(environ=None, path=None):
    """The include directories that hold the three headers: one toolkit
    directory with all of them, else NVIDIA's wheels (CUDA 12's spread them
    over two folders); None if they are not all found."""
    for d in local_candidates(environ):
        if all(_has(d, h) for h in HEADERS):
            return [d]
    wheels = wheel_candidates(path)
    dirs = []
    for h in HEADERS:
        d = next((w for w in wheels if _has(w, h)), None)
        if d is None:
            return None
        if d not in dirs:
            dirs.append(d)
    return dirs


# NVTX v3 (header-only): nvtx3/nvToolsExt.h in the toolkit, or in NVIDIA's
# nvidia-nvtx wheel (CUDA 13: nvidia/cu13/include; CUDA 12's nvidia-nvtx-cu12:
# nvidia/nvtx/include).  Optional: without it pygpu.profiler's ranges are
# no-ops (pygpu._driver.NVTX_AVAILABLE is False).  PYGPU_BUILD_NVTX=0 builds
# without it on purpose.
NVTX_HEADER = os.path.join("nvtx3", "nvToolsExt.h")
NVTX_WHEEL = "nvidia-nvtx>=13,<14"
_NVTX_WHEEL_DIRS = ("nvidia/cu13/include", "nvidia/nvtx/include")


def nvtx_include_dir(environ=None, path=None):
    """The include directory holding nvtx3/nvToolsExt.h, or None (not
    found, or PYGPU_BUILD_NVTX=0)."""
    env = os.environ if environ is None else environ
    if env.get("PYGPU_BUILD_NVTX", "") == "0":
        return None
    wheels = [os.path.join(p, rel) for p in (sys.path if path is None else path)
              for rel in _NVTX_WHEEL_DIRS]
    for d in local_candidates(env) + wheels:
        if _has(d, NVTX_HEADER):
            return d
    return None


def tried(environ=None, path=None):
    return local_candidates(environ) + wheel_candidates(path)


def _header_requirements():
    if os.environ.get("PYGPU_CUDA_HEADERS_FROM_PIP", "") not in ("", "0"):
        return list(HEADER_WHEELS) + [NVTX_WHEEL]
    if cuda_include_dirs():
        return []
    return list(HEADER_WHEELS) + ([] if nvtx_include_dir() else [NVTX_WHEEL])


def get_requires_for_build_wheel(config_settings=None):
    return _setuptools.get_requires_for_build_wheel(config_settings) + _header_requirements()


def get_requires_for_build_editable(config_settings=None):
    return _setuptools.get_requires_for_build_editable(config_settings) + _header_requirements()
