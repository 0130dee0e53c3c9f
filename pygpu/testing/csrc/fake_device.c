/* fakecuda: devices, contexts (and what dies with one), streams,
 * events, green contexts.
 * fakecuda.h describes the stand-in and its files. */
#include "fakecuda.h"

static void reap_context(fake_ctx *c);

/* ---- helpers (lock held) ---- */
fake_ctx *
fk_current(void)
{
    return fk_ctx_depth > 0 ? fk_ctx_stack[fk_ctx_depth - 1] : NULL;
}

/* The calling thread's context, checked: NULL with *rc set when unusable. */
fake_ctx *
fk_need_ctx(CUresult *rc)
{
    fake_ctx *c = fk_current();
    if (c == NULL) {
        *rc = CUDA_ERROR_INVALID_CONTEXT;
        return NULL;
    }
    if (c->magic != MAGIC_CTX || !c->alive) {
        fk_stale_uses++;
        *rc = c->primary ? CUDA_ERROR_INVALID_CONTEXT : CUDA_ERROR_CONTEXT_IS_DESTROYED;
        return NULL;
    }
    return c;
}

int
fk_ctx_ok(fake_ctx *c)
{
    if (!fk_known(c) || c->magic != MAGIC_CTX)
        return 0;
    if (!c->alive) {
        fk_stale_uses++;
        return 0;
    }
    return 1;
}

CUresult
fk_check_stream(CUstream s, fake_ctx *c)
{
    fake_stream *st = (fake_stream *)s;
    if (s == NULL || s == CU_STREAM_LEGACY || s == CU_STREAM_PER_THREAD)
        return CUDA_SUCCESS;
    if (!fk_known(st) || st->magic != MAGIC_STREAM)
        return CUDA_ERROR_INVALID_HANDLE;
    if (!st->alive) {
        fk_stale_uses++;
        return CUDA_ERROR_INVALID_HANDLE;
    }
    if (c != NULL && st->ctx != c)
        return CUDA_ERROR_INVALID_HANDLE;
    return CUDA_SUCCESS;
}

double
fk_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* ---- devices ---- */
int
fk_dev_ok(CUdevice d)
{
    return d >= 0 && d < fk_ndev;
}

