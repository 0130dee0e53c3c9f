/* NCCL's collectives issued from C (issue 35): the hot path of pygpu.nccl.
 *
 * nccl4py keeps what it is good at -- finding the library, unique ids,
 * making and destroying communicators -- and each collective goes from
 * here straight to NCCL's C entry point, with pygpu's checks and no Python
 * object made per call.
 *
 * libnccl.so.2 is opened at run time, never linked: the search order is
 * built in Python (pygpu.nccl._candidates: PYGPU_NCCL, the library nccl4py
 * loaded, NVIDIA's wheel, the system loader), and this file opens the first
 * candidate that has every entry point.  Its signatures are declared here,
 * so the build needs no nccl.h.  The table of function pointers is, like
 * the driver's, a process-wide table of C pointers, written once under the
 * GIL before the handle is published.
 *
 * NcclComm (private; pygpu.nccl.Communicator holds one) wraps a
 * communicator's raw handle with its rank, size, device and primary
 * context.  Its methods (allreduce, reduce, broadcast, allgather,
 * reduce_scatter, send, recv) take each buffer as
 *   - an exact GPUArray: proved here (C- or F-contiguous, its gpudata a
 *     live DeviceAllocation of the communicator's context holding its
 *     bytes, a dtype NCCL has), the operand gate's fast form; or
 *   - a tuple (address, count, nccl_type) that the Python path made after
 *     the full gate (gpuarray._check_operands) for everything else;
 * and return NotImplemented when a GPUArray, an operator or a stream is
 * not one they prove, so the Python path decides (and raises the gate's
 * errors).  Counts, datatypes, roots and peers are checked here for both.
 *
 * The call itself: no context made current (NCCL sets the communicator's
 * device itself; where its cudaSetDevice replaces the thread's context,
 * pygpu_context_restore puts it back), the memory held against a free()
 * from another thread, the GIL released (a first call may block while
 * NCCL connects to its peers).
 * Inside pygpu's capture the default stream means the capturing stream,
 * and a call on a capturing stream keeps its arrays alive with the graph
 * (the hold rule).  GIL held everywhere else. */
#include "pygpu.h"
#include "core/pygpu_numpy.h"

#include <dlfcn.h>

/* nccl.h's types, declared here (values of NCCL 2.x's nccl.h) */
typedef struct pygpu_ncclComm_opaque *nccl_comm;
typedef int nccl_result;
#define NCCL_OK 0
#define NCCL_IN_PROGRESS 7 /* a nonblocking communicator: queued, completes later */

#define PYGPU_NCCL_API(N)                                                               \
    N(ncclGetVersion, (int *))                                                          \
    N(ncclAllReduce, (const void *, void *, size_t, int, int, nccl_comm, CUstream))     \
    N(ncclReduce, (const void *, void *, size_t, int, int, int, nccl_comm, CUstream))   \
    N(ncclBroadcast, (const void *, void *, size_t, int, int, nccl_comm, CUstream))     \
    N(ncclAllGather, (const void *, void *, size_t, int, nccl_comm, CUstream))          \
    N(ncclReduceScatter, (const void *, void *, size_t, int, int, nccl_comm, CUstream)) \
    N(ncclSend, (const void *, size_t, int, int, nccl_comm, CUstream))                  \
    N(ncclRecv, (void *, size_t, int, int, nccl_comm, CUstream))                        \
    N(ncclGroupStart, (void))                                                           \
    N(ncclGroupEnd, (void))                                                             \
    N(ncclCommCount, (nccl_comm, int *))                                                \
    N(ncclCommUserRank, (nccl_comm, int *))                                             \
    N(ncclCommCuDevice, (nccl_comm, int *))

#define NCCL_FIELD(name, args) nccl_result(*name) args;
typedef struct {
    PYGPU_NCCL_API(NCCL_FIELD)
    const char *(*ncclGetErrorString)(nccl_result);
    const char *(*ncclGetLastError)(nccl_comm); /* optional (NCCL 2.13) */
} nccl_table;
#undef NCCL_FIELD

static nccl_table nc;
static void *nc_handle = NULL;
static char nc_path[1024];

static const char *const nc_names[] = {
    "ncclSuccess",         "ncclUnhandledCudaError", "ncclSystemError", "ncclInternalError",
    "ncclInvalidArgument", "ncclInvalidUsage",       "ncclRemoteError", "ncclInProgress",
};

/* the collectives, in the order of their names below */
enum { K_ALLREDUCE, K_REDUCE, K_BROADCAST, K_ALLGATHER, K_REDUCE_SCATTER, K_SEND, K_RECV };
static const char *const k_names[] = {"allreduce",      "reduce", "broadcast", "allgather",
                                      "reduce_scatter", "send",   "recv"};
static const char *const k_routines[] = {"ncclAllReduce", "ncclReduce",        "ncclBroadcast",
                                         "ncclAllGather", "ncclReduceScatter", "ncclSend",
                                         "ncclRecv"};

/* NCCL's reduction operators by pygpu.nccl's names, in ncclRedOp_t's order */
static const char *const op_names[] = {"sum", "prod", "max", "min", "avg"};
#define N_OPS 5

typedef struct {
    PyObject_HEAD nccl_comm handle; /* borrowed from owner; NULL after close() */
    pygpu_state *st;                /* the module state (the type keeps the module alive) */
    pygpu_Context *context;         /* strong: the device's primary context NCCL runs in */
    PyObject *owner;                /* strong: what owns the handle (nccl4py's Communicator) */
    PyObject *array_type;           /* strong: gpuarray.GPUArray (exact operands only) */
    pygpu_array_slots slots;        /* array_type's slots (launch/arrayslots.c) */
    PyObject *op_str[N_OPS];        /* strong: interned operator names */
    int rank, nranks, device;       /* asked of NCCL when made */
} pygpu_NcclComm;

/* ---- the library ---- */

static int
note_tried(PyObject *tried, const char *path, const char *why)
{
    PyObject *line = PyUnicode_FromFormat("%s: %s", path, why);
    int r = line == NULL ? -1 : PyList_Append(tried, line);
    Py_XDECREF(line);
    return r;
}

/* _nccl_load(candidates) -> path: open the first candidate that loads and
 * has every entry point; CudaUnavailableError listing each one tried. */
