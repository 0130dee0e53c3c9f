/* ArrayOperator: the array operators' fast path (issue 27: a small a + b
 * at the launch floor; docs/arrays.md, "The operators' fast path").
 *
 * GPUArray.__add__ (and the other arithmetic operators, their reflected
 * and in-place forms) is an ArrayOperator: a C callable, bound like a
 * function, that does the whole steady-state operation in one call for
 * exact GPUArray operands:
 *   - the checks the Python fast path makes (same shape and strides, C- or
 *     F-contiguous, each operand's gpudata a live DeviceAllocation of the
 *     current context holding its nbytes),
 *   - the kernel, found in a small table by (context, operand keys): the
 *     dtypes, or a Python scalar's type.  Python fills the table (_learn)
 *     when its own fast path finds or compiles the kernel,
 *   - the result: a GPUArray whose slots (gpuarray._ATTRS, read and
 *     copied by their offsets) are the operand's but for its own memory
 *     (gpudata) and base None, its block from the block cache (else from
 *     the array's allocator, called as Python calls it),
 *   - one launch, as prepared_async_call(grid, block, None, ...) makes it.
 * Anything else -- a subclass, another allocator, another context, a
 * view, a capture running, a mixed-dtype result, an empty array, a kernel
 * not learned yet, a scalar the table does not convert -- calls the
 * Python path (`fallback`, with the arguments as given), which decides
 * everything again.  So the C path only ever does what the Python fast
 * path would have done, with the same result and attributes.
 *
 * GIL held throughout.  Python code can run only inside the allocator call
 * and through the garbage collector on an allocation; everything used
 * after those is held by a strong reference first.
 */
#include "pygpu.h"

#define FO_SLOTS 16  /* kernels remembered per table */
#define FO_BLOCK 256 /* splay()'s block (gpuarray._BLOCK) */

enum { FO_AA, FO_AS, FO_SA, FO_TABLES };      /* array-array, array-scalar, scalar-array */
enum { FO_BINARY, FO_REFLECTED, FO_INPLACE }; /* x op y; y op x (__radd__); x op= y */
enum { FO_PLAIN, FO_AS_IS, FO_TO_FLOAT };     /* how a scalar is passed */

typedef struct {
    PyObject *ctx;           /* strong: the Context the kernel belongs to */
    PyObject *k1, *k2;       /* strong: the operands' keys (dtype, or scalar type) */
    pygpu_Function *func;    /* strong */
    PyObject *res;           /* strong: the result dtype */
    int conv;                /* FO_*: how the scalar operand is passed */
    int neg_refused;         /* a negative int scalar takes the Python path
                                       (power with an integer result: its ValueError) */
    unsigned int max_blocks; /* splay()'s grid limit (32 a multiprocessor) */
} fo_entry;

typedef struct {
    fo_entry e[FO_SLOTS];
    int n;    /* entries in use */
    int next; /* the one replaced next when full */
} fo_table;

typedef struct pygpu_ArrayOperator {
    PyObject_HEAD vectorcallfunc vectorcall;
    pygpu_state *st;                       /* the module state (the type keeps the module alive) */
    int mode;                              /* FO_BINARY, FO_REFLECTED, FO_INPLACE */
    PyObject *name;                        /* strong: str, __name__ */
    PyObject *fallback;                    /* strong: the Python path, called with the same args */
    struct pygpu_ArrayOperator *tables_of; /* strong, or NULL: whose tables are used */
    PyObject *array_type;                  /* strong: GPUArray (exact operands only) */
    PyObject *default_allocator;           /* strong: gpuarray._default_allocator */
    PyObject *empty;                       /* strong: () for object.__new__ */
    pygpu_array_slots slots;               /* array_type's slots read (arrayslots.c) */
    Py_ssize_t *copy;                      /* every slot a result copies (PyMem) */
    Py_ssize_t ncopy;
    fo_table t[FO_TABLES];
} pygpu_ArrayOperator;

/* ---- the kernel tables ---- */

static fo_entry *
table_find(fo_table *t, PyObject *ctx, PyObject *k1, PyObject *k2)
{
    int i;
    for (i = 0; i < t->n; i++) {
        fo_entry *e = &t->e[i];
        if (e->ctx == ctx && e->k1 == k1 && e->k2 == k2)
            return e;
    }
    return NULL;
}

