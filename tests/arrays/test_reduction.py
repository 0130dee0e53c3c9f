"""pygpu.reduction: generated sources compile (no GPU needed), argument
errors, and (gpu) results against NumPy on fresh random data."""

import warnings

import numpy as np
import pytest

from pygpu import compiler, reduction
from pygpu.compiler import CompileError
from pygpu.reduction import ReductionKernel, reduction_source

CPLX_F = "pycuda::complex<float>"
CPLX_D = "pycuda::complex<double>"

# (dtype_out, neutral, reduce_expr, map_expr, arguments, preamble)
SPECS = [
    (np.float32, "0", "a+b", None, "const float *in", ""),
    (np.float64, "0", "a+b", "a[i]*b[i]", "const double *a, const float *b", ""),
    (np.int32, "0", "a+b", None, "const int *in", ""),
    (np.uint8, "0", "(a+b) & 0b11111111", "x[i]", "unsigned char* x", ""),
    (
        np.uint64,
        "0",
        "a+b",
        "in[lookup_tbl[i]]",
        "const int *lookup_tbl, const unsigned long long *in",
        "",
    ),
    (np.bool_, "0", "(a != 0) || (b != 0)", "in[i] != 0", "const float *in", ""),
    (np.bool_, "1", "(a != 0) && (b != 0)", "in[i] != 0", "const %s *in" % CPLX_F, ""),
    (np.complex64, "0", "a+b", None, "const %s *in" % CPLX_F, ""),
    (
        np.complex128,
        "0",
        "a+b",
        "conj(a[i])*b[i]",
        "const %s *a, const %s *b" % (CPLX_D, CPLX_D),
        "",
    ),
    (np.float32, 0, "max(a,b)", None, "float *in", ""),
    (np.float32, "0", "a+b", "x[i]*s", "const float *x, float s", ""),
    (
        np.float64,
        "MY_INFINITY",
        "fmin(a,b)",
        None,
        "const double *in",
        "#define MY_INFINITY (1./0)",
    ),
]
for what in ("min", "max"):
    for dt in (np.float32, np.float64, np.int8, np.int32, np.int64, np.uint32, np.uint64):
        SPECS.append(
            (
                dt,
                reduction.get_minmax_neutral(what, dt),
                reduction._minmax_expr(what, dt),
                None,
                "const %s *in" % reduction.dtype_to_ctype(dt),
                "",
            )
        )


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: "%s-%s" % (np.dtype(s[0]).name, s[2]))
def test_sources_compile_to_ptx(spec):
    src, args = reduction_source(*spec[:5], name="red", preamble=spec[5])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no NVRTC warning either
        ptx = bytes(compiler.compile(src, target="ptx", arch="compute_90", cache_dir=False))
    assert b".entry red_stage1" in ptx and b".entry red_stage2" in ptx
    assert b"shfl.sync.down" in ptx
    assert [a.name for a in args] == [d.split("*")[-1].split()[-1] for d in spec[4].split(",")]


def test_struct_reduction_source_compiles(monkeypatch):
    """PyCUDA's test_struct_reduce struct: user copy constructors and only a
    volatile operator=."""
    preamble = """
    struct minmax_collector {
        float cur_min, cur_max;
        __device__ minmax_collector() { }
        __device__ minmax_collector(float cmin, float cmax) : cur_min(cmin), cur_max(cmax) { }
        __device__ minmax_collector(minmax_collector const &src)
        : cur_min(src.cur_min), cur_max(src.cur_max) { }
        __device__ minmax_collector(minmax_collector const volatile &src)
        : cur_min(src.cur_min), cur_max(src.cur_max) { }
        __device__ minmax_collector volatile &operator=(minmax_collector const &src) volatile
        { cur_min = src.cur_min; cur_max = src.cur_max; return *this; }
    };
    __device__ minmax_collector agg_mmc(minmax_collector a, minmax_collector b)
    { return minmax_collector(fminf(a.cur_min, b.cur_min), fmaxf(a.cur_max, b.cur_max)); }
    """
    dt = np.dtype([("cur_min", np.float32), ("cur_max", np.float32)])
    real = reduction.dtype_to_ctype
    monkeypatch.setattr(
        reduction, "dtype_to_ctype", lambda d: "minmax_collector" if np.dtype(d) == dt else real(d)
    )
    src, _ = reduction_source(
        dt,
        "minmax_collector(10000, -10000)",
        "agg_mmc(a, b)",
        "minmax_collector(x[i], x[i])",
        "float *x",
        preamble=preamble,
    )
    assert "typedef minmax_collector pygpu_red_t;" in src
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ptx = bytes(compiler.compile(src, target="ptx", arch="compute_90", cache_dir=False))
    assert b".entry reduce_kernel_stage1" in ptx