static PyObject *
nccl_load(PyObject *module, PyObject *candidates)
{
    pygpu_state *st = PyModule_GetState(module);
    PyObject *seq, *tried = NULL, *sep, *joined;
    Py_ssize_t i, n;

    if (nc_handle != NULL)
        return PyUnicode_DecodeFSDefault(nc_path);
    seq = PySequence_Fast(candidates, "candidates must be a sequence of paths");
    if (seq == NULL)
        return NULL;
    if ((tried = PyList_New(0)) == NULL)
        goto error;
    n = PySequence_Fast_GET_SIZE(seq);
    for (i = 0; i < n; i++) {
        PyObject *bytes = NULL;
        const char *path, *why = NULL;
        nccl_table t;
        void *lib;
        int ok = 1;
        if (!PyUnicode_FSConverter(PySequence_Fast_GET_ITEM(seq, i), &bytes))
            goto error;
        path = PyBytes_AS_STRING(bytes);
        lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
        if (lib == NULL) {
            why = dlerror();
            why = why != NULL ? why : "not loadable";
        } else {
#define NCCL_RESOLVE(name, args)                                         \
    if (ok && (t.name = (nccl_result(*) args)dlsym(lib, #name)) == NULL) \
        ok = 0;
            PYGPU_NCCL_API(NCCL_RESOLVE)
#undef NCCL_RESOLVE
            t.ncclGetErrorString = (const char *(*)(nccl_result))dlsym(lib, "ncclGetErrorString");
            t.ncclGetLastError = (const char *(*)(nccl_comm))dlsym(lib, "ncclGetLastError");
            if (!ok || t.ncclGetErrorString == NULL) {
                dlclose(lib);
                why = "not NCCL: missing NCCL entry points";
            }
        }
        if (why != NULL) {
            int r = note_tried(tried, path, why);
            Py_DECREF(bytes);
            if (r < 0)
                goto error;
            continue;
        }
        nc = t;
        snprintf(nc_path, sizeof nc_path, "%s", path);
        nc_handle = lib;
        Py_DECREF(bytes);
        Py_DECREF(seq);
        Py_DECREF(tried);
        return PyUnicode_DecodeFSDefault(nc_path);
    }
    sep = PyUnicode_FromString("\n  ");
    joined = sep ? PyUnicode_Join(sep, tried) : NULL;
    Py_XDECREF(sep);
    if (joined != NULL) {
        PyErr_Format(st->CudaUnavailableError,
                     "NCCL (libnccl.so.2) was not found; tried:\n  %U\nInstall it with pip "
                     "install 'pygpu[nccl]' (nccl4py and nvidia-nccl-cu13), or set PYGPU_NCCL "
                     "to the library's path",
                     joined);
        Py_DECREF(joined);
    }
error:
    Py_XDECREF(tried);
    Py_DECREF(seq);
    return NULL;
}

static PyObject *
nccl_loaded(PyObject *module, PyObject *unused)
{
    if (nc_handle == NULL)
        Py_RETURN_NONE;
    return PyUnicode_DecodeFSDefault(nc_path);
}

static int
ensure_loaded(pygpu_state *st)
{
    if (nc_handle != NULL)
        return 0;
    PyErr_SetString(st->CudaUnavailableError,
                    "NCCL is not loaded: pygpu.nccl loads it (pygpu.nccl.load()) before "
                    "the first communicator");
    return -1;
}

/* NcclError for result rc of routine: "ncclAllReduce failed: ncclInvalidArgument:
 * invalid argument (NCCL's last error)"; .code, .name, .routine.  NULL. */
static PyObject *
nccl_error(PyObject *module, nccl_result rc, const char *routine, nccl_comm comm)
{
    const char *name = rc >= 0 && rc < (int)(sizeof nc_names / sizeof nc_names[0])
                           ? nc_names[rc]
                           : "ncclUnknownError";
    const char *what = nc.ncclGetErrorString != NULL ? nc.ncclGetErrorString(rc) : NULL;
    const char *last = nc.ncclGetLastError != NULL ? nc.ncclGetLastError(comm) : NULL;
    PyObject *cls, *msg, *exc;
    cls = module != NULL ? PyObject_GetAttrString(module, "NcclError") : NULL;
    if (cls == NULL)
        return NULL;
    if (last != NULL && last[0] != '\0')
        msg = PyUnicode_FromFormat("%s failed: %s: %s (%s)", routine, name,
                                   what != NULL ? what : "", last);
    else
        msg = PyUnicode_FromFormat("%s failed: %s: %s (NCCL_DEBUG=WARN tells more)", routine, name,
                                   what != NULL ? what : "");
    exc = msg != NULL ? PyObject_CallOneArg(cls, msg) : NULL;
    Py_DECREF(cls);
    Py_XDECREF(msg);
    if (exc == NULL)
        return NULL;
    {
        PyObject *code = PyLong_FromLong(rc), *nm = PyUnicode_FromString(name);
        PyObject *rt = PyUnicode_FromString(routine);
        if (code == NULL || nm == NULL || rt == NULL
            || PyObject_SetAttrString(exc, "code", code) < 0
            || PyObject_SetAttrString(exc, "name", nm) < 0
            || PyObject_SetAttrString(exc, "routine", rt) < 0) {
            Py_XDECREF(code);
            Py_XDECREF(nm);
            Py_XDECREF(rt);
            Py_DECREF(exc);
            return NULL;
        }
        Py_DECREF(code);
        Py_DECREF(nm);
        Py_DECREF(rt);
    }
    PyErr_SetObject(cls = (PyObject *)Py_TYPE(exc), exc);
    Py_DECREF(exc);
    return NULL;
}

static PyObject *
nccl_version(PyObject *module, PyObject *unused)
{
    pygpu_state *st = PyModule_GetState(module);
    int v = 0;
    nccl_result rc;
    if (ensure_loaded(st) < 0)
        return NULL;
    if ((rc = nc.ncclGetVersion(&v)) != NCCL_OK)
        return nccl_error(module, rc, "ncclGetVersion", NULL);
    return PyLong_FromLong(v);
}

static PyObject *
nccl_group_start(PyObject *module, PyObject *unused)
{
    pygpu_state *st = PyModule_GetState(module);
    nccl_result rc;
    if (ensure_loaded(st) < 0)
        return NULL;
    if ((rc = nc.ncclGroupStart()) != NCCL_OK)
        return nccl_error(module, rc, "ncclGroupStart", NULL);
    Py_RETURN_NONE;
}

/* ncclGroupEnd launches what the group queued (and may wait for peers to
 * connect): the GIL is released. */
static PyObject *
nccl_group_end(PyObject *module, PyObject *unused)
{
    pygpu_state *st = PyModule_GetState(module);
    nccl_result rc;
    CUcontext before;
    if (ensure_loaded(st) < 0)
        return NULL;
    before = pygpu_context_save();
    Py_BEGIN_ALLOW_THREADS
        rc = nc.ncclGroupEnd();
        (void)pygpu_context_restore(before);
    Py_END_ALLOW_THREADS
    if (rc != NCCL_OK && rc != NCCL_IN_PROGRESS)
        return nccl_error(module, rc, "ncclGroupEnd", NULL);
    Py_RETURN_NONE;
}

/* ---- group calls: NcclGroup, pygpu.nccl.group's base ----
 *
 * One round of group calls costs what NCCL's own group does: ncclGroupStart
 * on entry; ncclGroupEnd with the GIL released on exit, and the thread's
 * context put back where NCCL's cudaSetDevice replaced it.  No context is
 * made current: NCCL sets each communicator's device itself. */

typedef struct pygpu_NcclGroup {
    PyObject_HEAD pygpu_state *st;
    CUcontext before;              /* current when the group was entered */
    int entered;                   /* inside the with block */
    struct pygpu_NcclGroup *outer; /* strong: the group this one is inside, or NULL */
    /* the outermost group's, until its ncclGroupEnd launches the calls:
     * the buffers' objects that are not pygpu's memory (kept alive) and the
     * DeviceAllocations held busy (a free() waits), each NULL until used */
    PyObject *keep, *held;
} pygpu_NcclGroup;

/* This thread's innermost entered group (strong), or NULL.  A collective
 * queued inside a group runs at the outermost ncclGroupEnd, after the
 * call returned: its buffers are kept and held until then (a temporary
 * array would otherwise be freed, and its memory reused, first). */
static _Thread_local pygpu_NcclGroup *tl_group;

static pygpu_NcclGroup *
group_root(pygpu_NcclGroup *g)
{
    while (g->outer != NULL)
        g = g->outer;
    return g;
}

/* keep obj (a buffer's owner) and transfer the hold *held to the
 * outermost group; 0, or -1 with an exception (*held then still ours) */
static int
group_keep(pygpu_NcclGroup *g, PyObject *obj, pygpu_DeviceAllocation **held)
{
    PyObject **list = *held != NULL ? &g->held : &g->keep;
    if (obj == NULL && *held == NULL)
        return 0;
    if (*list == NULL && (*list = PyList_New(0)) == NULL)
        return -1;
    if (PyList_Append(*list, *held != NULL ? (PyObject *)*held : obj) < 0)
        return -1;
    if (*held != NULL) {
        Py_DECREF(*held); /* the list has it; the busy count ends at group_release */
        *held = NULL;
    }
    return 0;
}

/* the outermost group ended: its calls were launched; end the holds */
static void
group_release(pygpu_NcclGroup *g)
{
    PyObject *held = g->held, *keep = g->keep;
    Py_ssize_t i;
    g->held = g->keep = NULL;
    if (held != NULL) {
        for (i = 0; i < PyList_GET_SIZE(held); i++) {
            PyObject *a = PyList_GET_ITEM(held, i);
            Py_INCREF(a); /* unhold drops the hold's reference */
            pygpu_allocation_unhold((pygpu_DeviceAllocation *)a);
        }
        Py_DECREF(held);
    }
    Py_XDECREF(keep);
}

/* 0 when obj is a pygpu.nccl Communicator (or its NcclComm), else -1 and a
 * TypeError */
static int
group_check_comm(pygpu_state *st, PyObject *obj)
{
    PyObject *c = NULL;
    int ok;
    if (Py_IS_TYPE(obj, st->NcclCommType))
        return 0;
    if (pygpu_getattr_opt(obj, st->str_c, &c) < 0)
        return -1;
    ok = c != NULL && Py_IS_TYPE(c, st->NcclCommType);
    Py_XDECREF(c);
    if (ok)
        return 0;
    PyErr_Format(PyExc_TypeError,
                 "pygpu.nccl.group: comms must be pygpu.nccl Communicators, not %.100s",
                 Py_TYPE(obj)->tp_name);
    return -1;
}

static PyObject *
group_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"comms", NULL};
    PyObject *comms = Py_None, *module;
    pygpu_state *st;
    pygpu_NcclGroup *g;
    if (kwds == NULL && PyTuple_GET_SIZE(args) <= 1) { /* the common call */
        if (PyTuple_GET_SIZE(args) == 1)
            comms = PyTuple_GET_ITEM(args, 0);
    } else if (!PyArg_ParseTupleAndKeywords(args, kwds, "|O:NcclGroup", kwlist, &comms)) {
        return NULL;
    }
    if ((module = pygpu_module_from_type(type)) == NULL)
        return NULL;
    st = PyModule_GetState(module);
    if (nc_handle == NULL) { /* pygpu.nccl.load(): once, before the first call */
        PyObject *mod = PyImport_ImportModule("pygpu.nccl"), *r;
        if (mod == NULL)
            return NULL;
        r = PyObject_CallMethod(mod, "load", NULL);
        Py_DECREF(mod);
        if (r == NULL)
            return NULL;
        Py_DECREF(r);
        if (ensure_loaded(st) < 0)
            return NULL;
    }
    if (pygpu_ensure_driver(st) < 0) /* the thread's context is read on entry */
        return NULL;
    if (comms != Py_None) {
        if (PyList_CheckExact(comms) || PyTuple_CheckExact(comms)) {
            Py_ssize_t i;
            /* the size read each time, each item owned while it is checked:
             * a __getattr__ may change the list */
            for (i = 0; i < PySequence_Fast_GET_SIZE(comms); i++) {
                PyObject *item = Py_NewRef(PySequence_Fast_GET_ITEM(comms, i));
                int r = group_check_comm(st, item);
                Py_DECREF(item);
                if (r < 0)
                    return NULL;
            }
        } else {
            PyObject *it = PyObject_GetIter(comms), *item;
            if (it == NULL)
                return NULL;
            while ((item = PyIter_Next(it)) != NULL) {
                int r = group_check_comm(st, item);
                Py_DECREF(item);
                if (r < 0) {
                    Py_DECREF(it);
                    return NULL;
                }
            }
            Py_DECREF(it);
            if (PyErr_Occurred())
                return NULL;
        }
    }
    if ((g = (pygpu_NcclGroup *)type->tp_alloc(type, 0)) == NULL)
        return NULL;
    g->st = st;
    return (PyObject *)g;
}

static PyObject *
group_enter(pygpu_NcclGroup *g, PyObject *unused)
{
    nccl_result rc;
    PyObject *module;
    if (g->entered) {
        PyErr_SetString(g->st->LogicError, "pygpu.nccl.group: this group is already entered");
        return NULL;
    }
    if ((rc = nc.ncclGroupStart()) != NCCL_OK) {
        if ((module = pygpu_module_from_type(Py_TYPE(g))) == NULL)
            return NULL;
        return nccl_error(module, rc, "ncclGroupStart", NULL);
    }
    g->before = pygpu_context_save();
    g->entered = 1;
    g->outer = tl_group; /* the thread's reference moves here */
    tl_group = (pygpu_NcclGroup *)Py_NewRef((PyObject *)g);
    return Py_NewRef((PyObject *)g);
}

static PyObject *
group_exit(pygpu_NcclGroup *g, PyObject *const *args, Py_ssize_t nargs)
{
    nccl_result rc;
    CUcontext before = g->before;
    PyObject *module;
    if (!g->entered) {
        PyErr_SetString(g->st->LogicError, "pygpu.nccl.group: __exit__ without __enter__");
        return NULL;
    }
    g->entered = 0;
    Py_BEGIN_ALLOW_THREADS
        rc = nc.ncclGroupEnd();
        (void)pygpu_context_restore(before);
    Py_END_ALLOW_THREADS
    if (tl_group == g) { /* (entered in this thread, and innermost) */
        tl_group = g->outer;
        g->outer = NULL;
        if (tl_group == NULL)
            group_release(g); /* the outermost: NCCL launched the calls */
        Py_DECREF(g);         /* the thread's reference */
    }
    if (rc != NCCL_OK && rc != NCCL_IN_PROGRESS && (nargs == 0 || args[0] == Py_None)) {
        if ((module = pygpu_module_from_type(Py_TYPE(g))) == NULL)
            return NULL;
        return nccl_error(module, rc, "ncclGroupEnd", NULL);
    }
    Py_RETURN_FALSE; /* an exception inside the group goes on */
}

static void
group_dealloc(pygpu_NcclGroup *g)
{
    PyTypeObject *tp = Py_TYPE(g);
    group_release(g); /* (left only when it was never exited) */
    Py_CLEAR(g->outer);
    tp->tp_free((PyObject *)g);
    Py_DECREF(tp);
}

static PyMethodDef group_methods[] = {
    {"__enter__", (PyCFunction)group_enter, METH_NOARGS,
     "__enter__($self, /)\n--\n\nncclGroupStart()."},
    {"__exit__", (PyCFunction)(void (*)(void))group_exit, METH_FASTCALL,
     "__exit__($self, *exc_info)\n--\n\nncclGroupEnd() (the GIL released); the context as "
     "it was."},
    {NULL},
};

static PyType_Slot group_slots[] = {
    {Py_tp_new, group_new},
    {Py_tp_dealloc, group_dealloc},
    {Py_tp_methods, group_methods},
    {Py_tp_doc, "NcclGroup(comms=None)\n--\n\n"
                "A round of NCCL group calls (pygpu.nccl.group's base)."},
    {0, NULL},
};

/* no references but its type: not tracked by the GC */
static PyType_Spec group_spec = {
    "pygpu.driver.NcclGroup", sizeof(pygpu_NcclGroup), 0,
    Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE | Py_TPFLAGS_BASETYPE, group_slots};

/* ---- buffers ---- */

typedef struct {
    CUdeviceptr ptr;
    size_t count;                  /* elements of `type` */
    int type;                      /* ncclDataType_t */
    pygpu_DeviceAllocation *alloc; /* borrowed: the memory's allocation, or NULL */
    PyObject *owner;               /* borrowed: the object to keep alive, or NULL */
} nbuf;

/* ncclDataType_t of a NumPy dtype, by kind and size; -1 when NCCL has none
 * (the Python path moves such arrays as bytes, complex as pairs of reals) */
static int
nccl_type_of(PyObject *dt)
{
    PyArray_Descr *d;
    if (dt == NULL || !PyArray_DescrCheck(dt))
        return -1;
    d = (PyArray_Descr *)dt;
    if (d->byteorder == '>')
        return -1;
    switch (d->kind) {
    case 'i':
        switch (PyDataType_ELSIZE(d)) {
        case 1: return 0;
        case 4: return 2;
        case 8: return 4;
        }
        return -1;
    case 'u':
        switch (PyDataType_ELSIZE(d)) {
        case 1: return 1;
        case 4: return 3;
        case 8: return 5;
        }
        return -1;
    case 'f':
        switch (PyDataType_ELSIZE(d)) {
        case 2: return 6;
        case 4: return 7;
        case 8: return 8;
        }
        return -1;
    }
    return -1;
}

/* A resolved spec's memory on another device than the communicator's, or
 * not device memory CUDA knows: a ValueError (0 or -1).  The Python path's
 * specs of memory pygpu does not own (another library's arrays) only. */
static int
check_foreign(pygpu_NcclComm *c, CUdeviceptr p, const char *what)
{
    pygpu_scope scope;
    int ordinal = -1;
    unsigned int managed = 0;
    CUresult rc;
    if (cu.cuPointerGetAttribute == NULL)
        return 0;
    if (pygpu_scope_enter(c->st, c->context, &scope) < 0)
        return -1;
    rc = cu.cuPointerGetAttribute(&managed, CU_POINTER_ATTRIBUTE_IS_MANAGED, p);
    if (rc == CUDA_SUCCESS && !managed)
        rc = cu.cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, p);
    pygpu_scope_exit(&scope);
    if (rc != CUDA_SUCCESS) {
        const char *name = NULL;
        if (cu.cuGetErrorName == NULL || cu.cuGetErrorName(rc, &name) != CUDA_SUCCESS)
            name = NULL;
        PyErr_Format(PyExc_ValueError,
                     "pygpu.nccl: %s at 0x%llx is not device memory CUDA knows "
                     "(cuPointerGetAttribute: %s)",
                     what, (unsigned long long)p, name != NULL ? name : "failed");
        return -1;
    }
    if (!managed && ordinal != c->context->ordinal) {
        PyErr_Format(PyExc_ValueError,
                     "pygpu.nccl: %s is memory of device %d, the communicator's device is %d", what,
                     ordinal, c->context->ordinal);
        return -1;
    }
    return 0;
}

