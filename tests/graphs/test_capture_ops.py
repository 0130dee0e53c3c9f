"""Every array operation kind captured into a CUDA graph (issue 27: "captured
array programs equal eager ones, every operation kind").

One table, OPS, names each operation kind of the array layer (operators,
in-place operators, comparisons, methods, module functions, the kernel
generators, reductions, scans, every cumath function) as a function of the
inputs (GPUArrays, or NumPy arrays for the answer NumPy gives).

- `standin` tests capture each kind on the driver stand-in, which records a
  capture's work as graph nodes, runs no kernels, and invalidates the
  capture on work that the driver would refuse: each kind is captured
  without error, nothing runs while capturing, the graph has the eager
  run's kernel launches as kernel nodes and its copies and memsets as
  memcpy and memset nodes, and no graph allocation.
- `gpu` tests run each kind eagerly, capture it, replay it twice (the
  second time with new contents copied into the same inputs) and compare
  every element with the eager run on the same data and with NumPy.
  Random numbers have their own rules (docs/graphs.md, "Random numbers"):
  a generator's replay continues its sequence as eager calls would;
  rand()'s seed is drawn at capture, so every replay repeats one draw.
"""

import gc
import threading

import numpy as np
import pytest

import pygpu.driver as cuda
from pygpu import cumath, curandom, gpuarray, graphs
from pygpu.elementwise import ElementwiseKernel
from pygpu.reduction import ReductionKernel
from pygpu.scan import ExclusiveScanKernel, InclusiveScanKernel

N = 3000  # not a multiple of a block: the tails are exercised
BIG = 1 << 16  # a scan of several tiles (8192 int32 a tile)
F32 = np.float32


def _host(rng):
    """Fresh random inputs (never zeros), by name."""
    return {
        "x": rng.standard_normal(N).astype(F32),
        "y": rng.standard_normal(N).astype(F32),
        "p": rng.uniform(0.5, 2.0, N).astype(F32),  # > 0: pow, log, sqrt, divisor
        "u": rng.uniform(-0.9, 0.9, N).astype(F32),  # asin, acos, atanh
        "q": rng.uniform(1.1, 3.0, N).astype(F32),  # acosh
        "xi": rng.integers(-1000, 1000, N).astype(np.int32),
        "yi": rng.integers(1, 50, N).astype(np.int32),  # divisors
        "sh": rng.integers(-4, 5, N).astype(np.int32),  # ldexp exponents
        "xl": rng.integers(-100, 100, BIG).astype(np.int32),
        "xd": rng.standard_normal(N),
        "c": (rng.standard_normal(N) + 1j * rng.standard_normal(N)).astype(np.complex64),
        "m": rng.standard_normal((40, 75)).astype(F32),
        "m3": rng.standard_normal((6, 10, 7)).astype(F32),
        "idx": rng.integers(0, N, 500).astype(np.int32),
        "perm": rng.permutation(N)[:500].astype(np.int32),  # distinct: put targets
        "b": rng.integers(0, 2, N).astype(np.bool_),
    }


class _Kernels:
    """The generated kernels the table uses (made once a test: compiled on
    first use, cached after)."""

    def __init__(self):
        self.axpb = ElementwiseKernel(
            "float *z, const float *x, const float *y, float a",
            "z[i] = a * x[i] + y[i]",
            "capture_ops_axpb",
        )
        self.sumsq = ReductionKernel(
            F32, neutral="0", reduce_expr="a+b", map_expr="x[i]*x[i]", arguments="const float *x"
        )
        self.incl = InclusiveScanKernel(F32, "a+b")
        self.excl = ExclusiveScanKernel(np.int32, "a+b", 0)


def _inplace(op, a, b):
    z = a.copy()
    if op == "+":
        z += b
    elif op == "-":
        z -= b
    elif op == "*":
        z *= b
    elif op == "/":
        z /= b
    elif op == "//":
        z //= b
    elif op == "%":
        z %= b
    else:
        z **= b
    return z


def _np_inplace(op, a, b):
    return {
        "+": np.add,
        "-": np.subtract,
        "*": np.multiply,
        "/": np.true_divide,
        "//": np.floor_divide,
        "%": np.remainder,
        "**": np.power,
    }[op](a, b).astype(a.dtype)


def _ew_range(k, a):
    z = gpuarray.zeros_like(a["x"])
    k.axpb(z, a["x"], a["y"], F32(0.5), range=slice(10, 2000, 3))
    return z


def _np_ew_range(h):
    z = np.zeros_like(h["x"])
    z[10:2000:3] = F32(0.5) * h["x"][10:2000:3] + h["y"][10:2000:3]
    return z


def _ew(k, a):
    z = gpuarray.empty_like(a["x"])
    k.axpb(z, a["x"], a["y"], F32(-0.5))
    return z


def _setitem(a):
    z = gpuarray.zeros_like(a["m"])
    z[3:30:2, ::3] = a["m"][3:30:2, ::3]
    z[0] = 5.0
    return z


def _np_setitem(h):
    z = np.zeros_like(h["m"])
    z[3:30:2, ::3] = h["m"][3:30:2, ::3]
    z[0] = 5.0
    return z


def _discontig(a, src, shape):
    z = gpuarray.empty(shape, F32)
    gpuarray._memcpy_discontig(z, src)
    return z


def _put(a):
    outs = gpuarray.multi_put([a["x"][:500], a["y"][:500]], a["perm"], dest_shape=(N,))
    return tuple(gpuarray.take(o, a["perm"]) for o in outs)  # the elements put


def _take_put(a):
    outs = gpuarray.multi_take_put([a["x"], a["y"]], a["perm"], a["idx"], dest_shape=(N,))
    return tuple(gpuarray.take(o, a["perm"]) for o in outs)


def _f64(v):
    return v.astype(np.float64)


