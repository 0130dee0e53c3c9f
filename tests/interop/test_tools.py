"""Memory pools."""

import gc

import numpy as np
import pytest

import pygpu.driver as cuda
from pygpu.tools import DeviceMemoryPool, PageLockedMemoryPool, bin_size


def test_bin_size():
    assert bin_size(0) == 256 and bin_size(256) == 256
    assert bin_size(257) == 320
    for n in [1000, 4097, 10**6, 3 * 2**20 + 1]:
        b = bin_size(n)
        assert n <= b <= n * 1.25 + 256, (n, b)
    assert bin_size(1 << 20) == 1 << 20


@pytest.mark.driver
def test_device_memory_pool(ctx, rng):
    pool = DeviceMemoryPool()
    a = pool.allocate(10000)
    addr = int(a)
    x = rng.standard_normal(2500).astype(np.float32)
    cuda.memcpy_htod(a, x)
    np.testing.assert_array_equal(cuda.from_device_like(a, x), x)
    assert pool.active_blocks == 1 and pool.held_blocks == 0
    a.free()
    a.free()
    assert pool.active_blocks == 0 and pool.held_blocks == 1
    b = pool.allocate(9999)
    assert int(b) == addr  # the block came back
    del b
    gc.collect()
    assert pool.held_blocks == 1
    c = pool.allocate(10000)
    assert c.__cuda_array_interface__["data"][0] == addr
    pool.stop_holding()
    del c
    assert pool.held_blocks == 0


@pytest.mark.gpu
def test_pooled_allocation_as_kernel_argument(ctx, rng):
    from pygpu.compiler import SourceModule

    f = SourceModule("__global__ void twice(float *x) { x[threadIdx.x] *= 2; }").get_function(
        "twice"
    )
    pool = DeviceMemoryPool()
    x = rng.standard_normal(64).astype(np.float32)
    a = pool.allocate(x.nbytes)
    cuda.memcpy_htod(a, x)
    f(a, block=(64, 1, 1))
    np.testing.assert_array_equal(cuda.from_device_like(a, x), 2 * x)


@pytest.mark.driver
def test_pagelocked_pool(ctx, rng):
    pool = PageLockedMemoryPool()
    a = pool.empty((30, 40), np.float64)
    assert a.shape == (30, 40) and a.dtype == np.float64
    base = a
    while not isinstance(base, cuda.HostAllocation):
        base = base.base  # views down to the pinned block
    assert base.size >= a.nbytes
    a[:] = rng.standard_normal((30, 40))
    d = cuda.mem_alloc(a.nbytes)
    s = cuda.Stream()
    cuda.memcpy_htod_async(d, a, s)
    b = pool.zeros((30, 40), np.float64)
    assert not b.any()
    cuda.memcpy_dtoh_async(b, d, s)
    s.synchronize()
    np.testing.assert_array_equal(a, b)
    assert pool.active_blocks == 2
    addr = a.__array_interface__["data"][0]
    del a
    gc.collect()
    assert pool.active_blocks == 1 and pool.held_blocks == 1
    c = pool.empty(1200, np.float64)
    assert c.__array_interface__["data"][0] == addr
