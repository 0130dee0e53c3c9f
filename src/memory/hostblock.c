/* HostBlock: a private anonymous host mapping that starts on a 2 MiB
 * boundary and is marked MADV_HUGEPAGE, exported through the buffer
 * protocol (writable bytes).  GPUArray.get() of 32 MiB or more puts its new
 * array over one (pygpu/gpuarray.py, _host_empty), so the staged copy's
 * pieces start on huge pages (docs/memory.md, "Pageable copies").
 *
 * A fresh mapping's pages are faulted in (and zeroed by the kernel) by the
 * first copy into it, which bounds a .get() into a new array far below the
 * copy's rate.  So a dead block's mapping is not unmapped but kept, pages
 * in, in a bounded process-wide cache keyed by its length (the size rounded
 * up to 2 MiB), and the next block of that length takes it: the copy then
 * runs at the rate of a reused destination.  At most max_blocks mappings
 * and max_bytes bytes are kept (PYGPU_HOST_CACHE_BYTES, set_host_cache();
 * 0 bytes turns the cache off); beyond that the least recently freed ones
 * are unmapped.  free_host_cache() unmaps them all; so does interpreter
 * exit and, in the child, os.fork().
 *
 * A recycled mapping is NOT zeroed: it holds what its last user left.  A
 * block is only for code that writes every byte it exports before anything
 * reads it (get() does: the copy covers the whole array, and an array whose
 * copy failed is never returned).  The exported length is the size asked
 * for, not the mapping's, so the rounding's tail is never visible.
 *
 * Thread safety: every use of the cache (and of the counters) runs with the
 * GIL held; the GIL is released only around mmap/munmap of mappings the
 * cache no longer lists.  A free-threaded build (Py_GIL_DISABLED) would
 * need a mutex around `cache` (a PyMutex held by cache_take, cache_put,
 * cache_drain and the setters); the module does not declare free-threading
 * support (no Py_mod_gil slot), so such a build runs it with the GIL on. */
#include "pygpu.h"
#include <errno.h>
#include <sys/mman.h>

#define HUGE_PAGE ((size_t)2 << 20)
#define MAX_SLOTS 64 /* the most blocks max_blocks allows */
#define DEFAULT_MAX_BYTES ((size_t)1 << 30)
#define DEFAULT_MAX_BLOCKS 4

typedef struct {
    PyObject_HEAD char *ptr; /* owned: the mapping (HUGE_PAGE aligned) */
    size_t mapped;           /* its length, a multiple of HUGE_PAGE */
    size_t size;             /* the bytes exported (<= mapped) */
    int reused;              /* the mapping came from the cache */
} pygpu_HostBlock;

typedef struct {
    char *ptr;
    size_t len;
    unsigned long long freed_at; /* cache.clock when it came back */
} cache_slot;

/* Process-wide (the mappings are the process's); guarded by the GIL. */
static struct {
    cache_slot slot[MAX_SLOTS];
    int n;        /* slots in use: slot[0..n) */
    size_t bytes; /* their lengths' sum */
    size_t max_bytes;
    int max_blocks;
    int loaded; /* max_bytes read from the environment */
    unsigned long long clock, hits, misses, evictions;
} cache;

/* Parse PYGPU_HOST_CACHE_BYTES ("<digits>[K|M|G][iB|B]", binary units) once.
 * 0, or -1 with ValueError naming the variable.  GIL held. */
