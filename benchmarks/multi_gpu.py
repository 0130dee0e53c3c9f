"""Several GPUs and several processes, in one run, on a machine with 2 GPUs:

* peer copies: pygpu's memcpy_peer / memcpy_peer_async against the C floor
  (peer_floor.c: cuMemcpyPeer / cuMemcpyPeerAsync, built and run here);
* the Lomb-Scargle periodogram (2^10 samples x 2^24 frequencies, float64)
  on 2 GPUs against 1: in one process (examples/multi_gpu_lombscargle.py's
  split) and with MPI (examples/mpi_lombscargle.py under mpiexec -n 1 and 2);
* a kernel reading memory imported from another process (a legacy IPC
  handle, a pool allocation) against reading local memory.

    python3 benchmarks/multi_gpu.py [--json results.json] [--quick]

Every result is checked (the periodograms against SciPy on 4096
frequencies, the copies and reads element for element).  Prints a table.
"""

import argparse
import json
import multiprocessing
import os
import re
import shutil
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "examples"))
LS_NX, LS_NF, LS_CHECKED = 1 << 10, 1 << 24, 4096
PEER_SIZES = [1 << 20, 16 << 20, 256 << 20]
READ_BYTES = 1 << 30
READ_KERNEL = r"""
extern "C" __global__ void readsum(const double4 *__restrict__ p, long long n4, double *out)
{
    double s = 0;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n4;
         i += (long long)blockDim.x * gridDim.x) {
        double4 v = p[i];
        s += v.x + v.y + v.z + v.w;
    }
    atomicAdd(out, s);
}
"""


def cuda_root():
    for r in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if r and os.path.exists(os.path.join(r, "include", "cuda.h")):
            return r
    return "/usr/local/cuda"


