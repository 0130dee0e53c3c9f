"""What the spawned children of tests/multi/test_multi.py run (a module of its own:
a spawn child imports it by name, without the test module's imports)."""

import os

import numpy as np


def read_shared_fd(sfd, n):
    """The first n bytes of the file behind a pygpu.ipc.SharedFd."""
    data = os.pread(sfd.fileno(), n, 0)
    sfd.close()
    return data


def values(seed, n):
    return np.random.default_rng(seed).standard_normal(n)


def pool_child(handle, ptr_data, n, seed):
    """Import the pool and the pointer, read what the parent wrote, write
    values(seed) for the parent to read; returns what was read."""
    import pygpu.driver as cuda
    from pygpu import ipc

    pool = ipc.import_pool(handle)
    a = pool.import_pointer(ptr_data)
    got = np.empty(n)
    cuda.memcpy_dtoh(got, a)
    cuda.memcpy_htod(a, values(seed, n))
    cuda.Context.synchronize()
    size = a.size
    a.free()
    del pool
    handle.close()
    return got, size


def buffer_child(handle, n, seed):
    """Map the parent's VirtualBuffer, read it, write values(seed)."""
    import pygpu.driver as cuda
    from pygpu import ipc

    buf = ipc.import_buffer(handle)
    handle.close()
    got = np.empty(n)
    cuda.memcpy_dtoh(got, buf)
    cuda.memcpy_htod(buf, values(seed, n))
    cuda.Context.synchronize()
    size = buf.size
    buf.free()
    return got, size


def open_ipc_memory(handle):
    """(exception class name, message) of opening a legacy IPC handle, or
    ('ok', size)."""
    import pygpu.driver as cuda

    try:
        m = cuda.IPCMemoryHandle(handle)
    except Exception as e:  # reported to the parent, which checks it
        return type(e).__name__, str(e)
    size = m.size
    m.close()
    return "ok", size


def open_ipc_event(handle):
    import pygpu.driver as cuda

    e = cuda.Event.from_ipc_handle(handle)
    e.synchronize()
    return e.query()


KERNEL = r"""
extern "C" __global__ void affine(double *out, const double *in, double a, double b, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = a * in[i] + b;
}
"""


def gpu_ipc_writer(mem_handle, event_handle, n, seed, conn):
    """On a GPU: open the parent's memory and event, write 2 * values(seed)
    + 1 there with a kernel on a stream (exact in float64, fused or not),
    record the event after it, tell the parent, and stay alive until the
    parent has read."""
    import pygpu.autoinit  # noqa: F401
    import pygpu.driver as cuda
    from pygpu.compiler import SourceModule

    try:
        mem = cuda.IPCMemoryHandle(mem_handle)
        ev = cuda.Event.from_ipc_handle(event_handle)
        f = SourceModule(KERNEL).get_function("affine")
        src = cuda.to_device(values(seed, n))
        s = cuda.Stream()
        f(mem, src, 2.0, 1.0, np.int32(n), block=(256, 1, 1), grid=((n + 255) // 256, 1), stream=s)
        ev.record(s)
        conn.send(("recorded", mem.size))
        conn.recv()  # the parent has read
        s.synchronize()
        mem.close()
    except Exception as e:
        conn.send(("error", "%s: %s" % (type(e).__name__, e)))
    conn.close()
