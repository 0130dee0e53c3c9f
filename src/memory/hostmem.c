/* HostAllocation: page-locked host memory, exposed as NumPy arrays whose
 * .base is the HostAllocation, so the memory lives exactly as long as the
 * last array that uses it. */
#include "pygpu.h"
#define PYGPU_IMPORT_ARRAY
#include "core/pygpu_numpy.h"

/* Free or unregister the memory once; the registered array's buffer is
 * given back whether or not anything was registered (0 bytes, or a failed
 * cuMemHostRegister), so the array is never kept alive by a dead wrapper.
 * Never raises.  GIL held. */
static void
hostalloc_release(pygpu_HostAllocation *self)
{
    pygpu_scope s;
    int counted = 0;
    if (self->freed)
        return;
    self->freed = 1;
    if (self->ptr != NULL && !self->registered && self->context != NULL) {
        /* a page-locked block: a host view a detach waits for */
        self->context->host_allocs--;
        counted = 1;
    }
    if (self->ptr != NULL && pygpu_lifetime_enter(self->context, &s) == 0) {
        CUresult ignored; /* never raises: a release path */
        if (self->registered)
            PYGPU_CU_RELAX(ignored, cuMemHostUnregister, self->ptr);
        else
            PYGPU_CU_RELAX(ignored, cuMemFreeHost, self->ptr);
        (void)ignored;
        pygpu_scope_exit(&s);
    }
    self->ptr = NULL;
    if (self->view.obj != NULL)
        PyBuffer_Release(&self->view);
    if (counted)
        pygpu_lifetime_view_gone(self->context);
}

static int
hostalloc_traverse(pygpu_HostAllocation *self, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE(self));
    Py_VISIT(self->owner);
    Py_VISIT(self->view.obj);
    return 0;
}

static void
hostalloc_dealloc(pygpu_HostAllocation *self)
{
    PyTypeObject *tp = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    hostalloc_release(self);
    Py_CLEAR(self->owner);
    Py_CLEAR(self->context);
    tp->tp_free((PyObject *)self);
    Py_DECREF(tp);
}

static pygpu_HostAllocation *
hostalloc_new(pygpu_state *st, pygpu_Context *ctx)
{
    pygpu_HostAllocation *self = PyObject_GC_New(pygpu_HostAllocation, st->HostAllocationType);
    if (self == NULL)
        return NULL;
    self->ptr = NULL;
    self->size = 0;
    self->flags = 0;
    self->registered = 0;
    self->owner = NULL;
    memset(&self->view, 0, sizeof self->view);
    Py_INCREF(ctx);
    self->context = ctx;
    self->freed = 0;
    self->exports = 0;
    self->closed = 0;
    PyObject_GC_Track(self);
    return self;
}

/* Parse an array's (shape, dtype, order): *descr is a new reference, dims
 * must be freed with PyDimMem_FREE(dims->ptr).  Returns 0 or -1. */
static int
parse_array_spec(PyObject *shape_obj, PyObject *dtype_obj, const char *order, PyArray_Descr **descr,
                 PyArray_Dims *dims, size_t *nbytes, int *fortran)
{
    int i;
    *descr = NULL;
    dims->ptr = NULL;
    dims->len = 0;
    if (strcmp(order, "C") != 0 && strcmp(order, "F") != 0) {
        PyErr_Format(PyExc_ValueError, "order must be 'C' or 'F', not '%s'", order);
        return -1;
    }
    *fortran = order[0] == 'F';
    if (!PyArray_DescrConverter(dtype_obj, descr))
        return -1;
    if (PyDataType_REFCHK(*descr)) {
        /* the memory starts as garbage (or is written by the GPU): it must
         * never be read as object pointers */
        PyErr_Format(PyExc_TypeError,
                     "dtype %R holds Python objects, which cannot live "
                     "in page-locked or managed memory",
                     (PyObject *)*descr);
        Py_CLEAR(*descr);
        return -1;
    }
    if (shape_obj == Py_None) {
        /* NumPy 2.0 (Python 3.9's last) takes None as () with a
         * DeprecationWarning, later NumPy refuses it: refused everywhere */
        PyErr_SetString(PyExc_TypeError, "Use () not None as shape arguments");
        goto error;
    }
    if (PyLong_Check(shape_obj)) {
        PyObject *t = PyTuple_Pack(1, shape_obj);
        int ok = t != NULL && PyArray_IntpConverter(t, dims);
        Py_XDECREF(t);
        if (!ok)
            goto error;
    } else if (!PyArray_IntpConverter(shape_obj, dims)) {
        goto error;
    }
    *nbytes = (size_t)PyDataType_ELSIZE(*descr);
    for (i = 0; i < dims->len; i++) {
        if (dims->ptr[i] < 0) {
            PyErr_Format(PyExc_ValueError, "negative dimension %zd in shape",
                         (Py_ssize_t)dims->ptr[i]);
            goto error;
        }
        if (dims->ptr[i] && *nbytes > ((size_t)-1 >> 1) / (size_t)dims->ptr[i]) {
            PyErr_SetString(PyExc_ValueError, "array is too big");
            goto error;
        }
        *nbytes *= (size_t)dims->ptr[i];
    }
    return 0;
error:
    Py_CLEAR(*descr);
    PyDimMem_FREE(dims->ptr);
    dims->ptr = NULL;
    return -1;
}

