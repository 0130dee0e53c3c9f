"""The array layer's operand gate (issue 25): every array entry point checks
its operands' context and device, freed memory, extent against the
allocation, dtype, shape and layout before anything reaches the driver,
and interchange (CAI, DLPack) is validated both ways.

standin tests run against the driver stand-in (kernels compile and their
launches are recorded, not run): "refused before the driver" is checked
by the launch and copy counters.  gpu tests check the numbers on a GPU.
"""

import ctypes

import numpy as np
import pytest

import pygpu.driver as drv
import pygpu.gpuarray as ga
from pygpu import cumath, curandom
from pygpu.elementwise import ElementwiseKernel
from pygpu.reduction import ReductionKernel
from pygpu.scan import ExclusiveScanKernel, InclusiveScanKernel

standin = pytest.mark.standin


def _entry_points():
    """name -> call(x, y, idx): every array entry point on operands x, y
    (float32, 8 elements) and idx (int32 indices)."""
    ewk = ElementwiseKernel("float *x, float *y", "y[i] = 2 * x[i]", "gate_double")
    red = ReductionKernel(np.float32, "0", "a+b", "x[i]*y[i]", "const float *x, const float *y")
    inc = InclusiveScanKernel(np.float32, "a+b")
    exc = ExclusiveScanKernel(np.float32, "a+b", "0")
    gen = curandom.XORWOWRandomNumberGenerator()
    host = np.ones(8, np.float32)
    return {
        "take": lambda x, y, i: ga.take(x, i),
        "take (indices)": lambda x, y, i: ga.take(y, x.view(np.int32)),
        "sum": lambda x, y, i: ga.sum(x),
        "dot": lambda x, y, i: ga.dot(x, y),
        "vdot": lambda x, y, i: ga.vdot(x, y),
        "max": lambda x, y, i: ga.max(x),
        "min": lambda x, y, i: ga.min(x),
        "any": lambda x, y, i: ga.any(x),
        "subset_sum": lambda x, y, i: ga.subset_sum(i, x),
        "reverse": lambda x, y, i: x.reverse(),
        "cumath.sin": lambda x, y, i: cumath.sin(x),
        "cumath.sin out=": lambda x, y, i: cumath.sin(y, out=x),
        "cumath.fmod": lambda x, y, i: cumath.fmod(x, y),
        "cumath.ldexp": lambda x, y, i: cumath.ldexp(x, y),
        "cumath.frexp": lambda x, y, i: cumath.frexp(x),
        "cumath.modf": lambda x, y, i: cumath.modf(x),
        "ElementwiseKernel": lambda x, y, i: ewk(x, y),
        "ElementwiseKernel slice=": lambda x, y, i: ewk(x, y, slice=slice(0, 4)),
        "ReductionKernel": lambda x, y, i: red(x, y),
        "InclusiveScanKernel": lambda x, y, i: inc(x),
        "ExclusiveScanKernel": lambda x, y, i: exc(x, ga.empty_like(y)),
        "fill_uniform": lambda x, y, i: gen.fill_uniform(x),
        "fill_normal": lambda x, y, i: gen.fill_normal(x),
        "fill": lambda x, y, i: x.fill(1.5),
        "operator": lambda x, y, i: x + y,
        "astype": lambda x, y, i: x.astype(np.float64),
        "copy": lambda x, y, i: x.copy(),
        "get": lambda x, y, i: x.get(),
        "set": lambda x, y, i: x.set(host),
        "setitem": lambda x, y, i: x.__setitem__(slice(None), y),
        "where": lambda x, y, i: ga.where(x, y, 1.0),
        "maximum": lambda x, y, i: ga.maximum(x, y),
        "multi_put": lambda x, y, i: ga.multi_put([x], i, out=[y]),
    }


