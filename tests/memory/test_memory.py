"""Device memory, transfers, page-locked memory, streams and events on a GPU."""

import gc
import os
import time

import numpy as np
import pytest

import pygpu.driver as cuda

pytestmark = pytest.mark.driver

SIZES = [0, 1, 3, 4097, 65537, 1 << 20, (64 << 20) + 5]


def rand_bytes(rng, n):
    return rng.integers(0, 256, n, dtype=np.uint8)


@pytest.mark.parametrize("n", SIZES)
def test_htod_dtoh_roundtrip(ctx, rng, n):
    src = rand_bytes(rng, n)
    dev = cuda.mem_alloc(n)
    assert dev.size == n
    cuda.memcpy_htod(dev, src)
    out = rand_bytes(rng, n)
    cuda.memcpy_dtoh(out, dev)
    np.testing.assert_array_equal(out, src)


@pytest.mark.parametrize("n", [1, 1000, 1 << 22])
def test_async_pinned_and_dtod(ctx, rng, n):
    s = cuda.Stream()
    h = cuda.pagelocked_empty(n, np.uint8)
    assert isinstance(h.base, cuda.HostAllocation) and h.base.size == n
    h[:] = rand_bytes(rng, n)
    a, b = cuda.mem_alloc(n), cuda.mem_alloc(n)
    cuda.memcpy_htod_async(a, h, s)
    cuda.memcpy_dtod_async(b, a, n, s)
    back = cuda.pagelocked_zeros_like(h)
    assert not back.any()
    cuda.memcpy_dtoh_async(back, b, s)
    s.synchronize()
    assert s.is_done()
    np.testing.assert_array_equal(back, h)


def test_odd_offsets(ctx, rng):
    n = 100003
    src = rand_bytes(rng, n)
    dev = cuda.mem_alloc(n + 64)
    cuda.memset_d8(dev, 0xAB, n + 64)
    cuda.memcpy_htod(int(dev) + 7, src)
    out = np.empty(n + 64, np.uint8)
    cuda.memcpy_dtoh(out, dev)
    np.testing.assert_array_equal(out[7 : 7 + n], src)
    assert (out[:7] == 0xAB).all() and (out[7 + n :] == 0xAB).all()
    part = np.empty(n - 11, np.uint8)
    cuda.memcpy_dtoh(part, int(dev) + 18)
    np.testing.assert_array_equal(part, src[11:])


def test_one_gib(ctx, rng):
    n = 1 << 30
    src = rand_bytes(rng, n)
    dev = cuda.mem_alloc(n)
    cuda.memcpy_htod(dev, src)
    out = np.empty(n, np.uint8)
    cuda.memcpy_dtoh(out, dev)
    assert np.array_equal(out, src)


def test_typed_arrays_and_helpers(ctx, rng):
    x = rng.standard_normal((37, 53)).astype(np.float32)
    dev = cuda.to_device(x)
    np.testing.assert_array_equal(cuda.from_device(dev, x.shape, x.dtype), x)
    np.testing.assert_array_equal(cuda.from_device_like(dev, x), x)
    assert cuda.mem_alloc_like(x).size == x.nbytes
    f = np.asfortranarray(x)
    dev = cuda.to_device(f)
    np.testing.assert_array_equal(cuda.from_device(dev, x.shape, x.dtype, order="F"), f)


@pytest.mark.parametrize(
    "width,fn,dtype",
    [
        (1, cuda.memset_d8, np.uint8),
        (2, cuda.memset_d16, np.uint16),
        (4, cuda.memset_d32, np.uint32),
    ],
)
def test_memset(ctx, rng, width, fn, dtype):
    n = 10007
    value = int(rng.integers(1, 1 << (8 * width)))
    dev = cuda.mem_alloc(n * width + 8)
    cuda.memset_d8(dev, 0x5A, n * width + 8)
    fn(dev, value, n)
    out = np.empty(n * width + 8, np.uint8)
    cuda.memcpy_dtoh(out, dev)
    assert (out[: n * width].view(dtype) == value).all()
    assert (out[n * width :] == 0x5A).all()
    s = cuda.Stream()
    getattr(cuda, fn.__name__ + "_async")(dev, value ^ 1, n, s)
    s.synchronize()
    cuda.memcpy_dtoh(out, dev)
    assert (out[: n * width].view(dtype) == (value ^ 1)).all()


