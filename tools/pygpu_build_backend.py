"""pygpu's build backend: setuptools' own, plus one decision.

Building pygpu._driver needs three CUDA headers (cuda.h, cudaTypedefs.h,
nvrtc.h) and nothing else from CUDA.  When a local toolkit (or a CUDA wheel
already importable) has them, the build uses those.  When none is found, the
build asks pip for NVIDIA's header-carrying wheels (HEADER_WHEELS), so
`pip install pygpu` from the sdist works in pip's isolated build environment
on a machine that has only a driver.  setup.py uses cuda_include_dirs() to
find the headers again at build time, in the same order.  The search itself
is pygpu/_loader.py's (loaded by path), which the loader and the compiler use
at run time: cuda-pathfinder when installed (a build requirement), the
toolkit's folders, NVIDIA's wheels on sys.path.

And one default: an editable install (`pip install -e .`, make test) is a
path file naming the checkout (setuptools' editable_mode=compat), not
setuptools' import hook, which mypy and pyright cannot follow (issue 33).
`--config-settings editable_mode=lenient` (or strict) still picks another.
"""

import importlib.util
import os
import sys

try:
    from setuptools import build_meta as _setuptools
    from setuptools.build_meta import *  # noqa: F401,F403  (the PEP 517/660 hooks we do not change)
except ImportError:
    # only the header search is wanted (the tests load this file for it, in
    # environments without setuptools); as a build backend pip has always
    # installed setuptools first (pyproject.toml's build requirements)
    _setuptools = None


def _load_search():
    """pygpu/_loader.py, the one search for NVRTC and the CUDA headers (the
    loader's and the compiler's too), loaded by path: pygpu is not
    importable while it is being built."""
    here = os.path.dirname(os.path.abspath(__file__))
    spec = importlib.util.spec_from_file_location(
        "_pygpu_build_search", os.path.join(os.path.dirname(here), "pygpu", "_loader.py")
    )
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


_search = _load_search()
HEADERS = _search.BUILD_HEADERS
# CUDA 13's wheels put every component's headers in site-packages/nvidia/cu13/include.
HEADER_WHEELS = ["nvidia-cuda-runtime>=13,<14", "nvidia-cuda-nvrtc>=13,<14"]


def local_candidates(environ=None):
    """Toolkit include directories, in the order they are tried."""
    return _search.toolkit_include_candidates(environ)


def wheel_candidates(path=None):
    """Include directories of NVIDIA's wheels on path (default sys.path)."""
    return _search.wheel_include_candidates(path)


def _has(d, header):
    return os.path.isfile(os.path.join(d, header))


def cuda_include_dirs(environ=None, path=None):
    """The include directories that hold the three headers: one toolkit
    directory with all of them, else cuda-pathfinder's, else NVIDIA's
    wheels on path (CUDA 12's spread them over two folders); None if they
    are not all found (pygpu._loader.build_include_dirs)."""
    return _search.build_include_dirs(environ, path)


# NVTX v3 (header-only): nvtx3/nvToolsExt.h in the toolkit, or in NVIDIA's
# nvidia-nvtx wheel (CUDA 13: nvidia/cu13/include; CUDA 12's nvidia-nvtx-cu12:
# nvidia/nvtx/include).  Optional: without it pygpu.profiler's ranges are
# no-ops (pygpu._driver.NVTX_AVAILABLE is False).  PYGPU_BUILD_NVTX picks:
# unset or empty, NVTX when its headers are found; 0, never (even where they
# are found); 1, always (the build fails without them).
NVTX_HEADER = os.path.join("nvtx3", "nvToolsExt.h")
NVTX_WHEEL = "nvidia-nvtx>=13,<14"
_NVTX_WHEEL_DIRS = ("nvidia/cu13/include", "nvidia/nvtx/include")


