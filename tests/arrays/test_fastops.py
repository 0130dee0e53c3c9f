"""Issue 27: the array operators' steady state in C (src/launch/fastops.c).

GPUArray's arithmetic operators, their reflected and in-place forms are
_ArrayOperators: one C call does the whole small operation (the checks,
the kernel by (context, operand keys), the result, one launch) for exact
GPUArray operands; everything else goes to the Python path with its
semantics unchanged (docs/arrays.md, "The operators' fast path").

`standin` tests run against the driver stand-in (no kernel runs: they
check the driver calls, which path ran, the result's attributes and the
launch's bytes against the Python path's); `gpu` tests check every result
against NumPy on fresh random data.
"""

import gc
import operator
import sys
import tracemalloc

import numpy as np
import pytest

import pygpu.driver as cuda
from pygpu import _driver, gpuarray as ga, graphs

OPS = {
    "add": operator.add,
    "subtract": operator.sub,
    "multiply": operator.mul,
    "true_divide": operator.truediv,
    "floor_divide": operator.floordiv,
    "remainder": operator.mod,
    "power": operator.pow,
}
IOPS = {
    "add": operator.iadd,
    "subtract": operator.isub,
    "multiply": operator.imul,
    "true_divide": operator.itruediv,
    "floor_divide": operator.ifloordiv,
    "remainder": operator.imod,
    "power": operator.ipow,
}
# the Python code the fallbacks run (their code objects' names)
FALLBACKS = {
    "binary",
    "inplace",
    "_binary_general",
    "__radd__",
    "__rsub__",
    "__rmul__",
    "__rtruediv__",
    "__rfloordiv__",
    "__rmod__",
    "__rpow__",
}


def _python_calls(fn):
    """(fn(), the names of the Python functions it called, lambdas aside)."""
    names = []

    def prof(frame, event, arg):
        if event == "call" and frame.f_code.co_name != "<lambda>":
            names.append(frame.f_code.co_name)

    sys.setprofile(prof)
    try:
        r = fn()
    finally:
        sys.setprofile(None)
    return r, names


def _rand(rng, shape, dtype):
    dt = np.dtype(dtype)
    if dt.kind in "iu":
        return rng.integers(1, 50, shape).astype(dt)
    if dt.kind == "c":
        return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dt)
    return (rng.standard_normal(shape) + 3).astype(dt)


def _attrs(a):
    """a's attributes but its memory: its slots (gpuarray._ATTRS), then
    anything else it holds"""
    d = {k: getattr(a, k) for k in ga._ATTRS if k != "gpudata"}
    d.update(getattr(a, "__dict__", {}))
    return d


def _same_launch(l1, l2):
    """the same kernel, configuration and arguments but the result's address"""
    return l1[:8] == l2[:8] and l1.params[8:] == l2.params[8:]


@pytest.fixture
def bc(ctx):
    _driver._block_cache_trim(None, 0)
    yield
    gc.collect()
    _driver._block_cache_trim(None, 0)


# ---------------------------------------------------------------- stand-in


@pytest.mark.standin
def test_operators_are_array_operators():
    for nm in ("add", "sub", "mul", "truediv", "floordiv", "mod", "pow"):
        for form in ("__%s__", "__r%s__", "__i%s__"):
            f = ga.GPUArray.__dict__[form % nm]
            assert type(f) is _driver._ArrayOperator, form % nm
    assert ga.GPUArray.__div__ is ga.GPUArray.__truediv__
    assert ga.GPUArray.__rdiv__ is ga.GPUArray.__rtruediv__
    assert ga.GPUArray.__idiv__ is ga.GPUArray.__itruediv__
    assert ga.GPUArray.__add__ is ga._FAST["add"]
    assert ga.GPUArray.__add__._fallback is ga._OPERATORS["add"]
    assert repr(ga.GPUArray.__add__) == "<pygpu array operator _add>"
    import inspect

    assert str(inspect.signature(ga.GPUArray.__add__)) == "(self, other, /)"


