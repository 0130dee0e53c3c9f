/* DeviceAllocation, mem_alloc and friends (copies and fills: copies.c). */
#include "pygpu.h"
#include "core/pygpu_numpy.h"

/* pygpu_get_device_ptr and the DLPack reader live in args.c */

/* 1 if the host buffer of obj (exported as view) may hold PyObject
 * pointers, 0 if not, -1 with an exception set.  A NumPy array (or a
 * memoryview of one) answers from its dtype; any other exporter from its
 * format: one without an 'O' anywhere holds no object; one with an 'O' is
 * parsed by NumPy (the PEP 3118 grammar, field names and all) and refused
 * unless NumPy reads it as an object-free type of the buffer's item size.
 * Scanning the format by hand is not enough: a field name may contain ':'
 * (NumPy writes 'T{<d:a:b:<O:c:}' for fields "a:b" and "c"). */
static int
buffer_has_objects(PyObject *obj, Py_buffer *view)
{
    PyObject *base = obj, *mv, *arr;
    const char *fmt = view->format;
    int r;
    while (PyMemoryView_Check(base) && PyMemoryView_GET_BUFFER(base)->obj != NULL
           && PyMemoryView_GET_BUFFER(base)->obj != base)
        base = PyMemoryView_GET_BUFFER(base)->obj;
    if (PyArray_Check(base)) /* (a memoryview cannot cast to 'O') */
        return PyDataType_REFCHK(PyArray_DESCR((PyArrayObject *)base)) ? 1 : 0;
    if (base != obj) { /* a cast ('B') hides the exporter's own format */
        Py_buffer bview;
        if (PyObject_GetBuffer(base, &bview, PyBUF_FULL_RO) < 0) {
            PyErr_Clear();
            return 1; /* not understood: not trusted */
        }
        r = buffer_has_objects(base, &bview);
        PyBuffer_Release(&bview);
        if (r != 0)
            return r;
    }
    if (fmt == NULL || strchr(fmt, 'O') == NULL)
        return 0;
    mv = PyMemoryView_FromBuffer(view);
    if (mv == NULL)
        return -1;
    arr = PyArray_FromAny(mv, NULL, 0, 0, 0, NULL);
    Py_DECREF(mv);
    if (arr == NULL) {
        PyErr_Clear();
        return 1; /* not understood: not trusted */
    }
    r = PyDataType_REFCHK(PyArray_DESCR((PyArrayObject *)arr))
        || (Py_ssize_t)PyArray_ITEMSIZE((PyArrayObject *)arr) != view->itemsize;
    Py_DECREF(arr);
    return r;
}

/* Host buffer in: contiguous, optionally writable, with a clear message. */
static int
get_host_buffer(PyObject *obj, Py_buffer *view, int writable, const char *what)
{
    int flags = PyBUF_ANY_CONTIGUOUS | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(obj, view, flags) == 0) {
        int objects = buffer_has_objects(obj, view);
        if (objects < 0) {
            PyBuffer_Release(view);
            return -1;
        }
        if (objects) {
            PyBuffer_Release(view);
            PyErr_Format(PyExc_TypeError,
                         "%s: the host buffer holds Python objects (format '%s'), whose "
                         "bytes are pointers that cannot go to or come from a GPU",
                         what, view->format);
            return -1;
        }
        return 0;
    }
    if (!PyObject_CheckBuffer(obj)) {
        PyErr_Clear();
        PyErr_Format(PyExc_TypeError,
                     "%s: expected a host buffer (NumPy array, bytes, ...), not %.100s", what,
                     Py_TYPE(obj)->tp_name);
        return -1;
    }
    PyErr_Clear();
    if (writable && PyObject_GetBuffer(obj, view, PyBUF_ANY_CONTIGUOUS) == 0) {
        PyBuffer_Release(view);
        PyErr_Format(PyExc_TypeError, "%s: the host buffer is read-only", what);
        return -1;
    }
    PyErr_Clear();
    PyErr_Format(PyExc_ValueError,
                 "%s: the host buffer is not contiguous (use numpy.ascontiguousarray)", what);
    return -1;
}

/* ---- DeviceAllocation ---- */

/* Take the allocation out of its context's list.  GIL held. */
void
pygpu_allocation_unlink(pygpu_DeviceAllocation *self)
{
    if (self->ctx_prev != NULL)
        self->ctx_prev->ctx_next = self->ctx_next;
    else if (self->context != NULL && self->context->allocations == self)
        self->context->allocations = self->ctx_next;
    if (self->ctx_next != NULL)
        self->ctx_next->ctx_prev = self->ctx_prev;
    self->ctx_prev = self->ctx_next = NULL;
}

/* Give the memory back to the driver, in its own context; never raises.
 * GIL held. */
void
pygpu_allocation_free_memory(pygpu_DeviceAllocation *self)
{
    pygpu_scope s;
    pygpu_allocation_unlink(self);
    if ((self->ptr == 0 && self->kind != PYGPU_ALLOC_VIRTUAL) || self->kind == PYGPU_ALLOC_BORROWED)
        return;
    /* a block of the block cache goes back to it, kept under the stream it
     * was freed on (no driver call); not while any capture runs (the free
     * is then the driver's, as below), never one made inside a capture */
    if (self->block != 0 && pygpu_captures_active == 0 && !self->in_capture
        && pygpu_blockcache_put(self->context, self->free_stream, self->ptr, self->block))
        return;
    if (pygpu_lifetime_enter(self->context, &s) < 0)
        return;
    if (self->kind == PYGPU_ALLOC_IPC || self->kind == PYGPU_ALLOC_VIRTUAL) {
        if (self->kind == PYGPU_ALLOC_IPC)
            pygpu_ipc_close(self);
        else
            pygpu_vmm_release(self);
        pygpu_scope_exit(&s);
        return;
    }
    /* an async allocation is freed in order on its stream, which `owner`
     * keeps alive until then (a capturing stream records it as a node) */
    if (self->kind == PYGPU_ALLOC_POOL && cu.cuMemFreeAsync != NULL) {
        /* while a capture runs, a free on the capturing stream (of memory
         * the graph did not allocate) or on the legacy stream (which would
         * wait for a blocking capturing stream) would break it: deferred
         * until the capture ends.  Elsewhere it runs relaxed (a free on
         * another stream is unsafe during a GLOBAL capture). */
        int node = self->in_capture && self->owner != NULL
                   && pygpu_stream_capturing(PYGPU_STATE(self), self->owner);
        if (node
            || !pygpu_capture_defer_free(self->context, self->ptr, self->free_stream,
                                         self->owner)) {
            CUstreamCaptureMode m = pygpu_capture_relax();
            cu.cuMemFreeAsync(self->ptr, self->free_stream);
            pygpu_capture_restore(m);
        }
    } else {
        /* cuMemFree is unsafe during a stream capture: relaxed, a free that
         * comes while the user captures (a dying object) never invalidates
         * the capture */
        {
            CUresult ignored_;
            PYGPU_CU_RELAX(ignored_, cuMemFree, self->ptr);
            (void)ignored_;
        }
    }
    pygpu_scope_exit(&s);
}

