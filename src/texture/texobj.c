/* TextureObject (cuTexObjectCreate) and SurfaceObject (cuSurfObjectCreate).
 *
 * Each object owns its 64-bit handle and holds a strong reference to the
 * resource it reads (an Array, a DeviceAllocation, a GPU array), so the
 * resource outlives it, and a hold on its memory (hold.c): a free() of the
 * Array or allocation while the object lives is deferred until it goes.  Both are kernel
 * arguments as they are (args.c packs the handle into a
 * cudaTextureObject_t / cudaSurfaceObject_t parameter).
 */
#include "pygpu.h"

typedef struct {
    PyObject_HEAD unsigned long long handle; /* owned: CUtexObject or CUsurfObject; 0 when freed */
    int surface;                             /* 1: a SurfaceObject */
    pygpu_Context *context;                  /* strong ref: where it was made and is destroyed */
    PyObject *resource;                      /* strong ref: what it reads */
    pygpu_Array *array;                      /* strong ref when the resource is an Array */
    PyObject *hold;                          /* strong: the hold on the memory read (hold.c), or
                                      None (an int address: the caller's to keep) */
    CUDA_RESOURCE_DESC res;
    CUDA_TEXTURE_DESC tex;
    PyObject *weakreflist;
} pygpu_TexObject;

/* ---- release ---- */

static void
texobj_release(pygpu_TexObject *self)
{
    unsigned long long h = self->handle;
    pygpu_scope s;
    if (h != 0) {
        self->handle = 0;
        if (self->context != NULL && !self->context->detached
            && pygpu_scope_enter_quiet(self->context, &s) == 0) {
            if (self->surface)
                cu.cuSurfObjectDestroy((CUsurfObject)h);
            else
                cu.cuTexObjectDestroy((CUtexObject)h);
            pygpu_scope_exit(&s);
        }
    }
    /* after the handle: a deferred free of the memory happens here */
    Py_CLEAR(self->hold);
    Py_CLEAR(self->array);
}

static int
texobj_traverse(pygpu_TexObject *self, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE(self));
    Py_VISIT(self->resource);
    Py_VISIT(self->array);
    return 0;
}

static int
texobj_clear(pygpu_TexObject *self)
{
    texobj_release(self);
    Py_CLEAR(self->resource);
    return 0;
}

static void
texobj_dealloc(pygpu_TexObject *self)
{
    PyTypeObject *tp = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    if (self->weakreflist != NULL)
        PyObject_ClearWeakRefs((PyObject *)self);
    texobj_release(self);
    Py_CLEAR(self->resource);
    Py_CLEAR(self->context);
    tp->tp_free((PyObject *)self);
    Py_DECREF(tp);
}

int
pygpu_texobj_handle(pygpu_state *st, PyObject *obj, unsigned long long *out)
{
    pygpu_TexObject *t = (pygpu_TexObject *)obj;
    const char *name = t->surface ? "SurfaceObject" : "TextureObject";
    if (t->handle == 0) {
        PyErr_Format(st->LogicError, "the %s was freed", name);
        return -1;
    }
    if (t->context->detached) {
        PyErr_Format(st->LogicError, "the %s's context was detached", name);
        return -1;
    }
    *out = t->handle;
    return 0;
}

/* ---- argument helpers ---- */

static int
parse_enum(PyObject *obj, int lo, int hi, int *out, const char *what)
{
    int v;
    if (pygpu_parse_int(obj, &v, what) < 0)
        return -1;
    if (v < lo || v > hi) {
        PyErr_Format(PyExc_ValueError, "%s=%R is out of range (%d to %d)", what, obj, lo, hi);
        return -1;
    }
    *out = v;
    return 0;
}

/* an optional attribute as a tuple of ints (shape, strides); NULL and no
 * exception when absent or not a sequence of ints */
