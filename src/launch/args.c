/* Kernel arguments: the parameter layout, the packers, and the pointer
 * adapters (DeviceAllocation, __cuda_array_interface__, DLPack, int), plus
 * ArgumentHandler, the base of In/Out/InOut.
 *
 * A launch packs into storage owned by the call (pygpu_argpack, on the C
 * stack up to a few KiB), never into the Function: Python code that runs
 * while arguments are converted (a __cuda_array_interface__ property, an
 * __index__, a __dlpack__) may switch threads or launch the same kernel
 * again, and neither can touch this call's values.  DeviceAllocation
 * pointers are written last, after every such conversion has run, so an
 * allocation freed by one of them is refused instead of launched with.
 */
#include "pygpu.h"
#include "core/pygpu_numpy.h"

#define MAX_PARAMS 1024

/* ---- layouts ---- */

static pygpu_layout *
layout_new(int nparams)
{
    size_t n = nparams > 0 ? (size_t)nparams : 0;
    pygpu_layout *l = PyMem_Malloc(sizeof(pygpu_layout) + n * sizeof(pygpu_param));
    if (l == NULL) {
        PyErr_NoMemory();
        return NULL;
    }
    l->refs = 1;
    l->nparams = nparams;
    l->known = 0;
    l->total = 0;
    l->prepared = NULL;
    return l;
}

void
pygpu_layout_decref(pygpu_layout *l)
{
    if (l != NULL && --l->refs == 0) {
        PyMem_Free(l->prepared);
        PyMem_Free(l);
    }
}

/* Read the layout through cuFuncGetParamInfo into a new layout; NULL and an
 * exception on failure.  The Function is untouched until it is complete. */
static pygpu_layout *
layout_read(pygpu_state *st, pygpu_Function *f)
{
    size_t off, size, end = 0;
    int n = 0, cap = 8;
    pygpu_param *params = PyMem_Malloc(cap * sizeof *params);
    pygpu_layout *l;
    if (params == NULL) {
        PyErr_NoMemory();
        return NULL;
    }
    for (;;) {
        CUresult rc = cu.cuFuncGetParamInfo(f->handle, (size_t)n, &off, &size);
        if (rc == CUDA_ERROR_INVALID_VALUE)
            break;
        if (rc != CUDA_SUCCESS) {
            PyMem_Free(params);
            pygpu_cuda_error(st, rc, "cuFuncGetParamInfo");
            return NULL;
        }
        if (n == MAX_PARAMS) {
            PyMem_Free(params);
            PyErr_Format(PyExc_ValueError, "kernel '%s' has more than %d parameters",
                         pygpu_function_name(f), MAX_PARAMS);
            return NULL;
        }
        if (n == cap) {
            pygpu_param *p2 = PyMem_Realloc(params, 2 * cap * sizeof *params);
            if (p2 == NULL) {
                PyMem_Free(params);
                PyErr_NoMemory();
                return NULL;
            }
            params = p2;
            cap *= 2;
        }
        params[n].offset = off;
        params[n].size = size;
        if (off + size > end)
            end = off + size;
        n++;
    }
    l = layout_new(n);
    if (l != NULL) {
        memcpy(l->params, params, (size_t)n * sizeof *params);
        l->known = 1;
        l->total = end;
    }
    PyMem_Free(params);
    return l;
}

pygpu_layout *
pygpu_layout_get(pygpu_state *st, pygpu_Function *f)
{
    pygpu_layout *l;
    int warn = 0;
    if (f->layout != NULL)
        return f->layout;
    if (cu.cuFuncGetParamInfo != NULL) {
        l = layout_read(st, f);
    } else {
        l = layout_new(-1);
        warn = !st->warned_no_param_info;
        st->warned_no_param_info = 1;
    }
    if (l == NULL)
        return NULL;
    /* publish before the warning, which can run Python code */
    if (f->layout == NULL)
        f->layout = l;
    else
        pygpu_layout_decref(l);
    if (warn
        && PyErr_WarnEx(PyExc_RuntimeWarning,
                        "this CUDA driver has no cuFuncGetParamInfo (it is older "
                        "than 12.4): kernel arguments are packed by PyCUDA's rules "
                        "(Python int -> int64, float -> float64) and not checked "
                        "against the kernel's parameters",
                        1)
               < 0)
        return NULL;
    return f->layout;
}

/* ---- prepare() type codes ---- */

static size_t
char_size(char c)
{
    switch (c) {
    case 'b':
    case 'B':
    case 'c':
    case '?': return 1;
    case 'h':
    case 'H':
    case 'e': return 2;
    case 'i':
    case 'I':
    case 'f': return 4;
    case 'l':
    case 'L':
    case 'q':
    case 'Q':
    case 'n':
    case 'N':
    case 'd':
    case 'P':
    case 'p': return 8;
    default: return 0;
    }
}

static int
type_char(PyObject *item, char *out)
{
    PyArray_Descr *d = NULL;
    if (PyUnicode_Check(item) && PyUnicode_GET_LENGTH(item) == 1) {
        Py_UCS4 c = PyUnicode_READ_CHAR(item, 0);
        if (c == 0 || c > 127) {
            PyErr_Format(PyExc_ValueError, "prepare(): unknown type %R", item);
            return -1;
        }
        *out = (char)c;
        return 0;
    }
    if (!PyArray_DescrConverter(item, &d))
        return -1;
    *out = d->type;
    Py_DECREF(d);
    return 0;
}

/* A new layout for prepare(arg_types): the known layout checked against the
 * codes, or (no cuFuncGetParamInfo) the count and natural sizes they give. */
