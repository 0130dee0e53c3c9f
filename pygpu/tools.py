"""Memory pools and the helpers of kernel generators, as in pycuda.tools.

DeviceMemoryPool keeps freed device blocks and hands them out again, so a
loop that allocates the same sizes over and over stops calling cuMemAlloc;
DebugMemoryPool is one that also records where each live allocation was
made.  PageLockedMemoryPool does the same for page-locked host arrays (made
by a PageLockedAllocator), whose allocation is far slower still (pinning
pages costs milliseconds per MB).

For stream-ordered pooling by the driver itself, see
pygpu.driver.mem_alloc_async.

The kernel generators' helpers (below the pools): dtype_to_ctype,
get_or_register_dtype/register_dtype, parse_c_arg, VectorArg, ScalarArg,
context_dependent_memoize, clear_context_caches, and the test helpers
mark_cuda_test and init_cuda_context_fixture.

autotune (pygpu.autotune): compile, check and time the variants of a kernel
on the caller's arguments and launch the fastest, remembered on disk.
"""

from typing import Any, Callable, Iterator, Literal, Sequence, TypeVar
import operator
import threading
import weakref

import numpy as np

from pygpu import driver
from pygpu.autotune import AutotuneError, Tuned, autotune  # noqa: F401  (run-time tuning)

__all__ = [
    "bin_size",
    "bitlog2",
    "PooledDeviceAllocation",
    "DeviceMemoryPool",
    "PageLockedMemoryPool",
    "PageLockedAllocator",
    "DebugMemoryPool",
    "dtype_to_ctype",
    "get_or_register_dtype",
    "register_dtype",
    "parse_c_arg",
    "get_arg_type",
    "Argument",
    "VectorArg",
    "ScalarArg",
    "context_dependent_memoize",
    "clear_context_caches",
    "make_default_context",
    "get_default_device",
    "mark_cuda_test",
    "init_cuda_context_fixture",
    "autotune",
    "Tuned",
    "AutotuneError",
]


