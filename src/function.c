/* Function: a kernel, its parameter layout, and the launch path.
 *
 * The layout comes from cuFuncGetParamInfo, read once.  Each argument is
 * packed at its parameter's exact size; a mismatch is a TypeError naming the
 * parameter.  Launch configurations are parsed once per tuple object: the
 * common `block=(256, 1, 1)` literal is the same tuple on every call.
 */
#include "pygpu.h"
#include "pygpu_numpy.h"

#define MAX_PARAMS 1024

static int
read_layout(pygpu_state *st, pygpu_Function *f)
{
    size_t off, size, end = 0;
    int n = 0, cap = 8;
    pygpu_param *params;
    if (f->nparams >= 0)
        return 0;
    if (cu.cuFuncGetParamInfo == NULL) {
        if (!st->warned_no_param_info) {
            st->warned_no_param_info = 1;
            if (PyErr_WarnEx(PyExc_RuntimeWarning,
                             "this CUDA driver has no cuFuncGetParamInfo (it is older "
                             "than 12.4): kernel arguments are packed by PyCUDA's rules "
                             "(Python int -> int64, float -> float64) and not checked "
                             "against the kernel's parameters", 1) < 0)
                return -1;
        }
        f->nparams = 0;
        f->layout_known = 0;
        return 0;
    }
    params = PyMem_Malloc(cap * sizeof *params);
    if (params == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    for (;;) {
        CUresult rc = cu.cuFuncGetParamInfo(f->handle, (size_t)n, &off, &size);
        if (rc == CUDA_ERROR_INVALID_VALUE)
            break;
        if (rc != CUDA_SUCCESS) {
            PyMem_Free(params);
            pygpu_cuda_error(st, rc, "cuFuncGetParamInfo");
            return -1;
        }
        if (n == cap) {
            pygpu_param *p2 = PyMem_Realloc(params, 2 * cap * sizeof *params);
            if (p2 == NULL) {
                PyMem_Free(params);
                PyErr_NoMemory();
                return -1;
            }
            params = p2;
            cap *= 2;
        }
        params[n].offset = off;
        params[n].size = size;
        if (off + size > end)
            end = off + size;
        n++;
        if (n > MAX_PARAMS)
            break;
    }
    f->params = params;
    f->nparams = n;
    f->layout_known = 1;
    f->argbuf_size = end;
    f->argbuf = PyMem_Calloc(end ? end : 1, 1);
    f->argptrs = PyMem_Calloc(n ? (size_t)n : 1, sizeof(void *));
    if (f->argbuf == NULL || f->argptrs == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    for (int i = 0; i < n; i++)
        f->argptrs[i] = f->argbuf + params[i].offset;
    return 0;
}

static const char *
fname(pygpu_Function *f)
{
    const char *s = PyUnicode_AsUTF8(f->name);
    if (s == NULL) {
        PyErr_Clear();
        s = "?";
    }
    return s;
}

/* pack a Python int into size bytes; value must fit signed or unsigned */
static int
pack_int(pygpu_Function *f, int i, PyObject *obj, char *dst, size_t size)
{
    int overflow = 0;
    long long v = PyLong_AsLongLongAndOverflow(obj, &overflow);
    unsigned long long u = 0;
    if (v == -1 && PyErr_Occurred())
        return -1;
    if (overflow > 0) {
        u = PyLong_AsUnsignedLongLong(obj);
        if (u == (unsigned long long)-1 && PyErr_Occurred())
            goto too_big;
        if (size != 8)
            goto too_big;
        memcpy(dst, &u, 8);
        return 0;
    }
    if (overflow < 0)
        goto too_big;
    switch (size) {
    case 8: memcpy(dst, &v, 8); return 0;
    case 4:
        if (v < INT32_MIN || v > (long long)UINT32_MAX) goto too_big;
        { int32_t x = (int32_t)(uint32_t)v; memcpy(dst, &x, 4); }
        return 0;
    case 2:
        if (v < INT16_MIN || v > (long long)UINT16_MAX) goto too_big;
        { int16_t x = (int16_t)(uint16_t)v; memcpy(dst, &x, 2); }
        return 0;
    case 1:
        if (v < INT8_MIN || v > (long long)UINT8_MAX) goto too_big;
        { int8_t x = (int8_t)(uint8_t)v; memcpy(dst, &x, 1); }
        return 0;
    default:
        PyErr_Format(PyExc_TypeError,
                     "kernel '%s': parameter %d is %zu bytes, which a Python int cannot "
                     "fill; pass a NumPy scalar or bytes of that size", fname(f), i, size);
        return -1;
    }
too_big:
    PyErr_Clear();
    PyErr_Format(PyExc_OverflowError,
                 "kernel '%s': parameter %d is %zu bytes; %R does not fit", fname(f), i,
                 size, obj);
    return -1;
}

static int
pack_float(pygpu_Function *f, int i, double d, char *dst, size_t size)
{
    if (size == 4) {
        float x = (float)d;
        memcpy(dst, &x, 4);
        return 0;
    }
    if (size == 8) {
        memcpy(dst, &d, 8);
        return 0;
    }
    if (size == 2)
        return PyFloat_Pack2(d, dst, 1);
    PyErr_Format(PyExc_TypeError,
                 "kernel '%s': parameter %d is %zu bytes, which a Python float cannot fill",
                 fname(f), i, size);
    return -1;
}

static int
need_pointer(pygpu_Function *f, int i, size_t size, PyObject *obj)
{
    if (size == sizeof(CUdeviceptr))
        return 0;
    PyErr_Format(PyExc_TypeError,
                 "kernel '%s': parameter %d is %zu bytes, not a pointer, but got a "
                 "device pointer (%.100s)", fname(f), i, size, Py_TYPE(obj)->tp_name);
    return -1;
}

/* Pack one argument.  Returns 0, -1 with an exception, or 1 when obj is an
 * In/Out/InOut handler (the caller takes the slow path). */
static int
pack_one(pygpu_state *st, pygpu_Function *f, int i, PyObject *obj, char *dst,
         size_t size, char prep)
{
    PyTypeObject *tp = Py_TYPE(obj);
    if (tp == st->DeviceAllocationType) {
        pygpu_DeviceAllocation *a = (pygpu_DeviceAllocation *)obj;
        if (need_pointer(f, i, size, obj) < 0)
            return -1;
        if (a->freed) {
            PyErr_Format(st->LogicError, "kernel '%s': parameter %d is a freed "
                         "DeviceAllocation", fname(f), i);
            return -1;
        }
        memcpy(dst, &a->ptr, sizeof a->ptr);
        return 0;
    }
    if (tp == &PyFloat_Type)
        return pack_float(f, i, PyFloat_AS_DOUBLE(obj), dst, size);
    if (tp == &PyLong_Type) {
        if (prep == 'f' || prep == 'd' || prep == 'e')
            return pack_float(f, i, PyLong_AsDouble(obj), dst, size);
        return pack_int(f, i, obj, dst, size);
    }
    if (tp == &PyBool_Type) {
        long long v = obj == Py_True;
        if (size > 8 || size == 0 || (size & (size - 1))) {
            PyErr_Format(PyExc_TypeError, "kernel '%s': parameter %d is %zu bytes; "
                         "a bool cannot fill it", fname(f), i, size);
            return -1;
        }
        memset(dst, 0, size);
        memcpy(dst, &v, size);   /* little-endian */
        return 0;
    }
    if (PyArray_IsScalar(obj, Generic)) {
        Py_buffer view;
        PyArray_Descr *d;
        if (PyObject_GetBuffer(obj, &view, PyBUF_SIMPLE) < 0)
            return -1;
        if ((size_t)view.len != size) {
            d = PyArray_DescrFromScalar(obj);
            PyErr_Format(PyExc_TypeError,
                         "kernel '%s': parameter %d is %zu bytes but got a NumPy %S "
                         "(%zd bytes)", fname(f), i, size, d ? (PyObject *)d : Py_None,
                         view.len);
            Py_XDECREF(d);
            PyBuffer_Release(&view);
            return -1;
        }
        memcpy(dst, view.buf, size);
        PyBuffer_Release(&view);
        return 0;
    }
    if (obj == Py_None) {
        CUdeviceptr z = 0;
        if (need_pointer(f, i, size, obj) < 0)
            return -1;
        memcpy(dst, &z, sizeof z);
        return 0;
    }
    if (PyLong_Check(obj))
        return pack_int(f, i, obj, dst, size);
    if (PyFloat_Check(obj))
        return pack_float(f, i, PyFloat_AsDouble(obj), dst, size);
    if (PyObject_TypeCheck(obj, st->ArgumentHandlerType))
        return 1;
    if (PyArray_Check(obj)) {
        PyErr_Format(PyExc_TypeError,
                     "kernel '%s': parameter %d got a NumPy array, which lives in host "
                     "memory; wrap it in In(), Out() or InOut(), or copy it with "
                     "to_device()", fname(f), i);
        return -1;
    }
    if (PyBytes_Check(obj) || PyByteArray_Check(obj) || PyMemoryView_Check(obj)) {
        Py_buffer view;
        if (PyObject_GetBuffer(obj, &view, PyBUF_SIMPLE) < 0)
            return -1;
        if ((size_t)view.len != size) {
            PyErr_Format(PyExc_TypeError,
                         "kernel '%s': parameter %d is %zu bytes but got %zd bytes",
                         fname(f), i, size, view.len);
            PyBuffer_Release(&view);
            return -1;
        }
        memcpy(dst, view.buf, size);
        PyBuffer_Release(&view);
        return 0;
    }
    {
        CUdeviceptr p;
        size_t cap;
        PyObject *cai;
        int r = pygpu_getattr_opt(obj, st->str_cai, &cai);
        if (r < 0)
            return -1;
        if (r > 0) {
            Py_DECREF(cai);
            if (pygpu_get_device_ptr(st, obj, &p, &cap, 0) < 0
                || need_pointer(f, i, size, obj) < 0)
                return -1;
            memcpy(dst, &p, sizeof p);
            return 0;
        }
        r = pygpu_get_dlpack_ptr(st, obj, &p);
        if (r < 0)
            return -1;
        if (r == 0) {
            if (need_pointer(f, i, size, obj) < 0)
                return -1;
            memcpy(dst, &p, sizeof p);
            return 0;
        }
    }
    PyErr_Format(PyExc_TypeError,
                 "kernel '%s': parameter %d (%zu bytes) cannot take a %.100s; pass a "
                 "DeviceAllocation or GPU array, an int, a float, a NumPy scalar, "
                 "bytes, or In/Out/InOut", fname(f), i, size, tp->tp_name);
    return -1;
}

/* Without cuFuncGetParamInfo: PyCUDA's rules, natural sizes and alignment.
 * Rebuilds f->argbuf/argptrs for this call. */
static int
pack_fallback(pygpu_state *st, pygpu_Function *f, PyObject *const *args, Py_ssize_t nargs)
{
    size_t off = 0, sizes[MAX_PARAMS];
    Py_ssize_t i;
    if (nargs > MAX_PARAMS) {
        PyErr_SetString(PyExc_TypeError, "too many kernel arguments");
        return -1;
    }
    for (i = 0; i < nargs; i++) {
        PyObject *o = args[i];
        size_t sz = 8;
        if (PyArray_IsScalar(o, Generic)) {
            PyArray_Descr *d = PyArray_DescrFromScalar(o);
            if (d == NULL)
                return -1;
            sz = (size_t)PyDataType_ELSIZE(d);
            Py_DECREF(d);
        } else if (PyBytes_Check(o)) {
            sz = (size_t)PyBytes_GET_SIZE(o);
        }
        sizes[i] = sz;
        size_t align = sz >= 8 ? 8 : (sz >= 4 ? 4 : (sz >= 2 ? 2 : 1));
        off = (off + align - 1) & ~(align - 1);
        off += sz;
    }
    PyMem_Free(f->argbuf);
    PyMem_Free(f->argptrs);
    PyMem_Free(f->params);
    f->argbuf = PyMem_Calloc(off ? off : 1, 1);
    f->argptrs = PyMem_Calloc(nargs ? (size_t)nargs : 1, sizeof(void *));
    f->params = PyMem_Calloc(nargs ? (size_t)nargs : 1, sizeof(pygpu_param));
    if (!f->argbuf || !f->argptrs || !f->params) {
        PyErr_NoMemory();
        return -1;
    }
    off = 0;
    for (i = 0; i < nargs; i++) {
        size_t sz = sizes[i];
        size_t align = sz >= 8 ? 8 : (sz >= 4 ? 4 : (sz >= 2 ? 2 : 1));
        off = (off + align - 1) & ~(align - 1);
        f->params[i].offset = off;
        f->params[i].size = sz;
        f->argptrs[i] = f->argbuf + off;
        off += sz;
    }
    f->nparams = (int)nargs;
    f->argbuf_size = off;
    return 0;
}

/* Pack all arguments into f->argbuf.  Returns 0, -1, or 1 (handlers). */
static int
pack_args(pygpu_state *st, pygpu_Function *f, PyObject *const *args, Py_ssize_t nargs)
{
    Py_ssize_t i;
    if (f->nparams < 0 && read_layout(st, f) < 0)
        return -1;
    if (f->prepared && !f->layout_known && (Py_ssize_t)strlen(f->prepared) != nargs) {
        PyErr_Format(PyExc_TypeError, "kernel '%s' was prepared for %zd arguments but %zd "
                     "were given", fname(f), (Py_ssize_t)strlen(f->prepared), nargs);
        return -1;
    }
    if (!f->layout_known) {
        for (i = 0; i < nargs; i++)
            if (PyObject_TypeCheck(args[i], st->ArgumentHandlerType))
                return 1;
        if (pack_fallback(st, f, args, nargs) < 0)
            return -1;
    } else if (nargs != f->nparams) {
        for (i = 0; i < nargs; i++)
            if (PyObject_TypeCheck(args[i], st->ArgumentHandlerType))
                return 1;   /* the slow path reports the count itself */
        PyErr_Format(PyExc_TypeError, "kernel '%s' takes %d argument%s but %zd %s given",
                     fname(f), f->nparams, f->nparams == 1 ? "" : "s", nargs,
                     nargs == 1 ? "was" : "were");
        return -1;
    }
    for (i = 0; i < nargs; i++) {
        int r = pack_one(st, f, (int)i, args[i], f->argbuf + f->params[i].offset,
                         f->params[i].size, f->prepared ? f->prepared[i] : 0);
        if (r != 0)
            return r;
    }
    return 0;
}

/* Parse a block or grid: an int or a tuple of 1 to 3 positive ints. */
static int
parse_dims(PyObject *obj, unsigned int out[3], const char *what)
{
    Py_ssize_t n, i;
    out[0] = out[1] = out[2] = 1;
    if (PyLong_Check(obj)) {
        long v = PyLong_AsLong(obj);
        if (v == -1 && PyErr_Occurred())
            return -1;
        if (v <= 0 || v > UINT_MAX) {
            PyErr_Format(PyExc_ValueError, "%s must be positive, got %ld", what, v);
            return -1;
        }
        out[0] = (unsigned int)v;
        return 0;
    }
    if (!PyTuple_Check(obj) && !PyList_Check(obj)) {
        PyErr_Format(PyExc_TypeError, "%s must be a tuple of 1 to 3 ints, not %.100s",
                     what, Py_TYPE(obj)->tp_name);
        return -1;
    }
    n = PySequence_Fast_GET_SIZE(obj);
    if (n < 1 || n > 3) {
        PyErr_Format(PyExc_ValueError, "%s must have 1 to 3 dimensions, got %zd", what, n);
        return -1;
    }
    for (i = 0; i < n; i++) {
        PyObject *item = PySequence_Fast_GET_ITEM(obj, i);
        long v;
        if (!PyLong_Check(item)) {
            PyErr_Format(PyExc_TypeError, "%s[%zd] must be an int, not %.100s", what, i,
                         Py_TYPE(item)->tp_name);
            return -1;
        }
        v = PyLong_AsLong(item);
        if (v == -1 && PyErr_Occurred())
            return -1;
        if (v <= 0 || v > UINT_MAX) {
            PyErr_Format(PyExc_ValueError, "%s[%zd] must be positive, got %ld (%s=%R)",
                         what, i, v, what, obj);
            return -1;
        }
        out[i] = (unsigned int)v;
    }
    return 0;
}

static int
check_config(pygpu_state *st, pygpu_Function *f, const unsigned int block[3],
             const unsigned int grid[3], unsigned int shared)
{
    pygpu_Context *ctx = f->module->context;
    static const char xyz[3] = {'x', 'y', 'z'};
    int i;
    if (!ctx->limits_read && pygpu_context_read_limits(st, ctx) < 0)
        return -1;
    for (i = 0; i < 3; i++) {
        if (block[i] > (unsigned int)ctx->max_block[i]) {
            PyErr_Format(PyExc_ValueError,
                         "kernel '%s': block %c dimension %u exceeds the device's limit of %d",
                         fname(f), xyz[i], block[i], ctx->max_block[i]);
            return -1;
        }
        if (grid[i] > (unsigned int)ctx->max_grid[i]) {
            PyErr_Format(PyExc_ValueError,
                         "kernel '%s': grid %c dimension %u exceeds the device's limit of %d",
                         fname(f), xyz[i], grid[i], ctx->max_grid[i]);
            return -1;
        }
    }
    if (f->max_threads == 0) {
        /* __launch_bounds__ and register use can lower it below the device's */
        int v = 0;
        CUresult rc = cu.cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK,
                                            f->handle);
        if (rc != CUDA_SUCCESS) {
            pygpu_cuda_error(st, rc, "cuFuncGetAttribute");
            return -1;
        }
        f->max_threads = v > 0 ? v : ctx->max_threads;
    }
    if ((unsigned long long)block[0] * block[1] * block[2] > (unsigned long long)f->max_threads
        && f->max_threads < ctx->max_threads) {
        PyErr_Format(PyExc_ValueError,
                     "kernel '%s': block (%u, %u, %u) has %llu threads; this kernel's "
                     "limit is %d a block (from __launch_bounds__ or its register use)",
                     fname(f), block[0], block[1], block[2],
                     (unsigned long long)block[0] * block[1] * block[2], f->max_threads);
        return -1;
    }
    if ((unsigned long long)block[0] * block[1] * block[2] > (unsigned long long)ctx->max_threads) {
        PyErr_Format(PyExc_ValueError,
                     "kernel '%s': block (%u, %u, %u) has %llu threads; the device's "
                     "limit is %d a block", fname(f), block[0], block[1], block[2],
                     (unsigned long long)block[0] * block[1] * block[2], ctx->max_threads);
        return -1;
    }
    if (shared > (unsigned int)ctx->max_shared_optin) {
        PyErr_Format(PyExc_ValueError,
                     "kernel '%s': %u bytes of dynamic shared memory exceed the device's "
                     "limit of %d bytes a block", fname(f), shared, ctx->max_shared_optin);
        return -1;
    }
    return 0;
}

/* Enqueue the packed launch.  GIL held (enqueueing does not block). */
static int
launch(pygpu_state *st, pygpu_Function *f, const unsigned int grid[3],
       const unsigned int block[3], unsigned int shared, CUstream stream)
{
    int pushed = 0;
    CUresult rc;
    pygpu_Context *ctx = f->module->context;
    if (ctx->detached)
        return pygpu_context_check(st, ctx);
    rc = pygpu_context_enter(ctx, &pushed);
    if (rc == CUDA_SUCCESS) {
        rc = cu.cuLaunchKernel(f->handle, grid[0], grid[1], grid[2], block[0], block[1],
                               block[2], shared, stream, f->argptrs, NULL);
        pygpu_context_exit(pushed);
    }
    if (rc != CUDA_SUCCESS) {
        pygpu_cuda_error(st, rc, "cuLaunchKernel");
        return -1;
    }
    return 0;
}

static PyObject *
slow_path(pygpu_state *st, PyObject *callable, PyObject *const *args, size_t nargsf,
          PyObject *kwnames)
{
    PyObject *fn = st->handler_slow_path, *res;
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf), nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
    PyObject **full;
    if (fn == NULL) {
        PyErr_SetString(PyExc_TypeError, "In/Out/InOut need the pygpu.driver module");
        return NULL;
    }
    full = PyMem_Malloc((size_t)(nargs + nkw + 1) * sizeof(PyObject *));
    if (full == NULL)
        return PyErr_NoMemory();
    full[0] = callable;
    memcpy(full + 1, args, (size_t)(nargs + nkw) * sizeof(PyObject *));
    res = PyObject_Vectorcall(fn, full, (size_t)(nargs + 1), kwnames);
    PyMem_Free(full);
    return res;
}

