/* Stream capture: Stream.begin_capture()/end_capture(), the streams pygpu
 * captures, frees deferred while a capture runs, and the capture-safety
 * checks the copy, launch and allocation paths make (graph.h). */
#include "pygpu.h"

/* The streams that pygpu is capturing, in every thread: while there is
 * none, pygpu_capture_relax() and pygpu_capture_check() cost no driver
 * call.  Process-wide, as the driver's capture state is; changed with the
 * GIL held.  A record is added by begin_capture() and removed when the
 * capture ends (end_capture, abort, drop). */
typedef struct capturing {
    pygpu_Stream *stream;   /* borrowed: removes itself before it dies */
    int blocking;           /* not CU_STREAM_NON_BLOCKING: the legacy stream waits for it */
    unsigned long thread;   /* the thread that began it (PyThread_get_thread_ident) */
    struct capturing *next; /* newest first */
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
    pygpu_Context *context; /* strong */
    PyObject *owner;        /* strong or NULL: the stream object `stream` belongs to */
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

void
pygpu_capture_stream_dying(CUstream h)
{
    deferred_free *d;
    int found = 0;
    for (d = deferred; d != NULL; d = d->next) {
        if (d->stream == h && h != NULL && h != CU_STREAM_LEGACY) {
            d->stream = NULL; /* the legacy stream: the memory is idle by then */
            found = 1;
        }
    }
    if (found) { /* its work on the memory done before the free can run */
        CUstreamCaptureMode m = pygpu_capture_relax();
        (void)cu.cuStreamSynchronize(h);
        pygpu_capture_restore(m);
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
        PyErr_Format(PyExc_ValueError,
                     "begin_capture(): mode must be a capture_mode "
                     "(GLOBAL 0, THREAD_LOCAL 1, RELAXED 2), not %d",
                     mode);
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
    if (pygpu_graph_api_check(st) < 0)
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
            pygpu_stream_capture_abort(self); /* ends it: no record, no capture */
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
    self->capture_keep = NULL; /* ended, whatever the driver says */
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
                                         "stream is no longer capturing"
                                       : NULL);
    }
    g = pygpu_graph_alloc(st, h, self->context, 1, NULL);
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
    if (pygpu_graph_api_check(st) < 0)
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
    if ((t = pygpu_graph_args_tuple(f, args, nargs)) == NULL)
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
        return CU_STREAM_CAPTURE_MODE_RELAXED; /* nothing to restore */
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
        PyErr_Format(st->LogicError,
                     "%s: this thread is capturing a graph, and inside the "
                     "capture the default stream is the capturing stream, whose work is "
                     "recorded, not run: a blocking call cannot wait for it; %s, or call it "
                     "after end_capture()",
                     what, instead != NULL ? instead : "use the _async form (it is captured)");
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
    PyErr_Format(st->LogicError,
                 "kernel '%s': a stream of this context is capturing a "
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
            PyErr_Format(st->LogicError,
                         "%s: a stream of this context is capturing a graph "
                         "(its work is recorded, not run), which this call would wait for "
                         "(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, which would invalidate the "
                         "capture); call it before or after the capture",
                         what);
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

/* The two refusals of capture safety, one wording each (pygpu_capture_check
 * and the gate of the capture classes): a blocking call on a capturing
 * stream; work on the legacy default stream while a blocking stream of the
 * current context captures (the legacy stream waits for it: that is
 * CUDA_ERROR_STREAM_CAPTURE_IMPLICIT, and the driver invalidates the
 * capture).  0, or -1 with the LogicError set.  GIL held. */
static int
refuse_blocking(pygpu_state *st, const char *what)
{
    PyErr_Format(st->LogicError,
                 "%s: the stream is capturing a graph, whose work is recorded, not run: a "
                 "blocking call cannot wait for it; use the _async form (it is captured), or "
                 "call it after end_capture()",
                 what);
    return -1;
}

int
pygpu_capture_legacy_check(pygpu_state *st, pygpu_Context *ctx, const char *what)
{
    capturing *c;
    for (c = captures; c != NULL; c = c->next) {
        if (c->blocking && c->stream->context == ctx) {
            PyErr_Format(st->LogicError,
                         "%s: a stream of this context is capturing a graph, and work on "
                         "the legacy default stream would wait for it "
                         "(CUDA_ERROR_STREAM_CAPTURE_IMPLICIT, which would invalidate the "
                         "capture); pass the capturing stream to the _async form, or call "
                         "it before or after the capture",
                         what);
            return -1;
        }
    }
    return 0;
}

static int
legacy_stream_check(pygpu_state *st, const char *what)
{
    pygpu_Context *ctx = pygpu_current_context(st);
    if (ctx == NULL)
        return -1;
    return pygpu_capture_legacy_check(st, ctx, what);
}

int
pygpu_capture_check(pygpu_state *st, PyObject *sobj, int blocking, const char *what)
{
    if (captures_active == 0)
        return 0;
    if (sobj != NULL && PyObject_TypeCheck(sobj, st->StreamType)) {
        pygpu_Stream *ps = (pygpu_Stream *)sobj;
        if (blocking && ps->capture_keep != NULL)
            return refuse_blocking(st, what);
        if (ps->handle != NULL && ps->handle != CU_STREAM_LEGACY)
            return 0;
    } else if (sobj != NULL && sobj != Py_None
               && !(PyLong_Check(sobj) && (PyLong_AsLong(sobj) == 0 || PyLong_AsLong(sobj) == 1))) {
        PyErr_Clear();
        return 0; /* the per-thread stream, or another library's */
    }
    return legacy_stream_check(st, what);
}

/* The gate of the capture classes STREAM and LEGACY (core/cuda_api.h,
 * pygpu.h's PYGPU_CU_STREAM/PYGPU_CU_LEGACY): work on stream s (NULL or
 * CU_STREAM_LEGACY: the legacy default stream), blocking or not, named
 * `what`, refused as pygpu_capture_check refuses it.  Returns fn, or NULL
 * with the exception set (a LogicError too when the driver lacks the
 * optional entry point `routine`).  One compare while nothing captures.
 * GIL held. */
pygpu_fn
pygpu_capture_gate(pygpu_state *st, CUstream s, int blocking, const char *what, const char *routine,
                   pygpu_fn fn)
{
    capturing *c;
    if (fn == NULL) {
        /* (every caller has loaded the driver: a context is current) */
        if (pygpu_ensure_driver(st) < 0)
            return NULL;
        PyErr_Format(st->LogicError, "%s: the driver has no %s", what, routine);
        return NULL;
    }
    if (captures_active == 0)
        return fn;
    if (s != NULL && s != CU_STREAM_LEGACY) {
        if (blocking)
            for (c = captures; c != NULL; c = c->next)
                if (c->stream->handle == s)
                    return refuse_blocking(st, what) < 0 ? NULL : fn;
        return fn;
    }
    return legacy_stream_check(st, what) < 0 ? NULL : fn;
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
        && cu.cuStreamEndCapture(self->handle, &h) == CUDA_SUCCESS && h != NULL)
        cu.cuGraphDestroy(h);
    capture_ended();
}
