/* PyInit__driver: multi-phase init, module state, enums. */
#include "pygpu.h"
#define NO_IMPORT_ARRAY
#include "core/cuda_enums.h"

int
pygpu_add_type(PyObject *m, PyType_Spec *spec, PyTypeObject **slot)
{
    PyObject *tp = PyType_FromModuleAndSpec(m, spec, NULL);
    if (tp == NULL)
        return -1;
    *slot = (PyTypeObject *)tp;
    if (pygpu_keep_text_signature((PyTypeObject *)tp, spec) < 0)
        return -1;
#if PY_VERSION_HEX < 0x030A0000
    { /* no Py_TPFLAGS_DISALLOW_INSTANTIATION before 3.10 */
        PyType_Slot *s;
        int has_new = 0;
        for (s = spec->slots; s->slot; s++)
            has_new |= s->slot == Py_tp_new;
        if (!has_new)
            ((PyTypeObject *)tp)->tp_new = NULL;
    }
#endif
    const char *shortname = strrchr(spec->name, '.') + 1;
    return pygpu_module_add_ref(m, shortname, tp);
}

/* str(member) is its name, as PyCUDA's enum members print
 * (str(device_attribute.MAX_THREADS_PER_BLOCK) == "MAX_THREADS_PER_BLOCK");
 * int(), comparisons and hashing stay the int's. */
static PyObject *
enum_member_str(PyObject *unused, PyObject *self)
{
    return PyObject_GetAttrString(self, "_name_");
}

/* format(member, "") is str(member), as for PyCUDA's int subclasses;
 * a format spec ("d", "04x") formats the value. */
static PyObject *
enum_member_format(PyObject *unused, PyObject *args)
{
    PyObject *self, *spec, *value, *res;
    if (!PyArg_ParseTuple(args, "OU:__format__", &self, &spec))
        return NULL;
    if (PyUnicode_GET_LENGTH(spec) == 0)
        return PyObject_Str(self);
    /* an exact int (PyNumber_Index gives the member itself back on 3.9,
     * whose __format__ is this function: endless recursion) */
    value = PyNumber_Long(self);
    if (value == NULL)
        return NULL;
    res = PyObject_Format(value, spec);
    Py_DECREF(value);
    return res;
}

static PyMethodDef enum_member_str_def = {
    "__str__", enum_member_str, METH_O,
    /* (the signature as the member's method: Python 3.13 read the
     * METH_O's own as (self, object, /), which stubtest refused) */
    "__str__($self, /)\n--\n\nThe member's name, as PyCUDA's enums print."};
static PyMethodDef enum_member_format_def = {
    "__format__", enum_member_format, METH_VARARGS,
    "The member's name for an empty spec, else its value formatted."};

/* cls.<name> = an instance method calling def (self first). */
static int
set_enum_method(PyObject *cls, PyMethodDef *def)
{
    PyObject *f = PyCFunction_New(def, NULL), *meth;
    if (f == NULL)
        return -1;
    meth = PyInstanceMethod_New(f);
    Py_DECREF(f);
    if (meth == NULL)
        return -1;
    if (PyObject_SetAttrString(cls, def->ml_name, meth) < 0) {
        Py_DECREF(meth);
        return -1;
    }
    Py_DECREF(meth);
    return 0;
}

/* cls.names ({name: member}, aliases included) and cls.values ({int:
 * member}, the first member of each value), the class attributes of
 * PyCUDA's Boost.Python enums; each member's .name is Enum's own. */
static int
enum_tables(PyObject *cls)
{
    PyObject *members, *names = NULL, *values = NULL, *it = NULL, *member, *key;
    int rc = -1;
    members = PyObject_GetAttrString(cls, "__members__");
    if (members == NULL)
        return -1;
    names = PyDict_New();
    values = PyDict_New();
    if (names == NULL || values == NULL || PyDict_Update(names, members) < 0)
        goto error;
    it = PyObject_GetIter(cls);
    if (it == NULL)
        goto error;
    while ((member = PyIter_Next(it)) != NULL) {
        key = PyNumber_Long(member);
        if (key == NULL || PyDict_SetDefault(values, key, member) == NULL) {
            Py_XDECREF(key);
            Py_DECREF(member);
            goto error;
        }
        Py_DECREF(key);
        Py_DECREF(member);
    }
    if (PyErr_Occurred())
        goto error;
    if (PyObject_SetAttrString(cls, "names", names) < 0
        || PyObject_SetAttrString(cls, "values", values) < 0)
        goto error;
    rc = 0;
error:
    Py_DECREF(members);
    Py_XDECREF(names);
    Py_XDECREF(values);
    Py_XDECREF(it);
    return rc;
}

