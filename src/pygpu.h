/* pygpu._driver: shared declarations.
 *
 * Lifetime rules (DESIGN.md): every CUDA handle lives in exactly one object;
 * a dependent object holds a strong reference to what it depends on, so the
 * parent outlives the child.  Dealloc frees in the owning context, never
 * raises and stays silent once the interpreter or the context is gone.
 */
#ifndef PYGPU_H
#define PYGPU_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <cuda.h>
#include <cudaTypedefs.h>
#include <nvrtc.h>
#include "cuda_api.h"

#if PY_VERSION_HEX < 0x030B0000
#define PyFloat_Pack2(x, p, le) _PyFloat_Pack2((x), (unsigned char *)(p), (le))
#endif
#if PY_VERSION_HEX < 0x030A0000
static inline PyObject *Py_NewRef(PyObject *o) { Py_INCREF(o); return o; }
#endif
#ifndef Py_TPFLAGS_IMMUTABLETYPE
#define Py_TPFLAGS_IMMUTABLETYPE 0   /* Python 3.9 */
#endif
#ifndef Py_TPFLAGS_DISALLOW_INSTANTIATION
#define Py_TPFLAGS_DISALLOW_INSTANTIATION 0
#endif

/* ---- loader.c: the one process-wide global, a table of C pointers ---- */

#define PYGPU_CU_FIELD(name, version) PFN_##name##_v##version name;
typedef struct {
    PYGPU_CUDA_API(PYGPU_CU_FIELD, PYGPU_CU_FIELD)
    CUresult (*getProcAddress)(const char *, void **, int, cuuint64_t,
                               CUdriverProcAddressQueryResult *);
    CUresult (*getProcAddress_v1)(const char *, void **, int, cuuint64_t);
} pygpu_cuda_table;
#undef PYGPU_CU_FIELD

#define PYGPU_NV_FIELD(ret, name, args) ret (*name) args;
typedef struct {
    PYGPU_NVRTC_API(PYGPU_NV_FIELD)
} pygpu_nvrtc_table;
#undef PYGPU_NV_FIELD

extern pygpu_cuda_table pygpu_cu;
extern pygpu_nvrtc_table pygpu_nv;
#define cu pygpu_cu
#define nv pygpu_nv

/* ---- module state ---- */

typedef struct pygpu_Context pygpu_Context;

typedef struct {
    /* exceptions */
    PyObject *Error, *LogicError, *LaunchError, *MemoryError, *RuntimeError,
             *CudaUnavailableError;
    /* types */
    PyTypeObject *DeviceType, *ContextType, *DeviceAllocationType,
                 *HostAllocationType, *ModuleType, *FunctionType,
                 *BoundLaunchType, *StreamType, *EventType,
                 *ArgumentHandlerType, *KernelTimeType;
    /* cuarray.c, texobj.c, tensormap.c */
    PyTypeObject *ArrayType, *ArrayDescriptorType, *ArrayDescriptor3DType,
                 *TextureObjectType, *SurfaceObjectType, *TensorMapType;
    PyTypeObject *GraphType, *GraphNodeType, *GraphExecType;   /* graph.c */
    /* strong refs: one primary Context per device ordinal, created on first
     * use and kept until the module is torn down */
    PyObject *primary_contexts;           /* dict: ordinal -> Context */
    PyObject *foreign_contexts;           /* dict: handle -> non-owning Context */
    /* borrowed: contexts made by make_context() or wrapped from a foreign
     * handle; each removes itself in its dealloc */
    pygpu_Context *other_contexts;
    /* borrowed cache of the last context looked up by handle */
    CUcontext last_handle;
    pygpu_Context *last_ctx;
    PyObject *gc_collect;                 /* strong: gc.collect */
    PyObject *str_cai;                    /* interned "__cuda_array_interface__" */
    PyObject *str_dlpack;                 /* interned "__dlpack__" */
    PyObject *str_cuda_stream;            /* interned "__cuda_stream__" */
    PyObject *str_block, *str_grid, *str_shared, *str_stream, *str_time_kernel;
    PyObject *handlers_begin, *handlers_end; /* strong: pygpu.driver's In/Out hooks */
    int warned_no_param_info;
    /* nvtx.c */
    PyTypeObject *TimeRangeType;
    PyObject *range_wrapper;              /* strong: pygpu.profiler's decorator maker */
    /* multi.c / ipc.c / vmm.c / mempool.c (processes, several GPUs) */
    PyTypeObject *IPCMemoryHandleType, *VirtualBufferType, *MemoryPoolType;
    PyTypeObject *HostBlockType;          /* hostblock.c */
} pygpu_state;

