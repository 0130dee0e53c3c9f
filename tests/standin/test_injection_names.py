"""The stand-in's failure injection by name (issue 33): cuda.h's versioned
names (cuMemAlloc_v2) are accepted as the base names the table holds, and
docs/testing.md's table of which pygpu call reaches which driver entry
point is checked here, row by row, against the calls the stand-in records
and against an injected failure (CUDA_ERROR_INVALID_VALUE: an
out-of-memory is retried once after a collection, so it would not show)."""

import numpy as np
import pytest

import pygpu.driver as cuda
from pygpu import _driver, compiler, gpuarray

pytestmark = pytest.mark.standin

PTX = [None]


def _ptx():
    if PTX[0] is None:
        PTX[0] = bytes(
            compiler.compile(
                'extern "C" __global__ void k(float *x) { x[0] = 1.0f; }',
                target="ptx",
                arch="compute_90",
            )
        )
    return PTX[0]


def test_versioned_names_are_the_base_entry_points(standin, ctx):
    for name in ("cuMemAlloc_v2", "cuCtxCreate_v4", "cuMemcpyHtoD_v2"):
        standin.fail(name, 1, 0)  # accepted (code 0: nothing pending)
    with pytest.raises(ValueError, match="no entry point 'cuNoSuchCall_v2'"):
        standin.fail("cuNoSuchCall_v2")
    for bad in ("cuMemAlloc_v", "cuMemAlloc_vx", "cuMemAlloc_2", "_v2"):
        with pytest.raises(ValueError, match="no entry point"):
            standin.fail(bad)
    # the alias is the same entry point: its count and its failure
    assert standin.calls("cuMemAlloc_v2") == standin.calls("cuMemAlloc")
    # CUDA_ERROR_INVALID_VALUE (an out-of-memory is retried after a collection)
    standin.fail("cuMemAlloc_v2", 1, 1)
    with pytest.raises(cuda.Error) as e:
        cuda.mem_alloc(1024)
    assert e.value.routine == "cuMemAlloc" and standin.fired()
    standin.delay("cuMemAlloc_v2", 0)


