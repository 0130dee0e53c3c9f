/* CUDA arrays: ArrayDescriptor, ArrayDescriptor3D, Array (cuArrayCreate,
 * cuArray3DCreate), and _memcpy_3d, the one copy to, from and between
 * arrays behind pygpu.driver's Memcpy2D/Memcpy3D (cuMemcpy3D[Async]).
 *
 * An Array lives in the context current when it was made and is destroyed
 * there.  Texture and surface objects over it hold it (hold.c, the one hold
 * protocol): free() while any is alive marks it freed at once and leaves
 * cuArrayDestroy to the last holder, so a texture never reads a destroyed
 * array.  A copy that uses it with the GIL
 * released holds it (pygpu_array_hold: `busy`, and the context's
 * `arrays_busy`): a free() from another thread meanwhile marks it freed at
 * once and the last holder calls cuArrayDestroy when its copy ends; the
 * context's detach() is refused meanwhile.
 */
#include "pygpu.h"
#include "core/pygpu_numpy.h"

#define KNOWN_ARRAY3D_FLAGS                                                  \
    (CUDA_ARRAY3D_LAYERED | CUDA_ARRAY3D_SURFACE_LDST | CUDA_ARRAY3D_CUBEMAP \
     | CUDA_ARRAY3D_TEXTURE_GATHER)

size_t
pygpu_array_format_size(unsigned int format)
{
    switch (format) {
    case CU_AD_FORMAT_UNSIGNED_INT8:
    case CU_AD_FORMAT_SIGNED_INT8: return 1;
    case CU_AD_FORMAT_UNSIGNED_INT16:
    case CU_AD_FORMAT_SIGNED_INT16:
    case CU_AD_FORMAT_HALF: return 2;
    case CU_AD_FORMAT_UNSIGNED_INT32:
    case CU_AD_FORMAT_SIGNED_INT32:
    case CU_AD_FORMAT_FLOAT: return 4;
    default: return 0;
    }
}

int
pygpu_dtype_array_format(PyObject *dtype, unsigned int *format, const char *what)
{
    PyArray_Descr *d = NULL;
    int r = 0;
    if (!PyArray_DescrConverter(dtype, &d))
        return -1;
    switch (d->type_num) {
    case NPY_UINT8: *format = CU_AD_FORMAT_UNSIGNED_INT8; break;
    case NPY_INT8: *format = CU_AD_FORMAT_SIGNED_INT8; break;
    case NPY_UINT16: *format = CU_AD_FORMAT_UNSIGNED_INT16; break;
    case NPY_INT16: *format = CU_AD_FORMAT_SIGNED_INT16; break;
    case NPY_HALF: *format = CU_AD_FORMAT_HALF; break;
    case NPY_FLOAT32: *format = CU_AD_FORMAT_FLOAT; break;
    default:
        if (d->type_num == NPY_UINT32 || (d->type_num == NPY_ULONG && PyDataType_ELSIZE(d) == 4)
            || (d->type_num == NPY_UINT && PyDataType_ELSIZE(d) == 4)) {
            *format = CU_AD_FORMAT_UNSIGNED_INT32;
        } else if (d->type_num == NPY_INT32
                   || (d->type_num == NPY_LONG && PyDataType_ELSIZE(d) == 4)
                   || (d->type_num == NPY_INT && PyDataType_ELSIZE(d) == 4)) {
            *format = CU_AD_FORMAT_SIGNED_INT32;
        } else {
            PyErr_Format(PyExc_TypeError,
                         "%s: no array format holds dtype %S (formats: "
                         "[u]int8/16/32, float16, float32; pass format= and "
                         "num_channels= to read other data, e.g. float64 as two "
                         "SIGNED_INT32 channels)",
                         what, (PyObject *)d);
            r = -1;
        }
    }
    Py_DECREF(d);
    return r;
}

/* ---- ArrayDescriptor, ArrayDescriptor3D: plain records, PyCUDA's names ---- */

typedef struct {
    PyObject_HEAD Py_ssize_t width, height, depth;
    int format, num_channels, flags;
} pygpu_ArrayDescriptor;

static PyObject *
descr_make(PyTypeObject *type, Py_ssize_t w, Py_ssize_t h, Py_ssize_t d, int fmt, int nch,
           int flags)
{
    pygpu_ArrayDescriptor *self = (pygpu_ArrayDescriptor *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    self->width = w;
    self->height = h;
    self->depth = d;
    self->format = fmt;
    self->num_channels = nch;
    self->flags = flags;
    return (PyObject *)self;
}

static PyObject *
descr2_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"width", "height", "format", "num_channels", NULL};
    Py_ssize_t w = 0, h = 0;
    int fmt = CU_AD_FORMAT_FLOAT, nch = 1;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|nnii:ArrayDescriptor", kwlist, &w, &h, &fmt,
                                     &nch))
        return NULL;
    return descr_make(type, w, h, 0, fmt, nch, 0);
}

static PyObject *
descr3_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"width", "height", "depth", "format", "num_channels", "flags", NULL};
    Py_ssize_t w = 0, h = 0, d = 0;
    int fmt = CU_AD_FORMAT_FLOAT, nch = 1, flags = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|nnniii:ArrayDescriptor3D", kwlist, &w, &h, &d,
                                     &fmt, &nch, &flags))
        return NULL;
    return descr_make(type, w, h, d, fmt, nch, flags);
}

static void
descr_dealloc(PyObject *self)
{
    PyTypeObject *tp = Py_TYPE(self);
    tp->tp_free(self);
    Py_DECREF(tp);
}

static PyObject *
descr_repr(pygpu_ArrayDescriptor *self)
{
    pygpu_state *st = PYGPU_STATE(self);
    if (PyObject_TypeCheck(self, st->ArrayDescriptor3DType))
        return PyUnicode_FromFormat("ArrayDescriptor3D(width=%zd, height=%zd, depth=%zd, "
                                    "format=%d, num_channels=%d, flags=%d)",
                                    self->width, self->height, self->depth, self->format,
                                    self->num_channels, self->flags);
    return PyUnicode_FromFormat("ArrayDescriptor(width=%zd, height=%zd, format=%d, "
                                "num_channels=%d)",
                                self->width, self->height, self->format, self->num_channels);
}

#define DMEMBER(name, type, field, doc)                            \
    {                                                              \
        name, type, offsetof(pygpu_ArrayDescriptor, field), 0, doc \
    }
