"""Green contexts: does each partition get its share of the device?

    python benchmarks/green_contexts.py [--split 96,32] [--reps 5] [--iters 20000]

A compute-bound kernel (a chain of FMAs per thread, no memory traffic) runs
with enough blocks to fill any SM set: alone on the whole device (the
primary context), alone on each partition, then on all partitions at once,
each on its own green stream.  Throughput is FMAs per second, median of
--reps; each partition's figure is printed as a share of the whole device's
beside its share of the SMs (an ideal split gives equal figures), and the
concurrent run's sum beside the whole device's.  Every run's output is
checked against NumPy before it is timed.  Without a GPU it says so and
exits 0.
"""

import argparse
import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from goals import gpu_reason  # noqa: E402

SRC = r"""
extern "C" __global__ void burn(float *out, int iters)
{
    float a = threadIdx.x * 1e-3f, b = 0.999f, c = 1e-4f;
    for (int i = 0; i < iters; i++)
        a = fmaf(a, b, c);
    out[blockIdx.x * blockDim.x + threadIdx.x] = a;
}
"""
THREADS = 256


def expected(iters):
    a = np.arange(THREADS, dtype=np.float32) * np.float32(1e-3)
    for _ in range(iters):
        a = a * np.float32(0.999) + np.float32(1e-4)
    return a


class Runner:
    """The kernel compiled in one context, with its output array."""

    def __init__(self, ctx, sms, iters, stream_maker):
        import pygpu.driver as cuda
        from pygpu import gpuarray
        from pygpu.compiler import SourceModule

        self.ctx, self.iters = ctx, iters
        with ctx:
            self.f = SourceModule(SRC).get_function("burn")
            self.blocks = 64 * sms
            self.out = gpuarray.empty(self.blocks * THREADS, np.float32)
            self.stream = stream_maker()
            self.start, self.end = cuda.Event(), cuda.Event()

    def fmas(self):
        return self.blocks * THREADS * self.iters

    def launch(self):
        with self.ctx:
            self.start.record(self.stream)
            self.f(
                self.out,
                np.int32(self.iters),
                block=(THREADS, 1, 1),
                grid=(self.blocks, 1),
                stream=self.stream,
            )
            self.end.record(self.stream)

    def wait(self):
        with self.ctx:
            self.end.synchronize()
            return self.end.time_since(self.start) / 1e3

    def check(self, want):
        self.launch()
        self.wait()
        with self.ctx:
            got = self.out.get().reshape(self.blocks, THREADS)
        np.testing.assert_allclose(got, np.broadcast_to(want, got.shape), rtol=1e-4)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--split", default=None, help="SM counts, e.g. 96,32 (default: 3/4 + 1/4)")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--iters", type=int, default=20000)
    args = ap.parse_args(argv)
    reason = gpu_reason()
    if reason is not None:
        print(
            "benchmarks/green_contexts.py: nothing measured: this machine has no usable GPU (%s)"
            % reason
        )
        return 0
    import pygpu.driver as cuda

    cuda.init()
    dev = cuda.Device(0)
    total, minimum, align = dev.sm_partitioning()
    unit = max(minimum, align)
    if args.split:
        counts = [int(c) for c in args.split.split(",")]
    else:
        small = unit * max(1, total // 4 // unit)
        big = (total - small) // unit * unit
        counts = [big, small]
    print(
        "%s: %d SMs, partitions of at least %d in multiples of %d; split %s"
        % (dev.name(), total, minimum, align, counts)
    )
    want = expected(args.iters)
    whole_ctx = dev.retain_primary_context()
    whole = Runner(whole_ctx, total, args.iters, lambda: cuda.Stream(flags=1))
    parts = dev.split_sms(counts)
    runners = [Runner(g, g.sm_count, args.iters, g.create_stream) for g in parts]
    for r in [whole] + runners:
        r.check(want)

    def alone(r):
        times = []
        for _ in range(args.reps):
            r.launch()
            times.append(r.wait())
        return r.fmas() / statistics.median(times)

    whole_rate = alone(whole)
    print("\nwhole device        %8.1f GFMA/s" % (whole_rate / 1e9))
    for g, r in zip(parts, runners):
        rate = alone(r)
        print(
            "partition %d alone   %8.1f GFMA/s  %5.1f%% of the device for %5.1f%% of its SMs"
            % (g.index, rate / 1e9, 100 * rate / whole_rate, 100 * g.sm_count / total)
        )
    # all at once: each partition's own events, the span from first start to last end
    spans, rates = [], [[] for _ in runners]
    for _ in range(args.reps):
        t0 = time.perf_counter()
        for r in runners:
            r.launch()
        for i, r in enumerate(runners):
            rates[i].append(r.fmas() / r.wait())
        spans.append(time.perf_counter() - t0)
    print()
    for g, rs in zip(parts, rates):
        rate = statistics.median(rs)
        print(
            "partition %d, all at once %6.1f GFMA/s  %5.1f%% of the device for %5.1f%% of "
            "its SMs" % (g.index, rate / 1e9, 100 * rate / whole_rate, 100 * g.sm_count / total)
        )
    together = sum(r.fmas() for r in runners) / statistics.median(spans)
    print(
        "all partitions       %6.1f GFMA/s  %5.1f%% of the device (wall time, launches "
        "included)" % (together / 1e9, 100 * together / whole_rate)
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
