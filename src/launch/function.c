/* Function: a kernel.  Its call path: the configuration is parsed in
 * launch.c, the arguments are packed in args.c, and launch.c's sink enqueues
 * it; this file is the Python type and its queries.
 */
#include "pygpu.h"

const char *
pygpu_function_name(pygpu_Function *f)
{
    const char *s = PyUnicode_AsUTF8(f->name);
    if (s == NULL) {
        PyErr_Clear();
        s = "?";
    }
    return s;
}

int
pygpu_function_check(pygpu_state *st, pygpu_Function *f)
{
    if (f->module->context->detached) {
        if (f->module->context->detached == 3)
            return pygpu_ensure_driver(st); /* forked: CudaUnavailableError */
        PyErr_Format(st->LogicError, "kernel '%s': its context was detached",
                     pygpu_function_name(f));
        return -1;
    }
    return 0;
}

/* f(*args, block=(x,y,z), grid=(x,y,z), shared=0, stream=None,
 *   time_kernel=False, cluster=None, cooperative=False, pdl=False) */
static PyObject *
function_vectorcall(PyObject *callable, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    pygpu_Function *f = (pygpu_Function *)callable;
    pygpu_state *st = f->st;
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    pygpu_launch_config cfg;
    pygpu_argpack pack;
    PyObject *res = NULL;
    if (kwnames != NULL && PyTuple_GET_SIZE(kwnames) == 2
        && PyTuple_GET_ITEM(kwnames, 0) == st->str_block
        && PyTuple_GET_ITEM(kwnames, 1) == st->str_grid && args[nargs] == f->last_block
        && args[nargs + 1] == f->last_grid) {
        /* the common call, f(*args, block=B, grid=G), with a pair checked before */
        if (pygpu_launch_cached(st, f, args, nargs, &res))
            return res;
        pygpu_config_cached(f, &cfg);
    } else {
        if (pygpu_config_from_kwargs(st, f, args + nargs, kwnames, &cfg) < 0)
            return NULL;
        if (pygpu_launch_quick(st, f, &cfg, args, nargs, &res))
            return res;
    }
    PYGPU_ARGPACK_INIT(&pack);
    if (pygpu_function_check(st, f) == 0 && pygpu_pack(st, f, args, nargs, &cfg, &pack) == 0)
        res = pygpu_launch(st, f, &cfg, &pack);
    if (res != NULL && pygpu_capture_note(st, cfg.stream_obj, callable, args, nargs) < 0)
        Py_CLEAR(res);
    if (pygpu_pack_finish(st, &pack, res != NULL, cfg.stream_obj) < 0)
        Py_CLEAR(res);
    return res;
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
    f->layout = NULL;
    f->max_threads = 0;
    f->last_block = f->last_grid = NULL;
    f->weakreflist = NULL;
    f->st = st;
    f->legacy_block[0] = f->legacy_block[1] = f->legacy_block[2] = 1;
    f->legacy_shared = 0;
    f->legacy_params = NULL;
    return (PyObject *)f;
}

static void
function_dealloc(pygpu_Function *f)
{
    PyTypeObject *tp = Py_TYPE(f);
    if (f->weakreflist != NULL)
        PyObject_ClearWeakRefs((PyObject *)f);
    pygpu_layout_decref(f->layout);
    Py_CLEAR(f->last_block);
    Py_CLEAR(f->last_grid);
    Py_CLEAR(f->legacy_params);
    Py_CLEAR(f->name);
    Py_CLEAR(f->module);
    tp->tp_free((PyObject *)f);
    Py_DECREF(tp);
}

/* ---- attributes and occupancy ---- */

static int
parse_int_arg(PyObject *obj, const char *what, int *out)
{
    int overflow = 0;
    long long v;
    if (PyBool_Check(obj) || !PyIndex_Check(obj)) {
        PyErr_Format(PyExc_TypeError, "%s must be an int, not %.100s", what, Py_TYPE(obj)->tp_name);
        return -1;
    }
    {
        PyObject *i = PyNumber_Index(obj);
        if (i == NULL)
            return -1;
        v = PyLong_AsLongLongAndOverflow(i, &overflow);
        Py_DECREF(i);
    }
    if (v == -1 && PyErr_Occurred())
        return -1;
    if (overflow || v < INT_MIN || v > INT_MAX) {
        PyErr_Format(PyExc_OverflowError, "%s %R does not fit a C int", what, obj);
        return -1;
    }
    *out = (int)v;
    return 0;
}

static PyObject *
func_attr(pygpu_Function *f, int attr)
{
    pygpu_state *st = PYGPU_STATE(f);
    int v;
    CUresult rc;
    if (pygpu_function_check(st, f) < 0)
        return NULL;
    rc = cu.cuFuncGetAttribute(&v, (CUfunction_attribute)attr, f->handle);
    if (rc != CUDA_SUCCESS)
        return pygpu_cuda_error(st, rc, "cuFuncGetAttribute");
    return PyLong_FromLong(v);
}

