/* CUDA graphs: Graph (a graph being built, explicitly or by stream
 * capture), GraphNode (one node of it) and GraphExec (an instantiated,
 * launchable graph), plus Stream.begin_capture()/end_capture().
 *
 * Lifetimes.  The driver copies a node's parameters when the node is added,
 * but not what they point to: a kernel's Function (its module), device
 * memory given as arguments, a memcpy node's host buffer, a host node's
 * callable.  A Graph keeps each of these alive in `keep` for as long as it
 * lives; a GraphExec keeps its Graph (and every graph given to update(), and
 * the arguments of per-node updates) alive, and its release waits for its
 * last launch to finish before the driver handle is destroyed.  So no
 * combination of dropped Python objects lets a replay touch freed memory.
 *
 * A kernel node's arguments are packed by the launch path (args.c,
 * pygpu_pack): the same checks, the same conversions, the same messages,
 * prefixed with the node ("graph node #3: kernel 'axpy': parameter 1 ...").
 */
#include "pygpu.h"

#if PY_VERSION_HEX < 0x030A0000
static inline PyObject *Py_XNewRef(PyObject *o) { Py_XINCREF(o); return o; }
#endif

typedef struct pygpu_hostfn {
    PyObject *callable;         /* borrowed: kept alive by the graph's `keep` */
    PyObject *errors;           /* borrowed: the graph's `errors` list */
    int index;                  /* the node's number, for messages */
    struct pygpu_hostfn *next;  /* owned: the graph's list */
} pygpu_hostfn;

typedef struct pygpu_Graph {
    PyObject_HEAD
    CUgraph handle;             /* owned when owns (a conditional body is its node's) */
    pygpu_Context *context;     /* strong ref */
    PyObject *parent;           /* strong: a conditional body's graph, or NULL */
    PyObject *keep;             /* list, strong: what the nodes reference */
    PyObject *errors;           /* list, strong: exceptions raised by host callbacks */
    PyObject *nodes;            /* dict, strong: node handle (int) -> GraphNode */
    pygpu_hostfn *hostfns;      /* owned: callback records, freed at dealloc */
    int owns;
    int count;                  /* nodes numbered so far */
    PyObject *weakreflist;
} pygpu_Graph;

typedef struct {
    PyObject_HEAD
    CUgraphNode handle;         /* owned by the graph */
    pygpu_Graph *graph;         /* strong ref */
    int index;                  /* its number in the graph (order of addition) */
    int type;                   /* CUgraphNodeType */
    pygpu_Function *function;   /* strong or NULL: a kernel node's Function */
    unsigned int block[3], grid[3], shared;  /* a kernel node's configuration */
    int have_config;
    CUdeviceptr dptr;           /* a mem-alloc node's address */
    size_t bytesize;
    PyObject *bodies;           /* strong: a conditional node's body Graphs (tuple) */
} pygpu_GraphNode;

typedef struct {
    PyObject_HEAD
    CUgraphExec handle;         /* owned */
    CUevent done;               /* owned: recorded after each launch */
    pygpu_Graph *graph;         /* strong ref: the graph it was instantiated from */
    PyObject *keep;             /* list, strong: graphs given to update() */
    PyObject *node_keep;        /* dict, strong: node handle -> what its update packed */
    PyObject *configs;          /* dict, strong: node handle -> bytes, a kernel node's
                                   configuration in this exec when it differs from the
                                   node's (set_kernel_node_params, update) */
    int launched;
} pygpu_GraphExec;

static const char *const type_names[] = {
    "kernel", "memcpy", "memset", "host", "graph", "empty", "wait_event", "event_record",
    "ext_semas_signal", "ext_semas_wait", "mem_alloc", "mem_free", "batch_mem_op",
    "conditional"
};

static const char *
node_type_name(int t)
{
    if (t >= 0 && t < (int)(sizeof type_names / sizeof type_names[0]))
        return type_names[t];
    return "unknown";
}

/* ---- helpers ---- */

/* The streams that pygpu is capturing, in every thread: while there is
 * none, pygpu_capture_relax() and pygpu_capture_check() cost no driver
 * call.  Process-wide, as the driver's capture state is; changed with the
 * GIL held.  A record is added by begin_capture() and removed when the
 * capture ends (end_capture, abort, drop). */
typedef struct capturing {
    pygpu_Stream *stream;       /* borrowed: removes itself before it dies */
    int blocking;               /* not CU_STREAM_NON_BLOCKING: the legacy stream waits for it */
    unsigned long thread;       /* the thread that began it (PyThread_get_thread_ident) */
    struct capturing *next;     /* newest first */
} capturing;
static capturing *captures;
/* how many records `captures` holds: the one flag the launch and copy paths
 * test (pygpu.h) */
Py_ssize_t pygpu_captures_active;
#define captures_active pygpu_captures_active

/* Frees that could not be queued while a capture ran (a stream-ordered
 * free on the legacy stream or on a capturing stream would invalidate the
 * capture or become a node of it): queued when the last capture ends. */
typedef struct deferred_free {
    CUdeviceptr ptr;
    CUstream stream;
    pygpu_Context *context;     /* strong */
    PyObject *owner;            /* strong or NULL: the stream object `stream` belongs to */
    struct deferred_free *next;
} deferred_free;
static deferred_free *deferred;

static void
deferred_flush(void)
{
    while (deferred != NULL) {
        deferred_free *d = deferred;
        pygpu_scope s;
        deferred = d->next;
        if (pygpu_scope_enter_quiet(d->context, &s) == 0) {
            if (cu.cuMemFreeAsync != NULL)
                (void)cu.cuMemFreeAsync(d->ptr, d->stream);
            pygpu_scope_exit(&s);
        }
        Py_XDECREF(d->owner);
        Py_DECREF(d->context);
        PyMem_Free(d);
    }
}

static void
capture_forget(pygpu_Stream *self)
{
    capturing **p, *c;
    for (p = &captures; (c = *p) != NULL; p = &c->next) {
        if (c->stream == self) {
            *p = c->next;
            PyMem_Free(c);
            captures_active--;
            return;
        }
    }
}

/* after a capture ended: the frees deferred meanwhile, once none runs */
static void
capture_ended(void)
{
    if (captures_active == 0)
        deferred_flush();
}

/* The graph entry points are optional in cuda_api.h: a driver that lacks one
 * loses graphs, not pygpu.  Checked where graphs begin (Graph(), capture);
 * every later call has a Graph, so the check passed.  The driver is loaded. */
static int
graph_api_check(pygpu_state *st)
{
    const struct { const char *name; void *fn; } need[] = {
        {"cuStreamBeginCapture", (void *)cu.cuStreamBeginCapture},
        {"cuStreamEndCapture", (void *)cu.cuStreamEndCapture},
        {"cuStreamIsCapturing", (void *)cu.cuStreamIsCapturing},
        {"cuGraphCreate", (void *)cu.cuGraphCreate},
        {"cuGraphDestroy", (void *)cu.cuGraphDestroy},
        {"cuGraphAddKernelNode", (void *)cu.cuGraphAddKernelNode},
        {"cuGraphAddMemcpyNode", (void *)cu.cuGraphAddMemcpyNode},
        {"cuGraphAddMemsetNode", (void *)cu.cuGraphAddMemsetNode},
        {"cuGraphAddHostNode", (void *)cu.cuGraphAddHostNode},
        {"cuGraphAddChildGraphNode", (void *)cu.cuGraphAddChildGraphNode},
        {"cuGraphAddEmptyNode", (void *)cu.cuGraphAddEmptyNode},
        {"cuGraphAddEventRecordNode", (void *)cu.cuGraphAddEventRecordNode},
        {"cuGraphAddEventWaitNode", (void *)cu.cuGraphAddEventWaitNode},
        {"cuGraphAddMemAllocNode", (void *)cu.cuGraphAddMemAllocNode},
        {"cuGraphAddMemFreeNode", (void *)cu.cuGraphAddMemFreeNode},
        {"cuGraphAddDependencies", (void *)cu.cuGraphAddDependencies},
        {"cuGraphGetNodes", (void *)cu.cuGraphGetNodes},
        {"cuGraphNodeGetType", (void *)cu.cuGraphNodeGetType},
        {"cuGraphNodeGetDependencies", (void *)cu.cuGraphNodeGetDependencies},
        {"cuGraphKernelNodeGetParams", (void *)cu.cuGraphKernelNodeGetParams},
        {"cuGraphInstantiateWithFlags", (void *)cu.cuGraphInstantiateWithFlags},
        {"cuGraphExecDestroy", (void *)cu.cuGraphExecDestroy},
        {"cuGraphLaunch", (void *)cu.cuGraphLaunch},
        {"cuGraphUpload", (void *)cu.cuGraphUpload},
        {"cuGraphExecUpdate", (void *)cu.cuGraphExecUpdate},
        {"cuGraphExecKernelNodeSetParams", (void *)cu.cuGraphExecKernelNodeSetParams},
        {"cuGraphDebugDotPrint", (void *)cu.cuGraphDebugDotPrint},
    };
    size_t i;
    for (i = 0; i < sizeof need / sizeof need[0]; i++) {
        if (need[i].fn == NULL) {
            PyErr_Format(st->LogicError, "CUDA graphs need the driver entry point %s, which "
                         "this driver does not provide (a CUDA 11.4 or newer driver has "
                         "it)", need[i].name);
            return -1;
        }
    }
    return 0;
}

static int
graph_check(pygpu_state *st, pygpu_Graph *g)
{
    if (g->handle == NULL) {
        PyErr_SetString(st->LogicError, "this Graph was destroyed");
        return -1;
    }
    if (g->context->detached) {
        PyErr_SetString(st->LogicError, "the context this Graph belongs to was detached");
        return -1;
    }
    return 0;
}

static int
keep(pygpu_Graph *g, PyObject *obj)
{
    return PyList_Append(g->keep, obj);
}

static PyObject *
node_wrap(pygpu_state *st, pygpu_Graph *g, CUgraphNode h, int type)
{
    PyObject *key = PyLong_FromVoidPtr(h), *n;
    pygpu_GraphNode *node;
    if (key == NULL)
        return NULL;
    n = PyDict_GetItemWithError(g->nodes, key);
    if (n != NULL || PyErr_Occurred()) {
        Py_DECREF(key);
        return Py_XNewRef(n);
    }
    if (type < 0) {
        CUgraphNodeType t;
        CUresult rc = cu.cuGraphNodeGetType(h, &t);
        if (rc != CUDA_SUCCESS) {
            Py_DECREF(key);
            return pygpu_cuda_error(st, rc, "cuGraphNodeGetType");
        }
        type = (int)t;
    }
    node = PyObject_GC_New(pygpu_GraphNode, st->GraphNodeType);
    if (node == NULL) {
        Py_DECREF(key);
        return NULL;
    }
    node->handle = h;
    node->graph = (pygpu_Graph *)Py_NewRef((PyObject *)g);
    node->index = g->count++;
    node->type = type;
    node->function = NULL;
    node->have_config = 0;
    node->shared = 0;
    node->dptr = 0;
    node->bytesize = 0;
    node->bodies = NULL;
    PyObject_GC_Track(node);
    if (PyDict_SetItem(g->nodes, key, (PyObject *)node) < 0) {
        Py_DECREF(key);
        Py_DECREF(node);
        return NULL;
    }
    Py_DECREF(key);
    return (PyObject *)node;
}

/* dependencies=None | node | sequence of nodes, each of graph g.  *out is
 * PyMem-allocated (or NULL when there are none). */
static int
parse_deps(pygpu_state *st, pygpu_Graph *g, PyObject *deps, CUgraphNode **out, size_t *n,
           const char *what)
{
    PyObject *seq;
    Py_ssize_t i, len;
    *out = NULL;
    *n = 0;
    if (deps == NULL || deps == Py_None)
        return 0;
    if (PyObject_TypeCheck(deps, st->GraphNodeType))
        seq = PyTuple_Pack(1, deps);
    else
        seq = PySequence_Tuple(deps);
    if (seq == NULL) {
        PyErr_Format(PyExc_TypeError, "%s: dependencies must be a GraphNode or a sequence "
                     "of GraphNodes, not %.100s", what, Py_TYPE(deps)->tp_name);
        return -1;
    }
    len = PyTuple_GET_SIZE(seq);
    if (len > 0 && (*out = PyMem_Malloc((size_t)len * sizeof(CUgraphNode))) == NULL) {
        Py_DECREF(seq);
        PyErr_NoMemory();
        return -1;
    }
    for (i = 0; i < len; i++) {
        PyObject *d = PyTuple_GET_ITEM(seq, i);
        if (!PyObject_TypeCheck(d, st->GraphNodeType)) {
            PyErr_Format(PyExc_TypeError, "%s: dependencies[%zd] must be a GraphNode, not "
                         "%.100s", what, i, Py_TYPE(d)->tp_name);
            goto error;
        }
        if (((pygpu_GraphNode *)d)->graph != g) {
            PyErr_Format(PyExc_ValueError, "%s: dependencies[%zd] (node #%d) belongs to "
                         "another graph", what, i, ((pygpu_GraphNode *)d)->index);
            goto error;
        }
        (*out)[i] = ((pygpu_GraphNode *)d)->handle;
    }
    *n = (size_t)len;
    Py_DECREF(seq);
    return 0;
error:
    Py_DECREF(seq);
    PyMem_Free(*out);
    *out = NULL;
    return -1;
}

/* Re-raise a packing/configuration error with the node named first: the
 * built-in classes are re-made; pygpu's own (LogicError: a freed
 * allocation) keep their class and attributes and get the prefixed message
 * as their args. */
