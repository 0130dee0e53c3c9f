"""The one scalar conversion (src/launch/scalars.c; docs/design.md, "Rules
that hold across files"): a Python int given where an array's dtype is the
parameter's follows NumPy 2's rule on every path -- the operators' C path,
their Python path, the general (broadcasting, out=) path, the reflected and
in-place forms, fill(), and a prepared kernel's typed parameter: out of the
dtype's range it is an OverflowError, never its value modulo 2**bits
(before, `int8_array + 200` added -56 and `uint32_array + (-1)` added
2**32 - 1).

Comparisons are the exception, as in NumPy 2: `int8_array < 1000` is all
True, `uint8_array == -1` all False (an out-of-range int is on one side of
every element), and a uint64 compared with a signed integer is exact, not
through float64 (where 2**63 > 2**63 - 1 was False).

`standin` tests check the error, raised before any launch, and the bytes an
in-range scalar is launched with; CPU tests check the comparisons' kernels
(their source, NVRTC's PTX, the expression compiled as host C++); `gpu`
tests check the results against NumPy on fresh random data.
"""

import operator
import re
import sys

import numpy as np
import pytest

from pygpu import _driver, compiler, elementwise
from pygpu import gpuarray as ga

# (dtype, a value just out of its range on each side)
EDGES = [
    (np.int8, 128, -129),
    (np.uint8, 256, -1),
    (np.int16, 2**15, -(2**15) - 1),
    (np.uint16, 2**16, -1),
    (np.int32, 2**31, -(2**31) - 1),
    (np.uint32, 2**32, -1),
    (np.int64, 2**63, -(2**63) - 1),
    (np.uint64, 2**64, -1),
]
OPS = [operator.add, operator.sub, operator.mul, operator.floordiv, operator.mod]


def _numpy_refuses(dtype, value):
    """NumPy 2's own answer for the same mistake (the rule copied)."""
    with pytest.raises(OverflowError):
        np.arange(3, dtype=dtype) + value


@pytest.mark.standin
@pytest.mark.parametrize("dtype,hi,lo", EDGES)
def test_an_out_of_range_int_is_refused_on_every_path(standin, ctx, rng, dtype, hi, lo):
    name = np.dtype(dtype).name
    x = rng.integers(1, 100, 1000).astype(dtype)
    a = ga.to_gpu(x)
    for value in (hi, lo):
        _numpy_refuses(dtype, value)
        msg = r"Python integer %d out of bounds for %s" % (value, name)
        for op in OPS:
            for _ in range(3):  # the C path takes the steady state
                launches = standin.launches()
                with pytest.raises(OverflowError, match=msg):
                    op(a, value)
                with pytest.raises(OverflowError, match=msg):
                    op(value, a)
                assert standin.launches() == launches  # nothing ran
        py = ga._OPERATORS["add"]  # the Python path itself
        with pytest.raises(OverflowError, match=msg):
            py(a, value)
        with pytest.raises(OverflowError, match=msg):
            ga._binary_general("add", a, value, None, None)  # the general path
        out = ga.empty_like(a)
        with pytest.raises(OverflowError, match=msg):
            ga._binary("add", a, value, out=out)
        b = ga.to_gpu(x)
        with pytest.raises(OverflowError, match=msg):
            b += value
        with pytest.raises(OverflowError, match=msg):
            a.fill(value)
        with pytest.raises(OverflowError, match=msg):
            _driver._scalar_check(value, np.dtype(dtype).char)


@pytest.mark.standin
def test_the_reported_cases(standin, ctx):
    """The review's cases: int8 + 200, uint32 + (-1), int8 ** 255."""
    i8 = ga.to_gpu(np.arange(10, dtype=np.int8))
    u32 = ga.to_gpu(np.arange(10, dtype=np.uint32))
    with pytest.raises(OverflowError, match=r"Python integer 200 out of bounds for int8"):
        i8 + 200
    with pytest.raises(OverflowError, match=r"Python integer -1 out of bounds for uint32"):
        u32 + (-1)
    with pytest.raises(OverflowError, match=r"Python integer 255 out of bounds for int8"):
        i8**255