static PyObject *
function_get_attribute(pygpu_Function *f, PyObject *arg)
{
    int a;
    if (parse_int_arg(arg, "attr", &a) < 0)
        return NULL;
    return func_attr(f, a);
}

static PyObject *
function_set_attribute(pygpu_Function *f, PyObject *args)
{
    pygpu_state *st = PYGPU_STATE(f);
    PyObject *aobj, *vobj;
    int attr, value;
    CUresult rc;
    if (!PyArg_ParseTuple(args, "OO:set_attribute", &aobj, &vobj)
        || parse_int_arg(aobj, "attr", &attr) < 0 || parse_int_arg(vobj, "value", &value) < 0
        || pygpu_function_check(st, f) < 0)
        return NULL;
    rc = cu.cuFuncSetAttribute(f->handle, (CUfunction_attribute)attr, value);
    if (rc != CUDA_SUCCESS)
        return pygpu_cuda_error(st, rc, "cuFuncSetAttribute");
    Py_RETURN_NONE;
}

static PyObject *
function_set_cache_config(pygpu_Function *f, PyObject *arg)
{
    pygpu_state *st = PYGPU_STATE(f);
    int a;
    CUresult rc;
    if (parse_int_arg(arg, "config", &a) < 0 || pygpu_function_check(st, f) < 0)
        return NULL;
    rc = cu.cuFuncSetCacheConfig(f->handle, (CUfunc_cache)a);
    if (rc != CUDA_SUCCESS)
        return pygpu_cuda_error(st, rc, "cuFuncSetCacheConfig");
    Py_RETURN_NONE;
}

#define ATTR_GETTER(pyname, cattr)                                     \
    static PyObject *function_get_##pyname(pygpu_Function *f, void *c) \
    {                                                                  \
        return func_attr(f, cattr);                                    \
    }
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
    pygpu_state *st = PYGPU_STATE(f);
    int bs, n;
    Py_ssize_t dyn = 0;
    CUresult rc;
    pygpu_scope scope;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "i|n:max_active_blocks_per_multiprocessor", kwlist,
                                     &bs, &dyn))
        return NULL;
    if (dyn < 0) {
        PyErr_Format(PyExc_ValueError, "dynamic_shared must be >= 0, got %zd", dyn);
        return NULL;
    }
    if (pygpu_scope_enter(st, f->module->context, &scope) < 0)
        return NULL;
    rc = cu.cuOccupancyMaxActiveBlocksPerMultiprocessor(&n, f->handle, bs, (size_t)dyn);
    pygpu_scope_exit(&scope);
    if (rc != CUDA_SUCCESS)
        return pygpu_cuda_error(st, rc, "cuOccupancyMaxActiveBlocksPerMultiprocessor");
    return PyLong_FromLong(n);
}

static PyObject *
function_max_potential_block_size(pygpu_Function *f, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"dynamic_shared", "block_size_limit", NULL};
    pygpu_state *st = PYGPU_STATE(f);
    int grid, block, limit = 0;
    Py_ssize_t dyn = 0;
    CUresult rc;
    pygpu_scope scope;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|ni:max_potential_block_size", kwlist, &dyn,
                                     &limit))
        return NULL;
    if (dyn < 0 || limit < 0) {
        PyErr_Format(PyExc_ValueError,
                     "dynamic_shared and block_size_limit must be >= 0, "
                     "got %zd and %d",
                     dyn, limit);
        return NULL;
    }
    if (pygpu_scope_enter(st, f->module->context, &scope) < 0)
        return NULL;
    rc = cu.cuOccupancyMaxPotentialBlockSize(&grid, &block, f->handle, NULL, (size_t)dyn, limit);
    pygpu_scope_exit(&scope);
    if (rc != CUDA_SUCCESS)
        return pygpu_cuda_error(st, rc, "cuOccupancyMaxPotentialBlockSize");
    return Py_BuildValue("(ii)", grid, block);
}

/* ---- prepared launches (PyCUDA) ---- */

static PyObject *
function_prepare(pygpu_Function *f, PyObject *args, PyObject *kwds)
{
    pygpu_state *st = PYGPU_STATE(f);
    static char *kwlist[] = {"arg_types", NULL};
    PyObject *types;
    pygpu_layout *l;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O:prepare", kwlist, &types))
        return NULL;
    if (pygpu_function_check(st, f) < 0)
        return NULL;
    l = pygpu_layout_prepared(st, f, types);
    if (l == NULL)
        return NULL;
    /* calls in flight keep their own reference to the old layout */
    pygpu_layout_decref(f->layout);
    f->layout = l;
    Py_INCREF(f);
    return (PyObject *)f;
}

