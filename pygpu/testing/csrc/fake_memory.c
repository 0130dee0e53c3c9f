/* fakecuda: allocation records, allocations, host memory, copies,
 * memsets, pointer attributes, the default pools, prefetch.
 * fakecuda.h describes the stand-in and its files. */
#include "fakecuda.h"

fake_alloc *
fk_find_alloc(uintptr_t p, size_t n)
{
    fake_alloc *a;
    for (a = fk_allocs; a != NULL; a = a->next)
        if (p >= a->base && p - a->base <= a->size && n <= a->size - (p - a->base))
            return a;
    return NULL;
}

/* A device-side range [p, p+n) that must lie in one device-accessible
 * allocation (device, managed, async, module global, mapped pinned). */
int
fk_device_range_ok(CUdeviceptr p, size_t n)
{
    fake_alloc *a;
    if (n == 0)
        return 1;
    a = fk_find_alloc((uintptr_t)p, n);
    if (a != NULL)
        return 1;
    /* a virtual buffer: accessible mappings back to back */
    a = fk_find_alloc((uintptr_t)p, 1);
    while (a != NULL && a->kind == K_VMM) {
        uintptr_t end = a->base + a->size;
        if ((uintptr_t)p + n <= end)
            return 1;
        a = fk_find_base(end);
    }
    return 0;
}

fake_alloc *
fk_add_alloc(void *base, size_t size, int kind, unsigned flags, fake_ctx *c)
{
    fake_alloc *a = calloc(1, sizeof *a);
    if (a == NULL)
        return NULL;
    a->base = (uintptr_t)base;
    a->size = size;
    a->kind = kind;
    a->flags = flags;
    a->ctx = c;
    a->next = fk_allocs;
    fk_allocs = a;
    switch (kind) {
    case K_DEVICE:
    case K_ASYNC:
    case K_MAPPED: fk_live_device++; break;
    case K_MANAGED: fk_live_managed++; break;
    case K_HOST: fk_live_host++; break;
    case K_REGISTERED: fk_live_registered++; break;
    default: break;
    }
    if (c != NULL && kind != K_HOST && kind != K_REGISTERED)
        fk_dev_used[c->dev] += size;
    return a;
}

/* Unlink and free the record (and the memory, except registered memory). */
void
fk_drop_alloc(fake_alloc *target)
{
    fake_alloc **p;
    for (p = &fk_allocs; *p != NULL; p = &(*p)->next) {
        if (*p == target) {
            *p = target->next;
            break;
        }
    }
    switch (target->kind) {
    case K_DEVICE:
    case K_ASYNC:
    case K_MAPPED: fk_live_device--; break;
    case K_MANAGED: fk_live_managed--; break;
    case K_HOST: fk_live_host--; break;
    case K_REGISTERED: fk_live_registered--; break;
    default: break;
    }
    if (target->ctx != NULL && target->kind != K_HOST && target->kind != K_REGISTERED)
        fk_dev_used[target->ctx->dev] -= target->size;
    if (target->kind == K_MAPPED)
        munmap((void *)target->base, target->size);
    else if (target->kind != K_REGISTERED && target->kind != K_VMM)
        free((void *)target->base);
    free(target);
}

fake_alloc *
fk_find_base(uintptr_t p)
{
    fake_alloc *a;
    for (a = fk_allocs; a != NULL; a = a->next)
        if (a->base == p)
            return a;
    return NULL;
}

void *
fk_fill_alloc(size_t n)
{
    /* never zero: code that forgets to initialise memory shows it */
    void *p = NULL;
    if (posix_memalign(&p, 512, n ? n : 1) != 0)
        return NULL;
    memset(p, 0xA5, n);
    return p;
}