extern PyModuleDef pygpu_moduledef;

/* pygpu._driver (borrowed) from one of its types or a subclass of one: a
 * Python class (ht_module NULL) or another module's type.  The exact type
 * first, then its layout bases (tp_base, which a type keeps until it is
 * freed: a subclass instance's dealloc may run after the GC cleared the
 * dying subclass's tp_mro), then the MRO (a pygpu type without fields of its
 * own, ArgumentHandler, is not on the tp_base chain of class C(Mixin,
 * ArgumentHandler)): PyType_GetModuleByDef from 3.11, by hand on 3.9 and
 * 3.10.  NULL with a TypeError when no base is pygpu's. */
static inline PyObject *
pygpu_module_def_match(PyTypeObject *b)
{
    PyObject *m = (b->tp_flags & Py_TPFLAGS_HEAPTYPE) ? ((PyHeapTypeObject *)b)->ht_module
                                                     : NULL;
    return m != NULL && PyModule_GetDef(m) == &pygpu_moduledef ? m : NULL;
}

static inline PyObject *
pygpu_module_from_type(PyTypeObject *tp)
{
    PyTypeObject *b;
    PyObject *m;
    for (b = tp; b != NULL; b = b->tp_base) {
        if ((m = pygpu_module_def_match(b)) != NULL)
            return m;
    }
    if (tp->tp_mro != NULL) {
#if PY_VERSION_HEX >= 0x030B0000
        return PyType_GetModuleByDef(tp, &pygpu_moduledef);
#else
        Py_ssize_t i;
        for (i = 1; i < PyTuple_GET_SIZE(tp->tp_mro); i++) {
            if ((m = pygpu_module_def_match(
                     (PyTypeObject *)PyTuple_GET_ITEM(tp->tp_mro, i))) != NULL)
                return m;
        }
#endif
    }
    PyErr_Format(PyExc_TypeError, "'%s' is not a type of pygpu._driver nor a subclass "
                 "of one", tp->tp_name);
    return NULL;
}

static inline pygpu_state *
pygpu_state_from_type(PyTypeObject *tp)
{
    PyObject *m = pygpu_module_from_type(tp);
    return m != NULL ? (pygpu_state *)PyModule_GetState(m) : NULL;
}
#define PYGPU_STATE(self) pygpu_state_from_type(Py_TYPE(self))

/* Python 3.9's PyType_FromSpec drops the "Name(args)\n--\n\n" signature
 * from tp_doc, so such a type had no __text_signature__ (inspect.signature
 * failed): give it back the spec's whole doc.  0, or -1 with an exception. */
static inline int
pygpu_keep_text_signature(PyTypeObject *tp, const PyType_Spec *spec)
{
#if PY_VERSION_HEX < 0x030A0000
    const PyType_Slot *s;
    for (s = spec->slots; s->slot; s++) {
        if (s->slot == Py_tp_doc && s->pfunc != NULL) {
            size_t n = strlen((const char *)s->pfunc) + 1;
            char *doc = PyObject_Malloc(n);      /* type_dealloc frees it */
            if (doc == NULL) {
                PyErr_NoMemory();
                return -1;
            }
            memcpy(doc, s->pfunc, n);
            PyObject_Free((void *)tp->tp_doc);
            tp->tp_doc = doc;
        }
    }
#else
    (void)tp; (void)spec;
#endif
    return 0;
}

/* tp_init of the types made whole by tp_new: takes the constructor's
 * arguments and does nothing, so that a Python subclass's __init__ may call
 * Base.__init__(self, *args), as PyCUDA's (Boost.Python) classes let it. */
static inline int
pygpu_init_made(PyObject *self, PyObject *args, PyObject *kwds)
{
    (void)self; (void)args; (void)kwds;
    return 0;
}

/* ---- objects ---- */

typedef struct {
    PyObject_HEAD
    CUdevice handle;
    int ordinal;
} pygpu_Device;

