/* pygpu: <stdalign.h> for NVRTC: alignas and alignof are C++ keywords. */
#ifndef PYGPU_LIBC_STDALIGN_H
#define PYGPU_LIBC_STDALIGN_H
#define __alignas_is_defined 1
#define __alignof_is_defined 1
#endif
