/* memory/: allocations, lifetime (holds, pins, host views, detach), copies,
 * staging, the block cache, IPC, VMM, pools.  Included by pygpu.h. */
#ifndef PYGPU_MEMORY_H
#define PYGPU_MEMORY_H

/* What owns a DeviceAllocation's memory, and so how it goes back
 * (lifetime.c decides when; allocation.c, ipc.c and vmm.c how). */
typedef enum {
    PYGPU_ALLOC_DEVICE = 0,   /* cuMemAlloc: cuMemFree */
    PYGPU_ALLOC_MANAGED = 1,  /* cuMemAllocManaged: host views may read it */
    PYGPU_ALLOC_POOL = 2,     /* cuMemAllocAsync (the pool, the block cache): freed on its stream */
    PYGPU_ALLOC_BORROWED = 3, /* not owned (a module's global, foreign memory): never freed */
    PYGPU_ALLOC_IPC = 4,      /* an opened IPC handle: cuIpcCloseMemHandle */
    PYGPU_ALLOC_VIRTUAL = 5,  /* a VirtualBuffer: unmap, release, free the reservation */
} pygpu_alloc_kind;

typedef struct pygpu_DeviceAllocation {
    PyObject_HEAD CUdeviceptr ptr; /* owned: freed by allocation_release */
    size_t size;
    pygpu_Context *context; /* strong ref */
    pygpu_alloc_kind kind;  /* what owns the memory, how it goes back */
    PyObject *owner;        /* strong ref: BORROWED, what owns the memory (e.g. the
                                  Module of a global); POOL, its stream */
    int freed;              /* 1 free()d, 2 its context was detached */
    CUstream free_stream;   /* POOL: stream to free on */
    PyObject *weakreflist;
    int busy;                 /* driver calls using the memory with the GIL released */
    int free_pending;         /* free() came while busy or held: the last user frees */
    struct pygpu_hold *holds; /* owned list (hold.c): who keeps the address for later */
    int in_capture;           /* POOL made on a stream while pygpu captured it */
    size_t block;             /* POOL: the bytes of the block-cache block it lies in
                                  (its class, >= size); 0: not the cache's (freed to the
                                  driver, never cached) */
    /* borrowed links in context->allocations */
    struct pygpu_DeviceAllocation *ctx_prev, *ctx_next;
    int host_view; /* MANAGED: host code may read the memory through an ndarray
                                  or buffer that keeps this object alive (managed_empty(),
                                  as_buffer()): free() marks it freed, the memory goes with
                                  this object */
} pygpu_DeviceAllocation;

typedef struct {
    PyObject_HEAD void *ptr; /* owned: cuMemFreeHost or cuMemHostUnregister */
    size_t size;
    unsigned int flags;
    int registered;         /* 1: cuMemHostRegister'd memory of `owner` */
    PyObject *owner;        /* strong ref for registered memory */
    Py_buffer view;         /* held for registered memory */
    pygpu_Context *context; /* strong ref */
    int freed;
    Py_ssize_t exports; /* live buffer exports */
    int closed;         /* free() or unregister() called: no further use through
                                  this object; registered memory is unregistered then,
                                  page-locked memory goes with this object (arrays over
                                  it may live on) */
} pygpu_HostAllocation;

/* memory.c */
/* resolve a device pointer: DeviceAllocation, int, __cuda_array_interface__,
 * None (-> 0 when allow_none).  Returns 0 or -1; *size = capacity or
 * (size_t)-1 when unknown. */
int pygpu_get_device_ptr(pygpu_state *st, PyObject *obj, CUdeviceptr *ptr, size_t *size,
                         int allow_none);
int pygpu_get_dlpack_ptr(pygpu_state *st, PyObject *obj, CUdeviceptr *ptr);
/* a DeviceAllocation that does not own ptr; owner is kept alive with it */
PyObject *pygpu_borrowed_allocation(pygpu_state *st, pygpu_Context *ctx, CUdeviceptr ptr,
                                    size_t size, PyObject *owner);
/* lifetime.c, context detach (see there): frees the memory of ctx that no
 * host view reaches and marks every allocation detached; returns how many
 * host views keep memory (the context's release then waits:
 * pygpu_lifetime_view_gone), or -1 with LogicError (nothing done) while a
 * copy into its memory runs with the GIL released.  GIL held. */
int pygpu_lifetime_detach(pygpu_state *st, pygpu_Context *ctx);
/* The scope a release path frees memory in: pygpu_scope_enter_quiet, or
 * for a detached context whose release waits for host views, its handle as
 * it is.  0 or -1 (nothing to free there); never raises. */
int pygpu_lifetime_enter(pygpu_Context *ctx, pygpu_scope *s);
/* A host view of ctx's memory went (an allocation or a page-locked block
 * died): the deferred release of a detached ctx happens with the last. */
