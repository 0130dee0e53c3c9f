/* Launching: the configuration (one struct, one parser with its tuple
 * cache), the one sink that enqueues every launch, and BoundLaunch, the
 * callable configure() returns.
 *
 * A launch reads top to bottom:
 *   Function.__call__ / prepared_* / BoundLaunch   (function.c, here)
 *     -> configuration parsed here (pygpu_config_from_kwargs, parse_dims)
 *     -> arguments packed into the call's storage (args.c, pygpu_pack)
 *     -> pygpu_launch: context checked and activated once, then
 *        cuLaunchKernel, cuLaunchKernelEx, or either between two events.
 * Every piece of user Python code a call runs (__index__ of dimensions,
 * __cuda_stream__, truth tests of flags, __cuda_array_interface__ of
 * arguments) runs before the sink; the sink runs none.
 */
#include "pygpu.h"

/* a dimension value: an int or anything with __index__ (np.int64) */
static int
dim_value(PyObject *item, const char *what, Py_ssize_t i, PyObject *whole, unsigned int *out)
{
    PyObject *v;
    int overflow = 0;
    long long x;
    if (PyBool_Check(item) || (!PyLong_Check(item) && !PyIndex_Check(item))) {
        if (i < 0)
            PyErr_Format(PyExc_TypeError,
                         "%s must be a tuple of 1 to 3 ints or an int, "
                         "not %.100s",
                         what, Py_TYPE(item)->tp_name);
        else
            PyErr_Format(PyExc_TypeError, "%s[%zd] must be an int, not %.100s", what, i,
                         Py_TYPE(item)->tp_name);
        return -1;
    }
    v = PyNumber_Index(item);
    if (v == NULL)
        return -1;
    x = PyLong_AsLongLongAndOverflow(v, &overflow);
    Py_DECREF(v);
    if (x == -1 && PyErr_Occurred())
        return -1;
    if (overflow > 0 || x > (long long)UINT_MAX) {
        if (i < 0)
            PyErr_Format(PyExc_ValueError, "%s is %R; at most %u", what, item, UINT_MAX);
        else
            PyErr_Format(PyExc_ValueError, "%s[%zd] is %R; at most %u (%s=%R)", what, i, item,
                         UINT_MAX, what, whole);
        return -1;
    }
    if (overflow < 0 || x <= 0) {
        if (i < 0)
            PyErr_Format(PyExc_ValueError, "%s must be positive, got %R", what, item);
        else
            PyErr_Format(PyExc_ValueError, "%s[%zd] must be positive, got %R (%s=%R)", what, i,
                         item, what, whole);
        return -1;
    }
    *out = (unsigned int)x;
    return 0;
}

/* A block, grid or cluster: an int or a tuple/list of 1 to 3 positive ints. */
int
pygpu_parse_dims(PyObject *obj, unsigned int out[3], const char *what)
{
    Py_ssize_t n, i;
    unsigned int tmp[3] = {1, 1, 1};
    PyObject *seq;
    int r = 0;
    if (!PyTuple_Check(obj) && !PyList_Check(obj)) {
        if (dim_value(obj, what, -1, obj, &tmp[0]) < 0)
            return -1;
        memcpy(out, tmp, sizeof tmp);
        return 0;
    }
    seq = PySequence_Tuple(obj); /* a list can change under __index__ */
    if (seq == NULL)
        return -1;
    n = PyTuple_GET_SIZE(seq);
    if (n < 1 || n > 3) {
        PyErr_Format(PyExc_ValueError, "%s must have 1 to 3 dimensions, got %zd", what, n);
        r = -1;
    }
    for (i = 0; r == 0 && i < n; i++)
        r = dim_value(PyTuple_GET_ITEM(seq, i), what, i, obj, &tmp[i]);
    Py_DECREF(seq);
    if (r == 0)
        memcpy(out, tmp, sizeof tmp);
    return r;
}

static int
parse_shared(PyObject *obj, const char *what, unsigned int *out)
{
    PyObject *v;
    int overflow = 0;
    long long x;
    if (PyBool_Check(obj) || !PyIndex_Check(obj)) {
        PyErr_Format(PyExc_TypeError, "%s must be an int, not %.100s", what, Py_TYPE(obj)->tp_name);
        return -1;
    }
    v = PyNumber_Index(obj);
    if (v == NULL)
        return -1;
    x = PyLong_AsLongLongAndOverflow(v, &overflow);
    Py_DECREF(v);
    if (x == -1 && PyErr_Occurred())
        return -1;
    if (overflow != 0 || x < 0 || x > (long long)UINT_MAX) {
        PyErr_Format(PyExc_ValueError, "%s must be between 0 and %u bytes, got %R", what, UINT_MAX,
                     obj);
        return -1;
    }
    *out = (unsigned int)x;
    return 0;
}

