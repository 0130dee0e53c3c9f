/* TensorMap: a TMA descriptor (CUtensorMap, 128 bytes) encoded on the host
 * by cuTensorMapEncodeTiled or cuTensorMapEncodeIm2col.
 *
 * Shapes, strides and boxes are given as NumPy gives them (outermost
 * dimension first, strides in bytes) and reversed for the driver, whose
 * dimension 0 is the innermost.  Encoding needs the driver loaded but no
 * context.  The map holds a strong reference to the tensor whose memory it
 * describes and a hold on that memory (hold.c): a free() of the allocation
 * while the map lives is deferred until it goes; args.c copies its 128 bytes into a `const __grid_constant__
 * CUtensorMap` kernel parameter.
 */
#include "pygpu.h"
#include "core/pygpu_numpy.h"

#define MAX_RANK 5

typedef struct {
    PyObject_HEAD unsigned char bytes[sizeof(CUtensorMap)]; /* the encoded descriptor */
    PyObject *tensor; /* strong ref: the memory it describes */
    PyObject *hold;   /* strong: the hold on that memory (hold.c), or None */
    int rank, im2col;
    int data_type;
    CUdeviceptr address;
    Py_ssize_t shape[MAX_RANK], strides[MAX_RANK], box[MAX_RANK];
} pygpu_TensorMap;

const unsigned char *
pygpu_tensormap_bytes(PyObject *obj)
{
    return ((pygpu_TensorMap *)obj)->bytes;
}

static int
tmap_traverse(pygpu_TensorMap *self, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE(self));
    Py_VISIT(self->tensor);
    return 0;
}

static int
tmap_clear(pygpu_TensorMap *self)
{
    Py_CLEAR(self->hold);
    Py_CLEAR(self->tensor);
    return 0;
}

static void
tmap_dealloc(pygpu_TensorMap *self)
{
    PyTypeObject *tp = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    Py_CLEAR(self->hold);
    Py_CLEAR(self->tensor);
    tp->tp_free((PyObject *)self);
    Py_DECREF(tp);
}

/* element size of a CUtensorMapDataType (0: not supported here) */
static size_t
data_type_size(int t)
{
    static const size_t sizes[] = {1, 2, 4, 4, 8, 8, 2, 4, 8, 2, 4, 4, 4};
    return t >= 0 && t < (int)(sizeof sizes / sizeof sizes[0]) ? sizes[t] : 0;
}

/* ml_dtypes' bfloat16 (as JAX and PyTorch's NumPy bridge give it) */
static int
is_bfloat16(PyArray_Descr *d)
{
    PyObject *name = PyObject_GetAttrString((PyObject *)d, "name");
    int r = name != NULL && PyUnicode_Check(name)
            && PyUnicode_CompareWithASCIIString(name, "bfloat16") == 0;
    Py_XDECREF(name);
    PyErr_Clear();
    return r;
}

static int
dtype_data_type(PyObject *dtype, int *out)
{
    PyArray_Descr *d = NULL;
    int r = 0;
    if (!PyArray_DescrConverter(dtype, &d))
        return -1;
    switch (d->type_num) {
    case NPY_UINT8: *out = CU_TENSOR_MAP_DATA_TYPE_UINT8; break;
    case NPY_UINT16: *out = CU_TENSOR_MAP_DATA_TYPE_UINT16; break;
    case NPY_HALF: *out = CU_TENSOR_MAP_DATA_TYPE_FLOAT16; break;
    case NPY_FLOAT32: *out = CU_TENSOR_MAP_DATA_TYPE_FLOAT32; break;
    case NPY_FLOAT64: *out = CU_TENSOR_MAP_DATA_TYPE_FLOAT64; break;
    default:
        if (PyDataType_ELSIZE(d) == 4 && PyTypeNum_ISUNSIGNED(d->type_num))
            *out = CU_TENSOR_MAP_DATA_TYPE_UINT32;
        else if (PyDataType_ELSIZE(d) == 4 && PyTypeNum_ISSIGNED(d->type_num))
            *out = CU_TENSOR_MAP_DATA_TYPE_INT32;
        else if (PyDataType_ELSIZE(d) == 8 && PyTypeNum_ISUNSIGNED(d->type_num))
            *out = CU_TENSOR_MAP_DATA_TYPE_UINT64;
        else if (PyDataType_ELSIZE(d) == 8 && PyTypeNum_ISSIGNED(d->type_num))
            *out = CU_TENSOR_MAP_DATA_TYPE_INT64;
        else if (PyDataType_ELSIZE(d) == 2 && is_bfloat16(d))
            *out = CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
        else {
            PyErr_Format(PyExc_TypeError,
                         "TensorMap: no tensor_map_data_type for dtype %S; "
                         "pass data_type= (e.g. tensor_map_data_type.UINT8 to move the bytes "
                         "of int8 data)",
                         (PyObject *)d);
            r = -1;
        }
    }
    Py_DECREF(d);
    return r;
}

