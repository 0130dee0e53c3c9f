// Helpers of pygpu's generated element-wise kernels (pygpu/elementwise.py
// pastes this file, after elementwise_complex.cuh, in front of each
// generated kernel).
//
// Every element-wise kernel is a grid-stride loop over n elements, so any
// grid covers any n:
//
//     for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n;
//          i += (size_t)gridDim.x * blockDim.x)
//         out[i] = <expression of x[i], y[i], ...>;
//
// Strided or broadcast operands read x[ox] instead, ox computed from i by
// the kernel's generated index code (one div/mod per collapsed dimension).
#pragma once

namespace pygpu {

// NumPy's maximum/minimum: a NaN in either operand gives NaN
template <typename T> __device__ inline T maximum(T a, T b)
{ return (a != a) ? a : ((b != b) ? b : (a > b ? a : b)); }
template <typename T> __device__ inline T minimum(T a, T b)
{ return (a != a) ? a : ((b != b) ? b : (a < b ? a : b)); }

// NumPy's fmax/fmin: a NaN operand is ignored
template <typename T> __device__ inline T fmax_(T a, T b)
{ return (a != a) ? b : ((b != b) ? a : (a > b ? a : b)); }
template <typename T> __device__ inline T fmin_(T a, T b)
{ return (a != a) ? b : ((b != b) ? a : (a < b ? a : b)); }

// integer power by squaring, as NumPy computes int ** int (b >= 0)
template <typename T> __device__ inline T ipow(T a, T b)
{
    T r = 1;
    while (b > 0) {
        if (b & 1)
            r *= a;
        a *= a;
        b >>= 1;
    }
    return r;
}

// Python's floor division and modulo (the sign follows the divisor)
template <typename T> __device__ inline T floordiv_int(T a, T b)
{
    if (b == 0)
        return 0;
    T q = a / b;
    if ((a % b != 0) && ((a < 0) != (b < 0)))
        q -= 1;
    return q;
}
template <typename T> __device__ inline T mod_int(T a, T b)
{
    if (b == 0)
        return 0;
    T r = a % b;
    if (r != 0 && ((r < 0) != (b < 0)))
        r += b;
    return r;
}
template <typename T> __device__ inline T floordiv_float(T a, T b)
{
    return floor(a / b);
}
template <typename T> __device__ inline T mod_float(T a, T b)
{
    T r = fmod(a, b);
    if (r != 0 && ((r < 0) != (b < 0)))
        r += b;
    return r;
}

// the sign of x (-1, 0, 1; NaN stays NaN)
template <typename T> __device__ inline T sign(T x)
{ return x > T(0) ? T(1) : (x < T(0) ? T(-1) : x); }

}  // namespace pygpu
