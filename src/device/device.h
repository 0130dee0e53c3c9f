/* device/: Device, Context, Stream, Event; scoped activation.  Included by pygpu.h. */
#ifndef PYGPU_DEVICE_H
#define PYGPU_DEVICE_H

typedef struct {
    PyObject_HEAD CUdevice handle;
    int ordinal;
} pygpu_Device;

struct pygpu_Context {
    PyObject_HEAD CUcontext handle; /* owned unless !owns */
    PyObject *device;               /* strong ref: the pygpu_Device */
    int ordinal;
    int is_primary; /* handle is a retained primary context */
    int owns;       /* destroy/release on detach or dealloc */
    int detached;
    pygpu_Context *next_other; /* link in state->other_contexts */
    /* launch limits, read once on first launch in this context */
    int limits_read;
    int pool_configured; /* the default mem pool's release threshold set */
    int max_block[3], max_grid[3], max_threads, max_shared_optin;
    struct pygpu_staging *staging; /* owned: pinned buffers for pageable copies */
    PyObject *weakreflist;
    /* borrowed: the DeviceAllocations made in this context (each unlinks
     * itself when its memory is freed or it dies); detach() frees them and
     * marks them freed, so none reaches the driver afterwards */
    struct pygpu_DeviceAllocation *allocations;
    /* copies using one of this context's Arrays running with the GIL
     * released (pygpu_array_hold): detach() is refused meanwhile */
    Py_ssize_t arrays_busy;
    /* page-locked blocks (cuMemHostAlloc) of this context alive: host views
     * that a detach must not free (memory/lifetime.c) */
    Py_ssize_t host_allocs;
    /* detached while host views of its memory live: the handle's release
     * waits for the last one (memory/lifetime.c) */
    int release_deferred;
    /* owned (blockcache.c): freed device blocks kept for reuse, or NULL */
    struct pygpu_blockcache *blocks;
    /* owned when not NULL: the green context this handle was converted from
     * (device/greenctx.c); its release is cuGreenCtxDestroy, not cuCtxDestroy */
    CUgreenCtx green;
};

typedef struct {
    PyObject_HEAD CUstream handle; /* owned unless !owns */
    pygpu_Context *context;        /* strong ref (may be NULL for the null stream before use) */
    PyObject *owner;               /* strong ref to a foreign owner, or NULL */
    int owns;
    PyObject *weakreflist;
    PyObject *capture_keep; /* strong list while capturing (graph.c), else NULL */
} pygpu_Stream;

typedef struct {
    PyObject_HEAD CUevent handle; /* owned */
    pygpu_Context *context;       /* strong ref */
} pygpu_Event;

/* context.c */
pygpu_Context *pygpu_current_context(pygpu_state *st); /* borrowed; ensures one */
/* This thread's remembered current context (docs/contexts.md): the same as
 * pygpu_current_context without asking the driver when this thread's
 * answer is known; for paths that make nothing in it.  Borrowed. */
pygpu_Context *pygpu_current_context_known(pygpu_state *st);
/* The same as a new reference, or None when no context is current. */
PyObject *pygpu_current_context_or_none(pygpu_state *st);
/* Forget every thread's remembered answer (a context was detached,
 * released or died), or only this thread's (it may be stale).  GIL held. */
void pygpu_context_forget_all(void);
void pygpu_context_forget_current(void);
/* 1 when ctx is current on this thread (asks the driver only when not
 * known), else 0. */
int pygpu_context_is_current(pygpu_Context *ctx);
/* After a driver call failed while the remembered answer said ctx was
 * current: asks the driver; 1 when ctx is in fact not current (the answer
 * was stale: retry the call after activating ctx), else 0. */
int pygpu_context_recheck(pygpu_Context *ctx);
pygpu_Context *pygpu_context_for_handle(pygpu_state *st, CUcontext h); /* borrowed */
int pygpu_context_check(pygpu_state *st, pygpu_Context *ctx);

