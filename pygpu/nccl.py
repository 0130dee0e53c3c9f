"""Collectives across GPUs through NVIDIA's NCCL (an optional dependency:
the ``nccl`` extra, ``pip install "pygpu[nccl]"``: nccl4py and the NCCL
library of ``nvidia-nccl-cu13``).

nccl4py does what it is good at -- finding the library, unique ids, making
communicators -- and each collective goes from pygpu's C extension straight
to NCCL's C entry point (``ncclAllReduce``, ...; the library nccl4py loaded,
opened at first use), with pygpu's checks and no Python object made per
call:

- NCCL works in the CUDA runtime's context of a device, its *primary*
  context.  A :class:`Communicator` holds that context (pygpu.autoinit and
  ``Device.retain_primary_context()`` give the same one; another context is
  a ValueError).  No context needs to be current for a call: NCCL sets the
  communicator's device itself, and the thread's context is put back where
  NCCL's cudaSetDevice replaced it, so several GPUs in one process work from
  one thread.
- Every buffer passes the operand gate: a freed array is a LogicError, an
  array of another device's context a ValueError, a strided view a
  ValueError (NCCL reads contiguous memory); send and receive buffers must
  have one dtype and the sizes the collective needs; roots and peers must be
  ranks.  GPUArrays are proved in C; anything else with
  ``__cuda_array_interface__`` (CuPy, PyTorch, Numba) is resolved here, its
  memory's device checked.  The memory is held while NCCL may use it:
  inside a :func:`group`, until the group's end launches the calls (a
  temporary array given to a call stays alive until then).
- Reductions default to a sum and run in place when no output is given
  (all-gather and reduce-scatter need a receive buffer of their own);
  complex arrays are summed (and averaged) as pairs of reals; broadcast,
  send/recv and all-gather move any dtype, as bytes where NCCL has no type
  for it.
- One process per GPU: :func:`bootstrap` (MPI, or the environment that
  ``torchrun``, ``mpirun`` and ``srun`` set), or :func:`unique_id` on one
  rank handed to the others, then :meth:`Communicator.init`;
  :func:`from_mpi` over an mpi4py communicator; :func:`spawn` starts one
  process per GPU on this machine.  Several GPUs in one process:
  :meth:`Communicator.init_all`, and :func:`group` around the calls that go
  together.
- Inside pygpu's capture (``graphs.capture_graph``, ``Stream.begin_capture``)
  a collective is recorded into the graph like a kernel, and the graph keeps
  its arrays alive.

Calls queue work on ``stream`` (a pygpu ``Stream``, anything with
``__cuda_stream__``, or a handle), else on the communicator's stream, else on
the device's legacy default stream, where pygpu's own array operations run,
so they are ordered after the kernels that wrote the buffers.  Calls return
at once: :meth:`Communicator.synchronize` (or the stream's) waits.
"""

from typing import Any, Iterable, Mapping
import contextlib
import operator
import os

import numpy as np

from pygpu import _driver

__all__ = [
    "Communicator",
    "NcclError",
    "group",
    "unique_id",
    "from_mpi",
    "bootstrap",
    "launch_env",
    "exchange_id",
    "spawn",
    "available",
    "load",
    "OPS",
]

# NCCL's reduction operators, by the names this module takes (ncclRedOp_t's order)
OPS = ("sum", "prod", "max", "min", "avg")
NcclError = _driver.NcclError

# ncclDataType_t by NumPy (kind, itemsize), and by name for ml_dtypes' types
_TYPES = {
    ("i", 1): 0,
    ("u", 1): 1,
    ("b", 1): 1,
    ("i", 4): 2,
    ("u", 4): 3,
    ("i", 8): 4,
    ("u", 8): 5,
    ("f", 2): 6,
    ("f", 4): 7,
    ("f", 8): 8,
}
_NAMED_TYPES = {"bfloat16": 9, "float8_e4m3fn": 10, "float8_e5m2": 11}
_UINT8 = 1


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


def unique_id() -> Any:
    """A new NCCL unique id (nccl4py's ``UniqueId``, picklable) for
    :meth:`Communicator.init`: made on one rank, handed to every other."""
    return _nccl().get_unique_id()


