"""Green contexts: Device.split_sms() partitions a device's SMs into
GreenContexts (docs/green_contexts.md).  The stand-in tests check the rules,
the objects' lives and every error path; the GPU tests check that each
partition's blocks run on disjoint SM sets of the stated sizes."""

import ctypes
import os
import subprocess
import sys

import numpy as np
import pytest

import pygpu.driver as cuda
from pygpu import gpuarray

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


# ---- on the stand-in: 132 SMs, by default partitions of 8 in multiples of 8


@pytest.fixture
def rules(standin):
    """Set the stand-in's SM rules: (min partition, alignment, groups cap);
    -1 is the architecture's rule, 0 a field the driver leaves unreported."""
    fn = standin.lib.fakecuda_sm_rules
    fn.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_uint]
    yield fn
    fn(-1, -1, 0)


def live_green(standin):
    standin.lib.fakecuda_live.argtypes = [ctypes.c_char_p]
    return standin.lib.fakecuda_live(b"green")


@pytest.mark.standin
def test_partition_rules(ctx, standin, rules):
    dev = ctx.get_device()
    assert dev.sm_partitioning() == (132, 8, 8)
    rules(16, 4, 0)
    assert dev.sm_partitioning() == (132, 16, 4)
    # a driver before 12.8 leaves the two rules unreported: cuda.h's rule for
    # the architecture (the stand-in is sm_99: 8 and 8)
    rules(0, 0, 0)
    assert dev.sm_partitioning() == (132, 8, 8)


@pytest.mark.standin
def test_split_makes_green_contexts_of_the_sizes_asked(ctx, standin):
    dev = ctx.get_device()
    before = live_green(standin)
    parts = dev.split_sms([16, 48, 8])
    assert [type(p) for p in parts] == [cuda.GreenContext] * 3
    assert all(isinstance(p, cuda.Context) for p in parts)
    assert [p.sm_count for p in parts] == [16, 48, 8]
    assert [p.index for p in parts] == [0, 1, 2]
    assert all(p.device == dev and not p.is_primary and not p.detached for p in parts)
    assert len({p.handle for p in parts}) == 3 and ctx.handle not in {p.handle for p in parts}
    assert all(p.green_handle != 0 for p in parts)
    assert repr(parts[1]).startswith("<pygpu.driver.GreenContext 1 of device 0: 48 SMs at ")
    assert live_green(standin) == before + 3
    del parts
    assert live_green(standin) == before


@pytest.mark.standin
def test_work_in_a_green_context_belongs_to_it(ctx, standin, rng):
    (g,) = ctx.get_device().split_sms([64])
    host = rng.standard_normal(1000).astype(np.float32)
    with g as entered:
        assert entered is g
        assert cuda.Context.get_current() is g
        a = gpuarray.to_gpu(host)
        s = g.create_stream(priority=-1)
        b = gpuarray.empty_like(a)
        b.set_async(host[::-1].copy(), stream=s)
        s.synchronize()
        plain = cuda.Stream()
        np.testing.assert_array_equal(a.get(), host)
        np.testing.assert_array_equal(b.get(), host[::-1])
    assert cuda.Context.get_current() == ctx
    assert a.gpudata.context is g and b.gpudata.context is g
    with pytest.raises(ValueError, match="allocated in another context .*GreenContext 0"):
        a.get()  # an array belongs to the context that made it, as any Context's
    assert isinstance(s, cuda.Stream) and isinstance(plain, cuda.Stream)
    g.push()
    assert cuda.Context.get_current() is g
    cuda.Context.pop()
    assert cuda.Context.get_current() == ctx
    del a, b, s, plain


@pytest.mark.standin
def test_detach_releases_the_green_context(ctx, standin):
    before = live_green(standin)
    g, h = ctx.get_device().split_sms([8, 8])
    g.detach()
    g.detach()  # idempotent
    assert g.detached and "(detached)" in repr(g) and g.green_handle == 0
    assert live_green(standin) == before + 1
    with pytest.raises(cuda.LogicError):
        g.create_stream()
    with pytest.raises(cuda.LogicError):
        g.push()
    with h:  # the other partition is untouched
        a = gpuarray.to_gpu(np.arange(5, dtype=np.int32))
        assert a.get().tolist() == [0, 1, 2, 3, 4]
    del a, h
    assert live_green(standin) == before


