"""pygpu's pytest plugin (pygpu.testing), exercised from the outside: small
user projects run by pytester in their own pytest processes, which load the
plugin through its pytest11 entry point as a user's would.

Fault isolation is checked against the driver stand-in's injected sticky
error (CPU-only) and, marked gpu, against a real illegal-address kernel."""

import os

import pytest

from pygpu.testing import standin

pytest_plugins = ["pytester"]

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(scope="session")
def standin_dir():
    """Build the stand-in once for every inner run (pytester points HOME, and
    so the default cache directory, at a fresh folder each time)."""
    d = os.path.join(ROOT, "build", "standin-user")
    old = os.environ.get("PYGPU_STANDIN_DIR")
    os.environ["PYGPU_STANDIN_DIR"] = d
    try:
        standin.build()
    finally:
        if old is None:
            del os.environ["PYGPU_STANDIN_DIR"]
        else:
            os.environ["PYGPU_STANDIN_DIR"] = old
    return d


@pytest.fixture
def project(pytester, monkeypatch, standin_dir, tmp_path, request):
    """A user's project: the environment of a machine without a GPU (also
    on one: libcuda is pointed at nothing), except for gpu-marked tests."""
    monkeypatch.setenv("PYGPU_STANDIN_DIR", standin_dir)
    for var in ("PYGPU_LIBCUDA", "PYGPU_REQUIRE_GPU", "PYTEST_ADDOPTS", "PYTEST_XDIST_WORKER"):
        monkeypatch.delenv(var, raising=False)
    if request.node.get_closest_marker("gpu") is None:
        monkeypatch.setenv("PYGPU_LIBCUDA", str(tmp_path / "no-gpu" / "libcuda.so.1"))
    monkeypatch.setenv("PYGPU_CACHE_DIR", str(pytester.path / "cache"))
    # a project that uses pygpu's plain marker names says so (docs/pytest.md)
    pytester.makeini("[pytest]\npygpu_markers = true\n")
    return pytester


def run(pytester, *args):
    r = pytester.runpytest_subprocess("-p", "no:cacheprovider", *args)
    return r, r.stdout.str()


MARKERS = """
import pytest

def test_cpu():
    assert 1 + 1 == 2

@pytest.mark.gpu
def test_needs_gpu():
    raise AssertionError("ran without a GPU")

@pytest.mark.driver
def test_needs_driver(cuda_context, cuda_stream):
    import pygpu.driver as cuda
    import numpy as np
    x = np.random.default_rng().standard_normal(1000).astype(np.float32)
    d = cuda.to_device(x)
    out = np.empty_like(x)
    cuda.memcpy_dtoh_async(out, d, cuda_stream)
    cuda_stream.synchronize()
    np.testing.assert_array_equal(out, x)
    assert cuda_context.device == cuda.Context.get_device()

@pytest.mark.standin
def test_needs_standin(cuda_standin):
    assert cuda_standin.live()["contexts"] >= 0
"""


def test_markers_skip_without_a_gpu(project):
    project.makepyfile(test_user=MARKERS)
    r, out = run(project, "-rs")
    r.assert_outcomes(passed=1, skipped=3)
    assert "no GPU: " in out
    assert "runs against the driver stand-in (pytest --pygpu-standin)" in out


def test_require_gpu_turns_the_skip_into_a_failure(project, monkeypatch):
    project.makepyfile(test_user=MARKERS)
    r, out = run(project, "--require-gpu")
    r.assert_outcomes(passed=1, errors=2, skipped=1)
    assert "a GPU is required (--require-gpu or PYGPU_REQUIRE_GPU=1) but there is none" in out
    monkeypatch.setenv("PYGPU_REQUIRE_GPU", "1")
    r, out = run(project)
    r.assert_outcomes(passed=1, errors=2, skipped=1)


def test_standin_option_runs_driver_tests_without_a_gpu(project):
    project.makepyfile(test_user=MARKERS)
    r, out = run(project, "--pygpu-standin", "-rs")
    r.assert_outcomes(passed=3, skipped=1)
    assert "needs a real GPU: the driver stand-in runs no kernels" in out
    assert "pygpu: against the driver stand-in" in out


def test_plugin_fixtures_need_a_driver(project):
    project.makepyfile(
        test_user="""
        def test_device(cuda_device):
            pass
    """
    )
    r, out = run(project, "-rs")
    r.assert_outcomes(skipped=1)
    assert "no GPU: " in out


