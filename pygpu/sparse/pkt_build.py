"""The host side of the packeted format (PyCUDA's pycuda.sparse.pkt_build),
in NumPy: partitioning the rows into packets, assigning each packet's rows
to its threads, and the packed arrays the kernel reads.  No GPU is needed
here except by :func:`build_pkt_data_structure`, which uploads.

The format (the same as PyCUDA's):

- The rows are partitioned into ``block_count`` packets of fewer than
  ``rows_per_packet`` rows each; packet p's rows are renumbered
  consecutively from ``packet_base_rows[p]`` (``new2old_fetch_indices``,
  ``old2new_fetch_indices``: the permutation, new -> old and old -> new).
- An entry (i, j) with i and j in the same packet is *local*: packet p's
  block of ``threads_per_packet`` threads computes it from shared memory.
  Each row is owned by one thread (``thread_assignments``, a zigzag over the
  rows sorted by their local entry count, so threads get similar work); the
  thread's entries are interleaved with its neighbours' at stride
  ``threads_per_packet`` from ``thread_starts[t]`` to ``thread_ends[t]``
  in ``index_array`` (row and column within the packet, packed as
  ``row << 16 | col``) and ``data_array``.
- Every other entry goes to the coordinate-format remainder, in the new
  numbering.
"""

import numpy as np

__all__ = [
    "partition",
    "PacketPlan",
    "make_plan",
    "build_pkt_data_structure",
    "build_pkt_host_arrays",
    "simulate",
]


def _csr(mat, dtype):
    from scipy.sparse import csr_matrix

    m = csr_matrix(mat, dtype=dtype)
    m.sum_duplicates()
    m.sort_indices()
    return m


def _rcm_order(adj):
    from scipy.sparse.csgraph import reverse_cuthill_mckee

    return np.asarray(reverse_cuthill_mckee(adj.tocsr(), symmetric_mode=True), dtype=np.int64)


