"""A shared-memory tiled matrix multiply, checked against NumPy.

python3 examples/matmul_tiled.py
"""

import numpy as np

import _common
from pygpu.compiler import SourceModule, kernel_source

M, K, N = 1000, 777, 513  # not multiples of the tile, on purpose


def main() -> None:
    _common.compile_only("matmul.cu")
    print("compiled matmul.cu")
    _common.gpu_or_exit("matmul_tiled")
    import pygpu.driver as cuda

    rng = np.random.default_rng()
    a = rng.standard_normal((M, K)).astype(np.float32)
    b = rng.standard_normal((K, N)).astype(np.float32)
    expect = a.astype(np.float64) @ b.astype(np.float64)
    for tile in (16, 32):
        f = SourceModule(
            kernel_source("matmul.cu"), options=["-DTILE=%d" % tile], no_extern_c=True
        ).get_function("matmul_tiled")
        da, db, dc = cuda.to_device(a), cuda.to_device(b), cuda.mem_alloc(M * N * 4)
        grid = ((N + tile - 1) // tile, (M + tile - 1) // tile)
        launch = f.configure(grid, (tile, tile, 1))
        ms = _common.time_ms(lambda: launch(dc, da, db, M, N, K))
        c = cuda.from_device(dc, (M, N), np.float32)
        err = np.max(np.abs(c - expect)) / np.max(np.abs(expect))
        print(
            "tile %2d: %.3f ms, %.0f GFLOP/s, max error / max |C| = %.2g"
            % (tile, ms, 2 * M * N * K / ms / 1e6, err)
        )
        _common.check(err < 1e-5, "C == A @ B (float32 accumulation) for tile %d" % tile)


if __name__ == "__main__":
    main()
