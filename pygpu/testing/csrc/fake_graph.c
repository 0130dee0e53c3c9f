/* fakecuda: graphs: nodes, instantiation, updates, replay.
 * fakecuda.h describes the stand-in and its files. */
#include "fakecuda.h"

/* ---- graphs: host-side node lists; capture records a stream's work as
 * nodes; launching a GraphExec replays them (copies and memsets move bytes,
 * kernel nodes are recorded like launches and logged, host nodes run) ---- */
long fk_live_graphs, fk_live_execs;
static unsigned cond_value[MAXCOND], cond_default[MAXCOND];
static int cond_assign[MAXCOND], cond_count;
static char *replay_log;
static size_t replay_len, replay_cap;
int fk_captures_active;

static fake_graph *
graph_ok(CUgraph h)
{
    fake_graph *g = (fake_graph *)h;
    if (!fk_known(g) || g->magic != MAGIC_GRAPH)
        return NULL;
    if (!g->alive) {
        fk_stale_uses++;
        return NULL;
    }
    return g;
}

static fake_node *
node_ok(CUgraphNode h)
{
    fake_node *n = (fake_node *)h;
    if (!fk_known(n) || n->magic != MAGIC_NODE)
        return NULL;
    if (!n->alive) {
        fk_stale_uses++;
        return NULL;
    }
    return n;
}

static fake_exec *
exec_ok(CUgraphExec h)
{
    fake_exec *e = (fake_exec *)h;
    if (!fk_known(e) || e->magic != MAGIC_EXEC)
        return NULL;
    if (!e->alive) {
        fk_stale_uses++;
        return NULL;
    }
    return e;
}

fake_graph *
fk_graph_new(fake_ctx *c, int sub)
{
    fake_graph *g = calloc(1, sizeof *g);
    if (g == NULL)
        return NULL;
    g->magic = MAGIC_GRAPH;
    g->alive = 1;
    g->ctx = c;
    g->sub = sub;
    fk_remember(g);
    if (!sub)
        fk_live_graphs++;
    return g;
}

/* a new node of g after deps (checked to be g's); lock held */
fake_node *
fk_node_add(fake_graph *g, int type, const CUgraphNode *deps, size_t ndeps, CUresult *rc)
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
    fk_remember(n);
    *rc = CUDA_SUCCESS;
    return n;
}

/* kernel parameters into a node; lock held */
CUresult
fk_node_params(fake_node *n, fake_func *f, void **params, void **extra)
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

static void
node_kill(fake_node *n)
{
    unsigned i;
    n->alive = 0;
    if (n->child)
        fk_graph_kill(n->child);
    for (i = 0; i < n->csize && i < 16; i++)
        if (n->bodies[i])
            fk_graph_kill(n->bodies[i]);
}

/* mark g and its nodes dead (handles are never freed); the memory of its
 * own mem-alloc nodes is freed.  Lock held. */