/* 1: obj is resolved into *b; 0: the Python path decides; -1: error.
 * A tuple is a resolved spec (address, count, nccl_type, owner) from the
 * Python path, owner the object whose memory it is (a DeviceAllocation,
 * which is then held like an array's, or another library's array, whose
 * device is checked here); an exact GPUArray is proved as the operand
 * gate's fast form. */
static int
buffer_of(pygpu_NcclComm *c, PyObject *obj, nbuf *b, const char *what)
{
    PyObject *nb;
    pygpu_DeviceAllocation *a;
    size_t nbytes;
    b->alloc = NULL;
    b->owner = obj;
    if (PyTuple_CheckExact(obj) && PyTuple_GET_SIZE(obj) == 4) {
        unsigned long long p = PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(obj, 0));
        PyObject *owner = PyTuple_GET_ITEM(obj, 3);
        Py_ssize_t n;
        long t;
        if (p == (unsigned long long)-1 && PyErr_Occurred())
            return -1;
        if ((n = PyLong_AsSsize_t(PyTuple_GET_ITEM(obj, 1))) < 0) {
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_ValueError, "pygpu.nccl: a negative count");
            return -1;
        }
        if ((t = PyLong_AsLong(PyTuple_GET_ITEM(obj, 2))) == -1 && PyErr_Occurred())
            return -1;
        b->ptr = (CUdeviceptr)p;
        b->count = (size_t)n;
        b->type = (int)t;
        if (owner == Py_None) {
            b->owner = NULL;
        } else {
            b->owner = owner;
            if (pygpu_is_allocation(c->st, owner))
                b->alloc = (pygpu_DeviceAllocation *)owner;
            else if (check_foreign(c, b->ptr, what) < 0)
                return -1;
        }
        return 1;
    }
    if (!Py_IS_TYPE(obj, (PyTypeObject *)c->array_type)
        || !pygpu_array_proven(c->st, &c->slots, obj, (PyObject *)c->context, &a, &nb, &nbytes)
        || !pygpu_exact_size(PYGPU_ASLOT(&c->slots, obj, PYGPU_A_SIZE), &b->count)
        || (b->type = nccl_type_of(PYGPU_ASLOT(&c->slots, obj, PYGPU_A_DTYPE))) < 0)
        return 0;
    b->ptr = a->ptr;
    b->alloc = a;
    return 1;
}