/* a sequence of ints, at most maxn */
static int
int_seq(PyObject *obj, Py_ssize_t *vals, int *n, int maxn, const char *what)
{
    PyObject *seq;
    Py_ssize_t i, len;
    if (PyLong_Check(obj)) {
        PyErr_Format(PyExc_TypeError, "TensorMap: %s must be a sequence of ints, not an int", what);
        return -1;
    }
    seq = PySequence_Fast(obj, "");
    if (seq == NULL) {
        PyErr_Format(PyExc_TypeError, "TensorMap: %s must be a sequence of ints, not %.100s", what,
                     Py_TYPE(obj)->tp_name);
        return -1;
    }
    len = PySequence_Fast_GET_SIZE(seq);
    if (len > maxn) {
        Py_DECREF(seq);
        PyErr_Format(PyExc_ValueError, "TensorMap: %s has %zd entries; at most %d", what, len,
                     maxn);
        return -1;
    }
    for (i = 0; i < len; i++) {
        vals[i] = PyNumber_AsSsize_t(PySequence_Fast_GET_ITEM(seq, i), PyExc_OverflowError);
        if (vals[i] == -1 && PyErr_Occurred()) {
            Py_DECREF(seq);
            if (PyErr_ExceptionMatches(PyExc_TypeError)) {
                PyErr_Clear();
                PyErr_Format(PyExc_TypeError, "TensorMap: %s[%zd] must be an int", what, i);
            }
            return -1;
        }
    }
    Py_DECREF(seq);
    *n = (int)len;
    return 0;
}

static int
attr_seq(PyObject *obj, const char *name, Py_ssize_t *vals, int *n, const char *what)
{
    PyObject *a = PyObject_GetAttrString(obj, name);
    int r;
    if (a == NULL) {
        if (!PyErr_ExceptionMatches(PyExc_AttributeError))
            return -1;
        PyErr_Clear();
        *n = -1;
        return 0;
    }
    r = a == Py_None ? (*n = -1, 0) : int_seq(a, vals, n, MAX_RANK, what);
    Py_DECREF(a);
    return r;
}

typedef struct {
    PyObject *tensor, *shape, *strides, *dtype, *data_type, *element_strides;
    int interleave, swizzle, l2, oob;
} tmap_common;

