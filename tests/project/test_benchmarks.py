"""benchmarks/goals.py (issue 27's goals, judged against floors of the same
run) and its use by benchmarks/arrays.py, run.py and captured_arrays.py.

The judging, the table and the checks need no GPU and are tested here on
figures written by hand; the measuring code runs on the driver stand-in
(no kernel runs there: every figure that needs one must come back as a
reason, never as a crash) and, with the gpu marker, on a GPU at small sizes.
"""

import importlib.util
import json
import math
import os
import subprocess
import sys

import numpy as np
import pytest

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # tests/
ROOT = os.path.dirname(HERE)
BENCH = os.path.join(ROOT, "benchmarks")


def _load(name):
    if BENCH not in sys.path:
        sys.path.insert(0, BENCH)
    spec = importlib.util.spec_from_file_location(
        "bench_" + name, os.path.join(BENCH, name + ".py")
    )
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def goals():
    return _load("goals")


def _spec(goals, key):
    return next(s for s in goals.goal_specs() if s["key"] == key)


# ---- the goals: every issue-27 goal has a row ----


def test_every_goal_has_a_row(goals):
    keys = [s["key"] for s in goals.goal_specs()]
    assert len(keys) == len(set(keys))
    want = ["small_add", "small_add_pygpu", "small_add_calls"]
    for op in ("sum", "dot", "min", "max", "subset_sum", "reduction_kernel"):
        want += [op + "_vs_cupy", op + "_vs_read"]
    want.append("scan")
    for mib in (1, 8, 256):
        for d in ("htod", "dtoh"):
            for m in ("paused", "b2b"):
                want.append("%s_%d_%s_vs_plain" % (d, mib, m))
                if mib == 256:
                    want.append("%s_%d_%s_vs_pinned" % (d, mib, m))
    want.append("graph_replay")
    assert keys == want
    targets = {s["key"]: (s["kind"], s["target"]) for s in goals.goal_specs()}
    assert targets["small_add"] == ("diff", 1.0)
    assert targets["small_add_calls"] == ("absolute", 2)
    assert targets["sum_vs_cupy"] == ("max_ratio", 1.0)
    assert targets["dot_vs_read"] == ("min_ratio", 0.90)
    assert targets["scan"] == ("min_ratio", 0.85)
    assert targets["htod_1_paused_vs_plain"] == ("min_ratio", 1.0)
    assert targets["dtoh_256_paused_vs_pinned"] == ("min_ratio", 0.50)
    assert targets["graph_replay"] == ("absolute", 1.0)


def test_goal_labels_follow_the_config(goals):
    specs = goals.goal_specs(
        goals.Config(n_big=4096, n_small=100, copy_mib=(1, 2), pinned_mib=1, graph_ops=4)
    )
    labels = {s["key"]: s["label"] for s in specs}
    assert labels["sum_vs_read"] == "sum, 4,096 float32: bandwidth vs a read kernel"
    assert labels["small_add"] == "small a + b, 100 float32, per op"
    assert labels["graph_replay"] == "captured loop of 4 small array ops, replayed, per op"
    assert "dtoh_2_b2b_vs_pinned" in labels and "dtoh_1_b2b_vs_pinned" not in labels
    assert goals.count_text(100_000_000) == "100M" and goals.count_text(1500) == "1,500"


def test_config_rejects_unknown_settings(goals):
    with pytest.raises(TypeError, match=r"^Config has no setting 'n_huge'$"):
        goals.Config(n_huge=1)
    c = goals.Config(gpu_reps=3)
    assert c.gpu_reps == 3 and c.n_big == 100_000_000
    assert c.as_dict()["gpu_reps"] == 3


# ---- judging ----


