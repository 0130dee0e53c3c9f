"""Zero-copy with NVIDIA's cuda.core (docs/interop.md).

cuda.core's Buffer and StridedMemoryView are known by their class (named so
in a module under cuda.core) without importing cuda.core: without a GPU,
stand-ins of those classes check the reading (address, size, strides in
elements) and every refusal; on the driver stand-in, launches and copies
take them; on a GPU, against the real cuda.core, a kernel compiled and
launched by cuda.core runs on pygpu arrays and a pygpu kernel on cuda.core
Buffers and StridedMemoryViews with a cuda.core Stream, both checked
against NumPy, and copies go both ways."""

import struct
import warnings

import numpy as np
import pytest

import pygpu.driver as cuda
from pygpu import _cudacore, compiler, cudacore, gpuarray

KERNEL = r"""
extern "C" __global__ void axpb(float *y, const float *x, float a, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}
"""


# ---- classes shaped and named as cuda.core's (the rule is the name) ----


class Buffer:
    def __init__(self, handle, size, device_id=None):
        self.handle, self.size = handle, size
        if device_id is not None:
            self.device_id = device_id


Buffer.__module__ = "cuda.core._memory._buffer"


class StridedMemoryView:
    def __init__(self, ptr, shape, strides, dtype, device=True):
        self.ptr, self.shape, self.strides = ptr, shape, strides
        self.dtype = None if dtype is None else np.dtype(dtype)
        self.is_device_accessible = device
        self.readonly = False


StridedMemoryView.__module__ = "cuda.core._memoryview"


class ManagedBuffer(Buffer):  # a subclass in a user's module: still a Buffer
    pass


class NotCore:  # the right name in the wrong module
    handle, size = 4096, 64


NotCore.__name__ = NotCore.__qualname__ = "Buffer"


def test_known_by_class():
    assert cudacore.is_buffer(Buffer(1, 2)) and cudacore.is_buffer(ManagedBuffer(1, 2))
    assert cudacore.is_view(StridedMemoryView(1, (1,), None, "f4"))
    assert not cudacore.is_buffer(NotCore()) and not cudacore.is_view(NotCore())
    assert _cudacore.kind(np.zeros(2)) is None


def test_the_real_classes_are_known():
    core = pytest.importorskip("cuda.core")
    from cuda.core.utils import StridedMemoryView as SMV

    b = core.Buffer.from_handle(0x10000, 64, owner=None)  # no GPU needed
    assert cudacore.is_buffer(b) and _cudacore.buffer_span(b) == (0x10000, 64)
    assert _cudacore.kind.__doc__ and _cudacore.VIEW == SMV.__name__
    a = gpuarray.asarray(b, dtype=np.float32)
    assert (a.ptr, a.shape, a.dtype, a.base) == (0x10000, (16,), np.float32, b)
    # and pygpu memory as a real Buffer: no copy, the owner kept
    src = gpuarray.asarray(StridedMemoryView(0x20000, (4, 8), (8, 1), "f8"))
    out = cudacore.as_buffer(src)
    assert isinstance(out, core.Buffer) and int(out.handle) == 0x20000 and out.size == 256
    assert out.owner is src
    assert cudacore.as_buffer(b) is b
    with pytest.raises(TypeError, match="as_buffer\\(\\) takes"):
        cudacore.as_buffer(np.zeros(3))
    with pytest.raises(ValueError, match="not contiguous"):
        cudacore.as_buffer(gpuarray.asarray(StridedMemoryView(0x20000, (4,), (2,), "f4")))


def test_asarray_over_a_buffer():
    b = Buffer(0x7000_0000, 4096)
    a = gpuarray.asarray(b)
    assert (a.ptr, a.shape, a.dtype, a.base, a.flags.c_contiguous) == (
        0x7000_0000,
        (4096,),
        np.uint8,
        b,
        True,
    )
    f = gpuarray.asarray(b, dtype=np.float64)
    assert (f.shape, f.dtype, f.nbytes) == ((512,), np.float64, 4096)
    with pytest.raises(ValueError, match="4095 bytes is not a whole number of float32"):
        gpuarray.asarray(Buffer(0x7000_0000, 4095), dtype=np.float32)
    with pytest.raises(cuda.LogicError, match="closed"):
        gpuarray.asarray(Buffer(0, 64))
    assert gpuarray.asarray(Buffer(0, 0)).size == 0  # an empty buffer is no error
    with pytest.raises(TypeError, match="int handle"):
        gpuarray.asarray(Buffer("nowhere", 64))


