/* nvJitLink: link LTO-IR, PTX, cubin, fatbin, object and library inputs
 * into one cubin (or PTX), with no GPU and no CUDA context.
 *
 * libnvJitLink is opened at run time, like NVRTC: the search order is built
 * in Python (pygpu._loader.nvjitlink_candidates) and this file only opens
 * the first candidate that has every entry point.  Its table of function
 * pointers is, like the driver's and NVRTC's, a process-wide table of C
 * pointers, written once under the GIL before the handle is published.
 *
 * One call, _nvjitlink_link(), runs a whole link (create, add every input,
 * complete, fetch the image and both logs, destroy) with the GIL released;
 * pygpu.linking.Linker collects the inputs and turns a failure into a
 * LinkError carrying nvJitLink's error log.  No handle outlives the call, so
 * nothing here needs an owner. */
#include "pygpu.h"

#include <dlfcn.h>
#include <stdint.h>

/* nvJitLink.h's types, declared here so that the build needs only the
 * headers it already needs (cuda.h, nvrtc.h): an opaque handle and int
 * results/input kinds with the values of nvJitLink.h. */
typedef struct pygpu_nvJitLink_opaque *nvjl_handle;
typedef int nvjl_result;

#define NVJL_INPUT_CUBIN 1
#define NVJL_INPUT_ANY 10

#define PYGPU_NVJITLINK_API(J)                                                  \
    J(nvJitLinkCreate, (nvjl_handle *, uint32_t, const char **))                \
    J(nvJitLinkDestroy, (nvjl_handle *))                                        \
    J(nvJitLinkAddData, (nvjl_handle, int, const void *, size_t, const char *)) \
    J(nvJitLinkAddFile, (nvjl_handle, int, const char *))                       \
    J(nvJitLinkComplete, (nvjl_handle))                                         \
    J(nvJitLinkGetLinkedCubinSize, (nvjl_handle, size_t *))                     \
    J(nvJitLinkGetLinkedCubin, (nvjl_handle, void *))                           \
    J(nvJitLinkGetLinkedPtxSize, (nvjl_handle, size_t *))                       \
    J(nvJitLinkGetLinkedPtx, (nvjl_handle, char *))                             \
    J(nvJitLinkGetErrorLogSize, (nvjl_handle, size_t *))                        \
    J(nvJitLinkGetErrorLog, (nvjl_handle, char *))                              \
    J(nvJitLinkGetInfoLogSize, (nvjl_handle, size_t *))                         \
    J(nvJitLinkGetInfoLog, (nvjl_handle, char *))

#define NVJL_FIELD(name, args) nvjl_result(*name) args;
typedef struct {
    PYGPU_NVJITLINK_API(NVJL_FIELD)
    /* optional: nvJitLinkVersion came with CUDA 12.3 */
    nvjl_result (*nvJitLinkVersion)(unsigned int *, unsigned int *);
} nvjl_table;
#undef NVJL_FIELD

static nvjl_table jl;
static void *jl_handle = NULL;
static char jl_path[1024];

/* nvJitLinkResult's names, in nvJitLink.h's order (CUDA 13.0). */
static const char *const jl_names[] = {
    "NVJITLINK_SUCCESS",
    "NVJITLINK_ERROR_UNRECOGNIZED_OPTION",
    "NVJITLINK_ERROR_MISSING_ARCH",
    "NVJITLINK_ERROR_INVALID_INPUT",
    "NVJITLINK_ERROR_PTX_COMPILE",
    "NVJITLINK_ERROR_NVVM_COMPILE",
    "NVJITLINK_ERROR_INTERNAL",
    "NVJITLINK_ERROR_THREADPOOL",
    "NVJITLINK_ERROR_UNRECOGNIZED_INPUT",
    "NVJITLINK_ERROR_FINALIZE",
    "NVJITLINK_ERROR_NULL_INPUT",
    "NVJITLINK_ERROR_INCOMPATIBLE_OPTIONS",
    "NVJITLINK_ERROR_INCORRECT_INPUT_TYPE",
    "NVJITLINK_ERROR_ARCH_MISMATCH",
    "NVJITLINK_ERROR_OUTDATED_LIBRARY",
    "NVJITLINK_ERROR_MISSING_FATBIN",
    "NVJITLINK_ERROR_UNRECOGNIZED_ARCH",
    "NVJITLINK_ERROR_UNSUPPORTED_ARCH",
    "NVJITLINK_ERROR_LTO_NOT_ENABLED",
};

