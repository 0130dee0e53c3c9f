"""The members of PyCUDA's C-level classes that pygpu gained for issue 24
(tests/data/pycuda_members.txt; test_pycuda_names.py checks the names):
enum tables, Memcpy fields, host and managed allocations' free/get_flags/
unregister/attach/as_buffer, Context's API version and shared memory
configuration, pool statistics and Function's legacy launch API."""

import struct
import sys

import numpy as np
import pytest

import pygpu.driver as cuda
from pygpu import tools


# ---- enums: PyCUDA's names and values tables, the odd members ----


def test_enum_tables_are_pycudas():
    for cls in (
        cuda.device_attribute,
        cuda.ctx_flags,
        cuda.function_attribute,
        cuda.shared_config,
        cuda.compute_mode,
        cuda.jit_input_type,
        cuda.graphics_register_flags,
        cuda.direction_vector_set,
        cuda.memory_type,
        cuda.host_alloc_flags,
    ):
        assert cls.names == dict(cls.__members__)
        assert set(cls.values) == {int(m) for m in cls}
        for value, member in cls.values.items():
            assert type(value) is int and int(member) == value and member.name in cls.names
        for name, member in cls.names.items():
            assert getattr(cls, name) is member and member.name == member._name_
    a = cuda.device_attribute
    # an alias is in names; values keeps the first member of its value
    assert a.names["SHARED_MEMORY_PER_BLOCK"] is a.MAX_SHARED_MEMORY_PER_BLOCK
    assert a.values[8] is a.MAX_SHARED_MEMORY_PER_BLOCK
    assert a.MAX_THREADS_PER_BLOCK.name == "MAX_THREADS_PER_BLOCK"
    assert a.MAX_THREADS_PER_BLOCK.names is a.names  # PyCUDA's members see them too


def test_enum_odd_members():
    assert cuda.ctx_flags.LMEM_RESIZE_TO_MAX == 0x10  # CU_CTX_LMEM_RESIZE_TO_MAX
    assert str(cuda.ctx_flags.LMEM_RESIZE_TO_MAX) == "LMEM_RESIZE_TO_MAX"
    # cuda.h's CU_FUNC_ATTRIBUTE_MAX, after the last attribute
    assert cuda.function_attribute.MAX == max(int(m) for m in cuda.function_attribute)
    assert cuda.function_attribute.MAX.name == "MAX"
    assert getattr(cuda.array3d_flags, "2DARRAY") == cuda.array3d_flags.ARRAY3D_2DARRAY == 1
    if sys.version_info >= (3, 12):
        assert cuda.device_attribute.WARP_SIZE.is_integer()


def test_enum_tables_refuse_a_non_class():
    from pygpu import _driver

    with pytest.raises(TypeError, match="takes an enum class, not int"):
        _driver._enum_tables(3)


# ---- Memcpy2D/3D/3DPeer fields ----


@pytest.mark.parametrize("cls", [cuda.Memcpy2D, cuda.Memcpy3D, cuda.Memcpy3DPeer])
def test_memcpy_fields_read_back(cls, rng):
    c = cls()
    fields = [
        "src_x_in_bytes",
        "src_y",
        "src_pitch",
        "dst_x_in_bytes",
        "dst_y",
        "dst_pitch",
        "width_in_bytes",
        "height",
    ]
    if cls is not cuda.Memcpy2D:
        fields += ["src_z", "src_lod", "src_height", "dst_z", "dst_lod", "dst_height", "depth"]
    for f in fields:
        assert hasattr(cls, f)
        assert getattr(c, f) == (1 if f == "depth" else 0)
    values = {f: int(v) for f, v in zip(fields, rng.integers(1, 1 << 20, len(fields)))}
    for f, v in values.items():
        setattr(c, f, v)
    assert {f: getattr(c, f) for f in fields} == values
    assert cls().src_x_in_bytes == 0  # another copy's fields are its own
    assert (c.src_memory_type, c.dst_memory_type, c.src_device, c.dst_device) == (0, 0, 0, 0)


