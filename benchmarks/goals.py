"""Issue 27's goals, each judged against a floor measured in the same run.

    python3 benchmarks/goals.py [--json out.json] [--no-cupy]

benchmarks/arrays.py and benchmarks/run.py print the same table (this module
measures it for them).  Every goal is a ratio to, or a difference from, a
figure measured in this process a moment before or interleaved with it, so
a table from an H100 and one from an H200 are judged alike:

  small a + b       1,000 float32, back to back with no synchronize, per op;
                    <= the empty-kernel launch throughput + 1.0 us (the C
                    loop of floor_goals.c, and pygpu's configure()d launch,
                    both in interleaved bursts with a + b); CuPy beside it
  reductions        sum, dot, min, max, subset_sum, a ReductionKernel on
                    100M float32: <= CuPy's time, and >= 90% of the
                    bandwidth of a plain read kernel (every element read
                    once, one atomic a warp written) over the same bytes
  scan              inclusive scan of 100M float32 (400 MB read, 400 MB
                    written): >= 85% of the D->D copy bandwidth
                    (memcpy_dtod of the same 400 MB)
  pageable copies   to_gpu / .get() (into a fresh array) of 1, 8 and 256
                    MiB, after a 50 ms pause and back to back: >= the plain
                    driver call (cuMemcpyHtoD/DtoH from the same pageable
                    memory); at 256 MiB also >= 50% of pinned
  captured arrays   100 small array ops captured into a graph, replayed:
                    <= 1.0 us an op (benchmarks/captured_arrays.py); the
                    floor shown is 100 empty kernels captured and replayed

GPU times (reductions, scan and their floors) are CUDA events recorded on
the default stream around the call (CuPy's and pygpu's default), median of
20 after a warm-up, pygpu's and CuPy's calls in the same rounds; copies are
wall time of the call and a synchronize.
Every result is checked against NumPy once before it is timed.  A figure
that cannot be measured is "failed: ...", "not available: ..." or "wrong
result: ..." and its goals say NOT MEASURED with the reason: nothing here
stops the run.
"""

import argparse
import ctypes
import gc
import json
import math
import os
import statistics
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
M = 1 << 20


# a run's sizes and repetitions (Config(**changes) changes some; tests
# shrink them)
DEFAULTS = dict(
    n_big=100_000_000,  # elements of the reductions and the scan
    n_small=1000,  # elements of the small a + b
    small_ops=5000,  # a + b (and empty launches) a burst
    small_rounds=20,  # interleaved rounds of those bursts
    gpu_reps=20,  # event-timed calls (median)
    copy_mib=(1, 8, 256),  # pageable copy sizes
    pinned_mib=256,  # the pinned floor's size
    pause_s=0.05,  # sleep before each paused copy
    copy_reps=7,  # timed copies a row (median)
    graph_ops=100,  # captured array ops
    graph_replays=200,
    cupy=True,
)


class Config:
    """The sizes and repetitions of one run: DEFAULTS with changes."""

    def __init__(self, **changes):
        for k in changes:
            if k not in DEFAULTS:
                raise TypeError("Config has no setting %r" % k)
        for k, v in dict(DEFAULTS, **changes).items():
            setattr(self, k, v)

    def as_dict(self):
        return {k: getattr(self, k) for k in DEFAULTS}


# the reductions: key, label, bytes read in units of 4 n_big
REDUCTIONS = [
    ("sum", "sum", 1),
    ("dot", "dot", 2),
    ("min", "min", 1),
    ("max", "max", 1),
    ("subset_sum", "subset_sum, every index in order", 2),
    ("reduction_kernel", "ReductionKernel, sum of squares", 1),
]
COPY_DIRS = (("htod", "to_gpu"), ("dtoh", ".get() into a fresh array"))
COPY_MODES = (("paused", "after a pause"), ("b2b", "back to back"))
SMALL_GOAL_US = 1.0  # issue 35 (issue 27 had 1.5)
REDUCTION_FLOOR_GOAL = 0.90
SCAN_GOAL = 0.85
PINNED_GOAL = 0.50
GRAPH_GOAL_US = 1.0
STANDIN_GOAL_CALLS = 2


# ---- where a GPU is ----


def gpu_reason():
    """None if a CUDA GPU is usable, else why not; asks libcuda.so.1 itself
    (the driver stand-in runs no kernels and does not count)."""
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


def failed(e):
    """'failed: Type: first line of the message' (wrong results and missing
    pieces keep their own words)."""
    if isinstance(e, WrongResult):
        return "wrong result: %s" % _line(e)
    if isinstance(e, NotAvailable):
        return "not available: %s" % _line(e)
    return "failed: %s: %s" % (type(e).__name__, _line(e))


def _line(e):
    lines = [ln for ln in str(e).strip().splitlines() if ln.strip()]
    return (lines[0] if lines else type(e).__name__)[:200]


class WrongResult(Exception):
    """A result differs from NumPy's."""


class NotAvailable(Exception):
    """What the figure needs is missing (CuPy, a C compiler...)."""


# ---- the goals, judged (no GPU needed: tests feed figures) ----


