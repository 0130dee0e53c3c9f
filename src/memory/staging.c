/* Large copies between pageable host memory and the device, through
 * page-locked staging buffers, by persistent worker threads.
 *
 * The driver copies pageable memory through its own small staging buffer,
 * one piece at a time on one core: 8 to 18 GB/s on a machine whose DMA
 * moves 55.  Here a copy of at least `threshold` bytes is cut into pieces
 * that the calling thread and up to threads-1 helpers claim one at a time
 * from a shared counter; each thread pipelines its pieces through two pinned
 * buffers of `chunk` bytes on its own stream (the host memcpy of one piece
 * overlaps the DMA of the one before), and the memcpys run on several cores.
 *
 * Waking the helpers costs nothing on the copy's path: the calling thread
 * posts the job (one store, and one futex wake-up only if a helper is
 * asleep) and starts on the first piece at once; helpers join as they wake
 * and take what is left.  A copy after a pause therefore runs at least at
 * one thread's pace from its first byte, instead of waiting 0.3-0.4 ms for
 * sleeping helpers that each owned a fixed share.  After their last piece
 * the helpers poll for `spin_us` (back-to-back copies find them awake),
 * then sleep.
 *
 * Device-to-host pieces can fault their destination in ahead of the
 * memcpy (`prefault`): a thread that has queued the DMA of a piece whose
 * destination pages are not resident yet (a fresh array: the kernel must
 * find and zero every page on first touch) populates them with
 * madvise(MADV_POPULATE_WRITE) while that DMA runs, so the faults of the
 * pieces run in parallel on all the copying threads and overlap the
 * transfers.
 *
 * Each owning Context gets, on its first staged copy, a pygpu_staging: the
 * helpers (started once, bound to the context with cuCtxSetCurrent), their
 * pinned buffers, streams and events.  They are rebuilt only when threads
 * or chunk change, and torn down by pygpu_staging_free() when the context
 * is detached or dies (at interpreter exit with the module's primary
 * contexts): the helpers are told to quit and joined; nothing is printed.
 * A forked child never touches its parent's helpers, locks or buffers (the
 * threads do not exist there): it drops the inherited struct and starts its
 * own on its first staged copy.
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
 *
 * ---- The job protocol (no lock on a copy's path; no data race) ----
 *
 * The job fields (htod, host, dev, total, piece, npieces, prefault) are
 * plain memory, written only by the thread that holds `busy`, and only
 * while the gate is closed (open == 0) and no helper is inside (inside ==
 * 0).  Then:
 *
 *   caller:  write the fields; next = 0; failed = 0;
 *            open = id                        (seq_cst store: publishes them)
 *            if sleepers > 0: lock mu, broadcast wake, unlock
 *            claim and copy pieces; drain its stream
 *            open = 0                         (seq_cst store)
 *            wait until inside == 0           (spin, then mu + done)
 *            read the slots' results
 *
 *   helper:  v = open, until v != 0 and v != the last job it joined
 *            (spin for spin_us, then sleep: lock mu, sleepers++, re-check,
 *            cond_wait(wake))
 *            inside++                         (seq_cst)
 *            if open != v: inside--, look again (the job ended meanwhile)
 *            else: claim and copy pieces, drain its stream; inside--
 *
 * `open = 0; read inside` against `inside++; read open` (all seq_cst) is
 * Dekker's pattern: either the caller sees the helper inside and waits for
 * it, or the helper sees the gate shut and leaves without touching a
 * field.  A helper that got in read `open == id` after the caller's
 * release-store, so the fields it reads happen-before; the caller reads the
 * helper's results (slot rc, where, job, pieces) after loading inside == 0
 * from the helper's release-decrement, so those happen-before too, and the
 * caller writes the next job's fields only after that.  `sleepers++; read
 * open` (under mu) against `open = id; read sleepers` is the same pattern
 * for the wake-up: either the helper sees the job or the caller sees a
 * sleeper and broadcasts under mu, which it can take only once the helper
 * waits.  Pieces are claimed with atomic_fetch_add on `next`, so each is
 * copied by exactly one thread; a slot is written only by its own thread
 * while inside a job.  `quit` (teardown, `busy` held) is read by helpers
 * in their poll and, under mu, before they sleep.
 *
 * A nudge wakes the helpers ahead of a job: a staged copy first waits for
 * the legacy default stream (a kernel that the copy's data comes from,
 * typically), and bumps `nudge` (waking sleepers, as for a job) before that
 * wait, so that helpers poll again by the time the job is posted.  `nudge
 * += 1; read sleepers` against `sleepers++; read nudge` (under mu) is the
 * same pattern again; a nudge carries no data.
 */
#include "pygpu.h"
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23 /* Linux 5.14 */
#endif

#define MAX_THREADS 16
#define MIN_CHUNK ((size_t)64 << 10)   /* smallest chunk setting */
#define MAX_CHUNK ((size_t)256 << 20)  /* largest chunk setting */
#define PIECE_ALIGN ((size_t)64 << 10) /* pieces are a multiple of this */
#define PIECES_PER_THREAD 4            /* a copy's target piece count per thread */
#define MAX_SPIN_US 100000             /* largest spin_us setting (0.1 s) */
#define WAIT_SPIN_NS 2000000L          /* the caller polls this long for helpers */

