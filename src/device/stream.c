/* Stream: a CUDA stream owned by this object, or a wrapped foreign one. */
#include "pygpu.h"

static void
stream_release(pygpu_Stream *self)
{
    CUstream h = self->handle;
    pygpu_scope s;
    if (!self->owns || h == NULL) {
        pygpu_stream_capture_drop(self);
        return;
    }
    if (pygpu_scope_enter_quiet(self->context, &s) < 0) {
        self->handle = NULL;
        self->owns = 0;
        pygpu_stream_capture_drop(self);
        return;
    }
    pygpu_stream_capture_abort(self);
    self->handle = NULL;
    self->owns = 0;
    /* the block cache's blocks freed on it go back to the pool first */
    pygpu_blockcache_drop_stream(self->context, h);
    pygpu_capture_stream_dying(h); /* and the frees a capture deferred on it */
    cu.cuStreamDestroy(h);
    pygpu_scope_exit(&s);
}

/* Before any driver call with the handle: LogicError once the stream's
 * context was detached (the handle died with it). */
static int
stream_check(pygpu_Stream *self)
{
    pygpu_state *st = PYGPU_STATE(self);
    if (self->context != NULL && self->context->detached) {
        if (self->context->detached == 3) /* forked: CudaUnavailableError */
            return pygpu_ensure_driver(st);
        PyErr_SetString(st->LogicError, "the context this Stream belongs to was detached");
        return -1;
    }
    if (pygpu_forked_from != 0) /* a null stream, forked */
        return pygpu_ensure_driver(st);
    return 0;
}

int
pygpu_get_stream(pygpu_state *st, PyObject *obj, CUstream *out)
{
    PyObject *r;
    if (obj == NULL || obj == Py_None) {
        *out = NULL;
        return 0;
    }
    if (PyObject_TypeCheck(obj, st->StreamType)) {
        if (stream_check((pygpu_Stream *)obj) < 0)
            return -1;
        *out = ((pygpu_Stream *)obj)->handle;
        return 0;
    }
    if (PyLong_Check(obj) && !PyBool_Check(obj)) {
        /* only the driver's named handles: a raw handle from elsewhere comes
         * in through Stream.from_handle(), where trusting it is explicit */
        long v = PyLong_AsLong(obj);
        if (v == -1 && PyErr_Occurred())
            PyErr_Clear();
        if (v == 0 || v == 1 || v == 2) {
            *out = v == 0 ? NULL : v == 1 ? CU_STREAM_LEGACY : CU_STREAM_PER_THREAD;
            return 0;
        }
        PyErr_Format(PyExc_TypeError,
                     "stream=%R: an int stream must be 0 (the default stream), 1 (legacy) "
                     "or 2 (per-thread); wrap another handle with Stream.from_handle()",
                     obj);
        return -1;
    }
    if (pygpu_getattr_opt(obj, st->str_cuda_stream, &r) < 0)
        return -1;
    if (r != NULL) {
        PyObject *t = PyObject_CallNoArgs(r);
        Py_DECREF(r);
        if (t == NULL)
            return -1;
        if (!PyTuple_Check(t) || PyTuple_GET_SIZE(t) != 2) {
            Py_DECREF(t);
            PyErr_SetString(PyExc_TypeError, "__cuda_stream__() must return (version, handle)");
            return -1;
        }
        *out = (CUstream)PyLong_AsVoidPtr(PyTuple_GET_ITEM(t, 1));
        Py_DECREF(t);
        return PyErr_Occurred() ? -1 : 0;
    }
    PyErr_Format(PyExc_TypeError,
                 "stream must be a pygpu Stream, None, 0/1/2 or an object with "
                 "__cuda_stream__, not %.100s",
                 Py_TYPE(obj)->tp_name);
    return -1;
}

static int
stream_traverse(pygpu_Stream *self, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE(self));
    Py_VISIT(self->owner);
    Py_VISIT(self->capture_keep);
    return 0;
}

static int
stream_clear(pygpu_Stream *self)
{
    Py_CLEAR(self->owner);
    return 0;
}

static void
stream_dealloc(pygpu_Stream *self)
{
    PyTypeObject *tp = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    if (self->weakreflist != NULL)
        PyObject_ClearWeakRefs((PyObject *)self);
    stream_release(self);
    Py_CLEAR(self->owner);
    Py_CLEAR(self->context);
    tp->tp_free((PyObject *)self);
    Py_DECREF(tp);
}

