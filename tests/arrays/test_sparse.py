"""pygpu.sparse: the host-side packeting and partitioning checked against
scipy.sparse (every row's nonzeros accounted for, no GPU needed), the
kernels compiled to PTX, the uploads and launches on the driver stand-in,
and (gpu) the SpMV and the CG solver against SciPy/NumPy on fresh random
matrices, float32 and float64."""
# ruff: noqa: E402  (scipy is imported, or the module skipped, first)

import numpy as np
import pytest

sp = pytest.importorskip("scipy.sparse")

from pygpu import compiler
from pygpu.sparse import pkt_build
from pygpu.sparse.coordinate import (
    COO_FLAT_KERNEL_TEMPLATE,
    COO_SERIAL_KERNEL_TEMPLATE,
)
from pygpu.sparse.operator import (
    DiagonalPreconditioner,
    IdentityOperator,
    IdentityPreconditioner,
)
from pygpu.sparse.packeted import PKT_KERNEL_TEMPLATE

try:
    import pymetis  # noqa: F401

    METHODS = ["rcm", "contiguous", "metis"]
except ImportError:
    METHODS = ["rcm", "contiguous"]


def random_matrix(rng, n, density, dtype, symmetric=False):
    seed = int(rng.integers(1 << 31))
    a = sp.random(
        n,
        n,
        density=density,
        format="csr",
        dtype=np.float64,
        random_state=np.random.RandomState(seed),
    )
    a.data = rng.standard_normal(a.nnz)
    if symmetric:
        a = a + a.T
    a = a + sp.diags(rng.standard_normal(n))  # a full diagonal
    return a.astype(dtype).tocsr()


def spd_matrix(rng, n, density, dtype):
    """Symmetric, strictly diagonally dominant with a positive diagonal."""
    b = random_matrix(rng, n, density, np.float64, symmetric=True)
    b = b - sp.diags(b.diagonal())
    d = np.asarray(abs(b).sum(axis=1)).ravel() + 1 + rng.random(n)
    return (b + sp.diags(d)).astype(dtype).tocsr()