def bin_size(nbytes: int) -> int:
    """The block size a request of nbytes is served from: four size classes
    per power of two (so at most 25% is wasted), at least 256 bytes."""
    nbytes = operator.index(nbytes)  # a Python int: NumPy ints would wrap
    if nbytes <= 256:
        return 256
    top = 1 << (int(nbytes - 1).bit_length() - 1)  # largest power of two < nbytes
    step = top // 4
    return ((nbytes + step - 1) // step) * step


def bitlog2(n: int) -> int:
    """floor(log2(n)) for n >= 1 (PyCUDA's bitlog2)."""
    n = operator.index(n)
    if n < 1:
        raise ValueError("bitlog2 needs n >= 1, got %d" % n)
    return n.bit_length() - 1


def _bin_number(nbytes):
    """The number of bin_size(nbytes)'s size class: 0 for 256 bytes, then
    four classes per power of two."""
    nbytes = operator.index(nbytes)
    if nbytes <= 256:
        return 0
    e = (nbytes - 1).bit_length() - 1
    step = (1 << e) // 4
    return (e - 8) * 4 + (nbytes + step - 1) // step - 5 + 1


def _alloc_size(bin_nr):
    """The block size of size class bin_nr (the inverse of _bin_number)."""
    bin_nr = operator.index(bin_nr)
    if bin_nr < 0:
        raise ValueError("bin numbers are >= 0, got %d" % bin_nr)
    if bin_nr == 0:
        return 256
    e, k = (bin_nr - 1) // 4 + 8, (bin_nr - 1) % 4 + 5
    return k * ((1 << e) // 4)


def _pool_repr(pool):
    return "<%s: %d active block(s), %d held (%d bytes)%s>" % (
        type(pool).__name__,
        pool.active_blocks,
        pool.held_blocks,
        pool.held_bytes,
        "" if pool._holding else ", not holding",
    )


class PooledDeviceAllocation(int):
    """A device pointer (an int, so it goes anywhere an address does) whose
    memory returns to its pool on free() or when it dies."""

    _pool: Any
    _alloc: Any
    size: int

    def __new__(cls, pool: Any, alloc: Any, size: int) -> "PooledDeviceAllocation":
        self = int.__new__(cls, int(alloc))
        self._pool, self._alloc, self.size = pool, alloc, size
        return self

    @property
    def __cuda_array_interface__(self):
        if self._alloc is None:
            raise driver.LogicError("the pooled allocation was freed")
        return {
            "shape": (self.size,),
            "typestr": "|u1",
            "data": (int(self), False),
            "version": 3,
            "strides": None,
            "stream": None,
        }

    def free(self) -> None:
        """Give the block back to the pool (idempotent)."""
        alloc, self._alloc = self._alloc, None
        if alloc is not None:
            self._pool._give_back(alloc, self.size)

    def __del__(self):
        try:
            self.free()
        except Exception:  # interpreter teardown: the block is freed anyway
            pass

    def __len__(self):
        """The bytes asked for (PyCUDA's len())."""
        return self.size

    def __repr__(self):
        return "<PooledDeviceAllocation at 0x%x, %d bytes>" % (int(self), self.size)


class DeviceMemoryPool:
    """Hands out device memory from blocks kept after free().

        pool = DeviceMemoryPool()
        a = pool.allocate(n)        # PooledDeviceAllocation
        f(a, ..., block=...)        # anywhere a pointer goes
        a.free()                    # or let it die: back to the pool

    allocator(nbytes) makes a new block (default pygpu.driver.mem_alloc;
    e.g. mem_alloc_managed for a pool of managed memory): it returns an
    object whose int() is the address and whose free() (or death) frees the
    memory.
    """

    def __init__(self, allocator: "Callable[[int], Any] | None" = None) -> None:
        if allocator is not None and not callable(allocator):
            raise TypeError(
                "DeviceMemoryPool(): allocator must be callable (nbytes -> "
                "allocation), not %s" % type(allocator).__name__
            )
        self._allocator = allocator or driver.mem_alloc
        self._bins: "dict[int, list[Any]]" = {}
        self._lock = threading.Lock()
        self._active_blocks = 0
        self._active_bytes = self._active_block_bytes = 0
        self._holding = True

    @property
    def active_blocks(self) -> int:
        """Blocks in use (PyCUDA's active_blocks)."""
        return self._active_blocks

    @property
    def held_blocks(self) -> int:
        """Blocks kept for reuse."""
        return sum(len(v) for v in self._bins.values())

    @property
    def held_bytes(self) -> int:
        """Bytes of device memory kept for reuse."""
        return sum(size * len(v) for size, v in list(self._bins.items()))

    @property
    def active_bytes(self) -> int:
        """Bytes the active allocations asked for (PyCUDA's active_bytes)."""
        return self._active_bytes

    @property
    def managed_bytes(self) -> int:
        """Bytes of the blocks in use and held (PyCUDA's managed_bytes)."""
        return self._active_block_bytes + self.held_bytes

    def __repr__(self):
        return _pool_repr(self)

    @staticmethod
    def bin_number(nbytes: int) -> int:
        """The size class a request of nbytes is served from (PyCUDA's)."""
        return _bin_number(nbytes)

    @staticmethod
    def alloc_size(bin_nr: int) -> int:
        """The bytes a block of size class bin_nr holds (PyCUDA's)."""
        return _alloc_size(bin_nr)

    def allocate(self, nbytes: int) -> "PooledDeviceAllocation":
        nbytes = operator.index(nbytes)
        if nbytes < 0:
            raise ValueError("nbytes must be >= 0, got %d" % nbytes)
        size = bin_size(nbytes)
        with self._lock:
            stack = self._bins.get(size)
            alloc = stack.pop() if stack else None
        if alloc is None:
            try:
                alloc = self._allocator(size)
            except driver.MemoryError:
                self.free_held()
                alloc = self._allocator(size)
        with self._lock:
            self._active_blocks += 1
            self._active_bytes += nbytes
            self._active_block_bytes += size
        return PooledDeviceAllocation(self, alloc, nbytes)

    def _give_back(self, alloc, nbytes):
        size = bin_size(nbytes)
        with self._lock:
            self._active_blocks -= 1
            self._active_bytes -= nbytes
            self._active_block_bytes -= size
            if self._holding:
                self._bins.setdefault(size, []).append(alloc)
                return
        _free_block(alloc)

    def free_held(self) -> None:
        """Free every block kept for reuse."""
        with self._lock:
            bins, self._bins = self._bins, {}
        for stack in bins.values():
            for a in stack:
                _free_block(a)

    def stop_holding(self) -> None:
        """Free the held blocks and stop keeping freed ones."""
        self._holding = False
        self.free_held()


def _free_block(alloc):
    free = getattr(alloc, "free", None)
    if free is not None:
        free()


class DebugMemoryPool(DeviceMemoryPool):
    """A DeviceMemoryPool that remembers where each live allocation was
    made, to find what holds device memory (PyCUDA's DebugMemoryPool)::

        pool = DebugMemoryPool(logfile=open("alloc.log", "w"))
        ...
        pool.report()               # outstanding allocations, by size and call site
        for rec in pool.outstanding():
            print(rec.nbytes, rec.description); print("".join(rec.stack.format()))

    Each allocate() writes PyCUDA's log entry to logfile (None:
    sys.stdout; open(os.devnull, "w") silences it): its size,
    free and total device memory, the pool's held and active blocks, the
    call site, and a histogram of what is outstanding.  The call site is
    the innermost stack_depth frames outside pygpu.tools, "file:line:function"
    joined by "|".  interactive=True is PyCUDA's default behaviour: it asks
    once per call site and size for a mnemonic to log instead (kept in
    stacktrace_mnemonics, in memory) and waits for [Enter] after each
    entry; pygpu's default is False, so a script never blocks on input.
    """

    class Outstanding(tuple):
        """One live allocation: (nbytes, description, stack)."""

        __slots__ = ()

        def __new__(cls, nbytes, description, stack):
            return tuple.__new__(cls, (nbytes, description, stack))

        nbytes = property(lambda self: self[0], doc="Bytes asked for.")
        description = property(lambda self: self[1], doc="The call site (or its mnemonic).")
        stack = property(lambda self: self[2], doc="traceback.StackSummary of the allocating call.")

    def __init__(
        self,
        interactive: bool = False,
        logfile: Any = None,
        allocator: "Callable[[int], Any] | None" = None,
        stack_depth: int = 6,
    ) -> None:
        super().__init__(allocator)
        stack_depth = operator.index(stack_depth)
        if stack_depth < 1:
            raise ValueError("DebugMemoryPool(): stack_depth must be >= 1, got %d" % stack_depth)
        self.interactive = bool(interactive)
        self.logfile = logfile
        self.stack_depth = stack_depth
        self.last_free: "int | None" = None
        self.stacktrace_mnemonics: "dict[Any, Any]" = {}
        self._records: "dict[int, Any]" = {}  # id(block) -> Outstanding, while the block is active

    def _log(self, text):
        import sys

        print(text, file=self.logfile if self.logfile is not None else sys.stdout)

    def _stack(self):
        import traceback

        frames = [f for f in traceback.extract_stack() if f.filename != __file__]
        return traceback.StackSummary.from_list(frames[-self.stack_depth :])

    def describe(self, stack: Any, size: int) -> str:
        """The description logged for an allocation of size bytes made at
        stack (a traceback.StackSummary)."""
        import os

        where = "|".join(
            "%s:%d:%s" % (os.path.basename(f.filename), f.lineno, f.name) for f in stack
        )
        if not self.interactive:
            return where
        # one mnemonic per call chain (functions, not lines) and size
        key = (tuple((os.path.basename(f.filename), f.name) for f in stack), size)
        if key not in self.stacktrace_mnemonics:
            self._log("  new call site for %d bytes: %s" % (size, where))
            while True:
                mnemonic = input("Enter mnemonic or [Enter] for more info:")
                if mnemonic:
                    break
                self._log("".join(stack.format()))
            self.stacktrace_mnemonics[key] = mnemonic
        return self.stacktrace_mnemonics[key]

    def outstanding(self) -> Any:
        """The live allocations, largest first: Outstanding records."""
        with self._lock:
            recs = list(self._records.values())
        return sorted(recs, key=lambda r: (-r.nbytes, r.description))

    def _histogram(self):
        hist = {}
        for r in self.outstanding():
            hist[r.nbytes, r.description] = hist.get((r.nbytes, r.description), 0) + 1
        return sorted(hist.items(), key=lambda kv: (-kv[0][0], kv[0][1]))

    def report(self, file: Any = None) -> None:
        """Write what is outstanding, grouped by size and call site, with
        the pool's counts, to file (default: logfile)."""
        import sys

        out = (
            file if file is not None else (self.logfile if self.logfile is not None else sys.stdout)
        )
        print(
            "%s: %d active block(s) (%d bytes asked for), %d held (%d bytes)"
            % (
                type(self).__name__,
                self.active_blocks,
                self.active_bytes,
                self.held_blocks,
                self.held_bytes,
            ),
            file=out,
        )
        for (nbytes, descr), count in self._histogram():
            print("  %s (%d bytes): %dx" % (descr, nbytes, count), file=out)

    def allocate(self, nbytes: int) -> "PooledDeviceAllocation":
        nbytes = operator.index(nbytes)
        stack = self._stack()
        description = self.describe(stack, nbytes)
        free, total = driver.mem_get_info()
        self._log(
            "\n  Allocation of size %d occurring (mem: last_free:%s, free: %d, total:%d) "
            "(pool: held:%d, active:%d):\n      at: %s"
            % (
                nbytes,
                "-" if self.last_free is None else "%d" % self.last_free,
                free,
                total,
                self.held_blocks,
                self.active_blocks,
                description,
            )
        )
        for (size, descr), count in self._histogram():
            self._log("  %s (%d bytes): %dx" % (descr, size, count))
        if self.interactive:
            input("  [Enter]")
        result = DeviceMemoryPool.allocate(self, nbytes)
        with self._lock:
            self._records[id(result._alloc)] = self.Outstanding(nbytes, description, stack)
        self.last_free = driver.mem_get_info()[0]
        return result

    def _give_back(self, alloc, nbytes):
        with self._lock:
            self._records.pop(id(alloc), None)
        DeviceMemoryPool._give_back(self, alloc, nbytes)


class PageLockedAllocator:
    """Makes page-locked host blocks for a PageLockedMemoryPool (PyCUDA's
    PageLockedAllocator): called with a byte count, it returns a 1-D uint8
    page-locked NumPy array (its .base is the HostAllocation) allocated
    with cuMemHostAlloc flags (pygpu.driver.host_alloc_flags)."""

    def __init__(self, flags: int = 0) -> None:
        self.flags = operator.index(flags)
        if self.flags < 0:
            raise ValueError("PageLockedAllocator(): flags must be >= 0, got %d" % self.flags)

    def __call__(self, nbytes: int) -> "np.ndarray[Any, Any]":
        nbytes = operator.index(nbytes)
        if nbytes < 0:
            raise ValueError("PageLockedAllocator: nbytes must be >= 0, got %d" % nbytes)
        return driver.pagelocked_empty(nbytes, np.uint8, mem_flags=self.flags)

    def __repr__(self):
        return "PageLockedAllocator(flags=%d)" % self.flags


class PageLockedMemoryPool:
    """Hands out page-locked NumPy arrays from blocks kept after use.

        pool = PageLockedMemoryPool()
        a = pool.empty((1000,), np.float32)   # pinned; back to the pool when a dies

    allocator(nbytes) makes a new block (default PageLockedAllocator(mem_flags),
    PyCUDA's PageLockedMemoryPool(allocator=PageLockedAllocator(flags))): any
    writable C-contiguous buffer of at least nbytes bytes.  An int as the
    first argument is taken as mem_flags (pygpu's earlier signature).
    """

    def __init__(self, allocator: "Callable[[int], Any] | None" = None, mem_flags: int = 0) -> None:
        if allocator is not None and not callable(allocator):
            try:  # pygpu's earlier signature: PageLockedMemoryPool(mem_flags)
                mem_flags, allocator = operator.index(allocator), None
            except TypeError:
                raise TypeError(
                    "PageLockedMemoryPool(): allocator must be callable (nbytes "
                    "-> a writable buffer), e.g. PageLockedAllocator(flags), not "
                    "%s" % type(allocator).__name__
                ) from None
        self._allocator = allocator if allocator is not None else PageLockedAllocator(mem_flags)
        self._bins: "dict[int, list[Any]]" = {}
        self._lock = threading.Lock()
        self._active_blocks = 0
        self._active_bytes = self._active_block_bytes = 0
        self._holding = True

    @property
    def active_blocks(self) -> int:
        """Blocks in use: arrays handed out and alive (PyCUDA's active_blocks)."""
        return self._active_blocks

    @property
    def active_bytes(self) -> int:
        """Bytes the live arrays asked for (PyCUDA's active_bytes)."""
        return self._active_bytes

    @property
    def managed_bytes(self) -> int:
        """Bytes of the blocks in use and held (PyCUDA's managed_bytes)."""
        return self._active_block_bytes + self.held_bytes

    @property
    def held_blocks(self) -> int:
        """Blocks kept for reuse."""
        return sum(len(v) for v in self._bins.values())

    @property
    def held_bytes(self) -> int:
        """Bytes of page-locked memory kept for reuse."""
        return sum(size * len(v) for size, v in list(self._bins.items()))

    bin_number = staticmethod(DeviceMemoryPool.bin_number)
    alloc_size = staticmethod(DeviceMemoryPool.alloc_size)

    def __repr__(self):
        return _pool_repr(self)

    def empty(
        self,
        shape: "int | tuple[int, ...]",
        dtype: "np.typing.DTypeLike" = np.float64,
        order: "Literal['C', 'F']" = "C",
    ) -> "np.ndarray[Any, Any]":
        dtype = np.dtype(dtype)
        count = int(np.prod(shape, dtype=np.int64)) if np.ndim(shape) else int(shape)  # type: ignore[arg-type]
        nbytes = count * dtype.itemsize
        size = bin_size(nbytes)
        with self._lock:
            stack = self._bins.get(size)
            raw = stack.pop() if stack else None
        if raw is None:
            try:
                raw = self._new_block(size)
            except MemoryError:  # pygpu.driver.MemoryError is one too
                self.free_held()
                raw = self._new_block(size)
        with self._lock:
            self._active_blocks += 1
            self._active_bytes += nbytes
            self._active_block_bytes += raw.size
        ary = raw[:nbytes].view(dtype).reshape(shape, order=order)
        weakref.finalize(ary, self._give_back, raw, nbytes)
        return ary

    def _new_block(self, size):
        block = self._allocator(size)
        try:
            raw = np.frombuffer(block, np.uint8)
        except (TypeError, ValueError) as e:
            raise TypeError(
                "PageLockedMemoryPool: the allocator returned %s, not a "
                "C-contiguous buffer (%s)" % (type(block).__name__, e)
            ) from None
        if not raw.flags.writeable:
            raise ValueError("PageLockedMemoryPool: the allocator returned a read-only buffer")
        if raw.size < size:
            raise ValueError(
                "PageLockedMemoryPool: the allocator returned %d bytes for a "
                "block of %d" % (raw.size, size)
            )
        return raw[:size]

    allocate = empty

    def zeros(
        self,
        shape: "int | tuple[int, ...]",
        dtype: "np.typing.DTypeLike" = np.float64,
        order: "Literal['C', 'F']" = "C",
    ) -> "np.ndarray[Any, Any]":
        a = self.empty(shape, dtype, order)
        a.fill(0)
        return a

    def _give_back(self, raw, nbytes=0):
        with self._lock:
            self._active_blocks -= 1
            self._active_bytes -= nbytes
            self._active_block_bytes -= raw.size
            if self._holding:
                self._bins.setdefault(raw.size, []).append(raw)

    def free_held(self) -> None:
        with self._lock:
            self._bins = {}

    def stop_holding(self) -> None:
        self._holding = False
        self.free_held()


# ---- C types of NumPy dtypes (kernel generators) ----


class _DTypeRegistry:
    """dtype <-> C type name, both ways; several names may map to one dtype
    (the first registered is the one dtype_to_ctype gives)."""

    def __init__(self):
        self.dtype_to_name = {}
        self.name_to_dtype = {}

    def register(self, c_names, dtype):
        dtype = np.dtype(dtype)
        if isinstance(c_names, str):
            c_names = [c_names]
        for name in c_names:
            if not isinstance(name, str) or not name.strip():
                raise TypeError("a C type name must be a non-empty str, not %r" % (name,))
            name = _norm_ctype(name)
            old = self.name_to_dtype.get(name)
            if old is not None and old != dtype:
                raise RuntimeError(
                    "C type %r is already registered as %s, not %s" % (name, old, dtype)
                )
            self.name_to_dtype[name] = dtype
            self.dtype_to_name.setdefault(dtype, name)
        return dtype


def _norm_ctype(name):
    return " ".join(name.replace("*", " * ").split()).replace(" *", "*")


_registry = _DTypeRegistry()


def _fill_registry():
    r = _registry.register
    r(["bool"], np.bool_)
    r(["signed char", "char"], np.int8)
    r(["unsigned char"], np.uint8)
    r(["short", "signed short", "short int", "signed short int"], np.int16)
    r(["unsigned short", "unsigned short int"], np.uint16)
    r(["int", "signed int", "signed"], np.int32)
    r(["unsigned int", "unsigned"], np.uint32)
    # LP64 (Linux): long is 64 bits, like long long
    r(
        [
            "long",
            "long int",
            "signed long",
            "long long",
            "long long int",
            "signed long long",
            "int64_t",
            "ptrdiff_t",
            "ssize_t",
        ],
        np.int64,
    )
    r(
        [
            "unsigned long",
            "unsigned long int",
            "unsigned long long",
            "unsigned long long int",
            "uint64_t",
            "size_t",
        ],
        np.uint64,
    )
    r(["int8_t"], np.int8)
    r(["uint8_t"], np.uint8)
    r(["int16_t"], np.int16)
    r(["uint16_t"], np.uint16)
    r(["int32_t"], np.int32)
    r(["uint32_t"], np.uint32)
    r(["float"], np.float32)
    r(["double"], np.float64)
    r(["pycuda::complex<float>", "pygpu::complex<float>"], np.complex64)
    r(["pycuda::complex<double>", "pygpu::complex<double>"], np.complex128)


_fill_registry()


def register_dtype(
    dtype: "np.typing.DTypeLike", c_names: "str | Sequence[str]", alias_ok: bool = False
) -> "np.dtype[Any]":
    """Make dtype known to the kernel generators as the C type c_names (a
    name or a list of names), e.g. a structured dtype and its struct."""
    return _registry.register(c_names, dtype)


def get_or_register_dtype(
    c_names: "str | Sequence[str]", dtype: "np.typing.DTypeLike | None" = None
) -> "np.dtype[Any]":
    """With a dtype: register it under c_names and return it.  Without: the
    dtype registered as c_names (KeyError if none)."""
    if dtype is None:
        if not isinstance(c_names, str):
            raise TypeError(
                "get_or_register_dtype(): a single C type name is needed to "
                "look up a dtype, not %r" % (c_names,)
            )
        try:
            return _registry.name_to_dtype[_norm_ctype(c_names)]
        except KeyError:
            raise KeyError("no dtype is registered as the C type %r" % c_names) from None
    return _registry.register(c_names, dtype)


def dtype_to_ctype(dtype: "np.typing.DTypeLike | None", with_fp_tex_hack: bool = False) -> str:
    """The C type name of a NumPy dtype: float32 -> 'float', complex64 ->
    'pycuda::complex<float>', a registered struct -> its name."""
    if dtype is None:
        raise ValueError("dtype_to_ctype(): dtype may not be None")
    dtype = np.dtype(dtype)
    if with_fp_tex_hack:
        if dtype == np.float32:
            return "fp_tex_float"
        if dtype == np.float64:
            return "fp_tex_double"
        if dtype == np.complex64:
            return "fp_tex_cfloat"
        if dtype == np.complex128:
            return "fp_tex_cdouble"
    try:
        return _registry.dtype_to_name[dtype]
    except KeyError:
        pass
    if dtype.hasobject:
        raise TypeError("dtype %s holds Python objects, which have no C type on the device" % dtype)
    raise ValueError(
        "unable to map dtype '%s' to a C type (register a struct dtype "
        "with pygpu.tools.register_dtype)" % dtype
    )


# ---- kernel argument descriptions ----


class Argument:
    """A kernel argument: its dtype and its name."""

    def __init__(self, dtype: "np.typing.DTypeLike", name: str) -> None:
        self.dtype = np.dtype(dtype)
        self.name = name

    def __repr__(self):
        return "%s(%r, %s)" % (type(self).__name__, self.name, self.dtype)

    def __eq__(self, other):
        return type(self) is type(other) and self.dtype == other.dtype and self.name == other.name

    def __hash__(self):
        return hash((type(self), self.dtype, self.name))


class VectorArg(Argument):
    """A pointer argument (an array)."""

    struct_char = "P"

    def declarator(self) -> str:
        return "%s *%s" % (dtype_to_ctype(self.dtype), self.name)


class ScalarArg(Argument):
    """A by-value argument."""

    def declarator(self) -> str:
        return "%s %s" % (dtype_to_ctype(self.dtype), self.name)

    @property
    def struct_char(self) -> str:
        c = self.dtype.char
        # complex and struct values are packed by their size ('V'), a char
        # prepare() knows; 'p'/'P' are pointer-sized ints
        if self.dtype.kind in "cV" or c in "FDGg":
            return "V"
        if c == "?":
            return "?"
        return c


_QUALIFIERS = {"const", "volatile", "__restrict__", "restrict", "__restrict"}
_IDENT = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_"


def parse_c_arg(c_arg: str) -> "VectorArg | ScalarArg":
    """'float *x' -> VectorArg(float32, 'x'); 'double a' -> ScalarArg(float64, 'a')."""
    if not isinstance(c_arg, str):
        raise TypeError("parse_c_arg() takes a C declaration str, not %s" % type(c_arg).__name__)
    decl = c_arg.strip()
    if decl.endswith("]"):
        raise ValueError("C argument %r: arrays are declared as pointers ('T *name')" % c_arg)
    end = len(decl)
    start = end
    while start > 0 and decl[start - 1] in _IDENT:
        start -= 1
    name = decl[start:end]
    tp = decl[:start]
    if not name or name[0].isdigit() or not tp.strip():
        raise ValueError(
            "cannot parse C argument %r (expected 'type name' or 'type *name')" % c_arg
        )
    stars = tp.count("*")
    if stars > 1:
        raise ValueError("C argument %r: pointers to pointers are not supported" % c_arg)
    words = [w for w in tp.replace("*", " ").split() if w not in _QUALIFIERS]
    tp_name = " ".join(words)
    if not tp_name:
        raise ValueError("C argument %r has no type" % c_arg)
    try:
        dtype = _registry.name_to_dtype[_norm_ctype(tp_name)]
    except KeyError:
        raise ValueError(
            "C argument %r: unknown type %r (register it with "
            "pygpu.tools.get_or_register_dtype)" % (c_arg, tp_name)
        ) from None
    return VectorArg(dtype, name) if stars else ScalarArg(dtype, name)


get_arg_type = parse_c_arg


def _parse_arguments(arguments):
    """A list of Argument from a comma-separated str or a list of
    Argument/str."""
    if isinstance(arguments, str):
        parts = _split_args(arguments)
        return [parse_c_arg(a) for a in parts]
    out = []
    for a in arguments:
        if isinstance(a, Argument):
            out.append(a)
        elif isinstance(a, str):
            out.append(parse_c_arg(a))
        else:
            raise TypeError(
                "an argument must be a VectorArg, a ScalarArg or a C "
                "declaration str, not %s" % type(a).__name__
            )
    return out


def _split_args(s):
    """Split at commas outside <...> (pycuda::complex<float> has none, but
    templates with two parameters would)."""
    parts, depth, cur = [], 0, []
    for ch in s:
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    parts.append("".join(cur))
    parts = [p for p in parts if p.strip()]
    if not parts:
        raise ValueError("no arguments in %r" % s)
    return parts


# ---- per-context memoization ----

_context_caches: list[Any] = []


def _current_context():
    """The current context (None without one), as this thread remembers it
    (no driver call: docs/contexts.md, "The current context"): the key of
    the per-context caches."""
    return driver._driver._current_context()


_F = TypeVar("_F", bound=Callable[..., Any])


def context_dependent_memoize(func: _F) -> _F:
    """Cache func's results per current context (kernels are per context)."""
    cache: "dict[Any, Any]" = {}
    _context_caches.append(cache)

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        key = (_current_context(), args, tuple(sorted(kwargs.items())) if kwargs else ())
        try:
            return cache[key]
        except KeyError:
            pass
        except TypeError:
            raise TypeError(
                "%s(): the arguments must be hashable to be memoized" % func.__name__
            ) from None
        result = func(*args, **kwargs)
        cache[key] = result
        return result

    import functools

    functools.update_wrapper(wrapper, func)
    wrapper.clear_cache = cache.clear  # type: ignore[attr-defined]
    return wrapper  # type: ignore[return-value]  # func's signature, memoized


def clear_context_caches() -> None:
    """Forget everything context_dependent_memoize remembered."""
    for c in _context_caches:
        c.clear()


# ---- contexts for tests (PyCUDA's names) ----


def get_default_device(default: int = 0) -> "driver.Device":
    """The device named by CUDA_DEVICE (or default)."""
    import os

    driver.init()
    dev = os.environ.get("CUDA_DEVICE")
    return driver.Device(int(dev) if dev is not None else default)


def make_default_context(
    ctx_maker: "Callable[[driver.Device], driver.Context] | None" = None,
) -> "driver.Context":
    """The default device's primary context, pushed (pop() it when done),
    or ctx_maker(device)'s context."""
    dev = get_default_device()
    if ctx_maker is not None:
        return ctx_maker(dev)
    ctx = dev.retain_primary_context()
    ctx.push()
    return ctx


def init_cuda_context_fixture() -> "Iterator[Any]":
    """A pytest fixture body (``yield from init_cuda_context_fixture()``):
    a pushed context for the test, popped after, with the per-context
    caches cleared."""
    ctx = make_default_context()
    try:
        yield ctx
    finally:
        try:
            ctx.synchronize()
        finally:
            driver.Context.pop()
            clear_context_caches()
            import gc

            gc.collect()


def mark_cuda_test(inner_f: "Callable[..., Any]") -> "Callable[..., Any]":
    """Decorate a test to run in a pushed default context (PyCUDA's helper);
    marked 'gpu' for pygpu's pytest plugin."""
    import functools

    @functools.wraps(inner_f)
    def f(*args: Any, **kwargs: Any) -> Any:
        ctx = make_default_context()
        try:
            return inner_f(*args, **kwargs)
        finally:
            try:
                ctx.synchronize()
            finally:
                driver.Context.pop()
                clear_context_caches()
                import gc

                gc.collect()

    try:
        import pytest
    except ImportError:
        return f
    return pytest.mark.gpu(f)


# ---- PyCUDA's occupancy helpers ----


def _ceil_div(a, b):
    return -(-a // b)


class DeviceData:
    """What a kernel generator sizes blocks by, for one device (the current
    context's by default), as pycuda.tools.DeviceData: max_threads,
    warp_size, warps_per_mp, thread_blocks_per_mp, registers (per block),
    shared_memory (per block), smem_alloc_granularity, smem_granularity,
    register_allocation_unit; the per-SM figures come from the device
    (MAX_THREADS_PER_MULTIPROCESSOR, MAX_BLOCKS_PER_MULTIPROCESSOR)."""

    max_threads: int
    warp_size: int
    warps_per_mp: int
    thread_blocks_per_mp: int
    registers: int
    shared_memory: int
    smem_alloc_granularity: int
    smem_granularity: int
    register_allocation_unit: str

    def __init__(self, dev: Any = None) -> None:
        if dev is None:
            dev = driver.Context.get_device()
        a = driver.device_attribute
        self.max_threads = dev.get_attribute(a.MAX_THREADS_PER_BLOCK)
        self.warp_size = dev.get_attribute(a.WARP_SIZE)
        self.warps_per_mp = dev.get_attribute(a.MAX_THREADS_PER_MULTIPROCESSOR) // self.warp_size
        self.thread_blocks_per_mp = dev.get_attribute(a.MAX_BLOCKS_PER_MULTIPROCESSOR)
        self.registers = dev.get_attribute(a.MAX_REGISTERS_PER_BLOCK)
        self.shared_memory = dev.get_attribute(a.MAX_SHARED_MEMORY_PER_BLOCK)
        self.smem_alloc_granularity = 128
        self.smem_granularity = 32
        self.register_allocation_unit = "warp"

    def align_bytes(self, word_size: int = 4) -> int:
        """The alignment (bytes) that coalesces fetches of word_size bytes."""
        if word_size == 4:
            return 64
        if word_size in (8, 16):
            return 128
        raise ValueError("no alignment possible for fetches of size %d" % word_size)

    def align(self, nbytes: int, word_size: int = 4) -> int:
        """nbytes rounded up to align_bytes(word_size)."""
        step = self.align_bytes(word_size)
        return _ceil_div(nbytes, step) * step

    def align_words(self, word_size: int) -> int:
        """align_bytes(word_size) in words."""
        return self.align_bytes(word_size) // word_size

    def align_dtype(self, elements: int, dtype_size: int) -> int:
        """elements rounded up to a whole aligned run of dtype_size words."""
        step = self.align_words(dtype_size)
        return _ceil_div(elements, step) * step

    def coalesce(self, thread_count: int) -> int:
        """thread_count rounded up to a multiple of 16."""
        return _ceil_div(thread_count, 16) * 16

    @staticmethod
    def make_valid_tex_channel_count(size: int) -> int:
        """The channel count (1, 2 or 4) a texture of size channels needs."""
        for valid in (1, 2, 4):
            if size <= valid:
                return valid
        raise ValueError("could not enlarge argument to valid channel count")


class OccupancyRecord:
    """The occupancy of a block of threads using shared_mem bytes and
    registers registers per thread on devdata's device, as
    pycuda.tools.OccupancyRecord: tb_per_mp (blocks per multiprocessor),
    limited_by ('device', 'warps', 'regs' or 'smem'), warps_per_mp and
    occupancy (a fraction of the warps a multiprocessor holds)."""

    tb_per_mp_limits: "list[tuple[int, str]]"
    tb_per_mp: int
    limited_by: str
    warps_per_mp: int
    occupancy: float

    def __init__(
        self, devdata: DeviceData, threads: int, shared_mem: int = 0, registers: int = 0
    ) -> None:
        if threads > devdata.max_threads:
            raise ValueError(
                "too many threads: %d, the device takes at most %d a block"
                % (threads, devdata.max_threads)
            )
        if threads < 1:
            raise ValueError("threads must be >= 1, got %d" % threads)
        alloc_warps = _ceil_div(threads, devdata.warp_size)
        alloc_smem = (
            _ceil_div(shared_mem, devdata.smem_alloc_granularity) * devdata.smem_alloc_granularity
        )
        alloc_regs = alloc_warps * devdata.warp_size * registers
        if alloc_regs > devdata.registers:
            raise ValueError(
                "too many registers: %d a block, the device has %d"
                % (alloc_regs, devdata.registers)
            )
        if alloc_smem > devdata.shared_memory:
            raise ValueError(
                "too much shared memory: %d bytes a block, the device has %d"
                % (alloc_smem, devdata.shared_memory)
            )
        self.tb_per_mp_limits = [
            (devdata.thread_blocks_per_mp, "device"),
            (devdata.warps_per_mp // alloc_warps, "warps"),
        ]
        if registers > 0:
            self.tb_per_mp_limits.append((devdata.registers // alloc_regs, "regs"))
        if shared_mem > 0:
            self.tb_per_mp_limits.append((devdata.shared_memory // alloc_smem, "smem"))
        self.tb_per_mp, self.limited_by = min(self.tb_per_mp_limits)
        self.warps_per_mp = self.tb_per_mp * alloc_warps
        self.occupancy = self.warps_per_mp / devdata.warps_per_mp


__all__ += ["DeviceData", "OccupancyRecord"]


# PyCUDA's name for the registry's own lookup (dtype_to_ctype without the
# texture hack)
base_dtype_to_ctype = dtype_to_ctype
