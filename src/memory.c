/* DeviceAllocation, mem_alloc and friends, copies and fills. */
#include "pygpu.h"

/* pygpu_get_device_ptr and the DLPack reader live in args.c */

int
pygpu_get_stream(pygpu_state *st, PyObject *obj, CUstream *out)
{
    PyObject *r;
    if (obj == NULL || obj == Py_None) {
        *out = NULL;
        return 0;
    }
    if (Py_IS_TYPE(obj, st->StreamType)) {
        *out = ((pygpu_Stream *)obj)->handle;
        return 0;
    }
    if (PyLong_Check(obj) && !PyBool_Check(obj)) {
        /* only the driver's named handles: a raw handle from elsewhere comes
         * in through Stream.from_handle(), where trusting it is explicit */
        long v = PyLong_AsLong(obj);
        if (v == -1 && PyErr_Occurred())
            PyErr_Clear();
        if (v == 0 || v == 1 || v == 2) {
            *out = v == 0 ? NULL : v == 1 ? CU_STREAM_LEGACY : CU_STREAM_PER_THREAD;
            return 0;
        }
        PyErr_Format(PyExc_TypeError,
                     "stream=%R: an int stream must be 0 (the default stream), 1 (legacy) "
                     "or 2 (per-thread); wrap another handle with Stream.from_handle()", obj);
        return -1;
    }
    if (pygpu_getattr_opt(obj, st->str_cuda_stream, &r) < 0)
        return -1;
    if (r != NULL) {
        PyObject *t = PyObject_CallNoArgs(r);
        Py_DECREF(r);
        if (t == NULL)
            return -1;
        if (!PyTuple_Check(t) || PyTuple_GET_SIZE(t) != 2) {
            Py_DECREF(t);
            PyErr_SetString(PyExc_TypeError, "__cuda_stream__() must return (version, handle)");
            return -1;
        }
        *out = (CUstream)PyLong_AsVoidPtr(PyTuple_GET_ITEM(t, 1));
        Py_DECREF(t);
        return PyErr_Occurred() ? -1 : 0;
    }
    PyErr_Format(PyExc_TypeError,
                 "stream must be a pygpu Stream, None, 0/1/2 or an object with "
                 "__cuda_stream__, not %.100s", Py_TYPE(obj)->tp_name);
    return -1;
}

/* 1 if a struct-module format has an 'O' (a PyObject *) outside the
 * :field names: of a NumPy structured type. */
static int
format_has_objects(const char *fmt)
{
    if (fmt == NULL)
        return 0;
    for (; *fmt; fmt++) {
        if (*fmt == ':') {
            const char *end = strchr(fmt + 1, ':');
            if (end == NULL)
                return 0;
            fmt = end;
        } else if (*fmt == 'O') {
            return 1;
        }
    }
    return 0;
}

/* Host buffer in: contiguous, optionally writable, with a clear message. */
static int
get_host_buffer(PyObject *obj, Py_buffer *view, int writable, const char *what)
{
    int flags = PyBUF_ANY_CONTIGUOUS | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(obj, view, flags) == 0) {
        if (format_has_objects(view->format)) {
            PyBuffer_Release(view);
            PyErr_Format(PyExc_TypeError,
                         "%s: the host buffer holds Python objects (format '%s'), whose "
                         "bytes are pointers that cannot go to or come from a GPU",
                         what, view->format);
            return -1;
        }
        return 0;
    }
    if (!PyObject_CheckBuffer(obj)) {
        PyErr_Clear();
        PyErr_Format(PyExc_TypeError,
                     "%s: expected a host buffer (NumPy array, bytes, ...), not %.100s",
                     what, Py_TYPE(obj)->tp_name);
        return -1;
    }
    PyErr_Clear();
    if (writable && PyObject_GetBuffer(obj, view, PyBUF_ANY_CONTIGUOUS) == 0) {
        PyBuffer_Release(view);
        PyErr_Format(PyExc_TypeError, "%s: the host buffer is read-only", what);
        return -1;
    }
    PyErr_Clear();
    PyErr_Format(PyExc_ValueError,
                 "%s: the host buffer is not contiguous (use numpy.ascontiguousarray)",
                 what);
    return -1;
}

/* ---- DeviceAllocation ---- */

/* Free the memory once, in its own context; never raises.  GIL held. */
static void
allocation_release(pygpu_DeviceAllocation *self)
{
    int pushed = 0;
    if (self->freed)
        return;
    self->freed = 1;
    if (self->ptr == 0 || self->kind == 3 || self->context == NULL || self->context->detached)
        return;
    if (pygpu_context_enter(self->context, &pushed) != CUDA_SUCCESS)
        return;
    /* an async allocation is freed in order on its stream, which `owner`
     * keeps alive until then */
    if (self->kind == 2 && cu.cuMemFreeAsync != NULL)
        cu.cuMemFreeAsync(self->ptr, self->free_stream);
    else
        cu.cuMemFree(self->ptr);
    pygpu_context_exit(pushed);
}

