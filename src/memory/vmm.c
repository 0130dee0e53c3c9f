/* VirtualBuffer: a growable device buffer over the virtual memory
 * management API (cuMemAddressReserve, cuMemCreate, cuMemMap,
 * cuMemSetAccess).
 *
 * A DeviceAllocation (kind 5): int(buf), kernels, copies and the CUDA Array
 * Interface see it as one contiguous range.  Its physical memory is a list
 * of chunks mapped back to back from ptr.  grow(n) maps a new chunk after
 * the last one, in the reservation when it has room, else in a range
 * reserved right after it, else everything is mapped again into a new,
 * larger reservation (ptr changes; the contents stay: the chunks are the
 * same memory).  shareable=True makes chunks exportable as POSIX file
 * descriptors (pygpu.ipc.export_buffer / import_buffer).
 *
 * A grow() that moves the buffer while something holds its address (hold.c:
 * a graph node, a texture, a tensor map) keeps the old range mapped to the
 * same chunks ("retired"), so a replay through the old address still reads
 * and writes the buffer's memory; retired ranges are unmapped when no hold
 * remains, or with the buffer.
 */
#include "pygpu.h"
#include <unistd.h>

typedef struct {
    CUdeviceptr addr;
    size_t size;
} vmm_range;

/* An address range a moving grow() kept mapped for holders. */
typedef struct vmm_retired {
    CUdeviceptr at; /* where the chunks are mapped */
    size_t *sizes;  /* owned: the mapped chunks' sizes, in order */
    int n;
    vmm_range *res; /* owned: the reservations under it */
    int nres;
    struct vmm_retired *next;
} vmm_retired;

typedef struct {
    pygpu_DeviceAllocation base; /* ptr: start of the mapped range */
    int device;                  /* ordinal the memory lives on */
    int shareable;               /* chunks carry POSIX fd handles */
    size_t gran;                 /* allocation granularity */
    size_t mapped;               /* bytes mapped from ptr (chunks' total) */
    vmm_range *res;              /* owned: the reservations, in address order */
    int nres;
    CUmemGenericAllocationHandle *chunks; /* owned: each released at the end */
    size_t *chunk_size;                   /* owned */
    int nchunks;
    vmm_retired *retired; /* owned: old ranges kept mapped for holders */
} pygpu_VirtualBuffer;

static void
vmm_prop(pygpu_VirtualBuffer *v, CUmemAllocationProp *prop)
{
    memset(prop, 0, sizeof *prop);
    prop->type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop->location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop->location.id = v->device;
    prop->requestedHandleTypes =
        v->shareable ? CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR : CU_MEM_HANDLE_TYPE_NONE;
}

static CUresult
map_at(pygpu_VirtualBuffer *v, CUdeviceptr at, size_t size, CUmemGenericAllocationHandle h,
       const char **routine)
{
    CUmemAccessDesc desc;
    CUresult rc;
    *routine = "cuMemMap";
    if ((rc = cu.cuMemMap(at, size, 0, h, 0)) != CUDA_SUCCESS)
        return rc;
    memset(&desc, 0, sizeof desc);
    desc.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    desc.location.id = v->device;
    desc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    *routine = "cuMemSetAccess";
    if ((rc = cu.cuMemSetAccess(at, size, &desc, 1)) != CUDA_SUCCESS)
        (void)cu.cuMemUnmap(at, size);
    return rc;
}

/* unmap the chunks mapped from `at` (the first n of them) */
static void
unmap_from(pygpu_VirtualBuffer *v, CUdeviceptr at, int n)
{
    int i;
    for (i = 0; i < n; i++) {
        (void)cu.cuMemUnmap(at, v->chunk_size[i]);
        at += v->chunk_size[i];
    }
}

/* Unmap and free the retired ranges (driver calls only with unmap set:
 * the context is current). */
