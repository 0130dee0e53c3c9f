"""The compiler environment: every header device code may include under
nvcc compiles under NVRTC through kernels/libc (docs/compiling.md), with
its main names usable.  No GPU needed: the kernels are compiled for sm_90."""

import os
import re
import subprocess
import sys

import pytest

from pygpu import _loader, compiler
from pygpu.compiler import CompileError

# a header that compiles only with a warning is not given well
pytestmark = pytest.mark.filterwarnings("error::pygpu.compiler.CompilerWarning")

# header -> device code using its main names (inside a kernel body unless
# it starts with "//top", then it is put ahead of the kernel)
C_HEADERS = {
    "assert.h": "assert(p != 0);",
    "ctype.h": "p[0] = isdigit('7') + isalpha('a') + isspace(' ') + toupper('a') + "
    "isxdigit('F') + ispunct('!') + tolower('Q') + isalnum('z') + isprint('~');",
    "errno.h": "p[0] = EDOM + ERANGE + EILSEQ + EINVAL;",
    "float.h": "q[0] = FLT_MAX + FLT_EPSILON + FLT_MIN + FLT_MANT_DIG;",
    "inttypes.h": 'int64_t v = INT64_MAX; printf("%" PRId64 " %" PRIu32 " %" PRIx64 '
    '" %" PRIdPTR "\\n", v, (uint32_t)1, (uint64_t)v, (intptr_t)p); '
    "imaxdiv_t d = imaxdiv(7, 2); p[0] = (int)(d.quot + imaxabs(-3));",
    "iso646.h": "p[0] = (1 and 2) or not 0;",
    "limits.h": "p[0] = INT_MAX - CHAR_BIT + (int)(LLONG_MAX > 0) + (int)(UINT_MAX > 0);",
    "math.h": "q[0] = sinf(M_PI) + sqrt(2.0) + INFINITY + (isnan(NAN) ? 1 : 0) + HUGE_VALF;",
    "stdalign.h": "alignas(16) int a[4] = {0}; p[0] = a[0] + (int)alignof(double) "
    "+ __alignas_is_defined;",
    "stdarg.h": "//top\n__device__ int sum(int n, ...)\n{\n    va_list ap;\n"
    "    va_start(ap, n);\n    int s = 0;\n    for (int i = 0; i < n; i++)\n"
    "        s += va_arg(ap, int);\n    va_end(ap);\n    return s;\n}",
    "stdbool.h": "bool b = true; p[0] = b && !false && __bool_true_false_are_defined;",
    "stddef.h": "struct s { int a; double b; }; size_t n = offsetof(s, b); "
    "ptrdiff_t d = p - p; p[0] = (int)(n + d + sizeof(max_align_t)) + (NULL == 0);",
    "stdint.h": "int8_t a = INT8_MAX; uint64_t b = UINT64_C(1) << 40; intptr_t c = 0; "
    "int_fast32_t f = INT32_MIN; uint_least16_t l = UINT16_MAX; "
    "p[0] = (int)(a + (b >> 40) + c + f + l + SIZE_MAX);",
    "stdio.h": 'printf("%d %s\\n", p[0], "x"); p[1] = EOF + SEEK_SET; FILE *f = 0; p[2] = f == 0;',
    "stdlib.h": "int *m = (int *)malloc(4 * sizeof(int)); free(m); div_t d = div(7, 2); "
    "ldiv_t l = ldiv(7L, 2L); lldiv_t ll = lldiv(7LL, 2LL); "
    "p[0] = abs(-3) + (int)labs(-2L) + (int)llabs(-1LL) + d.rem + (int)l.quot + (int)ll.rem "
    "+ EXIT_SUCCESS + EXIT_FAILURE + (RAND_MAX > 0);",
    "string.h": 'char b[8]; memset(b, 0, 8); memcpy(b, "ab", 3); memmove(b + 1, b, 2); '
    'strcpy(b, "xy"); strncpy(b, "z", 2); p[0] = memcmp(b, "z", 1) + (int)strlen(b) + '
    'strcmp(b, "z") + strncmp(b, "zz", 1) + (strchr(b, (int)\'z\') != 0) + '
    "(memchr(b, 0, 8) != 0);",
    "time.h": "clock_t c = clock(); time_t t = 0; struct tm when; when.tm_year = 1; "
    "p[0] = (int)(c + t + CLOCKS_PER_SEC + when.tm_year) + (int)clock64();",
}