/* Fill the map's geometry from the tensor and keywords, checked. */
static int
tmap_geometry(pygpu_state *st, pygpu_TensorMap *m, tmap_common *a, int min_rank, const char *kind)
{
    size_t cap, esize, span;
    int n, i;
    if (pygpu_get_device_ptr(st, a->tensor, &m->address, &cap, 0) < 0)
        return -1;
    /* the shape */
    if (a->shape != Py_None) {
        if (int_seq(a->shape, m->shape, &m->rank, MAX_RANK, "shape") < 0)
            return -1;
    } else if (attr_seq(a->tensor, "shape", m->shape, &m->rank, "the tensor's shape") < 0) {
        return -1;
    } else if (m->rank < 0) {
        PyErr_Format(PyExc_TypeError,
                     "TensorMap: a %.100s has no shape; pass shape= and "
                     "dtype=",
                     Py_TYPE(a->tensor)->tp_name);
        return -1;
    }
    if (m->rank < min_rank || m->rank > MAX_RANK) {
        PyErr_Format(PyExc_ValueError,
                     "TensorMap: %s maps need rank %d to %d; the shape %s "
                     "%d dimension%s",
                     kind, min_rank, MAX_RANK, a->shape != Py_None ? "has" : "of the tensor has",
                     m->rank, m->rank == 1 ? "" : "s");
        return -1;
    }
    for (i = 0; i < m->rank; i++) {
        if (m->shape[i] < 1 || (unsigned long long)m->shape[i] > (1ull << 32)) {
            PyErr_Format(PyExc_ValueError, "TensorMap: shape[%d]=%zd must be 1 to 2**32", i,
                         m->shape[i]);
            return -1;
        }
    }
    /* the element type */
    if (a->data_type != Py_None) {
        if (pygpu_parse_int(a->data_type, &m->data_type, "TensorMap: data_type") < 0)
            return -1;
        if (data_type_size(m->data_type) == 0) {
            PyErr_Format(PyExc_ValueError,
                         "TensorMap: data_type=%R is not a "
                         "tensor_map_data_type from UINT8 to TFLOAT32_FTZ",
                         a->data_type);
            return -1;
        }
    } else {
        PyObject *dt = a->dtype;
        int r;
        if (dt == Py_None) {
            dt = PyObject_GetAttrString(a->tensor, "dtype");
            if (dt == NULL) {
                if (!PyErr_ExceptionMatches(PyExc_AttributeError))
                    return -1;
                PyErr_Clear();
                PyErr_Format(PyExc_TypeError,
                             "TensorMap: a %.100s has no dtype; pass "
                             "dtype= or data_type=",
                             Py_TYPE(a->tensor)->tp_name);
                return -1;
            }
        } else {
            Py_INCREF(dt);
        }
        r = dtype_data_type(dt, &m->data_type);
        Py_DECREF(dt);
        if (r < 0)
            return -1;
    }
    esize = data_type_size(m->data_type);
    /* the strides */
    if (a->strides != Py_None) {
        if (int_seq(a->strides, m->strides, &n, MAX_RANK, "strides") < 0)
            return -1;
    } else if (a->shape == Py_None) {
        if (attr_seq(a->tensor, "strides", m->strides, &n, "the tensor's strides") < 0)
            return -1;
    } else {
        n = -1;
    }
    if (n < 0) { /* C-contiguous */
        Py_ssize_t s = (Py_ssize_t)esize;
        for (i = m->rank - 1; i >= 0; i--) {
            m->strides[i] = s;
            s *= m->shape[i];
        }
    } else if (n != m->rank) {
        PyErr_Format(PyExc_ValueError, "TensorMap: strides has %d entries; the shape has %d", n,
                     m->rank);
        return -1;
    }
    if ((size_t)m->strides[m->rank - 1] != esize) {
        PyErr_Format(PyExc_ValueError,
                     "TensorMap: the innermost dimension must be "
                     "contiguous: strides[%d]=%zd but the element is %zu bytes",
                     m->rank - 1, m->strides[m->rank - 1], esize);
        return -1;
    }
    span = esize;
    for (i = 0; i < m->rank - 1; i++) {
        if (m->strides[i] <= 0 || m->strides[i] % 16
            || (unsigned long long)m->strides[i] >= (1ull << 40)) {
            PyErr_Format(PyExc_ValueError,
                         "TensorMap: strides[%d]=%zd bytes must be a "
                         "positive multiple of 16 below 2**40 (TMA's rule)",
                         i, m->strides[i]);
            return -1;
        }
        span += (size_t)(m->shape[i] - 1) * (size_t)m->strides[i];
    }
    span += (size_t)(m->shape[m->rank - 1] - 1) * esize;
    if (cap != (size_t)-1 && span > cap) {
        PyErr_Format(PyExc_ValueError,
                     "TensorMap: the tensor spans %zu bytes but its memory "
                     "holds %zu",
                     span, cap);
        return -1;
    }
    if (m->address % (a->interleave == CU_TENSOR_MAP_INTERLEAVE_32B ? 32 : 16)) {
        PyErr_Format(PyExc_ValueError,
                     "TensorMap: the tensor's address %p is not "
                     "%d-byte aligned (TMA's rule)",
                     (void *)(uintptr_t)m->address,
                     a->interleave == CU_TENSOR_MAP_INTERLEAVE_32B ? 32 : 16);
        return -1;
    }
    return 0;
}

static int
enum_kw(PyObject *obj, int hi, int *out, const char *what)
{
    if (obj == NULL || obj == Py_None)
        return 0;
    if (pygpu_parse_int(obj, out, what) < 0)
        return -1;
    if (*out < 0 || *out > hi) {
        PyErr_Format(PyExc_ValueError, "%s=%R is out of range (0 to %d)", what, obj, hi);
        return -1;
    }
    return 0;
}

