/* fakecuda: what crosses processes: IPC handles, memory pools,
 * virtual memory.
 * fakecuda.h describes the stand-in and its files. */
#include "fakecuda.h"

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
long fk_live_ipc, fk_live_pools, fk_live_vmem, fk_live_reservations;

CUresult
fake_cuMemGetAddressRange(CUdeviceptr *pbase, size_t *psize, CUdeviceptr dptr)
{
    CUresult rc = fk_enter(F_cuMemGetAddressRange);
    fake_alloc *a;
    if (rc)
        return rc;
    pthread_mutex_lock(&fk_lock);
    a = fk_find_alloc((uintptr_t)dptr, 1);
    if (a == NULL || a->kind == K_HOST || a->kind == K_REGISTERED) {
        rc = CUDA_ERROR_NOT_FOUND;
    } else {
        if (pbase)
            *pbase = (CUdeviceptr)a->base;
        if (psize)
            *psize = a->size;
    }
    fk_unlock();
    return rc;
}

CUresult
fake_cuIpcGetMemHandle(CUipcMemHandle *h, CUdeviceptr dptr)
{
    CUresult rc = fk_enter(F_cuIpcGetMemHandle);
    unsigned long long w[4];
    fake_alloc *a;
    if (rc)
        return rc;
    if (h == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&fk_lock);
    if (fk_need_ctx(&rc) == NULL)
        goto done;
    a = fk_find_base((uintptr_t)dptr);
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
    fk_unlock();
    return rc;
}

CUresult
fake_cuIpcOpenMemHandle(CUdeviceptr *out, CUipcMemHandle h, unsigned int flags)
{
    CUresult rc = fk_enter(F_cuIpcOpenMemHandle);
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
    pthread_mutex_lock(&fk_lock);
    if (fk_need_ctx(&rc) == NULL)
        goto done;
    a = fk_find_base((uintptr_t)w[2]);
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
    fk_live_ipc++;
    *out = (CUdeviceptr)a->base;
done:
    fk_unlock();
    if (rc == CUDA_SUCCESS)
        fk_pause_here(); /* fakecuda_delay: the mapping made, the call not returned yet */
    return rc;
}

CUresult
fake_cuIpcCloseMemHandle(CUdeviceptr p)
{
    CUresult rc = fk_enter(F_cuIpcCloseMemHandle);
    ipc_open *o;
    if (rc)
        return rc;
    pthread_mutex_lock(&fk_lock);
    for (o = ipc_opens; o != NULL && o->ptr != (uintptr_t)p; o = o->next)
        ;
    if (o == NULL || o->count == 0) {
        fk_stale_uses++;
        rc = CUDA_ERROR_INVALID_VALUE;
    } else {
        o->count--;
        fk_live_ipc--;
    }
    fk_unlock();
    return rc;
}

CUresult
fake_cuIpcGetEventHandle(CUipcEventHandle *h, CUevent ev)
{
    CUresult rc = fk_enter(F_cuIpcGetEventHandle);
    unsigned long long w[3];
    fake_event *e;
    if (rc)
        return rc;
    if (h == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&fk_lock);
    if ((e = fk_event_ok(ev)) == NULL)
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
    fk_unlock();
    return rc;
}

CUresult
fake_cuIpcOpenEventHandle(CUevent *out, CUipcEventHandle h)
{
    CUresult rc = fk_enter(F_cuIpcOpenEventHandle);
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
    pthread_mutex_lock(&fk_lock);
    c = fk_need_ctx(&rc);
    if (c != NULL) {
        if ((e = calloc(1, sizeof *e)) == NULL) {
            rc = CUDA_ERROR_OUT_OF_MEMORY;
        } else {
            e->magic = MAGIC_EVENT;
            e->alive = 1;
            fk_remember(e);
            e->ctx = c;
            e->flags = (unsigned)w[2];
            e->next_all = fk_all_events;
            fk_all_events = e;
            fk_live_events++;
            *out = (CUevent)e;
        }
    }
    fk_unlock();
    return rc;
}

