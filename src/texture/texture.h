/* texture/: CUDA arrays, texture and surface objects, tensor maps.
 * Included by pygpu.h. */
#ifndef PYGPU_TEXTURE_H
#define PYGPU_TEXTURE_H

/* ---- CUDA arrays, texture and surface objects, tensor maps
 * (cuarray.c, texobj.c, tensormap.c) ---- */

typedef struct {
    PyObject_HEAD CUarray handle; /* owned: cuArrayDestroy in array_release */
    pygpu_Context *context;       /* strong ref */
    CUDA_ARRAY3D_DESCRIPTOR desc; /* as created (Depth 0 for cuArrayCreate) */
    int is3d;                     /* made by cuArray3DCreate */
    int freed;                    /* free() ran: no new use starts (handle may wait) */
    struct pygpu_hold *holds;     /* owned list (hold.c): texture/surface objects over it;
                                  free() is deferred until the last one goes */
    PyObject *weakreflist;
    int busy;         /* driver calls using the array with the GIL released */
    int free_pending; /* free() came while busy: the last holder destroys */
} pygpu_Array;

/* The bytes one element of an array format takes (0: not a plain format). */
size_t pygpu_array_format_size(unsigned int format);
/* LogicError when the Array was freed or its context detached. */
int pygpu_array_check(pygpu_state *st, pygpu_Array *a);
/* Hold an Array for a driver call made next with the GIL released: checks
 * it (LogicError), counts the call in a->busy and its context's
 * arrays_busy, *held a strong reference.  A free() meanwhile marks it freed
 * at once and leaves cuArrayDestroy to pygpu_array_unhold.  GIL held; no
 * Python code may run between this and the driver call. */
int pygpu_array_hold(pygpu_state *st, pygpu_Array *a, pygpu_Array **held);
/* End a hold (NULL: nothing); the last holder destroys a freed array. */
void pygpu_array_unhold(pygpu_Array *a);
/* NumPy dtype (any dtype-like) -> CUarray_format; -1 with TypeError naming
 * what.  GIL held. */
int pygpu_dtype_array_format(PyObject *dtype, unsigned int *format, const char *what);

/* memory.c: a contiguous host buffer (no Python objects in it); TypeError
 * naming what otherwise. */
int pygpu_get_host_buffer(PyObject *obj, Py_buffer *view, int writable, const char *what);
/* memory.c: hold a DeviceAllocation (when obj is one) across a driver call
 * made with the GIL released: a free() meanwhile is deferred to the unhold. */
int pygpu_allocation_hold(pygpu_state *st, PyObject *obj, pygpu_DeviceAllocation **held);
void pygpu_allocation_unhold(pygpu_DeviceAllocation *a);

/* texobj.c: a TextureObject's or SurfaceObject's handle; LogicError when
 * it was freed or its context detached. */
int pygpu_texobj_handle(pygpu_state *st, PyObject *obj, unsigned long long *out);
/* tensormap.c: the 128 encoded bytes of a TensorMap */
const unsigned char *pygpu_tensormap_bytes(PyObject *obj);

/* lifetime.c: the last hold of a went; a free() deferred meanwhile is
 * carried out now (cuarray.c). */
void pygpu_array_holds_gone(pygpu_Array *a);

int pygpu_cuarray_setup(PyObject *m, pygpu_state *st);
int pygpu_texobj_setup(PyObject *m, pygpu_state *st);
int pygpu_tensormap_setup(PyObject *m, pygpu_state *st);

#endif
