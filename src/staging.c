/* Large copies between pageable host memory and the device, through
 * page-locked staging buffers, by persistent worker threads.
 *
 * The driver copies pageable memory through its own small staging buffer,
 * one piece at a time on one core: 10 to 18 GB/s on a machine whose DMA
 * moves 55.  Here a copy of at least `threshold` bytes is cut into pieces;
 * `threads` threads (the calling one and threads-1 helpers) each take a run
 * of consecutive pieces and pipeline them through two pinned buffers of
 * `chunk` bytes on their own stream: the host memcpy of one piece overlaps
 * the DMA of the one before, and the memcpys run on several cores.
 *
 * Each owning Context gets, on its first staged copy, a pygpu_staging: the
 * helpers (started once, bound to the context with cuCtxSetCurrent, asleep
 * between copies after a short poll), their pinned buffers, streams and
 * events.  They are rebuilt only when the settings change, and torn down by
 * pygpu_staging_free() when the context is detached or dies (at interpreter
 * exit with the module's primary contexts): the helpers are told to quit and
 * joined; nothing is printed.  A forked child never touches its parent's
 * helpers, locks or buffers (the threads do not exist there): it drops the
 * inherited struct and starts its own on its first staged copy.
 *
 * Semantics are those of cuMemcpyHtoD/DtoH: work already queued on the
 * legacy default stream finishes first, and the copy is complete on return.
 * One staged copy runs at a time per context; a copy that finds the
 * context's staging busy, one below the threshold, one from page-locked
 * memory and one in a context pygpu does not own take the plain call.
 *
 * Settings are process-wide, changed and read only with the GIL held: each
 * staged copy takes a snapshot of them before it lets the GIL go.  Counters
 * (staging_stats()) say which path each copy took.
 */
#include "pygpu.h"
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MAX_THREADS 16
#define MIN_CHUNK ((size_t)64 << 10)           /* smallest chunk setting */
#define MAX_CHUNK ((size_t)256 << 20)          /* largest chunk setting */
#define MIN_PIECE ((size_t)256 << 10)          /* a copy's pieces: at least this, */
#define PIECE_ALIGN ((size_t)64 << 10)         /* a multiple of this, at most chunk */
#define SPIN_NS 100000L                        /* poll this long before sleeping */

/* from benchmarks/staging_sweep.py on an H200 (docs/memory.md): with the
 * helpers asleep (a copy after a pause) a staged copy pays ~0.3-0.4 ms to
 * wake them, which loses to the plain call below 8 MiB */
#define DEFAULT_THRESHOLD ((size_t)8 << 20)
#define DEFAULT_THREADS 6
#define DEFAULT_CHUNK ((size_t)2 << 20)

/* One copying thread's share: slot 0 is the calling thread, 1.. helpers. */
typedef struct {
    pthread_t thread;
    int running;              /* a helper thread was started: join it */
    int index;
    struct pygpu_staging *s;  /* borrowed: the struct this slot lives in */
    void *buf[2];             /* owned: cuMemHostAlloc, s->chunk bytes each */
    CUstream stream;          /* owned */
    CUevent ev[2];            /* owned: the last DMA in or out of buf[b] */
    CUresult rc;              /* result of the slot's share of the last job */
    const char *where;        /* the routine that failed */
} staging_slot;

/* Allocated with the GIL held on a context's first staged copy, freed by
 * pygpu_staging_free() (GIL held, context current).  The resources (slots)
 * are made and unmade with `busy` held and the GIL released. */
typedef struct pygpu_staging {
    pid_t pid;                /* the process that made it */
    CUcontext ctx;            /* borrowed: the owning Context's handle */
    pthread_mutex_t busy;     /* held while a staged copy runs */
    pthread_mutex_t mu;       /* with wake/done: helpers' sleep and wake-up */
    pthread_cond_t wake, done;
    atomic_uint seq;          /* bumped (mu held) for each job and for quit */
    atomic_int pending;       /* helpers yet to finish the current job */
    atomic_int failed;        /* a share failed: the others stop early */
    atomic_int quit;
    int sleeping;             /* helpers waiting on wake (mu held) */
    /* the resources: made for these settings */
    int ready;
    int want_threads;         /* the setting they were made for */
    int nthreads;             /* slots in use (fewer if a thread failed to start) */
    size_t chunk;             /* size of each pinned buffer */
    /* the current job: written before seq is bumped, constant while it runs */
    int htod, active;
    char *host;
    CUdeviceptr dev;
    size_t total, piece, npieces;
    staging_slot slot[MAX_THREADS];
} pygpu_staging;

