"""pygpu's types (issue 33): the C extension's stub matches the extension
(mypy.stubtest), pygpu's own modules pass mypy with pyproject.toml's
[tool.mypy], and a user's program over the documented API (typed_user.py,
beside this file) passes mypy --strict and pyright in strict mode from a
folder outside the clone, through the installed (editable) pygpu."""

import json
import os
import shutil
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
USER = os.path.join(HERE, "typed_user.py")

pytest.importorskip("mypy", reason="mypy is not installed (pip install -e '.[test]')")


def _run(args, cwd, timeout=600):
    return subprocess.run(args, capture_output=True, text=True, cwd=cwd, timeout=timeout)


def _installed_here(tmp_path):
    """Where a Python started outside the clone imports pygpu from."""
    r = _run([sys.executable, "-c", "import pygpu; print(pygpu.__file__)"], str(tmp_path))
    return r.stdout.strip() if r.returncode == 0 else None


def test_stubtest_driver_and_cumath():
    # the stub is generated (tools/gen_driver_stub.py); nothing is allowlisted
    r = _run(
        [
            sys.executable,
            "-m",
            "mypy.stubtest",
            "--mypy-config-file",
            os.path.join(ROOT, "pyproject.toml"),
            "pygpu._driver",
            "pygpu.cumath",
        ],
        ROOT,
    )
    assert r.returncode == 0, (r.stdout + r.stderr)[-6000:]


def test_mypy_on_the_package(tmp_path):
    r = _run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--cache-dir",
            str(tmp_path / "cache"),
            "-p",
            "pygpu",
        ],
        ROOT,
    )
    assert r.returncode == 0 and "Success" in r.stdout, r.stdout[-6000:]


def test_mypy_strict_on_a_users_program_outside_the_clone(tmp_path):
    # issue 33: the development install (pip install -e ., make test) is one
    # that mypy follows from anywhere: a path file, not an import hook
    where = _installed_here(tmp_path)
    if where is None or not where.startswith(os.path.join(ROOT, "pygpu")):
        pytest.skip("pygpu is not installed from this clone (make install-test)")
    shutil.copy(USER, tmp_path / "user.py")
    r = _run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--strict",
            "--cache-dir",
            str(tmp_path / "cache"),
            "user.py",
        ],
        str(tmp_path),
    )
    assert r.returncode == 0 and "Success" in r.stdout, r.stdout[-6000:]
    assert "import-not-found" not in r.stdout and "no-untyped-call" not in r.stdout


def _pyright():
    for name in ("basedpyright", "pyright"):
        exe = shutil.which(
            name, path=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "")
        )
        if exe:
            return exe
    return None


def test_pyright_strict_on_a_users_program_outside_the_clone(tmp_path):
    exe = _pyright()
    if exe is None:
        pytest.skip("basedpyright/pyright is not installed (pip install -e '.[test]')")
    where = _installed_here(tmp_path)
    if where is None or not where.startswith(os.path.join(ROOT, "pygpu")):
        pytest.skip("pygpu is not installed from this clone (make install-test)")
    import numpy as np

    if tuple(int(p) for p in np.__version__.split(".")[:2]) < (2, 2):
        # NumPy 2.0's stubs (Python 3.9's last NumPy) give ndarray and
        # DTypeLike no defaults: pyright's strict mode calls every
        # np.ndarray in a signature "partially unknown" (mypy --strict,
        # above, holds on every NumPy)
        pytest.skip("pyright strict needs NumPy >= 2.2's stubs (this is %s)" % np.__version__)
    shutil.copy(USER, tmp_path / "user.py")
    (tmp_path / "pyrightconfig.json").write_text(json.dumps({"typeCheckingMode": "strict"}))
    r = _run([exe, "--pythonpath", sys.executable, "--outputjson", "user.py"], str(tmp_path))
    report = json.loads(r.stdout)
    errors = [d for d in report["generalDiagnostics"] if d["severity"] == "error"]
    assert not errors, "\n".join(
        "%d: %s" % (d["range"]["start"]["line"] + 1, d["message"]) for d in errors
    )
    assert report["summary"]["filesAnalyzed"] >= 1
