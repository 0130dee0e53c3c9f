/* The C side of benchmarks/graphs.py: the same graph of kernel nodes built,
 * instantiated, updated and replayed straight on the driver API, in the
 * benchmark's process (a shared library called through ctypes), so the two
 * are timed burst for burst on the same kernel and stream.
 * Built by graphs.py:  cc -O2 -shared -fPIC graphs_c.c -lcuda
 *
 * graph_bench(func, p, n, a, nodes, replays, out): func is the CUfunction of
 * args3(float *p, int n, float a), launched <<<1, 32>>> by every node in a
 * chain.  out[0..3] receive seconds: build (cuGraphCreate + nodes x
 * cuGraphAddKernelNode), instantiate, update (nodes x
 * cuGraphExecKernelNodeSetParams), and replays x cuGraphLaunch followed by
 * one cuStreamSynchronize.  Returns 0, or the failing CUresult. */
#include <cuda.h>
#include <stdlib.h>
#include <time.h>

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

int graph_bench(void *func, unsigned long long p, int n, float a, int nodes, int replays,
                void *stream, double *out)
{
    CUgraph g = NULL;
    CUgraphExec e = NULL;
    CUgraphNode *hs = calloc((size_t)nodes, sizeof *hs);
    CUdeviceptr d = (CUdeviceptr)p;
    CUDA_KERNEL_NODE_PARAMS kp = {0};       /* the v2 struct cuda.h maps to */
    void *params[3] = {&d, &n, &a};
    CUresult rc;
    double t;
    int i;
    if (hs == NULL)
        return 2;
    kp.func = (CUfunction)func;
    kp.gridDimX = kp.gridDimY = kp.gridDimZ = 1;
    kp.blockDimX = 32;
    kp.blockDimY = kp.blockDimZ = 1;
    kp.kernelParams = params;
    t = now();
    if ((rc = cuGraphCreate(&g, 0)) != CUDA_SUCCESS)
        goto done;
    for (i = 0; i < nodes; i++)
        if ((rc = cuGraphAddKernelNode(&hs[i], g, i ? &hs[i - 1] : NULL, i ? 1 : 0,
                                       &kp)) != CUDA_SUCCESS)
            goto done;
    out[0] = now() - t;
    t = now();
    if ((rc = cuGraphInstantiateWithFlags(&e, g, 0)) != CUDA_SUCCESS)
        goto done;
    out[1] = now() - t;
    a = 3.0f;
    t = now();
    for (i = 0; i < nodes; i++)
        if ((rc = cuGraphExecKernelNodeSetParams(e, hs[i], &kp))
            != CUDA_SUCCESS)
            goto done;
    out[2] = now() - t;
    if ((rc = cuGraphLaunch(e, (CUstream)stream)) != CUDA_SUCCESS      /* warm */
        || (rc = cuStreamSynchronize((CUstream)stream)) != CUDA_SUCCESS)
        goto done;
    t = now();
    for (i = 0; i < replays; i++)
        if ((rc = cuGraphLaunch(e, (CUstream)stream)) != CUDA_SUCCESS)
            goto done;
    if ((rc = cuStreamSynchronize((CUstream)stream)) != CUDA_SUCCESS)
        goto done;
    out[3] = now() - t;
done:
    if (e)
        cuGraphExecDestroy(e);
    if (g)
        cuGraphDestroy(g);
    free(hs);
    return (int)rc;
}
