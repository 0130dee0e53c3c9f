/* fakecuda: stream capture: its rules and what it records.
 * fakecuda.h describes the stand-in and its files. */
#include "fakecuda.h"

/* The capturing stream s (lock held), or NULL. */
fake_stream *
fk_cap_stream(CUstream s)
{
    fake_stream *st = (fake_stream *)s;
    if (fk_captures_active == 0 || s == NULL || s == CU_STREAM_LEGACY || s == CU_STREAM_PER_THREAD
        || !fk_known(st) || st->magic != MAGIC_STREAM || !st->alive)
        return NULL;
    return st->cap != NULL ? st : NULL;
}

/* a captured operation: the stream's next node, after its last one */
fake_node *
fk_cap_node(fake_stream *st, int type, CUresult *rc)
{
    fake_node *n;
    CUgraphNode dep = (CUgraphNode)st->cap_last;
    if (st->cap_invalid) {
        *rc = CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
        return NULL;
    }
    n = fk_node_add(st->cap, type, dep ? &dep : NULL, dep ? 1 : 0, rc);
    if (n != NULL)
        st->cap_last = n;
    return n;
}

/* A synchronous operation while streams capture: every capture of the
 * context is invalidated (the driver's implicit synchronization). */
CUresult
fk_cap_violation(fake_ctx *c, CUresult code)
{
    fake_stream *s;
    if (fk_captures_active == 0)
        return CUDA_SUCCESS;
    for (s = fk_all_streams; s != NULL; s = s->next_all)
        if (s->alive && s->cap != NULL && (c == NULL || s->ctx == c)
            && !(s->flags & CU_STREAM_NON_BLOCKING))
            break;
    if (s == NULL)
        return CUDA_SUCCESS;
    for (s = fk_all_streams; s != NULL; s = s->next_all)
        if (s->alive && s->cap != NULL)
            s->cap_invalid = 1;
    return code;
}

/* This thread's capture interaction mode (cuThreadExchangeStreamCaptureMode). */
static __thread int tl_capture_mode = CU_STREAM_CAPTURE_MODE_GLOBAL;

CUresult
fake_cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode *mode)
{
    CUresult rc = fk_enter(F_cuThreadExchangeStreamCaptureMode);
    int old;
    if (rc)
        return rc;
    if (mode == NULL
        || (*mode != CU_STREAM_CAPTURE_MODE_GLOBAL && *mode != CU_STREAM_CAPTURE_MODE_THREAD_LOCAL
            && *mode != CU_STREAM_CAPTURE_MODE_RELAXED))
        return CUDA_ERROR_INVALID_VALUE;
    old = tl_capture_mode;
    tl_capture_mode = *mode;
    *mode = (CUstreamCaptureMode)old;
    return CUDA_SUCCESS;
}

/* A potentially unsafe call (cuMemAlloc, cuMemFree, a pool attribute...)
 * while streams capture, as the driver rules it: unless this thread's mode
 * is RELAXED, it is prohibited while a GLOBAL capture runs in any thread or
 * a THREAD_LOCAL one in this thread; the call fails with
 * CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED and those captures are invalidated
 * (their next captured operation and cuStreamEndCapture fail with
 * CUDA_ERROR_STREAM_CAPTURE_INVALIDATED).  Takes the lock. */
CUresult
fk_cap_unsafe(void)
{
    fake_stream *s;
    CUresult rc = CUDA_SUCCESS;
    if (tl_capture_mode == CU_STREAM_CAPTURE_MODE_RELAXED)
        return CUDA_SUCCESS;
    pthread_mutex_lock(&fk_lock);
    if (fk_captures_active > 0)
        for (s = fk_all_streams; s != NULL; s = s->next_all)
            if (s->alive && s->cap != NULL
                && (s->cap_mode == CU_STREAM_CAPTURE_MODE_GLOBAL
                    || (s->cap_mode == CU_STREAM_CAPTURE_MODE_THREAD_LOCAL
                        && pthread_equal(s->cap_thread, pthread_self())))) {
                s->cap_invalid = 1;
                rc = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
            }
    fk_unlock();
    return rc;
}