/* Defaults, from first principles (docs/memory.md, "Pageable copies"):
 * - threshold 1 MiB: the calling thread copies from the first byte, so a
 *   staged copy is never slower than one thread pipelining memcpy and DMA
 *   (the driver's own path), and helpers that are awake or wake within the
 *   copy make it faster;
 * - piece 256 KiB at least: one piece costs ~5 us of driver calls (async
 *   copy, event record, event wait) against ~25 us of memcpy, and a 1 MiB
 *   copy still gives four threads a piece each;
 * - spin 300 us: a copy that follows another within that finds the helpers
 *   awake (a sleeping one takes tens of us to run again); the cost is that
 *   long of polling (sched_yield) per helper after each copy. */
#define DEFAULT_THRESHOLD ((size_t)1 << 20)
#define DEFAULT_THREADS 6
#define DEFAULT_CHUNK ((size_t)2 << 20)
#define DEFAULT_PIECE ((size_t)256 << 10)
#define DEFAULT_SPIN_US 300
#define DEFAULT_PREFAULT 1
/* Below this many bytes a copy whose helpers all sleep takes the plain
 * driver call (and wakes them for the copies that may follow): after a
 * pause a cold CPU copies 1-2 MiB no faster on several threads than the
 * driver's own pipeline, and waking the helpers costs more than they bring
 * (benchmarks/staging_sweep.py on an H200: 1 MiB after 50 ms, plain 6.1
 * GB/s, staged 3.6-4.9 at every piece and thread count; from 8 MiB staged
 * is 1.2-1.5x plain even after a pause). */
#define DEFAULT_COLD ((size_t)4 << 20)
#define MAX_COLD ((size_t)1 << 30)

/* One copying thread's share: slot 0 is the calling thread, 1.. helpers. */
typedef struct {
    pthread_t thread;
    int running; /* a helper thread was started: join it */
    int index;
    struct pygpu_staging *s; /* borrowed: the struct this slot lives in */
    void *buf[2];            /* owned: cuMemHostAlloc, s->chunk bytes each */
    CUstream stream;         /* owned */
    CUevent ev[2];           /* owned: the last DMA in or out of buf[b] */
    /* written by the slot's own thread inside a job, read by the caller
     * once inside == 0 (see the protocol above) */
    unsigned job;      /* the last job this slot joined */
    size_t pieces;     /* pieces it copied in that job */
    CUresult rc;       /* result of the slot's share of that job */
    const char *where; /* the routine that failed */
} staging_slot;

/* Allocated with the GIL held on a context's first staged copy, freed by
 * pygpu_staging_free() (GIL held, context current).  The resources (slots)
 * are made and unmade with `busy` held and the GIL released. */
typedef struct pygpu_staging {
    pid_t pid;            /* the process that made it */
    CUcontext ctx;        /* borrowed: the owning Context's handle */
    pthread_mutex_t busy; /* held while a staged copy runs */
    pthread_mutex_t mu;   /* with wake/done: helpers' sleep and wake-up */
    pthread_cond_t wake, done;
    atomic_uint open;    /* the job helpers may join; 0: none */
    atomic_uint nudge;   /* bumped when a copy is on its way */
    atomic_int inside;   /* helpers inside the open job */
    atomic_int sleepers; /* helpers asleep on wake (changed under mu) */
    atomic_int booting;  /* helpers yet to report their start-up */
    atomic_size_t next;  /* the next unclaimed piece */
    atomic_int failed;   /* a share failed: the others stop early */
    atomic_int quit;
    atomic_long spin_ns; /* how long helpers poll after their last piece */
    unsigned last_id;    /* the last job's id (busy held) */
    /* the resources: made for these settings (busy held) */
    int ready;
    int want_threads; /* the setting they were made for */
    int nthreads;     /* slots in use (fewer if a thread failed to start) */
    size_t chunk;     /* size of each pinned buffer */
    /* the current job: see the protocol */
    int htod, prefault;
    pygpu_pfn_cuMemcpyHtoDAsync copy_htod; /* the entry points the job calls (GIL held */
    pygpu_pfn_cuMemcpyDtoHAsync copy_dtoh; /* when set: pygpu_staged_copy) */
    char *host;
    CUdeviceptr dev;
    size_t total, piece, npieces;
    staging_slot slot[MAX_THREADS];
} pygpu_staging;

/* ---- settings and counters ---- */

/* Process-wide: read from the environment on first use; changed and read
 * only with the GIL held. */
typedef struct {
    size_t threshold; /* 0: staging off */
    int threads;
    size_t chunk;
    size_t piece; /* smallest piece */
    long spin_us;
    int prefault;
    size_t cold; /* below it, sleeping helpers: the plain call */
} staging_settings;

static int settings_loaded;
static staging_settings settings;

/* Counters; helpers_alive and the helper-side ones change on helper
 * threads, the rest with the GIL. */
