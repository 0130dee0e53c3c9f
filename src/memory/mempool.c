/* MemoryPool: a stream-ordered memory pool (cuMemPoolCreate) that can be
 * shared with other processes.
 *
 * MemoryPool(ipc=True) makes a pool on the current context's device whose
 * allocations may be exported: the pool itself as a POSIX file descriptor
 * (cuMemPoolExportToShareableHandle; pygpu.driver passes it between
 * processes through multiprocessing's fd passing), each allocation as 64
 * bytes (cuMemPoolExportPointer).  Another process imports the pool from
 * the descriptor (it cannot allocate from it) and then the pointers: each
 * import is a DeviceAllocation freed (cuMemFreeAsync) in the importer, which
 * must happen before the exporter frees the memory.
 */
#include "pygpu.h"
#include <unistd.h>

typedef struct {
    PyObject_HEAD CUmemoryPool handle; /* owned: cuMemPoolDestroy (imported ones too) */
    pygpu_Context *context;            /* strong ref */
    int device;
    int ipc;      /* made with POSIX fd handles */
    int imported; /* from another process: cannot allocate */
    PyObject *weakreflist;
} pygpu_MemoryPool;

static void
pool_release(pygpu_MemoryPool *self)
{
    pygpu_scope s;
    CUmemoryPool h = self->handle;
    if (h == NULL)
        return;
    self->handle = NULL;
    if (pygpu_scope_enter_quiet(self->context, &s) < 0)
        return;
    (void)cu.cuMemPoolDestroy(h);
    pygpu_scope_exit(&s);
}

static void
pool_dealloc(pygpu_MemoryPool *self)
{
    PyTypeObject *tp = Py_TYPE(self);
    if (self->weakreflist != NULL)
        PyObject_ClearWeakRefs((PyObject *)self);
    pool_release(self);
    Py_CLEAR(self->context);
    tp->tp_free((PyObject *)self);
    Py_DECREF(tp);
}

static int
pool_check(pygpu_state *st, pygpu_MemoryPool *self, const char *what)
{
    if (self->handle == NULL) {
        PyErr_Format(st->LogicError, "%s: the MemoryPool was destroyed", what);
        return -1;
    }
    return pygpu_context_check(st, self->context);
}

static int
need_pools(pygpu_state *st, const char *what)
{
    if (cu.cuMemPoolCreate == NULL || cu.cuMemPoolDestroy == NULL
        || cu.cuMemAllocFromPoolAsync == NULL || cu.cuMemFreeAsync == NULL) {
        PyErr_Format(st->LogicError,
                     "%s needs stream-ordered memory pools (CUDA 11.2+), "
                     "which this CUDA driver does not provide",
                     what);
        return -1;
    }
    return 0;
}

static pygpu_MemoryPool *
pool_wrap(pygpu_state *st, PyTypeObject *type, pygpu_Context *ctx, CUmemoryPool h)
{
    pygpu_MemoryPool *self = (pygpu_MemoryPool *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    self->handle = h;
    Py_INCREF(ctx);
    self->context = ctx;
    self->device = ctx->ordinal;
    self->ipc = 1;
    self->imported = 0;
    self->weakreflist = NULL;
    return self;
}

/* MemoryPool(ipc=True, max_size=0) */
static PyObject *
pool_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    pygpu_state *st = pygpu_state_from_type(type);
    static char *kwlist[] = {"ipc", "max_size", NULL};
    int ipc = 1;
    Py_ssize_t max_size = 0;
    pygpu_Context *ctx;
    pygpu_MemoryPool *self;
    CUmemPoolProps props;
    CUmemoryPool h;
    pygpu_scope s;
    CUresult rc;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|pn:MemoryPool", kwlist, &ipc, &max_size))
        return NULL;
    if (max_size < 0) {
        PyErr_Format(PyExc_ValueError, "MemoryPool(): max_size must be >= 0, got %zd", max_size);
        return NULL;
    }
    if ((ctx = pygpu_current_context(st)) == NULL || need_pools(st, "MemoryPool()") < 0)
        return NULL;
    memset(&props, 0, sizeof props);
    props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    props.handleTypes = ipc ? CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR : CU_MEM_HANDLE_TYPE_NONE;
    props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    props.location.id = ctx->ordinal;
    props.maxSize = (size_t)max_size;
    if (pygpu_scope_enter(st, ctx, &s) < 0)
        return NULL;
    rc = cu.cuMemPoolCreate(&h, &props);
    pygpu_scope_exit(&s);
    if (rc != CUDA_SUCCESS)
        return pygpu_cuda_error_ex(st, rc, "cuMemPoolCreate",
                                   ipc ? "the device may not support POSIX file "
                                         "descriptor handles (ipc=False makes a private "
                                         "pool)"
                                       : NULL);
    self = pool_wrap(st, type, ctx, h);
    if (self == NULL) {
        cu.cuMemPoolDestroy(h);
        return NULL;
    }
    self->ipc = ipc;
    return (PyObject *)self;
}

