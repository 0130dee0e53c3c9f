// pygpu::complex<T>: the complex type of generated kernels (complex64 is
// pygpu::complex<float>, complex128 pygpu::complex<double>; the layout is
// NumPy's: real part, then imaginary part).  `pycuda::` names the same
// namespace, so kernels written for PyCUDA compile unchanged.
//
// Arithmetic with complex and real operands, comparisons ==/!=, and the
// functions real imag conj abs arg norm polar exp log log10 sqrt pow
// sin cos tan sinh cosh tanh, found by argument-dependent lookup.
#pragma once

namespace pygpu {

template <typename T>
struct __align__(2 * sizeof(T)) complex {
    T _re, _im;

    typedef T value_type;

    __host__ __device__ complex(const T &re = T(), const T &im = T()) : _re(re), _im(im) {}
    template <typename U>
    __host__ __device__ explicit complex(const complex<U> &z) : _re(T(z.real())), _im(T(z.imag())) {}

    __host__ __device__ T real() const { return _re; }
    __host__ __device__ T imag() const { return _im; }
    __host__ __device__ void real(T v) { _re = v; }
    __host__ __device__ void imag(T v) { _im = v; }

    __host__ __device__ complex &operator+=(const complex &b) { _re += b._re; _im += b._im; return *this; }
    __host__ __device__ complex &operator-=(const complex &b) { _re -= b._re; _im -= b._im; return *this; }
    __host__ __device__ complex &operator*=(const complex &b) { *this = *this * b; return *this; }
    __host__ __device__ complex &operator/=(const complex &b) { *this = *this / b; return *this; }
    __host__ __device__ complex &operator+=(const T &b) { _re += b; return *this; }
    __host__ __device__ complex &operator-=(const T &b) { _re -= b; return *this; }
    __host__ __device__ complex &operator*=(const T &b) { _re *= b; _im *= b; return *this; }
    __host__ __device__ complex &operator/=(const T &b) { _re /= b; _im /= b; return *this; }

