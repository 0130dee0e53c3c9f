"""CI runs the suite on the oldest and the newest Python pyproject.toml
declares (issue 33: a version break must not land)."""

import os
import re
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _declared():
    with open(os.path.join(ROOT, "pyproject.toml"), encoding="utf-8") as f:
        text = f.read()
    versions = re.findall(r'"Programming Language :: Python :: (3\.\d+)"', text)
    key = lambda v: tuple(int(p) for p in v.split("."))  # noqa: E731
    low = re.search(r'requires-python = ">=(3\.\d+)"', text).group(1)
    return sorted(versions, key=key), low


def test_ci_runs_the_oldest_and_newest_declared_pythons():
    versions, low = _declared()
    assert versions[0] == low, (versions, low)
    with open(os.path.join(ROOT, ".ci", "run"), encoding="utf-8") as f:
        ci = f.read()
    ran = re.findall(r"^step tools/test_python\.sh (3\.\d+)\s*$", ci, re.M)
    assert ran == [versions[0], versions[-1]], (ran, versions)
    assert "step make test\n" in ci


def test_test_python_says_when_the_python_is_missing(tmp_path):
    env = dict(os.environ, PATH="/usr/bin:/bin", PYENV_ROOT=str(tmp_path), HOME=str(tmp_path))
    env["PYGPU_PYTHON_3_1"] = ""
    r = subprocess.run(
        ["bash", os.path.join(ROOT, "tools", "test_python.sh"), "3.1"],
        capture_output=True,
        text=True,
        env=env,
    )
    assert r.returncode == 1, r.stdout + r.stderr
    assert "no Python 3.1 found (set PYGPU_PYTHON_3_1 to one)" in r.stderr