def test_memcpy_2d_pitched(ctx, rng):
    h, w = 33, 47
    a = rng.standard_normal((h, w)).astype(np.float32)
    dev, pitch = cuda.mem_alloc_pitch(w * 4, h, 4)
    assert pitch >= w * 4
    c = cuda.Memcpy2D()
    c.set_src_host(a)
    c.set_dst_device(dev)
    c.width_in_bytes = w * 4
    c.src_pitch = w * 4
    c.dst_pitch = pitch
    c.height = h
    c(aligned=True)
    out = np.zeros_like(a)
    c2 = cuda.Memcpy2D()
    c2.set_src_device(dev)
    c2.set_dst_host(out)
    c2.width_in_bytes, c2.src_pitch, c2.dst_pitch, c2.height = w * 4, pitch, w * 4, h
    s = cuda.Stream()
    c2(s)
    s.synchronize()
    np.testing.assert_array_equal(out, a)
    # a sub-rectangle with offsets
    sub = np.zeros((10, 20), np.float32)
    c3 = cuda.Memcpy2D()
    c3.set_src_device(dev)
    c3.set_dst_host(sub)
    c3.src_x_in_bytes, c3.src_y = 3 * 4, 5
    c3.width_in_bytes, c3.src_pitch, c3.dst_pitch, c3.height = 20 * 4, pitch, 20 * 4, 10
    c3()
    np.testing.assert_array_equal(sub, a[5:15, 3:23])
    c3.height = h  # would read past the destination
    with pytest.raises(ValueError, match="do not fit"):
        c3()


def test_register_host_memory(ctx, rng):
    a = rng.standard_normal(12345)
    r = cuda.register_host_memory(a)
    assert isinstance(r.base, cuda.HostAllocation) and r.base.registered
    assert np.shares_memory(r, a)
    dev = cuda.mem_alloc(a.nbytes)
    s = cuda.Stream()
    cuda.memcpy_htod_async(dev, r, s)
    out = cuda.pagelocked_empty_like(a)
    cuda.memcpy_dtoh_async(out, dev, s)
    s.synchronize()
    np.testing.assert_array_equal(out, a)
    del r
    gc.collect()
    a[:] = 1.0  # still valid memory after unregistering


def test_mapped_memory(ctx, rng):
    a = cuda.pagelocked_empty(1000, np.float32, mem_flags=cuda.host_alloc_flags.DEVICEMAP)
    a[:] = rng.standard_normal(1000)
    p = a.base.get_device_pointer()
    out = np.empty_like(a)
    cuda.memcpy_dtoh(out, p)
    np.testing.assert_array_equal(out, a)
    with pytest.raises(TypeError, match="get_device_pointer"):
        cuda.memcpy_dtoh(out, a.base)


def test_managed_and_async_alloc(ctx, rng):
    src = rand_bytes(rng, 1 << 16)
    m = cuda.mem_alloc_managed(1 << 16)
    cuda.memcpy_htod(m, src)
    cuda.mem_prefetch(m, 1 << 16, device=0)
    out = np.empty_like(src)
    cuda.memcpy_dtoh(out, m)
    np.testing.assert_array_equal(out, src)
    s = cuda.Stream()
    a = cuda.mem_alloc_async(1 << 16, s)
    cuda.memcpy_htod_async(a, src, s)
    cuda.memcpy_dtoh_async(out, a, s)
    s.synchronize()
    a.free()
    np.testing.assert_array_equal(out, src)


def test_errors(ctx):
    dev = cuda.mem_alloc(16)
    with pytest.raises(ValueError, match="32 bytes do not fit .* holds 16 bytes"):
        cuda.memcpy_htod(dev, np.zeros(32, np.uint8))
    with pytest.raises(ValueError, match="do not fit"):
        cuda.memcpy_dtoh(np.zeros(17, np.uint8), dev)
    with pytest.raises(ValueError, match="not contiguous"):
        cuda.memcpy_htod(dev, np.zeros((4, 4), np.uint8)[:, ::2])
    ro = np.zeros(16, np.uint8)
    ro.flags.writeable = False
    with pytest.raises(TypeError, match="read-only"):
        cuda.memcpy_dtoh(ro, dev)
    with pytest.raises(TypeError, match="host buffer"):
        cuda.memcpy_htod(dev, 12)
    with pytest.raises(TypeError, match="device pointer"):
        cuda.memcpy_htod("nope", np.zeros(1, np.uint8))
    with pytest.raises(ValueError, match=">= 0"):
        cuda.mem_alloc(-1)
    with pytest.raises(TypeError, match="must be an int"):
        cuda.mem_alloc(1.5)
    with pytest.raises(OverflowError, match="does not fit in 8 bits"):
        cuda.memset_d8(dev, 256, 1)
    with pytest.raises(ValueError, match="do not fit"):
        cuda.memset_d32(dev, 1, 5)
    with pytest.raises(cuda.MemoryError, match="asked for"):
        cuda.mem_alloc(1 << 50)
    dev.free()
    dev.free()
    assert dev.freed
    with pytest.raises(cuda.LogicError, match="freed"):
        cuda.memcpy_htod(dev, np.zeros(1, np.uint8))
    with pytest.raises(cuda.LogicError, match="freed"):
        int(dev)