static PyMemberDef descr2_members[] = {
    DMEMBER("width", T_PYSSIZET, width, "Elements per row."),
    DMEMBER("height", T_PYSSIZET, height, "Rows (0: a 1-D array)."),
    DMEMBER("format", T_INT, format, "An array_format."),
    DMEMBER("num_channels", T_INT, num_channels, "Channels per element: 1, 2 or 4."),
    {NULL},
};
static PyMemberDef descr3_members[] = {
    DMEMBER("width", T_PYSSIZET, width, "Elements per row."),
    DMEMBER("height", T_PYSSIZET, height, "Rows (0: a 1-D array)."),
    DMEMBER("depth", T_PYSSIZET, depth, "Slices, or layers of a layered array (0: 2-D)."),
    DMEMBER("format", T_INT, format, "An array_format."),
    DMEMBER("num_channels", T_INT, num_channels, "Channels per element: 1, 2 or 4."),
    DMEMBER("flags", T_INT, flags, "array3d_flags."),
    {NULL},
};

static PyType_Slot descr2_slots[] = {
    {Py_tp_new, descr2_new},
    {Py_tp_init, pygpu_init_made},
    {Py_tp_dealloc, descr_dealloc},
    {Py_tp_repr, descr_repr},
    {Py_tp_members, descr2_members},
    {Py_tp_doc, "ArrayDescriptor(width=0, height=0, format=array_format.FLOAT, num_channels=1)\n"
                "--\n\nThe shape and element type of a 1-D or 2-D CUDA array "
                "(CUDA_ARRAY_DESCRIPTOR)."},
    {0, NULL},
};
static PyType_Slot descr3_slots[] = {
    {Py_tp_new, descr3_new},
    {Py_tp_init, pygpu_init_made},
    {Py_tp_dealloc, descr_dealloc},
    {Py_tp_repr, descr_repr},
    {Py_tp_members, descr3_members},
    {Py_tp_doc, "ArrayDescriptor3D(width=0, height=0, depth=0, format=array_format.FLOAT, "
                "num_channels=1, flags=0)\n--\n\nThe shape, element type and flags of a "
                "CUDA array of any kind (CUDA_ARRAY3D_DESCRIPTOR): 1-D, 2-D, 3-D, layered, "
                "cubemap, surface-writable."},
    {0, NULL},
};
static PyType_Spec descr2_spec = {
    "pygpu.driver.ArrayDescriptor", sizeof(pygpu_ArrayDescriptor), 0,
    Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE | Py_TPFLAGS_BASETYPE, descr2_slots};
static PyType_Spec descr3_spec = {
    "pygpu.driver.ArrayDescriptor3D", sizeof(pygpu_ArrayDescriptor), 0,
    Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE | Py_TPFLAGS_BASETYPE, descr3_slots};

static PyObject *
descr_from(pygpu_state *st, const CUDA_ARRAY3D_DESCRIPTOR *d, int is3d)
{
    pygpu_ArrayDescriptor *o = PyObject_New(pygpu_ArrayDescriptor, is3d ? st->ArrayDescriptor3DType
                                                                        : st->ArrayDescriptorType);
    if (o == NULL)
        return NULL;
    o->width = (Py_ssize_t)d->Width;
    o->height = (Py_ssize_t)d->Height;
    o->depth = (Py_ssize_t)d->Depth;
    o->format = (int)d->Format;
    o->num_channels = (int)d->NumChannels;
    o->flags = (int)d->Flags;
    return (PyObject *)o;
}

/* Check a descriptor's fields before the driver sees them; ValueError
 * naming the field. */
static int
descr_check(const pygpu_ArrayDescriptor *d, int is3d)
{
    const char *what = is3d ? "Array(): ArrayDescriptor3D" : "Array(): ArrayDescriptor";
    if (d->width < 1) {
        PyErr_Format(PyExc_ValueError, "%s.width must be >= 1, got %zd", what, d->width);
        return -1;
    }
    if (d->height < 0) {
        PyErr_Format(PyExc_ValueError, "%s.height must be >= 0 (0: a 1-D array), got %zd", what,
                     d->height);
        return -1;
    }
    if (is3d && d->depth < 0) {
        PyErr_Format(PyExc_ValueError, "%s.depth must be >= 0 (0: a 1-D or 2-D array), got %zd",
                     what, d->depth);
        return -1;
    }
    if (d->format < 0 || pygpu_array_format_size((unsigned)d->format) == 0) {
        PyErr_Format(PyExc_ValueError,
                     "%s.format=%d is not one of array_format's "
                     "UNSIGNED_INT8/16/32, SIGNED_INT8/16/32, HALF, FLOAT",
                     what, d->format);
        return -1;
    }
    if (d->num_channels != 1 && d->num_channels != 2 && d->num_channels != 4) {
        PyErr_Format(PyExc_ValueError, "%s.num_channels must be 1, 2 or 4, got %d", what,
                     d->num_channels);
        return -1;
    }
    if (!is3d)
        return 0;
    if (d->flags & ~KNOWN_ARRAY3D_FLAGS) {
        PyErr_Format(PyExc_ValueError,
                     "%s.flags=%d has bits that are not array3d_flags "
                     "LAYERED, SURFACE_LDST, CUBEMAP or TEXTURE_GATHER",
                     what, d->flags);
        return -1;
    }
    if (d->height == 0 && d->depth > 0 && !(d->flags & CUDA_ARRAY3D_LAYERED)) {
        PyErr_Format(PyExc_ValueError,
                     "%s: depth=%zd with height=0; a 3-D array needs a "
                     "height",
                     what, d->depth);
        return -1;
    }
    if ((d->flags & CUDA_ARRAY3D_LAYERED) && d->depth < 1) {
        PyErr_Format(PyExc_ValueError,
                     "%s.depth is the number of layers of a LAYERED array "
                     "and must be >= 1, got %zd",
                     what, d->depth);
        return -1;
    }
    if (d->flags & CUDA_ARRAY3D_CUBEMAP) {
        if (d->width != d->height) {
            PyErr_Format(PyExc_ValueError,
                         "%s: a CUBEMAP array's faces are square; "
                         "width=%zd and height=%zd differ",
                         what, d->width, d->height);
            return -1;
        }
        if ((d->flags & CUDA_ARRAY3D_LAYERED) ? (d->depth % 6 != 0) : (d->depth != 6)) {
            PyErr_Format(PyExc_ValueError,
                         "%s.depth of a CUBEMAP array must be 6 (a "
                         "LAYERED cubemap: a multiple of 6), got %zd",
                         what, d->depth);
            return -1;
        }
    }
    return 0;
}

/* ---- Array ---- */