/* An ndarray over p whose .base is owner.  Steals descr and owner; frees
 * dims.  p may be NULL for an empty array. */
static PyObject *
wrap_array(PyArray_Descr *descr, PyArray_Dims *dims, void *p, int fortran, PyObject *owner)
{
    static char empty[16] __attribute__((aligned(16)));
    PyObject *arr = PyArray_NewFromDescr(
        &PyArray_Type, descr, dims->len, dims->ptr, NULL, p ? p : (void *)empty,
        NPY_ARRAY_WRITEABLE | NPY_ARRAY_ALIGNED
            | (fortran ? NPY_ARRAY_F_CONTIGUOUS : NPY_ARRAY_C_CONTIGUOUS),
        NULL);
    PyDimMem_FREE(dims->ptr);
    dims->ptr = NULL;
    if (arr == NULL) {
        Py_DECREF(owner);
        return NULL;
    }
    if (PyArray_SetBaseObject((PyArrayObject *)arr, owner) < 0) { /* steals owner */
        Py_DECREF(arr);
        return NULL;
    }
    return arr;
}

/* _pagelocked(shape, dtype, order, mem_flags, zero) -> ndarray */
static PyObject *
hostmem_pagelocked(PyObject *module, PyObject *args)
{
    pygpu_state *st = PyModule_GetState(module);
    PyObject *shape_obj, *dtype_obj, *fobj;
    PyArray_Descr *descr;
    PyArray_Dims dims;
    const char *order;
    unsigned int flags;
    int zero, fortran;
    size_t nbytes;
    pygpu_Context *ctx;
    pygpu_HostAllocation *ha;
    pygpu_scope s;
    CUresult rc;
    void *p = NULL;

    if (!PyArg_ParseTuple(args, "OOsOp:_pagelocked", &shape_obj, &dtype_obj, &order, &fobj, &zero))
        return NULL;
    if (pygpu_parse_uint(fobj, &flags, "pagelocked_empty(): mem_flags") < 0)
        return NULL;
    if (parse_array_spec(shape_obj, dtype_obj, order, &descr, &dims, &nbytes, &fortran) < 0)
        return NULL;
    /* the scope keeps ctx a valid object while the GIL is released: another
     * thread may detach it meanwhile */
    if ((ctx = pygpu_current_context(st)) == NULL || pygpu_scope_enter(st, ctx, &s) < 0)
        goto error;
    if (nbytes > 0) {
        Py_BEGIN_ALLOW_THREADS
            PYGPU_CU_RELAX(rc, cuMemHostAlloc, &p, nbytes, flags);
        Py_END_ALLOW_THREADS
        if (rc == CUDA_SUCCESS && ctx->detached) {
            /* the memory died with the context: nothing to free */
            pygpu_scope_exit(&s);
            PyErr_SetString(st->LogicError, "pagelocked_empty(): the context was detached "
                                            "by another thread during the allocation");
            goto error;
        }
        if (rc != CUDA_SUCCESS) {
            pygpu_scope_exit(&s);
            pygpu_cuda_error(st, rc, "cuMemHostAlloc");
            goto error;
        }
        if (zero)
            memset(p, 0, nbytes);
    }
    ha = hostalloc_new(st, ctx);
    pygpu_scope_exit(&s);
    if (ha == NULL) {
        if (p)
            PYGPU_CU_RELAX(rc, cuMemFreeHost, p);
        goto error;
    }
    ha->ptr = p;
    ha->size = nbytes;
    ha->flags = flags;
    if (p != NULL)
        ctx->host_allocs++; /* (memory/lifetime.c) */
    return wrap_array(descr, &dims, p, fortran, (PyObject *)ha);
error:
    Py_DECREF(descr);
    PyDimMem_FREE(dims.ptr);
    return NULL;
}