# name -> (run(k, a), want(h), tolerance): a holds GPUArrays, h NumPy arrays;
# tolerance None: exact (also against NumPy), else (rtol, atol) against
# NumPy, whose answer for pow and the cumath functions is float64 math on
# the float32 inputs (against the eager run: exact, but see _EAGER_TOL)
OPS = {
    # operators
    "add": (lambda k, a: a["x"] + a["y"], lambda h: h["x"] + h["y"], None),
    "radd": (lambda k, a: 2 + a["x"], lambda h: F32(2) + h["x"], None),
    "sub": (lambda k, a: a["x"] - a["y"], lambda h: h["x"] - h["y"], None),
    "rsub": (lambda k, a: 1.5 - a["x"], lambda h: F32(1.5) - h["x"], None),
    "mul": (lambda k, a: a["x"] * a["y"], lambda h: h["x"] * h["y"], None),
    "rmul": (lambda k, a: 3 * a["x"], lambda h: F32(3) * h["x"], None),
    "truediv": (lambda k, a: a["x"] / a["p"], lambda h: h["x"] / h["p"], (1e-6, 1e-7)),
    "rtruediv": (lambda k, a: 2 / a["p"], lambda h: F32(2) / h["p"], (1e-6, 1e-7)),
    "floordiv": (lambda k, a: a["xi"] // a["yi"], lambda h: h["xi"] // h["yi"], None),
    "mod": (lambda k, a: a["xi"] % a["yi"], lambda h: h["xi"] % h["yi"], None),
    "pow": (lambda k, a: a["p"] ** a["y"], lambda h: _f64(h["p"]) ** _f64(h["y"]), (1e-5, 1e-6)),
    "rpow": (lambda k, a: 2 ** a["x"], lambda h: 2.0 ** _f64(h["x"]), (1e-5, 1e-6)),
    "neg": (lambda k, a: -a["x"], lambda h: -h["x"], None),
    "pos": (lambda k, a: +a["x"], lambda h: +h["x"], None),
    "abs": (lambda k, a: abs(a["x"]), lambda h: abs(h["x"]), None),
    "invert": (lambda k, a: ~a["xi"], lambda h: ~h["xi"], None),
    "and": (lambda k, a: a["xi"] & a["yi"], lambda h: h["xi"] & h["yi"], None),
    "or": (lambda k, a: a["xi"] | a["yi"], lambda h: h["xi"] | h["yi"], None),
    "xor": (lambda k, a: a["xi"] ^ a["yi"], lambda h: h["xi"] ^ h["yi"], None),
    # in-place operators (on a copy: the inputs stay as they are)
    "iadd": (
        lambda k, a: _inplace("+", a["x"], a["y"]),
        lambda h: _np_inplace("+", h["x"], h["y"]),
        None,
    ),
    "isub": (
        lambda k, a: _inplace("-", a["x"], a["y"]),
        lambda h: _np_inplace("-", h["x"], h["y"]),
        None,
    ),
    "imul": (
        lambda k, a: _inplace("*", a["x"], a["y"]),
        lambda h: _np_inplace("*", h["x"], h["y"]),
        None,
    ),
    "itruediv": (
        lambda k, a: _inplace("/", a["x"], a["p"]),
        lambda h: _np_inplace("/", h["x"], h["p"]),
        (1e-6, 1e-7),
    ),
    "ifloordiv": (
        lambda k, a: _inplace("//", a["xi"], a["yi"]),
        lambda h: _np_inplace("//", h["xi"], h["yi"]),
        None,
    ),
    "imod": (
        lambda k, a: _inplace("%", a["xi"], a["yi"]),
        lambda h: _np_inplace("%", h["xi"], h["yi"]),
        None,
    ),
    "ipow": (lambda k, a: _inplace("**", a["p"], 2), lambda h: h["p"] ** F32(2), (1e-6, 1e-6)),
    # comparisons
    "eq": (lambda k, a: a["xi"] == a["yi"], lambda h: h["xi"] == h["yi"], None),
    "ne": (lambda k, a: a["x"] != a["y"], lambda h: h["x"] != h["y"], None),
    "lt": (lambda k, a: a["x"] < a["y"], lambda h: h["x"] < h["y"], None),
    "le": (lambda k, a: a["x"] <= 0.25, lambda h: h["x"] <= F32(0.25), None),
    "gt": (lambda k, a: a["x"] > a["y"], lambda h: h["x"] > h["y"], None),
    "ge": (lambda k, a: a["x"] >= a["y"], lambda h: h["x"] >= h["y"], None),
    # methods
    "mul_add": (
        lambda k, a: a["x"].mul_add(2.0, a["y"], -1.0),
        lambda h: F32(2) * h["x"] - h["y"],
        (1e-6, 1e-6),
    ),
    "fill": (
        lambda k, a: gpuarray.empty_like(a["x"]).fill(F32(3.5)),
        lambda h: np.full(N, 3.5, F32),
        None,
    ),
    "reverse": (lambda k, a: a["x"].reverse(), lambda h: h["x"][::-1], None),
    "astype": (lambda k, a: a["x"].astype(np.float64), lambda h: _f64(h["x"]), None),
    "astype_complex_real": (lambda k, a: a["c"].astype(F32), lambda h: h["c"].real, None),
    "copy": (lambda k, a: a["x"].copy(), lambda h: h["x"], None),
    "copy_strided": (lambda k, a: a["m"][::2, 1::3].copy(), lambda h: h["m"][::2, 1::3], None),
    "reshape_copy": (lambda k, a: a["m"].T.reshape(75 * 40), lambda h: h["m"].T.reshape(-1), None),
    "ravel_copy": (lambda k, a: a["m"].T.ravel(), lambda h: h["m"].T.ravel(), None),
    "transpose_copy": (lambda k, a: gpuarray.transpose(a["m"]).copy(), lambda h: h["m"].T, None),
    "view_op": (lambda k, a: a["m"][1:20, 5:60] * 2, lambda h: h["m"][1:20, 5:60] * F32(2), None),
    "setitem": (lambda k, a: _setitem(a), _np_setitem, None),
    "real": (lambda k, a: a["c"].real, lambda h: h["c"].real, None),
    "imag": (lambda k, a: a["c"].imag, lambda h: h["c"].imag, None),
    "conj": (lambda k, a: a["c"].conj(), lambda h: h["c"].conj(), None),
    "memcpy_discontig_2d": (
        lambda k, a: _discontig(a, a["m"][::2], (20, 75)),
        lambda h: h["m"][::2],
        None,
    ),
    "memcpy_discontig_3d": (
        lambda k, a: _discontig(a, a["m3"][::2, 1::2, :5], (3, 5, 5)),
        lambda h: h["m3"][::2, 1::2, :5],
        None,
    ),
    # module functions
    "zeros": (lambda k, a: gpuarray.zeros(N, F32), lambda h: np.zeros(N, F32), None),
    "ones": (lambda k, a: gpuarray.ones(N, F32), lambda h: np.ones(N, F32), None),
    "zeros_like": (
        lambda k, a: gpuarray.zeros_like(a["xi"]),
        lambda h: np.zeros(N, np.int32),
        None,
    ),
    "ones_like": (lambda k, a: gpuarray.ones_like(a["xd"]), lambda h: np.ones(N), None),
    "arange": (
        lambda k, a: gpuarray.arange(0, N, 1, dtype=F32),
        lambda h: np.arange(N, dtype=F32),
        None,
    ),
    "take": (lambda k, a: gpuarray.take(a["x"], a["idx"]), lambda h: h["x"][h["idx"]], None),
    "multi_take": (
        lambda k, a: tuple(gpuarray.multi_take([a["x"], a["y"]], a["idx"])),
        lambda h: (h["x"][h["idx"]], h["y"][h["idx"]]),
        None,
    ),
    "multi_put": (lambda k, a: _put(a), lambda h: (h["x"][:500], h["y"][:500]), None),
    "multi_take_put": (
        lambda k, a: _take_put(a),
        lambda h: (h["x"][h["idx"]], h["y"][h["idx"]]),
        None,
    ),
    "concatenate": (
        lambda k, a: gpuarray.concatenate([a["x"], a["y"]]),
        lambda h: np.concatenate([h["x"], h["y"]]),
        None,
    ),
    "concatenate_axis1": (
        lambda k, a: gpuarray.concatenate([a["m"], a["m"][:, :10]], axis=1),
        lambda h: np.concatenate([h["m"], h["m"][:, :10]], axis=1),
        None,
    ),
    "stack": (
        lambda k, a: gpuarray.stack([a["x"], a["y"]], axis=1),
        lambda h: np.stack([h["x"], h["y"]], axis=1),
        None,
    ),
    "if_positive": (
        lambda k, a: gpuarray.if_positive(a["x"], a["y"], a["x"]),
        lambda h: np.where(h["x"] > 0, h["y"], h["x"]),
        None,
    ),
    "where": (
        lambda k, a: gpuarray.where(a["b"], a["x"], 0.5),
        lambda h: np.where(h["b"], h["x"], F32(0.5)),
        None,
    ),
    "maximum": (
        lambda k, a: gpuarray.maximum(a["x"], a["y"]),
        lambda h: np.maximum(h["x"], h["y"]),
        None,
    ),
    "minimum": (
        lambda k, a: gpuarray.minimum(a["x"], 0.1),
        lambda h: np.minimum(h["x"], F32(0.1)),
        None,
    ),
    "logical_and": (
        lambda k, a: gpuarray.logical_and(a["x"] > 0, a["b"]),
        lambda h: np.logical_and(h["x"] > 0, h["b"]),
        None,
    ),
    "logical_or": (
        lambda k, a: gpuarray.logical_or(a["xi"] > 0, a["b"]),
        lambda h: np.logical_or(h["xi"] > 0, h["b"]),
        None,
    ),
    "logical_not": (lambda k, a: gpuarray.logical_not(a["b"]), lambda h: ~h["b"], None),
    # reductions
    "sum": (
        lambda k, a: gpuarray.sum(a["x"]),
        lambda h: h["x"].sum(dtype=np.float64),
        (2e-4, 2e-3),
    ),
    "sum_2d": (lambda k, a: a["m"].sum(), lambda h: h["m"].sum(dtype=np.float64), (2e-4, 2e-3)),
    "sum_int": (lambda k, a: gpuarray.sum(a["xi"]), lambda h: h["xi"].sum(), None),
    "any": (lambda k, a: gpuarray.any(a["x"] > 2.5), lambda h: np.any(h["x"] > 2.5), None),
    "all": (lambda k, a: (a["p"] > 0.6).all(), lambda h: np.all(h["p"] > 0.6), None),
    "subset_sum": (
        lambda k, a: gpuarray.subset_sum(a["idx"], a["x"]),
        lambda h: h["x"][h["idx"]].sum(dtype=np.float64),
        (2e-4, 2e-3),
    ),
    "dot": (
        lambda k, a: gpuarray.dot(a["x"], a["y"]),
        lambda h: np.dot(_f64(h["x"]), _f64(h["y"])),
        (2e-4, 2e-3),
    ),
    "dot_2d": (
        lambda k, a: gpuarray.dot(a["m"], a["m"].T),
        lambda h: np.dot(_f64(h["m"]).ravel(), _f64(h["m"].T).ravel()),
        (2e-4, 2e-3),
    ),
    "vdot": (
        lambda k, a: gpuarray.vdot(a["c"], a["c"]),
        lambda h: np.vdot(h["c"].astype(np.complex128), h["c"].astype(np.complex128)),
        (2e-4, 2e-3),
    ),
    "subset_dot": (
        lambda k, a: gpuarray.subset_dot(a["idx"], a["x"], a["y"]),
        lambda h: np.dot(_f64(h["x"][h["idx"]]), _f64(h["y"][h["idx"]])),
        (2e-4, 2e-3),
    ),
    "max": (lambda k, a: gpuarray.max(a["x"]), lambda h: h["x"].max(), None),
    "min": (lambda k, a: a["x"].min(), lambda h: h["x"].min(), None),
    "subset_max": (
        lambda k, a: gpuarray.subset_max(a["idx"], a["x"]),
        lambda h: h["x"][h["idx"]].max(),
        None,
    ),
    "subset_min": (
        lambda k, a: gpuarray.subset_min(a["idx"], a["x"]),
        lambda h: h["x"][h["idx"]].min(),
        None,
    ),
    # the generators
    "elementwise": (_ew, lambda h: F32(-0.5) * h["x"] + h["y"], (1e-6, 1e-6)),
    "elementwise_range": (_ew_range, _np_ew_range, (1e-6, 1e-6)),
    "reduction_kernel": (
        lambda k, a: k.sumsq(a["x"]),
        lambda h: (_f64(h["x"]) ** 2).sum(),
        (2e-4, 2e-3),
    ),
    "reduction_kernel_range": (
        lambda k, a: k.sumsq(a["x"], range=slice(5, 2500)),
        lambda h: (_f64(h["x"][5:2500]) ** 2).sum(),
        (2e-4, 2e-3),
    ),
    "inclusive_scan": (
        lambda k, a: k.incl(a["x"].copy()),
        lambda h: np.cumsum(_f64(h["x"])),
        (2e-4, 2e-3),
    ),
    "inclusive_scan_new": (
        lambda k, a: k.incl(a["x"], "new"),
        lambda h: np.cumsum(_f64(h["x"])),
        (2e-4, 2e-3),
    ),
    "exclusive_scan": (
        lambda k, a: k.excl(a["xi"].copy()),
        lambda h: np.concatenate([[0], np.cumsum(h["xi"])[:-1]]),
        None,
    ),
    "exclusive_scan_tiles": (
        lambda k, a: k.excl(a["xl"], "new"),
        lambda h: np.concatenate([[0], np.cumsum(h["xl"])[:-1]]),
        None,
    ),
    # cumath beyond the unary functions (those are added below)
    "cumath_fmod": (
        lambda k, a: cumath.fmod(a["x"], a["p"]),
        lambda h: np.fmod(h["x"], h["p"]),
        (1e-6, 1e-6),
    ),
    "cumath_frexp": (lambda k, a: cumath.frexp(a["x"]), lambda h: np.frexp(h["x"]), None),
    "cumath_ldexp": (
        lambda k, a: cumath.ldexp(a["x"], a["sh"]),
        lambda h: np.ldexp(h["x"], h["sh"]),
        None,
    ),
    "cumath_modf": (lambda k, a: cumath.modf(a["x"]), lambda h: np.modf(h["x"]), None),
}

_DOMAIN = {
    "asin": "u",
    "acos": "u",
    "atanh": "u",
    "acosh": "q",
    "log": "p",
    "log2": "p",
    "log10": "p",
    "log1p": "p",
    "sqrt": "p",
}
for _name in cumath.UNARY:
    _arg = _DOMAIN.get(_name, "x")
    OPS["cumath_" + _name] = (
        (lambda n, v: lambda k, a: getattr(cumath, n)(a[v]))(_name, _arg),
        (
            lambda n, v: (
                lambda h: getattr(
                    np,
                    {
                        "asin": "arcsin",
                        "acos": "arccos",
                        "atan": "arctan",
                        "asinh": "arcsinh",
                        "acosh": "arccosh",
                        "atanh": "arctanh",
                    }.get(n, n),
                )(_f64(h[v]))
            )
        )(_name, _arg),
        (2e-6, 2e-6) if _name in ("fabs", "ceil", "floor", "trunc", "rint") else (1e-5, 2e-6),
    )

# a float scan's decoupled look-back may add tiles in another order from one
# run to the next, and a float reduction may combine its blocks in another
# order: these compare with the eager run within a tolerance
_EAGER_TOL = dict.fromkeys(["inclusive_scan", "inclusive_scan_new"], (1e-5, 1e-4))
_EAGER_TOL.update(
    dict.fromkeys(
        [
            "sum",
            "sum_2d",
            "subset_sum",
            "dot",
            "dot_2d",
            "vdot",
            "subset_dot",
            "reduction_kernel",
            "reduction_kernel_range",
        ],
        (1e-6, 1e-5),
    )
)


def _as_tuple(out):
    return out if isinstance(out, tuple) else (out,)


def _to_gpu(h):
    return {n: gpuarray.to_gpu(v) for n, v in h.items()}


def _set(a, h):
    """New contents into the same input arrays (what a replay reads)."""
    for n, v in h.items():
        a[n].set(v)


def _compare_numpy(got, h, name):
    _run, want, tol = OPS[name]
    want = _as_tuple(want(h))
    assert len(got) == len(want), name
    for g, w in zip(got, want):
        w = np.asarray(w)
        assert g.shape == w.shape, (name, g.shape, w.shape)
        if tol is None:
            np.testing.assert_array_equal(g, w, err_msg=name)
        else:
            np.testing.assert_allclose(g, w, rtol=tol[0], atol=tol[1], err_msg=name)


def _compare_eager(got, eager, name):
    for g, e in zip(got, eager):
        assert g.dtype == e.dtype and g.shape == e.shape, name
        if name in _EAGER_TOL:
            rtol, atol = _EAGER_TOL[name]
            np.testing.assert_allclose(g, e, rtol=rtol, atol=atol, err_msg=name)
        else:
            np.testing.assert_array_equal(g, e, err_msg=name)


def _get(out):
    return tuple(o.get() for o in _as_tuple(out))


# ---------------------------------------------------------------- stand-in

_WORK = ("cuLaunch", "cuMemcpy", "cuMemset")


@pytest.mark.standin
@pytest.mark.parametrize("name", sorted(OPS))
def test_operation_kind_is_captured(standin, ctx, rng, name):
    """Captured without error; nothing runs and nothing is allocated as a
    graph node while capturing; the graph has one kernel node for each
    kernel the eager run launched and one memcpy/memset node for each of
    its copies and memsets; the graph replays."""
    k = _Kernels()
    a = _to_gpu(_host(rng))
    run = OPS[name][0]
    eager, trace = standin.trace(lambda: run(k, a))  # compiles, fills caches
    launches = [t for t in trace if t.startswith("cuLaunch")]
    copies = [t for t in trace if t.startswith(("cuMemcpy", "cuMemset"))]
    s = cuda.Stream()
    with graphs.capture_graph(s) as cap:
        got, trace = standin.trace(lambda: run(k, a))
    ran = [
        t
        for t in trace
        if t.startswith(_WORK) and not t.endswith("Async") and not t.startswith("cuLaunch")
    ]
    assert ran == [], (name, trace)  # no blocking copy or memset reached the driver
    kinds = [n.kind for n in cap.graph.nodes()]
    assert kinds.count("kernel") == len(launches), (name, kinds, launches)
    assert len(kinds) - kinds.count("kernel") == len(copies), (name, kinds, copies)
    assert set(kinds) <= {"kernel", "memcpy", "memset"}, (name, kinds)
    for o in _as_tuple(got):
        assert o.gpudata is not None and not getattr(o.gpudata, "freed", False), name
    exe = cap.graph.instantiate()
    exe.launch(s)
    exe.launch(s)
    s.synchronize()
    del eager, got, exe, cap
    gc.collect()


@pytest.mark.standin
def test_copies_are_replayed(standin, ctx, rng):
    """The stand-in runs copies (not kernels): a captured pitched copy (the
    array layer's _memcpy_discontig, a Memcpy3D) is a memcpy node that moves
    the bytes on each replay, from the input's contents at replay time.
    Before, the array layer called Memcpy3D without a stream: a
    synchronous copy on the legacy stream, which the driver refuses during
    a capture (invalidating it); the stand-in, which did not model pitched
    copies under capture, ran it at once and the graph had no node for
    it."""
    h = _host(rng)
    a = _to_gpu(h)
    run = OPS["memcpy_discontig_3d"][0]
    run(None, a)
    s = cuda.Stream()
    with graphs.capture_graph(s) as cap:
        out = run(None, a)
    assert [n.kind for n in cap.graph.nodes()] == ["memcpy"]
    exe = cap.graph.instantiate()
    for _ in range(2):
        h = _host(rng)
        _set(a, h)
        exe.launch(s)
        s.synchronize()
        np.testing.assert_array_equal(out.get(), h["m3"][::2, 1::2, :5])


@pytest.mark.standin
def test_results_given_the_capturing_stream_are_not_graph_allocations(standin, ctx, rng):
    """A reduction (or a scan) given the capturing stream as stream=
    allocates its result at once, outside the graph, as one given no
    stream does: before, the result was a graph allocation (a mem_alloc
    node) that the graph never freed, and CUDA does not launch a graph
    again while an allocation of its previous launch is not freed.  A
    temporary freed inside the capture may still be a graph node pair."""
    k = _Kernels()
    a = _to_gpu(_host(rng))
    s = cuda.Stream()
    calls = [
        lambda: gpuarray.sum(a["x"], stream=s),
        lambda: gpuarray.dot(a["x"], a["y"], stream=s),
        lambda: gpuarray.max(a["x"], stream=s),
        lambda: k.sumsq(a["x"], stream=s),
        lambda: gpuarray.subset_sum(a["idx"], a["x"], stream=s),
        lambda: k.excl(a["xl"], "new", stream=s),
    ]
    for call in calls:
        call()
    with graphs.capture_graph(s) as cap:
        outs = [call() for call in calls]
    kinds = [n.kind for n in cap.graph.nodes()]
    assert kinds.count("mem_alloc") == kinds.count("mem_free") == 0, kinds
    assert kinds.count("kernel") >= len(calls), kinds
    exe = cap.graph.instantiate()
    exe.launch(s)
    exe.launch(s)
    s.synchronize()
    del outs


@pytest.mark.standin
@pytest.mark.parametrize(
    "gen_name", ["XORWOW", "MRG32k3a", "Sobol32", "ScrambledSobol32", "Sobol64", "ScrambledSobol64"]
)
def test_generator_calls_are_captured(standin, ctx, gen_name):
    """Each fill_*/gen_* call and the skip-aheads of every generator are
    one kernel node each (the state stays on the GPU: see the GPU test)."""
    gen = _generator(gen_name)
    calls = _generator_calls(gen)
    for call in calls.values():
        call()
    s = cuda.Stream()
    before = standin.launches()
    with graphs.capture_graph(s) as cap:
        outs = [call() for call in calls.values()]
    assert standin.launches() == before
    assert [n.kind for n in cap.graph.nodes()] == ["kernel"] * len(calls)
    cap.graph.instantiate().launch(s)
    s.synchronize()
    del outs


@pytest.mark.standin
def test_rand_bakes_the_seed_drawn_at_capture(standin, ctx):
    """rand() draws its seed from numpy.random when it is called: the
    capture bakes that seed into the kernel node, so each replay launches
    the kernel with an eager call's seed and count (the same NumPy state),
    and writes the captured result."""
    curandom.rand((N,))
    s = cuda.Stream()
    np.random.seed(20261125)
    curandom.rand((N,))
    eager = standin.last_launch()
    np.random.seed(20261125)
    with graphs.capture_graph(s) as cap:
        out = curandom.rand((N,))
    assert [n.kind for n in cap.graph.nodes()] == ["kernel"]
    exe = cap.graph.instantiate()
    exe.launch(s)
    s.synchronize()
    replay = standin.last_launch()
    assert replay.name == eager.name and replay.grid == eager.grid
    assert replay.params[:8] == int(out.ptr).to_bytes(8, "little")
    assert replay.params[8:] == eager.params[8:]  # the seed and the count
    exe.launch(s)
    s.synchronize()
    assert standin.last_launch().params == replay.params


@pytest.mark.standin
def test_what_the_array_layer_cannot_capture_is_refused_by_name(standin, ctx, rng):
    """Inside a capture: host data into an array, a generator's
    construction (it reads its state's size back), a pitched copy or a
    CUDA array copy given no stream (synchronous) and the linear array
    copies (memcpy_dtoa/atod/atoa, which take no stream) are LogicErrors
    raised before the driver, and the capture goes on (before, Memcpy3D
    and the linear copies reached the driver, which invalidates the
    capture); in another thread, a pitched copy on the legacy stream is
    refused too."""
    h = _host(rng)
    a = _to_gpu(h)
    src = a["m3"][::2, 1::2, :5]
    dst = gpuarray.empty((3, 5, 5), F32)
    gpuarray._memcpy_discontig(dst, src)
    carray = cuda.np_to_array(h["m"], "C")
    whole = gpuarray.empty((40, 75), F32)
    line = cuda.Array(cuda.ArrayDescriptor(100, 0, cuda.array_format.FLOAT, 1))  # 1-D
    line2 = cuda.Array(cuda.ArrayDescriptor(100, 0, cuda.array_format.FLOAT, 1))
    seen = []
    s = cuda.Stream()

    def other():
        ctx.push()
        try:
            gpuarray._memcpy_discontig(dst, src)
        except cuda.LogicError as e:
            seen.append(str(e))
        finally:
            cuda.Context.pop()

    with graphs.capture_graph(s) as cap:
        y = a["x"] + 1
        with pytest.raises(cuda.LogicError, match=r"^memcpy_htod\(\): this thread is capturing"):
            a["m"][0:2] = h["m"][0:2]
        # it reads its state's size back and waits for its init kernel
        with pytest.raises(cuda.LogicError, match=r"^memcpy_dtoh\(\): this thread is capturing"):
            curandom.XORWOWRandomNumberGenerator(lambda count: gpuarray.zeros(count, np.int32))
        copy = cuda.Memcpy3D()
        copy.set_src_device(src.ptr)
        copy.set_dst_device(dst.ptr)
        copy.width_in_bytes = 20
        copy.height, copy.src_pitch, copy.dst_pitch = 5, 56, 20
        copy.src_height, copy.dst_height, copy.depth = 10, 5, 3
        with pytest.raises(
            cuda.LogicError,
            match=r"^Memcpy3D: this thread is capturing a graph, and inside the "
            r"capture the default stream is the capturing stream, whose "
            r"work is recorded, not run: a blocking call cannot wait for "
            r"it; pass it the capturing stream \(it is captured\), or call "
            r"it after end_capture\(\)$",
        ):
            copy()
        copy(s)  # captured
        from_array = cuda.Memcpy2D()  # a CUDA array side: the 3-D copy
        from_array.set_src_array(carray)
        from_array.set_dst_device(whole.ptr)
        from_array.width_in_bytes = from_array.dst_pitch = 75 * 4
        from_array.height = 40
        with pytest.raises(cuda.LogicError, match=r"^Memcpy2D: this thread is capturing a graph"):
            from_array()
        from_array(s)  # captured
        calls = {n: standin.calls(n) for n in ("cuMemcpyDtoA", "cuMemcpyAtoD", "cuMemcpyAtoA")}
        for what, copy_linear in (
            ("memcpy_dtoa", lambda: cuda.memcpy_dtoa(line, 0, a["x"].gpudata, 400)),
            ("memcpy_atod", lambda: cuda.memcpy_atod(a["x"].gpudata, line, 0, 400)),
            ("memcpy_atoa", lambda: cuda.memcpy_atoa(line2, 0, line, 0, 400)),
        ):
            with pytest.raises(
                cuda.LogicError,
                match=r"^%s\(\): this thread is capturing a graph, and inside "
                r"the capture the default stream is the capturing stream, "
                r"whose work is recorded, not run: a blocking call cannot "
                r"wait for it; copy with a Memcpy3D given the capturing "
                r"stream \(it is captured\), or call it after "
                r"end_capture\(\)$" % what,
            ):
                copy_linear()
        assert {n: standin.calls(n) for n in calls} == calls
        t = threading.Thread(target=other)
        t.start()
        t.join()
    assert len(seen) == 1 and seen[0].startswith("Memcpy3D: "), seen
    assert "capturing a graph" in seen[0]
    assert [n.kind for n in cap.graph.nodes()] == ["kernel", "memcpy", "memcpy"]
    cap.graph.instantiate().launch(s)
    s.synchronize()
    np.testing.assert_array_equal(dst.get(), h["m3"][::2, 1::2, :5])
    np.testing.assert_array_equal(whole.get(), h["m"])
    del y


# ---------------------------------------------------------------- random numbers


def _generator(name):
    cls = getattr(curandom, name + "RandomNumberGenerator")
    try:
        if "Sobol" in name:
            return cls()
        return cls(lambda count: gpuarray.to_gpu(np.full(count, 20261125, np.int32)))
    except curandom.CurandNotFoundError as e:  # the Sobol tables need libcurand
        pytest.skip(str(e))


def _generator_calls(gen):
    """name -> a call of gen returning its output GPUArray."""

    def fill(method, dtype, *args):
        def f():
            out = gpuarray.empty(N, dtype)
            getattr(gen, method)(out, *args)
            return out

        return f

    def skip():
        gen.call_skip_ahead(1000)
        return None

    return {
        "fill_uniform": fill("fill_uniform", F32),
        "fill_normal": fill("fill_normal", np.float64),
        "fill_log_normal": fill("fill_log_normal", F32, 0.5, 0.25),
        "fill_poisson": fill("fill_poisson", np.uint32, 3.5),
        "gen_uniform": lambda: gen.gen_uniform((N,), np.float64),
        "gen_normal": lambda: gen.gen_normal((N,), F32),
        "skip_ahead": skip,
    }


# ---------------------------------------------------------------- GPU


@pytest.mark.gpu
@pytest.mark.parametrize("name", sorted(OPS))
def test_gpu_captured_operation_equals_eager_and_numpy(ctx, rng, name):
    """Eager on fresh data; captured; replayed on the same data (equal to
    the eager run element by element); new data copied into the same
    inputs and replayed again (equal to NumPy and to an eager run on that
    data)."""
    k = _Kernels()
    run = OPS[name][0]
    h = _host(rng)
    a = _to_gpu(h)
    eager = _get(run(k, a))
    _compare_numpy(eager, h, name)
    s = cuda.Stream()
    with graphs.capture_graph(s) as cap:
        out = run(k, a)
    exe = cap.graph.instantiate()
    exe.launch(s)
    s.synchronize()
    _compare_eager(_get(out), eager, name)
    h = _host(rng)
    _set(a, h)
    exe.launch(s)
    s.synchronize()
    got = _get(out)
    _compare_numpy(got, h, name)
    _compare_eager(got, _get(run(k, a)), name)


@pytest.mark.gpu
@pytest.mark.parametrize(
    "gen_name", ["XORWOW", "MRG32k3a", "Sobol32", "ScrambledSobol32", "Sobol64", "ScrambledSobol64"]
)
def test_gpu_captured_generator_continues_its_sequence(ctx, gen_name):
    """Two generators made alike: one called eagerly three times, the other
    captured once and replayed three times; replay r equals eager call r,
    for every fill_*/gen_* method and with skip_ahead between (the state is
    on the GPU, and each replay advances it as an eager call does)."""
    eager_gen, cap_gen = _generator(gen_name), _generator(gen_name)
    eager_calls, cap_calls = _generator_calls(eager_gen), _generator_calls(cap_gen)
    want = []
    for _ in range(3):
        draw = {n: c() for n, c in eager_calls.items()}  # in the captured order
        want.append({n: o.get() for n, o in draw.items() if o is not None})
    s = cuda.Stream()
    with graphs.capture_graph(s) as cap:
        outs = {n: c() for n, c in cap_calls.items()}
    exe = cap.graph.instantiate()
    for r in range(3):
        exe.launch(s)
        s.synchronize()
        for n, o in outs.items():
            if o is not None:
                np.testing.assert_array_equal(
                    o.get(), want[r][n], err_msg="%s %s replay %d" % (gen_name, n, r)
                )
    assert not np.array_equal(want[0]["fill_uniform"], want[1]["fill_uniform"])
    u = want[0]["fill_uniform"]
    assert 0 < u.min() and u.max() <= 1


@pytest.mark.gpu
def test_gpu_captured_rand_repeats_the_draw_of_its_capture(ctx):
    """rand()'s seed is drawn from numpy.random when it is called, i.e. at
    capture: every replay writes the numbers an eager call with that NumPy
    state writes."""
    np.random.seed(20261125)
    eager = curandom.rand((N,), np.float64).get()
    s = cuda.Stream()
    np.random.seed(20261125)
    with graphs.capture_graph(s) as cap:
        out = curandom.rand((N,), np.float64)
    exe = cap.graph.instantiate()
    for _ in range(2):
        out.fill(-1.0)
        exe.launch(s)
        s.synchronize()
        np.testing.assert_array_equal(out.get(), eager)
    assert 0 <= eager.min() and eager.max() < 1 and np.unique(eager).size > N // 2


@pytest.mark.gpu
@pytest.mark.parametrize("warmup", [True, False])
def test_gpu_captured_function_random_numbers(ctx, warmup):
    """captured(): the warm-up is an eager call, so it draws from a
    generator too; with warmup=True call c returns the generator's draw
    c + 1 (call 1: the warm-up drew draw 1, the first replay draw 2), with
    warmup=False draw c.  rand() inside: every call returns the draw of
    the capture's NumPy state (the warm-up's seed is the first
    numpy.random draw, the capture's the second)."""
    eager_gen = _generator("XORWOW")
    cap_gen = _generator("XORWOW")
    draws = [eager_gen.gen_normal((N,), F32).get() for _ in range(4)]
    np.random.seed(7)
    rand_draws = [curandom.rand((N,)).get() for _ in range(2)]

    @graphs.captured(warmup=warmup)
    def step(x):
        z = gpuarray.empty_like(x)
        cap_gen.fill_normal(z)
        return z + x, curandom.rand((N,))

    x = np.random.default_rng().standard_normal(N).astype(F32)
    np.random.seed(7)
    for c in range(3):
        z, r = step(gpuarray.to_gpu(x))
        np.testing.assert_allclose(z.get(), draws[c + 1 if warmup else c] + x, rtol=1e-6, atol=1e-6)
        np.testing.assert_array_equal(r.get(), rand_draws[1 if warmup else 0])


def _hundred_ops(x, y):
    """100 small element-wise operations (and a reduction at the end)."""
    z = x
    for i in range(25):
        z = z * 0.5 + y  # two operations
        z = z - x * 0.25  # two operations
    return z, gpuarray.sum(z)


def _np_hundred_ops(x, y):
    z = x
    for i in range(25):
        z = z * F32(0.5) + y
        z = z - x * F32(0.25)
    return z


@pytest.mark.standin
def test_hundred_small_operations_are_one_graph_launch(standin, ctx, rng):
    """captured() of a loop of 100 small operations: 100 kernel nodes (and
    the reduction's), and a later call is two copies in and one launch."""
    step = graphs.captured(_hundred_ops)
    x, y = (gpuarray.to_gpu(rng.standard_normal(1000).astype(F32)) for _ in range(2))
    step(x, y)
    (entry,) = step.graphs.values()
    kinds = [n.kind for n in entry.graph.nodes()]
    assert kinds.count("kernel") >= 101 and set(kinds) == {"kernel"}, kinds
    _, trace = standin.trace(lambda: step(x, y))
    work = [t for t in trace if t not in ("cuCtxGetCurrent", "cuEventRecord")]
    assert work == ["cuMemcpyDtoD", "cuMemcpyDtoD", "cuGraphLaunch"], trace


@pytest.mark.gpu
def test_gpu_hundred_small_operations_captured_equal_eager_and_numpy(ctx, rng):
    step = graphs.captured(_hundred_ops)
    for _ in range(3):
        x = rng.standard_normal(1000).astype(F32)
        y = rng.standard_normal(1000).astype(F32)
        gx, gy = gpuarray.to_gpu(x), gpuarray.to_gpu(y)
        ez, es = _hundred_ops(gx, gy)
        z, total = step(gx, gy)
        np.testing.assert_array_equal(z.get(), ez.get())
        np.testing.assert_allclose(total.get(), es.get(), rtol=1e-6, atol=1e-5)
        want = _np_hundred_ops(x, y)
        np.testing.assert_allclose(z.get(), want, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(total.get(), want.astype(np.float64).sum(), rtol=1e-4, atol=1e-3)
    assert len(step.graphs) == 1


@pytest.mark.standin
def test_captured_first_call_is_ordered_with_a_non_blocking_stream(standin, ctx, rng):
    """captured(stream=s) with s NON_BLOCKING (the legacy stream does not
    wait for it): the first call of a signature copies the inputs in and
    runs the warm-up on the default stream after the work queued on s (an
    event s records, which the legacy stream waits for), and the graph's
    first launch on s waits for them (an event the legacy stream records).
    Before, the copies went on s and the warm-up on the legacy stream, in
    no order: the warm-up could read its inputs before they were copied,
    and write them after the second copy."""
    s = cuda.Stream(flags=cuda.stream_flags.NON_BLOCKING)
    step = graphs.captured(lambda x: x * 2 + 1, stream=s)
    x = gpuarray.to_gpu(rng.standard_normal(N).astype(F32))
    _, trace = standin.trace(lambda: step(x))
    order = [
        t
        for t in trace
        if t
        in (
            "cuEventRecord",
            "cuStreamWaitEvent",
            "cuMemcpyDtoD",
            "cuLaunchKernelEx",
            "cuLaunchKernel",
            "cuStreamBeginCapture",
            "cuStreamEndCapture",
            "cuGraphLaunch",
        )
    ]
    first_copy = order.index("cuMemcpyDtoD")
    assert order[:2] == ["cuEventRecord", "cuStreamWaitEvent"], order
    assert order[first_copy + 1].startswith("cuLaunchKernel"), order  # the warm-up
    end = order.index("cuStreamEndCapture")
    assert order[end + 1 : end + 4] == ["cuEventRecord", "cuStreamWaitEvent", "cuGraphLaunch"], (
        order
    )
    # a later call: copies in on s, one launch on s
    _, trace = standin.trace(lambda: step(x))
    assert [t for t in trace if t not in ("cuCtxGetCurrent", "cuEventRecord")] == [
        "cuMemcpyDtoDAsync",
        "cuGraphLaunch",
    ], trace


def _program_with_temporaries(x):
    t = x * 2  # a temporary: dies inside the capture
    u = cumath.exp(t * 0.125)  # two more
    return u + t


@pytest.mark.standin
def test_temporaries_of_a_capture_are_not_handed_out_while_the_graph_lives(standin, ctx, rng):
    """The memory of a temporary that dies during the capture is the
    graph's while the graph lives: arrays made after the capture (of the
    same size, as a cache of blocks would hand out first) get other
    addresses."""
    x = gpuarray.to_gpu(rng.standard_normal(N).astype(F32))
    _program_with_temporaries(x)
    s = cuda.Stream()
    seen = []
    real_mul = gpuarray.GPUArray.__mul__

    def mul(self, other):  # note every temporary's address
        r = real_mul(self, other)
        seen.append(int(r.gpudata))
        return r

    gpuarray.GPUArray.__mul__ = mul
    try:
        with graphs.capture_graph(s) as cap:
            out = _program_with_temporaries(x)
    finally:
        gpuarray.GPUArray.__mul__ = real_mul
    gc.collect()
    assert len(seen) == 2
    exe = cap.graph.instantiate()
    del cap
    gc.collect()
    made = [gpuarray.empty_like(x) for _ in range(32)] + [x * 3 for _ in range(32)]
    assert not set(seen) & {int(m.gpudata) for m in made}
    exe.launch(s)
    s.synchronize()
    del exe, out, made
    gc.collect()


@pytest.mark.gpu
def test_gpu_arrays_made_after_a_capture_keep_their_contents_across_replays(ctx, rng):
    """Checked by content: arrays made and filled after the capture (with
    fresh random data) are unchanged by replays that write the capture's
    temporaries, and the replays' results are right."""
    x = rng.standard_normal(N).astype(F32)
    gx = gpuarray.to_gpu(x)
    _program_with_temporaries(gx)
    s = cuda.Stream()
    with graphs.capture_graph(s) as cap:
        out = _program_with_temporaries(gx)
    exe = cap.graph.instantiate()
    del cap
    gc.collect()
    data = [rng.standard_normal(N).astype(F32) for _ in range(16)]
    made = [gpuarray.to_gpu(d) for d in data] + [gx * 3 for _ in range(16)]
    for _ in range(3):
        x = rng.standard_normal(N).astype(F32)
        gx.set(x)
        exe.launch(s)
        s.synchronize()
        t = x * F32(2)
        np.testing.assert_allclose(out.get(), np.exp(_f64(t) * 0.125) + t, rtol=1e-5, atol=1e-5)
    for d, m in zip(data, made):
        np.testing.assert_array_equal(m.get(), d)