static void
entry_clear(fo_entry *e)
{
    Py_CLEAR(e->ctx);
    Py_CLEAR(e->k1);
    Py_CLEAR(e->k2);
    Py_CLEAR(e->func);
    Py_CLEAR(e->res);
}

static void
tables_clear(pygpu_ArrayOperator *o)
{
    int k, i;
    for (k = 0; k < FO_TABLES; k++) {
        fo_table *t = &o->t[k];
        int n = t->n;
        t->n = t->next = 0;
        for (i = 0; i < n; i++)
            entry_clear(&t->e[i]);
    }
}

/* ---- the operands ---- */

/* array a's slot i (borrowed; NULL when unset): a is of o's exact
 * array_type, whose slots op_new found */
#define SLOT(o, a, i) PYGPU_ASLOT(&(o)->slots, a, i)

/* a == b for two shapes or stride tuples: exact tuples of exact ints (no
 * Python code runs); 0 for anything else (the Python path compares) */
static int
same_tuple(PyObject *a, PyObject *b)
{
    Py_ssize_t i, n;
    if (a == NULL || b == NULL)
        return 0;
    if (a == b)
        return PyTuple_CheckExact(a);
    if (!PyTuple_CheckExact(a) || !PyTuple_CheckExact(b)
        || (n = PyTuple_GET_SIZE(a)) != PyTuple_GET_SIZE(b))
        return 0;
    for (i = 0; i < n; i++) {
        PyObject *x = PyTuple_GET_ITEM(a, i), *y = PyTuple_GET_ITEM(b, i);
        if (x == y)
            continue;
        if (!PyLong_CheckExact(x) || !PyLong_CheckExact(y)
            || PyObject_RichCompareBool(x, y, Py_EQ) != 1) {
            PyErr_Clear();
            return 0;
        }
    }
    return 1;
}

/* The scalar as the kernel takes it (a new reference), or NULL (no
 * exception) when the Python path must convert it. */
static PyObject *
scalar_value(const fo_entry *e, PyObject *s)
{
    if (e->neg_refused && PyLong_CheckExact(s)) {
        int overflow = 0;
        long long v = PyLong_AsLongLongAndOverflow(s, &overflow);
        if (v < 0 || overflow < 0) {
            PyErr_Clear(); /* (an exact int: nothing was raised) */
            return NULL;
        }
    }
    if (e->conv == FO_AS_IS)
        return Py_NewRef(s);
    if (e->conv == FO_TO_FLOAT && PyLong_CheckExact(s)) {
        /* an int for a float parameter: dtype.type(value), exact below 2**53 */
        int overflow = 0;
        long long v = PyLong_AsLongLongAndOverflow(s, &overflow);
        if (overflow || v > (1LL << 53) || v < -(1LL << 53)) {
            PyErr_Clear();
            return NULL;
        }
        return PyFloat_FromDouble((double)v);
    }
    return NULL;
}

/* A new GPUArray: template x's slots with gpudata g and base None
 * (gpuarray._clone) */
static PyObject *
result_new(pygpu_ArrayOperator *o, PyObject *x, PyObject *g)
{
    Py_ssize_t i;
    /* object.__new__(GPUArray) */
    PyObject *z = PyBaseObject_Type.tp_new((PyTypeObject *)o->array_type, o->empty, NULL);
    if (z == NULL)
        return NULL;
    for (i = 0; i < o->ncopy; i++) {
        PyObject *v = *(PyObject **)((char *)x + o->copy[i]);
        *(PyObject **)((char *)z + o->copy[i]) = Py_XNewRef(v);
    }
    Py_XSETREF(SLOT(o, z, PYGPU_A_GPUDATA), Py_NewRef(g));
    Py_XSETREF(SLOT(o, z, PYGPU_A_BASE), Py_NewRef(Py_None));
    return z;
}

/* ---- the operation ---- */

typedef struct {
    PyObject *x, *y; /* the operands (borrowed: the call's) */
    int kind;        /* FO_AA, FO_AS, FO_SA */
    int inplace;
} fo_call;

