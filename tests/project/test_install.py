"""Every install command the README, the manual and python -m pygpu show,
run as written on a machine with no CUDA toolkit (issues 14 and 26).

In a private mount namespace (unshare) with every CUDA toolkit directory
hidden under an empty tmpfs, and no CUDA variable set, from a fresh copy of
the checkout (a clone):

1. `make wheel` and `make sdist` (a fresh venv: pip's isolated builds, the
   CUDA headers coming from NVIDIA's wheels that pygpu's build backend asks
   for; the wheel built by zig cc for glibc 2.17, stripped);
2. in the clone, `pip install -e ".[nvrtc]"`, then `make demo`;
3. `pip install "$(ls dist/pygpu-*manylinux*.whl)[nvrtc]"`, then a subset of
   the CPU suite against that installed wheel;
4. `pip install "$(ls dist/pygpu-*.tar.gz)[nvrtc]"`;
5. in the clone, `pip install -e .` alone, whose `python -m pygpu` finds no NVRTC and names
   the command that brings it; that command, run as printed, makes every
   header compile.

After each install, check.py compiles every header `python -m pygpu`
reports (pygpu.__main__.HEADERS), one by one and together, with NVRTC and
the headers found in the venv's NVIDIA wheels: exactly what the [nvrtc]
extra brings; `python -m pygpu` says each compiles.

Needs the package index (skips, saying so, when pip cannot reach it) and
unshare (skips where user namespaces are not allowed).  Downloads land in
pip's cache ($PIP_CACHE_DIR, else ~/.cache/pip), so a rerun fetches nothing.
"""

import os
import shutil
import subprocess
import sys
import textwrap

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HIDDEN = sorted(
    {
        os.path.realpath(p)
        for p in ["/usr/local/cuda"]
        + [
            os.path.join("/usr/local", d)
            for d in (os.listdir("/usr/local") if os.path.isdir("/usr/local") else [])
            if d.startswith("cuda")
        ]
        if os.path.isdir(p)
    }
)

pytestmark = [
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux only"),
    # make sanitize preloads ASan into every process, pip and the compilers
    # this test runs included: it is a packaging test, not a memory one
    pytest.mark.skipif(
        "libasan" in os.environ.get("LD_PRELOAD", ""),
        reason="not under make sanitize (ASan preloaded into pip and gcc)",
    ),
]

KERNEL = r'''
#include <cuda_fp16.h>
#include <cooperative_groups.h>
#include <cuda/std/complex>
#include <cub/block/block_reduce.cuh>
namespace cg = cooperative_groups;
extern "C" __global__ void norm_sum(float *out, const __half *in) {
    cg::thread_block b = cg::this_thread_block();
    typedef cub::BlockReduce<float, 128> R;
    __shared__ typename R::TempStorage tmp;
    cuda::std::complex<float> z(__half2float(in[b.thread_rank()]), 1.0f);
    float s = R(tmp).Sum(cuda::std::abs(z));
    if (b.thread_rank() == 0) out[0] = s;
}
'''

# Run inside each venv: everything must come from the venv's NVIDIA wheels.
CHECK = textwrap.dedent(r'''
    import os, subprocess, sys
    from pygpu import _loader, compiler
    from pygpu.__main__ import HEADERS
    venv = sys.prefix
    assert not os.path.exists("/usr/local/cuda/include/cuda.h"), "the toolkit is not hidden"
    dirs = _loader.cuda_include_dirs()
    assert dirs and all(d.startswith(venv) for d in dirs), dirs
    b = compiler.compile(open(sys.argv[1]).read(), arch="sm_80", cache_dir=False)
    assert b.target == "cubin" and len(b) > 1000 and b"norm_sum" in b
    for h in HEADERS:     # each header python -m pygpu reports, alone
        compiler.compile("#include <%s>\n__global__ void k() {}\n" % h, arch="sm_80",
                         cache_dir=False)
    maps = open("/proc/self/maps").read()
    nvrtc = [l.split()[-1] for l in maps.splitlines() if "libnvrtc.so" in l]
    assert nvrtc and nvrtc[0].startswith(venv), nvrtc
    # <cub/cub.cuh> as a whole is refused by CCCL under NVRTC, in its own words
    try:
        compiler.compile("#include <cub/cub.cuh>\n", arch="sm_80", cache_dir=False)
    except compiler.CompileError as e:
        assert "not supported when compiling with NVRTC" in str(e), str(e)
    r = subprocess.run([sys.executable, "-m", "pygpu"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "NVRTC: 13." in r.stdout and venv in r.stdout, r.stdout
    for h in HEADERS:
        assert "<%s> compiles" % h in r.stdout, r.stdout
    assert "kernels that #include" not in r.stdout, r.stdout
    print("CHECKED", nvrtc[0], dirs)
''')