static int
parse_flag(PyObject *obj, int *out)
{
    int r;
    if (obj == NULL)
        return 0;
    r = PyObject_IsTrue(obj);
    if (r < 0)
        return -1;
    *out = r;
    return 0;
}

/* The options after the (block, grid) pair; shared by __call__, configure()
 * and the prepared calls.  stream_obj is kept as given (borrowed). */
static int
config_rest(pygpu_state *st, pygpu_launch_config *cfg, PyObject *shared, PyObject *stream,
            PyObject *timed, PyObject *cluster, PyObject *coop, PyObject *pdl,
            const char *shared_name)
{
    cfg->shared = 0;
    cfg->stream = NULL;
    cfg->stream_obj = stream;
    cfg->has_cluster = cfg->cooperative = cfg->pdl = cfg->timed = 0;
    if (shared != NULL && parse_shared(shared, shared_name, &cfg->shared) < 0)
        return -1;
    if (stream != NULL) {
        if (stream == Py_None)
            cfg->stream_obj = NULL;
        else if (pygpu_get_stream(st, stream, &cfg->stream) < 0)
            return -1;
    }
    if (cluster != NULL && cluster != Py_None) {
        if (pygpu_parse_dims(cluster, cfg->cluster, "cluster") < 0)
            return -1;
        cfg->has_cluster = 1;
    }
    if (parse_flag(timed, &cfg->timed) < 0 || parse_flag(coop, &cfg->cooperative) < 0
        || parse_flag(pdl, &cfg->pdl) < 0)
        return -1;
    return 0;
}

/* block and grid through the Function's tuple cache: the limits of a pair
 * already checked are not checked again */
static int
config_dims(pygpu_state *st, pygpu_Function *f, PyObject *block, PyObject *grid,
            pygpu_launch_config *cfg)
{
    static const unsigned int one[3] = {1, 1, 1};
    if (block == f->last_block && grid == f->last_grid && block != NULL) {
        const CUlaunchConfig *lc = &f->last_lc;
        cfg->block[0] = lc->blockDimX;
        cfg->block[1] = lc->blockDimY;
        cfg->block[2] = lc->blockDimZ;
        cfg->grid[0] = lc->gridDimX;
        cfg->grid[1] = lc->gridDimY;
        cfg->grid[2] = lc->gridDimZ;
        return 1; /* checked before */
    }
    if (block == NULL) {
        PyErr_Format(PyExc_TypeError, "kernel '%s': launching needs block=(x, y, z)",
                     pygpu_function_name(f));
        return -1;
    }
    if (pygpu_parse_dims(block, cfg->block, "block") < 0)
        return -1;
    if (grid == NULL)
        memcpy(cfg->grid, one, sizeof one);
    else if (pygpu_parse_dims(grid, cfg->grid, "grid") < 0)
        return -1;
    return 0;
}

/* remember a checked pair of exact tuples of exact ints (no code can run
 * when they are dropped again) */
static void
config_remember(pygpu_Function *f, PyObject *block, PyObject *grid, const pygpu_launch_config *cfg)
{
    Py_ssize_t i;
    if (grid == NULL || !PyTuple_CheckExact(block) || !PyTuple_CheckExact(grid))
        return;
    for (i = 0; i < PyTuple_GET_SIZE(block); i++)
        if (!PyLong_CheckExact(PyTuple_GET_ITEM(block, i)))
            return;
    for (i = 0; i < PyTuple_GET_SIZE(grid); i++)
        if (!PyLong_CheckExact(PyTuple_GET_ITEM(grid, i)))
            return;
    Py_INCREF(block);
    Py_XSETREF(f->last_block, block);
    Py_INCREF(grid);
    Py_XSETREF(f->last_grid, grid);
    memset(&f->last_lc, 0, sizeof f->last_lc);
    f->last_lc.gridDimX = cfg->grid[0];
    f->last_lc.gridDimY = cfg->grid[1];
    f->last_lc.gridDimZ = cfg->grid[2];
    f->last_lc.blockDimX = cfg->block[0];
    f->last_lc.blockDimY = cfg->block[1];
    f->last_lc.blockDimZ = cfg->block[2];
}