def test_derive_bandwidths_count_the_bytes(goals):
    n = 1000
    figs = {
        "n_big": n,
        "read_floor_1_us": 2.0,
        "read_floor_2_us": 4.0,
        "pygpu_sum_us": 4.0,
        "cupy_sum_us": "not available: cupy: No module named 'cupy'",
        "pygpu_dot_us": 8.0,
        "pygpu_subset_sum_us": 0.0,
        "scan_us": 10.0,
        "dtod_us": 8.0,
        "cupy_scan_us": float("nan"),
    }
    goals.derive(figs)
    # sum reads 4n bytes; dot and subset_sum 8n (two arrays; indices and values)
    assert figs["pygpu_sum_gbs"] == pytest.approx(4 * n / 4.0 / 1e3)
    assert figs["read_floor_sum_gbs"] == pytest.approx(4 * n / 2.0 / 1e3)
    assert figs["read_floor_dot_gbs"] == pytest.approx(8 * n / 4.0 / 1e3)
    assert figs["read_floor_subset_sum_gbs"] == pytest.approx(8 * n / 4.0 / 1e3)
    assert figs["pygpu_dot_gbs"] == pytest.approx(8 * n / 8.0 / 1e3)
    # the scan and the copy: bytes read + written
    assert figs["scan_gbs"] == pytest.approx(8 * n / 10.0 / 1e3)
    assert figs["dtod_gbs"] == pytest.approx(8 * n / 8.0 / 1e3)
    assert figs["cupy_sum_gbs"] == "not available: cupy: No module named 'cupy'"
    assert figs["pygpu_subset_sum_gbs"] == "failed: time 0.0 is not a positive number"
    assert figs["cupy_scan_gbs"] == "failed: time nan is not a positive number"
    assert figs["pygpu_min_gbs"] == "not measured"


def test_judge_diff_prefers_the_paired_difference(goals):
    spec = _spec(goals, "small_add")
    figs = {
        "small_add_us": 5.2,
        "c_empty_launch_us": 3.5,
        "cupy_small_add_us": 10.1,
        "small_add_over_c_us": 0.9,
    }
    row = goals.judge(spec, figs)
    assert (row["status"], row["value"], row["peer"]) == ("MET", 0.9, 10.1)
    assert goals.vs_text(row) == "+0.90 us" and goals.target_text(row) == "<= floor + 1 us"
    figs["small_add_over_c_us"] = 1.1
    assert goals.judge(spec, figs)["status"] == "NOT MET"
    # without a paired figure: figure - floor
    figs["small_add_over_c_us"] = "failed: RuntimeError: x"
    row = goals.judge(spec, figs)
    assert row["status"] == "NOT MET" and row["value"] == pytest.approx(1.7)
    figs["small_add_us"] = 4.4
    assert goals.judge(spec, figs)["status"] == "MET"


def test_judge_ratios(goals):
    figs = {
        "pygpu_sum_us": 160.0,
        "cupy_sum_us": 153.0,
        "pygpu_sum_gbs": 2550.0,
        "read_floor_sum_gbs": 2800.0,
        "scan_gbs": 2300.0,
        "dtod_gbs": 2780.0,
    }
    row = goals.judge(_spec(goals, "sum_vs_cupy"), figs)
    assert row["status"] == "NOT MET" and goals.vs_text(row) == "1.05x"
    assert goals.target_text(row) == "<= 1.00x floor"
    figs["pygpu_sum_us"] = 153.0
    assert goals.judge(_spec(goals, "sum_vs_cupy"), figs)["status"] == "MET"  # equal meets
    row = goals.judge(_spec(goals, "sum_vs_read"), figs)
    assert row["status"] == "MET" and row["value"] == pytest.approx(2550 / 2800)
    assert goals.target_text(row) == ">= 0.90x floor"
    figs["pygpu_sum_gbs"] = 2400.0
    assert goals.judge(_spec(goals, "sum_vs_read"), figs)["status"] == "NOT MET"
    row = goals.judge(_spec(goals, "scan"), figs)
    assert row["status"] == "NOT MET" and goals.vs_text(row) == "0.83x"
    figs["scan_gbs"] = 2364.0
    assert goals.judge(_spec(goals, "scan"), figs)["status"] == "MET"


def test_judge_absolute_goal_shows_the_floor_ratio(goals):
    spec = _spec(goals, "graph_replay")
    row = goals.judge(spec, {"replay_us_per_op": 0.8, "empty_replay_us_per_node": 0.5})
    assert row["status"] == "MET" and row["value"] == pytest.approx(1.6)
    assert goals.target_text(row) == "<= 1 us"
    row = goals.judge(
        spec, {"replay_us_per_op": 1.2, "empty_replay_us_per_node": "failed: LogicError: no"}
    )
    assert row["status"] == "NOT MET" and row["value"] is None  # floor only informs
    assert goals.vs_text(row) == "-"


