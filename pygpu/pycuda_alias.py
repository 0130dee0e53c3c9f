"""Run an unmodified PyCUDA program on pygpu: an import alias ``pycuda`` -> ``pygpu``.

    python -m pygpu.pycuda_alias prog.py [args ...]
    python -m pygpu.pycuda_alias -m package.module [args ...]
    python -m pytest -p pygpu.pycuda_alias test_something.py

With the alias installed, ``import pycuda.gpuarray`` gives ``pygpu.gpuarray``
(the same module object), ``pycuda.driver`` gives ``pygpu.driver``, and so on
for every submodule pygpu has.  ``pycuda.autoprimaryctx`` falls back to
``pygpu.autoinit`` (which already makes the primary context current) where
pygpu has no module of that name.  A PyCUDA module that pygpu lacks is a
``ModuleNotFoundError`` naming both names.

In a program: ``import pygpu.pycuda_alias; pygpu.pycuda_alias.install()``
before the first ``import pycuda``.  ``uninstall()`` takes it away again
(modules already imported through it stay in ``sys.modules``).

Loaded as a pytest plugin (``-p pygpu.pycuda_alias``), it installs the alias
before the test files are collected.
"""

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import os
import runpy
import sys

__all__ = ["install", "uninstall", "installed", "main"]

ALIAS = "pycuda"
TARGET = "pygpu"

# where pygpu has no module of PyCUDA's name, the module that does its job
FALLBACKS = {"autoprimaryctx": "autoinit"}

USAGE = (
    "usage: python -m pygpu.pycuda_alias PROGRAM.py [ARGS ...]\n"
    "       python -m pygpu.pycuda_alias -m MODULE [ARGS ...]\n"
    "runs an unmodified PyCUDA program on pygpu: 'import pycuda.X' imports pygpu.X"
)


def _target_name(fullname):
    """pygpu's name for the PyCUDA module `fullname`, or None if the name is
    not under the alias."""
    if fullname == ALIAS:
        return TARGET
    if not fullname.startswith(ALIAS + "."):
        return None
    rest = fullname[len(ALIAS) + 1 :]
    name = TARGET + "." + rest
    if "." not in rest and rest in FALLBACKS:
        try:
            found = importlib.util.find_spec(name)
        except ImportError:
            found = None
        if found is None:
            name = TARGET + "." + FALLBACKS[rest]
    return name


class _AliasLoader(importlib.abc.Loader):
    """Hands out the already imported pygpu module as the alias's module."""

    def __init__(self, module):
        self._module = module
        self._spec = getattr(module, "__spec__", None)

    def create_module(self, spec):
        return self._module

    def exec_module(self, module):
        # importlib set module.__spec__ to the alias's spec on the way in;
        # the module keeps its own (its name is pygpu's)
        if self._spec is not None:
            try:
                module.__spec__ = self._spec
            except AttributeError:
                pass


class PycudaAliasFinder(importlib.abc.MetaPathFinder):
    """A meta-path finder mapping ``pycuda[.X]`` to ``pygpu[.X]``."""

    def find_spec(self, fullname, path=None, target=None):
        name = _target_name(fullname)
        if name is None:
            return None
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as e:
            if e.name not in (name, None) and not name.startswith(e.name + "."):
                raise  # a module that pygpu's module itself imports is missing
            raise ModuleNotFoundError(
                "No module named %r: the pycuda -> pygpu alias maps it to %r, which pygpu "
                "does not have" % (fullname, name),
                name=fullname,
            ) from None
        is_package = hasattr(module, "__path__")
        spec = importlib.machinery.ModuleSpec(fullname, _AliasLoader(module), is_package=is_package)
        if is_package:
            spec.submodule_search_locations = list(module.__path__)
        return spec


_finder = None


def installed():
    """True while the alias is installed in this process."""
    return _finder is not None and _finder in sys.meta_path


def install():
    """Install the alias (idempotent).  ImportError if a real PyCUDA is already
    imported in this process: the alias cannot replace modules in use."""
    global _finder
    if installed():
        return _finder
    real = [
        n
        for n, m in list(sys.modules.items())
        if (n == ALIAS or n.startswith(ALIAS + "."))
        and m is not None
        and not (getattr(m, "__name__", "") or "").startswith(TARGET)
    ]
    if real:
        raise ImportError(
            "cannot alias pycuda to pygpu: the real PyCUDA is already imported "
            "in this process (%s)" % ", ".join(sorted(real)[:5])
        )
    _finder = PycudaAliasFinder()
    sys.meta_path.insert(0, _finder)
    return _finder


def uninstall():
    """Remove the alias's finder; names already imported through it stay."""
    global _finder
    if _finder is not None:
        while _finder in sys.meta_path:
            sys.meta_path.remove(_finder)
    _finder = None


# ---- as a pytest plugin (-p pygpu.pycuda_alias) ----


def pytest_load_initial_conftests(early_config, parser, args):
    install()


def pytest_configure(config):
    install()


# ---- python -m pygpu.pycuda_alias ----


def main(argv=None):
    """Run a program (or with -m a module) as __main__ with the alias
    installed; returns the exit status for usage errors, else whatever the
    program does (its SystemExit passes through)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        sys.stderr.write(USAGE + "\n")
        return 0 if argv else 2
    install()
    if argv[0] == "-m":
        if len(argv) < 2:
            sys.stderr.write("pygpu.pycuda_alias: -m needs a module name\n" + USAGE + "\n")
            return 2
        sys.argv = [argv[1]] + argv[2:]
        if "" not in sys.path and os.getcwd() not in sys.path:
            sys.path.insert(0, os.getcwd())
        runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
        return 0
    prog = argv[0]
    if not os.path.exists(prog):
        sys.stderr.write("pygpu.pycuda_alias: no such program: %r\n" % prog)
        return 2
    sys.argv = [prog] + argv[1:]
    # like `python prog.py`: the program's folder first on sys.path
    sys.path.insert(0, os.path.dirname(os.path.abspath(prog)))
    runpy.run_path(prog, run_name="__main__")
    return 0


if __name__ == "__main__":
    sys.exit(main())
