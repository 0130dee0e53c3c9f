"""pygpu.cumath: every function against NumPy on fresh random data (gpu),
every generated source compiled to PTX and the argument checks (CPU).

Tolerances (|gpu - ref| <= rtol * |ref| + atol, every element; ref is
NumPy's result computed in float64/complex128 from the same inputs):
float32 rtol 2e-6 atol 1e-7 (CUDA's single-precision functions are within
4 ulp); float64 rtol 1e-14 atol 1e-15; complex64 rtol 1e-5 atol 1e-6;
complex128 rtol 1e-13 atol 1e-14 (the complex functions are compositions
of a few real ones).  ceil, floor, trunc, rint, fabs, fmod, frexp, ldexp
and modf are exact.
"""

import types
import warnings

import numpy as np
import pytest

from pygpu import compiler, cumath

REAL = [np.float32, np.float64]
COMPLEX = [np.complex64, np.complex128]
TOL = {
    np.dtype(np.float32): (2e-6, 1e-7),
    np.dtype(np.float64): (1e-14, 1e-15),
    np.dtype(np.complex64): (1e-5, 1e-6),
    np.dtype(np.complex128): (1e-13, 1e-14),
}
EXACT = {"ceil", "floor", "trunc", "rint", "fabs"}
NUMPY_NAME = {
    "asin": "arcsin",
    "acos": "arccos",
    "atan": "arctan",
    "asinh": "arcsinh",
    "acosh": "arccosh",
    "atanh": "arctanh",
}

# real argument ranges (inside each function's domain, away from poles)
REAL_RANGE = {
    "fabs": (-100, 100),
    "ceil": (-100, 100),
    "floor": (-100, 100),
    "trunc": (-100, 100),
    "rint": (-100, 100),
    "exp": (-20, 20),
    "exp2": (-30, 30),
    "expm1": (-5, 5),
    "log": (1e-3, 1e3),
    "log2": (1e-3, 1e3),
    "log10": (1e-3, 1e3),
    "log1p": (-0.9, 10),
    "sqrt": (0, 1e3),
    "cbrt": (-1e3, 1e3),
    "sin": (-10, 10),
    "cos": (-10, 10),
    "tan": (-1.5, 1.5),
    "asin": (-0.99, 0.99),
    "acos": (-0.99, 0.99),
    "atan": (-10, 10),
    "sinh": (-10, 10),
    "cosh": (-10, 10),
    "tanh": (-5, 5),
    "asinh": (-10, 10),
    "acosh": (1.01, 10),
    "atanh": (-0.99, 0.99),
}
# complex: (real part range, imaginary part range)
COMPLEX_RANGE = {
    "exp": ((-5, 5), (-5, 5)),
    "log": ((-3, 3), (-3, 3)),
    "log10": ((-3, 3), (-3, 3)),
    "sqrt": ((-3, 3), (-3, 3)),
    "sin": ((-3, 3), (-3, 3)),
    "cos": ((-3, 3), (-3, 3)),
    "tan": ((-1.4, 1.4), (-2, 2)),
    "sinh": ((-3, 3), (-3, 3)),
    "cosh": ((-3, 3), (-3, 3)),
    "tanh": ((-2, 2), (-1.4, 1.4)),
    "asin": ((-2, 2), (-2, 2)),
    "acos": ((-2, 2), (-2, 2)),
    "atan": ((-2, 2), (0.1, 2)),
    "asinh": ((-2, 2), (-2, 2)),
    "acosh": ((-2, 2), (-2, 2)),
    "atanh": ((0.1, 2), (-2, 2)),
}
N = 100_003  # odd: the 16-byte loop and its scalar tail both run


def _ref(name, x):
    wide = x.astype(np.complex128 if x.dtype.kind == "c" else np.float64)
    return getattr(np, NUMPY_NAME.get(name, name))(wide)


def _check(name, got, x):
    ref = _ref(name, x)
    assert got.dtype == x.dtype and got.shape == x.shape
    if name in EXACT:
        np.testing.assert_array_equal(got, ref.astype(x.dtype))
        return
    rtol, atol = TOL[x.dtype]
    err = np.abs(got.astype(ref.dtype) - ref)
    bad = ~(err <= rtol * np.abs(ref) + atol)
    if bad.any():
        i = np.flatnonzero(bad.ravel())[:5]
        pytest.fail(
            "%s %s: %d of %d elements out of tolerance, e.g. x=%r got=%r ref=%r"
            % (name, x.dtype, bad.sum(), x.size, x.ravel()[i], got.ravel()[i], ref.ravel()[i])
        )


