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

/* The stand-in's files mirror src/'s areas (fakecuda.h: what they share):
 *   fake_core.c     initialization, errors, the accounting of every entry
 *                   point (enter), cuGetProcAddress's table, the controls
 *   fake_device.c   devices, contexts, streams, events, green contexts
 *   fake_memory.c   allocations, host memory, copies, memsets, pointers
 *   fake_ipc.c      IPC handles, memory pools, virtual memory
 *   fake_compile.c  modules (the PTX reader), the JIT linker
 *   fake_launch.c   functions, launches, occupancy
 *   fake_graph.c    graphs, nodes, instantiation, replay
 *   fake_capture.c  stream capture
 *   fake_texture.c  CUDA arrays, texture and surface objects, tensor maps
 *   fake_interop.c  the profiler, OpenGL interop, process checkpoint
 * They are built into the one libfakecuda.so with -fvisibility=hidden: only
 * the driver's exported entry points (cuInit, cuGetProcAddress_v2...) and the
 * controls (fakecuda_*) are EXPORT; what the files share is fk_-prefixed
 * and hidden. */
#ifndef FAKECUDA_H
#define FAKECUDA_H

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

/* everything declared below is internal to the library */
#pragma GCC visibility push(hidden)

#define EXPORT __attribute__((visibility("default")))
#define MAXDEV 8
#define MAXPARAMS 512
#define STACK_DEPTH 64

/* ---- entry point indices ---- */
#define AS_INDEX(name, version, cls) F_##name,
enum { PYGPU_CUDA_API(AS_INDEX, AS_INDEX) F_COUNT };
#undef AS_INDEX

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

/* the legacy default stream (which waits for every blocking stream) */
#define IS_LEGACY(s) ((s) == NULL || (s) == CU_STREAM_LEGACY)

/* a CUdeviceptr as a host pointer (device memory is host memory here) */
#define DPTR(d) ((void *)(uintptr_t)(d))

/* ---- CUDA arrays (fake_texture.c) ---- */
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

/* ---- graphs (fake_graph.c, fake_capture.c) ---- */
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

/* ---- fake_core.c: the state (fk_lock guards all of it), the accounting ---- */
extern pthread_mutex_t fk_lock;
extern int fk_ndev;
extern size_t fk_dev_memory;
extern size_t fk_dev_used[MAXDEV];
extern int fk_cc_major, fk_cc_minor;
extern fake_ctx *fk_primary_ctx[MAXDEV];
extern fake_alloc *fk_allocs;
extern struct fake_stream *fk_all_streams;
extern struct fake_event *fk_all_events;
extern struct fake_module *fk_all_modules;
extern long fk_live_ctx, fk_live_streams, fk_live_events, fk_live_modules, fk_live_host,
    fk_live_registered, fk_live_device, fk_live_managed, fk_stale_uses, fk_launches, fk_reaped;
struct fk_launch_record {
    char name[256];
    unsigned grid[3], block[3], shared;
    CUstream stream;
    unsigned char params[4096];
    size_t size;
    int cooperative, pdl;
    unsigned cluster[3];
};
extern struct fk_launch_record fk_last_launch;
/* the parameter bytes of this thread's last launch (concurrent launch tests) */
struct fk_thread_params {
    unsigned char params[4096];
    size_t size;
};
extern __thread struct fk_thread_params fk_thread_last;
extern __thread fake_ctx *fk_ctx_stack[STACK_DEPTH];
extern __thread int fk_ctx_depth;
void fk_remember(const void *h);
int fk_known(const void *h);
CUresult fk_enter(int fn);
void fk_unlock(void);
void fk_pause_here(void);

/* ---- fake_device.c ---- */
fake_ctx *fk_current(void);
fake_ctx *fk_need_ctx(CUresult *rc);
int fk_ctx_ok(fake_ctx *c);
CUresult fk_check_stream(CUstream s, fake_ctx *c);
double fk_now_ms(void);
int fk_dev_ok(CUdevice d);
int fk_attribute(CUdevice_attribute a, CUdevice d);
fake_stream *fk_real_stream(CUstream h, CUresult *rc);
fake_event *fk_event_ok(CUevent h);
extern long fk_live_green;

