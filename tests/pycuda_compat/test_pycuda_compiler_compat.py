"""PyCUDA compatibility of the compiler side (issue 24): CompileError as
PyCUDA has it, what nvcc gives a kernel implicitly under NVRTC, source
objects, keep=True, PyCUDA's cache_dir values, the struct layouts nvcc
gives (NumPy's align=True, reikna's declarations), enum names.  Everything
here runs NVRTC only (no GPU), except the tests marked standin/gpu."""

import os
import pickle
import re
import warnings

import numpy as np
import pytest

import pygpu.driver as cuda
from pygpu import _driver, _nvcc_compat, compiler
from pygpu.compiler import CompileError


def _ptx(src, **kw):
    kw.setdefault("arch", "sm_90")
    kw.setdefault("target", "ptx")
    with warnings.catch_warnings():
        warnings.simplefilter("error", compiler.CompilerWarning)
        return bytes(compiler.compile(src, **kw)).decode()


def _sm_compile(src, no_extern_c=False, **kw):
    """What SourceModule compiles (prelude, moved attributes, wrapper), to PTX."""
    return _ptx(src, nvcc_compat=True, extern_c=not no_extern_c, **kw)


# ---- CompileError ----


def test_compile_error_is_constructed_as_pycudas():
    e = CompileError(
        "nvcc compilation of /tmp/x/kernel.cu failed",
        ["nvcc", "--cubin", "k.cu"],
        stdout="out text",
        stderr="err text",
    )
    assert (e.msg, e.command_line, e.stdout, e.stderr) == (
        "nvcc compilation of /tmp/x/kernel.cu failed",
        ["nvcc", "--cubin", "k.cu"],
        "out text",
        "err text",
    )
    assert str(e) == (
        "nvcc compilation of /tmp/x/kernel.cu failed\n[command: nvcc --cubin k.cu]"
        "\n[stdout:\nout text]\n[stderr:\nerr text]"
    )
    e2 = CompileError("only a message", None)
    assert str(e2) == "only a message" and e2.stdout is None and e2.stderr is None
    assert isinstance(e, cuda.Error) and cuda.CompileError is CompileError
    with pytest.raises(CompileError, match=r"^m\n\[command: a b\]$"):
        raise CompileError("m", ["a", "b"])


def test_nvrtc_rejection_has_pycudas_attributes(tmp_cache):
    src = "__global__ void k(float *x)\n{\n    x[0] = 1.0f +;\n}\n"
    with pytest.raises(CompileError, match=r"kernel\.cu\(3\): error: expected an expression") as ei:
        compiler.compile(src, arch="sm_90", options=["-DFOO=1"])
    e = ei.value
    assert isinstance(e.command_line, list) and all(isinstance(c, str) for c in e.command_line)
    assert "--gpu-architecture=sm_90" in e.command_line and "-DFOO=1" in e.command_line
    assert e.options == e.command_line
    assert e.stdout is None
    assert e.stderr == e.log and "kernel.cu(3): error: expected an expression" in e.stderr
    assert e.source == src
    assert e.msg.startswith("NVRTC compilation failed:\nkernel.cu(3): error")
    text = str(e)
    # PyCUDA's str(): the message, the command; pygpu's source lines in the message
    assert "->    3 |     x[0] = 1.0f +;" in text
    assert "\n[command: --gpu-architecture=sm_90 " in text
    assert text.count("expected an expression") == 1  # the log is not shown twice
    # reporting code written for PyCUDA
    assert "expected an expression" in "%s" % e.stderr
    e2 = pickle.loads(pickle.dumps(e))
    assert type(e2) is CompileError and str(e2) == text and e2.log == e.log
    assert e2.source == src and e2.command_line == e.command_line


def test_sourcemodule_rejection_keeps_the_users_lines(tmp_cache):
    src = "__global__ void k(uint *x)\n{\n    x[0] = 1 +;\n}\n"
    for wrap in (True, False):
        with pytest.raises(CompileError) as ei:
            compiler.compile(src, arch="sm_90", nvcc_compat=True, extern_c=wrap)
        e = ei.value
        assert e.source == src
        assert re.findall(r"kernel\.cu\((\d+)\): error", e.log) == ["3"]
        assert 'extern "C"' not in str(e) and "PYGPU_NVCC_H" not in str(e)


def test_warning_lines_are_the_users(tmp_cache):
    src = "__global__ void k(float *x)\n{\n    int unused;\n    x[0] = 1.0f;\n}\n"
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        compiler.compile(src, arch="sm_90", nvcc_compat=True, extern_c=True)
    logs = [str(x.message) for x in w if issubclass(x.category, compiler.CompilerWarning)]
    assert len(logs) == 1 and "kernel.cu(3): warning" in logs[0], logs


def test_pch_keeps_the_users_lines_and_the_prelude(tmp_cache, tmp_path):
    # with precompiled headers (the %%cuda magic) no #line is used: the
    # prelude is a --pre-include and the wrapper's line is mapped away
    src = "__global__ void k(uint *x)\n{\n    x[0] = M_PI +;\n}\n"
    (tmp_path / "pch").mkdir()
    opts = ["-pch", "--pch-dir=" + str(tmp_path / "pch"), "--pch-messages=false"]
    with pytest.raises(CompileError) as ei:
        compiler.compile(src, arch="sm_90", nvcc_compat=True, extern_c=True, options=opts)
    assert re.findall(r"kernel\.cu\((\d+)\): error", ei.value.log) == ["3"]
    assert any(o.endswith("pygpu_nvcc.h") for o in ei.value.command_line)
    ok = "__global__ void k(uint *x) { x[0] = (uint)(M_PI * 100) + INT_MAX; }"
    assert ".entry k" in _ptx(ok, nvcc_compat=True, extern_c=True, options=opts)


# ---- what nvcc gives implicitly ----

# each compiles under nvcc -arch=sm_90 with no #include (checked with CUDA 13's
# nvcc: tools would need nvcc, so the list is data here)
NVCC_TYPES = [
    "uint",
    "ushort",
    "ulong",
    "u_char",
    "u_short",
    "u_int",
    "u_long",
    "u_int8_t",
    "u_int16_t",
    "u_int32_t",
    "u_int64_t",
    "quad_t",
    "u_quad_t",
    "int8_t",
    "int16_t",
    "int32_t",
    "int64_t",
    "size_t",
    "ssize_t",
    "ptrdiff_t",
    "off_t",
    "time_t",
    "clock_t",
    "max_align_t",
    "div_t",
    "ldiv_t",
    "FILE",
    "std::size_t",
    "std::ptrdiff_t",
    "std::nullptr_t",
    "float_t",
    "double_t",
]
NVCC_EXPRESSIONS = [
    "INT_MAX",
    "INT_MIN",
    "UINT_MAX",
    "LONG_MAX",
    "LLONG_MAX",
    "ULLONG_MAX",
    "CHAR_BIT",
    "SHRT_MAX",
    "USHRT_MAX",
    "UCHAR_MAX",
    "SCHAR_MIN",
    "M_PI",
    "M_PI_2",
    "M_PI_4",
    "M_1_PI",
    "M_2_PI",
    "M_E",
    "M_LN2",
    "M_LN10",
    "M_LOG2E",
    "M_LOG10E",
    "M_SQRT2",
    "M_SQRT1_2",
    "M_2_SQRTPI",
    "M_PIf",
    "HUGE_VAL",
    "HUGE_VALF",
    "INFINITY",
    "NAN",
    "FP_NAN",
    "FP_INFINITE",
    "MAXFLOAT",
    "RAND_MAX",
    "EXIT_SUCCESS",
    "EOF",
    "CLOCKS_PER_SEC",
    "NULL",
]
NVCC_STATEMENTS = [
    'printf("%d", 1)',
    "assert(1)",
    "malloc(4)",
    "free(0)",
    "abs(1)",
    "fabs(1.0)",
    "std::abs(1)",
    "std::sqrt(1.0f)",
    "std::isnan(1.0)",
    "std::fma(1.0, 1.0, 1.0)",
    "min(1, 2)",
    "isnan(1.0)",
]


