"""The launch path under hostile, re-entrant and concurrent use (issue 13:
defects 2, 8, 9, 10, 13, 15, 16), checked against the driver stand-in, which
records each launch's parameter bytes."""

import sys
import threading

import numpy as np
import pytest

import pygpu.driver as cuda
from pygpu import compiler

pytestmark = pytest.mark.standin

KERNELS = r"""
extern "C" __global__ void pair(float *a, float *b) { }
extern "C" __global__ void scale(float *p, float s, int n) { }
extern "C" __global__ void blob(double2 v) { }
extern "C" __global__ void coop(float *p) { }
"""


@pytest.fixture(scope="module")
def ptx():
    return bytes(compiler.compile(KERNELS, target="ptx", arch="compute_90"))


def _ptrs(params, n=2):
    return tuple(int(x) for x in np.frombuffer(params[: 8 * n], np.uint64))


class YieldingArray:
    """A device array whose __cuda_array_interface__ switches threads (and
    may run a callback) while the launch converts it."""

    def __init__(self, ptr, hook=None):
        self.ptr = ptr
        self.hook = hook

    @property
    def __cuda_array_interface__(self):
        if self.hook is not None:
            hook, self.hook = self.hook, None
            hook()
        import time

        time.sleep(0)  # let another thread run between this and the next argument
        return {"shape": (4,), "typestr": "<f4", "data": (self.ptr, False), "version": 3}


