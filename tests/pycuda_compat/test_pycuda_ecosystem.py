"""tools/pycuda_ecosystem.py (make pycuda-ecosystem) on the CPU: the
resumable suite runner on synthetic pytest suites (crash, hang, collection
error, time budget), the comparison of printed results, the examples'
screening, the whole runner on a fake reikna and fake examples, the exit
without a GPU; and reikna's import through the alias on the driver stand-in,
where reikna's sdist and its dependencies' wheels are at hand
($ECOSYSTEM_WHEEL_DIR or .whl/ecosystem/).  No third-party file is used
otherwise."""

import glob
import importlib.util
import json
import os
import subprocess
import sys
import tarfile
import textwrap

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _load():
    spec = importlib.util.spec_from_file_location(
        "pycuda_ecosystem", os.path.join(ROOT, "tools", "pycuda_ecosystem.py")
    )
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


eco = _load()
TOOL = os.path.join(ROOT, "tools", "pycuda_ecosystem.py")


def _env(**extra):
    env = dict(os.environ)
    for k in list(env):
        if k.startswith("ECOSYSTEM_") or k in ("REIKNA_SDIST", "PYCUDA_SDIST", "PYCUDA_WHEEL_DIR"):
            del env[k]
    if "ASAN_OPTIONS" in env:
        # under make sanitize: these tests' children segfault on purpose, and
        # AddressSanitizer would turn the signal into its own exit status
        env["ASAN_OPTIONS"] += ":handle_segv=0"
    env.update(extra)
    return env


# ---- the suite runner ----

SUITE = '''
import os, signal, time
import pytest

def test_pass():
    pass

def test_fail():
    assert 1 == 2

@pytest.mark.skip(reason="not here")
def test_skip():
    pass

def test_crash():
    os.kill(os.getpid(), signal.SIGSEGV)     # as a segfault in a driver call would

def test_after_crash():
    pass

def test_hang():
    signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGALRM])   # deaf to the limit
    time.sleep(120)

def test_last():
    pass
'''


@pytest.fixture
def suite(tmp_path):
    d = tmp_path / "suite"
    (d / "test").mkdir(parents=True)
    (d / "pytest.ini").write_text("[pytest]\n")
    (d / "test" / "test_a.py").write_text(SUITE)
    (d / "test" / "test_broken.py").write_text(
        "import no_such_module_here\n\ndef test_x():\n    pass\n"
    )
    return d


def test_run_suite_survives_crash_hang_and_collection_error(suite, tmp_path):
    rec = str(tmp_path / "rec.jsonl")
    tests, complete = eco.run_suite(
        "pycuda",
        str(suite),
        ["test", "--continue-on-collection-errors"],
        _env(PYTHONPATH=""),
        rec,
        test_timeout=1,
        hang_grace=2,
    )
    assert complete
    got = {k: v["outcome"] for k, v in tests.items()}
    assert got == {
        "test/test_a.py::test_pass": "passed",
        "test/test_a.py::test_fail": "failed",
        "test/test_a.py::test_skip": "skipped",
        "test/test_a.py::test_crash": "failed",
        "test/test_a.py::test_after_crash": "passed",
        "test/test_a.py::test_hang": "failed",
        "test/test_a.py::test_last": "passed",
        "test/test_broken.py": "failed",
    }
    assert tests["test/test_a.py::test_crash"]["message"] == (
        "crashed: the test process died (signal SIGSEGV)"
    )
    assert tests["test/test_a.py::test_hang"]["message"] == (
        "hung: killed after 3 s without progress"
    )
    assert tests["test/test_broken.py"]["message"] == (
        "collection error: ModuleNotFoundError: No module named 'no_such_module_here'"
    )
    assert tests["test/test_broken.py"]["collect"] is True
    assert eco.suite_counts(tests) == {"passed": 3, "failed": 4, "skipped": 1}


