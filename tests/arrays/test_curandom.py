"""pygpu.curandom and pygpu.characterize.

CPU: every generator's source compiles to PTX (state kept in registers, no
local memory in the fill loops), the Philox reference against Random123's
known answers, cuRAND's direction vectors against SciPy's Sobol tables,
the library search, argument errors.
GPU: statistics of 10**6 samples (mean and variance within 5 standard
errors), bit-exact rand() against the NumPy Philox reference, Sobol points
against a NumPy Gray-code walk of cuRAND's tables (and SciPy's Sobol),
reproducibility with the same seeds, skip-ahead and offset equivalences,
Poisson means.
"""

import re
import types
import warnings

import numpy as np
import pytest

from pygpu import characterize, compiler, curandom

KINDS = [
    ("curandStateXORWOW", "xorwow"),
    ("curandStateMRG32k3a", "mrg32k3a"),
    ("curandStateSobol32", "sobol32"),
    ("curandStateScrambledSobol32", "scrambled_sobol32"),
    ("curandStateSobol64", "sobol64"),
    ("curandStateScrambledSobol64", "scrambled_sobol64"),
]
GENERATORS = [
    "XORWOWRandomNumberGenerator",
    "MRG32k3aRandomNumberGenerator",
    "Sobol32RandomNumberGenerator",
    "ScrambledSobol32RandomNumberGenerator",
    "Sobol64RandomNumberGenerator",
    "ScrambledSobol64RandomNumberGenerator",
]
N = 10**6


def _have_libcurand():
    try:
        curandom._libcurand()
        return True
    except curandom.CurandNotFoundError:
        return False


needs_libcurand = pytest.mark.skipif(
    not _have_libcurand(), reason="the cuRAND host library is not installed"
)


# ---- a NumPy Philox-4x32-10 (the reference for rand()) ----


def philox4x32(c, k0, k1):
    """c: (n, 4) uint32 counters; keys k0, k1 (uint32 scalars or arrays)."""
    c = [c[:, i].astype(np.uint64) for i in range(4)]
    k0 = np.uint64(k0) * np.ones_like(c[0])
    k1 = np.uint64(k1) * np.ones_like(c[0])
    m = np.uint64(0xFFFFFFFF)
    for r in range(10):
        if r:
            k0 = (k0 + np.uint64(0x9E3779B9)) & m
            k1 = (k1 + np.uint64(0xBB67AE85)) & m
        p0 = np.uint64(0xD2511F53) * c[0]
        p1 = np.uint64(0xCD9E8D57) * c[2]
        c = [(p1 >> np.uint64(32)) ^ c[1] ^ k0, p1 & m, (p0 >> np.uint64(32)) ^ c[3] ^ k1, p0 & m]
    return np.stack(c, axis=1).astype(np.uint32)


