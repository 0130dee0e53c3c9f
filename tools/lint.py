"""make lint: the style checks make test runs first.

ruff (lint and format) over the Python, clang-format over the C of src/ and
the stand-in (pygpu/testing/csrc), each with the version pinned in
pyproject.toml's [lint] extra; the generated src/core/cuda_enums.h is left
out.  Exits non-zero, printing what differs, when any check fails.
`--fix` rewrites the files instead.
"""

import glob
import os
import shutil
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PY = ["pygpu", "tests", "tools", "benchmarks", "examples", "setup.py"]
GENERATED = {os.path.join("src", "core", "cuda_enums.h")}


def c_sources():
    out = []
    for pat in ("src/**/*.c", "src/**/*.h", "pygpu/testing/csrc/*.c", "pygpu/testing/csrc/*.h"):
        out += glob.glob(os.path.join(ROOT, pat), recursive=True)
    return sorted(
        p for p in out if os.path.relpath(p, ROOT) not in GENERATED and not os.path.islink(p)
    )


def clang_format():
    """The pinned wheel's binary, else the one on PATH."""
    try:
        import clang_format as cf

        exe = os.path.join(os.path.dirname(cf.__file__), "data", "bin", "clang-format")
        if os.path.exists(exe):
            return exe
    except ImportError:
        pass
    exe = shutil.which("clang-format")
    if exe is None:
        sys.exit("lint: clang-format not found: pip install 'pygpu[lint]'")
    return exe


def main(argv):
    fix = "--fix" in argv
    ruff = [sys.executable, "-m", "ruff"]
    steps = [
        ruff + ["check"] + (["--fix"] if fix else []) + PY,
        ruff + ["format"] + ([] if fix else ["--check"]) + PY,
        [clang_format()] + (["-i"] if fix else ["--dry-run", "-Werror"]) + c_sources(),
    ]
    bad = 0
    for cmd in steps:
        r = subprocess.run(cmd, cwd=ROOT)
        if r.returncode != 0:
            print("lint: failed: %s" % " ".join(cmd[:4]), file=sys.stderr)
            bad += 1
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