def test_concurrent_launches_carry_their_own_arguments(standin, ctx, ptx):
    """8 threads launch one kernel with their own pointer pairs while the
    argument conversion switches threads: every launch, checked one by one,
    carries exactly its caller's pair (defect 2)."""
    f = cuda.module_from_buffer(ptx).get_function("pair")
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    bad = []

    def worker(t):
        ctx.push()
        try:
            for i in range(300):
                a, b = 0x10000000 * (t + 1) + 16 * i, 0x90000000 + 0x1000000 * t + 16 * i
                f(YieldingArray(a), YieldingArray(b), block=(32, 1, 1))
                got = _ptrs(standin.thread_last_params())
                if got != (a, b):
                    bad.append((t, i, (hex(a), hex(b)), tuple(map(hex, got))))
        finally:
            cuda.Context.pop()

    try:
        threads = [threading.Thread(target=worker, args=(t,)) for t in range(8)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
    finally:
        sys.setswitchinterval(old)
    assert not bad, bad[:5]


def test_reentrant_launch_from_an_argument_conversion(standin, ctx, ptx):
    """A kernel launched from inside an argument's conversion does not leak
    its pointers into the outer launch (defect 2)."""
    f = cuda.module_from_buffer(ptx).get_function("pair")
    inner = []

    def relaunch():
        f(YieldingArray(0x7000), YieldingArray(0x8000), block=(1, 1, 1))
        inner.append(_ptrs(standin.last_launch().params))

    n = standin.launches()
    f(YieldingArray(0x1000), YieldingArray(0x2000, relaunch), block=(1, 1, 1))
    assert inner == [(0x7000, 0x8000)]
    assert _ptrs(standin.last_launch().params) == (0x1000, 0x2000)
    assert standin.launches() == n + 2


def test_prepare_from_an_argument_conversion(standin, ctx, ptx):
    """prepare() run while a prepared call converts its arguments replaces
    the layout the call is reading (and frees the old one); the call
    finishes with the layout it started with."""
    f = cuda.module_from_buffer(ptx).get_function("scale")
    f.prepare("PfI")
    x = YieldingArray(0x4000, lambda: f.prepare([np.intp, np.int32, np.int32]))
    f.prepared_call((1, 1), (32, 1, 1), x, 3, 7)
    p = standin.last_launch().params
    assert _ptrs(p, 1) == (0x4000,)
    assert np.frombuffer(p[8:12], np.float32)[0] == 3.0  # 'f': the int became a float
    assert np.frombuffer(p[12:16], np.int32)[0] == 7
    f.prepared_call((1, 1), (32, 1, 1), x, 3, 7)  # the new layout from now on
    assert np.frombuffer(standin.last_launch().params[8:12], np.int32)[0] == 3


def test_allocation_freed_by_a_later_conversion_is_refused(standin, ctx, ptx):
    """A DeviceAllocation freed while a later argument is converted is not
    launched with (its address may already belong to someone else)."""
    f = cuda.module_from_buffer(ptx).get_function("pair")
    a = cuda.mem_alloc(64)
    n = standin.launches()
    with pytest.raises(
        cuda.LogicError, match="kernel 'pair': parameter 0 is a freed DeviceAllocation"
    ):
        f(a, YieldingArray(0x2000, a.free), block=(1, 1, 1))
    assert standin.launches() == n, "a launch with a freed pointer reached the driver"


class MutatingIndex:
    """A shape entry whose __index__ empties the interface dict it came from."""

    def __init__(self, d, value):
        self.d, self.value = d, value

    def __index__(self):
        self.d.clear()
        import gc

        gc.collect()
        return self.value


class MutatingCAI:
    def __init__(self, ptr, n):
        self.ptr, self.n = ptr, n

    @property
    def __cuda_array_interface__(self):
        d = {"typestr": "<f4", "data": (self.ptr, False), "version": 3}
        d["shape"] = (MutatingIndex(d, self.n), MutatingIndex(d, 1))
        return d


def test_cuda_array_interface_mutated_while_read(standin, ctx, rng):
    """A __cuda_array_interface__ whose shape entries' __index__ empties the
    dict: read safely, once, with the values it had (defect 8)."""
    dev = cuda.mem_alloc(4 * 64)
    x = rng.standard_normal(64).astype(np.float32)
    cuda.memcpy_htod(MutatingCAI(int(dev), 64), x)
    back = np.empty_like(x)
    cuda.memcpy_dtoh(back, dev)
    np.testing.assert_array_equal(back, x)
    with pytest.raises(ValueError, match="256 bytes"):
        cuda.memcpy_htod(MutatingCAI(int(dev), 16), x)  # 64 bytes: the bound still holds


def test_structured_scalar_with_objects_is_not_an_argument(standin, ctx, ptx):
    """A NumPy structured scalar with an object field would send a PyObject
    address to the kernel (defect 9)."""
    f = cuda.module_from_buffer(ptx).get_function("blob")
    ok = np.zeros((), [("x", "f8"), ("y", "f8")])
    ok["x"], ok["y"] = 1.5, -2.25
    f(ok[()], block=(1, 1, 1))
    assert standin.last_launch().params == ok.tobytes()
    bad = np.zeros((), [("x", "O"), ("y", "f8")])
    bad["x"] = object()
    n = standin.launches()
    with pytest.raises(
        TypeError,
        match="kernel 'blob': parameter 0 is a NumPy structured scalar with Python object fields",
    ):
        f(bad[()], block=(1, 1, 1))
    assert standin.launches() == n


def test_detached_context_refuses_before_the_driver(standin, ptx):
    """After detach(), every Function method raises LogicError without
    passing a dead handle to the driver (defect 10)."""
    c = cuda.Device(0).make_context()
    try:
        m = cuda.module_from_buffer(ptx)
        f, g = m.get_function("scale"), m.get_function("pair")
        d = cuda.mem_alloc(64)
    finally:
        cuda.Context.pop()
    c.detach()
    stale = standin.stale()
    calls = [
        lambda: f(d, 1.0, 1, block=(32, 1, 1)),
        lambda: g(0, 0, block=(32, 1, 1)),  # layout never read
        lambda: f.num_regs,
        lambda: g.param_sizes,
        lambda: f.get_attribute(0),
        lambda: f.set_cache_config(0),
        lambda: f.max_active_blocks_per_multiprocessor(128),
        lambda: f.max_potential_block_size(),
        lambda: f.prepare("Pfi"),
        lambda: f.prepared_call((1, 1), (32, 1, 1), d, 1.0, 1),
        lambda: f.configure((1, 1), (32, 1, 1)),
        lambda: f(d, 1.0, 1, block=(32, 1, 1), time_kernel=True),
    ]
    for call in calls:
        with pytest.raises(cuda.LogicError, match="detached"):
            call()
    assert standin.stale() == stale, "a dead handle reached the driver"


def test_timed_launch_keeps_its_attributes(standin, ctx, ptx):
    """time_kernel=True used to drop cooperative=, cluster= and pdl= (defect 13)."""
    f = cuda.module_from_buffer(ptx).get_function("coop")
    d = cuda.mem_alloc(64)
    t = f(d, block=(32, 1, 1), grid=(4, 1), cluster=(2, 1, 1), pdl=True, time_kernel=True)
    assert isinstance(t, float) and t >= 0
    rec = standin.last_launch()
    assert rec.cluster == (2, 1, 1) and rec.pdl and not rec.cooperative
    f(d, block=(32, 1, 1), grid=(2, 1), cooperative=True, time_kernel=True)
    assert standin.last_launch().cooperative


def test_configuration_values_are_not_truncated(standin, ctx, ptx):
    """Silent truncation and wrong messages of defect 15, launch side."""
    f = cuda.module_from_buffer(ptx).get_function("coop")
    d = cuda.mem_alloc(64)
    n = standin.launches()
    with pytest.raises(
        ValueError,
        match=r"shared must be between 0 and 4294967295 bytes, "
        r"got 4294967296",
    ):
        f.configure((1, 1), (32, 1, 1), shared=2**32)
    with pytest.raises(ValueError, match=r"shared_size must be between 0 and 4294967295"):
        f.prepared_call((1, 1), (32, 1, 1), d, shared_size=2**32)
    with pytest.raises(ValueError, match=r"grid\[0\] is 4294967296; at most 4294967295"):
        f(d, block=(32, 1, 1), grid=(2**32,))
    with pytest.raises(ValueError, match=r"block\[1\] must be positive, got -1"):
        f(d, block=(32, -1, 1))
    with pytest.raises(OverflowError, match="attr 4294967297 does not fit a C int"):
        f.get_attribute(2**32 + 1)
    with pytest.raises(TypeError, match="block\\[0\\] must be an int, not float"):
        f(d, block=(32.0, 1, 1))
    assert standin.launches() == n
    # NumPy integers are ints
    f(d, block=(np.int64(32), np.uint8(2), 1), grid=np.int32(3), shared=np.int64(16))
    rec = standin.last_launch()
    assert rec.block == (32, 2, 1) and rec.grid == (3, 1, 1) and rec.shared == 16
    b = f.configure((np.int64(5), 1), (np.int16(64), 1, 1), shared=np.uint16(8))
    b(d)
    rec = standin.last_launch()
    assert rec.block == (64, 1, 1) and rec.grid == (5, 1, 1) and rec.shared == 8


class CountingInt:
    def __init__(self, v):
        self.v, self.calls = v, 0

    def __index__(self):
        self.calls += 1
        return self.v


def test_in_out_launch_parses_its_configuration_once(standin, ctx, ptx, rng):
    """The In/Out path passes the parsed configuration on (it used to call
    the kernel again, parsing block and grid a second time)."""
    f = cuda.module_from_buffer(ptx).get_function("scale")
    x = rng.standard_normal(32).astype(np.float32)
    bx, gx = CountingInt(32), CountingInt(3)
    f(cuda.InOut(x), 2.0, 32, block=(bx, 1, 1), grid=(gx, 1))
    assert (bx.calls, gx.calls) == (1, 1)
    rec = standin.last_launch()
    assert rec.block == (32, 1, 1) and rec.grid == (3, 1, 1)
    # the stand-in runs no kernel: the copy came back unchanged
    y = x.copy()
    f(cuda.InOut(y), 2.0, 32, block=(32, 1, 1))
    np.testing.assert_array_equal(y, x)


def test_launch_failure_after_handlers_frees_their_copies(standin, ctx, ptx, rng):
    """A launch that fails after In/Out made device copies frees them and
    raises the launch's own error."""
    f = cuda.module_from_buffer(ptx).get_function("scale")
    x = rng.standard_normal(32).astype(np.float32)
    before = standin.live()["device"]
    standin.fail("cuLaunchKernelEx", 1, 700)
    with pytest.raises(cuda.Error, match="cuLaunchKernelEx failed"):
        f(cuda.InOut(x), 2.0, 32, block=(32, 1, 1))
    cuda.Context.synchronize()
    assert standin.live()["device"] == before


def test_prepare_takes_ssize_t_codes(standin, ctx, ptx):
    """PyCUDA's own generators prepare with 'n'/'N' (ssize_t, size_t)."""
    f = cuda.module_from_buffer(ptx).get_function("pair")
    with pytest.raises(TypeError, match="parameter 1 is 8 bytes but type 'i' is 4 bytes"):
        f.prepare("Pi")
    f.prepare("Pn")
    f.prepared_call((1, 1), (1, 1, 1), 0x1234, 2**40 + 5)
    assert _ptrs(standin.last_launch().params) == (0x1234, 2**40 + 5)
    f.prepare("PN")
    f.prepared_call((1, 1), (1, 1, 1), 0x10, 7)
    assert _ptrs(standin.last_launch().params) == (0x10, 7)


def test_zero_d_arrays_are_values(standin, ctx, ptx):
    """PyCUDA's gpuarray.vec.make_float3() gives a 0-d array: a by-value
    struct argument, through __call__ and a prepared call with the dtype."""
    from pygpu import gpuarray

    f = cuda.module_from_buffer(ptx).get_function("blob")
    v = np.zeros((), [("x", "f8"), ("y", "f8")])
    v["x"], v["y"] = 3.25, -1.5
    f(v, block=(1, 1, 1))
    assert standin.last_launch().params == v.tobytes()
    f.prepare([v.dtype])
    f.prepared_call((1, 1), (1, 1, 1), v)
    assert standin.last_launch().params == v.tobytes()
    f3 = gpuarray.vec.make_float3(1, 2, 3)
    assert f3.shape == () and f3.dtype.itemsize == 12
    with pytest.raises(
        TypeError,
        match=r"parameter 0 is 16 bytes but got a 0-d NumPy .* array "
        r"\(12 bytes\)",
    ):
        f(f3, block=(1, 1, 1))
    with pytest.raises(TypeError, match="0-d NumPy array of Python objects"):
        f(np.array(object()), block=(1, 1, 1))
    with pytest.raises(TypeError, match="got a NumPy array, which lives in host memory"):
        f(np.zeros(2), block=(1, 1, 1))


class StridedCAI:
    def __init__(self, ptr, shape, strides):
        self.cai = {
            "shape": shape,
            "strides": strides,
            "typestr": "<f4",
            "data": (ptr, False),
            "version": 3,
        }

    @property
    def __cuda_array_interface__(self):
        return self.cai


def test_copies_bound_strided_interfaces(standin, ctx, rng):
    """A copy into a __cuda_array_interface__ with explicit strides is bounded
    by the bytes the array spans (its last element's end)."""
    dev = cuda.mem_alloc(4096)
    x = rng.standard_normal(64).astype(np.float32)
    cuda.memcpy_htod(StridedCAI(int(dev), (8, 8), (32, 4)), x)  # C strides: 256 bytes
    back = np.empty_like(x)
    cuda.memcpy_dtoh(back, dev)
    np.testing.assert_array_equal(back, x)
    with pytest.raises(ValueError, match="which holds 256 bytes"):
        cuda.memcpy_htod(StridedCAI(int(dev), (8, 8), (32, 4)), np.zeros(65, np.float32))
    # (4, 8) rows 64 bytes apart: the last element ends at 3 * 64 + 7 * 4 + 4 = 224
    with pytest.raises(ValueError, match="which holds 224 bytes"):
        cuda.memcpy_htod(StridedCAI(int(dev), (4, 8), (64, 4)), np.zeros(57, np.float32))
    cuda.memcpy_htod(StridedCAI(int(dev), (4, 8), (64, 4)), np.zeros(56, np.float32))
    # a negative stride: the span is unknown, so nothing is bounded (as for an int)
    cuda.memcpy_htod(StridedCAI(int(dev) + 1024, (4,), (-4,)), np.zeros(8, np.float32))


MIXED = r"""
extern "C" __global__ void mixed(float *p, int i, unsigned u, float f, double d,
                                 long long q, unsigned long long w, short s) { }
"""


class SubInt(int):
    pass


class SubFloat(float):
    pass


def test_the_quick_packer_packs_as_the_full_one(standin, ctx, rng):
    """Exact ints, floats and live allocations take a shorter packing path;
    the same values as int/float subclasses take the full one.  Both give
    the bytes struct.pack gives, launch by launch, on fresh random values
    and at the edges of each size; what the quick path declines (too big,
    a float for a short, a pointer for an int, a freed allocation) gets the
    full path's result or error."""
    import struct

    ptx = bytes(compiler.compile(MIXED, target="ptx", arch="compute_90"))
    f = cuda.module_from_buffer(ptx).get_function("mixed")
    d = cuda.mem_alloc(64)
    edges = [
        (-(2**31), 0, -(2**63), 0),
        (2**31 - 1, 2**32 - 1, 2**63 - 1, 2**64 - 1),
        (-1, 2**31, -(2**30) - 1, 2**63),
        (2**30, 2**30, 2**30, 2**30),
    ]
    cases = [
        (
            int(rng.integers(-(2**31), 2**31)),
            int(rng.integers(0, 2**32)),
            int(rng.integers(-(2**63), 2**63)),
            int(rng.integers(0, 2**63)) * 2 + 1,
        )
        for _ in range(40)
    ] + edges
    for i, u, q, w in cases:
        x, y = float(rng.standard_normal()), float(rng.standard_normal()) * 1e200
        s = int(rng.integers(-(2**15), 2**15))
        # p 0, i 8, u 12, f 16, (4 bytes of padding), d 24, q 32, w 40, s 48
        want = struct.pack("<QiIf", int(d), i, u, x) + b"...." + struct.pack("<dqQh", y, q, w, s)
        quick = (d, i, u, x, y, q, w, s)
        full = (d, SubInt(i), SubInt(u), SubFloat(x), SubFloat(y), SubInt(q), SubInt(w), SubInt(s))
        for args in (quick, full):
            f(*args, block=(1, 1, 1))
            got = standin.last_launch().params
            assert got[:20] == want[:20] and got[24:50] == want[24:], (args, got, want)
    # u as a negative int fills the unsigned parameter with its 32-bit pattern
    f(d, 0, -1, 0.0, 0.0, 0, 0, 0, block=(1, 1, 1))
    assert standin.last_launch().params[12:16] == b"\xff\xff\xff\xff"
    with pytest.raises(
        OverflowError,
        match=r"parameter 1 is 4 bytes; 2147483648\d* does not fit"
        r"|parameter 1 is 4 bytes; 4294967296 does not fit",
    ):
        f(d, 2**32, 0, 0.0, 0.0, 0, 0, 0, block=(1, 1, 1))
    with pytest.raises(
        OverflowError, match="parameter 6 is 8 bytes; 18446744073709551616 does not fit"
    ):
        f(d, 0, 0, 0.0, 0.0, 0, 2**64, 0, block=(1, 1, 1))
    f(d, 0, 0, 0.0, 0.0, 0, 0, 1.5, block=(1, 1, 1))  # declined: a half, the full way
    assert standin.last_launch().params[48:50] == struct.pack("<e", 1.5)
    with pytest.raises(TypeError, match="parameter 1 is 4 bytes, not a pointer"):
        f(d, d, 0, 0.0, 0.0, 0, 0, 0, block=(1, 1, 1))
    d.free()
    with pytest.raises(cuda.LogicError, match="parameter 0 is a freed DeviceAllocation"):
        f(d, 0, 0, 0.0, 0.0, 0, 0, 0, block=(1, 1, 1))


def test_a_configured_launch_takes_the_quick_path_only_when_it_may(standin, ctx, ptx, rng):
    """A configured launcher on the default stream with exact arguments
    launches in the fewest steps; a freed argument, another current
    context, a detached context and a stream each take the full path, with
    its errors, its context switch and its stream."""
    import struct

    f = cuda.module_from_buffer(ptx).get_function("scale")
    d = cuda.mem_alloc(64)
    k = f.configure((3, 1), (32, 1, 1))
    for _ in range(5):
        s, n = float(rng.standard_normal()), int(rng.integers(-(2**31), 2**31))
        k(d, s, n)
        rec = standin.last_launch()
        assert rec.params[:16] == struct.pack("<Qfi", int(d), s, n)
        assert rec.grid == (3, 1, 1) and rec.block == (32, 1, 1) and rec.stream == 0
    # another context current: the full path makes the kernel's current for the launch
    other = cuda.Device(0).make_context()
    try:
        k(d, 1.5, 7)
        assert standin.last_launch().params[:16] == struct.pack("<Qfi", int(d), 1.5, 7)
        assert cuda.Context.get_current() == other
    finally:
        cuda.Context.pop()
        other.detach()
    # on a stream: the full path (a stream may be captured into a graph)
    st = cuda.Stream()
    f.configure((1,), (32, 1, 1), stream=st)(d, 2.5, 3)
    assert standin.last_launch().stream == st.handle
    e = cuda.mem_alloc(64)
    e.free()
    with pytest.raises(cuda.LogicError, match="parameter 0 is a freed DeviceAllocation"):
        k(e, 1.0, 1)
    with pytest.raises(OverflowError, match="parameter 2 is 4 bytes"):
        k(d, 1.0, 2**40)
    with pytest.raises(TypeError, match="a configured launch takes only the kernel's arguments"):
        k(d, 1.0, 1, block=(1, 1, 1))


def test_a_configured_launch_after_its_context_was_detached(standin):
    cuda.init()
    c = cuda.Device(0).make_context()
    ptx = bytes(compiler.compile(KERNELS, target="ptx", arch="compute_90"))
    f = cuda.module_from_buffer(ptx).get_function("scale")
    d = cuda.mem_alloc(64)
    k = f.configure((1,), (32, 1, 1))
    k(d, 1.0, 1)
    cuda.Context.pop()
    c.detach()
    stale = standin.stale()
    with pytest.raises(cuda.LogicError, match="freed DeviceAllocation"):
        k(d, 1.0, 1)
    with pytest.raises(cuda.LogicError, match="the context this object belongs to was detached"):
        k(0, 1.0, 1)  # a plain pointer: the context check itself
    assert standin.stale() == stale, "a dead handle reached the driver"


NUMBERS = r"""
extern "C" __global__ void numbers(float f, int i, double d, long long q, unsigned u,
                                   unsigned long long w, short s, unsigned short us,
                                   signed char c, unsigned char uc, __half h, float2 z,
                                   double2 zz) { }
"""


def test_numpy_scalars_take_the_quick_packer_with_the_full_ones_bytes(standin, ctx, rng):
    """NumPy number scalars of the parameter's size are packed by the quick
    path; the same values as scalar subclasses take the full one (the
    buffer).  Both give the scalars' own bytes, on fresh random values; a
    scalar of another size gets the full path's error."""
    src = "#include <cuda_fp16.h>\n" + NUMBERS
    ptx = bytes(compiler.compile(src, target="ptx", arch="compute_90"))
    f = cuda.module_from_buffer(ptx).get_function("numbers")
    offsets = [0, 4, 8, 16, 24, 32, 40, 42, 44, 45, 46, 48, 64]
    kinds = [
        np.float32,
        np.int32,
        np.float64,
        np.int64,
        np.uint32,
        np.uint64,
        np.int16,
        np.uint16,
        np.int8,
        np.uint8,
        np.float16,
        np.complex64,
        np.complex128,
    ]
    subs = [type("Sub" + k.__name__, (k,), {}) for k in kinds]

    def draw(k):
        if np.issubdtype(k, np.integer):
            info = np.iinfo(k)
            return rng.integers(info.min, info.max, endpoint=True, dtype=k)[()]
        if np.issubdtype(k, np.complexfloating):
            return k(complex(rng.standard_normal(), rng.standard_normal()))
        return k(rng.standard_normal())

    for _ in range(20):
        vals = [draw(k) for k in kinds]
        for args in (vals, [s(v) for s, v in zip(subs, vals)]):
            f(*args, block=(1, 1, 1))
            got = standin.last_launch().params
            for off, v in zip(offsets, vals):
                want = v.tobytes()
                assert got[off : off + len(want)] == want, (type(args[0]), v.dtype, off)
    with pytest.raises(
        TypeError,
        match=r"parameter 0 is 4 bytes but got a NumPy float64 "
        r"\(8 bytes\)",
    ):
        f(np.float64(1), *vals[1:], block=(1, 1, 1))
    with pytest.raises(
        TypeError,
        match=r"parameter 1 is 4 bytes but got a NumPy int64 "
        r"\(8 bytes\)",
    ):
        f(vals[0], np.int64(1), *vals[2:], block=(1, 1, 1))