static void
retired_free(pygpu_VirtualBuffer *v, int unmap)
{
    vmm_retired *r = v->retired, *next;
    int i;
    for (; r != NULL; r = next) {
        next = r->next;
        if (unmap) {
            CUdeviceptr at = r->at;
            for (i = 0; i < r->n; i++) {
                (void)cu.cuMemUnmap(at, r->sizes[i]);
                at += r->sizes[i];
            }
            for (i = 0; i < r->nres; i++)
                (void)cu.cuMemAddressFree(r->res[i].addr, r->res[i].size);
        }
        PyMem_Free(r->sizes);
        PyMem_Free(r->res);
        PyMem_Free(r);
    }
    v->retired = NULL;
}

void
pygpu_vmm_release_retired(pygpu_DeviceAllocation *a)
{
    retired_free((pygpu_VirtualBuffer *)a, 1);
}

void
pygpu_vmm_release(pygpu_DeviceAllocation *a)
{
    pygpu_VirtualBuffer *v = (pygpu_VirtualBuffer *)a;
    int i;
    retired_free(v, 1);
    if (v->nchunks > 0)
        unmap_from(v, a->ptr, v->nchunks);
    for (i = 0; i < v->nchunks; i++)
        (void)cu.cuMemRelease(v->chunks[i]);
    for (i = 0; i < v->nres; i++)
        (void)cu.cuMemAddressFree(v->res[i].addr, v->res[i].size);
    v->nchunks = v->nres = 0;
    v->mapped = 0;
    a->ptr = 0;
}

static void
vmm_dealloc(pygpu_VirtualBuffer *v)
{
    PyTypeObject *base = pygpu_state_from_type(Py_TYPE(v))->DeviceAllocationType;
    /* the inherited dealloc frees the memory (kind 5: pygpu_vmm_release) and
     * the object; the arrays are ours; copy them out first */
    vmm_range *res = v->res;
    CUmemGenericAllocationHandle *chunks = v->chunks;
    size_t *sizes = v->chunk_size;
    retired_free(v, 0); /* left only when the context went first */
    base->tp_dealloc((PyObject *)v);
    PyMem_Free(res);
    PyMem_Free(chunks);
    PyMem_Free(sizes);
}

static size_t
round_up(size_t n, size_t g)
{
    return (n + g - 1) / g * g;
}