/* pools */
static fake_pool *
pool_ok(CUmemoryPool h)
{
    fake_pool *p = (fake_pool *)h;
    if (!fk_known(p) || p->magic != MAGIC_POOL)
        return NULL;
    if (!p->alive) {
        fk_stale_uses++;
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
    fk_remember(p);
    p->next_all = all_pools;
    all_pools = p;
    fk_live_pools++;
    return p;
}

CUresult
fake_cuMemPoolCreate(CUmemoryPool *out, const CUmemPoolProps *props)
{
    CUresult rc = fk_enter(F_cuMemPoolCreate);
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
    if (!fk_dev_ok(props->location.id))
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
    pthread_mutex_lock(&fk_lock);
    p = pool_new_locked(fd, props->location.id, 0, props->handleTypes);
    fk_unlock();
    if (p == NULL) {
        close(fd);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *out = (CUmemoryPool)p;
    return CUDA_SUCCESS;
}

CUresult
fake_cuMemPoolDestroy(CUmemoryPool h)
{
    CUresult rc = fk_enter(F_cuMemPoolDestroy);
    fake_pool *p;
    if (rc)
        return rc;
    pthread_mutex_lock(&fk_lock);
    if ((p = pool_ok(h)) == NULL) {
        rc = CUDA_ERROR_INVALID_VALUE;
    } else {
        p->alive = 0;
        close(p->fd);
        p->fd = -1;
        fk_live_pools--;
    }
    fk_unlock();
    return rc;
}

CUresult
fake_cuMemPoolExportToShareableHandle(void *out, CUmemoryPool h, CUmemAllocationHandleType type,
                                      unsigned long long flags)
{
    CUresult rc = fk_enter(F_cuMemPoolExportToShareableHandle);
    fake_pool *p;
    if (rc)
        return rc;
    if (out == NULL || flags != 0 || type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&fk_lock);
    if ((p = pool_ok(h)) == NULL || p->imported
        || p->handle_types != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
        rc = CUDA_ERROR_INVALID_VALUE;
    else if ((*(int *)out = fcntl(p->fd, F_DUPFD_CLOEXEC, 0)) < 0)
        rc = CUDA_ERROR_OPERATING_SYSTEM;
    fk_unlock();
    return rc;
}

CUresult
fake_cuMemPoolImportFromShareableHandle(CUmemoryPool *out, void *handle,
                                        CUmemAllocationHandleType type, unsigned long long flags)
{
    CUresult rc = fk_enter(F_cuMemPoolImportFromShareableHandle);
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
    pthread_mutex_lock(&fk_lock);
    p = pool_new_locked(mine, (int)hdr[1], 1, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    fk_unlock();
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
    if ((a = fk_add_alloc(m, n, K_MAPPED, 0, c)) == NULL) {
        munmap(m, n);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    a->pool = p;
    a->pool_off = off;
    *out = (CUdeviceptr)(uintptr_t)m;
    return CUDA_SUCCESS;
}

CUresult
fake_cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t n, CUmemoryPool h, CUstream s)
{
    CUresult rc = fk_enter(F_cuMemAllocFromPoolAsync);
    fake_pool *p;
    fake_ctx *c;
    size_t need;
    if (rc)
        return rc;
    if (dptr == NULL || n == 0)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&fk_lock);
    if ((c = fk_need_ctx(&rc)) == NULL || (rc = fk_check_stream(s, c)) != CUDA_SUCCESS)
        goto done;
    if ((p = pool_ok(h)) == NULL || p->imported) {
        rc = CUDA_ERROR_INVALID_VALUE;
        goto done;
    }
    need = (n + 4095) / 4096 * 4096;
    if (need > POOL_BYTES - p->used || n > fk_dev_memory - fk_dev_used[c->dev]) {
        rc = CUDA_ERROR_OUT_OF_MEMORY;
        goto done;
    }
    if ((rc = pool_map(p, p->used, n, c, 1, dptr)) == CUDA_SUCCESS)
        p->used += need;
done:
    fk_unlock();
    return rc;
}

CUresult
fake_cuMemPoolExportPointer(CUmemPoolPtrExportData *out, CUdeviceptr ptr)
{
    CUresult rc = fk_enter(F_cuMemPoolExportPointer);
    unsigned long long w[3];
    fake_alloc *a;
    if (rc)
        return rc;
    if (out == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&fk_lock);
    a = fk_find_base((uintptr_t)ptr);
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
    fk_unlock();
    return rc;
}

CUresult
fake_cuMemPoolImportPointer(CUdeviceptr *out, CUmemoryPool h, CUmemPoolPtrExportData *data)
{
    CUresult rc = fk_enter(F_cuMemPoolImportPointer);
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
    pthread_mutex_lock(&fk_lock);
    if ((c = fk_need_ctx(&rc)) == NULL)
        goto done;
    if ((p = pool_ok(h)) == NULL || !p->imported) {
        rc = CUDA_ERROR_INVALID_VALUE;
        goto done;
    }
    rc = pool_map(p, (size_t)w[1], (size_t)w[2], c, 0, out);
done:
    fk_unlock();
    return rc;
}

CUresult
fake_cuMemPoolSetAccess(CUmemoryPool h, const CUmemAccessDesc *map, size_t count)
{
    CUresult rc = fk_enter(F_cuMemPoolSetAccess);
    size_t i;
    if (rc)
        return rc;
    if (map == NULL && count)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&fk_lock);
    if (pool_ok(h) == NULL)
        rc = CUDA_ERROR_INVALID_VALUE;
    for (i = 0; rc == CUDA_SUCCESS && i < count; i++)
        if (map[i].location.type != CU_MEM_LOCATION_TYPE_DEVICE || !fk_dev_ok(map[i].location.id))
            rc = CUDA_ERROR_INVALID_DEVICE;
    for (i = 0; rc == CUDA_SUCCESS && i < count; i++) {
        fake_pool *p = (fake_pool *)h;
        if (map[i].flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
            p->access |= 1u << map[i].location.id;
        else
            p->access &= ~(1u << map[i].location.id);
    }
    fk_unlock();
    return rc;
}

/* access: the pool's own device reads and writes; an imported pool grants
 * nothing until cuMemPoolSetAccess (which the stand-in remembers per device) */
CUresult
fake_cuMemPoolGetAccess(CUmemAccess_flags *flags, CUmemoryPool h, CUmemLocation *loc)
{
    CUresult rc = fk_enter(F_cuMemPoolGetAccess);
    fake_pool *p;
    if (rc)
        return rc;
    if (flags == NULL || loc == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    if (loc->type != CU_MEM_LOCATION_TYPE_DEVICE || !fk_dev_ok(loc->id))
        return CUDA_ERROR_INVALID_DEVICE;
    pthread_mutex_lock(&fk_lock);
    if ((p = pool_ok(h)) == NULL)
        rc = CUDA_ERROR_INVALID_VALUE;
    else
        *flags = (!p->imported && loc->id == p->dev) || (p->access & (1u << loc->id))
                     ? CU_MEM_ACCESS_FLAGS_PROT_READWRITE
                     : CU_MEM_ACCESS_FLAGS_PROT_NONE;
    fk_unlock();
    return rc;
}

/* virtual memory */
static fake_vmem *
vmem_ok(CUmemGenericAllocationHandle h)
{
    fake_vmem *v = (fake_vmem *)(uintptr_t)h;
    if (!fk_known(v) || v->magic != MAGIC_VMEM)
        return NULL;
    if (!v->alive) {
        fk_stale_uses++;
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

CUresult
fake_cuMemAddressReserve(CUdeviceptr *out, size_t size, size_t align, CUdeviceptr addr,
                         unsigned long long flags)
{
    CUresult rc = fk_enter(F_cuMemAddressReserve);
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
    pthread_mutex_lock(&fk_lock);
    r->next = reservations;
    reservations = r;
    fk_live_reservations++;
    fk_unlock();
    *out = (CUdeviceptr)r->base;
    return CUDA_SUCCESS;
}

CUresult
fake_cuMemAddressFree(CUdeviceptr p, size_t size)
{
    CUresult rc = fk_enter(F_cuMemAddressFree);
    fake_range *r, *m;
    if (rc)
        return rc;
    pthread_mutex_lock(&fk_lock);
    r = range_find(reservations, (uintptr_t)p);
    if (r == NULL || r->base != (uintptr_t)p || r->size != size) {
        fk_stale_uses++;
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
    fk_live_reservations--;
done:
    fk_unlock();
    return rc;
}

CUresult
fake_cuMemCreate(CUmemGenericAllocationHandle *out, size_t size, const CUmemAllocationProp *prop,
                 unsigned long long flags)
{
    CUresult rc = fk_enter(F_cuMemCreate);
    fake_vmem *v;
    void *m;
    int fd;
    if (rc)
        return rc;
    fk_pause_here(); /* fakecuda_delay: a long creation (the GIL released) */
    if (out == NULL || prop == NULL || size == 0 || size % VMM_GRAN || flags != 0
        || prop->type != CU_MEM_ALLOCATION_TYPE_PINNED
        || prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE
        || (prop->requestedHandleTypes != CU_MEM_HANDLE_TYPE_NONE
            && prop->requestedHandleTypes != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR))
        return CUDA_ERROR_INVALID_VALUE;
    if (!fk_dev_ok(prop->location.id))
        return CUDA_ERROR_INVALID_DEVICE;
    pthread_mutex_lock(&fk_lock);
    if (size > fk_dev_memory - fk_dev_used[prop->location.id]) {
        fk_unlock();
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    fk_unlock();
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
    pthread_mutex_lock(&fk_lock);
    fk_remember(v);
    v->next_all = all_vmem;
    all_vmem = v;
    fk_live_vmem++;
    fk_dev_used[v->dev] += size;
    fk_unlock();
    *out = (CUmemGenericAllocationHandle)(uintptr_t)v;
    return CUDA_SUCCESS;
}

CUresult
fake_cuMemRelease(CUmemGenericAllocationHandle h)
{
    CUresult rc = fk_enter(F_cuMemRelease);
    fake_vmem *v;
    if (rc)
        return rc;
    pthread_mutex_lock(&fk_lock);
    if ((v = vmem_ok(h)) == NULL) {
        rc = CUDA_ERROR_INVALID_VALUE;
    } else {
        v->alive = 0;
        close(v->fd);
        v->fd = -1;
        fk_live_vmem--;
        fk_dev_used[v->dev] -= v->size;
    }
    fk_unlock();
    return rc;
}

CUresult
fake_cuMemMap(CUdeviceptr p, size_t size, size_t offset, CUmemGenericAllocationHandle h,
              unsigned long long flags)
{
    CUresult rc = fk_enter(F_cuMemMap);
    fake_range *r, *m;
    fake_vmem *v;
    uintptr_t at = (uintptr_t)p;
    if (rc)
        return rc;
    if (size == 0 || size % VMM_GRAN || offset % VMM_GRAN || flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&fk_lock);
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
    fk_unlock();
    return rc;
}

CUresult
fake_cuMemSetAccess(CUdeviceptr p, size_t size, const CUmemAccessDesc *desc, size_t count)
{
    CUresult rc = fk_enter(F_cuMemSetAccess);
    uintptr_t at = (uintptr_t)p, end = at + size;
    fake_range *m;
    size_t i;
    if (rc)
        return rc;
    if (desc == NULL || count == 0 || size == 0)
        return CUDA_ERROR_INVALID_VALUE;
    for (i = 0; i < count; i++)
        if (desc[i].location.type != CU_MEM_LOCATION_TYPE_DEVICE || !fk_dev_ok(desc[i].location.id))
            return CUDA_ERROR_INVALID_DEVICE;
    pthread_mutex_lock(&fk_lock);
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
            && (m->access = fk_add_alloc((void *)m->base, m->size, K_VMM, 0, NULL)) == NULL) {
            rc = CUDA_ERROR_OUT_OF_MEMORY;
            goto done;
        }
        i = m->base + m->size;
    }
done:
    fk_unlock();
    return rc;
}

CUresult
fake_cuMemUnmap(CUdeviceptr p, size_t size)
{
    CUresult rc = fk_enter(F_cuMemUnmap);
    uintptr_t at = (uintptr_t)p, end = at + size, i;
    fake_range *m;
    if (rc)
        return rc;
    pthread_mutex_lock(&fk_lock);
    for (i = at; i < end;) { /* whole mappings only */
        m = range_find(mappings, i);
        if (m == NULL || m->base != i || m->base + m->size > end) {
            fk_stale_uses++;
            rc = CUDA_ERROR_INVALID_VALUE;
            goto done;
        }
        i = m->base + m->size;
    }
    for (i = at; i < end;) {
        m = range_find(mappings, i);
        i = m->base + m->size;
        if (m->access != NULL)
            fk_drop_alloc(m->access);
        mmap((void *)m->base, m->size, PROT_NONE,
             MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
        range_unlink(&mappings, m);
        free(m);
    }
done:
    fk_unlock();
    return rc;
}

CUresult
fake_cuMemGetAllocationGranularity(size_t *out, const CUmemAllocationProp *prop,
                                   CUmemAllocationGranularity_flags option)
{
    CUresult rc = fk_enter(F_cuMemGetAllocationGranularity);
    if (rc)
        return rc;
    if (out == NULL || prop == NULL || prop->type != CU_MEM_ALLOCATION_TYPE_PINNED)
        return CUDA_ERROR_INVALID_VALUE;
    if (prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE || !fk_dev_ok(prop->location.id))
        return CUDA_ERROR_INVALID_DEVICE;
    (void)option;
    *out = VMM_GRAN;
    return CUDA_SUCCESS;
}

CUresult
fake_cuMemExportToShareableHandle(void *out, CUmemGenericAllocationHandle h,
                                  CUmemAllocationHandleType type, unsigned long long flags)
{
    CUresult rc = fk_enter(F_cuMemExportToShareableHandle);
    fake_vmem *v;
    if (rc)
        return rc;
    if (out == NULL || flags != 0 || type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&fk_lock);
    if ((v = vmem_ok(h)) == NULL || !v->shareable)
        rc = CUDA_ERROR_INVALID_VALUE;
    else if ((*(int *)out = fcntl(v->fd, F_DUPFD_CLOEXEC, 0)) < 0)
        rc = CUDA_ERROR_OPERATING_SYSTEM;
    fk_unlock();
    return rc;
}

CUresult
fake_cuMemImportFromShareableHandle(CUmemGenericAllocationHandle *out, void *handle,
                                    CUmemAllocationHandleType type)
{
    CUresult rc = fk_enter(F_cuMemImportFromShareableHandle);
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
    pthread_mutex_lock(&fk_lock);
    fk_remember(v);
    v->next_all = all_vmem;
    all_vmem = v;
    fk_live_vmem++;
    fk_dev_used[v->dev] += v->size;
    fk_unlock();
    *out = (CUmemGenericAllocationHandle)(uintptr_t)v;
    return CUDA_SUCCESS;
}