pygpu_layout *
pygpu_layout_prepared(pygpu_state *st, pygpu_Function *f, PyObject *types)
{
    pygpu_layout *base = pygpu_layout_get(st, f), *l = NULL;
    PyObject *seq;
    Py_ssize_t n, i;
    char *chars = NULL;
    if (base == NULL)
        return NULL;
    base->refs++;                 /* the conversions below can run Python code */
    seq = PySequence_List(types); /* "PPif" or a sequence of dtypes */
    if (seq == NULL)
        goto error;
    n = PyList_GET_SIZE(seq);
    if (n > MAX_PARAMS) {
        PyErr_Format(PyExc_ValueError, "prepare(): %zd types; at most %d", n, MAX_PARAMS);
        goto error;
    }
    chars = PyMem_Calloc((size_t)n + 1, 1);
    if (chars == NULL) {
        PyErr_NoMemory();
        goto error;
    }
    for (i = 0; i < n; i++) {
        PyObject *item = PyList_GET_ITEM(seq, i);
        Py_INCREF(item);
        int r = type_char(item, &chars[i]);
        if (r == 0 && char_size(chars[i]) == 0 && chars[i] != 'V') {
            PyErr_Format(PyExc_ValueError, "prepare(): unknown type %R at position %zd", item, i);
            r = -1;
        }
        Py_DECREF(item);
        if (r < 0)
            goto error;
    }
    if (base->known) {
        if (n != base->nparams) {
            PyErr_Format(PyExc_TypeError,
                         "prepare(): kernel '%s' takes %d arguments but %zd types were given",
                         pygpu_function_name(f), base->nparams, n);
            goto error;
        }
        for (i = 0; i < n; i++) {
            size_t cs = char_size(chars[i]);
            if (cs && cs != base->params[i].size) {
                PyErr_Format(PyExc_TypeError,
                             "prepare(): kernel '%s' parameter %zd is %zu bytes but type "
                             "'%c' is %zu bytes",
                             pygpu_function_name(f), i, base->params[i].size,
                             (int)(unsigned char)chars[i], cs);
                goto error;
            }
        }
        l = layout_new((int)n);
        if (l == NULL)
            goto error;
        memcpy(l->params, base->params, (size_t)n * sizeof(pygpu_param));
        l->known = 1;
        l->total = base->total;
    } else {
        l = layout_new((int)n); /* sizes are chosen per call */
        if (l == NULL)
            goto error;
    }
    l->prepared = chars;
    Py_DECREF(seq);
    pygpu_layout_decref(base);
    return l;
error:
    Py_XDECREF(seq);
    PyMem_Free(chars);
    pygpu_layout_decref(base);
    return NULL;
}

/* ---- pointer adapters ---- */

static int
alloc_ptr(pygpu_state *st, pygpu_DeviceAllocation *a, CUdeviceptr *ptr)
{
    if (a->freed) {
        PyErr_SetString(st->LogicError, "the DeviceAllocation was freed");
        return -1;
    }
    if (a->context->detached) {
        if (a->context->detached == 3)
            return pygpu_ensure_driver(st); /* forked: CudaUnavailableError */
        PyErr_SetString(st->LogicError,
                        "the DeviceAllocation's context was detached, which freed it");
        return -1;
    }
    *ptr = a->ptr;
    return 0;
}

/* see cai_read; (size_t)-1 when unknown */
static size_t
cai_extent(PyObject *shape, PyObject *typestr, PyObject *strides)
{
    Py_ssize_t i, n = PyTuple_GET_SIZE(shape);
    const char *ts = PyUnicode_AsUTF8(typestr);
    size_t item = ts && strlen(ts) > 2 ? (size_t)atoi(ts + 2) : 0, total = item, last = 0;
    int strided = strides != NULL && strides != Py_None;
    if (item == 0)
        return (size_t)-1; /* unknown item size: no bound check */
    if (strided && (!PyTuple_Check(strides) || PyTuple_GET_SIZE(strides) != n))
        return (size_t)-1;
    for (i = 0; i < n; i++) {
        long long d = PyLong_AsLongLong(PyTuple_GET_ITEM(shape, i));
        if (d < 0 || PyErr_Occurred())
            return (size_t)-1;
        if (d == 0)
            return 0; /* no elements */
        if (strided) {
            long long st = PyLong_AsLongLong(PyTuple_GET_ITEM(strides, i));
            if (st < 0 || PyErr_Occurred())
                return (size_t)-1;
            if ((unsigned long long)(d - 1) > 0 && (size_t)st > (SIZE_MAX - last) / (size_t)(d - 1))
                return (size_t)-1;
            last += (size_t)(d - 1) * (size_t)st;
        } else {
            if (total > SIZE_MAX / (size_t)d)
                return (size_t)-1;
            total *= (size_t)d;
        }
    }
    if (strided)
        return last > SIZE_MAX - item ? (size_t)-1 : last + item;
    return total;
}

/* Read a __cuda_array_interface__ dict once: the data pointer and, for a
 * C-contiguous array with a known item size, its extent in bytes ((size_t)-1
 * when unknown).  Each entry is held by a strong reference while the
 * __index__ of its items runs, which may mutate the dict. */
static int
cai_read(PyObject *cai, CUdeviceptr *ptr, size_t *size)
{
    PyObject *data = NULL, *shape = NULL, *typestr = NULL, *strides = NULL;
    int r = -1;
    if (!PyDict_Check(cai)) {
        PyErr_SetString(PyExc_TypeError, "__cuda_array_interface__ is not a dict");
        return -1;
    }
    Py_INCREF(cai);
    if ((data = PyDict_GetItemString(cai, "data")) != NULL)
        Py_INCREF(data);
    if ((shape = PyDict_GetItemString(cai, "shape")) != NULL)
        Py_INCREF(shape);
    if ((typestr = PyDict_GetItemString(cai, "typestr")) != NULL)
        Py_INCREF(typestr);
    if ((strides = PyDict_GetItemString(cai, "strides")) != NULL)
        Py_INCREF(strides);
    if (data == NULL || !PyTuple_Check(data) || PyTuple_GET_SIZE(data) < 1
        || !PyLong_Check(PyTuple_GET_ITEM(data, 0))) {
        PyErr_SetString(PyExc_TypeError, "__cuda_array_interface__ has no valid 'data' entry");
        goto done;
    }
    *ptr = (CUdeviceptr)PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(data, 0));
    if (PyErr_Occurred()) {
        PyErr_Format(PyExc_ValueError,
                     "__cuda_array_interface__['data'][0] is not a device address: %R",
                     PyTuple_GET_ITEM(data, 0));
        goto done;
    }
    *size = (size_t)-1;
    if (shape && typestr && PyTuple_Check(shape) && PyUnicode_Check(typestr)) {
        /* the bytes the array spans from its pointer: C-contiguous without
         * strides; with strides, the last element's end (unknown when a
         * stride is negative) */
        *size = cai_extent(shape, typestr, strides);
        PyErr_Clear();
    }
    r = 0;
done:
    Py_XDECREF(data);
    Py_XDECREF(shape);
    Py_XDECREF(typestr);
    Py_XDECREF(strides);
    Py_DECREF(cai);
    return r;
}

