/* fork(): CUDA cannot be used in a child forked from a process that has
 * initialised it (the driver's state, threads and mappings do not survive
 * fork).  os.register_at_fork(after_in_child=...) runs the hook below in
 * such a child: the loader then answers every later driver entry with
 * CudaUnavailableError saying why, and every context is marked detached, so
 * launches raise and the objects inherited from the parent are dropped
 * without a driver call.  Nothing is added to the launch path: the checks
 * it already makes (context detached) carry the news.  A child forked
 * before CUDA was initialised may use it. */
#include "pygpu.h"
#include <unistd.h>

int pygpu_forked_from = 0;

static void
mark_detached(pygpu_Context *ctx)
{
    if (ctx != NULL && (!ctx->detached || ctx->release_deferred)) {
        ctx->detached = 3;         /* forked: never touch the driver for it again */
        ctx->release_deferred = 0; /* (the parent's handle: nothing to release here) */
    }
}

static PyObject *
after_fork_child(PyObject *module, PyObject *unused)
{
    pygpu_state *st = PyModule_GetState(module);
    PyObject *key, *value;
    Py_ssize_t pos = 0;
    pygpu_Context *c;
    if (!pygpu_driver_forked())
        Py_RETURN_NONE;
    if (st->primary_contexts != NULL)
        while (PyDict_Next(st->primary_contexts, &pos, &key, &value))
            mark_detached((pygpu_Context *)value);
    pos = 0;
    if (st->foreign_contexts != NULL)
        while (PyDict_Next(st->foreign_contexts, &pos, &key, &value))
            mark_detached((pygpu_Context *)value);
    for (c = st->other_contexts; c != NULL; c = c->next_other)
        mark_detached(c);
    while ((c = st->deferred_contexts) != NULL) { /* detached, waiting for host views */
        st->deferred_contexts = c->next_other;
        c->next_other = NULL;
        mark_detached(c);
    }
    st->last_ctx = NULL;
    st->last_handle = NULL;
    pygpu_context_forget_all(); /* no thread's remembered context holds */
    Py_RETURN_NONE;
}

static PyObject *
forked_from(PyObject *module, PyObject *unused)
{
    if (pygpu_forked_from == 0)
        Py_RETURN_NONE;
    return PyLong_FromLong(pygpu_forked_from);
}

static PyMethodDef fork_methods[] = {
    {"_after_fork_child", after_fork_child, METH_NOARGS, "_after_fork_child($module, /)\n--\n\n"},
    {"forked_from", forked_from, METH_NOARGS,
     "forked_from($module, /)\n--\n\n"
     "The parent's pid when this process was forked from one that had "
     "initialised CUDA (pygpu cannot be used here), else None."},
    {NULL},
};

int
pygpu_fork_setup(PyObject *m, pygpu_state *st)
{
    PyObject *os, *reg, *hook = NULL, *kw = NULL, *empty = NULL, *r = NULL;
    if (PyModule_AddFunctions(m, fork_methods) < 0)
        return -1;
    if ((os = PyImport_ImportModule("os")) == NULL)
        return -1;
    reg = PyObject_GetAttrString(os, "register_at_fork");
    Py_DECREF(os);
    if (reg == NULL) { /* no fork on this platform */
        PyErr_Clear();
        return 0;
    }
    if ((hook = PyObject_GetAttrString(m, "_after_fork_child")) == NULL
        || (kw = Py_BuildValue("{s:O}", "after_in_child", hook)) == NULL
        || (empty = PyTuple_New(0)) == NULL)
        goto error;
    r = PyObject_Call(reg, empty, kw);
error:
    Py_XDECREF(empty);
    Py_XDECREF(kw);
    Py_XDECREF(hook);
    Py_DECREF(reg);
    if (r == NULL)
        return -1;
    Py_DECREF(r);
    return 0;
}