int
pygpu_array_check(pygpu_state *st, pygpu_Array *a)
{
    if (a->freed || a->handle == NULL) {
        PyErr_SetString(st->LogicError, "the Array was freed");
        return -1;
    }
    if (a->context->detached) {
        PyErr_SetString(st->LogicError, "the Array's context was detached");
        return -1;
    }
    return 0;
}

/* Destroy the array in its context; idempotent, never raises. */
static void
array_destroy(pygpu_Array *self)
{
    CUarray h = self->handle;
    pygpu_scope s;
    if (h == NULL)
        return;
    self->handle = NULL;
    self->freed = 1;
    if (self->context->detached || pygpu_scope_enter_quiet(self->context, &s) < 0)
        return;
    cu.cuArrayDestroy(h);
    pygpu_scope_exit(&s);
}

/* free(): mark freed at once (no new use starts), destroy the array now,
 * or, while a copy using it runs with the GIL released, when that copy
 * ends (pygpu_array_unhold).  Idempotent, never raises.  GIL held. */
static void
array_release(pygpu_Array *self)
{
    if (self->handle == NULL)
        return;
    self->freed = 1;
    if (self->busy > 0 || self->holds != NULL) {
        self->free_pending = 1;
        return;
    }
    array_destroy(self);
}

void
pygpu_array_holds_gone(pygpu_Array *a)
{
    if (a->busy == 0 && a->free_pending) {
        a->free_pending = 0;
        array_destroy(a);
    }
}

int
pygpu_array_hold(pygpu_state *st, pygpu_Array *a, pygpu_Array **held)
{
    *held = NULL;
    if (pygpu_array_check(st, a) < 0)
        return -1;
    a->busy++;
    a->context->arrays_busy++;
    Py_INCREF(a);
    *held = a;
    return 0;
}

void
pygpu_array_unhold(pygpu_Array *a)
{
    if (a == NULL)
        return;
    a->context->arrays_busy--;
    if (--a->busy == 0 && a->free_pending && a->holds == NULL) {
        a->free_pending = 0;
        array_destroy(a);
    }
    Py_DECREF(a);
}

static void
array_dealloc(pygpu_Array *self)
{
    PyTypeObject *tp = Py_TYPE(self);
    if (self->weakreflist != NULL)
        PyObject_ClearWeakRefs((PyObject *)self);
    array_release(self); /* nobody holds it: busy is 0 */
    Py_CLEAR(self->context);
    tp->tp_free((PyObject *)self);
    Py_DECREF(tp);
}

static PyObject *
array_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    pygpu_state *st = pygpu_state_from_type(type);
    static char *kwlist[] = {"descriptor", NULL};
    PyObject *dobj;
    pygpu_ArrayDescriptor *d;
    pygpu_Context *ctx;
    pygpu_Array *self;
    CUDA_ARRAY3D_DESCRIPTOR desc;
    CUarray h;
    CUresult rc;
    int is3d;
    pygpu_scope s;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O:Array", kwlist, &dobj))
        return NULL;
    if (PyObject_TypeCheck(dobj, st->ArrayDescriptor3DType)) {
        is3d = 1;
    } else if (PyObject_TypeCheck(dobj, st->ArrayDescriptorType)) {
        is3d = 0;
    } else {
        PyErr_Format(PyExc_TypeError,
                     "Array() takes an ArrayDescriptor or "
                     "ArrayDescriptor3D, not %.100s",
                     Py_TYPE(dobj)->tp_name);
        return NULL;
    }
    d = (pygpu_ArrayDescriptor *)dobj;
    if (descr_check(d, is3d) < 0)
        return NULL;
    memset(&desc, 0, sizeof desc);
    desc.Width = (size_t)d->width;
    desc.Height = (size_t)d->height;
    desc.Depth = is3d ? (size_t)d->depth : 0;
    desc.Format = (CUarray_format)d->format;
    desc.NumChannels = (unsigned)d->num_channels;
    desc.Flags = is3d ? (unsigned)d->flags : 0;
    if ((ctx = pygpu_current_context(st)) == NULL)
        return NULL;
    if (pygpu_scope_enter(st, ctx, &s) < 0)
        return NULL;
    if (is3d) {
        rc = cu.cuArray3DCreate(&h, &desc);
    } else {
        CUDA_ARRAY_DESCRIPTOR d2;
        d2.Width = desc.Width;
        d2.Height = desc.Height;
        d2.Format = desc.Format;
        d2.NumChannels = desc.NumChannels;
        rc = cu.cuArrayCreate(&h, &d2);
    }
    if (rc != CUDA_SUCCESS) {
        pygpu_scope_exit(&s);
        return pygpu_cuda_error(st, rc, is3d ? "cuArray3DCreate" : "cuArrayCreate");
    }
    self = (pygpu_Array *)type->tp_alloc(type, 0);
    if (self == NULL) {
        cu.cuArrayDestroy(h);
        pygpu_scope_exit(&s);
        return NULL;
    }
    pygpu_scope_exit(&s);
    self->handle = h;
    Py_INCREF(ctx);
    self->context = ctx;
    self->desc = desc;
    self->is3d = is3d;
    self->freed = 0;
    self->holds = NULL;
    self->weakreflist = NULL;
    self->busy = 0;
    self->free_pending = 0;
    return (PyObject *)self;
}

static PyObject *
array_free(pygpu_Array *self, PyObject *unused)
{
    array_release(self);
    Py_RETURN_NONE;
}

static PyObject *
array_get_holders(pygpu_Array *self, void *c)
{
    return pygpu_holders(self->holds);
}

static PyObject *
array_get_descriptor_impl(pygpu_Array *self, int want3d)
{
    pygpu_state *st = PYGPU_STATE(self);
    CUDA_ARRAY3D_DESCRIPTOR d3;
    CUresult rc;
    pygpu_scope s;
    if (pygpu_array_check(st, self) < 0 || pygpu_scope_enter(st, self->context, &s) < 0)
        return NULL;
    memset(&d3, 0, sizeof d3);
    if (want3d) {
        rc = cu.cuArray3DGetDescriptor(&d3, self->handle);
    } else {
        CUDA_ARRAY_DESCRIPTOR d2;
        rc = cu.cuArrayGetDescriptor(&d2, self->handle);
        d3.Width = d2.Width;
        d3.Height = d2.Height;
        d3.Format = d2.Format;
        d3.NumChannels = d2.NumChannels;
    }
    pygpu_scope_exit(&s);
    if (rc != CUDA_SUCCESS)
        return pygpu_cuda_error(st, rc, want3d ? "cuArray3DGetDescriptor" : "cuArrayGetDescriptor");
    return descr_from(st, &d3, want3d);
}

