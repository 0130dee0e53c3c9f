"""pygpu.scan: generated sources compile (no GPU needed), argument errors,
and (gpu) every element of inclusive and exclusive scans against NumPy or a
sequential reference on fresh random data."""

import re
import warnings

import numpy as np
import pytest

from pygpu import compiler, scan
from pygpu.compiler import CompileError
from pygpu.scan import ExclusiveScanKernel, InclusiveScanKernel, scan_source

CPLX_F = "pycuda::complex<float>"

# (dtype, scan_expr, neutral, exclusive, preamble)
AFFINE = """
// x -> m*x + c mod 2^32, packed as m << 32 | c; compose(a, b) applies a, then b
__device__ unsigned long long compose(unsigned long long a, unsigned long long b)
{
    unsigned int ma = (unsigned int)(a >> 32), ca = (unsigned int)a;
    unsigned int mb = (unsigned int)(b >> 32), cb = (unsigned int)b;
    return ((unsigned long long)(mb * ma) << 32) | (unsigned int)(mb * ca + cb);
}
"""
AFFINE16 = """
// the same in 16 bits, packed in 4 bytes (one 64-bit flag-and-value word a tile)
__device__ unsigned int compose16(unsigned int a, unsigned int b)
{
    unsigned int ma = a >> 16, ca = a & 0xffffu, mb = b >> 16, cb = b & 0xffffu;
    return (((mb * ma) & 0xffffu) << 16) | ((mb * ca + cb) & 0xffffu);
}
"""
SPECS = [
    (np.float32, "a+b", None, False, ""),
    (np.float32, "a+b", "0", True, ""),
    (np.int32, "a+b", "0", True, ""),
    (np.int64, "a > b ? a : b", None, False, ""),
    (np.uint8, "(a+b) & 0b11111111", None, False, ""),
    (np.float64, "a+b", 0, True, ""),
    (np.complex64, "a+b", None, False, ""),
    (np.complex64, "a*b", "%s(1, 0)" % CPLX_F, True, ""),
    (np.complex128, "a+b", "0", True, ""),
    (np.bool_, "a || b", "false", True, ""),
    (np.int16, "b", None, False, ""),
    (np.uint64, "compose(a, b)", "0x100000000ULL", True, AFFINE),
]


@pytest.mark.parametrize(
    "spec", SPECS, ids=lambda s: "%s-%s-%s" % (np.dtype(s[0]).name, s[1], "ex" if s[3] else "in")
)
def test_sources_compile_to_ptx(spec):
    src = scan_source(spec[0], spec[1], spec[2], spec[3], name="myscan", preamble=spec[4])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ptx = bytes(compiler.compile(src, target="ptx", arch="compute_90", cache_dir=False))
    assert b".entry myscan" in ptx
    assert b"atom.global.add.u32" in ptx  # the dynamic tile counter


def test_tile_shape():
    assert scan.tile_shape(np.float32) == (128, 64)
    assert scan.tile_shape(np.float64) == (256, 8)
    assert scan.tile_shape(np.complex128) == (256, 4)
    assert scan.tile_shape(np.uint8) == (128, 64)
    assert scan.tile_shape(np.dtype((np.void, 128))) == (128, 1)
    assert scan.tile_shape(np.dtype((np.void, 512))) == (64, 1)
    with pytest.raises(ValueError, match="at most 512 bytes, not 513"):
        scan.tile_shape(np.dtype((np.void, 513)))


@pytest.mark.parametrize("size", [8, 200, 512])
def test_struct_scan_source_compiles(monkeypatch, size):
    """A struct with user copy constructors and only a volatile operator=
    (as PyCUDA's tests write them), up to the largest element size."""
    n = size // 4
    preamble = """
    struct vecsum {
        int v[%d];
        __device__ vecsum() { }
        __device__ vecsum(vecsum const &s) { for (int k = 0; k < %d; ++k) v[k] = s.v[k]; }
        __device__ vecsum volatile &operator=(vecsum const &s) volatile
        { for (int k = 0; k < %d; ++k) v[k] = s.v[k]; return *this; }
    };
    __device__ vecsum add(vecsum a, vecsum b)
    { vecsum r; for (int k = 0; k < %d; ++k) r.v[k] = a.v[k] + b.v[k]; return r; }
    """ % (n, n, n, n)
    dt = np.dtype((np.void, size))
    real = scan.dtype_to_ctype
    monkeypatch.setattr(
        scan, "dtype_to_ctype", lambda d: "vecsum" if np.dtype(d) == dt else real(d)
    )
    src = scan_source(dt, "add(a, b)", preamble=preamble)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ptx = bytes(compiler.compile(src, target="ptx", arch="compute_90", cache_dir=False))
    assert b".entry scan_scan" in ptx


