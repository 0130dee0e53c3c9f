"""pip install on a machine with no CUDA toolkit (issue 14's done-when).

In a private mount namespace (unshare) with every CUDA toolkit directory
hidden under an empty tmpfs, and no CUDA variable set:

1. a fresh venv builds the sdist and, from it, the wheel (python -m build:
   both in pip's isolated environment, the CUDA headers coming from NVIDIA's
   wheels that pygpu's build backend asks for);
2. a second fresh venv installs that wheel with the [cccl] extra;
3. a third installs the sdist with the [cccl] extra (build isolation again);

and in both, pygpu.compiler.compile (no GPU: an explicit arch) compiles a
kernel that includes <cuda_fp16.h>, <cooperative_groups.h>,
<cuda/std/complex> and CUB, with NVRTC and the headers found in the venv's
NVIDIA wheels; python -m pygpu reports them.

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

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HIDDEN = sorted({os.path.realpath(p) for p in ["/usr/local/cuda"] + [
    os.path.join("/usr/local", d) for d in (os.listdir("/usr/local") if os.path.isdir("/usr/local")
                                            else []) if d.startswith("cuda")]
    if os.path.isdir(p)})

pytestmark = [
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux only"),
    # make sanitize preloads ASan into every process, pip and the compilers
    # this test runs included: it is a packaging test, not a memory one
    pytest.mark.skipif("libasan" in os.environ.get("LD_PRELOAD", ""),
                       reason="not under make sanitize (ASan preloaded into pip and gcc)"),
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
    venv = sys.prefix
    assert not os.path.exists("/usr/local/cuda/include/cuda.h"), "the toolkit is not hidden"
    dirs = _loader.cuda_include_dirs()
    assert dirs and all(d.startswith(venv) for d in dirs), dirs
    b = compiler.compile(open(sys.argv[1]).read(), arch="sm_80", cache_dir=False)
    assert b.target == "cubin" and len(b) > 1000 and b"norm_sum" in b
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
    assert "<cub/cub.cuh> ok" in r.stdout and "<cuda_fp16.h> ok" in r.stdout, r.stdout
    print("CHECKED", nvrtc[0], dirs)
''')

SCRIPT = r'''
set -eu
for d in $HIDDEN; do mount -t tmpfs tmpfs "$d"; done
test ! -e /usr/local/cuda/include/cuda.h
unset CUDA_HOME CUDA_PATH CUDA_ROOT PYGPU_CUDA_INCLUDE PYGPU_NVRTC LIBRARY_PATH LD_LIBRARY_PATH
export PATH=$(echo "$PATH" | tr ':' '\n' | grep -v cuda | paste -sd:)
export PIP_DISABLE_PIP_VERSION_CHECK=1 PYTHONDONTWRITEBYTECODE=1
cd "$WORK"
echo "== build the sdist, then the wheel from it (isolated, no toolkit)"
"$PY" -m venv v0
v0/bin/pip install -q build
v0/bin/python -m build -o dist src > build.log 2>&1 || { tail -40 build.log; exit 1; }
grep -h "nvidia-cuda-runtime" build.log | sed 's/^/build asked for: /'
ls dist
echo "== install the wheel"
"$PY" -m venv v1
v1/bin/pip install -q "$(ls dist/*.whl)[cccl]"
v1/bin/python check.py kernel.cu
echo "== install the sdist (pip's isolated build)"
"$PY" -m venv v2
v2/bin/pip install -q "$(ls dist/*.tar.gz)[cccl]"
v2/bin/python check.py kernel.cu
'''


def _can_unshare():
    if shutil.which("unshare") is None:
        return "unshare is not installed"
    r = subprocess.run(["unshare", "-rm", "sh", "-c", "mount -t tmpfs tmpfs /mnt"],
                       capture_output=True, text=True)
    if r.returncode != 0:
        return "unshare -rm (a private mount namespace) is not allowed here: " + \
            (r.stderr.strip().splitlines() or ["?"])[-1]
    return None


def _index_reachable(tmp):
    r = subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d",
                        str(tmp), "cuda-pathfinder"], capture_output=True, text=True)
    if r.returncode != 0:
        return "the package index is not reachable: " + \
            (r.stderr.strip().splitlines() or ["?"])[-1]
    return None


def test_wheel_and_sdist_install_and_compile_with_only_nvidia_wheels(tmp_path):
    why = _can_unshare() or _index_reachable(tmp_path / "probe")
    if why:
        pytest.skip(why)
    src = tmp_path / "src"
    shutil.copytree(ROOT, src, ignore=shutil.ignore_patterns(
        ".git", "build", "dist", ".venv", "*.egg-info", "*.so", "__pycache__", "_build",
        ".pytest_cache"))
    (tmp_path / "kernel.cu").write_text(KERNEL)
    (tmp_path / "check.py").write_text(CHECK)
    env = dict(os.environ, WORK=str(tmp_path), PY=sys.executable, HIDDEN=" ".join(HIDDEN))
    env.setdefault("PIP_CACHE_DIR", os.path.join(os.path.expanduser("~"), ".cache", "pip"))
    r = subprocess.run(["unshare", "-rm", "bash", "-c", SCRIPT], env=env,
                       capture_output=True, text=True, timeout=1800)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-6000:]
    assert out.count("CHECKED") == 2, out[-3000:]
    assert "build asked for:" in out, out[-3000:]     # the header wheels, by the backend
    wheels = os.listdir(tmp_path / "dist")
    assert any(w.endswith(".whl") for w in wheels) and any(w.endswith(".tar.gz") for w in wheels)
