"""pygpu's first five minutes: compile a kernel, run it, check it.

Without a GPU this still compiles the kernel (NVRTC needs no GPU), says that
no GPU was found, and exits 0.
"""

import sys
import time

import numpy as np

import pygpu.driver as cuda
from pygpu.compiler import SourceModule, compile

SOURCE = r"""
__global__ void axpb(float *out, const float *x, float a, float b, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        out[i] = a * x[i] + b;
}
"""


def main() -> int:
    t = time.perf_counter()
    ptx = compile('extern "C" {' + SOURCE + '}', arch="compute_80")
    print(
        "compiled axpb to %d bytes of PTX in %.1f ms (no GPU needed)"
        % (len(ptx), (time.perf_counter() - t) * 1e3)
    )
    try:
        cuda.init()
        ndev = cuda.Device.count()
    except cuda.CudaUnavailableError as e:
        print("no GPU: %s" % e)
        print("(the kernel compiled; run this on a machine with a CUDA GPU to launch it)")
        return 0
    import pygpu.autoinit  # noqa: F401  (the primary context of device 0)

    dev = cuda.Context.get_device()
    print("%d device(s); using %r" % (ndev, dev))

    mod = SourceModule(SOURCE)
    axpb = mod.get_function("axpb")
    n = 1_000_003
    x = np.random.default_rng().standard_normal(n).astype(np.float32)
    out = np.empty_like(x)
    a, b = 2.5, -1.25
    axpb(cuda.Out(out), cuda.In(x), a, b, n, block=(256, 1, 1), grid=((n + 255) // 256, 1))
    expect = np.float32(a) * x + np.float32(b)
    err = np.max(np.abs(out - expect))
    print("axpb on %d floats: max |error| vs NumPy = %.3g" % (n, err))
    if not np.allclose(out, expect, rtol=1e-6, atol=1e-6):
        print("MISMATCH")
        return 1
    print("OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