static void
allocation_dealloc(pygpu_DeviceAllocation *self)
{
    PyTypeObject *tp = Py_TYPE(self);
    if (self->weakreflist != NULL)
        PyObject_ClearWeakRefs((PyObject *)self);
    allocation_release(self);
    Py_CLEAR(self->owner);
    Py_CLEAR(self->context);
    PyObject_Free(self);
    Py_DECREF(tp);
}

static PyObject *
new_allocation(pygpu_state *st, pygpu_Context *ctx, CUdeviceptr ptr, size_t size, int kind)
{
    pygpu_DeviceAllocation *self = PyObject_New(pygpu_DeviceAllocation, st->DeviceAllocationType);
    if (self == NULL)
        return NULL;
    self->ptr = ptr;
    self->size = size;
    self->kind = kind;
    self->freed = 0;
    self->free_stream = NULL;
    self->weakreflist = NULL;
    self->owner = NULL;
    Py_INCREF(ctx);
    self->context = ctx;
    return (PyObject *)self;
}

PyObject *
pygpu_borrowed_allocation(pygpu_state *st, pygpu_Context *ctx, CUdeviceptr ptr,
                          size_t size, PyObject *owner)
{
    PyObject *a = new_allocation(st, ctx, ptr, size, 3);
    if (a != NULL) {
        Py_XINCREF(owner);
        ((pygpu_DeviceAllocation *)a)->owner = owner;
    }
    return a;
}

static int
parse_nbytes(PyObject *obj, size_t *out, const char *what)
{
    if (!PyIndex_Check(obj) || PyBool_Check(obj)) {
        PyErr_Format(PyExc_TypeError, "%s must be an int, not %.100s", what,
                     Py_TYPE(obj)->tp_name);
        return -1;
    }
    PyObject *n = PyNumber_Index(obj);
    if (n == NULL)
        return -1;
    PyObject *zero = PyLong_FromLong(0);
    int neg = zero ? PyObject_RichCompareBool(n, zero, Py_LT) : -1;
    Py_XDECREF(zero);
    if (neg < 0) {
        Py_DECREF(n);
        return -1;
    }
    if (neg) {
        PyErr_Format(PyExc_ValueError, "%s must be >= 0, got %R", what, n);
        Py_DECREF(n);
        return -1;
    }
    *out = PyLong_AsSize_t(n);
    Py_DECREF(n);
    return (*out == (size_t)-1 && PyErr_Occurred()) ? -1 : 0;
}

static PyObject *
mem_alloc(PyObject *module, PyObject *arg)
{
    pygpu_state *st = PyModule_GetState(module);
    pygpu_Context *ctx;
    CUdeviceptr p = 0;
    CUresult rc;
    size_t n;
    if (parse_nbytes(arg, &n, "mem_alloc(): nbytes") < 0)
        return NULL;
    if ((ctx = pygpu_current_context(st)) == NULL)
        return NULL;
    if (n == 0)
        return new_allocation(st, ctx, 0, 0, 0);
    rc = cu.cuMemAlloc(&p, n);
    if (rc == CUDA_ERROR_OUT_OF_MEMORY) {
        /* dead allocations may be waiting in reference cycles */
        PyObject *r = PyObject_CallNoArgs(st->gc_collect);
        if (r == NULL)
            return NULL;
        Py_DECREF(r);
        rc = cu.cuMemAlloc(&p, n);
    }
    if (rc != CUDA_SUCCESS) {
        if (rc == CUDA_ERROR_OUT_OF_MEMORY) {
            size_t free_b = 0, total_b = 0;
            cu.cuMemGetInfo(&free_b, &total_b);
            char note[160];
            snprintf(note, sizeof note,
                     "asked for %zu bytes; %zu of %zu bytes free on the device",
                     n, free_b, total_b);
            pygpu_cuda_error_ex(st, rc, "cuMemAlloc", note);
            return NULL;
        }
        return pygpu_cuda_error(st, rc, "cuMemAlloc");
    }
    PyObject *res = new_allocation(st, ctx, p, n, 0);
    if (res == NULL)
        cu.cuMemFree(p);
    return res;
}

static PyObject *
mem_alloc_async(PyObject *module, PyObject *args, PyObject *kwds)
{
    pygpu_state *st = PyModule_GetState(module);
    static char *kwlist[] = {"nbytes", "stream", NULL};
    PyObject *nobj, *sobj = Py_None, *res;
    pygpu_Context *ctx;
    CUdeviceptr p = 0;
    CUstream s;
    CUresult rc;
    size_t n;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O|O:mem_alloc_async", kwlist, &nobj, &sobj))
        return NULL;
    if (parse_nbytes(nobj, &n, "mem_alloc_async(): nbytes") < 0
        || pygpu_get_stream(st, sobj, &s) < 0)
        return NULL;
    if ((ctx = pygpu_current_context(st)) == NULL)
        return NULL;
    if (cu.cuMemAllocAsync == NULL) {
        PyErr_SetString(st->LogicError,
                        "mem_alloc_async() needs a driver with cuMemAllocAsync (CUDA 11.2+)");
        return NULL;
    }
    if (n == 0)
        return new_allocation(st, ctx, 0, 0, 0);
    rc = cu.cuMemAllocAsync(&p, n, s);
    if (rc != CUDA_SUCCESS)
        return pygpu_cuda_error(st, rc, "cuMemAllocAsync");
    res = new_allocation(st, ctx, p, n, 2);
    if (res == NULL) {
        cu.cuMemFreeAsync(p, s);
        return NULL;
    }
    ((pygpu_DeviceAllocation *)res)->free_stream = s;
    if (sobj != Py_None) {
        /* strong ref: the stream outlives the allocation freed on it */
        Py_INCREF(sobj);
        ((pygpu_DeviceAllocation *)res)->owner = sobj;
    }
    return res;
}