/* ---- memory ---- */
CUresult
fk_device_alloc(CUdeviceptr *dptr, size_t n, int kind, unsigned flags)
{
    CUresult rc = CUDA_SUCCESS;
    fake_ctx *c;
    void *p;
    if (dptr == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&fk_lock);
    c = fk_need_ctx(&rc);
    if (c == NULL)
        goto done;
    if (n == 0) {
        rc = CUDA_ERROR_INVALID_VALUE;
        goto done;
    }
    if (n > fk_dev_memory - fk_dev_used[c->dev]) {
        rc = CUDA_ERROR_OUT_OF_MEMORY;
        goto done;
    }
    if ((p = fk_fill_alloc(n)) == NULL) {
        rc = CUDA_ERROR_OUT_OF_MEMORY;
        goto done;
    }
    if (fk_add_alloc(p, n, kind, flags, c) == NULL) {
        free(p);
        rc = CUDA_ERROR_OUT_OF_MEMORY;
        goto done;
    }
    *dptr = (CUdeviceptr)(uintptr_t)p;
done:
    fk_unlock();
    return rc;
}

CUresult
fake_cuMemAlloc(CUdeviceptr *dptr, size_t n)
{
    CUresult rc = fk_enter(F_cuMemAlloc);
    if (rc)
        return rc;
    if ((rc = fk_cap_unsafe()) != CUDA_SUCCESS)
        return rc;
    return fk_device_alloc(dptr, n, K_DEVICE, 0);
}

CUresult
fake_cuMemAllocPitch(CUdeviceptr *dptr, size_t *pitch, size_t width, size_t height,
                     unsigned int elem)
{
    CUresult rc = fk_enter(F_cuMemAllocPitch);
    size_t p;
    if (rc)
        return rc;
    if ((rc = fk_cap_unsafe()) != CUDA_SUCCESS)
        return rc;
    if (pitch == NULL || (elem != 4 && elem != 8 && elem != 16) || width == 0 || height == 0)
        return CUDA_ERROR_INVALID_VALUE;
    p = (width + 511) / 512 * 512;
    if (height > ((size_t)-1) / p)
        return CUDA_ERROR_OUT_OF_MEMORY;
    rc = fk_device_alloc(dptr, p * height, K_DEVICE, 0);
    if (rc == CUDA_SUCCESS)
        *pitch = p;
    return rc;
}

CUresult
fk_free_kind(CUdeviceptr d, int host_side)
{
    fake_alloc *a;
    CUresult rc = CUDA_SUCCESS;
    pthread_mutex_lock(&fk_lock);
    a = fk_find_base((uintptr_t)d);
    if (a == NULL || (host_side && a->kind != K_HOST)
        || (!host_side && a->kind != K_DEVICE && a->kind != K_MANAGED && a->kind != K_ASYNC
            && a->kind != K_MAPPED)) {
        fk_stale_uses++; /* freeing what is not (or no longer) allocated */
        rc = CUDA_ERROR_INVALID_VALUE;
    } else {
        fk_drop_alloc(a);
    }
    fk_unlock();
    return rc;
}

CUresult
fake_cuMemFree(CUdeviceptr d)
{
    CUresult rc = fk_enter(F_cuMemFree);
    if (rc)
        return rc;
    if ((rc = fk_cap_unsafe()) != CUDA_SUCCESS)
        return rc;
    if (d == 0)
        return CUDA_SUCCESS;
    return fk_free_kind(d, 0);
}

CUresult
fake_cuMemGetInfo(size_t *freeb, size_t *total)
{
    CUresult rc = fk_enter(F_cuMemGetInfo);
    fake_ctx *c;
    if (rc)
        return rc;
    if (freeb == NULL || total == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&fk_lock);
    c = fk_need_ctx(&rc);
    if (c) {
        *total = fk_dev_memory;
        *freeb = fk_dev_memory - fk_dev_used[c->dev];
    }
    fk_unlock();
    return rc;
}