def rand_reference(n, seed, dtype):
    dtype = np.dtype(dtype)
    per = 2 if dtype == np.float64 else 4
    blocks = np.arange((n + per - 1) // per, dtype=np.uint64)
    ctr = np.zeros((blocks.size, 4), np.uint32)
    ctr[:, 0] = (blocks & np.uint64(0xFFFFFFFF)).astype(np.uint32)
    ctr[:, 1] = (blocks >> np.uint64(32)).astype(np.uint32)
    words = philox4x32(ctr, seed, 0x50475055)
    if dtype == np.float64:
        w = words.astype(np.uint64)
        hi = np.stack([w[:, 0], w[:, 2]], axis=1).ravel()
        lo = np.stack([w[:, 1], w[:, 3]], axis=1).ravel()
        m = ((hi >> np.uint64(5)) << np.uint64(26)) | (lo >> np.uint64(6))
        return (m.astype(np.float64) / 2.0**53)[:n]
    words = words.ravel()[:n]
    if dtype == np.float32:
        return (words >> np.uint32(8)).astype(np.float32) * np.float32(2.0**-24)
    return words.view(dtype)


def test_philox_reference_known_answers():
    # Random123's kat_vectors for philox4x32_10
    ctr = np.array(
        [[0, 0, 0, 0], [0xFFFFFFFF] * 4, [0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344]],
        np.uint32,
    )
    k0 = np.array([0, 0xFFFFFFFF, 0xA4093822], np.uint64)
    k1 = np.array([0, 0xFFFFFFFF, 0x299F31D0], np.uint64)
    got = philox4x32(ctr, k0, k1)
    np.testing.assert_array_equal(
        got,
        np.array(
            [
                [0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8],
                [0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD],
                [0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1],
            ],
            np.uint32,
        ),
    )


# ---- CPU: sources ----


@pytest.mark.parametrize("state,kind", KINDS)
def test_generator_source_compiles_to_ptx(state, kind):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ptx = compiler.compile(
            curandom.source(state, kind), arch="compute_90", target="ptx"
        ).decode()
    names = [
        "uniform_int",
        "uniform_long",
        "uniform_float",
        "uniform_double",
        "normal_float",
        "normal_double",
        "normal_log_float",
        "normal_log_double",
        "poisson_int",
        "poisson_inplace_float",
        "poisson_inplace_double",
        "poisson_inplace_int",
        "prepare",
        "skip_ahead",
        "skip_ahead_array",
    ]
    if kind in ("xorwow", "mrg32k3a"):
        names += ["skip_ahead_sequence", "skip_ahead_sequence_array"]
    if kind == "mrg32k3a":
        names += ["skip_ahead_subsequence", "skip_ahead_subsequence_array"]
    for name in names:
        assert ".entry %s(" % name in ptx, name
    assert "pygpu_state_size" in ptx
    if kind in ("xorwow", "mrg32k3a"):
        # the state lives in registers and the stores are 16 bytes wide
        for name in ("normal_float", "uniform_float", "uniform_int"):
            body = re.search(r"\.entry %s\(.*?\n}" % name, ptx, re.S).group(0)
            assert ".local" not in body, name
            assert "st.global.v4" in body, name


def test_rand_source_compiles_to_ptx():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ptx = compiler.compile(
            compiler.kernel_source("curandom_philox.cuh"), arch="compute_90", target="ptx"
        ).decode()
    for name in ("rand_float", "rand_double", "rand_uint"):
        assert ".entry %s(" % name in ptx


def test_sizeof_source_compiles_to_ptx():
    src = characterize.sizeof_source("curandStateXORWOW", "#include <curand_kernel.h>")
    ptx = compiler.compile(src, arch="compute_90", target="ptx").decode()
    assert "pygpu_sizeof" in ptx


def test_characterize_cpu_parts():
    import sys

    assert characterize.platform_bits() == (64 if sys.maxsize > 2**32 else 32)
    with pytest.raises(TypeError, match="type_name must be a non-empty str, not ''"):
        characterize.sizeof("")
    with pytest.raises(TypeError, match="preamble must be a str, not int"):
        characterize.sizeof("int", 3)


# ---- CPU: the cuRAND host library ----


def test_curand_candidates_order():
    env = {"PYGPU_LIBCURAND": "/x/libcurand.so.10", "CONDA_PREFIX": "/conda", "CUDA_HOME": "/cuda"}
    c = curandom.curand_candidates(env, path=[])
    assert c[0] == "/x/libcurand.so.10"
    assert (
        c.index("/conda/lib/libcurand.so.10")
        < c.index("libcurand.so.10")
        < c.index("/cuda/lib64/libcurand.so.10")
        < c.index("/usr/local/cuda/lib64/libcurand.so.10")
    )
    assert len(c) == len(set(c))


def test_missing_library_is_one_clear_error(monkeypatch):
    monkeypatch.setattr(curandom, "_lib", None)
    monkeypatch.setattr(curandom, "curand_candidates", lambda: ["/nowhere/libcurand.so.10"])
    monkeypatch.setenv("PYGPU_LIBCURAND", "/nowhere/libcurand.so.10")
    with pytest.raises(
        curandom.CurandNotFoundError,
        match=r"the cuRAND library \(libcurand.so.10\) was not found; tried: "
        r"/nowhere/libcurand.so.10",
    ):
        curandom.host_direction_vectors()
    # the version then comes from curand.h (or is None with no header either)
    v = curandom.get_curand_version()
    assert v is None or (isinstance(v, tuple) and len(v) == 3)


@needs_libcurand
def test_curand_version():
    v = curandom.get_curand_version()
    assert isinstance(v, tuple) and len(v) == 3 and v >= (5, 0, 0)
    assert v == tuple(int(x) for x in v)


def _scipy_direction_numbers(dims, bits):
    """v_k of each dimension from SciPy's unscrambled Sobol points:
    point 2**k is point 2**k - 1 with v_k flipped (Gray-code order)."""
    qmc = pytest.importorskip("scipy.stats.qmc")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pts = qmc.Sobol(dims, scramble=False, bits=32).random(2**bits)
    ints = (pts * 2.0**32).astype(np.uint64).astype(np.uint32)
    return np.stack([ints[2**k] ^ ints[2**k - 1] for k in range(bits)], axis=1)


@needs_libcurand
def test_direction_vectors_are_scipys_joe_kuo_numbers():
    v32 = curandom.host_direction_vectors(curandom.direction_vector_set.VECTOR_32)
    assert v32.shape == (20000, 32) and v32.dtype == np.uint32
    ref = _scipy_direction_numbers(64, 16)
    np.testing.assert_array_equal(v32[:64, :16], ref)
    # the 64-bit set's top halves are the 32-bit set
    v64 = curandom.host_direction_vectors(curandom.direction_vector_set.VECTOR_64)
    assert v64.shape == (20000, 64) and v64.dtype == np.uint64
    np.testing.assert_array_equal((v64[:, :32] >> np.uint64(32)).astype(np.uint32), v32)
    s32 = curandom.host_scramble_constants(32)
    s64 = curandom.host_scramble_constants(64)
    assert s32.shape == (20000,) and s32.dtype == np.uint32 and len(np.unique(s32)) > 19000
    assert s64.shape == (20000,) and s64.dtype == np.uint64


@needs_libcurand
def test_table_argument_errors():
    with pytest.raises(ValueError, match="direction must be a direction_vector_set"):
        curandom.host_direction_vectors(7)
    with pytest.raises(ValueError, match="bits must be 32 or 64, not 16"):
        curandom.host_scramble_constants(16)
    with pytest.raises(TypeError, match="count must be an int, not float"):
        curandom.generate_direction_vectors(1.5)
    with pytest.raises(ValueError, match="count must be >= 0, not -1"):
        curandom.generate_scramble_constants32(-1)


# ---- CPU: 64-bit element counts (PyCUDA's test_curand_wrappers_16gb fills
# 2**32 float32 and 2**31 float64 elements) ----


def narrow_index_ops(ptx, entry, param=-1):
    """PTX instructions of kernel `entry` that compute a 32-bit integer from the
    element count n (its last parameter) or from an index compared with it."""
    body = re.search(r"\.entry %s\((.*?)\)\s*\{(.*?)\n\}" % re.escape(entry), ptx, re.S)
    params, code = body.group(1), body.group(2)
    last = re.findall(r"\.param\s+\.(\w+)\s+(\w+)", params)[param]
    assert last[0] in ("u64", "s64", "b64"), last
    insns = []
    for line in code.splitlines():
        line = line.strip()
        if not line or line.startswith((".", "//", "{", "}", "$")) or line.endswith(":"):
            continue
        line = re.sub(r"^@!?%p\d+\s+", "", line).rstrip(";")
        parts = line.split(None, 1)
        ops = (
            [o.strip().strip("[]").split("+")[0] for o in parts[1].split(",")]
            if len(parts) > 1
            else []
        )
        insns.append((parts[0], ops, line))
    tainted = set()
    for op, ops, _ in insns:
        if op.startswith("ld.param") and ops[1] == last[1]:
            tainted.add(ops[0])
    seeds = set(tainted)
    # (unsigned int)x and (unsigned int)(x >> 32): both words of a 64-bit
    # number kept, as a counter split into two 32-bit words
    splits = [
        ops
        for op, ops, line in insns
        if op.startswith("shr.") and op.endswith("64") and ops[2] == "32"
    ]
    halves = {ops[1] for ops in splits} | {ops[0] for ops in splits}
    bad = []
    changed = True
    while changed:
        changed = False
        bad = []
        for op, ops, line in insns:
            if op.startswith(("st.", "bra", "ret", "ld.param")) or not ops:
                continue
            srcs = ops[1:]
            if not any(s in tainted for s in srcs):
                continue
            if op.startswith("ld."):
                continue  # a value loaded through an index is no index
            if op.startswith("setp."):
                if not op.endswith(("64",)):
                    bad.append(line)
                for s in srcs:
                    if s.startswith("%rd") and s not in tainted:
                        tainted.add(s)
                        changed = True
                continue
            dst = ops[0]
            if op.startswith("and.") and srcs[-1] in ("4294967295", "0xffffffff"):
                bad.append(line)  # (unsigned int) of an index, kept 64-bit
            if re.match(r"%rs?\d+$", dst):
                # the low word of a 64-bit counter whose high word is kept
                if op == "cvt.u32.u64" and srcs[0] in halves:
                    continue
                bad.append(line)
            elif dst.startswith("%rd") and dst not in tainted and not op.startswith("cvt.rn.f"):
                tainted.add(dst)
                changed = True
    # an index compared with n (or a count computed from n) that is a
    # widened 32-bit number
    derived = set(seeds)
    for op, ops, line in insns * 2:
        if (
            ops
            and not op.startswith(("st.", "ld.", "setp.", "bra", "ret"))
            and any(s in derived for s in ops[1:])
        ):
            derived.add(ops[0])
    compared = {
        s
        for op, ops, line in insns
        if op.startswith("setp.") and any(s in derived for s in ops[1:])
        for s in ops[1:]
    }
    for op, ops, line in insns:
        if re.match(r"cvt\.[us]64\.[us]32$", op) and ops[0] in compared:
            bad.append(line)
    return bad


def test_index_check_catches_32_bit_loops():
    src = """
    extern "C" __global__ void int_index(float *d, unsigned long long n)
    { for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x)
          d[i] = 1.0f; }
    extern "C" __global__ void narrowed_n(float *d, unsigned long long n)
    { unsigned int m = n;
      for (unsigned int i = blockIdx.x * blockDim.x + threadIdx.x; i < m;
           i += blockDim.x * gridDim.x) d[i] = 1.0f; }
    extern "C" __global__ void narrow_start(float *d, unsigned long long n)
    { for (unsigned long long i = blockIdx.x * blockDim.x + threadIdx.x; i < n;
           i += blockDim.x * gridDim.x) d[i] = 1.0f; }
    extern "C" __global__ void wide(float *d, unsigned long long n)
    { for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
           i < n; i += (unsigned long long)blockDim.x * gridDim.x) d[i] = 1.0f; }
    """
    ptx = compiler.compile(src, arch="compute_90", target="ptx").decode()
    for bad in ("int_index", "narrowed_n", "narrow_start"):
        assert narrow_index_ops(ptx, bad), bad
    assert narrow_index_ops(ptx, "wide") == []


@pytest.mark.parametrize("state,kind", KINDS + [(None, "philox")])
def test_kernels_count_elements_in_64_bits(state, kind):
    """No kernel narrows the element count n, or an index compared with it,
    to 32 bits (nor starts its index from a 32-bit product)."""
    src = (
        compiler.kernel_source("curandom_philox.cuh")
        if state is None
        else curandom.source(state, kind)
    )
    ptx = compiler.compile(src, arch="compute_90", target="ptx").decode()
    entries = re.findall(r"\.entry (\w+)\(", ptx)
    assert len(entries) >= 3
    for name in entries:
        # prepare(s, n, ...) and skip kernels take the state count second
        param = 1 if name.startswith(("prepare", "skip")) else -1
        assert narrow_index_ops(ptx, name, param) == [], name


def test_fills_of_2_32_elements_are_one_launch_each():
    """Every fill is one launch, whatever the size, with n as a 64-bit
    argument."""
    assert all(codes.endswith("Q") for codes in curandom._FILL_KERNELS.values())
    calls = []

    class Recorder:
        def __init__(self, name):
            self.name = name

        def prepared_async_call(self, grid, block, stream, *args):
            calls.append((self.name, args))

    for cls_name in GENERATORS:
        gen = _bare(cls_name)
        gen.generators = {name: Recorder(name) for name in curandom._FILL_KERNELS}
        gen._grid, gen._block, gen.state = (132, 1, 1), (128, 1, 1), 1234
        for dtype, n in ((np.float32, 2**32), (np.float64, 2**31), (np.float32, 2**32 + 1)):
            del calls[:]
            gen.fill_uniform(_fake(dtype, n))
            gen.fill_normal(_fake(dtype, n))
            gen.fill_log_normal(_fake(dtype, n), 10.0, 3.0)
            gen.fill_poisson(_fake(dtype, n))
            assert [(c[0], c[1][-1]) for c in calls] == [
                ("uniform_" + ("float" if dtype == np.float32 else "double"), n),
                ("normal_" + ("float" if dtype == np.float32 else "double"), n),
                ("normal_log_" + ("float" if dtype == np.float32 else "double"), n),
                ("poisson_inplace_" + ("float" if dtype == np.float32 else "double"), n),
            ]
            assert all(c[1][0] == 1234 for c in calls)
        del calls[:]
        gen.fill_uniform(_fake(np.uint32, 2**32))
        gen.fill_uniform(_fake(np.int32, 2**32))
        gen.fill_poisson(_fake(np.uint32, 2**32), 13.0)
        gen.fill_poisson(_fake(np.uint32, 2**32))
        assert [(c[0], c[1][2:]) for c in calls] == [
            ("uniform_int", (2**32,)),
            ("uniform_int", (2**32,)),
            ("poisson_int", (13.0, 2**32)),
            ("poisson_inplace_int", (2**32,)),
        ]


@pytest.mark.parametrize("state,kind", KINDS[4:])
def test_sobol64_32_bit_numbers_are_the_top_half(state, kind):
    """uint32/int32 fills of a 64-bit Sobol generator store the top 32 bits
    of its 64-bit number (a plain cast stored the low 32, all 0 for the first
    2**32 points of the unscrambled sequence)."""
    ptx = compiler.compile(curandom.source(state, kind), arch="compute_90", target="ptx").decode()
    body = re.search(r"\.entry uniform_int\(.*?\n}", ptx, re.S).group(0)
    stored = re.findall(r"st\.global(?:\.v4)?\.u32\s+\[[^\]]*\],\s*\{?([^;]*)", body)
    assert stored
    highs = set(re.findall(r"shr\.u64\s+(%rd\d+),\s*%rd\d+,\s*32;", body))
    for regs in stored:
        for reg in re.findall(r"%r\w*\d+", regs):
            # the stored register is the shifted 64-bit number, or its cvt
            cvt = re.search(r"cvt\.u32\.u64\s+%s,\s*(%%rd\d+);" % re.escape(reg), body)
            assert reg in highs or (cvt and cvt.group(1) in highs), (reg, regs)


# ---- CPU: argument errors that come before any GPU work ----


def _fake(dtype=np.float32, n=8, contiguous=True):
    """A GPUArray over a raw address (no allocation: the operand gate checks
    what it can know, nothing reaches a driver)."""
    from pygpu import gpuarray as ga

    dtype = np.dtype(dtype)
    st = dtype.itemsize * (1 if contiguous else 2)
    return ga._new(
        ga.GPUArray,
        (n,),
        dtype,
        (st,),
        0x10000,
        None,
        None,
        n,
        contiguous or n <= 1,
        contiguous or n <= 1,
    )


def _bare(cls_name):
    """A generator object without its GPU state: enough for the checks
    that come before a launch."""
    gen = object.__new__(getattr(curandom, cls_name))
    gen.generator_count = 1024
    gen.module = types.SimpleNamespace(module=types.SimpleNamespace(context=None))
    return gen


def test_rand_refuses_other_dtypes():
    with pytest.raises(
        curandom.UnsupportedDtypeError,
        match="rand\\(\\) makes float32, float64, int32 or uint32 arrays, not int16",
    ):
        curandom.rand((3,), np.int16)
    # PyCUDA raised NotImplementedError there: both catch it
    with pytest.raises(NotImplementedError):
        curandom.rand((3,), np.complex64)


@pytest.mark.parametrize("cls_name", GENERATORS)
def test_fill_argument_errors(cls_name):
    gen = _bare(cls_name)
    with pytest.raises(TypeError, match="fill_uniform: data must be a GPUArray, not ndarray"):
        gen.fill_uniform(np.zeros(3, np.float32))
    with pytest.raises(ValueError, match="fill_normal: data must be a contiguous array"):
        gen.fill_normal(_fake(contiguous=False))
    with pytest.raises(
        curandom.UnsupportedDtypeError,
        match="fill_uniform: %s makes float32, "
        "float64, int32, uint32.* arrays, not int16" % cls_name,
    ):
        gen.fill_uniform(_fake(np.int16))
    with pytest.raises(
        curandom.UnsupportedDtypeError,
        match="fill_normal: %s makes float32 or float64 arrays, not int32" % cls_name,
    ):
        gen.fill_normal(_fake(np.int32))
    with pytest.raises(
        curandom.UnsupportedDtypeError,
        match="fill_log_normal: %s makes float32 or float64 arrays, not complex64" % cls_name,
    ):
        gen.fill_log_normal(_fake(np.complex64), 0.0, 1.0)
    with pytest.raises(
        curandom.UnsupportedDtypeError,
        match="fill_poisson with lambda_value makes uint32 arrays, not float32",
    ):
        gen.fill_poisson(_fake(np.float32), 3.0)
    with pytest.raises(
        curandom.UnsupportedDtypeError,
        match="fill_poisson without lambda_value takes the means from a "
        "float32, float64 or uint32 array, not int64",
    ):
        gen.fill_poisson(_fake(np.int64))
    for bad in (0, -1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="lambda_value must be a finite number > 0"):
            gen.fill_poisson(_fake(np.uint32), bad)
    with pytest.raises(ValueError, match="gen_poisson needs a lambda_value"):
        gen.gen_poisson(3, np.uint32, None)


def test_32_bit_sobol_refuses_64_bit_integers():
    for name in ("Sobol32RandomNumberGenerator", "ScrambledSobol32RandomNumberGenerator"):
        with pytest.raises(
            curandom.UnsupportedDtypeError,
            match="makes float32, float64, int32, uint32 arrays, not int64",
        ):
            _bare(name).fill_uniform(_fake(np.int64))


# ---------------------------------------------------------------- GPU


def _mean_var_ok(x, mean, var, mu4=None, slack=0.0):
    """Sample mean and variance within 5 standard errors of the truth (plus
    slack * var for the unscrambled Sobol sequences, whose few points per
    dimension miss the tails: measured on the CPU from cuRAND's tables,
    their normal variance is 0.89 at 59 points a dimension)."""
    x = np.asarray(x, np.float64)
    n = x.size
    if mu4 is None:
        mu4 = 3 * var**2  # normal
    se_mean = np.sqrt(var / n)
    se_var = np.sqrt((mu4 - var**2) / n)
    assert abs(x.mean() - mean) < 5 * se_mean + slack * np.sqrt(var) * 0.05, (x.mean(), mean)
    assert abs(x.var() - var) < 5 * se_var + slack * var, (x.var(), var)


PLAIN_SOBOL = ("Sobol32RandomNumberGenerator", "Sobol64RandomNumberGenerator")


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_rand_is_uniform_and_bit_exact(ctx, dtype):
    np.random.seed(1234)
    a = curandom.rand((N + 3,), dtype).get()
    assert a.dtype == dtype and a.shape == (N + 3,)
    assert (a >= 0).all() and (a < 1).all()
    _mean_var_ok(a, 0.5, 1 / 12, mu4=1 / 80)
    np.random.seed(1234)
    seed = np.random.randint(2**31 - 1)
    np.testing.assert_array_equal(a, rand_reference(N + 3, seed, dtype))
    # np.random.seed makes it repeatable; another seed, other numbers
    np.random.seed(1234)
    np.testing.assert_array_equal(curandom.rand((N + 3,), dtype).get(), a)
    assert (curandom.rand((N + 3,), dtype).get() != a).mean() > 0.99


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [np.int32, np.uint32])
def test_rand_integers(ctx, dtype):
    np.random.seed(99)
    a = curandom.rand((10, 1001), dtype).get()
    np.random.seed(99)
    np.testing.assert_array_equal(
        a.ravel(), rand_reference(10 * 1001, np.random.randint(2**31 - 1), dtype)
    )
    bits = np.unpackbits(a.view(np.uint8)).mean()
    assert abs(bits - 0.5) < 0.005


