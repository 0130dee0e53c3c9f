/* CUresult -> Python exception.
 *
 * Error is the base, with .code (the CUresult number), .name
 * ("CUDA_ERROR_OUT_OF_MEMORY") and .routine ("cuMemAlloc").  The subclasses
 * follow PyCUDA's grouping.
 */
#include "pygpu.h"
#include "core/cuda_enums.h"

static int
is_sticky(CUresult rc)
{
    switch (rc) {
    case CUDA_ERROR_ILLEGAL_ADDRESS:
    case CUDA_ERROR_LAUNCH_FAILED:
    case CUDA_ERROR_MISALIGNED_ADDRESS:
    case CUDA_ERROR_HARDWARE_STACK_ERROR:
    case CUDA_ERROR_ILLEGAL_INSTRUCTION:
    case CUDA_ERROR_INVALID_ADDRESS_SPACE:
    case CUDA_ERROR_INVALID_PC:
    case CUDA_ERROR_ASSERT: return 1;
    default: return 0;
    }
}

static PyObject *
class_for(pygpu_state *st, CUresult rc)
{
    switch (rc) {
    case CUDA_ERROR_OUT_OF_MEMORY: return st->MemoryError;
    case CUDA_ERROR_LAUNCH_FAILED:
    case CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES:
    case CUDA_ERROR_LAUNCH_TIMEOUT:
    case CUDA_ERROR_LAUNCH_INCOMPATIBLE_TEXTURING:
    case CUDA_ERROR_ILLEGAL_ADDRESS:
    case CUDA_ERROR_MISALIGNED_ADDRESS:
    case CUDA_ERROR_HARDWARE_STACK_ERROR:
    case CUDA_ERROR_ILLEGAL_INSTRUCTION:
    case CUDA_ERROR_INVALID_ADDRESS_SPACE:
    case CUDA_ERROR_INVALID_PC:
    case CUDA_ERROR_ASSERT:
    case CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE: return st->LaunchError;
    case CUDA_ERROR_INVALID_VALUE:
    case CUDA_ERROR_NOT_INITIALIZED:
    case CUDA_ERROR_DEINITIALIZED:
    case CUDA_ERROR_INVALID_DEVICE:
    case CUDA_ERROR_INVALID_IMAGE:
    case CUDA_ERROR_INVALID_CONTEXT:
    case CUDA_ERROR_CONTEXT_ALREADY_CURRENT:
    case CUDA_ERROR_ALREADY_MAPPED:
    case CUDA_ERROR_NOT_MAPPED:
    case CUDA_ERROR_ALREADY_ACQUIRED:
    case CUDA_ERROR_NOT_MAPPED_AS_ARRAY:
    case CUDA_ERROR_NOT_MAPPED_AS_POINTER:
    case CUDA_ERROR_INVALID_SOURCE:
    case CUDA_ERROR_FILE_NOT_FOUND:
    case CUDA_ERROR_INVALID_HANDLE:
    case CUDA_ERROR_NOT_FOUND:
    case CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED:
    case CUDA_ERROR_PEER_ACCESS_NOT_ENABLED:
    case CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE:
    case CUDA_ERROR_CONTEXT_IS_DESTROYED:
    case CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED:
    case CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED:
    case CUDA_ERROR_NOT_SUPPORTED:
    case CUDA_ERROR_NOT_PERMITTED:
    case CUDA_ERROR_INVALID_PTX:
    case CUDA_ERROR_UNSUPPORTED_PTX_VERSION:
    case CUDA_ERROR_NO_BINARY_FOR_GPU:
    case CUDA_ERROR_ILLEGAL_STATE:
    case CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED:
    case CUDA_ERROR_STREAM_CAPTURE_INVALIDATED:
    case CUDA_ERROR_STREAM_CAPTURE_MERGE:
    case CUDA_ERROR_STREAM_CAPTURE_UNMATCHED:
    case CUDA_ERROR_STREAM_CAPTURE_UNJOINED:
    case CUDA_ERROR_STREAM_CAPTURE_ISOLATION:
    case CUDA_ERROR_STREAM_CAPTURE_IMPLICIT:
    case CUDA_ERROR_CAPTURED_EVENT:
    case CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD:
    case CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE: return st->LogicError;
    default: return st->RuntimeError;
    }
}

