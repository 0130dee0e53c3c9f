/* Device: one CUDA device, by ordinal or PCI bus id. */
#include "pygpu.h"

static int
ordinal_count(pygpu_state *st, int *count)
{
    CUresult rc = cu.cuDeviceGetCount(count);
    if (rc != CUDA_SUCCESS) {
        pygpu_cuda_error(st, rc, "cuDeviceGetCount");
        return -1;
    }
    return 0;
}

/* A Device of type tp (DeviceType or a subclass: Device.__new__'s type). */
static PyObject *
device_of_type(pygpu_state *st, PyTypeObject *tp, int ordinal)
{
    pygpu_Device *self;
    CUdevice dev;
    CUresult rc;
    int count;
    if (pygpu_ensure_driver(st) < 0 || ordinal_count(st, &count) < 0)
        return NULL;
    if (ordinal < 0 || ordinal >= count) {
        PyErr_Format(PyExc_ValueError,
                     "no CUDA device with ordinal %d: %d device%s visible "
                     "(ordinals 0 to %d)",
                     ordinal, count, count == 1 ? " is" : "s are", count - 1);
        return NULL;
    }
    rc = cu.cuDeviceGet(&dev, ordinal);
    if (rc != CUDA_SUCCESS)
        return pygpu_cuda_error(st, rc, "cuDeviceGet");
    self = (pygpu_Device *)tp->tp_alloc(tp, 0);
    if (self == NULL)
        return NULL;
    self->handle = dev;
    self->ordinal = ordinal;
    return (PyObject *)self;
}

PyObject *
pygpu_device_new(pygpu_state *st, int ordinal)
{
    return device_of_type(st, st->DeviceType, ordinal);
}

static PyObject *
device_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    pygpu_state *st = pygpu_state_from_type(type);
    PyObject *which;
    static char *kwlist[] = {"device", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O:Device", kwlist, &which))
        return NULL;
    if (PyUnicode_Check(which)) {
        CUdevice dev;
        CUresult rc;
        int count, i;
        const char *bus = PyUnicode_AsUTF8(which);
        if (bus == NULL || pygpu_ensure_driver(st) < 0)
            return NULL;
        rc = cu.cuDeviceGetByPCIBusId(&dev, bus);
        if (rc != CUDA_SUCCESS) {
            if (rc == CUDA_ERROR_INVALID_VALUE || rc == CUDA_ERROR_INVALID_DEVICE) {
                PyErr_Format(PyExc_ValueError, "no CUDA device at PCI bus id %R", which);
                return NULL;
            }
            return pygpu_cuda_error(st, rc, "cuDeviceGetByPCIBusId");
        }
        if (ordinal_count(st, &count) < 0)
            return NULL;
        for (i = 0; i < count; i++) {
            CUdevice d;
            rc = cu.cuDeviceGet(&d, i);
            if (rc != CUDA_SUCCESS)
                return pygpu_cuda_error(st, rc, "cuDeviceGet");
            if (d == dev)
                return device_of_type(st, type, i);
        }
        PyErr_Format(PyExc_ValueError, "no CUDA device at PCI bus id %R", which);
        return NULL;
    }
    if (PyIndex_Check(which) && !PyBool_Check(which)) {
        long n = PyLong_AsLong(which);
        if (n == -1 && PyErr_Occurred())
            return NULL;
        if (n < INT_MIN || n > INT_MAX) {
            PyErr_Format(PyExc_ValueError, "no CUDA device with ordinal %ld", n);
            return NULL;
        }
        return device_of_type(st, type, (int)n);
    }
    PyErr_Format(PyExc_TypeError,
                 "Device() takes an ordinal (int) or a PCI bus id (str), not %.100s",
                 Py_TYPE(which)->tp_name);
    return NULL;
}

static void
device_dealloc(pygpu_Device *self)
{
    PyTypeObject *tp = Py_TYPE(self);
    tp->tp_free((PyObject *)self);
    Py_DECREF(tp);
}

