"""gpuarray._memcpy_discontig(dst, src, async_=False, stream=None): PyCUDA's
copy between arrays of one shape and dtype and any strides (reikna's
Array.copy calls it with async_= and stream=).  Layouts that nest are one
cuMemcpy/cuMemcpy2D/cuMemcpy3D (checked on the stand-in, which copies
memory for real); the others, which PyCUDA refuses, go through pygpu's own
copies (element-wise kernels: gpu tests)."""

import numpy as np
import pytest

import pygpu.driver as drv
from pygpu import gpuarray

# views of a (6, 7, 9) array whose layouts a pitched copy does: one run,
# rows, rows of slices (the middle axis strided), an inner stride
PITCHED = [
    (slice(None),),
    (slice(1, 4), slice(2, 5), slice(3, 9)),
    (slice(None), slice(None), slice(2, 5)),
    (slice(None), slice(1, 6), slice(None)),
    (slice(0, 6, 2), slice(1, 6), slice(0, 8)),
    (slice(0, 6, 2), slice(1, 6), 3),
    (4, slice(None), slice(0, 9, 3)),
    (slice(2, 3), slice(None), slice(None)),
]
DT = [np.float32, np.complex128, np.int8]


def _rand(rng, shape, dtype):
    x = rng.standard_normal(shape) * 50
    if np.dtype(dtype).kind == "c":
        x = x + 1j * rng.standard_normal(shape)
    return x.astype(dtype)


def _ids(idx):
    return ",".join(
        "%s:%s:%s" % (s.start, s.stop, s.step) if isinstance(s, slice) else str(s) for s in idx
    )


@pytest.mark.driver
@pytest.mark.parametrize("dtype", DT)
@pytest.mark.parametrize("idx", PITCHED, ids=_ids)
def test_device_to_device_views(ctx, rng, idx, dtype):
    x = _rand(rng, (6, 7, 9), dtype)
    src = gpuarray.to_gpu(x)[idx]
    dst = gpuarray.to_gpu(_rand(rng, src.shape, dtype))
    gpuarray._memcpy_discontig(dst, src)
    np.testing.assert_array_equal(dst.get(), x[idx])
    # into a view of a bigger array, asynchronously on a stream: the rest untouched
    big = _rand(rng, (8, 9, 10), dtype)
    region = tuple(slice(1, 1 + n) for n in src.shape) + (2,) * (3 - src.ndim)
    gbig = gpuarray.to_gpu(big)
    s = drv.Stream()
    gpuarray._memcpy_discontig(gbig[region], src, async_=True, stream=s)
    s.synchronize()
    want = big.copy()
    want[region] = x[idx]
    np.testing.assert_array_equal(gbig.get(), want)


@pytest.mark.driver
@pytest.mark.parametrize("async_", [False, True])
@pytest.mark.parametrize("idx", PITCHED, ids=_ids)
def test_host_to_device_and_back(ctx, rng, idx, async_):
    x = _rand(rng, (6, 7, 9), np.float64)
    stream = drv.Stream() if async_ else None
    # a strided host view into a contiguous device array, and back into a
    # strided host view
    dev = gpuarray.to_gpu(_rand(rng, x[idx].shape, np.float64))
    gpuarray._memcpy_discontig(dev, x[idx], async_=async_, stream=stream)
    if stream is not None:
        stream.synchronize()
    np.testing.assert_array_equal(dev.get(), x[idx])
    host = _rand(rng, (6, 7, 9), np.float64)
    want = host.copy()
    want[idx] = x[idx]
    gpuarray._memcpy_discontig(host[idx], dev, async_=async_, stream=stream)
    if stream is not None:
        stream.synchronize()
    np.testing.assert_array_equal(host, want)
    # a device view from a strided host view, read back whole
    gbig = gpuarray.to_gpu(np.zeros((6, 7, 9)))
    gpuarray._memcpy_discontig(gbig[idx], x[idx], async_=async_, stream=stream)
    if stream is not None:
        stream.synchronize()
    want = np.zeros((6, 7, 9))
    want[idx] = x[idx]
    np.testing.assert_array_equal(gbig.get(), want)


@pytest.mark.driver
def test_host_sources_that_need_staging(ctx, rng):
    # a broadcast (stride 0) and a reversed host array are copied densely first
    row = _rand(rng, (9,), np.float32)
    dev = gpuarray.empty((7, 9), np.float32)
    gpuarray._memcpy_discontig(dev, np.broadcast_to(row, (7, 9)))
    np.testing.assert_array_equal(dev.get(), np.broadcast_to(row, (7, 9)))
    x = _rand(rng, (7, 9), np.float32)
    gpuarray._memcpy_discontig(dev, x[::-1])
    np.testing.assert_array_equal(dev.get(), x[::-1])