/* 1 done (*out a new reference), 0 the Python path decides, -1 error. */
static int
fast_op(pygpu_ArrayOperator *o, const fo_call *c, PyObject **out)
{
    pygpu_state *st = o->st;
    PyObject *arr = c->kind == FO_SA ? c->y : c->x; /* the result's template */
    PyObject *db = NULL, *ctx = NULL, *ga, *gb = NULL, *k1, *k2, *dt;
    PyObject *nobj, *nb, *nbb, *args[4] = {NULL, NULL, NULL, NULL}, *r;
    pygpu_Function *func = NULL;
    pygpu_DeviceAllocation *aa = NULL, *ab = NULL;
    fo_entry *e;
    size_t n, nbytes, nbytesb;
    unsigned int grid, max_blocks;
    int done = 0;

    if (c->kind == FO_AA) {
        db = c->y;
        if (!same_tuple(SLOT(o, arr, PYGPU_A_SHAPE), SLOT(o, db, PYGPU_A_SHAPE))
            || !same_tuple(SLOT(o, arr, PYGPU_A_STRIDES), SLOT(o, db, PYGPU_A_STRIDES)))
            return 0;
    }
    nobj = SLOT(o, arr, PYGPU_A_SIZE);
    if (!pygpu_exact_size(nobj, &n) || n == 0)
        goto done;
    /* the current context as this thread remembers it (gpuarray._get_current) */
    if ((ctx = pygpu_current_context_or_none(st)) == NULL)
        goto error;
    if (ctx == Py_None || !pygpu_array_proven(st, &o->slots, arr, ctx, &aa, &nb, &nbytes)
        || (db != NULL && !pygpu_array_proven(st, &o->slots, db, ctx, &ab, &nbb, &nbytesb)))
        goto done;
    ga = (PyObject *)aa;
    gb = (PyObject *)ab;
    dt = SLOT(o, arr, PYGPU_A_DTYPE);
    if (c->kind == FO_SA) {
        k1 = (PyObject *)Py_TYPE(c->x);
        k2 = dt;
    } else {
        k1 = dt;
        k2 = c->kind == FO_AS ? (PyObject *)Py_TYPE(c->y) : SLOT(o, db, PYGPU_A_DTYPE);
    }
    e = table_find(&o->t[c->kind], ctx, k1, k2);
    /* the result in the array's own dtype: its layout is the array's */
    if (e == NULL || e->res != dt || dt == NULL)
        goto done;
    if (c->inplace) {
        if (c->kind == FO_SA)
            goto done;
    } else if (SLOT(o, arr, PYGPU_A_ALLOCATOR) != o->default_allocator) {
        goto done;
    }
    /* the kernel's operands after z: (x, y) as arrays or the scalar as the
     * kernel takes it, then n (the array's size, as the Python path passes
     * it); strong references to everything used from here on (the
     * allocator and the garbage collector may run Python code) */
    if (c->kind == FO_AA) {
        args[1] = Py_NewRef(ga);
        args[2] = Py_NewRef(gb);
    } else {
        PyObject *v = scalar_value(e, c->kind == FO_AS ? c->y : c->x);
        if (v == NULL) {
            if (PyErr_Occurred())
                goto error;
            goto done;
        }
        args[c->kind == FO_AS ? 1 : 2] = Py_NewRef(ga);
        args[c->kind == FO_AS ? 2 : 1] = v;
    }
    args[3] = Py_NewRef(nobj);
    func = (pygpu_Function *)Py_NewRef((PyObject *)e->func);
    max_blocks = e->max_blocks;
    if (c->inplace) {
        args[0] = Py_NewRef(ga);
    } else {
        int k;
        Py_INCREF(nb);
        k = pygpu_blockcache_allocation(st, (pygpu_Context *)ctx, nbytes, &args[0]);
        if (k == 0) /* the allocator as the Python path calls it (Python code) */
            args[0] = PyObject_CallOneArg(o->default_allocator, nb);
        Py_DECREF(nb);
        if (k < 0 || args[0] == NULL)
            goto error;
        if ((*out = result_new(o, arr, args[0])) == NULL)
            goto error;
    }
    grid = (unsigned int)((n + FO_BLOCK - 1) / FO_BLOCK < max_blocks ? (n + FO_BLOCK - 1) / FO_BLOCK
                                                                     : max_blocks);
    r = pygpu_launch_plain(st, func, grid ? grid : 1, FO_BLOCK, args, 4);
    if (r == NULL) {
        if (!c->inplace)
            Py_CLEAR(*out);
        goto error;
    }
    Py_DECREF(r);
    if (c->inplace)
        *out = Py_NewRef(c->x);
    done = 1;
    goto done;
error:
    done = -1;
done:
    Py_XDECREF(args[0]);
    Py_XDECREF(args[1]);
    Py_XDECREF(args[2]);
    Py_XDECREF(args[3]);
    Py_XDECREF((PyObject *)func);
    Py_XDECREF(ctx);
    return done;
}

