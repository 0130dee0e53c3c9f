"""Modules and launches: PyCUDA programs, argument checking, launch features."""

import subprocess
import sys
import textwrap

import numpy as np
import pytest

import pygpu.driver as cuda
from pygpu.compiler import SourceModule, compile

pytestmark = pytest.mark.gpu


def test_doublify_inout(ctx, rng):
    mod = SourceModule("""
    __global__ void doublify(float *a)
    {
        int idx = threadIdx.x + threadIdx.y * 4;
        a[idx] *= 2;
    }
    """)
    func = mod.get_function("doublify")
    a = rng.standard_normal((4, 4)).astype(np.float32)
    expect = a * 2
    func(cuda.InOut(a), block=(4, 4, 1))
    np.testing.assert_array_equal(a, expect)


def test_pycuda_tutorial_explicit_copies(ctx, rng):
    mod = SourceModule("""
    __global__ void doublify(float *a)
    {
        int idx = threadIdx.x + threadIdx.y * 4;
        a[idx] *= 2;
    }
    """)
    a = rng.standard_normal((4, 4)).astype(np.float32)
    a_gpu = cuda.mem_alloc(a.nbytes)
    cuda.memcpy_htod(a_gpu, a)
    mod.get_function("doublify")(a_gpu, block=(4, 4, 1), grid=(1, 1))
    a_doubled = np.empty_like(a)
    cuda.memcpy_dtoh(a_doubled, a_gpu)
    np.testing.assert_array_equal(a_doubled, 2 * a)


VADD = """
__global__ void vadd(float *z, const float *x, const float *y, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) z[i] = x[i] + y[i];
}
"""