/* the NCCL type's size in bytes (for messages) */
static const char *
type_name(int t)
{
    static const char *const names[] = {"int8",    "uint8",    "int32",       "uint32",
                                        "int64",   "uint64",   "float16",     "float32",
                                        "float64", "bfloat16", "float8_e4m3", "float8_e5m2"};
    return t >= 0 && t < 12 ? names[t] : "an unknown type";
}

/* ---- the collectives ---- */

static int
int_arg(PyObject *o, int *out)
{
    long v;
    if (!PyLong_CheckExact(o))
        return 0;
    v = PyLong_AsLong(o);
    if (v == -1 && PyErr_Occurred()) {
        PyErr_Clear();
        return 0;
    }
    if (v < INT_MIN || v > INT_MAX)
        return 0;
    *out = (int)v;
    return 1;
}

/* the operator: an exact int (an nccl4py NcclRedOp is an IntEnum: the
 * Python path passes int()), or one of op_names exactly; 0: the Python
 * path decides (other spellings, errors) */
static int
op_of(pygpu_NcclComm *c, PyObject *o, int *out)
{
    int i;
    if (PyLong_CheckExact(o))
        return int_arg(o, out) && *out >= 0;
    for (i = 0; i < N_OPS; i++) {
        if (o == c->op_str[i]) {
            *out = i;
            return 1;
        }
    }
    if (PyUnicode_CheckExact(o)) {
        for (i = 0; i < N_OPS; i++) {
            if (PyUnicode_CompareWithASCIIString(o, op_names[i]) == 0) {
                *out = i;
                return 1;
            }
        }
    }
    return 0;
}

