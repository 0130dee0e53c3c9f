/* pygpu: what nvcc gives every kernel without an #include, for NVRTC.
 *
 * nvcc compiles a .cu file with cuda_runtime.h included first, and that
 * brings the host C library's <stdlib.h>, <math.h>, <limits.h>,
 * <sys/types.h> (with _GNU_SOURCE) and <cmath>.  Kernels written for nvcc
 * (PyCUDA's, reikna's) use their names without including anything.  NVRTC
 * has none of them.  SourceModule compiles this file's contents ahead of the
 * user's source (pygpu/_nvcc_compat.py inlines the <...> headers of this
 * folder it names), so the same names are there, with glibc's LP64 types
 * and values: a user's own identical declaration (typedef unsigned int uint;)
 * still compiles, as it does under nvcc.  Only names nvcc gives implicitly
 * are here: <stdint.h>'s uint8_t or <float.h>'s FLT_MAX need their header
 * under nvcc, and need it here too. */
#ifndef PYGPU_NVCC_H
#define PYGPU_NVCC_H
/* CCCL's headers (<cuda/std/...>, CUB) define the <limits.h> macros again
 * under NVRTC, in other spellings of the same values: no warning for that
 * ("incompatible redefinition of macro") */
#pragma nv_diag_suppress 47
#include <limits.h>
#include <math.h>
#include <cmath>
#include <cstddef>
#include <stdlib.h>
#include <stdio.h>
#include <time.h>

/* <sys/types.h> (glibc, _GNU_SOURCE) */
typedef unsigned char u_char;
typedef unsigned short int u_short;
typedef unsigned int u_int;
typedef unsigned long int u_long;
typedef unsigned short int ushort;
typedef unsigned int uint;
typedef unsigned long int ulong;
/* the exact-width types as pygpu's <stdint.h> and CCCL's <cuda/std/cstdint>
 * declare them under NVRTC (64 bits: long long; glibc's long has the same
 * size), so that either can be included after this */
typedef signed char int8_t;
typedef short int int16_t;
typedef int int32_t;
typedef long long int int64_t;
typedef unsigned char u_int8_t;
typedef unsigned short int u_int16_t;
typedef unsigned int u_int32_t;
typedef unsigned long long int u_int64_t;
#if defined(__LP64__)
typedef long int quad_t;
typedef unsigned long int u_quad_t;
typedef long int ssize_t;
typedef long int off_t;
typedef long int register_t;
#else
typedef long long int quad_t;
typedef unsigned long long int u_quad_t;
typedef int ssize_t;
typedef long int off_t;
typedef int register_t;
#endif
typedef char *caddr_t;

/* <math.h> (glibc, _GNU_SOURCE) */
typedef float float_t;
typedef double double_t;
#define MAXFLOAT 3.40282347e+38F
#define M_Ef 2.7182818284590452354f
#define M_LOG2Ef 1.4426950408889634074f
#define M_LOG10Ef 0.43429448190325182765f
#define M_LN2f 0.69314718055994530942f
#define M_LN10f 2.30258509299404568402f
#define M_PIf 3.14159265358979323846f
#define M_PI_2f 1.57079632679489661923f
#define M_PI_4f 0.78539816339744830962f
#define M_1_PIf 0.31830988618379067154f
#define M_2_PIf 0.63661977236758134308f
#define M_2_SQRTPIf 1.12837916709551257390f
#define M_SQRT2f 1.41421356237309504880f
#define M_SQRT1_2f 0.70710678118654752440f
#endif