static PyObject *
array_get_descriptor(pygpu_Array *self, PyObject *unused)
{
    return array_get_descriptor_impl(self, 0);
}

static PyObject *
array_get_descriptor_3d(pygpu_Array *self, PyObject *unused)
{
    return array_get_descriptor_impl(self, 1);
}

static PyObject *
array_get_handle(pygpu_Array *self, void *c)
{
    if (pygpu_array_check(PYGPU_STATE(self), self) < 0)
        return NULL;
    return PyLong_FromVoidPtr(self->handle);
}

/* the descriptor it was made with, without a driver call */
static PyObject *
array_get_descriptor_attr(pygpu_Array *self, void *c)
{
    return descr_from(PYGPU_STATE(self), &self->desc, 1);
}

static PyObject *
array_get_freed(pygpu_Array *self, void *c)
{
    return PyBool_FromLong(self->freed);
}

static PyObject *
array_repr(pygpu_Array *self)
{
    const CUDA_ARRAY3D_DESCRIPTOR *d = &self->desc;
    if (self->freed)
        return PyUnicode_FromString("<pygpu.driver.Array (freed)>");
    return PyUnicode_FromFormat("<pygpu.driver.Array %zux%zux%zu format=%d channels=%u "
                                "flags=%u>",
                                d->Width, d->Height, d->Depth, (int)d->Format, d->NumChannels,
                                d->Flags);
}

#define CF(f) (PyCFunction)(void (*)(void))(f)
static PyMethodDef array_methods[] = {
    {"free", (PyCFunction)array_free, METH_NOARGS,
     "free($self, /)\n--\n\nDestroy the array now (idempotent).  While a texture or "
     "surface object over it is alive, or another thread's copy uses it, the array reads "
     "as freed at once and is destroyed when the last of them goes (see holders)."},
    {"get_descriptor", (PyCFunction)array_get_descriptor, METH_NOARGS,
     "get_descriptor($self, /)\n--\n\nThe driver's ArrayDescriptor of the array "
     "(cuArrayGetDescriptor)."},
    {"get_descriptor_3d", (PyCFunction)array_get_descriptor_3d, METH_NOARGS,
     "get_descriptor_3d($self, /)\n--\n\nThe driver's ArrayDescriptor3D of the array "
     "(cuArray3DGetDescriptor)."},
    {NULL},
};

static PyGetSetDef array_getset[] = {
    {"handle", (getter)array_get_handle, NULL, "The CUarray as an int.", NULL},
    {"descriptor", (getter)array_get_descriptor_attr, NULL,
     "The ArrayDescriptor3D the array was made with (depth 0: 1-D or 2-D).", NULL},
    {"freed", (getter)array_get_freed, NULL, "Whether free() ran.", NULL},
    {"holders", (getter)array_get_holders, NULL,
     "The texture and surface objects over the array, by name: free() is deferred "
     "until the last one goes.",
     NULL},
    {NULL},
};

static PyMemberDef array_members[] = {
    {"__weaklistoffset__", T_PYSSIZET, offsetof(pygpu_Array, weakreflist), READONLY},
    {NULL},
};

static PyType_Slot array_slots[] = {
    {Py_tp_new, array_new},
    {Py_tp_init, pygpu_init_made},
    {Py_tp_dealloc, array_dealloc},
    {Py_tp_repr, array_repr},
    {Py_tp_methods, array_methods},
    {Py_tp_getset, array_getset},
    {Py_tp_members, array_members},
    {Py_tp_doc, "Array(descriptor)\n--\n\nA CUDA array in the current context, made from an "
                "ArrayDescriptor (cuArrayCreate) or an ArrayDescriptor3D (cuArray3DCreate)."},
    {0, NULL},
};

static PyType_Spec array_spec = {
    "pygpu.driver.Array", sizeof(pygpu_Array), 0,
    Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE | Py_TPFLAGS_BASETYPE, array_slots};

/* ---- _memcpy_3d ---- */

typedef struct {
    int kind;      /* 'h' host, 'd' device, 'a' array */
    PyObject *obj; /* borrowed from the argument tuple */
    size_t x, y, z, pitch, height;
    Py_buffer view; /* host: held during the copy */
    pygpu_DeviceAllocation *held;
    pygpu_Array *array;      /* borrowed */
    pygpu_Array *array_held; /* strong ref: held for the copy (pygpu_array_hold) */
} copy_side;

static int
extent_3d(const copy_side *c, size_t width, size_t height, size_t depth, size_t *out)
{
    size_t rows, slices, t;
    if (width == 0 || height == 0 || depth == 0) {
        *out = 0;
        return 0;
    }
    if (__builtin_add_overflow(c->z, depth - 1, &slices)
        || __builtin_mul_overflow(slices, c->height, &rows)
        || __builtin_add_overflow(rows, c->y, &rows)
        || __builtin_add_overflow(rows, height - 1, &rows)
        || __builtin_mul_overflow(rows, c->pitch, &t) || __builtin_add_overflow(t, c->x, &t)
        || __builtin_add_overflow(t, width, &t))
        return -1;
    *out = t;
    return 0;
}

