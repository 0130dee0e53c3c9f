/* The least a Python binding can do per launch, as a yardstick for
 * run.py's launch rows: a METH_FASTCALL function of a C extension taking
 * (CUfunction as int, device pointer as int, n, a), no checks at all,
 * packing on the C stack and calling cuLaunchKernel (grid 1, block 32, the
 * legacy stream); raw_ex the same through cuLaunchKernelEx.  Built and imported by run.py (build_least_binding). */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <cuda.h>
static PyObject *
raw(PyObject *m, PyObject *const *args, Py_ssize_t nargs)
{
    CUfunction f = (CUfunction)PyLong_AsVoidPtr(args[0]);
    CUdeviceptr d = (CUdeviceptr)PyLong_AsUnsignedLongLong(args[1]);
    int n = (int)PyLong_AsLong(args[2]);
    float a = (float)PyFloat_AsDouble(args[3]);
    void *params[3] = {&d, &n, &a};
    CUresult rc = cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, NULL, params, NULL);
    if (rc != CUDA_SUCCESS) { PyErr_Format(PyExc_RuntimeError, "rc %d", (int)rc); return NULL; }
    Py_RETURN_NONE;
}
/* the same through cuLaunchKernelEx with no attributes, pygpu's entry point */
static PyObject *
raw_ex(PyObject *m, PyObject *const *args, Py_ssize_t nargs)
{
    CUfunction f = (CUfunction)PyLong_AsVoidPtr(args[0]);
    CUdeviceptr d = (CUdeviceptr)PyLong_AsUnsignedLongLong(args[1]);
    int n = (int)PyLong_AsLong(args[2]);
    float a = (float)PyFloat_AsDouble(args[3]);
    void *params[3] = {&d, &n, &a};
    CUlaunchConfig lc = {1, 1, 1, 32, 1, 1, 0, NULL, NULL, 0};
    CUresult rc = cuLaunchKernelEx(&lc, f, params, NULL);
    if (rc != CUDA_SUCCESS) { PyErr_Format(PyExc_RuntimeError, "rc %d", (int)rc); return NULL; }
    Py_RETURN_NONE;
}
static PyMethodDef methods[] = {
    {"raw", (PyCFunction)(void (*)(void))raw, METH_FASTCALL, NULL},
    {"raw_ex", (PyCFunction)(void (*)(void))raw_ex, METH_FASTCALL, NULL},
    {NULL}};
static struct PyModuleDef def = {PyModuleDef_HEAD_INIT, "least_binding", NULL, -1, methods};
PyMODINIT_FUNC PyInit_least_binding(void) { return PyModule_Create(&def); }
