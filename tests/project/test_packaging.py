"""Packaging and discovery, on the CPU: where NVRTC and the CUDA headers are
found (cuda-pathfinder, loaded lazily, and the same order without it), that
compile() sees the same headers as SourceModule, the kernels' new home, the
hint for an old driver, python -m pygpu, the license metadata, the sdist's
contents, __all__, and the type stubs under mypy --strict."""

import importlib
import io
import os
import shutil
import subprocess
import sys
import tarfile
import textwrap
import types

import pytest

import fakecuda
from pygpu import _loader, compiler

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# the suite also runs against an installed wheel (from outside the checkout):
# subprocesses then start elsewhere, so that they import the same pygpu
IN_TREE = os.path.dirname(os.path.abspath(compiler.__file__)) == os.path.join(ROOT, "pygpu")
CWD = ROOT if IN_TREE else os.path.dirname(os.path.dirname(os.path.abspath(compiler.__file__)))


def run_py(code, env=None, **kw):
    e = dict(os.environ)
    e.update(env or {})
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        env=e,
        cwd=CWD,
        **kw,
    )


def nvrtc_or_skip():
    try:
        compiler.nvrtc_version()
    except Exception as e:
        pytest.skip("needs NVRTC: %s" % str(e).splitlines()[0])
    if not _loader.cuda_include_dirs():
        pytest.skip("needs the CUDA headers (toolkit or NVIDIA's wheels)")


# ---- headers: compile() and SourceModule see the same ones


def test_compile_finds_the_cuda_headers():
    # before: compile() added no include directory, so both failed to open
    nvrtc_or_skip()
    src = textwrap.dedent("""
        #include <cuda_fp16.h>
        #include <cooperative_groups.h>
        namespace cg = cooperative_groups;
        extern "C" __global__ void halve(__half *x) {
            unsigned i = cg::this_thread_block().thread_rank();
            x[i] = __float2half(__half2float(x[i]) * 0.5f);
        }
    """)
    b = compiler.compile(src, arch="sm_80", cache_dir=False)
    assert b.target == "cubin" and b"halve" in bytes(b)


def test_compile_and_sourcemodule_pass_the_same_include_dirs(tmp_path):
    # the CUDA headers, then pygpu's <stdio.h>/<stdlib.h> for NVRTC, last
    cuda = _loader.cuda_include_dirs() + [_loader.libc_shim_dir()]
    mine = [str(tmp_path)]
    # what compile() builds from the user's dirs, and from SourceModule's
    # (which appends cuda_include_dirs() itself): the same list, once each
    assert _loader.with_cuda_include_dirs(mine) == mine + cuda
    assert _loader.with_cuda_include_dirs(mine + cuda) == mine + cuda
    assert _loader.with_cuda_include_dirs([]) == cuda


def _fake_wheels(site, cccl=True):
    inc = site / "nvidia" / "cu13" / "include"
    inc.mkdir(parents=True)
    (inc / "cuda_runtime.h").write_text("")
    if cccl:
        (inc / "cccl" / "cuda" / "std").mkdir(parents=True)
        (inc / "cccl" / "cuda" / "std" / "version").write_text("")
    return inc


def test_plain_header_search_prefers_the_environments_wheels(tmp_path):
    inc = _fake_wheels(tmp_path / "site")
    home = tmp_path / "toolkit" / "include"
    (home / "cccl" / "cuda" / "std").mkdir(parents=True)
    (home / "cuda_runtime.h").write_text("")
    (home / "cccl" / "cuda" / "std" / "version").write_text("")
    env = {"CUDA_HOME": str(tmp_path / "toolkit")}
    assert _loader.cuda_include_dirs(env, [str(tmp_path / "site")]) == [str(inc), str(inc / "cccl")]
    assert _loader.cuda_include_dirs(env, [str(tmp_path / "elsewhere")]) == [
        str(home),
        str(home / "cccl"),
    ]
    assert _loader.cuda_include_dirs({}, [str(tmp_path / "nothing")]) in (
        [],
        [
            d
            for d in ("/usr/local/cuda/include", "/usr/local/cuda/include/cccl")
            if os.path.isdir(d)
        ],
    )