static int
int_tuple_attr(PyObject *obj, const char *name, Py_ssize_t *vals, int *n, int maxn)
{
    PyObject *a = PyObject_GetAttrString(obj, name), *seq;
    Py_ssize_t i, len;
    *n = -1;
    if (a == NULL) {
        if (!PyErr_ExceptionMatches(PyExc_AttributeError))
            return -1;
        PyErr_Clear();
        return 0;
    }
    seq = PySequence_Fast(a, "not a sequence");
    Py_DECREF(a);
    if (seq == NULL) {
        PyErr_Clear();
        return 0;
    }
    len = PySequence_Fast_GET_SIZE(seq);
    if (len > maxn) {
        Py_DECREF(seq);
        *n = (int)len;
        return 0;
    }
    for (i = 0; i < len; i++) {
        vals[i] = PyNumber_AsSsize_t(PySequence_Fast_GET_ITEM(seq, i), PyExc_OverflowError);
        if (vals[i] == -1 && PyErr_Occurred()) {
            Py_DECREF(seq);
            return -1;
        }
    }
    Py_DECREF(seq);
    *n = (int)len;
    return 0;
}

static int
shape_arg(PyObject *obj, Py_ssize_t *vals, int *n, int maxn, const char *what)
{
    PyObject *seq = PySequence_Fast(obj, "");
    Py_ssize_t i, len;
    if (seq == NULL) {
        PyErr_Format(PyExc_TypeError, "%s must be a sequence of ints, not %.100s", what,
                     Py_TYPE(obj)->tp_name);
        return -1;
    }
    len = PySequence_Fast_GET_SIZE(seq);
    if (len < 1 || len > maxn) {
        Py_DECREF(seq);
        PyErr_Format(PyExc_ValueError, "%s must have 1 to %d entries, got %zd", what, maxn, len);
        return -1;
    }
    for (i = 0; i < len; i++) {
        vals[i] = PyNumber_AsSsize_t(PySequence_Fast_GET_ITEM(seq, i), PyExc_OverflowError);
        if (vals[i] == -1 && PyErr_Occurred()) {
            Py_DECREF(seq);
            if (PyErr_ExceptionMatches(PyExc_TypeError)) {
                PyErr_Clear();
                PyErr_Format(PyExc_TypeError, "%s[%zd] must be an int", what, i);
            }
            return -1;
        }
    }
    Py_DECREF(seq);
    *n = (int)len;
    return 0;
}

