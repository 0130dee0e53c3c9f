/* pygpu: <iso646.h> for NVRTC: and, or, not, ... are C++ keywords. */
#ifndef PYGPU_LIBC_ISO646_H
#define PYGPU_LIBC_ISO646_H
#endif