# The CPU tests run against the installed wheel (not the checkout: they run
# from a folder holding only tests/ and the stand-in's sources).
CPU_SUBSET = "tests/driver/test_import_and_errors.py tests/interop/test_tools.py tests/compiler/test_compiler.py"

SCRIPT = r'''
set -eu
for d in $HIDDEN; do mount -t tmpfs tmpfs "$d"; done
test ! -e /usr/local/cuda/include/cuda.h
unset CUDA_HOME CUDA_PATH CUDA_ROOT PYGPU_CUDA_INCLUDE PYGPU_NVRTC LIBRARY_PATH LD_LIBRARY_PATH
unset PYGPU_LIBCUDA PYTEST_ADDOPTS PYGPU_CACHE_DIR
export PATH=$(echo "$PATH" | tr ':' '\n' | grep -v cuda | paste -sd:)
export PIP_DISABLE_PIP_VERSION_CHECK=1 PYTHONDONTWRITEBYTECODE=1
cd "$WORK"
echo "== make wheel, make sdist (README, docs/install.md; isolated, no toolkit)"
"$PY" -m venv v0
(cd src && make wheel PYTHON=$WORK/v0/bin/python > ../wheel.log 2>&1) || { tail -40 wheel.log; exit 1; }
(cd src && make sdist PYTHON=$WORK/v0/bin/python > ../sdist.log 2>&1) || { tail -40 sdist.log; exit 1; }
(cd src/tools && ../../v0/bin/python -c "import pygpu_build_backend as b; print('build asked for:', b._header_requirements())")
cp src/dist/* dist/
ls dist
echo "== in the clone: pip install -e \".[nvrtc]\", then make demo"
"$PY" -m venv vc
(. vc/bin/activate && cd src && pip install -q -e ".[nvrtc]" && python -m pygpu > ../vc.pygpu)
vc/bin/python check.py kernel.cu
(. vc/bin/activate && cd src && make demo > ../demo.log 2>&1) || { tail -30 demo.log; exit 1; }
grep "compiled axpb" demo.log | head -1 | sed 's/^/demo: /'
echo "== pip install \"\$(ls dist/pygpu-*manylinux*.whl)[nvrtc]\", then CPU tests against it"
"$PY" -m venv v1
(. v1/bin/activate && cd src && pip install -q "$(ls dist/pygpu-*manylinux*.whl)[nvrtc]")
v1/bin/python check.py kernel.cu
v1/bin/pip install -q pytest
mkdir -p cpu/pygpu/testing && cp -r src/tests cpu/ && cp -r src/pygpu/testing/standin.py src/pygpu/testing/csrc cpu/pygpu/testing/
(cd cpu && ../v1/bin/python -m pytest -q -p no:cacheprovider $CPU_SUBSET > ../cpu.log 2>&1) || { tail -30 cpu.log; exit 1; }
# pytest's count line, not the log's last line (a warning printed at exit on 3.9)
grep -E '[0-9]+ (passed|failed)' cpu.log | tail -1 | sed 's/^/wheel CPU tests: /'
v1/bin/python -c "import pygpu._driver as d, sys; assert d.__file__.startswith(sys.prefix); print('WHEEL', d.__file__)"
echo "== pip install \"\$(ls dist/pygpu-*.tar.gz)[nvrtc]\" (pip's isolated build)"
"$PY" -m venv v2
(. v2/bin/activate && cd src && pip install -q "$(ls dist/pygpu-*.tar.gz)[nvrtc]")
v2/bin/python check.py kernel.cu
echo "== in the clone: pip install -e . alone: python -m pygpu names what to install, which works as printed"
rm -rf src/build src/pygpu/*.so src/*.egg-info
"$PY" -m venv v3
(. v3/bin/activate && cd src && pip install -q -e . && python -m pygpu > ../v3.before)
grep -q "NVRTC: not found" v3.before
todo=$(grep -o "no NVRTC, so no compiling: pip install '[^(]*' " v3.before | sed 's/^no NVRTC, so no compiling: //')
test -n "$todo" || { cat v3.before; exit 1; }
echo "python -m pygpu says: $todo"
(. v3/bin/activate && cd src && eval "$todo" -q)
v3/bin/python check.py kernel.cu
'''