/* The resource description of linear or pitched device memory. */
static int
linear_resource(pygpu_state *st, PyObject *resource, PyObject *fmt_obj, PyObject *nch_obj,
                PyObject *shape_obj, PyObject *pitch_obj, CUDA_RESOURCE_DESC *res)
{
    CUdeviceptr ptr;
    size_t cap, esize, need;
    unsigned int format, nch = 1;
    Py_ssize_t shape[4], strides[4];
    int ndim = -1, nstrides = -1;
    if (pygpu_get_device_ptr(st, resource, &ptr, &cap, 0) < 0)
        return -1;
    if (nch_obj != Py_None) {
        if (pygpu_parse_uint(nch_obj, &nch, "TextureObject(): num_channels") < 0)
            return -1;
        if (nch != 1 && nch != 2 && nch != 4) {
            PyErr_Format(PyExc_ValueError,
                         "TextureObject(): num_channels must be 1, 2 or 4, "
                         "got %u",
                         nch);
            return -1;
        }
    }
    if (fmt_obj != Py_None) {
        if (pygpu_parse_uint(fmt_obj, &format, "TextureObject(): format") < 0)
            return -1;
        if (pygpu_array_format_size(format) == 0) {
            PyErr_Format(PyExc_ValueError,
                         "TextureObject(): format=%R is not one of "
                         "array_format's UNSIGNED_INT8/16/32, SIGNED_INT8/16/32, HALF, FLOAT",
                         fmt_obj);
            return -1;
        }
    } else {
        PyObject *dt = PyObject_GetAttrString(resource, "dtype");
        int r;
        if (dt == NULL) {
            if (!PyErr_ExceptionMatches(PyExc_AttributeError))
                return -1;
            PyErr_Clear();
            PyErr_Format(PyExc_TypeError,
                         "TextureObject(): a %.100s has no dtype; pass "
                         "format= (an array_format) and num_channels=",
                         Py_TYPE(resource)->tp_name);
            return -1;
        }
        r = pygpu_dtype_array_format(dt, &format, "TextureObject()");
        Py_DECREF(dt);
        if (r < 0)
            return -1;
    }
    esize = pygpu_array_format_size(format) * nch;
    if (shape_obj != Py_None) {
        if (shape_arg(shape_obj, shape, &ndim, 2, "TextureObject(): shape") < 0)
            return -1;
    } else {
        if (int_tuple_attr(resource, "shape", shape, &ndim, 3) < 0
            || int_tuple_attr(resource, "strides", strides, &nstrides, 3) < 0)
            return -1;
        /* a trailing dimension of num_channels is the channels */
        if (ndim >= 2 && nch > 1 && shape[ndim - 1] == (Py_ssize_t)nch) {
            ndim--;
            nstrides = nstrides == ndim + 1 ? ndim : -1;
        }
        if (ndim > 2) {
            PyErr_Format(PyExc_ValueError,
                         "TextureObject(): linear memory is 1-D or 2-D "
                         "(pitched); the %.100s has %d dimensions (copy it into an Array for "
                         "3-D textures)",
                         Py_TYPE(resource)->tp_name, ndim);
            return -1;
        }
    }
    memset(res, 0, sizeof *res);
    if (ndim == 2) {
        Py_ssize_t pitch;
        if (shape[0] < 1 || shape[1] < 1) {
            PyErr_Format(PyExc_ValueError,
                         "TextureObject(): shape (%zd, %zd) must be "
                         "positive",
                         shape[0], shape[1]);
            return -1;
        }
        if (pitch_obj != Py_None) {
            pitch = PyNumber_AsSsize_t(pitch_obj, PyExc_OverflowError);
            if (pitch == -1 && PyErr_Occurred())
                return -1;
        } else if (nstrides == 2 && shape_obj == Py_None) {
            if ((size_t)strides[1] != esize) {
                PyErr_Format(PyExc_ValueError,
                             "TextureObject(): the rows of the %.100s are "
                             "not contiguous (stride %zd, elements of %zu bytes)",
                             Py_TYPE(resource)->tp_name, strides[1], esize);
                return -1;
            }
            pitch = strides[0];
        } else {
            pitch = shape[1] * (Py_ssize_t)esize;
        }
        if (pitch < shape[1] * (Py_ssize_t)esize) {
            PyErr_Format(PyExc_ValueError,
                         "TextureObject(): pitch=%zd bytes is less than a "
                         "row of %zd elements of %zu bytes",
                         pitch, shape[1], esize);
            return -1;
        }
        need = (size_t)pitch * (size_t)(shape[0] - 1) + (size_t)shape[1] * esize;
        res->resType = CU_RESOURCE_TYPE_PITCH2D;
        res->res.pitch2D.devPtr = ptr;
        res->res.pitch2D.format = (CUarray_format)format;
        res->res.pitch2D.numChannels = nch;
        res->res.pitch2D.width = (size_t)shape[1];
        res->res.pitch2D.height = (size_t)shape[0];
        res->res.pitch2D.pitchInBytes = (size_t)pitch;
    } else {
        if (pitch_obj != Py_None) {
            PyErr_SetString(PyExc_ValueError, "TextureObject(): pitch= applies to 2-D "
                                              "(pitched) memory; give shape=(height, width) too");
            return -1;
        }
        if (ndim == 1) {
            if (shape[0] < 1) {
                PyErr_Format(PyExc_ValueError,
                             "TextureObject(): shape (%zd,) must be "
                             "positive",
                             shape[0]);
                return -1;
            }
            need = (size_t)shape[0] * esize;
        } else if (cap != (size_t)-1) {
            need = cap - cap % esize;
        } else {
            PyErr_SetString(PyExc_ValueError,
                            "TextureObject(): the size of memory at a raw "
                            "address is unknown; give shape=(n,) or (height, width)");
            return -1;
        }
        if (need == 0) {
            PyErr_SetString(PyExc_ValueError, "TextureObject(): the memory holds no element");
            return -1;
        }
        res->resType = CU_RESOURCE_TYPE_LINEAR;
        res->res.linear.devPtr = ptr;
        res->res.linear.format = (CUarray_format)format;
        res->res.linear.numChannels = nch;
        res->res.linear.sizeInBytes = need;
    }
    if (cap != (size_t)-1 && need > cap) {
        PyErr_Format(PyExc_ValueError,
                     "TextureObject(): the texture spans %zu bytes but the "
                     "memory holds %zu",
                     need, cap);
        return -1;
    }
    return 0;
}