static void
prefix_error_as(const char *prefix)
{
    PyObject *exc, *val, *tb, *args;
    PyErr_Fetch(&exc, &val, &tb);
    PyErr_NormalizeException(&exc, &val, &tb);
    if (exc == PyExc_TypeError || exc == PyExc_ValueError || exc == PyExc_OverflowError) {
        PyErr_Format(exc, "%s: %S", prefix, val);
        Py_XDECREF(exc);
        Py_XDECREF(val);
        Py_XDECREF(tb);
        return;
    }
    /* a driver error keeps its message, which starts with the routine */
    if (val != NULL && PyObject_HasAttrString(val, "routine")) {
        PyObject *r = PyObject_GetAttrString(val, "routine");
        int driver = r != NULL && r != Py_None;
        Py_XDECREF(r);
        PyErr_Clear();
        if (driver) {
            PyErr_Restore(exc, val, tb);
            return;
        }
    }
    if (val != NULL && (args = PyObject_GetAttrString(val, "args")) != NULL) {
        if (PyTuple_Check(args) && PyTuple_GET_SIZE(args) == 1
            && PyUnicode_Check(PyTuple_GET_ITEM(args, 0))) {
            PyObject *msg = PyUnicode_FromFormat("%s: %U", prefix, PyTuple_GET_ITEM(args, 0));
            PyObject *t = msg != NULL ? PyTuple_Pack(1, msg) : NULL;
            if (t == NULL || PyObject_SetAttrString(val, "args", t) < 0)
                PyErr_Clear();
            Py_XDECREF(t);
            Py_XDECREF(msg);
        }
        Py_DECREF(args);
    } else {
        PyErr_Clear();
    }
    PyErr_Restore(exc, val, tb);
}

static void
prefix_error(int index)
{
    char prefix[48];
    PyOS_snprintf(prefix, sizeof prefix, "graph node #%d", index);
    prefix_error_as(prefix);
}

/* The holds a node's arguments take (hold.c), kept with the graph: a list
 * of tokens, or NULL with an exception. */
static PyObject *
node_holds(pygpu_state *st, PyObject *const *args, Py_ssize_t n, int index, const char *kind,
           const char *name)
{
    char what[112];
    if (name != NULL)
        PyOS_snprintf(what, sizeof what, "graph node #%d (%s '%.60s')", index, kind, name);
    else
        PyOS_snprintf(what, sizeof what, "graph node #%d (%s)", index, kind);
    return pygpu_hold_args(st, args, n, what);
}

/* block/grid/shared of a kernel node; NULL keeps the value in out */
static int
parse_config(pygpu_state *st, pygpu_Function *f, PyObject *block, PyObject *grid,
             PyObject *shared, pygpu_launch_config *cfg)
{
    if (block != NULL && block != Py_None && pygpu_parse_dims(block, cfg->block, "block") < 0)
        return -1;
    if (grid != NULL && grid != Py_None && pygpu_parse_dims(grid, cfg->grid, "grid") < 0)
        return -1;
    if (shared != NULL && shared != Py_None) {
        if (PyBool_Check(shared) || !PyIndex_Check(shared)) {
            PyErr_Format(PyExc_TypeError, "shared must be an int, not %.100s",
                         Py_TYPE(shared)->tp_name);
            return -1;
        }
        if (pygpu_parse_uint(shared, &cfg->shared, "shared") < 0)
            return -1;
    }
    return pygpu_config_check(st, f, cfg);
}

/* Refuse In/Out/InOut: a graph replays, so there is no moment to copy back. */
static int
refuse_handlers(pygpu_state *st, pygpu_Function *f, PyObject *const *args, Py_ssize_t n)
{
    Py_ssize_t i;
    for (i = 0; i < n; i++) {
        if (PyObject_TypeCheck(args[i], st->ArgumentHandlerType)) {
            PyErr_Format(PyExc_TypeError, "kernel '%s': parameter %zd: graph nodes do not "
                         "take In/Out/InOut (a graph replays without copying back); pass "
                         "device memory", pygpu_function_name(f), i);
            return -1;
        }
    }
    return 0;
}

/* add_kernel_node's keywords: block, grid, shared, dependencies (borrowed) */
static int
node_kwargs(PyObject *kwnames, PyObject *const *kwargs, PyObject **block, PyObject **grid,
            PyObject **shared, PyObject **deps)
{
    Py_ssize_t i, nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
    for (i = 0; i < nkw; i++) {
        PyObject *k = PyTuple_GET_ITEM(kwnames, i);
        if (PyUnicode_CompareWithASCIIString(k, "block") == 0)
            *block = kwargs[i];
        else if (PyUnicode_CompareWithASCIIString(k, "grid") == 0)
            *grid = kwargs[i];
        else if (PyUnicode_CompareWithASCIIString(k, "shared") == 0)
            *shared = kwargs[i];
        else if (PyUnicode_CompareWithASCIIString(k, "dependencies") == 0)
            *deps = kwargs[i];
        else {
            PyErr_Format(PyExc_TypeError, "add_kernel_node() got an unexpected keyword "
                         "argument %R (options: block, grid, shared, dependencies)", k);
            return -1;
        }
    }
    return 0;
}

/* set_kernel_node_params's keywords: block, grid, shared, function (borrowed) */
static int
update_kwargs(PyObject *kwnames, PyObject *const *kwargs, PyObject **block, PyObject **grid,
              PyObject **shared, PyObject **function)
{
    Py_ssize_t i, nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
    for (i = 0; i < nkw; i++) {
        PyObject *k = PyTuple_GET_ITEM(kwnames, i);
        if (PyUnicode_CompareWithASCIIString(k, "block") == 0)
            *block = kwargs[i];
        else if (PyUnicode_CompareWithASCIIString(k, "grid") == 0)
            *grid = kwargs[i];
        else if (PyUnicode_CompareWithASCIIString(k, "shared") == 0)
            *shared = kwargs[i];
        else if (PyUnicode_CompareWithASCIIString(k, "function") == 0)
            *function = kwargs[i];
        else {
            PyErr_Format(PyExc_TypeError, "set_kernel_node_params() got an unexpected "
                         "keyword argument %R (options: block, grid, shared, function)", k);
            return -1;
        }
    }
    return 0;
}

static int
pack_node(pygpu_state *st, pygpu_Function *f, PyObject *const *args, Py_ssize_t nargs,
          int index, pygpu_argpack *pack)
{
    if (refuse_handlers(st, f, args, nargs) < 0
        || pygpu_pack(st, f, args, nargs, NULL, pack) < 0) {
        prefix_error(index);
        return -1;
    }
    return 0;
}

static PyObject *
args_tuple(PyObject *f, PyObject *const *args, Py_ssize_t n)
{
    PyObject *t = PyTuple_New(n + 1);
    Py_ssize_t i;
    if (t == NULL)
        return NULL;
    PyTuple_SET_ITEM(t, 0, Py_NewRef(f));
    for (i = 0; i < n; i++)
        PyTuple_SET_ITEM(t, i + 1, Py_NewRef(args[i]));
    return t;
}

/* ---- Graph ---- */

/* a Graph of type tp (GraphType or a subclass: Graph.__new__'s type) */
static pygpu_Graph *
graph_alloc_type(PyTypeObject *tp, CUgraph h, pygpu_Context *ctx, int owns, PyObject *parent)
{
    pygpu_Graph *g = (pygpu_Graph *)tp->tp_alloc(tp, 0);   /* zeroed, tracked */
    if (g == NULL)
        return NULL;
    g->handle = h;
    g->owns = owns;
    g->context = (pygpu_Context *)Py_NewRef((PyObject *)ctx);
    g->parent = Py_XNewRef(parent);
    g->hostfns = NULL;
    g->count = 0;
    g->weakreflist = NULL;
    g->keep = PyList_New(0);
    g->nodes = PyDict_New();
    g->errors = parent != NULL ? Py_NewRef(((pygpu_Graph *)parent)->errors) : PyList_New(0);
    if (g->keep == NULL || g->nodes == NULL || g->errors == NULL) {
        Py_DECREF(g);
        return NULL;
    }
    return g;
}

static pygpu_Graph *
graph_alloc(pygpu_state *st, CUgraph h, pygpu_Context *ctx, int owns, PyObject *parent)
{
    return graph_alloc_type(st->GraphType, h, ctx, owns, parent);
}

static void
graph_release(pygpu_Graph *g)
{
    CUgraph h = g->handle;
    pygpu_scope s;
    g->handle = NULL;
    if (h == NULL || !g->owns)
        return;
    if (pygpu_scope_enter_quiet(g->context, &s) < 0)
        return;
    cu.cuGraphDestroy(h);
    pygpu_scope_exit(&s);
}

static int
graph_traverse(pygpu_Graph *g, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE(g));
    Py_VISIT(g->parent);
    Py_VISIT(g->keep);
    Py_VISIT(g->errors);
    Py_VISIT(g->nodes);
    return 0;
}

/* Cycles (a body and its parent, nodes and their graph) are broken here;
 * `keep` stays until dealloc, so what a replay touches outlives the graph's
 * handle. */
static int
graph_clear(pygpu_Graph *g)
{
    Py_CLEAR(g->parent);
    Py_CLEAR(g->nodes);
    return 0;
}

static void
graph_dealloc(pygpu_Graph *g)
{
    PyTypeObject *tp = Py_TYPE(g);
    pygpu_hostfn *h = g->hostfns, *next;
    PyObject_GC_UnTrack(g);
    if (g->weakreflist != NULL)
        PyObject_ClearWeakRefs((PyObject *)g);
    graph_release(g);
    for (; h != NULL; h = next) {
        next = h->next;
        PyMem_Free(h);
    }
    g->hostfns = NULL;
    Py_CLEAR(g->nodes);
    Py_CLEAR(g->parent);
    Py_CLEAR(g->keep);
    Py_CLEAR(g->errors);
    Py_CLEAR(g->context);
    tp->tp_free((PyObject *)g);
    Py_DECREF(tp);
}

static PyObject *
graph_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    pygpu_state *st = pygpu_state_from_type(type);
    static char *kwlist[] = {NULL};
    pygpu_Context *ctx;
    pygpu_Graph *g;
    pygpu_scope s;
    CUgraph h = NULL;
    CUresult rc;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, ":Graph", kwlist))
        return NULL;
    if ((ctx = pygpu_current_context(st)) == NULL || graph_api_check(st) < 0
        || pygpu_scope_enter(st, ctx, &s) < 0)
        return NULL;
    rc = cu.cuGraphCreate(&h, 0);
    pygpu_scope_exit(&s);
    if (rc != CUDA_SUCCESS)
        return pygpu_cuda_error(st, rc, "cuGraphCreate");
    g = graph_alloc_type(type, h, ctx, 1, NULL);
    if (g == NULL) {
        cu.cuGraphDestroy(h);
        return NULL;
    }
    return (PyObject *)g;
}

/* common tail of every add_*: check the graph, activate its context */
static int
graph_enter(pygpu_state *st, pygpu_Graph *g, pygpu_scope *s)
{
    if (graph_check(st, g) < 0)
        return -1;
    return pygpu_scope_enter(st, g->context, s);
}

/* add_kernel_node(function, *args, block, grid=(1,1,1), shared=0, dependencies=None) */
static PyObject *
graph_add_kernel_node(pygpu_Graph *g, PyObject *const *args, Py_ssize_t nargs,
                      PyObject *kwnames)
{
    pygpu_state *st = PYGPU_STATE(g);
    PyObject *block = NULL, *grid = NULL, *shared = NULL, *deps = NULL, *kept = NULL;
    PyObject *res = NULL, *holds = NULL;
    pygpu_Function *f;
    pygpu_launch_config cfg;
    pygpu_argpack pack;
    CUDA_KERNEL_NODE_PARAMS_v1 p;
    CUgraphNode *dv = NULL, node = NULL;
    size_t nd = 0;
    pygpu_scope s;
    CUresult rc;
    int index = g->count;
    PYGPU_ARGPACK_INIT(&pack);
    if (nargs < 1 || !PyObject_TypeCheck(args[0], st->FunctionType)) {
        PyErr_Format(PyExc_TypeError, "add_kernel_node() takes a Function first, not %.100s",
                     nargs < 1 ? "nothing" : Py_TYPE(args[0])->tp_name);
        return NULL;
    }
    f = (pygpu_Function *)args[0];
    if (node_kwargs(kwnames, args + nargs, &block, &grid, &shared, &deps) < 0)
        return NULL;
    if (block == NULL || block == Py_None) {
        PyErr_Format(PyExc_TypeError, "graph node #%d: kernel '%s': add_kernel_node() needs "
                     "block=(x, y, z)", index, pygpu_function_name(f));
        return NULL;
    }
    if (graph_check(st, g) < 0 || pygpu_function_check(st, f) < 0)
        return NULL;
    if (f->module->context != g->context) {
        PyErr_Format(PyExc_ValueError, "graph node #%d: kernel '%s' belongs to another "
                     "context than the graph", index, pygpu_function_name(f));
        return NULL;
    }
    memset(&cfg, 0, sizeof cfg);
    cfg.block[0] = cfg.block[1] = cfg.block[2] = 1;
    cfg.grid[0] = cfg.grid[1] = cfg.grid[2] = 1;
    if (parse_config(st, f, block, grid, shared, &cfg) < 0) {
        prefix_error(index);
        return NULL;
    }
    if (parse_deps(st, g, deps, &dv, &nd, "add_kernel_node()") < 0)
        return NULL;
    if (pack_node(st, f, args + 1, nargs - 1, index, &pack) < 0)
        goto done;
    if ((kept = args_tuple((PyObject *)f, args + 1, nargs - 1)) == NULL
        || (holds = node_holds(st, args + 1, nargs - 1, index, "kernel",
                               pygpu_function_name(f))) == NULL) {
        prefix_error(index);
        goto done;
    }
    memset(&p, 0, sizeof p);
    p.func = f->handle;
    p.gridDimX = cfg.grid[0]; p.gridDimY = cfg.grid[1]; p.gridDimZ = cfg.grid[2];
    p.blockDimX = cfg.block[0]; p.blockDimY = cfg.block[1]; p.blockDimZ = cfg.block[2];
    p.sharedMemBytes = cfg.shared;
    p.kernelParams = pack.ptrs;
    if (graph_enter(st, g, &s) < 0)
        goto done;
    rc = cu.cuGraphAddKernelNode(&node, g->handle, dv, nd, &p);
    pygpu_scope_exit(&s);
    if (rc != CUDA_SUCCESS) {
        pygpu_cuda_error(st, rc, "cuGraphAddKernelNode");
        goto done;
    }
    if (keep(g, kept) < 0 || keep(g, holds) < 0)
        goto done;
    res = node_wrap(st, g, node, CU_GRAPH_NODE_TYPE_KERNEL);
    if (res != NULL) {
        pygpu_GraphNode *n = (pygpu_GraphNode *)res;
        Py_XSETREF(n->function, (pygpu_Function *)Py_NewRef((PyObject *)f));
        memcpy(n->block, cfg.block, sizeof n->block);
        memcpy(n->grid, cfg.grid, sizeof n->grid);
        n->shared = cfg.shared;
        n->have_config = 1;
    }
done:
    pygpu_pack_finish(st, &pack, 0, NULL);
    Py_XDECREF(kept);
    Py_XDECREF(holds);
    PyMem_Free(dv);
    return res;
}