/* free(): mark freed at once (no new use starts), free the memory now, or,
 * while a copy using it runs with the GIL released, when that copy ends
 * (allocation_unhold), or, while something holds the address for later use
 * (hold.c: a graph, a texture, a tensor map, an IPC export), when the last
 * holder goes (pygpu_allocation_holds_gone).  One exception: a stream-ordered
 * allocation made while its stream was capturing, freed while that capture
 * runs, is freed now, in stream order: the free becomes a node of the graph,
 * after the captured work that uses it.  Idempotent, never raises.  GIL
 * held. */
static void
allocation_release(pygpu_DeviceAllocation *self)
{
    if (self->freed)
        return;
    self->freed = 1;
    if (self->busy > 0 || self->host_view) {
        self->free_pending = 1;
        return;
    }
    if (self->holds != NULL
        && !(self->kind == PYGPU_ALLOC_POOL && self->in_capture && self->owner != NULL
             && pygpu_stream_capturing(PYGPU_STATE(self), self->owner))) {
        self->free_pending = 1;
        return;
    }
    pygpu_allocation_free_memory(self);
}

void
pygpu_allocation_holds_gone(pygpu_DeviceAllocation *a)
{
    if (a->busy == 0 && a->free_pending && !a->host_view) {
        a->free_pending = 0;
        pygpu_allocation_free_memory(a);
    } else if (a->kind == PYGPU_ALLOC_VIRTUAL && !a->freed) {
        pygpu_scope s;
        if (pygpu_scope_enter_quiet(a->context, &s) == 0) {
            pygpu_vmm_release_retired(a);
            pygpu_scope_exit(&s);
        }
    }
}

/* The check every use of an allocation makes: 0 or -1 with LogicError. */
int
pygpu_allocation_check(pygpu_state *st, pygpu_DeviceAllocation *a)
{
    if (a->freed == 2) {
        PyErr_SetString(st->LogicError, "the DeviceAllocation's context was detached: "
                                        "its memory is gone");
        return -1;
    }
    if (a->freed) {
        PyErr_SetString(st->LogicError, "the DeviceAllocation was freed");
        return -1;
    }
    return 0;
}

/* Hold obj's memory (when it is a DeviceAllocation) for a driver call made
 * next: checks it is still alive (Python code run while the other arguments
 * were read may have freed it), then counts the call as a user, so a free()
 * from another thread while the GIL is released defers the cuMemFree until
 * allocation_unhold.  *held is a strong reference or NULL.  Returns 0, or -1
 * with LogicError.  GIL held; no Python code may run between this and the
 * driver call. */
static int
allocation_hold(pygpu_state *st, PyObject *obj, pygpu_DeviceAllocation **held)
{
    pygpu_DeviceAllocation *a;
    *held = NULL;
    if (!pygpu_is_allocation(st, obj))
        return 0;
    a = (pygpu_DeviceAllocation *)obj;
    if (pygpu_allocation_check(st, a) < 0)
        return -1;
    a->busy++;
    Py_INCREF(a);
    *held = a;
    return 0;
}

/* End a hold; the last user carries out a free() that came meanwhile.
 * a may be NULL.  GIL held. */
static void
allocation_unhold(pygpu_DeviceAllocation *a)
{
    if (a == NULL)
        return;
    if (--a->busy == 0 && a->free_pending && a->holds == NULL && !a->host_view) {
        a->free_pending = 0;
        pygpu_allocation_free_memory(a);
    }
    Py_DECREF(a);
}

int
pygpu_get_host_buffer(PyObject *obj, Py_buffer *view, int writable, const char *what)
{
    return get_host_buffer(obj, view, writable, what);
}

int
pygpu_allocation_hold(pygpu_state *st, PyObject *obj, pygpu_DeviceAllocation **held)
{
    return allocation_hold(st, obj, held);
}

void
pygpu_allocation_unhold(pygpu_DeviceAllocation *a)
{
    allocation_unhold(a);
}

/* A device pointer argument: a DeviceAllocation of a detached context says
 * so (pygpu_get_device_ptr only knows "freed"). */
int
pygpu_allocation_ptr(pygpu_state *st, PyObject *obj, CUdeviceptr *ptr, size_t *size)
{
    if (pygpu_is_allocation(st, obj)
        && pygpu_allocation_check(st, (pygpu_DeviceAllocation *)obj) < 0)
        return -1;
    return pygpu_get_device_ptr(st, obj, ptr, size, 0);
}

static void
allocation_dealloc(pygpu_DeviceAllocation *self)
{
    PyTypeObject *tp = Py_TYPE(self);
    if (self->weakreflist != NULL)
        PyObject_ClearWeakRefs((PyObject *)self);
    /* nobody uses it: busy is 0, and the holds left are its own (an IPC
     * export), which end with it; no host view is left (each kept it alive) */
    self->host_view = 0;
    pygpu_holds_drop(&self->holds);
    if (self->free_pending) {
        self->free_pending = 0;
        pygpu_allocation_free_memory(self);
    }
    allocation_release(self);
    pygpu_allocation_unlink(self);
    if (self->context != NULL)
        pygpu_lifetime_view_gone(self->context); /* a detach waiting for the last view */
    Py_CLEAR(self->owner);
    Py_CLEAR(self->context);
    tp->tp_free(self);
    Py_DECREF(tp);
}

