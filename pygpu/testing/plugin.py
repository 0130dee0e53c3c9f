"""pygpu's pytest plugin, registered through the ``pytest11`` entry point
(``-p no:pygpu`` turns it off).  docs/pytest.md is the user's guide.

The plugin minds its own business: loaded in every pytest run of an
environment where pygpu is installed, it changes nothing in a project that
has not opted in.  Its markers are namespaced (pygpu_gpu, pygpu_driver, ...),
and the plain names below (gpu, driver, ...) are pygpu's only in a project
that says so: ``pygpu_markers = true`` in its pytest configuration
(pytest.ini, [tool.pytest.ini_options], setup.cfg, tox.ini) or ``-o
pygpu_markers=true``.  Elsewhere a test's own @pytest.mark.gpu means what
that project means by it.

Markers (each also as pygpu_<name>)
    gpu         needs a real GPU (runs kernels): skipped with a one-line
                reason where there is none, a failure with --require-gpu or
                PYGPU_REQUIRE_GPU=1; skipped against the driver stand-in.
    driver      needs a CUDA driver but runs no kernel: runs on a GPU and
                against the stand-in.
    standin     needs the stand-in itself (failure injection, records).
    leak_check  fails the test if it leaves pygpu handles (device or
                page-locked memory, modules, streams, events, functions)
                alive, or, against the stand-in, driver handles.
    sticky_fault  the test provokes a sticky fault on purpose (see below).

Fixtures: cuda_device, cuda_context, cuda_stream, cuda_standin,
cuda_leak_check.

Options: --require-gpu, --pygpu-standin (build the stand-in and run against
it), --pygpu-leak-check (every test), --pygpu-no-isolate.

Fault isolation (pygpu.testing._isolate): after each test that used the
driver, the plugin asks whether the process's context suffered a sticky
fault (CUDA_ERROR_ILLEGAL_ADDRESS and kin).  If so the test fails alone and
every later test runs in a fresh pytest process that this one drives and
whose reports it relays, with or without pytest-xdist.
"""

import os
import sys

import pytest

from pygpu.testing import _isolate
from pygpu.testing._markers import (
    _MARKERS,
    _PREFIX,
    closest_marker,
    marker_kind,
    markers_opted_in,
)
from pygpu.testing import standin as _standin

_KINDS = ("gpu", "driver", "standin")
_gpu = None


def pytest_addoption(parser):
    parser.addini(
        "pygpu_markers",
        type="bool",
        default=False,
        help="pygpu: the plain markers gpu, driver, standin, leak_check and sticky_fault "
        "are pygpu's (without it only their pygpu_ names are)",
    )
    group = parser.getgroup("pygpu", "pygpu (CUDA) testing")
    group.addoption(
        "--require-gpu",
        action="store_true",
        default=False,
        help="a gpu/driver test without a GPU fails instead of skipping (also PYGPU_REQUIRE_GPU=1)",
    )
    group.addoption(
        "--pygpu-standin",
        action="store_true",
        default=False,
        help="build the CUDA driver stand-in (a fake libcuda) and run against "
        "it: gpu tests skip, driver and standin tests run",
    )
    group.addoption(
        "--pygpu-leak-check",
        action="store_true",
        default=False,
        help="leak-check every test, not only those marked leak_check",
    )
    group.addoption(
        "--pygpu-no-isolate",
        action="store_true",
        default=False,
        help="after a sticky CUDA fault, go on in this process (the later "
        "tests will fail) instead of a fresh one",
    )


def pytest_configure(config):
    config._pygpu_plain_markers = markers_opted_in(config)
    for line in _MARKERS.values():
        config.addinivalue_line("markers", _PREFIX + line)
        if config._pygpu_plain_markers:
            config.addinivalue_line("markers", line)
    if config.getoption("pygpu_standin") and not _standin.active():
        mod = sys.modules.get("pygpu._driver")
        if mod is not None and mod._driver_loaded():
            raise pytest.UsageError(
                "--pygpu-standin: pygpu already loaded the CUDA driver "
                "(something imported at start-up used it)"
            )
        try:
            path = _standin.build()
        except _standin.StandInBuildError as e:
            raise pytest.UsageError("--pygpu-standin: %s" % e) from None
        os.environ["PYGPU_LIBCUDA"] = path  # read when pygpu first loads libcuda
    if not config.getoption("pygpu_no_isolate"):
        config.pluginmanager.register(_isolate.Isolation(config), "pygpu-isolation")


def pytest_report_header(config):
    if _standin.active():
        return "pygpu: against the driver stand-in %s" % os.environ["PYGPU_LIBCUDA"]
    return None


def require_gpu(config=None):
    """True when a missing GPU must fail (--require-gpu, PYGPU_REQUIRE_GPU)."""
    if config is not None and config.getoption("require_gpu", False):
        return True
    return os.environ.get("PYGPU_REQUIRE_GPU", "") not in ("", "0")


def gpu_reason():
    """None if a CUDA device is usable, else why not (one line).  Asked once
    a process; loads the driver only when a test needs it."""
    global _gpu
    if _gpu is None:
        try:
            import pygpu.driver as cuda

            cuda.init()
            n = cuda.Device.count()
            _gpu = "" if n > 0 else "no CUDA device is visible"
        except Exception as e:  # CudaUnavailableError, mostly
            _gpu = (str(e).splitlines() or [type(e).__name__])[0]
    return _gpu or None