def test_judge_not_measured_says_why(goals):
    spec = _spec(goals, "htod_1_paused_vs_plain")
    row = goals.judge(spec, {"pygpu_htod_1_paused_gbs": "wrong result: pygpu to_gpu: differs"})
    assert row["status"] == "NOT MEASURED"
    assert row["why"] == "pygpu: wrong result: pygpu to_gpu: differs"
    row = goals.judge(
        spec,
        {"pygpu_htod_1_paused_gbs": 20.0, "plain_htod_1_paused_gbs": "failed: OSError: no libcuda"},
    )
    assert row["status"] == "NOT MEASURED"
    assert row["why"] == (
        "floor (cuMemcpyHtoD, same memory, after a pause): failed: OSError: no libcuda"
    )
    row = goals.judge(spec, {"pygpu_htod_1_paused_gbs": 20.0})
    assert row["why"] == "floor (cuMemcpyHtoD, same memory, after a pause): not measured"
    row = goals.judge(spec, {"pygpu_htod_1_paused_gbs": 20.0, "plain_htod_1_paused_gbs": 0.0})
    assert (row["status"], row["why"]) == (
        "NOT MEASURED",
        "floor (cuMemcpyHtoD, same memory, after a pause) is 0.0",
    )
    row = goals.judge(
        spec, {"pygpu_htod_1_paused_gbs": float("inf"), "plain_htod_1_paused_gbs": 8.0}
    )
    assert (row["status"], row["why"]) == ("NOT MEASURED", "pygpu: inf is not a finite number")
    row = goals.judge(spec, {"pygpu_htod_1_paused_gbs": True, "plain_htod_1_paused_gbs": 8.0})
    assert row["status"] == "NOT MEASURED"  # a bool is no figure
    with pytest.raises(ValueError, match=r"^unknown goal kind 'sideways'$"):
        goals.judge(
            dict(spec, kind="sideways"),
            {"pygpu_htod_1_paused_gbs": 2.0, "plain_htod_1_paused_gbs": 1.0},
        )


H100_LIKE = {
    # the H100 figures, one run's worth, as goals.py would record them
    "c_empty_launch_us": 3.49,
    "pygpu_empty_launch_us": 3.58,
    "small_add_us": 8.9,
    "cupy_small_add_us": 10.1,
    "small_add_over_c_us": 5.41,
    "small_add_over_pygpu_us": 5.32,
    "read_floor_1_us": 150.0,
    "read_floor_2_us": 295.0,
    "pygpu_sum_us": 164.0,
    "cupy_sum_us": 153.0,
    "pygpu_dot_us": 320.0,
    "cupy_dot_us": 330.0,
    "pygpu_min_us": 160.0,
    "cupy_min_us": 170.0,
    "pygpu_max_us": 161.0,
    "cupy_max_us": 170.0,
    "pygpu_subset_sum_us": "failed: LogicError: cuLaunchKernel failed",
    "cupy_subset_sum_us": 400.0,
    "pygpu_reduction_kernel_us": 158.0,
    "cupy_reduction_kernel_us": "not available: cupy: No module named 'cupy'",
    "dtod_us": 288.0,
    "scan_us": 404.0,
    "cupy_scan_us": 824.0,
    "pinned_htod_gbs": 53.9,
    "pinned_dtoh_gbs": 54.8,
    "empty_replay_us_per_node": 0.53,
    "replay_us_per_op": 0.8,
    "standin_calls_per_op": 7.0,
    "standin_floor_calls": 1.0,
}


def _h100_figs():
    figs = dict(H100_LIKE, n_big=100_000_000)
    for mib, plain, pg in ((1, 8.5, 12.0), (8, 9.0, 20.0), (256, 8.3, 30.0)):
        for d in ("htod", "dtoh"):
            for m in ("paused", "b2b"):
                figs["plain_%s_%d_%s_gbs" % (d, mib, m)] = plain
                figs["pygpu_%s_%d_%s_gbs" % (d, mib, m)] = pg if d == "htod" else pg / 2
                figs["cupy_%s_%d_%s_gbs" % (d, mib, m)] = plain * 0.9
    return figs


