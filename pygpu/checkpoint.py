"""Checkpoint and restore a CUDA process's GPU state (CUDA 12.8 drivers).

A process is named by its pid; another process (a supervisor, a checkpoint
tool such as CRIU's CUDA plugin) moves it through the driver's states::

    RUNNING --lock()--> LOCKED --checkpoint()--> CHECKPOINTED
    CHECKPOINTED --restore()--> LOCKED --unlock()--> RUNNING

While CHECKPOINTED the process's device memory lives in host memory and its
GPU is free for others; restore() puts it back (on the same GPUs, or others
of the same kind: ``gpu_map``) and the process goes on where it stopped::

    from pygpu import checkpoint
    with checkpoint.suspended(pid):     # lock + checkpoint, then restore + unlock
        ...                             # the GPU's memory is free here

Refusals are clear: a driver without the entry points raises
:class:`pygpu.driver.LogicError` naming what is missing; a pid that is no
process, or this process itself, is a :class:`ValueError`; a process the
driver does not know as a CUDA process is :class:`NotACudaProcessError`; a
call out of turn is the driver's ``CUDA_ERROR_ILLEGAL_STATE``
(docs/checkpoint.md).
"""

from typing import Any, Literal
import enum
import os
import uuid as _uuid

from pygpu import _driver

__all__ = [
    "ProcessState",
    "NotACudaProcessError",
    "state",
    "restore_thread_id",
    "lock",
    "checkpoint",
    "restore",
    "unlock",
    "suspend",
    "resume",
    "suspended",
]


class ProcessState(enum.IntEnum):
    """A CUDA process's checkpoint state (CUprocessState)."""

    RUNNING = 0
    LOCKED = 1
    CHECKPOINTED = 2
    FAILED = 3

    def __str__(self) -> str:
        return self.name


class NotACudaProcessError(ValueError):
    """The pid is a live process the driver does not know as a CUDA process
    (it never initialised CUDA, or it is another user's)."""

    def __init__(self, pid: int, cause: object) -> None:
        self.pid = pid
        super().__init__(
            "process %d is not a CUDA process the driver can checkpoint (%s)" % (pid, cause)
        )


def _pid(pid: int, what: str, self_ok: bool = False) -> int:
    if isinstance(pid, bool) or not isinstance(pid, int):
        raise TypeError("checkpoint.%s(): pid must be an int, not %s" % (what, type(pid).__name__))
    if pid <= 0:
        raise ValueError("checkpoint.%s(): pid must be positive, not %d" % (what, pid))
    if not self_ok and pid == os.getpid():
        raise ValueError(
            "checkpoint.%s(): a process cannot %s itself: call it from another process "
            "(a supervisor, or a parent on its child)" % (what, what)
        )
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        raise ValueError("checkpoint.%s(): no process has pid %d" % (what, pid)) from None
    except PermissionError:
        pass  # it exists; the driver decides
    return pid


def _known(pid: int) -> "ProcessState":
    """The process's state, or NotACudaProcessError where the driver does not
    know it (its other errors pass through)."""
    try:
        return ProcessState(_driver._checkpoint_state(pid))
    except _driver.Error as e:
        if e.name in ("CUDA_ERROR_INVALID_VALUE", "CUDA_ERROR_NOT_FOUND"):
            raise NotACudaProcessError(pid, e) from e
        raise


def state(pid: int) -> "ProcessState":
    """The process's :class:`ProcessState` (cuCheckpointProcessGetState)."""
    return _known(_pid(pid, "state", self_ok=True))


def restore_thread_id(pid: int) -> int:
    """The id of the process's thread that restore() runs on
    (cuCheckpointProcessGetRestoreThreadId)."""
    _known(_pid(pid, "restore_thread_id", self_ok=True))
    return _driver._checkpoint_restore_thread_id(pid)


def lock(pid: int, timeout: "float | None" = None) -> None:
    """Lock a RUNNING process: its CUDA calls block until unlock().  Waits
    for its work in flight; ``timeout`` in seconds (None: no limit), past which
    the driver gives up and the process stays RUNNING."""
    if timeout is None:
        ms = 0
    else:
        if timeout <= 0:
            raise ValueError("checkpoint.lock(): timeout must be positive, not %r" % (timeout,))
        ms = max(1, int(round(timeout * 1000)))
    _known(_pid(pid, "lock"))
    _driver._checkpoint_lock(pid, ms)


def checkpoint(pid: int) -> None:
    """Move a LOCKED process's GPU memory to host memory and release its
    GPU resources: the process becomes CHECKPOINTED."""
    _known(_pid(pid, "checkpoint"))
    _driver._checkpoint_checkpoint(pid)


def _uuid_bytes(u: Any, what: str) -> bytes:
    if isinstance(u, _uuid.UUID):
        return u.bytes
    if isinstance(u, str):
        return _uuid.UUID(u[4:] if u.startswith("GPU-") else u).bytes
    uu = getattr(u, "uuid", None)  # a pygpu Device
    if isinstance(uu, _uuid.UUID):
        return uu.bytes
    raise TypeError(
        "checkpoint.restore(): gpu_map's %s must be a uuid.UUID, a 'GPU-...' string or a "
        "Device, not %s" % (what, type(u).__name__)
    )


def restore(pid: int, gpu_map: "dict[Any, Any] | None" = None) -> None:
    """Bring a CHECKPOINTED process back onto the GPU: it becomes LOCKED.
    ``gpu_map`` ({old GPU: new GPU}, each a uuid.UUID, a ``"GPU-..."`` UUID
    string or a Device) restores onto other GPUs of the same kind; it must
    name every GPU the process used."""
    _known(_pid(pid, "restore"))
    pairs = None
    if gpu_map:
        pairs = b"".join(
            _uuid_bytes(old, "key") + _uuid_bytes(new, "value") for old, new in gpu_map.items()
        )
    _driver._checkpoint_restore(pid, pairs)


def unlock(pid: int) -> None:
    """Let a LOCKED process make CUDA calls again: it becomes RUNNING."""
    _known(_pid(pid, "unlock"))
    _driver._checkpoint_unlock(pid)


def suspend(pid: int, timeout: "float | None" = None) -> None:
    """lock() then checkpoint(); unlocks again if the checkpoint fails."""
    lock(pid, timeout)
    try:
        checkpoint(pid)
    except BaseException:
        try:
            _driver._checkpoint_unlock(pid)
        except Exception:
            pass
        raise


def resume(pid: int, gpu_map: "dict[Any, Any] | None" = None) -> None:
    """restore() then unlock()."""
    restore(pid, gpu_map)
    unlock(pid)


class suspended:
    """``with checkpoint.suspended(pid):`` -- the process is CHECKPOINTED in
    the block (its GPU memory is free) and RUNNING again after it."""

    def __init__(
        self, pid: int, timeout: "float | None" = None, gpu_map: "dict[Any, Any] | None" = None
    ) -> None:
        self.pid, self.timeout, self.gpu_map = pid, timeout, gpu_map

    def __enter__(self) -> "suspended":
        suspend(self.pid, self.timeout)
        return self

    def __exit__(self, *exc: object) -> "Literal[False]":
        resume(self.pid, self.gpu_map)
        return False
