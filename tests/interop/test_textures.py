"""CUDA arrays, texture and surface objects, TMA tensor maps.

Three tiers: checks that need no driver (descriptor and tensor-map argument
errors, the TMA example compiling for sm_90), the driver stand-in
(`standin`: bytes moved through arrays, descriptors the driver received,
lifetimes, failure injection, kernel-argument packing) and a GPU (`gpu`:
what PyCUDA's eleven skipped texture tests meant to cover, for objects,
every element against NumPy)."""

import ctypes
import gc
import os
import sys
import weakref

import numpy as np
import pytest

import pygpu.driver as cuda
from pygpu import compiler

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "examples"))

UNKNOWN = 999


# ---- no driver needed ----


def test_descriptors_have_pycudas_fields():
    d = cuda.ArrayDescriptor()
    d.width, d.height, d.format, d.num_channels = 7, 5, cuda.array_format.UNSIGNED_INT16, 2
    assert (d.width, d.height, d.format, d.num_channels) == (7, 5, 2, 2)
    d3 = cuda.ArrayDescriptor3D(
        4, 3, 2, cuda.array_format.FLOAT, 4, cuda.array3d_flags.SURFACE_LDST
    )
    assert (d3.width, d3.height, d3.depth, d3.format, d3.num_channels, d3.flags) == (
        4,
        3,
        2,
        32,
        4,
        2,
    )
    assert "depth=2" in repr(d3) and "ArrayDescriptor(" in repr(d)
    with pytest.raises(TypeError):
        d.width = 2.5
    assert cuda.array3d_flags.ARRAY3D_LAYERED == cuda.array3d_flags.LAYERED == 1
    assert cuda.array_format.FLOAT == 0x20 and cuda.address_mode.BORDER == 3
    assert cuda.tensor_map_swizzle.SWIZZLE_128B == 3
    assert cuda.tensor_map_data_type.FLOAT32 == 7 and cuda.tensor_map_data_type.BFLOAT16 == 9


@pytest.mark.parametrize(
    "fields, match",
    [
        (dict(width=0, height=4), r"ArrayDescriptor\.width must be >= 1, got 0"),
        (dict(width=4, height=-1), r"ArrayDescriptor\.height must be >= 0"),
        (dict(width=4, height=4, format=99), r"ArrayDescriptor\.format=99 is not one of"),
        (
            dict(width=4, height=4, num_channels=3),
            r"ArrayDescriptor\.num_channels must be 1, 2 or "
            r"4, got 3",
        ),
    ],
)
def test_bad_2d_descriptor_names_the_field(fields, match):
    d = cuda.ArrayDescriptor(**{"format": cuda.array_format.FLOAT, **fields})
    with pytest.raises(ValueError, match=match):
        cuda.Array(d)


@pytest.mark.parametrize(
    "fields, match",
    [
        (dict(depth=-2), r"ArrayDescriptor3D\.depth must be >= 0"),
        (dict(flags=0x400), r"ArrayDescriptor3D\.flags=1024 has bits"),
        (dict(depth=0, flags=1), r"depth is the number of layers of a LAYERED array"),
        (dict(height=5, depth=6, flags=4), r"CUBEMAP array's faces are square"),
        (dict(depth=5, flags=4), r"depth of a CUBEMAP array must be 6"),
        (dict(depth=7, flags=5), r"LAYERED cubemap: a multiple of 6\), got 7"),
        (dict(height=0, depth=3), r"depth=3 with height=0"),
    ],
)
def test_bad_3d_descriptor_names_the_field(fields, match):
    d = cuda.ArrayDescriptor3D(
        **{"width": 4, "height": 4, "depth": 2, "format": cuda.array_format.FLOAT, **fields}
    )
    with pytest.raises(ValueError, match=match):
        cuda.Array(d)


def test_array_takes_only_descriptors():
    with pytest.raises(
        TypeError, match="Array\\(\\) takes an ArrayDescriptor or ArrayDescriptor3D, not dict"
    ):
        cuda.Array({"width": 4})


def test_dtype_formats():
    assert cuda.dtype_to_array_format(np.int16) == cuda.array_format.SIGNED_INT16
    assert cuda.array_format_to_dtype(cuda.array_format.HALF) == np.float16
    with pytest.raises(TypeError, match="cannot convert dtype 'float64' to array format"):
        cuda.dtype_to_array_format(np.float64)
    with pytest.raises(ValueError, match="order must be 'C' or 'F', not 'X'"):
        cuda.matrix_to_array(np.zeros((2, 2), np.float32), "X")
    with pytest.raises(TypeError, match="matrix_to_array\\(\\) takes a NumPy array, not list"):
        cuda.matrix_to_array([[1.0]], "C")
    with pytest.raises(ValueError, match="3 channels; CUDA arrays have 1, 2 or 4"):
        cuda.make_multichannel_2d_array(np.zeros((2, 2, 3), np.float32), "C")


# A 16-byte aligned fake address: the argument checks run before the driver
ADDR = 1 << 20


@pytest.mark.parametrize(
    "kwargs, exc, match",
    [
        (
            dict(box=(8, 8), shape=(64, 64, 1, 1, 1, 1), dtype=np.float32),
            ValueError,
            "shape has 6 entries; at most 5",
        ),
        (
            dict(box=(8,), shape=(64, 64), dtype=np.float32),
            ValueError,
            "box has 1 entries; the tensor has rank 2",
        ),
        (
            dict(box=(8, 300), shape=(64, 512), dtype=np.float32),
            ValueError,
            r"box\[1\]=300 must be 1 to 256",
        ),
        (
            dict(box=(8, 2), shape=(64, 64), dtype=np.float32),
            ValueError,
            r"innermost row is 8 bytes \(box\[1\]=2 elements\); TMA needs a multiple of 16",
        ),
        (
            dict(box=(8, 64), shape=(64, 64), dtype=np.float32, swizzle=1),
            ValueError,
            "innermost row is 256 bytes, more than the swizzle's span of 32",
        ),
        (
            dict(box=(8, 8), shape=(64, 64), dtype=np.float32, strides=(260, 4)),
            ValueError,
            r"strides\[0\]=260 bytes must be a positive multiple of 16",
        ),
        (
            dict(box=(8, 8), shape=(64, 64), dtype=np.float32, strides=(256, 8)),
            ValueError,
            r"innermost dimension must be contiguous: strides\[1\]=8 but the element is 4 bytes",
        ),
        (
            dict(box=(8, 8), shape=(64, 0), dtype=np.float32),
            ValueError,
            r"shape\[1\]=0 must be 1 to 2\*\*32",
        ),
        (
            dict(box=(8, 8), shape=(64, 64), dtype=np.int8),
            TypeError,
            "no tensor_map_data_type for dtype int8; pass data_type=",
        ),
        (dict(box=(8, 8), shape=(64, 64)), TypeError, "a int has no dtype; pass dtype="),
        (dict(box=(8, 8), dtype=np.float32), TypeError, "a int has no shape; pass shape="),
        (
            dict(box=(8, 8), shape=(64, 64), dtype=np.float32, element_strides=(1, 9)),
            ValueError,
            r"element_strides\[1\]=9 must be 1 to 8",
        ),
        (
            dict(box=(8, 8), shape=(64, 64), dtype=np.float32, swizzle=9),
            ValueError,
            "swizzle=9 is out of range",
        ),
        (
            dict(box=8, shape=(64, 64), dtype=np.float32),
            TypeError,
            "box must be a sequence of ints, not an int",
        ),
    ],
)
def test_tensor_map_argument_errors_name_the_field(kwargs, exc, match):
    box = kwargs.pop("box")
    with pytest.raises(exc, match=match):
        cuda.TensorMap(ADDR, box, **kwargs)