/* ---- settings and counters ---- */

/* Process-wide: read from the environment on first use; changed and read
 * only with the GIL held. */
static struct {
    int loaded;
    size_t threshold;          /* 0: staging off */
    int threads;
    size_t chunk;
} settings;

typedef struct {
    size_t threshold;
    int threads;
    size_t chunk;
} staging_settings;

/* Counters; helpers_alive changes on helper threads, the rest with the GIL. */
static struct {
    atomic_ullong staged_htod, staged_dtoh, staged_bytes;
    atomic_ullong small, pinned, busy, other;
    atomic_ullong last_piece;
    atomic_int last_threads;
    atomic_int helpers_alive;
} stats;

/* Parse "<digits>[K|M|G][iB|B]" (binary units) from an environment
 * variable.  Returns 0, or -1 with ValueError naming the variable. */
static int
env_size(const char *name, size_t dflt, size_t *out)
{
    const char *e = getenv(name), *p;
    unsigned long long v = 0, mul = 1;
    if (e == NULL || *e == '\0') {
        *out = dflt;
        return 0;
    }
    for (p = e; *p == ' '; p++)
        ;
    if (*p < '0' || *p > '9')
        goto bad;
    for (; *p >= '0' && *p <= '9'; p++) {
        if (v > (ULLONG_MAX - 9) / 10)
            goto bad;
        v = v * 10 + (unsigned long long)(*p - '0');
    }
    switch (*p) {
    case 'k': case 'K': mul = 1ull << 10; p++; break;
    case 'm': case 'M': mul = 1ull << 20; p++; break;
    case 'g': case 'G': mul = 1ull << 30; p++; break;
    default: break;
    }
    if (mul > 1 && (*p == 'i' || *p == 'I'))
        p++;
    if (*p == 'b' || *p == 'B')
        p++;
    while (*p == ' ')
        p++;
    if (*p != '\0' || (v != 0 && mul > ULLONG_MAX / v) || v * mul > (unsigned long long)SIZE_MAX)
        goto bad;
    *out = (size_t)(v * mul);
    return 0;
bad:
    PyErr_Format(PyExc_ValueError,
                 "environment variable %s='%.100s' is not a byte count "
                 "(digits, optionally followed by K, M or G)", name, e);
    return -1;
}

/* Range checks of the settings; `from` starts the message. */
static int
check_threads(unsigned long long threads, const char *from)
{
    if (threads < 1 || threads > MAX_THREADS) {
        PyErr_Format(PyExc_ValueError, "%s: threads must be 1 to %d, not %llu",
                     from, MAX_THREADS, threads);
        return -1;
    }
    return 0;
}

static int
check_chunk(unsigned long long chunk, const char *from)
{
    if (chunk < MIN_CHUNK || chunk > MAX_CHUNK) {
        PyErr_Format(PyExc_ValueError,
                     "%s: chunk must be %zu KiB to %zu MiB, not %llu bytes",
                     from, MIN_CHUNK >> 10, MAX_CHUNK >> 20, chunk);
        return -1;
    }
    return 0;
}

/* Load the settings from the environment once.  GIL held.  0 or -1. */
static int
settings_load(void)
{
    size_t threshold, threads, chunk;
    if (settings.loaded)
        return 0;
    if (env_size("PYGPU_STAGING_THRESHOLD", DEFAULT_THRESHOLD, &threshold) < 0
        || env_size("PYGPU_STAGING_THREADS", DEFAULT_THREADS, &threads) < 0
        || env_size("PYGPU_STAGING_CHUNK", DEFAULT_CHUNK, &chunk) < 0)
        return -1;
    if (check_threads(threads, "environment variable PYGPU_STAGING_THREADS") < 0
        || check_chunk(chunk, "environment variable PYGPU_STAGING_CHUNK") < 0)
        return -1;
    settings.threshold = threshold;
    settings.threads = (int)threads;
    settings.chunk = chunk;
    settings.loaded = 1;
    return 0;
}

