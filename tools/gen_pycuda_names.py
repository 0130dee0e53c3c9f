"""Write tests/data/pycuda_names.txt: PyCUDA's public names, one
``module:name`` a line (names are facts; no PyCUDA file is committed).

    python3 tools/gen_pycuda_names.py [--sdist PATH] [--wheel PATH]
        [--python PY312] [--pythonpath DIR] [-o OUT]

PyCUDA's files come from --sdist/--wheel, else $PYCUDA_SDIST and
$PYCUDA_WHEEL_DIR, else a checkout's ignored .whl/pycuda/, else
build/pycuda-compat/ (make pycuda-compat's cache).

What counts as a public name:

* every module of the sdist's ``pycuda/`` package (``.py`` files; a module
  with a private component, such as ``pycuda._cluda``, is skipped): the
  names its module level binds by ``def``, ``class`` or assignment
  (including inside top-level ``if``/``try``/``with``/``for`` blocks), and
  the names it imports from PyCUDA's own public modules
  (``from pycuda.tools import make_default_context``), not starting with an
  underscore; ``__all__`` where a module has one (PyCUDA 2026.1 has none);
* ``dir(pycuda.driver)`` after importing PyCUDA's wheel, which adds the
  C-level names of ``pycuda._driver`` (``from pycuda._driver import *``),
  less module objects and ``from __future__`` features.

Importing the wheel needs a Python of the wheel's version (3.12 for
PyCUDA 2026.1's) with NumPy importable (--pythonpath adds a directory with
it) and ``libcuda.so.1`` loadable: where no driver is installed, the CUDA
toolkit's stub is linked into a temporary directory under that name (the
wheel only needs the symbols; nothing is called).  Where the import still
fails, the C-level names are read from the sdist's ``src/wrapper/*.cpp``
Boost.Python registrations instead, and the output says so.
"""

import argparse
import ast
import glob
import io
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
# PyCUDA's files are never committed: $PYCUDA_SDIST / $PYCUDA_WHEEL_DIR, else
# the ignored .whl/pycuda/ of a checkout, else make pycuda-compat's cache
_WHL_DIRS = [
    os.environ.get("PYCUDA_WHEEL_DIR") or "",
    os.path.join(ROOT, ".whl", "pycuda"),
    os.path.join(ROOT, "build", "pycuda-compat"),
]


def _first(name):
    for d in _WHL_DIRS:
        if d and os.path.exists(os.path.join(d, name)):
            return os.path.join(d, name)
    return os.path.join(_WHL_DIRS[1], name)


DEFAULT_SDIST = os.environ.get("PYCUDA_SDIST") or _first("pycuda-2026.1.tar.gz")
DEFAULT_WHEEL = _first("pycuda-2026.1-cp312-cp312-linux_x86_64.whl")
DEFAULT_OUT = os.path.join(ROOT, "tests", "data", "pycuda_names.txt")
DEFAULT_MEMBERS_OUT = os.path.join(ROOT, "tests", "data", "pycuda_members.txt")
CUDA_HOME = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH") or "/usr/local/cuda"


# ---- the sdist's modules, statically ----


def _bound_names(target):
    """Names an assignment target binds (a.b = and a[i] = bind none)."""
    if isinstance(target, ast.Name):
        return [target.id]
    if isinstance(target, (ast.Tuple, ast.List)):
        return [n for elt in target.elts for n in _bound_names(elt)]
    if isinstance(target, ast.Starred):
        return _bound_names(target.value)
    return []


def module_names(source, package="pycuda"):
    """The public names a module's top level binds (see the module doc);
    package: the package whose own modules' imports count (tests/
    test_pycuda_names.py reads pygpu's modules with "pygpu")."""
    tree = ast.parse(source)
    names = set()
    explicit = None

    def visit(body):
        nonlocal explicit
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
            elif isinstance(node, ast.Assign):
                for t in node.targets:
                    bound = _bound_names(t)
                    names.update(bound)
                    if bound == ["__all__"]:
                        explicit = [ast.literal_eval(e) for e in node.value.elts]
            elif isinstance(node, (ast.AnnAssign, ast.AugAssign)):
                names.update(_bound_names(node.target))
            elif isinstance(node, ast.ImportFrom):
                mod = node.module or ""
                own = (
                    node.level == 0
                    and (mod == package or mod.startswith(package + "."))
                    and not any(p.startswith("_") for p in mod.split("."))
                )
                if own:
                    names.update(a.asname or a.name for a in node.names if a.name != "*")
            elif isinstance(node, ast.If):
                visit(node.body)
                visit(node.orelse)
            elif isinstance(node, ast.Try):
                visit(node.body)
                visit(node.orelse)
                visit(node.finalbody)
                for h in node.handlers:
                    visit(h.body)
            elif isinstance(node, (ast.For, ast.While, ast.With)):
                visit(node.body)

    visit(tree.body)
    if explicit is not None:
        names |= set(explicit)
    return {n for n in names if not n.startswith("_")}