static int
push_chunk(pygpu_VirtualBuffer *v, CUmemGenericAllocationHandle h, size_t size)
{
    CUmemGenericAllocationHandle *c = PyMem_Realloc(v->chunks, (v->nchunks + 1) * sizeof *c);
    size_t *s;
    if (c == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    v->chunks = c;
    s = PyMem_Realloc(v->chunk_size, (v->nchunks + 1) * sizeof *s);
    if (s == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    v->chunk_size = s;
    v->chunks[v->nchunks] = h;
    v->chunk_size[v->nchunks] = size;
    v->nchunks++;
    return 0;
}

static int
push_range(pygpu_VirtualBuffer *v, CUdeviceptr addr, size_t size)
{
    vmm_range *r = PyMem_Realloc(v->res, (v->nres + 1) * sizeof *r);
    if (r == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    v->res = r;
    v->res[v->nres].addr = addr;
    v->res[v->nres].size = size;
    v->nres++;
    return 0;
}

static size_t
reserved(pygpu_VirtualBuffer *v)
{
    size_t n = 0;
    int i;
    for (i = 0; i < v->nres; i++)
        n += v->res[i].size;
    return n;
}

/* Map physical chunk h (size bytes, already made) after the mapped range,
 * reserving address space as needed.  On success the chunk belongs to v; on
 * failure (-1, exception set) nothing changed and the caller releases h.
 * The context is current.  GIL held. */
static int
append_chunk(pygpu_state *st, pygpu_VirtualBuffer *v, CUmemGenericAllocationHandle h, size_t size,
             size_t want_reserve)
{
    const char *routine = "cuMemAddressReserve";
    size_t have = reserved(v), newres;
    CUdeviceptr p = 0, end;
    CUresult rc;
    int i;
    /* room in what is reserved (the reservations are contiguous) */
    if (v->nres > 0 && v->mapped + size <= have) {
        if ((rc = map_at(v, v->base.ptr + v->mapped, size, h, &routine)) != CUDA_SUCCESS)
            goto driver_error;
        goto mapped;
    }
    newres = round_up(want_reserve > v->mapped + size ? want_reserve : v->mapped + size, v->gran);
    if (v->nres > 0) {
        /* a range right after the last reservation keeps ptr */
        end = v->res[v->nres - 1].addr + v->res[v->nres - 1].size;
        rc = cu.cuMemAddressReserve(&p, newres - have, v->gran, end, 0);
        if (rc == CUDA_SUCCESS && p == end) {
            if (push_range(v, p, newres - have) < 0) {
                (void)cu.cuMemAddressFree(p, newres - have);
                return -1;
            }
            if ((rc = map_at(v, v->base.ptr + v->mapped, size, h, &routine)) != CUDA_SUCCESS)
                goto driver_error; /* the extra range stays reserved: harmless */
            goto mapped;
        }
        if (rc == CUDA_SUCCESS)
            (void)cu.cuMemAddressFree(p, newres - have);
        p = 0;
    }
    /* a new reservation: everything mapped again there */
    rc = cu.cuMemAddressReserve(&p, newres, v->gran, 0, 0);
    if (rc != CUDA_SUCCESS)
        goto driver_error;
    {
        CUdeviceptr at = p;
        for (i = 0; i < v->nchunks; i++) {
            if ((rc = map_at(v, at, v->chunk_size[i], v->chunks[i], &routine)) != CUDA_SUCCESS)
                break;
            at += v->chunk_size[i];
        }
        if (rc == CUDA_SUCCESS)
            rc = map_at(v, at, size, h, &routine);
        if (rc != CUDA_SUCCESS) {
            unmap_from(v, p, i);
            (void)cu.cuMemAddressFree(p, newres);
            goto driver_error;
        }
    }
    {
        vmm_range *one = PyMem_Malloc(sizeof *one);
        vmm_retired *old = NULL;
        if (one != NULL && v->base.holds != NULL && v->nchunks > 0) {
            /* held: the old range stays mapped (the module comment) */
            old = PyMem_Calloc(1, sizeof *old);
            if (old != NULL && (old->sizes = PyMem_Malloc(v->nchunks * sizeof(size_t))) == NULL) {
                PyMem_Free(old);
                old = NULL;
            }
            if (old == NULL) {
                PyMem_Free(one);
                one = NULL;
            }
        }
        if (one == NULL) {
            unmap_from(v, p, v->nchunks);
            (void)cu.cuMemUnmap(p + v->mapped, size);
            (void)cu.cuMemAddressFree(p, newres);
            PyErr_NoMemory();
            return -1;
        }
        if (old != NULL) {
            old->at = v->base.ptr;
            memcpy(old->sizes, v->chunk_size, v->nchunks * sizeof(size_t));
            old->n = v->nchunks;
            old->res = v->res;
            old->nres = v->nres;
            old->next = v->retired;
            v->retired = old;
        } else {
            if (v->nchunks > 0)
                unmap_from(v, v->base.ptr, v->nchunks);
            for (i = 0; i < v->nres; i++)
                (void)cu.cuMemAddressFree(v->res[i].addr, v->res[i].size);
            PyMem_Free(v->res);
        }
        one->addr = p;
        one->size = newres;
        v->res = one;
        v->nres = 1;
        v->base.ptr = p;
    }
mapped:
    if (push_chunk(v, h, size) < 0) {
        (void)cu.cuMemUnmap(v->base.ptr + v->mapped, size);
        return -1;
    }
    v->mapped += size;
    return 0;
driver_error:
    pygpu_cuda_error(st, rc, routine);
    return -1;
}

/* Grow the mapped range to hold n bytes (a new chunk of the missing
 * granules).  Context current.  0 or -1. */
static int
grow_to(pygpu_state *st, pygpu_VirtualBuffer *v, size_t n, size_t want_reserve)
{
    CUmemAllocationProp prop;
    CUmemGenericAllocationHandle h;
    size_t need;
    CUresult rc;
    if (n <= v->mapped) {
        if (n > v->base.size)
            v->base.size = n;
        return 0;
    }
    need = round_up(n - v->mapped, v->gran);
    vmm_prop(v, &prop);
    Py_BEGIN_ALLOW_THREADS
        rc = cu.cuMemCreate(&h, need, &prop, 0);
    Py_END_ALLOW_THREADS
    if (rc != CUDA_SUCCESS) {
        char note[128];
        snprintf(note, sizeof note, "asked for %zu more bytes on device %d", need, v->device);
        pygpu_cuda_error_ex(st, rc, "cuMemCreate", note);
        return -1;
    }
    if (append_chunk(st, v, h, need, want_reserve) < 0) {
        (void)cu.cuMemRelease(h);
        return -1;
    }
    v->base.size = n;
    return 0;
}

static int
need_vmm(pygpu_state *st, const char *what)
{
    if (cu.cuMemAddressReserve == NULL || cu.cuMemCreate == NULL || cu.cuMemMap == NULL
        || cu.cuMemSetAccess == NULL || cu.cuMemUnmap == NULL || cu.cuMemRelease == NULL
        || cu.cuMemAddressFree == NULL || cu.cuMemGetAllocationGranularity == NULL) {
        PyErr_Format(st->LogicError,
                     "%s needs the virtual memory management API "
                     "(cuMemCreate, CUDA 10.2+), which this CUDA driver does not provide",
                     what);
        return -1;
    }
    return 0;
}

static int
parse_size(PyObject *obj, size_t *out, const char *what)
{
    if (obj == NULL) {
        *out = 0;
        return 0;
    }
    if (!PyLong_Check(obj)) {
        PyErr_Format(PyExc_TypeError, "%s must be an int, not %.100s", what, Py_TYPE(obj)->tp_name);
        return -1;
    }
    {
        PyObject *zero = PyLong_FromLong(0);
        int neg = zero ? PyObject_RichCompareBool(obj, zero, Py_LT) : -1;
        Py_XDECREF(zero);
        if (neg < 0)
            return -1;
        if (neg) {
            PyErr_Format(PyExc_ValueError, "%s must be >= 0, got %R", what, obj);
            return -1;
        }
    }
    *out = PyLong_AsSize_t(obj);
    return (*out == (size_t)-1 && PyErr_Occurred()) ? -1 : 0;
}

/* A new, empty VirtualBuffer of the current context (its device, its
 * granularity).  GIL held. */
static pygpu_VirtualBuffer *
vmm_empty(pygpu_state *st, PyTypeObject *type, int shareable, const char *what)
{
    pygpu_Context *ctx;
    pygpu_VirtualBuffer *v;
    CUmemAllocationProp prop;
    pygpu_scope s;
    size_t gran = 0;
    CUresult rc;
    if ((ctx = pygpu_current_context(st)) == NULL || need_vmm(st, what) < 0)
        return NULL;
    v = (pygpu_VirtualBuffer *)pygpu_allocation_new(st, type, ctx, 0, 0, PYGPU_ALLOC_VIRTUAL);
    if (v == NULL)
        return NULL;
    v->device = ctx->ordinal;
    v->shareable = shareable;
    vmm_prop(v, &prop);
    if (pygpu_scope_enter(st, ctx, &s) < 0) {
        Py_DECREF(v);
        return NULL;
    }
    rc = cu.cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
    pygpu_scope_exit(&s);
    if (rc != CUDA_SUCCESS || gran == 0) {
        if (rc == CUDA_SUCCESS)
            PyErr_Format(st->LogicError, "%s: the driver reported a granularity of 0", what);
        else
            pygpu_cuda_error_ex(st, rc, "cuMemGetAllocationGranularity",
                                shareable ? "this device may not support POSIX file "
                                            "descriptor handles"
                                          : NULL);
        Py_DECREF(v);
        return NULL;
    }
    v->gran = gran;
    return v;
}

static int
vmm_check(pygpu_state *st, pygpu_VirtualBuffer *v, const char *what)
{
    if (v->base.freed == 2) {
        PyErr_Format(st->LogicError,
                     "%s: the VirtualBuffer's context was detached: its memory "
                     "is gone",
                     what);
        return -1;
    }
    if (v->base.freed) {
        PyErr_Format(st->LogicError, "%s: the VirtualBuffer was freed", what);
        return -1;
    }
    if (v->base.busy > 0) {
        PyErr_Format(st->LogicError,
                     "%s: a copy using the VirtualBuffer, or its grow(), is running in "
                     "another thread",
                     what);
        return -1;
    }
    return 0;
}

/* VirtualBuffer(nbytes=0, reserve=0, shareable=False) */
static PyObject *
vmm_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    pygpu_state *st = pygpu_state_from_type(type);
    static char *kwlist[] = {"nbytes", "reserve", "shareable", NULL};
    PyObject *nobj = NULL, *robj = NULL;
    pygpu_VirtualBuffer *v;
    int shareable = 0;
    size_t n, want;
    pygpu_scope s;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|OOp:VirtualBuffer", kwlist, &nobj, &robj,
                                     &shareable))
        return NULL;
    if (parse_size(nobj, &n, "VirtualBuffer(): nbytes") < 0
        || parse_size(robj, &want, "VirtualBuffer(): reserve") < 0)
        return NULL;
    if ((v = vmm_empty(st, type, shareable, "VirtualBuffer()")) == NULL)
        return NULL;
    if (n > 0) {
        if (pygpu_scope_enter(st, v->base.context, &s) < 0) {
            Py_DECREF(v);
            return NULL;
        }
        if (grow_to(st, v, n, want) < 0) {
            pygpu_scope_exit(&s);
            Py_DECREF(v);
            return NULL;
        }
        pygpu_scope_exit(&s);
    }
    return (PyObject *)v;
}

