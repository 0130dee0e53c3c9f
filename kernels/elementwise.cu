// Element-wise maps over n values, grid-stride loops (any grid size works).

extern "C" __global__ void vector_add(float *__restrict__ z, const float *__restrict__ x,
                                      const float *__restrict__ y, int n)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        z[i] = x[i] + y[i];
}

// cos(x)^2 + sin(x)^2, which is 1 up to rounding
extern "C" __global__ void sincos_identity(float *__restrict__ out,
                                           const float *__restrict__ x, int n)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        float c = cosf(x[i]), s = sinf(x[i]);
        out[i] = c * c + s * s;
    }
}

// out = a * x + y
extern "C" __global__ void saxpy(float *__restrict__ out, const float *__restrict__ x,
                                 const float *__restrict__ y, float a, int n)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        out[i] = a * x[i] + y[i];
}
