"""pygpu against PyCUDA 2026.1's public names (tests/data/pycuda_names.txt,
written by tools/gen_pycuda_names.py): each ``pycuda.X:name`` exists as
``pygpu.X.name`` or is in docs/porting.md's table of absent names with the
reason."""

import importlib
import os
import re
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # tests/
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tools"))
from gen_pycuda_names import module_names  # noqa: E402

NAMES_FILE = os.path.join(HERE, "data", "pycuda_names.txt")
MEMBERS_FILE = os.path.join(HERE, "data", "pycuda_members.txt")
PORTING = os.path.join(ROOT, "docs", "porting.md")

# modules whose import does the work (makes a context, runs a script):
# their names are read from the source here, and checked by running them
# below where that needs no GPU
STATIC_MODULES = {"pygpu.autoinit", "pygpu.autoprimaryctx", "pygpu.debug", "pygpu.gl.autoinit"}


def pycuda_names():
    with open(NAMES_FILE) as f:
        return [line.strip() for line in f if line.strip() and not line.startswith("#")]


_ROW = re.compile(r"^\|\s*`(pycuda(?:\.\w+)*:\w+)`\s*\|\s*(.*?)\s*\|\s*$")


def documented_absent(section="## PyCUDA names pygpu does not have", row=_ROW):
    """{module:name: reason} from docs/porting.md's table under
    'PyCUDA names pygpu does not have' (or another section's rows)."""
    with open(PORTING) as f:
        text = f.read()
    start = text.index(section)
    end = text.find("\n## ", start + 1)
    out = {}
    for line in text[start : end if end >= 0 else None].splitlines():
        m = row.match(line)
        if m:
            out[m.group(1)] = m.group(2)
    return out


def has_name(pygpu_mod, name):
    if pygpu_mod in STATIC_MODULES:
        path = os.path.join(ROOT, *pygpu_mod.split(".")) + ".py"
        if not os.path.exists(path):
            return False
        with open(path) as f:
            return name in module_names(f.read(), package="pygpu")
    try:
        mod = importlib.import_module(pygpu_mod)
    except ImportError:
        return False
    return hasattr(mod, name)


def test_the_list_is_pycudas():
    names = pycuda_names()
    assert len(names) == len(set(names))
    assert all(re.fullmatch(r"pycuda(\.\w+)*:\w+", n) for n in names)
    mods = {n.split(":")[0] for n in names}
    # the sdist's modules and the C-level driver names are all there
    assert {
        "pycuda",
        "pycuda.driver",
        "pycuda.compiler",
        "pycuda.gpuarray",
        "pycuda.tools",
        "pycuda.compyte.dtypes",
        "pycuda.compyte.array",
        "pycuda.debug",
        "pycuda.autoprimaryctx",
        "pycuda.gl",
        "pycuda.sparse.cg",
    } <= mods
    for n in (
        "memset_d2d8",
        "DeviceMemoryPool",
        "TextureReference",
        "Error",
        "pagelocked_empty",
        "set_debugging",
        "to_device",
    ):
        assert "pycuda.driver:" + n in names
    assert not any(n.split(":")[1].startswith("_") for n in names)


def test_every_pycuda_name_is_present_or_documented_absent():
    absent = documented_absent()
    missing, both = [], []
    for entry in pycuda_names():
        mod, name = entry.split(":")
        present = has_name("pygpu" + mod[len("pycuda") :], name)
        if present and entry in absent:
            both.append(entry)
        elif not present and entry not in absent:
            missing.append(entry)
    assert not missing, "missing from pygpu and not in docs/porting.md: %s" % missing
    assert not both, "present in pygpu but listed as absent in docs/porting.md: %s" % both


def test_the_absent_table_gives_reasons_for_real_names():
    absent = documented_absent()
    assert absent, "docs/porting.md has no table of absent names"
    names = set(pycuda_names())
    assert set(absent) <= names, "not PyCUDA names: %s" % sorted(set(absent) - names)
    for entry, reason in absent.items():
        assert len(reason) > 20, "%s: no reason given" % entry


def test_the_legacy_texture_references_are_the_documented_example():
    absent = documented_absent()
    for n in ("TextureReference", "SurfaceReference", "bind_array_to_texref", "matrix_to_texref"):
        assert "CUDA 12" in absent["pycuda.driver:" + n]


