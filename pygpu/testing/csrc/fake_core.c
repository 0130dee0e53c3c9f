/* fakecuda: initialization and errors; the accounting every entry point goes
 * through (enter: failure injection, calls, traces, delays); the known-handle
 * set; cuGetProcAddress's table; the tests' controls (fakecuda_*).
 * fakecuda.h describes the stand-in and its files. */
#include "fakecuda.h"

static void read_env(void);

#define AS_NAME(name, version, cls) #name,
static const char *const fn_names[F_COUNT] = {PYGPU_CUDA_API(AS_NAME, AS_NAME)};
#undef AS_NAME

/* ---- state (one lock guards all of it) ---- */
pthread_mutex_t fk_lock = PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP;
static int initialized;
int fk_ndev = 2;
size_t fk_dev_memory = (size_t)4 << 30;
size_t fk_dev_used[MAXDEV];
static int driver_version = 13000;
int fk_cc_major = 9, fk_cc_minor = 9;
static char hidden[4096];
fake_ctx *fk_primary_ctx[MAXDEV];
fake_alloc *fk_allocs;
struct fake_stream *fk_all_streams; /* every stream, event, module ever made */
struct fake_event *fk_all_events;
struct fake_module *fk_all_modules;

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

long fk_live_ctx, fk_live_streams, fk_live_events, fk_live_modules, fk_live_host,
    fk_live_registered, fk_live_device, fk_live_managed, fk_stale_uses, fk_launches, fk_reaped;

struct fk_launch_record fk_last_launch;

/* the parameter bytes of this thread's last launch (concurrent launch tests) */
__thread struct fk_thread_params fk_thread_last;

__thread fake_ctx *fk_ctx_stack[STACK_DEPTH];
__thread int fk_ctx_depth;

/* Every handle ever given out (they are never freed), so a handle from
 * nowhere is refused without being dereferenced.  Lock held. */
static uintptr_t *known_set;
static size_t known_cap, known_count;

static size_t
known_slot(uintptr_t p, size_t cap)
{
    return (size_t)((p >> 4) * 0x9E3779B97F4A7C15ull) & (cap - 1);
}

void
fk_remember(const void *h)
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

int
fk_known(const void *h)
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
CUresult
fk_enter(int fn)
{
    CUresult rc = CUDA_SUCCESS;
    pthread_mutex_lock(&fk_lock);
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
    pthread_mutex_unlock(&fk_lock);
    return rc;
}

void
fk_unlock(void)
{
    pthread_mutex_unlock(&fk_lock);
}

/* Sleep as long as fakecuda_delay asked for the current entry point.
 * Lock not held. */
void
fk_pause_here(void)
{
    long ms;
    struct timespec ts;
    if (cur_fn < 0)
        return;
    pthread_mutex_lock(&fk_lock);
    ms = delay_ms[cur_fn];
    fk_unlock();
    if (ms <= 0)
        return;
    ts.tv_sec = ms / 1000;
    ts.tv_nsec = (ms % 1000) * 1000000L;
    while (nanosleep(&ts, &ts) != 0)
        ;
}

/* ---- initialization and errors ---- */
EXPORT CUresult
cuInit(unsigned int flags)
{
    CUresult rc;
    pthread_mutex_lock(&fk_lock);
    if (!initialized)
        read_env();
    fk_unlock();
    if ((rc = fk_enter(F_cuInit)) != CUDA_SUCCESS)
        return rc;
    if (flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&fk_lock);
    initialized = 1;
    fk_unlock();
    return CUDA_SUCCESS;
}