@pytest.mark.standin
@pytest.mark.parametrize(
    "counts,message",
    [
        ([0], "partition 0 asks for 0 SMs; each needs at least 8"),
        ([8, -8], "partition 1 asks for -8 SMs; each needs at least 8"),
        ([4], "partition 0 asks for 4 SMs, fewer than device 0's minimum partition of 8 SMs"),
        ([8, 12], "partition 1 asks for 12 SMs, not a multiple of device 0's granularity of 8"),
        ([72, 64], "the partitions ask for 136 SMs in all; device 0 has 132"),
        ([136], "partition 0 asks for 136 SMs; device 0 has 132"),
        ([8, 1 << 70], r"partition 1 asks for \d+ SMs; device 0 has 132"),
        ([], "counts is empty"),
        ([8] * 17, "17 partitions asked for; device 0's 132 SMs make at most 16 partitions"),
    ],
)
def test_impossible_splits_are_value_errors_before_the_driver(ctx, standin, counts, message):
    dev = ctx.get_device()
    n = standin.calls("cuDevSmResourceSplitByCount")
    with pytest.raises(ValueError, match=message):
        dev.split_sms(counts)
    assert standin.calls("cuDevSmResourceSplitByCount") == n


@pytest.mark.standin
def test_unlike_sizes_need_a_common_unit(ctx, standin, rules):
    rules(8, 4, 0)
    dev = ctx.get_device()
    assert [g.sm_count for g in dev.split_sms([8, 16, 24])] == [8, 16, 24]
    with pytest.raises(ValueError, match="greatest common divisor, 4 SMs here, less than"):
        dev.split_sms([8, 12])


@pytest.mark.standin
def test_a_driver_that_makes_fewer_groups_is_a_value_error(ctx, standin, rules):
    rules(-1, -1, 4)  # clusters: at most 4 groups
    before = live_green(standin)
    dev = ctx.get_device()
    assert [g.sm_count for g in dev.split_sms([32])] == [32]
    with pytest.raises(ValueError, match="split into only 4 groups of 8 SMs, 5 needed"):
        dev.split_sms([16, 24])
    assert live_green(standin) == before


@pytest.mark.standin
@pytest.mark.parametrize("nth", [1, 2, 3])
@pytest.mark.parametrize(
    "routine",
    [
        "cuDeviceGetDevResource",
        "cuDevSmResourceSplitByCount",
        "cuDevResourceGenerateDesc",
        "cuGreenCtxCreate",
        "cuCtxFromGreenCtx",
    ],
)
def test_driver_failures_raise_and_leak_nothing(ctx, standin, routine, nth):
    dev = ctx.get_device()
    before = live_green(standin)
    standin.fail(routine, nth=nth)
    if routine in ("cuDeviceGetDevResource", "cuDevSmResourceSplitByCount") and nth > 1:
        parts = dev.split_sms([8, 16, 8])  # called once a split: nothing fails
        assert [p.sm_count for p in parts] == [8, 16, 8]
        standin.cancel()
        return
    with pytest.raises(cuda.Error, match="%s failed: CUDA_ERROR_UNKNOWN" % routine) as e:
        dev.split_sms([8, 16, 8])
    assert e.value.routine == routine
    assert live_green(standin) == before  # the partitions made before it are gone


@pytest.mark.standin
def test_create_stream_failure(ctx, standin):
    (g,) = ctx.get_device().split_sms([8])
    n = standin.live()["streams"]
    standin.fail("cuGreenCtxStreamCreate")
    with pytest.raises(cuda.Error, match="cuGreenCtxStreamCreate failed") as e:
        g.create_stream()
    assert e.value.routine == "cuGreenCtxStreamCreate"
    assert standin.live()["streams"] == n
    with pytest.raises(OverflowError, match="create_stream\\(\\): priority"):
        g.create_stream(priority=1 << 40)


@pytest.mark.standin
def test_the_type_is_made_by_split_sms_only(ctx, standin):
    with pytest.raises(TypeError):
        cuda.GreenContext()
    with pytest.raises(TypeError, match="counts must be a sequence of SM counts, not str"):
        ctx.get_device().split_sms("64")
    with pytest.raises(TypeError, match="counts must be a sequence of SM counts, not int"):
        ctx.get_device().split_sms(64)
    with pytest.raises(TypeError, match=r"counts\[1\] must be an int, not float"):
        ctx.get_device().split_sms([8, 8.0])
    with pytest.raises(TypeError, match=r"counts\[0\] must be an int, not bool"):
        ctx.get_device().split_sms([True])


