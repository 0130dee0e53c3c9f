"""Types of pygpu.cumath, whose element-wise functions are made at import
(cumath.py's _make_unary), so type checkers cannot see them there.
tests/project/test_packaging.py checks that this stub names exactly the module's
public names."""

from typing import Optional, Tuple

import numpy as np

from pygpu.driver import Stream as Stream  # re-exported (PyCUDA's cumath has it)
from pygpu.gpuarray import GPUArray

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

UNARY: dict[str, bool]

def fabs(
    array: GPUArray,
    stream_or_out: "Stream | GPUArray | None" = None,
    *,
    out: Optional[GPUArray] = None,
    stream: Optional[Stream] = None,
) -> GPUArray: ...
def ceil(
    array: GPUArray,
    stream_or_out: "Stream | GPUArray | None" = None,
    *,
    out: Optional[GPUArray] = None,
    stream: Optional[Stream] = None,
) -> GPUArray: ...
def floor(
    array: GPUArray,
    stream_or_out: "Stream | GPUArray | None" = None,
    *,
    out: Optional[GPUArray] = None,
    stream: Optional[Stream] = None,
) -> GPUArray: ...
def trunc(
    array: GPUArray,
    stream_or_out: "Stream | GPUArray | None" = None,
    *,
    out: Optional[GPUArray] = None,
    stream: Optional[Stream] = None,
) -> GPUArray: ...
def rint(
    array: GPUArray,
    stream_or_out: "Stream | GPUArray | None" = None,
    *,
    out: Optional[GPUArray] = None,
    stream: Optional[Stream] = None,
) -> GPUArray: ...
def exp(
    array: GPUArray,
    stream_or_out: "Stream | GPUArray | None" = None,
    *,
    out: Optional[GPUArray] = None,
    stream: Optional[Stream] = None,
) -> GPUArray: ...
def exp2(
    array: GPUArray,
    stream_or_out: "Stream | GPUArray | None" = None,
    *,
    out: Optional[GPUArray] = None,
    stream: Optional[Stream] = None,
) -> GPUArray: ...
def expm1(
    array: GPUArray,
    stream_or_out: "Stream | GPUArray | None" = None,
    *,
    out: Optional[GPUArray] = None,
    stream: Optional[Stream] = None,
) -> GPUArray: ...
def log(
    array: GPUArray,
    stream_or_out: "Stream | GPUArray | None" = None,
    *,
    out: Optional[GPUArray] = None,
    stream: Optional[Stream] = None,
) -> GPUArray: ...
def log2(
    array: GPUArray,
    stream_or_out: "Stream | GPUArray | None" = None,
    *,
    out: Optional[GPUArray] = None,
    stream: Optional[Stream] = None,
) -> GPUArray: ...
def log10(
    array: GPUArray,
    stream_or_out: "Stream | GPUArray | None" = None,
    *,
    out: Optional[GPUArray] = None,
    stream: Optional[Stream] = None,
) -> GPUArray: ...
def log1p(
    array: GPUArray,
    stream_or_out: "Stream | GPUArray | None" = None,
    *,
    out: Optional[GPUArray] = None,
    stream: Optional[Stream] = None,
) -> GPUArray: ...
def sqrt(
    array: GPUArray,
    stream_or_out: "Stream | GPUArray | None" = None,
    *,
    out: Optional[GPUArray] = None,
    stream: Optional[Stream] = None,
) -> GPUArray: ...
def cbrt(
    array: GPUArray,
    stream_or_out: "Stream | GPUArray | None" = None,
    *,
    out: Optional[GPUArray] = None,
    stream: Optional[Stream] = None,
) -> GPUArray: ...
def sin(
    array: GPUArray,
    stream_or_out: "Stream | GPUArray | None" = None,
    *,
    out: Optional[GPUArray] = None,
    stream: Optional[Stream] = None,
) -> GPUArray: ...
def cos(
    array: GPUArray,
    stream_or_out: "Stream | GPUArray | None" = None,
    *,
    out: Optional[GPUArray] = None,
    stream: Optional[Stream] = None,
) -> GPUArray: ...
def tan(
    array: GPUArray,
    stream_or_out: "Stream | GPUArray | None" = None,
    *,
    out: Optional[GPUArray] = None,
    stream: Optional[Stream] = None,
) -> GPUArray: ...
def asin(
    array: GPUArray,
    stream_or_out: "Stream | GPUArray | None" = None,
    *,
    out: Optional[GPUArray] = None,
    stream: Optional[Stream] = None,
) -> GPUArray: ...
def acos(
    array: GPUArray,
    stream_or_out: "Stream | GPUArray | None" = None,
    *,
    out: Optional[GPUArray] = None,
    stream: Optional[Stream] = None,
) -> GPUArray: ...
def atan(
    array: GPUArray,
    stream_or_out: "Stream | GPUArray | None" = None,
    *,
    out: Optional[GPUArray] = None,
    stream: Optional[Stream] = None,
) -> GPUArray: ...
def sinh(
    array: GPUArray,
    stream_or_out: "Stream | GPUArray | None" = None,
    *,
    out: Optional[GPUArray] = None,
    stream: Optional[Stream] = None,
) -> GPUArray: ...
def cosh(
    array: GPUArray,
    stream_or_out: "Stream | GPUArray | None" = None,
    *,
    out: Optional[GPUArray] = None,
    stream: Optional[Stream] = None,
) -> GPUArray: ...
def tanh(
    array: GPUArray,
    stream_or_out: "Stream | GPUArray | None" = None,
    *,
    out: Optional[GPUArray] = None,
    stream: Optional[Stream] = None,
) -> GPUArray: ...
def asinh(
    array: GPUArray,
    stream_or_out: "Stream | GPUArray | None" = None,
    *,
    out: Optional[GPUArray] = None,
    stream: Optional[Stream] = None,
) -> GPUArray: ...
def acosh(
    array: GPUArray,
    stream_or_out: "Stream | GPUArray | None" = None,
    *,
    out: Optional[GPUArray] = None,
    stream: Optional[Stream] = None,
) -> GPUArray: ...
def atanh(
    array: GPUArray,
    stream_or_out: "Stream | GPUArray | None" = None,
    *,
    out: Optional[GPUArray] = None,
    stream: Optional[Stream] = None,
) -> GPUArray: ...
def fmod(arg: GPUArray, mod: GPUArray, stream: Optional[Stream] = None) -> GPUArray: ...
def frexp(arg: GPUArray, stream: Optional[Stream] = None) -> Tuple[GPUArray, GPUArray]: ...
def ldexp(
    significand: GPUArray, exponent: GPUArray, stream: Optional[Stream] = None
) -> GPUArray: ...
def modf(arg: GPUArray, stream: Optional[Stream] = None) -> Tuple[GPUArray, GPUArray]: ...
def kernel_name(
    func: str, dtype: "np.typing.DTypeLike", exponent_dtype: "np.typing.DTypeLike | None" = None
) -> str: ...
def source(dtype: "np.typing.DTypeLike") -> str: ...
