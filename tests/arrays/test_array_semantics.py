"""NumPy's semantics where the array layer once differed (a review's
findings; each test failed before its fix): operands of another item size
with equal byte strides, inputs overlapping the output, the in-place bitwise
operators and the shifts, max/min of nothing, a negative 0-d integer
exponent, big-endian data, arange's dtype without the range on the host.

`standin` tests need no kernel to run (the stand-in's memory is host memory:
copies run, kernels do not); `gpu` tests check every element against NumPy
on fresh random data."""

import tracemalloc

import numpy as np
import pytest

from pygpu import gpuarray as ga
from pygpu._array.gate import _needs_own_copy

standin = pytest.mark.standin
gpu = pytest.mark.gpu


# ---- without kernels ----


@standin
def test_overlap_is_seen_where_elements_do_not_line_up(ctx, rng):
    a = ga.to_gpu(rng.standard_normal((4, 4)).astype(np.float32))
    assert not _needs_own_copy(a, a)  # element for element: safe in place
    assert not _needs_own_copy(a[:2], a[2:])  # apart
    assert _needs_own_copy(a.T, a)  # the same bytes in another order
    assert _needs_own_copy(a[1:], a[:-1])  # another offset
    assert _needs_own_copy(a[0, 0], a)  # a broadcast element
    assert _needs_own_copy(a.view(np.int16)[:, ::2], a)  # another item size


@standin
def test_overlapping_assignment_reads_a_copy(ctx, rng):
    """a[1:] = a[:-1] and a[:] = a[::-1] went through one memcpy_dtod over
    overlapping ranges (undefined in CUDA; 4 and 1.9M wrong elements on an
    H200)."""
    x = rng.standard_normal(4096)
    a = ga.to_gpu(x)
    a[1:] = a[:-1]
    want = x.copy()
    want[1:] = x[:-1]
    np.testing.assert_array_equal(a.get(), want)
    a = ga.to_gpu(x)
    a[:-1] = a[1:]
    want = x.copy()
    want[:-1] = x[1:]
    np.testing.assert_array_equal(a.get(), want)


@standin
def test_in_place_bitwise_operators_write_the_array(ctx, rng):
    """h |= 8 rebound h to a new array (no __ior__): g, the same array, and
    a view's base were left unchanged."""
    x = rng.integers(0, 100, 16).astype(np.int32)
    for op in ("__iand__", "__ior__", "__ixor__", "__ilshift__", "__irshift__"):
        g = ga.to_gpu(x)
        assert getattr(g, op)(3) is g
        v = g[:4]
        assert getattr(v, op)(1) is v and v.base is g
    with pytest.raises(TypeError, match="left_shift is not supported for float64"):
        ga.to_gpu(rng.standard_normal(3)) << 1
    a = ga.to_gpu(x)
    assert (a << 2).dtype == np.int32 and (3 << a).dtype == np.int32
    assert (a >> np.int8(1)).dtype == np.result_type(x, np.int8(1))


@standin
def test_max_and_min_of_nothing_are_errors(ctx):
    for dt in (np.float32, np.int32):
        for f in (ga.max, ga.min):
            with pytest.raises(
                ValueError,
                match="zero-size array to reduction operation %simum which has no identity"
                % f.__name__,
            ):
                f(ga.zeros(0, dt))
        with pytest.raises(ValueError, match="maximum which has no identity"):
            ga.zeros((3, 0), dt).max()


@standin
def test_a_negative_0d_integer_exponent_is_refused(ctx):
    a = ga.to_gpu(np.arange(1, 5, dtype=np.int64))
    for e in (np.array(-1), np.array(-2, np.int8), -1, np.int16(-3)):
        with pytest.raises(ValueError, match="Integers to negative integer powers are not allowed"):
            a**e


@standin
def test_big_endian_data_goes_to_the_gpu_in_its_byte_order(ctx, rng):
    """to_gpu of big-endian data kept the dtype '>i4', which no kernel
    could take ("unable to map dtype '>i4' to a C type")."""
    for dt in (">i4", ">f8", ">c16"):
        x = (rng.standard_normal(7) * 100).astype(dt)
        a = ga.to_gpu(x)
        assert a.dtype == np.dtype(dt).newbyteorder("=") and a.dtype.isnative
        np.testing.assert_array_equal(a.get(), x)
    with pytest.raises(
        TypeError,
        match=r"GPUArray cannot hold dtype >f8: big-endian, not the GPU's byte order "
        r"\(little-endian\); convert it first",
    ):
        ga.GPUArray((3,), ">f8")
    with pytest.raises(TypeError, match="cannot hold dtype >i2"):
        ga.zeros(3, np.int32).view(">i2")


