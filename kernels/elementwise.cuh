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

// the float and double versions of the C functions the helpers below use
// (a template picks the one of its own precision)
__device__ inline float fmod_(float a, float b) { return fmodf(a, b); }
__device__ inline double fmod_(double a, double b) { return fmod(a, b); }
__device__ inline float floor_(float x) { return floorf(x); }
__device__ inline double floor_(double x) { return floor(x); }
__device__ inline float copysign_(float a, float b) { return copysignf(a, b); }
__device__ inline double copysign_(double a, double b) { return copysign(a, b); }

// NumPy's float floor division and remainder (its npy_divmod): the
// remainder r takes the divisor's sign (a zero one too: -4.0 % 2.0 is +0.0,
// 4.0 % -2.0 is -0.0); the quotient is (a - r) / b, which is nearly an
// integer, rounded to the nearest one, not floor(a / b) (1.0 // 0.1 is 9,
// as a == (a // b) * b + a % b asks, where a / b rounds to 10).  b == 0:
// a / b and fmod(a, 0) (inf or NaN); NaN stays NaN; b infinite: a finite a
// of b's sign gives 0 and a, of the other sign -1 and b (-1.0 % inf is inf).
template <typename T> __device__ inline T divmod_float(T a, T b, T *rem)
{
    T r = fmod_(a, b);
    if (b == T(0)) {
        *rem = r;
        return a / b;
    }
    T q = (a - r) / b;
    if (r == T(0)) {
        r = copysign_(T(0), b);
    } else if ((r < T(0)) != (b < T(0))) {
        r += b;
        q -= T(1);
    }
    *rem = r;
    if (q == T(0))
        return copysign_(T(0), a / b);
    T f = floor_(q);
    return q - f > T(0.5) ? f + T(1) : f;
}
template <typename T> __device__ inline T floordiv_float(T a, T b)
{
    T r;
    return divmod_float<T>(a, b, &r);
}
template <typename T> __device__ inline T mod_float(T a, T b)
{
    T r;
    divmod_float<T>(a, b, &r);
    return r;
}

// the sign of x (-1, 0, 1; NaN stays NaN)
template <typename T> __device__ inline T sign(T x)
{ return x > T(0) ? T(1) : (x < T(0) ? T(-1) : x); }

}  // namespace pygpu
