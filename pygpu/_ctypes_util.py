"""C-type helpers shared by pygpu.reduction and pygpu.scan.

pygpu.tools provides dtype_to_ctype, parse_c_arg and context_dependent_memoize
(PyCUDA's names); where this copy of pygpu.tools does not have them yet, the
small private versions below stand in, so the generators work either way.
complex_source() is the text of the complex type generated kernels use
(pycuda::complex<float> and <double>, NumPy's layout).
"""
import os
import threading

import numpy as np

from pygpu import tools as _tools

__all__ = ["dtype_to_ctype", "parse_arguments", "context_dependent_memoize",
           "complex_source", "needs_complex", "is_vector"]

# ---- dtype -> C type ----

_CTYPES = {
    np.dtype(np.bool_): "bool",
    np.dtype(np.int8): "signed char",
    np.dtype(np.uint8): "unsigned char",
    np.dtype(np.int16): "short",
    np.dtype(np.uint16): "unsigned short",
    np.dtype(np.int32): "int",
    np.dtype(np.uint32): "unsigned int",
    np.dtype(np.int64): "long long",
    np.dtype(np.uint64): "unsigned long long",
    np.dtype(np.float32): "float",
    np.dtype(np.float64): "double",
    np.dtype(np.complex64): "pycuda::complex<float>",
    np.dtype(np.complex128): "pycuda::complex<double>",
}
_NAMES = {" ".join(v.split()): k for k, v in _CTYPES.items()}
_NAMES.update({"char": np.dtype(np.int8), "signed": np.dtype(np.int32),
               "unsigned": np.dtype(np.uint32), "long": np.dtype(np.int64),
               "unsigned long": np.dtype(np.uint64), "size_t": np.dtype(np.uint64),
               "ptrdiff_t": np.dtype(np.int64), "int64_t": np.dtype(np.int64),
               "uint64_t": np.dtype(np.uint64), "int32_t": np.dtype(np.int32),
               "uint32_t": np.dtype(np.uint32), "int8_t": np.dtype(np.int8),
               "uint8_t": np.dtype(np.uint8), "int16_t": np.dtype(np.int16),
               "uint16_t": np.dtype(np.uint16),
               "pygpu::complex<float>": np.dtype(np.complex64),
               "pygpu::complex<double>": np.dtype(np.complex128)})


def _own_dtype_to_ctype(dtype):
    dtype = np.dtype(dtype)
    try:
        return _CTYPES[dtype]
    except KeyError:
        raise ValueError("unable to map dtype '%s' to a C type" % dtype) from None


dtype_to_ctype = getattr(_tools, "dtype_to_ctype", _own_dtype_to_ctype)


# ---- kernel argument declarations ----

class _Arg:
    __slots__ = ("dtype", "name", "is_vector")

    def __init__(self, dtype, name, is_vector):
        self.dtype, self.name, self.is_vector = dtype, name, is_vector


_QUALIFIERS = {"const", "volatile", "__restrict__", "__restrict", "restrict"}


def _own_parse_c_arg(decl):
    text = decl.strip()
    name_end = len(text)
    start = name_end
    while start > 0 and (text[start - 1].isalnum() or text[start - 1] == "_"):
        start -= 1
    name, tp = text[start:], text[:start]
    if not name or name[0].isdigit() or not tp.strip():
        raise ValueError("cannot parse C argument %r (expected 'type name' or "
                         "'type *name')" % decl)
    vector = "*" in tp
    words = [w for w in tp.replace("*", " ").split() if w not in _QUALIFIERS]
    try:
        dtype = _NAMES[" ".join(words)]
    except KeyError:
        raise ValueError("C argument %r: unknown type %r" % (decl, " ".join(words))) from None
    return _Arg(dtype, name, vector)


def _split(arguments):
    """Split a C argument list at the commas outside <...> and (...)."""
    parts, depth, cur = [], 0, []
    for ch in arguments:
        if ch in "<(":
            depth += 1
        elif ch in ">)":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    parts.append("".join(cur))
    return [p for p in (q.strip() for q in parts)]


def is_vector(arg):
    """Whether a parsed argument (ours or pygpu.tools') is a pointer."""
    flag = getattr(arg, "is_vector", None)
    if flag is not None:
        return flag
    return type(arg).__name__ == "VectorArg"


