// pygpu.reduction's kernel template (ReductionKernel).  pygpu/reduction.py
// fills the dollar-brace fields with Python's string.Template:
//   types        the complex type's definition when a complex type is used
//   preamble     the user's preamble
//   out_type     the C type of the result
//   neutral      the reduction's neutral element (a C expression)
//   reduce_expr  combines out_type a and b
//   map_expr     the value of element i (a C expression in i and the arguments)
//   vmap_expr    map_expr with each vector-loaded argument's x[i] read from
//                its registers (pygpu_v_x[pygpu_c]); map_expr when none is
//   vloads       the vector loads of the chunk at index i (C statements)
//   arguments    the user's parameter list, followed by a comma
//   name         the kernel name prefix
//   block        threads per block (a multiple of 32, at most 1024)
//   unroll       chunks a thread loads before it combines them (loads in flight)
//   vec          elements a chunk (consecutive indices read by one vector
//                load per vector-loaded argument); 1: scalar loads only
//
// Two kernels, launched by ReductionKernel.__call__:
//   name_stage1  reduces count elements (element k is index start + k*step)
//                   into partial[blockIdx.x].  Where the host found the
//                   vector-loaded arguments aligned (nvec > 0; step 1),
//                   indices vbase ... vbase + vec*nvec - 1 are read in chunks
//                   of vec consecutive elements, one vector load a chunk and
//                   argument, and the few elements before vbase (the head)
//                   and after (the tail) one at a time.  With a ticket
//                   (non-null), the last block to finish (an atomic ticket
//                   after a fence) reduces the gridDim.x partial results into
//                   *out: one launch; ticket must be zero at the launch.
//                   With one block, partial is the result itself.
//   name_stage2  one block reduces the count partial results to *out (the
//                   two-launch form).
// The reduction is assumed associative and commutative (PyCUDA's contract):
// the elements are combined in no particular order.
${types}
${preamble}

typedef ${out_type} pygpu_red_t;

#define PYGPU_RED_BLOCK ${block}
#define PYGPU_RED_UNROLL ${unroll}
#define PYGPU_RED_VEC ${vec}

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

// the element type a pointer parameter points to (cv-qualifiers dropped)
template <typename P> struct pygpu_red_elem;
template <typename T> struct pygpu_red_elem<T *> { typedef T type; };
template <typename T> struct pygpu_red_elem<const T *> { typedef T type; };
template <typename T> struct pygpu_red_elem<volatile T *> { typedef T type; };
template <typename T> struct pygpu_red_elem<const volatile T *> { typedef T type; };

// v[0..V) = p[0..V): one load of V*sizeof(T) bytes (16-byte pieces above
// 16); p is aligned to that size, or to 16 bytes above it (the host checks)
template <int V, typename T>
static __device__ __forceinline__ void pygpu_red_vload(const T *p, T (&v)[V])
{
    constexpr int BYTES = V * (int)sizeof(T);
    if (BYTES >= 16 && BYTES % 16 == 0) {
        uint4 w[(BYTES + 15) / 16];
#pragma unroll
        for (int j = 0; j < (BYTES + 15) / 16; ++j)
            w[j] = __ldg(reinterpret_cast<const uint4 *>(p) + j);
        memcpy(v, w, BYTES);
    } else if (BYTES == 8) {
        const uint2 w = __ldg(reinterpret_cast<const uint2 *>(p));
        memcpy(v, &w, 8);
    } else if (BYTES == 4) {
        const unsigned int w = __ldg(reinterpret_cast<const unsigned int *>(p));
        memcpy(v, &w, 4);
    } else {
#pragma unroll
        for (int j = 0; j < V; ++j)
            v[j] = p[j];
    }
}

// block-wide: the combined partial results (every thread calls it)
static __device__ __forceinline__ pygpu_red_t pygpu_red_partials(const pygpu_red_t *partial,
                                                                unsigned int count)
{
    pygpu_red_t acc = ${neutral};
    const volatile pygpu_red_t *vp = partial;
    for (unsigned int k = threadIdx.x; k < count; k += PYGPU_RED_BLOCK) {
        alignas(pygpu_red_t) unsigned char b[sizeof(pygpu_red_t)];
        // a plain copy of the volatile bytes: user types need no volatile operator=
        const volatile unsigned char *src =
            reinterpret_cast<const volatile unsigned char *>(vp + k);
#pragma unroll
        for (int j = 0; j < (int)sizeof(pygpu_red_t); ++j)
            b[j] = src[j];
        acc = pygpu_red_op(acc, *reinterpret_cast<const pygpu_red_t *>(b));
    }
    return pygpu_red_block(acc);
}

