"""All-reduce bus bandwidth through pygpu next to nccl4py's own figure, for
the same buffer sizes, on every GPU of the machine from one process.

    python3 benchmarks/nccl_allreduce.py [--sizes 4K,1M,64M,1G] [--iters N]
                                         [--turn-s S] [--gpus N] [--repeat N]
                                         [--dtype float32]
                                         [--json out.json]

Three ways to drive the same NCCL all-reduce (sum, in place), one
communicator per GPU (ncclCommInitAll), each call of the round issued in one
NCCL group, on one stream per GPU:

- pygpu: GPUArrays and pygpu Streams through pygpu.nccl's Communicator:
  its checks (the operand gate, dtype, sizes, ranks, context) and the call
  to ncclAllReduce made from pygpu's C extension (src/interop/nccl.c),
  group calls through pygpu.nccl.group;
- nccl4py on GPUArrays: nccl4py's Communicator.allreduce given the same
  GPUArrays and pygpu Streams directly (DLPack, __cuda_stream__);
- NCCL's own: ncclAllReduce called through nccl4py's raw bindings
  (nccl.bindings.nccl.all_reduce, between group_start/group_end) with the
  plain device pointers of the same arrays and the handles of the same
  streams: no buffer resolution or checks, the least Python a call to NCCL
  can have (what nccl-tests measure).  The same memory and streams, so the
  paths differ only in what the host does per call.

Each figure: the mean wall-clock time of the rounds of a turn (at least
--iters of them and --turn-s seconds) after warm-up rounds (at least
--warmup of them and 0.2 s), all streams synchronized at the end (as
nccl-tests time it), the best of --repeat turns of the three paths taken
in turn; algorithm bandwidth = bytes / time, bus
bandwidth = algorithm bandwidth x 2 (n - 1) / n (nccl-tests' definition for
all-reduce, comparable across n).
The first size's result is checked against NumPy (random data, every GPU's
copy).  The last columns give pygpu's cost over NCCL's own per call
((pygpu's round - NCCL's round) / GPUs, in microseconds) and whether it is
within the goal of 1 us a call (PERFORMANCE.md).  The goal is judged on 2
GPUs or more.  On one GPU (or --gpus 1) the communicator has one rank: an
in-place all-reduce moves no data there, so the same three calls measure
each path's host cost a call with nothing on the GPU to hide it (the
bandwidth columns are then algorithm bandwidth).  Needs a GPU and nccl4py
(pip install 'pygpu[nccl]'); says why and exits 0 otherwise.
"""

import argparse
import json
import os
import sys
import time

import numpy as np

os.environ.setdefault("NCCL_NVLS_ENABLE", "0")  # NVLink multicast stays off

UNITS = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
DEFAULT_SIZES = "8K,64K,256K,4M,64M,256M,1G"
GOAL_US = 1.0  # pygpu within 1 us a call of NCCL's own


def parse_size(s):
    s = s.strip().upper().rstrip("B")
    mult = UNITS.get(s[-1:], 1)
    return int(float(s[:-1] if s[-1:] in UNITS else s) * mult)


