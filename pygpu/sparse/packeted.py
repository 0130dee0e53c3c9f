"""The packeted sparse matrix-vector product (PyCUDA's
pycuda.sparse.packeted): ``PacketedSpMV(mat, is_symmetric, dtype)``.

The rows are partitioned into packets small enough for a block's shared
memory (pymetis where installed, else reverse Cuthill-McKee: see
:func:`pygpu.sparse.pkt_build.partition`) and renumbered packet by packet.
The product works in that numbering: ``spmv(spmv.permute(x))`` is
``spmv.permute(A @ x)``; ``spmv.unpermute`` goes back.  Calling it adds
A x to y (zeros when not given) and returns y.
"""

from typing import Any

import numpy as np

import pygpu.gpuarray as gpuarray
from pygpu.compiler import SourceModule
from pygpu.sparse import pkt_build
from pygpu.tools import DeviceData, dtype_to_ctype

__all__ = ["PacketedSpMV", "PKT_KERNEL_TEMPLATE"]

_INT32_MAX = 2**31 - 1

PKT_KERNEL_TEMPLATE = """
typedef %(index_type)s index_type;
typedef %(value_type)s value_type;
typedef %(packed_index_type)s packed_index_type;

#define ROWS_PER_PACKET %(rows_per_packet)d
#define THREADS_PER_PACKET %(threads_per_packet)d

#define pkt_unpack_row_index(packed_index) ((packed_index) >> 16)
#define pkt_unpack_col_index(packed_index) ((packed_index) & 0xFFFF)

template <typename IndexType, typename ValueType>
__device__ void copy_to_from(ValueType *dest, const ValueType *src, const IndexType n)
{
    for (IndexType i = threadIdx.x; i < n; i += blockDim.x)
        dest[i] = src[i];
}

/* one block per packet: its rows' x and y in shared memory; thread t adds
   the entries of the rows it owns, at thread_starts[t], + T, ... */
extern "C" __global__ void __launch_bounds__(THREADS_PER_PACKET)
spmv_pkt_kernel(const index_type *row_ptr,
                const index_type *pos_start,
                const index_type *pos_end,
                const packed_index_type *index_array,
                const value_type *data_array,
                const value_type *x,
                value_type *y)
{
    __shared__ value_type s_x[ROWS_PER_PACKET];
    __shared__ value_type s_y[ROWS_PER_PACKET];

    const index_type thread_id = THREADS_PER_PACKET * blockIdx.x + threadIdx.x;
    const index_type packet_base_row = row_ptr[blockIdx.x];
    const index_type packet_num_rows = row_ptr[blockIdx.x + 1] - packet_base_row;

    copy_to_from(s_x, x + packet_base_row, packet_num_rows);
    copy_to_from(s_y, y + packet_base_row, packet_num_rows);
    __syncthreads();

    const index_type packet_end = pos_end[thread_id];
    for (index_type pos = pos_start[thread_id]; pos < packet_end; pos += THREADS_PER_PACKET) {
        const packed_index_type packed_index = index_array[pos];
        s_y[pkt_unpack_row_index(packed_index)] +=
            data_array[pos] * s_x[pkt_unpack_col_index(packed_index)];
    }
    __syncthreads();

    copy_to_from(y + packet_base_row, s_y, packet_num_rows);
}
"""


