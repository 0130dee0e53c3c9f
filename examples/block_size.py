"""Pick the fastest block size at run time: "Forget heuristics. Benchmark at
run time and use whatever works fastest."  pygpu.tools.autotune times each
candidate with events on the real arguments, checks each one's output
against the first, and remembers the winner (a second run of this script
launches it without timing).  The occupancy calculator's suggestion is
printed beside it.  Each step is an NVTX range: under Nsight Systems
(nsys profile --trace=cuda,nvtx python3 examples/block_size.py) the
timeline shows them by name.

    python3 examples/block_size.py
"""

import numpy as np

import _common
from pygpu import profiler
from pygpu.compiler import SourceModule, kernel_source

N = 1 << 24
BLOCKS = [32, 64, 128, 256, 512, 1024]


def main() -> None:
    with profiler.time_range("compile (no GPU)", "orange"):
        _common.compile_only("elementwise.cu")
    print("compiled elementwise.cu")
    dev = _common.gpu_or_exit("block_size")
    import pygpu.driver as cuda
    from pygpu.tools import autotune

    src = kernel_source("elementwise.cu")
    f = SourceModule(src, no_extern_c=True).get_function("saxpy")
    rng = np.random.default_rng()
    x = rng.standard_normal(N).astype(np.float32)
    y = rng.standard_normal(N).astype(np.float32)
    a = np.float32(1.5)
    with profiler.time_range("upload", "blue"):
        dx, dy = cuda.to_device(x), cuda.to_device(y)
        from pygpu import gpuarray

        dout = gpuarray.empty(N, np.float32)
    sms = dev.get_attribute(cuda.device_attribute.MULTIPROCESSOR_COUNT)

    def grid(
        choice: dict[str, int],
    ) -> tuple[int, int]:  # the grid-stride kernel: enough blocks to fill every SM
        return (sms * f.max_active_blocks_per_multiprocessor(choice["block"]), 1)

    with profiler.time_range("autotune block size", "green"):
        launch = autotune(
            src,
            "saxpy",
            [dout, dx, dy, a, np.int32(N)],
            space={"block": BLOCKS},
            grid=grid,
            no_extern_c=True,
            outputs=[0],
            repeat=20,
        )
    print(launch.format_table())
    min_grid, suggested = f.max_potential_block_size()
    print(
        "fastest: %d threads a block; the occupancy calculator suggests %d (grid >= %d)"
        % (launch.choice["block"], suggested, min_grid)
    )
    with profiler.time_range("saxpy (tuned)", "red"):
        launch(dout, dx, dy, a, np.int32(N))
    with profiler.time_range("download", "blue"):
        out = dout.get()
    _common.check(
        np.allclose(out, a * x + y, rtol=1e-6, atol=1e-6),
        "saxpy with the chosen block size matches NumPy",
    )


if __name__ == "__main__":
    main()