static int
check_rank(pygpu_NcclComm *c, int kind, int v)
{
    if (v >= 0 && v < c->nranks)
        return 0;
    PyErr_Format(PyExc_ValueError,
                 "pygpu.nccl: %s: %s %d is not a rank of this communicator (0 to %d)",
                 k_names[kind], kind >= K_SEND ? "peer" : "root", v, c->nranks - 1);
    return -1;
}

static int
check_counts(pygpu_NcclComm *c, int kind, const nbuf *s, const nbuf *r, int has_r)
{
    size_t want;
    if (!has_r)
        return 0;
    if (s->type != r->type) {
        PyErr_Format(PyExc_TypeError,
                     "pygpu.nccl: %s: sendbuf is %s but recvbuf is %s; NCCL moves one type "
                     "(give both buffers the same dtype)",
                     k_names[kind], type_name(s->type), type_name(r->type));
        return -1;
    }
    switch (kind) {
    case K_ALLGATHER:
        want = s->count * (size_t)c->nranks;
        if (r->count == want)
            return 0;
        PyErr_Format(PyExc_ValueError,
                     "pygpu.nccl: allgather: recvbuf holds %zu elements, not nranks (%d) x "
                     "sendbuf's %zu = %zu",
                     r->count, c->nranks, s->count, want);
        return -1;
    case K_REDUCE_SCATTER:
        want = r->count * (size_t)c->nranks;
        if (s->count == want)
            return 0;
        PyErr_Format(PyExc_ValueError,
                     "pygpu.nccl: reduce_scatter: sendbuf holds %zu elements, not nranks (%d) "
                     "x recvbuf's %zu = %zu",
                     s->count, c->nranks, r->count, want);
        return -1;
    default:
        if (s->count == r->count)
            return 0;
        PyErr_Format(PyExc_ValueError,
                     "pygpu.nccl: %s: sendbuf holds %zu elements and recvbuf %zu; they must "
                     "hold as many",
                     k_names[kind], s->count, r->count);
        return -1;
    }
}

/* the stream: 1 resolved (*h, and *sobj the capturing Stream when the
 * default stream means it), 0 the Python path decides, -1 error */
static int
stream_of(pygpu_NcclComm *c, PyObject **sobj, CUstream *h)
{
    PyObject *s = *sobj;
    if (s == Py_None) {
        /* inside this thread's capture in the communicator's context, the
         * default stream is the capturing stream (whatever is current) */
        pygpu_Stream *cur = pygpu_captures_active ? pygpu_capture_current(c->context) : NULL;
        if (cur == NULL) {
            *h = NULL; /* the legacy default stream, where pygpu's array operations run */
            return 1;
        }
        s = *sobj = (PyObject *)cur;
    }
    if (Py_IS_TYPE(s, c->st->StreamType)) {
        pygpu_Stream *ps = (pygpu_Stream *)s;
        if (ps->context != NULL && ps->context != c->context && ps->handle != NULL
            && ps->handle != CU_STREAM_LEGACY && ps->handle != CU_STREAM_PER_THREAD) {
            PyErr_Format(PyExc_ValueError,
                         "pygpu.nccl: the stream belongs to a context of device %d, the "
                         "communicator to device %d's primary context; give a stream of "
                         "the communicator's context",
                         ps->context->ordinal, c->context->ordinal);
            return -1;
        }
        if (ps->context != NULL && pygpu_context_check(c->st, ps->context) < 0)
            return -1;
        *h = ps->handle;
        return 1;
    }
    if (PyLong_CheckExact(s)) {
        unsigned long long v = PyLong_AsUnsignedLongLong(s);
        if (v == (unsigned long long)-1 && PyErr_Occurred())
            return -1;
        *h = (CUstream)(uintptr_t)v;
        return 1;
    }
    return 0;
}