static PyObject *
mem_alloc_managed(PyObject *module, PyObject *args, PyObject *kwds)
{
    pygpu_state *st = PyModule_GetState(module);
    static char *kwlist[] = {"nbytes", "flags", NULL};
    PyObject *nobj;
    unsigned int flags = CU_MEM_ATTACH_GLOBAL;
    pygpu_Context *ctx;
    CUdeviceptr p;
    CUresult rc;
    size_t n;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O|I:mem_alloc_managed", kwlist, &nobj, &flags))
        return NULL;
    if (parse_nbytes(nobj, &n, "mem_alloc_managed(): nbytes") < 0)
        return NULL;
    if ((ctx = pygpu_current_context(st)) == NULL)
        return NULL;
    if (n == 0)
        return new_allocation(st, ctx, 0, 0, 1);
    rc = cu.cuMemAllocManaged(&p, n, flags);
    if (rc != CUDA_SUCCESS)
        return pygpu_cuda_error(st, rc, "cuMemAllocManaged");
    return new_allocation(st, ctx, p, n, 1);
}

/* A managed allocation of n bytes in the current context (n may be 0). */
PyObject *
pygpu_managed_allocation(pygpu_state *st, size_t n, unsigned int flags)
{
    pygpu_Context *ctx = pygpu_current_context(st);
    CUdeviceptr p = 0;
    CUresult rc;
    PyObject *a;
    if (ctx == NULL)
        return NULL;
    if (n > 0 && (rc = cu.cuMemAllocManaged(&p, n, flags)) != CUDA_SUCCESS)
        return pygpu_cuda_error(st, rc, "cuMemAllocManaged");
    a = new_allocation(st, ctx, p, n, 1);
    if (a == NULL && p)
        cu.cuMemFree(p);
    return a;
}

static PyObject *
mem_alloc_pitch(PyObject *module, PyObject *args)
{
    pygpu_state *st = PyModule_GetState(module);
    Py_ssize_t width, height;
    unsigned int esize;
    CUdeviceptr p;
    size_t pitch;
    CUresult rc;
    pygpu_Context *ctx;
    PyObject *a;
    if (!PyArg_ParseTuple(args, "nnI:mem_alloc_pitch", &width, &height, &esize))
        return NULL;
    if (width <= 0 || height <= 0) {
        PyErr_SetString(PyExc_ValueError, "mem_alloc_pitch(): width and height must be > 0");
        return NULL;
    }
    if (esize != 4 && esize != 8 && esize != 16) {
        PyErr_Format(PyExc_ValueError,
                     "mem_alloc_pitch(): access_size must be 4, 8 or 16, got %u", esize);
        return NULL;
    }
    if ((ctx = pygpu_current_context(st)) == NULL)
        return NULL;
    rc = cu.cuMemAllocPitch(&p, &pitch, (size_t)width, (size_t)height, esize);
    if (rc != CUDA_SUCCESS)
        return pygpu_cuda_error(st, rc, "cuMemAllocPitch");
    a = new_allocation(st, ctx, p, pitch * (size_t)height, 0);
    if (a == NULL) {
        cu.cuMemFree(p);
        return NULL;
    }
    return Py_BuildValue("(Nn)", a, (Py_ssize_t)pitch);
}

static PyObject *
mem_get_info(PyObject *module, PyObject *unused)
{
    pygpu_state *st = PyModule_GetState(module);
    size_t f, t;
    CUresult rc;
    if (pygpu_current_context(st) == NULL)
        return NULL;
    rc = cu.cuMemGetInfo(&f, &t);
    if (rc != CUDA_SUCCESS)
        return pygpu_cuda_error(st, rc, "cuMemGetInfo");
    return Py_BuildValue("(nn)", (Py_ssize_t)f, (Py_ssize_t)t);
}

static PyObject *
allocation_free(pygpu_DeviceAllocation *self, PyObject *unused)
{
    allocation_release(self);
    Py_RETURN_NONE;
}

static PyObject *
allocation_int(pygpu_DeviceAllocation *self)
{
    if (self->freed) {
        PyErr_SetString(PYGPU_STATE(self)->LogicError, "the DeviceAllocation was freed");
        return NULL;
    }
    return PyLong_FromUnsignedLongLong((unsigned long long)self->ptr);
}

static PyObject *
allocation_cai(pygpu_DeviceAllocation *self, void *c)
{
    if (self->freed) {
        PyErr_SetString(PYGPU_STATE(self)->LogicError, "the DeviceAllocation was freed");
        return NULL;
    }
    return Py_BuildValue("{s:(n),s:s,s:(KO),s:i,s:O,s:O}",
                         "shape", (Py_ssize_t)self->size, "typestr", "|u1",
                         "data", (unsigned long long)self->ptr, Py_False,
                         "version", 3, "strides", Py_None, "stream", Py_None);
}

