"""pygpu.sparse: sparse matrix-vector products and a conjugate gradient
solver on the GPU, shaped like pycuda.sparse.

- :mod:`pygpu.sparse.packeted`: :class:`~pygpu.sparse.packeted.PacketedSpMV`,
  the packeted format (rows partitioned into packets that fit in shared
  memory; the entries coupling two packets go through the coordinate format).
- :mod:`pygpu.sparse.coordinate`: :class:`~pygpu.sparse.coordinate.CoordinateSpMV`.
- :mod:`pygpu.sparse.operator`: ``IdentityOperator``, ``DiagonalPreconditioner``
  (and ``IdentityPreconditioner``).
- :mod:`pygpu.sparse.cg`: ``solve_pkt_with_cg``, ``CGStateContainer``,
  ``ConvergenceError``.
- :mod:`pygpu.sparse.inner`: ``AsyncInnerProduct``.
- :mod:`pygpu.sparse.pkt_build`: the host-side packeting (partition, thread
  assignment, the packed arrays), in NumPy (``pkt_build_cython``, PyCUDA's
  Cython build of it, gives the same function).

Partitioning uses pymetis where it is installed (as PyCUDA does); without
it, a reverse Cuthill-McKee ordering (SciPy) cut into contiguous packets.
SciPy is needed (the matrices come in as scipy.sparse or anything
``scipy.sparse.csr_matrix`` takes).  Unlike PyCUDA, importing it warns of no
deprecation.
"""

__all__ = ["cg", "coordinate", "inner", "operator", "packeted", "pkt_build", "pkt_build_cython"]