def goal_specs(cfg=None):
    """The goals, one dict each: key, label, unit, figure (key of the
    figure), floor (key of the floor, or None), floor_label, kind ("diff":
    figure - floor <= target; "min_ratio": figure / floor >= target;
    "max_ratio": figure / floor <= target; "absolute": figure <= target),
    target, peer (key of CuPy's figure, or None), diff (key of a paired
    difference that replaces figure - floor when measured)."""
    cfg = cfg or Config()
    g = []

    def add(key, label, unit, figure, floor, floor_label, kind, target, peer=None, diff=None):
        g.append(
            dict(
                key=key,
                label=label,
                unit=unit,
                figure=figure,
                floor=floor,
                floor_label=floor_label,
                kind=kind,
                target=target,
                peer=peer,
                diff=diff,
            )
        )

    small = "small a + b, %s float32, per op" % format(cfg.n_small, ",")
    add(
        "small_add",
        small,
        "us",
        "small_add_us",
        "c_empty_launch_us",
        "empty kernel, C launch loop",
        "diff",
        SMALL_GOAL_US,
        "cupy_small_add_us",
        "small_add_over_c_us",
    )
    add(
        "small_add_pygpu",
        small + " (floor: pygpu's launch)",
        "us",
        "small_add_us",
        "pygpu_empty_launch_us",
        "empty kernel, configure()d",
        "diff",
        SMALL_GOAL_US,
        "cupy_small_add_us",
        "small_add_over_pygpu_us",
    )
    add(
        "small_add_calls",
        "driver calls a steady-state small a + b (on the driver stand-in)",
        "calls",
        "standin_calls_per_op",
        "standin_floor_calls",
        "the launch itself",
        "absolute",
        STANDIN_GOAL_CALLS,
    )
    big = "%s float32" % count_text(cfg.n_big)
    for op, label, _ in REDUCTIONS:
        add(
            "%s_vs_cupy" % op,
            "%s, %s: time vs CuPy" % (label, big),
            "us",
            "pygpu_%s_us" % op,
            "cupy_%s_us" % op,
            "CuPy, same run",
            "max_ratio",
            1.0,
        )
        add(
            "%s_vs_read" % op,
            "%s, %s: bandwidth vs a read kernel" % (label, big),
            "GB/s",
            "pygpu_%s_gbs" % op,
            "read_floor_%s_gbs" % op,
            "plain read kernel, same bytes",
            "min_ratio",
            REDUCTION_FLOOR_GOAL,
            "cupy_%s_gbs" % op,
        )
    add(
        "scan",
        "inclusive scan, %s (read + written)" % big,
        "GB/s",
        "scan_gbs",
        "dtod_gbs",
        "memcpy_dtod, same bytes",
        "min_ratio",
        SCAN_GOAL,
        "cupy_scan_gbs",
    )
    for mib in cfg.copy_mib:
        for d, dlabel in COPY_DIRS:
            for mode, mlabel in COPY_MODES:
                name = "%s_%d_%s" % (d, mib, mode)
                label = "%s, %d MiB pageable, %s" % (dlabel, mib, mlabel)
                add(
                    name + "_vs_plain",
                    label + ": vs the plain driver call",
                    "GB/s",
                    "pygpu_%s_gbs" % name,
                    "plain_%s_gbs" % name,
                    "cuMemcpy%s, same memory, %s" % ("HtoD" if d == "htod" else "DtoH", mlabel),
                    "min_ratio",
                    1.0,
                    "cupy_%s_gbs" % name,
                )
                if mib == max(cfg.copy_mib):
                    add(
                        name + "_vs_pinned",
                        label + ": vs pinned",
                        "GB/s",
                        "pygpu_%s_gbs" % name,
                        "pinned_%s_gbs" % d,
                        "pinned %d MiB, back to back" % cfg.pinned_mib,
                        "min_ratio",
                        PINNED_GOAL,
                        "cupy_%s_gbs" % name,
                    )
    add(
        "graph_replay",
        "captured loop of %d small array ops, replayed, per op" % cfg.graph_ops,
        "us",
        "replay_us_per_op",
        "empty_replay_us_per_node",
        "graph of empty kernels, per node",
        "absolute",
        GRAPH_GOAL_US,
    )
    return g


