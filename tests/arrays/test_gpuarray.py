"""pygpu.gpuarray.

driver tests (they run against the stand-in too: allocations and copies
work there, kernels do not run): metadata, views, transfers of dense
layouts, interop (CAI, DLPack), errors.  gpu tests: every operation against
NumPy on fresh random data, every element checked; tolerances stated
(float32 rtol 1e-6 unless said, float64 1e-13, transcendental complex
results 1e-5 / 1e-12).
"""

import operator

import numpy as np
import pytest

import pygpu.driver as drv
import pygpu.gpuarray as ga

REAL = [np.float32, np.float64]
CPLX = [np.complex64, np.complex128]
INTS = [np.int8, np.uint8, np.int32, np.uint32, np.int64]
ALL = INTS + REAL + CPLX


def rand(rng, shape, dtype):
    dtype = np.dtype(dtype)
    if dtype.kind == "f":
        return (rng.standard_normal(shape) * 10).astype(dtype)
    if dtype.kind == "c":
        return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dtype) * 5
    if dtype.kind == "b":
        return rng.integers(0, 2, shape).astype(bool)
    lo = 0 if dtype.kind == "u" else -50
    return rng.integers(lo, 50, shape).astype(dtype)


def tol(dtype):
    dtype = np.dtype(dtype)
    if dtype.kind in "iub":
        return dict(rtol=0, atol=0)
    single = dtype in (np.float32, np.complex64)
    return dict(rtol=2e-6 if single else 1e-13, atol=0)


# ---- metadata, views, transfers (driver: runs against the stand-in) ----

pytestmark = []


@pytest.mark.driver
def test_metadata(ctx):
    a = ga.empty((3, 4), np.float32)
    assert a.shape == (3, 4) and a.dtype == np.float32 and a.size == 12
    assert a.nbytes == 48 and a.itemsize == 4 and a.strides == (16, 4) and a.ndim == 2
    assert a.mem_size == 12 and len(a) == 3
    assert a.flags.c_contiguous and not a.flags.f_contiguous and a.flags.forc
    assert a.ptr == int(a.gpudata) and a.ptr != 0
    f = ga.empty((3, 4), np.float32, order="F")
    assert f.strides == (4, 12) and f.flags.f_contiguous and not f.flags.c_contiguous
    assert ga.empty(np.int32(17), np.float32).shape == (17,)
    assert ga.empty(np.array([2, 3]), np.float32).shape == (2, 3)
    assert ga.empty(np.array(3), np.float32).shape == (3,)
    assert ga.zeros(10).dtype == np.float64
    grid, block = a._grid, a._block
    assert len(grid) == 2 and len(block) == 3 and grid[0] * block[0] >= 12 or grid[0] > 0
    assert ga.splay(10**8)[1] == (256, 1, 1)
    z = ga.empty((0, 5), np.float64)
    assert z.size == 0 and z.gpudata is None and z.get().shape == (0, 5)


@pytest.mark.driver
def test_remembered_layouts_and_empty_like_match_the_checked_path(ctx, rng):
    # a new array of an (exact int) shape and dtype seen before takes its
    # layout from a table, and empty_like of a dense array copies its
    # layout: both must equal what the checked constructor makes
    def meta(a):
        return (
            a.shape,
            a.dtype,
            a.strides,
            a.size,
            a.nbytes,
            a.itemsize,
            a._c,
            a._f,
            a.allocator,
            a.base,
        )

    for _ in range(60):
        ndim = int(rng.integers(0, 4))
        shape = tuple(int(v) for v in rng.integers(0, 6, ndim))
        dtype = np.dtype(rng.choice(["f4", "f8", "c8", "i2", "u1", "?"]))
        order = str(rng.choice(["C", "F"]))
        checked = ga.GPUArray(list(shape), dtype, order=order)  # a list: not remembered
        for _ in range(2):  # the second from the table
            a = ga.GPUArray(shape, dtype, order=order)
            assert meta(a) == meta(checked)
            assert (a.gpudata is None) == (a.size == 0)
            assert a.gpudata is None or a.gpudata is not checked.gpudata
        e = ga.empty_like(a)
        ref = ga._like(a, None, "K")
        assert meta(e) == meta(ref) and e.__class__ is ga.GPUArray
        assert e.gpudata is None or e.gpudata is not a.gpudata
    # a bad shape is refused every time (nothing is remembered for it)
    for _ in range(2):
        with pytest.raises(ValueError, match="negative dimensions"):
            ga.GPUArray((3, -1), np.float32)
        with pytest.raises(ValueError, match="order must be 'C' or 'F'"):
            ga.GPUArray((3,), np.float32, order="K")
    # equal dtypes that differ in char, metadata or alignment: each array
    # has the one it asked for
    for first, second in (
        (np.dtype("l"), np.dtype("q")),
        (np.dtype(np.float32, metadata={"unit": "m"}), np.dtype(np.float32)),
        (np.dtype([("a", "f4"), ("b", "f8")]), np.dtype([("a", "f4"), ("b", "f8")], align=True)),
    ):
        for dt in (first, second, first):
            got = ga.GPUArray((3,), dt).dtype
            assert got is dt or (
                got == dt
                and got.char == dt.char
                and got.metadata == dt.metadata
                and got.isalignedstruct == dt.isalignedstruct
            )
            assert got.itemsize == dt.itemsize
    # a NumPy scalar as the dtype: its own dtype, never a remembered equal one
    assert ga.GPUArray(3, np.float32(1.0)).dtype == np.float32
    assert ga.GPUArray(3, np.float64(1.0)).dtype == np.float64
    # an unhashable dtype description still works
    st = ga.GPUArray((2,), [("a", "f4"), ("b", "i8")])
    want = np.dtype([("a", "f4"), ("b", "i8")])
    assert st.dtype == want and st.strides == (want.itemsize,)


