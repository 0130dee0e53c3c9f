// pygpu.reduction's kernel template (ReductionKernel).  pygpu/reduction.py
// fills the dollar-brace fields with Python's string.Template:
//   types        the complex type's definition when a complex type is used
//   preamble     the user's preamble
//   out_type     the C type of the result
//   neutral      the reduction's neutral element (a C expression)
//   reduce_expr  combines out_type a and b
//   map_expr     the value of element i (a C expression in i and the arguments)
//   arguments    the user's parameter list, followed by a comma
//   name         the kernel name prefix
//   block        threads per block (a multiple of 32, at most 1024)
//
// Two kernels, launched by ReductionKernel.__call__:
//   name_stage1  a grid-stride loop over count elements (element k is
//                   index start + k*step), each block's result to partial[blockIdx.x];
//                   with one block, partial is the result itself.
//   name_stage2  one block reduces the count partial results to *out.
// The reduction is assumed associative and commutative (PyCUDA's contract):
// the elements are combined in no particular order.
${types}
${preamble}

typedef ${out_type} pygpu_red_t;

#define PYGPU_RED_BLOCK ${block}

static __device__ __forceinline__ pygpu_red_t pygpu_red_op(const pygpu_red_t &a,
                                                          const pygpu_red_t &b)
{
    return (${reduce_expr});
}

// A warp shuffle of any trivially copyable type, 32 bits at a time.
static __device__ __forceinline__ pygpu_red_t pygpu_red_shfl_down(const pygpu_red_t &v,
                                                                 unsigned int delta)
{
    constexpr int W = (int)((sizeof(pygpu_red_t) + 3) / 4);
    int w[W];
    w[W - 1] = 0;
    memcpy(w, &v, sizeof(pygpu_red_t));
#pragma unroll
    for (int k = 0; k < W; ++k)
        w[k] = __shfl_down_sync(0xffffffffu, w[k], delta);
    alignas(pygpu_red_t) unsigned char b[sizeof(pygpu_red_t)];
    memcpy(b, w, sizeof(pygpu_red_t));
    return *reinterpret_cast<pygpu_red_t *>(b);
}

// The block's result, valid in thread 0.  Every thread must call it.
static __device__ __forceinline__ pygpu_red_t pygpu_red_block(pygpu_red_t acc)
{
    __shared__ __align__(16) unsigned char raw[(PYGPU_RED_BLOCK / 32) * sizeof(pygpu_red_t)];
    pygpu_red_t *warp_sums = reinterpret_cast<pygpu_red_t *>(raw);
    const unsigned int lane = threadIdx.x & 31u, warp = threadIdx.x >> 5;
#pragma unroll
    for (unsigned int d = 16; d > 0; d >>= 1) {
        pygpu_red_t other = pygpu_red_shfl_down(acc, d);
        acc = pygpu_red_op(acc, other);
    }
    if (PYGPU_RED_BLOCK == 32)
        return acc;
    if (lane == 0)
        memcpy(&warp_sums[warp], &acc, sizeof(pygpu_red_t));
    __syncthreads();
    if (warp == 0) {
        constexpr unsigned int NW = PYGPU_RED_BLOCK / 32;
        if (lane < NW)
            memcpy(&acc, &warp_sums[lane], sizeof(pygpu_red_t));
        // lanes >= NW keep their own warp's value out of the sum below
#pragma unroll
        for (unsigned int d = 16; d > 0; d >>= 1) {
            pygpu_red_t other = pygpu_red_shfl_down(acc, d);
            if (lane + d < NW)
                acc = pygpu_red_op(acc, other);
        }
    }
    return acc;
}

extern "C" __global__ void __launch_bounds__(PYGPU_RED_BLOCK)
${name}_stage1(pygpu_red_t *pygpu_partial, ${arguments}
               long long pygpu_start, long long pygpu_step, unsigned long long pygpu_count)
{
    pygpu_red_t acc = ${neutral};
    const unsigned long long stride = (unsigned long long)gridDim.x * PYGPU_RED_BLOCK;
    unsigned long long k = (unsigned long long)blockIdx.x * PYGPU_RED_BLOCK + threadIdx.x;
    // element i's value; the user's map expression sees i and the arguments
    auto pygpu_map = [&](const long long i) -> pygpu_red_t { return (${map_expr}); };
    // eight elements per trip: eight loads in flight per thread
    for (; k + 7 * stride < pygpu_count; k += 8 * stride) {
        pygpu_red_t v0 = pygpu_map(pygpu_start + (long long)k * pygpu_step);
        const pygpu_red_t v1 = pygpu_map(pygpu_start + (long long)(k + stride) * pygpu_step);
        const pygpu_red_t v2 = pygpu_map(pygpu_start + (long long)(k + 2 * stride) * pygpu_step);
        const pygpu_red_t v3 = pygpu_map(pygpu_start + (long long)(k + 3 * stride) * pygpu_step);
        const pygpu_red_t v4 = pygpu_map(pygpu_start + (long long)(k + 4 * stride) * pygpu_step);
        const pygpu_red_t v5 = pygpu_map(pygpu_start + (long long)(k + 5 * stride) * pygpu_step);
        const pygpu_red_t v6 = pygpu_map(pygpu_start + (long long)(k + 6 * stride) * pygpu_step);
        const pygpu_red_t v7 = pygpu_map(pygpu_start + (long long)(k + 7 * stride) * pygpu_step);
        v0 = pygpu_red_op(pygpu_red_op(pygpu_red_op(v0, v1), pygpu_red_op(v2, v3)),
                          pygpu_red_op(pygpu_red_op(v4, v5), pygpu_red_op(v6, v7)));
        acc = pygpu_red_op(acc, v0);
    }
    for (; k < pygpu_count; k += stride)
        acc = pygpu_red_op(acc, pygpu_map(pygpu_start + (long long)k * pygpu_step));
    acc = pygpu_red_block(acc);
    if (threadIdx.x == 0)
        pygpu_partial[blockIdx.x] = acc;
}

extern "C" __global__ void __launch_bounds__(PYGPU_RED_BLOCK)
${name}_stage2(pygpu_red_t *pygpu_out, const pygpu_red_t *pygpu_partial,
               unsigned int pygpu_count)
{
    pygpu_red_t acc = ${neutral};
    for (unsigned int k = threadIdx.x; k < pygpu_count; k += PYGPU_RED_BLOCK)
        acc = pygpu_red_op(acc, pygpu_partial[k]);
    acc = pygpu_red_block(acc);
    if (threadIdx.x == 0)
        *pygpu_out = acc;
}
