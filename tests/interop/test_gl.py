"""pygpu.gl: OpenGL interop.  Import with no GL library, the names and
enums, argument checking and error messages (no driver needed); the
resources' lifetimes on the driver stand-in (register, map, views, unmap,
unregister, failures); the headless EGL helper wherever EGL makes a context
(Mesa's llvmpipe will do); and (gpu) a kernel writing a GL buffer and a GL
texture registered with CUDA, read back through OpenGL, every element
checked."""

import os
import subprocess
import sys

import numpy as np
import pytest

import pygpu.driver as cuda
import pygpu.gl as cudagl
from pygpu.gl import egl

GL_TEXTURE_2D = 0x0DE1


# ---- no driver, no GL ----


def test_import_loads_no_gl_library():
    code = (
        "import pygpu.gl, pygpu.gl.egl, pygpu.driver\n"
        "maps = open('/proc/self/maps').read()\n"
        "bad = [l for l in maps.splitlines() if any(n in l for n in "
        "('libEGL', 'libGL', 'libOpenGL', 'libcuda'))]\n"
        "print('LOADED', bad)\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "LOADED []" in r.stdout


def test_names_and_enums():
    for name in (
        "init",
        "make_context",
        "BufferObject",
        "BufferObjectMapping",
        "RegisteredBuffer",
        "RegisteredImage",
        "RegisteredMapping",
        "graphics_map_flags",
    ):
        assert hasattr(cudagl, name), name
    assert cudagl.RegisteredBuffer is cuda.RegisteredBuffer
    assert issubclass(cudagl.RegisteredImage, cuda.RegisteredObject)
    assert cuda.have_gl_ext() is True
    f = cuda.graphics_register_flags
    assert [(m.name, int(m)) for m in f] == [
        ("NONE", 0),
        ("READ_ONLY", 1),
        ("WRITE_DISCARD", 2),
        ("SURFACE_LDST", 4),
        ("TEXTURE_GATHER", 8),
    ]
    assert str(f.SURFACE_LDST) == "SURFACE_LDST"
    g = cudagl.graphics_map_flags
    assert [(m.name, int(m)) for m in g] == [("NONE", 0), ("READ_ONLY", 1), ("WRITE_DISCARD", 2)]
    assert str(g.WRITE_DISCARD) == "WRITE_DISCARD"


@pytest.mark.parametrize(
    "make,exc,match",
    [
        (lambda: cuda.RegisteredBuffer("1"), TypeError, "RegisteredBuffer\\(\\): gl_handle"),
        (
            lambda: cuda.RegisteredBuffer(-1),
            OverflowError,
            "RegisteredBuffer\\(\\): gl_handle=-1 is out of range",
        ),
        (
            lambda: cuda.RegisteredBuffer(0),
            ValueError,
            "RegisteredBuffer\\(\\): gl_handle must be a GL object name \\(from glGenBuffers/"
            "glGenTextures\\), not 0",
        ),
        (
            lambda: cuda.RegisteredBuffer(3, 16),
            ValueError,
            "RegisteredBuffer\\(\\): flags must combine graphics_register_flags .* got 16",
        ),
        (lambda: cuda.RegisteredImage(3), TypeError, "missing required argument 'target'"),
        (lambda: cuda.RegisteredImage(3, "tex"), TypeError, "RegisteredImage\\(\\): target"),
        (
            lambda: cuda.RegisteredImage(3, GL_TEXTURE_2D, flags=2.5),
            TypeError,
            "RegisteredImage\\(\\): flags",
        ),
        (lambda: cuda.RegisteredObject(), TypeError, "cannot create"),
        (lambda: cuda.RegisteredMapping(), TypeError, "cannot create"),
        (
            lambda: cudagl.make_context(0),
            TypeError,
            "make_context\\(\\): dev must be a pygpu.driver.Device, not int",
        ),
        (
            lambda: cudagl.BufferObjectMapping(None, object()),
            TypeError,
            "BufferObjectMapping is made by BufferObject.map\\(\\)",
        ),
    ],
)
def test_argument_errors(make, exc, match):
    with pytest.raises(exc, match=match):
        make()


def test_missing_gl_libraries_are_named(monkeypatch):
    monkeypatch.setattr(egl, "_libs", {})
    monkeypatch.setattr(egl, "_EGL_SONAMES", ("libEGL_pygpu_absent.so.1",))
    with pytest.raises(
        egl.GLUnavailableError,
        match=r"pygpu.gl: no EGL library: tried libEGL_pygpu_absent.so.1 "
        r"\(.*\); install libEGL \(Debian/Ubuntu: libegl1\)",
    ):
        egl.HeadlessContext()
    monkeypatch.setattr(egl, "_libs", {})
    monkeypatch.setattr(egl, "_GL_SONAMES", ("libOpenGL_pygpu_absent.so.0",))
    with pytest.raises(
        egl.GLUnavailableError,
        match=r"no OpenGL library: tried libOpenGL_pygpu_absent.so.0 .*"
        r"install libOpenGL or libGL \(Debian/Ubuntu: libopengl0, libgl1\)",
    ):
        egl.load_gl()
    assert issubclass(egl.GLUnavailableError, RuntimeError)


def _headless_or_skip():
    try:
        return egl.HeadlessContext()
    except egl.GLUnavailableError as e:
        pytest.skip("no GL library here: %s" % e)
    except egl.EGLError as e:
        pytest.skip("EGL could not make a context here: %s" % e)


def test_headless_gl_helper_round_trips(rng):
    """The GL side of the GPU test, on whatever EGL this machine has."""
    with _headless_or_skip() as ctx:
        gl = ctx.gl
        assert ctx.version
        x = rng.standard_normal(1000).astype(np.float32)
        buf = gl.gen_buffer(x.nbytes, x)
        y = np.zeros_like(x)
        gl.read_buffer(buf, y)
        np.testing.assert_array_equal(y, x)
        gl.delete_buffer(buf)
        t = rng.standard_normal((7, 13)).astype(np.float32)
        tex = gl.gen_texture_2d(13, 7, data=t)
        u = np.zeros_like(t)
        gl.read_texture_2d(tex, u)
        np.testing.assert_array_equal(u, t)
        gl.delete_texture(tex)
        with pytest.raises(
            ValueError, match="gen_buffer\\(\\): data has 4000 bytes, fewer than 8000"
        ):
            gl.gen_buffer(8000, x)
    assert ctx.display is None
    ctx.close()  # idempotent


# ---- the stand-in: a GL buffer name n is n*256 bytes, a texture n x 4 floats ----


@pytest.mark.standin
def test_buffer_lifecycle_on_the_standin(standin, ctx, rng):
    reg0 = standin.calls("cuGraphicsGLRegisterBuffer")
    unreg0 = standin.calls("cuGraphicsUnregisterResource")
    rb = cudagl.RegisteredBuffer(4, cuda.graphics_register_flags.WRITE_DISCARD)
    assert standin.calls("cuGraphicsGLRegisterBuffer") == reg0 + 1
    assert rb.gl_handle() == 4 and rb.flags == 2 and rb.target == 0 and not rb.mapped
    assert rb.handle != 0
    m = rb.map()
    assert isinstance(m, cudagl.RegisteredMapping) and m.mapped and rb.mapped
    assert m.resource is rb
    ptr, size = m.device_ptr_and_size()
    assert size == 1024 and ptr != 0
    with pytest.raises(
        cuda.LogicError,
        match="RegisteredObject.map\\(\\): the resource is "
        "mapped already; unmap\\(\\) its mapping first",
    ):
        rb.map()
    # the address as a kernel's pointer argument, and as a DeviceAllocation
    mod = cuda.module_from_buffer(
        _ptx('extern "C" __global__ void k(float *p, int n) { p[n] = 1; }')
    )
    k = mod.get_function("k")
    k(ptr, np.int32(3), block=(1, 1, 1), grid=(1, 1))
    assert standin.last_launch().params[:8] == int(ptr).to_bytes(8, "little")
    alloc = m.device_allocation()
    assert int(alloc) == ptr and alloc.size == size
    x = rng.standard_normal(256).astype(np.float32)
    cuda.memcpy_htod(alloc, x)
    y = np.empty_like(x)
    cuda.memcpy_dtoh(y, ptr)
    np.testing.assert_array_equal(y, x)
    with pytest.raises(
        cuda.Error,
        match="cuGraphicsSubResourceGetMappedArray failed: "
        "CUDA_ERROR_NOT_MAPPED_AS_ARRAY.*a buffer is mapped as "
        "a pointer: use device_ptr_and_size\\(\\)",
    ):
        m.array(0, 0)
    m.unmap()
    assert not m.mapped and not rb.mapped
    with pytest.raises(cuda.LogicError, match="the DeviceAllocation was freed"):
        cuda.memcpy_dtoh(y, alloc)
    with pytest.raises(
        cuda.LogicError,
        match="RegisteredMapping.unmap\\(\\): the resource is not mapped \\(unmapped already\\)",
    ):
        m.unmap()
    with pytest.raises(
        cuda.LogicError,
        match="RegisteredMapping.device_ptr_and_size\\(\\): the resource was unmapped",
    ):
        m.device_ptr_and_size()
    # a with block unmaps; so does a mapping's death
    unmaps = standin.calls("cuGraphicsUnmapResources")
    with rb.map() as m2:
        assert m2.device_ptr_and_size()[1] == 1024
    assert not m2.mapped and standin.calls("cuGraphicsUnmapResources") == unmaps + 1
    rb.map()
    assert standin.calls("cuGraphicsUnmapResources") == unmaps + 2 and not rb.mapped
    # unregister while mapped unmaps first; a second unregister is an error
    m3 = rb.map()
    rb.unregister()
    assert not m3.mapped and standin.calls("cuGraphicsUnmapResources") == unmaps + 3
    assert standin.calls("cuGraphicsUnregisterResource") == unreg0 + 1
    with pytest.raises(
        cuda.LogicError,
        match="RegisteredObject.unregister\\(\\): the resource was unregistered already",
    ):
        rb.unregister()
    with pytest.raises(
        cuda.LogicError, match="RegisteredObject.map\\(\\): the resource was unregistered"
    ):
        rb.map()
    # death unregisters
    rb2 = cudagl.RegisteredBuffer(2)
    del rb2
    assert standin.calls("cuGraphicsUnregisterResource") == unreg0 + 2


def _ptx(src):
    from pygpu import compiler

    return bytes(compiler.compile(src, target="ptx", arch="compute_90", cache_dir=False))


@pytest.mark.standin
def test_image_arrays_on_the_standin(standin, ctx, rng):
    unreg0 = standin.calls("cuGraphicsUnregisterResource")
    ri = cudagl.RegisteredImage(8, GL_TEXTURE_2D, cuda.graphics_register_flags.SURFACE_LDST)
    assert ri.target == GL_TEXTURE_2D and ri.flags == 4
    m = ri.map()
    arr = m.array(0, 0)
    assert isinstance(arr, cuda.Array)
    d = arr.get_descriptor()
    assert (d.width, d.height, d.num_channels) == (8, 4, 1)
    assert d.format == cuda.array_format.FLOAT
    h = rng.standard_normal((4, 8)).astype(np.float32)
    c = cuda.Memcpy2D()
    c.set_src_host(h)
    c.set_dst_array(arr)
    c.width_in_bytes = c.src_pitch = 32
    c.height = 4
    c()
    back = np.zeros_like(h)
    c = cuda.Memcpy2D()
    c.set_src_array(arr)
    c.set_dst_host(back)
    c.width_in_bytes = c.dst_pitch = 32
    c.height = 4
    c()
    np.testing.assert_array_equal(back, h)
    with pytest.raises(
        cuda.Error,
        match="cuGraphicsResourceGetMappedPointer failed: "
        "CUDA_ERROR_NOT_MAPPED_AS_POINTER.*an image is mapped "
        "as an array: use array\\(\\)",
    ):
        m.device_ptr_and_size()
    with pytest.raises(OverflowError, match="RegisteredMapping.array\\(\\): index=-1"):
        m.array(-1, 0)
    # the Array is the resource's: unmapping marks it freed, never destroys it
    destroys = standin.calls("cuArrayDestroy")
    m.unmap()
    assert arr.freed
    with pytest.raises(cuda.LogicError, match="the Array was freed"):
        arr.get_descriptor()
    del arr, m
    assert standin.calls("cuArrayDestroy") == destroys
    del ri
    assert standin.calls("cuGraphicsUnregisterResource") == unreg0 + 1


@pytest.mark.standin
def test_failures_and_subclasses_on_the_standin(standin, ctx):
    with pytest.raises(
        cuda.Error,
        match="cuGraphicsGLRegisterBuffer failed: "
        "CUDA_ERROR_INVALID_VALUE.*an OpenGL context must be "
        "current in this thread",
    ):
        cudagl.RegisteredBuffer(5000)  # the stand-in's "not a GL object"
    rb = cudagl.RegisteredBuffer(1)
    standin.fail("cuGraphicsMapResources", 1, 219)  # CUDA_ERROR_INVALID_GRAPHICS_CONTEXT
    with pytest.raises(
        cuda.Error, match="cuGraphicsMapResources failed: CUDA_ERROR_INVALID_GRAPHICS_CONTEXT"
    ):
        rb.map()
    assert not rb.mapped
    standin.fail("cuGraphicsUnmapResources", 1, 999)
    m = rb.map()
    with pytest.raises(cuda.Error, match="cuGraphicsUnmapResources failed"):
        m.unmap()
    assert not m.mapped  # given up: no second unmap at death
    standin.cancel()

    class MyBuffer(cudagl.RegisteredBuffer):
        def __init__(self, handle):
            self.note = "mine %d" % handle

    b = MyBuffer(3)
    assert b.note == "mine 3" and b.gl_handle() == 3
    with b.map() as mp:
        assert mp.device_ptr_and_size()[1] == 768
    unreg = standin.calls("cuGraphicsUnregisterResource")
    del b, mp
    assert standin.calls("cuGraphicsUnregisterResource") == unreg + 1


@pytest.mark.standin
def test_pycuda_deprecated_names_on_the_standin(standin, ctx):
    with pytest.warns(DeprecationWarning, match="gl_init\\(\\) has been deprecated"):
        cudagl.init()
    with pytest.warns(DeprecationWarning, match="buffer_object has been deprecated"):
        bo = cudagl.BufferObject(2)
    assert bo.handle() == 2
    with pytest.warns(DeprecationWarning, match="map_buffer_object has been deprecated"):
        bm = bo.map()
    assert bm.size() == 512 and bm.device_ptr() != 0
    bm.unmap()
    with pytest.raises(cuda.LogicError, match="unmapped already"):
        bm.unmap()
    bo.unregister()
    with pytest.raises(cuda.LogicError, match="unregistered already"):
        bo.unregister()
    c = cudagl.make_context(cuda.Device(0))
    try:
        assert cuda.Context.get_current() == c
    finally:
        cuda.Context.pop()
        c.detach()


@pytest.mark.standin
def test_gl_autoinit_on_the_standin(standin):
    """pygpu.gl.autoinit, as pycuda.gl.autoinit: a new context on the default
    device, current after import, popped at exit (the process exits 0 and
    prints nothing else)."""
    code = (
        "import pygpu.driver as cuda, pygpu.gl.autoinit as a\n"
        "assert cuda.Context.get_current() == a.context\n"
        "assert a.device == cuda.Device(0) and a.context.get_device() == a.device\n"
        "print('OK')\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert r.stdout == "OK\n" and r.stderr == ""


# ---- gpu: a kernel writes GL objects, OpenGL reads them back ----


def _gl_context_for_gpu(request):
    """A headless EGL context on the GPU, or a skip.  A missing GL library is
    always a skip (the GPU machine needs the .gl packages unpacked); EGL
    failing to make a context is a skip only without PYGPU_REQUIRE_GPU=1
    (or --require-gpu)."""
    from pygpu.testing.plugin import require_gpu

    try:
        return egl.HeadlessContext(device=int(os.environ.get("PYGPU_DEVICE", "0")))
    except egl.GLUnavailableError as e:
        pytest.skip(
            "GL library missing (skipped even with PYGPU_REQUIRE_GPU=1): %s; unpack "
            "libegl1 libglvnd0 libopengl0 libgl1 (the device README's .gl recipe)" % e
        )
    except egl.EGLError as e:
        if require_gpu(request.config):
            raise
        pytest.skip(
            "EGL could not make a context on the GPU: %s (set "
            "__EGL_VENDOR_LIBRARY_FILENAMES to NVIDIA's 10_nvidia.json)" % e
        )


WRITE_SRC = r"""
extern "C" __global__ void scale_into(float *dst, const float *src, float a, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) dst[i] = a * src[i] + 1.0f;
}
extern "C" __global__ void surf_write(cudaSurfaceObject_t s, const float *src, int w, int h)
{
    int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y;
    if (x < w && y < h) surf2Dwrite(2.0f * src[y * w + x] - 3.0f, s, x * 4, y);
}
"""


@pytest.mark.gpu
def test_kernel_writes_gl_buffer_and_texture(request, ctx, rng):
    from pygpu.compiler import SourceModule
    import pygpu.gpuarray as gpuarray

    with _gl_context_for_gpu(request) as glctx:
        gl = glctx.gl
        mod = SourceModule(WRITE_SRC, no_extern_c=True)
        scale_into = mod.get_function("scale_into")

        # a buffer: GL's own data first, then a kernel overwrites all of it
        n = 100003
        initial = rng.standard_normal(n).astype(np.float32)
        buf = gl.gen_buffer(initial.nbytes, initial)
        src = rng.standard_normal(n).astype(np.float32)
        src_gpu = gpuarray.to_gpu(src)
        rb = cudagl.RegisteredBuffer(buf, cudagl.graphics_map_flags.WRITE_DISCARD)
        m = rb.map()
        ptr, size = m.device_ptr_and_size()
        assert size == initial.nbytes
        scale_into(
            ptr,
            src_gpu,
            np.float32(2.0),
            np.int32(n),
            block=(256, 1, 1),
            grid=((n + 255) // 256, 1),
        )
        seen = np.empty(n, dtype=np.float32)
        cuda.memcpy_dtoh(seen, m.device_allocation())
        # exact products, one rounding: the same with or without a fused multiply-add
        want = np.float32(2) * src + np.float32(1)
        np.testing.assert_array_equal(seen, want)
        m.unmap()
        got = np.zeros(n, dtype=np.float32)
        gl.read_buffer(buf, got)
        np.testing.assert_array_equal(got, want)
        rb.unregister()
        gl.delete_buffer(buf)

        # a texture (GL_R32F): a kernel writes a device buffer, copied into
        # the mapped array; OpenGL reads the texels back
        w, h = 37, 23
        tex = gl.gen_texture_2d(w, h, data=rng.standard_normal((h, w)).astype(np.float32))
        ri = cudagl.RegisteredImage(tex, GL_TEXTURE_2D, cuda.graphics_register_flags.NONE)
        src2 = rng.standard_normal(w * h).astype(np.float32)
        src2_gpu = gpuarray.to_gpu(src2)
        dst_gpu = gpuarray.empty(w * h, np.float32)
        scale_into(
            dst_gpu,
            src2_gpu,
            np.float32(-0.5),
            np.int32(w * h),
            block=(256, 1, 1),
            grid=((w * h + 255) // 256, 1),
        )
        with ri.map() as mi:
            arr = mi.array(0, 0)
            d = arr.get_descriptor()
            assert (d.width, d.height, d.num_channels) == (w, h, 1)
            c = cuda.Memcpy2D()
            c.set_src_device(dst_gpu.gpudata)
            c.set_dst_array(arr)
            c.width_in_bytes = c.src_pitch = w * 4
            c.height = h
            c()
            cuda.Context.synchronize()
        assert arr.freed
        texels = np.zeros((h, w), dtype=np.float32)
        gl.read_texture_2d(tex, texels)
        np.testing.assert_array_equal(
            texels, (np.float32(-0.5) * src2 + np.float32(1)).reshape(h, w)
        )
        del ri
        gl.delete_texture(tex)


@pytest.mark.gpu
def test_kernel_writes_gl_texture_through_a_surface(request, ctx, rng):
    from pygpu.compiler import SourceModule
    import pygpu.gpuarray as gpuarray

    with _gl_context_for_gpu(request) as glctx:
        gl = glctx.gl
        surf_write = SourceModule(WRITE_SRC, no_extern_c=True).get_function("surf_write")
        w, h = 64, 19
        tex = gl.gen_texture_2d(w, h, data=rng.standard_normal((h, w)).astype(np.float32))
        ri = cudagl.RegisteredImage(tex, GL_TEXTURE_2D, cuda.graphics_register_flags.SURFACE_LDST)
        src = rng.standard_normal(w * h).astype(np.float32)
        src_gpu = gpuarray.to_gpu(src)
        with ri.map() as mi:
            arr = mi.array(0, 0)
            d3 = arr.get_descriptor_3d()
            if not d3.flags & int(cuda.array3d_flags.SURFACE_LDST):
                pytest.skip(
                    "the driver's descriptor of the mapped array does not say "
                    "SURFACE_LDST (flags %#x)" % d3.flags
                )
            s = cuda.SurfaceObject(arr)
            surf_write(s, src_gpu, np.int32(w), np.int32(h), block=(64, 1, 1), grid=(1, h))
            cuda.Context.synchronize()
            del s
        texels = np.zeros((h, w), dtype=np.float32)
        gl.read_texture_2d(tex, texels)
        np.testing.assert_array_equal(texels, (np.float32(2) * src - np.float32(3)).reshape(h, w))
        ri.unregister()
        gl.delete_texture(tex)
