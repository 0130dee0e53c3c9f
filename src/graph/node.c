/* GraphNode: one node of a Graph (graph.c), as Graph.add_*_node() and
 * Graph.nodes() give it. */
#include "pygpu.h"

#define CF(f) (PyCFunction)(void (*)(void))(f)
PyObject *
pygpu_graph_node_wrap(pygpu_state *st, pygpu_Graph *g, CUgraphNode h, int type)
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
int
pygpu_graph_parse_deps(pygpu_state *st, pygpu_Graph *g, PyObject *deps, CUgraphNode **out,
                       size_t *n, const char *what)
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
        PyErr_Format(PyExc_TypeError,
                     "%s: dependencies must be a GraphNode or a sequence "
                     "of GraphNodes, not %.100s",
                     what, Py_TYPE(deps)->tp_name);
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
            PyErr_Format(PyExc_TypeError,
                         "%s: dependencies[%zd] must be a GraphNode, not "
                         "%.100s",
                         what, i, Py_TYPE(d)->tp_name);
            goto error;
        }
        if (((pygpu_GraphNode *)d)->graph != g) {
            PyErr_Format(PyExc_ValueError,
                         "%s: dependencies[%zd] (node #%d) belongs to "
                         "another graph",
                         what, i, ((pygpu_GraphNode *)d)->index);
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

int
pygpu_graph_node_check(pygpu_state *st, pygpu_GraphNode *n)
{
    if (n->graph == NULL) {
        PyErr_SetString(st->LogicError, "this GraphNode's graph is gone");
        return -1;
    }
    return pygpu_graph_check(st, n->graph);
}

static PyObject *
node_get_dependencies(pygpu_GraphNode *n, void *c)
{
    pygpu_state *st = PYGPU_STATE(n);
    size_t k = 0, i;
    CUgraphNode *hs = NULL;
    PyObject *list = NULL;
    CUresult rc;
    if (pygpu_graph_node_check(st, n) < 0)
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
        PyObject *d = pygpu_graph_node_wrap(st, n->graph, hs[i], -1);
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
    return PyUnicode_FromString(pygpu_graph_node_type_name(n->type));
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
        PyErr_Format(PyExc_AttributeError,
                     "node #%d is a %s node; only mem_alloc nodes "
                     "have dptr",
                     n->index, pygpu_graph_node_type_name(n->type));
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
                                pygpu_graph_node_type_name(n->type));
}

static PyGetSetDef node_getset[] = {
    {"dependencies", (getter)node_get_dependencies, NULL,
     "The nodes this node depends on (a list).", NULL},
    {"type", (getter)node_get_type, NULL, "The CUgraphNodeType (graph_node_type).", NULL},
    {"kind", (getter)node_get_kind, NULL,
     "The type's name: 'kernel', 'memcpy', 'memset', 'host', 'graph', 'empty', "
     "'wait_event', 'event_record', 'mem_alloc', 'mem_free', 'conditional'.",
     NULL},
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
    {NULL},
};

static PyType_Slot node_slots[] = {
    {Py_tp_dealloc, node_dealloc},
    {Py_tp_traverse, node_traverse},
    {Py_tp_clear, node_clear},
    {Py_tp_getset, node_getset},
    {Py_tp_repr, node_repr},
    {Py_nb_int, node_int},
    {Py_tp_doc, "A node of a Graph; pass it in another node's dependencies."},
    {0, NULL},
};

static PyType_Spec node_spec = {"pygpu.driver.GraphNode", sizeof(pygpu_GraphNode), 0,
                                Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE | Py_TPFLAGS_HAVE_GC
                                    | Py_TPFLAGS_DISALLOW_INSTANTIATION | Py_TPFLAGS_BASETYPE,
                                node_slots};

int
pygpu_graphnode_setup(PyObject *m, pygpu_state *st)
{
    return pygpu_add_type(m, &node_spec, &st->GraphNodeType);
}
