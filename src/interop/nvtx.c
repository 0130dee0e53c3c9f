/* NVTX ranges and marks for pygpu.profiler, and cuProfilerStart/Stop.
 *
 * NVTX v3 is header-only: every nvtx* call loads a function pointer and
 * calls it when it is set.  The first call reads NVTX_INJECTION64_PATH and,
 * when a profiler (Nsight Systems, or any library exporting
 * InitializeInjectionNvtx2) is named there, loads it; with none, every
 * pointer becomes NULL and a call costs a load and a branch.  So a range
 * costs nothing measurable unless a profiler is attached, and NVTX is never
 * touched at import: the first range initializes it.
 *
 * Built without the NVTX headers (setup.py defines PYGPU_HAVE_NVTX when it
 * finds nvtx3/nvToolsExt.h in the toolkit or NVIDIA's nvidia-nvtx wheel),
 * the same API is here and does nothing; NVTX_AVAILABLE says which.  It
 * checks its arguments as the NVTX build does (the same exceptions) and
 * answers as the NVTX build does with no profiler attached: push and pop
 * return NVTX_NO_PUSH_POP_TRACKING (-2), attached() False.  PYGPU_BUILD_NVTX=0
 * builds that way where the headers are found (tests/interop/test_nonvtx.py does).
 *
 * TimeRange: `with TimeRange(name, color):` pushes a range on the calling
 * thread in the "pygpu" domain and pops it on exit (also on an exception).
 * The object holds no per-entry state, so one range object may be entered
 * again while open (recursion) and from several threads at once: NVTX keeps
 * a stack per thread.  Called with a function, it decorates it through
 * st->range_wrapper, which pygpu.profiler registers.
 */
#include "pygpu.h"
#include <stdint.h>

#ifdef PYGPU_HAVE_NVTX
#include <nvtx3/nvToolsExt.h>

/* The "pygpu" domain.  Process-wide like NVTX's own tables (a domain is a
 * name registered with the attached tool, once per process); made on the
 * first range with the GIL held, so never twice. */
static nvtxDomainHandle_t nvtx_domain;
static int nvtx_domain_made;

static inline nvtxDomainHandle_t
domain(void)
{
    if (!nvtx_domain_made) {
        nvtx_domain = nvtxDomainCreateA("pygpu");
        nvtx_domain_made = 1;
    }
    return nvtx_domain;
}
#else
/* What NVTX's push and pop return with no tool attached, so that a build
 * without NVTX answers as one with NVTX and no profiler does. */
#define NVTX_NO_PUSH_POP_TRACKING (-2)
#endif

typedef struct {
    PyObject_HEAD PyObject *name; /* strong ref: str; its UTF-8 buffer is the message */
    uint32_t argb;
    int has_color;
#ifdef PYGPU_HAVE_NVTX
    nvtxEventAttributes_t attr; /* message points into name's UTF-8 */
#endif
} pygpu_TimeRange;

static const struct {
    const char *name;
    uint32_t argb;
} named_colors[] = {{"green", 0xFF76B900},  {"blue", 0xFF1F77B4},
                    {"yellow", 0xFFFFD700}, {"purple", 0xFF9467BD},
                    {"cyan", 0xFF17BECF},   {"red", 0xFFD62728},
                    {"white", 0xFFFFFFFF},  {"orange", 0xFFFF7F0E},
                    {"gray", 0xFF7F7F7F},   {"grey", 0xFF7F7F7F},
                    {"black", 0xFF000000},  {"pink", 0xFFE377C2},
                    {"brown", 0xFF8C564B},  {NULL, 0}};

/* color: None (0 returned, no color), an int 0xRRGGBB (opaque) or
 * 0xAARRGGBB, a name of named_colors, or "#rrggbb".  Returns 1 with *argb
 * set, 0 for None, -1 with TypeError/ValueError. */