/* _managed(shape, dtype, order, attach_flags, zero) -> ndarray over managed
 * memory; its .base is the DeviceAllocation that owns it */
PyObject *pygpu_managed_allocation(pygpu_state *st, size_t n, unsigned int flags);

static PyObject *
hostmem_managed(PyObject *module, PyObject *args)
{
    pygpu_state *st = PyModule_GetState(module);
    PyObject *shape_obj, *dtype_obj, *alloc, *fobj;
    PyArray_Descr *descr;
    PyArray_Dims dims;
    const char *order;
    unsigned int flags;
    int zero, fortran;
    size_t nbytes;
    CUdeviceptr p;

    if (!PyArg_ParseTuple(args, "OOsOp:_managed", &shape_obj, &dtype_obj, &order, &fobj, &zero))
        return NULL;
    if (pygpu_parse_uint(fobj, &flags, "managed_empty(): mem_flags") < 0)
        return NULL;
    if (parse_array_spec(shape_obj, dtype_obj, order, &descr, &dims, &nbytes, &fortran) < 0)
        return NULL;
    /* zeroing waits for the context, which a capture forbids (graph.c) */
    if (zero && nbytes && pygpu_captures_active != 0) {
        pygpu_Context *ctx = pygpu_current_context(st);
        if (ctx == NULL || pygpu_capture_context_check(st, ctx, "managed_zeros()") < 0)
            goto error;
    }
    alloc = pygpu_managed_allocation(st, nbytes, flags);
    if (alloc == NULL)
        goto error;
    p = ((pygpu_DeviceAllocation *)alloc)->ptr;
    if (zero && nbytes) {
        pygpu_pfn_cuMemsetD8 set = PYGPU_CU_LEGACY(st, cuMemsetD8, "managed_zeros()");
        pygpu_pfn_cuCtxSynchronize sync = PYGPU_CU_LEGACY(st, cuCtxSynchronize, "managed_zeros()");
        CUresult rc;
        if (set == NULL || sync == NULL) {
            Py_DECREF(alloc);
            goto error;
        }
        rc = set(p, 0, nbytes);
        if (rc == CUDA_SUCCESS)
            rc = sync();
        if (rc != CUDA_SUCCESS) {
            Py_DECREF(alloc);
            pygpu_cuda_error(st, rc, "cuMemsetD8");
            goto error;
        }
    }
    return wrap_array(descr, &dims, (void *)(uintptr_t)p, fortran, alloc);
error:
    Py_DECREF(descr);
    PyDimMem_FREE(dims.ptr);
    return NULL;
}

/* register_host_memory(ary, flags=0) -> ndarray viewing ary's memory, whose
 * base keeps ary alive and unregisters on death */
static PyObject *
hostmem_register(PyObject *module, PyObject *args, PyObject *kwds)
{
    pygpu_state *st = PyModule_GetState(module);
    static char *kwlist[] = {"ary", "flags", NULL};
    PyObject *ary, *arr, *fobj = NULL;
    unsigned int flags = 0;
    pygpu_Context *ctx;
    pygpu_HostAllocation *ha;
    PyArrayObject *src;
    CUresult rc;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O|O:register_host_memory", kwlist, &ary, &fobj))
        return NULL;
    if (fobj != NULL && pygpu_parse_uint(fobj, &flags, "register_host_memory(): flags") < 0)
        return NULL;
    if (!PyArray_Check(ary)) {
        PyErr_Format(PyExc_TypeError, "register_host_memory() takes a NumPy array, not %.100s",
                     Py_TYPE(ary)->tp_name);
        return NULL;
    }
    src = (PyArrayObject *)ary;
    if (!PyArray_ISCONTIGUOUS(src) && !PyArray_ISFORTRAN(src)) {
        PyErr_SetString(PyExc_ValueError, "register_host_memory(): the array must be contiguous");
        return NULL;
    }
    if ((ctx = pygpu_current_context(st)) == NULL)
        return NULL;
    ha = hostalloc_new(st, ctx);
    if (ha == NULL)
        return NULL;
    if (PyObject_GetBuffer(ary, &ha->view, PyBUF_ANY_CONTIGUOUS) < 0) {
        Py_DECREF(ha);
        return NULL;
    }
    ha->registered = 1;
    ha->flags = flags;
    ha->size = (size_t)ha->view.len;
    if (ha->size > 0) {
        Py_BEGIN_ALLOW_THREADS
            PYGPU_CU_RELAX(rc, cuMemHostRegister, ha->view.buf, ha->size, flags);
        Py_END_ALLOW_THREADS
        if (rc != CUDA_SUCCESS) {
            Py_DECREF(ha);
            return pygpu_cuda_error(st, rc, "cuMemHostRegister");
        }
        ha->ptr = ha->view.buf;
    }
    Py_INCREF(PyArray_DESCR(src));
    arr = PyArray_NewFromDescr(&PyArray_Type, PyArray_DESCR(src), PyArray_NDIM(src),
                               PyArray_DIMS(src), PyArray_STRIDES(src), PyArray_DATA(src),
                               PyArray_FLAGS(src)
                                   & (NPY_ARRAY_WRITEABLE | NPY_ARRAY_ALIGNED
                                      | NPY_ARRAY_C_CONTIGUOUS | NPY_ARRAY_F_CONTIGUOUS),
                               NULL);
    if (arr == NULL) {
        Py_DECREF(ha);
        return NULL;
    }
    if (PyArray_SetBaseObject((PyArrayObject *)arr, (PyObject *)ha) < 0) {
        Py_DECREF(arr);
        return NULL;
    }
    return arr;
}