class FakePathfinder(types.ModuleType):
    def __init__(self, lib, headers):
        super().__init__("cuda.pathfinder")
        self.lib, self.headers, self.calls = lib, headers, []

    def load_nvidia_dynamic_lib(self, name):
        self.calls.append(name)
        if self.lib is None:
            raise RuntimeError("not found")
        return types.SimpleNamespace(abs_path=self.lib)

    def find_nvidia_header_directory(self, name):
        return self.headers.get(name)


def test_load_nvrtc_asks_pathfinder_first(monkeypatch, tmp_path):
    lib = str(tmp_path / "venv" / "nvidia" / "cu13" / "lib" / "libnvrtc.so.13")
    fake = FakePathfinder(lib, {})
    monkeypatch.setattr(_loader, "_pathfinder", fake)
    monkeypatch.delenv("PYGPU_NVRTC", raising=False)
    monkeypatch.setenv("LD_LIBRARY_PATH", "/opt/system-cuda/lib64")
    tried = _loader.load_nvrtc(loader=list)
    assert fake.calls == ["nvrtc"]
    assert tried[0] == lib and tried[1:] == [c for c in _loader.nvrtc_candidates() if c != lib]
    # $PYGPU_NVRTC still wins, and pathfinder is not asked
    monkeypatch.setenv("PYGPU_NVRTC", "/mine/libnvrtc.so")
    fake.calls.clear()
    assert _loader.load_nvrtc(loader=list)[0] == "/mine/libnvrtc.so"
    assert fake.calls == []
    # pathfinder finding nothing falls back to the plain list
    monkeypatch.delenv("PYGPU_NVRTC")
    monkeypatch.setattr(_loader, "_pathfinder", FakePathfinder(None, {}))
    assert _loader.load_nvrtc(loader=list) == _loader.nvrtc_candidates()


def test_headers_through_pathfinder(monkeypatch, tmp_path):
    inc = _fake_wheels(tmp_path / "venv")
    fake = FakePathfinder(None, {"cudart": str(inc), "cccl": str(inc / "cccl")})
    monkeypatch.setattr(_loader, "_pathfinder", fake)
    monkeypatch.setattr(_loader, "_include_memo", {})
    assert _loader.cuda_include_dirs() == [str(inc), str(inc / "cccl")]
    # a pathfinder that answers with a folder lacking the headers is not trusted
    monkeypatch.setattr(_loader, "_include_memo", {})
    monkeypatch.setattr(_loader, "_pathfinder", FakePathfinder(None, {"cudart": str(tmp_path)}))
    assert str(tmp_path) not in _loader.cuda_include_dirs()


def test_import_does_not_load_pathfinder_and_works_without_it():
    r = run_py("""
        import sys
        import pygpu, pygpu.driver, pygpu.compiler, pygpu.tools
        print("cuda.pathfinder" in sys.modules, "cuda" in sys.modules)
    """)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["False", "False"]
    # cuda.pathfinder not importable at all: the plain search answers
    r = run_py("""
        import sys
        class Block:
            def find_spec(self, name, path=None, target=None):
                if name == "cuda" or name.startswith("cuda."):
                    raise ImportError("blocked: " + name)
        sys.meta_path.insert(0, Block())
        from pygpu import _loader
        assert _loader.pathfinder() is None
        print(_loader.cuda_include_dirs() == _loader.cuda_include_dirs({**__import__("os").environ}))
        print(isinstance(_loader.nvrtc_candidates(), list))
    """)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["True", "True"]


# ---- the hint for an old driver names a package that exists


def test_nvrtc_pip_requirement():
    assert _loader.nvrtc_pip_requirement(13) == "'nvidia-cuda-nvrtc==13.*'"
    assert _loader.nvrtc_pip_requirement(12) == "'nvidia-cuda-nvrtc-cu12==12.*'"
    assert _loader.nvrtc_pip_requirement(11) == "'nvidia-cuda-nvrtc-cu11==11.*'"