static PyObject *
vmm_grow(pygpu_VirtualBuffer *v, PyObject *args, PyObject *kwds)
{
    pygpu_state *st = PYGPU_STATE(v);
    static char *kwlist[] = {"nbytes", "reserve", NULL};
    PyObject *nobj, *robj = NULL;
    size_t n, want;
    pygpu_scope s;
    pygpu_DeviceAllocation *held;
    int r;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O|O:grow", kwlist, &nobj, &robj))
        return NULL;
    if (parse_size(nobj, &n, "grow(): nbytes") < 0 || parse_size(robj, &want, "grow(): reserve") < 0
        || vmm_check(st, v, "grow()") < 0)
        return NULL;
    if (n < v->base.size) {
        PyErr_Format(PyExc_ValueError,
                     "grow(): %zu bytes is less than the buffer's %zu "
                     "(a VirtualBuffer only grows)",
                     n, v->base.size);
        return NULL;
    }
    if (want == 0)
        want = 2 * n; /* room to grow again in place */
    if (pygpu_scope_enter(st, v->base.context, &s) < 0)
        return NULL;
    /* in use while cuMemCreate runs with the GIL released: a free() from
     * another thread meanwhile waits for the new chunk to be mapped (and
     * then releases it with the rest), a detach() is refused */
    if (pygpu_allocation_hold(st, (PyObject *)v, &held) < 0) {
        pygpu_scope_exit(&s);
        return NULL;
    }
    r = grow_to(st, v, n, want);
    pygpu_allocation_unhold(held);
    pygpu_scope_exit(&s);
    if (r < 0)
        return NULL;
    Py_RETURN_NONE;
}