NAMES = [
    "take",
    "take (indices)",
    "sum",
    "dot",
    "vdot",
    "max",
    "min",
    "any",
    "subset_sum",
    "reverse",
    "cumath.sin",
    "cumath.sin out=",
    "cumath.fmod",
    "cumath.ldexp",
    "cumath.frexp",
    "cumath.modf",
    "ElementwiseKernel",
    "ElementwiseKernel slice=",
    "ReductionKernel",
    "InclusiveScanKernel",
    "ExclusiveScanKernel",
    "fill_uniform",
    "fill_normal",
    "fill",
    "operator",
    "astype",
    "copy",
    "get",
    "set",
    "setitem",
    "where",
    "maximum",
    "multi_put",
]

_points = {}


def _point(name):
    if not _points:
        _points.update(_entry_points())
    return _points[name]


def _counts(standin):
    return (
        standin.launches(),
        standin.calls("cuMemcpyHtoD"),
        standin.calls("cuMemcpyDtoH"),
        standin.calls("cuMemcpyDtoD"),
        standin.calls("cuMemcpyDtoDAsync"),
        standin.calls("cuMemcpyHtoDAsync"),
        standin.calls("cuMemcpyDtoHAsync"),
    )


def _operands(rng):
    x = ga.to_gpu(rng.standard_normal(16).astype(np.float32))
    y = ga.to_gpu(rng.standard_normal(16).astype(np.float32))
    i = ga.to_gpu(rng.integers(0, 8, 8).astype(np.int32))
    return x, y, i


# ---- defect 2: freed memory, other devices and contexts ----


@standin
@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("which", ["view", "array"])
def test_freed_memory_is_refused_before_the_driver(standin, ctx, rng, name, which):
    f = _point(name)
    x, y, i = _operands(rng)
    xs, ys = (x[4:12], y[4:12]) if which == "view" else (x[:8].copy(), y[:8].copy())
    f(xs, ys, i)  # compiled, and fine while alive
    root = xs.base if which == "view" else xs
    root.gpudata.free()
    before = _counts(standin)
    with pytest.raises(
        drv.LogicError, match="memory was freed|DeviceAllocation was freed|freed DeviceAllocation"
    ):
        f(xs, ys, i)
    assert _counts(standin) == before


@standin
@pytest.mark.parametrize("name", NAMES)
def test_another_devices_memory_is_refused_before_the_driver(standin, ctx, rng, name):
    f = _point(name)
    x, y, i = _operands(rng)
    f(x[:8], y[:8], i)
    c1 = drv.Device(1).retain_primary_context()
    with c1:
        far = ga.to_gpu(rng.standard_normal(16).astype(np.float32))
        far8 = ga.to_gpu(rng.standard_normal(8).astype(np.float32))
    for xs in (far8, far[8:]):
        before = _counts(standin)
        with pytest.raises(
            ValueError,
            match="operands on different devices: an operand lives "
            "on device 1 but the operation runs in the "
            "current context, on device 0",
        ):
            f(xs, y[:8], i)
        assert _counts(standin) == before


@standin
@pytest.mark.parametrize(
    "name",
    [
        "take",
        "sum",
        "dot",
        "reverse",
        "cumath.sin",
        "ElementwiseKernel",
        "InclusiveScanKernel",
        "get",
        "fill",
    ],
)
def test_another_contexts_memory_is_refused(standin, ctx, rng, name):
    f = _point(name)
    x, y, i = _operands(rng)
    f(x[:8], y[:8], i)
    other = drv.Device(0).make_context()
    try:
        far = ga.to_gpu(rng.standard_normal(8).astype(np.float32))
    finally:
        drv.Context.pop()
    try:
        for xs in (far, far[:8]):
            before = _counts(standin)
            with pytest.raises(ValueError, match="allocated in another context"):
                f(xs, y[:8], i)
            assert _counts(standin) == before
    finally:
        far.gpudata.free()
        other.detach()


@standin
def test_curandom_checks_against_the_generators_context(standin, ctx, rng):
    gen = curandom.XORWOWRandomNumberGenerator()
    c1 = drv.Device(1).retain_primary_context()
    with c1:
        far = ga.empty(64, np.float32)
        before = standin.launches()
        # current context: device 1, the array's; the generator's state is on device 0
        with pytest.raises(
            ValueError,
            match="an operand lives on device 1 but the operation "
            "runs in the current context, on device 0",
        ):
            gen.fill_uniform(far)
        assert standin.launches() == before


