/* Large copies between pageable host memory and the device, through
 * page-locked staging buffers.
 *
 * The driver copies pageable memory through its own small staging buffer,
 * one piece at a time: about 10 GB/s host-to-device on a machine whose DMA
 * runs at 55 GB/s.  Here the copy is split into chunks handled by several
 * threads, each with two cached pinned buffers and its own stream, so the
 * host-side memcpy of one chunk overlaps the DMA of the previous one and
 * the memcpys run on several cores.
 *
 * Semantics are those of cuMemcpyHtoD/DtoH: work already queued on the
 * legacy default stream finishes first, and the copy is complete on return.
 * Buffers and streams are cached per context and freed with it.
 */
#include "pygpu.h"
#include <pthread.h>
#include <stdlib.h>

#define MAX_THREADS 16

typedef struct pygpu_staging {
    int nthreads;
    size_t chunk;
    void *buf[MAX_THREADS][2];
    CUstream stream[MAX_THREADS];
    CUevent ev[MAX_THREADS][2];
} pygpu_staging;

/* Held while a staged copy runs (GIL released) and while buffers are freed:
 * one staged copy at a time; a second thread takes the plain driver path. */
static pthread_mutex_t staging_lock = PTHREAD_MUTEX_INITIALIZER;

/* settings, changed only with the GIL held (set_staging) */
static size_t staging_threshold = 0;   /* 0: read the environment */
static int staging_threads = 0;
static size_t staging_chunk = 0;

static void
read_settings(void)
{
    const char *e;
    if (staging_threshold)
        return;
    e = getenv("PYGPU_STAGING_THRESHOLD");
    staging_threshold = e && *e ? strtoull(e, NULL, 0) : (size_t)16 << 20;
    if (staging_threshold == 0)
        staging_threshold = (size_t)-1;
    e = getenv("PYGPU_STAGING_THREADS");
    staging_threads = e && *e ? atoi(e) : 6;
    if (staging_threads < 1) staging_threads = 1;
    if (staging_threads > MAX_THREADS) staging_threads = MAX_THREADS;
    e = getenv("PYGPU_STAGING_CHUNK");
    staging_chunk = e && *e ? strtoull(e, NULL, 0) : (size_t)4 << 20;
    if (staging_chunk < 65536) staging_chunk = 65536;
}

/* Free a context's staging resources; the context must be current or
 * pushable.  Never raises. */
static void staging_free_locked(pygpu_Context *ctx);

void
pygpu_staging_free(pygpu_Context *ctx)
{
    if (ctx->staging == NULL)
        return;
    pthread_mutex_lock(&staging_lock);
    staging_free_locked(ctx);
    pthread_mutex_unlock(&staging_lock);
}

static void
staging_free_locked(pygpu_Context *ctx)
{
    pygpu_staging *s = ctx->staging;
    int i, b;
    if (s == NULL)
        return;
    ctx->staging = NULL;
    for (i = 0; i < s->nthreads; i++) {
        for (b = 0; b < 2; b++) {
            if (s->buf[i][b]) cu.cuMemFreeHost(s->buf[i][b]);
            if (s->ev[i][b]) cu.cuEventDestroy(s->ev[i][b]);
        }
        if (s->stream[i]) cu.cuStreamDestroy(s->stream[i]);
    }
    free(s);
}

