"""pygpu.driver: the CUDA driver API, shaped like pycuda.driver.

Port PyCUDA code by changing ``import pycuda.driver as cuda`` to
``import pygpu.driver as cuda``.  Importing this module touches no GPU and
loads no CUDA library; the driver is opened on the first call that needs it.
"""

import atexit as _atexit
from typing import Any as _Any
from typing import Literal as _Literal
from typing import NoReturn as _NoReturn
import enum as _enum

import numpy as _np

from pygpu import _driver
from pygpu._driver import (  # noqa: F401  (re-exported API)
    ArgumentHandler,
    BoundLaunch,
    Context,
    CudaUnavailableError,
    Device,
    DeviceAllocation,
    GreenContext,
    Error,
    Event,
    Function,
    HostAllocation,
    KernelTime,
    LaunchError,
    Linker,
    LogicError,
    MemoryError,
    Module,
    RuntimeError,
    Stream,
    ctx_flags,
    device_attribute,
    error_code,
    event_flags,
    func_cache,
    function_attribute,
    get_driver_version,
    init,
    jit_option,
    limit,
    mem_alloc,
    mem_alloc_async,
    mem_alloc_managed,
    mem_alloc_pitch,
    mem_attach_flags,
    mem_get_info,
    mem_prefetch,
    memcpy_dtod,
    memcpy_dtod_async,
    memcpy_dtoh,
    memcpy_dtoh_async,
    memcpy_htod,
    memcpy_htod_async,
    memcpy_peer,
    memcpy_peer_async,
    memset_d8,
    memset_d8_async,
    memset_d16,
    memset_d16_async,
    memset_d32,
    memset_d32_async,
    module_from_buffer,
    register_host_memory,
    stream_flags,
)
from pygpu._driver import (  # noqa: F401  (processes and several GPUs: docs/multi.md)
    IPCMemoryHandle,
    MemoryPool,
    VirtualBuffer,
    forked_from,
    ipc_mem_flags,
    mem_get_ipc_handle,
)
from pygpu._errors import CompileError  # noqa: F401  (PyCUDA has it in pycuda.driver)
from pygpu.graphs import (  # noqa: F401  (re-exported API: CUDA graphs)
    Graph,
    GraphExec,
    GraphNode,
    capture_graph,
    capture_mode,
    graph_conditional_type,
    graph_instantiate_flags,
    graph_node_type,
)


def _named(cls):
    """str(member) is its name, as PyCUDA's enum members print (the C-built
    enums do the same: src/core/module.c); a format spec formats the value."""
    cls.__str__ = lambda self: self._name_ if self._name_ is not None else str(int(self))
    cls.__format__ = lambda self, spec: format(int(self), spec) if spec else str(self)
    return _driver._enum_tables(cls)  # PyCUDA's cls.names and cls.values


@_named
class host_alloc_flags(_enum.IntFlag):
    """Flags of pagelocked_empty(mem_flags=...) (cuMemHostAlloc)."""

    PORTABLE = 0x01
    DEVICEMAP = 0x02
    WRITECOMBINED = 0x04


@_named
class mem_host_register_flags(_enum.IntFlag):
    """Flags of register_host_memory(flags=...) (cuMemHostRegister)."""

    PORTABLE = 0x01
    DEVICEMAP = 0x02
    IOMEMORY = 0x04
    READ_ONLY = 0x08