static PyObject *
op_vectorcall(PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    pygpu_ArrayOperator *o = (pygpu_ArrayOperator *)self;
    pygpu_ArrayOperator *b = o->tables_of != NULL ? o->tables_of : o;
    PyObject *res = NULL;
    if (o->fallback == NULL || b->array_type == NULL || b->default_allocator == NULL) {
        /* (cleared by the garbage collector: interpreter shutdown) */
        PyErr_Format(PyExc_RuntimeError, "the array operator %U was cleared", o->name);
        return NULL;
    }
    if (PyVectorcall_NARGS(nargsf) == 2 && kwnames == NULL && pygpu_captures_active == 0) {
        fo_call c;
        PyTypeObject *tx, *ty, *at = (PyTypeObject *)b->array_type;
        int r = 0;
        c.x = args[o->mode == FO_REFLECTED];
        c.y = args[o->mode != FO_REFLECTED];
        c.inplace = o->mode == FO_INPLACE;
        tx = Py_TYPE(c.x);
        ty = Py_TYPE(c.y);
        c.kind = -1;
        if (tx == at) {
            if (ty == at)
                c.kind = FO_AA;
            else if (ty == &PyFloat_Type || ty == &PyLong_Type)
                c.kind = FO_AS;
        } else if (ty == at && !c.inplace && (tx == &PyFloat_Type || tx == &PyLong_Type)) {
            c.kind = FO_SA;
        }
        if (c.kind >= 0 && (r = fast_op(b, &c, &res)) != 0)
            return r < 0 ? NULL : res;
    }
    return PyObject_Vectorcall(o->fallback, args, nargsf, kwnames);
}

/* ---- Python: construction, _learn, _forget ---- */

