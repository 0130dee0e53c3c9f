"""pygpu.elementwise and the kernel-generator helpers of pygpu.tools.

CPU tests: argument parsing, the generated sources, and that every
generator's source compiles to PTX through NVRTC (no GPU, no driver: the
module loader is replaced by a compile to compute_90).  gpu tests: the
kernels' results against NumPy on fresh random data.
"""

import numpy as np
import pytest

import pygpu.driver as drv
from pygpu import compiler, elementwise, tools
from pygpu.tools import ScalarArg, VectorArg, dtype_to_ctype, parse_c_arg


def _nvrtc_ok():
    try:
        compiler.nvrtc_version()
        return True
    except Exception:
        return False


needs_nvrtc = pytest.mark.skipif(not _nvrtc_ok(), reason="NVRTC not found")


# ---- tools ----


@pytest.mark.parametrize(
    "decl,cls,dtype,name",
    [
        ("float *x", VectorArg, np.float32, "x"),
        ("const double *__restrict__ y", VectorArg, np.float64, "y"),
        ("unsigned char* d_arr", VectorArg, np.uint8, "d_arr"),
        ("pycuda::complex<float> *z", VectorArg, np.complex64, "z"),
        ("int n", ScalarArg, np.int32, "n"),
        ("  unsigned long long  k ", ScalarArg, np.uint64, "k"),
        ("char c", ScalarArg, np.int8, "c"),
        ("bool flag", ScalarArg, np.bool_, "flag"),
        ("float3 v", ScalarArg, None, "v"),
    ],
)
def test_parse_c_arg(decl, cls, dtype, name):
    import pygpu.gpuarray as ga

    a = parse_c_arg(decl)
    assert type(a) is cls and a.name == name
    assert a.dtype == (ga.vec.float3 if dtype is None else np.dtype(dtype))


@pytest.mark.parametrize(
    "decl,msg",
    [
        ("float", "cannot parse C argument"),
        ("quux *x", "unknown type 'quux'"),
        ("float **x", "pointers to pointers"),
        ("float x[3]", "arrays are declared as pointers"),
        ("*x", "has no type"),
    ],
)
def test_parse_c_arg_errors(decl, msg):
    with pytest.raises(ValueError, match=msg):
        parse_c_arg(decl)


def test_parse_c_arg_type():
    with pytest.raises(TypeError, match="takes a C declaration str, not int"):
        parse_c_arg(3)


def test_dtype_to_ctype():
    assert dtype_to_ctype(np.float32) == "float"
    assert dtype_to_ctype("float64") == "double"
    assert dtype_to_ctype(np.int64) == "long"
    assert dtype_to_ctype(np.uint8) == "unsigned char"
    assert dtype_to_ctype(np.complex128) == "pycuda::complex<double>"
    assert dtype_to_ctype(np.bool_) == "bool"
    with pytest.raises(TypeError, match="holds Python objects"):
        dtype_to_ctype(np.dtype(object))
    with pytest.raises(ValueError, match="unable to map dtype"):
        dtype_to_ctype(np.dtype([("a", np.int8), ("b", np.float64)]))
    with pytest.raises(ValueError, match="may not be None"):
        dtype_to_ctype(None)


def test_register_dtype():
    dt = np.dtype([("lo", np.float32), ("hi", np.float32)])
    assert tools.get_or_register_dtype("test_pair_t", dt) == dt
    assert tools.get_or_register_dtype("test_pair_t") == dt
    assert dtype_to_ctype(dt) == "test_pair_t"
    assert parse_c_arg("test_pair_t *p").dtype == dt
    with pytest.raises(RuntimeError, match="already registered as"):
        tools.get_or_register_dtype("test_pair_t", np.float64)
    with pytest.raises(KeyError, match="no dtype is registered as the C type 'nope_t'"):
        tools.get_or_register_dtype("nope_t")


def test_struct_chars():
    assert VectorArg(np.float64, "x").struct_char == "P"
    assert ScalarArg(np.float32, "a").struct_char == "f"
    assert ScalarArg(np.complex64, "a").struct_char == "V"
    assert ScalarArg(np.uintp, "n").struct_char == np.dtype(np.uintp).char
    assert VectorArg(np.float32, "x").declarator() == "float *x"
    assert ScalarArg(np.complex128, "c").declarator() == "pycuda::complex<double> c"


