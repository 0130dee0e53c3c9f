/* IPCMemoryHandle and mem_get_ipc_handle: device memory shared between
 * processes through the legacy CUDA IPC handles (PyCUDA's names).
 *
 * mem_get_ipc_handle(alloc) gives a bytearray of 64 bytes (as PyCUDA does),
 * which pickles, so multiprocessing and concurrent.futures pass it to a
 * spawned child.  IPCMemoryHandle(handle) opens it there: a DeviceAllocation
 * (kind 4) whose memory is closed with cuIpcCloseMemHandle, never freed, at
 * close()/free() or when the object dies.  The exporter keeps ownership. */
#include "pygpu.h"

int
pygpu_need_entry(pygpu_state *st, const void *fn, const char *routine, const char *what)
{
    if (fn != NULL)
        return 0;
    PyErr_Format(st->LogicError, "%s needs %s, which this CUDA driver does not provide", what,
                 routine);
    return -1;
}

void
pygpu_ipc_close(pygpu_DeviceAllocation *a)
{
    if (a->ptr != 0 && cu.cuIpcCloseMemHandle != NULL)
        (void)cu.cuIpcCloseMemHandle(a->ptr);
}

/* The handle's bytes: bytes or bytearray of exactly n bytes. */
static int
handle_bytes(PyObject *obj, void *out, size_t n, const char *what)
{
    const char *p;
    Py_ssize_t len;
    if (PyByteArray_Check(obj)) {
        p = PyByteArray_AS_STRING(obj);
        len = PyByteArray_GET_SIZE(obj);
    } else if (PyBytes_Check(obj)) {
        p = PyBytes_AS_STRING(obj);
        len = PyBytes_GET_SIZE(obj);
    } else {
        PyErr_Format(PyExc_TypeError,
                     "%s: the handle must be bytes or a bytearray "
                     "(from %s), not %.100s",
                     what,
                     n == sizeof(CUipcEventHandle) && strstr(what, "Event") ? "Event.ipc_handle()"
                                                                            : "the exporting call",
                     Py_TYPE(obj)->tp_name);
        return -1;
    }
    if ((size_t)len != n) {
        PyErr_Format(PyExc_ValueError,
                     "%s: the handle has %zd bytes; a CUDA IPC handle "
                     "has %zu",
                     what, len, n);
        return -1;
    }
    memcpy(out, p, n);
    return 0;
}

/* exported for event.c */
int pygpu_ipc_handle_bytes(PyObject *obj, void *out, size_t n, const char *what);
int
pygpu_ipc_handle_bytes(PyObject *obj, void *out, size_t n, const char *what)
{
    return handle_bytes(obj, out, n, what);
}

static PyObject *
mem_get_ipc_handle(PyObject *module, PyObject *arg)
{
    pygpu_state *st = PyModule_GetState(module);
    pygpu_Context *ctx;
    pygpu_scope s;
    CUipcMemHandle h;
    CUdeviceptr p;
    size_t cap;
    CUresult rc;
    if (pygpu_is_allocation(st, arg)) {
        pygpu_DeviceAllocation *a = (pygpu_DeviceAllocation *)arg;
        if (a->kind == PYGPU_ALLOC_IPC || a->kind == PYGPU_ALLOC_VIRTUAL) {
            PyErr_Format(PyExc_TypeError,
                         "mem_get_ipc_handle(): %s memory cannot be "
                         "exported with a legacy IPC handle%s",
                         Py_TYPE(arg)->tp_name,
                         a->kind == PYGPU_ALLOC_VIRTUAL ? " (use VirtualBuffer.export())" : "");
            return NULL;
        }
        if (a->freed) {
            PyErr_SetString(st->LogicError, "mem_get_ipc_handle(): the DeviceAllocation "
                                            "was freed");
            return NULL;
        }
        ctx = a->context;
    } else {
        ctx = NULL;
    }
    if (pygpu_get_device_ptr(st, arg, &p, &cap, 0) < 0)
        return NULL;
    if (ctx == NULL && (ctx = pygpu_current_context(st)) == NULL)
        return NULL;
    if (pygpu_need_entry(st, (void *)cu.cuIpcGetMemHandle, "cuIpcGetMemHandle",
                         "mem_get_ipc_handle()")
            < 0
        || pygpu_scope_enter(st, ctx, &s) < 0)
        return NULL;
    rc = cu.cuIpcGetMemHandle(&h, p);
    pygpu_scope_exit(&s);
    if (rc != CUDA_SUCCESS)
        return pygpu_cuda_error_ex(st, rc, "cuIpcGetMemHandle",
                                   "only memory from mem_alloc() (cuMemAlloc) has a legacy "
                                   "IPC handle; use MemoryPool(ipc=True) for pool memory");
    /* another process may map the memory until this one lets it go: a
     * free() of the allocation waits for the object's death (hold.c) */
    if (pygpu_is_allocation(st, arg)
        && pygpu_hold_forever(st, arg, "an IPC export (mem_get_ipc_handle)") < 0)
        return NULL;
    return PyByteArray_FromStringAndSize((const char *)&h, sizeof h);
}

