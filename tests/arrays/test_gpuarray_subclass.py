"""GPUArray subclasses take PyCUDA's paths: an operation's result is made
through the subclass's _new_like_me() wherever PyCUDA makes it so (the
operators, mul_add, astype, reverse, real/imag/conj, the logical functions,
cumath's unary functions), so a subclass whose constructor takes other
arguments (reikna's Array: Array(thread, shape, dtype, ...)) gets its own
type back; views and copy() are GPUArrays, as PyCUDA's are.  An exact
GPUArray keeps its quick paths (they never call _new_like_me).

standin tests check the types, the calls and that the kernel wrote into the
subclass's memory (the launch's first pointer); gpu tests check the values
against NumPy."""

import struct

import numpy as np
import pytest

from pygpu import cumath, gpuarray


class Tagged(gpuarray.GPUArray):
    """reikna's Array's shape: a constructor with other arguments, and a
    _new_like_me that builds through it (and records its calls)."""

    calls = []

    def __init__(self, tag, shape, dtype):
        gpuarray.GPUArray.__init__(self, shape, dtype)
        self.tag = tag

    def _new_like_me(self, dtype=None, order="C"):
        Tagged.calls.append((dtype, order))
        return Tagged(self.tag, self.shape, self.dtype if dtype is None else dtype)


def _tagged(x, tag="t"):
    t = Tagged(tag, x.shape, x.dtype)
    t.set(x)
    return t


def _ptrs(standin):
    """The first two 8-byte parameters of the last launch (the output and
    the first input of pygpu's element-wise kernels, reverse's the other
    way round)."""
    return struct.unpack_from("QQ", standin.last_launch().params)


# (operation, the _new_like_me calls PyCUDA makes, the result's dtype); a, b:
# float32 Tagged arrays of one shape
OPS = [
    ("a + b", [(np.float32, "C")], np.float32),
    ("a - b", [(np.float32, "C")], np.float32),
    ("a * b", [(np.float32, "C")], np.float32),
    ("a / b", [(np.float32, "C")], np.float32),
    ("a ** b", [(np.float32, "C")], np.float32),
    ("a + 2", [(np.float32, "C")], np.float32),
    ("2 + a", [(np.float32, "C")], np.float32),
    ("2 - a", [(np.float32, "C")], np.float32),
    ("3 * a", [(np.float32, "C")], np.float32),
    ("1 / a", [(np.float32, "C")], np.float32),
    ("a ** 2", [(np.float32, "C")], np.float32),
    ("a < b", [(np.bool_, "C")], np.bool_),
    ("a == 0.5", [(np.bool_, "C")], np.bool_),
    ("-a", [(None, "C")], np.float32),
    ("abs(a)", [(None, "C")], np.float32),
    ("a.astype(np.float64)", [(np.float64, "C")], np.float64),
    ("a.mul_add(2.0, b, 3.0)", [(np.float32, "C")], np.float32),
    ("a.reverse()", [(None, "C")], np.float32),
    ("gpuarray.logical_not(a)", [(np.bool_, "C")], np.bool_),
    ("gpuarray.logical_and(a, b)", [(np.bool_, "C")], np.bool_),
    ("cumath.sin(a)", [(None, "C")], np.float32),
]


@pytest.mark.standin
@pytest.mark.parametrize("expr,calls,dtype", OPS, ids=[o[0] for o in OPS])
def test_results_are_made_by_the_subclass(standin, ctx, rng, expr, calls, dtype):
    x = rng.standard_normal(300).astype(np.float32)
    a, b = _tagged(x, "a"), _tagged(x, "b")
    Tagged.calls.clear()
    r = eval(expr, {"a": a, "b": b, "np": np, "gpuarray": gpuarray, "cumath": cumath})
    assert type(r) is Tagged and r.tag == "a"
    assert r.shape == a.shape and r.dtype == dtype
    assert [(None if d is None else np.dtype(d), o) for d, o in Tagged.calls] == [
        (None if d is None else np.dtype(d), o) for d, o in calls
    ]
    # the kernel wrote into the subclass's array
    assert int(r.gpudata) in _ptrs(standin)