def test_vector_add_in_out(ctx, rng):
    f = SourceModule(VADD).get_function("vadd")
    n = 1_000_003
    x = rng.standard_normal(n).astype(np.float32)
    y = rng.standard_normal(n).astype(np.float32)
    z = np.full(n, np.nan, np.float32)
    f(cuda.Out(z), cuda.In(x), cuda.In(y), n, block=(256, 1, 1), grid=((n + 255) // 256, 1))
    np.testing.assert_array_equal(z, x + y)
    # on a stream
    s = cuda.Stream()
    z2 = np.full(n, np.nan, np.float32)
    f(
        cuda.Out(z2),
        cuda.In(x),
        cuda.In(y),
        np.int32(n),
        block=(128, 1, 1),
        grid=((n + 127) // 128, 1),
        stream=s,
    )
    np.testing.assert_array_equal(z2, x + y)


def test_prepared_and_configured(ctx, rng):
    f = SourceModule(VADD).get_function("vadd")
    n = 50_000
    x = rng.standard_normal(n).astype(np.float32)
    y = rng.standard_normal(n).astype(np.float32)
    dx, dy, dz = cuda.to_device(x), cuda.to_device(y), cuda.mem_alloc(x.nbytes)
    assert f.prepare("PPPi") is f
    grid, block = ((n + 255) // 256, 1), (256, 1, 1)
    f.prepared_call(grid, block, dz, dx, dy, n)
    np.testing.assert_array_equal(cuda.from_device_like(dz, x), x + y)
    cuda.memset_d32(dz, 0, n)
    s = cuda.Stream()
    f.prepared_async_call(grid, block, s, dz, dy, dx, n)
    s.synchronize()
    np.testing.assert_array_equal(cuda.from_device_like(dz, x), y + x)
    t = f.prepared_timed_call(grid, block, dz, dx, dx, n)
    assert t > 0 and t() == float(t)  # PyCUDA's form: a callable giving seconds
    np.testing.assert_array_equal(cuda.from_device_like(dz, x), 2 * x)
    launch = f.configure(grid, block, stream=s)
    assert "vadd" in repr(launch)
    launch(dz, dy, dy, n)
    s.synchronize()
    np.testing.assert_array_equal(cuda.from_device_like(dz, x), 2 * y)
    with pytest.raises(TypeError, match="takes 4 arguments but 3 were given"):
        launch(dz, dy, dy)
    with pytest.raises(TypeError, match="parameter 3 is 4 bytes .* 'd' is 8"):
        f.prepare("PPPd")
    with pytest.raises(TypeError, match="takes 4 arguments but 3 types"):
        f.prepare([np.intp, np.intp, np.int32])
    f.prepare([np.intp, np.intp, np.intp, np.int32])


def test_prepared_float_from_int(ctx):
    mod = SourceModule("__global__ void put(float *o, float v) { *o = v; }")
    f = mod.get_function("put").prepare("Pf")
    d = cuda.mem_alloc(4)
    f.prepared_call((1, 1), (1, 1, 1), d, 3)  # an int for a float parameter
    assert cuda.from_device(d, (1,), np.float32)[0] == 3.0


def test_constant_memory(ctx, rng):
    mod = SourceModule("""
    __constant__ float coeffs[16];
    __global__ void apply(float *out, const float *x, int n)
    {
        int i = blockIdx.x * blockDim.x + threadIdx.x;
        if (i < n) out[i] = coeffs[i % 16] * x[i];
    }
    """)
    c = rng.standard_normal(16).astype(np.float32)
    mod.set_constant("coeffs", c)
    np.testing.assert_array_equal(mod.get_constant("coeffs", np.float32), c)
    ptr, nbytes = mod.get_global("coeffs")
    assert nbytes == 64
    n = 1000
    x = rng.standard_normal(n).astype(np.float32)
    out = np.empty_like(x)
    mod.get_function("apply")(cuda.Out(out), cuda.In(x), n, block=(128, 1, 1), grid=(8, 1))
    np.testing.assert_array_equal(out, np.tile(c, n // 16 + 1)[:n] * x)
    with pytest.raises(ValueError, match="64 bytes"):
        mod.set_constant("coeffs", np.zeros(3, np.float32))
    with pytest.raises(cuda.LogicError, match="no global named"):
        mod.get_global("nope")


def test_templates(ctx, rng):
    mod = SourceModule(
        """
    template <typename T>
    __global__ void scale(T *x, T a, int n)
    {
        int i = blockIdx.x * blockDim.x + threadIdx.x;
        if (i < n) x[i] *= a;
    }
    """,
        no_extern_c=True,
        name_expressions=["scale<float>", "scale<double>"],
    )
    for dtype, expr in ((np.float32, "scale<float>"), (np.float64, "scale<double>")):
        x = rng.standard_normal(777).astype(dtype)
        expect = x * dtype(1.75)
        mod.get_function(expr)(cuda.InOut(x), 1.75, 777, block=(128, 1, 1), grid=(7, 1))
        np.testing.assert_array_equal(x, expect)
    with pytest.raises(cuda.LogicError, match="name_expressions"):
        mod.get_function("scale<int>")


def test_struct_arguments(ctx, rng):
    mod = SourceModule("""
    struct Params { double scale; int offset; float bias; };
    __global__ void affine(float *out, const float *x, Params p, int n)
    {
        int i = blockIdx.x * blockDim.x + threadIdx.x;
        if (i < n) out[i] = (float)(p.scale * x[i]) + p.offset + p.bias;
    }
    """)
    f = mod.get_function("affine")
    assert f.param_sizes == (8, 8, 16, 4)
    dt = np.dtype([("scale", np.float64), ("offset", np.int32), ("bias", np.float32)], align=True)
    assert dt.itemsize == 16
    p = np.zeros((), dt)
    p["scale"], p["offset"], p["bias"] = 1.5, 3, 0.25
    n = 999
    x = rng.standard_normal(n).astype(np.float32)
    out = np.empty_like(x)
    f(cuda.Out(out), cuda.In(x), p[()], n, block=(256, 1, 1), grid=(4, 1))
    expect = (1.5 * x.astype(np.float64)).astype(np.float32) + np.float32(3) + np.float32(0.25)
    np.testing.assert_allclose(out, expect, rtol=1e-6)
    raw = p.tobytes()
    out2 = np.empty_like(x)
    f(cuda.Out(out2), cuda.In(x), raw, n, block=(256, 1, 1), grid=(4, 1))
    np.testing.assert_array_equal(out2, out)
    with pytest.raises(TypeError, match="parameter 2 is 16 bytes but got 12 bytes"):
        f(cuda.Out(out2), cuda.In(x), raw[:12], n, block=(256, 1, 1))


def test_cupy_and_torch_arrays_as_pointers(ctx, rng):
    f = SourceModule(VADD).get_function("vadd")
    n = 4096
    x = rng.standard_normal(n).astype(np.float32)
    y = rng.standard_normal(n).astype(np.float32)
    ran = 0
    try:
        import cupy as cp
    except ImportError:
        cp = None
    if cp is not None:
        cx, cy, cz = cp.asarray(x), cp.asarray(y), cp.empty(n, cp.float32)
        f(cz, cx, cy, n, block=(256, 1, 1), grid=(16, 1))
        cuda.Context.synchronize()
        np.testing.assert_array_equal(cp.asnumpy(cz), x + y)
        ran += 1
    try:
        import torch
    except ImportError:
        torch = None
    if torch is not None and torch.cuda.is_available():
        tx = torch.from_numpy(x).cuda()
        ty = torch.from_numpy(y).cuda()
        tz = torch.empty(n, dtype=torch.float32, device="cuda")
        torch.cuda.synchronize()
        f(tz, tx, ty, n, block=(256, 1, 1), grid=(16, 1))
        cuda.Context.synchronize()
        np.testing.assert_array_equal(tz.cpu().numpy(), x + y)

        # DLPack too: a torch tensor exposes __dlpack__
        class DL:
            def __init__(self, t):
                self.t = t

            def __dlpack__(self, **kw):
                return self.t.__dlpack__(**kw)

        tz.zero_()
        torch.cuda.synchronize()
        f(DL(tz), DL(tx), DL(ty), n, block=(256, 1, 1), grid=(16, 1))
        cuda.Context.synchronize()
        np.testing.assert_array_equal(tz.cpu().numpy(), x + y)
        ran += 1
    if ran == 0:
        pytest.skip("neither CuPy nor PyTorch is installed")


@pytest.mark.driver
def test_argument_errors(ctx):
    mod = SourceModule("""
    __global__ void k(float *p, int n, float a) { if (n < 0) p[0] = a; }
    __global__ void k8(double d, long long q, short s, char c) { }
    """)
    k = mod.get_function("k")
    d = cuda.mem_alloc(64)
    b = (32, 1, 1)
    with pytest.raises(TypeError, match="kernel 'k' takes 3 arguments but 2 were given"):
        k(d, 1, block=b)
    with pytest.raises(TypeError, match="parameter 1 is 4 bytes but got a NumPy float64"):
        k(d, np.float64(1), 1.0, block=b)
    with pytest.raises(OverflowError, match="parameter 1 is 4 bytes; 8589934592 does not fit"):
        k(d, 2**33, 1.0, block=b)
    with pytest.raises(TypeError, match="parameter 0 got a NumPy array"):
        k(np.zeros(4, np.float32), 1, 1.0, block=b)
    with pytest.raises(TypeError, match="parameter 1 is 4 bytes, not a pointer"):
        k(d, d, 1.0, block=b)
    with pytest.raises(TypeError, match=r"parameter 2 \(4 bytes\) cannot take a str"):
        k(d, 1, "x", block=b)
    with pytest.raises(TypeError, match="launching needs block"):
        k(d, 1, 1.0)
    with pytest.raises(TypeError, match="unexpected keyword argument 'blok'"):
        k(d, 1, 1.0, blok=b)
    k(d, 1, 1.0, block=b)  # int/float at the parameters' widths
    k(d, np.int32(1), np.float32(1), block=b)
    k(None, 1, 2.0, block=b)  # None is NULL
    k(int(d), 0, 0.5, block=b)  # an int address
    k8 = mod.get_function("k8")
    assert k8.param_sizes == (8, 8, 2, 1)
    k8(1.0, -(2**63), -32768, 255, block=b)
    with pytest.raises(OverflowError, match="parameter 2 is 2 bytes"):
        k8(1.0, 1, 70000, 1, block=b)
    with pytest.raises(OverflowError, match="parameter 3 is 1 bytes"):
        k8(1.0, 1, 1, 256, block=b)
    d.free()
    with pytest.raises(cuda.LogicError, match="parameter 0 is a freed DeviceAllocation"):
        k(d, 1, 1.0, block=b)


@pytest.mark.driver
def test_launch_configuration_errors(ctx):
    k = SourceModule("__global__ void k(int *p) { }").get_function("k")
    dev = cuda.Context.get_device()
    lim = dev.max_threads_per_block
    with pytest.raises(
        ValueError, match="has %d threads; the device's limit is %d a block" % (2 * lim, lim)
    ):
        k(None, block=(lim, 2, 1))
    with pytest.raises(ValueError, match="block z dimension 65 exceeds the device's limit of 64"):
        k(None, block=(1, 1, 65))
    with pytest.raises(ValueError, match="must be positive, got 0"):
        k(None, block=(0, 1, 1))
    with pytest.raises(ValueError, match="grid y dimension 70000 exceeds"):
        k(None, block=(1, 1, 1), grid=(1, 70000))
    too_much = dev.max_shared_memory_per_block_optin + 1
    with pytest.raises(ValueError, match="%d bytes of dynamic shared memory exceed" % too_much):
        k(None, block=(1, 1, 1), shared=too_much)
    with pytest.raises(ValueError, match="1 to 3 dimensions"):
        k(None, block=(1, 1, 1, 1))
    with pytest.raises(TypeError, match="block must be a tuple"):
        k(None, block="x")


def test_function_attributes_and_occupancy(ctx):
    mod = SourceModule("""
    __global__ void __launch_bounds__(128) k(float *p)
    {
        __shared__ float s[256];
        s[threadIdx.x] = p[threadIdx.x];
        __syncthreads();
        p[threadIdx.x] = s[255 - threadIdx.x];
    }
    """)
    k = mod.get_function("k")
    assert k.shared_size_bytes == 1024
    assert k.max_threads_per_block == 128
    assert k.num_regs > 0 and k.local_size_bytes == 0
    assert k.binary_version >= 50
    blocks = k.max_active_blocks_per_multiprocessor(128)
    assert blocks >= 1
    min_grid, block = k.max_potential_block_size()
    assert 0 < block <= 128 and min_grid > 0
    k.set_attribute(cuda.function_attribute.MAX_DYNAMIC_SHARED_SIZE_BYTES, 64 << 10)
    assert k.max_dynamic_shared_size_bytes == 64 << 10
    assert k.get_attribute(cuda.function_attribute.NUM_REGS) == k.num_regs
    with pytest.raises(cuda.LogicError, match="no kernel named 'nope'"):
        mod.get_function("nope")


def test_time_kernel_and_dynamic_shared(ctx, rng):
    mod = SourceModule("""
    __global__ void rev(float *p, int n)
    {
        extern __shared__ float s[];
        int i = threadIdx.x;
        s[i] = p[i];
        __syncthreads();
        p[i] = s[n - 1 - i];
    }
    """)
    x = rng.standard_normal(512).astype(np.float32)
    d = cuda.to_device(x)
    t = mod.get_function("rev")(d, 512, block=(512, 1, 1), shared=512 * 4, time_kernel=True)
    assert isinstance(t, float) and t > 0
    np.testing.assert_array_equal(cuda.from_device_like(d, x), x[::-1])


def test_cluster_launch(ctx, rng):
    dev = cuda.Context.get_device()
    if dev.compute_capability() < (9, 0):
        pytest.skip("clusters need sm_90")
    mod = SourceModule(
        """
    #include <cooperative_groups.h>
    namespace cg = cooperative_groups;
    extern "C" __global__ void rank(int *out)
    {
        cg::cluster_group c = cg::this_cluster();
        if (threadIdx.x == 0)
            out[blockIdx.x] = c.block_rank() * 1000 + c.num_blocks();
    }
    """,
        no_extern_c=True,
    )
    out = np.full(8, -1, np.int32)
    mod.get_function("rank")(cuda.Out(out), block=(32, 1, 1), grid=(8, 1), cluster=(4, 1, 1))
    np.testing.assert_array_equal(out, [(i % 4) * 1000 + 4 for i in range(8)])
    with pytest.raises(ValueError, match="not a multiple of cluster"):
        mod.get_function("rank")(cuda.Out(out), block=(32, 1, 1), grid=(6, 1), cluster=(4, 1, 1))


def test_cooperative_launch(ctx):
    mod = SourceModule(
        """
    #include <cooperative_groups.h>
    extern "C" __global__ void total(int *acc, int *out)
    {
        auto g = cooperative_groups::this_grid();
        if (threadIdx.x == 0) atomicAdd(acc, 1);
        g.sync();
        if (threadIdx.x == 0) out[blockIdx.x] = *acc;
    }
    """,
        no_extern_c=True,
    )
    acc = np.zeros(1, np.int32)
    out = np.zeros(4, np.int32)
    mod.get_function("total")(
        cuda.InOut(acc), cuda.Out(out), block=(64, 1, 1), grid=(4, 1), cooperative=True
    )
    assert acc[0] == 4 and (out == 4).all()


def test_programmatic_dependent_launch(ctx, rng):
    if cuda.Context.get_device().compute_capability() < (9, 0):
        pytest.skip("programmatic dependent launch needs sm_90")
    mod = SourceModule("""
    __global__ void produce(float *buf, const float *x, int n)
    {
        int i = blockIdx.x * blockDim.x + threadIdx.x;
        for (int k = 0; k < 200; k++)          // take a while
            if (i < n) buf[i] = x[i] * 3.0f + k * 0.0f;
        __syncthreads();
        asm volatile("griddepcontrol.launch_dependents;");
    }
    __global__ void consume(float *out, const float *buf, int n)
    {
        asm volatile("griddepcontrol.wait;" ::: "memory");
        int i = blockIdx.x * blockDim.x + threadIdx.x;
        if (i < n) out[i] = buf[i] + 1.0f;
    }
    """)
    n = 1 << 20
    x = rng.standard_normal(n).astype(np.float32)
    dx, buf, out = cuda.to_device(x), cuda.mem_alloc(4 * n), cuda.mem_alloc(4 * n)
    s = cuda.Stream()
    g, b = ((n + 255) // 256, 1), (256, 1, 1)
    for _ in range(3):
        cuda.memset_d32_async(buf, 0, n, s)
        mod.get_function("produce")(buf, dx, n, block=b, grid=g, stream=s)
        mod.get_function("consume")(out, buf, n, block=b, grid=g, stream=s, pdl=True)
        s.synchronize()
        np.testing.assert_array_equal(cuda.from_device_like(out, x), x * 3.0 + 1.0)


def test_module_from_buffer_and_file(ctx, tmp_path, rng):
    src = 'extern "C" __global__ void neg(float *x) { x[threadIdx.x] = -x[threadIdx.x]; }'
    for arch in ("compute_80", None):
        binary = compile(src, arch=arch) if arch else compile(src)
        msgs = []
        mod = cuda.module_from_buffer(
            bytes(binary),
            options=[(cuda.jit_option.OPTIMIZATION_LEVEL, 3)],
            message_handler=lambda ok, info, err: msgs.append(ok),
        )
        assert msgs == [True]
        x = rng.standard_normal(32).astype(np.float32)
        y = x.copy()
        mod.get_function("neg")(cuda.InOut(y), block=(32, 1, 1))
        np.testing.assert_array_equal(y, -x)
        p = tmp_path / ("k." + binary.target)
        p.write_bytes(binary)
        assert cuda.module_from_file(str(p)).get_function("neg").name == "neg"
    with pytest.raises(cuda.LogicError) as ei:
        cuda.module_from_buffer(b".version 99.0\n.target sm_90\n.address_size 64\n")
    assert "cuModuleLoadDataEx" in str(ei.value)
    with pytest.raises(TypeError, match="encode PTX"):
        cuda.module_from_buffer("text")
    with pytest.raises(ValueError, match="empty"):
        cuda.module_from_buffer(b"")


def test_illegal_address_is_a_launch_error_in_a_subprocess():
    code = textwrap.dedent("""
        import pygpu.autoinit
        import pygpu.driver as cuda
        from pygpu.compiler import SourceModule
        # a write through a null pointer: an address no allocation can be at
        # (an offset from a real allocation may land in another mapping and
        # fault as CUDA_ERROR_INVALID_ADDRESS_SPACE instead)
        f = SourceModule("__global__ void bad(int *p) { p[2] = 1; }").get_function("bad")
        f(None, block=(1, 1, 1))
        try:
            cuda.Context.synchronize()
        except cuda.LaunchError as e:
            print("LaunchError", e.name)
            print(e)
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("LaunchError CUDA_ERROR_ILLEGAL_ADDRESS"), r.stdout
    assert "context is now unusable" in r.stdout
    assert r.stderr == ""


@pytest.mark.driver
def test_sourcemodule_cache_returns_loaded_module(ctx, tmp_cache):
    a = SourceModule(VADD)
    b = SourceModule(VADD)
    assert a.module is b.module  # one loaded image
    fa, fb = a.get_function("vadd"), b.get_function("vadd")
    assert fa is a.get_function("vadd")  # a SourceModule's own Function, every call
    # but each SourceModule its own: prepare() on one is never the other's
    # (two kernels with one binary, prepared with other types, shared one
    # Function before: the last prepare() won for both)
    assert fa is not fb
    fa.prepare("PPPi")
    fb.prepare("PPPI")
    z = cuda.mem_alloc(64)
    fa.prepared_call((1, 1), (1, 1, 1), z, z, z, -1)  # int32: -1 is one
    with pytest.raises(OverflowError, match=r"Python integer -1 out of bounds for uint32"):
        fb.prepared_call((1, 1), (1, 1, 1), z, z, z, -1)