/* Raise the exception for rc from routine; always returns NULL.  GIL held. */
/* What a stream-capture error means for a pygpu program (graph.c) */
static const char *
capture_hint(CUresult rc)
{
    switch (rc) {
    case CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED:
        return "this operation is not allowed while a stream is capturing a graph "
               "(synchronizing, synchronous copies and memsets, allocating in global "
               "mode); the capture is now invalid: call end_capture()";
    case CUDA_ERROR_STREAM_CAPTURE_INVALIDATED:
        return "the stream's capture was invalidated by an earlier operation that is "
               "illegal during capture; call end_capture() to end it";
    case CUDA_ERROR_STREAM_CAPTURE_IMPLICIT:
        return "a synchronous operation on the legacy default stream would wait for a "
               "capturing stream; use a non-blocking Stream or async calls while "
               "capturing (the capture is now invalid: call end_capture())";
    case CUDA_ERROR_STREAM_CAPTURE_UNJOINED:
        return "work forked from the capturing stream onto another stream was not joined "
               "back before end_capture() (record an event there and wait for it)";
    case CUDA_ERROR_STREAM_CAPTURE_ISOLATION:
    case CUDA_ERROR_STREAM_CAPTURE_MERGE:
    case CUDA_ERROR_STREAM_CAPTURE_UNMATCHED: return "streams of different captures were mixed";
    case CUDA_ERROR_CAPTURED_EVENT:
        return "an event recorded during capture cannot be queried or synchronized";
    case CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD:
        return "end_capture() must run on the thread that began a thread-local/global "
               "capture";
    default: return NULL;
    }
}

PyObject *
pygpu_cuda_error(pygpu_state *st, CUresult rc, const char *routine)
{
    return pygpu_cuda_error_ex(st, rc, routine, capture_hint(rc));
}

PyObject *
pygpu_cuda_error_ex(pygpu_state *st, CUresult rc, const char *routine, const char *extra)
{
    const char *name = NULL, *text = NULL;
    char namebuf[48];
    PyObject *cls = class_for(st, rc), *exc = NULL, *msg = NULL, *val = NULL;

    if (rc == CUDA_ERROR_INVALID_CONTEXT || rc == CUDA_ERROR_CONTEXT_IS_DESTROYED)
        pygpu_context_forget_current(); /* this thread's remembered answer may be stale */

    if (cu.cuGetErrorName == NULL || cu.cuGetErrorName(rc, &name) != CUDA_SUCCESS || name == NULL) {
        const pygpu_enum_entry *e;
        for (e = pygpu_enum_error_code; e->name != NULL; e++)
            if (e->value == (long long)rc)
                name = e->name;
        if (name == NULL) {
            snprintf(namebuf, sizeof namebuf, "CUDA_ERROR_%d", (int)rc);
            name = namebuf;
        }
    }
    if (cu.cuGetErrorString == NULL || cu.cuGetErrorString(rc, &text) != CUDA_SUCCESS
        || text == NULL)
        text = "no description (the driver is not loaded)";
    if (is_sticky(rc))
        msg =
            PyUnicode_FromFormat("%s failed: %s: %s (a kernel faulted; the context is now unusable "
                                 "and every later call in it fails: restart the process)",
                                 routine, name, text);
    else
        msg = PyUnicode_FromFormat("%s failed: %s: %s", routine, name, text);
    if (msg == NULL)
        return NULL;
    if (extra != NULL) {
        /* driver logs are not promised to be UTF-8 */
        PyObject *text = PyUnicode_DecodeUTF8(extra, (Py_ssize_t)strlen(extra), "replace");
        PyObject *full = text ? PyUnicode_FromFormat("%U; %U", msg, text) : NULL;
        Py_XDECREF(text);
        Py_DECREF(msg);
        if ((msg = full) == NULL)
            return NULL;
    }
    exc = PyObject_CallOneArg(cls, msg);
    Py_DECREF(msg);
    if (exc == NULL)
        return NULL;
    if ((val = PyLong_FromLong((long)rc)) == NULL || PyObject_SetAttrString(exc, "code", val) < 0)
        goto error;
    Py_DECREF(val);
    if ((val = PyUnicode_FromString(name)) == NULL || PyObject_SetAttrString(exc, "name", val) < 0)
        goto error;
    Py_DECREF(val);
    if ((val = PyUnicode_FromString(routine)) == NULL
        || PyObject_SetAttrString(exc, "routine", val) < 0)
        goto error;
    Py_DECREF(val);
    PyErr_SetObject(cls, exc);
    Py_DECREF(exc);
    return NULL;
error:
    Py_XDECREF(val);
    Py_DECREF(exc);
    return NULL;
}