/* a DeviceAllocation of kind 2 (cuMemFreeAsync on stream s), keeping the
 * pool (and the stream object, when one) alive until it is freed */
static PyObject *
pool_allocation(pygpu_state *st, pygpu_MemoryPool *self, CUdeviceptr p, size_t n, CUstream s,
                PyObject *sobj)
{
    PyObject *res =
        pygpu_allocation_new(st, st->DeviceAllocationType, self->context, p, n, PYGPU_ALLOC_POOL);
    PyObject *owner;
    if (res == NULL)
        return NULL;
    owner = sobj == Py_None ? Py_NewRef((PyObject *)self) : PyTuple_Pack(2, (PyObject *)self, sobj);
    if (owner == NULL) {
        /* the caller frees p on its stream: the object must not as well */
        ((pygpu_DeviceAllocation *)res)->kind = PYGPU_ALLOC_BORROWED;
        Py_DECREF(res);
        return NULL;
    }
    ((pygpu_DeviceAllocation *)res)->free_stream = s;
    ((pygpu_DeviceAllocation *)res)->owner = owner;
    return res;
}

static PyObject *
pool_allocate(pygpu_MemoryPool *self, PyObject *args, PyObject *kwds)
{
    pygpu_state *st = PYGPU_STATE(self);
    static char *kwlist[] = {"nbytes", "stream", NULL};
    PyObject *sobj = Py_None, *res;
    Py_ssize_t n;
    CUdeviceptr p = 0;
    pygpu_scope sc;
    CUstream s;
    CUresult rc;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "n|O:allocate", kwlist, &n, &sobj))
        return NULL;
    if (n <= 0) {
        PyErr_Format(PyExc_ValueError, "allocate(): nbytes must be > 0, got %zd", n);
        return NULL;
    }
    if (pool_check(st, self, "allocate()") < 0 || pygpu_get_stream(st, sobj, &s) < 0)
        return NULL;
    if (self->imported) {
        PyErr_SetString(PyExc_ValueError,
                        "allocate(): a MemoryPool imported from another "
                        "process cannot allocate (CUDA allows only import_pointer())");
        return NULL;
    }
    if (pygpu_scope_enter(st, self->context, &sc) < 0)
        return NULL;
    rc = cu.cuMemAllocFromPoolAsync(&p, (size_t)n, self->handle, s);
    pygpu_scope_exit(&sc);
    if (rc != CUDA_SUCCESS)
        return pygpu_cuda_error(st, rc, "cuMemAllocFromPoolAsync");
    res = pool_allocation(st, self, p, (size_t)n, s, sobj);
    if (res == NULL && p != 0 && pygpu_scope_enter_quiet(self->context, &sc) == 0) {
        cu.cuMemFreeAsync(p, s);
        pygpu_scope_exit(&sc);
    }
    return res;
}