static PyObject *
new_allocation(pygpu_state *st, pygpu_Context *ctx, CUdeviceptr ptr, size_t size,
               pygpu_alloc_kind kind)
{
    return pygpu_allocation_new(st, st->DeviceAllocationType, ctx, ptr, size, kind);
}

PyObject *
pygpu_allocation_new(pygpu_state *st, PyTypeObject *tp, pygpu_Context *ctx, CUdeviceptr ptr,
                     size_t size, pygpu_alloc_kind kind)
{
    pygpu_DeviceAllocation *self = (pygpu_DeviceAllocation *)tp->tp_alloc(tp, PYGPU_ALLOC_DEVICE);
    if (self == NULL)
        return NULL;
    self->ptr = ptr;
    self->size = size;
    self->kind = kind;
    self->freed = 0;
    self->free_stream = NULL;
    self->weakreflist = NULL;
    self->owner = NULL;
    self->busy = 0;
    self->free_pending = 0;
    self->holds = NULL;
    self->in_capture = 0;
    self->block = 0;
    self->host_view = 0;
    Py_INCREF(ctx);
    self->context = ctx;
    self->ctx_prev = NULL;
    self->ctx_next = NULL;
    if (ctx->detached) {
        self->freed = 2;
    } else {
        self->ctx_next = ctx->allocations;
        if (ctx->allocations != NULL)
            ctx->allocations->ctx_prev = self;
        ctx->allocations = self;
    }
    return (PyObject *)self;
}

PyObject *
pygpu_borrowed_allocation(pygpu_state *st, pygpu_Context *ctx, CUdeviceptr ptr, size_t size,
                          PyObject *owner)
{
    PyObject *a = new_allocation(st, ctx, ptr, size, PYGPU_ALLOC_BORROWED);
    if (a != NULL) {
        Py_XINCREF(owner);
        ((pygpu_DeviceAllocation *)a)->owner = owner;
    }
    return a;
}

int
pygpu_parse_nbytes(PyObject *obj, size_t *out, const char *what)
{
    if (!PyIndex_Check(obj) || PyBool_Check(obj)) {
        PyErr_Format(PyExc_TypeError, "%s must be an int, not %.100s", what, Py_TYPE(obj)->tp_name);
        return -1;
    }
    PyObject *n = PyNumber_Index(obj);
    if (n == NULL)
        return -1;
    PyObject *zero = PyLong_FromLong(0);
    int neg = zero ? PyObject_RichCompareBool(n, zero, Py_LT) : -1;
    Py_XDECREF(zero);
    if (neg < 0) {
        Py_DECREF(n);
        return -1;
    }
    if (neg) {
        PyErr_Format(PyExc_ValueError, "%s must be >= 0, got %R", what, n);
        Py_DECREF(n);
        return -1;
    }
    *out = PyLong_AsSize_t(n);
    Py_DECREF(n);
    return (*out == (size_t)-1 && PyErr_Occurred()) ? -1 : 0;
}

static PyObject *
mem_alloc(PyObject *module, PyObject *arg)
{
    pygpu_state *st = PyModule_GetState(module);
    pygpu_Context *ctx;
    pygpu_scope s;
    CUdeviceptr p = 0;
    CUresult rc;
    size_t n;
    if (pygpu_parse_nbytes(arg, &n, "mem_alloc(): nbytes") < 0)
        return NULL;
    if ((ctx = pygpu_current_context(st)) == NULL)
        return NULL;
    if (n == 0)
        return new_allocation(st, ctx, 0, 0, PYGPU_ALLOC_DEVICE);
    PYGPU_CU_RELAX(rc, cuMemAlloc, &p, n);
    if (rc == CUDA_ERROR_OUT_OF_MEMORY) {
        /* dead allocations may be waiting in reference cycles; their
         * finalizers are Python code, which may even detach ctx: the scope
         * keeps it a valid object, and the retry runs in it or not at all */
        PyObject *r;
        if (pygpu_scope_enter(st, ctx, &s) < 0)
            return NULL;
        r = PyObject_CallNoArgs(st->gc_collect);
        if (r == NULL) {
            pygpu_scope_exit(&s);
            return NULL;
        }
        Py_DECREF(r);
        if (ctx->detached) {
            pygpu_scope_exit(&s);
            PyErr_SetString(st->LogicError, "mem_alloc(): the current context was detached "
                                            "by a finalizer during garbage collection");
            return NULL;
        }
        PYGPU_CU_RELAX(rc, cuMemAlloc, &p, n);
        pygpu_scope_exit(&s);
    }
    if (rc != CUDA_SUCCESS) {
        if (rc == CUDA_ERROR_OUT_OF_MEMORY) {
            size_t free_b = 0, total_b = 0;
            {
                CUresult ignored_;
                PYGPU_CU_RELAX(ignored_, cuMemGetInfo, &free_b, &total_b);
                (void)ignored_;
            }
            char note[160];
            snprintf(note, sizeof note, "asked for %zu bytes; %zu of %zu bytes free on the device",
                     n, free_b, total_b);
            pygpu_cuda_error_ex(st, rc, "cuMemAlloc", note);
            return NULL;
        }
        return pygpu_cuda_error(st, rc, "cuMemAlloc");
    }
    PyObject *res = new_allocation(st, ctx, p, n, PYGPU_ALLOC_DEVICE);
    if (res == NULL) {
        {
            CUresult ignored_;
            PYGPU_CU_RELAX(ignored_, cuMemFree, p);
            (void)ignored_;
        }
    }
    return res;
}

/* The device's default pool returns freed memory to the system at every
 * synchronize unless its release threshold says otherwise (it is 0); the
 * next allocation then maps fresh pages, ~100 us for 40 MB.  pygpu keeps
 * it, as CuPy's pool does.  Best effort: a driver without pools or an
 * error leaves the driver's default.  Setting a pool attribute is unsafe
 * while a stream captures (the capture is invalidated, issue 25's defect
 * 10: the first mem_alloc_async inside capture_graph failed), so it runs
 * with this thread's capture mode relaxed, and Stream.begin_capture() does
 * it before the capture begins.  GIL held, ctx current. */
