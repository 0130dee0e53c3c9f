// pygpu.curandom.rand: uniform random numbers from a counter-based generator,
// Philox-4x32-10 (Salmon, Moraes, Dror, Shaw: "Parallel random numbers: as
// easy as 1, 2, 3", SC11).  No state: block b of four 32-bit words is
// philox(counter = (b, b >> 32, 0, 0), key = (seed, 0x5047_5055)), so the
// output depends only on the seed and the index, never on the launch
// configuration.  No cuRAND header: this compiles in a moment.

typedef unsigned long long pygpu_size_t;

struct pygpu_u32x4 { unsigned int x, y, z, w; };

__device__ __forceinline__ pygpu_u32x4 pygpu_philox(pygpu_size_t block, unsigned int seed)
{
    unsigned int c0 = (unsigned int)block, c1 = (unsigned int)(block >> 32), c2 = 0, c3 = 0;
    unsigned int k0 = seed, k1 = 0x50475055u;
#pragma unroll
    for (int round = 0; round < 10; round++) {
        if (round) {
            k0 += 0x9E3779B9u;
            k1 += 0xBB67AE85u;
        }
        unsigned int lo0 = 0xD2511F53u * c0, hi0 = __umulhi(0xD2511F53u, c0);
        unsigned int lo1 = 0xCD9E8D57u * c2, hi1 = __umulhi(0xCD9E8D57u, c2);
        unsigned int n0 = hi1 ^ c1 ^ k0, n2 = hi0 ^ c3 ^ k1;
        c0 = n0;
        c1 = lo1;
        c2 = n2;
        c3 = lo0;
    }
    pygpu_u32x4 r;
    r.x = c0;
    r.y = c1;
    r.z = c2;
    r.w = c3;
    return r;
}

// [0, 1): the top 24 (float) or 53 (double) bits
__device__ __forceinline__ float pygpu_u01f(unsigned int x)
{
    return (float)(x >> 8) * (1.0f / 16777216.0f);
}
__device__ __forceinline__ double pygpu_u01d(unsigned int hi, unsigned int lo)
{
    unsigned long long m = ((unsigned long long)(hi >> 5) << 26) | (lo >> 6);
    return (double)m * (1.0 / 9007199254740992.0);
}

// float32 and uint32 outputs: four numbers per Philox block, element i from
// block i / 4, word i % 4
extern "C" __global__ void rand_float(float *d, unsigned int seed, pygpu_size_t n)
{
    const pygpu_size_t threads = (pygpu_size_t)blockDim.x * gridDim.x;
    const pygpu_size_t nb = (n + 3) / 4;
    const bool aligned = ((pygpu_size_t)d % 16) == 0;
    for (pygpu_size_t b = (pygpu_size_t)blockIdx.x * blockDim.x + threadIdx.x; b < nb;
         b += threads) {
        pygpu_u32x4 r = pygpu_philox(b, seed);
        float4 v = make_float4(pygpu_u01f(r.x), pygpu_u01f(r.y), pygpu_u01f(r.z),
                               pygpu_u01f(r.w));
        if (aligned && 4 * b + 4 <= n) {
            ((float4 *)d)[b] = v;
        }
        else {
            float e[4] = {v.x, v.y, v.z, v.w};
            for (int k = 0; k < 4 && 4 * b + k < n; k++)
                d[4 * b + k] = e[k];
        }
    }
}

extern "C" __global__ void rand_uint(unsigned int *d, unsigned int seed, pygpu_size_t n)
{
    const pygpu_size_t threads = (pygpu_size_t)blockDim.x * gridDim.x;
    const pygpu_size_t nb = (n + 3) / 4;
    const bool aligned = ((pygpu_size_t)d % 16) == 0;
    for (pygpu_size_t b = (pygpu_size_t)blockIdx.x * blockDim.x + threadIdx.x; b < nb;
         b += threads) {
        pygpu_u32x4 r = pygpu_philox(b, seed);
        if (aligned && 4 * b + 4 <= n) {
            ((uint4 *)d)[b] = make_uint4(r.x, r.y, r.z, r.w);
        }
        else {
            unsigned int e[4] = {r.x, r.y, r.z, r.w};
            for (int k = 0; k < 4 && 4 * b + k < n; k++)
                d[4 * b + k] = e[k];
        }
    }
}

// float64: two numbers per Philox block, element i from block i / 2
extern "C" __global__ void rand_double(double *d, unsigned int seed, pygpu_size_t n)
{
    const pygpu_size_t threads = (pygpu_size_t)blockDim.x * gridDim.x;
    const pygpu_size_t nb = (n + 1) / 2;
    const bool aligned = ((pygpu_size_t)d % 16) == 0;
    for (pygpu_size_t b = (pygpu_size_t)blockIdx.x * blockDim.x + threadIdx.x; b < nb;
         b += threads) {
        pygpu_u32x4 r = pygpu_philox(b, seed);
        double2 v = make_double2(pygpu_u01d(r.x, r.y), pygpu_u01d(r.z, r.w));
        if (aligned && 2 * b + 2 <= n) {
            ((double2 *)d)[b] = v;
        }
        else {
            d[2 * b] = v.x;
            if (2 * b + 1 < n)
                d[2 * b + 1] = v.y;
        }
    }
}