/* A memcpy endpoint: host (buffer protocol; a memoryview is kept, which
 * pins the buffer's memory) or device (pointer). */
typedef struct {
    int host;
    void *hptr;
    CUdeviceptr dptr;
    size_t size;            /* (size_t)-1: unknown */
    PyObject *kept;         /* strong */
} endpoint;

static int
parse_endpoint(pygpu_state *st, PyObject *obj, int writable, endpoint *e, const char *what,
               int index)
{
    e->kept = NULL;
    e->host = 0;
    if (!pygpu_is_allocation(st, obj) && !PyLong_Check(obj)
        && PyObject_CheckBuffer(obj)) {
        Py_buffer v;
        PyObject *mv = PyMemoryView_FromObject(obj);
        if (mv == NULL)
            return -1;
        if (PyObject_GetBuffer(mv, &v, PyBUF_C_CONTIGUOUS | (writable ? PyBUF_WRITABLE : 0))
            < 0) {
            Py_DECREF(mv);
            PyErr_Clear();
            PyErr_Format(PyExc_TypeError, "add_memcpy_node(): %s must be a C-contiguous%s "
                         "host buffer or device memory", what, writable ? " writable" : "");
            return -1;
        }
        e->host = 1;
        e->hptr = v.buf;
        e->size = (size_t)v.len;
        PyBuffer_Release(&v);      /* the memoryview keeps the export */
        e->kept = mv;
        return 0;
    }
    if (pygpu_get_device_ptr(st, obj, &e->dptr, &e->size, 0) < 0) {
        char prefix[64];
        PyOS_snprintf(prefix, sizeof prefix, "graph node #%d (memcpy): %s", index, what);
        prefix_error_as(prefix);
        return -1;
    }
    e->kept = Py_NewRef(obj);
    return 0;
}

static void
memcpy_side(CUDA_MEMCPY3D *c, const endpoint *e, int dst)
{
    if (dst) {
        c->dstMemoryType = e->host ? CU_MEMORYTYPE_HOST : CU_MEMORYTYPE_DEVICE;
        c->dstHost = e->hptr;
        c->dstDevice = e->dptr;
    } else {
        c->srcMemoryType = e->host ? CU_MEMORYTYPE_HOST : CU_MEMORYTYPE_DEVICE;
        c->srcHost = e->hptr;
        c->srcDevice = e->dptr;
    }
}

static PyObject *
graph_add_memcpy_node(pygpu_Graph *g, PyObject *args, PyObject *kwds)
{
    pygpu_state *st = PYGPU_STATE(g);
    static char *kwlist[] = {"dest", "src", "nbytes", "dependencies", NULL};
    PyObject *dobj, *sobj, *nobj = Py_None, *deps = NULL, *res = NULL, *pair = NULL;
    PyObject *holds = NULL;
    endpoint d = {0}, sr = {0};
    size_t n;
    CUDA_MEMCPY3D c;
    CUgraphNode *dv = NULL, node;
    size_t nd = 0;
    pygpu_scope s;
    CUresult rc;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OO|OO:add_memcpy_node", kwlist, &dobj,
                                     &sobj, &nobj, &deps))
        return NULL;
    if (graph_check(st, g) < 0)
        return NULL;
    if (parse_endpoint(st, dobj, 1, &d, "dest", g->count) < 0
        || parse_endpoint(st, sobj, 0, &sr, "src", g->count) < 0)
        goto done;
    if (d.host && sr.host) {
        PyErr_SetString(PyExc_TypeError, "add_memcpy_node(): dest and src are both host "
                        "buffers; one side must be device memory");
        goto done;
    }
    if (nobj == Py_None) {
        n = d.size < sr.size ? d.size : sr.size;
        if (n == (size_t)-1) {
            PyErr_SetString(PyExc_ValueError, "add_memcpy_node(): nbytes is needed when "
                            "neither side's size is known (int addresses)");
            goto done;
        }
    } else {
        n = PyLong_AsSize_t(nobj);
        if (n == (size_t)-1 && PyErr_Occurred())
            goto done;
    }
    if (n == 0 || (d.size != (size_t)-1 && n > d.size) || (sr.size != (size_t)-1 && n > sr.size)) {
        PyErr_Format(PyExc_ValueError, "add_memcpy_node(): %zu bytes do not fit (dest has "
                     "%zd, src %zd)", n, (Py_ssize_t)d.size, (Py_ssize_t)sr.size);
        goto done;
    }
    if (parse_deps(st, g, deps, &dv, &nd, "add_memcpy_node()") < 0)
        goto done;
    memset(&c, 0, sizeof c);
    memcpy_side(&c, &d, 1);
    memcpy_side(&c, &sr, 0);
    c.WidthInBytes = n;
    c.Height = 1;
    c.Depth = 1;
    c.srcPitch = c.dstPitch = n;
    c.srcHeight = c.dstHeight = 1;
    {
        PyObject *sides[2];
        int k = 0;
        if (!d.host)
            sides[k++] = dobj;
        if (!sr.host)
            sides[k++] = sobj;
        if ((holds = node_holds(st, sides, k, g->count, "memcpy", NULL)) == NULL) {
            prefix_error(g->count);
            goto done;
        }
    }
    if ((pair = PyTuple_Pack(2, d.kept, sr.kept)) == NULL || graph_enter(st, g, &s) < 0)
        goto done;
    rc = cu.cuGraphAddMemcpyNode(&node, g->handle, dv, nd, &c, g->context->handle);
    pygpu_scope_exit(&s);
    if (rc != CUDA_SUCCESS) {
        pygpu_cuda_error(st, rc, "cuGraphAddMemcpyNode");
        goto done;
    }
    if (keep(g, pair) == 0 && keep(g, holds) == 0)
        res = node_wrap(st, g, node, CU_GRAPH_NODE_TYPE_MEMCPY);
done:
    Py_XDECREF(holds);
    Py_XDECREF(pair);
    Py_XDECREF(d.kept);
    Py_XDECREF(sr.kept);
    PyMem_Free(dv);
    return res;
}

static PyObject *
graph_add_memset_node(pygpu_Graph *g, PyObject *args, PyObject *kwds)
{
    pygpu_state *st = PYGPU_STATE(g);
    static char *kwlist[] = {"dest", "value", "count", "element_size", "dependencies", NULL};
    PyObject *dobj, *vobj, *cobj, *deps = NULL, *res = NULL, *holds = NULL;
    unsigned int value, esize = 1;
    size_t count, cap;
    CUdeviceptr ptr;
    CUDA_MEMSET_NODE_PARAMS p;
    CUgraphNode *dv = NULL, node;
    size_t nd = 0;
    pygpu_scope s;
    CUresult rc;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOO|IO:add_memset_node", kwlist, &dobj,
                                     &vobj, &cobj, &esize, &deps))
        return NULL;
    if (esize != 1 && esize != 2 && esize != 4) {
        PyErr_Format(PyExc_ValueError, "add_memset_node(): element_size must be 1, 2 or 4, "
                     "not %u", esize);
        return NULL;
    }
    if (pygpu_parse_uint(vobj, &value, "add_memset_node(): value") < 0)
        return NULL;
    if (esize < 4 && value >= (1u << (8 * esize))) {
        PyErr_Format(PyExc_ValueError, "add_memset_node(): value %u does not fit in %u "
                     "byte%s", value, esize, esize == 1 ? "" : "s");
        return NULL;
    }
    count = PyLong_AsSize_t(cobj);
    if (count == (size_t)-1 && PyErr_Occurred())
        return NULL;
    if (graph_check(st, g) < 0)
        return NULL;
    if (pygpu_get_device_ptr(st, dobj, &ptr, &cap, 0) < 0) {
        char prefix[64];
        PyOS_snprintf(prefix, sizeof prefix, "graph node #%d (memset): dest", g->count);
        prefix_error_as(prefix);
        return NULL;
    }
    if (count == 0 || (cap != (size_t)-1 && count > cap / esize)) {
        PyErr_Format(PyExc_ValueError, "add_memset_node(): %zu elements of %u bytes do not "
                     "fit in %zd bytes", count, esize, (Py_ssize_t)cap);
        return NULL;
    }
    if (parse_deps(st, g, deps, &dv, &nd, "add_memset_node()") < 0)
        return NULL;
    memset(&p, 0, sizeof p);
    p.dst = ptr;
    p.value = value;
    p.elementSize = esize;
    p.width = count;
    p.height = 1;
    p.pitch = count * esize;
    if ((holds = node_holds(st, &dobj, 1, g->count, "memset", NULL)) == NULL) {
        prefix_error(g->count);
        goto done;
    }
    if (graph_enter(st, g, &s) < 0)
        goto done;
    rc = cu.cuGraphAddMemsetNode(&node, g->handle, dv, nd, &p, g->context->handle);
    pygpu_scope_exit(&s);
    if (rc != CUDA_SUCCESS) {
        pygpu_cuda_error(st, rc, "cuGraphAddMemsetNode");
        goto done;
    }
    if (keep(g, dobj) == 0 && keep(g, holds) == 0)
        res = node_wrap(st, g, node, CU_GRAPH_NODE_TYPE_MEMSET);
done:
    Py_XDECREF(holds);
    PyMem_Free(dv);
    return res;
}

/* The driver calls this on one of its threads. */
static void CUDA_CB
host_trampoline(void *data)
{
    pygpu_hostfn *h = data;
    PyGILState_STATE gs;
    PyObject *r;
    /* no Python once the interpreter is going away (the GIL cannot be had) */
#if PY_VERSION_HEX >= 0x030D0000
    if (!Py_IsInitialized() || Py_IsFinalizing())
        return;
#else
    if (!Py_IsInitialized() || _Py_IsFinalizing())
        return;
#endif
    gs = PyGILState_Ensure();
    r = PyObject_CallNoArgs(h->callable);
    if (r == NULL) {
        PyObject *exc, *val, *tb;
        PyErr_Fetch(&exc, &val, &tb);
        PyErr_NormalizeException(&exc, &val, &tb);
        if (tb != NULL && val != NULL)
            PyException_SetTraceback(val, tb);
        if (val != NULL && PyList_Append(h->errors, val) < 0)
            PyErr_Clear();
        /* reported now, and kept in callback_errors for the program */
        PyErr_Restore(exc, val, tb);
        PyErr_WriteUnraisable(h->callable);
    } else {
        Py_DECREF(r);
    }
    PyGILState_Release(gs);
}

static PyObject *
graph_add_host_node(pygpu_Graph *g, PyObject *args, PyObject *kwds)
{
    pygpu_state *st = PYGPU_STATE(g);
    static char *kwlist[] = {"callback", "dependencies", NULL};
    PyObject *fn, *deps = NULL, *res = NULL;
    CUDA_HOST_NODE_PARAMS p;
    CUgraphNode *dv = NULL, node;
    size_t nd = 0;
    pygpu_hostfn *h;
    pygpu_scope s;
    CUresult rc;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O|O:add_host_node", kwlist, &fn, &deps))
        return NULL;
    if (!PyCallable_Check(fn)) {
        PyErr_Format(PyExc_TypeError, "add_host_node(): callback must be callable, not "
                     "%.100s", Py_TYPE(fn)->tp_name);
        return NULL;
    }
    if (graph_check(st, g) < 0 || parse_deps(st, g, deps, &dv, &nd, "add_host_node()") < 0)
        return NULL;
    if ((h = PyMem_Malloc(sizeof *h)) == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    if (keep(g, fn) < 0) {
        PyMem_Free(h);
        goto done;
    }
    h->callable = fn;
    h->errors = g->errors;
    h->index = g->count;
    h->next = g->hostfns;
    g->hostfns = h;     /* freed with the graph, even if the node is not added */
    p.fn = host_trampoline;
    p.userData = h;
    if (graph_enter(st, g, &s) < 0)
        goto done;
    rc = cu.cuGraphAddHostNode(&node, g->handle, dv, nd, &p);
    pygpu_scope_exit(&s);
    if (rc != CUDA_SUCCESS) {
        pygpu_cuda_error(st, rc, "cuGraphAddHostNode");
        goto done;
    }
    res = node_wrap(st, g, node, CU_GRAPH_NODE_TYPE_HOST);
done:
    PyMem_Free(dv);
    return res;
}

static PyObject *
add_event_node(pygpu_Graph *g, PyObject *args, PyObject *kwds, int record)
{
    pygpu_state *st = PYGPU_STATE(g);
    static char *kwlist[] = {"event", "dependencies", NULL};
    const char *what = record ? "add_event_record_node()" : "add_event_wait_node()";
    PyObject *ev, *deps = NULL, *res = NULL;
    CUgraphNode *dv = NULL, node;
    size_t nd = 0;
    pygpu_scope s;
    CUresult rc;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, record ? "O|O:add_event_record_node"
                                     : "O|O:add_event_wait_node", kwlist, &ev, &deps))
        return NULL;
    if (!PyObject_TypeCheck(ev, st->EventType)) {
        PyErr_Format(PyExc_TypeError, "%s takes an Event, not %.100s", what,
                     Py_TYPE(ev)->tp_name);
        return NULL;
    }
    if (((pygpu_Event *)ev)->handle == NULL || ((pygpu_Event *)ev)->context->detached) {
        PyErr_Format(st->LogicError, "%s: the Event's context was detached", what);
        return NULL;
    }
    if (graph_check(st, g) < 0 || parse_deps(st, g, deps, &dv, &nd, what) < 0)
        return NULL;
    if (graph_enter(st, g, &s) < 0)
        goto done;
    if (record)
        rc = cu.cuGraphAddEventRecordNode(&node, g->handle, dv, nd, ((pygpu_Event *)ev)->handle);
    else
        rc = cu.cuGraphAddEventWaitNode(&node, g->handle, dv, nd, ((pygpu_Event *)ev)->handle);
    pygpu_scope_exit(&s);
    if (rc != CUDA_SUCCESS) {
        pygpu_cuda_error(st, rc, record ? "cuGraphAddEventRecordNode"
                                        : "cuGraphAddEventWaitNode");
        goto done;
    }
    if (keep(g, ev) == 0)
        res = node_wrap(st, g, node, record ? CU_GRAPH_NODE_TYPE_EVENT_RECORD
                                            : CU_GRAPH_NODE_TYPE_WAIT_EVENT);