def _candidates():
    """Where libnccl.so.2 is looked for, in order: the library nccl4py
    loaded (its communicators are the ones called), PYGPU_NCCL, NVIDIA's
    wheel (nvidia-nccl-cu13), the system loader's path."""
    out = []
    try:
        from nccl.bindings import nccl as nb

        nb.get_version()  # loads it
        path = nb.get_library_path()
        if path:
            out.append(str(path))
    except Exception:  # nccl4py absent, or it could not load its library
        pass
    env = os.environ.get("PYGPU_NCCL")
    if env:
        out.append(env)
    try:
        import nvidia.nccl as wheel

        for d in getattr(wheel, "__path__", ()):
            out.append(os.path.join(d, "lib", "libnccl.so.2"))
    except ImportError:
        pass
    out.append("libnccl.so.2")
    seen = set()
    return [p for p in out if not (p in seen or seen.add(p))]


def load() -> str:
    """Open the NCCL library that pygpu's collectives call (once; later
    calls return the same path).  CudaUnavailableError listing every place
    tried when there is none."""
    path = _driver._nccl_loaded()
    return path if path is not None else _driver._nccl_load(_candidates())


def _op_code(op):
    """(ncclRedOp_t, name) of `op`: a name of OPS, or an int (an nccl4py
    NcclRedOp, or an operator made with ncclRedOpCreatePreMulSum)."""
    if isinstance(op, str):
        name = op.lower()
        if name not in OPS:
            raise ValueError(
                "op must be one of %s (or an nccl4py operator), not %r" % (", ".join(OPS), op)
            )
        return OPS.index(name), name
    try:
        # int(): before 3.10 operator.index returns an IntEnum member (nccl4py's
        # NcclRedOp) as itself, which the C path takes only as an exact int
        code = int(operator.index(op))
    except TypeError:
        raise TypeError(
            "op must be one of %s or an int (an nccl4py operator), not %s"
            % (", ".join(OPS), type(op).__name__)
        ) from None
    return code, OPS[code] if 0 <= code < len(OPS) else ""


def _cai(buf, what):
    cai = getattr(buf, "__cuda_array_interface__", None)
    if cai is None:
        dev = getattr(buf, "__dlpack_device__", None)
        if dev is not None and int(dev()[0]) not in (2, 3, 13):
            raise TypeError(
                "pygpu.nccl: %s is in host memory (%s); NCCL takes device "
                "arrays: copy it to the GPU first (gpuarray.to_gpu)" % (what, type(buf).__name__)
            )
        raise TypeError(
            "%s must be a device array (a GPUArray, or anything with "
            "__cuda_array_interface__), not %s" % (what, type(buf).__name__)
        )
    return cai


def contiguous(buf: Any, what: str = "buffer") -> "tuple[tuple[int, ...], np.dtype[Any]]":
    """Check that `buf` (anything with ``__cuda_array_interface__``) is C- or
    Fortran-contiguous; returns (shape, dtype).  NCCL reads `count`
    elements of contiguous memory, so a strided view would be read wrong."""
    cai = _cai(buf, what)
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


def _nccl_type(dtype):
    """ncclDataType_t of dtype, or None where NCCL has none."""
    if dtype.byteorder == ">" or (dtype.byteorder == "=" and not np.little_endian):
        return None
    if dtype.fields is None and dtype.name in _NAMED_TYPES:
        return _NAMED_TYPES[dtype.name]
    if dtype.fields is not None or dtype.subdtype is not None:
        return None
    return _TYPES.get((dtype.kind, dtype.itemsize))