/* DLPack, as much of it as a pointer needs */
typedef struct {
    void *data;
    struct {
        int32_t device_type, device_id;
    } device;
    int32_t ndim;
    struct {
        uint8_t code, bits;
        uint16_t lanes;
    } dtype;
    int64_t *shape, *strides;
    uint64_t byte_offset;
} pygpu_DLTensor;
typedef struct pygpu_DLManaged {
    pygpu_DLTensor dl_tensor;
    void *manager_ctx;
    void (*deleter)(struct pygpu_DLManaged *);
} pygpu_DLManaged;
typedef struct pygpu_DLManagedV {
    uint32_t major, minor;
    void *manager_ctx;
    void (*deleter)(struct pygpu_DLManagedV *);
    uint64_t flags;
    pygpu_DLTensor dl_tensor;
} pygpu_DLManagedV;

int
pygpu_get_dlpack_ptr(pygpu_state *st, PyObject *obj, CUdeviceptr *ptr)
{
    PyObject *fn, *cap;
    pygpu_DLTensor *t;
    int r;
    if ((r = pygpu_getattr_opt(obj, st->str_dlpack, &fn)) <= 0)
        return r == 0 ? 1 : -1; /* 1: no __dlpack__ */
    cap = PyObject_CallNoArgs(fn);
    Py_DECREF(fn);
    if (cap == NULL)
        return -1;
    if (PyCapsule_IsValid(cap, "dltensor_versioned")) {
        pygpu_DLManagedV *m = PyCapsule_GetPointer(cap, "dltensor_versioned");
        t = &m->dl_tensor;
        *ptr = (CUdeviceptr)((char *)t->data + t->byte_offset);
        r = t->device.device_type;
        PyCapsule_SetName(cap, "used_dltensor_versioned");
        if (m->deleter)
            m->deleter(m);
    } else if (PyCapsule_IsValid(cap, "dltensor")) {
        pygpu_DLManaged *m = PyCapsule_GetPointer(cap, "dltensor");
        t = &m->dl_tensor;
        *ptr = (CUdeviceptr)((char *)t->data + t->byte_offset);
        r = t->device.device_type;
        PyCapsule_SetName(cap, "used_dltensor");
        if (m->deleter)
            m->deleter(m);
    } else {
        Py_DECREF(cap);
        PyErr_SetString(PyExc_TypeError, "__dlpack__() did not return a DLPack capsule");
        return -1;
    }
    Py_DECREF(cap);
    if (r != 2 && r != 3 && r != 13) { /* kDLCUDA, kDLCUDAHost, kDLCUDAManaged */
        PyErr_Format(PyExc_TypeError, "a %.100s on DLPack device type %d is not CUDA memory",
                     Py_TYPE(obj)->tp_name, r);
        return -1;
    }
    return 0;
}

/* ---- cuda.core's objects (docs/interop.md) ----
 * NVIDIA's cuda.core has two memory objects without a
 * __cuda_array_interface__: Buffer (untyped bytes: .handle, .size) and
 * StridedMemoryView (.ptr, .shape, .strides in elements, .dtype).  Both
 * have __dlpack__ in cuda.core 1.x, but a capsule a launch costs a driver
 * query, and a DLPack tensor tells no extent.  They are known here by their
 * class, or a base, being named Buffer or StridedMemoryView in a module
 * under cuda.core, without importing cuda.core. */
enum { CORE_NONE, CORE_BUFFER, CORE_VIEW };

static int
core_class(PyTypeObject *tp)
{
    PyObject *mro = tp->tp_mro;
    Py_ssize_t i, n = mro != NULL && PyTuple_Check(mro) ? PyTuple_GET_SIZE(mro) : 0;
    for (i = 0; i < n; i++) {
        PyTypeObject *t = (PyTypeObject *)PyTuple_GET_ITEM(mro, i);
        const char *name = t->tp_name, *dot;
        if (t->tp_flags & Py_TPFLAGS_HEAPTYPE) {
            /* a Python class (an older cuda.core's, or a subclass): its
             * __module__ says where it lives */
            PyObject *m = t->tp_dict ? PyDict_GetItemString(t->tp_dict, "__module__") : NULL;
            const char *mod = m && PyUnicode_Check(m) ? PyUnicode_AsUTF8(m) : NULL;
            if (mod == NULL) {
                PyErr_Clear();
                continue;
            }
            if (strncmp(mod, "cuda.core", 9) != 0 || (mod[9] != '\0' && mod[9] != '.'))
                continue;
            dot = strrchr(name, '.');
            name = dot ? dot + 1 : name;
        } else {
            if (strncmp(name, "cuda.core.", 10) != 0 || (dot = strrchr(name, '.')) == NULL)
                continue;
            name = dot + 1;
        }
        if (strcmp(name, "Buffer") == 0)
            return CORE_BUFFER;
        if (strcmp(name, "StridedMemoryView") == 0)
            return CORE_VIEW;
    }
    return CORE_NONE;
}

/* an attribute read as an unsigned 64-bit int (through __int__: a
 * Buffer's handle may be a cuda.bindings CUdeviceptr) */
static int
core_u64(PyObject *obj, const char *attr, unsigned long long *out)
{
    PyObject *v = PyObject_GetAttrString(obj, attr), *i;
    if (v == NULL)
        return -1;
    i = PyNumber_Long(v);
    Py_DECREF(v);
    if (i == NULL)
        return -1;
    *out = PyLong_AsUnsignedLongLong(i);
    Py_DECREF(i);
    if (PyErr_Occurred()) {
        PyErr_Format(PyExc_ValueError, "a cuda.core %.100s's %s is not an address or a size",
                     Py_TYPE(obj)->tp_name, attr);
        return -1;
    }
    return 0;
}

/* A StridedMemoryView's extent in bytes from its pointer ((size_t)-1 when
 * a stride is negative or a field is missing). */
