/* fakecuda: the profiler, OpenGL interop, process checkpoint.
 * fakecuda.h describes the stand-in and its files. */
#include "fakecuda.h"

/* cuProfilerStart/Stop: need a current context; set the collecting flag
 * (fakecuda_live("profiler") reads it).  Starting twice is no error. */
int fk_profiler_on;

CUresult
fake_cuProfilerStart(void)
{
    CUresult rc = fk_enter(F_cuProfilerStart);
    if (rc)
        return rc;
    pthread_mutex_lock(&fk_lock);
    if (fk_need_ctx(&rc) != NULL)
        fk_profiler_on = 1;
    fk_unlock();
    return rc;
}

CUresult
fake_cuProfilerStop(void)
{
    CUresult rc = fk_enter(F_cuProfilerStop);
    if (rc)
        return rc;
    pthread_mutex_lock(&fk_lock);
    if (fk_need_ctx(&rc) != NULL)
        fk_profiler_on = 0;
    fk_unlock();
    return rc;
}

/* cuProfilerInitialize: needs a current context, both paths and an output
 * mode of 0 (key-value pairs) or 1 (CSV); records nothing. */
CUresult
fake_cuProfilerInitialize(const char *config, const char *output, int mode)
{
    CUresult rc = fk_enter(F_cuProfilerInitialize);
    if (rc)
        return rc;
    if (config == NULL || output == NULL || (mode != 0 && mode != 1))
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&fk_lock);
    fk_need_ctx(&rc);
    fk_unlock();
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
    if (!fk_known(g) || g->magic != MAGIC_GFX)
        return NULL;
    if (!g->alive) {
        fk_stale_uses++;
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
    pthread_mutex_lock(&fk_lock);
    fk_remember(g);
    fk_unlock();
    *out = (CUgraphicsResource)g;
    return CUDA_SUCCESS;
}

CUresult
fake_cuGraphicsGLRegisterBuffer(CUgraphicsResource *out, unsigned int buffer, unsigned int flags)
{
    CUresult rc = fk_enter(F_cuGraphicsGLRegisterBuffer);
    CUdeviceptr p;
    if (rc)
        return rc;
    if (out == NULL || buffer == 0 || buffer > 1024 || (flags & ~0xFu))
        return CUDA_ERROR_INVALID_VALUE;
    rc = fk_device_alloc(&p, (size_t)buffer * 256, K_DEVICE, 0);
    if (rc)
        return rc;
    rc = gfx_new(out, p, (size_t)buffer * 256, NULL);
    if (rc)
        fk_free_kind(p, 0);
    return rc;
}

CUresult
fake_cuGraphicsGLRegisterImage(CUgraphicsResource *out, unsigned int image, unsigned int target,
                               unsigned int flags)
{
    CUresult rc = fk_enter(F_cuGraphicsGLRegisterImage);
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
    pthread_mutex_lock(&fk_lock);
    rc = fk_array_create(&arr, &d);
    fk_unlock();
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
    pthread_mutex_lock(&fk_lock);
    if (fk_need_ctx(&rc) == NULL)
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
    fk_unlock();
    return rc;
}

CUresult
fake_cuGraphicsMapResources(unsigned int count, CUgraphicsResource *res, CUstream s)
{
    CUresult rc = fk_enter(F_cuGraphicsMapResources);
    (void)s;
    if (rc)
        return rc;
    return gfx_map(count, res, 1);
}

CUresult
fake_cuGraphicsUnmapResources(unsigned int count, CUgraphicsResource *res, CUstream s)
{
    CUresult rc = fk_enter(F_cuGraphicsUnmapResources);
    (void)s;
    if (rc)
        return rc;
    return gfx_map(count, res, 0);
}

CUresult
fake_cuGraphicsResourceGetMappedPointer(CUdeviceptr *p, size_t *n, CUgraphicsResource h)
{
    CUresult rc = fk_enter(F_cuGraphicsResourceGetMappedPointer);
    fake_gfx *g;
    if (rc)
        return rc;
    if (p == NULL || n == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&fk_lock);
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
    fk_unlock();
    return rc;
}