    // non-template friends: a real or integer operand converts to T
    friend __host__ __device__ complex operator+(const complex &a, const complex &b)
    { return complex(a._re + b._re, a._im + b._im); }
    friend __host__ __device__ complex operator-(const complex &a, const complex &b)
    { return complex(a._re - b._re, a._im - b._im); }
    friend __host__ __device__ complex operator*(const complex &a, const complex &b)
    { return complex(a._re * b._re - a._im * b._im, a._re * b._im + a._im * b._re); }
    friend __host__ __device__ complex operator/(const complex &a, const complex &b)
    {
        // Smith's algorithm: no overflow for large |b|
        T ar = a._re, ai = a._im, br = b._re, bi = b._im;
        if (::fabs(br) >= ::fabs(bi)) {
            if (br == T(0) && bi == T(0))
                return complex(ar / ::fabs(br), ai / ::fabs(br));
            T r = bi / br, d = br + bi * r;
            return complex((ar + ai * r) / d, (ai - ar * r) / d);
        }
        T r = br / bi, d = bi + br * r;
        return complex((ar * r + ai) / d, (ai * r - ar) / d);
    }
    friend __host__ __device__ complex operator+(const complex &a, const T &b) { return complex(a._re + b, a._im); }
    friend __host__ __device__ complex operator+(const T &a, const complex &b) { return complex(a + b._re, b._im); }
    friend __host__ __device__ complex operator-(const complex &a, const T &b) { return complex(a._re - b, a._im); }
    friend __host__ __device__ complex operator-(const T &a, const complex &b) { return complex(a - b._re, -b._im); }
    friend __host__ __device__ complex operator*(const complex &a, const T &b) { return complex(a._re * b, a._im * b); }
    friend __host__ __device__ complex operator*(const T &a, const complex &b) { return complex(a * b._re, a * b._im); }
    friend __host__ __device__ complex operator/(const complex &a, const T &b) { return complex(a._re / b, a._im / b); }
    friend __host__ __device__ complex operator/(const T &a, const complex &b) { return complex(a) / b; }
    friend __host__ __device__ complex operator-(const complex &a) { return complex(-a._re, -a._im); }
    friend __host__ __device__ complex operator+(const complex &a) { return a; }
    friend __host__ __device__ bool operator==(const complex &a, const complex &b) { return a._re == b._re && a._im == b._im; }
    friend __host__ __device__ bool operator!=(const complex &a, const complex &b) { return !(a == b); }
    friend __host__ __device__ bool operator==(const complex &a, const T &b) { return a._re == b && a._im == T(0); }
    friend __host__ __device__ bool operator!=(const complex &a, const T &b) { return !(a == b); }
    friend __host__ __device__ bool operator==(const T &a, const complex &b) { return b == a; }
    friend __host__ __device__ bool operator!=(const T &a, const complex &b) { return !(b == a); }
};

template <typename T> __host__ __device__ inline T real(const complex<T> &z) { return z.real(); }
template <typename T> __host__ __device__ inline T imag(const complex<T> &z) { return z.imag(); }
template <typename T> __host__ __device__ inline complex<T> conj(const complex<T> &z) { return complex<T>(z.real(), -z.imag()); }
template <typename T> __host__ __device__ inline T abs(const complex<T> &z) { return ::hypot(z.real(), z.imag()); }
template <typename T> __host__ __device__ inline T arg(const complex<T> &z) { return ::atan2(z.imag(), z.real()); }
template <typename T> __host__ __device__ inline T norm(const complex<T> &z) { return z.real() * z.real() + z.imag() * z.imag(); }
template <typename T> __host__ __device__ inline complex<T> polar(const T &r, const T &theta = T())
{ return complex<T>(r * ::cos(theta), r * ::sin(theta)); }

// real(x), imag(x) and conj(x) of real numbers, as NumPy has them
__host__ __device__ inline float real(float x) { return x; }
__host__ __device__ inline double real(double x) { return x; }
__host__ __device__ inline float imag(float) { return 0.0f; }
__host__ __device__ inline double imag(double) { return 0.0; }
__host__ __device__ inline float conj(float x) { return x; }
__host__ __device__ inline double conj(double x) { return x; }

template <typename T> __device__ inline complex<T> exp(const complex<T> &z)
{
    T e = ::exp(z.real());
    return complex<T>(e * ::cos(z.imag()), e * ::sin(z.imag()));
}
template <typename T> __device__ inline complex<T> log(const complex<T> &z)
{ return complex<T>(::log(abs(z)), arg(z)); }
template <typename T> __device__ inline complex<T> log10(const complex<T> &z)
{ return log(z) / ::log(T(10)); }
template <typename T> __device__ inline complex<T> sqrt(const complex<T> &z)
{
    T re = z.real(), im = z.imag();
    if (re == T(0) && im == T(0))
        return complex<T>(T(0), im);
    T t = ::sqrt((::fabs(re) + abs(z)) / T(2));
    if (re >= T(0))
        return complex<T>(t, im / (T(2) * t));
    return complex<T>(::fabs(im) / (T(2) * t), ::copysign(t, im));
}
template <typename T> __device__ inline complex<T> pow(const complex<T> &z, const complex<T> &w)
{
    if (z.real() == T(0) && z.imag() == T(0))
        return (w.real() == T(0) && w.imag() == T(0)) ? complex<T>(T(1)) : complex<T>(T(0));
    return exp(w * log(z));
}
template <typename T> __device__ inline complex<T> pow(const complex<T> &z, const T &w)
{ return pow(z, complex<T>(w)); }
template <typename T> __device__ inline complex<T> pow(const T &z, const complex<T> &w)
{ return pow(complex<T>(z), w); }
// as PyCUDA's plain (non-template) overloads for float and double: a real
// operand of another type converts, pow(z, 3) and pow(2, z) included
__device__ inline complex<float> pow(const complex<float> &z, const float &w)
{ return pow<float>(z, w); }
__device__ inline complex<float> pow(const float &z, const complex<float> &w)
{ return pow<float>(z, w); }
__device__ inline complex<double> pow(const complex<double> &z, const double &w)
{ return pow<double>(z, w); }
__device__ inline complex<double> pow(const double &z, const complex<double> &w)
{ return pow<double>(z, w); }
template <typename T> __device__ inline complex<T> sin(const complex<T> &z)
{ return complex<T>(::sin(z.real()) * ::cosh(z.imag()), ::cos(z.real()) * ::sinh(z.imag())); }
template <typename T> __device__ inline complex<T> cos(const complex<T> &z)
{ return complex<T>(::cos(z.real()) * ::cosh(z.imag()), -::sin(z.real()) * ::sinh(z.imag())); }
template <typename T> __device__ inline complex<T> sinh(const complex<T> &z)
{ return complex<T>(::sinh(z.real()) * ::cos(z.imag()), ::cosh(z.real()) * ::sin(z.imag())); }
template <typename T> __device__ inline complex<T> cosh(const complex<T> &z)
{ return complex<T>(::cosh(z.real()) * ::cos(z.imag()), ::sinh(z.real()) * ::sin(z.imag())); }
template <typename T> __device__ inline complex<T> tanh(const complex<T> &z)
{
    T x = z.real(), y = z.imag();
    if (::fabs(x) > T(20))       // cosh(2x) overflows long before the result moves
        return complex<T>(::copysign(T(1), x), T(4) * ::sin(y) * ::cos(y) * ::exp(T(-2) * ::fabs(x)));
    T d = ::cosh(T(2) * x) + ::cos(T(2) * y);
    return complex<T>(::sinh(T(2) * x) / d, ::sin(T(2) * y) / d);
}
template <typename T> __device__ inline complex<T> tan(const complex<T> &z)
{
    // tan(z) = -i tanh(i z)
    complex<T> t = tanh(complex<T>(-z.imag(), z.real()));
    return complex<T>(t.imag(), -t.real());
}

}  // namespace pygpu

namespace pycuda = pygpu;
