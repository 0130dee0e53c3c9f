"""PyCUDA driver names that PyCUDA's own test_driver.py needs at import or
in use: PointerHolderBase, aligned_empty, compute_mode."""

import numpy as np
import pytest

import pygpu.driver as cuda


@pytest.mark.parametrize("alignment", [64, 4096, 1 << 16])
@pytest.mark.parametrize("order", ["C", "F"])
def test_aligned_empty(alignment, order):
    a = cuda.aligned_empty((37, 5), np.float32, order=order, alignment=alignment)
    assert a.shape == (37, 5) and a.dtype == np.float32
    assert a.ctypes.data % alignment == 0
    assert a.flags.c_contiguous if order == "C" else a.flags.f_contiguous
    a[...] = np.arange(a.size, dtype=np.float32).reshape(a.shape)  # writable, whole
    assert a.sum() == a.size * (a.size - 1) / 2
    with pytest.raises(ValueError, match="alignment must be a positive power of two, got 48"):
        cuda.aligned_empty(4, alignment=48)


def test_compute_mode_names():
    assert cuda.compute_mode.DEFAULT == 0 and cuda.compute_mode.PROHIBITED == 2
    assert cuda.compute_mode.EXCLUSIVE_PROCESS == 3


class Wrapped(cuda.PointerHolderBase):
    def __init__(self, alloc):
        self.alloc = alloc
        super().__init__()

    def get_pointer(self):
        return int(self.alloc)


def test_pointer_holder_base_without_get_pointer():
    with pytest.raises(NotImplementedError, match="PointerHolderBase must define get_pointer"):
        int(cuda.PointerHolderBase())


@pytest.mark.driver
def test_pointer_holder_base_is_a_device_pointer(ctx, rng):
    from pygpu import gpuarray

    dev = cuda.mem_alloc(1024)
    w = Wrapped(dev)
    x = rng.integers(0, 256, 1024).astype(np.uint8)
    cuda.memcpy_htod(w, x)  # a copy endpoint
    back = np.empty_like(x)
    cuda.memcpy_dtoh(back, dev)
    np.testing.assert_array_equal(back, x)
    ary = gpuarray.GPUArray((1024,), np.uint8, gpudata=w)  # GPUArray's memory
    np.testing.assert_array_equal(ary.get(), x)


def test_bitlog2():
    from pygpu.tools import bitlog2

    for n in [1, 2, 3, 17, 0xAFFE, 0x3AFFE, 0xCC3AFFE, 2**63 + 5]:
        assert bitlog2(n) == int(np.floor(np.log2(float(n)))) if n < 2**52 else 63
    with pytest.raises(ValueError, match="bitlog2 needs n >= 1, got 0"):
        bitlog2(0)


def test_pool_bin_numbers_invert(rng):
    from pygpu.tools import DeviceMemoryPool, bin_size

    sizes = [0, 1, 255, 256, 257, 320, 321, 512, 513] + [
        int(rng.integers(0, 1 << 31)) >> int(rng.integers(0, 32)) for _ in range(5000)
    ]
    for s in sizes:
        b = DeviceMemoryPool.bin_number(s)
        a = DeviceMemoryPool.alloc_size(b)
        assert a == bin_size(s) >= s and DeviceMemoryPool.bin_number(a) == b, s
    with pytest.raises(ValueError, match="bin numbers are >= 0, got -1"):
        DeviceMemoryPool.alloc_size(-1)


@pytest.mark.standin
def test_async_pool_keeps_freed_memory(standin, ctx):
    """The driver's default pool gives freed memory back at every
    synchronize (release threshold 0), so each large stream-ordered
    allocation after a sync mapped fresh pages; pygpu keeps it, as CuPy's
    pool does."""
    import ctypes

    lib = standin.lib
    lib.fakecuda_pool_release_threshold.restype = ctypes.c_ulonglong
    a = cuda.mem_alloc_async(1 << 20)
    assert lib.fakecuda_pool_release_threshold(0) == 2**64 - 1
    a.free()