static PyObject *
allocation_get_size(pygpu_DeviceAllocation *self, void *c)
{
    return PyLong_FromSize_t(self->size);
}

static PyObject *
allocation_get_freed(pygpu_DeviceAllocation *self, void *c)
{
    return PyBool_FromLong(self->freed);
}

static PyObject *
allocation_get_context(pygpu_DeviceAllocation *self, void *c)
{
    Py_INCREF(self->context);
    return (PyObject *)self->context;
}

static PyObject *
allocation_enter(PyObject *self, PyObject *unused)
{
    Py_INCREF(self);
    return self;
}

static PyObject *
allocation_exit(pygpu_DeviceAllocation *self, PyObject *args)
{
    allocation_release(self);
    Py_RETURN_FALSE;
}

static PyObject *
allocation_repr(pygpu_DeviceAllocation *self)
{
    if (self->freed)
        return PyUnicode_FromFormat("<pygpu.driver.DeviceAllocation (freed), %zu bytes>",
                                    self->size);
    {
        /* PyUnicode_FromFormat has no %llx */
        char addr[32];
        snprintf(addr, sizeof addr, "0x%llx", (unsigned long long)self->ptr);
        return PyUnicode_FromFormat("<pygpu.driver.DeviceAllocation at %s, %zu bytes>",
                                    addr, self->size);
    }
}

static PyMethodDef allocation_methods[] = {
    {"free", (PyCFunction)allocation_free, METH_NOARGS,
     "free($self, /)\n--\n\nFree the memory now (idempotent)."},
    {"__enter__", allocation_enter, METH_NOARGS, NULL},
    {"__exit__", (PyCFunction)allocation_exit, METH_VARARGS, NULL},
    {NULL}
};

static PyGetSetDef allocation_getset[] = {
    {"__cuda_array_interface__", (getter)allocation_cai, NULL,
     "CUDA Array Interface v3: the allocation as a 1-D array of bytes.", NULL},
    {"size", (getter)allocation_get_size, NULL, "Size in bytes.", NULL},
    {"freed", (getter)allocation_get_freed, NULL, "Whether free() was called.", NULL},
    {"context", (getter)allocation_get_context, NULL, "The owning Context.", NULL},
    {NULL}
};

static PyMemberDef allocation_members[] = {
    {"__weaklistoffset__", T_PYSSIZET, offsetof(pygpu_DeviceAllocation, weakreflist), READONLY},
    {NULL}
};

static PyType_Slot allocation_slots[] = {
    {Py_tp_dealloc, allocation_dealloc},
    {Py_tp_methods, allocation_methods},
    {Py_tp_getset, allocation_getset},
    {Py_tp_members, allocation_members},
    {Py_tp_repr, allocation_repr},
    {Py_nb_int, allocation_int},
    {Py_nb_index, allocation_int},
    {Py_tp_doc, "Device memory from mem_alloc(); freed when this object dies "
                "or at free(). int(a) is the device address."},
    {0, NULL}
};

static PyType_Spec allocation_spec = {
    "pygpu.driver.DeviceAllocation", sizeof(pygpu_DeviceAllocation), 0,
    Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE | Py_TPFLAGS_DISALLOW_INSTANTIATION,
    allocation_slots
};

/* ---- copies ---- */

static int
check_fits(size_t n, size_t cap, const char *what, const char *side)
{
    if (cap != (size_t)-1 && n > cap) {
        PyErr_Format(PyExc_ValueError,
                     "%s: %zu bytes do not fit in the %s, which holds %zu bytes",
                     what, n, side, cap);
        return -1;
    }
    return 0;
}

/* memcpy_htod/dtoh[_async](dest, src[, stream]): one host buffer, one
 * device pointer; htod says which is which. */