def test_default_map_expr():
    src, _ = reduction_source(np.float32, "0", "a+b", None, "const float *x")
    assert "return (x[i]);" in src
    src, _ = reduction_source(np.float32, "0", "a+b", None, "const int *idx, const float *in")
    assert "return (in[i]);" in src


@pytest.mark.parametrize(
    "kwargs, exc, match",
    [
        (dict(arguments=None), TypeError, "ReductionKernel needs arguments"),
        (dict(arguments="float s"), ValueError, "at least one vector argument"),
        (dict(arguments="const float *a, const float *b"), ValueError, "map_expr is needed"),
        (
            dict(arguments="const float *x", name="not an identifier"),
            ValueError,
            "name must be a C identifier",
        ),
        (dict(arguments="const float *x", reduce_expr=3), TypeError, "reduce_expr must be a str"),
        (dict(arguments="const float *x", reduce_expr="  "), ValueError, "reduce_expr is empty"),
        (dict(arguments="const float *x", neutral=[0]), TypeError, "neutral must be a str"),
        (dict(arguments="const float *x", map_expr=""), ValueError, "map_expr is empty"),
        (dict(arguments="const float *x", preamble=None), TypeError, "preamble must be a str"),
        (dict(arguments="const float *pygpu_x"), ValueError, "reserved"),
        (
            dict(arguments="const float *x, const float *x", map_expr="x[i]"),
            ValueError,
            "argument names repeat",
        ),
        (dict(arguments=3), TypeError, "arguments must be a str"),
        (dict(arguments="const float *x, "), ValueError, "empty argument"),
        (dict(arguments="const float *x", dtype_out=object), TypeError, "Python objects"),
    ],
)
def test_argument_errors(kwargs, exc, match):
    kw = dict(dtype_out=np.float32, neutral="0", reduce_expr="a+b")
    kw.update(kwargs)
    with pytest.raises(exc, match=match):
        ReductionKernel(**kw)


def test_bad_expression_is_a_compile_error():
    src, _ = reduction_source(np.float32, "0", "no_such_function(a, b)", None, "const float *in")
    with pytest.raises(CompileError, match="no_such_function"):
        compiler.compile(src, target="ptx", arch="compute_90", cache_dir=False)


@pytest.mark.driver
def test_constructor_reports_compile_error(ctx):
    with pytest.raises(CompileError, match="no_such_function"):
        ReductionKernel(np.float32, "0", "no_such_function(a, b)", arguments="const float *in")


@pytest.mark.driver
def test_constructor_loads_both_stages(ctx):
    k = ReductionKernel(np.float32, "0", "a+b", "x[i]*s", "const float *x, float s", name="axsum")
    assert k.stage1.name == "axsum_stage1" and k.stage2.name == "axsum_stage2"
    assert k.max_blocks >= 1
    assert k is not None and k.dtype_out == np.float32


def test_minmax_neutral_and_errors():
    assert reduction.get_minmax_neutral("min", np.int32) == "2147483647LL"
    assert reduction.get_minmax_neutral("max", np.uint8) == "0"
    with pytest.raises(ValueError, match="what is not min or max"):
        reduction.get_minmax_neutral("avg", np.float32)
    with pytest.raises(TypeError, match="unsupported dtype specified"):
        reduction.get_minmax_neutral("min", np.complex64)
    with pytest.raises(TypeError, match="unsupported dtype specified"):
        reduction._minmax_expr("min", np.complex64)


# ---- on the GPU ----


def _gpuarray():
    return pytest.importorskip("pygpu.gpuarray")


# around the one-block limit (BLOCK*16 = 4096) and the full-grid limit
SIZES = [0, 1, 2, 31, 32, 33, 255, 256, 257, 4095, 4096, 4097, 65537, 1_000_003]


def _random(rng, dtype, n):
    dtype = np.dtype(dtype)
    if dtype.kind == "f":
        return rng.uniform(-1, 1, n).astype(dtype)
    if dtype.kind == "c":
        return (rng.uniform(-1, 1, n) + 1j * rng.uniform(-1, 1, n)).astype(dtype)
    if dtype.kind == "b":
        return rng.integers(0, 2, n).astype(bool)
    info = np.iinfo(dtype)
    lo, hi = max(info.min, -1000), min(info.max, 1000)
    return rng.integers(lo, hi, n, endpoint=True).astype(dtype)


