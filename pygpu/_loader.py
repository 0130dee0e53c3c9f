"""Where pygpu looks for NVRTC, the CUDA headers and its own kernel sources
(the driver is libcuda.so.1, or $PYGPU_LIBCUDA; see src/core/loader.c).

NVIDIA's ``cuda-pathfinder`` package (``cuda.pathfinder``) does the search
when it is installed: it prefers the CUDA wheels of the running environment
(``site-packages/nvidia/cu13``), then conda, then the system.  It is
imported only when NVRTC or the headers are first needed, never by
``import pygpu``.  Without it, the same order is followed by the plain search
below, which is kept in Python so it is testable on a machine without CUDA.
"""

from typing import Any
import glob
import os
import sys

__all__ = [
    "nvrtc_candidates",
    "load_nvrtc",
    "nvjitlink_candidates",
    "load_nvjitlink",
    "cuda_include_dirs",
    "with_cuda_include_dirs",
    "kernel_dir",
    "nvrtc_pip_requirement",
    "pathfinder",
]

_SONAMES = ("libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so")
# NVIDIA's wheels: CUDA 13 puts every component in nvidia/cu13/; CUDA 12's
# wheels have one folder per component.
_WHEEL_LIB_DIRS = ("nvidia/cu13/lib", "nvidia/cuda_nvrtc/lib")
_WHEEL_INCLUDE_DIRS = ("nvidia/cu13/include", "nvidia/cuda_runtime/include")
_WHEEL_CCCL_DIRS = ("nvidia/cu13/include/cccl", "nvidia/cuda_cccl/include")

_UNSET = object()
_pathfinder = _UNSET


def pathfinder():
    """The cuda.pathfinder module, imported on first call; None if it is not
    installed (or $PYGPU_NO_PATHFINDER is set, to test the plain search)."""
    global _pathfinder
    if _pathfinder is _UNSET:
        if os.environ.get("PYGPU_NO_PATHFINDER", "") not in ("", "0"):
            _pathfinder = None
        else:
            try:
                import cuda.pathfinder as pf
            except ImportError:
                pf = None
            _pathfinder = pf
    return _pathfinder


def _site_dirs(path, rel):
    out = []
    for p in path:
        d = os.path.join(p, rel)
        if os.path.isdir(d):
            out.append(d)
    return out


def nvrtc_candidates(environ=None, path=None):
    """The NVRTC libraries to try, first match wins (cuda-pathfinder's order,
    so the answer is the same with and without it):

    1. $PYGPU_NVRTC (a file path),
    2. NVIDIA's pip wheels on sys.path (nvidia/cu13/lib, nvidia/cuda_nvrtc/lib):
       the environment's own NVRTC wins over a system one,
    3. $CONDA_PREFIX/lib,
    4. the system loader path (bare sonames, as dlopen resolves them:
       LD_LIBRARY_PATH, then the loader's cache),
    5. $CUDA_HOME and $CUDA_PATH (lib64/, lib/),
    6. /usr/local/cuda/lib64.

    Nothing is opened: the list is for load_nvrtc() and for the compile
    cache's record of which library a process would load.
    """
    env = os.environ if environ is None else environ
    path = sys.path if path is None else path
    out = []
    explicit = env.get("PYGPU_NVRTC")
    if explicit:
        out.append(explicit)
    for rel in _WHEEL_LIB_DIRS:
        for d in _site_dirs(path, rel):
            out.extend(
                sorted(
                    x
                    for x in glob.glob(os.path.join(d, "libnvrtc.so*"))
                    if "alt" not in os.path.basename(x)
                )
            )
    conda = env.get("CONDA_PREFIX")
    if conda:
        out.extend(os.path.join(conda, "lib", so) for so in _SONAMES)
    out.extend(_SONAMES)
    for var in ("CUDA_HOME", "CUDA_PATH"):
        root = env.get(var)
        if root:
            for sub in ("lib64", "lib"):
                out.extend(os.path.join(root, sub, so) for so in _SONAMES)
    out.extend(os.path.join("/usr/local/cuda/lib64", so) for so in _SONAMES)
    seen = set()
    return [c for c in out if not (c in seen or seen.add(c))]


def load_nvrtc(loader=None):
    """Open NVRTC and return its path: $PYGPU_NVRTC if set, else what
    cuda-pathfinder finds (when installed), else the first of
    nvrtc_candidates() that opens.  A failure lists every path tried."""
    if loader is None:
        from pygpu import _driver

        loader = _driver._load_nvrtc
    candidates = nvrtc_candidates()
    pf = None if os.environ.get("PYGPU_NVRTC") else pathfinder()
    if pf is not None:
        try:
            found = pf.load_nvidia_dynamic_lib("nvrtc").abs_path
        except Exception:  # not found, or a pathfinder too old to know NVRTC
            found = None
        if found and found not in candidates:
            candidates.insert(0, found)
        elif found:
            candidates.remove(found)
            candidates.insert(0, found)
    return loader(candidates)