static size_t
view_extent(PyObject *obj)
{
    PyObject *shape = PyObject_GetAttrString(obj, "shape");
    PyObject *strides = shape ? PyObject_GetAttrString(obj, "strides") : NULL;
    PyObject *dtype = strides ? PyObject_GetAttrString(obj, "dtype") : NULL;
    PyObject *isz = dtype && dtype != Py_None ? PyObject_GetAttrString(dtype, "itemsize") : NULL;
    size_t item, total = (size_t)-1, last = 0, count = 1;
    Py_ssize_t i, n;
    if (isz == NULL || !PyTuple_Check(shape)
        || (strides != Py_None
            && (!PyTuple_Check(strides) || PyTuple_GET_SIZE(strides) != PyTuple_GET_SIZE(shape))))
        goto done;
    item = PyLong_AsSize_t(isz);
    if (PyErr_Occurred())
        goto done;
    n = PyTuple_GET_SIZE(shape);
    for (i = 0; i < n; i++) {
        long long d = PyLong_AsLongLong(PyTuple_GET_ITEM(shape, i)), st = 0;
        if (d < 0 || PyErr_Occurred())
            goto done;
        if (d == 0) {
            total = 0;
            goto done;
        }
        if (strides == Py_None) {
            if (count > SIZE_MAX / (size_t)d)
                goto done; /* unknown: no bound check */
            count *= (size_t)d;
            continue;
        }
        st = PyLong_AsLongLong(PyTuple_GET_ITEM(strides, i));
        if (st < 0 || PyErr_Occurred())
            goto done;
        if (d > 1 && (size_t)st > (SIZE_MAX / 2 - last) / (size_t)(d - 1))
            goto done;
        last += (size_t)(d - 1) * (size_t)st;
    }
    if (strides != Py_None)
        count = last + 1;
    if (item != 0 && count <= SIZE_MAX / item)
        total = count * item;
done:
    PyErr_Clear();
    Py_XDECREF(shape);
    Py_XDECREF(strides);
    Py_XDECREF(dtype);
    Py_XDECREF(isz);
    return total;
}

static int
core_ptr(pygpu_state *st, PyObject *obj, int kind, CUdeviceptr *ptr, size_t *size)
{
    unsigned long long p, n;
    if (kind == CORE_BUFFER) {
        if (core_u64(obj, "handle", &p) < 0 || core_u64(obj, "size", &n) < 0)
            return -1;
        if (p == 0 && n != 0) {
            PyErr_SetString(st->LogicError, "a closed cuda.core Buffer (its memory was released)");
            return -1;
        }
        *ptr = (CUdeviceptr)p;
        *size = (size_t)n;
        return 0;
    }
    {
        PyObject *dev = PyObject_GetAttrString(obj, "is_device_accessible");
        int on_device = dev ? PyObject_IsTrue(dev) : -1;
        Py_XDECREF(dev);
        if (on_device < 0)
            return -1;
        if (!on_device) {
            PyErr_SetString(PyExc_TypeError, "a cuda.core StridedMemoryView of host memory is not "
                                             "device memory: copy it to the device first");
            return -1;
        }
    }
    if (core_u64(obj, "ptr", &p) < 0)
        return -1;
    *ptr = (CUdeviceptr)p;
    *size = view_extent(obj);
    return 0;
}

/* A foreign device array's pointer: 0 found, 1 not a device array, -1 error. */
static int
foreign_ptr(pygpu_state *st, PyObject *obj, CUdeviceptr *ptr, size_t *size)
{
    PyObject *cai;
    int r, kind = core_class(Py_TYPE(obj));
    if (kind != CORE_NONE)
        return core_ptr(st, obj, kind, ptr, size);
    r = pygpu_getattr_opt(obj, st->str_cai, &cai);
    if (r < 0)
        return -1;
    if (r > 0) {
        r = cai_read(cai, ptr, size);
        Py_DECREF(cai);
        return r;
    }
    *size = (size_t)-1;
    return pygpu_get_dlpack_ptr(st, obj, ptr);
}

int
pygpu_get_device_ptr(pygpu_state *st, PyObject *obj, CUdeviceptr *ptr, size_t *size, int allow_none)
{
    int r;
    if (pygpu_is_allocation(st, obj)) {
        *size = ((pygpu_DeviceAllocation *)obj)->size;
        return alloc_ptr(st, (pygpu_DeviceAllocation *)obj, ptr);
    }
    if (PyLong_Check(obj)) {
        *ptr = (CUdeviceptr)PyLong_AsUnsignedLongLong(obj);
        if (*ptr == (CUdeviceptr)-1 && PyErr_Occurred()) {
            PyErr_Format(PyExc_ValueError, "%R is not a valid device address", obj);
            return -1;
        }
        *size = (size_t)-1;
        return 0;
    }
    if (obj == Py_None && allow_none) {
        *ptr = 0;
        *size = 0;
        return 0;
    }
    r = foreign_ptr(st, obj, ptr, size);
    if (r <= 0)
        return r;
    if (PyObject_TypeCheck(obj, st->HostAllocationType)) {
        PyErr_SetString(PyExc_TypeError, "a HostAllocation is host memory: use "
                                         "get_device_pointer() for mapped memory");
        return -1;
    }
    PyErr_Format(PyExc_TypeError,
                 "expected a device pointer (DeviceAllocation, int address, a cuda.core "
                 "Buffer or an object with __cuda_array_interface__ or __dlpack__), not %.100s",
                 Py_TYPE(obj)->tp_name);
    return -1;
}

/* ---- packers ---- */

static int
alloc_check(pygpu_state *st, PyObject *fn, int i, pygpu_DeviceAllocation *a)
{
    if (a->freed || a->context->detached) {
        PyErr_Format(st->LogicError,
                     "kernel '%U': parameter %d is a freed "
                     "DeviceAllocation%s",
                     fn, i, a->freed ? "" : " (its context was detached)");
        return -1;
    }
    return 0;
}

/* After user Python code ran during packing, the allocations packed before
 * it may have been freed by it: check them again.  No Python code runs from
 * here to the launch. */
static int
recheck_allocations(pygpu_state *st, PyObject *fn, PyObject *const *args, int n)
{
    int i;
    for (i = 0; i < n; i++)
        if (pygpu_is_allocation(st, args[i])
            && alloc_check(st, fn, i, (pygpu_DeviceAllocation *)args[i]) < 0)
            return -1;
    return 0;
}

static int
pack_float(PyObject *fn, int i, double d, char *dst, size_t size)
{
    if (size == 4) {
        float x = (float)d;
        memcpy(dst, &x, 4);
        return 0;
    }
    if (size == 8) {
        memcpy(dst, &d, 8);
        return 0;
    }
    if (size == 2)
        return PyFloat_Pack2(d, dst, 1);
    PyErr_Format(PyExc_TypeError,
                 "kernel '%U': parameter %d is %zu bytes, which a Python float cannot fill", fn, i,
                 size);
    return -1;
}

static int
need_pointer(PyObject *fn, int i, size_t size, PyObject *obj)
{
    if (size == sizeof(CUdeviceptr))
        return 0;
    PyErr_Format(PyExc_TypeError,
                 "kernel '%U': parameter %d is %zu bytes, not a pointer, but got a "
                 "device pointer (%.100s)",
                 fn, i, size, Py_TYPE(obj)->tp_name);
    return -1;
}