static int
parse_common(tmap_common *a, PyObject *il, PyObject *sw, PyObject *l2, PyObject *oob)
{
    a->interleave = a->swizzle = a->l2 = a->oob = 0;
    return enum_kw(il, CU_TENSOR_MAP_INTERLEAVE_32B, &a->interleave, "TensorMap: interleave")
                   || enum_kw(sw, CU_TENSOR_MAP_SWIZZLE_128B_ATOM_64B, &a->swizzle,
                              "TensorMap: swizzle")
                   || enum_kw(l2, CU_TENSOR_MAP_L2_PROMOTION_L2_256B, &a->l2,
                              "TensorMap: l2_promotion")
                   || enum_kw(oob, CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA, &a->oob,
                              "TensorMap: oob_fill")
               ? -1
               : 0;
}

static int
element_strides(tmap_common *a, int rank, cuuint32_t *es)
{
    Py_ssize_t v[MAX_RANK];
    int n, i;
    for (i = 0; i < rank; i++)
        es[i] = 1;
    if (a->element_strides == Py_None)
        return 0;
    if (int_seq(a->element_strides, v, &n, MAX_RANK, "element_strides") < 0)
        return -1;
    if (n != rank) {
        PyErr_Format(PyExc_ValueError,
                     "TensorMap: element_strides has %d entries; the "
                     "tensor has rank %d",
                     n, rank);
        return -1;
    }
    for (i = 0; i < rank; i++) {
        if (v[i] < 1 || v[i] > 8) {
            PyErr_Format(PyExc_ValueError, "TensorMap: element_strides[%d]=%zd must be 1 to 8", i,
                         v[i]);
            return -1;
        }
        es[rank - 1 - i] = (cuuint32_t)v[i];
    }
    return 0;
}

/* the driver's order: dimension 0 innermost */
static void
driver_dims(const pygpu_TensorMap *m, cuuint64_t *dims, cuuint64_t *strides)
{
    int i, r = m->rank;
    for (i = 0; i < r; i++)
        dims[r - 1 - i] = (cuuint64_t)m->shape[i];
    for (i = 0; i < r - 1; i++) /* strides of dimensions 1..r-1 */
        strides[r - 2 - i] = (cuuint64_t)m->strides[i];
}

static pygpu_TensorMap *
tmap_alloc(PyTypeObject *type)
{
    pygpu_TensorMap *m = (pygpu_TensorMap *)type->tp_alloc(type, 0); /* tracked */
    if (m == NULL)
        return NULL;
    memset(m->bytes, 0, sizeof m->bytes);
    m->tensor = NULL;
    m->hold = NULL;
    m->rank = m->im2col = m->data_type = 0;
    m->address = 0;
    memset(m->shape, 0, sizeof m->shape);
    memset(m->strides, 0, sizeof m->strides);
    memset(m->box, 0, sizeof m->box);
    return m;
}

static PyObject *
tmap_finish(pygpu_state *st, pygpu_TensorMap *m, tmap_common *a, CUresult rc,
            const CUtensorMap *enc, const char *routine)
{
    if (rc != CUDA_SUCCESS) {
        Py_DECREF(m);
        return pygpu_cuda_error_ex(st, rc, routine,
                                   "the driver refused the tensor map's "
                                   "shape, strides, box, alignment or swizzle");
    }
    memcpy(m->bytes, enc, sizeof m->bytes);
    m->tensor = Py_NewRef(a->tensor);
    if ((m->hold = pygpu_hold_arg(st, a->tensor, "a TensorMap")) == NULL) {
        Py_DECREF(m);
        return NULL;
    }
    return (PyObject *)m;
}

