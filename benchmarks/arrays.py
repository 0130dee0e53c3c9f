"""The array layer (gpuarray, kernel generators, cumath, curandom): pygpu,
CuPy and PyCUDA in one run.

    python benchmarks/arrays.py [--json results.json] [--only pygpu,cupy,pycuda]
                                [--reps 20] [--small-ops 5000]
                                [--goals-only | --no-goals]

Method (../shared/PERFORMANCE.md, "the array layer"): wall time of one call
followed by a synchronize, median of --reps after a warm-up; outputs are
allocated by the call, as a user writes it.  "small a + b" is the time of
--small-ops back-to-back ``a + b`` on 1,000 float32 with one synchronize at
the end, divided by the count (median of --reps such bursts).  Transfers are
``to_gpu`` / ``.get()`` of a 256 MiB pageable NumPy array, in GB/s.  Every
implementation's result is checked against NumPy once, before it is timed.

pygpu and PyCUDA run the same code (PyCUDA's API names); PyCUDA takes the
primary context (pycuda.autoprimaryctx), the one pygpu and CuPy use.  A row
an implementation cannot run says "not available: <why>" (a missing module
or name), "failed: ..." or "wrong result: ..." instead of a figure.  Without
a GPU it says so and exits 0.

Before those rows it measures issue 27's goals (benchmarks/goals.py): each
against a floor measured in the same run (the empty-kernel launch
throughput, a plain read kernel, the D->D copy, the plain driver copy, the
pinned bandwidth, CuPy's time), marked MET / NOT MET / NOT MEASURED, with
the GPU's name, driver and clocks above the table.  --goals-only skips the
per-implementation rows, --no-goals the goals.
"""

import argparse
import gc
import importlib
import json
import math
import os
import platform
import statistics
import sys
import time

import numpy as np

if os.path.dirname(os.path.abspath(__file__)) not in sys.path:  # loaded by path
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import goals  # benchmarks/goals.py: issue 27's goals against same-run floors
from goals import gpu_reason  # noqa: F401  (this script's no-GPU test)

M = 1 << 20
N_ADD = 10_000_000
N_BIG = 100_000_000
N_SMALL = 1000
TRANSFER_BYTES = 256 * M

# key, label, unit, "lower" or "higher" is better (the goals, each against a
# floor of the same run, are in goals.py)
ROWS = [
    ("add_us", "x + y, 10M float32", "us", "lower"),
    ("small_add_us", "small a + b, 1,000 float32, per op", "us", "lower"),
    ("sum_us", "sum, 100M float32", "us", "lower"),
    ("scan_us", "inclusive scan, 100M float32", "us", "lower"),
    ("axpy_us", "ElementwiseKernel axpy, 10M float32", "us", "lower"),
    ("normal_us", "100M normal float32", "us", "lower"),
    ("sin_us", "cumath.sin, 10M float32", "us", "lower"),
    ("htod_gbps", "to_gpu, 256 MiB pageable", "GB/s", "higher"),
    ("dtoh_gbps", ".get(), 256 MiB pageable", "GB/s", "higher"),
]
IMPLS = ("pygpu", "cupy", "pycuda")


class NotAvailable(Exception):
    """The implementation lacks what the row needs."""


class WrongResult(Exception):
    """The result differs from NumPy's."""


def median_us(fn, sync, reps, warmup=2):
    """Median wall time (us) of fn(); sync() after warm-up calls."""
    for _ in range(warmup):
        fn()
        sync()
    v = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        sync()
        v.append((time.perf_counter() - t) * 1e6)
    return statistics.median(v)


def check(ok, what):
    if not ok:
        raise WrongResult(what)


def check_close(got, want, rtol, atol, what):
    got = np.asarray(got)
    if got.shape != want.shape:
        raise WrongResult("%s: shape %s, NumPy's %s" % (what, got.shape, want.shape))
    bad = ~np.isclose(got, want, rtol=rtol, atol=atol)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise WrongResult(
            "%s: %d elements off (rtol %g, atol %g); first at %d: %r, NumPy %r"
            % (what, int(bad.sum()), rtol, atol, i, got.flat[i], want.flat[i])
        )


