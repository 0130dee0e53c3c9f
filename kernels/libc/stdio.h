/* pygpu: <stdio.h> for NVRTC, which ships no C library headers.  Device code
 * gets printf from NVRTC itself; this file lets kernels written for nvcc
 * (PyCUDA's, for one) that include <stdio.h> compile unchanged.  It is
 * searched after every other include directory. */
#ifndef PYGPU_LIBC_STDIO_H
#define PYGPU_LIBC_STDIO_H
#endif