@standin
def test_arange_learns_its_dtype_without_the_range(ctx):
    """arange built the whole range on the host to learn its dtype (160 MB
    for arange(2e7))."""
    for args in (
        (10,),
        (0, 10.0),
        (1.5, 3, 0.5),
        (np.int8(0), np.int16(5), 1),
        (0, 5, np.float32(1)),
    ):
        assert ga.arange(*args).dtype == np.arange(*args).dtype, args
    tracemalloc.start()
    try:
        a = ga.arange(2e7)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert a.dtype == np.float64 and a.size == 20_000_000
    assert peak < 1 << 20, peak


# ---- on a GPU: every element ----


@gpu
def test_gpu_operands_of_another_item_size_with_equal_strides(ctx, rng):
    """float64 x + float32 y[::2] (both strides (8,)): y was read as if
    packed ([0,1,2,3] where NumPy gives [0,2,4,6])."""
    x = rng.standard_normal(1000)
    w = rng.standard_normal(2000).astype(np.float32)
    a, b = ga.to_gpu(x), ga.to_gpu(w)[::2]
    assert a.strides == b.strides
    np.testing.assert_array_equal((a + b).get(), x + w[::2])
    np.testing.assert_array_equal((b + a).get(), w[::2] + x)


@gpu
def test_gpu_overlapping_inputs_read_as_numpy_reads_them(ctx, rng):
    x = rng.standard_normal((512, 512)).astype(np.float32)
    a = ga.to_gpu(x)
    a += a.T  # 8.2M of 16.8M elements wrong at 4096x4096 before
    np.testing.assert_allclose(a.get(), x + x.T, rtol=1e-6)
    y = rng.standard_normal(1 << 20)
    b = ga.to_gpu(y)
    b[:] = b[::-1]
    np.testing.assert_array_equal(b.get(), y[::-1])
    c = ga.to_gpu(y)
    c[1:] += c[:-1]
    want = y.copy()
    want[1:] += y[:-1]
    np.testing.assert_allclose(c.get(), want, rtol=1e-12)
    d = ga.to_gpu(y)
    d -= d[0]  # a broadcast element of the output itself
    np.testing.assert_allclose(d.get(), y - y[0], rtol=1e-12, atol=1e-12)


@gpu
@pytest.mark.parametrize("dt", [np.int8, np.uint8, np.int32, np.uint32, np.int64, np.uint64])
def test_gpu_shifts_and_in_place_bitwise_match_numpy(ctx, rng, dt):
    info = np.iinfo(dt)
    bits = np.dtype(dt).itemsize * 8
    x = rng.integers(info.min, info.max, 4096, dtype=dt, endpoint=True)
    sh = rng.integers(0, bits + 4, 4096).astype(dt)  # some by the width or more
    a, s = ga.to_gpu(x), ga.to_gpu(sh)
    np.testing.assert_array_equal((a << s).get(), np.left_shift(x, sh))
    np.testing.assert_array_equal((a >> s).get(), np.right_shift(x, sh))
    for k in (0, 1, bits - 1, bits, bits + 3):
        np.testing.assert_array_equal((a << k).get(), np.left_shift(x, dt(k)))
        np.testing.assert_array_equal((a >> k).get(), np.right_shift(x, dt(k)))
    m = rng.integers(info.min, info.max, 4096, dtype=dt, endpoint=True)
    for iop, f in (
        ("__iand__", np.bitwise_and),
        ("__ior__", np.bitwise_or),
        ("__ixor__", np.bitwise_xor),
    ):
        g = ga.to_gpu(x)
        h = g
        getattr(h, iop)(ga.to_gpu(m))
        np.testing.assert_array_equal(g.get(), f(x, m))
    if np.dtype(dt).kind == "i":
        neg = ga.to_gpu(np.array([-8, -1, 5], dt))
        by = ga.to_gpu(np.array([-1, 100 % bits + bits, 1], dt))
        np.testing.assert_array_equal(
            (neg >> by).get(), np.right_shift(np.array([-8, -1, 5], dt), by.get())
        )
        np.testing.assert_array_equal(
            (neg << by).get(), np.left_shift(np.array([-8, -1, 5], dt), by.get())
        )
