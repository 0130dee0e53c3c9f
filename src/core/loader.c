/* Lazy loading of libcuda.so.1 and NVRTC.
 *
 * Nothing here runs at import.  The driver is opened on the first call that
 * needs it (PYGPU_LIBCUDA names another path), its entry points are resolved
 * through cuGetProcAddress with the ABI versions of cuda_api.h, and cuInit(0)
 * is called once.  The outcome, success or the reason for failure, is kept so
 * every later call reports the same thing.
 */
#include "pygpu.h"
#include <dlfcn.h>
#include <pthread.h>
#include <string.h>
#include <unistd.h>
#include <stdio.h>

pygpu_cuda_table pygpu_cu;
pygpu_nvrtc_table pygpu_nv;

static pthread_once_t driver_once = PTHREAD_ONCE_INIT;
static int driver_status = 1; /* 1 not tried, 0 ok, -1 failed */
static int driver_ready = 0;  /* set with release order once ok */
static CUresult driver_rc = CUDA_SUCCESS;
static char driver_msg[2048];
static void *nvrtc_handle = NULL;
static char nvrtc_path[1024];

static const char *default_libcuda = "libcuda.so.1";

static int
resolve(const char *name, int version, void **slot, int required)
{
    CUresult rc;
    CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SUCCESS;
    *slot = NULL;
    if (pygpu_cu.getProcAddress)
        rc = pygpu_cu.getProcAddress(name, slot, version, CU_GET_PROC_ADDRESS_DEFAULT, &status);
    else
        rc = pygpu_cu.getProcAddress_v1(name, slot, version, CU_GET_PROC_ADDRESS_DEFAULT);
    if (rc != CUDA_SUCCESS || status != CU_GET_PROC_ADDRESS_SUCCESS)
        *slot = NULL;
    if (*slot == NULL && required) {
        snprintf(driver_msg, sizeof driver_msg,
                 "the CUDA driver library was found but lacks %s (ABI version "
                 "%d); the installed NVIDIA driver is too old for pygpu",
                 name, version);
        return -1;
    }
    return 0;
}