# What the commands must not inherit from the run that started pytest.  Under
# `make test PYTHON=...`, make hands its command-line variables to every make
# below it through MAKEFLAGS: the clone's `make demo` took the outer PYTHON
# (NumPy, setuptools and pytest importable: --no-build-isolation, no header
# wheels) and, with the toolkit hidden, found no CUDA header, though it
# passed when pytest was started by hand.  An exported PYTHON or PYTEST_ARGS
# would do the same; a venv's or the interpreter's own settings (PYTHONPATH,
# VIRTUAL_ENV, pip's no-isolation switches), the compiler's and pygpu's or
# CUDA's variables would put the outer environment into the fresh ones.
_NOT_INHERITED = (
    "MAKEFLAGS",
    "MFLAGS",
    "MAKELEVEL",
    "MAKEOVERRIDES",
    "MAKEFILES",
    "GNUMAKEFLAGS",
    "PYTHON",
    "PYTEST_ARGS",
    "VIRTUAL_ENV",
    "CONDA_PREFIX",
    "PIP_NO_BUILD_ISOLATION",
    "PIP_NO_DEPS",
    "PIP_TARGET",
    "PIP_PREFIX",
    "PIP_USER",
    "PIP_REQUIRE_VIRTUALENV",
    "PIP_CONSTRAINT",
    "PIP_REQUIREMENT",
    "CC",
    "CXX",
    "CFLAGS",
    "CPPFLAGS",
    "LDFLAGS",
    "LDSHARED",
    "LD_PRELOAD",
    "LD_LIBRARY_PATH",
    "LIBRARY_PATH",
    "CPATH",
    "C_INCLUDE_PATH",
)
_NOT_INHERITED_PREFIXES = (
    "PYTHON",
    "PYTEST_",
    "PYGPU_",
    "CUDA",
    "NVRTC",
    "SETUPTOOLS_",
    "_PYPROJECT_HOOKS",
)


def script_env(environ=None):
    """The environment the install commands run in: the caller's, less what
    would carry the outer run's choices into them (the index settings, the
    proxy, HOME and PATH stay; PATH loses its CUDA folders in SCRIPT)."""
    environ = os.environ if environ is None else environ
    env = {
        k: v
        for k, v in environ.items()
        if k not in _NOT_INHERITED and not k.startswith(_NOT_INHERITED_PREFIXES)
    }
    env.setdefault("PIP_CACHE_DIR", os.path.join(os.path.expanduser("~"), ".cache", "pip"))
    return env


def test_script_env_leaves_the_outer_run_out():
    # make test PYTHON=... (make's MAKEFLAGS) broke the clone's make demo
    outer = {
        "MAKEFLAGS": " -- PYTHON=/outer/venv/bin/python",
        "MAKELEVEL": "1",
        "MAKEOVERRIDES": "${-*-command-variables-*-}",
        "MFLAGS": "-s",
        "PYTHON": "/outer/venv/bin/python",
        "PYTEST_ARGS": "-x",
        "PYTHONPATH": "/outer",
        "VIRTUAL_ENV": "/outer/venv",
        "PYGPU_LIBCUDA": "/x.so",
        "CUDA_HOME": "/usr/local/cuda",
        "PIP_NO_BUILD_ISOLATION": "0",
        "CC": "clang",
        "PATH": "/usr/bin:/bin",
        "HOME": "/home/u",
        "PIP_INDEX_URL": "https://i/simple",
        "HTTPS_PROXY": "http://p:3128",
        "PIP_CACHE_DIR": "/c",
    }
    assert script_env(outer) == {
        "PATH": "/usr/bin:/bin",
        "HOME": "/home/u",
        "PIP_INDEX_URL": "https://i/simple",
        "HTTPS_PROXY": "http://p:3128",
        "PIP_CACHE_DIR": "/c",
    }
    # a make below the test sees none of the outer make's command line
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    r = subprocess.run(
        ["make", "-s", "-f", "-", "show"],
        input="PYTHON ?= python3\nshow:\n\t@echo PYTHON=$(PYTHON)\n",
        capture_output=True,
        text=True,
        env=dict(script_env(dict(os.environ, **outer)), PATH=os.environ["PATH"]),
    )
    assert r.stdout.strip() == "PYTHON=python3", r.stdout + r.stderr