@pytest.mark.standin
@pytest.mark.parametrize("op", sorted(OPS))
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64, np.complex64])
def test_steady_state_is_one_driver_call_and_no_python(standin, ctx, bc, rng, op, dtype):
    """Every form the C path takes: one driver call (the launch), no Python
    function called; the result's attributes and the launch's bytes are the
    Python path's."""
    if op in ("floor_divide", "remainder") and np.dtype(dtype).kind == "c":
        pytest.skip("NumPy has no %s for complex numbers" % op)
    x, y = _rand(rng, 1000, dtype), _rand(rng, 1000, dtype)
    a, b = ga.to_gpu(x), ga.to_gpu(y)
    f, py = OPS[op], ga._OPERATORS[op]
    scalar = 3 if np.dtype(dtype).kind in "iu" else 2.5
    forms = [
        (lambda: f(a, b), lambda: py(a, b)),
        (lambda: f(a, scalar), lambda: py(a, scalar)),
        (lambda: f(scalar, a), lambda: py(scalar, a)),
        (lambda: f(a, 2), lambda: py(a, 2)),
    ]
    if np.dtype(dtype).kind == "c":
        forms = forms[:1]  # a Python scalar with complex arrays: the Python path
    if op == "true_divide" and np.dtype(dtype).kind in "iu":
        forms = []  # an integer quotient is a float64 array: the Python path
    for fast, slow in forms:
        want = slow()
        want_launch = standin.last_launch()
        for _ in range(3):
            fast()
        c0 = standin.calls()
        got, names = _python_calls(fast)
        assert standin.calls() - c0 == 1 and standin.last_launch().name == "pygpu_" + op
        assert names == [], names
        assert type(got) is ga.GPUArray and _attrs(got) == _attrs(want)
        assert got.__dict__ == {} and want.__dict__ == {}
        assert type(got.gpudata) is cuda.DeviceAllocation and got.base is None
        assert got.gpudata is not a.gpudata and got.gpudata is not b.gpudata
        assert _same_launch(standin.last_launch(), want_launch)
    # in place: the same kernel writing x itself, x returned
    if not forms:
        return
    for other in (b, scalar) if np.dtype(dtype).kind != "c" else (b,):
        c = ga.to_gpu(x)
        ptr = c.ptr
        ga._binary(op, c, other, out=c)
        want_launch = standin.last_launch()
        IOPS[op](c, other)
        c0 = standin.calls()
        (r, names) = _python_calls(lambda: IOPS[op](c, other))
        assert standin.calls() - c0 == 1 and names == [], names
        assert r is c and c.ptr == ptr and _same_launch(standin.last_launch(), want_launch)


@pytest.mark.standin
def test_a_small_loop_makes_one_driver_call_an_operation(standin, ctx, bc, rng):
    a = ga.to_gpu(_rand(rng, 1000, np.float32))
    b = ga.to_gpu(_rand(rng, 1000, np.float32))

    def loop():
        for _ in range(100):
            a + b
            a * 2.0
            3.0 - a
            b.__iadd__(a)

    loop()
    _, trace = standin.trace(loop)
    assert trace == ["cuLaunchKernelEx"] * 400, trace[:10]