CXX_HEADERS = {
    "cassert": "assert(p != 0);",
    "cctype": "p[0] = std::isdigit('7') + std::toupper('a');",
    "cerrno": "p[0] = ERANGE;",
    "cfloat": "q[0] = FLT_MAX + DBL_EPSILON;",
    "cinttypes": 'std::int64_t v = 5; printf("%" PRId64 "\\n", v); '
    "std::imaxdiv_t d = std::imaxdiv(7, 2); p[0] = (int)(d.rem + std::imaxabs(-1));",
    "ciso646": "p[0] = 1 and 1;",
    "climits": "p[0] = INT_MAX - CHAR_BIT;",
    "cmath": "q[0] = std::sin(1.0f) + std::sqrt(2.0) + std::fma(1.0f, 2.0f, 3.0f) "
    "+ std::isnan(q[1]) + std::abs(-1.5f);",
    "cstdalign": "alignas(8) int a = 0; p[0] = a;",
    "cstdarg": "//top\n__device__ void logv(const char *fmt, std::va_list ap);",
    "cstdbool": "bool b = true; p[0] = b;",
    "cstddef": "std::size_t n = sizeof(std::max_align_t); std::ptrdiff_t d = 0; "
    "std::nullptr_t z = nullptr; p[0] = (int)(n + d) + (z == nullptr);",
    "cstdint": "std::uint32_t a = UINT32_MAX; std::int64_t b = INT64_MIN; p[0] = (int)(a + b);",
    "cstdio": 'printf("%d\\n", p[0]);',
    "cstdlib": "int *m = (int *)std::malloc(8); std::free(m); std::div_t d = std::div(7, 2); "
    "p[0] = std::abs(-1) + (int)std::llabs(-2LL) + d.quot;",
    "cstring": 'char b[4]; std::memset(b, 0, 4); std::memcpy(b, "ab", 3); '
    'p[0] = (int)std::strlen(b) + std::strcmp(b, "ab") + std::memcmp(b, "a", 1);',
    "ctime": "std::clock_t c = std::clock(); std::time_t t = 0; p[0] = (int)(c + t);",
    "array": "std::array<int, 3> a = {1, 2, 3}; p[0] = a[1] + (int)a.size() + std::get<0>(a);",
    "atomic": "std::atomic<int> a(1); a.fetch_add(2); p[0] = a.load();",
    "barrier": "//top\n__device__ void use(std::barrier<> *b) { b->arrive_and_wait(); }",
    "bit": "p[0] = std::popcount(7u) + std::bit_width(8u) + std::countl_zero(1u) "
    "+ (int)std::bit_cast<unsigned>(1.0f);",
    "bitset": "std::bitset<8> b(5); p[0] = (int)b.count() + b.test(0);",
    "chrono": "std::chrono::nanoseconds n(5); auto m = "
    "std::chrono::duration_cast<std::chrono::microseconds>(n); p[0] = (int)m.count();",
    "complex": "std::complex<float> z(1.0f, 2.0f); std::complex<float> w = std::exp(z) "
    "* std::sqrt(z) + std::pow(z, 2.0f) + std::asin(z) + std::conj(z); "
    "q[0] = std::abs(w) + std::real(w) + std::imag(w) + std::arg(z) + std::norm(z);",
    "concepts": "static_assert(std::integral<int> && std::same_as<int, int> "
    "&& !std::floating_point<int>, \"\");",
    "expected": "std::expected<int, int> e(3); p[0] = e.value_or(0) + e.has_value();",
    "functional": "std::plus<int> add; std::less<float> lt; p[0] = add(1, 2) + lt(1.0f, 2.0f) "
    "+ std::invoke(add, 3, 4);",
    "initializer_list": "std::initializer_list<int> l = {1, 2, 3}; int s = 0; "
    "for (int x : l) s += x; p[0] = s + (int)l.size();",
    "iterator": "int a[3] = {1, 2, 3}; p[0] = (int)std::distance(std::begin(a), std::end(a)) "
    "+ *std::next(a) + *std::prev(std::end(a));",
    "latch": "//top\n__device__ void use(std::latch *l) { l->count_down(); }",
    "limits": "p[0] = std::numeric_limits<int>::max() - std::numeric_limits<char>::digits; "
    "q[0] = std::numeric_limits<float>::infinity() + std::numeric_limits<double>::epsilon();",
    "mdspan": "std::mdspan<int, std::extents<int, 2, 3>> m(p); p[0] = m(1, 2) + (int)m.extent(1);",
    "memory": "int x = 1; p[0] = *std::addressof(x);",
    "new": "//top\nstruct P { int v; __device__ P(int x) : v(x) {} };\n"
    "__device__ int make(void *buf) { P *o = new (buf) P(3); return o->v; }",
    "numbers": "q[0] = std::numbers::pi_v<float> + (float)std::numbers::e;",
    "numeric": "int a[3] = {1, 2, 3}; p[0] = std::accumulate(a, a + 3, 0) "
    "+ std::gcd(12, 18) + std::lcm(2, 3);",
    "optional": "std::optional<int> o; o = 4; p[0] = o.value_or(0) + (o ? 1 : 0) "
    "+ (std::nullopt == std::optional<int>());",
    "ranges": "int a[3] = {1, 2, 3}; p[0] = (int)std::ranges::size(a) + *std::ranges::begin(a);",
    "ratio": "p[0] = (int)std::ratio_add<std::ratio<1, 2>, std::ratio<1, 3>>::den "
    "+ (int)std::milli::den;",
    "semaphore": "//top\n__device__ void use(std::binary_semaphore *s) { s->release(); }",
    "source_location": "auto l = std::source_location::current(); p[0] = (int)l.line();",
    "span": "std::span<int> s(p, 4); p[0] = (int)s.size() + s[1] + (int)s.subspan(1).size();",
    "tuple": "std::tuple<int, float> t = std::make_tuple(1, 2.0f); auto [a, b] = t; "
    "p[0] = a + std::get<0>(t) + (int)std::tuple_size<decltype(t)>::value; q[0] = b;",
    "type_traits": "static_assert(std::is_same<int, int>::value, \"\"); "
    "static_assert(std::is_integral_v<long>, \"\"); "
    "static_assert(std::is_same_v<std::remove_cv_t<const int>, int>, \"\"); "
    "using E = std::enable_if_t<true, int>; E e = std::conditional_t<true, int, float>(1); "
    "p[0] = e + std::integral_constant<int, 2>::value + std::is_floating_point<float>::value;",
    "utility": "auto pr = std::make_pair(1, 2.0f); int a = 1, b = 2; std::swap(a, b); "
    "p[0] = pr.first + a + std::move(b) + std::forward<int>(a) "
    "+ (int)std::index_sequence<1, 2>::size() + std::exchange(a, 5);",
    "variant": "std::variant<int, float> v = 2; p[0] = std::get<int>(v) + (int)v.index() "
    "+ std::holds_alternative<int>(v);",
    # the host library's feature-test macros: NVRTC has none to give
    "version": "p[0] = 1;",
}

