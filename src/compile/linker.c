/* Linker: the driver's JIT linker (cuLinkCreate ... cuLinkComplete) over
 * PTX, cubin, fatbin, object and library inputs, giving a cubin image or a
 * loaded Module.  PyCUDA's pycuda.driver.Linker has the same shape. */
#include "pygpu.h"
#include "core/cuda_enums.h"

#include <errno.h>
#include <sys/stat.h>

#define LINK_LOG_SIZE 16384
#define LINK_MAX_OPTIONS 60

typedef struct {
    PyObject_HEAD CUlinkState handle; /* owned: destroyed by linker_release */
    pygpu_Context *context;           /* strong ref: the context the link was made in */
    PyObject *message_handler;        /* strong ref, or NULL */
    PyObject *image;                  /* bytes: the linked cubin once complete, or NULL */
    char *info_log, *error_log;       /* owned (PyMem): the driver writes into them until
                                   the state is destroyed */
    /* owned (PyMem): cuLinkCreate's option arrays, which the driver keeps
     * using until the state is destroyed (on the stack, they crashed
     * cuLinkAddFile on a real driver) */
    CUjit_option *opts;
    void **vals;
    int ninputs; /* inputs added */
    int closed;  /* 1: completed, failed to complete, or close()d */
} pygpu_Linker;

/* Destroy the link state in its context; idempotent, never raises.  GIL held. */
static void
linker_release(pygpu_Linker *self)
{
    pygpu_scope s;
    if (self->handle != NULL && pygpu_scope_enter_quiet(self->context, &s) == 0) {
        cu.cuLinkDestroy(self->handle);
        pygpu_scope_exit(&s);
    }
    self->handle = NULL;
    self->closed = 1;
}

static int
linker_traverse(pygpu_Linker *self, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE(self));
    Py_VISIT(self->context);
    Py_VISIT(self->message_handler);
    return 0;
}

static int
linker_clear(pygpu_Linker *self)
{
    linker_release(self);
    Py_CLEAR(self->message_handler);
    Py_CLEAR(self->image);
    Py_CLEAR(self->context);
    return 0;
}

static void
linker_dealloc(pygpu_Linker *self)
{
    PyTypeObject *tp = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    linker_clear(self);
    PyMem_Free(self->info_log);
    PyMem_Free(self->opts);
    PyMem_Free(self->vals);
    PyMem_Free(self->error_log);
    tp->tp_free((PyObject *)self);
    Py_DECREF(tp);
}

/* Reject what a user may not pass as a link option: 0, or -1 with ValueError.
 * The log buffers are the Linker's own; the symbol tables are C pointer
 * arrays a Python int cannot describe. */
static int
check_link_option(long key)
{
    const pygpu_enum_entry *e;
    const char *name = NULL;
    for (e = pygpu_enum_jit_option; e->name != NULL; e++)
        if (e->value == (long long)key && e->value != 999)
            name = e->name;
    if (name == NULL) {
        PyErr_Format(PyExc_ValueError, "Linker(): %ld is not a jit_option pygpu knows", key);
        return -1;
    }
    switch (key) {
    case CU_JIT_INFO_LOG_BUFFER:
    case CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES:
    case CU_JIT_ERROR_LOG_BUFFER:
    case CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES:
        PyErr_Format(PyExc_ValueError,
                     "Linker(): jit_option.%s belongs to pygpu, which passes its own log "
                     "buffers; the logs come back as Linker.info_log/error_log, through "
                     "message_handler and in the exception of a failed link",
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
                     "Linker(): jit_option.%s describes a C array of pointers, which "
                     "Linker cannot pass",
                     name);
        return -1;
    default: return 0;
    }
}

/* Fill opts/vals from a sequence of (jit_option, value) pairs after the
 * first *n entries; returns 0 or -1 with an exception. */