def test_tensor_map_unaligned_address():
    with pytest.raises(ValueError, match="address 0x100008 is not 16-byte aligned"):
        cuda.TensorMap(ADDR + 8, (8, 8), shape=(64, 64), dtype=np.float32)
    with pytest.raises(ValueError, match="lower_corner and upper_corner need 2 entries"):
        cuda.TensorMap.im2col(ADDR, (0,), (0,), 8, 8, shape=(2, 8, 8, 16), dtype=np.float32)
    with pytest.raises(ValueError, match="im2col maps need rank 3 to 5"):
        cuda.TensorMap.im2col(ADDR, (), (), 8, 8, shape=(8, 16), dtype=np.float32)


def test_tma_example_compiles_for_sm90(tmp_cache):
    import tma_copy

    ptx = bytes(compiler.compile(tma_copy.SOURCE, arch="compute_90", target="ptx")).decode()
    assert ".param .align 64 .b8 tma_scale_param_0[128]" in ptx
    assert "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes" in ptx
    assert "cp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group" in ptx
    assert len(bytes(tma_copy.build("sm_90"))) > 1000


# ---- the driver stand-in ----

KERNELS = r"""
struct alignas(64) TensorMap { unsigned long long opaque[16]; };
extern "C" __global__ void takes(cudaTextureObject_t t, int n, cudaSurfaceObject_t s,
                                 const __grid_constant__ TensorMap m, float *out)
{
    out[n] = tex1Dfetch<float>(t, n) + (float)m.opaque[n];
    surf2Dwrite(1.0f, s, 0, 0);
}
extern "C" __global__ void plain(int n, float *out) { out[0] = n; }
"""


class _ResDesc(ctypes.Structure):
    _fields_ = [
        ("resType", ctypes.c_int),
        ("pad", ctypes.c_int),
        ("res", ctypes.c_ulonglong * 16),
        ("flags", ctypes.c_uint),
        ("pad2", ctypes.c_uint),
    ]


class _TexDesc(ctypes.Structure):
    _fields_ = [
        ("addressMode", ctypes.c_int * 3),
        ("filterMode", ctypes.c_int),
        ("flags", ctypes.c_uint),
        ("maxAnisotropy", ctypes.c_uint),
        ("mipmapFilterMode", ctypes.c_int),
        ("bias", ctypes.c_float),
        ("minClamp", ctypes.c_float),
        ("maxClamp", ctypes.c_float),
        ("borderColor", ctypes.c_float * 4),
        ("reserved", ctypes.c_int * 12),
    ]


def _stored(standin, obj):
    r, t = _ResDesc(), _TexDesc()
    fn = standin.lib.fakecuda_texobj
    fn.argtypes = [ctypes.c_ulonglong, ctypes.c_void_p, ctypes.c_void_p]
    assert fn(obj.handle, ctypes.byref(r), ctypes.byref(t)) == 0
    return r, t


@pytest.fixture(scope="module")
def ptx():
    return bytes(compiler.compile(KERNELS, target="ptx", arch="compute_90"))


@pytest.mark.standin
@pytest.mark.parametrize(
    "shape, dtype, order",
    [
        ((37,), np.float32, "C"),
        ((9, 13), np.int16, "C"),
        ((9, 13), np.uint8, "F"),
        ((3, 5, 7), np.float32, "C"),
        ((3, 5, 7), np.int32, "F"),
        ((6, 10), np.float64, "C"),
    ],
)
def test_array_round_trip(standin, ctx, rng, shape, dtype, order):
    a = np.asarray(rng.integers(-100, 100, shape) + rng.standard_normal(shape), order=order)
    a = (
        a.astype(dtype)
        if np.dtype(dtype).kind == "f"
        else np.asarray(rng.integers(0, 100, shape), dtype=dtype, order=order)
    )
    if len(shape) == 1:
        ary = cuda.Array(cuda.ArrayDescriptor(shape[0], 0, cuda.dtype_to_array_format(dtype), 1))
        cuda.memcpy_htoa(ary, 0, a)
        back = np.empty_like(a)
        cuda.memcpy_atoh(back, ary, 0)
        np.testing.assert_array_equal(back, a)
        np.testing.assert_array_equal(cuda.array_to_np(ary), a)
        return
    ary = cuda.np_to_array(a, order)
    want = a if order == "C" else a.T
    back = cuda.array_to_np(ary, dtype=dtype if dtype == np.float64 else None)
    np.testing.assert_array_equal(back, np.ascontiguousarray(want))
    d = ary.get_descriptor_3d() if len(shape) == 3 else ary.get_descriptor()
    assert (d.width, d.height) == (want.shape[-1], want.shape[-2])
    if dtype == np.float64:
        assert (d.format, d.num_channels) == (cuda.array_format.SIGNED_INT32, 2)


