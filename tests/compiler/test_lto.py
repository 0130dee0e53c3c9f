"""Link-time optimization and nvJitLink (issue 15): compile(target='ltoir')
and relocatable device code, pygpu.linking.Linker over nvJitLink (or the
driver's cuLink*), the cache of linked results, the NVRTC libc headers and
PyCUDA's remaining driver-side names.

CPU: nvJitLink needs no GPU, so LTO across two separately compiled files
runs here down to a checked ELF cubin (and the PTX route).  GPU: the linked
kernels run and are checked against NumPy; printf and assert in a kernel.
"""

import os
import struct
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import pygpu.driver as cuda
from pygpu import compiler, linking, tools
from pygpu.linking import Linker, LinkError

HAS_JL = linking.nvjitlink_available()
needs_jl = pytest.mark.skipif(not HAS_JL, reason="no nvJitLink (libnvJitLink) here")

# one file defines a device function and a device variable, the other uses them
LIB = r"""
__device__ float scale = 1.0f;
__device__ float affine(float x, float a) { return a * x + scale; }
"""
APP = r"""
extern __device__ float scale;
extern __device__ float affine(float x, float a);
extern "C" __global__ void scale_add(float *y, const float *x, float a, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        y[i] = affine(x[i], a) + y[i];
}
"""