done:
    PyMem_Free(dv);
    return res;
}

static PyObject *
graph_add_event_record_node(pygpu_Graph *g, PyObject *args, PyObject *kwds)
{
    return add_event_node(g, args, kwds, 1);
}

static PyObject *
graph_add_event_wait_node(pygpu_Graph *g, PyObject *args, PyObject *kwds)
{
    return add_event_node(g, args, kwds, 0);
}

static PyObject *
graph_add_child_graph_node(pygpu_Graph *g, PyObject *args, PyObject *kwds)
{
    pygpu_state *st = PYGPU_STATE(g);
    static char *kwlist[] = {"graph", "dependencies", NULL};
    PyObject *child, *deps = NULL, *res = NULL;
    CUgraphNode *dv = NULL, node;
    size_t nd = 0;
    pygpu_scope s;
    CUresult rc;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O|O:add_child_graph_node", kwlist, &child,
                                     &deps))
        return NULL;
    if (!PyObject_TypeCheck(child, st->GraphType)) {
        PyErr_Format(PyExc_TypeError, "add_child_graph_node() takes a Graph, not %.100s",
                     Py_TYPE(child)->tp_name);
        return NULL;
    }
    if (child == (PyObject *)g) {
        PyErr_SetString(PyExc_ValueError, "add_child_graph_node(): a graph cannot contain "
                        "itself");
        return NULL;
    }
    {
        /* nor a graph that encloses it: this graph is a conditional body
         * (of a body ...) of child, which would then contain itself */
        PyObject *up;
        for (up = g->parent; up != NULL; up = ((pygpu_Graph *)up)->parent) {
            if (up == child) {
                PyErr_SetString(PyExc_ValueError, "add_child_graph_node(): a graph cannot "
                                "contain itself: this graph is a conditional body inside "
                                "the child graph");
                return NULL;
            }
        }
    }
    if (graph_check(st, g) < 0 || graph_check(st, (pygpu_Graph *)child) < 0
        || parse_deps(st, g, deps, &dv, &nd, "add_child_graph_node()") < 0)
        return NULL;
    if (graph_enter(st, g, &s) < 0)
        goto done;
    rc = cu.cuGraphAddChildGraphNode(&node, g->handle, dv, nd, ((pygpu_Graph *)child)->handle);
    pygpu_scope_exit(&s);
    if (rc != CUDA_SUCCESS) {
        pygpu_cuda_error(st, rc, "cuGraphAddChildGraphNode");
        goto done;
    }
    /* the driver cloned the child; the clone references what the child's
     * nodes reference, which the child keeps */
    if (keep(g, child) == 0)
        res = node_wrap(st, g, node, CU_GRAPH_NODE_TYPE_GRAPH);
done:
    PyMem_Free(dv);
    return res;
}

static PyObject *
graph_add_empty_node(pygpu_Graph *g, PyObject *args, PyObject *kwds)
{
    pygpu_state *st = PYGPU_STATE(g);
    static char *kwlist[] = {"dependencies", NULL};
    PyObject *deps = NULL, *res = NULL;
    CUgraphNode *dv = NULL, node;
    size_t nd = 0;
    pygpu_scope s;
    CUresult rc;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|O:add_empty_node", kwlist, &deps))
        return NULL;
    if (graph_check(st, g) < 0 || parse_deps(st, g, deps, &dv, &nd, "add_empty_node()") < 0)
        return NULL;
    if (graph_enter(st, g, &s) < 0)
        goto done;
    rc = cu.cuGraphAddEmptyNode(&node, g->handle, dv, nd);
    pygpu_scope_exit(&s);
    if (rc != CUDA_SUCCESS)
        pygpu_cuda_error(st, rc, "cuGraphAddEmptyNode");
    else
        res = node_wrap(st, g, node, CU_GRAPH_NODE_TYPE_EMPTY);
done:
    PyMem_Free(dv);
    return res;
}

static PyObject *
graph_add_mem_alloc_node(pygpu_Graph *g, PyObject *args, PyObject *kwds)
{
    pygpu_state *st = PYGPU_STATE(g);
    static char *kwlist[] = {"nbytes", "dependencies", NULL};
    PyObject *nobj, *deps = NULL, *res = NULL;
    CUDA_MEM_ALLOC_NODE_PARAMS p;
    CUgraphNode *dv = NULL, node;
    size_t nd = 0, n;
    pygpu_scope s;
    CUresult rc;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O|O:add_mem_alloc_node", kwlist, &nobj,
                                     &deps))
        return NULL;
    n = PyLong_AsSize_t(nobj);
    if (n == (size_t)-1 && PyErr_Occurred())
        return NULL;
    if (n == 0) {
        PyErr_SetString(PyExc_ValueError, "add_mem_alloc_node(): nbytes must be positive");
        return NULL;
    }
    if (graph_check(st, g) < 0 || parse_deps(st, g, deps, &dv, &nd, "add_mem_alloc_node()") < 0)
        return NULL;
    memset(&p, 0, sizeof p);
    p.poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    p.poolProps.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    p.poolProps.location.id = g->context->ordinal;
    p.bytesize = n;
    if (graph_enter(st, g, &s) < 0)
        goto done;
    rc = cu.cuGraphAddMemAllocNode(&node, g->handle, dv, nd, &p);
    pygpu_scope_exit(&s);
    if (rc != CUDA_SUCCESS) {
        pygpu_cuda_error(st, rc, "cuGraphAddMemAllocNode");
        goto done;
    }
    res = node_wrap(st, g, node, CU_GRAPH_NODE_TYPE_MEM_ALLOC);
    if (res != NULL) {
        ((pygpu_GraphNode *)res)->dptr = p.dptr;
        ((pygpu_GraphNode *)res)->bytesize = n;
    }
done:
    PyMem_Free(dv);
    return res;
}

static PyObject *
graph_add_mem_free_node(pygpu_Graph *g, PyObject *args, PyObject *kwds)
{
    pygpu_state *st = PYGPU_STATE(g);
    static char *kwlist[] = {"ptr", "dependencies", NULL};
    PyObject *pobj, *deps = NULL, *res = NULL;
    CUdeviceptr ptr;
    size_t cap;
    CUgraphNode *dv = NULL, node;
    size_t nd = 0;
    pygpu_scope s;
    CUresult rc;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O|O:add_mem_free_node", kwlist, &pobj,
                                     &deps))
        return NULL;
    if (PyObject_TypeCheck(pobj, st->GraphNodeType)) {
        pygpu_GraphNode *an = (pygpu_GraphNode *)pobj;
        if (an->type != CU_GRAPH_NODE_TYPE_MEM_ALLOC) {
            PyErr_Format(PyExc_TypeError, "add_mem_free_node(): node #%d is a %s node, not a "
                         "mem_alloc node", an->index, node_type_name(an->type));
            return NULL;
        }
        ptr = an->dptr;
    } else if (pygpu_get_device_ptr(st, pobj, &ptr, &cap, 0) < 0) {
        return NULL;
    }
    if (graph_check(st, g) < 0 || parse_deps(st, g, deps, &dv, &nd, "add_mem_free_node()") < 0)
        return NULL;
    if (graph_enter(st, g, &s) < 0)
        goto done;
    rc = cu.cuGraphAddMemFreeNode(&node, g->handle, dv, nd, ptr);
    pygpu_scope_exit(&s);
    if (rc != CUDA_SUCCESS)
        pygpu_cuda_error(st, rc, "cuGraphAddMemFreeNode");
    else
        res = node_wrap(st, g, node, CU_GRAPH_NODE_TYPE_MEM_FREE);
done:
    PyMem_Free(dv);
    return res;
}

static PyObject *
graph_conditional_handle(pygpu_Graph *g, PyObject *args, PyObject *kwds)
{
    pygpu_state *st = PYGPU_STATE(g);
    static char *kwlist[] = {"default", "assign_default", NULL};
    unsigned int dflt = 0;
    int assign = 1;
    CUgraphConditionalHandle h = 0;
    pygpu_scope s;
    CUresult rc;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|Ip:conditional_handle", kwlist, &dflt,
                                     &assign))
        return NULL;
    if (cu.cuGraphConditionalHandleCreate == NULL || cu.cuGraphAddNode == NULL) {
        PyErr_SetString(st->LogicError, "conditional graph nodes need a CUDA 12.3 or newer "
                        "driver");
        return NULL;
    }
    if (graph_enter(st, g, &s) < 0)
        return NULL;
    rc = cu.cuGraphConditionalHandleCreate(&h, g->handle, g->context->handle, dflt,
                                           assign ? CU_GRAPH_COND_ASSIGN_DEFAULT : 0);
    pygpu_scope_exit(&s);
    if (rc != CUDA_SUCCESS)
        return pygpu_cuda_error(st, rc, "cuGraphConditionalHandleCreate");
    return PyLong_FromUnsignedLongLong(h);
}

static PyObject *
graph_add_conditional_node(pygpu_Graph *g, PyObject *args, PyObject *kwds)
{
    pygpu_state *st = PYGPU_STATE(g);
    static char *kwlist[] = {"handle", "kind", "size", "dependencies", NULL};
    PyObject *hobj, *kobj, *deps = NULL, *res = NULL, *bodies = NULL;
    unsigned int size = 1, i;
    int kind = -1;
    CUgraphNodeParams p;
    CUgraphNode *dv = NULL, node;
    size_t nd = 0;
    pygpu_scope s;
    CUresult rc;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OO|IO:add_conditional_node", kwlist, &hobj,
                                     &kobj, &size, &deps))
        return NULL;
    if (PyUnicode_Check(kobj)) {
        if (PyUnicode_CompareWithASCIIString(kobj, "if") == 0) kind = CU_GRAPH_COND_TYPE_IF;
        else if (PyUnicode_CompareWithASCIIString(kobj, "while") == 0) kind = CU_GRAPH_COND_TYPE_WHILE;
        else if (PyUnicode_CompareWithASCIIString(kobj, "switch") == 0) kind = CU_GRAPH_COND_TYPE_SWITCH;
    } else if (PyLong_Check(kobj)) {
        long k = PyLong_AsLong(kobj);
        if (k >= 0 && k <= 2)
            kind = (int)k;
        PyErr_Clear();
    }
    if (kind < 0) {
        PyErr_Format(PyExc_ValueError, "add_conditional_node(): kind must be 'if', 'while' "
                     "or 'switch', not %R", kobj);
        return NULL;
    }
    if (size < 1 || (kind == CU_GRAPH_COND_TYPE_WHILE && size != 1)
        || (kind == CU_GRAPH_COND_TYPE_IF && size > 2)) {
        PyErr_Format(PyExc_ValueError, "add_conditional_node(): size %u is not valid for "
                     "'%s' (while: 1; if: 1, or 2 with an else body; switch: 1 or more)",
                     size, kind == 0 ? "if" : kind == 1 ? "while" : "switch");
        return NULL;
    }
    if (!PyLong_Check(hobj)) {
        PyErr_Format(PyExc_TypeError, "add_conditional_node(): handle must be the int from "
                     "conditional_handle(), not %.100s", Py_TYPE(hobj)->tp_name);
        return NULL;
    }
    if (cu.cuGraphConditionalHandleCreate == NULL || cu.cuGraphAddNode == NULL) {
        PyErr_SetString(st->LogicError, "conditional graph nodes need a CUDA 12.3 or newer "
                        "driver");
        return NULL;
    }
    if (graph_check(st, g) < 0
        || parse_deps(st, g, deps, &dv, &nd, "add_conditional_node()") < 0)
        return NULL;
    memset(&p, 0, sizeof p);
    p.type = CU_GRAPH_NODE_TYPE_CONDITIONAL;
    p.conditional.handle = (CUgraphConditionalHandle)PyLong_AsUnsignedLongLong(hobj);
    if (PyErr_Occurred())
        goto done;
    p.conditional.type = (CUgraphConditionalNodeType)kind;
    p.conditional.size = size;
    p.conditional.ctx = g->context->handle;
    p.conditional.phGraph_out = NULL;
    if (graph_enter(st, g, &s) < 0)
        goto done;
    rc = cu.cuGraphAddNode(&node, g->handle, dv, nd, &p);
    pygpu_scope_exit(&s);
    if (rc != CUDA_SUCCESS) {
        pygpu_cuda_error(st, rc, "cuGraphAddNode");
        goto done;
    }
    if ((bodies = PyTuple_New(size)) == NULL)
        goto done;
    for (i = 0; i < size; i++) {
        pygpu_Graph *b = graph_alloc(st, p.conditional.phGraph_out[i], g->context, 0,
                                     (PyObject *)g);
        if (b == NULL)
            goto done;
        PyTuple_SET_ITEM(bodies, i, (PyObject *)b);
    }
    if (keep(g, bodies) < 0)
        goto done;
    res = node_wrap(st, g, node, CU_GRAPH_NODE_TYPE_CONDITIONAL);
    if (res != NULL)
        Py_XSETREF(((pygpu_GraphNode *)res)->bodies, Py_NewRef(bodies));
