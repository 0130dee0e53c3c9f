"""Where pygpu looks for NVRTC, in order (the driver is libcuda.so.1, or
$PYGPU_LIBCUDA; see src/loader.c).  Kept in Python so the order is testable
on a machine without CUDA."""
import glob
import os
import sys

_SONAMES = ("libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so")


def nvrtc_candidates(environ=None, path=None):
    """The NVRTC libraries to try, first match wins:

    1. $PYGPU_NVRTC (a file path),
    2. $CUDA_HOME/lib64 and $CUDA_PATH/lib64 (and lib/),
    3. the system loader path (bare sonames, as dlopen resolves them),
    4. NVIDIA's pip wheels (site-packages/nvidia/cu13/lib, .../cuda_nvrtc/lib),
    5. /usr/local/cuda/lib64.
    """
    env = os.environ if environ is None else environ
    path = sys.path if path is None else path
    out = []
    explicit = env.get("PYGPU_NVRTC")
    if explicit:
        out.append(explicit)
    for var in ("CUDA_HOME", "CUDA_PATH"):
        root = env.get(var)
        if root:
            for sub in ("lib64", "lib"):
                for so in _SONAMES:
                    out.append(os.path.join(root, sub, so))
    out.extend(_SONAMES)
    for p in path:
        if not os.path.isdir(os.path.join(p, "nvidia")):
            continue
        for pattern in ("nvidia/cu13/lib/libnvrtc.so*", "nvidia/cuda_nvrtc/lib/libnvrtc.so*",
                        "nvidia/cu12/lib/libnvrtc.so*"):
            out.extend(sorted(x for x in glob.glob(os.path.join(p, pattern))
                              if "builtins" not in x and "alt" not in os.path.basename(x)))
    for so in _SONAMES:
        out.append(os.path.join("/usr/local/cuda/lib64", so))
    seen = set()
    unique = []
    for c in out:
        if c not in seen:
            seen.add(c)
            unique.append(c)
    return unique


def cuda_include_dirs(environ=None):
    """The CUDA toolkit's include directories, if found (for SourceModule's
    -I, as PyCUDA adds it): include/ and, from CUDA 13, include/cccl/ (where
    cuda/std/..., used by cooperative_groups.h, lives); [] otherwise."""
    env = os.environ if environ is None else environ
    roots = [env.get("CUDA_HOME"), env.get("CUDA_PATH"), "/usr/local/cuda"]
    for r in roots:
        inc = os.path.join(r, "include") if r else None
        if inc and os.path.isfile(os.path.join(inc, "cuda.h")):
            dirs = [inc]
            if os.path.isdir(os.path.join(inc, "cccl")):
                dirs.append(os.path.join(inc, "cccl"))
            return dirs
    return []