void
pygpu_keep_pool_memory(pygpu_Context *ctx)
{
    CUdevice dev;
    CUmemoryPool pool;
    cuuint64_t keep = ~(cuuint64_t)0;
    ctx->pool_configured = 1;
    if (cu.cuDeviceGetDefaultMemPool == NULL || !PYGPU_CU_HAVE(RELAX, cuMemPoolSetAttribute)
        || cu.cuDeviceGet(&dev, ctx->ordinal) != CUDA_SUCCESS
        || cu.cuDeviceGetDefaultMemPool(&pool, dev) != CUDA_SUCCESS)
        return;
    {
        CUresult ignored_;
        PYGPU_CU_RELAX(ignored_, cuMemPoolSetAttribute, pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
                       &keep);
        (void)ignored_;
    }
}

/* The block cache keeps blocks of streams whose lifetime pygpu knows: the
 * default (legacy) stream and pygpu Streams of ctx that own their handle
 * (each gives its blocks back before it is destroyed); never the
 * per-thread stream (one per thread) nor another library's.  Only in
 * contexts pygpu owns. */
static int
cacheable_stream(pygpu_state *st, pygpu_Context *ctx, PyObject *sobj, CUstream s)
{
    pygpu_Stream *ps;
    if (!ctx->owns || ctx->detached || s == CU_STREAM_PER_THREAD)
        return 0;
    if (s == NULL || s == CU_STREAM_LEGACY)
        return sobj == Py_None || PyLong_Check(sobj) || PyObject_TypeCheck(sobj, st->StreamType);
    if (!PyObject_TypeCheck(sobj, st->StreamType))
        return 0;
    ps = (pygpu_Stream *)sobj;
    return ps->owns && ps->handle == s && ps->context == ctx;
}

/* The DeviceAllocation of a stream-ordered allocation: n bytes at p on s
 * (sobj), in a block of the block cache of `block` bytes (0: none).  On
 * failure the memory goes back (to the cache, else the pool). */
static PyObject *
async_allocation(pygpu_state *st, pygpu_Context *ctx, CUdeviceptr p, size_t n, size_t block,
                 CUstream s, PyObject *sobj)
{
    PyObject *res = new_allocation(st, ctx, p, n, PYGPU_ALLOC_POOL);
    pygpu_DeviceAllocation *a = (pygpu_DeviceAllocation *)res;
    if (res == NULL) {
        if (block == 0 || !pygpu_blockcache_put(ctx, s, p, block))
            cu.cuMemFreeAsync(p, s);
        return NULL;
    }
    a->free_stream = s;
    a->block = block;
    a->in_capture = pygpu_captures_active != 0 && pygpu_stream_capturing(st, sobj);
    if (sobj != Py_None) {
        /* strong ref: the stream outlives the allocation freed on it */
        Py_INCREF(sobj);
        a->owner = sobj;
    }
    return res;
}

static PyObject *
mem_alloc_async(PyObject *module, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    pygpu_state *st = PyModule_GetState(module);
    static const char *const argnames[] = {"nbytes", "stream", NULL};
    PyObject *a[2], *nobj, *sobj = Py_None;
    pygpu_Context *ctx;
    CUdeviceptr p = 0;
    CUstream s;
    CUresult rc;
    CUstreamCaptureMode mode;
    size_t n, block = 0;
    Py_ssize_t v;
    if (kwnames == NULL && nargs == 1 && PyLong_CheckExact(args[0])
        && (v = PyLong_AsSsize_t(args[0])) >= 0) {
        /* the array layer's call: one exact int (no __index__ to run) */
        nobj = args[0];
        n = (size_t)v;
    } else {
        PyErr_Clear(); /* (an int too large for a Py_ssize_t: parsed below) */
        if (pygpu_fast_args("mem_alloc_async", args, nargs, kwnames, argnames, 1, a) < 0)
            return NULL;
        nobj = a[0];
        if (a[1] != NULL)
            sobj = a[1];
        if (pygpu_parse_nbytes(nobj, &n, "mem_alloc_async(): nbytes") < 0)
            return NULL;
    }
    if (pygpu_captures_active != 0 && pygpu_capture_is_default(st, sobj)) {
        /* inside this thread's capture, an allocation given no stream (the
         * array layer's) is made now, outside the graph, as mem_alloc()'s:
         * it lives as long as its owner and the graphs that use it hold it
         * (a graph allocation would exist only while its graph runs) */
        if ((ctx = pygpu_current_context(st)) == NULL)
            return NULL;
        if (pygpu_capture_current(ctx) != NULL)
            return mem_alloc(module, nobj);
    }
    if (pygpu_get_stream(st, sobj, &s) < 0
        || pygpu_capture_check(st, sobj, 0, "mem_alloc_async()") < 0)
        return NULL;
    if (n != 0 && pygpu_captures_active == 0 && cu.cuMemAllocAsync != NULL) {
        /* the block cache: no driver call when a block of n's class was
         * freed on this stream; not while any capture runs */
        if ((block = pygpu_blockcache_class(n)) == (size_t)-1)
            return NULL;
        if (block != 0) {
            if ((ctx = pygpu_current_context_known(st)) == NULL)
                return NULL;
            if (!cacheable_stream(st, ctx, sobj, s))
                block = 0;
            else if (pygpu_blockcache_get(ctx, s, block, &p))
                return async_allocation(st, ctx, p, n, block, s, sobj);
        }
    }
    /* the driver's pool, in the context the driver says is current */
    if ((ctx = pygpu_current_context(st)) == NULL)
        return NULL;
    if (cu.cuMemAllocAsync == NULL) {
        PyErr_SetString(st->LogicError,
                        "mem_alloc_async() needs a driver with cuMemAllocAsync (CUDA 11.2+)");
        return NULL;
    }
    if (n == 0)
        return new_allocation(st, ctx, 0, 0, PYGPU_ALLOC_DEVICE);
    if (block != 0 && !cacheable_stream(st, ctx, sobj, s))
        block = 0;
    if (!ctx->pool_configured)
        pygpu_keep_pool_memory(ctx);
    mode = pygpu_capture_relax(); /* unsafe on a stream that does not capture */
    rc = cu.cuMemAllocAsync(&p, block != 0 ? block : n, s);
    pygpu_capture_restore(mode);
    if (rc == CUDA_ERROR_OUT_OF_MEMORY && pygpu_blockcache_flush_oom(ctx) > 0) {
        /* the cached blocks went back to the pool: once more */
        mode = pygpu_capture_relax();
        rc = cu.cuMemAllocAsync(&p, block != 0 ? block : n, s);
        pygpu_capture_restore(mode);
    }
    if (rc != CUDA_SUCCESS)
        return pygpu_cuda_error_ex(st, rc, "cuMemAllocAsync",
                                   rc == CUDA_ERROR_STREAM_CAPTURE_INVALIDATED
                                       ? "the stream's capture was invalidated by an earlier "
                                         "operation that is illegal during capture"
                                       : NULL);
    return async_allocation(st, ctx, p, n, block, s, sobj);
}