def test_allocation_protocols(ctx):
    with cuda.mem_alloc(100) as a:
        cai = a.__cuda_array_interface__
        assert cai["data"] == (int(a), False) and cai["shape"] == (100,)
        assert cai["typestr"] == "|u1" and cai["version"] == 3
        assert "100 bytes" in repr(a)
    assert a.freed


def test_alloc_free_cycles_return_memory(ctx):
    # Free memory is the device's: where other processes share the GPU
    # (pytest-xdist's workers) it moves with theirs, so there the test
    # allows 2 GiB and looks again for a while; a leak of any loop below
    # loses far more (64 GiB, 6.4 GiB, 4 GiB)
    shared = bool(os.environ.get("PYTEST_XDIST_WORKER"))
    slack = 2 << 30 if shared else 0
    cuda.Context.synchronize()
    free0, _ = cuda.mem_get_info()
    for _ in range(1_000_000):
        cuda.mem_alloc(1 << 16).free()
    for _ in range(100_000):
        a = cuda.mem_alloc(1 << 16)  # freed when rebound
    del a
    cyc = []
    for _ in range(4000):  # freed by the garbage collector
        x = [cuda.mem_alloc(1 << 20)]
        x.append(x)
        cyc.append(None)
    del x
    gc.collect()
    for _ in range(50 if shared else 1):
        free1, _ = cuda.mem_get_info()
        if abs(free1 - free0) <= slack:
            break
        time.sleep(0.1)
    assert abs(free1 - free0) <= slack, (free0, free1)


def test_stream_and_events(ctx, rng):
    s = cuda.Stream(flags=cuda.stream_flags.NON_BLOCKING)
    assert s.flags & cuda.stream_flags.NON_BLOCKING
    assert isinstance(s.priority, int)
    e1, e2 = cuda.Event(), cuda.Event()
    n = 64 << 20
    a, b = cuda.mem_alloc(n), cuda.mem_alloc(n)
    e1.record(s)
    for _ in range(4):
        cuda.memcpy_dtod_async(b, a, n, s)
    e2.record(s)
    e2.synchronize()
    assert e2.query() and e1.query()
    ms = e2.time_since(e1)
    assert ms > 0 and e1.time_till(e2) == pytest.approx(ms)
    s2 = cuda.Stream()
    s2.wait_for_event(e2)
    s2.synchronize()
    assert s.__cuda_stream__() == (0, s.handle)
    w = cuda.Stream.from_handle(s.handle)
    assert w == s and "foreign" in repr(w)
    w.synchronize()
    del w
    s.synchronize()  # the wrapper did not destroy it
    cuda.Stream.null().synchronize()
    cuda.Stream.per_thread().synchronize()
    with pytest.raises(TypeError, match="Event"):
        s.wait_for_event(5)
    with pytest.raises(TypeError, match="stream must be"):
        cuda.memcpy_htod_async(a, np.zeros(4, np.uint8), stream="x")


@pytest.mark.gpu  # CuPy talks to the real driver, not the stand-in
def test_cupy_interop(ctx, rng):
    cp = pytest.importorskip("cupy")
    x = rng.standard_normal(1000).astype(np.float32)
    c = cp.asarray(x)
    out = np.empty_like(x)
    cuda.memcpy_dtoh(out, c)  # __cuda_array_interface__
    np.testing.assert_array_equal(out, x)
    d = cuda.to_device(x * 2)
    v = cp.asarray(d).view(cp.float32)  # CuPy reads our allocation
    np.testing.assert_array_equal(cp.asnumpy(v), x * 2)
    s = cp.cuda.Stream()
    w = cuda.Stream.from_handle(s.ptr, owner=s)
    w.synchronize()


@pytest.fixture
def small_staging():
    from pygpu import _driver

    old = _driver._set_staging(1 << 20, 3, 1 << 16)  # staged from 1 MiB, 64 KiB chunks
    yield
    _driver._set_staging(*old)


@pytest.mark.parametrize("n", [(1 << 20), (5 << 20) + 13, (3 << 16) - 1 + (1 << 20)])
def test_staged_pageable_copies(ctx, rng, small_staging, n):
    src = rand_bytes(rng, n)
    dev = cuda.mem_alloc(n + 32)
    cuda.memset_d8(dev, 0x11, n + 32)
    cuda.memcpy_htod(int(dev) + 5, src)
    out = rand_bytes(rng, n + 32)
    cuda.memcpy_dtoh(out, dev)
    np.testing.assert_array_equal(out[5 : 5 + n], src)
    assert (out[:5] == 0x11).all() and (out[5 + n :] == 0x11).all()
    back = rand_bytes(rng, n)
    cuda.memcpy_dtoh(back, int(dev) + 5)
    np.testing.assert_array_equal(back, src)