/* ---- helpers' wake-up and completion ---- */

static long
elapsed_ns(const struct timespec *t0)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (long)(t.tv_sec - t0->tv_sec) * 1000000000L + (t.tv_nsec - t0->tv_nsec);
}

/* A helper waits for seq to move past `seen`: polls for SPIN_NS (a copy
 * that follows soon after another starts at once), then sleeps. */
static unsigned
wait_job(pygpu_staging *s, unsigned seen)
{
    struct timespec t0;
    unsigned now;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    do {
        if ((now = atomic_load(&s->seq)) != seen)
            return now;
        sched_yield();
    } while (elapsed_ns(&t0) < SPIN_NS);
    pthread_mutex_lock(&s->mu);
    s->sleeping++;
    while ((now = atomic_load(&s->seq)) == seen)
        pthread_cond_wait(&s->wake, &s->mu);
    s->sleeping--;
    pthread_mutex_unlock(&s->mu);
    return now;
}

/* A helper is done with the current job (or with starting up). */
static void
helper_done(pygpu_staging *s)
{
    if (atomic_fetch_sub(&s->pending, 1) == 1) {
        pthread_mutex_lock(&s->mu);
        pthread_cond_signal(&s->done);
        pthread_mutex_unlock(&s->mu);
    }
}

/* The calling thread waits until every helper is done. */
static void
wait_helpers(pygpu_staging *s)
{
    struct timespec t0;
    if (atomic_load(&s->pending) == 0)
        return;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    do {
        if (atomic_load(&s->pending) == 0)
            return;
        sched_yield();
    } while (elapsed_ns(&t0) < SPIN_NS);
    pthread_mutex_lock(&s->mu);
    while (atomic_load(&s->pending) > 0)
        pthread_cond_wait(&s->done, &s->mu);
    pthread_mutex_unlock(&s->mu);
}

/* Post a job (the job fields are set) or quit to every helper. */
static void
post(pygpu_staging *s, int nhelpers)
{
    pthread_mutex_lock(&s->mu);
    atomic_store(&s->pending, nhelpers);
    atomic_fetch_add(&s->seq, 1);
    if (s->sleeping > 0)
        pthread_cond_broadcast(&s->wake);
    pthread_mutex_unlock(&s->mu);
}

/* ---- one slot's share of a copy ---- */

static void
slot_fail(staging_slot *w, CUresult rc, const char *where)
{
    w->rc = rc;
    w->where = where;
    atomic_store(&w->s->failed, 1);
}

/* Host to device: memcpy piece k into buf[k&1] while the DMA of piece k-1
 * runs; buf[b] is reused once the DMA recorded on ev[b] is done. */
static void
share_htod(pygpu_staging *s, staging_slot *w, size_t first, size_t last)
{
    size_t p;
    int k = 0;
    CUresult rc;
    for (p = first; p < last; p++, k++) {
        int b = k & 1;
        size_t off = p * s->piece, len = s->total - off < s->piece ? s->total - off : s->piece;
        if (atomic_load(&s->failed))
            break;
        if (k >= 2 && (rc = cu.cuEventSynchronize(w->ev[b])) != CUDA_SUCCESS) {
            slot_fail(w, rc, "cuEventSynchronize (staged)");
            break;
        }
        memcpy(w->buf[b], s->host + off, len);
        if ((rc = cu.cuMemcpyHtoDAsync(s->dev + off, w->buf[b], len, w->stream)) != CUDA_SUCCESS) {
            slot_fail(w, rc, "cuMemcpyHtoDAsync (staged)");
            break;
        }
        if ((rc = cu.cuEventRecord(w->ev[b], w->stream)) != CUDA_SUCCESS) {
            slot_fail(w, rc, "cuEventRecord (staged)");
            break;
        }
    }
    /* always drained: no DMA may read a buffer after the share ends */
    rc = cu.cuStreamSynchronize(w->stream);
    if (rc != CUDA_SUCCESS && w->rc == CUDA_SUCCESS)
        slot_fail(w, rc, "cuStreamSynchronize (staged)");
}

