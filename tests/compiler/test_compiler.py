"""NVRTC compilation and the cache: no GPU needed."""

import multiprocessing
import os
import re
import warnings

import pytest

from pygpu import compiler
from pygpu.compiler import CompileError, compile

SAXPY = r"""
extern "C" __global__ void saxpy(float a, const float *x, float *y, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}
"""


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_cubin(arch, tmp_cache):
    b = compile(SAXPY, arch=arch)
    assert bytes(b[:4]) == b"\x7fELF"
    assert b.target == "cubin" and b.arch == arch


@pytest.mark.parametrize("arch", ["compute_80", "compute_90"])
def test_ptx(arch, tmp_cache):
    b = compile(SAXPY, arch=arch)
    text = bytes(b).decode()
    assert b.target == "ptx"
    assert ".target sm_%s" % arch.split("_")[1] in text
    assert ".entry saxpy" in text


def test_ptx_for_a_real_arch_when_asked(tmp_cache):
    b = compile(SAXPY, arch="sm_90", target="ptx")
    assert b".target sm_90" in bytes(b)


def test_no_flag_is_forced(tmp_cache):
    src = 'extern "C" __global__ void k(float *x) { x[0] = x[1] * x[2]; }'
    plain = bytes(compile(src, arch="compute_80")).decode()
    fast = bytes(compile(src, arch="compute_80", fast_math=True)).decode()
    assert "mul.f32" in plain and ".ftz" not in plain
    assert "mul.ftz.f32" in fast


def test_name_expressions(tmp_cache):
    src = "template <typename T> __global__ void scale(T *x, T a) { x[threadIdx.x] *= a; }"
    b = compile(src, arch="sm_80", name_expressions=["scale<float>", "scale<double>"])
    assert b.lowered_names == {
        "scale<float>": "_Z5scaleIfEvPT_S0_",
        "scale<double>": "_Z5scaleIdEvPT_S0_",
    }
    ptx = compile(src, arch="compute_80", name_expressions=["scale<float>"])
    assert b"_Z5scaleIfEvPT_S0_" in bytes(ptx)


def test_syntax_error_shows_the_line(tmp_cache):
    src = "__global__ void k(float *x)\n{\n    x[0] = 1.0f +;\n}\n"
    with pytest.raises(CompileError) as ei:
        compile(src, arch="sm_80")
    e = ei.value
    msg = str(e)
    assert "kernel.cu(3): error" in msg
    assert "->    3 |     x[0] = 1.0f +;" in msg
    assert "error" in e.log and e.source == src
    assert "--gpu-architecture=sm_80" in e.options


def test_bad_option_is_a_compile_error(tmp_cache):
    with pytest.raises(CompileError, match="NVRTC_ERROR_INVALID_OPTION"):
        compile(SAXPY, arch="sm_80", options=["--no-such-flag"])


def test_warnings_become_python_warnings(tmp_cache):
    src = 'extern "C" __global__ void k(float *x) { int unused; x[0] = 1.0f; }'
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        compile(src, arch="sm_80")
    # NVRTC's default warns on a declared-but-unreferenced variable
    assert any(
        issubclass(x.category, compiler.CompilerWarning) and "unused" in str(x.message) for x in w
    ), [str(x.message) for x in w]


def test_bad_arguments(tmp_cache):
    with pytest.raises(ValueError, match="arch must look like"):
        compile(SAXPY, arch="hopper")
    with pytest.raises(ValueError, match="real architecture"):
        compile(SAXPY, arch="compute_90", target="cubin")
    with pytest.raises(ValueError, match="target must be"):
        compile(SAXPY, arch="sm_90", target="sass")
    with pytest.raises(TypeError, match="source must be a str"):
        compile(b"bytes", arch="sm_90")


def test_defines_std_and_includes(tmp_path, tmp_cache):
    inc = tmp_path / "inc"
    inc.mkdir()
    (inc / "scale.cuh").write_text("#define SCALE 3.0f\n")
    src = '#include "scale.cuh"\nextern "C" __global__ void k(float *x) { x[0] = SCALE * OFFSET; }'
    b = compile(
        src, arch="compute_80", include_dirs=[str(inc)], defines={"OFFSET": "2.0f"}, std="c++17"
    )
    assert has_float(b, 6.0)  # SCALE * OFFSET folded


def test_editing_an_included_header_changes_the_result(tmp_path, tmp_cache):
    inc = tmp_path / "inc"
    inc.mkdir()
    h = inc / "k.cuh"
    h.write_text("#define VALUE 1.5f\n")
    src = '#include "k.cuh"\nextern "C" __global__ void k(float *x) { x[0] = VALUE; }'
    first = compile(src, arch="compute_80", include_dirs=[str(inc)])
    assert has_float(first, 1.5)
    h.write_text("#define VALUE 2.5f  \n")  # new size and mtime
    second = compile(src, arch="compute_80", include_dirs=[str(inc)])
    assert has_float(second, 2.5) and not has_float(second, 1.5)
    # a nested header, reached through -I in the options
    (inc / "outer.cuh").write_text('#include "inner.cuh"\n')
    inner = inc / "inner.cuh"
    inner.write_text("#define W 4.0f\n")
    src2 = '#include "outer.cuh"\nextern "C" __global__ void k(float *x) { x[0] = W; }'
    a = compile(src2, arch="compute_80", options=["-I" + str(inc)])
    inner.write_text("#define W 8.0f\n")
    b = compile(src2, arch="compute_80", options=["-I" + str(inc)])
    assert has_float(a, 4.0) and has_float(b, 8.0)


