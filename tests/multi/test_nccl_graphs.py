"""Collectives in CUDA graphs (1 and 2 GPUs, ``gpu``): a step of array
operations with an all-reduce in it, captured with pygpu's capture_graph
in each of one or two processes, replayed with new inputs, equal to eager
execution and to NumPy.  (That a captured collective keeps its arrays
alive is tested without a GPU in test_nccl_c.py.)"""

import numpy as np
import pytest

import nccl_children
from pygpu import nccl as pnccl


@pytest.mark.gpu
@pytest.mark.parametrize("n", [1, 2])
def test_gpu_a_captured_step_with_an_allreduce_replays_as_eager(n):
    from pygpu import driver

    driver.init()
    if driver.Device.count() < n:
        pytest.skip("needs %d GPUs, %d visible" % (n, driver.Device.count()))
    if not pnccl.available():
        pytest.skip("nccl4py is not importable (pip install 'pygpu[nccl]')")
    seed = int(np.random.default_rng().integers(1 << 30))
    results = pnccl.spawn(nccl_children.captured_step, n, args=(seed, 3), timeout=300)
    for rank, steps in enumerate(results):
        assert len(steps) == 3
        for eager, replayed, want in steps:
            np.testing.assert_array_equal(replayed, eager)  # the graph does what eager did
            np.testing.assert_allclose(replayed, want, rtol=1e-5, atol=1e-5)
    for r in results[1:]:
        np.testing.assert_array_equal(r[2][1], results[0][2][1])  # every rank has the sum
