/* GreenContext: one partition of a device's SMs (green contexts, CUDA 12.4).
 *
 * Device.split_sms(counts) asks the driver for the device's SM resource,
 * checks the split against the device's rules (minimum partition, alignment,
 * total) before anything is split, splits the SMs once into groups of one
 * unit (the counts' greatest common divisor), gives each partition its run of
 * consecutive groups (one descriptor from several groups of one split, as
 * cuDevResourceGenerateDesc allows), and creates a green context on each.
 *
 * A GreenContext is a Context (a C subtype): its handle is the CUcontext
 * cuCtxFromGreenCtx converts it to, so push()/pop(), with blocks, memory,
 * modules, streams, events and graphs made while it is current all belong to
 * it, and context.c releases it with cuGreenCtxDestroy (the Context's green
 * field) instead of cuCtxDestroy.  docs/green_contexts.md.
 */
#include "pygpu.h"

typedef struct {
    pygpu_Context base;
    unsigned int sm_count; /* the SMs the driver provisioned for this partition */
    int index;             /* its place in the split that made it */
} pygpu_GreenContext;

/* context.c: Device.retain_primary_context() (new reference) */
PyObject *pygpu_device_retain_primary(pygpu_Device *self, PyObject *unused);

/* The entry points a split needs, or a LogicError naming the missing one. */
static int
need_green_entries(pygpu_state *st, const char *what)
{
    if (pygpu_need_entry(st, (void *)cu.cuDeviceGetDevResource, "cuDeviceGetDevResource", what) < 0
        || pygpu_need_entry(st, (void *)cu.cuDevSmResourceSplitByCount,
                            "cuDevSmResourceSplitByCount", what)
               < 0
        || pygpu_need_entry(st, (void *)cu.cuDevResourceGenerateDesc, "cuDevResourceGenerateDesc",
                            what)
               < 0
        || pygpu_need_entry(st, (void *)cu.cuGreenCtxCreate, "cuGreenCtxCreate", what) < 0
        || pygpu_need_entry(st, (void *)cu.cuGreenCtxDestroy, "cuGreenCtxDestroy", what) < 0
        || pygpu_need_entry(st, (void *)cu.cuCtxFromGreenCtx, "cuCtxFromGreenCtx", what) < 0)
        return -1;
    return 0;
}

/* The device's SM resource and its partition rules.  A driver before 12.8's
 * headers leaves minSmPartitionSize and smCoscheduledAlignment zero: then
 * the rule cuda.h states per architecture.  0, or -1 with an exception. */
static int
device_sm_rules(pygpu_state *st, pygpu_Device *dev, CUdevResource *res, unsigned int *min_part,
                unsigned int *align)
{
    CUresult rc;
    int major = 0;
    memset(res, 0, sizeof *res);
    rc = cu.cuDeviceGetDevResource(dev->handle, res, CU_DEV_RESOURCE_TYPE_SM);
    if (rc != CUDA_SUCCESS) {
        pygpu_cuda_error(st, rc, "cuDeviceGetDevResource");
        return -1;
    }
    if (res->type != CU_DEV_RESOURCE_TYPE_SM || res->sm.smCount == 0) {
        PyErr_Format(st->LogicError, "device %d reports no SM resource to partition", dev->ordinal);
        return -1;
    }
    *min_part = res->sm.minSmPartitionSize;
    *align = res->sm.smCoscheduledAlignment;
    if (*min_part == 0 || *align == 0) {
        rc = cu.cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
                                     dev->handle);
        if (rc != CUDA_SUCCESS) {
            pygpu_cuda_error(st, rc, "cuDeviceGetAttribute");
            return -1;
        }
        if (*min_part == 0)
            *min_part = major >= 9 ? 8 : major == 8 ? 4 : 2;
        if (*align == 0)
            *align = major >= 9 ? 8 : 2;
    }
    return 0;
}

PyObject *
pygpu_device_sm_partitioning(pygpu_Device *self, PyObject *unused)
{
    pygpu_state *st = PYGPU_STATE(self);
    CUdevResource res;
    unsigned int min_part, align;
    if (st == NULL || pygpu_ensure_driver(st) < 0 || need_green_entries(st, "sm_partitioning()") < 0
        || device_sm_rules(st, self, &res, &min_part, &align) < 0)
        return NULL;
    return Py_BuildValue("(III)", res.sm.smCount, min_part, align);
}

