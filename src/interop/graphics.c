/* OpenGL interop (PyCUDA's pycuda.gl names): RegisteredObject, its two
 * kinds RegisteredBuffer and RegisteredImage, and RegisteredMapping, over
 * the driver's graphics resources (cuGraphicsGLRegisterBuffer/Image,
 * cuGraphicsMapResources/UnmapResources, cuGraphicsResourceGetMappedPointer,
 * cuGraphicsSubResourceGetMappedArray, cuGraphicsUnregisterResource).
 *
 * Nothing here touches OpenGL itself: the caller has a GL context current
 * (pygpu.gl makes one through EGL for tests) and hands over GL object names.
 *
 * Ownership: each CUgraphicsResource lives in one RegisteredObject and is
 * unregistered, in the context it was registered in, at unregister() or when
 * the object dies.  A RegisteredMapping holds its RegisteredObject (strong),
 * so a mapped resource is never unregistered under its mapping; it unmaps at
 * unmap(), at the end of a `with` block, or when it dies.  What a mapping
 * hands out (the Arrays of array(), the DeviceAllocations of
 * device_allocation()) points into memory that is valid only while mapped:
 * the mapping keeps them (strong) and, when it unmaps, marks them freed, so
 * a later use is a LogicError, never a use of unmapped memory.  The Arrays
 * do not own their CUarray (the resource does): they are marked freed with
 * no handle before they can die, so cuArrayDestroy never sees them.
 *
 * These types can be subclassed (as PyCUDA's can): the module state is found
 * through the type's MRO (graphics_state), never assumed from Py_TYPE(self).
 */
#include "pygpu.h"

typedef struct pygpu_RegisteredMapping pygpu_RegisteredMapping;

typedef struct {
    PyObject_HEAD CUgraphicsResource handle; /* owned: cuGraphicsUnregisterResource */
    pygpu_Context *context;                  /* strong ref: where it was registered */
    unsigned int gl_handle;                  /* the GL buffer or texture name */
    unsigned int target;                     /* the GL target of an image, 0 for a buffer */
    unsigned int flags;                      /* the registration flags */
    pygpu_RegisteredMapping *mapping;        /* borrowed: the live mapping, or NULL (the
                                         mapping clears it when it unmaps or dies) */
    PyObject *weakreflist;
} pygpu_Registered;

struct pygpu_RegisteredMapping {
    PyObject_HEAD pygpu_Registered *robj; /* strong ref: the mapped resource */
    PyObject *stream;                     /* strong ref: the Stream it was mapped on, or None */
    CUstream hstream;
    int mapped;
    PyObject *arrays; /* strong: list of the Arrays handed out, or NULL */
    PyObject *allocs; /* strong: list of the DeviceAllocations handed
                                         out, or NULL; both marked freed at unmap */
    PyObject *weakreflist;
};

static void mapping_dealloc(pygpu_RegisteredMapping *self);

/* The module of a graphics type or a Python subclass of one: the module
 * of the first class of the MRO defined by this module (for its state and
 * for looking up sibling types).  Borrowed.  NULL with TypeError when there
 * is none (cannot happen for instances of these types). */
static PyObject *
graphics_module(PyTypeObject *tp)
{
    PyObject *mro = tp->tp_mro;
    Py_ssize_t i, n = mro != NULL ? PyTuple_GET_SIZE(mro) : 0;
    for (i = 0; i < n; i++) {
        PyTypeObject *b = (PyTypeObject *)PyTuple_GET_ITEM(mro, i);
        if (PyType_HasFeature(b, Py_TPFLAGS_HEAPTYPE)) {
            PyObject *m = ((PyHeapTypeObject *)b)->ht_module;
            if (m != NULL && PyModule_GetDef(m) == &pygpu_moduledef)
                return m;
        }
    }
    PyErr_Format(PyExc_TypeError, "%.100s is not a pygpu graphics type", tp->tp_name);
    return NULL;
}

/* The module state of the same. */
static pygpu_state *
graphics_state(PyTypeObject *tp)
{
    PyObject *m = graphics_module(tp);
    return m != NULL ? (pygpu_state *)PyModule_GetState(m) : NULL;
}

static int
need_graphics(pygpu_state *st, const void *fn, const char *routine, const char *what)
{
    return pygpu_need_entry(st, fn, routine, what);
}

/* ---- RegisteredMapping ---- */

