"""PyCUDA's linear copies with a CUDA array side (memcpy_dtoa, memcpy_atod,
memcpy_atoa: 1-D arrays, byte offsets and lengths) and Memcpy3DPeer.

Three tiers: no driver (argument types), the driver stand-in (`standin`:
bytes moved, every refusal made before the driver is called, dead
objects, failure injection at each new entry point) and a GPU (`gpu`:
every element against NumPy on random data)."""

import gc

import numpy as np
import pytest

import pygpu.driver as cuda

UNKNOWN = 999

FMT = cuda.array_format


def _array1d(n, fmt=FMT.FLOAT, nch=1):
    return cuda.Array(cuda.ArrayDescriptor(n, 0, fmt, nch))


def _random(rng, n, dtype):
    dtype = np.dtype(dtype)
    if dtype.kind == "f":
        return rng.standard_normal(n).astype(dtype)
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max, n, dtype=dtype, endpoint=True)


# ---- no driver needed ----


def test_linear_copies_name_their_arguments():
    with pytest.raises(TypeError, match="memcpy_dtoa\\(\\): ary must be an Array, not list"):
        cuda.memcpy_dtoa([], 0, 0, 4)
    with pytest.raises(TypeError, match="memcpy_atod\\(\\): ary must be an Array, not int"):
        cuda.memcpy_atod(0, 5, 0, 4)
    with pytest.raises(TypeError, match="memcpy_atoa\\(\\): dest must be an Array, not str"):
        cuda.memcpy_atoa("x", 0, None, 0, 4)
    # Python's own argument parser: its wording changed in 3.10
    with pytest.raises(
        TypeError,
        match="'float' object cannot be interpreted as an integer"
        "|integer argument expected, got float",
    ):
        cuda.memcpy_dtoa(None, 1.5, 0, 4)
    with pytest.raises(
        ValueError, match="memcpy_dtoa\\(\\): index and len must be >= 0, got -4 and 8"
    ):
        cuda.memcpy_dtoa(None, -4, 0, 8)
    with pytest.raises(
        ValueError, match="memcpy_atoa\\(\\): src_index and len must be >= 0, got -1 and 4"
    ):
        cuda.memcpy_atoa(None, 0, None, -1, 4)


def test_memcpy3d_peer_is_a_memcpy3d_with_contexts():
    c = cuda.Memcpy3DPeer()
    assert isinstance(c, cuda.Memcpy3D)
    assert (c.src_x_in_bytes, c.dst_y, c.depth, c.src_pitch) == (0, 0, 1, 0)
    c.set_src_context(None)
    c.set_dst_context(None)
    with pytest.raises(ValueError, match="Memcpy3DPeer: set a source and a destination first"):
        c()


# ---- the driver stand-in ----


@pytest.mark.standin
@pytest.mark.parametrize(
    "fmt, nch, dtype",
    [
        (FMT.FLOAT, 1, np.float32),
        (FMT.UNSIGNED_INT8, 1, np.uint8),
        (FMT.SIGNED_INT16, 2, np.int16),
        (FMT.FLOAT, 4, np.float32),
    ],
)
def test_linear_copies_move_the_bytes(standin, ctx, rng, fmt, nch, dtype):
    n = 97
    esize = np.dtype(dtype).itemsize * nch
    src = _random(rng, n * nch, dtype)
    ary = _array1d(n, fmt, nch)
    cuda.memcpy_htoa(ary, 0, _random(rng, n * nch, dtype))  # not zeros underneath
    before = cuda.array_to_np(ary).reshape(-1).copy()
    d = cuda.to_device(src)
    # elements [5, 5 + 40) of src into elements [11, 51) of the array, through
    # an int pointer into the middle of the allocation
    cuda.memcpy_dtoa(ary, 11 * esize, int(d) + 5 * esize, 40 * esize)
    want = before.copy()
    want[11 * nch : 51 * nch] = src[5 * nch : 45 * nch]
    np.testing.assert_array_equal(cuda.array_to_np(ary).reshape(-1), want)
    # the whole array back out, into a DeviceAllocation, keyword arguments
    out = cuda.to_device(_random(rng, n * nch, dtype))
    cuda.memcpy_atod(dest=out, ary=ary, index=0, len=n * esize)
    np.testing.assert_array_equal(cuda.from_device(out, (n * nch,), dtype), want)
    # array to array, at offsets on both sides
    other = _array1d(n, fmt, nch)
    init = _random(rng, n * nch, dtype)
    cuda.memcpy_htoa(other, 0, init)
    cuda.memcpy_atoa(other, 3 * esize, ary, 20 * esize, 30 * esize)
    init[3 * nch : 33 * nch] = want[20 * nch : 50 * nch]
    np.testing.assert_array_equal(cuda.array_to_np(other).reshape(-1), init)
    # a zero-length copy calls nothing
    calls = standin.calls("cuMemcpyDtoA")
    cuda.memcpy_dtoa(ary, n * esize, d, 0)
    assert standin.calls("cuMemcpyDtoA") == calls


