/* The one hold protocol.
 *
 * Everything that keeps a device address for later use registers a hold on
 * the allocation that owns the address: graph nodes (kernel arguments,
 * memcpy, memset), captured graphs, texture and surface objects, tensor
 * maps, IPC exports.  A hold is a record in the allocation's `holds` list;
 * the holder owns it through a token (a capsule, kept wherever the holder
 * keeps what it references: a Graph's `keep` list, a TextureObject's field)
 * and the hold ends when the token dies.
 *
 * The rule, the same for a DeviceAllocation (and its subtypes) and an
 * Array: free() of held memory is deferred.  The object is marked freed at
 * once, so no new use starts (a launch, a copy, a new node, a new texture
 * raise LogicError), and the memory goes back to the driver when the last
 * holder goes.  A replay of a graph whose allocation was freed therefore
 * reads and writes live memory, never freed memory.  `holders` names them.
 *
 * GIL held throughout.
 */
#include "pygpu.h"

#define HOLD_CAPSULE "pygpu.hold"

struct pygpu_hold {
    PyObject *target;  /* strong unless forever: DeviceAllocation or Array */
    pygpu_hold **list; /* the target's `holds` field */
    int is_array;      /* target is an Array */
    int forever;       /* owned by the target itself (dropped at its dealloc) */
    char what[112];    /* the holder's name */
    struct pygpu_hold *prev, *next;
};

/* The holds list of target, NULL (TypeError) when it is neither kind. */
static pygpu_hold **
holds_of(pygpu_state *st, PyObject *target, int *is_array)
{
    if (pygpu_is_allocation(st, target)) {
        *is_array = 0;
        return &((pygpu_DeviceAllocation *)target)->holds;
    }
    if (PyObject_TypeCheck(target, st->ArrayType)) {
        *is_array = 1;
        return &((pygpu_Array *)target)->holds;
    }
    PyErr_Format(PyExc_TypeError, "a %.100s holds no device memory", Py_TYPE(target)->tp_name);
    return NULL;
}

/* LogicError when target may not gain a holder (freed, or detached). */
static int
hold_check(pygpu_state *st, PyObject *target, int is_array, const char *what)
{
    if (is_array)
        return pygpu_array_check(st, (pygpu_Array *)target);
    {
        pygpu_DeviceAllocation *a = (pygpu_DeviceAllocation *)target;
        if (a->freed == 2 || (a->context != NULL && a->context->detached)) {
            PyErr_Format(st->LogicError,
                         "%s: the DeviceAllocation's context was detached: "
                         "its memory is gone",
                         what);
            return -1;
        }
        if (a->freed) {
            PyErr_Format(st->LogicError, "%s: the DeviceAllocation was freed", what);
            return -1;
        }
    }
    return 0;
}

static pygpu_hold *
hold_add(pygpu_state *st, PyObject *target, const char *what, int forever)
{
    int is_array;
    pygpu_hold **list = holds_of(st, target, &is_array), *h;
    if (list == NULL || hold_check(st, target, is_array, what) < 0)
        return NULL;
    if ((h = PyMem_Calloc(1, sizeof *h)) == NULL) {
        PyErr_NoMemory();
        return NULL;
    }
    h->target = target;
    if (!forever)
        Py_INCREF(target);
    if (!is_array)
        /* held memory is never cached for reuse (blockcache.c): its free
         * goes to the driver, as it did before the cache */
        ((pygpu_DeviceAllocation *)target)->block = 0;
    h->list = list;
    h->is_array = is_array;
    h->forever = forever;
    PyOS_snprintf(h->what, sizeof h->what, "%s", what);
    /* appended: holders() lists them in the order they came */
    if (*list == NULL) {
        *list = h;
    } else {
        pygpu_hold *last = *list;
        while (last->next != NULL)
            last = last->next;
        last->next = h;
        h->prev = last;
    }
    return h;
}

/* End hold h: unlink it; the last one carries out a deferred free(). */
static void
hold_end(pygpu_hold *h)
{
    PyObject *target = h->target;
    if (h->prev != NULL)
        h->prev->next = h->next;
    else
        *h->list = h->next;
    if (h->next != NULL)
        h->next->prev = h->prev;
    if (*h->list == NULL && !h->forever) {
        if (h->is_array)
            pygpu_array_holds_gone((pygpu_Array *)target);
        else
            pygpu_allocation_holds_gone((pygpu_DeviceAllocation *)target);
    }
    if (!h->forever)
        Py_DECREF(target);
    PyMem_Free(h);
}

static void
hold_capsule_destroy(PyObject *cap)
{
    pygpu_hold *h = PyCapsule_GetPointer(cap, HOLD_CAPSULE);
    if (h != NULL)
        hold_end(h);
    else
        PyErr_Clear();
}

