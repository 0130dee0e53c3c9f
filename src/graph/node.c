/* GraphNode: one node of a Graph (graph.c), as Graph.add_*_node() and
 * Graph.nodes() give it. */
#include "pygpu.h"

#define CF(f) (PyCFunction)(void (*)(void))(f)
#if PY_VERSION_HEX < 0x030A0000
static inline PyObject *Py_XNewRef(PyObject *o) { Py_XINCREF(o); return o; }
#endif

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
        PyErr_Format(PyExc_AttributeError, "node #%d is a %s node; only mem_alloc nodes "
                     "have dptr", n->index, pygpu_graph_node_type_name(n->type));
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

int
pygpu_graphnode_setup(PyObject *m, pygpu_state *st)
{
    return pygpu_add_type(m, &node_spec, &st->GraphNodeType);
}
