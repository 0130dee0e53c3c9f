"""Build of pygpu._driver, the C extension over the CUDA driver API and NVRTC.

Only three CUDA headers are needed to build (cuda.h, cudaTypedefs.h,
nvrtc.h), plus NVTX's header-only nvtx3/ when found (PYGPU_BUILD_NVTX=0
builds without it even then, PYGPU_BUILD_NVTX=1 fails without it); nothing
is linked against libcuda or NVRTC, which are opened at run time, so the
extension needs only libc (a manylinux wheel: make wheel).  The headers are
looked for in $PYGPU_CUDA_INCLUDE, $CUDA_HOME/include, $CUDA_PATH/include,
$CUDA_ROOT/include, /usr/local/cuda/include, /opt/cuda/include,
/usr/include, then where cuda-pathfinder finds them, then NVIDIA's wheels
on sys.path (site-packages/nvidia/cu13/include): pygpu/_loader.py's search,
the one the loader and the compiler use; when pip builds in an isolated
environment and no toolkit is found, tools/pygpu_build_backend.py has pip
install those wheels first.

The CUDA sources in the top-level kernels/ ship inside the package as
pygpu/kernels/.  Project metadata is in pyproject.toml.
"""

import glob
import os
import sys

from setuptools import Extension, find_packages, setup
from setuptools.command.build_ext import build_ext

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "tools"))
import pygpu_build_backend  # noqa: E402  (the header search, shared with the backend)


class BuildExt(build_ext):
    """Finds the CUDA and NumPy headers only when the extension is built, so
    an sdist or metadata needs neither."""

    def build_extensions(self):
        cuda = pygpu_build_backend.cuda_include_dirs()
        if cuda is None:
            sys.exit(
                "pygpu: the CUDA headers (cuda.h, cudaTypedefs.h, nvrtc.h) were not "
                "found; install the CUDA toolkit, set CUDA_HOME, or pip install "
                "'nvidia-cuda-runtime==13.*' 'nvidia-cuda-nvrtc==13.*' (a build with "
                "pip's build isolation does that by itself). Tried:\n  "
                + "\n  ".join(pygpu_build_backend.tried())
            )
        try:
            nvtx, note = pygpu_build_backend.nvtx_for_build()
        except ValueError as e:
            sys.exit("pygpu: %s" % e)
        if note:
            print("pygpu: " + note)
        import numpy

        for ext in self.extensions:
            ext.include_dirs = list(ext.include_dirs) + cuda + [numpy.get_include()]
            if nvtx is not None:
                if nvtx not in ext.include_dirs:
                    ext.include_dirs.append(nvtx)
                ext.define_macros = list(ext.define_macros) + [("PYGPU_HAVE_NVTX", "1")]
        super().build_extensions()


ext = Extension(
    "pygpu._driver",
    sources=sorted(glob.glob(os.path.join("src", "**", "*.c"), recursive=True)),
    include_dirs=["src"],
    depends=glob.glob(os.path.join("src", "**", "*.h"), recursive=True),
    define_macros=[("NPY_TARGET_VERSION", "NPY_1_22_API_VERSION")],
    # -Wextra without the two warnings every CPython extension trips over
    # (unused METH_NOARGS parameters, partial PyMethodDef/PyType_Slot
    # initialisers); PYGPU_WERROR=1 (make test, CI) makes any warning an error
    extra_compile_args=[
        "-std=c11",
        "-O2",
        "-Wall",
        "-Wextra",
        "-Wno-unused-parameter",
        "-Wno-missing-field-initializers",
        "-fvisibility=hidden",
    ]
    + (["-Werror"] if os.environ.get("PYGPU_WERROR") == "1" else []),
    libraries=["dl"],
)

setup(
    # kernels/, its libc/ shims and the stand-in's C sources: data folders
    # inside the package (named as packages, so setuptools ships them
    # without its ambiguity warning)
    packages=find_packages(include=["pygpu", "pygpu.*"])
    + ["pygpu.kernels", "pygpu.kernels.libc", "pygpu.testing.csrc"],
    package_dir={"pygpu.kernels": "kernels", "pygpu.kernels.libc": "kernels/libc"},
    package_data={
        "pygpu": ["py.typed", "*.pyi"],
        "pygpu.kernels": ["*.cu", "*.cuh"],
        "pygpu.kernels.libc": ["*"],
        "pygpu.testing.csrc": ["*.c", "*.h"],
    },
    ext_modules=[ext],
    cmdclass={"build_ext": BuildExt},
)