@pytest.mark.gpu
def test_rand_unaligned_view_and_empty(ctx):
    from pygpu import gpuarray

    assert curandom.rand((0,)).shape == (0,)
    # a 2-D shape, and the tail of an odd size
    x = curandom.rand((7, 3), np.float64).get()
    assert x.shape == (7, 3) and (x >= 0).all() and (x < 1).all()
    assert isinstance(curandom.rand((5,)), gpuarray.GPUArray)


def _seeds(value):
    def getter(n):
        from pygpu import gpuarray

        return gpuarray.to_gpu(np.full(n, value, np.int32))

    return getter


@pytest.fixture(scope="module")
def generators():
    """One generator of each class (their states take time to set up);
    the unscrambled Sobol ones start at point 1 (point 0 is 0 in every
    dimension, a -6.3 sigma normal)."""
    return {}


def _gen(generators, name):
    if name not in generators:
        cls = getattr(curandom, name)
        generators[name] = cls(offset=1) if name in PLAIN_SOBOL else cls()
    return generators[name]


@pytest.mark.gpu
@pytest.mark.parametrize("name", GENERATORS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_uniform_normal_log_normal_statistics(ctx, generators, name, dtype):
    gen = _gen(generators, name)
    slack = 0.12 if name in PLAIN_SOBOL else 0.0
    u = gen.gen_uniform(N, dtype).get()
    assert u.dtype == dtype and u.shape == (N,)
    assert (u > 0).all() and (u <= 1).all()
    _mean_var_ok(u, 0.5, 1 / 12, mu4=1 / 80, slack=slack)
    for n in (N, N + 1, N + 3):  # the Box-Muller pairs and the odd tails
        z = gen.gen_normal(n, dtype).get()
        assert z.shape == (n,) and np.isfinite(z).all()
        _mean_var_ok(z, 0.0, 1.0, slack=slack)
    ln = gen.gen_log_normal(N + 1, dtype, 0.5, 0.25).get()
    assert (ln > 0).all()
    _mean_var_ok(np.log(ln.astype(np.float64)), 0.5, 0.0625, slack=slack)


@pytest.mark.gpu
@pytest.mark.parametrize("name", GENERATORS)
def test_integers_and_poisson(ctx, generators, name):
    from pygpu import gpuarray

    gen = _gen(generators, name)
    plain = name in PLAIN_SOBOL
    slack = 0.12 if plain else 0.0
    u = gen.gen_uniform(N, np.uint32).get()
    assert u.dtype == np.uint32
    _mean_var_ok(u / 2.0**32, 0.5, 1 / 12, mu4=1 / 80, slack=slack)
    i = gen.gen_uniform(N, np.int32).get()
    assert i.dtype == np.int32 and (i < 0).any() and (i > 0).any()
    lam = 13.0
    p = gen.gen_poisson(N, np.uint32, lam).get()
    assert p.dtype == np.uint32
    _mean_var_ok(p, lam, lam, mu4=lam * (1 + 3 * lam), slack=slack)
    for dtype in (np.float32, np.float64, np.uint32):
        a = gpuarray.empty(N, dtype=dtype)
        a.fill(10)
        gen.fill_poisson(a)
        a = a.get()
        assert (a == np.round(a)).all() and (a >= 0).all()
        # P(X = 9) for Poisson(10) is 0.12511 (scipy.stats.poisson.pmf(9, 10))
        assert abs((a == 9).mean() - 0.12511) < (0.005 if plain else 0.002)
        _mean_var_ok(a, 10.0, 10.0, mu4=10 * 31, slack=slack)
    if "Sobol" not in name:  # (quasi-random low bits are not random)
        w = gen.gen_uniform(N, np.uint64).get()
        assert w.dtype == np.uint64
        assert abs(np.unpackbits(w.view(np.uint8)).mean() - 0.5) < 0.005


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["XORWOWRandomNumberGenerator", "MRG32k3aRandomNumberGenerator"])
def test_same_seed_same_numbers_and_skip_ahead(ctx, name):
    from pygpu import gpuarray

    cls = getattr(curandom, name)
    a = cls(seed_getter=_seeds(1234))
    b = cls(seed_getter=_seeds(1234))
    c = cls(seed_getter=_seeds(4321))
    xa = a.gen_normal(N, np.float32).get()
    np.testing.assert_array_equal(b.gen_normal(N, np.float32).get(), xa)
    assert (c.gen_normal(N, np.float32).get() != xa).mean() > 0.99
    # every generator draws 4 numbers, then a skipped-ahead twin agrees
    t = a.generator_count
    a.fill_uniform(gpuarray.empty(4 * t, np.uint32))
    d = cls(seed_getter=_seeds(1234))
    d.gen_normal(N, np.float32)  # catch d up with a's first draw
    d.call_skip_ahead(4)
    np.testing.assert_array_equal(
        d.gen_uniform(N, np.uint32).get(), a.gen_uniform(N, np.uint32).get()
    )
    # offset= starts every generator that far in
    e = cls(seed_getter=_seeds(77), offset=8)
    f = cls(seed_getter=_seeds(77))
    f.fill_uniform(gpuarray.empty(8 * t, np.uint32))
    np.testing.assert_array_equal(
        e.gen_uniform(N, np.uint32).get(), f.gen_uniform(N, np.uint32).get()
    )
    # per-generator skips
    g = cls(seed_getter=_seeds(5))
    h = cls(seed_getter=_seeds(5))
    g.call_skip_ahead_array(gpuarray.to_gpu(np.full(t, 4, np.uint64)))
    h.call_skip_ahead(4)
    np.testing.assert_array_equal(
        g.gen_uniform(N, np.uint32).get(), h.gen_uniform(N, np.uint32).get()
    )
    # a subsequence skip changes the numbers
    h.call_skip_ahead_sequence(1)
    g.call_skip_ahead_sequence_array(gpuarray.to_gpu(np.ones(t, np.uint64)))
    np.testing.assert_array_equal(
        g.gen_uniform(N, np.uint32).get(), h.gen_uniform(N, np.uint32).get()
    )
    if name.startswith("MRG"):
        g.call_skip_ahead_subsequence(2)
        h.call_skip_ahead_subsequence_array(gpuarray.to_gpu(np.full(t, 2, np.uint64)))
        np.testing.assert_array_equal(
            g.gen_uniform(N, np.uint32).get(), h.gen_uniform(N, np.uint32).get()
        )


