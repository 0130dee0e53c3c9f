"""Inner products whose result reaches the host without blocking the GPU
(PyCUDA's pycuda.sparse.inner)."""

from typing import Any
import atexit

import pygpu.driver as drv
import pygpu.gpuarray as gpuarray

__all__ = ["AsyncInnerProduct", "get_stream", "STREAM_POOL"]

STREAM_POOL: list[Any] = []


def get_stream():
    """A stream from the pool (returned to it when a copy finishes)."""
    if STREAM_POOL:
        return STREAM_POOL.pop()
    return drv.Stream()


class AsyncInnerProduct:
    """``dot(a, b)`` enqueued now; ``get_host_result()`` polls: None until
    the value is on the host (it starts the copy once the product is done),
    then the value (a 0-d host array)."""

    def __init__(self, a, b, pagelocked_allocator):
        self.gpu_result = gpuarray.dot(a, b)
        self.gpu_finished_evt = drv.Event()
        self.gpu_finished_evt.record()
        self.gpu_finished = False
        self.pagelocked_allocator = pagelocked_allocator

    def get_host_result(self):
        if not self.gpu_finished:
            if self.gpu_finished_evt.query():
                self.gpu_finished = True
                self.copy_stream = get_stream()
                self.host_dest = self.pagelocked_allocator(
                    self.gpu_result.shape, self.gpu_result.dtype
                )
                drv.memcpy_dtoh_async(self.host_dest, self.gpu_result.gpudata, self.copy_stream)
                self.copy_finished_evt = drv.Event()
                self.copy_finished_evt.record(self.copy_stream)
            return None
        if self.copy_finished_evt.query():
            if self.copy_stream is not None:
                STREAM_POOL.append(self.copy_stream)
                self.copy_stream = None
            return self.host_dest
        return None


def _at_exit():
    STREAM_POOL[:] = []


atexit.register(_at_exit)