def test_asarray_over_a_view():
    v = StridedMemoryView(0x5000_0000, (3, 4), (8, 1), np.float32)  # strides in elements
    a = gpuarray.asarray(v)
    assert (a.ptr, a.shape, a.strides, a.dtype, a.base) == (
        0x5000_0000,
        (3, 4),
        (32, 4),
        np.float32,
        v,
    )
    assert not a.flags.c_contiguous
    c = gpuarray.asarray(StridedMemoryView(0x5000_0000, (3, 4), None, np.int16))
    assert c.strides == (8, 2) and c.flags.c_contiguous
    with pytest.raises(TypeError, match="host memory"):
        gpuarray.asarray(StridedMemoryView(0x5000_0000, (3,), None, "f4", device=False))
    with pytest.raises(TypeError, match="without a dtype"):
        gpuarray.asarray(StridedMemoryView(0x5000_0000, (3,), None, None))
    with pytest.raises(ValueError, match="2 strides for shape"):
        gpuarray.asarray(StridedMemoryView(0x5000_0000, (3,), (1, 1), "f4"))
    with pytest.raises(ValueError, match="NULL pointer"):
        gpuarray.asarray(StridedMemoryView(0, (3,), None, "f4"))
    with pytest.raises(TypeError, match="does not copy"):
        gpuarray.asarray(v, dtype=np.float64)


def test_gpuarray_on_a_buffer():
    b = Buffer(0x6000_0000, 400)
    a = gpuarray.GPUArray((10, 10), np.float32, gpudata=b)
    assert a.ptr == 0x6000_0000 and a.base is b and a.nbytes == 400
    with pytest.raises(ValueError, match="Buffer of 400 bytes; an array of shape \\(10, 11\\)"):
        gpuarray.GPUArray((10, 11), np.float32, gpudata=b)
    with pytest.raises(cuda.LogicError, match="closed"):
        gpuarray.GPUArray((4,), np.float32, gpudata=Buffer(0, 16))


def test_copy_into_a_buffer_of_the_wrong_size():
    host = np.arange(32, dtype=np.float32)
    with pytest.raises(ValueError, match="128 bytes.*64|64.*128"):
        cuda.memcpy_htod(Buffer(0x6000_0000, 64), host)
    with pytest.raises(ValueError, match="128 bytes.*64|64.*128"):
        cuda.memcpy_dtoh(host, Buffer(0x6000_0000, 64))
    with pytest.raises(cuda.LogicError, match="closed cuda.core Buffer"):
        cuda.memcpy_htod(Buffer(0, 64), host)
    with pytest.raises(TypeError, match="cuda.core Buffer"):
        cuda.memcpy_htod(NotCore(), host)
    # a view's extent: its last element's end (strides in elements)
    with pytest.raises(ValueError, match="128 bytes.*124|124.*128"):
        cuda.memcpy_htod(StridedMemoryView(0x6000_0000, (31,), None, "f4"), host)
    with pytest.raises(ValueError, match="128 bytes.*120|120.*128"):
        cuda.memcpy_htod(StridedMemoryView(0x6000_0000, (2, 15), (15, 1), "f4"), host)


def test_as_view_arguments():
    pytest.importorskip("cuda.core")
    with pytest.raises(TypeError, match="stream must be a pygpu Stream"):
        cudacore.as_view(gpuarray.asarray(Buffer(0x6000_0000, 64)), stream="s")


# ---- on the driver stand-in: launches and copies take them ----


@pytest.fixture
def axpb(ctx):
    ptx = bytes(compiler.compile(KERNEL, target="ptx", arch="compute_90"))
    return cuda.module_from_buffer(ptx).get_function("axpb")


@pytest.mark.standin
def test_launch_arguments(standin, axpb):
    y = cuda.mem_alloc(64)
    b = Buffer(int(y), 64)
    v = StridedMemoryView(int(y) + 16, (4,), (1,), np.float32)
    axpb(b, v, np.float32(2.5), np.int32(16), block=(16, 1, 1))
    assert standin.last_launch().params == struct.pack("<QQfi", int(y), int(y) + 16, 2.5, 16)
    with pytest.raises(cuda.LogicError, match="closed cuda.core Buffer"):
        axpb(Buffer(0, 64), b, np.float32(1), np.int32(1), block=(1, 1, 1))
    with pytest.raises(TypeError, match="host memory"):
        axpb(b, StridedMemoryView(1 << 20, (4,), None, "f4", device=False), 1.0, 1, block=(1, 1, 1))
    with pytest.raises(ValueError, match="not an address or a size"):
        axpb(Buffer(-5, 64), b, np.float32(1), np.int32(1), block=(1, 1, 1))
    with pytest.raises(TypeError, match="cannot take a"):
        axpb(NotCore(), b, np.float32(1), np.int32(1), block=(1, 1, 1))
    y.free()


