"""Linear operators for the CG solver (PyCUDA's pycuda.sparse.operator)."""

__all__ = ["OperatorBase", "IdentityOperator", "DiagonalPreconditioner", "IdentityPreconditioner"]


class OperatorBase:
    """An n x n linear operator: ``dtype``, ``shape`` and ``op(x)`` for a
    GPUArray x."""

    @property
    def dtype(self):
        raise NotImplementedError

    @property
    def shape(self):
        raise NotImplementedError

    def __call__(self, operand):
        raise NotImplementedError


class IdentityOperator(OperatorBase):
    """The identity: ``op(x)`` is x itself (no copy)."""

    def __init__(self, dtype, n):
        self.my_dtype = dtype
        self.n = n

    @property
    def dtype(self):
        return self.my_dtype

    @property
    def shape(self):
        return self.n, self.n

    def __call__(self, operand):
        return operand


#: the identity as a preconditioner (what the solver uses without one)
IdentityPreconditioner = IdentityOperator


class DiagonalPreconditioner(OperatorBase):
    """Multiplication by a diagonal, given as a GPUArray: pass the inverse of
    the matrix's diagonal (in the solver's ordering: for PacketedSpMV,
    ``spmv.permute(inv_diag)``) for Jacobi preconditioning."""

    def __init__(self, diagonal):
        self.diagonal = diagonal

    @property
    def dtype(self):
        return self.diagonal.dtype

    @property
    def shape(self):
        n = self.diagonal.shape[0]
        return n, n

    def __call__(self, operand):
        return self.diagonal * operand
