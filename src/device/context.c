/* Context: a CUDA context, primary (the default) or created (PyCUDA style).
 *
 * One Context object exists per primary context, kept in the module state
 * until teardown; contexts from make_context() or from a foreign handle are
 * found through a borrowed list.  Every dependent object holds a strong
 * reference to its Context.
 */
#include "pygpu.h"
#include <stdlib.h>

/* ---- the current context, known without asking the driver ----
 *
 * Each thread remembers the context it last saw current (docs/contexts.md:
 * "The current context"): the handle, and the Context object for it in one
 * module state.  pygpu's own push/pop/make_context/set-current keep it
 * right; Context.get_current() always asks the driver and refreshes it; a
 * driver call failing with CUDA_ERROR_INVALID_CONTEXT or
 * CUDA_ERROR_CONTEXT_IS_DESTROYED forgets it (errors.c).  It is valid only
 * while `gen` equals pygpu_context_generation, which goes up whenever any
 * context is detached, released or dies (in any thread), so a borrowed
 * Context pointer here never outlives its object.  Code outside pygpu that
 * changes this thread's current context must call Context.get_current()
 * (or use pygpu's push/pop) before pygpu's next call on the thread. */
typedef struct {
    unsigned long gen;  /* pygpu_context_generation when filled; 0: unknown */
    CUcontext handle;   /* the current handle (NULL: none) */
    pygpu_state *st;    /* the module state ctx belongs to, or NULL */
    pygpu_Context *ctx; /* borrowed: handle's Context in st, or NULL (not looked up) */
} current_cache;

static _Thread_local current_cache tl_current;
/* bumped (GIL held) when any context is detached, released or deallocated */
static unsigned long context_generation = 1;

static inline unsigned long
generation(void)
{
    return __atomic_load_n(&context_generation, __ATOMIC_ACQUIRE);
}

void
pygpu_context_forget_all(void)
{
    unsigned long g = __atomic_add_fetch(&context_generation, 1, __ATOMIC_ACQ_REL);
    if (g == 0) /* wrapped: 0 means "unknown" */
        __atomic_store_n(&context_generation, 1, __ATOMIC_RELEASE);
}

void
pygpu_context_forget_current(void)
{
    tl_current.gen = 0;
}

/* Remember that h (ctx in st, or ctx NULL: not looked up) is current. */
static void
remember_current(CUcontext h, pygpu_state *st, pygpu_Context *ctx)
{
    tl_current.gen = generation();
    tl_current.handle = h;
    tl_current.st = st;
    tl_current.ctx = ctx;
}

/* 1 and *h when this thread's current handle is known, else 0. */
static inline int
known_current(CUcontext *h)
{
    if (tl_current.gen == 0 || tl_current.gen != generation())
        return 0;
    *h = tl_current.handle;
    return 1;
}

/* Ask the driver for this thread's current handle and remember it. */
static CUresult
ask_current(CUcontext *h)
{
    CUresult rc = cu.cuCtxGetCurrent(h);
    if (rc == CUDA_SUCCESS)
        remember_current(*h, NULL, NULL);
    else
        tl_current.gen = 0;
    return rc;
}

CUcontext
pygpu_context_save(void)
{
    CUcontext h = NULL, known = NULL;
    if (cu.cuCtxGetCurrent == NULL) /* no driver loaded: nothing is current */
        return NULL;
    /* the driver's answer, not the remembered one: another library may
     * have changed the context since pygpu last looked, and restore must
     * not put back pygpu's stale belief */
    if (cu.cuCtxGetCurrent(&h) != CUDA_SUCCESS) {
        tl_current.gen = 0;
        return NULL;
    }
    if (!known_current(&known) || known != h)
        remember_current(h, NULL, NULL);
    return h;
}

CUcontext
pygpu_context_restore(CUcontext before)
{
    CUcontext now = before;
    if (cu.cuCtxGetCurrent == NULL)
        return NULL;
    if (cu.cuCtxGetCurrent(&now) != CUDA_SUCCESS) {
        tl_current.gen = 0;
        return NULL;
    }
    if (now != before) {
        CUcontext known = NULL;
        if (cu.cuCtxSetCurrent(before) != CUDA_SUCCESS)
            tl_current.gen = 0;
        else if (!known_current(&known) || known != before)
            remember_current(before, NULL, NULL);
        /* else: the remembered answer (and its Context) is right again */
    }
    return now;
}

int
pygpu_context_is_current(pygpu_Context *ctx)
{
    CUcontext h = NULL;
    if (!known_current(&h) && ask_current(&h) != CUDA_SUCCESS)
        return 0;
    return h == ctx->handle;
}

int
pygpu_context_recheck(pygpu_Context *ctx)
{
    CUcontext h = NULL;
    int was_known = known_current(&h) && h == ctx->handle;
    if (!was_known)
        return 0;
    if (ask_current(&h) != CUDA_SUCCESS)
        return 0;
    return h != ctx->handle;
}

static pygpu_Context *
context_alloc_as(pygpu_state *st, PyTypeObject *tp, CUcontext h, int ordinal, int is_primary,
                 int owns)
{
    pygpu_Context *self;
    PyObject *dev = pygpu_device_new(st, ordinal);
    if (dev == NULL)
        return NULL;
    self = PyObject_New(pygpu_Context, tp);
    if (self == NULL) {
        Py_DECREF(dev);
        return NULL;
    }
    self->handle = h;
    self->device = dev;
    self->ordinal = ordinal;
    self->is_primary = is_primary;
    self->owns = owns;
    self->detached = 0;
    self->next_other = NULL;
    self->limits_read = 0;
    self->pool_configured = 0;
    self->staging = NULL;
    self->weakreflist = NULL;
    self->allocations = NULL;
    self->arrays_busy = 0;
    self->host_allocs = 0;
    self->release_deferred = 0;
    self->blocks = NULL;
    self->green = NULL;
    if (!is_primary) {
        self->next_other = st->other_contexts;
        st->other_contexts = self;
    }
    return self;
}

