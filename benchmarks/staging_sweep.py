#!/usr/bin/env python3
"""Pageable-copy staging sweep: the plain driver call against pygpu's staged
copy (src/staging.c), host to device and back, at 1 to 256 MiB, for several
thread counts and chunk sizes; page-locked copies as the ceiling.

    python benchmarks/staging_sweep.py            # the full sweep (~1 minute)
    python benchmarks/staging_sweep.py --quick    # 1 and 2 MiB, the current settings
    python benchmarks/staging_sweep.py --json out.json

Each figure is the median of --repeat timed synchronous copies after two
untimed ones (the first staged copy with new settings starts the helper
threads and allocates the pinned buffers).  Every configuration's copies are
checked byte for byte, and staging_stats() confirms which path each took.

The recommendation: for each configuration and each candidate threshold
(a swept size, or off), copies below the threshold take the plain call and
the others the staged one; a candidate is allowed only if, from the
threshold up, staged is at least (1 + --margin) times plain in both
directions; the allowed candidate with the best geometric-mean speed-up
over all sizes and both directions wins.  The winner is then measured
again with a 2 ms pause before each copy (the helper threads asleep, as
after a kernel) and the threshold moves up if it does not hold there.  Without a GPU the script says so
and exits 0.
"""
import argparse
import json
import math
import statistics
import sys
import time

MIB = 1 << 20


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", default="1,2,4,8,16,64,256", help="MiB, comma-separated")
    p.add_argument("--threads", default="2,4,6,8", help="thread counts to try")
    p.add_argument("--chunks", default="1,2,4,8", help="chunk sizes to try, MiB")
    p.add_argument("--repeat", type=int, default=9, help="timed copies per figure")
    p.add_argument("--margin", type=float, default=0.03,
                   help="staged must beat plain by this fraction to count as faster")
    p.add_argument("--quick", action="store_true",
                   help="1 and 2 MiB, the current settings only, 3 copies")
    p.add_argument("--json", help="write the raw figures here")
    a = p.parse_args(argv)
    if a.quick:
        a.sizes, a.repeat = "1,2", 3
    a.sizes = [int(s) for s in a.sizes.split(",")]
    a.threads = [int(s) for s in a.threads.split(",")]
    a.chunks = [int(s) for s in a.chunks.split(",")]
    return a


def gpu_or_reason(cuda):
    try:
        cuda.init()
        if cuda.Device.count() == 0:
            return None, "no CUDA device is visible"
        return cuda.Device(0), None
    except Exception as e:   # CudaUnavailableError, mostly
        return None, str(e).splitlines()[0]


def timed(fn, nbytes, repeat, pause=0.0):
    fn()
    fn()
    times = []
    for _ in range(repeat):
        if pause:
            time.sleep(pause)           # the helpers go to sleep between copies
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return nbytes / statistics.median(times) / 1e9


def measure(cuda, dev, host, out, n, repeat, staged, pause=0.0):
    """(H->D GB/s, D->H GB/s) of n-byte copies; checks the bytes and the path."""
    before = cuda.staging_stats()
    src, dst = host[:n], out[:n]
    cuda.memset_d8(dev, 0, n)       # what the check below reads was written by these copies
    dst[:] = 0
    htod = timed(lambda: cuda.memcpy_htod(dev, src), n, repeat, pause)
    dtoh = timed(lambda: cuda.memcpy_dtoh(dst, dev), n, repeat, pause)
    if not (dst == src).all():
        raise SystemExit("staging_sweep: a copy of %d bytes came back wrong (%s)"
                         % (n, "staged" if staged else "plain"))
    after = cuda.staging_stats()
    went = (after["staged_htod"] - before["staged_htod"], after["staged_dtoh"] - before["staged_dtoh"])
    want = (repeat + 2, repeat + 2) if staged else (0, 0)
    if went != want:
        raise SystemExit("staging_sweep: %s copies of %d bytes took the wrong path: "
                         "%d/%d staged, expected %d/%d" % ("staged" if staged else "plain",
                                                           n, went[0], went[1], *want))
    return htod, dtoh


def first_winning(sizes, plain, fig, margin):
    """The smallest size from which fig beats plain at every size, or None."""
    for i, t in enumerate(sizes):
        if all(fig[s][d] >= plain[s][d] * (1 + margin) for s in sizes[i:] for d in (0, 1)):
            return t
    return None


def recommend(sizes, plain, configs, margin):
    """Best (score, threshold MiB or 0 for off, config key); see the docstring."""
    best = (1.0, 0, None)                         # staging off: speed-up 1 everywhere
    for key, fig in configs.items():
        for i, t in enumerate(sizes):
            ok = all(fig[s][d] >= plain[s][d] * (1 + margin)
                     for s in sizes[i:] for d in (0, 1))
            if not ok:
                continue
            logs = [math.log((fig[s][d] if s >= t else plain[s][d]) / plain[s][d])
                    for s in sizes for d in (0, 1)]
            score = math.exp(sum(logs) / len(logs))
            if score > best[0]:
                best = (score, t, key)
            break                                  # a higher threshold only scores lower
    return best


def main(argv=None):
    a = parse_args(sys.argv[1:] if argv is None else argv)
    import numpy as np
    import pygpu.driver as cuda

    device, why = gpu_or_reason(cuda)
    if device is None:
        print("staging_sweep: no GPU (%s): nothing measured" % why)
        return 0
    ctx = device.retain_primary_context()
    ctx.push()
    old = cuda.set_staging()
    try:
        return sweep(a, cuda, np, device, old)
    finally:
        cuda.set_staging(**old)
        cuda.Context.pop()


