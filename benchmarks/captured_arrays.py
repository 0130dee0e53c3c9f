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
  empty_replay_us_per_node
                      the floor: ops launches of an empty kernel captured
                      the same way and replayed, per node

The goal is replay <= 1.0 us an operation; the line says met or not, with
the GPU's name, so a table from any GPU is judged alike.  benchmarks/goals.py
(arrays.py, run.py) calls measure() and puts the goal in its table.  Every
figure that cannot be measured is "failed: ..." instead; without a GPU the
script says so and exits 0.
"""

import argparse
import statistics
import sys
import time

import numpy as np

GOAL_US = 1.0
KEYS = (
    "eager_us_per_op",
    "replay_us_per_op",
    "captured_us_per_op",
    "capture_ms",
    "empty_replay_us_per_node",
)


def median_s(fn, reps=7):
    ts = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return statistics.median(ts)


def _failed(e):
    lines = [ln for ln in str(e).strip().splitlines() if ln.strip()]
    return "failed: %s: %s" % (type(e).__name__, (lines[0] if lines else "")[:200])


def measure(ops=100, n=1000, reps=200):
    """{key: figure or "failed: ..."} for KEYS, plus "gpu"; pygpu.autoinit
    must be importable (a GPU)."""
    import pygpu.autoinit  # noqa: F401
    import pygpu.driver as cuda
    from pygpu import gpuarray, graphs
    from pygpu.compiler import SourceModule

    r = {k: "failed: not reached" for k in KEYS}
    r["gpu"] = cuda.Context.get_device().name()
    rng = np.random.default_rng()
    a0 = gpuarray.to_gpu(rng.standard_normal(n).astype(np.float32))
    b = gpuarray.to_gpu(rng.standard_normal(n).astype(np.float32))
    c = np.float32(0.999)

    def loop(a, b):
        for i in range(ops):
            a = a * c if i % 2 else a + b
        return a

    loop(a0, b).get()  # compile, warm the pool

    def eager():
        loop(a0, b)
        cuda.Context.synchronize()

    try:
        r["eager_us_per_op"] = median_s(eager) / ops * 1e6
    except Exception as e:
        r["eager_us_per_op"] = _failed(e)

    # the floor: ops empty kernels captured and replayed
    try:
        e_fn = SourceModule(
            'extern "C" __global__ void empty_node() { }\n', no_extern_c=True
        ).get_function("empty_node")
        s0 = cuda.Stream()
        with graphs.capture_graph(s0) as cap0:
            for _ in range(ops):
                e_fn(block=(32, 1, 1), grid=(1, 1), stream=s0)
        exe0 = cap0.graph.instantiate()
        exe0.launch(s0)
        s0.synchronize()

        def replay0():
            for _ in range(reps):
                exe0.launch(s0)
            s0.synchronize()

        r["empty_replay_us_per_node"] = median_s(replay0) / (reps * ops) * 1e6
    except Exception as e:
        r["empty_replay_us_per_node"] = _failed(e)

    try:
        s = cuda.Stream()
        t = time.perf_counter()
        with graphs.capture_graph(s) as cap:
            out = loop(a0, b)
        exe = cap.graph.instantiate()
        capture_s = time.perf_counter() - t
        exe.launch(s)
        s.synchronize()
        want = loop(a0, b).get()
        got = out.get()
        from pygpu.testing import standin

        # (the driver stand-in runs no kernel: both hold whatever the memory
        # held, so only a GPU's results are compared)
        if not standin.active() and not np.allclose(got, want, rtol=1e-5, atol=1e-5):
            raise AssertionError(
                "the replayed loop's result differs from the eager one's "
                "(%d of %d elements)" % (int((~np.isclose(got, want, 1e-5, 1e-5)).sum()), n)
            )

        def replay():
            for _ in range(reps):
                exe.launch(s)
            s.synchronize()

        r["replay_us_per_op"] = median_s(replay) / (reps * ops) * 1e6
        r["capture_ms"] = capture_s * 1e3
    except Exception as e:
        r["replay_us_per_op"] = r["capture_ms"] = _failed(e)

    try:
        step = graphs.captured(loop)
        got = step(a0, b).get()
        want = loop(a0, b).get()
        if not np.allclose(got, want, rtol=1e-5, atol=1e-5):
            raise AssertionError("the captured() function's result differs from the eager one's")

        def call():
            for _ in range(reps):
                step(a0, b)
            cuda.Context.synchronize()

        r["captured_us_per_op"] = median_s(call) / (reps * ops) * 1e6
    except Exception as e:
        r["captured_us_per_op"] = _failed(e)
    return r


def _fmt(v):
    return "%8.2f" % v if isinstance(v, float) else v


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ops", type=int, default=100)
    ap.add_argument("--n", type=int, default=1000)
    ap.add_argument("--replays", type=int, default=200)
    args = ap.parse_args(argv)
    from goals import gpu_reason

    reason = gpu_reason()
    if reason is not None:
        print(
            "benchmarks/captured_arrays.py: nothing measured: this machine has no usable GPU "
            "(%s)" % reason
        )
        return 0
    r = measure(args.ops, args.n, args.replays)
    per = r["replay_us_per_op"]
    print(
        "GPU: %s; %d array operations (a + b, a * c) on %d float32" % (r["gpu"], args.ops, args.n)
    )
    print("eager_us_per_op     %s" % _fmt(r["eager_us_per_op"]))
    if isinstance(per, float):
        print(
            "replay_us_per_op    %8.2f   goal <= %.1f us: %s (%.2fx the goal)"
            % (per, GOAL_US, "MET" if per <= GOAL_US else "NOT MET", per / GOAL_US)
        )
    else:
        print("replay_us_per_op    %s   goal <= %.1f us: NOT MEASURED" % (per, GOAL_US))
    print("captured_us_per_op  %s" % _fmt(r["captured_us_per_op"]))
    print("capture_ms          %s" % _fmt(r["capture_ms"]))
    print(
        "empty_replay_us_per_node %s   (the floor: empty kernels captured and replayed)"
        % _fmt(r["empty_replay_us_per_node"])
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