def _data(rng, name, dtype, n=N):
    dtype = np.dtype(dtype)
    if dtype.kind == "c":
        (a, b), (c, d) = COMPLEX_RANGE[name]
        return (rng.uniform(a, b, n) + 1j * rng.uniform(c, d, n)).astype(dtype)
    a, b = REAL_RANGE[name]
    return rng.uniform(a, b, n).astype(dtype)


CASES = [(name, dt) for name in cumath.UNARY for dt in REAL] + [
    (name, dt) for name, c in cumath.UNARY.items() if c for dt in COMPLEX
]


# ---------------------------------------------------------------- CPU


@pytest.mark.parametrize("dtype", REAL + COMPLEX)
def test_every_source_compiles_to_ptx(dtype):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # and without a warning
        ptx = compiler.compile(cumath.source(dtype), arch="compute_90", target="ptx").decode()
    complex_ = np.dtype(dtype).kind == "c"
    for name, takes_complex in cumath.UNARY.items():
        present = ".entry %s(" % cumath.kernel_name(name, dtype) in ptx
        assert present == (takes_complex or not complex_), name
    for name in ("fmod", "frexp", "modf"):
        assert (".entry %s(" % cumath.kernel_name(name, dtype) in ptx) == (not complex_)


def test_the_unary_loops_move_16_bytes():
    import re

    ptx = compiler.compile(cumath.source(np.float32), arch="compute_90", target="ptx").decode()
    body = re.search(r"\.entry cumath_sin_float32\(.*?\n}", ptx, re.S).group(0)
    assert "ld.global.v4.f32" in body or "ld.global.v4.u32" in body or "ld.global.v4.b32" in body
    assert "st.global.v4" in body


def test_source_refuses_other_dtypes():
    with pytest.raises(
        TypeError, match="cumath takes float32, float64, complex64 or complex128 arrays, not int32"
    ):
        cumath.source(np.int32)


def test_module_has_pycudas_names():
    for name in [
        "fabs",
        "ceil",
        "floor",
        "exp",
        "log",
        "log10",
        "sqrt",
        "sin",
        "cos",
        "tan",
        "asin",
        "acos",
        "atan",
        "sinh",
        "cosh",
        "tanh",
        "fmod",
        "frexp",
        "ldexp",
        "modf",
    ]:
        assert callable(getattr(cumath, name)), name
    assert cumath.sin.__name__ == "sin" and "out" in cumath.sin.__doc__


def _fake(dtype=np.float32, shape=(4,), contiguous=True, strides=None):
    """Stands in for a GPUArray in the argument checks that come before any
    GPU work."""
    dtype = np.dtype(dtype)
    return types.SimpleNamespace(
        dtype=dtype,
        shape=shape,
        size=int(np.prod(shape)),
        ptr=0,
        strides=strides or (dtype.itemsize,),
        flags=types.SimpleNamespace(forc=contiguous),
    )


def test_argument_errors_before_any_gpu_work():
    with pytest.raises(TypeError, match="the argument must be a GPUArray, not ndarray"):
        cumath.sin(np.zeros(3, np.float32))
    with pytest.raises(TypeError, match="the argument must be a GPUArray, not list"):
        cumath.sin([1.0])
    with pytest.raises(
        RuntimeError, match="only contiguous arrays may be used as arguments to this operation"
    ):
        cumath.sin(_fake(contiguous=False))
    with pytest.raises(
        TypeError,
        match=r"cumath.sin takes float32, float64, complex64, "
        r"complex128 arrays, not int32",
    ):
        cumath.sin(_fake(np.int32))
    with pytest.raises(
        TypeError,
        match=r"cumath.fabs takes float32, float64 arrays, not "
        r"int64",
    ):
        cumath.fabs(_fake(np.int64))
    with pytest.raises(
        TypeError,
        match=r"cumath.floor does not take complex arguments "
        r"\(complex64\)",
    ):
        cumath.floor(_fake(np.complex64))
    with pytest.raises(TypeError, match="out has dtype float64 but the result is float32"):
        cumath.exp(_fake(), out=_fake(np.float64))
    with pytest.raises(
        ValueError,
        match=r"out has shape \(5,\) but the argument has shape "
        r"\(4,\)",
    ):
        cumath.exp(_fake(), out=_fake(shape=(5,)))
    with pytest.raises(ValueError, match="out has strides"):
        cumath.exp(_fake(shape=(2, 2), strides=(8, 4)), out=_fake(shape=(2, 2), strides=(4, 8)))
    with pytest.raises(RuntimeError, match="only contiguous arrays"):
        cumath.exp(_fake(), out=_fake(contiguous=False))
    with pytest.raises(TypeError, match="out must be a GPUArray, not ndarray"):
        cumath.exp(_fake(), out=np.zeros(4, np.float32))