static PyObject *
do_host_copy(PyObject *module, PyObject *args, PyObject *kwds, int htod, int async)
{
    pygpu_state *st = PyModule_GetState(module);
    static char *kwlist[] = {"dest", "src", "stream", NULL};
    static const char *names[2][2] = {{"memcpy_dtoh()", "memcpy_dtoh_async()"},
                                      {"memcpy_htod()", "memcpy_htod_async()"}};
    static const char *formats[2][2] = {{"OO|O:memcpy_dtoh", "OO|O:memcpy_dtoh_async"},
                                        {"OO|O:memcpy_htod", "OO|O:memcpy_htod_async"}};
    static const char *routines[2][2] = {{"cuMemcpyDtoH", "cuMemcpyDtoHAsync"},
                                         {"cuMemcpyHtoD", "cuMemcpyHtoDAsync"}};
    const char *what = names[htod][async];
    PyObject *dst, *src, *sobj = Py_None;
    CUdeviceptr d;
    size_t cap, n;
    CUstream s = NULL;
    Py_buffer view;
    CUresult rc;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, formats[htod][async], kwlist,
                                     &dst, &src, &sobj))
        return NULL;
    if (pygpu_get_device_ptr(st, htod ? dst : src, &d, &cap, 0) < 0
        || (async && pygpu_get_stream(st, sobj, &s) < 0))
        return NULL;
    if (get_host_buffer(htod ? src : dst, &view, !htod, what) < 0)
        return NULL;
    n = (size_t)view.len;
    if (check_fits(n, cap, what, htod ? "destination allocation" : "source allocation") < 0
        || pygpu_current_context(st) == NULL) {
        PyBuffer_Release(&view);
        return NULL;
    }
    if (n > 0 && !async) {
        int r = pygpu_staged_copy(st, htod, view.buf, d, n);
        if (r != 0) {
            PyBuffer_Release(&view);
            return r < 0 ? NULL : Py_NewRef(Py_None);
        }
    }
    rc = CUDA_SUCCESS;
    if (n > 0) {
        Py_BEGIN_ALLOW_THREADS
        if (htod)
            rc = async ? cu.cuMemcpyHtoDAsync(d, view.buf, n, s) : cu.cuMemcpyHtoD(d, view.buf, n);
        else
            rc = async ? cu.cuMemcpyDtoHAsync(view.buf, d, n, s) : cu.cuMemcpyDtoH(view.buf, d, n);
        Py_END_ALLOW_THREADS
    }
    PyBuffer_Release(&view);
    if (rc != CUDA_SUCCESS)
        return pygpu_cuda_error(st, rc, routines[htod][async]);
    Py_RETURN_NONE;
}

static PyObject *
memcpy_htod(PyObject *m, PyObject *a, PyObject *k) { return do_host_copy(m, a, k, 1, 0); }
static PyObject *
memcpy_htod_async(PyObject *m, PyObject *a, PyObject *k) { return do_host_copy(m, a, k, 1, 1); }
static PyObject *
memcpy_dtoh(PyObject *m, PyObject *a, PyObject *k) { return do_host_copy(m, a, k, 0, 0); }
static PyObject *
memcpy_dtoh_async(PyObject *m, PyObject *a, PyObject *k) { return do_host_copy(m, a, k, 0, 1); }

static PyObject *
do_dtod(PyObject *module, PyObject *args, PyObject *kwds, int async)
{
    pygpu_state *st = PyModule_GetState(module);
    static char *kwlist[] = {"dest", "src", "size", "stream", NULL};
    const char *what = async ? "memcpy_dtod_async()" : "memcpy_dtod()";
    PyObject *dst, *src, *nobj, *sobj = Py_None;
    CUdeviceptr d, sp;
    size_t dcap, scap, n;
    CUstream s = NULL;
    CUresult rc;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, async ? "OOO|O:memcpy_dtod_async"
                                                        : "OOO|O:memcpy_dtod",
                                     kwlist, &dst, &src, &nobj, &sobj))
        return NULL;
    if (pygpu_get_device_ptr(st, dst, &d, &dcap, 0) < 0
        || pygpu_get_device_ptr(st, src, &sp, &scap, 0) < 0
        || parse_nbytes(nobj, &n, "size") < 0
        || (async && pygpu_get_stream(st, sobj, &s) < 0))
        return NULL;
    if (check_fits(n, dcap, what, "destination allocation") < 0
        || check_fits(n, scap, what, "source allocation (reading past its end)") < 0)
        return NULL;
    if (pygpu_current_context(st) == NULL)
        return NULL;
    if (n == 0)
        Py_RETURN_NONE;
    Py_BEGIN_ALLOW_THREADS
    rc = async ? cu.cuMemcpyDtoDAsync(d, sp, n, s) : cu.cuMemcpyDtoD(d, sp, n);
    Py_END_ALLOW_THREADS
    if (rc != CUDA_SUCCESS)
        return pygpu_cuda_error(st, rc, async ? "cuMemcpyDtoDAsync" : "cuMemcpyDtoD");
    Py_RETURN_NONE;
}

static PyObject *
memcpy_dtod(PyObject *m, PyObject *a, PyObject *k) { return do_dtod(m, a, k, 0); }
static PyObject *
memcpy_dtod_async(PyObject *m, PyObject *a, PyObject *k) { return do_dtod(m, a, k, 1); }