static PyObject *
tmap_tiled_impl(PyTypeObject *type, PyObject *args, PyObject *kwds, const char *format)
{
    pygpu_state *st = pygpu_state_from_type(type);
    static char *kwlist[] = {"tensor",  "box",          "shape",           "strides",
                             "dtype",   "data_type",    "element_strides", "interleave",
                             "swizzle", "l2_promotion", "oob_fill",        NULL};
    tmap_common a = {NULL, Py_None, Py_None, Py_None, Py_None, Py_None, 0, 0, 0, 0};
    PyObject *box_obj, *il = NULL, *sw = NULL, *l2 = NULL, *oob = NULL;
    pygpu_TensorMap *m;
    cuuint64_t dims[MAX_RANK], strides[MAX_RANK];
    cuuint32_t box[MAX_RANK], es[MAX_RANK];
    CUtensorMap enc;
    CUresult rc;
    int n, i;
    size_t inner;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, format, kwlist, &a.tensor, &box_obj, &a.shape,
                                     &a.strides, &a.dtype, &a.data_type, &a.element_strides, &il,
                                     &sw, &l2, &oob))
        return NULL;
    if (parse_common(&a, il, sw, l2, oob) < 0)
        return NULL;
    if ((m = tmap_alloc(type)) == NULL)
        return NULL;
    if (tmap_geometry(st, m, &a, 1, "tiled") < 0
        || int_seq(box_obj, m->box, &n, MAX_RANK, "box") < 0
        || element_strides(&a, m->rank, es) < 0)
        goto error;
    if (n != m->rank) {
        PyErr_Format(PyExc_ValueError, "TensorMap: box has %d entries; the tensor has rank %d", n,
                     m->rank);
        goto error;
    }
    for (i = 0; i < m->rank; i++) {
        if (m->box[i] < 1 || m->box[i] > 256) {
            PyErr_Format(PyExc_ValueError, "TensorMap: box[%d]=%zd must be 1 to 256", i, m->box[i]);
            goto error;
        }
        box[m->rank - 1 - i] = (cuuint32_t)m->box[i];
    }
    inner = (size_t)m->box[m->rank - 1] * data_type_size(m->data_type);
    if (a.interleave == CU_TENSOR_MAP_INTERLEAVE_NONE && inner % 16) {
        PyErr_Format(PyExc_ValueError,
                     "TensorMap: the box's innermost row is %zu bytes "
                     "(box[%d]=%zd elements); TMA needs a multiple of 16",
                     inner, m->rank - 1, m->box[m->rank - 1]);
        goto error;
    }
    if (a.interleave == CU_TENSOR_MAP_INTERLEAVE_NONE && a.swizzle != CU_TENSOR_MAP_SWIZZLE_NONE) {
        size_t span = a.swizzle == CU_TENSOR_MAP_SWIZZLE_32B   ? 32
                      : a.swizzle == CU_TENSOR_MAP_SWIZZLE_64B ? 64
                                                               : 128;
        if (inner > span) {
            PyErr_Format(PyExc_ValueError,
                         "TensorMap: the box's innermost row is %zu bytes, "
                         "more than the swizzle's span of %zu",
                         inner, span);
            goto error;
        }
    }
    driver_dims(m, dims, strides);
    if (pygpu_ensure_driver(st) < 0)
        goto error;
    if (cu.cuTensorMapEncodeTiled == NULL) {
        PyErr_SetString(st->LogicError, "TensorMap needs a CUDA 12.0+ driver "
                                        "(cuTensorMapEncodeTiled)");
        goto error;
    }
    rc = cu.cuTensorMapEncodeTiled(
        &enc, (CUtensorMapDataType)m->data_type, (cuuint32_t)m->rank, (void *)(uintptr_t)m->address,
        dims, strides, box, es, (CUtensorMapInterleave)a.interleave, (CUtensorMapSwizzle)a.swizzle,
        (CUtensorMapL2promotion)a.l2, (CUtensorMapFloatOOBfill)a.oob);
    return tmap_finish(st, m, &a, rc, &enc, "cuTensorMapEncodeTiled");
error:
    Py_DECREF(m);
    return NULL;
}

static PyObject *
tmap_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    return tmap_tiled_impl(type, args, kwds, "OO|OOOOOOOOO:TensorMap");
}

static PyObject *
tmap_tiled(PyObject *cls, PyObject *args, PyObject *kwds)
{
    return tmap_tiled_impl((PyTypeObject *)cls, args, kwds, "OO|OOOOOOOOO:tiled");
}