/* Device to host: the DMA of piece k into buf[k&1] runs while piece k-1 is
 * copied out of the other buffer. */
static void
share_dtoh(pygpu_staging *s, staging_slot *w, size_t first, size_t last)
{
    size_t p, prev_off = 0, prev_len = 0;
    int k = 0;
    CUresult rc;
    for (p = first; p < last; p++, k++) {
        int b = k & 1;
        size_t off = p * s->piece, len = s->total - off < s->piece ? s->total - off : s->piece;
        if (atomic_load(&s->failed))
            break;
        if ((rc = cu.cuMemcpyDtoHAsync(w->buf[b], s->dev + off, len, w->stream)) != CUDA_SUCCESS) {
            slot_fail(w, rc, "cuMemcpyDtoHAsync (staged)");
            break;
        }
        if ((rc = cu.cuEventRecord(w->ev[b], w->stream)) != CUDA_SUCCESS) {
            slot_fail(w, rc, "cuEventRecord (staged)");
            break;
        }
        if (k >= 1) {
            if ((rc = cu.cuEventSynchronize(w->ev[b ^ 1])) != CUDA_SUCCESS) {
                slot_fail(w, rc, "cuEventSynchronize (staged)");
                break;
            }
            memcpy(s->host + prev_off, w->buf[b ^ 1], prev_len);
        }
        prev_off = off;
        prev_len = len;
    }
    if (w->rc == CUDA_SUCCESS && k >= 1 && p == last) {
        int b = (k - 1) & 1;
        if ((rc = cu.cuEventSynchronize(w->ev[b])) != CUDA_SUCCESS)
            slot_fail(w, rc, "cuEventSynchronize (staged)");
        else
            memcpy(s->host + prev_off, w->buf[b], prev_len);
    }
    if (w->rc != CUDA_SUCCESS || p != last)
        (void)cu.cuStreamSynchronize(w->stream);   /* drained after a failure */
}

static void
run_share(pygpu_staging *s, staging_slot *w)
{
    size_t first = (size_t)w->index * s->npieces / (size_t)s->active;
    size_t last = (size_t)(w->index + 1) * s->npieces / (size_t)s->active;
    w->rc = CUDA_SUCCESS;
    w->where = NULL;
    if (s->htod)
        share_htod(s, w, first, last);
    else
        share_dtoh(s, w, first, last);
}

static void *
helper_main(void *arg)
{
    staging_slot *w = arg;
    pygpu_staging *s = w->s;
    unsigned seen = atomic_load(&s->seq);   /* no job is posted before startup ends */
    CUresult rc = cu.cuCtxSetCurrent(s->ctx);
    w->rc = rc;
    w->where = "cuCtxSetCurrent (staged)";
    atomic_fetch_add(&stats.helpers_alive, 1);
    helper_done(s);
    for (;;) {
        seen = wait_job(s, seen);
        if (atomic_load(&s->quit))
            break;
        if (w->index < s->active)
            run_share(s, w);
        helper_done(s);
    }
    atomic_fetch_sub(&stats.helpers_alive, 1);
    return NULL;
}

/* ---- resources ---- */

/* Stop the helpers and free the buffers, streams and events.  busy held
 * (or the struct unreachable), the context current; never fails. */
static void
resources_free(pygpu_staging *s)
{
    int i, b;
    int any = 0;
    for (i = 1; i < MAX_THREADS; i++)
        any |= s->slot[i].running;
    if (any) {
        atomic_store(&s->quit, 1);
        post(s, 0);
        for (i = 1; i < MAX_THREADS; i++) {
            if (s->slot[i].running) {
                pthread_join(s->slot[i].thread, NULL);
                s->slot[i].running = 0;
            }
        }
        atomic_store(&s->quit, 0);
    }
    for (i = 0; i < MAX_THREADS; i++) {
        staging_slot *w = &s->slot[i];
        for (b = 0; b < 2; b++) {
            if (w->buf[b] != NULL)
                (void)cu.cuMemFreeHost(w->buf[b]);
            if (w->ev[b] != NULL)
                (void)cu.cuEventDestroy(w->ev[b]);
            w->buf[b] = NULL;
            w->ev[b] = NULL;
        }
        if (w->stream != NULL)
            (void)cu.cuStreamDestroy(w->stream);
        w->stream = NULL;
    }
    s->ready = 0;
    s->nthreads = 0;
}