static PyObject *
do_peer(PyObject *module, PyObject *args, PyObject *kwds, int async)
{
    pygpu_state *st = PyModule_GetState(module);
    static char *kwlist[] = {"dest", "src", "size", "dest_context", "src_context",
                             "stream", NULL};
    PyObject *dst, *src, *nobj, *dctx, *sctx, *sobj = Py_None;
    CUdeviceptr d, sp;
    size_t dcap, scap, n;
    CUstream s = NULL;
    CUresult rc;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, async ? "OOOO!O!|O:memcpy_peer_async"
                                                        : "OOOO!O!|O:memcpy_peer",
                                     kwlist, &dst, &src, &nobj, st->ContextType, &dctx,
                                     st->ContextType, &sctx, &sobj))
        return NULL;
    if (pygpu_get_device_ptr(st, dst, &d, &dcap, 0) < 0
        || pygpu_get_device_ptr(st, src, &sp, &scap, 0) < 0
        || parse_nbytes(nobj, &n, "size") < 0
        || (async && pygpu_get_stream(st, sobj, &s) < 0))
        return NULL;
    if (check_fits(n, dcap, "memcpy_peer()", "destination allocation") < 0
        || check_fits(n, scap, "memcpy_peer()", "source allocation") < 0
        || pygpu_context_check(st, (pygpu_Context *)dctx) < 0
        || pygpu_context_check(st, (pygpu_Context *)sctx) < 0)
        return NULL;
    if (n == 0)
        Py_RETURN_NONE;
    Py_BEGIN_ALLOW_THREADS
    rc = async ? cu.cuMemcpyPeerAsync(d, ((pygpu_Context *)dctx)->handle, sp,
                                      ((pygpu_Context *)sctx)->handle, n, s)
               : cu.cuMemcpyPeer(d, ((pygpu_Context *)dctx)->handle, sp,
                                 ((pygpu_Context *)sctx)->handle, n);
    Py_END_ALLOW_THREADS
    if (rc != CUDA_SUCCESS)
        return pygpu_cuda_error(st, rc, async ? "cuMemcpyPeerAsync" : "cuMemcpyPeer");
    Py_RETURN_NONE;
}

static PyObject *
memcpy_peer(PyObject *m, PyObject *a, PyObject *k) { return do_peer(m, a, k, 0); }
static PyObject *
memcpy_peer_async(PyObject *m, PyObject *a, PyObject *k) { return do_peer(m, a, k, 1); }

/* memset_d8/d16/d32(dest, value, count[, stream]) */
static PyObject *
do_memset(PyObject *module, PyObject *args, int width, int async)
{
    pygpu_state *st = PyModule_GetState(module);
    PyObject *dst, *vobj, *nobj, *sobj = Py_None;
    CUdeviceptr d;
    size_t cap, n;
    unsigned long long v;
    CUstream s = NULL;
    CUresult rc;
    char what[32];
    snprintf(what, sizeof what, "memset_d%d%s()", width * 8, async ? "_async" : "");
    if (!PyArg_UnpackTuple(args, what, 3, async ? 4 : 3, &dst, &vobj, &nobj, &sobj))
        return NULL;
    if (pygpu_get_device_ptr(st, dst, &d, &cap, 0) < 0
        || parse_nbytes(nobj, &n, "count") < 0
        || (async && pygpu_get_stream(st, sobj, &s) < 0))
        return NULL;
    if (!PyLong_Check(vobj)) {
        PyErr_Format(PyExc_TypeError, "%s: value must be an int, not %.100s", what,
                     Py_TYPE(vobj)->tp_name);
        return NULL;
    }
    v = PyLong_AsUnsignedLongLongMask(vobj);
    if (PyErr_Occurred())
        return NULL;
    {
        long long sv = PyLong_AsLongLong(vobj);
        int overflow = PyErr_Occurred() != NULL;
        PyErr_Clear();
        long long lo = -(1LL << (width * 8 - 1)), hi = (1LL << (width * 8)) - 1;
        if (overflow || sv < lo || sv > hi) {
            PyErr_Format(PyExc_OverflowError, "%s: value %R does not fit in %d bits",
                         what, vobj, width * 8);
            return NULL;
        }
    }
    if (cap != (size_t)-1 && (n > cap / (size_t)width)) {
        PyErr_Format(PyExc_ValueError,
                     "%s: %zu elements of %d bytes do not fit in the allocation, "
                     "which holds %zu bytes", what, n, width, cap);
        return NULL;
    }
    if (d % (CUdeviceptr)width) {
        PyErr_Format(PyExc_ValueError, "%s: the address must be %d-byte aligned", what, width);
        return NULL;
    }
    if (pygpu_current_context(st) == NULL)
        return NULL;
    if (n == 0)
        Py_RETURN_NONE;
    if (width == 1)
        rc = async ? cu.cuMemsetD8Async(d, (unsigned char)v, n, s) : cu.cuMemsetD8(d, (unsigned char)v, n);
    else if (width == 2)
        rc = async ? cu.cuMemsetD16Async(d, (unsigned short)v, n, s) : cu.cuMemsetD16(d, (unsigned short)v, n);
    else
        rc = async ? cu.cuMemsetD32Async(d, (unsigned int)v, n, s) : cu.cuMemsetD32(d, (unsigned int)v, n);
    if (rc != CUDA_SUCCESS)
        return pygpu_cuda_error(st, rc, "cuMemset");
    Py_RETURN_NONE;
}

static PyObject *memset_d8(PyObject *m, PyObject *a) { return do_memset(m, a, 1, 0); }
static PyObject *memset_d16(PyObject *m, PyObject *a) { return do_memset(m, a, 2, 0); }
static PyObject *memset_d32(PyObject *m, PyObject *a) { return do_memset(m, a, 4, 0); }
static PyObject *memset_d8_async(PyObject *m, PyObject *a) { return do_memset(m, a, 1, 1); }
static PyObject *memset_d16_async(PyObject *m, PyObject *a) { return do_memset(m, a, 2, 1); }
static PyObject *memset_d32_async(PyObject *m, PyObject *a) { return do_memset(m, a, 4, 1); }

