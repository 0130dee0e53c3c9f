"""pygpu.cumath: element-wise math functions on GPUArrays, as pycuda.cumath.

    from pygpu import cumath, gpuarray
    y = cumath.sin(x_gpu)                  # a new array
    cumath.exp(x_gpu, out=y, stream=s)     # into y, on stream s

Unary functions take float32, float64 and (where marked in UNARY) complex64
and complex128 arrays; the result has the argument's dtype.  PyCUDA's set
(fabs, ceil, floor, exp, log, log10, sqrt, sin, cos, tan, asin, acos, atan,
sinh, cosh, tanh, fmod, frexp, ldexp, modf) plus asinh, acosh, atanh, exp2,
expm1, log2, log1p, cbrt, trunc, rint.  The kernels are in
kernels/cumath.cuh: one grid-stride kernel per function and dtype, compiled
once per dtype (all functions of a dtype in one module, cached in memory per
context and on disk by SourceModule).
"""

import warnings

import numpy as np

from pygpu import driver as _drv
from pygpu import gpuarray as _ga
from pygpu.gpuarray import GPUArray as _GPUArray, empty_like as _empty_like

__all__ = [
    "fabs",
    "ceil",
    "floor",
    "trunc",
    "rint",
    "exp",
    "exp2",
    "expm1",
    "log",
    "log2",
    "log10",
    "log1p",
    "sqrt",
    "cbrt",
    "sin",
    "cos",
    "tan",
    "asin",
    "acos",
    "atan",
    "sinh",
    "cosh",
    "tanh",
    "asinh",
    "acosh",
    "atanh",
    "fmod",
    "frexp",
    "ldexp",
    "modf",
    "UNARY",
]

# name -> takes complex arguments
UNARY = {
    "fabs": False,
    "ceil": False,
    "floor": False,
    "trunc": False,
    "rint": False,
    "exp2": False,
    "expm1": False,
    "log2": False,
    "log1p": False,
    "cbrt": False,
    "exp": True,
    "log": True,
    "log10": True,
    "sqrt": True,
    "sin": True,
    "cos": True,
    "tan": True,
    "asin": True,
    "acos": True,
    "atan": True,
    "sinh": True,
    "cosh": True,
    "tanh": True,
    "asinh": True,
    "acosh": True,
    "atanh": True,
}

_CTYPES = {
    np.dtype(np.float32): "float",
    np.dtype(np.float64): "double",
    np.dtype(np.complex64): "pygpu_cplx<float>",
    np.dtype(np.complex128): "pygpu_cplx<double>",
}
_REAL = (np.dtype(np.float32), np.dtype(np.float64))
# ldexp's exponent array: these dtypes, truncated toward zero to int
_EXPONENT_CTYPES = {
    np.dtype(np.float32): "float",
    np.dtype(np.float64): "double",
    np.dtype(np.int32): "int",
    np.dtype(np.int64): "long long",
    np.dtype(np.int16): "short",
    np.dtype(np.int8): "signed char",
}

_BLOCK = 256
# the current context as this thread remembers it (no driver call per call)
_get_current = _drv._driver._current_context
_DA = _drv.DeviceAllocation
_gate = _ga._check_operands
_ONLY_CONTIGUOUS = "only contiguous arrays may be used as arguments to this operation"


def _tag(dtype):
    return dtype.name  # float32, complex128, ...


def kernel_name(func, dtype, exponent_dtype=None):
    """The kernel's name in the module of dtype: cumath_sin_float32,
    cumath_ldexp_float32_int32."""
    name = "cumath_%s_%s" % (func, _tag(np.dtype(dtype)))
    if exponent_dtype is not None:
        name += "_" + _tag(np.dtype(exponent_dtype))
    return name


def source(dtype):
    """The CUDA source of the module for one dtype: kernels/cumath.cuh and one
    instantiation line per function (for compile() without a GPU)."""
    from pygpu.compiler import kernel_source

    dtype = np.dtype(dtype)
    ctype = _CTYPES.get(dtype)
    if ctype is None:
        raise TypeError(
            "cumath takes float32, float64, complex64 or complex128 arrays, not %s" % dtype
        )
    complex_ = dtype.kind == "c"
    lines = [kernel_source("cumath.cuh"), "", "// instantiations for %s" % dtype]
    for func, takes_complex in UNARY.items():
        if takes_complex or not complex_:
            lines.append(
                "PYGPU_CUMATH_UNARY(%s, %s, op_%s)" % (kernel_name(func, dtype), ctype, func)
            )
    if not complex_:
        lines.append("PYGPU_CUMATH_FMOD(%s, %s)" % (kernel_name("fmod", dtype), ctype))
        lines.append("PYGPU_CUMATH_FREXP(%s, %s)" % (kernel_name("frexp", dtype), ctype))
        lines.append("PYGPU_CUMATH_MODF(%s, %s)" % (kernel_name("modf", dtype), ctype))
        for edt, ect in _EXPONENT_CTYPES.items():
            lines.append(
                "PYGPU_CUMATH_LDEXP(%s, %s, %s)" % (kernel_name("ldexp", dtype, edt), ctype, ect)
            )
    return "\n".join(lines) + "\n"


