"""pygpu.compyte: the helpers PyCUDA shares with PyOpenCL, under PyCUDA's
names (pycuda.compyte): ``dtypes``, the registry of C type names of NumPy
dtypes, and ``array``, stride and flag helpers for array-like objects."""