done:
    Py_XDECREF(bodies);
    PyMem_Free(dv);
    return res;
}

/* add_dependencies(src, dst): each a node or equally long sequences */
static PyObject *
graph_add_dependencies(pygpu_Graph *g, PyObject *args)
{
    pygpu_state *st = PYGPU_STATE(g);
    PyObject *a, *b, *res = NULL;
    CUgraphNode *from = NULL, *to = NULL;
    size_t nf = 0, nt = 0;
    pygpu_scope s;
    CUresult rc;
    if (!PyArg_ParseTuple(args, "OO:add_dependencies", &a, &b))
        return NULL;
    if (graph_check(st, g) < 0
        || parse_deps(st, g, a, &from, &nf, "add_dependencies()") < 0
        || parse_deps(st, g, b, &to, &nt, "add_dependencies()") < 0)
        goto done;
    if (nf != nt || nf == 0) {
        PyErr_Format(PyExc_ValueError, "add_dependencies(): %zu source and %zu destination "
                     "nodes; give one of each per edge", nf, nt);
        goto done;
    }
    if (graph_enter(st, g, &s) < 0)
        goto done;
    rc = cu.cuGraphAddDependencies(g->handle, from, to, nf);
    pygpu_scope_exit(&s);
    if (rc != CUDA_SUCCESS)
        pygpu_cuda_error(st, rc, "cuGraphAddDependencies");
    else
        res = Py_NewRef(Py_None);
done:
    PyMem_Free(from);
    PyMem_Free(to);
    return res;
}

static PyObject *
graph_nodes(pygpu_Graph *g, PyObject *unused)
{
    pygpu_state *st = PYGPU_STATE(g);
    size_t n = 0, i;
    CUgraphNode *hs = NULL;
    PyObject *list = NULL;
    CUresult rc;
    if (graph_check(st, g) < 0)
        return NULL;
    rc = cu.cuGraphGetNodes(g->handle, NULL, &n);
    if (rc == CUDA_SUCCESS && n > 0) {
        if ((hs = PyMem_Malloc(n * sizeof *hs)) == NULL)
            return PyErr_NoMemory();
        rc = cu.cuGraphGetNodes(g->handle, hs, &n);
    }
    if (rc != CUDA_SUCCESS) {
        pygpu_cuda_error(st, rc, "cuGraphGetNodes");
        goto done;
    }
    if ((list = PyList_New(0)) == NULL)
        goto done;
    for (i = 0; i < n; i++) {
        PyObject *node = node_wrap(st, g, hs[i], -1);
        if (node == NULL || PyList_Append(list, node) < 0) {
            Py_XDECREF(node);
            Py_CLEAR(list);
            goto done;
        }
        Py_DECREF(node);
    }
done:
    PyMem_Free(hs);
    return list;
}

static PyObject *exec_create(pygpu_state *st, pygpu_Graph *g, unsigned long long flags);

static PyObject *
graph_instantiate(pygpu_Graph *g, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"flags", NULL};
    unsigned long long flags = 0;
    pygpu_state *st = PYGPU_STATE(g);
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|K:instantiate", kwlist, &flags))
        return NULL;
    if (!g->owns) {
        PyErr_SetString(PyExc_ValueError, "instantiate(): this graph is the body of a "
                        "conditional node; instantiate the graph that holds it");
        return NULL;
    }
    if (graph_check(st, g) < 0)
        return NULL;
    return exec_create(st, g, flags);
}

static PyObject *
graph_debug_dot(pygpu_Graph *g, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"path", "flags", NULL};
    pygpu_state *st = PYGPU_STATE(g);
    PyObject *path;
    unsigned int flags = CU_GRAPH_DEBUG_DOT_FLAGS_VERBOSE;
    CUresult rc;
    pygpu_scope s;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O&|I:debug_dot", kwlist,
                                     PyUnicode_FSConverter, &path, &flags))
        return NULL;
    if (graph_enter(st, g, &s) < 0) {
        Py_DECREF(path);
        return NULL;
    }
    rc = cu.cuGraphDebugDotPrint(g->handle, PyBytes_AS_STRING(path), flags);
    pygpu_scope_exit(&s);
    Py_DECREF(path);
    if (rc != CUDA_SUCCESS)
        return pygpu_cuda_error(st, rc, "cuGraphDebugDotPrint");
    Py_RETURN_NONE;
}

static PyObject *
graph_get_handle(pygpu_Graph *g, void *c)
{
    return PyLong_FromVoidPtr(g->handle);
}

static PyObject *
graph_get_errors(pygpu_Graph *g, void *c)
{
    return Py_NewRef(g->errors);
}

static PyObject *
graph_get_parent(pygpu_Graph *g, void *c)
{
    return Py_NewRef(g->parent ? g->parent : Py_None);
}

static PyObject *
graph_repr(pygpu_Graph *g)
{
    return PyUnicode_FromFormat("<pygpu.driver.Graph %p%s, %d node%s numbered>",
                                (void *)g->handle, g->owns ? "" : " (conditional body)",
                                g->count, g->count == 1 ? "" : "s");
}

#define CF(f) (PyCFunction)(void (*)(void))(f)
#define DEPS_DOC "dependencies: a GraphNode or a sequence of them (of this graph)."
static PyMethodDef graph_methods[] = {
    {"add_kernel_node", CF(graph_add_kernel_node), METH_FASTCALL | METH_KEYWORDS,
     "add_kernel_node($self, function, /, *args, block, grid=(1, 1, 1), shared=0, "
     "dependencies=None)\n--\n\n"
     "A kernel launch node.  The arguments are checked and packed exactly as "
     "``function(*args, block=..., grid=...)`` would; the graph keeps the function "
     "and the arguments alive.  " DEPS_DOC},
    {"add_memcpy_node", CF(graph_add_memcpy_node), METH_VARARGS | METH_KEYWORDS,
     "add_memcpy_node($self, dest, src, nbytes=None, dependencies=None)\n--\n\n"
     "A copy node: each side is device memory (DeviceAllocation, int address, "
     "__cuda_array_interface__) or a C-contiguous host buffer (kept alive and pinned "
     "in place by the graph).  nbytes defaults to the smaller known size."},
    {"add_memset_node", CF(graph_add_memset_node), METH_VARARGS | METH_KEYWORDS,
     "add_memset_node($self, dest, value, count, element_size=1, "
     "dependencies=None)\n--\n\nSet count elements of element_size (1, 2 or 4) bytes "
     "at dest to value."},
    {"add_host_node", CF(graph_add_host_node), METH_VARARGS | METH_KEYWORDS,
     "add_host_node($self, callback, dependencies=None)\n--\n\n"
     "A node that calls callback() (with the GIL, on a driver thread).  An exception "
     "it raises is reported through sys.unraisablehook and appended to "
     "callback_errors."},
    {"add_event_record_node", CF(graph_add_event_record_node), METH_VARARGS | METH_KEYWORDS,
     "add_event_record_node($self, event, dependencies=None)\n--\n\nRecord event."},
    {"add_event_wait_node", CF(graph_add_event_wait_node), METH_VARARGS | METH_KEYWORDS,
     "add_event_wait_node($self, event, dependencies=None)\n--\n\nWait for event."},
    {"add_child_graph_node", CF(graph_add_child_graph_node), METH_VARARGS | METH_KEYWORDS,
     "add_child_graph_node($self, graph, dependencies=None)\n--\n\n"
     "Embed a copy of graph (later changes to graph do not show)."},
    {"add_empty_node", CF(graph_add_empty_node), METH_VARARGS | METH_KEYWORDS,
     "add_empty_node($self, dependencies=None)\n--\n\nA node that does nothing (a "
     "join point)."},
    {"add_mem_alloc_node", CF(graph_add_mem_alloc_node), METH_VARARGS | METH_KEYWORDS,
     "add_mem_alloc_node($self, nbytes, dependencies=None)\n--\n\n"
     "Stream-ordered allocation; the node's dptr is the address, fixed when the node "
     "is added."},
    {"add_mem_free_node", CF(graph_add_mem_free_node), METH_VARARGS | METH_KEYWORDS,
     "add_mem_free_node($self, ptr, dependencies=None)\n--\n\n"
     "Free a graph allocation (a mem_alloc node or its address)."},
    {"conditional_handle", CF(graph_conditional_handle), METH_VARARGS | METH_KEYWORDS,
     "conditional_handle($self, default=0, assign_default=True)\n--\n\n"
     "A conditional handle (an int; pass it to a kernel as an unsigned long long / "
     "cudaGraphConditionalHandle parameter, set with cudaGraphSetConditional)."},
    {"add_conditional_node", CF(graph_add_conditional_node), METH_VARARGS | METH_KEYWORDS,
     "add_conditional_node($self, handle, kind, size=1, dependencies=None)\n--\n\n"
     "kind 'if', 'while' or 'switch'; the node's bodies are Graphs to fill."},
    {"add_dependencies", CF(graph_add_dependencies), METH_VARARGS,
     "add_dependencies($self, src, dst, /)\n--\n\nAdd edges src[i] -> dst[i] (nodes or "
     "equally long sequences)."},
    {"nodes", CF(graph_nodes), METH_NOARGS,
     "nodes($self, /)\n--\n\nThe graph's nodes (captured ones included)."},
    {"instantiate", CF(graph_instantiate), METH_VARARGS | METH_KEYWORDS,
     "instantiate($self, flags=0)\n--\n\nAn executable GraphExec."},
    {"debug_dot", CF(graph_debug_dot), METH_VARARGS | METH_KEYWORDS,
     "debug_dot($self, path, flags=1)\n--\n\nWrite the graph as Graphviz DOT to path."},
    {NULL}
};

static PyGetSetDef graph_getset[] = {
    {"handle", (getter)graph_get_handle, NULL, "The CUgraph as an int.", NULL},
    {"callback_errors", (getter)graph_get_errors, NULL,
     "Exceptions raised by host-node callbacks (a list; clear it when handled).", NULL},
    {"parent", (getter)graph_get_parent, NULL,
     "For a conditional body, the graph holding it; else None.", NULL},
    {NULL}
};

static PyMemberDef graph_members[] = {
    {"__weaklistoffset__", T_PYSSIZET, offsetof(pygpu_Graph, weakreflist), READONLY},
    {NULL}
};

static PyType_Slot graph_slots[] = {
    {Py_tp_new, graph_new},
    {Py_tp_init, pygpu_init_made},
    {Py_tp_dealloc, graph_dealloc},
    {Py_tp_traverse, graph_traverse},
    {Py_tp_clear, graph_clear},
    {Py_tp_methods, graph_methods},
    {Py_tp_getset, graph_getset},
    {Py_tp_members, graph_members},
    {Py_tp_repr, graph_repr},
    {Py_tp_doc, "Graph()\n--\n\nA CUDA graph in the current context: add nodes, then "
                "instantiate().  Stream.end_capture() returns one too."},
    {0, NULL}
};

static PyType_Spec graph_spec = {
    "pygpu.driver.Graph", sizeof(pygpu_Graph), 0,
    Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_BASETYPE,
    graph_slots
};

/* ---- GraphNode ---- */

static int
node_traverse(pygpu_GraphNode *n, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE(n));
    Py_VISIT(n->graph);
    Py_VISIT(n->function);
    Py_VISIT(n->bodies);
    return 0;
}

static int
node_clear(pygpu_GraphNode *n)
{
    Py_CLEAR(n->bodies);
    Py_CLEAR(n->function);
    Py_CLEAR(n->graph);
    return 0;
}

static void
node_dealloc(pygpu_GraphNode *n)
{
    PyTypeObject *tp = Py_TYPE(n);
    PyObject_GC_UnTrack(n);
    node_clear(n);
    tp->tp_free((PyObject *)n);
    Py_DECREF(tp);
}

static int
node_check(pygpu_state *st, pygpu_GraphNode *n)
{
    if (n->graph == NULL) {
        PyErr_SetString(st->LogicError, "this GraphNode's graph is gone");
        return -1;
    }
    return graph_check(st, n->graph);
}

static PyObject *
node_get_dependencies(pygpu_GraphNode *n, void *c)
{
    pygpu_state *st = PYGPU_STATE(n);
    size_t k = 0, i;
    CUgraphNode *hs = NULL;
    PyObject *list = NULL;
    CUresult rc;
    if (node_check(st, n) < 0)
        return NULL;
    rc = cu.cuGraphNodeGetDependencies(n->handle, NULL, &k);
    if (rc == CUDA_SUCCESS && k > 0) {
        if ((hs = PyMem_Malloc(k * sizeof *hs)) == NULL)
            return PyErr_NoMemory();
        rc = cu.cuGraphNodeGetDependencies(n->handle, hs, &k);
    }
    if (rc != CUDA_SUCCESS) {
        pygpu_cuda_error(st, rc, "cuGraphNodeGetDependencies");
        goto done;
    }
    if ((list = PyList_New(0)) == NULL)
        goto done;
    for (i = 0; i < k; i++) {
        PyObject *d = node_wrap(st, n->graph, hs[i], -1);
        if (d == NULL || PyList_Append(list, d) < 0) {
            Py_XDECREF(d);
            Py_CLEAR(list);
            goto done;
        }
        Py_DECREF(d);
    }
done:
    PyMem_Free(hs);
    return list;
}