def median(v):
    v = sorted(v)
    return v[len(v) // 2]


# ---- peer copies ----


def peer_floor(repeat):
    root = cuda_root()
    build = os.path.join(HERE, "build")
    os.makedirs(build, exist_ok=True)
    exe = os.path.join(build, "peer_floor")
    libdirs = [os.path.join(root, "lib64"), os.path.join(root, "lib64", "stubs")]
    subprocess.run(
        [
            "cc",
            "-O2",
            "-o",
            exe,
            os.path.join(HERE, "peer_floor.c"),
            "-I" + os.path.join(root, "include"),
        ]
        + ["-L" + d for d in libdirs]
        + ["-lcuda"],
        check=True,
    )
    out = subprocess.run(
        [exe, str(repeat)] + [str(s) for s in PEER_SIZES],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return json.loads(out)


def peer_pygpu(cuda, repeat):
    c0 = cuda.Device(0).retain_primary_context()
    c1 = cuda.Device(1).retain_primary_context()
    peer = cuda.Device(0).can_access_peer(cuda.Device(1)) and cuda.Device(1).can_access_peer(
        cuda.Device(0)
    )
    n = max(PEER_SIZES)
    x = np.random.default_rng().integers(0, 256, n, dtype=np.uint8)
    with c1:
        b = cuda.mem_alloc(n)
        if peer:
            c1.enable_peer_access(c0)
    with c0:
        a = cuda.to_device(x)
        if peer:
            c0.enable_peer_access(c1)
        s = cuda.Stream(flags=cuda.stream_flags.NON_BLOCKING)
        e0, e1 = cuda.Event(), cuda.Event()
        res = {}
        for size in PEER_SIZES:
            cuda.memcpy_peer(b, a, size)  # warm up
            cuda.Context.synchronize()
            t = []
            for _ in range(repeat):
                # memcpy_peer may return before a device-to-device copy
                # ends (as cuMemcpyPeer does): timed to the copy's end
                t0 = time.perf_counter()
                cuda.memcpy_peer(b, a, size)
                cuda.Context.synchronize()
                t.append(time.perf_counter() - t0)
            e0.record(s)
            for _ in range(repeat):
                cuda.memcpy_peer_async(b, a, size, stream=s)
            e1.record(s)
            e1.synchronize()
            res[size] = {"blocking_s": median(t), "async_s": e1.time_since(e0) / 1e3 / repeat}
        with c1:
            got = cuda.from_device(b, n, np.uint8)
        assert np.array_equal(got, x), "memcpy_peer: the copy differs"
        if peer:
            c0.disable_peer_access(c1)
    if peer:
        with c1:
            c1.disable_peer_access(c0)
    return res


# ---- Lomb-Scargle on 1 and 2 GPUs ----


def ls_one_process(cuda):
    import multi_gpu_lombscargle as ex
    from scipy import signal

    rng = np.random.default_rng(1)
    x, y, freqs = ex.data(LS_NX, LS_NF, rng)
    one, t1, _ = ex.run(cuda, [0], x, y, freqs)
    two, t2, ms = ex.run(cuda, [0, 1], x, y, freqs)
    pick = np.sort(np.random.default_rng(2).choice(LS_NF, LS_CHECKED, replace=False))
    want = signal.lombscargle(x, y, freqs[pick])
    for name, got in (("1 GPU", one), ("2 GPUs", two)):
        err = np.max(np.abs(got[pick] - want)) / np.max(np.abs(want))
        assert err <= 1e-9, "Lomb-Scargle on %s: error %g" % (name, err)
    assert np.array_equal(one, two), "the 2-GPU periodogram differs from the 1-GPU one"
    return t1, t2


def mpiexec():
    exe = shutil.which("mpiexec") or os.path.join(os.path.dirname(sys.executable), "mpiexec")
    return exe if os.path.exists(exe) else None


def ls_mpi(ranks):
    exe = mpiexec()
    r = subprocess.run(
        [
            exe,
            "-n",
            str(ranks),
            sys.executable,
            os.path.join(ROOT, "examples", "mpi_lombscargle.py"),
            str(LS_NX),
            str(LS_NF),
            str(LS_CHECKED),
        ],
        capture_output=True,
        text=True,
        timeout=900,
    )
    if r.returncode != 0 or "ok: " not in r.stdout:
        raise RuntimeError(
            "mpi_lombscargle.py on %d ranks failed:\n%s%s" % (ranks, r.stdout, r.stderr)
        )
    m = re.search(r"on %d ranks?: ([0-9.]+) ms" % ranks, r.stdout)
    return float(m.group(1)) / 1e3


# ---- reading imported memory ----


def _exporter(conn, nbytes, seed):
    """Another process: owns the memory, exports it (legacy IPC and pool),
    waits until the parent is done."""
    import pygpu.autoinit  # noqa: F401
    import pygpu.driver as cuda
    from pygpu import ipc

    x = np.random.default_rng(seed).standard_normal(nbytes // 8)
    a = cuda.to_device(x)
    pool = cuda.MemoryPool()
    p = pool.allocate(nbytes)
    cuda.memcpy_dtod(p, a, nbytes)
    cuda.Context.synchronize()
    conn.send((cuda.mem_get_ipc_handle(a), ipc.export_pool(pool), pool.export_pointer(p)))
    conn.recv()
    conn.close()


def imported_reads(cuda, repeat):
    from pygpu import ipc
    from pygpu.compiler import SourceModule

    f = SourceModule(READ_KERNEL).get_function("readsum")
    sms = cuda.Context.get_device().get_attribute(cuda.device_attribute.MULTIPROCESSOR_COUNT)
    seed = 3
    x = np.random.default_rng(seed).standard_normal(READ_BYTES // 8)
    want = x.sum()
    local = cuda.to_device(x)
    ctx = multiprocessing.get_context("spawn")
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=_exporter, args=(child, READ_BYTES, seed))
    proc.start()
    try:
        mem_handle, pool_handle, ptr_data = parent.recv()
        ipc_mem = cuda.IPCMemoryHandle(mem_handle)
        pool = ipc.import_pool(pool_handle)
        pooled = pool.import_pointer(ptr_data)
        out = cuda.mem_alloc(8)
        res = {}
        for name, buf in (("local", local), ("IPC handle", ipc_mem), ("pool import", pooled)):
            n4 = READ_BYTES // 32
            start, stop = cuda.Event(), cuda.Event()
            times = []
            for k in range(repeat + 1):
                cuda.memset_d8(out, 0, 8)
                start.record()
                f(buf, np.int64(n4), out, block=(256, 1, 1), grid=(sms * 8, 1))
                stop.record()
                stop.synchronize()
                if k:
                    times.append(stop.time_since(start) / 1e3)
            got = cuda.from_device(out, 1, np.float64)[0]
            assert abs(got - want) <= 1e-6 * np.abs(x).sum(), "%s: sum %r, want %r" % (
                name,
                got,
                want,
            )
            res[name] = READ_BYTES / median(times) / 1e9
        ipc_mem.close()
        pooled.free()
        cuda.Context.synchronize()
        parent.send("done")
    finally:
        proc.join(60)
    return res


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", help="write the figures here")
    ap.add_argument("--quick", action="store_true", help="fewer repeats")
    a = ap.parse_args(argv)
    repeat = 5 if a.quick else 20
    import pygpu.driver as cuda

    cuda.init()
    ndev = cuda.Device.count()
    names = [cuda.Device(i).name() for i in range(ndev)]
    print("devices: %s" % ", ".join(names))
    if ndev < 2:
        sys.exit("benchmarks/multi_gpu.py needs 2 GPUs, %d visible" % ndev)
    c0 = cuda.Device(0).retain_primary_context()
    c0.push()
    rows, results = [], {"devices": names}
    floor = peer_floor(repeat)
    ours = peer_pygpu(cuda, repeat)
    results["peer"] = {"floor": floor, "pygpu": {str(k): v for k, v in ours.items()}}
    for size in PEER_SIZES:
        fl = floor["sizes"][str(size)]
        for kind in ("blocking_s", "async_s"):
            gb_f = size / fl[kind] / 1e9
            gb_p = size / ours[size][kind] / 1e9
            rows.append(
                (
                    "memcpy_peer%s %d MiB"
                    % (" + sync" if kind == "blocking_s" else "_async", size >> 20),
                    "%.1f GB/s" % gb_p,
                    "%.1f GB/s" % gb_f,
                    "%.3f of the floor" % (gb_p / gb_f),
                )
            )
    t1, t2 = ls_one_process(cuda)
    results["lombscargle_one_process"] = {"1gpu_s": t1, "2gpu_s": t2}
    rows.append(
        (
            "Lomb-Scargle 2^10 x 2^24, one process",
            "2 GPUs %.1f ms" % (t2 * 1e3),
            "1 GPU %.1f ms" % (t1 * 1e3),
            "%.2fx" % (t1 / t2),
        )
    )
    if mpiexec() is None:
        rows.append(("Lomb-Scargle with MPI", "-", "-", "no mpiexec: skipped"))
    else:
        m1, m2 = ls_mpi(1), ls_mpi(2)
        results["lombscargle_mpi"] = {"1rank_s": m1, "2ranks_s": m2}
        rows.append(
            (
                "Lomb-Scargle 2^10 x 2^24, MPI",
                "2 ranks %.1f ms" % (m2 * 1e3),
                "1 rank %.1f ms" % (m1 * 1e3),
                "%.2fx" % (m1 / m2),
            )
        )
    reads = imported_reads(cuda, repeat)
    results["imported_read_gbps"] = reads
    for name in ("IPC handle", "pool import"):
        rows.append(
            (
                "kernel read of 1 GiB, %s" % name,
                "%.0f GB/s" % reads[name],
                "local %.0f GB/s" % reads["local"],
                "%.3f of local" % (reads[name] / reads["local"]),
            )
        )
    cuda.Context.pop()
    w = [max(len(r[i]) for r in rows + [("what", "pygpu", "reference", "ratio")]) for i in range(4)]
    for r in [("what", "pygpu", "reference", "ratio")] + rows:
        print("  ".join(c.ljust(w[i]) for i, c in enumerate(r)))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