def _elf_symbols(image):
    """The names in an ELF image's symbol tables (a minimal reader)."""
    assert image[:4] == b"\x7fELF" and image[4] == 2  # 64-bit
    (shoff,) = struct.unpack_from("<Q", image, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", image, 0x3A)
    secs = [struct.unpack_from("<IIQQQQIIQQ", image, shoff + i * shentsize) for i in range(shnum)]
    names = set()
    for s in secs:
        if s[1] == 2:  # SHT_SYMTAB
            strtab = secs[s[6]]
            for off in range(s[4], s[4] + s[5], 24):
                (name_off,) = struct.unpack_from("<I", image, off)
                start = strtab[4] + name_off
                names.add(image[start : image.index(b"\0", start)].decode())
    return names


def _ltoir(src, cache_dir=False, **kw):
    return compiler.compile(src, arch="sm_90", target="ltoir", cache_dir=cache_dir, **kw)


# ---- compile(): LTO-IR and relocatable device code ----


def test_compile_ltoir():
    b = _ltoir(LIB)
    assert b.target == "ltoir" and b.arch == "sm_90"
    assert len(b) > 100 and b[:4] != b"\x7fELF" and not b.startswith(b"//")
    # the same bytes again from the cache (a Binary with its target)
    assert _ltoir(LIB) == b


def test_rdc_makes_extern_device_code_linkable():
    ptx = bytes(
        compiler.compile(APP, arch="compute_90", target="ptx", rdc=True, cache_dir=False)
    ).decode()
    assert ".extern .func  (.param .b32 func_retval0) _Z6affineff" in ptx
    # without -rdc, the call cannot be left for a linker
    with pytest.raises(
        compiler.CompileError,
        match=r"Unresolved extern function "
        r"'_Z6affineff'",
    ):
        compiler.compile(APP, arch="sm_90", target="cubin", cache_dir=False)


def test_compile_target_errors():
    with pytest.raises(
        ValueError,
        match=r"target must be 'cubin', 'ptx' or 'ltoir', "
        r"not 'elf'",
    ):
        compiler.compile(LIB, arch="sm_90", target="elf")


# ---- the Linker over nvJitLink ----


@needs_jl
def test_lto_across_two_files_gives_a_cubin(tmp_path):
    a, b = _ltoir(LIB), _ltoir(APP)
    seen = []
    L = Linker(
        arch="sm_90", lto=True, cache_dir=tmp_path, message_handler=lambda *m: seen.append(m)
    )
    cubin = L.add(a, name="lib.ltoir").add(b, name="app.ltoir").link()
    assert L.used_backend == "nvjitlink" and not L.from_cache
    assert cubin.target == "cubin" and cubin.arch == "sm_90"
    assert cubin[:4] == b"\x7fELF" and struct.unpack_from("<H", cubin, 0x12)[0] == 190
    syms = _elf_symbols(bytes(cubin))
    assert "scale_add" in syms and "scale" in syms
    assert seen == [(True, L.info_log, L.error_log)]
    # the PTX route: nvJitLink writes the whole program as PTX after LTO
    ptx = Linker(arch="sm_90", lto=True, target="ptx", cache_dir=False).add(a).add(b).link()
    text = bytes(ptx).decode()
    assert ptx.target == "ptx" and ".visible .entry scale_add(" in text
    assert ".extern" not in text and "_Z6affineff" not in text  # resolved and inlined


@needs_jl
def test_link_from_files_and_kinds(tmp_path):
    (tmp_path / "lib.ltoir").write_bytes(_ltoir(LIB))
    (tmp_path / "app.lto").write_bytes(_ltoir(APP))
    cubin = linking.link(
        [tmp_path / "lib.ltoir", str(tmp_path / "app.lto")], arch=90, lto=True, cache_dir=False
    )
    assert "scale_add" in _elf_symbols(bytes(cubin))
    # relocatable PTX and the device runtime library, through nvJitLink
    outer = compiler.compile(
        'extern "C" __global__ void inner(int *p);\n'
        'extern "C" __global__ void outer(int *p) '
        '{ inner<<<1, 1>>>(p); }',
        arch="compute_90",
        target="ptx",
        rdc=True,
        cache_dir=False,
    )
    inner = compiler.compile(
        'extern "C" __global__ void inner(int *p) { *p = 7; }',
        arch="compute_90",
        target="ptx",
        rdc=True,
        cache_dir=False,
    )
    try:
        devrt = linking.find_stdlib("cudadevrt")
    except FileNotFoundError:
        pytest.skip("no libcudadevrt.a here")
    cubin = Linker(arch="sm_90", cache_dir=False).add(outer).add(inner).add_file(devrt).link()
    assert {"outer", "inner"} <= _elf_symbols(bytes(cubin))
    with pytest.raises(
        ValueError,
        match=r"cannot tell the kind of '.*x\.bin' from its "
        r"suffix; pass input_type",
    ):
        Linker(arch=90).add_file(tmp_path / "x.bin")
    with pytest.raises(FileNotFoundError, match=r"nope\.ltoir"):
        Linker(arch=90).add_file(tmp_path / "nope.ltoir")


@needs_jl
def test_link_errors_carry_the_log():
    b = _ltoir(APP)
    with pytest.raises(
        LinkError,
        match=r"(?s)nvJitLinkComplete failed: "
        r"NVJITLINK_ERROR_PTX_COMPILE\nnvJitLink error log:"
        r"\n.*Unresolved extern function '_Z6affineff'",
    ) as e:
        Linker(arch="sm_90", lto=True, cache_dir=False).add(b, name="app.ltoir").link()
    assert e.value.routine == "nvJitLinkComplete" and e.value.code == 4
    assert e.value.name == "NVJITLINK_ERROR_PTX_COMPILE" and "_Z6affineff" in e.value.log
    assert isinstance(e.value, cuda.Error)
    with pytest.raises(
        LinkError,
        match=r"nvJitLinkAddData failed: NVJITLINK_ERROR_\w+; "
        r"input junk\.ltoir",
    ) as e:
        Linker(arch="sm_90", lto=True, cache_dir=False).add(
            b"not LTO-IR at all", "ltoir", "junk.ltoir"
        ).link()
    assert e.value.input == "junk.ltoir"
    with pytest.raises(
        LinkError,
        match=r"nvJitLinkCreate failed: "
        r"NVJITLINK_ERROR_UNRECOGNIZED_OPTION",
    ):
        Linker(arch="sm_90", options=["-no-such-option"], cache_dir=False).add(b).link()
    with pytest.raises(ValueError, match=r"the ltoir input e is empty"):
        Linker(arch=90).add(b"", "ltoir", "e")
    with pytest.raises(ValueError, match=r"input_type 'elf' is not one of cubin, ptx, ltoir"):
        Linker(arch=90).add(b"x", "elf")
    with pytest.raises(ValueError, match=r"pass input_type \(one of cubin"):
        Linker(arch=90).add(b"x")
    with pytest.raises(TypeError, match=r"takes bytes; encode PTX text first"):
        Linker(arch=90).add("text", "ptx")
    with pytest.raises(
        ValueError,
        match=r"the PTX input p is not text \(a NUL byte at "
        r"offset 1\)",
    ):
        Linker(arch=90).add(b"a\0b", "ptx", "p")
    with pytest.raises(cuda.LogicError, match=r"Linker.link\(\): nothing to link"):
        Linker(arch=90).link()
    with pytest.raises(
        LinkError,
        match=r"Linker\(backend='driver'\): an LTO-IR input needs "
        r"nvJitLink; the driver's linker \(cuLink\*\) takes no "
        r"LTO-IR",
    ):
        Linker(arch=90, backend="driver").add(b).link()
    with pytest.raises(
        ValueError,
        match=r"backend must be None, 'nvjitlink' or 'driver', "
        r"not 'nvcc'",
    ):
        Linker(backend="nvcc")
    with pytest.raises(ValueError, match=r"target='ptx' needs lto=True"):
        Linker(target="ptx")
    with pytest.raises(ValueError, match=r"arch must look like 'sm_90'"):
        Linker(arch="gfx90a")


def test_missing_nvjitlink_is_one_clear_error(tmp_path):
    """Without nvJitLink (here: none of the candidates opens), LTO-IR says it
    needs nvJitLink and where pygpu looked; PTX links through the driver."""
    code = textwrap.dedent("""
        from pygpu import _loader, compiler, linking, driver
        _loader.nvjitlink_candidates = lambda **kw: ["/nonexistent/libnvJitLink.so.13"]
        _loader._pathfinder = None
        b = compiler.compile("__device__ int f() { return 1; }", arch="sm_90",
                             target="ltoir", cache_dir=False)
        try:
            linking.Linker(arch="sm_90", lto=True, cache_dir=False).add(b).link()
        except driver.CudaUnavailableError as e:
            print("ERR", e)
        print("AVAILABLE", linking.nvjitlink_available())
        L = linking.Linker(cache_dir=False).add(b"// ptx", "ptx")
        print("CHOICE", L._choose(None)[0])
    """)
    r = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=dict(os.environ, PYGPU_CACHE_DIR=str(tmp_path)),
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    assert (
        "ERR lto=True needs nvJitLink, which was not found (the driver's linker takes "
        "no LTO-IR): nvJitLink (the CUDA JIT linker library, libnvJitLink.so) was not "
        "found; tried:\n  /nonexistent/libnvJitLink.so.13: "
    ) in r.stdout
    assert "AVAILABLE False" in r.stdout and "CHOICE driver" in r.stdout


def test_nvjitlink_candidates(tmp_path):
    env = {"PYGPU_NVJITLINK": "/x/libnvJitLink.so.13", "CUDA_HOME": str(tmp_path)}
    wheel = tmp_path / "site" / "nvidia" / "cu13" / "lib"
    wheel.mkdir(parents=True)
    (wheel / "libnvJitLink.so.13").write_bytes(b"")
    c = linking._loader.nvjitlink_candidates(env, [str(tmp_path / "site")], with_nvrtc=False)
    assert c[0] == "/x/libnvJitLink.so.13"
    assert c[1] == str(wheel / "libnvJitLink.so.13")
    assert c.index("libnvJitLink.so.13") < c.index(str(tmp_path / "lib64" / "libnvJitLink.so.13"))
    assert c[-1] == "/usr/local/cuda/lib64/libnvJitLink.so"


# ---- the cache of linked results ----


@needs_jl
def test_a_link_with_the_cache_off_is_the_same_link(tmp_path):
    # Linker.link() takes a short path when there is no cache: the same
    # cubin, the same attributes, the handler called, inputs copied at add()
    a, b = _ltoir(LIB), _ltoir(APP)
    seen = []
    off = Linker(arch=(9, 0), lto=True, cache_dir=False, message_handler=lambda *m: seen.append(m))
    mutable = bytearray(a)
    off.add(mutable, "ltoir").add(b)
    mutable[:] = b"\0" * len(mutable)  # changed after add(): not what links
    image = off.link()
    on = Linker(arch="sm_90", lto=True, cache_dir=tmp_path).add(a).add(b)
    cached = on.link()
    assert image == cached and not on.from_cache and not off.from_cache
    assert (image.target, image.arch, image.lowered_names) == ("cubin", "sm_90", {})
    assert off.used_backend == on.used_backend == "nvjitlink"
    assert seen == [(True, off.info_log, off.error_log)] and image.log == off.info_log
    with pytest.raises(LinkError, match="nvJitLinkComplete failed"):
        Linker(arch="sm_90", lto=True, cache_dir=False).add(b).link()


@needs_jl
def test_linked_results_are_cached(tmp_path):
    a, b = _ltoir(LIB), _ltoir(APP)
    first = Linker(arch="sm_90", lto=True, cache_dir=tmp_path).add(a).add(b)
    image = first.link()
    again = Linker(arch="sm_90", lto=True, cache_dir=tmp_path).add(a).add(b)
    assert again.link() == image and again.from_cache
    # anything that changes the result misses: options, arch, an input's bytes
    other = Linker(arch="sm_90", lto=True, options=["-O0"], cache_dir=tmp_path).add(a).add(b)
    other.link()
    assert not other.from_cache
    other = (
        Linker(arch="sm_90", lto=True, cache_dir=tmp_path)
        .add(_ltoir(LIB.replace("1.0f", "2.0f")))
        .add(b)
    )
    assert other.link() != image and not other.from_cache
    # a file input is keyed by its content, not its name
    f = tmp_path / "lib.ltoir"
    f.write_bytes(a)
    L = Linker(arch="sm_90", lto=True, cache_dir=tmp_path).add_file(f).add(b)
    before = L.link()
    f.write_bytes(_ltoir(LIB.replace("1.0f", "3.0f")))
    os.utime(f, ns=(1, 1))
    L2 = Linker(arch="sm_90", lto=True, cache_dir=tmp_path).add_file(f).add(b)
    assert L2.link() != before and not L2.from_cache


@needs_jl
def test_a_cache_hit_in_a_new_process_loads_no_library(tmp_path):
    """The compile and the link of a cached program, in a fresh process:
    every step a hit, neither NVRTC nor nvJitLink (nor cuda-pathfinder) loaded."""
    code = textwrap.dedent("""
        import sys, time
        from pygpu import compiler, linking, _driver
        LIB, APP = sys.argv[1], sys.argv[2]
        t0 = time.perf_counter()
        a = compiler.compile(LIB, arch="sm_90", target="ltoir")
        b = compiler.compile(APP, arch="sm_90", target="ltoir")
        t1 = time.perf_counter()
        L = linking.Linker(arch="sm_90", lto=True).add(a).add(b)
        image = L.link()
        t2 = time.perf_counter()
        print(L.from_cache, compiler._nvrtc_path, _driver._nvjitlink_loaded(),
              "cuda.pathfinder" in sys.modules, image[:4] == b"\\x7fELF")
        print("compile x2 %.3f ms, link %.3f ms" % ((t1 - t0) * 1e3, (t2 - t1) * 1e3),
              file=sys.stderr)
    """)
    env = dict(os.environ, PYGPU_CACHE_DIR=str(tmp_path))
    runs = [
        subprocess.run(
            [sys.executable, "-c", code, LIB, APP],
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
        )
        for _ in range(2)
    ]
    assert all(r.returncode == 0 for r in runs), runs[0].stderr + runs[1].stderr
    assert runs[0].stdout.split()[0] == "False"
    assert runs[1].stdout.split() == ["True", "None", "False", "False", "True"], (
        runs[1].stdout + runs[1].stderr
    )


# ---- NVRTC: the C and C++ library headers of kernels written for nvcc ----

HEADERS = [
    "stdio.h",
    "stdint.h",
    "assert.h",
    "math.h",
    "limits.h",
    "cstdio",
    "cstdint",
    "cassert",
    "cmath",
    "climits",
    "cstring",
    "string.h",
    "float.h",
    "cfloat",
    "stddef.h",
    "cstddef",
    "stdlib.h",
    "cstdlib",
    "pycuda-complex.hpp",
]
USES = {
    "stdint.h": "int64_t v = INT64_MAX; uint8_t u = UINT8_MAX; intptr_t p = (intptr_t)y; "
    "y[0] = (float)(v > 0) + u + (float)(p & 1);",
    "cstdint": "std::int32_t v = INT32_MIN; std::uint64_t u = UINT64_C(1); y[0] = v + u;",
    "assert.h": "assert(y != 0);",
    "cassert": "assert(y != 0);",
    "math.h": "y[0] = sinf(y[0]) + (float)M_PI + (isinf(INFINITY) ? 1.f : 0.f) "
    "+ (isnan(NAN) ? 1.f : 0.f) + (float)HUGE_VAL;",
    "cmath": "y[0] = std::sin(y[0]) + std::pow(y[0], 2.0f) + std::fabs(-1.0) "
    "+ (std::isnan(y[0]) ? 1 : 0) + std::fmax(1.0f, y[0]);",
    "limits.h": "y[0] = (float)CHAR_BIT + (float)INT_MAX + (float)LLONG_MIN + (float)UINT_MAX;",
    "climits": "y[0] = (float)SHRT_MAX + (float)LONG_MAX;",
    "float.h": "y[0] = FLT_MAX + FLT_EPSILON + (float)(DBL_MIN > 0);",
    "cfloat": "y[0] = FLT_MIN + (float)DBL_EPSILON;",
    "cstring": "char s[4] = {'a', 'b', 0, 0}; std::memcpy(s + 2, s, 1); "
    "y[0] = (float)(std::strlen(s) + std::memcmp(s, s, 2));",
    "string.h": "char s[3] = {'x', 0, 0}; memset(s, 'y', 1); y[0] = (float)(strlen(s) "
    "+ strcmp(s, \"y\"));",
    "stddef.h": "struct P { int a; double b; }; y[0] = (float)(offsetof(P, b) "
    "+ sizeof(max_align_t)) + (NULL == 0);",
    "cstddef": "std::size_t n = 3; std::ptrdiff_t d = -1; std::nullptr_t z = nullptr; "
    "y[0] = (float)(n + d) + (float)(z == nullptr);",
    "stdio.h": 'printf("%f\\n", y[0]);',
    "cstdio": 'printf("%d\\n", 1);',
    "stdlib.h": "int *p = (int *)malloc(4); free(p);",
    "cstdlib": "int *p = (int *)malloc(4); free(p);",
    # PyCUDA's, on its SourceModule's include path (pow with an int exponent)
    "pycuda-complex.hpp": "pycuda::complex<float> z(y[0], 1.f); z = pow(z, 2) * conj(z); "
    "y[0] = abs(z) + z.real();",
}


@pytest.mark.parametrize("header", HEADERS)
def test_libc_header_compiles_under_nvrtc(header):
    src = '#include <%s>\nextern "C" __global__ void k(float *y) { %s }\n' % (header, USES[header])
    ptx = bytes(compiler.compile(src, arch="compute_90", target="ptx", cache_dir=False))
    assert b".visible .entry k(" in ptx
    if header in ("assert.h", "cassert"):
        assert b"__assertfail" in ptx
        off = bytes(
            compiler.compile(
                "#define NDEBUG\n" + src, arch="compute_90", target="ptx", cache_dir=False
            )
        )
        assert b"__assertfail" not in off
    if header in ("stdio.h", "cstdio"):
        assert b"vprintf" in ptx


def test_every_shim_is_shipped():
    from test_headers import C_HEADERS, CXX_HEADERS, NEWER_CCCL  # each compiled there

    libc = os.path.join(compiler.KERNEL_DIR, "libc")
    # and SourceModule's prelude of what nvcc gives implicitly
    # (test_pycuda_compiler_compat), and pygpu_std.h (CCCL's names in std)
    want = (
        set(HEADERS)
        | set(C_HEADERS)
        | set(CXX_HEADERS)
        | set(NEWER_CCCL)
        | {"pygpu_nvcc.h", "pygpu_std.h"}
    )
    assert sorted(os.listdir(libc)) == sorted(want)


# ---- PyCUDA's remaining names ----


class _FakeDevice:
    """An H100's figures, for the occupancy arithmetic."""

    attrs = {
        "MAX_THREADS_PER_BLOCK": 1024,
        "WARP_SIZE": 32,
        "MAX_THREADS_PER_MULTIPROCESSOR": 2048,
        "MAX_BLOCKS_PER_MULTIPROCESSOR": 32,
        "MAX_REGISTERS_PER_BLOCK": 65536,
        "MAX_SHARED_MEMORY_PER_BLOCK": 49152,
    }

    def get_attribute(self, a):
        return self.attrs[a.name]


def test_device_data_and_occupancy():
    dd = tools.DeviceData(_FakeDevice())
    assert (
        dd.max_threads,
        dd.warp_size,
        dd.warps_per_mp,
        dd.thread_blocks_per_mp,
        dd.registers,
        dd.shared_memory,
    ) == (1024, 32, 64, 32, 65536, 49152)
    assert dd.align(100) == 128 and dd.align(100, 8) == 128 and dd.align_words(8) == 16
    assert dd.align_dtype(5, 4) == 16 and dd.coalesce(17) == 32
    assert [dd.make_valid_tex_channel_count(n) for n in (1, 2, 3, 4)] == [1, 2, 4, 4]
    with pytest.raises(ValueError, match=r"no alignment possible for fetches of size 2"):
        dd.align_bytes(2)
    with pytest.raises(ValueError, match=r"could not enlarge argument"):
        dd.make_valid_tex_channel_count(5)
    occ = tools.OccupancyRecord(dd, 256)
    assert (occ.tb_per_mp, occ.limited_by, occ.warps_per_mp, occ.occupancy) == (8, "warps", 64, 1.0)
    occ = tools.OccupancyRecord(dd, 256, registers=64)  # 16384 regs a block
    assert (occ.tb_per_mp, occ.limited_by, occ.occupancy) == (4, "regs", 0.5)
    occ = tools.OccupancyRecord(dd, 64, shared_mem=20000)  # 20096 bytes a block
    assert (occ.tb_per_mp, occ.limited_by, occ.warps_per_mp) == (2, "smem", 4)
    with pytest.raises(
        ValueError,
        match=r"too many threads: 2048, the device takes at "
        r"most 1024",
    ):
        tools.OccupancyRecord(dd, 2048)
    with pytest.raises(ValueError, match=r"too many registers"):
        tools.OccupancyRecord(dd, 1024, registers=128)
    with pytest.raises(ValueError, match=r"too much shared memory"):
        tools.OccupancyRecord(dd, 32, shared_mem=60000)


def test_pycuda_compiler_names():
    assert issubclass(compiler.SourceModule, compiler.CudaModule)
    assert issubclass(compiler.DynamicModule, compiler.CudaModule)
    assert compiler.get_nvcc_version().startswith("NVRTC %d.%d" % compiler.nvrtc_version())
    ptx = compiler.compile_plain(
        'extern "C" __global__ void k(int *p) { *p = 1; }',
        ["-arch=sm_90", "-O3", "-Xcompiler", "-fPIC"],
        False,
        "nvcc",
        False,
        target="ptx",
    )
    assert b".target sm_90" in ptx and b".visible .entry k(" in ptx
    with pytest.raises(
        ValueError,
        match=r"target must be 'cubin', 'ptx' or 'fatbin', "
        r"not 'ltoir'",
    ):
        compiler.compile_plain("", [], False, "nvcc", False, target="ltoir")
    assert isinstance(compiler.DEFAULT_NVCC_FLAGS, list)
    assert cuda.PointerHolderBase is not None
    assert tools.DeviceMemoryPool.bin_number(1 << 20) == tools.DeviceMemoryPool.bin_number(
        (1 << 20) - 1
    )


# ---- on a GPU ----


@pytest.mark.gpu
def test_gpu_lto_program_runs(ctx, rng):
    """LTO across two files, loaded and launched: every element against NumPy."""
    if not HAS_JL:
        pytest.skip("no nvJitLink")
    major, minor = ctx.get_device().compute_capability()
    arch = "sm_%d%d" % (major, minor)
    a = compiler.compile(LIB, arch=arch, target="ltoir", cache_dir=False)
    b = compiler.compile(APP, arch=arch, target="ltoir", cache_dir=False)
    mod = Linker(lto=True, cache_dir=False).add(a).add(b).load()
    n = 10007
    x = rng.standard_normal(n).astype(np.float32)
    y = rng.standard_normal(n).astype(np.float32)
    want = np.float32(1.5) * x + np.float32(1.0) + y
    mod.get_function("scale_add")(
        cuda.InOut(y),
        cuda.In(x),
        np.float32(1.5),
        np.int32(n),
        block=(256, 1, 1),
        grid=((n + 255) // 256, 1),
    )
    np.testing.assert_allclose(y, want, rtol=1e-6, atol=1e-6)


_GPU_CHILD = """
import sys
import numpy as np
import pygpu.autoinit
import pygpu.driver as cuda
from pygpu.compiler import SourceModule
"""


@pytest.mark.gpu
def test_gpu_printf_reaches_stdout(ctx):
    """printf in a kernel: its lines on the process's fd 1 (read from a child
    process, as the device's buffer is flushed to the C stdout)."""
    code = _GPU_CHILD + textwrap.dedent(r"""
        mod = SourceModule('#include <cstdio>\n__global__ void k(int base)'
                           '{ printf("thread %d says %d\\n", threadIdx.x, base + threadIdx.x); }')
        mod.get_function("k")(np.int32(40), block=(4, 1, 1))
        cuda.Context.synchronize()
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert sorted(ln for ln in r.stdout.splitlines() if ln.startswith("thread")) == [
        "thread %d says %d" % (i, 40 + i) for i in range(4)
    ]


@pytest.mark.gpu
def test_gpu_failed_assert_is_a_launch_error(ctx):
    """A failing assert() in a kernel: the expression on stderr, and a
    LaunchError (CUDA_ERROR_ASSERT) at the next synchronize (in a child
    process: the error is sticky and spoils its context)."""
    code = _GPU_CHILD + textwrap.dedent(r"""
        mod = SourceModule('#include <cassert>\n__global__ void k(int *p)'
                           '{ assert(p[threadIdx.x] < 3); }')
        d = cuda.to_device(np.arange(8, dtype=np.int32))
        mod.get_function("k")(d, block=(8, 1, 1))   # asynchronous: no error yet
        try:
            cuda.Context.synchronize()
        except cuda.LaunchError as e:
            print("LAUNCH_ERROR", e.name, e)
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert "LAUNCH_ERROR CUDA_ERROR_ASSERT" in r.stdout, r.stdout + r.stderr
    assert "p[threadIdx.x] < 3" in r.stderr + r.stdout


@pytest.mark.standin
def test_source_module_hit_in_a_new_process_loads_no_nvrtc(standin, tmp_path):
    """SourceModule for the current device (arch=None) from the disk cache
    in a new process: NVRTC's version and architectures come from the
    cache directory's record, the include directories too, so neither NVRTC
    nor cuda-pathfinder is loaded (before: ~20-60 ms of dlopen and import)."""
    code = textwrap.dedent("""
        import sys
        import pygpu.driver as cuda
        from pygpu import compiler
        cuda.init()
        ctx = cuda.Device(0).retain_primary_context()
        ctx.push()
        m = compiler.SourceModule('__global__ void k(float *y) { y[0] *= 2; }')
        print(compiler.cache_info()["disk_hits"], compiler._nvrtc_path,
              "cuda.pathfinder" in sys.modules)
        ctx.pop()
    """)
    env = dict(os.environ, PYGPU_CACHE_DIR=str(tmp_path))
    runs = [
        subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120
        )
        for _ in range(2)
    ]
    assert all(r.returncode == 0 for r in runs), runs[0].stderr + runs[1].stderr
    assert runs[0].stdout.split()[0] == "0"
    assert runs[1].stdout.split() == ["1", "None", "False"], runs[1].stdout