static int
parse_color(PyObject *color, uint32_t *argb)
{
    if (color == NULL || color == Py_None)
        return 0;
    if (PyLong_Check(color) && !PyBool_Check(color)) {
        int overflow;
        long long v = PyLong_AsLongLongAndOverflow(color, &overflow);
        if (v == -1 && PyErr_Occurred())
            return -1;
        if (overflow || v < 0 || v > 0xFFFFFFFFLL) {
            PyErr_SetString(PyExc_ValueError,
                            "color must be 0xRRGGBB or 0xAARRGGBB (0 to 0xFFFFFFFF)");
            return -1;
        }
        *argb = (uint32_t)v;
        if (v <= 0xFFFFFF)
            *argb |= 0xFF000000u;
        return 1;
    }
    if (PyUnicode_Check(color)) {
        const char *s = PyUnicode_AsUTF8(color);
        int i;
        if (s == NULL)
            return -1;
        if (s[0] == '#' && strlen(s) == 7) {
            char *end;
            unsigned long v = strtoul(s + 1, &end, 16);
            if (*end == '\0' && end == s + 7) {
                *argb = 0xFF000000u | (uint32_t)v;
                return 1;
            }
        }
        for (i = 0; named_colors[i].name != NULL; i++)
            if (strcmp(named_colors[i].name, s) == 0) {
                *argb = named_colors[i].argb;
                return 1;
            }
        PyErr_Format(PyExc_ValueError,
                     "unknown color %R: give 0xRRGGBB, '#rrggbb' or one of green, blue, "
                     "yellow, purple, cyan, red, white, orange, gray, black, pink, brown",
                     color);
        return -1;
    }
    PyErr_Format(PyExc_TypeError, "color must be None, an int 0xRRGGBB or a str, not %s",
                 Py_TYPE(color)->tp_name);
    return -1;
}

/* The UTF-8 of a range or mark name (cached in the str), or NULL with
 * TypeError/ValueError. */
static const char *
name_utf8(PyObject *name)
{
    const char *s;
    Py_ssize_t n;
    if (!PyUnicode_Check(name)) {
        PyErr_Format(PyExc_TypeError, "a range or mark name must be a str, not %s",
                     Py_TYPE(name)->tp_name);
        return NULL;
    }
    s = PyUnicode_AsUTF8AndSize(name, &n);
    if (s == NULL)
        return NULL;
    if ((Py_ssize_t)strlen(s) != n) {
        PyErr_SetString(PyExc_ValueError, "a range or mark name cannot contain a NUL character");
        return NULL;
    }
    return s;
}

#ifdef PYGPU_HAVE_NVTX
static void
fill_attr(nvtxEventAttributes_t *a, const char *msg, int has_color, uint32_t argb)
{
    memset(a, 0, sizeof *a);
    a->version = NVTX_VERSION;
    a->size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
    a->messageType = NVTX_MESSAGE_TYPE_ASCII;
    a->message.ascii = msg;
    if (has_color) {
        a->colorType = NVTX_COLOR_ARGB;
        a->color = argb;
    }
}
#endif

static PyObject *
range_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"name", "color", NULL};
    PyObject *name, *color = Py_None;
    pygpu_TimeRange *self;
    const char *msg;
    uint32_t argb = 0;
    int has;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O|O:TimeRange", kwlist, &name, &color))
        return NULL;
    if ((msg = name_utf8(name)) == NULL)
        return NULL;
    if ((has = parse_color(color, &argb)) < 0)
        return NULL;
    self = (pygpu_TimeRange *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    self->name = Py_NewRef(name);
    self->argb = argb;
    self->has_color = has;
#ifdef PYGPU_HAVE_NVTX
    fill_attr(&self->attr, msg, has, argb);
#else
    (void)msg;
#endif
    return (PyObject *)self;
}

/* Not a GC type: a range holds only its name, a str, so it can be in no
 * cycle (and `with time_range('x'):` makes one a call: the GC's
 * bookkeeping was a fifth of its cost). */
static void
range_dealloc(pygpu_TimeRange *self)
{
    PyTypeObject *tp = Py_TYPE(self);
    Py_CLEAR(self->name);
    tp->tp_free((PyObject *)self);
    Py_DECREF(tp);
}

static PyObject *
range_enter(pygpu_TimeRange *self, PyObject *unused)
{
#ifdef PYGPU_HAVE_NVTX
    nvtxDomainRangePushEx(domain(), &self->attr);
#endif
    return Py_NewRef((PyObject *)self);
}

/* METH_FASTCALL: the with statement's exit(None, None, None) makes no
 * tuple */
static PyObject *
range_exit(pygpu_TimeRange *self, PyObject *const *exc_info, Py_ssize_t n)
{
#ifdef PYGPU_HAVE_NVTX
    nvtxDomainRangePop(domain());
#endif
    Py_RETURN_FALSE; /* never swallows the exception */
}

/* range(func): the decorated function, made by the wrapper that
 * pygpu.profiler registered (functools.wraps, a `with range:` around the
 * call). */