/* parse block/grid and the rest, then check the limits once per new pair */
static int
config_build(pygpu_state *st, pygpu_Function *f, PyObject *block, PyObject *grid, PyObject *shared,
             PyObject *stream, PyObject *timed, PyObject *cluster, PyObject *coop, PyObject *pdl,
             const char *shared_name, pygpu_launch_config *cfg)
{
    int cached = config_dims(st, f, block, grid, cfg);
    if (cached < 0
        || config_rest(st, cfg, shared, stream, timed, cluster, coop, pdl, shared_name) < 0)
        return -1;
    if (cached && cfg->shared == 0 && !cfg->has_cluster)
        return 0;
    if (pygpu_function_check(st, f) < 0 || pygpu_config_check(st, f, cfg) < 0)
        return -1;
    if (!cached)
        config_remember(f, block, grid, cfg);
    return 0;
}

int
pygpu_config_from_kwargs(pygpu_state *st, pygpu_Function *f, PyObject *const *kwargs,
                         PyObject *kwnames, pygpu_launch_config *cfg)
{
    PyObject *block = NULL, *grid = NULL, *shared = NULL, *stream = NULL;
    PyObject *timed = NULL, *cluster = NULL, *coop = NULL, *pdl = NULL;
    Py_ssize_t i, nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
    for (i = 0; i < nkw; i++) {
        PyObject *k = PyTuple_GET_ITEM(kwnames, i), *v = kwargs[i], **slot;
        if (k == st->str_block)
            slot = &block;
        else if (k == st->str_grid)
            slot = &grid;
        else if (k == st->str_shared)
            slot = &shared;
        else if (k == st->str_stream)
            slot = &stream;
        else if (k == st->str_time_kernel)
            slot = &timed;
        else if (PyUnicode_CompareWithASCIIString(k, "block") == 0)
            slot = &block;
        else if (PyUnicode_CompareWithASCIIString(k, "grid") == 0)
            slot = &grid;
        else if (PyUnicode_CompareWithASCIIString(k, "shared") == 0)
            slot = &shared;
        else if (PyUnicode_CompareWithASCIIString(k, "stream") == 0)
            slot = &stream;
        else if (PyUnicode_CompareWithASCIIString(k, "time_kernel") == 0)
            slot = &timed;
        else if (PyUnicode_CompareWithASCIIString(k, "cluster") == 0)
            slot = &cluster;
        else if (PyUnicode_CompareWithASCIIString(k, "cooperative") == 0)
            slot = &coop;
        else if (PyUnicode_CompareWithASCIIString(k, "pdl") == 0)
            slot = &pdl;
        else {
            PyErr_Format(PyExc_TypeError,
                         "kernel '%s' got an unexpected keyword argument %R (launch "
                         "options: " PYGPU_LAUNCH_KEYWORDS ")",
                         pygpu_function_name(f), k);
            return -1;
        }
        *slot = v;
    }
    return config_build(st, f, block, grid, shared, stream, timed, cluster, coop, pdl, "shared",
                        cfg);
}

/* prepared_call(grid, block, [stream,] *args, shared_size=0): the positional
 * configuration; returns the index of the first kernel argument or -1 */
Py_ssize_t
pygpu_config_prepared(pygpu_state *st, pygpu_Function *f, PyObject *const *args, Py_ssize_t nargs,
                      PyObject *kwnames, int with_stream, int timed, pygpu_launch_config *cfg)
{
    Py_ssize_t first = with_stream ? 3 : 2, nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0, i;
    PyObject *shared = NULL;
    if (nargs < first) {
        PyErr_Format(PyExc_TypeError,
                     "prepared call takes grid, block%s, then the kernel's "
                     "arguments",
                     with_stream ? ", stream" : "");
        return -1;
    }
    for (i = 0; i < nkw; i++) {
        PyObject *k = PyTuple_GET_ITEM(kwnames, i);
        if (PyUnicode_CompareWithASCIIString(k, "shared_size") == 0) {
            shared = args[nargs + i];
        } else {
            PyErr_Format(PyExc_TypeError,
                         "kernel '%s': prepared calls take no keyword "
                         "argument %R (only shared_size)",
                         pygpu_function_name(f), k);
            return -1;
        }
    }
    if (config_build(st, f, args[1], args[0], shared, with_stream ? args[2] : NULL,
                     timed ? Py_True : NULL, NULL, NULL, NULL, "shared_size", cfg)
        < 0)
        return -1;
    return first;
}