static PyObject *
node_get_type(pygpu_GraphNode *n, void *c)
{
    return PyLong_FromLong(n->type);
}

static PyObject *
node_get_kind(pygpu_GraphNode *n, void *c)
{
    return PyUnicode_FromString(node_type_name(n->type));
}

static PyObject *
node_get_graph(pygpu_GraphNode *n, void *c)
{
    return Py_NewRef(n->graph ? (PyObject *)n->graph : Py_None);
}

static PyObject *
node_get_index(pygpu_GraphNode *n, void *c)
{
    return PyLong_FromLong(n->index);
}

static PyObject *
node_get_handle(pygpu_GraphNode *n, void *c)
{
    return PyLong_FromVoidPtr(n->handle);
}

static PyObject *
node_get_function(pygpu_GraphNode *n, void *c)
{
    return Py_NewRef(n->function ? (PyObject *)n->function : Py_None);
}

static PyObject *
node_get_dptr(pygpu_GraphNode *n, void *c)
{
    if (n->type != CU_GRAPH_NODE_TYPE_MEM_ALLOC) {
        PyErr_Format(PyExc_AttributeError, "node #%d is a %s node; only mem_alloc nodes "
                     "have dptr", n->index, node_type_name(n->type));
        return NULL;
    }
    return PyLong_FromUnsignedLongLong(n->dptr);
}

static PyObject *
node_get_bytesize(pygpu_GraphNode *n, void *c)
{
    return PyLong_FromSize_t(n->bytesize);
}

static PyObject *
node_get_bodies(pygpu_GraphNode *n, void *c)
{
    return Py_NewRef(n->bodies ? n->bodies : Py_None);
}

static PyObject *
node_int(pygpu_GraphNode *n)
{
    return PyLong_FromVoidPtr(n->handle);
}

static PyObject *
node_repr(pygpu_GraphNode *n)
{
    if (n->function != NULL)
        return PyUnicode_FromFormat("<pygpu.driver.GraphNode #%d kernel '%U'>", n->index,
                                    n->function->name);
    return PyUnicode_FromFormat("<pygpu.driver.GraphNode #%d %s>", n->index,
                                node_type_name(n->type));
}

static PyGetSetDef node_getset[] = {
    {"dependencies", (getter)node_get_dependencies, NULL,
     "The nodes this node depends on (a list).", NULL},
    {"type", (getter)node_get_type, NULL, "The CUgraphNodeType (graph_node_type).", NULL},
    {"kind", (getter)node_get_kind, NULL,
     "The type's name: 'kernel', 'memcpy', 'memset', 'host', 'graph', 'empty', "
     "'wait_event', 'event_record', 'mem_alloc', 'mem_free', 'conditional'.", NULL},
    {"graph", (getter)node_get_graph, NULL, "The Graph this node belongs to.", NULL},
    {"index", (getter)node_get_index, NULL,
     "The node's number in its graph (the order pygpu first saw it).", NULL},
    {"handle", (getter)node_get_handle, NULL, "The CUgraphNode as an int.", NULL},
    {"function", (getter)node_get_function, NULL,
     "A kernel node's Function (None when not made by add_kernel_node).", NULL},
    {"dptr", (getter)node_get_dptr, NULL, "A mem_alloc node's device address.", NULL},
    {"bytesize", (getter)node_get_bytesize, NULL, "A mem_alloc node's size.", NULL},
    {"bodies", (getter)node_get_bodies, NULL,
     "A conditional node's body Graphs (a tuple), else None.", NULL},
    {NULL}
};

static PyType_Slot node_slots[] = {
    {Py_tp_dealloc, node_dealloc},
    {Py_tp_traverse, node_traverse},
    {Py_tp_clear, node_clear},
    {Py_tp_getset, node_getset},
    {Py_tp_repr, node_repr},
    {Py_nb_int, node_int},
    {Py_tp_doc, "A node of a Graph; pass it in another node's dependencies."},
    {0, NULL}
};

static PyType_Spec node_spec = {
    "pygpu.driver.GraphNode", sizeof(pygpu_GraphNode), 0,
    Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE | Py_TPFLAGS_HAVE_GC |
    Py_TPFLAGS_DISALLOW_INSTANTIATION | Py_TPFLAGS_BASETYPE, node_slots
};

/* ---- GraphExec ---- */

/* A kernel node's configuration as bytes: block[3], grid[3], shared. */
static PyObject *
config_bytes(const unsigned int block[3], const unsigned int grid[3], unsigned int shared)
{
    unsigned int v[7] = {block[0], block[1], block[2], grid[0], grid[1], grid[2], shared};
    return PyBytes_FromStringAndSize((const char *)v, sizeof v);
}

static void
config_read(PyObject *b, pygpu_launch_config *cfg)
{
    unsigned int v[7];
    memcpy(v, PyBytes_AS_STRING(b), sizeof v);
    memcpy(cfg->block, v, sizeof cfg->block);
    memcpy(cfg->grid, v + 3, sizeof cfg->grid);
    cfg->shared = v[6];
}

static PyObject *
exec_create(pygpu_state *st, pygpu_Graph *g, unsigned long long flags)
{
    pygpu_GraphExec *e;
    CUgraphExec h = NULL;
    CUevent ev = NULL;
    pygpu_scope s;
    CUresult rc;
    const char *where = "cuGraphInstantiateWithFlags";
    if (pygpu_scope_enter(st, g->context, &s) < 0)
        return NULL;
    Py_BEGIN_ALLOW_THREADS
    rc = cu.cuGraphInstantiateWithFlags(&h, g->handle, flags);
    Py_END_ALLOW_THREADS
    if (rc == CUDA_SUCCESS) {
        where = "cuEventCreate";
        rc = cu.cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING);
        if (rc != CUDA_SUCCESS)
            cu.cuGraphExecDestroy(h);
    }
    pygpu_scope_exit(&s);
    if (rc != CUDA_SUCCESS)
        return pygpu_cuda_error(st, rc, where);
    e = PyObject_GC_New(pygpu_GraphExec, st->GraphExecType);
    if (e == NULL)
        goto fail;
    e->handle = h;
    e->done = ev;
    e->graph = (pygpu_Graph *)Py_NewRef((PyObject *)g);
    e->launched = 0;
    e->keep = PyList_New(0);
    e->node_keep = PyDict_New();
    e->configs = PyDict_New();
    PyObject_GC_Track(e);
    if (e->keep == NULL || e->node_keep == NULL || e->configs == NULL) {
        Py_DECREF(e);
        return NULL;
    }
    return (PyObject *)e;
fail:
    if (pygpu_scope_enter_quiet(g->context, &s) == 0) {
        cu.cuGraphExecDestroy(h);
        cu.cuEventDestroy(ev);
        pygpu_scope_exit(&s);
    }
    return NULL;
}

/* Wait for the last launch (what it reads must outlive it), then destroy. */
static void
exec_release(pygpu_GraphExec *e)
{
    CUgraphExec h = e->handle;
    CUevent ev = e->done;
    pygpu_scope s;
    e->handle = NULL;
    e->done = NULL;
    if (h == NULL || e->graph == NULL)
        return;
    if (pygpu_scope_enter_quiet(e->graph->context, &s) < 0)
        return;
    if (e->launched) {
        Py_BEGIN_ALLOW_THREADS
        cu.cuEventSynchronize(ev);
        Py_END_ALLOW_THREADS
    }
    cu.cuGraphExecDestroy(h);
    cu.cuEventDestroy(ev);
    pygpu_scope_exit(&s);
}

static int
exec_traverse(pygpu_GraphExec *e, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE(e));
    Py_VISIT(e->graph);
    Py_VISIT(e->keep);
    Py_VISIT(e->node_keep);
    Py_VISIT(e->configs);
    return 0;
}

static int
exec_clear(pygpu_GraphExec *e)
{
    exec_release(e);
    Py_CLEAR(e->keep);
    Py_CLEAR(e->node_keep);
    Py_CLEAR(e->configs);
    Py_CLEAR(e->graph);
    return 0;
}

static void
exec_dealloc(pygpu_GraphExec *e)
{
    PyTypeObject *tp = Py_TYPE(e);
    PyObject_GC_UnTrack(e);
    exec_clear(e);
    tp->tp_free((PyObject *)e);
    Py_DECREF(tp);
}

static int
exec_enter(pygpu_state *st, pygpu_GraphExec *e, pygpu_scope *s)
{
    if (e->handle == NULL || e->graph == NULL) {
        PyErr_SetString(st->LogicError, "this GraphExec was destroyed");
        return -1;
    }
    return pygpu_scope_enter(st, e->graph->context, s);
}

static PyObject *
exec_launch_or_upload(pygpu_GraphExec *e, PyObject *args, PyObject *kwds, int launch)
{
    pygpu_state *st = PYGPU_STATE(e);
    static char *kwlist[] = {"stream", NULL};
    PyObject *sobj = Py_None;
    CUstream stream;
    pygpu_scope s;
    CUresult rc;
    const char *where = launch ? "cuGraphLaunch" : "cuGraphUpload";
    if (!PyArg_ParseTupleAndKeywords(args, kwds, launch ? "|O:launch" : "|O:upload", kwlist,
                                     &sobj))
        return NULL;
    if (pygpu_captures_active != 0) {
        /* the default stream inside this thread's capture is the capturing
         * one, and a graph launched there would be recorded with its
         * completion event: refused; in another thread, the legacy stream
         * would wait for a blocking capturing stream */
        const char *what = launch ? "GraphExec.launch()" : "GraphExec.upload()";
        if (pygpu_capture_is_default(st, sobj)
            && pygpu_capture_current(e->graph->context) != NULL) {
            PyErr_Format(st->LogicError, "%s: this thread is capturing a graph, and inside "
                         "the capture the default stream is the capturing stream; a graph "
                         "is not launched into a capture: add it as a child graph node "
                         "(Graph.add_child_graph_node), or launch it after end_capture()",
                         what);
            return NULL;
        }
        if (pygpu_capture_check(st, sobj, 0, what) < 0)
            return NULL;
    }
    if (pygpu_get_stream(st, sobj, &stream) < 0 || exec_enter(st, e, &s) < 0)
        return NULL;
    if (launch) {
        rc = cu.cuGraphLaunch(e->handle, stream);
        if (rc == CUDA_SUCCESS) {
            e->launched = 1;
            where = "cuEventRecord";
            rc = cu.cuEventRecord(e->done, stream);
        }
    } else {
        rc = cu.cuGraphUpload(e->handle, stream);
    }
    pygpu_scope_exit(&s);
    if (rc != CUDA_SUCCESS)
        return pygpu_cuda_error(st, rc, where);
    Py_RETURN_NONE;
}

static PyObject *
exec_launch(pygpu_GraphExec *e, PyObject *args, PyObject *kwds)
{
    return exec_launch_or_upload(e, args, kwds, 1);
}

static PyObject *
exec_upload(pygpu_GraphExec *e, PyObject *args, PyObject *kwds)
{
    return exec_launch_or_upload(e, args, kwds, 0);
}

static PyObject *
exec_synchronize(pygpu_GraphExec *e, PyObject *unused)
{
    pygpu_state *st = PYGPU_STATE(e);
    pygpu_scope s;
    CUresult rc;
    if (exec_enter(st, e, &s) < 0)
        return NULL;
    Py_BEGIN_ALLOW_THREADS
    rc = cu.cuEventSynchronize(e->done);
    Py_END_ALLOW_THREADS
    pygpu_scope_exit(&s);
    if (rc != CUDA_SUCCESS)
        return pygpu_cuda_error(st, rc, "cuEventSynchronize");
    Py_RETURN_NONE;
}

static const char *
update_reason(CUgraphExecUpdateResult r)
{
    switch (r) {
    case CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED:
        return "the topology differs (nodes or dependencies were added, removed or "
               "reordered); instantiate the new graph instead";
    case CU_GRAPH_EXEC_UPDATE_ERROR_NODE_TYPE_CHANGED:
        return "a node's type differs";
    case CU_GRAPH_EXEC_UPDATE_ERROR_FUNCTION_CHANGED:
        return "a kernel node's function changed in a way that cannot be updated";
    case CU_GRAPH_EXEC_UPDATE_ERROR_PARAMETERS_CHANGED:
        return "a node's parameters changed in a way that cannot be updated";
    case CU_GRAPH_EXEC_UPDATE_ERROR_NOT_SUPPORTED:
        return "a node's change is not supported by update";
    case CU_GRAPH_EXEC_UPDATE_ERROR_UNSUPPORTED_FUNCTION_CHANGE:
        return "a kernel node changed to or from a kernel that cannot be swapped in";
    case CU_GRAPH_EXEC_UPDATE_ERROR_ATTRIBUTES_CHANGED:
        return "a node's attributes changed";
    default:
        return "the driver gave no reason";
    }
}

