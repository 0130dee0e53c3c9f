/* The rest of PyCUDA's driver functions over device memory and the
 * profiler (PyCUDA's names):
 *
 *   memset_d2d8/16/32(dest, pitch, data, width, height) and their _async
 *   forms (..., stream=None): cuMemsetD2D8/16/32[Async], a value in each of
 *   `width` elements of `height` rows `pitch` bytes apart;
 *   mem_get_address_range(ptr) -> (base, size): cuMemGetAddressRange, the
 *   allocation a device address lies in;
 *   initialize_profiler(config_file, output_file, output_mode):
 *   cuProfilerInitialize (deprecated by NVIDIA; whatever the driver says is
 *   raised).
 *
 * Every call runs in the current context (the default device's primary
 * context when none is current), with the GIL held: the memsets are queued
 * work, the queries cheap. */
#include "pygpu.h"

/* The function's name for messages: memset_d2d16_async() */
static void
memset2d_name(char *out, size_t n, int width, int async)
{
    snprintf(out, n, "memset_d2d%d%s()", width * 8, async ? "_async" : "");
}

/* A size_t argument >= 0, TypeError/ValueError naming it otherwise. */
static int
parse_size(PyObject *obj, size_t *out, const char *fname, const char *what)
{
    PyObject *n;
    long long sv;
    int overflow;
    if (!PyIndex_Check(obj) || PyBool_Check(obj)) {
        PyErr_Format(PyExc_TypeError, "%s: %s must be an int, not %.100s", fname, what,
                     Py_TYPE(obj)->tp_name);
        return -1;
    }
    if ((n = PyNumber_Index(obj)) == NULL)
        return -1;
    sv = PyLong_AsLongLongAndOverflow(n, &overflow);
    if (sv == -1 && PyErr_Occurred()) {
        Py_DECREF(n);
        return -1;
    }
    if (overflow < 0 || (overflow == 0 && sv < 0)) {
        PyErr_Format(PyExc_ValueError, "%s: %s must be >= 0, got %R", fname, what, n);
        Py_DECREF(n);
        return -1;
    }
    *out = PyLong_AsSize_t(n);
    Py_DECREF(n);
    if (*out == (size_t)-1 && PyErr_Occurred()) {
        PyErr_Format(PyExc_OverflowError, "%s: %s does not fit in a size_t", fname, what);
        return -1;
    }
    return 0;
}

/* The value as `width` bytes: an int from -2**(bits-1) to 2**bits - 1 (a
 * negative one is taken in two's complement, as memset_d8 does). */
static int
parse_value(PyObject *obj, int width, unsigned int *out, const char *fname)
{
    long long v;
    int overflow;
    long long lo = -(1LL << (width * 8 - 1)), hi = (1LL << (width * 8)) - 1;
    if (!PyLong_Check(obj)) {
        PyErr_Format(PyExc_TypeError, "%s: data must be an int, not %.100s", fname,
                     Py_TYPE(obj)->tp_name);
        return -1;
    }
    v = PyLong_AsLongLongAndOverflow(obj, &overflow);
    if (v == -1 && PyErr_Occurred())
        return -1;
    if (overflow || v < lo || v > hi) {
        PyErr_Format(PyExc_OverflowError, "%s: data %R does not fit in %d bits", fname, obj,
                     width * 8);
        return -1;
    }
    *out = (unsigned int)(unsigned long long)v;
    return 0;
}