static int
launch_ex(pygpu_state *st, pygpu_Function *f, const unsigned int grid[3],
          const unsigned int block[3], unsigned int shared, CUstream stream,
          PyObject *cluster, int cooperative, int pdl)
{
    CUlaunchConfig cfg;
    CUlaunchAttribute attrs[3];
    unsigned int cdims[3];
    int n = 0, pushed = 0;
    CUresult rc;
    if (cu.cuLaunchKernelEx == NULL) {
        PyErr_SetString(st->LogicError,
                        "cluster, cooperative and pdl launches need a CUDA 12 driver");
        return -1;
    }
    memset(&cfg, 0, sizeof cfg);
    memset(attrs, 0, sizeof attrs);
    if (cluster != NULL && cluster != Py_None) {
        if (parse_dims(cluster, cdims, "cluster") < 0)
            return -1;
        if (grid[0] % cdims[0] || grid[1] % cdims[1] || grid[2] % cdims[2]) {
            PyErr_Format(PyExc_ValueError,
                         "kernel '%s': grid (%u, %u, %u) is not a multiple of cluster "
                         "(%u, %u, %u)", fname(f), grid[0], grid[1], grid[2], cdims[0],
                         cdims[1], cdims[2]);
            return -1;
        }
        attrs[n].id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
        attrs[n].value.clusterDim.x = cdims[0];
        attrs[n].value.clusterDim.y = cdims[1];
        attrs[n].value.clusterDim.z = cdims[2];
        n++;
    }
    if (cooperative) {
        attrs[n].id = CU_LAUNCH_ATTRIBUTE_COOPERATIVE;
        attrs[n].value.cooperative = 1;
        n++;
    }
    if (pdl) {
        /* may start before the previous kernel on the stream ends; the
         * kernel waits with griddepcontrol.wait / cudaGridDependencySynchronize */
        attrs[n].id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
        attrs[n].value.programmaticStreamSerializationAllowed = 1;
        n++;
    }
    cfg.gridDimX = grid[0]; cfg.gridDimY = grid[1]; cfg.gridDimZ = grid[2];
    cfg.blockDimX = block[0]; cfg.blockDimY = block[1]; cfg.blockDimZ = block[2];
    cfg.sharedMemBytes = shared;
    cfg.hStream = stream;
    cfg.attrs = attrs;
    cfg.numAttrs = (unsigned int)n;
    if (f->module->context->detached)
        return pygpu_context_check(st, f->module->context);
    rc = pygpu_context_enter(f->module->context, &pushed);
    if (rc == CUDA_SUCCESS) {
        rc = cu.cuLaunchKernelEx(&cfg, f->handle, f->argptrs, NULL);
        pygpu_context_exit(pushed);
    }
    if (rc != CUDA_SUCCESS) {
        pygpu_cuda_error(st, rc, "cuLaunchKernelEx");
        return -1;
    }
    return 0;
}