LEAKS = """
import pytest
import pygpu.driver as cuda

kept = []

@pytest.mark.leak_check
def test_leaks_device_memory(cuda_context):
    kept.append(cuda.mem_alloc(1024))

def test_leaks_a_stream(cuda_context, cuda_leak_check):
    kept.append(cuda.Stream())

@pytest.mark.leak_check
def test_frees_what_it_allocates(cuda_context):
    a = cuda.mem_alloc(1024)
    s = cuda.Stream()
    a.free()
    del a, s

def test_not_checked(cuda_context):
    kept.append(cuda.mem_alloc(64))
"""


def test_leak_check(project):
    project.makepyfile(test_user=LEAKS)
    r, out = run(project, "--pygpu-standin")
    r.assert_outcomes(passed=2, failed=2)
    assert (
        "pygpu leak check: the test left handles alive (DeviceAllocation: 1 more, "
        "driver device: 1 more)" in out
    )
    assert (
        "pygpu leak check: the test left handles alive (Stream: 1 more, driver streams: "
        "1 more)" in out
    )
    r, out = run(project, "--pygpu-standin", "--pygpu-leak-check")
    r.assert_outcomes(passed=1, failed=3)


def fault_project(pytester, kernel_fault=False):
    """Tests before, at and after a sticky fault; each records its pid."""
    if kernel_fault:
        fault = (
            '    from pygpu.compiler import SourceModule\n'
            '    f = SourceModule("__global__ void bad(int *p) { p[2] = 1; }").get_function("bad")\n'
            '    f(None, block=(1, 1, 1))\n'
            '    cuda.Context.synchronize()\n'
        )
        fixtures = "cuda_context"
    else:
        fault = (
            '    cuda_standin.fail("cuCtxSynchronize", 1, 700, sticky=True)\n'
            '    cuda.Context.synchronize()\n'
        )
        fixtures = "cuda_context, cuda_standin"
    pytester.makepyfile(test_fault=FAULT_TEMPLATE % (fixtures, fault))


FAULT_TEMPLATE = """
import os
import numpy as np
import pytest
import pygpu.driver as cuda

def record(name):
    with open(os.path.join(os.path.dirname(__file__), name + ".pid"), "w") as f:
        f.write(str(os.getpid()))

def roundtrip():
    x = np.random.default_rng().standard_normal(4096).astype(np.float32)
    d = cuda.to_device(x)
    np.testing.assert_array_equal(cuda.from_device_like(d, x), x)

def test_1_before(cuda_context):
    record("before")
    roundtrip()

def test_2_fault(%s):
    record("fault")
%s
def test_3_after(cuda_context):
    record("after")
    roundtrip()

def test_4_after(cuda_context):
    record("after2")
    roundtrip()
"""


def pids(pytester):
    return {p.stem: int(p.read_text()) for p in pytester.path.glob("*.pid")}


def check_isolated(r, out, pytester):
    r.assert_outcomes(passed=3, failed=1)
    assert "LaunchError" in out and "CUDA_ERROR_ILLEGAL_ADDRESS" in out
    assert (
        "test_fault.py::test_2_fault FAILED" in out or "FAILED test_fault.py::test_2_fault" in out
    )
    p = pids(pytester)
    assert p["before"] == p["fault"]
    assert p["after"] != p["fault"] and p["after2"] == p["after"]
    assert "pygpu: 1 sticky CUDA fault(s); the session went on in 1 fresh process(es)" in out


def test_fault_isolation_against_the_standin(project):
    fault_project(project)
    r, out = run(project, "--pygpu-standin", "-v")
    check_isolated(r, out, project)
    assert "test_fault.py::test_3_after PASSED" in out


def test_without_isolation_the_fault_spreads(project):
    fault_project(project)
    r, out = run(project, "--pygpu-standin", "--pygpu-no-isolate")
    r.assert_outcomes(passed=1, failed=3, errors=3)
    assert len(set(pids(project).values())) == 1


def test_fault_isolation_with_xdist(project):
    pytest.importorskip("xdist")
    fault_project(project)
    r, out = run(project, "--pygpu-standin", "-n", "1")
    r.assert_outcomes(passed=3, failed=1)
    p = pids(project)
    assert p["after"] != p["fault"] and p["after2"] == p["after"]
    # two workers: the faulting one hands its remaining tests to a fresh process
    for f in project.path.glob("*.pid"):
        f.unlink()
    r, out = run(project, "--pygpu-standin", "-n", "2")
    r.assert_outcomes(passed=3, failed=1)