void
fk_graph_kill(fake_graph *g)
{
    fake_node *n;
    if (!g->alive)
        return;
    g->alive = 0;
    if (!g->sub)
        fk_live_graphs--;
    for (n = g->first; n != NULL; n = n->next) {
        if (n->type == CU_GRAPH_NODE_TYPE_MEM_ALLOC && n->orig == NULL && n->dptr) {
            fake_alloc *a = fk_find_base((uintptr_t)n->dptr);
            if (a != NULL && a->kind == K_ASYNC)
                fk_drop_alloc(a);
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
    fake_graph *c = fk_graph_new(g->ctx, sub);
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
        fk_remember(m);
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
        fk_stale_uses++; /* the module was unloaded under the graph */
        return;
    }
    memcpy(fk_last_launch.params, n->params, n->psize);
    snprintf(fk_last_launch.name, sizeof fk_last_launch.name, "%s", n->func->name);
    memcpy(fk_last_launch.grid, n->grid, sizeof fk_last_launch.grid);
    memcpy(fk_last_launch.block, n->block, sizeof fk_last_launch.block);
    memset(fk_last_launch.cluster, 0, sizeof fk_last_launch.cluster);
    fk_last_launch.shared = n->shared;
    fk_last_launch.stream = s;
    fk_last_launch.size = n->psize;
    fk_last_launch.cooperative = fk_last_launch.pdl = 0;
    memcpy(fk_thread_last.params, n->params, n->psize);
    fk_thread_last.size = n->psize;
    fk_launches++;
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
            } else if ((n->dst_dev && !fk_device_range_ok((CUdeviceptr)(uintptr_t)n->dst, n->n))
                       || (n->src_dev && !fk_device_range_ok((CUdeviceptr)(uintptr_t)n->src, n->n)))
                fk_stale_uses++; /* device memory freed under the graph */
            else
                memmove(n->dst, n->src, n->n);
            break;
        case CU_GRAPH_NODE_TYPE_MEMSET: {
            size_t r, i;
            if (!fk_device_range_ok(n->mdst, n->pitch * (n->height - 1) + n->width * n->esize)) {
                fk_stale_uses++;
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
            fk_unlock();
            n->fn(n->user);
            pthread_mutex_lock(&fk_lock);
            break;
        case CU_GRAPH_NODE_TYPE_EVENT_RECORD:
            n->event->recorded = 1;
            n->event->t = fk_now_ms();
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

CUresult
fake_cuGraphCreate(CUgraph *out, unsigned int flags)
{
    CUresult rc = fk_enter(F_cuGraphCreate);
    fake_ctx *c;
    fake_graph *g;
    if (rc)
        return rc;
    if (out == NULL || flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&fk_lock);
    if ((c = fk_need_ctx(&rc)) != NULL) {
        if ((g = fk_graph_new(c, 0)) == NULL)
            rc = CUDA_ERROR_OUT_OF_MEMORY;
        else
            *out = (CUgraph)g;
    }
    fk_unlock();
    return rc;
}

CUresult
fake_cuGraphDestroy(CUgraph h)
{
    CUresult rc = fk_enter(F_cuGraphDestroy);
    fake_graph *g;
    if (rc)
        return rc;
    pthread_mutex_lock(&fk_lock);
    if ((g = graph_ok(h)) == NULL || g->sub)
        rc = CUDA_ERROR_INVALID_VALUE;
    else
        fk_graph_kill(g);
    fk_unlock();
    return rc;
}

/* the common start of cuGraphAdd*Node: checks, then a node; lock taken */
static fake_node *
add_start(int fn, CUgraphNode *out, CUgraph h, const CUgraphNode *deps, size_t nd, int type,
          CUresult *rc)
{
    fake_graph *g;
    fake_node *n;
    *rc = fk_enter(fn);
    if (*rc)
        return NULL;
    if (out == NULL) {
        *rc = CUDA_ERROR_INVALID_VALUE;
        return NULL;
    }
    pthread_mutex_lock(&fk_lock);
    if ((g = graph_ok(h)) == NULL) {
        *rc = CUDA_ERROR_INVALID_VALUE;
        fk_unlock();
        return NULL;
    }
    n = fk_node_add(g, type, deps, nd, rc);
    if (n == NULL) {
        fk_unlock();
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
    fk_unlock();
}

CUresult
fake_cuGraphAddKernelNode(CUgraphNode *out, CUgraph h, const CUgraphNode *deps, size_t nd,
                          const CUDA_KERNEL_NODE_PARAMS_v1 *p)
{
    CUresult rc;
    fake_node *n =
        add_start(F_cuGraphAddKernelNode, out, h, deps, nd, CU_GRAPH_NODE_TYPE_KERNEL, &rc);
    fake_func *f;
    if (n == NULL)
        return rc;
    if (p == NULL || (f = fk_func_ok(p->func)) == NULL || f->module->ctx != n->graph->ctx
        || !p->gridDimX || !p->gridDimY || !p->gridDimZ || !p->blockDimX || !p->blockDimY
        || !p->blockDimZ
        || (unsigned long long)p->blockDimX * p->blockDimY * p->blockDimZ > (unsigned)f->maxntid
        || (rc = fk_node_params(n, f, p->kernelParams, p->extra)) != CUDA_SUCCESS) {
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
    fk_unlock();
    return CUDA_SUCCESS;
}

CUresult
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
            && !fk_device_range_ok(p->dstDevice, p->WidthInBytes))
        || (p->srcMemoryType == CU_MEMORYTYPE_DEVICE
            && !fk_device_range_ok(p->srcDevice, p->WidthInBytes))) {
        add_undo(n, out);
        return CUDA_ERROR_INVALID_VALUE;
    }
    n->dst_dev = p->dstMemoryType == CU_MEMORYTYPE_DEVICE;
    n->src_dev = p->srcMemoryType == CU_MEMORYTYPE_DEVICE;
    n->dst = n->dst_dev ? (void *)(uintptr_t)p->dstDevice : p->dstHost;
    n->src = n->src_dev ? (const void *)(uintptr_t)p->srcDevice : p->srcHost;
    n->n = p->WidthInBytes;
    fk_unlock();
    return CUDA_SUCCESS;
}

CUresult
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
        || !fk_device_range_ok(p->dst, p->pitch * (p->height - 1) + p->width * p->elementSize)) {
        add_undo(n, out);
        return CUDA_ERROR_INVALID_VALUE;
    }
    n->mdst = p->dst;
    n->value = p->value;
    n->esize = p->elementSize;
    n->width = p->width;
    n->height = p->height;
    n->pitch = p->pitch;
    fk_unlock();
    return CUDA_SUCCESS;
}

