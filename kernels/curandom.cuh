// pygpu.curandom: cuRAND's device API behind PyCUDA's generator classes.
//
// pygpu/curandom.py appends, for one generator state type S, the lines
//     PYGPU_CURAND_GENERATORS(S, VEC)         the fill kernels
//     PYGPU_CURAND_PSEUDO_INIT(S)             or PYGPU_CURAND_SOBOL_INIT(S, DIRS, OFF)
//                                             or PYGPU_CURAND_SCRAMBLED_SOBOL_INIT(...)
//     PYGPU_CURAND_SKIP_KERNELS(S, FN, NAME, SKIP_T) ...
//
// Every count and index is 64-bit (pygpu_size_t): one launch fills 2**32
// and more elements (tests/arrays/test_curandom.py checks the PTX for it).
//
// One thread owns one generator state: s[thread] for thread =
// blockIdx.x * blockDim.x + threadIdx.x, and every kernel is launched with
// exactly one thread per state.  A fill kernel copies its state into
// registers, draws many numbers, and stores the state back once.
//
// Where VEC is 1 (the pseudo-random generators) a thread writes W
// consecutive numbers per store (16 bytes: float4, double2, uint4,
// ulonglong2) and the Box-Muller pairs of curand_normal2 are used; the
// n % W numbers left at the end come from threads 0 .. n%W-1.  Where VEC is
// 0 (Sobol), element i is drawn by thread i % threads, as PyCUDA lays it out:
// the output read as rows of `threads` numbers is a sequence of points of
// the threads-dimensional Sobol sequence.

#include <curand_kernel.h>

typedef unsigned long long pygpu_size_t;

#define PYGPU_TID ((pygpu_size_t)blockIdx.x * blockDim.x + threadIdx.x)
#define PYGPU_NTHREADS ((pygpu_size_t)blockDim.x * gridDim.x)

// ---- what one draw is, per distribution and output type ----
// one(s): one number; pack(s): the W numbers of one 16-byte store.

// 32-bit draws: curand() itself, but from a 64-bit Sobol state its top 32
// bits.  A Sobol64 point is a 64-bit binary fraction; in cuRAND's plain
// 64-bit set direction vector k has only its top k+1 bits, so the low 32
// bits of the first 2**32 points are all 0 (a cast to unsigned int gave 0
// for every element).  The top half is the point's leading 32 bits, as
// curand_uniform and curand_normal read it, and equals the 32-bit
// generator's number (the top halves of cuRAND's 64-bit direction vectors
// and scramble constants are its 32-bit ones).
template <class S> __device__ __forceinline__ unsigned int pg_curand32(S *s)
{
    return curand(s);
}
__device__ __forceinline__ unsigned int pg_curand32(curandStateSobol64_t *s)
{
    return (unsigned int)(curand(s) >> 32);
}
__device__ __forceinline__ unsigned int pg_curand32(curandStateScrambledSobol64_t *s)
{
    return (unsigned int)(curand(s) >> 32);
}

struct pg_uniform_u32 {
    typedef unsigned int T;
    typedef uint4 V;
    template <class S> __device__ __forceinline__ T one(S *s) const { return pg_curand32(s); }
    template <class S> __device__ __forceinline__ V pack(S *s) const
    {
        V v;
        v.x = pg_curand32(s);
        v.y = pg_curand32(s);
        v.z = pg_curand32(s);
        v.w = pg_curand32(s);
        return v;
    }
};

// 64-bit draws: a Sobol64 state's own 64 bits, else two 32-bit draws
template <class S> __device__ __forceinline__ unsigned long long pg_curand64(S *s)
{
    unsigned long long hi = curand(s);
    return (hi << 32) | (unsigned long long)curand(s);
}
__device__ __forceinline__ unsigned long long pg_curand64(curandStateSobol64_t *s)
{
    return curand(s);
}
__device__ __forceinline__ unsigned long long pg_curand64(curandStateScrambledSobol64_t *s)
{
    return curand(s);
}

struct pg_uniform_u64 {
    typedef unsigned long long T;
    typedef ulonglong2 V;
    template <class S> __device__ __forceinline__ T one(S *s) const { return pg_curand64(s); }
    template <class S> __device__ __forceinline__ V pack(S *s) const
    {
        V v;
        v.x = pg_curand64(s);
        v.y = pg_curand64(s);
        return v;
    }
};