/* _export_fds(): [(fd, size), ...], one per chunk; the caller owns the fds */
static PyObject *
vmm_export_fds(pygpu_VirtualBuffer *v, PyObject *unused)
{
    pygpu_state *st = PYGPU_STATE(v);
    PyObject *list = NULL, *item;
    pygpu_scope s;
    CUresult rc;
    int i, fd;
    if (vmm_check(st, v, "export_buffer()") < 0
        || pygpu_need_entry(st, (void *)cu.cuMemExportToShareableHandle,
                            "cuMemExportToShareableHandle", "export_buffer()")
               < 0)
        return NULL;
    if (!v->shareable) {
        PyErr_SetString(PyExc_ValueError, "export_buffer(): the VirtualBuffer was made "
                                          "without shareable=True");
        return NULL;
    }
    if ((list = PyList_New(0)) == NULL)
        return NULL;
    if (pygpu_scope_enter(st, v->base.context, &s) < 0)
        goto error;
    for (i = 0; i < v->nchunks; i++) {
        fd = -1;
        rc = cu.cuMemExportToShareableHandle(&fd, v->chunks[i],
                                             CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
        if (rc != CUDA_SUCCESS) {
            pygpu_scope_exit(&s);
            pygpu_cuda_error(st, rc, "cuMemExportToShareableHandle");
            goto error;
        }
        item = Py_BuildValue("(in)", fd, (Py_ssize_t)v->chunk_size[i]);
        if (item == NULL || PyList_Append(list, item) < 0) {
            Py_XDECREF(item);
            close(fd);
            pygpu_scope_exit(&s);
            goto error;
        }
        Py_DECREF(item);
    }
    pygpu_scope_exit(&s);
    return list;
error:
    /* close the fds already made */
    if (list != NULL) {
        Py_ssize_t j;
        for (j = 0; j < PyList_GET_SIZE(list); j++)
            close((int)PyLong_AsLong(PyTuple_GET_ITEM(PyList_GET_ITEM(list, j), 0)));
        Py_DECREF(list);
    }
    return NULL;
}

/* _import_fds(chunks, nbytes): a VirtualBuffer mapping the chunks (a
 * sequence of (fd, size)) of another process's buffer; the fds stay the
 * caller's */
static PyObject *
vmm_import_fds(PyObject *cls, PyObject *args)
{
    PyTypeObject *type = (PyTypeObject *)cls;
    pygpu_state *st = pygpu_state_from_type(type);
    PyObject *seq, *fast = NULL;
    Py_ssize_t nbytes, i, n;
    pygpu_VirtualBuffer *v = NULL;
    pygpu_scope s;
    int entered = 0;
    if (!PyArg_ParseTuple(args, "On:_import_fds", &seq, &nbytes))
        return NULL;
    if ((fast = PySequence_Fast(seq, "import_buffer(): chunks must be a sequence")) == NULL)
        return NULL;
    if ((v = vmm_empty(st, type, 1, "import_buffer()")) == NULL)
        goto error;
    if (pygpu_need_entry(st, (void *)cu.cuMemImportFromShareableHandle,
                         "cuMemImportFromShareableHandle", "import_buffer()")
            < 0
        || pygpu_scope_enter(st, v->base.context, &s) < 0)
        goto error;
    entered = 1;
    n = PySequence_Fast_GET_SIZE(fast);
    for (i = 0; i < n; i++) {
        CUmemGenericAllocationHandle h;
        int fd;
        Py_ssize_t size;
        CUresult rc;
        if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(fast, i), "in", &fd, &size))
            goto error;
        if (size <= 0 || (size_t)size % v->gran != 0) {
            PyErr_Format(PyExc_ValueError,
                         "import_buffer(): chunk %zd has %zd "
                         "bytes, not a multiple of the granularity %zu",
                         i, size, v->gran);
            goto error;
        }
        rc = cu.cuMemImportFromShareableHandle(&h, (void *)(intptr_t)fd,
                                               CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
        if (rc != CUDA_SUCCESS) {
            pygpu_cuda_error_ex(st, rc, "cuMemImportFromShareableHandle",
                                "the file descriptor must come from export_buffer() "
                                "of a live buffer");
            goto error;
        }
        if (append_chunk(st, v, h, (size_t)size, 0) < 0) {
            (void)cu.cuMemRelease(h);
            goto error;
        }
    }
    if (nbytes < 0 || (size_t)nbytes > v->mapped) {
        PyErr_Format(PyExc_ValueError,
                     "import_buffer(): nbytes %zd does not fit "
                     "the %zu bytes of the chunks",
                     nbytes, v->mapped);
        goto error;
    }
    v->base.size = (size_t)nbytes;
    pygpu_scope_exit(&s);
    Py_DECREF(fast);
    return (PyObject *)v;
error:
    if (entered)
        pygpu_scope_exit(&s);
    Py_XDECREF(v);
    Py_XDECREF(fast);
    return NULL;
}