# ---- defect 3: dot of arrays of different sizes ----


@standin
@pytest.mark.parametrize("f", [ga.dot, ga.vdot])
def test_dot_of_different_sizes_is_refused(standin, ctx, f):
    a, b = ga.zeros(1000, np.float32), ga.zeros(10, np.float32)
    before = standin.launches()
    with pytest.raises(
        ValueError,
        match=r"the arrays have 1000 and 10 elements \(shapes "
        r"\(1000,\) and \(10,\)\)",
    ):
        f(a, b)
    with pytest.raises(ValueError, match="the arrays have 10 and 1000 elements"):
        f(b, a)
    assert standin.launches() == before
    with pytest.raises(TypeError, match="takes GPUArrays, not ndarray"):
        f(a, np.zeros(1000, np.float32))


# ---- defect 4: a C- and an F-ordered operand are paired by index ----


def _launched_pointers(standin, count):
    p = standin.last_launch().params
    return list(np.frombuffer(p[: 8 * count], np.uint64))


@standin
def test_fmod_ldexp_pair_mixed_layouts_by_index(standin, ctx, rng):
    c = ga.to_gpu(rng.standard_normal((5, 7)).astype(np.float32))
    f = ga.to_gpu(np.asfortranarray(rng.standard_normal((5, 7)).astype(np.float32)))
    assert c.flags.c_contiguous and f.flags.f_contiguous and not f.flags.c_contiguous
    r = cumath.fmod(c, f)
    launched = _launched_pointers(standin, 3)
    assert launched[0] == c.ptr and launched[2] == r.ptr
    assert launched[1] != f.ptr  # a copy of f in C order, not f's memory
    e = ga.to_gpu(np.asfortranarray(rng.integers(-3, 3, (5, 7)).astype(np.int32)))
    r = cumath.ldexp(c, e)
    launched = _launched_pointers(standin, 3)
    assert launched[0] == c.ptr and launched[1] != e.ptr
    # one order: no copy
    c2 = ga.to_gpu(rng.standard_normal((5, 7)).astype(np.float32))
    cumath.fmod(c, c2)
    assert _launched_pointers(standin, 2) == [c.ptr, c2.ptr]


@standin
def test_dot_pairs_mixed_layouts_by_index(standin, ctx, rng):
    c = ga.to_gpu(rng.standard_normal((5, 7)).astype(np.float32))
    c2 = ga.to_gpu(rng.standard_normal((5, 7)).astype(np.float32))
    f = ga.to_gpu(np.asfortranarray(rng.standard_normal((5, 7)).astype(np.float32)))
    for g in (ga.dot, ga.vdot):
        g(c, f)
        g(c, c2)
        before = standin.launches()
        g(c, c2)  # one order: one launch on the arrays themselves
        assert standin.launches() == before + 1
        assert _launched_pointers(standin, 3)[1:] == [c.ptr, c2.ptr]
        before = standin.launches()
        g(c, f)  # f copied into C order first, then the reduction
        assert standin.launches() == before + 2
        p = _launched_pointers(standin, 3)
        assert p[1] == c.ptr and p[2] != f.ptr


@standin
def test_elementwise_and_reduction_kernels_refuse_mixed_layouts(standin, ctx, rng):
    c = ga.to_gpu(rng.standard_normal((5, 7)).astype(np.float32))
    f = ga.to_gpu(np.asfortranarray(rng.standard_normal((5, 7)).astype(np.float32)))
    k = ElementwiseKernel("float *x, float *y", "y[i] = x[i]", "gate_copy")
    red = ReductionKernel(np.float32, "0", "a+b", "x[i]*y[i]", "const float *x, const float *y")
    before = standin.launches()
    msg = (
        r"arrays of shape \(5, 7\) in different memory orders \(strides \(28, 4\) and "
        r"\(4, 20\)\) would be paired by memory position, not by index"
    )
    with pytest.raises(ValueError, match="kernel 'gate_copy': " + msg):
        k(c, f)
    with pytest.raises(ValueError, match="ReductionKernel 'reduce_kernel': " + msg):
        red(c, f)
    assert standin.launches() == before
    k(c, ga.empty_like(c))  # one order: fine
    k(f, ga.empty_like(f))
    assert standin.launches() == before + 2