def sweep(a, cuda, np, device, current):
    sizes = a.sizes
    big = max(sizes) * MIB
    rng = np.random.default_rng(1)
    host = rng.integers(0, 256, big, dtype=np.uint8)    # pageable, every page touched
    out = np.zeros(big, np.uint8)
    dev = cuda.mem_alloc(big)
    pinned = cuda.pagelocked_empty(big, np.uint8)
    pinned[:] = host
    pinned_out = cuda.pagelocked_zeros_like(pinned)

    print("pageable copies, GB/s, median of %d: %s, driver %s, pygpu staging defaults %s"
          % (a.repeat, device.name(), cuda.get_driver_version(), current))
    plain, ceiling = {}, {}
    cuda.set_staging(threshold=0)
    for s in sizes:
        plain[s] = measure(cuda, dev, host, out, s * MIB, a.repeat, staged=False)
        ceiling[s] = (timed(lambda: cuda.memcpy_htod(dev, pinned[:s * MIB]), s * MIB, a.repeat),
                      timed(lambda: cuda.memcpy_dtoh(pinned_out[:s * MIB], dev), s * MIB,
                            a.repeat))

    grid = [(current["threads"], current["chunk"] / MIB)] if a.quick else \
        [(t, c) for t in a.threads for c in a.chunks]
    if not a.quick and (current["threads"], current["chunk"]) not in \
            [(t, c * MIB) for t, c in grid]:
        grid.append((current["threads"], current["chunk"] / MIB))
    configs = {}
    for t, c in grid:
        key = "%d thr, %g MiB" % (t, c)
        cuda.set_staging(threshold=1, threads=t, chunk=int(c * MIB))
        configs[key] = {s: measure(cuda, dev, host, out, s * MIB, a.repeat, staged=True)
                        for s in sizes}

    for d, name in ((0, "H->D"), (1, "D->H")):
        print("\n%s GB/s" % name)
        head = "| %-18s |" % "MiB" + "".join(" %6d |" % s for s in sizes)
        print(head)
        print("|" + "-" * 20 + "|" + "--------|" * len(sizes))
        print("| %-18s |" % "plain (driver)" + "".join(" %6.1f |" % plain[s][d] for s in sizes))
        print("| %-18s |" % "page-locked" + "".join(" %6.1f |" % ceiling[s][d] for s in sizes))
        for key, fig in configs.items():
            print("| %-18s |" % ("staged " + key.replace(" thr, ", "x").replace(" MiB", "M"))
                  + "".join(" %6.1f |" % fig[s][d] for s in sizes))

    print("\nplain vs the best staged configuration at each size")
    print("| MiB | H->D plain | H->D staged | D->H plain | D->H staged |")
    print("|-----|------------|-------------|------------|-------------|")
    for s in sizes:
        bh = max(f[s][0] for f in configs.values())
        bd = max(f[s][1] for f in configs.values())
        print("| %d | %.1f | %.1f | %.1f | %.1f |" % (s, plain[s][0], bh, plain[s][1], bd))

    score, threshold, key = recommend(sizes, plain, configs, a.margin)
    cold = plain_cold = None
    if key is not None:
        # the same copies with a pause before each (the helpers asleep, as
        # after a kernel or a computation): the threshold must hold there too
        t, c = key.split(" thr, ")
        c = float(c.split()[0])
        pause = 0.002
        cuda.set_staging(threshold=0)
        plain_cold = {s: measure(cuda, dev, host, out, s * MIB, a.repeat, False, pause)
                      for s in sizes}
        cuda.set_staging(threshold=1, threads=int(t), chunk=int(c * MIB))
        cold = {s: measure(cuda, dev, host, out, s * MIB, a.repeat, True, pause)
                for s in sizes}
        print("\nwith %g ms between copies (helpers asleep), %s" % (pause * 1e3, key))
        print("| MiB | H->D plain | H->D staged | D->H plain | D->H staged |")
        print("|-----|------------|-------------|------------|-------------|")
        for s in sizes:
            print("| %d | %.1f | %.1f | %.1f | %.1f |" % (s, plain_cold[s][0], cold[s][0],
                                                      plain_cold[s][1], cold[s][1]))
        t_cold = first_winning([s for s in sizes if s >= threshold], plain_cold, cold, a.margin)
        if t_cold is None:
            print("staging loses somewhere above %d MiB with the helpers asleep: "
                  "recommending staging off" % threshold)
            key = None
        elif t_cold != threshold:
            print("with the helpers asleep staging wins from %d MiB (not %d): "
                  "the threshold moves up" % (t_cold, threshold))
            threshold = t_cold
    print()
    if key is None:
        print("recommended: staging off (threshold 0): no configuration beat the plain call "
              "by %d%% at every size from some size up" % round(a.margin * 100))
        env = "PYGPU_STAGING_THRESHOLD=0"
    else:
        print("recommended: threshold %d MiB, %s threads, chunk %g MiB (staged >= %.2fx plain "
              "from %d MiB up in both directions, helpers awake or asleep; geometric-mean "
              "speed-up over the sweep %.2fx)" % (threshold, t, c, 1 + a.margin, threshold, score))
        env = "PYGPU_STAGING_THRESHOLD=%dM PYGPU_STAGING_THREADS=%s PYGPU_STAGING_CHUNK=%d" % (
            threshold, t, int(c * MIB))
    print("  " + env)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"device": device.name(), "sizes_mib": sizes, "repeat": a.repeat,
                       "plain": plain, "page_locked": ceiling, "staged": configs,
                       "plain_paused": plain_cold, "staged_paused": cold,
                       "recommended": {"threshold_mib": threshold, "config": key,
                                       "score": score, "env": env}}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