def test_context_dependent_memoize(monkeypatch):
    ctxs = iter(["ctx1", "ctx1", "ctx2", "ctx1"])
    monkeypatch.setattr(tools, "_current_context", lambda: next(ctxs))
    calls = []

    @tools.context_dependent_memoize
    def f(x, y=1):
        calls.append((x, y))
        return object()

    a = f(1)
    assert f(1) is a  # same context: cached
    b = f(1)  # another context: computed again
    assert b is not a and calls == [(1, 1), (1, 1)]
    tools.clear_context_caches()
    assert f(1) is not a and len(calls) == 3


# ---- generated sources compile (no GPU) ----


class _FakeFunction:
    def __init__(self, name):
        self.name = name

    def prepare(self, chars):
        self.chars = chars
        return self


class _PTXModule:
    """What _module returns in the CPU tests: the source compiled to PTX."""

    sources = []

    def __init__(self, source, options, keep):
        self.ptx = compiler.compile(
            source, options=list(options or ()), arch="compute_90", cache_dir=False
        )
        _PTXModule.sources.append(source)

    def get_function(self, name):
        assert ('.entry %s(' % name).encode() in self.ptx, name
        return _FakeFunction(name)


@pytest.fixture
def ptx_modules(monkeypatch):
    monkeypatch.setattr(elementwise, "_module", _PTXModule)
    monkeypatch.setattr(tools, "_current_context", lambda: None)
    elementwise.clear_caches()
    tools.clear_context_caches()
    _PTXModule.sources.clear()
    yield _PTXModule
    elementwise.clear_caches()
    tools.clear_context_caches()


@needs_nvrtc
def test_elementwise_kernel_compiles(ptx_modules):
    k = elementwise.ElementwiseKernel(
        "float a, float *x, float b, float *y, float *z",
        "z[i] = a*x[i] + b*y[i]",
        "linear_combination",
        preamble="#include <pycuda-complex.hpp>\n__device__ float twice(float v) { return 2*v; }",
        loop_prep="float t = twice(a)",
        after_loop="(void) t",
    )
    mod, func, args = k.generate_stride_kernel_and_types(False)
    assert func.chars == "fPfPPQ" or func.chars == "fPfPP" + np.dtype(np.uintp).char
    assert [a.name for a in args][-1] == "n"
    mod, func, args = k.generate_stride_kernel_and_types(True)
    assert [a.name for a in args][-3:] == ["start", "stop", "step"]
    src = ptx_modules.sources[-1]
    assert "if (step < 0)" in src and "twice(a)" in src


@needs_nvrtc
def test_every_builder_compiles(ptx_modules):
    f32, f64, c64, c128, i32, u32 = (
        np.dtype(t)
        for t in (np.float32, np.float64, np.complex64, np.complex128, np.int32, np.uint32)
    )
    e = elementwise
    for dt in (f32, f64, c64, c128, i32):
        e.get_copy_kernel(dt, f32)
        e.get_axpbyz_kernel(dt, f32, np.result_type(dt, f32))
        e.get_axpbyz_kernel(dt, dt, dt, x_is_scalar=True)
        e.get_axpbz_kernel(dt, dt)
        for op in ("+", "-", "*", "/"):
            e.get_binary_op_kernel(dt, f64, np.result_type(dt, f64), op)
        e.get_binary_op_kernel(dt, dt, np.dtype(bool), "==")
        e.get_rdivide_elwise_kernel(dt, dt)
        e.get_fill_kernel(dt)
        e.get_reverse_kernel(dt)
        e.get_arange_kernel(dt) if dt.kind != "c" else None
        e.get_pow_array_kernel(dt, dt, dt, True, True)
        e.get_pow_array_kernel(dt, dt, dt, False, True)
        e.get_if_positive_kernel(f32, dt)
        e.get_where_kernel(i32, dt)
        e.get_take_kernel(dt, u32)
        e.get_unary_func_kernel(
            "fabs" if dt.kind == "f" else "abs",
            dt,
            f32 if dt == c64 else (f64 if dt == c128 else None),
        )
        e.get_logical_not_kernel(dt, np.dtype(bool))
    for dt in (f32, f64):
        e.get_binary_minmax_kernel("max", dt, dt, dt, False)
        e.get_binary_minmax_kernel("min", dt, dt, dt, True)
        e.get_scalar_op_kernel(dt, dt, np.dtype(bool), "<")
    for c, r in ((c64, f32), (c128, f64)):
        e.get_real_kernel(c, r)
        e.get_imag_kernel(c, r)
        e.get_conj_kernel(c, c)
        for fn in ("exp", "log", "log10", "sqrt", "sin", "cos", "tan", "sinh", "cosh", "tanh"):
            e.get_unary_func_kernel(fn, c)
    e.get_fmod_kernel()
    e.get_modf_kernel()
    e.get_frexp_kernel()
    e.get_ldexp_kernel()
    e.get_linear_combination_kernel(((False, f32, f32), (True, f32, f32)), f32)
    with pytest.raises(ValueError, match="must be 'max' or 'min'"):
        e.get_binary_minmax_kernel("avg", f32, f32, f32, False)
    with pytest.raises(ValueError, match="base or the exponent must be an array"):
        e.get_pow_array_kernel(f32, f32, f32, False, False)