def test_cuda12_driver_hint_names_the_cu12_wheel(tmp_path):
    # before: "pip install nvidia-cuda-nvrtc", whose releases are all CUDA 13
    try:
        lib = fakecuda.build()
    except Exception as e:
        pytest.skip("the driver stand-in does not build here: %s" % e)
    nvrtc_or_skip()
    r = run_py(
        """
        import pygpu.autoinit
        from pygpu import compiler, driver
        try:
            compiler.compile('extern "C" __global__ void k() {}', cache_dir=False)
        except driver.CudaUnavailableError as e:
            print(e)
    """,
        env={
            "PYGPU_LIBCUDA": lib,
            "FAKECUDA_DRIVER_VERSION": "12080",
            "PYGPU_CACHE_DIR": str(tmp_path),
        },
    )
    assert r.returncode == 0, r.stderr
    assert "driver, which supports CUDA 12.8" in r.stdout, r.stdout
    assert "pip install 'nvidia-cuda-nvrtc-cu12==12.*'" in r.stdout, r.stdout


# ---- kernels/ at the top level, shipped in the package


def test_kernel_sources_come_from_the_top_level_kernels_dir():
    assert os.path.isdir(os.path.join(ROOT, "kernels"))
    assert not os.path.isdir(os.path.join(ROOT, "pygpu", "kernels"))
    if IN_TREE:
        assert os.path.samefile(compiler.KERNEL_DIR, os.path.join(ROOT, "kernels"))
    else:  # an installed wheel carries a copy of each file
        assert sorted(os.listdir(compiler.KERNEL_DIR)) == sorted(
            os.listdir(os.path.join(ROOT, "kernels"))
        )
    with open(os.path.join(ROOT, "kernels", "matmul.cu")) as f:
        assert compiler.kernel_source("matmul.cu") == f.read()


def test_kernel_dir_prefers_the_installed_copy(tmp_path, monkeypatch):
    pkg = tmp_path / "site" / "pygpu"
    (pkg / "kernels").mkdir(parents=True)
    monkeypatch.setattr(_loader, "__file__", str(pkg / "_loader.py"))
    # an empty folder (left by an editable install over an older layout) is not it
    assert _loader.kernel_dir() == str(tmp_path / "site" / "kernels")
    (pkg / "kernels" / "elementwise.cuh").write_text("")
    assert _loader.kernel_dir() == str(pkg / "kernels")
    shutil.rmtree(pkg / "kernels")
    assert _loader.kernel_dir() == str(tmp_path / "site" / "kernels")


# ---- python -m pygpu


def test_python_m_pygpu_reports_without_a_driver(tmp_path):
    r = subprocess.run(
        [sys.executable, "-m", "pygpu"],
        capture_output=True,
        text=True,
        env=dict(
            os.environ,
            PYGPU_LIBCUDA=str(tmp_path / "no-libcuda.so"),
            PYGPU_CACHE_DIR=str(tmp_path / "cache"),
        ),
    )
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert out.startswith("pygpu 0.1.0")
    assert "driver: not found (CudaUnavailableError: " in out
    assert "no CUDA driver: install the NVIDIA driver" in out
    assert "compile cache: %s, 0 entries, 0 bytes" % (tmp_path / "cache") in out
    assert "CUDA headers: " in out and "NVRTC: " in out


def test_python_m_pygpu_lists_devices_and_nvrtc(tmp_path):
    try:
        lib = fakecuda.build()
    except Exception as e:
        pytest.skip("the driver stand-in does not build here: %s" % e)
    nvrtc_or_skip()
    cache = tmp_path / "cache"
    compiler.compile('extern "C" __global__ void k() {}', arch="sm_80", cache_dir=str(cache))
    r = subprocess.run(
        [sys.executable, "-m", "pygpu"],
        capture_output=True,
        text=True,
        env=dict(
            os.environ,
            PYGPU_LIBCUDA=lib,
            FAKECUDA_DEVICES="2",
            FAKECUDA_CC="8.6",
            PYGPU_CACHE_DIR=str(cache),
        ),
    )
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert "driver: CUDA 13.0 (13000), %s" % lib in out
    assert "device 0: pygpu driver stand-in 0, compute capability 8.6 (sm_86), " in out
    assert "device 1: pygpu driver stand-in 1, " in out
    major, minor = compiler.nvrtc_version()
    assert "NVRTC: %d.%d, /" % (major, minor) in out and "libnvrtc" in out
    for d in _loader.cuda_include_dirs():
        assert d in out
    for h in (
        "cuda_fp16.h",
        "cooperative_groups.h",
        "cuda/std/complex",
        "cub/block/block_reduce.cuh",
    ):
        assert "<%s> compiles" % h in out, out
    assert "compile cache: %s, 1 entries" % cache in out
    assert "everything pygpu needs was found." in out