def has_float(binary, value):
    """Whether PTX stores the float32 constant value (as 0fXXXXXXXX or as
    its integer bits)."""
    import struct

    bits = struct.unpack("<I", struct.pack("<f", value))[0]
    text = bytes(binary).decode()
    return ("0f%08X" % bits) in text or re.search(r"\b%d\b" % bits, text) is not None


def _entry_files(d):
    return sorted(str(p) for p in d.rglob("*.bin"))


def test_disk_cache_hit_and_damaged_entries(tmp_cache):
    b = compile(SAXPY, arch="sm_90")
    files = _entry_files(tmp_cache)
    assert len(files) == 1
    compiler.clear_cache(disk=False)
    before = compiler.cache_info()["disk_hits"]
    again = compile(SAXPY, arch="sm_90")
    assert bytes(again) == bytes(b)
    assert compiler.cache_info()["disk_hits"] == before + 1
    # truncated
    with open(files[0], "r+b") as f:
        f.truncate(50)
    compiler.clear_cache(disk=False)
    n = compiler.cache_info()["compiles"]
    c = compile(SAXPY, arch="sm_90")
    assert compiler.cache_info()["compiles"] == n + 1
    assert bytes(c) == bytes(b)
    # one flipped byte in the image
    data = bytearray(open(files[0], "rb").read())
    data[-10] ^= 0xFF
    open(files[0], "wb").write(bytes(data))
    compiler.clear_cache(disk=False)
    d = compile(SAXPY, arch="sm_90")
    assert compiler.cache_info()["compiles"] == n + 2
    assert bytes(d) == bytes(b)
    # rewritten whole
    compiler.clear_cache(disk=False)
    compile(SAXPY, arch="sm_90")
    assert compiler.cache_info()["compiles"] == n + 2


def test_cache_can_be_turned_off(tmp_cache, monkeypatch):
    compile(SAXPY, arch="sm_80", cache_dir=False)
    assert _entry_files(tmp_cache) == []
    monkeypatch.setenv("PYGPU_DISABLE_CACHE", "1")
    compile(SAXPY, arch="sm_86")
    assert _entry_files(tmp_cache) == []


def test_cache_key_covers_options_and_arch(tmp_cache):
    compile(SAXPY, arch="sm_80")
    compile(SAXPY, arch="sm_90")
    compile(SAXPY, arch="sm_90", options=["-lineinfo"])
    assert len(_entry_files(tmp_cache)) == 3


def test_size_cap_evicts_least_recently_used(tmp_cache, monkeypatch):
    compile(SAXPY, arch="sm_80")
    old = _entry_files(tmp_cache)[0]
    monkeypatch.setenv("PYGPU_CACHE_SIZE", str(os.path.getsize(old) + 100))
    os.utime(old, (1, 1))
    compile(SAXPY, arch="sm_90")
    files = _entry_files(tmp_cache)
    assert len(files) == 1 and files[0] != old


def test_cache_debug_says_why(tmp_cache, monkeypatch, capsys):
    monkeypatch.setenv("PYGPU_CACHE_DEBUG", "1")
    compile(SAXPY, arch="sm_75")
    err = capsys.readouterr().err
    assert "not in memory" in err and "no entry at" in err


def test_cache_info_and_clear(tmp_cache):
    compile(SAXPY, arch="sm_80")
    info = compiler.cache_info()
    assert info["dir"] == str(tmp_cache) and info["disk_entries"] == 1
    assert info["disk_bytes"] > 0 and info["memory_entries"] >= 1
    compiler.clear_cache()
    info = compiler.cache_info()
    assert info["disk_entries"] == 0 and info["memory_entries"] == 0


def _compile_in_child(args):
    cache_dir, src = args
    os.environ["PYGPU_CACHE_DIR"] = cache_dir
    from pygpu.compiler import compile as c

    return bytes(c(src, arch="sm_90"))


def test_eight_processes_compiling_at_once(tmp_path):
    d = str(tmp_path / "shared-cache")
    src = SAXPY + "\n// unique %d\n" % os.getpid()
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(8) as pool:
        results = pool.map(_compile_in_child, [(d, src)] * 8)
    assert len(set(results)) == 1 and results[0][:4] == b"\x7fELF"
    root = tmp_path / "shared-cache"
    entries = list(root.rglob("*.bin"))
    assert len(entries) == 1, entries
    assert list(root.rglob(".tmp-*")) == []  # no torn writes left behind


def test_nvrtc_version_and_archs():
    major, minor = compiler.nvrtc_version()
    assert major >= 12
    assert 80 in compiler.supported_archs() and 90 in compiler.supported_archs()


def test_disk_hit_in_a_new_process_does_not_open_nvrtc(tmp_path):
    import json
    import subprocess
    import sys

    d = tmp_path / "c"
    code = (
        "import pygpu.compiler as c; b = c.compile(%r, arch='sm_90'); "
        "print(c._nvrtc_path is None, c.cache_info()['disk_hits'])" % SAXPY
    )
    env = dict(os.environ, PYGPU_CACHE_DIR=str(d))
    first = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert first.stdout.split() == ["False", "0"], first.stderr
    second = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert second.stdout.split() == ["True", "1"], second.stderr
    # a record whose library file changed is not trusted
    rec = next(d.glob("nvrtc-*.json"))
    meta = json.loads(rec.read_text())
    meta["sig"][0] += 1
    rec.write_text(json.dumps(meta))
    third = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert third.stdout.split() == ["False", "1"], third.stderr