/* _enum_tables(cls): the same for the enums the Python layer defines */
static PyObject *
module_enum_tables(PyObject *unused, PyObject *cls)
{
    if (!PyType_Check(cls)) {
        PyErr_Format(PyExc_TypeError, "_enum_tables() takes an enum class, not %.100s",
                     Py_TYPE(cls)->tp_name);
        return NULL;
    }
    if (enum_tables(cls) < 0)
        return NULL;
    return Py_NewRef(cls);
}

static PyMethodDef enum_functions[] = {
    {"_enum_tables", module_enum_tables, METH_O,
     "_enum_tables($module, enum_class, /)\n--\n\nGive an enum class PyCUDA's names and values "
     "dictionaries; returns enum_class."},
    {NULL, NULL, 0, NULL},
};

/* Build each enum as an IntEnum in pygpu.driver's namespace; its members
 * print their names. */
static int
add_enums(PyObject *m)
{
    PyObject *enum_mod = PyImport_ImportModule("enum"), *IntEnum;
    int i, rc = -1;
    if (enum_mod == NULL)
        return -1;
    IntEnum = PyObject_GetAttrString(enum_mod, "IntEnum");
    Py_DECREF(enum_mod);
    if (IntEnum == NULL)
        return -1;
    for (i = 0; pygpu_enums[i].name != NULL; i++) {
        const pygpu_enum_entry *e;
        PyObject *members = PyList_New(0), *kwargs = NULL, *cls = NULL, *args = NULL;
        if (members == NULL)
            goto done;
        for (e = pygpu_enums[i].entries; e->name != NULL; e++) {
            PyObject *pair = Py_BuildValue("(sL)", e->name, e->value);
            if (pair == NULL || PyList_Append(members, pair) < 0) {
                Py_XDECREF(pair);
                Py_DECREF(members);
                goto done;
            }
            Py_DECREF(pair);
        }
        args = Py_BuildValue("(sN)", pygpu_enums[i].name, members);
        kwargs = Py_BuildValue("{ss}", "module", "pygpu.driver");
        if (args && kwargs)
            cls = PyObject_Call(IntEnum, args, kwargs);
        Py_XDECREF(args);
        Py_XDECREF(kwargs);
        if (cls == NULL)
            goto done;
        if (set_enum_method(cls, &enum_member_str_def) < 0
            || set_enum_method(cls, &enum_member_format_def) < 0 || enum_tables(cls) < 0) {
            Py_DECREF(cls);
            goto done;
        }
        if (PyModule_AddObject(m, pygpu_enums[i].name, cls) < 0) {
            Py_DECREF(cls);
            goto done;
        }
    }
    rc = PyModule_AddFunctions(m, enum_functions);
done:
    Py_DECREF(IntEnum);
    return rc;
}