def test_staged_copy_is_ordered_after_queued_work(ctx, small_staging):
    n = 8 << 20
    dev = cuda.mem_alloc(n)
    for v in (1, 2, 3):
        cuda.memset_d32_async(dev, v, n // 4)  # legacy default stream
        out = np.zeros(n // 4, np.uint32)
        cuda.memcpy_dtoh(out, dev)
        assert (out == v).all()
        src = np.full(n // 4, v + 100, np.uint32)
        cuda.memcpy_htod(dev, src)
        cuda.memset_d32_async(int(dev) + 4, v + 7, 1)  # after the copy
        cuda.memcpy_dtoh(out, dev)
        assert out[0] == v + 100 and out[1] == v + 7 and (out[2:] == v + 100).all()


def test_concurrent_large_copies_from_threads(ctx, rng, small_staging):
    import threading

    n = 6 << 20
    srcs = [rand_bytes(rng, n) for _ in range(4)]
    outs = [np.zeros(n, np.uint8) for _ in range(4)]
    errors = []

    def work(i):
        try:
            ctx.push()
            d = cuda.mem_alloc(n)
            for _ in range(3):
                cuda.memcpy_htod(d, srcs[i])
                cuda.memcpy_dtoh(outs[i], d)
            cuda.Context.pop()
        except Exception as e:  # reported below
            errors.append(e)

    ts = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert errors == []
    for s, o in zip(srcs, outs):
        np.testing.assert_array_equal(o, s)


@pytest.mark.gpu
def test_managed_arrays(ctx, rng):
    from pygpu.compiler import SourceModule

    a = cuda.managed_empty((300, 7), np.float32)
    assert isinstance(a.base, cuda.DeviceAllocation) and a.base.size == a.nbytes
    x = rng.standard_normal((300, 7)).astype(np.float32)
    a[:] = x  # written on the host
    f = SourceModule(
        "__global__ void inc(float *p, int n) { int i = blockIdx.x * blockDim.x"
        " + threadIdx.x; if (i < n) p[i] = 2 * p[i] + 1; }"
    ).get_function("inc")
    cuda.mem_prefetch(a.base, a.nbytes, device=0)
    f(a.base, a.size, block=(256, 1, 1), grid=(9, 1))
    cuda.Context.synchronize()
    np.testing.assert_array_equal(a, 2 * x + 1)  # read on the host
    z = cuda.managed_zeros_like(a)
    assert z.shape == a.shape and not z.any()
    assert cuda.managed_empty(0, np.float64).size == 0


def test_peer_copies(rng):
    if cuda.Device.count() < 2:
        pytest.skip("needs two GPUs")
    c0 = cuda.Device(0).retain_primary_context()
    c1 = cuda.Device(1).retain_primary_context()
    n = (32 << 20) + 3
    src = rand_bytes(rng, n)
    with c0:
        a = cuda.to_device(src)
    with c1:
        b = cuda.mem_alloc(n)
    with c0:
        cuda.memcpy_peer(b, a, n, dest_context=c1, src_context=c0)
    with c1:
        out = np.empty(n, np.uint8)
        cuda.memcpy_dtoh(out, b)
        np.testing.assert_array_equal(out, src)
        s = cuda.Stream()
        cuda.memset_d8(b, 0, n)
        cuda.memcpy_peer_async(b, a, n, c1, c0, stream=s)
        s.synchronize()
        cuda.memcpy_dtoh(out, b)
        np.testing.assert_array_equal(out, src)
    if cuda.Device(0).can_access_peer(cuda.Device(1)):
        with c0:
            c0.enable_peer_access(c1)
            cuda.memcpy_dtod(a, b, n)  # plain copy across devices
            np.testing.assert_array_equal(cuda.from_device_like(a, src), src)
            c0.disable_peer_access(c1)


@pytest.mark.parametrize(
    "make",
    [
        lambda: cuda.pagelocked_empty(None, np.float32),
        lambda: cuda.pagelocked_zeros(None, np.float32),
        lambda: cuda.managed_empty(None, np.float32),
        lambda: cuda.from_device(0, None, np.float32),
    ],
)
def test_none_is_not_a_shape(make):
    # refused before the driver, as NumPy >= 2.1 refuses it; NumPy 2.0
    # (Python 3.9's) only warned and made a 0-d array
    with pytest.raises(TypeError, match=r"Use \(\) not None as shape arguments"):
        make()