static struct {
    atomic_ullong staged_htod, staged_dtoh, staged_bytes;
    atomic_ullong small, pinned, busy, other, cold;
    atomic_ullong last_piece;
    atomic_int last_threads;
    atomic_int helpers_alive;
    atomic_ullong wakeups;        /* a helper left its sleep (for a job or a nudge) */
    atomic_ullong late_wakes;     /* a copy was posted while a helper slept */
    atomic_ullong prefault_bytes; /* destination bytes populated ahead */
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
    case 'k':
    case 'K':
        mul = 1ull << 10;
        p++;
        break;
    case 'm':
    case 'M':
        mul = 1ull << 20;
        p++;
        break;
    case 'g':
    case 'G':
        mul = 1ull << 30;
        p++;
        break;
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
                 "(digits, optionally followed by K, M or G)",
                 name, e);
    return -1;
}

/* Range checks of the settings; `from` starts the message. */
static int
check_threads(unsigned long long threads, const char *from)
{
    if (threads < 1 || threads > MAX_THREADS) {
        PyErr_Format(PyExc_ValueError, "%s: threads must be 1 to %d, not %llu", from, MAX_THREADS,
                     threads);
        return -1;
    }
    return 0;
}

static int
check_chunk(unsigned long long chunk, const char *from)
{
    if (chunk < MIN_CHUNK || chunk > MAX_CHUNK) {
        PyErr_Format(PyExc_ValueError, "%s: chunk must be %zu KiB to %zu MiB, not %llu bytes", from,
                     MIN_CHUNK >> 10, MAX_CHUNK >> 20, chunk);
        return -1;
    }
    return 0;
}

static int
check_piece(unsigned long long piece, const char *from)
{
    if (piece < PIECE_ALIGN || piece > MAX_CHUNK || piece % PIECE_ALIGN != 0) {
        PyErr_Format(PyExc_ValueError,
                     "%s: piece must be a multiple of %zu KiB from %zu KiB to %zu MiB, "
                     "not %llu bytes",
                     from, PIECE_ALIGN >> 10, PIECE_ALIGN >> 10, MAX_CHUNK >> 20, piece);
        return -1;
    }
    return 0;
}

static int
check_spin(unsigned long long spin_us, const char *from)
{
    if (spin_us > MAX_SPIN_US) {
        PyErr_Format(PyExc_ValueError, "%s: spin_us must be 0 to %d, not %llu", from, MAX_SPIN_US,
                     spin_us);
        return -1;
    }
    return 0;
}

static int
check_prefault(unsigned long long prefault, const char *from)
{
    if (prefault > 1) {
        PyErr_Format(PyExc_ValueError, "%s: prefault must be 0 or 1, not %llu", from, prefault);
        return -1;
    }
    return 0;
}

static int
check_cold(unsigned long long cold, const char *from)
{
    if (cold > MAX_COLD) {
        PyErr_Format(PyExc_ValueError, "%s: cold must be 0 to %zu bytes, not %llu", from, MAX_COLD,
                     cold);
        return -1;
    }
    return 0;
}

/* Load the settings from the environment once.  GIL held.  0 or -1. */
static int
settings_load(void)
{
    size_t threshold, threads, chunk, piece, spin_us, prefault, cold;
    if (settings_loaded)
        return 0;
    if (env_size("PYGPU_STAGING_THRESHOLD", DEFAULT_THRESHOLD, &threshold) < 0
        || env_size("PYGPU_STAGING_THREADS", DEFAULT_THREADS, &threads) < 0
        || env_size("PYGPU_STAGING_CHUNK", DEFAULT_CHUNK, &chunk) < 0
        || env_size("PYGPU_STAGING_PIECE", DEFAULT_PIECE, &piece) < 0
        || env_size("PYGPU_STAGING_SPIN_US", DEFAULT_SPIN_US, &spin_us) < 0
        || env_size("PYGPU_STAGING_PREFAULT", DEFAULT_PREFAULT, &prefault) < 0
        || env_size("PYGPU_STAGING_COLD", DEFAULT_COLD, &cold) < 0)
        return -1;
    if (check_threads(threads, "environment variable PYGPU_STAGING_THREADS") < 0
        || check_chunk(chunk, "environment variable PYGPU_STAGING_CHUNK") < 0
        || check_piece(piece, "environment variable PYGPU_STAGING_PIECE") < 0
        || check_spin(spin_us, "environment variable PYGPU_STAGING_SPIN_US") < 0
        || check_prefault(prefault, "environment variable PYGPU_STAGING_PREFAULT") < 0
        || check_cold(cold, "environment variable PYGPU_STAGING_COLD") < 0)
        return -1;
    settings.threshold = threshold;
    settings.threads = (int)threads;
    settings.chunk = chunk;
    settings.piece = piece;
    settings.spin_us = (long)spin_us;
    settings.prefault = (int)prefault;
    settings.cold = cold;
    settings_loaded = 1;
    return 0;
}

/* ---- helpers' wake-up and completion (the protocol at the top) ---- */

static long page_size = 4096; /* set once at module setup */