def _fallback_cases(rng, ctx):
    """(label, thunk, check(result)) for operands the C path leaves to Python."""
    x = _rand(rng, 1000, np.float32)
    a, b = ga.to_gpu(x), ga.to_gpu(_rand(rng, 1000, np.float32))
    ai = ga.to_gpu(_rand(rng, 1000, np.int32))

    class Sub(ga.GPUArray):
        pass

    s = Sub(a.shape, a.dtype)
    own = ga.to_gpu(x, allocator=cuda.mem_alloc)
    from pygpu import tools

    pool = tools.DeviceMemoryPool()
    pooled = ga.to_gpu(x, allocator=pool.allocate)
    a2 = ga.to_gpu(_rand(rng, (10, 100), np.float32))
    row = ga.to_gpu(_rand(rng, 100, np.float32))
    empty = ga.empty(0, np.float32)
    f32, f64, c64 = (np.dtype(t) for t in (np.float32, np.float64, np.complex64))

    def is_(cls, shape, dtype):
        def check(r):
            assert type(r) is cls and r.shape == shape and r.dtype == dtype, (
                type(r),
                r.shape,
                r.dtype,
            )

        return check

    plain = is_(ga.GPUArray, (1000,), f32)
    return [
        ("subclass", lambda: s + a, is_(Sub, (1000,), f32)),
        ("subclass on the right", lambda: a + s, plain),  # (PyCUDA: a's class)
        (
            "own allocator",
            lambda: own * 2.0,
            lambda r: (plain(r), r.allocator is cuda.mem_alloc or pytest.fail("allocator")),
        ),
        ("pooled memory", lambda: pooled + a, plain),
        ("a contiguous view", lambda: a[10:20] + b[10:20], is_(ga.GPUArray, (10,), f32)),
        ("a strided view", lambda: a[::2] - b[::2], is_(ga.GPUArray, (500,), f32)),
        ("broadcasting", lambda: a2 * row, is_(ga.GPUArray, (10, 100), f32)),
        ("empty", lambda: empty + empty, is_(ga.GPUArray, (0,), f32)),
        ("mixed dtypes", lambda: ai + a, is_(ga.GPUArray, (1000,), f64)),
        ("an int quotient", lambda: ai / ai, is_(ga.GPUArray, (1000,), f64)),
        ("a bool scalar", lambda: a + True, plain),
        ("a complex scalar", lambda: a * 1j, is_(ga.GPUArray, (1000,), c64)),
        ("a NumPy scalar", lambda: a * np.float32(2), plain),
        ("an int past 2**53", lambda: a * 2**60, plain),
        ("a scalar on the left of an int array", lambda: 2.5 * ai, is_(ga.GPUArray, (1000,), f64)),
        ("in place, mixed dtypes", lambda: a.__iadd__(ai), plain),
        ("in place, a view", lambda: a[10:20].__imul__(2.0), is_(ga.GPUArray, (10,), f32)),
    ]


@pytest.mark.standin
def test_an_attribute_of_its_own_stays_with_its_array(standin, ctx, bc, rng):
    """GPUArray's attributes are slots (gpuarray._ATTRS); one a user adds
    goes into the array's own __dict__, which a result does not copy, on
    the C path as on the Python path (the C path takes such an array)."""
    x, y = _rand(rng, 1000, np.float32), _rand(rng, 1000, np.float32)
    noted, b = ga.to_gpu(x), ga.to_gpu(y)
    noted.note = "an attribute of its own"
    assert noted.__dict__ == {"note": "an attribute of its own"}
    assert not hasattr(ga.GPUArray, "note")
    for thunk in (lambda: noted + b, lambda: ga._OPERATORS["add"](noted, b)):
        thunk()
        r, names = _python_calls(thunk)
        assert type(r) is ga.GPUArray and r.__dict__ == {} and not hasattr(r, "note")
        assert _attrs(r) == {k: v for k, v in _attrs(noted).items() if k != "note"}
        assert r.gpudata is not noted.gpudata and r.gpudata is not b.gpudata
    _, names = _python_calls(lambda: noted + b)
    assert not FALLBACKS & set(names)


@pytest.mark.standin
def test_what_the_c_path_leaves_goes_to_python_with_its_result(standin, ctx, bc, rng):
    for label, thunk, check in _fallback_cases(rng, ctx):
        thunk()
        r, names = _python_calls(thunk)
        assert FALLBACKS & set(names), (label, names)
        check(r)


@pytest.mark.standin
def test_errors_are_the_python_paths(standin, ctx, bc, rng):
    a = ga.to_gpu(_rand(rng, 1000, np.float32))
    b = ga.to_gpu(_rand(rng, 1000, np.float32))
    ai = ga.to_gpu(_rand(rng, 1000, np.int32))
    a + b, ai**2, ai * 2
    with pytest.raises(
        ValueError,
        match=r"^Integers to negative integer powers are not "
        r"allowed\.$",
    ):
        ai**-1
    with pytest.raises(
        TypeError, match="Cannot cast add output from dtype\\('float64'\\) to dtype\\('int32'\\)"
    ):
        ai += 1.5
    ai **= 2
    with pytest.raises(
        ValueError,
        match=r"^Integers to negative integer powers are not "
        r"allowed\.$",
    ):
        ai **= -1
    with pytest.raises(TypeError, match=r"takes 2 positional arguments but 3 were given"):
        ga.GPUArray.__add__(a, b, b)
    assert ga.GPUArray.__add__(a, y=b).shape == (1000,)  # (the Python path's names)
    assert a.__add__("text") is NotImplemented
    with pytest.raises(TypeError, match="unsupported operand"):
        a + "text"
    c = ga.to_gpu(_rand(rng, 1000, np.float32))
    c.gpudata.free()
    for thunk in (
        lambda: c + b,
        lambda: b + c,
        lambda: c * 2.0,
        lambda: 2.0 * c,
        lambda: c.__iadd__(b),
    ):
        with pytest.raises(cuda.LogicError, match="freed"):
            thunk()
    other = cuda.Device(0).make_context()
    try:
        with pytest.raises(ValueError, match="allocated in another context"):
            a + b
        with pytest.raises(ValueError, match="allocated in another context"):
            a * 2.0
    finally:
        cuda.Context.pop()
        other.detach()
    assert (a + b).shape == (1000,)  # the primary context again: the C path