def test_table_on_h100_like_figures(goals):
    rows = goals.judge_all(_h100_figs())
    by = {r["key"]: r for r in rows}
    assert by["small_add"]["status"] == "NOT MET" and goals.vs_text(by["small_add"]) == "+5.41 us"
    assert by["small_add_pygpu"]["value"] == 5.32
    assert by["sum_vs_cupy"]["status"] == "NOT MET"
    assert by["sum_vs_read"]["value"] == pytest.approx(150 / 164)
    assert by["sum_vs_read"]["status"] == "MET"
    assert by["dot_vs_read"]["value"] == pytest.approx(295 / 320)
    assert by["dot_vs_cupy"]["status"] == "MET"
    assert by["subset_sum_vs_cupy"]["status"] == "NOT MEASURED"
    assert by["reduction_kernel_vs_cupy"]["why"] == (
        "floor (CuPy, same run): not available: cupy: No module named 'cupy'"
    )
    assert by["scan"]["value"] == pytest.approx(288 / 404) and by["scan"]["status"] == "NOT MET"
    assert by["htod_1_paused_vs_plain"]["status"] == "MET"
    assert by["dtoh_1_paused_vs_plain"]["status"] == "NOT MET"  # 6.0 against 8.5
    assert by["dtoh_256_b2b_vs_pinned"]["value"] == pytest.approx(15.0 / 54.8)
    assert by["htod_256_b2b_vs_pinned"]["status"] == "MET"  # 30.0 of 53.9
    assert by["graph_replay"]["status"] == "MET"
    assert by["small_add_calls"]["status"] == "NOT MET"
    assert goals.target_text(by["small_add_calls"]) == "<= 2 calls"
    text, notes = goals.goal_table(rows)
    lines = text.splitlines()
    assert len(lines) == 2 + len(rows)
    assert [c.strip() for c in lines[0].strip("|").split("|")] == [
        "goal",
        "unit",
        "pygpu",
        "floor",
        "floor is",
        "vs floor",
        "target",
        "CuPy",
        "status",
    ]
    small = [c.strip() for c in lines[2].strip("|").split("|")]
    assert small == [
        "small a + b, 1,000 float32, per op",
        "us",
        "8.90",
        "3.49",
        "empty kernel, C launch loop",
        "+5.41 us",
        "<= floor + 1 us",
        "10.1",
        "NOT MET",
    ]
    scan = [
        c.strip() for c in next(ln for ln in lines if "inclusive scan" in ln).strip("|").split("|")
    ]
    assert scan == [
        "inclusive scan, 100M float32 (read + written)",
        "GB/s",
        "1980",
        "2778",
        "memcpy_dtod, same bytes",
        "0.71x",
        ">= 0.85x floor",
        "971",
        "NOT MET",
    ]
    assert notes == [
        "subset_sum, every index in order, 100M float32: time vs CuPy: NOT MEASURED: pygpu: "
        "failed: LogicError: cuLaunchKernel failed",
        "subset_sum, every index in order, 100M float32: bandwidth vs a read kernel: NOT "
        "MEASURED: pygpu: failed: LogicError: cuLaunchKernel failed",
        "ReductionKernel, sum of squares, 100M float32: time vs CuPy: NOT MEASURED: floor "
        "(CuPy, same run): not available: cupy: No module named 'cupy'",
    ]
    n = {s: sum(r["status"] == s for r in rows) for s in ("MET", "NOT MET", "NOT MEASURED")}
    assert goals.summary(rows) == "33 goals: %d met, %d not met, 3 not measured" % (
        n["MET"],
        n["NOT MET"],
    )
    assert n["MET"] + n["NOT MET"] == 30


def test_report_and_json(goals, capsys):
    figs = _h100_figs()
    figs["read_floor_config"] = {
        "unroll": 4,
        "blocks_per_sm": 8,
        "sms": 132,
        "us_400mb_by_config": {"1/4": 160.0, "4/8": 150.0},
    }
    figs["eager_us_per_op"], figs["captured_us_per_op"] = 9.0, 1.1
    figs["small_ops_rounds_us"] = {"c_empty": [3.4, 3.5]}
    figs["standin_calls_by_name"] = {"cuLaunchKernelEx": 1.0, "cuMemAllocAsync": 1.0}
    rows = goals.judge_all(figs)
    info = {
        "gpu": "NVIDIA H100 80GB HBM3",
        "cc": "9.0",
        "sms": 132,
        "mem_clock_mhz": 2619,
        "bus_bits": 5120,
        "driver": "580.159.04",
        "driver_cuda": "13.0",
        "smi_max_sm_clock_mhz": "1980",
        "smi_sm_clock_mhz": "1755",
        "smi_mem_clock_mhz": "2619",
    }
    goals.report(figs, rows, info)
    out = capsys.readouterr().out.splitlines()
    assert out[0] == (
        "GPU: NVIDIA H100 80GB HBM3 (sm_90, 132 SMs, SM clock max 1980 MHz, "
        "memory clock 2619 MHz, 5120-bit bus), driver 580.159.04 / CUDA 13.0; "
        "clocks at the start: SM 1755 MHz, memory 2619 MHz"
    )
    assert out[1].startswith(
        "Issue 27's goals, each against a floor measured in this run (33 goals: "
    )

    assert out[-3] == (
        "(the same loop run eagerly: 9.00 us an op; as a graphs.captured() "
        "function, its inputs copied in each call: 1.10 us an op)"
    )
    assert out[-2] == (
        "(driver calls a small a + b on the stand-in: cuLaunchKernelEx 1, cuMemAllocAsync 1)"
    )
    assert out[-1] == (
        "(read floor: 4-element-deep unroll, 8 blocks of 256 an SM on 132 SMs, "
        "the best of 2 shapes)"
    )
    assert goals.gpu_line({"gpu": "X"}) == "GPU: X ()"
    figs["odd"] = {1: np.float32(2.5), "nan": float("nan"), "t": (np.int64(3),)}
    back = json.loads(json.dumps(goals.jsonable({"figures": figs, "rows": rows})))
    assert back["figures"]["odd"] == {"1": 2.5, "nan": "nan", "t": [3]}
    assert len(back["rows"]) == 33 and back["rows"][0]["status"] == "NOT MET"