/* o: dest, pitch, data, width, height, stream (Py_None: the default) */
static PyObject *
do_memset2d(PyObject *module, PyObject *const *o, int width, int async)
{
    pygpu_state *st = PyModule_GetState(module);
    PyObject *dobj = o[0], *pobj = o[1], *vobj = o[2], *wobj = o[3], *hobj = o[4];
    PyObject *sobj = o[5];
    pygpu_DeviceAllocation *held = NULL;
    CUdeviceptr d;
    CUstream s = NULL;
    size_t cap, pitch, w, h, row, extent;
    unsigned int v;
    CUresult rc;
    char fname[40];
    memset2d_name(fname, sizeof fname, width, async);
    if (parse_size(pobj, &pitch, fname, "pitch") < 0 || parse_value(vobj, width, &v, fname) < 0
        || parse_size(wobj, &w, fname, "width") < 0 || parse_size(hobj, &h, fname, "height") < 0)
        return NULL;
    if (pygpu_captures_active != 0) {
        /* inside this thread's capture the default stream is the capturing
         * one: a fill of device memory does not block the host, so the
         * synchronous form (and the _async one given no stream) is captured
         * as the _async one on it, as memset_d8() is */
        int r = pygpu_capture_default(st, &sobj, 0, fname, NULL);
        if (r < 0)
            return NULL;
        if (r > 0)
            async = 1;
    }
    if (async && pygpu_get_stream(st, sobj, &s) < 0)
        return NULL;
    /* after the ints: their __index__ may free dest */
    if (pygpu_allocation_hold(st, dobj, &held) < 0
        || pygpu_get_device_ptr(st, dobj, &d, &cap, 0) < 0)
        goto error;
    if (w > ((size_t)-1) / (size_t)width) {
        PyErr_Format(PyExc_OverflowError, "%s: a row of %zu elements overflows", fname, w);
        goto error;
    }
    row = w * (size_t)width;
    if (h > 1 && pitch < row) {
        PyErr_Format(PyExc_ValueError,
                     "%s: pitch (%zu bytes) is less than a row's %zu "
                     "elements of %d bytes",
                     fname, pitch, w, width);
        goto error;
    }
    if (d % (CUdeviceptr)width || (h > 1 && pitch % (size_t)width)) {
        PyErr_Format(PyExc_ValueError,
                     "%s: the address and the pitch must be %d-byte "
                     "aligned",
                     fname, width);
        goto error;
    }
    if (w == 0 || h == 0) {
        pygpu_allocation_unhold(held);
        Py_RETURN_NONE;
    }
    if ((h - 1) > (((size_t)-1) - row) / (pitch ? pitch : 1)) {
        PyErr_Format(PyExc_OverflowError, "%s: %zu rows of pitch %zu overflow", fname, h, pitch);
        goto error;
    }
    extent = pitch * (h - 1) + row;
    if (cap != (size_t)-1 && extent > cap) {
        PyErr_Format(PyExc_ValueError,
                     "%s: %zu rows of %zu elements, %zu bytes apart, "
                     "reach %zu bytes; the allocation holds %zu",
                     fname, h, w, pitch, extent, cap);
        goto error;
    }
    if (pygpu_current_context(st) == NULL)
        goto error;
    /* each entry point through its capture class (core/cuda_api.h): the
     * synchronous forms, and the _async ones given no stream, run on the
     * legacy default stream, which a capture in this context forbids */
    if (width == 1 && async) {
        pygpu_pfn_cuMemsetD2D8Async f = PYGPU_CU_STREAM(st, cuMemsetD2D8Async, s, 0, fname);
        rc = f != NULL ? f(d, pitch, (unsigned char)v, w, h, s) : CUDA_SUCCESS;
    } else if (width == 1) {
        pygpu_pfn_cuMemsetD2D8 f = PYGPU_CU_LEGACY(st, cuMemsetD2D8, fname);
        rc = f != NULL ? f(d, pitch, (unsigned char)v, w, h) : CUDA_SUCCESS;
    } else if (width == 2 && async) {
        pygpu_pfn_cuMemsetD2D16Async f = PYGPU_CU_STREAM(st, cuMemsetD2D16Async, s, 0, fname);
        rc = f != NULL ? f(d, pitch, (unsigned short)v, w, h, s) : CUDA_SUCCESS;
    } else if (width == 2) {
        pygpu_pfn_cuMemsetD2D16 f = PYGPU_CU_LEGACY(st, cuMemsetD2D16, fname);
        rc = f != NULL ? f(d, pitch, (unsigned short)v, w, h) : CUDA_SUCCESS;
    } else if (async) {
        pygpu_pfn_cuMemsetD2D32Async f = PYGPU_CU_STREAM(st, cuMemsetD2D32Async, s, 0, fname);
        rc = f != NULL ? f(d, pitch, v, w, h, s) : CUDA_SUCCESS;
    } else {
        pygpu_pfn_cuMemsetD2D32 f = PYGPU_CU_LEGACY(st, cuMemsetD2D32, fname);
        rc = f != NULL ? f(d, pitch, v, w, h) : CUDA_SUCCESS;
    }
    pygpu_allocation_unhold(held);
    held = NULL;
    if (PyErr_Occurred()) /* refused by its capture class */
        return NULL;
    if (rc != CUDA_SUCCESS) {
        const char *routine = width == 1   ? (async ? "cuMemsetD2D8Async" : "cuMemsetD2D8")
                              : width == 2 ? (async ? "cuMemsetD2D16Async" : "cuMemsetD2D16")
                                           : (async ? "cuMemsetD2D32Async" : "cuMemsetD2D32");
        return pygpu_cuda_error(st, rc, routine);
    }
    if (async && pygpu_capture_note(st, sobj, dobj, NULL, 0) < 0)
        return NULL;
    Py_RETURN_NONE;
error:
    pygpu_allocation_unhold(held);
    return NULL;
}