@pytest.mark.driver
def test_bad_construction(ctx):
    with pytest.raises(TypeError, match="Python objects have no device representation"):
        ga.empty(3, object)
    with pytest.raises(ValueError, match="negative dimensions are not allowed"):
        ga.empty((3, -1), np.float32)
    with pytest.raises(TypeError, match="shape entries must be ints"):
        ga.empty((3, 2.5), np.float32)
    with pytest.raises(ValueError, match="order must be 'C' or 'F'"):
        ga.empty(3, np.float32, order="X")
    with pytest.raises(ValueError, match="leave gaps or overlap"):
        ga.empty((3, 4), np.float32, strides=(4, 4))
    with pytest.raises(TypeError, match="to_gpu\\(\\) takes a host"):
        ga.to_gpu(ga.zeros(3))
    with pytest.raises(TypeError, match="Python objects"):
        ga.to_gpu(np.array([1, "a"], dtype=object))


@pytest.mark.driver
@pytest.mark.parametrize("order", ["C", "F"])
@pytest.mark.parametrize("dtype", ALL + [np.bool_])
def test_roundtrip(ctx, rng, dtype, order):
    host = np.asarray(rand(rng, (7, 5, 3), dtype), order=order)
    a = ga.to_gpu(host)
    assert a.strides == host.strides
    back = a.get()
    assert back.dtype == host.dtype and back.strides == host.strides
    np.testing.assert_array_equal(back, host)
    c = a.copy()
    assert c.strides == host.strides and c.gpudata != a.gpudata
    np.testing.assert_array_equal(c.get(), host)
    out = np.empty_like(host)
    assert a.get(ary=out) is out
    np.testing.assert_array_equal(out, host)
    a2 = ga.empty(host.shape, dtype, order=order)
    a2.set(host)
    np.testing.assert_array_equal(a2.get(), host)


@pytest.mark.driver
def test_async_transfers_and_pagelocked(ctx, rng):
    host = rand(rng, (1000,), np.float64)
    s = drv.Stream()
    a = ga.to_gpu_async(host, stream=s)
    back = a.get_async(stream=s)
    s.synchronize()
    np.testing.assert_array_equal(back, host)
    pl = a.get(pagelocked=True)
    np.testing.assert_array_equal(pl, host)
    b = ga.empty_like(a)
    b.set_async(host, stream=s)
    s.synchronize()
    np.testing.assert_array_equal(b.get(), host)


@pytest.mark.driver
def test_transfer_errors(ctx):
    a = ga.zeros((4, 4), np.float32)
    with pytest.raises(ValueError, match="same size \\(15 != 16\\)"):
        a.set(np.zeros(15, np.float32))
    with pytest.raises(ValueError, match="same dtype \\(float64 != float32\\)"):
        a.set(np.zeros((4, 4)))
    with pytest.raises(TypeError, match="same dtype \\(float32 != float64\\)"):
        a.get(ary=np.zeros((4, 4)))
    with pytest.raises(ValueError, match="same size"):
        a.get(ary=np.zeros(3, np.float32))
    with pytest.raises(TypeError, match="extra keyword arguments specified: bogus"):
        a.get(bogus=1)
    with pytest.warns(UserWarning, match="different shape"):
        a.set(np.zeros(16, np.float32))


@pytest.mark.driver
def test_views(ctx, rng):
    host = rand(rng, (6, 8), np.float32)
    a = ga.to_gpu(host)
    cases = [
        np.s_[1:3],
        np.s_[:, 2],
        np.s_[2, 3:7],
        np.s_[..., 1],
        np.s_[:, None],
        np.s_[None, 1],
        np.s_[-1],
        np.s_[1:5, ...],
        np.s_[0:1, 1:2],
        np.s_[:, ::2],
        np.s_[::-1],
        np.s_[5:1:-2, ::3],
        np.s_[4:2],
        np.s_[-3:],
    ]
    for idx in cases:
        v, h = a[idx], host[idx]
        assert v.shape == h.shape, idx
        assert v.strides == h.strides, idx
        assert v.flags.c_contiguous == h.flags.c_contiguous, idx
        assert v.base is a
        if v.size:
            off = h.__array_interface__["data"][0] - host.__array_interface__["data"][0]
            assert v.ptr == a.ptr + off, idx
    t = a.T
    assert t.shape == (8, 6) and t.strides == (4, 32) and t.flags.f_contiguous
    assert a.transpose((1, 0)).strides == t.strides
    np.testing.assert_array_equal(t.get(), host.T)  # dense: a plain copy
    assert a.swapaxes(0, 1).shape == (8, 6)
    assert a.reshape(4, 12).shape == (4, 12) and a.reshape((2, -1, 4)).shape == (2, 6, 4)
    assert a.reshape([48]).shape == (48,) and a.ravel().shape == (48,)
    assert a.reshape(6, 8) is a
    np.testing.assert_array_equal(a.reshape(4, 12).get(), host.reshape(4, 12))
    with pytest.raises(ValueError, match="can only specify one unknown dimension"):
        a.reshape(-1, -1, 4)
    with pytest.raises(ValueError, match="cannot reshape array of size 48 into shape"):
        a.reshape(5, 10)
    assert a.reshape((4, 12), order="F").flags.f_contiguous
    vv = a.view(np.complex64)
    assert vv.shape == (6, 4) and vv.dtype == np.complex64
    assert a.view(np.int16).shape == (6, 16) and a.view().shape == a.shape
    with pytest.raises(ValueError, match="does not divide into items"):
        a[:, :3].view(np.float64)
    s = ga.zeros((40, 2, 5, 100))[0:1, 1:2]
    assert s.flags.c_contiguous and s.squeeze().shape == (5, 100)
    assert s.squeeze().flags.c_contiguous
    assert not ga.zeros((40, 2, 5, 100))[:, :, 2:3].squeeze().flags.c_contiguous