def test_python_m_pygpu_says_what_to_do_without_nvrtc(tmp_path):
    r = subprocess.run(
        [sys.executable, "-m", "pygpu"],
        capture_output=True,
        text=True,
        env=dict(
            os.environ,
            PYGPU_LIBCUDA=str(tmp_path / "none.so"),
            PYGPU_NVRTC=str(tmp_path / "libnvrtc.so"),
            LD_LIBRARY_PATH="",
            CUDA_HOME=str(tmp_path),
            CUDA_PATH=str(tmp_path),
            PYGPU_NO_PATHFINDER="1",
            PYGPU_CACHE_DIR=str(tmp_path),
        ),
    )
    assert r.returncode == 0, r.stderr
    if "NVRTC: not found" not in r.stdout:
        pytest.skip("an NVRTC is on the system loader path here")
    # a command that works wherever pygpu came from: NVIDIA's wheels, as
    # pygpu's [nvrtc] extra names them (no index has pygpu itself)
    assert "pip install 'cuda-toolkit[nvrtc,cudart,cccl]>=13.0,<14'" in r.stdout, r.stdout
    assert "pygpu[" not in r.stdout
    assert "(no NVRTC: the headers were not compiled)" in r.stdout


def test_python_m_pygpu_without_nvrtc_names_nvidias_wheels(tmp_path, monkeypatch):
    # the same, in-process where a system NVRTC cannot be hidden
    from pygpu import __main__ as diag
    from pygpu.driver import CudaUnavailableError

    def missing():
        raise CudaUnavailableError("NVRTC was not found (test)")

    monkeypatch.setattr(compiler, "_ensure_nvrtc", missing)
    monkeypatch.setenv("PYGPU_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("PYGPU_LIBCUDA", str(tmp_path / "none.so"))
    out = io.StringIO()
    todo = diag.report(out)
    assert "NVRTC: not found (CudaUnavailableError: NVRTC was not found (test))" in out.getvalue()
    assert "(no NVRTC: the headers were not compiled)" in out.getvalue()
    msg = [t for t in todo if t.startswith("no NVRTC")]
    assert msg == [
        "no NVRTC, so no compiling: pip install 'cuda-toolkit[nvrtc,cudart,cccl]"
        ">=13.0,<14' (NVIDIA's NVRTC, CUDA header and CCCL wheels: pygpu's [nvrtc] "
        "extra), or install the CUDA toolkit (and set CUDA_HOME to it), or set "
        "PYGPU_NVRTC to libnvrtc.so's path"
    ], todo


def test_python_m_pygpu_compiles_each_header_it_reports(tmp_path, monkeypatch):
    # issue 26: without CCCL's folder <cooperative_groups.h> does not compile
    # (it needs <nv/target>), though the file is there: the report says so
    nvrtc_or_skip()
    from pygpu import __main__ as diag

    dirs = _loader.cuda_include_dirs()
    root = [d for d in dirs if os.path.isfile(os.path.join(d, "cuda_runtime.h"))]
    if not root:
        pytest.skip("no CUDA headers here")
    # NVIDIA's wheels' layout: the toolkit's headers without nv/ (and CCCL),
    # which come from the CCCL wheel (a toolkit has a copy in include/ too)
    farm = tmp_path / "include"
    farm.mkdir()
    for name in os.listdir(root[0]):
        if name not in ("nv", "cccl", "cuda", "cub", "thrust"):
            os.symlink(os.path.join(root[0], name), farm / name)
    root = [str(farm)]
    assert os.path.isfile(os.path.join(root[0], "cooperative_groups.h"))
    # no cache: its scan would walk the whole farm as user headers
    monkeypatch.setenv("PYGPU_DISABLE_CACHE", "1")
    monkeypatch.setenv("PYGPU_LIBCUDA", str(tmp_path / "none.so"))
    monkeypatch.setattr(_loader, "cuda_include_dirs", lambda *a, **k: list(root))
    out = io.StringIO()
    todo = diag.report(out)
    text = out.getvalue()
    assert "<cuda_fp16.h> compiles" in text, text
    assert "<cooperative_groups.h> does not compile: " in text and "nv/target" in text, text
    assert "<cub/block/block_reduce.cuh> does not compile: " in text, text
    msg = [t for t in todo if t.startswith("kernels that #include")]
    assert msg and "<cooperative_groups.h>" in msg[0] and "<cuda_fp16.h>" not in msg[0], todo
    assert "pip install 'cuda-toolkit[nvrtc,cudart,cccl]>=13.0,<14'" in msg[0], msg


# ---- metadata, sdist, __all__, types


def _pyproject():
    try:
        import tomllib
    except ImportError:
        pytest.skip("tomllib needs Python 3.11")
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        return tomllib.load(f)


def test_license_metadata():
    p = _pyproject()
    assert p["project"]["license"] == "MIT"
    assert p["project"]["license-files"] == ["LICENSE"]
    assert any(r.startswith("setuptools>=77") for r in p["build-system"]["requires"])
    with open(os.path.join(ROOT, "LICENSE")) as f:
        assert f.readline().strip() == "MIT License"
    assert set(p["project"]["urls"]) >= {"Homepage", "Source", "Issues", "Documentation"}
    extras = p["project"]["optional-dependencies"]
    # python -m pygpu's advice is the [nvrtc] extra itself; [cccl] its alias
    from pygpu.__main__ import NVRTC_REQUIREMENTS

    assert extras["nvrtc"] == list(NVRTC_REQUIREMENTS) == extras["cccl"]
    assert "cuda-pathfinder>=1.3" in p["project"]["dependencies"]


def test_metadata_is_ready_to_publish():
    import pygpu

    p = _pyproject()
    # the version is written once, in pygpu/__init__.py
    assert "version" not in p["project"] and p["project"]["dynamic"] == ["version"]
    assert p["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "pygpu.__version__"}
    # classifiers for exactly the Pythons tested (make test on each), as
    # requires-python says
    assert p["project"]["requires-python"] == ">=3.9"
    versions = sorted(
        c.rsplit(" ", 1)[1]
        for c in p["project"]["classifiers"]
        if c.startswith("Programming Language :: Python :: 3.") and c.count("::") == 2
    )
    assert versions == ["3.10", "3.11", "3.12", "3.13", "3.9"], versions
    assert pygpu.__version__ == "0.1.0"


def test_sdist_is_complete(tmp_path):
    # the sdist as the backend writes it (no network: setuptools in-process)
    try:
        import setuptools
    except ImportError:
        pytest.skip("needs setuptools")
    if int(setuptools.__version__.split(".")[0]) < 77:
        pytest.skip("needs setuptools >= 77 here (the build requirement)")
    src = tmp_path / "src"
    shutil.copytree(
        ROOT,
        src,
        ignore=shutil.ignore_patterns(
            ".git", "build", "dist", ".venv", "*.egg-info", "*.so", "__pycache__", "_build"
        ),
    )
    r = subprocess.run(
        [
            sys.executable,
            "-c",
            "import pygpu_build_backend as b, sys; print(b.build_sdist(sys.argv[1]))",
            str(tmp_path / "dist"),
        ],
        capture_output=True,
        text=True,
        cwd=src,
        env=dict(os.environ, PYTHONPATH=str(src / "tools")),
    )
    assert r.returncode == 0, r.stderr[-3000:]
    name = r.stdout.strip().splitlines()[-1]
    with tarfile.open(tmp_path / "dist" / name) as t:
        names = {n.split("/", 1)[1] for n in t.getnames() if "/" in n}
    for need in (
        "LICENSE",
        "README.md",
        "CHANGELOG.md",
        "CONTRIBUTING.md",
        "tools/test_python.sh",
        ".ci/run",  # (test_ci reads it: the sdist's tests pass from the unpacked sdist)
        "Makefile",
        "setup.py",
        "pyproject.toml",
        "tools/pygpu_build_backend.py",
        "src/core/loader.c",
        "src/pygpu.h",
        "kernels/matmul.cu",
        "kernels/libc/stdint.h",
        "tests/data/pycuda_names.txt",
        "tests/data/pycuda_members.txt",
        "pygpu/py.typed",
        "pygpu/_driver.pyi",
        "pygpu/__main__.py",
        "tests/conftest.py",
        "tests/support/fakecuda.py",
        "pygpu/testing/csrc/fakecuda.h",
        "tests/project/test_packaging.py",
        "examples/demo.py",
        "docs/install.md",
    ):
        assert need in names, need
    # the stand-in: every C file of it, by area (fake_core.c, fake_device.c...)
    csrc = os.path.join(ROOT, "pygpu", "testing", "csrc")
    for part in sorted(os.listdir(csrc)):
        if part.endswith((".c", ".h")):
            assert "pygpu/testing/csrc/" + part in names, part
    assert "pygpu/testing/csrc/fake_core.c" in names
    assert not any(n.endswith(".so") or "__pycache__" in n for n in names)
    # ready to publish: the metadata and its long description (the README)
    # render on the index
    try:
        import twine  # noqa: F401
    except ImportError:
        return
    r = subprocess.run(
        [sys.executable, "-m", "twine", "check", "--strict", str(tmp_path / "dist" / name)],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0 and "PASSED" in r.stdout, r.stdout + r.stderr


def test_make_sdist_after_a_build(tmp_path):
    # issue 26: after make test or make wheel, build/ (setuptools' and the
    # stand-in's folder) was imported as the package `build`
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    src = tmp_path / "src"
    shutil.copytree(
        ROOT,
        src,
        ignore=shutil.ignore_patterns(
            ".git", "build", "dist", ".venv", "*.egg-info", "*.so", "__pycache__", "_build"
        ),
    )
    (src / "build" / "standin").mkdir(parents=True)  # what make test leaves
    (src / "build" / "temp.linux-x86_64").mkdir()
    # a fresh venv without `build`, which make sdist installs (an installed
    # `build` would win over the folder; a missing one did not); then
    # python -m build's isolated environment: setuptools and NumPy from
    # pip's cache or the index
    subprocess.run([sys.executable, "-m", "venv", str(tmp_path / "v")], check=True)
    r = subprocess.run(
        ["make", "sdist", "PYTHON=" + str(tmp_path / "v" / "bin" / "python")],
        cwd=src,
        capture_output=True,
        text=True,
    )
    out = r.stdout + r.stderr
    if r.returncode != 0 and "No matching distribution found for" in out:
        pytest.skip("the package index is not reachable")
    assert r.returncode == 0, out[-3000:]
    assert [n for n in os.listdir(src / "dist")] == ["pygpu-0.1.0.tar.gz"]


PUBLIC = [
    "pygpu.driver",
    "pygpu.compiler",
    "pygpu.tools",
    "pygpu.system",
    "pygpu.cudacore",
    "pygpu.autoinit",
    "pygpu._loader",
    "pygpu.__main__",
]


@pytest.mark.parametrize("name", PUBLIC)
def test_every_public_module_has_all(name):
    if name == "pygpu.autoinit":
        r = run_py(
            "import ast, pygpu; print('__all__' in [t.id for n in ast.parse("
            "open(pygpu.__path__[0] + '/autoinit.py').read()).body "
            "if isinstance(n, ast.Assign) for t in n.targets if hasattr(t, 'id')])"
        )
        assert r.stdout.strip() == "True", r.stderr
        return
    mod = importlib.import_module(name)
    assert isinstance(mod.__all__, list) and mod.__all__
    for n in mod.__all__:
        assert hasattr(mod, n), "%s.__all__ names %s, which it lacks" % (name, n)


def test_driver_stub_covers_the_extension():
    """Every public name of pygpu._driver is in _driver.pyi, and no more."""
    import ast
    from pygpu import _driver

    with open(os.path.join(ROOT, "pygpu", "_driver.pyi")) as f:
        tree = ast.parse(f.read())
    stubbed = set()
    for node in tree.body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef)):
            stubbed.add(node.name)
        elif isinstance(node, ast.AnnAssign):
            stubbed.add(node.target.id)
    public = {n for n in dir(_driver) if not n.startswith("__")}
    assert public - stubbed == set(), "missing from _driver.pyi"
    assert stubbed - public == set(), "in _driver.pyi but not in the extension"


TYPED_USER = """
from typing import Any

import numpy as np
import pygpu.driver as cuda
from pygpu.compiler import SourceModule


def describe(ordinal: int) -> str:
    cuda.init()
    dev = cuda.Device(ordinal)
    major, minor = dev.compute_capability()
    return "%s sm_%d%d %d" % (dev.name(), major, minor, dev.total_memory())


def upload(a: "np.ndarray[Any, Any]") -> int:  # NumPy 2.0 (Python 3.9) has no defaults
    buf = cuda.mem_alloc(a.nbytes)
    cuda.memcpy_htod(buf, a)
    size: int = buf.size
    return size


def elapsed(start: cuda.Event, stop: cuda.Event) -> float:
    return stop.time_since(start)
"""


TYPED_ARRAYS = """

from pygpu import cumath, gpuarray


def sines(n: int) -> float:
    x = gpuarray.empty(n, np.float32)       # issue 26: pyright took dtype for type[float64]
    y = cumath.sin(x)                       # made at import: typed by cumath.pyi
    lo, hi = cumath.frexp(y)
    return float(y.get().sum() + lo.get().sum() + hi.get().sum())
"""


def test_cumath_stub_names_the_modules_public_names():
    import pygpu.cumath as m

    with open(os.path.join(ROOT, "pygpu", "cumath.pyi")) as f:
        import ast

        tree = ast.parse(f.read())
    stub = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
    stub |= {n.target.id for n in tree.body if isinstance(n, ast.AnnAssign)}
    stub |= {
        a.name
        for n in tree.body
        if isinstance(n, ast.ImportFrom)  # X as X:
        for a in n.names
        if a.asname == a.name
    }  # re-exported
    public = {
        n
        for n, v in vars(m).items()
        if not n.startswith("_") and not isinstance(v, types.ModuleType)
    }
    assert stub == public, (sorted(stub - public), sorted(public - stub))


def test_mypy_strict_accepts_the_examples(tmp_path):
    pytest.importorskip("mypy", reason="mypy is not installed (pip install -e '.[dev]')")
    # typed code against the C types: without the stub each is Any, which
    # --strict rejects (no-any-return)
    (tmp_path / "user.py").write_text(TYPED_USER + TYPED_ARRAYS)
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--strict",
            "--no-incremental",
            "--follow-imports=silent",
            str(tmp_path / "user.py"),
        ],
        capture_output=True,
        text=True,
        cwd=CWD,
    )
    assert r.returncode == 0, r.stdout[-4000:]
    # the examples as they are, --strict with nothing relaxed (issue 26)
    r = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", "examples"],
        capture_output=True,
        text=True,
        cwd=CWD,
    )
    assert r.returncode == 0 and "Success: no issues found" in r.stdout, r.stdout[-4000:]
    assert "import-untyped" not in r.stdout