/* A call on a stream pygpu captures: the graph keeps the buffers alive
 * (their owners, and a hold on the memory: a free() meanwhile is deferred
 * to the graph's death).  0 or -1. */
static int
capture_keep(pygpu_NcclComm *c, PyObject *sobj, const nbuf *bufs, int nbufs)
{
    PyObject *keep = ((pygpu_Stream *)sobj)->capture_keep, *h;
    int i;
    if (PyList_Append(keep, (PyObject *)c) < 0)
        return -1;
    for (i = 0; i < nbufs; i++) {
        if (bufs[i].owner != NULL && PyList_Append(keep, bufs[i].owner) < 0)
            return -1;
        if (bufs[i].alloc != NULL) {
            h = pygpu_hold_new(c->st, (PyObject *)bufs[i].alloc, "a captured NCCL collective");
        } else {
            PyObject *addr = PyLong_FromUnsignedLongLong(bufs[i].ptr);
            h = addr != NULL ? pygpu_hold_address(c->st, addr, "a captured NCCL collective") : NULL;
            Py_XDECREF(addr);
        }
        if (h == NULL)
            return -1;
        if (h != Py_None && PyList_Append(keep, h) < 0) {
            Py_DECREF(h);
            return -1;
        }
        Py_DECREF(h);
    }
    return 0;
}

/* The one path of every collective.  send is the buffer (send/recv's
 * only one); recv None means in place (allreduce, reduce, broadcast; an
 * all-gather or a reduce-scatter needs a recvbuf of its own size).
 * Returns the buffer the Python method returns, or NotImplemented. */
static PyObject *
comm_run(pygpu_NcclComm *c, int kind, PyObject *send, PyObject *recv, PyObject *opobj,
         PyObject *rootobj, PyObject *sobj)
{
    pygpu_state *st = c->st;
    nbuf bufs[2], *s = &bufs[0], *r = &bufs[1];
    int op = 0, root = 0, has_r, k;
    CUstream stream = NULL;
    pygpu_DeviceAllocation *held[2] = {NULL, NULL};
    nccl_result rc = NCCL_OK;
    CUcontext before;
    nccl_comm h = c->handle;
    const void *sp;
    void *rp;
    pygpu_NcclGroup *g;

    if (h == NULL) {
        PyErr_Format(st->LogicError, "pygpu.nccl: %s: the communicator was destroyed (destroy())",
                     k_names[kind]);
        return NULL;
    }
    if (recv == Py_None && (kind == K_ALLGATHER || kind == K_REDUCE_SCATTER)) {
        PyErr_Format(PyExc_ValueError,
                     "pygpu.nccl: %s needs a recvbuf (%s); it does not work in place",
                     k_names[kind],
                     kind == K_ALLGATHER ? "nranks times sendbuf's size"
                                         : "sendbuf's size divided by nranks");
        return NULL;
    }
    if ((k = buffer_of(c, send, s, kind >= K_SEND ? "buf" : "sendbuf")) <= 0)
        return k < 0 ? NULL : Py_NewRef(Py_NotImplemented);
    /* the same object as both: in place, except where the sizes differ */
    has_r = recv != Py_None && (recv != send || kind == K_ALLGATHER || kind == K_REDUCE_SCATTER);
    if (has_r) {
        if ((k = buffer_of(c, recv, r, "recvbuf")) <= 0)
            return k < 0 ? NULL : Py_NewRef(Py_NotImplemented);
    } else {
        *r = *s;
    }
    if (opobj != Py_None && !op_of(c, opobj, &op))
        return Py_NewRef(Py_NotImplemented);
    if (rootobj != Py_None) {
        if (!int_arg(rootobj, &root))
            return Py_NewRef(Py_NotImplemented);
        if (check_rank(c, kind, root) < 0)
            return NULL;
    }
    if ((k = stream_of(c, &sobj, &stream)) <= 0)
        return k < 0 ? NULL : Py_NewRef(Py_NotImplemented);
    if (check_counts(c, kind, s, r, has_r) < 0)
        return NULL;
    /* work on the legacy stream while a blocking stream of the
     * communicator's context captures (in another thread) */
    if (pygpu_captures_active && (stream == NULL || stream == CU_STREAM_LEGACY)
        && pygpu_capture_legacy_check(st, c->context, "pygpu.nccl") < 0)
        return NULL;
    if (pygpu_captures_active && pygpu_stream_capturing(st, sobj)
        && capture_keep(c, sobj, bufs, has_r ? 2 : 1) < 0)
        return NULL;
    /* NCCL needs no context made current (it sets its device itself): the
     * thread's context is only put back where NCCL's cudaSetDevice changed
     * it */
    if (pygpu_context_check(st, c->context) < 0)
        return NULL;
    for (k = 0; k < (has_r ? 2 : 1); k++) {
        if (bufs[k].alloc != NULL
            && pygpu_allocation_hold(st, (PyObject *)bufs[k].alloc, &held[k]) < 0) {
            pygpu_allocation_unhold(held[0]);
            return NULL;
        }
    }
    sp = (const void *)(uintptr_t)s->ptr;
    rp = (void *)(uintptr_t)r->ptr;
    before = pygpu_context_save();
    Py_BEGIN_ALLOW_THREADS
        switch (kind) {
        case K_ALLREDUCE: rc = nc.ncclAllReduce(sp, rp, s->count, s->type, op, h, stream); break;
        case K_REDUCE: rc = nc.ncclReduce(sp, rp, s->count, s->type, op, root, h, stream); break;
        case K_BROADCAST: rc = nc.ncclBroadcast(sp, rp, r->count, r->type, root, h, stream); break;
        case K_ALLGATHER: rc = nc.ncclAllGather(sp, rp, s->count, s->type, h, stream); break;
        case K_REDUCE_SCATTER:
            rc = nc.ncclReduceScatter(sp, rp, r->count, r->type, op, h, stream);
            break;
        case K_SEND: rc = nc.ncclSend(sp, s->count, s->type, root, h, stream); break;
        case K_RECV: rc = nc.ncclRecv(rp, s->count, s->type, root, h, stream); break;
        }
        (void)pygpu_context_restore(before);
    Py_END_ALLOW_THREADS
    /* inside a group the call runs at the outermost ncclGroupEnd: the
     * buffers stay kept and held until then */
    g = (rc == NCCL_OK || rc == NCCL_IN_PROGRESS) && tl_group != NULL ? group_root(tl_group) : NULL;
    for (k = 0; k < (has_r ? 2 : 1); k++) {
        if (g != NULL && group_keep(g, bufs[k].owner, &held[k]) < 0) {
            pygpu_allocation_unhold(held[k]);
            if (k == 0)
                pygpu_allocation_unhold(held[1]);
            return NULL;
        }
        pygpu_allocation_unhold(held[k]);
    }
    if (rc != NCCL_OK && rc != NCCL_IN_PROGRESS)
        return nccl_error(pygpu_module_from_type(Py_TYPE(c)), rc, k_routines[kind], h);
    if (kind == K_SEND)
        Py_RETURN_NONE;
    return Py_NewRef(recv != Py_None ? recv : send);
}

