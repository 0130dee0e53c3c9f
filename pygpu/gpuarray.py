"""GPU arrays, as in pycuda.gpuarray: a NumPy-like n-dimensional array in
device memory.

    import pygpu.gpuarray as gpuarray
    a = gpuarray.to_gpu(np.random.rand(1000).astype(np.float32))
    b = 2 * a + 1                  # element-wise kernels, compiled once per dtype
    print((a * b).get())           # back to a NumPy array

Operators take arrays and scalars with NumPy's result dtypes, NumPy
broadcasting and strided (sliced, transposed) operands; out= works where
PyCUDA has it and on the module functions.  Kernels come from
pygpu.elementwise and are remembered per context; the operator path is a
few dict lookups and one prepared launch on the default (legacy) stream.

Memory comes from the allocator given (any callable nbytes -> device
pointer), by default the driver's stream-ordered pool
(driver.mem_alloc_async): freed when the array dies, reused by the next
allocation of the stream.

A GPUArray is a kernel argument (pass a.gpudata, or the array itself: it
exports __cuda_array_interface__ v3), exports DLPack (__dlpack__,
__dlpack_device__), and asarray() wraps CuPy, PyTorch, Numba or any other
CAI/DLPack producer's array without copying.

Reductions (sum, dot, vdot, max, min, subset_*) come from pygpu.reduction.
"""

import builtins
import numbers
from typing import Any, Callable, NoReturn, Sequence

import numpy as np

from pygpu import _cudacore, _driver
from pygpu import driver as drv
from pygpu import elementwise
from pygpu.tools import PooledDeviceAllocation, dtype_to_ctype, get_or_register_dtype

__all__ = [
    "GPUArray",
    "vec",
    "splay",
    "to_gpu",
    "to_gpu_async",
    "empty",
    "zeros",
    "ones",
    "empty_like",
    "zeros_like",
    "ones_like",
    "arange",
    "take",
    "multi_take",
    "multi_put",
    "multi_take_put",
    "if_positive",
    "where",
    "maximum",
    "minimum",
    "concatenate",
    "stack",
    "transpose",
    "reshape",
    "sum",
    "subset_sum",
    "dot",
    "subset_dot",
    "vdot",
    "max",
    "min",
    "subset_max",
    "subset_min",
    "any",
    "all",
    "logical_and",
    "logical_or",
    "logical_not",
    "asarray",
    "ArrayFlags",
]

_builtin_min, _builtin_max, _builtin_sum = builtins.min, builtins.max, builtins.sum
_builtin_any, _builtin_all = builtins.any, builtins.all
# the current Context (or None), from this thread's remembered answer: no
# driver call per operation (docs/contexts.md, "The current context")
_get_current = drv._driver._current_context
_DA = drv.DeviceAllocation


# ---- CUDA vector types ----


class vec:  # noqa: N801  (PyCUDA's name)
    """The CUDA vector types as NumPy structured dtypes (vec.float3, ...)
    and their makers (vec.make_float3(x, y, z) -> a 0-d array)."""


def _make_maker(dtype, count):
    names = "xyzw"[:count]

    def make(*values):
        if len(values) != count:
            raise TypeError(
                "make_%s() takes %d values (%s), got %d"
                % (
                    dtype.name if hasattr(dtype, "name") else "vec",
                    count,
                    ", ".join(names),
                    len(values),
                )
            )
        return np.array(tuple(values), dtype=dtype)

    return make


def _create_vector_types():
    for base, tp, counts in [
        ("char", np.int8, (1, 2, 3, 4)),
        ("uchar", np.uint8, (1, 2, 3, 4)),
        ("short", np.int16, (1, 2, 3, 4)),
        ("ushort", np.uint16, (1, 2, 3, 4)),
        ("int", np.int32, (1, 2, 3, 4)),
        ("uint", np.uint32, (1, 2, 3, 4)),
        ("long", np.int64, (1, 2, 3, 4)),
        ("ulong", np.uint64, (1, 2, 3, 4)),
        ("longlong", np.int64, (1, 2)),
        ("ulonglong", np.uint64, (1, 2)),
        ("float", np.float32, (1, 2, 3, 4)),
        ("double", np.float64, (1, 2)),
    ]:
        for count in counts:
            name = "%s%d" % (base, count)
            dtype = np.dtype([(f, tp) for f in "xyzw"[:count]])
            get_or_register_dtype(name, dtype)
            setattr(vec, name, dtype)
            maker = _make_maker(dtype, count)
            maker.__name__ = "make_" + name
            maker.__doc__ = "A 0-d array of vec.%s from its %d fields." % (name, count)
            setattr(vec, "make_" + name, staticmethod(maker))


_create_vector_types()


# ---- launch configuration ----

_BLOCK = 256
_sm_count = None
_splay_cache: dict[Any, Any] = {}


def _sms():
    global _sm_count
    if _sm_count is None:
        try:
            _sm_count = drv.Context.get_device().get_attribute(
                drv.device_attribute.MULTIPROCESSOR_COUNT
            )
        except drv.Error:
            _sm_count = 128
    return _sm_count