/* _export_fd(): the pool as a POSIX file descriptor the caller owns */
static PyObject *
pool_export_fd(pygpu_MemoryPool *self, PyObject *unused)
{
    pygpu_state *st = PYGPU_STATE(self);
    pygpu_scope s;
    CUresult rc;
    int fd = -1;
    if (pool_check(st, self, "export_pool()") < 0
        || pygpu_need_entry(st, (void *)cu.cuMemPoolExportToShareableHandle,
                            "cuMemPoolExportToShareableHandle", "export_pool()")
               < 0)
        return NULL;
    if (!self->ipc || self->imported) {
        PyErr_SetString(PyExc_ValueError,
                        self->imported
                            ? "export_pool(): an imported MemoryPool cannot be exported again"
                            : "export_pool(): the MemoryPool was made with ipc=False");
        return NULL;
    }
    if (pygpu_scope_enter(st, self->context, &s) < 0)
        return NULL;
    rc = cu.cuMemPoolExportToShareableHandle(&fd, self->handle,
                                             CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
    pygpu_scope_exit(&s);
    if (rc != CUDA_SUCCESS)
        return pygpu_cuda_error(st, rc, "cuMemPoolExportToShareableHandle");
    return PyLong_FromLong(fd);
}

/* _import_fd(fd): a MemoryPool from another process's descriptor (the fd
 * stays the caller's) */
static PyObject *
pool_import_fd(PyObject *cls, PyObject *arg)
{
    PyTypeObject *type = (PyTypeObject *)cls;
    pygpu_state *st = pygpu_state_from_type(type);
    pygpu_MemoryPool *self;
    pygpu_Context *ctx;
    CUmemoryPool h;
    pygpu_scope s;
    CUresult rc;
    int fd = (int)PyLong_AsLong(arg);
    if (fd == -1 && PyErr_Occurred())
        return NULL;
    if ((ctx = pygpu_current_context(st)) == NULL || need_pools(st, "import_pool()") < 0
        || pygpu_need_entry(st, (void *)cu.cuMemPoolImportFromShareableHandle,
                            "cuMemPoolImportFromShareableHandle", "import_pool()")
               < 0
        || pygpu_scope_enter(st, ctx, &s) < 0)
        return NULL;
    rc = cu.cuMemPoolImportFromShareableHandle(&h, (void *)(intptr_t)fd,
                                               CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
    if (rc != CUDA_SUCCESS) {
        pygpu_scope_exit(&s);
        return pygpu_cuda_error_ex(st, rc, "cuMemPoolImportFromShareableHandle",
                                   "the descriptor must come from export_pool() of "
                                   "a live pool");
    }
    /* this device reads and writes the pool's memory (an imported pool may
     * come without access for it) */
    if (cu.cuMemPoolGetAccess != NULL && cu.cuMemPoolSetAccess != NULL) {
        CUmemAccess_flags flags = CU_MEM_ACCESS_FLAGS_PROT_NONE;
        CUmemLocation loc;
        const char *routine = "cuMemPoolGetAccess";
        memset(&loc, 0, sizeof loc);
        loc.type = CU_MEM_LOCATION_TYPE_DEVICE;
        loc.id = ctx->ordinal;
        rc = cu.cuMemPoolGetAccess(&flags, h, &loc);
        if (rc == CUDA_SUCCESS && flags != CU_MEM_ACCESS_FLAGS_PROT_READWRITE) {
            CUmemAccessDesc desc;
            memset(&desc, 0, sizeof desc);
            desc.location = loc;
            desc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
            routine = "cuMemPoolSetAccess";
            rc = cu.cuMemPoolSetAccess(h, &desc, 1);
        }
        if (rc != CUDA_SUCCESS) {
            cu.cuMemPoolDestroy(h);
            pygpu_scope_exit(&s);
            return pygpu_cuda_error(st, rc, routine);
        }
    }
    pygpu_scope_exit(&s);
    self = pool_wrap(st, type, ctx, h);
    if (self == NULL) {
        cu.cuMemPoolDestroy(h);
        return NULL;
    }
    self->imported = 1;
    return (PyObject *)self;
}

static PyObject *
pool_export_pointer(pygpu_MemoryPool *self, PyObject *arg)
{
    pygpu_state *st = PYGPU_STATE(self);
    CUmemPoolPtrExportData data;
    CUdeviceptr p;
    size_t cap;
    pygpu_scope s;
    CUresult rc;
    if (pool_check(st, self, "export_pointer()") < 0
        || pygpu_need_entry(st, (void *)cu.cuMemPoolExportPointer, "cuMemPoolExportPointer",
                            "MemoryPool.export_pointer()")
               < 0)
        return NULL;
    if (pygpu_is_allocation(st, arg) && ((pygpu_DeviceAllocation *)arg)->freed) {
        PyErr_SetString(st->LogicError, "export_pointer(): the DeviceAllocation was freed");
        return NULL;
    }
    if (pygpu_get_device_ptr(st, arg, &p, &cap, 0) < 0
        || pygpu_scope_enter(st, self->context, &s) < 0)
        return NULL;
    rc = cu.cuMemPoolExportPointer(&data, p);
    pygpu_scope_exit(&s);
    if (rc != CUDA_SUCCESS)
        return pygpu_cuda_error_ex(st, rc, "cuMemPoolExportPointer",
                                   "only memory from this pool's allocate() can be exported");
    /* another process may import the pointer until this one lets it go: a
     * free() of the allocation waits for the object's death (hold.c) */
    if (pygpu_is_allocation(st, arg)
        && pygpu_hold_forever(st, arg, "an IPC export (MemoryPool.export_pointer)") < 0)
        return NULL;
    return PyBytes_FromStringAndSize((const char *)&data, sizeof data);
}

static PyObject *
pool_import_pointer(pygpu_MemoryPool *self, PyObject *args, PyObject *kwds)
{
    pygpu_state *st = PYGPU_STATE(self);
    static char *kwlist[] = {"data", "nbytes", NULL};
    CUmemPoolPtrExportData data;
    PyObject *dobj, *res;
    Py_ssize_t n = -1;
    CUdeviceptr p = 0, base = 0;
    size_t range = 0;
    pygpu_scope s;
    CUresult rc;
    char *buf;
    Py_ssize_t len;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O|n:import_pointer", kwlist, &dobj, &n))
        return NULL;
    if (!PyBytes_Check(dobj) && !PyByteArray_Check(dobj)) {
        PyErr_Format(PyExc_TypeError,
                     "import_pointer(): data must be the bytes of "
                     "export_pointer(), not %.100s",
                     Py_TYPE(dobj)->tp_name);
        return NULL;
    }
    buf = PyBytes_Check(dobj) ? PyBytes_AS_STRING(dobj) : PyByteArray_AS_STRING(dobj);
    len = PyBytes_Check(dobj) ? PyBytes_GET_SIZE(dobj) : PyByteArray_GET_SIZE(dobj);
    if ((size_t)len != sizeof data) {
        PyErr_Format(PyExc_ValueError,
                     "import_pointer(): data has %zd bytes; an exported "
                     "pool pointer has %zu",
                     len, sizeof data);
        return NULL;
    }
    memcpy(&data, buf, sizeof data);
    if (pool_check(st, self, "import_pointer()") < 0
        || pygpu_need_entry(st, (void *)cu.cuMemPoolImportPointer, "cuMemPoolImportPointer",
                            "MemoryPool.import_pointer()")
               < 0
        || pygpu_scope_enter(st, self->context, &s) < 0)
        return NULL;
    rc = cu.cuMemPoolImportPointer(&p, self->handle, &data);
    if (rc != CUDA_SUCCESS) {
        pygpu_scope_exit(&s);
        return pygpu_cuda_error_ex(st, rc, "cuMemPoolImportPointer",
                                   "the data must come from export_pointer() of a live "
                                   "allocation of the pool this one was imported from");
    }
    if (n < 0 && cu.cuMemGetAddressRange != NULL) {
        rc = cu.cuMemGetAddressRange(&base, &range, p);
        if (rc != CUDA_SUCCESS) {
            cu.cuMemFreeAsync(p, NULL);
            pygpu_scope_exit(&s);
            return pygpu_cuda_error(st, rc, "cuMemGetAddressRange");
        }
        n = (Py_ssize_t)(range - (size_t)(p - base));
    }
    pygpu_scope_exit(&s);
    res = pool_allocation(st, self, p, n < 0 ? 0 : (size_t)n, NULL, Py_None);
    if (res == NULL && pygpu_scope_enter_quiet(self->context, &s) == 0) {
        cu.cuMemFreeAsync(p, NULL);
        pygpu_scope_exit(&s);
    }
    return res;
}

static PyObject *
pool_set_access(pygpu_MemoryPool *self, PyObject *args, PyObject *kwds)
{
    pygpu_state *st = PYGPU_STATE(self);
    static char *kwlist[] = {"device", "readwrite", NULL};
    int dev, rw = 1;
    CUmemAccessDesc desc;
    pygpu_scope s;
    CUresult rc;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "i|p:set_access", kwlist, &dev, &rw))
        return NULL;
    if (pool_check(st, self, "set_access()") < 0
        || pygpu_need_entry(st, (void *)cu.cuMemPoolSetAccess, "cuMemPoolSetAccess",
                            "MemoryPool.set_access()")
               < 0
        || pygpu_scope_enter(st, self->context, &s) < 0)
        return NULL;
    memset(&desc, 0, sizeof desc);
    desc.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    desc.location.id = dev;
    desc.flags = rw ? CU_MEM_ACCESS_FLAGS_PROT_READWRITE : CU_MEM_ACCESS_FLAGS_PROT_NONE;
    rc = cu.cuMemPoolSetAccess(self->handle, &desc, 1);
    pygpu_scope_exit(&s);
    if (rc != CUDA_SUCCESS)
        return pygpu_cuda_error(st, rc, "cuMemPoolSetAccess");
    Py_RETURN_NONE;
}

