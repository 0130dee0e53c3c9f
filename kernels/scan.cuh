// pygpu.scan's kernel template (InclusiveScanKernel, ExclusiveScanKernel):
// a single-pass scan with decoupled look-back (Merrill & Garland, 2016).
// pygpu/scan.py fills the dollar-brace fields with Python's string.Template:
//   types       the complex type's definition when a complex type is used
//   preamble    the user's preamble
//   scan_type   the C type of the elements
//   scan_expr   combines a (the earlier part) and b (the later part); it must be
//               associative, it need not be commutative
//   neutral     the exclusive scan's first value (exclusive only)
//   exclusive   1 or 0
//   threads     threads per block, items  elements per thread
//   min_blocks  blocks an SM the registers must allow (__launch_bounds__)
//   packed      1: flag and value share one 64-bit word a tile (see below)
//   warp_load   1: each warp moves its own 32*items elements between global
//               and shared memory (warp-striped, __syncwarp); 0: the block
//               moves the tile (block-striped, __syncthreads)
//   vec         elements a vector load/store moves (1: scalar); used on full
//               tiles when the kernel's vec_ok argument says both arrays are
//               aligned to vec elements
//   sleep       nanoseconds a look-back poll sleeps after finding a tile not
//               yet published (0: spin)
//   async_copy  1 (with hold 0): full aligned tiles of 16-byte chunks go from
//               global to shared memory by cp.async (sm_80 on), no registers
//               in between, into an XOR-swizzled layout (chunk q at
//               q ^ ((q >> 3) & 7)) that 16-byte blocked reads see without
//               bank conflicts; the elements in flight are then bounded by
//               shared memory, not registers
//   window      tiles each lane of the look-back warp reads a round (elements
//               of at most 4 bytes): the warp sees 32*window tiles a round trip
//   hold        1: a thread keeps its items scanned in registers while the
//               block waits for the tile's prefix; 0: it reads them from
//               shared memory twice (its total first, then the scan), so far
//               fewer registers stay live across the look-back
//   name        the kernel's name
//
// Each block takes the next tile (threads*items elements) from an atomic
// counter, so a block only waits for blocks that already run.  It scans
// its tile, publishes the tile's aggregate (flag 1), then one warp looks back
// over the tiles before it, 32 at a time, combining aggregates until it
// reaches a tile that has published its inclusive prefix (flag 2); the tile
// then publishes its own inclusive prefix and writes its elements.
// Values are combined strictly left to right, and no neutral element is
// assumed: "no value yet" is tracked with a flag, never with an identity.
// Out-of-range elements of the last tile are never combined with anything.
//
// Scratch (zeroed by the caller before each launch when there is more than
// one tile): unsigned int counter; int flags[tiles]; value slots aggs[tiles],
// incls[tiles] of SLOT 32-bit words each.  Elements of at most 4 bytes
// (PYGPU_SCAN_PACKED) keep flag and value in one 64-bit word per tile
// instead, passed as flags (8-byte aligned): the flag in the high half, the
// value's bits in the low half, written and read whole, so a reader never
// sees a flag without its value and no fence stands between them.
${types}
${preamble}

typedef ${scan_type} pygpu_scan_t;

#define PYGPU_SCAN_THREADS ${threads}
#define PYGPU_SCAN_ITEMS ${items}
#define PYGPU_SCAN_TILE (PYGPU_SCAN_THREADS * PYGPU_SCAN_ITEMS)
#define PYGPU_SCAN_WARPS (PYGPU_SCAN_THREADS / 32)
#define PYGPU_SCAN_EXCLUSIVE ${exclusive}
#define PYGPU_SCAN_PACKED ${packed}
#define PYGPU_SCAN_MIN_BLOCKS ${min_blocks}
#define PYGPU_SCAN_WARP_LOAD ${warp_load}
#define PYGPU_SCAN_VEC ${vec}
#define PYGPU_SCAN_SLEEP ${sleep}
#define PYGPU_SCAN_HOLD ${hold}
#define PYGPU_SCAN_ASYNC ${async_copy}
#define PYGPU_SCAN_WINDOW ${window}
#if PYGPU_SCAN_WARP_LOAD
#define PYGPU_SCAN_TRANSPOSE_SYNC() __syncwarp()
#else
#define PYGPU_SCAN_TRANSPOSE_SYNC() __syncthreads()
#endif
// one padding element per 32: blocked reads of the tile hit distinct banks
#define PYGPU_SCAN_PAD(j) ((j) + ((j) >> 5))

