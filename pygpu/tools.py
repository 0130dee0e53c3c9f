"""Memory pools, as in pycuda.tools.

DeviceMemoryPool keeps freed device blocks and hands them out again, so a
loop that allocates the same sizes over and over stops calling cuMemAlloc.
PageLockedMemoryPool does the same for page-locked host arrays, whose
allocation is far slower still (pinning pages costs milliseconds per MB).

For stream-ordered pooling by the driver itself, see
pygpu.driver.mem_alloc_async.
"""
import operator
import threading
import weakref

import numpy as np

from pygpu import driver

__all__ = ["bin_size", "PooledDeviceAllocation", "DeviceMemoryPool", "PageLockedMemoryPool"]


def bin_size(nbytes):
    """The block size a request of nbytes is served from: four size classes
    per power of two (so at most 25% is wasted), at least 256 bytes."""
    nbytes = operator.index(nbytes)       # a Python int: NumPy ints would wrap
    if nbytes <= 256:
        return 256
    top = 1 << (int(nbytes - 1).bit_length() - 1)     # largest power of two < nbytes
    step = top // 4
    return ((nbytes + step - 1) // step) * step


def _pool_repr(pool):
    return "<%s: %d active block(s), %d held (%d bytes)%s>" % (
        type(pool).__name__, pool.active_blocks, pool.held_blocks, pool.held_bytes,
        "" if pool._holding else ", not holding")


class PooledDeviceAllocation(int):
    """A device pointer (an int, so it goes anywhere an address does) whose
    memory returns to its pool on free() or when it dies."""

    def __new__(cls, pool, alloc, size):
        self = int.__new__(cls, int(alloc))
        self._pool, self._alloc, self.size = pool, alloc, size
        return self

    @property
    def __cuda_array_interface__(self):
        if self._alloc is None:
            raise driver.LogicError("the pooled allocation was freed")
        return {"shape": (self.size,), "typestr": "|u1", "data": (int(self), False),
                "version": 3, "strides": None, "stream": None}

    def free(self):
        """Give the block back to the pool (idempotent)."""
        alloc, self._alloc = self._alloc, None
        if alloc is not None:
            self._pool._give_back(alloc)

    def __del__(self):
        try:
            self.free()
        except Exception:   # interpreter teardown: the block is freed anyway
            pass

    def __repr__(self):
        return "<PooledDeviceAllocation at 0x%x, %d bytes>" % (int(self), self.size)


class DeviceMemoryPool:
    """Hands out device memory from blocks kept after free().

        pool = DeviceMemoryPool()
        a = pool.allocate(n)        # PooledDeviceAllocation
        f(a, ..., block=...)        # anywhere a pointer goes
        a.free()                    # or let it die: back to the pool
    """

    def __init__(self, allocator=None):
        self._allocator = allocator or driver.mem_alloc
        self._bins = {}
        self._lock = threading.Lock()
        self.active_blocks = 0
        self._holding = True

    @property
    def held_blocks(self):
        """Blocks kept for reuse."""
        return sum(len(v) for v in self._bins.values())

    @property
    def held_bytes(self):
        """Bytes of device memory kept for reuse."""
        return sum(size * len(v) for size, v in list(self._bins.items()))

    def __repr__(self):
        return _pool_repr(self)

    def allocate(self, nbytes):
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
            self.active_blocks += 1
        return PooledDeviceAllocation(self, alloc, nbytes)

    def _give_back(self, alloc):
        with self._lock:
            self.active_blocks -= 1
            if self._holding:
                self._bins.setdefault(alloc.size, []).append(alloc)
                return
        alloc.free()

    def free_held(self):
        """Free every block kept for reuse."""
        with self._lock:
            bins, self._bins = self._bins, {}
        for stack in bins.values():
            for a in stack:
                a.free()

    def stop_holding(self):
        """Free the held blocks and stop keeping freed ones."""
        self._holding = False
        self.free_held()


class PageLockedMemoryPool:
    """Hands out page-locked NumPy arrays from blocks kept after use.

        pool = PageLockedMemoryPool()
        a = pool.empty((1000,), np.float32)   # pinned; back to the pool when a dies
    """

    def __init__(self, mem_flags=0):
        self._flags = mem_flags
        self._bins = {}
        self._lock = threading.Lock()
        self.active_blocks = 0
        self._holding = True

    @property
    def held_blocks(self):
        """Blocks kept for reuse."""
        return sum(len(v) for v in self._bins.values())

    @property
    def held_bytes(self):
        """Bytes of page-locked memory kept for reuse."""
        return sum(size * len(v) for size, v in list(self._bins.items()))

    def __repr__(self):
        return _pool_repr(self)

    def empty(self, shape, dtype=np.float64, order="C"):
        dtype = np.dtype(dtype)
        count = int(np.prod(shape, dtype=np.int64)) if np.ndim(shape) else int(shape)
        nbytes = count * dtype.itemsize
        size = bin_size(nbytes)
        with self._lock:
            stack = self._bins.get(size)
            raw = stack.pop() if stack else None
        if raw is None:
            raw = driver.pagelocked_empty(size, np.uint8, mem_flags=self._flags)
        with self._lock:
            self.active_blocks += 1
        ary = raw[:nbytes].view(dtype).reshape(shape, order=order)
        weakref.finalize(ary, self._give_back, raw)
        return ary

    allocate = empty

    def zeros(self, shape, dtype=np.float64, order="C"):
        a = self.empty(shape, dtype, order)
        a.fill(0)
        return a

    def _give_back(self, raw):
        with self._lock:
            self.active_blocks -= 1
            if self._holding:
                self._bins.setdefault(raw.size, []).append(raw)

    def free_held(self):
        with self._lock:
            self._bins = {}

    def stop_holding(self):
        self._holding = False
        self.free_held()