def _sobol_reference(dirs, scramble, points):
    """points x dims of the Sobol sequence by the Gray-code walk cuRAND does:
    x_0 = scramble, x_{i+1} = x_i ^ v[lowest zero bit of i]."""
    dims = dirs.shape[0]
    out = np.empty((points, dims), dirs.dtype)
    x = scramble.copy()
    for i in range(points):
        out[i] = x
        low = (~i & (i + 1)).bit_length() - 1
        x = x ^ dirs[:, low]
    return out


def _uniform_reference(words, dtype):
    """cuRAND's _curand_uniform(_double) of Sobol words (curand_uniform.h):
    float from the top 32 bits, x * 2**-32 + 2**-33; double from 32-bit
    words x * 2**-32 + 2**-32, from 64-bit ones (x >> 11) * 2**-53 + 2**-54
    (all exact but the float sum, rounded once, as the GPU's fma)."""
    words = np.asarray(words)
    wide = words.dtype == np.uint64
    if np.dtype(dtype) == np.float32:
        t = (words >> np.uint64(32)).astype(np.uint32) if wide else words
        return t.astype(np.float32) * np.float32(2.0**-32) + np.float32(2.0**-33)
    if wide:
        return (words >> np.uint64(11)).astype(np.float64) * 2.0**-53 + 2.0**-54
    return words.astype(np.float64) * 2.0**-32 + 2.0**-32


