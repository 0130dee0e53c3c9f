"""pygpu.tools.autotune: the space, the build of each variant, the choice,
its memory and disk store, skipping with reasons, output checking.

CPU tests run against the driver stand-in (kernels do not run there, so the
timing is a fake timer and the outputs are faked where checking is tested);
the gpu tests time real kernels."""

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from pygpu import autotune as at
from pygpu.tools import AutotuneError, Tuned, autotune

SCALE = r"""
#ifndef BOUND
#define BOUND 1024
#endif
#if defined(TILE) && TILE == 3
#error "TILE 3 is not supported"
#endif
extern "C" __global__ void __launch_bounds__(BOUND) scale(float *out, const float *x, float a, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = a * x[i];
}
"""


@pytest.fixture(autouse=True)
def _fresh_memory():
    """Each test starts with no tuned choice in memory."""
    at.clear(disk=False)
    yield
    at.clear(disk=False)


# ---- no driver needed ----


def test_expand_space_order_and_values():
    v = at.expand_space({"block": [64, 128], "TILE": [1, 2, 4]})
    assert v == [{"block": b, "TILE": t} for b in (64, 128) for t in (1, 2, 4)]
    assert at.expand_space({"x": range(3)}) == [{"x": 0}, {"x": 1}, {"x": 2}]


@pytest.mark.parametrize(
    "space, exc, match",
    [
        ({}, TypeError, "space must be a non-empty dict"),
        ([("block", [1])], TypeError, "space must be a non-empty dict"),
        ({"block": []}, ValueError, r"space\['block'\] is empty"),
        ({"block": 128}, TypeError, r"space\['block'\] must be a list of values, not int"),
        ({"block": "128"}, TypeError, r"space\['block'\] must be a list of values, not str"),
        ({"1x": [1]}, ValueError, "a space name must be an identifier"),
    ],
)
def test_expand_space_errors(space, exc, match):
    with pytest.raises(exc, match=match):
        at.expand_space(space)


