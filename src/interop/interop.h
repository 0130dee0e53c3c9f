/* interop/: OpenGL, NVTX, the profiler.  Included by pygpu.h. */
#ifndef PYGPU_INTEROP_H
#define PYGPU_INTEROP_H

int pygpu_nvtx_setup(PyObject *m, pygpu_state *st);
/* graphics.c: OpenGL interop (RegisteredBuffer, RegisteredImage, RegisteredMapping) */
int pygpu_graphics_setup(PyObject *m, pygpu_state *st);

/* nccl.c: NCCL's collectives from C (NcclComm, _nccl_load, group calls) */
int pygpu_nccl_setup(PyObject *m, pygpu_state *st);

#endif