CUresult
fake_cuGraphicsSubResourceGetMappedArray(CUarray *out, CUgraphicsResource h, unsigned int index,
                                         unsigned int level)
{
    CUresult rc = fk_enter(F_cuGraphicsSubResourceGetMappedArray);
    fake_gfx *g;
    if (rc)
        return rc;
    if (out == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&fk_lock);
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
    fk_unlock();
    return rc;
}

CUresult
fake_cuGraphicsUnregisterResource(CUgraphicsResource h)
{
    CUresult rc = fk_enter(F_cuGraphicsUnregisterResource);
    fake_gfx *g;
    CUdeviceptr p = 0;
    if (rc)
        return rc;
    pthread_mutex_lock(&fk_lock);
    if ((g = gfx_ok(h)) == NULL) {
        rc = CUDA_ERROR_INVALID_HANDLE;
    } else {
        g->alive = 0;
        p = g->ptr;
        if (g->is_image)
            fk_array_release((fake_array *)g->arr);
    }
    fk_unlock();
    if (p != 0)
        fk_free_kind(p, 0);
    return rc;
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
    pthread_mutex_lock(&fk_lock);
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
    fk_unlock();
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

CUresult
fake_cuCheckpointProcessGetState(int pid, CUprocessState *state)
{
    CUresult rc = fk_enter(F_cuCheckpointProcessGetState);
    int i;
    if (rc)
        return rc;
    if (state == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    rc = CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&fk_lock);
    for (i = 0; i < MAXPROCS; i++) {
        if (pid > 0 && procs[i].pid == pid) {
            *state = procs[i].state;
            rc = CUDA_SUCCESS;
        }
    }
    fk_unlock();
    return rc;
}

CUresult
fake_cuCheckpointProcessGetRestoreThreadId(int pid, int *tid)
{
    CUresult rc = fk_enter(F_cuCheckpointProcessGetRestoreThreadId);
    int i;
    if (rc)
        return rc;
    if (tid == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    rc = CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&fk_lock);
    for (i = 0; i < MAXPROCS; i++) {
        if (pid > 0 && procs[i].pid == pid) {
            *tid = pid; /* its main thread restores it */
            rc = CUDA_SUCCESS;
        }
    }
    fk_unlock();
    return rc;
}

CUresult
fake_cuCheckpointProcessLock(int pid, CUcheckpointLockArgs *args)
{
    CUresult rc = fk_enter(F_cuCheckpointProcessLock);
    if (rc)
        return rc;
    if (args != NULL && (args->reserved0 != 0 || args->reserved1[0] != 0))
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&fk_lock);
    rc = proc_step(pid, CU_PROCESS_STATE_RUNNING, CU_PROCESS_STATE_LOCKED);
    fk_unlock();
    return rc;
}

CUresult
fake_cuCheckpointProcessCheckpoint(int pid, CUcheckpointCheckpointArgs *args)
{
    CUresult rc = fk_enter(F_cuCheckpointProcessCheckpoint);
    if (rc)
        return rc;
    if (args != NULL && args->reserved[0] != 0)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&fk_lock);
    rc = proc_step(pid, CU_PROCESS_STATE_LOCKED, CU_PROCESS_STATE_CHECKPOINTED);
    fk_unlock();
    return rc;
}

CUresult
fake_cuCheckpointProcessRestore(int pid, CUcheckpointRestoreArgs *args)
{
    CUresult rc = fk_enter(F_cuCheckpointProcessRestore);
    if (rc)
        return rc;
    if (args != NULL && args->gpuPairsCount != 0 && args->gpuPairs == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&fk_lock);
    rc = proc_step(pid, CU_PROCESS_STATE_CHECKPOINTED, CU_PROCESS_STATE_LOCKED);
    fk_unlock();
    return rc;
}

CUresult
fake_cuCheckpointProcessUnlock(int pid, CUcheckpointUnlockArgs *args)
{
    CUresult rc = fk_enter(F_cuCheckpointProcessUnlock);
    if (rc)
        return rc;
    if (args != NULL && args->reserved[0] != 0)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&fk_lock);
    rc = proc_step(pid, CU_PROCESS_STATE_LOCKED, CU_PROCESS_STATE_RUNNING);
    fk_unlock();
    return rc;
}