static int
settings_load(void)
{
    const char *name = "PYGPU_HOST_CACHE_BYTES", *e = getenv(name), *p;
    unsigned long long v = 0, mul = 1;
    if (cache.loaded)
        return 0;
    cache.max_blocks = DEFAULT_MAX_BLOCKS;
    cache.max_bytes = DEFAULT_MAX_BYTES;
    if (e == NULL || *e == '\0') {
        cache.loaded = 1;
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
    cache.max_bytes = (size_t)(v * mul);
    cache.loaded = 1;
    return 0;
bad:
    PyErr_Format(PyExc_ValueError,
                 "environment variable %s='%.100s' is not a byte count "
                 "(digits, optionally followed by K, M or G; 0 turns the host cache off)",
                 name, e);
    return -1;
}

/* Remove slot i (order does not matter: freed_at keeps the age). */
static void
slot_remove(int i)
{
    cache.bytes -= cache.slot[i].len;
    cache.slot[i] = cache.slot[--cache.n];
}

/* The most recently freed cached mapping of exactly len bytes, removed from
 * the cache, or NULL.  GIL held. */
static char *
cache_take(size_t len)
{
    int i, best = -1;
    char *p;
    for (i = 0; i < cache.n; i++)
        if (cache.slot[i].len == len
            && (best < 0 || cache.slot[i].freed_at > cache.slot[best].freed_at))
            best = i;
    if (best < 0)
        return NULL;
    p = cache.slot[best].ptr;
    slot_remove(best);
    return p;
}

/* Move the least recently freed mappings into victims (which holds
 * MAX_SLOTS) until the cache has room for `len` more bytes in one more
 * block (len 0: until it is within its limits).  Returns the count added.
 * GIL held. */
static int
cache_evict_for(size_t len, int extra, cache_slot *victims, int nv)
{
    while (cache.n > 0
           && (cache.n + extra > cache.max_blocks || cache.bytes > cache.max_bytes - len)) {
        int i, old = 0;
        for (i = 1; i < cache.n; i++)
            if (cache.slot[i].freed_at < cache.slot[old].freed_at)
                old = i;
        victims[nv++] = cache.slot[old];
        slot_remove(old);
        cache.evictions++;
    }
    return nv;
}

/* Unmap mappings the cache no longer lists, with the GIL released (no
 * Python object is touched).  GIL held on entry and exit. */
static void
unmap_all(cache_slot *v, int n)
{
    int i;
    if (n == 0)
        return;
    Py_BEGIN_ALLOW_THREADS
        for (i = 0; i < n; i++)
            munmap(v[i].ptr, v[i].len);
    Py_END_ALLOW_THREADS
}

/* A dead block's mapping: kept in the cache when it fits the limits (older
 * ones evicted to make room), else unmapped.  Never raises.  GIL held. */
static void
cache_put(char *p, size_t len)
{
    cache_slot victims[MAX_SLOTS + 1];
    int nv = 0;
    if (!cache.loaded || cache.max_blocks == 0 || len > cache.max_bytes) {
        victims[nv].ptr = p;
        victims[nv++].len = len;
    } else {
        nv = cache_evict_for(len, 1, victims, 0);
        cache.slot[cache.n].ptr = p;
        cache.slot[cache.n].len = len;
        cache.slot[cache.n].freed_at = ++cache.clock;
        cache.n++;
        cache.bytes += len;
    }
    unmap_all(victims, nv);
}

/* Unmap every cached mapping.  Returns the bytes given back.  GIL held. */
static size_t
cache_drain(void)
{
    cache_slot victims[MAX_SLOTS];
    size_t bytes = cache.bytes;
    int n = cache.n;
    memcpy(victims, cache.slot, (size_t)n * sizeof victims[0]);
    cache.n = 0;
    cache.bytes = 0;
    unmap_all(victims, n);
    return bytes;
}

/* A new private anonymous mapping of len bytes (a multiple of HUGE_PAGE)
 * starting on a HUGE_PAGE boundary, marked MADV_HUGEPAGE where the system
 * has it; NULL with errno set.  Any thread (no Python). */
static char *
map_new(size_t len)
{
    size_t want = len + HUGE_PAGE, head, tail;
    uintptr_t a;
    char *base = mmap(NULL, want, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (base == MAP_FAILED)
        return NULL;
    a = ((uintptr_t)base + HUGE_PAGE - 1) & ~(uintptr_t)(HUGE_PAGE - 1);
    head = (size_t)(a - (uintptr_t)base);
    tail = want - head - len;
    if (head)
        munmap(base, head);
    if (tail)
        munmap((char *)a + len, tail);
#ifdef MADV_HUGEPAGE
    (void)madvise((void *)a, len, MADV_HUGEPAGE); /* a kernel without THP: 4 KiB pages */
#endif
    return (char *)a;
}

static void
hostblock_dealloc(pygpu_HostBlock *self)
{
    PyTypeObject *tp = Py_TYPE(self);
    if (self->ptr != NULL)
        cache_put(self->ptr, self->mapped);
    self->ptr = NULL;
    tp->tp_free((PyObject *)self);
    Py_DECREF(tp);
}

/* Writable bytes, the size asked for.  An export holds a reference to the
 * block, so the mapping cannot go back to the cache while it is in use. */
static int
hostblock_getbuffer(pygpu_HostBlock *self, Py_buffer *view, int flags)
{
    return PyBuffer_FillInfo(view, (PyObject *)self, self->ptr, (Py_ssize_t)self->size, 0, flags);
}

static PyObject *
hostblock_get_address(pygpu_HostBlock *self, void *c)
{
    return PyLong_FromVoidPtr(self->ptr);
}

static PyObject *
hostblock_get_size(pygpu_HostBlock *self, void *c)
{
    return PyLong_FromSize_t(self->size);
}

static PyObject *
hostblock_get_mapped(pygpu_HostBlock *self, void *c)
{
    return PyLong_FromSize_t(self->mapped);
}

static PyObject *
hostblock_get_reused(pygpu_HostBlock *self, void *c)
{
    return PyBool_FromLong(self->reused);
}

static PyObject *
hostblock_repr(pygpu_HostBlock *self)
{
    return PyUnicode_FromFormat("<pygpu.driver.HostBlock %zu bytes at %p, %s>", self->size,
                                (void *)self->ptr, self->reused ? "recycled" : "new mapping");
}

static PyGetSetDef hostblock_getset[] = {
    {"address", (getter)hostblock_get_address, NULL, "Host address (2 MiB aligned).", NULL},
    {"size", (getter)hostblock_get_size, NULL, "Bytes exported.", NULL},
    {"mapped", (getter)hostblock_get_mapped, NULL,
     "Bytes of the mapping (size rounded up to 2 MiB).", NULL},
    {"reused", (getter)hostblock_get_reused, NULL,
     "True when the mapping was taken from the host cache (its bytes are a "
     "former block's, not zeros).",
     NULL},
    {NULL},
};

static PyType_Slot hostblock_slots[] = {
    {Py_tp_dealloc, hostblock_dealloc},
    {Py_tp_getset, hostblock_getset},
    {Py_tp_repr, hostblock_repr},
    {Py_bf_getbuffer, hostblock_getbuffer},
    {Py_tp_doc, "Host memory of its own 2 MiB-aligned anonymous mapping, exported as "
                "writable bytes (the .base of a large array from GPUArray.get()). When "
                "it dies its mapping goes to the host cache for the next one of its "
                "size (host_cache_stats())."},
    {0, NULL},
};

static PyType_Spec hostblock_spec = {
    "pygpu.driver.HostBlock", sizeof(pygpu_HostBlock), 0,
    Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE | Py_TPFLAGS_DISALLOW_INSTANTIATION
        | Py_TPFLAGS_BASETYPE, /* every pygpu type can be subclassed (issue 24); made by
                              * _host_block() only, so neither it nor a subclass can be
                              * instantiated from Python */
    hostblock_slots};

PyDoc_STRVAR(host_block_doc,
             "_host_block(nbytes)\n--\n\n"
             "A HostBlock of nbytes (> 0): a cached mapping of nbytes rounded up to\n"
             "2 MiB (its bytes are a former block's, NOT zeros) or a new one (zeros).\n"
             "Only for memory that is written whole before it is read.");

static PyObject *
host_block(PyObject *module, PyObject *arg)
{
    pygpu_state *st = PyModule_GetState(module);
    pygpu_HostBlock *self;
    Py_ssize_t n = PyNumber_AsSsize_t(arg, PyExc_OverflowError);
    size_t len;
    char *p;
    int reused = 1, err = 0;
    if (n == -1 && PyErr_Occurred())
        return NULL;
    if (n <= 0) {
        PyErr_Format(PyExc_ValueError, "_host_block(): nbytes must be > 0, not %zd", n);
        return NULL;
    }
    if ((size_t)n > PY_SSIZE_T_MAX - 2 * HUGE_PAGE) {
        PyErr_Format(PyExc_OverflowError, "_host_block(): nbytes %zd is too large", n);
        return NULL;
    }
    if (settings_load() < 0)
        return NULL;
    len = ((size_t)n + HUGE_PAGE - 1) & ~(HUGE_PAGE - 1);
    if ((p = cache_take(len)) != NULL) {
        cache.hits++;
    } else {
        cache.misses++;
        reused = 0;
        Py_BEGIN_ALLOW_THREADS
            p = map_new(len);
            err = errno;
        Py_END_ALLOW_THREADS
        if (p == NULL && err == ENOMEM && cache.n > 0) {
            /* the cached mappings may be what is in the way */
            cache_drain();
            Py_BEGIN_ALLOW_THREADS
                p = map_new(len);
                err = errno;
            Py_END_ALLOW_THREADS
        }
        if (p == NULL) {
            PyErr_Format(PyExc_MemoryError, "cannot map %zu bytes of host memory: %s", len,
                         strerror(err));
            return NULL;
        }
    }
    self = PyObject_New(pygpu_HostBlock, st->HostBlockType);
    if (self == NULL) {
        cache_put(p, len);
        return NULL;
    }
    self->ptr = p;
    self->mapped = len;
    self->size = (size_t)n;
    self->reused = reused;
    return (PyObject *)self;
}

static PyObject *
limits_dict(void)
{
    return Py_BuildValue("{snsi}", "max_bytes", (Py_ssize_t)cache.max_bytes, "max_blocks",
                         cache.max_blocks);
}

PyDoc_STRVAR(host_cache_stats_doc,
             "host_cache_stats(reset=False)\n--\n\n"
             "The host cache of large get() destinations (docs/memory.md, \"Pageable\n"
             "copies\"), process-wide, as a dict: hits (blocks that took a cached\n"
             "mapping), misses (blocks that made a new one), evictions (cached mappings\n"
             "unmapped to keep the limits), cached_bytes and cached_blocks (kept now),\n"
             "max_bytes and max_blocks (the limits).  reset=True zeroes hits, misses\n"
             "and evictions after reading them.");

static PyObject *
host_cache_stats(PyObject *module, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"reset", NULL};
    int reset = 0;
    PyObject *d;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|p:host_cache_stats", kwlist, &reset))
        return NULL;
    if (settings_load() < 0)
        return NULL;
    d = Py_BuildValue("{sKsKsKsnsisnsi}", "hits", cache.hits, "misses", cache.misses, "evictions",
                      cache.evictions, "cached_bytes", (Py_ssize_t)cache.bytes, "cached_blocks",
                      cache.n, "max_bytes", (Py_ssize_t)cache.max_bytes, "max_blocks",
                      cache.max_blocks);
    if (d != NULL && reset)
        cache.hits = cache.misses = cache.evictions = 0;
    return d;
}

PyDoc_STRVAR(free_host_cache_doc,
             "free_host_cache()\n--\n\n"
             "Unmap every mapping the host cache keeps; returns the bytes given back.\n"
             "Blocks in use are not touched (theirs come back when they die).");

static PyObject *
free_host_cache(PyObject *module, PyObject *unused)
{
    return PyLong_FromSize_t(cache_drain());
}

/* a limit from a keyword argument: None keeps it */
static int
get_limit(PyObject *obj, const char *what, unsigned long long top, unsigned long long *out)
{
    Py_ssize_t v;
    if (obj == Py_None)
        return 0;
    if (PyBool_Check(obj) || !PyIndex_Check(obj)) {
        PyErr_Format(PyExc_TypeError, "set_host_cache(): %s must be an int or None, not %.100s",
                     what, Py_TYPE(obj)->tp_name);
        return -1;
    }
    v = PyNumber_AsSsize_t(obj, NULL); /* clipped: too large is caught below */
    if (v == -1 && PyErr_Occurred())
        return -1;
    if (v < 0 || (unsigned long long)v > top) {
        PyErr_Format(PyExc_ValueError, "set_host_cache(): %s must be 0 to %llu, not %R", what, top,
                     obj);
        return -1;
    }
    *out = (unsigned long long)v;
    return 0;
}

PyDoc_STRVAR(set_host_cache_doc,
             "set_host_cache(max_bytes=None, max_blocks=None)\n--\n\n"
             "Change the host cache's limits (None keeps one) and return the previous\n"
             "ones as a dict: set_host_cache(**old) restores them.  max_bytes: the most\n"
             "bytes of mappings kept, 0 turns the cache off (the environment variable\n"
             "PYGPU_HOST_CACHE_BYTES sets it at start, default 1 GiB); max_blocks: the\n"
             "most mappings kept, 0 to 64 (default 4).  Mappings beyond new limits are\n"
             "unmapped at once, the least recently freed first.");

static PyObject *
set_host_cache(PyObject *module, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"max_bytes", "max_blocks", NULL};
    PyObject *bobj = Py_None, *nobj = Py_None, *old;
    unsigned long long bytes, blocks;
    cache_slot victims[MAX_SLOTS];
    int nv;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|OO:set_host_cache", kwlist, &bobj, &nobj))
        return NULL;
    if (settings_load() < 0)
        return NULL;
    bytes = cache.max_bytes;
    blocks = (unsigned long long)cache.max_blocks;
    if (get_limit(bobj, "max_bytes", PY_SSIZE_T_MAX, &bytes) < 0
        || get_limit(nobj, "max_blocks", MAX_SLOTS, &blocks) < 0)
        return NULL;
    if ((old = limits_dict()) == NULL)
        return NULL;
    cache.max_bytes = (size_t)bytes;
    cache.max_blocks = (int)blocks;
    nv = cache_evict_for(0, 0, victims, 0);
    unmap_all(victims, nv);
    return old;
}