# C++ headers of newer CCCL releases than CUDA 13.0's (there: a clear
# #error); compiled with NVIDIA's wheels below (CCCL 3.5)
NEWER_CCCL = {
    "algorithm": "int a[4] = {3, 1, 2, 0}; std::reverse(a, a + 4); std::fill(a, a + 1, 7); "
    "p[0] = std::min(a[0], a[1]) + std::max(1, 2) + *std::max_element(a, a + 4) "
    "+ (int)std::count(a, a + 4, 2) + std::clamp(5, 0, 3) "
    "+ std::all_of(a, a + 4, [](int x) { return x >= 0; });",
}

# headers nvcc offers that pygpu cannot give, each with the reason
# docs/compiling.md states; a test holds the two lists together
NOT_GIVEN = (
    "complex.h",
    "tgmath.h",
    "fenv.h",
    "setjmp.h",
    "signal.h",
    "locale.h",
    "wchar.h",
    "wctype.h",
    "uchar.h",
    "threads.h",
    "stdatomic.h",
    "stdnoreturn.h",
    "string",
    "vector",
    "iostream",
)


def _kernel(header, use):
    top, body = "", use
    if use.startswith("//top\n"):
        top, body = use[len("//top\n") :], ""
    return "#include <%s>\n%s\n__global__ void k(int *p, float *q)\n{\n    %s\n}\n" % (
        header,
        top,
        body,
    )