/* _memcpy_2d(dst, dst_pitch, dst_is_host, src, src_pitch, src_is_host,
 *            width_bytes, height, src_x, src_y, dst_x, dst_y, stream) */
static PyObject *
memcpy_2d(PyObject *module, PyObject *args)
{
    pygpu_state *st = PyModule_GetState(module);
    PyObject *dst, *src, *sobj;
    Py_ssize_t dpitch, spitch, width, height, sx, sy, dx, dy;
    int dhost, shost;
    CUDA_MEMCPY2D p;
    Py_buffer dview = {0}, sview = {0};
    CUstream s = NULL;
    CUresult rc;
    size_t cap;
    if (!PyArg_ParseTuple(args, "OnpOnpnnnnnnO:_memcpy_2d", &dst, &dpitch, &dhost,
                          &src, &spitch, &shost, &width, &height, &sx, &sy, &dx, &dy, &sobj))
        return NULL;
    if (width < 0 || height < 0 || sx < 0 || sy < 0 || dx < 0 || dy < 0
        || dpitch < width + dx || spitch < width + sx) {
        PyErr_SetString(PyExc_ValueError,
                        "Memcpy2D: width, height and offsets must be >= 0 and each "
                        "row must fit within its pitch");
        return NULL;
    }
    if (pygpu_get_stream(st, sobj, &s) < 0)
        return NULL;
    memset(&p, 0, sizeof p);
    p.srcXInBytes = (size_t)sx; p.srcY = (size_t)sy;
    p.dstXInBytes = (size_t)dx; p.dstY = (size_t)dy;
    p.srcPitch = (size_t)spitch; p.dstPitch = (size_t)dpitch;
    p.WidthInBytes = (size_t)width; p.Height = (size_t)height;
    size_t sneed = height ? (size_t)spitch * (size_t)(sy + height - 1) + (size_t)(sx + width) : 0;
    size_t dneed = height ? (size_t)dpitch * (size_t)(dy + height - 1) + (size_t)(dx + width) : 0;
    if (shost) {
        if (get_host_buffer(src, &sview, 0, "Memcpy2D source") < 0)
            return NULL;
        p.srcMemoryType = CU_MEMORYTYPE_HOST;
        p.srcHost = sview.buf;
        cap = (size_t)sview.len;
    } else {
        p.srcMemoryType = CU_MEMORYTYPE_DEVICE;
        if (pygpu_get_device_ptr(st, src, &p.srcDevice, &cap, 0) < 0)
            return NULL;
    }
    if (check_fits(sneed, cap, "Memcpy2D", "source") < 0)
        goto error;
    if (dhost) {
        if (get_host_buffer(dst, &dview, 1, "Memcpy2D destination") < 0)
            goto error;
        p.dstMemoryType = CU_MEMORYTYPE_HOST;
        p.dstHost = dview.buf;
        cap = (size_t)dview.len;
    } else {
        p.dstMemoryType = CU_MEMORYTYPE_DEVICE;
        if (pygpu_get_device_ptr(st, dst, &p.dstDevice, &cap, 0) < 0)
            goto error;
    }
    if (check_fits(dneed, cap, "Memcpy2D", "destination") < 0)
        goto error;
    if (pygpu_current_context(st) == NULL)
        goto error;
    if (width && height) {
        Py_BEGIN_ALLOW_THREADS
        rc = sobj == Py_None ? cu.cuMemcpy2D(&p) : cu.cuMemcpy2DAsync(&p, s);
        Py_END_ALLOW_THREADS
        if (rc != CUDA_SUCCESS) {
            pygpu_cuda_error(st, rc, sobj == Py_None ? "cuMemcpy2D" : "cuMemcpy2DAsync");
            goto error;
        }
    }
    if (sview.obj) PyBuffer_Release(&sview);
    if (dview.obj) PyBuffer_Release(&dview);
    Py_RETURN_NONE;
error:
    if (sview.obj) PyBuffer_Release(&sview);
    if (dview.obj) PyBuffer_Release(&dview);
    return NULL;
}

static PyObject *
mem_prefetch(PyObject *module, PyObject *args, PyObject *kwds)
{
    pygpu_state *st = PyModule_GetState(module);
    static char *kwlist[] = {"ptr", "size", "device", "stream", NULL};
    PyObject *pobj, *nobj, *sobj = Py_None;
    int device = -1;
    CUdeviceptr p;
    size_t cap, n;
    CUstream s;
    CUresult rc;
    CUmemLocation loc;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OO|iO:mem_prefetch", kwlist,
                                     &pobj, &nobj, &device, &sobj))
        return NULL;
    if (pygpu_get_device_ptr(st, pobj, &p, &cap, 0) < 0
        || parse_nbytes(nobj, &n, "size") < 0 || pygpu_get_stream(st, sobj, &s) < 0)
        return NULL;
    if (check_fits(n, cap, "mem_prefetch()", "allocation") < 0)
        return NULL;
    if (pygpu_current_context(st) == NULL)
        return NULL;
    if (cu.cuMemPrefetchAsync == NULL) {
        PyErr_SetString(st->LogicError, "mem_prefetch() needs a CUDA 12.2+ driver");
        return NULL;
    }
    memset(&loc, 0, sizeof loc);
    loc.type = device < 0 ? CU_MEM_LOCATION_TYPE_HOST : CU_MEM_LOCATION_TYPE_DEVICE;
    loc.id = device < 0 ? 0 : device;
    rc = cu.cuMemPrefetchAsync(p, n, loc, 0, s);
    if (rc != CUDA_SUCCESS)
        return pygpu_cuda_error(st, rc, "cuMemPrefetchAsync");
    Py_RETURN_NONE;
}