static PyObject *
op_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"name",  "fallback",  "array_type", "default_allocator",
                             "attrs", "tables_of", "mode",       NULL};
    PyObject *name, *fallback, *atype, *alloc, *attrs, *tables_of = Py_None;
    int mode = FO_BINARY, i;
    Py_ssize_t k;
    pygpu_ArrayOperator *o;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "UOOOO!|Oi:_ArrayOperator", kwlist, &name,
                                     &fallback, &atype, &alloc, &PyTuple_Type, &attrs, &tables_of,
                                     &mode))
        return NULL;
    if (!PyCallable_Check(fallback)) {
        PyErr_Format(PyExc_TypeError, "_ArrayOperator(): fallback must be callable, not %.100s",
                     Py_TYPE(fallback)->tp_name);
        return NULL;
    }
    if (!PyType_Check(atype)) {
        PyErr_Format(PyExc_TypeError, "_ArrayOperator(): array_type must be a type, not %.100s",
                     Py_TYPE(atype)->tp_name);
        return NULL;
    }
    if (tables_of != Py_None && !Py_IS_TYPE(tables_of, type)) {
        PyErr_Format(PyExc_TypeError,
                     "_ArrayOperator(): tables_of must be an _ArrayOperator "
                     "or None, not %.100s",
                     Py_TYPE(tables_of)->tp_name);
        return NULL;
    }
    if (mode < FO_BINARY || mode > FO_INPLACE) {
        PyErr_Format(PyExc_ValueError, "_ArrayOperator(): mode must be 0, 1 or 2, not %d", mode);
        return NULL;
    }
    o = (pygpu_ArrayOperator *)type->tp_alloc(type, 0);
    if (o == NULL)
        return NULL;
    o->vectorcall = op_vectorcall;
    o->st = PyType_GetModuleState(type);
    o->mode = mode;
    o->name = Py_NewRef(name);
    o->fallback = Py_NewRef(fallback);
    o->tables_of = tables_of == Py_None ? NULL : (pygpu_ArrayOperator *)Py_NewRef(tables_of);
    o->array_type = Py_NewRef(atype);
    o->default_allocator = Py_NewRef(alloc);
    if ((o->empty = PyTuple_New(0)) == NULL)
        goto error;
    /* the slots of every attribute (a result copies them all), those read
     * among them */
    o->ncopy = PyTuple_GET_SIZE(attrs);
    if ((o->copy = PyMem_New(Py_ssize_t, o->ncopy ? o->ncopy : 1)) == NULL) {
        PyErr_NoMemory();
        goto error;
    }
    for (i = 0; i < PYGPU_A_COUNT; i++)
        o->slots.off[i] = -1;
    for (k = 0; k < o->ncopy; k++) {
        PyObject *nm = PyTuple_GET_ITEM(attrs, k);
        if ((o->copy[k] = pygpu_slot_offset(atype, nm, "_ArrayOperator()")) < 0)
            goto error;
        for (i = 0; i < PYGPU_A_COUNT; i++)
            if (PyUnicode_CompareWithASCIIString(nm, pygpu_array_slot_name(i)) == 0)
                o->slots.off[i] = o->copy[k];
    }
    for (i = 0; i < PYGPU_A_COUNT; i++)
        if (o->slots.off[i] < 0) {
            PyErr_Format(PyExc_TypeError, "_ArrayOperator(): attrs must name '%s'",
                         pygpu_array_slot_name(i));
            goto error;
        }
    return (PyObject *)o;
error:
    Py_DECREF(o);
    return NULL;
}

PyDoc_STRVAR(op_learn_doc,
             "_learn($self, kind, context, key1, key2, function, result_dtype, conv, neg_refused,\n"
             "       max_blocks, /)\n--\n\n"
             "Remember the kernel of the Python fast path for (context, key1, key2) in\n"
             "table kind (0 array-array, 1 array-scalar, 2 scalar-array): function (a\n"
             "prepared Function taking z, x, y, n), result_dtype, conv (how a scalar is\n"
             "passed: 1 as given, 2 an int as a float), neg_refused (a negative int\n"
             "scalar takes the Python path), max_blocks (splay()'s grid limit).\n"
             "Returns False when the launch configuration does not fit the kernel.");

