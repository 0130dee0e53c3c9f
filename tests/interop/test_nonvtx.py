"""pygpu built without NVTX (PYGPU_BUILD_NVTX=0): the extension is built
that way into a temporary copy of the sources, and one script runs the whole
public pygpu.profiler API against it and against the regular build in new
interpreters.  The two must print the same, apart from NVTX_AVAILABLE, and
nothing may reach a profiler (an NVTX injection library, tests/support/nvtx_record.c,
attached as Nsight Systems attaches).  Also the build switch itself
(tools/pygpu_build_backend.py, setup.py)."""

import importlib.util
import os
import re
import shutil
import subprocess
import sys

import pytest

from pygpu import _driver, profiler

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # tests/
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(HERE, "support"))
import fakecuda  # noqa: E402
from test_profiler import build_recorder  # noqa: E402

sys.path.remove(os.path.join(HERE, "support"))


def backend():
    spec = importlib.util.spec_from_file_location(
        "_pygpu_build_backend_nonvtx", os.path.join(ROOT, "tools", "pygpu_build_backend.py")
    )
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def copy_sources(dest):
    """What setup.py build_ext --inplace needs, without any built extension."""
    os.makedirs(dest)
    for f in ("setup.py", "pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(os.path.join(ROOT, f), dest)
    skip = shutil.ignore_patterns("*.so", "__pycache__", "*.pyc")
    for d in ("src", "tools", "pygpu", "kernels"):
        shutil.copytree(os.path.join(ROOT, d), os.path.join(dest, d), ignore=skip)


def run_setup(folder, switch, *args):
    env = dict(os.environ, PYGPU_BUILD_NVTX=switch)
    return subprocess.run(
        [sys.executable, "setup.py", "-q"] + list(args),
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


@pytest.fixture(scope="module")
def nonvtx(tmp_path_factory):
    """The copy of the sources with _driver built by PYGPU_BUILD_NVTX=0
    (every source compiled: about 5 s on two cores)."""
    setuptools = pytest.importorskip("setuptools")
    if int(setuptools.__version__.split(".")[0]) < 77:
        # setup.py runs with this interpreter's own setuptools, which must
        # read pyproject.toml's SPDX license (a fresh venv's may be older)
        pytest.skip(
            "needs setuptools >= 77 here (the build requirement), not %s" % setuptools.__version__
        )
    folder = str(tmp_path_factory.mktemp("nonvtx") / "pygpu-src")
    copy_sources(folder)
    r = run_setup(folder, "0", "build_ext", "--inplace", "-j", str(os.cpu_count() or 2))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "pygpu: PYGPU_BUILD_NVTX=0: building without NVTX" in r.stdout, r.stdout
    # the #else branches compile without a warning under -Wall
    assert not re.search(r"\.c:\d+:\d+: warning:", r.stderr), r.stderr
    return folder


def test_regular_build_has_nvtx_here():
    if backend().nvtx_include_dir() is None:
        pytest.skip("no NVTX headers here (or PYGPU_BUILD_NVTX=0)")
    assert profiler.NVTX_AVAILABLE is True and _driver.NVTX_AVAILABLE is True
    with open(_driver.__file__, "rb") as f:
        assert b"NVTX_INJECTION64_PATH" in f.read()


def test_nonvtx_build_has_no_nvtx_code(nonvtx):
    so = [
        f
        for f in os.listdir(os.path.join(nonvtx, "pygpu"))
        if f.startswith("_driver.") and f.endswith(".so")
    ]
    assert len(so) == 1, so
    with open(os.path.join(nonvtx, "pygpu", so[0]), "rb") as f:
        data = f.read()
    # NVTX's loader reads this variable; without the headers nothing of NVTX is in
    assert b"NVTX_INJECTION64_PATH" not in data and b"InitializeInjectionNvtx" not in data


# Every public name of pygpu.profiler.  The first two lines printed are the
# build's own (where _driver came from, NVTX_AVAILABLE); the rest must be the
# same for both builds.
API_SCRIPT = r"""
import ctypes, os, sys, threading
import pygpu.driver as cuda
from pygpu import _driver, compiler, profiler as p
print(_driver.__file__)
print("NVTX_AVAILABLE", p.NVTX_AVAILABLE, _driver.NVTX_AVAILABLE)

def show(f, *args, **kwargs):
    try:
        r = f(*args, **kwargs)
    except Exception as e:
        print("  raises %s: %s" % (type(e).__name__, e))
    else:
        print("  returns %r" % (r,))

print("all", sorted(p.__all__))
print("attached", p.attached(), p.attached())
print("type", p.time_range is _driver.TimeRange, p.time_range.__name__)

# context manager: nesting, the same object again while open, exceptions
order = []
with p.time_range("outer", "green") as r:
    order.append(r.name)
    with p.time_range("inner", 0x123456) as q:
        order.append(q.name)
        p.mark("m1", "#0000ff")
        with r as again:
            order.append(again is r)
    try:
        with p.time_range("boom"):
            raise KeyError("x")
    except KeyError as e:
        order.append(repr(e))
print("with", order)
t = p.time_range("exit")
t.__enter__()
print("__exit__", t.__exit__(ValueError, ValueError("v"), None), t.__exit__(None, None, None))

# decorator: recursion, wraps, arguments, exceptions
@p.time_range("deco", color="red")
def f(n, step=1):
    "f's doc"
    return f(n - step, step=step) + 1 if n > 0 else 0
print("deco", f(5), f(6, step=2), f.__name__, f.__doc__, f.__wrapped__.__name__)

@p.time_range("fails")
def g():
    raise ValueError("from g")
show(g)
r = p.time_range("twice")
print("twice", r(len)("abc"), r(sum)([1, 2]), r(len) is not r(len))

# colors and reprs
for color in ["green", "grey", "#102030", 0x10203040, 0xABCDEF, 0, 0xFFFFFFFF, None]:
    tr = p.time_range("c", color)
    print("color", repr(color), repr(tr), tr.color, tr.name)
    p.mark("c", color)
    p.mark(name="kw", color=color)
print("repr", repr(p.time_range(name="n")), repr(p.time_range("\u00e9t\u00e9 \u2713", color="pink")))

# the same exception for a bad name or color from each entry point
bad = [(b"x",), (None,), (1,), ("a\0b",), ("x", "mauve"), ("x", "#12345g"),
       ("x", "#1234567"), ("x", "12345"), ("x", -1), ("x", 1 << 32), ("x", 1 << 80),
       ("x", 1.5), ("x", True), ("x", b"red"), ("x", "\ud800")]
for args in bad:
    print("bad", repr(args))
    for fn in (p.time_range, p.mark, p.range_push):
        show(fn, *args)
for fn in (p.time_range, p.mark, p.range_push):
    print("misuse", fn.__name__)
    show(fn)
    show(fn, "x", None, 3)
    show(fn, "x", colour="red")
print("decorator misuse")
r = p.time_range("d")
for args, kwargs in [((), {}), ((1,), {}), ((len, len), {}), ((len,), {"x": 1})]:
    show(r, *args, **kwargs)
def set_name():
    r.name = "other"
show(set_name)
def sub():
    class Sub(p.time_range):
        pass
show(sub)
show(r.__enter__, 1)
show(p.range_pop, 1)

# by hand: the depths NVTX reports with no profiler attached
print("push/pop", p.range_push("a"), p.range_push("b", "blue"), p.range_pop(), p.range_pop(),
      p.range_pop())

# threads: ranges and marks on four threads at once
errors = []
def worker(i):
    try:
        with p.time_range("t%d" % i):
            for k in range(50):
                with p.time_range("t%d.%d" % (i, k), k):
                    p.mark("t%d.m%d" % (i, k))
    except Exception as e:
        errors.append(e)
ts = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
for th in ts: th.start()
for th in ts: th.join()
print("threads", errors)

# annotate_all: compiles and module loads in ranges (none reach a profiler here)
src = 'extern "C" __global__ void k(float *p) { p[0] = 1; }'
print("annotating", p.annotating())
p.annotate_all()
print("annotating", p.annotating())
ptx = compiler.compile(src, arch="compute_80", target="ptx", cache_dir=False, name="mine.cu")
print("compiled", b".entry k" in ptx)
p.annotate_all(False)
print("annotating", p.annotating())

# start/stop: cuProfilerStart/Stop in the stand-in driver
lib = ctypes.CDLL(os.environ["PYGPU_LIBCUDA"])
lib.fakecuda_live.restype = ctypes.c_long
p.start(); p.start()
print("start", lib.fakecuda_live(b"profiler"))
p.stop()
print("stop", lib.fakecuda_live(b"profiler"))
lib.fakecuda_fail(b"cuProfilerStart", 1, 201)
try:
    p.start()
except cuda.LogicError as e:
    print("start fails", type(e).__name__, e, e.routine, lib.fakecuda_live(b"profiler"))
print("done")
"""


def run_api(build_dir, tmp_path, tag, recorder=None):
    """API_SCRIPT in a new interpreter, against the build in build_dir (None:
    the regular one); returns (its stdout lines, the recorded NVTX events or
    None when nothing was recorded)."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("PYGPU_NVTX", "NVTX_INJECTION64_PATH", "NVTX_RECORD_FILE")
    }
    env.update(PYGPU_LIBCUDA=fakecuda.build(), PYGPU_CACHE_DIR=str(tmp_path / ("cache-" + tag)))
    if build_dir is not None:
        env["PYTHONPATH"] = os.pathsep.join([build_dir] + [p for p in [env.get("PYTHONPATH")] if p])
    record = tmp_path / ("events-" + tag)
    if recorder is not None:
        env.update(NVTX_INJECTION64_PATH=recorder, NVTX_RECORD_FILE=str(record))
    r = subprocess.run(
        [sys.executable, "-c", API_SCRIPT],
        cwd=str(tmp_path),
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    lines = r.stdout.splitlines()
    assert lines[-1] == "done", lines
    return lines, (record.read_text().splitlines() if record.exists() else None)


def test_whole_api_behaves_the_same_without_nvtx(nonvtx, tmp_path):
    regular, _ = run_api(None, tmp_path, "regular")
    bare, _ = run_api(nonvtx, tmp_path, "bare")
    lib = build_recorder(tmp_path)
    watched, events = run_api(nonvtx, tmp_path, "watched", recorder=lib)

    assert os.path.dirname(bare[0]) == os.path.join(nonvtx, "pygpu"), bare[0]
    assert os.path.dirname(regular[0]) == os.path.join(ROOT, "pygpu"), regular[0]
    assert bare[1] == "NVTX_AVAILABLE False False"
    assert regular[1] == "NVTX_AVAILABLE %s %s" % ((profiler.NVTX_AVAILABLE,) * 2)
    # everything else identical, with a profiler attached or not
    assert bare[2:] == regular[2:]
    assert watched == bare
    assert events is None, events[:10]  # NVTX never initialized: nothing recorded

    out = bare[2:]
    assert "attached False False" in out
    assert "push/pop -2 -2 -2 -2 -2" in out  # NVTX_NO_PUSH_POP_TRACKING
    assert "with ['outer', 'inner', True, \"KeyError('x')\"]" in out
    assert "__exit__ False False" in out
    assert "deco 5 3 f f's doc f" in out and "  raises ValueError: from g" in out
    assert "color 'grey' time_range('c', color=0xff7f7f7f) 4286545791 c" in out
    assert "threads []" in out
    assert out[out.index("annotating False") :][:4] == [
        "annotating False",
        "annotating True",
        "compiled True",
        "annotating False",
    ]
    assert "start 1" in out and "stop 0" in out
    fails = [line for line in out if line.startswith("start fails")]
    assert (
        len(fails) == 1
        and fails[0].startswith(
            "start fails LogicError cuProfilerStart failed: CUDA_ERROR_INVALID_CONTEXT"
        )
        and fails[0].endswith(" cuProfilerStart 0")
    ), fails
    i = out.index("bad ('x', 'mauve')")
    assert (
        out[i + 1 : i + 4]
        == [
            "  raises ValueError: unknown color 'mauve': give 0xRRGGBB, "
            "'#rrggbb' or one of green, blue, yellow, purple, cyan, red, "
            "white, orange, gray, black, pink, brown"
        ]
        * 3
    )
    i = out.index("bad (b'x',)")
    assert (
        out[i + 1 : i + 4]
        == ["  raises TypeError: a range or mark name must be a str, not bytes"] * 3
    )


@pytest.mark.skipif(not profiler.NVTX_AVAILABLE, reason="pygpu was built without NVTX")
def test_the_same_script_reaches_a_profiler_with_nvtx(tmp_path):
    """The check above that nothing is recorded means something: with the
    regular build the recorder sees the script's ranges."""
    lib = build_recorder(tmp_path)
    out, events = run_api(None, tmp_path, "regular-watched", recorder=lib)
    assert "attached True True" in out
    pushes = [e.split(" ", 5)[5] for e in events if e.startswith("push")]
    assert pushes[:3] == ["outer", "inner", "outer"] and "compile mine.cu" in pushes
    assert "mark" in " ".join(events)


# ---- the switch: PYGPU_BUILD_NVTX ----


@pytest.mark.parametrize(
    "value, want",
    [(None, None), ("", None), (" ", None), ("0", False), ("1", True), (" 1\n", True)],
)
def test_switch_values(value, want):
    env = {} if value is None else {"PYGPU_BUILD_NVTX": value}
    assert backend().nvtx_switch(env) is want


@pytest.mark.parametrize("value", ["yes", "no", "off", "true", "2", "00"])
def test_switch_rejects_other_values(value):
    b = backend()
    msg = (
        r"PYGPU_BUILD_NVTX must be 0 \(build without NVTX\), 1 \(require NVTX\) or "
        r"empty \(NVTX when its headers are found\), not '%s'" % value
    )
    for fn in (b.nvtx_switch, b.nvtx_include_dir, b.nvtx_for_build):
        with pytest.raises(ValueError, match=msg):
            fn({"PYGPU_BUILD_NVTX": value})


def fake_nvtx(folder):
    d = folder / "nvidia" / "cu13" / "include"
    (d / "nvtx3").mkdir(parents=True)
    (d / "nvtx3" / "nvToolsExt.h").write_text("/* fake */\n")
    return str(d)


def test_switch_decides_what_setup_builds(tmp_path, monkeypatch):
    b = backend()
    monkeypatch.setattr(b, "local_candidates", lambda environ=None: [str(tmp_path / "tk")])
    inc = fake_nvtx(tmp_path / "site")
    site, empty = [str(tmp_path / "site")], [str(tmp_path / "none")]
    for env in ({}, {"PYGPU_BUILD_NVTX": "1"}):
        assert b.nvtx_for_build(env, site) == (inc, None)
    d, note = b.nvtx_for_build({"PYGPU_BUILD_NVTX": "0"}, site)
    assert d is None and b.nvtx_include_dir({"PYGPU_BUILD_NVTX": "0"}, site) is None
    assert note == (
        "PYGPU_BUILD_NVTX=0: building without NVTX (pygpu.profiler's ranges do "
        "nothing, NVTX_AVAILABLE is False)"
    )
    d, note = b.nvtx_for_build({}, empty)
    assert d is None and note.startswith(
        "NVTX headers (nvtx3/nvToolsExt.h) not found: building without NVTX"
    )
    with pytest.raises(
        ValueError,
        match=r"PYGPU_BUILD_NVTX=1 but the NVTX headers "
        r"\(nvtx3/nvToolsExt.h\) were not found; pip install nvidia-nvtx or "
        r"use a CUDA toolkit. Tried:\n  .*tk\n  .*none/nvidia/cu13/include\n",
    ):
        b.nvtx_for_build({"PYGPU_BUILD_NVTX": "1"}, empty)


def test_switch_off_asks_pip_for_no_nvtx_wheel(monkeypatch):
    b = backend()
    monkeypatch.setenv("PYGPU_CUDA_HEADERS_FROM_PIP", "1")
    monkeypatch.delenv("PYGPU_BUILD_NVTX", raising=False)
    assert b._header_requirements() == b.HEADER_WHEELS + [b.NVTX_WHEEL]
    monkeypatch.setenv("PYGPU_BUILD_NVTX", "0")
    assert b._header_requirements() == b.HEADER_WHEELS
    monkeypatch.setattr(b, "cuda_include_dirs", lambda: None)  # no toolkit
    monkeypatch.setenv("PYGPU_CUDA_HEADERS_FROM_PIP", "")
    assert b._header_requirements() == b.HEADER_WHEELS
    monkeypatch.setattr(b, "nvtx_include_dir", lambda: None)
    monkeypatch.setenv("PYGPU_BUILD_NVTX", "1")
    assert b._header_requirements() == b.HEADER_WHEELS + [b.NVTX_WHEEL]


def test_headers_of_the_outer_environment_are_not_relied_on(monkeypatch):
    """Headers found only in NVIDIA's wheels of the environment pip runs
    from (a venv with pygpu[nvrtc]) are not on an isolated build's path: the
    build asks for its own (a clone's `make demo` after `pip install -e
    ".[nvrtc]"` failed on Python 3.9 and 3.13 with the toolkit hidden)."""
    b = backend()
    monkeypatch.delenv("PYGPU_CUDA_HEADERS_FROM_PIP", raising=False)
    monkeypatch.delenv("PYGPU_BUILD_NVTX", raising=False)
    monkeypatch.setattr(
        b, "cuda_include_dirs", lambda: ["/venv/lib/python3.9/site-packages/nvidia/cu13/include"]
    )
    assert b._header_requirements() == b.HEADER_WHEELS + [b.NVTX_WHEEL]
    tk = b._search.toolkit_include_candidates(None)[-1]
    monkeypatch.setattr(b, "cuda_include_dirs", lambda: [tk])
    assert b._header_requirements() == []


def test_setup_py_refuses_a_bad_switch(nonvtx):
    r = run_setup(nonvtx, "off", "build_ext", "--inplace")
    assert r.returncode == 1
    assert (
        "pygpu: PYGPU_BUILD_NVTX must be 0 (build without NVTX), 1 (require NVTX) or "
        "empty (NVTX when its headers are found), not 'off'" in r.stderr
    ), r.stderr