CUresult
fake_cuDeviceGet(CUdevice *d, int ordinal)
{
    CUresult rc = fk_enter(F_cuDeviceGet);
    if (rc)
        return rc;
    if (d == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    if (!fk_dev_ok(ordinal))
        return CUDA_ERROR_INVALID_DEVICE;
    *d = ordinal;
    return CUDA_SUCCESS;
}

CUresult
fake_cuDeviceGetCount(int *n)
{
    CUresult rc = fk_enter(F_cuDeviceGetCount);
    if (rc)
        return rc;
    if (n == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    *n = fk_ndev;
    return CUDA_SUCCESS;
}

CUresult
fake_cuDeviceGetName(char *name, int len, CUdevice d)
{
    CUresult rc = fk_enter(F_cuDeviceGetName);
    if (rc)
        return rc;
    if (name == NULL || len <= 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (!fk_dev_ok(d))
        return CUDA_ERROR_INVALID_DEVICE;
    snprintf(name, (size_t)len, "pygpu driver stand-in %d", (int)d);
    return CUDA_SUCCESS;
}

int
fk_attribute(CUdevice_attribute a, CUdevice d)
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
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: return fk_cc_major;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: return fk_cc_minor;
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

CUresult
fake_cuDeviceGetAttribute(int *pi, CUdevice_attribute a, CUdevice d)
{
    CUresult rc = fk_enter(F_cuDeviceGetAttribute);
    if (rc)
        return rc;
    if (pi == NULL || (int)a <= 0 || a >= CU_DEVICE_ATTRIBUTE_MAX)
        return CUDA_ERROR_INVALID_VALUE;
    if (!fk_dev_ok(d))
        return CUDA_ERROR_INVALID_DEVICE;
    *pi = fk_attribute(a, d);
    return CUDA_SUCCESS;
}

CUresult
fake_cuDeviceTotalMem(size_t *bytes, CUdevice d)
{
    CUresult rc = fk_enter(F_cuDeviceTotalMem);
    if (rc)
        return rc;
    if (bytes == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    if (!fk_dev_ok(d))
        return CUDA_ERROR_INVALID_DEVICE;
    *bytes = fk_dev_memory;
    return CUDA_SUCCESS;
}

CUresult
fake_cuDeviceGetPCIBusId(char *out, int len, CUdevice d)
{
    CUresult rc = fk_enter(F_cuDeviceGetPCIBusId);
    if (rc)
        return rc;
    if (out == NULL || len <= 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (!fk_dev_ok(d))
        return CUDA_ERROR_INVALID_DEVICE;
    snprintf(out, (size_t)len, "00000000:%02X:00.0", 0x10 + (int)d);
    return CUDA_SUCCESS;
}

CUresult
fake_cuDeviceGetByPCIBusId(CUdevice *d, const char *bus)
{
    unsigned dom, b, dv, fn;
    CUresult rc = fk_enter(F_cuDeviceGetByPCIBusId);
    if (rc)
        return rc;
    if (d == NULL || bus == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    if (sscanf(bus, "%x:%x:%x.%x", &dom, &b, &dv, &fn) != 4
        && (dom = 0, sscanf(bus, "%x:%x.%x", &b, &dv, &fn) != 3))
        return CUDA_ERROR_INVALID_VALUE;
    if (dom != 0 || dv != 0 || b < 0x10 || (int)(b - 0x10) >= fk_ndev)
        return CUDA_ERROR_INVALID_DEVICE;
    *d = (CUdevice)(b - 0x10);
    return CUDA_SUCCESS;
}

CUresult
fake_cuDeviceGetUuid(CUuuid *u, CUdevice d)
{
    int i;
    CUresult rc = fk_enter(F_cuDeviceGetUuid);
    if (rc)
        return rc;
    if (u == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    if (!fk_dev_ok(d))
        return CUDA_ERROR_INVALID_DEVICE;
    for (i = 0; i < 16; i++)
        u->bytes[i] = (char)(0x40 + i + 16 * d);
    return CUDA_SUCCESS;
}

CUresult
fake_cuDeviceCanAccessPeer(int *can, CUdevice d, CUdevice peer)
{
    CUresult rc = fk_enter(F_cuDeviceCanAccessPeer);
    if (rc)
        return rc;
    if (can == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    if (!fk_dev_ok(d) || !fk_dev_ok(peer))
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
    fk_remember(c);
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

CUresult
fake_cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice d)
{
    CUresult rc = fk_enter(F_cuDevicePrimaryCtxRetain);
    fake_ctx *c;
    if (rc)
        return rc;
    if (pctx == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    if (!fk_dev_ok(d))
        return CUDA_ERROR_INVALID_DEVICE;
    pthread_mutex_lock(&fk_lock);
    c = fk_primary_ctx[d];
    if (c == NULL) {
        c = fk_primary_ctx[d] = new_ctx(d, 1, 0);
        if (c == NULL) {
            fk_unlock();
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
        c->alive = 0;
    }
    if (c->retains++ == 0) {
        c->alive = 1;
        fk_live_ctx++;
    }
    *pctx = (CUcontext)c;
    fk_unlock();
    return CUDA_SUCCESS;
}

CUresult
fake_cuDevicePrimaryCtxRelease(CUdevice d)
{
    CUresult rc = fk_enter(F_cuDevicePrimaryCtxRelease);
    fake_ctx *c;
    if (rc)
        return rc;
    if (!fk_dev_ok(d))
        return CUDA_ERROR_INVALID_DEVICE;
    pthread_mutex_lock(&fk_lock);
    c = fk_primary_ctx[d];
    if (c == NULL || c->retains == 0) {
        fk_stale_uses++; /* released more often than retained */
        fk_unlock();
        return CUDA_ERROR_INVALID_CONTEXT;
    }
    if (--c->retains == 0) {
        c->alive = 0;
        fk_live_ctx--;
        reap_context(c);
    }
    fk_unlock();
    return CUDA_SUCCESS;
}

static CUresult
push(fake_ctx *c)
{
    if (fk_ctx_depth >= STACK_DEPTH)
        return CUDA_ERROR_INVALID_VALUE;
    fk_ctx_stack[fk_ctx_depth++] = c;
    return CUDA_SUCCESS;
}

CUresult
fake_cuCtxCreate(CUcontext *pctx, unsigned int flags, CUdevice d)
{
    CUresult rc = fk_enter(F_cuCtxCreate);
    fake_ctx *c;
    if (rc)
        return rc;
    if (pctx == NULL || (flags & ~0x3fu) != 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (!fk_dev_ok(d))
        return CUDA_ERROR_INVALID_DEVICE;
    pthread_mutex_lock(&fk_lock);
    c = new_ctx(d, 0, flags);
    if (c == NULL || (rc = push(c)) != CUDA_SUCCESS) {
        free(c);
        fk_unlock();
        return rc ? rc : CUDA_ERROR_OUT_OF_MEMORY;
    }
    fk_live_ctx++;
    *pctx = (CUcontext)c;
    fk_unlock();
    return CUDA_SUCCESS;
}

CUresult
fake_cuCtxDestroy(CUcontext h)
{
    CUresult rc = fk_enter(F_cuCtxDestroy);
    fake_ctx *c = (fake_ctx *)h;
    int i;
    if (rc)
        return rc;
    pthread_mutex_lock(&fk_lock);
    if (!fk_ctx_ok(c)) {
        fk_unlock();
        return CUDA_ERROR_INVALID_CONTEXT;
    }
    if (c->primary || c->green) { /* released, or ended with its green context */
        fk_unlock();
        return CUDA_ERROR_INVALID_CONTEXT;
    }
    c->alive = 0;
    fk_live_ctx--;
    reap_context(c);
    for (i = fk_ctx_depth - 1; i >= 0; i--) {
        if (fk_ctx_stack[i] == c) {
            if (i == fk_ctx_depth - 1)
                fk_ctx_depth--;
            break;
        }
    }
    fk_unlock();
    return CUDA_SUCCESS;
}

CUresult
fake_cuCtxPushCurrent(CUcontext h)
{
    CUresult rc = fk_enter(F_cuCtxPushCurrent);
    if (rc)
        return rc;
    pthread_mutex_lock(&fk_lock);
    if (!fk_ctx_ok((fake_ctx *)h)) {
        fk_unlock();
        return CUDA_ERROR_INVALID_CONTEXT;
    }
    rc = push((fake_ctx *)h);
    fk_unlock();
    return rc;
}

CUresult
fake_cuCtxPopCurrent(CUcontext *pctx)
{
    CUresult rc = fk_enter(F_cuCtxPopCurrent);
    if (rc)
        return rc;
    if (fk_ctx_depth == 0)
        return CUDA_ERROR_INVALID_CONTEXT;
    fk_ctx_depth--;
    if (pctx != NULL)
        *pctx = (CUcontext)fk_ctx_stack[fk_ctx_depth];
    return CUDA_SUCCESS;
}

CUresult
fake_cuCtxGetCurrent(CUcontext *pctx)
{
    CUresult rc = fk_enter(F_cuCtxGetCurrent);
    if (rc)
        return rc;
    if (pctx == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    *pctx = (CUcontext)fk_current();
    return CUDA_SUCCESS;
}

CUresult
fake_cuCtxSetCurrent(CUcontext h)
{
    CUresult rc = fk_enter(F_cuCtxSetCurrent);
    if (rc)
        return rc;
    if (h == NULL) {
        if (fk_ctx_depth > 0)
            fk_ctx_depth--;
        return CUDA_SUCCESS;
    }
    pthread_mutex_lock(&fk_lock);
    if (!fk_ctx_ok((fake_ctx *)h)) {
        fk_unlock();
        return CUDA_ERROR_INVALID_CONTEXT;
    }
    if (fk_ctx_depth == 0)
        rc = push((fake_ctx *)h);
    else
        fk_ctx_stack[fk_ctx_depth - 1] = (fake_ctx *)h;
    fk_unlock();
    return rc;
}

CUresult
fake_cuCtxGetDevice(CUdevice *d)
{
    CUresult rc = fk_enter(F_cuCtxGetDevice);
    fake_ctx *c;
    if (rc)
        return rc;
    if (d == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&fk_lock);
    c = fk_need_ctx(&rc);
    if (c)
        *d = c->dev;
    fk_unlock();
    return rc;
}

CUresult
fake_cuCtxSynchronize(void)
{
    CUresult rc = fk_enter(F_cuCtxSynchronize);
    fake_ctx *c;
    if (rc)
        return rc;
    pthread_mutex_lock(&fk_lock);
    if ((c = fk_need_ctx(&rc)) != NULL)
        rc = fk_cap_violation(c, CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    fk_unlock();
    return rc;
}

CUresult
fake_cuCtxSetLimit(CUlimit limit, size_t value)
{
    CUresult rc = fk_enter(F_cuCtxSetLimit);
    fake_ctx *c;
    if (rc)
        return rc;
    if ((int)limit < 0 || limit >= CU_LIMIT_SHMEM_SIZE)
        return CUDA_ERROR_UNSUPPORTED_LIMIT;
    pthread_mutex_lock(&fk_lock);
    c = fk_need_ctx(&rc);
    if (c)
        c->limits[limit] = value;
    fk_unlock();
    return rc;
}

CUresult
fake_cuCtxGetLimit(size_t *v, CUlimit limit)
{
    CUresult rc = fk_enter(F_cuCtxGetLimit);
    fake_ctx *c;
    if (rc)
        return rc;
    if (v == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    if ((int)limit < 0 || limit >= CU_LIMIT_MAX)
        return CUDA_ERROR_UNSUPPORTED_LIMIT;
    pthread_mutex_lock(&fk_lock);
    c = fk_need_ctx(&rc);
    if (c)
        *v = c->limits[limit];
    fk_unlock();
    return rc;
}

CUresult
fake_cuCtxSetCacheConfig(CUfunc_cache config)
{
    CUresult rc = fk_enter(F_cuCtxSetCacheConfig);
    fake_ctx *c;
    if (rc)
        return rc;
    if ((int)config < 0 || config > CU_FUNC_CACHE_PREFER_EQUAL)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&fk_lock);
    c = fk_need_ctx(&rc);
    if (c)
        c->cache = config;
    fk_unlock();
    return rc;
}

CUresult
fake_cuCtxGetCacheConfig(CUfunc_cache *config)
{
    CUresult rc = fk_enter(F_cuCtxGetCacheConfig);
    fake_ctx *c;
    if (rc)
        return rc;
    if (config == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&fk_lock);
    c = fk_need_ctx(&rc);
    if (c)
        *config = c->cache;
    fk_unlock();
    return rc;
}

CUresult
fake_cuCtxEnablePeerAccess(CUcontext peer, unsigned int flags)
{
    CUresult rc = fk_enter(F_cuCtxEnablePeerAccess);
    fake_ctx *c, *p = (fake_ctx *)peer;
    if (rc)
        return rc;
    if (flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&fk_lock);
    c = fk_need_ctx(&rc);
    if (c != NULL) {
        if (!fk_ctx_ok(p))
            rc = CUDA_ERROR_INVALID_CONTEXT;
        else if (p->dev == c->dev)
            rc = CUDA_ERROR_INVALID_DEVICE;
        else if (c->peer[p->dev])
            rc = CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED;
        else
            c->peer[p->dev] = 1;
    }
    fk_unlock();
    return rc;
}

CUresult
fake_cuCtxDisablePeerAccess(CUcontext peer)
{
    CUresult rc = fk_enter(F_cuCtxDisablePeerAccess);
    fake_ctx *c, *p = (fake_ctx *)peer;
    if (rc)
        return rc;
    pthread_mutex_lock(&fk_lock);
    c = fk_need_ctx(&rc);
    if (c != NULL) {
        if (!fk_ctx_ok(p))
            rc = CUDA_ERROR_INVALID_CONTEXT;
        else if (!c->peer[p->dev])
            rc = CUDA_ERROR_PEER_ACCESS_NOT_ENABLED;
        else
            c->peer[p->dev] = 0;
    }
    fk_unlock();
    return rc;
}

/* cuCtxGetApiVersion: 3020 for every context, as CUDA 12 and 13 drivers
 * answer; NULL asks about the current one */
CUresult
fake_cuCtxGetApiVersion(CUcontext ctx, unsigned int *version)
{
    CUresult rc = fk_enter(F_cuCtxGetApiVersion);
    fake_ctx *c = (fake_ctx *)ctx;
    if (rc)
        return rc;
    if (version == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&fk_lock);
    if (c == NULL)
        c = fk_need_ctx(&rc);
    else if (!fk_ctx_ok(c))
        rc = CUDA_ERROR_INVALID_CONTEXT;
    if (rc == CUDA_SUCCESS)
        *version = 3020;
    fk_unlock();
    return rc;
}

/* cuCtxGet/SetSharedMemConfig: an H100's banks are four bytes wide and
 * cannot be configured: the setting is accepted and changes nothing */
CUresult
fake_cuCtxGetSharedMemConfig(CUsharedconfig *config)
{
    CUresult rc = fk_enter(F_cuCtxGetSharedMemConfig);
    if (rc)
        return rc;
    if (config == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&fk_lock);
    if (fk_need_ctx(&rc) != NULL)
        *config = CU_SHARED_MEM_CONFIG_FOUR_BYTE_BANK_SIZE;
    fk_unlock();
    return rc;
}

CUresult
fake_cuCtxSetSharedMemConfig(CUsharedconfig config)
{
    CUresult rc = fk_enter(F_cuCtxSetSharedMemConfig);
    if (rc)
        return rc;
    if ((int)config < 0 || config > CU_SHARED_MEM_CONFIG_EIGHT_BYTE_BANK_SIZE)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&fk_lock);
    fk_need_ctx(&rc);
    fk_unlock();
    return rc;
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
    for (m = fk_all_modules; m != NULL; m = m->next_all) {
        if (m->ctx == c && m->alive) {
            fk_module_free(m); /* drops its globals' records */
            m->alive = 0;
            fk_live_modules--;
            fk_reaped++;
        }
    }
    for (a = fk_allocs; a != NULL; a = next) {
        next = a->next;
        if (a->ctx == c && a->kind != K_GLOBAL) {
            fk_drop_alloc(a);
            fk_reaped++;
        }
    }
    for (s = fk_all_streams; s != NULL; s = s->next_all) {
        if (s->ctx == c && s->alive) {
            s->alive = 0;
            fk_live_streams--;
            fk_reaped++;
        }
    }
    for (e = fk_all_events; e != NULL; e = e->next_all) {
        if (e->ctx == c && e->alive) {
            e->alive = 0;
            fk_live_events--;
            fk_reaped++;
        }
    }
    fk_reap_arrays(c);
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
    pthread_mutex_lock(&fk_lock);
    c = fk_need_ctx(&rc);
    if (c != NULL) {
        s = calloc(1, sizeof *s);
        if (s == NULL) {
            rc = CUDA_ERROR_OUT_OF_MEMORY;
        } else {
            s->magic = MAGIC_STREAM;
            s->alive = 1;
            fk_remember(s);
            s->ctx = c;
            s->flags = flags;
            s->priority = prio < -5 ? -5 : prio > 0 ? 0 : prio;
            s->next_all = fk_all_streams;
            fk_all_streams = s;
            fk_live_streams++;
            *out = (CUstream)s;
        }
    }
    fk_unlock();
    return rc;
}

CUresult
fake_cuStreamCreate(CUstream *out, unsigned int flags)
{
    CUresult rc = fk_enter(F_cuStreamCreate);
    if (rc)
        return rc;
    return stream_new(out, flags, 0);
}

CUresult
fake_cuStreamCreateWithPriority(CUstream *out, unsigned int flags, int prio)
{
    CUresult rc = fk_enter(F_cuStreamCreateWithPriority);
    if (rc)
        return rc;
    return stream_new(out, flags, prio);
}

fake_stream *
fk_real_stream(CUstream h, CUresult *rc)
{
    pthread_mutex_lock(&fk_lock);
    *rc = fk_check_stream(h, NULL);
    fk_unlock();
    if (*rc != CUDA_SUCCESS || h == NULL || h == CU_STREAM_LEGACY || h == CU_STREAM_PER_THREAD)
        return NULL;
    return (fake_stream *)h;
}

CUresult
fake_cuStreamDestroy(CUstream h)
{
    CUresult rc = fk_enter(F_cuStreamDestroy);
    fake_stream *s;
    if (rc)
        return rc;
    s = fk_real_stream(h, &rc);
    if (rc)
        return rc;
    if (s == NULL)
        return CUDA_ERROR_INVALID_HANDLE;
    pthread_mutex_lock(&fk_lock);
    fk_cap_end_on_destroy(s);
    s->alive = 0;
    fk_live_streams--;
    fk_unlock();
    return CUDA_SUCCESS;
}

CUresult
fake_cuStreamSynchronize(CUstream h)
{
    CUresult rc = fk_enter(F_cuStreamSynchronize);
    fake_stream *s;
    if (rc)
        return rc;
    s = fk_real_stream(h, &rc);
    pthread_mutex_lock(&fk_lock);
    if (rc == CUDA_SUCCESS && s != NULL && s->cap != NULL) {
        s->cap_invalid = 1;
        rc = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    } else if (rc == CUDA_SUCCESS && s == NULL) {
        rc = fk_cap_violation(fk_current(), CUDA_ERROR_STREAM_CAPTURE_IMPLICIT);
    }
    fk_unlock();
    if (rc == CUDA_SUCCESS)
        fk_pause_here();
    return rc;
}

CUresult
fake_cuStreamQuery(CUstream h)
{
    CUresult rc = fk_enter(F_cuStreamQuery);
    if (rc)
        return rc;
    fk_real_stream(h, &rc);
    return rc;
}

CUresult
fake_cuStreamGetPriority(CUstream h, int *prio)
{
    CUresult rc = fk_enter(F_cuStreamGetPriority);
    fake_stream *s;
    if (rc)
        return rc;
    if (prio == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    s = fk_real_stream(h, &rc);
    if (rc)
        return rc;
    *prio = s ? s->priority : 0;
    return CUDA_SUCCESS;
}

CUresult
fake_cuStreamGetFlags(CUstream h, unsigned int *flags)
{
    CUresult rc = fk_enter(F_cuStreamGetFlags);
    fake_stream *s;
    if (rc)
        return rc;
    if (flags == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    s = fk_real_stream(h, &rc);
    if (rc)
        return rc;
    *flags = s ? s->flags : 0;
    return CUDA_SUCCESS;
}

fake_event *
fk_event_ok(CUevent h)
{
    fake_event *e = (fake_event *)h;
    if (!fk_known(e) || e->magic != MAGIC_EVENT)
        return NULL;
    if (!e->alive) {
        fk_stale_uses++;
        return NULL;
    }
    return e;
}

CUresult
fake_cuStreamWaitEvent(CUstream h, CUevent ev, unsigned int flags)
{
    CUresult rc = fk_enter(F_cuStreamWaitEvent);
    if (rc)
        return rc;
    if (flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    fk_real_stream(h, &rc);
    if (rc)
        return rc;
    pthread_mutex_lock(&fk_lock);
    if (fk_event_ok(ev) == NULL) {
        rc = CUDA_ERROR_INVALID_HANDLE;
    } else if (fk_cap_stream(h) != NULL) {
        struct fake_node *node = fk_cap_node(fk_cap_stream(h), CU_GRAPH_NODE_TYPE_WAIT_EVENT, &rc);
        if (node != NULL)
            fk_cap_event(node, fk_event_ok(ev));
    }
    fk_unlock();
    return rc;
}

CUresult
fake_cuEventCreate(CUevent *out, unsigned int flags)
{
    CUresult rc = fk_enter(F_cuEventCreate);
    fake_ctx *c;
    fake_event *e;
    if (rc)
        return rc;
    if (out == NULL || (flags & ~0xfu) != 0)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&fk_lock);
    c = fk_need_ctx(&rc);
    if (c != NULL) {
        e = calloc(1, sizeof *e);
        if (e == NULL) {
            rc = CUDA_ERROR_OUT_OF_MEMORY;
        } else {
            e->magic = MAGIC_EVENT;
            e->alive = 1;
            fk_remember(e);
            e->ctx = c;
            e->flags = flags;
            e->next_all = fk_all_events;
            fk_all_events = e;
            fk_live_events++;
            *out = (CUevent)e;
        }
    }
    fk_unlock();
    return rc;
}

CUresult
fake_cuEventDestroy(CUevent h)
{
    CUresult rc = fk_enter(F_cuEventDestroy);
    fake_event *e;
    if (rc)
        return rc;
    pthread_mutex_lock(&fk_lock);
    if ((e = fk_event_ok(h)) == NULL) {
        rc = CUDA_ERROR_INVALID_HANDLE;
    } else {
        e->alive = 0;
        fk_live_events--;
    }
    fk_unlock();
    return rc;
}

CUresult
fake_cuEventRecord(CUevent h, CUstream s)
{
    CUresult rc = fk_enter(F_cuEventRecord);
    fake_event *e;
    if (rc)
        return rc;
    pthread_mutex_lock(&fk_lock);
    if ((e = fk_event_ok(h)) == NULL)
        rc = CUDA_ERROR_INVALID_HANDLE;
    else if ((rc = fk_check_stream(s, e->ctx)) == CUDA_SUCCESS && fk_cap_stream(s) != NULL) {
        struct fake_node *node =
            fk_cap_node(fk_cap_stream(s), CU_GRAPH_NODE_TYPE_EVENT_RECORD, &rc);
        if (node != NULL)
            fk_cap_event(node, e);
    } else if (rc == CUDA_SUCCESS) {
        e->recorded = 1;
        e->t = fk_now_ms();
    }
    fk_unlock();
    return rc;
}

CUresult
fake_cuEventSynchronize(CUevent h)
{
    CUresult rc = fk_enter(F_cuEventSynchronize);
    if (rc)
        return rc;
    pthread_mutex_lock(&fk_lock);
    if (fk_event_ok(h) == NULL)
        rc = CUDA_ERROR_INVALID_HANDLE;
    fk_unlock();
    return rc;
}

CUresult
fake_cuEventQuery(CUevent h)
{
    CUresult rc = fk_enter(F_cuEventQuery);
    if (rc)
        return rc;
    pthread_mutex_lock(&fk_lock);
    if (fk_event_ok(h) == NULL)
        rc = CUDA_ERROR_INVALID_HANDLE;
    fk_unlock();
    return rc;
}

CUresult
fake_cuEventElapsedTime(float *ms, CUevent a, CUevent b)
{
    CUresult rc = fk_enter(F_cuEventElapsedTime);
    fake_event *ea, *eb;
    if (rc)
        return rc;
    if (ms == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&fk_lock);
    ea = fk_event_ok(a);
    eb = fk_event_ok(b);
    if (ea == NULL || eb == NULL || !ea->recorded || !eb->recorded
        || (ea->flags & CU_EVENT_DISABLE_TIMING) || (eb->flags & CU_EVENT_DISABLE_TIMING))
        rc = CUDA_ERROR_INVALID_HANDLE;
    else
        *ms = (float)(eb->t - ea->t);
    fk_unlock();
    return rc;
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
long fk_live_green;

EXPORT void
fakecuda_sm_rules(int min_partition, int alignment, unsigned groups_cap)
{
    pthread_mutex_lock(&fk_lock);
    sm_min = min_partition;
    sm_align = alignment;
    sm_groups_cap = groups_cap;
    fk_unlock();
}

static fake_res_tag *
res_tag(const CUdevResource *r)
{
    return (fake_res_tag *)(void *)r->_internal_padding;
}

CUresult
fake_cuDeviceGetDevResource(CUdevice d, CUdevResource *res, CUdevResourceType type)
{
    CUresult rc = fk_enter(F_cuDeviceGetDevResource);
    int rule_min = fk_cc_major >= 9   ? 8
                   : fk_cc_major == 8 ? 4
                                      : 2,
        rule_align = fk_cc_major >= 9 ? 8 : 2;
    if (rc)
        return rc;
    if (res == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    if (!fk_dev_ok(d))
        return CUDA_ERROR_INVALID_DEVICE;
    if (type != CU_DEV_RESOURCE_TYPE_SM)
        return CUDA_ERROR_INVALID_RESOURCE_TYPE;
    memset(res, 0, sizeof *res);
    res->type = CU_DEV_RESOURCE_TYPE_SM;
    res->sm.smCount = 132;
    pthread_mutex_lock(&fk_lock);
    res->sm.minSmPartitionSize = (unsigned)(sm_min < 0 ? rule_min : sm_min);
    res->sm.smCoscheduledAlignment = (unsigned)(sm_align < 0 ? rule_align : sm_align);
    fk_unlock();
    res_tag(res)->magic = MAGIC_RES;
    res_tag(res)->dev = d;
    return CUDA_SUCCESS;
}

CUresult
fake_cuDevSmResourceSplitByCount(CUdevResource *result, unsigned int *nbGroups,
                                 const CUdevResource *input, CUdevResource *remaining,
                                 unsigned int useFlags, unsigned int minCount)
{
    CUresult rc = fk_enter(F_cuDevSmResourceSplitByCount);
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
    pthread_mutex_lock(&fk_lock);
    if (sm_groups_cap && can > sm_groups_cap)
        can = sm_groups_cap;
    split = ++sm_splits;
    fk_unlock();
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

CUresult
fake_cuDevResourceGenerateDesc(CUdevResourceDesc *phDesc, CUdevResource *resources,
                               unsigned int nbResources)
{
    CUresult rc = fk_enter(F_cuDevResourceGenerateDesc);
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
    pthread_mutex_lock(&fk_lock);
    fk_remember(d);
    fk_unlock();
    *phDesc = (CUdevResourceDesc)d;
    return CUDA_SUCCESS;
}

static fake_green *
green_ok(CUgreenCtx h)
{
    fake_green *g = (fake_green *)h;
    if (!fk_known(g) || g->magic != MAGIC_GREEN)
        return NULL;
    if (!g->alive) {
        fk_stale_uses++;
        return NULL;
    }
    return g;
}

CUresult
fake_cuGreenCtxCreate(CUgreenCtx *phCtx, CUdevResourceDesc desc, CUdevice dev, unsigned int flags)
{
    CUresult rc = fk_enter(F_cuGreenCtxCreate);
    fake_desc *d = (fake_desc *)desc;
    fake_green *g;
    if (rc)
        return rc;
    if (phCtx == NULL || flags != CU_GREEN_CTX_DEFAULT_STREAM)
        return CUDA_ERROR_INVALID_VALUE;
    if (!fk_dev_ok(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    pthread_mutex_lock(&fk_lock);
    if (!fk_known(d) || d->magic != MAGIC_DESC || d->dev != dev) {
        fk_unlock();
        return CUDA_ERROR_INVALID_VALUE;
    }
    g = calloc(1, sizeof *g);
    if (g == NULL || (g->ctx = new_ctx(dev, 0, 0)) == NULL) {
        free(g);
        fk_unlock();
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    g->magic = MAGIC_GREEN;
    g->alive = 1;
    g->dev = dev;
    g->sms = d->sms;
    g->ctx->green = 1;
    fk_remember(g);
    fk_live_ctx++;
    fk_live_green++;
    *phCtx = (CUgreenCtx)g;
    fk_unlock();
    return CUDA_SUCCESS;
}

CUresult
fake_cuGreenCtxDestroy(CUgreenCtx h)
{
    CUresult rc = fk_enter(F_cuGreenCtxDestroy);
    fake_green *g;
    int i;
    if (rc)
        return rc;
    pthread_mutex_lock(&fk_lock);
    if ((g = green_ok(h)) == NULL) {
        fk_unlock();
        return CUDA_ERROR_INVALID_CONTEXT;
    }
    g->alive = 0;
    g->ctx->alive = 0;
    fk_live_green--;
    fk_live_ctx--;
    reap_context(g->ctx);
    for (i = fk_ctx_depth - 1; i >= 0; i--) {
        if (fk_ctx_stack[i] == g->ctx) {
            if (i == fk_ctx_depth - 1)
                fk_ctx_depth--;
            break;
        }
    }
    fk_unlock();
    return CUDA_SUCCESS;
}

CUresult
fake_cuCtxFromGreenCtx(CUcontext *pContext, CUgreenCtx h)
{
    CUresult rc = fk_enter(F_cuCtxFromGreenCtx);
    fake_green *g;
    if (rc)
        return rc;
    if (pContext == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&fk_lock);
    g = green_ok(h);
    if (g != NULL)
        *pContext = (CUcontext)g->ctx;
    fk_unlock();
    return g != NULL ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
}

CUresult
fake_cuGreenCtxGetDevResource(CUgreenCtx h, CUdevResource *res, CUdevResourceType type)
{
    CUresult rc = fk_enter(F_cuGreenCtxGetDevResource);
    fake_green *g;
    if (rc)
        return rc;
    if (res == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    if (type != CU_DEV_RESOURCE_TYPE_SM)
        return CUDA_ERROR_INVALID_RESOURCE_TYPE;
    pthread_mutex_lock(&fk_lock);
    g = green_ok(h);
    if (g != NULL) {
        memset(res, 0, sizeof *res);
        res->type = CU_DEV_RESOURCE_TYPE_SM;
        res->sm.smCount = g->sms;
    }
    fk_unlock();
    return g != NULL ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
}

CUresult
fake_cuGreenCtxStreamCreate(CUstream *out, CUgreenCtx h, unsigned int flags, int prio)
{
    CUresult rc = fk_enter(F_cuGreenCtxStreamCreate);
    fake_green *g;
    fake_stream *s;
    if (rc)
        return rc;
    if (out == NULL || flags != CU_STREAM_NON_BLOCKING) /* the driver requires it */
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&fk_lock);
    if ((g = green_ok(h)) == NULL) {
        fk_unlock();
        return CUDA_ERROR_INVALID_CONTEXT;
    }
    if ((s = calloc(1, sizeof *s)) == NULL) {
        fk_unlock();
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    s->magic = MAGIC_STREAM;
    s->alive = 1;
    fk_remember(s);
    s->ctx = g->ctx;
    s->flags = flags;
    s->priority = prio < -5 ? -5 : prio > 0 ? 0 : prio;
    s->next_all = fk_all_streams;
    fk_all_streams = s;
    fk_live_streams++;
    *out = (CUstream)s;
    fk_unlock();
    return CUDA_SUCCESS;
}