static PyObject *
exec_update(pygpu_GraphExec *e, PyObject *graph)
{
    pygpu_state *st = PYGPU_STATE(e);
    pygpu_Graph *g = (pygpu_Graph *)graph;
    CUgraphNode bad = NULL;
    CUgraphExecUpdateResult result = CU_GRAPH_EXEC_UPDATE_SUCCESS;
    pygpu_scope s;
    CUresult rc;
    if (!PyObject_TypeCheck(graph, st->GraphType)) {
        PyErr_Format(PyExc_TypeError, "update() takes a Graph, not %.100s",
                     Py_TYPE(graph)->tp_name);
        return NULL;
    }
    if (graph_check(st, g) < 0 || exec_enter(st, e, &s) < 0)
        return NULL;
    rc = cu.cuGraphExecUpdate(e->handle, g->handle, &bad, &result);
    pygpu_scope_exit(&s);
    if (rc != CUDA_SUCCESS) {
        char msg[400];
        PyObject *key = bad ? PyLong_FromVoidPtr(bad) : NULL, *n = NULL;
        if (key != NULL) {
            n = PyDict_GetItemWithError(g->nodes, key);
            Py_DECREF(key);
        }
        PyErr_Clear();
        if (n != NULL)
            snprintf(msg, sizeof msg, "update(): %s (at node #%d, %s)", update_reason(result),
                     ((pygpu_GraphNode *)n)->index,
                     node_type_name(((pygpu_GraphNode *)n)->type));
        else
            snprintf(msg, sizeof msg, "update(): %s", update_reason(result));
        return pygpu_cuda_error_ex(st, rc, "cuGraphExecUpdate", msg);
    }
    if (PyList_Append(e->keep, graph) < 0)
        return NULL;
    /* the exec's kernel nodes now have g's configurations: match the nodes
     * pygpu numbered in both graphs by number */
    PyDict_Clear(e->node_keep);
    PyDict_Clear(e->configs);
    {
        Py_ssize_t i = 0, j;
        PyObject *k, *v, *k2, *v2;
        while (PyDict_Next(e->graph->nodes, &i, &k, &v)) {
            pygpu_GraphNode *a = (pygpu_GraphNode *)v, *b = NULL;
            PyObject *cb;
            if (a->type != CU_GRAPH_NODE_TYPE_KERNEL)
                continue;
            for (j = 0; b == NULL && PyDict_Next(g->nodes, &j, &k2, &v2);)
                if (((pygpu_GraphNode *)v2)->index == a->index)
                    b = (pygpu_GraphNode *)v2;
            if (b == NULL || !b->have_config)
                continue;
            if ((cb = config_bytes(b->block, b->grid, b->shared)) == NULL
                || PyDict_SetItem(e->configs, k, cb) < 0) {
                Py_XDECREF(cb);
                return NULL;
            }
            Py_DECREF(cb);
        }
    }
    Py_RETURN_NONE;
}

/* set_kernel_node_params(node, *args, block=None, grid=None, shared=None,
 * function=None): new arguments (all of them) and optionally a new
 * configuration or kernel for one kernel node of the instantiated graph */
static PyObject *
exec_set_kernel_node_params(pygpu_GraphExec *e, PyObject *const *args, Py_ssize_t nargs,
                            PyObject *kwnames)
{
    pygpu_state *st = PYGPU_STATE(e);
    PyObject *block = NULL, *grid = NULL, *shared = NULL, *fobj = NULL, *kept = NULL;
    PyObject *key = NULL, *res = NULL;
    pygpu_GraphNode *n;
    pygpu_Function *f;
    pygpu_launch_config cfg;
    pygpu_argpack pack;
    CUDA_KERNEL_NODE_PARAMS_v1 p;
    pygpu_Graph *root;
    pygpu_scope s;
    CUresult rc;
    PYGPU_ARGPACK_INIT(&pack);
    if (nargs < 1 || !PyObject_TypeCheck(args[0], st->GraphNodeType)) {
        PyErr_Format(PyExc_TypeError, "set_kernel_node_params() takes a GraphNode first, "
                     "not %.100s", nargs < 1 ? "nothing" : Py_TYPE(args[0])->tp_name);
        return NULL;
    }
    n = (pygpu_GraphNode *)args[0];
    if (update_kwargs(kwnames, args + nargs, &block, &grid, &shared, &fobj) < 0)
        return NULL;
    if (node_check(st, n) < 0 || exec_enter(st, e, &s) < 0)
        return NULL;
    pygpu_scope_exit(&s);
    for (root = n->graph; root->parent != NULL; root = (pygpu_Graph *)root->parent)
        ;
    if (root != e->graph) {
        PyErr_Format(PyExc_ValueError, "set_kernel_node_params(): node #%d is not a node of "
                     "the graph this GraphExec was instantiated from", n->index);
        return NULL;
    }
    if (n->type != CU_GRAPH_NODE_TYPE_KERNEL) {
        PyErr_Format(PyExc_TypeError, "set_kernel_node_params(): node #%d is a %s node, not "
                     "a kernel node", n->index, node_type_name(n->type));
        return NULL;
    }
    if (fobj != NULL && fobj != Py_None && !PyObject_TypeCheck(fobj, st->FunctionType)) {
        PyErr_Format(PyExc_TypeError, "set_kernel_node_params(): function must be a "
                     "Function, not %.100s", Py_TYPE(fobj)->tp_name);
        return NULL;
    }
    f = fobj != NULL && fobj != Py_None ? (pygpu_Function *)fobj : n->function;
    if (f == NULL) {
        PyErr_Format(PyExc_TypeError, "set_kernel_node_params(): node #%d was captured; "
                     "pass function= (the kernel it launches) so its arguments can be "
                     "checked", n->index);
        return NULL;
    }
    if (pygpu_function_check(st, f) < 0)
        return NULL;
    if (f->module->context != e->graph->context) {
        PyErr_Format(PyExc_ValueError, "set_kernel_node_params(): node #%d: kernel '%s' "
                     "belongs to another context than the graph; a kernel node cannot "
                     "move between contexts", n->index, pygpu_function_name(f));
        return NULL;
    }
    memset(&cfg, 0, sizeof cfg);
    memset(&p, 0, sizeof p);
    if ((key = PyLong_FromVoidPtr(n->handle)) == NULL)
        return NULL;
    kept = PyDict_GetItemWithError(e->configs, key);     /* borrowed */
    if (kept != NULL) {
        config_read(kept, &cfg);
        kept = NULL;
    } else if (PyErr_Occurred()) {
        goto done;
    } else if (n->have_config) {
        memcpy(cfg.block, n->block, sizeof cfg.block);
        memcpy(cfg.grid, n->grid, sizeof cfg.grid);
        cfg.shared = n->shared;
    } else {
        rc = cu.cuGraphKernelNodeGetParams(n->handle, &p);
        if (rc != CUDA_SUCCESS) {
            pygpu_cuda_error(st, rc, "cuGraphKernelNodeGetParams");
            goto done;
        }
        cfg.block[0] = p.blockDimX; cfg.block[1] = p.blockDimY; cfg.block[2] = p.blockDimZ;
        cfg.grid[0] = p.gridDimX; cfg.grid[1] = p.gridDimY; cfg.grid[2] = p.gridDimZ;
        cfg.shared = p.sharedMemBytes;
    }
    if (parse_config(st, f, block, grid, shared, &cfg) < 0) {
        prefix_error(n->index);
        goto done;
    }
    if (pack_node(st, f, args + 1, nargs - 1, n->index, &pack) < 0)
        goto done;
    {
        PyObject *t = args_tuple((PyObject *)f, args + 1, nargs - 1), *h = NULL;
        if (t != NULL
            && (h = node_holds(st, args + 1, nargs - 1, n->index, "kernel",
                               pygpu_function_name(f))) == NULL)
            prefix_error(n->index);
        if (h != NULL)
            kept = PyTuple_Pack(2, t, h);
        Py_XDECREF(t);
        Py_XDECREF(h);
        if (kept == NULL)
            goto done;
    }
    memset(&p, 0, sizeof p);
    p.func = f->handle;
    p.gridDimX = cfg.grid[0]; p.gridDimY = cfg.grid[1]; p.gridDimZ = cfg.grid[2];
    p.blockDimX = cfg.block[0]; p.blockDimY = cfg.block[1]; p.blockDimZ = cfg.block[2];
    p.sharedMemBytes = cfg.shared;
    p.kernelParams = pack.ptrs;
    if (exec_enter(st, e, &s) < 0)
        goto done;
    rc = cu.cuGraphExecKernelNodeSetParams(e->handle, n->handle, &p);
    pygpu_scope_exit(&s);
    if (rc != CUDA_SUCCESS) {
        char msg[300];
        snprintf(msg, sizeof msg, "set_kernel_node_params(): the driver refused kernel "
                 "'%s' for node #%d%s%s%s", pygpu_function_name(f), n->index,
                 n->function && n->function != f ? " (it launched '" : "",
                 n->function && n->function != f ? pygpu_function_name(n->function) : "",
                 n->function && n->function != f ? "'; the new kernel is not compatible "
                 "with the instantiated node)" : "");
        pygpu_cuda_error_ex(st, rc, "cuGraphExecKernelNodeSetParams", msg);
        goto done;
    }
    if (PyDict_SetItem(e->node_keep, key, kept) < 0)
        goto done;
    {
        PyObject *cb = config_bytes(cfg.block, cfg.grid, cfg.shared);
        if (cb == NULL || PyDict_SetItem(e->configs, key, cb) < 0) {
            Py_XDECREF(cb);
            goto done;
        }
        Py_DECREF(cb);
    }
    res = Py_NewRef(Py_None);
done:
    pygpu_pack_finish(st, &pack, 0, NULL);
    Py_XDECREF(kept);
    Py_XDECREF(key);
    return res;
}

static PyObject *
exec_get_graph(pygpu_GraphExec *e, void *c)
{
    return Py_NewRef(e->graph ? (PyObject *)e->graph : Py_None);
}

static PyObject *
exec_get_handle(pygpu_GraphExec *e, void *c)
{
    return PyLong_FromVoidPtr(e->handle);
}

static PyObject *
exec_get_errors(pygpu_GraphExec *e, void *c)
{
    return Py_NewRef(e->graph ? e->graph->errors : Py_None);
}

static PyMethodDef exec_methods[] = {
    {"launch", CF(exec_launch), METH_VARARGS | METH_KEYWORDS,
     "launch($self, stream=None)\n--\n\nEnqueue the graph on stream."},
    {"upload", CF(exec_upload), METH_VARARGS | METH_KEYWORDS,
     "upload($self, stream=None)\n--\n\nPrepare the graph's device resources ahead of "
     "the first launch."},
    {"synchronize", CF(exec_synchronize), METH_NOARGS,
     "synchronize($self, /)\n--\n\nWait for the last launch to finish (GIL released)."},
    {"update", CF(exec_update), METH_O,
     "update($self, graph, /)\n--\n\nTake the parameters of graph, which must have the "
     "same topology; a mismatch raises an Error that names the reason."},
    {"set_kernel_node_params", CF(exec_set_kernel_node_params),
     METH_FASTCALL | METH_KEYWORDS,
     "set_kernel_node_params($self, node, /, *args, block=None, grid=None, shared=None, "
     "function=None)\n--\n\nNew arguments (checked as a launch checks them) and "
     "optionally a new configuration or kernel for one kernel node."},
    {NULL}
};

static PyGetSetDef exec_getset[] = {
    {"graph", (getter)exec_get_graph, NULL, "The Graph this was instantiated from.", NULL},
    {"handle", (getter)exec_get_handle, NULL, "The CUgraphExec as an int.", NULL},
    {"callback_errors", (getter)exec_get_errors, NULL,
     "The graph's host-callback exceptions (a list).", NULL},
    {NULL}
};

static PyType_Slot exec_slots[] = {
    {Py_tp_dealloc, exec_dealloc},
    {Py_tp_traverse, exec_traverse},
    {Py_tp_clear, exec_clear},
    {Py_tp_methods, exec_methods},
    {Py_tp_getset, exec_getset},
    {Py_tp_doc, "An instantiated graph (Graph.instantiate()): launch it on a stream."},
    {0, NULL}
};

static PyType_Spec exec_spec = {
    "pygpu.driver.GraphExec", sizeof(pygpu_GraphExec), 0,
    Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE | Py_TPFLAGS_HAVE_GC |
    Py_TPFLAGS_DISALLOW_INSTANTIATION | Py_TPFLAGS_BASETYPE, exec_slots
};

/* ---- stream capture (the Stream methods call these) ---- */

PyObject *
pygpu_stream_begin_capture(pygpu_Stream *self, PyObject *args, PyObject *kwds)
{
    pygpu_state *st = PYGPU_STATE(self);
    static char *kwlist[] = {"mode", NULL};
    int mode = CU_STREAM_CAPTURE_MODE_GLOBAL;
    unsigned int flags = 0;
    pygpu_scope s;
    CUresult rc;
    PyObject *list;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|i:begin_capture", kwlist, &mode))
        return NULL;
    if (mode < 0 || mode > 2) {
        PyErr_Format(PyExc_ValueError, "begin_capture(): mode must be a capture_mode "
                     "(GLOBAL 0, THREAD_LOCAL 1, RELAXED 2), not %d", mode);
        return NULL;
    }
    if (self->handle == NULL || self->handle == CU_STREAM_LEGACY
        || self->handle == CU_STREAM_PER_THREAD || self->context == NULL) {
        PyErr_SetString(st->LogicError, "begin_capture(): the default streams cannot be "
                        "captured; capture on a Stream()");
        return NULL;
    }
    if (self->capture_keep != NULL) {
        PyErr_SetString(st->LogicError, "begin_capture(): this stream is already capturing");
        return NULL;
    }
    if (graph_api_check(st) < 0)
        return NULL;
    if ((list = PyList_New(0)) == NULL || pygpu_scope_enter(st, self->context, &s) < 0) {
        Py_XDECREF(list);
        return NULL;
    }
    /* what mem_alloc_async does once per context, done before the capture
     * rather than inside it */
    if (!self->context->pool_configured)
        pygpu_keep_pool_memory(self->context);
    /* a blocking stream makes work on the legacy stream wait for it
     * (pygpu_capture_check) */
    rc = cu.cuStreamGetFlags(self->handle, &flags);
    if (rc != CUDA_SUCCESS) {
        pygpu_scope_exit(&s);
        Py_DECREF(list);
        return pygpu_cuda_error(st, rc, "cuStreamGetFlags");
    }
    rc = cu.cuStreamBeginCapture(self->handle, (CUstreamCaptureMode)mode);
    pygpu_scope_exit(&s);
    if (rc != CUDA_SUCCESS) {
        Py_DECREF(list);
        return pygpu_cuda_error(st, rc, "cuStreamBeginCapture");
    }
    self->capture_keep = list;
    {
        capturing *c = PyMem_Malloc(sizeof *c);
        if (c == NULL) {
            pygpu_stream_capture_abort(self);   /* ends it: no record, no capture */
            return PyErr_NoMemory();
        }
        c->stream = self;
        c->blocking = !(flags & CU_STREAM_NON_BLOCKING);
        c->thread = PyThread_get_thread_ident();
        c->next = captures;
        captures = c;
        captures_active++;
    }
    Py_RETURN_NONE;
}