extern "C" __global__ void __launch_bounds__(PYGPU_RED_BLOCK)
${name}_stage1(pygpu_red_t *pygpu_partial, ${arguments}
               long long pygpu_start, long long pygpu_step, unsigned long long pygpu_count,
               long long pygpu_vbase, unsigned long long pygpu_nvec,
               unsigned int *pygpu_ticket, pygpu_red_t *pygpu_out)
{
    // every local is pygpu_-prefixed: the user's expressions see their own names
    pygpu_red_t pygpu_acc = ${neutral};
    const unsigned long long pygpu_stride = (unsigned long long)gridDim.x * PYGPU_RED_BLOCK;
    const unsigned long long pygpu_gid =
        (unsigned long long)blockIdx.x * PYGPU_RED_BLOCK + threadIdx.x;
    // element i's value; the user's map expression sees i and the arguments
    auto pygpu_map = [&](const long long i) -> pygpu_red_t { return (${map_expr}); };
#if PYGPU_RED_VEC > 1
    if (pygpu_nvec > 0) {
        // the chunk at index pygpu_i0: vector loads, then map_expr for its vec indices
        auto pygpu_chunk = [&](const long long pygpu_i0) -> pygpu_red_t {
            ${vloads}
            auto pygpu_vmap = [&](const long long i, const int pygpu_c) -> pygpu_red_t {
                (void)i;
                (void)pygpu_c;
                return (${vmap_expr});
            };
            pygpu_red_t pygpu_r = pygpu_vmap(pygpu_i0, 0);
#pragma unroll
            for (int pygpu_cc = 1; pygpu_cc < PYGPU_RED_VEC; ++pygpu_cc)
                pygpu_r = pygpu_red_op(pygpu_r, pygpu_vmap(pygpu_i0 + pygpu_cc, pygpu_cc));
            return pygpu_r;
        };
        unsigned long long pygpu_m = pygpu_gid;
        for (; pygpu_m + (PYGPU_RED_UNROLL - 1) * pygpu_stride < pygpu_nvec;
             pygpu_m += PYGPU_RED_UNROLL * pygpu_stride) {
            pygpu_red_t pygpu_vals[PYGPU_RED_UNROLL];
#pragma unroll
            for (int pygpu_u = 0; pygpu_u < PYGPU_RED_UNROLL; ++pygpu_u)
                pygpu_vals[pygpu_u] = pygpu_chunk(
                    pygpu_vbase + (long long)((pygpu_m + pygpu_u * pygpu_stride) * PYGPU_RED_VEC));
#pragma unroll
            for (int pygpu_u = 0; pygpu_u < PYGPU_RED_UNROLL; ++pygpu_u)
                pygpu_acc = pygpu_red_op(pygpu_acc, pygpu_vals[pygpu_u]);
        }
        for (; pygpu_m < pygpu_nvec; pygpu_m += pygpu_stride)
            pygpu_acc = pygpu_red_op(
                pygpu_acc, pygpu_chunk(pygpu_vbase + (long long)(pygpu_m * PYGPU_RED_VEC)));
        // head [start, vbase) and tail [vbase + vec*nvec, start + count): fewer than
        // vec elements each
        const unsigned long long pygpu_head = (unsigned long long)(pygpu_vbase - pygpu_start);
        const unsigned long long pygpu_tail = pygpu_head + pygpu_nvec * PYGPU_RED_VEC;
        if (pygpu_gid < pygpu_head)
            pygpu_acc = pygpu_red_op(pygpu_acc, pygpu_map(pygpu_start + (long long)pygpu_gid));
        if (pygpu_tail + pygpu_gid < pygpu_count)
            pygpu_acc = pygpu_red_op(pygpu_acc,
                                     pygpu_map(pygpu_start + (long long)(pygpu_tail + pygpu_gid)));
    } else
#endif
    {
        unsigned long long pygpu_k = pygpu_gid;
        for (; pygpu_k + (PYGPU_RED_UNROLL - 1) * pygpu_stride < pygpu_count;
             pygpu_k += PYGPU_RED_UNROLL * pygpu_stride) {
            pygpu_red_t pygpu_vals[PYGPU_RED_UNROLL];
#pragma unroll
            for (int pygpu_u = 0; pygpu_u < PYGPU_RED_UNROLL; ++pygpu_u)
                pygpu_vals[pygpu_u] = pygpu_map(
                    pygpu_start + (long long)(pygpu_k + pygpu_u * pygpu_stride) * pygpu_step);
#pragma unroll
            for (int pygpu_u = 0; pygpu_u < PYGPU_RED_UNROLL; ++pygpu_u)
                pygpu_acc = pygpu_red_op(pygpu_acc, pygpu_vals[pygpu_u]);
        }
        for (; pygpu_k < pygpu_count; pygpu_k += pygpu_stride)
            pygpu_acc = pygpu_red_op(pygpu_acc,
                                     pygpu_map(pygpu_start + (long long)pygpu_k * pygpu_step));
    }
    pygpu_acc = pygpu_red_block(pygpu_acc);
    if (pygpu_ticket == 0) {
        if (threadIdx.x == 0)
            pygpu_partial[blockIdx.x] = pygpu_acc;
        return;
    }
    // one launch: the last block to finish combines the partial results
    __shared__ bool pygpu_last;
    if (threadIdx.x == 0) {
        pygpu_partial[blockIdx.x] = pygpu_acc;
        __threadfence();
        pygpu_last = atomicAdd(pygpu_ticket, 1u) == gridDim.x - 1;
    }
    __syncthreads();
    if (!pygpu_last)
        return;
    __threadfence();
    pygpu_acc = pygpu_red_partials(pygpu_partial, gridDim.x);
    if (threadIdx.x == 0)
        *pygpu_out = pygpu_acc;
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