static __device__ __forceinline__ pygpu_scan_t pygpu_scan_op(const pygpu_scan_t &a,
                                                            const pygpu_scan_t &b)
{
    return (${scan_expr});
}

#if PYGPU_SCAN_EXCLUSIVE
static __device__ __forceinline__ pygpu_scan_t pygpu_scan_neutral()
{
    return (${neutral});
}
#endif

namespace pygpu_scan {

constexpr int SLOT = (int)((sizeof(pygpu_scan_t) + 3) / 4);

// a look-back poll that found nothing published yet
__device__ __forceinline__ void poll_pause()
{
#if PYGPU_SCAN_SLEEP > 0 && (!defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 700)
    __nanosleep(PYGPU_SCAN_SLEEP);
#endif
}

// The tile index of element c of thread t's k-th striped access of V
// consecutive elements: warp-striped (each warp its own 32*ITEMS elements)
// or block-striped.
template <int V>
__device__ __forceinline__ unsigned int striped(int k, unsigned int t)
{
#if PYGPU_SCAN_WARP_LOAD
    return (t >> 5) * (32u * PYGPU_SCAN_ITEMS) + ((unsigned int)k * 32u + (t & 31u)) * V;
#else
    return ((unsigned int)k * PYGPU_SCAN_THREADS + t) * V;
#endif
}

// the swizzled place of 16-byte chunk q of a tile (async_copy)
__device__ __forceinline__ unsigned int swz(unsigned int q)
{
    return q ^ ((q >> 3) & 7u);
}

// 16 bytes from global to shared memory without registers where the
// architecture has cp.async; wait_copies() waits for the thread's own copies
__device__ __forceinline__ void copy16(void *smem, const void *gmem)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    const unsigned int s = (unsigned int)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(gmem) : "memory");
#else
    *reinterpret_cast<uint4 *>(smem) = *reinterpret_cast<const uint4 *>(gmem);
#endif
}

__device__ __forceinline__ void wait_copies()
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("cp.async.commit_group;\ncp.async.wait_group 0;\n" ::: "memory");
#endif
}

// V elements at p (aligned to V elements) in one access of V*sizeof bytes
template <int V>
__device__ __forceinline__ void vload(const pygpu_scan_t *p, pygpu_scan_t (&v)[V])
{
    constexpr int B = V * (int)sizeof(pygpu_scan_t);
    if (B == 16) {
        const uint4 w = *reinterpret_cast<const uint4 *>(p);
        memcpy(v, &w, 16);
    } else if (B == 8) {
        const uint2 w = *reinterpret_cast<const uint2 *>(p);
        memcpy(v, &w, 8);
    } else if (B == 4) {
        const unsigned int w = *reinterpret_cast<const unsigned int *>(p);
        memcpy(v, &w, 4);
    } else {
#pragma unroll
        for (int c = 0; c < V; ++c)
            v[c] = p[c];
    }
}

template <int V>
__device__ __forceinline__ void vstore(pygpu_scan_t *p, const pygpu_scan_t (&v)[V])
{
    constexpr int B = V * (int)sizeof(pygpu_scan_t);
    if (B == 16) {
        uint4 w;
        memcpy(&w, v, 16);
        *reinterpret_cast<uint4 *>(p) = w;
    } else if (B == 8) {
        uint2 w;
        memcpy(&w, v, 8);
        *reinterpret_cast<uint2 *>(p) = w;
    } else if (B == 4) {
        unsigned int w;
        memcpy(&w, v, 4);
        *reinterpret_cast<unsigned int *>(p) = w;
    } else {
#pragma unroll
        for (int c = 0; c < V; ++c)
            p[c] = v[c];
    }
}