static PyObject *
op_learn(pygpu_ArrayOperator *o, PyObject *const *args, Py_ssize_t nargs)
{
    pygpu_state *st = o->st;
    pygpu_ArrayOperator *b = o->tables_of != NULL ? o->tables_of : o;
    pygpu_launch_config cfg;
    fo_table *t;
    fo_entry *e, fresh;
    long kind, conv, neg, maxb;
    if (nargs != 9) {
        PyErr_Format(PyExc_TypeError, "_learn() takes 9 arguments (%zd given)", nargs);
        return NULL;
    }
    kind = PyLong_AsLong(args[0]);
    conv = PyLong_AsLong(args[6]);
    neg = PyLong_AsLong(args[7]);
    maxb = PyLong_AsLong(args[8]);
    if (PyErr_Occurred())
        return NULL;
    if (kind < 0 || kind >= FO_TABLES || conv < FO_PLAIN || conv > FO_TO_FLOAT || maxb < 1
        || maxb > INT_MAX) {
        PyErr_Format(PyExc_ValueError,
                     "_learn(): kind %ld, conv %ld or max_blocks %ld out of "
                     "range",
                     kind, conv, maxb);
        return NULL;
    }
    if (!PyObject_TypeCheck(args[1], st->ContextType)
        || !PyObject_TypeCheck(args[4], st->FunctionType)) {
        PyErr_Format(PyExc_TypeError,
                     "_learn(): expected a Context and a Function, got "
                     "%.100s and %.100s",
                     Py_TYPE(args[1])->tp_name, Py_TYPE(args[4])->tp_name);
        return NULL;
    }
    /* the configuration's limits, once: the largest grid splay() makes */
    memset(&cfg, 0, sizeof cfg);
    cfg.grid[0] = (unsigned int)maxb;
    cfg.grid[1] = cfg.grid[2] = 1;
    cfg.block[0] = FO_BLOCK;
    cfg.block[1] = cfg.block[2] = 1;
    if (pygpu_function_check(st, (pygpu_Function *)args[4]) < 0
        || pygpu_config_check(st, (pygpu_Function *)args[4], &cfg) < 0) {
        PyErr_Clear(); /* the Python path's launch says what is wrong */
        Py_RETURN_FALSE;
    }
    fresh.ctx = Py_NewRef(args[1]);
    fresh.k1 = Py_NewRef(args[2]);
    fresh.k2 = Py_NewRef(args[3]);
    fresh.func = (pygpu_Function *)Py_NewRef(args[4]);
    fresh.res = Py_NewRef(args[5]);
    fresh.conv = (int)conv;
    fresh.neg_refused = neg != 0;
    fresh.max_blocks = (unsigned int)maxb;
    t = &b->t[kind];
    e = table_find(t, args[1], args[2], args[3]);
    if (e == NULL) {
        if (t->n < FO_SLOTS) {
            e = &t->e[t->n++];
            memset(e, 0, sizeof *e);
        } else {
            e = &t->e[t->next];
            t->next = (t->next + 1) % FO_SLOTS;
        }
    }
    {
        fo_entry old = *e; /* dropped after the new one is in place */
        *e = fresh;
        entry_clear(&old);
    }
    Py_RETURN_TRUE;
}

static PyObject *
op_forget(pygpu_ArrayOperator *o, PyObject *unused)
{
    tables_clear(o->tables_of != NULL ? o->tables_of : o);
    Py_RETURN_NONE;
}

static PyObject *
op_learned(pygpu_ArrayOperator *o, PyObject *unused)
{
    pygpu_ArrayOperator *b = o->tables_of != NULL ? o->tables_of : o;
    return Py_BuildValue("(iii)", b->t[FO_AA].n, b->t[FO_AS].n, b->t[FO_SA].n);
}

/* ---- the type: a method-like callable ---- */

static PyObject *
op_descr_get(PyObject *self, PyObject *obj, PyObject *type)
{
    if (obj == NULL || obj == Py_None)
        return Py_NewRef(self);
    return PyMethod_New(self, obj);
}

static PyObject *
op_get_name(pygpu_ArrayOperator *o, void *c)
{
    return Py_NewRef(o->name);
}

static PyObject *
op_get_text_signature(pygpu_ArrayOperator *o, void *c)
{
    return PyUnicode_FromString("($self, other, /)");
}

static PyObject *
op_get_fallback(pygpu_ArrayOperator *o, void *c)
{
    return Py_NewRef(o->fallback);
}

static PyObject *
op_repr(pygpu_ArrayOperator *o)
{
    return PyUnicode_FromFormat("<pygpu array operator %U>", o->name);
}

static int
op_traverse(pygpu_ArrayOperator *o, visitproc visit, void *arg)
{
    int k, i;
    Py_VISIT(Py_TYPE(o));
    Py_VISIT(o->fallback);
    Py_VISIT((PyObject *)o->tables_of);
    Py_VISIT(o->array_type);
    Py_VISIT(o->default_allocator);
    for (k = 0; k < FO_TABLES; k++)
        for (i = 0; i < o->t[k].n; i++) {
            fo_entry *e = &o->t[k].e[i];
            Py_VISIT(e->ctx);
            Py_VISIT(e->k1);
            Py_VISIT(e->k2);
            Py_VISIT((PyObject *)e->func);
            Py_VISIT(e->res);
        }
    return 0;
}

static int
op_clear(pygpu_ArrayOperator *o)
{
    tables_clear(o);
    Py_CLEAR(o->fallback);
    Py_CLEAR(o->tables_of);
    Py_CLEAR(o->array_type);
    Py_CLEAR(o->default_allocator);
    return 0;
}