/* The device's texture alignment rules, checked before the driver's terse
 * CUDA_ERROR_INVALID_VALUE. */
static int
check_alignment(pygpu_state *st, pygpu_Context *ctx, const CUDA_RESOURCE_DESC *res)
{
    CUdevice dev = ((pygpu_Device *)ctx->device)->handle;
    int align = 0, pitch_align = 0;
    CUdeviceptr p =
        res->resType == CU_RESOURCE_TYPE_LINEAR ? res->res.linear.devPtr : res->res.pitch2D.devPtr;
    CUresult rc = cu.cuDeviceGetAttribute(&align, CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT, dev);
    if (rc == CUDA_SUCCESS)
        rc =
            cu.cuDeviceGetAttribute(&pitch_align, CU_DEVICE_ATTRIBUTE_TEXTURE_PITCH_ALIGNMENT, dev);
    if (rc != CUDA_SUCCESS) {
        pygpu_cuda_error(st, rc, "cuDeviceGetAttribute");
        return -1;
    }
    if (align > 0 && p % (CUdeviceptr)align) {
        PyErr_Format(PyExc_ValueError,
                     "TextureObject(): the memory's address %p is not "
                     "aligned to the device's texture alignment of %d bytes (the start of an "
                     "allocation is; an offset into one may not be)",
                     (void *)(uintptr_t)p, align);
        return -1;
    }
    if (res->resType == CU_RESOURCE_TYPE_PITCH2D && pitch_align > 0
        && res->res.pitch2D.pitchInBytes % (size_t)pitch_align) {
        PyErr_Format(PyExc_ValueError,
                     "TextureObject(): pitch=%zu bytes is not a multiple "
                     "of the device's texture pitch alignment of %d bytes (mem_alloc_pitch "
                     "gives one that is)",
                     res->res.pitch2D.pitchInBytes, pitch_align);
        return -1;
    }
    return 0;
}

static pygpu_TexObject *
texobj_alloc(PyTypeObject *type, int surface)
{
    pygpu_TexObject *self = (pygpu_TexObject *)type->tp_alloc(type, 0); /* tracked */
    if (self == NULL)
        return NULL;
    self->handle = 0;
    self->surface = surface;
    self->context = NULL;
    self->resource = NULL;
    self->array = NULL;
    self->hold = NULL;
    self->weakreflist = NULL;
    memset(&self->res, 0, sizeof self->res);
    memset(&self->tex, 0, sizeof self->tex);
    return self;
}

static int
is_integer_format(unsigned int f)
{
    return f != CU_AD_FORMAT_HALF && f != CU_AD_FORMAT_FLOAT;
}