struct pygpu_Context {
    PyObject_HEAD
    CUcontext handle;          /* owned unless !owns */
    PyObject *device;          /* strong ref: the pygpu_Device */
    int ordinal;
    int is_primary;            /* handle is a retained primary context */
    int owns;                  /* destroy/release on detach or dealloc */
    int detached;
    pygpu_Context *next_other; /* link in state->other_contexts */
    /* launch limits, read once on first launch in this context */
    int limits_read;
    int pool_configured;       /* the default mem pool's release threshold set */
    int max_block[3], max_grid[3], max_threads, max_shared_optin;
    struct pygpu_staging *staging;  /* owned: pinned buffers for pageable copies */
    PyObject *weakreflist;
    /* borrowed: the DeviceAllocations made in this context (each unlinks
     * itself when its memory is freed or it dies); detach() frees them and
     * marks them freed, so none reaches the driver afterwards */
    struct pygpu_DeviceAllocation *allocations;
    /* copies using one of this context's Arrays running with the GIL
     * released (pygpu_array_hold): detach() is refused meanwhile */
    Py_ssize_t arrays_busy;
    /* owned (blockcache.c): freed device blocks kept for reuse, or NULL */
    struct pygpu_blockcache *blocks;
};

typedef struct pygpu_DeviceAllocation {
    PyObject_HEAD
    CUdeviceptr ptr;           /* owned: freed by allocation_release */
    size_t size;
    pygpu_Context *context;    /* strong ref */
    int kind;                  /* 0 cuMemAlloc, 1 managed, 2 async (pool), 3 not owned */
    PyObject *owner;           /* strong ref: kind 3, what owns the memory (e.g. the
                                  Module of a global); kind 2, its stream */
    int freed;                 /* 1 free()d, 2 its context was detached */
    CUstream free_stream;      /* for kind 2: stream to free on */
    PyObject *weakreflist;
    int busy;                  /* driver calls using the memory with the GIL released */
    int free_pending;          /* free() came while busy or held: the last user frees */
    struct pygpu_hold *holds;  /* owned list (hold.c): who keeps the address for later */
    int in_capture;            /* kind 2 made on a stream while pygpu captured it */
    size_t block;              /* kind 2: the bytes of the block-cache block it lies in
                                  (its class, >= size); 0: not the cache's (freed to the
                                  driver, never cached) */
    /* borrowed links in context->allocations */
    struct pygpu_DeviceAllocation *ctx_prev, *ctx_next;
    int host_view;             /* kind 1: host code may read the memory through an ndarray
                                  or buffer that keeps this object alive (managed_empty(),
                                  as_buffer()): free() marks it freed, the memory goes with
                                  this object */
} pygpu_DeviceAllocation;

typedef struct {
    PyObject_HEAD
    void *ptr;                 /* owned: cuMemFreeHost or cuMemHostUnregister */
    size_t size;
    unsigned int flags;
    int registered;            /* 1: cuMemHostRegister'd memory of `owner` */
    PyObject *owner;           /* strong ref for registered memory */
    Py_buffer view;            /* held for registered memory */
    pygpu_Context *context;    /* strong ref */
    int freed;
    Py_ssize_t exports;        /* live buffer exports */
    int closed;                /* free() or unregister() called: no further use through
                                  this object; registered memory is unregistered then,
                                  page-locked memory goes with this object (arrays over
                                  it may live on) */
} pygpu_HostAllocation;

typedef struct {
    PyObject_HEAD
    CUmodule handle;           /* owned */
    pygpu_Context *context;    /* strong ref */
    PyObject *functions;       /* dict name -> Function (cache) */
    PyObject *info_log;        /* str */
    int unloaded;
} pygpu_Module;

/* ---- the launch path: args.c (layouts, packing), launch.c (configuration,
 * the one sink, BoundLaunch), function.c (the Function type) ---- */

typedef struct {
    size_t offset, size;
} pygpu_param;

/* A kernel's parameter layout.  Immutable once published in a Function;
 * shared by reference count (GIL-protected) with every call that uses it, so
 * prepare() or a second thread replacing it never frees what a call reads. */
typedef struct pygpu_layout {
    Py_ssize_t refs;
    int nparams;              /* -1: unknown (no cuFuncGetParamInfo, not prepared) */
    int known;                /* 1: sizes from cuFuncGetParamInfo */
    size_t total;             /* bytes the packed values span */
    char *prepared;           /* owned: prepare() type codes, nparams of them, or NULL */
    pygpu_param params[];     /* nparams entries when nparams > 0 */
} pygpu_layout;

#define PYGPU_PACK_INLINE_BYTES 512
#define PYGPU_PACK_INLINE_PARAMS 48

/* The packed arguments of one launch.  Storage belongs to the call (inline,
 * on the C stack, up to the sizes above; heap beyond), never to the Function,
 * so concurrent and re-entrant launches cannot see each other's values. */