/* 0, or -1 with LogicError (nothing changed) when a view is in use: a copy
 * running with the GIL released, or a texture/surface object over an Array.
 * GIL held. */
static int
mapping_check_views(pygpu_state *st, pygpu_RegisteredMapping *self)
{
    Py_ssize_t i;
    for (i = 0; self->arrays != NULL && i < PyList_GET_SIZE(self->arrays); i++) {
        pygpu_Array *a = (pygpu_Array *)PyList_GET_ITEM(self->arrays, i);
        if (a->busy > 0 || a->holds != NULL) {
            PyErr_SetString(st->LogicError,
                            a->busy > 0
                                ? "RegisteredMapping.unmap(): a copy using the mapped array "
                                  "is still running in another thread"
                                : "RegisteredMapping.unmap(): a texture or surface object "
                                  "still uses the mapped array; free or drop it first");
            return -1;
        }
    }
    for (i = 0; self->allocs != NULL && i < PyList_GET_SIZE(self->allocs); i++) {
        pygpu_DeviceAllocation *a = (pygpu_DeviceAllocation *)PyList_GET_ITEM(self->allocs, i);
        if (a->busy > 0) {
            PyErr_SetString(st->LogicError, "RegisteredMapping.unmap(): a copy using the "
                                            "mapped memory is still running in another thread");
            return -1;
        }
    }
    return 0;
}

/* Mark the views freed (they do not own their memory).  Never raises.
 * GIL held. */
static void
mapping_drop_views(pygpu_RegisteredMapping *self)
{
    PyObject *arrays = self->arrays, *allocs = self->allocs, *et, *ev, *tb;
    Py_ssize_t i;
    self->arrays = NULL;
    self->allocs = NULL;
    for (i = 0; arrays != NULL && i < PyList_GET_SIZE(arrays); i++) {
        pygpu_Array *a = (pygpu_Array *)PyList_GET_ITEM(arrays, i);
        a->handle = NULL; /* the resource owns it: never cuArrayDestroy'd */
        a->freed = 1;
    }
    PyErr_Fetch(&et, &ev, &tb);
    for (i = 0; allocs != NULL && i < PyList_GET_SIZE(allocs); i++) {
        /* a non-owning DeviceAllocation: free() only marks it freed */
        PyObject *r = PyObject_CallMethod(PyList_GET_ITEM(allocs, i), "free", NULL);
        if (r == NULL)
            PyErr_Clear();
        Py_XDECREF(r);
    }
    PyErr_Restore(et, ev, tb);
    Py_XDECREF(arrays);
    Py_XDECREF(allocs);
}

/* Unmap on stream s (the mapping's own when s_given is 0).  raise: whether
 * a failure raises (unmap()) or stays silent (dealloc).  Returns 0 or -1. */
static int
mapping_unmap_impl(pygpu_state *st, pygpu_RegisteredMapping *self, CUstream s, int raise)
{
    pygpu_Registered *r = self->robj;
    CUgraphicsResource h;
    pygpu_scope sc;
    CUresult rc;
    if (!self->mapped)
        return 0;
    if (raise && mapping_check_views(st, self) < 0)
        return -1;
    self->mapped = 0;
    mapping_drop_views(self);
    if (r->mapping == self)
        r->mapping = NULL;
    if (r->handle == NULL || r->context->detached || cu.cuGraphicsUnmapResources == NULL)
        return 0;
    if (raise) {
        if (pygpu_scope_enter(st, r->context, &sc) < 0)
            return -1;
    } else if (pygpu_scope_enter_quiet(r->context, &sc) < 0) {
        return 0;
    }
    h = r->handle; /* a copy: another thread may run while the GIL is out */
    Py_BEGIN_ALLOW_THREADS
        rc = cu.cuGraphicsUnmapResources(1, &h, s);
    Py_END_ALLOW_THREADS
    pygpu_scope_exit(&sc);
    if (rc != CUDA_SUCCESS && raise) {
        pygpu_cuda_error(st, rc, "cuGraphicsUnmapResources");
        return -1;
    }
    return 0;
}

static void
mapping_dealloc(pygpu_RegisteredMapping *self)
{
    PyTypeObject *tp = Py_TYPE(self);
    PyObject *et, *ev, *tb;
    PyErr_Fetch(&et, &ev, &tb);
    if (self->weakreflist != NULL)
        PyObject_ClearWeakRefs((PyObject *)self);
    if (self->robj != NULL)
        (void)mapping_unmap_impl(NULL, self, self->hstream, 0);
    mapping_drop_views(self);
    Py_CLEAR(self->robj);
    Py_CLEAR(self->stream);
    PyErr_Restore(et, ev, tb);
    tp->tp_free((PyObject *)self);
    Py_DECREF(tp);
}