def _ptx(src, **kw):
    kw.setdefault("arch", "sm_90")
    kw.setdefault("target", "ptx")
    kw.setdefault("cache_dir", False)
    return bytes(compiler.compile(src, **kw))


def _cccl_found():
    return any(
        os.path.isfile(os.path.join(d, "cuda", "std", "type_traits"))
        for d in _loader.cuda_include_dirs()
    )


def test_every_header_has_a_shim():
    libc = _loader.libc_shim_dir()
    for h in list(C_HEADERS) + list(CXX_HEADERS) + list(NEWER_CCCL):
        assert os.path.isfile(os.path.join(libc, h)), h
    for h in NOT_GIVEN:
        assert not os.path.exists(os.path.join(libc, h)), h


@pytest.mark.parametrize("nvcc_compat", [True, False], ids=["compat", "plain"])
@pytest.mark.parametrize("header", sorted(C_HEADERS))
def test_c_header(header, nvcc_compat):
    ptx = _ptx(_kernel(header, C_HEADERS[header]), nvcc_compat=nvcc_compat)
    assert b".entry _Z1kPiPf" in ptx


@pytest.mark.parametrize("nvcc_compat", [True, False], ids=["compat", "plain"])
@pytest.mark.parametrize("header", sorted(CXX_HEADERS))
def test_cxx_header(header, nvcc_compat):
    if not _cccl_found() and header not in _OWN_CXX:
        pytest.skip("no CCCL headers (<cuda/std/...>) found")
    ptx = _ptx(_kernel(header, CXX_HEADERS[header]), nvcc_compat=nvcc_compat)
    assert b".entry _Z1kPiPf" in ptx


# C++ headers pygpu writes itself (no CCCL needed)
_OWN_CXX = {
    "cassert", "cctype", "cerrno", "cfloat", "cinttypes", "ciso646", "climits",
    "cmath", "cstdalign", "cstdarg", "cstdbool", "cstddef", "cstdint", "cstdio",
    "cstdlib", "cstring", "ctime", "complex", "new", "version",
}  # fmt: skip


@pytest.mark.parametrize("header", sorted(NEWER_CCCL))
def test_newer_cccl_header(header):
    dirs = _loader.cuda_include_dirs()
    if not any(os.path.isfile(os.path.join(d, "cuda", "std", header)) for d in dirs):
        with pytest.raises(CompileError, match="which this CCCL does not have"):
            _ptx(_kernel(header, NEWER_CCCL[header]))
    else:
        assert b".entry _Z1kPiPf" in _ptx(_kernel(header, NEWER_CCCL[header]))


