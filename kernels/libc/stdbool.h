/* pygpu: <stdbool.h> for NVRTC: bool, true and false are C++ keywords. */
#ifndef PYGPU_LIBC_STDBOOL_H
#define PYGPU_LIBC_STDBOOL_H
#define __bool_true_false_are_defined 1
#endif
