/* The C launches behind benchmarks/small_add_floor.py: the empty kernel of
 * the goals' C floor and the very kernel a small a + b launches, each
 * through cuLaunchKernel and cuLaunchKernelEx, back to back on the legacy
 * stream with no synchronize inside.
 * Built by small_add_floor.py:  cc -O2 -shared -fPIC floor_small_add.c -lcuda */
#include <cuda.h>
#include <time.h>

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

/* count launches of func(z, x, y, n) (nparams 0: no parameters) with grid
 * x block threads; ex: through cuLaunchKernelEx.  Seconds, or -rc. */
double burst(void *func, int nparams, unsigned long long z, unsigned long long x,
             unsigned long long y, long long n, unsigned grid, unsigned block, int ex, int count)
{
    CUdeviceptr dz = (CUdeviceptr)z, dx = (CUdeviceptr)x, dy = (CUdeviceptr)y;
    void *params[4] = {&dz, &dx, &dy, &n};
    void **p = nparams ? params : NULL;
    CUlaunchConfig lc = {grid, 1, 1, block, 1, 1, 0, NULL, NULL, 0};
    double t = now();
    for (int i = 0; i < count; i++) {
        CUresult rc = ex ? cuLaunchKernelEx(&lc, (CUfunction)func, p, NULL)
                         : cuLaunchKernel((CUfunction)func, grid, 1, 1, block, 1, 1, 0, NULL, p,
                                          NULL);
        if (rc != CUDA_SUCCESS)
            return -(double)rc;
    }
    return now() - t;
}
