"""Collectives across GPUs through NVIDIA's NCCL, with nccl4py (an optional
dependency: the ``nccl`` extra, ``pip install "pygpu[nccl]"``).

nccl4py takes pygpu's objects as they are: a ``GPUArray`` is a buffer through
DLPack (``__dlpack__``/``__dlpack_device__``; its device pointer, shape and
dtype, nothing copied) and a pygpu ``Stream`` a stream through
``__cuda_stream__``.  So nccl4py can be used directly::

    import nccl.core as nccl
    comm.allreduce(a_gpu, b_gpu, nccl.SUM, stream=s)

This module wraps such a communicator for what direct use leaves to the
caller:

- NCCL works in the CUDA runtime's context of a device, its *primary*
  context.  A :class:`Communicator` holds that context (pygpu.autoinit and
  ``Device.retain_primary_context()`` give the same one) and makes it current
  around each call, so several GPUs in one process work from one thread;
  making a communicator while another context is current is an error.
- Buffers are checked before NCCL sees them: nccl4py counts the elements of
  a buffer from its shape alone, so a strided view would be sent as if it
  were contiguous.  A non-contiguous array is a ``ValueError``.
- Reductions default to a sum and run in place when no output is given;
  complex arrays are summed (and averaged) as pairs of reals; broadcast,
  send/recv and all-gather move any dtype, as bytes where NCCL has no type
  for it.
- One process per GPU: :func:`unique_id` on one rank, handed to the others
  (it pickles: a queue, a pipe, ``mpi4py``'s ``bcast``), then
  :meth:`Communicator.init`; :func:`from_mpi` does both over an mpi4py
  communicator; :func:`spawn` starts one process per GPU and runs a function
  in each.  Several GPUs in one process: :meth:`Communicator.init_all`, and
  :func:`group` around the calls that go together.

Calls queue work on ``stream`` (a pygpu ``Stream``, anything with
``__cuda_stream__``, or a handle), else on the communicator's stream, else on
the device's legacy default stream, where pygpu's own array operations run,
so they are ordered after the kernels that wrote the buffers.  Calls return
at once: :meth:`Communicator.synchronize` (or the stream's) waits.
"""

from typing import Any
import contextlib

import numpy as np

__all__ = ["Communicator", "group", "unique_id", "from_mpi", "spawn", "available", "OPS"]

# NCCL's reduction operators, by the names this module takes
OPS = ("sum", "prod", "max", "min", "avg")
# DLPack device types NCCL can read: CUDA, CUDA host (pinned), CUDA managed
_DL_DEVICE = (2, 3, 13)


def _nccl():
    try:
        import nccl.core as nccl
    except ImportError as e:
        raise ImportError(
            "pygpu.nccl needs NVIDIA's nccl4py and an NCCL library: pip "
            "install 'pygpu[nccl]' (nccl4py with nvidia-nccl-cu13)"
        ) from e
    return nccl


def available() -> bool:
    """Whether nccl4py imports (the NCCL library itself loads at the first
    call that needs it)."""
    try:
        _nccl()
    except ImportError:
        return False
    return True


def unique_id():
    """A new NCCL unique id (nccl4py's ``UniqueId``, picklable) for
    :meth:`Communicator.init`: made on one rank, handed to every other."""
    return _nccl().get_unique_id()


def _op(nccl, op):
    if isinstance(op, str):
        name = op.lower()
        if name not in OPS:
            raise ValueError(
                "op must be one of %s (or an nccl4py operator), not %r" % (", ".join(OPS), op)
            )
        return getattr(nccl.NcclRedOp, name.upper()), name
    # an nccl4py NcclRedOp (or CustomRedOp): passed as it is
    name = getattr(op, "name", "")
    return op, name.lower() if isinstance(name, str) else ""


def _cai(buf, what):
    cai = getattr(buf, "__cuda_array_interface__", None)
    if cai is None:
        dev = getattr(buf, "__dlpack_device__", None)
        if dev is not None and hasattr(buf, "__dlpack__"):
            if int(dev()[0]) not in _DL_DEVICE:
                raise TypeError(
                    "pygpu.nccl: %s is in host memory (%s); NCCL takes device "
                    "arrays: copy it to the GPU first (gpuarray.to_gpu)"
                    % (what, type(buf).__name__)
                )
            return None
        raise TypeError(
            "%s must be a device array (a GPUArray, or anything with "
            "__cuda_array_interface__ or __dlpack__), not %s" % (what, type(buf).__name__)
        )
    return cai


