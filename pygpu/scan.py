"""Prefix scans of vectors (PyCUDA's pycuda.scan).

    from pygpu.scan import InclusiveScanKernel, ExclusiveScanKernel
    cumsum = InclusiveScanKernel(np.float32, "a+b")
    cumsum(x_gpu)                  # in place; returns x_gpu
    y_gpu = cumsum(x_gpu, "new")   # into a new array

One kernel launch (kernels/scan.cuh): a single-pass scan with decoupled
look-back, so the data is read once and written once.  scan_expr must be
associative; it need not be commutative (elements are combined in order:
`a` is the earlier part, `b` the later).  No neutral element is assumed for
an inclusive scan; an exclusive scan's first element is `neutral`, and
element i is neutral op x[0] op ... op x[i-1].

The kernel's shape comes from ``config=`` (a dict or ``"key=value,..."``)
or the environment variable PYGPU_SCAN_CONFIG, read when a kernel is
built; keys (SCAN_CONFIG_KEYS): threads, items and min_blocks (for
elements of at most 4 bytes; larger ones keep tile_shape's), warp_load,
vec, hold, async_copy, window, sleep.  The tiles' status words are per-call
scratch from the stream-ordered pool, zeroed by one memset before the
launch: a persistent, self-resetting buffer would be shared by concurrent
calls on other streams and by replays of a captured graph.
"""

import os
import string
import threading

from typing import TYPE_CHECKING, Any, Callable, Sequence

import numpy as np

from pygpu import compiler, driver
from pygpu._ctypes_util import complex_source, dtype_to_ctype, needs_complex
from pygpu.reduction import _check_block, _choice_check, _range_check, parse_config, stream_alloc

if TYPE_CHECKING:  # annotations only (gpuarray imports this module)
    from pygpu._driver import Stream
    from pygpu.gpuarray import GPUArray

__all__ = [
    "InclusiveScanKernel",
    "ExclusiveScanKernel",
    "scan_source",
    "tile_shape",
    "scan_config",
    "SCAN_CONFIG_KEYS",
    "SCAN_DEFAULTS",
]

MAX_ITEMSIZE = 512  # a tile of 64 such elements still fits in 48 KiB of shared memory
_SHARED_LIMIT = 48 * 1024  # static shared memory a block may declare

# key: (check, meaning).  The defaults: the tile measured best on an H200
# (8,192 elements: 256 x 32, see tile_shape), each warp moving its own 1,024
# elements between global and shared memory with 16-byte accesses (a
# __syncwarp instead of a block barrier around each transpose, a quarter of
# the load and store instructions), the items read from shared memory twice
# instead of held in registers across the look-back: 64 registers and no
# spills (holding them with 16-byte accesses spills at three blocks an SM),
# so four blocks an SM (4 x 33 KiB of shared memory) instead of three.
SCAN_CONFIG_KEYS = {
    "threads": (_check_block, "threads a block (elements of at most 4 bytes)"),
    "items": (_range_check(1, 64), "elements a thread (elements of at most 4 bytes)"),
    "min_blocks": (
        _range_check(1, 32),
        "blocks an SM the registers must allow (elements of at most 4 bytes)",
    ),
    "warp_load": (
        _choice_check(0, 1),
        "1: each warp transposes its own elements; 0: the block transposes the tile",
    ),
    "vec": (_choice_check(0, 4, 8, 16), "bytes a vector load or store (0: scalar)"),
    "sleep": (_range_check(0, 10000), "nanoseconds a look-back poll sleeps (0: spin)"),
    "hold": (
        _choice_check(0, 1),
        "1: items stay in registers across the look-back; 0: read from shared memory again",
    ),
    "async_copy": (
        _choice_check(0, 1),
        "1: full tiles of 16-byte chunks reach shared memory "
        "by cp.async, no registers between (with vec=16 and hold=0)",
    ),
    "window": (
        _choice_check(1, 2, 4, 8),
        "tiles a look-back lane reads a round (elements of at most 4 bytes)",
    ),
}
SCAN_DEFAULTS = {
    "threads": 128,
    "items": 64,
    "min_blocks": 6,
    "warp_load": 1,
    "vec": 16,
    "sleep": 0,
    "hold": 0,
    "async_copy": 1,
    "window": 1,
}


