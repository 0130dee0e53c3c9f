/* fakecuda: a CUDA driver stand-in for pygpu's tests.  A test tool only.
 *
 * Built as libfakecuda.so and loaded by pygpu through PYGPU_LIBCUDA.  It
 * provides every driver entry point pygpu resolves (src/cuda_api.h is the
 * list, so the two cannot drift apart), through cuGetProcAddress like the real
 * driver, backed by host memory:
 *   - allocations are malloc'd; copies and memsets are memcpy/memset, and the
 *     device side of each is checked to lie inside one live allocation;
 *   - PTX is parsed for its kernels (parameter offsets and sizes, .maxntid)
 *     and its .global/.const variables; cubins are refused;
 *   - a launch checks its configuration and copies each parameter's bytes
 *     from kernelParams into a record the tests read back; no kernel runs;
 *   - the JIT linker (cuLink*) checks each input (PTX is text, a cubin an ELF,
 *     a library an ar archive), resolves kernels declared .extern .entry and
 *     the device runtime's functions (a LIBRARY input), and links the PTX
 *     inputs into one PTX image, concatenated, which cuModuleLoadData loads;
 *   - graphs are host-side node lists; stream capture records the stream's
 *     operations as nodes instead of running them (a synchronous call while
 *     capturing fails with CUDA_ERROR_STREAM_CAPTURE_* and invalidates the
 *     capture); launching a GraphExec replays its copy of the graph: copies
 *     and memsets move bytes, kernel nodes are recorded like launches (and
 *     logged, fakecuda_replay_log), host nodes run, conditional nodes follow
 *     their handle's value (fakecuda_set_conditional);
 *   - streams and events complete at once;
 *   - contexts have per-thread stacks, primary contexts are reference counted.
 * Handles are never freed, only marked dead, so a handle used after its
 * destruction is detected (and counted) instead of being undefined behaviour.
 *
 * Fault injection: fakecuda_fail(name, nth, code) (or FAKECUDA_FAIL=name:nth:code
 * at cuInit) makes the nth next call of entry point `name` ("*": any entry
 * point) return `code`.  fakecuda_deinit(1) makes every call return
 * CUDA_ERROR_DEINITIALIZED, as a driver does while the process shuts down.
 *
 * Slow calls: fakecuda_delay(name, ms) makes every later call of `name`
 * sleep ms milliseconds, without the lock, where a real driver would be busy:
 * host<->device copies between checking their ranges and moving the bytes
 * (and a copy whose device memory was freed meanwhile counts as a stale
 * use), copies with a CUDA array side likewise (an array destroyed
 * meanwhile counts as a stale use and nothing moves), cuMemHostAlloc after
 * allocating, cuStreamSynchronize before it returns (the stream's work
 * draining).  A test thread sees the call begin
 * through fakecuda_calls(name).  fakecuda_delay("*", 0) clears all delays.
 *
 * Environment, read at cuInit: FAKECUDA_DEVICES (2), FAKECUDA_MEMORY (bytes a
 * device, 4 GiB), FAKECUDA_DRIVER_VERSION (13000), FAKECUDA_CC ("9.9": a
 * capability NVRTC builds no cubin for, so pygpu hands the stand-in PTX),
 * FAKECUDA_HIDE (comma-separated entry points cuGetProcAddress does not find),
 * FAKECUDA_FAIL; read at exit: FAKECUDA_TRACE_AT_EXIT (a file for the trace).
 */
#define _GNU_SOURCE
#include <cuda.h>
#include <cudaTypedefs.h>
#include <ctype.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cuda_api.h" /* links to src/: the list pygpu resolves */
#include "cuda_enums.h"

#define EXPORT __attribute__((visibility("default")))
#define MAXDEV 8
#define MAXPARAMS 512
#define STACK_DEPTH 64

/* ---- entry point indices ---- */
#define AS_INDEX(name, version, cls) F_##name,
enum { PYGPU_CUDA_API(AS_INDEX, AS_INDEX) F_COUNT };
#undef AS_INDEX
#define AS_NAME(name, version, cls) #name,
static const char *const fn_names[F_COUNT] = {PYGPU_CUDA_API(AS_NAME, AS_NAME)};
#undef AS_NAME

/* ---- objects ---- */
enum {
    MAGIC_CTX = 0x43545831,
    MAGIC_STREAM = 0x53545231,
    MAGIC_EVENT = 0x45564e31,
    MAGIC_MODULE = 0x4d4f4431,
    MAGIC_FUNC = 0x46554e31,
    MAGIC_LINK = 0x4c4e4b31
};

/* K_VMM: an accessible range of a cuMemMap mapping (the memory belongs to the
 * mapping); K_MAPPED: an mmap of a pool's memfd (pool allocations, imported
 * pointers), munmap'd when freed */
enum { K_DEVICE, K_MANAGED, K_ASYNC, K_HOST, K_REGISTERED, K_GLOBAL, K_VMM, K_MAPPED };

typedef struct fake_ctx {
    unsigned magic;
    int alive; /* 0 once destroyed (or an inactive primary) */
    int dev;
    int primary;
    int retains; /* primary: retain count */
    unsigned flags;
    size_t limits[CU_LIMIT_MAX];
    CUfunc_cache cache;
    int peer[MAXDEV];
    int green; /* converted from a green context: cuGreenCtxDestroy ends it */
} fake_ctx;

typedef struct fake_stream {
    unsigned magic;
    int alive;
    struct fake_stream *next_all;
    fake_ctx *ctx;
    unsigned flags;
    int priority;
    struct fake_graph *cap;     /* the graph being captured, or NULL */
    struct fake_node *cap_last; /* the capture's last node */
    int cap_mode, cap_invalid;
    pthread_t cap_thread; /* the thread that began the capture */
} fake_stream;

typedef struct fake_event {
    unsigned magic;
    int alive;
    struct fake_event *next_all;
    fake_ctx *ctx;
    unsigned flags;
    int recorded;
    double t;
} fake_event;

typedef struct fake_alloc {
    uintptr_t base;
    size_t size;
    int kind;
    unsigned flags;
    fake_ctx *ctx;
    struct fake_module *module; /* K_GLOBAL: owner */
    struct fake_pool *pool;     /* K_MAPPED: the pool (for export) */
    size_t pool_off;            /* K_MAPPED: offset in the pool's memfd */
    struct fake_alloc *next;
} fake_alloc;

typedef struct fake_func {
    unsigned magic;
    int alive;
    struct fake_module *module;
    char name[256];
    int nparams;
    size_t offset[MAXPARAMS];
    size_t size[MAXPARAMS];
    size_t param_bytes;
    int maxntid;
    int max_dynamic_shared;
    size_t static_shared; /* .shared declared in the body */
    CUfunc_cache cache;
    struct fake_func *next;
} fake_func;

typedef struct fake_global {
    char name[256];
    fake_alloc *mem;
    struct fake_global *next;
} fake_global;

typedef struct fake_module {
    unsigned magic;
    int alive;
    struct fake_module *next_all;
    fake_ctx *ctx;
    fake_func *funcs;
    fake_global *globals;
    size_t static_shared;
} fake_module;

/* ---- state (one lock guards all of it) ---- */
static pthread_mutex_t lock = PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP;
static int initialized;
static int ndev = 2;
static size_t dev_memory = (size_t)4 << 30;
static size_t dev_used[MAXDEV];
static int driver_version = 13000;
static int cc_major = 9, cc_minor = 9;
static char hidden[4096];
static fake_ctx *primary_ctx[MAXDEV];
static fake_alloc *allocs;
static struct fake_stream *all_streams; /* every stream, event, module ever made */
static struct fake_event *all_events;
static struct fake_module *all_modules;

static long calls_total;
static long calls_by_fn[F_COUNT];
static long delay_ms[F_COUNT];
static __thread int cur_fn = -1; /* the entry point this thread is in */
static int inject_fn = -2;       /* -2 none, -1 any */
static long inject_nth;
static CUresult inject_code;
static int inject_fired;
static int deinitialized;
static char *trace;
static size_t trace_len, trace_cap;
static int tracing;

static long live_ctx, live_streams, live_events, live_modules, live_host, live_registered,
    live_device, live_managed, stale_uses, launches, reaped;

static struct {
    char name[256];
    unsigned grid[3], block[3], shared;
    CUstream stream;
    unsigned char params[4096];
    size_t size;
    int cooperative, pdl;
    unsigned cluster[3];
} last_launch;

/* the parameter bytes of this thread's last launch (concurrent launch tests) */
static __thread struct {
    unsigned char params[4096];
    size_t size;
} thread_last;

static __thread fake_ctx *ctx_stack[STACK_DEPTH];
static __thread int ctx_depth;

static void read_env(void);
static struct fake_alloc *find_base(uintptr_t p);
/* graphs (defined with the graph entry points) */
struct fake_node;
static fake_stream *cap_stream(CUstream s);
static struct fake_node *cap_node(fake_stream *st, int type, CUresult *rc);
static CUresult cap_violation(fake_ctx *c, CUresult code);
static CUresult cap_unsafe(void);
/* the legacy default stream (which waits for every blocking stream) */
#define IS_LEGACY(s) ((s) == NULL || (s) == CU_STREAM_LEGACY)
static void cap_memcpy(struct fake_node *n, void *dst, const void *src, size_t len, int dd, int sd);
static void cap_memcpy_pitched(struct fake_node *n, unsigned char *dst, const unsigned char *src,
                               size_t width, size_t rows, size_t depth, size_t dpitch,
                               size_t spitch, size_t dslice, size_t sslice);
static void cap_memset(struct fake_node *n, CUdeviceptr d, unsigned v, size_t count,
                       unsigned width);
static CUresult cap_kernel(struct fake_node *n, struct fake_func *f, const unsigned grid[3],
                           const unsigned block[3], unsigned shared, void **params, void **extra);
static CUresult cap_alloc(struct fake_node *n, size_t bytes, CUdeviceptr *out);
static void cap_dptr(struct fake_node *n, CUdeviceptr d);
static void cap_event(struct fake_node *n, struct fake_event *e);
static void cap_end_on_destroy(fake_stream *s);

/* Every handle ever given out (they are never freed), so a handle from
 * nowhere is refused without being dereferenced.  Lock held. */
static uintptr_t *known_set;
static size_t known_cap, known_count;

static size_t
known_slot(uintptr_t p, size_t cap)
{
    return (size_t)((p >> 4) * 0x9E3779B97F4A7C15ull) & (cap - 1);
}

static void
remember(const void *h)
{
    uintptr_t p = (uintptr_t)h;
    size_t i;
    if (2 * (known_count + 1) > known_cap) {
        size_t cap = known_cap ? 2 * known_cap : 1024, j;
        uintptr_t *t = calloc(cap, sizeof *t);
        if (t == NULL)
            abort();
        for (j = 0; j < known_cap; j++) {
            if (known_set[j]) {
                size_t k = known_slot(known_set[j], cap);
                while (t[k])
                    k = (k + 1) & (cap - 1);
                t[k] = known_set[j];
            }
        }
        free(known_set);
        known_set = t;
        known_cap = cap;
    }
    for (i = known_slot(p, known_cap); known_set[i]; i = (i + 1) & (known_cap - 1))
        if (known_set[i] == p)
            return;
    known_set[i] = p;
    known_count++;
}

static int
known(const void *h)
{
    uintptr_t p = (uintptr_t)h;
    size_t i;
    if (known_cap == 0 || p == 0)
        return 0;
    for (i = known_slot(p, known_cap); known_set[i]; i = (i + 1) & (known_cap - 1))
        if (known_set[i] == p)
            return 1;
    return 0;
}

/* Sticky mode (fakecuda_fail_sticky, FAKECUDA_FAIL=name:nth:code:sticky):
 * once the injected failure fires, every later call returns its code, as a
 * real driver does after CUDA_ERROR_ILLEGAL_ADDRESS, except the calls that
 * a broken context still answers (lookups, the context stack).  Lock held. */
static int inject_sticky;
static CUresult sticky_code;

static int
sticky_exempt(int fn)
{
    static const char *const keep[] = {"cuInit",
                                       "cuDriverGetVersion",
                                       "cuGetErrorName",
                                       "cuGetErrorString",
                                       "cuGetProcAddress",
                                       "cuCtxGetCurrent",
                                       "cuCtxSetCurrent",
                                       "cuCtxPushCurrent",
                                       "cuCtxPopCurrent",
                                       "cuCtxGetDevice",
                                       NULL};
    const char *const *k;
    if (strncmp(fn_names[fn], "cuDeviceGet", 11) == 0)
        return 1;
    for (k = keep; *k; k++)
        if (strcmp(fn_names[fn], *k) == 0)
            return 1;
    return 0;
}

