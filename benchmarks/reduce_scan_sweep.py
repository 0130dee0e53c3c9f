#!/usr/bin/env python3
"""Reduction and scan kernel sweep: each configuration of pygpu.reduction's
and pygpu.scan's kernels, timed next to floors measured in the same run.

    python benchmarks/reduce_scan_sweep.py [--json out.json] [--n 100000000]
                                           [--reps 15] [--batch 10] [--quick]

For each reduction configuration (PYGPU_REDUCTION_CONFIG's syntax): sum,
min and dot of --n float32, and for each scan configuration
(PYGPU_SCAN_CONFIG's): an inclusive sum scan of --n float32.  Every result
is checked against NumPy (a float64 reference for the sums; exact for min
and for the scan, whose data is zeros and ones so every prefix is an
integer below 2**24) before it is timed; a wrong result is reported, never
timed.

Two figures a row:
  gpu   the kernels' time: CUDA events around --batch back-to-back calls,
        divided by the count (the calls queue faster than they run, so the
        GPU never idles between them); the best of three batches.
  wall  one call and a synchronize, median of --reps (what a user sees;
        benchmarks/arrays.py's method).
Floors in the same run: a plain read kernel over the same bytes (16-byte
loads, the best of a few grid shapes; the reductions' bound, "read%" =
floor time / kernel time: the goal is >= 90%), the driver's D->D copy of
the array (the scan's bound, "copy%": the goal is >= 85%), and CuPy's
cupy.sum / cupy.min / cupy.dot / cupy.cumsum where CuPy imports (goal:
pygpu's time <= CuPy's).  The best configuration of each kind is printed
with the environment line that selects it; make it the default by changing
REDUCTION_DEFAULTS / SCAN_DEFAULTS.  Without a GPU the script says so and
exits 0.
"""

import argparse
import json
import math
import os
import platform
import statistics
import sys
import time

import numpy as np

# The reduction grid (block, unroll, vec, bps, launch); "" is the defaults.
REDUCTIONS = [
    "block=256,unroll=8,vec=0,launch=2",  # the kernel before this sweep
    "",
    "launch=1",
    "unroll=2",
    "unroll=8",
    "unroll=2,launch=1",
    "block=512",
    "block=128",
    "block=1024,unroll=2",
    "bps=4",
    "bps=2,unroll=8",
    "bps=1,block=1024",
    "vec=8",
    "vec=8,unroll=8",
    "vec=0,unroll=16",
    "bps=4,launch=1",
]

# The scan grid (threads, items, min_blocks, warp_load, vec, sleep, hold,
# async_copy, window); "" is the defaults.
SCANS = [
    "threads=256,items=32,min_blocks=3,warp_load=0,vec=0,hold=1",  # before this sweep
    "",
    "threads=256,items=32,min_blocks=3,hold=1",
    "threads=256,items=32,min_blocks=2,hold=1",
    "threads=256,items=32,min_blocks=3,hold=0",
    "threads=256,items=32,min_blocks=4,hold=0,vec=0",
    "threads=256,items=32,min_blocks=4,hold=0,warp_load=0",
    "threads=512,items=16,min_blocks=2,hold=1",
    "threads=512,items=16,min_blocks=3,hold=0",
    "threads=128,items=24,min_blocks=4,hold=1",
    "threads=256,items=32,min_blocks=4,hold=0,async_copy=1",
    "threads=256,items=32,min_blocks=5,hold=0,async_copy=1",
    "threads=256,items=32,min_blocks=6,hold=0,async_copy=1",
    "threads=128,items=64,min_blocks=6,hold=0,async_copy=1",
    "threads=512,items=16,min_blocks=4,hold=0,async_copy=1",
    "threads=256,items=16,min_blocks=8,hold=0,async_copy=1",
    "threads=128,items=32,min_blocks=12,hold=0,async_copy=1",
    "threads=256,items=32,min_blocks=6,hold=0,async_copy=1,sleep=100",
    "threads=256,items=32,min_blocks=4,hold=0,sleep=100",
    "window=2",
    "window=4",
    "threads=256,items=32,min_blocks=6,hold=0,async_copy=1,window=4",
]

