"""Sparse matrix-vector products in the coordinate (COO) format (PyCUDA's
pycuda.sparse.coordinate): ``CoordinateSpMV(mat, dtype)(x, y=None)`` adds
A x to y (zeros when not given) and returns y.

PyCUDA reads x through a texture reference, which CUDA 12 removed; here the
flat kernel reads x directly and adds each product with atomicAdd (native
for float, and for double on sm_60 and newer), grid-stride over the
nonzeros [0, tail); the serial kernel takes the rest [tail, nnz) (empty
unless tail is set lower), as in PyCUDA.
"""

from typing import Any

import numpy as np

import pygpu.driver as drv
import pygpu.gpuarray as gpuarray
from pygpu.compiler import SourceModule
from pygpu.tools import dtype_to_ctype

__all__ = ["CoordinateSpMV", "COO_FLAT_KERNEL_TEMPLATE", "COO_SERIAL_KERNEL_TEMPLATE"]

COO_FLAT_KERNEL_TEMPLATE = """
typedef %(value_type)s value_type;
typedef %(index_type)s index_type;

extern "C" __global__ void __launch_bounds__(%(block_size)d)
spmv_coo_flat_kernel(const index_type num_nonzeros,
                     const index_type interval_size,
                     const index_type *I, const index_type *J,
                     const value_type *V, const value_type *x,
                     value_type *y)
{
    (void) interval_size;
    for (long long n = (long long) blockIdx.x * blockDim.x + threadIdx.x;
         n < num_nonzeros; n += (long long) gridDim.x * blockDim.x)
        atomicAdd(y + I[n], V[n] * x[J[n]]);
}
"""

COO_SERIAL_KERNEL_TEMPLATE = """
typedef %(value_type)s value_type;
typedef %(index_type)s index_type;

extern "C" __global__ void
spmv_coo_serial_kernel(const index_type num_nonzeros,
                       const index_type *I, const index_type *J,
                       const value_type *V, const value_type *x,
                       value_type *y)
{
    for (index_type n = 0; n < num_nonzeros; n++)
        y[I[n]] += V[n] * x[J[n]];
}
"""


def _gated(what, *arrays):
    """The kernel arguments for arrays, after the operand gate (gpuarray's
    _check_operands: freed memory, another context, elements outside their
    allocation): library code hands the gate array objects, never raw
    addresses, and passes the arrays themselves to the launch."""
    gpuarray._check_operands(what, arrays)
    return arrays


def _check_vector(v, n, dtype, what):
    if not isinstance(v, gpuarray.GPUArray):
        raise TypeError("%s must be a GPUArray, not %s" % (what, type(v).__name__))
    if v.shape != (n,):
        raise ValueError("%s must have shape (%d,), not %r" % (what, n, v.shape))
    if v.dtype != dtype:
        raise TypeError("%s must have dtype %s (the matrix's), not %s" % (what, dtype, v.dtype))
    if not v.flags.c_contiguous:
        raise ValueError("%s must be contiguous" % what)