static int
driver_exec(PyObject *m)
{
    pygpu_state *st = PyModule_GetState(m);
    PyObject *gc;
    memset(st, 0, sizeof *st);
    st->primary_contexts = PyDict_New();
    st->foreign_contexts = PyDict_New();
    if (st->primary_contexts == NULL || st->foreign_contexts == NULL)
        return -1;
    gc = PyImport_ImportModule("gc");
    if (gc == NULL)
        return -1;
    st->gc_collect = PyObject_GetAttrString(gc, "collect");
    Py_DECREF(gc);
    if (st->gc_collect == NULL)
        return -1;
#define INTERN(field, text)                                     \
    if ((st->field = PyUnicode_InternFromString(text)) == NULL) \
        return -1;
    INTERN(str_cai, "__cuda_array_interface__")
    INTERN(str_dlpack, "__dlpack__")
    INTERN(str_cuda_stream, "__cuda_stream__")
    INTERN(str_block, "block")
    INTERN(str_grid, "grid")
    INTERN(str_shared, "shared")
    INTERN(str_stream, "stream")
    INTERN(str_time_kernel, "time_kernel")
    INTERN(str_c, "_c")
#undef INTERN
    if (pygpu_errors_setup(m, st) < 0 || pygpu_loader_setup(m) < 0 || add_enums(m) < 0
        || pygpu_device_setup(m, st) < 0 || pygpu_context_setup(m, st) < 0
        || pygpu_stream_setup(m, st) < 0 || pygpu_event_setup(m, st) < 0
        || pygpu_memory_setup(m, st) < 0 || pygpu_copies_setup(m, st) < 0
        || pygpu_hostmem_setup(m, st) < 0 || pygpu_module_setup(m, st) < 0
        || pygpu_args_setup(m, st) < 0 || pygpu_launch_setup(m, st) < 0
        || pygpu_scalars_setup(m, st) < 0 || pygpu_function_setup(m, st) < 0
        || pygpu_nvrtc_setup(m, st) < 0 || pygpu_staging_setup(m, st) < 0
        || pygpu_linker_setup(m, st) < 0 || pygpu_nvjitlink_setup(m, st) < 0
        || pygpu_cuarray_setup(m, st) < 0 || pygpu_texobj_setup(m, st) < 0
        || pygpu_tensormap_setup(m, st) < 0 || pygpu_graph_setup(m, st) < 0
        || pygpu_nvtx_setup(m, st) < 0 || pygpu_ipc_setup(m, st) < 0 || pygpu_vmm_setup(m, st) < 0
        || pygpu_mempool_setup(m, st) < 0 || pygpu_fork_setup(m, st) < 0
        || pygpu_blockcache_setup(m, st) < 0 || pygpu_greenctx_setup(m, st) < 0
        || pygpu_checkpoint_setup(m, st) < 0)
        return -1;
    if (PyModule_AddIntConstant(m, "CUDA_HEADER_VERSION", CUDA_VERSION) < 0)
        return -1;
    if (pygpu_graphics_setup(m, st) < 0) /* graphics.c: OpenGL interop */
        return -1;
    if (pygpu_memextra_setup(m, st) < 0)
        return -1;
    if (pygpu_hostblock_setup(m, st) < 0)
        return -1;
    if (pygpu_fastops_setup(m, st) < 0) /* fastops.c: the array operators */
        return -1;
    if (pygpu_nccl_setup(m, st) < 0) /* interop/nccl.c: NCCL's collectives */
        return -1;
    return 0;
}

static int
driver_traverse(PyObject *m, visitproc visit, void *arg)
{
    pygpu_state *st = PyModule_GetState(m);
    if (st == NULL)
        return 0;
    Py_VISIT(st->Error);
    Py_VISIT(st->LogicError);
    Py_VISIT(st->LaunchError);
    Py_VISIT(st->MemoryError);
    Py_VISIT(st->RuntimeError);
    Py_VISIT(st->CudaUnavailableError);
    Py_VISIT(st->DeviceType);
    Py_VISIT(st->ContextType);
    Py_VISIT(st->DeviceAllocationType);
    Py_VISIT(st->HostAllocationType);
    Py_VISIT(st->ModuleType);
    Py_VISIT(st->FunctionType);
    Py_VISIT(st->BoundLaunchType);
    Py_VISIT(st->StreamType);
    Py_VISIT(st->EventType);
    Py_VISIT(st->ArgumentHandlerType);
    Py_VISIT(st->KernelTimeType);
    Py_VISIT(st->ArrayType);
    Py_VISIT(st->ArrayDescriptorType);
    Py_VISIT(st->ArrayDescriptor3DType);
    Py_VISIT(st->TextureObjectType);
    Py_VISIT(st->SurfaceObjectType);
    Py_VISIT(st->TensorMapType);
    Py_VISIT(st->GraphType);
    Py_VISIT(st->GraphNodeType);
    Py_VISIT(st->GraphExecType);
    Py_VISIT(st->IPCMemoryHandleType);
    Py_VISIT(st->VirtualBufferType);
    Py_VISIT(st->MemoryPoolType);
    Py_VISIT(st->HostBlockType);
    Py_VISIT(st->GreenContextType);
    Py_VISIT(st->NcclCommType);
    Py_VISIT(st->primary_contexts);
    Py_VISIT(st->foreign_contexts);
    Py_VISIT(st->gc_collect);
    Py_VISIT(st->handlers_begin);
    Py_VISIT(st->handlers_end);
    Py_VISIT(st->TimeRangeType);
    Py_VISIT(st->range_wrapper);
    return 0;
}