def check(kind, config=None):
    """Skip or fail the running test unless what `kind` needs is here:
    'gpu' a real GPU, 'driver' a driver (a GPU or the stand-in), 'standin'
    the stand-in."""
    on_standin = _standin.active()
    if kind == "standin":
        if not on_standin:
            pytest.skip("runs against the driver stand-in (pytest --pygpu-standin)")
        return
    if on_standin:
        if kind == "gpu":
            pytest.skip("needs a real GPU: the driver stand-in runs no kernels")
        return
    reason = gpu_reason()
    if reason is None:
        return
    if require_gpu(config):
        pytest.fail(
            "a GPU is required (--require-gpu or PYGPU_REQUIRE_GPU=1) but there is none: " + reason,
            pytrace=False,
        )
    pytest.skip("no GPU: " + reason)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    # the closest of the three markers decides (a test's own over its module's)
    kind = next(
        (k for k in (marker_kind(item.config, m.name) for m in item.iter_markers()) if k in _KINDS),
        None,
    )
    if kind is not None:
        check(kind, item.config)


# ---- fixtures ----


@pytest.fixture
def cuda_device(request):
    """The pygpu Device under test: $PYGPU_DEVICE, default 0.  Skips (or
    fails, with --require-gpu) where there is no driver."""
    check("driver", request.config)
    import pygpu.driver as cuda

    cuda.init()
    return cuda.Device(int(os.environ.get("PYGPU_DEVICE", "0")))


@pytest.fixture
def cuda_context(request, cuda_device):
    """The device's primary context, pushed for the test; synchronized and
    popped after it (no synchronize after a sticky fault: the plugin
    reports that)."""
    import pygpu.driver as cuda

    c = cuda_device.retain_primary_context()
    c.push()
    try:
        yield c
        if not _isolate.poisoned(request.config):
            cuda.Context.synchronize()
    finally:
        cuda.Context.pop()


@pytest.fixture
def cuda_stream(request, cuda_context):
    """A new stream in cuda_context, synchronized after the test."""
    import pygpu.driver as cuda

    s = cuda.Stream()
    yield s
    if not _isolate.poisoned(request.config):
        s.synchronize()


@pytest.fixture
def cuda_standin(request):
    """The driver stand-in's control side (pygpu.testing.standin.StandIn):
    failure injection, call counts, live handles, the last launch.  Skips
    unless the session runs against the stand-in.  After the test: pending
    injections are cancelled, and a handle used after its destruction is a
    failure."""
    check("standin", request.config)
    s = _standin.StandIn()
    stale = s.stale()
    yield s
    s.cancel()
    s.deinit(False)
    assert s.stale() == stale, "a handle was used after it was destroyed"


@pytest.fixture
def cuda_leak_check():
    """Request it (or mark the test leak_check) to fail the test if it leaves
    pygpu handles alive; checked around the test's call only."""
    return True


# ---- leak check ----


def _wants_leak_check(item):
    return (
        item.config.getoption("pygpu_leak_check")
        or closest_marker(item, "leak_check") is not None
        or "cuda_leak_check" in getattr(item, "fixturenames", ())
    )


def _leak_types():
    from pygpu import _driver

    return tuple(
        getattr(_driver, n)
        for n in (
            "DeviceAllocation",
            "HostAllocation",
            "Module",
            "Function",
            "Stream",
            "Event",
            "BoundLaunch",
        )
        if hasattr(_driver, n)
    )


def _cached_ids():
    """Objects that pygpu's own caches keep on purpose (SourceModule's
    module per context and binary)."""
    keep = set()
    comp = sys.modules.get("pygpu.compiler")
    for v in (getattr(comp, "_modules", {}) or {}).values() if comp else ():
        keep.add(id(v))
    return keep


def _snapshot():
    import gc

    if "pygpu._driver" not in sys.modules:
        return {}
    gc.collect()
    types = _leak_types()
    keep = _cached_ids()
    found = {}
    # some handle types are not tracked by the collector: look one step
    # down from every tracked object too (lists, dicts, frames, instances)
    for o in gc.get_objects():
        if isinstance(o, types):
            found[id(o)] = o
        for r in gc.get_referents(o):
            if isinstance(r, types):
                found[id(r)] = r
    counts = {}
    for i, o in found.items():
        if i not in keep:
            name = type(o).__name__
            counts[name] = counts.get(name, 0) + 1
    del found
    if _standin.active() and sys.modules["pygpu._driver"]._driver_loaded():
        # the block cache's blocks are memory kept for reuse, not leaks
        sys.modules["pygpu._driver"]._block_cache_trim(None, 0)
        for k, v in _standin.StandIn().live().items():
            counts["driver " + k] = v
    return counts


def _leaks(before, after):
    return [
        "%s: %d more" % (k, after[k] - before.get(k, 0))
        for k in sorted(after)
        if after[k] > before.get(k, 0)
    ]


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    if not _wants_leak_check(item):
        yield
        return
    before = _snapshot()
    outcome = yield
    if outcome.excinfo is not None:
        return  # its traceback holds the test's objects
    found = _leaks(before, _snapshot())
    if found:
        err = pytest.fail.Exception(
            "pygpu leak check: the test left handles alive (%s); free them (.free(), del, "
            "a with block) before it returns" % ", ".join(found),
            pytrace=False,
        )
        if hasattr(outcome, "force_exception"):
            outcome.force_exception(err)
        else:
            raise err