static long
elapsed_ns(const struct timespec *t0)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (long)(t.tv_sec - t0->tv_sec) * 1000000000L + (t.tv_nsec - t0->tv_nsec);
}

/* A helper waits for a job other than `last` (its id), or for quit (0):
 * polls for spin_ns, then sleeps on wake.  A nudge (the next copy is on its
 * way) starts the polling over, asleep or not. */
static unsigned
wait_job(pygpu_staging *s, unsigned last)
{
    struct timespec t0;
    long spin = atomic_load(&s->spin_ns);
    unsigned v, nudge = atomic_load(&s->nudge);
    int slept = 0;
    for (;;) {
        clock_gettime(CLOCK_MONOTONIC, &t0);
        for (;;) {
            if (atomic_load(&s->quit))
                return 0;
            v = atomic_load(&s->open);
            if (v != 0 && v != last)
                goto found;
            if (atomic_load(&s->nudge) != nudge) {
                nudge = atomic_load(&s->nudge);
                spin = atomic_load(&s->spin_ns);
                clock_gettime(CLOCK_MONOTONIC, &t0);
            }
            if (elapsed_ns(&t0) >= spin)
                break;
            sched_yield();
        }
        pthread_mutex_lock(&s->mu);
        atomic_fetch_add(&s->sleepers, 1);
        for (;;) {
            if (atomic_load(&s->quit)) {
                v = 0;
                break;
            }
            v = atomic_load(&s->open);
            if ((v != 0 && v != last) || atomic_load(&s->nudge) != nudge)
                break;
            slept = 1;
            pthread_cond_wait(&s->wake, &s->mu);
        }
        atomic_fetch_sub(&s->sleepers, 1);
        pthread_mutex_unlock(&s->mu);
        if (slept) {
            atomic_fetch_add(&stats.wakeups, 1);
            slept = 0;
        }
        if (v == 0 && atomic_load(&s->quit))
            return 0;
        if (v != 0 && v != last)
            return v;
        nudge = atomic_load(&s->nudge); /* nudged: poll again */
        spin = atomic_load(&s->spin_ns);
    }
found:
    return v;
}

/* Wake sleeping helpers (under mu: one that is about to sleep has either
 * seen the change or is waiting by the time mu is free). */
static void
wake_sleepers(pygpu_staging *s)
{
    pthread_mutex_lock(&s->mu);
    pthread_cond_broadcast(&s->wake);
    pthread_mutex_unlock(&s->mu);
}

/* The next copy is on its way (its caller first waits for the default
 * stream): wake sleeping helpers now, so they poll by the time it is
 * posted.  Never waits for them. */
static void
nudge(pygpu_staging *s)
{
    atomic_fetch_add(&s->nudge, 1);
    if (atomic_load(&s->sleepers) > 0)
        wake_sleepers(s);
}

/* Open job `id` to the helpers (its fields are written): wakes sleeping
 * ones; never waits for them. */
static void
post(pygpu_staging *s, unsigned id)
{
    atomic_store(&s->open, id);
    if (atomic_load(&s->sleepers) > 0) {
        atomic_fetch_add(&stats.late_wakes, 1);
        wake_sleepers(s);
    }
}

/* A helper leaves the job it entered (or tried to). */
static void
leave(pygpu_staging *s)
{
    if (atomic_fetch_sub(&s->inside, 1) == 1) {
        pthread_mutex_lock(&s->mu);
        pthread_cond_broadcast(&s->done);
        pthread_mutex_unlock(&s->mu);
    }
}

/* The caller shuts the gate and waits until no helper is inside: they
 * finish the pieces they claimed (well under WAIT_SPIN_NS), so it polls
 * first. */
static void
close_job(pygpu_staging *s)
{
    struct timespec t0;
    atomic_store(&s->open, 0);
    if (atomic_load(&s->inside) == 0)
        return;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    do {
        sched_yield();
        if (atomic_load(&s->inside) == 0)
            return;
    } while (elapsed_ns(&t0) < WAIT_SPIN_NS);
    pthread_mutex_lock(&s->mu);
    while (atomic_load(&s->inside) > 0)
        pthread_cond_wait(&s->done, &s->mu);
    pthread_mutex_unlock(&s->mu);
}

/* ---- one thread's part of a copy ---- */

static void
slot_fail(staging_slot *w, CUresult rc, const char *where)
{
    w->rc = rc;
    w->where = where;
    atomic_store(&w->s->failed, 1);
}

/* Claim the next piece: 1 and its byte range, or 0 when none is left (or
 * another thread failed). */
static int
claim(pygpu_staging *s, size_t *off, size_t *len)
{
    size_t p;
    if (atomic_load(&s->failed))
        return 0;
    p = atomic_fetch_add(&s->next, 1);
    if (p >= s->npieces)
        return 0;
    *off = p * s->piece;
    *len = s->total - *off < s->piece ? s->total - *off : s->piece;
    return 1;
}

/* Fault in the destination pages wholly inside [p, p+len) unless they are
 * resident already (the first one is checked: a reused array costs one
 * mincore per piece).  MADV_POPULATE_WRITE does it in one call; a kernel
 * without it (before 5.14) gets a write to each page, which the memcpy
 * overwrites.  Never fails: the memcpy faults in whatever is left. */