@pytest.mark.driver
def test_index_errors(ctx):
    a = ga.zeros((3, 4), np.float32)
    with pytest.raises(IndexError, match="index 3 is out of bounds for axis 0 with size 3"):
        a[3]
    with pytest.raises(IndexError, match="too many indices for array: array is 2-dimensional"):
        a[1, 2, 3]
    with pytest.raises(IndexError, match="single ellipsis"):
        a[..., ...]
    with pytest.raises(IndexError, match="use gpuarray.take for an index array"):
        a[ga.zeros(2, np.int32)]
    with pytest.raises(IndexError, match="invalid index 'x'"):
        a["x"]
    with pytest.raises(TypeError, match="len\\(\\) of unsized object"):
        len(ga.zeros((), np.float32))
    with pytest.raises(TypeError, match="not hashable"):
        hash(a)
    with pytest.raises(ValueError, match="truth value of an array with more than one"):
        bool(a)


@pytest.mark.driver
@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.complex64, np.float64])
def test_repr_str_format_are_pycudas(dtype, ctx, rng):
    # PyCUDA's GPUArray prints as its contents: repr() is NumPy's repr of
    # get() ("array([...], dtype=float32)", as CuPy's), str() NumPy's str;
    # format() is object's (str() for an empty spec, no other spec)
    for shape in [(7,), (3, 4), (), (0,), (2, 1, 3)]:
        h = np.asarray(rand(rng, shape, dtype))
        a = ga.to_gpu(h)
        assert repr(a) == repr(h) and str(a) == str(h)
        assert format(a) == str(h) and "%s|%r" % (a, a) == "%s|%r" % (h, h)
        assert f"{a}" == str(h)
        with pytest.raises(
            TypeError, match="unsupported format string passed to GPUArray.__format__"
        ):
            format(a, ".2f")
    big = ga.to_gpu(rand(rng, 5000, dtype))
    assert repr(big) == repr(big.get()) and "..." in repr(big)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [np.float32, np.complex128])
def test_repr_of_a_strided_view_is_its_elements(dtype, ctx, rng):
    # a non-contiguous view prints its own elements (its get() gathers them)
    h = rand(rng, (6, 8), dtype)
    v = ga.to_gpu(h)[1:5:2, ::3]
    assert repr(v) == repr(h[1:5:2, ::3]) and str(v) == str(h[1:5:2, ::3])
    assert repr(v).startswith("array(")


@pytest.mark.driver
def test_len_bool_hash_flags_are_pycudas(ctx, rng):
    h = rand(rng, (5, 3), np.float32)
    a = ga.to_gpu(h)
    assert len(a) == 5 and len(a[1]) == 3
    with pytest.raises(TypeError, match=r"^len\(\) of unsized object$"):
        len(ga.to_gpu(np.float32(2.5)))
    with pytest.raises(TypeError, match=r"^GPUArrays are not hashable\.$"):
        hash(a)
    assert a.__hash__ is not None  # PyCUDA's raises rather than being None
    with pytest.raises(
        ValueError,
        match=r"^The truth value of an array with more than one "
        r"element is ambiguous\. Use a\.any\(\) or a\.all\(\)$",
    ):
        bool(a)
    with pytest.raises(ValueError, match="truth value of an array with more than one"):
        bool(ga.empty(0, np.float32))
    for value in (0.0, 3.5, -1.0):
        for shape in ((), (1,), (1, 1)):
            assert bool(ga.to_gpu(np.full(shape, value, np.float32))) is bool(value)
    assert repr(a.flags) == "  C_CONTIGUOUS : True\n  F_CONTIGUOUS : False"
    assert str(a.flags) == repr(a.flags)
    assert repr(a[:, ::2].flags) == "  C_CONTIGUOUS : False\n  F_CONTIGUOUS : False"


@pytest.mark.driver
def test_like_functions(ctx, rng):
    z = ga.to_gpu(rand(rng, (16, 16), np.float32))
    zf = ga.to_gpu(np.asfortranarray(rand(rng, (16, 16), np.float32)))
    for func in (ga.empty_like, ga.zeros_like):
        for arr in (z, zf):
            n = func(arr, order="A")
            assert (n.flags.c_contiguous, n.flags.f_contiguous) == (
                arr.flags.c_contiguous,
                arr.flags.f_contiguous,
            )
            assert func(arr, order="C").flags.c_contiguous
            assert func(arr, order="F").flags.f_contiguous
            n = func(arr, dtype=np.complex64, order="K")
            assert n.dtype == np.complex64 and n.flags.f_contiguous == arr.flags.f_contiguous
    np.testing.assert_array_equal(ga.zeros_like(z).get(), np.zeros((16, 16), np.float32))
    t = ga.to_gpu(np.arange(60.0).reshape(3, 4, 5).swapaxes(1, 2))
    k = ga.empty_like(t)
    assert k.strides == t.strides


@pytest.mark.driver
def test_cuda_array_interface(ctx, rng):
    a = ga.to_gpu(rand(rng, (3, 4), np.float64))
    cai = a.__cuda_array_interface__
    assert cai["version"] == 3 and cai["shape"] == (3, 4) and cai["typestr"] == "<f8"
    assert cai["data"] == (a.ptr, False) and cai["strides"] == a.strides and cai["stream"] is None
    assert a.T.__cuda_array_interface__["strides"] == (8, 32)

    class Foreign:
        def __init__(self, cai):
            self.__cuda_array_interface__ = cai

    f = Foreign(dict(a.T.__cuda_array_interface__))
    w = ga.asarray(f)
    assert w.shape == (4, 3) and w.strides == (8, 32) and w.ptr == a.ptr and w.base is f
    np.testing.assert_array_equal(w.get(), a.get().T)
    assert ga.asarray(a) is a
    with pytest.raises(TypeError, match="a NumPy array is in host memory"):
        ga.asarray(np.zeros(3))
    with pytest.raises(TypeError, match="takes an object with __cuda_array_interface__"):
        ga.asarray(3)
    with pytest.raises(TypeError, match="does not copy: the array is float64, not float32"):
        ga.asarray(a, np.float32)
    with pytest.raises(TypeError, match="invalid __cuda_array_interface__"):
        ga.asarray(Foreign({"shape": (3,)}))
    with pytest.raises(ValueError, match="'stream' 0 is disallowed"):
        ga.asarray(Foreign(dict(cai, stream=0)))
    with pytest.raises(TypeError, match="Python objects have no device"):
        ga.asarray(Foreign(dict(cai, typestr="|O")))