@pytest.mark.standin
@pytest.mark.parametrize("dtype,hi,lo", EDGES)
def test_the_edge_values_in_range_are_launched_exactly(standin, ctx, rng, dtype, hi, lo):
    """hi - 1 and lo + 1 are the dtype's own: launched with those bits."""
    a = ga.to_gpu(rng.integers(1, 100, 100).astype(dtype))
    size = np.dtype(dtype).itemsize
    for value in (hi - 1, lo + 1):
        for _ in range(3):
            a + value
            params = standin.last_launch().params
            # z, x, y, n: the scalar is the third parameter (8-byte pointers first)
            got = np.frombuffer(params[16 : 16 + size], dtype=dtype)[0]
            assert got == np.array(value, dtype=dtype), (value, got)


@pytest.mark.standin
def test_a_prepared_typed_parameter_takes_numpys_range(standin, ctx):
    """prepare()'s type codes are the types: 'b' takes -128..127, not 255;
    an untyped call (sizes only) keeps taking either signedness."""
    from pygpu.compiler import SourceModule

    f = SourceModule(
        'extern "C" __global__ void k(signed char a, unsigned int b, int c) { }'
    ).get_function("k")
    f.prepare("bIi")
    f.prepared_call((1, 1), (1, 1, 1), -128, 2**32 - 1, -(2**31))
    for args, msg in (
        ((128, 0, 0), r"parameter 0: Python integer 128 out of bounds for int8"),
        ((0, -1, 0), r"parameter 1: Python integer -1 out of bounds for uint32"),
        ((0, 0, 2**31), r"parameter 2: Python integer 2147483648 out of bounds for int32"),
    ):
        with pytest.raises(OverflowError, match=msg):
            f.prepared_call((1, 1), (1, 1, 1), *args)
    g = SourceModule('extern "C" __global__ void g(signed char a) { }').get_function("g")
    g(255, block=(1, 1, 1), grid=(1, 1))  # only the size is known: either signedness
    assert standin.last_launch().params[:1] == b"\xff"
    with pytest.raises(OverflowError, match=r"parameter 0 is 1 bytes; 256 does not fit"):
        g(256, block=(1, 1, 1), grid=(1, 1))


def test_scalar_check_errors():
    assert _driver._scalar_check(5, "f") is None  # no integer type: nothing to check
    assert _driver._scalar_check(2**64 - 1, "Q") is None
    with pytest.raises(
        OverflowError, match=r"^Python integer 18446744073709551616 out of bounds for uint64$"
    ):
        _driver._scalar_check(2**64, "Q")
    with pytest.raises(TypeError, match=r"_scalar_check\(value: int, code: str\)"):
        _driver._scalar_check(1.5, "i")


@pytest.mark.gpu
@pytest.mark.parametrize("dtype,hi,lo", EDGES)
def test_gpu_in_range_scalars_equal_numpy_and_out_of_range_ones_raise(ctx, rng, dtype, hi, lo):
    info = np.iinfo(dtype)
    x = rng.integers(max(info.min, -50), min(info.max, 50), 5000).astype(dtype)
    a = ga.to_gpu(x)
    for value in (int(rng.integers(1, 20)), hi - 1 if info.max < 2**20 else 7):
        for op in (operator.add, operator.sub, operator.mul):
            with np.errstate(over="ignore"):
                want = op(x, value)
            for _ in range(3):
                np.testing.assert_array_equal(op(a, value).get(), want)
    with pytest.raises(OverflowError, match="out of bounds for %s" % np.dtype(dtype).name):
        a + hi
    with pytest.raises(OverflowError, match="out of bounds for %s" % np.dtype(dtype).name):
        a + lo
    np.testing.assert_array_equal(a.get(), x)  # nothing was written


# ---- comparisons: an out-of-range int, uint64 against a signed integer ----