CUresult
fake_cuMemHostAlloc(void **pp, size_t n, unsigned int flags)
{
    CUresult rc = fk_enter(F_cuMemHostAlloc);
    void *p;
    if (rc)
        return rc;
    if (pp == NULL || (flags & ~0x7u) != 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (n == 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (n > fk_dev_memory)
        return CUDA_ERROR_OUT_OF_MEMORY;
    pthread_mutex_lock(&fk_lock);
    if (fk_need_ctx(&rc) == NULL)
        goto done;
    if ((p = fk_fill_alloc(n)) == NULL) {
        rc = CUDA_ERROR_OUT_OF_MEMORY;
        goto done;
    }
    if (fk_add_alloc(p, n, K_HOST, flags, fk_current()) == NULL) {
        free(p);
        rc = CUDA_ERROR_OUT_OF_MEMORY;
        goto done;
    }
    *pp = p;
    fk_unlock();
    fk_pause_here();
    return rc;
done:
    fk_unlock();
    return rc;
}

CUresult
fake_cuMemFreeHost(void *p)
{
    CUresult rc = fk_enter(F_cuMemFreeHost);
    if (rc)
        return rc;
    return fk_free_kind((CUdeviceptr)(uintptr_t)p, 1);
}

CUresult
fake_cuMemHostGetDevicePointer(CUdeviceptr *out, void *p, unsigned int flags)
{
    CUresult rc = fk_enter(F_cuMemHostGetDevicePointer);
    fake_alloc *a;
    if (rc)
        return rc;
    if (out == NULL || flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&fk_lock);
    a = fk_find_alloc((uintptr_t)p, 1);
    if (a == NULL || (a->kind != K_HOST && a->kind != K_REGISTERED))
        rc = CUDA_ERROR_INVALID_VALUE;
    else if (!(a->flags
               & (a->kind == K_HOST ? CU_MEMHOSTALLOC_DEVICEMAP : CU_MEMHOSTREGISTER_DEVICEMAP)))
        rc = CUDA_ERROR_INVALID_VALUE;
    else
        *out = (CUdeviceptr)(uintptr_t)p;
    fk_unlock();
    return rc;
}

CUresult
fake_cuMemHostRegister(void *p, size_t n, unsigned int flags)
{
    CUresult rc = fk_enter(F_cuMemHostRegister);
    fake_alloc *a;
    if (rc)
        return rc;
    if (p == NULL || n == 0 || (flags & ~0xfu) != 0)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&fk_lock);
    if (fk_need_ctx(&rc) == NULL)
        goto done;
    for (a = fk_allocs; a != NULL; a = a->next) {
        if (a->kind == K_REGISTERED && (uintptr_t)p < a->base + a->size
            && a->base < (uintptr_t)p + n) {
            rc = CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
            goto done;
        }
    }
    if (fk_add_alloc(p, n, K_REGISTERED, flags, fk_current()) == NULL)
        rc = CUDA_ERROR_OUT_OF_MEMORY;
done:
    fk_unlock();
    return rc;
}

CUresult
fake_cuMemHostUnregister(void *p)
{
    CUresult rc = fk_enter(F_cuMemHostUnregister);
    fake_alloc *a;
    if (rc)
        return rc;
    pthread_mutex_lock(&fk_lock);
    a = fk_find_base((uintptr_t)p);
    if (a == NULL || a->kind != K_REGISTERED) {
        fk_stale_uses++;
        rc = CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
    } else {
        fk_drop_alloc(a);
    }
    fk_unlock();
    return rc;
}

CUresult
fake_cuMemAllocManaged(CUdeviceptr *dptr, size_t n, unsigned int flags)
{
    CUresult rc = fk_enter(F_cuMemAllocManaged);
    if (rc)
        return rc;
    if ((rc = fk_cap_unsafe()) != CUDA_SUCCESS)
        return rc;
    if (flags != CU_MEM_ATTACH_GLOBAL && flags != CU_MEM_ATTACH_HOST)
        return CUDA_ERROR_INVALID_VALUE;
    return fk_device_alloc(dptr, n, K_MANAGED, flags);
}

CUresult
fk_copy(void *dst, const void *src, size_t n, int dst_dev, int src_dev, CUstream s, int check_s)
{
    CUresult rc = CUDA_SUCCESS;
    fake_ctx *c;
    pthread_mutex_lock(&fk_lock);
    c = fk_need_ctx(&rc);
    if (c == NULL)
        goto done;
    if (check_s && (rc = fk_check_stream(s, c)) != CUDA_SUCCESS)
        goto done;
    if ((dst_dev && !fk_device_range_ok((CUdeviceptr)(uintptr_t)dst, n))
        || (src_dev && !fk_device_range_ok((CUdeviceptr)(uintptr_t)src, n))) {
        rc = CUDA_ERROR_INVALID_VALUE;
        goto done;
    }
    if ((!dst_dev && dst == NULL && n) || (!src_dev && src == NULL && n)) {
        rc = CUDA_ERROR_INVALID_VALUE;
        goto done;
    }
    if (check_s && fk_cap_stream(s) != NULL) { /* captured: a node, nothing moves */
        struct fake_node *node = fk_cap_node(fk_cap_stream(s), CU_GRAPH_NODE_TYPE_MEMCPY, &rc);
        if (node != NULL)
            fk_cap_memcpy(node, dst, src, n, dst_dev, src_dev);
        goto done;
    }
    if ((!check_s || IS_LEGACY(s))
        && (rc = fk_cap_violation(c, CUDA_ERROR_STREAM_CAPTURE_IMPLICIT)) != CUDA_SUCCESS)
        goto done;
    fk_unlock();
    fk_pause_here();
    if (n)
        memmove(dst, src, n);
    pthread_mutex_lock(&fk_lock);
    /* memory freed while the bytes moved: a use after free */
    if ((dst_dev && !fk_device_range_ok((CUdeviceptr)(uintptr_t)dst, n))
        || (src_dev && !fk_device_range_ok((CUdeviceptr)(uintptr_t)src, n)))
        fk_stale_uses++;
    fk_unlock();
    return CUDA_SUCCESS;
done:
    fk_unlock();
    return rc;
}

CUresult
fake_cuMemcpyHtoD(CUdeviceptr d, const void *h, size_t n)
{
    CUresult rc = fk_enter(F_cuMemcpyHtoD);
    if (rc)
        return rc;
    return fk_copy(DPTR(d), h, n, 1, 0, NULL, 0);
}

CUresult
fake_cuMemcpyDtoH(void *h, CUdeviceptr d, size_t n)
{
    CUresult rc = fk_enter(F_cuMemcpyDtoH);
    if (rc)
        return rc;
    return fk_copy(h, DPTR(d), n, 0, 1, NULL, 0);
}

CUresult
fake_cuMemcpyDtoD(CUdeviceptr d, CUdeviceptr s, size_t n)
{
    CUresult rc = fk_enter(F_cuMemcpyDtoD);
    if (rc)
        return rc;
    return fk_copy(DPTR(d), DPTR(s), n, 1, 1, NULL, 0);
}

CUresult
fake_cuMemcpyHtoDAsync(CUdeviceptr d, const void *h, size_t n, CUstream s)
{
    CUresult rc = fk_enter(F_cuMemcpyHtoDAsync);
    if (rc)
        return rc;
    return fk_copy(DPTR(d), h, n, 1, 0, s, 1);
}

CUresult
fake_cuMemcpyDtoHAsync(void *h, CUdeviceptr d, size_t n, CUstream s)
{
    CUresult rc = fk_enter(F_cuMemcpyDtoHAsync);
    if (rc)
        return rc;
    return fk_copy(h, DPTR(d), n, 0, 1, s, 1);
}

CUresult
fake_cuMemcpyDtoDAsync(CUdeviceptr d, CUdeviceptr s, size_t n, CUstream st)
{
    CUresult rc = fk_enter(F_cuMemcpyDtoDAsync);
    if (rc)
        return rc;
    return fk_copy(DPTR(d), DPTR(s), n, 1, 1, st, 1);
}

static CUresult
peer_copy(CUdeviceptr d, CUcontext dc, CUdeviceptr s, CUcontext sc, size_t n, CUstream st,
          int check_s)
{
    int ok;
    pthread_mutex_lock(&fk_lock);
    ok = fk_ctx_ok((fake_ctx *)dc) && fk_ctx_ok((fake_ctx *)sc);
    fk_unlock();
    if (!ok)
        return CUDA_ERROR_INVALID_CONTEXT;
    return fk_copy(DPTR(d), DPTR(s), n, 1, 1, st, check_s);
}

CUresult
fake_cuMemcpyPeer(CUdeviceptr d, CUcontext dc, CUdeviceptr s, CUcontext sc, size_t n)
{
    CUresult rc = fk_enter(F_cuMemcpyPeer);
    if (rc)
        return rc;
    return peer_copy(d, dc, s, sc, n, NULL, 0);
}

CUresult
fake_cuMemcpyPeerAsync(CUdeviceptr d, CUcontext dc, CUdeviceptr s, CUcontext sc, size_t n,
                       CUstream st)
{
    CUresult rc = fk_enter(F_cuMemcpyPeerAsync);
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
        if (!fk_device_range_ok((CUdeviceptr)(base + y * pitch), span))
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
    pthread_mutex_lock(&fk_lock);
    c = fk_need_ctx(&rc);
    if (c != NULL && check_s)
        rc = fk_check_stream(s, c);
    if (rc == CUDA_SUCCESS)
        rc = side(p->srcMemoryType, p->srcHost, p->srcDevice, p->srcXInBytes, p->srcY, p->srcPitch,
                  p->WidthInBytes, p->Height, &src);
    if (rc == CUDA_SUCCESS)
        rc = side(p->dstMemoryType, p->dstHost, p->dstDevice, p->dstXInBytes, p->dstY, p->dstPitch,
                  p->WidthInBytes, p->Height, &dst);
    if (rc == CUDA_SUCCESS && check_s && fk_cap_stream(s) != NULL) { /* captured: a node */
        struct fake_node *node = fk_cap_node(fk_cap_stream(s), CU_GRAPH_NODE_TYPE_MEMCPY, &rc);
        if (node != NULL)
            fk_cap_memcpy_pitched(node, dst, src, p->WidthInBytes, p->Height, 1, p->dstPitch,
                                  p->srcPitch, 0, 0);
        fk_unlock();
        return rc;
    }
    /* on the legacy stream: it waits for a blocking capturing stream */
    if (rc == CUDA_SUCCESS && (!check_s || IS_LEGACY(s)))
        rc = fk_cap_violation(c, CUDA_ERROR_STREAM_CAPTURE_IMPLICIT);
    fk_unlock();
    if (rc != CUDA_SUCCESS)
        return rc;
    for (r = 0; r < p->Height; r++)
        memmove(dst + r * p->dstPitch, src + r * p->srcPitch, p->WidthInBytes);
    return CUDA_SUCCESS;
}

CUresult
fake_cuMemcpy2D(const CUDA_MEMCPY2D *p)
{
    CUresult rc = fk_enter(F_cuMemcpy2D);
    if (rc)
        return rc;
    return copy2d(p, NULL, 0);
}

CUresult
fake_cuMemcpy2DAsync(const CUDA_MEMCPY2D *p, CUstream s)
{
    CUresult rc = fk_enter(F_cuMemcpy2DAsync);
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
    pthread_mutex_lock(&fk_lock);
    c = fk_need_ctx(&rc);
    if (c != NULL && check_s)
        rc = fk_check_stream(s, c);
    if (rc == CUDA_SUCCESS
        && ((uintptr_t)d % width != 0 || n > ((size_t)-1) / width
            || !fk_device_range_ok(d, n * width)))
        rc = CUDA_ERROR_INVALID_VALUE;
    if (rc == CUDA_SUCCESS && check_s && fk_cap_stream(s) != NULL) {
        struct fake_node *node = fk_cap_node(fk_cap_stream(s), CU_GRAPH_NODE_TYPE_MEMSET, &rc);
        if (node != NULL)
            fk_cap_memset(node, d, value, n, (unsigned)width);
        fk_unlock();
        return rc;
    }
    if (rc == CUDA_SUCCESS && (!check_s || IS_LEGACY(s)))
        rc = fk_cap_violation(c, CUDA_ERROR_STREAM_CAPTURE_IMPLICIT);
    fk_unlock();
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

CUresult
fake_cuMemsetD8(CUdeviceptr d, unsigned char v, size_t n)
{
    CUresult rc = fk_enter(F_cuMemsetD8);
    if (rc)
        return rc;
    return memset_n(d, v, n, 1, NULL, 0);
}

CUresult
fake_cuMemsetD16(CUdeviceptr d, unsigned short v, size_t n)
{
    CUresult rc = fk_enter(F_cuMemsetD16);
    if (rc)
        return rc;
    return memset_n(d, v, n, 2, NULL, 0);
}

CUresult
fake_cuMemsetD32(CUdeviceptr d, unsigned int v, size_t n)
{
    CUresult rc = fk_enter(F_cuMemsetD32);
    if (rc)
        return rc;
    return memset_n(d, v, n, 4, NULL, 0);
}

CUresult
fake_cuMemsetD8Async(CUdeviceptr d, unsigned char v, size_t n, CUstream s)
{
    CUresult rc = fk_enter(F_cuMemsetD8Async);
    if (rc)
        return rc;
    return memset_n(d, v, n, 1, s, 1);
}

CUresult
fake_cuMemsetD16Async(CUdeviceptr d, unsigned short v, size_t n, CUstream s)
{
    CUresult rc = fk_enter(F_cuMemsetD16Async);
    if (rc)
        return rc;
    return memset_n(d, v, n, 2, s, 1);
}

CUresult
fake_cuMemsetD32Async(CUdeviceptr d, unsigned int v, size_t n, CUstream s)
{
    CUresult rc = fk_enter(F_cuMemsetD32Async);
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

CUresult
fake_cuMemsetD2D8(CUdeviceptr d, size_t p, unsigned char v, size_t w, size_t h)
{
    CUresult rc = fk_enter(F_cuMemsetD2D8);
    if (rc)
        return rc;
    return memset_2d(d, p, v, w, h, 1, NULL, 0);
}

CUresult
fake_cuMemsetD2D16(CUdeviceptr d, size_t p, unsigned short v, size_t w, size_t h)
{
    CUresult rc = fk_enter(F_cuMemsetD2D16);
    if (rc)
        return rc;
    return memset_2d(d, p, v, w, h, 2, NULL, 0);
}

CUresult
fake_cuMemsetD2D32(CUdeviceptr d, size_t p, unsigned int v, size_t w, size_t h)
{
    CUresult rc = fk_enter(F_cuMemsetD2D32);
    if (rc)
        return rc;
    return memset_2d(d, p, v, w, h, 4, NULL, 0);
}

CUresult
fake_cuMemsetD2D8Async(CUdeviceptr d, size_t p, unsigned char v, size_t w, size_t h, CUstream s)
{
    CUresult rc = fk_enter(F_cuMemsetD2D8Async);
    if (rc)
        return rc;
    return memset_2d(d, p, v, w, h, 1, s, 1);
}

CUresult
fake_cuMemsetD2D16Async(CUdeviceptr d, size_t p, unsigned short v, size_t w, size_t h, CUstream s)
{
    CUresult rc = fk_enter(F_cuMemsetD2D16Async);
    if (rc)
        return rc;
    return memset_2d(d, p, v, w, h, 2, s, 1);
}

CUresult
fake_cuMemsetD2D32Async(CUdeviceptr d, size_t p, unsigned int v, size_t w, size_t h, CUstream s)
{
    CUresult rc = fk_enter(F_cuMemsetD2D32Async);
    if (rc)
        return rc;
    return memset_2d(d, p, v, w, h, 4, s, 1);
}

CUresult
fake_cuPointerGetAttribute(void *data, CUpointer_attribute attr, CUdeviceptr p)
{
    CUresult rc = fk_enter(F_cuPointerGetAttribute);
    fake_alloc *a;
    if (rc)
        return rc;
    if (data == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&fk_lock);
    a = fk_find_alloc((uintptr_t)p, 1);
    if (a == NULL) {
        fk_unlock();
        return CUDA_ERROR_INVALID_VALUE;
    }
    switch (attr) {
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
        *(unsigned int *)data = (a->kind == K_HOST || a->kind == K_REGISTERED)
                                    ? CU_MEMORYTYPE_HOST
                                    : CU_MEMORYTYPE_DEVICE;
        break;
    case CU_POINTER_ATTRIBUTE_IS_MANAGED: *(unsigned int *)data = a->kind == K_MANAGED; break;
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
        *(int *)data = a->ctx != NULL ? a->ctx->dev : 0;
        break;
    case CU_POINTER_ATTRIBUTE_DEVICE_POINTER:
    case CU_POINTER_ATTRIBUTE_HOST_POINTER: *(uintptr_t *)data = (uintptr_t)p; break;
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR: *(uintptr_t *)data = a->base; break;
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE: *(size_t *)data = a->size; break;
    default: rc = CUDA_ERROR_INVALID_VALUE;
    }
    fk_unlock();
    return rc;
}

/* cuMemAllocAsync/cuMemFreeAsync on a stream s that does not capture,
 * called with the lock held and rc from fk_check_stream(); unlocks.  As an H100
 * with driver 580 rules it: on the legacy stream, implicit (a blocking stream
 * captures); on a stream that does not capture, an unsafe call (GLOBAL
 * capture). */
static CUresult
async_outside_capture(CUresult rc, CUstream s)
{
    if (rc == CUDA_SUCCESS && IS_LEGACY(s))
        rc = fk_cap_violation(fk_current(), CUDA_ERROR_STREAM_CAPTURE_IMPLICIT);
    fk_unlock();
    if (rc)
        return rc;
    return fk_cap_unsafe();
}

CUresult
fake_cuMemAllocAsync(CUdeviceptr *dptr, size_t n, CUstream s)
{
    CUresult rc = fk_enter(F_cuMemAllocAsync);
    if (rc)
        return rc;
    pthread_mutex_lock(&fk_lock);
    rc = fk_check_stream(s, fk_current());
    if (rc == CUDA_SUCCESS && dptr != NULL && fk_cap_stream(s) != NULL) {
        struct fake_node *node = fk_cap_node(fk_cap_stream(s), CU_GRAPH_NODE_TYPE_MEM_ALLOC, &rc);
        if (node != NULL)
            rc = fk_cap_alloc(node, n, dptr);
        fk_unlock();
        return rc;
    }
    if ((rc = async_outside_capture(rc, s)) != CUDA_SUCCESS)
        return rc;
    return fk_device_alloc(dptr, n, K_ASYNC, 0);
}

CUresult
fake_cuMemFreeAsync(CUdeviceptr d, CUstream s)
{
    CUresult rc = fk_enter(F_cuMemFreeAsync);
    if (rc)
        return rc;
    pthread_mutex_lock(&fk_lock);
    rc = fk_check_stream(s, NULL);
    if (rc == CUDA_SUCCESS && fk_cap_stream(s) != NULL) {
        struct fake_node *node = fk_cap_node(fk_cap_stream(s), CU_GRAPH_NODE_TYPE_MEM_FREE, &rc);
        if (node != NULL)
            fk_cap_dptr(node, d);
        fk_unlock();
        return rc;
    }
    if ((rc = async_outside_capture(rc, s)) != CUDA_SUCCESS)
        return rc;
    return fk_free_kind(d, 0);
}

/* one pool per device, a distinct non-null handle; attributes are checked
 * and the release threshold is kept */
static unsigned long long pool_release_threshold[8];

CUresult
fake_cuDeviceGetDefaultMemPool(CUmemoryPool *pool, CUdevice dev)
{
    CUresult rc = fk_enter(F_cuDeviceGetDefaultMemPool);
    if (rc)
        return rc;
    if (pool == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    if (!fk_dev_ok(dev) || dev < 0 || dev >= 8)
        return CUDA_ERROR_INVALID_DEVICE;
    *pool = (CUmemoryPool)(uintptr_t)(0x9000 + 16 * (uintptr_t)dev);
    return CUDA_SUCCESS;
}

CUresult
fake_cuMemPoolSetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value)
{
    CUresult rc = fk_enter(F_cuMemPoolSetAttribute);
    uintptr_t h = (uintptr_t)pool;
    if (rc)
        return rc;
    if ((rc = fk_cap_unsafe()) != CUDA_SUCCESS)
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

CUresult
fake_cuMemPrefetchAsync(CUdeviceptr p, size_t n, CUmemLocation loc, unsigned int flags, CUstream s)
{
    CUresult rc = fk_enter(F_cuMemPrefetchAsync);
    fake_alloc *a;
    if (rc)
        return rc;
    if (flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&fk_lock);
    a = fk_find_alloc((uintptr_t)p, n);
    if (a == NULL || a->kind != K_MANAGED)
        rc = CUDA_ERROR_INVALID_VALUE;
    else if (loc.type == CU_MEM_LOCATION_TYPE_DEVICE && !fk_dev_ok(loc.id))
        rc = CUDA_ERROR_INVALID_DEVICE;
    else if (loc.type != CU_MEM_LOCATION_TYPE_DEVICE && loc.type != CU_MEM_LOCATION_TYPE_HOST)
        rc = CUDA_ERROR_INVALID_VALUE;
    else
        rc = fk_check_stream(s, NULL);
    fk_unlock();
    return rc;
}

/* cuStreamAttachMemAsync: managed memory, length 0 (the whole allocation,
 * from its start) or the allocation's size, one of the three flags */
CUresult
fake_cuStreamAttachMemAsync(CUstream s, CUdeviceptr p, size_t n, unsigned int flags)
{
    CUresult rc = fk_enter(F_cuStreamAttachMemAsync);
    fake_alloc *a;
    if (rc)
        return rc;
    if (flags != CU_MEM_ATTACH_GLOBAL && flags != CU_MEM_ATTACH_HOST
        && flags != CU_MEM_ATTACH_SINGLE)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&fk_lock);
    a = fk_find_alloc((uintptr_t)p, 1);
    if (a == NULL || a->kind != K_MANAGED || a->base != (uintptr_t)p || (n != 0 && n != a->size))
        rc = CUDA_ERROR_INVALID_VALUE;
    else if (flags == CU_MEM_ATTACH_SINGLE && s == NULL)
        rc = CUDA_ERROR_INVALID_VALUE; /* SINGLE needs a stream of its own */
    else
        rc = fk_check_stream(s, NULL);
    /* on the legacy default stream it waits for the blocking streams of the
     * context: one of them capturing, the capture is invalidated */
    if (rc == CUDA_SUCCESS && IS_LEGACY(s))
        rc = fk_cap_violation(fk_current(), CUDA_ERROR_STREAM_CAPTURE_IMPLICIT);
    if (rc == CUDA_SUCCESS)
        a->flags = flags;
    fk_unlock();
    return rc;
}

/* cuMemHostGetFlags: cuMemHostAlloc's memory only */
CUresult
fake_cuMemHostGetFlags(unsigned int *out, void *p)
{
    CUresult rc = fk_enter(F_cuMemHostGetFlags);
    fake_alloc *a;
    if (rc)
        return rc;
    if (out == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&fk_lock);
    a = fk_find_alloc((uintptr_t)p, 1);
    if (a == NULL || a->kind != K_HOST)
        rc = CUDA_ERROR_INVALID_VALUE;
    else
        *out = a->flags;
    fk_unlock();
    return rc;
}
