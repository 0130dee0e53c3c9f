"""Overlap copies with compute: the data goes up, through a kernel and back
in chunks on several streams, from page-locked memory, against the same
work done one step after another.

    python3 examples/streams_overlap.py
"""

import numpy as np

import _common
from pygpu.compiler import SourceModule, kernel_source

N = 1 << 26  # 64 M floats, 256 MiB each way
CHUNKS = 16
STREAMS = 4


def main() -> None:
    _common.compile_only("elementwise.cu")
    print("compiled elementwise.cu")
    dev = _common.gpu_or_exit("streams_overlap")
    import pygpu.driver as cuda

    f = SourceModule(kernel_source("elementwise.cu"), no_extern_c=True).get_function(
        "sincos_identity"
    )
    rng = np.random.default_rng()
    host_in = cuda.pagelocked_empty(N, np.float32)
    host_in[:] = rng.uniform(-10, 10, N).astype(np.float32)
    host_out = cuda.pagelocked_zeros(N, np.float32)
    d_in, d_out = cuda.mem_alloc(host_in.nbytes), cuda.mem_alloc(host_in.nbytes)
    sms = dev.get_attribute(cuda.device_attribute.MULTIPROCESSOR_COUNT)
    chunk = N // CHUNKS
    nbytes = chunk * 4

    def serial() -> None:
        cuda.memcpy_htod(d_in, host_in)
        f(d_out, d_in, N, block=(256, 1, 1), grid=(sms * 8, 1))
        cuda.memcpy_dtoh(host_out, d_out)

    streams = [cuda.Stream() for _ in range(STREAMS)]

    def overlapped() -> None:
        for i in range(CHUNKS):
            s = streams[i % STREAMS]
            off = i * nbytes
            cuda.memcpy_htod_async(int(d_in) + off, host_in[i * chunk : (i + 1) * chunk], s)
            f(
                int(d_out) + off,
                int(d_in) + off,
                chunk,
                block=(256, 1, 1),
                grid=(sms * 2, 1),
                stream=s,
            )
            cuda.memcpy_dtoh_async(host_out[i * chunk : (i + 1) * chunk], int(d_out) + off, s)
        for s in streams:
            s.synchronize()

    t_serial = _common.time_ms(serial, repeat=5)
    host_out[:] = 0
    t_over = _common.time_ms(overlapped, repeat=5)
    print(
        "one step after another: %.2f ms; %d chunks on %d streams: %.2f ms (%.2fx)"
        % (t_serial, CHUNKS, STREAMS, t_over, t_serial / t_over)
    )
    x = host_in.astype(np.float64)
    err = np.max(np.abs(host_out - (np.cos(x) ** 2 + np.sin(x) ** 2)))
    _common.check(err < 1e-6, "every element of the overlapped result is cos^2 + sin^2")


if __name__ == "__main__":
    main()
