#!/usr/bin/env bash
# tools/test_python.sh VERSION [PYTEST ARGS...]: the suite on another Python
# (CI: the oldest and the newest that pyproject.toml declares, 3.9 and 3.13),
# so that a version break cannot land.
#
# The interpreter: $PYGPU_PYTHON_<X_Y> if set (PYGPU_PYTHON_3_9=/path), else
# pythonX.Y on PATH, else pyenv's ($PYENV_ROOT or ~/.pyenv, versions/X.Y.*),
# else /usr/bin/pythonX.Y, /usr/local/bin/pythonX.Y.  Not found is a failure.
# A venv of its own, build/venv-X.Y (made once, kept), gets pygpu and its
# test extras from the package index (make test-python: a -Werror build in
# place, beside the other Pythons' extensions); then the driver stand-in
# pass, whole, and the CPU suite less what does not depend on the Python
# and costs most (PYTHON_SKIP in the Makefile).  Prints the time it took.
set -euo pipefail
cd "$(dirname "$0")/.."
v=${1:?usage: tools/test_python.sh X.Y [pytest args]}
shift
var="PYGPU_PYTHON_${v//./_}"
py=${!var:-}
is_v() { [ -n "$1" ] && [ -x "$1" ] && "$1" -c "import sys; sys.exit(sys.version_info[:2] != tuple(map(int, '$v'.split('.'))))" 2>/dev/null; }
if [ -z "$py" ]; then
    # (pyenv's shim on PATH answers only where that version is selected)
    for c in "$(command -v "python$v" || true)" \
        $(ls -d "${PYENV_ROOT:-$HOME/.pyenv}/versions/$v".*/bin/python 2>/dev/null | sort -V -r) \
        "/usr/bin/python$v" "/usr/local/bin/python$v"; do
        if is_v "$c"; then
            py=$c
            break
        fi
    done
fi
if ! is_v "$py"; then
    echo "test_python: no Python $v found (set $var to one)" >&2
    exit 1
fi
start=$SECONDS
venv=build/venv-$v
if [ ! -x "$venv/bin/python" ]; then
    "$py" -m venv "$venv"
    "$venv/bin/python" -m pip install -q --upgrade pip
fi
echo "== Python $v: $("$venv/bin/python" -c 'import sys; print(sys.version.split()[0])') ($py)"
make test-python PYTHON="$venv/bin/python" PYTEST_ARGS="$*"
echo "== Python $v: passed in $((SECONDS - start)) s"