@pytest.mark.parametrize("cls", [cuda.Memcpy2D, cuda.Memcpy3D])
def test_memcpy_memory_types_follow_the_setters(cls):
    mt = cuda.memory_type
    c = cls()
    host = np.zeros(16, np.uint8)
    c.set_src_host(host)
    c.set_dst_device(0x7000)
    assert c.src_memory_type is mt.HOST and c.dst_memory_type is mt.DEVICE
    assert str(c.src_memory_type) == "HOST"
    assert (c.src_device, c.dst_device) == (0, 0x7000)
    c.set_src_unified(host)
    c.set_dst_unified(host)
    assert c.src_memory_type is mt.UNIFIED and c.dst_memory_type is mt.UNIFIED
    assert c.src_device == 0
    c.src_device = 0x1000  # PyCUDA's field: the side becomes that address
    assert c.src_memory_type is mt.DEVICE and c.src_device == 0x1000
    c.dst_memory_type = mt.HOST
    assert c.dst_memory_type is mt.HOST
    with pytest.raises(ValueError, match="src_memory_type must be a memory_type .* got 9"):
        c.src_memory_type = 9
    with pytest.raises(ValueError, match="dst_memory_type must be a memory_type"):
        c.dst_memory_type = "HOST"


@pytest.mark.driver
def test_memcpy2d_and_3d_through_unified_sides(ctx, rng):
    rows, cols = 13, 24
    x = rng.standard_normal((rows, cols)).astype(np.float32)
    d = cuda.mem_alloc(x.nbytes)
    c = cuda.Memcpy2D()
    c.set_src_unified(x)  # a host buffer: read as host memory
    c.set_dst_unified(int(d))  # an address: read as device memory
    c.width_in_bytes = c.src_pitch = c.dst_pitch = x.strides[0]
    c.height = rows
    c(aligned=True)
    np.testing.assert_array_equal(cuda.from_device(d, x.shape, x.dtype), x)
    out = np.zeros_like(x)
    c3 = cuda.Memcpy3D()
    c3.set_src_device(d)
    c3.set_dst_unified(out)
    c3.width_in_bytes = c3.src_pitch = c3.dst_pitch = x.strides[0]
    c3.height = c3.src_height = c3.dst_height = rows
    c3()
    np.testing.assert_array_equal(out, x)
    assert c3.src_device == int(d) and c3.dst_memory_type is cuda.memory_type.UNIFIED


def test_memcpy2d_without_sides_says_so():
    with pytest.raises(ValueError, match="Memcpy2D: set a source and a destination first"):
        cuda.Memcpy2D()()


# ---- the allocation kinds' methods, on the driver (stand-in or GPU) ----


@pytest.mark.driver
def test_pagelocked_free_get_flags_and_use_after_free(ctx, rng):
    a = cuda.pagelocked_empty(257, np.float32, mem_flags=cuda.host_alloc_flags.DEVICEMAP)
    x = rng.standard_normal(257).astype(np.float32)
    a[:] = x
    base = a.base
    assert isinstance(base, cuda.PagelockedHostAllocation) and not base.freed
    # the driver's answer (a real driver may add flags, e.g. DEVICEMAP under UVA)
    assert base.get_flags() & cuda.host_alloc_flags.DEVICEMAP
    assert cuda.PagelockedHostAllocation.get_flags(base) == base.get_flags()
    assert base.get_device_pointer() == cuda.HostPointer.get_device_pointer(base) != 0
    cuda.PagelockedHostAllocation.free(base)
    assert base.freed and "(freed)" in repr(base)
    base.free()  # a second free() does nothing
    # the array stays readable and writable: its memory goes with it
    np.testing.assert_array_equal(a, x)
    a *= 2
    np.testing.assert_array_equal(a, 2 * x)
    with pytest.raises(cuda.LogicError, match="the HostAllocation was freed"):
        base.get_device_pointer()
    with pytest.raises(cuda.LogicError, match="the HostAllocation was freed"):
        base.get_flags()