/* Called first by every entry point; returns nonzero to fail the call. */
static CUresult
enter(int fn)
{
    CUresult rc = CUDA_SUCCESS;
    pthread_mutex_lock(&lock);
    cur_fn = fn;
    calls_total++;
    calls_by_fn[fn]++;
    if (tracing) {
        size_t n = strlen(fn_names[fn]);
        if (trace_len + n + 2 > trace_cap) {
            size_t cap = trace_cap ? 2 * trace_cap : 65536;
            char *t;
            while (cap < trace_len + n + 2)
                cap *= 2;
            t = realloc(trace, cap);
            if (t != NULL) {
                trace = t;
                trace_cap = cap;
            }
        }
        if (trace_len + n + 2 <= trace_cap) {
            memcpy(trace + trace_len, fn_names[fn], n);
            trace_len += n;
            trace[trace_len++] = '\n';
            trace[trace_len] = '\0';
        }
    }
    if (deinitialized)
        rc = CUDA_ERROR_DEINITIALIZED;
    else if (!initialized && fn != F_cuInit && fn != F_cuDriverGetVersion)
        rc = CUDA_ERROR_NOT_INITIALIZED;
    else if (sticky_code != CUDA_SUCCESS && !sticky_exempt(fn))
        rc = sticky_code;
    else if (inject_fn != -2 && (inject_fn == -1 || inject_fn == fn) && --inject_nth == 0) {
        rc = inject_code;
        inject_fn = -2;
        inject_fired = 1;
        if (inject_sticky)
            sticky_code = rc;
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

static void
unlock(void)
{
    pthread_mutex_unlock(&lock);
}

/* Sleep as long as fakecuda_delay asked for the current entry point.
 * Lock not held. */
static void
pause_here(void)
{
    long ms;
    struct timespec ts;
    if (cur_fn < 0)
        return;
    pthread_mutex_lock(&lock);
    ms = delay_ms[cur_fn];
    unlock();
    if (ms <= 0)
        return;
    ts.tv_sec = ms / 1000;
    ts.tv_nsec = (ms % 1000) * 1000000L;
    while (nanosleep(&ts, &ts) != 0)
        ;
}

/* ---- helpers (lock held) ---- */
static fake_ctx *
current(void)
{
    return ctx_depth > 0 ? ctx_stack[ctx_depth - 1] : NULL;
}

/* The calling thread's context, checked: NULL with *rc set when unusable. */
static fake_ctx *
need_ctx(CUresult *rc)
{
    fake_ctx *c = current();
    if (c == NULL) {
        *rc = CUDA_ERROR_INVALID_CONTEXT;
        return NULL;
    }
    if (c->magic != MAGIC_CTX || !c->alive) {
        stale_uses++;
        *rc = c->primary ? CUDA_ERROR_INVALID_CONTEXT : CUDA_ERROR_CONTEXT_IS_DESTROYED;
        return NULL;
    }
    return c;
}

static int
ctx_ok(fake_ctx *c)
{
    if (!known(c) || c->magic != MAGIC_CTX)
        return 0;
    if (!c->alive) {
        stale_uses++;
        return 0;
    }
    return 1;
}

static CUresult
check_stream(CUstream s, fake_ctx *c)
{
    fake_stream *st = (fake_stream *)s;
    if (s == NULL || s == CU_STREAM_LEGACY || s == CU_STREAM_PER_THREAD)
        return CUDA_SUCCESS;
    if (!known(st) || st->magic != MAGIC_STREAM)
        return CUDA_ERROR_INVALID_HANDLE;
    if (!st->alive) {
        stale_uses++;
        return CUDA_ERROR_INVALID_HANDLE;
    }
    if (c != NULL && st->ctx != c)
        return CUDA_ERROR_INVALID_HANDLE;
    return CUDA_SUCCESS;
}

static fake_alloc *
find_alloc(uintptr_t p, size_t n)
{
    fake_alloc *a;
    for (a = allocs; a != NULL; a = a->next)
        if (p >= a->base && p - a->base <= a->size && n <= a->size - (p - a->base))
            return a;
    return NULL;
}

/* A device-side range [p, p+n) that must lie in one device-accessible
 * allocation (device, managed, async, module global, mapped pinned). */
static int
device_range_ok(CUdeviceptr p, size_t n)
{
    fake_alloc *a;
    if (n == 0)
        return 1;
    a = find_alloc((uintptr_t)p, n);
    if (a != NULL)
        return 1;
    /* a virtual buffer: accessible mappings back to back */
    a = find_alloc((uintptr_t)p, 1);
    while (a != NULL && a->kind == K_VMM) {
        uintptr_t end = a->base + a->size;
        if ((uintptr_t)p + n <= end)
            return 1;
        a = find_base(end);
    }
    return 0;
}

static fake_alloc *
add_alloc(void *base, size_t size, int kind, unsigned flags, fake_ctx *c)
{
    fake_alloc *a = calloc(1, sizeof *a);
    if (a == NULL)
        return NULL;
    a->base = (uintptr_t)base;
    a->size = size;
    a->kind = kind;
    a->flags = flags;
    a->ctx = c;
    a->next = allocs;
    allocs = a;
    switch (kind) {
    case K_DEVICE:
    case K_ASYNC:
    case K_MAPPED: live_device++; break;
    case K_MANAGED: live_managed++; break;
    case K_HOST: live_host++; break;
    case K_REGISTERED: live_registered++; break;
    default: break;
    }
    if (c != NULL && kind != K_HOST && kind != K_REGISTERED)
        dev_used[c->dev] += size;
    return a;
}

/* Unlink and free the record (and the memory, except registered memory). */
static void
drop_alloc(fake_alloc *target)
{
    fake_alloc **p;
    for (p = &allocs; *p != NULL; p = &(*p)->next) {
        if (*p == target) {
            *p = target->next;
            break;
        }
    }
    switch (target->kind) {
    case K_DEVICE:
    case K_ASYNC:
    case K_MAPPED: live_device--; break;
    case K_MANAGED: live_managed--; break;
    case K_HOST: live_host--; break;
    case K_REGISTERED: live_registered--; break;
    default: break;
    }
    if (target->ctx != NULL && target->kind != K_HOST && target->kind != K_REGISTERED)
        dev_used[target->ctx->dev] -= target->size;
    if (target->kind == K_MAPPED)
        munmap((void *)target->base, target->size);
    else if (target->kind != K_REGISTERED && target->kind != K_VMM)
        free((void *)target->base);
    free(target);
}

static fake_alloc *
find_base(uintptr_t p)
{
    fake_alloc *a;
    for (a = allocs; a != NULL; a = a->next)
        if (a->base == p)
            return a;
    return NULL;
}

static void *
fill_alloc(size_t n)
{
    /* never zero: code that forgets to initialise memory shows it */
    void *p = NULL;
    if (posix_memalign(&p, 512, n ? n : 1) != 0)
        return NULL;
    memset(p, 0xA5, n);
    return p;
}

static double
now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static void reap_context(fake_ctx *c);
static void reap_arrays(fake_ctx *c);

/* ---- initialization and errors ---- */
EXPORT CUresult
cuInit(unsigned int flags)
{
    CUresult rc;
    pthread_mutex_lock(&lock);
    if (!initialized)
        read_env();
    unlock();
    if ((rc = enter(F_cuInit)) != CUDA_SUCCESS)
        return rc;
    if (flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    initialized = 1;
    unlock();
    return CUDA_SUCCESS;
}

static int
lookup_fn(const char *name)
{
    int i;
    if (strcmp(name, "*") == 0)
        return -1;
    for (i = 0; i < F_COUNT; i++)
        if (strcmp(fn_names[i], name) == 0)
            return i;
    return -3;
}

static void
read_env(void)
{
    const char *s;
    static int done;
    if (done)
        return;
    done = 1;
    if ((s = getenv("FAKECUDA_DEVICES")) && *s) {
        ndev = atoi(s);
        if (ndev < 0)
            ndev = 0;
        if (ndev > MAXDEV)
            ndev = MAXDEV;
    }
    if ((s = getenv("FAKECUDA_MEMORY")) && *s)
        dev_memory = (size_t)strtoull(s, NULL, 0);
    if ((s = getenv("FAKECUDA_DRIVER_VERSION")) && *s)
        driver_version = atoi(s);
    if ((s = getenv("FAKECUDA_CC")) && *s)
        sscanf(s, "%d.%d", &cc_major, &cc_minor);
    if ((s = getenv("FAKECUDA_HIDE")) && *s)
        snprintf(hidden, sizeof hidden, ",%s,", s);
    if ((s = getenv("FAKECUDA_FAIL")) && *s) {
        char name[128];
        long nth;
        int code;
        inject_sticky = strstr(s, ":sticky") != NULL;
        if (sscanf(s, "%127[^:]:%ld:%d", name, &nth, &code) == 3) {
            inject_fn = lookup_fn(name);
            inject_nth = nth;
            inject_code = (CUresult)code;
            if (inject_fn == -3)
                inject_fn = -2;
        }
    }
}

static const char *
error_text(CUresult rc)
{
    switch (rc) {
    case CUDA_SUCCESS: return "no error";
    case CUDA_ERROR_INVALID_VALUE: return "invalid argument";
    case CUDA_ERROR_OUT_OF_MEMORY: return "out of memory";
    case CUDA_ERROR_NOT_INITIALIZED: return "initialization error";
    case CUDA_ERROR_DEINITIALIZED: return "driver shutting down";
    case CUDA_ERROR_NO_DEVICE: return "no CUDA-capable device is detected";
    case CUDA_ERROR_INVALID_DEVICE: return "invalid device ordinal";
    case CUDA_ERROR_INVALID_IMAGE: return "device kernel image is invalid";
    case CUDA_ERROR_INVALID_CONTEXT: return "invalid device context";
    case CUDA_ERROR_NO_BINARY_FOR_GPU:
        return "no kernel image is available for execution on the device";
    case CUDA_ERROR_INVALID_PTX: return "a PTX JIT compilation failed";
    case CUDA_ERROR_INVALID_HANDLE: return "invalid resource handle";
    case CUDA_ERROR_NOT_FOUND: return "named symbol not found";
    case CUDA_ERROR_NOT_READY: return "device not ready";
    case CUDA_ERROR_ILLEGAL_ADDRESS: return "an illegal memory access was encountered";
    case CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES: return "too many resources requested for launch";
    case CUDA_ERROR_LAUNCH_FAILED: return "unspecified launch failure";
    case CUDA_ERROR_CONTEXT_IS_DESTROYED: return "context is destroyed";
    case CUDA_ERROR_UNKNOWN: return "unknown error";
    default: return "(the pygpu driver stand-in has no text for this code)";
    }
}

EXPORT CUresult
cuGetErrorName(CUresult rc, const char **out)
{
    const pygpu_enum_entry *e;
    for (e = pygpu_enum_error_code; e->name != NULL; e++) {
        if (e->value == (long long)rc) {
            *out = e->name;
            return CUDA_SUCCESS;
        }
    }
    *out = NULL;
    return CUDA_ERROR_INVALID_VALUE;
}

EXPORT CUresult
cuGetErrorString(CUresult rc, const char **out)
{
    const char *name;
    if (cuGetErrorName(rc, &name) != CUDA_SUCCESS) {
        *out = NULL;
        return CUDA_ERROR_INVALID_VALUE;
    }
    *out = error_text(rc);
    return CUDA_SUCCESS;
}

static CUresult
fake_cuInit(unsigned int flags)
{
    return cuInit(flags);
}

static CUresult
fake_cuGetErrorName(CUresult rc, const char **out)
{
    return cuGetErrorName(rc, out);
}

static CUresult
fake_cuGetErrorString(CUresult rc, const char **out)
{
    return cuGetErrorString(rc, out);
}

static CUresult
fake_cuDriverGetVersion(int *v)
{
    CUresult rc = enter(F_cuDriverGetVersion);
    if (rc)
        return rc;
    if (v == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    *v = driver_version;
    return CUDA_SUCCESS;
}

/* ---- devices ---- */
static int
dev_ok(CUdevice d)
{
    return d >= 0 && d < ndev;
}

static CUresult
fake_cuDeviceGet(CUdevice *d, int ordinal)
{
    CUresult rc = enter(F_cuDeviceGet);
    if (rc)
        return rc;
    if (d == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    if (!dev_ok(ordinal))
        return CUDA_ERROR_INVALID_DEVICE;
    *d = ordinal;
    return CUDA_SUCCESS;
}

static CUresult
fake_cuDeviceGetCount(int *n)
{
    CUresult rc = enter(F_cuDeviceGetCount);
    if (rc)
        return rc;
    if (n == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    *n = ndev;
    return CUDA_SUCCESS;
}

static CUresult
fake_cuDeviceGetName(char *name, int len, CUdevice d)
{
    CUresult rc = enter(F_cuDeviceGetName);
    if (rc)
        return rc;
    if (name == NULL || len <= 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (!dev_ok(d))
        return CUDA_ERROR_INVALID_DEVICE;
    snprintf(name, (size_t)len, "pygpu driver stand-in %d", (int)d);
    return CUDA_SUCCESS;
}

static int
attribute(CUdevice_attribute a, CUdevice d)
{
    switch (a) {
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK: return 1024;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X: return 1024;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y: return 1024;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z: return 64;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X: return 2147483647;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y: return 65535;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z: return 65535;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK: return 49152;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN: return 232448;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR: return 233472;
    case CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY: return 65536;
    case CU_DEVICE_ATTRIBUTE_WARP_SIZE: return 32;
    case CU_DEVICE_ATTRIBUTE_MAX_PITCH: return 2147483647;
    case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK: return 65536;
    case CU_DEVICE_ATTRIBUTE_CLOCK_RATE: return 1980000;
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: return 132;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: return cc_major;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: return cc_minor;
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR: return 2048;
    case CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY: return 1;
    case CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING: return 1;
    case CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY: return 1;
    case CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS: return 1;
    case CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH: return 1;
    case CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED: return 1;
    case CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS: return 1;
    case CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT: return 2;
    case CU_DEVICE_ATTRIBUTE_PCI_BUS_ID: return 0x10 + (int)d;
    case CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID: return 0;
    case CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID: return 0;
    case CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE: return 52428800;
    case CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH: return 5120;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR: return 32;
    case CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH: return 1;
    case CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT: return 512;
    case CU_DEVICE_ATTRIBUTE_TEXTURE_PITCH_ALIGNMENT: return 32;
    default: return 0;
    }
}

static CUresult
fake_cuDeviceGetAttribute(int *pi, CUdevice_attribute a, CUdevice d)
{
    CUresult rc = enter(F_cuDeviceGetAttribute);
    if (rc)
        return rc;
    if (pi == NULL || (int)a <= 0 || a >= CU_DEVICE_ATTRIBUTE_MAX)
        return CUDA_ERROR_INVALID_VALUE;
    if (!dev_ok(d))
        return CUDA_ERROR_INVALID_DEVICE;
    *pi = attribute(a, d);
    return CUDA_SUCCESS;
}

static CUresult
fake_cuDeviceTotalMem(size_t *bytes, CUdevice d)
{
    CUresult rc = enter(F_cuDeviceTotalMem);
    if (rc)
        return rc;
    if (bytes == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    if (!dev_ok(d))
        return CUDA_ERROR_INVALID_DEVICE;
    *bytes = dev_memory;
    return CUDA_SUCCESS;
}

static CUresult
fake_cuDeviceGetPCIBusId(char *out, int len, CUdevice d)
{
    CUresult rc = enter(F_cuDeviceGetPCIBusId);
    if (rc)
        return rc;
    if (out == NULL || len <= 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (!dev_ok(d))
        return CUDA_ERROR_INVALID_DEVICE;
    snprintf(out, (size_t)len, "00000000:%02X:00.0", 0x10 + (int)d);
    return CUDA_SUCCESS;
}

static CUresult
fake_cuDeviceGetByPCIBusId(CUdevice *d, const char *bus)
{
    unsigned dom, b, dv, fn;
    CUresult rc = enter(F_cuDeviceGetByPCIBusId);
    if (rc)
        return rc;
    if (d == NULL || bus == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    if (sscanf(bus, "%x:%x:%x.%x", &dom, &b, &dv, &fn) != 4
        && (dom = 0, sscanf(bus, "%x:%x.%x", &b, &dv, &fn) != 3))
        return CUDA_ERROR_INVALID_VALUE;
    if (dom != 0 || dv != 0 || b < 0x10 || (int)(b - 0x10) >= ndev)
        return CUDA_ERROR_INVALID_DEVICE;
    *d = (CUdevice)(b - 0x10);
    return CUDA_SUCCESS;
}

static CUresult
fake_cuDeviceGetUuid(CUuuid *u, CUdevice d)
{
    int i;
    CUresult rc = enter(F_cuDeviceGetUuid);
    if (rc)
        return rc;
    if (u == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    if (!dev_ok(d))
        return CUDA_ERROR_INVALID_DEVICE;
    for (i = 0; i < 16; i++)
        u->bytes[i] = (char)(0x40 + i + 16 * d);
    return CUDA_SUCCESS;
}

static CUresult
fake_cuDeviceCanAccessPeer(int *can, CUdevice d, CUdevice peer)
{
    CUresult rc = enter(F_cuDeviceCanAccessPeer);
    if (rc)
        return rc;
    if (can == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    if (!dev_ok(d) || !dev_ok(peer))
        return CUDA_ERROR_INVALID_DEVICE;
    *can = d != peer;
    return CUDA_SUCCESS;
}

/* ---- contexts ---- */
static fake_ctx *
new_ctx(int dev, int primary, unsigned flags)
{
    fake_ctx *c = calloc(1, sizeof *c);
    if (c == NULL)
        return NULL;
    c->magic = MAGIC_CTX;
    c->alive = 1;
    remember(c);
    c->dev = dev;
    c->primary = primary;
    c->flags = flags;
    c->limits[CU_LIMIT_STACK_SIZE] = 1024;
    c->limits[CU_LIMIT_PRINTF_FIFO_SIZE] = 1 << 20;
    c->limits[CU_LIMIT_MALLOC_HEAP_SIZE] = 8 << 20;
    c->limits[CU_LIMIT_DEV_RUNTIME_SYNC_DEPTH] = 2;
    c->limits[CU_LIMIT_DEV_RUNTIME_PENDING_LAUNCH_COUNT] = 2048;
    c->limits[CU_LIMIT_MAX_L2_FETCH_GRANULARITY] = 64;
    c->cache = CU_FUNC_CACHE_PREFER_NONE;
    return c;
}

static CUresult
fake_cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice d)
{
    CUresult rc = enter(F_cuDevicePrimaryCtxRetain);
    fake_ctx *c;
    if (rc)
        return rc;
    if (pctx == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    if (!dev_ok(d))
        return CUDA_ERROR_INVALID_DEVICE;
    pthread_mutex_lock(&lock);
    c = primary_ctx[d];
    if (c == NULL) {
        c = primary_ctx[d] = new_ctx(d, 1, 0);
        if (c == NULL) {
            unlock();
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
        c->alive = 0;
    }
    if (c->retains++ == 0) {
        c->alive = 1;
        live_ctx++;
    }
    *pctx = (CUcontext)c;
    unlock();
    return CUDA_SUCCESS;
}

static CUresult
fake_cuDevicePrimaryCtxRelease(CUdevice d)
{
    CUresult rc = enter(F_cuDevicePrimaryCtxRelease);
    fake_ctx *c;
    if (rc)
        return rc;
    if (!dev_ok(d))
        return CUDA_ERROR_INVALID_DEVICE;
    pthread_mutex_lock(&lock);
    c = primary_ctx[d];
    if (c == NULL || c->retains == 0) {
        stale_uses++; /* released more often than retained */
        unlock();
        return CUDA_ERROR_INVALID_CONTEXT;
    }
    if (--c->retains == 0) {
        c->alive = 0;
        live_ctx--;
        reap_context(c);
    }
    unlock();
    return CUDA_SUCCESS;
}

static CUresult
push(fake_ctx *c)
{
    if (ctx_depth >= STACK_DEPTH)
        return CUDA_ERROR_INVALID_VALUE;
    ctx_stack[ctx_depth++] = c;
    return CUDA_SUCCESS;
}

static CUresult
fake_cuCtxCreate(CUcontext *pctx, unsigned int flags, CUdevice d)
{
    CUresult rc = enter(F_cuCtxCreate);
    fake_ctx *c;
    if (rc)
        return rc;
    if (pctx == NULL || (flags & ~0x3fu) != 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (!dev_ok(d))
        return CUDA_ERROR_INVALID_DEVICE;
    pthread_mutex_lock(&lock);
    c = new_ctx(d, 0, flags);
    if (c == NULL || (rc = push(c)) != CUDA_SUCCESS) {
        free(c);
        unlock();
        return rc ? rc : CUDA_ERROR_OUT_OF_MEMORY;
    }
    live_ctx++;
    *pctx = (CUcontext)c;
    unlock();
    return CUDA_SUCCESS;
}

static CUresult
fake_cuCtxDestroy(CUcontext h)
{
    CUresult rc = enter(F_cuCtxDestroy);
    fake_ctx *c = (fake_ctx *)h;
    int i;
    if (rc)
        return rc;
    pthread_mutex_lock(&lock);
    if (!ctx_ok(c)) {
        unlock();
        return CUDA_ERROR_INVALID_CONTEXT;
    }
    if (c->primary || c->green) { /* released, or ended with its green context */
        unlock();
        return CUDA_ERROR_INVALID_CONTEXT;
    }
    c->alive = 0;
    live_ctx--;
    reap_context(c);
    for (i = ctx_depth - 1; i >= 0; i--) {
        if (ctx_stack[i] == c) {
            if (i == ctx_depth - 1)
                ctx_depth--;
            break;
        }
    }
    unlock();
    return CUDA_SUCCESS;
}

static CUresult
fake_cuCtxPushCurrent(CUcontext h)
{
    CUresult rc = enter(F_cuCtxPushCurrent);
    if (rc)
        return rc;
    pthread_mutex_lock(&lock);
    if (!ctx_ok((fake_ctx *)h)) {
        unlock();
        return CUDA_ERROR_INVALID_CONTEXT;
    }
    rc = push((fake_ctx *)h);
    unlock();
    return rc;
}

static CUresult
fake_cuCtxPopCurrent(CUcontext *pctx)
{
    CUresult rc = enter(F_cuCtxPopCurrent);
    if (rc)
        return rc;
    if (ctx_depth == 0)
        return CUDA_ERROR_INVALID_CONTEXT;
    ctx_depth--;
    if (pctx != NULL)
        *pctx = (CUcontext)ctx_stack[ctx_depth];
    return CUDA_SUCCESS;
}

static CUresult
fake_cuCtxGetCurrent(CUcontext *pctx)
{
    CUresult rc = enter(F_cuCtxGetCurrent);
    if (rc)
        return rc;
    if (pctx == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    *pctx = (CUcontext)current();
    return CUDA_SUCCESS;
}

static CUresult
fake_cuCtxSetCurrent(CUcontext h)
{
    CUresult rc = enter(F_cuCtxSetCurrent);
    if (rc)
        return rc;
    if (h == NULL) {
        if (ctx_depth > 0)
            ctx_depth--;
        return CUDA_SUCCESS;
    }
    pthread_mutex_lock(&lock);
    if (!ctx_ok((fake_ctx *)h)) {
        unlock();
        return CUDA_ERROR_INVALID_CONTEXT;
    }
    if (ctx_depth == 0)
        rc = push((fake_ctx *)h);
    else
        ctx_stack[ctx_depth - 1] = (fake_ctx *)h;
    unlock();
    return rc;
}

static CUresult
fake_cuCtxGetDevice(CUdevice *d)
{
    CUresult rc = enter(F_cuCtxGetDevice);
    fake_ctx *c;
    if (rc)
        return rc;
    if (d == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    c = need_ctx(&rc);
    if (c)
        *d = c->dev;
    unlock();
    return rc;
}

static CUresult
fake_cuCtxSynchronize(void)
{
    CUresult rc = enter(F_cuCtxSynchronize);
    fake_ctx *c;
    if (rc)
        return rc;
    pthread_mutex_lock(&lock);
    if ((c = need_ctx(&rc)) != NULL)
        rc = cap_violation(c, CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    unlock();
    return rc;
}

static CUresult
fake_cuCtxSetLimit(CUlimit limit, size_t value)
{
    CUresult rc = enter(F_cuCtxSetLimit);
    fake_ctx *c;
    if (rc)
        return rc;
    if ((int)limit < 0 || limit >= CU_LIMIT_SHMEM_SIZE)
        return CUDA_ERROR_UNSUPPORTED_LIMIT;
    pthread_mutex_lock(&lock);
    c = need_ctx(&rc);
    if (c)
        c->limits[limit] = value;
    unlock();
    return rc;
}

static CUresult
fake_cuCtxGetLimit(size_t *v, CUlimit limit)
{
    CUresult rc = enter(F_cuCtxGetLimit);
    fake_ctx *c;
    if (rc)
        return rc;
    if (v == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    if ((int)limit < 0 || limit >= CU_LIMIT_MAX)
        return CUDA_ERROR_UNSUPPORTED_LIMIT;
    pthread_mutex_lock(&lock);
    c = need_ctx(&rc);
    if (c)
        *v = c->limits[limit];
    unlock();
    return rc;
}

static CUresult
fake_cuCtxSetCacheConfig(CUfunc_cache config)
{
    CUresult rc = enter(F_cuCtxSetCacheConfig);
    fake_ctx *c;
    if (rc)
        return rc;
    if ((int)config < 0 || config > CU_FUNC_CACHE_PREFER_EQUAL)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    c = need_ctx(&rc);
    if (c)
        c->cache = config;
    unlock();
    return rc;
}

static CUresult
fake_cuCtxGetCacheConfig(CUfunc_cache *config)
{
    CUresult rc = enter(F_cuCtxGetCacheConfig);
    fake_ctx *c;
    if (rc)
        return rc;
    if (config == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    c = need_ctx(&rc);
    if (c)
        *config = c->cache;
    unlock();
    return rc;
}

static CUresult
fake_cuCtxEnablePeerAccess(CUcontext peer, unsigned int flags)
{
    CUresult rc = enter(F_cuCtxEnablePeerAccess);
    fake_ctx *c, *p = (fake_ctx *)peer;
    if (rc)
        return rc;
    if (flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    c = need_ctx(&rc);
    if (c != NULL) {
        if (!ctx_ok(p))
            rc = CUDA_ERROR_INVALID_CONTEXT;
        else if (p->dev == c->dev)
            rc = CUDA_ERROR_INVALID_DEVICE;
        else if (c->peer[p->dev])
            rc = CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED;
        else
            c->peer[p->dev] = 1;
    }
    unlock();
    return rc;
}

static CUresult
fake_cuCtxDisablePeerAccess(CUcontext peer)
{
    CUresult rc = enter(F_cuCtxDisablePeerAccess);
    fake_ctx *c, *p = (fake_ctx *)peer;
    if (rc)
        return rc;
    pthread_mutex_lock(&lock);
    c = need_ctx(&rc);
    if (c != NULL) {
        if (!ctx_ok(p))
            rc = CUDA_ERROR_INVALID_CONTEXT;
        else if (!c->peer[p->dev])
            rc = CUDA_ERROR_PEER_ACCESS_NOT_ENABLED;
        else
            c->peer[p->dev] = 0;
    }
    unlock();
    return rc;
}

/* ---- memory ---- */
static CUresult
device_alloc(CUdeviceptr *dptr, size_t n, int kind, unsigned flags)
{
    CUresult rc = CUDA_SUCCESS;
    fake_ctx *c;
    void *p;
    if (dptr == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    c = need_ctx(&rc);
    if (c == NULL)
        goto done;
    if (n == 0) {
        rc = CUDA_ERROR_INVALID_VALUE;
        goto done;
    }
    if (n > dev_memory - dev_used[c->dev]) {
        rc = CUDA_ERROR_OUT_OF_MEMORY;
        goto done;
    }
    if ((p = fill_alloc(n)) == NULL) {
        rc = CUDA_ERROR_OUT_OF_MEMORY;
        goto done;
    }
    if (add_alloc(p, n, kind, flags, c) == NULL) {
        free(p);
        rc = CUDA_ERROR_OUT_OF_MEMORY;
        goto done;
    }
    *dptr = (CUdeviceptr)(uintptr_t)p;
done:
    unlock();
    return rc;
}

static CUresult
fake_cuMemAlloc(CUdeviceptr *dptr, size_t n)
{
    CUresult rc = enter(F_cuMemAlloc);
    if (rc)
        return rc;
    if ((rc = cap_unsafe()) != CUDA_SUCCESS)
        return rc;
    return device_alloc(dptr, n, K_DEVICE, 0);
}

static CUresult
fake_cuMemAllocPitch(CUdeviceptr *dptr, size_t *pitch, size_t width, size_t height,
                     unsigned int elem)
{
    CUresult rc = enter(F_cuMemAllocPitch);
    size_t p;
    if (rc)
        return rc;
    if ((rc = cap_unsafe()) != CUDA_SUCCESS)
        return rc;
    if (pitch == NULL || (elem != 4 && elem != 8 && elem != 16) || width == 0 || height == 0)
        return CUDA_ERROR_INVALID_VALUE;
    p = (width + 511) / 512 * 512;
    if (height > ((size_t)-1) / p)
        return CUDA_ERROR_OUT_OF_MEMORY;
    rc = device_alloc(dptr, p * height, K_DEVICE, 0);
    if (rc == CUDA_SUCCESS)
        *pitch = p;
    return rc;
}

static CUresult
free_kind(CUdeviceptr d, int host_side)
{
    fake_alloc *a;
    CUresult rc = CUDA_SUCCESS;
    pthread_mutex_lock(&lock);
    a = find_base((uintptr_t)d);
    if (a == NULL || (host_side && a->kind != K_HOST)
        || (!host_side && a->kind != K_DEVICE && a->kind != K_MANAGED && a->kind != K_ASYNC
            && a->kind != K_MAPPED)) {
        stale_uses++; /* freeing what is not (or no longer) allocated */
        rc = CUDA_ERROR_INVALID_VALUE;
    } else {
        drop_alloc(a);
    }
    unlock();
    return rc;
}

static CUresult
fake_cuMemFree(CUdeviceptr d)
{
    CUresult rc = enter(F_cuMemFree);
    if (rc)
        return rc;
    if ((rc = cap_unsafe()) != CUDA_SUCCESS)
        return rc;
    if (d == 0)
        return CUDA_SUCCESS;
    return free_kind(d, 0);
}

static CUresult
fake_cuMemGetInfo(size_t *freeb, size_t *total)
{
    CUresult rc = enter(F_cuMemGetInfo);
    fake_ctx *c;
    if (rc)
        return rc;
    if (freeb == NULL || total == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    c = need_ctx(&rc);
    if (c) {
        *total = dev_memory;
        *freeb = dev_memory - dev_used[c->dev];
    }
    unlock();
    return rc;
}

static CUresult
fake_cuMemHostAlloc(void **pp, size_t n, unsigned int flags)
{
    CUresult rc = enter(F_cuMemHostAlloc);
    void *p;
    if (rc)
        return rc;
    if (pp == NULL || (flags & ~0x7u) != 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (n == 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (n > dev_memory)
        return CUDA_ERROR_OUT_OF_MEMORY;
    pthread_mutex_lock(&lock);
    if (need_ctx(&rc) == NULL)
        goto done;
    if ((p = fill_alloc(n)) == NULL) {
        rc = CUDA_ERROR_OUT_OF_MEMORY;
        goto done;
    }
    if (add_alloc(p, n, K_HOST, flags, current()) == NULL) {
        free(p);
        rc = CUDA_ERROR_OUT_OF_MEMORY;
        goto done;
    }
    *pp = p;
    unlock();
    pause_here();
    return rc;
done:
    unlock();
    return rc;
}

static CUresult
fake_cuMemFreeHost(void *p)
{
    CUresult rc = enter(F_cuMemFreeHost);
    if (rc)
        return rc;
    return free_kind((CUdeviceptr)(uintptr_t)p, 1);
}

static CUresult
fake_cuMemHostGetDevicePointer(CUdeviceptr *out, void *p, unsigned int flags)
{
    CUresult rc = enter(F_cuMemHostGetDevicePointer);
    fake_alloc *a;
    if (rc)
        return rc;
    if (out == NULL || flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    a = find_alloc((uintptr_t)p, 1);
    if (a == NULL || (a->kind != K_HOST && a->kind != K_REGISTERED))
        rc = CUDA_ERROR_INVALID_VALUE;
    else if (!(a->flags
               & (a->kind == K_HOST ? CU_MEMHOSTALLOC_DEVICEMAP : CU_MEMHOSTREGISTER_DEVICEMAP)))
        rc = CUDA_ERROR_INVALID_VALUE;
    else
        *out = (CUdeviceptr)(uintptr_t)p;
    unlock();
    return rc;
}

static CUresult
fake_cuMemHostRegister(void *p, size_t n, unsigned int flags)
{
    CUresult rc = enter(F_cuMemHostRegister);
    fake_alloc *a;
    if (rc)
        return rc;
    if (p == NULL || n == 0 || (flags & ~0xfu) != 0)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    if (need_ctx(&rc) == NULL)
        goto done;
    for (a = allocs; a != NULL; a = a->next) {
        if (a->kind == K_REGISTERED && (uintptr_t)p < a->base + a->size
            && a->base < (uintptr_t)p + n) {
            rc = CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
            goto done;
        }
    }
    if (add_alloc(p, n, K_REGISTERED, flags, current()) == NULL)
        rc = CUDA_ERROR_OUT_OF_MEMORY;
done:
    unlock();
    return rc;
}

static CUresult
fake_cuMemHostUnregister(void *p)
{
    CUresult rc = enter(F_cuMemHostUnregister);
    fake_alloc *a;
    if (rc)
        return rc;
    pthread_mutex_lock(&lock);
    a = find_base((uintptr_t)p);
    if (a == NULL || a->kind != K_REGISTERED) {
        stale_uses++;
        rc = CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
    } else {
        drop_alloc(a);
    }
    unlock();
    return rc;
}

static CUresult
fake_cuMemAllocManaged(CUdeviceptr *dptr, size_t n, unsigned int flags)
{
    CUresult rc = enter(F_cuMemAllocManaged);
    if (rc)
        return rc;
    if ((rc = cap_unsafe()) != CUDA_SUCCESS)
        return rc;
    if (flags != CU_MEM_ATTACH_GLOBAL && flags != CU_MEM_ATTACH_HOST)
        return CUDA_ERROR_INVALID_VALUE;
    return device_alloc(dptr, n, K_MANAGED, flags);
}

static CUresult
copy(void *dst, const void *src, size_t n, int dst_dev, int src_dev, CUstream s, int check_s)
{
    CUresult rc = CUDA_SUCCESS;
    fake_ctx *c;
    pthread_mutex_lock(&lock);
    c = need_ctx(&rc);
    if (c == NULL)
        goto done;
    if (check_s && (rc = check_stream(s, c)) != CUDA_SUCCESS)
        goto done;
    if ((dst_dev && !device_range_ok((CUdeviceptr)(uintptr_t)dst, n))
        || (src_dev && !device_range_ok((CUdeviceptr)(uintptr_t)src, n))) {
        rc = CUDA_ERROR_INVALID_VALUE;
        goto done;
    }
    if ((!dst_dev && dst == NULL && n) || (!src_dev && src == NULL && n)) {
        rc = CUDA_ERROR_INVALID_VALUE;
        goto done;
    }
    if (check_s && cap_stream(s) != NULL) { /* captured: a node, nothing moves */
        struct fake_node *node = cap_node(cap_stream(s), CU_GRAPH_NODE_TYPE_MEMCPY, &rc);
        if (node != NULL)
            cap_memcpy(node, dst, src, n, dst_dev, src_dev);
        goto done;
    }
    if ((!check_s || IS_LEGACY(s))
        && (rc = cap_violation(c, CUDA_ERROR_STREAM_CAPTURE_IMPLICIT)) != CUDA_SUCCESS)
        goto done;
    unlock();
    pause_here();
    if (n)
        memmove(dst, src, n);
    pthread_mutex_lock(&lock);
    /* memory freed while the bytes moved: a use after free */
    if ((dst_dev && !device_range_ok((CUdeviceptr)(uintptr_t)dst, n))
        || (src_dev && !device_range_ok((CUdeviceptr)(uintptr_t)src, n)))
        stale_uses++;
    unlock();
    return CUDA_SUCCESS;
done:
    unlock();
    return rc;
}

#define DPTR(d) ((void *)(uintptr_t)(d))

static CUresult
fake_cuMemcpyHtoD(CUdeviceptr d, const void *h, size_t n)
{
    CUresult rc = enter(F_cuMemcpyHtoD);
    if (rc)
        return rc;
    return copy(DPTR(d), h, n, 1, 0, NULL, 0);
}

static CUresult
fake_cuMemcpyDtoH(void *h, CUdeviceptr d, size_t n)
{
    CUresult rc = enter(F_cuMemcpyDtoH);
    if (rc)
        return rc;
    return copy(h, DPTR(d), n, 0, 1, NULL, 0);
}

static CUresult
fake_cuMemcpyDtoD(CUdeviceptr d, CUdeviceptr s, size_t n)
{
    CUresult rc = enter(F_cuMemcpyDtoD);
    if (rc)
        return rc;
    return copy(DPTR(d), DPTR(s), n, 1, 1, NULL, 0);
}

static CUresult
fake_cuMemcpyHtoDAsync(CUdeviceptr d, const void *h, size_t n, CUstream s)
{
    CUresult rc = enter(F_cuMemcpyHtoDAsync);
    if (rc)
        return rc;
    return copy(DPTR(d), h, n, 1, 0, s, 1);
}

static CUresult
fake_cuMemcpyDtoHAsync(void *h, CUdeviceptr d, size_t n, CUstream s)
{
    CUresult rc = enter(F_cuMemcpyDtoHAsync);
    if (rc)
        return rc;
    return copy(h, DPTR(d), n, 0, 1, s, 1);
}

static CUresult
fake_cuMemcpyDtoDAsync(CUdeviceptr d, CUdeviceptr s, size_t n, CUstream st)
{
    CUresult rc = enter(F_cuMemcpyDtoDAsync);
    if (rc)
        return rc;
    return copy(DPTR(d), DPTR(s), n, 1, 1, st, 1);
}

static CUresult
peer_copy(CUdeviceptr d, CUcontext dc, CUdeviceptr s, CUcontext sc, size_t n, CUstream st,
          int check_s)
{
    int ok;
    pthread_mutex_lock(&lock);
    ok = ctx_ok((fake_ctx *)dc) && ctx_ok((fake_ctx *)sc);
    unlock();
    if (!ok)
        return CUDA_ERROR_INVALID_CONTEXT;
    return copy(DPTR(d), DPTR(s), n, 1, 1, st, check_s);
}

static CUresult
fake_cuMemcpyPeer(CUdeviceptr d, CUcontext dc, CUdeviceptr s, CUcontext sc, size_t n)
{
    CUresult rc = enter(F_cuMemcpyPeer);
    if (rc)
        return rc;
    return peer_copy(d, dc, s, sc, n, NULL, 0);
}

static CUresult
fake_cuMemcpyPeerAsync(CUdeviceptr d, CUcontext dc, CUdeviceptr s, CUcontext sc, size_t n,
                       CUstream st)
{
    CUresult rc = enter(F_cuMemcpyPeerAsync);
    if (rc)
        return rc;
    return peer_copy(d, dc, s, sc, n, st, 1);
}

static CUresult
side(CUmemorytype t, const void *host, CUdeviceptr dev, size_t x, size_t y, size_t pitch, size_t w,
     size_t h, unsigned char **out)
{
    uintptr_t base;
    if (t == CU_MEMORYTYPE_HOST)
        base = (uintptr_t)host;
    else if (t == CU_MEMORYTYPE_DEVICE || t == CU_MEMORYTYPE_UNIFIED)
        base = (uintptr_t)dev;
    else
        return CUDA_ERROR_INVALID_VALUE; /* arrays: not in the stand-in */
    if (base == 0 || (h > 1 && pitch < x + w))
        return CUDA_ERROR_INVALID_VALUE;
    if (h > 0 && w > 0 && t != CU_MEMORYTYPE_HOST) {
        size_t span = (h - 1) * pitch + x + w;
        if (!device_range_ok((CUdeviceptr)(base + y * pitch), span))
            return CUDA_ERROR_INVALID_VALUE;
    }
    *out = (unsigned char *)(base + y * pitch + x);
    return CUDA_SUCCESS;
}

static CUresult
copy2d(const CUDA_MEMCPY2D *p, CUstream s, int check_s)
{
    CUresult rc = CUDA_SUCCESS;
    unsigned char *src, *dst;
    size_t r;
    fake_ctx *c;
    if (p == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    c = need_ctx(&rc);
    if (c != NULL && check_s)
        rc = check_stream(s, c);
    if (rc == CUDA_SUCCESS)
        rc = side(p->srcMemoryType, p->srcHost, p->srcDevice, p->srcXInBytes, p->srcY, p->srcPitch,
                  p->WidthInBytes, p->Height, &src);
    if (rc == CUDA_SUCCESS)
        rc = side(p->dstMemoryType, p->dstHost, p->dstDevice, p->dstXInBytes, p->dstY, p->dstPitch,
                  p->WidthInBytes, p->Height, &dst);
    if (rc == CUDA_SUCCESS && check_s && cap_stream(s) != NULL) { /* captured: a node */
        struct fake_node *node = cap_node(cap_stream(s), CU_GRAPH_NODE_TYPE_MEMCPY, &rc);
        if (node != NULL)
            cap_memcpy_pitched(node, dst, src, p->WidthInBytes, p->Height, 1, p->dstPitch,
                               p->srcPitch, 0, 0);
        unlock();
        return rc;
    }
    /* on the legacy stream: it waits for a blocking capturing stream */
    if (rc == CUDA_SUCCESS && (!check_s || IS_LEGACY(s)))
        rc = cap_violation(c, CUDA_ERROR_STREAM_CAPTURE_IMPLICIT);
    unlock();
    if (rc != CUDA_SUCCESS)
        return rc;
    for (r = 0; r < p->Height; r++)
        memmove(dst + r * p->dstPitch, src + r * p->srcPitch, p->WidthInBytes);
    return CUDA_SUCCESS;
}

static CUresult
fake_cuMemcpy2D(const CUDA_MEMCPY2D *p)
{
    CUresult rc = enter(F_cuMemcpy2D);
    if (rc)
        return rc;
    return copy2d(p, NULL, 0);
}

static CUresult
fake_cuMemcpy2DAsync(const CUDA_MEMCPY2D *p, CUstream s)
{
    CUresult rc = enter(F_cuMemcpy2DAsync);
    if (rc)
        return rc;
    return copy2d(p, s, 1);
}

static CUresult
memset_n(CUdeviceptr d, unsigned value, size_t n, size_t width, CUstream s, int check_s)
{
    CUresult rc = CUDA_SUCCESS;
    fake_ctx *c;
    size_t i;
    pthread_mutex_lock(&lock);
    c = need_ctx(&rc);
    if (c != NULL && check_s)
        rc = check_stream(s, c);
    if (rc == CUDA_SUCCESS
        && ((uintptr_t)d % width != 0 || n > ((size_t)-1) / width
            || !device_range_ok(d, n * width)))
        rc = CUDA_ERROR_INVALID_VALUE;
    if (rc == CUDA_SUCCESS && check_s && cap_stream(s) != NULL) {
        struct fake_node *node = cap_node(cap_stream(s), CU_GRAPH_NODE_TYPE_MEMSET, &rc);
        if (node != NULL)
            cap_memset(node, d, value, n, (unsigned)width);
        unlock();
        return rc;
    }
    if (rc == CUDA_SUCCESS && (!check_s || IS_LEGACY(s)))
        rc = cap_violation(c, CUDA_ERROR_STREAM_CAPTURE_IMPLICIT);
    unlock();
    if (rc != CUDA_SUCCESS)
        return rc;
    for (i = 0; i < n; i++) {
        unsigned char *p = (unsigned char *)(uintptr_t)d + i * width;
        if (width == 1)
            *p = (unsigned char)value;
        else if (width == 2) {
            unsigned short v = (unsigned short)value;
            memcpy(p, &v, 2);
        } else
            memcpy(p, &value, 4);
    }
    return CUDA_SUCCESS;
}

static CUresult
fake_cuMemsetD8(CUdeviceptr d, unsigned char v, size_t n)
{
    CUresult rc = enter(F_cuMemsetD8);
    if (rc)
        return rc;
    return memset_n(d, v, n, 1, NULL, 0);
}

static CUresult
fake_cuMemsetD16(CUdeviceptr d, unsigned short v, size_t n)
{
    CUresult rc = enter(F_cuMemsetD16);
    if (rc)
        return rc;
    return memset_n(d, v, n, 2, NULL, 0);
}

static CUresult
fake_cuMemsetD32(CUdeviceptr d, unsigned int v, size_t n)
{
    CUresult rc = enter(F_cuMemsetD32);
    if (rc)
        return rc;
    return memset_n(d, v, n, 4, NULL, 0);
}

static CUresult
fake_cuMemsetD8Async(CUdeviceptr d, unsigned char v, size_t n, CUstream s)
{
    CUresult rc = enter(F_cuMemsetD8Async);
    if (rc)
        return rc;
    return memset_n(d, v, n, 1, s, 1);
}

static CUresult
fake_cuMemsetD16Async(CUdeviceptr d, unsigned short v, size_t n, CUstream s)
{
    CUresult rc = enter(F_cuMemsetD16Async);
    if (rc)
        return rc;
    return memset_n(d, v, n, 2, s, 1);
}

static CUresult
fake_cuMemsetD32Async(CUdeviceptr d, unsigned int v, size_t n, CUstream s)
{
    CUresult rc = enter(F_cuMemsetD32Async);
    if (rc)
        return rc;
    return memset_n(d, v, n, 4, s, 1);
}

/* cuMemsetD2D*: each of the h rows, pitch bytes apart, is one memset_n
 * (its range checked inside one allocation; a capture records one memset
 * node a row). */
static CUresult
memset_2d(CUdeviceptr d, size_t pitch, unsigned value, size_t w, size_t h, size_t width, CUstream s,
          int check_s)
{
    CUresult rc = CUDA_SUCCESS;
    size_t r;
    if (h > 1 && pitch < w * width)
        return CUDA_ERROR_INVALID_VALUE;
    for (r = 0; r < h && rc == CUDA_SUCCESS; r++)
        rc = memset_n(d + r * pitch, value, w, width, s, check_s);
    return rc;
}

static CUresult
fake_cuMemsetD2D8(CUdeviceptr d, size_t p, unsigned char v, size_t w, size_t h)
{
    CUresult rc = enter(F_cuMemsetD2D8);
    if (rc)
        return rc;
    return memset_2d(d, p, v, w, h, 1, NULL, 0);
}

static CUresult
fake_cuMemsetD2D16(CUdeviceptr d, size_t p, unsigned short v, size_t w, size_t h)
{
    CUresult rc = enter(F_cuMemsetD2D16);
    if (rc)
        return rc;
    return memset_2d(d, p, v, w, h, 2, NULL, 0);
}

static CUresult
fake_cuMemsetD2D32(CUdeviceptr d, size_t p, unsigned int v, size_t w, size_t h)
{
    CUresult rc = enter(F_cuMemsetD2D32);
    if (rc)
        return rc;
    return memset_2d(d, p, v, w, h, 4, NULL, 0);
}

static CUresult
fake_cuMemsetD2D8Async(CUdeviceptr d, size_t p, unsigned char v, size_t w, size_t h, CUstream s)
{
    CUresult rc = enter(F_cuMemsetD2D8Async);
    if (rc)
        return rc;
    return memset_2d(d, p, v, w, h, 1, s, 1);
}

static CUresult
fake_cuMemsetD2D16Async(CUdeviceptr d, size_t p, unsigned short v, size_t w, size_t h, CUstream s)
{
    CUresult rc = enter(F_cuMemsetD2D16Async);
    if (rc)
        return rc;
    return memset_2d(d, p, v, w, h, 2, s, 1);
}

static CUresult
fake_cuMemsetD2D32Async(CUdeviceptr d, size_t p, unsigned int v, size_t w, size_t h, CUstream s)
{
    CUresult rc = enter(F_cuMemsetD2D32Async);
    if (rc)
        return rc;
    return memset_2d(d, p, v, w, h, 4, s, 1);
}

static CUresult
fake_cuPointerGetAttribute(void *data, CUpointer_attribute attr, CUdeviceptr p)
{
    CUresult rc = enter(F_cuPointerGetAttribute);
    fake_alloc *a;
    if (rc)
        return rc;
    if (data == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    a = find_alloc((uintptr_t)p, 1);
    if (a == NULL) {
        unlock();
        return CUDA_ERROR_INVALID_VALUE;
    }
    switch (attr) {
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
        *(unsigned int *)data = (a->kind == K_HOST || a->kind == K_REGISTERED)
                                    ? CU_MEMORYTYPE_HOST
                                    : CU_MEMORYTYPE_DEVICE;
        break;
    case CU_POINTER_ATTRIBUTE_IS_MANAGED: *(unsigned int *)data = a->kind == K_MANAGED; break;
    case CU_POINTER_ATTRIBUTE_DEVICE_POINTER:
    case CU_POINTER_ATTRIBUTE_HOST_POINTER: *(uintptr_t *)data = (uintptr_t)p; break;
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR: *(uintptr_t *)data = a->base; break;
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE: *(size_t *)data = a->size; break;
    default: rc = CUDA_ERROR_INVALID_VALUE;
    }
    unlock();
    return rc;
}

/* cuMemAllocAsync/cuMemFreeAsync on a stream s that does not capture,
 * called with the lock held and rc from check_stream(); unlocks.  As an H100
 * with driver 580 rules it: on the legacy stream, implicit (a blocking stream
 * captures); on a stream that does not capture, an unsafe call (GLOBAL
 * capture). */
static CUresult
async_outside_capture(CUresult rc, CUstream s)
{
    if (rc == CUDA_SUCCESS && IS_LEGACY(s))
        rc = cap_violation(current(), CUDA_ERROR_STREAM_CAPTURE_IMPLICIT);
    unlock();
    if (rc)
        return rc;
    return cap_unsafe();
}

static CUresult
fake_cuMemAllocAsync(CUdeviceptr *dptr, size_t n, CUstream s)
{
    CUresult rc = enter(F_cuMemAllocAsync);
    if (rc)
        return rc;
    pthread_mutex_lock(&lock);
    rc = check_stream(s, current());
    if (rc == CUDA_SUCCESS && dptr != NULL && cap_stream(s) != NULL) {
        struct fake_node *node = cap_node(cap_stream(s), CU_GRAPH_NODE_TYPE_MEM_ALLOC, &rc);
        if (node != NULL)
            rc = cap_alloc(node, n, dptr);
        unlock();
        return rc;
    }
    if ((rc = async_outside_capture(rc, s)) != CUDA_SUCCESS)
        return rc;
    return device_alloc(dptr, n, K_ASYNC, 0);
}

static CUresult
fake_cuMemFreeAsync(CUdeviceptr d, CUstream s)
{
    CUresult rc = enter(F_cuMemFreeAsync);
    if (rc)
        return rc;
    pthread_mutex_lock(&lock);
    rc = check_stream(s, NULL);
    if (rc == CUDA_SUCCESS && cap_stream(s) != NULL) {
        struct fake_node *node = cap_node(cap_stream(s), CU_GRAPH_NODE_TYPE_MEM_FREE, &rc);
        if (node != NULL)
            cap_dptr(node, d);
        unlock();
        return rc;
    }
    if ((rc = async_outside_capture(rc, s)) != CUDA_SUCCESS)
        return rc;
    return free_kind(d, 0);
}

/* one pool per device, a distinct non-null handle; attributes are checked
 * and the release threshold is kept */
static unsigned long long pool_release_threshold[8];

static CUresult
fake_cuDeviceGetDefaultMemPool(CUmemoryPool *pool, CUdevice dev)
{
    CUresult rc = enter(F_cuDeviceGetDefaultMemPool);
    if (rc)
        return rc;
    if (pool == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    if (!dev_ok(dev) || dev < 0 || dev >= 8)
        return CUDA_ERROR_INVALID_DEVICE;
    *pool = (CUmemoryPool)(uintptr_t)(0x9000 + 16 * (uintptr_t)dev);
    return CUDA_SUCCESS;
}

static CUresult
fake_cuMemPoolSetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value)
{
    CUresult rc = enter(F_cuMemPoolSetAttribute);
    uintptr_t h = (uintptr_t)pool;
    if (rc)
        return rc;
    if ((rc = cap_unsafe()) != CUDA_SUCCESS)
        return rc;
    if (value == NULL || h < 0x9000 || h >= 0x9000 + 16 * 8 || (h - 0x9000) % 16)
        return CUDA_ERROR_INVALID_VALUE;
    if (attr == CU_MEMPOOL_ATTR_RELEASE_THRESHOLD) {
        pool_release_threshold[(h - 0x9000) / 16] = *(cuuint64_t *)value;
        return CUDA_SUCCESS;
    }
    return CUDA_ERROR_NOT_SUPPORTED;
}

/* the release threshold of device dev's default pool */
EXPORT unsigned long long
fakecuda_pool_release_threshold(int dev)
{
    return dev >= 0 && dev < 8 ? pool_release_threshold[dev] : 0;
}

static CUresult
fake_cuMemPrefetchAsync(CUdeviceptr p, size_t n, CUmemLocation loc, unsigned int flags, CUstream s)
{
    CUresult rc = enter(F_cuMemPrefetchAsync);
    fake_alloc *a;
    if (rc)
        return rc;
    if (flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    a = find_alloc((uintptr_t)p, n);
    if (a == NULL || a->kind != K_MANAGED)
        rc = CUDA_ERROR_INVALID_VALUE;
    else if (loc.type == CU_MEM_LOCATION_TYPE_DEVICE && !dev_ok(loc.id))
        rc = CUDA_ERROR_INVALID_DEVICE;
    else if (loc.type != CU_MEM_LOCATION_TYPE_DEVICE && loc.type != CU_MEM_LOCATION_TYPE_HOST)
        rc = CUDA_ERROR_INVALID_VALUE;
    else
        rc = check_stream(s, NULL);
    unlock();
    return rc;
}

/* cuStreamAttachMemAsync: managed memory, length 0 (the whole allocation,
 * from its start) or the allocation's size, one of the three flags */
static CUresult
fake_cuStreamAttachMemAsync(CUstream s, CUdeviceptr p, size_t n, unsigned int flags)
{
    CUresult rc = enter(F_cuStreamAttachMemAsync);
    fake_alloc *a;
    if (rc)
        return rc;
    if (flags != CU_MEM_ATTACH_GLOBAL && flags != CU_MEM_ATTACH_HOST
        && flags != CU_MEM_ATTACH_SINGLE)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    a = find_alloc((uintptr_t)p, 1);
    if (a == NULL || a->kind != K_MANAGED || a->base != (uintptr_t)p || (n != 0 && n != a->size))
        rc = CUDA_ERROR_INVALID_VALUE;
    else if (flags == CU_MEM_ATTACH_SINGLE && s == NULL)
        rc = CUDA_ERROR_INVALID_VALUE; /* SINGLE needs a stream of its own */
    else
        rc = check_stream(s, NULL);
    /* on the legacy default stream it waits for the blocking streams of the
     * context: one of them capturing, the capture is invalidated */
    if (rc == CUDA_SUCCESS && IS_LEGACY(s))
        rc = cap_violation(current(), CUDA_ERROR_STREAM_CAPTURE_IMPLICIT);
    if (rc == CUDA_SUCCESS)
        a->flags = flags;
    unlock();
    return rc;
}

/* cuMemHostGetFlags: cuMemHostAlloc's memory only */
static CUresult
fake_cuMemHostGetFlags(unsigned int *out, void *p)
{
    CUresult rc = enter(F_cuMemHostGetFlags);
    fake_alloc *a;
    if (rc)
        return rc;
    if (out == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    a = find_alloc((uintptr_t)p, 1);
    if (a == NULL || a->kind != K_HOST)
        rc = CUDA_ERROR_INVALID_VALUE;
    else
        *out = a->flags;
    unlock();
    return rc;
}

/* cuCtxGetApiVersion: 3020 for every context, as CUDA 12 and 13 drivers
 * answer; NULL asks about the current one */
static CUresult
fake_cuCtxGetApiVersion(CUcontext ctx, unsigned int *version)
{
    CUresult rc = enter(F_cuCtxGetApiVersion);
    fake_ctx *c = (fake_ctx *)ctx;
    if (rc)
        return rc;
    if (version == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    if (c == NULL)
        c = need_ctx(&rc);
    else if (!ctx_ok(c))
        rc = CUDA_ERROR_INVALID_CONTEXT;
    if (rc == CUDA_SUCCESS)
        *version = 3020;
    unlock();
    return rc;
}

/* cuCtxGet/SetSharedMemConfig: an H100's banks are four bytes wide and
 * cannot be configured: the setting is accepted and changes nothing */
static CUresult
fake_cuCtxGetSharedMemConfig(CUsharedconfig *config)
{
    CUresult rc = enter(F_cuCtxGetSharedMemConfig);
    if (rc)
        return rc;
    if (config == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    if (need_ctx(&rc) != NULL)
        *config = CU_SHARED_MEM_CONFIG_FOUR_BYTE_BANK_SIZE;
    unlock();
    return rc;
}

static CUresult
fake_cuCtxSetSharedMemConfig(CUsharedconfig config)
{
    CUresult rc = enter(F_cuCtxSetSharedMemConfig);
    if (rc)
        return rc;
    if ((int)config < 0 || config > CU_SHARED_MEM_CONFIG_EIGHT_BYTE_BANK_SIZE)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    need_ctx(&rc);
    unlock();
    return rc;
}

/* ---- modules: a small PTX reader ---- */
static const char *
skip_ws(const char *p)
{
    for (;;) {
        while (*p && isspace((unsigned char)*p))
            p++;
        if (p[0] == '/' && p[1] == '/') {
            while (*p && *p != '\n')
                p++;
        } else if (p[0] == '/' && p[1] == '*') {
            const char *e = strstr(p + 2, "*/");
            p = e ? e + 2 : p + strlen(p);
        } else {
            return p;
        }
    }
}

static size_t
type_size(const char *t, size_t n)
{
    static const struct {
        const char *name;
        size_t size;
    } types[] = {
        {".b8", 1},  {".u8", 1},   {".s8", 1},  {".b16", 2}, {".u16", 2},   {".s16", 2},
        {".f16", 2}, {".bf16", 2}, {".b32", 4}, {".u32", 4}, {".s32", 4},   {".f32", 4},
        {".b64", 8}, {".u64", 8},  {".s64", 8}, {".f64", 8}, {".f16x2", 4}, {".b128", 16},
    };
    size_t i;
    for (i = 0; i < sizeof types / sizeof types[0]; i++)
        if (strlen(types[i].name) == n && strncmp(t, types[i].name, n) == 0)
            return types[i].size;
    return 0;
}

/* One declaration: directives (.param/.global/.align N/.u64/.ptr ...), a
 * name, optional [N][M]...  Sets size and alignment; returns the end or NULL. */
static const char *
parse_decl(const char *p, char *name, size_t namecap, size_t *size, size_t *align)
{
    size_t tsize = 0, al = 0, count = 1;
    p = skip_ws(p);
    while (*p == '.') {
        const char *s = p;
        while (*p && !isspace((unsigned char)*p) && *p != ',' && *p != ')' && *p != ';')
            p++;
        if ((size_t)(p - s) == 6 && strncmp(s, ".align", 6) == 0) {
            p = skip_ws(p);
            al = (size_t)strtoul(p, (char **)&p, 10);
        } else {
            size_t ts = type_size(s, (size_t)(p - s));
            if (ts)
                tsize = ts;
        }
        p = skip_ws(p);
    }
    if (tsize == 0)
        return NULL;
    {
        size_t n = 0;
        while (*p && (isalnum((unsigned char)*p) || *p == '_' || *p == '$' || *p == '%'))
            if (n + 1 < namecap)
                name[n++] = *p++;
            else
                p++;
        name[n] = '\0';
        if (n == 0)
            return NULL;
    }
    while (*p == '[') {
        unsigned long long k = strtoull(p + 1, (char **)&p, 10);
        if (*p != ']')
            return NULL;
        p++;
        count *= (size_t)(k ? k : 1);
    }
    *size = tsize * count;
    *align = al ? al : tsize;
    return p;
}

static void
module_free(fake_module *m)
{
    fake_func *f;
    fake_global *g, *gn;
    for (f = m->funcs; f != NULL; f = f->next)
        f->alive = 0; /* functions stay, dead, to catch reuse */
    for (g = m->globals; g != NULL; g = gn) {
        gn = g->next;
        drop_alloc(g->mem);
        free(g);
    }
    m->globals = NULL;
}

/* Everything a context owns dies with it, as in the real driver; counted as
 * reaped (pygpu frees what it owns itself, except after Context.detach()). */
static void
reap_context(fake_ctx *c)
{
    fake_alloc *a, *next;
    fake_stream *s;
    fake_event *e;
    fake_module *m;
    for (m = all_modules; m != NULL; m = m->next_all) {
        if (m->ctx == c && m->alive) {
            module_free(m); /* drops its globals' records */
            m->alive = 0;
            live_modules--;
            reaped++;
        }
    }
    for (a = allocs; a != NULL; a = next) {
        next = a->next;
        if (a->ctx == c && a->kind != K_GLOBAL) {
            drop_alloc(a);
            reaped++;
        }
    }
    for (s = all_streams; s != NULL; s = s->next_all) {
        if (s->ctx == c && s->alive) {
            s->alive = 0;
            live_streams--;
            reaped++;
        }
    }
    for (e = all_events; e != NULL; e = e->next_all) {
        if (e->ctx == c && e->alive) {
            e->alive = 0;
            live_events--;
            reaped++;
        }
    }
    reap_arrays(c);
}

static CUresult
parse_ptx(fake_module *m, const char *src, char *err, size_t errcap)
{
    const char *p = src;
    if (strstr(src, ".version") == NULL || strstr(src, ".target") == NULL) {
        snprintf(err, errcap,
                 "stand-in: the image is neither PTX text (.version, .target) "
                 "nor anything else the stand-in loads");
        return CUDA_ERROR_INVALID_IMAGE;
    }
    while ((p = strchr(p, '.')) != NULL) {
        if (strncmp(p, ".entry", 6) == 0 && isspace((unsigned char)p[6])) {
            fake_func *f;
            { /* ".extern .entry name ( ... );" declares a kernel of another input */
                const char *b = p;
                while (b > src && b[-1] != '\n')
                    b--;
                if (memmem(b, (size_t)(p - b), ".extern", 7) != NULL) {
                    p += 6;
                    continue;
                }
            }
            f = calloc(1, sizeof *f);
            size_t n = 0, off = 0;
            if (f == NULL)
                return CUDA_ERROR_OUT_OF_MEMORY;
            f->magic = MAGIC_FUNC;
            f->alive = 1;
            remember(f);
            f->module = m;
            f->maxntid = 1024;
            f->max_dynamic_shared = 49152;
            f->next = m->funcs;
            m->funcs = f;
            p = skip_ws(p + 6);
            while (*p && *p != '(' && *p != '{' && !isspace((unsigned char)*p))
                if (n + 1 < sizeof f->name)
                    f->name[n++] = *p++;
                else
                    p++;
            f->name[n] = '\0';
            p = skip_ws(p);
            if (*p == '(') {
                p = skip_ws(p + 1);
                while (*p != ')') {
                    char pname[256];
                    size_t size, align;
                    p = parse_decl(p, pname, sizeof pname, &size, &align);
                    if (p == NULL || f->nparams >= MAXPARAMS) {
                        snprintf(err, errcap, "stand-in: cannot read the parameters of %s",
                                 f->name);
                        return CUDA_ERROR_INVALID_PTX;
                    }
                    off = (off + align - 1) / align * align;
                    f->offset[f->nparams] = off;
                    f->size[f->nparams] = size;
                    f->nparams++;
                    off += size;
                    p = skip_ws(p);
                    if (*p == ',')
                        p = skip_ws(p + 1);
                    else if (*p != ')') {
                        snprintf(err, errcap, "stand-in: bad parameter list in %s", f->name);
                        return CUDA_ERROR_INVALID_PTX;
                    }
                }
                p++;
            }
            f->param_bytes = off;
            /* performance directives before the body */
            for (;;) {
                p = skip_ws(p);
                if (strncmp(p, ".maxntid", 8) == 0 || strncmp(p, ".reqntid", 8) == 0) {
                    long x = 1, y = 1, z = 1;
                    const char *q = p + 8;
                    x = strtol(q, (char **)&q, 10);
                    q = skip_ws(q);
                    if (*q == ',') {
                        y = strtol(q + 1, (char **)&q, 10);
                        q = skip_ws(q);
                    }
                    if (*q == ',') {
                        z = strtol(q + 1, (char **)&q, 10);
                    }
                    if (x * y * z > 0 && x * y * z < f->maxntid)
                        f->maxntid = (int)(x * y * z);
                    p = q;
                } else if (*p == '.') {
                    while (*p && *p != '\n' && *p != '{')
                        p++;
                } else {
                    break;
                }
            }
            if (*p == '{') { /* skip the body, adding up its .shared */
                int depth = 0;
                for (; *p; p++) {
                    if (*p == '{')
                        depth++;
                    else if (*p == '}' && --depth == 0) {
                        p++;
                        break;
                    } else if (strncmp(p, ".shared", 7) == 0 && isspace((unsigned char)p[7])) {
                        char sname[256];
                        size_t size, align;
                        const char *q = parse_decl(p + 7, sname, sizeof sname, &size, &align);
                        if (q != NULL) {
                            f->static_shared += size;
                            p = q - 1;
                        }
                    }
                }
            }
            continue;
        }
        if ((strncmp(p, ".global", 7) == 0 || strncmp(p, ".const", 6) == 0
             || strncmp(p, ".shared", 7) == 0)
            && isspace((unsigned char)p[strncmp(p, ".const", 6) == 0 ? 6 : 7])) {
            /* module scope only: the bodies are skipped above */
            int shared = strncmp(p, ".shared", 7) == 0;
            const char *line = p;
            char gname[256];
            size_t size, align;
            int is_extern = 0;
            /* ".extern" or ".weak" before the state space */
            {
                const char *b = p;
                while (b > src && b[-1] != '\n')
                    b--;
                if (strstr(b, ".extern") != NULL && strstr(b, ".extern") < p)
                    is_extern = 1;
            }
            p = parse_decl(p + (shared || strncmp(p, ".global", 7) == 0 ? 7 : 6), gname,
                           sizeof gname, &size, &align);
            if (p == NULL) {
                p = line + 1;
                continue;
            }
            if (shared) {
                if (!is_extern)
                    m->static_shared += size;
            } else if (!is_extern) {
                fake_global *g = calloc(1, sizeof *g);
                void *mem = fill_alloc(size);
                if (g == NULL || mem == NULL) {
                    free(g);
                    free(mem);
                    return CUDA_ERROR_OUT_OF_MEMORY;
                }
                memset(mem, 0, size);
                snprintf(g->name, sizeof g->name, "%s", gname);
                g->mem = add_alloc(mem, size, K_GLOBAL, 0, NULL);
                if (g->mem == NULL) {
                    free(g);
                    free(mem);
                    return CUDA_ERROR_OUT_OF_MEMORY;
                }
                g->mem->module = m;
                g->next = m->globals;
                m->globals = g;
            }
            continue;
        }
        p++;
    }
    return CUDA_SUCCESS;
}

static void
write_log(void *buf, size_t cap, const char *text)
{
    if (buf != NULL && cap > 0)
        snprintf(buf, cap, "%s", text);
}

static CUresult
fake_cuModuleLoadDataEx(CUmodule *out, const void *image, unsigned int nopts, CUjit_option *opts,
                        void **vals)
{
    CUresult rc = enter(F_cuModuleLoadDataEx);
    void *info = NULL, *errbuf = NULL;
    size_t info_cap = 0, err_cap = 0;
    char err[512] = "";
    fake_module *m;
    fake_ctx *c;
    unsigned i;
    if (rc)
        return rc;
    if (out == NULL || image == NULL || (nopts && (opts == NULL || vals == NULL)))
        return CUDA_ERROR_INVALID_VALUE;
    for (i = 0; i < nopts; i++) {
        if ((int)opts[i] < 0 || opts[i] >= CU_JIT_NUM_OPTIONS)
            return CUDA_ERROR_INVALID_VALUE;
        if (opts[i] == CU_JIT_INFO_LOG_BUFFER)
            info = vals[i];
        if (opts[i] == CU_JIT_ERROR_LOG_BUFFER)
            errbuf = vals[i];
        if (opts[i] == CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES)
            info_cap = (size_t)(uintptr_t)vals[i];
        if (opts[i] == CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES)
            err_cap = (size_t)(uintptr_t)vals[i];
    }
    pthread_mutex_lock(&lock);
    c = need_ctx(&rc);
    if (c == NULL) {
        unlock();
        return rc;
    }
    if (strncmp(image,
                "\x7f"
                "ELF",
                4)
            == 0
        || ((const unsigned char *)image)[0] == 0x50) {
        unlock();
        write_log(errbuf, err_cap, "stand-in: loads PTX only, not cubin or fatbin");
        return CUDA_ERROR_NO_BINARY_FOR_GPU;
    }
    m = calloc(1, sizeof *m);
    if (m == NULL) {
        unlock();
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    m->magic = MAGIC_MODULE;
    m->alive = 1;
    remember(m);
    m->ctx = c;
    rc = parse_ptx(m, image, err, sizeof err);
    if (rc != CUDA_SUCCESS) {
        module_free(m);
        m->alive = 0; /* kept (dead), with its dead functions */
        unlock();
        write_log(errbuf, err_cap, err);
        return rc;
    }
    live_modules++;
    m->next_all = all_modules;
    all_modules = m;
    *out = (CUmodule)m;
    unlock();
    write_log(info, info_cap, "stand-in: PTX read; nothing was compiled");
    return CUDA_SUCCESS;
}

static int
module_ok(fake_module *m)
{
    if (!known(m) || m->magic != MAGIC_MODULE)
        return 0;
    if (!m->alive || !m->ctx->alive) {
        stale_uses++;
        return 0;
    }
    return 1;
}

static CUresult
fake_cuModuleUnload(CUmodule h)
{
    CUresult rc = enter(F_cuModuleUnload);
    fake_module *m = (fake_module *)h;
    if (rc)
        return rc;
    pthread_mutex_lock(&lock);
    if (!module_ok(m)) {
        rc = CUDA_ERROR_INVALID_HANDLE;
    } else {
        module_free(m);
        m->alive = 0;
        live_modules--;
    }
    unlock();
    return rc;
}

static CUresult
fake_cuModuleGetFunction(CUfunction *out, CUmodule h, const char *name)
{
    CUresult rc = enter(F_cuModuleGetFunction);
    fake_module *m = (fake_module *)h;
    fake_func *f;
    if (rc)
        return rc;
    if (out == NULL || name == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    if (!module_ok(m)) {
        unlock();
        return CUDA_ERROR_INVALID_HANDLE;
    }
    rc = CUDA_ERROR_NOT_FOUND;
    for (f = m->funcs; f != NULL; f = f->next) {
        if (strcmp(f->name, name) == 0) {
            *out = (CUfunction)f;
            rc = CUDA_SUCCESS;
            break;
        }
    }
    unlock();
    return rc;
}

static CUresult
fake_cuModuleGetGlobal(CUdeviceptr *dptr, size_t *bytes, CUmodule h, const char *name)
{
    CUresult rc = enter(F_cuModuleGetGlobal);
    fake_module *m = (fake_module *)h;
    fake_global *g;
    if (rc)
        return rc;
    if (name == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    if (!module_ok(m)) {
        unlock();
        return CUDA_ERROR_INVALID_HANDLE;
    }
    rc = CUDA_ERROR_NOT_FOUND;
    for (g = m->globals; g != NULL; g = g->next) {
        if (strcmp(g->name, name) == 0) {
            if (dptr)
                *dptr = (CUdeviceptr)g->mem->base;
            if (bytes)
                *bytes = g->mem->size;
            rc = CUDA_SUCCESS;
            break;
        }
    }
    unlock();
    return rc;
}

static fake_func *
func_ok(CUfunction h)
{
    fake_func *f = (fake_func *)h;
    if (!known(f) || f->magic != MAGIC_FUNC)
        return NULL;
    if (!f->alive || !module_ok(f->module)) {
        stale_uses++;
        return NULL;
    }
    return f;
}

/* Static shared memory: the body's, plus module-scope (demoted) variables,
 * which the stand-in cannot attribute to one kernel. */
static size_t
static_shared(fake_func *f)
{
    return f->static_shared + f->module->static_shared;
}

static CUresult
fake_cuFuncGetAttribute(int *pi, CUfunction_attribute a, CUfunction h)
{
    CUresult rc = enter(F_cuFuncGetAttribute);
    fake_func *f;
    if (rc)
        return rc;
    if (pi == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    if ((f = func_ok(h)) == NULL) {
        unlock();
        return CUDA_ERROR_INVALID_HANDLE;
    }
    switch (a) {
    case CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK: *pi = f->maxntid; break;
    case CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES: *pi = (int)static_shared(f); break;
    case CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES: *pi = 0; break;
    case CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES: *pi = 0; break;
    case CU_FUNC_ATTRIBUTE_NUM_REGS: *pi = 32; break;
    case CU_FUNC_ATTRIBUTE_PTX_VERSION: *pi = cc_major * 10 + cc_minor; break;
    case CU_FUNC_ATTRIBUTE_BINARY_VERSION: *pi = cc_major * 10 + cc_minor; break;
    case CU_FUNC_ATTRIBUTE_CACHE_MODE_CA: *pi = 0; break;
    case CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES: *pi = f->max_dynamic_shared; break;
    case CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT: *pi = -1; break;
    default:
        if ((int)a < 0 || a >= CU_FUNC_ATTRIBUTE_MAX)
            rc = CUDA_ERROR_INVALID_VALUE;
        else
            *pi = 0;
    }
    unlock();
    return rc;
}

static CUresult
fake_cuFuncSetAttribute(CUfunction h, CUfunction_attribute a, int value)
{
    CUresult rc = enter(F_cuFuncSetAttribute);
    fake_func *f;
    if (rc)
        return rc;
    pthread_mutex_lock(&lock);
    if ((f = func_ok(h)) == NULL)
        rc = CUDA_ERROR_INVALID_HANDLE;
    else if (a == CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES) {
        if (value < 0
            || (size_t)value + static_shared(f)
                   > (size_t)attribute(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, 0))
            rc = CUDA_ERROR_INVALID_VALUE;
        else
            f->max_dynamic_shared = value;
    } else if (a == CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT) {
        if (value < -1 || value > 100)
            rc = CUDA_ERROR_INVALID_VALUE;
    } else {
        rc = CUDA_ERROR_INVALID_VALUE;
    }
    unlock();
    return rc;
}

static CUresult
fake_cuFuncSetCacheConfig(CUfunction h, CUfunc_cache config)
{
    CUresult rc = enter(F_cuFuncSetCacheConfig);
    fake_func *f;
    if (rc)
        return rc;
    pthread_mutex_lock(&lock);
    if ((f = func_ok(h)) == NULL)
        rc = CUDA_ERROR_INVALID_HANDLE;
    else if ((int)config < 0 || config > CU_FUNC_CACHE_PREFER_EQUAL)
        rc = CUDA_ERROR_INVALID_VALUE;
    else
        f->cache = config;
    unlock();
    return rc;
}

static CUresult
fake_cuFuncGetParamInfo(CUfunction h, size_t index, size_t *off, size_t *size)
{
    CUresult rc = enter(F_cuFuncGetParamInfo);
    fake_func *f;
    if (rc)
        return rc;
    pthread_mutex_lock(&lock);
    if ((f = func_ok(h)) == NULL)
        rc = CUDA_ERROR_INVALID_HANDLE;
    else if (index >= (size_t)f->nparams)
        rc = CUDA_ERROR_INVALID_VALUE;
    else {
        if (off)
            *off = f->offset[index];
        if (size)
            *size = f->size[index];
    }
    unlock();
    return rc;
}

static CUresult
fake_cuFuncGetName(const char **name, CUfunction h)
{
    CUresult rc = enter(F_cuFuncGetName);
    fake_func *f;
    if (rc)
        return rc;
    if (name == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    if ((f = func_ok(h)) == NULL)
        rc = CUDA_ERROR_INVALID_HANDLE;
    else
        *name = f->name;
    unlock();
    return rc;
}

/* cuProfilerStart/Stop: need a current context; set the collecting flag
 * (fakecuda_live("profiler") reads it).  Starting twice is no error. */
static int profiler_on;

static CUresult
fake_cuProfilerStart(void)
{
    CUresult rc = enter(F_cuProfilerStart);
    if (rc)
        return rc;
    pthread_mutex_lock(&lock);
    if (need_ctx(&rc) != NULL)
        profiler_on = 1;
    unlock();
    return rc;
}

static CUresult
fake_cuProfilerStop(void)
{
    CUresult rc = enter(F_cuProfilerStop);
    if (rc)
        return rc;
    pthread_mutex_lock(&lock);
    if (need_ctx(&rc) != NULL)
        profiler_on = 0;
    unlock();
    return rc;
}

/* cuProfilerInitialize: needs a current context, both paths and an output
 * mode of 0 (key-value pairs) or 1 (CSV); records nothing. */
static CUresult
fake_cuProfilerInitialize(const char *config, const char *output, int mode)
{
    CUresult rc = enter(F_cuProfilerInitialize);
    if (rc)
        return rc;
    if (config == NULL || output == NULL || (mode != 0 && mode != 1))
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    need_ctx(&rc);
    unlock();
    return rc;
}

static int
max_active(fake_func *f, int block, size_t smem)
{
    int warps = (block + 31) / 32, n;
    if (block <= 0 || block > f->maxntid)
        return 0;
    n = 64 / warps;
    if (n > 32)
        n = 32;
    smem += static_shared(f);
    if (smem > 0 && (size_t)n * smem > 233472)
        n = (int)(233472 / smem);
    return n;
}

/* Check and record a launch; lock held. */
static CUresult
do_launch(fake_func *f, const unsigned grid[3], const unsigned block[3], unsigned shared,
          CUstream s, void **params, void **extra, int cooperative, int pdl,
          const unsigned cluster[3])
{
    CUresult rc;
    fake_ctx *c = need_ctx(&rc);
    unsigned long long threads = (unsigned long long)block[0] * block[1] * block[2];
    int i;
    if (c == NULL)
        return rc;
    if (f->module->ctx != c)
        return CUDA_ERROR_INVALID_HANDLE; /* a function of another context */
    if ((rc = check_stream(s, c)) != CUDA_SUCCESS)
        return rc;
    if (grid[0] == 0 || grid[1] == 0 || grid[2] == 0 || block[0] == 0 || block[1] == 0
        || block[2] == 0 || block[0] > 1024 || block[1] > 1024 || block[2] > 64
        || grid[0] > 2147483647u || grid[1] > 65535 || grid[2] > 65535)
        return CUDA_ERROR_INVALID_VALUE;
    if (threads > (unsigned long long)f->maxntid)
        return CUDA_ERROR_INVALID_VALUE;
    if (shared > (unsigned)f->max_dynamic_shared || shared + static_shared(f) > 232448)
        return CUDA_ERROR_INVALID_VALUE;
    if (cluster[0]
        && (grid[0] % cluster[0] || grid[1] % cluster[1] || grid[2] % cluster[2]
            || (unsigned long long)cluster[0] * cluster[1] * cluster[2] > 8))
        return CUDA_ERROR_INVALID_CLUSTER_SIZE;
    if (cooperative
        && (unsigned long long)grid[0] * grid[1] * grid[2]
               > (unsigned long long)max_active(f, (int)threads, shared) * 132)
        return CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE;
    if ((params != NULL) == (extra != NULL) && f->nparams > 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (f->param_bytes > sizeof last_launch.params)
        return CUDA_ERROR_INVALID_VALUE;
    /* the legacy stream waits for a blocking capturing stream: the
     * driver refuses the launch and invalidates the capture */
    if (IS_LEGACY(s) && (rc = cap_violation(c, CUDA_ERROR_STREAM_CAPTURE_IMPLICIT)) != CUDA_SUCCESS)
        return rc;
    if (cap_stream(s) != NULL) { /* captured: a kernel node */
        struct fake_node *node = cap_node(cap_stream(s), CU_GRAPH_NODE_TYPE_KERNEL, &rc);
        if (node == NULL)
            return rc;
        return cap_kernel(node, f, grid, block, shared, params, extra);
    }
    memset(last_launch.params, 0, sizeof last_launch.params);
    if (params != NULL) {
        for (i = 0; i < f->nparams; i++) {
            if (params[i] == NULL)
                return CUDA_ERROR_INVALID_VALUE;
            memcpy(last_launch.params + f->offset[i], params[i], f->size[i]);
        }
    } else if (extra != NULL) {
        void *buf = NULL;
        size_t size = 0;
        for (i = 0; extra[i] != CU_LAUNCH_PARAM_END; i += 2) {
            if (extra[i] == CU_LAUNCH_PARAM_BUFFER_POINTER)
                buf = extra[i + 1];
            else if (extra[i] == CU_LAUNCH_PARAM_BUFFER_SIZE)
                size = *(size_t *)extra[i + 1];
            else
                return CUDA_ERROR_INVALID_VALUE;
        }
        if (buf == NULL || size < f->param_bytes)
            return CUDA_ERROR_INVALID_VALUE;
        memcpy(last_launch.params, buf, f->param_bytes);
    }
    snprintf(last_launch.name, sizeof last_launch.name, "%s", f->name);
    memcpy(last_launch.grid, grid, sizeof last_launch.grid);
    memcpy(last_launch.block, block, sizeof last_launch.block);
    memcpy(last_launch.cluster, cluster, sizeof last_launch.cluster);
    last_launch.shared = shared;
    last_launch.stream = s;
    last_launch.size = f->param_bytes;
    last_launch.cooperative = cooperative;
    last_launch.pdl = pdl;
    memcpy(thread_last.params, last_launch.params, f->param_bytes);
    thread_last.size = f->param_bytes;
    launches++;
    return CUDA_SUCCESS;
}

static CUresult
fake_cuLaunchKernel(CUfunction h, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                    unsigned bz, unsigned shared, CUstream s, void **params, void **extra)
{
    CUresult rc = enter(F_cuLaunchKernel);
    const unsigned grid[3] = {gx, gy, gz}, block[3] = {bx, by, bz}, none[3] = {0, 0, 0};
    fake_func *f;
    if (rc)
        return rc;
    pthread_mutex_lock(&lock);
    if ((f = func_ok(h)) == NULL)
        rc = CUDA_ERROR_INVALID_HANDLE;
    else
        rc = do_launch(f, grid, block, shared, s, params, extra, 0, 0, none);
    unlock();
    return rc;
}

static CUresult
fake_cuLaunchCooperativeKernel(CUfunction h, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                               unsigned by, unsigned bz, unsigned shared, CUstream s, void **params)
{
    CUresult rc = enter(F_cuLaunchCooperativeKernel);
    const unsigned grid[3] = {gx, gy, gz}, block[3] = {bx, by, bz}, none[3] = {0, 0, 0};
    fake_func *f;
    if (rc)
        return rc;
    pthread_mutex_lock(&lock);
    if ((f = func_ok(h)) == NULL)
        rc = CUDA_ERROR_INVALID_HANDLE;
    else
        rc = do_launch(f, grid, block, shared, s, params, NULL, 1, 0, none);
    unlock();
    return rc;
}

static CUresult
fake_cuLaunchKernelEx(const CUlaunchConfig *cfg, CUfunction h, void **params, void **extra)
{
    CUresult rc = enter(F_cuLaunchKernelEx);
    unsigned grid[3], block[3], cluster[3] = {0, 0, 0};
    int cooperative = 0, pdl = 0;
    unsigned i;
    fake_func *f;
    if (rc)
        return rc;
    if (cfg == NULL || (cfg->numAttrs && cfg->attrs == NULL))
        return CUDA_ERROR_INVALID_VALUE;
    grid[0] = cfg->gridDimX;
    grid[1] = cfg->gridDimY;
    grid[2] = cfg->gridDimZ;
    block[0] = cfg->blockDimX;
    block[1] = cfg->blockDimY;
    block[2] = cfg->blockDimZ;
    for (i = 0; i < cfg->numAttrs; i++) {
        const CUlaunchAttribute *a = &cfg->attrs[i];
        switch (a->id) {
        case CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION:
            cluster[0] = a->value.clusterDim.x;
            cluster[1] = a->value.clusterDim.y;
            cluster[2] = a->value.clusterDim.z;
            if (!cluster[0] || !cluster[1] || !cluster[2])
                return CUDA_ERROR_INVALID_CLUSTER_SIZE;
            break;
        case CU_LAUNCH_ATTRIBUTE_COOPERATIVE: cooperative = a->value.cooperative != 0; break;
        case CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION:
            pdl = a->value.programmaticStreamSerializationAllowed != 0;
            break;
        default: return CUDA_ERROR_INVALID_VALUE;
        }
    }
    pthread_mutex_lock(&lock);
    if ((f = func_ok(h)) == NULL)
        rc = CUDA_ERROR_INVALID_HANDLE;
    else
        rc = do_launch(f, grid, block, cfg->sharedMemBytes, cfg->hStream, params, extra,
                       cooperative, pdl, cluster);
    unlock();
    return rc;
}

static CUresult
fake_cuOccupancyMaxActiveBlocksPerMultiprocessor(int *n, CUfunction h, int block, size_t smem)
{
    CUresult rc = enter(F_cuOccupancyMaxActiveBlocksPerMultiprocessor);
    fake_func *f;
    if (rc)
        return rc;
    if (n == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    if ((f = func_ok(h)) == NULL)
        rc = CUDA_ERROR_INVALID_HANDLE;
    else
        *n = max_active(f, block, smem);
    unlock();
    return rc;
}

static CUresult
fake_cuOccupancyMaxPotentialBlockSize(int *min_grid, int *block, CUfunction h,
                                      CUoccupancyB2DSize smem_of, size_t smem, int limit)
{
    CUresult rc = enter(F_cuOccupancyMaxPotentialBlockSize);
    fake_func *f;
    int b;
    if (rc)
        return rc;
    if (min_grid == NULL || block == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    if ((f = func_ok(h)) == NULL) {
        unlock();
        return CUDA_ERROR_INVALID_HANDLE;
    }
    b = f->maxntid;
    if (limit > 0 && limit < b)
        b = limit;
    b = b / 32 * 32;
    if (b == 0)
        b = 32;
    *block = b;
    *min_grid = max_active(f, b, smem_of ? smem_of(b) : smem) * 132;
    unlock();
    return CUDA_SUCCESS;
}

/* ---- streams and events ---- */
static CUresult
stream_new(CUstream *out, unsigned flags, int prio)
{
    CUresult rc = CUDA_SUCCESS;
    fake_ctx *c;
    fake_stream *s;
    if (out == NULL || (flags & ~(unsigned)CU_STREAM_NON_BLOCKING) != 0)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    c = need_ctx(&rc);
    if (c != NULL) {
        s = calloc(1, sizeof *s);
        if (s == NULL) {
            rc = CUDA_ERROR_OUT_OF_MEMORY;
        } else {
            s->magic = MAGIC_STREAM;
            s->alive = 1;
            remember(s);
            s->ctx = c;
            s->flags = flags;
            s->priority = prio < -5 ? -5 : prio > 0 ? 0 : prio;
            s->next_all = all_streams;
            all_streams = s;
            live_streams++;
            *out = (CUstream)s;
        }
    }
    unlock();
    return rc;
}

static CUresult
fake_cuStreamCreate(CUstream *out, unsigned int flags)
{
    CUresult rc = enter(F_cuStreamCreate);
    if (rc)
        return rc;
    return stream_new(out, flags, 0);
}

static CUresult
fake_cuStreamCreateWithPriority(CUstream *out, unsigned int flags, int prio)
{
    CUresult rc = enter(F_cuStreamCreateWithPriority);
    if (rc)
        return rc;
    return stream_new(out, flags, prio);
}

static fake_stream *
real_stream(CUstream h, CUresult *rc)
{
    pthread_mutex_lock(&lock);
    *rc = check_stream(h, NULL);
    unlock();
    if (*rc != CUDA_SUCCESS || h == NULL || h == CU_STREAM_LEGACY || h == CU_STREAM_PER_THREAD)
        return NULL;
    return (fake_stream *)h;
}

static CUresult
fake_cuStreamDestroy(CUstream h)
{
    CUresult rc = enter(F_cuStreamDestroy);
    fake_stream *s;
    if (rc)
        return rc;
    s = real_stream(h, &rc);
    if (rc)
        return rc;
    if (s == NULL)
        return CUDA_ERROR_INVALID_HANDLE;
    pthread_mutex_lock(&lock);
    cap_end_on_destroy(s);
    s->alive = 0;
    live_streams--;
    unlock();
    return CUDA_SUCCESS;
}

static CUresult
fake_cuStreamSynchronize(CUstream h)
{
    CUresult rc = enter(F_cuStreamSynchronize);
    fake_stream *s;
    if (rc)
        return rc;
    s = real_stream(h, &rc);
    pthread_mutex_lock(&lock);
    if (rc == CUDA_SUCCESS && s != NULL && s->cap != NULL) {
        s->cap_invalid = 1;
        rc = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    } else if (rc == CUDA_SUCCESS && s == NULL) {
        rc = cap_violation(current(), CUDA_ERROR_STREAM_CAPTURE_IMPLICIT);
    }
    unlock();
    if (rc == CUDA_SUCCESS)
        pause_here();
    return rc;
}

static CUresult
fake_cuStreamQuery(CUstream h)
{
    CUresult rc = enter(F_cuStreamQuery);
    if (rc)
        return rc;
    real_stream(h, &rc);
    return rc;
}

static CUresult
fake_cuStreamGetPriority(CUstream h, int *prio)
{
    CUresult rc = enter(F_cuStreamGetPriority);
    fake_stream *s;
    if (rc)
        return rc;
    if (prio == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    s = real_stream(h, &rc);
    if (rc)
        return rc;
    *prio = s ? s->priority : 0;
    return CUDA_SUCCESS;
}

static CUresult
fake_cuStreamGetFlags(CUstream h, unsigned int *flags)
{
    CUresult rc = enter(F_cuStreamGetFlags);
    fake_stream *s;
    if (rc)
        return rc;
    if (flags == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    s = real_stream(h, &rc);
    if (rc)
        return rc;
    *flags = s ? s->flags : 0;
    return CUDA_SUCCESS;
}

static fake_event *
event_ok(CUevent h)
{
    fake_event *e = (fake_event *)h;
    if (!known(e) || e->magic != MAGIC_EVENT)
        return NULL;
    if (!e->alive) {
        stale_uses++;
        return NULL;
    }
    return e;
}

static CUresult
fake_cuStreamWaitEvent(CUstream h, CUevent ev, unsigned int flags)
{
    CUresult rc = enter(F_cuStreamWaitEvent);
    if (rc)
        return rc;
    if (flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    real_stream(h, &rc);
    if (rc)
        return rc;
    pthread_mutex_lock(&lock);
    if (event_ok(ev) == NULL) {
        rc = CUDA_ERROR_INVALID_HANDLE;
    } else if (cap_stream(h) != NULL) {
        struct fake_node *node = cap_node(cap_stream(h), CU_GRAPH_NODE_TYPE_WAIT_EVENT, &rc);
        if (node != NULL)
            cap_event(node, event_ok(ev));
    }
    unlock();
    return rc;
}

static CUresult
fake_cuEventCreate(CUevent *out, unsigned int flags)
{
    CUresult rc = enter(F_cuEventCreate);
    fake_ctx *c;
    fake_event *e;
    if (rc)
        return rc;
    if (out == NULL || (flags & ~0xfu) != 0)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    c = need_ctx(&rc);
    if (c != NULL) {
        e = calloc(1, sizeof *e);
        if (e == NULL) {
            rc = CUDA_ERROR_OUT_OF_MEMORY;
        } else {
            e->magic = MAGIC_EVENT;
            e->alive = 1;
            remember(e);
            e->ctx = c;
            e->flags = flags;
            e->next_all = all_events;
            all_events = e;
            live_events++;
            *out = (CUevent)e;
        }
    }
    unlock();
    return rc;
}

static CUresult
fake_cuEventDestroy(CUevent h)
{
    CUresult rc = enter(F_cuEventDestroy);
    fake_event *e;
    if (rc)
        return rc;
    pthread_mutex_lock(&lock);
    if ((e = event_ok(h)) == NULL) {
        rc = CUDA_ERROR_INVALID_HANDLE;
    } else {
        e->alive = 0;
        live_events--;
    }
    unlock();
    return rc;
}

static CUresult
fake_cuEventRecord(CUevent h, CUstream s)
{
    CUresult rc = enter(F_cuEventRecord);
    fake_event *e;
    if (rc)
        return rc;
    pthread_mutex_lock(&lock);
    if ((e = event_ok(h)) == NULL)
        rc = CUDA_ERROR_INVALID_HANDLE;
    else if ((rc = check_stream(s, e->ctx)) == CUDA_SUCCESS && cap_stream(s) != NULL) {
        struct fake_node *node = cap_node(cap_stream(s), CU_GRAPH_NODE_TYPE_EVENT_RECORD, &rc);
        if (node != NULL)
            cap_event(node, e);
    } else if (rc == CUDA_SUCCESS) {
        e->recorded = 1;
        e->t = now_ms();
    }
    unlock();
    return rc;
}

static CUresult
fake_cuEventSynchronize(CUevent h)
{
    CUresult rc = enter(F_cuEventSynchronize);
    if (rc)
        return rc;
    pthread_mutex_lock(&lock);
    if (event_ok(h) == NULL)
        rc = CUDA_ERROR_INVALID_HANDLE;
    unlock();
    return rc;
}

static CUresult
fake_cuEventQuery(CUevent h)
{
    CUresult rc = enter(F_cuEventQuery);
    if (rc)
        return rc;
    pthread_mutex_lock(&lock);
    if (event_ok(h) == NULL)
        rc = CUDA_ERROR_INVALID_HANDLE;
    unlock();
    return rc;
}

static CUresult
fake_cuEventElapsedTime(float *ms, CUevent a, CUevent b)
{
    CUresult rc = enter(F_cuEventElapsedTime);
    fake_event *ea, *eb;
    if (rc)
        return rc;
    if (ms == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    ea = event_ok(a);
    eb = event_ok(b);
    if (ea == NULL || eb == NULL || !ea->recorded || !eb->recorded
        || (ea->flags & CU_EVENT_DISABLE_TIMING) || (eb->flags & CU_EVENT_DISABLE_TIMING))
        rc = CUDA_ERROR_INVALID_HANDLE;
    else
        *ms = (float)(eb->t - ea->t);
    unlock();
    return rc;
}

/* ---- the JIT linker: PTX inputs are concatenated into one PTX image (the
 * module loader parses PTX), binary inputs are checked by their magic and
 * contribute nothing; cuLinkComplete resolves every .extern .entry against
 * the .entry definitions of the inputs, and the device runtime's
 * __cudaCDP2* functions against a LIBRARY input ---- */

typedef struct fake_link {
    unsigned magic;
    int alive;
    fake_ctx *ctx;
    char *ptx; /* the PTX inputs, concatenated, NUL-terminated */
    size_t ptx_len;
    int ninputs, nlibraries;
    char *image;      /* cuLinkComplete's output, owned by the state */
    char *info, *err; /* the log buffers given at cuLinkCreate */
    size_t info_cap, err_cap;
} fake_link;

static long live_links;

static fake_link *
link_ok(CUlinkState h)
{
    fake_link *l = (fake_link *)h;
    if (!known(l) || l->magic != MAGIC_LINK)
        return NULL;
    if (!l->alive) {
        stale_uses++;
        return NULL;
    }
    return l;
}

/* Read the log buffer options; CUDA_ERROR_INVALID_VALUE for a bad one. */
static CUresult
link_options(unsigned n, CUjit_option *opts, void **vals, char **info, size_t *info_cap, char **err,
             size_t *err_cap)
{
    unsigned i;
    if (n && (opts == NULL || vals == NULL))
        return CUDA_ERROR_INVALID_VALUE;
    for (i = 0; i < n; i++) {
        if ((int)opts[i] < 0 || opts[i] >= CU_JIT_NUM_OPTIONS)
            return CUDA_ERROR_INVALID_VALUE;
        if (opts[i] == CU_JIT_INFO_LOG_BUFFER && info)
            *info = vals[i];
        if (opts[i] == CU_JIT_ERROR_LOG_BUFFER && err)
            *err = vals[i];
        if (opts[i] == CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES && info_cap)
            *info_cap = (size_t)(uintptr_t)vals[i];
        if (opts[i] == CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES && err_cap)
            *err_cap = (size_t)(uintptr_t)vals[i];
    }
    return CUDA_SUCCESS;
}

static CUresult
fake_cuLinkCreate(unsigned int n, CUjit_option *opts, void **vals, CUlinkState *out)
{
    CUresult rc = enter(F_cuLinkCreate);
    fake_link *l;
    fake_ctx *c;
    if (rc)
        return rc;
    if (out == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    l = calloc(1, sizeof *l);
    if (l == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    rc = link_options(n, opts, vals, &l->info, &l->info_cap, &l->err, &l->err_cap);
    if (rc != CUDA_SUCCESS) {
        free(l);
        return rc;
    }
    pthread_mutex_lock(&lock);
    c = need_ctx(&rc);
    if (c == NULL) {
        unlock();
        free(l);
        return rc;
    }
    l->magic = MAGIC_LINK;
    l->alive = 1;
    l->ctx = c;
    remember(l);
    live_links++;
    *out = (CUlinkState)l;
    unlock();
    return CUDA_SUCCESS;
}

/* Add one input's bytes.  Lock held. */
static CUresult
link_add(fake_link *l, CUjitInputType type, const char *data, size_t size, const char *name)
{
    static const unsigned char fatbin_magic[4] = {0x50, 0xed, 0x55, 0xba};
    const char *what = NULL;
    if (data == NULL || size == 0)
        return CUDA_ERROR_INVALID_VALUE;
    switch (type) {
    case CU_JIT_INPUT_PTX: {
        const char *nul = memchr(data, '\0', size);
        size_t len = nul != NULL ? (size_t)(nul - data) : size;
        char *grown;
        if ((nul != NULL && len != size - 1) || memmem(data, len, ".version", 8) == NULL
            || memmem(data, len, ".target", 7) == NULL) {
            write_log(l->err, l->err_cap,
                      "stand-in: a PTX input is not PTX text "
                      "(.version and .target, no NUL before its end)");
            return CUDA_ERROR_INVALID_PTX;
        }
        grown = realloc(l->ptx, l->ptx_len + len + 2);
        if (grown == NULL)
            return CUDA_ERROR_OUT_OF_MEMORY;
        l->ptx = grown;
        memcpy(l->ptx + l->ptx_len, data, len);
        l->ptx_len += len;
        l->ptx[l->ptx_len++] = '\n';
        l->ptx[l->ptx_len] = '\0';
        break;
    }
    case CU_JIT_INPUT_CUBIN:
    case CU_JIT_INPUT_OBJECT:
        if (size < 4
            || memcmp(data,
                      "\x7f"
                      "ELF",
                      4)
                   != 0)
            what = "stand-in: a CUBIN/OBJECT input is not an ELF image";
        break;
    case CU_JIT_INPUT_FATBINARY:
        if (size < 4 || memcmp(data, fatbin_magic, 4) != 0)
            what = "stand-in: a FATBINARY input has no fatbin header";
        break;
    case CU_JIT_INPUT_LIBRARY:
        if (size < 8 || memcmp(data, "!<arch>\n", 8) != 0)
            what = "stand-in: a LIBRARY input is not an ar archive";
        else
            l->nlibraries++;
        break;
    default:
        write_log(l->err, l->err_cap,
                  "stand-in: NVVM input needs LTO, which the stand-in "
                  "does not link");
        return CUDA_ERROR_INVALID_VALUE;
    }
    if (what != NULL) {
        write_log(l->err, l->err_cap, what);
        return CUDA_ERROR_INVALID_IMAGE;
    }
    (void)name;
    l->ninputs++;
    return CUDA_SUCCESS;
}

static CUresult
fake_cuLinkAddData(CUlinkState h, CUjitInputType type, void *data, size_t size, const char *name,
                   unsigned int n, CUjit_option *opts, void **vals)
{
    CUresult rc = enter(F_cuLinkAddData);
    fake_link *l;
    if (rc)
        return rc;
    if ((rc = link_options(n, opts, vals, NULL, NULL, NULL, NULL)) != CUDA_SUCCESS)
        return rc;
    pthread_mutex_lock(&lock);
    if ((l = link_ok(h)) == NULL)
        rc = CUDA_ERROR_INVALID_HANDLE;
    else if (l->image != NULL)
        rc = CUDA_ERROR_INVALID_VALUE;
    else
        rc = link_add(l, type, data, size, name);
    unlock();
    return rc;
}

static CUresult
fake_cuLinkAddFile(CUlinkState h, CUjitInputType type, const char *path, unsigned int n,
                   CUjit_option *opts, void **vals)
{
    CUresult rc = enter(F_cuLinkAddFile);
    fake_link *l;
    FILE *f;
    char *data = NULL;
    long size;
    if (rc)
        return rc;
    if (path == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    if ((rc = link_options(n, opts, vals, NULL, NULL, NULL, NULL)) != CUDA_SUCCESS)
        return rc;
    pthread_mutex_lock(&lock);
    if ((l = link_ok(h)) == NULL || l->image != NULL) {
        unlock();
        return l == NULL ? CUDA_ERROR_INVALID_HANDLE : CUDA_ERROR_INVALID_VALUE;
    }
    f = fopen(path, "rb");
    if (f == NULL) {
        write_log(l->err, l->err_cap, "stand-in: cannot open the input file");
        unlock();
        return CUDA_ERROR_FILE_NOT_FOUND;
    }
    if (fseek(f, 0, SEEK_END) == 0 && (size = ftell(f)) > 0 && fseek(f, 0, SEEK_SET) == 0
        && (data = malloc((size_t)size)) != NULL && fread(data, 1, (size_t)size, f) == (size_t)size)
        rc = link_add(l, type, data, (size_t)size, path);
    else
        rc = data == NULL && size > 0 ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_ERROR_INVALID_VALUE;
    fclose(f);
    free(data);
    unlock();
    return rc;
}

/* Whether `name` (of length n) is defined as ".entry name" in the PTX. */
static int
ptx_defines_entry(const char *ptx, const char *name, size_t n)
{
    const char *p = ptx;
    while ((p = strstr(p, ".entry")) != NULL) {
        const char *b = p, *q = skip_ws(p + 6);
        while (b > ptx && b[-1] != '\n')
            b--;
        p += 6;
        if (memmem(b, (size_t)(q - b), ".extern", 7) != NULL)
            continue;
        if (strncmp(q, name, n) == 0 && (isspace((unsigned char)q[n]) || q[n] == '('))
            return 1;
    }
    return 0;
}

/* The first unresolved reference of the concatenated PTX into buf (empty:
 * none).  Lock held. */
static void
link_unresolved(fake_link *l, char *buf, size_t cap)
{
    const char *p = l->ptx;
    buf[0] = '\0';
    while (p != NULL && (p = strstr(p, ".extern")) != NULL) {
        const char *q = skip_ws(p + 7);
        char name[256];
        size_t n = 0;
        p += 7;
        if (strncmp(q, ".entry", 6) == 0) {
            q = skip_ws(q + 6);
            while (q[n] && !isspace((unsigned char)q[n]) && q[n] != '(' && n + 1 < sizeof name)
                n++;
            memcpy(name, q, n);
            name[n] = '\0';
            if (!ptx_defines_entry(l->ptx, name, n)) {
                snprintf(buf, cap, "stand-in: undefined reference to kernel '%s'", name);
                return;
            }
        } else if (strncmp(q, ".func", 5) == 0 && l->nlibraries == 0) {
            const char *cdp = strstr(q, "__cudaCDP");
            const char *eol = strchr(q, '\n');
            if (cdp != NULL && (eol == NULL || cdp < eol)) {
                snprintf(buf, cap,
                         "stand-in: undefined reference to the device runtime "
                         "(__cudaCDP*): link libcudadevrt.a as a LIBRARY input");
                return;
            }
        }
    }
}

static CUresult
fake_cuLinkComplete(CUlinkState h, void **cubin, size_t *size)
{
    CUresult rc = enter(F_cuLinkComplete);
    fake_link *l;
    char why[512];
    if (rc)
        return rc;
    if (cubin == NULL || size == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    if ((l = link_ok(h)) == NULL) {
        unlock();
        return CUDA_ERROR_INVALID_HANDLE;
    }
    if (l->image == NULL) {
        if (l->ptx == NULL) {
            write_log(l->err, l->err_cap,
                      l->ninputs ? "stand-in: no PTX input; the "
                                   "stand-in links PTX only"
                                 : "stand-in: nothing to link");
            unlock();
            return CUDA_ERROR_INVALID_VALUE;
        }
        link_unresolved(l, why, sizeof why);
        if (why[0] != '\0') {
            write_log(l->err, l->err_cap, why);
            unlock();
            return CUDA_ERROR_INVALID_IMAGE;
        }
        l->image = malloc(l->ptx_len + 1);
        if (l->image == NULL) {
            unlock();
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
        memcpy(l->image, l->ptx, l->ptx_len + 1);
        write_log(l->info, l->info_cap,
                  "stand-in: PTX inputs concatenated; nothing was "
                  "compiled");
    }
    *cubin = l->image;
    *size = l->ptx_len + 1;
    unlock();
    return CUDA_SUCCESS;
}

static CUresult
fake_cuLinkDestroy(CUlinkState h)
{
    CUresult rc = enter(F_cuLinkDestroy);
    fake_link *l;
    if (rc)
        return rc;
    pthread_mutex_lock(&lock);
    if ((l = link_ok(h)) == NULL) {
        rc = CUDA_ERROR_INVALID_HANDLE;
    } else {
        free(l->ptx);
        free(l->image);
        l->ptx = l->image = NULL;
        l->alive = 0; /* kept, dead, to catch reuse */
        live_links--;
    }
    unlock();
    return rc;
}

/* ---- CUDA arrays (host buffers), texture and surface objects (records of
 * their descriptors), tensor maps (a readable encoding, below) ---- */
enum { MAGIC_ARRAY = 0x41525231, MAGIC_TEX = 0x54455831, MAGIC_SURF = 0x53524631 };

typedef struct fake_array {
    unsigned magic;
    int alive;
    fake_ctx *ctx;
    CUDA_ARRAY3D_DESCRIPTOR desc;
    size_t esize;        /* bytes an element (all channels) */
    unsigned char *data; /* Width * max(Height,1) * max(Depth,1) elements */
    int users;           /* live texture/surface objects over it */
    struct fake_array *next_all;
} fake_array;

typedef struct fake_texobj {
    unsigned magic;
    int alive;
    fake_ctx *ctx;
    CUDA_RESOURCE_DESC res;
    CUDA_TEXTURE_DESC tex;
    fake_array *array;
    struct fake_texobj *next_all;
} fake_texobj;

static long live_arrays, live_textures, live_surfaces;
static fake_array *all_arrays;
static fake_texobj *all_texobjs;

static size_t
array_bytes(const fake_array *a)
{
    return a->desc.Width * (a->desc.Height ? a->desc.Height : 1)
           * (a->desc.Depth ? a->desc.Depth : 1) * a->esize;
}

/* the context's arrays and texture/surface objects go with it.  Lock held. */
static void
reap_arrays(fake_ctx *c)
{
    fake_texobj *o;
    fake_array *a;
    for (o = all_texobjs; o != NULL; o = o->next_all) {
        if (o->ctx == c && o->alive) {
            o->alive = 0;
            if (o->magic == MAGIC_SURF)
                live_surfaces--;
            else
                live_textures--;
            reaped++;
        }
    }
    for (a = all_arrays; a != NULL; a = a->next_all) {
        if (a->ctx == c && a->alive) {
            a->alive = 0;
            dev_used[c->dev] -= array_bytes(a);
            free(a->data);
            a->data = NULL;
            live_arrays--;
            reaped++;
        }
    }
}

static size_t
format_size(CUarray_format f)
{
    switch (f) {
    case CU_AD_FORMAT_UNSIGNED_INT8:
    case CU_AD_FORMAT_SIGNED_INT8: return 1;
    case CU_AD_FORMAT_UNSIGNED_INT16:
    case CU_AD_FORMAT_SIGNED_INT16:
    case CU_AD_FORMAT_HALF: return 2;
    case CU_AD_FORMAT_UNSIGNED_INT32:
    case CU_AD_FORMAT_SIGNED_INT32:
    case CU_AD_FORMAT_FLOAT: return 4;
    default: return 0;
    }
}

static fake_array *
array_ok(CUarray h)
{
    fake_array *a = (fake_array *)h;
    if (!known(a) || a->magic != MAGIC_ARRAY)
        return NULL;
    if (!a->alive) {
        stale_uses++;
        return NULL;
    }
    return a;
}

/* Lock held. */
static CUresult
array_create(CUarray *out, const CUDA_ARRAY3D_DESCRIPTOR *d)
{
    CUresult rc = CUDA_SUCCESS;
    fake_ctx *c = need_ctx(&rc);
    fake_array *a;
    size_t es, h, dd, n;
    unsigned known_flags = CUDA_ARRAY3D_LAYERED | CUDA_ARRAY3D_SURFACE_LDST | CUDA_ARRAY3D_CUBEMAP
                           | CUDA_ARRAY3D_TEXTURE_GATHER;
    if (c == NULL)
        return rc;
    if (out == NULL || d == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    es = format_size(d->Format) * d->NumChannels;
    if (es == 0 || (d->NumChannels != 1 && d->NumChannels != 2 && d->NumChannels != 4)
        || d->Width == 0 || (d->Flags & ~known_flags)
        || ((d->Flags & CUDA_ARRAY3D_LAYERED) && d->Depth == 0)
        || ((d->Flags & CUDA_ARRAY3D_CUBEMAP)
            && (d->Width != d->Height
                || ((d->Flags & CUDA_ARRAY3D_LAYERED) ? d->Depth % 6 : d->Depth != 6))))
        return CUDA_ERROR_INVALID_VALUE;
    h = d->Height ? d->Height : 1;
    dd = d->Depth ? d->Depth : 1;
    if (d->Width > (1u << 20) || h > (1u << 20) || dd > (1u << 20))
        return CUDA_ERROR_INVALID_VALUE;
    n = d->Width * h * dd * es;
    if (n > dev_memory - dev_used[c->dev])
        return CUDA_ERROR_OUT_OF_MEMORY;
    a = calloc(1, sizeof *a);
    if (a == NULL || (a->data = fill_alloc(n)) == NULL) {
        free(a);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    a->magic = MAGIC_ARRAY;
    a->alive = 1;
    a->ctx = c;
    a->desc = *d;
    a->esize = es;
    dev_used[c->dev] += n;
    remember(a);
    a->next_all = all_arrays;
    all_arrays = a;
    live_arrays++;
    *out = (CUarray)a;
    return CUDA_SUCCESS;
}

static CUresult
fake_cuArrayCreate(CUarray *out, const CUDA_ARRAY_DESCRIPTOR *d)
{
    CUresult rc = enter(F_cuArrayCreate);
    CUDA_ARRAY3D_DESCRIPTOR d3;
    if (rc)
        return rc;
    if (d == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    memset(&d3, 0, sizeof d3);
    d3.Width = d->Width;
    d3.Height = d->Height;
    d3.Format = d->Format;
    d3.NumChannels = d->NumChannels;
    pthread_mutex_lock(&lock);
    rc = array_create(out, &d3);
    unlock();
    return rc;
}

static CUresult
fake_cuArray3DCreate(CUarray *out, const CUDA_ARRAY3D_DESCRIPTOR *d)
{
    CUresult rc = enter(F_cuArray3DCreate);
    if (rc)
        return rc;
    pthread_mutex_lock(&lock);
    rc = array_create(out, d);
    unlock();
    return rc;
}

/* An array's memory goes (lock held); its handle stays known, dead. */
static void
array_release(fake_array *a)
{
    a->alive = 0;
    dev_used[a->ctx->dev] -= array_bytes(a);
    free(a->data);
    a->data = NULL;
    live_arrays--;
}

static CUresult
fake_cuArrayDestroy(CUarray h)
{
    CUresult rc = enter(F_cuArrayDestroy);
    fake_array *a;
    if (rc)
        return rc;
    pthread_mutex_lock(&lock);
    a = array_ok(h);
    if (a == NULL) {
        rc = CUDA_ERROR_INVALID_HANDLE;
    } else { /* (a texture object left over it reads freed memory) */
        array_release(a);
    }
    unlock();
    return rc;
}

static CUresult
fake_cuArrayGetDescriptor(CUDA_ARRAY_DESCRIPTOR *out, CUarray h)
{
    CUresult rc = enter(F_cuArrayGetDescriptor);
    fake_array *a;
    if (rc)
        return rc;
    pthread_mutex_lock(&lock);
    a = array_ok(h);
    if (a == NULL || out == NULL) {
        rc = a == NULL ? CUDA_ERROR_INVALID_HANDLE : CUDA_ERROR_INVALID_VALUE;
    } else {
        out->Width = a->desc.Width;
        out->Height = a->desc.Height;
        out->Format = a->desc.Format;
        out->NumChannels = a->desc.NumChannels;
    }
    unlock();
    return rc;
}

static CUresult
fake_cuArray3DGetDescriptor(CUDA_ARRAY3D_DESCRIPTOR *out, CUarray h)
{
    CUresult rc = enter(F_cuArray3DGetDescriptor);
    fake_array *a;
    if (rc)
        return rc;
    pthread_mutex_lock(&lock);
    a = array_ok(h);
    if (a == NULL || out == NULL)
        rc = a == NULL ? CUDA_ERROR_INVALID_HANDLE : CUDA_ERROR_INVALID_VALUE;
    else
        *out = a->desc;
    unlock();
    return rc;
}

/* One side of a 3-D copy: the address of each row comes from row(). Lock held. */
typedef struct {
    unsigned char *base;
    size_t pitch, slice; /* bytes between rows, between slices */
} side3d;

static CUresult
side_3d(CUmemorytype t, const void *host, CUdeviceptr dev, CUarray arr, size_t x, size_t y,
        size_t z, size_t pitch, size_t height, const CUDA_MEMCPY3D *p, side3d *out)
{
    size_t w = p->WidthInBytes, h = p->Height, d = p->Depth;
    if (t == CU_MEMORYTYPE_ARRAY) {
        fake_array *a = array_ok(arr);
        size_t rowb, ah, ad;
        if (a == NULL)
            return CUDA_ERROR_INVALID_HANDLE;
        rowb = a->desc.Width * a->esize;
        ah = a->desc.Height ? a->desc.Height : 1;
        ad = a->desc.Depth ? a->desc.Depth : 1;
        if (x % a->esize || x + w > rowb || y + h > ah || z + d > ad)
            return CUDA_ERROR_INVALID_VALUE;
        out->pitch = rowb;
        out->slice = rowb * ah;
        out->base = a->data + z * out->slice + y * rowb + x;
        return CUDA_SUCCESS;
    }
    if (pitch < x + w || (d > 1 && height < y + h))
        return CUDA_ERROR_INVALID_VALUE;
    out->pitch = pitch;
    out->slice = pitch * height;
    if (t == CU_MEMORYTYPE_HOST) {
        if (host == NULL)
            return CUDA_ERROR_INVALID_VALUE;
        out->base = (unsigned char *)host + z * out->slice + y * pitch + x;
        return CUDA_SUCCESS;
    }
    if (t != CU_MEMORYTYPE_DEVICE && t != CU_MEMORYTYPE_UNIFIED)
        return CUDA_ERROR_INVALID_VALUE;
    out->base = (unsigned char *)(uintptr_t)dev + z * out->slice + y * pitch + x;
    if (!device_range_ok((CUdeviceptr)(uintptr_t)out->base,
                         (d - 1) * out->slice + (h - 1) * pitch + w))
        return CUDA_ERROR_INVALID_VALUE;
    return CUDA_SUCCESS;
}

static CUresult
copy3d(const CUDA_MEMCPY3D *p, CUstream s, int check_s)
{
    CUresult rc = CUDA_SUCCESS;
    side3d src, dst;
    size_t i, j;
    fake_ctx *c;
    if (p == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    if (p->WidthInBytes == 0 || p->Height == 0 || p->Depth == 0 || p->srcLOD || p->dstLOD)
        return p->srcLOD || p->dstLOD ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
    pthread_mutex_lock(&lock);
    c = need_ctx(&rc);
    if (c != NULL && check_s)
        rc = check_stream(s, c);
    if (rc == CUDA_SUCCESS)
        rc = side_3d(p->srcMemoryType, p->srcHost, p->srcDevice, p->srcArray, p->srcXInBytes,
                     p->srcY, p->srcZ, p->srcPitch, p->srcHeight, p, &src);
    if (rc == CUDA_SUCCESS)
        rc = side_3d(p->dstMemoryType, p->dstHost, p->dstDevice, p->dstArray, p->dstXInBytes,
                     p->dstY, p->dstZ, p->dstPitch, p->dstHeight, p, &dst);
    if (rc == CUDA_SUCCESS && check_s && cap_stream(s) != NULL) { /* captured: a node */
        struct fake_node *node = cap_node(cap_stream(s), CU_GRAPH_NODE_TYPE_MEMCPY, &rc);
        if (node != NULL)
            cap_memcpy_pitched(node, dst.base, src.base, p->WidthInBytes, p->Height, p->Depth,
                               dst.pitch, src.pitch, dst.slice, src.slice);
        unlock();
        return rc;
    }
    /* on the legacy stream: it waits for a blocking capturing stream */
    if (rc == CUDA_SUCCESS && (!check_s || IS_LEGACY(s)))
        rc = cap_violation(c, CUDA_ERROR_STREAM_CAPTURE_IMPLICIT);
    if (rc == CUDA_SUCCESS
        && (p->srcMemoryType == CU_MEMORYTYPE_ARRAY || p->dstMemoryType == CU_MEMORYTYPE_ARRAY)) {
        /* the driver is busy here (fakecuda_delay); an array destroyed
         * meanwhile is a use after free: counted, nothing moves */
        unlock();
        pause_here();
        pthread_mutex_lock(&lock);
        if ((p->srcMemoryType == CU_MEMORYTYPE_ARRAY && array_ok(p->srcArray) == NULL)
            || (p->dstMemoryType == CU_MEMORYTYPE_ARRAY && array_ok(p->dstArray) == NULL)) {
            unlock();
            return CUDA_SUCCESS;
        }
    }
    if (rc == CUDA_SUCCESS) /* under the lock: an array cannot go meanwhile */
        for (i = 0; i < p->Depth; i++)
            for (j = 0; j < p->Height; j++)
                memmove(dst.base + i * dst.slice + j * dst.pitch,
                        src.base + i * src.slice + j * src.pitch, p->WidthInBytes);
    unlock();
    return rc;
}

static CUresult
fake_cuMemcpy3D(const CUDA_MEMCPY3D *p)
{
    CUresult rc = enter(F_cuMemcpy3D);
    if (rc)
        return rc;
    return copy3d(p, NULL, 0);
}

static CUresult
fake_cuMemcpy3DAsync(const CUDA_MEMCPY3D *p, CUstream s)
{
    CUresult rc = enter(F_cuMemcpy3DAsync);
    if (rc)
        return rc;
    return copy3d(p, s, 1);
}

/* cuMemcpy3DPeer[Async]: the contexts of the non-array sides must be alive
 * (the driver ignores an array side's); then the copy of copy3d. */
static CUresult
copy3d_peer(const CUDA_MEMCPY3D_PEER *pp, CUstream s, int check_s)
{
    CUDA_MEMCPY3D p;
    int ok;
    if (pp == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    ok = (pp->srcMemoryType == CU_MEMORYTYPE_ARRAY || ctx_ok((fake_ctx *)pp->srcContext))
         && (pp->dstMemoryType == CU_MEMORYTYPE_ARRAY || ctx_ok((fake_ctx *)pp->dstContext));
    unlock();
    if (!ok)
        return CUDA_ERROR_INVALID_CONTEXT;
    memset(&p, 0, sizeof p);
    p.srcXInBytes = pp->srcXInBytes;
    p.srcY = pp->srcY;
    p.srcZ = pp->srcZ;
    p.srcLOD = pp->srcLOD;
    p.srcMemoryType = pp->srcMemoryType;
    p.srcHost = pp->srcHost;
    p.srcDevice = pp->srcDevice;
    p.srcArray = pp->srcArray;
    p.srcPitch = pp->srcPitch;
    p.srcHeight = pp->srcHeight;
    p.dstXInBytes = pp->dstXInBytes;
    p.dstY = pp->dstY;
    p.dstZ = pp->dstZ;
    p.dstLOD = pp->dstLOD;
    p.dstMemoryType = pp->dstMemoryType;
    p.dstHost = pp->dstHost;
    p.dstDevice = pp->dstDevice;
    p.dstArray = pp->dstArray;
    p.dstPitch = pp->dstPitch;
    p.dstHeight = pp->dstHeight;
    p.WidthInBytes = pp->WidthInBytes;
    p.Height = pp->Height;
    p.Depth = pp->Depth;
    return copy3d(&p, s, check_s);
}

static CUresult
fake_cuMemcpy3DPeer(const CUDA_MEMCPY3D_PEER *p)
{
    CUresult rc = enter(F_cuMemcpy3DPeer);
    if (rc)
        return rc;
    return copy3d_peer(p, NULL, 0);
}

static CUresult
fake_cuMemcpy3DPeerAsync(const CUDA_MEMCPY3D_PEER *p, CUstream s)
{
    CUresult rc = enter(F_cuMemcpy3DPeerAsync);
    if (rc)
        return rc;
    return copy3d_peer(p, s, 1);
}

/* The byte range [off, off + n) of a live 1-D array (the driver documents
 * cuMemcpyDtoA/AtoD/AtoA for 1-D arrays), offset and count whole
 * elements.  Lock held. */
static CUresult
array_range(CUarray h, size_t off, size_t n, unsigned char **out)
{
    fake_array *a = array_ok(h);
    size_t total;
    if (a == NULL)
        return CUDA_ERROR_INVALID_HANDLE;
    total = array_bytes(a);
    if (a->desc.Height || a->desc.Depth || off % a->esize || n % a->esize || n > total
        || off > total - n)
        return CUDA_ERROR_INVALID_VALUE;
    *out = a->data + off;
    return CUDA_SUCCESS;
}

/* One linear copy with an array side: dev/darr is the destination,
 * sdev/sarr the source (an array handle, or a device pointer when the
 * handle is NULL). */
static CUresult
array_linear_copy(CUarray darr, size_t doff, CUdeviceptr ddev, CUarray sarr, size_t soff,
                  CUdeviceptr sdev, size_t n)
{
    CUresult rc = CUDA_SUCCESS;
    unsigned char *dst = NULL, *src = NULL;
    fake_ctx *c;
    pthread_mutex_lock(&lock);
    c = need_ctx(&rc);
    if (c == NULL)
        goto done;
    if (darr != NULL) {
        if ((rc = array_range(darr, doff, n, &dst)) != CUDA_SUCCESS)
            goto done;
    } else if (!device_range_ok(ddev, n)) {
        rc = CUDA_ERROR_INVALID_VALUE;
        goto done;
    } else {
        dst = DPTR(ddev);
    }
    if (sarr != NULL) {
        if ((rc = array_range(sarr, soff, n, &src)) != CUDA_SUCCESS)
            goto done;
    } else if (!device_range_ok(sdev, n)) {
        rc = CUDA_ERROR_INVALID_VALUE;
        goto done;
    } else {
        src = DPTR(sdev);
    }
    if ((rc = cap_violation(c, CUDA_ERROR_STREAM_CAPTURE_IMPLICIT)) != CUDA_SUCCESS)
        goto done;
    /* the driver is busy here (fakecuda_delay); an array destroyed (or
     * memory freed) meanwhile is a use after free: counted, nothing moves */
    unlock();
    pause_here();
    pthread_mutex_lock(&lock);
    if ((darr != NULL && array_ok(darr) == NULL) || (sarr != NULL && array_ok(sarr) == NULL))
        goto done;
    if ((darr == NULL && !device_range_ok(ddev, n))
        || (sarr == NULL && !device_range_ok(sdev, n))) {
        stale_uses++;
        goto done;
    }
    if (n) /* under the lock: an array cannot go meanwhile */
        memmove(dst, src, n);
done:
    unlock();
    return rc;
}

static CUresult
fake_cuMemcpyDtoA(CUarray dst, size_t off, CUdeviceptr src, size_t n)
{
    CUresult rc = enter(F_cuMemcpyDtoA);
    if (rc)
        return rc;
    return array_linear_copy(dst, off, 0, NULL, 0, src, n);
}

static CUresult
fake_cuMemcpyAtoD(CUdeviceptr dst, CUarray src, size_t off, size_t n)
{
    CUresult rc = enter(F_cuMemcpyAtoD);
    if (rc)
        return rc;
    return array_linear_copy(NULL, 0, dst, src, off, 0, n);
}

static CUresult
fake_cuMemcpyAtoA(CUarray dst, size_t doff, CUarray src, size_t soff, size_t n)
{
    CUresult rc = enter(F_cuMemcpyAtoA);
    if (rc)
        return rc;
    return array_linear_copy(dst, doff, 0, src, soff, 0, n);
}

/* Lock held.  Checks a resource as the driver documents it. */
static CUresult
resource_ok(const CUDA_RESOURCE_DESC *r, fake_array **arr)
{
    size_t es;
    *arr = NULL;
    if (r == NULL || r->flags)
        return CUDA_ERROR_INVALID_VALUE;
    switch (r->resType) {
    case CU_RESOURCE_TYPE_ARRAY:
        if ((*arr = array_ok(r->res.array.hArray)) == NULL)
            return CUDA_ERROR_INVALID_HANDLE;
        return CUDA_SUCCESS;
    case CU_RESOURCE_TYPE_LINEAR:
        es = format_size(r->res.linear.format) * r->res.linear.numChannels;
        if (es == 0 || r->res.linear.devPtr % 512 || r->res.linear.sizeInBytes == 0
            || !device_range_ok(r->res.linear.devPtr, r->res.linear.sizeInBytes))
            return CUDA_ERROR_INVALID_VALUE;
        return CUDA_SUCCESS;
    case CU_RESOURCE_TYPE_PITCH2D:
        es = format_size(r->res.pitch2D.format) * r->res.pitch2D.numChannels;
        if (es == 0 || r->res.pitch2D.devPtr % 512 || r->res.pitch2D.pitchInBytes % 32
            || r->res.pitch2D.width == 0 || r->res.pitch2D.height == 0
            || r->res.pitch2D.pitchInBytes < r->res.pitch2D.width * es
            || !device_range_ok(r->res.pitch2D.devPtr,
                                (r->res.pitch2D.height - 1) * r->res.pitch2D.pitchInBytes
                                    + r->res.pitch2D.width * es))
            return CUDA_ERROR_INVALID_VALUE;
        return CUDA_SUCCESS;
    default: return CUDA_ERROR_INVALID_VALUE;
    }
}

static CUresult
texobj_create(unsigned long long *out, const CUDA_RESOURCE_DESC *r, const CUDA_TEXTURE_DESC *t,
              int surface)
{
    CUresult rc = CUDA_SUCCESS;
    fake_ctx *c;
    fake_array *a;
    fake_texobj *o;
    pthread_mutex_lock(&lock);
    c = need_ctx(&rc);
    if (c == NULL)
        goto done;
    if (out == NULL || (!surface && t == NULL)) {
        rc = CUDA_ERROR_INVALID_VALUE;
        goto done;
    }
    if ((rc = resource_ok(r, &a)) != CUDA_SUCCESS)
        goto done;
    if (surface && (a == NULL || !(a->desc.Flags & CUDA_ARRAY3D_SURFACE_LDST))) {
        rc = CUDA_ERROR_INVALID_VALUE;
        goto done;
    }
    if (!surface) {
        CUarray_format f = r->resType == CU_RESOURCE_TYPE_ARRAY    ? a->desc.Format
                           : r->resType == CU_RESOURCE_TYPE_LINEAR ? r->res.linear.format
                                                                   : r->res.pitch2D.format;
        int i;
        for (i = 0; i < 3; i++)
            if ((unsigned)t->addressMode[i] > CU_TR_ADDRESS_MODE_BORDER) {
                rc = CUDA_ERROR_INVALID_VALUE;
                goto done;
            }
        /* linear filtering returns floats: not with integer reads */
        if (t->filterMode == CU_TR_FILTER_MODE_LINEAR && (t->flags & CU_TRSF_READ_AS_INTEGER)
            && f != CU_AD_FORMAT_FLOAT && f != CU_AD_FORMAT_HALF) {
            rc = CUDA_ERROR_INVALID_VALUE;
            goto done;
        }
    }
    o = calloc(1, sizeof *o);
    if (o == NULL) {
        rc = CUDA_ERROR_OUT_OF_MEMORY;
        goto done;
    }
    o->magic = surface ? MAGIC_SURF : MAGIC_TEX;
    o->alive = 1;
    o->ctx = c;
    o->res = *r;
    if (t)
        o->tex = *t;
    o->array = a;
    if (a)
        a->users++;
    remember(o);
    o->next_all = all_texobjs;
    all_texobjs = o;
    if (surface)
        live_surfaces++;
    else
        live_textures++;
    *out = (unsigned long long)(uintptr_t)o;
done:
    unlock();
    return rc;
}

static CUresult
texobj_destroy(unsigned long long h, int surface)
{
    CUresult rc = CUDA_SUCCESS;
    fake_texobj *o = (fake_texobj *)(uintptr_t)h;
    pthread_mutex_lock(&lock);
    if (!known(o) || o->magic != (surface ? MAGIC_SURF : MAGIC_TEX)) {
        rc = CUDA_ERROR_INVALID_VALUE;
    } else if (!o->alive) {
        stale_uses++;
        rc = CUDA_ERROR_INVALID_VALUE;
    } else {
        o->alive = 0;
        if (o->array)
            o->array->users--;
        if (surface)
            live_surfaces--;
        else
            live_textures--;
    }
    unlock();
    return rc;
}

static CUresult
fake_cuTexObjectCreate(CUtexObject *out, const CUDA_RESOURCE_DESC *r, const CUDA_TEXTURE_DESC *t,
                       const CUDA_RESOURCE_VIEW_DESC *v)
{
    CUresult rc = enter(F_cuTexObjectCreate);
    if (rc)
        return rc;
    if (v != NULL)
        return CUDA_ERROR_NOT_SUPPORTED; /* views: not in the stand-in */
    return texobj_create((unsigned long long *)out, r, t, 0);
}

static CUresult
fake_cuTexObjectDestroy(CUtexObject h)
{
    CUresult rc = enter(F_cuTexObjectDestroy);
    if (rc)
        return rc;
    return texobj_destroy(h, 0);
}

static CUresult
fake_cuSurfObjectCreate(CUsurfObject *out, const CUDA_RESOURCE_DESC *r)
{
    CUresult rc = enter(F_cuSurfObjectCreate);
    if (rc)
        return rc;
    return texobj_create((unsigned long long *)out, r, NULL, 1);
}

static CUresult
fake_cuSurfObjectDestroy(CUsurfObject h)
{
    CUresult rc = enter(F_cuSurfObjectDestroy);
    if (rc)
        return rc;
    return texobj_destroy(h, 1);
}

/* The tests' view of a texture or surface object: its resource and texture
 * descriptors; -1 for an unknown or dead handle. */
EXPORT int
fakecuda_texobj(unsigned long long h, CUDA_RESOURCE_DESC *r, CUDA_TEXTURE_DESC *t)
{
    fake_texobj *o = (fake_texobj *)(uintptr_t)h;
    int ok;
    pthread_mutex_lock(&lock);
    ok = known(o) && (o->magic == MAGIC_TEX || o->magic == MAGIC_SURF) && o->alive;
    if (ok) {
        if (r)
            *r = o->res;
        if (t)
            *t = o->tex;
    }
    unlock();
    return ok ? 0 : -1;
}

/* Tensor maps.  The driver's encoding is opaque; the stand-in writes one the
 * tests can read (little-endian 64-bit words):
 *   [0] "FAKETMAP"   [1] global address
 *   [2] data type | rank << 8 | interleave << 16 | swizzle << 24 | l2 << 32
 *       | oob fill << 40 | im2col << 48
 *   [3..7]  globalDim[0..4] (innermost first)   [8..11] globalStrides[0..3]
 *   [12] boxDim[0..3], 16 bits each  [13] boxDim[4] | elementStrides[0..4] << 16 + 8*i
 *   [14] im2col: channelsPerPixel | pixelsPerColumn << 16
 *   [15] im2col: lower corner (int8 each, 3) << 0..23 | upper corner << 24..47
 * after the checks the driver documents for cuTensorMapEncodeTiled. */
static const size_t tmap_sizes[] = {1, 2, 4, 4, 8, 8, 2, 4, 8, 2, 4, 4, 4};

static CUresult
tmap_check(CUtensorMap *m, CUtensorMapDataType t, cuuint32_t rank, void *addr,
           const cuuint64_t *dims, const cuuint64_t *strides, const cuuint32_t *es,
           CUtensorMapInterleave il, CUtensorMapSwizzle sw, CUtensorMapL2promotion l2,
           CUtensorMapFloatOOBfill oob, int min_rank)
{
    cuuint32_t i;
    if (m == NULL || ((uintptr_t)m % 64) || (unsigned)t >= 13 || rank < (cuuint32_t)min_rank
        || rank > 5 || dims == NULL || es == NULL || (rank > 1 && strides == NULL)
        || (uintptr_t)addr % (il == CU_TENSOR_MAP_INTERLEAVE_32B ? 32 : 16) || (unsigned)il > 2
        || (unsigned)sw > 6 || (unsigned)l2 > 3 || (unsigned)oob > 1
        || (il != CU_TENSOR_MAP_INTERLEAVE_NONE && rank < 3))
        return CUDA_ERROR_INVALID_VALUE;
    for (i = 0; i < rank; i++) {
        if (dims[i] == 0 || dims[i] > (1ull << 32) || es[i] == 0 || es[i] > 8)
            return CUDA_ERROR_INVALID_VALUE;
        if (i + 1 < rank
            && (strides[i] % (il == CU_TENSOR_MAP_INTERLEAVE_32B ? 32 : 16)
                || strides[i] >= (1ull << 40)))
            return CUDA_ERROR_INVALID_VALUE;
    }
    memset(m, 0, sizeof *m);
    memcpy(&m->opaque[0], "FAKETMAP", 8);
    m->opaque[1] = (cuuint64_t)(uintptr_t)addr;
    m->opaque[2] = (cuuint64_t)t | (cuuint64_t)rank << 8 | (cuuint64_t)il << 16
                   | (cuuint64_t)sw << 24 | (cuuint64_t)l2 << 32 | (cuuint64_t)oob << 40;
    for (i = 0; i < rank; i++) {
        m->opaque[3 + i] = dims[i];
        if (i + 1 < rank)
            m->opaque[8 + i] = strides[i];
        m->opaque[13] |= (cuuint64_t)es[i] << (16 + 8 * i);
    }
    return CUDA_SUCCESS;
}

static CUresult
fake_cuTensorMapEncodeTiled(CUtensorMap *m, CUtensorMapDataType t, cuuint32_t rank, void *addr,
                            const cuuint64_t *dims, const cuuint64_t *strides,
                            const cuuint32_t *box, const cuuint32_t *es, CUtensorMapInterleave il,
                            CUtensorMapSwizzle sw, CUtensorMapL2promotion l2,
                            CUtensorMapFloatOOBfill oob)
{
    CUresult rc = enter(F_cuTensorMapEncodeTiled);
    cuuint32_t i;
    if (rc)
        return rc;
    if (box == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    for (i = 0; i < rank && i < 5; i++)
        if (box[i] == 0 || box[i] > 256)
            return CUDA_ERROR_INVALID_VALUE;
    if ((unsigned)t < 13 && il == CU_TENSOR_MAP_INTERLEAVE_NONE && rank >= 1
        && (box[0] * tmap_sizes[t]) % 16)
        return CUDA_ERROR_INVALID_VALUE;
    if ((unsigned)t < 13 && il == CU_TENSOR_MAP_INTERLEAVE_NONE && sw != CU_TENSOR_MAP_SWIZZLE_NONE
        && rank >= 1
        && box[0] * tmap_sizes[t] > (sw == CU_TENSOR_MAP_SWIZZLE_32B   ? 32u
                                     : sw == CU_TENSOR_MAP_SWIZZLE_64B ? 64u
                                                                       : 128u))
        return CUDA_ERROR_INVALID_VALUE;
    rc = tmap_check(m, t, rank, addr, dims, strides, es, il, sw, l2, oob, 1);
    if (rc)
        return rc;
    for (i = 0; i < rank; i++) {
        if (i < 4)
            m->opaque[12] |= (cuuint64_t)box[i] << (16 * i);
        else
            m->opaque[13] |= box[i];
    }
    return CUDA_SUCCESS;
}

static CUresult
fake_cuTensorMapEncodeIm2col(CUtensorMap *m, CUtensorMapDataType t, cuuint32_t rank, void *addr,
                             const cuuint64_t *dims, const cuuint64_t *strides, const int *lower,
                             const int *upper, cuuint32_t cpp, cuuint32_t ppc, const cuuint32_t *es,
                             CUtensorMapInterleave il, CUtensorMapSwizzle sw,
                             CUtensorMapL2promotion l2, CUtensorMapFloatOOBfill oob)
{
    CUresult rc = enter(F_cuTensorMapEncodeIm2col);
    cuuint32_t i;
    if (rc)
        return rc;
    if (lower == NULL || upper == NULL || cpp == 0 || cpp > 256 || ppc == 0 || ppc > 1024)
        return CUDA_ERROR_INVALID_VALUE;
    rc = tmap_check(m, t, rank, addr, dims, strides, es, il, sw, l2, oob, 3);
    if (rc)
        return rc;
    m->opaque[2] |= (cuuint64_t)1 << 48;
    m->opaque[14] = (cuuint64_t)cpp | (cuuint64_t)ppc << 16;
    for (i = 0; i + 2 < rank; i++)
        m->opaque[15] |= (cuuint64_t)(uint8_t)(int8_t)lower[i] << (8 * i)
                         | (cuuint64_t)(uint8_t)(int8_t)upper[i] << (24 + 8 * i);
    return CUDA_SUCCESS;
}

/* ---- graphs: host-side node lists; capture records a stream's work as
 * nodes; launching a GraphExec replays them (copies and memsets move bytes,
 * kernel nodes are recorded like launches and logged, host nodes run) ---- */
enum { MAGIC_GRAPH = 0x47524131, MAGIC_NODE = 0x4e4f4431, MAGIC_EXEC = 0x47455831 };
#define MAXCOND 4096

typedef struct fake_graph fake_graph;
typedef struct fake_node {
    unsigned magic;
    int alive;
    fake_graph *graph;
    int type, idx;
    int ndeps;
    struct fake_node **deps; /* malloc'd */
    struct fake_node *orig;  /* in an exec's copy: the node copied */
    struct fake_node *next;  /* the graph's order */
    /* kernel */
    fake_func *func;
    unsigned grid[3], block[3], shared;
    unsigned char *params;
    size_t psize;
    /* memcpy */
    void *dst;
    const void *src;
    size_t n;
    int dst_dev, src_dev;
    /* a pitched memcpy (rows > 0): depth slices of rows rows of n bytes */
    size_t rows, depth, dpitch, spitch, dslice, sslice;
    /* memset */
    CUdeviceptr mdst;
    unsigned value, esize;
    size_t width, height, pitch;
    /* host */
    CUhostFn fn;
    void *user;
    /* event record / wait */
    fake_event *event;
    /* child graph (owned copy) */
    fake_graph *child;
    /* mem alloc / free */
    CUdeviceptr dptr;
    size_t bytes;
    /* conditional */
    CUgraphConditionalHandle cond;
    int ctype;
    unsigned csize;
    fake_graph *bodies[16];
} fake_node;

struct fake_graph {
    unsigned magic;
    int alive;
    fake_ctx *ctx;
    fake_node *first, *last;
    int count;
    int sub;                   /* a child copy or conditional body: dies with its node */
    struct fake_graph *parent; /* a conditional body: the graph of its node */
};

typedef struct {
    unsigned magic;
    int alive;
    fake_graph *g;   /* the executable copy */
    fake_graph *src; /* the graph instantiated (its nodes are the update keys) */
} fake_exec;

static long live_graphs, live_execs;
static unsigned cond_value[MAXCOND], cond_default[MAXCOND];
static int cond_assign[MAXCOND], cond_count;
static char *replay_log;
static size_t replay_len, replay_cap;
static int captures_active;

static fake_graph *
graph_ok(CUgraph h)
{
    fake_graph *g = (fake_graph *)h;
    if (!known(g) || g->magic != MAGIC_GRAPH)
        return NULL;
    if (!g->alive) {
        stale_uses++;
        return NULL;
    }
    return g;
}

static fake_node *
node_ok(CUgraphNode h)
{
    fake_node *n = (fake_node *)h;
    if (!known(n) || n->magic != MAGIC_NODE)
        return NULL;
    if (!n->alive) {
        stale_uses++;
        return NULL;
    }
    return n;
}

static fake_exec *
exec_ok(CUgraphExec h)
{
    fake_exec *e = (fake_exec *)h;
    if (!known(e) || e->magic != MAGIC_EXEC)
        return NULL;
    if (!e->alive) {
        stale_uses++;
        return NULL;
    }
    return e;
}

static fake_graph *
graph_new(fake_ctx *c, int sub)
{
    fake_graph *g = calloc(1, sizeof *g);
    if (g == NULL)
        return NULL;
    g->magic = MAGIC_GRAPH;
    g->alive = 1;
    g->ctx = c;
    g->sub = sub;
    remember(g);
    if (!sub)
        live_graphs++;
    return g;
}

/* a new node of g after deps (checked to be g's); lock held */
static fake_node *
node_add(fake_graph *g, int type, const CUgraphNode *deps, size_t ndeps, CUresult *rc)
{
    fake_node *n;
    size_t i;
    if (ndeps > 0 && deps == NULL) {
        *rc = CUDA_ERROR_INVALID_VALUE;
        return NULL;
    }
    for (i = 0; i < ndeps; i++) {
        fake_node *d = node_ok(deps[i]);
        if (d == NULL || d->graph != g) {
            *rc = CUDA_ERROR_INVALID_VALUE;
            return NULL;
        }
    }
    n = calloc(1, sizeof *n);
    if (n == NULL || (ndeps && (n->deps = calloc(ndeps, sizeof *n->deps)) == NULL)) {
        free(n);
        *rc = CUDA_ERROR_OUT_OF_MEMORY;
        return NULL;
    }
    n->magic = MAGIC_NODE;
    n->alive = 1;
    n->graph = g;
    n->type = type;
    n->idx = g->count++;
    n->ndeps = (int)ndeps;
    for (i = 0; i < ndeps; i++)
        n->deps[i] = (fake_node *)deps[i];
    if (g->last)
        g->last->next = n;
    else
        g->first = n;
    g->last = n;
    remember(n);
    *rc = CUDA_SUCCESS;
    return n;
}

/* kernel parameters into a node; lock held */
static CUresult
node_params(fake_node *n, fake_func *f, void **params, void **extra)
{
    int i;
    if (f->param_bytes > 4096)
        return CUDA_ERROR_INVALID_VALUE;
    if (params == NULL && extra == NULL && f->nparams > 0)
        return CUDA_ERROR_INVALID_VALUE;
    free(n->params);
    n->params = calloc(1, f->param_bytes ? f->param_bytes : 1);
    if (n->params == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    n->psize = f->param_bytes;
    n->func = f;
    if (params != NULL) {
        for (i = 0; i < f->nparams; i++) {
            if (params[i] == NULL)
                return CUDA_ERROR_INVALID_VALUE;
            memcpy(n->params + f->offset[i], params[i], f->size[i]);
        }
    } else if (extra != NULL) {
        void *buf = NULL;
        size_t size = 0;
        for (i = 0; extra[i] != CU_LAUNCH_PARAM_END; i += 2) {
            if (extra[i] == CU_LAUNCH_PARAM_BUFFER_POINTER)
                buf = extra[i + 1];
            else if (extra[i] == CU_LAUNCH_PARAM_BUFFER_SIZE)
                size = *(size_t *)extra[i + 1];
        }
        if (buf == NULL || size < f->param_bytes)
            return CUDA_ERROR_INVALID_VALUE;
        memcpy(n->params, buf, f->param_bytes);
    }
    return CUDA_SUCCESS;
}

static void graph_kill(fake_graph *g);

static void
node_kill(fake_node *n)
{
    unsigned i;
    n->alive = 0;
    if (n->child)
        graph_kill(n->child);
    for (i = 0; i < n->csize && i < 16; i++)
        if (n->bodies[i])
            graph_kill(n->bodies[i]);
}

/* mark g and its nodes dead (handles are never freed); the memory of its
 * own mem-alloc nodes is freed.  Lock held. */
static void
graph_kill(fake_graph *g)
{
    fake_node *n;
    if (!g->alive)
        return;
    g->alive = 0;
    if (!g->sub)
        live_graphs--;
    for (n = g->first; n != NULL; n = n->next) {
        if (n->type == CU_GRAPH_NODE_TYPE_MEM_ALLOC && n->orig == NULL && n->dptr) {
            fake_alloc *a = find_base((uintptr_t)n->dptr);
            if (a != NULL && a->kind == K_ASYNC)
                drop_alloc(a);
        }
        node_kill(n);
    }
}

static fake_graph *graph_copy(fake_graph *g, int sub);

/* a copy of g: nodes with their parameters, dependencies by position,
 * children and bodies copied too; each copy's orig is its original */
static fake_graph *
graph_copy(fake_graph *g, int sub)
{
    fake_graph *c = graph_new(g->ctx, sub);
    fake_node *n, **map;
    int i, k;
    if (c == NULL)
        return NULL;
    map = calloc(g->count ? g->count : 1, sizeof *map);
    if (map == NULL)
        return NULL;
    for (n = g->first; n != NULL; n = n->next) {
        fake_node *m = calloc(1, sizeof *m);
        if (m == NULL)
            return NULL;
        *m = *n;
        m->graph = c;
        m->next = NULL;
        m->orig = n;
        m->deps = calloc(n->ndeps ? n->ndeps : 1, sizeof *m->deps);
        for (i = 0; i < n->ndeps; i++)
            m->deps[i] = map[n->deps[i]->idx];
        if (n->params) {
            m->params = malloc(n->psize ? n->psize : 1);
            memcpy(m->params, n->params, n->psize);
        }
        if (n->child)
            m->child = graph_copy(n->child, 1);
        for (k = 0; k < (int)n->csize && k < 16; k++)
            if ((m->bodies[k] = graph_copy(n->bodies[k], 1)) != NULL)
                m->bodies[k]->parent = c;
        remember(m);
        map[n->idx] = m;
        if (c->last)
            c->last->next = m;
        else
            c->first = m;
        c->last = m;
        c->count++;
    }
    free(map);
    return c;
}

static void
log_kernel(fake_node *n)
{
    size_t need = strlen(n->func->name) + 2 * n->psize + 3, i;
    if (replay_len + need + 1 > replay_cap) {
        size_t cap = replay_cap ? replay_cap * 2 : 65536;
        char *t;
        while (cap < replay_len + need + 1)
            cap *= 2;
        if ((t = realloc(replay_log, cap)) == NULL)
            return;
        replay_log = t;
        replay_cap = cap;
    }
    replay_len += (size_t)sprintf(replay_log + replay_len, "%s:", n->func->name);
    for (i = 0; i < n->psize; i++)
        replay_len += (size_t)sprintf(replay_log + replay_len, "%02x", n->params[i]);
    replay_log[replay_len++] = '\n';
    replay_log[replay_len] = '\0';
}

/* record a replayed kernel as the last launch; lock held */
static void
replay_kernel(fake_node *n, CUstream s)
{
    if (!n->func->alive || !n->func->module->alive) {
        stale_uses++; /* the module was unloaded under the graph */
        return;
    }
    memcpy(last_launch.params, n->params, n->psize);
    snprintf(last_launch.name, sizeof last_launch.name, "%s", n->func->name);
    memcpy(last_launch.grid, n->grid, sizeof last_launch.grid);
    memcpy(last_launch.block, n->block, sizeof last_launch.block);
    memset(last_launch.cluster, 0, sizeof last_launch.cluster);
    last_launch.shared = n->shared;
    last_launch.stream = s;
    last_launch.size = n->psize;
    last_launch.cooperative = last_launch.pdl = 0;
    memcpy(thread_last.params, n->params, n->psize);
    thread_last.size = n->psize;
    launches++;
    log_kernel(n);
}

/* Run g's nodes in order; lock held (released around host callbacks). */
static CUresult
replay(fake_graph *g, CUstream s, int depth)
{
    fake_node *n;
    CUresult rc = CUDA_SUCCESS;
    if (depth > 64)
        return CUDA_ERROR_INVALID_VALUE;
    for (n = g->first; n != NULL && rc == CUDA_SUCCESS; n = n->next) {
        switch (n->type) {
        case CU_GRAPH_NODE_TYPE_KERNEL: replay_kernel(n, s); break;
        case CU_GRAPH_NODE_TYPE_MEMCPY:
            if (n->rows) {
                size_t i, j;
                for (i = 0; i < n->depth; i++)
                    for (j = 0; j < n->rows; j++)
                        memmove((unsigned char *)n->dst + i * n->dslice + j * n->dpitch,
                                (const unsigned char *)n->src + i * n->sslice + j * n->spitch,
                                n->n);
            } else if ((n->dst_dev && !device_range_ok((CUdeviceptr)(uintptr_t)n->dst, n->n))
                       || (n->src_dev && !device_range_ok((CUdeviceptr)(uintptr_t)n->src, n->n)))
                stale_uses++; /* device memory freed under the graph */
            else
                memmove(n->dst, n->src, n->n);
            break;
        case CU_GRAPH_NODE_TYPE_MEMSET: {
            size_t r, i;
            if (!device_range_ok(n->mdst, n->pitch * (n->height - 1) + n->width * n->esize)) {
                stale_uses++;
                break;
            }
            for (r = 0; r < n->height; r++)
                for (i = 0; i < n->width; i++) {
                    unsigned char *p =
                        (unsigned char *)(uintptr_t)n->mdst + r * n->pitch + i * n->esize;
                    if (n->esize == 1)
                        *p = (unsigned char)n->value;
                    else if (n->esize == 2) {
                        unsigned short v = (unsigned short)n->value;
                        memcpy(p, &v, 2);
                    } else
                        memcpy(p, &n->value, 4);
                }
            break;
        }
        case CU_GRAPH_NODE_TYPE_HOST:
            unlock();
            n->fn(n->user);
            pthread_mutex_lock(&lock);
            break;
        case CU_GRAPH_NODE_TYPE_EVENT_RECORD:
            n->event->recorded = 1;
            n->event->t = now_ms();
            break;
        case CU_GRAPH_NODE_TYPE_GRAPH:
            rc = n->child != NULL ? replay(n->child, s, depth + 1) : CUDA_ERROR_INVALID_VALUE;
            break;
        case CU_GRAPH_NODE_TYPE_CONDITIONAL: {
            unsigned h = (unsigned)n->cond - 1, v = cond_value[h];
            long guard = 0;
            if (n->ctype == CU_GRAPH_COND_TYPE_IF) {
                if (v)
                    rc = replay(n->bodies[0], s, depth + 1);
                else if (n->csize == 2)
                    rc = replay(n->bodies[1], s, depth + 1);
            } else if (n->ctype == CU_GRAPH_COND_TYPE_SWITCH) {
                if (v < n->csize)
                    rc = replay(n->bodies[v], s, depth + 1);
            } else {
                while (rc == CUDA_SUCCESS && cond_value[h] && guard++ < 100000)
                    rc = replay(n->bodies[0], s, depth + 1);
            }
            break;
        }
        default: /* empty, wait, mem alloc/free: nothing to do on the host */ break;
        }
    }
    return rc;
}

/* The capturing stream s (lock held), or NULL. */
static fake_stream *
cap_stream(CUstream s)
{
    fake_stream *st = (fake_stream *)s;
    if (captures_active == 0 || s == NULL || s == CU_STREAM_LEGACY || s == CU_STREAM_PER_THREAD
        || !known(st) || st->magic != MAGIC_STREAM || !st->alive)
        return NULL;
    return st->cap != NULL ? st : NULL;
}

/* a captured operation: the stream's next node, after its last one */
static fake_node *
cap_node(fake_stream *st, int type, CUresult *rc)
{
    fake_node *n;
    CUgraphNode dep = (CUgraphNode)st->cap_last;
    if (st->cap_invalid) {
        *rc = CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
        return NULL;
    }
    n = node_add(st->cap, type, dep ? &dep : NULL, dep ? 1 : 0, rc);
    if (n != NULL)
        st->cap_last = n;
    return n;
}

/* A synchronous operation while streams capture: every capture of the
 * context is invalidated (the driver's implicit synchronization). */
static CUresult
cap_violation(fake_ctx *c, CUresult code)
{
    fake_stream *s;
    if (captures_active == 0)
        return CUDA_SUCCESS;
    for (s = all_streams; s != NULL; s = s->next_all)
        if (s->alive && s->cap != NULL && (c == NULL || s->ctx == c)
            && !(s->flags & CU_STREAM_NON_BLOCKING))
            break;
    if (s == NULL)
        return CUDA_SUCCESS;
    for (s = all_streams; s != NULL; s = s->next_all)
        if (s->alive && s->cap != NULL)
            s->cap_invalid = 1;
    return code;
}

/* This thread's capture interaction mode (cuThreadExchangeStreamCaptureMode). */
static __thread int tl_capture_mode = CU_STREAM_CAPTURE_MODE_GLOBAL;

static CUresult
fake_cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode *mode)
{
    CUresult rc = enter(F_cuThreadExchangeStreamCaptureMode);
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
static CUresult
cap_unsafe(void)
{
    fake_stream *s;
    CUresult rc = CUDA_SUCCESS;
    if (tl_capture_mode == CU_STREAM_CAPTURE_MODE_RELAXED)
        return CUDA_SUCCESS;
    pthread_mutex_lock(&lock);
    if (captures_active > 0)
        for (s = all_streams; s != NULL; s = s->next_all)
            if (s->alive && s->cap != NULL
                && (s->cap_mode == CU_STREAM_CAPTURE_MODE_GLOBAL
                    || (s->cap_mode == CU_STREAM_CAPTURE_MODE_THREAD_LOCAL
                        && pthread_equal(s->cap_thread, pthread_self())))) {
                s->cap_invalid = 1;
                rc = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
            }
    unlock();
    return rc;
}

static CUresult
fake_cuStreamBeginCapture(CUstream h, CUstreamCaptureMode mode)
{
    CUresult rc = enter(F_cuStreamBeginCapture);
    fake_stream *s;
    if (rc)
        return rc;
    if (mode != CU_STREAM_CAPTURE_MODE_GLOBAL && mode != CU_STREAM_CAPTURE_MODE_THREAD_LOCAL
        && mode != CU_STREAM_CAPTURE_MODE_RELAXED)
        return CUDA_ERROR_INVALID_VALUE;
    s = real_stream(h, &rc);
    if (rc)
        return rc;
    if (s == NULL)
        return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    pthread_mutex_lock(&lock);
    if (s->cap != NULL) {
        rc = CUDA_ERROR_ILLEGAL_STATE;
    } else if ((s->cap = graph_new(s->ctx, 0)) == NULL) {
        rc = CUDA_ERROR_OUT_OF_MEMORY;
    } else {
        s->cap_mode = mode;
        s->cap_thread = pthread_self();
        s->cap_invalid = 0;
        s->cap_last = NULL;
        captures_active++;
    }
    unlock();
    return rc;
}

static CUresult
fake_cuStreamEndCapture(CUstream h, CUgraph *out)
{
    CUresult rc = enter(F_cuStreamEndCapture);
    fake_stream *s;
    if (rc)
        return rc;
    if (out == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    s = real_stream(h, &rc);
    if (rc)
        return rc;
    pthread_mutex_lock(&lock);
    *out = NULL;
    if (s == NULL || s->cap == NULL) {
        rc = CUDA_ERROR_ILLEGAL_STATE;
    } else {
        if (s->cap_invalid) {
            graph_kill(s->cap);
            rc = CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
        } else {
            *out = (CUgraph)s->cap;
        }
        s->cap = NULL;
        s->cap_last = NULL;
        captures_active--;
    }
    unlock();
    return rc;
}

static CUresult
fake_cuStreamIsCapturing(CUstream h, CUstreamCaptureStatus *status)
{
    CUresult rc = enter(F_cuStreamIsCapturing);
    fake_stream *s;
    if (rc)
        return rc;
    if (status == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    s = real_stream(h, &rc);
    if (rc)
        return rc;
    pthread_mutex_lock(&lock);
    *status = s == NULL || s->cap == NULL ? CU_STREAM_CAPTURE_STATUS_NONE
              : s->cap_invalid            ? CU_STREAM_CAPTURE_STATUS_INVALIDATED
                                          : CU_STREAM_CAPTURE_STATUS_ACTIVE;
    unlock();
    return CUDA_SUCCESS;
}

static CUresult
fake_cuGraphCreate(CUgraph *out, unsigned int flags)
{
    CUresult rc = enter(F_cuGraphCreate);
    fake_ctx *c;
    fake_graph *g;
    if (rc)
        return rc;
    if (out == NULL || flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    if ((c = need_ctx(&rc)) != NULL) {
        if ((g = graph_new(c, 0)) == NULL)
            rc = CUDA_ERROR_OUT_OF_MEMORY;
        else
            *out = (CUgraph)g;
    }
    unlock();
    return rc;
}

static CUresult
fake_cuGraphDestroy(CUgraph h)
{
    CUresult rc = enter(F_cuGraphDestroy);
    fake_graph *g;
    if (rc)
        return rc;
    pthread_mutex_lock(&lock);
    if ((g = graph_ok(h)) == NULL || g->sub)
        rc = CUDA_ERROR_INVALID_VALUE;
    else
        graph_kill(g);
    unlock();
    return rc;
}

/* the common start of cuGraphAdd*Node: checks, then a node; lock taken */
static fake_node *
add_start(int fn, CUgraphNode *out, CUgraph h, const CUgraphNode *deps, size_t nd, int type,
          CUresult *rc)
{
    fake_graph *g;
    fake_node *n;
    *rc = enter(fn);
    if (*rc)
        return NULL;
    if (out == NULL) {
        *rc = CUDA_ERROR_INVALID_VALUE;
        return NULL;
    }
    pthread_mutex_lock(&lock);
    if ((g = graph_ok(h)) == NULL) {
        *rc = CUDA_ERROR_INVALID_VALUE;
        unlock();
        return NULL;
    }
    n = node_add(g, type, deps, nd, rc);
    if (n == NULL) {
        unlock();
        return NULL;
    }
    *out = (CUgraphNode)n;
    return n;
}

/* undo a node whose parameters were refused; lock held, then released */
static void
add_undo(fake_node *n, CUgraphNode *out)
{
    fake_graph *g = n->graph;
    fake_node *p;
    n->alive = 0;
    if (g->first == n) {
        g->first = g->last = NULL;
    } else {
        for (p = g->first; p->next != n; p = p->next)
            ;
        p->next = NULL;
        g->last = p;
    }
    g->count--;
    *out = NULL;
    unlock();
}

static CUresult
fake_cuGraphAddKernelNode(CUgraphNode *out, CUgraph h, const CUgraphNode *deps, size_t nd,
                          const CUDA_KERNEL_NODE_PARAMS_v1 *p)
{
    CUresult rc;
    fake_node *n =
        add_start(F_cuGraphAddKernelNode, out, h, deps, nd, CU_GRAPH_NODE_TYPE_KERNEL, &rc);
    fake_func *f;
    if (n == NULL)
        return rc;
    if (p == NULL || (f = func_ok(p->func)) == NULL || f->module->ctx != n->graph->ctx
        || !p->gridDimX || !p->gridDimY || !p->gridDimZ || !p->blockDimX || !p->blockDimY
        || !p->blockDimZ
        || (unsigned long long)p->blockDimX * p->blockDimY * p->blockDimZ > (unsigned)f->maxntid
        || (rc = node_params(n, f, p->kernelParams, p->extra)) != CUDA_SUCCESS) {
        add_undo(n, out);
        return rc ? rc : CUDA_ERROR_INVALID_VALUE;
    }
    n->grid[0] = p->gridDimX;
    n->grid[1] = p->gridDimY;
    n->grid[2] = p->gridDimZ;
    n->block[0] = p->blockDimX;
    n->block[1] = p->blockDimY;
    n->block[2] = p->blockDimZ;
    n->shared = p->sharedMemBytes;
    unlock();
    return CUDA_SUCCESS;
}

static CUresult
fake_cuGraphAddMemcpyNode(CUgraphNode *out, CUgraph h, const CUgraphNode *deps, size_t nd,
                          const CUDA_MEMCPY3D *p, CUcontext ctx)
{
    CUresult rc;
    fake_node *n =
        add_start(F_cuGraphAddMemcpyNode, out, h, deps, nd, CU_GRAPH_NODE_TYPE_MEMCPY, &rc);
    if (n == NULL)
        return rc;
    if (p == NULL || p->Height != 1 || p->Depth != 1 || p->WidthInBytes == 0
        || (p->dstMemoryType != CU_MEMORYTYPE_HOST && p->dstMemoryType != CU_MEMORYTYPE_DEVICE)
        || (p->srcMemoryType != CU_MEMORYTYPE_HOST && p->srcMemoryType != CU_MEMORYTYPE_DEVICE)
        || (p->dstMemoryType == CU_MEMORYTYPE_DEVICE
            && !device_range_ok(p->dstDevice, p->WidthInBytes))
        || (p->srcMemoryType == CU_MEMORYTYPE_DEVICE
            && !device_range_ok(p->srcDevice, p->WidthInBytes))) {
        add_undo(n, out);
        return CUDA_ERROR_INVALID_VALUE;
    }
    n->dst_dev = p->dstMemoryType == CU_MEMORYTYPE_DEVICE;
    n->src_dev = p->srcMemoryType == CU_MEMORYTYPE_DEVICE;
    n->dst = n->dst_dev ? (void *)(uintptr_t)p->dstDevice : p->dstHost;
    n->src = n->src_dev ? (const void *)(uintptr_t)p->srcDevice : p->srcHost;
    n->n = p->WidthInBytes;
    unlock();
    return CUDA_SUCCESS;
}

static CUresult
fake_cuGraphAddMemsetNode(CUgraphNode *out, CUgraph h, const CUgraphNode *deps, size_t nd,
                          const CUDA_MEMSET_NODE_PARAMS *p, CUcontext ctx)
{
    CUresult rc;
    fake_node *n =
        add_start(F_cuGraphAddMemsetNode, out, h, deps, nd, CU_GRAPH_NODE_TYPE_MEMSET, &rc);
    if (n == NULL)
        return rc;
    if (p == NULL || (p->elementSize != 1 && p->elementSize != 2 && p->elementSize != 4)
        || p->width == 0 || p->height == 0 || p->dst % p->elementSize
        || !device_range_ok(p->dst, p->pitch * (p->height - 1) + p->width * p->elementSize)) {
        add_undo(n, out);
        return CUDA_ERROR_INVALID_VALUE;
    }
    n->mdst = p->dst;
    n->value = p->value;
    n->esize = p->elementSize;
    n->width = p->width;
    n->height = p->height;
    n->pitch = p->pitch;
    unlock();
    return CUDA_SUCCESS;
}

static CUresult
fake_cuGraphAddHostNode(CUgraphNode *out, CUgraph h, const CUgraphNode *deps, size_t nd,
                        const CUDA_HOST_NODE_PARAMS *p)
{
    CUresult rc;
    fake_node *n = add_start(F_cuGraphAddHostNode, out, h, deps, nd, CU_GRAPH_NODE_TYPE_HOST, &rc);
    if (n == NULL)
        return rc;
    if (p == NULL || p->fn == NULL) {
        add_undo(n, out);
        return CUDA_ERROR_INVALID_VALUE;
    }
    n->fn = p->fn;
    n->user = p->userData;
    unlock();
    return CUDA_SUCCESS;
}

/* 1 if g is inner or encloses it: inner itself, or the graph of the
 * conditional node whose body inner is, and so on outwards (a graph may not
 * be its own descendant).  Lock held. */
static int
graph_encloses(fake_graph *g, fake_graph *inner)
{
    for (; inner != NULL; inner = inner->parent)
        if (inner == g)
            return 1;
    return 0;
}

static CUresult
fake_cuGraphAddChildGraphNode(CUgraphNode *out, CUgraph h, const CUgraphNode *deps, size_t nd,
                              CUgraph child)
{
    CUresult rc;
    fake_node *n =
        add_start(F_cuGraphAddChildGraphNode, out, h, deps, nd, CU_GRAPH_NODE_TYPE_GRAPH, &rc);
    fake_graph *c;
    if (n == NULL)
        return rc;
    if ((c = graph_ok(child)) == NULL || graph_encloses(c, n->graph)
        || (n->child = graph_copy(c, 1)) == NULL) {
        add_undo(n, out);
        return CUDA_ERROR_INVALID_VALUE;
    }
    unlock();
    return CUDA_SUCCESS;
}

static CUresult
fake_cuGraphAddEmptyNode(CUgraphNode *out, CUgraph h, const CUgraphNode *deps, size_t nd)
{
    CUresult rc;
    fake_node *n =
        add_start(F_cuGraphAddEmptyNode, out, h, deps, nd, CU_GRAPH_NODE_TYPE_EMPTY, &rc);
    if (n == NULL)
        return rc;
    unlock();
    return CUDA_SUCCESS;
}

static CUresult
add_event(int fn, int type, CUgraphNode *out, CUgraph h, const CUgraphNode *deps, size_t nd,
          CUevent ev)
{
    CUresult rc;
    fake_node *n = add_start(fn, out, h, deps, nd, type, &rc);
    if (n == NULL)
        return rc;
    if ((n->event = event_ok(ev)) == NULL) {
        add_undo(n, out);
        return CUDA_ERROR_INVALID_HANDLE;
    }
    unlock();
    return CUDA_SUCCESS;
}

static CUresult
fake_cuGraphAddEventRecordNode(CUgraphNode *out, CUgraph h, const CUgraphNode *deps, size_t nd,
                               CUevent ev)
{
    return add_event(F_cuGraphAddEventRecordNode, CU_GRAPH_NODE_TYPE_EVENT_RECORD, out, h, deps, nd,
                     ev);
}

static CUresult
fake_cuGraphAddEventWaitNode(CUgraphNode *out, CUgraph h, const CUgraphNode *deps, size_t nd,
                             CUevent ev)
{
    return add_event(F_cuGraphAddEventWaitNode, CU_GRAPH_NODE_TYPE_WAIT_EVENT, out, h, deps, nd,
                     ev);
}

/* memory of a mem-alloc node: real (host) memory from now on, freed with
 * the graph; lock held */
static CUresult
node_alloc(fake_node *n, size_t bytes)
{
    void *p;
    fake_ctx *c = n->graph->ctx;
    if (bytes == 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (bytes > dev_memory - dev_used[c->dev] || (p = fill_alloc(bytes)) == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    if (add_alloc(p, bytes, K_ASYNC, 0, c) == NULL) {
        free(p);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    n->dptr = (CUdeviceptr)(uintptr_t)p;
    n->bytes = bytes;
    return CUDA_SUCCESS;
}

static CUresult
fake_cuGraphAddMemAllocNode(CUgraphNode *out, CUgraph h, const CUgraphNode *deps, size_t nd,
                            CUDA_MEM_ALLOC_NODE_PARAMS *p)
{
    CUresult rc;
    fake_node *n =
        add_start(F_cuGraphAddMemAllocNode, out, h, deps, nd, CU_GRAPH_NODE_TYPE_MEM_ALLOC, &rc);
    if (n == NULL)
        return rc;
    if (p == NULL || p->poolProps.allocType != CU_MEM_ALLOCATION_TYPE_PINNED
        || p->poolProps.location.type != CU_MEM_LOCATION_TYPE_DEVICE
        || p->poolProps.location.id != n->graph->ctx->dev
        || (rc = node_alloc(n, p->bytesize)) != CUDA_SUCCESS) {
        add_undo(n, out);
        return rc ? rc : CUDA_ERROR_INVALID_VALUE;
    }
    p->dptr = n->dptr;
    unlock();
    return CUDA_SUCCESS;
}

static CUresult
fake_cuGraphAddMemFreeNode(CUgraphNode *out, CUgraph h, const CUgraphNode *deps, size_t nd,
                           CUdeviceptr d)
{
    CUresult rc;
    fake_node *n =
        add_start(F_cuGraphAddMemFreeNode, out, h, deps, nd, CU_GRAPH_NODE_TYPE_MEM_FREE, &rc);
    fake_alloc *a;
    if (n == NULL)
        return rc;
    a = find_base((uintptr_t)d);
    if (a == NULL || a->kind != K_ASYNC) {
        add_undo(n, out);
        return CUDA_ERROR_INVALID_VALUE;
    }
    n->dptr = d;
    unlock();
    return CUDA_SUCCESS;
}

static CUresult
fake_cuGraphAddDependencies(CUgraph h, const CUgraphNode *from, const CUgraphNode *to, size_t n)
{
    CUresult rc = enter(F_cuGraphAddDependencies);
    fake_graph *g;
    size_t i;
    if (rc)
        return rc;
    if (n > 0 && (from == NULL || to == NULL))
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    if ((g = graph_ok(h)) == NULL)
        rc = CUDA_ERROR_INVALID_VALUE;
    for (i = 0; rc == CUDA_SUCCESS && i < n; i++) {
        fake_node *a = node_ok(from[i]), *b = node_ok(to[i]);
        fake_node **d;
        if (a == NULL || b == NULL || a->graph != g || b->graph != g || a == b
            || a->idx > b->idx) { /* the stand-in keeps nodes in a topological order */
            rc = CUDA_ERROR_INVALID_VALUE;
            break;
        }
        if ((d = realloc(b->deps, (size_t)(b->ndeps + 1) * sizeof *d)) == NULL) {
            rc = CUDA_ERROR_OUT_OF_MEMORY;
            break;
        }
        b->deps = d;
        b->deps[b->ndeps++] = a;
    }
    unlock();
    return rc;
}

static CUresult
fake_cuGraphGetNodes(CUgraph h, CUgraphNode *nodes, size_t *n)
{
    CUresult rc = enter(F_cuGraphGetNodes);
    fake_graph *g;
    fake_node *x;
    size_t i = 0;
    if (rc)
        return rc;
    if (n == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    if ((g = graph_ok(h)) == NULL) {
        rc = CUDA_ERROR_INVALID_VALUE;
    } else if (nodes == NULL) {
        *n = (size_t)g->count;
    } else {
        for (x = g->first; x != NULL && i < *n; x = x->next)
            nodes[i++] = (CUgraphNode)x;
        *n = i;
    }
    unlock();
    return rc;
}

static CUresult
fake_cuGraphNodeGetType(CUgraphNode h, CUgraphNodeType *t)
{
    CUresult rc = enter(F_cuGraphNodeGetType);
    fake_node *n;
    if (rc)
        return rc;
    pthread_mutex_lock(&lock);
    if (t == NULL || (n = node_ok(h)) == NULL)
        rc = CUDA_ERROR_INVALID_VALUE;
    else
        *t = (CUgraphNodeType)n->type;
    unlock();
    return rc;
}

static CUresult
fake_cuGraphNodeGetDependencies(CUgraphNode h, CUgraphNode *deps, size_t *nd)
{
    CUresult rc = enter(F_cuGraphNodeGetDependencies);
    fake_node *n;
    int i;
    if (rc)
        return rc;
    pthread_mutex_lock(&lock);
    if (nd == NULL || (n = node_ok(h)) == NULL) {
        rc = CUDA_ERROR_INVALID_VALUE;
    } else if (deps == NULL) {
        *nd = (size_t)n->ndeps;
    } else {
        for (i = 0; i < n->ndeps && (size_t)i < *nd; i++)
            deps[i] = (CUgraphNode)n->deps[i];
        *nd = (size_t)i;
    }
    unlock();
    return rc;
}

static CUresult
fake_cuGraphKernelNodeGetParams(CUgraphNode h, CUDA_KERNEL_NODE_PARAMS_v1 *p)
{
    CUresult rc = enter(F_cuGraphKernelNodeGetParams);
    fake_node *n;
    if (rc)
        return rc;
    pthread_mutex_lock(&lock);
    if (p == NULL || (n = node_ok(h)) == NULL || n->type != CU_GRAPH_NODE_TYPE_KERNEL) {
        rc = CUDA_ERROR_INVALID_VALUE;
    } else {
        memset(p, 0, sizeof *p);
        p->func = (CUfunction)n->func;
        p->gridDimX = n->grid[0];
        p->gridDimY = n->grid[1];
        p->gridDimZ = n->grid[2];
        p->blockDimX = n->block[0];
        p->blockDimY = n->block[1];
        p->blockDimZ = n->block[2];
        p->sharedMemBytes = n->shared;
    }
    unlock();
    return rc;
}

static CUresult
fake_cuGraphInstantiateWithFlags(CUgraphExec *out, CUgraph h, unsigned long long flags)
{
    CUresult rc = enter(F_cuGraphInstantiateWithFlags);
    fake_graph *g;
    fake_exec *e;
    if (rc)
        return rc;
    if (out == NULL || (flags & ~0xfULL))
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    if ((g = graph_ok(h)) == NULL || g->sub) {
        rc = CUDA_ERROR_INVALID_VALUE;
    } else if ((e = calloc(1, sizeof *e)) == NULL || (e->g = graph_copy(g, 1)) == NULL) {
        rc = CUDA_ERROR_OUT_OF_MEMORY;
    } else {
        e->magic = MAGIC_EXEC;
        e->alive = 1;
        e->src = g;
        remember(e);
        live_execs++;
        *out = (CUgraphExec)e;
    }
    unlock();
    return rc;
}

static CUresult
fake_cuGraphExecDestroy(CUgraphExec h)
{
    CUresult rc = enter(F_cuGraphExecDestroy);
    fake_exec *e;
    if (rc)
        return rc;
    pthread_mutex_lock(&lock);
    if ((e = exec_ok(h)) == NULL) {
        rc = CUDA_ERROR_INVALID_VALUE;
    } else {
        e->alive = 0;
        graph_kill(e->g);
        live_execs--;
    }
    unlock();
    return rc;
}

static CUresult
fake_cuGraphLaunch(CUgraphExec h, CUstream s)
{
    CUresult rc = enter(F_cuGraphLaunch);
    fake_exec *e;
    fake_ctx *c;
    int i;
    if (rc)
        return rc;
    pthread_mutex_lock(&lock);
    if ((e = exec_ok(h)) == NULL) {
        rc = CUDA_ERROR_INVALID_VALUE;
    } else if ((c = need_ctx(&rc)) != NULL && (rc = check_stream(s, c)) == CUDA_SUCCESS) {
        if (cap_stream(s) != NULL) {
            rc = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED; /* not modelled */
        } else {
            replay_len = 0;
            if (replay_log)
                replay_log[0] = '\0';
            for (i = 0; i < cond_count; i++)
                if (cond_assign[i])
                    cond_value[i] = cond_default[i];
            rc = replay(e->g, s, 0);
        }
    }
    unlock();
    return rc;
}

static CUresult
fake_cuGraphUpload(CUgraphExec h, CUstream s)
{
    CUresult rc = enter(F_cuGraphUpload);
    if (rc)
        return rc;
    pthread_mutex_lock(&lock);
    if (exec_ok(h) == NULL)
        rc = CUDA_ERROR_INVALID_VALUE;
    else
        rc = check_stream(s, NULL);
    unlock();
    return rc;
}

/* exec's copy of node n (searching children and bodies); lock held */
static fake_node *
find_copy(fake_graph *g, fake_node *n)
{
    fake_node *x, *r;
    unsigned k;
    for (x = g->first; x != NULL; x = x->next) {
        if (x->orig == n)
            return x;
        if (x->child && (r = find_copy(x->child, n)) != NULL)
            return r;
        for (k = 0; k < x->csize && k < 16; k++)
            if (x->bodies[k] && (r = find_copy(x->bodies[k], n)) != NULL)
                return r;
    }
    return NULL;
}

static CUresult
fake_cuGraphExecKernelNodeSetParams(CUgraphExec h, CUgraphNode node,
                                    const CUDA_KERNEL_NODE_PARAMS_v1 *p)
{
    CUresult rc = enter(F_cuGraphExecKernelNodeSetParams);
    fake_exec *e;
    fake_node *n, *c;
    fake_func *f;
    if (rc)
        return rc;
    pthread_mutex_lock(&lock);
    if (p == NULL || (e = exec_ok(h)) == NULL || (n = node_ok(node)) == NULL
        || n->type != CU_GRAPH_NODE_TYPE_KERNEL || (c = find_copy(e->g, n)) == NULL
        || (f = func_ok(p->func)) == NULL || f->module->ctx != c->func->module->ctx || !p->gridDimX
        || !p->gridDimY || !p->gridDimZ || !p->blockDimX || !p->blockDimY || !p->blockDimZ) {
        rc = CUDA_ERROR_INVALID_VALUE;
    } else if ((rc = node_params(c, f, p->kernelParams, p->extra)) == CUDA_SUCCESS) {
        c->grid[0] = p->gridDimX;
        c->grid[1] = p->gridDimY;
        c->grid[2] = p->gridDimZ;
        c->block[0] = p->blockDimX;
        c->block[1] = p->blockDimY;
        c->block[2] = p->blockDimZ;
        c->shared = p->sharedMemBytes;
    }
    unlock();
    return rc;
}

/* same shape: node count, types and dependencies by position; kernels of
 * one context.  Returns the first differing node of b (or NULL). */
static fake_node *
shape_differs(fake_graph *a, fake_graph *b, CUgraphExecUpdateResult *why)
{
    fake_node *x = a->first, *y = b->first;
    int i;
    for (; x != NULL && y != NULL; x = x->next, y = y->next) {
        if (x->type != y->type) {
            *why = CU_GRAPH_EXEC_UPDATE_ERROR_NODE_TYPE_CHANGED;
            return y;
        }
        if (x->ndeps != y->ndeps) {
            *why = CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED;
            return y;
        }
        for (i = 0; i < x->ndeps; i++)
            if (x->deps[i]->idx != y->deps[i]->idx) {
                *why = CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED;
                return y;
            }
        if (x->type == CU_GRAPH_NODE_TYPE_KERNEL && x->func->module->ctx != y->func->module->ctx) {
            *why = CU_GRAPH_EXEC_UPDATE_ERROR_FUNCTION_CHANGED;
            return y;
        }
    }
    if (x != NULL || y != NULL) {
        *why = CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED;
        return y;
    }
    return NULL;
}

static void
map_orig(fake_graph *copy, fake_graph *src)
{
    fake_node *x = copy->first, *y = src->first;
    for (; x != NULL && y != NULL; x = x->next, y = y->next)
        x->orig = y;
}

static CUresult
fake_cuGraphExecUpdate(CUgraphExec h, CUgraph hg, CUgraphNode *bad, CUgraphExecUpdateResult *result)
{
    CUresult rc = enter(F_cuGraphExecUpdate);
    fake_exec *e;
    fake_graph *g, *copy;
    fake_node *d;
    CUgraphExecUpdateResult why = CU_GRAPH_EXEC_UPDATE_ERROR;
    if (rc)
        return rc;
    if (bad == NULL || result == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    *bad = NULL;
    *result = CU_GRAPH_EXEC_UPDATE_SUCCESS;
    if ((e = exec_ok(h)) == NULL || (g = graph_ok(hg)) == NULL) {
        rc = CUDA_ERROR_INVALID_VALUE;
    } else if ((d = shape_differs(e->src, g, &why)) != NULL
               || (d == NULL && why != CU_GRAPH_EXEC_UPDATE_ERROR)) {
        *bad = (CUgraphNode)d;
        *result = why;
        rc = CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE;
    } else if ((copy = graph_copy(g, 1)) == NULL) {
        rc = CUDA_ERROR_OUT_OF_MEMORY;
    } else {
        map_orig(copy, e->src);
        graph_kill(e->g);
        e->g = copy;
    }
    unlock();
    return rc;
}

static CUresult
fake_cuGraphDebugDotPrint(CUgraph h, const char *path, unsigned int flags)
{
    CUresult rc = enter(F_cuGraphDebugDotPrint);
    static const char *const names[] = {"kernel",         "memcpy",       "memset",
                                        "host",           "graph",        "empty",
                                        "wait_event",     "event_record", "ext_semas_signal",
                                        "ext_semas_wait", "mem_alloc",    "mem_free",
                                        "batch_mem_op",   "conditional"};
    fake_graph *g;
    fake_node *n;
    FILE *f;
    int i;
    if (rc)
        return rc;
    if (path == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    if ((g = graph_ok(h)) == NULL) {
        rc = CUDA_ERROR_INVALID_VALUE;
    } else if ((f = fopen(path, "w")) == NULL) {
        rc = CUDA_ERROR_OPERATING_SYSTEM;
    } else {
        fprintf(f, "digraph dot {\n");
        for (n = g->first; n != NULL; n = n->next) {
            fprintf(f, "  node%d [label=\"%d %s%s%s\"];\n", n->idx, n->idx,
                    n->type >= 0 && n->type < 14 ? names[n->type] : "?", n->func ? " " : "",
                    n->func ? n->func->name : "");
            for (i = 0; i < n->ndeps; i++)
                fprintf(f, "  node%d -> node%d;\n", n->deps[i]->idx, n->idx);
        }
        fprintf(f, "}\n");
        fclose(f);
    }
    unlock();
    return rc;
}

static CUresult
fake_cuGraphConditionalHandleCreate(CUgraphConditionalHandle *out, CUgraph h, CUcontext ctx,
                                    unsigned int dflt, unsigned int flags)
{
    CUresult rc = enter(F_cuGraphConditionalHandleCreate);
    fake_graph *g;
    if (rc)
        return rc;
    if (out == NULL || (flags & ~(unsigned)CU_GRAPH_COND_ASSIGN_DEFAULT))
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    if ((g = graph_ok(h)) == NULL || (fake_ctx *)ctx != g->ctx) {
        rc = CUDA_ERROR_INVALID_VALUE;
    } else if (cond_count >= MAXCOND) {
        rc = CUDA_ERROR_OUT_OF_MEMORY;
    } else {
        cond_default[cond_count] = cond_value[cond_count] = dflt;
        cond_assign[cond_count] = (flags & CU_GRAPH_COND_ASSIGN_DEFAULT) != 0;
        *out = (CUgraphConditionalHandle)(++cond_count);
    }
    unlock();
    return rc;
}

static CUresult
fake_cuGraphAddNode(CUgraphNode *out, CUgraph h, const CUgraphNode *deps, size_t nd,
                    CUgraphNodeParams *p)
{
    CUresult rc;
    fake_node *n;
    unsigned k;
    if (p == NULL || p->type != CU_GRAPH_NODE_TYPE_CONDITIONAL) {
        rc = enter(F_cuGraphAddNode);
        return rc ? rc : CUDA_ERROR_NOT_SUPPORTED; /* only conditionals are modelled */
    }
    n = add_start(F_cuGraphAddNode, out, h, deps, nd, CU_GRAPH_NODE_TYPE_CONDITIONAL, &rc);
    if (n == NULL)
        return rc;
    if (p->conditional.handle == 0 || p->conditional.handle > (CUgraphConditionalHandle)cond_count
        || p->conditional.size < 1 || p->conditional.size > 16
        || (p->conditional.type == CU_GRAPH_COND_TYPE_WHILE && p->conditional.size != 1)
        || (p->conditional.type == CU_GRAPH_COND_TYPE_IF && p->conditional.size > 2)
        || p->conditional.type > CU_GRAPH_COND_TYPE_SWITCH
        || (fake_ctx *)p->conditional.ctx != n->graph->ctx) {
        add_undo(n, out);
        return CUDA_ERROR_INVALID_VALUE;
    }
    n->cond = p->conditional.handle;
    n->ctype = p->conditional.type;
    n->csize = p->conditional.size;
    for (k = 0; k < n->csize; k++) {
        n->bodies[k] = graph_new(n->graph->ctx, 1);
        if (n->bodies[k] == NULL) {
            add_undo(n, out);
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
        n->bodies[k]->parent = n->graph;
    }
    /* the array belongs to the node, as the driver's does */
    p->conditional.phGraph_out = (CUgraph *)n->bodies;
    unlock();
    return CUDA_SUCCESS;
}

/* tests: set a conditional handle's value (what cudaGraphSetConditional
 * does on a GPU); returns 0, or -1 for an unknown handle */
EXPORT int
fakecuda_set_conditional(unsigned long long handle, unsigned value)
{
    int r = -1;
    pthread_mutex_lock(&lock);
    if (handle >= 1 && handle <= (unsigned long long)cond_count) {
        cond_value[handle - 1] = value;
        r = 0;
    }
    unlock();
    return r;
}

/* tests: the kernels the last cuGraphLaunch replayed, one "name:hexbytes" a
 * line; returns the length */
EXPORT size_t
fakecuda_replay_log(char *buf, size_t cap)
{
    size_t n;
    pthread_mutex_lock(&lock);
    n = replay_len;
    if (buf && cap) {
        size_t k = n < cap - 1 ? n : cap - 1;
        if (replay_log)
            memcpy(buf, replay_log, k);
        buf[k] = '\0';
    }
    unlock();
    return n;
}

/* ---- what capture records (the hooks in copy, memset_n, do_launch,
 * cuMemAllocAsync/FreeAsync, cuEventRecord, cuStreamWaitEvent); lock held ---- */
static void
cap_memcpy(fake_node *n, void *dst, const void *src, size_t len, int dd, int sd)
{
    n->dst = dst;
    n->src = src;
    n->n = len;
    n->dst_dev = dd;
    n->src_dev = sd;
}

static void
cap_memcpy_pitched(fake_node *n, unsigned char *dst, const unsigned char *src, size_t width,
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

static void
cap_memset(fake_node *n, CUdeviceptr d, unsigned v, size_t count, unsigned width)
{
    n->mdst = d;
    n->value = v;
    n->esize = width;
    n->width = count;
    n->height = 1;
    n->pitch = count * width;
}

static CUresult
cap_kernel(fake_node *n, fake_func *f, const unsigned grid[3], const unsigned block[3],
           unsigned shared, void **params, void **extra)
{
    memcpy(n->grid, grid, sizeof n->grid);
    memcpy(n->block, block, sizeof n->block);
    n->shared = shared;
    return node_params(n, f, params, extra);
}

static CUresult
cap_alloc(fake_node *n, size_t bytes, CUdeviceptr *out)
{
    CUresult rc = node_alloc(n, bytes);
    if (rc == CUDA_SUCCESS)
        *out = n->dptr;
    return rc;
}

static void
cap_dptr(fake_node *n, CUdeviceptr d)
{
    n->dptr = d;
}

static void
cap_event(fake_node *n, fake_event *e)
{
    n->event = e;
}

static void
cap_end_on_destroy(fake_stream *s)
{
    if (s->cap == NULL)
        return;
    graph_kill(s->cap);
    s->cap = NULL;
    captures_active--;
}

/* ---- processes: IPC handles, memory pools, virtual memory ----
 *
 * Legacy IPC memory handles name an allocation of this process (opening one
 * from another process is CUDA_ERROR_NOT_SUPPORTED here: plain device
 * memory is malloc'd); an open returns the same address and is counted
 * until cuIpcCloseMemHandle.  Event handles open anywhere (events complete
 * at once).  A memory pool is a memfd (a header page, then a bump
 * allocator); its allocations and imported pointers are mmaps of it, so a
 * pool exported as a file descriptor shares memory between processes for
 * real.  Virtual memory: reservations are PROT_NONE mmaps, physical
 * allocations memfds mapped MAP_FIXED into them, and cuMemSetAccess makes
 * a mapping a device range copies accept; exported as a dup of the memfd. */

enum { MAGIC_POOL = 0x504f4f31, MAGIC_VMEM = 0x564d4d31 };
#define IPC_MEM_MAGIC 0x464b4950434d454dull  /* "FKIPCMEM" */
#define IPC_EVT_MAGIC 0x464b495043455654ull  /* "FKIPCEVT" */
#define POOL_PTR_MAGIC 0x464b504f4f4c5054ull /* "FKPOOLPT" */
#define POOL_FD_MAGIC 0x464b504f4f4c4644ull  /* "FKPOOLFD" */
#define POOL_BYTES ((size_t)1 << 30)         /* sparse */
#define VMM_GRAN ((size_t)65536)

typedef struct fake_pool {
    unsigned magic;
    int alive;
    int fd;
    int dev;
    int imported;
    unsigned handle_types;
    size_t used;     /* bump offset in the memfd */
    unsigned access; /* devices granted by cuMemPoolSetAccess */
    struct fake_pool *next_all;
} fake_pool;

typedef struct fake_vmem {
    unsigned magic;
    int alive; /* 0 once cuMemRelease'd */
    int fd;
    int dev;
    int shareable;
    size_t size;
    struct fake_vmem *next_all;
} fake_vmem;

typedef struct fake_range {
    uintptr_t base;
    size_t size;
    fake_vmem *mem;     /* mappings: the physical memory */
    fake_alloc *access; /* mappings: the K_VMM record once accessible */
    struct fake_range *next;
} fake_range;

typedef struct ipc_open {
    uintptr_t ptr;
    long count;
    struct ipc_open *next;
} ipc_open;

static fake_pool *all_pools;
static fake_vmem *all_vmem;
static fake_range *reservations, *mappings;
static ipc_open *ipc_opens;
static long live_ipc, live_pools, live_vmem, live_reservations;

static CUresult
fake_cuMemGetAddressRange(CUdeviceptr *pbase, size_t *psize, CUdeviceptr dptr)
{
    CUresult rc = enter(F_cuMemGetAddressRange);
    fake_alloc *a;
    if (rc)
        return rc;
    pthread_mutex_lock(&lock);
    a = find_alloc((uintptr_t)dptr, 1);
    if (a == NULL || a->kind == K_HOST || a->kind == K_REGISTERED) {
        rc = CUDA_ERROR_NOT_FOUND;
    } else {
        if (pbase)
            *pbase = (CUdeviceptr)a->base;
        if (psize)
            *psize = a->size;
    }
    unlock();
    return rc;
}

static CUresult
fake_cuIpcGetMemHandle(CUipcMemHandle *h, CUdeviceptr dptr)
{
    CUresult rc = enter(F_cuIpcGetMemHandle);
    unsigned long long w[4];
    fake_alloc *a;
    if (rc)
        return rc;
    if (h == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    if (need_ctx(&rc) == NULL)
        goto done;
    a = find_base((uintptr_t)dptr);
    if (a == NULL || a->kind != K_DEVICE) {
        rc = CUDA_ERROR_INVALID_VALUE;
        goto done;
    }
    memset(h, 0, sizeof *h);
    w[0] = IPC_MEM_MAGIC;
    w[1] = (unsigned long long)getpid();
    w[2] = (unsigned long long)a->base;
    w[3] = (unsigned long long)a->size;
    memcpy(h->reserved, w, sizeof w);
done:
    unlock();
    return rc;
}

static CUresult
fake_cuIpcOpenMemHandle(CUdeviceptr *out, CUipcMemHandle h, unsigned int flags)
{
    CUresult rc = enter(F_cuIpcOpenMemHandle);
    unsigned long long w[4];
    fake_alloc *a;
    ipc_open *o;
    if (rc)
        return rc;
    if (out == NULL || flags > 1)
        return CUDA_ERROR_INVALID_VALUE;
    memcpy(w, h.reserved, sizeof w);
    if (w[0] != IPC_MEM_MAGIC)
        return CUDA_ERROR_INVALID_VALUE;
    if (w[1] != (unsigned long long)getpid())
        return CUDA_ERROR_NOT_SUPPORTED; /* see above: within one process only */
    pthread_mutex_lock(&lock);
    if (need_ctx(&rc) == NULL)
        goto done;
    a = find_base((uintptr_t)w[2]);
    if (a == NULL || a->kind != K_DEVICE || a->size != w[3]) {
        rc = CUDA_ERROR_INVALID_VALUE; /* the exporter freed it */
        goto done;
    }
    for (o = ipc_opens; o != NULL && o->ptr != a->base; o = o->next)
        ;
    if (o == NULL) {
        if ((o = calloc(1, sizeof *o)) == NULL) {
            rc = CUDA_ERROR_OUT_OF_MEMORY;
            goto done;
        }
        o->ptr = a->base;
        o->next = ipc_opens;
        ipc_opens = o;
    }
    o->count++;
    live_ipc++;
    *out = (CUdeviceptr)a->base;
done:
    unlock();
    return rc;
}

static CUresult
fake_cuIpcCloseMemHandle(CUdeviceptr p)
{
    CUresult rc = enter(F_cuIpcCloseMemHandle);
    ipc_open *o;
    if (rc)
        return rc;
    pthread_mutex_lock(&lock);
    for (o = ipc_opens; o != NULL && o->ptr != (uintptr_t)p; o = o->next)
        ;
    if (o == NULL || o->count == 0) {
        stale_uses++;
        rc = CUDA_ERROR_INVALID_VALUE;
    } else {
        o->count--;
        live_ipc--;
    }
    unlock();
    return rc;
}

/* ---- OpenGL interop (graphics.c): there is no GL here.  A GL buffer name
 * n (1..1024) registers as a resource backed by n*256 bytes of device
 * memory; a texture name n (1..1024, target GL_TEXTURE_2D 0x0DE1 or
 * GL_RENDERBUFFER 0x8D41) as an n x 4 array of float.  Names above 1024 are
 * "not GL objects" (CUDA_ERROR_INVALID_VALUE).  Mapping checks the mapped
 * state as a driver does; unregistering frees the backing. */
enum { MAGIC_GFX = 0x47465831 };
typedef struct {
    int magic, alive, mapped, is_image;
    CUdeviceptr ptr;
    size_t size;
    CUarray arr;
} fake_gfx;

/* Lock held. */
static fake_gfx *
gfx_ok(CUgraphicsResource h)
{
    fake_gfx *g = (fake_gfx *)h;
    if (!known(g) || g->magic != MAGIC_GFX)
        return NULL;
    if (!g->alive) {
        stale_uses++;
        return NULL;
    }
    return g;
}

static CUresult
gfx_new(CUgraphicsResource *out, CUdeviceptr p, size_t n, CUarray arr)
{
    fake_gfx *g = calloc(1, sizeof *g);
    if (g == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    g->magic = MAGIC_GFX;
    g->alive = 1;
    g->ptr = p;
    g->size = n;
    g->arr = arr;
    g->is_image = arr != NULL;
    pthread_mutex_lock(&lock);
    remember(g);
    unlock();
    *out = (CUgraphicsResource)g;
    return CUDA_SUCCESS;
}

static CUresult
fake_cuGraphicsGLRegisterBuffer(CUgraphicsResource *out, unsigned int buffer, unsigned int flags)
{
    CUresult rc = enter(F_cuGraphicsGLRegisterBuffer);
    CUdeviceptr p;
    if (rc)
        return rc;
    if (out == NULL || buffer == 0 || buffer > 1024 || (flags & ~0xFu))
        return CUDA_ERROR_INVALID_VALUE;
    rc = device_alloc(&p, (size_t)buffer * 256, K_DEVICE, 0);
    if (rc)
        return rc;
    rc = gfx_new(out, p, (size_t)buffer * 256, NULL);
    if (rc)
        free_kind(p, 0);
    return rc;
}

static CUresult
fake_cuGraphicsGLRegisterImage(CUgraphicsResource *out, unsigned int image, unsigned int target,
                               unsigned int flags)
{
    CUresult rc = enter(F_cuGraphicsGLRegisterImage);
    CUDA_ARRAY3D_DESCRIPTOR d;
    CUarray arr;
    if (rc)
        return rc;
    if (out == NULL || image == 0 || image > 1024 || (flags & ~0xFu)
        || (target != 0x0DE1 && target != 0x8D41))
        return CUDA_ERROR_INVALID_VALUE;
    memset(&d, 0, sizeof d);
    d.Width = image;
    d.Height = 4;
    d.Format = CU_AD_FORMAT_FLOAT;
    d.NumChannels = 1;
    pthread_mutex_lock(&lock);
    rc = array_create(&arr, &d);
    unlock();
    if (rc)
        return rc;
    return gfx_new(out, 0, 0, arr);
}

static CUresult
gfx_map(unsigned int count, CUgraphicsResource *res, int map)
{
    CUresult rc = CUDA_SUCCESS;
    unsigned int i;
    if (count == 0 || res == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    if (need_ctx(&rc) == NULL)
        goto done;
    for (i = 0; i < count; i++) {
        fake_gfx *g = gfx_ok(res[i]);
        if (g == NULL) {
            rc = CUDA_ERROR_INVALID_HANDLE;
            goto done;
        }
        if (g->mapped == map) {
            rc = map ? CUDA_ERROR_ALREADY_MAPPED : CUDA_ERROR_NOT_MAPPED;
            goto done;
        }
    }
    for (i = 0; i < count; i++)
        ((fake_gfx *)res[i])->mapped = map;
done:
    unlock();
    return rc;
}

static CUresult
fake_cuGraphicsMapResources(unsigned int count, CUgraphicsResource *res, CUstream s)
{
    CUresult rc = enter(F_cuGraphicsMapResources);
    (void)s;
    if (rc)
        return rc;
    return gfx_map(count, res, 1);
}

static CUresult
fake_cuGraphicsUnmapResources(unsigned int count, CUgraphicsResource *res, CUstream s)
{
    CUresult rc = enter(F_cuGraphicsUnmapResources);
    (void)s;
    if (rc)
        return rc;
    return gfx_map(count, res, 0);
}

static CUresult
fake_cuGraphicsResourceGetMappedPointer(CUdeviceptr *p, size_t *n, CUgraphicsResource h)
{
    CUresult rc = enter(F_cuGraphicsResourceGetMappedPointer);
    fake_gfx *g;
    if (rc)
        return rc;
    if (p == NULL || n == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    if ((g = gfx_ok(h)) == NULL)
        rc = CUDA_ERROR_INVALID_HANDLE;
    else if (!g->mapped)
        rc = CUDA_ERROR_NOT_MAPPED;
    else if (g->is_image)
        rc = CUDA_ERROR_NOT_MAPPED_AS_POINTER;
    else {
        *p = g->ptr;
        *n = g->size;
    }
    unlock();
    return rc;
}

static CUresult
fake_cuGraphicsSubResourceGetMappedArray(CUarray *out, CUgraphicsResource h, unsigned int index,
                                         unsigned int level)
{
    CUresult rc = enter(F_cuGraphicsSubResourceGetMappedArray);
    fake_gfx *g;
    if (rc)
        return rc;
    if (out == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    if ((g = gfx_ok(h)) == NULL)
        rc = CUDA_ERROR_INVALID_HANDLE;
    else if (!g->mapped)
        rc = CUDA_ERROR_NOT_MAPPED;
    else if (!g->is_image)
        rc = CUDA_ERROR_NOT_MAPPED_AS_ARRAY;
    else if (index != 0 || level != 0)
        rc = CUDA_ERROR_INVALID_VALUE;
    else
        *out = g->arr;
    unlock();
    return rc;
}

static CUresult
fake_cuGraphicsUnregisterResource(CUgraphicsResource h)
{
    CUresult rc = enter(F_cuGraphicsUnregisterResource);
    fake_gfx *g;
    CUdeviceptr p = 0;
    if (rc)
        return rc;
    pthread_mutex_lock(&lock);
    if ((g = gfx_ok(h)) == NULL) {
        rc = CUDA_ERROR_INVALID_HANDLE;
    } else {
        g->alive = 0;
        p = g->ptr;
        if (g->is_image)
            array_release((fake_array *)g->arr);
    }
    unlock();
    if (p != 0)
        free_kind(p, 0);
    return rc;
}

static fake_event *event_ok(CUevent h);

static CUresult
fake_cuIpcGetEventHandle(CUipcEventHandle *h, CUevent ev)
{
    CUresult rc = enter(F_cuIpcGetEventHandle);
    unsigned long long w[3];
    fake_event *e;
    if (rc)
        return rc;
    if (h == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    if ((e = event_ok(ev)) == NULL)
        rc = CUDA_ERROR_INVALID_HANDLE;
    else if ((e->flags & CU_EVENT_INTERPROCESS) == 0 || (e->flags & CU_EVENT_DISABLE_TIMING) == 0)
        rc = CUDA_ERROR_INVALID_VALUE;
    else {
        memset(h, 0, sizeof *h);
        w[0] = IPC_EVT_MAGIC;
        w[1] = (unsigned long long)getpid();
        w[2] = e->flags;
        memcpy(h->reserved, w, sizeof w);
    }
    unlock();
    return rc;
}

static CUresult
fake_cuIpcOpenEventHandle(CUevent *out, CUipcEventHandle h)
{
    CUresult rc = enter(F_cuIpcOpenEventHandle);
    unsigned long long w[3];
    fake_ctx *c;
    fake_event *e;
    if (rc)
        return rc;
    if (out == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    memcpy(w, h.reserved, sizeof w);
    if (w[0] != IPC_EVT_MAGIC)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    c = need_ctx(&rc);
    if (c != NULL) {
        if ((e = calloc(1, sizeof *e)) == NULL) {
            rc = CUDA_ERROR_OUT_OF_MEMORY;
        } else {
            e->magic = MAGIC_EVENT;
            e->alive = 1;
            remember(e);
            e->ctx = c;
            e->flags = (unsigned)w[2];
            e->next_all = all_events;
            all_events = e;
            live_events++;
            *out = (CUevent)e;
        }
    }
    unlock();
    return rc;
}

/* pools */
static fake_pool *
pool_ok(CUmemoryPool h)
{
    fake_pool *p = (fake_pool *)h;
    if (!known(p) || p->magic != MAGIC_POOL)
        return NULL;
    if (!p->alive) {
        stale_uses++;
        return NULL;
    }
    return p;
}

static fake_pool *
pool_new_locked(int fd, int dev, int imported, unsigned types)
{
    fake_pool *p = calloc(1, sizeof *p);
    if (p == NULL)
        return NULL;
    p->magic = MAGIC_POOL;
    p->alive = 1;
    p->fd = fd;
    p->dev = dev;
    p->imported = imported;
    p->handle_types = types;
    p->used = 4096;
    remember(p);
    p->next_all = all_pools;
    all_pools = p;
    live_pools++;
    return p;
}

static CUresult
fake_cuMemPoolCreate(CUmemoryPool *out, const CUmemPoolProps *props)
{
    CUresult rc = enter(F_cuMemPoolCreate);
    unsigned long long hdr[2];
    fake_pool *p;
    int fd;
    if (rc)
        return rc;
    if (out == NULL || props == NULL || props->allocType != CU_MEM_ALLOCATION_TYPE_PINNED
        || props->location.type != CU_MEM_LOCATION_TYPE_DEVICE
        || (props->handleTypes != CU_MEM_HANDLE_TYPE_NONE
            && props->handleTypes != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR))
        return CUDA_ERROR_INVALID_VALUE;
    if (!dev_ok(props->location.id))
        return CUDA_ERROR_INVALID_DEVICE;
    fd = memfd_create("fakecuda-pool", MFD_CLOEXEC);
    if (fd < 0 || ftruncate(fd, (off_t)POOL_BYTES) != 0) {
        if (fd >= 0)
            close(fd);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    hdr[0] = POOL_FD_MAGIC;
    hdr[1] = (unsigned long long)props->location.id;
    if (pwrite(fd, hdr, sizeof hdr, 0) != (ssize_t)sizeof hdr) {
        close(fd);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    pthread_mutex_lock(&lock);
    p = pool_new_locked(fd, props->location.id, 0, props->handleTypes);
    unlock();
    if (p == NULL) {
        close(fd);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *out = (CUmemoryPool)p;
    return CUDA_SUCCESS;
}

static CUresult
fake_cuMemPoolDestroy(CUmemoryPool h)
{
    CUresult rc = enter(F_cuMemPoolDestroy);
    fake_pool *p;
    if (rc)
        return rc;
    pthread_mutex_lock(&lock);
    if ((p = pool_ok(h)) == NULL) {
        rc = CUDA_ERROR_INVALID_VALUE;
    } else {
        p->alive = 0;
        close(p->fd);
        p->fd = -1;
        live_pools--;
    }
    unlock();
    return rc;
}

static CUresult
fake_cuMemPoolExportToShareableHandle(void *out, CUmemoryPool h, CUmemAllocationHandleType type,
                                      unsigned long long flags)
{
    CUresult rc = enter(F_cuMemPoolExportToShareableHandle);
    fake_pool *p;
    if (rc)
        return rc;
    if (out == NULL || flags != 0 || type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    if ((p = pool_ok(h)) == NULL || p->imported
        || p->handle_types != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
        rc = CUDA_ERROR_INVALID_VALUE;
    else if ((*(int *)out = fcntl(p->fd, F_DUPFD_CLOEXEC, 0)) < 0)
        rc = CUDA_ERROR_OPERATING_SYSTEM;
    unlock();
    return rc;
}

static CUresult
fake_cuMemPoolImportFromShareableHandle(CUmemoryPool *out, void *handle,
                                        CUmemAllocationHandleType type, unsigned long long flags)
{
    CUresult rc = enter(F_cuMemPoolImportFromShareableHandle);
    unsigned long long hdr[2];
    int fd = (int)(intptr_t)handle, mine;
    fake_pool *p;
    if (rc)
        return rc;
    if (out == NULL || flags != 0 || type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
        return CUDA_ERROR_INVALID_VALUE;
    if (pread(fd, hdr, sizeof hdr, 0) != (ssize_t)sizeof hdr || hdr[0] != POOL_FD_MAGIC)
        return CUDA_ERROR_INVALID_VALUE;
    if ((mine = fcntl(fd, F_DUPFD_CLOEXEC, 0)) < 0)
        return CUDA_ERROR_OPERATING_SYSTEM;
    pthread_mutex_lock(&lock);
    p = pool_new_locked(mine, (int)hdr[1], 1, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    unlock();
    if (p == NULL) {
        close(mine);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *out = (CUmemoryPool)p;
    return CUDA_SUCCESS;
}

/* map n bytes of pool p at off as a K_MAPPED record of context c; lock held */
static CUresult
pool_map(fake_pool *p, size_t off, size_t n, fake_ctx *c, int fill, CUdeviceptr *out)
{
    void *m = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_SHARED, p->fd, (off_t)off);
    fake_alloc *a;
    if (m == MAP_FAILED)
        return CUDA_ERROR_OUT_OF_MEMORY;
    if (fill)
        memset(m, 0xA5, n);
    if ((a = add_alloc(m, n, K_MAPPED, 0, c)) == NULL) {
        munmap(m, n);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    a->pool = p;
    a->pool_off = off;
    *out = (CUdeviceptr)(uintptr_t)m;
    return CUDA_SUCCESS;
}

static CUresult
fake_cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t n, CUmemoryPool h, CUstream s)
{
    CUresult rc = enter(F_cuMemAllocFromPoolAsync);
    fake_pool *p;
    fake_ctx *c;
    size_t need;
    if (rc)
        return rc;
    if (dptr == NULL || n == 0)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    if ((c = need_ctx(&rc)) == NULL || (rc = check_stream(s, c)) != CUDA_SUCCESS)
        goto done;
    if ((p = pool_ok(h)) == NULL || p->imported) {
        rc = CUDA_ERROR_INVALID_VALUE;
        goto done;
    }
    need = (n + 4095) / 4096 * 4096;
    if (need > POOL_BYTES - p->used || n > dev_memory - dev_used[c->dev]) {
        rc = CUDA_ERROR_OUT_OF_MEMORY;
        goto done;
    }
    if ((rc = pool_map(p, p->used, n, c, 1, dptr)) == CUDA_SUCCESS)
        p->used += need;
done:
    unlock();
    return rc;
}

static CUresult
fake_cuMemPoolExportPointer(CUmemPoolPtrExportData *out, CUdeviceptr ptr)
{
    CUresult rc = enter(F_cuMemPoolExportPointer);
    unsigned long long w[3];
    fake_alloc *a;
    if (rc)
        return rc;
    if (out == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    a = find_base((uintptr_t)ptr);
    if (a == NULL || a->kind != K_MAPPED || a->pool == NULL || a->pool->imported
        || a->pool->handle_types != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) {
        rc = CUDA_ERROR_INVALID_VALUE;
    } else {
        memset(out, 0, sizeof *out);
        w[0] = POOL_PTR_MAGIC;
        w[1] = a->pool_off;
        w[2] = a->size;
        memcpy(out->reserved, w, sizeof w);
    }
    unlock();
    return rc;
}

static CUresult
fake_cuMemPoolImportPointer(CUdeviceptr *out, CUmemoryPool h, CUmemPoolPtrExportData *data)
{
    CUresult rc = enter(F_cuMemPoolImportPointer);
    unsigned long long w[3];
    fake_pool *p;
    fake_ctx *c;
    if (rc)
        return rc;
    if (out == NULL || data == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    memcpy(w, data->reserved, sizeof w);
    if (w[0] != POOL_PTR_MAGIC || w[2] == 0 || w[1] + w[2] > POOL_BYTES)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    if ((c = need_ctx(&rc)) == NULL)
        goto done;
    if ((p = pool_ok(h)) == NULL || !p->imported) {
        rc = CUDA_ERROR_INVALID_VALUE;
        goto done;
    }
    rc = pool_map(p, (size_t)w[1], (size_t)w[2], c, 0, out);
done:
    unlock();
    return rc;
}

static CUresult
fake_cuMemPoolSetAccess(CUmemoryPool h, const CUmemAccessDesc *map, size_t count)
{
    CUresult rc = enter(F_cuMemPoolSetAccess);
    size_t i;
    if (rc)
        return rc;
    if (map == NULL && count)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    if (pool_ok(h) == NULL)
        rc = CUDA_ERROR_INVALID_VALUE;
    for (i = 0; rc == CUDA_SUCCESS && i < count; i++)
        if (map[i].location.type != CU_MEM_LOCATION_TYPE_DEVICE || !dev_ok(map[i].location.id))
            rc = CUDA_ERROR_INVALID_DEVICE;
    for (i = 0; rc == CUDA_SUCCESS && i < count; i++) {
        fake_pool *p = (fake_pool *)h;
        if (map[i].flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
            p->access |= 1u << map[i].location.id;
        else
            p->access &= ~(1u << map[i].location.id);
    }
    unlock();
    return rc;
}

/* access: the pool's own device reads and writes; an imported pool grants
 * nothing until cuMemPoolSetAccess (which the stand-in remembers per device) */
static CUresult
fake_cuMemPoolGetAccess(CUmemAccess_flags *flags, CUmemoryPool h, CUmemLocation *loc)
{
    CUresult rc = enter(F_cuMemPoolGetAccess);
    fake_pool *p;
    if (rc)
        return rc;
    if (flags == NULL || loc == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    if (loc->type != CU_MEM_LOCATION_TYPE_DEVICE || !dev_ok(loc->id))
        return CUDA_ERROR_INVALID_DEVICE;
    pthread_mutex_lock(&lock);
    if ((p = pool_ok(h)) == NULL)
        rc = CUDA_ERROR_INVALID_VALUE;
    else
        *flags = (!p->imported && loc->id == p->dev) || (p->access & (1u << loc->id))
                     ? CU_MEM_ACCESS_FLAGS_PROT_READWRITE
                     : CU_MEM_ACCESS_FLAGS_PROT_NONE;
    unlock();
    return rc;
}

/* virtual memory */
static fake_vmem *
vmem_ok(CUmemGenericAllocationHandle h)
{
    fake_vmem *v = (fake_vmem *)(uintptr_t)h;
    if (!known(v) || v->magic != MAGIC_VMEM)
        return NULL;
    if (!v->alive) {
        stale_uses++;
        return NULL;
    }
    return v;
}

static fake_range *
range_find(fake_range *list, uintptr_t p)
{
    for (; list != NULL; list = list->next)
        if (p >= list->base && p - list->base < list->size)
            return list;
    return NULL;
}

static void
range_unlink(fake_range **list, fake_range *r)
{
    for (; *list != NULL; list = &(*list)->next) {
        if (*list == r) {
            *list = r->next;
            return;
        }
    }
}

static CUresult
fake_cuMemAddressReserve(CUdeviceptr *out, size_t size, size_t align, CUdeviceptr addr,
                         unsigned long long flags)
{
    CUresult rc = enter(F_cuMemAddressReserve);
    fake_range *r;
    void *m;
    if (rc)
        return rc;
    if (out == NULL || size == 0 || size % VMM_GRAN || flags != 0 || (align & (align - 1)) != 0)
        return CUDA_ERROR_INVALID_VALUE;
    m = mmap((void *)(uintptr_t)addr, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
             -1, 0);
    if (m == MAP_FAILED)
        return CUDA_ERROR_OUT_OF_MEMORY;
    if ((r = calloc(1, sizeof *r)) == NULL) {
        munmap(m, size);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    r->base = (uintptr_t)m;
    r->size = size;
    pthread_mutex_lock(&lock);
    r->next = reservations;
    reservations = r;
    live_reservations++;
    unlock();
    *out = (CUdeviceptr)r->base;
    return CUDA_SUCCESS;
}

static CUresult
fake_cuMemAddressFree(CUdeviceptr p, size_t size)
{
    CUresult rc = enter(F_cuMemAddressFree);
    fake_range *r, *m;
    if (rc)
        return rc;
    pthread_mutex_lock(&lock);
    r = range_find(reservations, (uintptr_t)p);
    if (r == NULL || r->base != (uintptr_t)p || r->size != size) {
        stale_uses++;
        rc = CUDA_ERROR_INVALID_VALUE;
        goto done;
    }
    for (m = mappings; m != NULL; m = m->next)
        if (m->base >= r->base && m->base - r->base < r->size) {
            rc = CUDA_ERROR_INVALID_VALUE; /* still mapped */
            goto done;
        }
    range_unlink(&reservations, r);
    munmap((void *)r->base, r->size);
    free(r);
    live_reservations--;
done:
    unlock();
    return rc;
}

static CUresult
fake_cuMemCreate(CUmemGenericAllocationHandle *out, size_t size, const CUmemAllocationProp *prop,
                 unsigned long long flags)
{
    CUresult rc = enter(F_cuMemCreate);
    fake_vmem *v;
    void *m;
    int fd;
    if (rc)
        return rc;
    if (out == NULL || prop == NULL || size == 0 || size % VMM_GRAN || flags != 0
        || prop->type != CU_MEM_ALLOCATION_TYPE_PINNED
        || prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE
        || (prop->requestedHandleTypes != CU_MEM_HANDLE_TYPE_NONE
            && prop->requestedHandleTypes != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR))
        return CUDA_ERROR_INVALID_VALUE;
    if (!dev_ok(prop->location.id))
        return CUDA_ERROR_INVALID_DEVICE;
    pthread_mutex_lock(&lock);
    if (size > dev_memory - dev_used[prop->location.id]) {
        unlock();
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    unlock();
    fd = memfd_create("fakecuda-vmm", MFD_CLOEXEC);
    if (fd < 0 || ftruncate(fd, (off_t)size) != 0) {
        if (fd >= 0)
            close(fd);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    m = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (m == MAP_FAILED || (v = calloc(1, sizeof *v)) == NULL) {
        if (m != MAP_FAILED)
            munmap(m, size);
        close(fd);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    memset(m, 0xA5, size);
    munmap(m, size);
    v->magic = MAGIC_VMEM;
    v->alive = 1;
    v->fd = fd;
    v->dev = prop->location.id;
    v->shareable = prop->requestedHandleTypes == CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    v->size = size;
    pthread_mutex_lock(&lock);
    remember(v);
    v->next_all = all_vmem;
    all_vmem = v;
    live_vmem++;
    dev_used[v->dev] += size;
    unlock();
    *out = (CUmemGenericAllocationHandle)(uintptr_t)v;
    return CUDA_SUCCESS;
}

static CUresult
fake_cuMemRelease(CUmemGenericAllocationHandle h)
{
    CUresult rc = enter(F_cuMemRelease);
    fake_vmem *v;
    if (rc)
        return rc;
    pthread_mutex_lock(&lock);
    if ((v = vmem_ok(h)) == NULL) {
        rc = CUDA_ERROR_INVALID_VALUE;
    } else {
        v->alive = 0;
        close(v->fd);
        v->fd = -1;
        live_vmem--;
        dev_used[v->dev] -= v->size;
    }
    unlock();
    return rc;
}

static CUresult
fake_cuMemMap(CUdeviceptr p, size_t size, size_t offset, CUmemGenericAllocationHandle h,
              unsigned long long flags)
{
    CUresult rc = enter(F_cuMemMap);
    fake_range *r, *m;
    fake_vmem *v;
    uintptr_t at = (uintptr_t)p;
    if (rc)
        return rc;
    if (size == 0 || size % VMM_GRAN || offset % VMM_GRAN || flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    if ((v = vmem_ok(h)) == NULL || offset > v->size || size > v->size - offset) {
        rc = CUDA_ERROR_INVALID_VALUE;
        goto done;
    }
    r = range_find(reservations, at);
    if (r == NULL || size > r->size - (at - r->base)) {
        rc = CUDA_ERROR_INVALID_VALUE; /* not (all) reserved */
        goto done;
    }
    for (m = mappings; m != NULL; m = m->next)
        if (at < m->base + m->size && m->base < at + size) {
            rc = CUDA_ERROR_INVALID_VALUE; /* already mapped */
            goto done;
        }
    if ((m = calloc(1, sizeof *m)) == NULL) {
        rc = CUDA_ERROR_OUT_OF_MEMORY;
        goto done;
    }
    if (mmap((void *)at, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, v->fd, (off_t)offset)
        == MAP_FAILED) {
        free(m);
        rc = CUDA_ERROR_OUT_OF_MEMORY;
        goto done;
    }
    m->base = at;
    m->size = size;
    m->mem = v;
    m->next = mappings;
    mappings = m;
done:
    unlock();
    return rc;
}

static CUresult
fake_cuMemSetAccess(CUdeviceptr p, size_t size, const CUmemAccessDesc *desc, size_t count)
{
    CUresult rc = enter(F_cuMemSetAccess);
    uintptr_t at = (uintptr_t)p, end = at + size;
    fake_range *m;
    size_t i;
    if (rc)
        return rc;
    if (desc == NULL || count == 0 || size == 0)
        return CUDA_ERROR_INVALID_VALUE;
    for (i = 0; i < count; i++)
        if (desc[i].location.type != CU_MEM_LOCATION_TYPE_DEVICE || !dev_ok(desc[i].location.id))
            return CUDA_ERROR_INVALID_DEVICE;
    pthread_mutex_lock(&lock);
    /* every byte must be mapped */
    for (i = at; i < end;) {
        m = range_find(mappings, i);
        if (m == NULL) {
            rc = CUDA_ERROR_INVALID_VALUE;
            goto done;
        }
        i = m->base + m->size;
    }
    for (i = at; i < end;) {
        m = range_find(mappings, i);
        if (m->access == NULL
            && (m->access = add_alloc((void *)m->base, m->size, K_VMM, 0, NULL)) == NULL) {
            rc = CUDA_ERROR_OUT_OF_MEMORY;
            goto done;
        }
        i = m->base + m->size;
    }
done:
    unlock();
    return rc;
}

static CUresult
fake_cuMemUnmap(CUdeviceptr p, size_t size)
{
    CUresult rc = enter(F_cuMemUnmap);
    uintptr_t at = (uintptr_t)p, end = at + size, i;
    fake_range *m;
    if (rc)
        return rc;
    pthread_mutex_lock(&lock);
    for (i = at; i < end;) { /* whole mappings only */
        m = range_find(mappings, i);
        if (m == NULL || m->base != i || m->base + m->size > end) {
            stale_uses++;
            rc = CUDA_ERROR_INVALID_VALUE;
            goto done;
        }
        i = m->base + m->size;
    }
    for (i = at; i < end;) {
        m = range_find(mappings, i);
        i = m->base + m->size;
        if (m->access != NULL)
            drop_alloc(m->access);
        mmap((void *)m->base, m->size, PROT_NONE,
             MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
        range_unlink(&mappings, m);
        free(m);
    }
done:
    unlock();
    return rc;
}

static CUresult
fake_cuMemGetAllocationGranularity(size_t *out, const CUmemAllocationProp *prop,
                                   CUmemAllocationGranularity_flags option)
{
    CUresult rc = enter(F_cuMemGetAllocationGranularity);
    if (rc)
        return rc;
    if (out == NULL || prop == NULL || prop->type != CU_MEM_ALLOCATION_TYPE_PINNED)
        return CUDA_ERROR_INVALID_VALUE;
    if (prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE || !dev_ok(prop->location.id))
        return CUDA_ERROR_INVALID_DEVICE;
    (void)option;
    *out = VMM_GRAN;
    return CUDA_SUCCESS;
}

static CUresult
fake_cuMemExportToShareableHandle(void *out, CUmemGenericAllocationHandle h,
                                  CUmemAllocationHandleType type, unsigned long long flags)
{
    CUresult rc = enter(F_cuMemExportToShareableHandle);
    fake_vmem *v;
    if (rc)
        return rc;
    if (out == NULL || flags != 0 || type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    if ((v = vmem_ok(h)) == NULL || !v->shareable)
        rc = CUDA_ERROR_INVALID_VALUE;
    else if ((*(int *)out = fcntl(v->fd, F_DUPFD_CLOEXEC, 0)) < 0)
        rc = CUDA_ERROR_OPERATING_SYSTEM;
    unlock();
    return rc;
}

static CUresult
fake_cuMemImportFromShareableHandle(CUmemGenericAllocationHandle *out, void *handle,
                                    CUmemAllocationHandleType type)
{
    CUresult rc = enter(F_cuMemImportFromShareableHandle);
    int fd = (int)(intptr_t)handle, mine;
    struct stat sb;
    fake_vmem *v;
    if (rc)
        return rc;
    if (out == NULL || type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
        return CUDA_ERROR_INVALID_VALUE;
    if (fstat(fd, &sb) != 0 || sb.st_size <= 0 || (size_t)sb.st_size % VMM_GRAN)
        return CUDA_ERROR_INVALID_VALUE;
    if ((mine = fcntl(fd, F_DUPFD_CLOEXEC, 0)) < 0)
        return CUDA_ERROR_OPERATING_SYSTEM;
    if ((v = calloc(1, sizeof *v)) == NULL) {
        close(mine);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    v->magic = MAGIC_VMEM;
    v->alive = 1;
    v->fd = mine;
    v->dev = 0;
    v->shareable = 1;
    v->size = (size_t)sb.st_size;
    pthread_mutex_lock(&lock);
    remember(v);
    v->next_all = all_vmem;
    all_vmem = v;
    live_vmem++;
    dev_used[v->dev] += v->size;
    unlock();
    *out = (CUmemGenericAllocationHandle)(uintptr_t)v;
    return CUDA_SUCCESS;
}

/* ---- green contexts (CUDA 12.4): SM resources, splits, descriptors ----
 * The device has 132 SMs; its partition rules are fakecuda_sm_rules()'s
 * (by default the architecture's: 8 and 8 from sm_90, 4 and 2 on sm_80, 2 and
 * 2 before), and 0 leaves a field unreported, as drivers before 12.8 do.  A
 * resource records, in its opaque bytes, its device, the split that made it
 * (0: the whole device) and its first SM; a split of a cluster-limited
 * device (fakecuda_sm_groups_cap) makes at most that many groups. */
enum { MAGIC_RES = 0x52455331, MAGIC_DESC = 0x44455331, MAGIC_GREEN = 0x47524e31 };

typedef struct {
    unsigned magic;
    int dev;
    unsigned split; /* the split instance that made it; 0 for a whole device */
    unsigned first; /* its first SM */
} fake_res_tag;

typedef struct {
    unsigned magic;
    int dev;
    unsigned sms;
} fake_desc;

typedef struct {
    unsigned magic;
    int alive;
    int dev;
    unsigned sms;
    fake_ctx *ctx; /* what cuCtxFromGreenCtx gives */
} fake_green;

static int sm_min = -1, sm_align = -1; /* -1: the architecture's rule */
static unsigned sm_groups_cap, sm_splits;
static long live_green;

EXPORT void
fakecuda_sm_rules(int min_partition, int alignment, unsigned groups_cap)
{
    pthread_mutex_lock(&lock);
    sm_min = min_partition;
    sm_align = alignment;
    sm_groups_cap = groups_cap;
    unlock();
}

static fake_res_tag *
res_tag(const CUdevResource *r)
{
    return (fake_res_tag *)(void *)r->_internal_padding;
}

static CUresult
fake_cuDeviceGetDevResource(CUdevice d, CUdevResource *res, CUdevResourceType type)
{
    CUresult rc = enter(F_cuDeviceGetDevResource);
    int rule_min = cc_major >= 9 ? 8 : cc_major == 8 ? 4 : 2, rule_align = cc_major >= 9 ? 8 : 2;
    if (rc)
        return rc;
    if (res == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    if (!dev_ok(d))
        return CUDA_ERROR_INVALID_DEVICE;
    if (type != CU_DEV_RESOURCE_TYPE_SM)
        return CUDA_ERROR_INVALID_RESOURCE_TYPE;
    memset(res, 0, sizeof *res);
    res->type = CU_DEV_RESOURCE_TYPE_SM;
    res->sm.smCount = 132;
    pthread_mutex_lock(&lock);
    res->sm.minSmPartitionSize = (unsigned)(sm_min < 0 ? rule_min : sm_min);
    res->sm.smCoscheduledAlignment = (unsigned)(sm_align < 0 ? rule_align : sm_align);
    unlock();
    res_tag(res)->magic = MAGIC_RES;
    res_tag(res)->dev = d;
    return CUDA_SUCCESS;
}

static CUresult
fake_cuDevSmResourceSplitByCount(CUdevResource *result, unsigned int *nbGroups,
                                 const CUdevResource *input, CUdevResource *remaining,
                                 unsigned int useFlags, unsigned int minCount)
{
    CUresult rc = enter(F_cuDevSmResourceSplitByCount);
    unsigned size, can, i, align, minp, split;
    const fake_res_tag *in;
    if (rc)
        return rc;
    if (nbGroups == NULL || input == NULL || (useFlags & ~3u) != 0)
        return CUDA_ERROR_INVALID_VALUE;
    in = (const fake_res_tag *)(const void *)input->_internal_padding;
    if (input->type != CU_DEV_RESOURCE_TYPE_SM || in->magic != MAGIC_RES)
        return CUDA_ERROR_INVALID_RESOURCE_TYPE;
    if (in->split != 0) /* a split's output is split again only through a green context */
        return CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION;
    if (minCount > input->sm.smCount)
        return CUDA_ERROR_INVALID_VALUE;
    minp = input->sm.minSmPartitionSize ? input->sm.minSmPartitionSize : 2;
    align = input->sm.smCoscheduledAlignment ? input->sm.smCoscheduledAlignment : 2;
    size = minCount < minp ? minp : minCount;
    size = (size + align - 1) / align * align;
    can = input->sm.smCount / size;
    pthread_mutex_lock(&lock);
    if (sm_groups_cap && can > sm_groups_cap)
        can = sm_groups_cap;
    split = ++sm_splits;
    unlock();
    if (result == NULL) {
        *nbGroups = can;
        return CUDA_SUCCESS;
    }
    if (*nbGroups < can)
        can = *nbGroups;
    for (i = 0; i < can; i++) {
        memset(&result[i], 0, sizeof result[i]);
        result[i].type = CU_DEV_RESOURCE_TYPE_SM;
        result[i].sm.smCount = size;
        result[i].sm.minSmPartitionSize = minp;
        result[i].sm.smCoscheduledAlignment = align;
        res_tag(&result[i])->magic = MAGIC_RES;
        res_tag(&result[i])->dev = in->dev;
        res_tag(&result[i])->split = split;
        res_tag(&result[i])->first = in->first + i * size;
    }
    *nbGroups = can;
    if (remaining != NULL) {
        memset(remaining, 0, sizeof *remaining);
        remaining->type = CU_DEV_RESOURCE_TYPE_SM;
        remaining->sm.smCount = input->sm.smCount - can * size;
        res_tag(remaining)->magic = MAGIC_RES;
        res_tag(remaining)->dev = in->dev;
        res_tag(remaining)->split = split;
        res_tag(remaining)->first = in->first + can * size;
    }
    return CUDA_SUCCESS;
}

static CUresult
fake_cuDevResourceGenerateDesc(CUdevResourceDesc *phDesc, CUdevResource *resources,
                               unsigned int nbResources)
{
    CUresult rc = enter(F_cuDevResourceGenerateDesc);
    fake_desc *d;
    unsigned i, sms = 0;
    if (rc)
        return rc;
    if (phDesc == NULL || resources == NULL || nbResources == 0)
        return CUDA_ERROR_INVALID_VALUE;
    for (i = 0; i < nbResources; i++) {
        const fake_res_tag *t = res_tag(&resources[i]);
        if (resources[i].type != CU_DEV_RESOURCE_TYPE_SM || t->magic != MAGIC_RES)
            return CUDA_ERROR_INVALID_RESOURCE_TYPE;
        if (i > 0
            && (t->dev != res_tag(&resources[0])->dev || t->split != res_tag(&resources[0])->split))
            return CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION;
        sms += resources[i].sm.smCount;
    }
    if ((d = calloc(1, sizeof *d)) == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    d->magic = MAGIC_DESC;
    d->dev = res_tag(&resources[0])->dev;
    d->sms = sms;
    pthread_mutex_lock(&lock);
    remember(d);
    unlock();
    *phDesc = (CUdevResourceDesc)d;
    return CUDA_SUCCESS;
}

static fake_green *
green_ok(CUgreenCtx h)
{
    fake_green *g = (fake_green *)h;
    if (!known(g) || g->magic != MAGIC_GREEN)
        return NULL;
    if (!g->alive) {
        stale_uses++;
        return NULL;
    }
    return g;
}

static CUresult
fake_cuGreenCtxCreate(CUgreenCtx *phCtx, CUdevResourceDesc desc, CUdevice dev, unsigned int flags)
{
    CUresult rc = enter(F_cuGreenCtxCreate);
    fake_desc *d = (fake_desc *)desc;
    fake_green *g;
    if (rc)
        return rc;
    if (phCtx == NULL || flags != CU_GREEN_CTX_DEFAULT_STREAM)
        return CUDA_ERROR_INVALID_VALUE;
    if (!dev_ok(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    pthread_mutex_lock(&lock);
    if (!known(d) || d->magic != MAGIC_DESC || d->dev != dev) {
        unlock();
        return CUDA_ERROR_INVALID_VALUE;
    }
    g = calloc(1, sizeof *g);
    if (g == NULL || (g->ctx = new_ctx(dev, 0, 0)) == NULL) {
        free(g);
        unlock();
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    g->magic = MAGIC_GREEN;
    g->alive = 1;
    g->dev = dev;
    g->sms = d->sms;
    g->ctx->green = 1;
    remember(g);
    live_ctx++;
    live_green++;
    *phCtx = (CUgreenCtx)g;
    unlock();
    return CUDA_SUCCESS;
}

static CUresult
fake_cuGreenCtxDestroy(CUgreenCtx h)
{
    CUresult rc = enter(F_cuGreenCtxDestroy);
    fake_green *g;
    int i;
    if (rc)
        return rc;
    pthread_mutex_lock(&lock);
    if ((g = green_ok(h)) == NULL) {
        unlock();
        return CUDA_ERROR_INVALID_CONTEXT;
    }
    g->alive = 0;
    g->ctx->alive = 0;
    live_green--;
    live_ctx--;
    reap_context(g->ctx);
    for (i = ctx_depth - 1; i >= 0; i--) {
        if (ctx_stack[i] == g->ctx) {
            if (i == ctx_depth - 1)
                ctx_depth--;
            break;
        }
    }
    unlock();
    return CUDA_SUCCESS;
}

static CUresult
fake_cuCtxFromGreenCtx(CUcontext *pContext, CUgreenCtx h)
{
    CUresult rc = enter(F_cuCtxFromGreenCtx);
    fake_green *g;
    if (rc)
        return rc;
    if (pContext == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    g = green_ok(h);
    if (g != NULL)
        *pContext = (CUcontext)g->ctx;
    unlock();
    return g != NULL ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
}

static CUresult
fake_cuGreenCtxGetDevResource(CUgreenCtx h, CUdevResource *res, CUdevResourceType type)
{
    CUresult rc = enter(F_cuGreenCtxGetDevResource);
    fake_green *g;
    if (rc)
        return rc;
    if (res == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    if (type != CU_DEV_RESOURCE_TYPE_SM)
        return CUDA_ERROR_INVALID_RESOURCE_TYPE;
    pthread_mutex_lock(&lock);
    g = green_ok(h);
    if (g != NULL) {
        memset(res, 0, sizeof *res);
        res->type = CU_DEV_RESOURCE_TYPE_SM;
        res->sm.smCount = g->sms;
    }
    unlock();
    return g != NULL ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
}

static CUresult
fake_cuGreenCtxStreamCreate(CUstream *out, CUgreenCtx h, unsigned int flags, int prio)
{
    CUresult rc = enter(F_cuGreenCtxStreamCreate);
    fake_green *g;
    fake_stream *s;
    if (rc)
        return rc;
    if (out == NULL || flags != CU_STREAM_NON_BLOCKING) /* the driver requires it */
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    if ((g = green_ok(h)) == NULL) {
        unlock();
        return CUDA_ERROR_INVALID_CONTEXT;
    }
    if ((s = calloc(1, sizeof *s)) == NULL) {
        unlock();
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    s->magic = MAGIC_STREAM;
    s->alive = 1;
    remember(s);
    s->ctx = g->ctx;
    s->flags = flags;
    s->priority = prio < -5 ? -5 : prio > 0 ? 0 : prio;
    s->next_all = all_streams;
    all_streams = s;
    live_streams++;
    *out = (CUstream)s;
    unlock();
    return CUDA_SUCCESS;
}

/* ---- process checkpoint (CUDA 12.8) ----
 * A CUDA process is one that fakecuda_cuda_process(pid, 1) named (the
 * stand-in runs in one process; the tests name a child); each goes RUNNING
 * -> LOCKED -> CHECKPOINTED -> (restore) LOCKED -> (unlock) RUNNING, and a
 * call out of turn is CUDA_ERROR_ILLEGAL_STATE, as the driver's.  Any other
 * pid is CUDA_ERROR_INVALID_VALUE. */
#define MAXPROCS 16
static struct {
    int pid;
    CUprocessState state;
    unsigned restores;
} procs[MAXPROCS];

EXPORT int
fakecuda_cuda_process(int pid, int on)
{
    int i, r = -1;
    pthread_mutex_lock(&lock);
    for (i = 0; i < MAXPROCS; i++) {
        if (procs[i].pid == pid) {
            if (!on)
                procs[i].pid = 0;
            r = 0;
            break;
        }
    }
    for (i = 0; on && r < 0 && i < MAXPROCS; i++) {
        if (procs[i].pid == 0) {
            procs[i].pid = pid;
            procs[i].state = CU_PROCESS_STATE_RUNNING;
            procs[i].restores = 0;
            r = 0;
        }
    }
    unlock();
    return r;
}

/* Move pid from state `from` to `to`; the CUresult.  Lock held. */
static CUresult
proc_step(int pid, CUprocessState from, CUprocessState to)
{
    int i;
    for (i = 0; i < MAXPROCS; i++) {
        if (pid > 0 && procs[i].pid == pid) {
            if (procs[i].state != from)
                return CUDA_ERROR_ILLEGAL_STATE;
            if (from == CU_PROCESS_STATE_CHECKPOINTED)
                procs[i].restores++;
            procs[i].state = to;
            return CUDA_SUCCESS;
        }
    }
    return CUDA_ERROR_INVALID_VALUE;
}

static CUresult
fake_cuCheckpointProcessGetState(int pid, CUprocessState *state)
{
    CUresult rc = enter(F_cuCheckpointProcessGetState);
    int i;
    if (rc)
        return rc;
    if (state == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    rc = CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    for (i = 0; i < MAXPROCS; i++) {
        if (pid > 0 && procs[i].pid == pid) {
            *state = procs[i].state;
            rc = CUDA_SUCCESS;
        }
    }
    unlock();
    return rc;
}

static CUresult
fake_cuCheckpointProcessGetRestoreThreadId(int pid, int *tid)
{
    CUresult rc = enter(F_cuCheckpointProcessGetRestoreThreadId);
    int i;
    if (rc)
        return rc;
    if (tid == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    rc = CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    for (i = 0; i < MAXPROCS; i++) {
        if (pid > 0 && procs[i].pid == pid) {
            *tid = pid; /* its main thread restores it */
            rc = CUDA_SUCCESS;
        }
    }
    unlock();
    return rc;
}

static CUresult
fake_cuCheckpointProcessLock(int pid, CUcheckpointLockArgs *args)
{
    CUresult rc = enter(F_cuCheckpointProcessLock);
    if (rc)
        return rc;
    if (args != NULL && (args->reserved0 != 0 || args->reserved1[0] != 0))
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    rc = proc_step(pid, CU_PROCESS_STATE_RUNNING, CU_PROCESS_STATE_LOCKED);
    unlock();
    return rc;
}

static CUresult
fake_cuCheckpointProcessCheckpoint(int pid, CUcheckpointCheckpointArgs *args)
{
    CUresult rc = enter(F_cuCheckpointProcessCheckpoint);
    if (rc)
        return rc;
    if (args != NULL && args->reserved[0] != 0)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    rc = proc_step(pid, CU_PROCESS_STATE_LOCKED, CU_PROCESS_STATE_CHECKPOINTED);
    unlock();
    return rc;
}

static CUresult
fake_cuCheckpointProcessRestore(int pid, CUcheckpointRestoreArgs *args)
{
    CUresult rc = enter(F_cuCheckpointProcessRestore);
    if (rc)
        return rc;
    if (args != NULL && args->gpuPairsCount != 0 && args->gpuPairs == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    rc = proc_step(pid, CU_PROCESS_STATE_CHECKPOINTED, CU_PROCESS_STATE_LOCKED);
    unlock();
    return rc;
}

static CUresult
fake_cuCheckpointProcessUnlock(int pid, CUcheckpointUnlockArgs *args)
{
    CUresult rc = enter(F_cuCheckpointProcessUnlock);
    if (rc)
        return rc;
    if (args != NULL && args->reserved[0] != 0)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    rc = proc_step(pid, CU_PROCESS_STATE_LOCKED, CU_PROCESS_STATE_RUNNING);
    unlock();
    return rc;
}

/* ---- cuGetProcAddress: the table, type-checked against cudaTypedefs.h ---- */
#define CHECK_TYPE(name, version, cls) \
    static PFN_##name##_v##version const check_##name __attribute__((unused)) = fake_##name;
PYGPU_CUDA_API(CHECK_TYPE, CHECK_TYPE)
#undef CHECK_TYPE

static const struct {
    const char *name;
    int version;
    void *fn;
} table[] = {
#define ENTRY(name, version, cls) {#name, version, (void *)fake_##name},
    PYGPU_CUDA_API(ENTRY, ENTRY)
#undef ENTRY
};

static int
is_hidden(const char *name)
{
    char key[160];
    if (hidden[0] == '\0')
        return 0;
    snprintf(key, sizeof key, ",%s,", name);
    return strstr(hidden, key) != NULL;
}

EXPORT CUresult
cuGetProcAddress_v2(const char *symbol, void **pfn, int version, cuuint64_t flags,
                    CUdriverProcAddressQueryResult *status)
{
    size_t i;
    if (symbol == NULL || pfn == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    *pfn = NULL;
    (void)flags;
    pthread_mutex_lock(&lock);
    read_env();
    unlock();
    for (i = 0; i < sizeof table / sizeof table[0]; i++) {
        if (strcmp(table[i].name, symbol) == 0 && !is_hidden(symbol)) {
            if (version < table[i].version) {
                if (status)
                    *status = CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT;
                return CUDA_ERROR_NOT_FOUND;
            }
            *pfn = table[i].fn;
            if (status)
                *status = CU_GET_PROC_ADDRESS_SUCCESS;
            return CUDA_SUCCESS;
        }
    }
    if (status)
        *status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    return CUDA_ERROR_NOT_FOUND;
}

/* ---- the tests' side ---- */

/* Fail the nth next call of `name` ("*": any entry point) with `code`;
 * code 0 cancels.  Returns 0, or -1 for an unknown name. */
EXPORT int
fakecuda_fail(const char *name, long nth, int code)
{
    int fn = lookup_fn(name);
    if (fn == -3)
        return -1;
    pthread_mutex_lock(&lock);
    inject_fn = code ? fn : -2;
    inject_nth = nth;
    inject_code = (CUresult)code;
    inject_sticky = 0;
    if (code)
        inject_fired = 0;
    unlock();
    return 0;
}

/* Every later call of `name` sleeps ms milliseconds where the driver would
 * be busy ("*" with ms 0: no delays).  Returns 0, or -1 for an unknown name. */
EXPORT int
fakecuda_delay(const char *name, long ms)
{
    int fn = lookup_fn(name), i;
    if (fn == -3 || (fn == -1 && ms != 0))
        return -1;
    pthread_mutex_lock(&lock);
    for (i = 0; i < F_COUNT; i++)
        if (fn == -1 || fn == i)
            delay_ms[i] = ms;
    unlock();
    return 0;
}

/* 1 if the last injected failure happened, 0 if it is still pending. */
EXPORT int
fakecuda_fired(void)
{
    int r;
    pthread_mutex_lock(&lock);
    r = inject_fired;
    unlock();
    return r;
}

EXPORT void
fakecuda_deinit(int on)
{
    pthread_mutex_lock(&lock);
    deinitialized = on;
    unlock();
}

/* Start (1) or stop (0) recording entry point names; starting clears. */
EXPORT void
fakecuda_trace(int on)
{
    pthread_mutex_lock(&lock);
    tracing = on;
    if (on) {
        trace_len = 0;
        if (trace)
            trace[0] = '\0';
    }
    unlock();
}

/* FAKECUDA_TRACE_AT_EXIT=path: when the library is unloaded, after the
 * interpreter's teardown, the names recorded since fakecuda_trace(1) are
 * written there, one a line (what a process does at exit, checked by a
 * test that reads the file). */
__attribute__((destructor)) static void
trace_at_exit(void)
{
    const char *path = getenv("FAKECUDA_TRACE_AT_EXIT");
    FILE *f;
    if (path == NULL || *path == '\0' || !tracing)
        return;
    if ((f = fopen(path, "w")) != NULL) {
        if (trace != NULL)
            fputs(trace, f);
        fclose(f);
    }
}

/* The names recorded, one a line; copies at most cap bytes, returns the length. */
EXPORT size_t
fakecuda_trace_get(char *buf, size_t cap)
{
    size_t n;
    pthread_mutex_lock(&lock);
    n = trace_len;
    if (buf && cap) {
        size_t k = n < cap - 1 ? n : cap - 1;
        if (k)
            memcpy(buf, trace, k);
        buf[k] = '\0';
    }
    unlock();
    return n;
}

EXPORT long
fakecuda_calls(const char *name)
{
    long n;
    int fn = name ? lookup_fn(name) : -1;
    pthread_mutex_lock(&lock);
    n = fn >= 0 ? calls_by_fn[fn] : fn == -1 ? calls_total : -1;
    unlock();
    return n;
}

/* Live handles of a kind: contexts, streams, events, modules, device,
 * managed, host, registered; stale (handles used after they died, and
 * frees of what was not allocated); launches; reaped (handles freed by the
 * destruction of their context rather than one by one); links (JIT link states
 * not destroyed); ipc (legacy IPC handles opened, not closed); pools (memory
 * pools not destroyed); vmm (physical allocations not released);
 * reservations (address ranges not freed). */
EXPORT long
fakecuda_live(const char *kind)
{
    long n = -1;
    pthread_mutex_lock(&lock);
    if (!strcmp(kind, "contexts"))
        n = live_ctx;
    else if (!strcmp(kind, "streams"))
        n = live_streams;
    else if (!strcmp(kind, "events"))
        n = live_events;
    else if (!strcmp(kind, "modules"))
        n = live_modules;
    else if (!strcmp(kind, "device"))
        n = live_device;
    else if (!strcmp(kind, "managed"))
        n = live_managed;
    else if (!strcmp(kind, "host"))
        n = live_host;
    else if (!strcmp(kind, "registered"))
        n = live_registered;
    else if (!strcmp(kind, "stale"))
        n = stale_uses;
    else if (!strcmp(kind, "launches"))
        n = launches;
    else if (!strcmp(kind, "reaped"))
        n = reaped;
    else if (!strcmp(kind, "links"))
        n = live_links;
    else if (!strcmp(kind, "ipc"))
        n = live_ipc;
    else if (!strcmp(kind, "pools"))
        n = live_pools;
    else if (!strcmp(kind, "vmm"))
        n = live_vmem;
    else if (!strcmp(kind, "reservations"))
        n = live_reservations;
    else if (!strcmp(kind, "graphs"))
        n = live_graphs;
    else if (!strcmp(kind, "graph_execs"))
        n = live_execs;
    else if (!strcmp(kind, "arrays"))
        n = live_arrays;
    else if (!strcmp(kind, "textures"))
        n = live_textures;
    else if (!strcmp(kind, "surfaces"))
        n = live_surfaces;
    else if (!strcmp(kind, "profiler"))
        n = profiler_on;
    else if (!strcmp(kind, "green"))
        n = live_green;
    unlock();
    return n;
}

/* Drop the records of leaked host registrations (the test harness's cleanup
 * after a failed cuMemHostUnregister it provoked); returns how many. */
EXPORT long
fakecuda_forget_registrations(void)
{
    long n = 0;
    fake_alloc *a, *next;
    pthread_mutex_lock(&lock);
    for (a = allocs; a != NULL; a = next) {
        next = a->next;
        if (a->kind == K_REGISTERED) {
            drop_alloc(a);
            n++;
        }
    }
    unlock();
    return n;
}

/* The calling thread's last launch: copies its parameter bytes; returns
 * their count. */
EXPORT size_t
fakecuda_thread_last_params(unsigned char *params, size_t cap)
{
    size_t n = thread_last.size;
    if (params)
        memcpy(params, thread_last.params, n < cap ? n : cap);
    return n;
}

/* The last launch: copies its parameter bytes; returns their count. */
EXPORT size_t
fakecuda_last_launch(char *name, size_t namecap, unsigned *dims, unsigned *shared, void **stream,
                     int *flags, unsigned char *params, size_t cap)
{
    size_t n;
    pthread_mutex_lock(&lock);
    if (name && namecap)
        snprintf(name, namecap, "%s", last_launch.name);
    if (dims) {
        memcpy(dims, last_launch.grid, sizeof last_launch.grid);
        memcpy(dims + 3, last_launch.block, sizeof last_launch.block);
        memcpy(dims + 6, last_launch.cluster, sizeof last_launch.cluster);
    }
    if (shared)
        *shared = last_launch.shared;
    if (stream)
        *stream = last_launch.stream;
    if (flags)
        *flags = last_launch.cooperative | (last_launch.pdl << 1);
    n = last_launch.size;
    if (params)
        memcpy(params, last_launch.params, n < cap ? n : cap);
    unlock();
    return n;
}

/* fakecuda_fail, sticky: once it fires, every later call but the exempt ones
 * (sticky_exempt) returns `code` for the rest of the process.  Returns 0, or
 * -1 for an unknown name. */
EXPORT int
fakecuda_fail_sticky(const char *name, long nth, int code)
{
    int fn = lookup_fn(name);
    if (fn == -3)
        return -1;
    pthread_mutex_lock(&lock);
    inject_fn = code ? fn : -2;
    inject_nth = nth;
    inject_code = (CUresult)code;
    inject_sticky = code != 0;
    inject_fired = 0;
    unlock();
    return 0;
}

/* The sticky error in force (0: none). */
EXPORT int
fakecuda_sticky(void)
{
    int r;
    pthread_mutex_lock(&lock);
    r = (int)sticky_code;
    unlock();
    return r;
}