/* ---- fake_memory.c ---- */
fake_alloc *fk_find_alloc(uintptr_t p, size_t n);
int fk_device_range_ok(CUdeviceptr p, size_t n);
fake_alloc *fk_add_alloc(void *base, size_t size, int kind, unsigned flags, fake_ctx *c);
void fk_drop_alloc(fake_alloc *target);
fake_alloc *fk_find_base(uintptr_t p);
void *fk_fill_alloc(size_t n);
CUresult fk_device_alloc(CUdeviceptr *dptr, size_t n, int kind, unsigned flags);
CUresult fk_free_kind(CUdeviceptr d, int host_side);
CUresult fk_copy(void *dst, const void *src, size_t n, int dst_dev, int src_dev, CUstream s,
                 int check_s);

/* ---- fake_ipc.c ---- */
extern long fk_live_ipc, fk_live_pools, fk_live_vmem, fk_live_reservations;

/* ---- fake_compile.c ---- */
void fk_module_free(fake_module *m);
int fk_module_ok(fake_module *m);
extern long fk_live_links;

/* ---- fake_launch.c ---- */
fake_func *fk_func_ok(CUfunction h);

/* ---- fake_graph.c ---- */
extern long fk_live_graphs, fk_live_execs;
extern int fk_captures_active;
fake_graph *fk_graph_new(fake_ctx *c, int sub);
fake_node *fk_node_add(fake_graph *g, int type, const CUgraphNode *deps, size_t ndeps,
                       CUresult *rc);
CUresult fk_node_params(fake_node *n, fake_func *f, void **params, void **extra);
void fk_graph_kill(fake_graph *g);
CUresult fk_node_alloc(fake_node *n, size_t bytes);

/* ---- fake_capture.c ---- */
fake_stream *fk_cap_stream(CUstream s);
fake_node *fk_cap_node(fake_stream *st, int type, CUresult *rc);
CUresult fk_cap_violation(fake_ctx *c, CUresult code);
CUresult fk_cap_unsafe(void);
void fk_cap_memcpy(fake_node *n, void *dst, const void *src, size_t len, int dd, int sd);
void fk_cap_memcpy_pitched(fake_node *n, unsigned char *dst, const unsigned char *src, size_t width,
                           size_t rows, size_t depth, size_t dpitch, size_t spitch, size_t dslice,
                           size_t sslice);
void fk_cap_memset(fake_node *n, CUdeviceptr d, unsigned v, size_t count, unsigned width);
CUresult fk_cap_kernel(fake_node *n, fake_func *f, const unsigned grid[3], const unsigned block[3],
                       unsigned shared, void **params, void **extra);
CUresult fk_cap_alloc(fake_node *n, size_t bytes, CUdeviceptr *out);
void fk_cap_dptr(fake_node *n, CUdeviceptr d);
void fk_cap_event(fake_node *n, fake_event *e);
void fk_cap_end_on_destroy(fake_stream *s);

/* ---- fake_texture.c ---- */
extern long fk_live_arrays, fk_live_textures, fk_live_surfaces;
void fk_reap_arrays(fake_ctx *c);
CUresult fk_array_create(CUarray *out, const CUDA_ARRAY3D_DESCRIPTOR *d);
void fk_array_release(fake_array *a);

/* ---- fake_interop.c ---- */
extern int fk_profiler_on;

/* ---- the entry points (cuGetProcAddress's table, fake_core.c): fake_<name>
 * for each name of cuda_api.h, of the type of PFN_<name>_v<version> ---- */
#define FK_DECLARE(name, version, cls) extern __typeof__(*(PFN_##name##_v##version)0) fake_##name;
PYGPU_CUDA_API(FK_DECLARE, FK_DECLARE)
#undef FK_DECLARE

#pragma GCC visibility pop
#endif /* FAKECUDA_H */
