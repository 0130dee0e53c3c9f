"""PyCUDA's hello world: double a 4x4 array in place on the GPU, with InOut.

python3 examples/hello_doublify.py
"""

import time

import numpy as np

import _common
from pygpu.compiler import SourceModule, kernel_source


def main() -> None:
    t = time.perf_counter()
    n = _common.compile_only("doublify.cu")
    print(
        "compiled doublify.cu to %d bytes of PTX in %.1f ms" % (n, (time.perf_counter() - t) * 1e3)
    )
    _common.gpu_or_exit("doublify")
    import pygpu.driver as cuda

    doublify = SourceModule(kernel_source("doublify.cu"), no_extern_c=True).get_function("doublify")
    a = np.random.default_rng().standard_normal((4, 4)).astype(np.float32)
    before = a.copy()
    for what in ("first call", "second call"):
        b = a.copy()
        t = time.perf_counter()
        doublify(cuda.InOut(b), block=(4, 4, 1))
        print(
            "doublify with InOut (copy in, launch, copy out), %s: %.1f us"
            % (what, (time.perf_counter() - t) * 1e6)
        )
    doublify(cuda.InOut(a), block=(4, 4, 1))
    print(a)
    _common.check(np.array_equal(a, 2 * before), "every element doubled")


if __name__ == "__main__":
    main()