/* bytes-like values copied as they are: exactly size bytes */
static int
pack_buffer(PyObject *fn, int i, PyObject *obj, char *dst, size_t size, int numpy)
{
    Py_buffer view;
    if (PyObject_GetBuffer(obj, &view, PyBUF_SIMPLE) < 0)
        return -1;
    if ((size_t)view.len != size) {
        if (numpy) {
            PyArray_Descr *d = PyArray_DescrFromScalar(obj);
            PyErr_Format(PyExc_TypeError,
                         "kernel '%U': parameter %d is %zu bytes but got a NumPy %S "
                         "(%zd bytes)",
                         fn, i, size, d ? (PyObject *)d : Py_None, view.len);
            Py_XDECREF(d);
        } else {
            PyErr_Format(PyExc_TypeError,
                         "kernel '%U': parameter %d is %zu bytes but got "
                         "%zd bytes",
                         fn, i, size, view.len);
        }
        PyBuffer_Release(&view);
        return -1;
    }
    memcpy(dst, view.buf, size);
    PyBuffer_Release(&view);
    return 0;
}

/* a NumPy structured scalar holding Python objects has PyObject addresses
 * for bytes: never a kernel argument */
static int
refuse_object_fields(PyObject *fn, int i, PyObject *obj)
{
    PyArray_Descr *d;
    int has_objects;
    if (!PyArray_IsScalar(obj, Void))
        return 0;
    d = PyArray_DescrFromScalar(obj);
    if (d == NULL)
        return -1;
    has_objects = PyDataType_REFCHK(d);
    Py_DECREF(d);
    if (has_objects) {
        PyErr_Format(PyExc_TypeError,
                     "kernel '%U': parameter %d is a NumPy structured scalar with Python "
                     "object fields, which have no device representation",
                     fn, i);
        return -1;
    }
    return 0;
}

/* A TextureObject or SurfaceObject is its 64-bit handle; a TensorMap its 128
 * encoded bytes (the kernel declares `const __grid_constant__ CUtensorMap`,
 * which the driver places 64-byte aligned). */
static int
pack_resource(pygpu_state *st, PyObject *fn, int i, PyObject *obj, char *dst, size_t size)
{
    unsigned long long h;
    if (PyObject_TypeCheck(obj, st->TensorMapType)) {
        if (size != sizeof(CUtensorMap)) {
            PyErr_Format(PyExc_TypeError,
                         "kernel '%U': parameter %d is %zu bytes but a "
                         "TensorMap is a %zu-byte CUtensorMap (declare the parameter "
                         "`const __grid_constant__ CUtensorMap`)",
                         fn, i, size, sizeof(CUtensorMap));
            return -1;
        }
        memcpy(dst, pygpu_tensormap_bytes(obj), sizeof(CUtensorMap));
        return 0;
    }
    if (size != sizeof h) {
        PyErr_Format(PyExc_TypeError,
                     "kernel '%U': parameter %d is %zu bytes but a %.100s "
                     "is a 64-bit %s",
                     fn, i, size, Py_TYPE(obj)->tp_name,
                     PyObject_TypeCheck(obj, st->SurfaceObjectType) ? "cudaSurfaceObject_t"
                                                                    : "cudaTextureObject_t");
        return -1;
    }
    if (pygpu_texobj_handle(st, obj, &h) < 0) {
        PyObject *exc, *val, *tb;
        PyErr_Fetch(&exc, &val, &tb);
        PyErr_Format(st->LogicError, "kernel '%U': parameter %d: %S", fn, i, val);
        Py_XDECREF(exc);
        Py_XDECREF(val);
        Py_XDECREF(tb);
        return -1;
    }
    memcpy(dst, &h, sizeof h);
    return 0;
}

/* Pack one argument at dst.  Returns 0, -1 with an exception, 1 when user
 * Python code may have run (a foreign array's conversion), or 2 for an
 * In/Out/InOut handler (nothing packed). */
static int
pack_one(pygpu_state *st, PyObject *fn, int i, PyObject *obj, char *dst, size_t size, char prep)
{
    PyTypeObject *tp = Py_TYPE(obj);
    if (pygpu_is_allocation(st, obj)) { /* a subclass's too */
        pygpu_DeviceAllocation *a = (pygpu_DeviceAllocation *)obj;
        if (need_pointer(fn, i, size, obj) < 0 || alloc_check(st, fn, i, a) < 0)
            return -1;
        memcpy(dst, &a->ptr, sizeof a->ptr);
        return 0;
    }
    if (tp == &PyFloat_Type)
        return pack_float(fn, i, PyFloat_AS_DOUBLE(obj), dst, size);
    if (tp == st->TextureObjectType || tp == st->SurfaceObjectType || tp == st->TensorMapType)
        return pack_resource(st, fn, i, obj, dst, size);
    if (tp == &PyLong_Type) {
        if (prep == 'f' || prep == 'd' || prep == 'e') {
            double d = PyLong_AsDouble(obj);
            if (d == -1.0 && PyErr_Occurred())
                return -1;
            return pack_float(fn, i, d, dst, size);
        }
        return pygpu_scalar_pack_int(fn, i, obj, prep, dst, size);
    }
    if (tp == &PyBool_Type) {
        long long v = obj == Py_True;
        if (size > 8 || size == 0 || (size & (size - 1))) {
            PyErr_Format(PyExc_TypeError,
                         "kernel '%U': parameter %d is %zu bytes; "
                         "a bool cannot fill it",
                         fn, i, size);
            return -1;
        }
        memcpy(dst, &v, size); /* little-endian */
        return 0;
    }
    if (PyArray_IsScalar(obj, Generic)) {
        if (refuse_object_fields(fn, i, obj) < 0 || pack_buffer(fn, i, obj, dst, size, 1) < 0)
            return -1;
        return tp->tp_flags & Py_TPFLAGS_HEAPTYPE ? 1 : 0; /* a subclass's buffer */
    }
    if (obj == Py_None) {
        CUdeviceptr z = 0;
        if (need_pointer(fn, i, size, obj) < 0)
            return -1;
        memcpy(dst, &z, sizeof z);
        return 0;
    }
    if (PyLong_Check(obj))
        return pygpu_scalar_pack_int(fn, i, obj, prep, dst, size);
    if (PyFloat_Check(obj))
        return pack_float(fn, i, PyFloat_AS_DOUBLE(obj), dst, size);
    if ((tp->tp_flags & Py_TPFLAGS_HEAPTYPE) /* a subclass of one (a Python class) */
        && (PyObject_TypeCheck(obj, st->TextureObjectType)
            || PyObject_TypeCheck(obj, st->SurfaceObjectType)
            || PyObject_TypeCheck(obj, st->TensorMapType)))
        return pack_resource(st, fn, i, obj, dst, size);
    if (PyObject_TypeCheck(obj, st->ArgumentHandlerType))
        return 2; /* the caller decides */
    if (PyArray_Check(obj) && PyArray_NDIM((PyArrayObject *)obj) == 0) {
        /* a 0-d array is a value (PyCUDA's gpuarray.vec.make_float3 gives one) */
        PyArrayObject *a = (PyArrayObject *)obj;
        PyArray_Descr *d = PyArray_DESCR(a);
        if (PyDataType_REFCHK(d)) {
            PyErr_Format(PyExc_TypeError,
                         "kernel '%U': parameter %d is a 0-d NumPy array of Python objects, "
                         "which have no device representation",
                         fn, i);
            return -1;
        }
        if ((size_t)PyDataType_ELSIZE(d) != size) {
            PyErr_Format(PyExc_TypeError,
                         "kernel '%U': parameter %d is %zu bytes but got a 0-d NumPy %S "
                         "array (%zd bytes)",
                         fn, i, size, (PyObject *)d, (Py_ssize_t)PyDataType_ELSIZE(d));
            return -1;
        }
        memcpy(dst, PyArray_DATA(a), size);
        return 0;
    }
    if (PyArray_Check(obj)) {
        PyErr_Format(PyExc_TypeError,
                     "kernel '%U': parameter %d got a NumPy array, which lives in host "
                     "memory; wrap it in In(), Out() or InOut(), or copy it with "
                     "to_device()",
                     fn, i);
        return -1;
    }
    if (PyBytes_Check(obj) || PyByteArray_Check(obj) || PyMemoryView_Check(obj))
        return pack_buffer(fn, i, obj, dst, size, 0);
    {
        CUdeviceptr p;
        size_t cap;
        int r;
        if (need_pointer(fn, i, size, obj) < 0) {
            PyErr_Clear();
            goto unknown;
        }
        r = foreign_ptr(st, obj, &p, &cap);
        if (r < 0)
            return -1;
        if (r == 0) {
            memcpy(dst, &p, sizeof p);
            return 1;
        }
    }
unknown:
    PyErr_Format(PyExc_TypeError,
                 "kernel '%U': parameter %d (%zu bytes) cannot take a %.100s; pass a "
                 "DeviceAllocation or GPU array, an int, a float, a NumPy scalar, "
                 "bytes, or In/Out/InOut",
                 fn, i, size, tp->tp_name);
    return -1;
}