@needs_nvrtc
def test_every_operator_kernel_compiles(ptx_modules):
    """The map kernels behind gpuarray's operators, every op for every
    dtype pair that NumPy allows, contiguous and strided."""
    import pygpu.gpuarray as ga

    dts = [
        np.dtype(t)
        for t in (
            np.bool_,
            np.int8,
            np.uint8,
            np.int32,
            np.uint32,
            np.int64,
            np.float32,
            np.float64,
            np.complex64,
            np.complex128,
        )
    ]
    n = 0
    for op in ga._UFUNCS:
        for a in dts:
            for b in (a, np.dtype(np.float64), np.dtype(np.int32), float, int, complex):
                try:
                    res, comp = ga._types(op, a, b)
                    expr = ga._expr(op, comp)
                except TypeError:
                    continue  # NumPy refuses it too
                bdt = np.dtype(b) if isinstance(b, np.dtype) else comp
                kind_b = "a" if isinstance(b, np.dtype) else "s"
                e = elementwise
                e.get_map_kernel(op, expr, ("a", kind_b), (a, bdt), (comp, comp), res, 0)
                n += 1
        d = np.dtype(np.int32 if op.startswith("bitwise") or "shift" in op else np.float32)
        elementwise.get_map_kernel(
            op, ga._expr(op, d), ("a", "a"), (d, d), (d, d), ga._types(op, d, d)[0], 3
        )
    assert n > 300


@needs_nvrtc
def test_map_source_strided():
    f = np.dtype(np.float32)
    src = elementwise.map_source("add", "{0} + {1}", ("a", "a"), (f, f), (f, f), f, 2)
    assert "long long d1" in src and "o0 += q * s0_1" in src and "z[oz]" in src
    ptx = compiler.compile(src, arch="compute_90", cache_dir=False)
    assert b".entry pygpu_add(" in ptx


def test_collapse():
    # a C-contiguous (2, 3, 4) collapses to one dimension; a column slice does not
    shape, strides = elementwise._collapse((2, 3, 4), [[12, 4, 1], [12, 4, 1]])
    assert shape == (24,) and strides == [[1], [1]]
    shape, strides = elementwise._collapse((2, 3, 4), [[12, 4, 1], [24, 8, 2]])
    assert shape == (24,) and strides == [[1], [2]]
    shape, strides = elementwise._collapse((3, 4), [[4, 1], [8, 1]])
    assert shape == (3, 4) and strides == [[4, 1], [8, 1]]
    shape, strides = elementwise._collapse((3, 1, 4), [[4, 4, 1], [0, 0, 1]])
    assert shape == (3, 4) and strides == [[4, 1], [0, 1]]
    assert elementwise._collapse((1, 1), [[1, 1]]) == ((1,), [[0]])


def test_disjoint_against_every_pair(rng):
    # ElementwiseKernel declares its pointers __restrict__ only when no two
    # array arguments share a byte
    for _ in range(3000):
        k = int(rng.integers(0, 7))
        starts = rng.integers(0, 200, k)
        spans = [(int(s), int(s + rng.integers(1, 40))) for s in starts]
        want = all(a[1] <= b[0] or b[1] <= a[0] for i, a in enumerate(spans) for b in spans[:i])
        assert elementwise._disjoint(spans) == want, spans