/* prepared_call(grid, block, *args, shared_size=0) and the async/timed forms */
static PyObject *
prepared_common(pygpu_Function *f, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames,
                int with_stream, int timed)
{
    pygpu_state *st = f->st;
    pygpu_launch_config cfg;
    pygpu_argpack pack;
    PyObject *res = NULL;
    Py_ssize_t first;
    if (!with_stream && !timed && kwnames == NULL && nargs >= 2 && args[1] == f->last_block
        && args[0] == f->last_grid && args[1] != NULL) {
        /* the common prepared_call(grid, block, *args) with a pair checked
         * before (as __call__'s): no shared_size, the default stream */
        if (pygpu_launch_cached(st, f, args + 2, nargs - 2, &res))
            return res;
        pygpu_config_cached(f, &cfg);
        first = 2;
    } else {
        first = pygpu_config_prepared(st, f, args, nargs, kwnames, with_stream, timed, &cfg);
        if (first < 0)
            return NULL;
        if (pygpu_launch_quick(st, f, &cfg, args + first, nargs - first, &res))
            return res;
    }
    PYGPU_ARGPACK_INIT(&pack);
    if (pygpu_function_check(st, f) == 0
        && pygpu_pack(st, f, args + first, nargs - first, NULL, &pack) == 0)
        res = pygpu_launch(st, f, &cfg, &pack);
    if (res != NULL
        && pygpu_capture_note(st, cfg.stream_obj, (PyObject *)f, args + first, nargs - first) < 0)
        Py_CLEAR(res);
    pygpu_pack_finish(st, &pack, res != NULL, NULL);
    return res;
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

/* PyCUDA's prepared_timed_call returns a callable giving the kernel's time in
 * seconds; pygpu has waited already, so the result is that time as a float
 * which, called, returns itself: both PyCUDA's t() and a plain float work. */
static PyObject *
function_prepared_timed_call(pygpu_Function *f, PyObject *const *args, Py_ssize_t nargs,
                             PyObject *kw)
{
    PyObject *secs = prepared_common(f, args, nargs, kw, 0, 1), *res;
    if (secs == NULL)
        return NULL;
    res = PyObject_CallOneArg((PyObject *)PYGPU_STATE(f)->KernelTimeType, secs);
    Py_DECREF(secs);
    return res;
}

static PyObject *
function_configure(pygpu_Function *f, PyObject *args, PyObject *kwds)
{
    return pygpu_configure(PYGPU_STATE(f), f, args, kwds);
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
    pygpu_state *st = PYGPU_STATE(f);
    PyObject *t;
    pygpu_layout *l;
    int i;
    if (pygpu_function_check(st, f) < 0 || (l = pygpu_layout_get(st, f)) == NULL)
        return NULL;
    if (!l->known)
        Py_RETURN_NONE;
    t = PyTuple_New(l->nparams);
    for (i = 0; t && i < l->nparams; i++) {
        PyObject *v = PyLong_FromSize_t(l->params[i].size);
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
    {"_launch_kernel", (PyCFunction)pygpu_function_launch_kernel, METH_VARARGS,
     "_launch_kernel($self, grid, block, arg_buf, shared, stream=None, /)\n--\n\n"
     "PyCUDA's launch of a packed parameter buffer (cuLaunchKernel with "
     "CU_LAUNCH_PARAM_BUFFER_POINTER)."},
    {"_set_block_shape", (PyCFunction)pygpu_function_set_block_shape, METH_VARARGS,
     "_set_block_shape($self, x, y, z, /)\n--\n\nPyCUDA's legacy API: the block of "
     "later _launch* calls."},
    {"_set_shared_size", (PyCFunction)pygpu_function_set_shared_size, METH_O,
     "_set_shared_size($self, bytes, /)\n--\n\nPyCUDA's legacy API: the dynamic shared "
     "memory of later _launch* calls."},
    {"_param_set_size", (PyCFunction)pygpu_function_param_set_size, METH_O,
     "_param_set_size($self, bytes, /)\n--\n\nPyCUDA's legacy API: the parameter buffer's "
     "size."},
    {"_param_seti", (PyCFunction)pygpu_function_param_seti, METH_VARARGS,
     "_param_seti($self, offset, value, /)\n--\n\nPyCUDA's legacy API: a 32-bit unsigned "
     "int at offset of the parameter buffer."},
    {"_param_setf", (PyCFunction)pygpu_function_param_setf, METH_VARARGS,
     "_param_setf($self, offset, value, /)\n--\n\nPyCUDA's legacy API: a float32 at offset "
     "of the parameter buffer."},
    {"_param_setv", (PyCFunction)pygpu_function_param_setv, METH_VARARGS,
     "_param_setv($self, offset, buffer, /)\n--\n\nPyCUDA's legacy API: a buffer's bytes at "
     "offset of the parameter buffer."},
    {"_launch", (PyCFunction)pygpu_function_launch_legacy, METH_NOARGS,
     "_launch($self, /)\n--\n\nPyCUDA's legacy API: launch one block with the state set."},
    {"_launch_grid", (PyCFunction)(void (*)(void))pygpu_function_launch_grid,
     METH_VARARGS | METH_KEYWORDS,
     "_launch_grid($self, /, grid_width, grid_height)\n--\n\nPyCUDA's legacy API: launch "
     "a grid with the state set."},
    {"_launch_grid_async", (PyCFunction)(void (*)(void))pygpu_function_launch_grid_async,
     METH_VARARGS | METH_KEYWORDS,
     "_launch_grid_async($self, /, grid_width, grid_height, s)\n--\n\nPyCUDA's legacy "
     "API: _launch_grid on stream s."},
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
    {NULL},
};

static PyGetSetDef function_getset[] = {
    {"name", (getter)function_get_name, NULL, "The kernel's (lowered) name.", NULL},
    {"module", (getter)function_get_module, NULL, "The Module holding the kernel.", NULL},
    {"handle", (getter)function_get_handle, NULL, "The CUfunction as an int.", NULL},
    {"param_sizes", (getter)function_get_param_sizes, NULL,
     "Size in bytes of each parameter (from cuFuncGetParamInfo), or None.", NULL},
    {"num_regs", (getter)function_get_num_regs, NULL, "Registers per thread.", NULL},
    {"shared_size_bytes", (getter)function_get_shared_size_bytes, NULL, "Static shared memory.",
     NULL},
    {"const_size_bytes", (getter)function_get_const_size_bytes, NULL, "Constant memory.", NULL},
    {"local_size_bytes", (getter)function_get_local_size_bytes, NULL, "Local memory per thread.",
     NULL},
    {"max_threads_per_block", (getter)function_get_max_threads_per_block, NULL,
     "Largest block this kernel can launch with.", NULL},
    {"ptx_version", (getter)function_get_ptx_version, NULL, "PTX version (e.g. 90).", NULL},
    {"binary_version", (getter)function_get_binary_version, NULL, "Binary version (e.g. 90).",
     NULL},
    {"max_dynamic_shared_size_bytes", (getter)function_get_max_dynamic_shared_size_bytes, NULL,
     "Dynamic shared memory limit (raise with set_attribute).", NULL},
    {NULL},
};

static PyMemberDef function_members[] = {
    {"__vectorcalloffset__", T_PYSSIZET, offsetof(pygpu_Function, vectorcall), READONLY},
    {"__weaklistoffset__", T_PYSSIZET, offsetof(pygpu_Function, weakreflist), READONLY},
    {NULL},
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
    {0, NULL},
};

static PyType_Spec function_spec = {"pygpu.driver.Function", sizeof(pygpu_Function), 0,
                                    Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE
                                        | Py_TPFLAGS_DISALLOW_INSTANTIATION
                                        | Py_TPFLAGS_HAVE_VECTORCALL | Py_TPFLAGS_BASETYPE,
                                    function_slots};

static PyObject *
kernel_time_call(PyObject *self, PyObject *args, PyObject *kwds)
{
    if (PyTuple_GET_SIZE(args) != 0 || (kwds != NULL && PyDict_GET_SIZE(kwds) != 0)) {
        PyErr_SetString(PyExc_TypeError, "KernelTime() takes no arguments");
        return NULL;
    }
    return PyFloat_FromDouble(PyFloat_AS_DOUBLE(self));
}

static PyType_Slot kernel_time_slots[] = {
    {Py_tp_call, kernel_time_call},
    {Py_tp_doc, "A kernel's time in seconds (a float), from prepared_timed_call(); "
                "calling it returns the same float, as PyCUDA's callable does."},
    {0, NULL},
};

static PyType_Spec kernel_time_spec = {
    "pygpu.driver.KernelTime", 0, 0,
    Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE | Py_TPFLAGS_BASETYPE, kernel_time_slots};

int
pygpu_function_setup(PyObject *m, pygpu_state *st)
{
    PyObject *tp, *bases;
    if (pygpu_add_type(m, &function_spec, &st->FunctionType) < 0)
        return -1;
    bases = PyTuple_Pack(1, (PyObject *)&PyFloat_Type); /* 3.9 takes only a tuple */
    if (bases == NULL)
        return -1;
    tp = PyType_FromModuleAndSpec(m, &kernel_time_spec, bases);
    Py_DECREF(bases);
    if (tp == NULL)
        return -1;
    st->KernelTimeType = (PyTypeObject *)tp;
    return pygpu_module_add_ref(m, "KernelTime", tp);
}