static int
mapping_check(pygpu_state *st, pygpu_RegisteredMapping *self, const char *what)
{
    if (!self->mapped) {
        PyErr_Format(st->LogicError, "RegisteredMapping.%s: the resource was unmapped", what);
        return -1;
    }
    if (self->robj->handle == NULL) {
        PyErr_Format(st->LogicError, "RegisteredMapping.%s: the resource was unregistered", what);
        return -1;
    }
    if (self->robj->context->detached) {
        PyErr_Format(st->LogicError,
                     "RegisteredMapping.%s: the resource's context was "
                     "detached",
                     what);
        return -1;
    }
    return 0;
}

static PyObject *
mapping_unmap(pygpu_RegisteredMapping *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"stream", NULL};
    pygpu_state *st = graphics_state(Py_TYPE(self));
    PyObject *sobj = NULL;
    CUstream s;
    if (st == NULL || !PyArg_ParseTupleAndKeywords(args, kwds, "|O:unmap", kwlist, &sobj))
        return NULL;
    if (!self->mapped) {
        PyErr_SetString(st->LogicError, "RegisteredMapping.unmap(): the resource is not "
                                        "mapped (unmapped already)");
        return NULL;
    }
    if (sobj == NULL || sobj == Py_None) {
        s = sobj == NULL ? self->hstream : NULL;
    } else if (pygpu_get_stream(st, sobj, &s) < 0) {
        return NULL;
    }
    if (mapping_unmap_impl(st, self, s, 1) < 0)
        return NULL;
    Py_RETURN_NONE;
}

/* The mapped buffer's device address and size, after mapping_check(); -1
 * with the exception set when the mapping is gone or the driver refuses. */
static int
mapping_pointer(pygpu_state *st, pygpu_RegisteredMapping *self, const char *what, CUdeviceptr *p,
                size_t *n)
{
    CUresult rc;
    pygpu_scope sc;
    if (mapping_check(st, self, what) < 0)
        return -1;
    if (pygpu_scope_enter(st, self->robj->context, &sc) < 0)
        return -1;
    rc = cu.cuGraphicsResourceGetMappedPointer(p, n, self->robj->handle);
    pygpu_scope_exit(&sc);
    if (rc != CUDA_SUCCESS) {
        pygpu_cuda_error_ex(st, rc, "cuGraphicsResourceGetMappedPointer",
                            self->robj->target != 0 ? "an image is mapped as an array: use array()"
                                                    : NULL);
        return -1;
    }
    return 0;
}

static PyObject *
mapping_device_ptr_and_size(pygpu_RegisteredMapping *self, PyObject *unused)
{
    pygpu_state *st = graphics_state(Py_TYPE(self));
    CUdeviceptr p;
    size_t n;
    if (st == NULL || mapping_pointer(st, self, "device_ptr_and_size()", &p, &n) < 0)
        return NULL;
    return Py_BuildValue("(KK)", (unsigned long long)p, (unsigned long long)n);
}

static int
mapping_keep(PyObject **list, PyObject *view)
{
    if (*list == NULL && (*list = PyList_New(0)) == NULL)
        return -1;
    return PyList_Append(*list, view);
}

static PyObject *
mapping_device_allocation(pygpu_RegisteredMapping *self, PyObject *unused)
{
    pygpu_state *st = graphics_state(Py_TYPE(self));
    CUdeviceptr p;
    size_t n;
    PyObject *a;
    if (st == NULL || mapping_pointer(st, self, "device_allocation()", &p, &n) < 0)
        return NULL;
    a = pygpu_borrowed_allocation(st, self->robj->context, p, n, NULL);
    if (a == NULL)
        return NULL;
    if (mapping_keep(&self->allocs, a) < 0) {
        Py_DECREF(a);
        return NULL;
    }
    return a;
}