/* Scoped activation: the one way to run driver calls in an object's context.
 *   pygpu_scope s;
 *   if (pygpu_scope_enter(st, ctx, &s) < 0) return NULL;   // LogicError if detached
 *   rc = cu.cuXxx(...);            // may release the GIL around it
 *   pygpu_scope_exit(&s);          // pops if it pushed; drops the reference
 * The scope holds a strong reference to ctx, so a context detached or dropped
 * meanwhile (from a JIT handler, __index__, or another thread while the GIL is
 * released) stays a valid object until the scope ends.  GIL held at enter and
 * exit. */
typedef struct {
    pygpu_Context *ctx; /* strong ref */
    int pushed;
} pygpu_scope;
int pygpu_scope_enter(pygpu_state *st, pygpu_Context *ctx, pygpu_scope *s);
void pygpu_scope_exit(pygpu_scope *s);
/* The same for release paths (dealloc, free()): returns -1 without raising
 * when ctx is detached or cannot be pushed. */
int pygpu_scope_enter_quiet(pygpu_Context *ctx, pygpu_scope *s);
/* A library call that may change this thread's current context behind
 * pygpu's back (NCCL's cudaSetDevice): the handle current before it
 * (the driver's answer), and after it that handle
 * made current again where the call replaced it, pygpu's remembered answer
 * kept right.  pygpu_context_restore returns what the call left current.
 * The one way such calls run (interop/nccl.c).  No GIL needed. */
CUcontext pygpu_context_save(void);
CUcontext pygpu_context_restore(CUcontext before);
/* push ctx if it is not current; *pushed says whether to pop.  No GIL needed. */
CUresult pygpu_context_enter(pygpu_Context *ctx, int *pushed);
void pygpu_context_exit(int pushed);
/* The release of a detached context's handle that waited for its host views
 * (memory/lifetime.c).  GIL held; never raises. */
void pygpu_context_release_deferred(pygpu_Context *ctx);
int pygpu_context_read_limits(pygpu_state *st, pygpu_Context *ctx);
/* A new owned, non-primary Context of type tp (ContextType or a C subtype
 * of it: device/greenctx.c) for handle h on device ordinal, linked like
 * make_context()'s; the subtype's own fields are the caller's to set.  New
 * reference, or NULL with an exception (h is then not released). */
pygpu_Context *pygpu_context_new_as(pygpu_state *st, PyTypeObject *tp, CUcontext h, int ordinal);
PyObject *pygpu_device_new(pygpu_state *st, int ordinal);

/* stream.c: resolve a stream argument (None, Stream, int 0/1/2,
 * __cuda_stream__); a Stream whose context was detached is a LogicError. */
int pygpu_get_stream(pygpu_state *st, PyObject *obj, CUstream *out);

int pygpu_device_setup(PyObject *m, pygpu_state *st);
int pygpu_context_setup(PyObject *m, pygpu_state *st);
int pygpu_stream_setup(PyObject *m, pygpu_state *st);
int pygpu_event_setup(PyObject *m, pygpu_state *st);

/* stream.c: a new Stream owning handle h, made in ctx.  NULL with an
 * exception (h is then not destroyed). */
PyObject *pygpu_stream_wrap(pygpu_state *st, CUstream h, pygpu_Context *ctx);

/* greenctx.c: green contexts, SM partitions (docs/green_contexts.md) */
PyObject *pygpu_device_split_sms(pygpu_Device *self, PyObject *args, PyObject *kwds);
PyObject *pygpu_device_sm_partitioning(pygpu_Device *self, PyObject *unused);
int pygpu_greenctx_setup(PyObject *m, pygpu_state *st);

/* checkpoint.c: cuCheckpointProcess* (docs/checkpoint.md) */
int pygpu_checkpoint_setup(PyObject *m, pygpu_state *st);

#endif