def _run_hidden(tmp_path, hide, code):
    sys.path.insert(0, os.path.join(ROOT, "tests", "support"))
    import fakecuda

    env = dict(os.environ, PYGPU_LIBCUDA=fakecuda.build(), FAKECUDA_HIDE=hide)
    r = subprocess.run(
        [sys.executable, "-c", code],
        env=env,
        capture_output=True,
        text=True,
        cwd=str(tmp_path),
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    return r.stdout.splitlines()


@pytest.mark.standin
@pytest.mark.parametrize(
    "hidden",
    [
        "cuDeviceGetDevResource",
        "cuDevSmResourceSplitByCount",
        "cuDevResourceGenerateDesc",
        "cuGreenCtxCreate",
        "cuGreenCtxDestroy",
        "cuCtxFromGreenCtx",
    ],
)
def test_a_driver_without_green_contexts(tmp_path, hidden):
    code = (
        "import pygpu.driver as d, pygpu.autoinit\n"
        "dev = d.Device(0)\n"
        "for f in (lambda: dev.split_sms([8]), dev.sm_partitioning):\n"
        "    try: f()\n"
        "    except d.LogicError as e: print(e)\n"
    )
    assert _run_hidden(tmp_path, hidden, code) == [
        "split_sms() needs %s, which this CUDA driver does not provide" % hidden,
        "sm_partitioning() needs %s, which this CUDA driver does not provide" % hidden,
    ]


@pytest.mark.standin
def test_a_driver_without_green_streams(tmp_path):
    # CUDA 12.4 has green contexts, 12.5 their streams
    code = (
        "import pygpu.driver as d, pygpu.autoinit\n"
        "(g,) = d.Device(0).split_sms([16])\n"
        "print(g.sm_count)\n"
        "try: g.create_stream()\n"
        "except d.LogicError as e: print(e)\n"
        "import numpy as np\n"
        "with g:\n"
        "    s = d.Stream(); a = d.to_device(np.arange(3.0), stream=s)\n"
        "    s.synchronize(); print(d.from_device(a, 3, np.float64).tolist())\n"
    )
    assert _run_hidden(tmp_path, "cuGreenCtxStreamCreate,cuGreenCtxGetDevResource", code) == [
        "16",
        "GreenContext.create_stream() needs cuGreenCtxStreamCreate, which this CUDA driver "
        "does not provide",
        "[0.0, 1.0, 2.0]",
    ]


# ---- on a GPU

SMID = r"""
extern "C" __global__ void where(unsigned int *smid, float *x, int spin)
{
    unsigned int id, last;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(id));
    float v = x[blockIdx.x * blockDim.x + threadIdx.x];
    for (int i = 0; i < spin; i++)
        v = v * 0.999f + 0.001f;
    x[blockIdx.x * blockDim.x + threadIdx.x] = v;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(last));
    /* the block's SM, or MOVED where %smid changed during its life (PTX: a
     * block rescheduled after a preemption, e.g. while other processes
     * share the GPU) */
    if (threadIdx.x == 0)
        smid[blockIdx.x] = id == last ? id : 0xFFFFFFFEu;
}
"""


def _two_sizes(dev):
    """[2k, k] SMs, k a quarter of the device in whole units (H200: [64, 32])."""
    total, minimum, align = dev.sm_partitioning()
    unit = max(minimum, align)
    small = unit * max(1, (total // 4) // unit)
    return [2 * small if 3 * small <= total else small, small]


@pytest.mark.gpu
def test_each_partition_runs_on_its_own_sms(ctx, rng):
    from pygpu.compiler import SourceModule

    dev = ctx.get_device()
    total = dev.multiprocessor_count
    assert dev.sm_partitioning()[0] == total
    sizes = _two_sizes(dev)
    parts = dev.split_sms(sizes)
    assert [p.sm_count for p in parts] == sizes
    threads, spin = 256, 20000
    runs = []
    for g in parts:
        with g:
            mod = SourceModule(SMID)
            f = mod.get_function("where")
            blocks = 16 * g.sm_count
            host = rng.random(blocks * threads).astype(np.float32)
            x = gpuarray.to_gpu(host)
            smid = gpuarray.zeros(blocks, np.uint32) + np.uint32(0xFFFFFFFF)
            s = g.create_stream()
            runs.append((g, f, x, smid, s, host, blocks))
    # both partitions at once, each on its own green stream
    for g, f, x, smid, s, host, blocks in runs:
        with g:
            f(smid, x, np.int32(spin), block=(threads, 1, 1), grid=(blocks, 1), stream=s)
    sets = []
    for g, f, x, smid, s, host, blocks in runs:
        with g:
            s.synchronize()
            ids = smid.get()
            assert (ids != 0xFFFFFFFF).all()  # every block recorded its SM
            # the blocks that ran on one SM from start to end (%smid is not
            # fixed for a block's life: PTX says it may change when a block
            # is rescheduled, as when other processes share the GPU)
            stayed = ids[ids != 0xFFFFFFFE]
            assert len(stayed) >= 0.75 * blocks, (g, blocks - len(stayed), "blocks moved")
            used = set(stayed.tolist())
            assert max(used) < total
            # about the stated size: every SM of the partition (a few more
            # ids may show: on an H200, 66 for a partition of 64)
            assert g.sm_count <= len(used) <= g.sm_count + 4, (g, len(used), sorted(used))
            sets.append(used)
            expect = host.copy()
            for _ in range(spin):
                expect = expect * np.float32(0.999) + np.float32(0.001)
            # (the kernel's x * 0.999f + 0.001f is one fused multiply-add, the
            # host's two roundings: after 20,000 steps both sit at their own
            # fixed point near 1, 1.3e-5 apart on an H200)
            np.testing.assert_allclose(x.get(), expect, rtol=5e-5)
    assert not (sets[0] & sets[1]), "partitions shared SMs: %s" % sorted(sets[0] & sets[1])


@pytest.mark.gpu
def test_the_array_layer_inside_a_green_context(ctx, rng):
    from pygpu import curandom
    from pygpu.compiler import SourceModule

    dev = ctx.get_device()
    unit = max(dev.sm_partitioning()[1:])
    (g,) = dev.split_sms([unit * 2])
    a_h = rng.standard_normal(100_003).astype(np.float32)
    b_h = rng.standard_normal(100_003).astype(np.float32)
    with g:
        a, b = gpuarray.to_gpu(a_h), gpuarray.to_gpu(b_h)
        c = 2 * a + b * b
        total = gpuarray.sum(a).get()
        r = curandom.rand((4096,), dtype=np.float32).get()
        mod = SourceModule(
            'extern "C" __global__ void neg(float *x, int n)'
            "{ int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i] = -x[i]; }"
        )
        mod.get_function("neg")(
            a, np.int32(a.size), block=(256, 1, 1), grid=((a.size + 255) // 256, 1)
        )
        cuda.Context.synchronize()
        neg = a.get()
        cc = c.get()
        assert c.gpudata.context is g and a.gpudata.context is g
    np.testing.assert_allclose(cc, 2 * a_h + b_h * b_h, rtol=1e-6)
    assert total == pytest.approx(float(a_h.astype(np.float64).sum()), rel=1e-4, abs=1e-2)
    assert ((r >= 0) & (r < 1)).all() and len(set(r.tolist())) > 4000
    np.testing.assert_array_equal(neg, -a_h)


@pytest.mark.standin
@pytest.mark.parametrize("hide", ["", "cuGreenCtxCreate,cuCheckpointProcessGetState"])
def test_python_m_pygpu_reports_partitions_and_checkpoint(tmp_path, hide):
    sys.path.insert(0, os.path.join(ROOT, "tests", "support"))
    import fakecuda

    env = dict(os.environ, PYGPU_LIBCUDA=fakecuda.build(), FAKECUDA_HIDE=hide)
    r = subprocess.run(
        [sys.executable, "-m", "pygpu"], env=env, capture_output=True, text=True, timeout=300
    )
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    if not hide:
        assert "  green contexts: 132 SMs, split_sms() partitions of 8+ in multiples of 8" in lines
        assert "checkpoint/restore (pygpu.checkpoint): available" in lines
    else:
        assert (
            "  green contexts: not available (LogicError: sm_partitioning() needs "
            "cuGreenCtxCreate, which this CUDA driver does not provide)" in lines
        )
        assert (
            "checkpoint/restore (pygpu.checkpoint): not available (LogicError: "
            "checkpoint.state() (a CUDA 12.8 driver or newer) needs "
            "cuCheckpointProcessGetState, which this CUDA driver does not provide)" in lines
        )