def check_normal(h, what):
    """100M N(0,1) samples: mean, standard deviation and the mass within 1
    sigma against the distribution's (NumPy computes the statistics)."""
    h = np.asarray(h, np.float64)
    check(np.isfinite(h).all(), "%s: non-finite samples" % what)
    n = h.size
    mean, std = h.mean(), h.std()
    inside = np.mean(np.abs(h) < 1.0)
    check(abs(mean) < 6 / math.sqrt(n), "%s: mean %g" % (what, mean))
    check(abs(std - 1) < 6 * math.sqrt(0.5 / n), "%s: standard deviation %g" % (what, std))
    check(
        abs(inside - math.erf(1 / math.sqrt(2))) < 6 * math.sqrt(0.25 / n),
        "%s: P(|x| < 1) = %g" % (what, inside),
    )


class PycudaAPI:
    """pygpu or PyCUDA, through PyCUDA's module and function names."""

    def __init__(self, pkg):
        self.pkg = pkg
        if pkg == "pycuda":
            importlib.import_module("pycuda.autoprimaryctx")
        else:
            importlib.import_module(pkg + ".autoinit")
        self.drv = importlib.import_module(pkg + ".driver")
        self.sync = self.drv.Context.synchronize

    def mod(self, name):
        try:
            return importlib.import_module("%s.%s" % (self.pkg, name))
        except ImportError as e:
            raise NotAvailable("%s.%s: %s" % (self.pkg, name, e)) from None

    def attr(self, modname, name):
        m = self.mod(modname)
        try:
            return getattr(m, name)
        except AttributeError:
            raise NotAvailable("%s.%s has no %s" % (self.pkg, modname, name)) from None

    # each returns the figure; checks its result against NumPy first

    def add_us(self, rng, reps):
        to_gpu = self.attr("gpuarray", "to_gpu")
        x = rng.random(N_ADD, dtype=np.float32)
        y = rng.random(N_ADD, dtype=np.float32)
        dx, dy = to_gpu(x), to_gpu(y)
        np.testing.assert_array_equal((dx + dy).get(), x + y)
        return median_us(lambda: dx + dy, self.sync, reps)

    def small_add_us(self, rng, reps, ops):
        to_gpu = self.attr("gpuarray", "to_gpu")
        a = rng.random(N_SMALL, dtype=np.float32)
        b = rng.random(N_SMALL, dtype=np.float32)
        da, db = to_gpu(a), to_gpu(b)
        check(np.array_equal((da + db).get(), a + b), "small a + b differs from NumPy's")
        return small_burst(lambda: da + db, self.sync, reps, ops)

    def sum_us(self, rng, reps):
        to_gpu, gsum = self.attr("gpuarray", "to_gpu"), self.attr("gpuarray", "sum")
        x = rng.random(N_BIG, dtype=np.float32)
        dx = to_gpu(x)
        check_sum(gsum(dx).get(), x)
        return median_us(lambda: gsum(dx), self.sync, reps)

    def scan_us(self, rng, reps):
        gpuarray = self.mod("gpuarray")
        kern = self.attr("scan", "InclusiveScanKernel")(np.float32, "a+b")
        x = scan_data(rng)
        dx = gpuarray.to_gpu(x)
        out = gpuarray.empty_like(dx)
        kern(dx, out)
        check_scan(out.get(), x)
        return median_us(lambda: kern(dx, gpuarray.empty_like(dx)), self.sync, reps)

    def axpy_us(self, rng, reps):
        gpuarray = self.mod("gpuarray")
        kern = self.attr("elementwise", "ElementwiseKernel")(
            "float a, float *x, float *y, float *z", "z[i] = a * x[i] + y[i]", "bench_axpy"
        )
        x = rng.random(N_ADD, dtype=np.float32)
        y = rng.random(N_ADD, dtype=np.float32)
        a = np.float32(2.5)
        dx, dy = gpuarray.to_gpu(x), gpuarray.to_gpu(y)

        def call():
            z = gpuarray.empty_like(dx)
            kern(a, dx, dy, z)
            return z

        check_close(call().get(), a * x + y, 1e-6, 1e-6, "axpy")
        return median_us(call, self.sync, reps)

    def normal_us(self, rng, reps):
        gen = self.attr("curandom", "XORWOWRandomNumberGenerator")()
        check_normal(gen.gen_normal((N_BIG,), np.float32).get(), "gen_normal")
        return median_us(lambda: gen.gen_normal((N_BIG,), np.float32), self.sync, reps)

    def sin_us(self, rng, reps):
        to_gpu, sin = self.attr("gpuarray", "to_gpu"), self.attr("cumath", "sin")
        x = rng.uniform(-10, 10, N_ADD).astype(np.float32)
        dx = to_gpu(x)
        check_close(sin(dx).get(), np.sin(x), 1e-5, 2e-6, "sin")
        return median_us(lambda: sin(dx), self.sync, reps)

    def htod_gbps(self, rng, reps):
        to_gpu = self.attr("gpuarray", "to_gpu")
        h = transfer_data(rng)
        check(np.array_equal(to_gpu(h).get(), h), "to_gpu/get round trip differs")
        return TRANSFER_BYTES / median_us(lambda: to_gpu(h), self.sync, reps) / 1e3

    def dtoh_gbps(self, rng, reps):
        to_gpu = self.attr("gpuarray", "to_gpu")
        h = transfer_data(rng)
        d = to_gpu(h)
        check(np.array_equal(d.get(), h), "to_gpu/get round trip differs")
        return TRANSFER_BYTES / median_us(d.get, self.sync, reps) / 1e3

    def release(self):
        gc.collect()


