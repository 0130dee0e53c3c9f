/* NVRTC: compile CUDA C++ in-process, with the GIL released. */
#include "pygpu.h"

static int
ensure_nvrtc(pygpu_state *st)
{
    if (pygpu_nvrtc_loaded())
        return 0;
    PyErr_SetString(st->CudaUnavailableError,
                    "NVRTC is not loaded: call pygpu.compiler.nvrtc_version() or "
                    "compile() first, which finds it");
    return -1;
}

static PyObject *
nvrtc_error(pygpu_state *st, nvrtcResult r, const char *routine)
{
    const char *text = nv.nvrtcGetErrorString ? nv.nvrtcGetErrorString(r) : "?";
    PyErr_Format(st->RuntimeError, "%s failed: %s", routine, text);
    return NULL;
}

static PyObject *
nvrtc_version(PyObject *m, PyObject *unused)
{
    pygpu_state *st = PyModule_GetState(m);
    int major, minor;
    nvrtcResult r;
    if (ensure_nvrtc(st) < 0)
        return NULL;
    r = nv.nvrtcVersion(&major, &minor);
    if (r != NVRTC_SUCCESS)
        return nvrtc_error(st, r, "nvrtcVersion");
    return Py_BuildValue("(ii)", major, minor);
}

static PyObject *
nvrtc_supported_archs(PyObject *m, PyObject *unused)
{
    pygpu_state *st = PyModule_GetState(m);
    int n, *archs, i;
    nvrtcResult r;
    PyObject *res;
    if (ensure_nvrtc(st) < 0)
        return NULL;
    r = nv.nvrtcGetNumSupportedArchs(&n);
    if (r != NVRTC_SUCCESS)
        return nvrtc_error(st, r, "nvrtcGetNumSupportedArchs");
    archs = PyMem_Calloc((size_t)(n ? n : 1), sizeof(int));
    if (archs == NULL)
        return PyErr_NoMemory();
    r = nv.nvrtcGetSupportedArchs(archs);
    if (r != NVRTC_SUCCESS) {
        PyMem_Free(archs);
        return nvrtc_error(st, r, "nvrtcGetSupportedArchs");
    }
    res = PyTuple_New(n);
    for (i = 0; res && i < n; i++)
        PyTuple_SET_ITEM(res, i, PyLong_FromLong(archs[i]));
    PyMem_Free(archs);
    return res;
}

/* The UTF-8 of str o, or NULL with TypeError (not a str) or ValueError (a
 * NUL inside: NVRTC would read only up to it).  Borrowed from o. */
static const char *
utf8_no_nul(PyObject *o, const char *what)
{
    Py_ssize_t n;
    const char *s;
    if (!PyUnicode_Check(o)) {
        PyErr_Format(PyExc_TypeError, "%s must be str, not %.100s", what, Py_TYPE(o)->tp_name);
        return NULL;
    }
    if ((s = PyUnicode_AsUTF8AndSize(o, &n)) == NULL)
        return NULL;
    if ((size_t)n != strlen(s)) {
        PyErr_Format(PyExc_ValueError,
                     "%s %R contains a NUL character (NVRTC would stop "
                     "reading it there)",
                     what, o);
        return NULL;
    }
    return s;
}

/* _nvrtc_compile(source, name, options, headers, name_expressions, target)
 *   headers: sequence of (include_name, text)
 *   target: "cubin", "ptx" or "ltoir" (NVRTC's -dlto output, for nvJitLink)
 * -> (ok, log, image_or_None, {expression: lowered_name}) */