/* The symbol of one entry point: the plain name (CUDA 13 exports it), else
 * the versioned names nvJitLink.h of CUDA 12 maps it to. */
static void *
jl_symbol(void *lib, const char *name)
{
    static const char *const versions[] = {"13_0", "12_0", NULL};
    char buf[128];
    const char *const *v;
    void *p = dlsym(lib, name);
    for (v = versions; p == NULL && *v != NULL; v++) {
        snprintf(buf, sizeof buf, "__%s_%s", name, *v);
        p = dlsym(lib, buf);
    }
    return p;
}

/* Append "path: why" to the list tried; 0 or -1. */
static int
note_tried(PyObject *tried, const char *path, const char *why)
{
    PyObject *line = PyUnicode_FromFormat("%s: %s", path, why);
    int r = line == NULL ? -1 : PyList_Append(tried, line);
    Py_XDECREF(line);
    return r;
}

/* _load_nvjitlink(candidates) -> path: open the first candidate that loads
 * and has every entry point; CudaUnavailableError listing each one tried. */
static PyObject *
nvjitlink_load(PyObject *module, PyObject *candidates)
{
    pygpu_state *st = PyModule_GetState(module);
    PyObject *seq, *tried = NULL, *sep, *joined;
    Py_ssize_t i, n;

    if (jl_handle != NULL)
        return PyUnicode_DecodeFSDefault(jl_path);
    seq = PySequence_Fast(candidates, "candidates must be a sequence of paths");
    if (seq == NULL)
        return NULL;
    if ((tried = PyList_New(0)) == NULL)
        goto error;
    n = PySequence_Fast_GET_SIZE(seq);
    for (i = 0; i < n; i++) {
        PyObject *bytes = NULL;
        const char *path, *why;
        nvjl_table t;
        void *lib;
        int ok = 1;
        if (!PyUnicode_FSConverter(PySequence_Fast_GET_ITEM(seq, i), &bytes))
            goto error;
        path = PyBytes_AS_STRING(bytes);
        lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
        if (lib == NULL) {
            why = dlerror();
            if (note_tried(tried, path, why ? why : "not loadable") < 0) {
                Py_DECREF(bytes);
                goto error;
            }
            Py_DECREF(bytes);
            continue;
        }
#define NVJL_RESOLVE(name, args)                                             \
    if (ok && (t.name = (nvjl_result(*) args)jl_symbol(lib, #name)) == NULL) \
        ok = 0;
        PYGPU_NVJITLINK_API(NVJL_RESOLVE)
#undef NVJL_RESOLVE
        t.nvJitLinkVersion =
            (nvjl_result(*)(unsigned int *, unsigned int *))jl_symbol(lib, "nvJitLinkVersion");
        if (!ok) {
            dlclose(lib);
            if (note_tried(tried, path, "missing nvJitLink entry points") < 0) {
                Py_DECREF(bytes);
                goto error;
            }
            Py_DECREF(bytes);
            continue;
        }
        jl = t;
        snprintf(jl_path, sizeof jl_path, "%s", path);
        jl_handle = lib;
        Py_DECREF(bytes);
        Py_DECREF(seq);
        Py_DECREF(tried);
        return PyUnicode_DecodeFSDefault(jl_path);
    }
    sep = PyUnicode_FromString("\n  ");
    joined = sep ? PyUnicode_Join(sep, tried) : NULL;
    Py_XDECREF(sep);
    if (joined != NULL) {
        PyErr_Format(st->CudaUnavailableError,
                     "nvJitLink (the CUDA JIT linker library, libnvJitLink.so) was not "
                     "found; tried:\n  %U\nInstall the CUDA toolkit, set CUDA_HOME, set "
                     "PYGPU_NVJITLINK to the library's path, or pip install "
                     "nvidia-nvjitlink",
                     joined);
        Py_DECREF(joined);
    }
error:
    Py_XDECREF(tried);
    Py_DECREF(seq);
    return NULL;
}

static int
ensure_loaded(pygpu_state *st)
{
    if (jl_handle != NULL)
        return 0;
    PyErr_SetString(st->CudaUnavailableError,
                    "nvJitLink is not loaded: pygpu.linking.nvjitlink_version() or a "
                    "Linker finds it first");
    return -1;
}

static PyObject *
nvjitlink_loaded(PyObject *module, PyObject *unused)
{
    return PyBool_FromLong(jl_handle != NULL);
}

static PyObject *
nvjitlink_version(PyObject *module, PyObject *unused)
{
    pygpu_state *st = PyModule_GetState(module);
    unsigned int major = 0, minor = 0;
    nvjl_result r;
    if (ensure_loaded(st) < 0)
        return NULL;
    if (jl.nvJitLinkVersion == NULL)
        Py_RETURN_NONE; /* older than CUDA 12.3: the caller decides */
    r = jl.nvJitLinkVersion(&major, &minor);
    if (r != 0) {
        PyErr_Format(st->RuntimeError, "nvJitLinkVersion failed: %d", r);
        return NULL;
    }
    return Py_BuildValue("(II)", major, minor);
}

/* One input of a link, as the GIL-free part sees it. */
typedef struct {
    int kind; /* nvJitLinkInputType */
    int is_file;
    Py_buffer view;   /* the data (is_file 0), held until the end */
    const char *path; /* borrowed from fs (is_file 1) */
    PyObject *fs;     /* owned: the path as bytes */
    const char *name; /* borrowed from the input's str */
} jl_input;

/* What the GIL-free part reports: every buffer PyMem_Raw, owned here. */
typedef struct {
    nvjl_result rc;
    const char *routine;     /* the call that failed, or NULL */
    Py_ssize_t failed_input; /* its index, or -1 */
    char *image, *info, *err;
    size_t image_size;
} jl_outcome;

static char *
jl_log(nvjl_handle h, int info)
{
    size_t n = 0;
    char *buf;
    if ((info ? jl.nvJitLinkGetInfoLogSize(h, &n) : jl.nvJitLinkGetErrorLogSize(h, &n)) != 0)
        n = 0;
    buf = PyMem_RawCalloc(n + 1, 1);
    if (buf != NULL && n > 0
        && (info ? jl.nvJitLinkGetInfoLog(h, buf) : jl.nvJitLinkGetErrorLog(h, buf)) != 0)
        buf[0] = '\0';
    return buf;
}

/* The whole link, GIL released: fills out; 0 or -1 (out of memory). */
static int
jl_run(const char **opts, uint32_t nopts, jl_input *in, Py_ssize_t nin, int want_ptx,
       jl_outcome *out)
{
    nvjl_handle h = NULL;
    Py_ssize_t i;
    int oom = 0;
    out->rc = jl.nvJitLinkCreate(&h, nopts, opts);
    if (out->rc != 0) {
        out->routine = "nvJitLinkCreate";
        /* a failed create may still hand back a handle with the log */
        if (h != NULL) {
            out->err = jl_log(h, 0);
            out->info = jl_log(h, 1);
            jl.nvJitLinkDestroy(&h);
        }
        return 0;
    }
    for (i = 0; i < nin && out->rc == 0; i++) {
        if (in[i].is_file)
            out->rc = jl.nvJitLinkAddFile(h, in[i].kind, in[i].path);
        else
            out->rc = jl.nvJitLinkAddData(h, in[i].kind, in[i].view.buf, (size_t)in[i].view.len,
                                          in[i].name);
        if (out->rc != 0) {
            out->routine = in[i].is_file ? "nvJitLinkAddFile" : "nvJitLinkAddData";
            out->failed_input = i;
        }
    }
    if (out->rc == 0 && (out->rc = jl.nvJitLinkComplete(h)) != 0)
        out->routine = "nvJitLinkComplete";
    if (out->rc == 0) {
        out->rc = want_ptx ? jl.nvJitLinkGetLinkedPtxSize(h, &out->image_size)
                           : jl.nvJitLinkGetLinkedCubinSize(h, &out->image_size);
        if (out->rc != 0)
            out->routine = want_ptx ? "nvJitLinkGetLinkedPtxSize" : "nvJitLinkGetLinkedCubinSize";
    }
    if (out->rc == 0) {
        out->image = PyMem_RawMalloc(out->image_size ? out->image_size : 1);
        if (out->image == NULL)
            oom = 1;
        else if ((out->rc = want_ptx ? jl.nvJitLinkGetLinkedPtx(h, out->image)
                                     : jl.nvJitLinkGetLinkedCubin(h, out->image))
                 != 0)
            out->routine = want_ptx ? "nvJitLinkGetLinkedPtx" : "nvJitLinkGetLinkedCubin";
    }
    out->info = jl_log(h, 1);
    out->err = jl_log(h, 0);
    jl.nvJitLinkDestroy(&h);
    if (out->info == NULL || out->err == NULL)
        oom = 1;
    return oom ? -1 : 0;
}

static PyObject *
log_str(const char *text)
{
    if (text == NULL)
        return PyUnicode_FromString("");
    return PyUnicode_DecodeUTF8(text, (Py_ssize_t)strlen(text), "replace");
}

/* _nvjitlink_link(options, inputs, target)
 *   options: sequence of str (-arch=sm_90, -lto, ...)
 *   inputs: sequence of (kind, data_or_path, name, is_file): kind an
 *           nvJitLinkInputType (1..10), data a bytes-like object, path a
 *           str/bytes/PathLike, name a str (shown in the logs)
 *   target: "cubin" or "ptx"
 * -> (ok, image_or_None, info_log, error_log, routine_or_None, code, failed_index)
 * Failures of the link come back as data (pygpu.linking raises LinkError);
 * bad arguments raise here. */
static PyObject *
nvjitlink_link(PyObject *module, PyObject *args)
{
    pygpu_state *st = PyModule_GetState(module);
    PyObject *opts_o, *inputs_o, *opts = NULL, *inputs = NULL, *res = NULL;
    PyObject *image_o = NULL, *info_o = NULL, *err_o = NULL;
    const char *target, **copts = NULL;
    jl_input *in = NULL;
    jl_outcome out = {0, NULL, -1, NULL, NULL, NULL, 0};
    Py_ssize_t nopt, nin = 0, i, ready;
    int want_ptx, failed;

    if (!PyArg_ParseTuple(args, "OOs:_nvjitlink_link", &opts_o, &inputs_o, &target))
        return NULL;
    if (ensure_loaded(st) < 0)
        return NULL;
    want_ptx = strcmp(target, "ptx") == 0;
    if (!want_ptx && strcmp(target, "cubin") != 0) {
        PyErr_Format(PyExc_ValueError, "target must be 'cubin' or 'ptx', not '%s'", target);
        return NULL;
    }
    if ((opts = PySequence_Fast(opts_o, "options must be a sequence of str")) == NULL
        || (inputs = PySequence_Fast(inputs_o, "inputs must be a sequence")) == NULL)
        goto done;
    nopt = PySequence_Fast_GET_SIZE(opts);
    nin = PySequence_Fast_GET_SIZE(inputs);
    if (nopt > UINT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "too many options");
        goto done;
    }
    copts = PyMem_Calloc((size_t)nopt + 1, sizeof *copts);
    in = PyMem_Calloc((size_t)nin + 1, sizeof *in);
    if (copts == NULL || in == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (i = 0; i < nopt; i++) {
        PyObject *o = PySequence_Fast_GET_ITEM(opts, i);
        Py_ssize_t len;
        if (!PyUnicode_Check(o)) {
            PyErr_Format(PyExc_TypeError, "a linker option must be str, not %.100s",
                         Py_TYPE(o)->tp_name);
            goto done;
        }
        if ((copts[i] = PyUnicode_AsUTF8AndSize(o, &len)) == NULL)
            goto done;
        if ((size_t)len != strlen(copts[i])) {
            PyErr_Format(PyExc_ValueError, "the linker option %R contains a NUL character", o);
            goto done;
        }
    }
    for (ready = 0; ready < nin; ready++) {
        PyObject *item = PySequence_Fast_GET_ITEM(inputs, ready), *payload, *name;
        jl_input *x = &in[ready];
        long kind;
        if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) != 4) {
            PyErr_SetString(PyExc_TypeError,
                            "each input must be a (kind, data_or_path, name, is_file) tuple");
            goto done;
        }
        kind = PyLong_AsLong(PyTuple_GET_ITEM(item, 0));
        if (kind == -1 && PyErr_Occurred())
            goto done;
        if (kind < NVJL_INPUT_CUBIN || kind > NVJL_INPUT_ANY) {
            PyErr_Format(PyExc_ValueError, "input kind %ld is not an nvJitLinkInputType", kind);
            goto done;
        }
        x->kind = (int)kind;
        payload = PyTuple_GET_ITEM(item, 1);
        name = PyTuple_GET_ITEM(item, 2);
        if (!PyUnicode_Check(name) || (x->name = PyUnicode_AsUTF8(name)) == NULL) {
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_TypeError, "an input's name must be str");
            goto done;
        }
        x->is_file = PyObject_IsTrue(PyTuple_GET_ITEM(item, 3));
        if (x->is_file < 0)
            goto done;
        if (x->is_file) {
            if (!PyUnicode_FSConverter(payload, &x->fs))
                goto done;
            x->path = PyBytes_AS_STRING(x->fs);
        } else if (PyObject_GetBuffer(payload, &x->view, PyBUF_SIMPLE) < 0) {
            goto done;
        }
    }
    Py_BEGIN_ALLOW_THREADS
        failed = jl_run(copts, (uint32_t)nopt, in, nin, want_ptx, &out);
    Py_END_ALLOW_THREADS
    if (failed) {
        PyErr_NoMemory();
        goto done;
    }
    if ((info_o = log_str(out.info)) == NULL || (err_o = log_str(out.err)) == NULL)
        goto done;
    if (out.rc == 0) {
        /* PTX comes with its NUL; the image is the text */
        size_t size = out.image_size;
        if (want_ptx && size > 0 && out.image[size - 1] == '\0')
            size--;
        if ((image_o = PyBytes_FromStringAndSize(out.image, (Py_ssize_t)size)) == NULL)
            goto done;
    }
    res = Py_BuildValue("(OOOOzin)", out.rc == 0 ? Py_True : Py_False, image_o ? image_o : Py_None,
                        info_o, err_o, out.routine, out.rc, out.failed_input);
done:
    for (i = 0; in != NULL && i < nin; i++) { /* calloc'd: unset entries are 0 */
        Py_XDECREF(in[i].fs);
        if (in[i].view.obj != NULL)
            PyBuffer_Release(&in[i].view);
    }
    PyMem_Free(in);
    PyMem_Free(copts);
    PyMem_RawFree(out.image);
    PyMem_RawFree(out.info);
    PyMem_RawFree(out.err);
    Py_XDECREF(image_o);
    Py_XDECREF(info_o);
    Py_XDECREF(err_o);
    Py_XDECREF(opts);
    Py_XDECREF(inputs);
    return res;
}