static int
parse_side(pygpu_state *st, PyObject *tup, copy_side *c, const char *what, const char *side,
           size_t width, size_t height, size_t depth, int writable)
{
    const char *kind;
    Py_ssize_t x, y, z, pitch, sheight;
    size_t need, cap;
    if (!PyArg_ParseTuple(tup, "sOnnnnn", &kind, &c->obj, &x, &y, &z, &pitch, &sheight))
        return -1;
    if (x < 0 || y < 0 || z < 0 || pitch < 0 || sheight < 0) {
        PyErr_Format(PyExc_ValueError, "%s: %s offsets, pitch and height must be >= 0", what, side);
        return -1;
    }
    c->kind = kind[0];
    c->x = (size_t)x;
    c->y = (size_t)y;
    c->z = (size_t)z;
    c->pitch = (size_t)pitch;
    c->height = (size_t)sheight;
    if (c->kind == 'a') {
        pygpu_Array *a;
        size_t esize, wbytes, h, d;
        if (!PyObject_TypeCheck(c->obj, st->ArrayType)) {
            PyErr_Format(PyExc_TypeError, "%s: set_%s_array() takes an Array, not %.100s", what,
                         side, Py_TYPE(c->obj)->tp_name);
            return -1;
        }
        a = c->array = (pygpu_Array *)c->obj;
        if (pygpu_array_check(st, a) < 0)
            return -1;
        esize = pygpu_array_format_size(a->desc.Format) * a->desc.NumChannels;
        wbytes = a->desc.Width * esize;
        h = a->desc.Height ? a->desc.Height : 1;
        d = a->desc.Depth ? a->desc.Depth : 1;
        if (c->x % esize) {
            PyErr_Format(PyExc_ValueError,
                         "%s: %s_x_in_bytes=%zu is not a multiple of the "
                         "array's %zu-byte elements",
                         what, side, c->x, esize);
            return -1;
        }
        if (width > wbytes || c->x > wbytes - width) {
            PyErr_Format(PyExc_ValueError,
                         "%s: %s_x_in_bytes + width_in_bytes = %zu + %zu "
                         "exceeds the %s array's rows of %zu bytes",
                         what, side, c->x, width, side, wbytes);
            return -1;
        }
        if (height > h || c->y > h - height) {
            PyErr_Format(PyExc_ValueError,
                         "%s: %s_y + height = %zu + %zu exceeds the %s "
                         "array's %zu rows",
                         what, side, c->y, height, side, h);
            return -1;
        }
        if (depth > d || c->z > d - depth) {
            PyErr_Format(PyExc_ValueError,
                         "%s: %s_z + depth = %zu + %zu exceeds the %s "
                         "array's depth of %zu",
                         what, side, c->z, depth, side, d);
            return -1;
        }
        return 0;
    }
    if (c->kind != 'h' && c->kind != 'd') {
        PyErr_Format(PyExc_ValueError, "%s: unknown %s kind '%s'", what, side, kind);
        return -1;
    }
    if (width > 0 && c->pitch < c->x + width) {
        PyErr_Format(PyExc_ValueError,
                     "%s: %s_pitch=%zu is less than %s_x_in_bytes + "
                     "width_in_bytes = %zu",
                     what, side, c->pitch, side, c->x + width);
        return -1;
    }
    if ((depth > 1 || c->z > 0) && c->height < c->y + height) {
        PyErr_Format(PyExc_ValueError,
                     "%s: %s_height=%zu (rows between slices) is less "
                     "than %s_y + height = %zu",
                     what, side, c->height, side, c->y + height);
        return -1;
    }
    if (extent_3d(c, width, height, depth, &need) < 0) {
        PyErr_Format(PyExc_ValueError, "%s: the %s's extent overflows the address space", what,
                     side);
        return -1;
    }
    if (c->kind == 'h') {
        char buf[64];
        PyOS_snprintf(buf, sizeof buf, "%s %s", what, side);
        if (pygpu_get_host_buffer(c->obj, &c->view, writable, buf) < 0)
            return -1;
        cap = (size_t)c->view.len;
    } else {
        CUdeviceptr p;
        if (pygpu_get_device_ptr(st, c->obj, &p, &cap, 0) < 0)
            return -1;
    }
    if (cap != (size_t)-1 && need > cap) {
        PyErr_Format(PyExc_ValueError,
                     "%s: the copy spans %zu bytes of the %s, which "
                     "holds %zu bytes",
                     what, need, side, cap);
        return -1;
    }
    return 0;
}

static void
fill_side(const copy_side *c, CUmemorytype *type, const void **host, CUdeviceptr *dev, CUarray *arr,
          size_t *x, size_t *y, size_t *z, size_t *pitch, size_t *height, CUdeviceptr devptr)
{
    *x = c->x;
    *y = c->y;
    *z = c->z;
    if (c->kind == 'a') {
        *type = CU_MEMORYTYPE_ARRAY;
        *arr = c->array->handle;
    } else if (c->kind == 'h') {
        *type = CU_MEMORYTYPE_HOST;
        *host = c->view.buf;
        *pitch = c->pitch;
        *height = c->height;
    } else {
        *type = CU_MEMORYTYPE_DEVICE;
        *dev = devptr;
        *pitch = c->pitch;
        *height = c->height;
    }
}

/* The context of one side of a peer copy: the Context given, else the
 * side's own (an Array's, a DeviceAllocation's), else the current one.
 * Borrowed; NULL with an exception (TypeError, LogicError if detached). */
static pygpu_Context *
peer_side_context(pygpu_state *st, PyObject *given, const copy_side *c, const char *what,
                  const char *side)
{
    pygpu_Context *ctx;
    if (given != Py_None) {
        if (!PyObject_TypeCheck(given, st->ContextType)) {
            PyErr_Format(PyExc_TypeError, "%s: set_%s_context() takes a Context, not %.100s", what,
                         side, Py_TYPE(given)->tp_name);
            return NULL;
        }
        ctx = (pygpu_Context *)given;
    } else if (c->kind == 'a') {
        ctx = c->array->context;
    } else if (c->kind == 'd' && pygpu_is_allocation(st, c->obj)) {
        ctx = ((pygpu_DeviceAllocation *)c->obj)->context;
    } else if ((ctx = pygpu_current_context(st)) == NULL) {
        return NULL;
    }
    if (pygpu_context_check(st, ctx) < 0)
        return NULL;
    return ctx;
}

/* The copy behind _memcpy_3d and _memcpy_3d_peer; a side is (kind
 * 'h'/'d'/'a', object, x_in_bytes, y, z, pitch, height).  peer: the
 * contexts of the two sides (a Context or None each) go to cuMemcpy3DPeer. */