def test_the_generator_reads_module_names():
    src = (
        "import os\nfrom pycuda.tools import a as b\nfrom numpy import c\n"
        "from pycuda._x import d\nX = 1\n_y = 2\nif 1:\n    def f(): pass\n"
        "try:\n    class K: pass\nexcept Exception:\n    K = None\n"
        "p, (q, *r) = 1, (2, 3)\nsys.argv = []\n"
    )
    assert module_names(src) == {"b", "X", "f", "K", "p", "q", "r"}
    assert module_names("from pygpu.tools import a\n", package="pygpu") == {"a"}
    assert module_names("from pygpu.tools import a\n") == set()


def _run(args, cwd, env=None):
    e = dict(os.environ)
    e.update(env or {})
    e["PYTHONPATH"] = ROOT + os.pathsep + e.get("PYTHONPATH", "")
    return subprocess.run(
        [sys.executable] + args, cwd=cwd, env=e, capture_output=True, text=True, timeout=120
    )


def test_debug_runs_a_script_with_debugging_on(tmp_path):
    script = tmp_path / "prog.py"
    script.write_text(
        "import sys\nimport pygpu.driver as d\nfrom pygpu import compiler\n"
        "print(sys.argv, d.CUDA_DEBUGGING, sorted(k for k in ('parser', 'options', 'args',"
        " 'mainpyfile') if k in globals()))\n"
        "print(compiler._build_options([], 'compute_90', [], None, None, False))\n"
    )
    r = _run(["-m", "pygpu.debug", str(script), "x", "--y"], cwd=str(tmp_path))
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == "[%r, 'x', '--y'] True ['args', 'mainpyfile', 'options', 'parser']" % (
        str(script),
    )
    assert "--device-debug" in lines[1]
    r = _run(["-m", "pygpu.debug"], cwd=str(tmp_path))
    assert r.returncode == 2 and "SCRIPT-TO-RUN" in r.stdout
    r = _run(["-m", "pygpu.debug", str(tmp_path / "nope.py")], cwd=str(tmp_path))
    assert r.returncode == 1 and "does not exist" in r.stdout


def test_set_debugging_reaches_the_compiler_options():
    import pygpu.driver as d
    from pygpu import compiler

    assert d.CUDA_DEBUGGING is False
    assert "--device-debug" not in compiler._build_options([], "compute_90", [], None, None, False)
    d.set_debugging()
    try:
        opts = compiler._build_options([], "compute_90", [], None, None, False)
        assert opts.count("--device-debug") == 1
        # the user's own -G is not doubled
        assert (
            compiler._build_options(["-G"], "compute_90", [], None, None, False).count(
                "--device-debug"
            )
            == 0
        )
    finally:
        d.set_debugging(False)
    assert d.CUDA_DEBUGGING is False


@pytest.mark.standin
def test_autoprimaryctx_pushes_the_primary_context(tmp_path):
    from fakecuda import build

    lib = build()
    code = (
        "import pygpu.autoprimaryctx as a, pygpu.driver as d\n"
        "print(a.device.get_attribute(d.device_attribute.MAX_THREADS_PER_BLOCK) > 0, "
        "d.Context.get_current() == a.context, a.make_default_context.__module__)\n"
    )
    r = _run(["-c", code], cwd=str(tmp_path), env={"PYGPU_LIBCUDA": lib})
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["True", "True", "pygpu.tools"]
    assert r.stderr == ""


def test_the_committed_list_is_what_the_generator_gives():
    """Regenerate the static part (and the C-level names from the wrapper
    sources) from PyCUDA's sdist where it is at hand: the committed list
    has the same module names, and the driver's C-level names read from
    the sources are the ones dir(pycuda.driver) gave."""
    import gen_pycuda_names as gen

    sdist = os.environ.get("PYCUDA_SDIST", gen.DEFAULT_SDIST)
    if not os.path.exists(sdist):
        pytest.skip("PyCUDA's sdist is not here (PYCUDA_SDIST=path/to/pycuda-2026.1.tar.gz)")
    committed = set(pycuda_names())
    static = {
        "%s:%s" % (mod, n)
        for mod, src in gen.sdist_modules(sdist).items()
        for n in gen.module_names(src)
    }
    assert static <= committed
    driver_static = {e for e in static if e.startswith("pycuda.driver:")}
    c_level = {"pycuda.driver:" + n for n in gen.driver_from_cpp(sdist)}
    # everything else in the list is dir(pycuda.driver)'s C-level part
    assert committed - static == c_level - driver_static