def test_a_passing_test_that_leaves_a_fault_is_an_error(project):
    project.makepyfile(
        test_fault="""
        import pytest
        import pygpu.driver as cuda

        def test_swallows(cuda_context, cuda_standin):
            cuda_standin.fail("cuCtxSynchronize", 1, 719, sticky=True)
            with pytest.raises(cuda.LaunchError):
                cuda.Context.synchronize()

        def test_after(cuda_context):
            cuda.mem_alloc(256).free()
    """
    )
    r, out = run(project, "--pygpu-standin")
    r.assert_outcomes(passed=2, errors=1)
    assert (
        "pygpu: the test left its CUDA context with a sticky fault, "
        "CUDA_ERROR_LAUNCH_FAILED (the driver stand-in's injected sticky error)"
    ) in out
    project.makepyfile(
        test_fault="""
        import pytest
        import pygpu.driver as cuda

        @pytest.mark.sticky_fault
        def test_on_purpose(cuda_context, cuda_standin):
            cuda_standin.fail("cuMemAlloc", 1, 700, sticky=True)
            with pytest.raises(cuda.LaunchError, match="CUDA_ERROR_ILLEGAL_ADDRESS"):
                cuda.mem_alloc(256)

        def test_after(cuda_context):
            cuda.mem_alloc(256).free()
    """
    )
    r, out = run(project, "--pygpu-standin")
    r.assert_outcomes(passed=2)


def test_a_crashing_test_in_the_fresh_process_fails_alone(project):
    project.makepyfile(
        test_fault="""
        import os
        import pygpu.driver as cuda

        def test_fault(cuda_context, cuda_standin):
            cuda_standin.fail("cuCtxSynchronize", 1, 700, sticky=True)
            cuda.Context.synchronize()

        def test_dies():
            os._exit(7)

        def test_after(cuda_context):
            cuda.mem_alloc(256).free()
    """
    )
    r, out = run(project, "--pygpu-standin")
    r.assert_outcomes(passed=1, failed=2)
    assert "the fresh process running this test died (exit status 7)" in out


@pytest.mark.gpu
def test_fault_isolation_on_a_real_illegal_address(project):
    fault_project(project, kernel_fault=True)
    r, out = run(project, "--require-gpu", "-v")
    check_isolated(r, out, project)


def _junit_cases(path):
    import xml.etree.ElementTree as ET

    root = ET.parse(str(path)).getroot()
    cases = {}
    for tc in root.iter("testcase"):
        outcome = (
            "failed"
            if tc.find("failure") is not None or tc.find("error") is not None
            else "skipped"
            if tc.find("skipped") is not None
            else "passed"
        )
        cases[tc.get("name")] = outcome
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    totals = {k: sum(int(s.get(k, 0)) for s in suites) for k in ("tests", "failures", "errors")}
    return cases, totals


@pytest.mark.parametrize("form", ["--junitxml=%s", "--junit-xml=%s", "--junitxml %s", "addopts"])
def test_fault_isolation_keeps_the_whole_session_in_junitxml(project, form):
    """Issue 25 defect 15: the fresh process started after a fault wrote the
    same --junitxml file, which then listed only the tests after the fault."""
    fault_project(project)
    report = project.path / "reports" / "junit.xml"
    if form == "addopts":
        project.makeini("[pytest]\npygpu_markers = true\naddopts = --junitxml=%s\n" % report)
        args = []
    else:
        args = (form % report).split()
    r, out = run(project, "--pygpu-standin", *args)
    r.assert_outcomes(passed=3, failed=1)
    cases, totals = _junit_cases(report)
    assert cases == {
        "test_1_before": "passed",
        "test_2_fault": "failed",
        "test_3_after": "passed",
        "test_4_after": "passed",
    }
    assert totals == {"tests": 4, "failures": 1, "errors": 0}
    p = pids(project)
    assert p["after"] != p["fault"]  # the tests after the fault ran elsewhere


def test_fault_isolation_keeps_the_whole_session_in_junitxml_with_xdist(project):
    pytest.importorskip("xdist")
    fault_project(project)
    report = project.path / "junit.xml"
    r, out = run(project, "--pygpu-standin", "-n", "1", "--junitxml=%s" % report)
    r.assert_outcomes(passed=3, failed=1)
    cases, totals = _junit_cases(report)
    assert sorted(cases) == ["test_1_before", "test_2_fault", "test_3_after", "test_4_after"]
    assert totals["tests"] == 4 and totals["failures"] == 1


