/* pygpu: <stdlib.h> for NVRTC, which has device malloc, free, abs, labs and
 * llabs built in: div_t and div() with its long forms, EXIT_SUCCESS,
 * EXIT_FAILURE and RAND_MAX (glibc's values).  No rand(), strtol(), qsort()
 * or exit(): device code has none under nvcc either (curand, CUB). */
#ifndef PYGPU_LIBC_STDLIB_H
#define PYGPU_LIBC_STDLIB_H
typedef struct {
    int quot;
    int rem;
} div_t;
typedef struct {
    long int quot;
    long int rem;
} ldiv_t;
typedef struct {
    long long int quot;
    long long int rem;
} lldiv_t;
#define RAND_MAX 2147483647
#define EXIT_FAILURE 1
#define EXIT_SUCCESS 0
__device__ __forceinline__ div_t div(int n, int d)
{
    div_t r;
    r.quot = n / d;
    r.rem = n % d;
    return r;
}
__device__ __forceinline__ ldiv_t ldiv(long int n, long int d)
{
    ldiv_t r;
    r.quot = n / d;
    r.rem = n % d;
    return r;
}
__device__ __forceinline__ lldiv_t lldiv(long long int n, long long int d)
{
    lldiv_t r;
    r.quot = n / d;
    r.rem = n % d;
    return r;
}
#endif
