/* The block cache: freed device blocks kept on the host side for reuse, in
 * front of the driver's stream-ordered pool (docs/memory.md, "The block
 * cache").
 *
 * mem_alloc_async() (the array layer's default allocator) rounds a small
 * request up to a size class and takes a block of that class from its
 * context's cache when one is there; otherwise it allocates the class's
 * bytes from the pool.  When the allocation is freed, its block comes back
 * here instead of going to cuMemFreeAsync.  So a loop of small array
 * operations makes no allocation call to the driver in its steady state.
 *
 * Stream order: a block is kept under the stream it was freed on (the one
 * the allocation was made on) and handed out again only to an allocation
 * on that same stream, whose work is ordered after everything that used
 * the block before: the guarantee the driver's pool gives for same-stream
 * reuse.  Only streams whose lifetime pygpu knows are cached: the default
 * (legacy) stream and pygpu Streams that own their handle; a Stream gives
 * its blocks back to the pool before its handle is destroyed.  The
 * per-thread default stream and foreign streams are never cached.
 *
 * Size classes: 512-byte steps up to 8 KiB, then four classes per doubling
 * (at most 25% rounding).  Requests up to max_block bytes are cached
 * (default 1 MiB, PYGPU_BLOCK_CACHE_MAX); a context keeps at most `limit`
 * bytes of blocks (default 64 MiB, PYGPU_BLOCK_CACHE; 0 turns the cache
 * off).  Blocks go back to the pool on trim()/free_all(), when the pool is
 * out of memory (mem_alloc_async flushes and retries once), when their
 * stream is destroyed, and when the context is detached or released.
 *
 * Everything here runs with the GIL held; nothing calls Python code.
 */
#include "pygpu.h"
#include <limits.h>
#include <stdlib.h>

#define SMALL_STEP 512 /* bytes: the small classes' step */
#define SMALL_MAX 8192 /* the largest small class */
#define SMALL_CLASSES (SMALL_MAX / SMALL_STEP)
#define MAX_LOG 30 /* max_block <= 1 GiB */
/* classes above SMALL_MAX: 4 per doubling, for n in (2^b, 2^(b+1)], b = 13..MAX_LOG-1 */
#define NCLASSES (SMALL_CLASSES + 4 * (MAX_LOG - 13))

#define DEFAULT_LIMIT ((size_t)64 << 20)
#define DEFAULT_MAX_BLOCK ((size_t)1 << 20)
#define MAX_BLOCK_LIMIT ((size_t)1 << MAX_LOG)

typedef struct bc_block {
    CUdeviceptr ptr;
    struct bc_block *next;
} bc_block;

/* the blocks last freed on one stream */
typedef struct bc_stream {
    CUstream handle;
    struct bc_stream *next;
    Py_ssize_t blocks;
    bc_block *lists[NCLASSES]; /* owned: free blocks by class */
} bc_stream;

struct pygpu_blockcache {
    bc_stream *streams; /* owned list, newest first */
    size_t bytes;       /* cached bytes (class sizes) */
    Py_ssize_t blocks;
    unsigned long long hits, misses, returned, full, oom_flushes;
};

/* process-wide settings, read from the environment on first use */
static struct {
    int loaded;
    size_t limit;     /* per context; 0: the cache is off */
    size_t max_block; /* largest request cached */
} settings;

/* ---- size classes ---- */

static int
class_index(size_t n, size_t *size)
{
    int b;
    size_t step, m;
    if (n <= SMALL_MAX) {
        size_t k = (n + SMALL_STEP - 1) / SMALL_STEP;
        *size = k * SMALL_STEP;
        return (int)k - 1;
    }
    b = 63 - __builtin_clzll((unsigned long long)(n - 1)); /* 2^b < n <= 2^(b+1) */
    step = (size_t)1 << (b - 2);
    m = (n + step - 1) / step; /* 5..8 */
    *size = m * step;
    return SMALL_CLASSES + (b - 13) * 4 + (int)(m - 5);
}