def test_run_suite_with_xdist_workers(suite, tmp_path):
    """pytest-xdist's processes (ECOSYSTEM_WORKERS): xdist reports the crash,
    the runner the hang and the collection error."""
    pytest.importorskip("xdist")
    tests, complete = eco.run_suite(
        "pycuda",
        str(suite),
        ["test", "--continue-on-collection-errors"],
        _env(PYTHONPATH=""),
        str(tmp_path / "rec.jsonl"),
        test_timeout=1,
        hang_grace=2,
        workers=2,
        done_file=str(tmp_path / "done"),
    )
    assert complete
    got = {k: v["outcome"] for k, v in tests.items()}
    assert got == {
        "test/test_a.py::test_pass": "passed",
        "test/test_a.py::test_fail": "failed",
        "test/test_a.py::test_skip": "skipped",
        "test/test_a.py::test_crash": "failed",
        "test/test_a.py::test_after_crash": "passed",
        "test/test_a.py::test_hang": "failed",
        "test/test_a.py::test_last": "passed",
        "test/test_broken.py": "failed",
    }
    assert (
        "crashed while running 'test/test_a.py::test_crash'"
        in tests["test/test_a.py::test_crash"]["message"]
    )
    assert tests["test/test_a.py::test_hang"]["message"] == (
        "hung: killed after 3 s without progress"
    )


def test_run_suite_stops_at_the_budget_and_resumes(tmp_path):
    d = tmp_path / "s"
    d.mkdir()
    (d / "pytest.ini").write_text("[pytest]\n")
    (d / "test_b.py").write_text(
        textwrap.dedent('''
        import time
        def test_1():
            pass
        def test_2():
            time.sleep(30)
        def test_3():
            pass
    ''')
    )
    rec = str(tmp_path / "rec.jsonl")
    import time

    tests, complete = eco.run_suite(
        "pycuda",
        str(d),
        ["test_b.py"],
        _env(PYTHONPATH=""),
        rec,
        test_timeout=100,
        deadline=time.monotonic() + 6,
    )
    assert not complete
    # test_2 was in flight: left out, to run again; test_3 never started
    assert {k: v["outcome"] for k, v in tests.items()} == {"test_b.py::test_1": "passed"}
    (d / "test_b.py").write_text((d / "test_b.py").read_text().replace("time.sleep(30)", "pass"))
    tests, complete = eco.run_suite(
        "pycuda", str(d), ["test_b.py"], _env(PYTHONPATH=""), rec, test_timeout=100
    )
    assert complete
    assert {k: v["outcome"] for k, v in tests.items()} == {
        "test_b.py::test_1": "passed",
        "test_b.py::test_2": "passed",
        "test_b.py::test_3": "passed",
    }
    starts = [json.loads(ln) for ln in open(rec) if '"start"' in ln]
    assert [e["nodeid"] for e in starts].count("test_b.py::test_1") == 1  # not run again


def test_run_suite_records_a_crash_at_collection(tmp_path):
    d = tmp_path / "s"
    d.mkdir()
    (d / "pytest.ini").write_text("[pytest]\n")
    (d / "conftest.py").write_text("import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)\n")
    (d / "test_c.py").write_text("def test_1():\n    pass\n")
    tests, complete = eco.run_suite(
        "pycuda",
        str(d),
        ["test_c.py"],
        _env(PYTHONPATH=""),
        str(tmp_path / "rec.jsonl"),
        test_timeout=10,
    )
    assert complete
    assert tests == {
        "<collect>": {
            "outcome": "failed",
            "duration": 0.0,
            "collect": True,
            "message": "collection error: pytest ran no test (signal SIGSEGV)",
        }
    }


def test_run_suite_says_why_pytest_ran_nothing(tmp_path):
    """An INTERNALERROR (reikna's conftest meets pygpu's Device in
    pytest_report_header where pytest is not quiet): its exception becomes
    the message."""
    d = tmp_path / "s"
    d.mkdir()
    (d / "pytest.ini").write_text("[pytest]\n")
    (d / "conftest.py").write_text(
        textwrap.dedent('''
        def pytest_sessionstart(session):      # an INTERNALERROR
            raise TypeError("type 'pygpu.driver.Device' is not an acceptable base type")
    ''')
    )
    (d / "test_c.py").write_text("def test_1():\n    pass\n")
    tests, complete = eco.run_suite(
        "pycuda",
        str(d),
        ["test_c.py"],
        _env(PYTHONPATH=""),
        str(tmp_path / "rec.jsonl"),
        test_timeout=10,
    )
    msg = tests["<collect>"]["message"]
    assert msg.startswith("collection error: ")
    assert msg.endswith("TypeError: type 'pygpu.driver.Device' is not an acceptable base type"), msg