int
pygpu_config_check(pygpu_state *st, pygpu_Function *f, const pygpu_launch_config *cfg)
{
    pygpu_Context *ctx = f->module->context;
    static const char xyz[3] = {'x', 'y', 'z'};
    const unsigned int *block = cfg->block, *grid = cfg->grid;
    unsigned long long threads = (unsigned long long)block[0] * block[1] * block[2];
    int i;
    if (!ctx->limits_read && pygpu_context_read_limits(st, ctx) < 0)
        return -1;
    for (i = 0; i < 3; i++) {
        if (block[i] > (unsigned int)ctx->max_block[i]) {
            PyErr_Format(PyExc_ValueError,
                         "kernel '%s': block %c dimension %u exceeds the device's limit of %d",
                         pygpu_function_name(f), xyz[i], block[i], ctx->max_block[i]);
            return -1;
        }
        if (grid[i] > (unsigned int)ctx->max_grid[i]) {
            PyErr_Format(PyExc_ValueError,
                         "kernel '%s': grid %c dimension %u exceeds the device's limit of %d",
                         pygpu_function_name(f), xyz[i], grid[i], ctx->max_grid[i]);
            return -1;
        }
    }
    if (f->max_threads == 0) {
        /* __launch_bounds__ and register use can lower it below the device's */
        int v = 0;
        CUresult rc = cu.cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, f->handle);
        if (rc != CUDA_SUCCESS) {
            pygpu_cuda_error(st, rc, "cuFuncGetAttribute");
            return -1;
        }
        f->max_threads = v > 0 ? v : ctx->max_threads;
    }
    if (threads > (unsigned long long)f->max_threads && f->max_threads < ctx->max_threads) {
        PyErr_Format(PyExc_ValueError,
                     "kernel '%s': block (%u, %u, %u) has %llu threads; this kernel's "
                     "limit is %d a block (from __launch_bounds__ or its register use)",
                     pygpu_function_name(f), block[0], block[1], block[2], threads, f->max_threads);
        return -1;
    }
    if (threads > (unsigned long long)ctx->max_threads) {
        PyErr_Format(PyExc_ValueError,
                     "kernel '%s': block (%u, %u, %u) has %llu threads; the device's "
                     "limit is %d a block",
                     pygpu_function_name(f), block[0], block[1], block[2], threads,
                     ctx->max_threads);
        return -1;
    }
    if (cfg->shared > (unsigned int)ctx->max_shared_optin) {
        PyErr_Format(PyExc_ValueError,
                     "kernel '%s': %u bytes of dynamic shared memory exceed the device's "
                     "limit of %d bytes a block",
                     pygpu_function_name(f), cfg->shared, ctx->max_shared_optin);
        return -1;
    }
    if (cfg->has_cluster
        && (grid[0] % cfg->cluster[0] || grid[1] % cfg->cluster[1] || grid[2] % cfg->cluster[2])) {
        PyErr_Format(PyExc_ValueError,
                     "kernel '%s': grid (%u, %u, %u) is not a multiple of cluster "
                     "(%u, %u, %u)",
                     pygpu_function_name(f), grid[0], grid[1], grid[2], cfg->cluster[0],
                     cfg->cluster[1], cfg->cluster[2]);
        return -1;
    }
    return 0;
}

/* ---- the sink ---- */

/* cfg as cuLaunchKernelEx takes it, with no attributes */
static void
launch_config_ex(const pygpu_launch_config *cfg, CUlaunchConfig *lc)
{
    lc->gridDimX = cfg->grid[0];
    lc->gridDimY = cfg->grid[1];
    lc->gridDimZ = cfg->grid[2];
    lc->blockDimX = cfg->block[0];
    lc->blockDimY = cfg->block[1];
    lc->blockDimZ = cfg->block[2];
    lc->sharedMemBytes = cfg->shared;
    lc->hStream = cfg->stream;
    lc->attrs = NULL;
    lc->numAttrs = 0;
}