static pygpu_Context *
context_alloc(pygpu_state *st, CUcontext h, int ordinal, int is_primary, int owns)
{
    return context_alloc_as(st, st->ContextType, h, ordinal, is_primary, owns);
}

pygpu_Context *
pygpu_context_new_as(pygpu_state *st, PyTypeObject *tp, CUcontext h, int ordinal)
{
    return context_alloc_as(st, tp, h, ordinal, 0, 1);
}

static void
unlink_from(pygpu_Context **list, pygpu_Context *ctx)
{
    pygpu_Context **p;
    for (p = list; *p != NULL; p = &(*p)->next_other) {
        if (*p == ctx) {
            *p = ctx->next_other;
            break;
        }
    }
    ctx->next_other = NULL;
}

static void
unlink_other(pygpu_state *st, pygpu_Context *ctx)
{
    unlink_from(&st->other_contexts, ctx);
}

/* Give the handle back: destroy a created context, release a primary one.
 * Idempotent, never raises; returns the CUresult of the call. */
static CUresult
context_release_handle(pygpu_Context *self)
{
    CUresult rc = CUDA_SUCCESS;
    if (!self->owns || cu.cuCtxGetCurrent == NULL)
        return rc;
    if (self->blocks != NULL) {
        /* the block cache's memory goes back to the pool while the context
         * lives (not a pygpu_scope: the context is already marked detached) */
        int pushed = 0;
        if (pygpu_context_enter(self, &pushed) == CUDA_SUCCESS) {
            pygpu_blockcache_release(self);
            pygpu_context_exit(pushed);
        }
    }
    if (self->staging != NULL) {
        /* not a pygpu_scope: the context is already marked detached */
        int pushed = 0;
        if (pygpu_context_enter(self, &pushed) == CUDA_SUCCESS) {
            pygpu_staging_free(self);
            pygpu_context_exit(pushed);
        }
    }
    if (self->is_primary) {
        CUdevice dev;
        if (cu.cuDeviceGet(&dev, self->ordinal) == CUDA_SUCCESS)
            rc = cu.cuDevicePrimaryCtxRelease(dev);
    } else if (self->green != NULL) {
        rc = cu.cuGreenCtxDestroy(self->green);
        self->green = NULL;
    } else {
        rc = cu.cuCtxDestroy(self->handle);
    }
    return rc;
}

static CUresult
context_release(pygpu_Context *self)
{
    if (self->detached)
        return CUDA_SUCCESS;
    self->detached = 1;
    pygpu_context_forget_all();
    return context_release_handle(self);
}

void
pygpu_context_release_deferred(pygpu_Context *ctx)
{
    pygpu_state *st;
    if (!ctx->release_deferred)
        return;
    ctx->release_deferred = 0;
    if ((st = PYGPU_STATE(ctx)) != NULL)
        unlink_from(&st->deferred_contexts, ctx);
    (void)context_release_handle(ctx);
}

static void
context_forget(pygpu_state *st, pygpu_Context *self)
{
    pygpu_context_forget_all();
    if (st == NULL)
        return;
    if (st->last_ctx == self) {
        st->last_ctx = NULL;
        st->last_handle = NULL;
    }
    if (!self->is_primary)
        unlink_other(st, self);
}

static void
context_dealloc(pygpu_Context *self)
{
    PyTypeObject *tp = Py_TYPE(self);
    pygpu_state *st = PYGPU_STATE(self);
    if (self->weakreflist != NULL)
        PyObject_ClearWeakRefs((PyObject *)self);
    context_forget(st, self);
    pygpu_context_release_deferred(self); /* (its host views held it: all gone now) */
    (void)context_release(self);
    pygpu_blockcache_drop(self); /* what release could not give back (forked, gone) */
    Py_CLEAR(self->device);
    tp->tp_free((PyObject *)self);
    Py_DECREF(tp);
}

static pygpu_Context *
get_primary(pygpu_state *st, int ordinal)
{
    PyObject *key = PyLong_FromLong(ordinal), *found;
    pygpu_Context *ctx;
    CUdevice dev;
    CUcontext h;
    CUresult rc;
    if (key == NULL)
        return NULL;
    found = PyDict_GetItemWithError(st->primary_contexts, key);
    if (found != NULL) {
        Py_DECREF(key);
        return (pygpu_Context *)found;
    }
    if (PyErr_Occurred())
        goto error;
    if ((rc = cu.cuDeviceGet(&dev, ordinal)) != CUDA_SUCCESS) {
        pygpu_cuda_error(st, rc, "cuDeviceGet");
        goto error;
    }
    if ((rc = cu.cuDevicePrimaryCtxRetain(&h, dev)) != CUDA_SUCCESS) {
        pygpu_cuda_error(st, rc, "cuDevicePrimaryCtxRetain");
        goto error;
    }
    ctx = context_alloc(st, h, ordinal, 1, 1);
    if (ctx == NULL) {
        cu.cuDevicePrimaryCtxRelease(dev);
        goto error;
    }
    if (PyDict_SetItem(st->primary_contexts, key, (PyObject *)ctx) < 0) {
        Py_DECREF(ctx);
        goto error;
    }
    Py_DECREF(ctx); /* the dict holds it */
    Py_DECREF(key);
    return ctx;
error:
    Py_DECREF(key);
    return NULL;
}

static int
default_ordinal(void)
{
    const char *env = getenv("PYGPU_DEVICE");
    if (env == NULL || *env == '\0')
        return 0;
    return atoi(env);
}