def test_build_spec_maps_a_choice_to_options_and_launch():
    choice = {
        "block": 128,
        "maxrregcount": 32,
        "options": ["-use_fast_math"],
        "TILE": 4,
        "shared": 512,
    }
    src, opts, name, exprs, b, g, sh = at._build_spec(
        choice, "src", "scale", ["-lineinfo"], None, lambda c: (1000 // c["block"], 1), None
    )
    assert src == "src" and name == "scale" and exprs == ()
    assert opts == ["-lineinfo", "-maxrregcount=32", "-use_fast_math", "-DTILE=4"]
    assert b == (128, 1, 1) and g == (7, 1) and sh == 512
    # templates: the kernel name formatted with the choice, a name expression
    src, opts, name, exprs, b, g, sh = at._build_spec(
        {"T": "float", "B": 64},
        lambda c: "// %s" % c["T"],
        "tiled<{T}, {B}>",
        [],
        lambda c: (c["B"], 2),
        (4, 4),
        lambda c: c["B"] * 8,
    )
    assert (src, name, exprs, b, g, sh) == (
        "// float",
        "tiled<float, 64>",
        ("tiled<float, 64>",),
        (64, 2, 1),
        (4, 4),
        512,
    )
    assert opts == ["-DT=float", "-DB=64"]


@pytest.mark.parametrize(
    "kw, exc, match",
    [
        (dict(grid=None), ValueError, "no grid: pass grid="),
        (dict(block=None, choice={"TILE": 1}), ValueError, "no block size"),
        (
            dict(source=b"x"),
            TypeError,
            "source must be a str or a callable returning one, not bytes",
        ),
        (dict(kernel=3), TypeError, "kernel must be a str or a callable returning one, not int"),
        (dict(block=(1, 2, 3, 4)), ValueError, "block must have one to three dimensions"),
    ],
)
def test_build_spec_errors(kw, exc, match):
    args = dict(
        choice={"block": 32},
        source="s",
        kernel="k",
        options=[],
        block=None,
        grid=(1, 1),
        shared=None,
    )
    args.update(kw)
    with pytest.raises(exc, match=match):
        at._build_spec(**args)


class FakeCAI:
    def __init__(self, shape, typestr):
        self.__cuda_array_interface__ = {
            "shape": shape,
            "typestr": typestr,
            "data": (0, False),
            "version": 3,
        }


def test_shape_class_buckets_sizes_to_powers_of_two():
    a = at.shape_class([FakeCAI((1000,), "<f4"), np.float32(1), 5, np.zeros((3, 17), np.int16)])
    assert a == (("a", "<f4", (1024,)), ("s", "<f4"), ("o", "int"), ("h", "<i2", (4, 32)))
    assert at.shape_class([FakeCAI((513,), "<f4")]) == at.shape_class([FakeCAI((1024,), "<f4")])
    assert at.shape_class([FakeCAI((512,), "<f4")]) != at.shape_class([FakeCAI((513,), "<f4")])
    assert at.shape_class([FakeCAI((512,), "<f4")]) != at.shape_class([FakeCAI((512,), "<f8")])
    assert at.shape_class([FakeCAI((0,), "<f4")]) == (("a", "<f4", (0,)),)


def test_same_compares_every_element():
    w = [np.arange(10, dtype=np.float32)]
    assert at._same([w[0].copy()], w, 1e-5, 0) is None
    g = w[0].copy()
    g[3] += 1
    assert at._same([g], w, 1e-5, 0) == "wrong output 0: 1 of 10 elements differ"
    assert at._same([w[0][:5]], w, 1e-5, 0) == "output 0 has shape (5,), the reference (10,)"
    i = [np.arange(4)]
    assert at._same([np.array([0, 1, 2, 4])], i, 0, 0) == "wrong output 0: 1 of 4 elements differ"


# ---- against the stand-in ----


def _data(n=1000, dtype=np.float32):
    from pygpu import gpuarray

    rng = np.random.default_rng()
    x = rng.standard_normal(n).astype(dtype)
    return gpuarray.to_gpu(x), gpuarray.empty(n, dtype), x


def _tune(x, out, n, timer, space=None, **kw):
    return autotune(
        SCALE,
        "scale",
        [out, x, np.float32(2), np.int32(n)],
        space=space or {"block": [64, 128, 256, 512]},
        grid=lambda c: ((n + c["block"] - 1) // c["block"], 1),
        outputs=[0],
        timer=timer,
        **kw,
    )


def fake_timer(times, seen):
    def timer(run, choice):
        run()
        seen.append(dict(choice))
        return times[tuple(choice.values())]

    return timer


@pytest.mark.standin
def test_picks_the_fastest_and_launches_it(standin, ctx, tmp_cache):
    x, out, _ = _data()
    seen = []
    times = {(64,): 3.0, (128,): 1.0, (256,): 2.0, (512,): 4.0}
    t = _tune(x, out, 1000, fake_timer(times, seen))
    assert isinstance(t, Tuned) and t.timed
    assert t.choice == {"block": 128} and t.block == (128, 1, 1) and t.grid == (8, 1)
    assert seen == [{"block": b} for b in (64, 128, 256, 512)]
    assert [(r["choice"]["block"], r["ms"], r["status"]) for r in t.table] == [
        (64, 3.0, "ok"),
        (128, 1.0, "ok"),
        (256, 2.0, "ok"),
        (512, 4.0, "ok"),
    ]
    t(out, x, np.float32(2), np.int32(1000))
    launch = standin.last_launch()
    assert launch.name == "scale" and launch.block == (128, 1, 1) and launch.grid == (8, 1, 1)
    text = t.format_table()
    assert text.splitlines()[1].split()[:3] == ["128", "1.0000", "ok"]
    assert "<- chosen" in text.splitlines()[1]


@pytest.mark.standin
def test_skips_what_fails_to_compile_or_launch_with_the_reason(standin, ctx, tmp_cache):
    x, out, _ = _data()
    seen = []
    times = {
        (b, t, bound): float(b) / 100 for b in (128, 512) for t in (1, 3) for bound in (256, 1024)
    }
    times[(512, 1, 1024)] = 0.5
    t = _tune(
        x,
        out,
        1000,
        fake_timer(times, seen),
        space={"block": [128, 512], "TILE": [1, 3], "BOUND": [256, 1024]},
    )
    rows = {tuple(r["choice"].values()): r for r in t.table}
    assert rows[(128, 3, 256)]["status"].startswith("compile error: ")
    assert "TILE 3 is not supported" in rows[(128, 3, 256)]["status"]
    assert rows[(128, 3, 256)]["ms"] is None
    assert rows[(512, 1, 256)]["status"].startswith(
        "launch error: kernel 'scale': block (512, 1, 1)"
    )
    assert "this kernel's limit is 256 a block" in rows[(512, 1, 256)]["status"]
    assert [r["status"] for r in t.table].count("ok") == 3
    assert t.choice == {"block": 512, "TILE": 1, "BOUND": 1024}
    assert {tuple(c.values()) for c in seen} == {(128, 1, 256), (128, 1, 1024), (512, 1, 1024)}


@pytest.mark.standin
def test_nothing_works_raises_with_the_table(standin, ctx, tmp_cache):
    x, out, _ = _data()
    with pytest.raises(
        AutotuneError,
        match=r"no variant of 'scale' ran correctly:\n  "
        r"\{'TILE': 3\}: compile error: .*TILE 3 is not supported",
    ) as ei:
        autotune(
            SCALE,
            "scale",
            [out, x, np.float32(2), np.int32(1000)],
            space={"TILE": [3]},
            block=128,
            grid=(8, 1),
            timer=lambda r, c: 1.0,
        )
    assert len(ei.value.table) == 1 and isinstance(ei.value, RuntimeError)


@pytest.mark.standin
def test_choice_is_remembered_in_memory_and_on_disk(standin, ctx, tmp_cache):
    x, out, _ = _data()
    seen = []
    times = {(64,): 3.0, (128,): 2.0, (256,): 0.5, (512,): 4.0}
    t = _tune(x, out, 1000, fake_timer(times, seen))
    assert t.choice == {"block": 256} and len(seen) == 4
    files = list((tmp_cache / "autotune").rglob("*.json"))
    assert len(files) == 1
    rec = json.loads(files[0].read_text())
    assert rec["index"] == 2 and rec["key"] == t.key and len(rec["table"]) == 4

    def no_timing(run, choice):
        raise AssertionError("timed again")

    again = _tune(x, out, 1000, no_timing)  # memory
    assert again.choice == {"block": 256} and not again.timed and again.key == t.key
    at.clear(disk=False)
    again = _tune(x, out, 1000, no_timing)  # disk
    assert again.choice == {"block": 256} and not again.timed
    assert "nothing was timed in this process" in again.format_table()
    again(out, x, np.float32(2), np.int32(1000))
    assert standin.last_launch().block == (256, 1, 1)
    # another size bucket, another dtype, another space, another source: timed again
    x2, out2, _ = _data(3000)
    seen.clear()
    assert _tune(x2, out2, 3000, fake_timer(times, seen)).timed and len(seen) == 4
    x3, out3, _ = _data(1000, np.float64)
    seen.clear()
    assert _tune(x3, out3, 1000, fake_timer(times, seen), check=False).timed
    seen.clear()
    assert _tune(x, out, 1000, fake_timer(times, seen), space={"block": [64, 128, 256]}).timed
    # the same size bucket (1000 and 1024): the stored choice
    x4, out4, _ = _data(1024)
    assert not _tune(x4, out4, 1024, no_timing).timed


@pytest.mark.standin
def test_damaged_store_is_retimed(standin, ctx, tmp_cache):
    x, out, _ = _data()
    seen = []
    times = {(64,): 3.0, (128,): 2.0, (256,): 0.5, (512,): 4.0}
    t = _tune(x, out, 1000, fake_timer(times, seen))
    path = next((tmp_cache / "autotune").rglob("*.json"))
    for bad in ['{"key": "%s", "schema": 1, "index": 99}' % t.key, "{not json", ""]:
        path.write_text(bad)
        at.clear(disk=False)
        seen.clear()
        assert _tune(x, out, 1000, fake_timer(times, seen)).timed and len(seen) == 4
        assert json.loads(path.read_text())["index"] == 2


@pytest.mark.standin
def test_cache_off_keeps_memory_only(standin, ctx, tmp_cache, monkeypatch):
    monkeypatch.setenv("PYGPU_DISABLE_CACHE", "1")
    x, out, _ = _data()
    seen = []
    times = {(64,): 3.0, (128,): 2.0, (256,): 0.5, (512,): 4.0}
    _tune(x, out, 1000, fake_timer(times, seen))
    assert not (tmp_cache / "autotune").exists()
    assert not _tune(x, out, 1000, lambda r, c: 1 / 0).timed


@pytest.mark.standin
def test_a_new_process_launches_the_stored_choice_without_timing(standin, ctx, tmp_cache):
    code = textwrap.dedent(
        """
        import sys, numpy as np
        sys.path.insert(0, %r)
        import pygpu.autoinit
        import test_autotune as T
        x, out, _ = T._data()
        seen = []
        times = {(64,): 3.0, (128,): 2.0, (256,): 0.5, (512,): 4.0}
        t = T._tune(x, out, 1000, T.fake_timer(times, seen))
        print(t.choice["block"], t.timed, len(seen))
    """
        % os.path.dirname(os.path.abspath(__file__))
    )
    outs = []
    for _ in range(2):
        r = subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            timeout=120,
            env=dict(os.environ),
        )
        assert r.returncode == 0, r.stderr
        outs.append(r.stdout)
    assert outs == ["256 True 4\n", "256 False 0\n"]


@pytest.mark.standin
def test_wrong_outputs_are_rejected_and_inputs_restored(standin, ctx, tmp_cache, monkeypatch):
    """Kernels do not run on the stand-in: _read_outputs is replaced by one
    that plays the kernel (it checks the outputs were poisoned and the
    in-place input restored, then scribbles on the input, as an in-place
    kernel would) and answers wrongly for block 256, the fastest."""
    from pygpu import driver as cuda

    x, out, host = _data()
    calls = []
    real_read = at._read_outputs

    def played(args, outputs):
        block = standin.last_launch().block[0]
        assert np.all(real_read(args, outputs)[0].view(np.uint32) == 0xFFFFFFFF)  # poisoned
        np.testing.assert_array_equal(args[1].get(), host)  # restored before the run
        cuda.memcpy_htod(args[1].gpudata, np.full(host.shape, block, np.float32))
        calls.append(block)
        res = 2 * host
        if block == 256:
            res = res.copy()
            res[-1] += 1
        return [res]

    monkeypatch.setattr(at, "_read_outputs", played)
    times = {(64,): 3.0, (128,): 2.0, (256,): 0.5, (512,): 4.0}
    t = _tune(x, out, 1000, fake_timer(times, []), inplace=[1])
    assert calls == [64, 128, 256, 512]
    assert t.choice == {"block": 128}
    assert [r["status"] for r in t.table] == [
        "ok",
        "ok",
        "wrong output 0: 1 of 1000 elements differ",
        "ok",
    ]
    np.testing.assert_array_equal(x.get(), host)  # restored at the end
    # with a reference, the first variant is checked too
    at.clear()
    calls.clear()
    with pytest.raises(AutotuneError, match=r"\{'block': 64\}: wrong output 0: 1000 of 1000"):
        _tune(x, out, 1000, fake_timer(times, []), inplace=[1], reference=[3 * host], key="x")
    # check=False: no checking run, the fastest wins
    calls.clear()
    t = _tune(x, out, 1000, fake_timer(times, []), check=False, key="nocheck")
    assert calls == [] and t.choice == {"block": 256}


@pytest.mark.standin
def test_argument_errors(standin, ctx, tmp_cache):
    x, out, _ = _data()
    args = [out, x, np.float32(2), np.int32(1000)]
    with pytest.raises(IndexError, match="argument index 4 is out of range for 4 arguments"):
        autotune(SCALE, "scale", args, {"block": [64]}, grid=(16, 1), outputs=[4])
    with pytest.raises(ValueError, match="reference has 2 arrays for 1 outputs"):
        autotune(SCALE, "scale", args, {"block": [64]}, grid=(16, 1), outputs=[0], reference=[1, 2])
    with pytest.raises(TypeError, match="output argument 2 must be a device array"):
        autotune(
            SCALE, "scale", args, {"block": [64]}, grid=(16, 1), outputs=[2], timer=lambda r, c: 1.0
        )


# ---- on a GPU ----

# Each thread block stages TILE elements per thread in shared memory: with
# big blocks and big tiles the shared memory allowed per SM caps the number
# of resident blocks, so the best block size depends on the element size.
STAGE = r"""
template <typename T>
__device__ void stage(T *out, const T *x, int n)
{
    extern __shared__ unsigned char smem_raw[];
    T *s = reinterpret_cast<T *>(smem_raw);
    int base = blockIdx.x * blockDim.x * TILE;
    for (int k = 0; k < TILE; k++) {
        int i = base + k * blockDim.x + threadIdx.x;
        s[k * blockDim.x + threadIdx.x] = i < n ? x[i] : T(0);
    }
    __syncthreads();
    for (int k = 0; k < TILE; k++) {
        int i = base + k * blockDim.x + threadIdx.x;
        /* reversed inside the block's tile: every element crosses threads */
        int j = TILE * blockDim.x - 1 - (k * blockDim.x + threadIdx.x);
        if (i < n) out[i] = s[j] * T(3) + T(1);
    }
}
extern "C" __global__ void stage_f32(float *out, const float *x, int n) { stage(out, x, n); }
extern "C" __global__ void stage_f64(double *out, const double *x, int n) { stage(out, x, n); }
"""


def _stage_expect(x, block, tile):
    """The kernel's out[i] = s[j] * 3 + 1, j reversed in each block's tile.
    On the GPU that is one fused multiply-add (one rounding): for float32 the
    float64 product is exact and the sum rounded once matches it; float64
    has no wider type here, so _assert_stage compares it to one ulp."""
    n = x.size
    per = block * tile
    pad = (-n) % per
    xp = np.concatenate([x, np.zeros(pad, x.dtype)]).reshape(-1, per)[:, ::-1].reshape(-1)
    return (xp[:n].astype(np.float64) * 3 + 1).astype(x.dtype)


def _assert_stage(got, want):
    if want.dtype == np.float32:
        np.testing.assert_array_equal(got, want)
    else:  # float64: FMA against NumPy's two roundings: one rounding of the
        # larger term apart (near 3x + 1 = 0 the relative error is unbounded)
        eps = np.finfo(np.float64).eps
        np.testing.assert_allclose(got, want, rtol=2 * eps, atol=4 * eps * np.abs(want).max())


@pytest.mark.gpu
def test_gpu_picks_the_measured_fastest_per_dtype(ctx, tmp_cache):
    from pygpu import gpuarray

    rng = np.random.default_rng()
    n = 1 << 24
    tile = 8
    blocks = [64, 256, 1024]
    picks = {}
    for dtype, name in ((np.float32, "stage_f32"), (np.float64, "stage_f64")):
        host = rng.standard_normal(n).astype(dtype)
        x, out = gpuarray.to_gpu(host), gpuarray.empty(n, dtype)
        item = np.dtype(dtype).itemsize

        def grid(c):
            return ((n + c["block"] * tile - 1) // (c["block"] * tile), 1)

        t = autotune(
            STAGE,
            name,
            [out, x, np.int32(n)],
            space={"block": blocks},
            grid=grid,
            shared=lambda c: c["block"] * tile * item,
            options=["-DTILE=%d" % tile],
            outputs=[0],
            no_extern_c=True,
            warmup=3,
            repeat=15,
        )
        ok = [r for r in t.table if r["status"] == "ok"]
        assert ok, t.format_table()
        fastest = min(ok, key=lambda r: r["ms"])
        assert t.choice == fastest["choice"]
        # an exhaustive timing, independent of the tuner, agrees within noise
        from pygpu.compiler import SourceModule
        import pygpu.driver as cuda

        f = SourceModule(STAGE, options=["-DTILE=%d" % tile], no_extern_c=True).get_function(name)
        exhaustive = {}
        for b in blocks:
            if not any(r["choice"]["block"] == b for r in ok):
                continue
            cfg = dict(block=(b, 1, 1), grid=grid({"block": b}), shared=b * tile * item)
            for _ in range(3):
                f(out, x, np.int32(n), **cfg)
            start, stop = cuda.Event(), cuda.Event()
            ts = []
            for _ in range(15):
                start.record()
                f(out, x, np.int32(n), **cfg)
                stop.record()
                stop.synchronize()
                ts.append(stop.time_since(start))
            exhaustive[b] = float(np.median(ts))
            _assert_stage(out.get(), _stage_expect(host, b, tile))
        best = min(exhaustive, key=exhaustive.get)
        assert exhaustive[t.choice["block"]] <= exhaustive[best] * 1.2, (
            exhaustive,
            t.format_table(),
        )
        t(out, x, np.int32(n))
        _assert_stage(out.get(), _stage_expect(host, t.choice["block"], tile))
        picks[name] = (t.choice["block"], exhaustive)
    print(picks)


WRONG_AT_256 = r"""
extern "C" __global__ void add1(float *out, const float *x, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
#if BLOCK == 256
    if (i < n && i != 17) out[i] = x[i] + 1.0f;      /* deliberately wrong: misses one */
#else
    if (i < n) out[i] = x[i] + 1.0f;
#endif
}
"""


@pytest.mark.gpu
def test_gpu_never_returns_a_wrong_variant(ctx, tmp_cache):
    from pygpu import gpuarray

    rng = np.random.default_rng()
    n = 1 << 20
    host = rng.standard_normal(n).astype(np.float32)
    x, out = gpuarray.to_gpu(host), gpuarray.empty(n, np.float32)
    # the wrong variant is made the fastest by the timer: it must still lose
    t = autotune(
        WRONG_AT_256,
        "add1",
        [out, x, np.int32(n)],
        space={"BLOCK": [128, 256, 512]},
        block=lambda c: c["BLOCK"],
        grid=lambda c: ((n + c["BLOCK"] - 1) // c["BLOCK"], 1),
        outputs=[0],
        timer=lambda run, c: 0.1 if c["BLOCK"] == 256 else 1.0 + c["BLOCK"] / 1e4,
    )
    rows = {r["choice"]["BLOCK"]: r["status"] for r in t.table}
    assert rows == {128: "ok", 256: "wrong output 0: 1 of 1048576 elements differ", 512: "ok"}
    assert t.choice == {"BLOCK": 128}
    t(out, x, np.int32(n))
    np.testing.assert_array_equal(out.get(), host + np.float32(1))
    # against a reference, a wrong first variant is rejected too
    at.clear()
    t = autotune(
        WRONG_AT_256,
        "add1",
        [out, x, np.int32(n)],
        space={"BLOCK": [256, 512]},
        block=lambda c: c["BLOCK"],
        grid=lambda c: ((n + c["BLOCK"] - 1) // c["BLOCK"], 1),
        outputs=[0],
        reference=[host + np.float32(1)],
    )
    assert t.choice == {"BLOCK": 512} and t.table[0]["status"].startswith("wrong output 0")


@pytest.mark.gpu
def test_gpu_in_place_kernel_is_restored_between_variants(ctx, tmp_cache):
    from pygpu import gpuarray

    rng = np.random.default_rng()
    n = 100000
    host = rng.standard_normal(n).astype(np.float32)
    x = gpuarray.to_gpu(host)
    src = r"""extern "C" __global__ void twice(float *x, int n)
    { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i] *= 2.0f; }"""
    t = autotune(
        src,
        "twice",
        [x, np.int32(n)],
        space={"block": [128, 256, 512]},
        grid=lambda c: ((n + c["block"] - 1) // c["block"], 1),
        outputs=[0],
        inplace=[0],
        warmup=1,
        repeat=3,
    )
    assert [r["status"] for r in t.table] == ["ok"] * 3, t.format_table()
    np.testing.assert_array_equal(x.get(), host)
    t(x, np.int32(n))
    np.testing.assert_array_equal(x.get(), host * 2)


@pytest.mark.gpu
def test_gpu_new_process_reuses_the_choice_without_timing(ctx, tmp_cache):
    code = textwrap.dedent("""
        import numpy as np
        import pygpu.autoinit
        from pygpu import gpuarray
        from pygpu.tools import autotune
        n = 1 << 20
        host = np.random.default_rng().standard_normal(n).astype(np.float32)
        x, out = gpuarray.to_gpu(host), gpuarray.empty(n, np.float32)
        src = 'extern "C" __global__ void k(float *o, const float *x, int n) ' \\
              '{ int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) o[i] = x[i] * 2; }'
        count = []
        def timer(run, c):
            count.append(c)
            run()
            return float(c["block"])     # 64 is "fastest": deterministic across processes
        t = autotune(src, "k", [out, x, np.int32(n)], space={"block": [64, 128, 256]},
                     grid=lambda c: ((n + c["block"] - 1) // c["block"], 1), outputs=[0],
                     timer=timer)
        t(out, x, np.int32(n))
        assert np.array_equal(out.get(), host * 2)
        print(t.choice["block"], t.timed, len(count))
    """)
    outs = []
    for _ in range(2):
        r = subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            timeout=120,
            env=dict(os.environ),
        )
        assert r.returncode == 0, r.stderr
        outs.append(r.stdout)
    assert outs == ["64 True 3\n", "64 False 0\n"]


@pytest.mark.standin
def test_an_unchecked_winner_is_not_served_to_a_checked_call(standin, ctx, tmp_cache, monkeypatch):
    """Issue 25 defect 9: a winner stored by check=False (the fastest, whose
    output is wrong) must not be served, from memory or disk, to a later
    call that asks for checking; that call checks and picks a right one."""
    x, out, host = _data()

    def played(args, outputs):
        res = 2 * host
        if standin.last_launch().block[0] == 256:
            res = res.copy()
            res[0] += 1
        return [res]

    monkeypatch.setattr(at, "_read_outputs", played)
    times = {(64,): 3.0, (128,): 2.0, (256,): 0.5, (512,): 4.0}
    t = _tune(x, out, 1000, fake_timer(times, []), check=False)
    assert t.choice == {"block": 256} and t.timed
    for where in ("memory", "disk"):
        if where == "disk":
            at.clear(disk=False)
        seen = []
        checked = _tune(x, out, 1000, fake_timer(times, seen))
        assert checked.choice == {"block": 128}, where
        assert checked.timed and len(seen) == 3  # 256 failed its check
        at.clear(disk=False)
        # and checked against a reference: not the winner checked against the first variant
        seen = []
        ref = _tune(x, out, 1000, fake_timer(times, seen), reference=[2 * host])
        assert ref.timed and ref.choice == {"block": 128}
        at.clear(disk=True)
        assert _tune(x, out, 1000, fake_timer(times, []), check=False).choice == {"block": 256}
    # the record says what was checked
    rec = json.loads(next((tmp_cache / "autotune").rglob("*.json")).read_text())
    assert rec["checked"] is False


# ---- a checked tuning, remembered across processes with other data ----

_RECHECK_CHILD = textwrap.dedent(
    """
    import json, sys, numpy as np
    sys.path.insert(0, %r)
    import pygpu.autoinit
    from pygpu import autotune as at
    from pygpu.testing.standin import StandIn
    import test_autotune as T
    wrong = int(sys.argv[1])  # the block size whose output is wrong here (0: none)
    x, out, host = T._data()  # fresh random data in each process
    checks = []

    def played(args, outputs):
        # kernels do not run on the stand-in: play the kernel out = 2 * x
        block = StandIn().last_launch().block[0]
        checks.append(block)
        res = 2 * args[1].get()
        if block == wrong:
            res[0] += 1
        return [res]

    at._read_outputs = played
    seen = []
    times = {(64,): 3.0, (128,): 2.0, (256,): 0.5, (512,): 4.0}
    before = StandIn().launches()
    t = T._tune(x, out, 1000, T.fake_timer(times, seen), reference=[2 * host], rtol=0, atol=0)
    launches = StandIn().launches() - before - len(seen)  # less the timed ones
    print(json.dumps([t.choice["block"], t.timed, t.rechecked, len(seen), checks, launches]))
"""
    % os.path.dirname(os.path.abspath(__file__))
)


def _recheck_child(wrong=0):
    r = subprocess.run(
        [sys.executable, "-c", _RECHECK_CHILD, str(wrong)],
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ),
    )
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


@pytest.mark.standin
def test_a_new_process_with_other_data_checks_the_stored_winner_once(standin, ctx, tmp_cache):
    # the first process tunes: 4 checking launches, 4 variants timed
    assert _recheck_child() == [256, True, False, 4, [64, 128, 256, 512], 4]
    # another process, other data and another reference: the stored winner
    # after exactly one checking launch of it, nothing timed
    assert _recheck_child() == [256, False, True, 0, [256], 1]
    assert _recheck_child() == [256, False, True, 0, [256], 1]


@pytest.mark.standin
def test_a_stored_winner_that_fails_this_calls_check_is_tuned_again(standin, ctx, tmp_cache):
    assert _recheck_child()[:2] == [256, True]
    # here block 256 answers wrongly: its one checking launch fails, the
    # space is tuned again (256 rejected there too) and 128 stored
    assert _recheck_child(wrong=256) == [128, True, False, 3, [256, 64, 128, 256, 512], 5]
    assert _recheck_child() == [128, False, True, 0, [128], 1]


@pytest.mark.standin
def test_the_check_is_keyed_by_how_not_by_the_data(standin, ctx, tmp_cache):
    x, out, host = _data()
    ref = [2 * host]
    k = at._tune_key("dev", [], {"block": [64]}, (), None, at._check_mode(True, [0], ref, 1e-5, 0))
    other = [np.zeros_like(host)]
    assert k == at._tune_key(
        "dev", [], {"block": [64]}, (), None, at._check_mode(True, [0], other, 1e-5, 0)
    )
    for mode in (
        at._check_mode(True, [0], ref, 1e-4, 0),  # another tolerance
        at._check_mode(True, [0], ref, 1e-5, 1e-3),
        at._check_mode(True, [0], None, 1e-5, 0),  # the first variant as reference
        at._check_mode(True, [0], [ref[0].astype(np.float64)], 1e-5, 0),  # another dtype
        at._check_mode(True, [0], [ref[0][:10]], 1e-5, 0),  # another shape class
        at._check_mode(True, [0], ref, 1e-5, 0, inplace=[1]),
        at._check_mode(False, [0], ref, 1e-5, 0),
    ):
        assert at._tune_key("dev", [], {"block": [64]}, (), None, mode) != k, mode


@pytest.mark.standin
def test_without_a_reference_the_stored_winner_is_checked_against_the_first_variant(
    standin, ctx, tmp_cache, monkeypatch
):
    x, out, host = _data()
    checks = []
    wrong = []

    def played(args, outputs):
        block = standin.last_launch().block[0]
        checks.append(block)
        res = 2 * args[1].get()
        if block in wrong:
            res[0] += 1
        return [res]

    monkeypatch.setattr(at, "_read_outputs", played)
    times = {(64,): 3.0, (128,): 2.0, (256,): 0.5, (512,): 4.0}
    t = _tune(x, out, 1000, fake_timer(times, []))
    assert t.choice == {"block": 256} and checks == [64, 128, 256, 512]
    at.clear(disk=False)  # as a new process: from the disk
    checks.clear()
    _tune(x, out, 1000, lambda r, c: 1 / 0)  # nothing timed: 64 and 256 agree
    assert checks == [64, 256]
    checks.clear()
    wrong.append(256)  # now 256 answers wrongly
    seen = []
    t = _tune(x, out, 1000, fake_timer(times, seen))
    # the reference variant (64, the first that ran), then the winner: they
    # differ now, so the space is tuned again and 128 wins
    assert checks[:2] == [64, 256] and t.timed and t.choice == {"block": 128}