static PyObject *
timed_launch(pygpu_state *st, pygpu_Function *f, const unsigned int grid[3],
             const unsigned int block[3], unsigned int shared, CUstream stream)
{
    CUevent start = NULL, end = NULL;
    CUresult rc;
    float ms = 0;
    int pushed = 0;
    const char *where = "cuEventCreate";
    rc = pygpu_context_enter(f->module->context, &pushed);
    if (rc != CUDA_SUCCESS)
        return pygpu_cuda_error(st, rc, "cuCtxPushCurrent");
    if ((rc = cu.cuEventCreate(&start, 0)) != CUDA_SUCCESS
        || (rc = cu.cuEventCreate(&end, 0)) != CUDA_SUCCESS)
        goto fail;
    where = "cuEventRecord";
    if ((rc = cu.cuEventRecord(start, stream)) != CUDA_SUCCESS)
        goto fail;
    pygpu_context_exit(pushed);
    pushed = 0;
    if (launch(st, f, grid, block, shared, stream) < 0) {
        cu.cuEventDestroy(start);
        cu.cuEventDestroy(end);
        return NULL;
    }
    if ((rc = cu.cuEventRecord(end, stream)) != CUDA_SUCCESS)
        goto fail;
    where = "cuEventSynchronize";
    Py_BEGIN_ALLOW_THREADS
    rc = cu.cuEventSynchronize(end);
    Py_END_ALLOW_THREADS
    if (rc != CUDA_SUCCESS)
        goto fail;
    where = "cuEventElapsedTime";
    if ((rc = cu.cuEventElapsedTime(&ms, start, end)) != CUDA_SUCCESS)
        goto fail;
    cu.cuEventDestroy(start);
    cu.cuEventDestroy(end);
    return PyFloat_FromDouble(ms / 1000.0);
fail:
    pygpu_context_exit(pushed);
    if (start) cu.cuEventDestroy(start);
    if (end) cu.cuEventDestroy(end);
    return pygpu_cuda_error(st, rc, where);
}