def _icdf_reference(words, dtype):
    """cuRAND's _curand_normal_icdf(_double) in NumPy (curand_normal_static.h):
    s * erfcinv(2p) with s = CURAND_SQRT2, which curand_globals.h defines as
    -1.4142135f (-sqrt(2)), and +sqrt(2) for the mirrored upper half: the
    increasing map, Phi^-1(p) = -sqrt(2) erfcinv(2p), so point 0 (p = 2**-33)
    is -6.34, not +6.34 (this reference had the sign backwards)."""
    erfcinv = pytest.importorskip("scipy.special").erfcinv
    words = np.asarray(words)
    if np.dtype(dtype) == np.float32:
        t = (
            (words >> np.uint64(32)).astype(np.uint64)
            if words.dtype == np.uint64
            else words.astype(np.uint64)
        )
        mirror = t > 0x80000000
        t = np.where(mirror, 0xFFFFFFFF - t, t)
        p = t.astype(np.float32) * np.float32(2.0**-32) + np.float32(2.0**-33)
        s = np.where(mirror, np.sqrt(2.0), -np.sqrt(2.0))
        return (s * erfcinv(2.0 * p.astype(np.float64))).astype(np.float32)
    if words.dtype == np.uint64:
        x = words >> np.uint64(11)
        mirror = x > 2**52
        x = np.where(mirror, np.uint64(2**53 - 1) - x, x)
        p = x.astype(np.float64) * 2.0**-53 + 2.0**-54
    else:
        x = words.astype(np.uint64)
        mirror = x > 0x80000000
        x = np.where(mirror, 0xFFFFFFFF - x, x)
        p = x.astype(np.float64) * 2.0**-32 + 2.0**-33
    s = np.where(mirror, np.sqrt(2.0), -np.sqrt(2.0))
    return s * erfcinv(2.0 * p)