static PyObject *
mapping_array(pygpu_RegisteredMapping *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"index", "level", NULL};
    pygpu_state *st = graphics_state(Py_TYPE(self));
    PyObject *iobj, *lobj;
    unsigned int index, level;
    CUarray h;
    CUDA_ARRAY3D_DESCRIPTOR desc;
    CUresult rc;
    pygpu_scope sc;
    pygpu_Array *a;
    if (st == NULL || !PyArg_ParseTupleAndKeywords(args, kwds, "OO:array", kwlist, &iobj, &lobj))
        return NULL;
    if (pygpu_parse_uint(iobj, &index, "RegisteredMapping.array(): index") < 0
        || pygpu_parse_uint(lobj, &level, "RegisteredMapping.array(): level") < 0
        || mapping_check(st, self, "array()") < 0)
        return NULL;
    if (pygpu_scope_enter(st, self->robj->context, &sc) < 0)
        return NULL;
    rc = cu.cuGraphicsSubResourceGetMappedArray(&h, self->robj->handle, index, level);
    if (rc == CUDA_SUCCESS)
        rc = cu.cuArray3DGetDescriptor(&desc, h);
    pygpu_scope_exit(&sc);
    if (rc != CUDA_SUCCESS)
        return pygpu_cuda_error_ex(st, rc, "cuGraphicsSubResourceGetMappedArray",
                                   self->robj->target == 0 ? "a buffer is mapped as a pointer: use "
                                                             "device_ptr_and_size()"
                                                           : NULL);
    a = PyObject_New(pygpu_Array, st->ArrayType);
    if (a == NULL)
        return NULL;
    a->handle = h;
    Py_INCREF(self->robj->context);
    a->context = self->robj->context;
    a->desc = desc;
    a->is3d = desc.Depth != 0;
    a->freed = 0;
    a->holds = NULL;
    a->weakreflist = NULL;
    a->busy = 0;
    a->free_pending = 0;
    if (mapping_keep(&self->arrays, (PyObject *)a) < 0) {
        a->handle = NULL; /* not ours to destroy */
        a->freed = 1;
        Py_DECREF(a);
        return NULL;
    }
    return (PyObject *)a;
}

static PyObject *
mapping_enter(PyObject *self, PyObject *unused)
{
    return Py_NewRef(self);
}

static PyObject *
mapping_exit(pygpu_RegisteredMapping *self, PyObject *args)
{
    pygpu_state *st = graphics_state(Py_TYPE(self));
    if (st == NULL || mapping_unmap_impl(st, self, self->hstream, 1) < 0)
        return NULL;
    Py_RETURN_FALSE;
}

static PyObject *
mapping_get_mapped(pygpu_RegisteredMapping *self, void *c)
{
    return PyBool_FromLong(self->mapped);
}

static PyObject *
mapping_get_resource(pygpu_RegisteredMapping *self, void *c)
{
    return Py_NewRef((PyObject *)self->robj);
}

static PyObject *
mapping_repr(pygpu_RegisteredMapping *self)
{
    return PyUnicode_FromFormat("<%s of GL object %u%s>", Py_TYPE(self)->tp_name,
                                self->robj->gl_handle, self->mapped ? "" : ", unmapped");
}

#define CF(f) (PyCFunction)(void (*)(void))(f)
static PyMethodDef mapping_methods[] = {
    {"unmap", CF(mapping_unmap), METH_VARARGS | METH_KEYWORDS,
     "unmap($self, /, stream=None)\n--\n\nUnmap the resource (on the stream it was mapped "
     "on, or on stream), giving it back to OpenGL. The Arrays and DeviceAllocations this "
     "mapping handed out are marked freed. A second unmap() is a LogicError."},
    {"device_ptr_and_size", (PyCFunction)mapping_device_ptr_and_size, METH_NOARGS,
     "device_ptr_and_size($self, /)\n--\n\nThe mapped buffer's device address and size "
     "in bytes, as (int, int); the address works as a kernel's pointer argument while "
     "mapped."},
    {"device_allocation", (PyCFunction)mapping_device_allocation, METH_NOARGS,
     "device_allocation($self, /)\n--\n\nThe mapped buffer as a DeviceAllocation that "
     "does not own its memory (a kernel argument, a memcpy end); marked freed when the "
     "mapping unmaps, so a later use is a LogicError."},
    {"array", CF(mapping_array), METH_VARARGS | METH_KEYWORDS,
     "array($self, /, index, level)\n--\n\nThe mapped image's sub-resource (array index or "
     "cube face, mipmap level) as a pygpu Array, for memcpy_htoa/atoh and texture "
     "objects; marked freed when the mapping unmaps."},
    {"__enter__", (PyCFunction)mapping_enter, METH_NOARGS,
     "__enter__($self, /)\n--\n\nThe mapping itself, unmapped at the block's end."},
    {"__exit__", (PyCFunction)mapping_exit, METH_VARARGS,
     "__exit__($self, /, *exc_info)\n--\n\nUnmap."},
    {NULL},
};

