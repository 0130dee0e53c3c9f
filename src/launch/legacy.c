/* PyCUDA's legacy launch API on Function (_set_block_shape, _param_set*,
 * _launch*, _launch_kernel): the state the deprecated cuFuncSetBlockShape
 * and cuParamSet* kept in the driver, kept in the Function, launched as a
 * parameter buffer through the one sink (launch.c). */
#include "pygpu.h"

/* ---- PyCUDA's legacy launch API ----
 * cuFuncSetBlockShape, cuFuncSetSharedSize, cuParamSet* and cuLaunch(Grid)
 * are deprecated (CUDA 13 still declares them); PyCUDA 2026.1 calls them.
 * Here the Function keeps that state itself and launches through
 * cuLaunchKernel with the parameter buffer (CU_LAUNCH_PARAM_BUFFER_POINTER),
 * the launch _launch_kernel makes. */

/* One launch of buf (len bytes) as the kernel's parameter buffer.  stream_obj
 * None or NULL: the default stream. */
static PyObject *
legacy_launch(pygpu_Function *f, const unsigned int grid[3], const unsigned int block[3],
              unsigned int shared, PyObject *stream_obj, void *buf, size_t len)
{
    pygpu_state *st = f->st;
    pygpu_launch_config cfg;
    pygpu_scope scope;
    CUresult rc;
    const char *routine;
    void *extra[5];
    memset(&cfg, 0, sizeof cfg);
    memcpy(cfg.grid, grid, sizeof cfg.grid);
    memcpy(cfg.block, block, sizeof cfg.block);
    cfg.shared = shared;
    if (stream_obj != NULL && stream_obj != Py_None
        && pygpu_get_stream(st, stream_obj, &cfg.stream) < 0)
        return NULL;
    if (pygpu_function_check(st, f) < 0 || pygpu_config_check(st, f, &cfg) < 0)
        return NULL;
    if (pygpu_captures_active != 0 && (cfg.stream == NULL || cfg.stream == CU_STREAM_LEGACY)
        && pygpu_capture_legacy_launch(st, f->module->context, pygpu_function_name(f)) < 0)
        return NULL;
    extra[0] = CU_LAUNCH_PARAM_BUFFER_POINTER;
    extra[1] = buf;
    extra[2] = CU_LAUNCH_PARAM_BUFFER_SIZE;
    extra[3] = &len;
    extra[4] = CU_LAUNCH_PARAM_END;
    if (pygpu_scope_enter(st, f->module->context, &scope) < 0)
        return NULL;
    rc = pygpu_launch_enqueue(f->handle, &cfg, NULL, NULL, len ? extra : NULL, &routine);
    pygpu_scope_exit(&scope);
    if (rc != CUDA_SUCCESS)
        return pygpu_cuda_error(st, rc, routine);
    Py_RETURN_NONE;
}

/* _launch_kernel(grid, block, arg_buf, shared, stream): PyCUDA's launch of
 * a packed parameter buffer (any contiguous buffer) */
PyObject *
pygpu_function_launch_kernel(pygpu_Function *f, PyObject *args)
{
    PyObject *gobj, *bobj, *bufobj, *sobj, *stream = Py_None, *res;
    unsigned int grid[3], block[3], shared;
    Py_buffer view;
    if (!PyArg_ParseTuple(args, "OOOO|O:_launch_kernel", &gobj, &bobj, &bufobj, &sobj, &stream))
        return NULL;
    if (pygpu_parse_dims(gobj, grid, "grid") < 0 || pygpu_parse_dims(bobj, block, "block") < 0
        || pygpu_parse_uint(sobj, &shared, "_launch_kernel(): shared") < 0)
        return NULL;
    if (PyObject_GetBuffer(bufobj, &view, PyBUF_ANY_CONTIGUOUS) < 0)
        return NULL;
    res = legacy_launch(f, grid, block, shared, stream, view.buf, (size_t)view.len);
    PyBuffer_Release(&view);
    return res;
}

PyObject *
pygpu_function_set_block_shape(pygpu_Function *f, PyObject *args)
{
    PyObject *x, *y, *z, *t;
    unsigned int block[3];
    int r;
    if (!PyArg_ParseTuple(args, "OOO:_set_block_shape", &x, &y, &z))
        return NULL;
    t = PyTuple_Pack(3, x, y, z);
    if (t == NULL)
        return NULL;
    r = pygpu_parse_dims(t, block, "block");
    Py_DECREF(t);
    if (r < 0)
        return NULL;
    memcpy(f->legacy_block, block, sizeof block);
    Py_RETURN_NONE;
}

PyObject *
pygpu_function_set_shared_size(pygpu_Function *f, PyObject *arg)
{
    if (pygpu_parse_uint(arg, &f->legacy_shared, "_set_shared_size(): bytes") < 0)
        return NULL;
    Py_RETURN_NONE;
}