@needs_nvrtc
def test_restrict_variant_source(ptx_modules):
    args = "float a, float *x, double *y, float *z"
    plain = elementwise.get_elwise_module(
        args + ", unsigned long n", "z[i] = a * x[i] + y[i]", "axpy"
    )
    src = ptx_modules.sources[-1]
    assert "__restrict__" not in src and "pygpu_u" not in src
    elementwise.get_elwise_module(
        args + ", unsigned long n", "z[i] = a * x[i] + y[i]", "axpy", restrict=True
    )
    src = ptx_modules.sources[-1]
    assert (
        "float a, float *__restrict__ x, double *__restrict__ y, "
        "float *__restrict__ z, unsigned long n)"
    ) in src
    # four elements a thread per round, then the rest one at a time
    assert "pygpu_base + 3 * total_threads < n" in src and src.count("z[i] = a * x[i] + y[i]") == 2
    assert plain is not None


@pytest.mark.driver
def test_elementwise_takes_restrict_only_for_disjoint_arrays(ctx):
    import pygpu.gpuarray as ga

    x, y, z = (ga.zeros(4000, np.float32) for _ in range(3))
    calls = [
        ((x, y, z), True),
        ((x, z, z), False),
        ((x, y, y), False),
        ((x[:-1], x[1:], z[:-1]), False),
        ((x[:2000], x[2000:], z[:2000]), True),
        ((y[:0], y[:0], z[:0]), True),
    ]
    for arrays, restrict in calls:
        k = elementwise.ElementwiseKernel(
            "float a, float *x, float *y, float *z", "z[i] = a * x[i] + y[i]", "axpy"
        )
        k(np.float32(2), *arrays)
        want = [(False, restrict)] if arrays[0].size else []  # nothing to launch
        assert [key[1:] for key in k._funcs] == want, (arrays, k._funcs)
    # the checked path (a float64 scalar for a float argument) decides alike
    k = elementwise.ElementwiseKernel(
        "float a, float *x, float *y, float *z", "z[i] = a * x[i] + y[i]", "axpy"
    )
    k(np.float64(2.0), x, z, z)
    k(np.float64(2.0), x, y, z)
    assert sorted(key[1:] for key in k._funcs) == [(False, False), (False, True)]


def test_restrict_form_is_refused_where_it_would_change_the_operation():
    ok = elementwise._restrict_allowed
    for op in (
        "z[i] = a*x[i] + y[i]",
        "if (x[i] < 0) continue; z[i] = 1",
        "z[i] = (i == 3) + (i <= n) + (i >= 2) + (i != 4)",
        "p->i = 3; z[i] = s.i",
        "z[i] <<= 1",
        "breaks[i] = 1",
    ):
        assert ok(op), op
    for op in (
        "if (x[i] < 0) break; z[i] = 1",
        "goto done; done: z[i] = 1",
        'asm("mov.u32 %0, 1;" : "=r"(z[i]))',
        "i += 1; z[i] = 0",
        "i++",
        "--i",
        "int i = 3",
        "i <<= 1",
    ):
        assert not ok(op), op


@pytest.mark.driver
def test_elementwise_kernel_operations_the_restrict_form_would_change(ctx):
    import pygpu.gpuarray as ga

    x, z = ga.zeros(4000, np.float32), ga.zeros(4000, np.float32)
    # break: the plain kernel, whatever the arrays
    k = elementwise.ElementwiseKernel(
        "float *x, float *z", "if (x[i] < 0) break; z[i] = x[i]", "until_negative"
    )
    k(x, z)
    assert [key[1:] for key in k._funcs] == [(False, False)]
    # compiles plainly but not with __restrict__ pointers: the plain kernel
    # from then on
    k = elementwise.ElementwiseKernel(
        "float *x, float *z", "float **pp = &x; z[i] = (*pp)[i]", "through_pp"
    )
    k(x, z)
    k(x, z)
    assert [key[1:] for key in k._funcs] == [(False, False)] and not k._restrict_ok
    # restrict=False: the plain kernel always
    k = elementwise.ElementwiseKernel(
        "float *x, float *z", "z[i] = x[i]", "plain_copy", restrict=False
    )
    k(x, z)
    assert [key[1:] for key in k._funcs] == [(False, False)]