struct pg_uniform_f32 {
    typedef float T;
    typedef float4 V;
    template <class S> __device__ __forceinline__ T one(S *s) const { return curand_uniform(s); }
    template <class S> __device__ __forceinline__ V pack(S *s) const
    {
        V v;
        v.x = curand_uniform(s);
        v.y = curand_uniform(s);
        v.z = curand_uniform(s);
        v.w = curand_uniform(s);
        return v;
    }
};

struct pg_uniform_f64 {
    typedef double T;
    typedef double2 V;
    template <class S> __device__ __forceinline__ T one(S *s) const
    {
        return curand_uniform_double(s);
    }
    template <class S> __device__ __forceinline__ V pack(S *s) const
    {
        V v;
        v.x = curand_uniform_double(s);
        v.y = curand_uniform_double(s);
        return v;
    }
};

// Box-Muller pairs where cuRAND has them (XORWOW, MRG32k3a), else one by one
template <class S> __device__ __forceinline__ float2 pg_normal2(S *s)
{
    float2 r;
    r.x = curand_normal(s);
    r.y = curand_normal(s);
    return r;
}
__device__ __forceinline__ float2 pg_normal2(curandStateXORWOW_t *s) { return curand_normal2(s); }
__device__ __forceinline__ float2 pg_normal2(curandStateMRG32k3a_t *s) { return curand_normal2(s); }

template <class S> __device__ __forceinline__ double2 pg_normal2_double(S *s)
{
    double2 r;
    r.x = curand_normal_double(s);
    r.y = curand_normal_double(s);
    return r;
}
__device__ __forceinline__ double2 pg_normal2_double(curandStateXORWOW_t *s)
{
    return curand_normal2_double(s);
}
__device__ __forceinline__ double2 pg_normal2_double(curandStateMRG32k3a_t *s)
{
    return curand_normal2_double(s);
}

template <class S> __device__ __forceinline__ float2 pg_log_normal2(S *s, float m, float sd)
{
    float2 r;
    r.x = curand_log_normal(s, m, sd);
    r.y = curand_log_normal(s, m, sd);
    return r;
}
__device__ __forceinline__ float2 pg_log_normal2(curandStateXORWOW_t *s, float m, float sd)
{
    return curand_log_normal2(s, m, sd);
}
__device__ __forceinline__ float2 pg_log_normal2(curandStateMRG32k3a_t *s, float m, float sd)
{
    return curand_log_normal2(s, m, sd);
}

template <class S>
__device__ __forceinline__ double2 pg_log_normal2_double(S *s, double m, double sd)
{
    double2 r;
    r.x = curand_log_normal_double(s, m, sd);
    r.y = curand_log_normal_double(s, m, sd);
    return r;
}
__device__ __forceinline__ double2 pg_log_normal2_double(curandStateXORWOW_t *s, double m,
                                                         double sd)
{
    return curand_log_normal2_double(s, m, sd);
}
__device__ __forceinline__ double2 pg_log_normal2_double(curandStateMRG32k3a_t *s, double m,
                                                         double sd)
{
    return curand_log_normal2_double(s, m, sd);
}

struct pg_normal_f32 {
    typedef float T;
    typedef float4 V;
    template <class S> __device__ __forceinline__ T one(S *s) const { return curand_normal(s); }
    template <class S> __device__ __forceinline__ V pack(S *s) const
    {
        float2 a = pg_normal2(s), b = pg_normal2(s);
        return make_float4(a.x, a.y, b.x, b.y);
    }
};

struct pg_normal_f64 {
    typedef double T;
    typedef double2 V;
    template <class S> __device__ __forceinline__ T one(S *s) const
    {
        return curand_normal_double(s);
    }
    template <class S> __device__ __forceinline__ V pack(S *s) const
    {
        return pg_normal2_double(s);
    }
};

