/* pygpu: <stddef.h> for NVRTC, which has size_t, ptrdiff_t and NULL built
 * in: max_align_t and offsetof. */
#ifndef PYGPU_LIBC_STDDEF_H
#define PYGPU_LIBC_STDDEF_H
typedef struct { long long __ll; long double __ld; } max_align_t;
#ifndef offsetof
/* a constant expression (static_assert, array sizes), as nvcc's is: NVRTC's
 * front end has no __builtin_offsetof, but has EDG's __INTADDR__ */
#define offsetof(type, member) ((size_t)__INTADDR__(&((type *)0)->member))
#endif
#endif