static int
driver_clear(PyObject *m)
{
    pygpu_state *st = PyModule_GetState(m);
    if (st == NULL)
        return 0;
    /* primary contexts last among the objects: nothing else is cleared
     * here that they depend on */
    st->last_ctx = NULL;
    st->last_handle = NULL;
    Py_CLEAR(st->foreign_contexts);
    Py_CLEAR(st->primary_contexts);
    Py_CLEAR(st->handlers_begin);
    Py_CLEAR(st->handlers_end);
    Py_CLEAR(st->TimeRangeType);
    Py_CLEAR(st->range_wrapper);
    Py_CLEAR(st->gc_collect);
    Py_CLEAR(st->str_cai);
    Py_CLEAR(st->str_dlpack);
    Py_CLEAR(st->str_cuda_stream);
    Py_CLEAR(st->str_c);
    Py_CLEAR(st->str_block);
    Py_CLEAR(st->str_grid);
    Py_CLEAR(st->str_shared);
    Py_CLEAR(st->str_stream);
    Py_CLEAR(st->str_time_kernel);
    Py_CLEAR(st->DeviceType);
    Py_CLEAR(st->ContextType);
    Py_CLEAR(st->DeviceAllocationType);
    Py_CLEAR(st->HostAllocationType);
    Py_CLEAR(st->ModuleType);
    Py_CLEAR(st->FunctionType);
    Py_CLEAR(st->BoundLaunchType);
    Py_CLEAR(st->StreamType);
    Py_CLEAR(st->EventType);
    Py_CLEAR(st->ArgumentHandlerType);
    Py_CLEAR(st->KernelTimeType);
    Py_CLEAR(st->ArrayType);
    Py_CLEAR(st->ArrayDescriptorType);
    Py_CLEAR(st->ArrayDescriptor3DType);
    Py_CLEAR(st->TextureObjectType);
    Py_CLEAR(st->SurfaceObjectType);
    Py_CLEAR(st->TensorMapType);
    Py_CLEAR(st->GraphType);
    Py_CLEAR(st->GraphNodeType);
    Py_CLEAR(st->GraphExecType);
    Py_CLEAR(st->IPCMemoryHandleType);
    Py_CLEAR(st->VirtualBufferType);
    Py_CLEAR(st->MemoryPoolType);
    Py_CLEAR(st->HostBlockType);
    Py_CLEAR(st->GreenContextType);
    Py_CLEAR(st->NcclCommType);
    Py_CLEAR(st->Error);
    Py_CLEAR(st->LogicError);
    Py_CLEAR(st->LaunchError);
    Py_CLEAR(st->MemoryError);
    Py_CLEAR(st->RuntimeError);
    Py_CLEAR(st->CudaUnavailableError);
    return 0;
}

static void
driver_free(void *m)
{
    driver_clear((PyObject *)m);
}

static PyModuleDef_Slot driver_slots[] = {
    {Py_mod_exec, driver_exec},
    {0, NULL},
};

PyModuleDef pygpu_moduledef = {
    PyModuleDef_HEAD_INIT,
    .m_name = "pygpu._driver",
    .m_doc = "CUDA driver API and NVRTC bindings (the C half of pygpu).",
    .m_size = sizeof(pygpu_state),
    .m_slots = driver_slots,
    .m_traverse = driver_traverse,
    .m_clear = driver_clear,
    .m_free = driver_free,
};

PyMODINIT_FUNC
PyInit__driver(void)
{
    return PyModuleDef_Init(&pygpu_moduledef);
}
