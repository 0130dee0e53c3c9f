#!/usr/bin/env python3
"""Host time of small array operations (issue 27, "a small a + b at the
launch floor"; docs/arrays.md "The operators' fast path").

    python benchmarks/small_ops.py                    # on the GPU
    PYGPU_LIBCUDA=.../libfakecuda.so python benchmarks/small_ops.py
                                                      # host time only, on the stand-in
    python benchmarks/small_ops.py --json out.json

Each row: microseconds an operation, the best of --repeat loops of --number
operations on --size float32 elements, no synchronize inside a loop (on a
GPU the launch queue fills, so a row is the operation's throughput; the
stand-in runs no kernel, so a row is pygpu's host time).  The floor is a
configure()d launch of an empty kernel in the same run.  `python path`
rows call the operator's Python path (gpuarray._OPERATORS[op], which the C
fast path falls back to), for comparison in the same run.
"""

import argparse
import json
import sys
import time

import numpy as np


def best(fn, number, repeat):
    fn(number // 10)
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn(number)
        times.append((time.perf_counter() - t0) / number * 1e6)
    return min(times)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--size", type=int, default=1000)
    p.add_argument("--number", type=int, default=20000)
    p.add_argument("--repeat", type=int, default=7)
    p.add_argument("--json", metavar="FILE")
    args = p.parse_args(argv)

    import pygpu.autoinit  # noqa: F401
    from pygpu import driver as drv
    from pygpu import gpuarray as ga
    from pygpu.compiler import SourceModule

    rng = np.random.default_rng()
    a = ga.to_gpu(rng.standard_normal(args.size).astype(np.float32))
    b = ga.to_gpu(rng.standard_normal(args.size).astype(np.float32))
    c = ga.to_gpu(rng.standard_normal(args.size).astype(np.float32))
    empty = SourceModule('extern "C" __global__ void empty() {}', no_extern_c=True).get_function(
        "empty"
    )
    launch = empty.configure((1, 1), (256, 1, 1))
    py_add, py_mul = ga._OPERATORS["add"], ga._OPERATORS["multiply"]

    def loop(stmt):
        src = "def run(n):\n    global c\n    for _ in range(n):\n        %s\n" % stmt
        ns = {"a": a, "b": b, "c": c, "launch": launch, "py_add": py_add, "py_mul": py_mul}
        exec(src, ns)
        return ns["run"]

    rows = [
        ("empty kernel, configure()d launch (the floor)", "launch()"),
        ("a + b", "a + b"),
        ("a - b", "a - b"),
        ("a * 2.0", "a * 2.0"),
        ("2.0 * a", "2.0 * a"),
        ("a * 2 (an int scalar)", "a * 2"),
        ("c += b", "c += b"),
        ("c *= 0.5", "c *= 0.5"),
        ("a + b, python path", "py_add(a, b)"),
        ("a * 2.0, python path", "py_mul(a, 2.0)"),
    ]
    out = {}
    dev = drv.Context.get_device()
    print(
        "%s, %d float32 elements, best of %d x %d operations"
        % (dev.name(), args.size, args.repeat, args.number)
    )
    for label, stmt in rows:
        us = best(loop(stmt), args.number, args.repeat)
        out[label] = us
        print("  %-48s %7.3f us" % (label, us))
    drv.Context.synchronize()
    floor = out[rows[0][0]]
    print("  a + b over the floor: %+.3f us" % (out["a + b"] - floor))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": dev.name(), "size": args.size, "us": out}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