static PyObject *
range_call(pygpu_TimeRange *self, PyObject *args, PyObject *kwds)
{
    pygpu_state *st = PYGPU_STATE(self);
    PyObject *func;
    if ((kwds != NULL && PyDict_GET_SIZE(kwds) != 0) || PyTuple_GET_SIZE(args) != 1
        || !PyCallable_Check(func = PyTuple_GET_ITEM(args, 0))) {
        PyErr_SetString(PyExc_TypeError,
                        "a time_range decorates one function: @time_range(name) def f(...)");
        return NULL;
    }
    if (st->range_wrapper == NULL) {
        PyErr_SetString(PyExc_TypeError,
                        "time_range as a decorator needs pygpu.profiler (import it)");
        return NULL;
    }
    return PyObject_CallFunctionObjArgs(st->range_wrapper, (PyObject *)self, func, NULL);
}

static PyObject *
range_repr(pygpu_TimeRange *self)
{
    if (self->has_color)
        return PyUnicode_FromFormat("time_range(%R, color=0x%08x)", self->name,
                                    (unsigned int)self->argb);
    return PyUnicode_FromFormat("time_range(%R)", self->name);
}

static PyObject *
range_get_color(pygpu_TimeRange *self, void *closure)
{
    if (!self->has_color)
        Py_RETURN_NONE;
    return PyLong_FromUnsignedLong(self->argb);
}

static PyMemberDef range_members[] = {
    {"name", T_OBJECT_EX, offsetof(pygpu_TimeRange, name), READONLY, "The range's name."},
    {NULL},
};

static PyGetSetDef range_getset[] = {
    {"color", (getter)range_get_color, NULL, "The color as 0xAARRGGBB, or None.", NULL},
    {NULL},
};

static PyMethodDef range_methods[] = {
    {"__enter__", (PyCFunction)range_enter, METH_NOARGS,
     "__enter__($self, /)\n--\n\nPush the range on this thread; returns the range."},
    {"__exit__", (PyCFunction)(void (*)(void))range_exit, METH_FASTCALL,
     "__exit__($self, /, *exc_info)\n--\n\nPop the range (an exception passes on)."},
    {NULL},
};

static PyType_Slot range_slots[] = {
    {Py_tp_doc, "TimeRange(name, color=None)\n--\n\n"
                "An NVTX range named name in the \"pygpu\" domain: a context manager "
                "(push on enter, pop on exit, also on an exception) and a decorator. "
                "color: None, 0xRRGGBB, 0xAARRGGBB, '#rrggbb' or a name (green, blue, "
                "yellow, purple, cyan, red, white, orange, gray, black, pink, brown). "
                "Costs a load and a branch unless a profiler is attached."},
    {Py_tp_new, range_new},
    {Py_tp_init, pygpu_init_made},
    {Py_tp_dealloc, range_dealloc},
    {Py_tp_call, range_call},
    {Py_tp_repr, range_repr},
    {Py_tp_methods, range_methods},
    {Py_tp_members, range_members},
    {Py_tp_getset, range_getset},
    {0, NULL},
};

static PyType_Spec range_spec = {
    .name = "pygpu.driver.TimeRange",
    .basicsize = sizeof(pygpu_TimeRange),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE | Py_TPFLAGS_BASETYPE,
    .slots = range_slots,
};

/* ---- module functions ---- */

static PyObject *
nvtx_mark(PyObject *module, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"name", "color", NULL};
    PyObject *name, *color = Py_None;
    const char *msg;
    uint32_t argb = 0;
    int has;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O|O:mark", kwlist, &name, &color))
        return NULL;
    if ((msg = name_utf8(name)) == NULL || (has = parse_color(color, &argb)) < 0)
        return NULL;
#ifdef PYGPU_HAVE_NVTX
    {
        nvtxEventAttributes_t a;
        fill_attr(&a, msg, has, argb);
        nvtxDomainMarkEx(domain(), &a);
    }
#else
    (void)has;
#endif
    Py_RETURN_NONE;
}

static PyObject *
nvtx_push(PyObject *module, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"name", "color", NULL};
    PyObject *name, *color = Py_None;
    const char *msg;
    uint32_t argb = 0;
    int has, depth = NVTX_NO_PUSH_POP_TRACKING;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O|O:range_push", kwlist, &name, &color))
        return NULL;
    if ((msg = name_utf8(name)) == NULL || (has = parse_color(color, &argb)) < 0)
        return NULL;
#ifdef PYGPU_HAVE_NVTX
    {
        nvtxEventAttributes_t a;
        fill_attr(&a, msg, has, argb);
        depth = nvtxDomainRangePushEx(domain(), &a);
    }
#else
    (void)has;
#endif
    return PyLong_FromLong(depth);
}

static PyObject *
nvtx_pop(PyObject *module, PyObject *unused)
{
    int depth = NVTX_NO_PUSH_POP_TRACKING;
#ifdef PYGPU_HAVE_NVTX
    depth = nvtxDomainRangePop(domain());
#endif
    return PyLong_FromLong(depth);
}

