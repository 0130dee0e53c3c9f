"""Hostile input: thousands of random argument combinations to launch, copies,
memsets, allocation and module loading.  Each call must either work or raise
an ordinary Python exception (never SystemError, never a crash), and when the
run is over every handle it made is gone and no dead handle was ever used.

The pool holds hostile objects too (issue 13): an __index__ that empties the
list or dict it came from or frees a DeviceAllocation, a
__cuda_array_interface__ that yields the GIL, launches the same kernel again
or prepare()s it while it is read, buffers whose format lies (a ctypes
structure with a ':' in a field name hiding an object field, memoryview
casts, object arrays) and structured NumPy scalars with object fields.  A
second phase has 8 threads launch with their own random arguments; every
launch's parameter bytes are checked against what its thread passed.

Against the driver stand-in, where a wild pointer is refused by the stand-in's
range checks instead of corrupting a real GPU.  PYGPU_FUZZ_SEED and
PYGPU_FUZZ_ROUNDS repeat or lengthen a run."""

import ctypes
import gc
import operator
import os
import struct
import sys
import threading
import time

import numpy as np
import pytest

import pygpu.driver as cuda
from pygpu import compiler, tools

pytestmark = pytest.mark.standin

SOURCE = r"""
struct S { int a; double b; };
extern "C" __global__ void k0() { }
extern "C" __global__ void k1(float *x) { }
extern "C" __global__ void k3(float *x, int n, double d) { }
extern "C" __global__ void ks(S s, char c, const float *p, unsigned long long q) { }
__constant__ float table[8];
"""


class BadCAI:
    @property
    def __cuda_array_interface__(self):
        raise RuntimeError("broken interface")


class BogusCAI:
    def __init__(self, ptr, shape):
        self.__cuda_array_interface__ = {
            "shape": shape,
            "typestr": "<f4",
            "data": (ptr, False),
            "version": 3,
        }


class BadDLPack:
    def __dlpack__(self, stream=None):
        raise ValueError("no")

    def __dlpack_device__(self):
        return (2, 0)


class BadIndex:
    def __index__(self):
        raise ZeroDivisionError("bad index")

    def __int__(self):
        raise ZeroDivisionError("bad int")


class Weird(int):
    pass


class Fresh:
    """A pool entry made anew at each pick (hostile objects with state)."""

    def __init__(self, make):
        self.make = make


class YieldingCAI:
    """A device array whose __cuda_array_interface__ runs a hook (relaunch
    or prepare() the kernel being launched) and yields the GIL while read."""

    def __init__(self, ptr, hook=None):
        self.ptr, self.hook = ptr, hook

    @property
    def __cuda_array_interface__(self):
        if self.hook is not None:
            hook, self.hook = self.hook, None
            hook()
        time.sleep(0)
        return {"shape": (4,), "typestr": "<f4", "data": (self.ptr, False), "version": 3}


class MutatingIndex:
    """An __index__ that empties the list or dict it came from."""

    def __init__(self, container, value):
        self.container, self.value = container, value

    def __index__(self):
        self.container.clear()
        return self.value


class FreeingIndex:
    """An __index__ that frees a DeviceAllocation (maybe one of the same
    call's other arguments)."""

    def __init__(self, alloc, value):
        self.alloc, self.value = alloc, value

    def __index__(self):
        self.alloc.free()
        return self.value


class MutatingCAI:
    def __init__(self, ptr, n):
        self.ptr, self.n = ptr, n

    @property
    def __cuda_array_interface__(self):
        d = {"typestr": "<f4", "data": (self.ptr, False), "version": 3}
        d["shape"] = (MutatingIndex(d, self.n),)
        return d


def _emptying_dims(rng):
    """block/grid as a list that its first entry's __index__ empties (only
    for pygpu's own parsers: NumPy's shape parsing crashes on it)."""
    b = [None, 1, 1]
    b[0] = MutatingIndex(b, int(rng.integers(1, 64)))
    return b


class Lying(ctypes.Structure):
    """Its buffer format is T{<d:a:b:<O:o:}: the ':' in a field name once
    hid the object field from the check that refuses such host buffers."""

    _fields_ = [("a:b", ctypes.c_double), ("o", ctypes.py_object)]


SENTINEL = object()


def _lying_buffers():
    """Host buffers holding PyObject pointers behind formats that lie or
    that a cast hides; checked intact at the end of the run."""
    one = Lying(1.0, SENTINEL)
    many = (Lying * 4)()
    for x in many:
        x.o = SENTINEL
    objs = np.empty(8, object)
    objs[:] = SENTINEL
    rec = np.zeros(4, [("a", "f8"), ("o", "O")])
    rec["o"] = SENTINEL
    keep = [one, many, objs, rec]
    views = [
        memoryview(one),
        memoryview(many),
        memoryview(objs),
        memoryview(rec),
        memoryview(many).cast("B"),
        memoryview(np.zeros(16, np.float32)).cast("B"),
        memoryview(bytearray(64)).cast("d"),
        memoryview(bytearray(64)).cast("B", (8, 8)),
        memoryview(np.zeros((4, 4), np.float64))[::2],
    ]
    return keep, views