static PyObject *
mem_alloc_managed(PyObject *module, PyObject *args, PyObject *kwds)
{
    pygpu_state *st = PyModule_GetState(module);
    static char *kwlist[] = {"nbytes", "flags", NULL};
    PyObject *nobj, *fobj = NULL, *res;
    unsigned int flags = CU_MEM_ATTACH_GLOBAL;
    pygpu_Context *ctx;
    CUdeviceptr p;
    CUresult rc;
    size_t n;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O|O:mem_alloc_managed", kwlist, &nobj, &fobj))
        return NULL;
    if (pygpu_parse_nbytes(nobj, &n, "mem_alloc_managed(): nbytes") < 0
        || (fobj != NULL && pygpu_parse_uint(fobj, &flags, "mem_alloc_managed(): flags") < 0))
        return NULL;
    if ((ctx = pygpu_current_context(st)) == NULL)
        return NULL;
    if (n == 0)
        return new_allocation(st, ctx, 0, 0, PYGPU_ALLOC_MANAGED);
    PYGPU_CU_RELAX(rc, cuMemAllocManaged, &p, n, flags); /* made now, never captured */
    if (rc != CUDA_SUCCESS)
        return pygpu_cuda_error(st, rc, "cuMemAllocManaged");
    res = new_allocation(st, ctx, p, n, PYGPU_ALLOC_MANAGED);
    if (res == NULL) {
        {
            CUresult ignored_;
            PYGPU_CU_RELAX(ignored_, cuMemFree, p);
            (void)ignored_;
        }
    }
    return res;
}

/* A managed allocation of n bytes in the current context (n may be 0). */
PyObject *
pygpu_managed_allocation(pygpu_state *st, size_t n, unsigned int flags)
{
    pygpu_Context *ctx = pygpu_current_context(st);
    CUdeviceptr p = 0;
    CUresult rc;
    PyObject *a;
    if (ctx == NULL)
        return NULL;
    if (n > 0) {
        PYGPU_CU_RELAX(rc, cuMemAllocManaged, &p, n, flags);
        if (rc != CUDA_SUCCESS)
            return pygpu_cuda_error(st, rc, "cuMemAllocManaged");
    }
    a = new_allocation(st, ctx, p, n, PYGPU_ALLOC_MANAGED);
    if (a != NULL)
        ((pygpu_DeviceAllocation *)a)->host_view = 1; /* the array's .base */
    if (a == NULL && p) {
        {
            CUresult ignored_;
            PYGPU_CU_RELAX(ignored_, cuMemFree, p);
            (void)ignored_;
        }
    }
    return a;
}

static PyObject *
mem_alloc_pitch(PyObject *module, PyObject *args)
{
    pygpu_state *st = PyModule_GetState(module);
    Py_ssize_t width, height;
    unsigned int esize;
    CUdeviceptr p;
    size_t pitch;
    CUresult rc;
    pygpu_Context *ctx;
    PyObject *a, *eobj;
    if (!PyArg_ParseTuple(args, "nnO:mem_alloc_pitch", &width, &height, &eobj))
        return NULL;
    if (pygpu_parse_uint(eobj, &esize, "mem_alloc_pitch(): access_size") < 0)
        return NULL;
    if (width <= 0 || height <= 0) {
        PyErr_SetString(PyExc_ValueError, "mem_alloc_pitch(): width and height must be > 0");
        return NULL;
    }
    if (esize != 4 && esize != 8 && esize != 16) {
        PyErr_Format(PyExc_ValueError, "mem_alloc_pitch(): access_size must be 4, 8 or 16, got %u",
                     esize);
        return NULL;
    }
    if ((ctx = pygpu_current_context(st)) == NULL)
        return NULL;
    PYGPU_CU_RELAX(rc, cuMemAllocPitch, &p, &pitch, (size_t)width, (size_t)height,
                   esize); /* made now, never captured */
    if (rc != CUDA_SUCCESS)
        return pygpu_cuda_error(st, rc, "cuMemAllocPitch");
    a = new_allocation(st, ctx, p, pitch * (size_t)height, PYGPU_ALLOC_DEVICE);
    if (a == NULL) {
        {
            CUresult ignored_;
            PYGPU_CU_RELAX(ignored_, cuMemFree, p);
            (void)ignored_;
        }
        return NULL;
    }
    return Py_BuildValue("(Nn)", a, (Py_ssize_t)pitch);
}

static PyObject *
mem_get_info(PyObject *module, PyObject *unused)
{
    pygpu_state *st = PyModule_GetState(module);
    size_t f, t;
    CUresult rc;
    if (pygpu_current_context(st) == NULL)
        return NULL;
    PYGPU_CU_RELAX(rc, cuMemGetInfo, &f, &t);
    if (rc != CUDA_SUCCESS)
        return pygpu_cuda_error(st, rc, "cuMemGetInfo");
    return Py_BuildValue("(nn)", (Py_ssize_t)f, (Py_ssize_t)t);
}

static PyObject *
allocation_free(pygpu_DeviceAllocation *self, PyObject *unused)
{
    allocation_release(self);
    Py_RETURN_NONE;
}

static PyObject *
allocation_int(pygpu_DeviceAllocation *self)
{
    if (pygpu_allocation_check(PYGPU_STATE(self), self) < 0) /* freed, or detached */
        return NULL;
    return PyLong_FromUnsignedLongLong((unsigned long long)self->ptr);
}

static PyObject *
allocation_cai(pygpu_DeviceAllocation *self, void *c)
{
    if (pygpu_allocation_check(PYGPU_STATE(self), self) < 0) /* freed, or detached */
        return NULL;
    return Py_BuildValue("{s:(n),s:s,s:(KO),s:i,s:O,s:O}", "shape", (Py_ssize_t)self->size,
                         "typestr", "|u1", "data", (unsigned long long)self->ptr, Py_False,
                         "version", 3, "strides", Py_None, "stream", Py_None);
}