@pytest.mark.driver
def test_dlpack_roundtrip(ctx, rng):
    from pygpu import _dlpack

    host = rand(rng, (5, 6), np.complex64)
    a = ga.to_gpu(host)
    assert a.__dlpack_device__() == (2, drv.Context.get_device().ordinal)
    live = len(_dlpack._live)

    class Producer:
        def __init__(self, arr):
            self.arr = arr

        def __dlpack__(self, **kw):
            return self.arr.__dlpack__(**kw)

        def __dlpack_device__(self):
            return self.arr.__dlpack_device__()

    for src in (a, a.T, a[1:4, ::2]):
        w = ga.asarray(Producer(src))
        assert (w.shape, w.strides, w.ptr, w.dtype) == (src.shape, src.strides, src.ptr, src.dtype)
        if src._dense:
            np.testing.assert_array_equal(w.get(), src.get())
        del w
    import gc

    gc.collect()
    assert len(_dlpack._live) == live  # every consumed tensor was deleted
    cap = a.__dlpack__()
    assert len(_dlpack._live) == live + 1
    del cap  # never consumed: freed by the capsule
    gc.collect()
    assert len(_dlpack._live) == live
    with pytest.raises(BufferError, match="copy=True"):
        a.__dlpack__(copy=True)
    with pytest.raises(BufferError, match="cannot be exported to"):
        a.__dlpack__(dl_device=(1, 0))
    with pytest.raises(BufferError, match="cannot describe dtype"):
        ga.empty(3, ga.vec.float3).__dlpack__()


@pytest.mark.driver
def test_vec_types(ctx):
    assert ga.vec.float3 == np.dtype([("x", "<f4"), ("y", "<f4"), ("z", "<f4")])
    v = ga.vec.make_float4(1, 2, 3, 4)
    assert v.dtype == ga.vec.float4 and v["w"] == 4
    assert ga.vec.double2.itemsize == 16 and ga.vec.uchar3.itemsize == 3
    from pygpu.tools import dtype_to_ctype

    assert dtype_to_ctype(ga.vec.int2) == "int2"
    with pytest.raises(TypeError, match="takes 3 values \\(x, y, z\\), got 2"):
        ga.vec.make_float3(1, 2)


@pytest.mark.driver
def test_operator_errors(ctx):
    a = ga.zeros((4, 3), np.float32)
    with pytest.raises(
        ValueError, match="could not be broadcast together with shapes \\(4, 3\\) \\(4,\\)"
    ):
        a + ga.zeros(4, np.float32)
    with pytest.raises(TypeError, match="a NumPy array is in host memory"):
        a + np.zeros((4, 3), np.float32)
    with pytest.raises(TypeError, match="unsupported operand"):
        a + "x"
    with pytest.raises(
        TypeError, match="Cannot cast add output from dtype\\('float64'\\) to dtype\\('int32'\\)"
    ):
        i = ga.zeros(3, np.int32)
        i += 1.5
    with pytest.raises(TypeError, match="boolean negative"):
        -ga.zeros(3, np.bool_)
    with pytest.raises(TypeError, match="subtract is not supported for bool and bool"):
        ga.zeros(3, np.bool_) - ga.zeros(3, np.bool_)
    with pytest.raises(TypeError, match="not supported for complex"):
        ga.maximum(ga.zeros(3, np.complex64), ga.zeros(3, np.complex64))
    with pytest.raises(ValueError, match="Integers to negative integer powers"):
        ga.zeros(3, np.int32) ** -1
    with pytest.raises(OverflowError):
        ga.zeros(3, np.int8) + 1000
    with pytest.raises(ValueError, match="out has shape \\(2,\\) but the result has shape"):
        ga._binary("add", a, a, out=ga.zeros(2, np.float32))
    with pytest.raises(RuntimeError, match="only contiguous arrays"):
        a[:, 1].reverse()
    with pytest.raises(ValueError, match="shapes do not match"):
        ga.if_positive(a, a, ga.zeros(3, np.float32))
    with pytest.raises(ValueError, match="dtypes do not match"):
        ga.if_positive(a, a, ga.zeros((4, 3), np.float64))
    with pytest.raises(ValueError, match="residual not matching"):
        ga.concatenate([a, ga.zeros((4, 2), np.float32)])
    with pytest.raises(ValueError, match="all input arrays must have the same shape"):
        ga.stack([a, ga.zeros((4, 2), np.float32)])
    with pytest.raises(TypeError, match="indices must be integers"):
        ga.take(a, ga.zeros(3, np.float32))


@pytest.mark.driver
def test_other_context_refused(ctx):
    a = ga.zeros(4, np.float32)
    other = drv.Device(0).make_context()
    try:
        with pytest.raises(ValueError, match="allocated in another context"):
            ga._map("copy", "{0}", [a[::2]], None, None, np.float32)
    finally:
        drv.Context.pop()
        other.detach()


@pytest.mark.driver
def test_pickle(ctx, rng):
    import pickle

    host = rand(rng, (3, 5), np.float32)
    b = pickle.loads(pickle.dumps(ga.to_gpu(host)))
    np.testing.assert_array_equal(b.get(), host)


@pytest.mark.driver
def test_allocator_used(ctx):
    calls = []

    def alloc(n):
        calls.append(n)
        return drv.mem_alloc(n)

    a = ga.empty((10,), np.float64, allocator=alloc)
    assert calls == [80] and a.allocator is alloc
    assert ga.zeros_like(a).allocator is alloc