def _live(standin):
    """The stand-in's live handles with pygpu's block cache emptied first:
    its blocks are free memory kept for reuse, and a cache trimmed between
    two counts (an out-of-memory flush) would read as a negative leak."""
    from pygpu import _driver

    _driver._block_cache_trim(None, 0)
    return standin.live()


def _check_lying(keep):
    one, many, objs, rec = keep
    assert one.o is SENTINEL and all(x.o is SENTINEL for x in many)
    assert all(x is SENTINEL for x in objs) and all(x is SENTINEL for x in rec["o"])


def _hostile(rng, live, funcs, current, pick, lying_views):
    """Fresh hostile objects: made at each pick, bound to the kernel being
    launched (current[0]) where they re-enter it."""
    depth = [0]

    def relaunch():
        if depth[0] > 2:
            return
        depth[0] += 1
        try:
            current[0](*[pick() for _ in range(int(rng.integers(0, 4)))], block=(1, 1, 1))
        finally:
            depth[0] -= 1

    def reprepare():
        current[0].prepare(pick())

    def freeing():
        return FreeingIndex(cuda.mem_alloc(64), int(rng.integers(0, 64)))

    def bad_struct():
        v = np.zeros((), [("x", "O"), ("y", "f8")])
        v["x"] = object()
        return v[()]

    return [
        Fresh(lambda: YieldingCAI(int(live))),
        Fresh(lambda: YieldingCAI(int(live), relaunch)),
        Fresh(lambda: YieldingCAI(int(live), reprepare)),
        Fresh(lambda: YieldingCAI(int(live), lambda: (cuda.Context.synchronize(), time.sleep(0)))),
        Fresh(lambda: MutatingCAI(int(live), int(rng.integers(0, 128)))),
        Fresh(lambda: MutatingIndex([1, 2, 3], int(rng.integers(0, 64)))),
        Fresh(freeing),
        Fresh(bad_struct),
    ] + lying_views


def _pool(rng, live, freed, stream, event, module, func):
    ro = np.arange(6, dtype=np.float32)
    ro.flags.writeable = False
    values = [
        None,
        True,
        False,
        0,
        1,
        3,
        17,
        4096,
        -1,
        -(2**31),
        2**40,
        2**63,
        2**64,
        10**30,
        Weird(5),
        BadIndex(),
        1.5,
        float("nan"),
        float("inf"),
        -0.0,
        1 + 2j,
        "abc",
        "",
        b"",
        b"\x00" * 16,
        bytearray(9),
        memoryview(b"12345678"),
        [],
        [1, 2],
        (),
        (1, 2, 3),
        (0, 1, 1),
        (1025, 1, 1),
        (2**32, 1, 1),
        (1, -1, 1),
        {},
        {"shape": (1,)},
        object(),
        np.zeros(3, np.float32),
        rng.standard_normal((4, 5)),
        np.zeros(0),
        ro,
        rng.standard_normal((6, 6))[:, ::2],
        np.float32(2.5),
        np.int64(-5),
        np.int8(7),
        np.uint64(2**64 - 1),
        np.bool_(True),
        np.zeros((), np.dtype([("a", "i4"), ("b", "f8")], align=True))[()],
        np.array([b"xy"]),
        live,
        freed,
        int(live),
        BadCAI(),
        BogusCAI(12345, (3,)),
        BogusCAI(int(live), (10**12,)),
        BadDLPack(),
        stream,
        event,
        module,
        func,
        cuda.In(np.ones(4, np.float32)),
        cuda.Out(np.zeros(4)),
        cuda.InOut(np.ones(3)),
        cuda.In(ro),
        cuda.Stream.null,
        cuda.Context.get_current(),
        cuda.Device(0),
        np.float64,
        "PfiP",
        lambda: 0,
    ]
    return values