/* _driver._raise_for_code(code, routine): raise the exception the C code
 * would raise (used by tests and by the Python layer). */
static PyObject *
errors_raise_for_code(PyObject *module, PyObject *args)
{
    int code;
    const char *routine;
    if (!PyArg_ParseTuple(args, "is:_raise_for_code", &code, &routine))
        return NULL;
    return pygpu_cuda_error(PyModule_GetState(module), (CUresult)code, routine);
}

static PyMethodDef errors_methods[] = {
    {"_raise_for_code", errors_raise_for_code, METH_VARARGS,
     "_raise_for_code($module, code, routine, /)\n--\n\n"
     "Raise the pygpu exception for a CUresult code."},
    {NULL},
};

static PyObject *
new_exc(PyObject *m, const char *name, const char *doc, PyObject *bases)
{
    PyObject *cls = PyErr_NewExceptionWithDoc(name, doc, bases, NULL);
    if (cls == NULL)
        return NULL;
    const char *shortname = strrchr(name, '.') + 1;
    if (pygpu_module_add_ref(m, shortname, cls) < 0) {
        Py_DECREF(cls);
        return NULL;
    }
    return cls;
}

int
pygpu_errors_setup(PyObject *m, pygpu_state *st)
{
    PyObject *bases;
    st->Error = new_exc(m, "pygpu.driver.Error",
                        "Base of every pygpu CUDA error.\n\n"
                        ".code is the CUresult number, .name its name "
                        "(CUDA_ERROR_OUT_OF_MEMORY), .routine the driver call that failed.",
                        NULL);
    if (st->Error == NULL)
        return -1;
    if (PyObject_SetAttrString(st->Error, "code", Py_None) < 0
        || PyObject_SetAttrString(st->Error, "name", Py_None) < 0
        || PyObject_SetAttrString(st->Error, "routine", Py_None) < 0)
        return -1;
    st->LogicError =
        new_exc(m, "pygpu.driver.LogicError",
                "A call was made wrongly: invalid value, handle or context.", st->Error);
    st->LaunchError = new_exc(m, "pygpu.driver.LaunchError",
                              "A kernel failed to launch or faulted while running.", st->Error);
    if (st->LogicError == NULL || st->LaunchError == NULL)
        return -1;
    bases = PyTuple_Pack(2, st->Error, PyExc_MemoryError);
    if (bases == NULL)
        return -1;
    st->MemoryError =
        new_exc(m, "pygpu.driver.MemoryError",
                "Device or host memory ran out (also a built-in MemoryError).", bases);
    Py_DECREF(bases);
    bases = PyTuple_Pack(2, st->Error, PyExc_RuntimeError);
    if (bases == NULL)
        return -1;
    st->RuntimeError = new_exc(m, "pygpu.driver.RuntimeError",
                               "Any other CUDA failure (also a built-in RuntimeError).", bases);
    Py_DECREF(bases);
    if (st->MemoryError == NULL || st->RuntimeError == NULL)
        return -1;
    st->CudaUnavailableError =
        new_exc(m, "pygpu.driver.CudaUnavailableError",
                "No usable CUDA driver, device or NVRTC library; the message says "
                "what was looked for and where.",
                st->RuntimeError);
    if (st->CudaUnavailableError == NULL)
        return -1;
    return PyModule_AddFunctions(m, errors_methods);
}