static PyObject *
memcpy_3d_impl(pygpu_state *st, PyObject *args, int peer)
{
    pygpu_pfn_cuMemcpy3DPeer peer_sync = NULL;
    pygpu_pfn_cuMemcpy3DPeerAsync peer_async = NULL;
    pygpu_pfn_cuMemcpy3D copy_sync = NULL;
    pygpu_pfn_cuMemcpy3DAsync copy_async = NULL;
    const char *what;
    PyObject *stup, *dtup, *sobj, *sctx_obj = Py_None, *dctx_obj = Py_None;
    Py_ssize_t w, h, d;
    copy_side src, dst;
    CUDA_MEMCPY3D p;
    CUDA_MEMCPY3D_PEER pp;
    CUstream stream = NULL;
    CUdeviceptr sp = 0, dp = 0;
    size_t cap;
    pygpu_Context *ctx, *sctx = NULL, *dctx = NULL;
    pygpu_scope s;
    const char *routine;
    CUresult rc;
    PyObject *res = NULL;
    memset(&src, 0, sizeof src);
    memset(&dst, 0, sizeof dst);
    if (peer ? !PyArg_ParseTuple(args, "sO!O!nnnOOO:_memcpy_3d_peer", &what, &PyTuple_Type, &stup,
                                 &PyTuple_Type, &dtup, &w, &h, &d, &sobj, &sctx_obj, &dctx_obj)
             : !PyArg_ParseTuple(args, "sO!O!nnnO:_memcpy_3d", &what, &PyTuple_Type, &stup,
                                 &PyTuple_Type, &dtup, &w, &h, &d, &sobj))
        return NULL;
    if (w < 0 || h < 0 || d < 0) {
        PyErr_Format(PyExc_ValueError, "%s: width_in_bytes, height and depth must be >= 0", what);
        return NULL;
    }
    if (parse_side(st, stup, &src, what, "src", (size_t)w, (size_t)h, (size_t)d, 0) < 0
        || parse_side(st, dtup, &dst, what, "dst", (size_t)w, (size_t)h, (size_t)d, 1) < 0)
        goto done;
    /* inside this thread's capture the default stream is the capturing one
     * (docs/graphs.md): a copy given no stream (synchronous) is refused, one
     * given the null or legacy stream is captured; in another thread, legacy
     * work that would wait for a blocking capturing stream is refused */
    if (pygpu_captures_active != 0
        && (pygpu_capture_default(st, &sobj, sobj == Py_None, what,
                                  "pass it the capturing stream (it is captured)")
                < 0
            || pygpu_capture_check(st, sobj, sobj == Py_None, what) < 0))
        goto done;
    if (sobj != Py_None && pygpu_get_stream(st, sobj, &stream) < 0)
        goto done;
    /* the device pointers last: the conversions above may run Python code */
    if (src.kind == 'd' && pygpu_get_device_ptr(st, src.obj, &sp, &cap, 0) < 0)
        goto done;
    if (dst.kind == 'd' && pygpu_get_device_ptr(st, dst.obj, &dp, &cap, 0) < 0)
        goto done;
    /* checked again and held from here to the end of the copy: a free()
     * meanwhile defers cuArrayDestroy to pygpu_array_unhold */
    if ((src.kind == 'a' && pygpu_array_hold(st, src.array, &src.array_held) < 0)
        || (dst.kind == 'a' && pygpu_array_hold(st, dst.array, &dst.array_held) < 0))
        goto done;
    if (peer) {
        if ((sctx = peer_side_context(st, sctx_obj, &src, what, "src")) == NULL
            || (dctx = peer_side_context(st, dctx_obj, &dst, what, "dst")) == NULL)
            goto done;
        ctx = dctx;
    } else {
        ctx = src.kind == 'a'   ? src.array->context
              : dst.kind == 'a' ? dst.array->context
                                : pygpu_current_context(st);
        if (ctx == NULL)
            goto done;
    }
    memset(&p, 0, sizeof p);
    memset(&pp, 0, sizeof pp);
    if (peer) {
        fill_side(&src, &pp.srcMemoryType, &pp.srcHost, &pp.srcDevice, &pp.srcArray,
                  &pp.srcXInBytes, &pp.srcY, &pp.srcZ, &pp.srcPitch, &pp.srcHeight, sp);
        fill_side(&dst, &pp.dstMemoryType, (const void **)&pp.dstHost, &pp.dstDevice, &pp.dstArray,
                  &pp.dstXInBytes, &pp.dstY, &pp.dstZ, &pp.dstPitch, &pp.dstHeight, dp);
        pp.srcContext = sctx->handle;
        pp.dstContext = dctx->handle;
        pp.WidthInBytes = (size_t)w;
        pp.Height = (size_t)h;
        pp.Depth = (size_t)d;
    } else {
        fill_side(&src, &p.srcMemoryType, &p.srcHost, &p.srcDevice, &p.srcArray, &p.srcXInBytes,
                  &p.srcY, &p.srcZ, &p.srcPitch, &p.srcHeight, sp);
        fill_side(&dst, &p.dstMemoryType, (const void **)&p.dstHost, &p.dstDevice, &p.dstArray,
                  &p.dstXInBytes, &p.dstY, &p.dstZ, &p.dstPitch, &p.dstHeight, dp);
        p.WidthInBytes = (size_t)w;
        p.Height = (size_t)h;
        p.Depth = (size_t)d;
    }
    if (w == 0 || h == 0 || d == 0) {
        res = Py_NewRef(Py_None);
        goto done;
    }
    /* the entry point through its capture class (core/cuda_api.h) */
    if (peer && sobj == Py_None)
        peer_sync = PYGPU_CU_LEGACY(st, cuMemcpy3DPeer, "Memcpy3DPeer");
    else if (peer)
        peer_async = PYGPU_CU_STREAM(st, cuMemcpy3DPeerAsync, stream, 0, "Memcpy3DPeer");
    else if (sobj == Py_None)
        copy_sync = PYGPU_CU_LEGACY(st, cuMemcpy3D, "Memcpy3D");
    else
        copy_async = PYGPU_CU_STREAM(st, cuMemcpy3DAsync, stream, 0, "Memcpy3D");
    if (!peer_sync && !peer_async && !copy_sync && !copy_async)
        goto done;
    if ((src.kind == 'd' && pygpu_allocation_hold(st, src.obj, &src.held) < 0)
        || (dst.kind == 'd' && pygpu_allocation_hold(st, dst.obj, &dst.held) < 0))
        goto done;
    if (pygpu_scope_enter(st, ctx, &s) < 0)
        goto done;
    if (peer)
        routine = sobj == Py_None ? "cuMemcpy3DPeer" : "cuMemcpy3DPeerAsync";
    else
        routine = sobj == Py_None ? "cuMemcpy3D" : "cuMemcpy3DAsync";
    Py_BEGIN_ALLOW_THREADS
        if (peer)
            rc = sobj == Py_None ? peer_sync(&pp) : peer_async(&pp, stream);
        else
            rc = sobj == Py_None ? copy_sync(&p) : copy_async(&p, stream);
    Py_END_ALLOW_THREADS
    pygpu_scope_exit(&s);
    if (rc != CUDA_SUCCESS) {
        pygpu_cuda_error(st, rc, routine);
        goto done;
    }
    if (sobj != Py_None && pygpu_capture_note(st, sobj, dst.obj, &src.obj, 1) < 0)
        goto done;
    res = Py_NewRef(Py_None);
done:
    pygpu_allocation_unhold(src.held);
    pygpu_allocation_unhold(dst.held);
    pygpu_array_unhold(src.array_held);
    pygpu_array_unhold(dst.array_held);
    if (src.view.obj)
        PyBuffer_Release(&src.view);
    if (dst.view.obj)
        PyBuffer_Release(&dst.view);
    return res;
}

