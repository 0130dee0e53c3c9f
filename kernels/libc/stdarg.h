/* pygpu: <stdarg.h> for NVRTC, which has va_list, va_start, va_arg, va_end
 * and va_copy built in (variadic __device__ functions): nothing to add. */
#ifndef PYGPU_LIBC_STDARG_H
#define PYGPU_LIBC_STDARG_H
#endif