@pytest.mark.parametrize(
    "args, kwargs, exc, match",
    [
        ((np.int32, "a+b"), {}, ValueError, "neutral element is required for exclusive scan"),
        ((np.int32, 3, "0"), {}, TypeError, "scan_expr must be a str"),
        ((np.int32, " ", "0"), {}, ValueError, "scan_expr is empty"),
        (
            (np.int32, "a+b", "0"),
            dict(name_prefix="bad name"),
            ValueError,
            "name_prefix must make a C identifier",
        ),
        ((np.int32, "a+b", "0"), dict(preamble=1), TypeError, "preamble must be a str"),
        ((object, "a+b", "0"), {}, TypeError, "Python objects"),
    ],
)
def test_exclusive_argument_errors(args, kwargs, exc, match):
    with pytest.raises(exc, match=match):
        ExclusiveScanKernel(*args, **kwargs)


def test_inclusive_argument_errors():
    with pytest.raises(TypeError, match="scan_expr must be a str"):
        InclusiveScanKernel(np.float32, None)
    with pytest.raises(ValueError, match="neutral is empty"):
        InclusiveScanKernel(np.float32, "a+b", "")


def test_bad_expression_is_a_compile_error():
    src = scan_source(np.float32, "no_such_op(a, b)")
    with pytest.raises(CompileError, match="no_such_op"):
        compiler.compile(src, target="ptx", arch="compute_90", cache_dir=False)


@pytest.mark.driver
def test_constructor_loads(ctx):
    k = InclusiveScanKernel(np.float32, "a+b", name_prefix="cs")
    assert k.function.name == "cs_scan" and k.tile == 8192
    with pytest.raises(CompileError, match="no_such_op"):
        ExclusiveScanKernel(np.float32, "no_such_op(a, b)", "0")


# ---- on the GPU ----


def _gpuarray():
    return pytest.importorskip("pygpu.gpuarray")


def _sizes(tile):
    return sorted(
        {
            1,
            2,
            31,
            32,
            33,
            tile - 1,
            tile,
            tile + 1,
            2 * tile,
            3 * tile + 5,
            33 * tile - 1,
            33 * tile + 1,
            1000 * tile + 17,
        }
    )


@pytest.mark.gpu
@pytest.mark.parametrize("cls", [InclusiveScanKernel, ExclusiveScanKernel])
@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.uint8, np.uint16])
def test_integer_sum_every_element(ctx, rng, cls, dtype):
    ga = _gpuarray()
    k = cls(dtype, "a+b", "0")
    for n in _sizes(k.tile):
        x = rng.integers(0, 100, n).astype(dtype)
        d = ga.to_gpu(x)
        assert k(d) is d
        ref = np.cumsum(x, dtype=dtype)
        if cls is ExclusiveScanKernel:
            ref = np.concatenate([[0], ref[:-1]]).astype(dtype)
        got = d.get()
        bad = np.flatnonzero(got != ref)
        assert bad.size == 0, (n, bad[:5], got[bad[:5]], ref[bad[:5]])


@pytest.mark.gpu
@pytest.mark.parametrize("cls", [InclusiveScanKernel, ExclusiveScanKernel])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_float_sum(ctx, rng, cls, dtype):
    ga = _gpuarray()
    k = cls(dtype, "a+b", "0")
    for n in _sizes(k.tile) + [10_000_019]:
        # small integers: every partial sum is exact in float32 below 2**24
        x = rng.integers(0, 4, n).astype(dtype)
        got = k(ga.to_gpu(x), "new").get()
        ref = np.cumsum(x.astype(np.float64))
        if cls is ExclusiveScanKernel:
            ref = np.concatenate([[0], ref[:-1]])
        if dtype == np.float32 and n > 4_000_000:
            np.testing.assert_allclose(got, ref, rtol=1e-6, atol=0)
        else:
            np.testing.assert_array_equal(got, ref)
    # random reals: stated tolerance against a float64 reference
    n = 1_000_003
    x = rng.uniform(-1, 1, n).astype(dtype)
    got = k(ga.to_gpu(x), "new").get()
    ref = np.cumsum(x.astype(np.float64))
    if cls is ExclusiveScanKernel:
        ref = np.concatenate([[0], ref[:-1]])
    scale = np.cumsum(np.abs(x.astype(np.float64)))
    eps = 1e-5 if dtype == np.float32 else 1e-13
    assert np.all(np.abs(got - ref) <= eps * (scale + 1))