/* os.register_at_fork(after_in_child=...): the child starts with an empty
 * cache (its copies of the parent's pages would be copied on write). */
static PyObject *
host_cache_after_fork(PyObject *module, PyObject *unused)
{
    cache_drain();
    Py_RETURN_NONE;
}

/* atexit: unmap the cache; blocks that die later (module teardown) are
 * unmapped, not cached. */
static PyObject *
host_cache_at_exit(PyObject *module, PyObject *unused)
{
    cache_drain();
    cache.loaded = 1;
    cache.max_bytes = 0;
    cache.max_blocks = 0;
    Py_RETURN_NONE;
}

#define CF(f) (PyCFunction)(void (*)(void))(f)
static PyMethodDef hostblock_methods[] = {
    {"_host_block", host_block, METH_O, host_block_doc},
    {"host_cache_stats", CF(host_cache_stats), METH_VARARGS | METH_KEYWORDS, host_cache_stats_doc},
    {"free_host_cache", free_host_cache, METH_NOARGS, free_host_cache_doc},
    {"set_host_cache", CF(set_host_cache), METH_VARARGS | METH_KEYWORDS, set_host_cache_doc},
    {"_host_cache_after_fork", host_cache_after_fork, METH_NOARGS,
     "_host_cache_after_fork($module, /)\n--\n\n"
     "os.fork()'s hook in the child: unmap the cached mappings."},
    {"_host_cache_at_exit", host_cache_at_exit, METH_NOARGS,
     "_host_cache_at_exit($module, /)\n--\n\n"
     "atexit's hook: unmap the cached mappings and cache no more."},
    {NULL},
};