static void
op_dealloc(pygpu_ArrayOperator *o)
{
    PyTypeObject *tp = Py_TYPE(o);
    PyObject_GC_UnTrack(o);
    op_clear(o);
    Py_CLEAR(o->name);
    Py_CLEAR(o->empty);
    PyMem_Free(o->copy);
    o->copy = NULL;
    tp->tp_free((PyObject *)o);
    Py_DECREF(tp);
}

static PyMethodDef op_methods[] = {
    {"_learn", (PyCFunction)(void (*)(void))op_learn, METH_FASTCALL, op_learn_doc},
    {"_forget", (PyCFunction)op_forget, METH_NOARGS,
     "_forget($self, /)\n--\n\nDrop every kernel remembered (the Python path learns again)."},
    {"_learned", (PyCFunction)op_learned, METH_NOARGS,
     "_learned($self, /)\n--\n\n"
     "How many kernels are remembered: (array-array, array-scalar, scalar-array)."},
    {NULL},
};

static PyGetSetDef op_getset[] = {
    {"__name__", (getter)op_get_name, NULL, NULL, NULL},
    {"__qualname__", (getter)op_get_name, NULL, NULL, NULL},
    {"__text_signature__", (getter)op_get_text_signature, NULL, NULL, NULL},
    {"_fallback", (getter)op_get_fallback, NULL, "The Python path.", NULL},
    {NULL},
};

static PyMemberDef op_members[] = {
    {"__vectorcalloffset__", T_PYSSIZET, offsetof(pygpu_ArrayOperator, vectorcall), READONLY},
    {NULL},
};

static PyType_Slot op_slots[] = {
    {Py_tp_new, op_new},
    {Py_tp_dealloc, op_dealloc},
    {Py_tp_traverse, op_traverse},
    {Py_tp_clear, op_clear},
    {Py_tp_call, PyVectorcall_Call},
    {Py_tp_descr_get, op_descr_get},
    {Py_tp_methods, op_methods},
    {Py_tp_getset, op_getset},
    {Py_tp_members, op_members},
    {Py_tp_repr, op_repr},
    {Py_tp_doc, "_ArrayOperator(name, fallback, array_type, default_allocator, attrs, "
                "tables_of=None, mode=0)\n--\n\n"
                "An operator of pygpu.gpuarray.GPUArray with its steady state in C "
                "(docs/arrays.md, \"The operators' fast path\"); what it does not take "
                "goes to fallback, the Python path. mode 0: x op y; 1: reflected "
                "(called as (self, other), computes other op self); 2: in place."},
    {0, NULL},
};

static PyType_Spec op_spec = {"pygpu.driver._ArrayOperator", sizeof(pygpu_ArrayOperator), 0,
                              Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_IMMUTABLETYPE
                                  | Py_TPFLAGS_HAVE_VECTORCALL | Py_TPFLAGS_METHOD_DESCRIPTOR
                                  | Py_TPFLAGS_BASETYPE,
                              op_slots};

int
pygpu_fastops_setup(PyObject *m, pygpu_state *st)
{
    /* (kept by the module alone: nothing in C needs the type) */
    PyTypeObject *tp = NULL;
    int r = pygpu_add_type(m, &op_spec, &tp);
    Py_XDECREF(tp);
    /* the names gpuarray.py teaches the tables with: one source for both */
    if (r == 0
        && (PyModule_AddIntConstant(m, "_FO_ARRAY_ARRAY", FO_AA) < 0
            || PyModule_AddIntConstant(m, "_FO_ARRAY_SCALAR", FO_AS) < 0
            || PyModule_AddIntConstant(m, "_FO_SCALAR_ARRAY", FO_SA) < 0
            || PyModule_AddIntConstant(m, "_FO_PYTHON", FO_PLAIN) < 0
            || PyModule_AddIntConstant(m, "_FO_AS_IS", FO_AS_IS) < 0
            || PyModule_AddIntConstant(m, "_FO_TO_FLOAT", FO_TO_FLOAT) < 0
            || PyModule_AddIntConstant(m, "_FO_REFLECTED", FO_REFLECTED) < 0
            || PyModule_AddIntConstant(m, "_FO_INPLACE", FO_INPLACE) < 0))
        r = -1;
    return r;
}