void pygpu_lifetime_view_gone(pygpu_Context *ctx);
/* allocation.c: take a out of its context's list; give its memory back
 * (unlinks it).  Never raise.  GIL held. */
void pygpu_allocation_unlink(pygpu_DeviceAllocation *a);
void pygpu_allocation_free_memory(pygpu_DeviceAllocation *a);

/* memory.c: a contiguous host buffer (no Python objects in it); TypeError
 * naming what otherwise. */
int pygpu_get_host_buffer(PyObject *obj, Py_buffer *view, int writable, const char *what);
/* memory.c: hold a DeviceAllocation (when obj is one) across a driver call
 * made with the GIL released: a free() meanwhile is deferred to the unhold. */
int pygpu_allocation_hold(pygpu_state *st, PyObject *obj, pygpu_DeviceAllocation **held);
void pygpu_allocation_unhold(pygpu_DeviceAllocation *a);

/* A DeviceAllocation or one of its subtypes (IPCMemoryHandle, VirtualBuffer,
 * a Python subclass of any): the C types in two pointer compares. */
static inline int
pygpu_is_allocation(pygpu_state *st, PyObject *o)
{
    PyTypeObject *t = Py_TYPE(o);
    return t == st->DeviceAllocationType || t->tp_base == st->DeviceAllocationType
           || PyType_IsSubtype(t, st->DeviceAllocationType); /* a Python subclass */
}
/* allocation.c: a new allocation object of type tp (DeviceAllocationType
 * or a subtype) holding ptr, of the given kind.  GIL held. */
PyObject *pygpu_allocation_new(pygpu_state *st, PyTypeObject *tp, pygpu_Context *ctx,
                               CUdeviceptr ptr, size_t size, pygpu_alloc_kind kind);
/* ipc.c: frees IPC (cuIpcCloseMemHandle); vmm.c: VIRTUAL (unmap,
 * release, free the reservation).  The context is current; never raises. */
void pygpu_ipc_close(pygpu_DeviceAllocation *a);
void pygpu_vmm_release(pygpu_DeviceAllocation *a);
int pygpu_ipc_setup(PyObject *m, pygpu_state *st);
int pygpu_vmm_setup(PyObject *m, pygpu_state *st);
int pygpu_mempool_setup(PyObject *m, pygpu_state *st);
/* memextra.c: memset_d2d*, mem_get_address_range, initialize_profiler */
int pygpu_memextra_setup(PyObject *m, pygpu_state *st);
/* hostblock.c: HostBlock (recycled 2 MiB-aligned host mappings for get()) */
int pygpu_hostblock_setup(PyObject *m, pygpu_state *st);
/* ---- hold.c: the one hold protocol ----
 * Anything that keeps a device address for later use (graph nodes, captured
 * graphs, texture and surface objects, tensor maps, IPC exports) holds the
 * allocation (a DeviceAllocation, a subtype, or an Array) that owns it.
 * The rule: free() of held memory is deferred.  The object is marked freed
 * at once (no new use starts), and the memory goes back to the driver when
 * the last holder goes.  VirtualBuffer.grow() keeps a held range mapped.
 * All GIL held. */
typedef struct pygpu_hold pygpu_hold;
/* A token (a capsule) holding target while it lives; `what` names the
 * holder ("graph node #3 (kernel 'axpy')").  LogicError when target was
 * freed or its context detached; TypeError when it holds no memory. */
PyObject *pygpu_hold_new(pygpu_state *st, PyObject *target, const char *what);
/* The same for a device pointer argument: a DeviceAllocation directly; an
 * object with __cuda_array_interface__ through the live pygpu allocation
 * that contains its address.  Py_None (a new reference) when obj is no
 * pygpu memory (an int address, a scalar, foreign memory). */
PyObject *pygpu_hold_arg(pygpu_state *st, PyObject *obj, const char *what);
/* hold.c: as pygpu_hold_arg, and an int is a device address (a copy's
 * side): a hold on the live pygpu allocation containing it, or None. */
PyObject *pygpu_hold_address(pygpu_state *st, PyObject *obj, const char *what);
/* Tokens for each argument of a launch: a list (maybe empty), or NULL. */
PyObject *pygpu_hold_args(pygpu_state *st, PyObject *const *args, Py_ssize_t n, const char *what);
/* A hold owned by target itself (an IPC export: another process may use
 * the memory until target dies).  0 or -1. */
int pygpu_hold_forever(pygpu_state *st, PyObject *target, const char *what);
/* Drop the holds target owns (its dealloc); the list is then empty. */
void pygpu_holds_drop(pygpu_hold **list);
/* The holders' names, a tuple of str. */
PyObject *pygpu_holders(pygpu_hold *list);
Py_ssize_t pygpu_holds_count(pygpu_hold *list);
/* memory.c, cuarray.c: the last hold of a went; a free() deferred meanwhile
 * is carried out now. */