static unsigned long
gcd(unsigned long a, unsigned long b)
{
    while (b != 0) {
        unsigned long t = a % b;
        a = b;
        b = t;
    }
    return a;
}

/* counts: a sequence of ints, each checked against the rules; the
 * ValueErrors name the partition.  Returns a new array of n counts
 * (PyMem_Free it), or NULL with an exception. */
static unsigned int *
parse_counts(PyObject *obj, Py_ssize_t *n, unsigned int total, unsigned int min_part,
             unsigned int align, int ordinal)
{
    PyObject *seq;
    unsigned int *counts = NULL;
    unsigned long sum = 0;
    Py_ssize_t i;
    if (PyUnicode_Check(obj) || PyBytes_Check(obj) || PyLong_Check(obj)) {
        PyErr_Format(PyExc_TypeError,
                     "split_sms(): counts must be a sequence of SM counts, not %.100s",
                     Py_TYPE(obj)->tp_name);
        return NULL;
    }
    seq = PySequence_Fast(obj, "split_sms(): counts must be a sequence of SM counts");
    if (seq == NULL)
        return NULL;
    *n = PySequence_Fast_GET_SIZE(seq);
    if (*n == 0) {
        PyErr_SetString(PyExc_ValueError, "split_sms(): counts is empty: give one SM count a "
                                          "partition");
        goto error;
    }
    if ((unsigned long)*n > total / min_part) {
        PyErr_Format(PyExc_ValueError,
                     "split_sms(): %zd partitions asked for; device %d's %u SMs make at most "
                     "%u partitions of the minimum %u SMs",
                     *n, ordinal, total, total / min_part, min_part);
        goto error;
    }
    counts = PyMem_Calloc((size_t)*n, sizeof *counts);
    if (counts == NULL) {
        PyErr_NoMemory();
        goto error;
    }
    for (i = 0; i < *n; i++) {
        PyObject *item = PySequence_Fast_GET_ITEM(seq, i);
        long v;
        if (!PyLong_Check(item) || PyBool_Check(item)) {
            PyErr_Format(PyExc_TypeError, "split_sms(): counts[%zd] must be an int, not %.100s", i,
                         Py_TYPE(item)->tp_name);
            goto error;
        }
        v = PyLong_AsLong(item);
        if (v == -1 && PyErr_Occurred()) {
            PyErr_Clear();
            v = LONG_MAX;
        }
        if (v <= 0) {
            PyErr_Format(PyExc_ValueError,
                         "split_sms(): partition %zd asks for %ld SMs; each needs at least %u", i,
                         v, min_part);
            goto error;
        }
        if ((unsigned long)v > total) {
            PyErr_Format(PyExc_ValueError,
                         "split_sms(): partition %zd asks for %ld SMs; device %d has %u", i, v,
                         ordinal, total);
            goto error;
        }
        if ((unsigned long)v < min_part) {
            PyErr_Format(PyExc_ValueError,
                         "split_sms(): partition %zd asks for %ld SMs, fewer than device %d's "
                         "minimum partition of %u SMs",
                         i, v, ordinal, min_part);
            goto error;
        }
        if ((unsigned long)v % align != 0) {
            PyErr_Format(PyExc_ValueError,
                         "split_sms(): partition %zd asks for %ld SMs, not a multiple of device "
                         "%d's granularity of %u SMs",
                         i, v, ordinal, align);
            goto error;
        }
        counts[i] = (unsigned int)v;
        sum += (unsigned long)v;
    }
    if (sum > total) {
        PyErr_Format(PyExc_ValueError,
                     "split_sms(): the partitions ask for %lu SMs in all; device %d has %u", sum,
                     ordinal, total);
        goto error;
    }
    Py_DECREF(seq);
    return counts;
error:
    PyMem_Free(counts);
    Py_DECREF(seq);
    return NULL;
}

/* One partition: a descriptor of its groups, a green context, its
 * CUcontext, and the GreenContext object.  New reference or NULL. */