class CupyAPI:
    def __init__(self):
        import cupy as cp

        self.cp = cp
        self.sync = cp.cuda.Device().synchronize

    def add_us(self, rng, reps):
        cp = self.cp
        x = rng.random(N_ADD, dtype=np.float32)
        y = rng.random(N_ADD, dtype=np.float32)
        dx, dy = cp.asarray(x), cp.asarray(y)
        np.testing.assert_array_equal((dx + dy).get(), x + y)
        return median_us(lambda: dx + dy, self.sync, reps)

    def small_add_us(self, rng, reps, ops):
        cp = self.cp
        a = rng.random(N_SMALL, dtype=np.float32)
        b = rng.random(N_SMALL, dtype=np.float32)
        da, db = cp.asarray(a), cp.asarray(b)
        check(np.array_equal((da + db).get(), a + b), "small a + b differs from NumPy's")
        return small_burst(lambda: da + db, self.sync, reps, ops)

    def sum_us(self, rng, reps):
        x = rng.random(N_BIG, dtype=np.float32)
        dx = self.cp.asarray(x)
        check_sum(dx.sum().get(), x)
        return median_us(dx.sum, self.sync, reps)

    def scan_us(self, rng, reps):
        cp = self.cp
        x = scan_data(rng)
        dx = cp.asarray(x)
        check_scan(cp.cumsum(dx).get(), x)
        return median_us(lambda: cp.cumsum(dx), self.sync, reps)

    def axpy_us(self, rng, reps):
        cp = self.cp
        kern = cp.ElementwiseKernel(
            "float32 a, float32 x, float32 y", "float32 z", "z = a * x + y", "bench_axpy"
        )
        x = rng.random(N_ADD, dtype=np.float32)
        y = rng.random(N_ADD, dtype=np.float32)
        a = np.float32(2.5)
        dx, dy = cp.asarray(x), cp.asarray(y)
        check_close(kern(a, dx, dy).get(), a * x + y, 1e-6, 1e-6, "axpy")
        return median_us(lambda: kern(a, dx, dy), self.sync, reps)

    def normal_us(self, rng, reps):
        cp = self.cp
        check_normal(cp.random.standard_normal(N_BIG, dtype=np.float32).get(), "standard_normal")
        return median_us(
            lambda: cp.random.standard_normal(N_BIG, dtype=np.float32), self.sync, reps
        )

    def sin_us(self, rng, reps):
        cp = self.cp
        x = rng.uniform(-10, 10, N_ADD).astype(np.float32)
        dx = cp.asarray(x)
        check_close(cp.sin(dx).get(), np.sin(x), 1e-5, 2e-6, "sin")
        return median_us(lambda: cp.sin(dx), self.sync, reps)

    def htod_gbps(self, rng, reps):
        cp = self.cp
        h = transfer_data(rng)
        check(np.array_equal(cp.asarray(h).get(), h), "asarray/get round trip differs")
        return TRANSFER_BYTES / median_us(lambda: cp.asarray(h), self.sync, reps) / 1e3

    def dtoh_gbps(self, rng, reps):
        h = transfer_data(rng)
        d = self.cp.asarray(h)
        check(np.array_equal(d.get(), h), "asarray/get round trip differs")
        return TRANSFER_BYTES / median_us(d.get, self.sync, reps) / 1e3

    def release(self):
        gc.collect()
        self.cp.get_default_memory_pool().free_all_blocks()


