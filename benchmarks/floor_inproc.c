/* The C launch loop as a shared library, so run.py can time it in the same
 * process as pygpu, burst for burst (machine drift then hits both alike).
 * Built by run.py:  cc -shared -fPIC floor_inproc.c -lcuda */
#include <cuda.h>
#include <time.h>

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

/* count launches of args3(p, n, a) with grid 1, block 32 on the legacy
 * stream; returns seconds, or -rc on failure */
double launch_burst(void *func, unsigned long long p, int n, float a, int count)
{
    CUdeviceptr d = (CUdeviceptr)p;
    void *params[3] = {&d, &n, &a};
    double t = now();
    for (int i = 0; i < count; i++) {
        CUresult rc = cuLaunchKernel((CUfunction)func, 1, 1, 1, 32, 1, 1, 0, NULL, params, NULL);
        if (rc != CUDA_SUCCESS)
            return -(double)rc;
    }
    return now() - t;
}

/* the same loop through cuLaunchKernelEx with no attributes (the entry
 * point pygpu launches through): the same launch, another driver path */
double launch_burst_ex(void *func, unsigned long long p, int n, float a, int count)
{
    CUdeviceptr d = (CUdeviceptr)p;
    void *params[3] = {&d, &n, &a};
    CUlaunchConfig lc = {1, 1, 1, 32, 1, 1, 0, NULL, NULL, 0};
    double t = now();
    for (int i = 0; i < count; i++) {
        CUresult rc = cuLaunchKernelEx(&lc, (CUfunction)func, params, NULL);
        if (rc != CUDA_SUCCESS)
            return -(double)rc;
    }
    return now() - t;
}