def _bad_cases():
    def two_d(f):
        return f(cuda.Array(cuda.ArrayDescriptor(8, 3, FMT.FLOAT, 1)))

    return [
        (
            "dtoa",
            lambda a, b, d: cuda.memcpy_dtoa(a, 2, d, 8),
            ValueError,
            "memcpy_dtoa\\(\\): index=2 is not a multiple of ary's 4-byte elements",
        ),
        (
            "dtoa",
            lambda a, b, d: cuda.memcpy_dtoa(a, 0, d, 6),
            ValueError,
            "memcpy_dtoa\\(\\): len=6 is not a multiple of ary's 4-byte elements",
        ),
        (
            "dtoa",
            lambda a, b, d: cuda.memcpy_dtoa(a, 8, d, 160),
            ValueError,
            "memcpy_dtoa\\(\\): index \\+ len = 8 \\+ 160 bytes exceeds ary, an Array of 160 "
            "bytes \\(40 elements of 4 bytes\\)",
        ),
        (
            "dtoa",
            lambda a, b, d: cuda.memcpy_dtoa(b, 0, d, 164),
            ValueError,
            "memcpy_dtoa\\(\\): len=164 bytes do not fit in the source allocation, which holds "
            "160 bytes",
        ),
        (
            "dtoa",
            lambda a, b, d: two_d(lambda t: cuda.memcpy_dtoa(t, 0, d, 4)),
            ValueError,
            "memcpy_dtoa\\(\\): ary is a 2-D array \\(8 x 3 x 0\\); it copies 1-D arrays "
            "\\(height 0\\): use Memcpy2D or Memcpy3D",
        ),
        (
            "atod",
            lambda a, b, d: cuda.memcpy_atod(d, a, 156, 8),
            ValueError,
            "memcpy_atod\\(\\): index \\+ len = 156 \\+ 8 bytes exceeds ary, an Array of 160 bytes",
        ),
        (
            "atod",
            lambda a, b, d: cuda.memcpy_atod(d, b, 0, 320),
            ValueError,
            "memcpy_atod\\(\\): len=320 bytes do not fit in the destination allocation, which "
            "holds 160 bytes",
        ),
        (
            "atod",
            lambda a, b, d: cuda.memcpy_atod(
                d,
                cuda.Array(
                    cuda.ArrayDescriptor3D(4, 0, 2, FMT.FLOAT, 1, cuda.array3d_flags.LAYERED)
                ),
                0,
                4,
            ),
            ValueError,
            "memcpy_atod\\(\\): ary is a 3-D or layered array \\(4 x 0 x 2\\)",
        ),
        (
            "atoa",
            lambda a, b, d: cuda.memcpy_atoa(b, 0, a, 4, 160),
            ValueError,
            "memcpy_atoa\\(\\): src_index \\+ len = 4 \\+ 160 bytes exceeds src, an Array of "
            "160 bytes \\(40 elements of 4 bytes\\)",
        ),
        (
            "atoa",
            lambda a, b, d: cuda.memcpy_atoa(a, 4, b, 0, 160),
            ValueError,
            "memcpy_atoa\\(\\): dest_index \\+ len = 4 \\+ 160 bytes exceeds dest, an Array of "
            "160 bytes",
        ),
        (
            "atoa",
            lambda a, b, d: cuda.memcpy_atoa(a, 0, _array1d(40, FMT.UNSIGNED_INT16, 1), 0, 8),
            ValueError,
            "memcpy_atoa\\(\\): the arrays' elements differ in size \\(dest 4 bytes, src 2 "
            "bytes\\)",
        ),
        (
            "atoa",
            lambda a, b, d: cuda.memcpy_atoa(a, 0, d, 0, 8),
            TypeError,
            "memcpy_atoa\\(\\): src must be an Array, not pygpu\\.driver\\.DeviceAllocation",
        ),
    ]