static PyObject *
device_count(PyObject *cls, PyObject *unused)
{
    pygpu_state *st = pygpu_state_from_type((PyTypeObject *)cls);
    int n;
    if (pygpu_ensure_driver(st) < 0 || ordinal_count(st, &n) < 0)
        return NULL;
    return PyLong_FromLong(n);
}

/* In a child forked after CUDA was initialised (fork.c): -1 with the
 * loader's CudaUnavailableError, before any driver call. */
static int
forked(pygpu_Device *self)
{
    if (pygpu_forked_from == 0)
        return 0;
    return pygpu_ensure_driver(PYGPU_STATE(self)) < 0 ? -1 : 0;
}

static int
get_attr(pygpu_Device *self, int attr, int *value)
{
    CUresult rc;
    if (forked(self) < 0)
        return -1;
    rc = cu.cuDeviceGetAttribute(value, (CUdevice_attribute)attr, self->handle);
    if (rc != CUDA_SUCCESS) {
        pygpu_cuda_error(PYGPU_STATE(self), rc, "cuDeviceGetAttribute");
        return -1;
    }
    return 0;
}

static PyObject *
device_name(pygpu_Device *self, PyObject *unused)
{
    char buf[256];
    CUresult rc;
    if (forked(self) < 0)
        return NULL;
    rc = cu.cuDeviceGetName(buf, sizeof buf, self->handle);
    if (rc != CUDA_SUCCESS)
        return pygpu_cuda_error(PYGPU_STATE(self), rc, "cuDeviceGetName");
    return PyUnicode_FromString(buf);
}

static PyObject *
device_compute_capability(pygpu_Device *self, PyObject *unused)
{
    int major, minor;
    if (get_attr(self, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, &major) < 0
        || get_attr(self, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, &minor) < 0)
        return NULL;
    return Py_BuildValue("(ii)", major, minor);
}

static PyObject *
device_total_memory(pygpu_Device *self, PyObject *unused)
{
    size_t n;
    CUresult rc;
    if (forked(self) < 0)
        return NULL;
    rc = cu.cuDeviceTotalMem(&n, self->handle);
    if (rc != CUDA_SUCCESS)
        return pygpu_cuda_error(PYGPU_STATE(self), rc, "cuDeviceTotalMem");
    return PyLong_FromSize_t(n);
}

static PyObject *
device_pci_bus_id(pygpu_Device *self, PyObject *unused)
{
    char buf[64];
    CUresult rc;
    if (forked(self) < 0)
        return NULL;
    rc = cu.cuDeviceGetPCIBusId(buf, sizeof buf, self->handle);
    if (rc != CUDA_SUCCESS)
        return pygpu_cuda_error(PYGPU_STATE(self), rc, "cuDeviceGetPCIBusId");
    return PyUnicode_FromString(buf);
}

static PyObject *
device_uuid(pygpu_Device *self, void *closure)
{
    CUuuid u;
    PyObject *mod, *res;
    CUresult rc;
    if (forked(self) < 0)
        return NULL;
    rc = cu.cuDeviceGetUuid(&u, self->handle);
    if (rc != CUDA_SUCCESS)
        return pygpu_cuda_error(PYGPU_STATE(self), rc, "cuDeviceGetUuid");
    /* uuid.UUID(bytes=...) */
    mod = PyImport_ImportModule("uuid");
    if (mod == NULL)
        return NULL;
    PyObject *cls = PyObject_GetAttrString(mod, "UUID");
    Py_DECREF(mod);
    if (cls == NULL)
        return NULL;
    PyObject *kw = Py_BuildValue("{sy#}", "bytes", u.bytes, (Py_ssize_t)16);
    PyObject *empty = PyTuple_New(0);
    res = (kw && empty) ? PyObject_Call(cls, empty, kw) : NULL;
    Py_XDECREF(kw);
    Py_XDECREF(empty);
    Py_DECREF(cls);
    return res;
}

static PyObject *
lookup_enum(PyObject *obj, const char *enum_name)
{
    PyObject *mod = pygpu_module_from_type(Py_TYPE(obj));
    return mod ? PyObject_GetAttrString(mod, enum_name) : NULL;
}

/* A name of the Python module pygpu.driver (AttributeError if it is not
 * there, ImportError while it cannot be imported). */