static size_t
class_size(int idx)
{
    int j, b;
    if (idx < SMALL_CLASSES)
        return (size_t)(idx + 1) * SMALL_STEP;
    j = idx - SMALL_CLASSES;
    b = 13 + j / 4;
    return (size_t)(5 + j % 4) << (b - 2);
}

/* ---- settings ---- */

/* "<digits>[K|M|G][iB|B]" or "off"; -1 with ValueError naming the
 * variable. */
static int
env_bytes(const char *name, size_t dflt, size_t *out)
{
    const char *e = getenv(name), *p;
    unsigned long long v = 0, mul = 1;
    if (e == NULL || *e == '\0') {
        *out = dflt;
        return 0;
    }
    if (strcmp(e, "off") == 0 || strcmp(e, "OFF") == 0) {
        *out = 0;
        return 0;
    }
    for (p = e; *p == ' '; p++)
        ;
    if (*p < '0' || *p > '9')
        goto bad;
    for (; *p >= '0' && *p <= '9'; p++) {
        if (v > (ULLONG_MAX - 9) / 10)
            goto bad;
        v = v * 10 + (unsigned long long)(*p - '0');
    }
    switch (*p) {
    case 'k':
    case 'K':
        mul = 1ull << 10;
        p++;
        break;
    case 'm':
    case 'M':
        mul = 1ull << 20;
        p++;
        break;
    case 'g':
    case 'G':
        mul = 1ull << 30;
        p++;
        break;
    default: break;
    }
    if (mul > 1 && (*p == 'i' || *p == 'I'))
        p++;
    if (*p == 'b' || *p == 'B')
        p++;
    while (*p == ' ')
        p++;
    if (*p != '\0' || (v != 0 && mul > ULLONG_MAX / v) || v * mul > (unsigned long long)SIZE_MAX)
        goto bad;
    *out = (size_t)(v * mul);
    return 0;
bad:
    PyErr_Format(PyExc_ValueError,
                 "environment variable %s='%.100s' is not a byte count "
                 "(digits, optionally followed by K, M or G; or off)",
                 name, e);
    return -1;
}

static int
check_max_block(size_t v, const char *what)
{
    if (v > MAX_BLOCK_LIMIT) {
        PyErr_Format(PyExc_ValueError,
                     "%s: max_block=%zu is larger than the largest cached "
                     "size, %zu bytes (1 GiB)",
                     what, v, (size_t)MAX_BLOCK_LIMIT);
        return -1;
    }
    return 0;
}

static int
settings_load(void)
{
    size_t limit, max_block;
    if (settings.loaded)
        return 0;
    if (env_bytes("PYGPU_BLOCK_CACHE", DEFAULT_LIMIT, &limit) < 0
        || env_bytes("PYGPU_BLOCK_CACHE_MAX", DEFAULT_MAX_BLOCK, &max_block) < 0
        || check_max_block(max_block, "PYGPU_BLOCK_CACHE_MAX") < 0)
        return -1;
    settings.limit = limit;
    settings.max_block = max_block;
    settings.loaded = 1;
    return 0;
}

/* the class bytes of the largest cached request (0: nothing is cached) */
static size_t
largest_class(void)
{
    size_t size = 0;
    if (settings.limit == 0 || settings.max_block == 0)
        return 0;
    (void)class_index(settings.max_block, &size);
    return size;
}

size_t
pygpu_blockcache_class(size_t n)
{
    size_t size;
    if (!settings.loaded && settings_load() < 0)
        return (size_t)-1;
    if (n == 0 || n > settings.max_block || settings.limit == 0)
        return 0;
    (void)class_index(n, &size);
    return size;
}

/* ---- the cache ---- */

static bc_stream *
find_stream(struct pygpu_blockcache *c, CUstream s)
{
    bc_stream *b;
    for (b = c->streams; b != NULL; b = b->next)
        if (b->handle == s)
            return b;
    return NULL;
}