def _implicit_kernel():
    body = []
    for i, t in enumerate(NVCC_TYPES):
        body.append("    { %s *p%d = 0; o[0] += p%d != 0; }" % (t, i, i))
    for e in NVCC_EXPRESSIONS:
        body.append("    o[0] += sizeof(%s) > 0;" % e)
    for s in NVCC_STATEMENTS:
        body.append("    (void)(%s);" % s)
    return "__global__ void k(int *o)\n{\n%s\n}\n" % "\n".join(body)


def test_nvcc_implicit_names_compile(tmp_cache):
    src = _implicit_kernel()
    with pytest.raises(CompileError, match=r'identifier "uint" is undefined'):
        compiler.compile(src, arch="sm_90", target="ptx", nvcc_compat=False)  # NVRTC alone
    ptx = _sm_compile(src)
    assert ".entry k(" in ptx


@pytest.mark.parametrize(
    "name, kind",
    [(n, "T") for n in NVCC_TYPES[:8]]
    + [(n, "E") for n in ("INT_MAX", "M_PI", "M_PIf", "RAND_MAX")],
)
def test_each_implicit_name_alone(name, kind, tmp_cache):
    use = (
        ("%s *p = 0; o[0] = p != 0;" % name)
        if kind == "T"
        else ("o[0] = (int)(long long)(%s);" % name)
    )
    _sm_compile("__global__ void k(int *o) { %s }" % use)


def test_implicit_values_are_glibcs(tmp_cache):
    checks = [
        "sizeof(uint) == 4",
        "sizeof(ushort) == 2",
        "sizeof(ulong) == sizeof(long)",
        "sizeof(u_char) == 1",
        "sizeof(u_int64_t) == 8",
        "sizeof(int64_t) == 8",
        "sizeof(int8_t) == 1",
        "(int8_t)-1 < 0",
        "(u_int8_t)-1 == 255",
        "sizeof(ssize_t) == sizeof(size_t)",
        "INT_MAX == 2147483647",
        "UINT_MAX == 4294967295U",
        "LLONG_MAX == 9223372036854775807LL",
        "CHAR_BIT == 8",
        "M_PI == 3.14159265358979323846",
        "M_SQRT2 == 1.41421356237309504880",
        "M_PIf == 3.14159265358979323846f",
        "RAND_MAX == 2147483647",
        "EOF == -1",
    ]
    src = "\n".join("static_assert(%s, %r);" % (c, c) for c in checks)
    src = src.replace("'", '"') + "\n__global__ void k(int *o) { o[0] = 1; }\n"
    _sm_compile(src)


def test_users_own_declarations_still_compile(tmp_cache):
    # PyCUDA kernels often declare these themselves: identical redeclarations
    src = """
typedef unsigned int uint;
typedef unsigned short ushort;
typedef unsigned long ulong;
typedef unsigned char u_char;
typedef signed char int8_t;
typedef int int32_t;
#include <stdint.h>
#include <limits.h>
#include <math.h>
#include <cmath>
#include <stdio.h>
#define M_PI 3.14159265358979323846
#define INT_MAX 2147483647
__global__ void k(uint *o, uint32_t n) { o[0] = (uint)(M_PI * n) + (ushort)INT_MAX; }
"""
    for no_extern_c in (False, True):
        assert ".entry k" in _sm_compile(src, no_extern_c=no_extern_c) or no_extern_c


def test_compile_alone_adds_nothing(tmp_cache):
    # compile(nvcc_compat=False) compiles the source as NVRTC reads it
    with pytest.raises(CompileError, match=r'identifier "M_PI" is undefined'):
        compiler.compile(
            "__global__ void k(double *o) { o[0] = M_PI; }", arch="sm_90", nvcc_compat=False
        )


def test_prelude_is_in_the_cache_key(tmp_cache, monkeypatch):
    from pygpu import store

    src = "__global__ void k(int *o) { o[0] = 1; }"
    compiler.compile(src, arch="sm_90", target="ptx", nvcc_compat=False)
    misses = store.stats["misses"]
    compiler.compile(src, arch="sm_90", target="ptx", nvcc_compat=True)
    assert store.stats["misses"] == misses + 1  # another key
    compiler.compile(src, arch="sm_90", target="ptx", nvcc_compat=True)
    assert store.stats["misses"] == misses + 1  # the same again: a hit
    # a changed prelude (another pygpu) is another key
    monkeypatch.setattr(_nvcc_compat, "_prelude", _nvcc_compat.prelude() + "// changed\n")
    compiler.clear_cache(disk=False)
    compiler.compile(src, arch="sm_90", target="ptx", nvcc_compat=True)
    assert store.stats["misses"] == misses + 2
    assert _nvcc_compat.prelude().count("#line 1\n") == 1
    assert "#include" not in _nvcc_compat.prelude()


# ---- source objects ----


class _Generated:
    """A code generator's object (cgen's and codepy's give str())."""

    def __init__(self, lines):
        self.lines = lines

    def __str__(self):
        return "\n".join(self.lines)


def test_source_object_compiles_through_str(tmp_cache):
    gen = _Generated(['extern "C" __global__ void k(float *x)', "{", "    x[0] = 2.0f;", "}"])
    assert ".entry k(" in _ptx(gen)
    assert ".entry k(" in _sm_compile(gen)
    with pytest.raises(CompileError) as ei:
        compiler.compile(_Generated(["__global__ void k() { +; }"]), arch="sm_90")
    assert ei.value.source == "__global__ void k() { +; }"


@pytest.mark.parametrize(
    "bad, msg",
    [
        (b"__global__ void k() {}", "decode it first"),
        (None, "an object whose str"),
        (42, "an object whose str"),
    ],
)
def test_source_that_is_no_text_is_refused(bad, msg, tmp_cache):
    with pytest.raises(TypeError, match=msg):
        compiler.compile(bad, arch="sm_90")
    with pytest.raises(TypeError, match=msg):
        compiler.SourceModule(bad, arch="sm_90")


# ---- keep=True ----


def test_keep_writes_source_options_and_binaries(tmp_cache, capsys):
    src = "__global__ void k(uint *x) { x[0] = INT_MAX; }"
    args = (src, [], "sm_90", None, [], None, (), None, False, None, "kernel.cu", False, True, True)
    b, _ = compiler._compile_kept(args)
    out = capsys.readouterr().out
    m = re.fullmatch(r"\*\*\* compiler output in (\S+)\n", out)
    assert m, out
    d = m.group(1)
    assert sorted(os.listdir(d)) == ["kernel.cu", "kernel.cubin", "kernel.options", "kernel.ptx"]
    with open(os.path.join(d, "kernel.cu")) as f:
        text = f.read()
    assert src in text and 'extern "C" {' in text and "typedef unsigned int uint;" in text
    with open(os.path.join(d, "kernel.cubin"), "rb") as f:
        assert f.read() == bytes(b) and b.target == "cubin"
    with open(os.path.join(d, "kernel.ptx")) as f:
        assert ".entry k(" in f.read()
    with open(os.path.join(d, "kernel.options")) as f:
        assert "--gpu-architecture=sm_90\n" in f.read()


def test_keep_leaves_the_log_of_a_rejected_source(tmp_cache, capsys):
    args = (
        "__global__ void k() { +; }",
        [],
        "sm_90",
        None,
        [],
        None,
        (),
        None,
        False,
        None,
        "kernel.cu",
        False,
        True,
        True,
    )
    with pytest.raises(CompileError):
        compiler._compile_kept(args)
    d = re.fullmatch(r"\*\*\* compiler output in (\S+)\n", capsys.readouterr().out).group(1)
    assert sorted(os.listdir(d)) == ["kernel.cu", "kernel.log", "kernel.options"]
    with open(os.path.join(d, "kernel.log")) as f:
        assert "kernel.cu(1): error" in f.read()


