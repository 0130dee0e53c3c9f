"""The opt-in nvcc back end (compiler="nvcc", PYGPU_COMPILER=nvcc): it
compiles with the toolkit's nvcc, caches (keyed by the back end), and fails
as NVRTC does, with a CompileError.  No GPU needed: cubins for sm_90."""

import os
import struct
import subprocess
import sys

import pytest

from pygpu import _nvcc, compiler, store
from pygpu.compiler import CompileError, SourceModule

NVCC = _nvcc.find()
# under make sanitize the compiles' nvcc inherits AddressSanitizer's
# LD_PRELOAD, and its own tools (cicc, ptxas) crash with it: what these
# tests check is not pygpu's memory safety, and the plain make test runs them
SANITIZED = "libasan" in os.environ.get("LD_PRELOAD", "")
needs_nvcc = pytest.mark.skipif(
    NVCC is None or SANITIZED,
    reason="no nvcc (the CUDA toolkit) found"
    if NVCC is None
    else "under AddressSanitizer's LD_PRELOAD nvcc's tools crash (make sanitize)",
)

# compiles only under nvcc: the host compiler's macros, a host header's
# C++ library (std::numeric_limits is constexpr: usable in device code),
# and nvcc's implicit names (uint) with no prelude
HOST = r"""
#ifndef __GNUC__
#error "not compiled by nvcc with GCC as the host compiler"
#endif
#include <limits>
#include <cstdint>
__global__ void k(uint *o, std::uint64_t n)
{
    static_assert(std::numeric_limits<int>::digits == 31, "");
    o[0] = (uint)(n + INT_MAX);
}
"""


def _elf_arch(cubin):
    assert bytes(cubin[:4]) == b"\x7fELF"
    return (struct.unpack_from("<I", cubin, 0x30)[0] >> 8) & 0xFF


@pytest.fixture
def no_nvcc_runs(monkeypatch):
    """Any run of nvcc (a compile or --version) from now on fails the test."""

    def refuse(*a, **kw):
        raise AssertionError("nvcc was run: %r" % (a,))

    monkeypatch.setattr(_nvcc.subprocess, "run", refuse)


@needs_nvcc
def test_compiles_what_needs_the_host_toolchain(tmp_cache):
    b = compiler.compile(HOST, arch="sm_90", compiler="nvcc")
    assert type(b) is compiler.Binary and b.target == "cubin" and b.arch == "sm_90"
    assert _elf_arch(b) == 90 and b"_Z1kPjm" in b  # C++ linkage, as compile() gives it
    # NVRTC cannot: the host compiler's macro is not there
    with pytest.raises(CompileError, match="not compiled by nvcc"):
        compiler.compile(HOST, arch="sm_90")
    ptx = compiler.compile(HOST, arch="compute_90", compiler="nvcc", extern_c=True)
    assert ptx.target == "ptx" and b".entry k(" in bytes(ptx)


@needs_nvcc
def test_pycudas_complex_header_and_the_hosts_own_headers(tmp_cache):
    # <pycuda-complex.hpp> from kernels/libc; <stdio.h> and <inttypes.h> the
    # host's (glibc's PRId64 is "ld": pygpu's shim would say "lld")
    src = (
        "#include <pycuda-complex.hpp>\n#include <stdio.h>\n#include <inttypes.h>\n"
        "__global__ void k(pycuda::complex<float> *z, int64_t v)\n"
        '{ z[0] = z[0] * z[0]; printf("%" PRId64 "\\n", v); }\n'
    )
    b = compiler.compile(src, arch="sm_90", target="ptx", compiler="nvcc", extern_c=True)
    fmt = ", ".join(str(c) for c in b"%ld\n")
    assert fmt.encode() in bytes(b)


