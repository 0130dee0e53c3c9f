/* nvtx_record: a minimal NVTX injection library, the way Nsight Systems
 * attaches to NVTX, for tests/interop/test_profiler.py.
 *
 * NVTX v3 loads the library named by NVTX_INJECTION64_PATH at its first call
 * and calls InitializeInjectionNvtx2, which fills NVTX's function table with
 * the tool's callbacks.  These write one line per event to the file named by
 * NVTX_RECORD_FILE:
 *     domain <name>
 *     push <tid> <domain> <depth> <argb|-> <name>
 *     pop <tid> <domain> <depth>
 *     mark <tid> <domain> <argb|-> <name>
 * <tid> is the kernel thread id (Python's threading.get_native_id()).
 * Built by the test with cc against the NVTX headers pygpu was built with.
 */
#define _GNU_SOURCE
#include <nvtx3/nvToolsExt.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

struct nvtxDomainRegistration_st {
    char name[64];
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static FILE *out;
static __thread int depth;

static const char *
dname(nvtxDomainHandle_t d)
{
    return d ? d->name : "(default)";
}

static void
color(char *buf, size_t n, const nvtxEventAttributes_t *a)
{
    if (a && a->colorType == NVTX_COLOR_ARGB)
        snprintf(buf, n, "%08x", (unsigned)a->color);
    else
        snprintf(buf, n, "-");
}

static const char *
msg(const nvtxEventAttributes_t *a)
{
    return a && a->messageType == NVTX_MESSAGE_TYPE_ASCII && a->message.ascii
           ? a->message.ascii : "(none)";
}

static nvtxDomainHandle_t NVTX_API
rec_domain_create(const char *name)
{
    nvtxDomainHandle_t d = calloc(1, sizeof *d);
    snprintf(d->name, sizeof d->name, "%s", name);
    pthread_mutex_lock(&lock);
    fprintf(out, "domain %s\n", name);
    fflush(out);
    pthread_mutex_unlock(&lock);
    return d;
}

static int NVTX_API
rec_push(nvtxDomainHandle_t d, const nvtxEventAttributes_t *a)
{
    char c[16];
    int level = depth++;
    color(c, sizeof c, a);
    pthread_mutex_lock(&lock);
    fprintf(out, "push %ld %s %d %s %s\n", (long)syscall(SYS_gettid), dname(d), level, c, msg(a));
    fflush(out);
    pthread_mutex_unlock(&lock);
    return level;
}

static int NVTX_API
rec_pop(nvtxDomainHandle_t d)
{
    int level = --depth;
    pthread_mutex_lock(&lock);
    fprintf(out, "pop %ld %s %d\n", (long)syscall(SYS_gettid), dname(d), level);
    fflush(out);
    pthread_mutex_unlock(&lock);
    return level;
}

static void NVTX_API
rec_mark(nvtxDomainHandle_t d, const nvtxEventAttributes_t *a)
{
    char c[16];
    color(c, sizeof c, a);
    pthread_mutex_lock(&lock);
    fprintf(out, "mark %ld %s %s %s\n", (long)syscall(SYS_gettid), dname(d), c, msg(a));
    fflush(out);
    pthread_mutex_unlock(&lock);
}

__attribute__((visibility("default"))) int
InitializeInjectionNvtx2(NvtxGetExportTableFunc_t get)
{
    const NvtxExportTableCallbacks *cb = get(NVTX_ETID_CALLBACKS);
    NvtxFunctionTable t = NULL;
    unsigned int size = 0;
    const char *path = getenv("NVTX_RECORD_FILE");
    if (cb == NULL || path == NULL || (out = fopen(path, "a")) == NULL)
        return 0;
    if (!cb->GetModuleFunctionTable(NVTX_CB_MODULE_CORE2, &t, &size)
        || size <= NVTX_CBID_CORE2_DomainCreateA)
        return 0;
    *t[NVTX_CBID_CORE2_DomainCreateA] = (NvtxFunctionPointer)rec_domain_create;
    *t[NVTX_CBID_CORE2_DomainRangePushEx] = (NvtxFunctionPointer)rec_push;
    *t[NVTX_CBID_CORE2_DomainRangePop] = (NvtxFunctionPointer)rec_pop;
    *t[NVTX_CBID_CORE2_DomainMarkEx] = (NvtxFunctionPointer)rec_mark;
    fprintf(out, "init\n");
    fflush(out);
    return 1;
}