/* 0, or -1 with LogicError once free() or unregister() was called */
static int
hostalloc_check(pygpu_state *st, pygpu_HostAllocation *self)
{
    if (self->closed) {
        PyErr_Format(st->LogicError, "the HostAllocation was %s",
                     self->registered ? "unregistered" : "freed");
        return -1;
    }
    return 0;
}

/* free(), and RegisteredHostMemory's unregister(): PyCUDA frees the memory
 * at once and leaves the arrays over it dangling (reading them is undefined
 * behaviour); here no array may read freed memory: registered memory is
 * unregistered now (the array's own memory stays valid, no longer pinned),
 * page-locked memory is marked freed now and goes back to the driver with
 * this object, when the last array over it dies.  Idempotent. */
static PyObject *
hostalloc_free(pygpu_HostAllocation *self, PyObject *unused)
{
    pygpu_scope s;
    if (self->closed)
        Py_RETURN_NONE;
    self->closed = 1;
    if (self->registered && self->ptr != NULL && !self->freed
        && pygpu_scope_enter_quiet(self->context, &s) == 0) {
        {
            CUresult ignored_;
            PYGPU_CU_RELAX(ignored_, cuMemHostUnregister, self->ptr); /* unsafe while capturing */
            (void)ignored_;
        }
        pygpu_scope_exit(&s);
        self->ptr = NULL; /* hostalloc_release gives the buffer back only */
    }
    Py_RETURN_NONE;
}

/* get_flags(): the driver's flags of page-locked memory
 * (cuMemHostGetFlags); for registered memory, the flags it was registered
 * with */
static PyObject *
hostalloc_get_flags_method(pygpu_HostAllocation *self, PyObject *unused)
{
    pygpu_state *st = PYGPU_STATE(self);
    unsigned int flags = 0;
    pygpu_scope s;
    CUresult rc;
    if (hostalloc_check(st, self) < 0)
        return NULL;
    if (self->registered || self->ptr == NULL)
        return PyLong_FromUnsignedLong(self->flags);
    if (cu.cuMemHostGetFlags == NULL) {
        PyErr_SetString(st->LogicError, "get_flags(): the driver has no cuMemHostGetFlags");
        return NULL;
    }
    if (pygpu_scope_enter(st, self->context, &s) < 0)
        return NULL;
    rc = cu.cuMemHostGetFlags(&flags, self->ptr);
    pygpu_scope_exit(&s);
    if (rc != CUDA_SUCCESS)
        return pygpu_cuda_error(st, rc, "cuMemHostGetFlags");
    return PyLong_FromUnsignedLong(flags);
}

static PyObject *
hostalloc_get_device_pointer(pygpu_HostAllocation *self, PyObject *unused)
{
    pygpu_state *st = PYGPU_STATE(self);
    CUdeviceptr d;
    CUresult rc;
    pygpu_scope s;
    if (hostalloc_check(st, self) < 0)
        return NULL;
    if (self->freed || self->ptr == NULL) {
        PyErr_SetString(st->LogicError, "the HostAllocation holds no memory");
        return NULL;
    }
    if (pygpu_scope_enter(st, self->context, &s) < 0)
        return NULL;
    rc = cu.cuMemHostGetDevicePointer(&d, self->ptr, 0);
    pygpu_scope_exit(&s);
    if (rc != CUDA_SUCCESS)
        return pygpu_cuda_error_ex(st, rc, "cuMemHostGetDevicePointer",
                                   "was the memory allocated with host_alloc_flags.DEVICEMAP?");
    return PyLong_FromUnsignedLongLong((unsigned long long)d);
}