@pytest.mark.gpu
@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize(
    "dtype", [np.float32, np.float64, np.int32, np.int64, np.uint32, np.complex64, np.complex128]
)
def test_sum(ctx, rng, dtype, n):
    ga = _gpuarray()
    a = _random(rng, dtype, n)
    k = reduction.get_sum_kernel(None, np.dtype(dtype))
    r = k(ga.to_gpu(a))
    assert r.shape == () and r.dtype == np.dtype(dtype)
    got = r.get()
    if np.dtype(dtype).kind in "iu":
        assert got == a.sum(dtype=dtype)  # exact (wrapping like NumPy)
    else:
        ref = a.astype(np.complex128 if np.dtype(dtype).kind == "c" else np.float64).sum()
        # float32: 1e-5 of the sum of magnitudes; float64: 1e-12
        tol = (1e-5 if np.dtype(dtype) in (np.float32, np.complex64) else 1e-12) * (
            np.abs(a).astype(np.float64).sum() + 1
        )
        assert abs(got - ref) <= tol, (got, ref)


@pytest.mark.gpu
@pytest.mark.parametrize("n", [1, 33, 4097, 1_000_003])
@pytest.mark.parametrize("what", ["min", "max"])
@pytest.mark.parametrize(
    "dtype", [np.float32, np.float64, np.int8, np.int32, np.int64, np.uint16, np.uint64]
)
def test_minmax_exact(ctx, rng, dtype, what, n):
    ga = _gpuarray()
    a = _random(rng, dtype, n)
    got = reduction.get_minmax_kernel(what, np.dtype(dtype))(ga.to_gpu(a)).get()
    assert got == getattr(np, what)(a)


@pytest.mark.gpu
@pytest.mark.parametrize("what", ["min", "max"])
def test_minmax_nan_propagates(ctx, rng, what):
    ga = _gpuarray()
    a = rng.uniform(-1, 1, 100_000).astype(np.float32)
    a[rng.integers(0, a.size)] = np.nan
    got = reduction.get_minmax_kernel(what, np.dtype(np.float32))(ga.to_gpu(a)).get()
    assert np.isnan(got)