/* The Context object for handle h (borrowed), creating a wrapper for a
 * primary context retained elsewhere or for a foreign context.  GIL held. */
pygpu_Context *
pygpu_context_for_handle(pygpu_state *st, CUcontext h)
{
    Py_ssize_t pos = 0;
    PyObject *k, *v;
    pygpu_Context *c;
    CUdevice dev;
    CUcontext prim;
    CUresult rc;
    int ordinal, count, i;

    if (h == st->last_handle && st->last_ctx != NULL)
        return st->last_ctx;
    while (PyDict_Next(st->primary_contexts, &pos, &k, &v)) {
        c = (pygpu_Context *)v;
        if (c->handle == h && !c->detached)
            goto found;
    }
    for (c = st->other_contexts; c != NULL; c = c->next_other)
        if (c->handle == h && !c->detached)
            goto found;
    for (c = st->deferred_contexts; c != NULL; c = c->next_other) {
        if (c->handle == h && !c->is_primary) {
            /* (a primary context is still the device's: the lookup below
             * gives it a live Context) */
            PyErr_SetString(st->LogicError,
                            "the current context was detached (its release waits for its "
                            "page-locked or managed arrays): pop it, or make another "
                            "context current");
            return NULL;
        }
    }
    /* unknown: which device is it on? */
    if ((rc = cu.cuCtxGetDevice(&dev)) != CUDA_SUCCESS) {
        pygpu_cuda_error(st, rc, "cuCtxGetDevice");
        return NULL;
    }
    if ((rc = cu.cuDeviceGetCount(&count)) != CUDA_SUCCESS) {
        pygpu_cuda_error(st, rc, "cuDeviceGetCount");
        return NULL;
    }
    ordinal = 0;
    for (i = 0; i < count; i++) {
        CUdevice d;
        if (cu.cuDeviceGet(&d, i) == CUDA_SUCCESS && d == dev) {
            ordinal = i;
            break;
        }
    }
    if ((rc = cu.cuDevicePrimaryCtxRetain(&prim, dev)) != CUDA_SUCCESS) {
        pygpu_cuda_error(st, rc, "cuDevicePrimaryCtxRetain");
        return NULL;
    }
    cu.cuDevicePrimaryCtxRelease(dev);
    if (prim == h) {
        c = get_primary(st, ordinal);
        if (c == NULL)
            return NULL;
    } else {
        /* someone else's context: wrap it, never destroy it; the state's
         * foreign_contexts dict keeps the wrapper */
        PyObject *key = PyLong_FromVoidPtr(h);
        if (key == NULL)
            return NULL;
        c = context_alloc(st, h, ordinal, 0, 0);
        if (c == NULL || PyDict_SetItem(st->foreign_contexts, key, (PyObject *)c) < 0) {
            Py_XDECREF(c);
            Py_DECREF(key);
            return NULL;
        }
        Py_DECREF(key);
        Py_DECREF(c);
    }
found:
    st->last_handle = h;
    st->last_ctx = c;
    return c;
}

/* The current thread's context (borrowed), making the default device's
 * primary context current if the thread has none.  Asks the driver (the
 * paths that make something in the current context: the answer must be
 * the driver's) and remembers the answer for pygpu_current_context_known.
 * GIL held. */
pygpu_Context *
pygpu_current_context(pygpu_state *st)
{
    CUcontext h = NULL;
    CUresult rc;
    pygpu_Context *ctx;
    if (pygpu_ensure_driver(st) < 0)
        return NULL;
    if ((rc = ask_current(&h)) != CUDA_SUCCESS) {
        pygpu_cuda_error(st, rc, "cuCtxGetCurrent");
        return NULL;
    }
    if (h == NULL) {
        int ordinal = default_ordinal(), count;
        if ((rc = cu.cuDeviceGetCount(&count)) != CUDA_SUCCESS) {
            pygpu_cuda_error(st, rc, "cuDeviceGetCount");
            return NULL;
        }
        if (ordinal < 0 || ordinal >= count) {
            PyErr_Format(st->CudaUnavailableError,
                         "PYGPU_DEVICE=%d names no device: %d device%s visible", ordinal, count,
                         count == 1 ? " is" : "s are");
            return NULL;
        }
        ctx = get_primary(st, ordinal);
        if (ctx == NULL)
            return NULL;
        if ((rc = cu.cuCtxSetCurrent(ctx->handle)) != CUDA_SUCCESS) {
            pygpu_cuda_error(st, rc, "cuCtxSetCurrent");
            return NULL;
        }
        st->last_handle = ctx->handle;
        st->last_ctx = ctx;
        remember_current(ctx->handle, st, ctx);
        return ctx;
    }
    ctx = pygpu_context_for_handle(st, h);
    if (ctx != NULL && known_current(&h) && h == ctx->handle)
        remember_current(h, st, ctx); /* (the lookup made no context die) */
    return ctx;
}

pygpu_Context *
pygpu_current_context_known(pygpu_state *st)
{
    CUcontext h = NULL;
    if (known_current(&h) && h != NULL && tl_current.st == st && tl_current.ctx != NULL
        && pygpu_ensure_driver(st) == 0)
        return tl_current.ctx;
    if (PyErr_Occurred())
        return NULL;
    return pygpu_current_context(st);
}

PyObject *
pygpu_current_context_or_none(pygpu_state *st)
{
    CUcontext h = NULL;
    CUresult rc;
    pygpu_Context *ctx;
    if (known_current(&h)) {
        if (h == NULL)
            Py_RETURN_NONE;
        if (tl_current.st == st && tl_current.ctx != NULL)
            return Py_NewRef((PyObject *)tl_current.ctx);
    } else {
        if (pygpu_ensure_driver(st) < 0)
            return NULL;
        if ((rc = ask_current(&h)) != CUDA_SUCCESS)
            return pygpu_cuda_error(st, rc, "cuCtxGetCurrent");
        if (h == NULL)
            Py_RETURN_NONE;
    }
    ctx = pygpu_context_for_handle(st, h);
    if (ctx == NULL)
        return NULL;
    if (known_current(&h) && h == ctx->handle)
        remember_current(h, st, ctx);
    return Py_NewRef((PyObject *)ctx);
}