def contiguous(buf, what="buffer"):
    """Check that `buf` (anything with ``__cuda_array_interface__``) is C- or
    Fortran-contiguous; returns (shape, dtype).  nccl4py would read a
    strided view as contiguous memory of the same element count."""
    cai = _cai(buf, what)
    if cai is None:
        return None, None
    dtype = (
        np.dtype(cai["typestr"])
        if not cai.get("descr") or len(cai["descr"]) == 1
        else np.dtype(cai["descr"])
    )
    shape = tuple(int(n) for n in cai["shape"])
    strides = cai.get("strides")
    if strides is not None and int(np.prod(shape)) > 1:
        dims = [(n, s) for n, s in zip(shape, strides) if n > 1]

        def packed(order):
            step = dtype.itemsize
            for n, s in reversed(order):
                if s != step:
                    return False
                step *= n
            return True

        if not (packed(dims) or packed(dims[::-1])):
            raise ValueError(
                "pygpu.nccl: %s is not contiguous (shape %s, strides %s); NCCL "
                "takes contiguous buffers: copy it first (.copy())" % (what, shape, tuple(strides))
            )
    return shape, dtype


def _reduce_view(buf, dtype, opname, what):
    """The buffer NCCL reduces: complex as pairs of reals for sum and avg."""
    if dtype is None or dtype.kind != "c":
        return buf
    if opname not in ("sum", "avg"):
        raise TypeError(
            "pygpu.nccl: %s is complex (%s): NCCL reduces it only with sum or "
            "avg (as pairs of reals), not %s" % (what, dtype, opname or "this op")
        )
    return _retype(buf, np.dtype("f%d" % (dtype.itemsize // 2)), what)


def _retype(buf, dtype, what):
    view = getattr(buf, "view", None)
    if view is None:
        raise TypeError(
            "pygpu.nccl: %s of dtype %s needs a view as %s, which %s cannot give"
            % (what, _cai(buf, what)["typestr"], dtype, type(buf).__name__)
        )
    shape = tuple(getattr(buf, "shape", ()))
    if len(shape) == 0:
        buf = buf.reshape(1)
    elif getattr(getattr(buf, "flags", None), "c_contiguous", True) is False:
        buf = buf.T  # Fortran order: its transpose is C order
    return buf.view(dtype)


def _move_view(nccl, buf, dtype, what):
    """The buffer NCCL moves (broadcast, send, recv, all-gather): as it is
    where NCCL has its type, else as bytes."""
    if dtype is None:
        return buf
    try:
        nccl.NcclDataType.from_numpy_dtype(dtype)
        return buf
    except (TypeError, ValueError, KeyError, getattr(nccl, "NcclInvalid", ValueError)):
        return _retype(buf, np.dtype(np.uint8), what)


class Communicator:
    """An NCCL communicator of one rank, bound to its device's primary
    context.  Make one with :meth:`init` (one process per GPU) or
    :meth:`init_all` (several GPUs in one process), or wrap an nccl4py
    ``Communicator`` with ``Communicator(comm, context)``.

    ``nccl`` is the nccl4py communicator (everything this class does not
    cover), ``context`` the pygpu primary context, ``stream`` the default
    stream of its calls (None: the legacy default stream)."""

    def __init__(self, comm, context, stream=None):
        if not context.is_primary:
            raise ValueError(
                "pygpu.nccl: the context must be its device's primary context "
                "(NCCL runs in the CUDA runtime's context of a device); use "
                "Device(n).retain_primary_context() or pygpu.autoinit"
            )
        self.nccl = comm
        self.context = context
        self.stream = stream

    # ---- making communicators ----

    @classmethod
    def init(cls, nranks, rank, uid, device=None, stream=None):
        """This process's rank of `nranks` (a collective call: every rank
        makes its own with the same `uid` from :func:`unique_id`).  `device`
        is an ordinal or a pygpu Device; None takes the current context's
        device, which must then be its primary context."""
        nccl = _nccl()
        ctx = _primary(device)
        with _current(ctx):
            comm = nccl.Communicator.init(int(nranks), int(rank), uid)
        return cls(comm, ctx, stream)

    @classmethod
    def init_all(cls, devices: "object" = None) -> "list[Communicator]":
        """One communicator per device, all in this process (NCCL's
        ``ncclCommInitAll``): rank i on ``devices[i]`` (ordinals; None: every
        device)."""
        nccl = _nccl()
        from pygpu import driver

        driver.init()
        if devices is None:
            devices = list(range(driver.Device.count()))
        devices = [int(d) for d in devices]
        if not devices:
            raise ValueError("pygpu.nccl: init_all() needs at least one device")
        ctxs = [_primary(d) for d in devices]
        with _current(ctxs[0]):
            comms = nccl.Communicator.init_all(devices)
        return [cls(c, ctx) for c, ctx in zip(comms, ctxs)]

    # ---- what it is ----

    @property
    def rank(self):
        return self.nccl.rank

    @property
    def nranks(self):
        return self.nccl.nranks

    @property
    def device(self):
        """The device's ordinal."""
        return self.context.device.ordinal

    def __repr__(self):
        return "<pygpu.nccl.Communicator rank %d of %d on device %d>" % (
            self.rank,
            self.nranks,
            self.device,
        )

    def _stream(self, stream):
        return self.stream if stream is None else stream

    # ---- collectives ----

    def allreduce(self, sendbuf, recvbuf=None, op="sum", stream=None):
        """Reduce `sendbuf` over every rank into every rank's `recvbuf`
        (None: in place, into `sendbuf`)."""
        nccl = _nccl()
        nop, name = _op(nccl, op)
        _, dtype = contiguous(sendbuf, "sendbuf")
        if recvbuf is None:
            recvbuf = sendbuf
        else:
            contiguous(recvbuf, "recvbuf")
        s = _reduce_view(sendbuf, dtype, name, "sendbuf")
        r = s if recvbuf is sendbuf else _reduce_view(recvbuf, dtype, name, "recvbuf")
        with _current(self.context):
            self.nccl.allreduce(s, r, nop, stream=self._stream(stream))
        return recvbuf

    def reduce(self, sendbuf, recvbuf=None, op="sum", root=0, stream=None):
        """Reduce `sendbuf` over every rank into `recvbuf` on `root` (None:
        in place)."""
        nccl = _nccl()
        nop, name = _op(nccl, op)
        _, dtype = contiguous(sendbuf, "sendbuf")
        if recvbuf is None:
            recvbuf = sendbuf
        elif self.rank == root:
            contiguous(recvbuf, "recvbuf")
        s = _reduce_view(sendbuf, dtype, name, "sendbuf")
        r = (
            s
            if recvbuf is sendbuf
            else (_reduce_view(recvbuf, dtype, name, "recvbuf") if self.rank == root else recvbuf)
        )
        with _current(self.context):
            self.nccl.reduce(s, r, nop, root=int(root), stream=self._stream(stream))
        return recvbuf

    def broadcast(self, buf, root=0, recvbuf=None, stream=None):
        """Copy `buf` on `root` to every rank's `recvbuf` (None: in place,
        into `buf` on each rank)."""
        nccl = _nccl()
        _, dtype = contiguous(buf, "buf")
        if recvbuf is None:
            recvbuf = buf
        else:
            contiguous(recvbuf, "recvbuf")
        s = _move_view(nccl, buf, dtype, "buf")
        r = s if recvbuf is buf else _move_view(nccl, recvbuf, dtype, "recvbuf")
        with _current(self.context):
            self.nccl.broadcast(s, r, int(root), stream=self._stream(stream))
        return recvbuf

    def allgather(self, sendbuf, recvbuf, stream=None):
        """Every rank's `sendbuf`, in rank order, into every rank's `recvbuf`
        (nranks times the size)."""
        nccl = _nccl()
        _, dtype = contiguous(sendbuf, "sendbuf")
        contiguous(recvbuf, "recvbuf")
        with _current(self.context):
            self.nccl.allgather(
                _move_view(nccl, sendbuf, dtype, "sendbuf"),
                _move_view(nccl, recvbuf, dtype, "recvbuf"),
                stream=self._stream(stream),
            )
        return recvbuf

    def reduce_scatter(self, sendbuf, recvbuf, op="sum", stream=None):
        """Reduce `sendbuf` over every rank; rank i gets the i-th of nranks
        equal parts in `recvbuf`."""
        nccl = _nccl()
        nop, name = _op(nccl, op)
        _, dtype = contiguous(sendbuf, "sendbuf")
        contiguous(recvbuf, "recvbuf")
        with _current(self.context):
            self.nccl.reduce_scatter(
                _reduce_view(sendbuf, dtype, name, "sendbuf"),
                _reduce_view(recvbuf, dtype, name, "recvbuf"),
                nop,
                stream=self._stream(stream),
            )
        return recvbuf

    def send(self, buf, peer, stream=None):
        """Send `buf` to rank `peer` (which calls :meth:`recv`)."""
        nccl = _nccl()
        _, dtype = contiguous(buf, "buf")
        with _current(self.context):
            self.nccl.send(
                _move_view(nccl, buf, dtype, "buf"), int(peer), stream=self._stream(stream)
            )

    def recv(self, buf, peer, stream=None):
        """Receive into `buf` from rank `peer` (which calls :meth:`send`)."""
        nccl = _nccl()
        _, dtype = contiguous(buf, "buf")
        with _current(self.context):
            self.nccl.recv(
                _move_view(nccl, buf, dtype, "buf"), int(peer), stream=self._stream(stream)
            )
        return buf

    # ---- the rest ----

    def synchronize(self) -> None:
        """Wait for this communicator's stream (the context, where it has
        none)."""
        with _current(self.context):
            if self.stream is None:
                self.context.synchronize()
            elif hasattr(self.stream, "synchronize"):
                self.stream.synchronize()
            else:
                from pygpu import driver

                driver.Stream.from_handle(int(self.stream)).synchronize()

    def destroy(self) -> None:
        """Free the communicator (NCCL's ``ncclCommDestroy``; after the work
        queued on it is done)."""
        if self.nccl is not None:
            with _current(self.context):
                self.nccl.destroy()
            self.nccl = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.destroy()
        return False


def _primary(device):
    """The primary context of `device` (ordinal, Device, or None: the
    current context's device, which must be primary)."""
    from pygpu import driver

    driver.init()
    if device is None:
        cur = driver.Context.get_current()
        if cur is None:
            raise ValueError(
                "pygpu.nccl: no context is current; give device= (an ordinal) "
                "or make one current (pygpu.autoinit)"
            )
        if not cur.is_primary:
            raise ValueError(
                "pygpu.nccl: the current context is not its device's primary "
                "context, and NCCL runs in the primary context; make the primary "
                "context current (Device(n).retain_primary_context().push() or "
                "pygpu.autoinit), or give device="
            )
        return cur
    if not isinstance(device, driver.Device):
        device = driver.Device(int(device))
    return device.retain_primary_context()


@contextlib.contextmanager
def _current(ctx):
    """`ctx` current for the block (pushed only where another is current);
    afterwards the thread's current context is what it was before, also
    where NCCL's own cudaSetDevice replaced it."""
    from pygpu import driver

    before = driver.Context.get_current()
    pushed = before is None or before.handle != ctx.handle
    if pushed:
        ctx.push()
    try:
        yield
    finally:
        now = driver.Context.get_current()
        if pushed:
            driver.Context.pop()
        elif now is not None and now.handle != before.handle:
            driver.Context.pop()
            before.push()


@contextlib.contextmanager
def group(comms=None):
    """Calls of several communicators (several GPUs in this process, or
    several calls of one) issued as one NCCL group (``ncclGroupStart`` /
    ``ncclGroupEnd``): needed where one thread drives more than one rank.
    `comms`: the communicators, whose first context is current while the
    group is launched."""
    nccl = _nccl()
    comms = list(comms or [])
    from pygpu import driver

    ctx = comms[0].context if comms else driver.Context.get_current()
    cm = _current(ctx) if ctx is not None else contextlib.nullcontext()
    with cm:
        nccl.group_start()
        ok = False
        try:
            yield
            ok = True
        finally:
            if ok:
                nccl.group_end()
            else:
                try:
                    nccl.group_end()
                except Exception:
                    pass


def from_mpi(comm, device=None, stream=None):
    """A :class:`Communicator` with the same ranks as the mpi4py
    communicator `comm`: rank 0 makes the unique id and broadcasts it over
    MPI.  `device` defaults to the rank's position among the ranks of its
    node, modulo the devices it sees."""
    from pygpu import driver

    uid = unique_id() if comm.Get_rank() == 0 else None
    uid = comm.bcast(uid, root=0)
    if device is None:
        driver.init()
        try:
            from mpi4py import MPI

            local = comm.Split_type(MPI.COMM_TYPE_SHARED)
            lrank = local.Get_rank()
            local.Free()
        except (ImportError, AttributeError):
            lrank = comm.Get_rank()
        device = lrank % driver.Device.count()
    return Communicator.init(comm.Get_size(), comm.Get_rank(), uid, device=device, stream=stream)


def _child(fn, rank, nranks, uid, device, args, queue):
    import traceback

    try:
        with Communicator.init(nranks, rank, uid, device=device) as comm:
            comm.context.push()
            try:
                result = fn(comm, *args)
                comm.synchronize()
            finally:
                from pygpu import driver

                driver.Context.pop()
        queue.put((rank, True, result))
    except BaseException as e:
        queue.put((rank, False, "%s: %s\n%s" % (type(e).__name__, e, traceback.format_exc())))


def spawn(
    fn: "object",
    nranks: "int | None" = None,
    args: "tuple[object, ...]" = (),
    devices: "object" = None,
    timeout: float = 600,
) -> "list[Any]":
    """Run ``fn(comm, *args)`` in `nranks` new processes (multiprocessing's
    'spawn'), one per GPU, each with its rank's :class:`Communicator` (its
    context current); returns their results in rank order.  `fn` must be
    importable by the children (a module-level function).  A rank that
    raises, dies or outlasts `timeout` seconds stops them all with a
    RuntimeError naming it."""
    import multiprocessing as mp
    import queue as _queue
    import time
    from pygpu import driver

    if nranks is None:
        driver.init()
        nranks = driver.Device.count()
    nranks = int(nranks)
    if nranks < 1:
        raise ValueError("pygpu.nccl.spawn: nranks must be at least 1, not %d" % nranks)
    devices = list(range(nranks)) if devices is None else [int(d) for d in devices]
    if len(devices) != nranks:
        raise ValueError("pygpu.nccl.spawn: %d devices for %d ranks" % (len(devices), nranks))
    uid = unique_id()
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    procs = [
        ctx.Process(
            target=_child, args=(fn, r, nranks, uid, devices[r], tuple(args), q), daemon=True
        )
        for r in range(nranks)
    ]
    for p in procs:
        p.start()
    results, errors = {}, []
    deadline = time.monotonic() + timeout
    try:
        while len(results) + len(errors) < nranks:
            try:
                rank, ok, value = q.get(timeout=1.0)
            except _queue.Empty:
                dead = [
                    r
                    for r, p in enumerate(procs)
                    if p.exitcode not in (None, 0) and r not in results
                ]
                if dead:
                    errors.append(
                        "rank %d died (exit status %s)" % (dead[0], procs[dead[0]].exitcode)
                    )
                    break
                if time.monotonic() > deadline:
                    errors.append(
                        "ranks %s did not finish in %s s"
                        % (sorted(set(range(nranks)) - set(results)), timeout)
                    )
                    break
                continue
            if ok:
                results[rank] = value
            else:
                errors.append("rank %d: %s" % (rank, value))
                break
    finally:
        for p in procs:
            p.join(timeout=30 if not errors else 0.1)
            if p.is_alive():
                p.kill()
                p.join()
    if errors:
        raise RuntimeError("pygpu.nccl.spawn: " + errors[0])
    return [results[r] for r in range(nranks)]