def rebuild(plan):
    """The matrix the packed arrays and the remainder describe, in the new
    numbering, as a dense array; each packed slot used at most once."""
    n = plan.shape[0]
    T = plan.threads_per_packet
    dense = np.zeros((n, n), dtype=np.float64)
    seen = np.zeros((n, n), dtype=np.int64)
    used = np.zeros(len(plan.index_array), dtype=np.int64)
    for p in range(plan.block_count):
        base = int(plan.packet_base_rows[p])
        for t in range(p * T, (p + 1) * T):
            assert plan.thread_starts[t] % T == t % T
            for pos in range(int(plan.thread_starts[t]), int(plan.thread_ends[t]), T):
                used[pos] += 1
                packed = int(plan.index_array[pos])
                r, c = base + (packed >> 16), base + (packed & 0xFFFF)
                assert base <= r < plan.packet_base_rows[p + 1]
                assert base <= c < plan.packet_base_rows[p + 1]
                dense[r, c] += plan.data_array[pos]
                seen[r, c] += 1
    assert used.max(initial=0) <= 1, "two threads write one slot"
    coo = plan.remaining_coo
    np.add.at(dense, (coo.row, coo.col), coo.data)
    np.add.at(seen, (coo.row, coo.col), 1)
    return dense, seen


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize(
    "n,density,T,rpp",
    [(97, 0.05, 8, 20), (300, 0.02, 32, 41), (256, 0.01, 4, 300), (50, 0.3, 64, 7)],
)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_plan_accounts_for_every_nonzero(rng, method, n, density, T, rpp, dtype):
    a = random_matrix(rng, n, density, dtype)
    plan = pkt_build.make_plan(a, False, dtype, T, rpp, method)
    new2old, old2new = plan.new2old_fetch_indices, plan.old2new_fetch_indices
    # a permutation, packet by packet, each packet smaller than rows_per_packet
    assert sorted(new2old) == list(range(n))
    assert (old2new[new2old] == np.arange(n)).all()
    sizes = np.diff(plan.packet_base_rows)
    assert plan.packet_base_rows[0] == 0 and plan.packet_base_rows[-1] == n
    assert (sizes > 0).all() and (sizes < rpp).all()
    assert plan.block_count == len(plan.packet_nr_to_dofs)
    for p, dofs in enumerate(plan.packet_nr_to_dofs):
        assert list(new2old[plan.packet_base_rows[p] : plan.packet_base_rows[p + 1]]) == dofs
        assert (plan.dof_to_packet_nr[dofs] == p).all()
    # every nonzero once, with its value, in the new numbering
    dense, seen = rebuild(plan)
    ref = a.toarray()[np.ix_(new2old, new2old)]
    want = (ref != 0).astype(np.int64)
    assert (seen == want).all(), "a nonzero is missing or counted twice"
    np.testing.assert_array_equal(dense.astype(dtype), ref)
    # local entries: each row's are its thread's, and counted in local_row_costs
    csr = a.tocsr()
    rows = np.repeat(np.arange(n), np.diff(csr.indptr))
    local = plan.dof_to_packet_nr[rows] == plan.dof_to_packet_nr[csr.indices]
    np.testing.assert_array_equal(plan.local_row_costs, np.bincount(rows[local], minlength=n))
    assert plan.remaining_coo.nnz == csr.nnz - local.sum()
    per_thread = np.bincount(
        plan.thread_of_row, weights=plan.local_row_costs, minlength=plan.block_count * T
    )
    np.testing.assert_array_equal(per_thread, plan.thread_costs)
    np.testing.assert_array_equal((plan.thread_ends - plan.thread_starts) // T, plan.thread_costs)
    assert (plan.thread_of_row // T == plan.dof_to_packet_nr).all()
    # the product the kernels compute
    x = rng.standard_normal(n)
    y = pkt_build.simulate(plan, x[new2old])
    np.testing.assert_allclose(y[old2new], a.astype(np.float64) @ x, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("method", METHODS)
def test_symmetric_flag_and_unsymmetric_pattern(rng, method):
    """is_symmetric=False partitions on A + A^T; True trusts the pattern."""
    a = spd_matrix(rng, 200, 0.03, np.float64)
    for sym in (True, False):
        plan = pkt_build.make_plan(a, sym, np.float64, 16, 30, method)
        dense, seen = rebuild(plan)
        np.testing.assert_array_equal(
            dense, a.toarray()[np.ix_(plan.new2old_fetch_indices, plan.new2old_fetch_indices)]
        )


def test_rcm_keeps_a_banded_matrix_local(rng):
    """The fallback partition keeps neighbours together: a shuffled
    tridiagonal matrix has almost nothing left for the coordinate part."""
    n = 1000
    t = sp.diags([np.ones(n - 1), 2 + rng.random(n), np.ones(n - 1)], [-1, 0, 1]).tocsr()
    perm = rng.permutation(n)
    shuffled = t[perm][:, perm]
    plan = pkt_build.make_plan(shuffled, True, np.float64, 32, 101, "rcm")
    assert plan.remaining_coo.nnz <= 2 * plan.block_count
    contiguous = pkt_build.make_plan(shuffled, True, np.float64, 32, 101, "contiguous")
    assert contiguous.remaining_coo.nnz > 10 * plan.remaining_coo.nnz


def test_thread_assignment_zigzag():
    costs = np.array([5, 1, 7, 3, 3, 0, 2])
    thread_of_row, rank, thread_costs = pkt_build.find_thread_assignment(
        [[0, 1, 2, 3], [4, 5, 6]], costs, 3
    )
    # packet 0 by cost: 2 (7), 0 (5), 3 (3), 1 (1) -> threads 0, 1, 2, 2
    assert list(thread_of_row[[2, 0, 3, 1]]) == [0, 1, 2, 2]
    assert list(rank[[2, 0, 3, 1]]) == [0, 0, 0, 1]
    # packet 1 (threads 3..5): 4 (3), 6 (2), 5 (0)
    assert list(thread_of_row[[4, 6, 5]]) == [3, 4, 5]
    assert list(thread_costs) == [7, 5, 4, 3, 2, 0]


def test_partition_and_plan_errors(rng):
    a = random_matrix(rng, 30, 0.1, np.float64)
    with pytest.raises(
        ValueError,
        match="partition method must be 'metis', 'rcm', 'contiguous' or None, not 'spectral'",
    ):
        pkt_build.partition(a, False, 2, 10, "spectral")
    with pytest.raises(ValueError, match="rows_per_packet must be at least 2, got 1"):
        pkt_build.partition(a, False, 2, 1, "rcm")
    with pytest.raises(
        ValueError,
        match=r"only square matrices are supported, got shape "
        r"\(3, 4\)",
    ):
        pkt_build.make_plan(sp.random(3, 4, density=0.5), False, np.float32, 4, 8)
    with pytest.raises(ValueError, match="threads_per_packet must be >= 1, got 0"):
        pkt_build.make_plan(a, False, np.float32, 0, 8)


def test_default_partition_is_metis_only_with_pymetis(rng, monkeypatch):
    import sys

    a = random_matrix(rng, 40, 0.1, np.float64)
    monkeypatch.setitem(sys.modules, "pymetis", None)  # not installed
    got = pkt_build.partition(a, False, 4, 15)
    want = pkt_build.partition(a, False, 4, 15, "rcm")
    assert (got[0] == want[0]).all() and got[1] == want[1]


def test_duplicates_are_summed(rng):
    n = 20
    r = rng.integers(0, n, 200)
    c = rng.integers(0, n, 200)
    v = rng.standard_normal(200)
    coo = sp.coo_matrix((v, (r, c)), shape=(n, n))
    plan = pkt_build.make_plan(coo, False, np.float64, 4, 8, "contiguous")
    dense, _ = rebuild(plan)
    ref = coo.toarray()[np.ix_(plan.new2old_fetch_indices, plan.new2old_fetch_indices)]
    np.testing.assert_allclose(dense, ref, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("dtype", ["float", "double"])
def test_kernels_compile_to_ptx(dtype):
    idx = {"index_type": "int", "value_type": dtype}
    for src, entry in (
        (
            PKT_KERNEL_TEMPLATE
            % dict(
                idx,
                packed_index_type="unsigned int",
                rows_per_packet=6131 if dtype == "float" else 3065,
                threads_per_packet=1024,
            ),
            b"spmv_pkt_kernel",
        ),
        (COO_FLAT_KERNEL_TEMPLATE % dict(idx, block_size=128), b"spmv_coo_flat_kernel"),
        (COO_SERIAL_KERNEL_TEMPLATE % idx, b"spmv_coo_serial_kernel"),
    ):
        ptx = bytes(compiler.compile(src, target="ptx", arch="compute_90", cache_dir=False))
        assert b".entry " + entry in ptx


def test_pycuda_module_names():
    import importlib

    for name, attrs in {
        "packeted": ["PacketedSpMV", "PKT_KERNEL_TEMPLATE"],
        "coordinate": ["CoordinateSpMV", "COO_FLAT_KERNEL_TEMPLATE", "COO_SERIAL_KERNEL_TEMPLATE"],
        "operator": ["OperatorBase", "IdentityOperator", "DiagonalPreconditioner"],
        "cg": ["ConvergenceError", "CGStateContainer", "solve_pkt_with_cg"],
        "inner": ["AsyncInnerProduct", "STREAM_POOL", "get_stream"],
        "pkt_build": ["build_pkt_data_structure"],
        "pkt_build_cython": ["build_pkt_data_structure"],
    }.items():
        mod = importlib.import_module("pygpu.sparse." + name)
        for a in attrs:
            assert hasattr(mod, a), (name, a)
    from pygpu.sparse import pkt_build_cython

    assert pkt_build_cython.build_pkt_data_structure is pkt_build.build_pkt_data_structure


def test_operators():
    ident = IdentityOperator(np.float32, 7)
    assert ident.shape == (7, 7) and ident.dtype == np.float32
    x = object()
    assert ident(x) is x
    assert IdentityPreconditioner is IdentityOperator

    class Diag:  # shape/dtype as a GPUArray has them
        shape = (5,)
        dtype = np.dtype(np.float64)

        def __mul__(self, other):
            return ("mul", other)

    d = DiagonalPreconditioner(Diag())
    assert d.shape == (5, 5) and d.dtype == np.float64
    assert d("v") == ("mul", "v")


# ---- the stand-in: uploads and launches (no kernel runs) ----


@pytest.mark.standin
def test_packeted_uploads_and_launches_on_the_standin(standin, ctx, rng):
    import pygpu.gpuarray as gpuarray
    from pygpu.sparse.packeted import PacketedSpMV

    a = random_matrix(rng, 150, 0.04, np.float32)
    spmv = PacketedSpMV(
        a, False, np.float32, partition="rcm", threads_per_packet=32, rows_per_packet=40
    )
    plan = spmv.plan
    for name in (
        "thread_starts",
        "thread_ends",
        "index_array",
        "data_array",
        "packet_base_rows",
        "new2old_fetch_indices",
        "old2new_fetch_indices",
    ):
        np.testing.assert_array_equal(getattr(spmv, name).get(), getattr(plan, name))
    coo = spmv.remaining_coo_gpu
    assert coo.nnz == plan.remaining_coo.nnz
    got = sorted(zip(coo.row_gpu.get(), coo.col_gpu.get(), coo.data_gpu.get()))
    want = sorted(
        zip(
            plan.remaining_coo.row,
            plan.remaining_coo.col,
            plan.remaining_coo.data.astype(np.float32),
        )
    )
    assert got == want
    x = gpuarray.to_gpu(rng.standard_normal(150).astype(np.float32))
    before = standin.calls("cuLaunchKernel") + standin.calls("cuLaunchKernelEx")
    y = spmv(x)
    assert y.shape == (150,) and y.dtype == np.float32
    assert standin.calls("cuLaunchKernel") + standin.calls("cuLaunchKernelEx") - before == 2
    last = standin.last_launch()  # the coordinate part comes last
    assert last.name == "spmv_coo_flat_kernel" and last.block == (128, 1, 1)
    # PyCUDA's host-side steps under its names give the same arrays
    assignments, costs = spmv.find_thread_assignment(
        plan.packet_nr_to_dofs, plan.local_row_costs, plan.block_count * 32
    )
    assert [
        r for t in assignments for r in t if plan.thread_of_row[r] != assignments.index(t)
    ] == []
    spmv.build_gpu_data_structure(
        plan.packet_nr_to_dofs,
        costs.max(),
        plan.old2new_fetch_indices,
        plan.csr_mat,
        plan.block_count * 32,
        assignments,
        plan.local_row_costs,
    )
    np.testing.assert_array_equal(spmv.index_array.get(), plan.index_array)
    np.testing.assert_array_equal(spmv.data_array.get(), plan.data_array)


@pytest.mark.standin
def test_argument_errors(standin, ctx, rng):
    import pygpu.gpuarray as gpuarray
    from pygpu.sparse.cg import solve_pkt_with_cg
    from pygpu.sparse.coordinate import CoordinateSpMV
    from pygpu.sparse.packeted import PacketedSpMV

    a = random_matrix(rng, 40, 0.1, np.float64)
    with pytest.raises(TypeError, match="PacketedSpMV supports float32 and float64, not int32"):
        PacketedSpMV(a, False, np.int32)
    with pytest.raises(
        ValueError,
        match=r"only square matrices are supported, got shape "
        r"\(40, 41\)",
    ):
        PacketedSpMV(sp.random(40, 41, density=0.1), False, np.float64)
    with pytest.raises(
        ValueError,
        match="rows_per_packet=4000 needs 64000 bytes of static shared memory; at most 49152",
    ):
        PacketedSpMV(a, False, np.float64, rows_per_packet=4000)
    spmv = PacketedSpMV(a, False, np.float64, threads_per_packet=16, rows_per_packet=12)
    with pytest.raises(TypeError, match="x must be a GPUArray, not ndarray"):
        spmv(np.zeros(40))
    with pytest.raises(
        TypeError, match="x must have dtype float64 \\(the matrix's\\), not float32"
    ):
        spmv(gpuarray.zeros(40, np.float32))
    with pytest.raises(ValueError, match=r"y must have shape \(40,\), not \(39,\)"):
        spmv(gpuarray.zeros(40, np.float64), gpuarray.zeros(39, np.float64))
    with pytest.raises(
        TypeError, match="CoordinateSpMV supports float32 and float64, not complex64"
    ):
        CoordinateSpMV(a, np.complex64)
    with pytest.raises(
        TypeError, match="solve_pkt_with_cg\\(\\): b must be a GPUArray, not ndarray"
    ):
        solve_pkt_with_cg(spmv, np.zeros(40))
    with pytest.raises(
        ValueError,
        match=r"b must have shape \(40,\) and dtype float64, not "
        r"\(40,\) float32",
    ):
        solve_pkt_with_cg(spmv, gpuarray.zeros(40, np.float32))


@pytest.mark.standin
def test_cg_search_direction_is_not_the_residual(standin, ctx, rng):
    """With the identity preconditioner, d = M r is r itself: the solver must
    copy it, or updating r in place would change d (steepest descent)."""
    import pygpu.gpuarray as gpuarray
    from pygpu.sparse.cg import CGStateContainer
    from pygpu.sparse.packeted import PacketedSpMV

    a = spd_matrix(rng, 50, 0.1, np.float64)
    spmv = PacketedSpMV(a, True, np.float64, threads_per_packet=16, rows_per_packet=20)
    cg = CGStateContainer(spmv)
    cg.reset(gpuarray.to_gpu(rng.standard_normal(50)))
    assert cg.d is not cg.residual
    assert int(cg.d.gpudata) != int(cg.residual.gpudata)
    cg.one_iteration()
    assert int(cg.d.gpudata) != int(cg.residual.gpudata)


# ---- gpu: against SciPy ----

TOL = {np.float32: dict(rtol=2e-4, atol=2e-4), np.float64: dict(rtol=1e-11, atol=1e-11)}


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(
    "n,density,kw",
    [
        (20000, 0.0005, {}),  # device defaults: several packets
        (3000, 0.003, dict(threads_per_packet=128, rows_per_packet=200)),
        (1000, 0.02, dict(threads_per_packet=32, rows_per_packet=64, partition="contiguous")),
        (5, 0.5, {}),
    ],
)
def test_packeted_spmv_against_scipy(ctx, rng, dtype, n, density, kw):
    import pygpu.gpuarray as gpuarray
    from pygpu.sparse.packeted import PacketedSpMV

    a = random_matrix(rng, n, density, dtype)
    spmv = PacketedSpMV(a, False, dtype, **kw)
    assert spmv.shape == (n, n) and spmv.dtype == dtype
    x = rng.standard_normal(n).astype(dtype)
    ref = a.astype(np.float64) @ x.astype(np.float64)
    scale = np.abs(a).astype(np.float64) @ np.abs(x).astype(np.float64)
    x_gpu = gpuarray.to_gpu(x)
    y = spmv.unpermute(spmv(spmv.permute(x_gpu))).get()
    assert y.dtype == dtype
    np.testing.assert_allclose(y, ref, rtol=0, atol=TOL[dtype]["rtol"] * (scale.max() + 1))
    assert (np.abs(y - ref) <= TOL[dtype]["rtol"] * (scale + 1)).all()
    # y given: accumulates
    y0 = rng.standard_normal(n).astype(dtype)
    y_gpu = spmv.permute(gpuarray.to_gpu(y0))
    out = spmv(spmv.permute(x_gpu), y_gpu)
    assert out is y_gpu
    got = spmv.unpermute(out).get()
    assert (np.abs(got - (ref + y0)) <= TOL[dtype]["rtol"] * (scale + np.abs(y0) + 1)).all()


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_coordinate_spmv_against_scipy(ctx, rng, dtype):
    import pygpu.gpuarray as gpuarray
    from pygpu.sparse.coordinate import CoordinateSpMV

    n = 4000
    a = random_matrix(rng, n, 0.002, dtype)
    coo = CoordinateSpMV(a.tocoo(), dtype)
    x = rng.standard_normal(n).astype(dtype)
    y = coo(gpuarray.to_gpu(x)).get()
    ref = a.astype(np.float64) @ x.astype(np.float64)
    scale = np.abs(a).astype(np.float64) @ np.abs(x).astype(np.float64)
    assert (np.abs(y - ref) <= TOL[dtype]["rtol"] * (scale + 1)).all()
    # the serial tail: the same result with half the entries left to it
    coo.tail = coo.nnz // 2
    y2 = coo(gpuarray.to_gpu(x)).get()
    assert (np.abs(y2 - ref) <= TOL[dtype]["rtol"] * (scale + 1)).all()
    empty = CoordinateSpMV(sp.coo_matrix((n, n)), dtype)
    assert (empty(gpuarray.to_gpu(x)).get() == 0).all()


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("precondition", [False, True])
def test_cg_solves_spd_systems(ctx, rng, dtype, precondition):
    import pygpu.gpuarray as gpuarray
    from scipy.sparse.linalg import spsolve
    from pygpu.sparse.cg import solve_pkt_with_cg
    from pygpu.sparse.packeted import PacketedSpMV

    n = 3000
    a = spd_matrix(rng, n, 0.002, dtype)
    b = rng.standard_normal(n).astype(dtype)
    ref = spsolve(a.astype(np.float64).tocsc(), b.astype(np.float64))
    np.testing.assert_allclose(a.astype(np.float64) @ ref, b, rtol=1e-9, atol=1e-9)
    spmv = PacketedSpMV(a, True, dtype, threads_per_packet=256, rows_per_packet=700)
    precon = None
    if precondition:
        inv_diag = gpuarray.to_gpu((1 / a.diagonal()).astype(dtype))
        precon = DiagonalPreconditioner(spmv.permute(inv_diag))
    tol = 1e-5 if dtype == np.float32 else 1e-11
    x, iterations, residuals = solve_pkt_with_cg(spmv, gpuarray.to_gpu(b), precon=precon, tol=tol)
    x = x.get()
    assert x.dtype == dtype and iterations >= 1 and residuals >= 0
    rel = 1e-3 if dtype == np.float32 else 1e-8
    np.testing.assert_allclose(x, ref, rtol=rel, atol=rel * np.abs(ref).max())
    # a starting guess near the answer converges too
    x2, it2, _ = solve_pkt_with_cg(
        spmv, gpuarray.to_gpu(b), x=gpuarray.to_gpu((ref * 1.01).astype(dtype)), tol=tol
    )
    np.testing.assert_allclose(x2.get(), ref, rtol=rel, atol=rel * np.abs(ref).max())


@pytest.mark.gpu
def test_cg_small_dense_against_numpy(ctx, rng):
    import pygpu.gpuarray as gpuarray
    from pygpu.sparse.cg import solve_pkt_with_cg
    from pygpu.sparse.packeted import PacketedSpMV

    n = 60
    m = rng.standard_normal((n, n))
    a = m @ m.T + n * np.eye(n)  # dense SPD
    b = rng.standard_normal(n)
    spmv = PacketedSpMV(sp.csr_matrix(a), True, np.float64)
    x, _, _ = solve_pkt_with_cg(spmv, gpuarray.to_gpu(b), tol=1e-12)
    np.testing.assert_allclose(x.get(), np.linalg.solve(a, b), rtol=1e-9, atol=1e-9)


@pytest.mark.gpu
def test_cg_gives_up(ctx, rng):
    import pygpu.gpuarray as gpuarray
    from pygpu.sparse.cg import ConvergenceError, solve_pkt_with_cg
    from pygpu.sparse.packeted import PacketedSpMV

    a = spd_matrix(rng, 500, 0.01, np.float64)
    spmv = PacketedSpMV(a, True, np.float64)
    with pytest.raises(ConvergenceError, match="cg failed to converge"):
        solve_pkt_with_cg(
            spmv, gpuarray.to_gpu(rng.standard_normal(500)), tol=1e-14, max_iterations=2
        )


# ---- the operand gate and index widths (the third review's defects) ----


@pytest.mark.standin
@pytest.mark.parametrize("kind", ["coordinate", "packeted"])
def test_products_over_freed_views_are_refused(standin, ctx, rng, kind):
    """Both products pass their arrays through the operand gate: an x or y
    that is a view of freed memory is a LogicError before any launch
    (before, they passed raw .gpudata addresses and launched on it)."""
    import pygpu.driver as cuda
    import pygpu.gpuarray as gpuarray
    from pygpu.sparse.coordinate import CoordinateSpMV
    from pygpu.sparse.packeted import PacketedSpMV

    n = 60
    a = random_matrix(rng, n, 0.1, np.float32)
    if kind == "coordinate":
        spmv = CoordinateSpMV(a.tocoo(), np.float32)
        spmv.tail = spmv.nnz // 2  # both kernels
    else:
        spmv = PacketedSpMV(a, False, np.float32, threads_per_packet=16, rows_per_packet=20)
    x = rng.standard_normal(n).astype(np.float32)
    spmv(gpuarray.to_gpu(x))  # a live x launches
    for which in ("x", "y"):
        big = gpuarray.to_gpu(rng.standard_normal(2 * n).astype(np.float32))
        view = big[n:]
        args = {"x": gpuarray.to_gpu(x), "y": gpuarray.zeros(n, np.float32)}
        args[which] = view
        big.gpudata.free()
        launches = standin.launches()
        with pytest.raises(cuda.LogicError, match=r"the array's memory was freed"):
            spmv(args["x"], args["y"])
        assert standin.launches() == launches


@pytest.mark.standin
def test_coordinate_indices_past_int32_are_kept_exactly(standin, ctx):
    """A column of 2**31 + 4 was stored as int32 (-2147483644: the kernel
    read 8 GiB before x); now the indices are int64 wherever one does not
    fit int32, and the kernels are built and prepared for it."""
    from pygpu.sparse.coordinate import CoordinateSpMV

    cols = np.array([0, 5, 2**31 + 4, 2**32 + 7], np.int64)
    rows = np.array([0, 1, 1, 2], np.int64)
    vals = np.array([1.0, 2.0, 3.0, 4.0], np.float32)
    a = sp.coo_matrix((vals, (rows, cols)), shape=(3, 2**32 + 8))
    spmv = CoordinateSpMV(a, np.float32)
    assert spmv.index_dtype == np.int64
    got = sorted(zip(spmv.row_gpu.get(), spmv.col_gpu.get(), spmv.data_gpu.get()))
    assert got == sorted(zip(rows.tolist(), cols.tolist(), vals.tolist()))
    spmv.get_flat_kernel(), spmv.get_serial_kernel()  # compile and prepare for int64
    small = CoordinateSpMV(sp.coo_matrix(np.eye(4, dtype=np.float32)), np.float32)
    assert small.index_dtype == np.int32  # int32 where everything fits


@pytest.mark.standin
def test_packeted_refuses_indices_past_int32(standin, ctx):
    from pygpu.sparse.packeted import PacketedSpMV

    big = sp.csr_matrix((2**31 + 2, 2**31 + 2), dtype=np.float32)
    with pytest.raises(ValueError, match=r"PacketedSpMV indexes with int32: a matrix of shape"):
        PacketedSpMV(big, False, np.float32)


@pytest.mark.gpu
def test_gpu_coordinate_spmv_past_int32_columns_equals_numpy(ctx, rng):
    """x of 2**31 + 16 float32 (8 GiB): the entries in columns past int32
    are read from the right place."""
    import pygpu.gpuarray as gpuarray
    from pygpu.sparse.coordinate import CoordinateSpMV

    n = 2**31 + 16
    cols = np.array([3, 2**31 + 4, 2**31 + 15, 7], np.int64)
    rows = np.array([0, 0, 1, 2], np.int64)
    vals = rng.standard_normal(4).astype(np.float32)
    a = sp.coo_matrix((vals, (rows, cols)), shape=(3, n))
    spmv = CoordinateSpMV(a, np.float32)
    x = gpuarray.empty(n, np.float32)
    picks = rng.standard_normal(4).astype(np.float32)
    for c, v in zip(cols, picks):
        x[int(c) : int(c) + 1].set(np.array([v], np.float32))
    y = spmv(x).get()
    want = np.zeros(3, np.float32)
    for r, v, p in zip(rows, vals, picks):
        want[r] += v * p
    np.testing.assert_allclose(y, want, rtol=1e-6)


@pytest.mark.gpu
@pytest.mark.parametrize("kind", ["coordinate", "packeted"])
def test_gpu_products_over_freed_views_are_refused_and_live_ones_equal_scipy(ctx, rng, kind):
    import pygpu.driver as cuda
    import pygpu.gpuarray as gpuarray
    from pygpu.sparse.coordinate import CoordinateSpMV
    from pygpu.sparse.packeted import PacketedSpMV

    n = 300
    a = random_matrix(rng, n, 0.05, np.float64)
    if kind == "coordinate":
        spmv, perm = CoordinateSpMV(a.tocoo(), np.float64), None
    else:
        spmv = PacketedSpMV(a, False, np.float64)
        perm = spmv
    x = rng.standard_normal(n)
    big = gpuarray.to_gpu(np.concatenate([rng.standard_normal(n), x]))
    view = big[n:]
    xin = perm.permute(view) if perm else view
    y = spmv(xin)
    y = (perm.unpermute(y) if perm else y).get()
    np.testing.assert_allclose(y, a @ x, rtol=1e-10, atol=1e-10)
    big.gpudata.free()
    with pytest.raises(cuda.LogicError, match=r"the array's memory was freed"):
        spmv(view)