@pytest.mark.gpu
@pytest.mark.parametrize("name", GENERATORS[2:])
def test_sobol_points(ctx, generators, name):
    gen = _gen(generators, name)
    t = gen.generator_count
    assert t <= 20000
    bits = 64 if "64" in name else 32
    word = np.uint64 if bits == 64 else np.uint32
    sets = curandom.direction_vector_set
    scrambled = name.startswith("Scrambled")
    dset = {
        (32, False): sets.VECTOR_32,
        (32, True): sets.SCRAMBLED_VECTOR_32,
        (64, False): sets.VECTOR_64,
        (64, True): sets.SCRAMBLED_VECTOR_64,
    }[bits, scrambled]
    dirs = curandom.host_direction_vectors(dset)[:t]
    scr = curandom.host_scramble_constants(bits)[:t] if scrambled else np.zeros(t, word)
    fresh = getattr(curandom, name)()
    points = 64
    got = fresh.gen_uniform(points * t, word).get().reshape(points, t)
    np.testing.assert_array_equal(got, _sobol_reference(dirs, scr, points))
    if name == "Sobol32RandomNumberGenerator":
        # and SciPy's unscrambled Sobol points, dimension by dimension
        qmc = pytest.importorskip("scipy.stats.qmc")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ref = qmc.Sobol(50, scramble=False, bits=32).random(points)
        np.testing.assert_array_equal(got[:, :50], (ref * 2.0**32).astype(np.uint64))
    # the same points as 32-bit integers (of a 64-bit generator: the top
    # halves, equal to the 32-bit generator's) and as floats
    ref = _sobol_reference(dirs, scr, points)
    top = (ref >> np.uint64(32)).astype(np.uint32) if bits == 64 else ref
    for dtype in (np.uint32, np.int32):
        twin = getattr(curandom, name)()
        np.testing.assert_array_equal(
            twin.gen_uniform(points * t, dtype).get().reshape(points, t), top.view(dtype)
        )
    for dtype in (np.float32, np.float64):
        twin = getattr(curandom, name)()
        np.testing.assert_array_equal(
            twin.gen_uniform(points * t, dtype).get().reshape(points, t),
            _uniform_reference(ref, dtype),
        )
    # normals by cuRAND's inverse CDF of the same points (sign included:
    # z = -sqrt(2) * erfcinv(2p), mirrored at 2**31)
    for dtype, rtol in ((np.float32, 1e-5), (np.float64, 1e-13)):
        twin = getattr(curandom, name)()
        z = twin.gen_normal(points * t, dtype).get().reshape(points, t)
        ref = _icdf_reference(_sobol_reference(dirs, scr, points), dtype)
        np.testing.assert_allclose(z, ref, rtol=rtol, atol=rtol)
    # skip ahead: the next points
    fresh.call_skip_ahead(5)
    nxt = fresh.gen_uniform(t, word).get()
    np.testing.assert_array_equal(nxt, _sobol_reference(dirs, scr, points + 6)[-1])
    # offset=
    off = getattr(curandom, name)(offset=points)
    np.testing.assert_array_equal(
        off.gen_uniform(t, word).get(), _sobol_reference(dirs, scr, points + 1)[-1]
    )


