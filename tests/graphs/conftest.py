"""The graph tests' fixtures (tests/graphs): `mod`, the kernels of
graph_shared.KERNELS built in the test's context."""

import pytest

from pygpu.compiler import SourceModule

from graph_shared import KERNELS


@pytest.fixture
def mod(ctx):
    return SourceModule(KERNELS, no_extern_c=True)