__device__ __forceinline__ pygpu_scan_t from_words(const int *w)
{
    alignas(pygpu_scan_t) unsigned char b[sizeof(pygpu_scan_t)];
    memcpy(b, w, sizeof(pygpu_scan_t));
    return *reinterpret_cast<pygpu_scan_t *>(b);
}

__device__ __forceinline__ void to_words(const pygpu_scan_t &v, int *w)
{
    w[SLOT - 1] = 0;
    memcpy(w, &v, sizeof(pygpu_scan_t));
}

__device__ __forceinline__ pygpu_scan_t shfl_up(const pygpu_scan_t &v, unsigned int d)
{
    int w[SLOT];
    to_words(v, w);
#pragma unroll
    for (int k = 0; k < SLOT; ++k)
        w[k] = __shfl_up_sync(0xffffffffu, w[k], d);
    return from_words(w);
}

__device__ __forceinline__ pygpu_scan_t shfl_down(const pygpu_scan_t &v, unsigned int d)
{
    int w[SLOT];
    to_words(v, w);
#pragma unroll
    for (int k = 0; k < SLOT; ++k)
        w[k] = __shfl_down_sync(0xffffffffu, w[k], d);
    return from_words(w);
}

__device__ __forceinline__ void store_slot(int *slots, size_t idx, const pygpu_scan_t &v)
{
    int w[SLOT];
    to_words(v, w);
    volatile int *p = slots + idx * SLOT;
#pragma unroll
    for (int k = 0; k < SLOT; ++k)
        p[k] = w[k];
}

__device__ __forceinline__ pygpu_scan_t load_slot(const int *slots, size_t idx)
{
    int w[SLOT];
    const volatile int *p = slots + idx * SLOT;
#pragma unroll
    for (int k = 0; k < SLOT; ++k)
        w[k] = p[k];
    return from_words(w);
}

// (valid, value) pairs with "invalid" as an identity: associative, order kept
__device__ __forceinline__ void combine(bool &va, pygpu_scan_t &a, bool vb, const pygpu_scan_t &b)
{
    if (vb) {
        if (va)
            a = pygpu_scan_op(a, b);
        else
            a = b;
        va = true;
    }
}

// The exclusive prefix of the tiles before `tile`, in lane 0 of the calling
// warp (all 32 lanes call it).
__device__ __forceinline__ pygpu_scan_t look_back(const int *flags, const int *aggs,
                                                  const int *incls, unsigned int tile)
{
    const unsigned int lane = threadIdx.x & 31u;
    const volatile int *vflags = flags;
    pygpu_scan_t run;
    bool have = false;
    long long pos = (long long)tile - 1;
    for (;;) {
        const long long idx = pos - (long long)lane;
        int f = 3;                               // before tile 0: never used
        if (idx >= 0) {
            for (;;) {
                f = vflags[idx];
                if (f != 0)
                    break;
                poll_pause();
            }
        }
        __syncwarp();
        __threadfence();
        pygpu_scan_t v;
        if (idx >= 0)
            v = load_slot(f == 2 ? incls : aggs, (size_t)idx);
        const unsigned int pm = __ballot_sync(0xffffffffu, f == 2);
        const unsigned int p = pm ? (unsigned int)(__ffs(pm) - 1) : 31u;
        // lane 0 gets v[p] op ... op v[1] op v[0] (lane k is tile pos - k)
#pragma unroll
        for (unsigned int d = 1; d < 32; d <<= 1) {
            pygpu_scan_t other = shfl_down(v, d);
            if ((lane & (2 * d - 1)) == 0 && lane + d <= p)
                v = pygpu_scan_op(other, v);
        }
        if (lane == 0) {
            if (have)
                run = pygpu_scan_op(v, run);
            else
                run = v;
        }
        have = true;
        if (pm)
            break;
        pos -= 32;
    }
    return run;
}

#if PYGPU_SCAN_PACKED
__device__ __forceinline__ void publish(int *flags, unsigned int tile, unsigned int flag,
                                        const pygpu_scan_t &v)
{
    unsigned int bits = 0;
    memcpy(&bits, &v, sizeof(pygpu_scan_t));
    ((volatile unsigned long long *)flags)[tile] = ((unsigned long long)flag << 32) | bits;
}