# ---- defect 7: an array longer than its allocation ----


@standin
def test_an_array_longer_than_its_allocation_is_refused(standin, ctx):
    small = drv.mem_alloc(16)
    with pytest.raises(
        ValueError,
        match=r"GPUArray\(\): the array's elements span bytes "
        r"\[0, 4000\) of an allocation of 16 bytes",
    ):
        ga.GPUArray((1000,), np.float32, gpudata=small)
    with pytest.raises(ValueError, match=r"span bytes \[-12, 4\) of an allocation of 16 bytes"):
        ga.GPUArray((4,), np.float32, gpudata=small, strides=(-4,))
    big = ga.zeros(8, np.float32)
    with pytest.raises(ValueError, match=r"span bytes \[16, 48\) of an allocation of 32 bytes"):
        ga.GPUArray((8,), np.float32, gpudata=big.ptr + 16, base=big)
    ok = ga.GPUArray((4,), np.float32, gpudata=small)
    ok.set(np.arange(4, dtype=np.float32))
    np.testing.assert_array_equal(ok.get(), np.arange(4))
    freed = drv.mem_alloc(16)
    freed.free()
    with pytest.raises(drv.LogicError, match="the memory given \\(gpudata=\\) was freed"):
        ga.GPUArray((4,), np.float32, gpudata=freed)


@standin
def test_set_get_fill_refuse_an_array_past_its_allocation(standin, ctx):
    # made without the constructor's check (as a hand-built array would be)
    small = drv.mem_alloc(16)
    a = ga._new(
        ga.GPUArray,
        (1000,),
        np.dtype(np.float32),
        (4,),
        small,
        None,
        ga._default_allocator,
        1000,
        True,
        True,
    )
    before = _counts(standin)
    for f in (
        lambda: a.set(np.zeros(1000, np.float32)),
        a.get,
        lambda: a.fill(1.0),
        lambda: a.get(ary=np.empty(1000, np.float32)),
    ):
        with pytest.raises(
            ValueError,
            match=r"span bytes \[0, 4000\) of an allocation of 16 "
            r"bytes",
        ):
            f()
    assert _counts(standin) == before


# ---- defect 8: get(ary=out) of another shape that would need a copy ----


@standin
def test_get_into_an_array_that_cannot_take_the_shape_raises(standin, ctx, rng):
    host = rng.standard_normal(12).astype(np.float32)
    a = ga.to_gpu(host)
    out = np.zeros((4, 3), np.float32, order="F")
    before = _counts(standin)
    with pytest.raises(
        ValueError,
        match=r"get\(ary=...\): ary has shape \(4, 3\) and strides "
        r"\(4, 16\), which cannot be seen as this array's "
        r"shape \(12,\) without a copy",
    ):
        a.get(ary=out)
    assert _counts(standin) == before and not out.any()
    # a contiguous one of another shape: filled (PyCUDA's deprecated behaviour)
    out = np.zeros((3, 4), np.float32)
    with pytest.warns(DeprecationWarning, match="different shape"):
        got = a.get(ary=out)
    np.testing.assert_array_equal(out.ravel(), host)
    assert np.shares_memory(got, out)


# ---- defect 1 and strict interchange: DLPack and CAI ----


@standin
def test_dlpack_refuses_strides_that_are_not_whole_items(standin, ctx):
    raw = ga.zeros(64, np.uint8)
    v = ga.GPUArray((3, 1), np.int32, gpudata=raw.ptr, base=raw, strides=(6, 4))
    with pytest.raises(
        BufferError,
        match=r"an array of 4-byte items with byte strides "
        r"\(6, 4\) \(not multiples of the item size\) "
        r"cannot be exported",
    ):
        v.__dlpack__()
    with pytest.raises(BufferError, match="not multiples of the item size"):
        v.__dlpack__(max_version=(1, 0))
    ok = ga.GPUArray((3, 2), np.int32, gpudata=raw.ptr, base=raw, strides=(12, 4))
    back = ga.asarray(_Producer(ok))
    assert back.strides == (12, 4) and back.ptr == ok.ptr