@pytest.mark.driver
def test_registered_unregister_leaves_the_array_valid(ctx, rng):
    x = rng.standard_normal(1024)
    host = x.copy()
    r = cuda.register_host_memory(host, cuda.mem_host_register_flags.DEVICEMAP)
    base = r.base
    assert isinstance(base, cuda.RegisteredHostMemory)
    assert base.get_flags() == cuda.mem_host_register_flags.DEVICEMAP
    assert base.get_device_pointer() != 0
    cuda.RegisteredHostMemory.unregister(base)
    assert base.freed and "(unregistered)" in repr(base)
    base.unregister()
    with pytest.raises(cuda.LogicError, match="the HostAllocation was unregistered"):
        base.get_device_pointer()
    del host
    np.testing.assert_array_equal(r, x)  # the source array's memory lives on
    r[:] = 1
    assert r.sum() == 1024


@pytest.mark.driver
def test_managed_allocation_methods(ctx, rng):
    a = cuda.managed_empty((4, 8), np.float64)
    x = rng.standard_normal((4, 8))
    a[:] = x
    base = a.base
    assert isinstance(base, cuda.ManagedAllocation)
    assert cuda.ManagedAllocation.get_device_pointer(base) == int(base) == base.__index__()
    assert cuda.ManagedAllocation.__int__(base) == a.ctypes.data
    buf = cuda.ManagedAllocation.as_buffer(base, 16, offset=8)
    assert isinstance(buf, memoryview) and buf.nbytes == 16 and not buf.readonly
    np.testing.assert_array_equal(np.frombuffer(buf, np.float64), x.ravel()[1:3])
    buf[:8] = np.float64(5.5).tobytes()
    assert a[0, 1] == 5.5
    base.attach(cuda.mem_attach_flags.HOST)
    base.attach(mem_flags=cuda.mem_attach_flags.GLOBAL, stream=None)
    cuda.ManagedAllocation.attach(base, cuda.mem_attach_flags.SINGLE, cuda.Stream())
    with pytest.raises(
        ValueError, match="16 bytes at offset 248 do not fit in the allocation's 256 bytes"
    ):
        base.as_buffer(16, 248)
    with pytest.raises(TypeError, match="as_buffer\\(\\): size must be an int, not float"):
        base.as_buffer(1.5)
    with pytest.raises(ValueError, match="as_buffer\\(\\): offset must be >= 0"):
        base.as_buffer(8, -1)
    # free(): no further use through it; the array and the buffer stay valid
    cuda.ManagedAllocation.free(base)
    assert base.freed and "the memory goes with this object" in repr(base)
    base.free()
    np.testing.assert_array_equal(np.frombuffer(buf, np.float64)[1:], x.ravel()[2:3])
    a[3, 7] = 1.25
    assert a[3, 7] == 1.25
    for call in (
        lambda: int(base),
        base.get_device_pointer,
        lambda: base.as_buffer(8),
        lambda: base.attach(cuda.mem_attach_flags.GLOBAL),
    ):
        with pytest.raises(cuda.LogicError, match="the DeviceAllocation was freed"):
            call()


@pytest.mark.driver
def test_mem_alloc_managed_as_buffer_keeps_the_memory(ctx, rng):
    m = cuda.mem_alloc_managed(64)
    x = rng.integers(0, 256, 64, dtype=np.uint8)
    cuda.memcpy_htod(m, x)
    cuda.Context.synchronize()
    view = m.as_buffer(64)
    np.testing.assert_array_equal(np.frombuffer(view, np.uint8), x)
    m.free()
    assert m.freed
    np.testing.assert_array_equal(np.frombuffer(view, np.uint8), x)  # still readable
    del view


@pytest.mark.driver
def test_as_buffer_and_attach_refuse_device_memory(ctx):
    d = cuda.mem_alloc(64)
    with pytest.raises(
        cuda.LogicError,
        match="as_buffer\\(\\): the memory is device memory, which the host cannot read",
    ):
        d.as_buffer(16)
    with pytest.raises(cuda.LogicError, match="attach\\(\\): the allocation is not managed memory"):
        d.attach(cuda.mem_attach_flags.GLOBAL)
    assert d.get_device_pointer() == int(d)

    class Holder(cuda.PointerHolderBase):
        def __init__(self, ptr):
            super().__init__()
            self.ptr = ptr

        def get_pointer(self):
            return self.ptr

    with pytest.raises(cuda.LogicError, match="the memory is device memory"):
        Holder(int(d)).as_buffer(8)
    m = cuda.mem_alloc_managed(32)
    view = Holder(int(m)).as_buffer(8, 24)
    assert view.nbytes == 8
    with pytest.raises(ValueError, match="run past the end of the allocation"):
        Holder(int(m)).as_buffer(64 << 20, 24)
    with pytest.raises(ValueError, match="offset must be an int >= 0, got -1"):
        Holder(int(m)).as_buffer(8, -1)