READ_FLOOR_SOURCE = r"""
extern "C" __global__ void read_floor(const float4 *__restrict__ x, unsigned long long n4,
                                      float *out)
{
    float acc = 0.0f;
    const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    unsigned long long k = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    for (; k + 3 * stride < n4; k += 4 * stride) {
        const float4 a = x[k], b = x[k + stride], c = x[k + 2 * stride], d = x[k + 3 * stride];
        acc += ((a.x + a.y) + (a.z + a.w)) + ((b.x + b.y) + (b.z + b.w))
             + ((c.x + c.y) + (c.z + c.w)) + ((d.x + d.y) + (d.z + d.w));
    }
    for (; k < n4; k += stride) {
        const float4 a = x[k];
        acc += (a.x + a.y) + (a.z + a.w);
    }
    if (acc == -1.0f)          // never, for the non-negative data: a minimal write
        out[0] = acc;
}
"""


class WrongResult(Exception):
    pass


def gpu_reason():
    """None if a CUDA GPU is usable, else why not (libcuda.so.1 itself)."""
    import ctypes

    try:
        lib = ctypes.CDLL("libcuda.so.1")
    except OSError as e:
        return "no CUDA driver (libcuda.so.1: %s)" % e
    if lib.cuInit(0) != 0:
        return "cuInit failed"
    n = ctypes.c_int(0)
    if lib.cuDeviceGetCount(ctypes.byref(n)) != 0 or n.value == 0:
        return "no CUDA device is visible"
    return None


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=int, default=100_000_000, help="elements (float32)")
    p.add_argument("--reps", type=int, default=15, help="timed calls for a wall figure")
    p.add_argument("--batch", type=int, default=10, help="calls in an event-timed batch")
    p.add_argument(
        "--budget",
        type=float,
        default=200.0,
        help="seconds; configurations past it are skipped (and listed)",
    )
    p.add_argument(
        "--quick", action="store_true", help="the defaults and the kernels before this sweep only"
    )
    p.add_argument("--reductions", help="';'-separated configurations instead of the grid")
    p.add_argument("--scans", help="';'-separated configurations instead of the grid")
    p.add_argument("--json", help="write every figure here")
    p.add_argument(
        "--no-check",
        action="store_true",
        help="skip the NumPy checks (only for the driver stand-in, which runs no "
        "kernels: it exercises the script)",
    )
    a = p.parse_args(argv)
    a.reductions = REDUCTIONS if a.reductions is None else a.reductions.split(";")
    a.scans = SCANS if a.scans is None else a.scans.split(";")
    if a.quick:
        a.reductions, a.scans = a.reductions[:2], a.scans[:2]
    return a


class Timer:
    def __init__(self, driver, reps, batch):
        self.drv = driver
        self.reps = reps
        self.batch = batch
        self.sync = driver.Context.synchronize

    def wall_us(self, fn):
        for _ in range(2):
            fn()
            self.sync()
        v = []
        for _ in range(self.reps):
            t = time.perf_counter()
            fn()
            self.sync()
            v.append((time.perf_counter() - t) * 1e6)
        return statistics.median(v)

    def gpu_us(self, fn):
        fn()
        self.sync()
        best = math.inf
        for _ in range(3):
            start, end = self.drv.Event(), self.drv.Event()
            start.record()
            for _ in range(self.batch):
                fn()
            end.record()
            end.synchronize()
            best = min(best, end.time_since(start) * 1e3 / self.batch)
        return best