void pygpu_allocation_holds_gone(pygpu_DeviceAllocation *a);
/* vmm.c: the address ranges a grow() kept mapped for holders are released
 * (no hold remains).  The context is current. */
void pygpu_vmm_release_retired(pygpu_DeviceAllocation *a);
/* memory.c: set the default pool's release threshold once per context
 * (capture-safe); ctx current. */
void pygpu_keep_pool_memory(pygpu_Context *ctx);
/* staging.c: 1 copied, 0 not applicable, -1 error.  GIL held. */
int pygpu_staged_copy(pygpu_state *st, int htod, void *host, CUdeviceptr dev, size_t n);
void pygpu_staging_wake(pygpu_state *st);
/* staging.c: stops the context's staging threads, frees its buffers; GIL
 * held, the context current (or pushed); waits for a staged copy running
 * in it; never raises. */
void pygpu_staging_free(pygpu_Context *ctx);
/* staging.c: 1 if a synchronous pageable copy of n bytes would be staged
 * (by size), 0 if not, -1 with ValueError (bad PYGPU_STAGING_* variable).
 * GIL held. */
int pygpu_staging_applies(size_t n);

/* ---- blockcache.c: freed device blocks kept for reuse (docs/memory.md) ----
 * A context's cache holds blocks of the stream-ordered pool that
 * mem_alloc_async made in size classes, keyed by the stream they were last
 * freed on; a block is handed out again only to an allocation on that
 * stream.  All GIL held. */
/* The class bytes of a cached block for a request of n bytes; 0 when n is
 * not cached (0 bytes, over the largest cached size, the cache off);
 * (size_t)-1 with ValueError (a bad PYGPU_BLOCK_CACHE* variable). */
size_t pygpu_blockcache_class(size_t n);
/* A block of class bytes `size` last freed on s: 1 and *ptr (a hit), else
 * 0 (a miss, counted). */
int pygpu_blockcache_get(pygpu_Context *ctx, CUstream s, size_t size, CUdeviceptr *ptr);
/* Keep ptr (class bytes size, freed in stream order on s): 1, or 0 when the
 * caller must free it (the cache is full or off). */
int pygpu_blockcache_put(pygpu_Context *ctx, CUstream s, CUdeviceptr ptr, size_t size);
/* Give cached blocks back to the pool (cuMemFreeAsync on each one's
 * stream) until at most keep bytes stay; the number of blocks given back.
 * ctx live and current. */
Py_ssize_t pygpu_blockcache_trim(pygpu_Context *ctx, size_t keep);
/* The pool is out of memory: every block back to it (counted); the
 * number given back (0: retrying is no use).  ctx live and current. */
Py_ssize_t pygpu_blockcache_flush_oom(pygpu_Context *ctx);
/* The blocks last freed on stream s go back to the pool (the stream is
 * being destroyed).  s's context current. */
void pygpu_blockcache_drop_stream(pygpu_Context *ctx, CUstream s);
/* Teardown: every block back to the pool, the cache freed.  ctx current. */
void pygpu_blockcache_release(pygpu_Context *ctx);
/* The cache freed without driver calls (the context is gone or forked). */
void pygpu_blockcache_drop(pygpu_Context *ctx);
int pygpu_blockcache_setup(PyObject *m, pygpu_state *st);

/* blockcache.c: pygpu_blockcache_get without counting a miss */
int pygpu_blockcache_take(pygpu_Context *ctx, CUstream s, size_t size, CUdeviceptr *ptr);
/* memory.c: n bytes from ctx's block cache on the default stream, as
 * mem_alloc_async(n) takes them: 1 and *res a new DeviceAllocation, 0 (no
 * cached block: call the allocator), -1 with an exception. */
int pygpu_blockcache_allocation(pygpu_state *st, pygpu_Context *ctx, size_t n, PyObject **res);
/* allocation.c: the check every use of an allocation makes (LogicError when
 * freed or its context detached); a device pointer argument resolved with
 * that check first; a byte count argument (TypeError/ValueError naming
 * what).  0 or -1.  copies.c: n bytes fit in cap (ValueError naming what
 * and side).  GIL held. */
int pygpu_allocation_check(pygpu_state *st, pygpu_DeviceAllocation *a);
int pygpu_allocation_ptr(pygpu_state *st, PyObject *obj, CUdeviceptr *ptr, size_t *size);
int pygpu_parse_nbytes(PyObject *obj, size_t *out, const char *what);
int pygpu_check_fits(size_t n, size_t cap, const char *what, const char *side);

int pygpu_memory_setup(PyObject *m, pygpu_state *st);
int pygpu_copies_setup(PyObject *m, pygpu_state *st);
int pygpu_hostmem_setup(PyObject *m, pygpu_state *st);
int pygpu_staging_setup(PyObject *m, pygpu_state *st);

#endif