/* ---- integer arguments, never truncated ---- */

static int
parse_long_long(PyObject *obj, long long *out, const char *what)
{
    int overflow = 0;
    if (!PyIndex_Check(obj) || PyBool_Check(obj) || PyFloat_Check(obj)) {
        PyErr_Format(PyExc_TypeError, "%s must be an int, not %.100s", what, Py_TYPE(obj)->tp_name);
        return -1;
    }
    *out = PyLong_AsLongLongAndOverflow(obj, &overflow);
    if (*out == -1 && PyErr_Occurred())
        return -1;
    if (overflow) {
        PyErr_Format(PyExc_OverflowError, "%s=%R is out of range", what, obj);
        return -1;
    }
    return 0;
}

int
pygpu_parse_uint(PyObject *obj, unsigned int *out, const char *what)
{
    long long v;
    if (parse_long_long(obj, &v, what) < 0)
        return -1;
    if (v < 0 || (unsigned long long)v > UINT_MAX) {
        PyErr_Format(PyExc_OverflowError, "%s=%R is out of range (0 to %u)", what, obj, UINT_MAX);
        return -1;
    }
    *out = (unsigned int)v;
    return 0;
}

int
pygpu_parse_int(PyObject *obj, int *out, const char *what)
{
    long long v;
    if (parse_long_long(obj, &v, what) < 0)
        return -1;
    if (v < INT_MIN || v > INT_MAX) {
        PyErr_Format(PyExc_OverflowError, "%s=%R is out of range (%d to %d)", what, obj, INT_MIN,
                     INT_MAX);
        return -1;
    }
    *out = (int)v;
    return 0;
}

/* ---- arguments of METH_FASTCALL | METH_KEYWORDS functions ---- */

int
pygpu_fast_args(const char *fname, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames,
                const char *const *names, Py_ssize_t nreq, PyObject **out)
{
    Py_ssize_t nnames = 0, i, j, nkw = kwnames != NULL ? PyTuple_GET_SIZE(kwnames) : 0;
    while (names[nnames] != NULL)
        nnames++;
    if (nargs > nnames) {
        PyErr_Format(PyExc_TypeError, "%s() takes at most %zd arguments (%zd given)", fname, nnames,
                     nargs + nkw);
        return -1;
    }
    for (i = 0; i < nnames; i++)
        out[i] = i < nargs ? args[i] : NULL;
    for (j = 0; j < nkw; j++) {
        PyObject *k = PyTuple_GET_ITEM(kwnames, j);
        for (i = 0; i < nnames; i++)
            if (PyUnicode_CompareWithASCIIString(k, names[i]) == 0)
                break;
        if (i == nnames) {
            PyErr_Format(PyExc_TypeError, "%s() got an unexpected keyword argument %R", fname, k);
            return -1;
        }
        if (out[i] != NULL) {
            PyErr_Format(PyExc_TypeError, "%s() got multiple values for argument '%s'", fname,
                         names[i]);
            return -1;
        }
        out[i] = args[nargs + j];
    }
    for (i = 0; i < nreq; i++)
        if (out[i] == NULL) {
            PyErr_Format(PyExc_TypeError, "%s() missing required argument '%s' (pos %zd)", fname,
                         names[i], i + 1);
            return -1;
        }
    return 0;
}