@pytest.mark.standin
def test_complex_parts_and_integer_ops_of_a_subclass(standin, ctx, rng):
    z = (rng.standard_normal(64) + 1j * rng.standard_normal(64)).astype(np.complex64)
    c = _tagged(z)
    for expr, call, dt in (
        ("c.real", (np.float32, "C"), np.float32),
        ("c.imag", (np.float32, "C"), np.float32),
        ("c.conj()", (None, "C"), np.complex64),
        ("abs(c)", (np.float32, "C"), np.float32),
    ):
        Tagged.calls.clear()
        r = eval(expr, {"c": c})
        assert type(r) is Tagged and r.dtype == dt, expr
        assert [(None if d is None else np.dtype(d), o) for d, o in Tagged.calls] == [
            (None if call[0] is None else np.dtype(call[0]), call[1])
        ], expr
        assert int(r.gpudata) in _ptrs(standin)
    i = _tagged(rng.integers(-50, 50, 64).astype(np.int32))
    Tagged.calls.clear()
    for r in (~i, i & 3, i | i, i ^ 1, i // 3, i % 7):
        assert type(r) is Tagged and r.dtype == np.int32
    assert len(Tagged.calls) == 6


@pytest.mark.standin
def test_the_first_operand_of_the_results_shape_decides(standin, ctx, rng):
    x = rng.standard_normal((4, 5)).astype(np.float32)
    t, g = _tagged(x), gpuarray.to_gpu(x)
    # as PyCUDA's operators: self's _new_like_me (the other's where self is 0-d)
    assert type(g + t) is gpuarray.GPUArray
    assert type(t + g) is Tagged
    s0 = _tagged(np.float32(2.5).reshape(()))
    Tagged.calls.clear()
    assert type(s0 * g) is gpuarray.GPUArray and Tagged.calls == []
    assert type(g * s0) is gpuarray.GPUArray
    assert type(s0 * t) is Tagged
    # broadcasting: the operand of the result's shape
    row = _tagged(x[0])
    assert type(row + g) is gpuarray.GPUArray and type(row + t) is Tagged


@pytest.mark.standin
def test_in_place_and_out_arguments_make_nothing(standin, ctx, rng):
    x = rng.standard_normal(100).astype(np.float32)
    a, b = _tagged(x), _tagged(x)
    Tagged.calls.clear()
    a += b
    a *= 2
    cumath.exp(a, out=b)
    gpuarray.logical_not(a, out=gpuarray.empty(a.shape, np.bool_))
    assert Tagged.calls == []
    assert type(a) is Tagged


@pytest.mark.standin
def test_views_and_copies_are_gpuarrays_as_pycudas(standin, ctx, rng):
    x = rng.standard_normal((6, 8)).astype(np.float32)
    t = _tagged(x)
    Tagged.calls.clear()
    for v in (
        t[1:4],
        t[2],
        t.reshape(8, 6),
        t.ravel(),
        t.T,
        t.transpose(),
        t.view(np.int32),
        t[None].squeeze(),
        t.swapaxes(0, 1),
        t.copy(),
    ):
        assert type(v) is gpuarray.GPUArray
    assert Tagged.calls == []
    np.testing.assert_array_equal(t[1:4].get(), x[1:4])
    np.testing.assert_array_equal(t.copy().get(), x)
    np.testing.assert_array_equal(t.view(np.int32).get(), x.view(np.int32))
    # astype to its own dtype is copy(), as PyCUDA's
    assert type(t.astype(np.float32)) is gpuarray.GPUArray


@pytest.mark.standin
def test_exact_gpuarrays_never_call_new_like_me(standin, ctx, rng, monkeypatch):
    def refuse(self, dtype=None, order="C"):
        raise AssertionError("the exact-type paths must not call _new_like_me")

    monkeypatch.setattr(gpuarray.GPUArray, "_new_like_me", refuse)
    x = rng.standard_normal((5, 7)).astype(np.float32)
    g = gpuarray.to_gpu(x)
    for r in (
        g + g,
        g * 2,
        2 - g,
        -g,
        abs(g),
        g < g,
        g.astype(np.float64),
        g.mul_add(2.0, g, 1.0),
        cumath.cos(g),
        g + g[0],
        g.T + 1,
        gpuarray.logical_or(g, g),
    ):
        assert type(r) is gpuarray.GPUArray


@pytest.mark.standin
def test_a_subclass_without_its_own_new_like_me(standin, ctx, rng):
    class Plain(gpuarray.GPUArray):
        pass

    x = rng.standard_normal(50).astype(np.float32)
    p = Plain(x.shape, x.dtype)
    p.set(x)
    # GPUArray._new_like_me builds self.__class__(shape, dtype, ...), as PyCUDA's
    for r in (p + p, p * 3, -p, p.astype(np.float64), cumath.sqrt(p)):
        assert type(r) is Plain
    assert (p * 3).shape == p.shape and p.astype(np.float64).dtype == np.float64


@pytest.mark.standin
def test_a_new_like_me_that_returns_no_array_is_named(standin, ctx, rng):
    class Bad(gpuarray.GPUArray):
        def _new_like_me(self, dtype=None, order="C"):
            return np.empty(self.shape, dtype or self.dtype)

    class Short(gpuarray.GPUArray):
        def _new_like_me(self, dtype=None, order="C"):
            return gpuarray.GPUArray((self.size - 1,), dtype or self.dtype)

    x = rng.standard_normal(50).astype(np.float32)
    b = Bad(x.shape, x.dtype)
    for op in (
        lambda: b + b,
        lambda: -b,
        lambda: b.astype(np.float64),
        lambda: cumath.sin(b),
        lambda: b.mul_add(1.0, b, 2.0),
    ):
        with pytest.raises(
            TypeError,
            match=r"Bad._new_like_me\(\) returned ndarray, not a "
            r"GPUArray",
        ):
            op()
    s = Short(x.shape, x.dtype)
    with pytest.raises(
        ValueError,
        match=r"out has shape \(49,\) but the result has shape "
        r"\(50,\)",
    ):
        s + 1
    with pytest.raises(
        ValueError,
        match=r"out has shape \(49,\) but the argument has shape "
        r"\(50,\)",
    ):
        cumath.sin(s)


# ---- on a GPU: the values ----


@pytest.mark.gpu
def test_gpu_subclass_results_against_numpy(ctx, rng):
    x = rng.standard_normal((33, 17)).astype(np.float32)
    y = rng.standard_normal((33, 17)).astype(np.float32) + 3
    a, b = _tagged(x), _tagged(y)
    checks = [
        (a + b, x + y),
        (a - 2, x - 2),
        (2 * a, 2 * x),
        (a / b, x / y),
        (-a, -x),
        (abs(a), np.abs(x)),
        (b**2, y**2),
        (a < b, x < y),
        (a.astype(np.float64), x.astype(np.float64)),
        (a.mul_add(2.0, b, 3.0), 2 * x + 3 * y),
        (a.reverse(), x.ravel()[::-1].reshape(x.shape)),
        (cumath.exp(a), np.exp(x)),
        (gpuarray.logical_not(a > 0), ~(x > 0)),
    ]
    for got, want in checks:
        assert type(got) is Tagged
        np.testing.assert_allclose(got.get(), want, rtol=1e-5, atol=1e-6)
    z = (x + 1j * y).astype(np.complex64)
    c = _tagged(z)
    for got, want in (
        (c.real, z.real),
        (c.imag, z.imag),
        (c.conj(), z.conj()),
        (abs(c), np.abs(z)),
    ):
        assert type(got) is Tagged
        np.testing.assert_allclose(got.get(), want, rtol=1e-5)