_JL_SONAMES = ("libnvJitLink.so.13", "libnvJitLink.so.12", "libnvJitLink.so")
_WHEEL_JL_DIRS = ("nvidia/cu13/lib", "nvidia/nvjitlink/lib")


def nvjitlink_candidates(environ=None, path=None, with_nvrtc=True):
    """The nvJitLink libraries to try, first match wins, in NVRTC's order
    (nvrtc_candidates): $PYGPU_NVJITLINK, the folder of the NVRTC library
    this process loaded (the same toolkit: LTO-IR must not be newer than
    the linker), NVIDIA's wheels on sys.path (nvidia/cu13/lib,
    nvidia/nvjitlink/lib), $CONDA_PREFIX/lib, the system loader path,
    $CUDA_HOME and $CUDA_PATH, /usr/local/cuda/lib64."""
    env = os.environ if environ is None else environ
    path = sys.path if path is None else path
    out = []
    explicit = env.get("PYGPU_NVJITLINK")
    if explicit:
        out.append(explicit)
    nvrtc = _loaded_library("libnvrtc.so") if with_nvrtc else None
    if nvrtc:
        d = os.path.dirname(nvrtc)
        out.extend(os.path.join(d, so) for so in _JL_SONAMES)
    for rel in _WHEEL_JL_DIRS:
        for d in _site_dirs(path, rel):
            out.extend(sorted(glob.glob(os.path.join(d, "libnvJitLink.so*"))))
    conda = env.get("CONDA_PREFIX")
    if conda:
        out.extend(os.path.join(conda, "lib", so) for so in _JL_SONAMES)
    out.extend(_JL_SONAMES)
    for var in ("CUDA_HOME", "CUDA_PATH"):
        root = env.get(var)
        if root:
            for sub in ("lib64", "lib"):
                out.extend(os.path.join(root, sub, so) for so in _JL_SONAMES)
    out.extend(os.path.join("/usr/local/cuda/lib64", so) for so in _JL_SONAMES)
    seen = set()
    return [c for c in out if not (c in seen or seen.add(c))]


def _loaded_library(prefix):
    """The file of a loaded library whose name starts with prefix (Linux's
    /proc/self/maps), or None."""
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                p = line.rstrip("\n").split(" ")[-1]
                if os.path.basename(p).startswith(prefix):
                    return p
    except OSError:
        pass
    return None


def load_nvjitlink(loader=None):
    """Open nvJitLink and return its path: $PYGPU_NVJITLINK if set, else what
    cuda-pathfinder finds (when installed), else the first of
    nvjitlink_candidates() that opens.  A failure (CudaUnavailableError)
    lists every path tried."""
    if loader is None:
        from pygpu import _driver

        loader = _driver._load_nvjitlink
    candidates = nvjitlink_candidates()
    pf = None if os.environ.get("PYGPU_NVJITLINK") else pathfinder()
    if pf is not None:
        try:
            found = pf.load_nvidia_dynamic_lib("nvJitLink").abs_path
        except Exception:  # not found, or a pathfinder that does not know it
            found = None
        if found:
            if found in candidates:
                candidates.remove(found)
            candidates.insert(0, found)
    return loader(candidates)


def _include_root_ok(d):
    return bool(d) and os.path.isfile(os.path.join(d, "cuda_runtime.h"))


def _cccl_ok(d):
    return bool(d) and os.path.isfile(os.path.join(d, "cuda", "std", "version"))


def _plain_include_dirs(env, path):
    """The plain search for the headers, in cuda-pathfinder's order."""
    roots = []
    for rel in _WHEEL_INCLUDE_DIRS:
        roots.extend(_site_dirs(path, rel))
    cccl = []
    for rel in _WHEEL_CCCL_DIRS:
        cccl.extend(_site_dirs(path, rel))
    tops = []
    if env.get("CONDA_PREFIX"):
        tops.append(os.path.join(env["CONDA_PREFIX"], "targets", "x86_64-linux"))
        tops.append(env["CONDA_PREFIX"])
    tops += [env.get("CUDA_PATH"), env.get("CUDA_HOME"), "/usr/local/cuda"]
    for t in tops:
        if t:
            roots.append(os.path.join(t, "include"))
            cccl.append(os.path.join(t, "include", "cccl"))
    root = next((d for d in roots if _include_root_ok(d)), None)
    cccl_dir = next((d for d in cccl if _cccl_ok(d)), None)
    if cccl_dir is None and root and _cccl_ok(root):  # CUDA 12 toolkits: cuda/std in include/
        cccl_dir = root
    return root, cccl_dir


