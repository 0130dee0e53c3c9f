"""PyCUDA's remaining driver functions (src/memory/memset.c, pygpu/driver.py):
memset_d2d8/16/32 and their async forms, mem_get_address_range,
initialize_profiler, start/stop_profiler, the enums PyCUDA has, the host
and managed allocation classes, aligned host arrays; pygpu.compyte;
compiler.preprocess_source; elementwise.get_put_kernel."""

import os
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest

import pygpu.driver as cuda
from pygpu.compyte import array as carray
from pygpu.compyte import dtypes as cdtypes

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

WIDTHS = [
    (1, np.uint8, "memset_d2d8"),
    (2, np.uint16, "memset_d2d16"),
    (4, np.uint32, "memset_d2d32"),
]


# ---- memset_d2d*: checked element-wise on fresh random background ----


def _pitched(rng, width, dtype, rows, cols):
    """A pitched allocation filled with random bytes; (dev, pitch, host copy)."""
    dev, pitch = cuda.mem_alloc_pitch(cols * width, rows, max(width, 4))
    assert pitch % width == 0 and pitch >= cols * width
    background = rng.integers(0, 256, rows * pitch, dtype=np.uint8)
    cuda.memcpy_htod(dev, background)
    return dev, pitch, background


def _read(dev, nbytes):
    out = np.empty(nbytes, np.uint8)
    cuda.memcpy_dtoh(out, dev)
    return out


@pytest.mark.driver
@pytest.mark.parametrize("width,dtype,name", WIDTHS)
@pytest.mark.parametrize("async_", [False, True])
def test_memset_d2d_sets_the_rectangle_and_nothing_else(ctx, rng, width, dtype, name, async_):
    rows, cols = 37, 53
    dev, pitch, background = _pitched(rng, width, dtype, rows, cols)
    value = int(rng.integers(1, 1 << (8 * width)))
    # a sub-rectangle: from row 3, column 5, 20 rows of 31 elements
    r0, c0, h, w = 3, 5, 20, 31
    dest = int(dev) + r0 * pitch + c0 * width
    if async_:
        s = cuda.Stream()
        getattr(cuda, name + "_async")(dest, pitch, value, w, h, s)
        s.synchronize()
    else:
        getattr(cuda, name)(dest, pitch, value, w, h)
    got = _read(dev, rows * pitch).reshape(rows, pitch)
    want = background.reshape(rows, pitch).copy()
    want[r0 : r0 + h, c0 * width : (c0 + w) * width] = np.full((h, w), value, dtype).view(np.uint8)
    np.testing.assert_array_equal(got, want)


@pytest.mark.driver
def test_memset_d2d_takes_keywords_an_allocation_and_a_negative_value(ctx, rng):
    rows, cols = 9, 14
    dev, pitch, background = _pitched(rng, 2, np.uint16, rows, cols)
    cuda.memset_d2d16(dest=dev, pitch=pitch, data=-2, width=cols, height=rows)
    got = _read(dev, rows * pitch).reshape(rows, pitch)
    assert (got[:, : cols * 2].view(np.uint16) == 0xFFFE).all()
    np.testing.assert_array_equal(
        got[:, cols * 2 :], background.reshape(rows, pitch)[:, cols * 2 :]
    )
    # default stream, by keyword
    cuda.memset_d2d16_async(dest=dev, pitch=pitch, data=7, width=1, height=1, stream=None)
    cuda.Context.synchronize()
    assert _read(dev, 2).view(np.uint16)[0] == 7