/* The one launch sink (docs/design.md, "Rules"): every kernel launch pygpu
 * makes -- __call__, prepared calls, bound launches, the quick paths, the C
 * operators, PyCUDA's legacy API -- is enqueued here, the only caller of
 * cuLaunchKernel and cuLaunchKernelEx (a test greps for it).  The context
 * is current; no Python code runs.  ready: a plain configuration already in
 * cuLaunchKernelEx's form (the quick paths), else NULL and cfg is used.
 * params: the kernel's parameter pointers, or NULL with extra (a parameter
 * buffer: the legacy API).  Returns the CUresult and names the routine.
 * Every launch goes through cuLaunchKernelEx where the
 * driver has it: with no attributes it is the same launch as
 * cuLaunchKernel's, and on an H200 with driver 580 it was 0.04-0.06 us
 * quicker a launch (C loops of both, interleaved bursts; run.py shows both);
 * cuLaunchKernel serves drivers before CUDA 12. */
CUresult
pygpu_launch_enqueue(CUfunction h, const pygpu_launch_config *cfg, const CUlaunchConfig *ready,
                     void **params, void **extra, const char **routine)
{
    CUlaunchConfig lc;
    CUlaunchAttribute attrs[3];
    unsigned int n = 0;
    if (ready != NULL) {
        *routine = "cuLaunchKernelEx";
        return cu.cuLaunchKernelEx(ready, h, params, extra);
    }
    if (cu.cuLaunchKernelEx == NULL) {
        /* pygpu_launch refused cluster/cooperative/pdl already */
        *routine = "cuLaunchKernel";
        return cu.cuLaunchKernel(h, cfg->grid[0], cfg->grid[1], cfg->grid[2], cfg->block[0],
                                 cfg->block[1], cfg->block[2], cfg->shared, cfg->stream, params,
                                 extra);
    }
    *routine = "cuLaunchKernelEx";
    launch_config_ex(cfg, &lc);
    if (!cfg->has_cluster && !cfg->cooperative && !cfg->pdl)
        return cu.cuLaunchKernelEx(&lc, h, params, extra);
    memset(attrs, 0, sizeof attrs);
    if (cfg->has_cluster) {
        attrs[n].id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
        attrs[n].value.clusterDim.x = cfg->cluster[0];
        attrs[n].value.clusterDim.y = cfg->cluster[1];
        attrs[n].value.clusterDim.z = cfg->cluster[2];
        n++;
    }
    if (cfg->cooperative) {
        attrs[n].id = CU_LAUNCH_ATTRIBUTE_COOPERATIVE;
        attrs[n].value.cooperative = 1;
        n++;
    }
    if (cfg->pdl) {
        /* may start before the previous kernel on the stream ends; the
         * kernel waits with griddepcontrol.wait / cudaGridDependencySynchronize */
        attrs[n].id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
        attrs[n].value.programmaticStreamSerializationAllowed = 1;
        n++;
    }
    lc.attrs = attrs;
    lc.numAttrs = n;
    return cu.cuLaunchKernelEx(&lc, h, params, extra);
}

/* the launch between two events; waits for the end event with the GIL
 * released.  The context is current. */
static PyObject *
enqueue_timed(pygpu_state *st, pygpu_Function *f, const pygpu_launch_config *cfg, void **params)
{
    CUevent start = NULL, end = NULL;
    CUresult rc;
    float ms = 0;
    const char *where = "cuEventCreate";
    PyObject *res = NULL;
    if ((rc = cu.cuEventCreate(&start, CU_EVENT_DEFAULT)) != CUDA_SUCCESS
        || (rc = cu.cuEventCreate(&end, CU_EVENT_DEFAULT)) != CUDA_SUCCESS)
        goto done;
    where = "cuEventRecord";
    if ((rc = cu.cuEventRecord(start, cfg->stream)) != CUDA_SUCCESS)
        goto done;
    if ((rc = pygpu_launch_enqueue(f->handle, cfg, NULL, params, NULL, &where)) != CUDA_SUCCESS)
        goto done;
    where = "cuEventRecord";
    if ((rc = cu.cuEventRecord(end, cfg->stream)) != CUDA_SUCCESS)
        goto done;
    where = "cuEventSynchronize";
    Py_BEGIN_ALLOW_THREADS
        rc = cu.cuEventSynchronize(end);
    Py_END_ALLOW_THREADS
    if (rc != CUDA_SUCCESS)
        goto done;
    where = "cuEventElapsedTime";
    if ((rc = cu.cuEventElapsedTime(&ms, start, end)) != CUDA_SUCCESS)
        goto done;
    res = PyFloat_FromDouble(ms / 1000.0);
done:
    if (start)
        cu.cuEventDestroy(start);
    if (end)
        cu.cuEventDestroy(end);
    if (rc != CUDA_SUCCESS)
        return pygpu_cuda_error(st, rc, where);
    return res;
}