_include_memo: dict[Any, Any] = {}


def _search_fingerprint(env, path):
    """What decides where the header search ends (with or without
    cuda-pathfinder): the variables it reads, sys.path, and which of NVIDIA's
    wheel folders (and cuda.pathfinder itself) each sys.path entry holds.
    Costs a few dozen stat calls, no import."""
    import hashlib

    h = hashlib.sha256(b"cuda-include-dirs\0")
    for var in ("CUDA_HOME", "CUDA_PATH", "CONDA_PREFIX", "PYGPU_NO_PATHFINDER"):
        h.update(("%s=%s\0" % (var, env.get(var, ""))).encode("utf-8", "surrogateescape"))
    rels = _WHEEL_INCLUDE_DIRS + _WHEEL_CCCL_DIRS + ("cuda/pathfinder",)
    for p in path:
        h.update(
            (
                "%s:%s\0"
                % (p, "".join("1" if os.path.isdir(os.path.join(p, r)) else "0" for r in rels))
            ).encode("utf-8", "surrogateescape")
        )
    return h.hexdigest()[:32]


def cuda_include_dirs(environ=None, path=None, record_dir=None):
    """The CUDA include directories NVRTC needs for the toolkit's headers
    (<cuda_fp16.h>, <cooperative_groups.h>, <cuda/std/...>, <cub/...>): the
    one with cuda_runtime.h and the CCCL one (include/cccl/ from CUDA 13),
    each once, or [] if none is found.  Found by cuda-pathfinder when
    installed (the environment's wheels first), else by the same order by
    hand: NVIDIA's wheels on sys.path, $CONDA_PREFIX, $CUDA_PATH, $CUDA_HOME,
    /usr/local/cuda.  Memoized per environment; with record_dir (the compile
    cache's directory) the answer is also recorded there, so that a new
    process with the same environment neither imports cuda-pathfinder
    (~25 ms) nor searches again: the compile cache's hits stay cheap."""
    env = os.environ if environ is None else environ
    path = sys.path if path is None else path
    key = (
        environ is None,
        tuple(path),
        tuple(
            env.get(v) for v in ("CUDA_HOME", "CUDA_PATH", "CONDA_PREFIX", "PYGPU_NO_PATHFINDER")
        ),
    )
    found = _include_memo.get(key)
    if found is not None:
        return list(found)
    rec = fp = None
    if record_dir and environ is None:
        fp = _search_fingerprint(env, path)
        rec = _read_include_record(record_dir, fp)
        if rec is not None:
            _include_memo[key] = tuple(rec)
            return list(rec)
    pf = pathfinder() if environ is None else None
    root = cccl_dir = None
    if pf is not None:
        root = _pf_header_dir(pf, "cudart")
        cccl_dir = _pf_header_dir(pf, "cccl")
    if root is None or cccl_dir is None:
        plain_root, plain_cccl = _plain_include_dirs(env, path)
        root = root or plain_root
        cccl_dir = cccl_dir or plain_cccl
    dirs = []
    for d in (root, cccl_dir):
        if d and d not in dirs:
            dirs.append(d)
    _include_memo[key] = tuple(dirs)
    if fp is not None:
        from pygpu import store

        store.write_record(record_dir, "include-dirs-" + fp, {"dirs": dirs})
    return dirs


def _read_include_record(record_dir, fp):
    """The recorded include directories, if each still is what it was found
    to be (cuda_runtime.h in the first, cuda/std/version in a CCCL one)."""
    from pygpu import store

    meta = store.read_record(record_dir, "include-dirs-" + fp)
    dirs = meta.get("dirs") if meta else None
    if not isinstance(dirs, list) or not all(isinstance(d, str) for d in dirs):
        return None
    if dirs and not _include_root_ok(dirs[0]) and not _cccl_ok(dirs[0]):
        return None
    if len(dirs) > 1 and not _cccl_ok(dirs[1]):
        return None
    return dirs


def _pf_header_dir(pf, name):
    try:
        d = pf.find_nvidia_header_directory(name)
    except Exception:  # a pathfinder that does not know this name
        return None
    ok = _cccl_ok if name == "cccl" else _include_root_ok
    return d if ok(d) else None


def with_cuda_include_dirs(include_dirs, record_dir=None):
    """include_dirs (as str) followed by cuda_include_dirs() that are not
    already among them: what compile() passes to NVRTC, so compile() and
    SourceModule see the same headers."""
    out = [str(d) for d in include_dirs]
    out.extend(d for d in cuda_include_dirs(record_dir=record_dir) if d not in out)
    libc = libc_shim_dir()
    if libc not in out:
        out.append(libc)
    return out


