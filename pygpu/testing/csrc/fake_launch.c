/* fakecuda: functions (attributes, parameters), launches, occupancy.
 * fakecuda.h describes the stand-in and its files. */
#include "fakecuda.h"

fake_func *
fk_func_ok(CUfunction h)
{
    fake_func *f = (fake_func *)h;
    if (!fk_known(f) || f->magic != MAGIC_FUNC)
        return NULL;
    if (!f->alive || !fk_module_ok(f->module)) {
        fk_stale_uses++;
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

CUresult
fake_cuFuncGetAttribute(int *pi, CUfunction_attribute a, CUfunction h)
{
    CUresult rc = fk_enter(F_cuFuncGetAttribute);
    fake_func *f;
    if (rc)
        return rc;
    if (pi == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&fk_lock);
    if ((f = fk_func_ok(h)) == NULL) {
        fk_unlock();
        return CUDA_ERROR_INVALID_HANDLE;
    }
    switch (a) {
    case CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK: *pi = f->maxntid; break;
    case CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES: *pi = (int)static_shared(f); break;
    case CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES: *pi = 0; break;
    case CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES: *pi = 0; break;
    case CU_FUNC_ATTRIBUTE_NUM_REGS: *pi = 32; break;
    case CU_FUNC_ATTRIBUTE_PTX_VERSION: *pi = fk_cc_major * 10 + fk_cc_minor; break;
    case CU_FUNC_ATTRIBUTE_BINARY_VERSION: *pi = fk_cc_major * 10 + fk_cc_minor; break;
    case CU_FUNC_ATTRIBUTE_CACHE_MODE_CA: *pi = 0; break;
    case CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES: *pi = f->max_dynamic_shared; break;
    case CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT: *pi = -1; break;
    default:
        if ((int)a < 0 || a >= CU_FUNC_ATTRIBUTE_MAX)
            rc = CUDA_ERROR_INVALID_VALUE;
        else
            *pi = 0;
    }
    fk_unlock();
    return rc;
}

CUresult
fake_cuFuncSetAttribute(CUfunction h, CUfunction_attribute a, int value)
{
    CUresult rc = fk_enter(F_cuFuncSetAttribute);
    fake_func *f;
    if (rc)
        return rc;
    pthread_mutex_lock(&fk_lock);
    if ((f = fk_func_ok(h)) == NULL)
        rc = CUDA_ERROR_INVALID_HANDLE;
    else if (a == CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES) {
        if (value < 0
            || (size_t)value + static_shared(f)
                   > (size_t)fk_attribute(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, 0))
            rc = CUDA_ERROR_INVALID_VALUE;
        else
            f->max_dynamic_shared = value;
    } else if (a == CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT) {
        if (value < -1 || value > 100)
            rc = CUDA_ERROR_INVALID_VALUE;
    } else {
        rc = CUDA_ERROR_INVALID_VALUE;
    }
    fk_unlock();
    return rc;
}

CUresult
fake_cuFuncSetCacheConfig(CUfunction h, CUfunc_cache config)
{
    CUresult rc = fk_enter(F_cuFuncSetCacheConfig);
    fake_func *f;
    if (rc)
        return rc;
    pthread_mutex_lock(&fk_lock);
    if ((f = fk_func_ok(h)) == NULL)
        rc = CUDA_ERROR_INVALID_HANDLE;
    else if ((int)config < 0 || config > CU_FUNC_CACHE_PREFER_EQUAL)
        rc = CUDA_ERROR_INVALID_VALUE;
    else
        f->cache = config;
    fk_unlock();
    return rc;
}

CUresult
fake_cuFuncGetParamInfo(CUfunction h, size_t index, size_t *off, size_t *size)
{
    CUresult rc = fk_enter(F_cuFuncGetParamInfo);
    fake_func *f;
    if (rc)
        return rc;
    pthread_mutex_lock(&fk_lock);
    if ((f = fk_func_ok(h)) == NULL)
        rc = CUDA_ERROR_INVALID_HANDLE;
    else if (index >= (size_t)f->nparams)
        rc = CUDA_ERROR_INVALID_VALUE;
    else {
        if (off)
            *off = f->offset[index];
        if (size)
            *size = f->size[index];
    }
    fk_unlock();
    return rc;
}

CUresult
fake_cuFuncGetName(const char **name, CUfunction h)
{
    CUresult rc = fk_enter(F_cuFuncGetName);
    fake_func *f;
    if (rc)
        return rc;
    if (name == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&fk_lock);
    if ((f = fk_func_ok(h)) == NULL)
        rc = CUDA_ERROR_INVALID_HANDLE;
    else
        *name = f->name;
    fk_unlock();
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
    fake_ctx *c = fk_need_ctx(&rc);
    unsigned long long threads = (unsigned long long)block[0] * block[1] * block[2];
    int i;
    if (c == NULL)
        return rc;
    if (f->module->ctx != c)
        return CUDA_ERROR_INVALID_HANDLE; /* a function of another context */
    if ((rc = fk_check_stream(s, c)) != CUDA_SUCCESS)
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
    if (f->param_bytes > sizeof fk_last_launch.params)
        return CUDA_ERROR_INVALID_VALUE;
    /* the legacy stream waits for a blocking capturing stream: the
     * driver refuses the launch and invalidates the capture */
    if (IS_LEGACY(s)
        && (rc = fk_cap_violation(c, CUDA_ERROR_STREAM_CAPTURE_IMPLICIT)) != CUDA_SUCCESS)
        return rc;
    if (fk_cap_stream(s) != NULL) { /* captured: a kernel node */
        struct fake_node *node = fk_cap_node(fk_cap_stream(s), CU_GRAPH_NODE_TYPE_KERNEL, &rc);
        if (node == NULL)
            return rc;
        return fk_cap_kernel(node, f, grid, block, shared, params, extra);
    }
    memset(fk_last_launch.params, 0, sizeof fk_last_launch.params);
    if (params != NULL) {
        for (i = 0; i < f->nparams; i++) {
            if (params[i] == NULL)
                return CUDA_ERROR_INVALID_VALUE;
            memcpy(fk_last_launch.params + f->offset[i], params[i], f->size[i]);
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
        memcpy(fk_last_launch.params, buf, f->param_bytes);
    }
    snprintf(fk_last_launch.name, sizeof fk_last_launch.name, "%s", f->name);
    memcpy(fk_last_launch.grid, grid, sizeof fk_last_launch.grid);
    memcpy(fk_last_launch.block, block, sizeof fk_last_launch.block);
    memcpy(fk_last_launch.cluster, cluster, sizeof fk_last_launch.cluster);
    fk_last_launch.shared = shared;
    fk_last_launch.stream = s;
    fk_last_launch.size = f->param_bytes;
    fk_last_launch.cooperative = cooperative;
    fk_last_launch.pdl = pdl;
    memcpy(fk_thread_last.params, fk_last_launch.params, f->param_bytes);
    fk_thread_last.size = f->param_bytes;
    fk_launches++;
    return CUDA_SUCCESS;
}

CUresult
fake_cuLaunchKernel(CUfunction h, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                    unsigned bz, unsigned shared, CUstream s, void **params, void **extra)
{
    CUresult rc = fk_enter(F_cuLaunchKernel);
    const unsigned grid[3] = {gx, gy, gz}, block[3] = {bx, by, bz}, none[3] = {0, 0, 0};
    fake_func *f;
    if (rc)
        return rc;
    pthread_mutex_lock(&fk_lock);
    if ((f = fk_func_ok(h)) == NULL)
        rc = CUDA_ERROR_INVALID_HANDLE;
    else
        rc = do_launch(f, grid, block, shared, s, params, extra, 0, 0, none);
    fk_unlock();
    return rc;
}

CUresult
fake_cuLaunchCooperativeKernel(CUfunction h, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                               unsigned by, unsigned bz, unsigned shared, CUstream s, void **params)
{
    CUresult rc = fk_enter(F_cuLaunchCooperativeKernel);
    const unsigned grid[3] = {gx, gy, gz}, block[3] = {bx, by, bz}, none[3] = {0, 0, 0};
    fake_func *f;
    if (rc)
        return rc;
    pthread_mutex_lock(&fk_lock);
    if ((f = fk_func_ok(h)) == NULL)
        rc = CUDA_ERROR_INVALID_HANDLE;
    else
        rc = do_launch(f, grid, block, shared, s, params, NULL, 1, 0, none);
    fk_unlock();
    return rc;
}

CUresult
fake_cuLaunchKernelEx(const CUlaunchConfig *cfg, CUfunction h, void **params, void **extra)
{
    CUresult rc = fk_enter(F_cuLaunchKernelEx);
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
    pthread_mutex_lock(&fk_lock);
    if ((f = fk_func_ok(h)) == NULL)
        rc = CUDA_ERROR_INVALID_HANDLE;
    else
        rc = do_launch(f, grid, block, cfg->sharedMemBytes, cfg->hStream, params, extra,
                       cooperative, pdl, cluster);
    fk_unlock();
    return rc;
}

CUresult
fake_cuOccupancyMaxActiveBlocksPerMultiprocessor(int *n, CUfunction h, int block, size_t smem)
{
    CUresult rc = fk_enter(F_cuOccupancyMaxActiveBlocksPerMultiprocessor);
    fake_func *f;
    if (rc)
        return rc;
    if (n == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&fk_lock);
    if ((f = fk_func_ok(h)) == NULL)
        rc = CUDA_ERROR_INVALID_HANDLE;
    else
        *n = max_active(f, block, smem);
    fk_unlock();
    return rc;
}

CUresult
fake_cuOccupancyMaxPotentialBlockSize(int *min_grid, int *block, CUfunction h,
                                      CUoccupancyB2DSize smem_of, size_t smem, int limit)
{
    CUresult rc = fk_enter(F_cuOccupancyMaxPotentialBlockSize);
    fake_func *f;
    int b;
    if (rc)
        return rc;
    if (min_grid == NULL || block == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&fk_lock);
    if ((f = fk_func_ok(h)) == NULL) {
        fk_unlock();
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
    fk_unlock();
    return CUDA_SUCCESS;
}