def sdist_modules(sdist):
    """{module name: source} for the sdist's pycuda package."""
    out = {}
    with tarfile.open(sdist) as tf:
        for m in tf.getmembers():
            parts = m.name.split("/")
            if len(parts) < 3 or parts[1] != "pycuda" or not m.name.endswith(".py"):
                continue
            mod = parts[1:]
            mod[-1] = mod[-1][:-3]
            if mod[-1] == "__init__":
                mod = mod[:-1]
            if any(p.startswith("_") for p in mod):
                continue
            out[".".join(mod)] = tf.extractfile(m).read().decode("utf-8")
    return out


# ---- dir(pycuda.driver) ----

_DIR_SCRIPT = r"""
import __future__, types, pycuda.driver as d
for n in dir(d):
    v = getattr(d, n)
    if n.startswith("_") or isinstance(v, (types.ModuleType, __future__._Feature)):
        continue
    print(n)
"""


# the members of pycuda._driver's classes (tests/data/pycuda_members.txt):
# public names, the private single-underscore ones PyCUDA's own Python code
# calls (Function._launch_kernel), and the protocol methods that make a
# difference to code using an object (int(), len(), calling it); the
# exceptions are left out (their members are Python's)
_MEMBERS_SCRIPT = r"""
import pycuda.driver, pycuda._driver as d
KEEP = {"__int__", "__index__", "__len__", "__call__", "__iter__", "__getitem__",
        "__enter__", "__exit__"}
for c in sorted(dir(d)):
    cls = getattr(d, c)
    if c.startswith("_") or not isinstance(cls, type) or issubclass(cls, BaseException):
        continue
    for n in sorted(dir(cls)):
        if not n.startswith("__") or n in KEEP:
            print("%s.%s" % (c, n))
"""


def driver_dir(wheel, python, pythonpath, script=_DIR_SCRIPT):
    """dir(pycuda.driver) from the installed wheel (or what script prints
    there), or None (and why)."""
    if not python:
        return None, "no Python for the wheel (--python)"
    tmp = tempfile.mkdtemp(prefix="pycuda-names-")
    try:
        with zipfile.ZipFile(wheel) as zf:
            zf.extractall(os.path.join(tmp, "site"))
        libdir = os.path.join(tmp, "lib")
        os.makedirs(libdir)
        stub = os.path.join(CUDA_HOME, "lib64", "stubs", "libcuda.so")
        if os.path.exists(stub):
            os.symlink(stub, os.path.join(libdir, "libcuda.so.1"))
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([os.path.join(tmp, "site")] + list(pythonpath or []))
        # a real driver, where present, wins: the stub comes last
        env["LD_LIBRARY_PATH"] = os.pathsep.join(
            p
            for p in (env.get("LD_LIBRARY_PATH", ""), os.path.join(CUDA_HOME, "lib64"), libdir)
            if p
        )
        try:
            r = subprocess.run(
                [python, "-c", script], env=env, cwd=tmp, capture_output=True, text=True
            )
        except OSError as e:
            return None, "cannot run %s: %s" % (python, e)
        if r.returncode:
            return None, "importing the wheel failed: %s" % r.stderr.strip().splitlines()[-1:]
        return set(r.stdout.split()), None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


_CPP_PATTERNS = [
    r'py::def\(\s*"(\w+)"',
    r'DEF_SIMPLE_FUNCTION(?:_WITH_ARGS)?\(\s*(\w+)',
    r'py::(?:class_|enum_)<[^;{]*?>\s*(?:\w+\s*)?\(\s*"(\w+)"',
    r'py::scope\(\)\.attr\(\s*"(\w+)"',
    r'(?<!define )DECLARE_EXC\(\s*(\w+)\s*,',
]


