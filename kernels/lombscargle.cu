// The Lomb-Scargle periodogram of unevenly sampled data (x, y) at angular
// frequencies freqs, as scipy.signal.lombscargle(x, y, freqs) computes it
// (no centering, no normalisation; y_dot != 0 scales by 2 / y_dot).
// One thread per frequency, grid-stride.  The steps of the optimisation
// walk-through (shared/sources/002) are compile-time switches:
//   LOMBSCARGLE_BOUNDS   __launch_bounds__(LOMBSCARGLE_BOUNDS), e.g. 128
//   -use_fast_math       an NVRTC option: fast sincos in single precision
// and the data type is a template parameter with one extern "C" entry each.
#ifdef LOMBSCARGLE_BOUNDS
#define BOUNDS __launch_bounds__(LOMBSCARGLE_BOUNDS)
#else
#define BOUNDS
#endif

template <typename T>
__device__ __forceinline__ void sin_cos(T v, T *s, T *c);
template <>
__device__ __forceinline__ void sin_cos<float>(float v, float *s, float *c) { sincosf(v, s, c); }
template <>
__device__ __forceinline__ void sin_cos<double>(double v, double *s, double *c) { sincos(v, s, c); }

template <typename T>
__device__ void lombscargle(const int nx, const int nf, const T *__restrict__ x,
                            const T *__restrict__ y, const T *__restrict__ freqs,
                            T *__restrict__ pgram, const T y_dot)
{
    const T yD = y_dot == T(0) ? T(1) : T(2) / y_dot;
    for (int tid = blockIdx.x * blockDim.x + threadIdx.x; tid < nf;
         tid += blockDim.x * gridDim.x) {
        const T freq = freqs[tid];
        T xc = 0, xs = 0, cc = 0, ss = 0, cs = 0;
        for (int j = 0; j < nx; j++) {
            T s, c;
            sin_cos<T>(freq * x[j], &s, &c);
            xc += y[j] * c;
            xs += y[j] * s;
            cc += c * c;
            ss += s * s;
            cs += c * s;
        }
        T s_tau, c_tau;
        const T tau = atan2(T(2) * cs, cc - ss) / (T(2) * freq);
        sin_cos<T>(freq * tau, &s_tau, &c_tau);
        const T c_tau2 = c_tau * c_tau, s_tau2 = s_tau * s_tau, cs_tau = T(2) * c_tau * s_tau;
        const T a = c_tau * xc + s_tau * xs, b = c_tau * xs - s_tau * xc;
        pgram[tid] = T(0.5) * (a * a / (c_tau2 * cc + cs_tau * cs + s_tau2 * ss)
                               + b * b / (c_tau2 * ss - cs_tau * cs + s_tau2 * cc)) * yD;
    }
}

extern "C" __global__ void BOUNDS lombscargle_float32(
    const int nx, const int nf, const float *__restrict__ x, const float *__restrict__ y,
    const float *__restrict__ freqs, float *__restrict__ pgram, const float y_dot)
{
    lombscargle<float>(nx, nf, x, y, freqs, pgram, y_dot);
}

extern "C" __global__ void BOUNDS lombscargle_float64(
    const int nx, const int nf, const double *__restrict__ x, const double *__restrict__ y,
    const double *__restrict__ freqs, double *__restrict__ pgram, const double y_dot)
{
    lombscargle<double>(nx, nf, x, y, freqs, pgram, y_dot);
}
