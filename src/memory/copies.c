/* Copies and fills of device memory: memcpy_htod/dtoh/dtod/peer (and their
 * _async forms), memset_d8/16/32, the 2-D copy behind Memcpy2D.  Each
 * resolves its operands through the allocation checks (allocation.c) and
 * the capture rules (graph/capture.c) before any driver call. */
#include "pygpu.h"
#include "core/pygpu_numpy.h"

/* ---- copies ---- */

int
pygpu_check_fits(size_t n, size_t cap, const char *what, const char *side)
{
    if (cap != (size_t)-1 && n > cap) {
        PyErr_Format(PyExc_ValueError, "%s: %zu bytes do not fit in the %s, which holds %zu bytes",
                     what, n, side, cap);
        return -1;
    }
    return 0;
}

/* memcpy_htod/dtoh[_async](dest, src, stream=None): one host buffer, one
 * device pointer; htod says which is which.  The blocking forms given a
 * stream queue the copy on it (after its earlier work) and wait for it. */
static PyObject *
do_host_copy(PyObject *module, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames, int htod,
             int async)
{
    pygpu_state *st = PyModule_GetState(module);
    static const char *const argnames[] = {"dest", "src", "stream", NULL};
    static const char *fnames[2][2] = {{"memcpy_dtoh", "memcpy_dtoh_async"},
                                       {"memcpy_htod", "memcpy_htod_async"}};
    PyObject *a[3];
    static const char *names[2][2] = {{"memcpy_dtoh()", "memcpy_dtoh_async()"},
                                      {"memcpy_htod()", "memcpy_htod_async()"}};
    static const char *routines[2][2] = {{"cuMemcpyDtoH", "cuMemcpyDtoHAsync"},
                                         {"cuMemcpyHtoD", "cuMemcpyHtoDAsync"}};
    const char *what = names[htod][async], *routine;
    PyObject *dst, *src, *sobj = Py_None, *res = NULL;
    pygpu_DeviceAllocation *held = NULL;
    CUdeviceptr d;
    size_t cap, n;
    CUstream s = NULL;
    Py_buffer view;
    CUresult rc;
    int on_stream, cold = 0;
    pygpu_pfn_cuMemcpyHtoDAsync htod_async = NULL;
    pygpu_pfn_cuMemcpyHtoD htod_sync = NULL;
    pygpu_pfn_cuMemcpyDtoHAsync dtoh_async = NULL;
    pygpu_pfn_cuMemcpyDtoH dtoh_sync = NULL;
    if (pygpu_fast_args(fnames[htod][async], args, nargs, kwnames, argnames, 2, a) < 0)
        return NULL;
    dst = a[0], src = a[1];
    if (a[2] != NULL)
        sobj = a[2];
    /* inside this thread's capture the default stream is the capturing one
     * (graph.c); a blocking copy cannot wait for it */
    if (pygpu_captures_active != 0
        && pygpu_capture_default(st, &sobj, !async, what,
                                 htod ? "use memcpy_htod_async (it is captured: each replay "
                                        "reads the host buffer then)"
                                      : "use memcpy_dtoh_async (it is captured: each replay "
                                        "writes the host buffer then)")
               < 0)
        return NULL;
    on_stream = async || sobj != Py_None;
    if (pygpu_allocation_ptr(st, htod ? dst : src, &d, &cap) < 0
        || (on_stream && pygpu_get_stream(st, sobj, &s) < 0)
        || pygpu_capture_check(st, sobj, !async, what) < 0)
        return NULL;
    if (pygpu_get_host_buffer(htod ? src : dst, &view, !htod, what) < 0)
        return NULL;
    n = (size_t)view.len;
    if (pygpu_check_fits(n, cap, what, htod ? "destination allocation" : "source allocation") < 0
        || pygpu_current_context(st) == NULL)
        goto done;
    /* the entry point through its capture class (core/cuda_api.h) */
    if (htod && on_stream)
        htod_async = PYGPU_CU_STREAM(st, cuMemcpyHtoDAsync, s, !async, what);
    else if (htod)
        htod_sync = PYGPU_CU_LEGACY(st, cuMemcpyHtoD, what);
    else if (on_stream)
        dtoh_async = PYGPU_CU_STREAM(st, cuMemcpyDtoHAsync, s, !async, what);
    else
        dtoh_sync = PYGPU_CU_LEGACY(st, cuMemcpyDtoH, what);
    if ((!htod_async && !htod_sync && !dtoh_async && !dtoh_sync)
        || pygpu_allocation_hold(st, htod ? dst : src, &held) < 0)
        goto done;
    if (n > 0 && !on_stream) {
        int r = pygpu_staged_copy(st, htod, view.buf, d, n);
        if (r == 2)
            cold = 1; /* the plain call, then wake the helpers */
        else if (r != 0) {
            if (r > 0)
                res = Py_NewRef(Py_None);
            goto done;
        }
    }
    rc = CUDA_SUCCESS;
    routine = routines[htod][on_stream];
    if (n > 0) {
        Py_BEGIN_ALLOW_THREADS
            if (htod)
                rc = on_stream ? htod_async(d, view.buf, n, s) : htod_sync(d, view.buf, n);
            else
                rc = on_stream ? dtoh_async(view.buf, d, n, s) : dtoh_sync(view.buf, d, n);
            if (rc == CUDA_SUCCESS && on_stream && !async) {
                routine = "cuStreamSynchronize";
                rc = cu.cuStreamSynchronize(s);
            }
        Py_END_ALLOW_THREADS
    }
    if (cold)
        pygpu_staging_wake(st);
    if (rc != CUDA_SUCCESS)
        pygpu_cuda_error(st, rc, routine);
    else if (on_stream && pygpu_capture_note(st, sobj, dst, &src, 1) < 0)
        ; /* a captured copy's graph keeps both sides alive (the host buffer too) */
    else
        res = Py_NewRef(Py_None);
done:
    pygpu_allocation_unhold(held);
    PyBuffer_Release(&view);
    return res;
}