@pytest.mark.standin
@pytest.mark.parametrize("case", range(len(_bad_cases())))
def test_linear_copy_errors_before_the_driver(standin, ctx, case):
    kind, fn, exc, match = _bad_cases()[case]
    a, b = _array1d(40), _array1d(80)
    d = cuda.mem_alloc(160)
    routines = ("cuMemcpyDtoA", "cuMemcpyAtoD", "cuMemcpyAtoA")
    before = [standin.calls(r) for r in routines]
    with pytest.raises(exc, match=match):
        fn(a, b, d)
    assert [standin.calls(r) for r in routines] == before  # refused before the driver


@pytest.mark.standin
def test_linear_copies_with_dead_objects(standin, ctx, rng):
    a = _array1d(16)
    d = cuda.mem_alloc(64)
    a.free()
    with pytest.raises(cuda.LogicError, match="the Array was freed"):
        cuda.memcpy_dtoa(a, 0, d, 64)
    with pytest.raises(cuda.LogicError, match="the Array was freed"):
        cuda.memcpy_atoa(_array1d(16), 0, a, 0, 64)
    a = _array1d(16)
    d.free()
    with pytest.raises(cuda.LogicError, match="the DeviceAllocation was freed"):
        cuda.memcpy_atod(d, a, 0, 64)
    # a detached context: its arrays and allocations are refused, nothing reaches
    # the driver with a dead handle
    c = cuda.Device(0).make_context()
    try:
        ca, cd = _array1d(16), cuda.mem_alloc(64)
    finally:
        cuda.Context.pop()
    stale = standin.stale()
    c.detach()
    with pytest.raises(cuda.LogicError, match="the Array's context was detached"):
        cuda.memcpy_dtoa(ca, 0, cuda.mem_alloc(64), 64)
    with pytest.raises(cuda.LogicError, match="the DeviceAllocation's context was detached"):
        cuda.memcpy_atod(cd, _array1d(16), 0, 64)
    with pytest.raises(cuda.LogicError, match="the Array's context was detached"):
        cuda.memcpy_atoa(_array1d(16), 0, ca, 0, 64)
    del ca, cd
    gc.collect()
    assert standin.stale() == stale


@pytest.mark.standin
def test_memcpy_atoa_between_contexts_is_refused(standin, ctx):
    a = _array1d(16)
    c = cuda.Device(0).make_context()
    try:
        b = _array1d(16)
    finally:
        cuda.Context.pop()
    try:
        with pytest.raises(
            ValueError,
            match="memcpy_atoa\\(\\): dest and src live in "
            "different contexts; copy between contexts "
            "with Memcpy3DPeer",
        ):
            cuda.memcpy_atoa(a, 0, b, 0, 64)
    finally:
        del b
        c.detach()


def _peer_ops(rng):
    def dtoa():
        a = _array1d(32)
        d = cuda.to_device(_random(rng, 32, np.float32))
        cuda.memcpy_dtoa(a, 0, d, 128)
        return a

    def atod():
        a = _array1d(32)
        d = cuda.mem_alloc(128)
        cuda.memcpy_atod(d, a, 0, 128)
        return d

    def atoa():
        a, b = _array1d(32), _array1d(32)
        cuda.memcpy_atoa(a, 0, b, 0, 128)
        return a

    def peer():
        d = cuda.to_device(_random(rng, 32, np.float32))
        a = _array1d(32)
        c = cuda.Memcpy3DPeer()
        c.set_src_device(d)
        c.set_dst_array(a)
        c.width_in_bytes = c.src_pitch = 128
        c.height = 1
        c()
        return a

    def peer_async():
        d = cuda.to_device(_random(rng, 32, np.float32))
        a = _array1d(32)
        s = cuda.Stream()
        c = cuda.Memcpy3DPeer()
        c.set_src_device(d)
        c.set_dst_array(a)
        c.width_in_bytes = c.src_pitch = 128
        c.height = 1
        c(s)
        s.synchronize()
        return a

    return {
        "cuMemcpyDtoA": dtoa,
        "cuMemcpyAtoD": atod,
        "cuMemcpyAtoA": atoa,
        "cuMemcpy3DPeer": peer,
        "cuMemcpy3DPeerAsync": peer_async,
    }


