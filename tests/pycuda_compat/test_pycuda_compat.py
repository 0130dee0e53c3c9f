"""The import alias pycuda -> pygpu (pygpu/pycuda_alias.py) and the
compatibility runner (tools/pycuda_compat.py), on the CPU: a fake test file,
a fake PyCUDA package, a fake sdist.  No PyCUDA file is used."""

import importlib.util
import io
import json
import os
import subprocess
import sys
import tarfile
import textwrap

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _load_runner():
    spec = importlib.util.spec_from_file_location(
        "pycuda_compat", os.path.join(ROOT, "tools", "pycuda_compat.py")
    )
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


compat = _load_runner()


def _py(code, cwd=None, env=None, args=()):
    """Run Python code in a fresh interpreter (the alias changes sys.modules
    and sys.meta_path: keep it out of this process)."""
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)] + list(args),
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        timeout=300,
    )


def _env(**extra):
    env = dict(os.environ)
    env.update(extra)
    return env


# ---- the alias ----


def test_alias_gives_pygpus_modules():
    p = _py("""
        import pygpu.pycuda_alias as alias
        alias.install()
        alias.install()                       # idempotent
        import pycuda
        import pycuda.driver as drv
        import pycuda.compiler
        from pycuda.tools import DeviceMemoryPool
        import pygpu, pygpu.driver, pygpu.compiler, pygpu.tools
        assert pycuda is pygpu
        assert drv is pygpu.driver and pycuda.compiler is pygpu.compiler
        assert DeviceMemoryPool is pygpu.tools.DeviceMemoryPool
        # the modules keep their own names and specs
        assert drv.__name__ == "pygpu.driver" and drv.__spec__.name == "pygpu.driver"
        assert pygpu.__spec__.name == "pygpu"
        assert [f for f in __import__("sys").meta_path if type(f).__name__ ==
                "PycudaAliasFinder"] == [alias._finder]
        print("ok")
    """)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "ok"


def test_alias_missing_module_names_both():
    p = _py("""
        import pygpu.pycuda_alias as alias
        alias.install()
        try:
            import pycuda.no_such_module
        except ModuleNotFoundError as e:
            print(e.name); print(e)
    """)
    assert p.returncode == 0, p.stderr
    name, msg = p.stdout.strip().splitlines()
    assert name == "pycuda.no_such_module"
    assert msg == (
        "No module named 'pycuda.no_such_module': the pycuda -> pygpu alias maps it "
        "to 'pygpu.no_such_module', which pygpu does not have"
    )


def test_alias_fallback_autoprimaryctx():
    alias = importlib.import_module("pygpu.pycuda_alias")
    has_own = importlib.util.find_spec("pygpu.autoprimaryctx") is not None
    want = "pygpu.autoprimaryctx" if has_own else "pygpu.autoinit"
    assert alias._target_name("pycuda.autoprimaryctx") == want
    assert alias._target_name("pycuda.gpuarray") == "pygpu.gpuarray"
    assert alias._target_name("pycuda") == "pygpu"
    assert alias._target_name("pycudax") is None
    assert alias._target_name("numpy") is None


@pytest.mark.driver
def test_alias_autoprimaryctx_makes_a_context_current():
    p = _py("""
        import pygpu.pycuda_alias as alias
        alias.install()
        import pycuda.autoprimaryctx
        import pycuda.driver as drv
        ctx = drv.Context.get_current()
        print(ctx is not None, ctx.get_device().name() == drv.Device(0).name())
    """)
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == ["True", "True"]


def test_alias_refuses_after_real_pycuda(tmp_path):
    pkg = tmp_path / "pycuda"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("REAL = True\n")
    p = _py(
        """
        import pycuda
        import pygpu.pycuda_alias as alias
        try:
            alias.install()
        except ImportError as e:
            print(e)
        print(alias.installed())
    """,
        env=_env(PYTHONPATH=str(tmp_path)),
    )
    assert p.returncode == 0, p.stderr
    assert p.stdout.splitlines() == [
        "cannot alias pycuda to pygpu: the real PyCUDA is already imported in this process "
        "(pycuda)",
        "False",
    ]