@pytest.mark.gpu
def test_autoprimaryctx_on_the_gpu(tmp_path):
    code = (
        "import pygpu.autoprimaryctx as a, pygpu.driver as d\n"
        "ctx = d.Context.get_current()\n"
        "print(ctx == a.context, d.Context.get_device() == a.device,\n"
        "      a.context == a.device.retain_primary_context())\n"
        "x = d.to_device(b'0123456789abcdef')\n"
        "print(d.from_device(x, 16, 'u1').tobytes() == b'0123456789abcdef')\n"
    )
    r = _run(["-c", code], cwd=str(tmp_path))
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["True"] * 4
    assert r.stderr == ""


# ---- the members of PyCUDA's C-level classes ----

_MEMBER_ROW = re.compile(r"^\|\s*`pycuda\.driver:(\w+\.\w+)`\s*\|\s*(.*?)\s*\|\s*$")
# what enum classes inherit from int, by the Python that has it
_INT_SINCE = {"is_integer": (3, 12), "bit_count": (3, 10)}


def pycuda_members():
    with open(MEMBERS_FILE) as f:
        return [line.strip() for line in f if line.strip() and not line.startswith("#")]


def documented_absent_members():
    return documented_absent("## PyCUDA class members pygpu does not have", _MEMBER_ROW)


def has_member(cls, name):
    import enum

    if hasattr(cls, name):
        return True
    if isinstance(cls, type) and issubclass(cls, enum.Enum):
        if name in _INT_SINCE and sys.version_info < _INT_SINCE[name]:
            return True  # PyCUDA's enums on this Python lack it too
        return any(hasattr(m, name) for m in cls)  # .name: the members'
    return False


def test_the_member_list_is_pycudas():
    members = pycuda_members()
    assert len(members) == len(set(members)) and len(members) > 800
    assert all(re.fullmatch(r"\w+\.\w+", m) for m in members)
    for m in (
        "Context.get_api_version",
        "Function._launch_kernel",
        "ManagedAllocation.attach",
        "HostAllocation.get_flags",
        "Memcpy2D.src_y",
        "device_attribute.names",
        "PooledDeviceAllocation.__len__",
        "array3d_flags.2DARRAY",
    ):
        assert m in members
    classes = {m.split(".")[0] for m in members}
    names = set(pycuda_names())
    assert {"pycuda.driver:" + c for c in classes} <= names


def test_every_pycuda_member_is_present_or_documented_absent():
    import pygpu.driver as drv

    absent = documented_absent_members()
    absent_classes = {
        e.split(":")[1] for e in documented_absent() if e.startswith("pycuda.driver:")
    }
    missing, both = [], []
    for entry in pycuda_members():
        cname, name = entry.split(".")
        if cname in absent_classes:
            continue
        present = has_member(getattr(drv, cname), name)
        if present and entry in absent:
            both.append(entry)
        elif not present and entry not in absent:
            missing.append(entry)
    assert not missing, "missing from pygpu and not in docs/porting.md: %s" % missing
    assert not both, "present in pygpu but listed as absent in docs/porting.md: %s" % both


def test_the_absent_member_table_gives_reasons_for_real_members():
    absent = documented_absent_members()
    assert set(absent) <= set(pycuda_members())
    assert "Module.get_texref" in absent and "CUDA 12" in absent["Module.get_texref"]
    for entry, reason in absent.items():
        assert len(reason) > 20, "%s: no reason given" % entry


def test_the_committed_member_list_is_what_the_wheel_gives(tmp_path):
    """Regenerate the member list from PyCUDA's wheel where it and a Python
    of its version (with NumPy: PYCUDA_PYTHONPATH) are at hand."""
    import gen_pycuda_names as gen

    python = gen.find_python()
    if not os.path.exists(gen.DEFAULT_WHEEL) or python is None:
        pytest.skip("PyCUDA's wheel or a Python 3.12 is not here")
    extra = [p for p in os.environ.get("PYCUDA_PYTHONPATH", "").split(os.pathsep) if p]
    members, why = gen.driver_dir(gen.DEFAULT_WHEEL, python, extra, gen._MEMBERS_SCRIPT)
    if members is None:
        pytest.skip("cannot import the wheel: %s" % why)
    assert members == set(pycuda_members())