static PyGetSetDef mapping_getset[] = {
    {"mapped", (getter)mapping_get_mapped, NULL, "Whether the resource is still mapped.", NULL},
    {"resource", (getter)mapping_get_resource, NULL, "The RegisteredObject mapped.", NULL},
    {NULL},
};

static PyMemberDef mapping_members[] = {
    {"__weaklistoffset__", T_PYSSIZET, offsetof(pygpu_RegisteredMapping, weakreflist), READONLY},
    {NULL},
};

static PyType_Slot mapping_slots[] = {
    {Py_tp_dealloc, mapping_dealloc},
    {Py_tp_methods, mapping_methods},
    {Py_tp_getset, mapping_getset},
    {Py_tp_members, mapping_members},
    {Py_tp_repr, mapping_repr},
    {Py_tp_doc, "A mapped RegisteredObject (from RegisteredObject.map()); unmaps at "
                "unmap(), at the end of a with block, or when it dies."},
    {0, NULL},
};

static PyType_Spec mapping_spec = {"pygpu.driver.RegisteredMapping",
                                   sizeof(pygpu_RegisteredMapping), 0,
                                   Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE
                                       | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_DISALLOW_INSTANTIATION,
                                   mapping_slots};

/* ---- RegisteredObject, RegisteredBuffer, RegisteredImage ---- */

/* Unregister in the owning context: unmaps a live mapping first.
 * Idempotent, never raises.  GIL held. */
static void
registered_release(pygpu_state *st, pygpu_Registered *self)
{
    CUgraphicsResource h = self->handle;
    pygpu_scope sc;
    if (h == NULL)
        return;
    if (self->mapping != NULL)
        (void)mapping_unmap_impl(st, self->mapping, self->mapping->hstream, 0);
    self->handle = NULL;
    if (self->context->detached || cu.cuGraphicsUnregisterResource == NULL
        || pygpu_scope_enter_quiet(self->context, &sc) < 0)
        return;
    cu.cuGraphicsUnregisterResource(h);
    pygpu_scope_exit(&sc);
}

static void
registered_dealloc(pygpu_Registered *self)
{
    PyTypeObject *tp = Py_TYPE(self);
    pygpu_state *st;
    PyObject *et, *ev, *tb;
    PyErr_Fetch(&et, &ev, &tb);
    if (self->weakreflist != NULL)
        PyObject_ClearWeakRefs((PyObject *)self);
    st = graphics_state(tp);
    if (st == NULL)
        PyErr_Clear();
    if (self->context != NULL)
        registered_release(st, self); /* no mapping: it would hold self */
    Py_CLEAR(self->context);
    PyErr_Restore(et, ev, tb);
    tp->tp_free((PyObject *)self);
    Py_DECREF(tp);
}

