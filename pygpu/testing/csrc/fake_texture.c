/* fakecuda: CUDA arrays and their copies, texture and surface
 * objects, tensor maps.
 * fakecuda.h describes the stand-in and its files. */
#include "fakecuda.h"

/* ---- CUDA arrays (host buffers), texture and surface objects (records of
 * their descriptors), tensor maps (a readable encoding, below) ---- */
enum { MAGIC_ARRAY = 0x41525231, MAGIC_TEX = 0x54455831, MAGIC_SURF = 0x53524631 };

typedef struct fake_texobj {
    unsigned magic;
    int alive;
    fake_ctx *ctx;
    CUDA_RESOURCE_DESC res;
    CUDA_TEXTURE_DESC tex;
    fake_array *array;
    struct fake_texobj *next_all;
} fake_texobj;

long fk_live_arrays, fk_live_textures, fk_live_surfaces;
static fake_array *all_arrays;
static fake_texobj *all_texobjs;

static size_t
array_bytes(const fake_array *a)
{
    return a->desc.Width * (a->desc.Height ? a->desc.Height : 1)
           * (a->desc.Depth ? a->desc.Depth : 1) * a->esize;
}

/* the context's arrays and texture/surface objects go with it.  Lock held. */
void
fk_reap_arrays(fake_ctx *c)
{
    fake_texobj *o;
    fake_array *a;
    for (o = all_texobjs; o != NULL; o = o->next_all) {
        if (o->ctx == c && o->alive) {
            o->alive = 0;
            if (o->magic == MAGIC_SURF)
                fk_live_surfaces--;
            else
                fk_live_textures--;
            fk_reaped++;
        }
    }
    for (a = all_arrays; a != NULL; a = a->next_all) {
        if (a->ctx == c && a->alive) {
            a->alive = 0;
            fk_dev_used[c->dev] -= array_bytes(a);
            free(a->data);
            a->data = NULL;
            fk_live_arrays--;
            fk_reaped++;
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
    if (!fk_known(a) || a->magic != MAGIC_ARRAY)
        return NULL;
    if (!a->alive) {
        fk_stale_uses++;
        return NULL;
    }
    return a;
}

/* Lock held. */
CUresult
fk_array_create(CUarray *out, const CUDA_ARRAY3D_DESCRIPTOR *d)
{
    CUresult rc = CUDA_SUCCESS;
    fake_ctx *c = fk_need_ctx(&rc);
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
    if (n > fk_dev_memory - fk_dev_used[c->dev])
        return CUDA_ERROR_OUT_OF_MEMORY;
    a = calloc(1, sizeof *a);
    if (a == NULL || (a->data = fk_fill_alloc(n)) == NULL) {
        free(a);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    a->magic = MAGIC_ARRAY;
    a->alive = 1;
    a->ctx = c;
    a->desc = *d;
    a->esize = es;
    fk_dev_used[c->dev] += n;
    fk_remember(a);
    a->next_all = all_arrays;
    all_arrays = a;
    fk_live_arrays++;
    *out = (CUarray)a;
    return CUDA_SUCCESS;
}

CUresult
fake_cuArrayCreate(CUarray *out, const CUDA_ARRAY_DESCRIPTOR *d)
{
    CUresult rc = fk_enter(F_cuArrayCreate);
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
    pthread_mutex_lock(&fk_lock);
    rc = fk_array_create(out, &d3);
    fk_unlock();
    return rc;
}

CUresult
fake_cuArray3DCreate(CUarray *out, const CUDA_ARRAY3D_DESCRIPTOR *d)
{
    CUresult rc = fk_enter(F_cuArray3DCreate);
    if (rc)
        return rc;
    pthread_mutex_lock(&fk_lock);
    rc = fk_array_create(out, d);
    fk_unlock();
    return rc;
}

/* An array's memory goes (lock held); its handle stays known, dead. */
void
fk_array_release(fake_array *a)
{
    a->alive = 0;
    fk_dev_used[a->ctx->dev] -= array_bytes(a);
    free(a->data);
    a->data = NULL;
    fk_live_arrays--;
}

CUresult
fake_cuArrayDestroy(CUarray h)
{
    CUresult rc = fk_enter(F_cuArrayDestroy);
    fake_array *a;
    if (rc)
        return rc;
    pthread_mutex_lock(&fk_lock);
    a = array_ok(h);
    if (a == NULL) {
        rc = CUDA_ERROR_INVALID_HANDLE;
    } else { /* (a texture object left over it reads freed memory) */
        fk_array_release(a);
    }
    fk_unlock();
    return rc;
}

CUresult
fake_cuArrayGetDescriptor(CUDA_ARRAY_DESCRIPTOR *out, CUarray h)
{
    CUresult rc = fk_enter(F_cuArrayGetDescriptor);
    fake_array *a;
    if (rc)
        return rc;
    pthread_mutex_lock(&fk_lock);
    a = array_ok(h);
    if (a == NULL || out == NULL) {
        rc = a == NULL ? CUDA_ERROR_INVALID_HANDLE : CUDA_ERROR_INVALID_VALUE;
    } else {
        out->Width = a->desc.Width;
        out->Height = a->desc.Height;
        out->Format = a->desc.Format;
        out->NumChannels = a->desc.NumChannels;
    }
    fk_unlock();
    return rc;
}

CUresult
fake_cuArray3DGetDescriptor(CUDA_ARRAY3D_DESCRIPTOR *out, CUarray h)
{
    CUresult rc = fk_enter(F_cuArray3DGetDescriptor);
    fake_array *a;
    if (rc)
        return rc;
    pthread_mutex_lock(&fk_lock);
    a = array_ok(h);
    if (a == NULL || out == NULL)
        rc = a == NULL ? CUDA_ERROR_INVALID_HANDLE : CUDA_ERROR_INVALID_VALUE;
    else
        *out = a->desc;
    fk_unlock();
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
    if (!fk_device_range_ok((CUdeviceptr)(uintptr_t)out->base,
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
    pthread_mutex_lock(&fk_lock);
    c = fk_need_ctx(&rc);
    if (c != NULL && check_s)
        rc = fk_check_stream(s, c);
    if (rc == CUDA_SUCCESS)
        rc = side_3d(p->srcMemoryType, p->srcHost, p->srcDevice, p->srcArray, p->srcXInBytes,
                     p->srcY, p->srcZ, p->srcPitch, p->srcHeight, p, &src);
    if (rc == CUDA_SUCCESS)
        rc = side_3d(p->dstMemoryType, p->dstHost, p->dstDevice, p->dstArray, p->dstXInBytes,
                     p->dstY, p->dstZ, p->dstPitch, p->dstHeight, p, &dst);
    if (rc == CUDA_SUCCESS && check_s && fk_cap_stream(s) != NULL) { /* captured: a node */
        struct fake_node *node = fk_cap_node(fk_cap_stream(s), CU_GRAPH_NODE_TYPE_MEMCPY, &rc);
        if (node != NULL)
            fk_cap_memcpy_pitched(node, dst.base, src.base, p->WidthInBytes, p->Height, p->Depth,
                                  dst.pitch, src.pitch, dst.slice, src.slice);
        fk_unlock();
        return rc;
    }
    /* on the legacy stream: it waits for a blocking capturing stream */
    if (rc == CUDA_SUCCESS && (!check_s || IS_LEGACY(s)))
        rc = fk_cap_violation(c, CUDA_ERROR_STREAM_CAPTURE_IMPLICIT);
    if (rc == CUDA_SUCCESS
        && (p->srcMemoryType == CU_MEMORYTYPE_ARRAY || p->dstMemoryType == CU_MEMORYTYPE_ARRAY)) {
        /* the driver is busy here (fakecuda_delay); an array destroyed
         * meanwhile is a use after free: counted, nothing moves */
        fk_unlock();
        fk_pause_here();
        pthread_mutex_lock(&fk_lock);
        if ((p->srcMemoryType == CU_MEMORYTYPE_ARRAY && array_ok(p->srcArray) == NULL)
            || (p->dstMemoryType == CU_MEMORYTYPE_ARRAY && array_ok(p->dstArray) == NULL)) {
            fk_unlock();
            return CUDA_SUCCESS;
        }
    }
    if (rc == CUDA_SUCCESS) /* under the lock: an array cannot go meanwhile */
        for (i = 0; i < p->Depth; i++)
            for (j = 0; j < p->Height; j++)
                memmove(dst.base + i * dst.slice + j * dst.pitch,
                        src.base + i * src.slice + j * src.pitch, p->WidthInBytes);
    fk_unlock();
    return rc;
}

CUresult
fake_cuMemcpy3D(const CUDA_MEMCPY3D *p)
{
    CUresult rc = fk_enter(F_cuMemcpy3D);
    if (rc)
        return rc;
    return copy3d(p, NULL, 0);
}

CUresult
fake_cuMemcpy3DAsync(const CUDA_MEMCPY3D *p, CUstream s)
{
    CUresult rc = fk_enter(F_cuMemcpy3DAsync);
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
    pthread_mutex_lock(&fk_lock);
    ok = (pp->srcMemoryType == CU_MEMORYTYPE_ARRAY || fk_ctx_ok((fake_ctx *)pp->srcContext))
         && (pp->dstMemoryType == CU_MEMORYTYPE_ARRAY || fk_ctx_ok((fake_ctx *)pp->dstContext));
    fk_unlock();
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

CUresult
fake_cuMemcpy3DPeer(const CUDA_MEMCPY3D_PEER *p)
{
    CUresult rc = fk_enter(F_cuMemcpy3DPeer);
    if (rc)
        return rc;
    return copy3d_peer(p, NULL, 0);
}

CUresult
fake_cuMemcpy3DPeerAsync(const CUDA_MEMCPY3D_PEER *p, CUstream s)
{
    CUresult rc = fk_enter(F_cuMemcpy3DPeerAsync);
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
    pthread_mutex_lock(&fk_lock);
    c = fk_need_ctx(&rc);
    if (c == NULL)
        goto done;
    if (darr != NULL) {
        if ((rc = array_range(darr, doff, n, &dst)) != CUDA_SUCCESS)
            goto done;
    } else if (!fk_device_range_ok(ddev, n)) {
        rc = CUDA_ERROR_INVALID_VALUE;
        goto done;
    } else {
        dst = DPTR(ddev);
    }
    if (sarr != NULL) {
        if ((rc = array_range(sarr, soff, n, &src)) != CUDA_SUCCESS)
            goto done;
    } else if (!fk_device_range_ok(sdev, n)) {
        rc = CUDA_ERROR_INVALID_VALUE;
        goto done;
    } else {
        src = DPTR(sdev);
    }
    if ((rc = fk_cap_violation(c, CUDA_ERROR_STREAM_CAPTURE_IMPLICIT)) != CUDA_SUCCESS)
        goto done;
    /* the driver is busy here (fakecuda_delay); an array destroyed (or
     * memory freed) meanwhile is a use after free: counted, nothing moves */
    fk_unlock();
    fk_pause_here();
    pthread_mutex_lock(&fk_lock);
    if ((darr != NULL && array_ok(darr) == NULL) || (sarr != NULL && array_ok(sarr) == NULL))
        goto done;
    if ((darr == NULL && !fk_device_range_ok(ddev, n))
        || (sarr == NULL && !fk_device_range_ok(sdev, n))) {
        fk_stale_uses++;
        goto done;
    }
    if (n) /* under the lock: an array cannot go meanwhile */
        memmove(dst, src, n);
done:
    fk_unlock();
    return rc;
}

CUresult
fake_cuMemcpyDtoA(CUarray dst, size_t off, CUdeviceptr src, size_t n)
{
    CUresult rc = fk_enter(F_cuMemcpyDtoA);
    if (rc)
        return rc;
    return array_linear_copy(dst, off, 0, NULL, 0, src, n);
}

CUresult
fake_cuMemcpyAtoD(CUdeviceptr dst, CUarray src, size_t off, size_t n)
{
    CUresult rc = fk_enter(F_cuMemcpyAtoD);
    if (rc)
        return rc;
    return array_linear_copy(NULL, 0, dst, src, off, 0, n);
}

CUresult
fake_cuMemcpyAtoA(CUarray dst, size_t doff, CUarray src, size_t soff, size_t n)
{
    CUresult rc = fk_enter(F_cuMemcpyAtoA);
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
            || !fk_device_range_ok(r->res.linear.devPtr, r->res.linear.sizeInBytes))
            return CUDA_ERROR_INVALID_VALUE;
        return CUDA_SUCCESS;
    case CU_RESOURCE_TYPE_PITCH2D:
        es = format_size(r->res.pitch2D.format) * r->res.pitch2D.numChannels;
        if (es == 0 || r->res.pitch2D.devPtr % 512 || r->res.pitch2D.pitchInBytes % 32
            || r->res.pitch2D.width == 0 || r->res.pitch2D.height == 0
            || r->res.pitch2D.pitchInBytes < r->res.pitch2D.width * es
            || !fk_device_range_ok(r->res.pitch2D.devPtr,
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
    pthread_mutex_lock(&fk_lock);
    c = fk_need_ctx(&rc);
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
    fk_remember(o);
    o->next_all = all_texobjs;
    all_texobjs = o;
    if (surface)
        fk_live_surfaces++;
    else
        fk_live_textures++;
    *out = (unsigned long long)(uintptr_t)o;
done:
    fk_unlock();
    return rc;
}

static CUresult
texobj_destroy(unsigned long long h, int surface)
{
    CUresult rc = CUDA_SUCCESS;
    fake_texobj *o = (fake_texobj *)(uintptr_t)h;
    pthread_mutex_lock(&fk_lock);
    if (!fk_known(o) || o->magic != (surface ? MAGIC_SURF : MAGIC_TEX)) {
        rc = CUDA_ERROR_INVALID_VALUE;
    } else if (!o->alive) {
        fk_stale_uses++;
        rc = CUDA_ERROR_INVALID_VALUE;
    } else {
        o->alive = 0;
        if (o->array)
            o->array->users--;
        if (surface)
            fk_live_surfaces--;
        else
            fk_live_textures--;
    }
    fk_unlock();
    return rc;
}

CUresult
fake_cuTexObjectCreate(CUtexObject *out, const CUDA_RESOURCE_DESC *r, const CUDA_TEXTURE_DESC *t,
                       const CUDA_RESOURCE_VIEW_DESC *v)
{
    CUresult rc = fk_enter(F_cuTexObjectCreate);
    if (rc)
        return rc;
    if (v != NULL)
        return CUDA_ERROR_NOT_SUPPORTED; /* views: not in the stand-in */
    return texobj_create((unsigned long long *)out, r, t, 0);
}

CUresult
fake_cuTexObjectDestroy(CUtexObject h)
{
    CUresult rc = fk_enter(F_cuTexObjectDestroy);
    if (rc)
        return rc;
    return texobj_destroy(h, 0);
}

CUresult
fake_cuSurfObjectCreate(CUsurfObject *out, const CUDA_RESOURCE_DESC *r)
{
    CUresult rc = fk_enter(F_cuSurfObjectCreate);
    if (rc)
        return rc;
    return texobj_create((unsigned long long *)out, r, NULL, 1);
}

CUresult
fake_cuSurfObjectDestroy(CUsurfObject h)
{
    CUresult rc = fk_enter(F_cuSurfObjectDestroy);
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
    pthread_mutex_lock(&fk_lock);
    ok = fk_known(o) && (o->magic == MAGIC_TEX || o->magic == MAGIC_SURF) && o->alive;
    if (ok) {
        if (r)
            *r = o->res;
        if (t)
            *t = o->tex;
    }
    fk_unlock();
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

CUresult
fake_cuTensorMapEncodeTiled(CUtensorMap *m, CUtensorMapDataType t, cuuint32_t rank, void *addr,
                            const cuuint64_t *dims, const cuuint64_t *strides,
                            const cuuint32_t *box, const cuuint32_t *es, CUtensorMapInterleave il,
                            CUtensorMapSwizzle sw, CUtensorMapL2promotion l2,
                            CUtensorMapFloatOOBfill oob)
{
    CUresult rc = fk_enter(F_cuTensorMapEncodeTiled);
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

CUresult
fake_cuTensorMapEncodeIm2col(CUtensorMap *m, CUtensorMapDataType t, cuuint32_t rank, void *addr,
                             const cuuint64_t *dims, const cuuint64_t *strides, const int *lower,
                             const int *upper, cuuint32_t cpp, cuuint32_t ppc, const cuuint32_t *es,
                             CUtensorMapInterleave il, CUtensorMapSwizzle sw,
                             CUtensorMapL2promotion l2, CUtensorMapFloatOOBfill oob)
{
    CUresult rc = fk_enter(F_cuTensorMapEncodeIm2col);
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
