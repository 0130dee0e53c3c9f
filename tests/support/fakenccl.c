/* A stand-in for libnccl.so.2, for tests without a GPU (tests/support/
 * fakenccl.py builds it; pygpu.nccl loads it through PYGPU_NCCL).
 *
 * Memory is the driver stand-in's, i.e. host memory, so the collectives
 * really run: a communicator made with fake_comm_new(nranks, rank, device)
 * plays one rank, and the other ranks' data is one host buffer set with
 * fake_set_peer() (every other rank holds the same).  Each call is recorded
 * in fake_last (and counted); fake_fail(code, message) makes the next call
 * fail with that result and ncclGetLastError's message.  fake_set_device(
 * set_current, ctx) makes every later call do what NCCL's cudaSetDevice
 * does to the calling thread: set_current(ctx) (the driver stand-in's
 * cuCtxSetCurrent), so the tests see pygpu put the thread's context back. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    int nranks, rank, device, magic;
} fake_comm;
#define MAGIC 0x6e63636c

typedef struct {
    char name[32];
    const void *send;
    void *recv;
    size_t count;
    int type, op, root;
    void *comm, *stream;
    int group_depth;
} fake_call;

fake_call fake_last;
int fake_ncalls;
int fake_group_depth;
int fake_group_calls; /* ncclGroupEnd calls */
static int fail_code;
static char last_error[256];
static const void *peer;       /* the other ranks' data (host memory) */
unsigned char fake_sent[4096]; /* what the last ncclSend sent (its first 4 KiB) */
static int (*set_current)(void *); /* fake_set_device: cuCtxSetCurrent, or NULL */
static void *device_ctx;

void *
fake_comm_new(int nranks, int rank, int device)
{
    fake_comm *c = calloc(1, sizeof *c);
    c->nranks = nranks;
    c->rank = rank;
    c->device = device;
    c->magic = MAGIC;
    return c;
}

void
fake_comm_free(void *c)
{
    free(c);
}

void
fake_set_peer(const void *p)
{
    peer = p;
}

void
fake_set_device(int (*fn)(void *), void *ctx)
{
    set_current = fn;
    device_ctx = ctx;
}

void
fake_fail(int code, const char *message)
{
    fail_code = code;
    snprintf(last_error, sizeof last_error, "%s", message ? message : "");
}

static int
enter(const char *name, const void *send, void *recv, size_t count, int type, int op, int root,
      void *comm, void *stream)
{
    int rc;
    snprintf(fake_last.name, sizeof fake_last.name, "%s", name);
    fake_last.send = send;
    fake_last.recv = recv;
    fake_last.count = count;
    fake_last.type = type;
    fake_last.op = op;
    fake_last.root = root;
    fake_last.comm = comm;
    fake_last.stream = stream;
    fake_last.group_depth = fake_group_depth;
    fake_ncalls++;
    if (set_current != NULL)
        (void)set_current(device_ctx); /* NCCL's cudaSetDevice */
    if (comm != NULL && ((fake_comm *)comm)->magic != MAGIC)
        return 4; /* ncclInvalidArgument */
    rc = fail_code;
    fail_code = 0;
    return rc;
}

static size_t
type_size(int t)
{
    static const size_t sizes[] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2, 1, 1};
    return t >= 0 && t < 12 ? sizes[t] : 0;
}

/* out[i] = op(mine[i], the other ranks' [i]) for the types the tests use */
#define REDUCE(T)                                                          \
    {                                                                      \
        const T *a = (const T *)mine, *b = (const T *)other;               \
        T *o = (T *)out;                                                   \
        for (i = 0; i < n; i++) {                                          \
            T x = a[i], y = b[i], acc = x;                                 \
            for (k = 1; k < nranks; k++) {                                 \
                switch (op) {                                              \
                case 0:                                                    \
                case 4: acc = (T)(acc + y); break;                         \
                case 1: acc = (T)(acc * y); break;                         \
                case 2: acc = acc > y ? acc : y; break;                    \
                case 3: acc = acc < y ? acc : y; break;                    \
                }                                                          \
            }                                                              \
            if (op == 4)                                                   \
                acc = (T)(acc / nranks);                                   \
            o[i] = acc;                                                    \
        }                                                                  \
    }

