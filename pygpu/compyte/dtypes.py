"""C type names of NumPy dtypes, as pycuda.compyte.dtypes.

TYPE_REGISTRY is the registry pygpu's kernel generators read
(pygpu.tools.dtype_to_ctype, ElementwiseKernel, ReductionKernel, ...):
a struct registered here is known to them too.
"""

import re
import struct
import sys
import warnings
from typing import TypeVar

import numpy as np

__all__ = [
    "ArgTypeT",
    "DTYPE_TO_NAME",
    "DTypeRegistry",
    "NAME_TO_DTYPE",
    "TYPE_REGISTRY",
    "TypeNameNotKnown",
    "dtype_to_ctype",
    "fill_registry_with_c99_complex_types",
    "fill_registry_with_c99_stdint_types",
    "fill_registry_with_c_types",
    "fill_registry_with_opencl_c_types",
    "get_or_register_dtype",
    "parse_c_arg_backend",
    "register_dtype",
]


class TypeNameNotKnown(RuntimeError):
    """A C type name no dtype is registered under."""


def _norm(name):
    return " ".join(name.replace("*", " * ").split()).replace(" *", "*")


class DTypeRegistry:
    """dtype <-> C type names, both ways (dtype_to_name, name_to_dtype)."""

    def __init__(self):
        self.dtype_to_name = {}
        self.name_to_dtype = {}

    def get_or_register_dtype(self, names, dtype=None):
        """Without dtype: the dtype registered under the names (all of them
        must name the same one; TypeNameNotKnown if none is known).  With
        dtype: register it under every name and return the dtype object
        registered first for an equal dtype; a name already registered as
        another dtype is a RuntimeError."""
        if isinstance(names, str):
            names = [names]
        names = [_norm(n) for n in names]
        if not names:
            raise ValueError("get_or_register_dtype(): no C type name given")
        if dtype is None:
            found = set()
            for n in names:
                try:
                    found.add(self.name_to_dtype[n])
                except KeyError:
                    raise TypeNameNotKnown("no dtype is registered as the C type %r" % n) from None
            if len(found) != 1:
                raise ValueError("the names %r are registered as different dtypes" % (names,))
            return found.pop()
        dtype = np.dtype(dtype)
        existing = self.dtype_to_name.get(dtype)
        if existing is not None:
            dtype = self.name_to_dtype.get(existing, dtype)
        for n in names:
            old = self.name_to_dtype.get(n)
            if old is not None and old != dtype:
                raise RuntimeError("name '%s' already registered to different dtype" % n)
        for n in names:
            self.name_to_dtype.setdefault(n, dtype)
        if existing is None:
            self.dtype_to_name[dtype] = names[0]
        self.dtype_to_name.setdefault(str(dtype), names[0])
        return dtype

    def dtype_to_ctype(self, dtype):
        """The C type name registered for dtype (ValueError if none)."""
        if dtype is None:
            raise ValueError("dtype may not be None")
        dtype = np.dtype(dtype)
        try:
            return self.dtype_to_name[dtype]
        except KeyError:
            raise ValueError("unable to map dtype '%s'" % dtype) from None


def fill_registry_with_c_types(reg, respect_windows, include_bool=True):
    """C's own integer and floating types (long is 64 bits where the
    platform says so; 'long long' on 64-bit Windows with respect_windows)."""
    if include_bool:
        reg.get_or_register_dtype("bool", np.bool_)
    reg.get_or_register_dtype(["signed char", "char"], np.int8)
    reg.get_or_register_dtype("unsigned char", np.uint8)
    reg.get_or_register_dtype(
        ["short", "signed short", "signed short int", "short signed int"], np.int16
    )
    reg.get_or_register_dtype(
        ["unsigned short", "unsigned short int", "short unsigned int"], np.uint16
    )
    reg.get_or_register_dtype(["int", "signed int"], np.int32)
    reg.get_or_register_dtype(["unsigned", "unsigned int"], np.uint32)
    if struct.calcsize("@P") == 8:
        i64 = "long long" if (respect_windows and sys.platform == "win32") else "long"
        reg.get_or_register_dtype(
            [i64, i64 + " int", "signed %s int" % i64, i64 + " signed int"], np.int64
        )
        reg.get_or_register_dtype(
            ["unsigned " + i64, "unsigned %s int" % i64, i64 + " unsigned int"], np.uint64
        )
    reg.get_or_register_dtype("float", np.float32)
    reg.get_or_register_dtype("double", np.float64)


