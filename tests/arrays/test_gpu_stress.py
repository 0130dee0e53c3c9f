"""Stress on a real GPU: many threads launching and copying at once, and the
suite's own kernels under compute-sanitizer."""

import os
import shutil
import subprocess
import sys
import threading

import numpy as np
import pytest

import pygpu.driver as cuda
from pygpu.compiler import SourceModule

from threaded import run_in_threads

pytestmark = pytest.mark.gpu

SAXPY = r"""
extern "C" __global__ void saxpy(float *out, const float *x, const float *y, float a, int n)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        out[i] = a * x[i] + y[i];
}
"""


def test_eight_threads_launch_and_copy_at_once(ctx):
    """8 threads, one stream each, each round: new random data up, a launch,
    results down (pageable, pinned and staged sizes), every element checked."""
    # no fused multiply-add, so NumPy's a * x + y is the exact answer
    f = SourceModule(SAXPY, options=["-fmad=false"]).get_function("saxpy")
    barrier = threading.Barrier(8)
    sizes = [1000, 1 << 16, 3 << 20, (1 << 18) + 7]

    def work(tid):
        rng = np.random.default_rng()
        s = cuda.Stream()
        barrier.wait()
        for r in range(40):
            n = sizes[(tid + r) % len(sizes)]
            x = rng.standard_normal(n).astype(np.float32)
            y = rng.standard_normal(n).astype(np.float32)
            a = np.float32(rng.standard_normal())
            if r % 2:
                hx = cuda.pagelocked_empty(n, np.float32)
                hx[:] = x
                dx = cuda.mem_alloc(x.nbytes)
                cuda.memcpy_htod_async(dx, hx, s)
            else:
                dx = cuda.to_device(x)
            dy, dout = cuda.to_device(y), cuda.mem_alloc(x.nbytes)
            f(
                dout,
                dx,
                dy,
                a,
                n,
                block=(256, 1, 1),
                grid=(min(1024, (n + 255) // 256), 1),
                stream=s,
            )
            out = np.empty_like(x)
            if r % 3 == 0:
                s.synchronize()
                cuda.memcpy_dtoh(out, dout)
            else:
                cuda.memcpy_dtoh_async(out, dout, s)
                s.synchronize()
            np.testing.assert_array_equal(out, a * x + y)

    run_in_threads(ctx, 8, work)


def _compute_sanitizer():
    found = shutil.which("compute-sanitizer")
    if found:
        return found
    for root in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if root and os.path.exists(os.path.join(root, "bin", "compute-sanitizer")):
            return os.path.join(root, "bin", "compute-sanitizer")
    return None


@pytest.mark.parametrize("tool", ["memcheck", "racecheck"])
def test_suite_kernels_are_clean_under_compute_sanitizer(tool):
    """The launch tests (all but the one whose kernel faults on purpose) and
    the stress test above, run under compute-sanitizer: no error reported."""
    exe = _compute_sanitizer()
    if exe is None:
        pytest.fail("compute-sanitizer was not found (PATH, CUDA_HOME, /usr/local/cuda)")
    here = os.path.dirname(os.path.abspath(__file__))
    targets = [os.path.join(os.path.dirname(here), "launch", "test_launch.py")]
    if tool == "memcheck":
        targets.append(
            os.path.join(here, "test_gpu_stress.py")
            + "::test_eight_threads_launch_and_copy_at_once"
        )
    env = dict(os.environ, PYGPU_REQUIRE_GPU="1")
    # --report-api-errors no: the suite provokes driver errors on purpose, and
    # pygpu probes cuFuncGetParamInfo past the last parameter; kernels are what
    # is checked here
    r = subprocess.run(
        [
            exe,
            "--tool",
            tool,
            "--report-api-errors",
            "no",
            "--error-exitcode",
            "99",
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-k",
            "not illegal_address and not compute_sanitizer",
        ]
        + targets,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    tail = (r.stdout + r.stderr)[-3000:]
    assert r.returncode == 0, tail
    summary = (
        "ERROR SUMMARY: 0 errors"
        if tool == "memcheck"
        else "RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings)"
    )
    assert summary in r.stdout + r.stderr, tail
    assert " passed" in r.stdout and " failed" not in r.stdout, tail


HOLD_KERNELS = r"""
extern "C" __global__ void twice(float *out, const float *in, int n)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        out[i] = 2.0f * in[i];
}
extern "C" __global__ void fetch(float *out, cudaTextureObject_t t, int n)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        out[i] = tex1Dfetch<float>(t, i);
}
"""


def test_frees_race_graph_replays_and_texture_reads(ctx):
    """Issue 25's hammer: 6 threads, each replaying a graph and reading a
    texture while another thread frees the memory both use.  The hold
    protocol defers every such free to the last holder: every replay and
    every read sees the data it was given, and nothing faults."""
    mod = SourceModule(HOLD_KERNELS, no_extern_c=True)
    twice, fetch = mod.get_function("twice"), mod.get_function("fetch")
    barrier = threading.Barrier(6)
    n = 1 << 16

    def work(tid):
        rng = np.random.default_rng()
        s = cuda.Stream()
        barrier.wait()
        for r in range(15):
            x = cuda.pagelocked_empty(n, np.float32)
            x[:] = rng.standard_normal(n)
            out = cuda.pagelocked_zeros(n, np.float32)
            din, dout = cuda.mem_alloc(x.nbytes), cuda.mem_alloc(x.nbytes)
            g = cuda.Graph()
            up = g.add_memcpy_node(din, x)
            k = g.add_kernel_node(
                twice,
                dout,
                din,
                np.int32(n),
                block=(256, 1, 1),
                grid=(n // 256, 1, 1),
                dependencies=up,
            )
            g.add_memcpy_node(out, dout, dependencies=k)
            exe = g.instantiate()
            dtex = cuda.to_device(x)
            tex = cuda.TextureObject(dtex, format=cuda.array_format.FLOAT)
            tout = cuda.mem_alloc(x.nbytes)
            racer = threading.Thread(target=lambda: (din.free(), dout.free(), dtex.free()))
            racer.start()
            for _ in range(4):
                exe.launch(s)
                fetch(tout, tex, np.int32(n), block=(256, 1, 1), grid=(n // 256, 1), stream=s)
            racer.join()
            s.synchronize()
            np.testing.assert_array_equal(out, 2 * x)
            got = np.empty_like(x)
            cuda.memcpy_dtoh(got, tout)
            np.testing.assert_array_equal(got, x)
            assert din.freed and dout.freed and dtex.freed
            del exe, g, up, k, tex

    run_in_threads(ctx, 6, work)


def test_texture_and_graph_read_memory_freed_under_them(ctx):
    """Issue 25, defect 6 on a GPU, one thread: free the allocation under a
    TextureObject and under a graph's kernel node, then read through both:
    every element is what was written (the free waits for the holders)."""
    mod = SourceModule(HOLD_KERNELS, no_extern_c=True)
    twice, fetch = mod.get_function("twice"), mod.get_function("fetch")
    rng = np.random.default_rng()
    n = (1 << 18) + 5
    x = rng.standard_normal(n).astype(np.float32)
    d = cuda.to_device(x)
    tex = cuda.TextureObject(d, format=cuda.array_format.FLOAT)
    out = cuda.mem_alloc(x.nbytes)
    g = cuda.Graph()
    g.add_kernel_node(twice, out, d, np.int32(n), block=(256, 1, 1), grid=(512, 1, 1))
    exe = g.instantiate()
    d.free()
    assert d.holders == ("a TextureObject", "graph node #0 (kernel 'twice')")
    tout = cuda.mem_alloc(x.nbytes)
    fetch(tout, tex, np.int32(n), block=(256, 1, 1), grid=(512, 1))
    got = np.empty_like(x)
    cuda.memcpy_dtoh(got, tout)
    np.testing.assert_array_equal(got, x)
    exe.launch()
    exe.synchronize()
    cuda.memcpy_dtoh(got, out)
    np.testing.assert_array_equal(got, 2 * x)
    del exe, g, tex
    import gc

    gc.collect()
    assert d.holders == ()