static PyObject *
hostalloc_get_size(pygpu_HostAllocation *self, void *c)
{
    return PyLong_FromSize_t(self->size);
}

static PyObject *
hostalloc_get_flags(pygpu_HostAllocation *self, void *c)
{
    return PyLong_FromUnsignedLong(self->flags);
}

static PyObject *
hostalloc_get_address(pygpu_HostAllocation *self, void *c)
{
    return PyLong_FromVoidPtr(self->ptr);
}

static PyObject *
hostalloc_get_registered(pygpu_HostAllocation *self, void *c)
{
    return PyBool_FromLong(self->registered);
}

static PyObject *
hostalloc_get_freed(pygpu_HostAllocation *self, void *c)
{
    return PyBool_FromLong(self->closed);
}

static PyObject *
hostalloc_repr(pygpu_HostAllocation *self)
{
    return PyUnicode_FromFormat(
        "<pygpu.driver.HostAllocation %s%s%zu bytes at %p>",
        self->closed ? (self->registered ? "(unregistered) " : "(freed) ") : "",
        self->registered ? "registered, " : "page-locked, ", self->size, self->ptr);
}

static PyMethodDef hostalloc_methods[] = {
    {"get_device_pointer", (PyCFunction)hostalloc_get_device_pointer, METH_NOARGS,
     "get_device_pointer($self, /)\n--\n\n"
     "Device address of mapped (host_alloc_flags.DEVICEMAP) memory."},
    {"free", (PyCFunction)hostalloc_free, METH_NOARGS,
     "free($self, /)\n--\n\nEnd the allocation's use (idempotent): registered memory is "
     "unregistered now; page-locked memory reads as freed now and goes back to the "
     "driver when the last array over it dies (no array ever reads freed memory)."},
    {"unregister", (PyCFunction)hostalloc_free, METH_NOARGS,
     "unregister($self, /)\n--\n\nPyCUDA's RegisteredHostMemory.unregister(): free()."},
    {"get_flags", (PyCFunction)hostalloc_get_flags_method, METH_NOARGS,
     "get_flags($self, /)\n--\n\nThe driver's host_alloc_flags of page-locked memory "
     "(cuMemHostGetFlags; it may add DEVICEMAP), or the flags memory was registered "
     "with."},
    {NULL},
};

static PyGetSetDef hostalloc_getset[] = {
    {"size", (getter)hostalloc_get_size, NULL, "Size in bytes.", NULL},
    {"flags", (getter)hostalloc_get_flags, NULL, "cuMemHostAlloc / cuMemHostRegister flags.", NULL},
    {"address", (getter)hostalloc_get_address, NULL, "Host address.", NULL},
    {"registered", (getter)hostalloc_get_registered, NULL,
     "True for memory from register_host_memory().", NULL},
    {"freed", (getter)hostalloc_get_freed, NULL, "Whether free() (or unregister()) was called.",
     NULL},
    {NULL},
};

static PyType_Slot hostalloc_slots[] = {
    {Py_tp_dealloc, hostalloc_dealloc},
    {Py_tp_traverse, hostalloc_traverse},
    {Py_tp_methods, hostalloc_methods},
    {Py_tp_getset, hostalloc_getset},
    {Py_tp_repr, hostalloc_repr},
    {Py_tp_doc, "Page-locked host memory; the .base of arrays from pagelocked_empty() "
                "and register_host_memory(). Freed or unregistered when the last "
                "array using it dies."},
    {0, NULL},
};

static PyType_Spec hostalloc_spec = {"pygpu.driver.HostAllocation", sizeof(pygpu_HostAllocation), 0,
                                     Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE
                                         | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_DISALLOW_INSTANTIATION
                                         | Py_TPFLAGS_BASETYPE,
                                     hostalloc_slots};

#define CF(f) (PyCFunction)(void (*)(void))(f)
static PyMethodDef hostmem_methods[] = {
    {"_pagelocked", hostmem_pagelocked, METH_VARARGS, NULL},
    {"_managed", hostmem_managed, METH_VARARGS, NULL},
    {"register_host_memory", CF(hostmem_register), METH_VARARGS | METH_KEYWORDS,
     "register_host_memory($module, /, ary, flags=0)\n--\n\n"
     "Page-lock a contiguous array's memory; returns an array over the same "
     "memory whose .base unregisters it when the last user dies."},
    {NULL},
};

int
pygpu_hostmem_setup(PyObject *m, pygpu_state *st)
{
    if (_import_array() < 0)
        return -1;
    if (pygpu_add_type(m, &hostalloc_spec, &st->HostAllocationType) < 0)
        return -1;
    return PyModule_AddFunctions(m, hostmem_methods);
}
