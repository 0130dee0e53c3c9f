/* pygpu: <stdlib.h> for NVRTC (see stdio.h here): device malloc and free
 * come from NVRTC itself. */
#ifndef PYGPU_LIBC_STDLIB_H
#define PYGPU_LIBC_STDLIB_H
#endif