static PyObject *
tmap_im2col(PyObject *cls, PyObject *args, PyObject *kwds)
{
    PyTypeObject *type = (PyTypeObject *)cls;
    pygpu_state *st = pygpu_state_from_type(type);
    static char *kwlist[] = {
        "tensor",     "lower_corner", "upper_corner", "channels_per_pixel", "pixels_per_column",
        "shape",      "strides",      "dtype",        "data_type",          "element_strides",
        "interleave", "swizzle",      "l2_promotion", "oob_fill",           NULL};
    tmap_common a = {NULL, Py_None, Py_None, Py_None, Py_None, Py_None, 0, 0, 0, 0};
    PyObject *lo_obj, *hi_obj, *il = NULL, *sw = NULL, *l2 = NULL, *oob = NULL;
    unsigned int cpp, ppc;
    pygpu_TensorMap *m;
    cuuint64_t dims[MAX_RANK], strides[MAX_RANK];
    cuuint32_t es[MAX_RANK];
    Py_ssize_t lo[MAX_RANK], hi[MAX_RANK];
    int lower[MAX_RANK], upper[MAX_RANK], nlo, nhi, i, r;
    CUtensorMap enc;
    CUresult rc;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOOII|OOOOOOOOO:im2col", kwlist, &a.tensor,
                                     &lo_obj, &hi_obj, &cpp, &ppc, &a.shape, &a.strides, &a.dtype,
                                     &a.data_type, &a.element_strides, &il, &sw, &l2, &oob))
        return NULL;
    if (parse_common(&a, il, sw, l2, oob) < 0)
        return NULL;
    if ((m = tmap_alloc(type)) == NULL)
        return NULL;
    m->im2col = 1;
    if (tmap_geometry(st, m, &a, 3, "im2col") < 0
        || int_seq(lo_obj, lo, &nlo, MAX_RANK, "lower_corner") < 0
        || int_seq(hi_obj, hi, &nhi, MAX_RANK, "upper_corner") < 0
        || element_strides(&a, m->rank, es) < 0)
        goto error;
    r = m->rank;
    if (nlo != r - 2 || nhi != r - 2) {
        PyErr_Format(PyExc_ValueError,
                     "TensorMap.im2col: lower_corner and upper_corner need "
                     "%d entries each (the spatial dimensions of a rank-%d tensor), got %d "
                     "and %d",
                     r - 2, r, nlo, nhi);
        goto error;
    }
    for (i = 0; i < r - 2; i++) {
        /* the spatial dimensions are the middle ones: driver order reversed */
        lower[r - 3 - i] = (int)lo[i];
        upper[r - 3 - i] = (int)hi[i];
        if (lo[i] < -32768 || lo[i] > 32767 || hi[i] < -32768 || hi[i] > 32767) {
            PyErr_Format(PyExc_ValueError, "TensorMap.im2col: corner %d is out of range", i);
            goto error;
        }
    }
    if (cpp < 1 || cpp > 256 || ppc < 1 || ppc > 1024) {
        PyErr_Format(PyExc_ValueError,
                     "TensorMap.im2col: channels_per_pixel=%u must be 1 to "
                     "256 and pixels_per_column=%u 1 to 1024",
                     cpp, ppc);
        goto error;
    }
    driver_dims(m, dims, strides);
    if (pygpu_ensure_driver(st) < 0)
        goto error;
    if (cu.cuTensorMapEncodeIm2col == NULL) {
        PyErr_SetString(st->LogicError, "TensorMap.im2col needs a CUDA 12.0+ driver "
                                        "(cuTensorMapEncodeIm2col)");
        goto error;
    }
    rc = cu.cuTensorMapEncodeIm2col(&enc, (CUtensorMapDataType)m->data_type, (cuuint32_t)r,
                                    (void *)(uintptr_t)m->address, dims, strides, lower, upper, cpp,
                                    ppc, es, (CUtensorMapInterleave)a.interleave,
                                    (CUtensorMapSwizzle)a.swizzle, (CUtensorMapL2promotion)a.l2,
                                    (CUtensorMapFloatOOBfill)a.oob);
    return tmap_finish(st, m, &a, rc, &enc, "cuTensorMapEncodeIm2col");
error:
    Py_DECREF(m);
    return NULL;
}

static PyObject *
tmap_bytes(pygpu_TensorMap *self, PyObject *unused)
{
    return PyBytes_FromStringAndSize((const char *)self->bytes, sizeof self->bytes);
}

static PyObject *
tuple_of(const Py_ssize_t *v, int n)
{
    PyObject *t = PyTuple_New(n);
    int i;
    if (t == NULL)
        return NULL;
    for (i = 0; i < n; i++) {
        PyObject *x = PyLong_FromSsize_t(v[i]);
        if (x == NULL) {
            Py_DECREF(t);
            return NULL;
        }
        PyTuple_SET_ITEM(t, i, x);
    }
    return t;
}

