"""The pieces of pygpu.compiler (the module users import, which re-exports
every name they define): sourcemodule (SourceModule, CudaModule and their
memo).

pygpu.compiler is imported first, whichever piece is asked for: it imports
the pieces after its own definitions."""

import pygpu.compiler  # noqa: F401