@standin
def test_dlpack_export_of_freed_memory_is_refused(standin, ctx):
    a = ga.zeros(8, np.float32)
    v = a[2:]
    a.gpudata.free()
    for x in (a, v):
        with pytest.raises(BufferError, match="memory was freed"):
            x.__dlpack__()


class _Producer:
    """Hands out another object's DLPack capsule (so asarray takes the
    DLPack path)."""

    def __init__(self, a):
        self.a = a

    def __dlpack__(self, **kw):
        return self.a.__dlpack__(**kw)

    def __dlpack_device__(self):
        return self.a.__dlpack_device__()


class LyingDLPack:
    """A producer whose DLPack tensor says what the test wants (a plain
    'dltensor' capsule over a DLManagedTensor it keeps alive)."""

    def __init__(
        self,
        ptr,
        shape,
        strides=None,
        code=2,
        bits=32,
        lanes=1,
        ndim=None,
        device_type=2,
        null_shape=False,
        device_id=0,
    ):
        from pygpu import _dlpack as d

        nd = len(shape) if ndim is None else ndim
        self._shape = (ctypes.c_int64 * max(len(shape), 1))(*shape)
        self._strides = (
            None if strides is None else (ctypes.c_int64 * max(len(strides), 1))(*strides)
        )
        t = d.DLTensor(
            ptr or None,
            d.DLDevice(device_type, device_id),
            nd,
            d.DLDataType(code, bits, lanes),
            None if null_shape else ctypes.cast(self._shape, ctypes.POINTER(ctypes.c_int64)),
            None
            if self._strides is None
            else ctypes.cast(self._strides, ctypes.POINTER(ctypes.c_int64)),
            0,
        )
        self._m = d.DLManagedTensor(t, None, ctypes.cast(None, d._Deleter))
        self.device_type = device_type

    def __dlpack__(self, stream=None, max_version=None):
        api = ctypes.pythonapi
        api.PyCapsule_New.restype = ctypes.py_object
        api.PyCapsule_New.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
        return api.PyCapsule_New(ctypes.addressof(self._m), b"dltensor", None)

    def __dlpack_device__(self):
        return (self.device_type, self._m.dl_tensor.device.device_id)


@standin
@pytest.mark.parametrize(
    "kw, match",
    [
        (dict(shape=(-3,)), r"negative dimension: shape \(-3,\)"),
        (
            dict(shape=(4,), bits=12),
            "DLPack dtype \\(code 2, 12 bits\\) is not one pygpu has: float takes 16, 32, 64 bits",
        ),
        (dict(shape=(4,), code=6, bits=32), "bool takes 8 bits"),
        (dict(shape=(4,), code=5, bits=32), "complex takes 64, 128 bits"),
        (dict(shape=(4,), lanes=4), "4 lanes\\) has no NumPy dtype"),
        (dict(shape=(4,), code=9), "has no NumPy dtype"),
        (dict(shape=(4,), ndim=-1), "has -1 dimensions"),
        (dict(shape=(4,), ndim=1000), "has 1000 dimensions"),
        (dict(shape=(4,), null_shape=True), "has no shape \\(a NULL pointer\\)"),
        (dict(shape=(4,), ptr=0), r"shape \(4,\) has a NULL data pointer"),
        (dict(shape=(4,), device_type=1), "not in CUDA memory \\(device type 1\\)"),
        (
            dict(shape=(4,), device_id=1),
            "the DLPack tensor is on CUDA device 1 but the current context is on device 0",
        ),
    ],
)
def test_lying_dlpack_producers_are_refused(standin, ctx, kw, match):
    buf = ga.zeros(64, np.float32)
    kw.setdefault("ptr", buf.ptr)
    with pytest.raises(BufferError, match=match):
        ga.asarray(LyingDLPack(**kw))


class CAI:
    def __init__(self, **cai):
        self.__cuda_array_interface__ = cai


