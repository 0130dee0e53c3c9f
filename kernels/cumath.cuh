// pygpu.cumath: element-wise math on float, double and their complex types.
//
// pygpu/cumath.py appends one instantiation line per kernel to this text,
// for one dtype at a time:
//     PYGPU_CUMATH_UNARY(cumath_sin_float, float, op_sin)
//     PYGPU_CUMATH_FMOD(cumath_fmod_float, float)   ...
// Every kernel is a grid-stride loop over n elements (any grid works); the
// unary maps move 16 bytes per load and store where both pointers allow it.
// Complex numbers are pygpu_cplx<T>: two T, the layout of NumPy's complex64
// and complex128.

typedef unsigned long long pygpu_size_t;

template <typename T> struct alignas(2 * sizeof(T)) pygpu_cplx { T re, im; };

// ---- the real functions, one overload per precision ----

#define PYGPU_REAL_FN(NAME, FLOATFN, DOUBLEFN)                                        \
    __device__ __forceinline__ float NAME(float x) { return FLOATFN(x); }      \
    __device__ __forceinline__ double NAME(double x) { return DOUBLEFN(x); }

PYGPU_REAL_FN(pg_fabs, fabsf, fabs)
PYGPU_REAL_FN(pg_ceil, ceilf, ceil)
PYGPU_REAL_FN(pg_floor, floorf, floor)
PYGPU_REAL_FN(pg_trunc, truncf, trunc)
PYGPU_REAL_FN(pg_rint, rintf, rint)
PYGPU_REAL_FN(pg_exp, expf, exp)
PYGPU_REAL_FN(pg_exp2, exp2f, exp2)
PYGPU_REAL_FN(pg_expm1, expm1f, expm1)
PYGPU_REAL_FN(pg_log, logf, log)
PYGPU_REAL_FN(pg_log2, log2f, log2)
PYGPU_REAL_FN(pg_log10, log10f, log10)
PYGPU_REAL_FN(pg_log1p, log1pf, log1p)
PYGPU_REAL_FN(pg_sqrt, sqrtf, sqrt)
PYGPU_REAL_FN(pg_cbrt, cbrtf, cbrt)
PYGPU_REAL_FN(pg_sin, sinf, sin)
PYGPU_REAL_FN(pg_cos, cosf, cos)
PYGPU_REAL_FN(pg_tan, tanf, tan)
PYGPU_REAL_FN(pg_asin, asinf, asin)
PYGPU_REAL_FN(pg_acos, acosf, acos)
PYGPU_REAL_FN(pg_atan, atanf, atan)
PYGPU_REAL_FN(pg_sinh, sinhf, sinh)
PYGPU_REAL_FN(pg_cosh, coshf, cosh)
PYGPU_REAL_FN(pg_tanh, tanhf, tanh)
PYGPU_REAL_FN(pg_asinh, asinhf, asinh)
PYGPU_REAL_FN(pg_acosh, acoshf, acosh)
PYGPU_REAL_FN(pg_atanh, atanhf, atanh)

__device__ __forceinline__ float pg_hypot(float x, float y) { return hypotf(x, y); }
__device__ __forceinline__ double pg_hypot(double x, double y) { return hypot(x, y); }
__device__ __forceinline__ float pg_atan2(float y, float x) { return atan2f(y, x); }
__device__ __forceinline__ double pg_atan2(double y, double x) { return atan2(y, x); }
__device__ __forceinline__ float pg_copysign(float x, float y) { return copysignf(x, y); }
__device__ __forceinline__ double pg_copysign(double x, double y) { return copysign(x, y); }
__device__ __forceinline__ float pg_fmod(float x, float y) { return fmodf(x, y); }
__device__ __forceinline__ double pg_fmod(double x, double y) { return fmod(x, y); }
__device__ __forceinline__ float pg_ldexp(float x, int e) { return ldexpf(x, e); }
__device__ __forceinline__ double pg_ldexp(double x, int e) { return ldexp(x, e); }
__device__ __forceinline__ float pg_frexp(float x, int *e) { return frexpf(x, e); }
__device__ __forceinline__ double pg_frexp(double x, int *e) { return frexp(x, e); }
__device__ __forceinline__ float pg_modf(float x, float *i) { return modff(x, i); }
__device__ __forceinline__ double pg_modf(double x, double *i) { return modf(x, i); }
__device__ __forceinline__ void pg_sincos(float x, float *s, float *c) { sincosf(x, s, c); }
__device__ __forceinline__ void pg_sincos(double x, double *s, double *c) { sincos(x, s, c); }