static PyObject *
vmm_get_mapped(pygpu_VirtualBuffer *v, void *c)
{
    return PyLong_FromSize_t(v->mapped);
}

static PyObject *
vmm_get_reserved(pygpu_VirtualBuffer *v, void *c)
{
    return PyLong_FromSize_t(reserved(v));
}

static PyObject *
vmm_get_granularity(pygpu_VirtualBuffer *v, void *c)
{
    return PyLong_FromSize_t(v->gran);
}

static PyObject *
vmm_get_shareable(pygpu_VirtualBuffer *v, void *c)
{
    return PyBool_FromLong(v->shareable);
}

static PyObject *
vmm_get_device(pygpu_VirtualBuffer *v, void *c)
{
    return PyLong_FromLong(v->device);
}

static PyObject *
vmm_get_chunks(pygpu_VirtualBuffer *v, void *c)
{
    return PyLong_FromLong(v->nchunks);
}

static PyObject *
vmm_repr(pygpu_VirtualBuffer *v)
{
    char addr[32];
    if (v->base.freed)
        return PyUnicode_FromFormat("<pygpu.driver.VirtualBuffer (freed)>");
    snprintf(addr, sizeof addr, "0x%llx", (unsigned long long)v->base.ptr);
    return PyUnicode_FromFormat("<pygpu.driver.VirtualBuffer at %s, %zu bytes (%zu mapped, "
                                "%zu reserved)>",
                                addr, v->base.size, v->mapped, reserved(v));
}

