/* Event: a CUDA event, for timing and ordering between streams. */
#include "pygpu.h"

static void
event_release(pygpu_Event *self)
{
    CUevent h = self->handle;
    pygpu_scope s;
    if (h == NULL)
        return;
    self->handle = NULL;
    if (pygpu_scope_enter_quiet(self->context, &s) < 0)
        return;
    cu.cuEventDestroy(h);
    pygpu_scope_exit(&s);
}

static void
event_dealloc(pygpu_Event *self)
{
    PyTypeObject *tp = Py_TYPE(self);
    event_release(self);
    Py_CLEAR(self->context);
    tp->tp_free((PyObject *)self);
    Py_DECREF(tp);
}

static PyObject *
event_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    pygpu_state *st = pygpu_state_from_type(type);
    static char *kwlist[] = {"flags", NULL};
    PyObject *fobj = NULL;
    unsigned int flags = 0;
    pygpu_Context *ctx;
    pygpu_Event *self;
    CUevent h;
    CUresult rc;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|O:Event", kwlist, &fobj))
        return NULL;
    if (fobj != NULL && pygpu_parse_uint(fobj, &flags, "Event(): flags") < 0)
        return NULL;
    if ((ctx = pygpu_current_context(st)) == NULL)
        return NULL;
    rc = cu.cuEventCreate(&h, flags);
    if (rc != CUDA_SUCCESS)
        return pygpu_cuda_error(st, rc, "cuEventCreate");
    self = (pygpu_Event *)type->tp_alloc(type, 0);
    if (self == NULL) {
        cu.cuEventDestroy(h);
        return NULL;
    }
    self->handle = h;
    Py_INCREF(ctx);
    self->context = ctx;
    return (PyObject *)self;
}

static int
check_alive(pygpu_Event *self)
{
    if (self->handle == NULL) {
        PyErr_SetString(PYGPU_STATE(self)->LogicError, "the Event was destroyed");
        return -1;
    }
    if (self->context != NULL && self->context->detached) {
        if (self->context->detached == 3) /* forked: CudaUnavailableError */
            return pygpu_ensure_driver(PYGPU_STATE(self));
        PyErr_SetString(PYGPU_STATE(self)->LogicError,
                        "the context this Event belongs to was detached");
        return -1;
    }
    return 0;
}

static PyObject *
event_record(pygpu_Event *self, PyObject *args, PyObject *kwds)
{
    pygpu_state *st = PYGPU_STATE(self);
    static char *kwlist[] = {"stream", NULL};
    PyObject *sobj = Py_None;
    CUstream s;
    CUresult rc;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|O:record", kwlist, &sobj))
        return NULL;
    if (check_alive(self) < 0
        || (pygpu_captures_active != 0 /* the default stream inside a capture: graph.c */
            && (pygpu_capture_default(st, &sobj, 0, "Event.record()", NULL) < 0
                || pygpu_capture_check(st, sobj, 0, "Event.record()") < 0))
        || pygpu_get_stream(st, sobj, &s) < 0)
        return NULL;
    rc = cu.cuEventRecord(self->handle, s);
    if (rc != CUDA_SUCCESS)
        return pygpu_cuda_error(st, rc, "cuEventRecord");
    if (pygpu_capture_note(st, sobj, (PyObject *)self, NULL, 0) < 0)
        return NULL;
    Py_INCREF(self);
    return (PyObject *)self;
}

static PyObject *
event_synchronize(pygpu_Event *self, PyObject *unused)
{
    pygpu_state *st = PYGPU_STATE(self);
    CUresult rc;
    if (check_alive(self) < 0)
        return NULL;
    Py_BEGIN_ALLOW_THREADS
        rc = cu.cuEventSynchronize(self->handle);
    Py_END_ALLOW_THREADS
    if (rc != CUDA_SUCCESS)
        return pygpu_cuda_error(st, rc, "cuEventSynchronize");
    Py_INCREF(self);
    return (PyObject *)self;
}

static PyObject *
event_query(pygpu_Event *self, PyObject *unused)
{
    CUresult rc;
    if (check_alive(self) < 0)
        return NULL;
    rc = cu.cuEventQuery(self->handle);
    if (rc == CUDA_SUCCESS)
        Py_RETURN_TRUE;
    if (rc == CUDA_ERROR_NOT_READY)
        Py_RETURN_FALSE;
    return pygpu_cuda_error(PYGPU_STATE(self), rc, "cuEventQuery");
}

static PyObject *
elapsed(pygpu_Event *start, PyObject *end_obj, pygpu_Event *self)
{
    pygpu_state *st = PYGPU_STATE(self);
    float ms;
    CUresult rc;
    pygpu_Event *end = (pygpu_Event *)end_obj;
    if (check_alive(start) < 0 || check_alive(end) < 0)
        return NULL;
    rc = cu.cuEventElapsedTime(&ms, start->handle, end->handle);
    if (rc != CUDA_SUCCESS)
        return pygpu_cuda_error(st, rc, "cuEventElapsedTime");
    return PyFloat_FromDouble(ms);
}

static PyObject *
event_time_since(pygpu_Event *self, PyObject *other)
{
    if (!PyObject_TypeCheck(other, PYGPU_STATE(self)->EventType)) {
        PyErr_SetString(PyExc_TypeError, "time_since() takes an Event");
        return NULL;
    }
    return elapsed((pygpu_Event *)other, (PyObject *)self, self);
}

