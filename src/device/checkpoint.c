/* Process checkpoint and restore (cuCheckpointProcess*, CUDA 12.8 drivers):
 * the C side of pygpu.checkpoint, one module function a driver call.  Each
 * takes a pid; the Python layer (pygpu/checkpoint.py) checks the process and
 * names the states.  The calls that wait on another process release the GIL.
 * docs/checkpoint.md. */
#include "pygpu.h"

#define NEEDS " (a CUDA 12.8 driver or newer)"

/* The driver loaded and the entry point there, and the pid parsed: 0, or -1
 * with an exception. */
static int
prepare(pygpu_state *st, const void *fn, const char *routine, const char *what, PyObject *pobj,
        int *pid)
{
    if (pygpu_parse_int(pobj, pid, what) < 0)
        return -1;
    if (*pid <= 0) {
        PyErr_Format(PyExc_ValueError, "%s: pid must be positive, not %d", what, *pid);
        return -1;
    }
    if (pygpu_ensure_driver(st) < 0 || pygpu_need_entry(st, fn, routine, what) < 0)
        return -1;
    return 0;
}

static PyObject *
checkpoint_state(PyObject *m, PyObject *pobj)
{
    pygpu_state *st = PyModule_GetState(m);
    CUprocessState state = CU_PROCESS_STATE_RUNNING;
    CUresult rc;
    int pid;
    if (prepare(st, (void *)cu.cuCheckpointProcessGetState, "cuCheckpointProcessGetState",
                "checkpoint.state()" NEEDS, pobj, &pid)
        < 0)
        return NULL;
    rc = cu.cuCheckpointProcessGetState(pid, &state);
    if (rc != CUDA_SUCCESS)
        return pygpu_cuda_error(st, rc, "cuCheckpointProcessGetState");
    return PyLong_FromLong((long)state);
}

static PyObject *
checkpoint_restore_thread_id(PyObject *m, PyObject *pobj)
{
    pygpu_state *st = PyModule_GetState(m);
    CUresult rc;
    int pid, tid = 0;
    if (prepare(st, (void *)cu.cuCheckpointProcessGetRestoreThreadId,
                "cuCheckpointProcessGetRestoreThreadId", "checkpoint.restore_thread_id()" NEEDS,
                pobj, &pid)
        < 0)
        return NULL;
    rc = cu.cuCheckpointProcessGetRestoreThreadId(pid, &tid);
    if (rc != CUDA_SUCCESS)
        return pygpu_cuda_error(st, rc, "cuCheckpointProcessGetRestoreThreadId");
    return PyLong_FromLong(tid);
}

static PyObject *
checkpoint_lock(PyObject *m, PyObject *args)
{
    pygpu_state *st = PyModule_GetState(m);
    PyObject *pobj, *tobj;
    CUcheckpointLockArgs la;
    unsigned int timeout_ms;
    CUresult rc;
    int pid;
    if (!PyArg_ParseTuple(args, "OO:_checkpoint_lock", &pobj, &tobj)
        || pygpu_parse_uint(tobj, &timeout_ms, "checkpoint.lock(): timeout_ms") < 0
        || prepare(st, (void *)cu.cuCheckpointProcessLock, "cuCheckpointProcessLock",
                   "checkpoint.lock()" NEEDS, pobj, &pid)
               < 0)
        return NULL;
    memset(&la, 0, sizeof la);
    la.timeoutMs = timeout_ms;
    Py_BEGIN_ALLOW_THREADS
        rc = cu.cuCheckpointProcessLock(pid, &la);
    Py_END_ALLOW_THREADS
    if (rc != CUDA_SUCCESS)
        return pygpu_cuda_error(st, rc, "cuCheckpointProcessLock");
    Py_RETURN_NONE;
}

static PyObject *
checkpoint_checkpoint(PyObject *m, PyObject *pobj)
{
    pygpu_state *st = PyModule_GetState(m);
    CUcheckpointCheckpointArgs ca;
    CUresult rc;
    int pid;
    if (prepare(st, (void *)cu.cuCheckpointProcessCheckpoint, "cuCheckpointProcessCheckpoint",
                "checkpoint.checkpoint()" NEEDS, pobj, &pid)
        < 0)
        return NULL;
    memset(&ca, 0, sizeof ca);
    Py_BEGIN_ALLOW_THREADS
        rc = cu.cuCheckpointProcessCheckpoint(pid, &ca);
    Py_END_ALLOW_THREADS
    if (rc != CUDA_SUCCESS)
        return pygpu_cuda_error(st, rc, "cuCheckpointProcessCheckpoint");
    Py_RETURN_NONE;
}