static int
get_block(pygpu_Context *ctx, CUstream s, size_t size, CUdeviceptr *ptr, int count_miss)
{
    struct pygpu_blockcache *c = ctx->blocks;
    bc_stream *b;
    bc_block *k;
    int idx;
    size_t csize;
    if (c == NULL) {
        /* made on first use; a failed malloc only means no caching */
        if ((c = PyMem_Calloc(1, sizeof *c)) == NULL)
            return 0;
        ctx->blocks = c;
    }
    idx = class_index(size, &csize);
    if (csize != size || idx >= NCLASSES || (b = find_stream(c, s)) == NULL
        || (k = b->lists[idx]) == NULL) {
        if (count_miss)
            c->misses++;
        return 0;
    }
    b->lists[idx] = k->next;
    b->blocks--;
    c->blocks--;
    c->bytes -= size;
    c->hits++;
    *ptr = k->ptr;
    PyMem_Free(k);
    return 1;
}

int
pygpu_blockcache_get(pygpu_Context *ctx, CUstream s, size_t size, CUdeviceptr *ptr)
{
    return get_block(ctx, s, size, ptr, 1);
}

/* the array operators' try (fastops.c): a miss is not counted, as the
 * allocator it then calls counts it */
int
pygpu_blockcache_take(pygpu_Context *ctx, CUstream s, size_t size, CUdeviceptr *ptr)
{
    return get_block(ctx, s, size, ptr, 0);
}

int
pygpu_blockcache_put(pygpu_Context *ctx, CUstream s, CUdeviceptr ptr, size_t size)
{
    struct pygpu_blockcache *c = ctx->blocks;
    bc_stream *b;
    bc_block *k;
    int idx;
    size_t csize;
    if (c == NULL || ctx->detached || size > largest_class())
        return 0;
    idx = class_index(size, &csize);
    if (csize != size || idx >= NCLASSES)
        return 0;
    if (c->bytes + size > settings.limit) {
        c->full++;
        return 0;
    }
    if ((b = find_stream(c, s)) == NULL) {
        if ((b = PyMem_Calloc(1, sizeof *b)) == NULL)
            return 0;
        b->handle = s;
        b->next = c->streams;
        c->streams = b;
    }
    if ((k = PyMem_Malloc(sizeof *k)) == NULL)
        return 0;
    k->ptr = ptr;
    k->next = b->lists[idx];
    b->lists[idx] = k;
    b->blocks++;
    c->blocks++;
    c->bytes += size;
    return 1;
}

/* Give one block back to the pool on stream s (ctx current).  A free that
 * would break a capture pygpu runs (s captures, or s is the legacy stream
 * while a blocking stream of ctx captures) waits for the capture's end
 * (graph.c) when ctx is alive; otherwise it runs with this thread's capture
 * mode relaxed. */
static void
free_block(pygpu_Context *ctx, CUstream s, CUdeviceptr p, int alive)
{
    CUstreamCaptureMode m;
    if (cu.cuMemFreeAsync == NULL)
        return;
    if (alive && pygpu_capture_defer_free(ctx, p, s, NULL))
        return;
    m = pygpu_capture_relax();
    (void)cu.cuMemFreeAsync(p, s);
    pygpu_capture_restore(m);
}

/* Free bucket b's blocks of classes above `above` (bytes; 0: all), or
 * until the cache holds at most keep bytes.  Returns blocks freed. */
static Py_ssize_t
bucket_trim(pygpu_Context *ctx, bc_stream *b, size_t above, size_t keep, int alive)
{
    struct pygpu_blockcache *c = ctx->blocks;
    Py_ssize_t n = 0;
    int idx;
    for (idx = NCLASSES - 1; idx >= 0; idx--) {
        size_t size = class_size(idx);
        bc_block *k;
        if (above != 0 && size <= above)
            break;
        while ((k = b->lists[idx]) != NULL && (above != 0 || c->bytes > keep)) {
            b->lists[idx] = k->next;
            b->blocks--;
            c->blocks--;
            c->bytes -= size;
            c->returned++;
            free_block(ctx, b->handle, k->ptr, alive);
            PyMem_Free(k);
            n++;
        }
    }
    return n;
}