static PyObject *
texobj_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    pygpu_state *st = pygpu_state_from_type(type);
    static char *kwlist[] = {"resource",
                             "address_mode",
                             "filter_mode",
                             "read_mode",
                             "normalized_coords",
                             "border_color",
                             "format",
                             "num_channels",
                             "shape",
                             "pitch",
                             NULL};
    PyObject *resource, *am_obj = NULL, *fm_obj = NULL, *rm_obj = NULL, *border = Py_None;
    PyObject *fmt_obj = Py_None, *nch_obj = Py_None, *shape_obj = Py_None, *pitch_obj = Py_None;
    int normalized = 0, filter = CU_TR_FILTER_MODE_POINT, read_mode = 0, i, ndims;
    int am[3] = {CU_TR_ADDRESS_MODE_CLAMP, CU_TR_ADDRESS_MODE_CLAMP, CU_TR_ADDRESS_MODE_CLAMP};
    unsigned int format;
    pygpu_TexObject *self = NULL;
    pygpu_Context *ctx;
    pygpu_scope s;
    CUtexObject h;
    CUresult rc;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O|OOOpOOOOO:TextureObject", kwlist, &resource,
                                     &am_obj, &fm_obj, &rm_obj, &normalized, &border, &fmt_obj,
                                     &nch_obj, &shape_obj, &pitch_obj))
        return NULL;
    if (am_obj != NULL && am_obj != Py_None) {
        if (PyLong_Check(am_obj)) {
            if (parse_enum(am_obj, 0, 3, &am[0], "TextureObject(): address_mode") < 0)
                return NULL;
            am[1] = am[2] = am[0];
        } else {
            PyObject *seq = PySequence_Fast(am_obj, "");
            if (seq == NULL) {
                PyErr_Format(PyExc_TypeError,
                             "TextureObject(): address_mode must be an "
                             "address_mode or a sequence of up to 3, not %.100s",
                             Py_TYPE(am_obj)->tp_name);
                return NULL;
            }
            if (PySequence_Fast_GET_SIZE(seq) < 1 || PySequence_Fast_GET_SIZE(seq) > 3) {
                PyErr_Format(PyExc_ValueError,
                             "TextureObject(): address_mode has %zd "
                             "entries; give one per dimension (1 to 3)",
                             PySequence_Fast_GET_SIZE(seq));
                Py_DECREF(seq);
                return NULL;
            }
            for (i = 0; i < PySequence_Fast_GET_SIZE(seq); i++) {
                char what[48];
                PyOS_snprintf(what, sizeof what, "TextureObject(): address_mode[%d]", i);
                if (parse_enum(PySequence_Fast_GET_ITEM(seq, i), 0, 3, &am[i], what) < 0) {
                    Py_DECREF(seq);
                    return NULL;
                }
            }
            Py_DECREF(seq);
        }
    }
    if (fm_obj != NULL && fm_obj != Py_None
        && parse_enum(fm_obj, 0, 1, &filter, "TextureObject(): filter_mode") < 0)
        return NULL;
    if (rm_obj != NULL && rm_obj != Py_None
        && parse_enum(rm_obj, 0, 1, &read_mode, "TextureObject(): read_mode") < 0)
        return NULL;
    if (!normalized) {
        for (i = 0; i < 3; i++) {
            if (am[i] == CU_TR_ADDRESS_MODE_WRAP || am[i] == CU_TR_ADDRESS_MODE_MIRROR) {
                PyErr_Format(PyExc_ValueError,
                             "TextureObject(): address_mode[%d] %s needs "
                             "normalized_coords=True (CUDA wraps and mirrors only normalized "
                             "coordinates)",
                             i, am[i] == CU_TR_ADDRESS_MODE_WRAP ? "WRAP" : "MIRROR");
                return NULL;
            }
        }
    }
    self = texobj_alloc(type, 0);
    if (self == NULL)
        return NULL;
    if (border != Py_None) {
        PyObject *seq = PySequence_Fast(border, "");
        if (seq == NULL || PySequence_Fast_GET_SIZE(seq) > 4) {
            Py_XDECREF(seq);
            PyErr_SetString(PyExc_TypeError, "TextureObject(): border_color must be a "
                                             "sequence of up to 4 floats");
            goto error;
        }
        for (i = 0; i < PySequence_Fast_GET_SIZE(seq); i++) {
            double v = PyFloat_AsDouble(PySequence_Fast_GET_ITEM(seq, i));
            if (v == -1.0 && PyErr_Occurred()) {
                Py_DECREF(seq);
                goto error;
            }
            self->tex.borderColor[i] = (float)v;
        }
        Py_DECREF(seq);
    }
    if (PyObject_TypeCheck(resource, st->ArrayType)) {
        pygpu_Array *a = (pygpu_Array *)resource;
        if (fmt_obj != Py_None || nch_obj != Py_None || shape_obj != Py_None
            || pitch_obj != Py_None) {
            PyErr_SetString(PyExc_ValueError,
                            "TextureObject(): format, num_channels, shape "
                            "and pitch describe linear memory; an Array has its own");
            goto error;
        }
        if (pygpu_array_check(st, a) < 0)
            goto error;
        self->res.resType = CU_RESOURCE_TYPE_ARRAY;
        self->res.res.array.hArray = a->handle;
        format = a->desc.Format;
        ndims = a->desc.Depth ? 3 : a->desc.Height ? 2 : 1;
        ctx = a->context;
    } else {
        if (linear_resource(st, resource, fmt_obj, nch_obj, shape_obj, pitch_obj, &self->res) < 0)
            goto error;
        if (self->res.resType == CU_RESOURCE_TYPE_LINEAR) {
            format = self->res.res.linear.format;
            ndims = 1;
            if (filter != CU_TR_FILTER_MODE_POINT || normalized) {
                PyErr_SetString(PyExc_ValueError,
                                "TextureObject(): linear (1-D) memory is "
                                "read with tex1Dfetch: POINT filtering and integer "
                                "coordinates only");
                goto error;
            }
        } else {
            format = self->res.res.pitch2D.format;
            ndims = 2;
        }
        if ((ctx = pygpu_current_context(st)) == NULL)
            goto error;
        if (check_alignment(st, ctx, &self->res) < 0)
            goto error;
    }
    (void)ndims;
    if (filter == CU_TR_FILTER_MODE_LINEAR && read_mode == 0 && is_integer_format(format)) {
        PyErr_SetString(PyExc_ValueError, "TextureObject(): LINEAR filtering of an integer "
                                          "format needs read_mode=read_mode.NORMALIZED_FLOAT");
        goto error;
    }
    for (i = 0; i < 3; i++)
        self->tex.addressMode[i] = (CUaddress_mode)am[i];
    self->tex.filterMode = (CUfilter_mode)filter;
    self->tex.flags = (read_mode == 0 && is_integer_format(format) ? CU_TRSF_READ_AS_INTEGER : 0)
                      | (normalized ? CU_TRSF_NORMALIZED_COORDINATES : 0);
    if (pygpu_scope_enter(st, ctx, &s) < 0)
        goto error;
    rc = cu.cuTexObjectCreate(&h, &self->res, &self->tex, NULL);
    pygpu_scope_exit(&s);
    if (rc != CUDA_SUCCESS) {
        pygpu_cuda_error(st, rc, "cuTexObjectCreate");
        goto error;
    }
    self->handle = (unsigned long long)h;
    self->context = (pygpu_Context *)Py_NewRef((PyObject *)ctx);
    self->resource = Py_NewRef(resource);
    if (self->res.resType == CU_RESOURCE_TYPE_ARRAY)
        self->array = (pygpu_Array *)Py_NewRef(resource);
    if ((self->hold = pygpu_hold_arg(st, resource, "a TextureObject")) == NULL)
        goto error;
    return (PyObject *)self;