def _rows():
    """(the call as docs/testing.md writes it, the entry points it reaches
    in that order (others may come between), a factory: () -> the call as
    a function of no arguments, made ready beforehand)."""
    x = np.ones(256, np.float32)

    def alloc():
        return lambda: cuda.mem_alloc(1024)

    def free():
        d = cuda.mem_alloc(1024)
        return d.free

    def dev_and(fn):
        def make():
            d = cuda.mem_alloc(x.nbytes)
            return lambda: fn(d)

        return make

    def pinned_and(fn):
        def make():
            d, h, s = (
                cuda.mem_alloc(x.nbytes),
                cuda.pagelocked_empty(256, np.float32),
                cuda.Stream(),
            )
            return lambda: fn(d, h, s)

        return make

    def event(fn):
        def make():
            e = cuda.Event()
            e.record()
            return lambda: fn(e)

        return make

    def stream_sync():
        s = cuda.Stream()
        return s.synchronize

    def module():
        ptx = _ptx()
        return lambda: cuda.module_from_buffer(ptx)

    def function():
        m = cuda.module_from_buffer(_ptx())
        return lambda: m.get_function("k")

    def launch(first):
        def make():
            f = cuda.module_from_buffer(_ptx()).get_function("k")
            d = cuda.mem_alloc(4)
            if not first:
                f(d, block=(1, 1, 1), grid=(1, 1))
            return lambda: f(d, block=(1, 1, 1), grid=(1, 1))

        return make

    def array(fn):
        def make():
            g = gpuarray.to_gpu(x)
            return lambda: fn(g)

        return make

    return [
        ("cuda.mem_alloc(n)", ["cuMemAlloc"], alloc),
        ("DeviceAllocation.free()", ["cuMemFree"], free),
        (
            "cuda.mem_alloc_managed(n)",
            ["cuMemAllocManaged"],
            lambda: lambda: cuda.mem_alloc_managed(64),
        ),
        (
            "cuda.mem_alloc_pitch(w, h, size)",
            ["cuMemAllocPitch"],
            lambda: lambda: cuda.mem_alloc_pitch(64, 4, 4),
        ),
        ("cuda.mem_get_info()", ["cuMemGetInfo"], lambda: cuda.mem_get_info),
        (
            "gpuarray.empty(shape, dtype)",
            ["cuMemAllocAsync"],
            lambda: lambda: gpuarray.empty(256, np.float32),
        ),
        (
            "cuda.pagelocked_empty(shape, dtype)",
            ["cuMemHostAlloc"],
            lambda: lambda: cuda.pagelocked_empty(64, np.float32),
        ),
        ("cuda.memcpy_htod(dev, ary)", ["cuMemcpyHtoD"], dev_and(lambda d: cuda.memcpy_htod(d, x))),
        ("cuda.memcpy_dtoh(ary, dev)", ["cuMemcpyDtoH"], dev_and(lambda d: cuda.memcpy_dtoh(x, d))),
        (
            "cuda.memcpy_dtod(dst, src, n)",
            ["cuMemcpyDtoD"],
            dev_and(lambda d: cuda.memcpy_dtod(d, d, 64)),
        ),
        (
            "cuda.memcpy_htod_async(dev, ary, stream)",
            ["cuMemcpyHtoDAsync"],
            pinned_and(lambda d, h, s: cuda.memcpy_htod_async(d, h, s)),
        ),
        (
            "cuda.memcpy_dtoh_async(ary, dev, stream)",
            ["cuMemcpyDtoHAsync"],
            pinned_and(lambda d, h, s: cuda.memcpy_dtoh_async(h, d, s)),
        ),
        (
            "cuda.memset_d32(dev, value, n)",
            ["cuMemsetD32"],
            dev_and(lambda d: cuda.memset_d32(d, 0, 16)),
        ),
        ("cuda.to_device(ary)", ["cuMemAlloc", "cuMemcpyHtoD"], lambda: lambda: cuda.to_device(x)),
        (
            "gpuarray.to_gpu(ary)",
            ["cuMemAllocAsync", "cuMemcpyHtoD"],
            lambda: lambda: gpuarray.to_gpu(x),
        ),
        ("GPUArray.get()", ["cuMemcpyDtoH"], array(lambda g: g.get())),
        ("cuda.Stream()", ["cuStreamCreateWithPriority"], lambda: cuda.Stream),
        ("Stream.synchronize()", ["cuStreamSynchronize"], stream_sync),
        ("cuda.Event()", ["cuEventCreate"], lambda: cuda.Event),
        ("Event.record(stream)", ["cuEventRecord"], event(lambda e: e.record())),
        ("Event.synchronize()", ["cuEventSynchronize"], event(lambda e: e.synchronize())),
        ("Event.query()", ["cuEventQuery"], event(lambda e: e.query())),
        ("cuda.module_from_buffer(image)", ["cuModuleLoadDataEx"], module),
        ("Module.get_function(name)", ["cuModuleGetFunction"], function),
        ("a kernel's first launch", ["cuFuncGetParamInfo", "cuLaunchKernelEx"], launch(True)),
        ("a later launch", ["cuLaunchKernelEx"], launch(False)),
        ("cuda.Context.synchronize()", ["cuCtxSynchronize"], lambda: cuda.Context.synchronize),
        (
            "Device(i).make_context()",
            ["cuCtxCreate"],
            lambda: lambda: cuda.Device(0).make_context().pop(),
        ),
    ]


ROWS = _rows()


def _doc_rows():
    import os

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    with open(os.path.join(root, "docs", "testing.md"), encoding="utf-8") as f:
        return [ln for ln in f.read().splitlines() if ln.startswith("| `")]


@pytest.mark.parametrize("row", ROWS, ids=[r[0] for r in ROWS])
def test_the_documented_entry_points(standin, ctx, row):
    call, entries, make = row
    want = "| `%s` | %s |" % (call, ", ".join("`%s`" % e for e in entries))
    assert any(ln.startswith(want) for ln in _doc_rows()), (
        "docs/testing.md has no row starting %r" % want
    )
    # an empty block cache: an array allocation then reaches the driver
    _driver._block_cache_trim(None, 0)
    fn = make()
    _driver._block_cache_trim(None, 0)
    result, trace = standin.trace(fn)
    it = iter(trace)
    assert all(e in it for e in entries), "%s called %s" % (call, trace)
    del result
    if call == "DeviceAllocation.free()":
        return  # a failed release is reported, not raised (a dealloc must not raise)
    # and fail(name) reaches it: the call raises the injected error
    fn = make()
    _driver._block_cache_trim(None, 0)
    # CUDA_ERROR_INVALID_VALUE; for the arrays' cuMemAllocAsync an
    # out-of-memory (a LogicError from it falls back to cuMemAlloc)
    standin.fail(entries[-1], 1, 2 if entries[-1] == "cuMemAllocAsync" else 1)
    try:
        with pytest.raises(cuda.Error) as e:
            fn()
    finally:
        standin.cancel()
        while cuda.Context.get_current() not in (None, ctx):
            cuda.Context.pop()
    # its .routine names the entry point (the memsets' say cuMemset)
    assert e.value.routine and entries[-1].startswith(e.value.routine), (call, e.value)