/* Registration common to buffers (target 0) and images. */
static PyObject *
registered_make(PyTypeObject *type, PyObject *hobj, unsigned int target, PyObject *tobj,
                PyObject *fobj, const char *what)
{
    pygpu_state *st = graphics_state(type);
    unsigned int gl_handle, flags = 0;
    char where[96];
    pygpu_Context *ctx;
    pygpu_Registered *self;
    CUgraphicsResource h;
    CUresult rc;
    pygpu_scope sc;
    if (st == NULL)
        return NULL;
    snprintf(where, sizeof where, "%s(): gl_handle", what);
    if (pygpu_parse_uint(hobj, &gl_handle, where) < 0)
        return NULL;
    if (tobj != NULL) {
        snprintf(where, sizeof where, "%s(): target", what);
        if (pygpu_parse_uint(tobj, &target, where) < 0)
            return NULL;
    }
    if (fobj != NULL && fobj != Py_None) {
        snprintf(where, sizeof where, "%s(): flags", what);
        if (pygpu_parse_uint(fobj, &flags, where) < 0)
            return NULL;
    }
    if (flags & ~0xFu) {
        PyErr_Format(PyExc_ValueError,
                     "%s(): flags must combine graphics_register_flags "
                     "(NONE, READ_ONLY, WRITE_DISCARD, SURFACE_LDST, TEXTURE_GATHER), "
                     "got %u",
                     what, flags);
        return NULL;
    }
    if (gl_handle == 0) {
        PyErr_Format(PyExc_ValueError,
                     "%s(): gl_handle must be a GL object name "
                     "(from glGenBuffers/glGenTextures), not 0",
                     what);
        return NULL;
    }
    if (pygpu_ensure_driver(st) < 0)
        return NULL;
    if (need_graphics(st,
                      (void *)(tobj ? (void *)cu.cuGraphicsGLRegisterImage
                                    : (void *)cu.cuGraphicsGLRegisterBuffer),
                      tobj ? "cuGraphicsGLRegisterImage" : "cuGraphicsGLRegisterBuffer", what)
            < 0
        || need_graphics(st, (void *)cu.cuGraphicsUnregisterResource,
                         "cuGraphicsUnregisterResource", what)
               < 0
        || need_graphics(st, (void *)cu.cuGraphicsMapResources, "cuGraphicsMapResources", what) < 0
        || need_graphics(st, (void *)cu.cuGraphicsUnmapResources, "cuGraphicsUnmapResources", what)
               < 0)
        return NULL;
    if ((ctx = pygpu_current_context(st)) == NULL)
        return NULL;
    if (pygpu_scope_enter(st, ctx, &sc) < 0)
        return NULL;
    Py_BEGIN_ALLOW_THREADS
        if (tobj != NULL)
            rc = cu.cuGraphicsGLRegisterImage(&h, gl_handle, target, flags);
        else
            rc = cu.cuGraphicsGLRegisterBuffer(&h, gl_handle, flags);
    Py_END_ALLOW_THREADS
    if (rc != CUDA_SUCCESS) {
        pygpu_scope_exit(&sc);
        return pygpu_cuda_error_ex(
            st, rc, tobj ? "cuGraphicsGLRegisterImage" : "cuGraphicsGLRegisterBuffer",
            "an OpenGL context must be current in this thread, on "
            "the GPU of the current CUDA context, and the name must "
            "be a live GL object of that context");
    }
    self = (pygpu_Registered *)type->tp_alloc(type, 0);
    if (self == NULL) {
        cu.cuGraphicsUnregisterResource(h);
        pygpu_scope_exit(&sc);
        return NULL;
    }
    pygpu_scope_exit(&sc);
    self->handle = h;
    Py_INCREF(ctx);
    self->context = ctx;
    self->gl_handle = gl_handle;
    self->target = tobj != NULL ? target : 0;
    self->flags = flags;
    self->mapping = NULL;
    self->weakreflist = NULL;
    return (PyObject *)self;
}

static PyObject *
buffer_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"gl_handle", "flags", NULL};
    PyObject *hobj, *fobj = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O|O:RegisteredBuffer", kwlist, &hobj, &fobj))
        return NULL;
    return registered_make(type, hobj, 0, NULL, fobj, "RegisteredBuffer");
}

static PyObject *
image_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"gl_handle", "target", "flags", NULL};
    PyObject *hobj, *tobj, *fobj = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OO|O:RegisteredImage", kwlist, &hobj, &tobj,
                                     &fobj))
        return NULL;
    return registered_make(type, hobj, 0, tobj, fobj, "RegisteredImage");
}

static int
registered_check(pygpu_state *st, pygpu_Registered *self, const char *what)
{
    if (self->handle == NULL) {
        PyErr_Format(st->LogicError, "%s: the resource was unregistered", what);
        return -1;
    }
    if (self->context->detached) {
        PyErr_Format(st->LogicError, "%s: the resource's context was detached", what);
        return -1;
    }
    return 0;
}

static PyObject *
registered_gl_handle(pygpu_Registered *self, PyObject *unused)
{
    return PyLong_FromUnsignedLong(self->gl_handle);
}

static PyObject *
registered_unregister(pygpu_Registered *self, PyObject *unused)
{
    pygpu_state *st = graphics_state(Py_TYPE(self));
    if (st == NULL)
        return NULL;
    if (self->handle == NULL) {
        PyErr_SetString(st->LogicError, "RegisteredObject.unregister(): the resource was "
                                        "unregistered already");
        return NULL;
    }
    if (self->mapping != NULL && mapping_check_views(st, self->mapping) < 0)
        return NULL;
    registered_release(st, self);
    Py_RETURN_NONE;
}