# ---- checks and helpers ----


def test_checks_raise_wrong_result_with_the_numbers(goals):
    goals.check_rel(np.float32(100.0005), 100.0, 1e-5, "sum")
    with pytest.raises(
        goals.WrongResult,
        match=r"^sum: 100\.01, NumPy's \(float64\) 100\.0: relative error over "
        r"1e-05$",
    ):
        goals.check_rel(np.array(100.01), np.float64(100.0), 1e-5, "sum")
    x = np.random.default_rng().random(50).astype(np.float32)
    goals.check_equal(x.copy(), x, "copy")
    y = x.copy()
    y[7] += 1
    y[9] += 1
    with pytest.raises(
        goals.WrongResult, match=r"^copy: differs from NumPy's in 2 elements, first at 7$"
    ):
        goals.check_equal(y, x, "copy")
    with pytest.raises(
        goals.WrongResult, match=r"^copy: differs from NumPy's \(shape \(49,\) against \(50,\)\)$"
    ):
        goals.check_equal(x[:49], x, "copy")
    assert goals.failed(goals.WrongResult("a\nb")) == "wrong result: a"
    assert goals.failed(goals.NotAvailable("cupy: none")) == "not available: cupy: none"
    assert goals.failed(RuntimeError("")) == "failed: RuntimeError: RuntimeError"


def test_interleaved_and_paired_diff(goals):
    calls = []

    def make(k, per_call):
        def run(count):
            calls.append(k)
            return per_call * count

        return run

    syncs = []
    t = goals.interleaved(
        {"a": make("a", 2e-6), "b": make("b", 5e-6)}, n=10, rounds=4, sync=lambda: syncs.append(1)
    )
    assert t == {"a": [pytest.approx(2.0)] * 4, "b": [pytest.approx(5.0)] * 4}
    # a warm-up of each, then rounds starting at another row each time
    assert calls == ["a", "b", "a", "b", "b", "a", "a", "b", "b", "a"]
    assert len(syncs) == len(calls)
    assert goals.paired_diff([5.0, 6.0, 9.0], [3.0, 5.0, 4.0]) == 2.0
    run = goals.stmt_loop("box.append(1)", box=[])
    assert run(3) >= 0


def test_read_floor_kernel_reads_everything(goals):
    """The read kernel compiles (NVRTC, no GPU), every shape's loop loads
    16 bytes through the read-only path and the sum leaves the kernel by an
    atomic add (so no load can be elided)."""
    from pygpu import compiler

    ptx = compiler.compile(goals.READ_SRC, arch="compute_90", target="ptx", cache_dir=False)
    text = bytes(ptx).decode() if not isinstance(ptx, str) else ptx
    for u in goals.READ_UNROLLS:
        body = text.split(".entry read_u%d(" % u)[1].split(".entry")[0]
        loads = body.count("ld.global.nc.v4.f32")
        assert loads >= u, (u, loads)
        assert "atom.global.add.f64" in body
        assert body.count("shfl.sync.down") == 5


def test_c_floor_source_compiles(tmp_path):
    root = "/usr/local/cuda"
    if not os.path.exists(os.path.join(root, "include", "cuda.h")):
        pytest.skip("no CUDA headers in /usr/local/cuda")
    p = subprocess.run(
        [
            "cc",
            "-O2",
            "-Wall",
            "-Werror",
            "-fPIC",
            "-c",
            "-o",
            str(tmp_path / "f.o"),
            os.path.join(BENCH, "floor_goals.c"),
            "-I" + os.path.join(root, "include"),
        ],
        capture_output=True,
        text=True,
    )
    assert p.returncode == 0, p.stderr