static PyObject *
nvjitlink_result_name(PyObject *module, PyObject *arg)
{
    long v = PyLong_AsLong(arg);
    if (v == -1 && PyErr_Occurred())
        return NULL;
    if (v >= 0 && v < (long)(sizeof jl_names / sizeof jl_names[0]))
        return PyUnicode_FromString(jl_names[v]);
    return PyUnicode_FromFormat("NVJITLINK_ERROR_%ld", v);
}

static PyMethodDef nvjitlink_methods[] = {
    {"_load_nvjitlink", nvjitlink_load, METH_O,
     "_load_nvjitlink($module, candidates, /)\n--\n\n"
     "Open the first nvJitLink library among candidates; return its path."},
    {"_nvjitlink_loaded", nvjitlink_loaded, METH_NOARGS,
     "_nvjitlink_loaded($module, /)\n--\n\nWhether nvJitLink has been loaded."},
    {"_nvjitlink_version", nvjitlink_version, METH_NOARGS,
     "_nvjitlink_version($module, /)\n--\n\n"
     "(major, minor) of the loaded nvJitLink, or None before CUDA 12.3."},
    {"_nvjitlink_link", nvjitlink_link, METH_VARARGS,
     "_nvjitlink_link($module, options, inputs, target, /)\n--\n\n"
     "Run one whole nvJitLink link with the GIL released: (ok, image, info_log, "
     "error_log, routine, code, failed_input)."},
    {"_nvjitlink_result_name", nvjitlink_result_name, METH_O,
     "_nvjitlink_result_name($module, code, /)\n--\n\nThe name of an nvJitLinkResult."},
    {NULL},
};

int
pygpu_nvjitlink_setup(PyObject *m, pygpu_state *st)
{
    return PyModule_AddFunctions(m, nvjitlink_methods);
}
