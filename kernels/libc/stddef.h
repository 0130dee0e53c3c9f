/* pygpu: <stddef.h> for NVRTC, which has size_t, ptrdiff_t and NULL built
 * in: max_align_t and offsetof. */
#ifndef PYGPU_LIBC_STDDEF_H
#define PYGPU_LIBC_STDDEF_H
typedef struct { long long __ll; long double __ld; } max_align_t;
#ifndef offsetof
#define offsetof(type, member) ((size_t)&reinterpret_cast<const volatile char &>( \
    (((type *)0)->member)))
#endif
#endif