def cupy_figures(x, y, s, timer, reps, batch):
    """CuPy's sum/min/dot/cumsum (wall and event-timed), or {"error": why}."""
    try:
        import cupy as cp
    except Exception as e:
        return {"error": "CuPy not importable: %s" % e}
    out = {"version": cp.__version__}
    try:
        dx, dy, ds = cp.asarray(x), cp.asarray(y), cp.asarray(s)

        def sync():
            cp.cuda.Device().synchronize()

        def wall(fn):
            for _ in range(2):
                fn()
                sync()
            v = []
            for _ in range(reps):
                t = time.perf_counter()
                fn()
                sync()
                v.append((time.perf_counter() - t) * 1e6)
            return statistics.median(v)

        def gpu(fn):
            fn()
            sync()
            best = math.inf
            for _ in range(3):
                e0, e1 = cp.cuda.Event(), cp.cuda.Event()
                e0.record()
                for _ in range(batch):
                    fn()
                e1.record()
                e1.synchronize()
                best = min(best, cp.cuda.get_elapsed_time(e0, e1) * 1e3 / batch)
            return best

        for what, fn in (
            ("sum", lambda: cp.sum(dx)),
            ("min", lambda: cp.min(dx)),
            ("dot", lambda: cp.dot(dx, dy)),
            ("scan", lambda: cp.cumsum(ds)),
        ):
            out[what + "_wall_us"] = wall(fn)
            out[what + "_gpu_us"] = gpu(fn)
        del dx, dy, ds
        cp.get_default_memory_pool().free_all_blocks()
    except Exception as e:
        out["error"] = "%s: %s" % (type(e).__name__, e)
    return out


def floors(drv, gpuarray, compiler, dx, timer):
    """The read kernel's best time over dx, and the D->D copy of dx."""
    n4 = dx.size // 4
    mod = compiler.SourceModule(READ_FLOOR_SOURCE, no_extern_c=True)
    fn = mod.get_function("read_floor")
    fn.prepare("PQP")
    sink = gpuarray.empty(1, np.float32)
    sms = drv.Context.get_device().get_attribute(drv.device_attribute.MULTIPROCESSOR_COUNT)
    shapes = {}
    for per_sm in (2, 4, 8, 16):
        grid = sms * per_sm
        shapes[per_sm] = timer.gpu_us(
            lambda: fn.prepared_async_call(
                (grid, 1), (256, 1, 1), None, dx.gpudata, n4, sink.gpudata
            )
        )
    dst = gpuarray.empty_like(dx)
    nbytes = dx.nbytes
    copy_us = timer.gpu_us(lambda: drv.memcpy_dtod_async(dst.gpudata, dx.gpudata, nbytes))
    np.testing.assert_array_equal(dst[:1000].get(), dx[:1000].get())
    del dst
    return {
        "read_us": min(shapes.values()),
        "read_us_by_blocks_per_sm": shapes,
        "read_GBps": nbytes / min(shapes.values()) / 1e3,
        "copy_us": copy_us,
        "copy_GBps": 2 * nbytes / copy_us / 1e3,
        "bytes": nbytes,
    }


def check_close(what, got, want, rtol):
    got = float(np.asarray(got))
    if not abs(got - want) <= rtol * abs(want):
        raise WrongResult(
            "%s %r, NumPy (float64) %r: relative error over %g" % (what, got, want, rtol)
        )


def run_reduction(cfg, mods, data, timer, check=True):
    reduction, gpuarray = mods["reduction"], mods["gpuarray"]
    dx, dy, ref = data["dx"], data["dy"], data["ref"]
    row = {"config": cfg}
    f32 = np.dtype(np.float32)
    if cfg == "default":
        # the user's path: the memoized kernels behind gpuarray (the module's
        # defaults, or PYGPU_REDUCTION_CONFIG when it is set)
        calls = {
            "sum": lambda: gpuarray.sum(dx),
            "min": lambda: gpuarray.min(dx),
            "dot": lambda: gpuarray.dot(dx, dy),
        }
        row["resolved"] = reduction.reduction_config()
    else:
        sk = reduction.ReductionKernel(f32, "0", "a+b", arguments="const float *in", config=cfg)
        mk = reduction.ReductionKernel(
            f32,
            reduction.get_minmax_neutral("min", f32),
            reduction._minmax_expr("min", f32),
            arguments="const float *in",
            config=cfg,
        )
        dk = reduction.ReductionKernel(
            f32,
            "0",
            "a+b",
            map_expr="a[i]*b[i]",
            arguments="const float *a, const float *b",
            config=cfg,
        )
        calls = {"sum": lambda: sk(dx), "min": lambda: mk(dx), "dot": lambda: dk(dx, dy)}
        row["resolved"] = sk.config
        row["vec_elements"] = sk.vec
    if check:
        check_close("sum", calls["sum"]().get(), ref["sum"], 1e-5)
        got = float(calls["min"]().get())
        if got != ref["min"]:
            raise WrongResult("min %r, NumPy %r" % (got, ref["min"]))
        check_close("dot", calls["dot"]().get(), ref["dot"], 1e-5)
    for what, fn in calls.items():
        row[what + "_gpu_us"] = timer.gpu_us(fn)
        row[what + "_wall_us"] = timer.wall_us(fn)
    return row


