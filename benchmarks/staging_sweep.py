#!/usr/bin/env python3
"""Pageable-copy staging sweep (src/memory/staging.c, docs/memory.md "Pageable
copies"): in one run, the plain driver call, page-locked copies (the
ceiling) and staged copies at 256 KiB to 256 MiB, host to device and back,
back to back and after a pause, into a reused and into a fresh destination
and through GPUArray.get(), for each value of each staging knob with the
others at their defaults.

    python benchmarks/staging_sweep.py              # the sweep (about 1.5 minutes)
    python benchmarks/staging_sweep.py --quick      # the defaults, two sizes
    python benchmarks/staging_sweep.py --json out.json

Series (each a table, GB/s, the median of --repeat timed copies):
  htod        host to device, back to back (the helpers awake)
  htod-pause  the same with a --pause sleep before each copy (helpers asleep)
  dtoh        device to host into a reused (resident) array, back to back
  dtoh-pause  ... after a pause
  fresh       device to host into a new np.empty array each copy, back to back
  fresh-pause ... after a pause
  get         GPUArray.get() (pygpu allocates the result), back to back
  get-pause   ... after a pause
  dtoh-busy   device to host into a reused array after a pause, behind
              --busy-mib of memset queued on the default stream (as behind a
              kernel: the copy waits for it, the helpers wake meanwhile;
              its GB/s count that wait); the plain call and the defaults only
Rows: `plain` (staging off: the driver's own path, same destinations),
`pinned` (page-locked host memory, back to back), and one `staged` row per
configuration: the defaults, then one knob changed at a time (piece, spin_us,
prefault, threads, chunk; a knob is measured only in the series it can
change).  Staged rows force staging at every size (threshold 1 byte, and cold=0:
also while the helpers sleep); the
threshold to use is read off them: the smallest size from which the defaults
beat the plain call by --margin at every larger size in every series.  Every
configuration's copies are checked (the last copy of each cell byte for byte)
and staging_stats() confirms which path each took.  Without a GPU the script
says so and exits 0.
"""

import argparse
import json
import math
import os
import statistics
import sys
import time

KIB, MIB = 1 << 10, 1 << 20
SERIES = (
    "htod",
    "htod-pause",
    "dtoh",
    "dtoh-pause",
    "fresh",
    "fresh-pause",
    "get",
    "get-pause",
    "dtoh-busy",
)
# which series a knob can change (the others are not measured for it)
KNOB_SERIES = {
    "piece": SERIES[:-1],
    "threads": SERIES[:-1],
    "chunk": SERIES[:-1],
    "spin_us": ("htod", "dtoh", "fresh", "get"),
    "prefault": ("fresh", "fresh-pause", "get", "get-pause"),
}


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--sizes",
        default="256K,512K,1M,2M,4M,8M,16M,64M,256M",
        help="copy sizes, comma-separated (K or M suffix)",
    )
    p.add_argument("--pieces", default="64K,128K,512K,1M", help="piece values besides the default")
    p.add_argument("--spins", default="0,50,2000", help="spin_us values besides the default")
    p.add_argument("--threads", default="4,8,12", help="thread counts besides the default")
    p.add_argument("--chunks", default="4M", help="chunk sizes besides the default")
    p.add_argument("--no-prefault-row", action="store_true", help="skip the prefault=0 row")
    p.add_argument(
        "--repeat",
        type=int,
        default=5,
        help="timed copies per cell (at most 3 after a pause or from 64 MiB)",
    )
    p.add_argument(
        "--pause", type=float, default=0.05, help="seconds of sleep before a paused copy"
    )
    p.add_argument(
        "--busy-mib",
        type=int,
        default=1024,
        help="MiB of device memset queued before each dtoh-busy copy",
    )
    p.add_argument(
        "--margin",
        type=float,
        default=0.03,
        help="staged must beat plain by this fraction to count as faster",
    )
    p.add_argument(
        "--quick", action="store_true", help="1 and 4 MiB, the defaults only, 3 copies, 5 ms pauses"
    )
    p.add_argument("--json", help="write the figures here")
    a = p.parse_args(argv)
    if a.quick:
        a.sizes, a.pieces, a.spins, a.threads, a.chunks = "1M,4M", "", "", "", ""
        a.no_prefault_row, a.repeat, a.pause, a.busy_mib = True, 3, 0.005, 16
    a.sizes = [parse_size(s) for s in a.sizes.split(",") if s]
    a.pieces = [parse_size(s) for s in a.pieces.split(",") if s]
    a.spins = [int(s) for s in a.spins.split(",") if s]
    a.threads = [int(s) for s in a.threads.split(",") if s]
    a.chunks = [parse_size(s) for s in a.chunks.split(",") if s]
    return a