static PyObject *
lookup_driver_py(const char *name)
{
    PyObject *mod = PyImport_ImportModule("pygpu.driver"), *res;
    if (mod == NULL)
        return NULL;
    res = PyObject_GetAttrString(mod, name);
    Py_DECREF(mod);
    return res;
}

/* An attribute's value as PyCUDA gives it: COMPUTE_MODE as a compute_mode
 * member (it prints DEFAULT, not 0), every other one as an int. */
static PyObject *
attribute_value(PyObject *self, int attr, int value)
{
    PyObject *cls, *res;
    if (attr != CU_DEVICE_ATTRIBUTE_COMPUTE_MODE)
        return PyLong_FromLong(value);
    (void)self;
    if ((cls = lookup_driver_py("compute_mode")) == NULL)
        return NULL;
    res = PyObject_CallFunction(cls, "i", value);
    Py_DECREF(cls);
    if (res == NULL && PyErr_ExceptionMatches(PyExc_ValueError)) {
        PyErr_Clear(); /* a mode newer than the enum: the int */
        res = PyLong_FromLong(value);
    }
    return res;
}

static PyObject *
device_get_attribute(pygpu_Device *self, PyObject *arg)
{
    int value, attr;
    if (pygpu_parse_int(arg, &attr, "get_attribute(): attr") < 0)
        return NULL;
    if (get_attr(self, attr, &value) < 0)
        return NULL;
    return attribute_value((PyObject *)self, attr, value);
}

/* get_attributes(): PyCUDA's attributes (the names of pygpu.driver's
 * _PYCUDA_DEVICE_ATTRIBUTES), so a ported program prints what it
 * printed under PyCUDA; every=True: every member of device_attribute. */
static PyObject *
device_get_attributes(pygpu_Device *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"every", NULL};
    PyObject *enum_cls, *result = NULL, *it = NULL, *member, *only = NULL;
    int every = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|p:get_attributes", kwlist, &every))
        return NULL;
    if (forked(self) < 0)
        return NULL;
    enum_cls = lookup_enum((PyObject *)self, "device_attribute");
    if (enum_cls == NULL)
        return NULL;
    if (!every) {
        only = lookup_driver_py("_PYCUDA_DEVICE_ATTRIBUTES");
        if (only == NULL)
            goto error;
    }
    result = PyDict_New();
    it = result ? PyObject_GetIter(enum_cls) : NULL;
    if (it == NULL)
        goto error;
    while ((member = PyIter_Next(it)) != NULL) {
        int value;
        long attr;
        CUresult rc;
        if (only != NULL) {
            PyObject *name = PyObject_GetAttrString(member, "name");
            int in = name ? PySequence_Contains(only, name) : -1;
            Py_XDECREF(name);
            if (in <= 0) {
                Py_DECREF(member);
                if (in < 0)
                    goto error;
                continue;
            }
        }
        attr = PyLong_AsLong(member);
        rc = cu.cuDeviceGetAttribute(&value, (CUdevice_attribute)attr, self->handle);
        if (rc != CUDA_SUCCESS && rc != CUDA_ERROR_INVALID_VALUE) {
            /* INVALID_VALUE: an attribute this driver does not know; skipped */
            pygpu_cuda_error(PYGPU_STATE(self), rc, "cuDeviceGetAttribute");
            Py_DECREF(member);
            goto error;
        }
        if (rc == CUDA_SUCCESS) {
            PyObject *v = attribute_value((PyObject *)self, (int)attr, value);
            if (v == NULL || PyDict_SetItem(result, member, v) < 0) {
                Py_XDECREF(v);
                Py_DECREF(member);
                goto error;
            }
            Py_DECREF(v);
        }
        Py_DECREF(member);
    }
    if (PyErr_Occurred())
        goto error;
    Py_DECREF(it);
    Py_XDECREF(only);
    Py_DECREF(enum_cls);
    return result;
error:
    Py_XDECREF(it);
    Py_XDECREF(result);
    Py_XDECREF(only);
    Py_DECREF(enum_cls);
    return NULL;
}