/* f(*args, block=(x,y,z), grid=(x,y,z), shared=0, stream=None,
 *   time_kernel=False, cluster=None, cooperative=False) */
static PyObject *
function_vectorcall(PyObject *callable, PyObject *const *args, size_t nargsf,
                    PyObject *kwnames)
{
    pygpu_Function *f = (pygpu_Function *)callable;
    pygpu_state *st = PYGPU_STATE(f);
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf), nkw, i;
    PyObject *block = NULL, *grid = NULL, *shared_obj = NULL, *stream_obj = NULL;
    PyObject *time_kernel = NULL, *cluster = NULL, *coop = NULL, *pdl = NULL;
    unsigned int blk[3], grd[3], shared = 0;
    CUstream stream = NULL;
    int r;

    nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
    for (i = 0; i < nkw; i++) {
        PyObject *k = PyTuple_GET_ITEM(kwnames, i), *v = args[nargs + i];
        if (k == st->str_block) block = v;
        else if (k == st->str_grid) grid = v;
        else if (k == st->str_shared) shared_obj = v;
        else if (k == st->str_stream) stream_obj = v;
        else if (k == st->str_time_kernel) time_kernel = v;
        else if (PyUnicode_CompareWithASCIIString(k, "block") == 0) block = v;
        else if (PyUnicode_CompareWithASCIIString(k, "grid") == 0) grid = v;
        else if (PyUnicode_CompareWithASCIIString(k, "shared") == 0) shared_obj = v;
        else if (PyUnicode_CompareWithASCIIString(k, "stream") == 0) stream_obj = v;
        else if (PyUnicode_CompareWithASCIIString(k, "time_kernel") == 0) time_kernel = v;
        else if (PyUnicode_CompareWithASCIIString(k, "cluster") == 0) cluster = v;
        else if (PyUnicode_CompareWithASCIIString(k, "cooperative") == 0) coop = v;
        else if (PyUnicode_CompareWithASCIIString(k, "pdl") == 0) pdl = v;
        else {
            PyErr_Format(PyExc_TypeError,
                         "kernel '%s' got an unexpected keyword argument %R (launch "
                         "options: block, grid, shared, stream, time_kernel, cluster, "
                         "cooperative, pdl)", fname(f), k);
            return NULL;
        }
    }
    if (block == NULL) {
        PyErr_Format(PyExc_TypeError,
                     "kernel '%s': launching needs block=(x, y, z)", fname(f));
        return NULL;
    }
    if (block == f->last_block) {
        memcpy(blk, f->block, sizeof blk);
    } else {
        if (parse_dims(block, blk, "block") < 0)
            return NULL;
    }
    if (grid == NULL) {
        grd[0] = grd[1] = grd[2] = 1;
    } else if (grid == f->last_grid) {
        memcpy(grd, f->grid, sizeof grd);
    } else if (parse_dims(grid, grd, "grid") < 0) {
        return NULL;
    }
    if (shared_obj != NULL) {
        long v = PyLong_AsLong(shared_obj);
        if (v == -1 && PyErr_Occurred())
            return NULL;
        if (v < 0 || v > INT_MAX) {
            PyErr_Format(PyExc_ValueError, "shared must be >= 0, got %ld", v);
            return NULL;
        }
        shared = (unsigned int)v;
    }
    if (block != f->last_block || grid != f->last_grid || shared) {
        if (check_config(st, f, blk, grd, shared) < 0)
            return NULL;
        if (grid != NULL && PyTuple_CheckExact(grid) && PyTuple_CheckExact(block) && !shared) {
            Py_INCREF(block);
            Py_XSETREF(f->last_block, block);
            Py_INCREF(grid);
            Py_XSETREF(f->last_grid, grid);
            memcpy(f->block, blk, sizeof blk);
            memcpy(f->grid, grd, sizeof grd);
        }
    }
    if (stream_obj != NULL) {
        if (Py_IS_TYPE(stream_obj, st->StreamType))
            stream = ((pygpu_Stream *)stream_obj)->handle;
        else if (pygpu_get_stream(st, stream_obj, &stream) < 0)
            return NULL;
    }
    r = pack_args(st, f, args, nargs);
    if (r < 0)
        return NULL;
    if (r > 0)
        return slow_path(st, callable, args, nargsf, kwnames);
    {
        /* truth tests can fail (a NumPy array is neither true nor false) */
        int want_time = time_kernel != NULL ? PyObject_IsTrue(time_kernel) : 0;
        int want_coop = coop != NULL ? PyObject_IsTrue(coop) : 0;
        int want_pdl = pdl != NULL ? PyObject_IsTrue(pdl) : 0;
        if (want_time < 0 || want_coop < 0 || want_pdl < 0)
            return NULL;
        if (want_time)
            return timed_launch(st, f, grd, blk, shared, stream);
        if ((cluster != NULL && cluster != Py_None) || want_coop || want_pdl) {
            if (launch_ex(st, f, grd, blk, shared, stream, cluster, want_coop, want_pdl) < 0)
                return NULL;
            Py_RETURN_NONE;
        }
    }
    if (launch(st, f, grd, blk, shared, stream) < 0)
        return NULL;
    Py_RETURN_NONE;
}