def test_all_headers_together():
    # every header at once, in both orders: no two of them clash
    names = sorted(C_HEADERS) + sorted(CXX_HEADERS)
    if not _cccl_found():
        names = [n for n in names if n in C_HEADERS or n in _OWN_CXX]
    for order in (names, names[::-1]):
        src = "".join("#include <%s>\n" % h for h in order)
        src += "__global__ void k(int *p) { p[0] = INT_MAX; }\n"
        assert b".entry _Z1kPi" in _ptx(src)


def test_using_namespace_std_keeps_plain_math_unambiguous():
    # <complex> is pygpu::complex, not CCCL's: with "using namespace std;"
    # sqrt(float) stays NVRTC's own, not ambiguous with cuda::std::sqrt(float)
    src = (
        "#include <complex>\n#include <type_traits>\n#include <cmath>\n"
        "using namespace std;\n"
        "__global__ void k(float *q) { complex<float> z(q[0], q[1]); "
        "q[2] = sqrt(q[3]) + sin(q[4]) + abs(exp(z)) + fmaxf(q[0], q[1]); }\n"
    )
    assert b".entry _Z1kPf" in _ptx(src)


def test_std_complex_is_numpys_layout():
    src = (
        "#include <complex>\n"
        "static_assert(sizeof(std::complex<float>) == 8, \"\");\n"
        "static_assert(alignof(std::complex<double>) == 16, \"\");\n"
        "static_assert(std::is_same_v<std::complex<float>, pycuda::complex<float>>, \"\");\n"
        "#include <type_traits>\n"
        "__global__ void k(float *q) { }\n"
    )
    # is_same_v is used before <type_traits> is included: an error that
    # names it, so the test can fail
    with pytest.raises(CompileError, match="is_same_v"):
        _ptx(src)
    src = src.replace("#include <type_traits>\n", "").replace(
        "#include <complex>\n", "#include <complex>\n#include <type_traits>\n"
    )
    assert b".entry _Z1kPf" in _ptx(src)


def test_an_unmodified_library_kernel_with_inttypes():
    # a library header written for nvcc (PyCUDA's users' style): extern "C"
    # wrapped by SourceModule, inttypes.h's macros in device printf
    src = r"""
#include <inttypes.h>
#include <stdint.h>
__global__ void dump(const int64_t *v, uint64_t n)
{
    for (uint64_t i = 0; i < n; i++)
        printf("v[%" PRIu64 "] = %" PRId64 " (%#" PRIx64 ")\n", i, v[i], (uint64_t)v[i]);
}
"""
    ptx = _ptx(src, extern_c=True)
    assert b".entry dump" in ptx
    # the format string, as PTX spells a string: its bytes in decimal
    fmt = b"v[%llu] = %lld (%#llx)\n"
    assert ", ".join(str(c) for c in fmt).encode() in ptx


@pytest.mark.standin
def test_a_library_header_with_inttypes_through_sourcemodule(standin, ctx, tmp_cache, tmp_path):
    # a library built on PyCUDA: its own header, unmodified, includes
    # <inttypes.h> and <stdint.h>; the kernel includes that header
    (tmp_path / "mylib.h").write_text(
        "#pragma once\n#include <inttypes.h>\n#include <stdint.h>\n"
        "__device__ inline void mylib_log(int64_t v, uint32_t w)\n"
        '{ printf("v=%" PRId64 " w=%" PRIu32 " x=%" PRIx64 "\\n", v, w, (uint64_t)v); }\n'
    )
    src = "#include \"mylib.h\"\n__global__ void dump(const int64_t *v) { mylib_log(v[0], 1u); }\n"
    from pygpu.compiler import SourceModule

    mod = SourceModule(src, include_dirs=[str(tmp_path)])
    mod.get_function("dump")
    mod = SourceModule(src, include_dirs=[str(tmp_path)], arch="sm_90", target="ptx")
    fmt = b"v=%lld w=%u x=%llx\n"
    assert ", ".join(str(c) for c in fmt).encode() in bytes(mod.binary)


