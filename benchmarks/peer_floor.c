/* The plain-C floor of peer copies: cuMemcpyPeer between device 0 and
 * device 1 (primary contexts, peer access enabled both ways when the
 * devices allow it), as benchmarks/multi_gpu.py measures pygpu's
 * memcpy_peer.  Prints one JSON object: for each size, the median seconds
 * of a cuMemcpyPeer followed by cuCtxSynchronize and of REPEAT cuMemcpyPeerAsync on one stream
 * between two events.
 * Built and run by multi_gpu.py:  cc peer_floor.c -lcuda
 *   peer_floor REPEAT SIZE...                                               */
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define CK(x) do { CUresult r_ = (x); if (r_ != CUDA_SUCCESS) { \
    const char *s_; cuGetErrorName(r_, &s_); fprintf(stderr, "%s: %s\n", #x, s_); exit(1); } } while (0)

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
    CUdevice d0, d1;
    CUcontext c0, c1;
    CUdeviceptr a, b;
    CUstream s;
    CUevent e0, e1;
    int repeat, i, k, can01 = 0, can10 = 0;
    size_t maxsize = 0;
    if (argc < 3) {
        fprintf(stderr, "usage: peer_floor REPEAT SIZE...\n");
        return 2;
    }
    repeat = atoi(argv[1]);
    for (i = 2; i < argc; i++)
        if ((size_t)atoll(argv[i]) > maxsize)
            maxsize = (size_t)atoll(argv[i]);
    CK(cuInit(0));
    CK(cuDeviceGet(&d0, 0));
    CK(cuDeviceGet(&d1, 1));
    CK(cuDevicePrimaryCtxRetain(&c0, d0));
    CK(cuDevicePrimaryCtxRetain(&c1, d1));
    CK(cuDeviceCanAccessPeer(&can01, d0, d1));
    CK(cuDeviceCanAccessPeer(&can10, d1, d0));
    CK(cuCtxSetCurrent(c1));
    CK(cuMemAlloc(&b, maxsize));
    if (can10) CK(cuCtxEnablePeerAccess(c0, 0));
    CK(cuCtxSetCurrent(c0));
    CK(cuMemAlloc(&a, maxsize));
    CK(cuMemsetD8(a, 1, maxsize));
    if (can01) CK(cuCtxEnablePeerAccess(c1, 0));
    CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CK(cuEventCreate(&e0, 0));
    CK(cuEventCreate(&e1, 0));
    printf("{\"peer_access\": %s, \"sizes\": {", can01 && can10 ? "true" : "false");
    for (i = 2; i < argc; i++) {
        size_t n = (size_t)atoll(argv[i]);
        double *t = malloc(sizeof(double) * repeat), blocking;
        float ms;
        CK(cuMemcpyPeer(b, c1, a, c0, n));            /* warm up */
        CK(cuCtxSynchronize());
        for (k = 0; k < repeat; k++) {
            /* cuMemcpyPeer may return before a device-to-device copy
             * ends: the row times the copy to its end */
            double t0 = now();
            CK(cuMemcpyPeer(b, c1, a, c0, n));
            CK(cuCtxSynchronize());
            t[k] = now() - t0;
        }
        qsort(t, repeat, sizeof *t, cmp);
        blocking = t[repeat / 2];
        CK(cuEventRecord(e0, s));
        for (k = 0; k < repeat; k++)
            CK(cuMemcpyPeerAsync(b, c1, a, c0, n, s));
        CK(cuEventRecord(e1, s));
        CK(cuEventSynchronize(e1));
        CK(cuEventElapsedTime(&ms, e0, e1));
        printf("%s\"%zu\": {\"blocking_s\": %.9g, \"async_s\": %.9g}", i > 2 ? ", " : "", n,
               blocking, ms / 1e3 / repeat);
        free(t);
    }
    printf("}}\n");
    return 0;
}
