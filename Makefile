# make demo: install pygpu, run examples/demo.py
# make test: install pygpu with its test extras, run the whole suite, then
#            run the driver tests again against the driver stand-in
#            (tests/standin/, loaded through PYGPU_LIBCUDA)
# make sanitize: the CPU suite and the stand-in pass under AddressSanitizer
# make docs: the manual (Sphinx) in docs/_build/html; a warning is an error
# make bench: benchmarks/run.py, pygpu against the C floor and the peers
# PYTHON=... picks the interpreter (default: the python3 on PATH).
# Where NumPy, setuptools and pytest are already importable (a CUDA box's
# venv, no network) the build uses --no-build-isolation and fetches nothing.
PYTHON ?= python3
OFFLINE := $(shell $(PYTHON) -c "import numpy, setuptools, pytest, importlib.util as u; assert u.find_spec(\"wheel\") or u.find_spec(\"setuptools.command.bdist_wheel\")" >/dev/null 2>&1 && echo yes)
ifeq ($(OFFLINE),yes)
PIP_INSTALL = $(PYTHON) -m pip install -q --no-build-isolation --no-deps -e .
PIP_INSTALL_TEST = $(PIP_INSTALL)
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

.PHONY: demo test install install-test bench docs clean standin sanitize

install:
	$(PIP_INSTALL)

install-test:
	$(PIP_INSTALL_TEST)

demo: install
	$(PYTHON) examples/demo.py

test: install-test standin
	$(PYTHON) -m pytest -q $(PYTEST_ARGS)
	$(STANDIN_RUN) $(PYTEST_ARGS)

standin:
	$(PYTHON) tests/fakecuda.py build

sanitize: install-test
	PYTHON=$(PYTHON) tools/sanitize.sh $(PYTEST_ARGS)

bench: install
	$(PYTHON) benchmarks/run.py

docs:
	$(PIP_INSTALL_DOCS)
	$(PYTHON) -m sphinx -W --keep-going -n -q -b html docs docs/_build/html
	@echo "the manual: docs/_build/html/index.html"

clean:
	rm -rf build *.egg-info pygpu/*.so benchmarks/build docs/_build
