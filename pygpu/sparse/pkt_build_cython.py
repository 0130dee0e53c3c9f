"""PyCUDA's pycuda.sparse.pkt_build_cython, the Cython build of the packed
arrays: pygpu's NumPy build (pygpu.sparse.pkt_build) is vectorised already,
so this module gives the same function under PyCUDA's name."""

from pygpu.sparse.pkt_build import build_pkt_data_structure

__all__ = ["build_pkt_data_structure"]