typedef struct {
    pygpu_layout *layout;     /* counted reference */
    const pygpu_param *params;
    int nparams;
    char *buf;                /* the values */
    void **ptrs;              /* kernelParams: ptrs[i] = buf + params[i].offset */
    void *heap;               /* owned: buf/ptrs/params beyond the inline storage */
    PyObject *handlers;       /* strong: In/Out/InOut bookkeeping, or NULL */
    _Alignas(16) char inline_buf[PYGPU_PACK_INLINE_BYTES];
    void *inline_ptrs[PYGPU_PACK_INLINE_PARAMS];
} pygpu_argpack;

/* One launch configuration, parsed by one parser (launch.c). */
typedef struct {
    unsigned int grid[3], block[3], cluster[3];
    unsigned int shared;
    CUstream stream;
    PyObject *stream_obj;     /* borrowed for a call (the caller's argument);
                                 strong in a BoundLaunch */
    int has_cluster, cooperative, pdl, timed;
} pygpu_launch_config;

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    CUfunction handle;         /* owned by the module */
    pygpu_Module *module;      /* strong ref */
    PyObject *name;            /* str */
    pygpu_layout *layout;      /* counted reference; NULL until first needed */
    int max_threads;           /* the kernel's own block limit; 0 until read */
    /* the last checked (block, grid) pair, reused while the same tuple
     * objects come back (the common `block=(256, 1, 1)` literal) */
    PyObject *last_block, *last_grid;   /* strong refs */
    CUlaunchConfig last_lc;    /* the pair as a plain launch on the default
                                  stream: grid, block, nothing else */
    PyObject *weakreflist;
    pygpu_state *st;           /* the module state (the type keeps the module alive) */
    /* PyCUDA's legacy launch API (_set_block_shape, _param_set*, _launch*):
     * the state cuFuncSetBlockShape and cuParamSet* kept in the driver */
    unsigned int legacy_block[3], legacy_shared;
    PyObject *legacy_params;   /* strong: bytearray, the parameter buffer, or NULL */
} pygpu_Function;

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    pygpu_Function *function;  /* strong ref */
    pygpu_launch_config cfg;   /* cfg.stream_obj: strong ref, keeps the stream alive */
    int quick;                 /* 1: a plain launch that cuLaunchKernelEx takes as lc */
    CUlaunchConfig lc;         /* cfg as cuLaunchKernelEx takes it, no attributes */
} pygpu_BoundLaunch;

typedef struct {
    PyObject_HEAD
    CUstream handle;           /* owned unless !owns */
    pygpu_Context *context;    /* strong ref (may be NULL for the null stream before use) */
    PyObject *owner;           /* strong ref to a foreign owner, or NULL */
    int owns;
    PyObject *weakreflist;
    PyObject *capture_keep;    /* strong list while capturing (graph.c), else NULL */
} pygpu_Stream;

typedef struct {
    PyObject_HEAD
    CUevent handle;            /* owned */
    pygpu_Context *context;    /* strong ref */
} pygpu_Event;

/* ---- shared prototypes ---- */

/* errors.c */
PyObject *pygpu_cuda_error(pygpu_state *st, CUresult rc, const char *routine);
/* the same, with a sentence appended to the message (extra may be NULL) */
PyObject *pygpu_cuda_error_ex(pygpu_state *st, CUresult rc, const char *routine,
                              const char *extra);
int pygpu_errors_setup(PyObject *m, pygpu_state *st);
/* Parse a Python int argument into an unsigned int / int: TypeError,
 * OverflowError naming `what` ("make_context(): flags") instead of
 * truncating.  Returns 0 or -1. */
int pygpu_parse_uint(PyObject *obj, unsigned int *out, const char *what);
int pygpu_parse_int(PyObject *obj, int *out, const char *what);
/* The arguments of a METH_FASTCALL | METH_KEYWORDS function by name
 * (names ends with NULL; the first nreq are required), as
 * PyArg_ParseTupleAndKeywords's "O" gives them but with no tuple or dict
 * made: out[i] is borrowed, NULL where not given.  0, or -1 with the
 * TypeError CPython's own parser would raise. */
int pygpu_fast_args(const char *fname, PyObject *const *args, Py_ssize_t nargs,
                    PyObject *kwnames, const char *const *names, Py_ssize_t nreq,
                    PyObject **out);

/* loader.c: pygpu_ensure_driver() loads libcuda and calls cuInit once per
 * process; returns 0, or -1 with CudaUnavailableError set.  GIL held. */