static PyObject *
make_partition(pygpu_state *st, pygpu_Device *dev, CUdevResource *groups, unsigned int ngroups,
               int index)
{
    CUdevResourceDesc desc;
    CUgreenCtx green = NULL;
    CUcontext h;
    CUdevResource mine;
    CUresult rc;
    pygpu_GreenContext *self;
    unsigned int sms = 0, i;
    rc = cu.cuDevResourceGenerateDesc(&desc, groups, ngroups);
    if (rc != CUDA_SUCCESS)
        return pygpu_cuda_error(st, rc, "cuDevResourceGenerateDesc");
    Py_BEGIN_ALLOW_THREADS
        rc = cu.cuGreenCtxCreate(&green, desc, dev->handle, CU_GREEN_CTX_DEFAULT_STREAM);
    Py_END_ALLOW_THREADS
    if (rc != CUDA_SUCCESS)
        return pygpu_cuda_error(st, rc, "cuGreenCtxCreate");
    rc = cu.cuCtxFromGreenCtx(&h, green);
    if (rc != CUDA_SUCCESS) {
        (void)cu.cuGreenCtxDestroy(green);
        return pygpu_cuda_error(st, rc, "cuCtxFromGreenCtx");
    }
    for (i = 0; i < ngroups; i++)
        sms += groups[i].sm.smCount;
    /* the driver's own account of what it provisioned, where it can say */
    memset(&mine, 0, sizeof mine);
    if (cu.cuGreenCtxGetDevResource != NULL
        && cu.cuGreenCtxGetDevResource(green, &mine, CU_DEV_RESOURCE_TYPE_SM) == CUDA_SUCCESS
        && mine.type == CU_DEV_RESOURCE_TYPE_SM && mine.sm.smCount != 0)
        sms = mine.sm.smCount;
    self = (pygpu_GreenContext *)pygpu_context_new_as(st, st->GreenContextType, h, dev->ordinal);
    if (self == NULL) {
        (void)cu.cuGreenCtxDestroy(green);
        return NULL;
    }
    self->base.green = green;
    self->sm_count = sms;
    self->index = index;
    return (PyObject *)self;
}

