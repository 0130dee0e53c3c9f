"""The one scalar conversion (src/launch/scalars.c; docs/design.md, "Rules
that hold across files"): a Python int given where an array's dtype is the
parameter's follows NumPy 2's rule on every path -- the operators' C path,
their Python path, the general (broadcasting, out=) path, the reflected and
in-place forms, fill(), and a prepared kernel's typed parameter: out of the
dtype's range it is an OverflowError, never its value modulo 2**bits
(before, `int8_array + 200` added -56 and `uint32_array + (-1)` added
2**32 - 1).

`standin` tests check the error, raised before any launch, and the bytes an
in-range scalar is launched with; `gpu` tests check the results against
NumPy on fresh random data.
"""

import operator

import numpy as np
import pytest

from pygpu import _driver
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