@pytest.mark.driver
def test_plain_cases(ctx, rng):
    # ndarray to ndarray: NumPy's assignment
    a, b = _rand(rng, (5, 4), np.float32), np.zeros((5, 4), np.float32)
    gpuarray._memcpy_discontig(b, a)
    np.testing.assert_array_equal(a, b)
    # empty arrays copy nothing; 0-d arrays copy their element
    gpuarray._memcpy_discontig(gpuarray.empty((0, 3), np.float32), np.zeros((0, 3), np.float32))
    z = gpuarray.empty((), np.int64)
    gpuarray._memcpy_discontig(z, np.array(123456789, np.int64))
    assert z.get() == 123456789
    # the copy a subclass's copy() makes (reikna's Array.copy)
    x = _rand(rng, (33, 17), np.complex64)
    g = gpuarray.to_gpu(x)
    new = gpuarray.empty_like(g)
    gpuarray._memcpy_discontig(new, g, async_=True, stream=drv.Stream.null())
    drv.Stream.null().synchronize()
    np.testing.assert_array_equal(new.get(), x)


@pytest.mark.driver
def test_errors(ctx):
    g = gpuarray.empty((4, 5), np.float32)
    with pytest.raises(TypeError, match="^src must be GPUArray or ndarray$"):
        gpuarray._memcpy_discontig(g, [[0.0] * 5] * 4)
    with pytest.raises(TypeError, match="^dst must be GPUArray or ndarray$"):
        gpuarray._memcpy_discontig(None, g)
    with pytest.raises(ValueError, match="^src and dst must be same shape$"):
        gpuarray._memcpy_discontig(g, gpuarray.empty((5, 4), np.float32))
    with pytest.raises(TypeError, match="^src and dst must have same dtype$"):
        gpuarray._memcpy_discontig(g, np.zeros((4, 5), np.float64))
    ro = np.zeros((4, 5), np.float32)
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="the destination array is read-only"):
        gpuarray._memcpy_discontig(ro, g)
    h = gpuarray.empty((4, 5), np.float32)
    h.gpudata.free()
    with pytest.raises(drv.LogicError, match="the array's memory was freed"):
        gpuarray._memcpy_discontig(g, h)
    with pytest.raises(drv.LogicError, match="the array's memory was freed"):
        gpuarray._memcpy_discontig(h, np.zeros((4, 5), np.float32))


def test_plans():
    p = gpuarray._discontig_plan
    # contiguous: one run; C into F: no pitched copy (other axis order)
    assert p((4, 5), (20, 4), (20, 4), 4) == [[80, 1, 1]]
    assert p((4, 5), (20, 4), (4, 16), 4) is None
    # rows of 3 elements out of 9 into dense rows
    assert p((6, 3), (36, 4), (12, 4), 4) == [[12, 1, 1], [6, 36, 12]]
    # an inner stride: 4-byte runs
    assert p((5,), (12,), (4,), 4) == [[4, 1, 1], [5, 12, 4]]
    # negative, zero and overlapping strides
    assert p((5,), (-4,), (4,), 4) is None
    assert p((5, 3), (0, 4), (12, 4), 4) is None
    assert p((5, 3), (8, 4), (12, 4), 4) is None
    # length-1 axes do not count
    assert p((1, 5, 1), (999, 4, -7), (20, 4, 4), 4) == [[20, 1, 1]]


# ---- on a GPU: the layouts a pitched copy cannot do ----


@pytest.mark.gpu
@pytest.mark.parametrize(
    "case", ["c_to_f", "four_axes", "reversed", "interleaved", "host_noncontig_dst"]
)
def test_gpu_other_layouts(ctx, rng, case):
    x = _rand(rng, (4, 5, 6, 7), np.float32)
    g = gpuarray.to_gpu(x)
    if case == "c_to_f":
        src, want = g[0, 0], x[0, 0]
        dst = gpuarray.empty(want.shape, np.float32, order="F")
    elif case == "four_axes":
        src, want = g[::2, 1:4, ::2, 1:6], x[::2, 1:4, ::2, 1:6]
        dst = gpuarray.empty(want.shape, np.float32)
    elif case == "reversed":
        src, want = g[:, ::-1], x[:, ::-1]
        dst = gpuarray.empty(want.shape, np.float32)
    elif case == "interleaved":
        src, want = g[2, 1:6, ::2], x[2, 1:6, ::2]
        dst = gpuarray.empty(want.shape, np.float32)
    else:
        src, want = g[1], x[1]
        host = np.zeros((5, 6, 7, 2), np.float32)
        gpuarray._memcpy_discontig(host[..., 0], src)
        np.testing.assert_array_equal(host[..., 0], want)
        assert not host[..., 1].any()
        return
    gpuarray._memcpy_discontig(dst, src)
    np.testing.assert_array_equal(dst.get(), want)
    h = np.zeros(want.shape, np.float32)
    gpuarray._memcpy_discontig(h, src)
    np.testing.assert_array_equal(h, want)