def test_arrays_table_compares_with_cupy():
    bench = _load("arrays")
    res = {"pygpu": {k: 1.0 for k, *_ in bench.ROWS}, "cupy": {k: 2.0 for k, *_ in bench.ROWS}}
    res["cupy"]["sin_us"] = "not available: cupy.sin: gone"
    text, notes = bench.table(res, ["pygpu", "cupy"])
    lines = text.splitlines()
    assert "| pygpu / CuPy" in lines[0]
    add = [c.strip() for c in lines[2].strip("|").split("|")]
    assert add == ["x + y, 10M float32", "us", "1.00", "2.00", "0.50x (lower is better)"]
    sin = [c.strip() for c in next(ln for ln in lines if "cumath.sin" in ln).strip("|").split("|")]
    assert sin == ["cumath.sin, 10M float32", "us", "1.00", "not available", "-"]
    assert notes == ["cupy, cumath.sin, 10M float32: not available: cupy.sin: gone"]


# ---- without a GPU every script says so and exits 0 ----


@pytest.mark.parametrize("script", ["arrays.py", "run.py", "goals.py", "captured_arrays.py"])
def test_scripts_without_gpu_exit_0(script):
    if _load("goals").gpu_reason() is None:
        pytest.skip("this machine has a GPU")
    env = dict(os.environ)
    env.pop("PYGPU_LIBCUDA", None)
    p = subprocess.run(
        [sys.executable, os.path.join(BENCH, script)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stdout.startswith(
        "benchmarks/%s: nothing measured: this machine has no usable GPU (" % script
    ), p.stdout


# ---- the measuring code on the driver stand-in: reasons, never a crash ----

TINY = dict(
    n_big=4096,
    n_small=100,
    small_ops=10,
    small_rounds=3,
    gpu_reps=3,
    copy_mib=(1, 2),
    pinned_mib=1,
    pause_s=0.001,
    copy_reps=2,
    graph_ops=4,
    graph_replays=3,
)


@pytest.mark.standin
def test_goal_run_on_the_standin_reports_every_goal(goals):
    logged = []
    figs, rows, info = goals.measure(goals.Config(**TINY), log=logged.append)
    assert info["gpu"].startswith("pygpu driver stand-in")
    assert len(rows) == len(goals.goal_specs(goals.Config(**TINY)))
    for r in rows:
        assert r["status"] in ("MET", "NOT MET", "NOT MEASURED"), r
        if r["status"] == "NOT MEASURED":
            assert r["why"], r
    # no kernel runs on the stand-in: the results that need one are wrong,
    # and say so
    assert figs["small_add_us"].startswith("wrong result: pygpu small a + b: differs")
    assert figs["pygpu_sum_us"].startswith("wrong result: pygpu sum: ")
    assert figs["scan_us"].startswith("wrong result: pygpu inclusive scan: ")
    assert figs["read_floor_1_us"].startswith("wrong result: read floor (unroll 1, 4 blocks")
    assert figs["cupy_sum_us"].startswith(("not available: cupy", "failed: cupy"))
    # copies run on the stand-in (it copies bytes): the figures are numbers
    for k in (
        "pinned_htod_gbs",
        "pinned_dtoh_gbs",
        "pygpu_htod_1_paused_gbs",
        "pygpu_dtoh_2_b2b_gbs",
    ):
        assert isinstance(figs[k], float) and figs[k] > 0, (k, figs[k])
    for k in ("eager_us_per_op", "replay_us_per_op", "empty_replay_us_per_node"):
        assert isinstance(figs[k], float), (k, figs[k])
    assert any(s.startswith("  goals, captured: ") for s in logged)
    # the driver calls are counted in a child on a stand-in of its own
    assert figs["standin_calls_per_op"] >= 1.0
    assert figs["standin_calls_by_name"]["cuLaunchKernelEx"] == 1.0
    by = {r["key"]: r for r in rows}
    assert by["small_add_calls"]["status"] == (
        "MET" if figs["standin_calls_per_op"] <= 2 else "NOT MET"
    )
    text, notes = goals.goal_table(rows)
    assert len(text.splitlines()) == 2 + len(rows)
    json.dumps(goals.jsonable({"figures": figs, "rows": rows}))


@pytest.mark.standin
def test_arrays_goals_only_on_the_standin(goals, tmp_path, monkeypatch, capsys):
    bench = _load("arrays")
    monkeypatch.setattr(bench, "gpu_reason", lambda: None)
    monkeypatch.setattr(bench.goals, "DEFAULTS", dict(bench.goals.DEFAULTS, **TINY))
    out = tmp_path / "a.json"
    assert (
        bench.main(["--goals-only", "--only", "pygpu", "--small-ops", "10", "--json", str(out)])
        == 0
    )
    text = capsys.readouterr().out
    assert "\nGPU: pygpu driver stand-in" in text
    assert "Issue 27's goals, each against a floor measured in this run" in text
    assert "Per implementation" not in text
    rep = json.loads(out.read_text())
    assert len(rep["goals"]["rows"]) == 29
    assert rep["goals"]["figures"]["n_big"] == 4096
    assert "results" not in rep


# ---- on a GPU, at small sizes: every pygpu figure is a number ----


@pytest.mark.gpu
def test_goal_run_on_a_gpu(goals):
    cfg = goals.Config(
        n_big=8_000_000,
        small_ops=500,
        small_rounds=5,
        gpu_reps=5,
        copy_mib=(1, 8),
        pinned_mib=8,
        pause_s=0.01,
        copy_reps=3,
        graph_ops=20,
        graph_replays=20,
    )
    figs, rows, info = goals.measure(cfg, log=lambda s: None)
    assert info["gpu"] and "sms" in info
    # capturing array code is another piece of work (its failure is said
    # in the table); every other figure of pygpu's and every floor is a number
    graph = ("replay_us_per_op", "captured_us_per_op", "capture_ms")
    bad = {
        k: v
        for k, v in figs.items()
        if isinstance(v, str)
        and not k.startswith("cupy_")
        and k not in graph
        and not v.startswith("not available: cupy")
    }
    assert bad == {}
    for k in graph:
        assert isinstance(figs[k], float) or figs[k].startswith("failed: "), (k, figs[k])
    for r in rows:
        if r["status"] == "NOT MEASURED":
            assert "cupy" in r["why"].lower() or r["key"] == "graph_replay", r
    assert figs["read_floor_config"]["unroll"] in goals.READ_UNROLLS
    for k in ("read_floor_sum_gbs", "dtod_gbs", "pinned_htod_gbs"):
        assert isinstance(figs[k], float) and math.isfinite(figs[k]) and figs[k] > 1, k


def test_a_failing_section_leaves_its_reason_in_every_figure_it_owes(goals):
    run = goals.GoalRun.__new__(goals.GoalRun)  # no GPU: the bookkeeping alone
    logged = []
    run.figs, run.log, run.cp = {}, logged.append, None

    def half():
        run.attempt("a", lambda: 2.0)
        run.attempt("b", lambda: 1 / 0)
        raise goals.WrongResult("x: differs from NumPy's")

    run.section("demo", ["a", "b", "c"], half)
    assert run.figs == {
        "a": 2.0,
        "b": "failed: ZeroDivisionError: division by zero",
        "c": "wrong result: x: differs from NumPy's",
    }
    run.section("quiet", ["d"], lambda: None)
    assert run.figs["d"] == "failed: quiet: no figure"
    assert logged[:2] == ["    a: 2.00", "    b: failed: ZeroDivisionError: division by zero"]
    assert logged[2].startswith("  goals, demo: ") and logged[2].endswith(
        " s (wrong result: x: differs from NumPy's)"
    )
    assert logged[3].startswith("  goals, quiet: ") and logged[3].endswith(" s")


def test_run_py_guard_records_a_failing_block(capsys):
    run = _load("run")
    errors = {}
    with run.guard(errors, "transfers"):
        raise RuntimeError("cuMemcpyHtoD failed: CUDA_ERROR_UNKNOWN\nmore")
    with run.guard(errors, "compile"):
        pass
    assert errors == {"transfers": "RuntimeError: cuMemcpyHtoD failed: CUDA_ERROR_UNKNOWN"}
    assert capsys.readouterr().err == (
        "run.py: transfers not measured: RuntimeError: cuMemcpyHtoD failed: CUDA_ERROR_UNKNOWN\n"
    )
    with pytest.raises(KeyboardInterrupt):  # only Exceptions are kept
        with run.guard(errors, "launch rows"):
            raise KeyboardInterrupt
    assert "launch rows" not in errors


def test_gpu_us_rounds_interleaves_and_keeps_failures_apart(goals):
    clock = [0.0]

    class Event:
        def record(self):
            self.t = clock[0]

        def synchronize(self):
            pass

        def time_since(self, other):
            return (self.t - other.t) * 1e3  # ms

    class Cuda:
        pass

    Cuda.Event = Event
    run = goals.GoalRun.__new__(goals.GoalRun)
    run.cuda, run.sync, run.cfg = Cuda, lambda: None, goals.Config(gpu_reps=4)
    order = []

    def op(name, us, fail_at=None):
        calls = [0]

        def fn():
            calls[0] += 1
            if fail_at is not None and calls[0] == fail_at:
                raise RuntimeError("%s broke" % name)
            order.append(name)
            clock[0] += us * 1e-6

        return fn

    out = run.gpu_us_rounds(
        {"a": op("a", 2.0), "b": op("b", 5.0, fail_at=5), "c": op("c", 1.0, fail_at=1)}, warm=3
    )
    assert out == {
        "a": pytest.approx(2.0),
        "b": "failed: RuntimeError: b broke",
        "c": "failed: RuntimeError: c broke",
    }
    # warm-ups (c fails in its first), then rounds starting at another fn
    # each time; b fails in its second timed call and leaves the rounds
    assert order == ["a"] * 3 + ["b"] * 3 + ["a", "b", "a", "a", "a"]


def test_nvidia_smi_picks_the_gpu_by_bus_id(goals):
    class P:
        def __init__(self, out, rc=0):
            self.stdout, self.returncode = out, rc

    two = (
        "00000000:19:00.0, 580.159.04, 1755, 2619, 1980, 2619, 700.00\n"
        "00000000:3B:00.0, 580.159.04, 345, 2619, 1980, 2619, [N/A]\n"
    )
    got = goals.nvidia_smi("0000:3b:00.0", run=lambda *a, **k: P(two))
    assert got == {
        "driver": "580.159.04",
        "smi_sm_clock_mhz": "345",
        "smi_mem_clock_mhz": "2619",
        "smi_max_sm_clock_mhz": "1980",
        "smi_max_mem_clock_mhz": "2619",
    }
    assert goals.nvidia_smi("0000:99:00.0", run=lambda *a, **k: P(two)) == {}
    one = two.splitlines()[0]
    assert goals.nvidia_smi(None, run=lambda *a, **k: P(one))["power_limit_w"] == "700.00"
    assert goals.nvidia_smi(None, run=lambda *a, **k: P("No devices were found", 6)) == {}
    assert goals.nvidia_smi(None, run=lambda *a, **k: P("Unknown Error")) == {}

    def missing(*a, **k):
        raise FileNotFoundError("nvidia-smi")

    assert goals.nvidia_smi(None, run=missing) == {}


def test_plain_copies_push_and_pop_the_context_around_each_call(goals):
    seen = []

    class Fn:
        def __init__(self, name, rc=0):
            self.__name__, self.rc = name, rc

        def __call__(self, *args):
            seen.append((self.__name__,) + tuple(args))
            return self.rc

    class Lib:
        cuCtxPushCurrent_v2 = Fn("push")
        cuCtxPopCurrent_v2 = Fn("pop")
        cuMemcpyHtoD_v2 = Fn("cuMemcpyHtoD_v2")
        cuMemcpyDtoH_v2 = Fn("cuMemcpyDtoH_v2", rc=700)

    plain = goals.PlainCopies.__new__(goals.PlainCopies)
    plain.lib, plain.ctx = Lib(), "ctx"
    h = np.arange(8, dtype=np.float32)
    plain.htod(1234, h)
    assert [s[0] for s in seen] == ["push", "cuMemcpyHtoD_v2", "pop"]
    assert seen[0][1] == "ctx" and seen[1][1:] == (1234, h.ctypes.data, 32)
    seen.clear()
    with pytest.raises(RuntimeError, match=r"^cuMemcpyDtoH_v2 failed: CUresult 700$"):
        plain.dtoh_fresh(1234, 8, np.float32)
    assert [s[0] for s in seen] == ["push", "cuMemcpyDtoH_v2", "pop"]  # popped anyway
    Lib.cuCtxPushCurrent_v2 = Fn("push", rc=201)
    seen.clear()
    with pytest.raises(RuntimeError, match=r"^cuCtxPushCurrent failed: CUresult 201$"):
        plain.htod(1234, h)
    assert [s[0] for s in seen] == ["push"]