class _Kernels:
    """The loaded module of one dtype in one context, its functions prepared."""

    __slots__ = ("funcs", "max_grid", "module")

    def __init__(self, dtype):
        from pygpu.compiler import SourceModule

        self.module = SourceModule(source(dtype), no_extern_c=True)
        self.funcs = {}
        dev = self.module.module.context.device
        sms = dev.get_attribute(_drv.device_attribute.MULTIPROCESSOR_COUNT)
        per_sm = dev.get_attribute(_drv.device_attribute.MAX_THREADS_PER_MULTIPROCESSOR)
        # one full wave of the GPU; a grid-stride loop does the rest
        self.max_grid = max(1, sms * max(1, per_sm // _BLOCK))

    def get(self, name, types):
        f = self.funcs.get(name)
        if f is None:
            f = self.module.get_function(name)
            f.prepare(types)
            self.funcs[name] = f
        return f


_kernels = {}  # (context, dtype) -> _Kernels


def _module(dtype):
    ctx = _drv.Context.get_current()
    key = (ctx, dtype)
    k = _kernels.get(key)
    if k is None or ctx is None or ctx.detached:
        k = _Kernels(dtype)
        ctx = k.module.module.context
        _kernels[(ctx, dtype)] = k
    return k


def _launch_config(k, n, width):
    work = (n + width - 1) // width
    grid = min((work + _BLOCK - 1) // _BLOCK, k.max_grid)
    return (max(grid, 1), 1, 1), (_BLOCK, 1, 1)


def _check_array(a, what):
    try:
        dtype = a.dtype
        forc = a.flags.forc
        a.ptr
    except AttributeError:
        raise TypeError("%s must be a GPUArray, not %s" % (what, type(a).__name__)) from None
    if not forc:
        raise RuntimeError(_ONLY_CONTIGUOUS)
    return dtype


def _check_same(a, b, what_a, what_b):
    if a.shape != b.shape:
        raise ValueError("%s has shape %s but %s has shape %s" % (what_b, b.shape, what_a, a.shape))


def _new_like(a):
    from pygpu import gpuarray

    return gpuarray.empty_like(a)


def _check_out(out, array, dtype):
    _check_array(out, "out")
    if out.dtype != dtype:
        raise TypeError("out has dtype %s but the result is %s" % (out.dtype, dtype))
    if out.shape != array.shape:
        raise ValueError(
            "out has shape %s but the argument has shape %s" % (out.shape, array.shape)
        )
    if out.size > 1 and out.strides != array.strides:
        raise ValueError(
            "out has strides %s but the argument has strides %s (C vs Fortran "
            "order)" % (out.strides, array.strides)
        )


def _make_unary(name, takes_complex):
    doc_kinds = "float32, float64, complex64, complex128" if takes_complex else "float32, float64"

    fast = {}  # (context, dtype) -> (Function, launch configuration per size)
    what = "cumath." + name

    def f(array, stream_or_out=None, *, out=None, stream=None):
        if (
            stream_or_out is None
            and array.__class__ is _GPUArray
            and (array._c or array._f)
            and (
                out is None
                or (
                    out.__class__ is _GPUArray
                    and out.dtype == array.dtype
                    and out.shape == array.shape
                    and out.strides == array.strides
                )
            )
        ):
            # the common call, f(x) or f(x, out=y) on dense arrays of one
            # layout: the kernel for this context and dtype found once
            ctx = _get_current()
            ent = fast.get((ctx, array.dtype))
            # proved here: both arrays' memory is a DeviceAllocation of this
            # context that holds them (dense, from the allocation's start:
            # nbytes <= size); a freed one is refused by the launch; anything
            # else goes through the gate
            if ent is not None:
                g = array.gpudata
                if not (
                    g.__class__ is _DA
                    and g.context is ctx
                    and array.nbytes <= g.size
                    and (
                        out is None
                        or (
                            out.gpudata.__class__ is _DA
                            and out.gpudata.context is ctx
                            and out.nbytes <= out.gpudata.size
                        )
                    )
                ):
                    _gate(what, (array, out), ctx)
                if out is None:
                    out = _empty_like(array)
                n = array.size
                if n:
                    func, k, width, configs = ent
                    cfg = configs.get(n)
                    if cfg is None:
                        if len(configs) >= 256:
                            configs.clear()
                        cfg = configs[n] = _launch_config(k, n, width)
                    func.prepared_async_call(cfg[0], cfg[1], stream, array.gpudata, out.gpudata, n)
                return out
        if stream_or_out is not None:
            warnings.warn(
                "please use 'out' or 'stream' keyword arguments", DeprecationWarning, stacklevel=2
            )
            if isinstance(stream_or_out, _drv.Stream):
                if stream is None:
                    stream = stream_or_out
            elif out is None:
                out = stream_or_out
        dtype = _check_array(array, "the argument")
        if dtype not in _CTYPES:
            raise TypeError("cumath.%s takes %s arrays, not %s" % (name, doc_kinds, dtype))
        if dtype.kind == "c" and not takes_complex:
            raise TypeError("cumath.%s does not take complex arguments (%s)" % (name, dtype))
        if out is not None:
            _check_out(out, array, dtype)
        _gate("cumath.%s" % name, (array, out))
        k = _kernels.get((_drv.Context.get_current(), dtype))
        if k is None:
            k = _module(dtype)
        if out is None and array.__class__ is not _GPUArray:
            # PyCUDA's result: array._new_like_me() (a subclass's own type)
            from pygpu.gpuarray import _made_like

            out = _made_like(array)
            _check_out(out, array, dtype)
        if out is None:
            out = _new_like(array)
        n = array.size
        if n:
            func = k.funcs.get(name)
            if func is None:
                func = k.get(kernel_name(name, dtype), "PPQ")
            grid, block = _launch_config(k, n, max(1, 16 // dtype.itemsize))
            func.prepared_async_call(grid, block, stream, array.ptr, out.ptr, n)
            ctx = k.module.module.context
            if (ctx, dtype) not in fast and ctx is _get_current():
                fast[(ctx, dtype)] = (func, k, max(1, 16 // dtype.itemsize), {})
        return out

    f.__name__ = f.__qualname__ = name
    f.__doc__ = (
        "%s(array, *, out=None, stream=None): element-wise %s of a contiguous "
        "%s GPUArray, into out (same dtype, shape and order) or a new array, "
        "enqueued on stream.  A positional second argument is out or a stream "
        "(deprecated, as in PyCUDA)." % (name, name, doc_kinds)
    )
    return f


for _name, _cplx in UNARY.items():
    globals()[_name] = _make_unary(_name, _cplx)
del _name, _cplx


def _real_module(func, dtype):
    if dtype not in _REAL:
        raise TypeError("cumath.%s takes float32 or float64 arrays, not %s" % (func, dtype))
    return _module(dtype)


def fmod(arg, mod, stream=None):
    """The remainder of arg / mod with the sign of arg, element-wise (C's
    fmod): a new array.  arg and mod: contiguous, same dtype and shape."""
    dtype = _check_array(arg, "arg")
    mdtype = _check_array(mod, "mod")
    if mdtype != dtype:
        raise TypeError("fmod: arg is %s but mod is %s" % (dtype, mdtype))
    _check_same(arg, mod, "arg", "mod")
    k = _real_module("fmod", dtype)
    _gate("cumath.fmod", (arg, mod))
    mod = _ga._in_order_of(mod, arg)  # elements paired by index
    result = _new_like(arg)
    if arg.size:
        func = k.get(kernel_name("fmod", dtype), "PPPQ")
        grid, block = _launch_config(k, arg.size, 1)
        func.prepared_async_call(grid, block, stream, arg.ptr, mod.ptr, result.ptr, arg.size)
    return result


def frexp(arg, stream=None):
    """(significands, exponents) with arg == significand * 2**exponent,
    0.5 <= |significand| < 1; both arrays have arg's dtype."""
    dtype = _check_array(arg, "arg")
    k = _real_module("frexp", dtype)
    _gate("cumath.frexp", (arg,))
    sig = _new_like(arg)
    expt = _new_like(arg)
    if arg.size:
        func = k.get(kernel_name("frexp", dtype), "PPPQ")
        grid, block = _launch_config(k, arg.size, 1)
        func.prepared_async_call(grid, block, stream, arg.ptr, sig.ptr, expt.ptr, arg.size)
    return sig, expt


def ldexp(significand, exponent, stream=None):
    """significand * 2**exponent element-wise, a new array of significand's
    dtype; exponent is a float or signed integer array, truncated to int."""
    dtype = _check_array(significand, "significand")
    edtype = _check_array(exponent, "exponent")
    if edtype not in _EXPONENT_CTYPES:
        raise TypeError("ldexp: exponent must be a float or signed integer array, not %s" % edtype)
    _check_same(significand, exponent, "significand", "exponent")
    k = _real_module("ldexp", dtype)
    _gate("cumath.ldexp", (significand, exponent))
    exponent = _ga._in_order_of(exponent, significand)  # elements paired by index
    result = _new_like(significand)
    if significand.size:
        func = k.get(kernel_name("ldexp", dtype, edtype), "PPPQ")
        grid, block = _launch_config(k, significand.size, 1)
        func.prepared_async_call(
            grid, block, stream, significand.ptr, exponent.ptr, result.ptr, significand.size
        )
    return result


def modf(arg, stream=None):
    """(fracpart, intpart) of arg, both with arg's sign and dtype."""
    dtype = _check_array(arg, "arg")
    k = _real_module("modf", dtype)
    _gate("cumath.modf", (arg,))
    intpart = _new_like(arg)
    fracpart = _new_like(arg)
    if arg.size:
        func = k.get(kernel_name("modf", dtype), "PPPQ")
        grid, block = _launch_config(k, arg.size, 1)
        func.prepared_async_call(grid, block, stream, arg.ptr, intpart.ptr, fracpart.ptr, arg.size)
    return fracpart, intpart


from pygpu.driver import Stream  # noqa: E402,F401  (PyCUDA's cumath has it)
