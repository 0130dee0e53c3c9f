"""The examples: each compiles its kernels without a GPU and exits 0 saying
so; on a GPU each runs and passes its own check."""

import os
import subprocess
import sys

import pytest

from pygpu import compiler

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLES = [
    "hello_doublify",
    "vector_add",
    "sincos_map",
    "matmul_tiled",
    "lombscargle",
    "block_size",
    "streams_overlap",
    "demo",
]


def _run(name, **env):
    e = dict(os.environ)
    e.pop("PYGPU_CACHE_DIR", None)
    e.update(env)
    return subprocess.run(
        [sys.executable, os.path.join(ROOT, "examples", name + ".py")],
        capture_output=True,
        text=True,
        timeout=600,
        env=e,
    )


@pytest.mark.parametrize("name", EXAMPLES)
def test_example_without_a_gpu_compiles_and_exits_0(name, tmp_path):
    r = _run(
        name, PYGPU_LIBCUDA=str(tmp_path / "no-libcuda.so"), PYGPU_CACHE_DIR=str(tmp_path / "cache")
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert "compile" in r.stdout and "no GPU:" in r.stdout, r.stdout
    assert r.stderr == "", r.stderr


@pytest.mark.gpu
@pytest.mark.parametrize("name", EXAMPLES)
def test_example_on_the_gpu_passes_its_check(name, tmp_path):
    if name == "lombscargle":
        pytest.importorskip("scipy")
    r = _run(name, PYGPU_CACHE_DIR=str(tmp_path / "cache"))
    print(r.stdout)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "FAILED" not in r.stdout and "no GPU:" not in r.stdout, r.stdout
    if name != "demo":
        assert "ok: " in r.stdout, r.stdout


@pytest.mark.parametrize(
    "options", [[], ["-use_fast_math"], ["-DLOMBSCARGLE_BOUNDS=128"], ["-DTILE=32"]]
)
def test_shipped_kernels_compile(tmp_cache, options):
    names = sorted(f for f in os.listdir(compiler.KERNEL_DIR) if f.endswith(".cu"))
    assert names == ["doublify.cu", "elementwise.cu", "lombscargle.cu", "matmul.cu"]
    for name in names:
        b = compiler.compile(
            compiler.kernel_source(name), options=options, arch="compute_80", target="ptx"
        )
        assert b"\n.visible .entry " in bytes(b)


def test_kernel_source_names_what_exists():
    with pytest.raises(
        ValueError,
        match="no kernel file 'nope.cu' .* doublify.cu, elementwise.cu, lombscargle.cu, matmul.cu",
    ):
        compiler.kernel_source("nope.cu")
    with pytest.raises(ValueError, match="no kernel file"):
        compiler.kernel_source("../compiler.py")