# ---- on the GPU: every operation against NumPy ----

BINOPS = [
    operator.add,
    operator.sub,
    operator.mul,
    operator.truediv,
    operator.pow,
    operator.eq,
    operator.ne,
    operator.lt,
    operator.le,
    operator.gt,
    operator.ge,
]


def _np_ok(op, x, y):
    try:
        with np.errstate(all="ignore"):
            return op(x, y)
    except (TypeError, ValueError):
        return None


def _check(got, want, dtype=None):
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    assert got.shape == want.shape
    t = tol(want.dtype if dtype is None else dtype)
    if want.dtype.kind in "fc":
        np.testing.assert_allclose(got, want, equal_nan=True, **t)
    else:
        np.testing.assert_array_equal(got, want)


@pytest.mark.gpu
@pytest.mark.parametrize("op", BINOPS, ids=lambda o: o.__name__)
@pytest.mark.parametrize(
    "ldt", [np.int32, np.int64, np.float32, np.float64, np.complex64, np.complex128]
)
@pytest.mark.parametrize("rdt", [np.int32, np.float32, np.float64, np.complex64, np.complex128])
def test_binary_array_array(ctx, rng, op, ldt, rdt):
    x, y = rand(rng, (37, 11), ldt), rand(rng, (37, 11), rdt)
    if op is operator.pow:
        x = np.abs(x) % 3 + 1 if np.dtype(ldt).kind != "c" else x / 5
        y = (np.abs(y) % 4) if np.dtype(rdt).kind != "c" else y / 5
        x, y = x.astype(ldt), y.astype(rdt)
    if op is operator.truediv:
        y[y == 0] = 1
    want = _np_ok(op, x, y)
    if want is None:
        with pytest.raises(TypeError):
            op(ga.to_gpu(x), ga.to_gpu(y))
        return
    got = op(ga.to_gpu(x), ga.to_gpu(y)).get()
    rt = np.result_type(ldt, rdt)
    if op is operator.pow and rt.kind in "fc":
        assert got.dtype == want.dtype
        np.testing.assert_allclose(got, want, rtol=1e-5 if rt.itemsize <= 8 else 1e-12)
        return
    _check(got, want, rt)


@pytest.mark.gpu
@pytest.mark.parametrize("op", BINOPS, ids=lambda o: o.__name__)
@pytest.mark.parametrize("dt", [np.int32, np.float32, np.float64, np.complex64])
@pytest.mark.parametrize("scalar", [3, 2.5, 1.5 - 2j, np.float64(1.25), np.int16(2)])
def test_binary_array_scalar(ctx, rng, op, dt, scalar):
    x = rand(rng, (1001,), dt)
    if np.dtype(dt).kind != "c" and op is operator.pow:
        x = np.abs(x) % 5 + 1
    for reflected in (False, True):
        f = (lambda a, s: op(s, a)) if reflected else op
        want = _np_ok(f, x, scalar)
        if want is None:
            with pytest.raises((TypeError, ValueError)):
                f(ga.to_gpu(x), scalar)
            continue
        got = f(ga.to_gpu(x), scalar).get()
        want = np.asarray(want)
        assert got.dtype == want.dtype
        if want.dtype.kind in "fc":
            rtol = 1e-5 if op is operator.pow else tol(want.dtype)["rtol"]
            np.testing.assert_allclose(got, want, rtol=rtol, atol=1e-30)
        else:
            np.testing.assert_array_equal(got, want)


@pytest.mark.gpu
@pytest.mark.parametrize(
    "op", [operator.iadd, operator.isub, operator.imul, operator.itruediv, operator.ipow]
)
@pytest.mark.parametrize("dt", [np.float32, np.float64, np.complex64])
def test_inplace(ctx, rng, op, dt):
    x = rand(rng, (513,), dt)
    y = rand(rng, (513,), np.float32)
    if op is operator.ipow:
        x = (np.abs(x) + 1).astype(dt)
        y = (np.abs(y) % 3).astype(np.float32)
    a = ga.to_gpu(x)
    ptr = a.ptr
    a2 = op(a, ga.to_gpu(y))
    assert a2 is a and a.ptr == ptr
    want = op(x.copy(), y)
    np.testing.assert_allclose(a.get(), want, rtol=1e-5 if op is operator.ipow else 2e-6)
    a3 = op(ga.to_gpu(x), 3)
    np.testing.assert_allclose(a3.get(), op(x.copy(), 3), rtol=1e-5)


@pytest.mark.gpu
def test_broadcast_and_strided_operands(ctx, rng):
    x = rand(rng, (6, 1, 5), np.float32)
    y = rand(rng, (4, 5), np.float64)
    _check((ga.to_gpu(x) + ga.to_gpu(y)).get(), x + y)
    _check((ga.to_gpu(x) * ga.to_gpu(y)[1]).get(), x * y[1])
    big = rand(rng, (20, 30), np.complex64)
    g = ga.to_gpu(big)
    for view in (np.s_[::2, 1::3], np.s_[::-1, 5:], np.s_[3], np.s_[:, ::-2]):
        _check((g[view] * 2).get(), big[view] * 2)
        _check((g[view] - g[view].conj()).get(), big[view] - np.conj(big[view]))
    _check((g.T + g.T).get(), big.T + big.T)
    _check((g[::2].T + 1).get(), big[::2].T + 1)
    z0 = ga.to_gpu(np.array(2.5, np.float32))
    _check((g + z0).get(), big + np.float32(2.5))
    _check((z0 - g).get(), np.float32(2.5) - big)
    out = ga.empty((4, 5), np.float64)
    r = ga._binary("add", ga.to_gpu(y), 1.0, out=out)
    assert r is out
    _check(out.get(), y + 1.0)
    o2 = ga.zeros((20, 30), np.complex64)
    ga._binary("multiply", g[:, ::2], 2, out=o2[:, 1::2])
    want = np.zeros((20, 30), np.complex64)
    want[:, 1::2] = big[:, ::2] * 2
    _check(o2.get(), want)