def get_version() -> "tuple[int, int, int]":
    """The CUDA version pygpu was built against, as (major, minor, 0)."""
    v = _driver.CUDA_HEADER_VERSION
    return (v // 1000, (v % 1000) // 10, 0)


# ---- host <-> device helpers (PyCUDA names) ----


def _as_array(ary, what):
    if not isinstance(ary, _np.ndarray):
        raise TypeError("%s takes a NumPy array, not %s" % (what, type(ary).__name__))
    return ary


def mem_alloc_like(ary: _Any) -> DeviceAllocation:
    """Device memory of ary's size in bytes."""
    return mem_alloc(_as_array(ary, "mem_alloc_like()").nbytes)


def to_device(ary: _Any, stream: "Stream | None" = None) -> DeviceAllocation:
    """Copy a NumPy array (or any contiguous buffer) to new device memory."""
    mv = memoryview(ary)
    if not mv.contiguous:
        raise ValueError("to_device(): the array is not contiguous (use numpy.ascontiguousarray)")
    dev = mem_alloc(mv.nbytes)
    if stream is None:
        memcpy_htod(dev, ary)
    else:
        memcpy_htod_async(dev, ary, stream)
    return dev


def from_device(
    devptr: "object",
    shape: "int | tuple[int, ...]",
    dtype: "_np.typing.DTypeLike",
    order: '_Literal["C", "F"]' = "C",
) -> "_np.ndarray":
    """A new NumPy array with the contents of device memory."""
    if shape is None:  # as NumPy >= 2.1 says (2.0, Python 3.9's, only warns)
        raise TypeError("Use () not None as shape arguments")
    result = _np.empty(shape, dtype, order=order)
    memcpy_dtoh(result, devptr)
    return result


def from_device_like(devptr: "object", other_ary: "_np.ndarray") -> "_np.ndarray":
    """A new array shaped like other_ary, filled from device memory."""
    result = _np.empty_like(other_ary)
    memcpy_dtoh(result, devptr)
    return result


# ---- pageable-copy staging (src/memory/staging.c) ----

_STAGING_KEYS = ("threshold", "threads", "chunk")
_STAGING_TUNING_KEYS = ("piece", "spin_us", "prefault", "cold")

staging_stats = _driver.staging_stats


def staging_settings() -> "dict[str, _Any]":
    """The pageable-copy staging settings as a dict: ``threshold`` (bytes
    from which a synchronous copy of pageable memory is staged; 0: staging
    off), ``threads`` (copying threads, the caller's included), ``chunk``
    (bytes of each pinned buffer, the largest piece a thread moves at once),
    ``piece`` (the smallest piece), ``spin_us`` (how long the helper
    threads poll after their last piece before they sleep) and ``prefault``
    (1: a device-to-host copy faults its destination in ahead of the
    memcpy) and ``cold`` (bytes below which a copy made while every helper
    thread sleeps takes the plain driver call and wakes them)."""
    return dict(
        zip(
            _STAGING_KEYS + _STAGING_TUNING_KEYS,
            _driver._get_staging() + _driver._get_staging_tuning(),
        )
    )


def set_staging(
    threshold: _Any = None,
    threads: _Any = None,
    chunk: _Any = None,
    piece: _Any = None,
    spin_us: _Any = None,
    prefault: _Any = None,
    cold: _Any = None,
) -> "dict[str, _Any]":
    """Change the pageable-copy staging settings (None keeps a setting) and
    return the previous ones as a dict: ``set_staging(**old)`` restores them.
    They start from PYGPU_STAGING_THRESHOLD, _THREADS, _CHUNK, _PIECE,
    _SPIN_US, _PREFAULT and _COLD; a copy already running keeps the settings it
    started with.  Nothing changes if any value is refused."""
    old_tuning = _driver._get_staging_tuning()
    # the knobs are checked first (and restored if the others are refused):
    # a refused call changes nothing
    _driver._set_staging_tuning(piece, spin_us, prefault, cold)
    try:
        old = _driver._set_staging(threshold, threads, chunk)
    except BaseException:
        _driver._set_staging_tuning(*old_tuning)
        raise
    return dict(zip(_STAGING_KEYS + _STAGING_TUNING_KEYS, old + old_tuning))


# ---- the block cache (src/memory/blockcache.c, docs/memory.md) ----

_BLOCK_CACHE_KEYS = ("limit", "max_block")


class BlockCache:
    """The block cache of one context: device blocks that
    ``mem_alloc_async()`` (the array layer's allocator) keeps for reuse
    after their allocation is freed, so that a loop of small operations
    makes no allocation call to the driver (docs/memory.md).  Get it with
    ``block_cache(context)``; as CuPy's memory pool, ``free_all()`` (also
    ``free_all_blocks()``) gives the blocks back to the driver's pool."""

    __slots__ = ("context",)

    def __init__(self, context: Context) -> None:
        if not isinstance(context, Context):
            raise TypeError(
                "BlockCache(): context must be a Context, not %s" % type(context).__name__
            )
        self.context = context

    def stats(self) -> dict:
        """The counters as a dict: ``hits`` (allocations served from the
        cache), ``misses`` (cacheable ones that went to the driver),
        ``cached_bytes`` and ``cached_blocks`` (kept now),
        ``returned_blocks`` (given back to the pool), ``full`` (frees not
        kept: the cache was at its limit), ``oom_flushes`` (the pool ran out
        and the cache was emptied into it), ``limit`` and ``max_block``."""
        return _driver._block_cache_stats(self.context)

    @property
    def hits(self) -> int:
        return self.stats()["hits"]

    @property
    def misses(self) -> int:
        return self.stats()["misses"]

    @property
    def cached_bytes(self) -> int:
        return self.stats()["cached_bytes"]

    @property
    def cached_blocks(self) -> int:
        return self.stats()["cached_blocks"]

    def trim(self, keep: int = 0) -> int:
        """Give blocks back to the driver's pool (each freed in order on the
        stream it was last used on) until at most ``keep`` bytes stay
        cached; returns how many went."""
        return _driver._block_cache_trim(self.context, keep)

    def free_all(self) -> int:
        """Give every cached block back to the driver's pool; returns how
        many went."""
        return _driver._block_cache_trim(self.context, 0)

    free_all_blocks = free_all  # CuPy's MemoryPool name

    def __repr__(self):
        st = self.stats()
        return "<pygpu.driver.BlockCache of %r: %d blocks, %d bytes cached, %d hits, %d misses>" % (
            self.context,
            st["cached_blocks"],
            st["cached_bytes"],
            st["hits"],
            st["misses"],
        )


def block_cache(context: "Context | None" = None) -> BlockCache:
    """The block cache of context (default: the current context)."""
    if context is None:
        context = Context.get_current()
        if context is None:
            raise LogicError("block_cache(): no context is current")
    return BlockCache(context)


def block_cache_settings() -> dict:
    """The block cache's settings as a dict: ``limit`` (bytes of blocks each
    context keeps at most; 0: the cache is off) and ``max_block`` (the
    largest request cached)."""
    return dict(zip(_BLOCK_CACHE_KEYS, _driver._block_cache_settings()))


def set_block_cache(limit: "int | None" = None, max_block: "int | None" = None) -> dict:
    """Change the block cache's settings (None keeps one) and return the
    previous ones as a dict: ``set_block_cache(**old)`` restores them.  They
    start from PYGPU_BLOCK_CACHE (the limit; 0 or off: no cache) and
    PYGPU_BLOCK_CACHE_MAX.  Every context's cache is trimmed to the new
    settings at once."""
    old = dict(zip(_BLOCK_CACHE_KEYS, _driver._set_block_cache(limit, max_block)))
    _driver._block_cache_trim(None, block_cache_settings()["limit"])
    return old


def _block_cache_at_exit():
    # interpreter exit: every context's blocks go back to the pool while the
    # contexts live (the driver tears them down after this process's exit)
    try:
        _driver._block_cache_trim(None, 0)
    except Exception:  # noqa: BLE001 - the driver may be gone already: nothing to do
        pass


_atexit.register(_block_cache_at_exit)
# ---- recycled host mappings for large get() destinations (src/memory/hostblock.c) ----

from pygpu._driver import (  # noqa: E402,F401  (re-exported API)
    HostBlock,
    free_host_cache,
    host_cache_stats,
    set_host_cache,
)


def module_from_file(
    path: str, options: "list[str] | None" = None, message_handler: _Any = None
) -> Module:
    """Load a .cubin, .ptx or .fatbin file into the current context."""
    with open(path, "rb") as f:
        data = f.read()
    return module_from_buffer(data, options, message_handler)


# ---- page-locked host memory ----


@_named
class compute_mode(_enum.IntEnum):
    """A device's compute mode (Device.compute_mode); EXCLUSIVE is the
    exclusive-thread mode of drivers before CUDA 8, kept for PyCUDA code."""

    DEFAULT = 0
    EXCLUSIVE = 1
    PROHIBITED = 2
    EXCLUSIVE_PROCESS = 3


class PointerHolderBase:
    """Base for objects that own a device pointer elsewhere (PyCUDA's
    PointerHolderBase): a subclass defines get_pointer(); its instances are
    kernel arguments, copy endpoints and GPUArray gpudata like an int
    address (int(), __index__, and a __cuda_array_interface__ of unknown
    size)."""

    def get_pointer(self) -> int:
        raise NotImplementedError("%s must define get_pointer()" % type(self).__name__)

    def __int__(self):
        return int(self.get_pointer())

    __index__ = __int__

    def as_buffer(self, size: int, offset: int = 0) -> memoryview:
        """A writable memoryview of size bytes from offset, as PyCUDA's, for
        memory the host can reach (managed or page-locked); LogicError for
        device memory, which the host cannot read."""
        if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
            raise ValueError("as_buffer(): offset must be an int >= 0, got %r" % (offset,))
        return _driver._host_view(self, int(self.get_pointer()) + offset, size)

    @property
    def __cuda_array_interface__(self):
        return {
            "data": (int(self.get_pointer()), False),
            "typestr": "|u1",
            "shape": None,
            "version": 3,
        }


def aligned_empty(
    shape: "int | tuple[int, ...]",
    dtype: "_np.typing.DTypeLike" = _np.float64,
    order: '_Literal["C", "F"]' = "C",
    alignment: int = 4096,
) -> "_np.ndarray[_Any, _Any]":
    """An uninitialised host array whose data starts at a multiple of
    alignment bytes (for register_host_memory), as PyCUDA's: its .base is
    the AlignedHostAllocation that owns the memory."""
    dtype = _np.dtype(dtype)
    if (
        isinstance(alignment, bool)
        or not isinstance(alignment, int)
        or alignment <= 0
        or alignment & (alignment - 1)
    ):
        raise ValueError("alignment must be a positive power of two, got %r" % (alignment,))
    if order not in ("C", "F"):
        raise ValueError("order must be 'C' or 'F', got %r" % (order,))
    count = int(_np.prod(shape, dtype=_np.int64)) if _np.ndim(shape) else int(shape)  # type: ignore[arg-type]
    nbytes = count * dtype.itemsize
    raw = AlignedHostAllocation((nbytes + alignment,), _np.uint8)
    start = (-raw.ctypes.data) % alignment
    return _np.ndarray(shape, dtype, buffer=raw, offset=start, order=order)


def pagelocked_empty(
    shape: "int | tuple[int, ...]",
    dtype: "_np.typing.DTypeLike" = _np.float64,
    order: '_Literal["C", "F"]' = "C",
    mem_flags: int = 0,
) -> "_np.ndarray":
    """An uninitialized page-locked ndarray; .base is its HostAllocation."""
    return _driver._pagelocked(shape, dtype, order, int(mem_flags), False)


def pagelocked_zeros(
    shape: "int | tuple[int, ...]",
    dtype: "_np.typing.DTypeLike" = _np.float64,
    order: '_Literal["C", "F"]' = "C",
    mem_flags: int = 0,
) -> "_np.ndarray":
    """A zeroed page-locked ndarray."""
    return _driver._pagelocked(shape, dtype, order, int(mem_flags), True)


def _order_of(ary):
    return "F" if ary.flags.f_contiguous and not ary.flags.c_contiguous else "C"


def pagelocked_empty_like(ary: "_np.ndarray", mem_flags: int = 0) -> "_np.ndarray":
    """A page-locked ndarray with ary's shape, dtype and order."""
    return pagelocked_empty(ary.shape, ary.dtype, _order_of(ary), mem_flags)


def pagelocked_zeros_like(ary: "_np.ndarray", mem_flags: int = 0) -> "_np.ndarray":
    """A zeroed page-locked ndarray with ary's shape, dtype and order."""
    return pagelocked_zeros(ary.shape, ary.dtype, _order_of(ary), mem_flags)


# ---- managed memory ----


def managed_empty(
    shape: "int | tuple[int, ...]",
    dtype: "_np.typing.DTypeLike" = _np.float64,
    order: '_Literal["C", "F"]' = "C",
    mem_flags: int = mem_attach_flags.GLOBAL,
) -> "_np.ndarray[_Any, _Any]":
    """An ndarray over managed memory, usable on the host and (its address
    is int(a.base)) in kernels; .base is the owning DeviceAllocation.
    Synchronize before touching it on the host after a kernel wrote it."""
    return _driver._managed(shape, dtype, order, int(mem_flags), False)


def managed_zeros(
    shape: "int | tuple[int, ...]",
    dtype: "_np.typing.DTypeLike" = _np.float64,
    order: '_Literal["C", "F"]' = "C",
    mem_flags: int = mem_attach_flags.GLOBAL,
) -> "_np.ndarray[_Any, _Any]":
    """A zeroed managed ndarray."""
    return _driver._managed(shape, dtype, order, int(mem_flags), True)


def managed_empty_like(
    ary: "_np.ndarray[_Any, _Any]", mem_flags: int = mem_attach_flags.GLOBAL
) -> "_np.ndarray[_Any, _Any]":
    return managed_empty(ary.shape, ary.dtype, _order_of(ary), mem_flags)


def managed_zeros_like(
    ary: "_np.ndarray[_Any, _Any]", mem_flags: int = mem_attach_flags.GLOBAL
) -> "_np.ndarray[_Any, _Any]":
    return managed_zeros(ary.shape, ary.dtype, _order_of(ary), mem_flags)


# ---- pitched copies ----

from pygpu import textures as _textures  # noqa: E402


class Memcpy2D(_textures._MemcpyFields):
    """A 2-D (pitched) copy, set up attribute by attribute as in PyCUDA:

        c = Memcpy2D()
        c.set_src_host(a); c.set_dst_device(dev)
        c.width_in_bytes = ...; c.height = ...; c.src_pitch = ...; c.dst_pitch = ...
        c()            # or c(stream)

    The fields read back as PyCUDA's do (0 until set); ``src_memory_type``
    and ``src_device`` follow the ``set_src_*()`` calls, the ``dst_*``
    fields the ``set_dst_*()`` ones."""

    def __call__(self, stream_or_aligned: _Any = None, aligned: "bool | None" = None) -> None:
        """c(aligned=True) copies now; c(stream) enqueues on a stream."""
        if self._src_kind is None or self._dst_kind is None:
            raise ValueError("Memcpy2D: set a source and a destination first")
        stream = None if isinstance(stream_or_aligned, bool) else stream_or_aligned
        src_kind = self._resolve(self._src_kind, self._src)
        dst_kind = self._resolve(self._dst_kind, self._dst)
        if "a" in (src_kind, dst_kind):
            # an array side: the 3-D copy, one slice deep (src/texture/cuarray.c)
            _driver._memcpy_3d(
                "Memcpy2D",
                (src_kind, self._src, self.src_x_in_bytes, self.src_y, 0, self.src_pitch, 0),
                (dst_kind, self._dst, self.dst_x_in_bytes, self.dst_y, 0, self.dst_pitch, 0),
                self.width_in_bytes,
                self.height,
                1,
                stream,
            )
            return
        _driver._memcpy_2d(
            self._dst,
            self.dst_pitch,
            dst_kind == "h",
            self._src,
            self.src_pitch,
            src_kind == "h",
            self.width_in_bytes,
            self.height,
            self.src_x_in_bytes,
            self.src_y,
            self.dst_x_in_bytes,
            self.dst_y,
            stream,
        )


# ---- CUDA arrays, texture/surface objects, TMA tensor maps (pygpu/textures.py) ----

from pygpu.textures import (  # noqa: E402,F401  (re-exported API)
    Array,
    ArrayDescriptor,
    ArrayDescriptor3D,
    Memcpy3D,
    SurfaceObject,
    TensorMap,
    TextureObject,
    address_mode,
    array3d_flags,
    array_format,
    array_format_to_dtype,
    array_to_matrix,
    array_to_np,
    dtype_to_array_format,
    filter_mode,
    gpuarray_to_array,
    make_multichannel_2d_array,
    matrix_to_array,
    memcpy_atoh,
    memcpy_htoa,
    np_to_array,
    Memcpy3DPeer,
    memcpy_atoa,
    memcpy_atod,
    memcpy_dtoa,
    read_mode,
    resource_type,
    tensor_map_data_type,
    tensor_map_float_oob_fill,
    tensor_map_interleave,
    tensor_map_l2_promotion,
    tensor_map_swizzle,
)


# ---- In / Out / InOut ----


class In(ArgumentHandler):
    """Copy a NumPy array to the device before the launch; the kernel gets
    a pointer to the copy."""

    copy_in, copy_out = True, False

    def __init__(self, array: "_np.ndarray") -> None:
        if not isinstance(array, _np.ndarray):
            raise TypeError(
                "%s() takes a NumPy array, not %s" % (type(self).__name__, type(array).__name__)
            )
        if not (array.flags.c_contiguous or array.flags.f_contiguous):
            raise ValueError(
                "%s(): the array is not contiguous "
                "(use numpy.ascontiguousarray)" % type(self).__name__
            )
        if self.copy_out and not array.flags.writeable:
            raise ValueError("%s(): the array is read-only" % type(self).__name__)
        self.array = array

    def __repr__(self):
        return "%s(<%s array %s>)" % (type(self).__name__, self.array.dtype, self.array.shape)

    # PyCUDA's ArgumentHandler protocol, for code that calls it itself or
    # overrides it in a subclass (a launch then follows the protocol)
    dev_alloc = None

    def get_device_alloc(self) -> _Any:
        """The device copy of the array (allocated on the first call)."""
        if self.dev_alloc is None:
            self.dev_alloc = mem_alloc(max(self.array.nbytes, 1))
        return self.dev_alloc

    def pre_call(self, stream: _Any) -> None:
        """Before a launch: copy the array in (In, InOut)."""
        if self.copy_in:
            memcpy_htod(self.get_device_alloc(), self.array)

    def post_call(self, stream: _Any) -> None:
        """After a launch: copy the array back (Out, InOut)."""
        if self.copy_out:
            memcpy_dtoh(self.array, self.get_device_alloc())


def _own_protocol(a):
    """Whether an In/Out/InOut subclass overrides PyCUDA's protocol."""
    t = type(a)
    return (
        t.pre_call is not In.pre_call
        or t.post_call is not In.post_call
        or t.get_device_alloc is not In.get_device_alloc
    )


class Out(In):
    """Copy the device buffer back into the array after the launch."""

    copy_in, copy_out = False, True


class InOut(In):
    """Copy in before and back out after the launch."""

    copy_in, copy_out = True, True


_HANDLER_TYPES = (In, Out, InOut)


def _alloc_for_handler(nbytes, stream):
    # the driver's stream-ordered pool: cheap, reused, freed on the stream
    try:
        return mem_alloc_async(nbytes, stream)
    except LogicError:
        return mem_alloc(nbytes)


def _handler_sync(stream):
    if isinstance(stream, Stream):
        stream.synchronize()
    elif stream is None:
        Stream.null().synchronize()
    else:
        Stream.from_handle(stream).synchronize()


def _handler_copy_in(dev, ary, stream):
    """In/InOut: an array of at least the staging threshold goes through
    staging (a synchronous copy on staging's own streams, so `stream` is
    synchronized first: the stream-ordered allocation and the work queued
    there come before it); a smaller one is queued on `stream`."""
    if _driver._staging_applies(ary.nbytes):
        _handler_sync(stream)
        memcpy_htod(dev, ary)
    else:
        memcpy_htod_async(dev, ary, stream)


def _handler_copy_out(ary, dev, stream):
    """Out/InOut: as _handler_copy_in, the other way (after the kernel)."""
    if _driver._staging_applies(ary.nbytes):
        _handler_sync(stream)
        memcpy_dtoh(ary, dev)
    else:
        memcpy_dtoh_async(ary, dev, stream)


def _handlers_begin(args, stream):
    """Function.__call__'s hook for In/Out/InOut arguments: returns the
    arguments with each handler replaced by a device copy, and what
    _handlers_end needs.  The launch configuration is parsed once, in C."""
    new_args = list(args)
    outs = []
    allocs = []
    posts = []
    try:
        for i, a in enumerate(args):
            if isinstance(a, ArgumentHandler) and (
                not isinstance(a, In) or (type(a) not in _HANDLER_TYPES and _own_protocol(a))
            ):
                # PyCUDA's protocol, for an ArgumentHandler subclass of its own
                # (reikna's Buffer): get_device_alloc() is the pointer,
                # pre_call(stream) runs before the launch, post_call(stream) after
                get = getattr(a, "get_device_alloc", None)
                if get is None:
                    raise TypeError(
                        "%s is an ArgumentHandler without get_device_alloc()" % type(a).__name__
                    )
                new_args[i] = get()
                if hasattr(a, "pre_call"):
                    a.pre_call(stream)
                if hasattr(a, "post_call"):
                    posts.append(a.post_call)
            elif isinstance(a, ArgumentHandler):
                dev = _alloc_for_handler(a.array.nbytes, stream)
                allocs.append(dev)
                if a.copy_in:
                    _handler_copy_in(dev, a.array, stream)
                if a.copy_out:
                    outs.append((a.array, dev))
                new_args[i] = dev
    except BaseException:
        for dev in allocs:
            dev.free()
        raise
    return tuple(new_args), (outs, allocs, posts)


def _handlers_end(state, stream, launched):
    """After the launch (or its failure): copy Out/InOut arrays back, wait
    for the stream, run PyCUDA-style handlers' post_call, free the device
    copies."""
    outs, allocs, posts = state
    try:
        if launched:
            for ary, dev in outs:
                _handler_copy_out(ary, dev, stream)
            _handler_sync(stream)
            for post in posts:
                post(stream)
    finally:
        for dev in allocs:
            dev.free()


_driver._set_handler_hooks(_handlers_begin, _handlers_end)


# Device.get_attributes() (src/device/device.c) gives the attributes PyCUDA 2026.1
# names (its device_attribute members, one name a value: the first dir()
# lists, as its get_attributes() keys them), so a ported program prints what
# it printed under PyCUDA (its examples/dump_properties.py); get_attribute()
# and get_attributes(every=True) read every member.
_PYCUDA_DEVICE_ATTRIBUTES = frozenset(
    """
    ASYNC_ENGINE_COUNT CAN_MAP_HOST_MEMORY CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM
    CLOCK_RATE COMPUTE_CAPABILITY_MAJOR COMPUTE_CAPABILITY_MINOR COMPUTE_MODE
    COMPUTE_PREEMPTION_SUPPORTED CONCURRENT_KERNELS CONCURRENT_MANAGED_ACCESS
    DIRECT_MANAGED_MEM_ACCESS_FROM_HOST ECC_ENABLED GENERIC_COMPRESSION_SUPPORTED
    GLOBAL_L1_CACHE_SUPPORTED GLOBAL_MEMORY_BUS_WIDTH GPU_OVERLAP
    HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED HANDLE_TYPE_WIN32_HANDLE_SUPPORTED
    HANDLE_TYPE_WIN32_KMT_HANDLE_SUPPORTED HOST_NATIVE_ATOMIC_SUPPORTED INTEGRATED
    KERNEL_EXEC_TIMEOUT L2_CACHE_SIZE LOCAL_L1_CACHE_SUPPORTED MANAGED_MEMORY
    MAXIMUM_SURFACE1D_LAYERED_LAYERS MAXIMUM_SURFACE1D_LAYERED_WIDTH
    MAXIMUM_SURFACE1D_WIDTH MAXIMUM_SURFACE2D_HEIGHT MAXIMUM_SURFACE2D_LAYERED_HEIGHT
    MAXIMUM_SURFACE2D_LAYERED_LAYERS MAXIMUM_SURFACE2D_LAYERED_WIDTH
    MAXIMUM_SURFACE2D_WIDTH MAXIMUM_SURFACE3D_DEPTH MAXIMUM_SURFACE3D_HEIGHT
    MAXIMUM_SURFACE3D_WIDTH MAXIMUM_SURFACECUBEMAP_LAYERED_LAYERS
    MAXIMUM_SURFACECUBEMAP_LAYERED_WIDTH MAXIMUM_SURFACECUBEMAP_WIDTH
    MAXIMUM_TEXTURE1D_LAYERED_LAYERS MAXIMUM_TEXTURE1D_LAYERED_WIDTH
    MAXIMUM_TEXTURE1D_LINEAR_WIDTH MAXIMUM_TEXTURE1D_MIPMAPPED_WIDTH
    MAXIMUM_TEXTURE1D_WIDTH MAXIMUM_TEXTURE2D_ARRAY_HEIGHT
    MAXIMUM_TEXTURE2D_ARRAY_NUMSLICES MAXIMUM_TEXTURE2D_ARRAY_WIDTH
    MAXIMUM_TEXTURE2D_GATHER_HEIGHT MAXIMUM_TEXTURE2D_GATHER_WIDTH
    MAXIMUM_TEXTURE2D_HEIGHT MAXIMUM_TEXTURE2D_LINEAR_HEIGHT
    MAXIMUM_TEXTURE2D_LINEAR_PITCH MAXIMUM_TEXTURE2D_LINEAR_WIDTH
    MAXIMUM_TEXTURE2D_MIPMAPPED_HEIGHT MAXIMUM_TEXTURE2D_MIPMAPPED_WIDTH
    MAXIMUM_TEXTURE2D_WIDTH MAXIMUM_TEXTURE3D_DEPTH MAXIMUM_TEXTURE3D_DEPTH_ALTERNATE
    MAXIMUM_TEXTURE3D_HEIGHT MAXIMUM_TEXTURE3D_HEIGHT_ALTERNATE MAXIMUM_TEXTURE3D_WIDTH
    MAXIMUM_TEXTURE3D_WIDTH_ALTERNATE MAXIMUM_TEXTURECUBEMAP_LAYERED_LAYERS
    MAXIMUM_TEXTURECUBEMAP_LAYERED_WIDTH MAXIMUM_TEXTURECUBEMAP_WIDTH
    MAX_BLOCKS_PER_MULTIPROCESSOR MAX_BLOCK_DIM_X MAX_BLOCK_DIM_Y MAX_BLOCK_DIM_Z
    MAX_GRID_DIM_X MAX_GRID_DIM_Y MAX_GRID_DIM_Z MAX_PERSISTING_L2_CACHE_SIZE MAX_PITCH
    MAX_REGISTERS_PER_BLOCK MAX_REGISTERS_PER_MULTIPROCESSOR MAX_SHARED_MEMORY_PER_BLOCK
    MAX_SHARED_MEMORY_PER_BLOCK_OPTIN MAX_SHARED_MEMORY_PER_MULTIPROCESSOR
    MAX_THREADS_PER_BLOCK MAX_THREADS_PER_MULTIPROCESSOR MEMORY_CLOCK_RATE
    MEMORY_POOLS_SUPPORTED MULTIPROCESSOR_COUNT MULTI_GPU_BOARD MULTI_GPU_BOARD_GROUP_ID
    PAGEABLE_MEMORY_ACCESS PAGEABLE_MEMORY_ACCESS_USES_HOST_PAGE_TABLES PCI_BUS_ID
    PCI_DEVICE_ID PCI_DOMAIN_ID READ_ONLY_HOST_REGISTER_SUPPORTED
    RESERVED_SHARED_MEMORY_PER_BLOCK SINGLE_TO_DOUBLE_PRECISION_PERF_RATIO
    STREAM_PRIORITIES_SUPPORTED SURFACE_ALIGNMENT TCC_DRIVER TEXTURE_ALIGNMENT
    TEXTURE_PITCH_ALIGNMENT TOTAL_CONSTANT_MEMORY UNIFIED_ADDRESSING WARP_SIZE
""".split()
)


# a literal list, so type checkers see the re-exports (tests/project/test_packaging.py
# checks it names every public name)
__all__ = [
    "Array",
    "ArrayDescriptor",
    "ArrayDescriptor3D",
    "Memcpy3D",
    "SurfaceObject",
    "TensorMap",
    "TextureObject",
    "address_mode",
    "array3d_flags",
    "array_format",
    "array_format_to_dtype",
    "array_to_matrix",
    "array_to_np",
    "dtype_to_array_format",
    "filter_mode",
    "gpuarray_to_array",
    "make_multichannel_2d_array",
    "matrix_to_array",
    "memcpy_atoh",
    "memcpy_htoa",
    "np_to_array",
    "read_mode",
    "resource_type",
    "tensor_map_data_type",
    "tensor_map_float_oob_fill",
    "tensor_map_interleave",
    "tensor_map_l2_promotion",
    "tensor_map_swizzle",
    "Memcpy3DPeer",
    "memcpy_atoa",
    "memcpy_atod",
    "memcpy_dtoa",
    "Linker",
    "jit_input_type",  # noqa: F822 (module __getattr__)
    "PointerHolderBase",
    "aligned_empty",
    "compute_mode",
    "ArgumentHandler",
    "BoundLaunch",
    "CompileError",
    "set_staging",
    "staging_settings",
    "BlockCache",
    "block_cache",
    "block_cache_settings",
    "set_block_cache",
    "staging_stats",
    "Context",
    "CudaUnavailableError",
    "Device",
    "DeviceAllocation",
    "GreenContext",
    "Error",
    "Event",
    "Function",
    "HostAllocation",
    "In",
    "InOut",
    "KernelTime",
    "LaunchError",
    "LogicError",
    "Memcpy2D",
    "MemoryError",
    "Module",
    "Out",
    "RuntimeError",
    "Stream",
    "ctx_flags",
    "device_attribute",
    "error_code",
    "event_flags",
    "from_device",
    "from_device_like",
    "func_cache",
    "function_attribute",
    "get_driver_version",
    "get_version",
    "host_alloc_flags",
    "init",
    "jit_option",
    "limit",
    "managed_empty",
    "managed_empty_like",
    "managed_zeros",
    "managed_zeros_like",
    "mem_alloc",
    "mem_alloc_async",
    "mem_alloc_like",
    "mem_alloc_managed",
    "mem_alloc_pitch",
    "mem_attach_flags",
    "mem_get_info",
    "mem_host_register_flags",
    "mem_prefetch",
    "memcpy_dtod",
    "memcpy_dtod_async",
    "memcpy_dtoh",
    "memcpy_dtoh_async",
    "memcpy_htod",
    "memcpy_htod_async",
    "memcpy_peer",
    "memcpy_peer_async",
    "memset_d16",
    "memset_d16_async",
    "memset_d32",
    "memset_d32_async",
    "memset_d8",
    "memset_d8_async",
    "module_from_buffer",
    "module_from_file",
    "pagelocked_empty",
    "pagelocked_empty_like",
    "pagelocked_zeros",
    "pagelocked_zeros_like",
    "register_host_memory",
    "stream_flags",
    "to_device",
    "Graph",
    "GraphExec",
    "GraphNode",
    "capture_graph",
    "capture_mode",
    "graph_conditional_type",
    "graph_instantiate_flags",
    "graph_node_type",
    "IPCMemoryHandle",
    "MemoryPool",
    "VirtualBuffer",
    "forked_from",
    "ipc_mem_flags",
    "mem_get_ipc_handle",
    "HostBlock",
    "free_host_cache",
    "host_cache_stats",
    "set_host_cache",
]


def _getattr_linking(name: str) -> _Any:
    # PyCUDA has jit_input_type in pycuda.driver; pygpu's lives with the
    # linking helpers (pygpu.linking imports this module, so: lazily)
    if name == "jit_input_type":
        from pygpu.linking import jit_input_type

        return jit_input_type
    raise AttributeError("module 'pygpu.driver' has no attribute %r" % name)


# ---- OpenGL interop (src/interop/graphics.c; PyCUDA's names, pygpu.gl wraps them) ----

from pygpu._driver import (  # noqa: E402,F401  (re-exported API)
    RegisteredBuffer,
    RegisteredImage,
    RegisteredMapping,
    RegisteredObject,
)


@_driver._enum_tables
class graphics_register_flags(_enum.IntEnum):
    """CUgraphicsRegisterFlags: how CUDA will use a registered GL object."""

    NONE = 0
    READ_ONLY = 1
    WRITE_DISCARD = 2
    SURFACE_LDST = 4
    TEXTURE_GATHER = 8

    def __str__(self):
        return self.name


def have_gl_ext() -> bool:
    """Whether OpenGL interop is built in: always True for pygpu (it needs no
    GL library to build; pygpu.gl loads libEGL/libGL only when asked)."""
    return True


__all__ += [
    "RegisteredBuffer",
    "RegisteredImage",
    "RegisteredMapping",
    "RegisteredObject",
    "graphics_register_flags",
    "have_gl_ext",
]
# ---- the rest of PyCUDA's pycuda.driver (tests/pycuda_compat/test_pycuda_names.py) ----

from pygpu._driver import (  # noqa: E402,F401  (src/memory/memset.c, src/core/cuda_enums.h)
    array_cubemap_face,
    initialize_profiler,
    jit_fallback,
    jit_target,
    mem_get_address_range,
    memory_type,
    memset_d2d8,
    memset_d2d8_async,
    memset_d2d16,
    memset_d2d16_async,
    memset_d2d32,
    memset_d2d32_async,
    pointer_attribute,
    profiler_output_mode,
    shared_config,
)

start_profiler = _driver.profiler_start
stop_profiler = _driver.profiler_stop
# PyCUDA's names of the CUDA array copies with a host side
py_memcpy_htoa = memcpy_htoa
py_memcpy_atoh = memcpy_atoh

CUDA_DEBUGGING = False


def set_debugging(flag: bool = True) -> None:
    """Compile later kernels for the debugger (NVRTC's --device-debug, as
    PyCUDA adds nvcc's -g -G); ``python -m pygpu.debug script.py`` sets it."""
    global CUDA_DEBUGGING
    CUDA_DEBUGGING = bool(flag)


class _TypeTest(type):
    """The metaclass of PyCUDA's host and managed allocation classes, which
    in pygpu are kinds of one C type (HostAllocation, DeviceAllocation):
    isinstance() asks the object which kind it is; the classes make no
    objects themselves (PyCUDA's cannot be instantiated from Python
    either)."""

    def __instancecheck__(cls, obj):
        return cls._test(obj)

    def __subclasscheck__(cls, sub):
        return type.__subclasscheck__(cls, sub) or any(issubclass(sub, b) for b in cls._kinds_of())

    def __call__(cls, *args, **kwargs):
        raise TypeError(
            "%s objects come from %s; they cannot be made directly" % (cls.__name__, cls._made_by)
        )


class HostPointer(metaclass=_TypeTest):
    """Host memory the device can reach: page-locked (pagelocked_empty),
    registered (register_host_memory) or aligned (aligned_empty)."""

    _made_by = "pagelocked_empty(), register_host_memory() and aligned_empty()"
    # PyCUDA's methods, those of the objects this class tests for
    # (HostAllocation's; AlignedHostAllocation has its own)
    get_device_pointer = HostAllocation.get_device_pointer

    @staticmethod
    def _test(obj):
        return isinstance(obj, (HostAllocation, AlignedHostAllocation))

    @staticmethod
    def _kinds_of():
        return (HostAllocation, AlignedHostAllocation)


class PagelockedHostAllocation(HostPointer):
    """The .base of pagelocked_empty()'s arrays (cuMemHostAlloc)."""

    _made_by = "pagelocked_empty()"
    free = HostAllocation.free
    get_flags = HostAllocation.get_flags

    @staticmethod
    def _test(obj):
        return isinstance(obj, HostAllocation) and not obj.registered

    @staticmethod
    def _kinds_of():
        return ()


class RegisteredHostMemory(HostPointer):
    """register_host_memory()'s result (cuMemHostRegister); .base of the
    arrays it returns."""

    _made_by = "register_host_memory()"
    unregister = HostAllocation.unregister

    @staticmethod
    def _test(obj):
        return isinstance(obj, HostAllocation) and obj.registered

    @staticmethod
    def _kinds_of():
        return ()


class ManagedAllocation(metaclass=_TypeTest):
    """Managed (unified) memory: mem_alloc_managed()'s result and the
    .base of managed_empty()'s arrays, a DeviceAllocation."""

    _made_by = "mem_alloc_managed() and managed_empty()"
    # PyCUDA's methods, DeviceAllocation's
    __int__ = DeviceAllocation.__int__
    __index__ = DeviceAllocation.__index__
    as_buffer = DeviceAllocation.as_buffer
    attach = DeviceAllocation.attach
    free = DeviceAllocation.free
    get_device_pointer = DeviceAllocation.get_device_pointer

    @staticmethod
    def _test(obj):
        return _driver._allocation_kind(obj) == 1

    @staticmethod
    def _kinds_of():
        return ()


ManagedAllocationOrStub = ManagedAllocation


# ndarray's constructor, said outright (NumPy's type gives inspect no
# signature on Python 3.9)
def _aligned_host_signature() -> _Any:
    import inspect

    P = inspect.Parameter
    return inspect.Signature(
        [P("shape", P.POSITIONAL_OR_KEYWORD)]
        + [
            P(n, P.POSITIONAL_OR_KEYWORD, default=d)
            for n, d in (
                ("dtype", float),
                ("buffer", None),
                ("offset", 0),
                ("strides", None),
                ("order", None),
            )
        ]
    )


class AlignedHostAllocation(_np.ndarray):
    """The bytes behind aligned_empty()'s arrays (their .base): ordinary
    host memory, freed when the last array over it dies."""

    __signature__ = _aligned_host_signature()

    def free(self) -> None:
        """Accepted for PyCUDA's sake; the memory goes with the last array
        that uses it."""

    def get_device_pointer(self) -> "_NoReturn":
        raise LogicError(
            "AlignedHostAllocation.get_device_pointer(): the memory is not "
            "page-locked; register it (register_host_memory) and use the "
            "registered array's base"
        )


def aligned_zeros(
    shape: "int | tuple[int, ...]",
    dtype: "_np.typing.DTypeLike" = _np.float64,
    order: '_Literal["C", "F"]' = "C",
    alignment: int = 4096,
) -> "_np.ndarray[_Any, _Any]":
    """A zeroed aligned_empty()."""
    result = aligned_empty(shape, dtype, order, alignment)
    result.fill(0)
    return result


def _order_or_raise(ary):
    if ary.flags.c_contiguous:
        return "C"
    if ary.flags.f_contiguous:
        return "F"
    raise ValueError("could not detect array order (the array is not contiguous)")


def aligned_empty_like(
    ary: "_np.ndarray[_Any, _Any]", alignment: int = 4096
) -> "_np.ndarray[_Any, _Any]":
    """aligned_empty() with ary's shape, dtype and order."""
    return aligned_empty(ary.shape, ary.dtype, _order_or_raise(ary), alignment)


def aligned_zeros_like(
    ary: "_np.ndarray[_Any, _Any]", alignment: int = 4096
) -> "_np.ndarray[_Any, _Any]":
    """aligned_zeros() with ary's shape, dtype and order."""
    return aligned_zeros(ary.shape, ary.dtype, _order_or_raise(ary), alignment)


# PyCUDA's C-level names of things pygpu keeps in Python modules that import
# this one: resolved on first use
_ELSEWHERE = {
    "bitlog2": "pygpu.tools",
    "DeviceMemoryPool": "pygpu.tools",
    "PageLockedMemoryPool": "pygpu.tools",
    "PageLockedAllocator": "pygpu.tools",
    "PooledDeviceAllocation": "pygpu.tools",
    "get_curand_version": "pygpu.curandom",
    "direction_vector_set": "pygpu.curandom",
}
_getattr_before_elsewhere = _getattr_linking


def __getattr__(name: str) -> _Any:  # the names above, then jit_input_type
    where = _ELSEWHERE.get(name)
    if where is not None:
        import importlib

        value = getattr(importlib.import_module(where), name)
        globals()[name] = value
        return value
    return _getattr_before_elsewhere(name)


def __dir__():
    return sorted(set(globals()) | set(_ELSEWHERE) | {"jit_input_type"})


__all__ += [
    "array_cubemap_face",
    "initialize_profiler",
    "jit_fallback",
    "jit_target",
    "mem_get_address_range",
    "memory_type",
    "memset_d2d8",
    "memset_d2d8_async",
    "memset_d2d16",
    "memset_d2d16_async",
    "memset_d2d32",
    "memset_d2d32_async",
    "pointer_attribute",
    "profiler_output_mode",
    "shared_config",
    "start_profiler",
    "stop_profiler",
    "py_memcpy_htoa",
    "py_memcpy_atoh",
    "CUDA_DEBUGGING",
    "set_debugging",
    "HostPointer",
    "PagelockedHostAllocation",
    "RegisteredHostMemory",
    "ManagedAllocation",
    "ManagedAllocationOrStub",
    "AlignedHostAllocation",
    "aligned_zeros",
    "aligned_empty_like",
    "aligned_zeros_like",
] + sorted(_ELSEWHERE)