def _ops(rng, pick, module, funcs, current):
    def args(lo, hi):
        return [pick() for _ in range(int(rng.integers(lo, hi + 1)))]

    def launch():
        f = current[0] = funcs[int(rng.integers(len(funcs)))]
        kw = {}
        for key in (
            "block",
            "grid",
            "shared",
            "stream",
            "time_kernel",
            "cluster",
            "cooperative",
            "pdl",
        ):
            if rng.random() < (0.9 if key == "block" else 0.25):
                kw[key] = pick()
                if key in ("block", "grid", "cluster") and rng.random() < 0.05:
                    kw[key] = _emptying_dims(rng)
        return f(*args(0, 5), **kw)

    def prepared():
        f = current[0] = funcs[int(rng.integers(len(funcs)))]
        if rng.random() < 0.5:
            f.prepare(pick())
        return getattr(
            f, ["prepared_call", "prepared_async_call", "prepared_timed_call"][int(rng.integers(3))]
        )(*args(0, 6))

    def configured():
        f = current[0] = funcs[int(rng.integers(len(funcs)))]
        conf = args(0, 3)
        if conf and rng.random() < 0.1:
            conf[int(rng.integers(len(conf)))] = _emptying_dims(rng)
        return f.configure(*conf)(*args(0, 4))

    def copy():
        fn = [
            cuda.memcpy_htod,
            cuda.memcpy_dtoh,
            cuda.memcpy_dtod,
            cuda.memcpy_htod_async,
            cuda.memcpy_dtoh_async,
            cuda.memcpy_dtod_async,
            cuda.memcpy_peer,
        ][int(rng.integers(7))]
        return fn(*args(1, 5))

    def memset():
        fn = [
            cuda.memset_d8,
            cuda.memset_d16,
            cuda.memset_d32,
            cuda.memset_d8_async,
            cuda.memset_d16_async,
            cuda.memset_d32_async,
        ][int(rng.integers(6))]
        return fn(*args(2, 4))

    def alloc():
        fn = [
            cuda.mem_alloc,
            cuda.mem_alloc_async,
            cuda.mem_alloc_managed,
            cuda.mem_alloc_pitch,
            cuda.to_device,
            cuda.mem_alloc_like,
            cuda.register_host_memory,
            cuda.pagelocked_empty,
            cuda.managed_empty,
        ][int(rng.integers(9))]
        return fn(*args(1, 3))

    def from_device():
        fn = [cuda.from_device, cuda.from_device_like][int(rng.integers(2))]
        return fn(*args(1, 3))

    def module_load():
        choice = rng.random()
        if choice < 0.3:
            data = bytes(rng.integers(0, 256, int(rng.integers(1, 200)), dtype=np.uint8))
        elif choice < 0.6:
            data = pick()
        else:  # PTX with a random cut or a flipped byte
            raw = bytearray(module_ptx)
            i = int(rng.integers(len(raw)))
            if rng.random() < 0.5:
                raw = raw[:i]
            else:
                raw[i] = int(rng.integers(0, 256))
            data = bytes(raw)
        return cuda.module_from_buffer(data, *args(0, 2))

    def module_query():
        name = pick()
        return [module.get_function, module.get_global][int(rng.integers(2))](name)

    def memcpy2d():
        c = cuda.Memcpy2D()
        for _ in range(int(rng.integers(0, 8))):
            attr = [
                "src_x_in_bytes",
                "src_y",
                "src_pitch",
                "dst_x_in_bytes",
                "dst_y",
                "dst_pitch",
                "width_in_bytes",
                "height",
            ][int(rng.integers(8))]
            setattr(c, attr, pick())
        for setter in ("set_src_host", "set_dst_host", "set_src_device", "set_dst_device"):
            if rng.random() < 0.4:
                getattr(c, setter)(pick())
        return c(*args(0, 2))

    def pool_use():
        p = tools.DeviceMemoryPool()
        a = p.allocate(pick())
        return a, p

    def freed_by_a_later_argument():
        """An allocation freed while a later argument of the same call is
        converted: refused, never used."""
        a = cuda.mem_alloc(64)
        f = current[0] = funcs[int(rng.integers(1, len(funcs)))]
        rest = [FreeingIndex(a, int(rng.integers(0, 16)))] + args(0, 3)
        if rng.random() < 0.5:
            f(a, *rest, block=(1, 1, 1))
            pytest.fail("a launch with an allocation freed during the call went through")
        return [cuda.memcpy_dtod, cuda.memset_d8][int(rng.integers(2))](a, *rest[:2])

    module_ptx = MODULE_PTX[0]
    return [
        launch,
        launch,
        launch,
        prepared,
        configured,
        copy,
        copy,
        memset,
        alloc,
        from_device,
        module_load,
        module_query,
        memcpy2d,
        pool_use,
        freed_by_a_later_argument,
    ]


MODULE_PTX = [None]