/* IPCMemoryHandle(handle, flags=ipc_mem_flags.LAZY_ENABLE_PEER_ACCESS) */
static PyObject *
ipchandle_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    pygpu_state *st = pygpu_state_from_type(type);
    static char *kwlist[] = {"handle", "flags", NULL};
    PyObject *hobj, *fobj = NULL, *res;
    unsigned int flags = CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS;
    pygpu_Context *ctx;
    pygpu_scope scope;
    CUipcMemHandle h;
    CUdeviceptr p = 0, base = 0;
    size_t size = 0;
    CUresult rc;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O|O:IPCMemoryHandle", kwlist, &hobj, &fobj))
        return NULL;
    if (fobj != NULL && pygpu_parse_uint(fobj, &flags, "IPCMemoryHandle(): flags") < 0)
        return NULL;
    if (handle_bytes(hobj, &h, sizeof h, "IPCMemoryHandle()") < 0)
        return NULL;
    if ((ctx = pygpu_current_context(st)) == NULL)
        return NULL;
    if (pygpu_need_entry(st, (void *)cu.cuIpcOpenMemHandle, "cuIpcOpenMemHandle",
                         "IPCMemoryHandle()")
        < 0)
        return NULL;
    /* the scope owns ctx while the GIL is released: another thread may
     * detach it and drop its last reference meanwhile */
    if (pygpu_scope_enter(st, ctx, &scope) < 0)
        return NULL;
    Py_BEGIN_ALLOW_THREADS
        rc = cu.cuIpcOpenMemHandle(&p, h, flags);
    Py_END_ALLOW_THREADS
    if (rc != CUDA_SUCCESS) {
        pygpu_scope_exit(&scope);
        return pygpu_cuda_error_ex(st, rc, "cuIpcOpenMemHandle",
                                   "the handle may be invalid, the exporting process may "
                                   "have freed the memory or exited, or this is the "
                                   "process that exported it (a process cannot open its "
                                   "own handle)");
    }
    if (ctx->detached) {
        (void)cu.cuIpcCloseMemHandle(p);
        pygpu_scope_exit(&scope);
        PyErr_SetString(st->LogicError, "IPCMemoryHandle(): the context was detached (by "
                                        "another thread) while the handle was opened");
        return NULL;
    }
    /* its size: the range the driver mapped */
    if (cu.cuMemGetAddressRange != NULL
        && (rc = cu.cuMemGetAddressRange(&base, &size, p)) != CUDA_SUCCESS) {
        cu.cuIpcCloseMemHandle(p);
        pygpu_scope_exit(&scope);
        return pygpu_cuda_error(st, rc, "cuMemGetAddressRange");
    }
    if (base != 0 && base < p)
        size -= (size_t)(p - base);
    res = pygpu_allocation_new(st, type, ctx, p, size, PYGPU_ALLOC_IPC);
    if (res == NULL)
        cu.cuIpcCloseMemHandle(p);
    pygpu_scope_exit(&scope);
    return res;
}