@pytest.mark.standin
@pytest.mark.parametrize("routine", sorted(_peer_ops(None)))
def test_failure_injection(standin, ctx, rng, routine):
    """The entry point fails: a cuda.Error with its code and routine;
    nothing leaked, no dead handle used."""
    fn = _peer_ops(rng)[routine]
    r = fn()  # warm up (the context's staging and the like)
    del r
    gc.collect()
    base, stale = standin.live(), standin.stale()
    calls = standin.calls(routine)
    standin.fail(routine, 1, UNKNOWN)
    err = None
    try:
        fn()
    except cuda.Error as e:  # (no traceback kept: it would hold fn's objects)
        err = (e.code, e.routine, str(e))
    finally:
        standin.cancel()
    assert standin.fired()
    assert standin.calls(routine) == calls + 1
    assert err is not None and err[:2] == (UNKNOWN, routine)
    assert err[2].startswith(routine + " failed"), err
    gc.collect()
    assert standin.live() == base and standin.stale() == stale


@pytest.mark.standin
def test_memcpy3d_peer_copies_and_contexts(standin, ctx, rng):
    # host -> 2-D array, a sub-rectangle of it -> pitched device memory,
    # device -> host: every side of the peer copy, contexts defaulted
    a = rng.standard_normal((6, 10)).astype(np.float32)
    ary = cuda.Array(cuda.ArrayDescriptor(10, 6, FMT.FLOAT, 1))
    c = cuda.Memcpy3DPeer()
    c.set_src_host(a)
    c.set_dst_array(ary)
    c.width_in_bytes = c.src_pitch = 40
    c.height = 6
    c()
    np.testing.assert_array_equal(cuda.array_to_np(ary), a)
    dev, pitch = cuda.mem_alloc_pitch(16, 3, 4)
    c = cuda.Memcpy3DPeer()
    c.set_src_array(ary)
    c.src_x_in_bytes, c.src_y = 12, 2
    c.set_dst_device(dev)
    c.set_dst_context(ctx)
    c.dst_pitch, c.width_in_bytes, c.height = pitch, 16, 3
    s = cuda.Stream()
    calls = standin.calls("cuMemcpy3DPeerAsync")
    c(s)
    s.synchronize()
    assert standin.calls("cuMemcpy3DPeerAsync") == calls + 1
    out = np.zeros((3, 4), np.float32)
    c = cuda.Memcpy3DPeer()
    c.set_src_device(dev)
    c.set_src_context(ctx)
    c.src_pitch = pitch
    c.set_dst_host(out)
    c.dst_pitch, c.width_in_bytes, c.height = 16, 16, 3
    c()
    np.testing.assert_array_equal(out, a[2:5, 3:7])


@pytest.mark.standin
def test_memcpy3d_peer_between_devices(standin, rng):
    """Device 0's memory into a 3-D array of device 1 and back into device
    0's memory (the stand-in has two devices)."""
    c0 = cuda.Device(0).retain_primary_context()
    c1 = cuda.Device(1).retain_primary_context()
    vol = rng.standard_normal((3, 4, 5)).astype(np.float32)
    c0.push()
    try:
        d0 = cuda.to_device(vol)
        back = cuda.mem_alloc(vol.nbytes)
    finally:
        cuda.Context.pop()
    c1.push()
    try:
        ary = cuda.Array(cuda.ArrayDescriptor3D(5, 4, 3, FMT.FLOAT, 1))
    finally:
        cuda.Context.pop()
    c0.push()
    try:
        c = cuda.Memcpy3DPeer()
        c.set_src_device(d0)
        c.set_src_context(c0)
        c.set_dst_array(ary)
        c.set_dst_context(c1)
        c.width_in_bytes = c.src_pitch = 20
        c.height = c.src_height = 4
        c.depth = 3
        c()
        c = cuda.Memcpy3DPeer()
        c.set_src_array(ary)
        c.set_dst_device(back)  # its context: the allocation's own (c0)
        c.width_in_bytes = c.dst_pitch = 20
        c.height = c.dst_height = 4
        c.depth = 3
        c()
        np.testing.assert_array_equal(cuda.from_device(back, vol.shape, vol.dtype), vol)
    finally:
        cuda.Context.pop()


