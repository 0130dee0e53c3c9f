"""The pieces of pygpu.gpuarray (the module users import, which re-exports
every name defined here): layout (vector types, splay, strides, flags),
gate (the operand gate), copies, operators (the element-wise machinery),
functions (the module functions) and foreign (asarray).

pygpu.gpuarray is imported first, whichever piece is asked for: it imports
the pieces in their order and defines GPUArray between them."""

import pygpu.gpuarray  # noqa: F401