static PyObject *
tmap_get_shape(pygpu_TensorMap *self, void *c)
{
    return tuple_of(self->shape, self->rank);
}
static PyObject *
tmap_get_strides(pygpu_TensorMap *self, void *c)
{
    return tuple_of(self->strides, self->rank);
}
static PyObject *
tmap_get_box(pygpu_TensorMap *self, void *c)
{
    if (self->im2col)
        Py_RETURN_NONE;
    return tuple_of(self->box, self->rank);
}
static PyObject *
tmap_get_tensor(pygpu_TensorMap *self, void *c)
{
    return Py_NewRef(self->tensor ? self->tensor : Py_None);
}
static PyObject *
tmap_get_data_type(pygpu_TensorMap *self, void *c)
{
    return PyLong_FromLong(self->data_type);
}

#define CF(f) (PyCFunction)(void (*)(void))(f)
static PyMethodDef tmap_methods[] = {
    {"tiled", CF(tmap_tiled), METH_VARARGS | METH_KEYWORDS | METH_CLASS,
     "tiled($type, /, tensor, box, shape=None, strides=None, dtype=None, data_type=None, "
     "element_strides=None, interleave=0, swizzle=0, l2_promotion=0, oob_fill=0)\n--\n\n"
     "The same as TensorMap(...): a tiled map (cuTensorMapEncodeTiled)."},
    {"im2col", CF(tmap_im2col), METH_VARARGS | METH_KEYWORDS | METH_CLASS,
     "im2col($type, /, tensor, lower_corner, upper_corner, channels_per_pixel, "
     "pixels_per_column, shape=None, strides=None, dtype=None, data_type=None, "
     "element_strides=None, interleave=0, swizzle=0, l2_promotion=0, oob_fill=0)\n--\n\n"
     "An im2col map (cuTensorMapEncodeIm2col) of a rank 3-5 tensor in NHWC-like order "
     "(outermost first); the corners give the spatial dimensions' bounding box offsets."},
    {"__bytes__", (PyCFunction)tmap_bytes, METH_NOARGS,
     "__bytes__($self, /)\n--\n\nThe 128 encoded bytes."},
    {NULL},
};

static PyGetSetDef tmap_getset[] = {
    {"shape", (getter)tmap_get_shape, NULL, "The tensor's shape, outermost first.", NULL},
    {"strides", (getter)tmap_get_strides, NULL, "The tensor's strides in bytes.", NULL},
    {"box", (getter)tmap_get_box, NULL, "The box (tile) shape, outermost first.", NULL},
    {"tensor", (getter)tmap_get_tensor, NULL, "The memory the map describes.", NULL},
    {"data_type", (getter)tmap_get_data_type, NULL, "A tensor_map_data_type.", NULL},
    {NULL},
};

static PyType_Slot tmap_slots[] = {
    {Py_tp_new, tmap_new},
    {Py_tp_init, pygpu_init_made},
    {Py_tp_dealloc, tmap_dealloc},
    {Py_tp_traverse, tmap_traverse},
    {Py_tp_clear, tmap_clear},
    {Py_tp_methods, tmap_methods},
    {Py_tp_getset, tmap_getset},
    {Py_tp_doc, "TensorMap(tensor, box, shape=None, strides=None, dtype=None, "
                "data_type=None, element_strides=None, interleave=0, swizzle=0, "
                "l2_promotion=0, oob_fill=0)\n--\n\n"
                "A tiled TMA descriptor (cuTensorMapEncodeTiled) of device memory: a "
                "DeviceAllocation (with shape= and dtype=) or a GPU array. Shapes, strides "
                "(bytes) and the box are outermost first, as NumPy's. A kernel parameter "
                "declared `const __grid_constant__ CUtensorMap` takes it as it is."},
    {0, NULL},
};

static PyType_Spec tmap_spec = {"pygpu.driver.TensorMap", sizeof(pygpu_TensorMap), 0,
                                Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE | Py_TPFLAGS_HAVE_GC
                                    | Py_TPFLAGS_BASETYPE,
                                tmap_slots};

int
pygpu_tensormap_setup(PyObject *m, pygpu_state *st)
{
    return pygpu_add_type(m, &tmap_spec, &st->TensorMapType);
}
