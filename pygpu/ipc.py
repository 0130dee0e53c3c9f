"""Sharing device memory and events between processes.

The handles here pickle, so ``multiprocessing`` (with the ``spawn`` start
method) and ``concurrent.futures.ProcessPoolExecutor`` pass them to a child
like any other argument:

* legacy IPC (PyCUDA's names, in :mod:`pygpu.driver`):
  ``mem_get_ipc_handle(alloc)`` gives 64 bytes (a ``bytearray``) that
  ``IPCMemoryHandle(handle)`` opens in another process;
  ``Event(flags=INTERPROCESS | DISABLE_TIMING).ipc_handle()`` and
  ``Event.from_ipc_handle(h)`` do the same for events;
* memory pools: :func:`export_pool` gives a :class:`PoolHandle` (a POSIX
  file descriptor) that :func:`import_pool` opens; ``pool.export_pointer(a)``
  names one allocation (64 bytes) for ``imported.import_pointer(data)``;
* virtual memory: :func:`export_buffer` gives a :class:`BufferHandle` (one
  file descriptor per physical chunk of a ``VirtualBuffer(shareable=True)``)
  that :func:`import_buffer` maps in another process.

A file descriptor pickles through ``multiprocessing.reduction``: while a
``spawn`` child is being started it is inherited by that child; otherwise
(a ``multiprocessing`` queue or pipe, a ``concurrent.futures`` pool) it is
handed over through a UNIX socket (``SCM_RIGHTS``) by multiprocessing's
resource sharer.  Pickling a :class:`SharedFd` for anything but a process
of this machine started by ``multiprocessing`` is not supported.
"""

from typing import Any
import os

from pygpu import _driver

__all__ = [
    "SharedFd",
    "PoolHandle",
    "BufferHandle",
    "export_pool",
    "import_pool",
    "export_buffer",
    "import_buffer",
]


def _rebuild_fd(dup: Any) -> "SharedFd":
    return SharedFd(dup.detach())


class SharedFd:
    """A POSIX file descriptor this object owns (closed by :meth:`close` or
    when it is collected) and that pickles to another process of this
    machine through ``multiprocessing.reduction``."""

    def __init__(self, fd: int) -> None:
        self._fd = -1
        if not isinstance(fd, int) or isinstance(fd, bool):
            raise TypeError("SharedFd(): fd must be an int, not %s" % type(fd).__name__)
        if fd < 0:
            raise ValueError("SharedFd(): %d is not a file descriptor" % fd)
        self._fd = fd

    def fileno(self) -> int:
        if self._fd < 0:
            raise ValueError("the SharedFd was closed")
        return self._fd

    @property
    def closed(self) -> bool:
        return self._fd < 0

    def close(self) -> None:
        """Close the descriptor (idempotent)."""
        fd, self._fd = self._fd, -1
        if fd >= 0:
            os.close(fd)

    def __del__(self) -> None:
        try:
            self.close()
        except OSError:
            pass

    def __reduce__(self) -> Any:
        from multiprocessing import reduction

        return _rebuild_fd, (reduction.DupFd(self.fileno()),)

    def __repr__(self) -> str:
        return "<pygpu.ipc.SharedFd %s>" % ("closed" if self._fd < 0 else self._fd)


class PoolHandle:
    """A :class:`pygpu.driver.MemoryPool` exported for another process
    (:func:`export_pool`); pickles; ``open()`` (or :func:`import_pool`)
    imports it there."""

    def __init__(self, fd: "SharedFd", device: int) -> None:
        self.fd = fd if isinstance(fd, SharedFd) else SharedFd(fd)
        self.device = device

    def open(self) -> "_driver.MemoryPool":
        return import_pool(self)

    def close(self) -> None:
        self.fd.close()

    def __repr__(self) -> str:
        return "<pygpu.ipc.PoolHandle of a pool on device %d>" % self.device


class BufferHandle:
    """A :class:`pygpu.driver.VirtualBuffer` exported for another process
    (:func:`export_buffer`): one file descriptor per physical chunk and the
    buffer's size; pickles; ``open()`` (or :func:`import_buffer`) maps it
    there."""

    def __init__(self, chunks: Any, nbytes: int, device: int) -> None:
        self.chunks = [
            (fd if isinstance(fd, SharedFd) else SharedFd(fd), int(size)) for fd, size in chunks
        ]
        self.nbytes = nbytes
        self.device = device

    def open(self) -> "_driver.VirtualBuffer":
        return import_buffer(self)

    def close(self) -> None:
        for fd, _ in self.chunks:
            fd.close()

    def __repr__(self) -> str:
        return "<pygpu.ipc.BufferHandle of %d bytes in %d chunk%s>" % (
            self.nbytes,
            len(self.chunks),
            "" if len(self.chunks) == 1 else "s",
        )


def _check(obj: object, tp: type, what: str) -> None:
    if not isinstance(obj, tp):
        raise TypeError("%s takes a %s, not %s" % (what, tp.__name__, type(obj).__name__))


def export_pool(pool: "_driver.MemoryPool") -> "PoolHandle":
    """A :class:`PoolHandle` for ``pool`` (a ``MemoryPool(ipc=True)``)."""
    _check(pool, _driver.MemoryPool, "export_pool()")
    return PoolHandle(SharedFd(pool._export_fd()), pool.device)


def import_pool(handle: "PoolHandle") -> "_driver.MemoryPool":
    """The pool of another process, from its :class:`PoolHandle`, in the
    current context.  It cannot allocate; ``import_pointer(data)`` gives the
    exporter's allocations (free them before the exporter does)."""
    _check(handle, PoolHandle, "import_pool()")
    return _driver.MemoryPool._import_fd(handle.fd.fileno())


def export_buffer(buf: "_driver.VirtualBuffer") -> "BufferHandle":
    """A :class:`BufferHandle` for ``buf`` (a ``VirtualBuffer(shareable=True)``).
    Chunks added by a later ``grow()`` are not in it: export again."""
    _check(buf, _driver.VirtualBuffer, "export_buffer()")
    chunks = buf._export_fds()
    return BufferHandle(chunks, buf.size, buf.device)


def import_buffer(handle: "BufferHandle") -> "_driver.VirtualBuffer":
    """Map another process's :class:`pygpu.driver.VirtualBuffer` (from its
    :class:`BufferHandle`) in the current context: the same memory."""
    _check(handle, BufferHandle, "import_buffer()")
    return _driver.VirtualBuffer._import_fds(
        [(fd.fileno(), size) for fd, size in handle.chunks], handle.nbytes
    )
