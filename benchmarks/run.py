"""pygpu against the plain-C driver floor and its peers, in one run.

    python3 benchmarks/run.py [--json results.json] [--no-goals]

Builds floor.c (the same work straight on the driver API and NVRTC), runs
it, then measures pygpu and each installed peer (CuPy RawKernel/RawModule,
cuda.core, PyCUDA) in this process, and prints one table of figures and
ratios.  Then issue 27's goals (benchmarks/goals.py), each against a floor
measured in this run, marked MET / NOT MET, under the GPU's name, driver
and clocks (--no-goals leaves them out).  Without a GPU it says so and
exits 0.  The method is in docs/benchmarks.md.
"""

import argparse
import functools
import json
import os
import platform
import statistics
import subprocess
import sys
import time

import numpy as np

import goals  # benchmarks/goals.py: issue 27's goals against same-run floors
import inproc  # benchmarks/inproc.py: the C compile floor in this process

HERE = os.path.dirname(os.path.abspath(__file__))
ARGS3 = 'extern "C" __global__ void args3(float *p, int n, float a) { if (n < 0) p[0] = a; }\n'
EMPTY = 'extern "C" __global__ void empty() { }\n'
SAXPY = (
    'extern "C" __global__ void saxpy(float a, const float *x, float *y, int n)\n'
    '{ int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] = a * x[i] + y[i]; }\n'
)
ADD = (
    'extern "C" __global__ void add(const float4 *x, const float4 *y, float4 *z, int n4)\n'
    '{ int i = blockIdx.x * blockDim.x + threadIdx.x;\n'
    '  if (i < n4) { float4 a = x[i], b = y[i];\n'
    '    z[i] = make_float4(a.x + b.x, a.y + b.y, a.z + b.z, a.w + b.w); } }\n'
)
BURST, BURSTS = 500, 20
LAUNCH_ROUNDS = 300  # rounds of the interleaved launch rows (paired; ~8 s)
# the Lomb-Scargle kernel of examples/lombscargle.py at the size
# ../shared/PERFORMANCE.md measured (2^10 samples, 2^20 frequencies, blocks
# of 128, SMs x 20 blocks), compiled with the same options by every peer and
# the C floor: float64 with __launch_bounds__, float32 with fast math too
LS_NX, LS_NF = 1 << 10, 1 << 20
LS_OPTIONS = {
    np.float64: ["-DLOMBSCARGLE_BOUNDS=128"],
    np.float32: ["-DLOMBSCARGLE_BOUNDS=128", "-use_fast_math"],
}
LS_TOLERANCE = {np.float64: 1e-9, np.float32: 2e-2}  # max error / max |SciPy|
LS_CHECKED = 4096  # frequencies checked against SciPy (all of them: 50 s)
LS_KEY = {np.float64: "lombscargle64_ms", np.float32: "lombscargle_ms"}
_ls_cache = {}


def ls_source():
    with open(os.path.join(HERE, "..", "kernels", "lombscargle.cu")) as f:
        return f.read()


def ls_data():
    if "data" not in _ls_cache:
        rng = np.random.default_rng(1)
        x = np.sort(rng.uniform(0, 20 * np.pi, LS_NX))
        y = 2 * np.sin(1.7 * x) + np.cos(0.3 * x) + 0.5 * rng.standard_normal(LS_NX)
        freqs = np.linspace(0.05, 5.0, LS_NF)
        _ls_cache["data"] = (x, y, freqs)
    return _ls_cache["data"]


def ls_check(pgram, dtype, who):
    """Compare LS_CHECKED random frequencies of a periodogram with SciPy's
    float64 result; raise if off.  SciPy's time for the whole periodogram is
    estimated from the subset (all of it takes about a minute)."""
    from scipy import signal

    x, y, freqs = ls_data()
    if "want" not in _ls_cache:
        idx = np.sort(np.random.default_rng(2).choice(LS_NF, LS_CHECKED, replace=False))
        t = time.perf_counter()
        want = signal.lombscargle(x, y, freqs[idx])
        _ls_cache["scipy_ms"] = (time.perf_counter() - t) * 1e3 * LS_NF / LS_CHECKED
        _ls_cache["want"] = (idx, want)
    idx, want = _ls_cache["want"]
    got = np.asarray(pgram, np.float64)[idx]
    err = np.max(np.abs(got - want)) / np.max(np.abs(want))
    if not err <= LS_TOLERANCE[dtype]:
        raise AssertionError(
            "%s: Lomb-Scargle %s result off by %g (tolerance %g)"
            % (who, np.dtype(dtype).name, err, LS_TOLERANCE[dtype])
        )
    _ls_cache.setdefault("errors", {})[(who, np.dtype(dtype).name)] = err
    return _ls_cache["scipy_ms"]


def cuda_include():
    for r in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if r and os.path.exists(os.path.join(r, "include", "cuda.h")):
            return r
    return "/usr/local/cuda"