PyObject *
pygpu_device_split_sms(pygpu_Device *self, PyObject *args, PyObject *kwds)
{
    pygpu_state *st = PYGPU_STATE(self);
    static char *kwlist[] = {"counts", NULL};
    PyObject *cobj, *primary = NULL, *result = NULL;
    CUdevResource whole, *groups = NULL;
    unsigned int min_part, align, *counts = NULL, unit = 0, ngroups, made;
    unsigned long sum = 0;
    Py_ssize_t n = 0, i;
    CUresult rc;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O:split_sms", kwlist, &cobj))
        return NULL;
    if (st == NULL || pygpu_ensure_driver(st) < 0 || need_green_entries(st, "split_sms()") < 0
        || device_sm_rules(st, self, &whole, &min_part, &align) < 0)
        return NULL;
    counts = parse_counts(cobj, &n, whole.sm.smCount, min_part, align, self->ordinal);
    if (counts == NULL)
        return NULL;
    for (i = 0; i < n; i++) {
        unit = (unsigned int)gcd(unit, counts[i]);
        sum += counts[i];
    }
    if (unit < min_part) {
        PyErr_Format(PyExc_ValueError,
                     "split_sms(): partitions of unlike sizes are made of groups of their "
                     "greatest common divisor, %u SMs here, less than device %d's minimum "
                     "partition of %u SMs: choose sizes that are multiples of a common %u or more",
                     unit, self->ordinal, min_part, min_part);
        goto done;
    }
    ngroups = (unsigned int)(sum / unit);
    groups = PyMem_Calloc(ngroups, sizeof *groups);
    if (groups == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    /* the primary context active first, as cuGreenCtxCreate advises (each
     * green context retains it; kept by the module state, not re-made per
     * partition) */
    if ((primary = pygpu_device_retain_primary(self, NULL)) == NULL)
        goto done;
    made = ngroups;
    rc = cu.cuDevSmResourceSplitByCount(groups, &made, &whole, NULL, 0, unit);
    if (rc != CUDA_SUCCESS) {
        pygpu_cuda_error(st, rc, "cuDevSmResourceSplitByCount");
        goto done;
    }
    if (made < ngroups) {
        PyErr_Format(PyExc_ValueError,
                     "split_sms(): device %d's SMs split into only %u groups of %u SMs, %u "
                     "needed (the driver keeps SMs of a cluster together): ask for fewer SMs",
                     self->ordinal, made, unit, ngroups);
        goto done;
    }
    if ((result = PyList_New(n)) == NULL)
        goto done;
    made = 0;
    for (i = 0; i < n; i++) {
        PyObject *part = make_partition(st, self, groups + made, counts[i] / unit, (int)i);
        if (part == NULL) {
            Py_CLEAR(result); /* the partitions made so far are destroyed */
            goto done;
        }
        PyList_SET_ITEM(result, i, part);
        made += counts[i] / unit;
    }
done:
    Py_XDECREF(primary);
    PyMem_Free(groups);
    PyMem_Free(counts);
    return result;
}

static PyObject *
green_create_stream(pygpu_GreenContext *self, PyObject *args, PyObject *kwds)
{
    pygpu_state *st = PYGPU_STATE(self);
    static char *kwlist[] = {"priority", NULL};
    PyObject *pobj = NULL, *res;
    int priority = 0;
    CUstream h;
    CUresult rc;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|O:create_stream", kwlist, &pobj))
        return NULL;
    if (pobj != NULL && pygpu_parse_int(pobj, &priority, "create_stream(): priority") < 0)
        return NULL;
    if (pygpu_context_check(st, &self->base) < 0
        || pygpu_need_entry(st, (void *)cu.cuGreenCtxStreamCreate, "cuGreenCtxStreamCreate",
                            "GreenContext.create_stream()")
               < 0)
        return NULL;
    rc = cu.cuGreenCtxStreamCreate(&h, self->base.green, CU_STREAM_NON_BLOCKING, priority);
    if (rc != CUDA_SUCCESS)
        return pygpu_cuda_error(st, rc, "cuGreenCtxStreamCreate");
    res = pygpu_stream_wrap(st, h, &self->base);
    if (res == NULL) {
        pygpu_scope s;
        if (pygpu_scope_enter_quiet(&self->base, &s) == 0) {
            (void)cu.cuStreamDestroy(h);
            pygpu_scope_exit(&s);
        }
    }
    return res;
}

static PyObject *
green_get_sm_count(pygpu_GreenContext *self, void *c)
{
    return PyLong_FromUnsignedLong(self->sm_count);
}

static PyObject *
green_get_index(pygpu_GreenContext *self, void *c)
{
    return PyLong_FromLong(self->index);
}

static PyObject *
green_get_green_handle(pygpu_GreenContext *self, void *c)
{
    return PyLong_FromVoidPtr(self->base.green);
}

static PyObject *
green_repr(pygpu_GreenContext *self)
{
    return PyUnicode_FromFormat("<pygpu.driver.GreenContext %d of device %d: %u SMs%s at %p>",
                                self->index, self->base.ordinal, self->sm_count,
                                self->base.detached ? " (detached)" : "",
                                (void *)self->base.handle);
}

static PyMethodDef green_methods[] = {
    {"create_stream", (PyCFunction)(void (*)(void))green_create_stream,
     METH_VARARGS | METH_KEYWORDS,
     "create_stream($self, /, priority=0)\n--\n\n"
     "A new non-blocking Stream whose work runs on this partition's SMs "
     "(cuGreenCtxStreamCreate)."},
    {NULL},
};

static PyGetSetDef green_getset[] = {
    {"sm_count", (getter)green_get_sm_count, NULL, "The SMs this partition has.", NULL},
    {"index", (getter)green_get_index, NULL, "Its place in the split_sms() list.", NULL},
    {"green_handle", (getter)green_get_green_handle, NULL,
     "The CUgreenCtx as an int (0 once detached).", NULL},
    {NULL},
};

static PyType_Slot green_slots[] = {
    {Py_tp_methods, green_methods},
    {Py_tp_getset, green_getset},
    {Py_tp_repr, green_repr},
    {Py_tp_doc, "A green context: a Context whose work runs on a partition of its device's "
                "SMs. Made by Device.split_sms(); usable as a with block."},
    {0, NULL},
};

static PyType_Spec green_spec = {"pygpu.driver.GreenContext", sizeof(pygpu_GreenContext), 0,
                                 Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE
                                     | Py_TPFLAGS_DISALLOW_INSTANTIATION | Py_TPFLAGS_BASETYPE,
                                 green_slots};

int
pygpu_greenctx_setup(PyObject *m, pygpu_state *st)
{
    PyObject *bases = PyTuple_Pack(1, (PyObject *)st->ContextType), *tp;
    if (bases == NULL)
        return -1;
    tp = PyType_FromModuleAndSpec(m, &green_spec, bases);
    Py_DECREF(bases);
    if (tp == NULL)
        return -1;
    st->GreenContextType = (PyTypeObject *)tp;
#if PY_VERSION_HEX < 0x030A0000
    ((PyTypeObject *)tp)->tp_new = NULL; /* no DISALLOW_INSTANTIATION before 3.10 */
#endif
    return pygpu_module_add_ref(m, "GreenContext", tp);
}
