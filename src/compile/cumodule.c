/* Module: a loaded cubin/PTX/fatbin image, with its functions and globals. */
#include "pygpu.h"
#include "core/cuda_enums.h"

#define LOG_SIZE 16384

static void
module_dealloc(pygpu_Module *self)
{
    PyTypeObject *tp = Py_TYPE(self);
    pygpu_scope s;
    if (self->handle != NULL && pygpu_scope_enter_quiet(self->context, &s) == 0) {
        CUresult ignored;
        PYGPU_CU_RELAX(ignored, cuModuleUnload, self->handle);
        (void)ignored;
        pygpu_scope_exit(&s);
    }
    self->handle = NULL;
    Py_CLEAR(self->functions);
    Py_CLEAR(self->info_log);
    Py_CLEAR(self->context);
    tp->tp_free((PyObject *)self);
    Py_DECREF(tp);
}

static uint64_t
read_le(const unsigned char *p, int n)
{
    uint64_t v = 0;
    while (n-- > 0)
        v = (v << 8) | p[n];
    return v;
}

/* 0: text (PTX), 1: ELF (cubin), 2: fatbin; -1/-2: an ELF/fatbin whose
 * headers reach past the end of the buffer. */
static int
image_kind(const char *image, size_t len)
{
    const unsigned char *u = (const unsigned char *)image;
    if (len >= 4
        && memcmp(u,
                  "\x7f"
                  "ELF",
                  4)
               == 0) {
        uint64_t shoff, phoff, shnum, phnum, shsize, phsize;
        if (len < 64 || u[4] != 2) /* ELF64 only */
            return -1;
        phoff = read_le(u + 32, 8);
        shoff = read_le(u + 40, 8);
        phsize = read_le(u + 54, 2);
        phnum = read_le(u + 56, 2);
        shsize = read_le(u + 58, 2);
        shnum = read_le(u + 60, 2);
        if (phoff > len || phnum * phsize > len - phoff || shoff > len
            || shnum * shsize > len - shoff)
            return -1;
        return 1;
    }
    if (len >= 4 && read_le(u, 4) == 0xBA55ED50u) {
        uint64_t hsize, fsize;
        if (len < 16)
            return -2;
        hsize = read_le(u + 6, 2);
        fsize = read_le(u + 8, 8);
        if (hsize > len || fsize > len - hsize)
            return -2;
        return 2;
    }
    return 0;
}

/* Whether a user's jit_option can be passed: 0, or -1 with ValueError.
 * The log buffers are pygpu's own (a user's value would be taken as an
 * address); the symbol and name tables are C pointer arrays, which a
 * Python int cannot describe; an unknown number has no known value type. */
static int
check_jit_option(long key)
{
    const pygpu_enum_entry *e;
    const char *name = NULL;
    for (e = pygpu_enum_jit_option; e->name != NULL; e++)
        if (e->value == (long long)key)
            name = e->name;
    if (name == NULL) {
        PyErr_Format(PyExc_ValueError, "module_from_buffer(): %ld is not a jit_option pygpu knows",
                     key);
        return -1;
    }
    switch (key) {
    case CU_JIT_INFO_LOG_BUFFER:
    case CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES:
    case CU_JIT_ERROR_LOG_BUFFER:
    case CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES:
        PyErr_Format(PyExc_ValueError,
                     "module_from_buffer(): jit_option.%s belongs to pygpu, which passes "
                     "its own log buffers; the logs come back through message_handler, "
                     "Module.info_log and the exception of a failed load",
                     name);
        return -1;
    case CU_JIT_GLOBAL_SYMBOL_NAMES:
    case CU_JIT_GLOBAL_SYMBOL_ADDRESSES:
    case CU_JIT_GLOBAL_SYMBOL_COUNT:
    case CU_JIT_REFERENCED_KERNEL_NAMES:
    case CU_JIT_REFERENCED_KERNEL_COUNT:
    case CU_JIT_REFERENCED_VARIABLE_NAMES:
    case CU_JIT_REFERENCED_VARIABLE_COUNT:
        PyErr_Format(PyExc_ValueError,
                     "module_from_buffer(): jit_option.%s describes a C array of "
                     "pointers, which module_from_buffer cannot pass",
                     name);
        return -1;
    default: return 0;
    }
}