@pytest.mark.gpu
def test_complex(ctx, rng):
    ga = _gpuarray()
    for dtype, eps in ((np.complex64, 1e-5), (np.complex128, 1e-13)):
        k = InclusiveScanKernel(dtype, "a+b")
        for n in (1, k.tile + 1, 100 * k.tile + 3):
            x = (rng.uniform(-1, 1, n) + 1j * rng.uniform(-1, 1, n)).astype(dtype)
            got = k(ga.to_gpu(x), "new").get()
            ref = np.cumsum(x.astype(np.complex128))
            scale = np.cumsum(np.abs(x.astype(np.complex128)))
            assert np.all(np.abs(got - ref) <= eps * (scale + 1))


@pytest.mark.gpu
@pytest.mark.parametrize("cls", [InclusiveScanKernel, ExclusiveScanKernel])
def test_non_commutative_affine_composition(ctx, rng, cls):
    """compose(a, b) is associative but not commutative: any reordering
    of the operands changes the result."""
    ga = _gpuarray()
    k = cls(np.uint64, "compose(a, b)", "0x100000000ULL", preamble=AFFINE)
    for n in (1, 5, k.tile - 1, k.tile + 1, 7 * k.tile + 3, 40 * k.tile + 1):
        m = rng.integers(0, 2**32, n, dtype=np.uint64) | np.uint64(1)
        c = rng.integers(0, 2**32, n, dtype=np.uint64)
        x = (m << np.uint64(32)) | c
        got = k(ga.to_gpu(x), "new").get()
        ref = np.empty(n, np.uint64)
        am, ac = 1, 0
        mask = 2**32 - 1
        for i, (mi, ci) in enumerate(zip(m.tolist(), c.tolist())):
            if cls is ExclusiveScanKernel:
                ref[i] = (am << 32) | ac
            am, ac = (mi * am) & mask, (mi * ac + ci) & mask
            if cls is InclusiveScanKernel:
                ref[i] = (am << 32) | ac
        bad = np.flatnonzero(got != ref)
        assert bad.size == 0, (n, bad[:5])


@pytest.mark.gpu
@pytest.mark.parametrize("cls", [InclusiveScanKernel, ExclusiveScanKernel])
def test_non_commutative_composition_in_four_bytes(ctx, rng, cls):
    """The packed look-back (elements of at most 4 bytes) keeps the order too."""
    ga = _gpuarray()
    k = cls(np.uint32, "compose16(a, b)", "0x10000u", preamble=AFFINE16)
    assert k._packed
    for n in (1, 5, k.tile - 1, k.tile + 1, 7 * k.tile + 3, 100 * k.tile + 1):
        m = rng.integers(0, 2**16, n, dtype=np.uint32) | np.uint32(1)
        c = rng.integers(0, 2**16, n, dtype=np.uint32)
        x = (m << np.uint32(16)) | c
        got = k(ga.to_gpu(x), "new").get()
        ref = np.empty(n, np.uint32)
        acc_m, acc_c = 1, 0
        mm, cc = m.tolist(), c.tolist()
        for i in range(n):
            if cls is ExclusiveScanKernel:
                ref[i] = (acc_m << 16) | acc_c
            acc_m, acc_c = (mm[i] * acc_m) & 0xFFFF, (mm[i] * acc_c + cc[i]) & 0xFFFF
            if cls is InclusiveScanKernel:
                ref[i] = (acc_m << 16) | acc_c
        bad = np.flatnonzero(got != ref)
        assert bad.size == 0, (n, bad[:5])