static PyObject *
memcpy_htod(PyObject *m, PyObject *const *a, Py_ssize_t n, PyObject *k)
{
    return do_host_copy(m, a, n, k, 1, 0);
}
static PyObject *
memcpy_htod_async(PyObject *m, PyObject *const *a, Py_ssize_t n, PyObject *k)
{
    return do_host_copy(m, a, n, k, 1, 1);
}
static PyObject *
memcpy_dtoh(PyObject *m, PyObject *const *a, Py_ssize_t n, PyObject *k)
{
    return do_host_copy(m, a, n, k, 0, 0);
}
static PyObject *
memcpy_dtoh_async(PyObject *m, PyObject *const *a, Py_ssize_t n, PyObject *k)
{
    return do_host_copy(m, a, n, k, 0, 1);
}

static PyObject *
do_dtod(PyObject *module, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames, int async)
{
    pygpu_state *st = PyModule_GetState(module);
    static const char *const names[] = {"dest", "src", "size", "stream", NULL};
    PyObject *a[4];
    const char *what = async ? "memcpy_dtod_async()" : "memcpy_dtod()";
    const char *routine;
    PyObject *dst, *src, *nobj, *sobj = Py_None;
    pygpu_DeviceAllocation *hd = NULL, *hs = NULL;
    CUdeviceptr d, sp;
    size_t dcap, scap, n;
    CUstream s = NULL;
    CUresult rc;
    int on_stream;
    pygpu_pfn_cuMemcpyDtoDAsync dtod_async = NULL;
    pygpu_pfn_cuMemcpyDtoD dtod_sync = NULL;
    if (pygpu_fast_args(async ? "memcpy_dtod_async" : "memcpy_dtod", args, nargs, kwnames, names, 3,
                        a)
        < 0)
        return NULL;
    dst = a[0], src = a[1], nobj = a[2];
    if (a[3] != NULL)
        sobj = a[3];
    if (pygpu_captures_active != 0) {
        /* inside this thread's capture the default stream is the capturing
         * one: memcpy_dtod() with no stream, which the legacy stream orders
         * without blocking the host, is captured as memcpy_dtod_async() */
        int r = pygpu_capture_default(st, &sobj, !async && sobj != Py_None, what,
                                      "use memcpy_dtod_async (it is captured)");
        if (r < 0)
            return NULL;
        if (r > 0)
            async = 1;
    }
    on_stream = async || sobj != Py_None;
    if (pygpu_allocation_ptr(st, dst, &d, &dcap) < 0
        || pygpu_allocation_ptr(st, src, &sp, &scap) < 0 || pygpu_parse_nbytes(nobj, &n, "size") < 0
        || (on_stream && pygpu_get_stream(st, sobj, &s) < 0)
        || pygpu_capture_check(st, sobj, !async, what) < 0)
        return NULL;
    if (pygpu_check_fits(n, dcap, what, "destination allocation") < 0
        || pygpu_check_fits(n, scap, what, "source allocation (reading past its end)") < 0)
        return NULL;
    if (pygpu_current_context(st) == NULL)
        return NULL;
    if (on_stream)
        dtod_async = PYGPU_CU_STREAM(st, cuMemcpyDtoDAsync, s, !async, what);
    else
        dtod_sync = PYGPU_CU_LEGACY(st, cuMemcpyDtoD, what);
    if (!dtod_async && !dtod_sync)
        return NULL;
    if (pygpu_allocation_hold(st, dst, &hd) < 0 || pygpu_allocation_hold(st, src, &hs) < 0) {
        pygpu_allocation_unhold(hd);
        return NULL;
    }
    rc = CUDA_SUCCESS;
    routine = on_stream ? "cuMemcpyDtoDAsync" : "cuMemcpyDtoD";
    if (n > 0) {
        Py_BEGIN_ALLOW_THREADS
            rc = on_stream ? dtod_async(d, sp, n, s) : dtod_sync(d, sp, n);
            if (rc == CUDA_SUCCESS && on_stream && !async) {
                routine = "cuStreamSynchronize";
                rc = cu.cuStreamSynchronize(s);
            }
        Py_END_ALLOW_THREADS
    }
    pygpu_allocation_unhold(hs);
    pygpu_allocation_unhold(hd);
    if (rc != CUDA_SUCCESS)
        return pygpu_cuda_error(st, rc, routine);
    if (on_stream && pygpu_capture_note(st, sobj, dst, &src, 1) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *
memcpy_dtod(PyObject *m, PyObject *const *a, Py_ssize_t n, PyObject *k)
{
    return do_dtod(m, a, n, k, 0);
}
static PyObject *
memcpy_dtod_async(PyObject *m, PyObject *const *a, Py_ssize_t n, PyObject *k)
{
    return do_dtod(m, a, n, k, 1);
}

/* The context of one side of a peer copy: *ctx as given (a Context), or,
 * when None, obj's own (a DeviceAllocation) or the current one.  Borrowed.
 * 0 or -1 with TypeError. */
static int
peer_context(pygpu_state *st, PyObject *obj, PyObject **ctx, const char *what)
{
    if (*ctx == Py_None) {
        if (pygpu_is_allocation(st, obj))
            *ctx = (PyObject *)((pygpu_DeviceAllocation *)obj)->context;
        else if ((*ctx = (PyObject *)pygpu_current_context(st)) == NULL)
            return -1;
        return 0;
    }
    if (!PyObject_TypeCheck(*ctx, st->ContextType)) {
        PyErr_Format(PyExc_TypeError, "memcpy_peer(): %s must be a Context or None, not %.100s",
                     what, Py_TYPE(*ctx)->tp_name);
        return -1;
    }
    return 0;
}

static PyObject *
do_peer(PyObject *module, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames, int async)
{
    pygpu_state *st = PyModule_GetState(module);
    static const char *const names[] = {"dest",        "src",    "size", "dest_context",
                                        "src_context", "stream", NULL};
    PyObject *a[6];
    const char *routine;
    PyObject *dst, *src, *nobj, *dctx = Py_None, *sctx = Py_None, *sobj = Py_None;
    pygpu_DeviceAllocation *hd = NULL, *hs = NULL;
    CUdeviceptr d, sp;
    size_t dcap, scap, n;
    CUstream s = NULL;
    CUresult rc;
    pygpu_pfn_cuMemcpyPeerAsync peer_async = NULL;
    pygpu_pfn_cuMemcpyPeer peer_sync = NULL;
    int on_stream;
    if (pygpu_fast_args(async ? "memcpy_peer_async" : "memcpy_peer", args, nargs, kwnames, names, 3,
                        a)
        < 0)
        return NULL;
    dst = a[0], src = a[1], nobj = a[2];
    if (a[3] != NULL)
        dctx = a[3];
    if (a[4] != NULL)
        sctx = a[4];
    if (a[5] != NULL)
        sobj = a[5];
    if (pygpu_captures_active != 0
        && pygpu_capture_default(st, &sobj, !async, async ? "memcpy_peer_async()" : "memcpy_peer()",
                                 "use memcpy_peer_async (it is captured)")
               < 0)
        return NULL;
    /* PyCUDA's defaults: a context left out is the allocation's own (a
     * DeviceAllocation knows it), else the current one */
    if (peer_context(st, dst, &dctx, "dest_context") < 0
        || peer_context(st, src, &sctx, "src_context") < 0)
        return NULL;
    on_stream = async || sobj != Py_None;
    if (pygpu_allocation_ptr(st, dst, &d, &dcap) < 0
        || pygpu_allocation_ptr(st, src, &sp, &scap) < 0 || pygpu_parse_nbytes(nobj, &n, "size") < 0
        || (on_stream && pygpu_get_stream(st, sobj, &s) < 0)
        || pygpu_capture_check(st, sobj, !async, async ? "memcpy_peer_async()" : "memcpy_peer()")
               < 0)
        return NULL;
    if (pygpu_check_fits(n, dcap, "memcpy_peer()", "destination allocation") < 0
        || pygpu_check_fits(n, scap, "memcpy_peer()", "source allocation") < 0
        || pygpu_context_check(st, (pygpu_Context *)dctx) < 0
        || pygpu_context_check(st, (pygpu_Context *)sctx) < 0)
        return NULL;
    if (n == 0)
        Py_RETURN_NONE;
    if (on_stream)
        peer_async = PYGPU_CU_STREAM(st, cuMemcpyPeerAsync, s, !async, "memcpy_peer()");
    else
        peer_sync = PYGPU_CU_LEGACY(st, cuMemcpyPeer, "memcpy_peer()");
    if (!peer_async && !peer_sync)
        return NULL;
    if (pygpu_allocation_hold(st, dst, &hd) < 0 || pygpu_allocation_hold(st, src, &hs) < 0) {
        pygpu_allocation_unhold(hd);
        return NULL;
    }
    routine = on_stream ? "cuMemcpyPeerAsync" : "cuMemcpyPeer";
    Py_BEGIN_ALLOW_THREADS
        rc = on_stream ? peer_async(d, ((pygpu_Context *)dctx)->handle, sp,
                                    ((pygpu_Context *)sctx)->handle, n, s)
                       : peer_sync(d, ((pygpu_Context *)dctx)->handle, sp,
                                   ((pygpu_Context *)sctx)->handle, n);
        if (rc == CUDA_SUCCESS && on_stream && !async) {
            routine = "cuStreamSynchronize";
            rc = cu.cuStreamSynchronize(s);
        }
    Py_END_ALLOW_THREADS
    pygpu_allocation_unhold(hs);
    pygpu_allocation_unhold(hd);
    if (rc != CUDA_SUCCESS)
        return pygpu_cuda_error(st, rc, routine);
    if (on_stream && pygpu_capture_note(st, sobj, dst, &src, 1) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *
memcpy_peer(PyObject *m, PyObject *const *a, Py_ssize_t n, PyObject *k)
{
    return do_peer(m, a, n, k, 0);
}
static PyObject *
memcpy_peer_async(PyObject *m, PyObject *const *a, Py_ssize_t n, PyObject *k)
{
    return do_peer(m, a, n, k, 1);
}

/* memset_d8/d16/d32(dest, value, count[, stream]) */
static PyObject *
do_memset(PyObject *module, PyObject *args, int width, int async)
{
    pygpu_state *st = PyModule_GetState(module);
    PyObject *dst, *vobj, *nobj, *sobj = Py_None;
    CUdeviceptr d;
    size_t cap, n;
    unsigned long long v;
    CUstream s = NULL;
    CUresult rc;
    char what[32];
    snprintf(what, sizeof what, "memset_d%d%s()", width * 8, async ? "_async" : "");
    if (!PyArg_UnpackTuple(args, what, 3, async ? 4 : 3, &dst, &vobj, &nobj, &sobj))
        return NULL;
    if (pygpu_captures_active != 0) {
        /* inside this thread's capture the default stream is the capturing
         * one: a memset of device memory does not block the host, so the
         * synchronous form is captured as the _async one */
        int r = pygpu_capture_default(st, &sobj, 0, what, NULL);
        if (r < 0)
            return NULL;
        if (r > 0)
            async = 1;
    }
    if (pygpu_allocation_ptr(st, dst, &d, &cap) < 0 || pygpu_parse_nbytes(nobj, &n, "count") < 0
        || (async && pygpu_get_stream(st, sobj, &s) < 0)
        || pygpu_capture_check(st, sobj, !async, what) < 0)
        return NULL;
    if (!PyLong_Check(vobj)) {
        PyErr_Format(PyExc_TypeError, "%s: value must be an int, not %.100s", what,
                     Py_TYPE(vobj)->tp_name);
        return NULL;
    }
    v = PyLong_AsUnsignedLongLongMask(vobj);
    if (PyErr_Occurred())
        return NULL;
    {
        long long sv = PyLong_AsLongLong(vobj);
        int overflow = PyErr_Occurred() != NULL;
        PyErr_Clear();
        long long lo = -(1LL << (width * 8 - 1)), hi = (1LL << (width * 8)) - 1;
        if (overflow || sv < lo || sv > hi) {
            PyErr_Format(PyExc_OverflowError, "%s: value %R does not fit in %d bits", what, vobj,
                         width * 8);
            return NULL;
        }
    }
    if (cap != (size_t)-1 && (n > cap / (size_t)width)) {
        PyErr_Format(PyExc_ValueError,
                     "%s: %zu elements of %d bytes do not fit in the allocation, "
                     "which holds %zu bytes",
                     what, n, width, cap);
        return NULL;
    }
    if (d % (CUdeviceptr)width) {
        PyErr_Format(PyExc_ValueError, "%s: the address must be %d-byte aligned", what, width);
        return NULL;
    }
    if (pygpu_current_context(st) == NULL)
        return NULL;
    if (n == 0)
        Py_RETURN_NONE;
    /* __index__ of count or __cuda_stream__ may have freed dest */
    if (pygpu_is_allocation(st, dst)
        && pygpu_allocation_check(st, (pygpu_DeviceAllocation *)dst) < 0)
        return NULL;
    /* each entry point through its capture class (core/cuda_api.h) */
    if (width == 1 && async) {
        pygpu_pfn_cuMemsetD8Async f = PYGPU_CU_STREAM(st, cuMemsetD8Async, s, 0, what);
        rc = f != NULL ? f(d, (unsigned char)v, n, s) : CUDA_SUCCESS;
    } else if (width == 1) {
        pygpu_pfn_cuMemsetD8 f = PYGPU_CU_LEGACY(st, cuMemsetD8, what);
        rc = f != NULL ? f(d, (unsigned char)v, n) : CUDA_SUCCESS;
    } else if (width == 2 && async) {
        pygpu_pfn_cuMemsetD16Async f = PYGPU_CU_STREAM(st, cuMemsetD16Async, s, 0, what);
        rc = f != NULL ? f(d, (unsigned short)v, n, s) : CUDA_SUCCESS;
    } else if (width == 2) {
        pygpu_pfn_cuMemsetD16 f = PYGPU_CU_LEGACY(st, cuMemsetD16, what);
        rc = f != NULL ? f(d, (unsigned short)v, n) : CUDA_SUCCESS;
    } else if (async) {
        pygpu_pfn_cuMemsetD32Async f = PYGPU_CU_STREAM(st, cuMemsetD32Async, s, 0, what);
        rc = f != NULL ? f(d, (unsigned int)v, n, s) : CUDA_SUCCESS;
    } else {
        pygpu_pfn_cuMemsetD32 f = PYGPU_CU_LEGACY(st, cuMemsetD32, what);
        rc = f != NULL ? f(d, (unsigned int)v, n) : CUDA_SUCCESS;
    }
    if (PyErr_Occurred()) /* refused by its capture class */
        return NULL;
    if (rc != CUDA_SUCCESS)
        return pygpu_cuda_error(st, rc, "cuMemset");
    if (async && pygpu_capture_note(st, sobj, dst, NULL, 0) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *
memset_d8(PyObject *m, PyObject *a)
{
    return do_memset(m, a, 1, 0);
}
static PyObject *
memset_d16(PyObject *m, PyObject *a)
{
    return do_memset(m, a, 2, 0);
}
static PyObject *
memset_d32(PyObject *m, PyObject *a)
{
    return do_memset(m, a, 4, 0);
}
static PyObject *
memset_d8_async(PyObject *m, PyObject *a)
{
    return do_memset(m, a, 1, 1);
}
static PyObject *
memset_d16_async(PyObject *m, PyObject *a)
{
    return do_memset(m, a, 2, 1);
}
static PyObject *
memset_d32_async(PyObject *m, PyObject *a)
{
    return do_memset(m, a, 4, 1);
}

/* The bytes a pitched copy touches, counted from the base: pitch * (y +
 * height - 1) + x + width; -1 when that does not fit in a size_t. */
static int
extent_2d(size_t pitch, size_t x, size_t y, size_t width, size_t height, size_t *out)
{
    size_t rows, t;
    if (height == 0) {
        *out = 0;
        return 0;
    }
    if (__builtin_add_overflow(y, height - 1, &rows) || __builtin_mul_overflow(pitch, rows, &t)
        || __builtin_add_overflow(t, x, &t) || __builtin_add_overflow(t, width, &t))
        return -1;
    *out = t;
    return 0;
}

/* _memcpy_2d(dst, dst_pitch, dst_is_host, src, src_pitch, src_is_host,
 *            width_bytes, height, src_x, src_y, dst_x, dst_y, stream) */
static PyObject *
memcpy_2d(PyObject *module, PyObject *args)
{
    pygpu_state *st = PyModule_GetState(module);
    PyObject *dst, *src, *sobj;
    Py_ssize_t dpitch, spitch, width, height, sx, sy, dx, dy;
    int dhost, shost;
    CUDA_MEMCPY2D p;
    Py_buffer dview = {0}, sview = {0};
    pygpu_DeviceAllocation *hd = NULL, *hs = NULL;
    CUstream s = NULL;
    CUresult rc;
    size_t cap, sneed, dneed;
    if (!PyArg_ParseTuple(args, "OnpOnpnnnnnnO:_memcpy_2d", &dst, &dpitch, &dhost, &src, &spitch,
                          &shost, &width, &height, &sx, &sy, &dx, &dy, &sobj))
        return NULL;
    if (width < 0 || height < 0 || sx < 0 || sy < 0 || dx < 0 || dy < 0 || dpitch < 0 || spitch < 0
        || (size_t)dpitch < (size_t)width + (size_t)dx
        || (size_t)spitch < (size_t)width + (size_t)sx) {
        PyErr_SetString(PyExc_ValueError,
                        "Memcpy2D: width, height and offsets must be >= 0 and each "
                        "row must fit within its pitch");
        return NULL;
    }
    if (extent_2d((size_t)spitch, (size_t)sx, (size_t)sy, (size_t)width, (size_t)height, &sneed)
        < 0) {
        PyErr_Format(PyExc_ValueError,
                     "Memcpy2D: the source's %zd rows of pitch %zd from "
                     "row %zd reach past the end of the address space",
                     height, spitch, sy);
        return NULL;
    }
    if (extent_2d((size_t)dpitch, (size_t)dx, (size_t)dy, (size_t)width, (size_t)height, &dneed)
        < 0) {
        PyErr_Format(PyExc_ValueError,
                     "Memcpy2D: the destination's %zd rows of pitch %zd "
                     "from row %zd reach past the end of the address space",
                     height, dpitch, dy);
        return NULL;
    }
    if (pygpu_captures_active != 0
        && (pygpu_capture_default(st, &sobj, sobj == Py_None, "Memcpy2D",
                                  "pass it the capturing stream (it is captured)")
                < 0
            || pygpu_capture_check(st, sobj, sobj == Py_None, "Memcpy2D") < 0))
        return NULL;
    if (sobj != Py_None && pygpu_get_stream(st, sobj, &s) < 0)
        return NULL;
    memset(&p, 0, sizeof p);
    p.srcXInBytes = (size_t)sx;
    p.srcY = (size_t)sy;
    p.dstXInBytes = (size_t)dx;
    p.dstY = (size_t)dy;
    p.srcPitch = (size_t)spitch;
    p.dstPitch = (size_t)dpitch;
    p.WidthInBytes = (size_t)width;
    p.Height = (size_t)height;
    if (shost) {
        if (pygpu_get_host_buffer(src, &sview, 0, "Memcpy2D source") < 0)
            return NULL;
        p.srcMemoryType = CU_MEMORYTYPE_HOST;
        p.srcHost = sview.buf;
        cap = (size_t)sview.len;
    } else {
        p.srcMemoryType = CU_MEMORYTYPE_DEVICE;
        if (pygpu_allocation_ptr(st, src, &p.srcDevice, &cap) < 0)
            return NULL;
    }
    if (pygpu_check_fits(sneed, cap, "Memcpy2D", "source") < 0)
        goto error;
    if (dhost) {
        if (pygpu_get_host_buffer(dst, &dview, 1, "Memcpy2D destination") < 0)
            goto error;
        p.dstMemoryType = CU_MEMORYTYPE_HOST;
        p.dstHost = dview.buf;
        cap = (size_t)dview.len;
    } else {
        p.dstMemoryType = CU_MEMORYTYPE_DEVICE;
        if (pygpu_allocation_ptr(st, dst, &p.dstDevice, &cap) < 0)
            goto error;
    }
    if (pygpu_check_fits(dneed, cap, "Memcpy2D", "destination") < 0)
        goto error;
    if (pygpu_current_context(st) == NULL)
        goto error;
    if ((!dhost && pygpu_allocation_hold(st, dst, &hd) < 0)
        || (!shost && pygpu_allocation_hold(st, src, &hs) < 0))
        goto error;
    if (width && height) {
        pygpu_pfn_cuMemcpy2DAsync copy_async = NULL;
        pygpu_pfn_cuMemcpy2D copy_sync = NULL;
        if (sobj == Py_None)
            copy_sync = PYGPU_CU_LEGACY(st, cuMemcpy2D, "Memcpy2D");
        else
            copy_async = PYGPU_CU_STREAM(st, cuMemcpy2DAsync, s, 0, "Memcpy2D");
        if (!copy_sync && !copy_async)
            goto error;
        Py_BEGIN_ALLOW_THREADS
            rc = sobj == Py_None ? copy_sync(&p) : copy_async(&p, s);
        Py_END_ALLOW_THREADS
        if (rc != CUDA_SUCCESS) {
            pygpu_cuda_error(st, rc, sobj == Py_None ? "cuMemcpy2D" : "cuMemcpy2DAsync");
            goto error;
        }
        if (sobj != Py_None && pygpu_capture_note(st, sobj, dst, &src, 1) < 0)
            goto error;
    }
    pygpu_allocation_unhold(hs);
    pygpu_allocation_unhold(hd);
    if (sview.obj)
        PyBuffer_Release(&sview);
    if (dview.obj)
        PyBuffer_Release(&dview);
    Py_RETURN_NONE;
error:
    pygpu_allocation_unhold(hs);
    pygpu_allocation_unhold(hd);
    if (sview.obj)
        PyBuffer_Release(&sview);
    if (dview.obj)
        PyBuffer_Release(&dview);
    return NULL;
}

#define FKW (METH_FASTCALL | METH_KEYWORDS)
#define CF(f) (PyCFunction)(void (*)(void))(f)
static PyMethodDef copies_methods[] = {
    {"memcpy_htod", CF(memcpy_htod), FKW,
     "memcpy_htod($module, /, dest, src, stream=None)\n--\n\n"
     "Copy a host buffer to device memory; complete on return. Given a stream, "
     "the copy is queued on it (after its earlier work) and waited for."},
    {"memcpy_htod_async", CF(memcpy_htod_async), FKW,
     "memcpy_htod_async($module, /, dest, src, stream=None)\n--\n\n"
     "Asynchronous host-to-device copy (host memory should be page-locked)."},
    {"memcpy_dtoh", CF(memcpy_dtoh), FKW,
     "memcpy_dtoh($module, /, dest, src, stream=None)\n--\n\n"
     "Copy device memory into a writable host buffer; complete on return. Given a "
     "stream, the copy is queued on it (after its earlier work) and waited for."},
    {"memcpy_dtoh_async", CF(memcpy_dtoh_async), FKW,
     "memcpy_dtoh_async($module, /, dest, src, stream=None)\n--\n\n"
     "Asynchronous device-to-host copy (host memory should be page-locked)."},
    {"memcpy_dtod", CF(memcpy_dtod), FKW,
     "memcpy_dtod($module, /, dest, src, size, stream=None)\n--\n\n"
     "Device-to-device copy of size bytes. Given a stream, the copy is queued on "
     "it (after its earlier work) and waited for."},
    {"memcpy_dtod_async", CF(memcpy_dtod_async), FKW,
     "memcpy_dtod_async($module, /, dest, src, size, stream=None)\n--\n\n"
     "Asynchronous device-to-device copy."},
    {"memcpy_peer", CF(memcpy_peer), FKW,
     "memcpy_peer($module, /, dest, src, size, dest_context=None, src_context=None, "
     "stream=None)\n--\n\n"
     "Copy between the memory of two contexts (devices); a context left out is the "
     "DeviceAllocation's own, else the current one. Given a stream, the copy "
     "is queued on it (after its earlier work) and waited for."},
    {"memcpy_peer_async", CF(memcpy_peer_async), FKW,
     "memcpy_peer_async($module, /, dest, src, size, dest_context=None, src_context=None, "
     "stream=None)\n--\n\n"
     "Asynchronous peer copy."},
    {"memset_d8", memset_d8, METH_VARARGS,
     "memset_d8($module, dest, value, count, /)\n--\n\nSet count bytes."},
    {"memset_d16", memset_d16, METH_VARARGS,
     "memset_d16($module, dest, value, count, /)\n--\n\nSet count 16-bit values."},
    {"memset_d32", memset_d32, METH_VARARGS,
     "memset_d32($module, dest, value, count, /)\n--\n\nSet count 32-bit values."},
    {"memset_d8_async", memset_d8_async, METH_VARARGS,
     "memset_d8_async($module, dest, value, count, stream=None, /)\n--\n\n"},
    {"memset_d16_async", memset_d16_async, METH_VARARGS,
     "memset_d16_async($module, dest, value, count, stream=None, /)\n--\n\n"},
    {"memset_d32_async", memset_d32_async, METH_VARARGS,
     "memset_d32_async($module, dest, value, count, stream=None, /)\n--\n\n"},
    {"_memcpy_2d", memcpy_2d, METH_VARARGS, NULL},
    {NULL},
};

int
pygpu_copies_setup(PyObject *m, pygpu_state *st)
{
    return PyModule_AddFunctions(m, copies_methods);
}