static int
parse_link_options(PyObject *options, CUjit_option *opts, void **vals, unsigned int *n)
{
    PyObject *seq;
    Py_ssize_t i, len;
    if (options == Py_None)
        return 0;
    seq = PySequence_Fast(options, "Linker(): options must be a sequence of "
                                   "(jit_option, value) pairs");
    if (seq == NULL)
        return -1;
    len = PySequence_Fast_GET_SIZE(seq);
    if (len > LINK_MAX_OPTIONS) {
        PyErr_Format(PyExc_ValueError, "Linker(): at most %d options, not %zd", LINK_MAX_OPTIONS,
                     len);
        goto error;
    }
    for (i = 0; i < len; i++) {
        PyObject *item = PySequence_Fast_GET_ITEM(seq, i), *v;
        long key;
        if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) != 2) {
            PyErr_SetString(PyExc_TypeError,
                            "Linker(): each option must be a (jit_option, value) pair");
            goto error;
        }
        key = PyLong_AsLong(PyTuple_GET_ITEM(item, 0));
        if ((key == -1 && PyErr_Occurred()) || check_link_option(key) < 0)
            goto error;
        v = PyTuple_GET_ITEM(item, 1);
        opts[*n] = (CUjit_option)key;
        if (PyFloat_Check(v)) {
            float f = (float)PyFloat_AsDouble(v);
            uintptr_t bits = 0;
            memcpy(&bits, &f, sizeof f);
            vals[(*n)++] = (void *)bits;
        } else {
            unsigned long long u = PyLong_AsUnsignedLongLong(v);
            if (u == (unsigned long long)-1 && PyErr_Occurred())
                goto error;
            vals[(*n)++] = (void *)(uintptr_t)u;
        }
    }
    Py_DECREF(seq);
    return 0;
error:
    Py_DECREF(seq);
    return -1;
}

/* Linker(message_handler=None, options=None) */
static PyObject *
linker_new(PyTypeObject *tp, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"message_handler", "options", NULL};
    pygpu_state *st = pygpu_state_from_type(tp);
    PyObject *handler = Py_None, *options = Py_None;
    CUjit_option *opts;
    void **vals;
    unsigned int nopts = 0;
    pygpu_Linker *self = NULL;
    pygpu_Context *ctx;
    pygpu_scope s = {NULL, 0};
    CUresult rc;

    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|OO:Linker", kwlist, &handler, &options))
        return NULL;
    if (handler != Py_None && !PyCallable_Check(handler)) {
        PyErr_Format(PyExc_TypeError,
                     "Linker(): message_handler must be callable or None, "
                     "not %.100s",
                     Py_TYPE(handler)->tp_name);
        return NULL;
    }
    self = (pygpu_Linker *)tp->tp_alloc(tp, 0);
    if (self == NULL)
        return NULL;
    self->info_log = PyMem_Calloc(1, LINK_LOG_SIZE);
    self->error_log = PyMem_Calloc(1, LINK_LOG_SIZE);
    opts = self->opts = PyMem_Calloc(LINK_MAX_OPTIONS + 4, sizeof *opts);
    vals = self->vals = PyMem_Calloc(LINK_MAX_OPTIONS + 4, sizeof *vals);
    if (self->info_log == NULL || self->error_log == NULL || opts == NULL || vals == NULL) {
        PyErr_NoMemory();
        goto error;
    }
    if (handler != Py_None)
        self->message_handler = Py_NewRef(handler);
    opts[nopts] = CU_JIT_INFO_LOG_BUFFER;
    vals[nopts++] = self->info_log;
    opts[nopts] = CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES;
    vals[nopts++] = (void *)(uintptr_t)LINK_LOG_SIZE;
    opts[nopts] = CU_JIT_ERROR_LOG_BUFFER;
    vals[nopts++] = self->error_log;
    opts[nopts] = CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES;
    vals[nopts++] = (void *)(uintptr_t)LINK_LOG_SIZE;
    if (parse_link_options(options, opts, vals, &nopts) < 0)
        goto error;
    if ((ctx = pygpu_current_context(st)) == NULL || pygpu_scope_enter(st, ctx, &s) < 0)
        goto error;
    rc = cu.cuLinkCreate(nopts, opts, vals, &self->handle);
    if (rc != CUDA_SUCCESS) {
        self->handle = NULL;
        pygpu_scope_exit(&s);
        pygpu_cuda_error(st, rc, "cuLinkCreate");
        goto error;
    }
    self->context = (pygpu_Context *)Py_NewRef((PyObject *)ctx);
    pygpu_scope_exit(&s);
    return (PyObject *)self;
error:
    Py_DECREF(self);
    return NULL;
}

static const char *const input_names[] = {"CUBIN", "PTX", "FATBINARY", "OBJECT", "LIBRARY"};