@pytest.mark.standin
def test_elementwise_quick_call_packs_struct_scalars_as_the_checked_call(standin, ctx):
    # a struct scalar of another struct dtype of the same size is converted
    # field by field (float3 from int3), never passed as its bytes
    import pygpu.gpuarray as ga
    from pygpu.gpuarray import vec

    k = elementwise.ElementwiseKernel("float3 p, float *out", "out[i] = p.x", "take_x")
    out = ga.zeros(10, np.float32)
    for value in (vec.make_int3(1, 2, 3), vec.make_float3(1, 2, 3)):
        k(value[()] if isinstance(value, np.ndarray) else value, out)
        assert standin.last_launch().params[:12] == np.array([1, 2, 3], np.float32).tobytes()
    with pytest.raises(TypeError):
        k(np.zeros((), [("x", "f8"), ("y", "f4")])[()], out)


@pytest.mark.driver
def test_elementwise_freed_array_is_named(ctx):
    import pygpu.gpuarray as ga

    k = elementwise.ElementwiseKernel("float *x, float *z", "z[i] = x[i]", "copy_freed")
    x, z = ga.zeros(100, np.float32), ga.zeros(100, np.float32)
    x.gpudata.free()
    with pytest.raises(drv.LogicError, match="copy_freed.*freed|freed.*copy_freed"):
        k(x, z)


def test_elementwise_kernel_errors():
    with pytest.raises(ValueError, match="at least one array"):
        elementwise.ElementwiseKernel("float a", "a = 1")
    with pytest.raises(TypeError, match="operation must be a str"):
        elementwise.ElementwiseKernel("float *a", 3)
    with pytest.raises(TypeError, match="must be a VectorArg, a ScalarArg"):
        elementwise.ElementwiseKernel([3], "x")


# ---- against the stand-in: argument checking of calls ----


@pytest.mark.driver
def test_elementwise_call_checks(ctx):
    import pygpu.gpuarray as ga

    k = elementwise.ElementwiseKernel("float a, float *x", "x[i] = a", "set_a")
    x = ga.zeros(10, np.float32)
    with pytest.raises(TypeError, match=r"takes 2 arguments \(a, x\), got 1"):
        k(1.0)
    with pytest.raises(TypeError, match="argument 'x' is float \\* but the array is float64"):
        k(1.0, ga.zeros(10, np.float64))
    with pytest.raises(
        TypeError,
        match="argument 'x' is an array \\(float \\*\\) but got "
        "a NumPy array, which is in host memory",
    ):
        k(1.0, np.zeros(10, np.float32))
    with pytest.raises(RuntimeError, match="cannot deal with non-contiguous"):
        k(1.0, ga.zeros((4, 4), np.float32)[:, 1])
    with pytest.raises(TypeError, match="may not specify both range and slice"):
        k(1.0, x, range=slice(0, 3), slice=slice(0, 3))
    with pytest.raises(ValueError, match="step of range/slice may not be 0"):
        k(1.0, x, range=slice(0, 3, 0))
    with pytest.raises(TypeError, match="argument 'a' is a scalar"):
        k(x, x)
    with pytest.raises(TypeError, match="cannot hold the complex value"):
        k(1j, x)
    with pytest.raises(TypeError, match="unexpected keyword"):
        k(1.0, x, strem=None)


# ---- on the GPU ----


@pytest.mark.gpu
def test_elementwise_linear_combination(ctx, rng):
    import pygpu.gpuarray as ga

    k = elementwise.ElementwiseKernel(
        "float a, float *x, float b, float *y, float *z",
        "z[i] = a*x[i] + b*y[i]",
        "linear_combination",
    )
    x = rng.standard_normal(100003).astype(np.float32)
    y = rng.standard_normal(100003).astype(np.float32)
    z = ga.empty_like(ga.to_gpu(x))
    k(5, ga.to_gpu(x), 6.5, ga.to_gpu(y), z)
    np.testing.assert_allclose(
        z.get(), np.float32(5) * x + np.float32(6.5) * y, rtol=1e-6, atol=1e-6
    )


