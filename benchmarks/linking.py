"""Linking two LTO-IR modules into a cubin: pygpu.linking.Linker against the
same nvJitLink calls from C, and a linked result from the compile cache in
a new process.  Needs no GPU (nvJitLink links on the CPU).

    python benchmarks/linking.py [--reps N]

The C floor (floor_tools.c, built by inproc.py against the nvJitLink file
pygpu loaded, and loaded into this process): create, add two LTO-IR
inputs, complete, copy the cubin, destroy; the same as one Linker.link()
with the cache off.  Rounds of C and of pygpu alternate; the pygpu figure
is the C median plus the median per-round difference.
Goals (issue 15): pygpu <= 1.1x the C floor; a cached link in a new process
<= 1 ms.
"""

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time

from pygpu import compiler, linking

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import inproc  # noqa: E402

LIB = r"""
__device__ float scale = 1.0f;
__device__ float affine(float x, float a) { return a * x + scale; }
__device__ float poly(float x) { float r = 0; for (int i = 0; i < 8; i++) r = r * x + i; return r; }
"""
APP = r"""
extern __device__ float affine(float x, float a);
extern __device__ float poly(float x);
extern "C" __global__ void scale_add(float *y, const float *x, float a, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        y[i] = affine(x[i], a) + poly(y[i]);
}
"""

CACHED = textwrap.dedent("""
    import sys, time
    t0 = time.perf_counter()
    from pygpu import compiler, linking
    t1 = time.perf_counter()
    a = compiler.compile(sys.argv[1], arch="sm_90", target="ltoir")
    b = compiler.compile(sys.argv[2], arch="sm_90", target="ltoir")
    t2 = time.perf_counter()
    L = linking.Linker(arch="sm_90", lto=True).add(a).add(b)
    L.link()
    t3 = time.perf_counter()
    assert L.from_cache
    print("%.1f %.1f %.1f" % ((t1 - t0) * 1e6, (t2 - t1) * 1e6, (t3 - t2) * 1e6))
""")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reps", type=int, default=30)
    args = ap.parse_args()
    if not linking.nvjitlink_available():
        print("no nvJitLink here: nothing to measure")
        return
    a = compiler.compile(LIB, arch="sm_90", target="ltoir", cache_dir=False)
    b = compiler.compile(APP, arch="sm_90", target="ltoir", cache_dir=False)
    cuda = os.environ.get("CUDA_HOME") or "/usr/local/cuda"
    # the C calls run in this process, from a library linked against the
    # very nvJitLink file pygpu loaded, their rounds alternating with
    # pygpu's (paired): a link's time drifts within a process (0.8 ms at
    # its start, 0.5 ms a few seconds later on an H200 host)
    lib, _, jl_path = inproc.build_tools(cuda)
    ab, bb = bytes(a), bytes(b)

    def c_once():
        t = lib.jl_lto_once(ab, len(ab), bb, len(bb), b"-arch=sm_90")
        assert t > 0, "the C link failed"
        return t

    def py_once():
        t0 = time.perf_counter()
        linking.Linker(arch="sm_90", lto=True, cache_dir=False).add(a).add(b).link()
        return time.perf_counter() - t0

    c_s, py_s = inproc.paired(c_once, py_once, rounds=args.reps)
    c_us, py_us = c_s * 1e6, py_s * 1e6
    with tempfile.TemporaryDirectory() as d:
        cache = os.path.join(d, "cache")
        env = dict(os.environ, PYGPU_CACHE_DIR=cache)
        runs = []
        for i in range(8):
            r = subprocess.run(
                [sys.executable, "-c", CACHED if i else CACHED.replace("assert L.from_cache", "")]
                + [LIB, APP],
                capture_output=True,
                text=True,
                env=env,
                check=True,
            )
            if i:
                runs.append([float(x) for x in r.stdout.split()])
        imp, comp, link = (statistics.median(col) for col in zip(*runs))

    print(
        "nvJitLink %s (%s), for pygpu and C alike"
        % (".".join(map(str, linking.nvjitlink_version())), jl_path)
    )
    print(
        "Linking two LTO-IR modules into a cubin (sm_90), %d paired rounds of 3 each:" % args.reps
    )
    print("  C (nvJitLink calls)        %9.1f us" % c_us)
    print("  pygpu Linker.link()        %9.1f us   %.3fx C  (goal <= 1.1x)" % (py_us, py_us / c_us))
    print("A linked result from the cache in a new process (median of 7 processes):")
    print("  Linker.link() (cache hit)  %9.1f us   (goal <= 1000 us)" % link)
    print("  two compile() hits before  %9.1f us   (LTO-IR from the compile cache)" % comp)
    print("  import pygpu               %9.1f us   (not part of the goal)" % imp)


if __name__ == "__main__":
    main()