def test_binary_argument_errors_before_any_gpu_work():
    with pytest.raises(TypeError, match="fmod: arg is float32 but mod is float64"):
        cumath.fmod(_fake(), _fake(np.float64))
    with pytest.raises(ValueError, match=r"mod has shape \(3,\) but arg has shape \(4,\)"):
        cumath.fmod(_fake(), _fake(shape=(3,)))
    with pytest.raises(RuntimeError, match="only contiguous arrays"):
        cumath.fmod(_fake(), _fake(contiguous=False))
    with pytest.raises(
        TypeError, match="ldexp: exponent must be a float or signed integer array, not uint32"
    ):
        cumath.ldexp(_fake(), _fake(np.uint32))
    with pytest.raises(
        ValueError,
        match=r"exponent has shape \(2,\) but significand has "
        r"shape \(4,\)",
    ):
        cumath.ldexp(_fake(), _fake(np.int32, shape=(2,)))
    with pytest.raises(
        TypeError, match="cumath.frexp takes float32 or float64 arrays, not complex64"
    ):
        cumath.frexp(_fake(np.complex64))
    with pytest.raises(TypeError, match="cumath.modf takes float32 or float64 arrays, not int32"):
        cumath.modf(_fake(np.int32))
    with pytest.raises(TypeError, match="arg must be a GPUArray, not float"):
        cumath.modf(1.5)


# ---------------------------------------------------------------- GPU


@pytest.mark.gpu
@pytest.mark.parametrize("name,dtype", CASES)
def test_unary_against_numpy(ctx, rng, name, dtype):
    from pygpu import gpuarray

    x = _data(rng, name, dtype)
    x_gpu = gpuarray.to_gpu(x)
    _check(name, getattr(cumath, name)(x_gpu).get(), x)
    # again: the kernel known for this context and dtype (the quick path)
    again = getattr(cumath, name)(x_gpu)
    assert again.shape == x_gpu.shape and again.dtype == x_gpu.dtype
    _check(name, again.get(), x)
    # into out=, which is returned
    out = gpuarray.empty_like(x_gpu)
    assert getattr(cumath, name)(x_gpu, out=out) is out
    _check(name, out.get(), x)
    # the argument is untouched
    np.testing.assert_array_equal(x_gpu.get(), x)


@pytest.mark.standin
def test_quick_path_launches_what_the_checked_path_launches(standin, ctx, rng):
    # the first call of a function for a dtype takes the checked path and
    # makes the kernel known; later calls with dense arrays of one layout
    # skip the checks: they must launch the same kernel, pointers and size,
    # and leave everything else to the checked path
    from pygpu import gpuarray

    for order in ("C", "F"):
        for dtype in (np.float32, np.complex128):
            shape = tuple(int(v) for v in rng.integers(2, 40, 2))
            x = gpuarray.to_gpu(
                np.asarray(
                    _data(rng, "tanh", dtype, shape[0] * shape[1]).reshape(shape), order=order
                )
            )
            out = gpuarray.empty_like(x)
            launches = []
            for _ in range(3):
                r = cumath.tanh(x)
                rec = standin.last_launch()
                assert r.shape == x.shape and r.strides == x.strides and r.dtype == x.dtype
                want = (
                    np.uint64(x.ptr).tobytes()
                    + np.uint64(r.ptr).tobytes()
                    + np.uint64(x.size).tobytes()
                )
                assert rec.params == want
                launches.append((rec.name, rec.grid, rec.block))
                assert cumath.tanh(x, out=out) is out
                rec = standin.last_launch()
                assert rec.params[8:16] == np.uint64(out.ptr).tobytes()
                launches.append((rec.name, rec.grid, rec.block))
            assert len(set(launches)) == 1, launches
            # what the quick path must not take: the checks still speak
            with pytest.raises(ValueError, match="out has shape"):
                cumath.tanh(x, out=gpuarray.empty((3,), dtype))
            with pytest.raises(TypeError, match="out has dtype"):
                cumath.tanh(
                    x,
                    out=gpuarray.empty(shape, np.float64 if dtype == np.float32 else np.complex64),
                )
            with pytest.raises(RuntimeError, match="only contiguous"):
                cumath.tanh(gpuarray.to_gpu(np.zeros((6, 6), dtype))[:, ::2])


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", REAL + COMPLEX)
def test_in_place_unaligned_2d_fortran_and_empty(ctx, rng, dtype):
    from pygpu import gpuarray

    x = _data(rng, "sin", dtype, 1001)
    # in place
    x_gpu = gpuarray.to_gpu(x)
    assert cumath.sin(x_gpu, out=x_gpu) is x_gpu
    _check("sin", x_gpu.get(), x)
    # an offset view: the pointers are not 16-byte aligned, the scalar loop runs
    x_gpu = gpuarray.to_gpu(x)
    view = x_gpu[1:]
    _check("sin", cumath.sin(view).get(), x[1:])
    # 2-D, C and Fortran order
    for order in ("C", "F"):
        x2 = np.asarray(_data(rng, "cos", dtype, 35 * 41).reshape(35, 41), order=order)
        got = cumath.cos(gpuarray.to_gpu(x2))
        assert got.shape == (35, 41)
        _check("cos", got.get(), x2)
    # empty
    e = cumath.exp(gpuarray.empty((0,), dtype))
    assert e.shape == (0,) and e.dtype == dtype