// ---- complex arithmetic and functions (principal branches, as NumPy) ----

template <typename T>
__device__ __forceinline__ pygpu_cplx<T> c_make(T re, T im)
{
    pygpu_cplx<T> z;
    z.re = re;
    z.im = im;
    return z;
}

template <typename T>
__device__ __forceinline__ pygpu_cplx<T> c_add(pygpu_cplx<T> a, pygpu_cplx<T> b)
{
    return c_make(a.re + b.re, a.im + b.im);
}

template <typename T>
__device__ __forceinline__ pygpu_cplx<T> c_sub(pygpu_cplx<T> a, pygpu_cplx<T> b)
{
    return c_make(a.re - b.re, a.im - b.im);
}

template <typename T>
__device__ __forceinline__ pygpu_cplx<T> c_mul(pygpu_cplx<T> a, pygpu_cplx<T> b)
{
    return c_make(a.re * b.re - a.im * b.im, a.re * b.im + a.im * b.re);
}

template <typename T>
__device__ inline pygpu_cplx<T> c_exp(pygpu_cplx<T> z)
{
    T s, c, e = pg_exp(z.re);
    pg_sincos(z.im, &s, &c);
    return c_make(e * c, e * s);
}

template <typename T>
__device__ inline pygpu_cplx<T> c_log(pygpu_cplx<T> z)
{
    return c_make(pg_log(pg_hypot(z.re, z.im)), pg_atan2(z.im, z.re));
}

template <typename T>
__device__ inline pygpu_cplx<T> c_log10(pygpu_cplx<T> z)
{
    const T inv_ln10 = (T)0.43429448190325182765112891891660508;
    pygpu_cplx<T> l = c_log(z);
    return c_make(l.re * inv_ln10, l.im * inv_ln10);
}

template <typename T>
__device__ inline pygpu_cplx<T> c_sqrt(pygpu_cplx<T> z)
{
    if (z.re == (T)0 && z.im == (T)0)
        return c_make((T)0, z.im);
    T t = pg_sqrt((pg_fabs(z.re) + pg_hypot(z.re, z.im)) * (T)0.5);
    if (z.re >= (T)0)
        return c_make(t, z.im / (2 * t));
    return c_make(pg_fabs(z.im) / (2 * t), pg_copysign(t, z.im));
}

template <typename T>
__device__ inline pygpu_cplx<T> c_sin(pygpu_cplx<T> z)
{
    T s, c;
    pg_sincos(z.re, &s, &c);
    return c_make(s * pg_cosh(z.im), c * pg_sinh(z.im));
}

template <typename T>
__device__ inline pygpu_cplx<T> c_cos(pygpu_cplx<T> z)
{
    T s, c;
    pg_sincos(z.re, &s, &c);
    return c_make(c * pg_cosh(z.im), -s * pg_sinh(z.im));
}

// tanh(x + iy) = (sinh 2x + i sin 2y) / (cosh 2x + cos 2y); past |x| = 20
// the quotient is +-1 to every bit of a double (and cosh would overflow)
template <typename T>
__device__ inline pygpu_cplx<T> c_tanh(pygpu_cplx<T> z)
{
    if (pg_fabs(z.re) > (T)20) {
        T s, c;
        pg_sincos(2 * z.im, &s, &c);
        T e = pg_exp(-2 * pg_fabs(z.re));
        return c_make(pg_copysign((T)1, z.re), 2 * s * e);
    }
    T s, c;
    pg_sincos(2 * z.im, &s, &c);
    T d = pg_cosh(2 * z.re) + c;
    return c_make(pg_sinh(2 * z.re) / d, s / d);
}

// tan z = -i tanh(iz)
template <typename T>
__device__ inline pygpu_cplx<T> c_tan(pygpu_cplx<T> z)
{
    pygpu_cplx<T> w = c_tanh(c_make(-z.im, z.re));
    return c_make(w.im, -w.re);
}

template <typename T>
__device__ inline pygpu_cplx<T> c_sinh(pygpu_cplx<T> z)
{
    T s, c;
    pg_sincos(z.im, &s, &c);
    return c_make(pg_sinh(z.re) * c, pg_cosh(z.re) * s);
}

