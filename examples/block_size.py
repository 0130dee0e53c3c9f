"""Pick the fastest block size at run time by timing candidates with events,
and compare with what the occupancy calculator suggests.

    python3 examples/block_size.py
"""
import numpy as np

import _common
from pygpu.compiler import SourceModule, kernel_source

N = 1 << 24


def main():
    _common.compile_only("elementwise.cu")
    print("compiled elementwise.cu")
    dev = _common.gpu_or_exit("block_size")
    import pygpu.driver as cuda

    f = SourceModule(kernel_source("elementwise.cu"), no_extern_c=True).get_function("saxpy")
    rng = np.random.default_rng()
    x = rng.standard_normal(N).astype(np.float32)
    y = rng.standard_normal(N).astype(np.float32)
    a = np.float32(1.5)
    dx, dy, dout = cuda.to_device(x), cuda.to_device(y), cuda.mem_alloc(x.nbytes)
    sms = dev.get_attribute(cuda.device_attribute.MULTIPROCESSOR_COUNT)
    results = {}
    for block in (32, 64, 128, 256, 512, 1024):
        blocks_per_sm = f.max_active_blocks_per_multiprocessor(block)
        launch = f.configure((sms * blocks_per_sm, 1), (block, 1, 1))
        results[block] = _common.time_ms(lambda: launch(dout, dx, dy, a, N))
        print("block %4d: %d blocks/SM, %.1f us" % (block, blocks_per_sm, results[block] * 1e3))
    best = min(results, key=lambda b: results[b])
    min_grid, suggested = f.max_potential_block_size()
    print("fastest: %d threads a block; the occupancy calculator suggests %d (grid >= %d)"
          % (best, suggested, min_grid))
    f.configure((sms * f.max_active_blocks_per_multiprocessor(best), 1), (best, 1, 1))(
        dout, dx, dy, a, N)
    out = cuda.from_device_like(dout, x)
    _common.check(np.allclose(out, a * x + y, rtol=1e-6, atol=1e-6),
                  "saxpy with the chosen block size matches NumPy")


if __name__ == "__main__":
    main()