@pytest.mark.gpu
@pytest.mark.parametrize("n", [1, 1000, 100003, 5_000_003])
def test_elementwise_restrict_and_aliased_calls(ctx, rng, n):
    # disjoint arrays take the __restrict__ kernel (four elements a thread
    # per round from about 4.3M elements on an H200, then the rest); an
    # array passed twice or overlapping views take the plain one
    import pygpu.gpuarray as ga

    k = elementwise.ElementwiseKernel(
        "float a, float *x, float *y, float *z", "z[i] = a * x[i] + y[i]", "axpy"
    )
    a = np.float32(rng.uniform(-3, 3))
    x = rng.standard_normal(n).astype(np.float32)
    y = rng.standard_normal(n).astype(np.float32)
    x_gpu, y_gpu = ga.to_gpu(x), ga.to_gpu(y)
    z_gpu = ga.empty_like(x_gpu)
    k(a, x_gpu, y_gpu, z_gpu)
    np.testing.assert_allclose(z_gpu.get(), a * x + y, rtol=1e-6, atol=1e-6)
    k(a, x_gpu, y_gpu, y_gpu)  # y = a*x + y in place
    np.testing.assert_allclose(y_gpu.get(), a * x + y, rtol=1e-6, atol=1e-6)
    if n > 1:
        # overlapping views of one buffer as the inputs: z[i] = a*x[i] + x[i+1]
        w = ga.to_gpu(x)
        k(a, w[:-1], w[1:], z_gpu[:-1])
        np.testing.assert_allclose(z_gpu.get()[:-1], a * x[:-1] + x[1:], rtol=1e-6, atol=1e-6)
    assert sorted(key[1:] for key in k._funcs) == [(False, False), (False, True)]


@pytest.mark.gpu
@pytest.mark.parametrize(
    "slc",
    [
        slice(5, 20000),
        slice(5, 20000, 17),
        slice(3000, 5, -1),
        slice(1000, -1),
        slice(None, None, -3),
    ],
)
def test_elementwise_slice(ctx, rng, slc):
    import pygpu.gpuarray as ga

    k = elementwise.ElementwiseKernel("float *z, float v", "z[i] = v", "set_v")
    host = rng.standard_normal(50000).astype(np.float32)
    a = ga.to_gpu(host)
    v = np.float32(rng.standard_normal())
    k(a, v, slice=slc)
    host[slc] = v
    np.testing.assert_array_equal(a.get(), host)
    k2 = elementwise.ElementwiseKernel("float *z, float v", "z[i] = v", "set_v2")
    b = ga.to_gpu(host)
    k2(b, np.float32(7), range=slice(3, 40, 2))
    host[3:40:2] = 7
    np.testing.assert_array_equal(b.get(), host)


@pytest.mark.gpu
def test_elementwise_complex_and_preamble(ctx, rng):
    import pygpu.gpuarray as ga

    k = elementwise.ElementwiseKernel(
        "pycuda::complex<float> *z, pycuda::complex<float> *x, float s",
        "z[i] = scale(pycuda::conj(x[i]) * x[i], s)",
        "cplx",
        preamble="__device__ pycuda::complex<float> scale(pycuda::complex<float> v, "
        "float s) { return v * s; }",
    )
    x = (rng.standard_normal(1000) + 1j * rng.standard_normal(1000)).astype(np.complex64)
    z = ga.empty(1000, np.complex64)
    k(z, ga.to_gpu(x), np.float32(0.5))
    np.testing.assert_allclose(z.get(), (np.conj(x) * x) * 0.5, rtol=1e-5, atol=1e-6)


@pytest.mark.gpu
def test_elementwise_loop_prep_after_loop(ctx, rng):
    import pygpu.gpuarray as ga

    k = elementwise.ElementwiseKernel(
        "int *x, int *count",
        "x[i] = x[i] * 3 + k",
        "prep",
        loop_prep="int k = 11",
        after_loop="if (tid == 0 && blockIdx.x == 0) count[0] = k",
    )
    host = rng.integers(-1000, 1000, 7777).astype(np.int32)
    x = ga.to_gpu(host)
    c = ga.zeros(1, np.int32)
    k(x, c)
    np.testing.assert_array_equal(x.get(), host * 3 + 11)
    assert c.get()[0] == 11
