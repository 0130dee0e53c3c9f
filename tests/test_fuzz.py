"""Hostile input: thousands of random argument combinations to launch, copies,
memsets, allocation and module loading.  Each call must either work or raise
an ordinary Python exception (never SystemError, never a crash), and when the
run is over every handle it made is gone and no dead handle was ever used.

Against the driver stand-in, where a wild pointer is refused by the stand-in's
range checks instead of corrupting a real GPU.  PYGPU_FUZZ_SEED and
PYGPU_FUZZ_ROUNDS repeat or lengthen a run."""
import gc
import os

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
        self.__cuda_array_interface__ = {"shape": shape, "typestr": "<f4", "data": (ptr, False),
                                         "version": 3}


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


def _pool(rng, live, freed, stream, event, module, func):
    ro = np.arange(6, dtype=np.float32)
    ro.flags.writeable = False
    values = [
        None, True, False, 0, 1, 3, 17, 4096, -1, -(2 ** 31), 2 ** 40, 2 ** 63, 2 ** 64, 10 ** 30,
        Weird(5), BadIndex(), 1.5, float("nan"), float("inf"), -0.0, 1 + 2j, "abc", "", b"",
        b"\x00" * 16, bytearray(9), memoryview(b"12345678"), [], [1, 2], (), (1, 2, 3),
        (0, 1, 1), (1025, 1, 1), (2 ** 32, 1, 1), (1, -1, 1), {}, {"shape": (1,)}, object(),
        np.zeros(3, np.float32), rng.standard_normal((4, 5)), np.zeros(0), ro,
        rng.standard_normal((6, 6))[:, ::2], np.float32(2.5), np.int64(-5), np.int8(7),
        np.uint64(2 ** 64 - 1), np.bool_(True), np.zeros((), np.dtype([("a", "i4"), ("b", "f8")],
                                                                   align=True))[()],
        np.array([b"xy"]), live, freed, int(live), BadCAI(), BogusCAI(12345, (3,)),
        BogusCAI(int(live), (10 ** 12,)), BadDLPack(), stream, event, module, func,
        cuda.In(np.ones(4, np.float32)), cuda.Out(np.zeros(4)), cuda.InOut(np.ones(3)), cuda.In(ro),
        cuda.Stream.null, cuda.Context.get_current(), cuda.Device(0), np.float64,
        "PfiP", lambda: 0,
    ]
    return values


def _ops(rng, pick, module, funcs):
    def args(lo, hi):
        return [pick() for _ in range(int(rng.integers(lo, hi + 1)))]

    def launch():
        f = funcs[int(rng.integers(len(funcs)))]
        kw = {}
        for key in ("block", "grid", "shared", "stream", "time_kernel", "cluster",
                    "cooperative", "pdl"):
            if rng.random() < (0.9 if key == "block" else 0.25):
                kw[key] = pick()
        return f(*args(0, 5), **kw)

    def prepared():
        f = funcs[int(rng.integers(len(funcs)))]
        if rng.random() < 0.5:
            f.prepare(pick())
        return getattr(f, ["prepared_call", "prepared_async_call", "prepared_timed_call"][
            int(rng.integers(3))])(*args(0, 6))

    def configured():
        f = funcs[int(rng.integers(len(funcs)))]
        return f.configure(*args(0, 3))(*args(0, 4))

    def copy():
        fn = [cuda.memcpy_htod, cuda.memcpy_dtoh, cuda.memcpy_dtod, cuda.memcpy_htod_async,
              cuda.memcpy_dtoh_async, cuda.memcpy_dtod_async, cuda.memcpy_peer][int(rng.integers(7))]
        return fn(*args(1, 5))

    def memset():
        fn = [cuda.memset_d8, cuda.memset_d16, cuda.memset_d32, cuda.memset_d8_async,
              cuda.memset_d16_async, cuda.memset_d32_async][int(rng.integers(6))]
        return fn(*args(2, 4))

    def alloc():
        fn = [cuda.mem_alloc, cuda.mem_alloc_async, cuda.mem_alloc_managed, cuda.mem_alloc_pitch,
              cuda.to_device, cuda.mem_alloc_like, cuda.register_host_memory,
              cuda.pagelocked_empty, cuda.managed_empty][int(rng.integers(9))]
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
        else:     # PTX with a random cut or a flipped byte
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
            attr = ["src_x_in_bytes", "src_y", "src_pitch", "dst_x_in_bytes", "dst_y",
                    "dst_pitch", "width_in_bytes", "height"][int(rng.integers(8))]
            setattr(c, attr, pick())
        for setter in ("set_src_host", "set_dst_host", "set_src_device", "set_dst_device"):
            if rng.random() < 0.4:
                getattr(c, setter)(pick())
        return c(*args(0, 2))

    def pool_use():
        p = tools.DeviceMemoryPool()
        a = p.allocate(pick())
        return a, p

    module_ptx = MODULE_PTX[0]
    return [launch, launch, launch, prepared, configured, copy, copy, memset, alloc,
            from_device, module_load, module_query, memcpy2d, pool_use]


MODULE_PTX = [None]


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
    base = standin.live()
    launches0, calls0 = standin.launches(), standin.calls()
    module = cuda.module_from_buffer(MODULE_PTX[0])
    funcs = [module.get_function(n) for n in ("k0", "k1", "k3", "ks")]
    live = cuda.mem_alloc(256)
    freed = cuda.mem_alloc(64)
    freed.free()
    stream, event = cuda.Stream(), cuda.Event()
    values = _pool(rng, live, freed, stream, event, module, funcs[1])

    # half the time a value that passes the type checks, so calls reach the driver
    plausible = [live, int(live), 0, 1, 4, 16, 64, 255, np.zeros(4, np.float32),
                 np.zeros(64, np.uint8), stream, None, "k0", "k1", "k3", "ks", "table",
                 (1, 1, 1), (32, 1, 1), (2, 1), 2.0, np.int32(3)]

    def pick():
        pool = plausible if rng.random() < 0.5 else values
        return pool[int(rng.integers(len(pool)))]

    ops = _ops(rng, pick, module, funcs)
    outcomes = {}
    for i in range(rounds):
        op = ops[int(rng.integers(len(ops)))]
        try:
            result = op()
            kind = "ok"
        except SystemError as e:       # a C function that lied about its error state
            pytest.fail("seed %d round %d %s: SystemError %s" % (seed, i, op.__name__, e))
        except Exception as e:
            kind = type(e).__name__
            assert str(e) or isinstance(e, (KeyError, StopIteration)), \
                "seed %d round %d %s: %s with no message" % (seed, i, op.__name__, kind)
        else:
            del result
        outcomes[(op.__name__, kind)] = outcomes.get((op.__name__, kind), 0) + 1
        while cuda.Context.get_current() not in (None, ctx):
            cuda.Context.pop()
        if cuda.Context.get_current() is None:
            ctx.push()
    cuda.Context.synchronize()
    del values, plausible, ops, op, pick, module, funcs, live, freed, stream, event
    gc.collect()
    leaked = {k: v - base[k] for k, v in standin.live().items() if v != base[k]}
    assert not leaked, "seed %d: leaked %s" % (seed, leaked)
    # it did reach the driver and the argument checks, not only the type errors
    names = {name for name, kind in outcomes if kind == "ok"}
    assert {"launch", "alloc", "module_query"} <= names, (seed, outcomes)
    assert standin.launches() > launches0 and standin.calls() > calls0 + rounds, (seed, outcomes)