class CoordinateSpMV:
    """A sparse matrix (anything scipy.sparse.coo_matrix takes) on the GPU
    in the coordinate format; calling it adds A x to y."""

    row_gpu: Any  # GPUArrays, or None for an empty matrix
    col_gpu: Any
    data_gpu: Any

    def __init__(self, mat: Any, dtype: "np.typing.DTypeLike") -> None:
        from scipy.sparse import coo_matrix

        self.dtype = np.dtype(dtype)
        if self.dtype not in (np.dtype(np.float32), np.dtype(np.float64)):
            raise TypeError("CoordinateSpMV supports float32 and float64, not %s" % self.dtype)
        self.shape = tuple(mat.shape)
        self.block_size = 128

        coo_mat = coo_matrix(mat, dtype=self.dtype)
        # int32 indices where every row, column and entry number fits, else
        # int64: an index is never narrowed past its type
        big = max(self.shape + (int(coo_mat.nnz),)) > 2**31 - 1
        self.index_dtype = np.dtype(np.int64 if big else np.int32)
        if coo_mat.nnz:
            # row-major order: neighbouring threads add to the same rows
            order = np.lexsort((coo_mat.col, coo_mat.row))
            row, col, data = coo_mat.row[order], coo_mat.col[order], coo_mat.data[order]
        else:
            row = col = np.zeros(0, dtype=self.index_dtype)
            data = np.zeros(0, dtype=self.dtype)
        self.nnz = int(coo_mat.nnz)
        if self.nnz:
            self.row_gpu = gpuarray.to_gpu(row.astype(self.index_dtype))
            self.col_gpu = gpuarray.to_gpu(col.astype(self.index_dtype))
            self.data_gpu = gpuarray.to_gpu(np.ascontiguousarray(data, dtype=self.dtype))
            dev = drv.Context.get_device()
            max_threads = dev.get_attribute(
                drv.device_attribute.MAX_THREADS_PER_MULTIPROCESSOR
            ) * dev.get_attribute(drv.device_attribute.MULTIPROCESSOR_COUNT)
            self.num_blocks = max(
                1,
                min(
                    (self.nnz + self.block_size - 1) // self.block_size,
                    4 * max_threads // self.block_size,
                ),
            )
            self.interval_size = (self.nnz + self.num_blocks - 1) // self.num_blocks
            self.tail = self.nnz
        else:
            self.row_gpu = self.col_gpu = self.data_gpu = None
            self.num_blocks = self.interval_size = self.tail = 0

    def _source_args(self):
        return {
            "value_type": dtype_to_ctype(self.dtype),
            "index_type": dtype_to_ctype(self.index_dtype),
            "block_size": self.block_size,
        }

    def get_flat_kernel(self):
        """The grid-stride atomic kernel, prepared (compiled once per object)."""
        if getattr(self, "_flat", None) is None:
            mod = SourceModule(COO_FLAT_KERNEL_TEMPLATE % self._source_args(), no_extern_c=True)
            func = mod.get_function("spmv_coo_flat_kernel")
            func.prepare(2 * self.index_dtype.char + "PPPPP")
            self._flat = func
        return self._flat

    def get_serial_kernel(self):
        """The one-thread kernel for the entries from tail on, prepared."""
        if getattr(self, "_serial", None) is None:
            mod = SourceModule(COO_SERIAL_KERNEL_TEMPLATE % self._source_args(), no_extern_c=True)
            func = mod.get_function("spmv_coo_serial_kernel")
            func.prepare(self.index_dtype.char + "PPPPP")
            self._serial = func
        return self._serial

    def __call__(
        self, x: "gpuarray.GPUArray", y: "gpuarray.GPUArray | None" = None
    ) -> "gpuarray.GPUArray":
        n = self.shape[1]
        _check_vector(x, n, self.dtype, "x")
        if y is None:
            y = gpuarray.zeros(self.shape[0], dtype=self.dtype, allocator=x.allocator)
        else:
            _check_vector(y, self.shape[0], self.dtype, "y")
        if self.nnz == 0:
            return y
        # array objects through the operand gate, never raw addresses
        if self.tail:
            self.get_flat_kernel().prepared_call(
                (self.num_blocks, 1),
                (self.block_size, 1, 1),
                self.tail,
                self.interval_size,
                *_gated("CoordinateSpMV", self.row_gpu, self.col_gpu, self.data_gpu, x, y),
            )
        if self.nnz > self.tail:
            t = self.tail
            self.get_serial_kernel().prepared_call(
                (1, 1),
                (1, 1, 1),
                self.nnz - t,
                *_gated(
                    "CoordinateSpMV",
                    self.row_gpu[t:],
                    self.col_gpu[t:],
                    self.data_gpu[t:],
                    x,
                    y,
                ),
            )
        return y