int pygpu_ensure_driver(pygpu_state *st);
int pygpu_nvrtc_loaded(void);
int pygpu_loader_setup(PyObject *m);

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
    pygpu_Context *ctx;        /* strong ref */
    int pushed;
} pygpu_scope;
int pygpu_scope_enter(pygpu_state *st, pygpu_Context *ctx, pygpu_scope *s);
void pygpu_scope_exit(pygpu_scope *s);
/* The same for release paths (dealloc, free()): returns -1 without raising
 * when ctx is detached or cannot be pushed. */
int pygpu_scope_enter_quiet(pygpu_Context *ctx, pygpu_scope *s);
/* push ctx if it is not current; *pushed says whether to pop.  No GIL needed. */
CUresult pygpu_context_enter(pygpu_Context *ctx, int *pushed);
void pygpu_context_exit(int pushed);
int pygpu_context_read_limits(pygpu_state *st, pygpu_Context *ctx);
PyObject *pygpu_device_new(pygpu_state *st, int ordinal);

/* memory.c */
/* resolve a device pointer: DeviceAllocation, int, __cuda_array_interface__,
 * None (-> 0 when allow_none).  Returns 0 or -1; *size = capacity or
 * (size_t)-1 when unknown. */
int pygpu_get_device_ptr(pygpu_state *st, PyObject *obj, CUdeviceptr *ptr,
                         size_t *size, int allow_none);
int pygpu_get_dlpack_ptr(pygpu_state *st, PyObject *obj, CUdeviceptr *ptr);
/* a DeviceAllocation that does not own ptr; owner is kept alive with it */
PyObject *pygpu_borrowed_allocation(pygpu_state *st, pygpu_Context *ctx, CUdeviceptr ptr,
                                    size_t size, PyObject *owner);
/* Free the memory of every allocation of ctx and mark them freed (detach).
 * Returns 0, or -1 with LogicError set (nothing done) when one is in use by
 * a copy running with the GIL released.  GIL held. */
int pygpu_allocations_detach(pygpu_state *st, pygpu_Context *ctx);

/* stream.c: resolve a stream argument (None, Stream, int 0/1/2,
 * __cuda_stream__); a Stream whose context was detached is a LogicError. */
int pygpu_get_stream(pygpu_state *st, PyObject *obj, CUstream *out);

/* args.c.  GIL held throughout. */
/* The Function's layout (borrowed), read on first use; the caller has
 * checked that the function's context is alive. */
pygpu_layout *pygpu_layout_get(pygpu_state *st, pygpu_Function *f);
void pygpu_layout_decref(pygpu_layout *l);
/* prepare(arg_types): a new layout (one counted reference) */
pygpu_layout *pygpu_layout_prepared(pygpu_state *st, pygpu_Function *f, PyObject *types);
/* Pack args into pack (which the caller initialises with PYGPU_ARGPACK_INIT
 * and always releases with pygpu_pack_finish).  Returns 0, or -1 with an
 * exception.  With a configuration hcfg, In/Out/InOut arguments are replaced
 * by device copies made on hcfg's stream (pack->handlers then holds what
 * pygpu_pack_finish copies back); without, they are refused. */
int pygpu_pack(pygpu_state *st, pygpu_Function *f, PyObject *const *args,
               Py_ssize_t nargs, const pygpu_launch_config *hcfg, pygpu_argpack *pack);
/* Copy Out/InOut arrays back (when launched) and free the handlers' device
 * copies; releases pack's storage.  Returns 0 or -1 (an exception already
 * set by the launch is kept). */
int pygpu_pack_finish(pygpu_state *st, pygpu_argpack *pack, int launched,
                      PyObject *stream_obj);
#define PYGPU_ARGPACK_INIT(p) ((p)->layout = NULL, (p)->heap = NULL, (p)->handlers = NULL)

/* The common arguments packed in the fewest steps (args.c): a known layout
 * of at most PYGPU_PACK_INLINE_PARAMS parameters in PYGPU_PACK_INLINE_BYTES,
 * every argument an exact DeviceAllocation (live), int or float of a size it
 * fills, or a NumPy number scalar (exact type) of the parameter's size.  Runs no Python code, raises nothing: 1 with buf and ptrs filled,
 * or 0 (nothing kept) when pygpu_pack must decide. */
int pygpu_pack_fast(pygpu_state *st, const pygpu_layout *l, PyObject *const *args,
                    Py_ssize_t nargs, char *buf, void **ptrs);

/* launch.c: the launch in the fewest steps when cfg is a plain launch on the
 * default stream and pygpu_pack_fast takes the arguments and the kernel's
 * context is current: 1 (launched; *res None, or NULL with the launch's
 * error), else 0 (nothing done: take the full path).  pygpu_launch_cached
 * is the same for the Function's cached (block, grid) pair, with no
 * configuration to build; pygpu_config_cached fills cfg with that pair for
 * the full path. */