error:
    Py_DECREF(self);
    return NULL;
}

static PyObject *
surfobj_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    pygpu_state *st = pygpu_state_from_type(type);
    static char *kwlist[] = {"array", NULL};
    PyObject *resource;
    pygpu_Array *a;
    pygpu_TexObject *self;
    pygpu_scope s;
    CUsurfObject h;
    CUresult rc;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O:SurfaceObject", kwlist, &resource))
        return NULL;
    if (!PyObject_TypeCheck(resource, st->ArrayType)) {
        PyErr_Format(PyExc_TypeError,
                     "SurfaceObject() takes an Array (made with "
                     "array3d_flags.SURFACE_LDST), not %.100s",
                     Py_TYPE(resource)->tp_name);
        return NULL;
    }
    a = (pygpu_Array *)resource;
    if (pygpu_array_check(st, a) < 0)
        return NULL;
    if (!(a->desc.Flags & CUDA_ARRAY3D_SURFACE_LDST)) {
        PyErr_SetString(PyExc_ValueError,
                        "SurfaceObject(): the Array was not made with "
                        "array3d_flags.SURFACE_LDST (set it in its ArrayDescriptor3D.flags)");
        return NULL;
    }
    self = texobj_alloc(type, 1);
    if (self == NULL)
        return NULL;
    self->res.resType = CU_RESOURCE_TYPE_ARRAY;
    self->res.res.array.hArray = a->handle;
    if (pygpu_scope_enter(st, a->context, &s) < 0) {
        Py_DECREF(self);
        return NULL;
    }
    rc = cu.cuSurfObjectCreate(&h, &self->res);
    pygpu_scope_exit(&s);
    if (rc != CUDA_SUCCESS) {
        Py_DECREF(self);
        return pygpu_cuda_error(st, rc, "cuSurfObjectCreate");
    }
    self->handle = (unsigned long long)h;
    self->context = (pygpu_Context *)Py_NewRef((PyObject *)a->context);
    self->resource = Py_NewRef(resource);
    self->array = (pygpu_Array *)Py_NewRef(resource);
    if ((self->hold = pygpu_hold_new(st, resource, "a SurfaceObject")) == NULL) {
        Py_DECREF(self);
        return NULL;
    }
    return (PyObject *)self;
}