static PyObject *
registered_map(pygpu_Registered *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"stream", NULL};
    pygpu_state *st = graphics_state(Py_TYPE(self));
    PyObject *sobj = Py_None, *m, *tp;
    CUgraphicsResource h;
    CUstream s = NULL;
    CUresult rc;
    pygpu_scope sc;
    pygpu_RegisteredMapping *mp;
    if (st == NULL || !PyArg_ParseTupleAndKeywords(args, kwds, "|O:map", kwlist, &sobj))
        return NULL;
    if (registered_check(st, self, "RegisteredObject.map()") < 0)
        return NULL;
    if (sobj != Py_None && pygpu_get_stream(st, sobj, &s) < 0)
        return NULL;
    if (self->mapping != NULL) {
        PyErr_SetString(st->LogicError, "RegisteredObject.map(): the resource is mapped "
                                        "already; unmap() its mapping first");
        return NULL;
    }
    if ((m = graphics_module(Py_TYPE(self))) == NULL)
        return NULL;
    tp = PyObject_GetAttrString(m, "RegisteredMapping");
    if (tp == NULL)
        return NULL;
    if (!PyType_Check(tp) || ((PyTypeObject *)tp)->tp_dealloc != (destructor)mapping_dealloc) {
        PyErr_SetString(PyExc_TypeError, "pygpu._driver.RegisteredMapping was replaced");
        Py_DECREF(tp);
        return NULL;
    }
    mp = PyObject_New(pygpu_RegisteredMapping, (PyTypeObject *)tp);
    Py_DECREF(tp);
    if (mp == NULL)
        return NULL;
    mp->robj = NULL;
    mp->stream = Py_NewRef(sobj);
    mp->hstream = s;
    mp->mapped = 0;
    mp->arrays = NULL;
    mp->allocs = NULL;
    mp->weakreflist = NULL;
    if (pygpu_scope_enter(st, self->context, &sc) < 0) {
        Py_DECREF(mp);
        return NULL;
    }
    h = self->handle; /* a copy: another thread may run while the GIL is out */
    Py_BEGIN_ALLOW_THREADS
        rc = cu.cuGraphicsMapResources(1, &h, s);
    Py_END_ALLOW_THREADS
    pygpu_scope_exit(&sc);
    if (rc != CUDA_SUCCESS) {
        Py_DECREF(mp);
        return pygpu_cuda_error(st, rc, "cuGraphicsMapResources");
    }
    mp->robj = (pygpu_Registered *)Py_NewRef((PyObject *)self);
    mp->mapped = 1;
    self->mapping = mp;
    return (PyObject *)mp;
}

static PyObject *
registered_get_handle(pygpu_Registered *self, void *c)
{
    return PyLong_FromVoidPtr(self->handle);
}

static PyObject *
registered_get_target(pygpu_Registered *self, void *c)
{
    return PyLong_FromUnsignedLong(self->target);
}

static PyObject *
registered_get_flags(pygpu_Registered *self, void *c)
{
    return PyLong_FromUnsignedLong(self->flags);
}

static PyObject *
registered_get_mapped(pygpu_Registered *self, void *c)
{
    return PyBool_FromLong(self->mapping != NULL);
}

static PyObject *
registered_repr(pygpu_Registered *self)
{
    return PyUnicode_FromFormat("<%s of GL object %u%s>", Py_TYPE(self)->tp_name, self->gl_handle,
                                self->handle == NULL ? ", unregistered" : "");
}

static PyMethodDef registered_methods[] = {
    {"gl_handle", (PyCFunction)registered_gl_handle, METH_NOARGS,
     "gl_handle($self, /)\n--\n\nThe GL buffer or texture name registered."},
    {"unregister", (PyCFunction)registered_unregister, METH_NOARGS,
     "unregister($self, /)\n--\n\nUnregister the resource now (unmapping it first if "
     "mapped); also done when the object dies. A second unregister() is a LogicError."},
    {"map", CF(registered_map), METH_VARARGS | METH_KEYWORDS,
     "map($self, /, stream=None)\n--\n\nMap the resource for CUDA (OpenGL must not use "
     "it meanwhile); returns a RegisteredMapping."},
    {NULL},
};

static PyGetSetDef registered_getset[] = {
    {"handle", (getter)registered_get_handle, NULL,
     "The CUgraphicsResource as an int (0 once unregistered).", NULL},
    {"target", (getter)registered_get_target, NULL,
     "The GL target an image was registered with (0 for a buffer).", NULL},
    {"flags", (getter)registered_get_flags, NULL, "The registration flags.", NULL},
    {"mapped", (getter)registered_get_mapped, NULL, "Whether a mapping of it is live.", NULL},
    {NULL},
};