@pytest.mark.gpu
def test_right_projection_keeps_order(ctx, rng):
    ga = _gpuarray()
    for expr, pick in (("b", lambda x: x), ("a", lambda x: np.full_like(x, x[0]))):
        k = InclusiveScanKernel(np.int16, expr)
        x = rng.integers(-30000, 30000, 50 * k.tile + 9).astype(np.int16)
        np.testing.assert_array_equal(k(ga.to_gpu(x), "new").get(), pick(x))


@pytest.mark.gpu
def test_max_scan_and_output_array(ctx, rng):
    ga = _gpuarray()
    k = InclusiveScanKernel(np.float32, "a > b ? a : b")
    x = rng.standard_normal(123_457).astype(np.float32)
    d = ga.to_gpu(x)
    out = ga.empty_like(d)
    assert k(d, out) is out
    np.testing.assert_array_equal(out.get(), np.maximum.accumulate(x))
    np.testing.assert_array_equal(d.get(), x)  # input untouched


# ---- the Python side of a call (the stand-in runs it too; no results read) ----


@pytest.mark.driver
def test_empty_and_errors(ctx):
    ga = _gpuarray()
    k = InclusiveScanKernel(np.float32, "a+b")
    e = ga.empty(0, np.float32)
    assert k(e) is e
    d = ga.zeros((6, 6), np.float32)
    with pytest.raises(ValueError, match="needs a 1-dimensional array"):
        k(d)
    with pytest.raises(ValueError, match="input and output must have the same shape"):
        k(d[0], ga.empty(5, np.float32))
    with pytest.raises(TypeError, match="the scan is of float32 but the input array is float64"):
        k(ga.empty(5, np.float64))
    with pytest.raises(RuntimeError, match="cannot deal with non-contiguous arrays"):
        k(d[:, 0])
    with pytest.raises(TypeError, match="a scan takes a GPUArray"):
        k(np.zeros(4, np.float32))
    with pytest.raises(ValueError, match="output_ary must be a GPUArray, None or 'new'"):
        k(d[0], "old")
    with pytest.raises(TypeError, match="output_ary must be a GPUArray, None or 'new'"):
        k(d[0], 5)


def test_packed_words_only_for_four_bytes():
    scan.scan_source(np.float32, "a+b", _packed_words=True)
    with pytest.raises(ValueError, match="cannot keep its values in the 32 bits"):
        scan.scan_source(np.float64, "a+b", _packed_words=True)