int
pygpu_context_check(pygpu_state *st, pygpu_Context *ctx)
{
    if (ctx->detached) {
        if (ctx->detached == 3)
            pygpu_ensure_driver(st); /* CudaUnavailableError: forked */
        else
            PyErr_SetString(st->LogicError, "the context this object belongs to was detached");
        return -1;
    }
    return 0;
}

CUresult
pygpu_context_enter(pygpu_Context *ctx, int *pushed)
{
    CUcontext cur = NULL;
    CUresult rc;
    *pushed = 0;
    if (known_current(&cur)) {
        if (cur == ctx->handle)
            return CUDA_SUCCESS;
    } else {
        rc = ask_current(&cur);
        if (rc != CUDA_SUCCESS || cur == ctx->handle)
            return rc;
    }
    rc = cu.cuCtxPushCurrent(ctx->handle);
    if (rc == CUDA_SUCCESS) {
        *pushed = 1;
        remember_current(ctx->handle, NULL, NULL);
    } else {
        tl_current.gen = 0;
    }
    return rc;
}

int
pygpu_scope_enter(pygpu_state *st, pygpu_Context *ctx, pygpu_scope *s)
{
    CUresult rc;
    s->ctx = NULL;
    s->pushed = 0;
    if (pygpu_context_check(st, ctx) < 0)
        return -1;
    rc = pygpu_context_enter(ctx, &s->pushed);
    if (rc != CUDA_SUCCESS) {
        pygpu_cuda_error(st, rc, "cuCtxPushCurrent");
        return -1;
    }
    Py_INCREF(ctx);
    s->ctx = ctx;
    return 0;
}

int
pygpu_scope_enter_quiet(pygpu_Context *ctx, pygpu_scope *s)
{
    s->ctx = NULL;
    s->pushed = 0;
    if (ctx == NULL || ctx->detached || cu.cuCtxGetCurrent == NULL
        || pygpu_context_enter(ctx, &s->pushed) != CUDA_SUCCESS)
        return -1;
    Py_INCREF(ctx);
    s->ctx = ctx;
    return 0;
}

void
pygpu_scope_exit(pygpu_scope *s)
{
    pygpu_context_exit(s->pushed);
    s->pushed = 0;
    Py_CLEAR(s->ctx);
}

void
pygpu_context_exit(int pushed)
{
    CUcontext dummy;
    if (pushed) {
        cu.cuCtxPopCurrent(&dummy);
        tl_current.gen = 0; /* what is current below: asked when needed */
    }
}

int
pygpu_context_read_limits(pygpu_state *st, pygpu_Context *ctx)
{
    static const CUdevice_attribute attrs[8] = {
        CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X,
        CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y,
        CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z,
        CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X,
        CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y,
        CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z,
        CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK,
        CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN};
    int vals[8], i;
    CUdevice dev;
    CUresult rc = cu.cuDeviceGet(&dev, ctx->ordinal);
    if (rc != CUDA_SUCCESS) {
        pygpu_cuda_error(st, rc, "cuDeviceGet");
        return -1;
    }
    for (i = 0; i < 8; i++) {
        rc = cu.cuDeviceGetAttribute(&vals[i], attrs[i], dev);
        if (rc != CUDA_SUCCESS) {
            pygpu_cuda_error(st, rc, "cuDeviceGetAttribute");
            return -1;
        }
    }
    for (i = 0; i < 3; i++) {
        ctx->max_block[i] = vals[i];
        ctx->max_grid[i] = vals[3 + i];
    }
    ctx->max_threads = vals[6];
    ctx->max_shared_optin = vals[7];
    ctx->limits_read = 1;
    return 0;
}

/* ---- Device methods that make contexts ---- */

PyObject *
pygpu_device_retain_primary(pygpu_Device *self, PyObject *unused)
{
    pygpu_state *st = PYGPU_STATE(self);
    pygpu_Context *ctx = get_primary(st, self->ordinal);
    if (ctx == NULL)
        return NULL;
    Py_INCREF(ctx);
    return (PyObject *)ctx;
}

PyObject *
pygpu_device_make_context(pygpu_Device *self, PyObject *args, PyObject *kwds)
{
    pygpu_state *st = PYGPU_STATE(self);
    static char *kwlist[] = {"flags", NULL};
    PyObject *fobj = NULL;
    unsigned int flags = 0;
    CUcontext h;
    CUresult rc;
    pygpu_Context *ctx;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|O:make_context", kwlist, &fobj))
        return NULL;
    if (fobj != NULL && pygpu_parse_uint(fobj, &flags, "make_context(): flags") < 0)
        return NULL;
    Py_BEGIN_ALLOW_THREADS
        rc = cu.cuCtxCreate(&h, flags, self->handle);
    Py_END_ALLOW_THREADS
    if (rc != CUDA_SUCCESS)
        return pygpu_cuda_error(st, rc, "cuCtxCreate");
    ctx = context_alloc(st, h, self->ordinal, 0, 1);
    if (ctx == NULL) {
        cu.cuCtxDestroy(h);
        tl_current.gen = 0;
        return NULL;
    }
    remember_current(h, st, ctx); /* cuCtxCreate pushed it */
    return (PyObject *)ctx;
}

/* ---- Context methods ---- */