// look_back with the packed words: one load a tile, no fence.  (Reading
// 2, 4 or 8 tiles a lane per round trip, or sleeping between polls, did
// not make a 100M-element float32 scan quicker on an H200: 317-361 us.)
__device__ __forceinline__ pygpu_scan_t look_back_packed(const int *flags, unsigned int tile)
{
    const unsigned int lane = threadIdx.x & 31u;
    const volatile unsigned long long *words = (const volatile unsigned long long *)flags;
    pygpu_scan_t run;
    bool have = false;
    long long pos = (long long)tile - 1;
    for (;;) {
        // lane k reads the WINDOW tiles pos - k*WINDOW - j (j = 0 the latest), all
        // loads issued before any is waited for
        constexpr int W = PYGPU_SCAN_WINDOW;
        unsigned long long w[W];
#pragma unroll
        for (int j = 0; j < W; ++j) {
            const long long idx = pos - (long long)(lane * W + j);
            w[j] = idx >= 0 ? words[idx] : (3ull << 32);   // before tile 0: never used
        }
#pragma unroll
        for (int j = 0; j < W; ++j) {
            const long long idx = pos - (long long)(lane * W + j);
            while ((unsigned int)(w[j] >> 32) == 0u) {
                poll_pause();
                w[j] = words[idx];
            }
        }
        // the lane's latest tile with an inclusive prefix (W: none)
        int stop = W;
#pragma unroll
        for (int j = W - 1; j >= 0; --j)
            if ((unsigned int)(w[j] >> 32) == 2u)
                stop = j;
        // v: the lane's tiles from the earliest used (stop, or W-1) to the latest
        pygpu_scan_t v;
#pragma unroll
        for (int j = W - 1; j >= 0; --j) {
            const unsigned int bits = (unsigned int)w[j];
            pygpu_scan_t x;
            memcpy(&x, &bits, sizeof(pygpu_scan_t));
            if (j == (stop < W ? stop : W - 1))
                v = x;
            else if (j < stop)
                v = pygpu_scan_op(v, x);
        }
        const unsigned int pm = __ballot_sync(0xffffffffu, stop < W);
        const unsigned int p = pm ? (unsigned int)(__ffs(pm) - 1) : 31u;
        // lane 0 gets v[p] op ... op v[1] op v[0] (lane k is tiles pos - k*W - ...)
#pragma unroll
        for (unsigned int d = 1; d < 32; d <<= 1) {
            pygpu_scan_t other = shfl_down(v, d);
            if ((lane & (2 * d - 1)) == 0 && lane + d <= p)
                v = pygpu_scan_op(other, v);
        }
        if (lane == 0) {
            if (have)
                run = pygpu_scan_op(v, run);
            else
                run = v;
        }
        have = true;
        if (pm)
            break;
        pos -= 32 * W;
    }
    return run;
}
#endif