template <typename T>
__device__ inline pygpu_cplx<T> c_cosh(pygpu_cplx<T> z)
{
    T s, c;
    pg_sincos(z.im, &s, &c);
    return c_make(pg_cosh(z.re) * c, pg_sinh(z.re) * s);
}

// asinh z = log(z + sqrt(z^2 + 1)), computed for Re z >= 0 (no cancellation)
// and reflected: asinh(-z) = -asinh(z)
template <typename T>
__device__ inline pygpu_cplx<T> c_asinh(pygpu_cplx<T> z)
{
    bool neg = z.re < (T)0;
    if (neg)
        z = c_make(-z.re, -z.im);
    pygpu_cplx<T> w = c_make((z.re - z.im) * (z.re + z.im) + (T)1, 2 * z.re * z.im);
    pygpu_cplx<T> r = c_log(c_add(z, c_sqrt(w)));
    if (neg)
        r = c_make(-r.re, -r.im);
    return r;
}

// asin z = -i asinh(iz)
template <typename T>
__device__ inline pygpu_cplx<T> c_asin(pygpu_cplx<T> z)
{
    pygpu_cplx<T> w = c_asinh(c_make(-z.im, z.re));
    return c_make(w.im, -w.re);
}

template <typename T>
__device__ inline pygpu_cplx<T> c_acos(pygpu_cplx<T> z)
{
    const T half_pi = (T)1.57079632679489661923132169163975144;
    pygpu_cplx<T> a = c_asin(z);
    return c_make(half_pi - a.re, -a.im);
}

// acosh z = log(z + sqrt(z + 1) sqrt(z - 1))
template <typename T>
__device__ inline pygpu_cplx<T> c_acosh(pygpu_cplx<T> z)
{
    pygpu_cplx<T> p = c_sqrt(c_make(z.re + (T)1, z.im));
    pygpu_cplx<T> m = c_sqrt(c_make(z.re - (T)1, z.im));
    return c_log(c_add(z, c_mul(p, m)));
}

// atanh z = (log(1 + z) - log(1 - z)) / 2
template <typename T>
__device__ inline pygpu_cplx<T> c_atanh(pygpu_cplx<T> z)
{
    pygpu_cplx<T> a = c_log(c_make((T)1 + z.re, z.im));
    pygpu_cplx<T> b = c_log(c_make((T)1 - z.re, -z.im));
    pygpu_cplx<T> d = c_sub(a, b);
    return c_make(d.re * (T)0.5, d.im * (T)0.5);
}

// atan z = -i atanh(iz)
template <typename T>
__device__ inline pygpu_cplx<T> c_atan(pygpu_cplx<T> z)
{
    pygpu_cplx<T> w = c_atanh(c_make(-z.im, z.re));
    return c_make(w.im, -w.re);
}

// ---- one operation type per function: real overloads, complex where defined ----

