"""Device helpers compiled as host C++, for CPU tests of what a kernel
computes (no GPU here): kernels/elementwise.cuh with __device__ defined
away, plus the test's own extern "C" functions, built into a shared
library and loaded with ctypes.  The helpers use only IEEE operations that
the host and the device both round exactly (fmod, floor, copysign, + - /
correctly rounded, no contraction into FMAs), so the host's answers are
the device's; the gpu tests check the device itself."""

import ctypes
import os
import shutil
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HEADER = os.path.join(ROOT, "kernels", "elementwise.cuh")

PRELUDE = """
#include <cmath>
#include <cstddef>
#define __device__
"""


def build(tmp_path, source, name="host"):
    """source (C++, after elementwise.cuh) built into a shared library in
    tmp_path: a ctypes.CDLL; the test skips where there is no C++ compiler."""
    cxx = os.environ.get("CXX") or shutil.which("c++") or shutil.which("g++")
    if cxx is None:
        pytest.skip("no C++ compiler here")
    src = tmp_path / ("%s.cpp" % name)
    src.write_text(PRELUDE + '#include "%s"\n' % HEADER + source)
    lib = tmp_path / ("lib%s.so" % name)
    r = subprocess.run(
        [cxx, "-O2", "-ffp-contract=off", "-shared", "-fPIC", "-o", str(lib), str(src)],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stderr
    return ctypes.CDLL(str(lib))