static PyMemberDef registered_members[] = {
    {"__weaklistoffset__", T_PYSSIZET, offsetof(pygpu_Registered, weakreflist), READONLY},
    {NULL},
};

static PyType_Slot registered_slots[] = {
    {Py_tp_dealloc, registered_dealloc},
    {Py_tp_methods, registered_methods},
    {Py_tp_getset, registered_getset},
    {Py_tp_members, registered_members},
    {Py_tp_repr, registered_repr},
    {Py_tp_doc, "An OpenGL object registered with CUDA (RegisteredBuffer or "
                "RegisteredImage); unregistered at unregister() or when it dies."},
    {0, NULL},
};

static PyType_Spec registered_spec = {"pygpu.driver.RegisteredObject", sizeof(pygpu_Registered), 0,
                                      Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE
                                          | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_DISALLOW_INSTANTIATION,
                                      registered_slots};

static PyType_Slot buffer_slots[] = {
    {Py_tp_new, buffer_new},
    {Py_tp_doc, "RegisteredBuffer(gl_handle, flags=graphics_register_flags.NONE)\n--\n\n"
                "An OpenGL buffer object registered with CUDA (cuGraphicsGLRegisterBuffer) "
                "in the current context; a GL context must be current in this thread."},
    {0, NULL},
};

static PyType_Spec buffer_spec = {
    "pygpu.driver.RegisteredBuffer", sizeof(pygpu_Registered), 0,
    Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE | Py_TPFLAGS_BASETYPE, buffer_slots};

static PyType_Slot image_slots[] = {
    {Py_tp_new, image_new},
    {Py_tp_doc, "RegisteredImage(gl_handle, target, flags=graphics_register_flags.NONE)\n"
                "--\n\nAn OpenGL texture or renderbuffer registered with CUDA "
                "(cuGraphicsGLRegisterImage; target GL_TEXTURE_2D, GL_RENDERBUFFER, ...) "
                "in the current context; a GL context must be current in this thread."},
    {0, NULL},
};

static PyType_Spec image_spec = {
    "pygpu.driver.RegisteredImage", sizeof(pygpu_Registered), 0,
    Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE | Py_TPFLAGS_BASETYPE, image_slots};

static int
add_subtype(PyObject *m, PyType_Spec *spec, PyObject *base)
{
    /* bases as a tuple: Python 3.9 takes no bare type there */
    PyObject *bases = base != NULL ? PyTuple_Pack(1, base) : NULL, *tp;
    int rc;
    if (base != NULL && bases == NULL)
        return -1;
    tp = PyType_FromModuleAndSpec(m, spec, bases);
    Py_XDECREF(bases);
    if (tp == NULL)
        return -1;
    if (pygpu_keep_text_signature((PyTypeObject *)tp, spec) < 0) { /* 3.9 drops it */
        Py_DECREF(tp);
        return -1;
    }
#if PY_VERSION_HEX < 0x030A0000
    if (spec == &mapping_spec) /* no Py_TPFLAGS_DISALLOW_INSTANTIATION before 3.10 */
        ((PyTypeObject *)tp)->tp_new = NULL;
#endif
    rc = pygpu_module_add_ref(m, strrchr(spec->name, '.') + 1, tp);
    Py_DECREF(tp);
    return rc;
}

int
pygpu_graphics_setup(PyObject *m, pygpu_state *st)
{
    PyObject *base;
    int rc;
    (void)st;
    if (add_subtype(m, &mapping_spec, NULL) < 0)
        return -1;
    base = PyType_FromModuleAndSpec(m, &registered_spec, NULL);
    if (base == NULL)
        return -1;
    if (pygpu_keep_text_signature((PyTypeObject *)base, &registered_spec) < 0) {
        Py_DECREF(base);
        return -1;
    }
#if PY_VERSION_HEX < 0x030A0000
    ((PyTypeObject *)base)->tp_new = NULL;
#endif
    rc = pygpu_module_add_ref(m, "RegisteredObject", base);
    if (rc == 0)
        rc = add_subtype(m, &buffer_spec, base);
    if (rc == 0)
        rc = add_subtype(m, &image_spec, base);
    Py_DECREF(base);
    return rc;
}