CUresult
fake_cuStreamBeginCapture(CUstream h, CUstreamCaptureMode mode)
{
    CUresult rc = fk_enter(F_cuStreamBeginCapture);
    fake_stream *s;
    if (rc)
        return rc;
    if (mode != CU_STREAM_CAPTURE_MODE_GLOBAL && mode != CU_STREAM_CAPTURE_MODE_THREAD_LOCAL
        && mode != CU_STREAM_CAPTURE_MODE_RELAXED)
        return CUDA_ERROR_INVALID_VALUE;
    s = fk_real_stream(h, &rc);
    if (rc)
        return rc;
    if (s == NULL)
        return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    pthread_mutex_lock(&fk_lock);
    if (s->cap != NULL) {
        rc = CUDA_ERROR_ILLEGAL_STATE;
    } else if ((s->cap = fk_graph_new(s->ctx, 0)) == NULL) {
        rc = CUDA_ERROR_OUT_OF_MEMORY;
    } else {
        s->cap_mode = mode;
        s->cap_thread = pthread_self();
        s->cap_invalid = 0;
        s->cap_last = NULL;
        fk_captures_active++;
    }
    fk_unlock();
    return rc;
}

CUresult
fake_cuStreamEndCapture(CUstream h, CUgraph *out)
{
    CUresult rc = fk_enter(F_cuStreamEndCapture);
    fake_stream *s;
    if (rc)
        return rc;
    if (out == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    s = fk_real_stream(h, &rc);
    if (rc)
        return rc;
    pthread_mutex_lock(&fk_lock);
    *out = NULL;
    if (s == NULL || s->cap == NULL) {
        rc = CUDA_ERROR_ILLEGAL_STATE;
    } else {
        if (s->cap_invalid) {
            fk_graph_kill(s->cap);
            rc = CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
        } else {
            *out = (CUgraph)s->cap;
        }
        s->cap = NULL;
        s->cap_last = NULL;
        fk_captures_active--;
    }
    fk_unlock();
    return rc;
}

CUresult
fake_cuStreamIsCapturing(CUstream h, CUstreamCaptureStatus *status)
{
    CUresult rc = fk_enter(F_cuStreamIsCapturing);
    fake_stream *s;
    if (rc)
        return rc;
    if (status == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    s = fk_real_stream(h, &rc);
    if (rc)
        return rc;
    pthread_mutex_lock(&fk_lock);
    *status = s == NULL || s->cap == NULL ? CU_STREAM_CAPTURE_STATUS_NONE
              : s->cap_invalid            ? CU_STREAM_CAPTURE_STATUS_INVALIDATED
                                          : CU_STREAM_CAPTURE_STATUS_ACTIVE;
    fk_unlock();
    return CUDA_SUCCESS;
}

/* ---- what capture records (the hooks in copy, memset_n, do_launch,
 * cuMemAllocAsync/FreeAsync, cuEventRecord, cuStreamWaitEvent); lock held ---- */
void
fk_cap_memcpy(fake_node *n, void *dst, const void *src, size_t len, int dd, int sd)
{
    n->dst = dst;
    n->src = src;
    n->n = len;
    n->dst_dev = dd;
    n->src_dev = sd;
}

void
fk_cap_memcpy_pitched(fake_node *n, unsigned char *dst, const unsigned char *src, size_t width,
                      size_t rows, size_t depth, size_t dpitch, size_t spitch, size_t dslice,
                      size_t sslice)
{
    n->dst = dst;
    n->src = src;
    n->n = width;
    n->rows = rows;
    n->depth = depth;
    n->dpitch = dpitch;
    n->spitch = spitch;
    n->dslice = dslice;
    n->sslice = sslice;
}

void
fk_cap_memset(fake_node *n, CUdeviceptr d, unsigned v, size_t count, unsigned width)
{
    n->mdst = d;
    n->value = v;
    n->esize = width;
    n->width = count;
    n->height = 1;
    n->pitch = count * width;
}

CUresult
fk_cap_kernel(fake_node *n, fake_func *f, const unsigned grid[3], const unsigned block[3],
              unsigned shared, void **params, void **extra)
{
    memcpy(n->grid, grid, sizeof n->grid);
    memcpy(n->block, block, sizeof n->block);
    n->shared = shared;
    return fk_node_params(n, f, params, extra);
}

CUresult
fk_cap_alloc(fake_node *n, size_t bytes, CUdeviceptr *out)
{
    CUresult rc = fk_node_alloc(n, bytes);
    if (rc == CUDA_SUCCESS)
        *out = n->dptr;
    return rc;
}

void
fk_cap_dptr(fake_node *n, CUdeviceptr d)
{
    n->dptr = d;
}

void
fk_cap_event(fake_node *n, fake_event *e)
{
    n->event = e;
}

void
fk_cap_end_on_destroy(fake_stream *s)
{
    if (s->cap == NULL)
        return;
    fk_graph_kill(s->cap);
    s->cap = NULL;
    fk_captures_active--;
}