@pytest.mark.standin
def test_sourcemodule_keep_on_the_standin(standin, tmp_cache, capsys):
    mod = compiler.SourceModule("__global__ void k(uint *x) { x[0] = 1; }", keep=True)
    d = re.search(r"\*\*\* compiler output in (\S+)", capsys.readouterr().out).group(1)
    assert "kernel.cu" in os.listdir(d) and mod.get_function("k") is not None


@pytest.mark.parametrize("cache_dir", [None, False, "PATH"])
def test_pycuda_cache_dir_values(cache_dir, tmp_cache, tmp_path):
    if cache_dir == "PATH":
        cache_dir = str(tmp_path / "mine")
    src = "__global__ void k(int *o) { o[0] = %d; }" % (7 if cache_dir is None else 8)
    b1 = compiler.compile(src, arch="sm_90", cache_dir=cache_dir, nvcc_compat=True)
    b2 = compiler.compile(src, arch="sm_90", cache_dir=cache_dir, nvcc_compat=True)
    assert bytes(b1) == bytes(b2)
    if cache_dir is False:
        assert not os.path.exists(str(tmp_cache)) or not os.listdir(str(tmp_cache))
    elif cache_dir is None:
        assert os.listdir(str(tmp_cache))
    else:
        assert os.listdir(cache_dir)


# ---- struct layouts: GCC's attribute places ----


def _layout_asserts(ctype, dtype):
    """static_asserts that ctype has dtype's itemsize and field offsets."""
    out = ["static_assert(sizeof(%s) == %d, \"sizeof %s\");" % (ctype, dtype.itemsize, ctype)]
    for name in dtype.names:
        out.append(
            "static_assert(offsetof(%s, %s) == %d, \"offsetof %s.%s\");"
            % (ctype, name, dtype.fields[name][1], ctype, name)
        )
    return "\n".join(out)


REIKNA_NESTED = """
#define ALIGN(bytes) __align__(bytes)
typedef struct nested_ {
    int  val1;
    char  pad;
} ALIGN(4) nested;
typedef struct outer_ {
    int  val1;
    short  val2;
    nested ALIGN(8) nested;
} ALIGN(32) outer;
"""


def _reikna_dtypes():
    nested = np.dtype(
        dict(
            names=["val1", "pad"],
            formats=[np.int32, np.int8],
            offsets=[0, 4],
            itemsize=8,
            aligned=True,
        )
    )
    outer = np.dtype(
        dict(
            names=["val1", "val2", "nested"],
            formats=[np.int32, np.int16, nested],
            offsets=[0, 4, 8],
            itemsize=32,
            aligned=True,
        )
    )
    return nested, outer


def test_trailing_align_is_nvccs_under_sourcemodule(tmp_cache):
    # reikna's test_hardcoded_offsets: NumPy and nvcc say 32; NVRTC alone says 16
    nested, outer = _reikna_dtypes()
    src = (
        "#include <stddef.h>\n"
        + REIKNA_NESTED
        + _layout_asserts("nested", nested)
        + "\n"
        + _layout_asserts("outer", outer)
        + "\n__global__ void k(outer *o) { o->val1 = 1; }\n"
    )
    with pytest.raises(CompileError, match=r'static assertion failed with "sizeof outer"'):
        compiler.compile(src, arch="sm_90", target="ptx", nvcc_compat=False)
    for no_extern_c in (False, True):
        _sm_compile(src, no_extern_c=no_extern_c)


def test_packed_after_the_brace(tmp_cache):
    src = """#include <stddef.h>
struct P { char c; int i; } __attribute__((packed));
static_assert(sizeof(P) == 5, "packed");
static_assert(offsetof(P, i) == 1, "offset");
typedef struct { char c; double d; } __attribute__((__aligned__(32))) A;
static_assert(sizeof(A) == 32 && alignof(A) == 32, "aligned");
__global__ void k(P *p, A *a) { p->i = 1; a->d = 2; }
"""
    _sm_compile(src)


def test_gnu_attributes_keeps_lines_and_leaves_the_rest():
    src = REIKNA_NESTED + "// } ALIGN(4) x;\nconst char *s = \"} ALIGN(2) y;\";\n"
    out = _nvcc_compat.gnu_attributes(src)
    assert out.count("\n") == src.count("\n")
    assert "typedef struct ALIGN(4) nested_ {" in out
    assert "typedef struct ALIGN(32) outer_ {" in out
    assert "nested ALIGN(8) nested;" in out  # a field's attribute stays
    assert out.endswith("// } ALIGN(4) x;\nconst char *s = \"} ALIGN(2) y;\";\n")
    plain = "struct S { int a; };\nvoid f() { if (1) { } }\n"
    assert _nvcc_compat.gnu_attributes(plain) is plain


def _c_struct(dtype, name, decls):
    """A C declaration of an align=True NumPy struct dtype, reikna's way:
    each field and the struct aligned so that offsets and itemsize are
    NumPy's (nested struct dtypes declared first)."""
    lines = []
    for f in dtype.names:
        fd, off = dtype.fields[f]
        base = fd.base
        if base.names is not None:
            cname = "%s_%s" % (name, f)
            _c_struct(base, cname, decls)
        else:
            cname = {
                "i1": "signed char",
                "i2": "short",
                "i4": "int",
                "i8": "long long",
                "u1": "unsigned char",
                "f4": "float",
                "f8": "double",
            }[base.str[1:]]
        dims = "".join("[%d]" % d for d in fd.shape)
        align = _alignment(off, dtype, f)
        lines.append("    %s %s %s%s;" % (cname, "ALIGN(%d)" % align if align else "", f, dims))
    al = _struct_alignment(dtype)
    decls.append("typedef struct %s_ {\n%s\n} ALIGN(%d) %s;" % (name, "\n".join(lines), al, name))


def _natural(dtype):
    if dtype.names is None:
        return dtype.base.itemsize
    return _struct_alignment(dtype)


def _alignment(off, dtype, f):
    """The smallest power of two alignment >= the field's natural one that
    puts the field at off after the previous field."""
    names = dtype.names
    i = names.index(f)
    if i == 0:
        return None
    prev_end = dtype.fields[names[i - 1]][1] + dtype.fields[names[i - 1]][0].itemsize
    a = _natural(dtype.fields[f][0].base)
    while not (off % a == 0 and off - prev_end < a):
        a *= 2
        assert a <= 4096, "no alignment puts %s at %d" % (f, off)
    return a


def _struct_alignment(dtype):
    a = max(_natural(dtype.fields[f][0].base) for f in dtype.names)
    last = dtype.names[-1]
    end = dtype.fields[last][1] + dtype.fields[last][0].itemsize
    while not (dtype.itemsize % a == 0 and dtype.itemsize - end < a):
        a *= 2
        assert a <= 4096, "no alignment gives itemsize %d" % dtype.itemsize
    return a


def _numpy_nested_dtypes():
    inner = np.dtype(
        dict(names=["a", "b"], formats=[np.int32, np.int8], offsets=[0, 4], itemsize=32), align=True
    )
    yield np.dtype(
        dict(
            names=["x", "inner", "z"],
            formats=[np.int8, inner, np.float64],
            offsets=[0, 32, 64],
            itemsize=128,
        ),
        align=True,
    )
    inner64 = np.dtype(
        dict(names=["v", "w"], formats=[np.float64, np.float32], offsets=[0, 8], itemsize=64),
        align=True,
    )
    yield np.dtype(
        dict(names=["c", "inner"], formats=[np.int16, inner64], offsets=[0, 64], itemsize=128),
        align=True,
    )
    yield np.dtype(
        [
            ("a", np.int32),
            ("b", np.int16),
            ("n", np.dtype([("v", np.int32), ("p", np.int8)], align=True)),
        ],
        align=True,
    )
    yield np.dtype(
        [
            ("p", np.int32),
            ("arr", np.dtype([("v", np.int8), ("w", np.int8)], align=True), (2,)),
            ("r", np.int16, (2, 3)),
        ],
        align=True,
    )


