"""The C floors of compiling (NVRTC) and linking (nvJitLink) loaded into
the measuring process: floor_tools.c built against the library files pygpu
itself loaded (read from /proc/self/maps), and a paired, interleaved timer.
"""

import ctypes
import os
import statistics
import subprocess

HERE = os.path.dirname(os.path.abspath(__file__))


def loaded_library(fragment):
    """The path of the loaded shared library whose name contains fragment."""
    with open("/proc/self/maps") as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 6 and fragment in os.path.basename(parts[-1]):
                return parts[-1]
    raise RuntimeError("no library named like %r is loaded" % fragment)


def build_tools(cuda_root):
    """floor_tools.c as a ctypes library, linked against the NVRTC and
    nvJitLink pygpu loaded (it loads both first); (lib, nvrtc path,
    nvJitLink path)."""
    from pygpu import compiler, linking

    compiler.compile('extern "C" __global__ void warm() {}', arch="sm_90", cache_dir=False)
    linking._ensure_nvjitlink()
    nvrtc, jl = loaded_library("libnvrtc.so"), loaded_library("libnvJitLink")
    build = os.path.join(HERE, "build")
    os.makedirs(build, exist_ok=True)
    so = os.path.join(build, "floor_tools.so")
    subprocess.run(
        [
            "cc",
            "-O2",
            "-shared",
            "-fPIC",
            "-o",
            so,
            os.path.join(HERE, "floor_tools.c"),
            "-I" + os.path.join(cuda_root, "include"),
            nvrtc,
            jl,
            "-Wl,-rpath," + os.path.dirname(nvrtc),
            "-Wl,-rpath," + os.path.dirname(jl),
        ],
        check=True,
    )
    lib = ctypes.CDLL(so)
    lib.nvrtc_cubin_once.restype = ctypes.c_double
    lib.nvrtc_cubin_once.argtypes = [ctypes.c_char_p, ctypes.c_char_p]
    lib.jl_lto_once.restype = ctypes.c_double
    lib.jl_lto_once.argtypes = [
        ctypes.c_char_p,
        ctypes.c_size_t,
        ctypes.c_char_p,
        ctypes.c_size_t,
        ctypes.c_char_p,
    ]
    return lib, nvrtc, jl


def paired(c_once, py_once, rounds, per=3, warm=5):
    """Seconds: (median of the C calls, median of C + the per-round
    difference pygpu - C).  Each round runs per C calls, then per pygpu
    calls; warm calls of each first."""
    for _ in range(warm):
        c_once()
        py_once()
    cs, diffs = [], []
    for _ in range(rounds):
        c = statistics.median(c_once() for _ in range(per))
        p = statistics.median(py_once() for _ in range(per))
        cs.append(c)
        diffs.append(p - c)
    c = statistics.median(cs)
    return c, c + statistics.median(diffs)
