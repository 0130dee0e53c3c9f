"""pygpu.curandom: random numbers on the GPU, as pycuda.curandom.

    from pygpu import curandom
    x = curandom.rand((1000,))                       # uniform [0, 1), float32
    gen = curandom.XORWOWRandomNumberGenerator()
    y = gen.gen_normal((10**8,), np.float32)         # standard normal
    gen.fill_uniform(y)

rand() is a stateless counter-based generator (Philox-4x32-10,
kernels/curandom_philox.cuh) seeded from NumPy's global generator, so
np.random.seed() makes it repeatable, as PyCUDA's.  The generator classes
use cuRAND's device API (curand_kernel.h, from the CUDA toolkit or NVIDIA's
pip wheels), compiled through NVRTC with kernels/curandom.cuh: each keeps one
cuRAND state per GPU thread in device memory, initialised once, and a fill
kernel draws many numbers per thread with the state in registers (16-byte
stores and Box-Muller pairs for the pseudo-random generators).

The 64-bit Sobol generators' int32/uint32 numbers are the top 32 bits of
their 64-bit points (the same numbers as the 32-bit generators'; cuRAND's
own curand_uniform/curand_normal read those bits too).

Sobol direction vectors and scramble constants are cuRAND's own tables, read
from the cuRAND host library (libcurand, opened on first use with ctypes;
no GPU needed for that).
"""

from typing import TYPE_CHECKING, Any, Callable
import ctypes
import enum
import glob
import os
import sys
import threading

import numpy as np

from pygpu import driver as _drv

if TYPE_CHECKING:  # annotations only
    from pygpu._driver import Stream
    from pygpu.gpuarray import GPUArray

__all__ = [
    "rand",
    "get_curand_version",
    "direction_vector_set",
    "generate_direction_vectors",
    "generate_scramble_constants32",
    "generate_scramble_constants64",
    "seed_getter_uniform",
    "seed_getter_unique",
    "XORWOWRandomNumberGenerator",
    "MRG32k3aRandomNumberGenerator",
    "Sobol32RandomNumberGenerator",
    "ScrambledSobol32RandomNumberGenerator",
    "Sobol64RandomNumberGenerator",
    "ScrambledSobol64RandomNumberGenerator",
    "UnsupportedDtypeError",
    "CurandNotFoundError",
]


class UnsupportedDtypeError(TypeError, NotImplementedError):
    """A dtype this generator cannot produce (PyCUDA raises
    NotImplementedError there; this is both)."""


class CurandNotFoundError(RuntimeError):
    """The cuRAND host library (for Sobol tables and the version) is not
    installed where pygpu looks."""


# ---- rand(): Philox, no state ----

_RAND_BLOCK = 256
_rand_kernels: dict[Any, Any] = {}  # context -> {dtype: (Function, numbers per Philox block)}


def _rand_function(dtype):
    from pygpu.compiler import SourceModule, kernel_source

    ctx = _drv.Context.get_current()
    fs = _rand_kernels.get(ctx)
    if fs is None or ctx is None or ctx.detached:
        mod = SourceModule(kernel_source("curandom_philox.cuh"), no_extern_c=True)
        fs = {}
        for dt, name, per in (
            (np.float32, "rand_float", 4),
            (np.float64, "rand_double", 2),
            (np.uint32, "rand_uint", 4),
            (np.int32, "rand_uint", 4),
        ):
            f = mod.get_function(name)
            f.prepare("PIQ")
            fs[np.dtype(dt)] = (f, per)
        dev = mod.module.context.device
        fs["max_grid"] = dev.get_attribute(_drv.device_attribute.MULTIPROCESSOR_COUNT) * max(
            1,
            dev.get_attribute(_drv.device_attribute.MAX_THREADS_PER_MULTIPROCESSOR) // _RAND_BLOCK,
        )
        _rand_kernels[mod.module.context] = fs
    return fs[dtype], fs["max_grid"]