@pytest.mark.standin
def test_multichannel_layered_and_device_sources(standin, ctx, rng):
    m = rng.standard_normal((5, 6, 4)).astype(np.float32)
    ary = cuda.make_multichannel_2d_array(m, "C")
    np.testing.assert_array_equal(cuda.array_to_np(ary), m)
    mf = np.asfortranarray(rng.standard_normal((2, 6, 5)).astype(np.float32))
    np.testing.assert_array_equal(cuda.array_to_np(cuda.make_multichannel_2d_array(mf, "F")), mf.T)
    lay = rng.standard_normal((3, 4, 8)).astype(np.float32)
    la = cuda.np_to_array(lay, "C", layered=True)
    assert la.descriptor.flags == cuda.array3d_flags.LAYERED
    np.testing.assert_array_equal(cuda.array_to_np(la), lay)
    sb = cuda.np_to_array(lay[0], "C", allowSurfaceBind=True)
    assert sb.descriptor.flags == cuda.array3d_flags.LAYERED | cuda.array3d_flags.SURFACE_LDST
    np.testing.assert_array_equal(cuda.array_to_np(sb)[0], lay[0])
    from pygpu import gpuarray

    g = gpuarray.to_gpu(lay)
    np.testing.assert_array_equal(cuda.array_to_np(cuda.gpuarray_to_array(g, "C")), lay)


@pytest.mark.standin
def test_memcpy2d_and_3d_with_arrays_and_offsets(standin, ctx, rng):
    a = rng.standard_normal((8, 10)).astype(np.float32)
    ary = cuda.Array(cuda.ArrayDescriptor(10, 8, cuda.array_format.FLOAT, 1))
    c = cuda.Memcpy2D()
    c.set_src_host(a)
    c.set_dst_array(ary)
    c.width_in_bytes = c.src_pitch = 40
    c.height = 8
    c(aligned=True)
    # a sub-rectangle back into pitched device memory, then to the host
    dev, pitch = cuda.mem_alloc_pitch(16, 3, 4)
    c2 = cuda.Memcpy2D()
    c2.set_src_array(ary)
    c2.src_x_in_bytes, c2.src_y = 8, 4
    c2.set_dst_device(dev)
    c2.dst_pitch, c2.width_in_bytes, c2.height = pitch, 16, 3
    s = cuda.Stream()
    c2(s)
    s.synchronize()
    out = np.zeros((3, 4), np.float32)
    c3 = cuda.Memcpy3D()
    c3.set_src_device(dev)
    c3.src_pitch = pitch
    c3.set_dst_host(out)
    c3.dst_pitch, c3.width_in_bytes, c3.height = 16, 16, 3
    c3()
    np.testing.assert_array_equal(out, a[4:7, 2:6])
    # 3-D: slice z of a 3-D array from a host array with padding between slices
    vol = rng.standard_normal((4, 6, 5)).astype(np.float32)
    ary3 = cuda.Array(cuda.ArrayDescriptor3D(5, 3, 2, cuda.array_format.FLOAT, 1))
    c4 = cuda.Memcpy3D()
    c4.set_src_host(vol)
    c4.src_pitch, c4.src_height = 20, 6
    c4.src_y, c4.src_z = 2, 1
    c4.set_dst_array(ary3)
    c4.width_in_bytes, c4.height, c4.depth = 20, 3, 2
    c4()
    np.testing.assert_array_equal(cuda.array_to_np(ary3), vol[1:3, 2:5])


@pytest.mark.standin
@pytest.mark.parametrize(
    "setup, exc, match",
    [
        (
            dict(src_x_in_bytes=2),
            ValueError,
            "src_x_in_bytes=2 is not a multiple of the array's 4-byte elements",
        ),
        (
            dict(width_in_bytes=44),
            ValueError,
            "src_x_in_bytes \\+ width_in_bytes = 0 \\+ 44 exceeds the src array's rows of 40 bytes",
        ),
        (dict(height=9), ValueError, "src_y \\+ height = 0 \\+ 9 exceeds the src array's 8 rows"),
        (dict(depth=2), ValueError, "src_z \\+ depth = 0 \\+ 2 exceeds the src array's depth of 1"),
        (
            dict(dst_pitch=36),
            ValueError,
            "dst_pitch=36 is less than dst_x_in_bytes \\+ width_in_bytes = 40",
        ),
        (dict(dst_big=True), ValueError, "the copy spans 320 bytes of the dst, which holds 316"),
    ],
)
def test_array_copy_errors(standin, ctx, setup, exc, match):
    ary = cuda.Array(cuda.ArrayDescriptor(10, 8, cuda.array_format.FLOAT, 1))
    out = np.zeros(79, np.float32)
    c = cuda.Memcpy3D()
    c.set_src_array(ary)
    c.set_dst_host(out)
    c.width_in_bytes, c.height, c.dst_pitch = 40, 8, 40
    for k, v in setup.items():
        if k != "dst_big":
            setattr(c, k, v)
    before = standin.calls("cuMemcpy3D")
    with pytest.raises(exc, match=match):
        c()
    assert standin.calls("cuMemcpy3D") == before  # refused before the driver


@pytest.mark.standin
def test_texture_descriptors_reach_the_driver(standin, ctx, rng):
    a = rng.standard_normal((6, 8)).astype(np.float32)
    ary = cuda.matrix_to_array(a, "C")
    t = cuda.TextureObject(
        ary,
        address_mode=(cuda.address_mode.WRAP, cuda.address_mode.BORDER),
        filter_mode=cuda.filter_mode.LINEAR,
        normalized_coords=True,
        border_color=(0.5, 1.5),
    )
    r, d = _stored(standin, t)
    assert r.resType == cuda.resource_type.ARRAY and r.res[0] == ary.handle
    assert list(d.addressMode) == [0, 3, 1] and d.filterMode == 1
    assert d.flags == 2  # normalized, float format: not read as integer
    assert list(d.borderColor) == [0.5, 1.5, 0.0, 0.0]
    assert t.address_mode == (0, 3, 1) and t.filter_mode == 1 and t.resource is ary
    # integer formats read as integers by default, as normalized floats on request
    u8 = cuda.matrix_to_array(rng.integers(0, 255, (4, 16)).astype(np.uint8), "C")
    assert _stored(standin, cuda.TextureObject(u8))[1].flags == 1
    assert (
        _stored(standin, cuda.TextureObject(u8, read_mode=cuda.read_mode.NORMALIZED_FLOAT))[1].flags
        == 0
    )
    # linear memory: format from the dtype, size from the allocation
    from pygpu import gpuarray

    g = gpuarray.to_gpu(rng.standard_normal(100).astype(np.float32))
    tl = cuda.TextureObject(g)
    r, _ = _stored(standin, tl)
    assert r.resType == cuda.resource_type.LINEAR
    assert (r.res[0], r.res[1] & 0xFFFFFFFF, r.res[1] >> 32, r.res[2]) == (
        int(g.gpudata),
        cuda.array_format.FLOAT,
        1,
        400,
    )
    # two channels of int32 over a raw allocation
    d2 = cuda.mem_alloc(1024)
    r, d = _stored(
        standin,
        cuda.TextureObject(d2, format=cuda.array_format.SIGNED_INT32, num_channels=2, shape=(100,)),
    )
    assert (r.res[1] & 0xFFFFFFFF, r.res[1] >> 32, r.res[2]) == (10, 2, 800)
    assert d.flags == 1
    # pitched: mem_alloc_pitch's pitch
    dev, pitch = cuda.mem_alloc_pitch(20 * 4, 7, 4)
    r, _ = _stored(
        standin, cuda.TextureObject(dev, format=cuda.array_format.FLOAT, shape=(7, 20), pitch=pitch)
    )
    assert r.resType == cuda.resource_type.PITCH2D
    assert tuple(r.res[2:5]) == (20, 7, pitch)
    # a 2-D GPUArray is pitched memory with its own row stride
    g2 = gpuarray.to_gpu(rng.standard_normal((4, 64)).astype(np.float32))
    r, _ = _stored(standin, cuda.TextureObject(g2))
    assert r.resType == cuda.resource_type.PITCH2D and tuple(r.res[2:5]) == (64, 4, 256)