/* _memcpy_3d(what, src, dst, width_in_bytes, height, depth, stream) */
static PyObject *
memcpy_3d(PyObject *module, PyObject *args)
{
    return memcpy_3d_impl(PyModule_GetState(module), args, 0);
}

/* _memcpy_3d_peer(what, src, dst, width_in_bytes, height, depth, stream,
 *                 src_context, dst_context) */
static PyObject *
memcpy_3d_peer(PyObject *module, PyObject *args)
{
    return memcpy_3d_impl(PyModule_GetState(module), args, 1);
}

/* ---- memcpy_dtoa / memcpy_atod / memcpy_atoa: 1-D arrays, byte offsets ---- */

/* Check a 1-D array side of a linear array copy: an Array, alive, 1-D,
 * index and len multiples of its element size, [index, index + len) inside
 * it.  0, or -1 with TypeError/ValueError/LogicError naming `what`. */
static int
linear_array_side(pygpu_state *st, PyObject *obj, Py_ssize_t index, Py_ssize_t len,
                  const char *what, const char *argname, const char *idxname)
{
    pygpu_Array *a;
    size_t esize, total;
    if (!PyObject_TypeCheck(obj, st->ArrayType)) {
        PyErr_Format(PyExc_TypeError, "%s: %s must be an Array, not %.100s", what, argname,
                     Py_TYPE(obj)->tp_name);
        return -1;
    }
    a = (pygpu_Array *)obj;
    if (pygpu_array_check(st, a) < 0)
        return -1;
    if (a->desc.Height != 0 || a->desc.Depth != 0) {
        PyErr_Format(PyExc_ValueError,
                     "%s: %s is a %s array (%zu x %zu x %zu); it copies "
                     "1-D arrays (height 0): use Memcpy2D or Memcpy3D",
                     what, argname, a->desc.Depth ? "3-D or layered" : "2-D", a->desc.Width,
                     a->desc.Height, a->desc.Depth);
        return -1;
    }
    esize = pygpu_array_format_size(a->desc.Format) * a->desc.NumChannels;
    total = a->desc.Width * esize;
    if ((size_t)index % esize) {
        PyErr_Format(PyExc_ValueError,
                     "%s: %s=%zd is not a multiple of %s's %zu-byte "
                     "elements",
                     what, idxname, index, argname, esize);
        return -1;
    }
    if ((size_t)len % esize) {
        PyErr_Format(PyExc_ValueError,
                     "%s: len=%zd is not a multiple of %s's %zu-byte "
                     "elements",
                     what, len, argname, esize);
        return -1;
    }
    if ((size_t)len > total || (size_t)index > total - (size_t)len) {
        PyErr_Format(PyExc_ValueError,
                     "%s: %s + len = %zd + %zd bytes exceeds %s, an "
                     "Array of %zu bytes (%zu elements of %zu bytes)",
                     what, idxname, index, len, argname, total, a->desc.Width, esize);
        return -1;
    }
    return 0;
}

static int
linear_nonneg(Py_ssize_t index, Py_ssize_t len, const char *what, const char *idxname)
{
    if (index < 0 || len < 0) {
        PyErr_Format(PyExc_ValueError, "%s: %s and len must be >= 0, got %zd and %zd", what,
                     idxname, index, len);
        return -1;
    }
    return 0;
}

/* The linear array copies take no stream: synchronous, on the legacy
 * stream, which a capture forbids.  Inside this thread's capture, or in
 * another thread while a blocking stream of the current context captures,
 * a LogicError naming `what` (-1), before the driver is called; 0
 * otherwise.  GIL held. */
static int
linear_capture_check(pygpu_state *st, const char *what)
{
    PyObject *sobj = Py_None;
    if (pygpu_captures_active == 0)
        return 0;
    if (pygpu_capture_default(st, &sobj, 1, what,
                              "copy with a Memcpy3D given the capturing stream (it is "
                              "captured)")
            < 0
        || pygpu_capture_check(st, sobj, 1, what) < 0)
        return -1;
    return 0;
}

/* The copy of memcpy_dtoa (to_array) and memcpy_atod, arguments parsed.
 * The device pointer is resolved (and its allocation held) first, since
 * resolving it may run Python code; the array is checked after. */
static PyObject *
linear_device_copy(pygpu_state *st, PyObject *ary, Py_ssize_t index, PyObject *dev, Py_ssize_t len,
                   int to_array)
{
    pygpu_pfn_cuMemcpyDtoA dtoa = NULL;
    pygpu_pfn_cuMemcpyAtoD atod = NULL;
    const char *what = to_array ? "memcpy_dtoa()" : "memcpy_atod()";
    const char *routine = to_array ? "cuMemcpyDtoA" : "cuMemcpyAtoD";
    pygpu_DeviceAllocation *held = NULL;
    pygpu_Array *aheld = NULL;
    CUdeviceptr ptr;
    size_t cap;
    pygpu_Array *a;
    pygpu_scope s;
    CUresult rc;
    PyObject *res = NULL;
    if (linear_nonneg(index, len, what, "index") < 0)
        return NULL;
    if (!PyObject_TypeCheck(ary, st->ArrayType)) {
        PyErr_Format(PyExc_TypeError, "%s: ary must be an Array, not %.100s", what,
                     Py_TYPE(ary)->tp_name);
        return NULL;
    }
    if (pygpu_allocation_hold(st, dev, &held) < 0
        || pygpu_get_device_ptr(st, dev, &ptr, &cap, 0) < 0)
        goto done;
    if (linear_array_side(st, ary, index, len, what, "ary", "index") < 0)
        goto done;
    if (cap != (size_t)-1 && (size_t)len > cap) {
        PyErr_Format(PyExc_ValueError,
                     "%s: len=%zd bytes do not fit in the %s allocation, "
                     "which holds %zu bytes",
                     what, len, to_array ? "source" : "destination", cap);
        goto done;
    }
    if (len == 0) {
        res = Py_NewRef(Py_None);
        goto done;
    }
    a = (pygpu_Array *)ary;
    if (linear_capture_check(st, what) < 0)
        goto done;
    if (to_array)
        dtoa = PYGPU_CU_LEGACY(st, cuMemcpyDtoA, what);
    else
        atod = PYGPU_CU_LEGACY(st, cuMemcpyAtoD, what);
    if (dtoa == NULL && atod == NULL)
        goto done;
    if (pygpu_array_hold(st, a, &aheld) < 0 || pygpu_scope_enter(st, a->context, &s) < 0)
        goto done;
    Py_BEGIN_ALLOW_THREADS
        rc = to_array ? dtoa(a->handle, (size_t)index, ptr, (size_t)len)
                      : atod(ptr, a->handle, (size_t)index, (size_t)len);
    Py_END_ALLOW_THREADS
    pygpu_scope_exit(&s);
    if (rc != CUDA_SUCCESS) {
        pygpu_cuda_error(st, rc, routine);
        goto done;
    }
    res = Py_NewRef(Py_None);
done:
    pygpu_array_unhold(aheld);
    pygpu_allocation_unhold(held);
    return res;
}