PyObject *
pygpu_function_new(pygpu_state *st, pygpu_Module *mod, CUfunction h, PyObject *name)
{
    pygpu_Function *f = PyObject_New(pygpu_Function, st->FunctionType);
    if (f == NULL)
        return NULL;
    f->vectorcall = function_vectorcall;
    f->handle = h;
    Py_INCREF(mod);
    f->module = mod;
    Py_INCREF(name);
    f->name = name;
    f->nparams = -1;
    f->max_threads = 0;
    f->layout_known = 0;
    f->params = NULL;
    f->argbuf_size = 0;
    f->argbuf = NULL;
    f->argptrs = NULL;
    f->prepared = NULL;
    f->last_block = f->last_grid = NULL;
    f->weakreflist = NULL;
    return (PyObject *)f;
}

static void
function_dealloc(pygpu_Function *f)
{
    PyTypeObject *tp = Py_TYPE(f);
    if (f->weakreflist != NULL)
        PyObject_ClearWeakRefs((PyObject *)f);
    PyMem_Free(f->params);
    PyMem_Free(f->argbuf);
    PyMem_Free(f->argptrs);
    PyMem_Free(f->prepared);
    Py_CLEAR(f->last_block);
    Py_CLEAR(f->last_grid);
    Py_CLEAR(f->name);
    Py_CLEAR(f->module);
    PyObject_Free(f);
    Py_DECREF(tp);
}

/* ---- attributes and occupancy ---- */

static PyObject *
func_attr(pygpu_Function *f, int attr)
{
    int v;
    CUresult rc = cu.cuFuncGetAttribute(&v, (CUfunction_attribute)attr, f->handle);
    if (rc != CUDA_SUCCESS)
        return pygpu_cuda_error(PYGPU_STATE(f), rc, "cuFuncGetAttribute");
    return PyLong_FromLong(v);
}

static PyObject *
function_get_attribute(pygpu_Function *f, PyObject *arg)
{
    long a = PyLong_AsLong(arg);
    if (a == -1 && PyErr_Occurred())
        return NULL;
    return func_attr(f, (int)a);
}

static PyObject *
function_set_attribute(pygpu_Function *f, PyObject *args)
{
    int attr, value;
    CUresult rc;
    if (!PyArg_ParseTuple(args, "ii:set_attribute", &attr, &value))
        return NULL;
    rc = cu.cuFuncSetAttribute(f->handle, (CUfunction_attribute)attr, value);
    if (rc != CUDA_SUCCESS)
        return pygpu_cuda_error(PYGPU_STATE(f), rc, "cuFuncSetAttribute");
    Py_RETURN_NONE;
}

static PyObject *
function_set_cache_config(pygpu_Function *f, PyObject *arg)
{
    long a = PyLong_AsLong(arg);
    CUresult rc;
    if (a == -1 && PyErr_Occurred())
        return NULL;
    rc = cu.cuFuncSetCacheConfig(f->handle, (CUfunc_cache)a);
    if (rc != CUDA_SUCCESS)
        return pygpu_cuda_error(PYGPU_STATE(f), rc, "cuFuncSetCacheConfig");
    Py_RETURN_NONE;
}

#define ATTR_GETTER(pyname, cattr)                                     \
    static PyObject *function_get_##pyname(pygpu_Function *f, void *c) \
    { return func_attr(f, cattr); }