static int
nargs_check(const char *name, Py_ssize_t nargs, Py_ssize_t want)
{
    if (nargs == want)
        return 0;
    PyErr_Format(PyExc_TypeError, "NcclComm.%s() takes %zd arguments (%zd given)", name, want,
                 nargs);
    return -1;
}

/* allreduce(send, recv, op, stream) */
static PyObject *
comm_allreduce(pygpu_NcclComm *c, PyObject *const *a, Py_ssize_t n)
{
    if (nargs_check("allreduce", n, 4) < 0)
        return NULL;
    return comm_run(c, K_ALLREDUCE, a[0], a[1], a[2], Py_None, a[3]);
}

/* reduce(send, recv, op, root, stream) */
static PyObject *
comm_reduce(pygpu_NcclComm *c, PyObject *const *a, Py_ssize_t n)
{
    if (nargs_check("reduce", n, 5) < 0)
        return NULL;
    return comm_run(c, K_REDUCE, a[0], a[1], a[2], a[3], a[4]);
}

/* broadcast(send, recv, root, stream) */
static PyObject *
comm_broadcast(pygpu_NcclComm *c, PyObject *const *a, Py_ssize_t n)
{
    if (nargs_check("broadcast", n, 4) < 0)
        return NULL;
    return comm_run(c, K_BROADCAST, a[0], a[1], Py_None, a[2], a[3]);
}

/* allgather(send, recv, stream) */
static PyObject *
comm_allgather(pygpu_NcclComm *c, PyObject *const *a, Py_ssize_t n)
{
    if (nargs_check("allgather", n, 3) < 0)
        return NULL;
    return comm_run(c, K_ALLGATHER, a[0], a[1], Py_None, Py_None, a[2]);
}

/* reduce_scatter(send, recv, op, stream) */
static PyObject *
comm_reduce_scatter(pygpu_NcclComm *c, PyObject *const *a, Py_ssize_t n)
{
    if (nargs_check("reduce_scatter", n, 4) < 0)
        return NULL;
    return comm_run(c, K_REDUCE_SCATTER, a[0], a[1], a[2], Py_None, a[3]);
}

/* send(buf, peer, stream) */
static PyObject *
comm_send(pygpu_NcclComm *c, PyObject *const *a, Py_ssize_t n)
{
    if (nargs_check("send", n, 3) < 0)
        return NULL;
    if (a[1] == Py_None)
        return Py_NewRef(Py_NotImplemented);
    return comm_run(c, K_SEND, a[0], Py_None, Py_None, a[1], a[2]);
}

/* recv(buf, peer, stream) */
static PyObject *
comm_recv(pygpu_NcclComm *c, PyObject *const *a, Py_ssize_t n)
{
    if (nargs_check("recv", n, 3) < 0)
        return NULL;
    if (a[1] == Py_None)
        return Py_NewRef(Py_NotImplemented);
    return comm_run(c, K_RECV, a[0], Py_None, Py_None, a[1], a[2]);
}

static PyObject *
comm_close(pygpu_NcclComm *c, PyObject *unused)
{
    c->handle = NULL;
    Py_RETURN_NONE;
}

/* ---- the type ---- */

static PyObject *
comm_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"handle", "context", "array_type", "owner", NULL};
    PyObject *hobj, *ctx, *atype, *owner = Py_None, *module;
    pygpu_state *st;
    pygpu_NcclComm *c;
    void *h;
    int count = 0, rank = 0, dev = 0, i;
    nccl_result rc;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOO|O:NcclComm", kwlist, &hobj, &ctx, &atype,
                                     &owner))
        return NULL;
    if ((module = pygpu_module_from_type(type)) == NULL)
        return NULL;
    st = PyModule_GetState(module);
    if (ensure_loaded(st) < 0)
        return NULL;
    if (!PyObject_TypeCheck(ctx, st->ContextType)) {
        PyErr_Format(PyExc_TypeError, "NcclComm(): context must be a Context, not %s",
                     Py_TYPE(ctx)->tp_name);
        return NULL;
    }
    if (!PyType_Check(atype)) {
        PyErr_SetString(PyExc_TypeError, "NcclComm(): array_type must be a type");
        return NULL;
    }
    h = PyLong_AsVoidPtr(hobj);
    if (h == NULL) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_ValueError,
                            "pygpu.nccl: the communicator's handle is NULL (destroyed, or "
                            "never initialised)");
        return NULL;
    }
    if ((rc = nc.ncclCommCount((nccl_comm)h, &count)) != NCCL_OK)
        return nccl_error(module, rc, "ncclCommCount", (nccl_comm)h);
    if ((rc = nc.ncclCommUserRank((nccl_comm)h, &rank)) != NCCL_OK)
        return nccl_error(module, rc, "ncclCommUserRank", (nccl_comm)h);
    if ((rc = nc.ncclCommCuDevice((nccl_comm)h, &dev)) != NCCL_OK)
        return nccl_error(module, rc, "ncclCommCuDevice", (nccl_comm)h);
    if (count < 1 || rank < 0 || rank >= count) {
        PyErr_Format(PyExc_ValueError,
                     "pygpu.nccl: NCCL says this communicator is rank %d of %d: not a rank", rank,
                     count);
        return NULL;
    }
    if (dev != ((pygpu_Context *)ctx)->ordinal) {
        PyErr_Format(PyExc_ValueError,
                     "pygpu.nccl: the communicator runs on device %d, but the context given "
                     "is device %d's",
                     dev, ((pygpu_Context *)ctx)->ordinal);
        return NULL;
    }
    if ((c = (pygpu_NcclComm *)type->tp_alloc(type, 0)) == NULL) /* zeroed */
        return NULL;
    c->handle = (nccl_comm)h;
    c->st = st;
    c->context = (pygpu_Context *)Py_NewRef(ctx);
    c->owner = Py_NewRef(owner);
    c->array_type = Py_NewRef(atype);
    c->rank = rank;
    c->nranks = count;
    c->device = dev;
    if (pygpu_array_slots_find(&c->slots, atype, "NcclComm()") < 0)
        goto error;
    for (i = 0; i < N_OPS; i++)
        if ((c->op_str[i] = PyUnicode_InternFromString(op_names[i])) == NULL)
            goto error;
    return (PyObject *)c;
error:
    Py_DECREF(c);
    return NULL;
}