def test_suite_outcomes_and_gaps():
    entries = [
        {"nodeid": "t.py::a", "when": "start"},
        {"nodeid": "t.py::a", "when": "call", "outcome": "passed"},
        {"nodeid": "t.py::b", "when": "start"},
        {"nodeid": "t.py::b", "when": "abandon"},  # cut by the budget
        {"nodeid": "u.py", "when": "collect", "outcome": "failed", "message": "TypeError: x"},
    ]
    t = eco.suite_outcomes(entries)
    assert sorted(t) == ["t.py::a", "u.py"]
    assert t["u.py"]["message"] == "collection error: TypeError: x"
    pc = {
        "t.py::a": {"outcome": "passed", "message": ""},
        "u.py::c": {"outcome": "passed", "message": ""},
        "t.py::d": {"outcome": "failed", "message": "E"},
    }
    pg = dict(t, **{"t.py::d": {"outcome": "passed", "message": ""}})
    gaps, wins = eco.suite_gaps(pc, pg)
    assert gaps == [
        {"test": "u.py::c", "pygpu": "not run", "message": "collection error: TypeError: x"}
    ]
    assert wins == [{"test": "t.py::d", "pycuda": "failed", "message": "E"}]
    kinds = eco.gap_kinds(
        [{"message": "Error: 12 bytes"}, {"message": "Error: 16 bytes"}, {"message": "other"}]
    )
    assert kinds == [(2, "Error: 12 bytes"), (1, "other")]


# ---- comparing printed results ----


def test_compare_output_deterministic_text_and_numbers():
    ref = "device: H100\nsum = 42.0\nok\n"
    assert eco.compare_output(ref, ref, ref) is None
    assert eco.compare_output(ref, ref, "device: H100\nsum = 42.000001\nok\n") is None
    assert eco.compare_output(ref, ref, "device: H100\nsum = 41.0\nok\n") == (
        "line 2: 41.0 where PyCUDA prints 42.0 ('sum = 42.0')"
    )
    assert eco.compare_output(ref, ref, "device: H100\ntotal = 42.0\nok\n") == (
        "line 2: 'total = 42.0' where PyCUDA prints 'sum = 42.0'"
    )
    assert eco.compare_output(ref, ref, "device: H100\nsum = 42.0\n") == (
        "prints 2 lines where PyCUDA prints 3"
    )


def test_compare_output_ignores_what_varies_between_pycudas_runs():
    r1 = "took 0.0123 s at 0x7f00aa\n[0.12 0.5 0.9]\nerror 0.0\n"
    r2 = "took 0.0150 s at 0x7f00bb\n[0.33 0.5 0.1]\nerror 0.0\n"
    mine = "took 0.9 s at 0x55\n[0.77 0.5 0.2]\nerror 0.0\n"
    assert eco.compare_output(r1, r2, mine) is None
    assert eco.compare_output(r1, r2, "took 0.9 s at 0x55\n[0.77 0.6 0.2]\nerror 0.0\n") == (
        "line 2: 0.6 where PyCUDA prints 0.5 ('[0.12 0.5 0.9]')"
    )
    # close is not the same: 1.00001 and 1.00002 vary between PyCUDA's runs
    assert eco.compare_output("x 1.00001\n", "x 1.00002\n", "x 7\n") is None
    # PyCUDA's own runs differ in their text: nothing can be compared
    assert eco.compare_output("a\n", "b\n", "c\nd\n") is None