ATTR_GETTER(num_regs, CU_FUNC_ATTRIBUTE_NUM_REGS)
ATTR_GETTER(shared_size_bytes, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES)
ATTR_GETTER(const_size_bytes, CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES)
ATTR_GETTER(local_size_bytes, CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES)
ATTR_GETTER(max_threads_per_block, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK)
ATTR_GETTER(ptx_version, CU_FUNC_ATTRIBUTE_PTX_VERSION)
ATTR_GETTER(binary_version, CU_FUNC_ATTRIBUTE_BINARY_VERSION)
ATTR_GETTER(max_dynamic_shared_size_bytes, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES)

static PyObject *
function_max_active_blocks(pygpu_Function *f, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"block_size", "dynamic_shared", NULL};
    int bs, n;
    size_t dyn = 0;
    CUresult rc;
    int pushed;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "i|n:max_active_blocks_per_multiprocessor",
                                     kwlist, &bs, &dyn))
        return NULL;
    rc = pygpu_context_enter(f->module->context, &pushed);
    if (rc == CUDA_SUCCESS) {
        rc = cu.cuOccupancyMaxActiveBlocksPerMultiprocessor(&n, f->handle, bs, dyn);
        pygpu_context_exit(pushed);
    }
    if (rc != CUDA_SUCCESS)
        return pygpu_cuda_error(PYGPU_STATE(f), rc, "cuOccupancyMaxActiveBlocksPerMultiprocessor");
    return PyLong_FromLong(n);
}

static PyObject *
function_max_potential_block_size(pygpu_Function *f, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"dynamic_shared", "block_size_limit", NULL};
    int grid, block, limit = 0, pushed;
    size_t dyn = 0;
    CUresult rc;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|ni:max_potential_block_size", kwlist,
                                     &dyn, &limit))
        return NULL;
    rc = pygpu_context_enter(f->module->context, &pushed);
    if (rc == CUDA_SUCCESS) {
        rc = cu.cuOccupancyMaxPotentialBlockSize(&grid, &block, f->handle, NULL, dyn, limit);
        pygpu_context_exit(pushed);
    }
    if (rc != CUDA_SUCCESS)
        return pygpu_cuda_error(PYGPU_STATE(f), rc, "cuOccupancyMaxPotentialBlockSize");
    return Py_BuildValue("(ii)", grid, block);
}

/* ---- prepared launches (PyCUDA) ---- */

static int
type_char(PyObject *item, char *out)
{
    if (PyUnicode_Check(item) && PyUnicode_GET_LENGTH(item) == 1) {
        Py_UCS4 c = PyUnicode_READ_CHAR(item, 0);
        if (c == 0 || c > 127) {
            PyErr_Format(PyExc_ValueError, "prepare(): unknown type %R", item);
            return -1;
        }
        *out = (char)c;
        return 0;
    }
    PyArray_Descr *d = NULL;
    if (!PyArray_DescrConverter(item, &d))
        return -1;
    *out = d->type;
    Py_DECREF(d);
    return 0;
}

static size_t
char_size(char c)
{
    switch (c) {
    case 'b': case 'B': case 'c': case '?': return 1;
    case 'h': case 'H': case 'e': return 2;
    case 'i': case 'I': case 'f': return 4;
    case 'l': case 'L': case 'q': case 'Q': case 'd': case 'P': case 'p': return 8;
    default: return 0;
    }
}

static PyObject *
function_prepare(pygpu_Function *f, PyObject *args, PyObject *kwds)
{
    pygpu_state *st = PYGPU_STATE(f);
    static char *kwlist[] = {"arg_types", NULL};
    PyObject *types, *seq;
    Py_ssize_t n, i;
    char *chars;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O:prepare", kwlist, &types))
        return NULL;
    if (f->nparams < 0 && read_layout(st, f) < 0)
        return NULL;
    seq = PySequence_List(types);    /* "PPif" or a sequence of dtypes */
    if (seq == NULL)
        return NULL;
    n = PyList_GET_SIZE(seq);
    chars = PyMem_Calloc((size_t)n + 1, 1);
    if (chars == NULL) {
        Py_DECREF(seq);
        return PyErr_NoMemory();
    }
    for (i = 0; i < n; i++) {
        if (type_char(PyList_GET_ITEM(seq, i), &chars[i]) < 0)
            goto error;
        if (char_size(chars[i]) == 0 && chars[i] != 'V') {
            PyErr_Format(PyExc_ValueError, "prepare(): unknown type %R at position %zd",
                         PyList_GET_ITEM(seq, i), i);
            goto error;
        }
    }
    if (f->layout_known) {
        if (n != f->nparams) {
            PyErr_Format(PyExc_TypeError,
                         "prepare(): kernel '%s' takes %d arguments but %zd types were given",
                         fname(f), f->nparams, n);
            goto error;
        }
        for (i = 0; i < n; i++) {
            size_t cs = char_size(chars[i]);
            if (cs && cs != f->params[i].size) {
                PyErr_Format(PyExc_TypeError,
                             "prepare(): kernel '%s' parameter %zd is %zu bytes but type "
                             "'%c' is %zu bytes", fname(f), i, f->params[i].size,
                             (int)(unsigned char)chars[i], cs);
                goto error;
            }
        }
    }
    Py_DECREF(seq);
    PyMem_Free(f->prepared);
    f->prepared = chars;
    Py_INCREF(f);
    return (PyObject *)f;
error:
    Py_DECREF(seq);
    PyMem_Free(chars);
    return NULL;
}