#define CF(f) (PyCFunction)(void (*)(void))(f)
static PyMethodDef vmm_methods[] = {
    {"grow", CF(vmm_grow), METH_VARARGS | METH_KEYWORDS,
     "grow($self, /, nbytes, reserve=0)\n--\n\n"
     "Make the buffer nbytes long, keeping its contents. int(buf) stays the same "
     "when the address space after the buffer is free (reserve= sets aside that "
     "much up front; by default twice nbytes), else the memory is mapped again at "
     "a new address."},
    {"_export_fds", (PyCFunction)vmm_export_fds, METH_NOARGS, "_export_fds($self, /)\n--\n\n"},
    {"_import_fds", (PyCFunction)vmm_import_fds, METH_VARARGS | METH_CLASS, NULL},
    {NULL},
};

static PyGetSetDef vmm_getset[] = {
    {"mapped", (getter)vmm_get_mapped, NULL, "Bytes of physical memory mapped.", NULL},
    {"reserved", (getter)vmm_get_reserved, NULL, "Bytes of address space reserved.", NULL},
    {"granularity", (getter)vmm_get_granularity, NULL,
     "The allocation granularity (cuMemGetAllocationGranularity).", NULL},
    {"shareable", (getter)vmm_get_shareable, NULL,
     "Whether the memory can be exported as POSIX file descriptors.", NULL},
    {"device", (getter)vmm_get_device, NULL, "The device ordinal.", NULL},
    {"nchunks", (getter)vmm_get_chunks, NULL, "Physical allocations mapped.", NULL},
    {NULL},
};

static PyType_Slot vmm_slots[] = {
    {Py_tp_new, vmm_new},
    {Py_tp_init, pygpu_init_made},
    {Py_tp_dealloc, vmm_dealloc},
    {Py_tp_methods, vmm_methods},
    {Py_tp_getset, vmm_getset},
    {Py_tp_repr, vmm_repr},
    {Py_tp_doc, "VirtualBuffer(nbytes=0, reserve=0, shareable=False)\n--\n\n"
                "A growable device buffer on the current context's device, over "
                "cuMemAddressReserve/cuMemCreate/cuMemMap/cuMemSetAccess. A "
                "DeviceAllocation: kernels, copies and the CUDA Array Interface "
                "take it. grow() keeps the contents; shareable=True lets export_buffer() "
                "hand the memory to another process as POSIX file descriptors"
                " (pygpu.ipc.export_buffer)."},
    {0, NULL},
};

static PyType_Spec vmm_spec = {"pygpu.driver.VirtualBuffer", sizeof(pygpu_VirtualBuffer), 0,
                               Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE | Py_TPFLAGS_BASETYPE,
                               vmm_slots};

int pygpu_add_allocation_subtype(PyObject *m, pygpu_state *st, PyType_Spec *spec,
                                 PyTypeObject **slot);

int
pygpu_vmm_setup(PyObject *m, pygpu_state *st)
{
    return pygpu_add_allocation_subtype(m, st, &vmm_spec, &st->VirtualBufferType);
}