static int
comm_traverse(pygpu_NcclComm *c, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE(c));
    Py_VISIT(c->context);
    Py_VISIT(c->owner);
    Py_VISIT(c->array_type);
    return 0;
}

static int
comm_clear(pygpu_NcclComm *c)
{
    int i;
    c->handle = NULL;
    Py_CLEAR(c->context);
    Py_CLEAR(c->owner);
    Py_CLEAR(c->array_type);
    for (i = 0; i < N_OPS; i++)
        Py_CLEAR(c->op_str[i]);
    return 0;
}

static void
comm_dealloc(pygpu_NcclComm *c)
{
    PyTypeObject *tp = Py_TYPE(c);
    PyObject_GC_UnTrack(c);
    comm_clear(c);
    tp->tp_free((PyObject *)c);
    Py_DECREF(tp);
}

static PyObject *
comm_get_int(pygpu_NcclComm *c, void *which)
{
    switch ((int)(intptr_t)which) {
    case 0: return PyLong_FromLong(c->rank);
    case 1: return PyLong_FromLong(c->nranks);
    case 2: return PyLong_FromLong(c->device);
    default: return PyLong_FromVoidPtr(c->handle);
    }
}

static PyObject *
comm_get_context(pygpu_NcclComm *c, void *unused)
{
    if (c->context == NULL)
        Py_RETURN_NONE;
    return Py_NewRef((PyObject *)c->context);
}

static PyGetSetDef comm_getset[] = {
    {"rank", (getter)comm_get_int, NULL, "This communicator's rank.", (void *)0},
    {"nranks", (getter)comm_get_int, NULL, "How many ranks it has.", (void *)1},
    {"device", (getter)comm_get_int, NULL, "The device's ordinal (NCCL's).", (void *)2},
    {"handle", (getter)comm_get_int, NULL, "The raw ncclComm_t (0 after close()).", (void *)3},
    {"context", (getter)comm_get_context, NULL, "The primary context NCCL runs in.", NULL},
    {NULL},
};

#define COLL_DOC(sig, what)                                                          \
    sig "\n--\n\n" what " Buffers: exact GPUArrays, or (address, count, nccl_type) " \
        "tuples the Python path resolved; NotImplemented where the Python path decides."

static PyMethodDef comm_methods[] = {
    {"allreduce", (PyCFunction)(void (*)(void))comm_allreduce, METH_FASTCALL,
     COLL_DOC("allreduce($self, send, recv, op, stream, /)",
              "ncclAllReduce (recv None: in place).")},
    {"reduce", (PyCFunction)(void (*)(void))comm_reduce, METH_FASTCALL,
     COLL_DOC("reduce($self, send, recv, op, root, stream, /)", "ncclReduce.")},
    {"broadcast", (PyCFunction)(void (*)(void))comm_broadcast, METH_FASTCALL,
     COLL_DOC("broadcast($self, send, recv, root, stream, /)", "ncclBroadcast.")},
    {"allgather", (PyCFunction)(void (*)(void))comm_allgather, METH_FASTCALL,
     COLL_DOC("allgather($self, send, recv, stream, /)", "ncclAllGather.")},
    {"reduce_scatter", (PyCFunction)(void (*)(void))comm_reduce_scatter, METH_FASTCALL,
     COLL_DOC("reduce_scatter($self, send, recv, op, stream, /)", "ncclReduceScatter.")},
    {"send", (PyCFunction)(void (*)(void))comm_send, METH_FASTCALL,
     COLL_DOC("send($self, buf, peer, stream, /)", "ncclSend.")},
    {"recv", (PyCFunction)(void (*)(void))comm_recv, METH_FASTCALL,
     COLL_DOC("recv($self, buf, peer, stream, /)", "ncclRecv.")},
    {"close", (PyCFunction)comm_close, METH_NOARGS,
     "close($self, /)\n--\n\nForget the handle (its owner destroys the communicator); later "
     "calls raise LogicError."},
    {NULL},
};

static PyType_Slot comm_slots[] = {
    {Py_tp_new, comm_new},
    {Py_tp_dealloc, comm_dealloc},
    {Py_tp_traverse, comm_traverse},
    {Py_tp_clear, comm_clear},
    {Py_tp_methods, comm_methods},
    {Py_tp_getset, comm_getset},
    {Py_tp_doc, "NcclComm(handle, context, array_type, owner=None)\n--\n\n"
                "An NCCL communicator's raw handle for pygpu.nccl's hot path (private)."},
    {0, NULL},
};

static PyType_Spec comm_spec = {"pygpu.driver.NcclComm", sizeof(pygpu_NcclComm), 0,
                                Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE | Py_TPFLAGS_HAVE_GC
                                    | Py_TPFLAGS_BASETYPE,
                                comm_slots};

static PyMethodDef nccl_methods[] = {
    {"_nccl_load", nccl_load, METH_O,
     "_nccl_load($module, candidates, /)\n--\n\n"
     "Open the first NCCL library among candidates; return its path."},
    {"_nccl_loaded", nccl_loaded, METH_NOARGS,
     "_nccl_loaded($module, /)\n--\n\nThe path of the NCCL library loaded, or None."},
    {"_nccl_version", nccl_version, METH_NOARGS,
     "_nccl_version($module, /)\n--\n\nncclGetVersion() of the loaded library."},
    {"_nccl_group_start", nccl_group_start, METH_NOARGS,
     "_nccl_group_start($module, /)\n--\n\nncclGroupStart()."},
    {"_nccl_group_end", nccl_group_end, METH_NOARGS,
     "_nccl_group_end($module, /)\n--\n\nncclGroupEnd(), with the GIL released."},
    {NULL},
};

int
pygpu_nccl_setup(PyObject *m, pygpu_state *st)
{
    PyTypeObject *tp = NULL;
    PyObject *err;
    if (PyModule_AddFunctions(m, nccl_methods) < 0 || pygpu_add_type(m, &comm_spec, &tp) < 0) {
        Py_XDECREF(tp);
        return -1;
    }
    st->NcclCommType = tp; /* the state's reference */
    tp = NULL;
    if (pygpu_add_type(m, &group_spec, &tp) < 0) {
        Py_XDECREF(tp);
        return -1;
    }
    Py_DECREF(tp);
    err = PyErr_NewExceptionWithDoc("pygpu.driver.NcclError",
                                    "An NCCL call failed: .code (ncclResult_t), .name "
                                    "(ncclInvalidArgument), .routine (ncclAllReduce).",
                                    PyExc_RuntimeError, NULL);
    if (err == NULL)
        return -1;
    if (pygpu_module_add_ref(m, "NcclError", err) < 0) {
        Py_DECREF(err);
        return -1;
    }
    Py_DECREF(err);
    return 0;
}