/* A launch failing this way may have run in another context than the one
 * this thread remembered as current (code outside pygpu changed it): the
 * launch asks the driver and, when so, runs once more in its own context. */
static int
stale_context_error(CUresult rc)
{
    return rc == CUDA_ERROR_INVALID_CONTEXT || rc == CUDA_ERROR_CONTEXT_IS_DESTROYED
           || rc == CUDA_ERROR_INVALID_HANDLE;
}

PyObject *
pygpu_launch(pygpu_state *st, pygpu_Function *f, const pygpu_launch_config *cfg,
             pygpu_argpack *pack)
{
    pygpu_scope scope;
    pygpu_launch_config local;
    CUresult rc;
    const char *routine;
    PyObject *res;
    if ((cfg->has_cluster || cfg->cooperative || cfg->pdl) && cu.cuLaunchKernelEx == NULL) {
        PyErr_SetString(st->LogicError,
                        "cluster, cooperative and pdl launches need a CUDA 12 driver");
        return NULL;
    }
    if (cfg->stream_obj != NULL && PyObject_TypeCheck(cfg->stream_obj, st->StreamType)) {
        pygpu_Context *sc = ((pygpu_Stream *)cfg->stream_obj)->context;
        if (sc != NULL && sc->detached) {
            PyErr_Format(st->LogicError, "kernel '%s': the stream's context was detached",
                         pygpu_function_name(f));
            return NULL;
        }
    }
    if (pygpu_captures_active != 0 && (cfg->stream == NULL || cfg->stream == CU_STREAM_LEGACY)) {
        /* inside this thread's capture the default stream is the capturing
         * one (graph.c: pygpu_capture_note resolves it the same way) */
        pygpu_Stream *cur = NULL;
        if (pygpu_capture_is_default(st, cfg->stream_obj))
            cur = pygpu_capture_current(f->module->context);
        if (cur != NULL) {
            local = *cfg;
            local.stream = cur->handle;
            local.stream_obj = (PyObject *)cur;
            cfg = &local;
        } else if (pygpu_capture_legacy_launch(st, f->module->context, pygpu_function_name(f))
                   < 0) {
            return NULL;
        }
    }
    if (cfg->timed && pygpu_stream_capturing(st, cfg->stream_obj)) {
        PyErr_Format(st->LogicError,
                     "kernel '%s': time_kernel=True waits for the launch, "
                     "but the stream is capturing a graph (its work is recorded, not run); "
                     "time the graph's launch instead",
                     pygpu_function_name(f));
        return NULL;
    }
    if (pygpu_scope_enter(st, f->module->context, &scope) < 0)
        return NULL;
    if (cfg->timed) {
        res = enqueue_timed(st, f, cfg, pack->ptrs);
    } else {
        rc = pygpu_launch_enqueue(f->handle, cfg, NULL, pack->ptrs, NULL, &routine);
        if (stale_context_error(rc) && !scope.pushed && pygpu_context_recheck(f->module->context)) {
            pygpu_scope_exit(&scope); /* (pushed nothing) */
            if (pygpu_scope_enter(st, f->module->context, &scope) < 0)
                return NULL;
            rc = pygpu_launch_enqueue(f->handle, cfg, NULL, pack->ptrs, NULL, &routine);
        }
        res = rc == CUDA_SUCCESS ? Py_NewRef(Py_None) : pygpu_cuda_error(st, rc, routine);
    }
    pygpu_scope_exit(&scope);
    return res;
}

/* ---- the quick launch ---- */

/* A plain launch in the fewest steps, touching the least memory (the
 * driver's launch is slower when the binding used the cache between two
 * launches): arguments pygpu_pack_fast takes, the kernel's context live and
 * current, the default stream or a pygpu Stream that is not capturing (a
 * capture keeps the arguments: the full path) and whose context is live.
 * While any capture runs (pygpu_captures_active) the full path decides:
 * the default stream may mean a capturing one.
 * The layout is read without a reference: nothing here runs Python code.
 * 1: launched, *res None or NULL with the launch's error; 0: not taken (the
 * caller takes the full path, which decides everything again). */
