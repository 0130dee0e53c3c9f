/* launch/: Function, argument packing, the one launch sink, the C operators.
 * Included by pygpu.h. */
#ifndef PYGPU_LAUNCH_H
#define PYGPU_LAUNCH_H

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
    int nparams;          /* -1: unknown (no cuFuncGetParamInfo, not prepared) */
    int known;            /* 1: sizes from cuFuncGetParamInfo */
    size_t total;         /* bytes the packed values span */
    char *prepared;       /* owned: prepare() type codes, nparams of them, or NULL */
    pygpu_param params[]; /* nparams entries when nparams > 0 */
} pygpu_layout;

#define PYGPU_PACK_INLINE_BYTES 512
#define PYGPU_PACK_INLINE_PARAMS 48

/* The packed arguments of one launch.  Storage belongs to the call (inline,
 * on the C stack, up to the sizes above; heap beyond), never to the Function,
 * so concurrent and re-entrant launches cannot see each other's values. */
typedef struct {
    pygpu_layout *layout; /* counted reference */
    const pygpu_param *params;
    int nparams;
    char *buf;          /* the values */
    void **ptrs;        /* kernelParams: ptrs[i] = buf + params[i].offset */
    void *heap;         /* owned: buf/ptrs/params beyond the inline storage */
    PyObject *handlers; /* strong: In/Out/InOut bookkeeping, or NULL */
    _Alignas(16) char inline_buf[PYGPU_PACK_INLINE_BYTES];
    void *inline_ptrs[PYGPU_PACK_INLINE_PARAMS];
} pygpu_argpack;

/* One launch configuration, parsed by one parser (launch.c). */
typedef struct {
    unsigned int grid[3], block[3], cluster[3];
    unsigned int shared;
    CUstream stream;
    PyObject *stream_obj; /* borrowed for a call (the caller's argument);
                                 strong in a BoundLaunch */
    int has_cluster, cooperative, pdl, timed;
} pygpu_launch_config;

typedef struct {
    PyObject_HEAD vectorcallfunc vectorcall;
    CUfunction handle;    /* owned by the module */
    pygpu_Module *module; /* strong ref */
    PyObject *name;       /* str */
    pygpu_layout *layout; /* counted reference; NULL until first needed */
    int max_threads;      /* the kernel's own block limit; 0 until read */
    /* the last checked (block, grid) pair, reused while the same tuple
     * objects come back (the common `block=(256, 1, 1)` literal) */
    PyObject *last_block, *last_grid; /* strong refs */
    CUlaunchConfig last_lc;           /* the pair as a plain launch on the default
                                  stream: grid, block, nothing else */
    PyObject *weakreflist;
    pygpu_state *st; /* the module state (the type keeps the module alive) */
    /* PyCUDA's legacy launch API (_set_block_shape, _param_set*, _launch*):
     * the state cuFuncSetBlockShape and cuParamSet* kept in the driver */
    unsigned int legacy_block[3], legacy_shared;
    PyObject *legacy_params; /* strong: bytearray, the parameter buffer, or NULL */
} pygpu_Function;

typedef struct {
    PyObject_HEAD vectorcallfunc vectorcall;
    pygpu_Function *function; /* strong ref */
    pygpu_launch_config cfg;  /* cfg.stream_obj: strong ref, keeps the stream alive */
    int quick;                /* 1: a plain launch that cuLaunchKernelEx takes as lc */
    CUlaunchConfig lc;        /* cfg as cuLaunchKernelEx takes it, no attributes */
} pygpu_BoundLaunch;

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
int pygpu_pack(pygpu_state *st, pygpu_Function *f, PyObject *const *args, Py_ssize_t nargs,
               const pygpu_launch_config *hcfg, pygpu_argpack *pack);
/* Copy Out/InOut arrays back (when launched) and free the handlers' device
 * copies; releases pack's storage.  Returns 0 or -1 (an exception already
 * set by the launch is kept). */
int pygpu_pack_finish(pygpu_state *st, pygpu_argpack *pack, int launched, PyObject *stream_obj);
#define PYGPU_ARGPACK_INIT(p) ((p)->layout = NULL, (p)->heap = NULL, (p)->handlers = NULL)

/* The common arguments packed in the fewest steps (args.c): a known layout
 * of at most PYGPU_PACK_INLINE_PARAMS parameters in PYGPU_PACK_INLINE_BYTES,
 * every argument an exact DeviceAllocation (live), int or float of a size it
 * fills, or a NumPy number scalar (exact type) of the parameter's size.  Runs no Python code, raises nothing: 1 with buf and ptrs filled,
 * or 0 (nothing kept) when pygpu_pack must decide. */
int pygpu_pack_fast(pygpu_state *st, const pygpu_layout *l, PyObject *const *args, Py_ssize_t nargs,
                    char *buf, void **ptrs);

/* launch.c: the launch in the fewest steps when cfg is a plain launch on the
 * default stream and pygpu_pack_fast takes the arguments and the kernel's
 * context is current: 1 (launched; *res None, or NULL with the launch's
 * error), else 0 (nothing done: take the full path).  pygpu_launch_cached
 * is the same for the Function's cached (block, grid) pair, with no
 * configuration to build; pygpu_config_cached fills cfg with that pair for
 * the full path. */
void pygpu_config_cached(const pygpu_Function *f, pygpu_launch_config *cfg);
int pygpu_launch_cached(pygpu_state *st, pygpu_Function *f, PyObject *const *args, Py_ssize_t nargs,
                        PyObject **res);
int pygpu_launch_quick(pygpu_state *st, pygpu_Function *f, const pygpu_launch_config *cfg,
                       PyObject *const *args, Py_ssize_t nargs, PyObject **res);

