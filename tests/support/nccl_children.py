"""What the spawned ranks of tests/multi/test_nccl_graphs.py run (a module
of its own: a spawn child imports it by name)."""

import numpy as np

N = 1 << 14


def data(seed, rank, step):
    """Rank `rank`'s inputs x, y for replay `step` (every rank can make
    every rank's, so each checks the sum on its own)."""
    rng = np.random.default_rng([seed, rank, step])
    return rng.standard_normal(N).astype(np.float32), rng.standard_normal(N).astype(np.float32)


def captured_step(comm, seed, steps):
    """Eager, then captured and replayed `steps` times with new inputs: a
    step of array operations, an all-reduce, and an operation after it.
    Returns per step (eager result, replayed result, NumPy's)."""
    from pygpu import driver, gpuarray
    from pygpu.graphs import capture_graph

    x0, y0 = data(seed, comm.rank, 0)
    x, y = gpuarray.to_gpu(x0), gpuarray.to_gpu(y0)
    s = driver.Stream()

    def step():
        z = 2 * x + y * y  # array operations
        comm.allreduce(z)  # the default stream: the capturing one inside the capture
        return z * 0.5

    step()  # NCCL connects outside the capture
    comm.synchronize()
    with capture_graph(s) as cap:
        w = step()
    exe = cap.graph.instantiate()
    out = []
    for k in range(1, steps + 1):
        xk, yk = data(seed, comm.rank, k)
        x.set(xk)
        y.set(yk)
        eager = step().get()  # eager execution, the legacy stream
        exe.launch(s)
        s.synchronize()
        want = sum(
            2 * data(seed, r, k)[0].astype(np.float64) + data(seed, r, k)[1].astype(np.float64) ** 2
            for r in range(comm.nranks)
        )
        out.append((eager, w.get(), 0.5 * want))
    return out