def parse_size(text):
    text = text.strip().upper()
    mul = {"K": KIB, "M": MIB, "G": 1 << 30}.get(text[-1:], 1)
    return int(float(text[:-1] if mul > 1 else text) * mul)


def label(n):
    return "%dM" % (n // MIB) if n >= MIB and n % MIB == 0 else "%dK" % (n // KIB)


def gpu_or_reason(cuda):
    try:
        cuda.init()
        if cuda.Device.count() == 0:
            return None, "no CUDA device is visible"
        return cuda.Device(0), None
    except Exception as e:  # CudaUnavailableError, mostly
        return None, str(e).splitlines()[0]


def thp_mode():
    try:
        with open("/sys/kernel/mm/transparent_hugepage/enabled") as f:
            return f.read().split("[")[1].split("]")[0]
    except (OSError, IndexError):
        return "unknown"


class Bench:
    def __init__(self, a, cuda, np, gpuarray):
        self.a, self.cuda, self.np, self.gpuarray = a, cuda, np, gpuarray
        big = max(a.sizes)
        rng = np.random.default_rng(1)
        self.host = rng.integers(0, 256, big, dtype=np.uint8)  # pageable, every page touched
        self.out = np.zeros(big, np.uint8)
        self.dev = cuda.mem_alloc(big)
        cuda.memcpy_htod(self.dev, self.host)
        self.garr = {}  # size -> GPUArray of host[:n]
        self.scratch = cuda.mem_alloc(a.busy_mib * MIB)  # dtoh-busy's queued work

    def repeat(self, n):
        return min(self.a.repeat, 3) if n >= 64 * MIB else self.a.repeat

    def cell(self, series, n, staged):
        """GB/s of one series at n bytes with the current settings."""
        np, cuda, a = self.np, self.cuda, self.a
        pause = a.pause if series.endswith(("-pause", "-busy")) else 0.0
        busy = series.endswith("-busy")
        kind = series.split("-")[0]
        src = self.host[:n]
        reps = min(self.repeat(n), 3) if pause else self.repeat(n)
        times = []
        result = None
        if kind == "get" and n not in self.garr:
            self.garr[n] = self.gpuarray.to_gpu(src)
        before = cuda.staging_stats()
        for i in range(reps + 1):  # the first copy is untimed
            if kind == "fresh":
                dst = np.empty(n, np.uint8)  # fresh pages (freed after the copy)
            if pause:
                time.sleep(pause)
            t0 = time.perf_counter()
            if busy:
                cuda.memset_d32_async(self.scratch, i, self.a.busy_mib * MIB // 4)
            if kind == "htod":
                cuda.memcpy_htod(self.dev, src)
            elif kind == "dtoh":
                cuda.memcpy_dtoh(self.out[:n], self.dev)
            elif kind == "fresh":
                cuda.memcpy_dtoh(dst, self.dev)
            else:
                result = self.garr[n].get()
            t = time.perf_counter() - t0
            if i:
                times.append(t)
            if kind == "fresh":
                result = dst
        # the last copy's bytes
        if kind == "htod":
            back = np.empty(n, np.uint8)
            cuda.memcpy_dtoh(back, self.dev)
            ok = np.array_equal(back, src)
        elif kind == "dtoh":
            ok = np.array_equal(self.out[:n], src)
        else:
            ok = np.array_equal(result, src)
        if not ok:
            raise SystemExit(
                "staging_sweep: %s copy of %d bytes came back wrong (%s)"
                % (series, n, "staged" if staged else "plain")
            )
        d = cuda.staging_stats()
        went = (d["staged_htod"] - before["staged_htod"]) + (
            d["staged_dtoh"] - before["staged_dtoh"]
        )
        want = reps + 1 if staged else 0
        if kind == "htod":
            want += 1 if staged else 0  # the check's copy back
        if went != want:
            raise SystemExit(
                "staging_sweep: %s copies of %d bytes took the wrong path: %d "
                "staged, expected %d" % (series, n, went, want)
            )
        return n / statistics.median(times) / 1e9

    def pinned(self, n):
        np, cuda = self.np, self.cuda
        if not hasattr(self, "_pin"):
            big = max(self.a.sizes)
            self._pin = cuda.pagelocked_empty(big, np.uint8)
            self._pin[:] = self.host
            self._pin_out = cuda.pagelocked_empty(big, np.uint8)
        res = []
        for fn in (
            lambda: cuda.memcpy_htod(self.dev, self._pin[:n]),
            lambda: cuda.memcpy_dtoh(self._pin_out[:n], self.dev),
        ):
            fn()
            times = []
            for _ in range(self.repeat(n)):
                t0 = time.perf_counter()
                fn()
                times.append(time.perf_counter() - t0)
            res.append(n / statistics.median(times) / 1e9)
        return res


def configs(a, defaults):
    """(name, knob or None, settings) to measure: the defaults, then one knob
    changed at a time."""
    out = [("defaults", None, {})]
    for v in a.pieces:
        if v != defaults["piece"]:
            out.append(("piece=%s" % label(v), "piece", {"piece": v}))
    for v in a.spins:
        if v != defaults["spin_us"]:
            out.append(("spin_us=%d" % v, "spin_us", {"spin_us": v}))
    if not a.no_prefault_row:
        out.append(
            (
                "prefault=%d" % (1 - defaults["prefault"]),
                "prefault",
                {"prefault": 1 - defaults["prefault"]},
            )
        )
    for v in a.threads:
        if v != defaults["threads"]:
            out.append(("threads=%d" % v, "threads", {"threads": v}))
    for v in a.chunks:
        if v != defaults["chunk"]:
            out.append(("chunk=%s" % label(v), "chunk", {"chunk": v}))
    return out


def first_winning(sizes, plain, fig, margin):
    """The smallest size from which fig beats plain at every size, or None."""
    for i, t in enumerate(sizes):
        if all(fig[s] >= plain[s] * (1 + margin) for s in sizes[i:]):
            return t
    return None


def threshold_for(sizes, plain, staged, series, margin):
    """The smallest size from which staged beats plain in every series given
    (None: somewhere at the top it does not)."""
    worst = 0
    for se in series:
        t = first_winning(sizes, plain[se], staged[se], margin)
        if t is None:
            return None
        worst = max(worst, t)
    return worst


def gmean_speedup(sizes, plain, staged, series, floor):
    logs = [
        math.log(staged[se][s] / plain[se][s])
        for se in series
        for s in sizes
        if s >= floor and se in staged
    ]
    return math.exp(sum(logs) / len(logs)) if logs else None


def print_tables(sizes, series_list, plain, pinned, staged):
    for se in series_list:
        print("\n%s, GB/s" % se)
        print("| %-16s |" % "size" + "".join(" %6s |" % label(s) for s in sizes))
        print("|" + "-" * 18 + "|" + "--------|" * len(sizes))
        print("| %-16s |" % "plain" + "".join(" %6.1f |" % plain[se][s] for s in sizes))
        if not se.endswith(("-pause", "-busy")):
            d = 0 if se == "htod" else 1
            print("| %-16s |" % "pinned" + "".join(" %6.1f |" % pinned[s][d] for s in sizes))
        for name, fig in staged.items():
            if se in fig:
                print("| %-16s |" % name[:16] + "".join(" %6.1f |" % fig[se][s] for s in sizes))


def main(argv=None):
    a = parse_args(sys.argv[1:] if argv is None else argv)
    import numpy as np
    import pygpu.driver as cuda

    device, why = gpu_or_reason(cuda)
    if device is None:
        print("staging_sweep: no GPU (%s): nothing measured" % why)
        return 0
    from pygpu import gpuarray

    ctx = device.retain_primary_context()
    ctx.push()
    old = cuda.set_staging()
    try:
        return sweep(a, cuda, np, gpuarray, device, old)
    finally:
        cuda.set_staging(**old)
        cuda.Context.pop()


def sweep(a, cuda, np, gpuarray, device, defaults):
    t_start = time.perf_counter()
    sizes = sorted(a.sizes)
    b = Bench(a, cuda, np, gpuarray)
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    print(
        "pageable copies, GB/s: %s, driver %d, %d CPUs, transparent huge pages [%s], "
        "pause %g ms; staging defaults %s"
        % (device.name(), cuda.get_driver_version(), cpus, thp_mode(), a.pause * 1e3, defaults)
    )

    cuda.set_staging(threshold=0)
    plain = {se: {s: b.cell(se, s, False) for s in sizes} for se in SERIES}
    pinned = {s: b.pinned(s) for s in sizes}

    staged = {}
    for name, knob, change in configs(a, defaults):
        settings = dict(defaults, threshold=1, cold=0, **change)  # staged, helpers awake or not
        cuda.set_staging(**settings)
        series = SERIES if knob is None else KNOB_SERIES[knob]
        staged[name] = {se: {s: b.cell(se, s, True) for s in sizes} for se in series}
    cuda.set_staging(**defaults)
    print_tables(sizes, SERIES, plain, pinned, staged)

    # the threshold the defaults support, and each knob's best value
    base = staged["defaults"]
    thr = threshold_for(sizes, plain, base, SERIES, a.margin)
    thr_awake = threshold_for(sizes, plain, base, [s for s in SERIES if "-" not in s], a.margin)
    thr_pause = threshold_for(
        sizes, plain, base, [s for s in SERIES if "pause" in s or "busy" in s], a.margin
    )
    print()
    fmt = lambda t: "never" if t is None else label(t)
    print(
        "defaults beat the plain call by %d%% at every size from: %s (back to back %s, "
        "after a pause %s)" % (round(a.margin * 100), fmt(thr), fmt(thr_awake), fmt(thr_pause))
    )
    floor = MIB if MIB in sizes else sizes[0]
    best = {}
    for name, fig in staged.items():
        if name == "defaults":
            continue
        knob = name.split("=")[0]
        series = [se for se in fig]
        g = gmean_speedup(sizes, base, fig, series, floor)
        print(
            "  %-16s vs defaults, geometric mean from %s over %s: %.3fx"
            % (name, label(floor), ",".join(series), g)
        )
        if g is not None and g > 1 + a.margin and (knob not in best or g > best[knob][1]):
            best[knob] = (name, g)

    # the goals, judged in this run
    goals = {}
    top = max(sizes)
    pin_d2h = pinned[top][1]
    get_fresh = base["get"][top]
    goals["get_fresh_vs_pinned"] = {
        "size": top,
        "get_GBps": get_fresh,
        "pinned_GBps": pin_d2h,
        "ratio": get_fresh / pin_d2h,
        "goal": 0.5,
        "met": get_fresh >= 0.5 * pin_d2h,
    }
    small = [s for s in sizes if s >= MIB]
    staged_from_1m = bool(small) and all(
        base[se][s] >= plain[se][s] * (1 + a.margin)
        for se in ("htod-pause", "dtoh-pause")
        for s in small
    )
    goals["staged_from_1MiB_after_a_pause"] = {"met": staged_from_1m}
    print(
        "\ngoal: get() of %s into a fresh array >= 50%% of pinned D->H: %.1f / %.1f GB/s = "
        "%.0f%%: %s"
        % (
            label(top),
            get_fresh,
            pin_d2h,
            100 * get_fresh / pin_d2h,
            "met" if goals["get_fresh_vs_pinned"]["met"] else "NOT met",
        )
    )
    print(
        "goal: staged beats plain from 1 MiB up after a pause (both directions): %s"
        % ("met" if staged_from_1m else "NOT met")
    )

    env = ["PYGPU_STAGING_THRESHOLD=%s" % ("0" if thr is None else label(thr))]
    for knob, (name, g) in sorted(best.items()):
        env.append("PYGPU_STAGING_%s=%s" % (knob.upper(), name.split("=")[1]))
    print(
        "\nrecommended (threshold from the defaults' rows; a knob only where its best value "
        "beat the defaults by %d%%; knobs were changed one at a time):" % round(a.margin * 100)
    )
    print("  " + " ".join(env))
    elapsed = time.perf_counter() - t_start
    print("(%.0f s)" % elapsed)
    if a.json:
        key = lambda d: {label(s): v for s, v in d.items()}
        with open(a.json, "w") as f:
            json.dump(
                {
                    "device": device.name(),
                    "driver": cuda.get_driver_version(),
                    "cpus": cpus,
                    "thp": thp_mode(),
                    "defaults": defaults,
                    "sizes": [label(s) for s in sizes],
                    "pause_s": a.pause,
                    "repeat": a.repeat,
                    "plain": {se: key(v) for se, v in plain.items()},
                    "pinned": {
                        "htod": key({s: v[0] for s, v in pinned.items()}),
                        "dtoh": key({s: v[1] for s, v in pinned.items()}),
                    },
                    "staged": {
                        n: {se: key(v) for se, v in fig.items()} for n, fig in staged.items()
                    },
                    "threshold": {
                        "all": thr and label(thr),
                        "awake": thr_awake and label(thr_awake),
                        "pause": thr_pause and label(thr_pause),
                    },
                    "goals": goals,
                    "recommended_env": env,
                    "elapsed_s": elapsed,
                },
                f,
                indent=1,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
