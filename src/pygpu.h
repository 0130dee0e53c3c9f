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
#include "core/cuda_api.h"

#if PY_VERSION_HEX < 0x030B0000
#define PyFloat_Pack2(x, p, le) _PyFloat_Pack2((x), (unsigned char *)(p), (le))
#endif
#if PY_VERSION_HEX < 0x030A0000
static inline PyObject *
Py_NewRef(PyObject *o)
{
    Py_INCREF(o);
    return o;
}
static inline PyObject *
Py_XNewRef(PyObject *o)
{
    Py_XINCREF(o);
    return o;
}
#endif
#ifndef Py_TPFLAGS_IMMUTABLETYPE
#define Py_TPFLAGS_IMMUTABLETYPE 0 /* Python 3.9 */
#endif
#ifndef Py_TPFLAGS_DISALLOW_INSTANTIATION
#define Py_TPFLAGS_DISALLOW_INSTANTIATION 0
#endif

/* ---- loader.c: the one process-wide global, a table of C pointers ---- */

/* The table's slot of an entry point is named by its capture class
 * (core/cuda_api.h): ANY entries under their own name, the others behind a
 * prefix that only the class's accessor below uses. */
#define PYGPU_CU_SLOT_ANY(name) name
#define PYGPU_CU_SLOT_STREAM(name) stream_##name
#define PYGPU_CU_SLOT_LEGACY(name) legacy_##name
#define PYGPU_CU_SLOT_RELAX(name) relax_##name
#define PYGPU_CU_TYPEDEF(name, version, cls) typedef PFN_##name##_v##version pygpu_pfn_##name;
PYGPU_CUDA_API(PYGPU_CU_TYPEDEF, PYGPU_CU_TYPEDEF)
#undef PYGPU_CU_TYPEDEF
#define PYGPU_CU_FIELD(name, version, cls) pygpu_pfn_##name PYGPU_CU_SLOT_##cls(name);
typedef struct {
    PYGPU_CUDA_API(PYGPU_CU_FIELD, PYGPU_CU_FIELD)
    CUresult (*getProcAddress)(const char *, void **, int, cuuint64_t,
                               CUdriverProcAddressQueryResult *);
    CUresult (*getProcAddress_v1)(const char *, void **, int, cuuint64_t);
} pygpu_cuda_table;
#undef PYGPU_CU_FIELD

#define PYGPU_NV_FIELD(ret, name, args) ret(*name) args;
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
    PyObject *Error, *LogicError, *LaunchError, *MemoryError, *RuntimeError, *CudaUnavailableError;
    /* types */
    PyTypeObject *DeviceType, *ContextType, *DeviceAllocationType, *HostAllocationType, *ModuleType,
        *FunctionType, *BoundLaunchType, *StreamType, *EventType, *ArgumentHandlerType,
        *KernelTimeType;
    /* cuarray.c, texobj.c, tensormap.c */
    PyTypeObject *ArrayType, *ArrayDescriptorType, *ArrayDescriptor3DType, *TextureObjectType,
        *SurfaceObjectType, *TensorMapType;
    PyTypeObject *GraphType, *GraphNodeType, *GraphExecType; /* graph.c */
    /* strong refs: one primary Context per device ordinal, created on first
     * use and kept until the module is torn down */
    PyObject *primary_contexts; /* dict: ordinal -> Context */
    PyObject *foreign_contexts; /* dict: handle -> non-owning Context */
    /* borrowed: contexts made by make_context() or wrapped from a foreign
     * handle; each removes itself in its dealloc */
    pygpu_Context *other_contexts;
    /* borrowed: detached contexts whose handle waits for their host views
     * (release_deferred), linked by next_other; each leaves at its release */
    pygpu_Context *deferred_contexts;
    /* borrowed cache of the last context looked up by handle */
    CUcontext last_handle;
    pygpu_Context *last_ctx;
    PyObject *gc_collect;      /* strong: gc.collect */
    PyObject *str_cai;         /* interned "__cuda_array_interface__" */
    PyObject *str_dlpack;      /* interned "__dlpack__" */
    PyObject *str_cuda_stream; /* interned "__cuda_stream__" */
    PyObject *str_block, *str_grid, *str_shared, *str_stream, *str_time_kernel;
    PyObject *handlers_begin, *handlers_end; /* strong: pygpu.driver's In/Out hooks */
    int warned_no_param_info;
    /* nvtx.c */
    PyTypeObject *TimeRangeType;
    PyObject *range_wrapper; /* strong: pygpu.profiler's decorator maker */
    /* multi.c / ipc.c / vmm.c / mempool.c (processes, several GPUs) */
    PyTypeObject *IPCMemoryHandleType, *VirtualBufferType, *MemoryPoolType;
    PyTypeObject *HostBlockType;    /* hostblock.c */
    PyTypeObject *GreenContextType; /* greenctx.c */
    PyTypeObject *NcclCommType;     /* nccl.c */
    PyObject *str_c;                /* interned "_c": pygpu.nccl.Communicator's NcclComm */
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
    PyObject *m = (b->tp_flags & Py_TPFLAGS_HEAPTYPE) ? ((PyHeapTypeObject *)b)->ht_module : NULL;
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
            if ((m = pygpu_module_def_match((PyTypeObject *)PyTuple_GET_ITEM(tp->tp_mro, i)))
                != NULL)
                return m;
        }