static int
quick_run(pygpu_state *st, pygpu_Function *f, const CUlaunchConfig *lc, PyObject *stream_obj,
          PyObject *const *args, Py_ssize_t nargs, PyObject **res)
{
    _Alignas(16) char buf[PYGPU_PACK_INLINE_BYTES];
    void *ptrs[PYGPU_PACK_INLINE_PARAMS];
    pygpu_Context *ctx = f->module->context;
    const char *routine;
    CUresult rc;
    if (pygpu_captures_active != 0)
        return 0; /* a capture runs: the full path resolves the default stream */
    if (stream_obj != NULL) {
        pygpu_Stream *s = (pygpu_Stream *)stream_obj; /* a Stream: quick_config */
        if (s->context != NULL && s->context->detached)
            return 0;
    }
    if (f->layout == NULL || ctx->detached
        || !pygpu_pack_fast(st, f->layout, args, nargs, buf, ptrs)
        || !pygpu_context_is_current(ctx))
        return 0;
    rc = pygpu_launch_enqueue(f->handle, NULL, lc, ptrs, NULL, &routine);
    if (stale_context_error(rc) && pygpu_context_recheck(ctx))
        return 0; /* it was not current after all: the full path activates it */
    *res = rc == CUDA_SUCCESS ? Py_NewRef(Py_None) : pygpu_cuda_error(st, rc, routine);
    return 1;
}

/* A plain launch's configuration as cuLaunchKernelEx takes it; 0 when cfg
 * is not one the quick launch takes (attributes, timing, a stream that is
 * not a pygpu Stream). */
static int
quick_config(pygpu_state *st, const pygpu_launch_config *cfg, CUlaunchConfig *lc)
{
    if ((cfg->stream_obj != NULL && !Py_IS_TYPE(cfg->stream_obj, st->StreamType))
        || (cfg->stream_obj == NULL && cfg->stream != NULL) || cfg->has_cluster || cfg->cooperative
        || cfg->pdl || cfg->timed || cu.cuLaunchKernelEx == NULL)
        return 0;
    launch_config_ex(cfg, lc);
    return 1;
}

/* the cached pair's launch: f->last_lc is a plain launch's configuration */
int
pygpu_launch_cached(pygpu_state *st, pygpu_Function *f, PyObject *const *args, Py_ssize_t nargs,
                    PyObject **res)
{
    return cu.cuLaunchKernelEx != NULL && quick_run(st, f, &f->last_lc, NULL, args, nargs, res);
}

void
pygpu_config_cached(const pygpu_Function *f, pygpu_launch_config *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    config_dims(NULL, (pygpu_Function *)f, f->last_block, f->last_grid, cfg);
}

int
pygpu_launch_quick(pygpu_state *st, pygpu_Function *f, const pygpu_launch_config *cfg,
                   PyObject *const *args, Py_ssize_t nargs, PyObject **res)
{
    CUlaunchConfig lc;
    return quick_config(st, cfg, &lc) && quick_run(st, f, &lc, cfg->stream_obj, args, nargs, res);
}

/* ---- BoundLaunch: configure(grid, block, stream=None, shared=0) ---- */

static PyObject *
bound_vectorcall(PyObject *callable, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    pygpu_BoundLaunch *b = (pygpu_BoundLaunch *)callable;
    pygpu_Function *f = b->function;
    pygpu_state *st = f->st;
    pygpu_argpack pack;
    PyObject *res = NULL;
    if (b->quick && kwnames == NULL
        && quick_run(st, f, &b->lc, b->cfg.stream_obj, args, PyVectorcall_NARGS(nargsf), &res))
        return res;
    if (kwnames != NULL && PyTuple_GET_SIZE(kwnames)) {
        PyErr_Format(PyExc_TypeError,
                     "kernel '%s': a configured launch takes only the "
                     "kernel's arguments",
                     pygpu_function_name(f));
        return NULL;
    }
    PYGPU_ARGPACK_INIT(&pack);
    if (pygpu_pack(st, f, args, PyVectorcall_NARGS(nargsf), NULL, &pack) == 0)
        res = pygpu_launch(st, f, &b->cfg, &pack);
    if (res != NULL
        && pygpu_capture_note(st, b->cfg.stream_obj, (PyObject *)f, args,
                              PyVectorcall_NARGS(nargsf))
               < 0)
        Py_CLEAR(res);
    pygpu_pack_finish(st, &pack, res != NULL, NULL);
    return res;
}