static pygpu_Stream *
stream_alloc(PyTypeObject *tp, CUstream h, pygpu_Context *ctx, int owns, PyObject *owner)
{
    /* tp: StreamType or a subclass; tp_alloc zeroes and tracks */
    pygpu_Stream *self = (pygpu_Stream *)tp->tp_alloc(tp, 0);
    if (self == NULL)
        return NULL;
    self->handle = h;
    self->owns = owns;
    self->weakreflist = NULL;
    self->capture_keep = NULL;
    Py_XINCREF(ctx);
    self->context = ctx;
    Py_XINCREF(owner);
    self->owner = owner;
    return self;
}

PyObject *
pygpu_stream_wrap(pygpu_state *st, CUstream h, pygpu_Context *ctx)
{
    return (PyObject *)stream_alloc(st->StreamType, h, ctx, 1, NULL);
}

static PyObject *
stream_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    pygpu_state *st = pygpu_state_from_type(type);
    static char *kwlist[] = {"flags", "priority", NULL};
    PyObject *fobj = NULL, *pobj = NULL;
    unsigned int flags = 0;
    int priority = 0;
    pygpu_Context *ctx;
    CUstream h;
    CUresult rc;
    pygpu_Stream *self;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|OO:Stream", kwlist, &fobj, &pobj))
        return NULL;
    if ((fobj != NULL && pygpu_parse_uint(fobj, &flags, "Stream(): flags") < 0)
        || (pobj != NULL && pygpu_parse_int(pobj, &priority, "Stream(): priority") < 0))
        return NULL;
    if ((ctx = pygpu_current_context(st)) == NULL)
        return NULL;
    rc = cu.cuStreamCreateWithPriority(&h, flags, priority);
    if (rc != CUDA_SUCCESS)
        return pygpu_cuda_error(st, rc, "cuStreamCreateWithPriority");
    self = stream_alloc(type, h, ctx, 1, NULL);
    if (self == NULL)
        cu.cuStreamDestroy(h);
    return (PyObject *)self;
}

static PyObject *
stream_from_handle(PyObject *cls, PyObject *args, PyObject *kwds)
{
    pygpu_state *st = pygpu_state_from_type((PyTypeObject *)cls);
    static char *kwlist[] = {"handle", "owner", NULL};
    PyObject *hobj, *owner = Py_None;
    CUstream h;
    pygpu_Context *ctx;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O|O:from_handle", kwlist, &hobj, &owner))
        return NULL;
    if (PyLong_Check(hobj) && !PyBool_Check(hobj)) {
        h = (CUstream)PyLong_AsVoidPtr(hobj); /* trusted: the caller vouches */
        if (h == NULL && PyErr_Occurred())
            return NULL;
    } else if (pygpu_get_stream(st, hobj, &h) < 0) {
        return NULL;
    }
    if ((ctx = pygpu_current_context(st)) == NULL)
        return NULL;
    return (PyObject *)stream_alloc((PyTypeObject *)cls, h, ctx, 0,
                                    owner == Py_None ? NULL : owner);
}

static PyObject *
special_stream(PyObject *cls, CUstream h)
{
    pygpu_state *st = pygpu_state_from_type((PyTypeObject *)cls);
    pygpu_Context *ctx = pygpu_current_context(st);
    if (ctx == NULL)
        return NULL;
    return (PyObject *)stream_alloc((PyTypeObject *)cls, h, ctx, 0, NULL);
}

static PyObject *
stream_null(PyObject *cls, PyObject *unused)
{
    return special_stream(cls, CU_STREAM_LEGACY);
}

static PyObject *
stream_per_thread(PyObject *cls, PyObject *unused)
{
    return special_stream(cls, CU_STREAM_PER_THREAD);
}

/* Capture safety: waiting for or querying a stream that pygpu captures
 * would invalidate the capture (CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED): a
 * LogicError before the driver is called, and the capture goes on. */
static int
refuse_while_capturing(pygpu_state *st, pygpu_Stream *self, const char *what)
{
    PyObject *sobj = (PyObject *)self;
    if (pygpu_captures_active == 0)
        return 0;
    if (self->capture_keep != NULL) {
        PyErr_Format(st->LogicError,
                     "%s: this Stream is capturing a graph (its work is "
                     "recorded, not run); end_capture() first, then launch the graph",
                     what);
        return -1;
    }
    /* the legacy stream: inside this thread's capture it means the
     * capturing stream; in another thread it would wait for a blocking
     * capturing stream (graph.c) */
    if (pygpu_capture_default(st, &sobj, 1, what, "synchronize after launching the graph") < 0
        || pygpu_capture_check(st, sobj, 1, what) < 0)
        return -1;
    return 0;
}