def splay(n: int, dev: Any = None) -> "tuple[tuple[int, int], tuple[int, int, int]]":
    """(grid, block) for a grid-stride loop over n elements: 256 threads a
    block, at most 32 blocks per multiprocessor (the loop covers the rest).
    The multiprocessor count is read once per process: any grid is correct,
    only the speed depends on it."""
    n = int(n)
    found = _splay_cache.get(n)
    if found is None:
        blocks = _builtin_max(1, _builtin_min((n + _BLOCK - 1) // _BLOCK, 32 * _sms()))
        found = ((blocks, 1), (_BLOCK, 1, 1))
        if len(_splay_cache) > 4096:
            _splay_cache.clear()
        _splay_cache[n] = found
    return found


# ---- shapes and strides ----


def _c_strides(itemsize, shape):
    strides, s = [], itemsize
    for n in reversed(shape):
        strides.append(s)
        s *= _builtin_max(n, 1)
    return tuple(reversed(strides))


def _f_strides(itemsize, shape):
    strides, s = [], itemsize
    for n in shape:
        strides.append(s)
        s *= _builtin_max(n, 1)
    return tuple(strides)


def _is_c(shape, strides, itemsize):
    s = itemsize
    for n, st in zip(reversed(shape), reversed(strides)):
        if n == 0:
            return True
        if n != 1:
            if st != s:
                return False
            s *= n
    return True


def _is_f(shape, strides, itemsize):
    s = itemsize
    for n, st in zip(shape, strides):
        if n == 0:
            return True
        if n != 1:
            if st != s:
                return False
            s *= n
    return True


def _is_dense(shape, strides, itemsize):
    """No gaps, no overlap, positive strides: the elements fill
    [ptr, ptr + nbytes) in some axis order."""
    dims = sorted((st, n) for n, st in zip(shape, strides) if n != 1)
    if _builtin_any(n == 0 for n in shape):
        return True
    s = itemsize
    for st, n in dims:
        if st != s:
            return False
        s *= n
    return True


def _compact_strides(shape, strides, itemsize):
    """Dense strides in the axis order of the given ones (the layout a
    copy of the array keeps)."""
    order = sorted(range(len(shape)), key=lambda k: (abs(strides[k]), k))
    out = [0] * len(shape)
    s = itemsize
    for k in order:
        out[k] = s
        s *= _builtin_max(shape[k], 1)
    return tuple(out)


def _normalize_shape(shape):
    if isinstance(shape, np.ndarray):
        shape = shape.tolist()
    if isinstance(shape, (numbers.Integral, np.integer)):
        shape = (shape,)
    try:
        shape = tuple(shape)
    except TypeError:
        raise TypeError(
            "shape must be an int or a sequence of ints, not %s" % type(shape).__name__
        ) from None
    out = []
    for n in shape:
        if isinstance(n, (bool, np.bool_)) or not isinstance(n, (numbers.Integral, np.integer)):
            raise TypeError("shape entries must be ints, not %r" % (n,))
        n = int(n)
        if n < 0:
            raise ValueError("negative dimensions are not allowed: %r" % (shape,))
        out.append(n)
    return tuple(out)


def _check_dtype(dtype: Any) -> "np.dtype[Any]":
    dtype = np.dtype(dtype)
    if dtype.hasobject:
        raise TypeError(
            "GPUArray cannot hold dtype %s: Python objects have no device representation" % dtype
        )
    if dtype.itemsize == 0:
        raise TypeError("GPUArray cannot hold dtype %s (its items have no size)" % dtype)
    return dtype


class ArrayFlags:
    """c_contiguous, f_contiguous and forc (either) of a GPUArray."""

    __slots__ = ("c_contiguous", "f_contiguous", "forc")

    def __init__(self, ary: "GPUArray") -> None:
        self.c_contiguous = ary._c
        self.f_contiguous = ary._f
        self.forc = ary._c or ary._f

    def __repr__(self):
        # PyCUDA's (and NumPy's) layout: two leading spaces, one flag a line
        return "  C_CONTIGUOUS : %s\n  F_CONTIGUOUS : %s" % (self.c_contiguous, self.f_contiguous)

    def __str__(self):
        return repr(self)


_layouts: "dict[Any, tuple[tuple[int, ...], np.dtype[Any], tuple[int, ...], int, bool, bool]]" = {}  # (shape, dtype, order) -> GPUArray._layout(...) of new arrays


def _default_allocator(nbytes):
    """The driver's stream-ordered pool on the default stream (freed when
    the array dies); plain cuMemAlloc where the driver has no pools."""
    try:
        return _alloc_async(nbytes)
    except drv.LogicError:
        return drv.mem_alloc(nbytes)


_alloc_async = drv.mem_alloc_async


def _new(cls, shape, dtype, strides, gpudata, base, allocator, size, c, f):
    """A GPUArray from known parts (no checks: the operators' fast path)."""
    self = _object_new(cls)
    self.shape = shape
    self.dtype = dtype
    self.strides = strides
    self.size = self.mem_size = size
    self.itemsize = dtype.itemsize
    self.nbytes = size * dtype.itemsize
    self.allocator = allocator
    self.gpudata = gpudata
    self.base = base
    self._c = c
    self._f = f
    return self


def _clone(x, cls, gpudata):
    """A new array of class cls with x's attributes, its own gpudata and base
    None (x's layout and dtype: an element-wise result; the C fast path's
    result_new)."""
    z = _object_new(cls)
    z.shape = x.shape
    z.dtype = x.dtype
    z.strides = x.strides
    z.size = x.size
    z.mem_size = x.mem_size
    z.nbytes = x.nbytes
    z.itemsize = x.itemsize
    z.allocator = x.allocator
    z.gpudata = gpudata
    z.base = None
    z._c = x._c
    z._f = x._f
    return z


# Every GPUArray's attributes, slots of the class (GPUArray.__slots__; the C
# fast path reads and copies them by offset); anything else a user sets goes
# into the instance's __dict__
_ATTRS = (
    "shape",
    "dtype",
    "strides",
    "size",
    "mem_size",
    "nbytes",
    "itemsize",
    "allocator",
    "gpudata",
    "base",
    "_c",
    "_f",
)


class GPUArray:
    """An n-dimensional array in device memory (see the module docstring).

    GPUArray(shape, dtype, allocator=None, base=None, gpudata=None,
    strides=None, order="C") allocates shape x dtype (uninitialized), or
    wraps gpudata (a device pointer, owned elsewhere: base keeps it alive).
    """

    __slots__ = _ATTRS + ("__dict__", "__weakref__")
    __array_priority__ = 100
    __array_ufunc__ = None  # NumPy defers to our reflected operators

    # the slots of _ATTRS, set by the constructors, _new() and _clone():
    # declared here for type checkers only (no class attribute is made)
    shape: "tuple[int, ...]"
    dtype: "np.dtype[Any]"
    strides: "tuple[int, ...]"
    size: int
    mem_size: int
    nbytes: int
    itemsize: int
    allocator: "Callable[[int], Any]"
    gpudata: Any  # a DeviceAllocation, any object int() makes a pointer of, or None (size 0)
    base: "object"
    _c: bool
    _f: bool

    def __init__(
        self,
        shape: "int | tuple[int, ...]",
        dtype: "np.typing.DTypeLike" = np.float64,
        allocator: "Callable[[int], Any] | None" = None,
        base: "object" = None,
        gpudata: "object" = None,
        strides: "Sequence[int] | None" = None,
        order: str = "C",
    ) -> None:
        if strides is None and gpudata is None and base is None:
            # a new array of a shape (exact ints) and dtype seen before; the
            # dtype given as a type, a string or a dtype object (equal dtypes
            # can differ in their char, metadata or alignment flag: a dtype
            # object must be the one remembered)
            tp, dc = shape.__class__, dtype.__class__
            if (
                tp is int or (tp is tuple and _builtin_all(n.__class__ is int for n in shape))  # type: ignore[union-attr]
            ) and (dc is type or dc is str or isinstance(dtype, np.dtype)):
                key: Any = (shape, dtype, order)
                lay: Any
                try:
                    lay = _layouts.get(key)
                except TypeError:  # an unhashable order
                    key = lay = None
                if lay is not None and dc is not type and dc is not str and lay[1] is not dtype:
                    lay = None
                if lay is None:
                    lay = self._layout(shape, dtype, order)
                    if key is not None:
                        if len(_layouts) >= 1024:
                            _layouts.clear()
                        _layouts[key] = lay
                shp, dt, st, size, c, f = lay
                if allocator is None:
                    allocator = _default_allocator
                self.shape = shp
                self.dtype = dt
                self.strides = st
                self.size = self.mem_size = size
                self.itemsize = dt.itemsize
                self.nbytes = size * dt.itemsize
                self.allocator = allocator
                self.gpudata = allocator(self.nbytes) if size else None
                self.base = None
                self._c = c
                self._f = f
                return
        self._init(shape, dtype, allocator, base, gpudata, strides, order)

    @staticmethod
    def _layout(shape, dtype, order):
        """(shape, dtype, strides, size, c, f) of a new dense array; raises
        as the constructor does for a bad shape, dtype or order."""
        dtype = _check_dtype(dtype)
        shape = _normalize_shape(shape)
        size = 1
        for n in shape:
            size *= n
        if order == "C":
            strides = _c_strides(dtype.itemsize, shape)
        elif order == "F":
            strides = _f_strides(dtype.itemsize, shape)
        else:
            raise ValueError("order must be 'C' or 'F', not %r" % (order,))
        return (
            shape,
            dtype,
            strides,
            size,
            _is_c(shape, strides, dtype.itemsize),
            _is_f(shape, strides, dtype.itemsize),
        )

    def _init(self, shape, dtype, allocator, base, gpudata, strides, order):
        dtype = _check_dtype(dtype)
        shape = _normalize_shape(shape)
        size = 1
        for n in shape:
            size *= n
        itemsize = dtype.itemsize
        if strides is None:
            if order == "C":
                strides = _c_strides(itemsize, shape)
            elif order == "F":
                strides = _f_strides(itemsize, shape)
            else:
                raise ValueError("order must be 'C' or 'F', not %r" % (order,))
        else:
            strides = tuple(int(s) for s in strides)
            if len(strides) != len(shape):
                raise ValueError("strides %r do not match shape %r" % (strides, shape))
        if allocator is None:
            allocator = _default_allocator
        if gpudata is not None and _cudacore.kind(gpudata) == _cudacore.BUFFER:
            # a cuda.core Buffer: its address, kept alive as the base, and
            # big enough for the array's extent
            buf = gpudata
            gpudata, have = _cudacore.buffer_span(buf, "gpudata= (a cuda.core Buffer)")
            ext = _extent(shape, strides, itemsize)
            if ext is not None and (ext[0] < 0 or ext[1] > have):
                raise ValueError(
                    "GPUArray(): gpudata= is a cuda.core Buffer of %d bytes; an array of "
                    "shape %r and strides %r spans bytes [%d, %d)"
                    % (have, shape, strides, ext[0], ext[1])
                )
            if base is None:
                base = buf
        if gpudata is None:
            if base is not None:
                raise ValueError("base= needs gpudata= (the memory it keeps alive)")
            if not _is_dense(shape, strides, itemsize):
                raise ValueError(
                    "strides %r leave gaps or overlap in an array of shape %r: "
                    "a new array needs dense strides" % (strides, shape)
                )
            gpudata = allocator(size * itemsize) if size else None
        self.shape = shape
        self.dtype = dtype
        self.strides = strides
        self.size = self.mem_size = size
        self.nbytes = size * itemsize
        self.itemsize = itemsize
        self.allocator = allocator
        self.gpudata = gpudata
        self.base = base
        self._c = _is_c(shape, strides, itemsize)
        self._f = _is_f(shape, strides, itemsize)
        if size and gpudata is not None:
            g = _allocation(self)
            if g is not None:
                if isinstance(g, _DA) and g.freed:
                    raise drv.LogicError("GPUArray(): the memory given (gpudata=) was freed")
                _check_one(self, None, "GPUArray()")  # within its allocation

    # ---- metadata ----

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def flags(self) -> "ArrayFlags":
        return ArrayFlags(self)

    @property
    def ptr(self) -> int:
        """The device address of element 0 (an int)."""
        return 0 if self.gpudata is None else int(self.gpudata)

    @property
    def _grid(self):
        return splay(self.size)[0]

    @property
    def _block(self):
        return splay(self.size)[1]

    @property
    def _dense(self):
        return self._c or self._f or _is_dense(self.shape, self.strides, self.itemsize)

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of unsized object")
        return self.shape[0]

    def __hash__(self) -> NoReturn:
        raise TypeError("GPUArrays are not hashable.")

    def __bool__(self) -> bool:
        if self.size != 1:
            raise ValueError(
                "The truth value of an array with more than one element is "
                "ambiguous. Use a.any() or a.all()"
            )
        return bool(self.get().reshape(())[()])

    def __str__(self) -> str:
        return str(self.get())

    def __repr__(self):
        # PyCUDA's: the repr of the contents as a NumPy array ("array([1., 2.],
        # dtype=float32)"), as CuPy prints its arrays too, so that programs and
        # doctests that print a repr show the same text on both
        return repr(self.get())

    def __reduce__(self) -> Any:
        return (to_gpu, (self.get(),))

    # ---- interop ----

    @property
    def __cuda_array_interface__(self) -> "dict[str, Any]":
        # as PyCUDA: explicit strides, and "stream": None (pygpu's own work is
        # on the legacy default stream, which every blocking stream, CuPy's
        # and PyTorch's defaults included, is ordered against).  A view of
        # freed memory, or one past its allocation, is not handed out (a
        # DeviceAllocation's own address refuses to be read once freed)
        g = self.gpudata
        if g is not None and (
            g.__class__ is not _DA or self.nbytes > g.size or not (self._c or self._f)
        ):
            _check_one(self, None, "__cuda_array_interface__")
        cai = {
            "shape": self.shape,
            "typestr": self.dtype.str,
            "data": (self.ptr, False),
            "strides": self.strides,
            "version": 3,
            "stream": None,
        }
        if self.dtype.fields:
            cai["descr"] = self.dtype.descr
        return cai

    def __dlpack_device__(self) -> "tuple[int, int]":
        return _dlpack_device(self)

    def __dlpack__(
        self, stream: Any = None, max_version: Any = None, dl_device: Any = None, copy: Any = None
    ) -> Any:
        from pygpu import _dlpack

        return _dlpack.export(self, stream, max_version, dl_device, copy)

    # ---- transfers ----

    def set(
        self, ary: "object", async_: bool = False, stream: "object" = None, **kwargs: "object"
    ) -> None:
        """Copy a NumPy array (same size and dtype) into this array."""
        async_ = _async_kw(async_, kwargs)
        if isinstance(ary, GPUArray):
            _copy_d2d(self, ary, stream)
            return
        if not isinstance(ary, np.ndarray):
            ary = np.asarray(ary)
        if ary.size != self.size:
            raise ValueError(
                "ary and self must be the same size (%d != %d)" % (ary.size, self.size)
            )
        if ary.dtype != self.dtype:
            raise ValueError(
                "ary and self must have the same dtype (%s != %s)" % (ary.dtype, self.dtype)
            )
        if ary.shape != self.shape:
            import warnings

            warnings.warn("Setting array from one with different shape.", stacklevel=2)
            ary = ary.reshape(self.shape)
        if self.size:
            _copy_h2d(self, ary, async_, stream)

    def set_async(self, ary: Any, stream: "drv.Stream | None" = None) -> None:
        return self.set(ary, async_=True, stream=stream)

    def get(
        self,
        ary: "np.ndarray | None" = None,
        pagelocked: bool = False,
        async_: bool = False,
        stream: "object" = None,
        **kwargs: "object",
    ) -> "np.ndarray":
        """This array's contents as a NumPy array (into ary if given)."""
        async_ = _async_kw(async_, kwargs)
        if ary is None:
            strides = (
                _compact_strides(self.shape, self.strides, self.itemsize)
                if self._dense
                else _c_strides(self.itemsize, self.shape)
            )
            if pagelocked:
                flat = drv.pagelocked_empty(self.size, self.dtype)
            else:
                flat = _host_empty(self.size, self.dtype)
            ary = np.lib.stride_tricks.as_strided(flat, self.shape, strides)
        else:
            if not isinstance(ary, np.ndarray):
                raise TypeError("ary must be a NumPy array, not %s" % type(ary).__name__)
            if ary.size != self.size:
                raise ValueError(
                    "self and ary must be the same size (%d != %d)" % (self.size, ary.size)
                )
            if ary.dtype != self.dtype:
                raise TypeError(
                    "self and ary must have the same dtype (%s != %s)" % (self.dtype, ary.dtype)
                )
            if ary.shape != self.shape:
                view = ary.reshape(self.shape)
                if ary.size and not np.shares_memory(view, ary):
                    # reshape() copied: filling the copy would leave ary unfilled
                    raise ValueError(
                        "get(ary=...): ary has shape %r and strides %r, which "
                        "cannot be seen as this array's shape %r without a "
                        "copy; pass an array of shape %r (or a contiguous one)"
                        % (ary.shape, ary.strides, self.shape, self.shape)
                    )
                import warnings

                warnings.warn(
                    "get() between arrays of different shape is deprecated",
                    DeprecationWarning,
                    stacklevel=2,
                )
                ary = view
        if self.size:
            _copy_d2h(ary, self, async_, stream)
        return ary

    def get_async(
        self, stream: "drv.Stream | None" = None, ary: "np.ndarray | None" = None
    ) -> "np.ndarray":
        return self.get(ary=ary, async_=True, stream=stream)

    def copy(self) -> "GPUArray":
        """A new array with the same contents (and layout, where dense)."""
        strides = _compact_strides(self.shape, self.strides, self.itemsize) if self._dense else None
        new = GPUArray(self.shape, self.dtype, self.allocator, strides=strides)
        _copy_d2d(new, self, None)
        return new

    # ---- creation helpers ----

    def _new_like_me(self, dtype=None, order="C"):
        dtype = self.dtype if dtype is None else np.dtype(dtype)
        strides = None
        if dtype == self.dtype and self._dense:
            strides = self.strides
        elif self._f and not self._c:
            order = "F"
        return self.__class__(
            self.shape, dtype, allocator=self.allocator, strides=strides, order=order
        )

    def _like_for_result(self, dtype):
        """An uninitialized array of self's shape for an element-wise result
        whose elements are in self's memory order (self dense)."""
        size = self.size
        cls = self.__class__
        if dtype is self.dtype and size and (cls is GPUArray or not self.__dict__):
            # self's layout and attributes, its own memory (the operators'
            # fast paths; _default_allocator inlined)
            alloc = self.allocator
            if alloc is _default_allocator:
                try:
                    g = _alloc_async(self.nbytes)
                except drv.LogicError:
                    g = drv.mem_alloc(self.nbytes)
            else:
                g = alloc(self.nbytes)
            return _clone(self, cls, g)
        if dtype is self.dtype or dtype == self.dtype:
            strides = self.strides
        elif self._c:
            strides = _c_strides(dtype.itemsize, self.shape)
        elif self._f:
            strides = _f_strides(dtype.itemsize, self.shape)
        else:
            r = dtype.itemsize
            strides = tuple(s // self.itemsize * r for s in self.strides)
        c, f = self._c, self._f
        gpudata = self.allocator(size * dtype.itemsize) if size else None
        return _new(
            self.__class__, self.shape, dtype, strides, gpudata, None, self.allocator, size, c, f
        )

    # ---- operators ----

    # the seven arithmetic operators below, their reflected and in-place
    # forms are replaced, under the class, by _ArrayOperators (C: one call a
    # + b; issue 27) that fall back to these (_install_operators)
    def __add__(self, other: Any) -> "GPUArray":
        return _binary("add", self, other)

    def __radd__(self, other: Any) -> "GPUArray":
        return _binary("add", other, self)

    def __sub__(self, other: Any) -> "GPUArray":
        return _binary("subtract", self, other)

    def __rsub__(self, other: Any) -> "GPUArray":
        return _binary("subtract", other, self)

    def __mul__(self, other: Any) -> "GPUArray":
        return _binary("multiply", self, other)

    def __rmul__(self, other: Any) -> "GPUArray":
        return _binary("multiply", other, self)

    def __truediv__(self, other: Any) -> "GPUArray":
        return _binary("true_divide", self, other)

    def __rtruediv__(self, other: Any) -> "GPUArray":
        return _binary("true_divide", other, self)

    __div__, __rdiv__ = __truediv__, __rtruediv__

    def __floordiv__(self, other: Any) -> "GPUArray":
        return _binary("floor_divide", self, other)

    def __rfloordiv__(self, other: Any) -> "GPUArray":
        return _binary("floor_divide", other, self)

    def __mod__(self, other: Any) -> "GPUArray":
        return _binary("remainder", self, other)

    def __rmod__(self, other: Any) -> "GPUArray":
        return _binary("remainder", other, self)

    def __pow__(self, other: Any) -> "GPUArray":
        return _binary("power", self, other)

    def __rpow__(self, other: Any) -> "GPUArray":
        return _binary("power", other, self)

    def __iadd__(self, other: Any) -> "GPUArray":
        return _binary("add", self, other, out=self)

    def __isub__(self, other: Any) -> "GPUArray":
        return _binary("subtract", self, other, out=self)

    def __imul__(self, other: Any) -> "GPUArray":
        return _binary("multiply", self, other, out=self)

    def __itruediv__(self, other: Any) -> "GPUArray":
        return _binary("true_divide", self, other, out=self)

    __idiv__ = __itruediv__

    def __ifloordiv__(self, other: Any) -> "GPUArray":
        return _binary("floor_divide", self, other, out=self)

    def __imod__(self, other: Any) -> "GPUArray":
        return _binary("remainder", self, other, out=self)

    def __ipow__(self, other: Any) -> "GPUArray":
        return _binary("power", self, other, out=self)

    def __eq__(self, other: object) -> "GPUArray":  # type: ignore[override]
        return _binary("equal", self, other)

    def __ne__(self, other: object) -> "GPUArray":  # type: ignore[override]
        return _binary("not_equal", self, other)

    def __lt__(self, other: Any) -> "GPUArray":
        return _binary("less", self, other)

    def __le__(self, other: Any) -> "GPUArray":
        return _binary("less_equal", self, other)

    def __gt__(self, other: Any) -> "GPUArray":
        return _binary("greater", self, other)

    def __ge__(self, other: Any) -> "GPUArray":
        return _binary("greater_equal", self, other)

    def __neg__(self) -> "GPUArray":
        return _unary("negative", self)

    def __pos__(self) -> "GPUArray":
        return self

    def __abs__(self) -> "GPUArray":
        return _unary("absolute", self)

    def __invert__(self) -> "GPUArray":
        return _unary("invert", self)

    def __and__(self, other: Any) -> "GPUArray":
        return _binary("bitwise_and", self, other)

    __rand__ = __and__

    def __or__(self, other: Any) -> "GPUArray":
        return _binary("bitwise_or", self, other)

    __ror__ = __or__

    def __xor__(self, other: Any) -> "GPUArray":
        return _binary("bitwise_xor", self, other)

    __rxor__ = __xor__

    def mul_add(
        self,
        selffac: Any,
        other: "GPUArray",
        otherfac: Any,
        add_timer: Any = None,
        stream: "drv.Stream | None" = None,
        out: "GPUArray | None" = None,
    ) -> "GPUArray":
        """selffac * self + otherfac * other in one kernel."""
        return _axpbyz(selffac, self, otherfac, other, out, stream)

    def _axpbyz(self, selffac, other, otherfac, out, add_timer=None, stream=None):
        return _axpbyz(selffac, self, otherfac, other, out, stream)

    def _axpbz(self, selffac, other, out, stream=None):
        return _map(
            "axpbz",
            "{0} * {1} + {2}",
            [selffac, self, other],
            out,
            stream,
            _result_dtype("multiply", self, selffac) if out is None else out.dtype,
        )

    def fill(self, value: Any, stream: "drv.Stream | None" = None) -> "GPUArray":
        """Set every element to value; returns self."""
        if self.size:
            _map("fill", "{0}", [value], self, stream, self.dtype, scalar_dtypes=[self.dtype])
        else:  # nothing to write, but the value is checked all the same
            elementwise._scalar_value(value, self.dtype, "fill: the value")
        return self

    def reverse(self, stream: "drv.Stream | None" = None) -> "GPUArray":
        """The array reversed, taken as one-dimensional (contiguous only)."""
        if not self.flags.forc:
            raise RuntimeError("only contiguous arrays may be used as arguments to this operation")
        _check_operands("reverse()", (self,))
        result = self._new_like_me()
        if self.size:
            func = elementwise.get_reverse_kernel(self.dtype)
            func.prepared_async_call(
                self._grid, self._block, stream, self.gpudata, result.gpudata, self.size
            )
        return result

    def astype(
        self, dtype: "np.typing.DTypeLike", stream: "drv.Stream | None" = None
    ) -> "GPUArray":
        """A copy converted to dtype."""
        dtype = _check_dtype(dtype)
        if dtype == self.dtype:
            return self.copy()
        out = None if self.__class__ is GPUArray else _made_like(self, dtype=dtype)
        if self.dtype.kind == "c" and dtype.kind != "c":
            return _map(
                "astype", "pygpu::real({0})", [self], out, stream, dtype, compute=self.dtype
            )
        return _map("astype", "{0}", [self], out, stream, dtype)

    def any(
        self, stream: "drv.Stream | None" = None, allocator: "Callable[[int], Any] | None" = None
    ) -> "GPUArray":
        return any(self, stream=stream, allocator=allocator)

    def all(
        self, stream: "drv.Stream | None" = None, allocator: "Callable[[int], Any] | None" = None
    ) -> "GPUArray":
        return all(self, stream=stream, allocator=allocator)

    def sum(
        self,
        dtype: "np.typing.DTypeLike | None" = None,
        stream: "drv.Stream | None" = None,
        allocator: "Callable[[int], Any] | None" = None,
    ) -> "GPUArray":
        return sum(self, dtype=dtype, stream=stream, allocator=allocator)

    def max(self, stream: "drv.Stream | None" = None) -> "GPUArray":
        return max(self, stream=stream)

    def min(self, stream: "drv.Stream | None" = None) -> "GPUArray":
        return min(self, stream=stream)

    def dot(
        self,
        other: "GPUArray",
        dtype: "np.typing.DTypeLike | None" = None,
        stream: "drv.Stream | None" = None,
        allocator: "Callable[[int], Any] | None" = None,
    ) -> "GPUArray":
        return dot(self, other, dtype=dtype, stream=stream, allocator=allocator)

    # ---- views ----

    def _view(self, shape, strides, offset=0, dtype=None):
        dtype = self.dtype if dtype is None else dtype
        ptr = self.ptr + offset if self.gpudata is not None else None
        base = self if self.base is None else self.base
        size = 1
        for n in shape:
            size *= n
        if size == 0:
            ptr = self.ptr if self.gpudata is not None else None
        # a GPUArray, of a subclass's instance too (as PyCUDA's views: a
        # subclass's constructor may take other arguments, reikna's does)
        return _new(
            GPUArray,
            shape,
            dtype,
            strides,
            ptr,
            base,
            self.allocator,
            size,
            _is_c(shape, strides, dtype.itemsize),
            _is_f(shape, strides, dtype.itemsize),
        )

    def reshape(self, *shape: Any, order: str = "C") -> "GPUArray":
        """The same elements in a new shape: a view where the layout allows,
        else a copy (NumPy's semantics)."""
        if len(shape) == 1 and not isinstance(shape[0], (numbers.Integral, np.integer)):
            shape = shape[0]
        if order not in ("C", "F", "A"):
            raise ValueError("order must be 'C', 'F' or 'A', not %r" % (order,))
        if isinstance(shape, np.ndarray):
            shape = shape.tolist()
        shape = tuple(shape) if not isinstance(shape, (numbers.Integral, np.integer)) else (shape,)
        if builtins.sum(1 for n in shape if n == -1) > 1:
            raise ValueError("can only specify one unknown dimension")
        if -1 in shape:
            known = 1
            for n in shape:
                if n != -1:
                    known *= int(n)
            if known == 0 or self.size % known:
                raise ValueError(
                    "cannot reshape array of size %d into shape %r" % (self.size, shape)
                )
            shape = tuple(self.size // known if n == -1 else n for n in shape)
        shape = _normalize_shape(shape)
        size = 1
        for n in shape:
            size *= n
        if size != self.size:
            raise ValueError("cannot reshape array of size %d into shape %r" % (self.size, shape))
        if order == "A":
            order = "F" if (self._f and not self._c) else "C"
        src = self
        if not (self._c if order == "C" else self._f):
            src = GPUArray(self.shape, self.dtype, self.allocator, order=order)
            _copy_d2d(src, self, None)
        strides = (_c_strides if order == "C" else _f_strides)(self.itemsize, shape)
        if shape == self.shape and strides == self.strides and src is self:
            return self
        return src._view(shape, strides)

    def ravel(self, order: str = "C") -> "GPUArray":
        return self.reshape(self.size, order=order)

    def view(self, dtype: "np.typing.DTypeLike | None" = None) -> "GPUArray":
        """The same memory seen as another dtype (the fastest-varying axis
        rescaled when the item size changes)."""
        if dtype is None:
            return self._view(self.shape, self.strides)
        dtype = _check_dtype(dtype)
        old, new = self.itemsize, dtype.itemsize
        if old == new:
            return self._view(self.shape, self.strides, dtype=dtype)
        if not self.shape:
            raise ValueError(
                "changing the dtype of a 0d array is only supported if the itemsize is unchanged"
            )
        axis = _builtin_min(range(self.ndim), key=lambda k: (abs(self.strides[k]), -k))
        if self.strides[axis] != old and self.shape[axis] != 1:
            raise ValueError(
                "to change to a dtype of a different size, the fastest-varying "
                "axis must be contiguous"
            )
        if (self.shape[axis] * old) % new:
            raise ValueError(
                "new type not compatible with array: axis %d of %d bytes does "
                "not divide into items of %d bytes" % (axis, self.shape[axis] * old, new)
            )
        shape = list(self.shape)
        strides = list(self.strides)
        shape[axis] = self.shape[axis] * old // new
        strides[axis] = new
        return self._view(tuple(shape), tuple(strides), dtype=dtype)

    def squeeze(self) -> "GPUArray":
        keep = [k for k, n in enumerate(self.shape) if n != 1]
        return self._view(tuple(self.shape[k] for k in keep), tuple(self.strides[k] for k in keep))

    def transpose(self, axes: Any = None) -> "GPUArray":
        """A view with the axes permuted (reversed by default)."""
        if axes is None:
            axes = tuple(range(self.ndim - 1, -1, -1))
        axes = tuple(int(a) + (self.ndim if int(a) < 0 else 0) for a in axes)
        if sorted(axes) != list(range(self.ndim)):
            raise ValueError("axes don't match array: %r for %d dimensions" % (axes, self.ndim))
        return self._view(tuple(self.shape[a] for a in axes), tuple(self.strides[a] for a in axes))

    @property
    def T(self) -> "GPUArray":  # noqa: N802
        return self.transpose()

    def swapaxes(self, axis1: int, axis2: int) -> "GPUArray":
        axes = list(range(self.ndim))
        axes[axis1], axes[axis2] = axes[axis2], axes[axis1]
        return self.transpose(axes)

    def __getitem__(self, index: Any) -> "GPUArray":
        if not isinstance(index, tuple):
            index = (index,)
        for e in index:
            if isinstance(e, (GPUArray, np.ndarray, list)) and not (
                isinstance(e, np.ndarray) and e.ndim == 0 and e.dtype.kind in "iu"
            ):
                raise IndexError(
                    "only integers, slices, newaxis and ellipsis are valid "
                    "indices of a GPUArray (use gpuarray.take for an index "
                    "array)"
                )
        n_real = builtins.sum(1 for e in index if e is not None and e is not Ellipsis)
        if n_real > self.ndim:
            raise IndexError(
                "too many indices for array: array is %d-dimensional, but %d "
                "were indexed" % (self.ndim, n_real)
            )
        if builtins.sum(1 for e in index if e is Ellipsis) > 1:
            raise IndexError("an index can only have a single ellipsis ('...')")
        shape, strides, offset, axis = [], [], 0, 0
        for e in index:
            if e is Ellipsis:
                for _ in range(self.ndim - n_real):
                    shape.append(self.shape[axis])
                    strides.append(self.strides[axis])
                    axis += 1
            elif e is None:
                shape.append(1)
                strides.append(0)
            elif isinstance(e, slice):
                start, stop, step = e.indices(self.shape[axis])
                n = len(range(start, stop, step))
                shape.append(n)
                strides.append(step * self.strides[axis])
                if n:
                    offset += start * self.strides[axis]
                axis += 1
            elif isinstance(e, (numbers.Integral, np.integer, np.ndarray)) and not isinstance(
                e, (bool, np.bool_)
            ):
                k = int(e)
                n = self.shape[axis]
                if k < 0:
                    k += n
                if not 0 <= k < n:
                    raise IndexError(
                        "index %d is out of bounds for axis %d with size %d" % (int(e), axis, n)
                    )
                offset += k * self.strides[axis]
                axis += 1
            else:
                raise IndexError(
                    "invalid index %r (only integers, slices, newaxis and "
                    "ellipsis are valid)" % (e,)
                )
        while axis < self.ndim:
            shape.append(self.shape[axis])
            strides.append(self.strides[axis])
            axis += 1
        return self._view(tuple(shape), tuple(strides), offset)

    def __setitem__(self, index: Any, value: Any) -> None:
        dest = self[index]
        if isinstance(value, GPUArray) or hasattr(value, "__cuda_array_interface__"):
            value = asarray(value)
            if value.dtype != dest.dtype:
                value = value.astype(dest.dtype)
            _copy_d2d(dest, value, None)
        elif isinstance(value, np.ndarray) and value.ndim:
            if value.dtype != dest.dtype:
                value = value.astype(dest.dtype)
            value = np.broadcast_to(value, dest.shape)
            if dest.size:
                _copy_h2d(dest, value, False, None)
        else:
            dest.fill(value)

    # ---- complex parts ----

    @property
    def real(self) -> "GPUArray":
        """The real part (a new array for complex dtypes, self otherwise)."""
        if self.dtype.kind != "c":
            return self
        rdt = np.dtype(self.dtype.char.lower())
        out = (
            None
            if self.__class__ is GPUArray
            else _made_like(self, dtype=rdt, order="F" if self._f and not self._c else "C")
        )
        return _map("real", "pygpu::real({0})", [self], out, None, rdt, compute=self.dtype)

    @property
    def imag(self) -> "GPUArray":
        """The imaginary part (a new array; zeros for real dtypes)."""
        if self.dtype.kind != "c":
            return zeros_like(self)
        rdt = np.dtype(self.dtype.char.lower())
        out = (
            None
            if self.__class__ is GPUArray
            else _made_like(self, dtype=rdt, order="F" if self._f and not self._c else "C")
        )
        return _map("imag", "pygpu::imag({0})", [self], out, None, rdt, compute=self.dtype)

    def conj(self, out: "GPUArray | None" = None) -> "GPUArray":
        """The complex conjugate (self for real dtypes, unless out= is given)."""
        if self.dtype.kind != "c":
            if out is None:
                return self
            _copy_d2d(out, self if out.dtype == self.dtype else self.astype(out.dtype), None)
            return out
        if out is None and self.__class__ is not GPUArray:
            out = _made_like(self, order="F" if self._f and not self._c else "C")
        return _map(
            "conj", "pygpu::conj({0})", [self], out, None, self.dtype if out is None else out.dtype
        )

    conjugate = conj

    # PyCUDA's texture binding: texture references are gone since CUDA 12
    def bind_to_texref(self, texref: Any, allow_offset: bool = False) -> "NoReturn":
        raise NotImplementedError(
            "texture references were removed in CUDA 12; pass the "
            "array as a pointer (or use a texture object)"
        )

    bind_to_texref_ext = bind_to_texref


empty = GPUArray


def _async_kw(async_, kwargs):
    a = kwargs.pop("async", None)
    if kwargs:
        raise TypeError("extra keyword arguments specified: %s" % ", ".join(kwargs))
    if a is not None:
        async_ = a
    return bool(async_)


def _dlpack_device(a):
    ctx = a.gpudata.context if isinstance(a.gpudata, drv.DeviceAllocation) else None
    if ctx is None:
        try:
            dev = drv.Context.get_device()
        except drv.Error:
            return (2, 0)
        return (2, dev.ordinal)
    return (2, ctx.device.ordinal)


# ---- copies ----


def _elem_strides(a):
    out = []
    for s in a.strides:
        if s % a.itemsize:
            raise ValueError(
                "an array whose strides %r are not multiples of its item size "
                "(%d) cannot be used in an element-wise kernel" % (a.strides, a.itemsize)
            )
        out.append(s // a.itemsize)
    return out


def _copy_d2d(dst, src, stream):
    """dst[...] = src (same dtype; src broadcast to dst's shape)."""
    if not isinstance(src, GPUArray):
        raise TypeError("src must be a GPUArray, not %s" % type(src).__name__)
    if src.dtype != dst.dtype:
        raise TypeError("src and dst must have the same dtype (%s != %s)" % (src.dtype, dst.dtype))
    _check_operands("copy", (dst, src))
    if src.shape != dst.shape:
        try:
            np.broadcast_shapes(src.shape, dst.shape)
        except ValueError:
            raise ValueError(
                "could not broadcast an array of shape %r into shape %r" % (src.shape, dst.shape)
            ) from None
    if dst.size == 0:
        return
    if src.shape == dst.shape and src.strides == dst.strides and src._dense:
        if stream is None:
            drv.memcpy_dtod(dst.ptr, src.ptr, src.nbytes)
        else:
            drv.memcpy_dtod_async(dst.ptr, src.ptr, src.nbytes, stream)
        return
    _map("copy", "{0}", [src], dst, stream, dst.dtype)


def _host_dense_view(host, dev):
    """host as a flat contiguous buffer in dev's element order, or None."""
    if not dev._dense:
        return None
    if (
        host.strides == dev.strides
        or (host.flags.c_contiguous and dev._c)
        or (host.flags.f_contiguous and dev._f)
    ):
        if host.flags.c_contiguous or host.flags.f_contiguous or host.strides == dev.strides:
            if _is_dense(host.shape, host.strides, host.itemsize):
                return (
                    np.lib.stride_tricks.as_strided(host, (host.size,), (host.itemsize,))
                    if host.ndim != 1 or host.strides != (host.itemsize,)
                    else host
                )
    return None


def _copy_h2d(dev, host, async_, stream):
    _check_operands("copy to the device", (dev,))
    flat = _host_dense_view(host, dev)
    if flat is not None and (
        host.strides == dev.strides
        or dev.ndim <= 1
        or (host.flags.c_contiguous and dev._c)
        or (host.flags.f_contiguous and dev._f)
    ):
        if async_ or stream is not None:
            drv.memcpy_htod_async(dev.ptr, flat, stream)
        else:
            drv.memcpy_htod(dev.ptr, flat)
        return
    # gather on the host into dev's dense order, or through a device temporary
    if dev._dense:
        order = _compact_strides(dev.shape, dev.strides, dev.itemsize)
        tmp = np.lib.stride_tricks.as_strided(np.empty(host.size, host.dtype), host.shape, order)
        tmp[...] = host
        drv.memcpy_htod(dev.ptr, np.lib.stride_tricks.as_strided(tmp, (tmp.size,), (tmp.itemsize,)))
        return
    tmp = to_gpu(np.ascontiguousarray(host), allocator=dev.allocator)
    _copy_d2d(dev, tmp, stream)


# glibc serves np.empty below 32 MiB (its largest dynamic mmap threshold) from
# memory it recycles, pages already in; from there up every np.empty is a
# fresh mapping whose pages the copy must fault in
_OWN_MAPPING_FROM = 32 << 20


def _host_empty(size, dtype):
    """A new, UNFILLED 1-D host array that a device-to-host copy fills
    whole before anyone reads it (get(), _copy_d2h's gather buffer: every
    caller writes every byte, and drops the array if the copy fails).

    From 32 MiB up it lies over a HostBlock (src/memory/hostblock.c): a private
    anonymous mapping started on a 2 MiB boundary and marked
    MADV_HUGEPAGE, so the staged copy's pieces start on huge pages, each
    thread faulting in its own in parallel.  When the array dies the
    mapping goes to the host cache, pages in, and the next array of its
    size (rounded up to 2 MiB) takes it: no page faults in that copy, but
    its bytes are the former array's, not zeros -- hence "unfilled"
    (docs/memory.md, "Pageable copies").  Smaller arrays, or where mmap is
    refused, come from np.empty."""
    nbytes = size * dtype.itemsize
    if nbytes < _OWN_MAPPING_FROM or dtype.hasobject:
        return np.empty(size, dtype)
    try:
        block = _driver._host_block(nbytes)
    except MemoryError:  # no address space: NumPy's turn
        return np.empty(size, dtype)
    return np.frombuffer(block, dtype, count=size)


def _copy_d2h(host, dev, async_, stream):
    _check_operands("copy from the device", (dev,))
    if not host.flags.writeable:
        raise ValueError("the destination array is read-only")
    src = dev
    if not dev._dense:
        src = GPUArray(dev.shape, dev.dtype, dev.allocator)
        _copy_d2d(src, dev, stream)
    if (
        host.strides == src.strides
        and _is_dense(host.shape, host.strides, host.itemsize)
        and host.flags.writeable
    ):
        flat = np.lib.stride_tricks.as_strided(host, (host.size,), (host.itemsize,))
        if async_:
            drv.memcpy_dtoh_async(flat, src.ptr, stream)
        else:
            drv.memcpy_dtoh(flat, src.ptr, stream)
        return
    order = _compact_strides(src.shape, src.strides, src.itemsize)
    buf = _host_empty(src.size, src.dtype)
    drv.memcpy_dtoh(buf, src.ptr, stream)
    host[...] = np.lib.stride_tricks.as_strided(buf, src.shape, order)


# ---- PyCUDA's _memcpy_discontig (reikna's Array.copy calls it) ----


def _discontig_plan(shape, sstrides, dstrides, itemsize):
    """The byte-level copy of an array of shape between two strided layouts,
    as [[count, src_stride, dst_stride], ...] from the fastest axis on (the
    first entry contiguous bytes on both sides, the width), its axes in
    src's order with contiguous runs merged; None where no pitched copy
    does it (a stride <= 0, overlapping axes, or dst's axes in another
    order than src's)."""
    axes = sorted((s, d, n) for s, d, n in zip(sstrides, dstrides, shape) if n != 1)
    dims = [[itemsize, 1, 1]]
    for s, d, n in axes:
        if s <= 0 or d <= 0:
            return None
        n0, s0, d0 = dims[-1]
        if s == s0 * n0 and d == d0 * n0:
            dims[-1][0] = n0 * n
        elif s >= s0 * n0 and d >= d0 * n0:
            dims.append([n, s, d])
        else:
            return None
    return dims


def _host_flat(host):
    """host's memory from element 0 on as a contiguous 1-D array (host's
    strides stay the offsets into it), or None where host has a stride
    that is not positive or not a multiple of its item size."""
    extent = host.itemsize
    for n, s in zip(host.shape, host.strides):
        if n > 1:
            if s <= 0 or s % host.itemsize:
                return None
            extent += (n - 1) * s
    return np.lib.stride_tricks.as_strided(host, (extent // host.itemsize,), (host.itemsize,))


def _memcpy_discontig(dst, src, async_=False, stream=None):
    """Copy the contents of src into dst (PyCUDA's signature and checks).

    src and dst: GPUArrays or NumPy arrays (at least one a GPUArray for a
    device copy) of the same shape and dtype, with any strides.  Where the
    two layouts nest (up to two strided axes besides a contiguous run, in
    the same order on both sides) it is one cuMemcpy, cuMemcpy2D or
    cuMemcpy3D, enqueued on stream when async_ is true, as PyCUDA's; other
    layouts (more strided axes, negative strides, dst's axes in another
    order), which PyCUDA refuses, are copied as GPUArray.set()/get() and
    element-wise copies do.  A device-to-device copy without async_ is
    queued on the default stream (no host side waits for it), so it is
    captured inside a capture."""
    if not isinstance(src, (GPUArray, np.ndarray)):
        raise TypeError("src must be GPUArray or ndarray")
    if not isinstance(dst, (GPUArray, np.ndarray)):
        raise TypeError("dst must be GPUArray or ndarray")
    if src.shape != dst.shape:
        raise ValueError("src and dst must be same shape")
    if src.dtype != dst.dtype:
        raise TypeError("src and dst must have same dtype")
    hsrc, hdst = isinstance(src, np.ndarray), isinstance(dst, np.ndarray)
    if hsrc and hdst:
        dst[...] = src
        return
    if hdst and not dst.flags.writeable:
        raise ValueError("the destination array is read-only")
    if dst.size == 0:
        return
    if hdst:
        _check_context(src, None)
    else:
        _check_context(dst, None)
        if not hsrc:
            _check_context(src, None)
    sflat = _host_flat(src) if hsrc else None
    if hsrc and sflat is None:
        src = np.ascontiguousarray(src)
        sflat = _host_flat(src)
    dflat = _host_flat(dst) if hdst else None
    plan = None
    if not hdst or dflat is not None:
        plan = _discontig_plan(src.shape, src.strides, dst.strides, src.itemsize)
    if plan is not None and len(plan) == 3 and (plan[2][1] % plan[1][1] or plan[2][2] % plan[1][2]):
        plan = None  # the slices' pitch is not a whole number of rows
    if plan is None or len(plan) > 3:
        if hsrc:
            _copy_h2d(dst, src, async_, stream)
        elif hdst:
            _copy_d2h(dst, src, async_, stream)
        else:
            _copy_d2d(dst, src, stream)
        return
    if len(plan) == 1:
        n = plan[0][0]
        if hsrc:
            if async_:
                drv.memcpy_htod_async(dst.ptr, sflat, stream)
            else:
                drv.memcpy_htod(dst.ptr, sflat)
        elif hdst:
            if async_:
                drv.memcpy_dtoh_async(dflat, src.ptr, stream)
            else:
                drv.memcpy_dtoh(dflat, src.ptr)
        elif async_:
            drv.memcpy_dtod_async(dst.ptr, src.ptr, n, stream)
        else:
            drv.memcpy_dtod(dst.ptr, src.ptr, n)
        return
    copy = drv.Memcpy2D() if len(plan) == 2 else drv.Memcpy3D()
    if hsrc:
        copy.set_src_host(sflat)
    else:
        copy.set_src_device(src.ptr)
    if hdst:
        copy.set_dst_host(dflat)
    else:
        copy.set_dst_device(dst.ptr)
    copy.width_in_bytes = plan[0][0]
    copy.height, copy.src_pitch, copy.dst_pitch = plan[1]
    if len(plan) == 3:
        depth, sz, dz = plan[2]
        copy.src_height, copy.dst_height = sz // copy.src_pitch, dz // copy.dst_pitch
        copy.depth = depth
    if async_:
        copy(stream)
    elif hsrc or hdst:
        copy()
    else:
        # device to device: no host side to wait for, so it is queued on the
        # default stream (as memcpy_dtod is), which inside a capture is the
        # capturing stream: captured, where a blocking copy would be refused
        copy(drv.Stream.null())


# ---- element-wise machinery ----

_SAMPLE = {bool: True, int: 1, float: 1.0, complex: 1j}
_UFUNCS = {
    "add": np.add,
    "subtract": np.subtract,
    "multiply": np.multiply,
    "true_divide": np.true_divide,
    "floor_divide": np.floor_divide,
    "remainder": np.remainder,
    "power": np.power,
    "equal": np.equal,
    "not_equal": np.not_equal,
    "less": np.less,
    "less_equal": np.less_equal,
    "greater": np.greater,
    "greater_equal": np.greater_equal,
    "maximum": np.maximum,
    "minimum": np.minimum,
    "fmax": np.fmax,
    "fmin": np.fmin,
    "logical_and": np.logical_and,
    "logical_or": np.logical_or,
    "bitwise_and": np.bitwise_and,
    "bitwise_or": np.bitwise_or,
    "bitwise_xor": np.bitwise_xor,
}
_COMPARISONS = {
    "equal": "==",
    "not_equal": "!=",
    "less": "<",
    "less_equal": "<=",
    "greater": ">",
    "greater_equal": ">=",
}
_types_cache: dict[Any, Any] = {}


def _operand_key(x):
    """What decides an operand's part in the result dtype: an array's dtype,
    a NumPy scalar's dtype, or a Python scalar's type (weak, NEP 50)."""
    if isinstance(x, GPUArray):
        return x.dtype
    tp = type(x)
    if tp in _SAMPLE:
        return tp
    if isinstance(x, np.generic):
        return x.dtype
    if isinstance(x, np.ndarray) and x.ndim == 0:
        return x.dtype
    return None


def _sample(key):
    if isinstance(key, np.dtype):
        return np.zeros(1, key)
    return _SAMPLE[key]


def _types(op, ka, kb):
    """(result dtype, compute dtype) of op on operands ka, kb (NumPy's
    rules, found by asking NumPy once per combination)."""
    key = (op, ka, kb)
    found = _types_cache.get(key)
    if found is None:
        sa, sb = _sample(ka), _sample(kb)
        ufunc = _UFUNCS[op]
        try:
            import warnings

            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                res = np.asarray(ufunc(sa, sb)).dtype
        except TypeError as e:
            raise TypeError(
                "%s is not supported for %s and %s (%s)" % (op, _kname(ka), _kname(kb), e)
            ) from None
        if res.hasobject:
            raise TypeError("%s of %s and %s gives Python objects" % (op, _kname(ka), _kname(kb)))
        if op in _COMPARISONS or op in ("logical_and", "logical_or"):
            comp = np.result_type(sa, sb)
        else:
            comp = res
        found = (res, comp)
        _types_cache[key] = found
    return found


def _kname(k):
    return str(k) if isinstance(k, np.dtype) else "Python %s" % k.__name__


def _result_dtype(op, a, b):
    return _types(op, _operand_key(a), _operand_key(b))[0]


def _expr(op, cdt):
    ct = dtype_to_ctype(cdt)
    kind = cdt.kind
    if op in _COMPARISONS:
        if kind == "c" and op not in ("equal", "not_equal"):
            return (
                "(pygpu::real({0}) %s pygpu::real({1}) || (pygpu::real({0}) == "
                "pygpu::real({1}) && pygpu::imag({0}) %s pygpu::imag({1})))"
                % (_COMPARISONS[op][0], _COMPARISONS[op])
            )
        return "{0} %s {1}" % _COMPARISONS[op]
    if op == "add":
        return "{0} + {1}"
    if op == "subtract":
        return "{0} - {1}"
    if op == "multiply":
        return "{0} * {1}"
    if op == "true_divide":
        return "{0} / {1}"
    if op == "power":
        if kind in "iub":
            return "pygpu::ipow<%s>({0}, {1})" % ct
        return "pow({0}, {1})"
    if op == "floor_divide":
        if kind == "c":
            raise TypeError("floor_divide is not supported for complex numbers")
        if kind in "ub":
            return "(({1}) == 0 ? (%s) 0 : ({0}) / ({1}))" % ct
        return (
            "pygpu::floordiv_int<%s>({0}, {1})"
            if kind == "i"
            else "pygpu::floordiv_float<%s>({0}, {1})"
        ) % ct
    if op == "remainder":
        if kind == "c":
            raise TypeError("remainder is not supported for complex numbers")
        if kind in "ub":
            return "(({1}) == 0 ? (%s) 0 : ({0}) %% ({1}))" % ct
        return (
            "pygpu::mod_int<%s>({0}, {1})" if kind == "i" else "pygpu::mod_float<%s>({0}, {1})"
        ) % ct
    if op in ("maximum", "minimum", "fmax", "fmin"):
        if kind == "c":
            raise TypeError("%s is not supported for complex numbers here" % op)
        return "pygpu::%s<%s>({0}, {1})" % (op + "_" if op in ("fmax", "fmin") else op, ct)
    if op in ("logical_and", "logical_or"):
        return "(({0}) != (%s) 0) %s (({1}) != (%s) 0)" % (
            ct,
            "&&" if op == "logical_and" else "||",
            ct,
        )
    if op in ("bitwise_and", "bitwise_or", "bitwise_xor"):
        if kind not in "iub":
            raise TypeError("%s is only for integer and bool arrays, not %s" % (op, cdt))
        return "{0} %s {1}" % {"bitwise_and": "&", "bitwise_or": "|", "bitwise_xor": "^"}[op]
    raise ValueError("unknown operation %r" % op)


# the fast paths: (context, op, operand keys) -> (Function, result dtype, scalar dtype)
_fast_aa: dict[Any, Any] = {}
_fast_as: dict[Any, Any] = {}
_fast_sa: dict[Any, Any] = {}


def _subclassed(a):
    """a is an instance of a GPUArray subclass (not GPUArray itself)."""
    return a.__class__ is not GPUArray and isinstance(a, GPUArray)


def _made_like(like, *args, **kwargs):
    """like._new_like_me(*args, **kwargs), checked to be a GPUArray."""
    r = like._new_like_me(*args, **kwargs)
    if not isinstance(r, GPUArray):
        raise TypeError(
            "%s._new_like_me() returned %s, not a GPUArray"
            % (type(like).__name__, type(r).__name__)
        )
    return r


def _like_me(operands, *args, **kwargs):
    """PyCUDA's result of an operation whose array operand is of a GPUArray
    subclass: that operand's _new_like_me(*args, **kwargs), called as PyCUDA
    calls it, so the subclass (reikna's Array) gets its own type back.  The
    operand is the first array of the result's shape (PyCUDA: self, or the
    other one where self is 0-d); None where it is a GPUArray itself (the
    result is made as before) or the shapes do not broadcast."""
    arrays = [o for o in operands if isinstance(o, GPUArray)]
    try:
        shape = np.broadcast_shapes(*(a.shape for a in arrays))
    except ValueError:
        return None
    like = next((a for a in arrays if a.shape == shape), None)
    if like is None or like.__class__ is GPUArray:
        return None
    return _made_like(like, *args, **kwargs)


_object_new = object.__new__


def _binary(op, x, y, out=None, stream=None):
    """x <op> y element-wise with NumPy's dtypes and broadcasting."""
    if out is None and stream is None:
        f = _OPERATORS.get(op)
        if f is None:
            f = _OPERATORS[op] = _operator(op)
        return f(x, y)
    return _binary_general(op, x, y, out, stream)


def _aa_entry(op, ctx, dx, dy):
    """(Function, result dtype) of x <op> y for dense arrays of one layout
    and dtypes dx, dy in ctx (compiled on first use)."""
    key = (ctx, op, dx, dy)
    ent = _fast_aa.get(key)
    if ent is None:
        res, comp = _types(op, dx, dy)
        ent = (
            elementwise.get_map_kernel(
                op, _expr(op, comp), ("a", "a"), (dx, dy), (comp, comp), res
            ),
            res,
        )
        _fast_aa[key] = ent
    return ent


def _as_entry(op, ctx, dx, ty):
    """(Function, result dtype, scalar dtype) of x <op> s: a dense array of
    dtype dx and a Python scalar of type ty."""
    key = (ctx, op, dx, ty)
    ent = _fast_as.get(key)
    if ent is None:
        res, comp = _types(op, dx, ty)
        ent = (
            elementwise.get_map_kernel(
                op, _expr(op, comp), ("a", "s"), (dx, comp), (comp, comp), res
            ),
            res,
            comp,
        )
        _fast_as[key] = ent
    return ent


def _sa_entry(op, ctx, tx, dy):
    """(Function, result dtype, scalar dtype) of s <op> y."""
    key = (ctx, op, tx, dy)
    ent = _fast_sa.get(key)
    if ent is None:
        res, comp = _types(op, tx, dy)
        ent = (
            elementwise.get_map_kernel(
                op, _expr(op, comp), ("s", "a"), (comp, dy), (comp, comp), res
            ),
            res,
            comp,
        )
        _fast_sa[key] = ent
    return ent


# the C operators' table kinds and scalar conversions (src/launch/fastops.c
# exports them: one source for both sides)
_FO_AA, _FO_AS, _FO_SA = _driver._FO_ARRAY_ARRAY, _driver._FO_ARRAY_SCALAR, _driver._FO_SCALAR_ARRAY
_FO_PYTHON, _FO_AS_IS, _FO_TO_FLOAT = _driver._FO_PYTHON, _driver._FO_AS_IS, _driver._FO_TO_FLOAT
_FO_REFLECTED, _FO_INPLACE = _driver._FO_REFLECTED, _driver._FO_INPLACE


def _conv(ty, comp):
    """How the C fast path passes a Python scalar of type ty to a kernel
    parameter of dtype comp as _scalar_value() does: as it is, an int as a
    float (exact below 2**53), or not at all (the Python path converts)."""
    if ty is float and comp.kind == "f":
        return _FO_AS_IS
    if ty is int and comp.kind in "iu":
        return _FO_AS_IS
    if ty is int and comp.kind == "f" and comp.itemsize in (4, 8):
        return _FO_TO_FLOAT
    return _FO_PYTHON


# op -> its _ArrayOperator (GPUArray.__add__ is _FAST["add"]): the steady
# state of the operators in C (src/launch/fastops.c; docs/arrays.md, "The
# operators' fast path"), which learns each kernel from the Python path below
_FAST: dict[Any, Any] = {}


def _operator(op):
    """x <op> y as the operators call it (no out, no stream): the Python
    fast paths of issue 27 (the launch floor), and what teaches the C one
    (_FAST[op]) its kernels; what they do not take goes to the general
    path."""
    fast = None  # _FAST[op], made below

    def teach(kind, ctx, k1, k2, func, res, comp):
        if kind == _FO_AA:
            fast._learn(_FO_AA, ctx, k1, k2, func, res, _FO_PYTHON, 0, 32 * _sms())
            return
        conv = _conv(k2 if kind == _FO_AS else k1, comp)
        if conv != _FO_PYTHON:
            fast._learn(
                kind, ctx, k1, k2, func, res, conv, op == "power" and res.kind in "iu", 32 * _sms()
            )

    def binary(x, y):
        tx, ty = type(x), type(y)
        if (
            tx is ty is GPUArray
            and x.shape == y.shape
            and x.strides == y.strides
            and (x._c or x._f)
        ):
            # the operators' fast path (issue 27: at the launch floor): the
            # current context as this thread remembers it (no driver call), the
            # gate's proof, the kernel by (context, op, dtypes), the result's
            # block from the block cache, one launch
            ctx = _get_current()
            gx, gy = x.gpudata, y.gpudata
            proven = (
                gx.__class__ is _DA
                and gy.__class__ is _DA
                and gx.context is ctx
                and gy.context is ctx
                and x.nbytes <= gx.size
                and y.nbytes <= gy.size
            )
            if not proven:
                _check_devices((x, y), ctx)
            dx = x.dtype
            func, res = _aa_entry(op, ctx, dx, y.dtype)
            n = x.size
            if res is dx and n:
                # x._like_for_result(res), inlined (its first branch): x's
                # layout and attributes, its own memory
                alloc = x.allocator
                if alloc is _default_allocator:
                    if proven:  # what the C path takes: teach it the kernel
                        teach(_FO_AA, ctx, dx, y.dtype, func, res, None)
                    try:
                        g = _alloc_async(x.nbytes)
                    except drv.LogicError:
                        g = drv.mem_alloc(x.nbytes)
                else:
                    g = alloc(x.nbytes)
                z = _clone(x, GPUArray, g)
            else:
                z = x._like_for_result(res)
                g = z.gpudata
            if n:
                grid, block = _splay_cache.get(n) or splay(n)
                func.prepared_async_call(grid, block, None, g, gx, gy, n)
            return z
        if tx is GPUArray and (x._c or x._f) and ty in _SAMPLE:
            ctx = _get_current()
            gx = x.gpudata
            proven = gx.__class__ is _DA and gx.context is ctx and x.nbytes <= gx.size
            if not proven:
                _check_devices((x,), ctx)
            func, res, comp = _as_entry(op, ctx, x.dtype, ty)
            _check_power_scalar(op, res, y)
            if proven and res is x.dtype and x.allocator is _default_allocator:
                teach(_FO_AS, ctx, x.dtype, ty, func, res, comp)
            z = x._like_for_result(res)
            if z.size:
                n = z.size
                grid, block = _splay_cache.get(n) or splay(n)
                func.prepared_async_call(
                    grid,
                    block,
                    None,
                    z.gpudata,
                    x.gpudata,
                    elementwise._scalar_value(y, comp, "the scalar operand"),
                    n,
                )
            return z
        if ty is GPUArray and (y._c or y._f) and tx in _SAMPLE:
            ctx = _get_current()
            gy = y.gpudata
            proven = gy.__class__ is _DA and gy.context is ctx and y.nbytes <= gy.size
            if not proven:
                _check_devices((y,), ctx)
            func, res, comp = _sa_entry(op, ctx, tx, y.dtype)
            if proven and res is y.dtype and y.allocator is _default_allocator:
                teach(_FO_SA, ctx, tx, y.dtype, func, res, comp)
            z = y._like_for_result(res)
            if z.size:
                n = z.size
                grid, block = _splay_cache.get(n) or splay(n)
                func.prepared_async_call(
                    grid,
                    block,
                    None,
                    z.gpudata,
                    elementwise._scalar_value(x, comp, "the scalar operand"),
                    y.gpudata,
                    n,
                )
            return z
        return _binary_general(op, x, y, None, None)

    def prime(x, y):
        """x <op>= y: teach the C path the kernel of x <op> y that its
        in-place form takes (when it would take it)."""
        if not (x._c or x._f) or not x.size or x.allocator is not _default_allocator:
            return
        ty = y.__class__
        if ty is GPUArray:
            if x.shape != y.shape or x.strides != y.strides:
                return
            k2 = y.dtype
        elif ty is float or ty is int:
            k2 = ty
        else:
            return
        ctx = _get_current()
        if ctx is None:
            return
        try:
            res = _types(op, x.dtype, k2)[0]
        except TypeError:
            return  # (the general path raises it)
        if res is not x.dtype:
            return
        if ty is GPUArray:
            func, res = _aa_entry(op, ctx, x.dtype, k2)
            teach(_FO_AA, ctx, x.dtype, k2, func, res, None)
        else:
            func, res, comp = _as_entry(op, ctx, x.dtype, ty)
            teach(_FO_AS, ctx, x.dtype, ty, func, res, comp)

    def inplace(x, y):
        if x.__class__ is GPUArray:
            prime(x, y)
        return _binary(op, x, y, out=x)

    binary.__name__ = binary.__qualname__ = "_%s" % op
    inplace.__name__ = inplace.__qualname__ = "_i%s" % op
    fast = _FAST[op] = _driver._ArrayOperator(
        "_%s" % op, binary, GPUArray, _default_allocator, _ATTRS
    )
    binary.inplace = inplace
    return binary


def _binary_general(op, x, y, out, stream):
    """x <op> y through _map: any layout, broadcasting, out=, stream=."""
    # the general path
    kx, ky = _operand_key(x), _operand_key(y)
    if kx is None or ky is None:
        other = x if kx is None else y
        if hasattr(other, "__cuda_array_interface__") or hasattr(other, "__dlpack__"):
            if kx is None:
                x = asarray(x)
            else:
                y = asarray(y)
            return _binary(op, x, y, out, stream)
        return NotImplemented
    res, comp = _types(op, kx, ky)
    if op == "power":
        _check_power_scalar(op, res, y)
    if out is None and (_subclassed(x) or _subclassed(y)):
        out = _like_me((x, y), res)
    return _map(op, _expr(op, comp), [x, y], out, stream, res, compute=comp, op=op)


_OPERATORS: dict[Any, Any] = {}  # op -> the Python path of x <op> y (_operator(op))


def _install_operators():
    """GPUArray's arithmetic operators, their reflected and in-place forms
    are _ArrayOperators (C, one call a + b); each falls back to the Python
    path: _OPERATORS[op], the class's own reflected method, the in-place
    one through _binary(out=self)."""
    for op, nm in (
        ("add", "add"),
        ("subtract", "sub"),
        ("multiply", "mul"),
        ("true_divide", "truediv"),
        ("floor_divide", "floordiv"),
        ("remainder", "mod"),
        ("power", "pow"),
    ):
        binary = _OPERATORS[op] = _operator(op)
        fast = _FAST[op]
        reflected = GPUArray.__dict__["__r%s__" % nm]
        setattr(GPUArray, "__%s__" % nm, fast)
        setattr(
            GPUArray,
            "__r%s__" % nm,
            _driver._ArrayOperator(
                "__r%s__" % nm,
                reflected,
                GPUArray,
                _default_allocator,
                _ATTRS,
                fast,
                _FO_REFLECTED,
            ),
        )
        setattr(
            GPUArray,
            "__i%s__" % nm,
            _driver._ArrayOperator(
                "__i%s__" % nm,
                binary.inplace,
                GPUArray,
                _default_allocator,
                _ATTRS,
                fast,
                _FO_INPLACE,
            ),
        )
    GPUArray.__div__ = GPUArray.__truediv__
    GPUArray.__rdiv__ = GPUArray.__rtruediv__
    GPUArray.__idiv__ = GPUArray.__itruediv__


_install_operators()


def _check_power_scalar(op, res, y):
    if op == "power" and res.kind in "iu" and isinstance(y, (int, np.integer)) and y < 0:
        raise ValueError("Integers to negative integer powers are not allowed.")


def _map(
    name,
    expr,
    operands,
    out,
    stream,
    res_dtype,
    compute=None,
    scalar_dtypes=None,
    op=None,
    crit_raw=False,
):
    """out = expr(operands) element-wise.  operands: GPUArrays (any strides,
    broadcast against each other and out) and scalars.  compute: the dtype
    every operand is cast to (default: res_dtype); scalar_dtypes: the
    by-value parameter types (default: compute); crit_raw: the first
    operand is read in its own dtype (a criterion)."""
    res_dtype = np.dtype(res_dtype)
    comp = res_dtype if compute is None else np.dtype(compute)
    arrays = [o for o in operands if isinstance(o, GPUArray)]
    if not arrays and out is None:
        raise TypeError("%s needs at least one GPUArray operand" % name)
    _check_operands(op or name, arrays + ([out] if isinstance(out, GPUArray) else []))
    shapes = [a.shape for a in arrays]
    try:
        shape = np.broadcast_shapes(*shapes) if shapes else out.shape
    except ValueError:
        raise ValueError(
            "operands could not be broadcast together with shapes %s"
            % " ".join(str(s) for s in shapes)
        ) from None
    if out is not None:
        if not isinstance(out, GPUArray):
            raise TypeError("out must be a GPUArray, not %s" % type(out).__name__)
        if out.shape != shape:
            try:
                if np.broadcast_shapes(out.shape, shape) != out.shape:
                    raise ValueError
            except ValueError:
                raise ValueError(
                    "out has shape %r but the result has shape %r" % (out.shape, shape)
                ) from None
            shape = out.shape
        if (
            out.dtype != res_dtype
            and name not in ("fill", "copy", "astype")
            and not np.can_cast(res_dtype, out.dtype, "same_kind")
        ):
            raise TypeError(
                "Cannot cast %s output from dtype('%s') to dtype('%s') with "
                "casting rule 'same_kind'" % (op or name, res_dtype, out.dtype)
            )
        res_dtype = out.dtype
    else:
        like = next((a for a in arrays if a.shape == shape and (a._c or a._f)), None)
        order = "F" if like is not None and like._f and not like._c else "C"
        alloc = arrays[0].allocator if arrays else None
        out = GPUArray(shape, res_dtype, alloc, order=order)
    if out.size == 0:
        return out
    kinds, dtypes, cdtypes, args = [], [], [], []
    sdt = iter(scalar_dtypes or ())
    for o in operands:
        if isinstance(o, GPUArray):
            kinds.append("a")
            dtypes.append(o.dtype)
            cdtypes.append(comp)
            args.append(o)
        else:
            st = next(sdt, comp)
            if isinstance(o, np.ndarray) and o.ndim:
                raise TypeError(
                    "%s: a NumPy array operand lives in host memory; copy it "
                    "with gpuarray.to_gpu first" % (op or name)
                )
            kinds.append("s")
            dtypes.append(st)
            cdtypes.append(comp)
            args.append(elementwise._scalar_value(o, st, "%s: the scalar operand" % (op or name)))
    if crit_raw:
        cdtypes[0] = dtypes[0]
    n = out.size
    grid, block = splay(n)
    plain = out._c or out._f
    if plain:
        for a in args:
            if isinstance(a, GPUArray) and not (
                a.shape == out.shape and a.strides == _scaled(out, a)
            ):
                plain = False
                break
    if plain:
        func = elementwise.get_map_kernel(
            name, expr, tuple(kinds), tuple(dtypes), tuple(cdtypes), res_dtype, 0
        )
        launch = [out.gpudata] + [a.gpudata if isinstance(a, GPUArray) else a for a in args]
        func.prepared_async_call(grid, block, stream, *launch, n)
        return out
    # strided/broadcast: strides in elements, broadcast axes stride 0
    nd = len(out.shape)
    stride_lists = [_elem_strides(out)]
    for a in args:
        if isinstance(a, GPUArray):
            es = _elem_strides(a)
            pad = nd - a.ndim
            st = [0] * pad + [
                0 if a.shape[k] == 1 and out.shape[pad + k] != 1 else es[k] for k in range(a.ndim)
            ]
            stride_lists.append(st)
    cshape, cstrides = elementwise._collapse(out.shape, stride_lists)
    ndim = len(cshape)
    func = elementwise.get_map_kernel(
        name, expr, tuple(kinds), tuple(dtypes), tuple(cdtypes), res_dtype, ndim
    )
    launch = [_base_ptr(out)] + [_base_ptr(a) if isinstance(a, GPUArray) else a for a in args]
    launch += list(cshape)
    for st in cstrides:
        launch += st
    func.prepared_async_call(grid, block, stream, *launch, n)
    return out


def _scaled(out, a):
    """The strides a dense operand needs to be read at the same flat index
    as out's elements."""
    if a.itemsize == out.itemsize:
        return out.strides
    return tuple(s // out.itemsize * a.itemsize for s in out.strides)


def _base_ptr(a):
    return a.gpudata if a.gpudata is not None else 0


# ---- the operand gate ----
#
# Every array entry point (operators, module functions, methods, the
# generators' calls, cumath, curandom, reductions, scans, copies, DLPack
# export) checks its GPUArray operands here before anything reaches the
# driver.  The fast paths skip only what they prove themselves: an exact,
# dense GPUArray whose gpudata is a DeviceAllocation of the current context
# with nbytes <= its size (its data starts at the allocation, so it lies
# within it), and a freed DeviceAllocation is refused by the launch itself;
# anything else (a view, a pooled block, a subclass, foreign memory) comes
# here.


def _allocation(a):
    """The allocation a's elements lie in (a DeviceAllocation or a pooled
    block), or None where pygpu cannot know it (foreign memory, a raw
    pointer)."""
    g = a.gpudata
    if isinstance(g, (_DA, PooledDeviceAllocation)):
        return g
    b = a.base
    if isinstance(b, GPUArray):
        g = b.gpudata
        if isinstance(g, (_DA, PooledDeviceAllocation)):
            return g
        b = b.base
    if isinstance(b, (_DA, PooledDeviceAllocation)):
        return b
    return None


def _extent(shape, strides, itemsize):
    """(lo, hi): the bytes an array's elements occupy, relative to element
    0, as [lo, hi); None for an empty array."""
    lo = hi = 0
    for n, s in zip(shape, strides):
        if n == 0:
            return None
        d = (n - 1) * s
        if d < 0:
            lo += d
        else:
            hi += d
    return lo, hi + itemsize


def _check_extent(ptr, shape, strides, itemsize, g, what):
    """The elements at ptr lie within allocation g, else ValueError naming
    both sizes."""
    ext = _extent(shape, strides, itemsize)
    if ext is None:
        return
    start = int(g)
    size = g.size
    lo, hi = ptr + ext[0] - start, ptr + ext[1] - start
    if lo < 0 or hi > size:
        raise ValueError(
            "%s: the array's elements span bytes [%d, %d) of an allocation of "
            "%d bytes (shape %r, strides %r, %d-byte items): they lie outside "
            "its memory" % (what, lo, hi, size, shape, strides, itemsize)
        )


def _check_one(a, ctx, what):
    """The gate for one operand (see _check_operands)."""
    if a.__class__ is not GPUArray and not isinstance(a, GPUArray):
        raise TypeError("%s: expected a GPUArray, not %s" % (what, type(a).__name__))
    g = a.gpudata
    cls = g.__class__
    if cls is _DA:
        alloc = g
    else:
        alloc = _allocation(a)
        if alloc is None:
            return
    if alloc.__class__ is _DA or isinstance(alloc, _DA):
        if alloc.freed:
            raise drv.LogicError("%s: the array's memory was freed" % what)
        if ctx is not None:
            gctx = alloc.context
            if gctx is not ctx and gctx != ctx:
                raise ValueError("%s: %s" % (what, _elsewhere_message(gctx, ctx)))
    elif alloc._alloc is None:  # a pooled block given back
        raise drv.LogicError("%s: the array's memory was freed" % what)
    if a.size:
        if a._c or a._f:  # dense, positive strides: [ptr, ptr + nbytes)
            start = int(alloc)
            p = g if cls is int else int(g)
            if start <= p and p + a.nbytes <= start + alloc.size:
                return
        _check_extent(a.ptr, a.shape, a.strides, a.itemsize, alloc, what)


_NO_CTX = object()


def _check_operands(
    what, arrays, ctx=_NO_CTX, contiguous=False, same_size=False, same_layout=False, dtype=None
):
    """The operand gate (see above).  arrays: the GPUArray operands (None
    entries are skipped).  Each one's memory must not be freed (LogicError),
    must live in ctx, the current context by default (ValueError naming
    both devices), and its elements must lie within its allocation
    (ValueError naming the sizes); with dtype, be of that dtype (TypeError);
    with contiguous, be C- or F-contiguous (RuntimeError, PyCUDA's class).
    same_size: all hold as many elements (ValueError naming the sizes);
    same_layout: arrays of one shape have one memory order, as a kernel that
    pairs elements by memory position needs (ValueError).  Returns ctx."""
    if ctx is _NO_CTX:
        ctx = _get_current()
    first = None
    for a in arrays:
        if a is None:
            continue
        _check_one(a, ctx, what)
        if dtype is not None and a.dtype != dtype:
            raise TypeError("%s: the array is %s, not %s" % (what, a.dtype, dtype))
        if contiguous and not (a._c or a._f):
            raise RuntimeError(
                "%s: only contiguous arrays may be used (strides %r for "
                "shape %r)" % (what, a.strides, a.shape)
            )
        if first is None:
            first = a
            continue
        if same_size and a.size != first.size:
            raise ValueError(
                "%s: the arrays have %d and %d elements (shapes %r and %r); "
                "they must have as many" % (what, first.size, a.size, first.shape, a.shape)
            )
        if same_layout and a.shape == first.shape and a.size > 1 and not _same_order(first, a):
            raise ValueError(
                "%s: arrays of shape %r in different memory orders (strides %r "
                "and %r) would be paired by memory position, not by index; "
                "copy one into the other's order first" % (what, a.shape, first.strides, a.strides)
            )
    return ctx


def _same_order(a, b):
    """Element k of a and of b (same shape) sit at the same position in
    memory order."""
    if a.strides == b.strides and a.itemsize == b.itemsize:
        return True
    if (a._c and b._c) or (a._f and b._f):
        return True
    sa, sb = a.itemsize, b.itemsize
    return _builtin_all(
        n == 1 or x * sb == y * sa for n, x, y in zip(a.shape, a.strides, b.strides)
    )


def _in_order_of(b, a, allocator=None):
    """b (a's shape) in a's memory order (a: C- or F-contiguous): b itself
    when it is already, else a copy (pairs elements by index)."""
    if _same_order(a, b) and (b._c or b._f):
        return b
    order = "F" if a._f and not a._c else "C"
    out = GPUArray(b.shape, b.dtype, allocator or b.allocator, order=order)
    _copy_d2d(out, b, None)
    return out


def _check_context(a, ctx):
    _check_one(a, ctx, "the operation")


def _check_devices(arrays, ctx):
    """Each array's memory lives in ctx (the current context): else a
    ValueError naming both devices (LogicError when freed)."""
    for a in arrays:
        _check_one(a, ctx, "the operation")


def _elsewhere_message(actx, ctx):
    adev, cdev = actx.device.ordinal, ctx.device.ordinal
    if adev != cdev:
        return (
            "GPUArray operands on different devices: an operand lives on device %d "
            "but the operation runs in the current context, on device %d; copy it to "
            "device %d first (driver.memcpy_peer, or .get() and to_gpu() there), or "
            "make device %d's context current" % (adev, cdev, cdev, adev)
        )
    return (
        "the array was allocated in another context (%r) than the current one (%r), "
        "both on device %d" % (actx, ctx, adev)
    )


_unary_exprs = {"negative": "-{0}", "invert": "~{0}", "logical_not": "!(({0}) != 0)"}


def _unary(op, x, out=None, stream=None):
    if not isinstance(x, GPUArray):
        raise TypeError("%s takes a GPUArray, not %s" % (op, type(x).__name__))
    dt = x.dtype
    if out is None and x.__class__ is not GPUArray:
        # PyCUDA: x._new_like_me() (of the result's dtype where it differs)
        if op == "absolute" and dt.kind == "c":
            out = _made_like(x, np.dtype(dt.char.lower()))
        elif op == "logical_not":
            out = _made_like(x, np.dtype(np.bool_))
        elif (
            (op == "negative" and dt.kind != "b")
            or (op == "invert" and dt.kind in "iub")
            or op == "absolute"
        ):
            out = _made_like(x)
    if op == "negative":
        if dt.kind == "b":
            raise TypeError(
                "The numpy boolean negative, the `-` operator, is not supported, "
                "use the `~` operator or the logical_not function instead."
            )
        return _map(op, "-{0}", [x], out, stream, dt)
    if op == "invert":
        if dt.kind not in "iub":
            raise TypeError("ufunc 'invert' not supported for the input type %s" % dt)
        return _map(op, "!{0}" if dt.kind == "b" else "~{0}", [x], out, stream, dt)
    if op == "absolute":
        if dt.kind == "c":
            return _map(
                op, "pygpu::abs({0})", [x], out, stream, np.dtype(dt.char.lower()), compute=dt
            )
        if dt.kind == "f":
            return _map(op, "fabs({0})", [x], out, stream, dt)
        if dt.kind in "ub":
            return _map(op, "{0}", [x], out, stream, dt)
        return _map(op, "({0} < 0 ? -{0} : {0})", [x], out, stream, dt)
    if op == "logical_not":
        return _map(
            op,
            "!(({0}) != (%s) 0)" % dtype_to_ctype(dt),
            [x],
            out,
            stream,
            np.dtype(bool),
            compute=dt,
        )
    raise ValueError("unknown unary operation %r" % op)


def _axpbyz(a, x, b, y, out, stream):
    """a*x + b*y in one kernel."""
    if not isinstance(y, GPUArray):
        raise TypeError("mul_add: other must be a GPUArray, not %s" % type(y).__name__)
    res = np.result_type(
        _types("multiply", x.dtype, _operand_key(a))[0],
        _types("multiply", y.dtype, _operand_key(b))[0],
    )
    if out is None and x.__class__ is not GPUArray:
        out = _made_like(x, res)  # PyCUDA's mul_add
    return _map(
        "axpbyz",
        "{0} * {1} + {2} * {3}",
        [a, x, b, y],
        out,
        stream,
        res if out is None else out.dtype,
        compute=res,
    )


# ---- creation ----


def to_gpu(ary: "object", allocator: "Callable[[int], Any] | None" = None) -> "GPUArray":
    """A GPUArray with a copy of a NumPy array (its layout kept where dense)."""
    ary = _host_array(ary)
    result = GPUArray(
        ary.shape,
        ary.dtype,
        allocator,
        strides=_compact_strides(ary.shape, ary.strides, ary.itemsize),
    )
    result.set(ary)
    return result


def to_gpu_async(
    ary: object, allocator: "Callable[[int], Any] | None" = None, stream: "drv.Stream | None" = None
) -> "GPUArray":
    """to_gpu() with the copy enqueued on stream (page-locked ary for overlap)."""
    ary = _host_array(ary)
    result = GPUArray(
        ary.shape,
        ary.dtype,
        allocator,
        strides=_compact_strides(ary.shape, ary.strides, ary.itemsize),
    )
    result.set_async(ary, stream)
    return result


def _host_array(ary: object) -> "np.ndarray[Any, Any]":
    if isinstance(ary, GPUArray):
        raise TypeError("to_gpu() takes a host (NumPy) array, not a GPUArray; use .copy()")
    if not isinstance(ary, np.ndarray):
        ary = np.asarray(ary)
    _check_dtype(ary.dtype)
    if _builtin_any(s < 0 for s in ary.strides):
        ary = np.ascontiguousarray(ary)
    return ary


def zeros(
    shape: "int | tuple[int, ...]",
    dtype: "np.typing.DTypeLike" = np.float64,
    allocator: "Callable[[int], Any] | None" = None,
    order: str = "C",
) -> "GPUArray":
    result = GPUArray(shape, dtype, allocator, order=order)
    if result.nbytes:
        drv.memset_d8(result.ptr, 0, result.nbytes)
    return result


def ones(
    shape: "int | tuple[int, ...]",
    dtype: "np.typing.DTypeLike" = np.float64,
    allocator: "Callable[[int], Any] | None" = None,
    order: str = "C",
) -> "GPUArray":
    result = GPUArray(shape, dtype, allocator, order=order)
    return result.fill(np.ones((), result.dtype)[()])


def _like(other, dtype, order):
    strides = None
    if order == "A":
        order = "F" if other._f and not other._c else "C"
    elif order == "K":
        if other._c or other.ndim <= 1:
            order = "C"
        elif other._f:
            order = "F"
        else:
            dt = np.dtype(dtype) if dtype is not None else other.dtype
            strides = _compact_strides(other.shape, other.strides, dt.itemsize)
            order = "C"
    elif order not in ("C", "F"):
        raise ValueError("order must be 'C', 'F', 'A' or 'K', not %r" % (order,))
    return GPUArray(
        other.shape,
        other.dtype if dtype is None else dtype,
        other.allocator,
        order=order,
        strides=strides,
    )


def empty_like(
    other_ary: "GPUArray", dtype: "np.typing.DTypeLike | None" = None, order: str = "K"
) -> "GPUArray":
    if dtype is None and order == "K" and (other_ary._c or other_ary._f):
        # the common call: a dense array's shape, dtype, order (C where it is
        # C-contiguous, as NumPy's) and allocator, the layout remembered
        return GPUArray(
            other_ary.shape,
            other_ary.dtype,
            other_ary.allocator,
            order="C" if other_ary._c or len(other_ary.shape) <= 1 else "F",
        )
    return _like(other_ary, dtype, order)


def zeros_like(
    other_ary: "GPUArray", dtype: "np.typing.DTypeLike | None" = None, order: str = "K"
) -> "GPUArray":
    result = _like(other_ary, dtype, order)
    if result.nbytes:
        drv.memset_d8(result.ptr, 0, result.nbytes)
    return result


def ones_like(
    other_ary: "GPUArray", dtype: "np.typing.DTypeLike | None" = None, order: str = "K"
) -> "GPUArray":
    result = _like(other_ary, dtype, order)
    return result.fill(np.ones((), result.dtype)[()])


def arange(*args: Any, **kwargs: Any) -> "GPUArray":
    """Evenly spaced values in [start, stop) (numpy.arange's arguments)."""
    dtype = kwargs.pop("dtype", None)
    stream = kwargs.pop("stream", None)
    allocator = kwargs.pop("allocator", None)
    if args and isinstance(args[-1], np.dtype) and dtype is None:
        dtype, args = args[-1], args[:-1]
    start = kwargs.pop("start", None)
    stop = kwargs.pop("stop", None)
    step = kwargs.pop("step", None)
    if kwargs:
        raise TypeError("unexpected keyword argument(s): %s" % ", ".join(kwargs))
    if len(args) > 3:
        raise ValueError("too many arguments")
    pos = list(args)
    if len(pos) == 1:
        if stop is not None:
            start = pos[0]
        else:
            stop = pos[0]
    elif len(pos) >= 2:
        start, stop = pos[0], pos[1]
        if len(pos) == 3:
            step = pos[2]
    if stop is None:
        raise ValueError("stop argument required")
    start = 0 if start is None else start
    step = 1 if step is None else step
    if step == 0:
        raise ValueError("arange: step may not be 0")
    dtype = _check_dtype(dtype) if dtype is not None else np.arange(start, stop, step)[:0].dtype
    import math

    size = _builtin_max(0, int(math.ceil((stop - start) / step)))
    result = GPUArray((size,), dtype, allocator)
    if size:
        func = elementwise.get_arange_kernel(dtype)
        grid, block = splay(size)
        func.prepared_async_call(
            grid,
            block,
            stream,
            result.gpudata,
            elementwise._scalar_value(start, dtype, "arange start"),
            elementwise._scalar_value(step, dtype, "arange step"),
            size,
        )
    return result


# ---- indexing helpers ----


def take(
    a: "GPUArray",
    indices: "GPUArray",
    out: "GPUArray | None" = None,
    stream: "drv.Stream | None" = None,
) -> "GPUArray":
    """a[indices] for a 1-D index array (indices are not bounds-checked)."""
    if not isinstance(a, GPUArray) or not isinstance(indices, GPUArray):
        raise TypeError("take() takes GPUArrays")
    if indices.dtype.kind not in "iu":
        raise TypeError("take(): indices must be integers, not %s" % indices.dtype)
    if not (a.flags.forc and indices.flags.forc):
        raise RuntimeError("take(): only contiguous arrays may be used")
    if out is not None and not isinstance(out, GPUArray):
        raise TypeError("take(): out must be a GPUArray, not %s" % type(out).__name__)
    _check_operands("take()", (a, indices, out), contiguous=True)
    if out is None:
        out = GPUArray(indices.shape, a.dtype, a.allocator)
    elif out.shape != indices.shape or out.dtype != a.dtype:
        raise ValueError("take(): out must have the indices' shape and a's dtype")
    elif indices.ndim > 1 and not _same_order(indices, out):
        raise ValueError(
            "take(): out (strides %r) must have the indices' memory order "
            "(strides %r)" % (out.strides, indices.strides)
        )
    if indices.size:
        func = elementwise.get_take_kernel(a.dtype, indices.dtype)
        func.prepared_async_call(
            out._grid, out._block, stream, indices.gpudata, a.gpudata, out.gpudata, indices.size
        )
    return out


def multi_take(
    arrays: "Sequence[GPUArray]",
    indices: "GPUArray",
    out: "Sequence[GPUArray | None] | None" = None,
    stream: "drv.Stream | None" = None,
) -> "list[GPUArray]":
    """[take(a, indices) for a in arrays]."""
    if out is None:
        out = [None] * len(arrays)
    elif len(out) != len(arrays):
        raise ValueError("out and arrays must have the same length")
    return [take(a, indices, o, stream) for a, o in zip(arrays, out)]


def multi_put(
    arrays: "Sequence[GPUArray]",
    dest_indices: "GPUArray",
    dest_shape: Any = None,
    out: "Sequence[GPUArray] | None" = None,
    stream: "drv.Stream | None" = None,
) -> "Sequence[GPUArray]":
    """out[k][dest_indices] = arrays[k]."""
    if not arrays:
        return []
    dtype = arrays[0].dtype
    if _builtin_any(a.dtype != dtype for a in arrays):
        raise TypeError("arrays must all have the same dtype")
    if out is None:
        out = [GPUArray(dest_shape, dtype, arrays[0].allocator) for _ in arrays]
    elif len(out) != len(arrays):
        raise ValueError("out and arrays must have the same length")
    k = elementwise.ElementwiseKernel(
        "%s *idx, %s *src, %s *dst"
        % (dtype_to_ctype(dest_indices.dtype), dtype_to_ctype(dtype), dtype_to_ctype(dtype)),
        "dst[idx[i]] = src[i]",
        "put",
    )
    for a, o in zip(arrays, out):
        if o.dtype != dtype:
            raise TypeError("arrays and out must have the same dtype")
        k(dest_indices, a, o, stream=stream)
    return out


def multi_take_put(
    arrays: "Sequence[GPUArray]",
    dest_indices: "GPUArray",
    src_indices: "GPUArray",
    dest_shape: Any = None,
    out: "Sequence[GPUArray] | None" = None,
    stream: "drv.Stream | None" = None,
    src_offsets: Any = None,
) -> "Sequence[GPUArray]":
    """out[k][dest_indices] = arrays[k][src_indices + src_offsets[k]]."""
    if not arrays:
        return []
    dtype = arrays[0].dtype
    if _builtin_any(a.dtype != dtype for a in arrays):
        raise TypeError("arrays must all have the same dtype")
    if src_indices.dtype != dest_indices.dtype:
        raise TypeError("src_indices and dest_indices must have the same dtype")
    if src_indices.ndim != 1:
        raise ValueError("src_indices must be 1D")
    if src_indices.shape != dest_indices.shape:
        raise ValueError("src_indices and dest_indices must have the same shape")
    if src_offsets is not None and len(src_offsets) != len(arrays):
        raise ValueError("src_indices and src_offsets must have the same length")
    if out is None:
        out = [GPUArray(dest_shape, dtype, arrays[0].allocator) for _ in arrays]
    elif len(out) != len(arrays):
        raise ValueError("out and arrays must have the same length")
    it = dtype_to_ctype(src_indices.dtype)
    k = elementwise.ElementwiseKernel(
        "%s *didx, %s *sidx, %s *src, %s *dst, long offset"
        % (it, it, dtype_to_ctype(dtype), dtype_to_ctype(dtype)),
        "dst[didx[i]] = src[sidx[i] + offset]",
        "take_put",
    )
    for j, (a, o) in enumerate(zip(arrays, out)):
        k(
            dest_indices,
            src_indices,
            a,
            o,
            0 if src_offsets is None else src_offsets[j],
            stream=stream,
        )
    return out


# ---- shape manipulation ----


def concatenate(
    arrays: "Sequence[GPUArray]", axis: int = 0, allocator: "Callable[[int], Any] | None" = None
) -> "GPUArray":
    """Join arrays along an existing axis."""
    arrays = list(arrays)
    if not arrays:
        raise ValueError("need at least one array to concatenate")
    nd = arrays[0].ndim
    if nd == 0:
        raise ValueError("zero-dimensional arrays cannot be concatenated")
    ax = axis + nd if axis < 0 else axis
    if not 0 <= ax < nd:
        raise ValueError("axis %d is out of bounds for arrays of dimension %d" % (axis, nd))
    shape = list(arrays[0].shape)
    for i, a in enumerate(arrays[1:], 1):
        if a.ndim != nd:
            raise ValueError(
                "%d'th array has different number of axes (should have %d, "
                "has %d)" % (i, nd, a.ndim)
            )
        if a.shape[:ax] + a.shape[ax + 1 :] != arrays[0].shape[:ax] + arrays[0].shape[ax + 1 :]:
            raise ValueError("%d'th array has residual not matching other arrays" % i)
        shape[ax] += a.shape[ax]
    dtype = np.result_type(*(a.dtype for a in arrays))
    result = empty(tuple(shape), dtype, allocator=allocator or arrays[0].allocator)
    base = 0
    full = (slice(None),) * nd
    for a in arrays:
        m = a.shape[ax]
        result[full[:ax] + (slice(base, base + m),) + full[ax + 1 :]] = a
        base += m
    return result


def stack(
    arrays: "Sequence[GPUArray]", axis: int = 0, allocator: "Callable[[int], Any] | None" = None
) -> "GPUArray":
    """Join arrays along a new axis."""
    arrays = list(arrays)
    if not arrays:
        raise ValueError("need at least one array to stack")
    shape0 = arrays[0].shape
    if _builtin_any(a.shape != shape0 for a in arrays[1:]):
        raise ValueError("all input arrays must have the same shape")
    nd = len(shape0)
    ax = axis + nd + 1 if axis < 0 else axis
    if not 0 <= ax <= nd:
        raise ValueError("axis %d is out of bounds for array of dimension %d" % (axis, nd + 1))
    shape = shape0[:ax] + (len(arrays),) + shape0[ax:]
    result = empty(
        shape,
        np.result_type(*(a.dtype for a in arrays)),
        allocator=allocator or arrays[0].allocator,
    )
    for i, a in enumerate(arrays):
        result[(slice(None),) * ax + (i,)] = a
    return result


def transpose(a: "GPUArray", axes: Any = None) -> "GPUArray":
    return a.transpose(axes)


def reshape(a: "GPUArray", *shape: Any, **kwargs: Any) -> "GPUArray":
    return a.reshape(*shape, **kwargs)


# ---- conditionals and binary functions ----


def if_positive(
    criterion: "GPUArray",
    then_: Any,
    else_: Any,
    out: "GPUArray | None" = None,
    stream: "drv.Stream | None" = None,
) -> "GPUArray":
    """then_ where criterion > 0, else else_."""
    return _select(">", criterion, then_, else_, out, stream, "if_positive")


def where(
    criterion: "GPUArray",
    then_: Any,
    else_: Any,
    out: "GPUArray | None" = None,
    stream: "drv.Stream | None" = None,
) -> "GPUArray":
    """then_ where criterion != 0, else else_ (numpy.where with three
    arguments; scalars and broadcasting allowed)."""
    return _select("!=", criterion, then_, else_, out, stream, "where")


def _select(cmp, crit, then_, else_, out, stream, name):
    if not isinstance(crit, GPUArray):
        raise TypeError("%s: the criterion must be a GPUArray" % name)
    if name == "if_positive":
        for v in (then_, else_):
            if isinstance(v, GPUArray) and v.shape != crit.shape:
                raise ValueError("shapes do not match")
    kt, ke = _operand_key(then_), _operand_key(else_)
    if kt is None or ke is None:
        raise TypeError("%s: then_ and else_ must be GPUArrays or scalars" % name)
    if (
        name == "if_positive"
        and isinstance(then_, GPUArray)
        and isinstance(else_, GPUArray)
        and then_.dtype != else_.dtype
    ):
        raise ValueError("dtypes do not match")
    res = np.result_type(_sample(kt), _sample(ke))
    cdt = crit.dtype
    zero = "(%s) 0" % dtype_to_ctype(cdt)
    if cdt.kind == "c":
        test = "pygpu::real({0}) > 0" if cmp == ">" else "{0} != %s" % zero
    else:
        test = "{0} %s %s" % (cmp, zero)
    expr = "(%s) ? {1} : {2}" % test
    return _map(
        name,
        expr,
        [crit, then_, else_],
        out,
        stream,
        res,
        compute=res,
        scalar_dtypes=[res, res],
        crit_raw=True,
    )


def _make_minmax(which: str) -> "Callable[..., GPUArray]":
    def f(
        a: Any, b: Any, out: "GPUArray | None" = None, stream: "drv.Stream | None" = None
    ) -> "GPUArray":
        if not isinstance(a, GPUArray) and not isinstance(b, GPUArray):
            raise TypeError("%s needs at least one GPUArray" % which)
        return _function_result(which, _binary(which, a, b, out=out, stream=stream), a, b)

    f.__name__ = which
    f.__doc__ = "numpy.%s element-wise (NaN-propagating) of arrays and scalars." % which
    return f


maximum = _make_minmax("maximum")
minimum = _make_minmax("minimum")


def _logical(op, x1, x2, out, allocator):
    if np.isscalar(x1) and np.isscalar(x2):
        r = empty((), np.bool_, allocator=allocator) if out is None else out
        r.fill(getattr(np, op)(x1, x2))
        return r
    if not isinstance(x1, GPUArray) and not isinstance(x2, GPUArray):
        raise ValueError("%s can take either scalar or GPUArrays as inputs" % op)
    return _function_result(op, _binary(op, x1, x2, out=out), x1, x2)


def _function_result(op, result, a, b):
    """A module function's result: NotImplemented (an operand _binary does
    not take) becomes the TypeError an operator would raise."""
    if result is NotImplemented:
        raise TypeError(
            "%s takes GPUArrays and scalars, not %s and %s"
            % (op, type(a).__name__, type(b).__name__)
        )
    return result


def logical_and(
    x1: Any,
    x2: Any,
    /,
    out: "GPUArray | None" = None,
    *,
    allocator: "Callable[[int], Any] | None" = None,
) -> "GPUArray":
    return _logical("logical_and", x1, x2, out, allocator)


def logical_or(
    x1: Any,
    x2: Any,
    /,
    out: "GPUArray | None" = None,
    *,
    allocator: "Callable[[int], Any] | None" = None,
) -> "GPUArray":
    return _logical("logical_or", x1, x2, out, allocator)


def logical_not(
    x: Any, /, out: "GPUArray | None" = None, *, allocator: "Callable[[int], Any] | None" = None
) -> "GPUArray":
    if np.isscalar(x):
        r = empty((), np.bool_, allocator=allocator) if out is None else out
        r.fill(np.logical_not(np.asarray(x)))
        return r
    return _unary("logical_not", x, out=out)


# ---- reductions: pygpu.reduction (imported when first used) ----


def sum(
    a: "GPUArray",
    dtype: "np.typing.DTypeLike | None" = None,
    stream: "drv.Stream | None" = None,
    allocator: "Callable[[int], Any] | None" = None,
) -> "GPUArray":
    from pygpu.reduction import get_sum_kernel

    krnl = get_sum_kernel(dtype, a.dtype)
    return krnl(a, stream=stream, allocator=allocator)


def any(
    a: "GPUArray",
    stream: "drv.Stream | None" = None,
    allocator: "Callable[[int], Any] | None" = None,
) -> "GPUArray":
    from pygpu.reduction import get_any_kernel

    krnl = get_any_kernel(np.dtype(bool), a.dtype)
    return krnl(a, stream=stream, allocator=allocator)


def all(
    a: "GPUArray",
    stream: "drv.Stream | None" = None,
    allocator: "Callable[[int], Any] | None" = None,
) -> "GPUArray":
    from pygpu.reduction import get_all_kernel

    krnl = get_all_kernel(np.dtype(bool), a.dtype)
    return krnl(a, stream=stream, allocator=allocator)


def subset_sum(
    subset: "GPUArray",
    a: "GPUArray",
    dtype: "np.typing.DTypeLike | None" = None,
    stream: "drv.Stream | None" = None,
    allocator: "Callable[[int], Any] | None" = None,
) -> "GPUArray":
    from pygpu.reduction import get_subset_sum_kernel

    krnl = get_subset_sum_kernel(dtype, subset.dtype, a.dtype)
    return krnl(subset, a, stream=stream, allocator=allocator)


def _as_c(x, allocator):
    """x, or a C-ordered copy of it."""
    if x._c:
        return x
    out = GPUArray(x.shape, x.dtype, allocator or x.allocator)
    _copy_d2d(out, x, None)
    return out


def _dot_operands(what, a, b, allocator):
    """a and b for a dot product: gated, as many elements, b in a's memory
    order (elements paired by index, as NumPy pairs them; of two shapes,
    each one's elements in C order)."""
    for x in (a, b):
        if not isinstance(x, GPUArray):
            raise TypeError("%s takes GPUArrays, not %s" % (what, type(x).__name__))
    if a.size != b.size:
        raise ValueError(
            "%s: the arrays have %d and %d elements (shapes %r and %r); they "
            "must have as many" % (what, a.size, b.size, a.shape, b.shape)
        )
    # the rest of the gate: in the copy below if there is one, and in the
    # reduction's call
    if a.shape != b.shape:
        return _as_c(a, allocator), _as_c(b, allocator)
    return a, _in_order_of(b, a, allocator)


def dot(
    a: "GPUArray",
    b: "GPUArray",
    dtype: "np.typing.DTypeLike | None" = None,
    stream: "drv.Stream | None" = None,
    allocator: "Callable[[int], Any] | None" = None,
) -> "GPUArray":
    from pygpu.reduction import get_dot_kernel

    a, b = _dot_operands("dot()", a, b, allocator)
    if dtype is None:
        dtype = np.result_type(a.dtype, b.dtype)
    krnl = get_dot_kernel(dtype, a.dtype, b.dtype)
    return krnl(a, b, stream=stream, allocator=allocator)


def vdot(
    a: "GPUArray",
    b: "GPUArray",
    dtype: "np.typing.DTypeLike | None" = None,
    stream: "drv.Stream | None" = None,
    allocator: "Callable[[int], Any] | None" = None,
) -> "GPUArray":
    from pygpu.reduction import get_dot_kernel

    a, b = _dot_operands("vdot()", a, b, allocator)
    if dtype is None:
        dtype = np.result_type(a.dtype, b.dtype)
    krnl = get_dot_kernel(dtype, a.dtype, b.dtype, conjugate_first=True)
    return krnl(a, b, stream=stream, allocator=allocator)


def subset_dot(
    subset: "GPUArray",
    a: "GPUArray",
    b: "GPUArray",
    dtype: "np.typing.DTypeLike | None" = None,
    stream: "drv.Stream | None" = None,
    allocator: "Callable[[int], Any] | None" = None,
) -> "GPUArray":
    from pygpu.reduction import get_subset_dot_kernel

    krnl = get_subset_dot_kernel(dtype, subset.dtype, a.dtype, b.dtype)
    return krnl(subset, a, b, stream=stream, allocator=allocator)


def _make_minmax_reduction(what: str) -> "Callable[..., GPUArray]":
    def f(a: "GPUArray", stream: "drv.Stream | None" = None) -> "GPUArray":
        from pygpu.reduction import get_minmax_kernel

        krnl = get_minmax_kernel(what, a.dtype)
        return krnl(a, stream=stream)

    f.__name__ = what
    f.__doc__ = "The %simum of a's elements, as a 0-d GPUArray." % what
    return f


max = _make_minmax_reduction("max")
min = _make_minmax_reduction("min")


def _make_subset_minmax_reduction(what: str) -> "Callable[..., GPUArray]":
    def f(subset: "GPUArray", a: "GPUArray", stream: "drv.Stream | None" = None) -> "GPUArray":
        from pygpu.reduction import get_subset_minmax_kernel

        krnl = get_subset_minmax_kernel(what, a.dtype, subset.dtype)
        return krnl(subset, a, stream=stream)

    f.__name__ = "subset_" + what
    return f


subset_max = _make_subset_minmax_reduction("max")
subset_min = _make_subset_minmax_reduction("min")


# ---- foreign arrays ----

_CAI_STREAM_LEGACY, _CAI_STREAM_PER_THREAD = 1, 2


def asarray(obj: object, dtype: "np.typing.DTypeLike | None" = None) -> "GPUArray":
    """A GPUArray over obj's device memory, without copying: obj is a
    GPUArray, has __cuda_array_interface__ (CuPy, PyTorch, Numba, ...) or
    __dlpack__, or is a cuda.core StridedMemoryView or Buffer (a Buffer is
    bytes: a 1-d array of dtype, uint8 unless given, over all of it).  The
    GPUArray keeps obj alive (its .base)."""
    core = None if isinstance(obj, GPUArray) else _cudacore.kind(obj)
    if isinstance(obj, GPUArray):
        result = obj
    elif core == _cudacore.BUFFER:
        return _from_core_buffer(obj, np.uint8 if dtype is None else dtype)
    elif core == _cudacore.VIEW:
        result = _from_core_view(obj)
    elif hasattr(obj, "__cuda_array_interface__"):
        result = _from_cai(obj)
    elif isinstance(obj, np.ndarray):
        raise TypeError(
            "asarray() wraps device arrays without copying; a NumPy array is "
            "in host memory: use gpuarray.to_gpu()"
        )
    elif hasattr(obj, "__dlpack__"):
        from pygpu import _dlpack

        result = _dlpack.import_(obj)
    else:
        raise TypeError(
            "asarray() takes an object with __cuda_array_interface__ or "
            "__dlpack__, or a cuda.core Buffer or StridedMemoryView, not %s" % type(obj).__name__
        )
    if dtype is not None and np.dtype(dtype) != result.dtype:
        raise TypeError(
            "asarray() does not copy: the array is %s, not %s" % (result.dtype, np.dtype(dtype))
        )
    return result


def _from_core_buffer(buf, dtype):
    """A 1-d GPUArray of dtype over all of a cuda.core Buffer."""
    ptr, size = _cudacore.buffer_span(buf)
    dtype = _check_dtype(dtype)
    if size % dtype.itemsize:
        raise ValueError(
            "a cuda.core Buffer of %d bytes is not a whole number of %s items (%d bytes each)"
            % (size, dtype, dtype.itemsize)
        )
    n = size // dtype.itemsize
    _check_core_device(buf if size else None)
    return _new(
        GPUArray,
        (n,),
        dtype,
        (dtype.itemsize,),
        ptr if n else None,
        buf,
        _default_allocator,
        n,
        True,
        True,
    )


def _from_core_view(view):
    """A GPUArray over a cuda.core StridedMemoryView of device memory."""
    ptr, shape, strides, dtype, _ = _cudacore.view_parts(view)
    dtype = _check_dtype(dtype)
    if strides is None:
        strides = _c_strides(dtype.itemsize, shape)
    size = 1
    for n in shape:
        size *= n
    if size and not ptr:
        raise ValueError("a cuda.core StridedMemoryView of shape %r has a NULL pointer" % (shape,))
    _check_core_device(view if size else None)
    return _new(
        GPUArray,
        shape,
        dtype,
        strides,
        ptr if (ptr or size) else None,
        view,
        _default_allocator,
        size,
        _is_c(shape, strides, dtype.itemsize),
        _is_f(shape, strides, dtype.itemsize),
    )


def _check_core_device(obj):
    """cuda.core memory on another device than the current context's is
    refused, as DLPack's is (where cuda.core can say its device)."""
    try:
        device_id = obj.device_id if obj is not None else None
    except Exception:  # a Buffer from a handle asks the driver; no answer, no check
        return
    if isinstance(device_id, bool) or not isinstance(device_id, int) or device_id < 0:
        return
    ctx = drv.Context.get_current()
    if ctx is not None and ctx.device.ordinal != device_id:
        raise ValueError(
            "the cuda.core memory is on CUDA device %d but the current context is on "
            "device %d: make device %d's context current to use it there, or copy it"
            % (device_id, ctx.device.ordinal, device_id)
        )


def _cai_ints(value, what, nonneg):
    try:
        items = tuple(value)
    except TypeError:
        raise TypeError(
            "invalid __cuda_array_interface__: '%s' must be a tuple of ints, not %r" % (what, value)
        ) from None
    out = []
    for n in items:
        if isinstance(n, (bool, np.bool_)) or not isinstance(n, (numbers.Integral, np.integer)):
            raise TypeError(
                "invalid __cuda_array_interface__: '%s' must hold ints, not %r" % (what, n)
            )
        n = int(n)
        if nonneg and n < 0:
            raise ValueError(
                "invalid __cuda_array_interface__: negative dimension in '%s' %r" % (what, items)
            )
        out.append(n)
    return tuple(out)


def _from_cai(obj):
    """A GPUArray over a __cuda_array_interface__ (v0-v3), every field
    checked: shape (non-negative ints), typestr (a dtype the GPU can hold),
    data ((pointer, read-only), no NULL pointer for elements), strides (None
    or one int per dimension), version (at most 3), mask (none), stream."""
    cai = obj.__cuda_array_interface__
    if not isinstance(cai, dict):
        raise TypeError("__cuda_array_interface__ is not a dict")
    for key in ("shape", "typestr", "data"):
        if key not in cai:
            raise TypeError("invalid __cuda_array_interface__ (no %r)" % key)
    version = cai.get("version")
    if version is not None:
        if isinstance(version, bool) or not isinstance(version, (numbers.Integral, np.integer)):
            raise TypeError(
                "invalid __cuda_array_interface__: 'version' must be an int, not %r" % (version,)
            )
        if not 0 <= version <= 3:
            raise ValueError(
                "__cuda_array_interface__ version %d is not one pygpu reads (0 to 3)" % version
            )
    shape = _cai_ints(cai["shape"], "shape", True)
    typestr = cai["typestr"]
    if not isinstance(typestr, str):
        raise TypeError(
            "invalid __cuda_array_interface__: 'typestr' must be a str, not %r" % (typestr,)
        )
    data = cai["data"]
    if not isinstance(data, (tuple, list)) or len(data) != 2:
        raise TypeError(
            "invalid __cuda_array_interface__: 'data' must be a (pointer, "
            "read_only) pair, not %r" % (data,)
        )
    ptr = data[0]
    if ptr is None:
        ptr = 0
    if isinstance(ptr, bool) or not isinstance(ptr, (numbers.Integral, np.integer)):
        raise TypeError(
            "invalid __cuda_array_interface__: the data pointer must be an int, not %r" % (ptr,)
        )
    ptr = int(ptr)
    if not 0 <= ptr < 1 << 64:
        raise ValueError(
            "invalid __cuda_array_interface__: data pointer %d is not an address" % ptr
        )
    descr = cai.get("descr")
    try:
        if descr and len(descr) > 1 or (descr and descr[0][0]):
            dtype = np.dtype([tuple(d) for d in descr])
        else:
            dtype = np.dtype(typestr)
    except (TypeError, ValueError) as e:
        raise TypeError(
            "invalid __cuda_array_interface__: typestr %r / descr give no dtype (%s)" % (typestr, e)
        ) from None
    dtype = _check_dtype(dtype)
    if dtype.byteorder == ">":
        raise TypeError("big-endian arrays (%s) cannot be used on the GPU" % typestr)
    strides = cai.get("strides")
    if strides is None:
        strides = _c_strides(dtype.itemsize, shape)
    else:
        strides = _cai_ints(strides, "strides", False)
        if len(strides) != len(shape):
            raise ValueError(
                "invalid __cuda_array_interface__: %d strides %r for %d "
                "dimensions (shape %r)" % (len(strides), strides, len(shape), shape)
            )
    if cai.get("mask") is not None:
        raise TypeError("masked arrays (__cuda_array_interface__ 'mask') are not supported")
    size = 1
    for n in shape:
        size *= n
    if size and not ptr:
        raise ValueError(
            "invalid __cuda_array_interface__: a NULL data pointer for %d "
            "elements (shape %r)" % (size, shape)
        )
    stream = cai.get("stream")
    if stream is not None:
        _sync_foreign_stream(stream)
    return _new(
        GPUArray,
        shape,
        dtype,
        strides,
        ptr if (ptr or size) else None,
        obj,
        _default_allocator,
        size,
        _is_c(shape, strides, dtype.itemsize),
        _is_f(shape, strides, dtype.itemsize),
    )


def _sync_foreign_stream(stream):
    """The producer's work on its stream is done before ours (on the legacy
    stream) starts."""
    stream = int(stream)
    if stream == _CAI_STREAM_LEGACY:
        return  # ordered with our default-stream work already
    if stream == 0:
        raise ValueError(
            "__cuda_array_interface__ 'stream' 0 is disallowed by the protocol (use None, 1 or 2)"
        )
    if stream == _CAI_STREAM_PER_THREAD:
        drv.Stream.per_thread().synchronize()
        return
    ev = drv.Event()
    ev.record(drv.Stream.from_handle(stream))
    drv.Stream.null().wait_for_event(ev)


from pygpu.characterize import has_double_support  # noqa: E402,F401  (PyCUDA's gpuarray has it)