void pygpu_config_cached(const pygpu_Function *f, pygpu_launch_config *cfg);
int pygpu_launch_cached(pygpu_state *st, pygpu_Function *f, PyObject *const *args,
                        Py_ssize_t nargs, PyObject **res);
int pygpu_launch_quick(pygpu_state *st, pygpu_Function *f,
                       const pygpu_launch_config *cfg, PyObject *const *args,
                       Py_ssize_t nargs, PyObject **res);

/* launch.c.  GIL held. */
#define PYGPU_LAUNCH_KEYWORDS "block, grid, shared, stream, time_kernel, cluster, " \
                              "cooperative, pdl"
int pygpu_parse_dims(PyObject *obj, unsigned int out[3], const char *what);
/* the keyword launch options of Function.__call__ */
int pygpu_config_from_kwargs(pygpu_state *st, pygpu_Function *f, PyObject *const *kwargs,
                             PyObject *kwnames, pygpu_launch_config *cfg);
/* prepared_call(grid, block, [stream,] *args, shared_size=0): returns the
 * index of the first kernel argument, or -1 */
Py_ssize_t pygpu_config_prepared(pygpu_state *st, pygpu_Function *f, PyObject *const *args,
                                 Py_ssize_t nargs, PyObject *kwnames, int with_stream,
                                 int timed, pygpu_launch_config *cfg);
/* Function.configure(grid, block, stream=None, shared=0) */
PyObject *pygpu_configure(pygpu_state *st, pygpu_Function *f, PyObject *args, PyObject *kwds);
/* the device's and kernel's limits; the context is alive */
int pygpu_config_check(pygpu_state *st, pygpu_Function *f, const pygpu_launch_config *cfg);
/* The one sink: checks the context (after all Python code of the call has
 * run), activates it once, and enqueues through cuLaunchKernel,
 * cuLaunchKernelEx or the timed launch.  Returns None or, timed, the
 * kernel's time in seconds. */
PyObject *pygpu_launch(pygpu_state *st, pygpu_Function *f, const pygpu_launch_config *cfg,
                       pygpu_argpack *pack);
PyObject *pygpu_bound_new(pygpu_state *st, pygpu_Function *f, pygpu_launch_config *cfg);
/* LogicError when the function's context is gone */
int pygpu_function_check(pygpu_state *st, pygpu_Function *f);
const char *pygpu_function_name(pygpu_Function *f);

/* setup functions, one per file */
int pygpu_device_setup(PyObject *m, pygpu_state *st);
int pygpu_context_setup(PyObject *m, pygpu_state *st);
int pygpu_memory_setup(PyObject *m, pygpu_state *st);
int pygpu_hostmem_setup(PyObject *m, pygpu_state *st);
int pygpu_module_setup(PyObject *m, pygpu_state *st);
int pygpu_function_setup(PyObject *m, pygpu_state *st);
int pygpu_args_setup(PyObject *m, pygpu_state *st);
int pygpu_launch_setup(PyObject *m, pygpu_state *st);
int pygpu_stream_setup(PyObject *m, pygpu_state *st);
int pygpu_event_setup(PyObject *m, pygpu_state *st);
int pygpu_nvrtc_setup(PyObject *m, pygpu_state *st);
int pygpu_nvjitlink_setup(PyObject *m, pygpu_state *st);
int pygpu_staging_setup(PyObject *m, pygpu_state *st);
int pygpu_linker_setup(PyObject *m, pygpu_state *st);
int pygpu_graph_setup(PyObject *m, pygpu_state *st);

/* graph.c: stream capture.  The Stream methods begin_capture/end_capture/
 * is_capturing; pygpu_capture_note keeps a captured launch's Function and
 * arguments alive with the graph (0 or -1); pygpu_stream_capture_abort
 * ends a capture at the stream's release (the context is current). */
PyObject *pygpu_stream_begin_capture(pygpu_Stream *self, PyObject *args, PyObject *kwds);
PyObject *pygpu_stream_end_capture(pygpu_Stream *self, PyObject *unused);
PyObject *pygpu_stream_is_capturing(pygpu_Stream *self, PyObject *unused);
int pygpu_capture_note(pygpu_state *st, PyObject *stream_obj, PyObject *f,
                       PyObject *const *args, Py_ssize_t nargs);