static PyObject *
stream_synchronize(pygpu_Stream *self, PyObject *unused)
{
    pygpu_state *st = PYGPU_STATE(self);
    CUresult rc;
    pygpu_scope s = {NULL, 0};
    if (refuse_while_capturing(st, self, "Stream.synchronize()") < 0)
        return NULL;
    if ((self->context == NULL && stream_check(self) < 0)
        || (self->context != NULL && pygpu_scope_enter(st, self->context, &s) < 0))
        return NULL;
    Py_BEGIN_ALLOW_THREADS
        rc = cu.cuStreamSynchronize(self->handle);
    Py_END_ALLOW_THREADS
    pygpu_scope_exit(&s);
    if (rc != CUDA_SUCCESS)
        return pygpu_cuda_error(st, rc, "cuStreamSynchronize");
    Py_RETURN_NONE;
}

static PyObject *
stream_is_done(pygpu_Stream *self, PyObject *unused)
{
    pygpu_state *st = PYGPU_STATE(self);
    CUresult rc;
    if (stream_check(self) < 0 || refuse_while_capturing(st, self, "Stream.is_done()") < 0)
        return NULL;
    rc = cu.cuStreamQuery(self->handle);
    if (rc == CUDA_SUCCESS)
        Py_RETURN_TRUE;
    if (rc == CUDA_ERROR_NOT_READY)
        Py_RETURN_FALSE;
    return pygpu_cuda_error(st, rc, "cuStreamQuery");
}