/* modname.attr(fname's function) or, with kw, modname.attr(**{kw: it}):
 * 0 or -1; 0 without a call where modname has no attr (no fork here). */
static int
register_hook(PyObject *m, const char *modname, const char *attr, const char *kw, const char *fname)
{
    PyObject *mod, *reg, *hook = NULL, *args = NULL, *kwargs = NULL, *r = NULL;
    if ((mod = PyImport_ImportModule(modname)) == NULL)
        return -1;
    reg = PyObject_GetAttrString(mod, attr);
    Py_DECREF(mod);
    if (reg == NULL) {
        if (!PyErr_ExceptionMatches(PyExc_AttributeError))
            return -1;
        PyErr_Clear();
        return 0;
    }
    if ((hook = PyObject_GetAttrString(m, fname)) == NULL
        || (args = PyTuple_New(kw == NULL ? 1 : 0)) == NULL)
        goto done;
    if (kw == NULL) {
        Py_INCREF(hook);
        PyTuple_SET_ITEM(args, 0, hook);
    } else if ((kwargs = Py_BuildValue("{sO}", kw, hook)) == NULL) {
        goto done;
    }
    r = PyObject_Call(reg, args, kwargs);
done:
    Py_XDECREF(kwargs);
    Py_XDECREF(args);
    Py_XDECREF(hook);
    Py_DECREF(reg);
    if (r == NULL)
        return -1;
    Py_DECREF(r);
    return 0;
}

int
pygpu_hostblock_setup(PyObject *m, pygpu_state *st)
{
    if (pygpu_add_type(m, &hostblock_spec, &st->HostBlockType) < 0
        || PyModule_AddFunctions(m, hostblock_methods) < 0
        || register_hook(m, "atexit", "register", NULL, "_host_cache_at_exit") < 0
        || register_hook(m, "os", "register_at_fork", "after_in_child", "_host_cache_after_fork")
               < 0)
        return -1;
    return 0;
}
