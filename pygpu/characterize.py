"""pygpu.characterize: facts about the platform and the current device, as
pycuda.characterize (platform_bits, has_stack, has_double_support, sizeof).
"""

from typing import Any
import sys

import numpy as np

from pygpu import driver as _drv

__all__ = ["platform_bits", "has_stack", "has_double_support", "sizeof"]


def platform_bits() -> int:
    """64 on a 64-bit Python, else 32."""
    return 64 if sys.maxsize > 2**32 else 32


def has_stack() -> bool:
    """Whether the current device has a call stack (compute capability >= 2.0:
    every device CUDA 13 supports)."""
    return _drv.Context.get_device().compute_capability() >= (2, 0)


def has_double_support() -> bool:
    """Whether the current device computes in double precision (compute
    capability >= 1.3: every device CUDA 13 supports)."""
    return _drv.Context.get_device().compute_capability() >= (1, 3)


_sizes: dict[Any, Any] = {}  # (context, type_name, preamble) -> int


def sizeof(type_name: str, preamble: str = "") -> int:
    """sizeof(type_name) in device code, after preamble (for example
    sizeof("curandStateXORWOW", "#include <curand_kernel.h>")).  Compiled
    once per context and arguments; the size is read from a __device__
    variable, no kernel is launched."""
    if not isinstance(type_name, str) or not type_name.strip():
        raise TypeError("type_name must be a non-empty str, not %r" % (type_name,))
    if not isinstance(preamble, str):
        raise TypeError("preamble must be a str, not %s" % type(preamble).__name__)
    key = (_drv.Context.get_current(), type_name, preamble)
    size = _sizes.get(key)
    if size is None:
        from pygpu.compiler import SourceModule

        mod: Any = SourceModule(sizeof_source(type_name, preamble), no_extern_c=True)
        ptr, _ = mod.get_global("pygpu_sizeof")
        out = np.zeros(1, np.uint64)
        _drv.memcpy_dtoh(out, ptr)
        size = int(out[0])
        _sizes[(mod.module.context, type_name, preamble)] = size
    return size


def sizeof_source(type_name: str, preamble: str = "") -> str:
    """The source sizeof() compiles."""
    return '%s\nextern "C" __device__ unsigned long long pygpu_sizeof = sizeof(%s);\n' % (
        preamble,
        type_name,
    )


from pygpu.tools import context_dependent_memoize  # noqa: E402,F401  (PyCUDA's characterize has it)