static PyObject *
allocation_get_size(pygpu_DeviceAllocation *self, void *c)
{
    return PyLong_FromSize_t(self->size);
}

static PyObject *
allocation_get_freed(pygpu_DeviceAllocation *self, void *c)
{
    return PyBool_FromLong(self->freed);
}

static PyObject *
allocation_get_holders(pygpu_DeviceAllocation *self, void *c)
{
    return pygpu_holders(self->holds);
}

static PyObject *
allocation_get_context(pygpu_DeviceAllocation *self, void *c)
{
    Py_INCREF(self->context);
    return (PyObject *)self->context;
}

static PyObject *
allocation_enter(PyObject *self, PyObject *unused)
{
    Py_INCREF(self);
    return self;
}

static PyObject *
allocation_exit(pygpu_DeviceAllocation *self, PyObject *args)
{
    allocation_release(self);
    Py_RETURN_FALSE;
}

static PyObject *
allocation_repr(pygpu_DeviceAllocation *self)
{
    if (self->freed && self->free_pending && self->host_view && self->holds == NULL)
        return PyUnicode_FromFormat("<pygpu.driver.DeviceAllocation (freed; the memory goes "
                                    "with this object, which arrays or buffers on the host "
                                    "use), %zu bytes>",
                                    self->size);
    if (self->freed && self->free_pending)
        return PyUnicode_FromFormat("<pygpu.driver.DeviceAllocation (freed; the memory "
                                    "waits for %zd holder%s), %zu bytes>",
                                    pygpu_holds_count(self->holds),
                                    pygpu_holds_count(self->holds) == 1 ? "" : "s", self->size);
    if (self->freed)
        return PyUnicode_FromFormat("<pygpu.driver.DeviceAllocation (freed), %zu bytes>",
                                    self->size);
    {
        /* PyUnicode_FromFormat has no %llx */
        char addr[32];
        snprintf(addr, sizeof addr, "0x%llx", (unsigned long long)self->ptr);
        return PyUnicode_FromFormat("<pygpu.driver.DeviceAllocation at %s, %zu bytes>", addr,
                                    self->size);
    }
}

/* ---- PyCUDA's host views of managed memory (as_buffer), attach ---- */

/* A writable 1-D memoryview of the n bytes at p, host-accessible memory,
 * whose exporter (a uint8 ndarray) keeps owner alive.  GIL held. */
static PyObject *
host_view(PyObject *owner, uintptr_t p, size_t n)
{
    static char empty[16];
    npy_intp dims[1];
    PyObject *arr, *mv;
    if (n > (size_t)PY_SSIZE_T_MAX) {
        PyErr_SetString(PyExc_OverflowError, "as_buffer(): size is too big");
        return NULL;
    }
    dims[0] = (npy_intp)n;
    arr = PyArray_New(&PyArray_Type, 1, dims, NPY_UINT8, NULL, n ? (void *)p : (void *)empty, 0,
                      NPY_ARRAY_CARRAY, NULL);
    if (arr == NULL)
        return NULL;
    Py_INCREF(owner);
    if (PyArray_SetBaseObject((PyArrayObject *)arr, owner) < 0) { /* steals owner */
        Py_DECREF(arr);
        return NULL;
    }
    mv = PyMemoryView_FromObject(arr);
    Py_DECREF(arr);
    return mv;
}

/* size and offset of as_buffer(size, offset=0), within cap bytes */
static int
view_extent(PyObject *sobj, PyObject *oobj, size_t cap, size_t *size, size_t *offset)
{
    *offset = 0;
    if (pygpu_parse_nbytes(sobj, size, "as_buffer(): size") < 0
        || (oobj != NULL && pygpu_parse_nbytes(oobj, offset, "as_buffer(): offset") < 0))
        return -1;
    if (cap != (size_t)-1 && (*offset > cap || *size > cap - *offset)) {
        PyErr_Format(PyExc_ValueError,
                     "as_buffer(): %zu bytes at offset %zu do not fit in "
                     "the allocation's %zu bytes",
                     *size, *offset, cap);
        return -1;
    }
    return 0;
}

/* Whether the driver says [p, p + n) is memory the host can read
 * (managed, or page-locked host memory): 1, 0, or -1 with an error.  The
 * range it knows (range_size) is checked too. */
static int
host_accessible(pygpu_state *st, CUdeviceptr p, size_t n)
{
    unsigned int managed = 0, mtype = 0;
    CUdeviceptr start = 0;
    size_t range = 0;
    if (pygpu_current_context(st) == NULL)
        return -1;
    if (cu.cuPointerGetAttribute(&managed, CU_POINTER_ATTRIBUTE_IS_MANAGED, p) != CUDA_SUCCESS
        || cu.cuPointerGetAttribute(&mtype, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, p) != CUDA_SUCCESS)
        return 0; /* not memory the driver knows */
    if (!managed && mtype != CU_MEMORYTYPE_HOST)
        return 0;
    if (cu.cuPointerGetAttribute(&start, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, p) == CUDA_SUCCESS
        && cu.cuPointerGetAttribute(&range, CU_POINTER_ATTRIBUTE_RANGE_SIZE, p) == CUDA_SUCCESS
        && range != 0 && (p - start > range || n > range - (p - start))) {
        PyErr_Format(PyExc_ValueError,
                     "as_buffer(): %zu bytes at 0x%llx run past the end "
                     "of the allocation (%zu bytes from 0x%llx)",
                     n, (unsigned long long)p, range, (unsigned long long)start);
        return -1;
    }
    return 1;
}

static const char not_host_accessible[] =
    "as_buffer(): the memory is device memory, which the host cannot read or write "
    "through a buffer; use managed memory (mem_alloc_managed(), managed_empty()) or "
    "copy it (memcpy_dtoh)";

/* as_buffer(size, offset=0): PyCUDA's buffer over the memory, for memory
 * the host can reach (managed) */