static CUresult
staging_get(pygpu_Context *ctx, pygpu_staging **out)
{
    pygpu_staging *s = ctx->staging;
    CUresult rc = CUDA_SUCCESS;
    int i, b;
    if (s != NULL && s->nthreads == staging_threads && s->chunk == staging_chunk) {
        *out = s;
        return CUDA_SUCCESS;
    }
    staging_free_locked(ctx);
    s = calloc(1, sizeof *s);
    if (s == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    s->nthreads = staging_threads;
    s->chunk = staging_chunk;
    ctx->staging = s;
    for (i = 0; i < s->nthreads && rc == CUDA_SUCCESS; i++) {
        rc = cu.cuStreamCreate(&s->stream[i], CU_STREAM_NON_BLOCKING);
        for (b = 0; b < 2 && rc == CUDA_SUCCESS; b++) {
            rc = cu.cuMemHostAlloc(&s->buf[i][b], s->chunk, 0);
            if (rc == CUDA_SUCCESS)
                rc = cu.cuEventCreate(&s->ev[i][b], CU_EVENT_DISABLE_TIMING);
        }
    }
    if (rc != CUDA_SUCCESS) {
        staging_free_locked(ctx);
        return rc;
    }
    *out = s;
    return CUDA_SUCCESS;
}

typedef struct {
    pthread_t thread;
    CUcontext ctx;
    pygpu_staging *s;
    int tid, htod;
    char *host;
    CUdeviceptr dev;
    size_t total;
    CUresult rc;
} worker_arg;

static void *
worker(void *p)
{
    worker_arg *w = p;
    pygpu_staging *s = w->s;
    size_t chunk = s->chunk, nchunks = (w->total + chunk - 1) / chunk, c;
    size_t prev_off = 0, prev_len = 0;
    int k = 0, have_prev = 0;
    CUresult rc = cu.cuCtxSetCurrent(w->ctx);
    CUstream st = s->stream[w->tid];
    for (c = (size_t)w->tid; rc == CUDA_SUCCESS && c < nchunks; c += (size_t)s->nthreads, k++) {
        int b = k & 1;
        size_t off = c * chunk, len = w->total - off < chunk ? w->total - off : chunk;
        if (w->htod) {
            if (k >= 2 && (rc = cu.cuEventSynchronize(s->ev[w->tid][b])) != CUDA_SUCCESS)
                break;
            memcpy(s->buf[w->tid][b], w->host + off, len);
            rc = cu.cuMemcpyHtoDAsync(w->dev + off, s->buf[w->tid][b], len, st);
            if (rc == CUDA_SUCCESS)
                rc = cu.cuEventRecord(s->ev[w->tid][b], st);
        } else {
            rc = cu.cuMemcpyDtoHAsync(s->buf[w->tid][b], w->dev + off, len, st);
            if (rc == CUDA_SUCCESS)
                rc = cu.cuEventRecord(s->ev[w->tid][b], st);
            if (rc == CUDA_SUCCESS && have_prev) {
                rc = cu.cuEventSynchronize(s->ev[w->tid][b ^ 1]);
                if (rc == CUDA_SUCCESS)
                    memcpy(w->host + prev_off, s->buf[w->tid][b ^ 1], prev_len);
            }
            prev_off = off;
            prev_len = len;
            have_prev = 1;
        }
    }
    if (rc == CUDA_SUCCESS)
        rc = cu.cuStreamSynchronize(st);
    if (rc == CUDA_SUCCESS && !w->htod && have_prev)
        memcpy(w->host + prev_off, s->buf[w->tid][(k - 1) & 1], prev_len);
    w->rc = rc;
    return NULL;
}

/* Copy n bytes between host and dev through staging if that pays.
 * Returns 1 (done), 0 (not applicable: the caller makes the plain call), or
 * -1 with an exception set.  GIL held on entry and exit. */
int
pygpu_staged_copy(pygpu_state *st, int htod, void *host, CUdeviceptr dev, size_t n)
{
    pygpu_Context *ctx;
    pygpu_staging *s;
    worker_arg args[MAX_THREADS];
    unsigned int mt = 0;
    CUresult rc, prc;
    int i, started = 0, nthreads;
    const char *where = "cuMemcpy (staged)";

    read_settings();
    if (n < staging_threshold)
        return 0;
    /* pinned or registered host memory goes straight to the DMA engine */
    prc = cu.cuPointerGetAttribute(&mt, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, (CUdeviceptr)host);
    if (prc == CUDA_SUCCESS)
        return 0;
    if ((ctx = pygpu_current_context(st)) == NULL)
        return -1;
    if (ctx->detached || pthread_mutex_trylock(&staging_lock) != 0)
        return 0;
    Py_INCREF(ctx);
    Py_BEGIN_ALLOW_THREADS
    rc = staging_get(ctx, &s);
    if (rc == CUDA_SUCCESS) {
        where = "cuStreamSynchronize";
        rc = cu.cuStreamSynchronize(CU_STREAM_LEGACY);   /* ordered like cuMemcpy */
    }
    if (rc == CUDA_SUCCESS) {
        size_t nchunks = (n + s->chunk - 1) / s->chunk;
        nthreads = s->nthreads < (int)nchunks ? s->nthreads : (int)nchunks;
        for (i = 0; i < nthreads; i++) {
            args[i].ctx = ctx->handle;
            args[i].s = s;
            args[i].tid = i;
            args[i].htod = htod;
            args[i].host = host;
            args[i].dev = dev;
            args[i].total = n;
            args[i].rc = CUDA_SUCCESS;
        }
        /* the chunks are dealt round-robin over s->nthreads slots; the
         * threads that would get none are not started */
        for (i = 0; i < nthreads; i++) {
            if (pthread_create(&args[i].thread, NULL, worker, &args[i]) != 0)
                break;
            started++;
        }
        /* a thread that could not be started: do its share here */
        for (i = started; i < nthreads; i++)
            worker(&args[i]);
        for (i = 0; i < started; i++)
            pthread_join(args[i].thread, NULL);
        where = htod ? "cuMemcpyHtoDAsync (staged)" : "cuMemcpyDtoHAsync (staged)";
        for (i = 0; i < nthreads; i++)
            if (args[i].rc != CUDA_SUCCESS && rc == CUDA_SUCCESS)
                rc = args[i].rc;
    }
    pthread_mutex_unlock(&staging_lock);
    Py_END_ALLOW_THREADS
    Py_DECREF(ctx);
    if (rc != CUDA_SUCCESS) {
        pygpu_cuda_error(st, rc, where);
        return -1;
    }
    return 1;
}

/* _driver._set_staging(threshold, threads, chunk): for benchmarks and
 * tests; threshold 0 turns staging off. Returns the old settings. */
static PyObject *
set_staging(PyObject *m, PyObject *args)
{
    unsigned long long threshold, chunk;
    int threads;
    PyObject *old;
    read_settings();
    old = Py_BuildValue("(KiK)", (unsigned long long)(staging_threshold == (size_t)-1 ? 0 : staging_threshold),
                        staging_threads, (unsigned long long)staging_chunk);
    if (!PyArg_ParseTuple(args, "KiK:_set_staging", &threshold, &threads, &chunk)) {
        Py_XDECREF(old);
        return NULL;
    }
    if (threads < 1 || threads > MAX_THREADS || chunk < 65536) {
        Py_XDECREF(old);
        PyErr_Format(PyExc_ValueError, "threads must be 1 to %d and chunk >= 65536", MAX_THREADS);
        return NULL;
    }
    staging_threshold = threshold ? (size_t)threshold : (size_t)-1;
    staging_threads = threads;
    staging_chunk = (size_t)chunk;
    return old;
}

static PyMethodDef staging_methods[] = {
    {"_set_staging", set_staging, METH_VARARGS, NULL},
    {NULL}
};

int
pygpu_staging_setup(PyObject *m, pygpu_state *st)
{
    return PyModule_AddFunctions(m, staging_methods);
}