/* module_from_buffer(data, options=None, message_handler=None) */
static PyObject *
module_from_buffer(PyObject *m, PyObject *args, PyObject *kwds)
{
    pygpu_state *st = PyModule_GetState(m);
    static char *kwlist[] = {"data", "options", "message_handler", NULL};
    PyObject *data, *options = Py_None, *handler = Py_None, *seq = NULL;
    Py_buffer view = {0};
    char *image = NULL, *copy = NULL;
    char info[LOG_SIZE], err[LOG_SIZE];
    CUjit_option opts[64];
    void *vals[64];
    unsigned int nopts = 0;
    Py_ssize_t i, n;
    pygpu_Context *ctx;
    pygpu_Module *self;
    pygpu_scope s = {NULL, 0};
    CUmodule h;
    CUresult rc;
    int kind;

    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O|OO:module_from_buffer", kwlist, &data, &options,
                                     &handler))
        return NULL;
    if (PyUnicode_Check(data)) {
        PyErr_SetString(PyExc_TypeError, "module_from_buffer() takes bytes (PTX, cubin or fatbin); "
                                         "encode PTX text first, or use SourceModule for CUDA C");
        return NULL;
    }
    if (PyObject_GetBuffer(data, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    if (view.len == 0) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "module_from_buffer(): the image is empty");
        return NULL;
    }
    image = view.buf;
    /* the driver takes no length: a binary image must hold all it claims */
    kind = image_kind(image, (size_t)view.len);
    if (kind < 0) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError,
                        kind == -1 ? "module_from_buffer(): the cubin (ELF) image is truncated "
                                     "or damaged: its headers point past its end"
                                   : "module_from_buffer(): the fatbin image is truncated "
                                     "or damaged: its header claims more bytes than given");
        return NULL;
    }
    /* PTX is text and must end in NUL */
    if (kind == 0 && image[view.len - 1] != '\0') {
        copy = PyMem_Malloc((size_t)view.len + 1);
        if (copy == NULL) {
            PyBuffer_Release(&view);
            return PyErr_NoMemory();
        }
        memcpy(copy, image, (size_t)view.len);
        copy[view.len] = '\0';
        image = copy;
    }
    info[0] = err[0] = '\0';
    opts[nopts] = CU_JIT_INFO_LOG_BUFFER;
    vals[nopts++] = info;
    opts[nopts] = CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES;
    vals[nopts++] = (void *)(uintptr_t)LOG_SIZE;
    opts[nopts] = CU_JIT_ERROR_LOG_BUFFER;
    vals[nopts++] = err;
    opts[nopts] = CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES;
    vals[nopts++] = (void *)(uintptr_t)LOG_SIZE;
    if (options != Py_None) {
        seq = PySequence_Fast(options, "options must be a sequence of (jit_option, value) pairs");
        if (seq == NULL)
            goto error;
        n = PySequence_Fast_GET_SIZE(seq);
        if (n > 60) {
            PyErr_SetString(PyExc_ValueError, "too many JIT options");
            goto error;
        }
        for (i = 0; i < n; i++) {
            PyObject *item = PySequence_Fast_GET_ITEM(seq, i);
            long key;
            PyObject *v;
            if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) != 2) {
                PyErr_SetString(PyExc_TypeError,
                                "each JIT option must be a (jit_option, value) pair");
                goto error;
            }
            key = PyLong_AsLong(PyTuple_GET_ITEM(item, 0));
            if ((key == -1 && PyErr_Occurred()) || check_jit_option(key) < 0)
                goto error;
            v = PyTuple_GET_ITEM(item, 1);
            opts[nopts] = (CUjit_option)key;
            if (PyFloat_Check(v)) {
                float f = (float)PyFloat_AsDouble(v);
                uintptr_t bits = 0;
                memcpy(&bits, &f, sizeof f);
                vals[nopts++] = (void *)bits;
            } else {
                unsigned long long u = PyLong_AsUnsignedLongLong(v);
                if (PyErr_Occurred())
                    goto error;
                vals[nopts++] = (void *)(uintptr_t)u;
            }
        }
    }
    /* the scope holds ctx across the GIL release and the handler, either of
     * which may see it detached (another thread, or the handler itself) */
    if ((ctx = pygpu_current_context(st)) == NULL || pygpu_scope_enter(st, ctx, &s) < 0)
        goto error;
    {
        /* legal during a capture on an H100 (driver 580); relaxed all the
         * same, so no driver's rule about it can invalidate one (graph.c) */
        Py_BEGIN_ALLOW_THREADS
            PYGPU_CU_RELAX(rc, cuModuleLoadDataEx, &h, image, nopts, opts, vals);
        Py_END_ALLOW_THREADS
    }
    if (handler != Py_None) {
        PyObject *r = NULL;
        PyObject *i_s = PyUnicode_DecodeUTF8(info, (Py_ssize_t)strlen(info), "replace");
        PyObject *e_s = PyUnicode_DecodeUTF8(err, (Py_ssize_t)strlen(err), "replace");
        if (i_s != NULL && e_s != NULL)
            r = PyObject_CallFunction(handler, "OOO", rc == CUDA_SUCCESS ? Py_True : Py_False, i_s,
                                      e_s);
        Py_XDECREF(i_s);
        Py_XDECREF(e_s);
        if (r == NULL) {
            if (rc == CUDA_SUCCESS && !ctx->detached) {
                CUresult ignored;
                PYGPU_CU_RELAX(ignored, cuModuleUnload, h);
                (void)ignored;
            }
            goto error;
        }
        Py_DECREF(r);
    }
    if (rc == CUDA_SUCCESS && ctx->detached) {
        /* the module died with its context */
        PyErr_SetString(st->LogicError,
                        "module_from_buffer(): the context was detached "
                        "while the module loaded (by message_handler or another thread)");
        goto error;
    }
    if (rc != CUDA_SUCCESS) {
        char extra[LOG_SIZE + 64];
        snprintf(extra, sizeof extra, "JIT error log:\n%s", err[0] ? err : "(empty)");
        pygpu_cuda_error_ex(st, rc, "cuModuleLoadDataEx", err[0] ? extra : NULL);
        goto error;
    }
    self = PyObject_New(pygpu_Module, st->ModuleType);
    if (self == NULL) {
        CUresult ignored;
        PYGPU_CU_RELAX(ignored, cuModuleUnload, h);
        (void)ignored;
        goto error;
    }
    self->handle = h;
    Py_INCREF(ctx);
    self->context = ctx;
    self->functions = PyDict_New();
    self->info_log = PyUnicode_DecodeUTF8(info, strlen(info), "replace");
    self->unloaded = 0;
    pygpu_scope_exit(&s);
    Py_XDECREF(seq);
    PyMem_Free(copy);
    PyBuffer_Release(&view);
    if (self->functions == NULL || self->info_log == NULL) {
        Py_DECREF(self);
        return NULL;
    }
    return (PyObject *)self;