static PyObject *
allocation_as_buffer(pygpu_DeviceAllocation *self, PyObject *args, PyObject *kwds)
{
    pygpu_state *st = PYGPU_STATE(self);
    static char *kwlist[] = {"size", "offset", NULL};
    PyObject *sobj, *oobj = NULL;
    size_t size, offset;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O|O:as_buffer", kwlist, &sobj, &oobj))
        return NULL;
    if (pygpu_allocation_check(st, self) < 0
        || view_extent(sobj, oobj, self->size, &size, &offset) < 0)
        return NULL;
    if (self->kind != PYGPU_ALLOC_MANAGED) {
        int ok = self->size ? host_accessible(st, self->ptr, self->size) : 0;
        if (ok < 0)
            return NULL;
        if (!ok) {
            PyErr_SetString(st->LogicError, not_host_accessible);
            return NULL;
        }
    }
    /* host code may read it now: free() waits for this object's end */
    if (self->kind == PYGPU_ALLOC_MANAGED)
        self->host_view = 1;
    return host_view((PyObject *)self, (uintptr_t)self->ptr + offset, size);
}

/* _host_view(owner, address, size): as_buffer for PointerHolderBase */
static PyObject *
memory_host_view(PyObject *module, PyObject *args)
{
    pygpu_state *st = PyModule_GetState(module);
    PyObject *owner, *aobj, *sobj;
    size_t addr, size;
    int ok;
    if (!PyArg_ParseTuple(args, "OOO:_host_view", &owner, &aobj, &sobj))
        return NULL;
    if (pygpu_parse_nbytes(aobj, &addr, "as_buffer(): the address") < 0
        || pygpu_parse_nbytes(sobj, &size, "as_buffer(): size") < 0)
        return NULL;
    ok = host_accessible(st, (CUdeviceptr)addr, size);
    if (ok < 0)
        return NULL;
    if (!ok) {
        PyErr_SetString(st->LogicError, not_host_accessible);
        return NULL;
    }
    return host_view(owner, (uintptr_t)addr, size);
}

/* attach(mem_flags, stream=None): cuStreamAttachMemAsync of managed memory */
static PyObject *
allocation_attach(pygpu_DeviceAllocation *self, PyObject *args, PyObject *kwds)
{
    pygpu_state *st = PYGPU_STATE(self);
    static char *kwlist[] = {"mem_flags", "stream", NULL};
    PyObject *fobj, *sobj = Py_None;
    unsigned int flags;
    CUstream s = NULL;
    pygpu_scope scope;
    pygpu_pfn_cuStreamAttachMemAsync attach;
    CUresult rc;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O|O:attach", kwlist, &fobj, &sobj))
        return NULL;
    if (pygpu_parse_uint(fobj, &flags, "attach(): mem_flags") < 0
        || (sobj != Py_None && pygpu_get_stream(st, sobj, &s) < 0)
        || pygpu_allocation_check(st, self) < 0)
        return NULL;
    if (self->kind != PYGPU_ALLOC_MANAGED) {
        PyErr_SetString(st->LogicError, "attach(): the allocation is not managed memory "
                                        "(mem_alloc_managed(), managed_empty())");
        return NULL;
    }
    if (self->size == 0)
        Py_RETURN_NONE; /* no memory to attach */
    /* with no stream, the legacy default stream: refused while a blocking
     * stream of the context captures (it would invalidate the capture) */
    attach = PYGPU_CU_STREAM(st, cuStreamAttachMemAsync, s, 0, "attach()");
    if (attach == NULL)
        return NULL;
    if (pygpu_scope_enter(st, self->context, &scope) < 0)
        return NULL;
    rc = attach(s, self->ptr, 0, flags);
    pygpu_scope_exit(&scope);
    if (rc != CUDA_SUCCESS)
        return pygpu_cuda_error(st, rc, "cuStreamAttachMemAsync");
    Py_RETURN_NONE;
}

static PyObject *
allocation_get_device_pointer(pygpu_DeviceAllocation *self, PyObject *unused)
{
    return allocation_int(self);
}

static PyMethodDef allocation_methods[] = {
    {"free", (PyCFunction)allocation_free, METH_NOARGS,
     "free($self, /)\n--\n\nFree the memory now (idempotent).  While something holds "
     "the address for later use (a graph, a texture, a tensor map, an IPC export: see "
     "holders), the allocation reads as freed at once and the memory goes back when the "
     "last holder goes."},
    {"__enter__", allocation_enter, METH_NOARGS, "__enter__($self, /)\n--\n\nReturns self."},
    {"__exit__", (PyCFunction)allocation_exit, METH_VARARGS,
     "__exit__($self, /, *exc_info)\n--\n\nFree the memory."},
    {"as_buffer", (PyCFunction)(void (*)(void))allocation_as_buffer, METH_VARARGS | METH_KEYWORDS,
     "as_buffer($self, /, size, offset=0)\n--\n\nA writable memoryview of size bytes "
     "from offset, for memory the host can reach (managed memory); LogicError for "
     "device memory.  After it, free() waits for this object's end."},
    {"attach", (PyCFunction)(void (*)(void))allocation_attach, METH_VARARGS | METH_KEYWORDS,
     "attach($self, /, mem_flags, stream=None)\n--\n\nAttach managed memory to a stream "
     "(mem_attach_flags.GLOBAL, HOST or SINGLE; cuStreamAttachMemAsync)."},
    {"get_device_pointer", (PyCFunction)allocation_get_device_pointer, METH_NOARGS,
     "get_device_pointer($self, /)\n--\n\nThe device address (int(self)), as "
     "PyCUDA's ManagedAllocation gives it."},
    {NULL},
};

static PyGetSetDef allocation_getset[] = {
    {"__cuda_array_interface__", (getter)allocation_cai, NULL,
     "CUDA Array Interface v3: the allocation as a 1-D array of bytes.", NULL},
    {"size", (getter)allocation_get_size, NULL, "Size in bytes.", NULL},
    {"freed", (getter)allocation_get_freed, NULL, "Whether free() was called.", NULL},
    {"holders", (getter)allocation_get_holders, NULL,
     "Who keeps the address for later use (graph nodes, textures, tensor maps, IPC "
     "exports), a tuple of names; free() of held memory is deferred until the last "
     "holder goes.",
     NULL},
    {"context", (getter)allocation_get_context, NULL, "The owning Context.", NULL},
    {NULL},
};