@pytest.mark.standin
@pytest.mark.parametrize(
    "make, exc, match",
    [
        (
            lambda ary, d: cuda.TextureObject(ary, address_mode=cuda.address_mode.WRAP),
            ValueError,
            r"address_mode\[0\] WRAP needs normalized_coords=True",
        ),
        (
            lambda ary, d: cuda.TextureObject(ary, address_mode=(1, 1, 1, 1)),
            ValueError,
            "address_mode has 4 entries",
        ),
        (
            lambda ary, d: cuda.TextureObject(ary, filter_mode=5),
            ValueError,
            "filter_mode=5 is out of range",
        ),
        (
            lambda ary, d: cuda.TextureObject(ary, format=cuda.array_format.FLOAT),
            ValueError,
            "an Array has its own",
        ),
        (
            lambda ary, d: cuda.TextureObject(d),
            TypeError,
            "a pygpu.driver.DeviceAllocation has no dtype; pass format=",
        ),
        (lambda ary, d: cuda.TextureObject(d, format=7), ValueError, "format=7 is not one of"),
        (
            lambda ary, d: cuda.TextureObject(d, format=cuda.array_format.FLOAT, num_channels=3),
            ValueError,
            "num_channels must be 1, 2 or 4, got 3",
        ),
        (
            lambda ary, d: cuda.TextureObject(d, format=cuda.array_format.FLOAT, shape=(300,)),
            ValueError,
            "the texture spans 1200 bytes but the memory holds 1024",
        ),
        (
            lambda ary, d: cuda.TextureObject(
                int(d) + 4, format=cuda.array_format.FLOAT, shape=(8,)
            ),
            ValueError,
            "is not aligned to the device's texture alignment of 512 bytes",
        ),
        (
            lambda ary, d: cuda.TextureObject(
                d, format=cuda.array_format.FLOAT, shape=(4, 10), pitch=40
            ),
            ValueError,
            "pitch=40 bytes is not a multiple of the device's texture pitch alignment",
        ),
        (
            lambda ary, d: cuda.TextureObject(
                d, format=cuda.array_format.FLOAT, filter_mode=cuda.filter_mode.LINEAR
            ),
            ValueError,
            "linear \\(1-D\\) memory is read with tex1Dfetch",
        ),
        (
            lambda ary, d: cuda.TextureObject(
                cuda.matrix_to_array(np.ones((2, 16), np.uint8), "C"),
                filter_mode=cuda.filter_mode.LINEAR,
            ),
            ValueError,
            "LINEAR filtering of an integer format needs read_mode",
        ),
        (
            lambda ary, d: cuda.TextureObject(np.zeros(4, np.float32)),
            TypeError,
            "a numpy.ndarray on DLPack device type 1 is not CUDA memory",
        ),
        (
            lambda ary, d: cuda.SurfaceObject(ary),
            ValueError,
            "was not made with array3d_flags.SURFACE_LDST",
        ),
        (lambda ary, d: cuda.SurfaceObject(d), TypeError, "SurfaceObject\\(\\) takes an Array"),
    ],
)
def test_texture_and_surface_errors(standin, ctx, make, exc, match):
    ary = cuda.matrix_to_array(np.ones((4, 8), np.float32), "C")
    d = cuda.mem_alloc(1024)
    gc.collect()
    base = standin.live()
    with pytest.raises(exc, match=match):
        make(ary, d)
    gc.collect()
    assert standin.live() == base


@pytest.mark.standin
def test_resource_lifetimes(standin, ctx, rng):
    base = standin.live()
    a = rng.standard_normal((4, 8)).astype(np.float32)
    ary = cuda.np_to_array(a, "C", allowSurfaceBind=True)
    ref = weakref.ref(ary)
    t = cuda.TextureObject(ary)
    s = cuda.SurfaceObject(ary)
    ary.free()  # deferred while they live (issue 25's hold protocol)
    assert ary.freed and ary.holders == ("a TextureObject", "a SurfaceObject")
    assert standin.live()["arrays"] == base["arrays"] + 1
    del ary
    gc.collect()
    assert ref() is not None and t.resource is ref() and s.resource is ref()
    t.free()
    t.free()  # idempotent
    with pytest.raises(cuda.LogicError, match="the TextureObject was freed"):
        t.handle
    del t
    gc.collect()
    assert ref() is not None  # the surface still holds it
    del s
    gc.collect()
    assert ref() is None
    assert standin.live() == base and standin.stale() == 0
    # linear memory stays alive under its texture
    d = cuda.to_device(rng.standard_normal(64).astype(np.float32))
    dref = weakref.ref(d)
    t = cuda.TextureObject(d, format=cuda.array_format.FLOAT)
    del d
    gc.collect()
    assert dref() is not None
    del t
    gc.collect()
    assert dref() is None and standin.live() == base
    # a tensor map keeps its tensor
    d = cuda.mem_alloc(64 * 64 * 4)
    dref = weakref.ref(d)
    m = cuda.TensorMap(d, (8, 8), shape=(64, 64), dtype=np.float32)
    del d
    gc.collect()
    assert dref() is not None and m.tensor is dref()
    del m
    gc.collect()
    assert dref() is None