static void
prefault(char *p, size_t len)
{
    uintptr_t a = ((uintptr_t)p + (uintptr_t)page_size - 1) & ~((uintptr_t)page_size - 1);
    uintptr_t e = ((uintptr_t)p + len) & ~((uintptr_t)page_size - 1);
    unsigned char vec = 0;
    if (e <= a)
        return;
    if (mincore((void *)a, (size_t)page_size, &vec) == 0 && (vec & 1))
        return;
    if (madvise((void *)a, e - a, MADV_POPULATE_WRITE) != 0) {
        if (errno != EINVAL)
            return;
        for (; a < e; a += (uintptr_t)page_size)
            *(volatile char *)a = 0;
    }
    atomic_fetch_add(&stats.prefault_bytes, (unsigned long long)len);
}

/* Host to device: memcpy a piece into buf[k&1] while the DMA of the one
 * before runs; buf[b] is reused once the DMA recorded on ev[b] is done. */
static void
share_htod(pygpu_staging *s, staging_slot *w)
{
    size_t off, len;
    int k = 0;
    CUresult rc;
    while (claim(s, &off, &len)) {
        int b = k & 1;
        if (k >= 2 && (rc = cu.cuEventSynchronize(w->ev[b])) != CUDA_SUCCESS) {
            slot_fail(w, rc, "cuEventSynchronize (staged)");
            break;
        }
        k++;
        memcpy(w->buf[b], s->host + off, len);
        if ((rc = s->copy_htod(s->dev + off, w->buf[b], len, w->stream)) != CUDA_SUCCESS) {
            slot_fail(w, rc, "cuMemcpyHtoDAsync (staged)");
            break;
        }
        w->pieces++;
        if ((rc = cu.cuEventRecord(w->ev[b], w->stream)) != CUDA_SUCCESS) {
            slot_fail(w, rc, "cuEventRecord (staged)");
            break;
        }
    }
    /* always drained: no DMA may read a buffer after the share ends */
    if (k > 0 && (rc = cu.cuStreamSynchronize(w->stream)) != CUDA_SUCCESS && w->rc == CUDA_SUCCESS)
        slot_fail(w, rc, "cuStreamSynchronize (staged)");
}

/* Device to host: the DMA of a piece into buf[k&1] runs while the piece
 * before is copied out of the other buffer; with prefault, the piece's
 * destination is faulted in while its own DMA runs. */
static void
share_dtoh(pygpu_staging *s, staging_slot *w)
{
    size_t off, len, prev_off = 0, prev_len = 0;
    int k = 0;
    CUresult rc;
    while (claim(s, &off, &len)) {
        int b = k & 1;
        if ((rc = s->copy_dtoh(w->buf[b], s->dev + off, len, w->stream)) != CUDA_SUCCESS) {
            slot_fail(w, rc, "cuMemcpyDtoHAsync (staged)");
            break;
        }
        if ((rc = cu.cuEventRecord(w->ev[b], w->stream)) != CUDA_SUCCESS) {
            slot_fail(w, rc, "cuEventRecord (staged)");
            break;
        }
        if (s->prefault)
            prefault(s->host + off, len);
        if (k >= 1) {
            if ((rc = cu.cuEventSynchronize(w->ev[b ^ 1])) != CUDA_SUCCESS) {
                slot_fail(w, rc, "cuEventSynchronize (staged)");
                break;
            }
            memcpy(s->host + prev_off, w->buf[b ^ 1], prev_len);
        }
        prev_off = off;
        prev_len = len;
        k++;
        w->pieces++;
    }
    if (w->rc == CUDA_SUCCESS && k >= 1) {
        int b = (k - 1) & 1;
        if ((rc = cu.cuEventSynchronize(w->ev[b])) != CUDA_SUCCESS)
            slot_fail(w, rc, "cuEventSynchronize (staged)");
        else
            memcpy(s->host + prev_off, w->buf[b], prev_len);
    }
    if (w->rc != CUDA_SUCCESS)
        (void)cu.cuStreamSynchronize(w->stream); /* drained after a failure */
}

static void
run_share(pygpu_staging *s, staging_slot *w, unsigned id)
{
    w->job = id;
    w->pieces = 0;
    w->rc = CUDA_SUCCESS;
    w->where = NULL;
    if (s->htod)
        share_htod(s, w);
    else
        share_dtoh(s, w);
}

/* A helper has started (its rc says whether it is bound to the context). */
static void
boot_done(pygpu_staging *s)
{
    pthread_mutex_lock(&s->mu);
    if (atomic_fetch_sub(&s->booting, 1) == 1)
        pthread_cond_broadcast(&s->done);
    pthread_mutex_unlock(&s->mu);
}