class _Raises:
    def __get__(self, obj, tp=None):
        raise RuntimeError("a property that fails")


class BrokenBuffer(Buffer):
    handle = _Raises()


class BrokenView(StridedMemoryView):
    is_device_accessible = _Raises()


@pytest.mark.standin
@pytest.mark.parametrize(
    "make",
    [
        lambda p: BrokenBuffer.__new__(BrokenBuffer),
        lambda p: Buffer(p, -1),
        lambda p: Buffer(p, 1 << 70),
        lambda p: Buffer(p, "64"),
        lambda p: Buffer(2.5, 64),
        lambda p: BrokenView.__new__(BrokenView),
        lambda p: StridedMemoryView(p, "shape", (1,), "f4"),
        lambda p: StridedMemoryView(p, (4,), "strides", "f4"),
        lambda p: StridedMemoryView(p, (4, -1), (1, 1), "f4"),
        lambda p: StridedMemoryView(p, (4,), (-1,), "f4"),
        lambda p: StridedMemoryView(p, (1 << 62, 1 << 62), None, "f4"),
        lambda p: StridedMemoryView(-p, (4,), None, "f4"),
    ],
)
def test_broken_imitations_raise_ordinary_errors(standin, axpb, make):
    """Objects that claim to be cuda.core's with broken fields: an ordinary
    exception or a launch, never a crash or a SystemError."""
    y = cuda.mem_alloc(64)
    try:
        axpb(make(int(y)), y, np.float32(1), np.int32(1), block=(1, 1, 1))
    except SystemError:  # pragma: no cover - the failure this test looks for
        raise
    except (TypeError, ValueError, RuntimeError, OverflowError, cuda.LogicError):
        pass
    y.free()


@pytest.mark.standin
def test_a_cuda_stream_object(standin, axpb):
    """A stream given by __cuda_stream__ (as cuda.core's Stream has)."""
    s = cuda.Stream()

    class CoreStream:
        def __cuda_stream__(self):
            return (0, s.handle)

    y = cuda.mem_alloc(64)
    axpb(y, y, np.float32(1), np.int32(16), block=(16, 1, 1), stream=CoreStream())
    assert standin.last_launch().stream == s.handle
    assert s.__cuda_stream__() == (0, s.handle)  # and pygpu's, for cuda.core


@pytest.mark.standin
def test_copies_through_a_buffer(standin, ctx, rng):
    x = rng.standard_normal(64).astype(np.float32)
    d = cuda.mem_alloc(x.nbytes)
    b = Buffer(int(d), x.nbytes)
    cuda.memcpy_htod(b, x)
    out = np.empty_like(x)
    cuda.memcpy_dtoh(out, b)
    assert np.array_equal(out, x)
    a = gpuarray.asarray(b, dtype=np.float32)
    assert np.array_equal(a.get(), x)
    v = StridedMemoryView(int(d), (8, 8), (8, 1), np.float32)
    assert np.array_equal(gpuarray.asarray(v).get(), x.reshape(8, 8))
    d.free()


# ---- on a GPU, against the real cuda.core ----


@pytest.fixture
def core(ctx):
    core = pytest.importorskip("cuda.core")
    dev = core.Device(ctx.device.ordinal)
    dev.set_current()  # the primary context pygpu uses too
    return core, dev


