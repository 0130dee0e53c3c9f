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
    (np.uint64, "0", "a+b", "in[lookup_tbl[i]]", "const int *lookup_tbl, const unsigned long long *in",
     ""),
    (np.bool_, "0", "(a != 0) || (b != 0)", "in[i] != 0", "const float *in", ""),
    (np.bool_, "1", "(a != 0) && (b != 0)", "in[i] != 0", "const %s *in" % CPLX_F, ""),
    (np.complex64, "0", "a+b", None, "const %s *in" % CPLX_F, ""),
    (np.complex128, "0", "a+b", "conj(a[i])*b[i]", "const %s *a, const %s *b" % (CPLX_D, CPLX_D),
     ""),
    (np.float32, 0, "max(a,b)", None, "float *in", ""),
    (np.float32, "0", "a+b", "x[i]*s", "const float *x, float s", ""),
    (np.float64, "MY_INFINITY", "fmin(a,b)", None, "const double *in",
     "#define MY_INFINITY (1./0)"),
]
for what in ("min", "max"):
    for dt in (np.float32, np.float64, np.int8, np.int32, np.int64, np.uint32, np.uint64):
        SPECS.append((dt, reduction.get_minmax_neutral(what, dt),
                      reduction._minmax_expr(what, dt), None,
                      "const %s *in" % reduction.dtype_to_ctype(dt), ""))


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: "%s-%s" % (np.dtype(s[0]).name, s[2]))
def test_sources_compile_to_ptx(spec):
    src, args = reduction_source(*spec[:5], name="red", preamble=spec[5])
    with warnings.catch_warnings():
        warnings.simplefilter("error")        # no NVRTC warning either
        ptx = bytes(compiler.compile(src, target="ptx", arch="compute_90", cache_dir=False))
    assert b".entry red_stage1" in ptx and b".entry red_stage2" in ptx
    assert b"shfl.sync.down" in ptx
    assert [a.name for a in args] == [d.split("*")[-1].split()[-1]
                                      for d in spec[4].split(",")]


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
    monkeypatch.setattr(reduction, "dtype_to_ctype",
                        lambda d: "minmax_collector" if np.dtype(d) == dt else real(d))
    src, _ = reduction_source(dt, "minmax_collector(10000, -10000)", "agg_mmc(a, b)",
                              "minmax_collector(x[i], x[i])", "float *x", preamble=preamble)
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


@pytest.mark.parametrize("kwargs, exc, match", [
    (dict(arguments=None), TypeError, "ReductionKernel needs arguments"),
    (dict(arguments="float s"), ValueError, "at least one vector argument"),
    (dict(arguments="const float *a, const float *b"), ValueError, "map_expr is needed"),
    (dict(arguments="const float *x", name="not an identifier"), ValueError,
     "name must be a C identifier"),
    (dict(arguments="const float *x", reduce_expr=3), TypeError, "reduce_expr must be a str"),
    (dict(arguments="const float *x", reduce_expr="  "), ValueError, "reduce_expr is empty"),
    (dict(arguments="const float *x", neutral=[0]), TypeError, "neutral must be a str"),
    (dict(arguments="const float *x", map_expr=""), ValueError, "map_expr is empty"),
    (dict(arguments="const float *x", preamble=None), TypeError, "preamble must be a str"),
    (dict(arguments="const float *pygpu_x"), ValueError, "reserved"),
    (dict(arguments="const float *x, const float *x", map_expr="x[i]"), ValueError,
     "argument names repeat"),
    (dict(arguments=3), TypeError, "arguments must be a str"),
    (dict(arguments="const float *x, "), ValueError, "empty argument"),
    (dict(arguments="const float *x", dtype_out=object), TypeError, "Python objects"),
])
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
    k = ReductionKernel(np.float32, "0", "a+b", "x[i]*s", "const float *x, float s",
                        name="axsum")
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
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64, np.uint32,
                                   np.complex64, np.complex128])
def test_sum(ctx, rng, dtype, n):
    ga = _gpuarray()
    a = _random(rng, dtype, n)
    k = reduction.get_sum_kernel(None, np.dtype(dtype))
    r = k(ga.to_gpu(a))
    assert r.shape == () and r.dtype == np.dtype(dtype)
    got = r.get()
    if np.dtype(dtype).kind in "iu":
        assert got == a.sum(dtype=dtype)              # exact (wrapping like NumPy)
    else:
        ref = a.astype(np.complex128 if np.dtype(dtype).kind == "c" else np.float64).sum()
        # float32: 1e-5 of the sum of magnitudes; float64: 1e-12
        tol = (1e-5 if np.dtype(dtype) in (np.float32, np.complex64) else 1e-12) * \
            (np.abs(a).astype(np.float64).sum() + 1)
        assert abs(got - ref) <= tol, (got, ref)


@pytest.mark.gpu
@pytest.mark.parametrize("n", [1, 33, 4097, 1_000_003])
@pytest.mark.parametrize("what", ["min", "max"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int8, np.int32, np.int64,
                                   np.uint16, np.uint64])
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
    k = ReductionKernel(np.float64, "0", "a+b", "x[i]*y[i]*s",
                        "const double *x, const double *y, double s")
    dx, dy = ga.to_gpu(x), ga.to_gpu(y)
    tol = 1e-11 * n
    assert abs(k(dx, dy, 3).get() - 3 * np.dot(x, y)) <= tol
    assert abs(k(dx, dy, 2.5, range=slice(10, 5000)).get()
               - 2.5 * np.dot(x[10:5000], y[10:5000])) <= tol
    assert abs(k(dx, dy, 1.0, range=slice(n - 1, 3, -7)).get()
               - np.dot(x[n - 1:3:-7], y[n - 1:3:-7])) <= tol
    assert abs(k(dx, dy, 1.0, slice=slice(-5000, None, 3)).get()
               - np.dot(x[-5000::3], y[-5000::3])) <= tol
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
    r = reduction.get_sum_kernel(None, np.dtype(np.float32))(ga.to_gpu(a),
                                                            allocator=pool.allocate)
    assert abs(r.get() - a.astype(np.float64).sum()) <= 1e-5 * np.abs(a).sum()


# ---- the Python side of a call (the stand-in runs it too; no results read) ----

@pytest.mark.driver
@pytest.mark.parametrize("n", [0, 10, 4096, 4097, 1_000_003])
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
    assert len(calls) == (0 if n <= 4096 else 1)          # partial results only


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