#define KW (METH_VARARGS | METH_KEYWORDS)
#define CF(f) (PyCFunction)(void (*)(void))(f)
static PyMethodDef memory_methods[] = {
    {"mem_alloc", mem_alloc, METH_O,
     "mem_alloc($module, nbytes, /)\n--\n\n"
     "Allocate nbytes of device memory in the current context. On "
     "out-of-memory, garbage is collected once and the allocation retried."},
    {"mem_alloc_async", CF(mem_alloc_async), KW,
     "mem_alloc_async($module, /, nbytes, stream=None)\n--\n\n"
     "Stream-ordered allocation from the device's default memory pool; freed "
     "on the same stream."},
    {"mem_alloc_managed", CF(mem_alloc_managed), KW,
     "mem_alloc_managed($module, /, nbytes, flags=mem_attach_flags.GLOBAL)\n--\n\n"
     "Managed (unified) memory."},
    {"mem_alloc_pitch", mem_alloc_pitch, METH_VARARGS,
     "mem_alloc_pitch($module, width, height, access_size, /)\n--\n\n"
     "Pitched 2-D allocation: returns (DeviceAllocation, pitch_in_bytes)."},
    {"mem_get_info", mem_get_info, METH_NOARGS,
     "mem_get_info($module, /)\n--\n\n(free, total) device memory in bytes."},
    {"mem_prefetch", CF(mem_prefetch), KW,
     "mem_prefetch($module, /, ptr, size, device=-1, stream=None)\n--\n\n"
     "Prefetch managed memory to a device ordinal (-1: to the host)."},
    {"memcpy_htod", CF(memcpy_htod), KW,
     "memcpy_htod($module, /, dest, src)\n--\n\nCopy a host buffer to device memory."},
    {"memcpy_htod_async", CF(memcpy_htod_async), KW,
     "memcpy_htod_async($module, /, dest, src, stream=None)\n--\n\n"
     "Asynchronous host-to-device copy (host memory should be page-locked)."},
    {"memcpy_dtoh", CF(memcpy_dtoh), KW,
     "memcpy_dtoh($module, /, dest, src)\n--\n\nCopy device memory into a writable host buffer."},
    {"memcpy_dtoh_async", CF(memcpy_dtoh_async), KW,
     "memcpy_dtoh_async($module, /, dest, src, stream=None)\n--\n\n"
     "Asynchronous device-to-host copy (host memory should be page-locked)."},
    {"memcpy_dtod", CF(memcpy_dtod), KW,
     "memcpy_dtod($module, /, dest, src, size)\n--\n\nDevice-to-device copy of size bytes."},
    {"memcpy_dtod_async", CF(memcpy_dtod_async), KW,
     "memcpy_dtod_async($module, /, dest, src, size, stream=None)\n--\n\n"
     "Asynchronous device-to-device copy."},
    {"memcpy_peer", CF(memcpy_peer), KW,
     "memcpy_peer($module, /, dest, src, size, dest_context, src_context)\n--\n\n"
     "Copy between the memory of two contexts (devices)."},
    {"memcpy_peer_async", CF(memcpy_peer_async), KW,
     "memcpy_peer_async($module, /, dest, src, size, dest_context, src_context, stream=None)\n--\n\n"
     "Asynchronous peer copy."},
    {"memset_d8", memset_d8, METH_VARARGS,
     "memset_d8($module, dest, value, count, /)\n--\n\nSet count bytes."},
    {"memset_d16", memset_d16, METH_VARARGS,
     "memset_d16($module, dest, value, count, /)\n--\n\nSet count 16-bit values."},
    {"memset_d32", memset_d32, METH_VARARGS,
     "memset_d32($module, dest, value, count, /)\n--\n\nSet count 32-bit values."},
    {"memset_d8_async", memset_d8_async, METH_VARARGS,
     "memset_d8_async($module, dest, value, count, stream=None, /)\n--\n\n"},
    {"memset_d16_async", memset_d16_async, METH_VARARGS,
     "memset_d16_async($module, dest, value, count, stream=None, /)\n--\n\n"},
    {"memset_d32_async", memset_d32_async, METH_VARARGS,
     "memset_d32_async($module, dest, value, count, stream=None, /)\n--\n\n"},
    {"_memcpy_2d", memcpy_2d, METH_VARARGS, NULL},
    {NULL}
};

int
pygpu_memory_setup(PyObject *m, pygpu_state *st)
{
    if (pygpu_add_type(m, &allocation_spec, &st->DeviceAllocationType) < 0)
        return -1;
    return PyModule_AddFunctions(m, memory_methods);
}