template <bool FULL, int V>
__device__ __forceinline__ void scan_tile(const pygpu_scan_t *in,
                                          pygpu_scan_t *out,
                                          size_t base, unsigned int remain, unsigned int tile,
                                          bool multi, int *flags, int *aggs, int *incls,
                                          pygpu_scan_t *buf, pygpu_scan_t *warp_tot,
                                          bool *warp_ok, pygpu_scan_t *tile_prefix)
{
    static_assert(FULL || V == 1, "vector accesses are for full tiles");
    static_assert(PYGPU_SCAN_ITEMS % V == 0, "V divides ITEMS");
    const unsigned int t = threadIdx.x, lane = t & 31u, warp = t >> 5;
    // chunks of 16 bytes through cp.async and the swizzled layout
    constexpr bool ASYNC = PYGPU_SCAN_ASYNC && FULL && V > 1 &&
                           V * sizeof(pygpu_scan_t) == 16;
    constexpr int CH = PYGPU_SCAN_ITEMS / V;      // a thread's chunks (ASYNC)
    (void)CH;

    // striped, coalesced load into shared memory (V elements an access)
#pragma unroll
    for (int k = 0; k < PYGPU_SCAN_ITEMS / V; ++k) {
        const unsigned int j = striped<V>(k, t);
        if (ASYNC) {
            copy16(buf + swz(j / V) * V, in + base + j);
        } else if (V > 1) {
            pygpu_scan_t v[V];
            vload<V>(in + base + j, v);
#pragma unroll
            for (int c = 0; c < V; ++c)
                buf[PYGPU_SCAN_PAD(j + c)] = v[c];
        } else if (FULL || j < remain) {
            buf[PYGPU_SCAN_PAD(j)] = in[base + j];
        }
    }
    if (ASYNC)
        wait_copies();
    PYGPU_SCAN_TRANSPOSE_SYNC();

    // blocked: thread t owns elements t*ITEMS ...; scan them in registers
    const unsigned int first = t * PYGPU_SCAN_ITEMS;
    const int nvalid = FULL ? PYGPU_SCAN_ITEMS
                            : (first >= remain ? 0
                               : (remain - first < PYGPU_SCAN_ITEMS ? (int)(remain - first)
                                                                   : PYGPU_SCAN_ITEMS));
#if PYGPU_SCAN_HOLD
    pygpu_scan_t x[PYGPU_SCAN_ITEMS];
#pragma unroll
    for (int k = 0; k < PYGPU_SCAN_ITEMS; ++k)
        if (FULL || k < nvalid)
            x[k] = buf[PYGPU_SCAN_PAD(first + k)];
#pragma unroll
    for (int k = 1; k < PYGPU_SCAN_ITEMS; ++k)
        if (FULL || k < nvalid)
            x[k] = pygpu_scan_op(x[k - 1], x[k]);
#else
    // only the thread's total now; the elements stay in shared memory and
    // are read again once the thread's prefix is known (fewer registers)
    pygpu_scan_t total;
    if (ASYNC) {
        // the thread's chunks t*CH ..., 16 bytes a read
#pragma unroll
        for (int c = 0; c < CH; ++c) {
            pygpu_scan_t v[V];
            vload<V>(buf + swz(t * CH + c) * V, v);
#pragma unroll
            for (int e = 0; e < V; ++e)
                total = (c == 0 && e == 0) ? v[0] : pygpu_scan_op(total, v[e]);
        }
    } else {
        if (FULL || nvalid > 0)
            total = buf[PYGPU_SCAN_PAD(first)];
#pragma unroll
        for (int k = 1; k < PYGPU_SCAN_ITEMS; ++k)
            if (FULL || k < nvalid)
                total = pygpu_scan_op(total, buf[PYGPU_SCAN_PAD(first + k)]);
    }
#endif

    // warp inclusive scan of the threads' totals
    bool ok = FULL || nvalid > 0;
    pygpu_scan_t v;
#if PYGPU_SCAN_HOLD
    if (ok)
        v = x[(FULL ? PYGPU_SCAN_ITEMS : (nvalid > 0 ? nvalid : 1)) - 1];
#else
    if (ok)
        v = total;
#endif
#pragma unroll
    for (unsigned int d = 1; d < 32; d <<= 1) {
        pygpu_scan_t other = shfl_up(v, d);
        bool other_ok = __shfl_up_sync(0xffffffffu, ok, d);
        if (lane >= d && other_ok) {
            if (ok)
                v = pygpu_scan_op(other, v);
            else
                v = other;
            ok = true;
        }
    }
    // this thread's exclusive prefix within the warp
    pygpu_scan_t pre = shfl_up(v, 1);
    bool pre_ok = __shfl_up_sync(0xffffffffu, ok, 1) && lane > 0;
    if (lane == 31) {
        if (ok)
            warp_tot[warp] = v;
        warp_ok[warp] = ok;
    }
    __syncthreads();

    // prefix of the warps before this one
    pygpu_scan_t wpre;
    bool wpre_ok = false;
    for (unsigned int w = 0; w < warp; ++w)
        if (warp_ok[w])
            combine(wpre_ok, wpre, true, warp_tot[w]);

    if (warp == 0) {
        pygpu_scan_t prefix;
        bool prefix_ok = false;
        if (multi) {
            // the tile's aggregate: all warps (tile 0 and every full tile have it)
            pygpu_scan_t agg;
            bool agg_ok = false;
            for (unsigned int w = 0; w < PYGPU_SCAN_WARPS; ++w)
                if (warp_ok[w])
                    combine(agg_ok, agg, true, warp_tot[w]);
#if PYGPU_SCAN_PACKED
            if (tile == 0) {
                if (lane == 0)
                    publish(flags, 0, 2u, agg);
            } else {
                if (lane == 0)
                    publish(flags, tile, 1u, agg);
                prefix = look_back_packed(flags, tile);
                prefix_ok = true;
                if (lane == 0)
                    publish(flags, tile, 2u, pygpu_scan_op(prefix, agg));
            }
#else
            if (tile == 0) {
                if (lane == 0) {
                    store_slot(incls, 0, agg);
                    __threadfence();
                    ((volatile int *)flags)[0] = 2;
                }
            } else {
                if (lane == 0) {
                    store_slot(aggs, tile, agg);
                    __threadfence();
                    ((volatile int *)flags)[tile] = 1;
                }
                prefix = look_back(flags, aggs, incls, tile);
                prefix_ok = true;
                if (lane == 0) {
                    store_slot(incls, tile, pygpu_scan_op(prefix, agg));
                    __threadfence();
                    ((volatile int *)flags)[tile] = 2;
                }
            }
#endif
        }
        if (lane == 0) {
            if (prefix_ok)
                *tile_prefix = prefix;
            warp_ok[PYGPU_SCAN_WARPS] = prefix_ok;
        }
    }
    __syncthreads();

    // this thread's prefix: tile prefix, then earlier warps, then earlier lanes
    bool p_ok = false;
    pygpu_scan_t p;
    if (warp_ok[PYGPU_SCAN_WARPS])
        combine(p_ok, p, true, *tile_prefix);
    combine(p_ok, p, wpre_ok, wpre);
    combine(p_ok, p, pre_ok, pre);

#if PYGPU_SCAN_HOLD
    if (p_ok) {
#pragma unroll
        for (int k = 0; k < PYGPU_SCAN_ITEMS; ++k)
            if (FULL || k < nvalid)
                x[k] = pygpu_scan_op(p, x[k]);
    }
#if PYGPU_SCAN_EXCLUSIVE
    {
        const pygpu_scan_t nt = pygpu_scan_neutral();
#pragma unroll
        for (int k = PYGPU_SCAN_ITEMS - 1; k > 0; --k)
            if (FULL || k < nvalid)
                x[k] = pygpu_scan_op(nt, x[k - 1]);
        if (FULL || nvalid > 0)
            x[0] = p_ok ? pygpu_scan_op(nt, p) : nt;
    }
#endif
    // back through shared memory (the reads above are done: barriers since)
#pragma unroll
    for (int k = 0; k < PYGPU_SCAN_ITEMS; ++k)
        if (FULL || k < nvalid)
            buf[PYGPU_SCAN_PAD(first + k)] = x[k];
#else
    // the thread's elements again, in order, each result in its own place
    {
#if PYGPU_SCAN_EXCLUSIVE
        const pygpu_scan_t nt = pygpu_scan_neutral();
#endif
        bool have = p_ok;
        pygpu_scan_t run;
        if (p_ok)
            run = p;
#pragma unroll
        for (int c = 0; ASYNC && c < CH; ++c) {
            pygpu_scan_t v[V];
            pygpu_scan_t *where = buf + swz(t * CH + c) * V;
            vload<V>(where, v);
#pragma unroll
            for (int e = 0; e < V; ++e) {
                const pygpu_scan_t val = v[e];
#if PYGPU_SCAN_EXCLUSIVE
                v[e] = have ? pygpu_scan_op(nt, run) : nt;
#endif
                if (have)
                    run = pygpu_scan_op(run, val);
                else
                    run = val;
                have = true;
#if !PYGPU_SCAN_EXCLUSIVE
                v[e] = run;
#endif
            }
            vstore<V>(where, v);
        }
#pragma unroll
        for (int k = 0; !ASYNC && k < PYGPU_SCAN_ITEMS; ++k) {
            if (FULL || k < nvalid) {
                const pygpu_scan_t val = buf[PYGPU_SCAN_PAD(first + k)];
#if PYGPU_SCAN_EXCLUSIVE
                buf[PYGPU_SCAN_PAD(first + k)] = have ? pygpu_scan_op(nt, run) : nt;
#endif
                if (have)
                    run = pygpu_scan_op(run, val);
                else
                    run = val;
                have = true;
#if !PYGPU_SCAN_EXCLUSIVE
                buf[PYGPU_SCAN_PAD(first + k)] = run;
#endif
            }
        }
    }
#endif
    PYGPU_SCAN_TRANSPOSE_SYNC();
#pragma unroll
    for (int k = 0; k < PYGPU_SCAN_ITEMS / V; ++k) {
        const unsigned int j = striped<V>(k, t);
        if (ASYNC) {
            pygpu_scan_t v[V];
            vload<V>(buf + swz(j / V) * V, v);
            vstore<V>(out + base + j, v);
        } else if (V > 1) {
            pygpu_scan_t v[V];
#pragma unroll
            for (int c = 0; c < V; ++c)
                v[c] = buf[PYGPU_SCAN_PAD(j + c)];
            vstore<V>(out + base + j, v);
        } else if (FULL || j < remain) {
            out[base + j] = buf[PYGPU_SCAN_PAD(j)];
        }
    }
}

}  // namespace pygpu_scan