def test_examples_screening(tmp_path):
    (tmp_path / "gl.py").write_text("import pycuda.gl as cuda_gl\nfrom OpenGL.GL import *\n")
    (tmp_path / "plain.py").write_text(
        "from __future__ import print_function\n"
        "import numpy\nimport pycuda.autoinit\n"
        "from pycuda import gpuarray\n"
        "def f():\n    import no_such_pkg_xyz.sub\n"
    )
    (tmp_path / "py2.py").write_text("print 'hello'\n")
    assert eco.example_imports(str(tmp_path / "py2.py")) is None
    imps = eco.example_imports(str(tmp_path / "plain.py"))
    assert imps == ["no_such_pkg_xyz.sub", "numpy", "pycuda", "pycuda.autoinit", "pycuda.gpuarray"]
    assert eco.needs_display(imps) == []
    assert eco.needs_display(eco.example_imports(str(tmp_path / "gl.py"))) == [
        "OpenGL.GL",
        "pycuda.gl",
    ]
    assert eco.missing_modules(imps, _env(), str(tmp_path)) == ["no_such_pkg_xyz"]


def test_platform_args_name_the_target_interpreter():
    a = eco.platform_args("3.12")
    assert a[:5] == ["--only-binary=:all:", "--python-version", "3.12", "--implementation", "cp"]
    assert "manylinux_2_28_x86_64" in a and eco.platform_args(None) == []


# ---- the whole runner on fakes ----


@pytest.fixture(scope="module")
def standin_lib():
    from pygpu.testing import standin

    try:
        return standin.build()
    except standin.StandInBuildError as e:
        pytest.skip("no driver stand-in: %s" % e)


FAKE_PYCUDA = {
    "__init__.py": "VERSION_TEXT = '0.0-fake'\n",
    "driver.py": "NAME = 'real'\n",
    "autoinit.py": "",
}

FAKE_REIKNA_TESTS = '''
import pycuda.driver as drv

def test_same():
    pass

def test_driver_name():
    assert drv.__name__ == "pycuda.driver"      # only the real (here: fake) PyCUDA

def test_both_fail():
    assert False, "broken everywhere"
'''

EX_SAME = '''
import random, time
import pycuda.autoinit
print("result", 6 * 7)
print("took", time.perf_counter() + random.random(), "s")
'''

EX_DIFFERS = '''
import pycuda.driver as drv
print("driver module", drv.__name__.split(".")[0] == "pycuda")
'''

EX_CRASH = '''
import os, signal
import pycuda.driver as drv
if drv.__name__.startswith("pygpu"):
    os.kill(os.getpid(), signal.SIGSEGV)
print("fine")
'''


@pytest.fixture
def fakes(tmp_path):
    site = tmp_path / "site" / "pycuda"
    site.mkdir(parents=True)
    for name, text in FAKE_PYCUDA.items():
        (site / name).write_text(text)
    r = tmp_path / "reikna"
    (r / "test").mkdir(parents=True)
    (r / "pytest.ini").write_text("[pytest]\n")
    (r / "test" / "test_r.py").write_text(FAKE_REIKNA_TESTS)
    ex = tmp_path / "examples"
    (ex / "from-wiki").mkdir(parents=True)
    (ex / "same.py").write_text(EX_SAME)
    (ex / "differs.py").write_text(EX_DIFFERS)
    (ex / "crash.py").write_text(EX_CRASH)
    (ex / "from-wiki" / "viewer.py").write_text("import OpenGL.GLUT\n")
    (ex / "from-wiki" / "needs.py").write_text("import Cheetah_not_here.Template\n")
    (ex / "from-wiki" / "old.py").write_text("print 'hi'\n")
    return tmp_path