CUresult
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
    fk_unlock();
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

CUresult
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
    fk_unlock();
    return CUDA_SUCCESS;
}

CUresult
fake_cuGraphAddEmptyNode(CUgraphNode *out, CUgraph h, const CUgraphNode *deps, size_t nd)
{
    CUresult rc;
    fake_node *n =
        add_start(F_cuGraphAddEmptyNode, out, h, deps, nd, CU_GRAPH_NODE_TYPE_EMPTY, &rc);
    if (n == NULL)
        return rc;
    fk_unlock();
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
    if ((n->event = fk_event_ok(ev)) == NULL) {
        add_undo(n, out);
        return CUDA_ERROR_INVALID_HANDLE;
    }
    fk_unlock();
    return CUDA_SUCCESS;
}

CUresult
fake_cuGraphAddEventRecordNode(CUgraphNode *out, CUgraph h, const CUgraphNode *deps, size_t nd,
                               CUevent ev)
{
    return add_event(F_cuGraphAddEventRecordNode, CU_GRAPH_NODE_TYPE_EVENT_RECORD, out, h, deps, nd,
                     ev);
}

CUresult
fake_cuGraphAddEventWaitNode(CUgraphNode *out, CUgraph h, const CUgraphNode *deps, size_t nd,
                             CUevent ev)
{
    return add_event(F_cuGraphAddEventWaitNode, CU_GRAPH_NODE_TYPE_WAIT_EVENT, out, h, deps, nd,
                     ev);
}

/* memory of a mem-alloc node: real (host) memory from now on, freed with
 * the graph; lock held */
CUresult
fk_node_alloc(fake_node *n, size_t bytes)
{
    void *p;
    fake_ctx *c = n->graph->ctx;
    if (bytes == 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (bytes > fk_dev_memory - fk_dev_used[c->dev] || (p = fk_fill_alloc(bytes)) == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    if (fk_add_alloc(p, bytes, K_ASYNC, 0, c) == NULL) {
        free(p);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    n->dptr = (CUdeviceptr)(uintptr_t)p;
    n->bytes = bytes;
    return CUDA_SUCCESS;
}

CUresult
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
        || (rc = fk_node_alloc(n, p->bytesize)) != CUDA_SUCCESS) {
        add_undo(n, out);
        return rc ? rc : CUDA_ERROR_INVALID_VALUE;
    }
    p->dptr = n->dptr;
    fk_unlock();
    return CUDA_SUCCESS;
}

CUresult
fake_cuGraphAddMemFreeNode(CUgraphNode *out, CUgraph h, const CUgraphNode *deps, size_t nd,
                           CUdeviceptr d)
{
    CUresult rc;
    fake_node *n =
        add_start(F_cuGraphAddMemFreeNode, out, h, deps, nd, CU_GRAPH_NODE_TYPE_MEM_FREE, &rc);
    fake_alloc *a;
    if (n == NULL)
        return rc;
    a = fk_find_base((uintptr_t)d);
    if (a == NULL || a->kind != K_ASYNC) {
        add_undo(n, out);
        return CUDA_ERROR_INVALID_VALUE;
    }
    n->dptr = d;
    fk_unlock();
    return CUDA_SUCCESS;
}

CUresult
fake_cuGraphAddDependencies(CUgraph h, const CUgraphNode *from, const CUgraphNode *to, size_t n)
{
    CUresult rc = fk_enter(F_cuGraphAddDependencies);
    fake_graph *g;
    size_t i;
    if (rc)
        return rc;
    if (n > 0 && (from == NULL || to == NULL))
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&fk_lock);
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
    fk_unlock();
    return rc;
}