extern "C" __global__ void __launch_bounds__(PYGPU_SCAN_THREADS, PYGPU_SCAN_MIN_BLOCKS)
${name}(const pygpu_scan_t *pygpu_in, pygpu_scan_t *pygpu_out, unsigned long long pygpu_n,
        unsigned int *pygpu_counter, int *pygpu_flags, int *pygpu_aggs, int *pygpu_incls,
        unsigned int pygpu_vec_ok)
{
    __shared__ __align__(16) unsigned char buf_raw[PYGPU_SCAN_PAD(PYGPU_SCAN_TILE) *
                                                   sizeof(pygpu_scan_t)];
    __shared__ __align__(16) unsigned char tot_raw[(PYGPU_SCAN_WARPS + 1) * sizeof(pygpu_scan_t)];
    __shared__ bool warp_ok[PYGPU_SCAN_WARPS + 1];
    __shared__ unsigned int tile_id;
    pygpu_scan_t *buf = reinterpret_cast<pygpu_scan_t *>(buf_raw);
    pygpu_scan_t *warp_tot = reinterpret_cast<pygpu_scan_t *>(tot_raw);

    const bool multi = pygpu_counter != 0;
    if (threadIdx.x == 0)
        tile_id = multi ? atomicAdd(pygpu_counter, 1u) : blockIdx.x;
    __syncthreads();
    const unsigned int tile = tile_id;
    const size_t base = (size_t)tile * PYGPU_SCAN_TILE;
    const unsigned long long left = pygpu_n - base;
    if (left >= PYGPU_SCAN_TILE) {
#if PYGPU_SCAN_VEC > 1
        if (pygpu_vec_ok) {
            pygpu_scan::scan_tile<true, PYGPU_SCAN_VEC>(
                pygpu_in, pygpu_out, base, PYGPU_SCAN_TILE, tile, multi, pygpu_flags, pygpu_aggs,
                pygpu_incls, buf, warp_tot, warp_ok, warp_tot + PYGPU_SCAN_WARPS);
            return;
        }
#endif
        pygpu_scan::scan_tile<true, 1>(pygpu_in, pygpu_out, base, PYGPU_SCAN_TILE, tile, multi,
                                       pygpu_flags, pygpu_aggs, pygpu_incls, buf, warp_tot,
                                       warp_ok, warp_tot + PYGPU_SCAN_WARPS);
    } else {
        pygpu_scan::scan_tile<false, 1>(pygpu_in, pygpu_out, base, (unsigned int)left, tile,
                                        multi, pygpu_flags, pygpu_aggs, pygpu_incls, buf,
                                        warp_tot, warp_ok, warp_tot + PYGPU_SCAN_WARPS);
    }
}