@needs_nvcc
def test_pycuda_compile_runs_the_nvcc_it_names(tmp_cache):
    src = "__global__ void k(uint *o) { o[0] = 1; }"
    cubin = compiler.compile(src, NVCC, options=["-arch=sm_90"], compiler="nvcc")
    assert type(cubin) is bytes and _elf_arch(cubin) == 90 and b"\0k\0" in cubin  # extern "C"
    with pytest.raises(CompileError, match="nvcc was not found; tried: /nonexistent/nvcc"):
        compiler.compile(src, "/nonexistent/nvcc", options=["-arch=sm_90"], compiler="nvcc")


@needs_nvcc
def test_the_second_compile_is_a_cache_hit(tmp_cache, monkeypatch):
    b = compiler.compile(HOST, arch="sm_90", compiler="nvcc")
    compiles, misses = store.stats["compiles"], store.stats["misses"]

    def refuse(*a, **kw):
        raise AssertionError("nvcc was run: %r" % (a,))

    monkeypatch.setattr(_nvcc.subprocess, "run", refuse)
    assert compiler.compile(HOST, arch="sm_90", compiler="nvcc") == b  # memory
    compiler.clear_cache(disk=False)
    monkeypatch.setattr(_nvcc, "_versions", {})  # as a new process: version from the record
    again = compiler.compile(HOST, arch="sm_90", compiler="nvcc")  # disk
    assert again == b and again.target == "cubin" and again.arch == "sm_90"
    assert store.stats["compiles"] == compiles and store.stats["misses"] == misses


@needs_nvcc
def test_the_cache_is_keyed_by_the_back_end(tmp_cache):
    src = "extern \"C\" __global__ void k(int *o) { o[0] = 7; }"
    by_nvcc = compiler.compile(src, arch="sm_90", compiler="nvcc")
    misses = store.stats["misses"]
    by_nvrtc = compiler.compile(src, arch="sm_90")  # not nvcc's binary
    assert store.stats["misses"] == misses + 1
    assert compiler.compile(src, arch="sm_90", compiler="nvcc") == by_nvcc
    assert compiler.compile(src, arch="sm_90", compiler="nvrtc") == by_nvrtc
    assert store.stats["misses"] == misses + 1
    assert b"nvcc" not in by_nvrtc or by_nvcc != by_nvrtc


@needs_nvcc
def test_errors_are_compile_errors_with_nvccs_log(tmp_cache):
    src = "__global__ void k(int *o)\n{\n    o[0] = undefined_name;\n}\n"
    with pytest.raises(CompileError) as ei:
        compiler.compile(src, arch="sm_90", compiler="nvcc")
    e = ei.value
    assert 'identifier "undefined_name" is undefined' in e.log
    assert "kernel.cu(3): error" in e.log and "pygpu-nvcc-" not in e.log
    text = str(e)
    assert text.startswith("nvcc compilation failed:") and "->    3 |" in text
    assert e.command_line[0] == NVCC and e.routine == "nvcc"
    # SourceModule's wrapper keeps the user's line numbers
    with pytest.raises(CompileError, match=r"kernel\.cu\(3\): error"):
        compiler.compile(src, arch="sm_90", compiler="nvcc", extern_c=True)
    # an option nvcc does not know
    with pytest.raises(CompileError, match="nvcc compilation failed"):
        compiler.compile(src, arch="sm_90", compiler="nvcc", options=["--no-such-option"])


def test_nvcc_missing_is_a_clear_error(tmp_cache, monkeypatch):
    monkeypatch.setattr(_nvcc, "find", lambda nvcc=None, environ=None: None)
    with pytest.raises(CompileError) as ei:
        compiler.compile("__global__ void k() {}", arch="sm_90", compiler="nvcc")
    msg = str(ei.value)
    assert "nvcc was not found; tried: " in msg and "/usr/local/cuda/bin/nvcc" in msg
    assert "compiler='nvrtc'" in msg and "CUDA_HOME" in msg
    # NVRTC, the default, does not need it
    compiler.compile("__global__ void k() {}", arch="sm_90")