/* The input type as an int in [0, 4]: 0, or -1 with ValueError/TypeError. */
static int
parse_input_type(PyObject *obj, CUjitInputType *out, const char *what)
{
    long v;
    if (!PyLong_Check(obj)) {
        PyErr_Format(PyExc_TypeError,
                     "%s: input_type must be a jit_input_type (an int), "
                     "not %.100s",
                     what, Py_TYPE(obj)->tp_name);
        return -1;
    }
    v = PyLong_AsLong(obj);
    if (v == -1 && PyErr_Occurred())
        return -1;
    if (v < 0 || v > 4) {
        PyErr_Format(PyExc_ValueError,
                     "%s: input_type %ld is not one the driver's linker takes: "
                     "jit_input_type.CUBIN (0), PTX (1), FATBINARY (2), OBJECT (3) or "
                     "LIBRARY (4)",
                     what, v);
        return -1;
    }
    *out = (CUjitInputType)v;
    return 0;
}

/* LogicError once the link is complete or closed; 0 while inputs may be added. */
static int
linker_check_open(pygpu_state *st, pygpu_Linker *self, const char *what)
{
    if (self->closed) {
        PyErr_Format(st->LogicError, "Linker.%s(): this link is %s; make a new Linker", what,
                     self->image != NULL ? "complete" : "closed");
        return -1;
    }
    return 0;
}

/* Raise the driver error of an add or complete with the JIT error log. */
static void
linker_error(pygpu_state *st, pygpu_Linker *self, CUresult rc, const char *routine,
             const char *input)
{
    char extra[LINK_LOG_SIZE + 256];
    if (self->error_log[0] != '\0')
        snprintf(extra, sizeof extra, "%s%s%sJIT error log:\n%s", input ? "input " : "",
                 input ? input : "", input ? "; " : "", self->error_log);
    else if (input != NULL)
        snprintf(extra, sizeof extra, "input %s", input);
    pygpu_cuda_error_ex(st, rc, routine, self->error_log[0] != '\0' || input ? extra : NULL);
}