@pytest.mark.driver
def test_attach_refuses_bad_flags(ctx):
    m = cuda.managed_empty(8, np.float32)
    with pytest.raises(TypeError, match="attach\\(\\): mem_flags must be"):
        m.base.attach("GLOBAL")
    with pytest.raises(cuda.Error, match="cuStreamAttachMemAsync failed: CUDA_ERROR_INVALID_VALUE"):
        m.base.attach(3)
    cuda.managed_empty(0, np.float32).base.attach(cuda.mem_attach_flags.HOST)  # nothing


# ---- Context ----


@pytest.mark.driver
def test_context_api_version_and_shared_config(ctx):
    v = ctx.get_api_version()
    assert type(v) is int and 3020 <= v <= max(3020, cuda.get_driver_version())
    with pytest.raises(TypeError, match="set_shared_config\\(\\): config must be"):
        cuda.Context.set_shared_config("FOUR")
    # the driver's own answer: a shared_config (the stand-in's, and what
    # CUDA 12 drivers give), or its error where a driver has dropped the
    # deprecated call (PyCUDA raises the same)
    try:
        cfg = cuda.Context.get_shared_config()
    except cuda.Error as e:
        assert e.routine == "cuCtxGetSharedMemConfig"
        assert e.name in ("CUDA_ERROR_NOT_SUPPORTED", "CUDA_ERROR_NOT_FOUND")
        return
    assert isinstance(cfg, cuda.shared_config)
    assert str(cfg) == cfg.name
    cuda.Context.set_shared_config(cfg)
    cuda.Context.set_shared_config(cuda.shared_config.FOUR_BYTE_BANK_SIZE)
    assert cuda.Context.get_shared_config() in tuple(cuda.shared_config)


@pytest.mark.standin
def test_set_shared_config_passes_on_the_drivers_refusal(ctx, standin):
    with pytest.raises(
        cuda.Error, match="cuCtxSetSharedMemConfig failed: CUDA_ERROR_INVALID_VALUE"
    ):
        cuda.Context.set_shared_config(7)