static void *
helper_main(void *arg)
{
    staging_slot *w = arg;
    pygpu_staging *s = w->s;
    unsigned last = 0, id;
    w->rc = cu.cuCtxSetCurrent(s->ctx);
    w->where = "cuCtxSetCurrent (staged)";
    atomic_fetch_add(&stats.helpers_alive, 1);
    boot_done(s);
    while ((id = wait_job(s, last)) != 0) {
        atomic_fetch_add(&s->inside, 1);
        if (atomic_load(&s->open) == id) {
            last = id;
            run_share(s, w, id);
        }
        leave(s);
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
        pthread_mutex_lock(&s->mu);
        pthread_cond_broadcast(&s->wake);
        pthread_mutex_unlock(&s->mu);
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
            if (w->buf[b] != NULL) {
                CUresult ignored;
                PYGPU_CU_RELAX(ignored, cuMemFreeHost, w->buf[b]);
                (void)ignored;
            }
            if (w->ev[b] != NULL)
                (void)cu.cuEventDestroy(w->ev[b]);
            w->buf[b] = NULL;
            w->ev[b] = NULL;
        }
        if (w->stream != NULL)
            (void)cu.cuStreamDestroy(w->stream);
        w->stream = NULL;
        w->job = 0;
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
            PYGPU_CU_RELAX(rc, cuMemHostAlloc, &w->buf[b], s->chunk, 0);
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
    /* a helper that cannot be started leaves its pieces to the others */
    atomic_store(&s->open, 0);
    atomic_store(&s->inside, 0);
    atomic_store(&s->booting, want->threads - 1);
    atomic_store(&s->spin_ns, want->spin_us * 1000L);
    for (i = 1; i < want->threads; i++) {
        if (pthread_create(&s->slot[i].thread, NULL, helper_main, &s->slot[i]) != 0)
            break;
        s->slot[i].running = 1;
        started++;
    }
    pthread_mutex_lock(&s->mu);
    atomic_fetch_sub(&s->booting, want->threads - 1 - started);
    while (atomic_load(&s->booting) > 0)
        pthread_cond_wait(&s->done, &s->mu);
    pthread_mutex_unlock(&s->mu);
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

/* The piece size of an n-byte copy: about PIECES_PER_THREAD pieces a
 * thread (claimed dynamically, so late helpers and slow pieces even out),
 * a multiple of 64 KiB, at least `piece`, at most the chunk. */
static size_t
piece_size(size_t n, int threads, size_t min_piece, size_t chunk)
{
    size_t per = (size_t)PIECES_PER_THREAD * (size_t)threads;
    size_t target = n / per + (n % per != 0);
    target = (target + PIECE_ALIGN - 1) / PIECE_ALIGN * PIECE_ALIGN;
    if (target < min_piece)
        target = min_piece;
    return target > chunk ? chunk : target;
}

/* The whole copy: the calling thread takes slot 0 and starts at once; the
 * helpers join as they come.  busy held, GIL released, resources ready.
 * *joined: threads that copied a piece. */
static CUresult
run_copy(pygpu_staging *s, const staging_settings *snap, int htod, char *host, CUdeviceptr dev,
         size_t n, const char **where, int *joined)
{
    unsigned id;
    int i;
    s->htod = htod;
    s->prefault = !htod && snap->prefault;
    s->host = host;
    s->dev = dev;
    s->total = n;
    s->piece = piece_size(n, snap->threads, snap->piece, s->chunk);
    s->npieces = (n + s->piece - 1) / s->piece;
    atomic_store(&s->next, 0);
    atomic_store(&s->failed, 0);
    atomic_store(&s->spin_ns, snap->spin_us * 1000L);
    if ((id = ++s->last_id) == 0)
        id = ++s->last_id;
    if (s->nthreads > 1)
        post(s, id);
    run_share(s, &s->slot[0], id);
    if (s->nthreads > 1)
        close_job(s);
    *joined = 0;
    for (i = 0; i < s->nthreads; i++) {
        staging_slot *w = &s->slot[i];
        if (w->job != id)
            continue;
        if (w->rc != CUDA_SUCCESS) {
            *where = w->where;
            return w->rc;
        }
        *joined += w->pieces > 0;
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

/* After the plain call of a copy pygpu_staged_copy() answered 2: wake the
 * current context's sleeping helpers, so a copy that follows within spin_us
 * finds them polling.  GIL held. */
void
pygpu_staging_wake(pygpu_state *st)
{
    pygpu_Context *ctx = pygpu_current_context(st);
    if (ctx == NULL) {
        PyErr_Clear();
        return;
    }
    if (ctx->staging != NULL && !ctx->detached && ctx->staging->ready) {
        atomic_store(&ctx->staging->spin_ns, settings.spin_us * 1000L);
        nudge(ctx->staging);
    }
}

/* Copy n bytes between host and dev through staging if that pays.
 * Returns 1 (done), 0 (not applicable: the caller makes the plain call), 2
 * (the plain call, then pygpu_staging_wake()), or -1 with an exception
 * set.  GIL held on entry and exit. */
int
pygpu_staged_copy(pygpu_state *st, int htod, void *host, CUdeviceptr dev, size_t n)
{
    pygpu_Context *ctx;
    pygpu_staging *s;
    staging_settings snap;
    unsigned int mt = 0;
    int joined = 0;
    CUresult rc;
    const char *where = "cuStreamSynchronize (staged)";

    if (settings_load() < 0)
        return -1;
    /* the snapshot this copy runs with: set_staging() in another thread
     * while the GIL is released changes only later copies */
    snap = settings;
    if (snap.threshold == 0 || n < snap.threshold) {
        atomic_fetch_add(&stats.small, 1);
        return 0;
    }
    /* pinned or registered host memory goes straight to the DMA engine */
    if (cu.cuPointerGetAttribute(&mt, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, (CUdeviceptr)host)
        == CUDA_SUCCESS) {
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
    /* every helper asleep and a small copy: the plain call, after which
     * the caller wakes the helpers (pygpu_staging_wake) for the copies that
     * may follow; woken before it, they spin beside the copy and slow it
     * (DEFAULT_COLD says why the plain call) */
    if (n < snap.cold && s->ready && s->nthreads > 1
        && atomic_load(&s->sleepers) >= s->nthreads - 1) {
        pthread_mutex_unlock(&s->busy);
        atomic_fetch_add(&stats.cold, 1);
        return 2;
    }
    /* the helpers' copies, through their capture class (core/cuda_api.h):
     * on the helpers' own non-blocking streams, which no capture refuses */
    s->copy_htod = PYGPU_CU_STREAM(st, cuMemcpyHtoDAsync, CU_STREAM_PER_THREAD, 0, "a staged copy");
    s->copy_dtoh = PYGPU_CU_STREAM(st, cuMemcpyDtoHAsync, CU_STREAM_PER_THREAD, 0, "a staged copy");
    if (s->copy_htod == NULL || s->copy_dtoh == NULL) {
        pthread_mutex_unlock(&s->busy);
        return -1;
    }
    Py_INCREF(ctx);
    Py_BEGIN_ALLOW_THREADS
        if (s->ready && s->nthreads > 1) {
            atomic_store(&s->spin_ns, snap.spin_us * 1000L);
            nudge(s); /* they wake while the default stream drains */
        }
        rc = resources_get(s, &snap, &where);
        if (rc == CUDA_SUCCESS) {
            where = "cuStreamSynchronize (staged)";
            rc = cu.cuStreamSynchronize(CU_STREAM_LEGACY); /* ordered like cuMemcpy */
        }
        if (rc == CUDA_SUCCESS)
            rc = run_copy(s, &snap, htod, (char *)host, dev, n, &where, &joined);
        if (rc == CUDA_SUCCESS) {
            atomic_store(&stats.last_piece, s->piece);
            atomic_store(&stats.last_threads, joined);
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

static PyObject *
tuning_tuple(void)
{
    return Py_BuildValue("(KliK)", (unsigned long long)settings.piece, settings.spin_us,
                         settings.prefault, (unsigned long long)settings.cold);
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
        PyErr_Format(PyExc_TypeError, "set_staging(): %s must be an int, not %.100s", what,
                     Py_TYPE(obj)->tp_name);
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
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|OOO:_set_staging", kwlist, &tobj, &nobj, &cobj))
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
    if (check_threads(threads, "set_staging()") < 0 || check_chunk(chunk, "set_staging()") < 0)
        return NULL;
    if ((old = settings_tuple()) == NULL)
        return NULL;
    settings.threshold = (size_t)threshold;
    settings.threads = (int)threads;
    settings.chunk = (size_t)chunk;
    return old;
}

PyDoc_STRVAR(
    set_staging_tuning_doc,
    "_set_staging_tuning(piece=None, spin_us=None, prefault=None, cold=None)\n--\n\n"
    "Change the staging knobs (None keeps one); return the previous ones as\n"
    "(piece, spin_us, prefault, cold).  piece: the smallest piece, bytes, a multiple\n"
    "of 64 KiB up to 256 MiB; spin_us: how long helpers poll after their last\n"
    "piece before they sleep, 0 to 100000; prefault: 1 faults a device-to-host\n"
    "copy's destination in ahead of the memcpy, 0 does not; cold: bytes below which a copy whose\n"
    "helpers all sleep takes the plain driver call and wakes them, 0 to 1 GiB.");

static PyObject *
set_staging_tuning(PyObject *m, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"piece", "spin_us", "prefault", "cold", NULL};
    PyObject *pobj = Py_None, *sobj = Py_None, *fobj = Py_None, *cobj = Py_None, *old;
    unsigned long long piece, spin_us, prefault, cold;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|OOOO:_set_staging_tuning", kwlist, &pobj, &sobj,
                                     &fobj, &cobj))
        return NULL;
    if (settings_load() < 0)
        return NULL;
    piece = settings.piece;
    spin_us = (unsigned long long)settings.spin_us;
    prefault = (unsigned long long)settings.prefault;
    cold = (unsigned long long)settings.cold;
    if (fobj != Py_None && PyBool_Check(fobj))
        prefault = fobj == Py_True;
    else if (fobj != Py_None && get_count(fobj, "prefault", &prefault) < 0)
        return NULL;
    if ((pobj != Py_None && get_count(pobj, "piece", &piece) < 0)
        || (sobj != Py_None && get_count(sobj, "spin_us", &spin_us) < 0)
        || (cobj != Py_None && get_count(cobj, "cold", &cold) < 0))
        return NULL;
    if (check_piece(piece, "set_staging()") < 0 || check_spin(spin_us, "set_staging()") < 0
        || check_prefault(prefault, "set_staging()") < 0 || check_cold(cold, "set_staging()") < 0)
        return NULL;
    if ((old = tuning_tuple()) == NULL)
        return NULL;
    settings.piece = (size_t)piece;
    settings.spin_us = (long)spin_us;
    settings.prefault = (int)prefault;
    settings.cold = (size_t)cold;
    return old;
}

PyDoc_STRVAR(get_staging_doc, "_get_staging()\n--\n\n"
                              "The pageable-copy staging settings: (threshold, threads, chunk).");

static PyObject *
get_staging(PyObject *m, PyObject *unused)
{
    if (settings_load() < 0)
        return NULL;
    return settings_tuple();
}

PyDoc_STRVAR(get_staging_tuning_doc, "_get_staging_tuning()\n--\n\n"
                                     "The staging knobs: (piece, spin_us, prefault, cold).");

static PyObject *
get_staging_tuning(PyObject *m, PyObject *unused)
{
    if (settings_load() < 0)
        return NULL;
    return tuning_tuple();
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
             "does not own, or a forked child), cold (a copy below the cold setting\n"
             "while every helper slept); last_threads (threads that copied a\n"
             "piece of the last staged copy) and last_piece (its piece size);\n"
             "helper_threads (staging threads alive now); helper_wakeups (times a\n"
             "sleeping helper was woken, for a copy or ahead of one); late_wakeups\n"
             "(copies posted while a helper still slept); prefault_bytes (destination\n"
             "bytes faulted in ahead of the memcpy).  reset=True zeroes the counters (not\n"
             "helper_threads) after reading them.");

static PyObject *
staging_stats(PyObject *m, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"reset", NULL};
    int reset = 0;
    PyObject *d;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|p:staging_stats", kwlist, &reset))
        return NULL;
    d = Py_BuildValue("{sKsKsKsKsKsKsKsKsisKsisKsKsK}", "staged_htod",
                      (unsigned long long)atomic_load(&stats.staged_htod), "staged_dtoh",
                      (unsigned long long)atomic_load(&stats.staged_dtoh), "staged_bytes",
                      (unsigned long long)atomic_load(&stats.staged_bytes), "below_threshold",
                      (unsigned long long)atomic_load(&stats.small), "pinned",
                      (unsigned long long)atomic_load(&stats.pinned), "busy",
                      (unsigned long long)atomic_load(&stats.busy), "other",
                      (unsigned long long)atomic_load(&stats.other), "cold",
                      (unsigned long long)atomic_load(&stats.cold), "last_threads",
                      atomic_load(&stats.last_threads), "last_piece",
                      (unsigned long long)atomic_load(&stats.last_piece), "helper_threads",
                      atomic_load(&stats.helpers_alive), "helper_wakeups",
                      (unsigned long long)atomic_load(&stats.wakeups), "late_wakeups",
                      (unsigned long long)atomic_load(&stats.late_wakes), "prefault_bytes",
                      (unsigned long long)atomic_load(&stats.prefault_bytes));
    if (d != NULL && reset) {
        atomic_store(&stats.staged_htod, 0);
        atomic_store(&stats.staged_dtoh, 0);
        atomic_store(&stats.staged_bytes, 0);
        atomic_store(&stats.small, 0);
        atomic_store(&stats.pinned, 0);
        atomic_store(&stats.busy, 0);
        atomic_store(&stats.other, 0);
        atomic_store(&stats.cold, 0);
        atomic_store(&stats.last_threads, 0);
        atomic_store(&stats.last_piece, 0);
        atomic_store(&stats.wakeups, 0);
        atomic_store(&stats.late_wakes, 0);
        atomic_store(&stats.prefault_bytes, 0);
    }
    return d;
}

static PyMethodDef staging_methods[] = {
    {"_set_staging", (PyCFunction)(void (*)(void))set_staging, METH_VARARGS | METH_KEYWORDS,
     set_staging_doc},
    {"_get_staging", get_staging, METH_NOARGS, get_staging_doc},
    {"_set_staging_tuning", (PyCFunction)(void (*)(void))set_staging_tuning,
     METH_VARARGS | METH_KEYWORDS, set_staging_tuning_doc},
    {"_get_staging_tuning", get_staging_tuning, METH_NOARGS, get_staging_tuning_doc},
    {"_staging_applies", staging_applies, METH_O, staging_applies_doc},
    {"staging_stats", (PyCFunction)(void (*)(void))staging_stats, METH_VARARGS | METH_KEYWORDS,
     staging_stats_doc},
    {NULL},
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
    long pg = sysconf(_SC_PAGESIZE);
    if (pg > 0)
        page_size = pg;
    (void)pthread_atfork(NULL, NULL, atfork_child);
}

int
pygpu_staging_setup(PyObject *m, pygpu_state *st)
{
    pthread_once(&atfork_once, register_atfork);
    return PyModule_AddFunctions(m, staging_methods);
}