static PyObject *
ipchandle_close(PyObject *self, PyObject *unused)
{
    /* the inherited free() is the one idempotent release */
    return PyObject_CallMethod(self, "free", NULL);
}

static PyObject *
ipchandle_repr(pygpu_DeviceAllocation *self)
{
    char addr[32];
    if (self->freed)
        return PyUnicode_FromFormat("<pygpu.driver.IPCMemoryHandle (closed), %zu bytes>",
                                    self->size);
    snprintf(addr, sizeof addr, "0x%llx", (unsigned long long)self->ptr);
    return PyUnicode_FromFormat("<pygpu.driver.IPCMemoryHandle at %s, %zu bytes>", addr,
                                self->size);
}

static PyMethodDef ipchandle_methods[] = {
    {"close", ipchandle_close, METH_NOARGS,
     "close($self, /)\n--\n\nClose the mapping (cuIpcCloseMemHandle); idempotent. "
     "The exporting process still owns the memory."},
    {NULL},
};

static PyType_Slot ipchandle_slots[] = {
    {Py_tp_new, ipchandle_new},
    {Py_tp_init, pygpu_init_made},
    {Py_tp_methods, ipchandle_methods},
    {Py_tp_repr, ipchandle_repr},
    {Py_tp_doc, "IPCMemoryHandle(handle, flags=ipc_mem_flags.LAZY_ENABLE_PEER_ACCESS)\n--\n\n"
                "Device memory of another process, opened from the bytes of "
                "mem_get_ipc_handle() in the current context.  A DeviceAllocation: "
                "int(h) is the address, it goes to kernels and copies; close() "
                "(or free(), or garbage collection) unmaps it with "
                "cuIpcCloseMemHandle and never frees the exporter's memory."},
    {0, NULL},
};

static PyType_Spec ipchandle_spec = {
    "pygpu.driver.IPCMemoryHandle", sizeof(pygpu_DeviceAllocation), 0,
    Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE | Py_TPFLAGS_BASETYPE, ipchandle_slots};

static PyMethodDef ipc_methods[] = {
    {"mem_get_ipc_handle", mem_get_ipc_handle, METH_O,
     "mem_get_ipc_handle($module, alloc, /)\n--\n\n"
     "The legacy CUDA IPC handle of memory from mem_alloc(): a bytearray of 64 "
     "bytes (it pickles), opened in another process by IPCMemoryHandle()."},
    {NULL},
};

/* Make a subtype of DeviceAllocation from spec and add it to the module.
 * Shared with vmm.c. */
int pygpu_add_allocation_subtype(PyObject *m, pygpu_state *st, PyType_Spec *spec,
                                 PyTypeObject **slot);
int
pygpu_add_allocation_subtype(PyObject *m, pygpu_state *st, PyType_Spec *spec, PyTypeObject **slot)
{
    PyObject *tp, *bases = PyTuple_Pack(1, (PyObject *)st->DeviceAllocationType);
    if (bases == NULL) /* a tuple: Python 3.9 takes no single class */
        return -1;
    tp = PyType_FromModuleAndSpec(m, spec, bases);
    Py_DECREF(bases);
    if (tp == NULL)
        return -1;
    *slot = (PyTypeObject *)tp;
    if (pygpu_keep_text_signature((PyTypeObject *)tp, spec) < 0)
        return -1;
    return pygpu_module_add_ref(m, strrchr(spec->name, '.') + 1, tp);
}

int
pygpu_ipc_setup(PyObject *m, pygpu_state *st)
{
    if (pygpu_add_allocation_subtype(m, st, &ipchandle_spec, &st->IPCMemoryHandleType) < 0)
        return -1;
    return PyModule_AddFunctions(m, ipc_methods);
}
