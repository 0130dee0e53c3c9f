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

from pygpu import _cudacore
from pygpu import _driver  # noqa: F401  (the module's attribute, as before the split)
from pygpu import driver as drv
from pygpu import elementwise
from pygpu.tools import (  # noqa: F401  (the module's attributes, as before the split)
    PooledDeviceAllocation,
    dtype_to_ctype,
    get_or_register_dtype,
)

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

# The module's pieces (pygpu/_array/), each name re-exported here: the
# GPUArray class is defined below, the functions in the pieces.  The pieces
# reach GPUArray and each other's later names through this module at call
# time (`_ga.GPUArray`), so any import order works.
from pygpu._array.layout import (  # noqa: F401  (gpuarray is the whole module)
    ArrayFlags,
    _BLOCK,
    _DA,
    _builtin_all,
    _builtin_any,
    _builtin_max,
    _builtin_min,
    _builtin_sum,
    _c_strides,
    _check_dtype,
    _compact_strides,
    _create_vector_types,
    _f_strides,
    _get_current,
    _is_c,
    _is_dense,
    _is_f,
    _make_maker,
    _normalize_shape,
    _sm_count,
    _sms,
    _splay_cache,
    splay,
    vec,
)
from pygpu._array.gate import (  # noqa: F401  (gpuarray is the whole module)
    _NO_CTX,
    _allocation,
    _check_context,
    _check_devices,
    _check_extent,
    _check_one,
    _check_operands,
    _elsewhere_message,
    _extent,
    _in_order_of,
    _own_copy,
    _same_order,
)
from pygpu._array.copies import (  # noqa: F401  (gpuarray is the whole module)
    _OWN_MAPPING_FROM,
    _copy_d2d,
    _copy_d2h,
    _copy_h2d,
    _discontig_plan,
    _elem_strides,
    _host_dense_view,
    _host_empty,
    _host_flat,
    _memcpy_discontig,
)
from pygpu._array.operators import (  # noqa: F401  (gpuarray is the whole module)
    _COMPARISONS,
    _FAST,
    _FO_AA,
    _FO_AS,
    _FO_AS_IS,
    _FO_INPLACE,
    _FO_PYTHON,
    _FO_REFLECTED,
    _FO_SA,
    _FO_TO_FLOAT,
    _OPERATORS,
    _PYCOMPARE,
    _SAMPLE,
    _SWAPPED,
    _UFUNCS,
    _aa_entry,
    _as_entry,
    _axpbyz,
    _base_ptr,
    _binary,
    _binary_general,
    _check_power_scalar,
    _constant_compare,
    _conv,
    _expr,
    _fast_aa,
    _fast_as,
    _fast_sa,
    _fits,
    _int_bounds,
    _kname,
    _like_me,
    _made_like,
    _map,
    _mixed_compare,
    _mixed_sign_64,
    _object_new,
    _operand_key,
    _operator,
    _pair,
    _result_dtype,
    _sa_entry,
    _sample,
    _scaled,
    _subclassed,
    _types,
    _types_cache,
    _unary,
    _unary_exprs,
)
from pygpu._array.functions import (  # noqa: F401  (gpuarray is the whole module)
    _as_c,
    _dot_operands,
    _function_result,
    _host_array,
    _like,
    _logical,
    _make_minmax,
    _make_minmax_reduction,
    _make_subset_minmax_reduction,
    _select,
    all,
    any,
    arange,
    concatenate,
    dot,
    empty_like,
    if_positive,
    logical_and,
    logical_not,
    logical_or,
    max,
    maximum,
    min,
    minimum,
    multi_put,
    multi_take,
    multi_take_put,
    ones,
    ones_like,
    reshape,
    stack,
    subset_dot,
    subset_max,
    subset_min,
    subset_sum,
    sum,
    take,
    to_gpu,
    to_gpu_async,
    transpose,
    vdot,
    where,
    zeros,
    zeros_like,
)
from pygpu._array.foreign import (  # noqa: F401  (gpuarray is the whole module)
    _CAI_STREAM_LEGACY,
    _CAI_STREAM_PER_THREAD,
    _cai_ints,
    _check_core_device,
    _from_cai,
    _from_core_buffer,
    _from_core_view,
    _sync_foreign_stream,
    asarray,
)
from pygpu._array.operators import _install_operators


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
        return _own_copy(self, None)

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

    def __iand__(self, other: Any) -> "GPUArray":
        return _binary("bitwise_and", self, other, out=self)

    def __ior__(self, other: Any) -> "GPUArray":
        return _binary("bitwise_or", self, other, out=self)

    def __ixor__(self, other: Any) -> "GPUArray":
        return _binary("bitwise_xor", self, other, out=self)

    def __lshift__(self, other: Any) -> "GPUArray":
        return _binary("left_shift", self, other)

    def __rlshift__(self, other: Any) -> "GPUArray":
        return _binary("left_shift", other, self)

    def __ilshift__(self, other: Any) -> "GPUArray":
        return _binary("left_shift", self, other, out=self)

    def __rshift__(self, other: Any) -> "GPUArray":
        return _binary("right_shift", self, other)

    def __rrshift__(self, other: Any) -> "GPUArray":
        return _binary("right_shift", other, self)

    def __irshift__(self, other: Any) -> "GPUArray":
        return _binary("right_shift", self, other, out=self)

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


_install_operators()

from pygpu.characterize import has_double_support  # noqa: E402,F401  (PyCUDA's gpuarray has it)