def test_driver_all_names_every_public_name():
    import pygpu.driver as d

    public = {
        n
        for n, v in vars(d).items()
        if not n.startswith("_") and not isinstance(v, types.ModuleType) and n != "annotations"
    }
    assert public - set(d.__all__) == set()


def test_kernels_including_stdio_compile(tmp_path, monkeypatch):
    """NVRTC has no C library headers; kernels written for nvcc include
    <stdio.h> (PyCUDA's test_large_smem does): pygpu's kernels/libc has it."""
    monkeypatch.setenv("PYGPU_CACHE_DIR", str(tmp_path))
    from pygpu import compiler

    src = (
        '#include <stdio.h>\n#include <stdlib.h>\nextern "C" __global__ void k(int *d)'
        ' { int *p = (int *)malloc(4); printf("%d\\n", d[0]); free(p); }'
    )
    ptx = bytes(compiler.compile(src, target="ptx", arch="compute_90")).decode()
    assert "vprintf" in ptx and "malloc" in ptx


def test_the_build_uses_the_loaders_search(tmp_path):
    # issue 26, item 9: one search (pygpu/_loader.py) for the loader, the
    # compiler and the build backend, which loads it by path
    spec = importlib.util.spec_from_file_location(
        "_backend_for_test", os.path.join(ROOT, "tools", "pygpu_build_backend.py")
    )
    b = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(b)
    assert os.path.samefile(b._search.__file__, os.path.join(ROOT, "pygpu", "_loader.py"))
    wheel = tmp_path / "site" / "nvidia" / "cu13" / "include"
    wheel.mkdir(parents=True)
    for h in ("cuda.h", "cudaTypedefs.h", "nvrtc.h"):
        (wheel / h).write_text("")
    toolkit = tmp_path / "toolkit" / "include"
    toolkit.mkdir(parents=True)
    site = [str(tmp_path / "site")]
    # no toolkit: the wheels on the path (pip's isolated build environment)
    nowhere = {"PYGPU_CUDA_INCLUDE": str(tmp_path / "none")}
    found = b.cuda_include_dirs(nowhere, site)
    if found != [str(wheel)]:
        assert found and found[0].startswith(("/usr/local/cuda", "/opt/cuda", "/usr/include"))
    # a toolkit with the three headers wins, $PYGPU_CUDA_INCLUDE first
    for h in ("cuda.h", "cudaTypedefs.h", "nvrtc.h"):
        (toolkit / h).write_text("")
    assert b.cuda_include_dirs({"CUDA_HOME": str(tmp_path / "toolkit")}, site) == [str(toolkit)]
    assert b.cuda_include_dirs({"PYGPU_CUDA_INCLUDE": str(toolkit)}, []) == [str(toolkit)]
    assert b.tried({"CUDA_HOME": "/x"}, site)[:2] == ["/x/include", "/usr/local/cuda/include"]
    assert _loader.build_include_dirs({"CUDA_HOME": str(tmp_path / "toolkit")}, site) == [
        str(toolkit)
    ]