COMPARE = {
    "equal": operator.eq,
    "not_equal": operator.ne,
    "less": operator.lt,
    "less_equal": operator.le,
    "greater": operator.gt,
    "greater_equal": operator.ge,
}
# ints out of every dtype's range but those of its own row in EDGES
FAR = [2**64, -(2**63) - 1, 2**70, -(2**70)]
SIGNED = [np.int8, np.int16, np.int32, np.int64]
SWAPPED = {"equal": "equal", "not_equal": "not_equal", "less": "greater"}
SWAPPED.update(less_equal="greater_equal", greater="less", greater_equal="less_equal")
U64 = np.dtype(np.uint64)


def _nvrtc_ok():
    try:
        compiler.nvrtc_version()
        return True
    except Exception:
        return False


def _out_of_range(dtype, hi, lo):
    info = np.iinfo(dtype)
    return [v for v in dict.fromkeys([hi, lo] + FAR) if not info.min <= v <= info.max]


def _python_calls(fn):
    """(fn(), the names of the Python functions it called)."""
    names = []

    def prof(frame, event, arg):
        if event == "call":
            names.append(frame.f_code.co_name)

    sys.setprofile(prof)
    try:
        r = fn()
    finally:
        sys.setprofile(None)
    return r, names


def _map_keys(name):
    """(expr, kinds, dtypes, cdtypes, ndim) of every map kernel of name made."""
    return {(k[2], k[3], k[4], k[5], k[7]) for k in elementwise._map_cache if k[1] == name}


@pytest.mark.standin
@pytest.mark.parametrize("dtype,hi,lo", EDGES)
def test_a_comparison_with_an_out_of_range_int_is_numpys_not_an_error(
    standin, ctx, rng, dtype, hi, lo
):
    """NumPy 2 compares an integer array with any Python int: one out of
    the dtype's range gives one value for every element (int8 < 1000: all
    True), on every path, with a kernel that reads no scalar; arithmetic
    with the same int is still an OverflowError (before: comparisons raised
    it too)."""
    name = np.dtype(dtype).name
    x = rng.integers(np.iinfo(dtype).min, np.iinfo(dtype).max, 1000, dtype=dtype, endpoint=True)
    a = ga.to_gpu(x)
    for value in _out_of_range(dtype, hi, lo):
        for op, f in COMPARE.items():
            for args, host in (((a, value), (x, value)), ((value, a), (value, x))):
                want = f(*host)
                assert want.dtype == np.bool_ and want.all() == want.any()  # one value
                ran = op if args[0] is a else SWAPPED[op]  # (value < a runs a > value)
                for _ in range(3):  # the Python path, then where the C path would be
                    launches = standin.launches()
                    r = f(*args)
                    assert standin.launches() == launches + 1
                    assert r.dtype == np.bool_ and r.shape == x.shape
                    launch = standin.last_launch()
                    assert launch.name == "pygpu_" + ran and len(launch.params) == 24  # z, x, n
                assert ("true" if want[0] else "false", ("a",), (a.dtype,)) in {
                    k[:3] for k in _map_keys(ran)
                }
                # the value every element gets (the stand-in runs no kernel)
                const = ga._constant_compare(op, *args)
                np.testing.assert_array_equal(np.full(x.shape, const), want)
                v = f(args[0][::2], value) if args[0] is a else f(value, args[1][::2])
                assert v.dtype == np.bool_ and v.shape == x[::2].shape  # the general path
                out = ga.empty(x.shape, np.bool_)
                assert ga._binary(op, *args, out=out) is out  # out=
        for arith in (operator.add, operator.mul, operator.floordiv):
            with pytest.raises(
                OverflowError, match="Python integer %d out of bounds for %s" % (value, name)
            ):
                arith(a, value)
    # every comparison operator takes the Python path, which checks the int
    # (the C operators take arithmetic only)
    for nm in ("eq", "ne", "lt", "le", "gt", "ge"):
        assert type(ga.GPUArray.__dict__["__%s__" % nm]) is not _driver._ArrayOperator