@pytest.mark.standin
def test_reflected_and_bound_forms(standin, ctx, bc, rng):
    a = ga.to_gpu(_rand(rng, 1000, np.float32))
    b = ga.to_gpu(_rand(rng, 1000, np.float32))
    b - a
    want = standin.last_launch()
    r, names = _python_calls(lambda: a.__rsub__(b))  # b - a
    assert names == [] and _same_launch(standin.last_launch(), want)
    m = a.__sub__
    assert m.__self__ is a and m.__func__ is ga.GPUArray.__sub__
    r, names = _python_calls(lambda: m(b))
    assert not FALLBACKS & set(names) and r.shape == (1000,)


@pytest.mark.standin
def test_the_c_path_learns_from_the_python_path(standin, ctx, bc, rng):
    fast = ga._FAST["multiply"]
    a = ga.to_gpu(_rand(rng, 1000, np.float64))
    fast._forget()
    assert fast._learned() == (0, 0, 0)
    _, names = _python_calls(lambda: a * a)
    assert "binary" in names and fast._learned() == (1, 0, 0)
    _, names = _python_calls(lambda: a * a)
    assert not FALLBACKS & set(names)
    a *= 2.0  # the in-place form teaches the array-scalar kernel
    assert fast._learned() == (1, 1, 0)
    _, names = _python_calls(lambda: a.__imul__(2.0))
    assert not FALLBACKS & set(names)
    2.0 * a
    assert fast._learned() == (1, 1, 1)
    op = _driver._ArrayOperator(
        "_x", lambda x, y: "fallback", ga.GPUArray, ga._default_allocator, ga._ATTRS
    )
    assert op(a, a) == "fallback"  # it learned nothing: the Python path
    with pytest.raises(TypeError, match="object has no slot 'shape'"):
        _driver._ArrayOperator("_x", len, object, None, ga._ATTRS)
    with pytest.raises(TypeError, match="attrs must name '_c'"):
        _driver._ArrayOperator("_x", len, ga.GPUArray, None, ga._ATTRS[:9])
    with pytest.raises(TypeError, match="attrs must be names, not int"):
        _driver._ArrayOperator("_x", len, ga.GPUArray, None, (1,))
    with pytest.raises(TypeError, match="must be tuple, not int"):
        _driver._ArrayOperator("_x", len, ga.GPUArray, None, 12)
    with pytest.raises(TypeError, match="fallback must be callable"):
        _driver._ArrayOperator("_x", None, ga.GPUArray, None, ga._ATTRS)
    with pytest.raises(ValueError, match="mode must be 0, 1 or 2"):
        _driver._ArrayOperator("_x", len, ga.GPUArray, None, ga._ATTRS, None, 5)
    with pytest.raises(TypeError, match="expected a Context and a Function"):
        fast._learn(0, None, a.dtype, a.dtype, None, a.dtype, 0, 0, 4)
    with pytest.raises(ValueError, match="out of range"):
        fast._learn(3, None, a.dtype, a.dtype, None, a.dtype, 0, 0, 4)
    with pytest.raises(TypeError, match="takes 9 arguments"):
        fast._learn(0)


@pytest.mark.standin
def test_inside_a_capture_the_python_path_runs(standin, ctx, bc, rng):
    a = ga.to_gpu(_rand(rng, 1000, np.float32))
    b = ga.to_gpu(_rand(rng, 1000, np.float32))
    a + b
    s = cuda.Stream()
    before = standin.launches()
    with graphs.capture_graph(s) as cap:
        c, names = _python_calls(lambda: a + b)
        d, inames = _python_calls(lambda: c.__iadd__(a))
    assert standin.launches() == before  # recorded, not run
    assert "binary" in names and "inplace" in inames and d is c
    kinds = [n.kind for n in cap.graph.nodes()]
    assert kinds.count("kernel") == 2, kinds
    del cap, c, d
    gc.collect()


