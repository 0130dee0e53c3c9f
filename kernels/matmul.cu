// C = A B for row-major float matrices, A: m x k, B: k x n, C: m x n.
// Each block computes a TILE x TILE tile of C, staging tiles of A and B
// through shared memory; any m, n, k (the edges are padded with zeros).
#ifndef TILE
#define TILE 16
#endif

extern "C" __global__ void matmul_tiled(float *__restrict__ c, const float *__restrict__ a,
                                        const float *__restrict__ b, int m, int n, int k)
{
    __shared__ float as[TILE][TILE];
    __shared__ float bs[TILE][TILE + 1];      // +1: no bank conflicts on the column reads
    int row = blockIdx.y * TILE + threadIdx.y;
    int col = blockIdx.x * TILE + threadIdx.x;
    float acc = 0.0f;
    for (int t = 0; t < k; t += TILE) {
        int ak = t + threadIdx.x, bk = t + threadIdx.y;
        as[threadIdx.y][threadIdx.x] = (row < m && ak < k) ? a[(size_t)row * k + ak] : 0.0f;
        bs[threadIdx.y][threadIdx.x] = (bk < k && col < n) ? b[(size_t)bk * n + col] : 0.0f;
        __syncthreads();
#pragma unroll
        for (int j = 0; j < TILE; j++)
            acc += as[threadIdx.y][j] * bs[j][threadIdx.x];
        __syncthreads();
    }
    if (row < m && col < n)
        c[(size_t)row * n + col] = acc;
}