@standin
@pytest.mark.parametrize(
    "fields, exc, match",
    [
        (dict(shape=(-4,)), ValueError, r"negative dimension in 'shape' \(-4,\)"),
        (dict(shape=(2, -1)), ValueError, "negative dimension"),
        (dict(strides=(4, 4)), ValueError, r"2 strides \(4, 4\) for 1 dimensions \(shape \(8,\)\)"),
        (dict(strides=()), ValueError, r"0 strides \(\) for 1 dimensions"),
        (dict(strides=(4.5,)), TypeError, "'strides' must hold ints, not 4.5"),
        (dict(shape=(2.0,)), TypeError, "'shape' must hold ints, not 2.0"),
        (dict(shape=4), TypeError, "'shape' must be a tuple of ints, not 4"),
        (dict(shape=(True,)), TypeError, "'shape' must hold ints"),
        (dict(typestr="<x9"), TypeError, "typestr '<x9' / descr give no dtype"),
        (dict(typestr=4), TypeError, "'typestr' must be a str, not 4"),
        (dict(typestr="|O"), TypeError, "Python objects have no device representation"),
        (dict(typestr=">f4"), TypeError, "big-endian"),
        (dict(data=(None, False)), ValueError, r"a NULL data pointer for 8 elements"),
        (dict(data=(0, False)), ValueError, "NULL data pointer"),
        (dict(data=12345), TypeError, "'data' must be a \\(pointer, read_only\\) pair"),
        (dict(data=("0x10", False)), TypeError, "the data pointer must be an int, not '0x10'"),
        (dict(data=(-16, False)), ValueError, "data pointer -16 is not an address"),
        (dict(version=4), ValueError, "version 4 is not one pygpu reads"),
        (dict(version="3"), TypeError, "'version' must be an int"),
        (dict(mask=1), TypeError, "masked arrays"),
        (dict(stream=0), ValueError, "'stream' 0 is disallowed"),
    ],
)
def test_lying_cuda_array_interfaces_are_refused_at_import(standin, ctx, fields, exc, match):
    buf = ga.zeros(8, np.float32)
    cai = dict(shape=(8,), typestr="<f4", data=(buf.ptr, False), version=3)
    cai.update(fields)
    with pytest.raises(exc, match=match):
        ga.asarray(CAI(**cai))
    del cai["shape"]
    with pytest.raises(TypeError, match="no 'shape'"):
        ga.asarray(CAI(**cai))


@standin
def test_a_valid_cai_still_imports(standin, ctx, rng):
    host = rng.standard_normal(8).astype(np.float32)
    buf = ga.to_gpu(host)
    for extra in ({}, {"strides": None}, {"strides": (4,)}, {"version": 0}, {"stream": 1}):
        cai = dict(shape=(8,), typestr="<f4", data=(buf.ptr, False), version=3)
        cai.update(extra)
        got = ga.asarray(CAI(**cai))
        np.testing.assert_array_equal(got.get(), host)
    empty = ga.asarray(CAI(shape=(0,), typestr="<f4", data=(0, False), version=3))
    assert empty.size == 0


@standin
def test_asarray_of_an_allocation_is_bounds_checked(standin, ctx):
    alloc = drv.mem_alloc(32)
    a = ga.asarray(alloc)
    assert a.nbytes == 32
    # a view made by hand that reaches past the allocation: refused at use
    bad = ga._new(
        ga.GPUArray,
        (16,),
        np.dtype(np.float32),
        (4,),
        int(alloc),
        alloc,
        ga._default_allocator,
        16,
        True,
        True,
    )
    with pytest.raises(ValueError, match=r"span bytes \[0, 64\) of an allocation of 32 bytes"):
        bad.get()


# ---- the fast paths stay fast and still prove what they skip ----


@standin
def test_fast_paths_still_refuse(standin, ctx, rng):
    x, y, i = _operands(rng)
    k = ElementwiseKernel("float *x, float *y", "y[i] = x[i]", "gate_fast")
    k(x, y)
    cumath.sin(x, out=y)
    x + y
    x.gpudata.free()
    before = standin.launches()
    for f in (
        lambda: k(x, y),
        lambda: cumath.sin(x),
        lambda: cumath.sin(y, out=x),
        lambda: x + y,
        lambda: x * 2.0,
        lambda: 2.0 * x,
    ):
        with pytest.raises(drv.LogicError, match="freed"):
            f()
    assert standin.launches() == before