# ---- pyright on the README's and the manual's code (issue 26, item 7)


def _pyright():
    """basedpyright (the test extra: it brings its own Node.js wheel, so it
    needs no network when it runs), else a pyright on PATH, else None."""
    for name in ("basedpyright", "pyright"):
        exe = shutil.which(
            name, path=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "")
        )
        if exe:
            return exe
    return None


def _code_blocks():
    """(name, source) for each ```python block of the README and the
    manual, after the imports every chapter assumes (numpy as np,
    pygpu.driver as cuda); blocks that are not Python on their own (the
    porting guide's side-by-side before/after) are left out."""
    import ast
    import glob
    import re

    out = []
    for path in [os.path.join(ROOT, "README.md")] + sorted(
        glob.glob(os.path.join(ROOT, "docs", "*.md"))
    ):
        with open(path) as f:
            text = f.read()
        for i, m in enumerate(re.finditer(r"^```(?:python|py)\n(.*?)^```", text, re.S | re.M)):
            try:
                ast.parse(m.group(1))
            except SyntaxError:
                continue
            out.append(
                (
                    "%s_%d" % (os.path.basename(path)[:-3], i),
                    "import numpy as np\nimport pygpu.driver as cuda\n" + m.group(1),
                )
            )
    return out


def test_pyright_accepts_the_readme_and_the_manual(tmp_path):
    exe = _pyright()
    if exe is None:
        pytest.skip("basedpyright/pyright is not installed (pip install -e '.[test]')")
    blocks = _code_blocks()
    assert len(blocks) >= 30
    for doc, source in blocks:
        (tmp_path / ("doc_%s.py" % doc)).write_text(source)
    (tmp_path / "typed_user.py").write_text(TYPED_USER + TYPED_ARRAYS)
    import json

    optional = {}
    for mod in ("cupy", "cuda.core", "mpi4py", "scipy", "nccl"):
        try:
            importlib.import_module(mod)
        except Exception:
            optional[mod] = True
    (tmp_path / "pyrightconfig.json").write_text(
        json.dumps(
            {
                "typeCheckingMode": "standard",
                "extraPaths": [CWD],
                # the snippets are fragments of a chapter: a name the prose defines
                # (`a`, `kernel`) is not an error; a value Optional in general but
                # set where the chapter uses it (cap.graph after its with block, a
                # conditional node's bodies) neither
                "reportUndefinedVariable": "none",
                "reportOptionalMemberAccess": "none",
                "reportOptionalSubscript": "none",
                # the comparison chapter's peers, MPI and NCCL, where not installed here
                "reportMissingImports": "error" if not optional else "warning",
            }
        )
    )
    r = subprocess.run(
        [exe, "--pythonpath", sys.executable, "--outputjson"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    report = json.loads(r.stdout)
    errors = [d for d in report["generalDiagnostics"] if d["severity"] == "error"]
    missing = [
        d
        for d in report["generalDiagnostics"]
        if d.get("rule") == "reportMissingImports" and not any(m in d["message"] for m in optional)
    ]
    assert not errors and not missing, "\n".join(
        "%s:%d: %s" % (os.path.basename(d["file"]), d["range"]["start"]["line"] + 1, d["message"])
        for d in errors + missing
    )