static PyObject *
nvtx_attached(PyObject *module, PyObject *unused)
{
#ifdef PYGPU_HAVE_NVTX
    (void)domain(); /* initializes NVTX (loads the injection, if any) */
    return PyBool_FromLong(NVTX_VERSIONED_IDENTIFIER(nvtxGlobals).nvtxDomainRangePushEx_impl_fnptr
                           != NULL);
#else
    Py_RETURN_FALSE;
#endif
}

static PyObject *
nvtx_set_wrapper(PyObject *module, PyObject *fn)
{
    pygpu_state *st = PyModule_GetState(module);
    if (!PyCallable_Check(fn)) {
        PyErr_SetString(PyExc_TypeError, "the range wrapper must be callable");
        return NULL;
    }
    Py_XSETREF(st->range_wrapper, Py_NewRef(fn));
    Py_RETURN_NONE;
}

/* cuProfilerStart/Stop in the current context (the default device's primary
 * one if none): CU_OPTIONAL; NULL (a driver without them) is an error that
 * says so. */
static PyObject *
profiler_call(PyObject *module, int start)
{
    pygpu_state *st = PyModule_GetState(module);
    const char *routine = start ? "cuProfilerStart" : "cuProfilerStop";
    pygpu_Context *ctx;
    pygpu_scope s;
    CUresult rc;
    if (pygpu_ensure_driver(st) < 0)
        return NULL;
    if ((start ? (void *)cu.cuProfilerStart : (void *)cu.cuProfilerStop) == NULL) {
        PyErr_Format(st->LogicError, "%s is not available in this CUDA driver", routine);
        return NULL;
    }
    if ((ctx = pygpu_current_context(st)) == NULL || pygpu_scope_enter(st, ctx, &s) < 0)
        return NULL;
    rc = start ? cu.cuProfilerStart() : cu.cuProfilerStop();
    pygpu_scope_exit(&s);
    if (rc != CUDA_SUCCESS)
        return pygpu_cuda_error(st, rc, routine);
    Py_RETURN_NONE;
}

static PyObject *
nvtx_profiler_start(PyObject *module, PyObject *unused)
{
    return profiler_call(module, 1);
}

static PyObject *
nvtx_profiler_stop(PyObject *module, PyObject *unused)
{
    return profiler_call(module, 0);
}

static PyMethodDef nvtx_methods[] = {
    {"_nvtx_mark", (PyCFunction)(void (*)(void))nvtx_mark, METH_VARARGS | METH_KEYWORDS,
     "_nvtx_mark($module, /, name, color=None)\n--\n\n"
     "An NVTX mark (an instant event) in the \"pygpu\" domain."},
    {"_nvtx_push", (PyCFunction)(void (*)(void))nvtx_push, METH_VARARGS | METH_KEYWORDS,
     "_nvtx_push($module, /, name, color=None)\n--\n\n"
     "Push an NVTX range on this thread; the depth the tool reports (-2 "
     "without one)."},
    {"_nvtx_pop", nvtx_pop, METH_NOARGS,
     "_nvtx_pop($module, /)\n--\n\nPop this thread's innermost NVTX range."},
    {"_nvtx_attached", nvtx_attached, METH_NOARGS,
     "_nvtx_attached($module, /)\n--\n\n"
     "Whether a profiler (an NVTX injection library) is attached to NVTX."},
    {"_nvtx_set_wrapper", nvtx_set_wrapper, METH_O,
     "_nvtx_set_wrapper($module, fn, /)\n--\n\n"
     "Register fn(range, func) -> the decorated func (pygpu.profiler does)."},
    {"profiler_start", nvtx_profiler_start, METH_NOARGS,
     "profiler_start($module, /)\n--\n\n"
     "cuProfilerStart: start collecting profile data (nsys --capture-range=cudaProfilerApi)."},
    {"profiler_stop", nvtx_profiler_stop, METH_NOARGS,
     "profiler_stop($module, /)\n--\n\ncuProfilerStop: stop collecting profile data."},
    {NULL},
};

int
pygpu_nvtx_setup(PyObject *m, pygpu_state *st)
{
#ifdef PYGPU_HAVE_NVTX
    const int have = 1;
#else
    const int have = 0;
#endif
    if (pygpu_add_type(m, &range_spec, &st->TimeRangeType) < 0)
        return -1;
    if (PyModule_AddFunctions(m, nvtx_methods) < 0)
        return -1;
    return pygpu_module_add_ref(m, "NVTX_AVAILABLE", have ? Py_True : Py_False);
}
