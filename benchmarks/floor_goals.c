/* The C floor of issue 27's small-operation goal, as a shared library that
 * benchmarks/goals.py times in its own process, burst for burst with pygpu:
 * back-to-back launches of an empty kernel (no parameters, grid 1, block
 * 32) on the legacy stream, with no synchronize inside.
 * Built by goals.py:  cc -O2 -shared -fPIC floor_goals.c -lcuda */
#include <cuda.h>
#include <time.h>

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

/* count launches of func (a kernel of no parameters); returns seconds, or
 * -rc on failure */
double empty_burst(void *func, int count)
{
    double t = now();
    for (int i = 0; i < count; i++) {
        CUresult rc = cuLaunchKernel((CUfunction)func, 1, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL);
        if (rc != CUDA_SUCCESS)
            return -(double)rc;
    }
    return now() - t;
}