def test_runner_on_fakes(fakes, standin_lib):
    out = fakes / "out"
    env = _env(
        PYCUDA_COMPAT_ASSUME_GPU="1", PYTHONPATH=str(fakes / "site"), PYGPU_LIBCUDA=standin_lib
    )  # pygpu.autoinit on the stand-in
    p = subprocess.run(
        [
            sys.executable,
            TOOL,
            "--reikna-dir",
            str(fakes / "reikna"),
            "--examples-dir",
            str(fakes / "examples"),
            "--pytest-args",
            "test",
            "--out",
            str(out),
            "--work",
            str(fakes / "work"),
            "--test-timeout",
            "60",
            "--example-timeout",
            "60",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert p.returncode == 0, p.stdout + p.stderr
    rep = json.loads((out / "pycuda-ecosystem.json").read_text())
    r = rep["reikna"]
    assert r["pycuda"]["counts"] == {"passed": 2, "failed": 1, "skipped": 0}
    assert r["pygpu"]["counts"] == {"passed": 1, "failed": 2, "skipped": 0}
    assert r["gaps"] == [
        {
            "test": "test/test_r.py::test_driver_name",
            "pygpu": "failed",
            "message": "AssertionError: assert 'pygpu.driver' == 'pycuda.driver'",
        }
    ]
    progs = rep["examples"]["programs"]
    assert progs["same.py"] == {"skip": None, "pycuda": 1, "pygpu": 1}
    assert progs["differs.py"]["pycuda"] == 1 and progs["differs.py"]["pygpu"] == 0
    assert progs["differs.py"]["pygpu_why"] == (
        "prints differently: line 1: 'driver module False' where PyCUDA prints 'driver module True'"
    )
    assert progs["crash.py"]["pygpu_why"] == "crashed (signal SIGSEGV)"
    assert progs["from-wiki/viewer.py"]["skip"] == "needs a display (OpenGL.GLUT)"
    assert progs["from-wiki/needs.py"]["skip"] == "needs Cheetah_not_here, missing here"
    assert progs["from-wiki/old.py"]["skip"] == "does not parse (Python 2?)"
    # the one table, printed and written
    for text in (p.stdout, (out / "pycuda-ecosystem.md").read_text()):
        assert (
            "| reikna 0.9.0 tests (`--api=cuda -m \"not perf\"`) | 2 / 1 / 0 "
            "passed/failed/skipped | 1 / 2 / 0 passed/failed/skipped | 1 |"
        ) in text
        assert "| PyCUDA examples (3 run, 3 skipped) | 3 / 3 ran | 1 / 3 ran | 2 |" in text
        assert "| &nbsp; `same.py` | pass | pass |  |" in text
        assert "| &nbsp; `crash.py` | pass | FAIL (crashed (signal SIGSEGV)) | yes |" in text


def test_runner_baseline_stands_in_for_an_impl_not_run(fakes, standin_lib):
    env = _env(
        PYCUDA_COMPAT_ASSUME_GPU="1", PYTHONPATH=str(fakes / "site"), PYGPU_LIBCUDA=standin_lib
    )
    common = [
        "--reikna-dir",
        str(fakes / "reikna"),
        "--examples-dir",
        str(fakes / "examples"),
        "--pytest-args",
        "test",
        "--work",
        str(fakes / "work"),
        "--examples",
        "same.py",
    ]
    p = subprocess.run(
        [sys.executable, TOOL, "--impl", "pycuda", "--out", str(fakes / "a")] + common,
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert p.returncode == 0, p.stderr
    p = subprocess.run(
        [
            sys.executable,
            TOOL,
            "--impl",
            "pygpu",
            "--out",
            str(fakes / "b"),
            "--baseline",
            str(fakes / "a" / "pycuda-ecosystem.json"),
        ]
        + common,
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert p.returncode == 0, p.stderr
    rep = json.loads((fakes / "b" / "pycuda-ecosystem.json").read_text())
    assert rep["reikna"]["pycuda"]["counts"]["passed"] == 2
    assert rep["reikna"]["pygpu"]["counts"]["passed"] == 1
    assert rep["examples"]["programs"]["same.py"] == {"skip": None, "pycuda": 1, "pygpu": 1}
    assert any("results are from" in n for n in rep["meta"]["notes"])


def test_runner_without_gpu_exits_0():
    if eco.compat.gpu_reason() is None:
        pytest.skip("this machine has a GPU: the runner would run")
    env = _env()
    env.pop("PYCUDA_COMPAT_ASSUME_GPU", None)
    p = subprocess.run([sys.executable, TOOL], capture_output=True, text=True, env=env, timeout=120)
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith("pycuda-ecosystem: not run: this machine has no usable GPU (")
    assert "run it on a CUDA machine" in p.stdout


def test_unpack_keeps_to_the_folder(tmp_path):
    import io

    sd = tmp_path / "x-1.0.tar.gz"
    with tarfile.open(sd, "w:gz") as tf:
        for name, data in (
            ("x-1.0/examples/a.py", b"print(1)\n"),
            ("x-1.0/setup.py", b""),
            ("x-1.0/../evil.py", b""),
        ):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    root = eco.unpack(str(sd), str(tmp_path / "u"), only="examples")
    assert root == str(tmp_path / "u" / "x-1.0")
    assert sorted(os.listdir(root)) == ["examples"]
    assert not (tmp_path / "evil.py").exists() and not (tmp_path / "u" / "evil.py").exists()
    with pytest.raises(eco.EcosystemError, match="has no tests/ folder"):
        eco.unpack(str(sd), str(tmp_path / "v"), only="tests")


# ---- reikna through the alias, on the driver stand-in ----


def _reikna_inputs():
    """(unpacked reikna sdist folder, [wheels]) or a reason to skip."""
    d = os.environ.get("ECOSYSTEM_WHEEL_DIR") or os.path.join(ROOT, ".whl", "ecosystem")
    sd = glob.glob(os.path.join(d, "reikna-%s.tar.gz" % eco.REIKNA_VERSION))
    wheels = [
        w
        for w in glob.glob(os.path.join(d, "*.whl"))
        if os.path.basename(w).split("-")[0].lower() in ("mako", "markupsafe", "funcsigs")
    ]
    if not sd or len(wheels) < 3:
        return (
            None,
            "reikna's sdist and mako/markupsafe/funcsigs wheels are not in %s "
            "(python tools/pycuda_ecosystem.py --fetch %s)" % (d, d),
        )
    return sd[0], wheels


@pytest.fixture(scope="module")
def reikna(tmp_path_factory):
    sd, wheels = _reikna_inputs()
    if sd is None:
        pytest.skip(wheels)
    dest = tmp_path_factory.mktemp("reikna")
    root = eco.unpack(sd, str(dest))
    # the wheels go on sys.path as they are (zip imports; markupsafe falls back
    # to its pure-Python code where its compiled part is for another Python)
    return root, os.pathsep.join(wheels)


def _alias_run(reikna, code, standin_lib):
    root, path = reikna
    env = _env(PYGPU_LIBCUDA=standin_lib, PYTHONPATH=os.pathsep.join([root, path, ROOT]))
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_reikna_imports_through_the_alias(reikna, standin_lib):
    p = _alias_run(
        reikna,
        """
        import pygpu.pycuda_alias as alias
        alias.install()
        import reikna.cluda as cluda
        api = cluda.cuda_api()
        dev = api.get_platforms()[0].get_devices()[0]
        print("device", dev.name)
        thr = api.Thread(dev)
        import numpy as np
        a = np.arange(10, dtype=np.float32)
        print("roundtrip", (thr.to_device(a).get() == a).all())
    """,
        standin_lib,
    )
    assert p.returncode == 0, p.stderr[-3000:]
    assert p.stdout.splitlines() == ["device pygpu driver stand-in 0", "roundtrip True"]


def test_reikna_suite_collects_through_the_alias(reikna, standin_lib):
    root, path = reikna
    env = _env(PYGPU_LIBCUDA=standin_lib, PYTHONPATH=os.pathsep.join([path, ROOT]))
    # test_cbrng.py imports SciPy (the GPU machine has it)
    ignore = (
        [] if importlib.util.find_spec("scipy") else ["--ignore", "test/test_cbrng/test_cbrng.py"]
    )
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-p",
            "pygpu.pycuda_alias",
            "--collect-only",
            "test",
            "--api=cuda",
            "-m",
            "not perf",
        ]
        + ignore,
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-2000:]
    assert "error" not in p.stdout.splitlines()[-1]
    assert " tests collected" in p.stdout.splitlines()[-1]


def test_reikna_arrays_keep_their_type_and_copy_through_the_alias(reikna, standin_lib):
    # reikna's Array: arithmetic results come from its _new_like_me() (its
    # test_array_type_after_binop), copy() is gpuarray._memcpy_discontig with
    # async_= and stream= (a pitched memcpy for a view: right on the stand-in
    # too; reikna's get() of a view runs a kernel, so it is not read here)
    p = _alias_run(
        reikna,
        """
        import pygpu.pycuda_alias as alias
        alias.install()
        import numpy as np
        import reikna.cluda as cluda
        from reikna.cluda.cuda import Array
        api = cluda.cuda_api()
        thr = api.Thread.create()
        a = np.random.default_rng().standard_normal((16, 24)).astype(np.float32)
        x = thr.to_device(a)
        print("binop", type(x + x).__name__, type(x * 2).__name__, type(-x).__name__,
              type(x.astype(np.float64)).__name__, (x + x).dtype)
        c = x.copy()
        thr.synchronize()
        print("copy", type(c).__name__, (c.get() == a).all(), int(c.gpudata) != int(x.gpudata))
        v = x[2:10, 3:7]
        print("view", type(v).__name__, v.shape, v.flags.forc)
        w = v.copy()
        thr.synchronize()
        # a copy keeps the view's strides (reikna's empty_like): read with a memcpy
        import pycuda.gpuarray as ga
        h = np.empty(w.shape, w.dtype)
        ga._memcpy_discontig(h, w)
        print("view copy", type(w).__name__, (h == a[2:10, 3:7]).all())
    """,
        standin_lib,
    )
    assert p.returncode == 0, p.stderr[-3000:]
    assert p.stdout.splitlines() == [
        "binop Array Array Array Array float32",
        "copy Array True True",
        "view Array (8, 4) False",
        "view copy Array True",
    ]


# ---- the pygpu gaps reikna met past Device (found on the stand-in with
# Device patched out), each closed and kept here as a test ----


@pytest.mark.standin
def test_gap_argument_handler_subclass_is_a_kernel_argument(standin, ctx):
    import struct
    import pygpu.driver as drv
    from pygpu.compiler import SourceModule

    class Buffer(drv.ArgumentHandler):  # reikna.cluda.cuda.Buffer's shape
        def __init__(self, size):
            self._buffer = drv.mem_alloc(size)

        def __int__(self):
            return int(self._buffer)

        def get_device_alloc(self):
            return self._buffer

    f = SourceModule('extern "C" __global__ void k(float *p) {}', no_extern_c=True).get_function(
        "k"
    )
    b = Buffer(256)
    f(b, block=(1, 1, 1), grid=(1, 1))
    assert struct.unpack("Q", standin.last_launch().params[:8])[0] == int(b)


def test_gap_memcpy_discontig_exists():
    # reikna's Array.copy calls it (tests/memory/test_memcpy_discontig.py: its copies)
    import inspect
    from pygpu import gpuarray

    assert (
        str(inspect.signature(gpuarray._memcpy_discontig))
        == "(dst, src, async_=False, stream=None)"
    )


@pytest.mark.standin
def test_gap_binop_result_keeps_the_subclass(standin, ctx):
    from pygpu import gpuarray

    class Mine(gpuarray.GPUArray):
        def _new_like_me(self, dtype=None, order="C"):
            return Mine(self.shape, dtype if dtype is not None else self.dtype)

    a = Mine((8,), np.float32)
    assert type(a + a) is Mine


# ---- gaps PyCUDA's examples/ met through the alias on the stand-in ----

COMPLEX_KERNEL = r"""
#include <pycuda-complex.hpp>
typedef pycuda::complex<double> cd;
typedef pycuda::complex<float> cf;
__global__ void k(const cd *z, cd *out, cf *outf, int power)
{
    int i = threadIdx.x + blockIdx.x * blockDim.x;
    cd w = z[i];
    cf v(float(w.real()), float(w.imag()));
    // mandelbrot_interactive's z = pow(z, power) + c: an int exponent
    out[4 * i] = pow(w, power) + w;
    out[4 * i + 1] = pow(2, w);
    out[4 * i + 2] = exp(w) * conj(w) / 3;
    out[4 * i + 3] = cd(norm(w), abs(w));
    outf[2 * i] = pow(v, 3) * 2;
    outf[2 * i + 1] = sqrt(v) - 1;
}
"""


def test_pycuda_complex_header_compiles():
    # PyCUDA puts its include folder on every SourceModule's path:
    # #include <pycuda-complex.hpp> inside SourceModule's extern "C" block
    # (C++ linkage in the header), pow() with an int operand (PyCUDA's plain
    # float/double overloads); to PTX, no GPU needed
    from pygpu import compiler

    ptx = compiler.compile(
        'extern "C" {\n%s\n}\n' % COMPLEX_KERNEL, target="ptx", arch="compute_80"
    )
    assert ptx.target == "ptx" and b".entry k(" in bytes(ptx)


@pytest.mark.driver
def test_pycuda_complex_header_in_source_module(ctx):
    from pygpu.compiler import SourceModule

    f = SourceModule(COMPLEX_KERNEL).get_function("k")
    assert len(f.param_sizes) == 4


@pytest.mark.gpu
def test_gpu_pycuda_complex_header_against_numpy(ctx, rng):
    import pygpu.driver as drv
    from pygpu.compiler import SourceModule

    n = 256
    z = (rng.standard_normal(n) + 1j * rng.standard_normal(n)).astype(np.complex128)
    out = np.empty(4 * n, np.complex128)
    outf = np.empty(2 * n, np.complex64)
    f = SourceModule(COMPLEX_KERNEL).get_function("k")
    f(drv.In(z), drv.Out(out), drv.Out(outf), np.int32(5), block=(128, 1, 1), grid=(2, 1))
    np.testing.assert_allclose(out[0::4], z**5 + z, rtol=1e-10)
    np.testing.assert_allclose(out[1::4], 2**z, rtol=1e-10)
    np.testing.assert_allclose(out[2::4], np.exp(z) * np.conj(z) / 3, rtol=1e-10)
    np.testing.assert_allclose(out[3::4], np.abs(z) ** 2 + 1j * np.abs(z), rtol=1e-10)
    v = z.astype(np.complex64)
    np.testing.assert_allclose(outf[0::2], v**3 * 2, rtol=2e-5, atol=1e-5)
    np.testing.assert_allclose(outf[1::2], np.sqrt(v) - 1, rtol=2e-5, atol=1e-5)


@pytest.mark.driver
def test_float_grid_and_block_are_refused_as_pycuda_refuses_them(ctx):
    # from-wiki/arithmetic_example.py passes grid=(N / 1024 + 1, 1, 1), a
    # float: PyCUDA's launch converts each entry with Boost.Python's
    # extract<unsigned>, whose converter takes Python ints only (a float
    # raises TypeError there too), so pygpu refuses it as well, naming it
    import pygpu.driver as drv
    from pygpu.compiler import SourceModule

    f = SourceModule("__global__ void k(float *p) {}").get_function("k")
    a = drv.mem_alloc(64)
    with pytest.raises(TypeError, match=r"grid\[0\] must be an int, not float"):
        f(a, block=(32, 1, 1), grid=(4096 / 1024 + 1, 1, 1))
    with pytest.raises(TypeError, match=r"block\[1\] must be an int, not float"):
        f(a, block=(32, 2.0, 1), grid=(1, 1))
    f.prepare("P")
    with pytest.raises(TypeError, match=r"grid\[1\] must be an int, not float"):
        f.prepared_call((1, 1.0), (32, 1, 1), a)
    f(a, block=(32, 1, 1), grid=(np.int64(5), 1))  # pygpu takes NumPy ints (__index__)