#define PYGPU_OP_REAL(NAME)                                                            \
    struct op_##NAME {                                                                 \
        static __device__ __forceinline__ float apply(float x) { return pg_##NAME(x); }  \
        static __device__ __forceinline__ double apply(double x) { return pg_##NAME(x); } \
    };

#define PYGPU_OP_BOTH(NAME)                                                            \
    struct op_##NAME {                                                                 \
        static __device__ __forceinline__ float apply(float x) { return pg_##NAME(x); }  \
        static __device__ __forceinline__ double apply(double x) { return pg_##NAME(x); } \
        template <typename T>                                                          \
        static __device__ __forceinline__ pygpu_cplx<T> apply(pygpu_cplx<T> z)         \
        {                                                                              \
            return c_##NAME(z);                                                        \
        }                                                                              \
    };

PYGPU_OP_REAL(fabs)
PYGPU_OP_REAL(ceil)
PYGPU_OP_REAL(floor)
PYGPU_OP_REAL(trunc)
PYGPU_OP_REAL(rint)
PYGPU_OP_REAL(exp2)
PYGPU_OP_REAL(expm1)
PYGPU_OP_REAL(log2)
PYGPU_OP_REAL(log1p)
PYGPU_OP_REAL(cbrt)
PYGPU_OP_BOTH(exp)
PYGPU_OP_BOTH(log)
PYGPU_OP_BOTH(log10)
PYGPU_OP_BOTH(sqrt)
PYGPU_OP_BOTH(sin)
PYGPU_OP_BOTH(cos)
PYGPU_OP_BOTH(tan)
PYGPU_OP_BOTH(asin)
PYGPU_OP_BOTH(acos)
PYGPU_OP_BOTH(atan)
PYGPU_OP_BOTH(sinh)
PYGPU_OP_BOTH(cosh)
PYGPU_OP_BOTH(tanh)
PYGPU_OP_BOTH(asinh)
PYGPU_OP_BOTH(acosh)
PYGPU_OP_BOTH(atanh)

// ---- the loops ----

template <typename T, int W> struct alignas(16) pygpu_pack { T v[W]; };

// y[i] = Op(x[i]) for i < n; 16-byte loads and stores when x and y are both
// 16-byte aligned (x == y is allowed: each element is read before written
// by the same thread).
template <typename T, typename Op>
__device__ inline void pygpu_unary_map(const T *x, T *y, pygpu_size_t n)
{
    const pygpu_size_t stride = (pygpu_size_t)blockDim.x * gridDim.x;
    const pygpu_size_t tid = (pygpu_size_t)blockIdx.x * blockDim.x + threadIdx.x;
    constexpr int W = sizeof(T) < 16 ? (int)(16 / sizeof(T)) : 1;
    if (W > 1 && ((((pygpu_size_t)x) | ((pygpu_size_t)y)) & 15) == 0) {
        typedef pygpu_pack<T, W> V;
        const pygpu_size_t nv = n / W;
        const V *xv = (const V *)x;
        V *yv = (V *)y;
        for (pygpu_size_t i = tid; i < nv; i += stride) {
            V a = xv[i], b;
#pragma unroll
            for (int k = 0; k < W; k++)
                b.v[k] = Op::apply(a.v[k]);
            yv[i] = b;
        }
        for (pygpu_size_t i = nv * W + tid; i < n; i += stride)
            y[i] = Op::apply(x[i]);
    }
    else {
        for (pygpu_size_t i = tid; i < n; i += stride)
            y[i] = Op::apply(x[i]);
    }
}

#define PYGPU_GRID_STRIDE(i, n)                                                        \
    for (pygpu_size_t i = (pygpu_size_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n); \
         i += (pygpu_size_t)blockDim.x * gridDim.x)

#define PYGPU_CUMATH_UNARY(KNAME, T, OP)                                               \
    extern "C" __global__ void KNAME(const T *x, T *y, pygpu_size_t n)                 \
    {                                                                                  \
        pygpu_unary_map<T, OP>(x, y, n);                                               \
    }

// z = fmod(arg, mod), the sign of arg
#define PYGPU_CUMATH_FMOD(KNAME, T)                                                    \
    extern "C" __global__ void KNAME(const T *arg, const T *mod, T *z, pygpu_size_t n) \
    {                                                                                  \
        PYGPU_GRID_STRIDE(i, n) z[i] = pg_fmod(arg[i], mod[i]);                        \
    }

// z = sig * 2**int(expt), the exponent of type E truncated toward zero
#define PYGPU_CUMATH_LDEXP(KNAME, T, E)                                                \
    extern "C" __global__ void KNAME(const T *sig, const E *expt, T *z, pygpu_size_t n) \
    {                                                                                  \
        PYGPU_GRID_STRIDE(i, n) z[i] = pg_ldexp(sig[i], (int)expt[i]);                 \
    }

// x = significand * 2**exponent, 0.5 <= |significand| < 1 (or 0)
#define PYGPU_CUMATH_FREXP(KNAME, T)                                                   \
    extern "C" __global__ void KNAME(const T *x, T *significand, T *exponent,          \
                                     pygpu_size_t n)                                   \
    {                                                                                  \
        PYGPU_GRID_STRIDE(i, n)                                                        \
        {                                                                              \
            int e = 0;                                                                 \
            significand[i] = pg_frexp(x[i], &e);                                       \
            exponent[i] = (T)e;                                                        \
        }                                                                              \
    }

// x = intpart + fracpart, both with the sign of x
#define PYGPU_CUMATH_MODF(KNAME, T)                                                    \
    extern "C" __global__ void KNAME(const T *x, T *intpart, T *fracpart, pygpu_size_t n) \
    {                                                                                  \
        PYGPU_GRID_STRIDE(i, n)                                                        \
        {                                                                              \
            T ip;                                                                      \
            fracpart[i] = pg_modf(x[i], &ip);                                          \
            intpart[i] = ip;                                                           \
        }                                                                              \
    }