def nvtx_switch(environ=None):
    """PYGPU_BUILD_NVTX: None (unset or empty: NVTX when found), False (0)
    or True (1); ValueError for any other value."""
    env = os.environ if environ is None else environ
    value = env.get("PYGPU_BUILD_NVTX", "").strip()
    if value in ("", "0", "1"):
        return None if value == "" else value == "1"
    raise ValueError(
        "PYGPU_BUILD_NVTX must be 0 (build without NVTX), 1 (require "
        "NVTX) or empty (NVTX when its headers are found), not %r" % env["PYGPU_BUILD_NVTX"]
    )


def nvtx_include_dir(environ=None, path=None):
    """The include directory holding nvtx3/nvToolsExt.h, or None (not
    found, or PYGPU_BUILD_NVTX=0)."""
    env = os.environ if environ is None else environ
    if nvtx_switch(env) is False:
        return None
    for d in nvtx_candidates(env, path):
        if _has(d, NVTX_HEADER):
            return d
    return None


def nvtx_candidates(environ=None, path=None):
    """Where nvtx3/nvToolsExt.h is looked for, in order."""
    return local_candidates(environ) + [
        os.path.join(p, rel)
        for p in (sys.path if path is None else path)
        for rel in _NVTX_WHEEL_DIRS
    ]


def nvtx_for_build(environ=None, path=None):
    """What setup.py builds with: (the NVTX include directory or None, a
    note to print or None).  ValueError (the message says why) for a bad
    PYGPU_BUILD_NVTX, or for PYGPU_BUILD_NVTX=1 without the headers."""
    switch = nvtx_switch(environ)
    if switch is False:
        return None, (
            "PYGPU_BUILD_NVTX=0: building without NVTX (pygpu.profiler's "
            "ranges do nothing, NVTX_AVAILABLE is False)"
        )
    found = nvtx_include_dir(environ, path)
    if found is not None:
        return found, None
    if switch:
        raise ValueError(
            "PYGPU_BUILD_NVTX=1 but the NVTX headers (nvtx3/nvToolsExt.h) "
            "were not found; pip install nvidia-nvtx or use a CUDA toolkit. "
            "Tried:\n  " + "\n  ".join(nvtx_candidates(environ, path))
        )
    return None, (
        "NVTX headers (nvtx3/nvToolsExt.h) not found: building without NVTX "
        "(pygpu.profiler's ranges do nothing); pip install nvidia-nvtx or use "
        "a CUDA toolkit to have them"
    )


def tried(environ=None, path=None):
    return _search.build_tried(environ, path)


def _header_requirements():
    # PYGPU_BUILD_NVTX=0 needs no NVTX wheel; the wheel is asked for when a
    # build wants NVTX and no toolkit has it
    nvtx = [] if nvtx_switch() is False else [NVTX_WHEEL]
    if os.environ.get("PYGPU_CUDA_HEADERS_FROM_PIP", "") not in ("", "0"):
        return list(HEADER_WHEELS) + nvtx
    # only a toolkit is sure to be seen by the build itself: headers found in
    # NVIDIA's wheels of the environment pip runs from (a venv with
    # pygpu[nvrtc]) are not on the isolated build's path, so the build asks
    # for its own copies (pip's cache keeps them)
    dirs = cuda_include_dirs()
    if dirs and set(dirs) <= set(_search.toolkit_include_candidates(None)):
        return []
    return list(HEADER_WHEELS) + nvtx


def get_requires_for_build_wheel(config_settings=None):
    return _setuptools.get_requires_for_build_wheel(config_settings) + _header_requirements()


def get_requires_for_build_editable(config_settings=None):
    return _setuptools.get_requires_for_build_editable(config_settings) + _header_requirements()


def _editable_settings(config_settings):
    """config_settings with editable_mode=compat unless one was given (or
    this setuptools no longer has the compat mode)."""
    settings = dict(config_settings or {})
    if "editable_mode" in settings or "editable-mode" in settings:
        return settings
    try:
        from setuptools.command.editable_wheel import _EditableMode

        if "COMPAT" not in _EditableMode.__members__:
            return settings
    except ImportError:
        return settings
    settings["editable_mode"] = "compat"
    return settings


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    return _setuptools.build_editable(
        wheel_directory, _editable_settings(config_settings), metadata_directory
    )