/* Free the empty buckets. */
static void
drop_empty(struct pygpu_blockcache *c)
{
    bc_stream **p = &c->streams, *b;
    while ((b = *p) != NULL) {
        if (b->blocks == 0) {
            *p = b->next;
            PyMem_Free(b);
        } else {
            p = &b->next;
        }
    }
}

static Py_ssize_t
trim(pygpu_Context *ctx, size_t keep, int alive)
{
    struct pygpu_blockcache *c = ctx->blocks;
    size_t largest = largest_class();
    Py_ssize_t n = 0;
    bc_stream *b;
    if (c == NULL)
        return 0;
    /* first what the settings no longer allow, then down to keep */
    if (largest != 0)
        for (b = c->streams; b != NULL; b = b->next)
            n += bucket_trim(ctx, b, largest, 0, alive);
    for (b = c->streams; b != NULL && c->bytes > keep; b = b->next)
        n += bucket_trim(ctx, b, 0, keep, alive);
    drop_empty(c);
    return n;
}

Py_ssize_t
pygpu_blockcache_trim(pygpu_Context *ctx, size_t keep)
{
    return trim(ctx, keep, 1);
}

Py_ssize_t
pygpu_blockcache_flush_oom(pygpu_Context *ctx)
{
    struct pygpu_blockcache *c = ctx->blocks;
    if (c == NULL || c->blocks == 0)
        return 0;
    c->oom_flushes++;
    return trim(ctx, 0, 1);
}

void
pygpu_blockcache_drop_stream(pygpu_Context *ctx, CUstream s)
{
    struct pygpu_blockcache *c;
    bc_stream *b;
    if (ctx == NULL || (c = ctx->blocks) == NULL || (b = find_stream(c, s)) == NULL)
        return;
    (void)bucket_trim(ctx, b, 0, 0, 0);
    drop_empty(c);
}

/* Free the bookkeeping of every block left, without driver calls. */
static void
forget_all(struct pygpu_blockcache *c)
{
    bc_stream *b;
    int idx;
    while ((b = c->streams) != NULL) {
        c->streams = b->next;
        for (idx = 0; idx < NCLASSES; idx++) {
            bc_block *k;
            while ((k = b->lists[idx]) != NULL) {
                b->lists[idx] = k->next;
                PyMem_Free(k);
            }
        }
        PyMem_Free(b);
    }
    c->bytes = 0;
    c->blocks = 0;
}

void
pygpu_blockcache_release(pygpu_Context *ctx)
{
    struct pygpu_blockcache *c = ctx->blocks;
    if (c == NULL)
        return;
    (void)trim(ctx, 0, 0);
    forget_all(c);
    ctx->blocks = NULL;
    PyMem_Free(c);
}

void
pygpu_blockcache_drop(pygpu_Context *ctx)
{
    struct pygpu_blockcache *c = ctx->blocks;
    if (c == NULL)
        return;
    forget_all(c);
    ctx->blocks = NULL;
    PyMem_Free(c);
}

/* ---- Python: pygpu.driver.block_cache() and the settings ---- */

/* the Context argument: a Context, or None for the current one (NULL and
 * *ctx NULL: every context pygpu knows, when any is allowed) */
static int
context_arg(pygpu_state *st, PyObject *obj, int any, pygpu_Context **ctx, const char *what)
{
    *ctx = NULL;
    if (obj == Py_None) {
        if (any)
            return 0;
        return (*ctx = pygpu_current_context_known(st)) == NULL ? -1 : 0;
    }
    if (!PyObject_TypeCheck(obj, st->ContextType)) {
        PyErr_Format(PyExc_TypeError, "%s: context must be a Context or None, not %.100s", what,
                     Py_TYPE(obj)->tp_name);
        return -1;
    }
    *ctx = (pygpu_Context *)obj;
    return 0;
}