error:
    pygpu_scope_exit(&s);
    Py_XDECREF(seq);
    PyMem_Free(copy);
    PyBuffer_Release(&view);
    return NULL;
}

/* A symbol name as C text: ValueError for an embedded NUL, which the
 * driver would take as the end of the name. */
static const char *
c_name(PyObject *name, const char *what)
{
    Py_ssize_t n;
    const char *c = PyUnicode_AsUTF8AndSize(name, &n);
    if (c != NULL && (size_t)n != strlen(c)) {
        PyErr_Format(PyExc_ValueError, "%s(): the name %R contains a NUL character", what, name);
        return NULL;
    }
    return c;
}

/* in function.c */
PyObject *pygpu_function_new(pygpu_state *st, pygpu_Module *mod, CUfunction h, PyObject *name);

/* The kernel called name; cached: the module's own Function (get_function),
 * else a Function of its own (_new_function: a SourceModule's, so that two
 * SourceModules sharing one loaded image never share a Function's prepared
 * layout). */
static PyObject *
module_function(pygpu_Module *self, PyObject *name, int cached)
{
    pygpu_state *st = PYGPU_STATE(self);
    PyObject *f;
    CUfunction h;
    CUresult rc;
    const char *cname;
    if (!PyUnicode_Check(name)) {
        PyErr_Format(PyExc_TypeError, "get_function() takes a str, not %.100s",
                     Py_TYPE(name)->tp_name);
        return NULL;
    }
    /* a detached context's module has no kernels, cached or not (the
     * cached Function would only fail later, at its launch) */
    if (pygpu_context_check(st, self->context) < 0)
        return NULL;
    /* the cache holds weak references: a Function holds its Module */
    f = cached ? PyDict_GetItemWithError(self->functions, name) : NULL;
    if (f != NULL) {
#if PY_VERSION_HEX >= 0x030D0000
        PyObject *live; /* PyWeakref_GetObject is deprecated from 3.13 */
        if (PyWeakref_GetRef(f, &live) < 0)
            return NULL;
        if (live != NULL)
            return live;
#else
        PyObject *live = PyWeakref_GetObject(f);
        if (live != NULL && live != Py_None) {
            Py_INCREF(live);
            return live;
        }
#endif
    }
    if (PyErr_Occurred() || (cname = c_name(name, "get_function")) == NULL)
        return NULL;
    if (pygpu_context_check(st, self->context) < 0)
        return NULL;
    rc = cu.cuModuleGetFunction(&h, self->handle, cname);
    if (rc == CUDA_ERROR_NOT_FOUND) {
        PyErr_Format(st->LogicError,
                     "no kernel named %R in this module (for C++ kernels, declare "
                     "them extern \"C\" or register the name in name_expressions)",
                     name);
        return NULL;
    }
    if (rc != CUDA_SUCCESS)
        return pygpu_cuda_error(st, rc, "cuModuleGetFunction");
    f = pygpu_function_new(st, self, h, name);
    if (f == NULL || !cached)
        return f;
    PyObject *ref = PyWeakref_NewRef(f, NULL);
    if (ref == NULL || PyDict_SetItem(self->functions, name, ref) < 0) {
        Py_XDECREF(ref);
        Py_DECREF(f);
        return NULL;
    }
    Py_DECREF(ref);
    return f;
}

