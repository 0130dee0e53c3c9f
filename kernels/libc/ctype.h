/* pygpu: <ctype.h> for NVRTC: the character classes of the "C" locale
 * (ASCII; the only locale device code has), as constexpr device functions. */
#ifndef PYGPU_LIBC_CTYPE_H
#define PYGPU_LIBC_CTYPE_H
__device__ __forceinline__ constexpr int isdigit(int c) { return c >= '0' && c <= '9'; }
__device__ __forceinline__ constexpr int islower(int c) { return c >= 'a' && c <= 'z'; }
__device__ __forceinline__ constexpr int isupper(int c) { return c >= 'A' && c <= 'Z'; }
__device__ __forceinline__ constexpr int isalpha(int c) { return islower(c) || isupper(c); }
__device__ __forceinline__ constexpr int isalnum(int c) { return isalpha(c) || isdigit(c); }
__device__ __forceinline__ constexpr int isxdigit(int c)
{
    return isdigit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}
__device__ __forceinline__ constexpr int isblank(int c) { return c == ' ' || c == '\t'; }
__device__ __forceinline__ constexpr int isspace(int c) { return c == ' ' || (c >= '\t' && c <= '\r'); }
__device__ __forceinline__ constexpr int iscntrl(int c) { return (c >= 0 && c < 32) || c == 127; }
__device__ __forceinline__ constexpr int isprint(int c) { return c >= 32 && c < 127; }
__device__ __forceinline__ constexpr int isgraph(int c) { return c > 32 && c < 127; }
__device__ __forceinline__ constexpr int ispunct(int c) { return isgraph(c) && !isalnum(c); }
__device__ __forceinline__ constexpr int tolower(int c) { return isupper(c) ? c + ('a' - 'A') : c; }
__device__ __forceinline__ constexpr int toupper(int c) { return islower(c) ? c - ('a' - 'A') : c; }
#endif