static PyObject *
pool_destroy(pygpu_MemoryPool *self, PyObject *unused)
{
    pool_release(self);
    Py_RETURN_NONE;
}

static PyObject *
pool_get_handle(pygpu_MemoryPool *self, void *c)
{
    return PyLong_FromVoidPtr(self->handle);
}

static PyObject *
pool_get_imported(pygpu_MemoryPool *self, void *c)
{
    return PyBool_FromLong(self->imported);
}

static PyObject *
pool_get_ipc(pygpu_MemoryPool *self, void *c)
{
    return PyBool_FromLong(self->ipc);
}

static PyObject *
pool_get_device(pygpu_MemoryPool *self, void *c)
{
    return PyLong_FromLong(self->device);
}

static PyObject *
pool_repr(pygpu_MemoryPool *self)
{
    return PyUnicode_FromFormat("<pygpu.driver.MemoryPool on device %d%s%s>", self->device,
                                self->imported ? ", imported"
                                : self->ipc    ? ", ipc"
                                               : "",
                                self->handle == NULL ? ", destroyed" : "");
}

#define CF(f) (PyCFunction)(void (*)(void))(f)
static PyMethodDef pool_methods[] = {
    {"allocate", CF(pool_allocate), METH_VARARGS | METH_KEYWORDS,
     "allocate($self, /, nbytes, stream=None)\n--\n\n"
     "A DeviceAllocation from this pool, stream-ordered on stream (freed on it)."},
    {"export_pointer", (PyCFunction)pool_export_pointer, METH_O,
     "export_pointer($self, alloc, /)\n--\n\n"
     "64 bytes (they pickle) naming an allocation of this pool to a process that "
     "imported the pool."},
    {"import_pointer", CF(pool_import_pointer), METH_VARARGS | METH_KEYWORDS,
     "import_pointer($self, /, data, nbytes=-1)\n--\n\n"
     "The exporter's allocation named by data (from export_pointer()), as a "
     "DeviceAllocation of this imported pool. Free it (or drop it) before the "
     "exporter frees the memory."},
    {"set_access", CF(pool_set_access), METH_VARARGS | METH_KEYWORDS,
     "set_access($self, /, device, readwrite=True)\n--\n\n"
     "Let device (an ordinal) read and write the pool's memory (or not)."},
    {"destroy", (PyCFunction)pool_destroy, METH_NOARGS,
     "destroy($self, /)\n--\n\nDestroy the pool now (idempotent); it is also destroyed "
     "when this object and every allocation from it are gone."},
    {"_export_fd", (PyCFunction)pool_export_fd, METH_NOARGS, "_export_fd($self, /)\n--\n\n"},
    {"_import_fd", (PyCFunction)pool_import_fd, METH_O | METH_CLASS,
     "_import_fd($cls, fd, /)\n--\n\n"},
    {NULL},
};