# np.bool_ and empty arrays are in the pool on purpose: NumPy 2.0 (the last
# for Python 3.9) warns where an np.bool_ is taken as an index (it counts
# as 1) or an empty array as a truth value (False); later NumPy raises
# TypeError or ValueError.  Both are fine here.
@pytest.mark.filterwarnings(
    "ignore:In future, it will be an error for 'np.bool':DeprecationWarning"
)
@pytest.mark.filterwarnings(
    "ignore:The truth value of an empty array is ambiguous:DeprecationWarning"
)
def test_random_arguments_raise_only_python_exceptions(standin, ctx):
    seed = int(os.environ.get("PYGPU_FUZZ_SEED", int.from_bytes(os.urandom(4), "little")))
    rounds = int(os.environ.get("PYGPU_FUZZ_ROUNDS", "20000"))
    rng = np.random.default_rng(seed)
    MODULE_PTX[0] = bytes(compiler.compile(SOURCE, target="ptx", arch="compute_90"))
    # the context's staging buffers live as long as it: make them first
    big = np.zeros(16 << 20, np.uint8)
    cuda.memcpy_dtoh(big, cuda.to_device(big))
    del big
    gc.collect()
    base = _live(standin)
    launches0, calls0 = standin.launches(), standin.calls()
    module = cuda.module_from_buffer(MODULE_PTX[0])
    funcs = [module.get_function(n) for n in ("k0", "k1", "k3", "ks")]
    live = cuda.mem_alloc(256)
    freed = cuda.mem_alloc(64)
    freed.free()
    stream, event = cuda.Stream(), cuda.Event()
    values = _pool(rng, live, freed, stream, event, module, funcs[1])
    lying, lying_views = _lying_buffers()
    current = [funcs[1]]

    # half the time a value that passes the type checks, so calls reach the driver
    plausible = [
        live,
        int(live),
        0,
        1,
        4,
        16,
        64,
        255,
        np.zeros(4, np.float32),
        np.zeros(64, np.uint8),
        stream,
        None,
        "k0",
        "k1",
        "k3",
        "ks",
        "table",
        (1, 1, 1),
        (32, 1, 1),
        (2, 1),
        2.0,
        np.int32(3),
    ]

    def pick():
        pool = plausible if rng.random() < 0.5 else values
        v = pool[int(rng.integers(len(pool)))]
        return v.make() if isinstance(v, Fresh) else v

    hostile = _hostile(rng, live, funcs, current, pick, lying_views)
    values += hostile
    plausible += hostile[:2] + lying_views[:4]
    ops = _ops(rng, pick, module, funcs, current)
    outcomes = {}
    for i in range(rounds):
        op = ops[int(rng.integers(len(ops)))]
        try:
            result = op()
            kind = "ok"
        except SystemError as e:  # a C function that lied about its error state
            pytest.fail("seed %d round %d %s: SystemError %s" % (seed, i, op.__name__, e))
        except Exception as e:
            kind = type(e).__name__
            assert str(e) or isinstance(e, (KeyError, StopIteration)), (
                "seed %d round %d %s: %s with no message" % (seed, i, op.__name__, kind)
            )
        else:
            del result
        outcomes[(op.__name__, kind)] = outcomes.get((op.__name__, kind), 0) + 1
        while cuda.Context.get_current() not in (None, ctx):
            cuda.Context.pop()
        if cuda.Context.get_current() is None:
            ctx.push()
    cuda.Context.synchronize()
    _check_lying(lying)
    del values, plausible, ops, op, pick, module, funcs, live, freed, stream, event
    del hostile, lying_views, current
    gc.collect()
    leaked = {k: v - base[k] for k, v in _live(standin).items() if v != base[k]}
    assert not leaked, "seed %d: leaked %s" % (seed, leaked)
    # it did reach the driver and the argument checks, not only the type errors
    names = {name for name, kind in outcomes if kind == "ok"}
    assert {"launch", "alloc", "module_query"} <= names, (seed, outcomes)
    assert standin.launches() > launches0 and standin.calls() > calls0 + rounds, (seed, outcomes)


S_DTYPE = np.dtype([("a", "i4"), ("b", "f8")], align=True)


def _thread_args(rng, f, own, inner, depth=0):
    """Random arguments for k1/k3/ks and the parameter bytes they must
    arrive as; expected is None where the call must be refused.  A pointer
    may relaunch the same kernel while it is converted; inner gets that
    launch's expected bytes."""

    def relaunch():
        while True:
            a, e = _thread_args(rng, f, own, inner, depth + 1)
            if e is not None:
                break
        f(*a, block=(1, 1, 1))
        inner.append(e)

    def pointer():
        p = int(rng.integers(0, 2**48))
        r = rng.random()
        if r < 0.3:
            return p, p
        if r < 0.5:
            return own, int(own)
        if r < 0.8:  # yields the GIL (and sometimes relaunches) while read
            hook = relaunch if depth < 2 and rng.random() < 0.2 else None
            return YieldingCAI(p, hook), p
        return np.uint64(p), p

    name = f.name
    if name == "k1":
        a, p = pointer()
        args, expected = [a], struct.pack("<Q", p)
    elif name == "k3":
        a, p = pointer()
        n = int(rng.integers(-(2**31), 2**31))
        d = float(rng.standard_normal())
        args = [
            a,
            n if rng.random() < 0.5 else np.int32(n),
            d if rng.random() < 0.5 else np.float64(d),
        ]
        expected = struct.pack("<Qi4xd", p, n, d)
    else:
        s = np.zeros((), S_DTYPE)
        s["a"], s["b"] = int(rng.integers(-(2**31), 2**31)), float(rng.standard_normal())
        c = int(rng.integers(-128, 256))
        a, p = pointer()
        q = int(rng.integers(0, 2**63)) * 2 + int(rng.integers(2))
        args = [s[()], c, a, q]
        expected = s.tobytes() + struct.pack("<B7xQQ", c & 0xFF, p, q)
    r = rng.random()
    if r < 0.05:  # a hostile argument: refused, nothing launched
        args[int(rng.integers(len(args)))] = [BadIndex(), "x", object(), BadCAI()][
            int(rng.integers(4))
        ]
        expected = None
    return args, expected


