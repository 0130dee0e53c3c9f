/* pygpu: <stdio.h> for NVRTC, which ships no C library headers.  Device code
 * gets printf from NVRTC itself; this file gives the constants and FILE (a
 * name only: no device code opens a file), so kernels written for nvcc
 * (PyCUDA's, for one) that include <stdio.h> compile unchanged.  It is
 * searched after every other include directory. */
#ifndef PYGPU_LIBC_STDIO_H
#define PYGPU_LIBC_STDIO_H
typedef struct _IO_FILE FILE;
#define EOF (-1)
#define SEEK_SET 0
#define SEEK_CUR 1
#define SEEK_END 2
#define BUFSIZ 8192
#endif