@pytest.mark.gpu
def test_generator_argument_errors(ctx, generators):
    from pygpu import gpuarray

    with pytest.raises(TypeError, match="seed must be GPUArray of integers of right length"):
        curandom.XORWOWRandomNumberGenerator(seed_getter=lambda n: np.zeros(n, np.int32))
    with pytest.raises(TypeError, match="seed must be GPUArray of integers of right length"):
        curandom.XORWOWRandomNumberGenerator(
            seed_getter=lambda n: gpuarray.to_gpu(np.zeros(n + 1, np.int32))
        )
    with pytest.raises(TypeError, match="offset must be an int, not float"):
        curandom.XORWOWRandomNumberGenerator(offset=1.5)
    with pytest.raises(TypeError, match="dir_vector must be a uint32 GPUArray of shape"):
        curandom.Sobol32RandomNumberGenerator(
            dir_vector=gpuarray.to_gpu(np.zeros((3, 32), np.uint32))
        )
    with pytest.raises(ValueError, match=r"offset must be in \[0, 4294967295\], not 4294967296"):
        curandom.Sobol32RandomNumberGenerator(offset=2**32)
    gen = _gen(generators, "XORWOWRandomNumberGenerator")
    with pytest.raises(ValueError, match=r"skip_ahead: the count must be in \[0, "):
        gen.call_skip_ahead(-1)
    with pytest.raises(TypeError, match="skip_ahead_array: the counts must be uint64, not int32"):
        gen.call_skip_ahead_array(gpuarray.to_gpu(np.zeros(gen.generator_count, np.int32)))
    with pytest.raises(
        ValueError,
        match="skip_ahead_sequence_array: the counts must be a "
        "contiguous array of %d" % gen.generator_count,
    ):
        gen.call_skip_ahead_sequence_array(gpuarray.to_gpu(np.zeros(5, np.uint64)))
    x = gpuarray.to_gpu(np.zeros(20, np.float32))
    with pytest.raises(ValueError, match="fill_uniform: data must be a contiguous array"):
        gen.fill_uniform(x[::2])