def test_cast_view_of_a_buffer_with_objects_is_refused(standin, ctx):
    """Found by this fuzzer: memoryview(x).cast('B') of a ctypes array whose
    structure holds a py_object reports format 'B'; the check looked only
    at that format and memcpy_dtoh overwrote the PyObject pointers."""
    many = (Lying * 4)()
    for x in many:
        x.o = SENTINEL
    dev = cuda.mem_alloc(64)
    cuda.memset_d8(dev, 0, 64)
    for view in (memoryview(many).cast("B"), memoryview(memoryview(many).cast("B"))):
        with pytest.raises(
            TypeError,
            match=r"memcpy_dtoh\(\): the host buffer holds Python "
            r"objects \(format 'B'\)",
        ):
            cuda.memcpy_dtoh(view, dev)
    assert all(x.o is SENTINEL for x in many)
    plain = np.arange(16, dtype=np.float32)  # a cast of plain data still works
    cuda.memcpy_htod(dev, memoryview(plain).cast("B"))
    back = np.zeros(64, np.uint8)
    cuda.memcpy_dtoh(memoryview(back).cast("B"), dev)
    np.testing.assert_array_equal(back.view(np.float32), plain)


def test_threads_launch_exactly_their_own_arguments(standin, ctx):
    """8 threads launch k1/k3/ks with their own random arguments (pointers
    that yield the GIL or relaunch while converted, NumPy scalars, hostile
    values); every launch, checked one by one, carries exactly the bytes its
    thread passed, and a refused one launches nothing."""
    seed = int(os.environ.get("PYGPU_FUZZ_SEED", int.from_bytes(os.urandom(4), "little")))
    rounds = int(os.environ.get("PYGPU_FUZZ_THREAD_ROUNDS", "250"))
    if MODULE_PTX[0] is None:
        MODULE_PTX[0] = bytes(compiler.compile(SOURCE, target="ptx", arch="compute_90"))
    gc.collect()
    base = _live(standin)
    module = cuda.module_from_buffer(MODULE_PTX[0])
    funcs = [module.get_function(n) for n in ("k1", "k3", "ks")]
    bad, errors = [], []
    counts = [0] * 8

    def worker(t):
        rng = np.random.default_rng([seed, t])
        own = cuda.mem_alloc(64)
        ctx.push()
        try:
            last = standin.thread_last_params()
            for i in range(rounds):
                f = funcs[int(rng.integers(len(funcs)))]
                inner = []
                args, expected = _thread_args(rng, f, own, inner)
                try:
                    f(*args, block=(int(rng.integers(1, 64)), 1, 1))
                except SystemError as e:
                    errors.append((t, i, "SystemError", str(e)))
                    continue
                except Exception as e:
                    if expected is not None:
                        errors.append((t, i, type(e).__name__, str(e)))
                    elif standin.thread_last_params() != (inner[-1] if inner else last):
                        bad.append((t, i, f.name, "a refused call launched"))
                    last = standin.thread_last_params()
                    continue
                got = standin.thread_last_params()
                if expected is None:
                    bad.append((t, i, f.name, "a hostile argument was launched"))
                elif got != expected:
                    bad.append((t, i, f.name, expected.hex(), got.hex()))
                last = got
                counts[t] += 1
        finally:
            cuda.Context.pop()
            own.free()

    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        threads = [threading.Thread(target=worker, args=(t,)) for t in range(8)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
    finally:
        sys.setswitchinterval(old)
    assert not errors, "seed %d: %s" % (seed, errors[:5])
    assert not bad, "seed %d: %s" % (seed, bad[:5])
    assert min(counts) > rounds // 2, (seed, counts)
    cuda.Context.synchronize()
    del module, funcs
    gc.collect()
    leaked = {k: v - base[k] for k, v in _live(standin).items() if v != base[k]}
    assert not leaked, "seed %d: leaked %s" % (seed, leaked)


# ---- the array layer: every entry point with hostile operands (issue 25) ----


class _LyingCAI:
    def __init__(self, **cai):
        self.__cuda_array_interface__ = cai


class _LyingDLPack:
    """A DLPack producer whose tensor says what it is told (a plain
    'dltensor' capsule, no deleter, over a struct it keeps alive)."""

    def __init__(self, ptr, shape, strides=None, code=2, bits=32, lanes=1, ndim=None):
        from pygpu import _dlpack as d

        nd = len(shape) if ndim is None else ndim
        self._shape = (ctypes.c_int64 * max(len(shape), 1))(*shape)
        self._strides = (
            None if strides is None else (ctypes.c_int64 * max(len(strides), 1))(*strides)
        )
        t = d.DLTensor(
            ptr or None,
            d.DLDevice(2, 0),
            nd,
            d.DLDataType(code, bits, lanes),
            ctypes.cast(self._shape, ctypes.POINTER(ctypes.c_int64)),
            None
            if self._strides is None
            else ctypes.cast(self._strides, ctypes.POINTER(ctypes.c_int64)),
            0,
        )
        self._m = d.DLManagedTensor(t, None, ctypes.cast(None, d._Deleter))

    def __dlpack__(self, stream=None, max_version=None):
        api = ctypes.pythonapi
        new = ctypes.PYFUNCTYPE(
            ctypes.py_object, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p
        )(("PyCapsule_New", api))
        return new(ctypes.addressof(self._m), b"dltensor", None)

    def __dlpack_device__(self):
        return (2, 0)


def _array_operands(rng, keep):
    """(good, hostile): operands for the array entry points.  hostile[k] is
    (operand, bad): bad is "freed", "elsewhere" (another device's or
    context's memory), "short" (past its allocation), "lie" (a CAI or DLPack
    object that lies or breaks) or "" (refused, if at all, for its type or
    values)."""
    from pygpu import gpuarray as ga

    f32 = lambda *shape: ga.to_gpu(rng.standard_normal(shape).astype(np.float32))  # noqa: E731
    good = [
        f32(16),
        f32(16),
        f32(4, 4),
        ga.to_gpu(np.asfortranarray(rng.standard_normal((4, 4)).astype(np.float32))),
        f32(64)[::2][:16],
        f32(1000),
        f32(10),
        ga.to_gpu(rng.integers(0, 16, 16).astype(np.int32)),
        ga.to_gpu(rng.standard_normal(16)),
        ga.zeros(0, np.float32),
        f32(4, 4).T,
        f32(1),
    ]
    hostile = []
    for shape in ((16,), (4, 4)):
        root = f32(*shape)
        view = root[1:] if len(shape) == 1 else root[1:, :]
        whole = root.reshape(root.size)[:]
        root.gpudata.free()
        hostile += [(root, "freed"), (view, "freed"), (whole, "freed")]
    c1 = cuda.Device(1).retain_primary_context()
    with c1:
        far = f32(32)
    hostile += [(far, "elsewhere"), (far[4:20], "elsewhere")]
    other = cuda.Device(0).make_context()
    try:
        elsewhere = f32(16)
    finally:
        cuda.Context.pop()
    keep.append((other, elsewhere))
    hostile += [(elsewhere, "elsewhere"), (elsewhere[2:], "elsewhere")]
    small = cuda.mem_alloc(16)
    keep.append(small)
    short = ga._new(
        ga.GPUArray,
        (1000,),
        np.dtype(np.float32),
        (4,),
        small,
        None,
        ga._default_allocator,
        1000,
        True,
        True,
    )
    short2 = ga._new(
        ga.GPUArray,
        (4, 4),
        np.dtype(np.float32),
        (16, 4),
        int(small) + 8,
        short,
        ga._default_allocator,
        16,
        True,
        False,
    )
    hostile += [(short, "short"), (short2, "short")]
    raw = ga.zeros(64, np.uint8)
    odd = ga.GPUArray((3, 1), np.int32, gpudata=raw.ptr, base=raw, strides=(6, 4))
    buf = ga.zeros(64, np.float32)
    keep.append(buf)
    hostile += [
        (odd, ""),
        (np.zeros(16, np.float32), ""),
        (None, ""),
        (3.5, ""),
        (7, ""),
        ("x", ""),
        (cuda.mem_alloc(64), ""),
        (_LyingCAI(shape=(-4,), typestr="<f4", data=(buf.ptr, False), version=3), "lie"),
        (
            _LyingCAI(shape=(16,), typestr="<f4", data=(buf.ptr, False), version=3, strides=(4, 4)),
            "lie",
        ),
        (_LyingCAI(shape=(16,), typestr="<f4", data=(0, False), version=3), "lie"),
        (_LyingCAI(shape=(16,), typestr="<q9", data=(buf.ptr, False)), "lie"),
        (_LyingCAI(shape=(16,), typestr="<f4", data=buf.ptr, version=3), "lie"),
        (_LyingCAI(shape=(16,), typestr="<f4", data=(buf.ptr, False), version=9), "lie"),
        (_LyingDLPack(buf.ptr, (-2,)), "lie"),
        (_LyingDLPack(buf.ptr, (4,), bits=12), "lie"),
        (_LyingDLPack(0, (4,)), "lie"),
        (_LyingDLPack(buf.ptr, (4,), lanes=2), "lie"),
        (_LyingDLPack(buf.ptr, (4,), ndim=-3), "lie"),
        (BadCAI(), "lie"),
        (BadDLPack(), "lie"),
    ]
    return good, hostile


def _array_entry_points():
    """(name, arity, refuses, call): refuses, the kinds of bad operand the
    entry point must refuse ("fsel": freed, short, elsewhere, lie)."""
    from pygpu import cumath, curandom
    from pygpu import gpuarray as ga
    from pygpu.elementwise import ElementwiseKernel
    from pygpu.reduction import ReductionKernel
    from pygpu.scan import ExclusiveScanKernel, InclusiveScanKernel

    ewk = ElementwiseKernel("float *x, float *y", "y[i] = x[i] + 1", "fuzz_inc")
    red = ReductionKernel(np.float32, "0", "a+b", "x[i]*y[i]", "const float *x, const float *y")
    inc = InclusiveScanKernel(np.float32, "a+b")
    exc = ExclusiveScanKernel(np.float32, "a+b", "0")
    gen = curandom.XORWOWRandomNumberGenerator()
    host = np.zeros(16, np.float32)
    return [
        ("take", 2, "fsel", lambda a, b: ga.take(a, b)),
        ("sum", 1, "fsel", lambda a: ga.sum(a)),
        ("dot", 2, "fsel", lambda a, b: ga.dot(a, b)),
        ("vdot", 2, "fsel", lambda a, b: ga.vdot(a, b)),
        ("subset_dot", 3, "fsel", lambda a, b, c: ga.subset_dot(a, b, c)),
        ("max", 1, "fsel", lambda a: ga.max(a)),
        ("min", 1, "fsel", lambda a: ga.min(a)),
        ("all", 1, "fsel", lambda a: ga.all(a)),
        ("subset_sum", 2, "fsel", lambda a, b: ga.subset_sum(a, b)),
        ("reverse", 1, "fsel", lambda a: a.reverse()),
        ("fill", 1, "fsel", lambda a: a.fill(2.0)),
        ("astype", 1, "fsel", lambda a: a.astype(np.float64)),
        ("copy", 1, "fsel", lambda a: a.copy()),
        ("get", 1, "fsel", lambda a: a.get()),
        ("get_out", 1, "fsel", lambda a: a.get(ary=np.empty(a.shape, a.dtype))),
        ("set", 1, "fsel", lambda a: a.set(host)),
        ("setitem", 2, "fsel", lambda a, b: a.__setitem__(Ellipsis, b)),
        ("where", 3, "fsel", lambda a, b, c: ga.where(a, b, c)),
        ("if_positive", 3, "fsel", lambda a, b, c: ga.if_positive(a, b, c)),
        ("maximum", 2, "fsel", lambda a, b: ga.maximum(a, b)),
        ("logical_and", 2, "fsel", lambda a, b: ga.logical_and(a, b)),
        ("concatenate", 2, "fsel", lambda a, b: ga.concatenate([a, b])),
        ("stack", 2, "fsel", lambda a, b: ga.stack([a, b])),
        ("add", 2, "fsel", lambda a, b: a + b),
        ("mul_scalar", 1, "fsel", lambda a: a * 3.0),
        ("iadd", 2, "fsel", lambda a, b: operator.iadd(a, b)),
        ("eq", 2, "fsel", lambda a, b: a == b),
        ("neg", 1, "fsel", lambda a: -a),
        ("mul_add", 2, "fsel", lambda a, b: a.mul_add(2.0, b, 3.0)),
        ("sin", 1, "fsel", lambda a: cumath.sin(a)),
        ("sin_out", 2, "fsel", lambda a, b: cumath.sin(a, out=b)),
        ("fmod", 2, "fsel", lambda a, b: cumath.fmod(a, b)),
        ("ldexp", 2, "fsel", lambda a, b: cumath.ldexp(a, b)),
        ("frexp", 1, "fsel", lambda a: cumath.frexp(a)),
        ("modf", 1, "fsel", lambda a: cumath.modf(a)),
        ("ElementwiseKernel", 2, "fsel", lambda a, b: ewk(a, b)),
        ("ElementwiseKernel_range", 2, "fsel", lambda a, b: ewk(a, b, range=slice(0, 3))),
        ("ReductionKernel", 2, "fsel", lambda a, b: red(a, b)),
        ("inclusive_scan", 1, "fsel", lambda a: inc(a)),
        ("exclusive_scan", 2, "fsel", lambda a, b: exc(a, b)),
        ("fill_uniform", 1, "fsel", lambda a: gen.fill_uniform(a)),
        ("fill_normal", 1, "fsel", lambda a: gen.fill_normal(a)),
        ("dlpack", 1, "fsl", lambda a: a.__dlpack__()),
        ("cai", 1, "fsl", lambda a: a.__cuda_array_interface__),
        ("asarray", 1, "l", lambda a: ga.asarray(a)),
        ("transpose", 1, "l", lambda a: a.T),
        ("reshape", 1, "l", lambda a: a.reshape(-1)),
    ]


METHODS = {
    "reverse",
    "fill",
    "astype",
    "copy",
    "get",
    "get_out",
    "set",
    "setitem",
    "add",
    "mul_scalar",
    "iadd",
    "eq",
    "neg",
    "mul_add",
    "dlpack",
    "cai",
    "transpose",
    "reshape",
}
ALLOWED = (
    TypeError,
    ValueError,
    RuntimeError,
    IndexError,
    BufferError,
    AttributeError,
    OverflowError,
    NotImplementedError,
    ZeroDivisionError,
    cuda.Error,
)


def test_array_entry_points_refuse_hostile_operands(standin, ctx):
    """Every array entry point, called with random mixes of good and
    hostile operands (freed views, other devices' and contexts' memory,
    arrays past their allocations, lying CAI and DLPack objects, mixed
    layouts, wrong dtypes and shapes): a clear Python exception or a result,
    never a crash, and never a result from memory that is not there."""
    import warnings
    from pygpu.gpuarray import GPUArray

    seed = int(os.environ.get("PYGPU_FUZZ_SEED", int.from_bytes(os.urandom(4), "little")))
    rounds = int(os.environ.get("PYGPU_FUZZ_ROUNDS", "20000")) // 5
    rng = np.random.default_rng(seed)
    keep = []
    good, hostile = _array_operands(rng, keep)
    points = _array_entry_points()
    outcomes = {}
    try:
        for i in range(rounds):
            name, arity, refuses, call = points[int(rng.integers(len(points)))]
            ops, bad = [], ""
            for _ in range(arity):
                if rng.random() < 0.5:
                    ops.append(good[int(rng.integers(len(good)))])
                else:
                    op, kind = hostile[int(rng.integers(len(hostile)))]
                    ops.append(op)
                    if kind and kind[0] in refuses:
                        bad = bad or kind
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    result = call(*ops)
                kind = "ok"
            except SystemError as e:
                pytest.fail("seed %d round %d %s: SystemError %s" % (seed, i, name, e))
            except ALLOWED as e:
                kind = type(e).__name__
                assert str(e), "seed %d round %d %s: %s with no message" % (seed, i, name, kind)
            except Exception as e:  # noqa: BLE001 (named in the failure)
                pytest.fail(
                    "seed %d round %d %s(%s): unexpected %s: %s"
                    % (seed, i, name, ", ".join(type(o).__name__ for o in ops), type(e).__name__, e)
                )
            else:
                if name in METHODS and not isinstance(ops[0], GPUArray):
                    bad = ""  # the operand's own method or operator, not pygpu's
                if name == "eq" and isinstance(result, bool):
                    bad = ""  # NotImplemented both ways: Python's identity test
                del result
                if bad:
                    pytest.fail(
                        "seed %d round %d: %s accepted an operand whose memory is "
                        "%s: %r" % (seed, i, name, bad, [getattr(o, "shape", o) for o in ops])
                    )
            outcomes[(name, kind)] = outcomes.get((name, kind), 0) + 1
            while cuda.Context.get_current() not in (None, ctx):
                cuda.Context.pop()
            if cuda.Context.get_current() is None:
                ctx.push()
        cuda.Context.synchronize()
    finally:
        for k in keep:
            if isinstance(k, tuple):
                k[1].gpudata.free()
                k[0].detach()
    assert standin.sticky() == 0
    # every entry point was reached both ways
    names = {n for n, kind in outcomes if kind == "ok"}
    refused = {n for n, kind in outcomes if kind != "ok"}
    if rounds >= 2000:
        # (an entry point of three operands that must all agree succeeds
        # rarely: seed 1008962444 left 4 never succeeding in 4,000 rounds)
        assert len(names) >= len(points) - 6, (seed, sorted(set(p[0] for p in points) - names))
        assert len(refused) >= len(points) - 6, (seed, outcomes)
