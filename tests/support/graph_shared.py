"""What the graph tests share (tests/graphs/test_graphs.py,
test_graph_capture.py, test_graph_faults.py, test_graph_holds.py,
test_graphs_gpu.py): their kernels, reading back the stand-in's replay of a
graph launch and its live graphs, catching unraisable errors (the thread that
keeps its exception is tests/support/threaded.py's)."""

import ctypes
import gc
import sys

import numpy as np

from pygpu import graphs


KERNELS = r"""
extern "C" __global__ void scale(float *x, float a, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] *= a;
}
extern "C" __global__ void other(float *x, float a, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] += a;
}
extern "C" __global__ void axpy(float *y, const float *x, float a, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}
extern "C" __global__ void mixed(char c, short h, int i, long long q, float f, double d,
                                 const float *p) { }
extern "C" __global__ void two(float *x, int n) { }
"""


# what a kernel needs to set a conditional node's value under NVRTC: the
# driver resolves cudaGraphSetConditional when the module loads
COND_KERNELS = (
    graphs.CONDITIONAL_PREAMBLE
    + r"""
// one step of a countdown: the while loop runs while it is > 0
extern "C" __global__ void step(cudaGraphConditionalHandle h, int *counter)
{
    if (threadIdx.x == 0 && blockIdx.x == 0) {
        int c = --(*counter);
        cudaGraphSetConditional(h, c > 0 ? 1u : 0u);
    }
}
extern "C" __global__ void set_from(cudaGraphConditionalHandle h, const int *value)
{
    if (threadIdx.x == 0 && blockIdx.x == 0)
        cudaGraphSetConditional(h, (unsigned int)*value);
}
extern "C" __global__ void add_const(float *x, float a, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] += a;
}
"""
)


def layout(values):
    """Natural C layout of NumPy scalars."""
    out = b""
    for v in values:
        a = np.asarray(v)
        al = min(a.dtype.alignment, 8)
        out += b"\0" * (-len(out) % al)
        out += a.tobytes()
    return out


def replayed(standin):
    """[(kernel name, parameter bytes)] of the last graph launch."""
    buf = ctypes.create_string_buffer(1 << 20)
    lib = standin.lib
    lib.fakecuda_replay_log.restype = ctypes.c_size_t
    lib.fakecuda_replay_log(buf, len(buf))
    out = []
    for line in buf.value.decode().splitlines():
        name, hexed = line.split(":")
        out.append((name, bytes.fromhex(hexed)))
    return out


def live_graphs(standin):
    gc.collect()
    return standin.lib.fakecuda_live(b"graphs"), standin.lib.fakecuda_live(b"graph_execs")


def unraisable():
    seen = []
    old = sys.unraisablehook
    sys.unraisablehook = seen.append
    return seen, old
