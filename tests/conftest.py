"""Markers (see docs/guarantees.md):

gpu      needs a real GPU: a kernel runs, or real timing or placement matters.
driver   needs a CUDA driver but runs no kernel: runs on a GPU, and against
         the driver stand-in (tests/standin/) where there is none.
standin  needs the stand-in itself (failure injection, recorded launches).

Where what a test needs is missing it skips with a one-line reason; with
PYGPU_REQUIRE_GPU=1 a gpu or driver test fails instead, unless the run is
against the stand-in (make test's second pass), which runs no kernels.
"""
import os

import pytest

import fakecuda

STANDIN = fakecuda.active()

_gpu = None


def gpu_reason():
    """None if a CUDA GPU is usable, else why not (one line)."""
    global _gpu
    if _gpu is None:
        try:
            import pygpu.driver as cuda
            cuda.init()
            n = cuda.Device.count()
            _gpu = "" if n > 0 else "no CUDA device is visible"
        except Exception as e:  # CudaUnavailableError, mostly
            _gpu = str(e).splitlines()[0]
    return _gpu or None


def pytest_runtest_setup(item):
    # the closest of the three markers decides (a test's own over its module's)
    kind = next((m.name for m in item.iter_markers() if m.name in ("gpu", "driver", "standin")),
                None)
    if kind is None:
        return
    if kind == "standin":
        if not STANDIN:
            pytest.skip("runs against the driver stand-in (make test's second pass)")
        return
    if STANDIN:
        if kind == "gpu":
            pytest.skip("needs a real GPU: the driver stand-in runs no kernels")
        return
    reason = gpu_reason()
    if reason is None:
        return
    if os.environ.get("PYGPU_REQUIRE_GPU", "") not in ("", "0"):
        pytest.fail("PYGPU_REQUIRE_GPU=1 but no GPU: " + reason, pytrace=False)
    pytest.skip("no GPU: " + reason)


@pytest.fixture
def rng():
    import numpy as np
    return np.random.default_rng()


@pytest.fixture
def ctx():
    """The current (primary) context, after a synchronize on exit."""
    import pygpu.driver as cuda
    cuda.init()
    dev = cuda.Device(int(os.environ.get("PYGPU_DEVICE", "0")))
    c = dev.retain_primary_context()
    c.push()
    try:
        yield c
        cuda.Context.synchronize()
    finally:
        cuda.Context.pop()


@pytest.fixture
def tmp_cache(tmp_path, monkeypatch):
    """A private compile cache directory, memory cache emptied."""
    from pygpu import compiler
    d = tmp_path / "cache"
    monkeypatch.setenv("PYGPU_CACHE_DIR", str(d))
    compiler.clear_cache(disk=False)
    yield d
    compiler.clear_cache(disk=False)


@pytest.fixture
def standin():
    """The stand-in's control side; checks that the test used no dead handle
    and left no failure injection pending."""
    s = fakecuda.StandIn()
    stale = s.stale()
    yield s
    s.cancel()
    s.deinit(False)
    assert s.stale() == stale, "a handle was used after it was destroyed"