def _can_unshare():
    if shutil.which("unshare") is None:
        return "unshare is not installed"
    r = subprocess.run(
        ["unshare", "-rm", "sh", "-c", "mount -t tmpfs tmpfs /mnt"], capture_output=True, text=True
    )
    if r.returncode != 0:
        return (
            "unshare -rm (a private mount namespace) is not allowed here: "
            + (r.stderr.strip().splitlines() or ["?"])[-1]
        )
    return None


def _index_reachable(tmp):
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "-q",
            "--no-deps",
            "-d",
            str(tmp),
            "cuda-pathfinder",
        ],
        capture_output=True,
        text=True,
    )
    if r.returncode != 0:
        return "the package index is not reachable: " + (r.stderr.strip().splitlines() or ["?"])[-1]
    return None


def test_wheel_and_sdist_install_and_compile_with_only_nvidia_wheels(tmp_path):
    why = _can_unshare() or _index_reachable(tmp_path / "probe")
    if why:
        pytest.skip(why)
    src = tmp_path / "src"
    shutil.copytree(
        ROOT,
        src,
        ignore=shutil.ignore_patterns(
            ".git",
            "build",
            "dist",
            ".venv",
            "*.egg-info",
            "*.so",
            "__pycache__",
            "_build",
            ".pytest_cache",
        ),
    )
    (tmp_path / "kernel.cu").write_text(KERNEL)
    (tmp_path / "check.py").write_text(CHECK)
    (tmp_path / "dist").mkdir()
    env = dict(
        script_env(),
        WORK=str(tmp_path),
        PY=sys.executable,
        HIDDEN=" ".join(HIDDEN),
        CPU_SUBSET=CPU_SUBSET,
    )
    r = subprocess.run(
        ["unshare", "-rm", "bash", "-c", SCRIPT],
        env=env,
        capture_output=True,
        text=True,
        timeout=2400,
    )
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-6000:]
    assert out.count("CHECKED") == 4, out[-3000:]
    # no toolkit: the backend asks pip for the header wheels
    assert "build asked for: ['nvidia-cuda-runtime>=13,<14', 'nvidia-cuda-nvrtc>=13,<14'" in out, (
        out[-3000:]
    )
    assert "demo: compiled axpb" in out, out[-3000:]
    assert "wheel CPU tests: " in out and " passed" in out and " failed" not in out, out[-3000:]
    assert "python -m pygpu says: pip install 'cuda-toolkit[nvrtc,cudart,cccl]>=13.0,<14'" in out, (
        out[-3000:]
    )
    dist = sorted(os.listdir(tmp_path / "dist"))
    wheels = [w for w in dist if w.endswith(".whl")]
    assert len(wheels) == 1 and "manylinux_2_17_x86_64" in wheels[0], dist
    assert any(w.endswith(".tar.gz") for w in dist), dist
    _check_wheel_is_stripped(tmp_path / "dist" / wheels[0])


def _check_wheel_is_stripped(path):
    # no debug information, no symbol table: about 0.4 MB
    import zipfile

    with zipfile.ZipFile(path) as z:
        so = [n for n in z.namelist() if n.endswith(".so")]
        assert len(so) == 1, so
        data = z.read(so[0])
    assert len(data) < 600 * 1024, len(data)
    names = _elf_section_names(data)
    assert ".text" in names and ".dynsym" in names, names
    assert not [n for n in names if n.startswith(".debug") or n == ".symtab"], names


def _elf_section_names(data):
    """The section names of a 64-bit little-endian ELF file."""
    import struct

    assert data[:4] == b"\x7fELF" and data[4] == 2 and data[5] == 1
    (shoff,) = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    sections = [struct.unpack_from("<IIQQQQ", data, shoff + i * shentsize) for i in range(shnum)]
    stroff, strsize = sections[shstrndx][4], sections[shstrndx][5]
    strtab = data[stroff : stroff + strsize]
    return [strtab[s[0] : strtab.index(b"\0", s[0])].decode() for s in sections]