def scan_config(config: "str | dict[str, Any] | None" = None) -> "dict[str, Any]":
    """The scan kernel configuration: config (a dict or "key=value,...") over
    SCAN_DEFAULTS, or, where config is None, PYGPU_SCAN_CONFIG."""
    # async_copy left unset follows hold and vec: on (the default) where they
    # allow it (hold=0, vec=16), off where a config asks for hold=1 or vec!=16
    defaults = dict(SCAN_DEFAULTS, async_copy=None)
    if config is None:
        cfg = parse_config(
            os.environ.get("PYGPU_SCAN_CONFIG") or None,
            SCAN_CONFIG_KEYS,
            defaults,
            "PYGPU_SCAN_CONFIG",
        )
    else:
        cfg = parse_config(config, SCAN_CONFIG_KEYS, defaults, "config")
    if cfg["async_copy"] is None:
        cfg["async_copy"] = int(
            bool(SCAN_DEFAULTS["async_copy"]) and not cfg["hold"] and cfg["vec"] == 16
        )
    return cfg


_template = None
_template_lock = threading.Lock()


def _get_template():
    global _template
    if _template is None:
        with _template_lock:
            _template = string.Template(compiler.kernel_source("scan.cuh"))
    return _template


def tile_shape(dtype: "np.typing.DTypeLike", config: "dict[str, Any] | None" = None) -> Any:
    """(threads per block, elements per thread) for a scan of dtype: for
    elements of up to 4 bytes the config's (default 128 threads of 64
    elements), else about 64 bytes a thread."""
    size = np.dtype(dtype).itemsize
    if size > MAX_ITEMSIZE:
        raise ValueError(
            "a scan's elements can be at most %d bytes, not %d (%s)"
            % (MAX_ITEMSIZE, size, np.dtype(dtype))
        )
    if size <= 4:
        # 256 x 32 with three blocks an SM (__launch_bounds__): a 100M-element
        # float32 scan took 318 us on an H200, against 353-543 us for tiles
        # of 8-24 elements at 3-8 blocks an SM (docs/benchmarks.md, the array
        # layer); benchmarks/reduce_scan_sweep.py compares shapes
        cfg = SCAN_DEFAULTS if config is None else config
        return cfg["threads"], cfg["items"]
    items = max(1, 64 // size)
    threads = 256 if size <= 64 else (128 if size <= 256 else 64)
    return threads, items


def _vector_elements(size, items, vec_bytes):
    """Elements a vector access moves for elements of size bytes (1: none)."""
    if not vec_bytes or size > 16 or size & (size - 1):
        return 1
    v = max(1, vec_bytes // size)
    while items % v:
        v //= 2
    return v


def _check_expr(value, what):
    if not isinstance(value, str):
        raise TypeError("%s must be a str (a C expression), not %s" % (what, type(value).__name__))
    if not value.strip():
        raise ValueError("%s is empty" % what)
    if "\0" in value:
        raise ValueError("%s contains a NUL character" % what)
    return value


def _packed(dtype):
    """Whether a tile's flag and value share one 64-bit word (elements of
    at most 4 bytes)."""
    return np.dtype(dtype).itemsize <= 4


def _default_min_blocks(dtype, config=None):
    """The blocks an SM the kernel's registers must allow
    (__launch_bounds__): the config's (default three, for the 32-element
    tiles) for small types, else one."""
    if np.dtype(dtype).itemsize > 4:
        return 1
    return (SCAN_DEFAULTS if config is None else config)["min_blocks"]


def scan_source(
    dtype,
    scan_expr,
    neutral=None,
    exclusive=False,
    name="scan_scan",
    preamble="",
    _tile=None,
    _min_blocks=None,
    _packed_words=None,
    config=None,
):
    """The CUDA C source of a scan kernel (what the constructors compile).
    config as the constructors'; _tile (threads, items), _min_blocks and
    _packed_words override it (for tests and tuning)."""
    return _scan_source(
        dtype,
        scan_expr,
        neutral,
        exclusive,
        name,
        preamble,
        _tile,
        _min_blocks,
        _packed_words,
        scan_config(config),
    )[0]


def _scan_source(
    dtype, scan_expr, neutral, exclusive, name, preamble, _tile, _min_blocks, _packed_words, cfg
):
    """(source, (threads, items), elements a vector access)"""
    dtype = np.dtype(dtype)
    if dtype.hasobject:
        raise TypeError("scan: dtype %s holds Python objects" % dtype)
    if dtype.itemsize == 0:
        raise ValueError("scan: dtype %s has no size" % dtype)
    scan_type = dtype_to_ctype(dtype)
    scan_expr = _check_expr(scan_expr, "scan_expr")
    if exclusive:
        if neutral is None:
            raise ValueError("neutral element is required for exclusive scan")
    if neutral is not None:
        if isinstance(neutral, (int, float, np.integer, np.floating)) and not isinstance(
            neutral, (bool, np.bool_)
        ):
            neutral = repr(neutral.item() if isinstance(neutral, np.generic) else neutral)
        neutral = _check_expr(neutral, "neutral")
    if not isinstance(name, str) or not name.isidentifier() or not name.isascii():
        raise ValueError("name_prefix must make a C identifier, not %r" % (name,))
    if not isinstance(preamble, str):
        raise TypeError("preamble must be a str, not %s" % type(preamble).__name__)
    threads, items = _tile or tile_shape(dtype, cfg)
    tile = threads * items
    smem = (tile + tile // 32) * dtype.itemsize
    if smem > _SHARED_LIMIT:
        raise ValueError(
            "scan config: a tile of %d x %d elements of %d bytes needs %d bytes "
            "of shared memory, over the %d a block may have"
            % (threads, items, dtype.itemsize, smem, _SHARED_LIMIT)
        )
    packed = _packed(dtype) if _packed_words is None else _packed_words
    if packed and not _packed(dtype):
        raise ValueError(
            "a scan of %s (%d bytes) cannot keep its values in the 32 bits of a "
            "packed word" % (dtype, dtype.itemsize)
        )
    vec = _vector_elements(dtype.itemsize, items, cfg["vec"])
    if cfg["async_copy"] and (cfg["hold"] or cfg["vec"] != 16):
        raise ValueError(
            "scan config: async_copy=1 needs hold=0 and vec=16 (it reads the "
            "items from shared memory in 16-byte chunks), not hold=%d, vec=%d"
            % (cfg["hold"], cfg["vec"])
        )
    types = complex_source() if needs_complex(scan_type, preamble) else ""
    src = _get_template().substitute(
        types=types,
        preamble=preamble,
        scan_type=scan_type,
        scan_expr=scan_expr,
        neutral=neutral if neutral is not None else "",
        exclusive=int(bool(exclusive)),
        threads=threads,
        items=items,
        name=name,
        packed=int(bool(packed)),
        min_blocks=(_default_min_blocks(dtype, cfg) if _min_blocks is None else int(_min_blocks)),
        warp_load=cfg["warp_load"],
        vec=vec,
        sleep=cfg["sleep"],
        hold=cfg["hold"],
        async_copy=cfg["async_copy"],
        window=cfg["window"],
    )
    return src, (threads, items), vec


class _ScanKernelBase:
    _exclusive = False

    def __init__(
        self,
        dtype: "np.typing.DTypeLike",
        scan_expr: str,
        neutral: "str | None" = None,
        name_prefix: str = "scan",
        options: "Sequence[str] | None" = None,
        preamble: str = "",
        devices: Any = None,
        _tile: Any = None,
        _min_blocks: Any = None,
        _packed_words: Any = None,
        config: "str | dict[str, Any] | None" = None,
    ) -> None:
        if self._exclusive and neutral is None:
            raise ValueError("neutral element is required for exclusive scan")
        self.dtype = np.dtype(dtype)
        self.neutral = neutral
        cfg = scan_config(config)
        name = "%s_scan" % name_prefix if isinstance(name_prefix, str) else name_prefix
        src, (self.threads, self.items), self.vec = _scan_source(
            self.dtype,
            scan_expr,
            neutral,
            self._exclusive,
            name,
            preamble,
            _tile,
            _min_blocks,
            _packed_words,
            cfg,
        )
        self.config = cfg
        self.source = src
        self._packed = _packed(self.dtype) if _packed_words is None else bool(_packed_words)
        self.tile = self.threads * self.items
        self._vec_bytes = self.vec * self.dtype.itemsize if self.vec > 1 else 0
        self._slot = (self.dtype.itemsize + 3) // 4
        self.module = compiler.SourceModule(src, options=options, no_extern_c=True)
        self.function = self.module.get_function(name)
        self.function.prepare("PPQPPPPI")
        self._launch = self.function.prepared_async_call

    def __call__(
        self,
        input_ary: "GPUArray",
        output_ary: "GPUArray | None" = None,
        allocator: "Callable[[int], Any] | None" = None,
        stream: "Stream | None" = None,
    ) -> "GPUArray":
        """Scan input_ary into output_ary (default: in place; "new": a new
        array), on stream; returns output_ary."""
        if not hasattr(input_ary, "gpudata") or not hasattr(input_ary, "flags"):
            raise TypeError("a scan takes a GPUArray, not %s" % type(input_ary).__name__)
        if output_ary is None:
            output_ary = input_ary
        elif isinstance(output_ary, str):
            if output_ary != "new":
                raise ValueError(
                    "output_ary must be a GPUArray, None or 'new', not %r" % output_ary
                )
            from pygpu import gpuarray

            if allocator is not None:
                output_ary = gpuarray.GPUArray(
                    input_ary.shape, input_ary.dtype, allocator=allocator
                )
            else:
                output_ary = gpuarray.empty_like(input_ary)
        elif not hasattr(output_ary, "gpudata") or not hasattr(output_ary, "flags"):
            raise TypeError(
                "output_ary must be a GPUArray, None or 'new', not %s" % type(output_ary).__name__
            )
        if input_ary.shape != output_ary.shape:
            raise ValueError("input and output must have the same shape")
        if len(input_ary.shape) != 1:
            raise ValueError(
                "a scan needs a 1-dimensional array, not shape %s" % (input_ary.shape,)
            )
        for a, what in ((input_ary, "input"), (output_ary, "output")):
            if a.dtype != self.dtype:
                raise TypeError(
                    "the scan is of %s but the %s array is %s" % (self.dtype, what, a.dtype)
                )
            if not a.flags.forc:
                raise RuntimeError("ScanKernel cannot deal with non-contiguous arrays")
        from pygpu import gpuarray

        gpuarray._check_operands("scan", (input_ary, output_ary))
        n = input_ary.size
        if not n:
            return output_ary
        src, dst = input_ary.gpudata, output_ary.gpudata
        vb = self._vec_bytes
        vec_ok = 1 if vb and not int(src) % vb and not int(dst) % vb else 0
        tiles = -(-n // self.tile)
        if tiles == 1:
            self._launch((1, 1), (self.threads, 1, 1), stream, src, dst, n, 0, 0, 0, 0, vec_ok)
            return output_ary
        if self._packed:
            # the counter, then one (flag, value) word per tile at an
            # 8-byte boundary (8 bytes spare for an allocator that only
            # aligns to 4)
            nbytes = 24 + 8 * tiles
            words = nbytes // 4
        else:
            head = 4 * (1 + tiles)  # counter, then one flag per tile
            head = -(-head // 16) * 16
            slots = tiles * self._slot * 4
            nbytes = head + 2 * slots
            words = 1 + tiles
        buf = allocator(nbytes) if allocator is not None else stream_alloc(nbytes, stream)
        base = int(buf)
        if stream is None:
            driver.memset_d32_async(buf, 0, words)
        else:
            driver.memset_d32_async(buf, 0, words, stream)
        if self._packed:
            self._launch(
                (tiles, 1),
                (self.threads, 1, 1),
                stream,
                src,
                dst,
                n,
                base,
                (base + 16 + 7) & ~7,
                0,
                0,
                vec_ok,
            )
        else:
            self._launch(
                (tiles, 1),
                (self.threads, 1, 1),
                stream,
                src,
                dst,
                n,
                base,
                base + 4,
                base + head,
                base + head + slots,
                vec_ok,
            )
        # buf must outlive the launch: a stream-ordered free (mem_alloc_async)
        # is ordered after it; a user's allocator follows PyCUDA's rules
        del buf
        return output_ary


class InclusiveScanKernel(_ScanKernelBase):
    """out[i] = x[0] op x[1] op ... op x[i] (op: scan_expr in a and b)."""

    _exclusive = False


class ExclusiveScanKernel(_ScanKernelBase):
    """out[0] = neutral, out[i] = neutral op x[0] op ... op x[i-1]."""

    _exclusive = True


from pygpu.compiler import SourceModule  # noqa: E402,F401  (PyCUDA's scan has it)