# ---- the plugin is lazy (issue 26, item 8) ----

TRIVIAL = """
import sys

def test_trivial():
    assert 1 + 1 == 2

def test_report():
    loaded = [m for m in ("pygpu._driver", "pygpu.driver", "numpy") if m in sys.modules]
    print("PLUGIN=%s LOADED=%s" % ("pygpu.testing.plugin" in sys.modules, ",".join(loaded)))
"""


def _loaded(out):
    import re

    m = re.search(r"PLUGIN=(\w+) LOADED=([\w.,]*)", out)
    return m.groups() if m else None


def test_a_plain_pytest_run_loads_neither_the_extension_nor_numpy(project):
    project.makepyfile(test_trivial=TRIVIAL)
    r, out = run(project, "-s")
    r.assert_outcomes(passed=2)
    # the plugin is loaded (its entry point), yet nothing heavy came with it;
    # other plugins installed beside it may load NumPy themselves (jaxtyping
    # does, on the GPU machines): what pygpu's adds is what counts
    plugin, loaded = _loaded(out)
    assert plugin == "True", out
    if "numpy" in loaded.split(","):
        _, without = _loaded(run(project, "-s", "-p", "no:pygpu")[1])
        assert "numpy" in without.split(","), out
        loaded = ",".join(m for m in loaded.split(",") if m != "numpy")
    assert loaded == "", out


def test_a_marker_or_fixture_loads_pygpu_on_first_use(project):
    project.makepyfile(
        test_uses=TRIVIAL.replace(
            "def test_trivial():", "import pytest\n\n@pytest.mark.gpu\ndef test_trivial():"
        )
    )
    r, out = run(project, "-s")
    r.assert_outcomes(passed=1, skipped=1)
    assert _loaded(out) == ("True", "pygpu._driver,pygpu.driver,numpy"), out


# ---- the plugin minds its own business (issue 33) ----

UNRELATED = """
import sys

import pytest

@pytest.mark.gpu
def test_my_own_gpu_marker():
    # the project's own meaning: pygpu neither skips it nor loads CUDA
    assert "pygpu._driver" not in sys.modules

@pytest.mark.driver
@pytest.mark.leak_check
@pytest.mark.sticky_fault
def test_my_other_markers():
    assert "pygpu._driver" not in sys.modules
"""


@pytest.fixture
def unrelated(project):
    """A project that has not opted in: no pygpu_markers in its ini."""
    project.makeini("[pytest]\n")
    project.makepyfile(test_mine=UNRELATED)
    return project


def test_an_unrelated_projects_gpu_marker_is_left_alone(unrelated, monkeypatch):
    r, out = run(unrelated, "-rs")
    r.assert_outcomes(passed=2)
    r, out = run(unrelated, "--require-gpu")
    r.assert_outcomes(passed=2)
    monkeypatch.setenv("PYGPU_REQUIRE_GPU", "1")
    r, out = run(unrelated)
    r.assert_outcomes(passed=2)


def test_an_unrelated_project_sees_no_plain_markers_registered(unrelated):
    # --strict-markers answers as if pygpu were not installed
    r, out = run(unrelated, "--strict-markers")
    r_off, out_off = run(unrelated, "--strict-markers", "-p", "no:pygpu")
    assert r.ret == r_off.ret != 0
    assert "'gpu' not found in `markers` configuration option" in out
    r, out = run(unrelated, "--markers")
    assert "@pytest.mark.pygpu_gpu:" in out
    assert "@pytest.mark.gpu:" not in out
    assert "@pytest.mark.leak_check:" not in out


def test_namespaced_markers_work_without_opting_in(unrelated):
    unrelated.makepyfile(
        test_ns="""
import pytest

@pytest.mark.pygpu_gpu
def test_ns_gpu():
    raise AssertionError("ran without a GPU")

@pytest.mark.pygpu_standin
def test_ns_standin():
    raise AssertionError("ran without the stand-in")
"""
    )
    r, out = run(unrelated, "-rs", "test_ns.py")
    r.assert_outcomes(skipped=2)
    assert "no GPU: " in out
    r, out = run(unrelated, "test_ns.py", "--require-gpu")
    r.assert_outcomes(errors=1, skipped=1)
    assert "a GPU is required" in out


def test_opting_in_on_the_command_line(unrelated):
    r, out = run(unrelated, "-rs", "-o", "pygpu_markers=true")
    r.assert_outcomes(skipped=2)  # gpu and driver: no driver here
    assert "no GPU: " in out