struct pg_log_normal_f32 {
    typedef float T;
    typedef float4 V;
    float mean, stddev;
    template <class S> __device__ __forceinline__ T one(S *s) const
    {
        return curand_log_normal(s, mean, stddev);
    }
    template <class S> __device__ __forceinline__ V pack(S *s) const
    {
        float2 a = pg_log_normal2(s, mean, stddev), b = pg_log_normal2(s, mean, stddev);
        return make_float4(a.x, a.y, b.x, b.y);
    }
};

struct pg_log_normal_f64 {
    typedef double T;
    typedef double2 V;
    double mean, stddev;
    template <class S> __device__ __forceinline__ T one(S *s) const
    {
        return curand_log_normal_double(s, mean, stddev);
    }
    template <class S> __device__ __forceinline__ V pack(S *s) const
    {
        return pg_log_normal2_double(s, mean, stddev);
    }
};

struct pg_poisson_u32 {
    typedef unsigned int T;
    typedef uint4 V;
    double lambda;
    template <class S> __device__ __forceinline__ T one(S *s) const
    {
        return curand_poisson(s, lambda);
    }
    template <class S> __device__ __forceinline__ V pack(S *s) const
    {
        V v;
        v.x = curand_poisson(s, lambda);
        v.y = curand_poisson(s, lambda);
        v.z = curand_poisson(s, lambda);
        v.w = curand_poisson(s, lambda);
        return v;
    }
};

// ---- the fill loop ----

template <class S, int VEC, class D>
__device__ void pygpu_fill(S *states, typename D::T *d, pygpu_size_t n, D draw)
{
    typedef typename D::T T;
    typedef typename D::V V;
    const int W = sizeof(V) / sizeof(T);
    const pygpu_size_t tid = PYGPU_TID, threads = PYGPU_NTHREADS;
    S st = states[tid];
    if (VEC && ((pygpu_size_t)d % sizeof(V)) == 0) {
        const pygpu_size_t nv = n / W;
        V *dv = (V *)d;
        for (pygpu_size_t i = tid; i < nv; i += threads)
            dv[i] = draw.pack(&st);
        if (tid < n - nv * W)
            d[nv * W + tid] = draw.one(&st);
    }
    else {
        for (pygpu_size_t i = tid; i < n; i += threads)
            d[i] = draw.one(&st);
    }
    states[tid] = st;
}

// d[i] = Poisson(lambda = d[i]) in place, any element type
template <class S, class T>
__device__ void pygpu_poisson_inplace(S *states, T *d, pygpu_size_t n)
{
    const pygpu_size_t tid = PYGPU_TID, threads = PYGPU_NTHREADS;
    S st = states[tid];
    for (pygpu_size_t i = tid; i < n; i += threads)
        d[i] = (T)curand_poisson(&st, (double)d[i]);
    states[tid] = st;
}