static PyObject *
nvrtc_compile(PyObject *m, PyObject *args)
{
    pygpu_state *st = PyModule_GetState(m);
    const char *source, *name, *target;
    PyObject *opts_o, *hdrs_o, *names_o, *opts = NULL, *hdrs = NULL, *names = NULL;
    PyObject *log_o = NULL, *image_o = NULL, *lowered = NULL, *res = NULL;
    const char **copts = NULL, **hnames = NULL, **htexts = NULL;
    Py_ssize_t nopt, nhdr, nname, i;
    nvrtcProgram prog = NULL;
    nvrtcResult r, cr;
    size_t logsize, size;
    char *log = NULL;
    int want_cubin, want_ltoir;

    if (!PyArg_ParseTuple(args, "ssOOOs:_nvrtc_compile", &source, &name, &opts_o, &hdrs_o, &names_o,
                          &target))
        return NULL;
    if (ensure_nvrtc(st) < 0)
        return NULL;
    want_cubin = strcmp(target, "cubin") == 0;
    want_ltoir = strcmp(target, "ltoir") == 0;
    if (!want_cubin && !want_ltoir && strcmp(target, "ptx") != 0) {
        PyErr_Format(PyExc_ValueError, "target must be 'cubin', 'ptx' or 'ltoir', not %R",
                     PyTuple_GET_ITEM(args, 5));
        return NULL;
    }
    if ((opts = PySequence_Fast(opts_o, "options must be a sequence of str")) == NULL
        || (hdrs = PySequence_Fast(hdrs_o, "headers must be a sequence of pairs")) == NULL
        || (names = PySequence_Fast(names_o, "name_expressions must be a sequence of str")) == NULL)
        goto done;
    nopt = PySequence_Fast_GET_SIZE(opts);
    nhdr = PySequence_Fast_GET_SIZE(hdrs);
    nname = PySequence_Fast_GET_SIZE(names);
    copts = PyMem_Calloc((size_t)nopt + 1, sizeof(char *));
    hnames = PyMem_Calloc((size_t)nhdr + 1, sizeof(char *));
    htexts = PyMem_Calloc((size_t)nhdr + 1, sizeof(char *));
    if (!copts || !hnames || !htexts) {
        PyErr_NoMemory();
        goto done;
    }
    for (i = 0; i < nopt; i++) {
        if ((copts[i] = utf8_no_nul(PySequence_Fast_GET_ITEM(opts, i), "compiler option")) == NULL)
            goto done;
    }
    for (i = 0; i < nhdr; i++) {
        PyObject *o = PySequence_Fast_GET_ITEM(hdrs, i);
        if (!PyTuple_Check(o) || PyTuple_GET_SIZE(o) != 2) {
            PyErr_SetString(PyExc_TypeError, "headers must be (name, text) pairs");
            goto done;
        }
        if ((hnames[i] = utf8_no_nul(PyTuple_GET_ITEM(o, 0), "header name")) == NULL
            || (htexts[i] = utf8_no_nul(PyTuple_GET_ITEM(o, 1), "header text")) == NULL)
            goto done;
    }
    r = nv.nvrtcCreateProgram(&prog, source, name, (int)nhdr, htexts, hnames);
    if (r != NVRTC_SUCCESS) {
        nvrtc_error(st, r, "nvrtcCreateProgram");
        goto done;
    }
    for (i = 0; i < nname; i++) {
        const char *e = utf8_no_nul(PySequence_Fast_GET_ITEM(names, i), "name expression");
        if (e == NULL)
            goto done;
        r = nv.nvrtcAddNameExpression(prog, e);
        if (r != NVRTC_SUCCESS) {
            nvrtc_error(st, r, "nvrtcAddNameExpression");
            goto done;
        }
    }
    Py_BEGIN_ALLOW_THREADS
        cr = nv.nvrtcCompileProgram(prog, (int)nopt, copts);
    Py_END_ALLOW_THREADS
    r = nv.nvrtcGetProgramLogSize(prog, &logsize);
    if (r != NVRTC_SUCCESS) {
        nvrtc_error(st, r, "nvrtcGetProgramLogSize");
        goto done;
    }
    log = PyMem_Malloc(logsize + 1);
    if (log == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    log[0] = '\0';
    if (logsize && (r = nv.nvrtcGetProgramLog(prog, log)) != NVRTC_SUCCESS) {
        nvrtc_error(st, r, "nvrtcGetProgramLog");
        goto done;
    }
    log_o = PyUnicode_DecodeUTF8(log, strlen(log), "replace");
    if (log_o == NULL)
        goto done;
    lowered = PyDict_New();
    if (lowered == NULL)
        goto done;
    if (cr != NVRTC_SUCCESS) {
        if (cr != NVRTC_ERROR_COMPILATION) {
            /* an invalid option and the like: say which */
            PyObject *t =
                PyUnicode_FromFormat("%U%s%s", log_o, PyUnicode_GET_LENGTH(log_o) ? "\n" : "",
                                     nv.nvrtcGetErrorString(cr));
            if (t == NULL)
                goto done;
            Py_SETREF(log_o, t);
        }
        res = Py_BuildValue("(OOOO)", Py_False, log_o, Py_None, lowered);
        goto done;
    }
    r = want_cubin   ? nv.nvrtcGetCUBINSize(prog, &size)
        : want_ltoir ? nv.nvrtcGetLTOIRSize(prog, &size)
                     : nv.nvrtcGetPTXSize(prog, &size);
    if (r != NVRTC_SUCCESS) {
        nvrtc_error(st, r,
                    want_cubin   ? "nvrtcGetCUBINSize"
                    : want_ltoir ? "nvrtcGetLTOIRSize"
                                 : "nvrtcGetPTXSize");
        goto done;
    }
    if (want_ltoir && size == 0) {
        PyErr_SetString(PyExc_ValueError,
                        "NVRTC produced no LTO-IR: target='ltoir' needs the -dlto option");
        goto done;
    }
    if (want_cubin && size == 0) {
        PyErr_SetString(PyExc_ValueError,
                        "NVRTC produced no cubin: target='cubin' needs a real "
                        "architecture (arch='sm_XY'), not a virtual one (compute_XY)");
        goto done;
    }
    image_o = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)size);
    if (image_o == NULL)
        goto done;
    r = want_cubin   ? nv.nvrtcGetCUBIN(prog, PyBytes_AS_STRING(image_o))
        : want_ltoir ? nv.nvrtcGetLTOIR(prog, PyBytes_AS_STRING(image_o))
                     : nv.nvrtcGetPTX(prog, PyBytes_AS_STRING(image_o));
    if (r != NVRTC_SUCCESS) {
        nvrtc_error(st, r,
                    want_cubin   ? "nvrtcGetCUBIN"
                    : want_ltoir ? "nvrtcGetLTOIR"
                                 : "nvrtcGetPTX");
        goto done;
    }
    for (i = 0; i < nname; i++) {
        PyObject *o = PySequence_Fast_GET_ITEM(names, i), *lo;
        const char *low = NULL;
        r = nv.nvrtcGetLoweredName(prog, PyUnicode_AsUTF8(o), &low);
        if (r != NVRTC_SUCCESS || low == NULL) {
            nvrtc_error(st, r, "nvrtcGetLoweredName");
            goto done;
        }
        lo = PyUnicode_FromString(low);
        if (lo == NULL || PyDict_SetItem(lowered, o, lo) < 0) {
            Py_XDECREF(lo);
            goto done;
        }
        Py_DECREF(lo);
    }
    res = Py_BuildValue("(OOOO)", Py_True, log_o, image_o, lowered);
done:
    if (prog)
        nv.nvrtcDestroyProgram(&prog);
    PyMem_Free(log);
    PyMem_Free(copts);
    PyMem_Free(hnames);
    PyMem_Free(htexts);
    Py_XDECREF(opts);
    Py_XDECREF(hdrs);
    Py_XDECREF(names);
    Py_XDECREF(log_o);
    Py_XDECREF(image_o);
    Py_XDECREF(lowered);
    return res;
}

static PyMethodDef nvrtc_methods[] = {
    {"_nvrtc_version", nvrtc_version, METH_NOARGS, "_nvrtc_version($module, /)\n--\n\n"},
    {"_nvrtc_supported_archs", nvrtc_supported_archs, METH_NOARGS,
     "_nvrtc_supported_archs($module, /)\n--\n\n"},
    {"_nvrtc_compile", nvrtc_compile, METH_VARARGS, NULL},
    {NULL},
};

int
pygpu_nvrtc_setup(PyObject *m, pygpu_state *st)
{
    return PyModule_AddFunctions(m, nvrtc_methods);
}
