"""GPU tests carry @pytest.mark.gpu: they skip with a one-line reason where no
GPU is usable, and fail instead when PYGPU_REQUIRE_GPU=1."""
import os

import pytest

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
    if item.get_closest_marker("gpu") is None:
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