static PyObject *
texobj_free(pygpu_TexObject *self, PyObject *unused)
{
    texobj_release(self);
    Py_RETURN_NONE;
}

static PyObject *
texobj_get_handle(pygpu_TexObject *self, void *c)
{
    unsigned long long h;
    if (pygpu_texobj_handle(PYGPU_STATE(self), (PyObject *)self, &h) < 0)
        return NULL;
    return PyLong_FromUnsignedLongLong(h);
}

static PyObject *
texobj_get_resource(pygpu_TexObject *self, void *c)
{
    return Py_NewRef(self->resource ? self->resource : Py_None);
}

static PyObject *
texobj_get_resource_type(pygpu_TexObject *self, void *c)
{
    return PyLong_FromLong((long)self->res.resType);
}

static PyObject *
texobj_get_address_mode(pygpu_TexObject *self, void *c)
{
    return Py_BuildValue("(iii)", (int)self->tex.addressMode[0], (int)self->tex.addressMode[1],
                         (int)self->tex.addressMode[2]);
}

static PyObject *
texobj_get_filter_mode(pygpu_TexObject *self, void *c)
{
    return PyLong_FromLong((long)self->tex.filterMode);
}

static PyObject *
texobj_get_flags(pygpu_TexObject *self, void *c)
{
    return PyLong_FromUnsignedLong(self->tex.flags);
}

static PyObject *
texobj_repr(pygpu_TexObject *self)
{
    return PyUnicode_FromFormat("<pygpu.driver.%s %s%llu>",
                                self->surface ? "SurfaceObject" : "TextureObject",
                                self->handle ? "handle=" : "freed ", self->handle);
}

static PyMethodDef texobj_methods[] = {
    {"free", (PyCFunction)texobj_free, METH_NOARGS,
     "free($self, /)\n--\n\nDestroy the object now (idempotent) and let go of its array."},
    {NULL},
};

static PyMethodDef surfobj_methods[] = {
    {"free", (PyCFunction)texobj_free, METH_NOARGS,
     "free($self, /)\n--\n\nDestroy the surface now (idempotent) and let go of its array."},
    {NULL},
};