static PyObject *
module_get_function(pygpu_Module *self, PyObject *name)
{
    return module_function(self, name, 1);
}

static PyObject *
module_new_function(pygpu_Module *self, PyObject *name)
{
    return module_function(self, name, 0);
}

static PyObject *
module_get_global(pygpu_Module *self, PyObject *name)
{
    pygpu_state *st = PYGPU_STATE(self);
    CUdeviceptr p;
    size_t size;
    CUresult rc;
    const char *cname;
    PyObject *a;
    if (!PyUnicode_Check(name)) {
        PyErr_Format(PyExc_TypeError, "get_global() takes a str, not %.100s",
                     Py_TYPE(name)->tp_name);
        return NULL;
    }
    if ((cname = c_name(name, "get_global")) == NULL)
        return NULL;
    if (pygpu_context_check(st, self->context) < 0)
        return NULL;
    rc = cu.cuModuleGetGlobal(&p, &size, self->handle, cname);
    if (rc == CUDA_ERROR_NOT_FOUND) {
        PyErr_Format(st->LogicError, "no global named %R in this module", name);
        return NULL;
    }
    if (rc != CUDA_SUCCESS)
        return pygpu_cuda_error(st, rc, "cuModuleGetGlobal");
    a = pygpu_borrowed_allocation(st, self->context, p, size, (PyObject *)self);
    if (a == NULL)
        return NULL;
    return Py_BuildValue("(Nn)", a, (Py_ssize_t)size);
}

static PyObject *
module_get_info_log(pygpu_Module *self, void *c)
{
    Py_INCREF(self->info_log);
    return self->info_log;
}

static PyObject *
module_get_context(pygpu_Module *self, void *c)
{
    Py_INCREF(self->context);
    return (PyObject *)self->context;
}

static PyObject *
module_get_handle(pygpu_Module *self, void *c)
{
    return PyLong_FromVoidPtr(self->handle);
}

static PyMethodDef module_methods[] = {
    {"_new_function", (PyCFunction)module_new_function, METH_O,
     "_new_function($self, name, /)\n--\n\nThe kernel called name as a Function of "
     "its own (not the module's cached one): SourceModule.get_function's."},
    {"get_function", (PyCFunction)module_get_function, METH_O,
     "get_function($self, name, /)\n--\n\nThe kernel called name (a Function)."},
    {"get_global", (PyCFunction)module_get_global, METH_O,
     "get_global($self, name, /)\n--\n\n"
     "(DeviceAllocation, nbytes) of a __device__ or __constant__ variable."},
    {NULL},
};

static PyGetSetDef module_getset[] = {
    {"info_log", (getter)module_get_info_log, NULL, "The JIT's info log.", NULL},
    {"context", (getter)module_get_context, NULL, "The Context the module is loaded in.", NULL},
    {"handle", (getter)module_get_handle, NULL, "The CUmodule as an int.", NULL},
    {NULL},
};

static PyType_Slot module_slots[] = {
    {Py_tp_dealloc, module_dealloc},
    {Py_tp_methods, module_methods},
    {Py_tp_getset, module_getset},
    {Py_tp_doc, "A loaded module (from module_from_buffer, module_from_file or "
                "SourceModule). Unloaded when it and all its functions are gone."},
    {0, NULL},
};

static PyType_Spec module_spec = {"pygpu.driver.Module", sizeof(pygpu_Module), 0,
                                  Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE
                                      | Py_TPFLAGS_DISALLOW_INSTANTIATION | Py_TPFLAGS_BASETYPE,
                                  module_slots};

#define CF(f) (PyCFunction)(void (*)(void))(f)
static PyMethodDef module_funcs[] = {
    {"module_from_buffer", CF(module_from_buffer), METH_VARARGS | METH_KEYWORDS,
     "module_from_buffer($module, /, data, options=None, message_handler=None)\n--\n\n"
     "Load PTX, cubin or fatbin bytes into the current context. options: "
     "(jit_option, value) pairs. message_handler(success, info_log, error_log) "
     "is called after the load. A failed load raises with the JIT error log."},
    {NULL},
};

int
pygpu_module_setup(PyObject *m, pygpu_state *st)
{
    if (pygpu_add_type(m, &module_spec, &st->ModuleType) < 0)
        return -1;
    return PyModule_AddFunctions(m, module_funcs);
}