#endif
    }
    PyErr_Format(PyExc_TypeError,
                 "'%s' is not a type of pygpu._driver nor a subclass "
                 "of one",
                 tp->tp_name);
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
            char *doc = PyObject_Malloc(n); /* type_dealloc frees it */
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
    (void)tp;
    (void)spec;
#endif
    return 0;
}

/* tp_init of the types made whole by tp_new: takes the constructor's
 * arguments and does nothing, so that a Python subclass's __init__ may call
 * Base.__init__(self, *args), as PyCUDA's (Boost.Python) classes let it. */
static inline int
pygpu_init_made(PyObject *self, PyObject *args, PyObject *kwds)
{
    (void)self;
    (void)args;
    (void)kwds;
    return 0;
}

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

/* The accessors of the capture classes (core/cuda_api.h); the gate is
 * graph/capture.c's pygpu_capture_gate, which costs one compare while
 * nothing captures.  PYGPU_CU_STREAM and PYGPU_CU_LEGACY give the entry
 * point, or NULL with a LogicError naming `what` (the call would invalidate
 * a capture); PYGPU_CU_RELAX is a statement that calls it with this
 * thread's capture mode relaxed.  GIL held for the first two. */
typedef void (*pygpu_fn)(void);
/* whether the driver has an optional entry point of class cls */
#define PYGPU_CU_HAVE(cls, name) (cu.PYGPU_CU_SLOT_##cls(name) != NULL)
pygpu_fn pygpu_capture_gate(pygpu_state *st, CUstream s, int blocking, const char *what,
                            const char *routine, pygpu_fn fn);
#define PYGPU_CU_STREAM(st, name, s, blocking, what)                            \
    ((pygpu_pfn_##name)pygpu_capture_gate((st), (s), (blocking), (what), #name, \
                                          (pygpu_fn)cu.PYGPU_CU_SLOT_STREAM(name)))
#define PYGPU_CU_LEGACY(st, name, what)                                             \
    ((pygpu_pfn_##name)pygpu_capture_gate((st), CU_STREAM_LEGACY, 1, (what), #name, \
                                          (pygpu_fn)cu.PYGPU_CU_SLOT_LEGACY(name)))
#define PYGPU_CU_RELAX(rc, name, ...)                            \
    do {                                                         \
        CUstreamCaptureMode relax_mode_ = pygpu_capture_relax(); \
        (rc) = cu.PYGPU_CU_SLOT_RELAX(name)(__VA_ARGS__);        \
        pygpu_capture_restore(relax_mode_);                      \
    } while (0)

/* ---- the areas (each folder's header; docs/design.md "Layout") ---- */
#include "core/core.h"
#include "device/device.h"
#include "memory/memory.h"
#include "compile/compile.h"
#include "launch/launch.h"
#include "graph/graph.h"
#include "texture/texture.h"
#include "interop/interop.h"

#endif
