/* GraphExec: an instantiated, launchable graph (Graph.instantiate()); its
 * release waits for its last launch before the driver handle goes. */
#include "pygpu.h"

#define CF(f) (PyCFunction)(void (*)(void))(f)

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

PyObject *
pygpu_graph_exec_create(pygpu_state *st, pygpu_Graph *g, unsigned long long flags)
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
    if (!PyArg_ParseTupleAndKeywords(args, kwds, launch ? "|O:launch" : "|O:upload", kwlist, &sobj))
        return NULL;
    if (pygpu_captures_active != 0) {
        /* the default stream inside this thread's capture is the capturing
         * one, and a graph launched there would be recorded with its
         * completion event: refused; in another thread, the legacy stream
         * would wait for a blocking capturing stream */
        const char *what = launch ? "GraphExec.launch()" : "GraphExec.upload()";
        if (pygpu_capture_is_default(st, sobj)
            && pygpu_capture_current(e->graph->context) != NULL) {
            PyErr_Format(st->LogicError,
                         "%s: this thread is capturing a graph, and inside "
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
    case CU_GRAPH_EXEC_UPDATE_ERROR_NODE_TYPE_CHANGED: return "a node's type differs";
    case CU_GRAPH_EXEC_UPDATE_ERROR_FUNCTION_CHANGED:
        return "a kernel node's function changed in a way that cannot be updated";
    case CU_GRAPH_EXEC_UPDATE_ERROR_PARAMETERS_CHANGED:
        return "a node's parameters changed in a way that cannot be updated";
    case CU_GRAPH_EXEC_UPDATE_ERROR_NOT_SUPPORTED:
        return "a node's change is not supported by update";
    case CU_GRAPH_EXEC_UPDATE_ERROR_UNSUPPORTED_FUNCTION_CHANGE:
        return "a kernel node changed to or from a kernel that cannot be swapped in";
    case CU_GRAPH_EXEC_UPDATE_ERROR_ATTRIBUTES_CHANGED: return "a node's attributes changed";
    default: return "the driver gave no reason";
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
    if (pygpu_graph_check(st, g) < 0 || exec_enter(st, e, &s) < 0)
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
                     pygpu_graph_node_type_name(((pygpu_GraphNode *)n)->type));
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
        PyErr_Format(PyExc_TypeError,
                     "set_kernel_node_params() takes a GraphNode first, "
                     "not %.100s",
                     nargs < 1 ? "nothing" : Py_TYPE(args[0])->tp_name);
        return NULL;
    }
    n = (pygpu_GraphNode *)args[0];
    if (pygpu_graph_update_kwargs(kwnames, args + nargs, &block, &grid, &shared, &fobj) < 0)
        return NULL;
    if (pygpu_graph_node_check(st, n) < 0 || exec_enter(st, e, &s) < 0)
        return NULL;
    pygpu_scope_exit(&s);
    for (root = n->graph; root->parent != NULL; root = (pygpu_Graph *)root->parent)
        ;
    if (root != e->graph) {
        PyErr_Format(PyExc_ValueError,
                     "set_kernel_node_params(): node #%d is not a node of "
                     "the graph this GraphExec was instantiated from",
                     n->index);
        return NULL;
    }
    if (n->type != CU_GRAPH_NODE_TYPE_KERNEL) {
        PyErr_Format(PyExc_TypeError,
                     "set_kernel_node_params(): node #%d is a %s node, not "
                     "a kernel node",
                     n->index, pygpu_graph_node_type_name(n->type));
        return NULL;
    }
    if (fobj != NULL && fobj != Py_None && !PyObject_TypeCheck(fobj, st->FunctionType)) {
        PyErr_Format(PyExc_TypeError,
                     "set_kernel_node_params(): function must be a "
                     "Function, not %.100s",
                     Py_TYPE(fobj)->tp_name);
        return NULL;
    }
    f = fobj != NULL && fobj != Py_None ? (pygpu_Function *)fobj : n->function;
    if (f == NULL) {
        PyErr_Format(PyExc_TypeError,
                     "set_kernel_node_params(): node #%d was captured; "
                     "pass function= (the kernel it launches) so its arguments can be "
                     "checked",
                     n->index);
        return NULL;
    }
    if (pygpu_function_check(st, f) < 0)
        return NULL;
    if (f->module->context != e->graph->context) {
        PyErr_Format(PyExc_ValueError,
                     "set_kernel_node_params(): node #%d: kernel '%s' "
                     "belongs to another context than the graph; a kernel node cannot "
                     "move between contexts",
                     n->index, pygpu_function_name(f));
        return NULL;
    }
    memset(&cfg, 0, sizeof cfg);
    memset(&p, 0, sizeof p);
    if ((key = PyLong_FromVoidPtr(n->handle)) == NULL)
        return NULL;
    kept = PyDict_GetItemWithError(e->configs, key); /* borrowed */
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
        cfg.block[0] = p.blockDimX;
        cfg.block[1] = p.blockDimY;
        cfg.block[2] = p.blockDimZ;
        cfg.grid[0] = p.gridDimX;
        cfg.grid[1] = p.gridDimY;
        cfg.grid[2] = p.gridDimZ;
        cfg.shared = p.sharedMemBytes;
    }
    if (pygpu_graph_parse_config(st, f, block, grid, shared, &cfg) < 0) {
        pygpu_graph_prefix_error(n->index);
        goto done;
    }
    if (pygpu_graph_pack_node(st, f, args + 1, nargs - 1, n->index, &pack) < 0)
        goto done;
    {
        PyObject *t = pygpu_graph_args_tuple((PyObject *)f, args + 1, nargs - 1), *h = NULL;
        if (t != NULL
            && (h = pygpu_graph_node_holds(st, args + 1, nargs - 1, n->index, "kernel",
                                           pygpu_function_name(f)))
                   == NULL)
            pygpu_graph_prefix_error(n->index);
        if (h != NULL)
            kept = PyTuple_Pack(2, t, h);
        Py_XDECREF(t);
        Py_XDECREF(h);
        if (kept == NULL)
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
    if (exec_enter(st, e, &s) < 0)
        goto done;
    rc = cu.cuGraphExecKernelNodeSetParams(e->handle, n->handle, &p);
    pygpu_scope_exit(&s);
    if (rc != CUDA_SUCCESS) {
        char msg[300];
        snprintf(msg, sizeof msg,
                 "set_kernel_node_params(): the driver refused kernel "
                 "'%s' for node #%d%s%s%s",
                 pygpu_function_name(f), n->index,
                 n->function && n->function != f ? " (it launched '" : "",
                 n->function && n->function != f ? pygpu_function_name(n->function) : "",
                 n->function && n->function != f ? "'; the new kernel is not compatible "
                                                   "with the instantiated node)"
                                                 : "");
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
    {"set_kernel_node_params", CF(exec_set_kernel_node_params), METH_FASTCALL | METH_KEYWORDS,
     "set_kernel_node_params($self, node, /, *args, block=None, grid=None, shared=None, "
     "function=None)\n--\n\nNew arguments (checked as a launch checks them) and "
     "optionally a new configuration or kernel for one kernel node."},
    {NULL},
};

static PyGetSetDef exec_getset[] = {
    {"graph", (getter)exec_get_graph, NULL, "The Graph this was instantiated from.", NULL},
    {"handle", (getter)exec_get_handle, NULL, "The CUgraphExec as an int.", NULL},
    {"callback_errors", (getter)exec_get_errors, NULL,
     "The graph's host-callback exceptions (a list).", NULL},
    {NULL},
};

static PyType_Slot exec_slots[] = {
    {Py_tp_dealloc, exec_dealloc},
    {Py_tp_traverse, exec_traverse},
    {Py_tp_clear, exec_clear},
    {Py_tp_methods, exec_methods},
    {Py_tp_getset, exec_getset},
    {Py_tp_doc, "An instantiated graph (Graph.instantiate()): launch it on a stream."},
    {0, NULL},
};

static PyType_Spec exec_spec = {"pygpu.driver.GraphExec", sizeof(pygpu_GraphExec), 0,
                                Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE | Py_TPFLAGS_HAVE_GC
                                    | Py_TPFLAGS_DISALLOW_INSTANTIATION | Py_TPFLAGS_BASETYPE,
                                exec_slots};

int
pygpu_graphexec_setup(PyObject *m, pygpu_state *st)
{
    return pygpu_add_type(m, &exec_spec, &st->GraphExecType);
}