def run_scan(cfg, mods, data, timer, check=True):
    scan, gpuarray = mods["scan"], mods["gpuarray"]
    ds, want = data["ds"], data["scan_ref"]
    if cfg == "default":
        k = scan.InclusiveScanKernel(np.float32, "a+b")
    else:
        k = scan.InclusiveScanKernel(np.float32, "a+b", config=cfg)
    row = {"config": cfg, "resolved": k.config, "tile": [k.threads, k.items], "vec_elements": k.vec}
    out = gpuarray.empty_like(ds)
    k(ds, out)
    got = out.get() if check else want
    if not np.array_equal(got, want):
        bad = np.flatnonzero(got != want)
        raise WrongResult(
            "scan: %d elements differ; first at %d: %r, NumPy %r"
            % (bad.size, bad[0], got[bad[0]], want[bad[0]])
        )
    del got
    row["gpu_us"] = timer.gpu_us(lambda: k(ds, out))
    row["wall_us"] = timer.wall_us(lambda: k(ds, gpuarray.empty_like(ds)))
    return row


def fmt(v):
    if v is None:
        return "-"
    if isinstance(v, str):
        return v
    return "%.1f" % v if v < 1000 else "%.0f" % v


def pct(num, den):
    return None if num is None or den is None else 100.0 * num / den


def print_table(head, rows):
    widths = [max(len(str(r[i])) for r in rows + [head]) for i in range(len(head))]
    print("| " + " | ".join(h.ljust(w) for h, w in zip(head, widths)) + " |")
    print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for r in rows:
        print("| " + " | ".join(str(c).ljust(w) for c, w in zip(r, widths)) + " |")


