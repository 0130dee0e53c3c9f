/* core/: errors, the loader, fork, module helpers.  Included by pygpu.h. */
#ifndef PYGPU_CORE_H
#define PYGPU_CORE_H

/* errors.c */
PyObject *pygpu_cuda_error(pygpu_state *st, CUresult rc, const char *routine);
/* the same, with a sentence appended to the message (extra may be NULL) */
PyObject *pygpu_cuda_error_ex(pygpu_state *st, CUresult rc, const char *routine, const char *extra);
int pygpu_errors_setup(PyObject *m, pygpu_state *st);
/* Parse a Python int argument into an unsigned int / int: TypeError,
 * OverflowError naming `what` ("make_context(): flags") instead of
 * truncating.  Returns 0 or -1. */
int pygpu_parse_uint(PyObject *obj, unsigned int *out, const char *what);
int pygpu_parse_int(PyObject *obj, int *out, const char *what);
/* The arguments of a METH_FASTCALL | METH_KEYWORDS function by name
 * (names ends with NULL; the first nreq are required), as
 * PyArg_ParseTupleAndKeywords's "O" gives them but with no tuple or dict
 * made: out[i] is borrowed, NULL where not given.  0, or -1 with the
 * TypeError CPython's own parser would raise. */
int pygpu_fast_args(const char *fname, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames,
                    const char *const *names, Py_ssize_t nreq, PyObject **out);

/* loader.c: pygpu_ensure_driver() loads libcuda and calls cuInit once per
 * process; returns 0, or -1 with CudaUnavailableError set.  GIL held. */
int pygpu_ensure_driver(pygpu_state *st);
int pygpu_nvrtc_loaded(void);
int pygpu_loader_setup(PyObject *m);

/* the CU_OPTIONAL entry point is there, or a LogicError naming what needs it */
int pygpu_need_entry(pygpu_state *st, const void *fn, const char *routine, const char *what);
/* loader.c: after fork() in a child of a process that had initialised CUDA:
 * every later driver entry raises CudaUnavailableError saying so.  Returns
 * 1 if the driver had been initialised, else 0. */
int pygpu_driver_forked(void);
/* nonzero in such a child (for messages) */
extern int pygpu_forked_from;
/* Add a heap type made from spec to the module and store it in *slot. */
int pygpu_add_type(PyObject *m, PyType_Spec *spec, PyTypeObject **slot);
int pygpu_fork_setup(PyObject *m, pygpu_state *st);

#endif