/* trim one live context in its own context; blocks given back, -1 on error */
static Py_ssize_t
trim_in(pygpu_state *st, pygpu_Context *ctx, size_t keep)
{
    pygpu_scope s;
    Py_ssize_t n;
    if (ctx->blocks == NULL || ctx->blocks->blocks == 0 || ctx->detached)
        return 0;
    if (pygpu_scope_enter(st, ctx, &s) < 0)
        return -1;
    n = trim(ctx, keep, 1);
    pygpu_scope_exit(&s);
    return n;
}

PyDoc_STRVAR(bc_trim_doc,
             "_block_cache_trim(context=None, keep=0)\n--\n\n"
             "Give the block cache's blocks back to the driver's pool (cuMemFreeAsync on\n"
             "the stream each was freed on) until at most keep bytes stay cached; blocks\n"
             "the settings no longer allow go too.  context None: every context pygpu\n"
             "knows.  Returns the number of blocks given back.");

static PyObject *
bc_trim(PyObject *module, PyObject *args, PyObject *kwds)
{
    pygpu_state *st = PyModule_GetState(module);
    static char *kwlist[] = {"context", "keep", NULL};
    PyObject *cobj = Py_None, *kobj = NULL, *k, *v;
    pygpu_Context *ctx, *o;
    Py_ssize_t n = 0, r, pos = 0;
    size_t keep = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|OO:_block_cache_trim", kwlist, &cobj, &kobj))
        return NULL;
    if (kobj != NULL && kobj != Py_None) {
        if (!PyLong_Check(kobj) || PyBool_Check(kobj)) {
            PyErr_Format(PyExc_TypeError, "trim(): keep must be an int, not %.100s",
                         Py_TYPE(kobj)->tp_name);
            return NULL;
        }
        keep = PyLong_AsSize_t(kobj);
        if (keep == (size_t)-1 && PyErr_Occurred()) {
            PyErr_Clear();
            PyErr_Format(PyExc_ValueError, "trim(): keep must be a byte count >= 0, not %R", kobj);
            return NULL;
        }
    }
    if (settings_load() < 0 || context_arg(st, cobj, 1, &ctx, "trim()") < 0)
        return NULL;
    if (ctx != NULL) {
        n = trim_in(st, ctx, keep);
        return n < 0 ? NULL : PyLong_FromSsize_t(n);
    }
    /* every context: the primary ones, then those made by make_context()
     * (foreign contexts never cache).  trim runs no Python code, so the
     * dict and the list stay as they are while walked. */
    if (st->primary_contexts != NULL) {
        while (PyDict_Next(st->primary_contexts, &pos, &k, &v)) {
            if ((r = trim_in(st, (pygpu_Context *)v, keep)) < 0)
                return NULL;
            n += r;
        }
    }
    for (o = st->other_contexts; o != NULL; o = o->next_other) {
        if ((r = trim_in(st, o, keep)) < 0)
            return NULL;
        n += r;
    }
    return PyLong_FromSsize_t(n);
}

PyDoc_STRVAR(bc_stats_doc,
             "_block_cache_stats(context=None)\n--\n\n"
             "The block cache of context (None: the current one) as a dict: hits,\n"
             "misses, cached_bytes, cached_blocks, returned_blocks (given back to the\n"
             "pool), full (frees not kept: the cache was at its limit), oom_flushes,\n"
             "limit, max_block.");