static PyObject *
linker_add_data(pygpu_Linker *self, PyObject *args)
{
    pygpu_state *st = PYGPU_STATE(self);
    PyObject *data, *type_obj;
    const char *name = "unknown";
    Py_buffer view = {0};
    CUjitInputType type;
    char *copy = NULL;
    void *buf;
    size_t size;
    pygpu_scope s;
    CUresult rc;

    if (!PyArg_ParseTuple(args, "OO|s:add_data", &data, &type_obj, &name))
        return NULL;
    if (PyUnicode_Check(data)) {
        PyErr_SetString(PyExc_TypeError,
                        "Linker.add_data() takes bytes (PTX text encoded, "
                        "cubin, fatbin, object or library); encode PTX text first");
        return NULL;
    }
    if (parse_input_type(type_obj, &type, "Linker.add_data()") < 0
        || linker_check_open(st, self, "add_data") < 0)
        return NULL;
    if (PyObject_GetBuffer(data, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    if (view.len == 0) {
        PyErr_Format(PyExc_ValueError, "Linker.add_data(): the %s input %s is empty",
                     input_names[type], name);
        goto error;
    }
    buf = view.buf;
    size = (size_t)view.len;
    if (type == CU_JIT_INPUT_PTX) {
        /* PTX is text: a NUL inside it would end it early */
        const char *nul = memchr(buf, '\0', size);
        if (nul != NULL && (size_t)(nul - (const char *)buf) != size - 1) {
            PyErr_Format(PyExc_ValueError,
                         "Linker.add_data(): the PTX input %s is not "
                         "text (a NUL byte at offset %zd); pass a binary as CUBIN, "
                         "FATBINARY or OBJECT",
                         name, (Py_ssize_t)(nul - (const char *)buf));
            goto error;
        }
        if (nul == NULL) {
            copy = PyMem_Malloc(size + 1);
            if (copy == NULL) {
                PyErr_NoMemory();
                goto error;
            }
            memcpy(copy, buf, size);
            copy[size] = '\0';
            buf = copy;
            size++;
        }
    }
    if (pygpu_scope_enter(st, self->context, &s) < 0)
        goto error;
    self->error_log[0] = '\0';
    Py_BEGIN_ALLOW_THREADS
        rc = cu.cuLinkAddData(self->handle, type, buf, size, name, 0, NULL, NULL);
    Py_END_ALLOW_THREADS
    pygpu_scope_exit(&s);
    if (rc != CUDA_SUCCESS) {
        linker_error(st, self, rc, "cuLinkAddData", name);
        goto error;
    }
    self->ninputs++;
    PyMem_Free(copy);
    PyBuffer_Release(&view);
    Py_RETURN_NONE;
error:
    PyMem_Free(copy);
    PyBuffer_Release(&view);
    return NULL;
}

static PyObject *
linker_add_file(pygpu_Linker *self, PyObject *args)
{
    pygpu_state *st = PYGPU_STATE(self);
    PyObject *arg, *path_obj = NULL, *type_obj;
    CUjitInputType type;
    const char *path;
    struct stat sb;
    pygpu_scope s;
    CUresult rc;

    if (!PyArg_ParseTuple(args, "OO:add_file", &arg, &type_obj))
        return NULL;
    if (!PyUnicode_FSConverter(arg, &path_obj))
        return NULL;
    path = PyBytes_AS_STRING(path_obj);
    if (parse_input_type(type_obj, &type, "Linker.add_file()") < 0
        || linker_check_open(st, self, "add_file") < 0)
        goto error;
    if (stat(path, &sb) != 0) {
        PyErr_SetFromErrnoWithFilenameObject(PyExc_OSError, arg);
        goto error;
    }
    if (!S_ISREG(sb.st_mode)) {
        errno = EISDIR;
        PyErr_SetFromErrnoWithFilenameObject(PyExc_OSError, arg);
        goto error;
    }
    if (pygpu_scope_enter(st, self->context, &s) < 0)
        goto error;
    self->error_log[0] = '\0';
    Py_BEGIN_ALLOW_THREADS
        rc = cu.cuLinkAddFile(self->handle, type, path, 0, NULL, NULL);
    Py_END_ALLOW_THREADS
    pygpu_scope_exit(&s);
    if (rc != CUDA_SUCCESS) {
        linker_error(st, self, rc, "cuLinkAddFile", path);
        goto error;
    }
    self->ninputs++;
    Py_DECREF(path_obj);
    Py_RETURN_NONE;
error:
    Py_DECREF(path_obj);
    return NULL;
}

static PyObject *
log_str(const char *text)
{
    return PyUnicode_DecodeUTF8(text, (Py_ssize_t)strlen(text), "replace");
}

/* Call message_handler(success, info_log, error_log) if there is one.
 * Returns 0 or -1. */
static int
linker_report(pygpu_Linker *self, int success)
{
    PyObject *info, *err, *r = NULL;
    if (self->message_handler == NULL)
        return 0;
    info = log_str(self->info_log);
    err = log_str(self->error_log);
    if (info != NULL && err != NULL)
        r = PyObject_CallFunctionObjArgs(self->message_handler, success ? Py_True : Py_False, info,
                                         err, NULL);
    Py_XDECREF(info);
    Py_XDECREF(err);
    if (r == NULL)
        return -1;
    Py_DECREF(r);
    return 0;
}

static PyObject *
linker_complete(pygpu_Linker *self, PyObject *unused)
{
    pygpu_state *st = PYGPU_STATE(self);
    void *cubin = NULL;
    size_t size = 0;
    pygpu_scope s;
    CUresult rc;

    if (self->image != NULL)
        return Py_NewRef(self->image);
    if (linker_check_open(st, self, "complete") < 0)
        return NULL;
    if (self->ninputs == 0) {
        PyErr_SetString(st->LogicError, "Linker.complete(): nothing to link; add inputs "
                                        "with add_data() or add_file() first");
        return NULL;
    }
    if (pygpu_scope_enter(st, self->context, &s) < 0)
        return NULL;
    self->error_log[0] = '\0';
    Py_BEGIN_ALLOW_THREADS
        rc = cu.cuLinkComplete(self->handle, &cubin, &size);
    Py_END_ALLOW_THREADS
    /* the image belongs to the link state: copy it before the state goes */
    if (rc == CUDA_SUCCESS) {
        self->image = PyBytes_FromStringAndSize(cubin, (Py_ssize_t)size);
        if (self->image == NULL) {
            pygpu_scope_exit(&s);
            return NULL;
        }
    }
    pygpu_scope_exit(&s);
    linker_release(self); /* complete or failed: the state is spent */
    if (linker_report(self, rc == CUDA_SUCCESS) < 0)
        return NULL;
    if (rc != CUDA_SUCCESS) {
        linker_error(st, self, rc, "cuLinkComplete", NULL);
        return NULL;
    }
    return Py_NewRef(self->image);
}

static PyObject *
linker_link_module(pygpu_Linker *self, PyObject *unused)
{
    PyObject *image, *mod, *r;
    image = linker_complete(self, NULL);
    if (image == NULL)
        return NULL;
    mod = pygpu_module_from_type(Py_TYPE(self)); /* borrowed: pygpu._driver */
    r = mod == NULL ? NULL : PyObject_CallMethod(mod, "module_from_buffer", "O", image);
    Py_DECREF(image);
    return r;
}

static PyObject *
linker_close(pygpu_Linker *self, PyObject *unused)
{
    linker_release(self);
    Py_RETURN_NONE;
}

static PyObject *
linker_get_info_log(pygpu_Linker *self, void *c)
{
    return log_str(self->info_log);
}

static PyObject *
linker_get_error_log(pygpu_Linker *self, void *c)
{
    return log_str(self->error_log);
}

static PyObject *
linker_get_context(pygpu_Linker *self, void *c)
{
    if (self->context == NULL)
        Py_RETURN_NONE;
    return Py_NewRef((PyObject *)self->context);
}

static PyObject *
linker_get_closed(pygpu_Linker *self, void *c)
{
    return PyBool_FromLong(self->closed);
}

static PyMethodDef linker_methods[] = {
    {"add_data", (PyCFunction)linker_add_data, METH_VARARGS,
     "add_data($self, data, input_type, name='unknown', /)\n--\n\n"
     "Add bytes of the jit_input_type input_type (PTX text, cubin, fatbin, object or "
     "library) under name (shown in the logs)."},
    {"add_file", (PyCFunction)linker_add_file, METH_VARARGS,
     "add_file($self, path, input_type, /)\n--\n\n"
     "Add the file at path (e.g. libcudadevrt.a as jit_input_type.LIBRARY)."},
    {"complete", (PyCFunction)linker_complete, METH_NOARGS,
     "complete($self, /)\n--\n\n"
     "Link: the cubin as bytes (the same bytes on every later call). Calls "
     "message_handler(success, info_log, error_log); a failed link raises with the "
     "JIT error log. The driver's link state is freed either way."},
    {"link_module", (PyCFunction)linker_link_module, METH_NOARGS,
     "link_module($self, /)\n--\n\n"
     "complete(), then load the image into the linker's context: a Module."},
    {"close", (PyCFunction)linker_close, METH_NOARGS,
     "close($self, /)\n--\n\nFree the driver's link state now (idempotent)."},
    {NULL},
};

static PyGetSetDef linker_getset[] = {
    {"info_log", (getter)linker_get_info_log, NULL, "The JIT linker's info log.", NULL},
    {"error_log", (getter)linker_get_error_log, NULL,
     "The JIT linker's error log of the last call.", NULL},
    {"context", (getter)linker_get_context, NULL, "The Context the link was made in.", NULL},
    {"closed", (getter)linker_get_closed, NULL,
     "True once complete()d (or failed) or close()d: no more inputs.", NULL},
    {NULL},
};

static PyType_Slot linker_slots[] = {
    {Py_tp_new, linker_new},
    {Py_tp_init, pygpu_init_made},
    {Py_tp_dealloc, linker_dealloc},
    {Py_tp_traverse, linker_traverse},
    {Py_tp_clear, linker_clear},
    {Py_tp_methods, linker_methods},
    {Py_tp_getset, linker_getset},
    {Py_tp_doc, "Linker(message_handler=None, options=None)\n--\n\n"
                "The driver's JIT linker (cuLink*) in the current context: add PTX, "
                "cubin, fatbin, object and library inputs (relocatable device code, "
                "libcudadevrt.a for device-side launches), then complete() to a cubin "
                "or link_module() to a Module. options: (jit_option, value) pairs. "
                "message_handler(success, info_log, error_log) is called when the link "
                "completes."},
    {0, NULL},
};

static PyType_Spec linker_spec = {"pygpu.driver.Linker", sizeof(pygpu_Linker), 0,
                                  Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_IMMUTABLETYPE
                                      | Py_TPFLAGS_BASETYPE,
                                  linker_slots};

int
pygpu_linker_setup(PyObject *m, pygpu_state *st)
{
    PyTypeObject *tp;
    /* the module holds the type; no state slot is needed */
    if (pygpu_add_type(m, &linker_spec, &tp) < 0)
        return -1;
    Py_DECREF(tp);
    return 0;
}