@pytest.mark.gpu
@pytest.mark.parametrize("dt", ALL)
def test_unary(ctx, rng, dt):
    x = rand(rng, (2049,), dt)
    a = ga.to_gpu(x)
    if np.dtype(dt).kind != "u":
        _check((-a).get(), -x)
    assert +a is a
    want = np.abs(x)
    got = abs(a).get()
    assert got.dtype == want.dtype
    np.testing.assert_allclose(got, want, rtol=2e-7 if want.dtype == np.float32 else 1e-15)
    _check(ga.logical_not(a).get(), np.logical_not(x))
    if np.dtype(dt).kind in "iu":
        _check((~a).get(), ~x)


@pytest.mark.gpu
@pytest.mark.parametrize("dt", CPLX + REAL)
def test_complex_parts(ctx, rng, dt):
    z = rand(rng, (50, 3), dt)
    a = ga.to_gpu(z)
    _check(a.real.get(), np.ascontiguousarray(z.real))
    _check(a.imag.get(), np.ascontiguousarray(z.imag))
    _check(a.conj().get(), np.conj(z))
    if np.dtype(dt).kind == "c":
        out = ga.empty((50, 3), np.complex64)
        assert a.conj(out=out) is out
        np.testing.assert_allclose(out.get(), np.conj(z).astype(np.complex64), rtol=1e-6)
        for order in "CF":
            zz = a.reshape(a.shape, order=order)
            flag = "c_contiguous" if order == "C" else "f_contiguous"
            assert getattr(zz.real.flags, flag) and getattr(zz.imag.flags, flag)
            assert getattr(zz.conj().flags, flag)
        f = ga.to_gpu(np.asfortranarray(z))
        _check(f[::2].real.get(), np.ascontiguousarray(z[::2].real))


@pytest.mark.gpu
@pytest.mark.parametrize("src", ALL + [np.bool_])
@pytest.mark.parametrize(
    "dst", [np.int32, np.uint8, np.float32, np.float64, np.complex64, np.complex128, np.bool_]
)
def test_astype(ctx, rng, src, dst):
    x = rand(rng, (333,), src)
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want = x.astype(dst)
    if np.dtype(src).kind in "fc" and np.dtype(dst).kind in "iu":
        x = np.trunc(np.clip(x.real if np.dtype(src).kind == "c" else x, 0, 100)).astype(src)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            want = x.astype(dst)
    got = ga.to_gpu(x).astype(dst).get()
    _check(got, want)


@pytest.mark.gpu
@pytest.mark.parametrize("dt", ALL + [np.bool_, np.uint64])
def test_fill_zeros_ones_arange(ctx, rng, dt):
    v = rand(rng, (1,), dt)[0]
    a = ga.empty((17, 3), dt)
    assert a.fill(v) is a
    _check(a.get(), np.full((17, 3), v, dt))
    a[:, 1] = rand(rng, (1,), dt)[0]
    h = np.full((17, 3), v, dt)
    h[:, 1] = a.get()[0, 1]
    _check(a.get(), h)
    _check(ga.zeros((5, 4), dt).get(), np.zeros((5, 4), dt))
    _check(ga.ones((5, 4), dt, order="F").get(), np.ones((5, 4), dt))
    _check(ga.ones_like(a).get(), np.ones((17, 3), dt))
    if np.dtype(dt).kind in "iuf":
        _check(ga.arange(3, 40, 3, dtype=dt).get(), np.arange(3, 40, 3, dtype=dt))
    _check(ga.arange(12, dtype=np.float32).get(), np.arange(12, dtype=np.float32))
    _check(
        ga.arange(0.5, 7.25, 0.25, dtype=np.float64).get(),
        np.arange(0.5, 7.25, 0.25, dtype=np.float64),
    )


@pytest.mark.gpu
def test_vector_fill(ctx):
    a = ga.GPUArray(100, dtype=ga.vec.float3)
    a.fill(ga.vec.make_float3(1.0, 2.0, 3.5))
    h = a.get()
    assert h.dtype == ga.vec.float3
    assert (h["x"] == 1).all() and (h["y"] == 2).all() and (h["z"] == 3.5).all()


@pytest.mark.gpu
def test_strided_get_set_copy(ctx, rng):
    host = rand(rng, (9, 10, 11), np.float64)
    a = ga.to_gpu(host)
    for idx in (np.s_[1:7:2, :, 3:9], np.s_[::-1, ::2], np.s_[:, 4], np.s_[..., ::-3]):
        np.testing.assert_array_equal(a[idx].get(), host[idx])
        np.testing.assert_array_equal(a[idx].copy().get(), host[idx])
    b = ga.to_gpu(host)
    new = rand(rng, (9, 5, 11), np.float64)
    b[:, ::2] = new
    h2 = host.copy()
    h2[:, ::2] = new
    np.testing.assert_array_equal(b.get(), h2)
    b[2:4] = a[5:7]
    h2[2:4] = host[5:7]
    np.testing.assert_array_equal(b.get(), h2)
    b[...] = 1729
    np.testing.assert_array_equal(b.get(), np.full_like(host, 1729))
    t = ga.to_gpu(rand(rng, (3, 3, 3), np.float32)).transpose((1, 2, 0))
    th = t.get()
    np.testing.assert_array_equal(t[0:3:2, :, 1:3].get(), th[0:3:2, :, 1:3])
    f = ga.GPUArray((11, 90), np.float64, gpudata=a.gpudata, order="F")
    fh = host.reshape(-1).reshape((11, 90), order="F")
    np.testing.assert_array_equal(f[:, 7:40].get(), fh[:, 7:40])
    np.testing.assert_array_equal(
        a.reshape((990,), order="F").get(), host.reshape((990,), order="F")
    )