static int
lookup_fn(const char *name)
{
    int i;
    size_t n = strlen(name), base;
    if (strcmp(name, "*") == 0)
        return -1;
    for (i = 0; i < F_COUNT; i++)
        if (strcmp(fn_names[i], name) == 0)
            return i;
    /* cuda.h's versioned names (cuMemAlloc_v2, cuCtxCreate_v4): the table's
     * names are the base ones that cuGetProcAddress takes */
    for (base = n; base > 0 && name[base - 1] >= '0' && name[base - 1] <= '9'; base--)
        ;
    if (base < n && base >= 2 && name[base - 1] == 'v' && name[base - 2] == '_') {
        base -= 2;
        for (i = 0; i < F_COUNT; i++)
            if (strlen(fn_names[i]) == base && strncmp(fn_names[i], name, base) == 0)
                return i;
    }
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
        fk_ndev = atoi(s);
        if (fk_ndev < 0)
            fk_ndev = 0;
        if (fk_ndev > MAXDEV)
            fk_ndev = MAXDEV;
    }
    if ((s = getenv("FAKECUDA_MEMORY")) && *s)
        fk_dev_memory = (size_t)strtoull(s, NULL, 0);
    if ((s = getenv("FAKECUDA_DRIVER_VERSION")) && *s)
        driver_version = atoi(s);
    if ((s = getenv("FAKECUDA_CC")) && *s)
        sscanf(s, "%d.%d", &fk_cc_major, &fk_cc_minor);
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

CUresult
fake_cuInit(unsigned int flags)
{
    return cuInit(flags);
}

CUresult
fake_cuGetErrorName(CUresult rc, const char **out)
{
    return cuGetErrorName(rc, out);
}

CUresult
fake_cuGetErrorString(CUresult rc, const char **out)
{
    return cuGetErrorString(rc, out);
}