@pytest.mark.standin
def test_packed_words_are_8_byte_aligned_from_any_allocator(standin, ctx):
    # an allocator that aligns only to 4 bytes: the tile words still start
    # at an 8-byte boundary inside the scratch it gave
    ga = _gpuarray()
    keep = []

    def allocator(nbytes):
        from pygpu import driver

        a = driver.mem_alloc(nbytes + 4)
        keep.append(a)
        return int(a) + 4

    k = InclusiveScanKernel(np.float32, "a+b")
    d = ga.zeros(3 * k.tile + 5, np.float32)
    k(d, allocator=allocator)
    p = standin.last_launch().params
    counter, words = (int.from_bytes(p[o : o + 8], "little") for o in (24, 32))
    start = int(keep[-1]) + 4
    assert counter == start and words % 8 == 0 and start + 16 <= words <= start + 24
    tiles = -(-d.size // k.tile)
    assert words + 8 * tiles <= start + 24 + 8 * tiles  # every tile's word fits


@pytest.mark.driver
@pytest.mark.parametrize("n, scratch", [(1, 0), (8192, 0), (8193, 1), (10_000_019, 1)])
def test_scratch_allocations(ctx, n, scratch):
    ga = _gpuarray()
    from pygpu import tools

    pool = tools.DeviceMemoryPool()
    calls = []

    def allocator(nbytes):
        calls.append(nbytes)
        return pool.allocate(nbytes)

    k = InclusiveScanKernel(np.float32, "a+b")
    d = ga.zeros(n, np.float32)
    assert k(d, allocator=allocator) is d
    assert len(calls) == scratch
    if scratch:  # the counter, then one 64-bit flag-and-value word a tile
        assert calls[0] == 24 + 8 * -(-n // k.tile)
    out = k(d, "new", allocator=allocator)
    assert out.shape == d.shape and out.dtype == d.dtype and out is not d
    assert len(calls) == 1 + 2 * scratch


# ---- kernel configurations (config= / PYGPU_SCAN_CONFIG) ----


def _sweep():
    """benchmarks/reduce_scan_sweep.py: the configurations the lead's GPU run times."""
    import importlib.util
    import os

    path = os.path.join(
        os.path.dirname(__file__), os.pardir, os.pardir, "benchmarks", "reduce_scan_sweep.py"
    )
    spec = importlib.util.spec_from_file_location("reduce_scan_sweep", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


SWEEP = _sweep()
CONFIGS = SWEEP.SCANS


def _ptx(src, arch):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        return bytes(compiler.compile(src, target="ptx", arch=arch, cache_dir=False)).decode()


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: c or "defaults")
def test_every_swept_config_compiles(config):
    oldest = "compute_%d" % min(compiler.supported_archs())
    cfg = scan.scan_config(config)
    for dtype, expr, neutral, exclusive in (
        (np.float32, "a+b", None, False),
        (np.float32, "a+b", "0", True),
        (np.float64, "a+b", "0", True),
        (np.uint8, "a+b", None, False),
    ):
        src = scan_source(dtype, expr, neutral, exclusive, name="myscan", config=config)
        if dtype is np.float32 and not exclusive:
            assert ".entry myscan" in _ptx(src, oldest)
        ptx = _ptx(src, "compute_90")
        assert ".entry myscan" in ptx
        if np.dtype(dtype).itemsize <= 4:
            assert "#define PYGPU_SCAN_THREADS %d" % cfg["threads"] in src
            assert "#define PYGPU_SCAN_ITEMS %d" % cfg["items"] in src
            assert "#define PYGPU_SCAN_MIN_BLOCKS %d" % cfg["min_blocks"] in src
        assert "#define PYGPU_SCAN_HOLD %d" % cfg["hold"] in src
        assert "#define PYGPU_SCAN_WARP_LOAD %d" % cfg["warp_load"] in src
        assert "#define PYGPU_SCAN_WINDOW %d" % cfg["window"] in src
        # 16-byte loads and stores of full tiles where vec asks for them
        wide = all(
            re.search(r"%s\.global\.(v4\.[bfsu]32|v2\.[bfsu]64)" % op, ptx)
            or (op == "ld" and cfg["async_copy"] and "cp.async.cg" in ptx)
            for op in ("ld", "st")
        )
        size = np.dtype(dtype).itemsize
        v = scan._vector_elements(size, scan.tile_shape(dtype, cfg)[1], cfg["vec"])
        if v == 1 or v * size == 16:
            assert wide == (v * size == 16), (dtype, config)
        assert ("nanosleep" in ptx) == (cfg["sleep"] > 0)
        # cp.async for 16-byte chunks of full tiles with async_copy (float32: 4 a chunk)
        if dtype is np.float32:
            assert ("cp.async.cg.shared.global" in ptx) == bool(cfg["async_copy"])


def test_scan_defaults_and_environment(monkeypatch):
    monkeypatch.delenv("PYGPU_SCAN_CONFIG", raising=False)
    assert scan.scan_config() == scan.SCAN_DEFAULTS
    monkeypatch.setenv("PYGPU_SCAN_CONFIG", "threads=512,items=16,hold=1")
    # async_copy, left unset, is off where hold=1 asks for registers
    assert scan.scan_config() == dict(
        scan.SCAN_DEFAULTS, threads=512, items=16, hold=1, async_copy=0
    )
    monkeypatch.setenv("PYGPU_SCAN_CONFIG", "vec=0")
    assert scan.scan_config()["async_copy"] == 0
    monkeypatch.setenv("PYGPU_SCAN_CONFIG", "threads=512,items=16,hold=1")
    src = scan_source(np.float32, "a+b")
    assert "#define PYGPU_SCAN_THREADS 512" in src and "#define PYGPU_SCAN_ITEMS 16" in src
    # larger elements keep tile_shape's shape; the rest of the config applies
    src = scan_source(np.float64, "a+b")
    assert "#define PYGPU_SCAN_THREADS 256" in src and "#define PYGPU_SCAN_ITEMS 8" in src
    assert "#define PYGPU_SCAN_HOLD 1" in src
    # config= wins; _tile and _min_blocks win over both
    src = scan_source(np.float32, "a+b", config="items=8")
    assert "#define PYGPU_SCAN_ITEMS 8" in src and "#define PYGPU_SCAN_THREADS 128" in src
    src = scan_source(np.float32, "a+b", config="items=8", _tile=(64, 4), _min_blocks=2)
    assert "#define PYGPU_SCAN_THREADS 64" in src and "#define PYGPU_SCAN_MIN_BLOCKS 2" in src
    monkeypatch.setenv("PYGPU_SCAN_CONFIG", "hold=2")
    with pytest.raises(ValueError, match=r"PYGPU_SCAN_CONFIG: hold=2: .* must be one of 0, 1"):
        InclusiveScanKernel(np.float32, "a+b")


@pytest.mark.parametrize(
    "config, exc, match",
    [
        (
            "tile=5",
            ValueError,
            r"config: 'tile' is not a known key \(known: threads, items, "
            r"min_blocks, warp_load, vec, sleep, hold, async_copy, "
            r"window\)",
        ),
        ("threads=100", ValueError, r"config: threads=100: .* multiple of 32 from 32 to 1024"),
        ("items=0", ValueError, r"config: items=0: .* must be from 1 to 64"),
        ("vec=2", ValueError, r"config: vec=2: .* must be one of 0, 4, 8, 16"),
        ("sleep=-1", ValueError, r"config: sleep=-1: .* must be from 0 to 10000"),
        (
            "window=3",
            ValueError,
            r"config: window=3: tiles a look-back lane reads a round "
            r"\(elements of at most 4 bytes\) must be one of 1, 2, 4, 8",
        ),
        ("warp_load", ValueError, r"config: 'warp_load' is not key=value"),
        (
            "threads=512,items=32",
            ValueError,
            r"scan config: a tile of 512 x 32 elements of 4 "
            r"bytes needs 67584 bytes of shared memory, over the "
            r"49152 a block may have",
        ),
        (3, TypeError, r"config must be a dict or a str 'key=value,...', not int"),
        (
            "async_copy=1,hold=1",
            ValueError,
            r"scan config: async_copy=1 needs hold=0 and vec=16 "
            r"\(it reads the items from shared memory in 16-byte "
            r"chunks\), not hold=1, vec=16",
        ),
        (
            "async_copy=1,vec=8",
            ValueError,
            r"async_copy=1 needs hold=0 and vec=16 .*, not hold=0, "
            r"vec=8",
        ),
    ],
)
def test_scan_config_errors(config, exc, match):
    with pytest.raises(exc, match=match):
        InclusiveScanKernel(np.float32, "a+b", config=config)


def test_vector_elements():
    assert scan._vector_elements(4, 32, 16) == 4
    assert scan._vector_elements(4, 6, 16) == 2  # divides the items
    assert scan._vector_elements(4, 7, 16) == 1
    assert scan._vector_elements(1, 32, 16) == 16
    assert scan._vector_elements(8, 8, 16) == 2
    assert scan._vector_elements(16, 4, 16) == 1
    assert scan._vector_elements(12, 4, 16) == 1  # not a power of two
    assert scan._vector_elements(4, 32, 0) == 1


@pytest.mark.standin
def test_vector_flag_follows_alignment(standin, ctx):
    import struct

    ga = _gpuarray()
    k = InclusiveScanKernel(np.float32, "a+b")
    assert k.vec == 4
    d = ga.zeros(3 * k.tile + 8, np.float32)
    out = ga.zeros(3 * k.tile + 8, np.float32)
    for src, dst, ok in (
        (d, out, 1),
        (d[1:], out[1:], 0),
        (d[4:], out[4:], 1),
        (d[4:], out[:-4], 1),
        (d[2:], out[:-2], 0),
        (d[: k.tile], None, 1),
    ):
        k(src, dst)
        assert struct.unpack_from("<I", standin.last_launch().params, 56)[0] == ok
    k = InclusiveScanKernel(np.float32, "a+b", config="vec=0")
    k(d, out)
    assert k.vec == 1 and struct.unpack_from("<I", standin.last_launch().params, 56)[0] == 0


def _scan_ref(x, exclusive, dtype):
    ref = np.cumsum(x, dtype=dtype)
    if exclusive:
        ref = np.concatenate([[0], ref[:-1]]).astype(dtype)
    return ref


@pytest.mark.gpu
@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: c or "defaults")
@pytest.mark.parametrize("cls", [InclusiveScanKernel, ExclusiveScanKernel])
def test_swept_configs_on_the_gpu(ctx, rng, cls, config):
    ga = _gpuarray()
    for dtype in (np.float32, np.int32, np.uint8, np.int64, np.float64):
        k = cls(dtype, "a+b", "0", config=config)
        t = k.tile
        for n in sorted({1, 31, 1023, t - 1, t, t + 1, 3 * t + 5, 33 * t + 1, 200 * t + 7}):
            # small integers: exact in float32 below 2**24
            x = rng.integers(0, 4, n + 1).astype(dtype)
            d = ga.to_gpu(x)
            ref = _scan_ref(x[1:], cls is ExclusiveScanKernel, dtype)
            # a view one element in (no vector accesses), into a new array
            got = k(d[1:], "new").get()
            bad = np.flatnonzero(got != ref)
            assert bad.size == 0, (dtype, n, bad[:5])
            # aligned, in place
            ref = _scan_ref(x, cls is ExclusiveScanKernel, dtype)
            assert k(d) is d
            bad = np.flatnonzero(d.get() != ref)
            assert bad.size == 0, (dtype, n, "in place", bad[:5])


@pytest.mark.gpu
@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: c or "defaults")
@pytest.mark.parametrize("cls", [InclusiveScanKernel, ExclusiveScanKernel])
def test_swept_configs_keep_order(ctx, rng, cls, config):
    """A non-commutative scan_expr in four bytes (the packed look-back) and in
    eight: every configuration combines in order."""
    ga = _gpuarray()
    for dtype, expr, neutral, pre, bits in (
        (np.uint32, "compose16(a, b)", "0x10000u", AFFINE16, 16),
        (np.uint64, "compose(a, b)", "0x100000000ULL", AFFINE, 32),
    ):
        k = cls(dtype, expr, neutral, preamble=pre, config=config)
        mask = (1 << bits) - 1
        for n in (5, k.tile + 1, 9 * k.tile + 3):
            m = rng.integers(0, 1 << bits, n, dtype=np.uint64) | np.uint64(1)
            c = rng.integers(0, 1 << bits, n, dtype=np.uint64)
            x = ((m << np.uint64(bits)) | c).astype(dtype)
            got = k(ga.to_gpu(x), "new").get()
            ref = np.empty(n, dtype)
            am, ac = 1, 0
            for i, (mi, ci) in enumerate(zip(m.tolist(), c.tolist())):
                if cls is ExclusiveScanKernel:
                    ref[i] = (am << bits) | ac
                am, ac = (mi * am) & mask, (mi * ac + ci) & mask
                if cls is InclusiveScanKernel:
                    ref[i] = (am << bits) | ac
            bad = np.flatnonzero(got != ref)
            assert bad.size == 0, (dtype, n, bad[:5])