@pytest.mark.gpu
@pytest.mark.parametrize("dt", [np.float32, np.float64, np.int32, np.complex64])
def test_module_functions(ctx, rng, dt):
    x, y = rand(rng, (4097,), dt), rand(rng, (4097,), dt)
    crit = rand(rng, (4097,), np.float32)
    a, b, c = ga.to_gpu(x), ga.to_gpu(y), ga.to_gpu(crit)
    _check(ga.if_positive(c, a, b).get(), np.where(crit > 0, x, y))
    _check(ga.where(ga.to_gpu((crit > 0).astype(np.int32)), a, b).get(), np.where(crit > 0, x, y))
    _check(ga.where(c, a, 2).get(), np.where(crit != 0, x, np.asarray(2, dt)))
    if np.dtype(dt).kind != "c":
        _check(ga.maximum(a, b).get(), np.maximum(x, y))
        _check(ga.minimum(a, b).get(), np.minimum(x, y))
        _check(ga.maximum(a, 0).get(), np.maximum(x, 0).astype(dt))
        _check(ga.minimum(0, a).get(), np.minimum(0, x).astype(dt))
    _check(a.reverse().get(), x[::-1])
    idx = rng.integers(0, 4097, 1000).astype(np.uint32)
    _check(ga.take(a, ga.to_gpu(idx)).get(), x[idx])
    _check(ga.logical_and(a, b).get(), np.logical_and(x, y))
    _check(ga.logical_or(a, 0.0).get(), np.logical_or(x, 0.0))
    _check(a.mul_add(2, b, 3).get(), (2 * x + 3 * y).astype(dt))
    out = ga.empty_like(a)
    assert a.mul_add(2, b, 3, out=out, stream=drv.Stream()) is out


@pytest.mark.gpu
def test_nan_handling(ctx, rng):
    x = rng.standard_normal(10000).astype(np.float32)
    y = rng.standard_normal(10000).astype(np.float32)
    x[::7] = np.nan
    y[::11] = np.nan
    a, b = ga.to_gpu(x), ga.to_gpu(y)
    assert (np.isnan((a * b).get()) == np.isnan(x * y)).all()
    _check(ga.maximum(a, b).get(), np.maximum(x, y))
    _check(ga.minimum(a, b).get(), np.minimum(x, y))


@pytest.mark.gpu
def test_concatenate_stack(ctx, rng):
    xs = [rand(rng, (n, 15, 20), np.float32) for n in (5, 4, 3)]
    _check(ga.concatenate([ga.to_gpu(x) for x in xs]).get(), np.concatenate(xs))
    ys = [rand(rng, (5, n, 2), np.float64) for n in (3, 1)]
    _check(ga.concatenate([ga.to_gpu(y) for y in ys], axis=1).get(), np.concatenate(ys, 1))
    zs = [rand(rng, (2, 3), np.complex64) for _ in range(3)]
    for axis in (0, 1, 2, -1):
        _check(ga.stack([ga.to_gpu(z) for z in zs], axis=axis).get(), np.stack(zs, axis))
    _check(ga.stack([ga.to_gpu(np.asfortranarray(z)) for z in zs], axis=-1).get(), np.stack(zs, -1))