CUresult
fake_cuGraphGetNodes(CUgraph h, CUgraphNode *nodes, size_t *n)
{
    CUresult rc = fk_enter(F_cuGraphGetNodes);
    fake_graph *g;
    fake_node *x;
    size_t i = 0;
    if (rc)
        return rc;
    if (n == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&fk_lock);
    if ((g = graph_ok(h)) == NULL) {
        rc = CUDA_ERROR_INVALID_VALUE;
    } else if (nodes == NULL) {
        *n = (size_t)g->count;
    } else {
        for (x = g->first; x != NULL && i < *n; x = x->next)
            nodes[i++] = (CUgraphNode)x;
        *n = i;
    }
    fk_unlock();
    return rc;
}

CUresult
fake_cuGraphNodeGetType(CUgraphNode h, CUgraphNodeType *t)
{
    CUresult rc = fk_enter(F_cuGraphNodeGetType);
    fake_node *n;
    if (rc)
        return rc;
    pthread_mutex_lock(&fk_lock);
    if (t == NULL || (n = node_ok(h)) == NULL)
        rc = CUDA_ERROR_INVALID_VALUE;
    else
        *t = (CUgraphNodeType)n->type;
    fk_unlock();
    return rc;
}

CUresult
fake_cuGraphNodeGetDependencies(CUgraphNode h, CUgraphNode *deps, size_t *nd)
{
    CUresult rc = fk_enter(F_cuGraphNodeGetDependencies);
    fake_node *n;
    int i;
    if (rc)
        return rc;
    pthread_mutex_lock(&fk_lock);
    if (nd == NULL || (n = node_ok(h)) == NULL) {
        rc = CUDA_ERROR_INVALID_VALUE;
    } else if (deps == NULL) {
        *nd = (size_t)n->ndeps;
    } else {
        for (i = 0; i < n->ndeps && (size_t)i < *nd; i++)
            deps[i] = (CUgraphNode)n->deps[i];
        *nd = (size_t)i;
    }
    fk_unlock();
    return rc;
}

CUresult
fake_cuGraphKernelNodeGetParams(CUgraphNode h, CUDA_KERNEL_NODE_PARAMS_v1 *p)
{
    CUresult rc = fk_enter(F_cuGraphKernelNodeGetParams);
    fake_node *n;
    if (rc)
        return rc;
    pthread_mutex_lock(&fk_lock);
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
    fk_unlock();
    return rc;
}

CUresult
fake_cuGraphInstantiateWithFlags(CUgraphExec *out, CUgraph h, unsigned long long flags)
{
    CUresult rc = fk_enter(F_cuGraphInstantiateWithFlags);
    fake_graph *g;
    fake_exec *e;
    if (rc)
        return rc;
    if (out == NULL || (flags & ~0xfULL))
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&fk_lock);
    if ((g = graph_ok(h)) == NULL || g->sub) {
        rc = CUDA_ERROR_INVALID_VALUE;
    } else if ((e = calloc(1, sizeof *e)) == NULL || (e->g = graph_copy(g, 1)) == NULL) {
        rc = CUDA_ERROR_OUT_OF_MEMORY;
    } else {
        e->magic = MAGIC_EXEC;
        e->alive = 1;
        e->src = g;
        fk_remember(e);
        fk_live_execs++;
        *out = (CUgraphExec)e;
    }
    fk_unlock();
    return rc;
}