static PyObject *
memset_d2d8(PyObject *m, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"dest", "pitch", "data", "width", "height", NULL};
    PyObject *o[6] = {NULL, NULL, NULL, NULL, NULL, Py_None};
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOOOO:memset_d2d8", kwlist, &o[0], &o[1], &o[2],
                                     &o[3], &o[4]))
        return NULL;
    return do_memset2d(m, o, 1, 0);
}

static PyObject *
memset_d2d8_async(PyObject *m, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"dest", "pitch", "data", "width", "height", "stream", NULL};
    PyObject *o[6] = {NULL, NULL, NULL, NULL, NULL, Py_None};
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOOOO|O:memset_d2d8_async", kwlist, &o[0], &o[1],
                                     &o[2], &o[3], &o[4], &o[5]))
        return NULL;
    return do_memset2d(m, o, 1, 1);
}

static PyObject *
memset_d2d16(PyObject *m, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"dest", "pitch", "data", "width", "height", NULL};
    PyObject *o[6] = {NULL, NULL, NULL, NULL, NULL, Py_None};
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOOOO:memset_d2d16", kwlist, &o[0], &o[1], &o[2],
                                     &o[3], &o[4]))
        return NULL;
    return do_memset2d(m, o, 2, 0);
}

static PyObject *
memset_d2d16_async(PyObject *m, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"dest", "pitch", "data", "width", "height", "stream", NULL};
    PyObject *o[6] = {NULL, NULL, NULL, NULL, NULL, Py_None};
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOOOO|O:memset_d2d16_async", kwlist, &o[0], &o[1],
                                     &o[2], &o[3], &o[4], &o[5]))
        return NULL;
    return do_memset2d(m, o, 2, 1);
}

static PyObject *
memset_d2d32(PyObject *m, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"dest", "pitch", "data", "width", "height", NULL};
    PyObject *o[6] = {NULL, NULL, NULL, NULL, NULL, Py_None};
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOOOO:memset_d2d32", kwlist, &o[0], &o[1], &o[2],
                                     &o[3], &o[4]))
        return NULL;
    return do_memset2d(m, o, 4, 0);
}

static PyObject *
memset_d2d32_async(PyObject *m, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"dest", "pitch", "data", "width", "height", "stream", NULL};
    PyObject *o[6] = {NULL, NULL, NULL, NULL, NULL, Py_None};
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOOOO|O:memset_d2d32_async", kwlist, &o[0], &o[1],
                                     &o[2], &o[3], &o[4], &o[5]))
        return NULL;
    return do_memset2d(m, o, 4, 1);
}

/* mem_get_address_range(ptr) -> (base, size) */
static PyObject *
mem_get_address_range(PyObject *module, PyObject *obj)
{
    pygpu_state *st = PyModule_GetState(module);
    pygpu_DeviceAllocation *held;
    CUdeviceptr p, base = 0;
    size_t cap, size = 0;
    CUresult rc;
    /* a freed allocation is a LogicError, not a query of a stale address */
    if (pygpu_allocation_hold(st, obj, &held) < 0)
        return NULL;
    pygpu_allocation_unhold(held);
    if (pygpu_get_device_ptr(st, obj, &p, &cap, 0) < 0 || pygpu_ensure_driver(st) < 0
        || pygpu_need_entry(st, (const void *)cu.cuMemGetAddressRange, "cuMemGetAddressRange",
                            "mem_get_address_range()")
               < 0
        || pygpu_current_context(st) == NULL)
        return NULL;
    rc = cu.cuMemGetAddressRange(&base, &size, p);
    if (rc != CUDA_SUCCESS)
        return pygpu_cuda_error(st, rc, "cuMemGetAddressRange");
    return Py_BuildValue("(KK)", (unsigned long long)base, (unsigned long long)size);
}

/* initialize_profiler(config_file, output_file, output_mode) */
static PyObject *
initialize_profiler(PyObject *module, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"config_file", "output_file", "output_mode", NULL};
    pygpu_state *st = PyModule_GetState(module);
    PyObject *cfg = NULL, *out = NULL, *mobj, *result = NULL;
    int mode;
    CUresult rc;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O&O&O:initialize_profiler", kwlist,
                                     PyUnicode_FSConverter, &cfg, PyUnicode_FSConverter, &out,
                                     &mobj))
        goto done;
    if (pygpu_parse_int(mobj, &mode, "initialize_profiler(): output_mode") < 0)
        goto done;
    if (mode != 0 && mode != 1) {
        PyErr_Format(PyExc_ValueError,
                     "initialize_profiler(): output_mode must be "
                     "profiler_output_mode.KEY_VALUE_PAIR (0) or CSV (1), got %d",
                     mode);
        goto done;
    }
    if (pygpu_ensure_driver(st) < 0
        || pygpu_need_entry(st, (const void *)cu.cuProfilerInitialize, "cuProfilerInitialize",
                            "initialize_profiler()")
               < 0
        || pygpu_current_context(st) == NULL)
        goto done;
    rc = cu.cuProfilerInitialize(PyBytes_AS_STRING(cfg), PyBytes_AS_STRING(out), mode);
    if (rc != CUDA_SUCCESS) {
        pygpu_cuda_error(st, rc, "cuProfilerInitialize");
        goto done;
    }
    result = Py_NewRef(Py_None);
