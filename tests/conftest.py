"""The project's own test helpers.  The markers (gpu, driver, standin,
leak_check, sticky_fault), the skip-or-fail logic with --require-gpu /
PYGPU_REQUIRE_GPU=1, the CUDA fixtures, the stand-in and fault isolation
come from pygpu's pytest plugin (pygpu/testing/plugin.py, loaded through
the pytest11 entry point; docs/pytest.md), which users get too.

Here: short names for the plugin's fixtures, and what only this suite needs.
"""

import os
import sys

import pytest

sys.path.insert(
    0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "support")
)  # fakecuda, threaded, ...

import fakecuda  # noqa: E402

STANDIN = fakecuda.active()

# the suite's own compile cache (and autotune memory), kept between runs in
# build/: a run leaves the user's ~/.cache/pygpu as it was.  Set before any
# test (and the processes tests start inherit it); a PYGPU_CACHE_DIR given
# from outside wins.
SUITE_CACHE = os.path.join(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "build", "test-cache"
)
if not os.environ.get("PYGPU_CACHE_DIR"):
    os.environ["PYGPU_CACHE_DIR"] = SUITE_CACHE

if "pygpu.testing.plugin" not in sys.modules:
    # not installed with its entry point (e.g. PYTHONPATH=. pytest): load it
    pytest_plugins = ["pygpu.testing.plugin"]

from pygpu.testing.plugin import gpu_reason  # noqa: E402,F401


@pytest.fixture
def rng():
    import numpy as np

    return np.random.default_rng()


@pytest.fixture
def ctx(cuda_context):
    """The device's primary context, pushed; synchronized and popped after."""
    return cuda_context


@pytest.fixture
def standin(cuda_standin):
    """The stand-in's control side; checks no dead handle was used."""
    return cuda_standin


@pytest.fixture
def tmp_cache(tmp_path, monkeypatch):
    """A private compile cache directory, memory cache emptied."""
    from pygpu import compiler

    d = tmp_path / "cache"
    monkeypatch.setenv("PYGPU_CACHE_DIR", str(d))
    compiler.clear_cache(disk=False)
    yield d
    compiler.clear_cache(disk=False)