def test_inttypes_macros_match_the_types():
    # each PRI macro's length modifier fits its type's size (printf reads
    # the argument by it): checked at compile time for every one
    checks = []
    for n in (8, 16, 32, 64):
        for kind in ("", "LEAST", "FAST"):
            for sign, conv in (("", "d"), ("u", "u")):
                t = "%sint%s%d_t" % (sign, "_" + kind.lower() if kind else "", n)
                checks.append((t, "PRI%s%s%d" % (conv, kind, n)))
    checks += [("intmax_t", "PRIdMAX"), ("uintptr_t", "PRIuPTR"), ("intptr_t", "PRIdPTR")]
    # "ll" + conversion (sizeof 4) exactly for the 64-bit types; the
    # smaller ones are promoted to int ("d", "u")
    body = "".join(
        'static_assert((sizeof(%s) == 4) == (sizeof(%s) == 8), "%s");\n' % (m, t, m)
        for t, m in checks
    )
    src = "#include <inttypes.h>\n" + body + "__global__ void k(int *p) {}\n"
    assert b".entry _Z1kPi" in _ptx(src)


def test_ctype_answers_as_the_c_locale():
    # evaluated at compile time over all of ASCII
    # against Python's str methods (the "C" locale's classes)
    import string

    rows = []
    for c in range(128):
        ch = chr(c)
        rows.append(
            (
                c,
                ch.isdigit(),
                ch in string.ascii_letters,
                ch in string.whitespace,
                ch in string.punctuation,
                ch in string.printable and ch not in "\t\n\r\x0b\x0c",
                ch in string.hexdigits,
                ord(ch.upper()) if ch in string.ascii_letters else c,
            )
        )
    # the functions are constexpr: a static_assert per character and class
    checks = []
    for r in rows:
        c = r[0]
        for i, f in enumerate(("isdigit", "isalpha", "isspace", "ispunct", "isprint", "isxdigit")):
            checks.append("static_assert(!!%s(%d) == %d, \"%s(%d)\");" % (f, c, r[i + 1], f, c))
        checks.append("static_assert(toupper(%d) == %d, \"toupper(%d)\");" % (c, r[7], c))
    src = "#include <ctype.h>\n" + "\n".join(checks) + "\n__global__ void k(int *p) {}\n"
    assert b".entry _Z1kPi" in _ptx(src)


@pytest.mark.gpu
def test_ctype_on_the_device(ctx):
    import numpy as np

    from pygpu import driver
    from pygpu.compiler import SourceModule

    test_ctype_answers_as_the_c_locale()
    import string

    src = (
        "#include <ctype.h>\n"
        "__global__ void k(int *o)\n{\n"
        "    int c = threadIdx.x;\n"
        "    o[c] = (!!isdigit(c)) | (!!isalpha(c)) << 1 | (!!isspace(c)) << 2 |\n"
        "           (!!ispunct(c)) << 3 | (!!isxdigit(c)) << 4 | toupper(c) << 8;\n"
        "}\n"
    )
    k = SourceModule(src).get_function("k")
    out = np.zeros(128, np.int32)
    k(driver.Out(out), block=(128, 1, 1), grid=(1, 1))
    for c in range(128):
        ch = chr(c)
        want = (
            int(ch.isdigit())
            | int(ch in string.ascii_letters) << 1
            | int(ch in string.whitespace) << 2
            | int(ch in string.punctuation) << 3
            | int(ch in string.hexdigits) << 4
            | (ord(ch.upper()) if ch in string.ascii_letters else c) << 8
        )
        assert out[c] == want, (c, out[c], want)


def test_not_given_headers_are_documented():
    doc = os.path.join(os.path.dirname(__file__), "..", "..", "docs", "compiling.md")
    with open(doc, encoding="utf-8") as f:
        text = f.read()
    section = text[text.index("(not-given-headers)=") :]
    for h in NOT_GIVEN:
        assert "`<%s>`" % h in section, h