class PacketedSpMV:
    """A square sparse matrix on the GPU in the packeted format.

    mat: anything scipy.sparse.csr_matrix takes; is_symmetric: whether its
    pattern is (else the partition uses A + A^T); dtype: float32 or
    float64.  partition (pygpu's, keyword-only): "metis", "rcm",
    "contiguous" or None (metis if pymetis is installed, else rcm).
    threads_per_packet / rows_per_packet (pygpu's): override the device's
    defaults (its max threads per block; what two shared arrays of dtype
    fit in a block's shared memory, less 100 bytes).
    """

    def __init__(
        self,
        mat: Any,
        is_symmetric: bool,
        dtype: "np.typing.DTypeLike",
        *,
        partition: Any = None,
        threads_per_packet: "int | None" = None,
        rows_per_packet: "int | None" = None,
    ) -> None:
        self.dtype = np.dtype(dtype)
        if self.dtype not in (np.dtype(np.float32), np.dtype(np.float64)):
            raise TypeError("PacketedSpMV supports float32 and float64, not %s" % self.dtype)
        self.index_dtype = np.dtype(np.int32)
        self.packed_index_dtype = np.dtype(np.uint32)
        if len(getattr(mat, "shape", ())) != 2 or mat.shape[0] != mat.shape[1]:
            raise ValueError(
                "only square matrices are supported, got shape %r" % (getattr(mat, "shape", None),)
            )
        # the packets index rows, thread ranges and entries with int32: refuse
        # what does not fit rather than wrap it (docs/design.md, index widths)
        nnz = int(getattr(mat, "nnz", 0))
        if mat.shape[0] > _INT32_MAX or nnz > _INT32_MAX:
            raise ValueError(
                "PacketedSpMV indexes with int32: a matrix of shape %r with %d nonzeros "
                "does not fit; use CoordinateSpMV, which indexes with int64 where needed"
                % (tuple(mat.shape), nnz)
            )
        devdata = DeviceData()
        if threads_per_packet is None:
            threads_per_packet = devdata.max_threads
        if rows_per_packet is None:
            rows_per_packet = (min(devdata.shared_memory, 48 * 1024) - 100) // (
                2 * self.dtype.itemsize
            )
        if 2 * rows_per_packet * self.dtype.itemsize > 48 * 1024:
            raise ValueError(
                "rows_per_packet=%d needs %d bytes of static shared memory; "
                "at most 49152" % (rows_per_packet, 2 * rows_per_packet * self.dtype.itemsize)
            )
        plan = pkt_build.make_plan(
            mat, is_symmetric, self.dtype, threads_per_packet, rows_per_packet, partition
        )
        self.plan = plan
        self.shape = plan.shape
        self.threads_per_packet = plan.threads_per_packet
        self.rows_per_packet = plan.rows_per_packet
        self.block_count = plan.block_count
        self.thread_starts = gpuarray.to_gpu(plan.thread_starts)
        self.thread_ends = gpuarray.to_gpu(plan.thread_ends)
        self.index_array = gpuarray.to_gpu(plan.index_array)
        self.data_array = gpuarray.to_gpu(plan.data_array)
        self.packet_base_rows = gpuarray.to_gpu(plan.packet_base_rows)
        self.new2old_fetch_indices = gpuarray.to_gpu(plan.new2old_fetch_indices)
        self.old2new_fetch_indices = gpuarray.to_gpu(plan.old2new_fetch_indices)

        from pygpu.sparse.coordinate import CoordinateSpMV

        self.remaining_coo_gpu = CoordinateSpMV(plan.remaining_coo, self.dtype)

    # the host-side steps under PyCUDA's names (pygpu.sparse.pkt_build has them)
    def find_simple_index_stuff(self, packet_nr_to_dofs):
        """(new2old_fetch_indices, old2new_fetch_indices, packet_base_rows)."""
        return pkt_build.find_simple_index_stuff(packet_nr_to_dofs, self.shape[0], self.index_dtype)

    def find_local_row_costs_and_remaining_coo(
        self, csr_mat, dof_to_packet_nr, old2new_fetch_indices
    ):
        """(local_row_costs, remaining_coo)."""
        return pkt_build.find_local_row_costs_and_remaining_coo(
            csr_mat, np.asarray(dof_to_packet_nr), np.asarray(old2new_fetch_indices), self.dtype
        )

    def find_thread_assignment(self, packet_nr_to_dofs, local_row_cost, thread_count):
        """(thread_assignments, thread_costs): per thread, the rows it owns."""
        thread_of_row, rank_of_row, costs = pkt_build.find_thread_assignment(
            packet_nr_to_dofs, local_row_cost, self.threads_per_packet
        )
        assignments = [[] for _ in range(thread_count)]
        for r in np.lexsort((rank_of_row, thread_of_row)):
            assignments[int(thread_of_row[r])].append(int(r))
        return assignments, costs.astype(np.float64)

    def build_gpu_data_structure(
        self,
        packet_nr_to_dofs,
        max_thread_costs,
        old2new_fetch_indices,
        csr_mat,
        thread_count,
        thread_assignments,
        local_row_costs,
    ):
        """Rebuild and upload the packed arrays (pkt_build.build_pkt_data_structure)."""
        pkt_build.build_pkt_data_structure(
            self,
            packet_nr_to_dofs,
            max_thread_costs,
            old2new_fetch_indices,
            csr_mat,
            thread_count,
            thread_assignments,
            local_row_costs,
        )

    # execution
    def get_kernel(self):
        """The packet kernel, prepared (compiled once per object)."""
        if getattr(self, "_kernel", None) is None:
            mod = SourceModule(
                PKT_KERNEL_TEMPLATE
                % {
                    "value_type": dtype_to_ctype(self.dtype),
                    "index_type": dtype_to_ctype(self.index_dtype),
                    "packed_index_type": dtype_to_ctype(self.packed_index_dtype),
                    "threads_per_packet": self.threads_per_packet,
                    "rows_per_packet": self.rows_per_packet,
                },
                no_extern_c=True,
            )
            func = mod.get_function("spmv_pkt_kernel")
            func.prepare("PPPPPPP")
            self._kernel = func
        return self._kernel

    def permute(self, x: "gpuarray.GPUArray") -> "gpuarray.GPUArray":
        """x (original numbering) in the packets' numbering."""
        return gpuarray.take(x, self.new2old_fetch_indices)

    def unpermute(self, x: "gpuarray.GPUArray") -> "gpuarray.GPUArray":
        """x (packets' numbering) back in the original numbering."""
        return gpuarray.take(x, self.old2new_fetch_indices)

    def __call__(
        self, x: "gpuarray.GPUArray", y: "gpuarray.GPUArray | None" = None
    ) -> "gpuarray.GPUArray":
        from pygpu.sparse.coordinate import _check_vector, _gated

        _check_vector(x, self.shape[0], self.dtype, "x")
        if y is None:
            y = gpuarray.zeros(self.shape[0], dtype=self.dtype, allocator=x.allocator)
        else:
            _check_vector(y, self.shape[0], self.dtype, "y")
        if self.block_count:
            # array objects through the operand gate, never raw addresses
            self.get_kernel().prepared_call(
                (self.block_count, 1),
                (self.threads_per_packet, 1, 1),
                *_gated(
                    "PacketedSpMV",
                    self.packet_base_rows,
                    self.thread_starts,
                    self.thread_ends,
                    self.index_array,
                    self.data_array,
                    x,
                    y,
                ),
            )
        self.remaining_coo_gpu(x, y)
        return y