PyObject *
pygpu_bound_new(pygpu_state *st, pygpu_Function *f, pygpu_launch_config *cfg)
{
    pygpu_BoundLaunch *b = PyObject_New(pygpu_BoundLaunch, st->BoundLaunchType);
    if (b == NULL)
        return NULL;
    b->vectorcall = bound_vectorcall;
    Py_INCREF(f);
    b->function = f;
    b->cfg = *cfg;
    Py_XINCREF(b->cfg.stream_obj);
    memset(&b->lc, 0, sizeof b->lc);
    b->quick = quick_config(st, cfg, &b->lc);
    return (PyObject *)b;
}

/* configure() parses like __call__: the same parser, the same checks */
PyObject *
pygpu_configure(pygpu_state *st, pygpu_Function *f, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"grid", "block", "stream", "shared", NULL};
    PyObject *grid, *block, *sobj = NULL, *shared = NULL;
    pygpu_launch_config cfg;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OO|OO:configure", kwlist, &grid, &block, &sobj,
                                     &shared))
        return NULL;
    if (pygpu_function_check(st, f) < 0
        || config_build(st, f, block, grid, shared, sobj, NULL, NULL, NULL, NULL, "shared", &cfg)
               < 0
        || pygpu_layout_get(st, f) == NULL)
        return NULL;
    return pygpu_bound_new(st, f, &cfg);
}

static void
bound_dealloc(pygpu_BoundLaunch *b)
{
    PyTypeObject *tp = Py_TYPE(b);
    Py_CLEAR(b->function);
    Py_CLEAR(b->cfg.stream_obj);
    tp->tp_free((PyObject *)b);
    Py_DECREF(tp);
}

static PyObject *
bound_repr(pygpu_BoundLaunch *b)
{
    const pygpu_launch_config *c = &b->cfg;
    return PyUnicode_FromFormat("<pygpu.driver.BoundLaunch of '%U' grid=(%u, %u, %u) "
                                "block=(%u, %u, %u) shared=%u>",
                                b->function->name, c->grid[0], c->grid[1], c->grid[2], c->block[0],
                                c->block[1], c->block[2], c->shared);
}

static PyMemberDef bound_members[] = {
    {"__vectorcalloffset__", T_PYSSIZET, offsetof(pygpu_BoundLaunch, vectorcall), READONLY},
    {NULL},
};

static PyType_Slot bound_slots[] = {
    {Py_tp_dealloc, bound_dealloc},
    {Py_tp_members, bound_members},
    {Py_tp_call, PyVectorcall_Call},
    {Py_tp_repr, bound_repr},
    {Py_tp_doc, "A kernel launch with its configuration frozen; call it with the "
                "kernel's arguments."},
    {0, NULL},
};

static PyType_Spec bound_spec = {"pygpu.driver.BoundLaunch", sizeof(pygpu_BoundLaunch), 0,
                                 Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE
                                     | Py_TPFLAGS_DISALLOW_INSTANTIATION
                                     | Py_TPFLAGS_HAVE_VECTORCALL | Py_TPFLAGS_BASETYPE,
                                 bound_slots};

int
pygpu_launch_setup(PyObject *m, pygpu_state *st)
{
    return pygpu_add_type(m, &bound_spec, &st->BoundLaunchType);
}

/* A plain launch of f on the default stream, grid x block threads in one
 * dimension, as prepared_async_call(grid, block, None, *args) makes it: the
 * quick launch, else the full path (fastops.c; the caller checked the
 * configuration with pygpu_config_check).  None, or NULL with an exception. */
PyObject *
pygpu_launch_plain(pygpu_state *st, pygpu_Function *f, unsigned int grid, unsigned int block,
                   PyObject *const *args, Py_ssize_t nargs)
{
    pygpu_launch_config cfg;
    CUlaunchConfig lc;
    pygpu_argpack pack;
    PyObject *res = NULL;
    memset(&cfg, 0, sizeof cfg);
    cfg.grid[0] = grid;
    cfg.grid[1] = cfg.grid[2] = 1;
    cfg.block[0] = block;
    cfg.block[1] = cfg.block[2] = 1;
    if (quick_config(st, &cfg, &lc) && quick_run(st, f, &lc, NULL, args, nargs, &res))
        return res;
    PYGPU_ARGPACK_INIT(&pack);
    if (pygpu_function_check(st, f) == 0 && pygpu_pack(st, f, args, nargs, NULL, &pack) == 0)
        res = pygpu_launch(st, f, &cfg, &pack);
    if (res != NULL && pygpu_capture_note(st, NULL, (PyObject *)f, args, nargs) < 0)
        Py_CLEAR(res);
    pygpu_pack_finish(st, &pack, res != NULL, NULL);
    return res;
}