PyObject *
pygpu_stream_end_capture(pygpu_Stream *self, PyObject *unused)
{
    pygpu_state *st = PYGPU_STATE(self);
    pygpu_scope s;
    CUresult rc;
    CUgraph h = NULL;
    PyObject *list = self->capture_keep;
    pygpu_Graph *g;
    if (list == NULL) {
        PyErr_SetString(st->LogicError, "end_capture(): this stream is not capturing "
                        "(begin_capture() first)");
        return NULL;
    }
    self->capture_keep = NULL;     /* ended, whatever the driver says */
    capture_forget(self);
    if (pygpu_scope_enter(st, self->context, &s) < 0) {
        Py_DECREF(list);
        return NULL;
    }
    rc = cu.cuStreamEndCapture(self->handle, &h);
    if (rc != CUDA_SUCCESS && h != NULL) {
        cu.cuGraphDestroy(h);
        h = NULL;
    }
    pygpu_scope_exit(&s);
    capture_ended();
    if (rc != CUDA_SUCCESS) {
        Py_DECREF(list);
        return pygpu_cuda_error_ex(st, rc, "cuStreamEndCapture",
                                   rc == CUDA_ERROR_STREAM_CAPTURE_INVALIDATED
                                   ? "end_capture(): an operation that is illegal during "
                                     "capture failed earlier, so no graph was made; the "
                                     "stream is no longer capturing" : NULL);
    }
    g = graph_alloc(st, h, self->context, 1, NULL);
    if (g == NULL) {
        cu.cuGraphDestroy(h);
        Py_DECREF(list);
        return NULL;
    }
    Py_SETREF(g->keep, list);
    return (PyObject *)g;
}

PyObject *
pygpu_stream_is_capturing(pygpu_Stream *self, PyObject *unused)
{
    pygpu_state *st = PYGPU_STATE(self);
    CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
    pygpu_scope s = {NULL, 0};
    CUresult rc;
    if (graph_api_check(st) < 0)
        return NULL;
    if (self->context != NULL && pygpu_scope_enter(st, self->context, &s) < 0)
        return NULL;
    rc = cu.cuStreamIsCapturing(self->handle, &status);
    pygpu_scope_exit(&s);
    if (rc != CUDA_SUCCESS)
        return pygpu_cuda_error(st, rc, "cuStreamIsCapturing");
    return PyBool_FromLong(status != CU_STREAM_CAPTURE_STATUS_NONE);
}

/* A capturing stream's graph must keep alive what the captured work uses:
 * the launch paths note their Function and arguments here.  Cheap when the
 * stream is not capturing. */
int
pygpu_capture_note(pygpu_state *st, PyObject *stream_obj, PyObject *f, PyObject *const *args,
                   Py_ssize_t nargs)
{
    PyObject *t, *h, *keep_list;
    int r;
    if (captures_active == 0)
        return 0;
    if (pygpu_capture_is_default(st, stream_obj)) {
        /* as pygpu_launch and the copies resolved it: a launch of f's
         * context, a copy or memset of the current one */
        pygpu_Context *ctx = NULL;
        if (f != NULL && PyObject_TypeCheck(f, st->FunctionType))
            ctx = ((pygpu_Function *)f)->module->context;
        else if ((ctx = pygpu_current_context(st)) == NULL)
            return -1;
        stream_obj = (PyObject *)pygpu_capture_current(ctx);
    }
    if (stream_obj == NULL || !PyObject_TypeCheck(stream_obj, st->StreamType)
        || ((pygpu_Stream *)stream_obj)->capture_keep == NULL)
        return 0;
    keep_list = ((pygpu_Stream *)stream_obj)->capture_keep;
    if ((t = args_tuple(f, args, nargs)) == NULL)
        return -1;
    /* hold the memory the captured work uses (hold.c): f is a copy's
     * destination, or the Function or Event (which hold none); a copy's
     * sides may be int addresses (the array layer passes a.ptr), found
     * among pygpu's allocations */
    if (f != NULL && !PyObject_TypeCheck(f, st->FunctionType)
        && !PyObject_TypeCheck(f, st->EventType)) {
        Py_ssize_t i;
        h = PyList_New(0);
        for (i = 0; h != NULL && i <= nargs; i++) {
            PyObject *one = pygpu_hold_address(st, PyTuple_GET_ITEM(t, i), "a captured graph");
            if (one == NULL || (one != Py_None && PyList_Append(h, one) < 0))
                Py_CLEAR(h);
            Py_XDECREF(one);
        }
    } else {
        h = pygpu_hold_args(st, ((PyTupleObject *)t)->ob_item, nargs + 1, "a captured graph");
    }
    r = h == NULL ? -1 : PyList_Append(keep_list, t);
    if (r == 0 && PyList_GET_SIZE(h) > 0)
        r = PyList_Append(keep_list, h);
    Py_XDECREF(h);
    Py_DECREF(t);
    return r;
}

int
pygpu_stream_capturing(pygpu_state *st, PyObject *stream_obj)
{
    return stream_obj != NULL && Py_IS_TYPE(stream_obj, st->StreamType)
           && ((pygpu_Stream *)stream_obj)->capture_keep != NULL;
}

CUstreamCaptureMode
pygpu_capture_relax(void)
{
    CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
    if (captures_active == 0 || cu.cuThreadExchangeStreamCaptureMode == NULL
        || cu.cuThreadExchangeStreamCaptureMode(&mode) != CUDA_SUCCESS)
        return CU_STREAM_CAPTURE_MODE_RELAXED;     /* nothing to restore */
    return mode;
}

void
pygpu_capture_restore(CUstreamCaptureMode mode)
{
    if (mode != CU_STREAM_CAPTURE_MODE_RELAXED && cu.cuThreadExchangeStreamCaptureMode != NULL)
        (void)cu.cuThreadExchangeStreamCaptureMode(&mode);
}

/* Forget a capture without ending it (the handle is not ours, or gone). */
void
pygpu_stream_capture_drop(pygpu_Stream *self)
{
    if (self->capture_keep == NULL)
        return;
    Py_CLEAR(self->capture_keep);
    capture_forget(self);
    capture_ended();
}

/* ---- the default stream inside a capture ----
 *
 * The rule: while a thread is inside pygpu's capture of a Stream s (from
 * s.begin_capture() to s.end_capture(), in the thread that began it), the
 * default stream means s in that thread, for s's context: launches and
 * stream-ordered copies and memsets given no stream (None, 0, 1, the
 * legacy Stream) are queued on s, so they are captured; blocking calls on
 * the default stream are refused (they would wait for work that is only
 * recorded).  Other threads keep the legacy stream, whose work the
 * capture's implicit dependency forbids while a blocking stream captures
 * (pygpu_capture_check refuses it).  While nothing captures, every test
 * here is one load of pygpu_captures_active. */

pygpu_Stream *
pygpu_capture_current(pygpu_Context *ctx)
{
    capturing *c;
    unsigned long me;
    if (captures_active == 0)
        return NULL;
    me = PyThread_get_thread_ident();
    for (c = captures; c != NULL; c = c->next)
        if (c->thread == me && (ctx == NULL || c->stream->context == ctx))
            return c->stream;
    return NULL;
}

/* sobj names the default stream: absent, None, 0, 1 or a Stream of the
 * NULL or legacy handle */
int
pygpu_capture_is_default(pygpu_state *st, PyObject *sobj)
{
    if (sobj == NULL || sobj == Py_None)
        return 1;
    if (PyObject_TypeCheck(sobj, st->StreamType)) {
        CUstream h = ((pygpu_Stream *)sobj)->handle;
        return h == NULL || h == CU_STREAM_LEGACY;
    }
    if (PyLong_CheckExact(sobj)) {
        long v = PyLong_AsLong(sobj);
        if (v == -1 && PyErr_Occurred()) {
            PyErr_Clear();
            return 0;
        }
        return v == 0 || v == 1;
    }
    return 0;
}

int
pygpu_capture_default(pygpu_state *st, PyObject **sobj, int blocking, const char *what,
                      const char *instead)
{
    pygpu_Stream *cur;
    pygpu_Context *ctx;
    if (captures_active == 0 || !pygpu_capture_is_default(st, *sobj))
        return 0;
    if ((ctx = pygpu_current_context(st)) == NULL)
        return -1;
    if ((cur = pygpu_capture_current(ctx)) == NULL)
        return 0;
    if (blocking) {
        PyErr_Format(st->LogicError, "%s: this thread is capturing a graph, and inside the "
                     "capture the default stream is the capturing stream, whose work is "
                     "recorded, not run: a blocking call cannot wait for it; %s, or call it "
                     "after end_capture()", what,
                     instead != NULL ? instead : "use the _async form (it is captured)");
        return -1;
    }
    *sobj = (PyObject *)cur;
    return 1;
}

/* the first capture of ctx that the legacy stream would wait for, or NULL */
static capturing *
blocking_capture(pygpu_Context *ctx)
{
    capturing *c;
    for (c = captures; c != NULL; c = c->next)
        if (c->blocking && c->stream->context == ctx)
            return c;
    return NULL;
}

int
pygpu_capture_legacy_launch(pygpu_state *st, pygpu_Context *ctx, const char *kernel)
{
    if (captures_active == 0 || blocking_capture(ctx) == NULL)
        return 0;
    PyErr_Format(st->LogicError, "kernel '%s': a stream of this context is capturing a "
                 "graph in another thread, and a launch on the legacy default stream would "
                 "wait for it (CUDA_ERROR_STREAM_CAPTURE_IMPLICIT, which would invalidate "
                 "the capture); pass stream=, or launch it before or after the capture",
                 kernel);
    return -1;
}

int
pygpu_capture_context_check(pygpu_state *st, pygpu_Context *ctx, const char *what)
{
    capturing *c;
    if (captures_active == 0)
        return 0;
    for (c = captures; c != NULL; c = c->next) {
        if (ctx == NULL || c->stream->context == ctx) {
            PyErr_Format(st->LogicError, "%s: a stream of this context is capturing a graph "
                         "(its work is recorded, not run), which this call would wait for "
                         "(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, which would invalidate the "
                         "capture); call it before or after the capture", what);
            return -1;
        }
    }
    return 0;
}

int
pygpu_capture_defer_free(pygpu_Context *ctx, CUdeviceptr p, CUstream s, PyObject *owner)
{
    capturing *c;
    deferred_free *d;
    if (captures_active == 0)
        return 0;
    for (c = captures; c != NULL; c = c->next)
        if (c->stream->handle == s
            || ((s == NULL || s == CU_STREAM_LEGACY) && c->blocking && c->stream->context == ctx))
            break;
    if (c == NULL || (d = PyMem_Malloc(sizeof *d)) == NULL)
        return 0;
    d->ptr = p;
    d->stream = s;
    Py_INCREF(ctx);
    d->context = ctx;
    Py_XINCREF(owner);
    d->owner = owner;
    d->next = deferred;
    deferred = d;
    return 1;
}

int
pygpu_capture_check(pygpu_state *st, PyObject *sobj, int blocking, const char *what)
{
    capturing *c;
    pygpu_Context *ctx;
    if (captures_active == 0)
        return 0;
    if (sobj != NULL && PyObject_TypeCheck(sobj, st->StreamType)) {
        pygpu_Stream *ps = (pygpu_Stream *)sobj;
        if (blocking && ps->capture_keep != NULL) {
            PyErr_Format(st->LogicError, "%s: the stream is capturing a graph, whose work "
                         "is recorded, not run: a blocking call cannot wait for it; use "
                         "the _async form (it is captured), or call it after "
                         "end_capture()", what);
            return -1;
        }
        if (ps->handle != NULL && ps->handle != CU_STREAM_LEGACY)
            return 0;
    } else if (sobj != NULL && sobj != Py_None
               && !(PyLong_Check(sobj) && (PyLong_AsLong(sobj) == 0
                                           || PyLong_AsLong(sobj) == 1))) {
        PyErr_Clear();
        return 0;           /* the per-thread stream, or another library's */
    }
    /* the legacy default stream waits for every blocking stream of its
     * context: one of them capturing, that is CUDA_ERROR_STREAM_CAPTURE_
     * IMPLICIT, and the driver invalidates the capture */
    if ((ctx = pygpu_current_context(st)) == NULL)
        return -1;
    for (c = captures; c != NULL; c = c->next) {
        if (c->blocking && c->stream->context == ctx) {
            PyErr_Format(st->LogicError, "%s: a stream of this context is capturing a "
                         "graph, and work on the legacy default stream would wait for it "
                         "(CUDA_ERROR_STREAM_CAPTURE_IMPLICIT, which would invalidate the "
                         "capture); pass the capturing stream to the _async form, or call "
                         "it before or after the capture", what);
            return -1;
        }
    }
    return 0;
}

/* Stream dealloc while capturing: end the capture and drop its graph. */
void
pygpu_stream_capture_abort(pygpu_Stream *self)
{
    CUgraph h = NULL;
    if (self->capture_keep == NULL)
        return;
    Py_CLEAR(self->capture_keep);
    capture_forget(self);
    if (self->handle != NULL && cu.cuStreamEndCapture != NULL
        && cu.cuStreamEndCapture(self->handle, &h) == CUDA_SUCCESS
        && h != NULL)
        cu.cuGraphDestroy(h);
    capture_ended();
}

int
pygpu_graph_setup(PyObject *m, pygpu_state *st)
{
    if (pygpu_add_type(m, &graph_spec, &st->GraphType) < 0
        || pygpu_add_type(m, &node_spec, &st->GraphNodeType) < 0
        || pygpu_add_type(m, &exec_spec, &st->GraphExecType) < 0)
        return -1;
    return 0;
}
