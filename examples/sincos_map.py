"""cos(x)**2 + sin(x)**2 over 10^7 values: exact sincosf and -use_fast_math,
each checked against NumPy.

    python3 examples/sincos_map.py
"""

import numpy as np

import _common
from pygpu.compiler import SourceModule, kernel_source

N = 10_000_000


def main() -> None:
    for opts in ([], ["-use_fast_math"]):
        _common.compile_only("elementwise.cu", opts)
    print("compiled elementwise.cu, with and without -use_fast_math")
    dev = _common.gpu_or_exit("sincos_map")
    import pygpu.driver as cuda

    rng = np.random.default_rng()
    x = rng.uniform(-100, 100, N).astype(np.float32)
    expect = np.cos(x.astype(np.float64)) ** 2 + np.sin(x.astype(np.float64)) ** 2
    dx, dout = cuda.to_device(x), cuda.mem_alloc(x.nbytes)
    sms = dev.get_attribute(cuda.device_attribute.MULTIPROCESSOR_COUNT)
    for opts, tol in (([], 4e-7), (["-use_fast_math"], 5e-6)):
        f = SourceModule(
            kernel_source("elementwise.cu"), options=opts, no_extern_c=True
        ).get_function("sincos_identity")
        launch = f.configure((sms * 8, 1), (256, 1, 1))
        ms = _common.time_ms(lambda: launch(dout, dx, N))
        out = cuda.from_device_like(dout, x)
        err = np.max(np.abs(out - expect))
        print(
            "%-16s %.1f us, max |error| vs NumPy (float64) %.2g"
            % (" ".join(opts) or "exact", ms * 1e3, err)
        )
        _common.check(err <= tol, "every element within %.0e of 1" % tol)


if __name__ == "__main__":
    main()
