"""Array programs as CUDA graphs (issue 27): a loop of small array operations
run eagerly, captured with capture_graph() and replayed, and wrapped in
graphs.captured().

    python3 benchmarks/captured_arrays.py [--ops 100] [--n 1000] [--replays 200]

The operations alternate `a = a + b` and `a = a * c` on n float32 elements
(one small kernel and one new array each, as array code makes them), so
the figures are the cost of getting small array work onto the GPU:

  eager_us_per_op     the loop run eagerly (no synchronize inside), per op
  replay_us_per_op    the loop captured once by capture_graph(), then
                      GraphExec.launch() replays times, one synchronize;
                      / (replays x ops)
  captured_us_per_op  the loop as a graphs.captured() function (its inputs
                      copied in each call), calls times; / (calls x ops)
  capture_ms          capturing the loop once (capture + instantiate)

The goal is replay <= 1.0 us an operation; the line says met or not, with
the GPU's name, so a table from any GPU is judged alike.
"""
import argparse
import statistics
import time

import numpy as np


def median_s(fn, reps=7):
    ts = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return statistics.median(ts)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ops", type=int, default=100)
    ap.add_argument("--n", type=int, default=1000)
    ap.add_argument("--replays", type=int, default=200)
    args = ap.parse_args()

    import pygpu.autoinit  # noqa: F401
    import pygpu.driver as cuda
    from pygpu import gpuarray, graphs

    ops, n, reps = args.ops, args.n, args.replays
    rng = np.random.default_rng(0)
    a0 = gpuarray.to_gpu(rng.standard_normal(n).astype(np.float32))
    b = gpuarray.to_gpu(rng.standard_normal(n).astype(np.float32))
    c = np.float32(0.999)

    def loop(a, b):
        for i in range(ops):
            a = a * c if i % 2 else a + b
        return a

    loop(a0, b).get()                                   # compile, warm the pool

    def eager():
        loop(a0, b)
        cuda.Context.synchronize()
    eager_s = median_s(eager)

    s = cuda.Stream()
    t = time.perf_counter()
    with graphs.capture_graph(s) as cap:
        out = loop(a0, b)
    exe = cap.graph.instantiate()
    capture_s = time.perf_counter() - t
    exe.launch(s)
    s.synchronize()
    want = loop(a0, b).get()
    np.testing.assert_allclose(out.get(), want, rtol=1e-5, atol=1e-5)

    def replay():
        for _ in range(reps):
            exe.launch(s)
        s.synchronize()
    replay_s = median_s(replay)

    step = graphs.captured(loop)
    step(a0, b)

    def call():
        for _ in range(reps):
            step(a0, b)
        cuda.Context.synchronize()
    captured_s = median_s(call)

    name = cuda.Context.get_device().name()
    per_replay = replay_s / (reps * ops) * 1e6
    print("GPU: %s; %d array operations (a + b, a * c) on %d float32" % (name, ops, n))
    print("eager_us_per_op     %8.2f" % (eager_s / ops * 1e6))
    print("replay_us_per_op    %8.2f   goal <= 1.0 us: %s (%.2fx the goal)"
          % (per_replay, "met" if per_replay <= 1.0 else "NOT met", per_replay / 1.0))
    print("captured_us_per_op  %8.2f" % (captured_s / (reps * ops) * 1e6))
    print("capture_ms          %8.2f" % (capture_s * 1e3))


if __name__ == "__main__":
    main()
