"""Build of pygpu._driver, the C extension over the CUDA driver API and NVRTC.

Only the CUDA toolkit's headers are needed to build (cuda.h, cudaTypedefs.h,
nvrtc.h); nothing is linked against libcuda or NVRTC, which are opened at run
time.  The headers are looked for in $CUDA_HOME/include, $CUDA_PATH/include,
/usr/local/cuda/include and NVIDIA's pip wheels.
"""
import glob
import os
import sys

from setuptools import Extension, setup


def cuda_include_dir():
    candidates = []
    for var in ("PYGPU_CUDA_INCLUDE", "CUDA_HOME", "CUDA_PATH", "CUDA_ROOT"):
        v = os.environ.get(var)
        if v:
            candidates.append(v if var == "PYGPU_CUDA_INCLUDE" else os.path.join(v, "include"))
    candidates += ["/usr/local/cuda/include", "/opt/cuda/include", "/usr/include"]
    for p in sys.path:
        candidates += glob.glob(os.path.join(p, "nvidia", "cu*", "include"))
        candidates += glob.glob(os.path.join(p, "nvidia", "cuda_runtime", "include"))
    for c in candidates:
        if (os.path.exists(os.path.join(c, "cuda.h"))
                and os.path.exists(os.path.join(c, "cudaTypedefs.h"))
                and os.path.exists(os.path.join(c, "nvrtc.h"))):
            return c
    sys.exit("pygpu: the CUDA toolkit headers (cuda.h, cudaTypedefs.h, nvrtc.h) were "
             "not found; install the CUDA toolkit or set CUDA_HOME. Tried:\n  "
             + "\n  ".join(candidates))


def numpy_include_dir():
    import numpy
    return numpy.get_include()


sources = sorted(glob.glob(os.path.join("src", "*.c")))
ext = Extension(
    "pygpu._driver",
    sources=sources,
    include_dirs=["src", cuda_include_dir(), numpy_include_dir()],
    depends=glob.glob(os.path.join("src", "*.h")),
    define_macros=[("NPY_TARGET_VERSION", "NPY_1_22_API_VERSION")],
    extra_compile_args=["-std=c11", "-O2", "-Wall", "-Wno-missing-field-initializers",
                        "-fvisibility=hidden"],
    libraries=["dl"],
)

setup(ext_modules=[ext])