/* Make the resources for these settings unless they are made already.
 * busy held, GIL released, the context current. */
static CUresult
resources_get(pygpu_staging *s, const staging_settings *want, const char **where)
{
    CUresult rc = CUDA_SUCCESS;
    int i, b, started = 0;
    if (s->ready && s->want_threads == want->threads && s->chunk == want->chunk)
        return CUDA_SUCCESS;
    resources_free(s);
    s->want_threads = want->threads;
    s->chunk = want->chunk;
    for (i = 0; i < want->threads && rc == CUDA_SUCCESS; i++) {
        staging_slot *w = &s->slot[i];
        w->index = i;
        w->s = s;
        *where = "cuStreamCreate (staged)";
        rc = cu.cuStreamCreate(&w->stream, CU_STREAM_NON_BLOCKING);
        for (b = 0; b < 2 && rc == CUDA_SUCCESS; b++) {
            *where = "cuMemHostAlloc (staged)";
            rc = cu.cuMemHostAlloc(&w->buf[b], s->chunk, 0);
            if (rc == CUDA_SUCCESS) {
                *where = "cuEventCreate (staged)";
                rc = cu.cuEventCreate(&w->ev[b], CU_EVENT_DISABLE_TIMING);
            }
        }
    }
    if (rc != CUDA_SUCCESS) {
        resources_free(s);
        return rc;
    }
    /* a helper that cannot be started leaves its share to the others */
    atomic_store(&s->pending, 0);
    for (i = 1; i < want->threads; i++) {
        atomic_fetch_add(&s->pending, 1);
        if (pthread_create(&s->slot[i].thread, NULL, helper_main, &s->slot[i]) != 0) {
            atomic_fetch_sub(&s->pending, 1);
            break;
        }
        s->slot[i].running = 1;
        started++;
    }
    wait_helpers(s);
    s->nthreads = 1 + started;
    for (i = 1; i <= started; i++) {
        if (s->slot[i].rc != CUDA_SUCCESS) {
            rc = s->slot[i].rc;
            *where = s->slot[i].where;
            resources_free(s);
            return rc;
        }
    }
    s->ready = 1;
    return CUDA_SUCCESS;
}

/* The whole copy: the calling thread takes slot 0.  busy held, GIL
 * released, resources ready. */
static CUresult
run_copy(pygpu_staging *s, int htod, char *host, CUdeviceptr dev, size_t n,
         int threads, const char **where)
{
    size_t target = (n + 2 * (size_t)threads - 1) / (2 * (size_t)threads);
    size_t piece;
    int i;
    target = (target + PIECE_ALIGN - 1) / PIECE_ALIGN * PIECE_ALIGN;
    piece = target < MIN_PIECE ? MIN_PIECE : target;
    if (piece > s->chunk)
        piece = s->chunk;
    s->htod = htod;
    s->host = host;
    s->dev = dev;
    s->total = n;
    s->piece = piece;
    s->npieces = (n + piece - 1) / piece;
    s->active = s->npieces < (size_t)s->nthreads ? (int)s->npieces : s->nthreads;
    atomic_store(&s->failed, 0);
    if (s->nthreads > 1)
        post(s, s->nthreads - 1);
    run_share(s, &s->slot[0]);
    wait_helpers(s);
    for (i = 0; i < s->active; i++) {
        if (s->slot[i].rc != CUDA_SUCCESS) {
            *where = s->slot[i].where;
            return s->slot[i].rc;
        }
    }
    return CUDA_SUCCESS;
}

/* A struct made in another process (before a fork) is left alone: its
 * threads do not exist here and its locks may be held.  Its memory is
 * dropped (pygpu_staging_free); its pinned buffers and handles are the
 * parent's, never freed here. */
static int
forked(pygpu_staging *s)
{
    return s->pid != getpid();
}