static int
reduce(void *out, const void *mine, const void *other, size_t n, int type, int op, int nranks)
{
    size_t i;
    int k;
    if (other == NULL)
        return 5; /* ncclInvalidUsage: fake_set_peer() first */
    switch (type) {
    case 2: REDUCE(int32_t) break;
    case 4: REDUCE(int64_t) break;
    case 7: REDUCE(float) break;
    case 8: REDUCE(double) break;
    default: return 4;
    }
    return 0;
}

int
ncclGetVersion(int *v)
{
    *v = 23203;
    return 0;
}

const char *
ncclGetErrorString(int rc)
{
    switch (rc) {
    case 0: return "no error";
    case 2: return "unhandled system error";
    case 4: return "invalid argument";
    case 5: return "invalid usage";
    case 6: return "remote process exited or there was a network error";
    }
    return "unknown result code";
}

const char *
ncclGetLastError(void *comm)
{
    (void)comm;
    return last_error;
}

int
ncclCommCount(void *comm, int *n)
{
    *n = ((fake_comm *)comm)->nranks;
    return 0;
}

int
ncclCommUserRank(void *comm, int *r)
{
    *r = ((fake_comm *)comm)->rank;
    return 0;
}

int
ncclCommCuDevice(void *comm, int *d)
{
    *d = ((fake_comm *)comm)->device;
    return 0;
}

int
ncclGroupStart(void)
{
    fake_group_depth++;
    return 0;
}

int
ncclGroupEnd(void)
{
    int rc = enter("ncclGroupEnd", NULL, NULL, 0, -1, -1, -1, NULL, NULL);
    fake_group_depth--;
    fake_group_calls++;
    return rc;
}

int
ncclAllReduce(const void *s, void *r, size_t n, int t, int op, void *comm, void *stream)
{
    int rc = enter("ncclAllReduce", s, r, n, t, op, -1, comm, stream);
    return rc ? rc : reduce(r, s, peer, n, t, op, ((fake_comm *)comm)->nranks);
}

int
ncclReduce(const void *s, void *r, size_t n, int t, int op, int root, void *comm, void *stream)
{
    fake_comm *c = comm;
    int rc = enter("ncclReduce", s, r, n, t, op, root, comm, stream);
    if (rc || c->rank != root)
        return rc;
    return reduce(r, s, peer, n, t, op, c->nranks);
}

int
ncclBroadcast(const void *s, void *r, size_t n, int t, int root, void *comm, void *stream)
{
    fake_comm *c = comm;
    int rc = enter("ncclBroadcast", s, r, n, t, -1, root, comm, stream);
    if (rc)
        return rc;
    if (c->rank == root)
        memmove(r, s, n * type_size(t));
    else if (peer != NULL)
        memcpy(r, peer, n * type_size(t));
    return 0;
}

int
ncclAllGather(const void *s, void *r, size_t n, int t, void *comm, void *stream)
{
    fake_comm *c = comm;
    size_t b = n * type_size(t);
    int k, rc = enter("ncclAllGather", s, r, n, t, -1, -1, comm, stream);
    if (rc)
        return rc;
    for (k = 0; k < c->nranks; k++) {
        if (k == c->rank)
            memmove((char *)r + k * b, s, b);
        else if (peer != NULL)
            memcpy((char *)r + k * b, peer, b);
    }
    return 0;
}

int
ncclReduceScatter(const void *s, void *r, size_t n, int t, int op, void *comm, void *stream)
{
    fake_comm *c = comm;
    size_t off = (size_t)c->rank * n * type_size(t);
    int rc = enter("ncclReduceScatter", s, r, n, t, op, -1, comm, stream);
    if (rc)
        return rc;
    return reduce(r, (const char *)s + off, peer ? (const char *)peer + off : NULL, n, t, op,
                  c->nranks);
}

int
ncclSend(const void *s, size_t n, int t, int peer_rank, void *comm, void *stream)
{
    size_t b = n * type_size(t);
    int rc = enter("ncclSend", s, NULL, n, t, -1, peer_rank, comm, stream);
    if (rc)
        return rc;
    memcpy(fake_sent, s, b < sizeof fake_sent ? b : sizeof fake_sent);
    return 0;
}

int
ncclRecv(void *r, size_t n, int t, int peer_rank, void *comm, void *stream)
{
    int rc = enter("ncclRecv", NULL, r, n, t, -1, peer_rank, comm, stream);
    if (rc)
        return rc;
    if (peer != NULL)
        memcpy(r, peer, n * type_size(t));
    return 0;
}