static PyObject *
context_push(pygpu_Context *self, PyObject *unused)
{
    pygpu_state *st = PYGPU_STATE(self);
    CUresult rc;
    if (pygpu_context_check(st, self) < 0)
        return NULL;
    rc = cu.cuCtxPushCurrent(self->handle);
    if (rc != CUDA_SUCCESS) {
        tl_current.gen = 0;
        return pygpu_cuda_error(st, rc, "cuCtxPushCurrent");
    }
    remember_current(self->handle, st, self);
    Py_RETURN_NONE;
}

static PyObject *
context_pop(PyObject *cls, PyObject *unused)
{
    pygpu_state *st = pygpu_state_from_type((PyTypeObject *)cls);
    CUcontext h;
    CUresult rc;
    if (pygpu_ensure_driver(st) < 0)
        return NULL;
    rc = cu.cuCtxGetCurrent(&h);
    if (rc == CUDA_SUCCESS && h == NULL) {
        PyErr_SetString(st->LogicError, "Context.pop(): no context is current");
        return NULL;
    }
    tl_current.gen = 0; /* what is under it: asked when needed */
    rc = cu.cuCtxPopCurrent(&h);
    if (rc != CUDA_SUCCESS)
        return pygpu_cuda_error(st, rc, "cuCtxPopCurrent");
    Py_RETURN_NONE;
}

static PyObject *
context_get_current(PyObject *cls, PyObject *unused)
{
    pygpu_state *st = pygpu_state_from_type((PyTypeObject *)cls);
    CUcontext h;
    CUresult rc;
    pygpu_Context *ctx;
    if (pygpu_ensure_driver(st) < 0)
        return NULL;
    rc = ask_current(&h); /* always the driver's answer; remembered */
    if (rc != CUDA_SUCCESS)
        return pygpu_cuda_error(st, rc, "cuCtxGetCurrent");
    if (h == NULL)
        Py_RETURN_NONE;
    ctx = pygpu_context_for_handle(st, h);
    if (ctx == NULL)
        return NULL;
    if (known_current(&h) && h == ctx->handle)
        remember_current(h, st, ctx);
    Py_INCREF(ctx);
    return (PyObject *)ctx;
}

/* _current_context(): the current Context or None, as Context.get_current()
 * but from this thread's remembered answer when there is one (the array
 * layer's operators ask it once per operation). */
static PyObject *
context_current_fast(PyObject *module, PyObject *unused)
{
    return pygpu_current_context_or_none(PyModule_GetState(module));
}

static PyObject *
context_synchronize(PyObject *cls, PyObject *unused)
{
    pygpu_state *st = pygpu_state_from_type((PyTypeObject *)cls);
    pygpu_Context *ctx;
    pygpu_pfn_cuCtxSynchronize sync;
    CUresult rc;
    if ((ctx = pygpu_current_context(st)) == NULL
        || pygpu_capture_context_check(st, ctx, "Context.synchronize()") < 0
        || (sync = PYGPU_CU_LEGACY(st, cuCtxSynchronize, "Context.synchronize()")) == NULL)
        return NULL;
    Py_BEGIN_ALLOW_THREADS
        rc = sync();
    Py_END_ALLOW_THREADS
    if (rc != CUDA_SUCCESS)
        return pygpu_cuda_error(st, rc, "cuCtxSynchronize");
    Py_RETURN_NONE;
}

static PyObject *
context_get_device(PyObject *cls, PyObject *unused)
{
    pygpu_state *st = pygpu_state_from_type((PyTypeObject *)cls);
    pygpu_Context *ctx = pygpu_current_context(st);
    if (ctx == NULL)
        return NULL;
    Py_INCREF(ctx->device);
    return ctx->device;
}

static PyObject *
context_detach(pygpu_Context *self, PyObject *unused)
{
    pygpu_state *st = PYGPU_STATE(self);
    CUresult rc;
    PyObject *key;
    int views;
    if (self->detached)
        Py_RETURN_NONE;
    /* the context's memory goes first, in the context (a primary context
     * may outlive this release, retained by another library), as the
     * lifetime rule decides (memory/lifetime.c): refused while a copy into
     * it runs in another thread; memory under a live host view kept, and
     * the context's release deferred until the last view goes */
    if ((views = pygpu_lifetime_detach(st, self)) < 0)
        return NULL;
    if (self->is_primary) {
        /* the next use of this device gets a fresh primary Context */
        key = PyLong_FromLong(self->ordinal);
        if (key == NULL)
            return NULL;
        Py_INCREF(self); /* the dict may hold the last reference */
        if (PyDict_GetItemWithError(st->primary_contexts, key) == (PyObject *)self
            && PyDict_DelItem(st->primary_contexts, key) < 0) {
            Py_DECREF(key);
            Py_DECREF(self);
            return NULL;
        }
        Py_DECREF(key);
    } else {
        Py_INCREF(self);
    }
    const char *routine = self->is_primary      ? "cuDevicePrimaryCtxRelease"
                          : self->green != NULL ? "cuGreenCtxDestroy"
                                                : "cuCtxDestroy";
    context_forget(st, self);
    if ((self->is_primary || self->green != NULL) && self->owns) {
        /* releasing a primary context leaves it on this thread's stack: pop
         * it (as cuCtxDestroy does for a created one), or every later call
         * here would run in a dead context; the next use gets a fresh one */
        CUcontext cur = NULL, dummy;
        int guard;
        for (guard = 0; guard < 64; guard++) {
            if (cu.cuCtxGetCurrent(&cur) != CUDA_SUCCESS || cur != self->handle
                || cu.cuCtxPopCurrent(&dummy) != CUDA_SUCCESS)
                break;
        }
    }
    if (views > 0) {
        /* detached now; the handle stays for the host views (listed: a
         * thread that still has it current is refused, a forked child
         * never touches it) */
        self->detached = 1;
        self->release_deferred = 1;
        self->next_other = st->deferred_contexts;
        st->deferred_contexts = self;
        pygpu_context_forget_all();
        if (!self->is_primary && self->owns) {
            /* off this thread's stack, as cuCtxDestroy would take it */
            CUcontext cur = NULL, dummy;
            int guard;
            for (guard = 0; guard < 64; guard++) {
                if (cu.cuCtxGetCurrent(&cur) != CUDA_SUCCESS || cur != self->handle
                    || cu.cuCtxPopCurrent(&dummy) != CUDA_SUCCESS)
                    break;
            }
        }
        Py_DECREF(self);
        Py_RETURN_NONE;
    }
    rc = context_release(self); /* cuCtxDestroy also pops it if current */
    Py_DECREF(self);
    if (rc != CUDA_SUCCESS && rc != CUDA_ERROR_DEINITIALIZED)
        return pygpu_cuda_error(st, rc, routine);
    Py_RETURN_NONE;
}