/* launch.c.  GIL held. */
#define PYGPU_LAUNCH_KEYWORDS                             \
    "block, grid, shared, stream, time_kernel, cluster, " \
    "cooperative, pdl"
int pygpu_parse_dims(PyObject *obj, unsigned int out[3], const char *what);
/* the keyword launch options of Function.__call__ */
int pygpu_config_from_kwargs(pygpu_state *st, pygpu_Function *f, PyObject *const *kwargs,
                             PyObject *kwnames, pygpu_launch_config *cfg);
/* prepared_call(grid, block, [stream,] *args, shared_size=0): returns the
 * index of the first kernel argument, or -1 */
Py_ssize_t pygpu_config_prepared(pygpu_state *st, pygpu_Function *f, PyObject *const *args,
                                 Py_ssize_t nargs, PyObject *kwnames, int with_stream, int timed,
                                 pygpu_launch_config *cfg);
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

/* ---- arrayslots.c: a GPUArray as C reads it (see there) ---- */
/* the attributes C paths read, by the slots gpuarray._ATTRS makes */
enum {
    PYGPU_A_SHAPE,
    PYGPU_A_STRIDES,
    PYGPU_A_C,
    PYGPU_A_F,
    PYGPU_A_GPUDATA,
    PYGPU_A_DTYPE,
    PYGPU_A_NBYTES,
    PYGPU_A_SIZE,
    PYGPU_A_ALLOCATOR,
    PYGPU_A_BASE,
    PYGPU_A_COUNT
};
typedef struct {
    Py_ssize_t off[PYGPU_A_COUNT];
} pygpu_array_slots;
/* array a's slot i (borrowed; NULL when unset): a is of the exact type
 * whose offsets s holds */
#define PYGPU_ASLOT(s, a, i) (*(PyObject **)((char *)(a) + (s)->off[i]))
const char *pygpu_array_slot_name(int i);
/* the offset of atype's writable object slot name, or -1 with TypeError
 * ("<who>: <type> has no slot <name>") */
Py_ssize_t pygpu_slot_offset(PyObject *atype, PyObject *name, const char *who);
/* every PYGPU_A_* slot of atype into s: 0, or -1 with TypeError */
int pygpu_array_slots_find(pygpu_array_slots *s, PyObject *atype, const char *who);
/* an exact int >= 0 as a size_t: 1, or 0 (nothing raised) */
int pygpu_exact_size(PyObject *obj, size_t *out);
/* The operand gate's fast form for x, an exact array of s's type: C- or
 * F-contiguous, gpudata a live DeviceAllocation of ctx holding nbytes (its
 * data starts at the allocation: a view's gpudata is an int).  1 with
 * *alloc, *nb (nbytes, borrowed) and *nbytes; 0 when the full gate must
 * decide.  Runs no Python code, raises nothing. */
int pygpu_array_proven(pygpu_state *st, const pygpu_array_slots *s, PyObject *x, PyObject *ctx,
                       pygpu_DeviceAllocation **alloc, PyObject **nb, size_t *nbytes);

/* ---- fastops.c: the array operators' fast path (docs/arrays.md) ---- */
int pygpu_fastops_setup(PyObject *m, pygpu_state *st);
/* launch.c: prepared_async_call((grid, 1), (block, 1, 1), None, *args) of a
 * configuration checked before: None, or NULL with an exception. */
PyObject *pygpu_launch_plain(pygpu_state *st, pygpu_Function *f, unsigned int grid,
                             unsigned int block, PyObject *const *args, Py_ssize_t nargs);

/* scalars.c: the one scalar conversion (see there).  A Python int into a
 * parameter of size bytes and type code (0: only the size known): 0, or -1
 * with OverflowError/TypeError naming the kernel fn and parameter i.  And a
 * type code's integer range and NumPy name: 1, or 0 for no integer code. */
int pygpu_scalar_pack_int(PyObject *fn, int i, PyObject *obj, char code, char *dst, size_t size);
int pygpu_int_code_range(char code, long long *lo, unsigned long long *hi, const char **name);
int pygpu_scalars_setup(PyObject *m, pygpu_state *st);

/* launch.c: the one launch sink (see there): the only caller of
 * cuLaunchKernel(Ex).  The context is current; GIL held or not. */
CUresult pygpu_launch_enqueue(CUfunction h, const pygpu_launch_config *cfg,
                              const CUlaunchConfig *ready, void **params, void **extra,
                              const char **routine);
/* legacy.c: the methods of PyCUDA's legacy launch API (Function's method
 * table, function.c) */
PyObject *pygpu_function_launch_kernel(pygpu_Function *f, PyObject *args);
PyObject *pygpu_function_set_block_shape(pygpu_Function *f, PyObject *args);
PyObject *pygpu_function_set_shared_size(pygpu_Function *f, PyObject *arg);
PyObject *pygpu_function_param_set_size(pygpu_Function *f, PyObject *arg);
PyObject *pygpu_function_param_seti(pygpu_Function *f, PyObject *args);
PyObject *pygpu_function_param_setf(pygpu_Function *f, PyObject *args);
PyObject *pygpu_function_param_setv(pygpu_Function *f, PyObject *args);
PyObject *pygpu_function_launch_legacy(pygpu_Function *f, PyObject *unused);
PyObject *pygpu_function_launch_grid(pygpu_Function *f, PyObject *args, PyObject *kwds);
PyObject *pygpu_function_launch_grid_async(pygpu_Function *f, PyObject *args, PyObject *kwds);

int pygpu_function_setup(PyObject *m, pygpu_state *st);
int pygpu_args_setup(PyObject *m, pygpu_state *st);
int pygpu_launch_setup(PyObject *m, pygpu_state *st);

#endif