static PyMemberDef allocation_members[] = {
    {"__weaklistoffset__", T_PYSSIZET, offsetof(pygpu_DeviceAllocation, weakreflist), READONLY},
    {NULL},
};

static PyType_Slot allocation_slots[] = {
    {Py_tp_dealloc, allocation_dealloc},
    {Py_tp_methods, allocation_methods},
    {Py_tp_getset, allocation_getset},
    {Py_tp_members, allocation_members},
    {Py_tp_repr, allocation_repr},
    {Py_nb_int, allocation_int},
    {Py_nb_index, allocation_int},
    {Py_tp_doc, "Device memory from mem_alloc(); freed when this object dies "
                "or at free(). int(a) is the device address."},
    {0, NULL},
};

static PyType_Spec allocation_spec = {
    "pygpu.driver.DeviceAllocation", sizeof(pygpu_DeviceAllocation), 0,
    Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE | Py_TPFLAGS_DISALLOW_INSTANTIATION
        | Py_TPFLAGS_BASETYPE, /* for IPCMemoryHandle and VirtualBuffer (C subtypes) */
    allocation_slots};

static PyObject *
mem_prefetch(PyObject *module, PyObject *args, PyObject *kwds)
{
    pygpu_state *st = PyModule_GetState(module);
    static char *kwlist[] = {"ptr", "size", "device", "stream", NULL};
    PyObject *pobj, *nobj, *sobj = Py_None;
    int device = -1;
    CUdeviceptr p;
    size_t cap, n;
    CUstream s;
    CUresult rc;
    CUmemLocation loc;
    pygpu_pfn_cuMemPrefetchAsync prefetch;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OO|iO:mem_prefetch", kwlist, &pobj, &nobj,
                                     &device, &sobj))
        return NULL;
    if (pygpu_allocation_ptr(st, pobj, &p, &cap) < 0 || pygpu_parse_nbytes(nobj, &n, "size") < 0
        || pygpu_get_stream(st, sobj, &s) < 0)
        return NULL;
    if (pygpu_check_fits(n, cap, "mem_prefetch()", "allocation") < 0)
        return NULL;
    if (pygpu_current_context(st) == NULL)
        return NULL;
    if (!PYGPU_CU_HAVE(STREAM, cuMemPrefetchAsync)) {
        PyErr_SetString(st->LogicError, "mem_prefetch() needs a CUDA 12.2+ driver");
        return NULL;
    }
    if ((prefetch = PYGPU_CU_STREAM(st, cuMemPrefetchAsync, s, 0, "mem_prefetch()")) == NULL)
        return NULL;
    memset(&loc, 0, sizeof loc);
    loc.type = device < 0 ? CU_MEM_LOCATION_TYPE_HOST : CU_MEM_LOCATION_TYPE_DEVICE;
    loc.id = device < 0 ? 0 : device;
    rc = prefetch(p, n, loc, 0, s);
    if (rc != CUDA_SUCCESS)
        return pygpu_cuda_error(st, rc, "cuMemPrefetchAsync");
    Py_RETURN_NONE;
}

#define KW (METH_VARARGS | METH_KEYWORDS)
#define FKW (METH_FASTCALL | METH_KEYWORDS)
#define CF(f) (PyCFunction)(void (*)(void))(f)
static PyMethodDef memory_methods[] = {
    {"_host_view", memory_host_view, METH_VARARGS,
     "_host_view($module, owner, address, size, /)\n--\n\nA memoryview of host-reachable "
     "memory (managed or page-locked) that keeps owner alive: PointerHolderBase.as_buffer."},
    {"mem_alloc", mem_alloc, METH_O,
     "mem_alloc($module, nbytes, /)\n--\n\n"
     "Allocate nbytes of device memory in the current context. On "
     "out-of-memory, garbage is collected once and the allocation retried."},
    {"mem_alloc_async", CF(mem_alloc_async), FKW,
     "mem_alloc_async($module, /, nbytes, stream=None)\n--\n\n"
     "Stream-ordered allocation from the device's default memory pool; freed "
     "on the same stream."},
    {"mem_alloc_managed", CF(mem_alloc_managed), KW,
     "mem_alloc_managed($module, /, nbytes, flags=mem_attach_flags.GLOBAL)\n--\n\n"
     "Managed (unified) memory."},
    {"mem_alloc_pitch", mem_alloc_pitch, METH_VARARGS,
     "mem_alloc_pitch($module, width, height, access_size, /)\n--\n\n"
     "Pitched 2-D allocation: returns (DeviceAllocation, pitch_in_bytes)."},
    {"mem_get_info", mem_get_info, METH_NOARGS,
     "mem_get_info($module, /)\n--\n\n(free, total) device memory in bytes."},
    {"mem_prefetch", CF(mem_prefetch), KW,
     "mem_prefetch($module, /, ptr, size, device=-1, stream=None)\n--\n\n"
     "Prefetch managed memory to a device ordinal (-1: to the host)."},
    {NULL},
};

int
pygpu_memory_setup(PyObject *m, pygpu_state *st)
{
    if (pygpu_add_type(m, &allocation_spec, &st->DeviceAllocationType) < 0)
        return -1;
    return PyModule_AddFunctions(m, memory_methods);
}

/* The array operators' allocation (fastops.c): n bytes on the default
 * stream from the block cache of ctx (the current context, as this thread
 * remembers it), as mem_alloc_async(n) takes them when a block of n's class
 * is cached.  1 and *res a new DeviceAllocation; 0 when no block is cached
 * or the cache does not apply (the caller calls the allocator, which
 * decides everything again); -1 with an exception set.  GIL held. */
int
pygpu_blockcache_allocation(pygpu_state *st, pygpu_Context *ctx, size_t n, PyObject **res)
{
    CUdeviceptr p = 0;
    size_t block;
    if (n == 0 || pygpu_captures_active != 0 || cu.cuMemAllocAsync == NULL)
        return 0;
    if ((block = pygpu_blockcache_class(n)) == (size_t)-1)
        return -1;
    if (block == 0 || !cacheable_stream(st, ctx, Py_None, NULL)
        || !pygpu_blockcache_take(ctx, NULL, block, &p))
        return 0;
    *res = async_allocation(st, ctx, p, n, block, NULL, Py_None);
    return *res == NULL ? -1 : 1;
}