static PyObject *
context_enter(pygpu_Context *self, PyObject *unused)
{
    PyObject *r = context_push(self, NULL);
    if (r == NULL)
        return NULL;
    Py_DECREF(r);
    Py_INCREF(self);
    return (PyObject *)self;
}

static PyObject *
context_exit(pygpu_Context *self, PyObject *args)
{
    pygpu_state *st = PYGPU_STATE(self);
    CUcontext h;
    CUresult rc;
    if (self->detached)
        Py_RETURN_FALSE;
    tl_current.gen = 0;
    rc = cu.cuCtxPopCurrent(&h);
    if (rc != CUDA_SUCCESS)
        return pygpu_cuda_error(st, rc, "cuCtxPopCurrent");
    Py_RETURN_FALSE;
}

static PyObject *
context_set_limit(PyObject *cls, PyObject *args)
{
    pygpu_state *st = pygpu_state_from_type((PyTypeObject *)cls);
    PyObject *wobj, *vobj;
    int which;
    size_t value;
    CUresult rc;
    if (!PyArg_ParseTuple(args, "OO:set_limit", &wobj, &vobj))
        return NULL;
    if (pygpu_parse_int(wobj, &which, "set_limit(): limit") < 0)
        return NULL;
    if (!PyLong_Check(vobj) || PyBool_Check(vobj)) {
        PyErr_Format(PyExc_TypeError, "set_limit(): value must be an int, not %.100s",
                     Py_TYPE(vobj)->tp_name);
        return NULL;
    }
    value = PyLong_AsSize_t(vobj);
    if (value == (size_t)-1 && PyErr_Occurred()) {
        PyErr_Format(PyExc_OverflowError, "set_limit(): value=%R is out of range", vobj);
        return NULL;
    }
    if (pygpu_current_context(st) == NULL)
        return NULL;
    rc = cu.cuCtxSetLimit((CUlimit)which, value);
    if (rc != CUDA_SUCCESS)
        return pygpu_cuda_error(st, rc, "cuCtxSetLimit");
    Py_RETURN_NONE;
}

static PyObject *
context_get_limit(PyObject *cls, PyObject *arg)
{
    pygpu_state *st = pygpu_state_from_type((PyTypeObject *)cls);
    size_t value;
    CUresult rc;
    int which;
    if (pygpu_parse_int(arg, &which, "get_limit(): limit") < 0)
        return NULL;
    if (pygpu_current_context(st) == NULL)
        return NULL;
    rc = cu.cuCtxGetLimit(&value, (CUlimit)which);
    if (rc != CUDA_SUCCESS)
        return pygpu_cuda_error(st, rc, "cuCtxGetLimit");
    return PyLong_FromSize_t(value);
}

static PyObject *
context_set_cache_config(PyObject *cls, PyObject *arg)
{
    pygpu_state *st = pygpu_state_from_type((PyTypeObject *)cls);
    CUresult rc;
    int which;
    if (pygpu_parse_int(arg, &which, "set_cache_config(): config") < 0)
        return NULL;
    if (pygpu_current_context(st) == NULL)
        return NULL;
    rc = cu.cuCtxSetCacheConfig((CUfunc_cache)which);
    if (rc != CUDA_SUCCESS)
        return pygpu_cuda_error(st, rc, "cuCtxSetCacheConfig");
    Py_RETURN_NONE;
}

static PyObject *
context_get_cache_config(PyObject *cls, PyObject *unused)
{
    pygpu_state *st = pygpu_state_from_type((PyTypeObject *)cls);
    CUfunc_cache value;
    CUresult rc;
    if (pygpu_current_context(st) == NULL)
        return NULL;
    rc = cu.cuCtxGetCacheConfig(&value);
    if (rc != CUDA_SUCCESS)
        return pygpu_cuda_error(st, rc, "cuCtxGetCacheConfig");
    return PyLong_FromLong((long)value);
}

/* value as a member of pygpu.driver's enum name (a plain int when the
 * enum has no such member) */
static PyObject *
enum_member(const char *name, long value)
{
    PyObject *mod = PyImport_ImportModule("pygpu._driver"), *cls, *res;
    if (mod == NULL)
        return NULL;
    cls = PyObject_GetAttrString(mod, name);
    Py_DECREF(mod);
    if (cls == NULL)
        return NULL;
    res = PyObject_CallFunction(cls, "l", value);
    Py_DECREF(cls);
    if (res == NULL && PyErr_ExceptionMatches(PyExc_ValueError)) {
        PyErr_Clear();
        res = PyLong_FromLong(value);
    }
    return res;
}