def parse_arguments(arguments):
    """The arguments of a C parameter list (a str, or a list of str or of
    pygpu.tools VectorArg/ScalarArg): a list of objects with .dtype, .name
    and a pointer-ness is_vector() reads; also the declaration text."""
    if isinstance(arguments, str):
        decls = _split(arguments)
        if any(not d for d in decls):
            raise ValueError("empty argument in the argument list %r" % arguments)
    elif isinstance(arguments, (list, tuple)):
        decls = list(arguments)
    else:
        raise TypeError("arguments must be a str like 'const float *x, int n' or a list, "
                        "not %s" % type(arguments).__name__)
    parser = getattr(_tools, "parse_c_arg", _own_parse_c_arg)
    parsed, text = [], []
    for d in decls:
        if isinstance(d, str):
            a = parser(d)
            text.append(d.strip())
        elif hasattr(d, "dtype") and hasattr(d, "name"):
            a = d
            if hasattr(d, "declarator"):
                text.append(d.declarator())
            else:
                text.append("%s %s%s" % (dtype_to_ctype(a.dtype), "*" if is_vector(a) else "",
                                         a.name))
        else:
            raise TypeError("an argument must be a C declaration str or a VectorArg/ScalarArg, "
                            "not %s" % type(d).__name__)
        parsed.append(a)
    return parsed, ", ".join(text)


# ---- per-context memo ----

def _current_context():
    from pygpu import driver
    try:
        return driver.Context.get_current()
    except Exception:
        return None


def _own_context_dependent_memoize(func):
    cache = {}
    lock = threading.Lock()

    def wrapper(*args):
        key = (_current_context(),) + args
        try:
            return cache[key]
        except KeyError:
            pass
        value = func(*args)
        with lock:
            cache[key] = value
        return value

    wrapper.__name__ = func.__name__
    wrapper.__doc__ = func.__doc__
    wrapper.clear_cache = cache.clear
    return wrapper


context_dependent_memoize = getattr(_tools, "context_dependent_memoize",
                                    _own_context_dependent_memoize)


# ---- the complex type ----

_FALLBACK_COMPLEX = r"""
#pragma once
namespace pygpu {
template <typename T>
struct __align__(2 * sizeof(T)) complex {
    T _re, _im;
    __host__ __device__ complex(const T &re = T(), const T &im = T()) : _re(re), _im(im) {}
    __host__ __device__ T real() const { return _re; }
    __host__ __device__ T imag() const { return _im; }
    friend __host__ __device__ complex operator+(const complex &a, const complex &b)
    { return complex(a._re + b._re, a._im + b._im); }
    friend __host__ __device__ complex operator-(const complex &a, const complex &b)
    { return complex(a._re - b._re, a._im - b._im); }
    friend __host__ __device__ complex operator*(const complex &a, const complex &b)
    { return complex(a._re * b._re - a._im * b._im, a._re * b._im + a._im * b._re); }
    friend __host__ __device__ complex operator*(const complex &a, const T &b)
    { return complex(a._re * b, a._im * b); }
    friend __host__ __device__ complex operator*(const T &a, const complex &b)
    { return complex(a * b._re, a * b._im); }
    friend __host__ __device__ complex operator+(const complex &a, const T &b)
    { return complex(a._re + b, a._im); }
    friend __host__ __device__ complex operator+(const T &a, const complex &b)
    { return complex(a + b._re, b._im); }
    friend __host__ __device__ bool operator==(const complex &a, const complex &b)
    { return a._re == b._re && a._im == b._im; }
    friend __host__ __device__ bool operator!=(const complex &a, const complex &b)
    { return !(a == b); }
};
template <typename T> __host__ __device__ inline complex<T> conj(const complex<T> &z)
{ return complex<T>(z.real(), -z.imag()); }
}
namespace pycuda = pygpu;
"""

_complex_text = None


def complex_source():
    """The CUDA C text that defines pycuda::complex<T> (the arrays layer's
    kernels/elementwise_complex.cuh where it exists)."""
    global _complex_text
    if _complex_text is None:
        from pygpu import compiler
        path = os.path.join(compiler.KERNEL_DIR, "elementwise_complex.cuh")
        if os.path.isfile(path):
            _complex_text = compiler.kernel_source("elementwise_complex.cuh")
        else:
            _complex_text = _FALLBACK_COMPLEX
    return _complex_text


def needs_complex(*texts):
    """Whether generated source mentioning these texts needs the complex type."""
    return any("complex<" in t for t in texts if t)