def run_floor():
    root = cuda_include()
    build = os.path.join(HERE, "build")
    os.makedirs(build, exist_ok=True)
    exe = os.path.join(build, "floor")
    libdirs = [os.path.join(root, "lib64"), os.path.join(root, "lib64", "stubs")]
    cmd = [
        "cc",
        "-O2",
        "-o",
        exe,
        os.path.join(HERE, "floor.c"),
        "-I" + os.path.join(root, "include"),
    ]
    cmd += ["-L" + d for d in libdirs] + ["-lcuda", "-lnvrtc", "-Wl,-rpath," + libdirs[0]]
    subprocess.run(cmd, check=True)
    data, out = os.path.join(build, "ls_data.bin"), os.path.join(build, "ls_out.bin")
    with open(data, "wb") as f:
        for a in ls_data():
            f.write(np.ascontiguousarray(a, np.float64).tobytes())
    src = os.path.join(HERE, "..", "kernels", "lombscargle.cu")
    res = json.loads(
        subprocess.run(
            [exe, src, data, str(LS_NX), str(LS_NF), out],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
    )
    raw = np.fromfile(out, np.uint8)
    for dtype, lo, hi in ((np.float64, 0, 8 * LS_NF), (np.float32, 8 * LS_NF, 12 * LS_NF)):
        try:
            ls_check(raw[lo:hi].view(dtype), dtype, "C floor")
        except ImportError:
            pass
    return res


@functools.lru_cache(maxsize=None)
def build_inproc_floor():
    """floor_inproc.c as a shared library (ctypes), or None if it fails."""
    import ctypes

    root = cuda_include()
    build = os.path.join(HERE, "build")
    os.makedirs(build, exist_ok=True)
    so = os.path.join(build, "floor_inproc.so")
    libdirs = [os.path.join(root, "lib64"), os.path.join(root, "lib64", "stubs")]
    cmd = (
        [
            "cc",
            "-O2",
            "-shared",
            "-fPIC",
            "-o",
            so,
            os.path.join(HERE, "floor_inproc.c"),
            "-I" + os.path.join(root, "include"),
        ]
        + ["-L" + d for d in libdirs]
        + ["-lcuda"]
    )
    subprocess.run(cmd, check=True)
    lib = ctypes.CDLL(so)
    for fn in (lib.launch_burst, lib.launch_burst_ex):
        fn.restype = ctypes.c_double
        fn.argtypes = [
            ctypes.c_void_p,
            ctypes.c_ulonglong,
            ctypes.c_int,
            ctypes.c_float,
            ctypes.c_int,
        ]
    return lib


@functools.lru_cache(maxsize=None)
def build_least_binding():
    """least_binding.c as an extension module of this interpreter, or None."""
    import importlib.util
    import sysconfig

    root = cuda_include()
    build = os.path.join(HERE, "build")
    os.makedirs(build, exist_ok=True)
    so = os.path.join(build, "least_binding" + sysconfig.get_config_var("EXT_SUFFIX"))
    libdirs = [os.path.join(root, "lib64"), os.path.join(root, "lib64", "stubs")]
    r = subprocess.run(
        [
            "cc",
            "-O2",
            "-shared",
            "-fPIC",
            "-o",
            so,
            os.path.join(HERE, "least_binding.c"),
            "-I" + sysconfig.get_paths()["include"],
            "-I" + os.path.join(root, "include"),
        ]
        + ["-L" + d for d in libdirs]
        + ["-lcuda"],
        capture_output=True,
        text=True,
    )
    if r.returncode != 0:
        print("least_binding.c did not build:\n" + r.stderr, file=sys.stderr)
        return None
    spec = importlib.util.spec_from_file_location("least_binding", so)
    try:
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
    except ImportError as e:  # no libcuda.so.1 here
        print("least_binding: %s" % e, file=sys.stderr)
        return None
    return mod


def interleaved(fns, n=BURST, reps=BURSTS, sync=None, paired=None):
    """Median us per call of each fn(count) -> seconds, bursts interleaved.
    With paired (a key of fns), also the median over rounds of each fn's
    difference from that fn in the same round: the machine's drift from
    round to round (it moved the C loop by 0.3 us within one run) then
    cancels instead of adding noise."""
    times = {k: [] for k in fns}
    order = list(fns)
    for k, fn in fns.items():
        fn(n)
    if sync:
        sync()
    for r in range(reps):
        # each round starts at another row: no row always follows the same one
        for k in order[r % len(order) :] + order[: r % len(order)]:
            times[k].append(fns[k](n) / n * 1e6)
            if sync:
                sync()
    med = {k: statistics.median(v) for k, v in times.items()}
    if paired is None:
        return med
    diff = {k: statistics.median(a - b for a, b in zip(v, times[paired])) for k, v in times.items()}
    return med, diff


def timed_loop(call):
    def run(count):
        t = time.perf_counter()
        for _ in range(count):
            call()
        return time.perf_counter() - t

    return run


def stmt_loop(stmt, **names):
    """run(count) -> seconds for count executions of the statement, written
    inline in the loop as a user writes it (no lambda between: timeit's way)."""
    src = (
        "def run(count):\n    t = _pc()\n    for _ in range(count):\n        %s\n"
        "    return _pc() - t\n" % stmt
    )
    g = dict(names, _pc=time.perf_counter)
    exec(src, g)
    return g["run"]


def burst(fn, n=BURST, reps=BURSTS, sync=None, ns=None):
    """Median over reps of (wall time of n calls) / n, in microseconds.  fn is
    a callable, or a statement (with its names in ns) written inline in the
    timed loop, as the launch rows are for every binding."""
    run = stmt_loop(fn, **ns) if isinstance(fn, str) else timed_loop(fn)
    run(n)
    if sync:
        sync()
    v = []
    for _ in range(reps):
        v.append(run(n) / n * 1e6)
        if sync:
            sync()
    return statistics.median(v)


def bandwidth(fn, nbytes, sync, reps=5, factor=1):
    fn()
    sync()
    v = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        sync()
        v.append(factor * nbytes / (time.perf_counter() - t) / 1e9)
    return statistics.median(v)


def median_ms(fn, reps=7):
    v = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        v.append((time.perf_counter() - t) * 1e3)
    return statistics.median(v)


def launch_rows(cuda, f, fp, d, bound):
    """pygpu's launch rows, each paired with the C loop burst for burst in
    one interleaved group: f.__call__, NumPy-scalar arguments, configure()d,
    prepared_call (fp: prepared "Pif"), the least possible binding, and the
    interpreter's own share of each statement."""
    r = {}
    sync = cuda.Context.synchronize
    block, grid = (32, 1, 1), (1, 1)
    lib = build_inproc_floor()
    null = cuda._driver._null_call
    ns = dict(
        f=f,
        fp=fp,
        d=d,
        block=block,
        grid=grid,
        bound=bound,
        null=null,
        n=np.int32(1000),
        a=np.float32(2.0),
    )
    fns = {
        "floor": lambda count: lib.launch_burst(f.handle, int(d), 1000, 2.0, count),
        "launch_enqueue_us": stmt_loop("f(d, 1000, 2.0, block=block, grid=grid)", **ns),
        # the peers' statement: NumPy scalars, as CuPy, cuda.core and PyCUDA need
        "launch_numpy_us": stmt_loop("f(d, n, a, block=block, grid=grid)", **ns),
        "launch_bound_us": stmt_loop("bound(d, 1000, 2.0)", **ns),
        "launch_prepared_us": stmt_loop("fp.prepared_call(grid, block, d, 1000, 2.0)", **ns),
        # the interpreter's share: the same statements calling a C function
        # that does nothing
        "null_call_us": stmt_loop("null(d, 1000, 2.0, block=block, grid=grid)", **ns),
        "null_bound_us": stmt_loop("null(d, 1000, 2.0)", **ns),
        "null_prepared_us": stmt_loop("null(grid, block, d, 1000, 2.0)", **ns),
    }
    least = build_least_binding()
    if least is not None:
        # the least any binding can do: no checks, four positional ints/floats
        fns["launch_least_us"] = stmt_loop(
            "least(h, p, 1000, 2.0)", least=least.raw, h=f.handle, p=int(d)
        )
        fns["launch_least_ex_us"] = stmt_loop(
            "least(h, p, 1000, 2.0)", least=least.raw_ex, h=f.handle, p=int(d)
        )
    # the C loop through cuLaunchKernelEx, pygpu's entry point (the floor
    # stays the cuLaunchKernel loop; this shows what the entry point gives)
    fns["floor_ex"] = lambda count: lib.launch_burst_ex(f.handle, int(d), 1000, 2.0, count)
    m, dm = interleaved(fns, reps=LAUNCH_ROUNDS, sync=sync, paired="floor")
    # each launch row: the floor's median plus the median of the per-round
    # differences (its own median is kept beside it)
    r["launch_enqueue_us"] = m["floor"] + dm["launch_enqueue_us"]
    r["launch_numpy_us"] = m["floor"] + dm["launch_numpy_us"]
    r["launch_bound_us"] = m["floor"] + dm["launch_bound_us"]
    for k in ("launch_least_us", "launch_least_ex_us"):
        if k in dm:
            r[k] = m["floor"] + dm[k]
    r["floor_ex_us"] = m["floor"] + dm["floor_ex"]
    r["launch_prepared_us"] = m["floor"] + dm["launch_prepared_us"]
    r["launch_unpaired_us"] = {
        k: m[k] for k in ("launch_enqueue_us", "launch_bound_us", "launch_prepared_us")
    }
    r["floor_inproc_us"] = m["floor"]
    r["null_us"] = {
        "launch_enqueue_us": m["null_call_us"],
        "launch_bound_us": m["null_bound_us"],
        "launch_prepared_us": m["null_prepared_us"],
    }
    return r


class guard:
    """with guard(errors, name): a block whose failure (an Exception) is
    recorded in errors[name] and said on stderr instead of ending the run;
    the rows it would have filled are left out of the table."""

    def __init__(self, errors, name):
        self.errors, self.name = errors, name

    def __enter__(self):
        return self

    def __exit__(self, et, e, tb):
        if et is None or not issubclass(et, Exception):
            return False
        lines = [ln for ln in str(e).strip().splitlines() if ln.strip()]
        self.errors[self.name] = "%s: %s" % (et.__name__, (lines[0] if lines else "")[:200])
        print(
            "run.py: %s not measured: %s" % (self.name, self.errors[self.name]),
            file=sys.stderr,
            flush=True,
        )
        return True


def measure_pygpu():
    import pygpu.autoinit  # noqa: F401
    import pygpu.driver as cuda
    from pygpu import compiler
    from pygpu.compiler import SourceModule

    r = {}
    errors = r["errors"] = {}  # a block that fails: its name and why
    sync = cuda.Context.synchronize
    mod = SourceModule(ARGS3 + EMPTY, no_extern_c=True)
    f, e = mod.get_function("args3"), mod.get_function("empty")
    d = cuda.mem_alloc(1 << 20)
    block, grid = (32, 1, 1), (1, 1)
    bound = f.configure(grid, block)
    # prepared_call's kernel: the same code in a module of its own (prepare()
    # changes how its Function packs, and get_function returns one Function
    # a name), so every launch row is timed in one interleaved group
    fp = SourceModule(ARGS3 + EMPTY + "// prepared\n", no_extern_c=True).get_function("args3")
    fp.prepare("Pif")
    with guard(errors, "launch rows"):
        r.update(launch_rows(cuda, f, fp, d, bound))
        r["launch_throughput_us"] = burst(
            "e(block=block, grid=grid)", n=20000, reps=5, sync=sync, ns=locals()
        )

        def rt():
            f(d, 1000, 2.0, block=block, grid=grid)
            sync()

        r["round_trip_us"] = burst(rt, n=200)
        r["alloc_free_us"] = burst(lambda: cuda.mem_alloc(1 << 20).free(), n=1000)

    with guard(errors, "transfers"):
        big = 256 << 20
        db, db2 = cuda.mem_alloc(big), cuda.mem_alloc(big)
        pinned = cuda.pagelocked_empty(big, np.uint8)
        pinned[:] = 1
        pageable = np.ones(big, np.uint8)
        r["htod_pinned_gbs"] = bandwidth(lambda: cuda.memcpy_htod(db, pinned), big, sync)
        r["dtoh_pinned_gbs"] = bandwidth(lambda: cuda.memcpy_dtoh(pinned, db), big, sync)
        r["htod_pageable_gbs"] = bandwidth(lambda: cuda.memcpy_htod(db, pageable), big, sync)
        r["dtoh_pageable_gbs"] = bandwidth(lambda: cuda.memcpy_dtoh(pageable, db), big, sync)
        r["dtod_gbs"] = bandwidth(lambda: cuda.memcpy_dtod(db2, db, big), big, sync, factor=2)
    with guard(errors, "staging sweep"):
        # where staging pays: the same copies with staging off (the plain
        # driver call) and on, from 1 MiB to 256 MiB
        from pygpu import _driver

        sweep = {}
        for mib in (1, 2, 4, 8, 16, 64, 256):
            nb = mib << 20
            row = {}
            for label, threshold in (("plain", 0), ("staged", 1)):
                old = _driver._set_staging(threshold, 6, 4 << 20)
                try:
                    row[label + "_htod"] = bandwidth(
                        lambda: cuda.memcpy_htod(db, pageable[:nb]), nb, sync
                    )
                    row[label + "_dtoh"] = bandwidth(
                        lambda: cuda.memcpy_dtoh(pageable[:nb], db), nb, sync
                    )
                finally:
                    _driver._set_staging(*old)
            sweep[mib] = row
        r["staging_sweep"] = sweep
        del db, db2, pinned, pageable

    with guard(errors, "compile"):
        # the C NVRTC call in this process, against the NVRTC file pygpu
        # loaded, rounds alternating with pygpu's (paired, as the launch rows)
        tools, _, _ = inproc.build_tools(cuda_include())
        arch_opt = ("-arch=" + compiler.compile(SAXPY).arch).encode()

        def c_once():
            t = tools.nvrtc_cubin_once(SAXPY.encode(), arch_opt)
            assert t > 0, "the C NVRTC compile failed"
            return t

        def py_once():
            t = time.perf_counter()
            compiler.compile(SAXPY, cache_dir=False)
            return time.perf_counter() - t

        c_s, py_s = inproc.paired(c_once, py_once, rounds=7)
        r["compile_ms"], r["compile_floor_inproc_ms"] = py_s * 1e3, c_s * 1e3
        SourceModule(SAXPY, no_extern_c=True)
        r["cache_hit_ms"] = (
            burst(
                "SourceModule(SAXPY, no_extern_c=True)",
                n=1000,
                reps=21,
                ns=dict(SourceModule=SourceModule, SAXPY=SAXPY),
            )
            / 1e3
        )
        binary = compiler.compile(SAXPY)
        r["module_load_ms"] = median_ms(lambda: cuda.module_from_buffer(binary), reps=21)

    with guard(errors, "disk-cache hit"):
        # disk-cache hit in a new process: the compile() call itself, timed in
        # that process (after its interpreter and pygpu are up)
        env = dict(os.environ)
        code = (
            "import time, pygpu.compiler as c; t = time.perf_counter(); "
            "b = c.compile(%r, arch=%r); print((time.perf_counter() - t) * 1e3, "
            "c.cache_info()['disk_hits'])" % (SAXPY, binary.arch)
        )
        subprocess.run([sys.executable, "-c", code], env=env, check=True, capture_output=True)
        hits = []
        for _ in range(7):
            out = subprocess.run(
                [sys.executable, "-c", code], env=env, check=True, capture_output=True, text=True
            ).stdout.split()
            assert out[1] == "1", "expected a disk hit"
            hits.append(float(out[0]))
        r["disk_hit_ms"] = statistics.median(hits)

    with guard(errors, "import"):
        # what `import pygpu` adds to a process that already imported NumPy
        code = (
            "import time, numpy; t = time.perf_counter(); import pygpu, pygpu.driver; "
            "print((time.perf_counter() - t) * 1e3)"
        )
        r["import_ms"] = statistics.median(
            float(
                subprocess.run(
                    [sys.executable, "-c", code], check=True, capture_output=True, text=True
                ).stdout
            )
            for _ in range(7)
        )

    with guard(errors, "x + y"):
        n = 10_000_000
        add = SourceModule(ADD, no_extern_c=True).get_function("add")
        x = cuda.to_device(np.random.default_rng().standard_normal(n).astype(np.float32))
        y = cuda.to_device(np.random.default_rng().standard_normal(n).astype(np.float32))
        z = cuda.mem_alloc(4 * n)
        n4 = n // 4
        g = ((n4 + 255) // 256, 1)
        ev0, ev1 = cuda.Event(), cuda.Event()
        for _ in range(3):
            add(x, y, z, n4, block=(256, 1, 1), grid=g)
        times = []
        for _ in range(50):
            ev0.record()
            add(x, y, z, n4, block=(256, 1, 1), grid=g)
            ev1.record()
            ev1.synchronize()
            times.append(ev1.time_since(ev0) * 1e3)
        r["add_10m_us"] = statistics.median(times)
        zz = cuda.from_device(z, (n,), np.float32)
        assert np.array_equal(
            zz, cuda.from_device(x, (n,), np.float32) + cuda.from_device(y, (n,), np.float32)
        )

    with guard(errors, "Lomb-Scargle"):
        sms = cuda.Context.get_device().get_attribute(cuda.device_attribute.MULTIPROCESSOR_COUNT)
        for dtype in (np.float64, np.float32):
            ls = SourceModule(
                ls_source(), options=LS_OPTIONS[dtype], no_extern_c=True
            ).get_function("lombscargle_" + np.dtype(dtype).name)
            lx, ly, lf = (cuda.to_device(v.astype(dtype)) for v in ls_data())
            lp = cuda.mem_alloc(np.dtype(dtype).itemsize * LS_NF)
            r[LS_KEY[dtype]] = event_median_ms(
                lambda: ls(
                    LS_NX, LS_NF, lx, ly, lf, lp, dtype(0), block=(128, 1, 1), grid=(sms * 20, 1)
                ),
                cuda.Event,
            )
            try:
                r["scipy_lombscargle_ms"] = ls_check(
                    cuda.from_device(lp, LS_NF, dtype), dtype, "pygpu"
                )
            except ImportError:
                pass
    return r


def event_median_ms(fn, event, reps=15, stream=None):
    """Median GPU time of fn() in ms, by events of the given class recorded
    on stream (pygpu's events take any stream with __cuda_stream__)."""
    for _ in range(2):
        fn()
    a, b = event(), event()
    times = []
    for _ in range(reps):
        a.record(stream)
        fn()
        b.record(stream)
        b.synchronize()
        times.append(b.time_since(a))
    return statistics.median(times)


def measure_cupy():
    try:
        import cupy as cp
    except ImportError:
        return None
    r = {}
    mod = cp.RawModule(code=ARGS3 + EMPTY)
    f, e = mod.get_function("args3"), mod.get_function("empty")
    d = cp.empty(1 << 18, cp.float32)
    sync = cp.cuda.Device().synchronize
    n, a = np.int32(1000), np.float32(2.0)
    r["launch_enqueue_us"] = burst("f((1,), (32,), (d, n, a))", sync=sync, ns=locals())
    r["launch_throughput_us"] = burst("e((1,), (32,), ())", n=20000, reps=5, sync=sync, ns=locals())

    def rt():
        f((1,), (32,), (d, n, a))
        sync()

    r["round_trip_us"] = burst(rt, n=200)
    r["compile_ms"] = median_ms(
        lambda: cp.RawModule(code=SAXPY + "// %f\n" % time.time()).get_function("saxpy")
    )
    cp.RawModule(code=SAXPY).get_function("saxpy")
    r["cache_hit_ms"] = (
        burst(
            'cp.RawModule(code=SAXPY).get_function("saxpy")',
            n=1000,
            reps=21,
            ns=dict(cp=cp, SAXPY=SAXPY),
        )
        / 1e3
    )
    big = 256 << 20
    pageable = np.ones(big, np.uint8)
    db = cp.empty(big, cp.uint8)
    r["htod_pageable_gbs"] = bandwidth(lambda: db.set(pageable), big, sync)
    r["dtoh_pageable_gbs"] = bandwidth(lambda: db.get(out=pageable), big, sync)
    del db
    n = 10_000_000
    x = cp.random.standard_normal(n, dtype=cp.float32)
    y = cp.random.standard_normal(n, dtype=cp.float32)
    for _ in range(3):
        x + y
    s, t = cp.cuda.Event(), cp.cuda.Event()
    times = []
    for _ in range(50):
        s.record()
        x + y
        t.record()
        t.synchronize()
        times.append(cp.cuda.get_elapsed_time(s, t) * 1e3)
    r["add_10m_us"] = statistics.median(times)

    sms = cp.cuda.Device().attributes["MultiProcessorCount"]
    for dtype in (np.float64, np.float32):
        ls = cp.RawModule(code=ls_source(), options=tuple(LS_OPTIONS[dtype])).get_function(
            "lombscargle_" + np.dtype(dtype).name
        )
        lx, ly, lf = (cp.asarray(v.astype(dtype)) for v in ls_data())
        lp = cp.empty(LS_NF, dtype)
        args = (np.int32(LS_NX), np.int32(LS_NF), lx, ly, lf, lp, dtype(0))
        for _ in range(2):
            ls((sms * 20,), (128,), args)
        times = []
        for _ in range(15):
            s.record()
            ls((sms * 20,), (128,), args)
            t.record()
            t.synchronize()
            times.append(cp.cuda.get_elapsed_time(s, t))
        r[LS_KEY[dtype]] = statistics.median(times)
        try:
            ls_check(lp.get(), dtype, "CuPy")
        except ImportError:
            pass
    return r


def measure_cuda_core():
    try:
        try:
            from cuda.core import Device, LaunchConfig, Program, ProgramOptions, launch
        except ImportError:
            from cuda.core.experimental import Device, LaunchConfig, Program, ProgramOptions, launch
    except ImportError:
        return None
    r = {}
    dev = Device()
    dev.set_current()
    stream = dev.create_stream()
    arch = "sm_" + "".join(str(x) for x in dev.compute_capability)
    prog = Program(ARGS3 + EMPTY, code_type="c++", options=ProgramOptions(arch=arch))
    mod = prog.compile("cubin")
    f, e = mod.get_kernel("args3"), mod.get_kernel("empty")
    buf = dev.allocate(1 << 20, stream=stream)
    cfg = LaunchConfig(grid=1, block=32)
    n, a = np.int32(1000), np.float32(2.0)
    sync = stream.sync
    r["launch_enqueue_us"] = burst("launch(stream, cfg, f, buf, n, a)", sync=sync, ns=locals())
    r["launch_throughput_us"] = burst(
        "launch(stream, cfg, e)", n=20000, reps=5, sync=sync, ns=locals()
    )

    def rt():
        launch(stream, cfg, f, buf, n, a)
        sync()

    r["round_trip_us"] = burst(rt, n=200)
    r["compile_ms"] = median_ms(
        lambda: Program(SAXPY, code_type="c++", options=ProgramOptions(arch=arch)).compile("cubin")
    )

    # the Lomb-Scargle kernel, timed with pygpu's events on cuda.core's
    # stream (through __cuda_stream__); CuPy holds the arrays
    import cupy as cp
    import pygpu.driver as cuda

    sms = cp.cuda.Device().attributes["MultiProcessorCount"]
    cfg = LaunchConfig(grid=sms * 20, block=128)
    for dtype in (np.float64, np.float32):
        opts = ProgramOptions(
            arch=arch, define_macro="LOMBSCARGLE_BOUNDS=128", use_fast_math=dtype == np.float32
        )
        k = (
            Program(ls_source(), code_type="c++", options=opts)
            .compile("cubin")
            .get_kernel("lombscargle_" + np.dtype(dtype).name)
        )
        lx, ly, lf = (cp.asarray(v.astype(dtype)) for v in ls_data())
        lp = cp.empty(LS_NF, dtype)
        args = (
            (np.int32(LS_NX), np.int32(LS_NF))
            + tuple(np.uintp(v.data.ptr) for v in (lx, ly, lf, lp))
            + (dtype(0),)
        )
        r[LS_KEY[dtype]] = event_median_ms(
            lambda: launch(stream, cfg, k, *args), cuda.Event, stream=stream
        )
        try:
            ls_check(lp.get(), dtype, "cuda.core")
        except ImportError:
            pass
    return r


def measure_pycuda():
    try:
        import pycuda.autoprimaryctx  # noqa: F401  (the primary context, as the others use)
        import pycuda.driver as drv
        from pycuda.compiler import SourceModule, compile as pycuda_compile
    except ImportError:
        return None
    r = {}
    mod = SourceModule(ARGS3 + EMPTY, no_extern_c=True)
    f, e = mod.get_function("args3"), mod.get_function("empty")
    d = drv.mem_alloc(1 << 20)
    n, a = np.int32(1000), np.float32(2.0)
    sync = drv.Context.synchronize
    r["launch_enqueue_us"] = burst(
        "f(d, n, a, block=(32, 1, 1), grid=(1, 1))", sync=sync, ns=locals()
    )
    fp = mod.get_function("args3")
    fp.prepare("Pif")
    r["launch_prepared_us"] = burst(
        "fp.prepared_call((1, 1), (32, 1, 1), d, n, a)", sync=sync, ns=locals()
    )
    r["launch_throughput_us"] = burst(
        "e(block=(32, 1, 1), grid=(1, 1))", n=20000, reps=5, sync=sync, ns=locals()
    )

    def rt():
        f(d, n, a, block=(32, 1, 1), grid=(1, 1))
        sync()

    r["round_trip_us"] = burst(rt, n=200)
    r["alloc_free_us"] = burst(lambda: drv.mem_alloc(1 << 20).free(), n=1000)

    big = 256 << 20
    db = drv.mem_alloc(big)
    pinned = drv.pagelocked_empty(big, np.uint8)
    pinned[:] = 1
    pageable = np.ones(big, np.uint8)
    r["htod_pinned_gbs"] = bandwidth(lambda: drv.memcpy_htod(db, pinned), big, sync)
    r["dtoh_pinned_gbs"] = bandwidth(lambda: drv.memcpy_dtoh(pinned, db), big, sync)
    r["htod_pageable_gbs"] = bandwidth(lambda: drv.memcpy_htod(db, pageable), big, sync)
    r["dtoh_pageable_gbs"] = bandwidth(lambda: drv.memcpy_dtoh(pageable, db), big, sync)
    del db, pinned, pageable

    # PyCUDA compiles with nvcc in a subprocess; its cache is on disk only
    r["compile_ms"] = median_ms(lambda: pycuda_compile(SAXPY, no_extern_c=True, cache_dir=False))
    SourceModule(SAXPY, no_extern_c=True)
    r["cache_hit_ms"] = median_ms(lambda: SourceModule(SAXPY, no_extern_c=True), reps=21)

    dev = drv.Context.get_device()
    sms = dev.get_attribute(drv.device_attribute.MULTIPROCESSOR_COUNT)
    for dtype in (np.float64, np.float32):
        ls = SourceModule(ls_source(), options=LS_OPTIONS[dtype], no_extern_c=True).get_function(
            "lombscargle_" + np.dtype(dtype).name
        )
        lx, ly, lf = (drv.to_device(v.astype(dtype)) for v in ls_data())
        lp = drv.mem_alloc(np.dtype(dtype).itemsize * LS_NF)
        r[LS_KEY[dtype]] = event_median_ms(
            lambda: ls(
                np.int32(LS_NX),
                np.int32(LS_NF),
                lx,
                ly,
                lf,
                lp,
                dtype(0),
                block=(128, 1, 1),
                grid=(sms * 20, 1),
            ),
            drv.Event,
        )
        try:
            ls_check(drv.from_device(lp, LS_NF, dtype), dtype, "PyCUDA")
        except ImportError:
            pass
    return r


def measure_numba():
    import importlib.util

    if importlib.util.find_spec("numba") is None:
        return None
    from numba import cuda as ncuda  # installed but failing to import: reported

    r = {}

    @ncuda.jit("void(float32[:], int32, float32)")
    def args3(p, n, a):
        if n < 0:
            p[0] = a

    d = ncuda.device_array(1 << 18, np.float32)
    n, a = np.int32(1000), np.float32(2.0)
    sync = ncuda.synchronize
    r["launch_enqueue_us"] = burst("args3[1, 32](d, n, a)", sync=sync, ns=locals())

    def rt():
        args3[1, 32](d, n, a)
        sync()

    r["round_trip_us"] = burst(rt, n=200)
    return r


PEERS = [
    ("cupy", measure_cupy),
    ("cuda.core", measure_cuda_core),
    ("pycuda", measure_pycuda),
    ("numba-cuda", measure_numba),
]

ROWS = [
    # key, label, unit, better ("lower"/"higher"), compare ("diff"/"ratio")
    ("launch_enqueue_us", "launch enqueue, 3 args, __call__", "us", "lower", "diff"),
    ("launch_numpy_us", "the same, NumPy scalar arguments", "us", "lower", "diff"),
    ("launch_prepared_us", "launch enqueue, prepared_call", "us", "lower", "diff"),
    ("launch_bound_us", "launch enqueue, configure()d", "us", "lower", "diff"),
    ("launch_least_us", "launch, least possible binding (no checks)", "us", "lower", "diff"),
    ("launch_least_ex_us", "the same through cuLaunchKernelEx", "us", "lower", "diff"),
    ("launch_throughput_us", "empty kernel, throughput", "us", "lower", "diff"),
    ("round_trip_us", "launch + synchronize", "us", "lower", "diff"),
    ("alloc_free_us", "mem_alloc + free, 1 MiB", "us", "lower", "diff"),
    ("htod_pinned_gbs", "H->D pinned, 256 MiB", "GB/s", "higher", "ratio"),
    ("dtoh_pinned_gbs", "D->H pinned, 256 MiB", "GB/s", "higher", "ratio"),
    ("htod_pageable_gbs", "H->D pageable, 256 MiB", "GB/s", "higher", "ratio"),
    ("dtoh_pageable_gbs", "D->H pageable, 256 MiB", "GB/s", "higher", "ratio"),
    ("dtod_gbs", "D->D copy (read+write)", "GB/s", "higher", "ratio"),
    ("compile_ms", "compile saxpy -> cubin (PyCUDA: nvcc)", "ms", "lower", "ratio"),
    ("module_load_ms", "module load from cubin", "ms", "lower", "ratio"),
    ("cache_hit_ms", "same SourceModule again, in-process", "ms", "lower", "ratio"),
    ("disk_hit_ms", "disk-cache hit in a new process", "ms", "lower", "ratio"),
    ("add_10m_us", "x + y, 10M float32 (kernel time)", "us", "lower", "ratio"),
    ("lombscargle64_ms", "Lomb-Scargle f64, 2^10 x 2^20 (kernel)", "ms", "lower", "ratio"),
    ("lombscargle_ms", "Lomb-Scargle f32 fast math (kernel)", "ms", "lower", "ratio"),
    ("import_ms", "import pygpu, beyond NumPy", "ms", "lower", "ratio"),
]


def fmt(v):
    if v is None:
        return "-"
    if abs(v) >= 100:
        return "%.0f" % v
    if abs(v) >= 10:
        return "%.1f" % v
    if abs(v) >= 0.1:
        return "%.2f" % v
    return "%.4f" % v


def launch_only(times, json_path):
    """The launch rows alone, measured again and again in one process: how
    much they move from one measurement to the next."""
    import pygpu.autoinit  # noqa: F401
    import pygpu.driver as cuda
    from pygpu.compiler import SourceModule

    mod = SourceModule(ARGS3 + EMPTY, no_extern_c=True)
    f = mod.get_function("args3")
    fp = SourceModule(ARGS3 + EMPTY + "// prepared\n", no_extern_c=True).get_function("args3")
    fp.prepare("Pif")
    d = cuda.mem_alloc(1 << 20)
    bound = f.configure((1, 1), (32, 1, 1))
    keys = [
        ("launch_enqueue_us", "__call__"),
        ("launch_numpy_us", "NumPy scalars"),
        ("launch_prepared_us", "prepared_call"),
        ("launch_bound_us", "configure()d"),
        ("launch_least_us", "least binding"),
        ("launch_least_ex_us", "least via Ex"),
        ("floor_ex_us", "C loop via Ex"),
    ]
    runs = []
    print(
        "us over the C cuLaunchKernel loop, %d rounds each (%s)"
        % (LAUNCH_ROUNDS, cuda.Device(0).name())
    )
    print("| run | floor us | " + " | ".join(k[1] for k in keys) + " |")
    print("|---|---|" + "---|" * len(keys))
    for i in range(times):
        r = launch_rows(cuda, f, fp, d, bound)
        runs.append(r)
        fl = r["floor_inproc_us"]
        print(
            "| %d | %.3f | " % (i + 1, fl)
            + " | ".join("%+.3f" % (r[k] - fl) if k in r else "-" for k, _ in keys)
            + " |",
            flush=True,
        )
    med = {
        k: statistics.median(r[k] - r["floor_inproc_us"] for r in runs)
        for k, _ in keys
        if k in runs[0]
    }
    print(
        "| median | %.3f | " % statistics.median(r["floor_inproc_us"] for r in runs)
        + " | ".join("%+.3f" % med[k] if k in med else "-" for k, _ in keys)
        + " |"
    )
    if json_path:
        with open(json_path, "w") as fh:
            json.dump({"runs": runs, "median_over_floor": med}, fh, indent=1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", help="write all figures here")
    ap.add_argument(
        "--launch-only",
        type=int,
        metavar="N",
        help="only the launch rows, measured N times in this process",
    )
    ap.add_argument(
        "--no-goals", action="store_true", help="leave out issue 27's goals (benchmarks/goals.py)"
    )
    args = ap.parse_args()
    reason = goals.gpu_reason()
    if reason is not None:
        print("benchmarks/run.py: nothing measured: this machine has no usable GPU (%s)" % reason)
        return 0
    if args.launch_only:
        return launch_only(args.launch_only, args.json)
    notes = []
    try:
        results = {"floor": run_floor()}
    except Exception as e:  # said, not fatal: the rows show no floor
        results = {"floor": {}}
        notes.append(
            "C floor (floor.c): not measured (%s: %s)"
            % (type(e).__name__, (str(e).strip().splitlines() or [""])[-1][:160])
        )
    results["pygpu"] = measure_pygpu()
    for name, why in results["pygpu"].get("errors", {}).items():
        notes.append("pygpu, %s: not measured (%s)" % (name, why))
    for name, fn in PEERS:
        try:
            results[name] = fn()
            if results[name] is None:
                notes.append("%s: not installed" % name)
        except Exception as e:  # a peer that breaks is reported, not fatal
            msg = (str(e).strip().splitlines() or [""])[-1][:160]
            notes.append("%s: not measured (%s: %s)" % (name, type(e).__name__, msg))
            results[name] = None
    import pygpu.driver as cuda

    dev = cuda.Device(0)
    from importlib import metadata

    versions = {}
    for p, dist in (
        ("cupy", None),
        ("cuda.core", "cuda-core"),
        ("pycuda", "pycuda"),
        ("numba-cuda", "numba-cuda"),
        ("scipy", "scipy"),
    ):
        names = [dist] if dist else [d for d in ("cupy-cuda13x", "cupy-cuda12x", "cupy")]
        for n in names:
            try:
                versions[p] = metadata.version(n)
                break
            except metadata.PackageNotFoundError:
                pass
    v = cuda.get_driver_version()
    results["meta"] = {
        "gpu": dev.name(),
        "driver": v,
        "driver_cuda": "%d.%d" % (v // 1000, v % 1000 // 10),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "versions": versions,
        "date": time.strftime("%Y-%m-%d"),
    }
    peers = [p for p, _ in PEERS if results.get(p)]
    head = ["what", "unit", "C floor", "pygpu", "pygpu vs floor"] + peers
    rows = []
    for key, label, unit, better, cmp in ROWS:
        fl = results["floor"].get(key)
        if key in (
            "launch_enqueue_us",
            "launch_numpy_us",
            "launch_bound_us",
            "launch_prepared_us",
            "launch_least_us",
            "launch_least_ex_us",
        ):
            fl = results["pygpu"].get("floor_inproc_us")  # same process, interleaved
        elif key == "compile_ms" and "compile_floor_inproc_ms" in results["pygpu"]:
            fl = results["pygpu"]["compile_floor_inproc_ms"]  # same process, paired
        pg = results["pygpu"].get(key)
        if pg is None:
            continue
        if fl is None:
            rel = "-"
        elif cmp == "diff" and key in results["pygpu"].get("null_us", {}):
            # the interpreter's own cost of the statement, apart
            nu = results["pygpu"]["null_us"][key]
            rel = "%+.2f us (interp. %.2f, pygpu %+.2f)" % (pg - fl, nu, pg - fl - nu)
        elif cmp == "diff":
            rel = "%+.2f us" % (pg - fl)
        else:
            rel = "%.2fx" % (pg / fl)
        rows.append(
            [label, unit, fmt(fl), fmt(pg), rel] + [fmt((results[p] or {}).get(key)) for p in peers]
        )
    widths = [max(len(str(r[i])) for r in rows + [head]) for i in range(len(head))]
    m = results["meta"]
    print(
        "\n%s, CUDA %s driver, Python %s, NumPy %s, %s"
        % (m["gpu"], m["driver_cuda"], m["python"], m["numpy"], m["date"])
    )
    print("(%s)" % ", ".join("%s %s" % kv for kv in sorted(m["versions"].items())))
    print(
        "(launch rows: the C loop runs in this process, its bursts interleaved with "
        "pygpu's; floor.c's own figure was %.2f us; the same C loop through "
        "cuLaunchKernelEx, pygpu's entry point, %.2f us, paired)"
        % (
            results["floor"].get("launch_enqueue_us", float("nan")),
            results["pygpu"].get("floor_ex_us", float("nan")),
        )
    )
    print("| " + " | ".join(h.ljust(w) for h, w in zip(head, widths)) + " |")
    print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for r in rows:
        print("| " + " | ".join(str(c).ljust(w) for c, w in zip(r, widths)) + " |")
    if _ls_cache.get("errors"):
        print(
            "(Lomb-Scargle: scipy.signal.lombscargle would take about %.0f ms for the same "
            "work, scaled from %d frequencies; every result was checked against SciPy on them, "
            "max error / max |SciPy|: %s)"
            % (
                _ls_cache["scipy_ms"],
                LS_CHECKED,
                ", ".join("%s %s %.1e" % (w, d, e) for (w, d), e in _ls_cache["errors"].items()),
            )
        )
        results["ls_errors"] = {"%s %s" % k: v for k, v in _ls_cache["errors"].items()}
    for line in notes:
        print(line)
    sweep = results["pygpu"].get("staging_sweep")
    if sweep:
        print("\npageable copies, GB/s: plain driver call vs pinned staging (crossover)")
        print("| MiB | H->D plain | H->D staged | D->H plain | D->H staged |")
        print("|-----|------------|-------------|------------|-------------|")
        for mib, row in sweep.items():
            print(
                "| %d | %.1f | %.1f | %.1f | %.1f |"
                % (
                    mib,
                    row["plain_htod"],
                    row["staged_htod"],
                    row["plain_dtoh"],
                    row["staged_dtoh"],
                )
            )
    if not args.no_goals:
        print()
        try:
            figs, rows, info = goals.measure()
            goals.report(figs, rows, info)
            results["goals"] = {"gpu": info, "figures": figs, "rows": rows}
        except Exception as e:  # said, not fatal: the table above stands
            print("Issue 27's goals: not measured: %s" % goals.failed(e))
            results["goals"] = {"error": goals.failed(e)}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(goals.jsonable(results), f, indent=2)


if __name__ == "__main__":
    sys.exit(main())