@pytest.mark.standin
def test_context_calls_without_the_entry_points(tmp_path):
    import subprocess
    import fakecuda

    code = (
        "import pygpu.driver as d, pygpu.autoinit, numpy as np\n"
        "for f in (d.Context.get_current().get_api_version, d.Context.get_shared_config,"
        " lambda: d.managed_empty(4).base.attach(1),"
        " d.pagelocked_empty(4).base.get_flags):\n"
        "    try: f()\n"
        "    except d.LogicError as e: print(e)\n"
    )
    env = dict(
        __import__("os").environ,
        PYGPU_LIBCUDA=fakecuda.build(),
        FAKECUDA_HIDE="cuCtxGetApiVersion,cuCtxGetSharedMemConfig,"
        "cuStreamAttachMemAsync,cuMemHostGetFlags",
    )
    r = subprocess.run(
        [sys.executable, "-c", code],
        env=env,
        capture_output=True,
        text=True,
        cwd=str(tmp_path),
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == [
        "get_api_version(): the driver has no cuCtxGetApiVersion",
        "get_shared_config(): the driver has no cuCtxGetSharedMemConfig",
        "attach(): the driver has no cuStreamAttachMemAsync",
        "get_flags(): the driver has no cuMemHostGetFlags",
    ]


# ---- pools ----


@pytest.mark.driver
def test_pool_statistics(ctx):
    pool = tools.DeviceMemoryPool()
    a = pool.allocate(1000)
    assert len(a) == 1000 and pool.active_blocks == 1 and pool.active_bytes == 1000
    assert pool.managed_bytes == pool.alloc_size(pool.bin_number(1000)) >= 1000
    with pytest.raises(AttributeError):
        pool.active_blocks = 5
    a.free()
    assert (pool.active_blocks, pool.active_bytes, pool.held_blocks) == (0, 0, 1)
    hp = tools.PageLockedMemoryPool()
    assert hp.bin_number(1000) == pool.bin_number(1000)
    assert hp.alloc_size(hp.bin_number(1000)) == pool.alloc_size(pool.bin_number(1000))
    x = hp.empty((250,), np.float32)
    assert (hp.active_blocks, hp.active_bytes) == (1, 1000)
    assert hp.managed_bytes == hp.alloc_size(hp.bin_number(1000))
    del x
    import gc

    gc.collect()
    assert (hp.active_blocks, hp.active_bytes, hp.held_blocks) == (0, 0, 1)
    assert hp.managed_bytes == hp.held_bytes


# ---- Function's legacy launch API ----

LEGACY_SRC = r"""
extern "C" __global__ void axpb(float *out, const float *x, float a, unsigned int n, float b)
{
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x
                     + blockIdx.y * gridDim.x * blockDim.x;
    if (i < n) out[i] = a * x[i] + b;
}
"""


@pytest.fixture
def axpb(ctx):
    from pygpu.compiler import SourceModule

    return SourceModule(LEGACY_SRC, no_extern_c=True).get_function("axpb")


def _params(out, x, a, n, b):
    # the kernel's layout: two pointers, then float, unsigned int, float
    return struct.pack("PPfIf", int(out), int(x), a, n, b)


@pytest.mark.standin
def test_legacy_launch_state_reaches_the_driver(axpb, standin):
    buf = _params(0x1000, 0x2000, 2.0, 100, 0.5)
    axpb._launch_kernel((3, 2), (32, 1, 1), buf, 0, None)
    last = standin.last_launch()
    assert (last.grid, last.block, last.shared, last.params) == ((3, 2, 1), (32, 1, 1), 0, buf)
    axpb._set_block_shape(64, 2, 1)
    axpb._set_shared_size(128)
    axpb._param_setv(0, struct.pack("PP", 0x1000, 0x2000))
    axpb._param_setf(16, 2.0)
    axpb._param_seti(20, 100)
    axpb._param_setf(24, 0.5)
    axpb._param_set_size(28)
    axpb._launch_grid(4, 3)
    last = standin.last_launch()
    assert (last.grid, last.block, last.shared) == ((4, 3, 1), (64, 2, 1), 128)
    assert last.params == buf
    s = cuda.Stream()
    axpb._launch_grid_async(2, 1, s)
    assert standin.last_launch().stream == s.handle and standin.last_launch().grid == (2, 1, 1)
    axpb._launch()
    assert standin.last_launch().grid == (1, 1, 1)
    # the size zero-fills growth and shortens the buffer
    axpb._param_set_size(32)
    axpb._param_set_size(28)
    axpb._launch_grid(1, 1)
    assert standin.last_launch().params == buf


@pytest.mark.driver
def test_legacy_launch_refuses_bad_input(axpb):
    with pytest.raises(ValueError, match="the grid must be at least 1 x 1 blocks, got 0 x 1"):
        axpb._launch_grid(0, 1)
    with pytest.raises(ValueError, match="block must have 1 to 3 dimensions, got 4"):
        axpb._launch_kernel((1,), (1, 1, 1, 1), b"", 0, None)
    with pytest.raises(ValueError, match="block"):
        axpb._set_block_shape(0, 1, 1)
    with pytest.raises(TypeError, match="_set_shared_size\\(\\): bytes must be"):
        axpb._set_shared_size(1.5)
    with pytest.raises(TypeError, match="a bytes-like object is required"):
        axpb._param_setv(0, 5)
    with pytest.raises(TypeError, match="_param_seti\\(\\): offset must be"):
        axpb._param_seti("0", 1)
    with pytest.raises(TypeError, match="a bytes-like object is required"):
        axpb._launch_kernel((1,), (32,), 5, 0, None)
    with pytest.raises(ValueError, match="kernel 'axpb': block x dimension 4096 exceeds"):
        axpb._launch_kernel((1,), (4096,), b"\0" * 28, 0, None)


@pytest.mark.standin
def test_legacy_launch_with_too_short_a_buffer_is_the_drivers_error(axpb, standin):
    axpb._param_set_size(8)
    with pytest.raises(cuda.Error, match="cuLaunchKernel(Ex)? failed: CUDA_ERROR_INVALID_VALUE"):
        axpb._launch_grid(1, 1)


def _fma(a, x, b):
    """a*x+b as the kernel may compute it: one fused multiply-add (the
    exact product and sum, rounded once; float64 holds both exactly)."""
    return (np.float64(a) * x.astype(np.float64) + np.float64(b)).astype(np.float32)


@pytest.mark.gpu
def test_legacy_launch_computes(axpb, rng):
    n = 1000
    x = rng.standard_normal(n).astype(np.float32)
    dx = cuda.to_device(x)
    out = cuda.mem_alloc(x.nbytes)
    axpb._launch_kernel((4,), (256,), _params(out, dx, 3.0, n, -1.5), 0, None)
    got = cuda.from_device(out, n, np.float32)
    # the kernel's a*x+b may be one fused multiply-add: the exact product
    # and sum, rounded once (float64 holds both exactly)
    want = (np.float64(3.0) * x.astype(np.float64) - 1.5).astype(np.float32)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)
    axpb._set_block_shape(128, 1, 1)
    axpb._param_setv(0, struct.pack("PP", int(out), int(dx)))
    axpb._param_setf(16, -2.0)
    axpb._param_seti(20, n)
    axpb._param_setf(24, 0.25)
    axpb._param_set_size(28)
    axpb._launch_grid(4, 2)  # 1024 threads
    np.testing.assert_allclose(
        cuda.from_device(out, n, np.float32), _fma(-2.0, x, 0.25), rtol=1e-6, atol=1e-7
    )
    s = cuda.Stream()
    axpb._param_setf(16, 0.5)
    axpb._launch_grid_async(8, 1, s)
    s.synchronize()
    np.testing.assert_allclose(
        cuda.from_device(out, n, np.float32), _fma(0.5, x, 0.25), rtol=1e-6, atol=1e-7
    )