@pytest.mark.driver
def test_memset_d2d_refuses_bad_input(ctx):
    dev, pitch = cuda.mem_alloc_pitch(64, 4, 4)
    with pytest.raises(
        ValueError,
        match=r"memset_d2d32\(\): pitch \(8 bytes\) is less than "
        r"a row's 4 elements of 4 bytes",
    ):
        cuda.memset_d2d32(dev, 8, 1, 4, 2)
    with pytest.raises(
        ValueError,
        match=r"memset_d2d32\(\): the address and the pitch must "
        r"be 4-byte aligned",
    ):
        cuda.memset_d2d32(int(dev) + 2, pitch, 1, 4, 2)
    with pytest.raises(
        ValueError,
        match=r"memset_d2d16\(\): the address and the pitch must "
        r"be 2-byte aligned",
    ):
        cuda.memset_d2d16(dev, pitch + 1, 1, 4, 2)
    with pytest.raises(
        ValueError,
        match=r"memset_d2d8\(\): \d+ rows of 16 elements, \d+ bytes "
        r"apart, reach \d+ bytes; the allocation holds",
    ):
        cuda.memset_d2d8(dev, pitch, 1, 16, 5)
    with pytest.raises(OverflowError, match=r"memset_d2d8\(\): data 256 does not fit in 8 bits"):
        cuda.memset_d2d8(dev, pitch, 256, 1, 1)
    with pytest.raises(
        OverflowError,
        match=r"memset_d2d16_async\(\): data -32769 does not fit "
        r"in 16 bits",
    ):
        cuda.memset_d2d16_async(dev, pitch, -32769, 1, 1)
    with pytest.raises(TypeError, match=r"memset_d2d32\(\): data must be an int, not float"):
        cuda.memset_d2d32(dev, pitch, 1.5, 1, 1)
    with pytest.raises(TypeError, match=r"memset_d2d32\(\): width must be an int, not str"):
        cuda.memset_d2d32(dev, pitch, 1, "4", 1)
    with pytest.raises(ValueError, match=r"memset_d2d32\(\): height must be >= 0, got -1"):
        cuda.memset_d2d32(dev, pitch, 1, 4, -1)
    with pytest.raises(TypeError, match=r"memset_d2d8\(\) takes at most 5 arguments"):
        cuda.memset_d2d8(dev, pitch, 1, 4, 1, None)
    with pytest.raises(
        TypeError,
        match=r"memset_d2d8_async\(\) missing required argument "
        r"'height'",
    ):
        cuda.memset_d2d8_async(dev, pitch, 1, 4)
    # nothing to set: no driver call, no error
    cuda.memset_d2d32(dev, pitch, 1, 0, 4)
    cuda.memset_d2d32(dev, pitch, 1, 4, 0)
    dev.free()
    with pytest.raises(cuda.LogicError, match="freed"):
        cuda.memset_d2d32(dev, pitch, 1, 4, 1)


@pytest.mark.standin
def test_memset_d2d_reports_the_drivers_error(ctx, standin):
    dev, pitch = cuda.mem_alloc_pitch(64, 4, 4)
    standin.fail("cuMemsetD2D32Async", 1, 1)
    with pytest.raises(
        cuda.LogicError, match=r"cuMemsetD2D32Async failed: CUDA_ERROR_INVALID_VALUE"
    ):
        cuda.memset_d2d32_async(dev, pitch, 1, 4, 4)
    assert standin.fired()
    standin.fail("cuMemsetD2D8", 1, 2)
    with pytest.raises(cuda.MemoryError, match=r"cuMemsetD2D8 failed: CUDA_ERROR_OUT_OF_MEMORY"):
        cuda.memset_d2d8(dev, pitch, 1, 4, 4)


# ---- mem_get_address_range: the driver's own answer ----


@pytest.mark.driver
def test_mem_get_address_range(ctx):
    n = 100003
    a = cuda.mem_alloc(n)
    base, size = cuda.mem_get_address_range(a)
    assert base == int(a) and size >= n
    assert cuda.mem_get_address_range(int(a) + 4321) == (base, size)
    b, pitch = cuda.mem_alloc_pitch(100, 7, 4)
    base_b, size_b = cuda.mem_get_address_range(int(b) + pitch * 3)
    assert base_b == int(b) and size_b >= pitch * 7
    with pytest.raises(TypeError, match="pointer"):
        cuda.mem_get_address_range("x")
    a.free()
    with pytest.raises(cuda.LogicError, match="freed"):
        cuda.mem_get_address_range(a)


@pytest.mark.driver
def test_mem_get_address_range_of_no_allocation_is_the_drivers_error(ctx):
    host = np.zeros(1024, np.uint8)  # ordinary host memory: no device allocation
    with pytest.raises(cuda.Error, match=r"cuMemGetAddressRange failed: CUDA_ERROR_"):
        cuda.mem_get_address_range(host.ctypes.data + 64)


# ---- the profiler ----