def count_text(n):
    """100M for 100,000,000; 4,096 for what is not a whole million."""
    return "%dM" % (n // 10**6) if n % 10**6 == 0 else format(n, ",")


def gbs(nbytes, us):
    """GB/s of nbytes in us microseconds; a failure string passes through."""
    if isinstance(us, str):
        return us
    if us is None:
        return "not measured"
    if not (isinstance(us, (int, float)) and math.isfinite(us) and us > 0):
        return "failed: time %r is not a positive number" % (us,)
    return nbytes / us / 1e3


def derive(figs):
    """Add the bandwidths the goals compare (GB/s) to figs, from its times:
    the reductions' and their read floors' (same bytes), the scan's and the
    D->D copy's (bytes read + written)."""
    n = figs.get("n_big")
    if not isinstance(n, int):
        return figs
    unit = 4 * n
    for op, _, mult in REDUCTIONS:
        nbytes = mult * unit
        floor = figs.get("read_floor_%d_us" % mult)
        figs["read_floor_%s_gbs" % op] = gbs(nbytes, floor)
        for impl in ("pygpu", "cupy"):
            figs["%s_%s_gbs" % (impl, op)] = gbs(nbytes, figs.get("%s_%s_us" % (impl, op)))
    figs["scan_gbs"] = gbs(2 * unit, figs.get("scan_us"))
    figs["cupy_scan_gbs"] = gbs(2 * unit, figs.get("cupy_scan_us"))
    figs["dtod_gbs"] = gbs(2 * unit, figs.get("dtod_us"))
    return figs


def _usable(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _why(v, what):
    if isinstance(v, str):
        return "%s %s" % (what, v)
    if v is None:
        return "%s not measured" % what
    return "%s %r is not a finite number" % (what, v)


def judge(spec, figs):
    """One goal row: spec's fields plus figure, floor, peer, value (the
    difference or ratio), status ("MET", "NOT MET", "NOT MEASURED") and why
    (for NOT MEASURED)."""
    row = dict(spec)
    fig = figs.get(spec["figure"])
    floor = figs.get(spec["floor"]) if spec["floor"] else None
    row.update(
        figure=fig,
        floor=floor,
        value=None,
        why=None,
        peer=figs.get(spec["peer"]) if spec.get("peer") else None,
    )
    kind, target = spec["kind"], spec["target"]
    if not _usable(fig):
        row.update(status="NOT MEASURED", why=_why(fig, "pygpu:"))
        return row
    if kind == "absolute":
        met = fig <= target
        if _usable(floor) and floor > 0:
            row["value"] = fig / floor
    else:
        if not _usable(floor) or (kind != "diff" and floor <= 0):
            row.update(
                status="NOT MEASURED",
                why=_why(floor, "floor (%s):" % spec["floor_label"])
                if not _usable(floor)
                else "floor (%s) is %r" % (spec["floor_label"], floor),
            )
            return row
        if kind == "diff":
            paired = figs.get(spec["diff"]) if spec.get("diff") else None
            value = paired if _usable(paired) else fig - floor
            met = value <= target
        elif kind == "min_ratio":
            value = fig / floor
            met = value >= target
        elif kind == "max_ratio":
            value = fig / floor
            met = value <= target
        else:
            raise ValueError("unknown goal kind %r" % kind)
        row["value"] = value
    row["status"] = "MET" if met else "NOT MET"
    return row


def judge_all(figs, cfg=None):
    derive(figs)
    return [judge(s, figs) for s in goal_specs(cfg)]


def fmt(v):
    if isinstance(v, str):
        return v.split(":")[0]
    if v is None:
        return "-"
    if not _usable(v):
        return repr(v)
    if abs(v) >= 100:
        return "%.0f" % v
    if abs(v) >= 10:
        return "%.1f" % v
    return "%.2f" % v


def target_text(row):
    t, k, u = row["target"], row["kind"], row["unit"]
    if k == "diff":
        return "<= floor + %g %s" % (t, u)
    if k == "min_ratio":
        return ">= %.2fx floor" % t
    if k == "max_ratio":
        return "<= %.2fx floor" % t
    return "<= %g %s" % (t, u)


def vs_text(row):
    v = row["value"]
    if v is None:
        return "-"
    if row["kind"] == "diff":
        return "%+.2f %s" % (v, row["unit"])
    return "%.2fx" % v


def goal_table(rows):
    """(markdown table text, notes): one line a goal; a note for each goal
    not measured, saying why."""
    head = ["goal", "unit", "pygpu", "floor", "floor is", "vs floor", "target", "CuPy", "status"]
    body = [
        [
            r["label"],
            r["unit"],
            fmt(r["figure"]),
            fmt(r["floor"]),
            r["floor_label"],
            vs_text(r),
            target_text(r),
            fmt(r["peer"]),
            r["status"],
        ]
        for r in rows
    ]
    widths = [max(len(str(x[i])) for x in body + [head]) for i in range(len(head))]
    lines = [
        "| " + " | ".join(h.ljust(w) for h, w in zip(head, widths)) + " |",
        "|" + "|".join("-" * (w + 2) for w in widths) + "|",
    ]
    for x in body:
        lines.append("| " + " | ".join(str(c).ljust(w) for c, w in zip(x, widths)) + " |")
    notes = [
        "%s: NOT MEASURED: %s" % (r["label"], r["why"])
        for r in rows
        if r["status"] == "NOT MEASURED"
    ]
    return "\n".join(lines), notes


def summary(rows):
    n = {s: sum(1 for r in rows if r["status"] == s) for s in ("MET", "NOT MET", "NOT MEASURED")}
    return "%d goals: %d met, %d not met, %d not measured" % (
        len(rows),
        n["MET"],
        n["NOT MET"],
        n["NOT MEASURED"],
    )


# ---- the GPU's name, driver and clocks ----


def gpu_info(cuda):
    """{gpu, cc, sms, sm_clock_mhz, mem_clock_mhz, bus_bits, driver_cuda,
    driver (nvidia-smi's), and the clocks nvidia-smi reports now}; what
    cannot be read is left out."""
    info = {}
    try:
        dev = cuda.Context.get_device()
    except Exception:
        dev = cuda.Device(0)
    info["gpu"] = dev.name()
    for key, fn in (
        ("cc", lambda: "%d.%d" % dev.compute_capability()),
        ("pci_bus_id", dev.pci_bus_id),
    ):
        try:
            info[key] = fn()
        except Exception:
            pass
    attr = getattr(cuda, "device_attribute", None)
    for key, name, scale in (
        ("sms", "MULTIPROCESSOR_COUNT", 1),
        ("sm_clock_mhz", "CLOCK_RATE", 1e-3),
        ("mem_clock_mhz", "MEMORY_CLOCK_RATE", 1e-3),
        ("bus_bits", "GLOBAL_MEMORY_BUS_WIDTH", 1),
    ):
        try:
            v = dev.get_attribute(getattr(attr, name)) * scale
            if v > 0:
                info[key] = int(v) if v == int(v) else v
        except Exception:
            pass
    try:
        v = cuda.get_driver_version()
        info["driver_cuda"] = "%d.%d" % (v // 1000, v % 1000 // 10)
    except Exception:
        pass
    smi = nvidia_smi(info.get("pci_bus_id"))
    info.update(smi)
    return info


SMI_FIELDS = (
    ("driver_version", "driver"),
    ("clocks.sm", "smi_sm_clock_mhz"),
    ("clocks.mem", "smi_mem_clock_mhz"),
    ("clocks.max.sm", "smi_max_sm_clock_mhz"),
    ("clocks.max.mem", "smi_max_mem_clock_mhz"),
    ("power.limit", "power_limit_w"),
)


def nvidia_smi(bus_id, run=subprocess.run):
    """What nvidia-smi says of the GPU at bus_id (its driver version, the
    clocks now and at most, the power limit): {} if it cannot say."""
    q = "pci.bus_id," + ",".join(f for f, _ in SMI_FIELDS)
    try:
        p = run(
            ["nvidia-smi", "--query-gpu=" + q, "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=15,
        )
    except (OSError, subprocess.SubprocessError):
        return {}
    if p.returncode != 0:
        return {}
    rows = [[v.strip() for v in ln.split(",")] for ln in p.stdout.strip().splitlines()]
    rows = [r for r in rows if len(r) == 1 + len(SMI_FIELDS)]

    def tail(b):  # nvidia-smi writes 8 digits of domain, CUDA 4
        return b.lower().split(":", 1)[-1]

    pick = [r for r in rows if bus_id and tail(r[0]) == tail(bus_id)]
    if not pick and len(rows) == 1:
        pick = rows
    if not pick:
        return {}
    return {
        k: v for (_, k), v in zip(SMI_FIELDS, pick[0][1:]) if v and not v.startswith("[")
    }  # "[N/A]", "[Not Supported]"


def gpu_line(info):
    parts = []
    if "cc" in info:
        parts.append("sm_" + info["cc"].replace(".", ""))
    if "sms" in info:
        parts.append("%s SMs" % info["sms"])
    if "smi_max_sm_clock_mhz" in info:
        parts.append("SM clock max %s MHz" % info["smi_max_sm_clock_mhz"])
    elif "sm_clock_mhz" in info:
        parts.append("SM clock %s MHz" % info["sm_clock_mhz"])
    if "mem_clock_mhz" in info:
        parts.append("memory clock %s MHz" % info["mem_clock_mhz"])
    if "bus_bits" in info:
        parts.append("%s-bit bus" % info["bus_bits"])
    line = "GPU: %s (%s)" % (info.get("gpu", "?"), ", ".join(parts))
    drv = []
    if "driver" in info:
        drv.append(info["driver"])
    if "driver_cuda" in info:
        drv.append("CUDA %s" % info["driver_cuda"])
    if drv:
        line += ", driver %s" % " / ".join(drv)
    if "smi_sm_clock_mhz" in info:
        line += "; clocks at the start: SM %s MHz, memory %s MHz" % (
            info["smi_sm_clock_mhz"],
            info.get("smi_mem_clock_mhz", "?"),
        )
    return line


# ---- timing helpers ----


def stmt_loop(stmt, **names):
    """run(count) -> seconds for count executions of the statement, written
    inline in the loop (no lambda between: timeit's way)."""
    src = (
        "def run(count):\n    t = _pc()\n    for _ in range(count):\n        %s\n"
        "    return _pc() - t\n" % stmt
    )
    g = dict(names, _pc=time.perf_counter)
    exec(src, g)
    return g["run"]


def interleaved(fns, n, rounds, sync):
    """{key: [us per call, one a round]}: each round runs every fn(n) once
    (each starting the round in turn), synchronizing after each burst."""
    times = {k: [] for k in fns}
    order = list(fns)
    for k in order:
        fns[k](n)
        sync()
    for r in range(rounds):
        for k in order[r % len(order) :] + order[: r % len(order)]:
            times[k].append(fns[k](n) / n * 1e6)
            sync()
    return times


def paired_diff(a, b):
    """Median over rounds of a - b (drift from round to round cancels)."""
    return statistics.median(x - y for x, y in zip(a, b))


def check_rel(got, want, rtol, what):
    got, want = float(np.asarray(got)), float(want)
    if not abs(got - want) <= rtol * abs(want):
        raise WrongResult(
            "%s: %r, NumPy's (float64) %r: relative error over %g" % (what, got, want, rtol)
        )


def check_equal(got, want, what):
    got = np.asarray(got)
    if got.shape != np.shape(want) or not np.array_equal(got, want):
        bad = np.flatnonzero(np.asarray(got != want).ravel()) if got.shape == np.shape(want) else []
        raise WrongResult(
            "%s: differs from NumPy's%s"
            % (
                what,
                " in %d elements, first at %d" % (len(bad), bad[0])
                if len(bad)
                else " (shape %s against %s)" % (got.shape, np.shape(want))
                if got.shape != np.shape(want)
                else "",
            )
        )


# run with PYGPU_LIBCUDA naming the stand-in: a steady-state small a + b's
# driver calls, all of them counted and by name (argv[1]: elements)
CALLS_CHILD = r'''
import collections, json, sys
import numpy as np
import pygpu.autoinit
from pygpu import gpuarray
from pygpu.testing.standin import StandIn
s = StandIn()
n = int(sys.argv[1])
a = gpuarray.to_gpu(np.ones(n, np.float32))
b = gpuarray.to_gpu(np.ones(n, np.float32))
for _ in range(200):
    a + b
ops = 1000
c0 = s.calls()
for _ in range(ops):
    a + b
c1 = s.calls()
def ten():
    for _ in range(10):
        a + b
_, names = s.trace(ten)
print(json.dumps({"calls_per_op": (c1 - c0) / ops,
                  "names": {k: v / 10 for k, v in sorted(collections.Counter(names).items())}}))
'''


# the plain read kernel: every float4 read once (a pointer chosen per
# element, so two arrays can be read in one pass), summed per thread, one
# atomic a warp (the sum is checked: nothing can be elided)
READ_SRC = r'''
template <int U>
__device__ __forceinline__ void read_body(const float4 *__restrict__ a,
                                          const float4 *__restrict__ b,
                                          long long na, long long n, double *out)
{
    long long stride = (long long)gridDim.x * blockDim.x;
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    float acc = 0.0f;
    for (; i + (U - 1) * stride < n; i += U * stride) {
        float4 v[U];
#pragma unroll
        for (int u = 0; u < U; u++) {
            long long j = i + u * stride;
            v[u] = __ldg(j < na ? a + j : b + (j - na));
        }
#pragma unroll
        for (int u = 0; u < U; u++)
            acc += (v[u].x + v[u].y) + (v[u].z + v[u].w);
    }
    for (; i < n; i += stride) {
        float4 v = __ldg(i < na ? a + i : b + (i - na));
        acc += (v.x + v.y) + (v.z + v.w);
    }
    for (int o = 16; o > 0; o >>= 1)
        acc += __shfl_down_sync(0xffffffffu, acc, o);
    if ((threadIdx.x & 31) == 0)
        atomicAdd(out, (double)acc);
}
#define READ_KERNEL(U) \
extern "C" __global__ void __launch_bounds__(256) read_u##U( \
    const float4 *a, const float4 *b, long long na, long long n, double *out) \
{ read_body<U>(a, b, na, n, out); }
READ_KERNEL(1)
READ_KERNEL(2)
READ_KERNEL(4)
READ_KERNEL(8)
'''
READ_UNROLLS = (1, 2, 4, 8)
READ_BLOCKS_PER_SM = (4, 8)


def build_c_floor():
    """floor_goals.c as a ctypes library (empty_burst)."""
    root = "/usr/local/cuda"
    for r in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH")):
        if r and os.path.exists(os.path.join(r, "include", "cuda.h")):
            root = r
            break
    build = os.path.join(HERE, "build")
    os.makedirs(build, exist_ok=True)
    so = os.path.join(build, "floor_goals.so")
    libdirs = [os.path.join(root, "lib64"), os.path.join(root, "lib64", "stubs")]
    cmd = (
        [
            "cc",
            "-O2",
            "-shared",
            "-fPIC",
            "-o",
            so,
            os.path.join(HERE, "floor_goals.c"),
            "-I" + os.path.join(root, "include"),
        ]
        + ["-L" + d for d in libdirs]
        + ["-lcuda"]
    )
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.SubprocessError) as e:
        raise NotAvailable("the C floor: cc: %s" % e) from None
    if p.returncode != 0:
        raise NotAvailable("the C floor did not build: %s" % _line(p.stderr or p.stdout))
    lib = ctypes.CDLL(so)
    lib.empty_burst.restype = ctypes.c_double
    lib.empty_burst.argtypes = [ctypes.c_void_p, ctypes.c_int]
    return lib


class PlainCopies:
    """The plain driver calls cuMemcpyHtoD/DtoH through ctypes, on the
    library pygpu loaded, in the current context (pushed around each call)."""

    def __init__(self, cuda):
        path = os.environ.get("PYGPU_LIBCUDA") or "libcuda.so.1"
        self.lib = lib = ctypes.CDLL(path)
        ctx = cuda.Context.get_current()
        if ctx is None:
            import pygpu.autoinit

            ctx = pygpu.autoinit.context
        self.ctx = ctypes.c_void_p(ctx.handle)
        for name in (
            "cuMemcpyHtoD_v2",
            "cuMemcpyDtoH_v2",
            "cuCtxPushCurrent_v2",
            "cuCtxPopCurrent_v2",
        ):
            getattr(lib, name).restype = ctypes.c_int
        lib.cuMemcpyHtoD_v2.argtypes = [ctypes.c_uint64, ctypes.c_void_p, ctypes.c_size_t]
        lib.cuMemcpyDtoH_v2.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_size_t]
        lib.cuCtxPushCurrent_v2.argtypes = [ctypes.c_void_p]
        lib.cuCtxPopCurrent_v2.argtypes = [ctypes.POINTER(ctypes.c_void_p)]

    def _call(self, fn, *args):
        rc = self.lib.cuCtxPushCurrent_v2(self.ctx)
        if rc != 0:
            raise RuntimeError("cuCtxPushCurrent failed: CUresult %d" % rc)
        try:
            rc = fn(*args)
        finally:
            old = ctypes.c_void_p()
            self.lib.cuCtxPopCurrent_v2(ctypes.byref(old))
        if rc != 0:
            raise RuntimeError("%s failed: CUresult %d" % (fn.__name__, rc))

    def htod(self, dptr, host):
        self._call(self.lib.cuMemcpyHtoD_v2, dptr, host.ctypes.data, host.nbytes)

    def dtoh_fresh(self, dptr, count, dtype):
        out = np.empty(count, dtype)
        self._call(self.lib.cuMemcpyDtoH_v2, out.ctypes.data, dptr, out.nbytes)
        return out


# ---- the measurements ----


class GoalRun:
    """Measures every figure the goals need into self.figs; each section
    catches its own failures (the figures it owes then say why)."""

    def __init__(self, cfg=None, log=None):
        self.cfg = cfg or Config()
        self.log = log or (lambda s: print(s, file=sys.stderr, flush=True))
        import pygpu.autoinit  # noqa: F401
        import pygpu.driver as cuda
        from pygpu import gpuarray

        self.cuda, self.ga = cuda, gpuarray
        self.sync = cuda.Context.synchronize
        self.figs = {"n_big": self.cfg.n_big, "config": self.cfg.as_dict()}
        self.cp, self.cp_why = None, "not available: cupy: left out of this run"
        if self.cfg.cupy:
            try:
                import cupy

                cupy.cuda.Device().synchronize()
                self.cp = cupy
            except ImportError as e:
                self.cp_why = "not available: cupy: %s" % _line(e)
            except Exception as e:
                self.cp_why = "failed: cupy: %s: %s" % (type(e).__name__, _line(e))

    # helpers

    def gpu_us(self, fn, reps=None, warm=3):
        """Median GPU time (us) of fn(): events on the default stream
        around the call."""
        cuda = self.cuda
        for _ in range(warm):
            fn()
        self.sync()
        a, b = cuda.Event(), cuda.Event()
        v = []
        for _ in range(reps or self.cfg.gpu_reps):
            a.record()
            fn()
            b.record()
            b.synchronize()
            v.append(b.time_since(a) * 1e3)
        return statistics.median(v)

    def gpu_us_rounds(self, fns, reps=None, warm=3):
        """{key: median GPU time (us) or why it failed} of each fn of fns,
        timed as gpu_us does but in rounds (each fn once a round, each
        round starting at another), so drift over the run hits all alike."""
        cuda, out, live = self.cuda, {}, dict(fns)
        for k, fn in list(live.items()):
            try:
                for _ in range(warm):
                    fn()
                self.sync()
            except Exception as e:
                out[k] = failed(e)
                del live[k]
        a, b = cuda.Event(), cuda.Event()
        times = {k: [] for k in live}
        for r in range(reps or self.cfg.gpu_reps):
            order = list(live)
            for k in order[r % max(len(order), 1) :] + order[: r % max(len(order), 1)]:
                try:
                    a.record()
                    live[k]()
                    b.record()
                    b.synchronize()
                    times[k].append(b.time_since(a) * 1e3)
                except Exception as e:
                    out[k] = failed(e)
                    del live[k]
        for k in live:
            out[k] = statistics.median(times[k])
        return out

    def release(self):
        gc.collect()
        if self.cp is not None:
            try:
                self.cp.get_default_memory_pool().free_all_blocks()
            except Exception:
                pass

    def section(self, name, keys, fn):
        """Run fn(); every key of keys it left unset gets its failure (or
        'not measured')."""
        t = time.perf_counter()
        why = "failed: %s: no figure" % name
        try:
            fn()
        except Exception as e:
            why = failed(e)
        finally:
            self.release()
        for k in keys:
            self.figs.setdefault(k, why)
        self.log(
            "  goals, %s: %.1f s%s"
            % (name, time.perf_counter() - t, "" if why.endswith("no figure") else " (%s)" % why)
        )

    def attempt(self, key, fn):
        """figs[key] = fn(), or why it failed."""
        try:
            self.figs[key] = fn()
        except Exception as e:
            self.figs[key] = failed(e)
        self.log(
            "    %s: %s"
            % (key, fmt(self.figs[key]) if not isinstance(self.figs[key], str) else self.figs[key])
        )

    def run(self):
        self.section("driver calls", ["standin_calls_per_op"], self.driver_calls)
        self.section(
            "small ops",
            [
                "c_empty_launch_us",
                "pygpu_empty_launch_us",
                "small_add_us",
                "cupy_small_add_us",
                "small_add_over_c_us",
                "small_add_over_pygpu_us",
            ],
            self.small_ops,
        )
        self.section("read floor", ["read_floor_1_us", "read_floor_2_us"], self.read_floor)
        self.section(
            "reductions",
            ["%s_%s_us" % (i, op) for op, *_ in REDUCTIONS for i in ("pygpu", "cupy")],
            self.reductions,
        )
        self.section("scan", ["dtod_us", "scan_us", "cupy_scan_us"], self.scan)
        keys = ["pinned_htod_gbs", "pinned_dtoh_gbs"]
        keys += [
            "%s_%s_%d_%s_gbs" % (i, d, mib, m)
            for i in ("pygpu", "plain", "cupy")
            for d, _ in COPY_DIRS
            for mib in self.cfg.copy_mib
            for m, _ in COPY_MODES
        ]
        self.section("copies", keys, self.copies)
        self.section(
            "captured",
            [
                "eager_us_per_op",
                "replay_us_per_op",
                "captured_us_per_op",
                "capture_ms",
                "empty_replay_us_per_node",
            ],
            self.captured,
        )
        return self.figs

    # sections

    def driver_calls(self):
        """Driver calls a steady-state small a + b makes, counted on the
        driver stand-in (pygpu.testing.standin, built here) in a child
        process: no GPU can count them."""
        from pygpu.testing import standin

        try:
            path = standin.build()
        except Exception as e:
            raise NotAvailable("the driver stand-in did not build: %s" % _line(e)) from None
        env = dict(os.environ, PYGPU_LIBCUDA=path)
        p = subprocess.run(
            [sys.executable, "-c", CALLS_CHILD, str(self.cfg.n_small)],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        if p.returncode != 0:
            raise RuntimeError(
                "the stand-in child exited %d: %s"
                % (
                    p.returncode,
                    _line(p.stderr.strip().splitlines()[-1] if p.stderr.strip() else p.stdout),
                )
            )
        r = json.loads(p.stdout.strip().splitlines()[-1])
        self.figs["standin_floor_calls"] = 1.0
        self.figs["standin_calls_by_name"] = r["names"]
        self.attempt("standin_calls_per_op", lambda: float(r["calls_per_op"]))

    def small_ops(self):
        ga, cfg, figs = self.ga, self.cfg, self.figs
        from pygpu.compiler import SourceModule

        e = SourceModule('extern "C" __global__ void empty() { }\n', no_extern_c=True).get_function(
            "empty"
        )
        bound = e.configure((1, 1), (32, 1, 1))
        rng = np.random.default_rng()
        a = rng.random(cfg.n_small, dtype=np.float32)
        b = rng.random(cfg.n_small, dtype=np.float32)
        fns = {"pygpu_empty": stmt_loop("bound()", bound=bound)}
        try:
            # a wrong result loses its row, not the floors
            da, db = ga.to_gpu(a), ga.to_gpu(b)
            check_equal((da + db).get(), a + b, "pygpu small a + b")
            fns["small_add"] = stmt_loop("da + db", da=da, db=db)
        except Exception as ex:
            figs["small_add_us"] = failed(ex)
        try:
            lib = build_c_floor()
            handle = e.handle

            def c_empty(count):
                t = lib.empty_burst(handle, count)
                if t < 0:
                    raise RuntimeError("the C loop's cuLaunchKernel failed: CUresult %d" % -t)
                return t

            c_empty(10)
            self.sync()
            fns["c_empty"] = c_empty
        except Exception as ex:
            figs["c_empty_launch_us"] = failed(ex)
        if self.cp is not None:
            try:
                cp = self.cp
                ca, cb = cp.asarray(a), cp.asarray(b)
                check_equal((ca + cb).get(), a + b, "CuPy small a + b")
                fns["cupy_small_add"] = stmt_loop("ca + cb", ca=ca, cb=cb)
            except Exception as ex:
                figs["cupy_small_add_us"] = failed(ex)
        else:
            figs["cupy_small_add_us"] = self.cp_why
        t = interleaved(fns, cfg.small_ops, cfg.small_rounds, self.sync)
        figs["pygpu_empty_launch_us"] = statistics.median(t["pygpu_empty"])
        if "c_empty" in t:
            figs["c_empty_launch_us"] = statistics.median(t["c_empty"])
        if "small_add" in t:
            figs["small_add_us"] = statistics.median(t["small_add"])
            figs["small_add_over_pygpu_us"] = paired_diff(t["small_add"], t["pygpu_empty"])
            figs["small_add_over_c_us"] = (
                paired_diff(t["small_add"], t["c_empty"])
                if "c_empty" in t
                else figs["c_empty_launch_us"]
            )
        else:
            figs["small_add_over_pygpu_us"] = figs["small_add_over_c_us"] = figs["small_add_us"]
        if "cupy_small_add" in t:
            figs["cupy_small_add_us"] = statistics.median(t["cupy_small_add"])
        figs["small_ops_rounds_us"] = t
        for k in (
            "c_empty_launch_us",
            "pygpu_empty_launch_us",
            "small_add_us",
            "cupy_small_add_us",
        ):
            self.log("    %s: %s" % (k, fmt(figs[k]) if not isinstance(figs[k], str) else figs[k]))

    def _big_data(self):
        if not hasattr(self, "_x"):
            rng = np.random.default_rng()
            n = self.cfg.n_big
            self._x = rng.random(n, dtype=np.float32)
            self._y = rng.random(n, dtype=np.float32)
        return self._x, self._y

    def read_floor(self):
        cuda, ga, cfg, figs = self.cuda, self.ga, self.cfg, self.figs
        from pygpu.compiler import SourceModule

        if cfg.n_big % 4:
            raise ValueError(
                "the read floor reads float4s: n_big %d is not a multiple of 4" % cfg.n_big
            )
        x, y = self._big_data()
        dx, dy = ga.to_gpu(x), ga.to_gpu(y)
        out = ga.zeros(1, np.float64)
        mod = SourceModule(READ_SRC, no_extern_c=True)
        sms = cuda.Context.get_device().get_attribute(cuda.device_attribute.MULTIPROCESSOR_COUNT)
        n4 = cfg.n_big // 4
        pa, pb, po = dx.gpudata, dy.gpudata, out.gpudata
        configs = {}
        for u in READ_UNROLLS:
            k = mod.get_function("read_u%d" % u)
            for bpm in READ_BLOCKS_PER_SM:
                configs[(u, bpm)] = k.configure((sms * bpm, 1), (256, 1, 1))
        # check every configuration's sum (two arrays: both pointers work)
        want = float(np.sum(x, dtype=np.float64) + np.sum(y, dtype=np.float64))
        for (u, bpm), bound in configs.items():
            out.fill(0)
            bound(pa, pb, n4, 2 * n4, po)
            check_rel(
                out.get()[0], want, 1e-5, "read floor (unroll %d, %d blocks an SM)" % (u, bpm)
            )
        speeds = {}
        for key, bound in configs.items():
            speeds[key] = self.gpu_us(lambda: bound(pa, pb, n4, n4, po), reps=10)
        best = min(speeds, key=speeds.get)
        figs["read_floor_config"] = {
            "unroll": best[0],
            "blocks_per_sm": best[1],
            "sms": sms,
            "block": 256,
            "us_400mb_by_config": {"%d/%d" % k: v for k, v in speeds.items()},
        }
        bound = configs[best]
        self.attempt("read_floor_1_us", lambda: self.gpu_us(lambda: bound(pa, pb, n4, n4, po)))
        self.attempt("read_floor_2_us", lambda: self.gpu_us(lambda: bound(pa, pb, n4, 2 * n4, po)))

    def reductions(self):
        ga, figs = self.ga, self.figs
        x, y = self._big_data()
        n = self.cfg.n_big
        x64 = x.astype(np.float64)
        wants = {
            "sum": x64.sum(),
            "dot": float(np.dot(x64, y.astype(np.float64))),
            "min": float(x.min()),
            "max": float(x.max()),
            "subset_sum": x64.sum(),
            "reduction_kernel": float(np.dot(x64, x64)),
        }
        del x64
        timed = {}
        dx, dy = ga.to_gpu(x), ga.to_gpu(y)
        didx = ga.to_gpu(np.arange(n, dtype=np.int32))
        ops = {
            "sum": lambda: ga.sum(dx),
            "dot": lambda: ga.dot(dx, dy),
            "min": lambda: ga.min(dx),
            "max": lambda: ga.max(dx),
            "subset_sum": lambda: ga.subset_sum(didx, dx),
        }
        try:
            from pygpu.reduction import ReductionKernel

            rk = ReductionKernel(
                np.float32,
                neutral="0",
                reduce_expr="a+b",
                map_expr="x[i]*x[i]",
                arguments="const float *x",
                name="bench_sumsq",
            )
            ops["reduction_kernel"] = lambda: rk(dx)
        except Exception as e:
            figs["pygpu_reduction_kernel_us"] = failed(e)
        self._check_ops("pygpu", ops, wants, timed)
        if self.cp is None:
            for op, *_ in REDUCTIONS:
                figs["cupy_%s_us" % op] = self.cp_why
        else:
            cp = self.cp
            cx, cy = cp.asarray(x), cp.asarray(y)
            cidx = cp.arange(n, dtype=cp.int32)
            ops = {
                "sum": lambda: cx.sum(),
                "dot": lambda: cp.dot(cx, cy),
                "min": lambda: cx.min(),
                "max": lambda: cx.max(),
            }
            try:
                # one kernel, as subset_sum is: a ReductionKernel over the
                # indices reading a raw x; if this CuPy cannot, take() then sum()
                sub = cp.ReductionKernel(
                    "raw float32 x, int32 idx",
                    "float32 y",
                    "x[idx]",
                    "a + b",
                    "y = a",
                    "0",
                    "bench_subset_sum",
                )
                sub(cx, cidx[:1024]).get()
                ops["subset_sum"] = lambda: sub(cx, cidx)
            except Exception as e:
                self.log(
                    "    CuPy's subset sum is take() then sum(): the ReductionKernel "
                    "failed (%s)" % failed(e)
                )
                figs["cupy_subset_sum_form"] = "cupy.take(x, idx).sum()"
                ops["subset_sum"] = lambda: cp.take(cx, cidx).sum()
            try:
                sq = cp.ReductionKernel(
                    "float32 x", "float32 y", "x * x", "a + b", "y = a", "0", "bench_sumsq"
                )
                ops["reduction_kernel"] = lambda: sq(cx)
            except Exception as e:
                figs["cupy_reduction_kernel_us"] = failed(e)
            self._check_ops("cupy", ops, wants, timed)
        # each call timed alone, as the read floor is: in shared rounds a
        # slow call (CuPy's subset sum by index takes 100+ ms) slowed the
        # calls after it (on an H200 pygpu's sum read 138 us in rounds, 101
        # alone, 94 in back-to-back batches)
        for k, fn in timed.items():
            self.attempt(k, lambda fn=fn: self.gpu_us(fn))

    def _check_ops(self, impl, ops, wants, timed):
        """Check each op's result against NumPy; those right go into timed."""
        for op, fn in ops.items():
            key = "%s_%s_us" % (impl, op)
            try:
                got = float(np.asarray(fn().get()))
                if op in ("min", "max"):
                    if got != wants[op]:
                        raise WrongResult(
                            "%s %s: %r, NumPy's %r" % (impl, op, got, float(wants[op]))
                        )
                else:
                    check_rel(got, wants[op], 1e-4, "%s %s" % (impl, op))
                timed[key] = fn
            except Exception as e:
                self.figs[key] = failed(e)
                self.log("    %s: %s" % (key, self.figs[key]))

    def scan(self):
        cuda, ga, figs = self.cuda, self.ga, self.figs
        n = self.cfg.n_big
        rng = np.random.default_rng()
        # zeros and ones: every prefix sum is an integer below 2**24, exact
        # in float32 whatever the order of the additions
        xs = (rng.random(n) < 0.1).astype(np.float32)
        want = np.cumsum(xs, dtype=np.float64).astype(np.float32)
        dxs = ga.to_gpu(xs)
        out = ga.empty_like(dxs)
        copy_out = ga.empty_like(dxs)
        timed = {}

        def dtod():
            cuda.memcpy_dtod(copy_out.gpudata, dxs.gpudata, xs.nbytes)

        try:
            copy_out.fill(0)
            dtod()
            check_equal(copy_out.get(), xs, "memcpy_dtod")
            timed["dtod_us"] = dtod
        except Exception as e:
            figs["dtod_us"] = failed(e)
        try:
            from pygpu.scan import InclusiveScanKernel

            kern = InclusiveScanKernel(np.float32, "a+b")
            kern(dxs, out)
            check_equal(out.get(), want, "pygpu inclusive scan")
            timed["scan_us"] = lambda: kern(dxs, out)
        except Exception as e:
            figs["scan_us"] = failed(e)
        if self.cp is None:
            figs["cupy_scan_us"] = self.cp_why
        else:
            try:
                cp = self.cp
                cxs = cp.asarray(xs)
                check_equal(cp.cumsum(cxs).get(), want, "CuPy cumsum")
                timed["cupy_scan_us"] = lambda: cp.cumsum(cxs)
            except Exception as e:
                figs["cupy_scan_us"] = failed(e)
        for k, v in self.gpu_us_rounds(timed).items():
            figs[k] = v
        for k in ("dtod_us", "scan_us", "cupy_scan_us"):
            self.log("    %s: %s" % (k, figs[k] if isinstance(figs[k], str) else fmt(figs[k])))

    def copies(self):
        cuda, ga, cfg, figs = self.cuda, self.ga, self.cfg, self.figs
        sync = self.sync
        big = max(cfg.copy_mib) * M
        h = np.random.default_rng().random(big // 4, dtype=np.float32)
        reps = cfg.copy_reps

        def wall_gbs(fn, nbytes, pause):
            fn()
            sync()
            v = []
            for _ in range(reps):
                if pause:
                    time.sleep(cfg.pause_s)
                t = time.perf_counter()
                fn()
                sync()
                v.append(time.perf_counter() - t)
            return nbytes / statistics.median(v) / 1e9

        # the pinned floor, back to back
        def pinned(direction):
            nb = cfg.pinned_mib * M
            hp = cuda.pagelocked_empty(nb // 4, np.float32)
            hp[:] = h[: nb // 4] if nb <= big else 1.0
            d = cuda.mem_alloc(nb)
            if direction == "htod":
                return wall_gbs(lambda: cuda.memcpy_htod(d, hp), nb, False)
            return wall_gbs(lambda: cuda.memcpy_dtoh(hp, d), nb, False)

        for d, _ in COPY_DIRS:
            self.attempt("pinned_%s_gbs" % d, lambda d=d: pinned(d))
        self.release()

        try:
            plain = PlainCopies(cuda)
        except Exception as e:
            plain = failed(e)
        dbuf = cuda.mem_alloc(big)
        cp = self.cp

        def setup_pygpu(hs, mib):
            # to_gpu allocates the array; .get() returns a fresh one
            dsrc = ga.to_gpu(hs)
            check_equal(dsrc.get(), hs, "pygpu to_gpu/.get() of %d MiB" % mib)
            return (lambda: ga.to_gpu(hs)), dsrc.get

        def setup_plain(hs, mib):
            if isinstance(plain, str):
                raise NotAvailable(plain)
            plain.htod(int(dbuf), hs)
            check_equal(
                plain.dtoh_fresh(int(dbuf), hs.size, hs.dtype),
                hs,
                "plain cuMemcpy round trip of %d MiB" % mib,
            )
            return (
                (lambda: plain.htod(int(dbuf), hs)),
                (lambda: plain.dtoh_fresh(int(dbuf), hs.size, hs.dtype)),
            )

        def setup_cupy(hs, mib):
            if cp is None:
                raise NotAvailable(self.cp_why.split(": ", 1)[1])
            csrc = cp.asarray(hs)
            check_equal(csrc.get(), hs, "CuPy asarray/.get() of %d MiB" % mib)
            return (lambda: cp.asarray(hs)), csrc.get

        for mib in cfg.copy_mib:
            nb = mib * M
            hs = h[: nb // 4]
            for impl, setup in (
                ("pygpu", setup_pygpu),
                ("plain", setup_plain),
                ("cupy", setup_cupy),
            ):
                keys = [
                    "%s_%s_%d_%s_gbs" % (impl, d, mib, m)
                    for d, _ in COPY_DIRS
                    for m, _ in COPY_MODES
                ]
                try:
                    fns = setup(hs, mib)
                except Exception as e:
                    why = failed(e)
                    if impl == "plain" and isinstance(plain, str):
                        why = plain
                    elif impl == "cupy" and cp is None:
                        why = self.cp_why
                    for k in keys:
                        figs[k] = why
                    continue
                for (d, _), fn in zip(COPY_DIRS, fns):
                    for m, _ in COPY_MODES:
                        self.attempt(
                            "%s_%s_%d_%s_gbs" % (impl, d, mib, m),
                            lambda fn=fn, m=m: wall_gbs(fn, nb, m == "paused"),
                        )
                del fns
                self.release()

    def captured(self):
        if HERE not in sys.path:
            sys.path.insert(0, HERE)
        import captured_arrays

        r = captured_arrays.measure(self.cfg.graph_ops, self.cfg.n_small, self.cfg.graph_replays)
        for k in captured_arrays.KEYS:
            self.figs[k] = r[k]
            self.log("    %s: %s" % (k, fmt(r[k]) if not isinstance(r[k], str) else r[k]))


def measure(cfg=None, log=None):
    """(figures, goal rows, GPU info) of one run; needs a GPU (or the
    stand-in)."""
    run = GoalRun(cfg, log)
    try:
        info = gpu_info(run.cuda)
    except Exception as e:
        info = {"gpu": "? (%s)" % failed(e)}
    figs = run.run()
    return figs, judge_all(figs, run.cfg), info


def report(figs, rows, info, out=None, header=True):
    """Print the GPU line (with header), the goal table, its notes and the
    summary."""
    out = out or sys.stdout
    text, notes = goal_table(rows)
    if header:
        print(gpu_line(info), file=out)
    print(
        "Issue 27's goals, each against a floor measured in this run (%s):" % summary(rows),
        file=out,
    )
    print(text, file=out)
    for line in notes:
        print("- " + line, file=out)
    cap = figs.get("captured_us_per_op")
    eager = figs.get("eager_us_per_op")
    if _usable(cap) or _usable(eager):
        print(
            "(the same loop run eagerly: %s us an op; as a graphs.captured() function, its "
            "inputs copied in each call: %s us an op)" % (fmt(eager), fmt(cap)),
            file=out,
        )
    names = figs.get("standin_calls_by_name")
    if isinstance(names, dict) and names:
        print(
            "(driver calls a small a + b on the stand-in: %s)"
            % ", ".join("%s %g" % kv for kv in sorted(names.items())),
            file=out,
        )
    rf = figs.get("read_floor_config")
    if isinstance(rf, dict):
        print(
            "(read floor: %d-element-deep unroll, %d blocks of 256 an SM on %d SMs, the "
            "best of %d shapes)"
            % (rf["unroll"], rf["blocks_per_sm"], rf["sms"], len(rf["us_400mb_by_config"])),
            file=out,
        )


def jsonable(obj):
    if isinstance(obj, dict):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [jsonable(v) for v in obj]
    if isinstance(obj, (np.floating, np.integer)):
        return obj.item()
    if isinstance(obj, float) and not math.isfinite(obj):
        return repr(obj)
    return obj


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", help="write the figures and the judged goals here")
    ap.add_argument("--no-cupy", action="store_true", help="leave CuPy out")
    args = ap.parse_args(argv)
    reason = gpu_reason()
    if reason is not None:
        print("benchmarks/goals.py: nothing measured: this machine has no usable GPU (%s)" % reason)
        return 0
    cfg = Config(cupy=not args.no_cupy)
    figs, rows, info = measure(cfg)
    report(figs, rows, info)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                jsonable({"gpu": info, "config": cfg.as_dict(), "figures": figs, "goals": rows}),
                f,
                indent=1,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
