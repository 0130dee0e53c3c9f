/* The one scalar conversion (docs/design.md, "Rules that hold across
 * files"): a Python int becomes a kernel parameter here, for every launch
 * pygpu makes -- __call__, prepared calls, graph nodes, the C operators and
 * the Python array path (whose kernels are prepared with their dtypes).
 *
 * Where the parameter's type is known (prepare()'s type code: a dtype's
 * char or a struct code), NumPy 2's rule applies (NEP 50): a Python int out
 * of the type's range is an OverflowError ("Python integer 200 out of
 * bounds for int8"), never its value modulo 2**bits.  Where only the size is
 * known (cuFuncGetParamInfo, no prepare()), the value must fit the size as
 * a signed or an unsigned integer (an int8 parameter takes -128..255). */
#include "pygpu.h"
#include <stdint.h>
#include <string.h>

int
pygpu_int_code_range(char code, long long *lo, unsigned long long *hi, const char **name)
{
    switch (code) {
    case 'b': *lo = INT8_MIN, *hi = INT8_MAX, *name = "int8"; return 1;
    case 'B': *lo = 0, *hi = UINT8_MAX, *name = "uint8"; return 1;
    case 'h': *lo = INT16_MIN, *hi = INT16_MAX, *name = "int16"; return 1;
    case 'H': *lo = 0, *hi = UINT16_MAX, *name = "uint16"; return 1;
    case 'i': *lo = INT32_MIN, *hi = INT32_MAX, *name = "int32"; return 1;
    case 'I': *lo = 0, *hi = UINT32_MAX, *name = "uint32"; return 1;
    case 'l':
    case 'q':
    case 'n': *lo = INT64_MIN, *hi = INT64_MAX, *name = "int64"; return 1;
    case 'L':
    case 'Q':
    case 'N': *lo = 0, *hi = UINT64_MAX, *name = "uint64"; return 1;
    default: return 0;
    }
}

int
pygpu_scalar_pack_int(PyObject *fn, int i, PyObject *obj, char code, char *dst, size_t size)
{
    int overflow = 0;
    long long v = PyLong_AsLongLongAndOverflow(obj, &overflow), lo;
    unsigned long long u = 0, hi;
    const char *name;
    if (v == -1 && PyErr_Occurred())
        return -1;
    if (size != 1 && size != 2 && size != 4 && size != 8) {
        PyErr_Format(PyExc_TypeError,
                     "kernel '%U': parameter %d is %zu bytes, which a Python int cannot "
                     "fill; pass a NumPy scalar or bytes of that size",
                     fn, i, size);
        return -1;
    }
    if (overflow > 0) {
        u = PyLong_AsUnsignedLongLong(obj);
        if (u == (unsigned long long)-1 && PyErr_Occurred()) {
            PyErr_Clear();
            goto out_of_range;
        }
    } else if (overflow < 0) {
        goto out_of_range;
    } else {
        u = (unsigned long long)v;
    }
    if (pygpu_int_code_range(code, &lo, &hi, &name)) {
        /* NumPy 2: the value must be one of the type's */
        if ((overflow == 0 && v < 0) ? v < lo : u > hi)
            goto out_of_range;
    } else if (size < 8 && overflow == 0) {
        /* only the size is known: signed or unsigned */
        long long smin = -(1LL << (size * 8 - 1)), umax = (long long)((1ULL << (size * 8)) - 1);
        if (size == 0 || v < smin || v > umax)
            goto out_of_range;
    } else if (size != 8) {
        goto out_of_range;
    }
    switch (size) {
    case 8: memcpy(dst, &u, 8); return 0;
    case 4: {
        uint32_t x = (uint32_t)u;
        memcpy(dst, &x, 4);
        return 0;
    }
    case 2: {
        uint16_t x = (uint16_t)u;
        memcpy(dst, &x, 2);
        return 0;
    }
    case 1: {
        uint8_t x = (uint8_t)u;
        memcpy(dst, &x, 1);
        return 0;
    }
    default:
        PyErr_Format(PyExc_TypeError,
                     "kernel '%U': parameter %d is %zu bytes, which a Python int cannot "
                     "fill; pass a NumPy scalar or bytes of that size",
                     fn, i, size);
        return -1;
    }
out_of_range:
    if (pygpu_int_code_range(code, &lo, &hi, &name))
        PyErr_Format(PyExc_OverflowError,
                     "kernel '%U': parameter %d: Python integer %R out of bounds for %s", fn, i,
                     obj, name);
    else
        PyErr_Format(PyExc_OverflowError, "kernel '%U': parameter %d is %zu bytes; %R does not fit",
                     fn, i, size, obj);
    return -1;
}

/* _driver._scalar_check(value, code): the same rule for Python code that
 * converts a scalar without a launch: None, or OverflowError in NumPy's
 * words ("Python integer 200 out of bounds for int8"). */
static PyObject *
scalar_check(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    long long lo;
    unsigned long long hi;
    const char *name, *code;
    int overflow = 0;
    long long v;
    if (nargs != 2 || !PyLong_Check(args[0]) || !PyUnicode_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "_scalar_check(value: int, code: str)");
        return NULL;
    }
    if ((code = PyUnicode_AsUTF8(args[1])) == NULL)
        return NULL;
    if (code[0] == '\0' || code[1] != '\0' || !pygpu_int_code_range(code[0], &lo, &hi, &name))
        Py_RETURN_NONE; /* no integer type: nothing to check */
    v = PyLong_AsLongLongAndOverflow(args[0], &overflow);
    if (v == -1 && PyErr_Occurred())
        return NULL;
    if (overflow > 0) {
        unsigned long long u = PyLong_AsUnsignedLongLong(args[0]);
        if (!(u == (unsigned long long)-1 && PyErr_Occurred()) && u <= hi)
            Py_RETURN_NONE;
        PyErr_Clear();
    } else if (overflow == 0 && v >= lo && (v < 0 || (unsigned long long)v <= hi)) {
        Py_RETURN_NONE;
    }
    PyErr_Format(PyExc_OverflowError, "Python integer %R out of bounds for %s", args[0], name);
    return NULL;
}

static PyMethodDef scalars_methods[] = {
    {"_scalar_check", (PyCFunction)(void (*)(void))scalar_check, METH_FASTCALL,
     "_scalar_check($module, value, code, /)\n--\n\nNumPy 2's rule for a Python int "
     "given as a scalar of type code (a dtype's char): OverflowError when out of range."},
    {NULL},
};

int
pygpu_scalars_setup(PyObject *m, pygpu_state *st)
{
    return PyModule_AddFunctions(m, scalars_methods);
}