@pytest.mark.standin
def test_no_references_or_blocks_leak(standin, ctx, bc, rng):
    a = ga.to_gpu(_rand(rng, 1000, np.float32))
    b = ga.to_gpu(_rand(rng, 1000, np.float32))
    c = ga.to_gpu(_rand(rng, 1000, np.float32))
    fl = 2.5

    def loop(n):
        for _ in range(n):
            a + b
            a * fl
            fl - a
            a * 3
            c.__iadd__(b)
            c.__imul__(fl)

    loop(100)
    watched = [
        a,
        b,
        c,
        a.gpudata,
        b.gpudata,
        c.gpudata,
        a.dtype,
        fl,
        ctx,
        ga._fast_aa[(ctx, "add", a.dtype, b.dtype)][0],
        a.shape,
        a.strides,
    ]
    refs = [sys.getrefcount(o) for o in watched]
    stats = cuda.block_cache(ctx).stats()
    live = standin.live()
    gc.collect()
    objects = len(gc.get_objects())
    tracemalloc.start()
    try:
        loop(200)
        m0 = tracemalloc.get_traced_memory()[0]
        loop(5000)
        m1 = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    gc.collect()
    assert len(gc.get_objects()) <= objects + 10
    assert m1 - m0 < 10000, m1 - m0
    assert [sys.getrefcount(o) for o in watched] == refs
    after = cuda.block_cache(ctx).stats()
    assert (after["cached_blocks"], after["misses"]) == (stats["cached_blocks"], stats["misses"])
    assert standin.live() == live