@pytest.mark.standin
def test_memcpy3d_peer_errors_before_the_driver(standin, ctx):
    ary = cuda.Array(cuda.ArrayDescriptor(10, 8, FMT.FLOAT, 1))
    out = np.zeros(80, np.float32)

    def copy(**setup):
        c = cuda.Memcpy3DPeer()
        c.set_src_array(ary)
        c.set_dst_host(out)
        c.width_in_bytes, c.height, c.dst_pitch = 40, 8, 40
        for k, v in setup.items():
            if k.startswith("set_"):
                getattr(c, k)(v)
            else:
                setattr(c, k, v)
        return c

    before = standin.calls("cuMemcpy3DPeer")
    with pytest.raises(
        ValueError, match="Memcpy3DPeer: src_y \\+ height = 1 \\+ 8 exceeds the src array's 8 rows"
    ):
        copy(src_y=1)()
    with pytest.raises(
        TypeError, match="Memcpy3DPeer: set_dst_context\\(\\) takes a Context, not int"
    ):
        copy(set_dst_context=0)()
    with pytest.raises(
        TypeError, match="Memcpy3DPeer: set_src_context\\(\\) takes a Context, not str"
    ):
        copy(set_src_context="ctx")()
    with pytest.raises(ValueError, match="Memcpy3DPeer: src_lod and dst_lod must be 0"):
        copy(dst_lod=1)()
    other = cuda.Device(0).make_context()
    cuda.Context.pop()
    other.detach()
    with pytest.raises(cuda.LogicError, match="detached"):
        copy(set_dst_context=other)()
    assert standin.calls("cuMemcpy3DPeer") == before
    copy()()
    assert standin.calls("cuMemcpy3DPeer") == before + 1
    np.testing.assert_array_equal(out, cuda.array_to_np(ary).reshape(-1))


# ---- a GPU ----


@pytest.mark.gpu
@pytest.mark.parametrize(
    "fmt, nch, dtype",
    [
        (FMT.FLOAT, 1, np.float32),
        (FMT.SIGNED_INT32, 2, np.int32),
        (FMT.UNSIGNED_INT8, 4, np.uint8),
    ],
)
def test_gpu_linear_array_copies(ctx, rng, fmt, nch, dtype):
    n = 1000
    esize = np.dtype(dtype).itemsize * nch
    src = _random(rng, n * nch, dtype)
    init = _random(rng, n * nch, dtype)
    ary = _array1d(n, fmt, nch)
    cuda.memcpy_htoa(ary, 0, init)
    d = cuda.to_device(src)
    cuda.memcpy_dtoa(ary, 16 * esize, int(d) + 64 * esize, 700 * esize)
    want = init.copy()
    want[16 * nch : 716 * nch] = src[64 * nch : 764 * nch]
    out = cuda.to_device(_random(rng, n * nch, dtype))
    cuda.memcpy_atod(out, ary, 0, n * esize)
    np.testing.assert_array_equal(cuda.from_device(out, (n * nch,), dtype), want)
    part = cuda.to_device(_random(rng, 100 * nch, dtype))
    cuda.memcpy_atod(part, ary, 500 * esize, 100 * esize)
    np.testing.assert_array_equal(
        cuda.from_device(part, (100 * nch,), dtype), want[500 * nch : 600 * nch]
    )
    other = _array1d(n, fmt, nch)
    oinit = _random(rng, n * nch, dtype)
    cuda.memcpy_htoa(other, 0, oinit)
    cuda.memcpy_atoa(other, 8 * esize, ary, 300 * esize, 400 * esize)
    oinit[8 * nch : 408 * nch] = want[300 * nch : 700 * nch]
    back = np.empty_like(oinit)
    cuda.memcpy_atoh(back, other, 0)
    np.testing.assert_array_equal(back, oinit)
    ctx.synchronize()