def rand(
    shape: "int | tuple[int, ...]",
    dtype: "np.typing.DTypeLike" = np.float32,
    stream: "Stream | None" = None,
) -> "GPUArray":
    """A new GPUArray of uniform random numbers: float32/float64 in [0, 1),
    int32/uint32 with all 32 bits random.  The seed comes from
    numpy.random.randint (np.random.seed() makes it repeatable)."""
    dtype = np.dtype(dtype)
    if dtype not in (np.float32, np.float64, np.int32, np.uint32):
        raise UnsupportedDtypeError(
            "rand() makes float32, float64, int32 or uint32 arrays, not %s" % dtype
        )
    from pygpu import gpuarray

    result = gpuarray.empty(shape, dtype)
    seed = int(np.random.randint(2**31 - 1))
    n = result.size
    if n:
        (func, per), max_grid = _rand_function(dtype)
        blocks = (n + per - 1) // per
        grid = min((blocks + _RAND_BLOCK - 1) // _RAND_BLOCK, max_grid)
        func.prepared_async_call(
            (max(grid, 1), 1, 1), (_RAND_BLOCK, 1, 1), stream, result.ptr, seed, n
        )
    return result


# ---- the cuRAND host library: version, Sobol tables ----

_DIMENSIONS = 20000  # cuRAND's tables have 20000 dimensions


@_drv._driver._enum_tables  # PyCUDA's .names and .values
class direction_vector_set(enum.IntEnum):
    """cuRAND's direction vector sets (curandDirectionVectorSet_t)."""

    VECTOR_32 = 101
    SCRAMBLED_VECTOR_32 = 102
    VECTOR_64 = 103
    SCRAMBLED_VECTOR_64 = 104


_lib_lock = threading.Lock()
_lib = None
_lib_tried = None


def curand_candidates(environ=None, path=None):
    """Where libcurand is looked for, first match wins: $PYGPU_LIBCURAND,
    NVIDIA's pip wheels on sys.path (nvidia/cu13/lib, nvidia/curand/lib),
    $CONDA_PREFIX/lib, the system loader path, $CUDA_HOME and $CUDA_PATH
    (lib64/, lib/), /usr/local/cuda/lib64."""
    env = os.environ if environ is None else environ
    path = sys.path if path is None else path
    sonames = ("libcurand.so.10", "libcurand.so")
    out = []
    if env.get("PYGPU_LIBCURAND"):
        out.append(env["PYGPU_LIBCURAND"])
    for rel in ("nvidia/cu13/lib", "nvidia/curand/lib"):
        for p in path:
            d = os.path.join(p, rel)
            if os.path.isdir(d):
                out.extend(sorted(glob.glob(os.path.join(d, "libcurand.so*"))))
    if env.get("CONDA_PREFIX"):
        out.extend(os.path.join(env["CONDA_PREFIX"], "lib", so) for so in sonames)
    out.extend(sonames)
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if env.get(var):
            for sub in ("lib64", "lib"):
                out.extend(os.path.join(env[var], sub, so) for so in sonames)
    out.extend(os.path.join("/usr/local/cuda/lib64", so) for so in sonames)
    seen = set()
    return [c for c in out if not (c in seen or seen.add(c))]


def _libcurand():
    """The cuRAND host library (ctypes), opened once; CurandNotFoundError
    listing every path tried when it is nowhere."""
    global _lib, _lib_tried
    if _lib is not None:
        return _lib
    with _lib_lock:
        if _lib is None:
            tried = curand_candidates()
            from pygpu import _loader

            pf = None if os.environ.get("PYGPU_LIBCURAND") else _loader.pathfinder()
            if pf is not None:
                try:
                    tried.insert(0, pf.load_nvidia_dynamic_lib("curand").abs_path)
                except Exception:  # not found, or a pathfinder that does not know it
                    pass
            for cand in tried:
                try:
                    lib = ctypes.CDLL(cand)
                    lib.curandGetVersion
                except (OSError, AttributeError):
                    continue
                for fn in (
                    "curandGetVersion",
                    "curandGetDirectionVectors32",
                    "curandGetDirectionVectors64",
                    "curandGetScrambleConstants32",
                    "curandGetScrambleConstants64",
                ):
                    getattr(lib, fn).restype = ctypes.c_int
                _lib = lib
                break
            else:
                _lib_tried = tried
                raise CurandNotFoundError(
                    "the cuRAND library (libcurand.so.10) was not found; tried: %s. Install "
                    "the CUDA toolkit or NVIDIA's wheel (pip install nvidia-curand), or set "
                    "PYGPU_LIBCURAND" % ", ".join(tried)
                )
    return _lib


def _curand_check(rc, routine):
    if rc != 0:
        raise RuntimeError("%s failed: curandStatus_t %d" % (routine, rc))


def _header_version():
    import re
    from pygpu import _loader

    for d in list(_curand_include_dirs()) + list(_loader.cuda_include_dirs()):
        p = os.path.join(d, "curand.h")
        if os.path.isfile(p):
            with open(p, encoding="utf-8", errors="replace") as f:
                text = f.read()
            parts = {}
            for key in ("MAJOR", "MINOR", "PATCH"):
                m = re.search(r"#define\s+CURAND_VER_%s\s+(\d+)" % key, text)
                if m is None:
                    break
                parts[key] = int(m.group(1))
            else:
                return parts["MAJOR"] * 1000 + parts["MINOR"] * 100 + parts["PATCH"]
    return None


def get_curand_version() -> "tuple[int, int, int] | None":
    """cuRAND's version as PyCUDA reports it: (v // 1000, v % 1000 // 10,
    v % 10) of curandGetVersion()'s v (10400 is (10, 40, 0)); from curand.h
    when the library is missing; None when neither is found."""
    try:
        lib = _libcurand()
        v = ctypes.c_int(0)
        _curand_check(lib.curandGetVersion(ctypes.byref(v)), "curandGetVersion")
        version = v.value
    except CurandNotFoundError:
        version = _header_version()
        if version is None:
            return None
    return (version // 1000, (version % 1000) // 10, version % 10)


def host_direction_vectors(direction=direction_vector_set.VECTOR_32):
    """cuRAND's direction vectors for all 20000 dimensions as a NumPy array:
    (20000, 32) uint32 for the 32-bit sets, (20000, 64) uint64 for the
    64-bit ones (a copy)."""
    try:
        direction = direction_vector_set(direction)
    except ValueError:
        raise ValueError(
            "direction must be a direction_vector_set (VECTOR_32, "
            "SCRAMBLED_VECTOR_32, VECTOR_64, SCRAMBLED_VECTOR_64), not %r" % (direction,)
        ) from None
    lib = _libcurand()
    p = ctypes.c_void_p()
    if direction in (direction_vector_set.VECTOR_64, direction_vector_set.SCRAMBLED_VECTOR_64):
        _curand_check(
            lib.curandGetDirectionVectors64(ctypes.byref(p), int(direction)),
            "curandGetDirectionVectors64",
        )
        ct, width, dt = ctypes.c_uint64, 64, np.uint64
    else:
        _curand_check(
            lib.curandGetDirectionVectors32(ctypes.byref(p), int(direction)),
            "curandGetDirectionVectors32",
        )
        ct, width, dt = ctypes.c_uint32, 32, np.uint32
    buf = (ct * (_DIMENSIONS * width)).from_address(p.value)
    return np.frombuffer(buf, dtype=dt).reshape(_DIMENSIONS, width).copy()


def host_scramble_constants(bits=32):
    """cuRAND's 20000 scramble constants (uint32 for bits=32, uint64 for 64)."""
    lib = _libcurand()
    p = ctypes.c_void_p()
    if bits == 32:
        _curand_check(
            lib.curandGetScrambleConstants32(ctypes.byref(p)), "curandGetScrambleConstants32"
        )
        ct, dt = ctypes.c_uint32, np.uint32
    elif bits == 64:
        _curand_check(
            lib.curandGetScrambleConstants64(ctypes.byref(p)), "curandGetScrambleConstants64"
        )
        ct, dt = ctypes.c_uint64, np.uint64
    else:
        raise ValueError("bits must be 32 or 64, not %r" % (bits,))
    buf = (ct * _DIMENSIONS).from_address(p.value)
    return np.frombuffer(buf, dtype=dt).copy()


def _count(count):
    if isinstance(count, bool) or not isinstance(count, (int, np.integer)):
        raise TypeError("count must be an int, not %s" % type(count).__name__)
    if count < 0:
        raise ValueError("count must be >= 0, not %d" % count)
    return int(count)


def _repeat_rows(table, count):
    reps = (count + _DIMENSIONS - 1) // _DIMENSIONS
    if reps > 1:
        table = np.concatenate([table] * reps)
    return np.ascontiguousarray(table[:count])


def generate_direction_vectors(count: int, direction: Any = None) -> "GPUArray":
    """A GPUArray of direction vectors for count generators: row i is
    dimension i % 20000 of cuRAND's set direction (default VECTOR_32):
    (count, 32) uint32, or (count, 64) uint64 for the 64-bit sets."""
    count = _count(count)
    if direction is None:
        direction = direction_vector_set.VECTOR_32
    table = _repeat_rows(host_direction_vectors(direction), count)
    from pygpu import gpuarray

    return gpuarray.to_gpu(table)


def generate_scramble_constants32(count: int) -> "GPUArray":
    """A GPUArray of count uint32 scramble constants (cuRAND's, repeated
    every 20000)."""
    count = _count(count)
    table = _repeat_rows(host_scramble_constants(32), count)
    from pygpu import gpuarray

    return gpuarray.to_gpu(table)


def generate_scramble_constants64(count: int) -> "GPUArray":
    """A GPUArray of count uint64 scramble constants (cuRAND's, repeated
    every 20000)."""
    count = _count(count)
    table = _repeat_rows(host_scramble_constants(64), count)
    from pygpu import gpuarray

    return gpuarray.to_gpu(table)


# ---- seed getters ----


def seed_getter_uniform(n: int) -> "GPUArray":
    """An int32 GPUArray of n copies of one random seed."""
    import random
    from pygpu import gpuarray

    value = random.randint(0, 2**31 - 1)
    return gpuarray.to_gpu(np.full(_count(n), value, dtype=np.int32))


def seed_getter_unique(n: int) -> "GPUArray":
    """An int32 GPUArray of n random seeds."""
    from pygpu import gpuarray

    return gpuarray.to_gpu(np.random.randint(0, 2**31 - 1, _count(n)).astype(np.int32))


# ---- the generator classes ----


def _curand_include_dirs():
    """NVIDIA's CUDA 12 curand wheel keeps its headers apart
    (nvidia/curand/include); the CUDA 13 wheels and the toolkit share the
    directory the compiler adds anyway."""
    out = []
    for p in sys.path:
        d = os.path.join(p, "nvidia", "curand", "include")
        if os.path.isfile(os.path.join(d, "curand_kernel.h")):
            out.append(d)
    return tuple(out)


def source(state_type, kind, scramble_type=None):
    """The CUDA source of a generator module (for compile() without a GPU):
    kind is 'xorwow', 'mrg32k3a', 'sobol32', 'sobol64', 'scrambled_sobol32'
    or 'scrambled_sobol64'."""
    from pygpu.compiler import kernel_source

    lines = [kernel_source("curandom.cuh"), ""]
    pseudo = kind in ("xorwow", "mrg32k3a")
    lines.append("PYGPU_CURAND_GENERATORS(%s, %d)" % (state_type, 1 if pseudo else 0))
    if pseudo:
        lines.append("PYGPU_CURAND_PSEUDO_INIT(%s)" % state_type)
        lines.append(
            "PYGPU_CURAND_SKIP_KERNELS(%s, skipahead, skip_ahead, unsigned long long)" % state_type
        )
        lines.append(
            "PYGPU_CURAND_SKIP_KERNELS(%s, skipahead_sequence, skip_ahead_sequence, "
            "unsigned long long)" % state_type
        )
        if kind == "mrg32k3a":
            lines.append(
                "PYGPU_CURAND_SKIP_KERNELS(%s, skipahead_subsequence, "
                "skip_ahead_subsequence, unsigned long long)" % state_type
            )
    else:
        bits = 64 if kind.endswith("64") else 32
        dirs = "curandDirectionVectors%d_t" % bits
        word = "unsigned long long" if bits == 64 else "unsigned int"
        if kind.startswith("scrambled"):
            lines.append("PYGPU_CURAND_SCRAMBLED_SOBOL_INIT(%s, %s, %s)" % (state_type, dirs, word))
        else:
            lines.append("PYGPU_CURAND_SOBOL_INIT(%s, %s, %s)" % (state_type, dirs, word))
        lines.append(
            "PYGPU_CURAND_SKIP_KERNELS(%s, skipahead, skip_ahead, %s)" % (state_type, word)
        )
    return "\n".join(lines) + "\n"


_FILL_KERNELS = {
    # name: prepare() codes
    "uniform_int": "PPQ",
    "uniform_long": "PPQ",
    "uniform_float": "PPQ",
    "uniform_double": "PPQ",
    "normal_float": "PPQ",
    "normal_double": "PPQ",
    "normal_log_float": "PPffQ",
    "normal_log_double": "PPddQ",
    "poisson_int": "PPdQ",
    "poisson_inplace_float": "PPQ",
    "poisson_inplace_double": "PPQ",
    "poisson_inplace_int": "PPQ",
}

_STACK_FOR_INIT = 1 << 14


def _check_data(data, what):
    try:
        dtype, size, forc = data.dtype, data.size, data.flags.forc
        data.ptr
    except AttributeError:
        raise TypeError(
            "%s: data must be a GPUArray, not %s" % (what, type(data).__name__)
        ) from None
    if not forc:
        raise ValueError("%s: data must be a contiguous array (C or Fortran order)" % what)
    return np.dtype(dtype), size


class _RandomNumberGeneratorBase:
    """One cuRAND state per GPU thread (block_count blocks of
    generators_per_block threads), in device memory (self.state)."""

    has_box_muller = False
    _kind: "str | None" = None
    _state_type: "str | None" = None
    generator_bits = 32

    def __init__(self) -> None:
        from pygpu.compiler import SourceModule

        ctx = _drv.Context.get_current()
        if ctx is None:
            _drv.init()
        dev = _drv.Context.get_device()
        self._sms = dev.get_attribute(_drv.device_attribute.MULTIPROCESSOR_COUNT)
        self._threads_per_sm = dev.get_attribute(
            _drv.device_attribute.MAX_THREADS_PER_MULTIPROCESSOR
        )
        self.state_type = self._state_type
        self.module = SourceModule(
            source(self._state_type, self._kind),
            no_extern_c=True,
            include_dirs=_curand_include_dirs(),
        )
        self.generators = {}
        for name, types in _FILL_KERNELS.items():
            f = self.module.get_function(name)
            f.prepare(types)
            self.generators[name] = f
        self._skip = {}
        for name in self._skip_names():
            single = self.module.get_function(name)
            single.prepare("PQ" + ("I" if self._skip_word == np.uint32 else "Q"))
            array = self.module.get_function(name + "_array")
            array.prepare("PQP")
            self._skip[name] = (single, array)
        self.skip_ahead, self.skip_ahead_array = self._skip["skip_ahead"]
        limit = min(
            f.max_threads_per_block
            for f in list(self.generators.values()) + [self.module.get_function("prepare")]
        )
        self.block_count, self.generators_per_block = self._layout(limit)
        self.generator_count = self.block_count * self.generators_per_block
        ptr, _ = self.module.get_global("pygpu_state_size")
        size = np.zeros(1, np.uint64)
        _drv.memcpy_dtoh(size, ptr)
        self.state_size = int(size[0])
        self.state = _drv.mem_alloc(self.generator_count * self.state_size)
        self._grid = (self.block_count, 1, 1)
        self._block = (self.generators_per_block, 1, 1)

    _skip_word = np.uint64

    def _skip_names(self):
        return ("skip_ahead",)

    def _layout(self, limit):
        raise NotImplementedError

    def _run_prepare(self, *args):
        """The init kernel, synchronously, with a 16 KiB stack as PyCUDA
        gives it (cuRAND's skip-ahead works on the stack)."""
        p = self.module.get_function("prepare")
        p.prepare("PQ" + "P" * (len(args) - 1) + "Q")
        prev = _drv.Context.get_limit(_drv.limit.STACK_SIZE)
        try:
            if prev < _STACK_FOR_INIT:
                _drv.Context.set_limit(_drv.limit.STACK_SIZE, _STACK_FOR_INIT)
            try:
                p.prepared_call(self._grid, self._block, self.state, self.generator_count, *args)
                _drv.Context.synchronize()
            except _drv.LaunchError as e:
                raise ValueError(
                    "Initialisation failed. Decrease number of threads. (%s)" % e
                ) from e
        finally:
            if prev < _STACK_FOR_INIT:
                _drv.Context.set_limit(_drv.limit.STACK_SIZE, prev)

    def _launch(self, name, stream, data, *args):
        from pygpu import gpuarray

        # the operand gate, against the context the generators' state lives in
        gpuarray._check_operands("curandom (%s)" % name, (data,), ctx=self.module.module.context)
        self.generators[name].prepared_async_call(
            self._grid, self._block, stream, self.state, data.ptr, *args
        )

    # ---- filling ----

    def fill_uniform(self, data: "GPUArray", stream: "Stream | None" = None) -> None:
        """Fill data with uniform numbers: floats in (0, 1], integers with all
        bits random (int64/uint64 only from 64-bit-capable generators)."""
        dtype, n = _check_data(data, "fill_uniform")
        if dtype == np.float32:
            name = "uniform_float"
        elif dtype == np.float64:
            name = "uniform_double"
        elif dtype in (np.int32, np.uint32):
            name = "uniform_int"
        elif dtype in (np.int64, np.uint64) and self._has_64bit_ints():
            name = "uniform_long"
        else:
            raise UnsupportedDtypeError(
                "fill_uniform: %s makes float32, float64, int32, uint32%s arrays, not %s"
                % (type(self).__name__, ", int64, uint64" if self._has_64bit_ints() else "", dtype)
            )
        if n:
            self._launch(name, stream, data, n)

    def _has_64bit_ints(self):
        return True

    def _float_kernel(self, what, dtype, f32, f64):
        if dtype == np.float32:
            return f32
        if dtype == np.float64:
            return f64
        raise UnsupportedDtypeError(
            "%s: %s makes float32 or float64 arrays, not %s" % (what, type(self).__name__, dtype)
        )

    def fill_normal(self, data: "GPUArray", stream: "Stream | None" = None) -> None:
        """Fill data with standard normal numbers (mean 0, variance 1)."""
        dtype, n = _check_data(data, "fill_normal")
        name = self._float_kernel("fill_normal", dtype, "normal_float", "normal_double")
        if n:
            self._launch(name, stream, data, n)

    def fill_log_normal(
        self, data: "GPUArray", mean: float, stddev: float, stream: "Stream | None" = None
    ) -> None:
        """Fill data with exp(N(mean, stddev**2)) numbers."""
        dtype, n = _check_data(data, "fill_log_normal")
        name = self._float_kernel("fill_log_normal", dtype, "normal_log_float", "normal_log_double")
        mean, stddev = float(mean), float(stddev)
        if n:
            self._launch(name, stream, data, mean, stddev, n)

    def fill_poisson(
        self, data: "GPUArray", lambda_value: "float | None" = None, stream: "Stream | None" = None
    ) -> None:
        """Fill data with Poisson numbers of mean lambda_value (uint32 data),
        or, with lambda_value None, replace each element x of data (float32,
        float64, uint32) by a Poisson number of mean x."""
        dtype, n = _check_data(data, "fill_poisson")
        if lambda_value is None:
            names = {
                np.dtype(np.float32): "poisson_inplace_float",
                np.dtype(np.float64): "poisson_inplace_double",
                np.dtype(np.uint32): "poisson_inplace_int",
            }
            name = names.get(dtype)
            if name is None:
                raise UnsupportedDtypeError(
                    "fill_poisson without lambda_value takes the means from a float32, "
                    "float64 or uint32 array, not %s" % dtype
                )
            if n:
                self._launch(name, stream, data, n)
            return
        if dtype != np.uint32:
            raise UnsupportedDtypeError(
                "fill_poisson with lambda_value makes uint32 arrays, not %s" % dtype
            )
        lam = float(lambda_value)
        if not lam > 0 or lam == float("inf"):
            raise ValueError(
                "fill_poisson: lambda_value must be a finite number > 0, not %r" % (lambda_value,)
            )
        if n:
            self._launch("poisson_int", stream, data, lam, n)

    # ---- generating ----

    def gen_uniform(
        self,
        shape: "int | tuple[int, ...]",
        dtype: "np.typing.DTypeLike",
        stream: "Stream | None" = None,
    ) -> "GPUArray":
        """A new GPUArray filled by fill_uniform."""
        from pygpu import gpuarray

        result = gpuarray.empty(shape, dtype)
        self.fill_uniform(result, stream)
        return result

    def gen_normal(
        self,
        shape: "int | tuple[int, ...]",
        dtype: "np.typing.DTypeLike",
        stream: "Stream | None" = None,
    ) -> "GPUArray":
        """A new GPUArray filled by fill_normal."""
        from pygpu import gpuarray

        result = gpuarray.empty(shape, dtype)
        self.fill_normal(result, stream)
        return result

    def gen_log_normal(
        self,
        shape: "int | tuple[int, ...]",
        dtype: "np.typing.DTypeLike",
        mean: float,
        stddev: float,
        stream: "Stream | None" = None,
    ) -> "GPUArray":
        """A new GPUArray filled by fill_log_normal."""
        from pygpu import gpuarray

        result = gpuarray.empty(shape, dtype)
        self.fill_log_normal(result, mean, stddev, stream)
        return result

    def gen_poisson(
        self,
        shape: "int | tuple[int, ...]",
        dtype: "np.typing.DTypeLike",
        lambda_value: float,
        stream: "Stream | None" = None,
    ) -> "GPUArray":
        """A new uint32 GPUArray filled by fill_poisson(lambda_value)."""
        if lambda_value is None:
            raise ValueError("gen_poisson needs a lambda_value")
        from pygpu import gpuarray

        result = gpuarray.empty(shape, dtype)
        self.fill_poisson(result, lambda_value, stream)
        return result

    # ---- skipping ahead ----

    def _skip_call(self, name, i, stream):
        single, _ = self._skip[name]
        if isinstance(i, bool) or not isinstance(i, (int, np.integer)):
            raise TypeError("%s: the count must be an int, not %s" % (name, type(i).__name__))
        top = np.iinfo(self._skip_word).max
        if not 0 <= int(i) <= top:
            raise ValueError("%s: the count must be in [0, %d], not %d" % (name, top, i))
        single.prepared_async_call(
            self._grid, self._block, stream, self.state, self.generator_count, int(i)
        )

    def _skip_array_call(self, name, i, stream):
        _, array = self._skip[name]
        try:
            dtype, size, forc = i.dtype, i.size, i.flags.forc
        except AttributeError:
            raise TypeError(
                "%s_array: the counts must be a GPUArray, not %s" % (name, type(i).__name__)
            ) from None
        want = np.dtype(self._skip_word)
        if dtype != want:
            raise TypeError("%s_array: the counts must be %s, not %s" % (name, want, dtype))
        if size != self.generator_count or not forc:
            raise ValueError(
                "%s_array: the counts must be a contiguous array of %d (one per "
                "generator), not %d" % (name, self.generator_count, size)
            )
        from pygpu import gpuarray

        gpuarray._check_operands("%s_array" % name, (i,), ctx=self.module.module.context)
        array.prepared_async_call(
            self._grid, self._block, stream, self.state, self.generator_count, i.ptr
        )

    def call_skip_ahead(self, i: "int | GPUArray", stream: "Stream | None" = None) -> None:
        """Skip every generator ahead by i numbers."""
        self._skip_call("skip_ahead", i, stream)

    def call_skip_ahead_array(self, i: "GPUArray", stream: "Stream | None" = None) -> None:
        """Skip generator k ahead by i[k] numbers (i: a GPUArray, one count
        per generator)."""
        self._skip_array_call("skip_ahead", i, stream)


class _PseudoRandomNumberGeneratorBase(_RandomNumberGeneratorBase):
    has_box_muller = True

    def __init__(
        self, seed_getter: "Callable[[int], GPUArray] | None" = None, offset: int = 0
    ) -> None:
        super().__init__()
        n = self.generator_count
        if seed_getter is None:
            seed = seed_getter_unique(n)
        else:
            seed = seed_getter(n)
        if not (
            getattr(seed, "dtype", None) == np.int32
            and getattr(seed, "size", None) == n
            and hasattr(seed, "ptr")
        ):
            raise TypeError(
                "seed must be GPUArray of integers of right length: seed_getter(%d) "
                "must return an int32 GPUArray of %d seeds, not %r" % (n, n, seed)
            )
        offset = _offset(offset, np.uint64)
        self._run_prepare(seed.ptr, offset)

    def _layout(self, limit):
        # enough states for every thread slot of the GPU: one full wave
        per_block = min(256, limit)
        per_sm = max(1, self._threads_per_sm // per_block)
        return self._sms * per_sm, per_block

    def _skip_names(self):
        return ("skip_ahead", "skip_ahead_sequence")

    def call_skip_ahead_sequence(self, i: "int | GPUArray", stream: "Stream | None" = None) -> None:
        """Skip every generator ahead by i subsequences (2**67 numbers each)."""
        self._skip_call("skip_ahead_sequence", i, stream)

    def call_skip_ahead_sequence_array(self, i: "GPUArray", stream: "Stream | None" = None) -> None:
        """Skip generator k ahead by i[k] subsequences."""
        self._skip_array_call("skip_ahead_sequence", i, stream)


def _offset(offset, word):
    if isinstance(offset, bool) or not isinstance(offset, (int, np.integer)):
        raise TypeError("offset must be an int, not %s" % type(offset).__name__)
    top = np.iinfo(word).max
    if not 0 <= int(offset) <= top:
        raise ValueError("offset must be in [0, %d], not %d" % (top, offset))
    return int(offset)


class XORWOWRandomNumberGenerator(_PseudoRandomNumberGeneratorBase):
    """cuRAND's XORWOW generator; generator k starts at subsequence k of
    seed seed_getter(count)[k], offset numbers in."""

    _kind = "xorwow"
    _state_type = "curandStateXORWOW"

    def __init__(
        self, seed_getter: "Callable[[int], GPUArray] | None" = None, offset: int = 0
    ) -> None:
        super().__init__(seed_getter, offset)


class MRG32k3aRandomNumberGenerator(_PseudoRandomNumberGeneratorBase):
    """cuRAND's MRG32k3a generator (as XORWOW's, plus subsequence skips)."""

    _kind = "mrg32k3a"
    _state_type = "curandStateMRG32k3a"

    def __init__(
        self, seed_getter: "Callable[[int], GPUArray] | None" = None, offset: int = 0
    ) -> None:
        super().__init__(seed_getter, offset)

    def _skip_names(self):
        return ("skip_ahead", "skip_ahead_sequence", "skip_ahead_subsequence")

    def call_skip_ahead_subsequence(
        self, i: "int | GPUArray", stream: "Stream | None" = None
    ) -> None:
        """Skip every generator ahead by i subsequences (2**76 numbers each)."""
        self._skip_call("skip_ahead_subsequence", i, stream)

    def call_skip_ahead_subsequence_array(
        self, i: "GPUArray", stream: "Stream | None" = None
    ) -> None:
        """Skip generator k ahead by i[k] subsequences."""
        self._skip_array_call("skip_ahead_subsequence", i, stream)


class _SobolBase(_RandomNumberGeneratorBase):
    """Quasi-random: generator k draws dimension k of the Sobol sequence
    (k < 20000: the generator count is kept at most 20000, so no two
    generators repeat a dimension); element i of a fill comes from generator
    i % generator_count."""

    has_box_muller = False
    _bits = 32
    _direction = direction_vector_set.VECTOR_32
    _scrambled = False

    def __init__(
        self,
        dir_vector: "GPUArray | None" = None,
        scramble_vector: "GPUArray | None" = None,
        offset: int = 0,
    ) -> None:
        super().__init__()
        n = self.generator_count
        word = np.uint64 if self._bits == 64 else np.uint32
        if dir_vector is None:
            dir_vector = generate_direction_vectors(n, self._direction)
        if not (
            getattr(dir_vector, "dtype", None) == word
            and getattr(dir_vector, "shape", None) == (n, self._bits)
            and hasattr(dir_vector, "ptr")
        ):
            raise TypeError(
                "seed must be GPUArray of integers of right length: dir_vector must "
                "be a %s GPUArray of shape (%d, %d)" % (np.dtype(word), n, self._bits)
            )
        args = [dir_vector.ptr]
        if self._scrambled:
            if scramble_vector is None:
                scramble_vector = (
                    generate_scramble_constants64
                    if self._bits == 64
                    else generate_scramble_constants32
                )(n)
            if not (
                getattr(scramble_vector, "dtype", None) == word
                and getattr(scramble_vector, "shape", None) == (n,)
                and hasattr(scramble_vector, "ptr")
            ):
                raise TypeError(
                    "scramble must be GPUArray of integers of right length: "
                    "scramble_vector must be a %s GPUArray of shape (%d,)" % (np.dtype(word), n)
                )
            args.append(scramble_vector.ptr)
        args.append(_offset(offset, word))
        self._run_prepare(*args)

    @property
    def _skip_word(self):
        return np.uint64 if self._bits == 64 else np.uint32

    def _has_64bit_ints(self):
        return self._bits == 64

    def _layout(self, limit):
        per_block = min(256, limit)
        while per_block > 32 and self._sms * per_block > _DIMENSIONS:
            per_block //= 2
        blocks = max(1, min(self._sms, _DIMENSIONS // per_block))
        return blocks, per_block


class Sobol32RandomNumberGenerator(_SobolBase):
    """cuRAND's 32-bit Sobol quasi-random generator."""

    _kind = "sobol32"
    _state_type = "curandStateSobol32"

    def __init__(self, dir_vector: "GPUArray | None" = None, offset: int = 0) -> None:
        super().__init__(dir_vector, None, offset)


class ScrambledSobol32RandomNumberGenerator(_SobolBase):
    """cuRAND's scrambled 32-bit Sobol quasi-random generator."""

    _kind = "scrambled_sobol32"
    _state_type = "curandStateScrambledSobol32"
    _direction = direction_vector_set.SCRAMBLED_VECTOR_32
    _scrambled = True


class Sobol64RandomNumberGenerator(_SobolBase):
    """cuRAND's 64-bit Sobol quasi-random generator."""

    _kind = "sobol64"
    _state_type = "curandStateSobol64"
    _bits = 64
    _direction = direction_vector_set.VECTOR_64

    def __init__(self, dir_vector: "GPUArray | None" = None, offset: int = 0) -> None:
        super().__init__(dir_vector, None, offset)


class ScrambledSobol64RandomNumberGenerator(_SobolBase):
    """cuRAND's scrambled 64-bit Sobol quasi-random generator."""

    _kind = "scrambled_sobol64"
    _state_type = "curandStateScrambledSobol64"
    _bits = 64
    _direction = direction_vector_set.SCRAMBLED_VECTOR_64
    _scrambled = True


# ---- PyCUDA's kernel source templates (pycuda.curandom's names) ----
#
# The %-templates PyCUDA builds its generator modules from, over cuRAND's
# device API, with PyCUDA's keys and kernel signatures, for code that builds
# its own generator kernels from them:
#
#     src = (random_source + xorwow_random_source + random_skip_ahead64_source) % {
#         "state_type": "curandStateXORWOW", "vector_type": "unsigned long long",
#         "generators": gen_template % {"name": "gen_uniform_float",
#                                       "state_type": "curandStateXORWOW",
#                                       "out_type": "float", "suffix": "_uniform"}}
#     mod = SourceModule(src, no_extern_c=True)
#
# pygpu's own generator classes compile kernels/curandom.cuh instead.


def _grid_stride(head, body):
    return (
        "\n__global__ void %s\n{\n"
        "  const size_t tidx = blockIdx.x*blockDim.x+threadIdx.x;\n"
        "  const size_t delta = blockDim.x*gridDim.x;\n"
        "  for (size_t idx = tidx; idx < n; idx += delta)\n"
        "    %s\n}\n" % (head, body)
    )


# one kernel filling d[0:n] from state s[tidx] (grid-stride); keys: name,
# state_type, out_type, suffix (_uniform, _normal, _uniform_double, ...)
gen_template = _grid_stride(
    "%(name)s(%(state_type)s *s, %(out_type)s *d, const size_t n)",
    "d[idx] = curand%(suffix)s(&s[tidx]);",
)
# log-normal values; keys as gen_template and in_type (the parameters' type)
gen_log_template = _grid_stride(
    "%(name)s(%(state_type)s *s, %(out_type)s *d, %(in_type)s mean, %(in_type)s stddev, "
    "const size_t n)",
    "d[idx] = curand_log%(suffix)s(&s[tidx], mean, stddev);",
)
# Poisson values of one lambda
gen_poisson_template = _grid_stride(
    "%(name)s(%(state_type)s *s, %(out_type)s *d, double lambda, const size_t n)",
    "d[idx] = curand_poisson%(suffix)s(&s[tidx], lambda);",
)
# Poisson values whose lambdas are d's values, written over them; key inout_type
gen_poisson_inplace_template = _grid_stride(
    "%(name)s(%(state_type)s *s, %(inout_type)s *d, const size_t n)",
    "d[idx] = (%(inout_type)s)(curand_poisson%(suffix)s(&s[tidx], double(d[idx])));",
)

# the module around the generator kernels (key: generators)
random_source = """
// C++ (cuRAND's device API is templates): not wrapped in extern "C" as a whole
#include <curand_kernel.h>

extern "C"
{
%(generators)s
}
"""


def _per_state(name, skip_type, call):
    return (
        "\n__global__ void %s(%%(state_type)s *s, const size_t n, const %s skip)\n{\n"
        "  const size_t idx = blockIdx.x*blockDim.x+threadIdx.x;\n"
        "  if (idx < n)\n    %s(skip, &s[idx]);\n}\n"
        "\n__global__ void %s_array(%%(state_type)s *s, const size_t n, const %s *skip)\n"
        "{\n  const size_t idx = blockIdx.x*blockDim.x+threadIdx.x;\n"
        "  if (idx < n)\n    %s(skip[idx], &s[idx]);\n}\n"
        % (name, skip_type, call, name, skip_type, call)
    )


def _extern_c(body):
    return '\nextern "C" {' + body + "}\n"


# skip_ahead / skip_ahead_array: skipahead() on states s[0:n]
random_skip_ahead32_source = _extern_c(_per_state("skip_ahead", "unsigned int", "skipahead"))
random_skip_ahead64_source = _extern_c(_per_state("skip_ahead", "unsigned long long", "skipahead"))

# prepare(s, n, v, o): curand_init(seed v[id], subsequence id, offset o, &s[id])
_prepare_seeded = _extern_c(
    "\n__global__ void prepare(%(state_type)s *s, const size_t n,\n"
    "    %(vector_type)s *v, const size_t o)\n{\n"
    "  const size_t id = blockIdx.x*blockDim.x+threadIdx.x;\n"
    "  if (id < n)\n    curand_init(v[id], id, o, &s[id]);\n}\n"
)
xorwow_random_source = _prepare_seeded
mrg32k3a_random_source = _prepare_seeded

_skip_sequence = _per_state("skip_ahead_sequence", "unsigned long long", "skipahead_sequence")
xorwow_skip_ahead_sequence_source = _extern_c(_skip_sequence)
mrg32k3a_skip_ahead_sequence_source = _extern_c(
    _skip_sequence
    + _per_state("skip_ahead_subsequence", "unsigned long long", "skipahead_subsequence")
)

# prepare(s, n, v, o): curand_init(direction vectors v[id], offset o, &s[id])
sobol_random_source = _extern_c(
    "\n__global__ void prepare(%(state_type)s *s, const size_t n,\n"
    "    %(vector_type)s *v, const size_t o)\n{\n"
    "  const size_t id = blockIdx.x*blockDim.x+threadIdx.x;\n"
    "  if (id < n)\n    curand_init(v[id], o, &s[id]);\n}\n"
)
# prepare(s, n, v, scramble, o): with scramble constants (key scramble_type)
scrambledsobol_random_source = _extern_c(
    "\n__global__ void prepare(%(state_type)s *s, const size_t n,\n"
    "    %(vector_type)s *v, %(scramble_type)s *scramble, const size_t o)\n{\n"
    "  const size_t id = blockIdx.x*blockDim.x+threadIdx.x;\n"
    "  if (id < n)\n    curand_init(v[id], scramble[id], o, &s[id]);\n}\n"
)


def _md5_code():
    """The code fragment of PyCUDA's MD5 rand(): inside an element-wise
    kernel's loop it declares unsigned ints a, b, c, d, the MD5 compression
    (RFC 1321, one block, no padding) of the 16 words threadIdx.x/y/z,
    blockIdx.x/y/z, seed, i, n, blockDim.x/y/z, gridDim.x/y/z, 0."""
    import math

    k = [int(abs(math.sin(j + 1)) * 2**32) & 0xFFFFFFFF for j in range(64)]
    shifts = [7, 12, 17, 22] * 4 + [5, 9, 14, 20] * 4 + [4, 11, 16, 23] * 4 + [6, 10, 15, 21] * 4
    words = (
        "threadIdx.x threadIdx.y threadIdx.z blockIdx.x blockIdx.y blockIdx.z seed i n "
        "blockDim.x blockDim.y blockDim.z gridDim.x gridDim.y gridDim.z 0"
    ).split()
    return (
        "\n  unsigned int a, b, c, d;\n  {\n"
        "    const unsigned int pygpu_md5_x[16] = {%s};\n"
        "    const unsigned int pygpu_md5_k[64] = {%s};\n"
        "    const unsigned char pygpu_md5_s[64] = {%s};\n"
        "    unsigned int pa = 0x67452301u, pb = 0xefcdab89u, pc = 0x98badcfeu,"
        " pd = 0x10325476u;\n"
        "    for (int pj = 0; pj < 64; ++pj) {\n"
        "      unsigned int pf, pg;\n"
        "      if (pj < 16) { pf = (pb & pc) | (~pb & pd); pg = pj; }\n"
        "      else if (pj < 32) { pf = (pd & pb) | (~pd & pc); pg = (5 * pj + 1) & 15; }\n"
        "      else if (pj < 48) { pf = pb ^ pc ^ pd; pg = (3 * pj + 5) & 15; }\n"
        "      else { pf = pc ^ (pb | ~pd); pg = (7 * pj) & 15; }\n"
        "      const unsigned int pt = pd, px = pa + pf + pygpu_md5_k[pj] + pygpu_md5_x[pg];\n"
        "      pd = pc; pc = pb;\n"
        "      pb = pb + ((px << pygpu_md5_s[pj]) | (px >> (32 - pygpu_md5_s[pj])));\n"
        "      pa = pt;\n"
        "    }\n"
        "    a = pa + 0x67452301u; b = pb + 0xefcdab89u;\n"
        "    c = pc + 0x98badcfeu; d = pd + 0x10325476u;\n"
        "  }\n"
        % (
            ", ".join("(unsigned int)(%s)" % w for w in words),
            ", ".join("0x%08xu" % v for v in k),
            ", ".join(map(str, shifts)),
        )
    )


md5_code = _md5_code()

__all__ += [
    "md5_code",
    "gen_template",
    "gen_log_template",
    "gen_poisson_template",
    "gen_poisson_inplace_template",
    "random_source",
    "random_skip_ahead32_source",
    "random_skip_ahead64_source",
    "xorwow_random_source",
    "xorwow_skip_ahead_sequence_source",
    "mrg32k3a_random_source",
    "mrg32k3a_skip_ahead_sequence_source",
    "sobol_random_source",
    "scrambledsobol_random_source",
]