PyObject *
pygpu_hold_new(pygpu_state *st, PyObject *target, const char *what)
{
    pygpu_hold *h = hold_add(st, target, what, 0);
    PyObject *cap;
    if (h == NULL)
        return NULL;
    cap = PyCapsule_New(h, HOLD_CAPSULE, hold_capsule_destroy);
    if (cap == NULL)
        hold_end(h);
    return cap;
}

int
pygpu_hold_forever(pygpu_state *st, PyObject *target, const char *what)
{
    int is_array;
    pygpu_hold **list = holds_of(st, target, &is_array), *h;
    if (list == NULL)
        return -1;
    for (h = *list; h != NULL; h = h->next)
        if (h->forever && strcmp(h->what, what) == 0)
            return 0; /* one is enough */
    return hold_add(st, target, what, 1) == NULL ? -1 : 0;
}

void
pygpu_holds_drop(pygpu_hold **list)
{
    pygpu_hold *h = *list, *next;
    /* only holds the target owns can be left when it dies (the others keep
     * it alive) */
    for (; h != NULL; h = next) {
        next = h->next;
        PyMem_Free(h);
    }
    *list = NULL;
}

Py_ssize_t
pygpu_holds_count(pygpu_hold *list)
{
    Py_ssize_t n = 0;
    for (; list != NULL; list = list->next)
        n++;
    return n;
}

PyObject *
pygpu_holders(pygpu_hold *list)
{
    PyObject *t = PyTuple_New(pygpu_holds_count(list));
    Py_ssize_t i = 0;
    if (t == NULL)
        return NULL;
    for (; list != NULL; list = list->next, i++) {
        PyObject *s = PyUnicode_FromString(list->what);
        if (s == NULL) {
            Py_DECREF(t);
            return NULL;
        }
        PyTuple_SET_ITEM(t, i, s);
    }
    return t;
}

/* The live allocation of ctx that contains address p (an owning kind
 * first: a borrowed view's owner is what frees), or NULL. */
static pygpu_DeviceAllocation *
find_in(pygpu_Context *ctx, CUdeviceptr p)
{
    pygpu_DeviceAllocation *a, *borrowed = NULL;
    if (ctx == NULL || ctx->detached)
        return NULL;
    for (a = ctx->allocations; a != NULL; a = a->ctx_next) {
        if (a->freed || a->size == 0 || p < a->ptr || p - a->ptr >= a->size)
            continue;
        if (a->kind != PYGPU_ALLOC_BORROWED)
            return a;
        if (borrowed == NULL)
            borrowed = a;
    }
    return borrowed;
}

/* The live pygpu allocation containing p, in any context, or NULL. */
static pygpu_DeviceAllocation *
find_allocation(pygpu_state *st, CUdeviceptr p)
{
    pygpu_DeviceAllocation *a;
    pygpu_Context *c;
    PyObject *key, *value;
    Py_ssize_t pos = 0;
    if (p == 0)
        return NULL;
    if (st->primary_contexts != NULL)
        while (PyDict_Next(st->primary_contexts, &pos, &key, &value))
            if ((a = find_in((pygpu_Context *)value, p)) != NULL)
                return a;
    for (c = st->other_contexts; c != NULL; c = c->next_other)
        if ((a = find_in(c, p)) != NULL)
            return a;
    pos = 0;
    if (st->foreign_contexts != NULL)
        while (PyDict_Next(st->foreign_contexts, &pos, &key, &value))
            if ((a = find_in((pygpu_Context *)value, p)) != NULL)
                return a;
    return NULL;
}

PyObject *
pygpu_hold_arg(pygpu_state *st, PyObject *obj, const char *what)
{
    PyObject *cai;
    CUdeviceptr p = 0;
    pygpu_DeviceAllocation *a;
    int r;
    if (pygpu_is_allocation(st, obj))
        return pygpu_hold_new(st, obj, what);
    if (PyObject_TypeCheck(obj, st->ArrayType))
        return pygpu_hold_new(st, obj, what);
    /* the cheap refusals first: numbers, None, the stream and texture types */
    if (obj == Py_None || PyLong_Check(obj) || PyFloat_Check(obj) || PyComplex_Check(obj)
        || PyBytes_Check(obj) || PyUnicode_Check(obj))
        Py_RETURN_NONE;
    r = pygpu_getattr_opt(obj, st->str_cai, &cai);
    if (r < 0)
        return NULL;
    if (r == 0)
        Py_RETURN_NONE; /* DLPack and other memory: the caller's to keep */
    if (PyDict_Check(cai)) {
        PyObject *data = PyDict_GetItemString(cai, "data");
        if (data != NULL && PyTuple_Check(data) && PyTuple_GET_SIZE(data) >= 1) {
            p = (CUdeviceptr)PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(data, 0));
            if (PyErr_Occurred()) {
                PyErr_Clear();
                p = 0;
            }
        }
    }
    Py_DECREF(cai);
    if ((a = find_allocation(st, p)) == NULL)
        Py_RETURN_NONE;
    return pygpu_hold_new(st, (PyObject *)a, what);
}