/* Without a known layout: PyCUDA's rules, natural sizes and alignment (a
 * prepared type code fixes a parameter's size).  Fills params[0..nargs). */
static int
fallback_sizes(pygpu_state *st, const pygpu_layout *l, PyObject *const *args, Py_ssize_t nargs,
               pygpu_param *params, size_t *total)
{
    size_t off = 0;
    Py_ssize_t i;
    for (i = 0; i < nargs; i++) {
        PyObject *o = args[i];
        size_t sz = l->prepared ? char_size(l->prepared[i]) : 0, align;
        if (sz == 0) {
            sz = 8;
            if (PyArray_IsScalar(o, Generic)) {
                PyArray_Descr *d = PyArray_DescrFromScalar(o);
                if (d == NULL)
                    return -1;
                sz = (size_t)PyDataType_ELSIZE(d);
                Py_DECREF(d);
            } else if (PyArray_Check(o) && PyArray_NDIM((PyArrayObject *)o) == 0) {
                sz = (size_t)PyDataType_ELSIZE(PyArray_DESCR((PyArrayObject *)o));
            } else if (PyBytes_Check(o)) {
                sz = (size_t)PyBytes_GET_SIZE(o);
            } else if (PyObject_TypeCheck(o, st->TensorMapType)) {
                sz = sizeof(CUtensorMap);
            }
        }
        align = sz >= 8 ? 8 : (sz >= 4 ? 4 : (sz >= 2 ? 2 : 1));
        if (PyObject_TypeCheck(o, st->TensorMapType))
            align = 64; /* a CUtensorMap parameter's alignment */
        off = (off + align - 1) & ~(align - 1);
        params[i].offset = off;
        params[i].size = sz;
        off += sz;
    }
    *total = off;
    return 0;
}