@pytest.mark.gpu
def test_stream_and_positional_out_or_stream(ctx, rng):
    from pygpu import driver, gpuarray

    x = _data(rng, "exp", np.float32)
    x_gpu = gpuarray.to_gpu(x)
    s = driver.Stream()
    got = cumath.exp(x_gpu, stream=s)
    s.synchronize()
    _check("exp", got.get(), x)
    out = gpuarray.empty_like(x_gpu)
    with pytest.warns(DeprecationWarning, match="please use 'out' or 'stream' keyword"):
        r = cumath.exp(x_gpu, out)
    assert r is out
    _check("exp", out.get(), x)
    with pytest.warns(DeprecationWarning, match="please use 'out' or 'stream' keyword"):
        r = cumath.exp(x_gpu, s)
    s.synchronize()
    _check("exp", r.get(), x)
    out2 = gpuarray.empty_like(x_gpu)
    assert cumath.exp(x_gpu, stream=s, out=out2) is out2
    s.synchronize()
    _check("exp", out2.get(), x)


@pytest.mark.gpu
def test_non_contiguous_is_refused(ctx):
    from pygpu import gpuarray

    x = gpuarray.to_gpu(np.arange(20, dtype=np.float32))
    with pytest.raises(
        RuntimeError, match="only contiguous arrays may be used as arguments to this operation"
    ):
        cumath.sin(x[::2])
    with pytest.raises(TypeError, match="cumath.sin takes .* not int32"):
        cumath.sin(gpuarray.to_gpu(np.arange(4, dtype=np.int32)))


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", REAL)
def test_fmod(ctx, rng, dtype):
    from pygpu import gpuarray

    a = rng.uniform(-100, 100, N).astype(dtype)
    m = rng.uniform(0.5, 7, N).astype(dtype) * rng.choice([-1, 1], N).astype(dtype)
    got = cumath.fmod(gpuarray.to_gpu(a), gpuarray.to_gpu(m)).get()
    assert got.dtype == dtype
    np.testing.assert_array_equal(got, np.fmod(a, m))


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", REAL)
def test_frexp(ctx, rng, dtype):
    from pygpu import gpuarray

    a = (rng.uniform(-1, 1, N) * 10.0 ** rng.integers(-30, 30, N)).astype(dtype)
    a[:3] = 0, 1, -0.5
    sig, expt = cumath.frexp(gpuarray.to_gpu(a))
    ref_sig, ref_expt = np.frexp(a)
    assert sig.dtype == dtype and expt.dtype == dtype
    np.testing.assert_array_equal(sig.get(), ref_sig)
    np.testing.assert_array_equal(expt.get(), ref_expt.astype(dtype))


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", REAL)
@pytest.mark.parametrize("edtype", [np.float32, np.float64, np.int32, np.int64])
def test_ldexp(ctx, rng, dtype, edtype):
    from pygpu import gpuarray

    s = rng.uniform(-1, 1, N).astype(dtype)
    e = rng.uniform(-20.9, 20.9, N).astype(edtype)
    got = cumath.ldexp(gpuarray.to_gpu(s), gpuarray.to_gpu(e)).get()
    assert got.dtype == dtype
    # the exponent is truncated toward zero, as C's (int) cast
    np.testing.assert_array_equal(got, np.ldexp(s, np.trunc(e).astype(np.int32)))


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", REAL)
def test_modf(ctx, rng, dtype):
    from pygpu import gpuarray

    a = rng.uniform(-1000, 1000, N).astype(dtype)
    frac, intpart = cumath.modf(gpuarray.to_gpu(a))
    ref_frac, ref_int = np.modf(a)
    np.testing.assert_array_equal(frac.get(), ref_frac)
    np.testing.assert_array_equal(intpart.get(), ref_int)