@pytest.mark.gpu
def test_a_cuda_core_kernel_on_pygpu_arrays(core, rng):
    core, dev = core
    prog = core.Program(
        KERNEL, code_type="c++", options=core.ProgramOptions(arch="sm_%s" % dev.arch)
    )
    kernel = prog.compile("cubin").get_kernel("axpb")
    n = 100_003
    x = rng.standard_normal(n).astype(np.float32)
    y = rng.standard_normal(n).astype(np.float32)
    gx, gy = gpuarray.to_gpu(x), gpuarray.to_gpu(y)
    s = cuda.Stream()  # a pygpu stream, given to cuda.core's launch as it is
    config = core.LaunchConfig(grid=(n + 255) // 256, block=256)
    args = (cudacore.as_buffer(gy), cudacore.as_buffer(gx), np.float32(1.5), np.int32(n))
    with warnings.catch_warnings():
        # cuda.core 1.x takes __cuda_stream__ objects in launch, with a
        # DeprecationWarning that recommends the explicit form below
        warnings.simplefilter("ignore", DeprecationWarning)
        core.launch(s, config, kernel, *args)
    s.synchronize()
    y1 = np.float32(1.5) * x + y
    np.testing.assert_allclose(gy.get(), y1, rtol=1e-5, atol=1e-5)  # FMA vs two roundings
    cs = dev.create_stream(s)  # cuda.core's Stream over pygpu's (not owning it)
    assert int(cs.handle) == s.handle
    core.launch(cs, config, kernel, *args)
    cs.sync()
    np.testing.assert_allclose(
        gy.get(), np.float32(1.5) * x + y1, rtol=1e-5, atol=1e-5
    )  # FMA vs two roundings
    # a cuda.core StridedMemoryView of a pygpu array, ordered on the stream
    view = cudacore.as_view(gy, stream=s)
    assert view.ptr == gy.ptr and view.shape == (n,) and view.dtype == np.float32
    smv = core.utils.StridedMemoryView
    direct = smv.from_dlpack(gx, stream_ptr=-1)  # pygpu's DLPack export
    assert direct.ptr == gx.ptr and direct.shape == (n,) and direct.dtype == np.float32
    cai = smv.from_cuda_array_interface(gx, stream_ptr=-1)
    assert cai.ptr == gx.ptr and cai.shape == (n,)
    alloc = cuda.mem_alloc(64)  # a DeviceAllocation: CAI bytes
    v = smv.from_any_interface(alloc, stream_ptr=-1)
    assert v.ptr == int(alloc) and v.shape == (64,)


@pytest.mark.gpu
def test_a_pygpu_kernel_on_cuda_core_memory(core, rng):
    core, dev = core
    from pygpu.compiler import SourceModule

    f = SourceModule(KERNEL, no_extern_c=True).get_function("axpb")
    n = 65_537
    x = rng.standard_normal(n).astype(np.float32)
    y = rng.standard_normal(n).astype(np.float32)
    s = dev.create_stream()
    bx, by = dev.allocate(x.nbytes, stream=s), dev.allocate(y.nbytes, stream=s)
    cuda.memcpy_htod_async(bx, x, stream=s)  # pygpu copies into cuda.core Buffers
    cuda.memcpy_htod_async(by, y, stream=s)
    vx = core.utils.StridedMemoryView.from_buffer(bx, (n,), dtype=np.dtype(np.float32))
    f(
        by,
        vx,
        np.float32(-0.75),
        np.int32(n),
        block=(256, 1, 1),
        grid=((n + 255) // 256, 1),
        stream=s,
    )
    out = np.empty_like(y)
    cuda.memcpy_dtoh_async(out, by, stream=s)
    s.sync()
    np.testing.assert_allclose(
        out, np.float32(-0.75) * x + y, rtol=1e-5, atol=1e-5
    )  # FMA vs two roundings
    # the same memory as pygpu arrays, no copy
    ax = gpuarray.asarray(bx, dtype=np.float32)
    assert ax.ptr == int(bx.handle) and np.array_equal(ax.get(), x)
    av = gpuarray.asarray(vx)
    assert av.ptr == vx.ptr and np.array_equal(av.get(), x)
    a2 = gpuarray.GPUArray((n,), np.float32, gpudata=by)
    assert np.array_equal(a2.get(), out)
    with pytest.raises(ValueError, match="cuda.core Buffer"):
        gpuarray.GPUArray((n + 1,), np.float32, gpudata=by)
    bx.close(s)
    by.close(s)
    s.sync()


@pytest.mark.gpu
def test_copies_both_ways(core, rng):
    core, dev = core
    x = rng.standard_normal((64, 33)).astype(np.float64)
    s = dev.create_stream()
    a = gpuarray.to_gpu(x)
    # cuda.core copies out of pygpu memory ...
    b = dev.allocate(a.nbytes, stream=s)
    b.copy_from(cudacore.as_buffer(a), stream=s)
    s.sync()
    back = np.empty_like(x)
    cuda.memcpy_dtoh(back, b)  # ... and pygpu out of cuda.core's
    assert np.array_equal(back, x)
    # cuda.core copies into pygpu memory
    y = rng.standard_normal((64, 33)).astype(np.float64)
    cuda.memcpy_htod(b, y)
    # (a copy from pageable memory may return before its DMA lands, and
    # cuda.core's stream is non-blocking: ordering between the two
    # libraries' streams is the caller's, docs/interop.md)
    cuda.Context.synchronize()
    b.copy_to(cudacore.as_buffer(a), stream=s)
    s.sync()
    assert np.array_equal(a.get(), y)
    # device to device by pygpu, between the two
    c = gpuarray.empty_like(a)
    cuda.memcpy_dtod(c.gpudata, b, a.nbytes)
    assert np.array_equal(c.get(), y)
    b.close(s)
    s.sync()
