"""benchmarks/reduce_scan_sweep.py runs end to end: against the driver
stand-in (no kernels run, so no result is checked; every configuration is
built, launched and timed, and the tables and the JSON come out), and it
exits 0 without a GPU."""

import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, os.pardir)
SCRIPT = os.path.join(ROOT, "benchmarks", "reduce_scan_sweep.py")

RUN = """
import sys
sys.path.insert(0, %r)
import reduce_scan_sweep as m
m.gpu_reason = lambda: None        # the stand-in is not libcuda.so.1
sys.exit(m.main(sys.argv[1:]))
""" % os.path.dirname(SCRIPT)


def _module():
    import importlib.util

    spec = importlib.util.spec_from_file_location("reduce_scan_sweep", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.standin
def test_sweep_runs_on_the_standin(standin, tmp_path):
    out = tmp_path / "sweep.json"
    p = subprocess.run(
        [
            sys.executable,
            "-c",
            RUN,
            "--n",
            "100003",
            "--reps",
            "2",
            "--batch",
            "2",
            "--no-check",
            "--json",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        env=dict(os.environ),
    )
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-4000:]
    r = json.loads(out.read_text())
    m = _module()
    assert [row["config"] for row in r["reduction"]] == ["default"] + m.REDUCTIONS
    assert [row["config"] for row in r["scan"]] == ["default"] + m.SCANS
    for row in r["reduction"] + r["scan"]:
        assert "error" not in row, row
    assert r["floors"]["read_us"] > 0 and r["floors"]["copy_us"] > 0
    assert "CuPy" in r["cupy"].get("error", "CuPy") or "sum_gpu_us" in r["cupy"]
    assert "Reductions of 100003 float32" in p.stdout and "best scan:" in p.stdout


def test_sweep_without_a_gpu_exits_0(tmp_path):
    env = dict(os.environ)
    env.pop("PYGPU_LIBCUDA", None)
    p = subprocess.run(
        [
            sys.executable,
            "-c",
            """
import sys
sys.path.insert(0, %r)
import reduce_scan_sweep as m
m.gpu_reason = lambda: "no CUDA driver (test)"
sys.exit(m.main([]))
"""
            % os.path.dirname(SCRIPT),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert p.returncode == 0
    assert "reduce_scan_sweep: no GPU (no CUDA driver (test)); nothing measured" in p.stdout