@pytest.mark.standin
def test_detach_with_live_textures_is_silent(standin, rng):
    c = cuda.Device(0).make_context()
    try:
        ary = cuda.np_to_array(
            rng.standard_normal((4, 8)).astype(np.float32), "C", allowSurfaceBind=True
        )
        t, s = cuda.TextureObject(ary), cuda.SurfaceObject(ary)
    finally:
        cuda.Context.pop()
    stale = standin.stale()
    c.detach()
    with pytest.raises(cuda.LogicError, match="context was detached"):
        t.handle
    with pytest.raises(cuda.LogicError, match="the Array's context was detached"):
        cuda.array_to_np(ary)
    del t, s, ary
    gc.collect()
    assert standin.stale() == stale


def _operations(rng):
    def array_ops():
        a = rng.standard_normal((5, 8)).astype(np.float32)
        ary = cuda.np_to_array(a, "C")
        ary.get_descriptor()
        ary.get_descriptor_3d()
        np.testing.assert_array_equal(cuda.array_to_np(ary, stream=cuda.Stream()), a)
        return ary

    def texture_ops():
        ary = cuda.np_to_array(
            rng.standard_normal((3, 4, 8)).astype(np.float32), "C", allowSurfaceBind=True
        )
        d = cuda.mem_alloc(4096)
        return (
            cuda.TextureObject(ary),
            cuda.SurfaceObject(ary),
            cuda.TextureObject(d, format=cuda.array_format.FLOAT, shape=(8, 64)),
        )

    def tensor_map():
        d = cuda.mem_alloc(64 * 64 * 4)
        return (
            cuda.TensorMap(d, (8, 8), shape=(64, 64), dtype=np.float32),
            cuda.TensorMap.im2col(d, (0, 0), (0, 0), 4, 8, shape=(1, 8, 8, 64), dtype=np.float32),
        )

    return {"array_ops": array_ops, "texture_ops": texture_ops, "tensor_map": tensor_map}


@pytest.mark.standin
@pytest.mark.parametrize("op", sorted(_operations(None)))
def test_failure_at_every_call_site(standin, ctx, rng, op):
    """Each driver call fails once in turn: a cuda.Error with its code and
    routine, nothing leaked, no dead handle used."""
    fn = _operations(rng)[op]
    r = fn()
    del r
    gc.collect()
    base = standin.live()
    _, trace = standin.trace(lambda: fn() and None)
    gc.collect()
    assert standin.live() == base
    seen, sites = {}, []
    for name in trace:
        seen[name] = seen.get(name, 0) + 1
        sites.append((name, seen[name]))
    released = {
        "cuArrayDestroy",
        "cuTexObjectDestroy",
        "cuSurfObjectDestroy",
        "cuMemFree",
        "cuStreamDestroy",
        "cuCtxGetCurrent",
        "cuCtxPushCurrent",
        "cuCtxPopCurrent",
    }
    for name, k in sites:
        stale = standin.stale()
        standin.fail(name, k, UNKNOWN)
        err = None
        try:
            r = fn()
            del r
        except cuda.Error as e:
            err = (e.code, e.routine, str(e))
        finally:
            standin.cancel()
        gc.collect()
        where = "%s: call %d of %s" % (op, k, name)
        assert standin.fired(), where
        if err is None:
            assert name in released, where + ": the failure was lost"
        else:
            assert err[0] == UNKNOWN and err[2].startswith(err[1]), where + ": %r" % (err,)
        now = standin.live()
        leaked = {x: now[x] - base[x] for x in now if now[x] != base[x]}
        if name in released:
            assert sum(leaked.values()) <= 1, where + ": %s" % leaked
            base = now  # a failed destroy loses that handle, as a driver would
        else:
            assert not leaked, where + ": leaked %s" % leaked
        assert standin.stale() == stale, where


@pytest.mark.standin
def test_texture_surface_and_tensor_map_arguments_are_packed(standin, ctx, ptx, rng):
    f = cuda.module_from_buffer(ptx).get_function("takes")
    assert f.param_sizes == (8, 4, 8, 128, 8)
    ary = cuda.np_to_array(
        rng.standard_normal((4, 8)).astype(np.float32), "C", allowSurfaceBind=True
    )
    d = cuda.mem_alloc(64 * 64 * 4)
    t = cuda.TextureObject(d, format=cuda.array_format.FLOAT)
    s = cuda.SurfaceObject(ary)
    m = cuda.TensorMap(d, (16, 8), shape=(64, 64), dtype=np.float32, swizzle=0)
    n = int(rng.integers(0, 1000))
    for call in (
        lambda: f(t, n, s, m, d, block=(1, 1, 1)),
        lambda: f.configure((1, 1), (1, 1, 1))(t, n, s, m, d),
        lambda: (f.prepare("PiPVP"), f.prepared_call((1, 1), (1, 1, 1), t, n, s, m, d)),
    ):
        call()
        p = standin.last_launch().params
        assert len(p) == 200
        assert p[0:8] == t.handle.to_bytes(8, "little")
        assert p[8:12] == n.to_bytes(4, "little")
        assert p[16:24] == s.handle.to_bytes(8, "little")
        assert p[64:192] == bytes(m)
        assert p[192:200] == int(d).to_bytes(8, "little")
    # the stand-in's readable encoding: what the driver was asked for
    w = np.frombuffer(bytes(m), np.uint64)
    assert bytes(m)[:8] == b"FAKETMAP" and w[1] == int(d)
    assert w[2] & 0xFF == cuda.tensor_map_data_type.FLOAT32 and (w[2] >> 8) & 0xFF == 2
    assert (w[3], w[4], w[8]) == (64, 64, 256)  # innermost first
    assert (w[12] & 0xFFFF, (w[12] >> 16) & 0xFFFF) == (8, 16)
    im = cuda.TensorMap.im2col(
        d,
        (-1, -2),
        (1, 2),
        16,
        32,
        shape=(1, 8, 8, 64),
        dtype=np.float32,
        element_strides=(1, 2, 1, 1),
    )
    w = np.frombuffer(bytes(im), np.uint64)
    assert (w[2] >> 48) & 1 and (w[2] >> 8) & 0xFF == 4
    assert tuple(int(x) for x in w[3:7]) == (64, 8, 8, 1)
    assert w[14] == 16 | 32 << 16
    corners = [np.int8(np.uint8((int(w[15]) >> (8 * i)) & 0xFF)) for i in range(6)]
    assert corners[0:2] == [-2, -1] and corners[3:5] == [2, 1]  # spatial dims reversed
    assert (int(w[13]) >> 16) & 0xFF == 1 and (int(w[13]) >> 32) & 0xFF == 2