/* dev.max_threads_per_block and friends: names of device_attribute. */
static PyObject *
device_getattro(pygpu_Device *self, PyObject *name)
{
    PyObject *res = PyObject_GenericGetAttr((PyObject *)self, name), *enum_cls, *upper, *member;
    if (res != NULL || !PyErr_ExceptionMatches(PyExc_AttributeError))
        return res;
    if (!PyUnicode_Check(name) || PyUnicode_GET_LENGTH(name) == 0
        || PyUnicode_READ_CHAR(name, 0) == '_')
        return NULL;
    /* the lookups below run Python code: never with an exception set */
    PyErr_Clear();
    enum_cls = lookup_enum((PyObject *)self, "device_attribute");
    if (enum_cls == NULL)
        return NULL;
    upper = PyObject_CallMethod(name, "upper", NULL);
    member = upper ? PyObject_GetAttr(enum_cls, upper) : NULL;
    Py_XDECREF(upper);
    Py_DECREF(enum_cls);
    if (member == NULL) {
        if (!PyErr_Occurred() || PyErr_ExceptionMatches(PyExc_AttributeError)) {
            PyErr_Clear();
            const char *tn = Py_TYPE(self)->tp_name, *dot = strrchr(tn, '.');
            PyErr_Format(PyExc_AttributeError,
                         "'%.100s' object has no attribute %R (nor is it a "
                         "device_attribute name)",
                         dot ? dot + 1 : tn, name);
        }
        return NULL;
    }
    res = device_get_attribute(self, member);
    Py_DECREF(member);
    return res;
}

static PyObject *
device_can_access_peer(pygpu_Device *self, PyObject *other)
{
    pygpu_state *st = PYGPU_STATE(self);
    int can;
    CUresult rc;
    if (!PyObject_TypeCheck(other, st->DeviceType)) {
        PyErr_SetString(PyExc_TypeError, "can_access_peer() takes a Device");
        return NULL;
    }
    if (forked(self) < 0)
        return NULL;
    rc = cu.cuDeviceCanAccessPeer(&can, self->handle, ((pygpu_Device *)other)->handle);
    if (rc != CUDA_SUCCESS)
        return pygpu_cuda_error(st, rc, "cuDeviceCanAccessPeer");
    return PyBool_FromLong(can);
}

/* defined in context.c */
PyObject *pygpu_device_retain_primary(pygpu_Device *self, PyObject *unused);
PyObject *pygpu_device_make_context(pygpu_Device *self, PyObject *args, PyObject *kwds);

static PyObject *
device_richcompare(pygpu_Device *self, PyObject *other, int op)
{
    if (!PyObject_TypeCheck(other, Py_TYPE(self)) || (op != Py_EQ && op != Py_NE))
        Py_RETURN_NOTIMPLEMENTED;
    int eq = self->ordinal == ((pygpu_Device *)other)->ordinal;
    return PyBool_FromLong(op == Py_EQ ? eq : !eq);
}

static Py_hash_t
device_hash(pygpu_Device *self)
{
    return (Py_hash_t)self->ordinal + 0x5f3759df;
}

static PyObject *
device_repr(pygpu_Device *self)
{
    char buf[256];
    int major = 0, minor = 0;
    if (pygpu_forked_from != 0) /* no driver in a forked child */
        return PyUnicode_FromFormat("<pygpu.driver.Device %d>", self->ordinal);
    if (cu.cuDeviceGetName(buf, sizeof buf, self->handle) != CUDA_SUCCESS)
        snprintf(buf, sizeof buf, "?");
    cu.cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, self->handle);
    cu.cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, self->handle);
    return PyUnicode_FromFormat("<pygpu.driver.Device %d: %s, sm_%d%d>", self->ordinal, buf, major,
                                minor);
}

static PyObject *
device_int(pygpu_Device *self)
{
    return PyLong_FromLong(self->ordinal);
}

static PyObject *
device_get_ordinal(pygpu_Device *self, void *c)
{
    return PyLong_FromLong(self->ordinal);
}