static pygpu_staging *
staging_new(CUcontext handle)
{
    pygpu_staging *s = calloc(1, sizeof *s);
    if (s == NULL)
        return NULL;
    s->pid = getpid();
    s->ctx = handle;
    if (pthread_mutex_init(&s->busy, NULL) != 0) {
        free(s);
        return NULL;
    }
    if (pthread_mutex_init(&s->mu, NULL) != 0) {
        pthread_mutex_destroy(&s->busy);
        free(s);
        return NULL;
    }
    if (pthread_cond_init(&s->wake, NULL) != 0) {
        pthread_mutex_destroy(&s->mu);
        pthread_mutex_destroy(&s->busy);
        free(s);
        return NULL;
    }
    if (pthread_cond_init(&s->done, NULL) != 0) {
        pthread_cond_destroy(&s->wake);
        pthread_mutex_destroy(&s->mu);
        pthread_mutex_destroy(&s->busy);
        free(s);
        return NULL;
    }
    return s;
}

void
pygpu_staging_free(pygpu_Context *ctx)
{
    pygpu_staging *s = ctx->staging;
    if (s == NULL)
        return;
    ctx->staging = NULL;
    if (forked(s)) {
        free(s);
        return;
    }
    /* a copy still running in another thread (GIL released; detach() from
     * elsewhere) ends first: it lets go of busy before it takes the GIL
     * back, and the helpers never need the GIL */
    pthread_mutex_lock(&s->busy);
    resources_free(s);
    pthread_mutex_unlock(&s->busy);
    pthread_cond_destroy(&s->done);
    pthread_cond_destroy(&s->wake);
    pthread_mutex_destroy(&s->mu);
    pthread_mutex_destroy(&s->busy);
    free(s);
}

/* Would a synchronous pageable copy of n bytes be staged (the threshold
 * alone: pinned memory, a busy context or a foreign one still take the
 * plain call)?  1 yes, 0 no, -1 with ValueError for a bad environment
 * variable.  GIL held.  The In/Out path asks it to decide whether to
 * synchronize the launch's stream and make a synchronous copy. */
int
pygpu_staging_applies(size_t n)
{
    if (settings_load() < 0)
        return -1;
    return settings.threshold != 0 && n >= settings.threshold;
}

/* Copy n bytes between host and dev through staging if that pays.
 * Returns 1 (done), 0 (not applicable: the caller makes the plain call), or
 * -1 with an exception set.  GIL held on entry and exit. */