/* The parameter buffer, at least n bytes long (zero-filled growth). */
static PyObject *
legacy_params(pygpu_Function *f, size_t n)
{
    Py_ssize_t have;
    if (f->legacy_params == NULL
        && (f->legacy_params = PyByteArray_FromStringAndSize("", 0)) == NULL)
        return NULL;
    have = PyByteArray_GET_SIZE(f->legacy_params);
    if (n > (size_t)PY_SSIZE_T_MAX) {
        PyErr_SetString(PyExc_OverflowError, "the parameter buffer would be too big");
        return NULL;
    }
    if ((Py_ssize_t)n > have) {
        if (PyByteArray_Resize(f->legacy_params, (Py_ssize_t)n) < 0)
            return NULL;
        memset(PyByteArray_AS_STRING(f->legacy_params) + have, 0, n - (size_t)have);
    }
    return f->legacy_params;
}

PyObject *
pygpu_function_param_set_size(pygpu_Function *f, PyObject *arg)
{
    unsigned int n;
    if (pygpu_parse_uint(arg, &n, "_param_set_size(): bytes") < 0 || legacy_params(f, n) == NULL)
        return NULL;
    if (PyByteArray_Resize(f->legacy_params, (Py_ssize_t)n) < 0)
        return NULL;
    Py_RETURN_NONE;
}

/* write len bytes at offset of the parameter buffer */
static PyObject *
param_write(pygpu_Function *f, PyObject *oobj, const void *data, size_t len, const char *what)
{
    unsigned int offset;
    if (pygpu_parse_uint(oobj, &offset, what) < 0 || legacy_params(f, (size_t)offset + len) == NULL)
        return NULL;
    memcpy(PyByteArray_AS_STRING(f->legacy_params) + offset, data, len);
    Py_RETURN_NONE;
}

PyObject *
pygpu_function_param_seti(pygpu_Function *f, PyObject *args)
{
    PyObject *oobj, *vobj;
    unsigned int v;
    uint32_t w;
    if (!PyArg_ParseTuple(args, "OO:_param_seti", &oobj, &vobj))
        return NULL;
    if (pygpu_parse_uint(vobj, &v, "_param_seti(): value") < 0)
        return NULL;
    w = (uint32_t)v;
    return param_write(f, oobj, &w, sizeof w, "_param_seti(): offset");
}

PyObject *
pygpu_function_param_setf(pygpu_Function *f, PyObject *args)
{
    PyObject *oobj;
    double d;
    float v;
    if (!PyArg_ParseTuple(args, "Od:_param_setf", &oobj, &d))
        return NULL;
    v = (float)d;
    return param_write(f, oobj, &v, sizeof v, "_param_setf(): offset");
}

PyObject *
pygpu_function_param_setv(pygpu_Function *f, PyObject *args)
{
    PyObject *oobj, *bufobj, *res;
    Py_buffer view;
    if (!PyArg_ParseTuple(args, "OO:_param_setv", &oobj, &bufobj))
        return NULL;
    if (PyObject_GetBuffer(bufobj, &view, PyBUF_ANY_CONTIGUOUS) < 0)
        return NULL;
    res = param_write(f, oobj, view.buf, (size_t)view.len, "_param_setv(): offset");
    PyBuffer_Release(&view);
    return res;
}

/* a launch of the set-up state on a grid of w x h blocks */
static PyObject *
legacy_grid_launch(pygpu_Function *f, PyObject *wobj, PyObject *hobj, PyObject *stream)
{
    unsigned int grid[3] = {1, 1, 1};
    void *buf = NULL;
    size_t len = 0;
    if ((wobj != NULL && pygpu_parse_uint(wobj, &grid[0], "grid_width") < 0)
        || (hobj != NULL && pygpu_parse_uint(hobj, &grid[1], "grid_height") < 0))
        return NULL;
    if (grid[0] == 0 || grid[1] == 0) {
        PyErr_Format(PyExc_ValueError, "the grid must be at least 1 x 1 blocks, got %u x %u",
                     grid[0], grid[1]);
        return NULL;
    }
    if (f->legacy_params != NULL) {
        buf = PyByteArray_AS_STRING(f->legacy_params);
        len = (size_t)PyByteArray_GET_SIZE(f->legacy_params);
    }
    return legacy_launch(f, grid, f->legacy_block, f->legacy_shared, stream, buf, len);
}

PyObject *
pygpu_function_launch_legacy(pygpu_Function *f, PyObject *unused)
{
    return legacy_grid_launch(f, NULL, NULL, NULL);
}

PyObject *
pygpu_function_launch_grid(pygpu_Function *f, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"grid_width", "grid_height", NULL};
    PyObject *w, *h;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OO:_launch_grid", kwlist, &w, &h))
        return NULL;
    return legacy_grid_launch(f, w, h, NULL);
}

PyObject *
pygpu_function_launch_grid_async(pygpu_Function *f, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"grid_width", "grid_height", "s", NULL};
    PyObject *w, *h, *s;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOO:_launch_grid_async", kwlist, &w, &h, &s))
        return NULL;
    return legacy_grid_launch(f, w, h, s);
}