/* Give the call its storage: inline when it fits, else one heap block. */
static int
pack_storage(pygpu_argpack *pack, size_t total, int nparams, int own_params)
{
    size_t need_ptrs = (size_t)(nparams > 0 ? nparams : 1) * sizeof(void *);
    size_t need_params = own_params ? (size_t)(nparams > 0 ? nparams : 1) * sizeof(pygpu_param) : 0;
    size_t tot = (total + 15) & ~(size_t)15;
    if (!own_params && tot <= PYGPU_PACK_INLINE_BYTES && nparams <= PYGPU_PACK_INLINE_PARAMS) {
        pack->buf = pack->inline_buf;
        pack->ptrs = pack->inline_ptrs;
    } else {
        char *h = PyMem_Malloc(tot + need_ptrs + need_params + 16);
        if (h == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        pack->heap = h;
        pack->buf = h;
        pack->ptrs = (void **)(h + tot);
        if (own_params)
            pack->params = (pygpu_param *)(h + tot + need_ptrs);
    }
    return 0; /* padding bytes are never read: the driver copies each parameter */
}

/* In/Out/InOut: pygpu.driver's hook allocates and copies in; the call packs
 * the device copies it returns.  Returns the new argument tuple (strong). */
static PyObject *
begin_handlers(pygpu_state *st, PyObject *const *args, Py_ssize_t nargs, PyObject *stream_obj,
               pygpu_argpack *pack)
{
    PyObject *tup, *res, *newargs;
    if (st->handlers_begin == NULL || st->handlers_end == NULL) {
        PyErr_SetString(PyExc_TypeError, "In/Out/InOut need the pygpu.driver module");
        return NULL;
    }
    Py_ssize_t i;
    tup = PyTuple_New(nargs);
    if (tup == NULL)
        return NULL;
    for (i = 0; i < nargs; i++) {
        Py_INCREF(args[i]);
        PyTuple_SET_ITEM(tup, i, args[i]);
    }
    res = PyObject_CallFunctionObjArgs(st->handlers_begin, tup, stream_obj ? stream_obj : Py_None,
                                       NULL);
    Py_DECREF(tup);
    if (res == NULL)
        return NULL;
    if (!PyTuple_CheckExact(res) || PyTuple_GET_SIZE(res) != 2
        || !PyTuple_CheckExact(PyTuple_GET_ITEM(res, 0))
        || PyTuple_GET_SIZE(PyTuple_GET_ITEM(res, 0)) != nargs) {
        Py_DECREF(res);
        PyErr_SetString(PyExc_SystemError, "pygpu.driver's In/Out hook returned a bad value");
        return NULL;
    }
    pack->handlers = res;
    newargs = PyTuple_GET_ITEM(res, 0);
    Py_INCREF(newargs);
    return newargs;
}

/* A NumPy scalar of one of the fixed-size numeric types (the exact type, not
 * a subclass): its value's address and size, as its buffer gives them to
 * pack_buffer.  0 for anything else. */
static int
numpy_number(PyTypeObject *tp, PyObject *o, const void **data, size_t *n)
{
#define PYGPU_NS(T, C)                    \
    if (tp == &Py##T##ArrType_Type) {     \
        *data = &PyArrayScalar_VAL(o, T); \
        *n = sizeof(C);                   \
        return 1;                         \
    }
    /* clang-format off */
    PYGPU_NS(Float, npy_float)
    PYGPU_NS(Int, npy_int)
    PYGPU_NS(Double, npy_double)
    PYGPU_NS(LongLong, npy_longlong)
    PYGPU_NS(Long, npy_long)
    PYGPU_NS(UInt, npy_uint)
    PYGPU_NS(ULongLong, npy_ulonglong)
    PYGPU_NS(ULong, npy_ulong)
    PYGPU_NS(Short, npy_short)
    PYGPU_NS(UShort, npy_ushort)
    PYGPU_NS(Byte, npy_byte)
    PYGPU_NS(UByte, npy_ubyte)
    PYGPU_NS(Half, npy_half)
    PYGPU_NS(CFloat, npy_cfloat)
    PYGPU_NS(CDouble, npy_cdouble)
    /* clang-format on */
#undef PYGPU_NS
    return 0;
}

/* The common launch in the fewest steps (pygpu.h): the values and the
 * conversions are pack_one's for the same argument; anything else makes
 * pack_one decide (and word any error). */
int
pygpu_pack_fast(pygpu_state *st, const pygpu_layout *l, PyObject *const *args, Py_ssize_t nargs,
                char *buf, void **ptrs)
{
    Py_ssize_t i;
    const char *prep = l->prepared;
    if (!l->known || nargs != l->nparams || nargs > PYGPU_PACK_INLINE_PARAMS
        || l->total > PYGPU_PACK_INLINE_BYTES)
        return 0;
    for (i = 0; i < nargs; i++) {
        PyObject *o = args[i];
        PyTypeObject *tp = Py_TYPE(o);
        size_t size = l->params[i].size;
        char *dst = buf + l->params[i].offset;
        if (tp == st->DeviceAllocationType) {
            pygpu_DeviceAllocation *a = (pygpu_DeviceAllocation *)o;
            if (size != sizeof(CUdeviceptr) || a->freed || a->context->detached)
                return 0;
            memcpy(dst, &a->ptr, sizeof a->ptr);
        } else if (tp == &PyLong_Type) {
            int overflow;
            long long v;
            if (prep != NULL && (prep[i] == 'f' || prep[i] == 'd' || prep[i] == 'e'))
                return 0;
#if PY_VERSION_HEX >= 0x030C0000
            if (PyUnstable_Long_IsCompact((PyLongObject *)o)) {
                v = (long long)PyUnstable_Long_CompactValue((PyLongObject *)o);
            } else
#endif
            {
                v = PyLong_AsLongLongAndOverflow(o, &overflow); /* an exact int: no error */
                if (overflow)
                    return 0;
            }
            if (prep != NULL && prep[i] != 'P') {
                /* a typed parameter: NumPy's range (scalars.c decides and
                 * words the error; here only what plainly fits) */
                long long lo;
                unsigned long long hi;
                const char *name;
                if (pygpu_int_code_range(prep[i], &lo, &hi, &name)
                    && (v < lo || (v >= 0 && (unsigned long long)v > hi)))
                    return 0;
            }
            if (size == 8) {
                memcpy(dst, &v, 8);
            } else if (size == 4 && v >= INT32_MIN && v <= (long long)UINT32_MAX) {
                int32_t x = (int32_t)(uint32_t)v;
                memcpy(dst, &x, 4);
            } else {
                return 0;
            }
        } else if (tp == &PyFloat_Type) {
            double d = PyFloat_AS_DOUBLE(o);
            if (size == 4) {
                float x = (float)d;
                memcpy(dst, &x, 4);
            } else if (size == 8) {
                memcpy(dst, &d, 8);
            } else {
                return 0;
            }
        } else {
            const void *data;
            size_t n;
            if (!numpy_number(tp, o, &data, &n) || n != size)
                return 0;
            memcpy(dst, data, n);
        }
        ptrs[i] = dst;
    }
    return 1;
}

int
pygpu_pack(pygpu_state *st, pygpu_Function *f, PyObject *const *args, Py_ssize_t nargs,
           const pygpu_launch_config *hcfg, pygpu_argpack *pack)
{
    PyObject *fn = f->name;
    pygpu_layout *l = f->layout != NULL ? f->layout : pygpu_layout_get(st, f);
    PyObject *owned = NULL; /* the handlers' argument tuple */
    Py_ssize_t i;
    int r = -1, ran_python = 0;
    if (l == NULL)
        return -1;
    l->refs++;
    pack->layout = l;
    if (pygpu_pack_fast(st, l, args, nargs, pack->inline_buf, pack->inline_ptrs)) {
        pack->buf = pack->inline_buf;
        pack->ptrs = pack->inline_ptrs;
        pack->params = l->params;
        pack->nparams = (int)nargs;
        return 0;
    }
    if (l->nparams >= 0 && nargs != l->nparams) {
        if (l->prepared && !l->known)
            PyErr_Format(PyExc_TypeError,
                         "kernel '%U' was prepared for %d argument%s but "
                         "%zd %s given",
                         fn, l->nparams, l->nparams == 1 ? "" : "s", nargs,
                         nargs == 1 ? "was" : "were");
        else
            PyErr_Format(PyExc_TypeError, "kernel '%U' takes %d argument%s but %zd %s given", fn,
                         l->nparams, l->nparams == 1 ? "" : "s", nargs,
                         nargs == 1 ? "was" : "were");
        return -1;
    }
    if (nargs > MAX_PARAMS) {
        PyErr_Format(PyExc_TypeError, "kernel '%U': %zd arguments; at most %d", fn, nargs,
                     MAX_PARAMS);
        return -1;
    }
    pack->nparams = (int)nargs;
    if (l->known) {
        pack->params = l->params;
        if (l->total <= PYGPU_PACK_INLINE_BYTES && nargs <= PYGPU_PACK_INLINE_PARAMS) {
            pack->buf = pack->inline_buf;
            pack->ptrs = pack->inline_ptrs;
        } else if (pack_storage(pack, l->total, (int)nargs, 0) < 0) {
            goto done;
        }
    } else {
        /* sizes from the arguments: compute them into a scratch table first */
        pygpu_param small[64], *tmp = small;
        size_t total;
        if (nargs > 64 && (tmp = PyMem_Malloc((size_t)nargs * sizeof *tmp)) == NULL) {
            PyErr_NoMemory();
            goto done;
        }
        if (fallback_sizes(st, l, args, nargs, tmp, &total) < 0
            || pack_storage(pack, total, (int)nargs, 1) < 0) {
            if (tmp != small)
                PyMem_Free(tmp);
            goto done;
        }
        memcpy((pygpu_param *)pack->params, tmp, (size_t)nargs * sizeof *tmp);
        if (tmp != small)
            PyMem_Free(tmp);
    }
    for (i = 0; i < nargs; i++) {
        const pygpu_param *p = &pack->params[i];
        int k = pack_one(st, fn, (int)i, args[i], pack->buf + p->offset, p->size,
                         l->prepared ? l->prepared[i] : 0);
        pack->ptrs[i] = pack->buf + p->offset;
        if (k < 0)
            goto done;
        if (k == 1)
            ran_python = 1;
        if (k == 2) {
            /* In/Out/InOut: the hook makes device copies (pointer-sized, as
             * the handler was); pack its arguments from the start */
            if (hcfg == NULL || owned != NULL) {
                PyErr_Format(PyExc_TypeError,
                             "kernel '%U': parameter %zd: prepared and "
                             "configured launches do not take In/Out/InOut",
                             fn, i);
                goto done;
            }
            if (pygpu_captures_active != 0 && pygpu_capture_current(NULL) != NULL) {
                /* their copies wait for the launch: not inside a capture (graph.c) */
                PyErr_Format(st->LogicError,
                             "kernel '%U': parameter %zd: In/Out/InOut copy "
                             "synchronously around the launch, which this thread is "
                             "capturing into a graph (recorded, not run); pass device "
                             "memory and capture memcpy_*_async copies instead",
                             fn, i);
                goto done;
            }
            owned = begin_handlers(st, args, nargs, hcfg->stream_obj, pack);
            if (owned == NULL)
                goto done;
            args = &PyTuple_GET_ITEM(owned, 0);
            ran_python = 1;
            i = -1;
        }
    }
    r = ran_python ? recheck_allocations(st, fn, args, (int)nargs) : 0;
done:
    Py_XDECREF(owned);
    return r;
}

int
pygpu_pack_finish(pygpu_state *st, pygpu_argpack *pack, int launched, PyObject *stream_obj)
{
    int r = 0;
    if (pack->handlers != NULL) {
        PyObject *exc, *val, *tb, *res;
        PyErr_Fetch(&exc, &val, &tb);
        res = PyObject_CallFunctionObjArgs(st->handlers_end, PyTuple_GET_ITEM(pack->handlers, 1),
                                           stream_obj ? stream_obj : Py_None,
                                           launched ? Py_True : Py_False, NULL);
        if (res == NULL) {
            r = -1;
            if (exc != NULL) { /* the launch's own error comes first */
                PyErr_Clear();
                PyErr_Restore(exc, val, tb);
                exc = NULL;
            }
        } else {
            Py_DECREF(res);
        }
        if (exc != NULL)
            PyErr_Restore(exc, val, tb);
        Py_CLEAR(pack->handlers);
    }
    if (pack->heap != NULL) {
        PyMem_Free(pack->heap);
        pack->heap = NULL;
    }
    if (pack->layout != NULL) {
        pygpu_layout_decref(pack->layout);
        pack->layout = NULL;
    }
    return r;
}

/* ---- ArgumentHandler: base of pygpu.driver.In/Out/InOut (defined in Python) ---- */

static PyType_Slot handler_slots[] = {
    {Py_tp_doc, "Base of In, Out and InOut."},
    {0, NULL},
};

static PyType_Spec handler_spec = {"pygpu.driver.ArgumentHandler", sizeof(PyObject), 0,
                                   Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE, handler_slots};

static PyObject *
set_handler_hooks(PyObject *m, PyObject *args)
{
    pygpu_state *st = PyModule_GetState(m);
    PyObject *begin, *end;
    if (!PyArg_ParseTuple(args, "OO:_set_handler_hooks", &begin, &end))
        return NULL;
    Py_INCREF(begin);
    Py_XSETREF(st->handlers_begin, begin);
    Py_INCREF(end);
    Py_XSETREF(st->handlers_end, end);
    Py_RETURN_NONE;
}

/* _cuda_core_kind(obj): core_class for Python (pygpu/_cudacore.py), so that
 * the rule that knows cuda.core's memory objects is this one alone */
static PyObject *
cuda_core_kind(PyObject *module, PyObject *obj)
{
    int kind = core_class(Py_TYPE(obj));
    if (kind == CORE_BUFFER)
        return PyUnicode_FromString("Buffer");
    if (kind == CORE_VIEW)
        return PyUnicode_FromString("StridedMemoryView");
    Py_RETURN_NONE;
}

static PyMethodDef args_module_methods[] = {
    {"_set_handler_hooks", set_handler_hooks, METH_VARARGS, NULL},
    {"_cuda_core_kind", cuda_core_kind, METH_O,
     "_cuda_core_kind(obj, /)\n--\n\n"
     "'Buffer' or 'StridedMemoryView' where obj's class (or a base) is cuda.core's\n"
     "of that name (a class named so in a module under cuda.core; cuda.core is not\n"
     "imported), else None."},
    {NULL},
};

int
pygpu_args_setup(PyObject *m, pygpu_state *st)
{
    PyObject *tp = PyType_FromModuleAndSpec(m, &handler_spec, NULL);
    if (tp == NULL)
        return -1;
    st->ArgumentHandlerType = (PyTypeObject *)tp;
    if (pygpu_module_add_ref(m, "ArgumentHandler", tp) < 0)
        return -1;
    return PyModule_AddFunctions(m, args_module_methods);
}