@pytest.mark.parametrize(
    "dtype", list(_numpy_nested_dtypes()), ids=["inner32", "inner64", "nested", "nested_array"]
)
def test_numpy_aligned_nested_structs_match(dtype, tmp_cache):
    decls = []
    _c_struct(dtype, "T", decls)
    checks = []

    def walk(dt, cname):
        checks.append(_layout_asserts(cname, dt))
        for f in dt.names:
            if dt.fields[f][0].base.names is not None:
                walk(dt.fields[f][0].base, "%s_%s" % (cname, f))

    walk(dtype, "T")
    src = (
        "#include <stddef.h>\n#define ALIGN(bytes) __align__(bytes)\n"
        + "\n".join(decls)
        + "\n"
        + "\n".join(checks)
        + "\n__global__ void k(T *t, int n) { t[n].%s = 0; }\n" % dtype.names[0]
    )
    _sm_compile(src, no_extern_c=True)
    _sm_compile(src)


def _reikna_source(dtype):
    """reikna 0.9.0's own declaration of dtype's struct (ctype_module,
    rendered as reikna renders a kernel) with static_asserts of NumPy's
    itemsize and offsets, and reikna's CUDA definition of ALIGN."""
    rdtypes = pytest.importorskip("reikna.cluda.dtypes")
    kernel = pytest.importorskip("reikna.cluda.kernel")
    checks = ["static_assert(sizeof(${s}) == %d, \"sizeof\");" % dtype.itemsize]
    checks += [
        "static_assert(offsetof(${s}, %s) == %d, \"offsetof %s\");" % (f, dtype.fields[f][1], f)
        for f in dtype.names
    ]
    main = (
        "\n".join(checks)
        + "\nextern \"C\" __global__ void k(${s} *t) { t[1].%s = 0; }\n" % dtype.names[0]
    )
    src = kernel.render_template_source(main, render_kwds=dict(s=rdtypes.ctype_module(dtype)))
    return "#include <stddef.h>\n#define ALIGN(bytes) __align__(bytes)\n" + src


def test_reikna_declarations_match_numpy(tmp_cache):
    # reikna's test_hardcoded_offsets dtype: 32 bytes (NVRTC alone: 16)
    _, outer = _reikna_dtypes()
    src = _reikna_source(outer)
    assert "ALIGN(32)" in src
    with pytest.raises(CompileError, match=r'static assertion failed with "sizeof"'):
        compiler.compile(src, arch="sm_90", target="ptx")
    _sm_compile(src, no_extern_c=True)


@pytest.mark.parametrize(
    "dtype", list(_numpy_nested_dtypes()), ids=["inner32", "inner64", "nested", "nested_array"]
)
def test_reikna_declarations_of_numpy_dtypes(dtype, tmp_cache):
    rdtypes = pytest.importorskip("reikna.cluda.dtypes")
    _sm_compile(
        _reikna_source(rdtypes.align(dtype) if dtype.names[0] in ("a", "p") else dtype),
        no_extern_c=True,
    )


# ---- the driver's exceptions: PyCUDA's names and relations ----

# PyCUDA 2026.1: pycuda._driver's exceptions (src/wrapper/wrap_cudadrv.cpp's
# DECLARE_EXC: every one a subclass of Error, Error of Exception) and
# pycuda.driver.CompileError(Error)
PYCUDA_EXCEPTIONS = {
    "Error": "Exception",
    "MemoryError": "Error",
    "LogicError": "Error",
    "LaunchError": "Error",
    "RuntimeError": "Error",
    "CompileError": "Error",
}


@pytest.mark.parametrize("name, base", sorted(PYCUDA_EXCEPTIONS.items()))
def test_exception_hierarchy_is_pycudas(name, base):
    cls = getattr(cuda, name)
    parent = Exception if base == "Exception" else getattr(cuda, base)
    assert issubclass(cls, parent) and issubclass(cls, Exception)
    # no PyCUDA exception is a subclass of another but Error
    for other, other_base in PYCUDA_EXCEPTIONS.items():
        if other not in (name, "Error") and other_base == "Error" and name != "Error":
            assert not issubclass(cls, getattr(cuda, other)), (name, other)
    # pygpu's additions: MemoryError and RuntimeError are the built-ins too
    import builtins

    if name in ("MemoryError", "RuntimeError"):
        assert issubclass(cls, getattr(builtins, name))


def test_driver_errors_are_caught_as_pycuda_code_catches_them():
    for code, cls in [(2, cuda.MemoryError), (719, cuda.LaunchError), (1, cuda.LogicError)]:
        with pytest.raises(cuda.Error) as ei:
            _driver._raise_for_code(code, "cuTest")
        assert type(ei.value) is cls and ei.value.code == code


# ---- enum members print their names ----


def test_enum_members_print_their_names():
    m = cuda.device_attribute.MAX_THREADS_PER_BLOCK
    assert str(m) == "MAX_THREADS_PER_BLOCK" and "%s" % m == "MAX_THREADS_PER_BLOCK"
    assert f"{m}" == "MAX_THREADS_PER_BLOCK" and f"{m:d}" == "%d" % m == str(int(m))
    assert m == int(m) and hash(m) == hash(int(m)) and {int(m): 1}[m] == 1
    assert "%s: %s" % (m, 1024) == "MAX_THREADS_PER_BLOCK: 1024"
    assert str(cuda.ctx_flags.SCHED_AUTO) == "SCHED_AUTO"
    assert str(cuda.compute_mode.DEFAULT) == "DEFAULT" and f"{cuda.compute_mode.DEFAULT:d}" == "0"
    assert str(cuda.host_alloc_flags.PORTABLE) == "PORTABLE"


@pytest.mark.standin
def test_get_attributes_is_keyed_by_named_members(standin):
    cuda.init()
    attrs = cuda.Device(0).get_attributes()
    key = next(k for k in attrs if int(k) == int(cuda.device_attribute.MAX_THREADS_PER_BLOCK))
    assert type(key) is cuda.device_attribute and str(key) == "MAX_THREADS_PER_BLOCK"
    assert attrs[cuda.device_attribute.MAX_THREADS_PER_BLOCK] == attrs[int(key)]
    assert "MAX_THREADS_PER_BLOCK: %d" % attrs[key] in ["%s: %s" % kv for kv in attrs.items()]


@pytest.mark.standin
def test_get_attributes_gives_pycudas_attributes_under_pycudas_names(standin):
    """PyCUDA's examples/dump_properties.py prints sorted str(key) lines of
    get_attributes(): PyCUDA 2026.1's device_attribute names, one a value,
    the alphabetically first (dir() order) where it has two: the list
    pygpu.driver keeps; every=True gives every attribute."""
    cuda.init()
    dev = cuda.Device(0)
    attrs = dev.get_attributes()
    names = sorted(str(k) for k in attrs)
    assert len(names) == len(set(names)) == len(attrs)
    assert set(names) <= set(cuda._PYCUDA_DEVICE_ATTRIBUTES)
    # PyCUDA's aliases: its key for the value is the first name dir() lists
    for first, other in [
        ("MAXIMUM_TEXTURE2D_ARRAY_WIDTH", "MAXIMUM_TEXTURE2D_LAYERED_WIDTH"),
        ("MAXIMUM_TEXTURE2D_ARRAY_HEIGHT", "MAXIMUM_TEXTURE2D_LAYERED_HEIGHT"),
        ("MAXIMUM_TEXTURE2D_ARRAY_NUMSLICES", "MAXIMUM_TEXTURE2D_LAYERED_LAYERS"),
        ("MAX_REGISTERS_PER_BLOCK", "REGISTERS_PER_BLOCK"),
        ("MAX_SHARED_MEMORY_PER_BLOCK", "SHARED_MEMORY_PER_BLOCK"),
    ]:
        a, b = getattr(cuda.device_attribute, first), getattr(cuda.device_attribute, other)
        assert a is b and str(b) == first
        if int(a) in attrs:
            assert first in names and other not in names
    # newer attributes than PyCUDA's: only with every=True
    every = dev.get_attributes(every=True)
    assert set(attrs.items()) < set(every.items())
    newer = cuda.device_attribute.CLUSTER_LAUNCH
    assert newer not in attrs and str(newer) not in cuda._PYCUDA_DEVICE_ATTRIBUTES
    assert every.get(newer) == dev.get_attribute(newer)
    with pytest.raises(
        # CPython's own wording, which 3.13 changed ("get_attributes() got an
        # unexpected keyword argument 'bogus'")
        TypeError,
        match=r"'bogus' is an invalid keyword argument for get_attributes"
        r"|get_attributes\(\) got an unexpected keyword argument 'bogus'",
    ):
        dev.get_attributes(bogus=1)