@pytest.mark.gpu
@pytest.mark.parametrize("n", [1, 257, 4097, 300_001])
def test_dot_vdot_subset(ctx, rng, n):
    ga = _gpuarray()
    a = _random(rng, np.complex128, n)
    b = _random(rng, np.complex128, n)
    da, db = ga.to_gpu(a), ga.to_gpu(b)
    c128 = np.dtype(np.complex128)
    got = reduction.get_dot_kernel(c128, c128, c128)(da, db).get()
    assert abs(got - np.dot(a, b)) <= 1e-12 * n
    got = reduction.get_vdot_kernel(c128, c128, c128)(da, db).get()
    assert abs(got - np.vdot(a, b)) <= 1e-12 * n
    idx = np.sort(rng.choice(n, size=max(1, n // 3), replace=False)).astype(np.int32)
    di = ga.to_gpu(idx)
    got = reduction.get_subset_dot_kernel(c128, np.dtype(np.int32), c128, c128)(di, da, db).get()
    assert abs(got - np.dot(a[idx], b[idx])) <= 1e-12 * n
    x = _random(rng, np.int32, n)
    dx = ga.to_gpu(x)
    i32 = np.dtype(np.int32)
    assert reduction.get_subset_sum_kernel(None, i32, i32)(di, dx).get() == x[idx].sum()
    for what in ("min", "max"):
        got = reduction.get_subset_minmax_kernel(what, i32, i32)(di, dx).get()
        assert got == getattr(np, what)(x[idx])


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [np.int32, np.bool_, np.float32, np.complex64])
def test_any_all(ctx, rng, dtype):
    ga = _gpuarray()
    b = np.dtype(bool)
    for n in (1, 5, 4097, 100_000):
        for fill in ("zeros", "ones", "one_hot", "random"):
            a = np.zeros(n, dtype) if fill != "ones" else np.ones(n, dtype)
            if fill == "one_hot":
                a[rng.integers(0, n)] = 1
            elif fill == "random":
                a = _random(rng, dtype, n)
            d = ga.to_gpu(a)
            got_any = reduction.get_any_kernel(b, np.dtype(dtype))(d).get()
            got_all = reduction.get_all_kernel(b, np.dtype(dtype))(d).get()
            assert got_any.dtype == b and got_any == np.any(a)
            assert got_all.dtype == b and got_all == np.all(a)


@pytest.mark.gpu
def test_custom_kernel_scalar_range_slice_out(ctx, rng):
    ga = _gpuarray()
    n = 100_003
    x = _random(rng, np.float64, n)
    y = _random(rng, np.float64, n)
    k = ReductionKernel(
        np.float64, "0", "a+b", "x[i]*y[i]*s", "const double *x, const double *y, double s"
    )
    dx, dy = ga.to_gpu(x), ga.to_gpu(y)
    tol = 1e-11 * n
    assert abs(k(dx, dy, 3).get() - 3 * np.dot(x, y)) <= tol
    assert (
        abs(k(dx, dy, 2.5, range=slice(10, 5000)).get() - 2.5 * np.dot(x[10:5000], y[10:5000]))
        <= tol
    )
    assert (
        abs(
            k(dx, dy, 1.0, range=slice(n - 1, 3, -7)).get()
            - np.dot(x[n - 1 : 3 : -7], y[n - 1 : 3 : -7])
        )
        <= tol
    )
    assert (
        abs(k(dx, dy, 1.0, slice=slice(-5000, None, 3)).get() - np.dot(x[-5000::3], y[-5000::3]))
        <= tol
    )
    assert k(dx, dy, 1.0, range=slice(5, 5)).get() == 0.0
    out = ga.empty(4, np.float64)
    for j in range(4):
        k(dx, dy, float(j), out=out[j])
    np.testing.assert_allclose(out.get(), np.arange(4) * np.dot(x, y), rtol=0, atol=tol)


@pytest.mark.gpu
def test_sum_with_a_pool_allocator(ctx, rng):
    ga = _gpuarray()
    from pygpu import tools

    pool = tools.DeviceMemoryPool()
    a = _random(rng, np.float32, 1_000_003)
    r = reduction.get_sum_kernel(None, np.dtype(np.float32))(ga.to_gpu(a), allocator=pool.allocate)
    assert abs(r.get() - a.astype(np.float64).sum()) <= 1e-5 * np.abs(a).sum()


# ---- the Python side of a call (the stand-in runs it too; no results read) ----


@pytest.mark.driver
@pytest.mark.parametrize("n", [0, 10, 4096, 4097, 8192, 8193, 1_000_003])
def test_allocator_called_once(ctx, n):
    ga = _gpuarray()
    from pygpu import tools

    pool = tools.DeviceMemoryPool()
    calls = []

    def allocator(nbytes):
        calls.append(nbytes)
        return pool.allocate(nbytes)

    a = ga.zeros(n, np.float32)
    k = reduction.get_sum_kernel(None, np.dtype(np.float32))
    r = k(a, allocator=allocator)
    assert len(calls) == 1 and r.shape == () and r.dtype == np.float32
    out = ga.empty(2, np.float32)
    calls.clear()
    assert k(a, allocator=allocator, out=out[1]) is not None
    # partial results only, where more than one block runs
    assert len(calls) == (0 if n <= k.block * reduction._PER_THREAD else 1)


@pytest.mark.driver
def test_call_errors(ctx):
    ga = _gpuarray()
    k = ReductionKernel(np.float32, "0", "a+b", "x[i]*s", "const float *x, float s")
    d = ga.zeros((8, 8), np.float32)
    with pytest.raises(TypeError, match=r"reduce_kernel takes 2 arguments \(x, s\) but 1"):
        k(d)
    with pytest.raises(TypeError, match="argument 'x' must be a GPUArray"):
        k(np.ones(4, np.float32), 1.0)
    with pytest.raises(RuntimeError, match="cannot deal with non-contiguous arrays"):
        k(d[:, ::2], 1.0)
    with pytest.raises(TypeError, match="range= or slice=, not both"):
        k(d, 1.0, range=slice(0, 2), slice=slice(0, 2))
    with pytest.raises(ValueError, match="range= needs a stop"):
        k(d, 1.0, range=slice(0, None))
    with pytest.raises(TypeError, match="range= must be a slice or a range"):
        k(d, 1.0, range=5)
    with pytest.raises(TypeError, match="slice= must be a slice"):
        k(d, 1.0, slice=(0, 5))
    with pytest.raises(ValueError, match="out must have the same dtype"):
        k(d, 1.0, out=ga.empty(1, np.float64))
    with pytest.raises(ValueError, match="out array is empty"):
        k(d, 1.0, out=ga.empty(0, np.float32))


# ---- kernel configurations (config= / PYGPU_REDUCTION_CONFIG) ----


def _sweep():
    """benchmarks/reduce_scan_sweep.py: the configurations the lead's GPU run times."""
    import importlib.util
    import os

    path = os.path.join(
        os.path.dirname(__file__), os.pardir, os.pardir, "benchmarks", "reduce_scan_sweep.py"
    )
    spec = importlib.util.spec_from_file_location("reduce_scan_sweep", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


SWEEP = _sweep()
F32 = np.dtype(np.float32)
# (what, dtype_out, neutral, reduce_expr, map_expr, arguments): the sweep's three kernels
SWEPT = [
    ("sum", F32, "0", "a+b", None, "const float *in"),
    (
        "min",
        F32,
        reduction.get_minmax_neutral("min", F32),
        reduction._minmax_expr("min", F32),
        None,
        "const float *in",
    ),
    ("dot", F32, "0", "a+b", "a[i]*b[i]", "const float *a, const float *b"),
]


def _ptx(src, arch):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        return bytes(compiler.compile(src, target="ptx", arch=arch, cache_dir=False)).decode()


@pytest.mark.parametrize("config", SWEEP.REDUCTIONS, ids=lambda c: c or "defaults")
def test_every_swept_config_compiles(config):
    oldest = "compute_%d" % min(compiler.supported_archs())
    for what, *spec in SWEPT:
        src, _ = reduction_source(*spec, name="red", config=config)
        for arch in ("compute_90", oldest):
            ptx = _ptx(src, arch)
            assert ".entry red_stage1" in ptx and ".entry red_stage2" in ptx, (what, arch)
        cfg = reduction.reduction_config(config)
        assert ("#define PYGPU_RED_BLOCK %d" % cfg["block"]) in src
        assert ("#define PYGPU_RED_UNROLL %d" % cfg["unroll"]) in src
        # 16-byte loads where vec asks for them; none with vec=0
        assert ("ld.global.nc.v4" in ptx) == (cfg["vec"] == 16), (what, config)


def test_defaults_and_environment(monkeypatch):
    monkeypatch.delenv("PYGPU_REDUCTION_CONFIG", raising=False)
    assert reduction.reduction_config() == reduction.REDUCTION_DEFAULTS
    monkeypatch.setenv("PYGPU_REDUCTION_CONFIG", " block=512, launch=1 ,unroll=0x2")
    cfg = reduction.reduction_config()
    assert cfg == dict(reduction.REDUCTION_DEFAULTS, block=512, launch=1, unroll=2)
    # config= wins over the environment; "" is the defaults
    assert reduction.reduction_config("") == reduction.REDUCTION_DEFAULTS
    assert reduction.reduction_config({"vec": 0})["vec"] == 0
    src, _ = reduction_source(np.float32, "0", "a+b", None, "const float *in")
    assert "#define PYGPU_RED_BLOCK 512" in src
    monkeypatch.setenv("PYGPU_REDUCTION_CONFIG", "block=48")
    with pytest.raises(
        ValueError,
        match=r"PYGPU_REDUCTION_CONFIG: block=48: threads a block "
        r"must be a multiple of 32 from 32 to 1024",
    ):
        reduction_source(np.float32, "0", "a+b", None, "const float *in")


@pytest.mark.parametrize(
    "config, exc, match",
    [
        (
            "blok=256",
            ValueError,
            r"config: 'blok' is not a known key \(known: block, unroll, vec, "
            r"bps, launch\)",
        ),
        ("block", ValueError, r"config: 'block' is not key=value"),
        ("=4", ValueError, r"config: '=4' is not key=value"),
        ("block=256,block=128", ValueError, r"config: 'block' is given twice"),
        ("unroll=four", ValueError, r"config: unroll=four is not an integer"),
        (
            "unroll=0",
            ValueError,
            r"config: unroll=0: vector loads a thread has in flight must be "
            r"from 1 to 16",
        ),
        (
            "vec=12",
            ValueError,
            r"config: vec=12: bytes a vector load \(0: scalar loads\) must be "
            r"one of 0, 4, 8, 16",
        ),
        ("launch=3", ValueError, r"config: launch=3: .* must be one of 1, 2"),
        ("bps=33", ValueError, r"config: bps=33: .* must be from 0 to 32"),
        ("block=2048", ValueError, r"config: block=2048: .* multiple of 32 from 32 to 1024"),
        ({"block": 256.0}, TypeError, r"config: block must be an int, not float"),
        ({"block": True}, TypeError, r"config: block must be an int, not bool"),
        ({"speed": 1}, ValueError, r"config: 'speed' is not a known key"),
        (["block=256"], TypeError, r"config must be a dict or a str 'key=value,...', not list"),
    ],
)
def test_config_errors(config, exc, match):
    with pytest.raises(exc, match=match):
        reduction.reduction_config(config)
    with pytest.raises(exc, match=match):
        ReductionKernel(np.float32, "0", "a+b", arguments="const float *in", config=config)


@pytest.mark.parametrize(
    "map_expr, arguments, vectorized",
    [
        ("in[i]", "const float *in", ["in"]),
        ("x[ i ]*y[i]", "const float *x, const double *y", ["x", "y"]),
        ("in[lookup_tbl[i]]", "const int *lookup_tbl, const float *in", ["lookup_tbl"]),
        ("x[i]*i + x[i+1]", "const float *x", []),  # x[i+1]: not a plain x[i]
        ("x[i] + s.x[i]", "const float *x, float s", ["x"]),  # a member named x is not x
        ("(x[i] = 2)", "float *x", []),  # written: read one at a time
        ("(x[i] += 2)", "float *x", []),
        ("x[i] == 2", "float *x", ["x"]),
        ("++x[i]", "float *x", []),
        ("f(x)", "const float *x", []),
        ("in[i]", "const pycuda::complex<float> *in", ["in"]),
    ],
)
def test_vector_loaded_arguments(map_expr, arguments, vectorized):
    from pygpu._ctypes_util import parse_arguments

    args, _ = parse_arguments(arguments)
    assert [n for _, n, _ in reduction._vector_arguments(map_expr, args)] == vectorized
    src, _ = reduction_source(
        np.float64,
        "0",
        "a+b",
        map_expr,
        arguments,
        preamble="__device__ float f(const float *p) { return *p; }",
    )
    for name in vectorized:
        assert "pygpu_v_%s[pygpu_c]" % name in src
    if vectorized:
        assert "#define PYGPU_RED_VEC 1" not in src
    else:
        assert "#define PYGPU_RED_VEC 1" in src


def test_vector_elements():
    # vec bytes over the smallest vector-loaded element, at most 64 bytes of the largest
    assert reduction._vector_plan(16, [(0, "x", 4)]) == 4
    assert reduction._vector_plan(16, [(0, "x", 1)]) == 16
    assert reduction._vector_plan(16, [(0, "x", 4), (1, "y", 8)]) == 4
    assert reduction._vector_plan(16, [(0, "x", 1), (1, "y", 16)]) == 4
    assert reduction._vector_plan(8, [(0, "x", 16)]) == 1
    assert reduction._vector_plan(0, [(0, "x", 4)]) == 1
    assert reduction._vector_plan(16, []) == 1


def _stage1_params(p, nargs):
    """(start, step, count, vbase, nvec, ticket, out) from stage 1's parameter bytes."""
    import struct

    return struct.unpack_from("<qqQqQQQ", p, 8 * (1 + nargs))


@pytest.mark.standin
def test_vector_span_follows_alignment(standin, ctx):
    ga = _gpuarray()
    k = ReductionKernel(np.float32, "0", "a+b", arguments="const float *in")
    assert k.vec == 4
    d = ga.zeros(4000, np.float32)
    for view, kw, want in [
        (d, {}, (0, 1, 4000, 0, 1000)),
        (d[1:], {}, (0, 1, 3999, 3, 999)),  # 4 bytes past 16: 3 head elements
        (d[2:], {}, (0, 1, 3998, 2, 999)),
        (d[4:], {}, (0, 1, 3996, 0, 999)),
        (d, dict(range=slice(5, 905)), (5, 1, 900, 8, 224)),
        (d, dict(range=slice(8, 15)), (8, 1, 7, 8, 0)),  # under two chunks: scalar
        (d, dict(range=slice(0, 4000, 2)), (0, 2, 2000, 0, 0)),  # a step: scalar
        (d, dict(slice=slice(-7, None)), (3993, 1, 7, 3993, 0)),
    ]:
        k(view, **kw)
        assert _stage1_params(standin.last_launch().params, 1)[:5] == want, (kw, want)
    # two arrays a different distance from alignment: no vector loads
    dot = ReductionKernel(np.float32, "0", "a+b", "a[i]*b[i]", "const float *a, const float *b")
    dot(d[1:3001], d[2:3002])
    assert _stage1_params(standin.last_launch().params, 2)[3:5] == (0, 0)
    dot(d[1:3001], d[5:3005])  # both 4 bytes past 16
    assert _stage1_params(standin.last_launch().params, 2)[3:5] == (3, 749)


@pytest.mark.standin
@pytest.mark.parametrize("launch", [1, 2])
def test_launches_and_ticket(standin, ctx, launch):
    ga = _gpuarray()
    k = ReductionKernel(
        np.float32, "0", "a+b", arguments="const float *in", config="launch=%d" % launch
    )
    d = ga.zeros(1_000_000, np.float32)
    r, calls = standin.trace(lambda: k(d))
    kernels = [c for c in calls if c.startswith("cuLaunchKernel")]
    memsets = [c for c in calls if c.startswith("cuMemsetD32")]
    assert len(kernels) == launch and len(memsets) == (1 if launch == 1 else 0), calls
    last = standin.last_launch()
    if launch == 1:
        params = last.params
        ticket, out = _stage1_params(params, 1)[5:]
        partial = int.from_bytes(params[:8], "little")
        # the ticket: 16 bytes before the partial results, after the result
        assert last.name == "reduce_kernel_stage1"
        assert ticket == partial - 16 and out == int(r.gpudata) and ticket > out
    else:
        assert last.name == "reduce_kernel_stage2"
    # one block: no ticket, no second launch, whatever the config
    _, calls = standin.trace(lambda: k(d[:100]))
    assert len([c for c in calls if c.startswith(("cuLaunchKernel", "cuMemsetD32"))]) == 1
    assert _stage1_params(standin.last_launch().params, 1)[5] == 0


@pytest.mark.driver
def test_grid_follows_config(ctx):
    k = ReductionKernel(np.float32, "0", "a+b", arguments="const float *in", config="bps=3")
    from pygpu import driver

    sms = driver.Context.get_device().get_attribute(driver.device_attribute.MULTIPROCESSOR_COUNT)
    assert k.max_blocks == 3 * sms and k.block == reduction.REDUCTION_DEFAULTS["block"]
    k = ReductionKernel(np.float32, "0", "a+b", arguments="const float *in", config="block=128")
    assert k.block == 128 and k.max_blocks >= sms


# ---- every configuration on the GPU, against NumPy ----

# sizes around the one-block limit, chunk edges and the grid (10M: float32,
# int32 and dot only)
CFG_SIZES = [0, 1, 2, 7, 31, 1023, 4095, 4096, 4097, 65535, 65537, 1_000_003, 10_000_019]


def _check_sum(got, a, dtype):
    if np.dtype(dtype).kind in "iub":
        assert got == a.sum(dtype=dtype)
        return
    ref = a.astype(np.complex128 if np.dtype(dtype).kind == "c" else np.float64).sum()
    eps = 1e-5 if np.dtype(dtype) in (np.float32, np.complex64) else 1e-12
    assert abs(got - ref) <= eps * (np.abs(a).astype(np.float64).sum() + 1), (got, ref)


@pytest.mark.gpu
@pytest.mark.parametrize("config", SWEEP.REDUCTIONS, ids=lambda c: c or "defaults")
def test_swept_configs_on_the_gpu(ctx, rng, config):
    ga = _gpuarray()
    kinds = {}
    for dtype in (np.float32, np.float64, np.int32, np.int64, np.complex64, np.uint8):
        dt = np.dtype(dtype)
        kinds[dt] = ReductionKernel(
            dt, "0", "a+b", arguments="const %s *in" % reduction.dtype_to_ctype(dt), config=config
        )
    mins = {
        dt: ReductionKernel(
            dt,
            reduction.get_minmax_neutral(w, dt),
            reduction._minmax_expr(w, dt),
            arguments="const %s *in" % reduction.dtype_to_ctype(dt),
            config=config,
        )
        for dt, w in ((F32, "min"), (np.dtype(np.float64), "max"), (np.dtype(np.int32), "min"))
    }
    dot = ReductionKernel(
        F32, "0", "a+b", "a[i]*b[i]", "const float *a, const float *b", config=config
    )
    for n in CFG_SIZES:
        for dt, k in kinds.items():
            if n > 2_000_000 and dt not in (F32, np.dtype(np.int32)):
                continue
            a = _random(rng, dt, n + 3)
            d = ga.to_gpu(a)
            # whole, and views 1..3 elements in: vector loads see every misalignment
            for off in (0, 1, 2, 3):
                _check_sum(k(d[off : off + n]).get(), a[off : off + n], dt)
        for dt, k in mins.items():
            if n == 0 or (n > 2_000_000 and dt != F32):
                continue  # NumPy has no min of nothing
            a = _random(rng, dt, n + 1)
            d = ga.to_gpu(a)
            for off in (0, 1):
                got = k(d[off : off + n]).get()
                ref = a[off : off + n]
                assert got == (ref.min() if "(a < b" in k.source else ref.max())
        x = _random(rng, F32, n + 2)
        y = _random(rng, F32, n + 2)
        dx, dy = ga.to_gpu(x), ga.to_gpu(y)
        for ox, oy in ((0, 0), (1, 1), (1, 2), (2, 0)):
            got = dot(dx[ox : ox + n], dy[oy : oy + n]).get()
            ref = np.dot(x[ox : ox + n].astype(np.float64), y[oy : oy + n].astype(np.float64))
            tol = 1e-5 * (np.abs(x[ox : ox + n].astype(np.float64) * y[oy : oy + n]).sum() + 1)
            assert abs(got - ref) <= tol, (n, ox, oy, got, ref)


@pytest.mark.gpu
@pytest.mark.parametrize("config", ["", "launch=1", "vec=0", "launch=1,block=1024,unroll=1"])
def test_configs_with_range_slice_out_and_stream(ctx, rng, config):
    ga = _gpuarray()
    from pygpu import driver

    n = 1_000_003
    x = _random(rng, np.float64, n)
    y = _random(rng, np.float64, n)
    k = ReductionKernel(
        np.float64,
        "0",
        "a+b",
        "x[i]*y[i]*s",
        "const double *x, const double *y, double s",
        config=config,
    )
    dx, dy = ga.to_gpu(x), ga.to_gpu(y)
    tol = 1e-11 * n
    s = driver.Stream()
    for kw, ref in (
        (dict(range=slice(1, 900_001)), np.dot(x[1:900_001], y[1:900_001])),
        (dict(range=slice(n - 1, 3, -7)), np.dot(x[n - 1 : 3 : -7], y[n - 1 : 3 : -7])),
        (dict(slice=slice(-5003, None)), np.dot(x[-5003:], y[-5003:])),
        (dict(stream=s), np.dot(x, y)),
    ):
        r = k(dx, dy, 2.0, **kw)
        s.synchronize()
        assert abs(r.get() - 2.0 * ref) <= tol, kw
    out = ga.empty(3, np.float64)
    for j in range(3):
        k(dx, dy, float(j + 1), out=out[j], range=slice(j, n - j))
    want = [(j + 1) * np.dot(x[j : n - j], y[j : n - j]) for j in range(3)]
    np.testing.assert_allclose(out.get(), want, rtol=0, atol=tol)


@pytest.mark.gpu
@pytest.mark.parametrize("config", ["", "launch=1", "vec=0"])
@pytest.mark.parametrize("what", ["min", "max"])
def test_nan_propagates_in_every_config(ctx, rng, what, config):
    ga = _gpuarray()
    for dtype in (np.float32, np.float64):
        dt = np.dtype(dtype)
        k = ReductionKernel(
            dt,
            reduction.get_minmax_neutral(what, dt),
            reduction._minmax_expr(what, dt),
            arguments="const %s *in" % reduction.dtype_to_ctype(dt),
            config=config,
        )
        for n in (5, 4097, 1_000_003):
            a = rng.uniform(-1, 1, n).astype(dt)
            for pos in (0, n - 1, int(rng.integers(0, n))):
                b = a.copy()
                b[pos] = np.nan
                assert np.isnan(k(ga.to_gpu(b)).get()), (n, pos)
            assert k(ga.to_gpu(a)).get() == getattr(np, what)(a)


@pytest.mark.gpu
@pytest.mark.parametrize("config", ["", "launch=1"])
def test_subset_and_bool_kernels_in_configs(ctx, rng, config, monkeypatch):
    """Kernels built without config= follow PYGPU_REDUCTION_CONFIG; gathers
    through a vector-loaded lookup table; bool results."""
    ga = _gpuarray()
    monkeypatch.setenv("PYGPU_REDUCTION_CONFIG", config)
    n = 300_007
    x = _random(rng, np.int32, n)
    idx = np.sort(rng.choice(n, size=n // 3, replace=False)).astype(np.int32)
    dx, di = ga.to_gpu(x), ga.to_gpu(idx)
    i32 = np.dtype(np.int32)
    k = ReductionKernel(
        i32,
        "0",
        "a+b",
        map_expr="in[lookup_tbl[i]]",
        arguments="const int *lookup_tbl, const int *in",
    )
    assert k.config == reduction.reduction_config(config)
    assert k(di, dx).get() == x[idx].sum()
    assert k(di[1:], dx).get() == x[idx[1:]].sum()
    b = np.dtype(bool)
    f = _random(rng, np.float32, n)
    f[f > 0.999] = 0
    kany = ReductionKernel(
        b, "0", "(a != 0) || (b != 0)", map_expr="in[i] != 0", arguments="const float *in"
    )
    kall = ReductionKernel(
        b, "1", "(a != 0) && (b != 0)", map_expr="in[i] != 0", arguments="const float *in"
    )
    df = ga.to_gpu(f)
    assert kany(df).get() == np.any(f) and kall(df).get() == np.all(f)
    assert kall(df[1:]).get() == np.all(f[1:])


def test_argument_names_the_kernel_uses_inside_compile():
    """The kernel's own locals are pygpu_-prefixed: arguments may be called
    acc, stride, k, m, r, c, i0, head, tail, gid (before, some shadowed the
    user's or failed to compile)."""
    args = (
        "const float *acc, float stride, int k, float m, float r, float c, float i0, "
        "float head, float tail, float gid, float u, float v"
    )
    src, _ = reduction_source(
        np.float32,
        "0",
        "a+b",
        "acc[i]*stride + k + m + r + c + i0 + head + tail + gid + u + v",
        args,
    )
    ptx = _ptx(src, "compute_90")
    assert ".entry reduce_kernel_stage1" in ptx and "ld.global.nc.v4" in ptx