@pytest.mark.parametrize("header", ["complex.h", "vector"])
def test_not_given_header_is_a_clear_compile_error(header):
    with pytest.raises(CompileError, match='cannot open source file "%s"' % header):
        _ptx("#include <%s>\n__global__ void k() {}\n" % header)


def test_compile_gives_sourcemodules_environment():
    # compile() (PyCUDA's signature or pygpu's) compiles what SourceModule
    # compiles: uint and friends without an #include
    src = "__global__ void k(uint *o, ushort s) { o[0] = (uint)(M_PI * s) + INT_MAX; }"
    assert b".entry _Z1kPjt" in _ptx(src)
    assert b".entry k" in bytes(compiler.compile(src, "nvcc", arch="sm_90", target="ptx"))
    assert b".entry k" in bytes(
        compiler.compile(src, options=["-arch=sm_90"], no_extern_c=False, target="ptx")
    )
    with pytest.raises(CompileError, match='identifier "uint" is undefined'):
        _ptx(src, nvcc_compat=False)


# ---- CCCL's own probes, and the headers of NVIDIA's wheels ----

_PROBE = re.compile(r"(?:__has_include|_CCCL_HAS_INCLUDE)\s*\(\s*<([^>]+)>\s*\)")
_INCLUDE = re.compile(r"^[ \t]*#[ \t]*include[ \t]*[<\"]", re.M)


def _cccl_probes(root):
    """{header: [files]} of the <header>s CCCL's files under root ask
    __has_include about."""
    found = {}
    for dirpath, _dirs, files in os.walk(root):
        for f in files:
            path = os.path.join(dirpath, f)
            try:
                with open(path, encoding="utf-8", errors="replace") as fh:
                    text = fh.read()
            except OSError:
                continue
            for m in _PROBE.finditer(text):
                found.setdefault(m.group(1), []).append(os.path.relpath(path, root))
    return found


def _check_probed_shims_are_inert(cccl_root):
    # CCCL includes what __has_include finds, from inside its configuration
    # (<version>, <ciso646> in cuda/std/__cccl/host_std_lib.h): a shim there
    # that includes anything (CCCL's own headers above all) breaks every
    # CCCL header ("libcu++ requires at least C++ 17"), the failure of the
    # first attempt at these shims with CUDA 13.5's wheels
    libc = _loader.libc_shim_dir()
    probes = _cccl_probes(cccl_root)
    assert probes, cccl_root  # the scan sees CCCL's probes at all
    for header, where in sorted(probes.items()):
        path = os.path.join(libc, header)
        if os.path.isfile(path):
            with open(path, encoding="utf-8") as f:
                text = f.read()
            assert not _INCLUDE.search(text), (header, where[:3])


def test_shims_cccl_probes_for_are_inert():
    roots = [
        d
        for d in _loader.cuda_include_dirs()
        if os.path.isfile(os.path.join(d, "cuda", "std", "version"))
    ]
    if not roots:
        pytest.skip("no CCCL headers (<cuda/std/...>) found")
    for root in roots:
        _check_probed_shims_are_inert(root)