@pytest.mark.standin
def test_profiler_calls(ctx, standin):
    cuda.start_profiler()
    assert standin.lib.fakecuda_live(b"profiler") == 1
    cuda.stop_profiler()
    assert standin.lib.fakecuda_live(b"profiler") == 0
    before = standin.calls("cuProfilerInitialize")  # (the stand-in counts per process)
    cuda.initialize_profiler("cfg.txt", "out.csv", cuda.profiler_output_mode.CSV)
    assert standin.calls("cuProfilerInitialize") == before + 1
    with pytest.raises(
        ValueError,
        match=r"initialize_profiler\(\): output_mode must be "
        r"profiler_output_mode.KEY_VALUE_PAIR \(0\) or CSV "
        r"\(1\), got 5",
    ):
        cuda.initialize_profiler("cfg.txt", "out.csv", 5)
    with pytest.raises(TypeError):
        cuda.initialize_profiler(None, "out.csv", 0)
    standin.fail("cuProfilerInitialize", 1, 801)
    with pytest.raises(
        cuda.Error,
        match=r"cuProfilerInitialize failed: "
        r"CUDA_ERROR_NOT_SUPPORTED",
    ):
        cuda.initialize_profiler("cfg.txt", "out.csv", 0)


@pytest.mark.standin
def test_initialize_profiler_without_the_entry_point(tmp_path):
    import fakecuda

    env = dict(
        os.environ,
        PYGPU_LIBCUDA=fakecuda.build(),
        FAKECUDA_HIDE="cuProfilerInitialize",
        PYTHONPATH=ROOT,
    )
    code = (
        "import pygpu.driver as d\ntry:\n    d.initialize_profiler('a', 'b', 0)\n"
        "except d.LogicError as e:\n    print(e)\n"
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
    assert r.stdout.strip() == (
        "initialize_profiler() needs cuProfilerInitialize, which this CUDA driver does not provide"
    )


@pytest.mark.gpu
def test_initialize_profiler_on_the_driver(ctx, tmp_path):
    cfg = tmp_path / "cfg.txt"
    cfg.write_text("gpustarttimestamp\n")
    try:
        cuda.initialize_profiler(str(cfg), str(tmp_path / "out.csv"), cuda.profiler_output_mode.CSV)
    except cuda.Error as e:  # NVIDIA deprecated it: a driver may refuse it
        assert e.routine == "cuProfilerInitialize"
    cuda.start_profiler()
    cuda.stop_profiler()


# ---- enums: PyCUDA's names, cuda.h's values ----


def test_enums_have_pycudas_members():
    assert cuda.pointer_attribute.CONTEXT == 1 and cuda.pointer_attribute.HOST_POINTER == 4
    assert [m.name for m in cuda.memory_type] == ["HOST", "DEVICE", "ARRAY", "UNIFIED"]
    assert [m.value for m in cuda.memory_type] == [1, 2, 3, 4]
    assert [(m.name, m.value) for m in cuda.shared_config] == [
        ("DEFAULT_BANK_SIZE", 0),
        ("FOUR_BYTE_BANK_SIZE", 1),
        ("EIGHT_BYTE_BANK_SIZE", 2),
    ]
    assert [(m.name, m.value) for m in cuda.jit_fallback] == [
        ("PREFER_PTX", 0),
        ("PREFER_BINARY", 1),
    ]
    assert cuda.jit_target.COMPUTE_80 == 80 and cuda.jit_target.COMPUTE_90 == 90
    assert cuda.jit_target.COMPUTE_90A == 0x10000 + 90  # CU_COMPUTE_ACCELERATED_TARGET_BASE
    assert [m.name for m in cuda.array_cubemap_face] == [
        "POSITIVE_X",
        "NEGATIVE_X",
        "POSITIVE_Y",
        "NEGATIVE_Y",
        "POSITIVE_Z",
        "NEGATIVE_Z",
    ]
    assert [(m.name, m.value) for m in cuda.profiler_output_mode] == [
        ("KEY_VALUE_PAIR", 0),
        ("CSV", 1),
    ]


def test_enum_values_match_the_header():
    header = "/usr/local/cuda/include/cuda.h"
    if not os.path.exists(header):
        pytest.skip("no CUDA toolkit header here")
    text = open(header).read()
    for m in cuda.memory_type:
        assert re.search(r"CU_MEMORYTYPE_%s\s*=\s*0x0*%x\b" % (m.name, m.value), text)
    for m in cuda.pointer_attribute:
        assert re.search(r"CU_POINTER_ATTRIBUTE_%s\s*=\s*%d\b" % (m.name, m.value), text)


# ---- host and managed allocation classes ----


def test_aligned_arrays():
    for alignment in (64, 4096):
        a = cuda.aligned_empty((5, 7), np.float32, order="F", alignment=alignment)
        assert a.ctypes.data % alignment == 0 and a.shape == (5, 7) and a.dtype == np.float32
        assert a.flags.f_contiguous and a.flags.writeable
        assert isinstance(a.base, cuda.AlignedHostAllocation)
        assert isinstance(a.base, cuda.HostPointer)
    z = cuda.aligned_zeros(1000, np.int64, alignment=256)
    assert z.ctypes.data % 256 == 0 and (z == 0).all()
    src = np.asfortranarray(np.arange(12.0).reshape(3, 4))
    like = cuda.aligned_zeros_like(src)
    assert like.flags.f_contiguous and like.shape == (3, 4) and (like == 0).all()
    assert like.ctypes.data % 4096 == 0
    e = cuda.aligned_empty_like(np.zeros((2, 3), np.int16))
    assert e.shape == (2, 3) and e.dtype == np.int16 and e.flags.c_contiguous
    with pytest.raises(ValueError, match="could not detect array order"):
        cuda.aligned_empty_like(np.zeros((4, 4))[::2, ::2])
    with pytest.raises(ValueError, match="alignment must be a positive power of two, got 48"):
        cuda.aligned_empty(3, alignment=48)
    with pytest.raises(ValueError, match="order must be 'C' or 'F', got 'K'"):
        cuda.aligned_empty(3, order="K")
    z.base.free()  # accepted; the memory lives on with z
    z[:] = 5
    assert (z == 5).all()
    with pytest.raises(cuda.LogicError, match="not page-locked"):
        z.base.get_device_pointer()


def test_allocation_classes_are_not_made_directly():
    for cls in (
        cuda.HostPointer,
        cuda.PagelockedHostAllocation,
        cuda.RegisteredHostMemory,
        cuda.ManagedAllocation,
    ):
        with pytest.raises(
            TypeError, match="%s objects come from .*; they cannot be made directly" % cls.__name__
        ):
            cls()
    assert cuda.ManagedAllocationOrStub is cuda.ManagedAllocation
    assert issubclass(cuda.HostAllocation, cuda.HostPointer)
    assert issubclass(cuda.PagelockedHostAllocation, cuda.HostPointer)
    assert not isinstance(np.zeros(3), cuda.HostPointer)
    assert not isinstance(3, cuda.ManagedAllocation)


@pytest.mark.driver
def test_allocation_classes_tell_the_kinds_apart(ctx):
    p = cuda.pagelocked_empty(16, np.float32)
    assert isinstance(p.base, cuda.PagelockedHostAllocation)
    assert isinstance(p.base, cuda.HostPointer)
    assert not isinstance(p.base, cuda.RegisteredHostMemory)
    r = cuda.register_host_memory(cuda.aligned_zeros(4096, np.uint8))
    assert isinstance(r.base, cuda.RegisteredHostMemory)
    assert not isinstance(r.base, cuda.PagelockedHostAllocation)
    m = cuda.managed_empty(16, np.float32)
    assert isinstance(m.base, cuda.ManagedAllocation)
    assert isinstance(cuda.mem_alloc_managed(64), cuda.ManagedAllocation)
    assert not isinstance(cuda.mem_alloc(64), cuda.ManagedAllocation)


def test_driver_names_kept_elsewhere():
    from pygpu import curandom, tools

    assert cuda.DeviceMemoryPool is tools.DeviceMemoryPool
    assert cuda.PageLockedMemoryPool is tools.PageLockedMemoryPool
    assert cuda.PageLockedAllocator is tools.PageLockedAllocator
    assert cuda.PooledDeviceAllocation is tools.PooledDeviceAllocation
    assert cuda.get_curand_version is curandom.get_curand_version
    assert cuda.direction_vector_set is curandom.direction_vector_set
    assert [cuda.bitlog2(n) for n in (1, 2, 3, 1023, 1024, 2**40 + 1)] == [0, 1, 1, 9, 10, 40]
    assert cuda.py_memcpy_htoa is cuda.memcpy_htoa and cuda.py_memcpy_atoh is cuda.memcpy_atoh
    assert {"bitlog2", "DeviceMemoryPool", "get_curand_version"} <= set(dir(cuda))
    with pytest.raises(AttributeError, match="module 'pygpu.driver' has no attribute 'nope'"):
        cuda.nope


def test_version_names():
    import pygpu

    assert pygpu.VERSION == tuple(int(x) for x in pygpu.__version__.split("."))
    assert pygpu.VERSION_TEXT == pygpu.__version__ and pygpu.VERSION_STATUS == ""


# ---- pygpu.compyte ----


def test_compyte_dtypes_registry():
    reg = cdtypes.DTypeRegistry()
    cdtypes.fill_registry_with_c_types(reg, respect_windows=False)
    assert reg.dtype_to_ctype(np.int64) == "long" and reg.dtype_to_ctype("float32") == "float"
    assert reg.get_or_register_dtype("unsigned  int") == np.uint32
    cdtypes.fill_registry_with_opencl_c_types(reg)
    assert reg.get_or_register_dtype("uint") == np.uint32
    cdtypes.fill_registry_with_c99_stdint_types(reg)
    cdtypes.fill_registry_with_c99_complex_types(reg)
    assert reg.get_or_register_dtype("double complex") == np.complex128
    with pytest.raises(
        cdtypes.TypeNameNotKnown, match="no dtype is registered as the C type 'nope'"
    ):
        reg.get_or_register_dtype("nope")
    with pytest.raises(RuntimeError, match="name 'float' already registered to different dtype"):
        reg.get_or_register_dtype("float", np.float64)
    with pytest.raises(ValueError, match=r"unable to map dtype '\[\('q', '<i2'\)\]'"):
        reg.dtype_to_ctype(np.dtype([("q", "<i2")]))
    with pytest.raises(ValueError, match="dtype may not be None"):
        reg.dtype_to_ctype(None)


def test_compyte_shares_the_kernel_generators_registry():
    from pygpu import tools

    dt = np.dtype([("a", np.int32), ("b", np.float32)])
    got = cdtypes.get_or_register_dtype("compyte_test_pair", dt)
    assert got == dt
    assert tools.dtype_to_ctype(dt) == "compyte_test_pair"
    assert cdtypes.dtype_to_ctype(dt) == "compyte_test_pair"
    assert cdtypes.NAME_TO_DTYPE["compyte_test_pair"] == dt
    with pytest.warns(DeprecationWarning, match="register_dtype is deprecated"):
        with pytest.raises(RuntimeError, match="already registered"):
            cdtypes.register_dtype(dt, "other_name")


def test_compyte_parse_c_arg_backend():
    def scalar(dt, name):
        return ("s", dt, name)

    def vec(dt, name):
        return ("v", dt, name)

    assert cdtypes.parse_c_arg_backend("const float *__restrict__ x", scalar, vec) == (
        "v",
        np.float32,
        "x",
    )
    assert cdtypes.parse_c_arg_backend("unsigned int n", scalar, vec) == ("s", np.uint32, "n")
    assert cdtypes.parse_c_arg_backend("double a[4]", scalar, vec) == ("v", np.float64, "a")
    with pytest.raises(ValueError, match="unknown type 'quux'"):
        cdtypes.parse_c_arg_backend("quux q", scalar, vec)
    with pytest.raises(ValueError, match="couldn't parse C declarator"):
        cdtypes.parse_c_arg_backend("int *", scalar, vec)


def test_compyte_array_helpers(rng):
    for shape in [(3, 4, 5), (7,), (2, 0, 3), ()]:
        for order in "CF":
            a = np.empty(shape, np.float64, order=order)
            want = a.strides
            got = (carray.c_contiguous_strides if order == "C" else carray.f_contiguous_strides)(
                8, shape
            )
            if 0 not in shape:
                assert got == want
            flags = carray.ArrayFlags(a)
            assert flags.c_contiguous == a.flags.c_contiguous
            assert flags.f_contiguous == a.flags.f_contiguous
            assert flags.forc == (a.flags.c_contiguous or a.flags.f_contiguous)
    v = np.empty((4, 6))[:, ::2]
    assert not carray.ArrayFlags(v).forc
    assert carray.equal_strides((8, 100), (8, 999), (3, 1))
    assert not carray.equal_strides((8, 16), (8, 24), (3, 2))
    x = np.zeros(3, np.float32)
    assert carray.get_common_dtype(x, np.zeros(2, np.float64), allow_double=False) == np.float32
    assert carray.get_common_dtype(x, np.zeros(2, np.float64), allow_double=True) == np.float64
    assert carray.get_common_dtype(np.zeros(1, np.complex128), x, False) == np.complex64
    base = rng.standard_normal(20)
    s = carray.as_strided(base, shape=(5,), strides=(32,))
    np.testing.assert_array_equal(s, base[::4])
    assert "C_CONTIGUOUS : True" in repr(carray.ArrayFlags(x))


# ---- compiler.preprocess_source ----


def _nvcc():
    for p in (shutil.which("nvcc"), "/usr/local/cuda/bin/nvcc"):
        if p and os.path.exists(p):
            return p
    pytest.skip("no nvcc here")


def test_preprocess_source():
    from pygpu.compiler import CompileError, preprocess_source

    nvcc = _nvcc()
    out = preprocess_source(
        "#define TWICE(x) (2*(x))\n__global__ void k(int *a){ a[0] = TWICE(VAL); }\n",
        ["-DVAL=21"],
        nvcc,
    )
    assert "a[0] = (2*(21));" in out and "#define" not in out
    with pytest.raises(CompileError, match="nvcc preprocessing of .* failed") as e:
        preprocess_source('#include "no_such_header.h"\n', [], nvcc)
    assert e.value.command_line[:2] == [nvcc, "--preprocess"]
    assert "no_such_header.h" in e.value.stderr
    with pytest.raises(CompileError, match="cannot run /nonexistent/nvcc"):
        preprocess_source("int x;\n", [], "/nonexistent/nvcc")


# ---- elementwise.get_put_kernel ----


@pytest.mark.gpu
def test_get_put_kernel(ctx, rng):
    from pygpu import gpuarray
    from pygpu.elementwise import get_put_kernel

    n, m = 1000, 3001
    idx = rng.permutation(m)[:n].astype(np.int32)
    dests = [rng.standard_normal(m).astype(np.float32) for _ in range(2)]
    srcs = [rng.standard_normal(n).astype(np.float32) for _ in range(2)]
    d_idx = gpuarray.to_gpu(idx)
    d_dests = [gpuarray.to_gpu(d) for d in dests]
    d_srcs = [gpuarray.to_gpu(s) for s in srcs]
    func = get_put_kernel(np.float32, np.int32, vec_count=2)
    func.prepared_call(
        (4, 1),
        (256, 1, 1),
        d_idx.gpudata,
        d_dests[0].gpudata,
        d_dests[1].gpudata,
        d_srcs[0].gpudata,
        d_srcs[1].gpudata,
        n,
    )
    for d, h, s in zip(d_dests, dests, srcs):
        want = h.copy()
        want[idx] = s
        np.testing.assert_array_equal(d.get(), want)
    with pytest.raises(ValueError, match=r"get_put_kernel\(\): vec_count must be >= 1, got 0"):
        get_put_kernel(np.float32, np.int32, vec_count=0)


# ---- reduction.get_reduction_module / get_reduction_kernel_and_types ----


def test_reduction_stage_builder_refuses_bad_input():
    from pygpu.reduction import get_reduction_kernel_and_types, get_reduction_module

    with pytest.raises(
        ValueError,
        match=r"get_reduction_module\(\): block_size must be a power "
        r"of two from 1 to 1024, got 384",
    ):
        get_reduction_module("float", 384, "0", "a+b", "in[i]", "const float *in")
    with pytest.raises(
        ValueError,
        match=r"get_reduction_kernel_and_types\(\): stage must be 1 "
        r"or 2, got 3",
    ):
        get_reduction_kernel_and_types(3, "float", 256, "0", "a+b")
    with pytest.raises(TypeError, match=r"stage 1 needs arguments"):
        get_reduction_kernel_and_types(1, "float", 256, "0", "a+b")
    with pytest.raises(TypeError, match="reduce_expr must be a str"):
        get_reduction_module("float", 256, "0", None, "in[i]", "const float *in")


@pytest.mark.driver
def test_reduction_stage_builder_types(ctx):
    from pygpu.reduction import get_reduction_kernel_and_types

    f, types = get_reduction_kernel_and_types(
        1, "float", 256, "0", "a+b", "x[i]*y[i]", "const float *x, const float *y, int k"
    )
    assert types == ["P", "P", "i"]
    f2, types2 = get_reduction_kernel_and_types(
        2, "float", 256, "0", "a+b", arguments="const float *x, const float *y, int k"
    )
    assert types2 == ["P", "P", "P", "i"]
    assert f.get_attribute(cuda.function_attribute.MAX_THREADS_PER_BLOCK) >= 256


@pytest.mark.gpu
@pytest.mark.parametrize("dtype,ctype", [(np.float64, "double"), (np.int32, "int")])
def test_reduction_two_stages_against_numpy(ctx, rng, dtype, ctype):
    from pygpu import gpuarray
    from pygpu.reduction import get_reduction_kernel_and_types

    n, bs, seq = 1000003, 256, 8
    if dtype == np.int32:
        # |sum| stays far below 2**31: no wrap-around to account for
        x = rng.integers(-100, 100, n).astype(dtype)
        y = rng.integers(-100, 100, n).astype(dtype)
    else:
        x, y = rng.standard_normal(n), rng.standard_normal(n)
    dx, dy = gpuarray.to_gpu(x), gpuarray.to_gpu(y)
    s1, _ = get_reduction_kernel_and_types(
        1,
        ctype,
        bs,
        "0",
        "a+b",
        "x[i]*y[i] + k",
        "const %s *x, const %s *y, %s k" % (ctype, ctype, ctype),
    )
    s2, _ = get_reduction_kernel_and_types(
        2, ctype, bs, "0", "a+b", arguments="const %s *x, const %s *y, %s k" % (ctype, ctype, ctype)
    )
    k = dtype(3)
    blocks = (n + bs * seq - 1) // (bs * seq)
    partial = gpuarray.empty(blocks, dtype)
    itemsize = np.dtype(dtype).itemsize
    s1.prepared_call(
        (blocks, 1),
        (bs, 1, 1),
        partial.gpudata,
        dx.gpudata,
        dy.gpudata,
        k,
        seq,
        n,
        shared_size=bs * itemsize,
    )
    want_partial = [
        (
            x[b * bs * seq : (b + 1) * bs * seq].astype(np.float64)
            * y[b * bs * seq : (b + 1) * bs * seq]
            + k
        ).sum()
        for b in range(blocks)
    ]
    np.testing.assert_allclose(partial.get(), want_partial, rtol=1e-9, atol=1e-9)
    out = gpuarray.empty(1, dtype)
    seq2 = (blocks + bs - 1) // bs
    s2.prepared_call(
        (1, 1),
        (bs, 1, 1),
        out.gpudata,
        partial.gpudata,
        dx.gpudata,
        dy.gpudata,
        k,
        seq2,
        blocks,
        shared_size=bs * itemsize,
    )
    want = (x.astype(np.float64) * y + k).sum()
    if dtype == np.int32:
        assert int(out.get()[0]) == int(want)
    else:
        np.testing.assert_allclose(out.get()[0], want, rtol=1e-9)


@pytest.mark.standin
def test_reduction_stage_and_put_kernel_launch_layout(ctx, standin):
    import struct
    from pygpu import gpuarray
    from pygpu.elementwise import get_put_kernel
    from pygpu.reduction import get_reduction_kernel_and_types

    x, y = gpuarray.zeros(1000, np.float64), gpuarray.zeros(1000, np.float64)
    part = gpuarray.empty(4, np.float64)
    s1, types = get_reduction_kernel_and_types(
        1, "double", 256, "0", "a+b", "x[i]*y[i] + k", "const double *x, const double *y, double k"
    )
    assert types == ["P", "P", "d"]
    s1.prepared_call(
        (4, 1),
        (256, 1, 1),
        part.gpudata,
        x.gpudata,
        y.gpudata,
        np.float64(2.5),
        8,
        1000,
        shared_size=256 * 8,
    )
    launch = standin.last_launch()
    assert launch.name == "reduce_kernel" and launch.shared == 2048
    assert launch.grid == (4, 1, 1) and launch.block == (256, 1, 1)
    assert struct.unpack("<QQQdIxxxxQ", launch.params) == (
        int(part.gpudata),
        int(x.gpudata),
        int(y.gpudata),
        2.5,
        8,
        1000,
    )
    idx = gpuarray.zeros(10, np.int32)
    d = [gpuarray.zeros(10, np.float32) for _ in range(2)]
    put = get_put_kernel(np.float32, np.int32)
    put.prepared_call((1, 1), (32, 1, 1), idx.gpudata, d[0].gpudata, d[1].gpudata, 10)
    launch = standin.last_launch()
    assert launch.name == "put"
    assert struct.unpack("<QQQQ", launch.params) == (
        int(idx.gpudata),
        int(d[0].gpudata),
        int(d[1].gpudata),
        10,
    )