def libc_shim_dir():
    """kernels/libc: <stdio.h> and <stdlib.h> for NVRTC, which has none, so
    that kernels written for nvcc compile unchanged; searched last."""
    return os.path.join(kernel_dir(), "libc")


def kernel_dir():
    """The folder of the CUDA sources pygpu ships: pygpu/kernels/ in an
    installed package (setup.py maps the project's top-level kernels/ there),
    the top-level kernels/ itself in a source checkout."""
    here = os.path.dirname(os.path.abspath(__file__))
    installed = os.path.join(here, "kernels")
    try:
        # a folder with sources, not a leftover empty one (an editable
        # install over an older layout)
        if any(n.endswith((".cu", ".cuh")) for n in os.listdir(installed)):
            return installed
    except OSError:
        pass
    return os.path.join(os.path.dirname(here), "kernels")


def nvrtc_pip_requirement(cuda_major):
    """The pip requirement that installs NVRTC of CUDA cuda_major: from
    CUDA 13 the wheels dropped the -cuXX suffix (nvidia-cuda-nvrtc 13.x);
    CUDA 12's is nvidia-cuda-nvrtc-cu12."""
    if cuda_major >= 13:
        return "'nvidia-cuda-nvrtc==%d.*'" % cuda_major
    return "'nvidia-cuda-nvrtc-cu%d==%d.*'" % (cuda_major, cuda_major)


# ---- the build's search: tools/pygpu_build_backend.py and setup.py load
# this file by path (no `import pygpu` while pygpu is being built), so the
# loader, the compiler (cuda_include_dirs above) and the build share one
# search and one list of NVIDIA's wheel layouts.

BUILD_HEADERS = ("cuda.h", "cudaTypedefs.h", "nvrtc.h")
# CUDA 13's wheels put every component's headers in nvidia/cu13/include;
# CUDA 12's have one folder per component.
_WHEEL_BUILD_DIRS = (
    "nvidia/cu13/include",
    "nvidia/cuda_runtime/include",
    "nvidia/cuda_nvrtc/include",
)


def toolkit_include_candidates(environ=None):
    """A toolkit's include directories, in the order the build tries them:
    $PYGPU_CUDA_INCLUDE, $CUDA_HOME, $CUDA_PATH, $CUDA_ROOT (each /include),
    /usr/local/cuda/include, /opt/cuda/include, /usr/include."""
    env = os.environ if environ is None else environ
    out = []
    if env.get("PYGPU_CUDA_INCLUDE"):
        out.append(env["PYGPU_CUDA_INCLUDE"])
    for var in ("CUDA_HOME", "CUDA_PATH", "CUDA_ROOT"):
        if env.get(var):
            out.append(os.path.join(env[var], "include"))
    out += ["/usr/local/cuda/include", "/opt/cuda/include", "/usr/include"]
    return out


def wheel_include_candidates(path=None, rels=_WHEEL_BUILD_DIRS):
    """The include directories of NVIDIA's wheels on path (default
    sys.path: pip's isolated build environment is on sys.path, not among
    site.getsitepackages() where cuda-pathfinder looks)."""
    out = []
    for p in sys.path if path is None else path:
        for rel in rels:
            d = os.path.join(p, rel)
            if os.path.isdir(d):
                out.append(d)
    return out


def _pf_build_dirs():
    """cuda-pathfinder's header directories for the build (cudart's, which
    holds cuda.h and cudaTypedefs.h, and nvrtc's), [] without it."""
    pf = pathfinder()
    if pf is None:
        return []
    out = []
    for name in ("cudart", "nvrtc"):
        try:
            d = pf.find_nvidia_header_directory(name)
        except Exception:  # a pathfinder that does not know the name
            d = None
        if d and d not in out:
            out.append(d)
    return out


def build_include_dirs(environ=None, path=None):
    """The include directories that hold BUILD_HEADERS: one toolkit
    directory with all of them (toolkit_include_candidates), else what
    cuda-pathfinder finds (environ None only: the process's own
    environment), else NVIDIA's wheels on path; None if they are not all
    found."""
    for d in toolkit_include_candidates(environ):
        if all(os.path.isfile(os.path.join(d, h)) for h in BUILD_HEADERS):
            return [d]
    found = (_pf_build_dirs() if environ is None else []) + wheel_include_candidates(path)
    dirs = []
    for h in BUILD_HEADERS:
        d = next((w for w in found if os.path.isfile(os.path.join(w, h))), None)
        if d is None:
            return None
        if d not in dirs:
            dirs.append(d)
    return dirs


def build_tried(environ=None, path=None):
    """Where build_include_dirs() looked, for its failure message."""
    return (
        toolkit_include_candidates(environ)
        + (_pf_build_dirs() if environ is None else [])
        + wheel_include_candidates(path)
    )