def fill_registry_with_opencl_c_types(reg):
    """OpenCL C's names (uchar, ushort, uint, ulong, ...)."""
    reg.get_or_register_dtype(["char", "signed char"], np.int8)
    reg.get_or_register_dtype(["uchar", "unsigned char"], np.uint8)
    reg.get_or_register_dtype(
        ["short", "signed short", "signed short int", "short signed int"], np.int16
    )
    reg.get_or_register_dtype(
        ["ushort", "unsigned short", "unsigned short int", "short unsigned int"], np.uint16
    )
    reg.get_or_register_dtype(["int", "signed int"], np.int32)
    reg.get_or_register_dtype(["uint", "unsigned", "unsigned int"], np.uint32)
    reg.get_or_register_dtype(["long", "long int", "signed long int", "long signed int"], np.int64)
    reg.get_or_register_dtype(
        ["ulong", "unsigned long", "unsigned long int", "long unsigned int"], np.uint64
    )
    reg.get_or_register_dtype(["intptr_t"], np.intp)
    reg.get_or_register_dtype(["uintptr_t"], np.uintp)
    reg.get_or_register_dtype("float", np.float32)
    reg.get_or_register_dtype("double", np.float64)


def fill_registry_with_c99_stdint_types(reg):
    """<stdint.h>'s fixed-width names."""
    reg.get_or_register_dtype("bool", np.bool_)
    for bits in (8, 16, 32, 64):
        reg.get_or_register_dtype("int%d_t" % bits, np.dtype("int%d" % bits))
        reg.get_or_register_dtype("uint%d_t" % bits, np.dtype("uint%d" % bits))
    reg.get_or_register_dtype("uintptr_t", np.uintp)
    reg.get_or_register_dtype("float", np.float32)
    reg.get_or_register_dtype("double", np.float64)


def fill_registry_with_c99_complex_types(reg):
    """C99's complex types."""
    reg.get_or_register_dtype("float complex", np.complex64)
    reg.get_or_register_dtype("double complex", np.complex128)
    reg.get_or_register_dtype("long double complex", np.clongdouble)


def _shared_registry():
    """The registry over pygpu.tools' tables, so the kernel generators see
    what is registered here."""
    from pygpu import tools

    reg = DTypeRegistry()
    reg.dtype_to_name = tools._registry.dtype_to_name
    reg.name_to_dtype = tools._registry.name_to_dtype
    return reg


TYPE_REGISTRY = _shared_registry()
# PyCUDA's older names of the registry's two tables
DTYPE_TO_NAME = TYPE_REGISTRY.dtype_to_name
NAME_TO_DTYPE = TYPE_REGISTRY.name_to_dtype

dtype_to_ctype = TYPE_REGISTRY.dtype_to_ctype
get_or_register_dtype = TYPE_REGISTRY.get_or_register_dtype

ArgTypeT = TypeVar("ArgTypeT")

_DECLARATOR = re.compile(r"(\**)\s*([_a-zA-Z0-9]+)(\s*\[[ 0-9]*\])*\s*$")


def parse_c_arg_backend(c_arg, scalar_arg_factory, vec_arg_factory, name_to_dtype=None):
    """Parse a C parameter declaration ('const float *x', 'int n[4]'):
    vec_arg_factory(dtype, name) for a pointer or an array,
    scalar_arg_factory(dtype, name) otherwise.  name_to_dtype: a
    DTypeRegistry, a callable from type name to dtype, or None (this
    module's registry)."""
    if isinstance(name_to_dtype, DTypeRegistry):
        lookup = name_to_dtype.name_to_dtype.__getitem__
    elif name_to_dtype is None:
        lookup = NAME_TO_DTYPE.__getitem__
    else:
        lookup = name_to_dtype
    for q in ("const", "volatile", "__restrict__", "restrict"):
        c_arg = c_arg.replace(q, "")
    m = _DECLARATOR.search(c_arg)
    if m is None:
        raise ValueError("couldn't parse C declarator '%s'" % c_arg)
    factory = vec_arg_factory if (m.group(1) or m.group(3) is not None) else scalar_arg_factory
    tp = " ".join(c_arg[: m.start()].split())
    try:
        dtype = lookup(tp)
    except KeyError:
        raise ValueError("unknown type '%s'" % tp) from None
    return factory(dtype, m.group(2))


def register_dtype(dtype, c_names, alias_ok=False):
    """Deprecated (as in PyCUDA): get_or_register_dtype.  A dtype that is
    already registered under another name is a RuntimeError unless
    alias_ok."""
    warnings.warn(
        "register_dtype is deprecated. Use get_or_register_dtype instead.",
        DeprecationWarning,
        stacklevel=2,
    )
    if isinstance(c_names, str):
        c_names = [c_names]
    dtype = np.dtype(dtype)
    name = TYPE_REGISTRY.dtype_to_name.get(dtype)
    if not alias_ok and name is not None:
        raise RuntimeError(
            "dtype '%s' already registered (as '%s', new names '%s')"
            % (dtype, name, "', '".join(c_names))
        )
    TYPE_REGISTRY.get_or_register_dtype(c_names, dtype)