def main(argv=None):
    a = parse_args(sys.argv[1:] if argv is None else argv)
    why = gpu_reason()
    if why:
        print("reduce_scan_sweep: no GPU (%s); nothing measured" % why)
        return 0
    import pygpu.autoinit  # noqa: F401
    from pygpu import compiler, driver, gpuarray, reduction, scan

    mods = {"reduction": reduction, "scan": scan, "gpuarray": gpuarray}
    t_start = time.perf_counter()
    dev = driver.Context.get_device()
    timer = Timer(driver, a.reps, a.batch)
    result = {
        "gpu": dev.name(),
        "n": a.n,
        "python": platform.python_version(),
        "numpy": np.__version__,
        "reduction_defaults": dict(reduction.REDUCTION_DEFAULTS),
        "scan_defaults": dict(scan.SCAN_DEFAULTS),
        "env": {k: os.environ.get(k) for k in ("PYGPU_REDUCTION_CONFIG", "PYGPU_SCAN_CONFIG")},
    }
    print(
        "GPU: %s, %d SMs; n = %d float32 (%d MB)"
        % (
            dev.name(),
            dev.get_attribute(driver.device_attribute.MULTIPROCESSOR_COUNT),
            a.n,
            a.n * 4 // 10**6,
        ),
        flush=True,
    )

    rng = np.random.default_rng()
    x = rng.random(a.n, dtype=np.float32)
    y = rng.random(a.n, dtype=np.float32)
    s = (rng.random(a.n) < 0.1).astype(np.float32)
    ref = {
        "sum": float(np.sum(x, dtype=np.float64)),
        "min": float(np.min(x)),
        "dot": float(np.dot(x.astype(np.float64), y.astype(np.float64))),
    }
    data = {
        "dx": gpuarray.to_gpu(x),
        "dy": gpuarray.to_gpu(y),
        "ds": gpuarray.to_gpu(s),
        "ref": ref,
        "scan_ref": np.cumsum(s, dtype=np.float64).astype(np.float32),
    }

    fl = floors(driver, gpuarray, compiler, data["dx"], timer)
    result["floors"] = fl
    print(
        "floors: read kernel %.1f us (%.0f GB/s), D->D copy %.1f us (%.0f GB/s read + "
        "written)" % (fl["read_us"], fl["read_GBps"], fl["copy_us"], fl["copy_GBps"]),
        flush=True,
    )
    cp = cupy_figures(x, y, s, timer, a.reps, a.batch)
    result["cupy"] = cp
    if "error" in cp:
        print("CuPy: %s" % cp["error"], flush=True)
    del x, y, s

    skipped = []
    red_rows = []
    for cfg in ["default"] + list(a.reductions):
        if time.perf_counter() - t_start > a.budget:
            skipped.append("reduction " + cfg)
            continue
        try:
            row = run_reduction(cfg, mods, data, timer, not a.no_check)
        except WrongResult as e:
            row = {"config": cfg, "error": "wrong result: %s" % e}
        except Exception as e:
            row = {
                "config": cfg,
                "error": "failed: %s: %s" % (type(e).__name__, str(e).splitlines()[0][:200]),
            }
        red_rows.append(row)
        print(
            "  reduction %-40s %s"
            % (cfg or "(defaults)", row.get("error") or "sum %s us" % fmt(row.get("sum_gpu_us"))),
            flush=True,
        )
    result["reduction"] = red_rows

    scan_rows = []
    for cfg in ["default"] + list(a.scans):
        if time.perf_counter() - t_start > a.budget:
            skipped.append("scan " + cfg)
            continue
        try:
            row = run_scan(cfg, mods, data, timer, not a.no_check)
        except WrongResult as e:
            row = {"config": cfg, "error": "wrong result: %s" % e}
        except Exception as e:
            row = {
                "config": cfg,
                "error": "failed: %s: %s" % (type(e).__name__, str(e).splitlines()[0][:200]),
            }
        scan_rows.append(row)
        print(
            "  scan %-50s %s"
            % (cfg or "(defaults)", row.get("error") or "%s us" % fmt(row.get("gpu_us"))),
            flush=True,
        )
    result["scan"] = scan_rows
    result["skipped"] = skipped

    # ---- the tables ----
    read, copy = fl["read_us"], fl["copy_us"]
    print()
    print(
        "Reductions of %d float32 on %s: gpu = event-timed kernel time, wall = call + "
        "synchronize (us); read%% = the read kernel's time over the same bytes / gpu "
        "(goal >= 90%%); dot reads twice the bytes." % (a.n, dev.name())
    )
    head = [
        "config",
        "sum gpu",
        "read%",
        "sum wall",
        "min gpu",
        "read%",
        "dot gpu",
        "read%",
        "dot wall",
    ]
    rows = []
    if "error" not in cp:
        rows.append(
            [
                "CuPy %s" % cp.get("version"),
                fmt(cp["sum_gpu_us"]),
                fmt(pct(read, cp["sum_gpu_us"])),
                fmt(cp["sum_wall_us"]),
                fmt(cp["min_gpu_us"]),
                fmt(pct(read, cp["min_gpu_us"])),
                fmt(cp["dot_gpu_us"]),
                fmt(pct(2 * read, cp["dot_gpu_us"])),
                fmt(cp["dot_wall_us"]),
            ]
        )
    for r in red_rows:
        name = r["config"] or "(defaults)"
        if "error" in r:
            rows.append([name, r["error"][:60]] + [""] * 7)
            continue
        rows.append(
            [
                name,
                fmt(r["sum_gpu_us"]),
                fmt(pct(read, r["sum_gpu_us"])),
                fmt(r["sum_wall_us"]),
                fmt(r["min_gpu_us"]),
                fmt(pct(read, r["min_gpu_us"])),
                fmt(r["dot_gpu_us"]),
                fmt(pct(2 * read, r["dot_gpu_us"])),
                fmt(r["dot_wall_us"]),
            ]
        )
    print_table(head, rows)
    print()
    print("Inclusive scan of %d float32: copy%% = the D->D copy's time / gpu (goal >= 85%%)." % a.n)
    head = ["config", "tile", "gpu", "copy%", "wall"]
    rows = []
    if "error" not in cp:
        rows.append(
            [
                "CuPy cumsum",
                "-",
                fmt(cp["scan_gpu_us"]),
                fmt(pct(copy, cp["scan_gpu_us"])),
                fmt(cp["scan_wall_us"]),
            ]
        )
    for r in scan_rows:
        name = r["config"] or "(defaults)"
        if "error" in r:
            rows.append([name, r["error"][:60], "", "", ""])
            continue
        rows.append(
            [
                name,
                "%dx%d" % tuple(r["tile"]),
                fmt(r["gpu_us"]),
                fmt(pct(copy, r["gpu_us"])),
                fmt(r["wall_us"]),
            ]
        )
    print_table(head, rows)

    # ---- the goals, for what a user gets today (the "default" rows) ----
    goals = []
    dflt = next((r for r in red_rows if r["config"] == "default" and "error" not in r), None)
    if dflt:
        for what, floor in (("sum", read), ("min", read), ("dot", 2 * read)):
            r = pct(floor, dflt[what + "_gpu_us"])
            goals.append(
                ("%s: %.0f%% of the read kernel's bandwidth (goal >= 90%%)" % (what, r), r >= 90)
            )
            c = cp.get(what + "_wall_us")
            if c is not None:
                goals.append(
                    (
                        "%s: %.1f us wall, CuPy %.1f (goal <= CuPy)"
                        % (what, dflt[what + "_wall_us"], c),
                        dflt[what + "_wall_us"] <= c,
                    )
                )
    sdflt = next((r for r in scan_rows if r["config"] == "default" and "error" not in r), None)
    if sdflt:
        r = pct(copy, sdflt["gpu_us"])
        goals.append(("scan: %.0f%% of the D->D copy bandwidth (goal >= 85%%)" % r, r >= 85))
    if goals:
        print("\ngoals (the defaults):")
        for text, met in goals:
            print("  %-70s %s" % (text, "met" if met else "NOT met"))
    result["goals"] = [{"what": t, "met": m} for t, m in goals]

    # ---- the winners ----
    ok_red = [r for r in red_rows if "error" not in r and r["config"] != "default"]
    if ok_red:

        def score(r):  # geometric mean of sum, min, dot kernel times (dot halved)
            return (r["sum_gpu_us"] * r["min_gpu_us"] * r["dot_gpu_us"] / 2) ** (1 / 3)

        best = min(ok_red, key=score)
        result["best_reduction"] = best["config"]
        print(
            "\nbest reduction: PYGPU_REDUCTION_CONFIG=%r  (sum %.1f us gpu = %.0f%% of the "
            "read kernel; CuPy %s)"
            % (
                best["config"],
                best["sum_gpu_us"],
                pct(read, best["sum_gpu_us"]),
                fmt(cp.get("sum_gpu_us")),
            )
        )
    ok_scan = [r for r in scan_rows if "error" not in r and r["config"] != "default"]
    if ok_scan:
        best = min(ok_scan, key=lambda r: r["gpu_us"])
        result["best_scan"] = best["config"]
        print(
            "best scan: PYGPU_SCAN_CONFIG=%r  (%.1f us gpu = %.0f%% of the copy bandwidth; "
            "CuPy %s)"
            % (
                best["config"],
                best["gpu_us"],
                pct(copy, best["gpu_us"]),
                fmt(cp.get("scan_gpu_us")),
            )
        )
    if skipped:
        print("skipped (past --budget %.0f s): %s" % (a.budget, "; ".join(skipped)))
    result["seconds"] = time.perf_counter() - t_start
    print("(%.0f s)" % result["seconds"])
    if a.json:
        with open(a.json, "w") as f:
            json.dump(result, f, indent=1, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())