def partition(csr_mat, is_symmetric, block_count, rows_per_packet, method=None):
    """Partition the rows into packets of fewer than rows_per_packet rows.

    method: "metis" (pymetis's part_graph, as PyCUDA; retried with more
    parts while a part is too big), "rcm" (reverse Cuthill-McKee order from
    scipy.sparse.csgraph, cut into equal contiguous runs), "contiguous"
    (rows in their order, cut likewise); None: "metis" where pymetis is
    installed, else "rcm".  Returns (dof_to_packet_nr, packet_nr_to_dofs):
    an int array of each row's packet and a list, per packet, of its rows
    (ascending, no empty packet).
    """
    h = csr_mat.shape[0]
    if method is None:
        try:
            import pymetis  # noqa: F401

            method = "metis"
        except ImportError:
            method = "rcm"
    if method not in ("metis", "rcm", "contiguous"):
        raise ValueError(
            "partition method must be 'metis', 'rcm', 'contiguous' or None, not %r" % (method,)
        )
    if rows_per_packet < 2:
        raise ValueError("rows_per_packet must be at least 2, got %d" % rows_per_packet)
    cap = rows_per_packet - 1  # a packet has fewer than rows_per_packet rows
    block_count = max(int(block_count), (h + cap - 1) // cap, 1)
    if method == "metis":
        from pymetis import part_graph

        adj = csr_mat if is_symmetric else (csr_mat + csr_mat.T).tocsr()
        adj = adj.tocoo()
        keep = adj.row != adj.col  # METIS takes no self loops
        from scipy.sparse import csr_matrix

        adj = csr_matrix(
            (np.ones(int(keep.sum()), dtype=np.int8), (adj.row[keep], adj.col[keep])),
            shape=csr_mat.shape,
        )
        while True:
            if block_count == 1:
                parts = np.zeros(h, dtype=np.int64)
            else:
                _cut, parts = part_graph(
                    int(block_count), xadj=adj.indptr.tolist(), adjncy=adj.indices.tolist()
                )
                parts = np.asarray(parts, dtype=np.int64)
            sizes = np.bincount(parts, minlength=block_count)
            if sizes.max(initial=0) <= cap:
                break
            block_count = int(2 + 1.05 * block_count)
    else:
        if method == "rcm":
            adj = csr_mat if is_symmetric else (csr_mat + csr_mat.T).tocsr()
            order = _rcm_order(adj) if h else np.zeros(0, dtype=np.int64)
        else:
            order = np.arange(h, dtype=np.int64)
        # equal runs (sizes differ by at most one), each <= cap
        bounds = (np.arange(block_count + 1) * h) // block_count
        parts = np.empty(h, dtype=np.int64)
        for p in range(block_count):
            parts[order[bounds[p] : bounds[p + 1]]] = p
    # renumber the non-empty parts 0..k-1
    used = np.unique(parts)
    remap = np.full(max(int(parts.max(initial=0)) + 1, 1), -1, dtype=np.int64)
    remap[used] = np.arange(len(used))
    dof_to_packet_nr = remap[parts] if h else parts
    order = np.argsort(dof_to_packet_nr, kind="stable")
    counts = np.bincount(dof_to_packet_nr, minlength=len(used))
    packet_nr_to_dofs = [list(map(int, chunk)) for chunk in np.split(order, np.cumsum(counts)[:-1])]
    return dof_to_packet_nr, packet_nr_to_dofs


def find_simple_index_stuff(packet_nr_to_dofs, h, index_dtype=np.int32):
    """(new2old_fetch_indices, old2new_fetch_indices, packet_base_rows)."""
    block_count = len(packet_nr_to_dofs)
    new2old = np.zeros(h, dtype=index_dtype)
    old2new = np.zeros(h, dtype=index_dtype)
    base = np.zeros(block_count + 1, dtype=index_dtype)
    row_start = 0
    for p, dofs in enumerate(packet_nr_to_dofs):
        base[p] = row_start
        row_end = row_start + len(dofs)
        idx = np.asarray(dofs, dtype=index_dtype)
        new2old[row_start:row_end] = idx
        old2new[idx] = np.arange(row_start, row_end, dtype=index_dtype)
        row_start = row_end
    base[block_count] = row_start
    return new2old, old2new, base


def _entry_rows(csr_mat):
    return np.repeat(np.arange(csr_mat.shape[0], dtype=np.int64), np.diff(csr_mat.indptr))


def find_local_row_costs_and_remaining_coo(csr_mat, dof_to_packet_nr, old2new, dtype):
    """(local_row_costs, remaining_coo): each row's count of entries in its
    own packet, and the other entries as a scipy COO matrix in the new
    numbering."""
    from scipy.sparse import coo_matrix

    h = csr_mat.shape[0]
    rows = _entry_rows(csr_mat)
    cols = csr_mat.indices.astype(np.int64)
    local = dof_to_packet_nr[rows] == dof_to_packet_nr[cols]
    local_row_costs = np.bincount(rows[local], minlength=h).astype(np.int64)
    rem = ~local
    remaining = coo_matrix(
        (
            csr_mat.data[rem],
            (old2new[rows[rem]].astype(np.int64), old2new[cols[rem]].astype(np.int64)),
        ),
        shape=csr_mat.shape,
        dtype=dtype,
    )
    return local_row_costs, remaining


def find_thread_assignment(packet_nr_to_dofs, local_row_cost, threads_per_packet):
    """(thread_of_row, rank_of_row, thread_costs): each row's thread (global
    number: packet * threads_per_packet + offset) and its place among that
    thread's rows, and each thread's entry count.  The rows of a packet, by
    decreasing cost (ties: higher row number first, as PyCUDA), go to the
    threads in a zigzag 0, 1, ..., T-1, T-1, ..., 0, 0, 1, ..."""
    T = threads_per_packet
    h = len(local_row_cost)
    thread_of_row = np.zeros(h, dtype=np.int64)
    rank_of_row = np.zeros(h, dtype=np.int64)
    thread_costs = np.zeros(len(packet_nr_to_dofs) * T, dtype=np.int64)
    cost = np.asarray(local_row_cost, dtype=np.int64)
    for p, dofs in enumerate(packet_nr_to_dofs):
        d = np.asarray(dofs, dtype=np.int64)
        order = np.lexsort((-d, -cost[d]))  # cost desc, then row desc
        srt = d[order]
        k = np.arange(len(srt))
        r = k % (2 * T)
        off = np.where(r < T, r, 2 * T - 1 - r)
        thread_of_row[srt] = p * T + off
        rank_of_row[srt] = k // T  # zigzag: one row per pass
        np.add.at(thread_costs, p * T + off, cost[srt])
    return thread_of_row, rank_of_row, thread_costs


def build_pkt_host_arrays(
    csr_mat,
    dof_to_packet_nr,
    packet_nr_to_dofs,
    old2new,
    base,
    thread_of_row,
    rank_of_row,
    threads_per_packet,
    dtype,
    index_dtype=np.int32,
    packed_index_dtype=np.uint32,
):
    """(thread_starts, thread_ends, index_array, data_array) as NumPy arrays:
    thread t's entries are at thread_starts[t], + T, ... < thread_ends[t]."""
    T = threads_per_packet
    block_count = len(packet_nr_to_dofs)
    thread_count = block_count * T
    rows = _entry_rows(csr_mat)
    cols = csr_mat.indices.astype(np.int64)
    local = dof_to_packet_nr[rows] == dof_to_packet_nr[cols]
    lr, lc = rows[local], cols[local]
    ld = csr_mat.data[local]
    pos_in_row = (np.arange(csr_mat.nnz) - csr_mat.indptr[rows])[local]
    thr = thread_of_row[lr]
    # a thread's entries: its rows in assignment order, each row's in CSR order
    order = np.lexsort((pos_in_row, rank_of_row[lr], thr))
    lr, lc, ld, thr = lr[order], lc[order], ld[order], thr[order]
    counts = np.bincount(thr, minlength=thread_count)
    first = np.concatenate(([0], np.cumsum(counts)[:-1]))
    j = np.arange(len(thr)) - first[thr]  # the entry's number in its thread
    per_packet_max = counts.reshape(block_count, T).max(axis=1) if block_count else counts
    packet_start = np.concatenate(([0], np.cumsum(per_packet_max * T)))
    total = int(packet_start[-1])
    t_all = np.arange(thread_count)
    thread_starts = (packet_start[t_all // T] + t_all % T).astype(index_dtype)
    thread_ends = (thread_starts + counts * T).astype(index_dtype)
    pos = thread_starts[thr].astype(np.int64) + j * T
    pkt = dof_to_packet_nr[lr]
    rel_row = old2new[lr].astype(np.int64) - base[pkt]
    rel_col = old2new[lc].astype(np.int64) - base[pkt]
    index_array = np.zeros(max(total, 1), dtype=packed_index_dtype)
    data_array = np.zeros(max(total, 1), dtype=dtype)
    index_array[pos] = ((rel_row << 16) + rel_col).astype(packed_index_dtype)
    data_array[pos] = ld
    return thread_starts, thread_ends, index_array, data_array


class PacketPlan:
    """Everything PacketedSpMV uploads, computed on the host (attributes
    named as PacketedSpMV's)."""


def make_plan(mat, is_symmetric, dtype, threads_per_packet, rows_per_packet, partition_method=None):
    """The packeted format of mat as a :class:`PacketPlan` (NumPy arrays
    only; no GPU needed)."""
    plan = PacketPlan()
    plan.dtype = np.dtype(dtype)
    plan.index_dtype = np.dtype(np.int32)
    plan.packed_index_dtype = np.dtype(np.uint32)
    h, w = plan.shape = tuple(mat.shape)
    if h != w:
        raise ValueError("only square matrices are supported, got shape %r" % (plan.shape,))
    if threads_per_packet < 1:
        raise ValueError("threads_per_packet must be >= 1, got %d" % threads_per_packet)
    if rows_per_packet > 65536:
        rows_per_packet = 65536  # the packed index has 16 bits a side
    plan.threads_per_packet = int(threads_per_packet)
    plan.rows_per_packet = int(rows_per_packet)
    csr_mat = _csr(mat, plan.dtype)
    plan.csr_mat = csr_mat
    block_count = (h + plan.rows_per_packet - 1) // plan.rows_per_packet
    plan.dof_to_packet_nr, plan.packet_nr_to_dofs = partition(
        csr_mat, is_symmetric, block_count, plan.rows_per_packet, partition_method
    )
    plan.block_count = len(plan.packet_nr_to_dofs)
    plan.new2old_fetch_indices, plan.old2new_fetch_indices, plan.packet_base_rows = (
        find_simple_index_stuff(plan.packet_nr_to_dofs, h, plan.index_dtype)
    )
    plan.local_row_costs, plan.remaining_coo = find_local_row_costs_and_remaining_coo(
        csr_mat, plan.dof_to_packet_nr, plan.old2new_fetch_indices, plan.dtype
    )
    assert plan.remaining_coo.nnz == csr_mat.nnz - int(plan.local_row_costs.sum())
    plan.thread_of_row, plan.rank_of_row, plan.thread_costs = find_thread_assignment(
        plan.packet_nr_to_dofs, plan.local_row_costs, plan.threads_per_packet
    )
    (plan.thread_starts, plan.thread_ends, plan.index_array, plan.data_array) = (
        build_pkt_host_arrays(
            csr_mat,
            plan.dof_to_packet_nr,
            plan.packet_nr_to_dofs,
            plan.old2new_fetch_indices,
            plan.packet_base_rows,
            plan.thread_of_row,
            plan.rank_of_row,
            plan.threads_per_packet,
            plan.dtype,
            plan.index_dtype,
            plan.packed_index_dtype,
        )
    )
    return plan


def simulate(plan, x_new):
    """What the kernels compute, in NumPy: y = A x in the new numbering, the
    packets' local entries read thread by thread as the packet kernel reads
    them, then the coordinate remainder added.  For tests."""
    T = plan.threads_per_packet
    y = np.zeros(plan.shape[0], dtype=np.result_type(plan.dtype, x_new.dtype))
    for p in range(plan.block_count):
        base = int(plan.packet_base_rows[p])
        for t in range(p * T, (p + 1) * T):
            for pos in range(int(plan.thread_starts[t]), int(plan.thread_ends[t]), T):
                packed = int(plan.index_array[pos])
                y[base + (packed >> 16)] += plan.data_array[pos] * x_new[base + (packed & 0xFFFF)]
    coo = plan.remaining_coo
    np.add.at(y, coo.row, coo.data * x_new[coo.col])
    return y


def build_pkt_data_structure(
    spmv,
    packet_nr_to_dofs,
    max_thread_costs,
    old2new_fetch_indices,
    csr_mat,
    thread_count,
    thread_assignments,
    local_row_costs,
):
    """PyCUDA's signature: computes the packed arrays and uploads them as
    spmv.thread_starts, thread_ends, index_array, data_array (GPUArrays).
    thread_assignments is a list, per thread, of the rows it owns in order
    (or a (thread_of_row, rank_of_row) pair); max_thread_costs and
    local_row_costs are not needed (kept for the signature)."""
    import pygpu.gpuarray as gpuarray

    h = csr_mat.shape[0]
    dof_to_packet_nr = np.zeros(h, dtype=np.int64)
    for p, dofs in enumerate(packet_nr_to_dofs):
        dof_to_packet_nr[np.asarray(dofs, dtype=np.int64)] = p
    if isinstance(thread_assignments, tuple) and len(thread_assignments) == 2:
        thread_of_row, rank_of_row = thread_assignments
    else:
        thread_of_row = np.zeros(h, dtype=np.int64)
        rank_of_row = np.zeros(h, dtype=np.int64)
        for t, rows in enumerate(thread_assignments):
            for k, r in enumerate(rows):
                thread_of_row[r] = t
                rank_of_row[r] = k
    base = np.zeros(len(packet_nr_to_dofs) + 1, dtype=np.int64)
    base[1:] = np.cumsum([len(d) for d in packet_nr_to_dofs])
    ts, te, ia, da = build_pkt_host_arrays(
        csr_mat,
        dof_to_packet_nr,
        packet_nr_to_dofs,
        np.asarray(old2new_fetch_indices),
        base,
        thread_of_row,
        rank_of_row,
        spmv.threads_per_packet,
        spmv.dtype,
        spmv.index_dtype,
        spmv.packed_index_dtype,
    )
    spmv.thread_starts = gpuarray.to_gpu(ts)
    spmv.thread_ends = gpuarray.to_gpu(te)
    spmv.index_array = gpuarray.to_gpu(ia)
    spmv.data_array = gpuarray.to_gpu(da)