/* memcpy_dtoa(ary, index, src, len) */
static PyObject *
memcpy_dtoa(PyObject *module, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"ary", "index", "src", "len", NULL};
    PyObject *ary, *dev;
    Py_ssize_t index, len;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OnOn:memcpy_dtoa", kwlist, &ary, &index, &dev,
                                     &len))
        return NULL;
    return linear_device_copy(PyModule_GetState(module), ary, index, dev, len, 1);
}

/* memcpy_atod(dest, ary, index, len) */
static PyObject *
memcpy_atod(PyObject *module, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"dest", "ary", "index", "len", NULL};
    PyObject *ary, *dev;
    Py_ssize_t index, len;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOnn:memcpy_atod", kwlist, &dev, &ary, &index,
                                     &len))
        return NULL;
    return linear_device_copy(PyModule_GetState(module), ary, index, dev, len, 0);
}

/* memcpy_atoa(dest, dest_index, src, src_index, len) */
static PyObject *
memcpy_atoa(PyObject *module, PyObject *args, PyObject *kwds)
{
    pygpu_pfn_cuMemcpyAtoA atoa;
    pygpu_state *st = PyModule_GetState(module);
    static char *kwlist[] = {"dest", "dest_index", "src", "src_index", "len", NULL};
    const char *what = "memcpy_atoa()";
    PyObject *dobj, *sobj;
    Py_ssize_t di, si, len;
    pygpu_Array *da, *sa, *dheld = NULL, *sheld = NULL;
    pygpu_scope s;
    CUresult rc;
    PyObject *res = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OnOnn:memcpy_atoa", kwlist, &dobj, &di, &sobj,
                                     &si, &len))
        return NULL;
    if (linear_nonneg(di, len, what, "dest_index") < 0
        || linear_nonneg(si, len, what, "src_index") < 0
        || linear_array_side(st, dobj, di, len, what, "dest", "dest_index") < 0
        || linear_array_side(st, sobj, si, len, what, "src", "src_index") < 0)
        return NULL;
    da = (pygpu_Array *)dobj;
    sa = (pygpu_Array *)sobj;
    if (pygpu_array_format_size(da->desc.Format) * da->desc.NumChannels
        != pygpu_array_format_size(sa->desc.Format) * sa->desc.NumChannels) {
        PyErr_Format(PyExc_ValueError,
                     "%s: the arrays' elements differ in size (dest %zu "
                     "bytes, src %zu bytes)",
                     what, pygpu_array_format_size(da->desc.Format) * da->desc.NumChannels,
                     pygpu_array_format_size(sa->desc.Format) * sa->desc.NumChannels);
        return NULL;
    }
    if (da->context != sa->context) {
        PyErr_Format(PyExc_ValueError,
                     "%s: dest and src live in different contexts; "
                     "copy between contexts with Memcpy3DPeer",
                     what);
        return NULL;
    }
    if (len == 0)
        Py_RETURN_NONE;
    if (linear_capture_check(st, what) < 0
        || (atoa = PYGPU_CU_LEGACY(st, cuMemcpyAtoA, what)) == NULL)
        return NULL;
    if (pygpu_array_hold(st, da, &dheld) < 0 || pygpu_array_hold(st, sa, &sheld) < 0
        || pygpu_scope_enter(st, da->context, &s) < 0)
        goto done;
    Py_BEGIN_ALLOW_THREADS
        rc = atoa(da->handle, (size_t)di, sa->handle, (size_t)si, (size_t)len);
    Py_END_ALLOW_THREADS
    pygpu_scope_exit(&s);
    if (rc != CUDA_SUCCESS) {
        pygpu_cuda_error(st, rc, "cuMemcpyAtoA");
        goto done;
    }
    res = Py_NewRef(Py_None);
done:
    pygpu_array_unhold(sheld);
    pygpu_array_unhold(dheld);
    return res;
}

#define KW (METH_VARARGS | METH_KEYWORDS)
static PyMethodDef cuarray_functions[] = {
    {"_memcpy_3d", memcpy_3d, METH_VARARGS,
     "_memcpy_3d(what, src, dst, width_in_bytes, height, depth, stream)\n--\n\n"
     "The copy behind Memcpy2D/Memcpy3D with an array side, and Memcpy3D."},
    {"_memcpy_3d_peer", memcpy_3d_peer, METH_VARARGS,
     "_memcpy_3d_peer(what, src, dst, width_in_bytes, height, depth, stream, src_context, "
     "dst_context)\n--\n\nThe copy behind Memcpy3DPeer (cuMemcpy3DPeer[Async])."},
    {"memcpy_dtoa", CF(memcpy_dtoa), KW,
     "memcpy_dtoa($module, /, ary, index, src, len)\n--\n\n"
     "Copy len bytes from device memory src into the 1-D Array ary at byte offset index "
     "(cuMemcpyDtoA)."},
    {"memcpy_atod", CF(memcpy_atod), KW,
     "memcpy_atod($module, /, dest, ary, index, len)\n--\n\n"
     "Copy len bytes from byte offset index of the 1-D Array ary into device memory dest "
     "(cuMemcpyAtoD)."},
    {"memcpy_atoa", CF(memcpy_atoa), KW,
     "memcpy_atoa($module, /, dest, dest_index, src, src_index, len)\n--\n\n"
     "Copy len bytes from byte offset src_index of the 1-D Array src to byte offset "
     "dest_index of the 1-D Array dest (cuMemcpyAtoA)."},
    {NULL},
};
#undef KW

int
pygpu_cuarray_setup(PyObject *m, pygpu_state *st)
{
    if (pygpu_add_type(m, &descr2_spec, &st->ArrayDescriptorType) < 0
        || pygpu_add_type(m, &descr3_spec, &st->ArrayDescriptor3DType) < 0
        || pygpu_add_type(m, &array_spec, &st->ArrayType) < 0)
        return -1;
    return PyModule_AddFunctions(m, cuarray_functions);
}