def small_burst(op, sync, reps, ops):
    """Median over reps bursts of (wall time of `ops` op() calls + one
    synchronize) / ops, in us."""
    for _ in range(ops):
        op()
    sync()
    v = []
    for _ in range(reps):
        t = time.perf_counter()
        for _ in range(ops):
            op()
        sync()
        v.append((time.perf_counter() - t) / ops * 1e6)
    return statistics.median(v)


def check_sum(got, x):
    want = np.sum(x, dtype=np.float64)
    got = float(np.asarray(got))
    check(
        abs(got - want) <= 1e-5 * abs(want),
        "sum %r, NumPy's (float64) %r: relative error over 1e-5" % (got, want),
    )


def scan_data(rng):
    # zeros and ones (10% ones): every prefix sum is an integer below 2**24,
    # exact in float32 whatever the order of the additions
    return (rng.random(N_BIG) < 0.1).astype(np.float32)


def check_scan(got, x):
    want = np.cumsum(x, dtype=np.float64).astype(np.float32)
    got = np.asarray(got)
    if not np.array_equal(got, want):
        bad = np.flatnonzero(got != want)
        raise WrongResult(
            "inclusive scan: %d elements differ; first at %d: %r, NumPy %r"
            % (bad.size, bad[0], got[bad[0]], want[bad[0]])
        )


_transfer = {}