# ---- gpu: the numbers ----


@pytest.mark.gpu
def test_gpu_fmod_ldexp_dot_with_mixed_layouts(ctx, rng):
    a = (rng.standard_normal((37, 53)) * 10).astype(np.float32)
    b = (rng.standard_normal((37, 53)) * 3 + 0.5).astype(np.float32)
    e = rng.integers(-5, 6, (37, 53)).astype(np.int32)
    for ao, bo in (("C", "F"), ("F", "C"), ("F", "F"), ("C", "C")):
        ga_ = ga.to_gpu(np.asarray(a, order=ao))
        gb = ga.to_gpu(np.asarray(b, order=bo))
        ge = ga.to_gpu(np.asarray(e, order=bo))
        np.testing.assert_array_equal(cumath.fmod(ga_, gb).get(), np.fmod(a, b))
        np.testing.assert_array_equal(cumath.ldexp(ga_, ge).get(), np.ldexp(a, e))
        want = np.dot(a.ravel().astype(np.float64), b.ravel().astype(np.float64))
        got = float(ga.dot(ga_, gb).get())
        assert abs(got - want) <= 1e-4 * np.abs(a * b).sum()
        gotv = float(ga.vdot(ga_, gb).get())
        assert abs(gotv - want) <= 1e-4 * np.abs(a * b).sum()
    # different shapes, same size: each one's elements in C order
    got = float(ga.dot(ga.to_gpu(np.asfortranarray(a)), ga.to_gpu(b.ravel())).get())
    assert abs(got - want) <= 1e-4 * np.abs(a * b).sum()


@pytest.mark.gpu
def test_gpu_entry_points_on_views_still_work(ctx, rng):
    host = rng.standard_normal(64).astype(np.float32)
    x = ga.to_gpu(host)
    v = x[8:40]
    np.testing.assert_allclose(cumath.sin(v).get(), np.sin(host[8:40]), rtol=2e-6, atol=1e-6)
    np.testing.assert_allclose(float(ga.sum(v).get()), host[8:40].sum(), rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(v.reverse().get(), host[8:40][::-1])
    idx = rng.integers(0, 32, 20).astype(np.int32)
    np.testing.assert_array_equal(ga.take(v, ga.to_gpu(idx)).get(), host[8:40][idx])
    k = ElementwiseKernel("float *x, float *y", "y[i] = 2 * x[i]", "gate_gpu_double")
    out = ga.empty(32, np.float32)
    k(v, out)
    np.testing.assert_array_equal(out.get(), 2 * host[8:40])
    scan = InclusiveScanKernel(np.float32, "a+b")
    np.testing.assert_allclose(scan(v, "new").get(), np.cumsum(host[8:40]), rtol=1e-5, atol=1e-4)


@standin
def test_cai_export_of_freed_memory_is_refused(standin, ctx):
    a = ga.zeros(8, np.float32)
    v = a[2:]
    from pygpu.compiler import SourceModule

    k = SourceModule("__global__ void touch(float *x) { x[0] = 1; }").get_function("touch")
    k(v, block=(1, 1, 1))
    a.gpudata.free()
    before = standin.launches()
    for x in (a, v):
        with pytest.raises(drv.LogicError, match="freed"):
            x.__cuda_array_interface__
        with pytest.raises(drv.LogicError, match="freed"):
            k(x, block=(1, 1, 1))  # a raw launch reads the interface
    assert standin.launches() == before


@standin
def test_skip_ahead_array_is_gated(standin, ctx):
    gen = curandom.XORWOWRandomNumberGenerator()
    counts = ga.zeros(gen.generator_count + 8, np.uint64)[8:]
    gen.call_skip_ahead_array(counts)
    counts.base.gpudata.free()
    before = standin.launches()
    with pytest.raises(drv.LogicError, match="skip_ahead_array: the array's memory was freed"):
        gen.call_skip_ahead_array(counts)
    assert standin.launches() == before