static PyObject *
bc_stats(PyObject *module, PyObject *args, PyObject *kwds)
{
    pygpu_state *st = PyModule_GetState(module);
    static char *kwlist[] = {"context", NULL};
    PyObject *cobj = Py_None;
    pygpu_Context *ctx;
    struct pygpu_blockcache zero = {0}, *c;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|O:_block_cache_stats", kwlist, &cobj))
        return NULL;
    if (settings_load() < 0 || context_arg(st, cobj, 0, &ctx, "stats()") < 0)
        return NULL;
    c = ctx->blocks != NULL ? ctx->blocks : &zero;
    return Py_BuildValue("{sKsKsnsnsKsKsKsnsn}", "hits", c->hits, "misses", c->misses,
                         "cached_bytes", (Py_ssize_t)c->bytes, "cached_blocks", c->blocks,
                         "returned_blocks", c->returned, "full", c->full, "oom_flushes",
                         c->oom_flushes, "limit", (Py_ssize_t)settings.limit, "max_block",
                         (Py_ssize_t)settings.max_block);
}

/* an int >= 0 (a byte count) from obj; -1 with TypeError/ValueError */
static int
get_bytes(PyObject *obj, const char *what, size_t *out)
{
    if (!PyLong_Check(obj) || PyBool_Check(obj)) {
        PyErr_Format(PyExc_TypeError, "set_block_cache(): %s must be an int, not %.100s", what,
                     Py_TYPE(obj)->tp_name);
        return -1;
    }
    *out = PyLong_AsSize_t(obj);
    if (*out == (size_t)-1 && PyErr_Occurred()) {
        PyErr_Clear();
        PyErr_Format(PyExc_ValueError,
                     "set_block_cache(): %s must be a byte count >= 0, "
                     "not %R",
                     what, obj);
        return -1;
    }
    return 0;
}

PyDoc_STRVAR(bc_set_doc,
             "_set_block_cache(limit=None, max_block=None)\n--\n\n"
             "Change the block cache's settings (None keeps one) and return the previous\n"
             "ones as (limit, max_block): limit, the bytes of blocks each context keeps\n"
             "(0 turns the cache off); max_block, the largest request cached (at most\n"
             "1 GiB).  Blocks already cached stay until trimmed.");

static PyObject *
bc_set(PyObject *module, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"limit", "max_block", NULL};
    PyObject *lobj = Py_None, *mobj = Py_None, *old;
    size_t limit, max_block;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|OO:_set_block_cache", kwlist, &lobj, &mobj))
        return NULL;
    if (settings_load() < 0)
        return NULL;
    limit = settings.limit;
    max_block = settings.max_block;
    if ((lobj != Py_None && get_bytes(lobj, "limit", &limit) < 0)
        || (mobj != Py_None && get_bytes(mobj, "max_block", &max_block) < 0)
        || check_max_block(max_block, "set_block_cache()") < 0)
        return NULL;
    old = Py_BuildValue("(nn)", (Py_ssize_t)settings.limit, (Py_ssize_t)settings.max_block);
    if (old == NULL)
        return NULL;
    settings.limit = limit;
    settings.max_block = max_block;
    return old;
}

PyDoc_STRVAR(bc_get_doc, "_block_cache_settings()\n--\n\n"
                         "The block cache's settings: (limit, max_block).");

static PyObject *
bc_get(PyObject *module, PyObject *unused)
{
    if (settings_load() < 0)
        return NULL;
    return Py_BuildValue("(nn)", (Py_ssize_t)settings.limit, (Py_ssize_t)settings.max_block);
}

static PyMethodDef blockcache_methods[] = {
    {"_block_cache_trim", (PyCFunction)(void (*)(void))bc_trim, METH_VARARGS | METH_KEYWORDS,
     bc_trim_doc},
    {"_block_cache_stats", (PyCFunction)(void (*)(void))bc_stats, METH_VARARGS | METH_KEYWORDS,
     bc_stats_doc},
    {"_set_block_cache", (PyCFunction)(void (*)(void))bc_set, METH_VARARGS | METH_KEYWORDS,
     bc_set_doc},
    {"_block_cache_settings", bc_get, METH_NOARGS, bc_get_doc},
    {NULL},
};

int
pygpu_blockcache_setup(PyObject *m, pygpu_state *st)
{
    (void)st;
    return PyModule_AddFunctions(m, blockcache_methods);
}