@pytest.mark.standin
def test_wrong_parameter_for_a_resource(standin, ctx, ptx, rng):
    f = cuda.module_from_buffer(ptx).get_function("takes")
    g = cuda.module_from_buffer(ptx).get_function("plain")
    ary = cuda.np_to_array(
        rng.standard_normal((4, 8)).astype(np.float32), "C", allowSurfaceBind=True
    )
    d = cuda.mem_alloc(64 * 64 * 4)
    t = cuda.TextureObject(ary)
    s = cuda.SurfaceObject(ary)
    m = cuda.TensorMap(d, (8, 8), shape=(64, 64), dtype=np.float32)
    launches = standin.launches()
    with pytest.raises(
        TypeError,
        match="kernel 'plain': parameter 0 is 4 bytes but a "
        "pygpu.driver.TextureObject is a 64-bit "
        "cudaTextureObject_t",
    ):
        g(t, d, block=(1, 1, 1))
    with pytest.raises(
        TypeError,
        match="parameter 0 is 4 bytes but a pygpu.driver."
        "SurfaceObject is a 64-bit cudaSurfaceObject_t",
    ):
        g(s, d, block=(1, 1, 1))
    with pytest.raises(
        TypeError,
        match="kernel 'plain': parameter 1 is 8 bytes but a TensorMap is a 128-byte CUtensorMap",
    ):
        g(1, m, block=(1, 1, 1))
    with pytest.raises(
        TypeError, match="kernel .takes.: parameter 3 is 128 bytes, which a Python int cannot fill"
    ):
        f(t, 1, s, 5, d, block=(1, 1, 1))
    t2 = cuda.TextureObject(ary)
    t2.free()
    with pytest.raises(
        cuda.LogicError, match="kernel 'takes': parameter 0: the TextureObject was freed"
    ):
        f(t2, 1, s, m, d, block=(1, 1, 1))
    assert standin.launches() == launches


@pytest.mark.standin
def test_tensor_map_without_a_driver_that_has_it():
    import subprocess

    code = (
        "import numpy as np, pygpu.driver as cuda\n"
        "try:\n    cuda.TensorMap(1 << 20, (8, 8), shape=(64, 64), dtype=np.float32)\n"
        "except cuda.LogicError as e:\n    print(e)\n"
    )
    env = dict(os.environ, FAKECUDA_HIDE="cuTensorMapEncodeTiled")
    r = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120
    )
    assert "TensorMap needs a CUDA 12.0+ driver (cuTensorMapEncodeTiled)" in r.stdout, (
        r.stdout + r.stderr
    )


@pytest.mark.standin
def test_tensor_map_driver_refusal_is_a_clear_error(standin, ctx):
    d = cuda.mem_alloc(64 * 64 * 4)
    with pytest.raises(
        cuda.Error, match="cuTensorMapEncodeTiled failed: .*the driver refused the tensor map"
    ):
        # 16-bit box rows of 8 bytes: a multiple of 16 is TMA's rule, the stand-in's too;
        # pygpu checks it for INTERLEAVE_NONE only, so interleave sends it to the driver
        cuda.TensorMap(
            d,
            (8, 8, 4),
            shape=(4, 16, 64),
            dtype=np.uint16,
            interleave=cuda.tensor_map_interleave.INTERLEAVE_32B,
            strides=(64 * 16 * 2, 64 * 2 + 16, 2),
        )


# ---- on a GPU: what PyCUDA's eleven skipped texture tests meant to cover ----

GPU_KERNELS = r"""
extern "C" {
__global__ void read2d(cudaTextureObject_t t, float *out, int w, int h)
{
    int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y;
    if (x < w && y < h) out[y * w + x] = tex2D<float>(t, x + 0.5f, y + 0.5f);
}
__global__ void read2d_int(cudaTextureObject_t t, int *out, int w, int h)
{
    int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y;
    if (x < w && y < h) out[y * w + x] = tex2D<unsigned char>(t, x + 0.5f, y + 0.5f);
}
__global__ void product2d(cudaTextureObject_t a, cudaTextureObject_t b, float *out, int w,
                          int h)
{
    int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y;
    if (x < w && y < h)
        out[y * w + x] = tex2D<float>(a, x + 0.5f, y + 0.5f) * tex2D<float>(b, x + 0.5f, y + 0.5f);
}
__global__ void read2d_float4(cudaTextureObject_t t, float4 *out, int w, int h)
{
    int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y;
    if (x < w && y < h) out[y * w + x] = tex2D<float4>(t, x + 0.5f, y + 0.5f);
}
__global__ void fetch_float2(cudaTextureObject_t t, float2 *out, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = tex1Dfetch<float2>(t, i);
}
__global__ void sample2d(cudaTextureObject_t t, const float *u, const float *v, float *out,
                         int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = tex2D<float>(t, u[i], v[i]);
}
__global__ void read3d(cudaTextureObject_t t, float *out, int w, int h, int d)
{
    int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y, z = blockIdx.z;
    if (x < w) out[(z * h + y) * w + x] = tex3D<float>(t, x + 0.5f, y + 0.5f, z + 0.5f);
}
__global__ void read_layered(cudaTextureObject_t t, float *out, int w, int h)
{
    int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y, l = blockIdx.z;
    if (x < w) out[(l * h + y) * w + x] = tex2DLayered<float>(t, x + 0.5f, y + 0.5f, l);
}
__global__ void surf2d_scale(cudaSurfaceObject_t s, int w, int h, float a)
{
    int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y;
    if (x < w && y < h) {
        float v;
        surf2Dread(&v, s, x * 4, y);
        surf2Dwrite(a * v + (float)(y * w + x), s, x * 4, y);
    }
}
__global__ void surf3d_scale(cudaSurfaceObject_t s, int w, int h, int d, float a)
{
    int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y, z = blockIdx.z;
    if (x < w) {
        float v;
        surf3Dread(&v, s, x * 4, y, z);
        surf3Dwrite(a * v + (float)z, s, x * 4, y, z);
    }
}
__global__ void surf2d_layered_neg(cudaSurfaceObject_t s, int w, int h)
{
    int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y;
    if (x < w && y < h) {
        int v;
        surf2DLayeredread(&v, s, x * 4, y, 0);
        surf2DLayeredwrite(-v, s, x * 4, y, 0);
    }
}
}
"""


@pytest.fixture(scope="module")
def gpu_mod():
    from pygpu.compiler import SourceModule

    return SourceModule(GPU_KERNELS, no_extern_c=True)