CUresult
fake_cuDriverGetVersion(int *v)
{
    CUresult rc = fk_enter(F_cuDriverGetVersion);
    if (rc)
        return rc;
    if (v == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    *v = driver_version;
    return CUDA_SUCCESS;
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
    pthread_mutex_lock(&fk_lock);
    read_env();
    fk_unlock();
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
    pthread_mutex_lock(&fk_lock);
    inject_fn = code ? fn : -2;
    inject_nth = nth;
    inject_code = (CUresult)code;
    inject_sticky = 0;
    if (code)
        inject_fired = 0;
    fk_unlock();
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
    pthread_mutex_lock(&fk_lock);
    for (i = 0; i < F_COUNT; i++)
        if (fn == -1 || fn == i)
            delay_ms[i] = ms;
    fk_unlock();
    return 0;
}

/* 1 if the last injected failure happened, 0 if it is still pending. */
EXPORT int
fakecuda_fired(void)
{
    int r;
    pthread_mutex_lock(&fk_lock);
    r = inject_fired;
    fk_unlock();
    return r;
}

EXPORT void
fakecuda_deinit(int on)
{
    pthread_mutex_lock(&fk_lock);
    deinitialized = on;
    fk_unlock();
}

/* Start (1) or stop (0) recording entry point names; starting clears. */
EXPORT void
fakecuda_trace(int on)
{
    pthread_mutex_lock(&fk_lock);
    tracing = on;
    if (on) {
        trace_len = 0;
        if (trace)
            trace[0] = '\0';
    }
    fk_unlock();
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
    pthread_mutex_lock(&fk_lock);
    n = trace_len;
    if (buf && cap) {
        size_t k = n < cap - 1 ? n : cap - 1;
        if (k)
            memcpy(buf, trace, k);
        buf[k] = '\0';
    }
    fk_unlock();
    return n;
}

EXPORT long
fakecuda_calls(const char *name)
{
    long n;
    int fn = name ? lookup_fn(name) : -1;
    pthread_mutex_lock(&fk_lock);
    n = fn >= 0 ? calls_by_fn[fn] : fn == -1 ? calls_total : -1;
    fk_unlock();
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
    pthread_mutex_lock(&fk_lock);
    if (!strcmp(kind, "contexts"))
        n = fk_live_ctx;
    else if (!strcmp(kind, "streams"))
        n = fk_live_streams;
    else if (!strcmp(kind, "events"))
        n = fk_live_events;
    else if (!strcmp(kind, "modules"))
        n = fk_live_modules;
    else if (!strcmp(kind, "device"))
        n = fk_live_device;
    else if (!strcmp(kind, "managed"))
        n = fk_live_managed;
    else if (!strcmp(kind, "host"))
        n = fk_live_host;
    else if (!strcmp(kind, "registered"))
        n = fk_live_registered;
    else if (!strcmp(kind, "stale"))
        n = fk_stale_uses;
    else if (!strcmp(kind, "launches"))
        n = fk_launches;
    else if (!strcmp(kind, "reaped"))
        n = fk_reaped;
    else if (!strcmp(kind, "links"))
        n = fk_live_links;
    else if (!strcmp(kind, "ipc"))
        n = fk_live_ipc;
    else if (!strcmp(kind, "pools"))
        n = fk_live_pools;
    else if (!strcmp(kind, "vmm"))
        n = fk_live_vmem;
    else if (!strcmp(kind, "reservations"))
        n = fk_live_reservations;
    else if (!strcmp(kind, "graphs"))
        n = fk_live_graphs;
    else if (!strcmp(kind, "graph_execs"))
        n = fk_live_execs;
    else if (!strcmp(kind, "arrays"))
        n = fk_live_arrays;
    else if (!strcmp(kind, "textures"))
        n = fk_live_textures;
    else if (!strcmp(kind, "surfaces"))
        n = fk_live_surfaces;
    else if (!strcmp(kind, "profiler"))
        n = fk_profiler_on;
    else if (!strcmp(kind, "green"))
        n = fk_live_green;
    fk_unlock();
    return n;
}

/* Drop the records of leaked host registrations (the test harness's cleanup
 * after a failed cuMemHostUnregister it provoked); returns how many. */
EXPORT long
fakecuda_forget_registrations(void)
{
    long n = 0;
    fake_alloc *a, *next;
    pthread_mutex_lock(&fk_lock);
    for (a = fk_allocs; a != NULL; a = next) {
        next = a->next;
        if (a->kind == K_REGISTERED) {
            fk_drop_alloc(a);
            n++;
        }
    }
    fk_unlock();
    return n;
}

/* The calling thread's last launch: copies its parameter bytes; returns
 * their count. */
EXPORT size_t
fakecuda_thread_last_params(unsigned char *params, size_t cap)
{
    size_t n = fk_thread_last.size;
    if (params)
        memcpy(params, fk_thread_last.params, n < cap ? n : cap);
    return n;
}

/* The last launch: copies its parameter bytes; returns their count. */
EXPORT size_t
fakecuda_last_launch(char *name, size_t namecap, unsigned *dims, unsigned *shared, void **stream,
                     int *flags, unsigned char *params, size_t cap)
{
    size_t n;
    pthread_mutex_lock(&fk_lock);
    if (name && namecap)
        snprintf(name, namecap, "%s", fk_last_launch.name);
    if (dims) {
        memcpy(dims, fk_last_launch.grid, sizeof fk_last_launch.grid);
        memcpy(dims + 3, fk_last_launch.block, sizeof fk_last_launch.block);
        memcpy(dims + 6, fk_last_launch.cluster, sizeof fk_last_launch.cluster);
    }
    if (shared)
        *shared = fk_last_launch.shared;
    if (stream)
        *stream = fk_last_launch.stream;
    if (flags)
        *flags = fk_last_launch.cooperative | (fk_last_launch.pdl << 1);
    n = fk_last_launch.size;
    if (params)
        memcpy(params, fk_last_launch.params, n < cap ? n : cap);
    fk_unlock();
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
    pthread_mutex_lock(&fk_lock);
    inject_fn = code ? fn : -2;
    inject_nth = nth;
    inject_code = (CUresult)code;
    inject_sticky = code != 0;
    inject_fired = 0;
    fk_unlock();
    return 0;
}

/* The sticky error in force (0: none). */
EXPORT int
fakecuda_sticky(void)
{
    int r;
    pthread_mutex_lock(&fk_lock);
    r = (int)sticky_code;
    fk_unlock();
    return r;
}