static PyObject *
event_time_till(pygpu_Event *self, PyObject *other)
{
    if (!PyObject_TypeCheck(other, PYGPU_STATE(self)->EventType)) {
        PyErr_SetString(PyExc_TypeError, "time_till() takes an Event");
        return NULL;
    }
    return elapsed(self, other, self);
}

static PyObject *
event_get_handle(pygpu_Event *self, void *c)
{
    return PyLong_FromVoidPtr(self->handle);
}

/* ---- IPC (PyCUDA's names): the event must have been made with
 * event_flags.INTERPROCESS | DISABLE_TIMING ---- */
int pygpu_ipc_handle_bytes(PyObject *obj, void *out, size_t n, const char *what);

static PyObject *
event_ipc_handle(pygpu_Event *self, PyObject *unused)
{
    pygpu_state *st = PYGPU_STATE(self);
    CUipcEventHandle h;
    CUresult rc;
    if (check_alive(self) < 0
        || pygpu_need_entry(st, (void *)cu.cuIpcGetEventHandle, "cuIpcGetEventHandle",
                            "Event.ipc_handle()")
               < 0)
        return NULL;
    rc = cu.cuIpcGetEventHandle(&h, self->handle);
    if (rc != CUDA_SUCCESS)
        return pygpu_cuda_error_ex(st, rc, "cuIpcGetEventHandle",
                                   "an event shared between processes is made with "
                                   "Event(flags=event_flags.INTERPROCESS | "
                                   "event_flags.DISABLE_TIMING)");
    return PyByteArray_FromStringAndSize((const char *)&h, sizeof h);
}

static PyObject *
event_from_ipc_handle(PyObject *cls, PyObject *arg)
{
    PyTypeObject *type = (PyTypeObject *)cls;
    pygpu_state *st = pygpu_state_from_type(type);
    CUipcEventHandle h;
    pygpu_Context *ctx;
    pygpu_Event *self;
    CUevent ev;
    CUresult rc;
    if (pygpu_ipc_handle_bytes(arg, &h, sizeof h, "Event.from_ipc_handle()") < 0
        || (ctx = pygpu_current_context(st)) == NULL
        || pygpu_need_entry(st, (void *)cu.cuIpcOpenEventHandle, "cuIpcOpenEventHandle",
                            "Event.from_ipc_handle()")
               < 0)
        return NULL;
    rc = cu.cuIpcOpenEventHandle(&ev, h);
    if (rc != CUDA_SUCCESS)
        return pygpu_cuda_error_ex(st, rc, "cuIpcOpenEventHandle",
                                   "the handle may be invalid or its event destroyed, "
                                   "or the exporting process may have exited");
    self = (pygpu_Event *)type->tp_alloc(type, 0); /* cls: a subclass gives its own */
    if (self == NULL) {
        cu.cuEventDestroy(ev);
        return NULL;
    }
    self->handle = ev;
    Py_INCREF(ctx);
    self->context = ctx;
    return (PyObject *)self;
}

#define CF(f) (PyCFunction)(void (*)(void))(f)
static PyMethodDef event_methods[] = {
    {"ipc_handle", (PyCFunction)event_ipc_handle, METH_NOARGS,
     "ipc_handle($self, /)\n--\n\nThe event's IPC handle: a bytearray of 64 bytes (it "
     "pickles), opened in another process by Event.from_ipc_handle(). The event "
     "must be made with flags=event_flags.INTERPROCESS | event_flags.DISABLE_TIMING."},
    {"from_ipc_handle", (PyCFunction)event_from_ipc_handle, METH_O | METH_CLASS,
     "from_ipc_handle($type, handle, /)\n--\n\nOpen another process's event from "
     "the bytes of its ipc_handle(), in the current context."},
    {"record", CF(event_record), METH_VARARGS | METH_KEYWORDS,
     "record($self, /, stream=None)\n--\n\nRecord the event on a stream; returns self."},
    {"synchronize", (PyCFunction)event_synchronize, METH_NOARGS,
     "synchronize($self, /)\n--\n\nWait for the event (GIL released); returns self."},
    {"query", (PyCFunction)event_query, METH_NOARGS,
     "query($self, /)\n--\n\nWhether the event has completed."},
    {"time_since", (PyCFunction)event_time_since, METH_O,
     "time_since($self, event, /)\n--\n\nMilliseconds from event to self."},
    {"time_till", (PyCFunction)event_time_till, METH_O,
     "time_till($self, event, /)\n--\n\nMilliseconds from self to event."},
    {NULL},
};

static PyGetSetDef event_getset[] = {
    {"handle", (getter)event_get_handle, NULL, "The CUevent as an int.", NULL},
    {NULL},
};

static PyType_Slot event_slots[] = {
    {Py_tp_new, event_new},
    {Py_tp_init, pygpu_init_made},
    {Py_tp_dealloc, event_dealloc},
    {Py_tp_methods, event_methods},
    {Py_tp_getset, event_getset},
    {Py_tp_doc, "Event(flags=0)\n--\n\nA CUDA event in the current context."},
    {0, NULL},
};

static PyType_Spec event_spec = {
    "pygpu.driver.Event", sizeof(pygpu_Event), 0,
    Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE | Py_TPFLAGS_BASETYPE, event_slots};

int
pygpu_event_setup(PyObject *m, pygpu_state *st)
{
    return pygpu_add_type(m, &event_spec, &st->EventType);
}
