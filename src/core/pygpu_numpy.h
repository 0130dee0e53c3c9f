/* NumPy C API for the files that use it; hostmem.c imports it. */
#ifndef PYGPU_NUMPY_H
#define PYGPU_NUMPY_H
#define NPY_NO_DEPRECATED_API NPY_1_7_API_VERSION
#define PY_ARRAY_UNIQUE_SYMBOL pygpu_ARRAY_API
#ifndef PYGPU_IMPORT_ARRAY
#define NO_IMPORT_ARRAY
#endif
#include <numpy/arrayobject.h>
#include <numpy/arrayscalars.h>
#ifndef NPY_2_0_API_VERSION
#define PyDataType_ELSIZE(d) ((d)->elsize) /* NumPy 1.x headers */
#endif
#endif