static PyMethodDef device_methods[] = {
    {"count", device_count, METH_NOARGS | METH_CLASS,
     "count($cls, /)\n--\n\nNumber of CUDA devices visible to this process."},
    {"name", (PyCFunction)device_name, METH_NOARGS,
     "name($self, /)\n--\n\nThe device's product name."},
    {"compute_capability", (PyCFunction)device_compute_capability, METH_NOARGS,
     "compute_capability($self, /)\n--\n\n(major, minor), e.g. (9, 0)."},
    {"total_memory", (PyCFunction)device_total_memory, METH_NOARGS,
     "total_memory($self, /)\n--\n\nDevice memory in bytes."},
    {"pci_bus_id", (PyCFunction)device_pci_bus_id, METH_NOARGS,
     "pci_bus_id($self, /)\n--\n\nPCI bus id, e.g. '0000:3B:00.0'."},
    {"get_attribute", (PyCFunction)device_get_attribute, METH_O,
     "get_attribute($self, attr, /)\n--\n\nValue of one device_attribute."},
    {"get_attributes", (PyCFunction)(void (*)(void))device_get_attributes,
     METH_VARARGS | METH_KEYWORDS,
     "get_attributes($self, /, every=False)\n--\n\nDict {device_attribute: value} of the "
     "attributes PyCUDA 2026.1 names\n(as PyCUDA's get_attributes() gives them, so ported "
     "programs print the same);\nevery=True: of every device_attribute the driver reports."},
    {"can_access_peer", (PyCFunction)device_can_access_peer, METH_O,
     "can_access_peer($self, other, /)\n--\n\nWhether this device can map other's memory."},
    {"retain_primary_context", (PyCFunction)pygpu_device_retain_primary, METH_NOARGS,
     "retain_primary_context($self, /)\n--\n\n"
     "The device's primary context (the one CuPy, PyTorch and cuda.core use). "
     "Not made current: use it as a with block or call push()."},
    {"make_context", (PyCFunction)(void (*)(void))pygpu_device_make_context,
     METH_VARARGS | METH_KEYWORDS,
     "make_context($self, /, flags=0)\n--\n\n"
     "Create a new context on this device and push it (PyCUDA style). "
     "Prefer the primary context, which other libraries share."},
    {"split_sms", (PyCFunction)(void (*)(void))pygpu_device_split_sms, METH_VARARGS | METH_KEYWORDS,
     "split_sms($self, /, counts)\n--\n\n"
     "Split the device's SMs into disjoint partitions of counts[i] SMs: a list of\n"
     "GreenContext, one a partition (docs/green_contexts.md)."},
    {"sm_partitioning", (PyCFunction)pygpu_device_sm_partitioning, METH_NOARGS,
     "sm_partitioning($self, /)\n--\n\n"
     "(sm_count, min_partition, alignment): the rules split_sms() follows."},
    {NULL},
};

static PyGetSetDef device_getset[] = {
    {"uuid", (getter)device_uuid, NULL, "The device's UUID (uuid.UUID).", NULL},
    {"ordinal", (getter)device_get_ordinal, NULL, "The device ordinal.", NULL},
    {NULL},
};

static PyType_Slot device_slots[] = {
    {Py_tp_new, device_new},
    {Py_tp_init, pygpu_init_made},
    {Py_tp_dealloc, device_dealloc},
    {Py_tp_methods, device_methods},
    {Py_tp_getset, device_getset},
    {Py_tp_getattro, device_getattro},
    {Py_tp_richcompare, device_richcompare},
    {Py_tp_hash, device_hash},
    {Py_tp_repr, device_repr},
    {Py_nb_int, device_int},
    {Py_tp_doc, "Device(device)\n--\n\n"
                "A CUDA device, by ordinal (int) or PCI bus id (str).\n"
                "Attributes by name: dev.max_threads_per_block, dev.multiprocessor_count, ..."},
    {0, NULL},
};

static PyType_Spec device_spec = {
    "pygpu.driver.Device", sizeof(pygpu_Device), 0,
    Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE | Py_TPFLAGS_BASETYPE, device_slots};

int
pygpu_device_setup(PyObject *m, pygpu_state *st)
{
    return pygpu_add_type(m, &device_spec, &st->DeviceType);
}