int
pygpu_staged_copy(pygpu_state *st, int htod, void *host, CUdeviceptr dev, size_t n)
{
    pygpu_Context *ctx;
    pygpu_staging *s;
    staging_settings snap;
    unsigned int mt = 0;
    CUresult rc;
    const char *where = "cuStreamSynchronize (staged)";

    if (settings_load() < 0)
        return -1;
    /* the snapshot this copy runs with: set_staging() in another thread
     * while the GIL is released changes only later copies */
    snap.threshold = settings.threshold;
    snap.threads = settings.threads;
    snap.chunk = settings.chunk;
    if (snap.threshold == 0 || n < snap.threshold) {
        atomic_fetch_add(&stats.small, 1);
        return 0;
    }
    /* pinned or registered host memory goes straight to the DMA engine */
    if (cu.cuPointerGetAttribute(&mt, CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                                 (CUdeviceptr)host) == CUDA_SUCCESS) {
        atomic_fetch_add(&stats.pinned, 1);
        return 0;
    }
    if ((ctx = pygpu_current_context(st)) == NULL)
        return -1;
    /* a context pygpu does not own is not torn down by it: no helpers there */
    if (ctx->detached || !ctx->owns) {
        atomic_fetch_add(&stats.other, 1);
        return 0;
    }
    if (ctx->staging != NULL && forked(ctx->staging))
        pygpu_staging_free(ctx);
    if (ctx->staging == NULL && (ctx->staging = staging_new(ctx->handle)) == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    s = ctx->staging;
    if (pthread_mutex_trylock(&s->busy) != 0) {
        atomic_fetch_add(&stats.busy, 1);
        return 0;
    }
    Py_INCREF(ctx);
    Py_BEGIN_ALLOW_THREADS
    rc = resources_get(s, &snap, &where);
    if (rc == CUDA_SUCCESS) {
        where = "cuStreamSynchronize (staged)";
        rc = cu.cuStreamSynchronize(CU_STREAM_LEGACY);   /* ordered like cuMemcpy */
    }
    if (rc == CUDA_SUCCESS)
        rc = run_copy(s, htod, (char *)host, dev, n, snap.threads, &where);
    if (rc == CUDA_SUCCESS) {
        atomic_store(&stats.last_piece, s->piece);
        atomic_store(&stats.last_threads, s->active);
    }
    pthread_mutex_unlock(&s->busy);
    Py_END_ALLOW_THREADS
    Py_DECREF(ctx);
    if (rc != CUDA_SUCCESS) {
        pygpu_cuda_error(st, rc, where);
        return -1;
    }
    atomic_fetch_add(htod ? &stats.staged_htod : &stats.staged_dtoh, 1);
    atomic_fetch_add(&stats.staged_bytes, n);
    return 1;
}

/* ---- Python functions ---- */

static PyObject *
settings_tuple(void)
{
    return Py_BuildValue("(KiK)", (unsigned long long)settings.threshold, settings.threads,
                         (unsigned long long)settings.chunk);
}

/* an int >= 0 from obj, or -1 with TypeError/ValueError naming `what` */
static int
get_count(PyObject *obj, const char *what, unsigned long long *out)
{
    PyObject *idx;
    int overflow = 0;
    long long v;
    if (PyBool_Check(obj) || (idx = PyNumber_Index(obj)) == NULL) {
        PyErr_Clear();
        PyErr_Format(PyExc_TypeError, "set_staging(): %s must be an int, not %.100s",
                     what, Py_TYPE(obj)->tp_name);
        return -1;
    }
    v = PyLong_AsLongLongAndOverflow(idx, &overflow);
    if (overflow > 0) {
        *out = PyLong_AsUnsignedLongLong(idx);
        Py_DECREF(idx);
        if (*out == (unsigned long long)-1 && PyErr_Occurred()) {
            PyErr_Format(PyExc_ValueError, "set_staging(): %s is too large", what);
            return -1;
        }
        return 0;
    }
    Py_DECREF(idx);
    if (v == -1 && PyErr_Occurred())
        return -1;
    if (overflow < 0 || v < 0) {
        PyErr_Format(PyExc_ValueError, "set_staging(): %s must be >= 0", what);
        return -1;
    }
    *out = (unsigned long long)v;
    return 0;
}

PyDoc_STRVAR(set_staging_doc,
"_set_staging(threshold=None, threads=None, chunk=None)\n--\n\n"
"Change the pageable-copy staging settings (None keeps one); return the\n"
"previous ones as (threshold, threads, chunk).  threshold: bytes from which\n"
"a copy is staged, 0 turns staging off; threads: 1 to 16 copying threads\n"
"(the caller's included); chunk: bytes of each pinned buffer (64 KiB to\n"
"256 MiB).  Copies already running keep the settings they started with.");

static PyObject *
set_staging(PyObject *m, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"threshold", "threads", "chunk", NULL};
    PyObject *tobj = Py_None, *nobj = Py_None, *cobj = Py_None, *old;
    unsigned long long threshold, threads, chunk;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|OOO:_set_staging", kwlist,
                                     &tobj, &nobj, &cobj))
        return NULL;
    if (settings_load() < 0)
        return NULL;
    threshold = settings.threshold;
    threads = (unsigned long long)settings.threads;
    chunk = settings.chunk;
    if ((tobj != Py_None && get_count(tobj, "threshold", &threshold) < 0)
        || (nobj != Py_None && get_count(nobj, "threads", &threads) < 0)
        || (cobj != Py_None && get_count(cobj, "chunk", &chunk) < 0))
        return NULL;
    if (threshold > (unsigned long long)SIZE_MAX) {
        PyErr_SetString(PyExc_ValueError, "set_staging(): threshold is too large");
        return NULL;
    }
    if (check_threads(threads, "set_staging()") < 0
        || check_chunk(chunk, "set_staging()") < 0)
        return NULL;
    if ((old = settings_tuple()) == NULL)
        return NULL;
    settings.threshold = (size_t)threshold;
    settings.threads = (int)threads;
    settings.chunk = (size_t)chunk;
    return old;
}