CUresult
fake_cuGraphExecDestroy(CUgraphExec h)
{
    CUresult rc = fk_enter(F_cuGraphExecDestroy);
    fake_exec *e;
    if (rc)
        return rc;
    pthread_mutex_lock(&fk_lock);
    if ((e = exec_ok(h)) == NULL) {
        rc = CUDA_ERROR_INVALID_VALUE;
    } else {
        e->alive = 0;
        fk_graph_kill(e->g);
        fk_live_execs--;
    }
    fk_unlock();
    return rc;
}

CUresult
fake_cuGraphLaunch(CUgraphExec h, CUstream s)
{
    CUresult rc = fk_enter(F_cuGraphLaunch);
    fake_exec *e;
    fake_ctx *c;
    int i;
    if (rc)
        return rc;
    pthread_mutex_lock(&fk_lock);
    if ((e = exec_ok(h)) == NULL) {
        rc = CUDA_ERROR_INVALID_VALUE;
    } else if ((c = fk_need_ctx(&rc)) != NULL && (rc = fk_check_stream(s, c)) == CUDA_SUCCESS) {
        if (fk_cap_stream(s) != NULL) {
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
    fk_unlock();
    return rc;
}

CUresult
fake_cuGraphUpload(CUgraphExec h, CUstream s)
{
    CUresult rc = fk_enter(F_cuGraphUpload);
    if (rc)
        return rc;
    pthread_mutex_lock(&fk_lock);
    if (exec_ok(h) == NULL)
        rc = CUDA_ERROR_INVALID_VALUE;
    else
        rc = fk_check_stream(s, NULL);
    fk_unlock();
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

CUresult
fake_cuGraphExecKernelNodeSetParams(CUgraphExec h, CUgraphNode node,
                                    const CUDA_KERNEL_NODE_PARAMS_v1 *p)
{
    CUresult rc = fk_enter(F_cuGraphExecKernelNodeSetParams);
    fake_exec *e;
    fake_node *n, *c;
    fake_func *f;
    if (rc)
        return rc;
    pthread_mutex_lock(&fk_lock);
    if (p == NULL || (e = exec_ok(h)) == NULL || (n = node_ok(node)) == NULL
        || n->type != CU_GRAPH_NODE_TYPE_KERNEL || (c = find_copy(e->g, n)) == NULL
        || (f = fk_func_ok(p->func)) == NULL || f->module->ctx != c->func->module->ctx
        || !p->gridDimX || !p->gridDimY || !p->gridDimZ || !p->blockDimX || !p->blockDimY
        || !p->blockDimZ) {
        rc = CUDA_ERROR_INVALID_VALUE;
    } else if ((rc = fk_node_params(c, f, p->kernelParams, p->extra)) == CUDA_SUCCESS) {
        c->grid[0] = p->gridDimX;
        c->grid[1] = p->gridDimY;
        c->grid[2] = p->gridDimZ;
        c->block[0] = p->blockDimX;
        c->block[1] = p->blockDimY;
        c->block[2] = p->blockDimZ;
        c->shared = p->sharedMemBytes;
    }
    fk_unlock();
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
map_orig(fake_graph *fk_copy, fake_graph *src)
{
    fake_node *x = fk_copy->first, *y = src->first;
    for (; x != NULL && y != NULL; x = x->next, y = y->next)
        x->orig = y;
}

CUresult
fake_cuGraphExecUpdate(CUgraphExec h, CUgraph hg, CUgraphNode *bad, CUgraphExecUpdateResult *result)
{
    CUresult rc = fk_enter(F_cuGraphExecUpdate);
    fake_exec *e;
    fake_graph *g, *fk_copy;
    fake_node *d;
    CUgraphExecUpdateResult why = CU_GRAPH_EXEC_UPDATE_ERROR;
    if (rc)
        return rc;
    if (bad == NULL || result == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&fk_lock);
    *bad = NULL;
    *result = CU_GRAPH_EXEC_UPDATE_SUCCESS;
    if ((e = exec_ok(h)) == NULL || (g = graph_ok(hg)) == NULL) {
        rc = CUDA_ERROR_INVALID_VALUE;
    } else if ((d = shape_differs(e->src, g, &why)) != NULL
               || (d == NULL && why != CU_GRAPH_EXEC_UPDATE_ERROR)) {
        *bad = (CUgraphNode)d;
        *result = why;
        rc = CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE;
    } else if ((fk_copy = graph_copy(g, 1)) == NULL) {
        rc = CUDA_ERROR_OUT_OF_MEMORY;
    } else {
        map_orig(fk_copy, e->src);
        fk_graph_kill(e->g);
        e->g = fk_copy;
    }
    fk_unlock();
    return rc;
}

CUresult
fake_cuGraphDebugDotPrint(CUgraph h, const char *path, unsigned int flags)
{
    CUresult rc = fk_enter(F_cuGraphDebugDotPrint);
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
    pthread_mutex_lock(&fk_lock);
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
    fk_unlock();
    return rc;
}

CUresult
fake_cuGraphConditionalHandleCreate(CUgraphConditionalHandle *out, CUgraph h, CUcontext ctx,
                                    unsigned int dflt, unsigned int flags)
{
    CUresult rc = fk_enter(F_cuGraphConditionalHandleCreate);
    fake_graph *g;
    if (rc)
        return rc;
    if (out == NULL || (flags & ~(unsigned)CU_GRAPH_COND_ASSIGN_DEFAULT))
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&fk_lock);
    if ((g = graph_ok(h)) == NULL || (fake_ctx *)ctx != g->ctx) {
        rc = CUDA_ERROR_INVALID_VALUE;
    } else if (cond_count >= MAXCOND) {
        rc = CUDA_ERROR_OUT_OF_MEMORY;
    } else {
        cond_default[cond_count] = cond_value[cond_count] = dflt;
        cond_assign[cond_count] = (flags & CU_GRAPH_COND_ASSIGN_DEFAULT) != 0;
        *out = (CUgraphConditionalHandle)(++cond_count);
    }
    fk_unlock();
    return rc;
}

CUresult
fake_cuGraphAddNode(CUgraphNode *out, CUgraph h, const CUgraphNode *deps, size_t nd,
                    CUgraphNodeParams *p)
{
    CUresult rc;
    fake_node *n;
    unsigned k;
    if (p == NULL || p->type != CU_GRAPH_NODE_TYPE_CONDITIONAL) {
        rc = fk_enter(F_cuGraphAddNode);
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
        n->bodies[k] = fk_graph_new(n->graph->ctx, 1);
        if (n->bodies[k] == NULL) {
            add_undo(n, out);
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
        n->bodies[k]->parent = n->graph;
    }
    /* the array belongs to the node, as the driver's does */
    p->conditional.phGraph_out = (CUgraph *)n->bodies;
    fk_unlock();
    return CUDA_SUCCESS;
}

/* tests: set a conditional handle's value (what cudaGraphSetConditional
 * does on a GPU); returns 0, or -1 for an unknown handle */
EXPORT int
fakecuda_set_conditional(unsigned long long handle, unsigned value)
{
    int r = -1;
    pthread_mutex_lock(&fk_lock);
    if (handle >= 1 && handle <= (unsigned long long)cond_count) {
        cond_value[handle - 1] = value;
        r = 0;
    }
    fk_unlock();
    return r;
}

/* tests: the kernels the last cuGraphLaunch replayed, one "name:hexbytes" a
 * line; returns the length */
EXPORT size_t
fakecuda_replay_log(char *buf, size_t cap)
{
    size_t n;
    pthread_mutex_lock(&fk_lock);
    n = replay_len;
    if (buf && cap) {
        size_t k = n < cap - 1 ? n : cap - 1;
        if (replay_log)
            memcpy(buf, replay_log, k);
        buf[k] = '\0';
    }
    fk_unlock();
    return n;
}