@pytest.mark.gpu
def test_gpu_memcpy3d_peer_device_and_array_sides(ctx, rng):
    """Pitched device memory -> a 2-D array, a sub-block of it -> device
    memory, on a stream, then a 3-D volume through a 3-D array; contexts
    set explicitly (the same context on both sides)."""
    a = rng.standard_normal((37, 61)).astype(np.float32)
    dev, pitch = cuda.mem_alloc_pitch(61 * 4, 37, 4)
    c2 = cuda.Memcpy2D()
    c2.set_src_host(a)
    c2.set_dst_device(dev)
    c2.src_pitch, c2.dst_pitch, c2.width_in_bytes, c2.height = 61 * 4, pitch, 61 * 4, 37
    c2()
    ary = cuda.Array(cuda.ArrayDescriptor(61, 37, FMT.FLOAT, 1))
    c = cuda.Memcpy3DPeer()
    c.set_src_device(dev)
    c.set_src_context(ctx)
    c.src_pitch = pitch
    c.set_dst_array(ary)
    c.set_dst_context(ctx)
    c.width_in_bytes, c.height = 61 * 4, 37
    c()
    np.testing.assert_array_equal(cuda.array_to_np(ary), a)
    sub = cuda.to_device(rng.standard_normal(20 * 10).astype(np.float32))
    c = cuda.Memcpy3DPeer()
    c.set_src_array(ary)
    c.src_x_in_bytes, c.src_y = 5 * 4, 11
    c.set_dst_device(sub)
    c.dst_pitch = c.width_in_bytes = 10 * 4
    c.height = 20
    s = cuda.Stream()
    c(s)
    s.synchronize()
    np.testing.assert_array_equal(cuda.from_device(sub, (20, 10), np.float32), a[11:31, 5:15])
    vol = rng.standard_normal((5, 9, 33)).astype(np.float32)
    dv = cuda.to_device(vol)
    ary3 = cuda.Array(cuda.ArrayDescriptor3D(33, 9, 5, FMT.FLOAT, 1))
    c = cuda.Memcpy3DPeer()
    c.set_src_device(dv)
    c.set_dst_array(ary3)
    c.width_in_bytes = c.src_pitch = 33 * 4
    c.height = c.src_height = 9
    c.depth = 5
    c()
    np.testing.assert_array_equal(cuda.array_to_np(ary3), vol)


@pytest.mark.gpu
def test_gpu_memcpy3d_peer_host_sides(ctx, rng):
    a = rng.standard_normal((13, 17)).astype(np.float32)
    ary = cuda.Array(cuda.ArrayDescriptor(17, 13, FMT.FLOAT, 1))
    c = cuda.Memcpy3DPeer()
    c.set_src_host(a)
    c.set_dst_array(ary)
    c.width_in_bytes = c.src_pitch = 17 * 4
    c.height = 13
    c()
    out = rng.standard_normal((13, 17)).astype(np.float32)
    c = cuda.Memcpy3DPeer()
    c.set_src_array(ary)
    c.set_dst_host(out)
    c.width_in_bytes = c.dst_pitch = 17 * 4
    c.height = 13
    c()
    np.testing.assert_array_equal(out, a)


@pytest.mark.gpu
def test_gpu_memcpy3d_peer_between_two_gpus(rng):
    if cuda.Device.count() < 2:
        pytest.skip("needs two GPUs")
    c0 = cuda.Device(0).retain_primary_context()
    c1 = cuda.Device(1).retain_primary_context()
    vol = rng.standard_normal((4, 6, 50)).astype(np.float32)
    c0.push()
    try:
        d0 = cuda.to_device(vol)
        back = cuda.mem_alloc(vol.nbytes)
    finally:
        cuda.Context.pop()
    c1.push()
    try:
        ary = cuda.Array(cuda.ArrayDescriptor3D(50, 6, 4, FMT.FLOAT, 1))
        c = cuda.Memcpy3DPeer()
        c.set_src_device(d0)
        c.set_src_context(c0)
        c.set_dst_array(ary)
        c.set_dst_context(c1)
        c.width_in_bytes = c.src_pitch = 200
        c.height = c.src_height = 6
        c.depth = 4
        c()
        np.testing.assert_array_equal(cuda.array_to_np(ary), vol)
        c = cuda.Memcpy3DPeer()
        c.set_src_array(ary)
        c.set_dst_device(back)
        c.set_dst_context(c0)
        c.width_in_bytes = c.dst_pitch = 200
        c.height = c.dst_height = 6
        c.depth = 4
        c()
        c1.synchronize()
    finally:
        cuda.Context.pop()
    c0.push()
    try:
        np.testing.assert_array_equal(cuda.from_device(back, vol.shape, vol.dtype), vol)
    finally:
        cuda.Context.pop()