@pytest.mark.standin
def test_compute_mode_attribute_is_a_compute_mode_member(standin):
    """PyCUDA's get_attribute(COMPUTE_MODE) is a compute_mode member, so
    dump_properties.py prints 'COMPUTE_MODE: DEFAULT' (pygpu printed 0)."""
    cuda.init()
    dev = cuda.Device(0)
    mode = dev.get_attribute(cuda.device_attribute.COMPUTE_MODE)
    assert type(mode) is cuda.compute_mode and str(mode) == mode.name
    assert dev.compute_mode is mode and mode == int(mode)
    attrs = dev.get_attributes()
    assert "COMPUTE_MODE: %s" % mode.name in ["%s: %s" % kv for kv in attrs.items()]
    assert type(dev.get_attribute(cuda.device_attribute.WARP_SIZE)) is int


@pytest.mark.gpu
def test_get_attributes_on_a_gpu_print_names(ctx):
    attrs = ctx.get_device().get_attributes()
    lines = ["%s: %s" % kv for kv in attrs.items()]
    mt = cuda.Context.get_device().max_threads_per_block
    assert "MAX_THREADS_PER_BLOCK: %d" % mt in lines
    assert all(not line.split(":")[0].isdigit() for line in lines)


def test_pycuda_cache_environment(tmp_path, monkeypatch):
    from pygpu import store

    monkeypatch.delenv("PYGPU_CACHE_DIR", raising=False)
    monkeypatch.setenv("PYCUDA_CACHE_DIR", str(tmp_path / "pc"))
    assert store.default_cache_dir() == str(tmp_path / "pc")
    monkeypatch.setenv("PYGPU_CACHE_DIR", str(tmp_path / "pg"))
    assert store.default_cache_dir() == str(tmp_path / "pg")  # pygpu's own wins
    compiler.clear_cache(disk=False)
    src = "__global__ void k(int *o) { o[0] = 11; }"
    compiler.compile(src, arch="sm_90")
    assert os.listdir(str(tmp_path / "pg"))
    # PyCUDA's rule: PYCUDA_DISABLE_CACHE set at all (even "0") turns the cache off
    monkeypatch.setenv("PYCUDA_DISABLE_CACHE", "0")
    monkeypatch.setenv("PYGPU_CACHE_DIR", str(tmp_path / "off"))
    assert store.resolve_dir(None) is None
    compiler.compile(src.replace("11", "12"), arch="sm_90")
    assert not os.path.exists(str(tmp_path / "off"))
    compiler.clear_cache(disk=False)


def test_attribute_move_is_in_the_cache_key(tmp_cache, monkeypatch):
    from pygpu import store

    src = REIKNA_NESTED + "__global__ void k(outer *o) { o->val1 = 1; }\n"
    compiler.compile(src, arch="sm_90", nvcc_compat=True)
    misses = store.stats["misses"]
    compiler.clear_cache(disk=False)
    compiler.compile(src, arch="sm_90", nvcc_compat=True)  # from the disk
    assert store.stats["misses"] == misses
    compiler.clear_cache(disk=False)
    monkeypatch.setattr(_nvcc_compat, "ATTRIBUTES_VERSION", "gnu-attributes-test")
    compiler.compile(src, arch="sm_90", nvcc_compat=True)
    assert store.stats["misses"] == misses + 1


def _reikna_cuda_prelude():
    kernel = pytest.importorskip("reikna.cluda.kernel")

    class _Api:
        def get_id(self):
            return "cuda"

    class _Thread:
        api = _Api()

    return kernel.render_prelude(_Thread())


REIKNA_FILL = """
KERNEL void test(GLOBAL_MEM ${struct} *dest)
{
  const SIZE_T i = get_global_id(0);
  ${struct} res;
  %for i, field_info in enumerate(dtypes.flatten_dtype(dtype)):
  res.${".".join(field_info[0])} = ${i} + i;
  %endfor
  dest[i] = res;
}
static_assert(sizeof(${struct}) == ${dtype.itemsize}, "sizeof");
"""


def _reikna_fill_source(dtype):
    rdtypes = pytest.importorskip("reikna.cluda.dtypes")
    kernel = pytest.importorskip("reikna.cluda.kernel")
    return _reikna_cuda_prelude() + kernel.render_template_source(
        REIKNA_FILL, render_kwds=dict(struct=rdtypes.ctype_module(dtype), dtype=dtype)
    )


def test_reikna_whole_kernel_source(tmp_cache):
    # reikna's own CUDA prelude and struct module (its test_hardcoded_offsets)
    _, outer = _reikna_dtypes()
    src = _reikna_fill_source(outer)
    with pytest.raises(CompileError, match=r'static assertion failed with "sizeof"'):
        compiler.compile(src, arch="sm_90", target="ptx")
    assert ".entry test(" in _sm_compile(src, no_extern_c=True)


@pytest.mark.gpu
@pytest.mark.parametrize("which", ["hardcoded", "inner32", "inner64"])
def test_reikna_struct_fill_on_the_gpu(which, ctx):
    # reikna's check_struct_fill: every field of every element, from the device
    rdtypes = pytest.importorskip("reikna.cluda.dtypes")
    if which == "hardcoded":
        dtype = _reikna_dtypes()[1]
    else:
        dtype = list(_numpy_nested_dtypes())[0 if which == "inner32" else 1]
    n = 128
    mod = compiler.SourceModule(_reikna_fill_source(dtype), no_extern_c=True)
    out = np.zeros(n, dtype)
    mod.get_function("test")(cuda.Out(out), block=(n, 1, 1), grid=(1, 1))
    idx = np.arange(n)
    for i, (path, _) in enumerate(rdtypes.flatten_dtype(dtype)):
        got = rdtypes.extract_field(out, path)
        np.testing.assert_array_equal(got, (i + idx).astype(got.dtype))