/* prepared_call(grid, block, *args, shared_size=0) and the async/timed forms */
static PyObject *
prepared_common(pygpu_Function *f, PyObject *const *args, Py_ssize_t nargs,
                PyObject *kwnames, int with_stream, int timed)
{
    pygpu_state *st = PYGPU_STATE(f);
    unsigned int blk[3], grd[3], shared = 0;
    CUstream stream = NULL;
    Py_ssize_t first = with_stream ? 3 : 2, nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0, i;
    int r;
    if (nargs < first) {
        PyErr_Format(PyExc_TypeError, "prepared call takes grid, block%s, then the kernel's "
                     "arguments", with_stream ? ", stream" : "");
        return NULL;
    }
    for (i = 0; i < nkw; i++) {
        PyObject *k = PyTuple_GET_ITEM(kwnames, i);
        if (PyUnicode_CompareWithASCIIString(k, "shared_size") == 0) {
            long v = PyLong_AsLong(args[nargs + i]);
            if (v == -1 && PyErr_Occurred())
                return NULL;
            if (v < 0 || v > INT_MAX) {
                PyErr_Format(PyExc_ValueError, "shared_size must be >= 0, got %ld", v);
                return NULL;
            }
            shared = (unsigned int)v;
        } else {
            PyErr_Format(PyExc_TypeError, "unexpected keyword argument %R", k);
            return NULL;
        }
    }
    if (args[0] == f->last_grid) memcpy(grd, f->grid, sizeof grd);
    else if (parse_dims(args[0], grd, "grid") < 0) return NULL;
    if (args[1] == f->last_block) memcpy(blk, f->block, sizeof blk);
    else if (parse_dims(args[1], blk, "block") < 0) return NULL;
    if (args[0] != f->last_grid || args[1] != f->last_block || shared) {
        if (check_config(st, f, blk, grd, shared) < 0)
            return NULL;
        if (PyTuple_CheckExact(args[0]) && PyTuple_CheckExact(args[1]) && !shared) {
            Py_INCREF(args[1]);
            Py_XSETREF(f->last_block, args[1]);
            Py_INCREF(args[0]);
            Py_XSETREF(f->last_grid, args[0]);
            memcpy(f->block, blk, sizeof blk);
            memcpy(f->grid, grd, sizeof grd);
        }
    }
    if (with_stream && pygpu_get_stream(st, args[2], &stream) < 0)
        return NULL;
    r = pack_args(st, f, args + first, nargs - first);
    if (r > 0) {
        PyErr_SetString(PyExc_TypeError, "prepared calls do not take In/Out/InOut");
        return NULL;
    }
    if (r < 0)
        return NULL;
    if (timed)
        return timed_launch(st, f, grd, blk, shared, stream);
    if (launch(st, f, grd, blk, shared, stream) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *
function_prepared_call(pygpu_Function *f, PyObject *const *args, Py_ssize_t nargs, PyObject *kw)
{
    return prepared_common(f, args, nargs, kw, 0, 0);
}

static PyObject *
function_prepared_async_call(pygpu_Function *f, PyObject *const *args, Py_ssize_t nargs,
                             PyObject *kw)
{
    return prepared_common(f, args, nargs, kw, 1, 0);
}

static PyObject *
function_prepared_timed_call(pygpu_Function *f, PyObject *const *args, Py_ssize_t nargs,
                             PyObject *kw)
{
    return prepared_common(f, args, nargs, kw, 0, 1);
}

/* ---- BoundLaunch: configure(grid, block, stream=None, shared=0) ---- */

static PyObject *
bound_vectorcall(PyObject *callable, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    pygpu_BoundLaunch *b = (pygpu_BoundLaunch *)callable;
    pygpu_Function *f = b->function;
    pygpu_state *st = PYGPU_STATE(f);
    int r;
    if (kwnames != NULL && PyTuple_GET_SIZE(kwnames)) {
        PyErr_SetString(PyExc_TypeError, "a configured launch takes only the kernel's arguments");
        return NULL;
    }
    r = pack_args(st, f, args, PyVectorcall_NARGS(nargsf));
    if (r > 0) {
        PyErr_SetString(PyExc_TypeError, "configured launches do not take In/Out/InOut");
        return NULL;
    }
    if (r < 0 || launch(st, f, b->grid, b->block, b->shared, b->stream) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *
function_configure(pygpu_Function *f, PyObject *args, PyObject *kwds)
{
    pygpu_state *st = PYGPU_STATE(f);
    static char *kwlist[] = {"grid", "block", "stream", "shared", NULL};
    PyObject *grid, *block, *sobj = Py_None;
    unsigned int shared = 0;
    pygpu_BoundLaunch *b;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OO|OI:configure", kwlist, &grid, &block,
                                     &sobj, &shared))
        return NULL;
    b = PyObject_New(pygpu_BoundLaunch, st->BoundLaunchType);
    if (b == NULL)
        return NULL;
    b->vectorcall = bound_vectorcall;
    Py_INCREF(f);
    b->function = f;
    b->stream_obj = NULL;
    b->shared = shared;
    if (parse_dims(grid, b->grid, "grid") < 0 || parse_dims(block, b->block, "block") < 0
        || check_config(st, f, b->block, b->grid, shared) < 0
        || pygpu_get_stream(st, sobj, &b->stream) < 0
        || (f->nparams < 0 && read_layout(st, f) < 0)) {
        Py_DECREF(b);
        return NULL;
    }
    Py_INCREF(sobj);
    b->stream_obj = sobj;
    return (PyObject *)b;
}

static void
bound_dealloc(pygpu_BoundLaunch *b)
{
    PyTypeObject *tp = Py_TYPE(b);
    Py_CLEAR(b->function);
    Py_CLEAR(b->stream_obj);
    PyObject_Free(b);
    Py_DECREF(tp);
}

static PyObject *
bound_repr(pygpu_BoundLaunch *b)
{
    return PyUnicode_FromFormat("<pygpu.driver.BoundLaunch of '%U' grid=(%u, %u, %u) "
                                "block=(%u, %u, %u) shared=%u>", b->function->name,
                                b->grid[0], b->grid[1], b->grid[2], b->block[0],
                                b->block[1], b->block[2], b->shared);
}

/* ---- getters ---- */

static PyObject *
function_get_name(pygpu_Function *f, void *c)
{
    Py_INCREF(f->name);
    return f->name;
}

static PyObject *
function_get_module(pygpu_Function *f, void *c)
{
    Py_INCREF(f->module);
    return (PyObject *)f->module;
}

static PyObject *
function_get_handle(pygpu_Function *f, void *c)
{
    return PyLong_FromVoidPtr(f->handle);
}

static PyObject *
function_get_param_sizes(pygpu_Function *f, void *c)
{
    PyObject *t;
    int i;
    if (f->nparams < 0 && read_layout(PYGPU_STATE(f), f) < 0)
        return NULL;
    if (!f->layout_known)
        Py_RETURN_NONE;
    t = PyTuple_New(f->nparams);
    for (i = 0; t && i < f->nparams; i++) {
        PyObject *v = PyLong_FromSize_t(f->params[i].size);
        if (v == NULL) {
            Py_CLEAR(t);
            break;
        }
        PyTuple_SET_ITEM(t, i, v);
    }
    return t;
}

static PyObject *
function_repr(pygpu_Function *f)
{
    return PyUnicode_FromFormat("<pygpu.driver.Function '%U'>", f->name);
}

#define CF(fn) (PyCFunction)(void (*)(void))(fn)
static PyMethodDef function_methods[] = {
    {"get_attribute", (PyCFunction)function_get_attribute, METH_O,
     "get_attribute($self, attr, /)\n--\n\nA function_attribute's value."},
    {"set_attribute", (PyCFunction)function_set_attribute, METH_VARARGS,
     "set_attribute($self, attr, value, /)\n--\n\n"
     "Set a function_attribute, e.g. MAX_DYNAMIC_SHARED_SIZE_BYTES."},
    {"set_cache_config", (PyCFunction)function_set_cache_config, METH_O,
     "set_cache_config($self, config, /)\n--\n\nPreferred L1/shared split (func_cache)."},
    {"max_active_blocks_per_multiprocessor", CF(function_max_active_blocks),
     METH_VARARGS | METH_KEYWORDS,
     "max_active_blocks_per_multiprocessor($self, /, block_size, dynamic_shared=0)\n--\n\n"
     "Occupancy: resident blocks per SM at this block size."},
    {"max_potential_block_size", CF(function_max_potential_block_size),
     METH_VARARGS | METH_KEYWORDS,
     "max_potential_block_size($self, /, dynamic_shared=0, block_size_limit=0)\n--\n\n"
     "(min_grid_size, block_size) that maximizes occupancy."},
    {"prepare", CF(function_prepare), METH_VARARGS | METH_KEYWORDS,
     "prepare($self, /, arg_types)\n--\n\n"
     "PyCUDA's prepare: arg_types is a struct-style string ('PiF' ...) or a "
     "list of NumPy dtypes; checked against the kernel's parameters. Returns self."},
    {"prepared_call", CF(function_prepared_call), METH_FASTCALL | METH_KEYWORDS,
     "prepared_call($self, grid, block, /, *args, shared_size=0)\n--\n\n"
     "Launch with a positional configuration."},
    {"prepared_async_call", CF(function_prepared_async_call), METH_FASTCALL | METH_KEYWORDS,
     "prepared_async_call($self, grid, block, stream, /, *args, shared_size=0)\n--\n\n"
     "Launch on a stream."},
    {"prepared_timed_call", CF(function_prepared_timed_call), METH_FASTCALL | METH_KEYWORDS,
     "prepared_timed_call($self, grid, block, /, *args, shared_size=0)\n--\n\n"
     "Launch, wait, and return the kernel's time in seconds."},
    {"configure", CF(function_configure), METH_VARARGS | METH_KEYWORDS,
     "configure($self, /, grid, block, stream=None, shared=0)\n--\n\n"
     "A callable that launches this kernel with a frozen configuration: "
     "each call only packs the arguments."},
    {NULL}
};

static PyGetSetDef function_getset[] = {
    {"name", (getter)function_get_name, NULL, "The kernel's (lowered) name.", NULL},
    {"module", (getter)function_get_module, NULL, "The Module holding the kernel.", NULL},
    {"handle", (getter)function_get_handle, NULL, "The CUfunction as an int.", NULL},
    {"param_sizes", (getter)function_get_param_sizes, NULL,
     "Size in bytes of each parameter (from cuFuncGetParamInfo), or None.", NULL},
    {"num_regs", (getter)function_get_num_regs, NULL, "Registers per thread.", NULL},
    {"shared_size_bytes", (getter)function_get_shared_size_bytes, NULL, "Static shared memory.", NULL},
    {"const_size_bytes", (getter)function_get_const_size_bytes, NULL, "Constant memory.", NULL},
    {"local_size_bytes", (getter)function_get_local_size_bytes, NULL, "Local memory per thread.", NULL},
    {"max_threads_per_block", (getter)function_get_max_threads_per_block, NULL,
     "Largest block this kernel can launch with.", NULL},
    {"ptx_version", (getter)function_get_ptx_version, NULL, "PTX version (e.g. 90).", NULL},
    {"binary_version", (getter)function_get_binary_version, NULL, "Binary version (e.g. 90).", NULL},
    {"max_dynamic_shared_size_bytes", (getter)function_get_max_dynamic_shared_size_bytes, NULL,
     "Dynamic shared memory limit (raise with set_attribute).", NULL},
    {NULL}
};

static PyMemberDef function_members[] = {
    {"__vectorcalloffset__", T_PYSSIZET, offsetof(pygpu_Function, vectorcall), READONLY},
    {"__weaklistoffset__", T_PYSSIZET, offsetof(pygpu_Function, weakreflist), READONLY},
    {NULL}
};

static PyType_Slot function_slots[] = {
    {Py_tp_dealloc, function_dealloc},
    {Py_tp_methods, function_methods},
    {Py_tp_getset, function_getset},
    {Py_tp_members, function_members},
    {Py_tp_call, PyVectorcall_Call},
    {Py_tp_repr, function_repr},
    {Py_tp_doc, "A kernel, from Module.get_function() or SourceModule.get_function().\n\n"
                "Call it as ``f(*args, block=(x, y, z), grid=(x, y, z), shared=0, "
                "stream=None, time_kernel=False, cluster=None, cooperative=False, "
                "pdl=False)``. The arguments are packed by the parameter sizes the "
                "driver reports (``param_sizes``); In/Out/InOut wrap host arrays. "
                "Returns None, or with time_kernel=True the kernel's time in seconds "
                "(after waiting for it)."},
    {0, NULL}
};

static PyType_Spec function_spec = {
    "pygpu.driver.Function", sizeof(pygpu_Function), 0,
    Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE | Py_TPFLAGS_DISALLOW_INSTANTIATION |
    Py_TPFLAGS_HAVE_VECTORCALL,
    function_slots
};

static PyMemberDef bound_members[] = {
    {"__vectorcalloffset__", T_PYSSIZET, offsetof(pygpu_BoundLaunch, vectorcall), READONLY},
    {NULL}
};

static PyType_Slot bound_slots[] = {
    {Py_tp_dealloc, bound_dealloc},
    {Py_tp_members, bound_members},
    {Py_tp_call, PyVectorcall_Call},
    {Py_tp_repr, bound_repr},
    {Py_tp_doc, "A kernel launch with its configuration frozen; call it with the "
                "kernel's arguments."},
    {0, NULL}
};

static PyType_Spec bound_spec = {
    "pygpu.driver.BoundLaunch", sizeof(pygpu_BoundLaunch), 0,
    Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE | Py_TPFLAGS_DISALLOW_INSTANTIATION |
    Py_TPFLAGS_HAVE_VECTORCALL,
    bound_slots
};

/* ArgumentHandler: base of pygpu.driver.In/Out/InOut (defined in Python). */
static PyType_Slot handler_slots[] = {
    {Py_tp_doc, "Base of In, Out and InOut."},
    {0, NULL}
};

static PyType_Spec handler_spec = {
    "pygpu.driver.ArgumentHandler", sizeof(PyObject), 0,
    Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE, handler_slots
};

static PyObject *
set_handler_slow_path(PyObject *m, PyObject *fn)
{
    pygpu_state *st = PyModule_GetState(m);
    Py_INCREF(fn);
    Py_XSETREF(st->handler_slow_path, fn);
    Py_RETURN_NONE;
}

static PyMethodDef function_module_methods[] = {
    {"_set_handler_slow_path", set_handler_slow_path, METH_O, NULL},
    {NULL}
};

int
pygpu_function_setup(PyObject *m, pygpu_state *st)
{
    PyObject *tp;
    if (pygpu_add_type(m, &function_spec, &st->FunctionType) < 0
        || pygpu_add_type(m, &bound_spec, &st->BoundLaunchType) < 0)
        return -1;
    tp = PyType_FromModuleAndSpec(m, &handler_spec, NULL);
    if (tp == NULL)
        return -1;
    st->ArgumentHandlerType = (PyTypeObject *)tp;
    if (pygpu_module_add_ref(m, "ArgumentHandler", tp) < 0)
        return -1;
    return PyModule_AddFunctions(m, function_module_methods);
}