/* _checkpoint_restore(pid, pairs): pairs is None or bytes of n (old UUID,
 * new UUID) pairs, 32 bytes each, to restore onto other GPUs. */
static PyObject *
checkpoint_restore(PyObject *m, PyObject *args)
{
    pygpu_state *st = PyModule_GetState(m);
    PyObject *pobj, *pairs;
    CUcheckpointRestoreArgs ra;
    CUcheckpointGpuPair *gp = NULL;
    Py_ssize_t n = 0, i;
    CUresult rc;
    int pid;
    if (!PyArg_ParseTuple(args, "OO:_checkpoint_restore", &pobj, &pairs))
        return NULL;
    if (pairs != Py_None) {
        if (!PyBytes_Check(pairs) || PyBytes_GET_SIZE(pairs) % 32 != 0) {
            PyErr_SetString(PyExc_TypeError,
                            "checkpoint.restore(): GPU pairs must be bytes of 32-byte "
                            "(old UUID, new UUID) pairs");
            return NULL;
        }
        n = PyBytes_GET_SIZE(pairs) / 32;
    }
    if (prepare(st, (void *)cu.cuCheckpointProcessRestore, "cuCheckpointProcessRestore",
                "checkpoint.restore()" NEEDS, pobj, &pid)
        < 0)
        return NULL;
    memset(&ra, 0, sizeof ra);
    if (n > 0) {
        const char *b = PyBytes_AS_STRING(pairs);
        if ((gp = PyMem_Calloc((size_t)n, sizeof *gp)) == NULL)
            return PyErr_NoMemory();
        for (i = 0; i < n; i++) {
            memcpy(gp[i].oldUuid.bytes, b + 32 * i, 16);
            memcpy(gp[i].newUuid.bytes, b + 32 * i + 16, 16);
        }
        ra.gpuPairs = gp;
        ra.gpuPairsCount = (unsigned int)n;
    }
    Py_BEGIN_ALLOW_THREADS
        rc = cu.cuCheckpointProcessRestore(pid, &ra);
    Py_END_ALLOW_THREADS
    PyMem_Free(gp);
    if (rc != CUDA_SUCCESS)
        return pygpu_cuda_error(st, rc, "cuCheckpointProcessRestore");
    Py_RETURN_NONE;
}

static PyObject *
checkpoint_unlock(PyObject *m, PyObject *pobj)
{
    pygpu_state *st = PyModule_GetState(m);
    CUcheckpointUnlockArgs ua;
    CUresult rc;
    int pid;
    if (prepare(st, (void *)cu.cuCheckpointProcessUnlock, "cuCheckpointProcessUnlock",
                "checkpoint.unlock()" NEEDS, pobj, &pid)
        < 0)
        return NULL;
    memset(&ua, 0, sizeof ua);
    Py_BEGIN_ALLOW_THREADS
        rc = cu.cuCheckpointProcessUnlock(pid, &ua);
    Py_END_ALLOW_THREADS
    if (rc != CUDA_SUCCESS)
        return pygpu_cuda_error(st, rc, "cuCheckpointProcessUnlock");
    Py_RETURN_NONE;
}

static PyMethodDef checkpoint_functions[] = {
    {"_checkpoint_state", checkpoint_state, METH_O,
     "_checkpoint_state(pid, /)\n--\n\nThe process's CUprocessState as an int."},
    {"_checkpoint_restore_thread_id", checkpoint_restore_thread_id, METH_O,
     "_checkpoint_restore_thread_id(pid, /)\n--\n\nThe thread id that restores the process."},
    {"_checkpoint_lock", checkpoint_lock, METH_VARARGS,
     "_checkpoint_lock(pid, timeout_ms, /)\n--\n\nLock the process's CUDA calls (0: no "
     "timeout)."},
    {"_checkpoint_checkpoint", checkpoint_checkpoint, METH_O,
     "_checkpoint_checkpoint(pid, /)\n--\n\nMove a locked process's GPU state to host memory."},
    {"_checkpoint_restore", checkpoint_restore, METH_VARARGS,
     "_checkpoint_restore(pid, pairs, /)\n--\n\nRestore a checkpointed process (pairs: None or "
     "bytes of (old, new) GPU UUIDs)."},
    {"_checkpoint_unlock", checkpoint_unlock, METH_O,
     "_checkpoint_unlock(pid, /)\n--\n\nLet a locked process make CUDA calls again."},
    {NULL},
};

int
pygpu_checkpoint_setup(PyObject *m, pygpu_state *st)
{
    (void)st;
    return PyModule_AddFunctions(m, checkpoint_functions);
}