@pytest.mark.standin
def test_the_reported_comparisons(standin, ctx):
    """The review's cases: int8 < 1000, uint8 == -1, uint64 < -1 (before:
    OverflowError), and NumPy's answers for them."""
    for dtype, op, value, want in (
        (np.int8, "less", 1000, True),
        (np.uint8, "equal", -1, False),
        (np.uint8, "not_equal", -1, True),
        (np.uint64, "less", -1, False),
        (np.int64, "greater_equal", 2**63, False),
    ):
        x = np.arange(10, dtype=dtype)
        assert (COMPARE[op](x, value) == want).all()
        a = ga.to_gpu(x)
        r = COMPARE[op](a, value)
        assert r.dtype == np.bool_ and r.shape == (10,)
        assert ga._constant_compare(op, a, value) is want


@pytest.mark.standin
@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.int64, np.uint64, np.bool_])
def test_an_in_range_int_comparison_stays_on_the_fast_path(standin, ctx, dtype):
    """The common case is as before: an int the dtype holds takes the
    operators' Python fast path (no general path, no constant), launched
    with the int; a bool array compares in int64, where an int outside it
    is NumPy's OverflowError."""
    a = ga.to_gpu(np.arange(10).astype(dtype))
    for value in (0, 1, int(np.iinfo(np.int8).max)):
        for f in COMPARE.values():
            for _ in range(3):
                r, names = _python_calls(lambda: f(a, value))
                assert r.dtype == np.bool_
                assert "_binary_general" not in names and "_constant_compare" not in names, names
                assert standin.last_launch().params[16:17] == bytes([value])  # z, x, then it
    if dtype is np.bool_:
        with pytest.raises(
            OverflowError, match="Python integer %d out of bounds for int64" % 2**63
        ):
            a < 2**63


def test_uint64_against_a_signed_integer_compares_exactly():
    """_types gives each operand its own 64-bit type (not float64, NumPy's
    result_type) and _expr an exact expression, for every comparison,
    signed dtype and order; other pairs and arithmetic are as before."""
    for sdt in map(np.dtype, SIGNED):
        for op in COMPARE:
            for ka, kb in ((U64, sdt), (sdt, U64)):
                res, comp = ga._types(op, ka, kb)
                want = tuple(U64 if k == U64 else np.dtype(np.int64) for k in (ka, kb))
                assert res == np.bool_ and comp == want, (op, ka, kb, comp)
                expr = ga._expr(op, comp)
                assert "unsigned long long" in expr and "< 0 ?" in expr
                src = elementwise.map_source(op, expr, ("a", "a"), (ka, kb), ga._pair(comp), res)
                body = src[src.index("extern \"C\" __global__") :]
                assert "double" not in body, body
    assert ga._types("less", U64, int) == (np.bool_, U64)  # a Python int: uint64 (NEP 50)
    assert ga._types("less", U64, np.dtype(np.uint32)) == (np.bool_, U64)
    assert ga._types("less", U64, np.dtype(np.float32))[1] == np.float64  # NumPy's too
    assert ga._types("add", U64, np.dtype(np.int64)) == (np.float64, np.float64)
    assert ga._types("logical_and", U64, np.dtype(np.int64))[1] == np.float64


@pytest.mark.skipif(not _nvrtc_ok(), reason="NVRTC not found")
def test_uint64_against_a_signed_integer_kernels_compile_without_floats():
    """NVRTC compiles each exact kernel (contiguous and strided); its PTX
    converts nothing to float64 (before: cvt.rn.f64.u64 and .s64)."""
    for sdt in (np.dtype(np.int8), np.dtype(np.int64)):
        srcs = []
        for k, op in enumerate(COMPARE):
            for ka, kb in ((U64, sdt), (sdt, U64)):
                res, comp = ga._types(op, ka, kb)
                for ndim in (0, 2):
                    name = "%s_%d_%d" % (op, ka == U64, ndim)
                    src = elementwise.map_source(
                        name, ga._expr(op, comp), ("a", "a"), (ka, kb), ga._pair(comp), res, ndim
                    )
                    srcs.append(src if not srcs else src[src.index("extern \"C\" __global__") :])
        ptx = compiler.compile("\n".join(srcs), arch="compute_90", cache_dir=False).decode()
        assert ptx.count(".entry pygpu_") == len(COMPARE) * 4
        assert "f64" not in ptx, re.findall(r".*f64.*", ptx)[:5]