@pytest.mark.gpu
def test_seed_getters_and_tables(ctx):
    u = curandom.seed_getter_uniform(100)
    assert u.dtype == np.int32 and u.shape == (100,)
    assert len(np.unique(u.get())) == 1
    q = curandom.seed_getter_unique(1000)
    assert q.dtype == np.int32 and len(np.unique(q.get())) > 990
    d = curandom.generate_direction_vectors(20003)
    assert d.shape == (20003, 32) and d.dtype == np.uint32
    host = curandom.host_direction_vectors()
    got = d.get()
    np.testing.assert_array_equal(got[:20000], host)
    np.testing.assert_array_equal(got[20000:], host[:3])
    d64 = curandom.generate_direction_vectors(5, curandom.direction_vector_set.VECTOR_64)
    assert d64.shape == (5, 64) and d64.dtype == np.uint64
    s = curandom.generate_scramble_constants64(7)
    np.testing.assert_array_equal(s.get(), curandom.host_scramble_constants(64)[:7])


@pytest.mark.gpu
def test_characterize_on_the_device(ctx):
    assert characterize.has_stack() and characterize.has_double_support()
    assert characterize.sizeof("double2") == 16
    assert characterize.sizeof("curandStateXORWOW", "#include <curand_kernel.h>") == 48
    gen = curandom.XORWOWRandomNumberGenerator()
    assert gen.state_size == 48 and gen.state.size >= 48 * gen.generator_count