def _launch2d(fn, w, h, *args, d=1):
    fn(*args, block=(64, 1, 1), grid=((w + 63) // 64, h, d))


def _bilinear(a, u, v):
    """2-D linear filtering of unnormalized coordinates with clamp
    addressing, in float64 with exact weights (the hardware's are 9-bit
    fixed point: the caller's tolerance covers that)."""
    h, w = a.shape
    xb, yb = u - 0.5, v - 0.5
    x0, y0 = np.floor(xb).astype(int), np.floor(yb).astype(int)
    ax, ay = xb - x0, yb - y0

    def at(y, x):
        return a[np.clip(y, 0, h - 1), np.clip(x, 0, w - 1)].astype(np.float64)

    return (
        (1 - ax) * (1 - ay) * at(y0, x0)
        + ax * (1 - ay) * at(y0, x0 + 1)
        + (1 - ax) * ay * at(y0 + 1, x0)
        + ax * ay * at(y0 + 1, x0 + 1)
    )


@pytest.mark.gpu
def test_gpu_2d_texture(ctx, rng, gpu_mod):
    a = rng.standard_normal((37, 91)).astype(np.float32)
    t = cuda.TextureObject(cuda.matrix_to_array(a, "C"))
    out = cuda.mem_alloc(a.nbytes)
    _launch2d(gpu_mod.get_function("read2d"), 91, 37, t, out, np.int32(91), np.int32(37))
    np.testing.assert_array_equal(cuda.from_device(out, a.shape, a.dtype), a)
    # F order: the matrix's columns are the texture's rows
    tf = cuda.TextureObject(cuda.matrix_to_array(np.asfortranarray(a), "F"))
    _launch2d(gpu_mod.get_function("read2d"), 37, 91, tf, out, np.int32(37), np.int32(91))
    np.testing.assert_array_equal(cuda.from_device(out, (91, 37), a.dtype), a.T)


@pytest.mark.gpu
def test_gpu_multiple_2d_textures(ctx, rng, gpu_mod):
    a = rng.standard_normal((20, 70)).astype(np.float32)
    b = rng.standard_normal((20, 70)).astype(np.float32)
    ta, tb = (
        cuda.TextureObject(cuda.matrix_to_array(a, "C")),
        cuda.TextureObject(cuda.matrix_to_array(b, "C")),
    )
    out = cuda.mem_alloc(a.nbytes)
    _launch2d(gpu_mod.get_function("product2d"), 70, 20, ta, tb, out, np.int32(70), np.int32(20))
    np.testing.assert_array_equal(cuda.from_device(out, a.shape, a.dtype), a * b)


@pytest.mark.gpu
def test_gpu_multichannel_2d_texture(ctx, rng, gpu_mod):
    a = rng.standard_normal((13, 29, 4)).astype(np.float32)
    t = cuda.TextureObject(cuda.make_multichannel_2d_array(a, "C"))
    out = cuda.mem_alloc(a.nbytes)
    _launch2d(gpu_mod.get_function("read2d_float4"), 29, 13, t, out, np.int32(29), np.int32(13))
    np.testing.assert_array_equal(cuda.from_device(out, a.shape, a.dtype), a)


@pytest.mark.gpu
def test_gpu_multichannel_linear_texture(ctx, rng, gpu_mod):
    a = rng.standard_normal((1000, 2)).astype(np.float32)
    from pygpu import gpuarray

    g = gpuarray.to_gpu(a)
    t = cuda.TextureObject(g, num_channels=2)  # the trailing axis: the channels
    assert t.resource_type == cuda.resource_type.LINEAR
    out = cuda.mem_alloc(a.nbytes)
    gpu_mod.get_function("fetch_float2")(t, out, np.int32(1000), block=(128, 1, 1), grid=(8, 1))
    np.testing.assert_array_equal(cuda.from_device(out, a.shape, a.dtype), a)


@pytest.mark.gpu
def test_gpu_2d_float_linear_filtering(ctx, rng, gpu_mod):
    a = rng.standard_normal((24, 40)).astype(np.float32)
    t = cuda.TextureObject(cuda.matrix_to_array(a, "C"), filter_mode=cuda.filter_mode.LINEAR)
    n = 4096
    u = rng.uniform(-2, 42, n).astype(np.float32)
    v = rng.uniform(-2, 26, n).astype(np.float32)
    out = cuda.mem_alloc(4 * n)
    gpu_mod.get_function("sample2d")(
        t,
        cuda.to_device(u),
        cuda.to_device(v),
        out,
        np.int32(n),
        block=(256, 1, 1),
        grid=(n // 256, 1),
    )
    got = cuda.from_device(out, n, np.float32)
    want = _bilinear(a, u.astype(np.float64), v.astype(np.float64))
    # 9-bit fixed-point weights (8 fractional bits): each weight is off by at most
    # 1/256 (truncated or rounded), each of the 2 interpolations by 1/256 of a
    # difference of two texels (at most 2 max|a|)
    tol = 2 * (2 * np.abs(a).max()) / 256 + 1e-5
    np.testing.assert_allclose(got, want, rtol=0, atol=tol)


@pytest.mark.gpu
def test_gpu_pitched_texture(ctx, rng, gpu_mod):
    h, w = 16, 48
    a = rng.standard_normal((h, w)).astype(np.float32)
    dev, pitch = cuda.mem_alloc_pitch(w * 4, h, 4)
    c = cuda.Memcpy2D()
    c.set_src_host(a)
    c.set_dst_device(dev)
    c.width_in_bytes, c.src_pitch, c.dst_pitch, c.height = w * 4, w * 4, pitch, h
    c()
    t = cuda.TextureObject(dev, format=cuda.array_format.FLOAT, shape=(h, w), pitch=pitch)
    assert t.resource_type == cuda.resource_type.PITCH2D
    out = cuda.mem_alloc(a.nbytes)
    _launch2d(gpu_mod.get_function("read2d"), w, h, t, out, np.int32(w), np.int32(h))
    np.testing.assert_array_equal(cuda.from_device(out, a.shape, a.dtype), a)


@pytest.mark.gpu
def test_gpu_address_modes(ctx, rng, gpu_mod):
    h, w = 16, 48
    a = rng.standard_normal((h, w)).astype(np.float32)
    ary = cuda.matrix_to_array(a, "C")
    n = 2048
    ix = rng.integers(-3 * w, 4 * w, n)
    iy = rng.integers(-3 * h, 4 * h, n)
    out = cuda.mem_alloc(4 * n)
    sample = gpu_mod.get_function("sample2d")
    for mode, norm, xs, ys in [
        (cuda.address_mode.CLAMP, False, np.clip(ix, 0, w - 1), np.clip(iy, 0, h - 1)),
        (cuda.address_mode.WRAP, True, ix % w, iy % h),
        (cuda.address_mode.MIRROR, True, None, None),
        (cuda.address_mode.BORDER, False, None, None),
    ]:
        t = cuda.TextureObject(ary, address_mode=mode, normalized_coords=norm)
        u, v = (ix + 0.5).astype(np.float32), (iy + 0.5).astype(np.float32)
        if norm:
            u, v = (u / w).astype(np.float32), (v / h).astype(np.float32)
        sample(
            t,
            cuda.to_device(u),
            cuda.to_device(v),
            out,
            np.int32(n),
            block=(256, 1, 1),
            grid=(n // 256, 1),
        )
        got = cuda.from_device(out, n, np.float32)
        if mode == cuda.address_mode.MIRROR:
            xs = np.where((ix // w) % 2 == 0, ix % w, w - 1 - ix % w)
            ys = np.where((iy // h) % 2 == 0, iy % h, h - 1 - iy % h)
        if mode == cuda.address_mode.BORDER:
            inside = (ix >= 0) & (ix < w) & (iy >= 0) & (iy < h)
            want = np.where(inside, a[np.clip(iy, 0, h - 1), np.clip(ix, 0, w - 1)], 0)
        else:
            want = a[ys, xs]
        np.testing.assert_array_equal(got, want, err_msg=str(mode))


@pytest.mark.gpu
def test_gpu_integer_texture_element_and_normalized(ctx, rng, gpu_mod):
    a = rng.integers(0, 256, (9, 64)).astype(np.uint8)
    ary = cuda.matrix_to_array(a, "C")
    out = cuda.mem_alloc(a.size * 4)
    _launch2d(
        gpu_mod.get_function("read2d_int"),
        64,
        9,
        cuda.TextureObject(ary),
        out,
        np.int32(64),
        np.int32(9),
    )
    np.testing.assert_array_equal(cuda.from_device(out, a.shape, np.int32), a)
    tn = cuda.TextureObject(ary, read_mode=cuda.read_mode.NORMALIZED_FLOAT)
    _launch2d(gpu_mod.get_function("read2d"), 64, 9, tn, out, np.int32(64), np.int32(9))
    np.testing.assert_allclose(
        cuda.from_device(out, a.shape, np.float32), a.astype(np.float32) / 255, rtol=0, atol=1e-6
    )


@pytest.mark.gpu
def test_gpu_3d_float_texture(ctx, rng, gpu_mod):
    a = rng.standard_normal((5, 12, 70)).astype(np.float32)
    t = cuda.TextureObject(cuda.np_to_array(a, "C"))
    out = cuda.mem_alloc(a.nbytes)
    _launch2d(
        gpu_mod.get_function("read3d"), 70, 12, t, out, np.int32(70), np.int32(12), np.int32(5), d=5
    )
    np.testing.assert_array_equal(cuda.from_device(out, a.shape, a.dtype), a)


@pytest.mark.gpu
def test_gpu_layered_texture(ctx, rng, gpu_mod):
    a = rng.standard_normal((6, 10, 33)).astype(np.float32)
    ary = cuda.np_to_array(a, "C", layered=True)
    t = cuda.TextureObject(ary)
    out = cuda.mem_alloc(a.nbytes)
    _launch2d(gpu_mod.get_function("read_layered"), 33, 10, t, out, np.int32(33), np.int32(10), d=6)
    np.testing.assert_array_equal(cuda.from_device(out, a.shape, a.dtype), a)


@pytest.mark.gpu
def test_gpu_2d_surface(ctx, rng, gpu_mod):
    h, w = 14, 77
    a = rng.standard_normal((h, w)).astype(np.float32)
    ary = cuda.Array(
        cuda.ArrayDescriptor3D(w, h, 0, cuda.array_format.FLOAT, 1, cuda.array3d_flags.SURFACE_LDST)
    )
    c = cuda.Memcpy2D()
    c.set_src_host(a)
    c.set_dst_array(ary)
    c.width_in_bytes = c.src_pitch = w * 4
    c.height = h
    c()
    _launch2d(
        gpu_mod.get_function("surf2d_scale"),
        w,
        h,
        cuda.SurfaceObject(ary),
        np.int32(w),
        np.int32(h),
        np.float32(3.0),
    )
    # the kernel's a * 3 + i is one fused multiply-add (one rounding): in
    # float64 the product is exact, so rounding the sum once gives the same
    want = (a.astype(np.float64) * 3.0 + np.arange(h * w, dtype=np.float64).reshape(h, w)).astype(
        np.float32
    )
    np.testing.assert_array_equal(cuda.array_to_np(ary), want)
    # PyCUDA's way: allowSurfaceBind makes a one-layer layered array of ints
    b = rng.integers(-1000, 1000, (h, w)).astype(np.int32)
    lay = cuda.np_to_array(b, "C", allowSurfaceBind=True)
    _launch2d(
        gpu_mod.get_function("surf2d_layered_neg"),
        w,
        h,
        cuda.SurfaceObject(lay),
        np.int32(w),
        np.int32(h),
    )
    np.testing.assert_array_equal(cuda.array_to_np(lay)[0], -b)


@pytest.mark.gpu
def test_gpu_3d_surface(ctx, rng, gpu_mod):
    d, h, w = 4, 9, 50
    a = rng.standard_normal((d, h, w)).astype(np.float32)
    ary = cuda.Array(
        cuda.ArrayDescriptor3D(w, h, d, cuda.array_format.FLOAT, 1, cuda.array3d_flags.SURFACE_LDST)
    )
    c = cuda.Memcpy3D()
    c.set_src_host(a)
    c.set_dst_array(ary)
    c.width_in_bytes = c.src_pitch = w * 4
    c.height = c.src_height = h
    c.depth = d
    c()
    _launch2d(
        gpu_mod.get_function("surf3d_scale"),
        w,
        h,
        cuda.SurfaceObject(ary),
        np.int32(w),
        np.int32(h),
        np.int32(d),
        np.float32(-2.0),
        d=d,
    )
    want = np.float32(-2.0) * a + np.arange(d, dtype=np.float32)[:, None, None]
    np.testing.assert_array_equal(cuda.array_to_np(ary), want)


@pytest.mark.gpu
def test_gpu_tma_example():
    import subprocess

    r = subprocess.run(
        [sys.executable, os.path.join(ROOT, "examples", "tma_copy.py")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    print(r.stdout)
    assert r.returncode == 0, r.stdout + r.stderr
    assert (
        "ok: 2*x + 1 through TMA tiles" in r.stdout or "no TMA on compute capability" in r.stdout
    ), r.stdout