# Run in a process whose headers and NVRTC are only those of NVIDIA's wheels
# (the test_install environment, where the toolkit is absent): each header
# alone, all together, python -m pygpu's HEADERS and test_install's kernel.
_WHEEL_CHECK = r'''
import os, sys, warnings
sys.path.insert(0, sys.argv[2])
import test_headers as t
from pygpu import _loader, compiler
from pygpu.__main__ import HEADERS
site = sys.argv[1]
warnings.simplefilter("error", compiler.CompilerWarning)
dirs = _loader.cuda_include_dirs()
assert dirs and all(d.startswith(site) for d in dirs), dirs
t._check_probed_shims_are_inert(dirs[-1])
def ptx(src, **kw):
    return bytes(compiler.compile(src, arch="sm_90", target="ptx", cache_dir=False, **kw))
headers = dict(t.C_HEADERS, **t.CXX_HEADERS, **t.NEWER_CCCL)
for h in sorted(headers):
    assert b".entry _Z1kPiPf" in ptx(t._kernel(h, headers[h])), h
for h in HEADERS:
    for compat in (True, False):
        ptx("#include <%s>\n__global__ void k() {}\n" % h, nvcc_compat=compat)
names = sorted(headers) + list(HEADERS)
for order in (names, names[::-1]):
    src = "".join("#include <%s>\n" % h for h in order)
    assert b".entry _Z1kPi" in ptx(src + "__global__ void k(int *p) { p[0] = INT_MAX; }\n")
assert b".entry norm_sum" in ptx(t.WHEEL_KERNEL)
maps = open("/proc/self/maps").read()
nvrtc = [l.split()[-1] for l in maps.splitlines() if "libnvrtc.so" in l]
assert nvrtc and nvrtc[0].startswith(site), nvrtc
print("CHECKED", len(headers), compiler.nvrtc_version(), dirs)
'''

# tests/project/test_install.py's kernel: the toolkit's headers and CCCL's
WHEEL_KERNEL = r"""
#include <cuda_fp16.h>
#include <cooperative_groups.h>
#include <cuda/std/complex>
#include <cub/block/block_reduce.cuh>
#include <inttypes.h>
#include <type_traits>
namespace cg = cooperative_groups;
extern "C" __global__ void norm_sum(float *out, const __half *in) {
    cg::thread_block b = cg::this_thread_block();
    typedef cub::BlockReduce<float, 128> R;
    __shared__ typename R::TempStorage tmp;
    static_assert(std::is_same<int64_t, long long>::value, "");
    cuda::std::complex<float> z(__half2float(in[b.thread_rank()]), 1.0f);
    float s = R(tmp).Sum(cuda::std::abs(z));
    if (b.thread_rank() == 0) out[0] = s;
}
"""


@pytest.fixture(scope="module")
def wheel_site(tmp_path_factory):
    """NVIDIA's wheels (cuda-toolkit[nvrtc,cudart,cccl] 13.x, the [nvrtc]
    extra's) installed into a scratch folder, as test_install's venvs have
    them; pip's cache makes a rerun fetch nothing."""
    site = tmp_path_factory.mktemp("wheels") / "site"
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--disable-pip-version-check",
            "--target",
            str(site),
            "cuda-toolkit[nvrtc,cudart,cccl]>=13.0,<14",
        ],
        capture_output=True,
        text=True,
    )
    if r.returncode != 0:
        pytest.skip(
            "NVIDIA's wheels could not be installed (no package index?): "
            + (r.stderr.strip().splitlines() or ["?"])[-1]
        )
    return str(site)


@pytest.mark.skipif(
    "libasan" in os.environ.get("LD_PRELOAD", ""),
    reason="under AddressSanitizer's LD_PRELOAD the wheels' NVRTC cannot open its "
    "builtins library in the child process (make sanitize; make test runs it)",
)
def test_headers_with_only_nvidias_wheels(wheel_site):
    lib = os.path.join(wheel_site, "nvidia", "cu13", "lib", "libnvrtc.so.13")
    assert os.path.isfile(lib), os.listdir(wheel_site)
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("CUDA", "PYGPU_", "CONDA")) and k != "PYTHONPATH"
    }
    env.update(PYTHONPATH=wheel_site, PYGPU_NVRTC=lib, PYGPU_NO_PATHFINDER="1")
    r = subprocess.run(
        [sys.executable, "-c", _WHEEL_CHECK, wheel_site, os.path.dirname(__file__)],
        env=env,
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert r.returncode == 0 and "CHECKED" in r.stdout, (r.stdout + r.stderr)[-6000:]
