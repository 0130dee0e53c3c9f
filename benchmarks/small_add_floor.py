#!/usr/bin/env python3
"""Where a small a + b's time goes, against the C launch loop (issue 35,
"the last launch floors"; the goal itself is benchmarks/goals.py's).

    python benchmarks/small_add_floor.py [--json out.json]

In one process, burst for burst (each row: microseconds an operation, the
median over --rounds rounds of --ops back-to-back operations with no
synchronize inside, the rows interleaved round by round):

  c empty            the goals' C floor: an empty kernel, grid 1 x 32, no
                     parameters, cuLaunchKernel on the legacy stream
  c empty ex         the same through cuLaunchKernelEx (pygpu's entry point)
  c add / c add ex   the kernel a + b launches, its grid, its four
                     parameters (a preallocated result), from C
  pygpu empty        a configure()d launch of the empty kernel
  pygpu add bound    the a + b kernel configure()d, the result preallocated
  pygpu a + b        da + db (the result allocated, as a user writes it)
  python loop        the loop statement alone (pass)

and the GPU's own rate for each kernel (--gpu-ops launches queued behind
a spinning kernel, timed by events from the spin's end: the device's time
an operation, with the host out of the way).  The difference of `pygpu a
+ b` and `c add` is pygpu's host overhead; of `c add` and `c empty`, what
the kernel itself adds over the floor.
"""

import argparse
import ctypes
import json
import os
import statistics
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))


def build():
    root = os.environ.get("CUDA_HOME") or "/usr/local/cuda"
    out = os.path.join(HERE, "build")
    os.makedirs(out, exist_ok=True)
    so = os.path.join(out, "floor_small_add.so")
    cmd = ["cc", "-O2", "-shared", "-fPIC", "-o", so, os.path.join(HERE, "floor_small_add.c")]
    cmd += ["-I" + os.path.join(root, "include"), "-L" + os.path.join(root, "lib64", "stubs")]
    subprocess.run(cmd + ["-lcuda"], check=True)
    lib = ctypes.CDLL(so)
    lib.burst.restype = ctypes.c_double
    lib.burst.argtypes = [ctypes.c_void_p, ctypes.c_int] + [ctypes.c_ulonglong] * 3
    lib.burst.argtypes += [
        ctypes.c_longlong,
        ctypes.c_uint,
        ctypes.c_uint,
        ctypes.c_int,
        ctypes.c_int,
    ]
    return lib


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--size", type=int, default=1000)
    p.add_argument("--ops", type=int, default=5000)
    p.add_argument("--rounds", type=int, default=20)
    p.add_argument("--gpu-ops", type=int, default=500)
    p.add_argument("--json", metavar="FILE")
    args = p.parse_args(argv)

    import pygpu.autoinit  # noqa: F401
    from pygpu import driver as drv
    from pygpu import gpuarray as ga
    from pygpu.compiler import SourceModule

    lib = build()
    ctx = drv.Context.get_current()
    rng = np.random.default_rng()
    a = rng.random(args.size, dtype=np.float32)
    b = rng.random(args.size, dtype=np.float32)
    da, db = ga.to_gpu(a), ga.to_gpu(b)
    dz = da + db
    assert np.array_equal(dz.get(), a + b)
    func, _ = ga._aa_entry("add", ctx, da.dtype, db.dtype)
    grid, block = ga.splay(args.size)
    mod = SourceModule(
        'extern "C" __global__ void empty() { }\n'
        'extern "C" __global__ void spin(long long c) {'
        " long long t = clock64(); while (clock64() - t < c) { } }\n",
        no_extern_c=True,
    )
    empty, spin = mod.get_function("empty"), mod.get_function("spin")
    n = args.size
    z, x, y = int(dz.gpudata), int(da.gpudata), int(db.gpudata)

    def c(fn, nparams, g, blk, ex):
        def run(count):
            t = lib.burst(fn.handle, nparams, z, x, y, n, g, blk, ex, count)
            if t < 0:
                raise RuntimeError("cuLaunchKernel: CUresult %d" % -t)
            return t

        return run

    def loop(stmt, **names):
        src = "def run(count):\n    t = _pc()\n    for _ in range(count):\n        %s\n    return _pc() - t\n"
        g = dict(names, _pc=time.perf_counter)
        exec(src % stmt, g)
        return g["run"]

    g0 = grid[0]
    rows = {
        "c empty": c(empty, 0, 1, 32, 0),
        "c empty ex": c(empty, 0, 1, 32, 1),
        "c add": c(func, 4, g0, block[0], 0),
        "c add ex": c(func, 4, g0, block[0], 1),
        "pygpu empty": loop("e()", e=empty.configure((1, 1), (32, 1, 1))),
        "pygpu add bound": loop(
            "f(gz, gx, gy, n)",
            f=func.configure(grid, block),
            gz=dz.gpudata,
            gx=da.gpudata,
            gy=db.gpudata,
            n=n,
        ),
        "pygpu a + b": loop("da + db", da=da, db=db),
        "python loop": loop("pass"),
    }
    times = {k: [] for k in rows}
    order = list(rows)
    for k in order:
        rows[k](args.ops // 10)
        ctx.synchronize()
    for r in range(args.rounds):
        for k in order[r % len(order) :] + order[: r % len(order)]:
            times[k].append(rows[k](args.ops) / args.ops * 1e6)
            ctx.synchronize()
    assert np.array_equal(dz.get(), a + b)

    # the device's own rate: launches queued behind a spinning kernel
    def gpu_rate(launch):
        e0, e1 = drv.Event(), drv.Event()
        spin(np.int64(2_000_000_000), block=(1, 1, 1), grid=(1, 1))  # ~1 s at 2 GHz: ample
        e0.record()
        for _ in range(args.gpu_ops):
            launch()
        e1.record()
        e1.synchronize()
        return e1.time_since(e0) * 1e3 / args.gpu_ops

    gpu = {}
    for name, launch in (
        ("empty", lambda: lib.burst(empty.handle, 0, z, x, y, n, 1, 32, 0, 1)),
        ("add", lambda: lib.burst(func.handle, 4, z, x, y, n, g0, block[0], 0, 1)),
    ):
        gpu[name] = statistics.median(gpu_rate(launch) for _ in range(5))

    med = {k: statistics.median(v) for k, v in times.items()}
    pair = lambda p, q: statistics.median(u - v for u, v in zip(times[p], times[q]))  # noqa: E731
    dev = drv.Context.get_device()
    print(
        "%s; %d float32, %d ops a burst, median of %d rounds"
        % (dev.name(), n, args.ops, args.rounds)
    )
    for k in order:
        print("  %-16s %7.3f us" % (k, med[k]))
    print("  gpu rate empty   %7.3f us an op (device time, host out of the way)" % gpu["empty"])
    print("  gpu rate add     %7.3f us an op" % gpu["add"])
    diffs = {
        "a + b over c empty": pair("pygpu a + b", "c empty"),
        "a + b over c add": pair("pygpu a + b", "c add"),
        "a + b over c add ex": pair("pygpu a + b", "c add ex"),
        "c add over c empty": pair("c add", "c empty"),
        "c add ex over c add": pair("c add ex", "c add"),
        "bound over c add ex": pair("pygpu add bound", "c add ex"),
        "a + b over bound": pair("pygpu a + b", "pygpu add bound"),
    }
    for k, v in diffs.items():
        print("  %-22s %+7.3f us (paired)" % (k, v))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                {"median_us": med, "gpu_rate_us": gpu, "paired_us": diffs, "rounds": times},
                f,
                indent=1,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
