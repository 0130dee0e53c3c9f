"""Linear operators for the CG solver (PyCUDA's pycuda.sparse.operator)."""

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # annotations only
    import numpy as np

    import pygpu.gpuarray as gpuarray

__all__ = ["OperatorBase", "IdentityOperator", "DiagonalPreconditioner", "IdentityPreconditioner"]


class OperatorBase:
    """An n x n linear operator: ``dtype``, ``shape`` and ``op(x)`` for a
    GPUArray x."""

    @property
    def dtype(self) -> "np.dtype[Any]":
        raise NotImplementedError

    @property
    def shape(self) -> "tuple[int, int]":
        raise NotImplementedError

    def __call__(self, operand: "gpuarray.GPUArray") -> "gpuarray.GPUArray":
        raise NotImplementedError


class IdentityOperator(OperatorBase):
    """The identity: ``op(x)`` is x itself (no copy)."""

    def __init__(self, dtype: "np.typing.DTypeLike", n: int) -> None:
        self.my_dtype = dtype
        self.n = n

    @property
    def dtype(self) -> Any:  # the dtype given
        return self.my_dtype

    @property
    def shape(self) -> "tuple[int, int]":
        return self.n, self.n

    def __call__(self, operand: "gpuarray.GPUArray") -> "gpuarray.GPUArray":
        return operand


#: the identity as a preconditioner (what the solver uses without one)
IdentityPreconditioner = IdentityOperator


class DiagonalPreconditioner(OperatorBase):
    """Multiplication by a diagonal, given as a GPUArray: pass the inverse of
    the matrix's diagonal (in the solver's ordering: for PacketedSpMV,
    ``spmv.permute(inv_diag)``) for Jacobi preconditioning."""

    def __init__(self, diagonal: "gpuarray.GPUArray") -> None:
        self.diagonal = diagonal

    @property
    def dtype(self) -> "np.dtype[Any]":
        return self.diagonal.dtype

    @property
    def shape(self) -> "tuple[int, int]":
        n = self.diagonal.shape[0]
        return n, n

    def __call__(self, operand: "gpuarray.GPUArray") -> "gpuarray.GPUArray":
        return self.diagonal * operand