static PyGetSetDef texobj_getset[] = {
    {"handle", (getter)texobj_get_handle, NULL,
     "The 64-bit handle (cudaTextureObject_t / cudaSurfaceObject_t).", NULL},
    {"resource", (getter)texobj_get_resource, NULL, "What the object reads.", NULL},
    {"resource_type", (getter)texobj_get_resource_type, NULL, "A resource_type.", NULL},
    {NULL},
};

static PyGetSetDef tex_getset[] = {
    {"handle", (getter)texobj_get_handle, NULL, "The 64-bit handle (cudaTextureObject_t).", NULL},
    {"resource", (getter)texobj_get_resource, NULL, "What the texture reads.", NULL},
    {"resource_type", (getter)texobj_get_resource_type, NULL,
     "A resource_type: ARRAY, LINEAR or PITCH2D.", NULL},
    {"address_mode", (getter)texobj_get_address_mode, NULL, "The address_mode of each dimension.",
     NULL},
    {"filter_mode", (getter)texobj_get_filter_mode, NULL, "The filter_mode.", NULL},
    {"flags", (getter)texobj_get_flags, NULL,
     "CU_TRSF_* flags: 1 read as integer, 2 normalized coordinates.", NULL},
    {NULL},
};

static PyMemberDef texobj_members[] = {
    {"__weaklistoffset__", T_PYSSIZET, offsetof(pygpu_TexObject, weakreflist), READONLY},
    {NULL},
};

static PyType_Slot tex_slots[] = {
    {Py_tp_new, texobj_new},
    {Py_tp_init, pygpu_init_made},
    {Py_tp_dealloc, texobj_dealloc},
    {Py_tp_traverse, texobj_traverse},
    {Py_tp_clear, texobj_clear},
    {Py_tp_repr, texobj_repr},
    {Py_tp_methods, texobj_methods},
    {Py_tp_getset, tex_getset},
    {Py_tp_members, texobj_members},
    {Py_tp_doc, "TextureObject(resource, address_mode=address_mode.CLAMP, "
                "filter_mode=filter_mode.POINT, read_mode=read_mode.ELEMENT_TYPE, "
                "normalized_coords=False, border_color=None, format=None, "
                "num_channels=None, shape=None, pitch=None)\n--\n\n"
                "A texture object (cuTexObjectCreate) over an Array, or over linear "
                "(1-D) or pitched (2-D) device memory; a kernel argument of type "
                "cudaTextureObject_t. It keeps its resource alive."},
    {0, NULL},
};

static PyType_Slot surf_slots[] = {
    {Py_tp_new, surfobj_new},
    {Py_tp_init, pygpu_init_made},
    {Py_tp_dealloc, texobj_dealloc},
    {Py_tp_traverse, texobj_traverse},
    {Py_tp_clear, texobj_clear},
    {Py_tp_repr, texobj_repr},
    {Py_tp_methods, surfobj_methods},
    {Py_tp_getset, texobj_getset},
    {Py_tp_members, texobj_members},
    {Py_tp_doc, "SurfaceObject(array)\n--\n\nA surface object (cuSurfObjectCreate) over an "
                "Array made with array3d_flags.SURFACE_LDST; a kernel argument of type "
                "cudaSurfaceObject_t. It keeps the array alive."},
    {0, NULL},
};

static PyType_Spec tex_spec = {"pygpu.driver.TextureObject", sizeof(pygpu_TexObject), 0,
                               Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE | Py_TPFLAGS_HAVE_GC
                                   | Py_TPFLAGS_BASETYPE,
                               tex_slots};

static PyType_Spec surf_spec = {"pygpu.driver.SurfaceObject", sizeof(pygpu_TexObject), 0,
                                Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE | Py_TPFLAGS_HAVE_GC
                                    | Py_TPFLAGS_BASETYPE,
                                surf_slots};

int
pygpu_texobj_setup(PyObject *m, pygpu_state *st)
{
    if (pygpu_add_type(m, &tex_spec, &st->TextureObjectType) < 0
        || pygpu_add_type(m, &surf_spec, &st->SurfaceObjectType) < 0)
        return -1;
    return 0;
}