/* get_api_version(): cuCtxGetApiVersion of this context */
static PyObject *
context_get_api_version(pygpu_Context *self, PyObject *unused)
{
    pygpu_state *st = PYGPU_STATE(self);
    unsigned int version = 0;
    CUresult rc;
    if (pygpu_context_check(st, self) < 0)
        return NULL;
    if (cu.cuCtxGetApiVersion == NULL) {
        PyErr_SetString(st->LogicError, "get_api_version(): the driver has no "
                                        "cuCtxGetApiVersion");
        return NULL;
    }
    rc = cu.cuCtxGetApiVersion(self->handle, &version);
    if (rc != CUDA_SUCCESS)
        return pygpu_cuda_error(st, rc, "cuCtxGetApiVersion");
    return PyLong_FromUnsignedLong(version);
}

/* get/set_shared_config(): the current context's shared memory bank size
 * (cuCtxGet/SetSharedMemConfig, deprecated since CUDA 12.x: on devices
 * whose banks cannot be configured, every H100 among them, the setting is
 * accepted and changes nothing) */
static PyObject *
context_set_shared_config(PyObject *cls, PyObject *arg)
{
    pygpu_state *st = pygpu_state_from_type((PyTypeObject *)cls);
    CUresult rc;
    int which;
    if (pygpu_parse_int(arg, &which, "set_shared_config(): config") < 0)
        return NULL;
    if (pygpu_current_context(st) == NULL)
        return NULL;
    if (cu.cuCtxSetSharedMemConfig == NULL) {
        PyErr_SetString(st->LogicError, "set_shared_config(): the driver has no "
                                        "cuCtxSetSharedMemConfig");
        return NULL;
    }
    rc = cu.cuCtxSetSharedMemConfig((CUsharedconfig)which);
    if (rc != CUDA_SUCCESS)
        return pygpu_cuda_error(st, rc, "cuCtxSetSharedMemConfig");
    Py_RETURN_NONE;
}

static PyObject *
context_get_shared_config(PyObject *cls, PyObject *unused)
{
    pygpu_state *st = pygpu_state_from_type((PyTypeObject *)cls);
    CUsharedconfig value;
    CUresult rc;
    if (pygpu_current_context(st) == NULL)
        return NULL;
    if (cu.cuCtxGetSharedMemConfig == NULL) {
        PyErr_SetString(st->LogicError, "get_shared_config(): the driver has no "
                                        "cuCtxGetSharedMemConfig");
        return NULL;
    }
    rc = cu.cuCtxGetSharedMemConfig(&value);
    if (rc != CUDA_SUCCESS)
        return pygpu_cuda_error(st, rc, "cuCtxGetSharedMemConfig");
    return enum_member("shared_config", (long)value);
}

static PyObject *
context_enable_peer_access(pygpu_Context *self, PyObject *args, PyObject *kwds)
{
    pygpu_state *st = PYGPU_STATE(self);
    static char *kwlist[] = {"peer", "flags", NULL};
    PyObject *peer, *fobj = NULL;
    unsigned int flags = 0;
    pygpu_scope s;
    CUresult rc;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O!|O:enable_peer_access", kwlist, st->ContextType,
                                     &peer, &fobj))
        return NULL;
    if (fobj != NULL && pygpu_parse_uint(fobj, &flags, "enable_peer_access(): flags") < 0)
        return NULL;
    if (pygpu_context_check(st, (pygpu_Context *)peer) < 0 || pygpu_scope_enter(st, self, &s) < 0)
        return NULL;
    rc = cu.cuCtxEnablePeerAccess(((pygpu_Context *)peer)->handle, flags);
    pygpu_scope_exit(&s);
    if (rc != CUDA_SUCCESS)
        return pygpu_cuda_error(st, rc, "cuCtxEnablePeerAccess");
    Py_RETURN_NONE;
}

static PyObject *
context_disable_peer_access(pygpu_Context *self, PyObject *peer)
{
    pygpu_state *st = PYGPU_STATE(self);
    pygpu_scope s;
    CUresult rc;
    if (!PyObject_TypeCheck(peer, st->ContextType)) {
        PyErr_SetString(PyExc_TypeError, "disable_peer_access() takes a Context");
        return NULL;
    }
    if (pygpu_context_check(st, (pygpu_Context *)peer) < 0 || pygpu_scope_enter(st, self, &s) < 0)
        return NULL;
    rc = cu.cuCtxDisablePeerAccess(((pygpu_Context *)peer)->handle);
    pygpu_scope_exit(&s);
    if (rc != CUDA_SUCCESS)
        return pygpu_cuda_error(st, rc, "cuCtxDisablePeerAccess");
    Py_RETURN_NONE;
}

static PyObject *
context_get_handle(pygpu_Context *self, void *c)
{
    return PyLong_FromVoidPtr(self->handle);
}

static PyObject *
context_get_device_attr(pygpu_Context *self, void *c)
{
    Py_INCREF(self->device);
    return self->device;
}

static PyObject *
context_get_is_primary(pygpu_Context *self, void *c)
{
    return PyBool_FromLong(self->is_primary);
}

static PyObject *
context_get_detached(pygpu_Context *self, void *c)
{
    return PyBool_FromLong(self->detached);
}

static PyObject *
context_repr(pygpu_Context *self)
{
    return PyUnicode_FromFormat("<pygpu.driver.Context %s%s on device %d at %p>",
                                self->is_primary ? "primary" : (self->owns ? "created" : "foreign"),
                                self->detached ? " (detached)" : "", self->ordinal,
                                (void *)self->handle);
}