HOST_COMPARE = """
extern "C" void %s(const %s *x0, const %s *x1, bool *z, size_t n)
{
    for (size_t i = 0; i < n; i++)
        %s
}
"""


def _mixed_operands(rng, sdt):
    """(u, s): every pair of uint64 and sdt edge values (2**63 against
    2**63 - 1, 2**53 + 1 against 2**53, negatives), then random values
    near each other and over the whole ranges."""
    info = np.iinfo(sdt)
    ue = [0, 1, 2, 127, 128, 2**31, 2**53, 2**53 + 1, 2**63 - 1, 2**63, 2**63 + 1, 2**64 - 1]
    se = [info.min, info.min + 1, -2, -1, 0, 1, 2, 127, info.max - 1, info.max]
    se += [v for v in (2**31, 2**53, 2**53 + 1, 2**63 - 1) if v <= info.max]
    u = np.array(ue, np.uint64).repeat(len(se))
    s = np.tile(np.array(se, sdt), len(ue))
    n = 5000
    ru = rng.integers(0, 2**64, n, dtype=np.uint64, endpoint=False)
    rs = rng.integers(info.min, info.max, n, dtype=sdt, endpoint=True)
    near = rng.integers(0, info.max, n, dtype=sdt, endpoint=True)
    nu = near.astype(np.uint64) + rng.integers(0, 3, n).astype(np.uint64) - np.uint64(1)
    return np.concatenate([u, ru, nu]), np.concatenate([s, rs, near])


def test_uint64_against_a_signed_integer_equals_numpy_on_the_host(tmp_path, rng):
    """The map kernels' own statement (z[i] = ...; the reads' casts
    included), compiled as host C++: NumPy's answer for every element, every
    comparison, signed dtype and order (before: through float64, so
    2**53 + 1 == 2**53)."""
    import ctypes

    import hostcxx

    from pygpu.tools import dtype_to_ctype

    cases, code = [], []
    for sdt in map(np.dtype, SIGNED):
        for op in COMPARE:
            for ka, kb in ((U64, sdt), (sdt, U64)):
                res, comp = ga._types(op, ka, kb)
                src = elementwise.map_source(
                    op, ga._expr(op, comp), ("a", "a"), (ka, kb), ga._pair(comp), res
                )
                stmt = re.search(r"z\[i\] = .*;", src).group(0)
                name = "c%d" % len(cases)
                code.append(HOST_COMPARE % (name, dtype_to_ctype(ka), dtype_to_ctype(kb), stmt))
                cases.append((name, sdt, op, ka == U64))
    lib = hostcxx.build(tmp_path, "".join(code), "compare")
    operands = {sdt: _mixed_operands(rng, sdt) for sdt in map(np.dtype, SIGNED)}
    for name, sdt, op, u_first in cases:
        u, s = operands[sdt]
        x, y = (u, s) if u_first else (s, u)
        z = np.zeros(u.size, np.bool_)
        getattr(lib, name)(
            *(v.ctypes.data_as(ctypes.c_void_p) for v in (x, y, z)), ctypes.c_size_t(z.size)
        )
        np.testing.assert_array_equal(z, COMPARE[op](x, y), err_msg="%s %s" % (op, sdt))