static PyGetSetDef pool_getset[] = {
    {"handle", (getter)pool_get_handle, NULL, "The CUmemoryPool as an int.", NULL},
    {"imported", (getter)pool_get_imported, NULL, "Imported from another process.", NULL},
    {"ipc", (getter)pool_get_ipc, NULL, "Made to be shared with other processes.", NULL},
    {"device", (getter)pool_get_device, NULL, "The device ordinal.", NULL},
    {NULL},
};

static PyMemberDef pool_members[] = {
    {"__weaklistoffset__", T_PYSSIZET, offsetof(pygpu_MemoryPool, weakreflist), READONLY},
    {NULL},
};

static PyType_Slot pool_slots[] = {
    {Py_tp_new, pool_new},
    {Py_tp_init, pygpu_init_made},
    {Py_tp_dealloc, pool_dealloc},
    {Py_tp_methods, pool_methods},
    {Py_tp_getset, pool_getset},
    {Py_tp_members, pool_members},
    {Py_tp_repr, pool_repr},
    {Py_tp_doc, "MemoryPool(ipc=True, max_size=0)\n--\n\n"
                "A stream-ordered memory pool on the current context's device "
                "(cuMemPoolCreate). With ipc=True, pygpu.ipc.export_pool() hands it to "
                "another process and export_pointer() names its allocations there."},
    {0, NULL},
};

static PyType_Spec pool_spec = {"pygpu.driver.MemoryPool", sizeof(pygpu_MemoryPool), 0,
                                Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE | Py_TPFLAGS_BASETYPE,
                                pool_slots};

int
pygpu_mempool_setup(PyObject *m, pygpu_state *st)
{
    return pygpu_add_type(m, &pool_spec, &st->MemoryPoolType);
}