done:
    Py_XDECREF(cfg);
    Py_XDECREF(out);
    return result;
}

/* _allocation_kind(obj): a DeviceAllocation's kind (0 cuMemAlloc, 1
 * managed, 2 stream-ordered, 3 not owned, 4 IPC, 5 virtual), -1 for
 * anything else (pygpu.driver.ManagedAllocation's isinstance test). */
static PyObject *
allocation_kind(PyObject *module, PyObject *obj)
{
    pygpu_state *st = PyModule_GetState(module);
    if (!PyObject_TypeCheck(obj, st->DeviceAllocationType))
        return PyLong_FromLong(-1);
    return PyLong_FromLong(((pygpu_DeviceAllocation *)obj)->kind);
}

static PyMethodDef memextra_methods[] = {
    {"memset_d2d8", (PyCFunction)(void (*)(void))memset_d2d8, METH_VARARGS | METH_KEYWORDS,
     "memset_d2d8($module, /, dest, pitch, data, width, height)\n--\n\n"
     "Set width bytes in each of height rows pitch bytes apart to data "
     "(cuMemsetD2D8)."},
    {"memset_d2d16", (PyCFunction)(void (*)(void))memset_d2d16, METH_VARARGS | METH_KEYWORDS,
     "memset_d2d16($module, /, dest, pitch, data, width, height)\n--\n\n"
     "Set width 16-bit words in each of height rows pitch bytes apart to data "
     "(cuMemsetD2D16)."},
    {"memset_d2d32", (PyCFunction)(void (*)(void))memset_d2d32, METH_VARARGS | METH_KEYWORDS,
     "memset_d2d32($module, /, dest, pitch, data, width, height)\n--\n\n"
     "Set width 32-bit words in each of height rows pitch bytes apart to data "
     "(cuMemsetD2D32)."},
    {"memset_d2d8_async", (PyCFunction)(void (*)(void))memset_d2d8_async,
     METH_VARARGS | METH_KEYWORDS,
     "memset_d2d8_async($module, /, dest, pitch, data, width, height, stream=None)\n--\n\n"
     "memset_d2d8 queued on a stream (cuMemsetD2D8Async)."},
    {"memset_d2d16_async", (PyCFunction)(void (*)(void))memset_d2d16_async,
     METH_VARARGS | METH_KEYWORDS,
     "memset_d2d16_async($module, /, dest, pitch, data, width, height, stream=None)\n--\n\n"
     "memset_d2d16 queued on a stream (cuMemsetD2D16Async)."},
    {"memset_d2d32_async", (PyCFunction)(void (*)(void))memset_d2d32_async,
     METH_VARARGS | METH_KEYWORDS,
     "memset_d2d32_async($module, /, dest, pitch, data, width, height, stream=None)\n--\n\n"
     "memset_d2d32 queued on a stream (cuMemsetD2D32Async)."},
    {"mem_get_address_range", mem_get_address_range, METH_O,
     "mem_get_address_range($module, ptr, /)\n--\n\n"
     "(base, size) of the allocation the device address ptr lies in "
     "(cuMemGetAddressRange)."},
    {"initialize_profiler", (PyCFunction)(void (*)(void))initialize_profiler,
     METH_VARARGS | METH_KEYWORDS,
     "initialize_profiler($module, /, config_file, output_file, output_mode)\n--\n\n"
     "cuProfilerInitialize: the legacy profiler's configuration file, output "
     "file and profiler_output_mode (NVIDIA deprecated it; newer drivers may "
     "refuse it, which is raised)."},
    {"_allocation_kind", allocation_kind, METH_O,
     "_allocation_kind($module, obj, /)\n--\n\n"
     "A DeviceAllocation's kind (1: managed memory), -1 for anything else."},
    {NULL},
};

int
pygpu_memextra_setup(PyObject *m, pygpu_state *st)
{
    (void)st;
    return PyModule_AddFunctions(m, memextra_methods);
}