#define PYGPU_CURAND_GENERATORS(S, VEC)                                                    \
    extern "C" __global__ void uniform_int(S *s, unsigned int *d, pygpu_size_t n)          \
    {                                                                                      \
        pygpu_fill<S, VEC>(s, d, n, pg_uniform_u32());                                     \
    }                                                                                      \
    extern "C" __global__ void uniform_long(S *s, unsigned long long *d, pygpu_size_t n)   \
    {                                                                                      \
        pygpu_fill<S, VEC>(s, d, n, pg_uniform_u64());                                     \
    }                                                                                      \
    extern "C" __global__ void uniform_float(S *s, float *d, pygpu_size_t n)               \
    {                                                                                      \
        pygpu_fill<S, VEC>(s, d, n, pg_uniform_f32());                                     \
    }                                                                                      \
    extern "C" __global__ void uniform_double(S *s, double *d, pygpu_size_t n)             \
    {                                                                                      \
        pygpu_fill<S, VEC>(s, d, n, pg_uniform_f64());                                     \
    }                                                                                      \
    extern "C" __global__ void normal_float(S *s, float *d, pygpu_size_t n)                \
    {                                                                                      \
        pygpu_fill<S, VEC>(s, d, n, pg_normal_f32());                                      \
    }                                                                                      \
    extern "C" __global__ void normal_double(S *s, double *d, pygpu_size_t n)              \
    {                                                                                      \
        pygpu_fill<S, VEC>(s, d, n, pg_normal_f64());                                      \
    }                                                                                      \
    extern "C" __global__ void normal_log_float(S *s, float *d, float mean, float stddev,  \
                                                pygpu_size_t n)                            \
    {                                                                                      \
        pg_log_normal_f32 g;                                                               \
        g.mean = mean;                                                                     \
        g.stddev = stddev;                                                                 \
        pygpu_fill<S, VEC>(s, d, n, g);                                                    \
    }                                                                                      \
    extern "C" __global__ void normal_log_double(S *s, double *d, double mean,             \
                                                 double stddev, pygpu_size_t n)            \
    {                                                                                      \
        pg_log_normal_f64 g;                                                               \
        g.mean = mean;                                                                     \
        g.stddev = stddev;                                                                 \
        pygpu_fill<S, VEC>(s, d, n, g);                                                    \
    }                                                                                      \
    extern "C" __global__ void poisson_int(S *s, unsigned int *d, double lambda,           \
                                           pygpu_size_t n)                                 \
    {                                                                                      \
        pg_poisson_u32 g;                                                                  \
        g.lambda = lambda;                                                                 \
        pygpu_fill<S, VEC>(s, d, n, g);                                                    \
    }                                                                                      \
    extern "C" __global__ void poisson_inplace_float(S *s, float *d, pygpu_size_t n)       \
    {                                                                                      \
        pygpu_poisson_inplace(s, d, n);                                                    \
    }                                                                                      \
    extern "C" __global__ void poisson_inplace_double(S *s, double *d, pygpu_size_t n)     \
    {                                                                                      \
        pygpu_poisson_inplace(s, d, n);                                                    \
    }                                                                                      \
    extern "C" __global__ void poisson_inplace_int(S *s, unsigned int *d, pygpu_size_t n)  \
    {                                                                                      \
        pygpu_poisson_inplace(s, d, n);                                                    \
    }                                                                                      \
    extern "C" __device__ pygpu_size_t pygpu_state_size = sizeof(S);

// ---- initialisation: one thread per state, n states ----

// seed, subsequence = the state's index, offset: as PyCUDA
#define PYGPU_CURAND_PSEUDO_INIT(S)                                                        \
    extern "C" __global__ void prepare(S *s, pygpu_size_t n, const unsigned int *seeds,    \
                                       pygpu_size_t offset)                                \
    {                                                                                      \
        const pygpu_size_t id = PYGPU_TID;                                                 \
        if (id < n)                                                                        \
            curand_init(seeds[id], id, offset, &s[id]);                                    \
    }

// one dimension's direction vectors per state
#define PYGPU_CURAND_SOBOL_INIT(S, DIRS, OFF)                                              \
    extern "C" __global__ void prepare(S *s, pygpu_size_t n, DIRS *dirs,                   \
                                       pygpu_size_t offset)                                \
    {                                                                                      \
        const pygpu_size_t id = PYGPU_TID;                                                 \
        if (id < n)                                                                        \
            curand_init(dirs[id], (OFF)offset, &s[id]);                                    \
    }

#define PYGPU_CURAND_SCRAMBLED_SOBOL_INIT(S, DIRS, SCR)                                    \
    extern "C" __global__ void prepare(S *s, pygpu_size_t n, DIRS *dirs, const SCR *scramble, \
                                       pygpu_size_t offset)                                \
    {                                                                                      \
        const pygpu_size_t id = PYGPU_TID;                                                 \
        if (id < n)                                                                        \
            curand_init(dirs[id], scramble[id], (SCR)offset, &s[id]);                      \
    }

// ---- skipping ahead: every state by one count, or each by its own ----

#define PYGPU_CURAND_SKIP_KERNELS(S, FN, NAME, SKIP_T)                                     \
    extern "C" __global__ void NAME(S *s, pygpu_size_t n, SKIP_T skip)                     \
    {                                                                                      \
        const pygpu_size_t id = PYGPU_TID;                                                 \
        if (id < n)                                                                        \
            FN(skip, &s[id]);                                                              \
    }                                                                                      \
    extern "C" __global__ void NAME##_array(S *s, pygpu_size_t n, const SKIP_T *skip)      \
    {                                                                                      \
        const pygpu_size_t id = PYGPU_TID;                                                 \
        if (id < n)                                                                        \
            FN(skip[id], &s[id]);                                                          \
    }