@pytest.mark.standin
def test_uint64_against_a_signed_integer_launches_the_exact_kernel(standin, ctx, rng):
    """Arrays (the fast path and the general path) and NumPy scalars: a
    bool result from a kernel that reads each operand in its own 64-bit
    type, never float64."""
    u = ga.to_gpu(np.array([2**63, 2**53 + 1, 0, 2**64 - 1], np.uint64))
    i = ga.to_gpu(np.array([2**63 - 1, 2**53, -1, -(2**63)], np.int64))
    elementwise.clear_caches()
    ga._fast_aa.clear()
    for op, f in COMPARE.items():
        for r in (f(u, i), f(i, u), f(u[::2], i[::2]), f(u, np.int64(-1)), f(np.uint64(1), i)):
            assert r.dtype == np.bool_ and r.ndim == 1
        made = _map_keys(op)
        assert made, op
        for expr, kinds, dtypes, cdtypes, ndim in made:
            assert np.dtype(np.float64) not in cdtypes, (op, dtypes, cdtypes)
            assert set(cdtypes) == {U64, np.dtype(np.int64)}
            assert expr == ga._mixed_compare(op, cdtypes)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype,hi,lo", EDGES)
def test_gpu_comparisons_with_any_int_equal_numpy(ctx, rng, dtype, hi, lo):
    """Every comparison of an integer array (values over its whole range,
    its min and max among them) with ints in and out of its range, either
    side, dense and strided: NumPy's answer for every element."""
    info = np.iinfo(dtype)
    x = rng.integers(info.min, info.max, 3001, dtype=dtype, endpoint=True)
    x[:4] = [info.min, info.max, 0, 1]
    a = ga.to_gpu(x)
    for value in [hi - 1, lo + 1, 0, 1] + _out_of_range(dtype, hi, lo):
        for f in COMPARE.values():
            for _ in range(3):
                np.testing.assert_array_equal(f(a, value).get(), f(x, value))
                np.testing.assert_array_equal(f(value, a).get(), f(value, x))
            np.testing.assert_array_equal(f(a[::3], value).get(), f(x[::3], value))
            np.testing.assert_array_equal(f(value, a[1::2]).get(), f(value, x[1::2]))


@pytest.mark.gpu
@pytest.mark.parametrize("sdt", SIGNED)
def test_gpu_uint64_against_a_signed_integer_equals_numpy(ctx, rng, sdt):
    """uint64 against int8..int64 arrays and NumPy scalars, either order,
    dense, strided and broadcast: NumPy's answer for every element (before:
    through float64, u64 [2**63] > i64 [2**63 - 1] was False)."""
    u, s = _mixed_operands(rng, np.dtype(sdt))
    gu, gs = ga.to_gpu(u), ga.to_gpu(s)
    for f in COMPARE.values():
        for _ in range(3):
            np.testing.assert_array_equal(f(gu, gs).get(), f(u, s))
            np.testing.assert_array_equal(f(gs, gu).get(), f(s, u))
        np.testing.assert_array_equal(f(gu[1::3], gs[1::3]).get(), f(u[1::3], s[1::3]))
        bu, bs = u[:64].reshape(64, 1), s[:50].reshape(1, 50)
        np.testing.assert_array_equal(f(ga.to_gpu(bu), ga.to_gpu(bs)).get(), f(bu, bs))
        info = np.iinfo(sdt)
        for v in (sdt(-1), sdt(0), sdt(info.min), sdt(info.max)):
            np.testing.assert_array_equal(f(gu, v).get(), f(u, v))
            np.testing.assert_array_equal(f(v, gu).get(), f(v, u))
        for v in (np.uint64(2**63), np.uint64(2**53 + 1), np.uint64(0)):
            np.testing.assert_array_equal(f(gs, v).get(), f(s, v))
    # the reported cases
    assert (
        ga.to_gpu(np.array([2**63], np.uint64)) > ga.to_gpu(np.array([2**63 - 1], np.int64))
    ).get()[0]
    assert not (
        ga.to_gpu(np.array([2**53 + 1], np.uint64)) == ga.to_gpu(np.array([2**53], np.int64))
    ).get()[0]