@pytest.mark.gpu
def test_pycuda_kernel_with_nvcc_names_runs(ctx, rng, capsys):
    # a kernel as written for nvcc: uint, ushort, M_PI, INT_MAX, std::sqrt,
    # no #include; given as a code generator's object, kept on disk
    gen = _Generated(
        [
            "__global__ void k(float *out, const float *x, uint n, ushort scale)",
            "{",
            "    uint i = blockIdx.x * blockDim.x + threadIdx.x;",
            "    if (i >= n) return;",
            "    int32_t big = INT_MAX;",
            "    out[i] = (float)(M_PI * std::sqrt(x[i])) * scale + (big == 2147483647 ? 1.0f : -1.0f);",
            "}",
        ]
    )
    mod = compiler.SourceModule(gen, keep=True)
    d = re.search(r"\*\*\* compiler output in (\S+)", capsys.readouterr().out).group(1)
    assert {"kernel.cu", "kernel.options"} <= set(os.listdir(d))
    n = 1000
    x = rng.random(n).astype(np.float32) * 100
    out = np.empty_like(x)
    mod.get_function("k")(
        cuda.Out(out),
        cuda.In(x),
        np.uint32(n),
        np.uint16(3),
        block=(256, 1, 1),
        grid=((n + 255) // 256, 1),
    )
    np.testing.assert_allclose(out, (np.pi * np.sqrt(x)).astype(np.float32) * 3 + 1, rtol=1e-5)


def test_compile_plain_keeps_and_has_the_prelude(tmp_cache, capsys):
    b = compiler.compile_plain(
        'extern "C" __global__ void k(uint *x) { x[0] = INT_MAX; }',
        ["-arch=sm_90", "--compiler-options", "-Wall"],
        True,
        "nvcc",
        None,
        target="ptx",
    )
    d = re.fullmatch(r"\*\*\* compiler output in (\S+)\n", capsys.readouterr().out).group(1)
    assert sorted(os.listdir(d)) == ["kernel.cu", "kernel.options", "kernel.ptx"]
    assert b".entry k(" in b


@pytest.mark.standin
def test_sourcemodule_takes_pycudas_nvcc_keyword(standin, tmp_cache):
    mod = compiler.SourceModule("__global__ void k(uint *x) { x[0] = 1; }", nvcc="/opt/nvcc")
    assert mod.get_function("k") is not None


@pytest.mark.parametrize(
    "include, use",
    [
        ("<cuda/std/cstdint>", "cuda::std::int64_t a = INT64_MAX; int64_t b = a; o[0] = b + n;"),
        ("<cuda/std/type_traits>", "o[0] = cuda::std::is_same<int32_t, int>::value + n;"),
        (
            "<cuda/std/limits>",
            "o[0] = cuda::std::numeric_limits<int>::max() + sizeof(max_align_t);",
        ),
        (
            "<stdint.h>\n#include <cuda/std/cstdint>\n#include <cstdint>",
            "int_fast16_t f = INT_FAST16_MAX; o[0] = INT64_C(5) + f + std::uint32_t(n);",
        ),
        (
            "<cub/block/block_reduce.cuh>",
            "typedef cub::BlockReduce<int, 128> R; __shared__ R::TempStorage t; "
            "o[0] = R(t).Sum((int)n);",
        ),
    ],
)
def test_cccl_headers_after_the_prelude(include, use, tmp_cache):
    # CCCL declares the integer types and <limits.h>'s macros itself under
    # NVRTC: the prelude's agree with them, and no warning is shown
    src = "#include %s\n__global__ void k(long long *o, uint n) { %s (void)M_PI; }\n" % (
        include,
        use,
    )
    ptx = _sm_compile(src, no_extern_c=True, include_dirs=[d for d in compiler._trusted_dirs()])
    assert ".entry" in ptx


def test_source_module_takes_pycudas_positional_order():
    """PyCUDA's SourceModule(source, nvcc, options, keep, no_extern_c, arch,
    code, cache_dir, include_dirs): a positional call means the same here."""
    import inspect
    from pygpu.compiler import SourceModule

    params = list(inspect.signature(SourceModule.__init__).parameters)[1:10]
    assert params == [
        "source",
        "nvcc",
        "options",
        "keep",
        "no_extern_c",
        "arch",
        "code",
        "cache_dir",
        "include_dirs",
    ]
    kw_only = [
        p
        for p in inspect.signature(SourceModule.__init__).parameters.values()
        if p.kind is p.KEYWORD_ONLY
    ]
    assert {p.name for p in kw_only} >= {"name_expressions", "std", "defines", "target"}


@pytest.mark.parametrize(
    "header",
    [
        "cooperative_groups.h",
        "cuda/std/ctime",
        "cuda/std/chrono",
        "cuda/std/cstdlib",
        "cuda/std/cstdint",
        "cuda/std/climits",
        "cuda/std/cmath",
        "cuda/std/complex",
        "cub/block/block_reduce.cuh",
        "cuda/barrier",
        "cuda_fp16.h",
        "curand_kernel.h",
    ],
)
def test_nvcc_prelude_compiles_beside_the_cuda_headers(header):
    """The prelude's host types agree with what CUDA's headers declare under
    NVRTC (time_t is CCCL's long long: <cooperative_groups.h> reaches
    <cuda/std/ctime>, and failed with the prelude's long)."""
    from pygpu.compiler import compile as nvrtc_compile

    src = (
        '#include <%s>\nextern "C" __global__ void k(int *o, time_t t)'
        '{ uint u = 1; o[0] = (int)u + (int)M_PI + INT_MAX + (int)t; }' % header
    )
    assert nvrtc_compile(src, arch="sm_90", nvcc_compat=True)


# ---- compile(): PyCUDA's call (pycuda.compiler.compile) ----

PYC_SRC = "__global__ void k(float *x, uint n) { x[0] = n * VAL; }"


def _elf_arch(cubin):
    """The sm_XY number an ELF cubin is for (e_flags' second byte, as nvcc's)."""
    import struct

    assert bytes(cubin[:4]) == b"\x7fELF"
    return (struct.unpack_from("<I", cubin, 0x30)[0] >> 8) & 0xFF


@pytest.mark.parametrize(
    "call, target",
    [
        (lambda c, s: c.compile(s, "nvcc", ["-DVAL=3"], False, False, "sm_90"), "cubin"),
        (
            lambda c, s: c.compile(
                s,
                "/usr/local/cuda/bin/nvcc",
                ["-DVAL=3"],
                False,
                False,
                "sm_90",
                None,
                None,
                [],
                "ptx",
            ),
            "ptx",
        ),
        (lambda c, s: c.compile(s, nvcc="nvcc", options=["-DVAL=3"], arch="sm_90"), "cubin"),
        (
            lambda c, s: c.compile(s, options=["-DVAL=3"], keep=False, arch="sm_90", target="ptx"),
            "ptx",
        ),
        (lambda c, s: c.compile(s, options=["-DVAL=3"], no_extern_c=False, code="sm_90"), "cubin"),
        (lambda c, s: c.compile(s, "nvcc", ["-DVAL=3", "-arch=sm_90"]), "cubin"),
        (lambda c, s: c.compile(s, "nvcc", ["-DVAL=3"], arch="compute_90", code="sm_90"), "cubin"),
        (
            lambda c, s: c.compile(
                source=s,
                nvcc="nvcc",
                options=["-DVAL=3", "-O3", "-Xcompiler", "-Wall", "--gpu-architecture", "sm_90"],
                target="ptx",
            ),
            "ptx",
        ),
    ],
)
def test_pycuda_style_compile_gives_pycudas_bytes(call, target, tmp_cache):
    """PyCUDA's compile(): extern "C", nvcc's implicit names (uint), nvcc's
    options translated, plain bytes; the same image pygpu's own call with
    the equivalent arguments gives."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", compiler.CompilerWarning)
        out = call(compiler, PYC_SRC)
    assert type(out) is bytes
    mine = compiler.compile(
        PYC_SRC,
        options=["-DVAL=3"],
        arch="sm_90" if target == "cubin" else "compute_90",
        target=target,
        nvcc_compat=True,
        extern_c=True,
    )
    assert type(mine) is compiler.Binary and out == bytes(mine)
    if target == "cubin":
        assert _elf_arch(out) == 90
    else:
        text = out.decode()
        assert ".entry k(" in text and ".target sm_90" in text and "_Z1k" not in text


def test_pycuda_compile_no_extern_c_mangles(tmp_cache):
    def entries(ptx):
        return re.findall(r"\.entry (\w+)\(", ptx.decode())

    src = PYC_SRC.replace("VAL", "2")
    assert entries(compiler.compile(src, "nvcc", arch="sm_80", target="ptx")) == ["k"]
    assert entries(
        compiler.compile(src, "nvcc", no_extern_c=False, arch="sm_80", target="ptx")
    ) == ["k"]
    assert entries(compiler.compile(src, "nvcc", no_extern_c=True, arch="sm_80", target="ptx")) == [
        "_Z1kPfj"
    ]
    assert entries(
        compiler.compile(src, "nvcc", None, False, True, "sm_80", None, None, None, "ptx")
    ) == ["_Z1kPfj"]
    assert entries(
        compiler.compile('extern "C" ' + src, "nvcc", no_extern_c=True, arch="sm_80", target="ptx")
    ) == ["k"]
    # no_extern_c with pygpu's extern_c: agreeing is fine, contradicting is refused
    assert entries(
        compiler.compile(src, no_extern_c=True, extern_c=False, arch="sm_80", target="ptx")
    ) == ["_Z1kPfj"]
    with pytest.raises(
        ValueError,
        match=r"^compile\(\): extern_c=True and no_extern_c=True say "
        r"opposite things; give one of them$",
    ):
        compiler.compile(src, no_extern_c=True, extern_c=True, arch="sm_80")
    # a PyCUDA call gets nvcc's implicit names; a source without them compiles too
    assert entries(
        compiler.compile(
            "__global__ void q(int *o) { o[0] = INT_MAX; }", "nvcc", arch="sm_80", target="ptx"
        )
    ) == ["q"]


def test_pygpu_compile_is_unchanged(tmp_cache):
    """pygpu's own calls keep their meaning: options second, C++ linkage,
    a Binary; nvcc's implicit names (as SourceModule) unless
    nvcc_compat=False."""
    src = PYC_SRC.replace("uint", "unsigned")
    b = compiler.compile(src, ["-DVAL=4"], "compute_90", "ptx")
    assert type(b) is compiler.Binary and b.target == "ptx" and b.arch == "compute_90"
    assert ".entry _Z1kPfj(" in b.decode()
    b2 = compiler.compile(src, options="-DVAL=4", arch="sm_90")
    assert type(b2) is compiler.Binary and b2.target == "cubin" and _elf_arch(b2) == 90
    assert ".entry _Z1kPfj(" in compiler.compile(PYC_SRC, ["-DVAL=4"], "compute_90").decode()
    with pytest.raises(CompileError, match="identifier \"uint\" is undefined"):
        compiler.compile(PYC_SRC, options=["-DVAL=4"], arch="sm_90", nvcc_compat=False)
    import inspect

    params = inspect.signature(compiler.compile).parameters
    assert list(params)[:4] == ["source", "options", "arch", "target"]
    assert {n for n, p in params.items() if p.kind is p.KEYWORD_ONLY} == {
        "compiler",  # the opt-in nvcc back end (both forms of the call)
        "nvcc",
        "keep",
        "no_extern_c",
        "code",
    }


@pytest.mark.parametrize("device, want", [(None, None), ("sm_80", 80), ("compute_120", 120)])
def test_pycuda_compile_default_arch(device, want, tmp_cache, monkeypatch):
    """arch=None: the current device's; with no driver or device, nvcc's
    default (sm_75 from CUDA 13, sm_52 before), as PyCUDA gets from nvcc."""
    if device is None:

        def no_device(target, cache_dir=None):
            raise cuda.CudaUnavailableError("no CUDA driver")

        monkeypatch.setattr(compiler, "_device_arch_and_target", no_device)
        want = 75 if compiler.nvrtc_version()[0] >= 13 else 52
    else:
        monkeypatch.setattr(
            compiler, "_device_arch_and_target", lambda target, cache_dir=None: (device, "cubin")
        )
    src = PYC_SRC.replace("VAL", "5")
    assert _elf_arch(compiler.compile(src, "nvcc")) == want
    assert _elf_arch(compiler.compile(src, keep=False)) == want
    ptx = compiler.compile(src, "nvcc", target="ptx").decode()
    assert ".target sm_%d" % want in ptx


def test_pycuda_compile_default_options(tmp_cache, monkeypatch):
    """options=None means DEFAULT_NVCC_FLAGS (PYCUDA_DEFAULT_NVCC_FLAGS), as
    in PyCUDA; options=[] means none."""
    from pygpu import linking

    monkeypatch.setattr(linking, "DEFAULT_NVCC_FLAGS", ["-DVAL=11", "-O2"])
    ptx = compiler.compile(PYC_SRC, "nvcc", arch="sm_90", target="ptx")
    assert ptx == compiler.compile(PYC_SRC, "nvcc", ["-DVAL=11"], arch="sm_90", target="ptx")
    with pytest.raises(CompileError, match='identifier "VAL" is undefined') as ei:
        compiler.compile(PYC_SRC, "nvcc", [], arch="sm_90")
    assert 'identifier "VAL" is undefined' in ei.value.stderr
    assert "--gpu-architecture=sm_90" in ei.value.command_line


def test_pycuda_compile_keep(tmp_cache, capsys):
    src = PYC_SRC.replace("VAL", "6")
    b = compiler.compile(src, "nvcc", None, True, False, "sm_90")
    assert type(b) is bytes
    d = re.fullmatch(r"\*\*\* compiler output in (\S+)\n", capsys.readouterr().out).group(1)
    assert sorted(os.listdir(d)) == ["kernel.cu", "kernel.cubin", "kernel.options", "kernel.ptx"]
    with open(os.path.join(d, "kernel.cubin"), "rb") as f:
        assert f.read() == b
    with open(os.path.join(d, "kernel.cu")) as f:
        text = f.read()
    assert (
        'extern "C" {\n#line 1\n' + src + "\n}\n" in text and "typedef unsigned int uint;" in text
    )
    with open(os.path.join(d, "kernel.ptx")) as f:
        assert ".entry k(" in f.read()
    p = compiler.compile(src, keep=True, arch="sm_90", target="ptx")
    d = re.fullmatch(r"\*\*\* compiler output in (\S+)\n", capsys.readouterr().out).group(1)
    assert sorted(os.listdir(d)) == ["kernel.cu", "kernel.options", "kernel.ptx"]
    with open(os.path.join(d, "kernel.ptx"), "rb") as f:
        assert f.read() == p
    # keep=False prints nothing
    compiler.compile(src, keep=False, arch="sm_90")
    assert capsys.readouterr().out == ""


def test_pycuda_compile_fatbin(tmp_cache):
    from pygpu import _fatbin

    src = PYC_SRC.replace("VAL", "7")
    if not _fatbin.available():
        with pytest.raises(
            cuda.CudaUnavailableError, match=r"target='fatbin' needs NVIDIA's nvFatbin library"
        ):
            compiler.compile(src, "nvcc", arch="sm_90", target="fatbin")
        pytest.skip("nvFatbin is not installed (pip install nvidia-nvfatbin)")
    f = compiler.compile(src, "nvcc", arch="sm_90", target="fatbin")
    assert type(f) is bytes
    assert f[:8] == b"\x50\xed\x55\xba\x01\x00\x10\x00"  # nvcc --fatbin's header
    cubin = compiler.compile(src, "nvcc", arch="sm_90")
    assert cubin in f  # the sm_90 image itself
    # target="fatbin" alone makes the call PyCUDA's
    assert compiler.compile(src, arch="sm_90", target="fatbin") == f
    assert (
        compiler.compile_plain(
            'extern "C" {' + src + '}', ["-arch=sm_90"], False, "nvcc", None, target="fatbin"
        )
        == f
    )


def test_pycuda_compile_keeps_the_fatbin(tmp_cache, capsys):
    from pygpu import _fatbin

    if not _fatbin.available():
        pytest.skip("nvFatbin is not installed (pip install nvidia-nvfatbin)")
    f = compiler.compile(
        PYC_SRC.replace("VAL", "8"), "nvcc", keep=True, arch="sm_90", target="fatbin"
    )
    d = re.fullmatch(r"\*\*\* compiler output in (\S+)\n", capsys.readouterr().out).group(1)
    assert sorted(os.listdir(d)) == [
        "kernel.cu",
        "kernel.cubin",
        "kernel.fatbin",
        "kernel.options",
        "kernel.ptx",
    ]
    with open(os.path.join(d, "kernel.fatbin"), "rb") as fh:
        assert fh.read() == f


def test_pycuda_compile_under_cuda_debugging(tmp_cache, capsys, monkeypatch):
    """PyCUDA's CUDA_DEBUGGING (set_debugging()): -G, the files kept, no cache."""
    monkeypatch.setattr(cuda, "CUDA_DEBUGGING", True)
    b = compiler.compile(PYC_SRC.replace("VAL", "9"), "nvcc", arch="sm_90")
    d = re.fullmatch(r"\*\*\* compiler output in (\S+)\n", capsys.readouterr().out).group(1)
    with open(os.path.join(d, "kernel.options")) as fh:
        opts = fh.read().split("\n")
    assert "--device-debug" in opts or "-G" in opts
    with open(os.path.join(d, "kernel.cubin"), "rb") as fh:
        assert fh.read() == b
    assert not os.path.exists(str(tmp_cache)) or not os.listdir(str(tmp_cache))


@pytest.mark.parametrize(
    "call, exc, msg",
    [
        (
            lambda s: compiler.compile(s, nvcc=5),
            TypeError,
            r"^compile\(\): nvcc must be the nvcc command as a str \(PyCUDA's nvcc=; pygpu compiles "
            r"with NVRTC and does not run it\), not int$",
        ),
        (
            lambda s: compiler.compile(s, "-O3"),
            ValueError,
            r"^compile\(\): the second positional argument is PyCUDA's nvcc \(the compiler's "
            r"command\), not an option: '-O3'; give options as options=\['-O3'\]$",
        ),
        (
            lambda s: compiler.compile(s, "nvcc", target="elf"),
            ValueError,
            r"^compile\(\): target must be 'cubin', 'ptx' or 'fatbin' \(PyCUDA's targets\) or "
            r"'ltoir', not 'elf'$",
        ),
        (
            lambda s: compiler.compile(s, "nvcc", 5),
            TypeError,
            r"^compile\(\): options must be a list of str \(nvcc's or NVRTC's options\), not int$",
        ),
        (
            lambda s: compiler.compile(s, "nvcc", ["-O3", 5]),
            TypeError,
            r"^compile\(\): options must hold str, not int: 5$",
        ),
        (
            lambda s: compiler.compile(s, "nvcc", b"-O3"),
            TypeError,
            r"^compile\(\): options must be a list of str .*, not bytes$",
        ),
        (
            lambda s: compiler.compile(s, "nvcc", arch=[90]),
            TypeError,
            r"^compile\(\): arch must be an architecture such as 'sm_90' \(a str\), not list$",
        ),
        (
            lambda s: compiler.compile(s, "nvcc", arch="sm90"),
            ValueError,
            r"^compile\(\): arch must look like 'sm_90' or 'compute_90', not 'sm90'$",
        ),
        (
            lambda s: compiler.compile(s, code=object()),
            TypeError,
            r"^compile\(\): code must be an architecture such as 'sm_90' \(a str\), not object$",
        ),
        (
            lambda s: compiler.compile(s, "nvcc", ["-arch=sm9"]),
            ValueError,
            r"^compile\(\): the option -arch must look like 'sm_90' or 'compute_90', not 'sm9'$",
        ),
        (
            lambda s: compiler.compile(s, "nvcc", arch="compute_90"),
            ValueError,
            r"^compile\(\): target='cubin' needs a real architecture \(arch= or code= such as "
            r"'sm_90'\), not only 'compute_90'$",
        ),
        (
            lambda s: compiler.compile(s, "nvcc", include_dirs="/usr/include"),
            TypeError,
            r"^include_dirs must be a list, not a single str: write include_dirs=\['/usr/include'\]$",
        ),
        (
            lambda s: compiler.compile(
                s, "nvcc", None, False, False, "sm_90", None, None, [], "ptx", "extra"
            ),
            TypeError,
            r"^compile\(\) takes from 1 to 10 positional arguments but 11 were given$",
        ),
        (
            lambda s: compiler.compile(
                s,
                [],
                "sm_90",
                "ptx",
                [],
                None,
                (),
                None,
                False,
                None,
                "k.cu",
                False,
                False,
                False,
                "extra",
            ),
            TypeError,
            r"^compile\(\) takes from 1 to 14 positional arguments but 15 were given$",
        ),
        (
            lambda s: compiler.compile(s, "nvcc", nvcc="nvcc"),
            TypeError,
            r"^compile\(\) got multiple values for argument 'nvcc'$",
        ),
        (
            lambda s: compiler.compile(s, ["-O3"], options=[]),
            TypeError,
            r"^compile\(\) got multiple values for argument 'options'$",
        ),
        (
            lambda s: compiler.compile(s, arch="sm_90", cachedir=False),
            TypeError,
            r"^compile\(\) got an unexpected keyword argument 'cachedir'$",
        ),
        (
            lambda s: compiler.compile(b"__global__ void k() {}", "nvcc", arch="sm_90"),
            TypeError,
            r"^source must be a str, not bytes: decode it first \(source\.decode\(\)\)$",
        ),
    ],
)
def test_pycuda_compile_wrong_arguments(call, exc, msg, tmp_cache):
    with pytest.raises(exc, match=msg):
        call(PYC_SRC.replace("VAL", "1"))


def test_pycuda_compile_rejection_is_pycudas_compile_error(tmp_cache):
    src = "__global__ void k(float *x)\n{\n    x[0] = 1.0f +;\n}\n"
    with pytest.raises(CompileError, match=r"kernel\.cu\(3\): error: expected an expression") as ei:
        compiler.compile(src, "nvcc", ["-DX=1"], arch="sm_90")
    e = ei.value
    assert isinstance(e, cuda.CompileError) and e.stdout is None
    assert "kernel.cu(3): error: expected an expression" in e.stderr
    assert "-DX=1" in e.command_line and "--gpu-architecture=sm_90" in e.command_line


def test_pycuda_compile_through_the_alias(tmp_path):
    """A PyCUDA program that compiles with pycuda.compiler.compile and
    prints what it got, run unmodified through the alias."""
    import subprocess
    import sys

    prog = tmp_path / "prog.py"
    prog.write_text(
        "from pycuda.compiler import compile\n"
        "src = '__global__ void twice(float *a) { a[threadIdx.x] *= 2; }'\n"
        "ptx = compile(src, 'nvcc', ['-O3'], False, False, 'sm_80', target='ptx')\n"
        "print(type(ptx).__name__, b'.entry twice(' in ptx, b'.target sm_80' in ptx)\n"
        "cubin = compile(src, 'nvcc', arch='sm_80')\n"
        "print(type(cubin).__name__, cubin[:4])\n"
        "try:\n"
        "    compile(src, nvcc=['nvcc'])\n"
        "except TypeError as e:\n"
        "    print('TypeError', str(e).split(',')[0])\n"
    )
    env = dict(os.environ, PYGPU_CACHE_DIR=str(tmp_path / "cache"))
    r = subprocess.run(
        [sys.executable, "-m", "pygpu.pycuda_alias", str(prog)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout == (
        "bytes True True\nbytes b'\\x7fELF'\n"
        "TypeError compile(): nvcc must be the nvcc command as a str "
        "(PyCUDA's nvcc=; pygpu compiles with NVRTC and does not run it)\n"
    )


@pytest.mark.gpu
@pytest.mark.parametrize("target", ["cubin", "ptx", "fatbin"])
def test_pycuda_compile_loads_and_runs(target, ctx, rng, tmp_cache):
    """compile() as PyCUDA calls it, for the current device, loaded with
    module_from_buffer and launched by its unmangled name."""
    from pygpu import _fatbin

    if target == "fatbin" and not _fatbin.available():
        pytest.skip("nvFatbin is not installed (pip install nvidia-nvfatbin)")
    src = (
        "__global__ void scale(float *out, const float *x, uint n, float a)\n"
        "{ uint i = blockIdx.x * blockDim.x + threadIdx.x;"
        "  if (i < n) out[i] = a * x[i] + (float)M_PI; }"
    )
    image = compiler.compile(src, "nvcc", target=target)
    assert type(image) is bytes
    mod = cuda.module_from_buffer(image)
    f = mod.get_function("scale")
    n = 1000
    x = rng.standard_normal(n).astype(np.float32)
    out = np.zeros_like(x)
    f(
        cuda.Out(out),
        cuda.In(x),
        np.uint32(n),
        np.float32(2.5),
        block=(128, 1, 1),
        grid=((n + 127) // 128, 1),
    )
    np.testing.assert_allclose(out, 2.5 * x + np.float32(np.pi), rtol=1e-6, atol=1e-6)