PyObject *
pygpu_hold_args(pygpu_state *st, PyObject *const *args, Py_ssize_t n, const char *what)
{
    PyObject *list = PyList_New(0);
    Py_ssize_t i;
    if (list == NULL)
        return NULL;
    for (i = 0; i < n; i++) {
        PyObject *t = pygpu_hold_arg(st, args[i], what);
        if (t == NULL || (t != Py_None && PyList_Append(list, t) < 0)) {
            Py_XDECREF(t);
            Py_DECREF(list);
            return NULL;
        }
        Py_DECREF(t);
    }
    return list;
}

PyObject *
pygpu_hold_address(pygpu_state *st, PyObject *obj, const char *what)
{
    pygpu_DeviceAllocation *a;
    CUdeviceptr p;
    if (!PyLong_Check(obj) || PyBool_Check(obj))
        return pygpu_hold_arg(st, obj, what);
    p = (CUdeviceptr)PyLong_AsUnsignedLongLong(obj);
    if (p == (CUdeviceptr)-1 && PyErr_Occurred()) {
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    if ((a = find_allocation(st, p)) == NULL)
        Py_RETURN_NONE;
    return pygpu_hold_new(st, (PyObject *)a, what);
}

/* ---- context detach and host views ----
 *
 * Detach frees a context's memory, but host code may still read some of it
 * through a view that keeps its owner alive: a managed array
 * (managed_empty(), its .base the allocation), an as_buffer() memoryview,
 * a page-locked array (pagelocked_empty(), its .base the HostAllocation).
 * The decision, one place for all of them:
 *   - a copy into the context's memory running with the GIL released (a
 *     pin): refuse the detach (LogicError), nothing done;
 *   - memory no view can reach: freed now;
 *   - memory a live host view reaches: kept, read-only to the GPU side (the
 *     allocation reads as detached: no launch, copy or new view starts), and
 *     the release of the context itself is deferred until the last such view
 *     dies, which frees that memory and then releases the context.
 * So detach never frees memory under a live host view. */

/* 1 when host code may still read a's memory through a view of it */
static int
host_viewed(const pygpu_DeviceAllocation *a)
{
    return a->host_view && (a->freed == 0 || a->free_pending);
}

int
pygpu_lifetime_detach(pygpu_state *st, pygpu_Context *ctx)
{
    pygpu_DeviceAllocation *a, *next;
    int kept = 0;
    if (ctx->arrays_busy > 0) {
        PyErr_SetString(st->LogicError, "detach(): a copy into memory of this context is running "
                                        "in another thread; detach after it ends");
        return -1;
    }
    for (a = ctx->allocations; a != NULL; a = a->ctx_next) {
        if (a->busy > 0) {
            PyErr_SetString(st->LogicError,
                            "detach(): a copy into memory of this context is running in "
                            "another thread; detach after it ends");
            return -1;
        }
    }
    for (a = ctx->allocations; a != NULL; a = next) {
        next = a->ctx_next;
        if (host_viewed(a)) {
            /* kept for its views; its dealloc frees it (free_pending) */
            a->freed = 2;
            a->free_pending = 1;
            kept++;
            continue;
        }
        {
            /* a free() deferred for holders: the memory is still there */
            int was_freed = a->freed && !a->free_pending;
            a->freed = 2;
            a->free_pending = 0;
            if (was_freed)
                pygpu_allocation_unlink(a);
            else
                pygpu_allocation_free_memory(a); /* unlinks it */
        }
    }
    return kept + (ctx->host_allocs > 0);
}

int
pygpu_lifetime_enter(pygpu_Context *ctx, pygpu_scope *s)
{
    if (ctx != NULL && ctx->release_deferred) {
        /* detached, its handle kept for the host views: enter it as it is */
        s->ctx = NULL;
        s->pushed = 0;
        if (pygpu_context_enter(ctx, &s->pushed) != CUDA_SUCCESS)
            return -1;
        Py_INCREF(ctx);
        s->ctx = ctx;
        return 0;
    }
    return pygpu_scope_enter_quiet(ctx, s);
}

void
pygpu_lifetime_view_gone(pygpu_Context *ctx)
{
    pygpu_DeviceAllocation *a;
    if (!ctx->release_deferred || ctx->host_allocs > 0)
        return;
    for (a = ctx->allocations; a != NULL; a = a->ctx_next)
        if (host_viewed(a) || a->free_pending)
            return;
    pygpu_context_release_deferred(ctx);
}