void pygpu_stream_capture_abort(pygpu_Stream *self);
/* the same without ending it (not our handle, or the context is gone) */
void pygpu_stream_capture_drop(pygpu_Stream *self);
int pygpu_nvtx_setup(PyObject *m, pygpu_state *st);

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

/* ---- CUDA arrays, texture and surface objects, tensor maps
 * (cuarray.c, texobj.c, tensormap.c) ---- */

typedef struct {
    PyObject_HEAD
    CUarray handle;            /* owned: cuArrayDestroy in array_release */
    pygpu_Context *context;    /* strong ref */
    CUDA_ARRAY3D_DESCRIPTOR desc;   /* as created (Depth 0 for cuArrayCreate) */
    int is3d;                  /* made by cuArray3DCreate */
    int freed;                 /* free() ran: no new use starts (handle may wait) */
    struct pygpu_hold *holds;  /* owned list (hold.c): texture/surface objects over it;
                                  free() is deferred until the last one goes */
    PyObject *weakreflist;
    int busy;                  /* driver calls using the array with the GIL released */
    int free_pending;          /* free() came while busy: the last holder destroys */
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

int pygpu_cuarray_setup(PyObject *m, pygpu_state *st);
int pygpu_texobj_setup(PyObject *m, pygpu_state *st);
int pygpu_tensormap_setup(PyObject *m, pygpu_state *st);

extern PyModuleDef pygpu_moduledef;

/* PyModule_AddObjectRef for Python 3.9: adds a new reference. */
static inline int
pygpu_module_add_ref(PyObject *m, const char *name, PyObject *obj)
{
    Py_INCREF(obj);
    if (PyModule_AddObject(m, name, obj) < 0) {
        Py_DECREF(obj);
        return -1;
    }
    return 0;
}

/* PyObject_GetOptionalAttr for Python < 3.13: 1 found, 0 absent, -1 error. */
static inline int
pygpu_getattr_opt(PyObject *obj, PyObject *name, PyObject **res)
{
    *res = PyObject_GetAttr(obj, name);
    if (*res != NULL)
        return 1;
    if (PyErr_ExceptionMatches(PyExc_AttributeError)) {
        PyErr_Clear();
        return 0;
    }
    return -1;
}

/* ---- processes and several GPUs: ipc.c, vmm.c, mempool.c, fork.c ---- */

/* A DeviceAllocation or one of its subtypes (IPCMemoryHandle, VirtualBuffer,
 * a Python subclass of any): the C types in two pointer compares. */
static inline int
pygpu_is_allocation(pygpu_state *st, PyObject *o)
{
    PyTypeObject *t = Py_TYPE(o);
    return t == st->DeviceAllocationType || t->tp_base == st->DeviceAllocationType
           || PyType_IsSubtype(t, st->DeviceAllocationType);   /* a Python subclass */
}
/* memory.c: a new allocation object of type tp (DeviceAllocationType or a
 * subtype) owning ptr; kinds: 0 cuMemAlloc, 1 managed, 2 async (pool),
 * 3 not owned, 4 opened IPC handle, 5 virtual buffer.  GIL held. */
PyObject *pygpu_allocation_new(pygpu_state *st, PyTypeObject *tp, pygpu_Context *ctx,
                               CUdeviceptr ptr, size_t size, int kind);
/* ipc.c: frees kinds 4 (cuIpcCloseMemHandle); vmm.c: kind 5 (unmap,
 * release, free the reservation).  The context is current; never raises. */
void pygpu_ipc_close(pygpu_DeviceAllocation *a);
void pygpu_vmm_release(pygpu_DeviceAllocation *a);
/* the CU_OPTIONAL entry point is there, or a LogicError naming what needs it */
int pygpu_need_entry(pygpu_state *st, const void *fn, const char *routine, const char *what);
/* loader.c: after fork() in a child of a process that had initialised CUDA:
 * every later driver entry raises CudaUnavailableError saying so.  Returns
 * 1 if the driver had been initialised, else 0. */
int pygpu_driver_forked(void);
/* nonzero in such a child (for messages) */
extern int pygpu_forked_from;
int pygpu_ipc_setup(PyObject *m, pygpu_state *st);
int pygpu_vmm_setup(PyObject *m, pygpu_state *st);
int pygpu_mempool_setup(PyObject *m, pygpu_state *st);
int pygpu_fork_setup(PyObject *m, pygpu_state *st);

/* Add a heap type made from spec to the module and store it in *slot. */
int pygpu_add_type(PyObject *m, PyType_Spec *spec, PyTypeObject **slot);

/* graphics.c: OpenGL interop (RegisteredBuffer, RegisteredImage, RegisteredMapping) */
int pygpu_graphics_setup(PyObject *m, pygpu_state *st);
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
PyObject *pygpu_hold_args(pygpu_state *st, PyObject *const *args, Py_ssize_t n,
                          const char *what);
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
void pygpu_array_holds_gone(pygpu_Array *a);
/* vmm.c: the address ranges a grow() kept mapped for holders are released
 * (no hold remains).  The context is current. */
void pygpu_vmm_release_retired(pygpu_DeviceAllocation *a);
/* graph.c: run a driver call that is unsafe during stream capture (cuMemFree,
 * cuMemAlloc, a pool attribute) with this thread's capture mode relaxed, so
 * that nothing pygpu does implicitly invalidates a user's capture. */
CUstreamCaptureMode pygpu_capture_relax(void);
void pygpu_capture_restore(CUstreamCaptureMode mode);
/* memory.c: set the default pool's release threshold once per context
 * (capture-safe); ctx current. */
void pygpu_keep_pool_memory(pygpu_Context *ctx);
/* graph.c: 1 when stream_obj is a pygpu Stream that pygpu is capturing */
int pygpu_stream_capturing(pygpu_state *st, PyObject *stream_obj);
/* graph.c, capture safety: before a call that would break a capture pygpu
 * runs, a LogicError naming `what` (0 or -1): a blocking call (blocking)
 * on a capturing stream, or work on the legacy default stream (sobj None,
 * 0 or 1, or NULL) while a blocking stream of the current context
 * captures.  No driver call while nothing captures.  GIL held. */
int pygpu_capture_check(pygpu_state *st, PyObject *sobj, int blocking, const char *what);
/* graph.c, the default stream inside a capture (docs/graphs.md): how many
 * captures pygpu runs (0: none, the only test the quick paths make). */
extern Py_ssize_t pygpu_captures_active;
/* This thread's newest capture (in ctx, or any when ctx is NULL): the
 * Stream, borrowed, or NULL.  GIL held; no driver call. */
pygpu_Stream *pygpu_capture_current(pygpu_Context *ctx);
/* sobj (NULL, None, 0, 1, a Stream of the NULL or legacy handle) names the
 * default stream */
int pygpu_capture_is_default(pygpu_state *st, PyObject *sobj);
/* *sobj names the default stream and this thread captures in the current
 * context: a blocking call gets a LogicError naming `what` (and `instead`,
 * or "use the _async form"), -1; otherwise *sobj becomes the capturing
 * Stream (borrowed), 1.  0: unchanged. */
int pygpu_capture_default(pygpu_state *st, PyObject **sobj, int blocking, const char *what,
                          const char *instead);
/* A launch on the legacy stream while a blocking stream of ctx captures (in
 * another thread): LogicError naming the kernel, -1. */
int pygpu_capture_legacy_launch(pygpu_state *st, pygpu_Context *ctx, const char *kernel);
/* A call that waits for the whole context (Context.synchronize, a zeroed
 * managed array) while a stream of ctx captures: LogicError, -1. */
int pygpu_capture_context_check(pygpu_state *st, pygpu_Context *ctx, const char *what);
/* A stream-ordered free on s that would break a capture (s captures, or s
 * is the legacy stream and a blocking stream of ctx captures): kept, and
 * queued when the last capture ends; 1.  0: free it now. */
int pygpu_capture_defer_free(pygpu_Context *ctx, CUdeviceptr p, CUstream s, PyObject *owner);

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

/* ---- fastops.c: the array operators' fast path (docs/arrays.md) ---- */
int pygpu_fastops_setup(PyObject *m, pygpu_state *st);
/* blockcache.c: pygpu_blockcache_get without counting a miss */
int pygpu_blockcache_take(pygpu_Context *ctx, CUstream s, size_t size, CUdeviceptr *ptr);
/* memory.c: n bytes from ctx's block cache on the default stream, as
 * mem_alloc_async(n) takes them: 1 and *res a new DeviceAllocation, 0 (no
 * cached block: call the allocator), -1 with an exception. */
int pygpu_blockcache_allocation(pygpu_state *st, pygpu_Context *ctx, size_t n, PyObject **res);
/* launch.c: prepared_async_call((grid, 1), (block, 1, 1), None, *args) of a
 * configuration checked before: None, or NULL with an exception. */
PyObject *pygpu_launch_plain(pygpu_state *st, pygpu_Function *f, unsigned int grid,
                             unsigned int block, PyObject *const *args, Py_ssize_t nargs);

#endif