@pytest.mark.gpu
@pytest.mark.parametrize("config", ["", "hold=1", "warp_load=0,vec=0,hold=1,min_blocks=3"])
def test_configs_float32_random_and_complex(ctx, rng, config):
    ga = _gpuarray()
    n = 10_000_019
    x = rng.uniform(-1, 1, n).astype(np.float32)
    got = InclusiveScanKernel(np.float32, "a+b", config=config)(ga.to_gpu(x), "new").get()
    ref = np.cumsum(x.astype(np.float64))
    assert np.all(np.abs(got - ref) <= 1e-5 * (np.cumsum(np.abs(x.astype(np.float64))) + 1))
    for dtype, eps in ((np.complex64, 1e-5), (np.complex128, 1e-13)):
        k = ExclusiveScanKernel(dtype, "a+b", "0", config=config)
        z = (
            rng.uniform(-1, 1, 100 * k.tile + 3) + 1j * rng.uniform(-1, 1, 100 * k.tile + 3)
        ).astype(dtype)
        got = k(ga.to_gpu(z), "new").get()
        ref = np.concatenate([[0], np.cumsum(z.astype(np.complex128))[:-1]])
        scale = np.cumsum(np.abs(z.astype(np.complex128)))
        assert np.all(np.abs(got - ref) <= eps * (scale + 1))