static void
driver_init_once(void)
{
    const char *path = getenv("PYGPU_LIBCUDA");
    const char *shown;
    void *lib;
    CUresult rc;

    if (path == NULL || path[0] == '\0')
        path = default_libcuda;
    shown = path;
    lib = dlopen(path, RTLD_NOW | RTLD_GLOBAL);
    if (lib == NULL) {
        const char *why = dlerror();
        snprintf(driver_msg, sizeof driver_msg,
                 "no CUDA driver: could not load %s%s (%s). Install the NVIDIA "
                 "driver, or set PYGPU_LIBCUDA to the path of libcuda.so.1",
                 shown, path == default_libcuda ? " from the system library path" : "",
                 why ? why : "unknown reason");
        driver_status = -1;
        return;
    }
    /* cuInit first, through dlsym: a stub or broken driver is reported as
     * such rather than as a missing entry point */
    {
        CUresult (*init)(unsigned int) = (CUresult(*)(unsigned int))dlsym(lib, "cuInit");
        CUresult (*errname)(CUresult, const char **) =
            (CUresult(*)(CUresult, const char **))dlsym(lib, "cuGetErrorName");
        CUresult (*errstr)(CUresult, const char **) =
            (CUresult(*)(CUresult, const char **))dlsym(lib, "cuGetErrorString");
        if (init == NULL) {
            snprintf(driver_msg, sizeof driver_msg, "%s is not a CUDA driver (no cuInit)", shown);
            driver_status = -1;
            return;
        }
        rc = init(0);
        if (rc != CUDA_SUCCESS) {
            const char *name = NULL, *text = NULL;
            driver_rc = rc;
            if (errname)
                errname(rc, &name);
            if (errstr)
                errstr(rc, &text);
            if (rc == CUDA_ERROR_NO_DEVICE)
                snprintf(driver_msg, sizeof driver_msg,
                         "no CUDA device: cuInit failed with %s (%s) using %s; "
                         "check CUDA_VISIBLE_DEVICES and that a GPU is present",
                         name ? name : "?", text ? text : "?", shown);
            else if (rc == CUDA_ERROR_STUB_LIBRARY)
                snprintf(driver_msg, sizeof driver_msg,
                         "no CUDA driver: %s is the toolkit's stub library, not a "
                         "real driver (cuInit: %s)",
                         shown, name ? name : "?");
            else
                snprintf(driver_msg, sizeof driver_msg,
                         "no usable CUDA driver: cuInit failed with %s (%s) using %s",
                         name ? name : "?", text ? text : "?", shown);
            driver_status = -1;
            return;
        }
    }
    pygpu_cu.getProcAddress = dlsym(lib, "cuGetProcAddress_v2");
    if (pygpu_cu.getProcAddress == NULL)
        pygpu_cu.getProcAddress_v1 = dlsym(lib, "cuGetProcAddress");
    if (pygpu_cu.getProcAddress == NULL && pygpu_cu.getProcAddress_v1 == NULL) {
        snprintf(driver_msg, sizeof driver_msg,
                 "%s has no cuGetProcAddress: the NVIDIA driver is older than "
                 "CUDA 11.3, which pygpu needs",
                 shown);
        driver_status = -1;
        return;
    }
#define RESOLVE_REQ(name, version, cls)                                                 \
    if (resolve(#name, version, (void **)&pygpu_cu.PYGPU_CU_SLOT_##cls(name), 1) < 0) { \
        driver_status = -1;                                                             \
        return;                                                                         \
    }
#define RESOLVE_OPT(name, version, cls) \
    (void)resolve(#name, version, (void **)&pygpu_cu.PYGPU_CU_SLOT_##cls(name), 0);
    PYGPU_CUDA_API(RESOLVE_REQ, RESOLVE_OPT)
#undef RESOLVE_REQ
#undef RESOLVE_OPT

    driver_status = 0;
    __atomic_store_n(&driver_ready, 1, __ATOMIC_RELEASE);
}

int
pygpu_ensure_driver(pygpu_state *st)
{
    if (__atomic_load_n(&driver_ready, __ATOMIC_ACQUIRE))
        return 0;
    Py_BEGIN_ALLOW_THREADS
        pthread_once(&driver_once, driver_init_once);
    Py_END_ALLOW_THREADS
    if (driver_status == 0)
        return 0;
    PyObject *exc = PyObject_CallFunction(st->CudaUnavailableError, "s", driver_msg);
    if (exc == NULL)
        return -1;
    if (driver_rc != CUDA_SUCCESS) {
        PyObject *code = PyLong_FromLong((long)driver_rc), *routine = NULL;
        if (code == NULL || PyObject_SetAttrString(exc, "code", code) < 0
            || (routine = PyUnicode_FromString("cuInit")) == NULL
            || PyObject_SetAttrString(exc, "routine", routine) < 0) {
            Py_XDECREF(code);
            Py_XDECREF(routine);
            Py_DECREF(exc);
            return -1;
        }
        Py_DECREF(code);
        Py_DECREF(routine);
    }
    PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
    Py_DECREF(exc);
    return -1;
}

int
pygpu_driver_forked(void)
{
    if (!__atomic_load_n(&driver_ready, __ATOMIC_ACQUIRE))
        return 0;
    pygpu_forked_from = (int)getppid();
    snprintf(driver_msg, sizeof driver_msg,
             "this process was forked from one that had initialised CUDA (pid %d); "
             "CUDA cannot be used in a forked child. Start worker processes with "
             "multiprocessing's 'spawn' (or 'forkserver') method, e.g. "
             "multiprocessing.get_context('spawn') or "
             "ProcessPoolExecutor(mp_context=multiprocessing.get_context('spawn'))",
             pygpu_forked_from);
    driver_rc = CUDA_SUCCESS;
    driver_status = -1;
    __atomic_store_n(&driver_ready, 0, __ATOMIC_RELEASE);
    return 1;
}

int
pygpu_nvrtc_loaded(void)
{
    return nvrtc_handle != NULL;
}

/* _driver._load_nvrtc(candidates) -> path: open the first candidate that
 * loads and has every entry point.  The search order is built in Python
 * (pygpu._loader) so it can be tested without a GPU. */
static PyObject *
loader_load_nvrtc(PyObject *module, PyObject *candidates)
{
    PyObject *seq, *tried = NULL;
    Py_ssize_t i, n;
    if (nvrtc_handle != NULL)
        return PyUnicode_FromString(nvrtc_path);
    seq = PySequence_Fast(candidates, "candidates must be a sequence of paths");
    if (seq == NULL)
        return NULL;
    tried = PyList_New(0);
    if (tried == NULL)
        goto error;
    n = PySequence_Fast_GET_SIZE(seq);
    for (i = 0; i < n; i++) {
        PyObject *item = PySequence_Fast_GET_ITEM(seq, i);
        PyObject *bytes = NULL, *line;
        const char *path, *why;
        void *lib;
        if (!PyUnicode_FSConverter(item, &bytes))
            goto error;
        path = PyBytes_AS_STRING(bytes);
        lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
        if (lib == NULL) {
            why = dlerror();
            line = PyUnicode_FromFormat("%s: %s", path, why ? why : "not loadable");
            Py_DECREF(bytes);
            if (line == NULL || PyList_Append(tried, line) < 0) {
                Py_XDECREF(line);
                goto error;
            }
            Py_DECREF(line);
            continue;
        }
        pygpu_nvrtc_table t;
        int ok = 1;
#define NV_RESOLVE(ret, name, args)                              \
    if (ok && (t.name = (ret(*) args)dlsym(lib, #name)) == NULL) \
        ok = 0;
        PYGPU_NVRTC_API(NV_RESOLVE)
#undef NV_RESOLVE
        if (!ok) {
            line = PyUnicode_FromFormat("%s: missing NVRTC entry points", path);
            dlclose(lib);
            Py_DECREF(bytes);
            if (line == NULL || PyList_Append(tried, line) < 0) {
                Py_XDECREF(line);
                goto error;
            }
            Py_DECREF(line);
            continue;
        }
        pygpu_nv = t;
        nvrtc_handle = lib;
        snprintf(nvrtc_path, sizeof nvrtc_path, "%s", path);
        Py_DECREF(bytes);
        Py_DECREF(seq);
        Py_DECREF(tried);
        return PyUnicode_FromString(nvrtc_path);
    }
    {
        pygpu_state *st = PyModule_GetState(module);
        PyObject *sep = PyUnicode_FromString("\n  ");
        PyObject *joined = sep ? PyUnicode_Join(sep, tried) : NULL;
        Py_XDECREF(sep);
        /* the advice is pygpu/__main__.py's NVRTC_ADVICE, word for word
         * (tests/project/test_report.py) */
        if (joined != NULL) {
            PyErr_Format(st->CudaUnavailableError,
                         "NVRTC (the CUDA runtime compiler) was not found; tried:\n  %U\n"
                         "To compile kernels: pip install "
                         "'cuda-toolkit[nvrtc,cudart,cccl]>=13.0,<14' (NVIDIA's NVRTC, "
                         "CUDA header and CCCL wheels: pygpu's [nvrtc] extra), or "
                         "install the CUDA toolkit (and set CUDA_HOME to it), or set "
                         "PYGPU_NVRTC to libnvrtc.so's path",
                         joined);
            Py_DECREF(joined);
        }
    }
error:
    Py_XDECREF(tried);
    Py_DECREF(seq);
    return NULL;
}

static PyObject *
loader_driver_loaded(PyObject *module, PyObject *unused)
{
    return PyBool_FromLong(__atomic_load_n(&driver_ready, __ATOMIC_ACQUIRE));
}

static PyObject *
loader_init(PyObject *module, PyObject *unused)
{
    if (pygpu_ensure_driver(PyModule_GetState(module)) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *
loader_get_driver_version(PyObject *module, PyObject *unused)
{
    pygpu_state *st = PyModule_GetState(module);
    int v;
    CUresult rc;
    if (pygpu_ensure_driver(st) < 0)
        return NULL;
    rc = cu.cuDriverGetVersion(&v);
    if (rc != CUDA_SUCCESS)
        return pygpu_cuda_error(st, rc, "cuDriverGetVersion");
    return PyLong_FromLong(v);
}

/* benchmarks/run.py times a loop calling this with a launch's arguments: the
 * interpreter's share of a launch, which no binding can remove */
static PyObject *
loader_null_call(PyObject *module, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    (void)module;
    (void)args;
    (void)nargs;
    (void)kwnames;
    Py_RETURN_NONE;
}

static PyMethodDef loader_methods[] = {
    {"_null_call", (PyCFunction)(void (*)(void))loader_null_call, METH_FASTCALL | METH_KEYWORDS,
     "_null_call($module, /, *args, **kwargs)\n--\n\n"
     "Do nothing (the benchmarks' interpreter floor for a call)."},
    {"_load_nvrtc", loader_load_nvrtc, METH_O,
     "_load_nvrtc($module, candidates, /)\n--\n\n"
     "Open the first NVRTC library among candidates; return its path."},
    {"_driver_loaded", loader_driver_loaded, METH_NOARGS,
     "_driver_loaded($module, /)\n--\n\nWhether libcuda has been loaded and initialized."},
    {"init", loader_init, METH_NOARGS,
     "init($module, /)\n--\n\n"
     "Load the CUDA driver and initialize it (cuInit). Called implicitly by "
     "every call that needs the driver; raises CudaUnavailableError if there "
     "is no usable driver or device."},
    {"get_driver_version", loader_get_driver_version, METH_NOARGS,
     "get_driver_version($module, /)\n--\n\n"
     "The CUDA version the driver supports, as an int (13000 for 13.0)."},
    {NULL},
};

int
pygpu_loader_setup(PyObject *m)
{
    return PyModule_AddFunctions(m, loader_methods);
}