def test_the_back_end_is_chosen_by_argument_then_environment(monkeypatch):
    monkeypatch.delenv("PYGPU_COMPILER", raising=False)
    assert _nvcc.backend() == "nvrtc" and _nvcc.backend("nvcc") == "nvcc"
    monkeypatch.setenv("PYGPU_COMPILER", "NVCC")
    assert _nvcc.backend() == "nvcc" and _nvcc.backend("nvrtc") == "nvrtc"
    # NVRTC's lowered names keep a compile with NVRTC when only the
    # environment asked for nvcc
    assert compiler._backend(None, ["k<int>"]) == "nvrtc"
    assert compiler._backend("nvcc", ["k<int>"]) == "nvcc"
    monkeypatch.setenv("PYGPU_COMPILER", "clang")
    with pytest.raises(ValueError, match=r"\$PYGPU_COMPILER'clang': the compiler must be"):
        _nvcc.backend()
    with pytest.raises(ValueError, match="compiler='gcc': the compiler must be"):
        compiler.compile("__global__ void k() {}", arch="sm_90", compiler="gcc")


@needs_nvcc
def test_the_environment_variable_selects_nvcc(tmp_cache, monkeypatch):
    monkeypatch.setenv("PYGPU_COMPILER", "nvcc")
    b = compiler.compile(HOST, arch="sm_90")
    assert _elf_arch(b) == 90
    # name_expressions (NVRTC's): still NVRTC
    t = "template <typename T> __global__ void tk(T *o) { o[0] = T(1); }"
    b = compiler.compile(t, arch="sm_90", name_expressions=["tk<float>"])
    assert b.lowered_names["tk<float>"].startswith("_Z")
    with pytest.raises(ValueError, match="name_expressions are NVRTC's"):
        compiler.compile(t, arch="sm_90", name_expressions=["tk<float>"], compiler="nvcc")
    with pytest.raises(ValueError, match="target='ltoir' is NVRTC's"):
        compiler.compile(HOST, arch="sm_90", target="ltoir", compiler="nvcc")


@needs_nvcc
@pytest.mark.standin
def test_sourcemodule_with_nvcc(standin, ctx, tmp_cache):
    # the stand-in's device: arch from nvcc's list, as compile() picks it
    mod = SourceModule(HOST.replace("std::uint64_t n", "unsigned long n"), compiler="nvcc")
    assert mod.binary.target in ("cubin", "ptx")
    assert b"\0k\0" in bytes(mod.binary) or b".entry k(" in bytes(mod.binary)
    mod.get_function("k")
    again = SourceModule(HOST.replace("std::uint64_t n", "unsigned long n"), compiler="nvcc")
    assert again.binary == mod.binary
    with pytest.raises(CompileError, match="not compiled by nvcc"):
        SourceModule(HOST)  # NVRTC: another key, another compiler


@needs_nvcc
def test_python_m_pygpu_reports_nvcc():
    version = _nvcc.version(NVCC)
    env = dict(os.environ, PYGPU_COMPILER="nvcc")
    r = subprocess.run(
        [sys.executable, "-m", "pygpu"], capture_output=True, text=True, env=env, timeout=300
    )
    assert "nvcc: %s, %s" % (version[2], NVCC) in r.stdout, r.stdout
    assert "kernels compile with nvcc (PYGPU_COMPILER=nvcc)" in r.stdout, r.stdout


@needs_nvcc
def test_get_nvcc_version_asks_nvcc_when_it_compiles(monkeypatch):
    monkeypatch.delenv("PYGPU_COMPILER", raising=False)
    assert "NVRTC" in compiler.get_nvcc_version()
    monkeypatch.setenv("PYGPU_COMPILER", "nvcc")
    out = compiler.get_nvcc_version()
    assert "Cuda compilation tools" in out and _nvcc.version(NVCC)[2] in out