static PyObject *
context_richcompare(pygpu_Context *self, PyObject *other, int op)
{
    if (!PyObject_TypeCheck(other, Py_TYPE(self)) || (op != Py_EQ && op != Py_NE))
        Py_RETURN_NOTIMPLEMENTED;
    /* the same driver context: the same handle, and both alive or both
     * detached.  The primary context's handle comes back when it is
     * retained again after its release, as a new, live Context: it must not
     * match the detached one, whose modules are gone (the per-context
     * kernel caches and captured() graphs are keyed by Context) */
    pygpu_Context *o = (pygpu_Context *)other;
    int eq = self->handle == o->handle && !self->detached == !o->detached;
    return PyBool_FromLong(op == Py_EQ ? eq : !eq);
}

static Py_hash_t
context_hash(pygpu_Context *self)
{
    return (Py_hash_t)((uintptr_t)self->handle >> 4);
}

static PyMethodDef context_methods[] = {
    {"push", (PyCFunction)context_push, METH_NOARGS,
     "push($self, /)\n--\n\nMake this context current on this thread (stacked)."},
    {"pop", context_pop, METH_NOARGS | METH_CLASS,
     "pop($cls, /)\n--\n\nPop the current context off this thread's stack."},
    {"get_current", context_get_current, METH_NOARGS | METH_CLASS,
     "get_current($cls, /)\n--\n\nThe current Context, or None if none is current."},
    {"synchronize", context_synchronize, METH_NOARGS | METH_CLASS,
     "synchronize($cls, /)\n--\n\n"
     "Wait for all work in the current context (GIL released)."},
    {"get_device", context_get_device, METH_NOARGS | METH_CLASS,
     "get_device($cls, /)\n--\n\nThe Device of the current context."},
    {"detach", (PyCFunction)context_detach, METH_NOARGS,
     "detach($self, /)\n--\n\n"
     "Destroy a created context or release a primary one. Idempotent; "
     "objects that still belong to it raise LogicError when used."},
    {"set_limit", context_set_limit, METH_VARARGS | METH_CLASS,
     "set_limit($cls, limit, value, /)\n--\n\nSet a limit of the current context."},
    {"get_limit", context_get_limit, METH_O | METH_CLASS,
     "get_limit($cls, limit, /)\n--\n\nA limit of the current context."},
    {"set_cache_config", context_set_cache_config, METH_O | METH_CLASS,
     "set_cache_config($cls, config, /)\n--\n\nPreferred L1/shared split (func_cache)."},
    {"get_cache_config", context_get_cache_config, METH_NOARGS | METH_CLASS,
     "get_cache_config($cls, /)\n--\n\nThe current func_cache setting."},
    {"set_shared_config", context_set_shared_config, METH_O | METH_CLASS,
     "set_shared_config($cls, config, /)\n--\n\nThe current context's shared memory bank "
     "size (shared_config; cuCtxSetSharedMemConfig, which devices since Volta accept and "
     "ignore)."},
    {"get_shared_config", context_get_shared_config, METH_NOARGS | METH_CLASS,
     "get_shared_config($cls, /)\n--\n\nThe current context's shared_config."},
    {"get_api_version", (PyCFunction)context_get_api_version, METH_NOARGS,
     "get_api_version($self, /)\n--\n\nThe context's API version (cuCtxGetApiVersion; "
     "3020 for contexts of today's API)."},
    {"enable_peer_access", (PyCFunction)(void (*)(void))context_enable_peer_access,
     METH_VARARGS | METH_KEYWORDS,
     "enable_peer_access($self, /, peer, flags=0)\n--\n\n"
     "Let this context access memory of the peer context."},
    {"disable_peer_access", (PyCFunction)context_disable_peer_access, METH_O,
     "disable_peer_access($self, peer, /)\n--\n\nUndo enable_peer_access."},
    {"__enter__", (PyCFunction)context_enter, METH_NOARGS,
     "__enter__($self, /)\n--\n\nPush this context; returns it."},
    {"__exit__", (PyCFunction)context_exit, METH_VARARGS,
     "__exit__($self, /, *exc_info)\n--\n\nPop the current context."},
    {NULL},
};

static PyGetSetDef context_getset[] = {
    {"handle", (getter)context_get_handle, NULL, "The CUcontext as an int.", NULL},
    {"device", (getter)context_get_device_attr, NULL, "This context's Device.", NULL},
    {"is_primary", (getter)context_get_is_primary, NULL, "Whether this is a primary context.",
     NULL},
    {"detached", (getter)context_get_detached, NULL, "Whether detach() was called.", NULL},
    {NULL},
};

static PyMemberDef context_members[] = {
    {"__weaklistoffset__", T_PYSSIZET, offsetof(pygpu_Context, weakreflist), READONLY},
    {NULL},
};

static PyType_Slot context_slots[] = {
    {Py_tp_dealloc, context_dealloc},
    {Py_tp_methods, context_methods},
    {Py_tp_getset, context_getset},
    {Py_tp_members, context_members},
    {Py_tp_repr, context_repr},
    {Py_tp_richcompare, context_richcompare},
    {Py_tp_hash, context_hash},
    {Py_tp_doc, "A CUDA context. Get one from Device.retain_primary_context() "
                "(the default) or Device.make_context(); usable as a with block."},
    {0, NULL},
};

static PyType_Spec context_spec = {"pygpu.driver.Context", sizeof(pygpu_Context), 0,
                                   Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE
                                       | Py_TPFLAGS_DISALLOW_INSTANTIATION | Py_TPFLAGS_BASETYPE,
                                   context_slots};

static PyMethodDef context_functions[] = {
    {"_current_context", context_current_fast, METH_NOARGS,
     "_current_context($module, /)\n--\n\n"
     "The current Context or None, as Context.get_current(), from this "
     "thread's remembered answer when it has one (no driver call)."},
    {NULL},
};

int
pygpu_context_setup(PyObject *m, pygpu_state *st)
{
    if (pygpu_add_type(m, &context_spec, &st->ContextType) < 0)
        return -1;
    return PyModule_AddFunctions(m, context_functions);
}