def transfer_data(rng):
    if "h" not in _transfer:
        _transfer["h"] = rng.random(TRANSFER_BYTES // 4, dtype=np.float32)
    return _transfer["h"]


def measure(impl, reps, ops):
    """{key: figure or "not available: ..." / "failed: ..." / "wrong result: ..."}."""
    try:
        api = CupyAPI() if impl == "cupy" else PycudaAPI(impl)
    except ImportError as e:
        return {k: "not available: %s" % _line(e) for k, *_ in ROWS}
    except Exception as e:  # no context, a broken install: the column says so
        return {k: "failed: %s: %s" % (type(e).__name__, _line(e)) for k, *_ in ROWS}
    out = {}
    for key, *_ in ROWS:
        rng = np.random.default_rng()
        try:
            fn = getattr(api, key)
            out[key] = fn(rng, reps, ops) if key == "small_add_us" else fn(rng, reps)
        except NotAvailable as e:
            out[key] = "not available: %s" % _line(e)
        except (WrongResult, AssertionError) as e:
            out[key] = "wrong result: %s" % _line(e)
        except Exception as e:
            out[key] = "failed: %s: %s" % (type(e).__name__, _line(e))
        finally:
            try:
                api.release()
            except Exception:
                pass
        print("  %s %s: %s" % (impl, key, fmt(out[key])), file=sys.stderr, flush=True)
    return out


def _line(e):
    lines = [ln for ln in str(e).strip().splitlines() if ln.strip()]
    return (lines[0] if lines else type(e).__name__)[:200]


def fmt(v):
    if isinstance(v, str):
        return v
    if v is None:
        return "-"
    if abs(v) >= 100:
        return "%.0f" % v
    if abs(v) >= 10:
        return "%.1f" % v
    return "%.2f" % v


def table(results, impls):
    """(markdown table of the per-implementation rows, notes): a column an
    implementation, pygpu's figure over CuPy's where both were measured,
    and a note for each figure that is not a number."""
    both = "pygpu" in impls and "cupy" in impls
    head = ["what", "unit"] + impls + (["pygpu / CuPy"] if both else [])
    rows = []
    for key, label, unit, better in ROWS:
        cells = []
        for impl in impls:
            v = results[impl].get(key)
            cells.append(fmt(v) if not isinstance(v, str) else v.split(":")[0])
        if both:
            pg, cp = results["pygpu"].get(key), results["cupy"].get(key)
            ok = all(isinstance(v, float) and v > 0 for v in (pg, cp))
            cells.append("%.2fx (%s is better)" % (pg / cp, better) if ok else "-")
        rows.append([label, unit] + cells)
    widths = [max(len(str(r[i])) for r in rows + [head]) for i in range(len(head))]
    lines = [
        "| " + " | ".join(h.ljust(w) for h, w in zip(head, widths)) + " |",
        "|" + "|".join("-" * (w + 2) for w in widths) + "|",
    ]
    for r in rows:
        lines.append("| " + " | ".join(str(c).ljust(w) for c, w in zip(r, widths)) + " |")
    notes = []
    for impl in impls:
        for key, label, *_ in ROWS:
            v = results[impl].get(key)
            if isinstance(v, str):
                notes.append("%s, %s: %s" % (impl, label, v))
    return "\n".join(lines), notes


def versions():
    from importlib import metadata

    out = {}
    for name, dists in (
        ("pygpu", ["pygpu"]),
        ("pycuda", ["pycuda"]),
        ("cupy", ["cupy-cuda13x", "cupy-cuda12x", "cupy"]),
    ):
        for d in dists:
            try:
                out[name] = metadata.version(d)
                break
            except metadata.PackageNotFoundError:
                pass
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", help="write all figures here")
    ap.add_argument(
        "--only",
        default=",".join(IMPLS),
        help="implementations, comma-separated (default %(default)s); the goals "
        "compare with CuPy when it is listed",
    )
    ap.add_argument("--reps", type=int, default=20, help="timed calls per row (median)")
    ap.add_argument(
        "--small-ops", type=int, default=5000, help="a + b calls per burst in the small-op row"
    )
    which = ap.add_mutually_exclusive_group()
    which.add_argument(
        "--goals-only", action="store_true", help="only issue 27's goals (benchmarks/goals.py)"
    )
    which.add_argument("--no-goals", action="store_true", help="only the per-implementation rows")
    args = ap.parse_args(argv)
    impls = [i for i in args.only.split(",") if i]
    unknown = [i for i in impls if i not in IMPLS]
    if unknown:
        ap.error("unknown implementation(s) %s (choose from %s)" % (unknown, ", ".join(IMPLS)))
    reason = gpu_reason()
    if reason is not None:
        print(
            "benchmarks/arrays.py: nothing measured: this machine has no usable GPU (%s)" % reason
        )
        return 0
    started = time.perf_counter()
    goal_run = None
    if not args.no_goals:
        try:
            goal_run = goals.measure(goals.Config(cupy="cupy" in impls, small_ops=args.small_ops))
        except Exception as e:  # no context, a broken install: said, not fatal
            goal_run = e
    results = {}
    if not args.goals_only:
        for impl in impls:
            results[impl] = measure(impl, args.reps, args.small_ops)
    meta = {
        "python": platform.python_version(),
        "numpy": np.__version__,
        "versions": versions(),
        "date": time.strftime("%Y-%m-%d"),
        "reps": args.reps,
        "small_ops": args.small_ops,
    }
    try:
        import pygpu.driver as cuda

        meta["gpu_info"] = info = goals.gpu_info(cuda)
        meta.update(gpu=info["gpu"], driver_cuda=info.get("driver_cuda", "?"))
    except Exception as e:
        meta["gpu"] = "? (%s)" % _line(e)
        info = {"gpu": meta["gpu"]}
    print(
        "\n%s, CUDA %s driver, Python %s, NumPy %s, %s"
        % (
            meta.get("gpu"),
            meta.get("driver_cuda", "?"),
            meta["python"],
            meta["numpy"],
            meta["date"],
        )
    )
    print(goals.gpu_line(info))
    print("(%s)" % ", ".join("%s %s" % kv for kv in sorted(meta["versions"].items())))
    out = {"meta": meta}
    if isinstance(goal_run, Exception):
        print("\nIssue 27's goals: not measured: %s" % goals.failed(goal_run))
        out["goals"] = {"error": goals.failed(goal_run)}
    elif goal_run is not None:
        figs, rows, _ = goal_run
        print()
        goals.report(figs, rows, info, header=False)
        out["goals"] = {"figures": figs, "rows": rows}
    if results:
        text, notes = table(results, impls)
        print(
            "\nPer implementation (median of %d calls after a warm-up, each call followed by "
            "a synchronize):" % args.reps
        )
        print(text)
        for line in notes:
            print("- " + line)
        out["results"] = results
    print("\n(%.0f s in all)" % (time.perf_counter() - started))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(goals.jsonable(out), f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
