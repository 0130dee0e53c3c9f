"""What the failure-injection walks share (tests/standin/test_standin.py,
tests/multi/test_multi.py): the driver calls whose failure may be swallowed,
the error codes each injected call is made to fail with, dropping a result."""

import gc

UNKNOWN = 999  # CUDA_ERROR_UNKNOWN: never produced by the stand-in itself
OOM = 2

RELEASES = {
    "cuMemFree",
    "cuMemFreeAsync",
    "cuMemFreeHost",
    "cuMemHostUnregister",
    "cuModuleUnload",
    "cuStreamDestroy",
    "cuEventDestroy",
    "cuCtxDestroy",
    "cuDevicePrimaryCtxRelease",
}
# calls whose failure may be swallowed (they run in dealloc or are probes)
TOLERATED = RELEASES | {
    "cuCtxGetCurrent",
    "cuCtxPushCurrent",
    "cuCtxPopCurrent",
    "cuCtxSetCurrent",
    "cuPointerGetAttribute",
}


def drop(op):
    r = op()
    del r
    gc.collect()


def codes(name):
    if name in (
        "cuMemAlloc",
        "cuMemAllocAsync",
        "cuMemAllocManaged",
        "cuMemAllocPitch",
        "cuMemHostAlloc",
    ):
        return (UNKNOWN, OOM)
    return (UNKNOWN,)
