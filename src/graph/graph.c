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

static const char *const type_names[] = {
    "kernel",       "memcpy",       "memset",           "host",           "graph",     "empty",
    "wait_event",   "event_record", "ext_semas_signal", "ext_semas_wait", "mem_alloc", "mem_free",
    "batch_mem_op", "conditional"};

const char *
pygpu_graph_node_type_name(int t)
{
    if (t >= 0 && t < (int)(sizeof type_names / sizeof type_names[0]))
        return type_names[t];
    return "unknown";
}

/* ---- helpers ---- */

/* The graph entry points are optional in cuda_api.h: a driver that lacks one
 * loses graphs, not pygpu.  Checked where graphs begin (Graph(), capture);
 * every later call has a Graph, so the check passed.  The driver is loaded. */
int
pygpu_graph_api_check(pygpu_state *st)
{
    const struct {
        const char *name;
        void *fn;
    } need[] = {
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
            PyErr_Format(st->LogicError,
                         "CUDA graphs need the driver entry point %s, which "
                         "this driver does not provide (a CUDA 11.4 or newer driver has "
                         "it)",
                         need[i].name);
            return -1;
        }
    }
    return 0;
}

int
pygpu_graph_check(pygpu_state *st, pygpu_Graph *g)
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

void
pygpu_graph_prefix_error(int index)
{
    char prefix[48];
    PyOS_snprintf(prefix, sizeof prefix, "graph node #%d", index);
    prefix_error_as(prefix);
}

/* The holds a node's arguments take (hold.c), kept with the graph: a list
 * of tokens, or NULL with an exception. */
PyObject *
pygpu_graph_node_holds(pygpu_state *st, PyObject *const *args, Py_ssize_t n, int index,
                       const char *kind, const char *name)
{
    char what[112];
    if (name != NULL)
        PyOS_snprintf(what, sizeof what, "graph node #%d (%s '%.60s')", index, kind, name);
    else
        PyOS_snprintf(what, sizeof what, "graph node #%d (%s)", index, kind);
    return pygpu_hold_args(st, args, n, what);
}

/* block/grid/shared of a kernel node; NULL keeps the value in out */
int
pygpu_graph_parse_config(pygpu_state *st, pygpu_Function *f, PyObject *block, PyObject *grid,
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
            PyErr_Format(PyExc_TypeError,
                         "kernel '%s': parameter %zd: graph nodes do not "
                         "take In/Out/InOut (a graph replays without copying back); pass "
                         "device memory",
                         pygpu_function_name(f), i);
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
            PyErr_Format(PyExc_TypeError,
                         "add_kernel_node() got an unexpected keyword "
                         "argument %R (options: block, grid, shared, dependencies)",
                         k);
            return -1;
        }
    }
    return 0;
}

/* set_kernel_node_params's keywords: block, grid, shared, function (borrowed) */
int
pygpu_graph_update_kwargs(PyObject *kwnames, PyObject *const *kwargs, PyObject **block,
                          PyObject **grid, PyObject **shared, PyObject **function)
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
            PyErr_Format(PyExc_TypeError,
                         "set_kernel_node_params() got an unexpected "
                         "keyword argument %R (options: block, grid, shared, function)",
                         k);
            return -1;
        }
    }
    return 0;
}

int
pygpu_graph_pack_node(pygpu_state *st, pygpu_Function *f, PyObject *const *args, Py_ssize_t nargs,
                      int index, pygpu_argpack *pack)
{
    if (refuse_handlers(st, f, args, nargs) < 0 || pygpu_pack(st, f, args, nargs, NULL, pack) < 0) {
        pygpu_graph_prefix_error(index);
        return -1;
    }
    return 0;
}

PyObject *
pygpu_graph_args_tuple(PyObject *f, PyObject *const *args, Py_ssize_t n)
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
    pygpu_Graph *g = (pygpu_Graph *)tp->tp_alloc(tp, 0); /* zeroed, tracked */
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

pygpu_Graph *
pygpu_graph_alloc(pygpu_state *st, CUgraph h, pygpu_Context *ctx, int owns, PyObject *parent)
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
    if ((ctx = pygpu_current_context(st)) == NULL || pygpu_graph_api_check(st) < 0
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
    if (pygpu_graph_check(st, g) < 0)
        return -1;
    return pygpu_scope_enter(st, g->context, s);
}

