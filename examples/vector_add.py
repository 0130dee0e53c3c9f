"""z = x + y over 10^7 float32, checked element by element against NumPy.

python3 examples/vector_add.py
"""

import numpy as np

import _common
from pygpu.compiler import SourceModule, kernel_source

N = 10_000_000


def main() -> None:
    _common.compile_only("elementwise.cu")
    print("compiled elementwise.cu")
    dev = _common.gpu_or_exit("vector_add")
    import pygpu.driver as cuda

    add = SourceModule(kernel_source("elementwise.cu"), no_extern_c=True).get_function("vector_add")
    rng = np.random.default_rng()
    x = rng.standard_normal(N).astype(np.float32)
    y = rng.standard_normal(N).astype(np.float32)
    dx, dy, dz = cuda.to_device(x), cuda.to_device(y), cuda.mem_alloc(x.nbytes)
    sms = dev.get_attribute(cuda.device_attribute.MULTIPROCESSOR_COUNT)
    launch = add.configure((sms * 8, 1), (256, 1, 1))
    ms = _common.time_ms(lambda: launch(dz, dx, dy, N))
    z = cuda.from_device_like(dz, x)
    print("kernel: %.1f us, %.0f GB/s (3 x 4 bytes an element)" % (ms * 1e3, 12 * N / ms / 1e6))
    _common.check(np.array_equal(z, x + y), "z == x + y for all %d elements" % N)


if __name__ == "__main__":
    main()
