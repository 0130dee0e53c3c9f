"""Tiles copied by the Tensor Memory Accelerator (TMA, sm_90+): each block
loads a 32x32 tile of a 2-D float32 array into shared memory with one bulk
tensor copy (cp.async.bulk.tensor, completed on an mbarrier), computes
2*x + 1 on it, and stores it back with a bulk tensor copy.  The array's
sides are not multiples of 32: the loads fill the out-of-bounds part of a
tile with zeros and the stores drop it, which the check covers.

Both descriptors are pygpu.driver.TensorMap objects, passed by value as
`const __grid_constant__` kernel parameters of 128 bytes.

    python3 examples/tma_copy.py
"""

import numpy as np

import _common
from pygpu.compiler import compile

TILE = 32
SOURCE = r"""
// the driver's CUtensorMap: 128 opaque bytes, 64-byte aligned
struct alignas(64) TensorMap { unsigned long long opaque[16]; };

#define TILE %(tile)d

__device__ __forceinline__ void wait_phase(unsigned bar, unsigned phase)
{
    unsigned done = 0;
    while (!done)
        asm volatile("{\n\t.reg .pred p;\n\t"
                     "mbarrier.try_wait.parity.shared::cta.b64 p, [%%1], %%2;\n\t"
                     "selp.u32 %%0, 1, 0, p;\n\t}"
                     : "=r"(done) : "r"(bar), "r"(phase) : "memory");
}

extern "C" __global__ void __launch_bounds__(256)
tma_scale(const __grid_constant__ TensorMap src, const __grid_constant__ TensorMap dst)
{
    __shared__ alignas(128) float tile[TILE * TILE];
    __shared__ alignas(8) unsigned long long bar;
    const int x = blockIdx.x * TILE, y = blockIdx.y * TILE;   // innermost first
    const unsigned bar_s = (unsigned)__cvta_generic_to_shared(&bar);
    const unsigned tile_s = (unsigned)__cvta_generic_to_shared(tile);

    if (threadIdx.x == 0) {
        asm volatile("mbarrier.init.shared::cta.b64 [%%0], 1;" :: "r"(bar_s) : "memory");
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%%0], %%1;"
                     :: "r"(bar_s), "r"((unsigned)sizeof tile) : "memory");
        asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile"
                     ".mbarrier::complete_tx::bytes [%%0], [%%1, {%%2, %%3}], [%%4];"
                     :: "r"(tile_s), "l"(&src), "r"(x), "r"(y), "r"(bar_s) : "memory");
    }
    wait_phase(bar_s, 0);

    for (int i = threadIdx.x; i < TILE * TILE; i += blockDim.x)
        tile[i] = 2.0f * tile[i] + 1.0f;

    // the threads' writes, then the async proxy's read of them
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    __syncthreads();
    if (threadIdx.x == 0) {
        asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group"
                     " [%%0, {%%1, %%2}], [%%3];"
                     :: "l"(&dst), "r"(x), "r"(y), "r"(tile_s) : "memory");
        asm volatile("cp.async.bulk.commit_group;" ::: "memory");
        asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
    }
}
""" % {"tile": TILE}


def build(arch: str = "sm_90") -> bytes:
    """The kernel's cubin for arch (NVRTC; no GPU needed)."""
    return compile(SOURCE, arch=arch, target="cubin")


def main(rows: int = 200, cols: int = 328) -> None:
    cubin = build()
    print("compiled tma_scale for sm_90 (%d bytes of cubin)" % len(cubin))
    dev = _common.gpu_or_exit("tma_copy")
    import pygpu.driver as cuda

    major, _ = dev.compute_capability()
    if major < 9:
        print("no TMA on compute capability %d.x: it needs sm_90 or newer" % major)
        return
    cubin = build("sm_%d%d" % dev.compute_capability())
    kernel = cuda.module_from_buffer(bytes(cubin)).get_function("tma_scale")
    assert kernel.param_sizes == (128, 128), kernel.param_sizes
    rng = np.random.default_rng()
    a = rng.standard_normal((rows, cols)).astype(np.float32)
    src = cuda.to_device(a)
    dst = cuda.mem_alloc(a.nbytes)
    cuda.memset_d32(dst, 0x7FC00000, a.size)  # NaN: an unwritten element shows
    src_map = cuda.TensorMap(src, (TILE, TILE), shape=a.shape, dtype=a.dtype)
    dst_map = cuda.TensorMap(dst, (TILE, TILE), shape=a.shape, dtype=a.dtype)
    grid = ((cols + TILE - 1) // TILE, (rows + TILE - 1) // TILE)
    kernel(src_map, dst_map, block=(256, 1, 1), grid=grid)
    out = cuda.from_device(dst, a.shape, a.dtype)
    _common.check(
        np.array_equal(out, 2 * a + 1),
        "2*x + 1 through TMA tiles for all %dx%d elements" % (rows, cols),
    )


if __name__ == "__main__":
    main()