@pytest.mark.gpu
def test_managed_attach_then_kernel_and_host_read(axpb, rng):
    n = 777
    x = cuda.managed_empty(n, np.float32)
    out = cuda.managed_zeros(n, np.float32)
    xv = rng.standard_normal(n).astype(np.float32)
    x[:] = xv
    s = cuda.Stream()
    x.base.attach(cuda.mem_attach_flags.SINGLE, s)
    out.base.attach(cuda.mem_attach_flags.SINGLE, s)
    axpb(
        out.base,
        x.base,
        np.float32(2.0),
        np.uint32(n),
        np.float32(1.0),
        block=(128, 1, 1),
        grid=(7, 1),
        stream=s,
    )
    s.synchronize()
    want = _fma(2.0, xv, 1.0)
    np.testing.assert_allclose(out, want, rtol=1e-6, atol=1e-7)
    view = np.frombuffer(out.base.as_buffer(out.nbytes), np.float32)
    np.testing.assert_allclose(view, want, rtol=1e-6, atol=1e-7)
    out.base.attach(cuda.mem_attach_flags.HOST)
    out[:5] = 0
    assert not view[:5].any()


@pytest.mark.standin
def test_managed_memory_host_views_go_back_with_the_object(ctx, standin):
    """A managed allocation that host code may read (managed_empty's .base,
    as_buffer) keeps its memory until the object dies, then frees it: none
    leaks (the first version kept it forever)."""
    import gc

    base = standin.live()["managed"]
    a = cuda.managed_empty(64, np.float32)
    m = cuda.mem_alloc_managed(64)
    view = m.as_buffer(64)
    assert standin.live()["managed"] == base + 2
    a.base.free()
    m.free()
    assert standin.live()["managed"] == base + 2  # views still read it
    del a, view
    gc.collect()
    assert standin.live()["managed"] == base + 1  # m lives: its memory waits
    del m
    gc.collect()
    assert standin.live()["managed"] == base
    b = cuda.managed_empty(16, np.float64)
    del b  # no free(): gone with the array
    gc.collect()
    assert standin.live()["managed"] == base