/* add_kernel_node(function, *args, block, grid=(1,1,1), shared=0, dependencies=None) */
static PyObject *
graph_add_kernel_node(pygpu_Graph *g, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
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
        PyErr_Format(PyExc_TypeError,
                     "graph node #%d: kernel '%s': add_kernel_node() needs "
                     "block=(x, y, z)",
                     index, pygpu_function_name(f));
        return NULL;
    }
    if (pygpu_graph_check(st, g) < 0 || pygpu_function_check(st, f) < 0)
        return NULL;
    if (f->module->context != g->context) {
        PyErr_Format(PyExc_ValueError,
                     "graph node #%d: kernel '%s' belongs to another "
                     "context than the graph",
                     index, pygpu_function_name(f));
        return NULL;
    }
    memset(&cfg, 0, sizeof cfg);
    cfg.block[0] = cfg.block[1] = cfg.block[2] = 1;
    cfg.grid[0] = cfg.grid[1] = cfg.grid[2] = 1;
    if (pygpu_graph_parse_config(st, f, block, grid, shared, &cfg) < 0) {
        pygpu_graph_prefix_error(index);
        return NULL;
    }
    if (pygpu_graph_parse_deps(st, g, deps, &dv, &nd, "add_kernel_node()") < 0)
        return NULL;
    if (pygpu_graph_pack_node(st, f, args + 1, nargs - 1, index, &pack) < 0)
        goto done;
    if ((kept = pygpu_graph_args_tuple((PyObject *)f, args + 1, nargs - 1)) == NULL
        || (holds = pygpu_graph_node_holds(st, args + 1, nargs - 1, index, "kernel",
                                           pygpu_function_name(f)))
               == NULL) {
        pygpu_graph_prefix_error(index);
        goto done;
    }
    memset(&p, 0, sizeof p);
    p.func = f->handle;
    p.gridDimX = cfg.grid[0];
    p.gridDimY = cfg.grid[1];
    p.gridDimZ = cfg.grid[2];
    p.blockDimX = cfg.block[0];
    p.blockDimY = cfg.block[1];
    p.blockDimZ = cfg.block[2];
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
    res = pygpu_graph_node_wrap(st, g, node, CU_GRAPH_NODE_TYPE_KERNEL);
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
    size_t size;    /* (size_t)-1: unknown */
    PyObject *kept; /* strong */
} endpoint;