static PyObject *
stream_wait_for_event(pygpu_Stream *self, PyObject *event)
{
    pygpu_state *st = PYGPU_STATE(self);
    CUresult rc;
    if (!PyObject_TypeCheck(event, st->EventType)) {
        PyErr_Format(PyExc_TypeError, "wait_for_event() takes an Event, not %.100s",
                     Py_TYPE(event)->tp_name);
        return NULL;
    }
    if (stream_check(self) < 0)
        return NULL;
    if (((pygpu_Event *)event)->handle == NULL
        || (((pygpu_Event *)event)->context != NULL && ((pygpu_Event *)event)->context->detached)) {
        PyErr_SetString(st->LogicError, "wait_for_event(): the Event's context was detached");
        return NULL;
    }
    rc = cu.cuStreamWaitEvent(self->handle, ((pygpu_Event *)event)->handle, 0);
    if (rc != CUDA_SUCCESS)
        return pygpu_cuda_error(st, rc, "cuStreamWaitEvent");
    if (pygpu_capture_note(st, (PyObject *)self, event, NULL, 0) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *
stream_cuda_stream(pygpu_Stream *self, PyObject *unused)
{
    return Py_BuildValue("(iN)", 0, PyLong_FromVoidPtr(self->handle));
}

static PyObject *
stream_get_handle(pygpu_Stream *self, void *c)
{
    return PyLong_FromVoidPtr(self->handle);
}

static PyObject *
stream_get_priority(pygpu_Stream *self, void *c)
{
    int prio;
    CUresult rc;
    if (stream_check(self) < 0)
        return NULL;
    rc = cu.cuStreamGetPriority(self->handle, &prio);
    if (rc != CUDA_SUCCESS)
        return pygpu_cuda_error(PYGPU_STATE(self), rc, "cuStreamGetPriority");
    return PyLong_FromLong(prio);
}

static PyObject *
stream_get_flags(pygpu_Stream *self, void *c)
{
    unsigned int flags;
    CUresult rc;
    if (stream_check(self) < 0)
        return NULL;
    rc = cu.cuStreamGetFlags(self->handle, &flags);
    if (rc != CUDA_SUCCESS)
        return pygpu_cuda_error(PYGPU_STATE(self), rc, "cuStreamGetFlags");
    return PyLong_FromUnsignedLong(flags);
}

static PyObject *
stream_repr(pygpu_Stream *self)
{
    const char *kind = self->handle == CU_STREAM_LEGACY || self->handle == NULL
                           ? " (legacy default)"
                       : self->handle == CU_STREAM_PER_THREAD ? " (per-thread default)"
                       : self->owns                           ? ""
                                                              : " (foreign)";
    return PyUnicode_FromFormat("<pygpu.driver.Stream %p%s>", (void *)self->handle, kind);
}

static PyObject *
stream_richcompare(pygpu_Stream *self, PyObject *other, int op)
{
    if (!PyObject_TypeCheck(other, Py_TYPE(self)) || (op != Py_EQ && op != Py_NE))
        Py_RETURN_NOTIMPLEMENTED;
    int eq = self->handle == ((pygpu_Stream *)other)->handle;
    return PyBool_FromLong(op == Py_EQ ? eq : !eq);
}

static Py_hash_t
stream_hash(pygpu_Stream *self)
{
    return (Py_hash_t)((uintptr_t)self->handle >> 3);
}

#define CF(f) (PyCFunction)(void (*)(void))(f)
static PyMethodDef stream_methods[] = {
    {"synchronize", (PyCFunction)stream_synchronize, METH_NOARGS,
     "synchronize($self, /)\n--\n\nWait for the stream's work (GIL released)."},
    {"is_done", (PyCFunction)stream_is_done, METH_NOARGS,
     "is_done($self, /)\n--\n\nWhether all work queued on the stream has finished."},
    {"wait_for_event", (PyCFunction)stream_wait_for_event, METH_O,
     "wait_for_event($self, event, /)\n--\n\nLater work on this stream waits for event."},
    {"from_handle", CF(stream_from_handle), METH_VARARGS | METH_KEYWORDS | METH_CLASS,
     "from_handle($cls, /, handle, owner=None)\n--\n\n"
     "Wrap a stream made elsewhere (int handle or __cuda_stream__ object). Never "
     "destroyed by pygpu; owner is kept alive with the wrapper."},
    {"null", stream_null, METH_NOARGS | METH_CLASS,
     "null($cls, /)\n--\n\nThe legacy default (NULL) stream."},
    {"per_thread", stream_per_thread, METH_NOARGS | METH_CLASS,
     "per_thread($cls, /)\n--\n\nThe per-thread default stream."},
    {"begin_capture", CF(pygpu_stream_begin_capture), METH_VARARGS | METH_KEYWORDS,
     "begin_capture($self, /, mode=0)\n--\n\n"
     "Start recording the work queued on this stream into a graph (nothing runs); "
     "end_capture() returns it.  mode: a capture_mode (0 GLOBAL, 1 THREAD_LOCAL, "
     "2 RELAXED)."},
    {"end_capture", CF(pygpu_stream_end_capture), METH_NOARGS,
     "end_capture($self, /)\n--\n\nStop capturing; returns the Graph (it keeps the "
     "captured launches' functions and arguments alive)."},
    {"is_capturing", CF(pygpu_stream_is_capturing), METH_NOARGS,
     "is_capturing($self, /)\n--\n\nWhether the stream is capturing."},
    {"__cuda_stream__", (PyCFunction)stream_cuda_stream, METH_NOARGS,
     "__cuda_stream__($self, /)\n--\n\n(0, handle): the CUDA stream protocol."},
    {NULL},
};

static PyGetSetDef stream_getset[] = {
    {"handle", (getter)stream_get_handle, NULL, "The CUstream as an int.", NULL},
    {"priority", (getter)stream_get_priority, NULL, "The stream's priority.", NULL},
    {"flags", (getter)stream_get_flags, NULL, "The stream's flags.", NULL},
    {NULL},
};

static PyMemberDef stream_members[] = {
    {"__weaklistoffset__", T_PYSSIZET, offsetof(pygpu_Stream, weakreflist), READONLY},
    {NULL},
};

static PyType_Slot stream_slots[] = {
    {Py_tp_new, stream_new},
    {Py_tp_init, pygpu_init_made},
    {Py_tp_dealloc, stream_dealloc},
    {Py_tp_traverse, stream_traverse},
    {Py_tp_clear, stream_clear},
    {Py_tp_methods, stream_methods},
    {Py_tp_getset, stream_getset},
    {Py_tp_members, stream_members},
    {Py_tp_repr, stream_repr},
    {Py_tp_richcompare, stream_richcompare},
    {Py_tp_hash, stream_hash},
    {Py_tp_doc, "Stream(flags=0, priority=0)\n--\n\n"
                "A CUDA stream in the current context, destroyed when this object dies."},
    {0, NULL},
};

static PyType_Spec stream_spec = {"pygpu.driver.Stream", sizeof(pygpu_Stream), 0,
                                  Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE | Py_TPFLAGS_HAVE_GC
                                      | Py_TPFLAGS_BASETYPE,
                                  stream_slots};

int
pygpu_stream_setup(PyObject *m, pygpu_state *st)
{
    return pygpu_add_type(m, &stream_spec, &st->StreamType);
}