def driver_from_cpp(sdist):
    """The C-level names from the Boost.Python registrations in the sdist's
    wrapper sources (an approximation: preprocessor conditions are not
    evaluated), GL's left out (they live in pycuda.gl)."""
    names = set()
    with tarfile.open(sdist) as tf:
        for m in tf.getmembers():
            base = os.path.basename(m.name)
            if (
                "/src/wrapper/" not in m.name
                or not base.endswith(".cpp")
                or base in ("wrap_cudagl.cpp", "_pvt_struct_v3.cpp")
            ):
                continue
            text = tf.extractfile(m).read().decode("utf-8", "replace")
            for pat in _CPP_PATTERNS:
                names.update(re.findall(pat, text, re.S))
    return {n for n in names if not n.startswith("_")}


def find_python(version="3.12"):
    """A working Python of the wheel's version: under pyenv, or on PATH
    (a pyenv shim on PATH may name a version it will not run)."""
    roots = [os.environ.get("PYENV_ROOT") or os.path.expanduser("~/.pyenv")]
    cands = [
        c
        for r in roots
        for c in sorted(
            glob.glob(os.path.join(r, "versions", version + ".*", "bin", "python3")), reverse=True
        )
    ]
    cands.append(shutil.which("python" + version))
    want = "%s.%s" % tuple(version.split(".")[:2])
    for exe in cands:
        if not exe:
            continue
        try:
            r = subprocess.run(
                [exe, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                capture_output=True,
                text=True,
            )
        except OSError:
            continue
        if r.returncode == 0 and r.stdout.strip() == want:
            return exe
    return None


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sdist", default=DEFAULT_SDIST)
    ap.add_argument("--wheel", default=DEFAULT_WHEEL)
    ap.add_argument("--python", default=None, help="a Python of the wheel's version")
    ap.add_argument(
        "--pythonpath",
        action="append",
        default=[],
        help="a directory with NumPy for that Python (repeatable)",
    )
    ap.add_argument("-o", "--out", default=DEFAULT_OUT)
    ap.add_argument(
        "--members-out",
        default=DEFAULT_MEMBERS_OUT,
        help="where the members of pycuda._driver's classes go ('' skips them)",
    )
    args = ap.parse_args(argv)

    modules = sdist_modules(args.sdist)
    entries = {(mod, n) for mod, src in modules.items() for n in module_names(src)}
    python = args.python or find_python()
    cnames, why = driver_dir(args.wheel, python, args.pythonpath)
    if cnames is None:
        print("gen_pycuda_names: %s; reading src/wrapper/*.cpp instead" % why, file=sys.stderr)
        cnames = driver_from_cpp(args.sdist)
        how = "the Boost.Python registrations in the sdist's src/wrapper/*.cpp"
    else:
        how = "dir(pycuda.driver) with the wheel %s imported" % os.path.basename(args.wheel)
    entries |= {("pycuda.driver", n) for n in cnames}

    buf = io.StringIO()
    buf.write("# PyCUDA's public names, one module:name a line (tools/gen_pycuda_names.py).\n")
    buf.write("# sdist: %s; driver: %s.\n" % (os.path.basename(args.sdist), how))
    for mod, n in sorted(entries):
        buf.write("%s:%s\n" % (mod, n))
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        f.write(buf.getvalue())
    print("%s: %d names in %d modules" % (args.out, len(entries), len({m for m, _ in entries})))
    if args.members_out:
        write_members(args, python)


def write_members(args, python):
    """tests/data/pycuda_members.txt: Class.member a line, read from the
    imported wheel (no fallback: the sources do not say what Boost.Python
    and int give each class)."""
    members, why = driver_dir(args.wheel, python, args.pythonpath, _MEMBERS_SCRIPT)
    if members is None:
        print("gen_pycuda_names: %s; %s not written" % (why, args.members_out), file=sys.stderr)
        return
    with open(args.members_out, "w") as f:
        f.write(
            "# The members of PyCUDA's C-level classes (pycuda._driver), one Class.member "
            "a line\n# (tools/gen_pycuda_names.py, from the wheel %s imported).\n"
            % os.path.basename(args.wheel)
        )
        for m in sorted(members):
            f.write(m + "\n")
    print(
        "%s: %d members of %d classes"
        % (args.members_out, len(members), len({m.split(".")[0] for m in members}))
    )


if __name__ == "__main__":
    main()