static int
parse_endpoint(pygpu_state *st, PyObject *obj, int writable, endpoint *e, const char *what,
               int index)
{
    e->kept = NULL;
    e->host = 0;
    if (!pygpu_is_allocation(st, obj) && !PyLong_Check(obj) && PyObject_CheckBuffer(obj)) {
        Py_buffer v;
        PyObject *mv = PyMemoryView_FromObject(obj);
        if (mv == NULL)
            return -1;
        if (PyObject_GetBuffer(mv, &v, PyBUF_C_CONTIGUOUS | (writable ? PyBUF_WRITABLE : 0)) < 0) {
            Py_DECREF(mv);
            PyErr_Clear();
            PyErr_Format(PyExc_TypeError,
                         "add_memcpy_node(): %s must be a C-contiguous%s "
                         "host buffer or device memory",
                         what, writable ? " writable" : "");
            return -1;
        }
        e->host = 1;
        e->hptr = v.buf;
        e->size = (size_t)v.len;
        PyBuffer_Release(&v); /* the memoryview keeps the export */
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
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OO|OO:add_memcpy_node", kwlist, &dobj, &sobj,
                                     &nobj, &deps))
        return NULL;
    if (pygpu_graph_check(st, g) < 0)
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
        PyErr_Format(PyExc_ValueError,
                     "add_memcpy_node(): %zu bytes do not fit (dest has "
                     "%zd, src %zd)",
                     n, (Py_ssize_t)d.size, (Py_ssize_t)sr.size);
        goto done;
    }
    if (pygpu_graph_parse_deps(st, g, deps, &dv, &nd, "add_memcpy_node()") < 0)
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
        if ((holds = pygpu_graph_node_holds(st, sides, k, g->count, "memcpy", NULL)) == NULL) {
            pygpu_graph_prefix_error(g->count);
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
        res = pygpu_graph_node_wrap(st, g, node, CU_GRAPH_NODE_TYPE_MEMCPY);
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
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOO|IO:add_memset_node", kwlist, &dobj, &vobj,
                                     &cobj, &esize, &deps))
        return NULL;
    if (esize != 1 && esize != 2 && esize != 4) {
        PyErr_Format(PyExc_ValueError,
                     "add_memset_node(): element_size must be 1, 2 or 4, "
                     "not %u",
                     esize);
        return NULL;
    }
    if (pygpu_parse_uint(vobj, &value, "add_memset_node(): value") < 0)
        return NULL;
    if (esize < 4 && value >= (1u << (8 * esize))) {
        PyErr_Format(PyExc_ValueError,
                     "add_memset_node(): value %u does not fit in %u "
                     "byte%s",
                     value, esize, esize == 1 ? "" : "s");
        return NULL;
    }
    count = PyLong_AsSize_t(cobj);
    if (count == (size_t)-1 && PyErr_Occurred())
        return NULL;
    if (pygpu_graph_check(st, g) < 0)
        return NULL;
    if (pygpu_get_device_ptr(st, dobj, &ptr, &cap, 0) < 0) {
        char prefix[64];
        PyOS_snprintf(prefix, sizeof prefix, "graph node #%d (memset): dest", g->count);
        prefix_error_as(prefix);
        return NULL;
    }
    if (count == 0 || (cap != (size_t)-1 && count > cap / esize)) {
        PyErr_Format(PyExc_ValueError,
                     "add_memset_node(): %zu elements of %u bytes do not "
                     "fit in %zd bytes",
                     count, esize, (Py_ssize_t)cap);
        return NULL;
    }
    if (pygpu_graph_parse_deps(st, g, deps, &dv, &nd, "add_memset_node()") < 0)
        return NULL;
    memset(&p, 0, sizeof p);
    p.dst = ptr;
    p.value = value;
    p.elementSize = esize;
    p.width = count;
    p.height = 1;
    p.pitch = count * esize;
    if ((holds = pygpu_graph_node_holds(st, &dobj, 1, g->count, "memset", NULL)) == NULL) {
        pygpu_graph_prefix_error(g->count);
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
        res = pygpu_graph_node_wrap(st, g, node, CU_GRAPH_NODE_TYPE_MEMSET);
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
        PyErr_Format(PyExc_TypeError,
                     "add_host_node(): callback must be callable, not "
                     "%.100s",
                     Py_TYPE(fn)->tp_name);
        return NULL;
    }
    if (pygpu_graph_check(st, g) < 0
        || pygpu_graph_parse_deps(st, g, deps, &dv, &nd, "add_host_node()") < 0)
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
    g->hostfns = h; /* freed with the graph, even if the node is not added */
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
    res = pygpu_graph_node_wrap(st, g, node, CU_GRAPH_NODE_TYPE_HOST);
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
    if (!PyArg_ParseTupleAndKeywords(
            args, kwds, record ? "O|O:add_event_record_node" : "O|O:add_event_wait_node", kwlist,
            &ev, &deps))
        return NULL;
    if (!PyObject_TypeCheck(ev, st->EventType)) {
        PyErr_Format(PyExc_TypeError, "%s takes an Event, not %.100s", what, Py_TYPE(ev)->tp_name);
        return NULL;
    }
    if (((pygpu_Event *)ev)->handle == NULL || ((pygpu_Event *)ev)->context->detached) {
        PyErr_Format(st->LogicError, "%s: the Event's context was detached", what);
        return NULL;
    }
    if (pygpu_graph_check(st, g) < 0 || pygpu_graph_parse_deps(st, g, deps, &dv, &nd, what) < 0)
        return NULL;
    if (graph_enter(st, g, &s) < 0)
        goto done;
    if (record)
        rc = cu.cuGraphAddEventRecordNode(&node, g->handle, dv, nd, ((pygpu_Event *)ev)->handle);
    else
        rc = cu.cuGraphAddEventWaitNode(&node, g->handle, dv, nd, ((pygpu_Event *)ev)->handle);
    pygpu_scope_exit(&s);
    if (rc != CUDA_SUCCESS) {
        pygpu_cuda_error(st, rc, record ? "cuGraphAddEventRecordNode" : "cuGraphAddEventWaitNode");
        goto done;
    }
    if (keep(g, ev) == 0)
        res = pygpu_graph_node_wrap(
            st, g, node, record ? CU_GRAPH_NODE_TYPE_EVENT_RECORD : CU_GRAPH_NODE_TYPE_WAIT_EVENT);
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
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O|O:add_child_graph_node", kwlist, &child, &deps))
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
                PyErr_SetString(PyExc_ValueError,
                                "add_child_graph_node(): a graph cannot "
                                "contain itself: this graph is a conditional body inside "
                                "the child graph");
                return NULL;
            }
        }
    }
    if (pygpu_graph_check(st, g) < 0 || pygpu_graph_check(st, (pygpu_Graph *)child) < 0
        || pygpu_graph_parse_deps(st, g, deps, &dv, &nd, "add_child_graph_node()") < 0)
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
        res = pygpu_graph_node_wrap(st, g, node, CU_GRAPH_NODE_TYPE_GRAPH);
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
    if (pygpu_graph_check(st, g) < 0
        || pygpu_graph_parse_deps(st, g, deps, &dv, &nd, "add_empty_node()") < 0)
        return NULL;
    if (graph_enter(st, g, &s) < 0)
        goto done;
    rc = cu.cuGraphAddEmptyNode(&node, g->handle, dv, nd);
    pygpu_scope_exit(&s);
    if (rc != CUDA_SUCCESS)
        pygpu_cuda_error(st, rc, "cuGraphAddEmptyNode");
    else
        res = pygpu_graph_node_wrap(st, g, node, CU_GRAPH_NODE_TYPE_EMPTY);
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
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O|O:add_mem_alloc_node", kwlist, &nobj, &deps))
        return NULL;
    n = PyLong_AsSize_t(nobj);
    if (n == (size_t)-1 && PyErr_Occurred())
        return NULL;
    if (n == 0) {
        PyErr_SetString(PyExc_ValueError, "add_mem_alloc_node(): nbytes must be positive");
        return NULL;
    }
    if (pygpu_graph_check(st, g) < 0
        || pygpu_graph_parse_deps(st, g, deps, &dv, &nd, "add_mem_alloc_node()") < 0)
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
    res = pygpu_graph_node_wrap(st, g, node, CU_GRAPH_NODE_TYPE_MEM_ALLOC);
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
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O|O:add_mem_free_node", kwlist, &pobj, &deps))
        return NULL;
    if (PyObject_TypeCheck(pobj, st->GraphNodeType)) {
        pygpu_GraphNode *an = (pygpu_GraphNode *)pobj;
        if (an->type != CU_GRAPH_NODE_TYPE_MEM_ALLOC) {
            PyErr_Format(PyExc_TypeError,
                         "add_mem_free_node(): node #%d is a %s node, not a "
                         "mem_alloc node",
                         an->index, pygpu_graph_node_type_name(an->type));
            return NULL;
        }
        ptr = an->dptr;
    } else if (pygpu_get_device_ptr(st, pobj, &ptr, &cap, 0) < 0) {
        return NULL;
    }
    if (pygpu_graph_check(st, g) < 0
        || pygpu_graph_parse_deps(st, g, deps, &dv, &nd, "add_mem_free_node()") < 0)
        return NULL;
    if (graph_enter(st, g, &s) < 0)
        goto done;
    rc = cu.cuGraphAddMemFreeNode(&node, g->handle, dv, nd, ptr);
    pygpu_scope_exit(&s);
    if (rc != CUDA_SUCCESS)
        pygpu_cuda_error(st, rc, "cuGraphAddMemFreeNode");
    else
        res = pygpu_graph_node_wrap(st, g, node, CU_GRAPH_NODE_TYPE_MEM_FREE);
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
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|Ip:conditional_handle", kwlist, &dflt, &assign))
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
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OO|IO:add_conditional_node", kwlist, &hobj, &kobj,
                                     &size, &deps))
        return NULL;
    if (PyUnicode_Check(kobj)) {
        if (PyUnicode_CompareWithASCIIString(kobj, "if") == 0)
            kind = CU_GRAPH_COND_TYPE_IF;
        else if (PyUnicode_CompareWithASCIIString(kobj, "while") == 0)
            kind = CU_GRAPH_COND_TYPE_WHILE;
        else if (PyUnicode_CompareWithASCIIString(kobj, "switch") == 0)
            kind = CU_GRAPH_COND_TYPE_SWITCH;
    } else if (PyLong_Check(kobj)) {
        long k = PyLong_AsLong(kobj);
        if (k >= 0 && k <= 2)
            kind = (int)k;
        PyErr_Clear();
    }
    if (kind < 0) {
        PyErr_Format(PyExc_ValueError,
                     "add_conditional_node(): kind must be 'if', 'while' "
                     "or 'switch', not %R",
                     kobj);
        return NULL;
    }
    if (size < 1 || (kind == CU_GRAPH_COND_TYPE_WHILE && size != 1)
        || (kind == CU_GRAPH_COND_TYPE_IF && size > 2)) {
        PyErr_Format(PyExc_ValueError,
                     "add_conditional_node(): size %u is not valid for "
                     "'%s' (while: 1; if: 1, or 2 with an else body; switch: 1 or more)",
                     size,
                     kind == 0   ? "if"
                     : kind == 1 ? "while"
                                 : "switch");
        return NULL;
    }
    if (!PyLong_Check(hobj)) {
        PyErr_Format(PyExc_TypeError,
                     "add_conditional_node(): handle must be the int from "
                     "conditional_handle(), not %.100s",
                     Py_TYPE(hobj)->tp_name);
        return NULL;
    }
    if (cu.cuGraphConditionalHandleCreate == NULL || cu.cuGraphAddNode == NULL) {
        PyErr_SetString(st->LogicError, "conditional graph nodes need a CUDA 12.3 or newer "
                                        "driver");
        return NULL;
    }
    if (pygpu_graph_check(st, g) < 0
        || pygpu_graph_parse_deps(st, g, deps, &dv, &nd, "add_conditional_node()") < 0)
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
        pygpu_Graph *b =
            pygpu_graph_alloc(st, p.conditional.phGraph_out[i], g->context, 0, (PyObject *)g);
        if (b == NULL)
            goto done;
        PyTuple_SET_ITEM(bodies, i, (PyObject *)b);
    }
    if (keep(g, bodies) < 0)
        goto done;
    res = pygpu_graph_node_wrap(st, g, node, CU_GRAPH_NODE_TYPE_CONDITIONAL);
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
    if (pygpu_graph_check(st, g) < 0
        || pygpu_graph_parse_deps(st, g, a, &from, &nf, "add_dependencies()") < 0
        || pygpu_graph_parse_deps(st, g, b, &to, &nt, "add_dependencies()") < 0)
        goto done;
    if (nf != nt || nf == 0) {
        PyErr_Format(PyExc_ValueError,
                     "add_dependencies(): %zu source and %zu destination "
                     "nodes; give one of each per edge",
                     nf, nt);
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
    if (pygpu_graph_check(st, g) < 0)
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
        PyObject *node = pygpu_graph_node_wrap(st, g, hs[i], -1);
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
    if (pygpu_graph_check(st, g) < 0)
        return NULL;
    return pygpu_graph_exec_create(st, g, flags);
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
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O&|I:debug_dot", kwlist, PyUnicode_FSConverter,
                                     &path, &flags))
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
    return PyUnicode_FromFormat("<pygpu.driver.Graph %p%s, %d node%s numbered>", (void *)g->handle,
                                g->owns ? "" : " (conditional body)", g->count,
                                g->count == 1 ? "" : "s");
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
    {NULL},
};

static PyGetSetDef graph_getset[] = {
    {"handle", (getter)graph_get_handle, NULL, "The CUgraph as an int.", NULL},
    {"callback_errors", (getter)graph_get_errors, NULL,
     "Exceptions raised by host-node callbacks (a list; clear it when handled).", NULL},
    {"parent", (getter)graph_get_parent, NULL,
     "For a conditional body, the graph holding it; else None.", NULL},
    {NULL},
};

static PyMemberDef graph_members[] = {
    {"__weaklistoffset__", T_PYSSIZET, offsetof(pygpu_Graph, weakreflist), READONLY},
    {NULL},
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
    {0, NULL},
};

static PyType_Spec graph_spec = {"pygpu.driver.Graph", sizeof(pygpu_Graph), 0,
                                 Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE | Py_TPFLAGS_HAVE_GC
                                     | Py_TPFLAGS_BASETYPE,
                                 graph_slots};

int
pygpu_graph_setup(PyObject *m, pygpu_state *st)
{
    if (pygpu_add_type(m, &graph_spec, &st->GraphType) < 0 || pygpu_graphnode_setup(m, st) < 0
        || pygpu_graphexec_setup(m, st) < 0)
        return -1;
    return 0;
}