@pytest.mark.standin
def test_the_small_ops_benchmark_runs(standin, tmp_path):
    import json
    import os
    import subprocess

    out = tmp_path / "small.json"
    script = os.path.join(
        os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
        "benchmarks",
        "small_ops.py",
    )
    r = subprocess.run(
        [sys.executable, script, "--number", "300", "--repeat", "1", "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    got = json.loads(out.read_text())
    assert got["size"] == 1000 and len(got["us"]) == 10
    assert all(v > 0 for v in got["us"].values())
    assert "a + b over the floor" in r.stdout


# ---------------------------------------------------------------- GPU


def _tol(dtype):
    return {"rtol": 2e-6 if np.dtype(dtype) in (np.float32, np.complex64) else 1e-13, "atol": 0}


def _check(got, want, rtol=None):
    assert got.dtype == want.dtype and got.shape == want.shape, (got.dtype, want.dtype)
    if want.dtype.kind in "fc":
        t = _tol(want.dtype)
        if rtol is not None:
            t["rtol"] = rtol
        np.testing.assert_allclose(got, want, **t)
    else:
        np.testing.assert_array_equal(got, want)


def _operands(rng, op, dtype, n=1001):
    x, y = _rand(rng, n, dtype), _rand(rng, n, dtype)
    if op == "power":
        if np.dtype(dtype).kind in "iu":
            x, y = (x % 7 + 1).astype(dtype), (y % 4).astype(dtype)
        elif np.dtype(dtype).kind == "f":
            x, y = np.abs(x).astype(dtype), (y % 3).astype(dtype)
        else:
            x, y = (x / 4).astype(dtype), (y / 4).astype(dtype)
    return x, y


GPU_DTYPES = [np.float32, np.float64, np.int32, np.int64, np.uint32, np.complex64, np.complex128]


@pytest.mark.gpu
@pytest.mark.parametrize("op", sorted(OPS))
@pytest.mark.parametrize("dtype", GPU_DTYPES)
def test_gpu_every_operator_on_the_c_path_equals_numpy(ctx, rng, op, dtype):
    if op in ("floor_divide", "remainder") and np.dtype(dtype).kind == "c":
        pytest.skip("NumPy has no %s for complex numbers" % op)
    f = OPS[op]
    kind = np.dtype(dtype).kind
    scalars = [3, 2.5] if kind in "fc" else [3]
    if op == "power" and kind == "f":
        scalars = [3, 1.5]
    for rep in range(2):  # the second run is the C path (learned in the first)
        x, y = _operands(rng, op, dtype)
        a, b = ga.to_gpu(x), ga.to_gpu(y)
        with np.errstate(all="ignore"):
            _check(f(a, b).get(), f(x, y), 1e-5 if op == "power" else None)
            for s in scalars:
                _check(f(a, s).get(), np.asarray(f(x, s)), 1e-5 if op == "power" else None)
                if op == "power" and kind in "iu":
                    continue  # s ** x overflows
                if op in ("true_divide", "floor_divide", "remainder") and kind in "iu":
                    xs = ga.to_gpu(x)  # (x has no zeros)
                    _check(f(s, xs).get(), np.asarray(f(s, x)))
                    continue
                _check(f(s, a).get(), np.asarray(f(s, x)), 1e-5 if op == "power" else None)
        if rep == 1:
            _, names = _python_calls(lambda: f(a, b))
            if not (op == "true_divide" and kind in "iu"):
                assert not FALLBACKS & set(names), names


@pytest.mark.gpu
@pytest.mark.parametrize("op", sorted(IOPS))
@pytest.mark.parametrize("dtype", GPU_DTYPES)
def test_gpu_in_place_operators_on_the_c_path_equal_numpy(ctx, rng, op, dtype):
    kind = np.dtype(dtype).kind
    if op in ("floor_divide", "remainder") and kind == "c":
        pytest.skip("NumPy has no %s for complex numbers" % op)
    if op == "true_divide" and kind in "iu":
        pytest.skip("an integer quotient cannot be written in place (NumPy refuses too)")
    f = IOPS[op]
    for rep in range(3):
        x, y = _operands(rng, op, dtype)
        a, b = ga.to_gpu(x), ga.to_gpu(y)
        ptr = a.ptr
        want = f(x.copy(), y)
        with np.errstate(all="ignore"):
            r = f(a, b)
        assert r is a and a.ptr == ptr
        _check(a.get(), want, 1e-5 if op == "power" else None)
        s = 2 if op == "power" else 3
        a = ga.to_gpu(x)
        _check(f(a, s).get(), f(x.copy(), s), 1e-5 if op == "power" else None)
        a += a  # x op= x: the same memory on both sides
        _check(a.get(), f(x.copy(), s) * 2, 1e-5 if op == "power" else None)


@pytest.mark.gpu
def test_gpu_many_small_operations_in_a_loop_equal_numpy(ctx, rng):
    """A loop of small operations with no synchronize: each result checked
    after, so a block reused too early would show."""
    xs = [_rand(rng, n, np.float32) for n in (1, 7, 256, 1000, 4097)]
    got, want = [], []
    for _ in range(50):
        for x in xs:
            y = _rand(rng, x.shape, np.float32)
            a, b = ga.to_gpu(x), ga.to_gpu(y)
            c = (a + b) * 2.0 - 1.5 / b
            c += a
            got.append(c)
            want.append((x + y) * np.float32(2.0) - np.float32(1.5) / y + x)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g.get(), w, rtol=1e-5, atol=1e-4)


@pytest.mark.gpu
def test_gpu_subclasses_and_other_allocators_still_equal_numpy(ctx, rng):
    class Sub(ga.GPUArray):
        pass

    x, y = _rand(rng, 1001, np.float32), _rand(rng, 1001, np.float32)
    s = Sub(x.shape, x.dtype)
    s.set(x)
    b = ga.to_gpu(y)
    for f in OPS.values():
        with np.errstate(all="ignore"):
            r = f(s, b)
            assert type(r) is Sub
            _check(r.get(), f(x, y), 1e-5)
            r = f(b, s)
            _check(r.get(), f(y, x), 1e-5)
    from pygpu import tools

    pool = tools.DeviceMemoryPool()
    for alloc in (cuda.mem_alloc, pool.allocate):
        a = ga.to_gpu(x, allocator=alloc)
        r = a * 2.0 + a
        assert r.allocator is alloc
        _check(r.get(), x * np.float32(2.0) + x)
        a += b
        _check(a.get(), x + y)
    v = ga.to_gpu(np.concatenate([x, y]))
    _check((v[:1001] + v[1001:]).get(), x + y)
    _check((v[::2] * 2.0).get(), np.concatenate([x, y])[::2] * np.float32(2.0))
