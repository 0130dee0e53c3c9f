/* compile/: the CUDA Module, NVRTC, nvJitLink, the linker.  Included by pygpu.h. */
#ifndef PYGPU_COMPILE_H
#define PYGPU_COMPILE_H

typedef struct {
    PyObject_HEAD CUmodule handle; /* owned */
    pygpu_Context *context;        /* strong ref */
    PyObject *functions;           /* dict name -> Function (cache) */
    PyObject *info_log;            /* str */
    int unloaded;
} pygpu_Module;

int pygpu_module_setup(PyObject *m, pygpu_state *st);
int pygpu_nvrtc_setup(PyObject *m, pygpu_state *st);
int pygpu_nvjitlink_setup(PyObject *m, pygpu_state *st);
int pygpu_linker_setup(PyObject *m, pygpu_state *st);

#endif