@pytest.mark.gpu
def test_floordiv_mod_bitwise(ctx, rng):
    x = rng.integers(-100, 100, 3000).astype(np.int32)
    y = rng.integers(1, 9, 3000).astype(np.int32) * rng.choice([-1, 1], 3000).astype(np.int32)
    a, b = ga.to_gpu(x), ga.to_gpu(y)
    _check((a // b).get(), x // y)
    _check((a % b).get(), x % y)
    _check((a & b).get(), x & y)
    _check((a | 3).get(), x | 3)
    _check((a ^ b).get(), x ^ y)
    f, g = rand(rng, (3000,), np.float64), rand(rng, (3000,), np.float64)
    g[g == 0] = 1
    np.testing.assert_allclose((ga.to_gpu(f) // ga.to_gpu(g)).get(), f // g)
    np.testing.assert_allclose((ga.to_gpu(f) % ga.to_gpu(g)).get(), f % g, rtol=1e-12, atol=1e-12)


def _divmod_operands(rng, dtype, n=20000):
    """(x, y) of dtype for float // and %: every pair of the edge values
    (signed zeros, infinities, NaN, the smallest and largest numbers, 0.1
    and 0.2, whose quotients a / b round up to an integer: 1.0 // 0.1 is 9,
    floor(1.0 / 0.1) is 10), integers over tenths (the same cases by the
    thousand), then random numbers of many magnitudes."""
    fi = np.finfo(dtype)
    edges = np.array(
        [0.0, -0.0, 1.0, -1.0, 2.0, -2.0, 4.0, -4.0, 0.5, -0.5, 3.0, 7.0, 0.1, -0.1, 0.2, -0.2]
        + [np.inf, -np.inf, np.nan, fi.tiny, -fi.tiny, fi.smallest_subnormal, fi.max, -fi.max],
        dtype,
    )
    ex, ey = np.repeat(edges, edges.size), np.tile(edges, edges.size)
    ix = rng.integers(-100, 101, n).astype(dtype)
    iy = (rng.integers(1, 40, n) * rng.choice([-1, 1], n) * 0.1).astype(dtype)
    with np.errstate(over="ignore"):
        rx = (rng.standard_normal(n) * 10.0 ** rng.integers(-6, 7, n)).astype(dtype)
        ry = (rng.standard_normal(n) * 10.0 ** rng.integers(-6, 7, n)).astype(dtype)
    return np.concatenate([ex, ix, rx]), np.concatenate([ey, iy, ry])


def _same_floats(got, want):
    """got is want element for element: the same numbers, NaN where it has
    NaN, and the same sign of every zero (-4.0 % 2.0 is +0.0)."""
    assert got.dtype == want.dtype and got.shape == want.shape, (got.dtype, want.dtype)
    np.testing.assert_array_equal(got, want)  # (NaN equals NaN here)
    num = ~np.isnan(want)
    np.testing.assert_array_equal(np.signbit(got[num]), np.signbit(want[num]))


HOST_DIVMOD = """
extern "C" void divmod_f(const float *a, const float *b, float *q, float *r, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        q[i] = pygpu::floordiv_float<float>(a[i], b[i]);
        r[i] = pygpu::mod_float<float>(a[i], b[i]);
    }
}
extern "C" void divmod_d(const double *a, const double *b, double *q, double *r, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        q[i] = pygpu::floordiv_float<double>(a[i], b[i]);
        r[i] = pygpu::mod_float<double>(a[i], b[i]);
    }
}
"""


def test_float_floor_divide_and_remainder_helpers_equal_numpy_on_the_host(tmp_path, rng):
    """The kernels' floordiv_float and mod_float (kernels/elementwise.cuh),
    compiled as host C++: NumPy's answer for every element, in float32 and
    float64 (before: floor(a / b), so 1.0 // 0.1 was 10, and a zero
    remainder had the dividend's sign)."""
    import ctypes

    import hostcxx

    lib = hostcxx.build(tmp_path, HOST_DIVMOD, "divmod")
    for dtype, fn in ((np.float32, lib.divmod_f), (np.float64, lib.divmod_d)):
        x, y = _divmod_operands(rng, dtype)
        q, r = np.empty_like(x), np.empty_like(x)
        fn(*(v.ctypes.data_as(ctypes.c_void_p) for v in (x, y, q, r)), ctypes.c_size_t(x.size))
        with np.errstate(all="ignore"):
            _same_floats(q, np.floor_divide(x, y))
            _same_floats(r, np.remainder(x, y))
        # the reported cases among them
        for a, b, want in (
            (1.0, 0.2, 4.0),
            (1.0, 0.1, 9.0),
            (7.0, 0.1, 69.0),
            (-1.0, np.inf, -1.0),
        ):
            k = np.flatnonzero((x == dtype(a)) & (y == dtype(b)))[0]
            assert q[k] == want, (dtype, a, b, q[k])
        for a, b, want in ((-4.0, 2.0, 0.0), (4.0, -2.0, -0.0), (-1.0, np.inf, np.inf)):
            k = np.flatnonzero((x == dtype(a)) & (y == dtype(b)))[0]
            assert r[k] == want and np.signbit(r[k]) == np.signbit(want), (dtype, a, b, r[k])


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", REAL)
def test_gpu_float_floor_divide_and_remainder_equal_numpy_bit_for_bit(ctx, rng, dtype):
    """Float // and % are NumPy's on every path (the operators' Python and
    C paths, scalars on either side, in place, strided views, a mixed
    integer/float pair), every element the same number, NaN or signed zero
    (before: 1.0 // 0.1 was 10, -4.0 % 2.0 was -0.0)."""
    with np.errstate(all="ignore"):
        for f in (operator.floordiv, operator.mod):
            for _ in range(3):  # the third runs on the C path
                x, y = _divmod_operands(rng, dtype)
                a, b = ga.to_gpu(x), ga.to_gpu(y)
                _same_floats(f(a, b).get(), f(x, y))
            for s in (0.1, -0.1, 0.2, 2.0, -2.0, 0.0, -0.0, np.inf, -np.inf, 7.0):
                _same_floats(f(a, s).get(), f(x, s))
                _same_floats(f(s, a).get(), f(s, x))
            _same_floats(f(a[1::3], b[1::3]).get(), f(x[1::3], y[1::3]))  # the general path
            c = ga.to_gpu(x)
            c = {operator.floordiv: operator.ifloordiv, operator.mod: operator.imod}[f](c, b)
            _same_floats(c.get(), f(x, y))
            xi = rng.integers(-100, 101, x.size).astype(np.int32)  # int32 with float: float64
            _same_floats(f(ga.to_gpu(xi), b).get(), f(xi, y))


@pytest.mark.gpu
def test_truth_and_scalar_results(ctx):
    for i in range(4):
        assert bool(ga.ones((1,) * i, np.float32))
        assert not bool(ga.zeros((1,) * i, np.float32))


@pytest.mark.gpu
def test_pass_slice_to_kernel(ctx):
    from pygpu.compiler import SourceModule

    mod = SourceModule(
        "__global__ void twice(float *a) { a[threadIdx.x + blockIdx.x * blockDim.x] *= 2; }"
    )
    a = ga.to_gpu(np.ones(256**2, np.float32))
    mod.get_function("twice")(a[256:-256], block=(256, 1, 1), grid=(254, 1))
    h = a.get()
    assert (h[:256] == 1).all() and (h[256:-256] == 2).all() and (h[-256:] == 1).all()


@pytest.mark.gpu
def test_interop_cupy_torch(ctx, rng):
    x = rand(rng, (64, 3), np.float32)
    try:
        import cupy
    except ImportError:
        cupy = None
    if cupy is not None:
        c = cupy.asarray(x)
        g = ga.asarray(c)
        np.testing.assert_array_equal((g * 2).get(), x * 2)
        back = cupy.asarray(ga.to_gpu(x) + 1)
        np.testing.assert_array_equal(cupy.asnumpy(back), x + 1)
        d = cupy.from_dlpack(ga.to_gpu(x))
        np.testing.assert_array_equal(cupy.asnumpy(d), x)
    try:
        import torch
    except ImportError:
        torch = None
    if torch is not None and torch.cuda.is_available():
        t = torch.from_numpy(x).cuda()
        g = ga.asarray(t)
        np.testing.assert_array_equal((g - 1).get(), x - 1)
        t2 = torch.from_dlpack(ga.to_gpu(x))
        np.testing.assert_array_equal(t2.cpu().numpy(), x)
    if cupy is None and (torch is None or not torch.cuda.is_available()):
        pytest.skip("neither CuPy nor PyTorch with CUDA is installed")