def fmt_size(n):
    for unit, m in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n >= m and n % m == 0:
            return "%d %siB" % (n // m, unit)
    return "%d B" % n


def not_run(why):
    print("nccl_allreduce: not run: %s" % why)
    sys.exit(0)


WARM_S = 0.2  # warm-up of each figure: at least this long (the host's clocks and caches)


def timed(rounds, sync, iters, warmup, turn_s):
    """The mean time of a round: at least `iters` rounds and `turn_s`
    seconds of them (the count from the warm-up's pace), after at least
    `warmup` rounds and WARM_S seconds of warm-up."""
    t = time.perf_counter()
    n = 0
    while n < warmup or time.perf_counter() - t < WARM_S:
        rounds()
        n += 1
        if n % 64 == 0:
            sync()
    sync()
    iters = max(iters, int(turn_s / ((time.perf_counter() - t) / n)))
    t = time.perf_counter()
    for _ in range(iters):
        rounds()
    sync()
    return (time.perf_counter() - t) / iters


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default=DEFAULT_SIZES, help="bytes per GPU (default %(default)s)")
    ap.add_argument("--iters", type=int, default=20, help="timed rounds a turn, at least")
    ap.add_argument(
        "--turn-s", type=float, default=0.1, help="seconds of timed rounds a turn, at least"
    )
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--repeat", type=int, default=5, help="turns of the three paths")
    ap.add_argument("--gpus", type=int, help="use the first N GPUs (default: all)")
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--json", help="write the figures here")
    args = ap.parse_args(argv)
    sizes = [parse_size(s) for s in args.sizes.split(",") if s.strip()]
    dtype = np.dtype(args.dtype)

    import pygpu.driver as cuda

    try:
        cuda.init()
        ndev = cuda.Device.count()
    except cuda.CudaUnavailableError as e:
        not_run("no GPU (%s)" % str(e).splitlines()[0])
    if ndev < 1:
        not_run("no GPU visible")
    if args.gpus is not None:
        if not 1 <= args.gpus <= ndev:
            ap.error("--gpus %d: %d GPUs are visible" % (args.gpus, ndev))
        ndev = args.gpus
    from pygpu import gpuarray, nccl as pnccl

    if not pnccl.available():
        not_run("nccl4py is not importable (pip install 'pygpu[nccl]')")
    import nccl.core as nccl
    from nccl.bindings import nccl as nb

    comms = pnccl.Communicator.init_all(list(range(ndev)))
    raw = [c.nccl for c in comms]
    streams = []
    for c in comms:
        with c.context:
            streams.append(cuda.Stream())
        c.stream = streams[-1]
    names = [cuda.Device(k).name() for k in range(ndev)]
    info = nccl.get_version()
    print("%d GPUs: %s; NCCL %s, nccl4py %s" % (ndev, ", ".join(names), info.libnccl, info.nccl4py))

    def sync_pygpu():
        for c, s in zip(comms, streams):
            with c.context:
                s.synchronize()

    rng = np.random.default_rng()
    rows = []
    for i, nbytes in enumerate(sizes):
        n = max(1, nbytes // dtype.itemsize)
        nbytes = n * dtype.itemsize
        arrays = []
        hosts = []
        for c in comms:
            h = rng.standard_normal(n).astype(dtype) if i == 0 else None
            with c.context:
                arrays.append(gpuarray.to_gpu(h) if h is not None else gpuarray.zeros(n, dtype))
            hosts.append(h)
        if i == 0:
            with pnccl.group(comms):
                for c, a in zip(comms, arrays):
                    c.allreduce(a)
            sync_pygpu()
            want = np.sum(np.stack(hosts).astype(np.float64), axis=0)
            for c, a in zip(comms, arrays):
                with c.context:
                    got = a.get()
                err = float(np.max(np.abs(got - want)) / max(1.0, np.max(np.abs(want))))
                if err > (1e-5 if dtype.itemsize == 4 else 1e-12):
                    print(
                        "FAILED: the all-reduce of %s on device %d is off by %.1e"
                        % (fmt_size(nbytes), c.device, err)
                    )
                    sys.exit(1)
            print(
                "ok: the all-reduce of %s of random %s on %d GPUs equals NumPy's sum"
                % (fmt_size(nbytes), dtype, ndev)
            )

        def pygpu_round():
            with pnccl.group(comms):
                for c, a in zip(comms, arrays):
                    c.allreduce(a)

        def direct_round():
            with nccl.group():
                for r, a, s in zip(raw, arrays, streams):
                    r.allreduce(a, a, nccl.SUM, stream=s)

        ptrs = [int(a.gpudata) for a in arrays]
        sptrs = [int(s.handle) for s in streams]
        nccl_dtype = int(nccl.NcclDataType.from_numpy_dtype(dtype))
        op_sum, comm_ptrs = (
            int(nccl.SUM),
            [r._comm for r in raw],
        )  # the bindings take the Comm object

        def own_round():
            nb.group_start()
            for p, cp, sp in zip(ptrs, comm_ptrs, sptrs):
                nb.all_reduce(p, p, n, nccl_dtype, op_sum, cp, sp)
            nb.group_end()

        iters = args.iters if nbytes >= (1 << 20) else max(args.iters, 200)
        warmup = max(args.warmup, iters // 4)
        # the three paths in turn, --repeat times; each path's best turn
        # (the first size's first turn read 1-3 us high on an H200)
        t_pg = t_dir = t_own = float("inf")
        for _ in range(args.repeat):
            t_pg = min(t_pg, timed(pygpu_round, sync_pygpu, iters, warmup, args.turn_s))
            t_dir = min(t_dir, timed(direct_round, sync_pygpu, iters, warmup, args.turn_s))
            t_own = min(t_own, timed(own_round, sync_pygpu, iters, warmup, args.turn_s))
        factor = 2.0 * (ndev - 1) / ndev if ndev > 1 else 1.0  # one rank: algorithm bw
        row = {"bytes": nbytes, "min_iters": iters, "turn_s": args.turn_s}
        for key, t in (("pygpu", t_pg), ("nccl4py_gpuarray", t_dir), ("nccl_own", t_own)):
            row[key] = {
                "us": t * 1e6,
                "algbw_GBs": nbytes / t / 1e9,
                "busbw_GBs": nbytes / t / 1e9 * factor,
            }
        row["overhead_us_per_call"] = (t_pg - t_own) * 1e6 / ndev
        row["goal_met"] = row["overhead_us_per_call"] <= GOAL_US
        rows.append(row)
        del arrays

    head = (
        "| size per GPU | pygpu: us / bus GB/s | nccl4py on GPUArrays: us / bus GB/s "
        "| NCCL's own (raw call): us / bus GB/s | pygpu / NCCL's own "
        "| pygpu - NCCL's own, us a call | within %.0f us |" % GOAL_US
    )
    print()
    print(head)
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        cells = [
            "%.1f / %.1f" % (r[k]["us"], r[k]["busbw_GBs"])
            for k in ("pygpu", "nccl4py_gpuarray", "nccl_own")
        ]
        print(
            "| %s | %s | %s | %s | %.2f | %+.2f | %s |"
            % (
                fmt_size(r["bytes"]),
                cells[0],
                cells[1],
                cells[2],
                r["pygpu"]["busbw_GBs"] / r["nccl_own"]["busbw_GBs"],
                r["overhead_us_per_call"],
                "yes" if r["goal_met"] else "NO",
            )
        )
    met = sum(r["goal_met"] for r in rows)
    print(
        "\ngoal (pygpu within %.0f us a call of NCCL's own): met at %d of %d sizes%s"
        % (
            GOAL_US,
            met,
            len(rows),
            " (one rank: the host's cost a call; the goal is judged on 2 GPUs or more)"
            if ndev == 1
            else "",
        )
    )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                {
                    "gpus": names,
                    "ranks": ndev,
                    "nccl": str(info.libnccl),
                    "dtype": str(dtype),
                    "rows": rows,
                },
                f,
                indent=1,
            )
    for c in comms:
        c.destroy()


if __name__ == "__main__":
    main()