def _spec(comm, buf, what, kind, opname, reduces):
    """The buffer as NCCL takes it, ((address, count, ncclDataType_t,
    owner), dtype), after the operand gate: a GPUArray through gpuarray's
    gate (freed memory, context, extent), anything else through its
    __cuda_array_interface__ (the C side checks its device).  owner: the
    DeviceAllocation the memory lies in (held while NCCL may use it), else
    the buffer itself (kept alive).  `reduces`: the collective reduces (so
    the dtype must be one NCCL reduces; complex goes as pairs of reals with
    sum or avg); otherwise a dtype NCCL has no type for goes as bytes."""
    from pygpu import gpuarray
    from pygpu._array.gate import _allocation

    owner = buf
    if isinstance(buf, gpuarray.GPUArray):
        gpuarray._check_operands("pygpu.nccl %s %s" % (kind, what), (buf,), ctx=comm.context)
        alloc = _allocation(buf)
        if isinstance(alloc, _driver.DeviceAllocation):
            owner = alloc
    shape, dtype = contiguous(buf, what)
    ptr = int(_cai(buf, what)["data"][0])
    count = int(np.prod(shape, dtype=np.int64)) if shape else 1
    t = _nccl_type(dtype)
    if t is not None and not (reduces and dtype.kind == "b"):
        return (ptr, count, t, owner), dtype
    if reduces:
        if dtype.kind == "c" and dtype.byteorder != ">":
            if opname not in ("sum", "avg"):
                raise TypeError(
                    "pygpu.nccl: %s is complex (%s): NCCL reduces it only with sum or "
                    "avg (as pairs of reals), not %s" % (what, dtype, opname or "this op")
                )
            return (ptr, 2 * count, _TYPES[("f", dtype.itemsize // 2)], owner), dtype
        raise TypeError(
            "pygpu.nccl: %s is %s, which NCCL does not reduce; it reduces int8, uint8, "
            "int32, uint32, int64, uint64, float16, bfloat16, float32, float64 (and "
            "complex64/complex128 with sum or avg)" % (what, dtype)
        )
    return (ptr, count * dtype.itemsize, _UINT8, owner), dtype


def _stream_of(stream):
    """A stream argument as the C path takes it: a pygpu Stream, None, or
    an int handle (from __cuda_stream__)."""
    from pygpu import driver

    if stream is None or isinstance(stream, (driver.Stream, int)):
        return stream
    proto = getattr(stream, "__cuda_stream__", None)
    if proto is not None:
        return int(proto()[1])
    raise TypeError(
        "stream must be a pygpu Stream, an object with __cuda_stream__, or a handle "
        "(int), not %s" % type(stream).__name__
    )


class Communicator:
    """An NCCL communicator of one rank, bound to its device's primary
    context.  Make one with :meth:`init` (one process per GPU),
    :meth:`init_all` (several GPUs in one process) or :func:`bootstrap`, or
    wrap an nccl4py ``Communicator`` (or a raw ``ncclComm_t`` handle, an
    int, that something else owns) with ``Communicator(comm, context)``.

    ``nccl`` is the nccl4py communicator (everything this class does not
    cover), ``context`` the pygpu primary context, ``stream`` the default
    stream of its calls (None: the legacy default stream)."""

    def __init__(self, comm: Any, context: Any, stream: Any = None) -> None:
        if not context.is_primary:
            raise ValueError(
                "pygpu.nccl: the context must be its device's primary context "
                "(NCCL runs in the CUDA runtime's context of a device); use "
                "Device(n).retain_primary_context() or pygpu.autoinit"
            )
        from pygpu import gpuarray

        load()
        handle = comm if isinstance(comm, int) else comm.ptr
        self._c = _driver.NcclComm(handle, context, gpuarray.GPUArray, comm)
        self.nccl = comm
        self.context = context
        self.stream = stream

    # ---- making communicators ----

    @classmethod
    def init(
        cls, nranks: int, rank: int, uid: Any, device: Any = None, stream: Any = None
    ) -> "Communicator":
        """This process's rank of `nranks` (a collective call: every rank
        makes its own with the same `uid` from :func:`unique_id`).  `device`
        is an ordinal or a pygpu Device; None takes the current context's
        device, which must then be its primary context."""
        nranks, rank = int(nranks), int(rank)
        if nranks < 1 or not 0 <= rank < nranks:
            raise ValueError(
                "pygpu.nccl: rank %d of %d ranks: a rank is 0 to nranks - 1, and "
                "nranks at least 1" % (rank, nranks)
            )
        nccl = _nccl()
        ctx = _primary(device)
        with _current(ctx):
            comm = nccl.Communicator.init(nranks, rank, uid)
        return cls(comm, ctx, stream)

    @classmethod
    def init_all(cls, devices: "Iterable[int] | None" = None) -> "list[Communicator]":
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
    def rank(self) -> int:
        return self._c.rank

    @property
    def nranks(self) -> int:
        return self._c.nranks

    @property
    def device(self) -> int:
        """The device's ordinal."""
        return self.context.device.ordinal

    def __repr__(self) -> str:
        return "<pygpu.nccl.Communicator rank %d of %d on device %d>" % (
            self.rank,
            self.nranks,
            self.device,
        )

    # ---- collectives: the C path first; the Python path for the rest ----

    def _slow(self, kind, send, recv, op, root, stream):
        """What the C path left: every buffer through the full gate and
        resolved to (address, count, type, owner), the operator and root to ints,
        the stream to a handle; then the same C call."""
        code = name = None
        reduces = kind in ("allreduce", "reduce", "reduce_scatter")
        if reduces:
            code, name = _op_code(op)
        if root is not None:
            root = int(operator.index(root))
        s, sdt = _spec(
            self, send, "buf" if kind in ("send", "recv") else "sendbuf", kind, name, reduces
        )
        r = None
        sized = kind in ("allgather", "reduce_scatter")  # recvbuf of its own size
        if recv is not None and (recv is not send or sized):
            if kind == "reduce" and root != self.rank:
                r = None  # NCCL reads recvbuf only on the root
            else:
                r, rdt = _spec(self, recv, "recvbuf", kind, name, reduces)
                if rdt != sdt:  # (both may go as bytes)
                    raise TypeError(
                        "pygpu.nccl: %s: sendbuf is %s but recvbuf is %s; NCCL moves one "
                        "type (give both buffers the same dtype)" % (kind, sdt, rdt)
                    )
        fn = getattr(self._c, kind)
        st = _stream_of(stream)
        if kind == "allreduce" or kind == "reduce_scatter":
            out = fn(s, r, code, st)
        elif kind == "reduce":
            out = fn(s, r, code, root, st)
        elif kind == "broadcast":
            out = fn(s, r, root, st)
        elif kind == "allgather":
            out = fn(s, r, st)
        else:
            out = fn(s, root, st)
        if out is NotImplemented:  # pragma: no cover - every argument is resolved
            raise TypeError("pygpu.nccl: %s: arguments the C path cannot take" % kind)
        if kind == "send":
            return None
        return send if recv is None else recv

    def allreduce(
        self, sendbuf: Any, recvbuf: Any = None, op: "str | int" = "sum", stream: Any = None
    ) -> Any:
        """Reduce `sendbuf` over every rank into every rank's `recvbuf`
        (None: in place, into `sendbuf`)."""
        if stream is None:
            stream = self.stream
        r = self._c.allreduce(sendbuf, recvbuf, op, stream)
        if r is NotImplemented:
            return self._slow("allreduce", sendbuf, recvbuf, op, None, stream)
        return r

    def reduce(
        self,
        sendbuf: Any,
        recvbuf: Any = None,
        op: "str | int" = "sum",
        root: int = 0,
        stream: Any = None,
    ) -> Any:
        """Reduce `sendbuf` over every rank into `recvbuf` on `root` (None:
        in place)."""
        if stream is None:
            stream = self.stream
        r = self._c.reduce(sendbuf, recvbuf, op, root, stream)
        if r is NotImplemented:
            return self._slow("reduce", sendbuf, recvbuf, op, root, stream)
        return r

    def broadcast(self, buf: Any, root: int = 0, recvbuf: Any = None, stream: Any = None) -> Any:
        """Copy `buf` on `root` to every rank's `recvbuf` (None: in place,
        into `buf` on each rank)."""
        if stream is None:
            stream = self.stream
        r = self._c.broadcast(buf, recvbuf, root, stream)
        if r is NotImplemented:
            return self._slow("broadcast", buf, recvbuf, None, root, stream)
        return r

    def allgather(self, sendbuf: Any, recvbuf: Any, stream: Any = None) -> Any:
        """Every rank's `sendbuf`, in rank order, into every rank's `recvbuf`
        (nranks times the size)."""
        if stream is None:
            stream = self.stream
        r = self._c.allgather(sendbuf, recvbuf, stream)
        if r is NotImplemented:
            return self._slow("allgather", sendbuf, recvbuf, None, None, stream)
        return r

    def reduce_scatter(
        self, sendbuf: Any, recvbuf: Any, op: "str | int" = "sum", stream: Any = None
    ) -> Any:
        """Reduce `sendbuf` over every rank; rank i gets the i-th of nranks
        equal parts in `recvbuf`."""
        if stream is None:
            stream = self.stream
        r = self._c.reduce_scatter(sendbuf, recvbuf, op, stream)
        if r is NotImplemented:
            return self._slow("reduce_scatter", sendbuf, recvbuf, op, None, stream)
        return r

    def send(self, buf: Any, peer: int, stream: Any = None) -> None:
        """Send `buf` to rank `peer` (which calls :meth:`recv`)."""
        if stream is None:
            stream = self.stream
        if self._c.send(buf, peer, stream) is NotImplemented:
            self._slow("send", buf, None, None, peer, stream)

    def recv(self, buf: Any, peer: int, stream: Any = None) -> Any:
        """Receive into `buf` from rank `peer` (which calls :meth:`send`)."""
        if stream is None:
            stream = self.stream
        r = self._c.recv(buf, peer, stream)
        if r is NotImplemented:
            return self._slow("recv", buf, None, None, peer, stream)
        return r

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
        queued on it is done).  A raw handle given as an int is only
        forgotten: its owner destroys it."""
        if self.nccl is not None:
            self._c.close()
            if not isinstance(self.nccl, int):
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


class group(_driver.NcclGroup):
    """Calls of several communicators (several GPUs in this process, or
    several calls of one) issued as one NCCL group (``ncclGroupStart`` /
    ``ncclGroupEnd``), as a ``with`` block: needed where one thread drives
    more than one rank.  `comms` (optional): the communicators the group's
    calls use, checked to be Communicators.  No context needs to be current
    (NCCL sets each communicator's device itself), and the thread's context
    is what it was afterwards.  Entering and leaving are C
    (``driver.NcclGroup``): a round costs what NCCL's own group calls do."""

    __slots__ = ()


def from_mpi(comm: Any, device: Any = None, stream: Any = None) -> Communicator:
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


# ---- past one machine: ranks from the launcher's environment ----

# (rank, size, local rank) variables of each launcher, in the order looked at
_LAUNCHERS = (
    ("torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK"),
    ("Open MPI", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"),
    ("MPICH/Hydra", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID"),
    ("Slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"),
)
_MAGIC = b"pygpu-nccl-uid/2"  # /2: the rank acknowledges the id
_UID_BYTES = 128


def _env_int(env, name, low, what):
    text = env[name].strip()
    try:
        v = int(text)
    except ValueError:
        raise ValueError(
            "pygpu.nccl.bootstrap: %s=%r is not an integer (%s)" % (name, env[name], what)
        ) from None
    if v < low:
        raise ValueError(
            "pygpu.nccl.bootstrap: %s=%d must be at least %d (%s)" % (name, v, low, what)
        )
    return v


def _first_host(nodelist):
    """The first host of a Slurm node list ("gpu[03-04,07],cpu1" -> "gpu03")."""
    head = nodelist.split(",")[0] if "[" not in nodelist.split(",")[0] else nodelist
    if "[" not in head:
        return head.strip()
    prefix, rest = head.split("[", 1)
    first = rest.split("]", 1)[0].split(",")[0].split("-")[0]
    return prefix.strip() + first


def launch_env(environ: "Mapping[str, str] | None" = None) -> "dict[str, Any] | None":
    """The rank layout a launcher set in the environment, as a dict:
    rank, nranks, local_rank, addr and port (MASTER_ADDR/MASTER_PORT, or
    None), source (the launcher's name).  Looked at in order: torchrun's
    RANK/WORLD_SIZE/LOCAL_RANK, Open MPI's OMPI_COMM_WORLD_*, MPICH's
    PMI_RANK/PMI_SIZE/MPI_LOCALRANKID, Slurm's SLURM_PROCID/SLURM_NTASKS/
    SLURM_LOCALID (whose first node is the address when MASTER_ADDR is not
    set, and whose job id gives a port when MASTER_PORT is not).  None when
    no launcher's variables are set; ValueError naming the variable for a
    bad or half-set environment."""
    env = os.environ if environ is None else environ
    for source, rk, sz, lr in _LAUNCHERS:
        has_r, has_s = rk in env, sz in env
        if not (has_r or has_s):
            continue
        if not (has_r and has_s):
            raise ValueError(
                "pygpu.nccl.bootstrap: %s is set but %s is not (%s's environment is "
                "incomplete)" % (rk if has_r else sz, sz if has_r else rk, source)
            )
        nranks = _env_int(env, sz, 1, "the number of ranks")
        rank = _env_int(env, rk, 0, "this process's rank")
        if rank >= nranks:
            raise ValueError(
                "pygpu.nccl.bootstrap: %s=%d is not a rank of %s=%d (0 to %d)"
                % (rk, rank, sz, nranks, nranks - 1)
            )
        local = _env_int(env, lr, 0, "the rank on this node") if lr in env else None
        addr = env.get("MASTER_ADDR") or None
        port = None
        if env.get("MASTER_PORT"):
            port = _env_int(env, "MASTER_PORT", 1, "the rendezvous port")
            if port > 65535:
                raise ValueError("pygpu.nccl.bootstrap: MASTER_PORT=%d is not a port" % port)
        if source == "Slurm":
            nodes = env.get("SLURM_STEP_NODELIST") or env.get("SLURM_JOB_NODELIST")
            if addr is None and nodes:
                addr = _first_host(nodes)
            if port is None and env.get("SLURM_JOB_ID", "").isdigit():
                port = 29500 + int(env["SLURM_JOB_ID"]) % 10000
        if addr is not None and port is None:
            raise ValueError("pygpu.nccl.bootstrap: MASTER_ADDR is set but MASTER_PORT is not")
        return {
            "rank": rank,
            "nranks": nranks,
            "local_rank": local,
            "addr": addr,
            "port": port,
            "source": source,
        }
    return None


def _recv_exact(sock, n):
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ConnectionError("the peer closed the connection")
        data += chunk
    return data


def exchange_id(
    payload: "bytes | None", rank: int, nranks: int, addr: str, port: int, timeout: float = 300.0
) -> bytes:
    """Rank 0 hands `payload` (the unique id's 128 bytes; None elsewhere)
    to every other rank over TCP: it listens on `port`, each other rank
    connects to `addr`:`port` (retrying until `timeout` seconds) and gets
    the bytes.  Returns the bytes on every rank.  No pickle: only these
    bytes travel, after a fixed greeting."""
    import socket
    import struct
    import time

    deadline = time.monotonic() + timeout
    if rank == 0:
        if payload is None or len(payload) != _UID_BYTES:
            raise ValueError("pygpu.nccl: rank 0 needs the unique id's %d bytes" % _UID_BYTES)
        srv = socket.create_server(("", port), reuse_port=False)
        try:
            srv.settimeout(max(0.1, deadline - time.monotonic()))
            served: "set[int]" = set()
            while len(served) < nranks - 1:
                try:
                    conn, _ = srv.accept()
                except socket.timeout:
                    raise TimeoutError(
                        "pygpu.nccl.bootstrap: rank 0 waited %s s on port %d; ranks %s did "
                        "not connect" % (timeout, port, sorted(set(range(1, nranks)) - served))
                    ) from None
                # a connection that is not a rank's (a port probe, a health
                # check, one that closes or says nothing) is skipped
                # (a rank greets as it connects, and acknowledges the id: a
                # rank that gave up meanwhile is not counted as served)
                with conn:
                    try:
                        conn.settimeout(2)
                        hello = _recv_exact(conn, len(_MAGIC) + 4)
                        if hello[: len(_MAGIC)] != _MAGIC:
                            continue  # not one of ours
                        (r,) = struct.unpack("!I", hello[len(_MAGIC) :])
                        if not 1 <= r < nranks:
                            continue
                        conn.sendall(_MAGIC + bytes(payload))
                        if _recv_exact(conn, 1) != b"k":
                            continue
                    except OSError:
                        continue
                    served.add(r)
        finally:
            srv.close()
        return bytes(payload)
    last = None
    while True:
        try:
            with socket.create_connection((addr, port), timeout=10) as conn:
                conn.sendall(_MAGIC + struct.pack("!I", rank))
                # rank 0 serves one connection at a time, each stray one for
                # at most 2 s: wait for the id as long as the bootstrap may
                conn.settimeout(max(10.0, deadline - time.monotonic()))
                data = _recv_exact(conn, len(_MAGIC) + _UID_BYTES)
                if data[: len(_MAGIC)] != _MAGIC:
                    raise ConnectionError("%s:%d is not pygpu's rank 0" % (addr, port))
                conn.sendall(b"k")
                return data[len(_MAGIC) :]
        except OSError as e:
            last = e
        if time.monotonic() > deadline:
            raise TimeoutError(
                "pygpu.nccl.bootstrap: rank %d could not reach rank 0 at %s:%d in %s s (%s)"
                % (rank, addr, port, timeout, last)
            )
        time.sleep(0.2)


def bootstrap(
    device: Any = None,
    stream: Any = None,
    mpi: Any = None,
    environ: "Mapping[str, str] | None" = None,
    timeout: float = 300.0,
) -> Communicator:
    """This process's :class:`Communicator` among the ranks a launcher
    started, on one machine or many: the one call a program needs.

    - ``mpi=comm`` (an mpi4py communicator): its ranks, the id shared over
      MPI (:func:`from_mpi`).
    - Otherwise the launcher's environment (:func:`launch_env`): torchrun
      (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT), mpirun (Open MPI's
      OMPI_COMM_WORLD_*, MPICH's PMI_*), srun (SLURM_*).  Rank 0 makes the
      unique id and hands it to the others over TCP at MASTER_ADDR:
      MASTER_PORT; under mpirun without MASTER_ADDR the id goes over MPI
      (mpi4py's COMM_WORLD).

    `device` defaults to the rank on its node (LOCAL_RANK and the like),
    modulo the devices this process sees.  A bad environment is a
    ValueError naming the variable; rank 0 that no rank reaches in
    `timeout` seconds a TimeoutError."""
    from pygpu import driver

    if mpi is not None:
        return from_mpi(mpi, device=device, stream=stream)
    env = launch_env(environ)
    if env is None:
        raise ValueError(
            "pygpu.nccl.bootstrap: no launcher's environment: none of RANK/WORLD_SIZE "
            "(torchrun), OMPI_COMM_WORLD_RANK/SIZE (Open MPI), PMI_RANK/PMI_SIZE (MPICH), "
            "SLURM_PROCID/SLURM_NTASKS (srun) is set; start the ranks with one of them, or "
            "pass mpi= (an mpi4py communicator)"
        )
    if env["addr"] is None and env["nranks"] > 1:
        try:
            from mpi4py import MPI
        except ImportError:
            raise ValueError(
                "pygpu.nccl.bootstrap: %s started %d ranks but MASTER_ADDR is not set, "
                "and mpi4py is not installed to share the id over MPI: set MASTER_ADDR "
                "(rank 0's host) and MASTER_PORT (a free port), or pip install mpi4py"
                % (env["source"], env["nranks"])
            ) from None
        return from_mpi(MPI.COMM_WORLD, device=device, stream=stream)
    nccl = _nccl()
    if device is None:
        driver.init()
        local = env["local_rank"] if env["local_rank"] is not None else env["rank"]
        device = local % driver.Device.count()
    uid = unique_id() if env["rank"] == 0 else None
    if env["nranks"] > 1:
        data = exchange_id(
            bytes(uid) if uid is not None else None,
            env["rank"],
            env["nranks"],
            env["addr"],
            env["port"],
            timeout,
        )
        uid = nccl.UniqueId.from_bytes(data)
    return Communicator.init(env["nranks"], env["rank"], uid, device=device, stream=stream)


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
    devices: "Iterable[int] | None" = None,
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
    results: "dict[int, Any]" = {}
    errors: "list[Any]" = []
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