PyDoc_STRVAR(get_staging_doc,
"_get_staging()\n--\n\n"
"The pageable-copy staging settings: (threshold, threads, chunk).");

static PyObject *
get_staging(PyObject *m, PyObject *unused)
{
    if (settings_load() < 0)
        return NULL;
    return settings_tuple();
}

PyDoc_STRVAR(staging_applies_doc,
"_staging_applies(nbytes)\n--\n\n"
"True if a synchronous pageable copy of nbytes would be staged (by size).");

static PyObject *
staging_applies(PyObject *m, PyObject *arg)
{
    Py_ssize_t n = PyNumber_AsSsize_t(arg, PyExc_OverflowError);
    int r;
    if (n == -1 && PyErr_Occurred())
        return NULL;
    if (n < 0) {
        PyErr_SetString(PyExc_ValueError, "_staging_applies(): nbytes must be >= 0");
        return NULL;
    }
    if ((r = pygpu_staging_applies((size_t)n)) < 0)
        return NULL;
    return PyBool_FromLong(r);
}

PyDoc_STRVAR(staging_stats_doc,
"staging_stats(reset=False)\n--\n\n"
"Counters of the synchronous pageable-copy paths, process-wide, as a dict:\n"
"staged_htod, staged_dtoh (copies that went through staging), staged_bytes;\n"
"copies that took the plain driver call: below_threshold (smaller than the\n"
"threshold, or staging off), pinned (page-locked host memory), busy\n"
"(another staged copy was running in the context), other (a context pygpu\n"
"does not own, or a forked child); last_threads and last_piece (threads and\n"
"piece size of the last staged copy); helper_threads (staging threads alive\n"
"now).  reset=True zeroes the counters after reading them.");

static PyObject *
staging_stats(PyObject *m, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"reset", NULL};
    int reset = 0;
    PyObject *d;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|p:staging_stats", kwlist, &reset))
        return NULL;
    d = Py_BuildValue("{sKsKsKsKsKsKsKsisKsi}",
                      "staged_htod", (unsigned long long)atomic_load(&stats.staged_htod),
                      "staged_dtoh", (unsigned long long)atomic_load(&stats.staged_dtoh),
                      "staged_bytes", (unsigned long long)atomic_load(&stats.staged_bytes),
                      "below_threshold", (unsigned long long)atomic_load(&stats.small),
                      "pinned", (unsigned long long)atomic_load(&stats.pinned),
                      "busy", (unsigned long long)atomic_load(&stats.busy),
                      "other", (unsigned long long)atomic_load(&stats.other),
                      "last_threads", atomic_load(&stats.last_threads),
                      "last_piece", (unsigned long long)atomic_load(&stats.last_piece),
                      "helper_threads", atomic_load(&stats.helpers_alive));
    if (d != NULL && reset) {
        atomic_store(&stats.staged_htod, 0);
        atomic_store(&stats.staged_dtoh, 0);
        atomic_store(&stats.staged_bytes, 0);
        atomic_store(&stats.small, 0);
        atomic_store(&stats.pinned, 0);
        atomic_store(&stats.busy, 0);
        atomic_store(&stats.other, 0);
        atomic_store(&stats.last_threads, 0);
        atomic_store(&stats.last_piece, 0);
    }
    return d;
}

static PyMethodDef staging_methods[] = {
    {"_set_staging", (PyCFunction)(void (*)(void))set_staging, METH_VARARGS | METH_KEYWORDS,
     set_staging_doc},
    {"_get_staging", get_staging, METH_NOARGS, get_staging_doc},
    {"_staging_applies", staging_applies, METH_O, staging_applies_doc},
    {"staging_stats", (PyCFunction)(void (*)(void))staging_stats, METH_VARARGS | METH_KEYWORDS,
     staging_stats_doc},
    {NULL}
};

/* A forked child starts with no helper threads. */
static void
atfork_child(void)
{
    atomic_store(&stats.helpers_alive, 0);
}

static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;

static void
register_atfork(void)
{
    (void)pthread_atfork(NULL, NULL, atfork_child);
}

int
pygpu_staging_setup(PyObject *m, pygpu_state *st)
{
    pthread_once(&atfork_once, register_atfork);
    return PyModule_AddFunctions(m, staging_methods);
}