def test_alias_uninstall(tmp_path):
    p = _py("""
        import pygpu.pycuda_alias as alias
        alias.install()
        import pycuda.driver
        alias.uninstall()
        print(alias.installed())
        try:
            import pycuda.compiler       # the package is pygpu's, found by normal means
            print("found", pycuda.compiler.__name__)
        except ImportError as e:
            print("no", e)
    """)
    assert p.returncode == 0, p.stderr
    assert p.stdout.splitlines()[0] == "False"


PROGRAM = '''
import sys
import pycuda.driver as drv
import pycuda.compiler
from pycuda.compiler import compile
src = 'extern "C" __global__ void twice(float *x, int n)' \\
      '{ int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i] *= 2.0f; }'
ptx = compile(src, target="ptx", arch="compute_90")
ptx = ptx if isinstance(ptx, bytes) else ptx.encode()
print(drv.__name__, pycuda.compiler.__name__, __name__, sys.argv[1:])
print(b".entry twice" in ptx, b".target sm_90" in ptx)
sys.exit(int(sys.argv[-1]) if sys.argv[-1].isdigit() else 0)
'''


def test_python_m_alias_runs_a_pycuda_program(tmp_path):
    prog = tmp_path / "prog.py"
    prog.write_text(PROGRAM)
    p = subprocess.run(
        [sys.executable, "-m", "pygpu.pycuda_alias", str(prog), "a b", "x"],
        capture_output=True,
        text=True,
        cwd=str(tmp_path),
        timeout=300,
    )
    assert p.returncode == 0, p.stderr
    assert p.stdout.splitlines() == [
        "pygpu.driver pygpu.compiler __main__ ['a b', 'x']",
        "True True",
    ]
    # the program's exit status passes through
    p = subprocess.run(
        [sys.executable, "-m", "pygpu.pycuda_alias", str(prog), "3"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert p.returncode == 3, p.stderr


def test_python_m_alias_module_form(tmp_path):
    (tmp_path / "progmod.py").write_text(PROGRAM)
    p = subprocess.run(
        [sys.executable, "-m", "pygpu.pycuda_alias", "-m", "progmod", "z"],
        capture_output=True,
        text=True,
        cwd=str(tmp_path),
        timeout=300,
    )
    assert p.returncode == 0, p.stderr
    assert p.stdout.splitlines()[0] == "pygpu.driver pygpu.compiler __main__ ['z']"


@pytest.mark.parametrize(
    "args, status, message",
    [
        ([], 2, "usage: python -m pygpu.pycuda_alias PROGRAM.py"),
        (["-h"], 0, "usage: python -m pygpu.pycuda_alias PROGRAM.py"),
        (["-m"], 2, "pygpu.pycuda_alias: -m needs a module name"),
        (["/no/such/prog.py"], 2, "pygpu.pycuda_alias: no such program: '/no/such/prog.py'"),
    ],
)
def test_python_m_alias_usage(args, status, message):
    p = subprocess.run(
        [sys.executable, "-m", "pygpu.pycuda_alias"] + args,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert p.returncode == status
    assert p.stderr.startswith(message), p.stderr


# ---- the runner ----

FAKE_TESTS = '''
import signal
import time
import pytest
import pycuda.driver as drv
from pycuda.compiler import SourceModule


def test_driver_name():
    assert drv.__name__ == "pycuda.driver"      # only the real (here: fake) PyCUDA


def test_both():
    assert hasattr(drv, "mem_alloc") and SourceModule is not None


def test_skip():
    pytest.skip("nothing to see")


@pytest.mark.parametrize("n", [1, 2])
def test_param(n):
    assert n == 1


@pytest.fixture
def broken():
    raise RuntimeError("fixture broke")


def test_setup_error(broken):
    pass


@pytest.mark.xfail(reason="known")
def test_xfail():
    assert False


def test_slow():
    time.sleep(60)                               # the per-test limit stops it


def test_after_slow():
    pass
'''

FAKE_PYCUDA = {
    "__init__.py": "VERSION_TEXT = '0.0-fake'\n",
    "driver.py": "def mem_alloc(n):\n    return n\n",
    "compiler.py": "class SourceModule:\n    pass\n",
}


@pytest.fixture
def fake(tmp_path):
    tests = tmp_path / "tests"
    tests.mkdir()
    (tests / "test_fake.py").write_text(FAKE_TESTS)
    (tests / "test_blas.py").write_text("import pycuda.blas\n\ndef test_x():\n    pass\n")
    site = tmp_path / "site" / "pycuda"
    site.mkdir(parents=True)
    for name, text in FAKE_PYCUDA.items():
        (site / name).write_text(text)
    return tmp_path


def test_runner_on_a_fake_test_file(fake):
    out = fake / "out" / "report.json"
    env = _env(PYCUDA_COMPAT_ASSUME_GPU="1", PYTHONPATH=str(fake / "site"))
    env.pop("COMPAT_OUT", None)
    p = subprocess.run(
        [
            sys.executable,
            os.path.join(ROOT, "tools", "pycuda_compat.py"),
            "--test-dir",
            str(fake / "tests"),
            "--files",
            "test_fake.py,test_blas.py",
            "--test-timeout",
            "2",
            "--out",
            str(out),
            "--work",
            str(fake / "work"),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert p.returncode == 0, p.stdout + p.stderr
    rep = json.loads(out.read_text())
    fakef = rep["files"]["test_fake.py"]
    # test_param[2], test_setup_error, test_slow fail in both; test_driver_name on pygpu
    assert fakef["pycuda"]["counts"] == {"passed": 4, "failed": 3, "skipped": 2}
    assert fakef["pygpu"]["counts"] == {"passed": 3, "failed": 4, "skipped": 2}
    t = fakef["pygpu"]["tests"]
    assert t["test_fake.py::test_slow"]["message"] == (
        "Failed: timed out after 2 s (pycuda_compat's per-test limit)"
    )
    assert t["test_fake.py::test_setup_error"]["message"] == "RuntimeError: fixture broke"
    assert t["test_fake.py::test_skip"]["outcome"] == "skipped"
    assert t["test_fake.py::test_xfail"]["outcome"] == "skipped"
    assert t["test_fake.py::test_after_slow"]["outcome"] == "passed"
    blas = rep["files"]["test_blas.py"]
    assert blas["pycuda"]["collect_error"].startswith("ModuleNotFoundError")
    assert blas["pygpu"]["collect_error"] == (
        "ModuleNotFoundError: No module named 'pycuda.blas': the pycuda -> pygpu alias maps "
        "it to 'pygpu.blas', which pygpu does not have"
    )
    assert rep["gaps"] == [
        {
            "test": "test_fake.py::test_driver_name",
            "pygpu": "failed",
            "message": "AssertionError: assert 'pygpu.driver' == 'pycuda.driver'",
        }
    ]
    assert rep["wins"] == []
    md = (fake / "out" / "report.md").read_text()
    assert "| test_fake.py | 4 / 3 / 2 | 3 / 4 / 2 | 1 | 0 |" in md
    assert "| `test_fake.py::test_driver_name` | failed |" in md
    assert "| test_fake.py | 4 / 3 / 2 | 3 / 4 / 2 | 1 | 0 |" in p.stdout


def test_runner_kills_a_hung_test_and_goes_on(tmp_path):
    (tmp_path / "test_hang.py").write_text(
        textwrap.dedent('''
        import signal, time
        def test_first():
            pass
        def test_hang():
            signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGALRM])   # deaf to the limit
            time.sleep(120)
        def test_last():
            pass
    ''')
    )
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    tests = compat.run_file(
        "pycuda", str(tmp_path), "test_hang.py", _env(PYTHONPATH=""), test_timeout=1, hang_grace=2
    )
    assert {k: v["outcome"] for k, v in tests.items()} == {
        "test_hang.py::test_first": "passed",
        "test_hang.py::test_hang": "failed",
        "test_hang.py::test_last": "passed",
    }
    assert tests["test_hang.py::test_hang"]["message"] == "hung: killed after 3 s without progress"


def test_runner_survives_a_crashing_test(tmp_path):
    (tmp_path / "test_crash.py").write_text(
        textwrap.dedent('''
        import os
        def test_first():
            pass
        def test_crash():
            os.abort()                      # as a segfault in a driver call would
        def test_first_b():                 # not left out with test_first on the resume
            pass
        def test_last():
            pass
    ''')
    )
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    tests = compat.run_file(
        "pycuda", str(tmp_path), "test_crash.py", _env(PYTHONPATH=""), test_timeout=10
    )
    assert {k: v["outcome"] for k, v in tests.items()} == {
        "test_crash.py::test_first": "passed",
        "test_crash.py::test_crash": "failed",
        "test_crash.py::test_first_b": "passed",
        "test_crash.py::test_last": "passed",
    }
    assert tests["test_crash.py::test_crash"]["message"] == (
        "crashed: the test process died (exit status -6)"
    )


def test_runner_without_gpu_exits_0():
    if compat.gpu_reason() is None:
        pytest.skip("this machine has a GPU: the runner would run")
    env = _env()
    env.pop("PYCUDA_COMPAT_ASSUME_GPU", None)
    p = subprocess.run(
        [sys.executable, os.path.join(ROOT, "tools", "pycuda_compat.py")],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert p.returncode == 0
    assert p.stdout.startswith("pycuda-compat: not run: this machine has no usable GPU (")
    assert "run it on a CUDA machine" in p.stdout


def test_outcomes_fold_the_phases():
    e = [
        {"nodeid": "a", "when": "start"},
        {"nodeid": "a", "when": "setup", "outcome": "passed", "duration": 0.5},
        {"nodeid": "a", "when": "call", "outcome": "passed", "duration": 1.0},
        {
            "nodeid": "a",
            "when": "teardown",
            "outcome": "failed",
            "duration": 0.25,
            "message": "teardown broke",
        },
        {"nodeid": "b", "when": "start"},
        {"nodeid": "b", "when": "setup", "outcome": "skipped", "message": "no"},
        {"nodeid": "c", "when": "start"},
        {"nodeid": "c", "when": "setup", "outcome": "passed"},
        {"nodeid": "d", "when": "start"},
        {"nodeid": "d", "when": "setup", "outcome": "passed"},
        {"nodeid": "d", "when": "call", "outcome": "skipped", "xfail": True},
    ]
    t = compat.outcomes(e)
    assert t["a"] == {"outcome": "failed", "message": "teardown broke", "duration": 1.75}
    assert t["b"]["outcome"] == "skipped" and t["b"]["message"] == "no"
    assert t["c"] == {
        "outcome": "failed",
        "duration": 0.0,
        "message": "did not finish (the process died or hung)",
    }
    assert t["d"]["outcome"] == "skipped" and t["d"]["message"] == "xfail"
    assert compat.counts(t) == {"passed": 0, "failed": 2, "skipped": 2}


def test_sdist_url_from_the_json_index():
    index = {
        "files": [
            {"filename": "pycuda-2025.1.tar.gz", "url": "https://x/pycuda-2025.1.tar.gz"},
            {"filename": "pycuda-2026.1.tar.gz", "url": "https://x/old", "yanked": "bad"},
            {"filename": "pycuda-2026.1.tar.gz", "url": "https://x/pycuda-2026.1.tar.gz"},
            {"filename": "pycuda-2026.1-cp312-cp312-win_amd64.whl", "url": "https://x/w"},
        ]
    }
    assert compat.sdist_url(index, "2026.1") == "https://x/pycuda-2026.1.tar.gz"
    with pytest.raises(compat.CompatError, match=r"^PyPI's index lists no pycuda-9\.9\.tar\.gz$"):
        compat.sdist_url(index, "9.9")


def test_find_sdist(tmp_path):
    with pytest.raises(compat.CompatError, match=r"^no such sdist: '/no/such\.tar\.gz'$"):
        compat.find_sdist("/no/such.tar.gz")
    with pytest.raises(compat.CompatError, match=r"^no PyCUDA sdist \(give PYCUDA_SDIST="):
        compat.find_sdist(None, "9.9", str(tmp_path), download=False)
    cached = tmp_path / "pycuda-9.9.tar.gz"
    cached.write_bytes(b"")
    assert compat.find_sdist(None, "9.9", str(tmp_path), download=False) == str(cached)


def _tar(path, members):
    with tarfile.open(path, "w:gz") as tf:
        for name, data in members:
            if data is None:
                ti = tarfile.TarInfo(name)
                ti.type = tarfile.SYMTYPE
                ti.linkname = "/etc/passwd"
                tf.addfile(ti)
            else:
                ti = tarfile.TarInfo(name)
                ti.size = len(data)
                tf.addfile(ti, io.BytesIO(data))


def test_unpack_tests_takes_only_test_files(tmp_path):
    sd = tmp_path / "pycuda-9.9.tar.gz"
    _tar(
        sd,
        [
            ("pycuda-9.9/test/test_a.py", b"A"),
            ("pycuda-9.9/test/test_b.py", b"B"),
            ("pycuda-9.9/test/undistributed/x.py", b"X"),
            ("pycuda-9.9/setup.py", b"S"),
            ("pycuda-9.9/test/../../evil.py", b"E"),
            ("pycuda-9.9/test/link.py", None),
            ("pycuda-9.9/test/.hidden", b"H"),
        ],
    )
    dest = tmp_path / "dest"
    dest.mkdir()
    assert compat.unpack_tests(str(sd), str(dest)) == ["test_a.py", "test_b.py"]
    assert sorted(os.listdir(dest)) == ["test_a.py", "test_b.py"]
    assert (dest / "test_b.py").read_bytes() == b"B"
    assert not (tmp_path / "evil.py").exists()
    empty = tmp_path / "empty.tar.gz"
    _tar(empty, [("pycuda-9.9/setup.py", b"S")])
    with pytest.raises(compat.CompatError, match=r"has no test/ folder$"):
        compat.unpack_tests(str(empty), str(dest))
    (tmp_path / "junk.tar.gz").write_bytes(b"not a tar")
    with pytest.raises(compat.CompatError, match=r"cannot read .*junk\.tar\.gz' as a tar archive"):
        compat.unpack_tests(str(tmp_path / "junk.tar.gz"), str(dest))


def test_out_paths():
    assert compat.out_paths("r/x.json") == ("r/x.json", "r/x.md")
    assert compat.out_paths("r/x.md") == ("r/x.json", "r/x.md")
    assert compat.out_paths("r") == (
        os.path.join("r", "pycuda-compat.json"),
        os.path.join("r", "pycuda-compat.md"),
    )


def test_runner_baseline_fills_pycuda(fake, tmp_path):
    """--impl pygpu with --baseline: PyCUDA's column from an earlier report."""
    base = {
        "meta": {"date": "2026-11-22"},
        "files": {
            "test_fake.py": {
                "pycuda": {
                    "tests": {
                        "test_fake.py::test_both": {
                            "outcome": "passed",
                            "message": "",
                            "duration": 0.1,
                        },
                        "test_fake.py::test_skip": {
                            "outcome": "passed",
                            "message": "",
                            "duration": 0.1,
                        },
                    }
                }
            }
        },
    }
    bp = tmp_path / "base.json"
    bp.write_text(json.dumps(base))
    out = tmp_path / "o.json"
    p = subprocess.run(
        [
            sys.executable,
            os.path.join(ROOT, "tools", "pycuda_compat.py"),
            "--impl",
            "pygpu",
            "--test-dir",
            str(fake / "tests"),
            "--files",
            "test_fake.py",
            "--test-timeout",
            "1",
            "--baseline",
            str(bp),
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        env=_env(PYCUDA_COMPAT_ASSUME_GPU="1"),
    )
    assert p.returncode == 0, p.stdout + p.stderr
    rep = json.loads(out.read_text())
    assert rep["gaps"] == [
        {
            "test": "test_fake.py::test_skip",
            "pygpu": "skipped",
            "message": "Skipped: nothing to see",
        }
    ]
    assert rep["meta"]["notes"] == ["PyCUDA's results are from %s (2026-11-22)" % bp]


# ---- benchmarks/arrays.py's harness, against a NumPy-backed fake of
# PyCUDA's array API (the figures mean nothing; what is tested is that every
# row runs, checks its result and reports what it cannot do) ----

FAKE_ARRAYS = {
    "__init__.py": "",
    "autoinit.py": "",
    "driver.py": "class Context:\n    @staticmethod\n    def synchronize():\n        pass\n",
    "gpuarray.py": textwrap.dedent('''
        import numpy as np
        class A:
            def __init__(self, h):
                self.h = h
            def get(self):
                return self.h.copy()
            def __add__(self, o):
                return A(self.h + o.h)
        def to_gpu(h):
            return A(np.array(h))
        def empty_like(a):
            return A(np.empty_like(a.h))
        def sum(a):
            return A(np.asarray(a.h.sum(dtype=np.float64)))
    '''),
    "scan.py": textwrap.dedent('''
        import numpy as np
        class InclusiveScanKernel:
            def __init__(self, dtype, expr):
                assert expr == "a+b"
            def __call__(self, x, out):
                out.h[:] = np.cumsum(x.h)
                return out
    '''),
    "elementwise.py": textwrap.dedent('''
        class ElementwiseKernel:
            def __init__(self, args, op, name):
                assert op == "z[i] = a * x[i] + y[i]"
            def __call__(self, a, x, y, z):
                z.h[:] = a * x.h + y.h
    '''),
    "curandom.py": textwrap.dedent('''
        import numpy as np
        from .gpuarray import A
        class XORWOWRandomNumberGenerator:
            def gen_normal(self, shape, dtype):
                return A(np.random.default_rng().standard_normal(shape, dtype=dtype))
    '''),
    # no cumath: its row must say "not available"
}


def _load_bench():
    spec = importlib.util.spec_from_file_location(
        "bench_arrays", os.path.join(ROOT, "benchmarks", "arrays.py")
    )
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_bench_arrays_harness_on_a_fake(tmp_path, monkeypatch):
    pkg = tmp_path / "fakearrays"
    pkg.mkdir()
    for name, text in FAKE_ARRAYS.items():
        (pkg / name).write_text(text)
    monkeypatch.syspath_prepend(str(tmp_path))
    bench = _load_bench()
    monkeypatch.setattr(bench, "N_ADD", 1000)
    monkeypatch.setattr(bench, "N_BIG", 20000)
    monkeypatch.setattr(bench, "TRANSFER_BYTES", 1 << 16)
    res = bench.measure("fakearrays", reps=3, ops=10)
    assert sorted(res) == sorted(k for k, *_ in bench.ROWS)
    assert res["sin_us"] == (
        "not available: fakearrays.cumath: No module named 'fakearrays.cumath'"
    )
    for k, v in res.items():
        if k != "sin_us":
            assert isinstance(v, float) and v > 0, (k, v)
    text, notes = bench.table({"pygpu": res}, ["pygpu"])
    assert "| cumath.sin, 10M float32" in text and "not available" in text
    assert notes == ["pygpu, cumath.sin, 10M float32: " + res["sin_us"]]


def test_bench_arrays_checks_results():
    bench = _load_bench()
    rng = __import__("numpy").random.default_rng()
    np_ = __import__("numpy")
    x = (rng.random(1000) < 0.1).astype(np_.float32)
    bench.check_scan(np_.cumsum(x), x)
    bad = np_.cumsum(x)
    bad[500] += 1
    with pytest.raises(
        bench.WrongResult, match=r"^inclusive scan: 1 elements differ; first at 500"
    ):
        bench.check_scan(bad, x)
    z = rng.standard_normal(50000)
    bench.check_normal(np_.concatenate([z, -z]), "gen_normal")
    with pytest.raises(bench.WrongResult, match=r"^gen_normal: standard deviation (1\.9|2\.0)"):
        bench.check_normal(2 * np_.concatenate([z, -z]), "gen_normal")  # mean exactly 0
    with pytest.raises(bench.WrongResult, match=r"^sum .* relative error over 1e-5$"):
        bench.check_sum(np_.float32(1.0), x + 1)
    with pytest.raises(bench.WrongResult, match=r"^sin: 1 elements off \(rtol"):
        y = np_.sin(x)
        z = y.copy()
        z[3] += 0.5
        bench.check_close(z, y, 1e-5, 2e-6, "sin")


def test_bench_arrays_without_gpu_exits_0():
    if compat.gpu_reason() is None:
        pytest.skip("this machine has a GPU")
    p = subprocess.run(
        [sys.executable, os.path.join(ROOT, "benchmarks", "arrays.py")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 0
    assert p.stdout.startswith(
        "benchmarks/arrays.py: nothing measured: this machine has no usable GPU ("
    )
