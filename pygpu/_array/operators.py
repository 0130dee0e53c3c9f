"""The element-wise machinery: the operators' Python path (the C fast path's
fallback and teacher), map/unary/axpbyz kernels and their result arrays.

Part of pygpu.gpuarray, which re-exports every name defined here."""

import operator
from typing import TYPE_CHECKING, Any

import numpy as np

from pygpu import _driver
from pygpu import driver as drv
from pygpu import elementwise
from pygpu.tools import dtype_to_ctype

from pygpu import gpuarray as _ga
from pygpu._array.layout import _DA, _get_current, _sms, _splay_cache, splay
from pygpu._array.gate import _check_devices, _check_operands, _needs_own_copy, _own_copy
from pygpu._array.copies import _elem_strides

if TYPE_CHECKING:
    pass


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
    "left_shift": np.left_shift,
    "right_shift": np.right_shift,
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
    if isinstance(x, _ga.GPUArray):
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
    rules, found by asking NumPy once per combination).  The compute dtype
    of a comparison of uint64 with a signed integer is a pair, one dtype
    per operand (_pair, _expr); with a Python scalar it is always one."""
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
        if op in _COMPARISONS and _mixed_sign_64(ka, kb):
            # NumPy 2 compares uint64 with a signed integer exactly, not
            # through float64 (where 2**63 > 2**63 - 1 is False): each
            # operand in its own 64-bit type, _expr's exact expression
            comp = (_I64, _U64) if ka.kind == "i" else (_U64, _I64)
        elif op in _COMPARISONS or op in ("logical_and", "logical_or"):
            comp = np.result_type(sa, sb)
        else:
            comp = res
        found = (res, comp)
        _types_cache[key] = found
    return found


_U64, _I64 = np.dtype(np.uint64), np.dtype(np.int64)


def _mixed_sign_64(ka, kb):
    """ka, kb are the dtypes of a uint64 and a signed integer (an array's
    or a NumPy scalar's), in either order: NumPy's result_type is float64."""
    if not (isinstance(ka, np.dtype) and isinstance(kb, np.dtype)):
        return False
    kinds = ka.kind + kb.kind
    return (kinds == "ui" and ka == _U64) or (kinds == "iu" and kb == _U64)


def _pair(comp):
    """The compute dtypes of a binary operation's two operands: comp for
    both, or _types' pair (the exact uint64/signed comparison)."""
    return comp if isinstance(comp, tuple) else (comp, comp)


# a comparison with its operands swapped (b > a is a < b)
_SWAPPED = {
    "equal": "equal",
    "not_equal": "not_equal",
    "less": "greater",
    "less_equal": "greater_equal",
    "greater": "less",
    "greater_equal": "less_equal",
}


def _mixed_compare(op, comp):
    """The exact comparison of a uint64 u and a signed s (read as int64):
    a negative s is below every u, else both are compared as uint64."""
    if comp[0] == _U64:
        u, s = "({0})", "({1})"
    else:
        u, s, op = "({1})", "({0})", _SWAPPED[op]
    negative = op in ("greater", "greater_equal", "not_equal")  # u op s for s < 0
    return "(%s < 0 ? %s : %s %s (unsigned long long) %s)" % (
        s,
        "true" if negative else "false",
        u,
        _COMPARISONS[op],
        s,
    )


_INT_BOUNDS: dict[Any, Any] = {}


def _int_bounds(dt):
    """(min, max) of an integer dtype, else None."""
    b = _INT_BOUNDS.get(dt, 0)
    if b == 0:
        b = None
        if dt.kind in "iu":
            info = np.iinfo(dt)
            b = (int(info.min), int(info.max))
        _INT_BOUNDS[dt] = b
    return b


def _fits(v, dt):
    """Python int v is one of dtype dt's values (any v, for a float dt)."""
    b = _int_bounds(dt)
    return b is None or b[0] <= v <= b[1]


def _constant_compare(op, x, y):
    """True or False when x <op> y compares an integer array with a Python
    int outside its dtype's range (NumPy 2: every element on one side of
    it, so the result is one value for all), else None."""
    if type(y) is int and isinstance(x, _ga.GPUArray):
        arr, v, first = x, y, True
    elif type(x) is int and isinstance(y, _ga.GPUArray):
        arr, v, first = y, x, False
    else:
        return None
    b = _int_bounds(arr.dtype)
    if b is None or b[0] <= v <= b[1]:
        return None
    bound = b[1] if v > b[1] else b[0]  # compares with v as every element does
    cmp = _PYCOMPARE[op]
    return cmp(bound, v) if first else cmp(v, bound)


_PYCOMPARE = {
    "equal": operator.eq,
    "not_equal": operator.ne,
    "less": operator.lt,
    "less_equal": operator.le,
    "greater": operator.gt,
    "greater_equal": operator.ge,
}


def _kname(k):
    return str(k) if isinstance(k, np.dtype) else "Python %s" % k.__name__


def _result_dtype(op, a, b):
    return _types(op, _operand_key(a), _operand_key(b))[0]


def _expr(op, cdt):
    if isinstance(cdt, tuple):  # _types' pair: the exact uint64/signed comparison
        return _mixed_compare(op, cdt)
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
    if op in ("left_shift", "right_shift"):
        if kind not in "iu":
            raise TypeError("%s is only for integer arrays, not %s" % (op, cdt))
        # NumPy's: a shift by the width or more (or by a negative amount)
        # gives 0 (-1 for a negative signed value shifted right); a signed
        # value shifted left as its unsigned type (no undefined behaviour)
        bits = cdt.itemsize * 8
        inrange = "(%s({1}) < %d)" % ("({1}) >= 0 && " if kind == "i" else "", bits)
        if op == "left_shift":
            ut = dtype_to_ctype(np.dtype("u%d" % cdt.itemsize))
            return "(%s ? (%s)((%s)({0}) << ({1})) : (%s)0)" % (inrange, ct, ut, ct)
        if kind == "i":
            return "(%s ? (%s)(({0}) >> ({1})) : (({0}) < 0 ? (%s)-1 : (%s)0))" % (
                inrange,
                ct,
                ct,
                ct,
            )
        return "(%s ? (%s)(({0}) >> ({1})) : (%s)0)" % (inrange, ct, ct)
    raise ValueError("unknown operation %r" % op)


# the fast paths: (context, op, operand keys) -> (Function, result dtype, scalar dtype)
_fast_aa: dict[Any, Any] = {}
_fast_as: dict[Any, Any] = {}
_fast_sa: dict[Any, Any] = {}


def _subclassed(a):
    """a is an instance of a GPUArray subclass (not GPUArray itself)."""
    return a.__class__ is not _ga.GPUArray and isinstance(a, _ga.GPUArray)


def _made_like(like, *args, **kwargs):
    """like._new_like_me(*args, **kwargs), checked to be a GPUArray."""
    r = like._new_like_me(*args, **kwargs)
    if not isinstance(r, _ga.GPUArray):
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
    arrays = [o for o in operands if isinstance(o, _ga.GPUArray)]
    try:
        shape = np.broadcast_shapes(*(a.shape for a in arrays))
    except ValueError:
        return None
    like = next((a for a in arrays if a.shape == shape), None)
    if like is None or like.__class__ is _ga.GPUArray:
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
            elementwise.get_map_kernel(op, _expr(op, comp), ("a", "a"), (dx, dy), _pair(comp), res),
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
    compare = op in _COMPARISONS

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
            tx is ty is _ga.GPUArray
            and x.shape == y.shape
            and x.strides == y.strides
            and (x._c or x._f)
            and (y._c or y._f)  # (equal strides of another item size: y is strided)
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
                if alloc is _ga._default_allocator:
                    if proven:  # what the C path takes: teach it the kernel
                        teach(_FO_AA, ctx, dx, y.dtype, func, res, None)
                    try:
                        g = _ga._alloc_async(x.nbytes)
                    except drv.LogicError:
                        g = drv.mem_alloc(x.nbytes)
                else:
                    g = alloc(x.nbytes)
                z = _ga._clone(x, _ga.GPUArray, g)
            else:
                z = x._like_for_result(res)
                g = z.gpudata
            if n:
                grid, block = _splay_cache.get(n) or splay(n)
                func.prepared_async_call(grid, block, None, g, gx, gy, n)
            return z
        if tx is _ga.GPUArray and (x._c or x._f) and ty in _SAMPLE:
            ctx = _get_current()
            gx = x.gpudata
            proven = gx.__class__ is _DA and gx.context is ctx and x.nbytes <= gx.size
            if not proven:
                _check_devices((x,), ctx)
            func, res, comp = _as_entry(op, ctx, x.dtype, ty)
            if compare and ty is int and not _fits(y, comp):
                return _binary_general(op, x, y, None, None)  # (NumPy 2: no OverflowError)
            _check_power_scalar(op, res, y)
            if proven and res is x.dtype and x.allocator is _ga._default_allocator:
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
        if ty is _ga.GPUArray and (y._c or y._f) and tx in _SAMPLE:
            ctx = _get_current()
            gy = y.gpudata
            proven = gy.__class__ is _DA and gy.context is ctx and y.nbytes <= gy.size
            if not proven:
                _check_devices((y,), ctx)
            func, res, comp = _sa_entry(op, ctx, tx, y.dtype)
            if compare and tx is int and not _fits(x, comp):
                return _binary_general(op, x, y, None, None)
            if proven and res is y.dtype and y.allocator is _ga._default_allocator:
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
        if not (x._c or x._f) or not x.size or x.allocator is not _ga._default_allocator:
            return
        ty = y.__class__
        if ty is _ga.GPUArray:
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
        if ty is _ga.GPUArray:
            func, res = _aa_entry(op, ctx, x.dtype, k2)
            teach(_FO_AA, ctx, x.dtype, k2, func, res, None)
        else:
            func, res, comp = _as_entry(op, ctx, x.dtype, ty)
            teach(_FO_AS, ctx, x.dtype, ty, func, res, comp)

    def inplace(x, y):
        if x.__class__ is _ga.GPUArray:
            prime(x, y)
        return _binary(op, x, y, out=x)

    binary.__name__ = binary.__qualname__ = "_%s" % op
    inplace.__name__ = inplace.__qualname__ = "_i%s" % op
    fast = _FAST[op] = _driver._ArrayOperator(
        "_%s" % op, binary, _ga.GPUArray, _ga._default_allocator, _ga._ATTRS
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
                x = _ga.asarray(x)
            else:
                y = _ga.asarray(y)
            return _binary(op, x, y, out, stream)
        return NotImplemented
    res, comp = _types(op, kx, ky)
    if op == "power":
        _check_power_scalar(op, res, y)
    if out is None and (_subclassed(x) or _subclassed(y)):
        out = _like_me((x, y), res)
    if op in _COMPARISONS:
        const = _constant_compare(op, x, y)
        if const is not None:  # an int out of an integer array's range: no kernel reads it
            arr = x if isinstance(x, _ga.GPUArray) else y
            return _map(op, "true" if const else "false", [arr], out, stream, res, op=op)
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
        reflected = _ga.GPUArray.__dict__["__r%s__" % nm]
        setattr(_ga.GPUArray, "__%s__" % nm, fast)
        setattr(
            _ga.GPUArray,
            "__r%s__" % nm,
            _driver._ArrayOperator(
                "__r%s__" % nm,
                reflected,
                _ga.GPUArray,
                _ga._default_allocator,
                _ga._ATTRS,
                fast,
                _FO_REFLECTED,
            ),
        )
        setattr(
            _ga.GPUArray,
            "__i%s__" % nm,
            _driver._ArrayOperator(
                "__i%s__" % nm,
                binary.inplace,
                _ga.GPUArray,
                _ga._default_allocator,
                _ga._ATTRS,
                fast,
                _FO_INPLACE,
            ),
        )
    _ga.GPUArray.__div__ = _ga.GPUArray.__truediv__
    _ga.GPUArray.__rdiv__ = _ga.GPUArray.__rtruediv__
    _ga.GPUArray.__idiv__ = _ga.GPUArray.__itruediv__


def _check_power_scalar(op, res, y):
    if (
        op == "power"
        and res.kind in "iu"
        and (
            isinstance(y, (int, np.integer))
            or (isinstance(y, np.ndarray) and y.ndim == 0 and y.dtype.kind in "iu")
        )
        and y < 0
    ):
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
    every operand is cast to (default: res_dtype), or a tuple of one dtype
    per operand; scalar_dtypes: the by-value parameter types (default:
    compute); crit_raw: the first operand is read in its own dtype (a
    criterion)."""
    res_dtype = np.dtype(res_dtype)
    if isinstance(compute, tuple):
        comps = [np.dtype(c) for c in compute]
    else:
        comps = [res_dtype if compute is None else np.dtype(compute)] * len(operands)
    arrays = [o for o in operands if isinstance(o, _ga.GPUArray)]
    if not arrays and out is None:
        raise TypeError("%s needs at least one GPUArray operand" % name)
    _check_operands(op or name, arrays + ([out] if isinstance(out, _ga.GPUArray) else []))
    shapes = [a.shape for a in arrays]
    try:
        shape = np.broadcast_shapes(*shapes) if shapes else out.shape
    except ValueError:
        raise ValueError(
            "operands could not be broadcast together with shapes %s"
            % " ".join(str(s) for s in shapes)
        ) from None
    if out is not None:
        if not isinstance(out, _ga.GPUArray):
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
        out = _ga.GPUArray(shape, res_dtype, alloc, order=order)
    if out.size == 0:
        return out
    # an input overlapping out elsewhere than element for element (a += a.T,
    # a[1:] += a[:-1]) is read from a copy, as NumPy reads it
    operands = [
        _own_copy(o, stream) if isinstance(o, _ga.GPUArray) and _needs_own_copy(o, out) else o
        for o in operands
    ]
    kinds, dtypes, cdtypes, args = [], [], [], []
    sdt = iter(scalar_dtypes or ())
    for o, comp in zip(operands, comps):
        if isinstance(o, _ga.GPUArray):
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
            if isinstance(a, _ga.GPUArray) and not (
                a.shape == out.shape and a.strides == _scaled(out, a)
            ):
                plain = False
                break
    if plain:
        func = elementwise.get_map_kernel(
            name, expr, tuple(kinds), tuple(dtypes), tuple(cdtypes), res_dtype, 0
        )
        launch = [out.gpudata] + [a.gpudata if isinstance(a, _ga.GPUArray) else a for a in args]
        func.prepared_async_call(grid, block, stream, *launch, n)
        return out
    # strided/broadcast: strides in elements, broadcast axes stride 0
    nd = len(out.shape)
    stride_lists = [_elem_strides(out)]
    for a in args:
        if isinstance(a, _ga.GPUArray):
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
    launch = [_base_ptr(out)] + [_base_ptr(a) if isinstance(a, _ga.GPUArray) else a for a in args]
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


_unary_exprs = {"negative": "-{0}", "invert": "~{0}", "logical_not": "!(({0}) != 0)"}


def _unary(op, x, out=None, stream=None):
    if not isinstance(x, _ga.GPUArray):
        raise TypeError("%s takes a GPUArray, not %s" % (op, type(x).__name__))
    dt = x.dtype
    if out is None and x.__class__ is not _ga.GPUArray:
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
    if not isinstance(y, _ga.GPUArray):
        raise TypeError("mul_add: other must be a GPUArray, not %s" % type(y).__name__)
    res = np.result_type(
        _types("multiply", x.dtype, _operand_key(a))[0],
        _types("multiply", y.dtype, _operand_key(b))[0],
    )
    if out is None and x.__class__ is not _ga.GPUArray:
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
