"""The compile cache never serves a stale binary (issue 13, defects 12, 17,
18, 19): every way a header can reach NVRTC is keyed or refused, the disk
store stays inside its directory, bad arguments are refused, the memos
hold nothing they should not.  No GPU needed; the SourceModule tests run
against the driver stand-in (make test's second pass) or a GPU."""

import gc
import json
import os
import re
import struct
import subprocess
import sys
import threading
import time
import weakref

import pytest

from pygpu import _driver, compiler, store
from pygpu.compiler import compile


def has_float(binary, value):
    """Whether PTX stores the float32 constant value."""
    bits = struct.unpack("<I", struct.pack("<f", value))[0]
    text = bytes(binary).decode()
    return ("0f%08X" % bits) in text or re.search(r"\b%d\b" % bits, text) is not None


def settle():
    """Wait until the files just written are no longer 'racy' (changed
    within a timestamp tick of now), so a compile of them is stored."""
    time.sleep(store.RACY_NS / 1e9 + 0.02)


KERNEL = 'extern "C" __global__ void k(float *x) { x[0] = V; }\n'


def write(path, value):
    """Write the header; an edit keeps the size and the modification time
    (as cp -p, tar or an editor within one clock tick do): only the inode
    change time tells."""
    try:
        old = os.stat(path)
    except FileNotFoundError:
        old = None
    text = ("#define V %sf\n" % value).encode()
    if old is not None and old.st_size == len(text):
        # in place with one write and no truncation: a compile that reads the
        # file meanwhile sees the old text or the new one, never an empty file
        fd = os.open(path, os.O_WRONLY)
        try:
            os.write(fd, text)
        finally:
            os.close(fd)
    else:
        path.write_bytes(text)
    if old is not None:
        os.utime(path, ns=(old.st_atime_ns, old.st_mtime_ns))


def stored(tmp_cache):
    return len(list(tmp_cache.rglob("*.bin")))


def check_edit(tmp_cache, header, src, **kw):
    """Compile src (whose V comes from header) twice around an edit of the
    header that keeps its size: the first result must have been stored, the
    second must see the edit."""
    write(header, "1.5")
    settle()
    first = compile(src, arch="compute_80", **kw)
    assert has_float(first, 1.5)
    assert stored(tmp_cache) == 1, "the first compile was not cached: the test proves nothing"
    write(header, "2.5")  # same size; maybe the same mtime tick
    second = compile(src, arch="compute_80", **kw)
    assert has_float(second, 2.5) and not has_float(second, 1.5)
    # and in a fresh memory (the disk entry of 1.5 must not be served)
    compiler.clear_cache(disk=False)
    third = compile(src, arch="compute_80", **kw)
    assert has_float(third, 2.5)


# ---- defect 18: every way a header reaches NVRTC ----


def test_header_found_through_the_working_directory(tmp_path, tmp_cache, monkeypatch):
    monkeypatch.chdir(tmp_path)
    check_edit(tmp_cache, tmp_path / "v.cuh", '#include "v.cuh"\n' + KERNEL)


@pytest.mark.parametrize(
    "line",
    [
        '/**/ #include "v.cuh"',
        '%:include "v.cuh"',
        '#\\\ninclude "v.cuh"',
        '#inc\\\nlude "v.cuh"',
        '# /* c */ include /* c */ "v.cuh"',
    ],
)
def test_unusual_include_spellings(line, tmp_path, tmp_cache):
    inc = tmp_path / "inc"
    inc.mkdir()
    check_edit(tmp_cache, inc / "v.cuh", line + "\n" + KERNEL, options=["-I" + str(inc)])


def test_trigraph_include(tmp_path, tmp_cache):
    """NVRTC (C++17) does not read ??= as #, an older -std may: the scanner
    takes both readings, so the header is keyed either way."""
    assert ("include", True, "v.cuh") in store.directives('??=include "v.cuh"\n')
    assert ("include", True, "w.cuh") in store.directives('// x ??/\n#include "w.cuh"\n')
    # with trigraphs, ??/ + newline splices the comment and the #include away;
    # without, the #include is real: both readings are scanned


def test_absolute_include(tmp_path, tmp_cache):
    h = tmp_path / "abs.cuh"
    check_edit(tmp_cache, h, '#include "%s"\n' % h + KERNEL)


@pytest.mark.parametrize("form", ["-include", "--pre-include="])
def test_pre_include_options(form, tmp_path, tmp_cache):
    h = tmp_path / "pre.cuh"
    opts = (
        ["-include", str(h)]
        if form == "-include"
        else ["--pre-include=pre.cuh", "-I" + str(tmp_path)]
    )
    check_edit(tmp_cache, h, KERNEL, options=opts)


def test_header_nested_through_a_relative_path(tmp_path, tmp_cache):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    (tmp_path / "a" / "outer.cuh").write_text('#include "../b/v.cuh"\n')
    check_edit(
        tmp_cache,
        tmp_path / "b" / "v.cuh",
        '#include "outer.cuh"\n' + KERNEL,
        include_dirs=[str(tmp_path / "a")],
    )


def test_macro_include_is_not_cached(tmp_path, tmp_cache):
    h = tmp_path / "v.cuh"
    write(h, "1.5")
    settle()
    src = '#define HEADER "%s"\n#include HEADER\n' % h + KERNEL
    assert has_float(compile(src, arch="compute_80"), 1.5)
    assert stored(tmp_cache) == 0 and compiler.cache_info()["memory_entries"] == 0
    write(h, "2.5")
    assert has_float(compile(src, arch="compute_80"), 2.5)
    # a macro argument of __has_include likewise
    src2 = '#define HDR "%s"\n#if __has_include(HDR)\n#include "%s"\n#endif\n' % (h, h) + KERNEL
    compile(src2, arch="compute_80")
    assert stored(tmp_cache) == 0


def test_a_header_added_later_that_shadows_another(tmp_path, tmp_cache):
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    write(b / "v.cuh", "1.5")
    settle()
    src = '#include "v.cuh"\n' + KERNEL
    dirs = [str(a), str(b)]
    assert has_float(compile(src, arch="compute_80", include_dirs=dirs), 1.5)
    assert stored(tmp_cache) == 1
    write(a / "v.cuh", "2.5")  # now found first
    assert has_float(compile(src, arch="compute_80", include_dirs=dirs), 2.5)
    compiler.clear_cache(disk=False)
    assert has_float(compile(src, arch="compute_80", include_dirs=dirs), 2.5)


def test_has_include_sees_a_header_appear(tmp_path, tmp_cache):
    src = (
        '#if __has_include("opt.cuh")\n#include "opt.cuh"\n#else\n#define V 1.5f\n#endif\n' + KERNEL
    )
    settle()
    assert has_float(compile(src, arch="compute_80", include_dirs=[str(tmp_path)]), 1.5)
    assert stored(tmp_cache) == 1
    write(tmp_path / "opt.cuh", "2.5")
    assert has_float(compile(src, arch="compute_80", include_dirs=[str(tmp_path)]), 2.5)


def test_unknown_file_options_are_not_cached(tmp_cache):
    with pytest.warns(compiler.CompilerWarning, match="precompiled header"):
        compile(KERNEL.replace("V", "1.0f"), arch="compute_80", options=["--pch"])
    assert stored(tmp_cache) == 0


def test_header_changed_while_sources_compile_in_threads(tmp_path, tmp_cache):
    h = tmp_path / "v.cuh"
    write(h, "1.5")
    settle()
    srcs = ['#include "v.cuh"\n' + KERNEL + "// %d\n" % i for i in range(40)]
    errors = []

    def work(s):
        try:
            compile(s, arch="compute_80", include_dirs=[str(tmp_path)])
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(s,)) for s in srcs]
    for i, t in enumerate(threads):
        t.start()
        if i == 20:
            write(h, "2.5")
    for t in threads:
        t.join()
    assert not errors
    wrong = [
        i
        for i, s in enumerate(srcs * 2)
        if not has_float(compile(s, arch="compute_80", include_dirs=[str(tmp_path)]), 2.5)
    ]
    assert wrong == []
    compiler.clear_cache(disk=False)
    wrong = [
        i
        for i, s in enumerate(srcs)
        if not has_float(compile(s, arch="compute_80", include_dirs=[str(tmp_path)]), 2.5)
    ]
    assert wrong == []


def test_scanner_cases():
    d = store.directives
    assert d('#include "a.h"\n') == {("include", True, "a.h")}
    assert d('/* x */ # include <b/c.h> // c\n') == {("include", False, "b/c.h")}
    assert d('// #include "no.h" is a comment, so is\n/* #include "no2.h" */\n') == set()
    assert d('const char *s = "#include \\"no.h\\"";\n') == set()
    assert ("include", True, "r.h") in d('#incl\\\nude "r.h"\n')
    assert ("has", False, "x.h") in d('#if __has_include(<x.h>)\n#endif\n')
    assert d('#if defined(__has_include)\n#endif\n') == set()
    with pytest.raises(store.Uncacheable, match="macro"):
        d('#include FOO\n')
    with pytest.raises(store.Uncacheable, match="macro"):
        d('#if __has_include(FOO)\n#endif\n')
    with pytest.raises(store.Uncacheable, match="line"):
        d('#line 10 "/elsewhere/k.cu"\n#include "a.h"\n')


# ---- defect 17: NUL inside options and name expressions ----


def test_nul_in_options_is_refused(tmp_cache):
    with pytest.raises(ValueError, match="compiler option .* contains a NUL"):
        compile(KERNEL, arch="compute_80", options=["-DV=1.0f\0-DW=2"])
    with pytest.raises(ValueError, match="name_expressions contains a NUL"):
        compile(KERNEL.replace("V", "1.0f"), arch="compute_80", name_expressions=["k\0x"])
    with pytest.raises(ValueError, match="defines contains a NUL"):
        compile(KERNEL, arch="compute_80", defines={"V\0W": "1"})
    with pytest.raises(ValueError, match="source contains a NUL"):
        compile(KERNEL + "\0junk", arch="compute_80")
    compiler._ensure_nvrtc()
    with pytest.raises(ValueError, match="compiler option .* contains a NUL"):
        _driver._nvrtc_compile(KERNEL, "k.cu", ["-DV=1\0x"], [], (), "ptx")
    with pytest.raises(ValueError, match="name expression .* contains a NUL"):
        _driver._nvrtc_compile(KERNEL, "k.cu", ["-DV=1"], [], ["k\0"], "ptx")


def test_key_parts_do_not_collide(tmp_cache):
    """Two option lists whose joined text is the same are different keys."""
    dep = store.Deps()
    assert store.make_key(["a\0b"], dep) != store.make_key(["a", "b"], dep)
    assert store.make_key(["ab", ""], dep) != store.make_key(["a", "b"], dep)


# ---- defect 19: the disk store stays in its directory, bad arguments ----


def test_clear_and_evict_never_leave_the_cache(tmp_path, tmp_cache, monkeypatch):
    outside = tmp_path / "outside"
    outside.mkdir()
    victim = outside / ("ab" + "0" * 62 + ".bin")
    victim.write_bytes(b"precious")
    compile(KERNEL.replace("V", "1.0f"), arch="sm_80")
    os.symlink(outside, tmp_cache / "ab")
    os.symlink(victim, tmp_cache / next(tmp_cache.glob("??")).name / ("f" * 64 + ".bin"))
    monkeypatch.setenv("PYGPU_CACHE_SIZE", "10")
    compile(KERNEL.replace("V", "2.0f"), arch="sm_80")  # evicts
    compiler.clear_cache()
    assert victim.read_bytes() == b"precious"
    assert compiler.cache_info()["disk_entries"] == 0


def test_unreadable_subdirectory(tmp_cache, monkeypatch):
    compile(KERNEL.replace("V", "1.0f"), arch="sm_80")
    (tmp_cache / "cd").mkdir()
    real_scandir, real_listdir = os.scandir, os.listdir

    def deny(path=".", real=None):
        if str(path).endswith(os.sep + "cd"):
            raise PermissionError(13, "Permission denied", str(path))
        return real(path)

    monkeypatch.setattr(os, "scandir", lambda p=".": deny(p, real_scandir))
    monkeypatch.setattr(os, "listdir", lambda p=".": deny(p, real_listdir))
    monkeypatch.setenv("PYGPU_CACHE_SIZE", "10")
    compile(KERNEL.replace("V", "2.0f"), arch="sm_80")
    assert compiler.cache_info()["disk_entries"] >= 1
    compiler.clear_cache()
    assert compiler.cache_info()["disk_entries"] == 0


def test_a_damaged_nvrtc_record_is_ignored(tmp_path):
    d = tmp_path / "c"
    code = (
        "import pygpu.compiler as c; b = c.compile(%r, arch='compute_80'); "
        "print(b'1069547520' in bytes(b))" % KERNEL.replace("V", "1.5f")
    )
    env = dict(os.environ, PYGPU_CACHE_DIR=str(d))
    first = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert first.stdout.split() == ["True"], first.stderr
    rec = next(d.glob("nvrtc-*.json"))
    meta = json.loads(rec.read_text())
    for bad in ("ab", [1], [13, "0"], None, [True, 0]):
        meta["version"] = bad
        rec.write_text(json.dumps(meta))
        for e in d.rglob("*.bin"):
            e.unlink()
        again = subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True
        )
        assert again.returncode == 0 and again.stdout.split() == ["True"], (bad, again.stderr)


@pytest.mark.parametrize(
    "bad, exc, msg",
    [
        ("", ValueError, "cache_dir is empty"),
        (0, TypeError, "cache_dir must be"),
        (b"x", TypeError, "cache_dir must be"),
        (1.5, TypeError, "cache_dir must be"),
    ],
)
def test_bad_cache_dir(bad, exc, msg, tmp_path, monkeypatch, tmp_cache):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(exc, match=msg):
        compile(KERNEL.replace("V", "1.0f"), arch="sm_80", cache_dir=bad)
    assert [p.name for p in tmp_path.iterdir() if p.name != "cache"] == []


def test_strings_where_lists_belong(tmp_cache):
    with pytest.raises(TypeError, match=r"include_dirs must be a list, not a single str"):
        compile(KERNEL, arch="compute_80", include_dirs="/usr/include")
    with pytest.raises(TypeError, match="defines must be a dict"):
        compile(KERNEL, arch="compute_80", defines="V")
    with pytest.raises(TypeError, match="name_expressions must be a list"):
        compile(KERNEL, arch="compute_80", name_expressions="k")


# ---- defect 12: the memos hold nothing they should not ----


def test_memos_do_not_keep_sources_alive(tmp_cache):
    src = KERNEL.replace("V", "1.0f") + "// %s\n" % os.urandom(8).hex()
    base = sys.getrefcount(src)
    compile(src, arch="sm_80", cache_dir=False)
    assert sys.getrefcount(src) == base, "the cache is off, yet a memo holds the source"
    compile(src, arch="sm_80")
    compiler.clear_cache(disk=False)
    assert sys.getrefcount(src) == base, "clear_cache() left the source in a memo"


needs_driver = pytest.mark.driver


@needs_driver
def test_source_module_memo_holds_no_created_context(tmp_cache):
    import pygpu.driver as cuda

    cuda.init()
    ctx = cuda.Device(0).make_context()
    try:
        mod = compiler.SourceModule(KERNEL.replace("V", "1.0f"), arch="compute_80")
        assert mod.module.context == ctx
    finally:
        cuda.Context.pop()
    ref = weakref.ref(ctx)
    ctx.detach()
    del ctx, mod
    gc.collect()
    assert ref() is None, "the SourceModule memo keeps a created context alive"


@needs_driver
def test_source_module_memo_checks_the_modules_context(tmp_cache):
    import pygpu.driver as cuda

    cuda.init()
    src = KERNEL.replace("V", "1.0f")
    p = cuda.Device(0).retain_primary_context()
    p.push()
    try:
        a = compiler.SourceModule(src, arch="compute_80")
        assert compiler.SourceModule(src, arch="compute_80").module is a.module  # memo hit
    finally:
        cuda.Context.pop()
    p.detach()
    q = cuda.Device(0).retain_primary_context()
    q.push()
    try:
        b = compiler.SourceModule(src, arch="compute_80")
        assert not b.module.context.detached
        b.get_function("k")  # a live module, not the detached one
    finally:
        cuda.Context.pop()


@needs_driver
def test_source_module_memo_hit_copies_only_the_modules_own_fields(tmp_cache):
    # a subclass that sets its own attributes before SourceModule.__init__:
    # a memo hit used to copy the first instance's whole __dict__ over them
    import pygpu.driver as cuda

    class Tagged(compiler.SourceModule):
        def __init__(self, src, tag):
            self.tag = tag
            super().__init__(src, arch="compute_80")

    cuda.init()
    src = KERNEL.replace("V", "1.0f")
    p = cuda.Device(0).retain_primary_context()
    p.push()
    try:
        first, second = Tagged(src, "first"), Tagged(src, "second")
        assert second.module is first.module  # a memo hit
        assert (first.tag, second.tag) == ("first", "second")
        assert second.binary is first.binary and second.source == first.source
        assert second.get_function("k").handle == first.get_function("k").handle
        plain = compiler.SourceModule(src, arch="compute_80")
        assert not hasattr(plain, "tag") and plain.module is first.module
    finally:
        cuda.Context.pop()


@needs_driver
def test_source_module_memo_sees_header_edits_and_clear_cache(tmp_path, tmp_cache):
    import pygpu.driver as cuda

    cuda.init()
    h = tmp_path / "v.cuh"
    write(h, "1.5")
    settle()
    src = '#include "v.cuh"\n' + KERNEL
    c = cuda.Device(0).retain_primary_context()
    c.push()
    try:
        a = compiler.SourceModule(src, arch="compute_80", include_dirs=(str(tmp_path),))
        b = compiler.SourceModule(src, arch="compute_80", include_dirs=(str(tmp_path),))
        assert b.module is a.module and has_float(a.binary, 1.5)
        write(h, "2.5")
        d = compiler.SourceModule(src, arch="compute_80", include_dirs=(str(tmp_path),))
        assert has_float(d.binary, 2.5) and d.module is not a.module
        compiler.clear_cache(disk=False)
        e = compiler.SourceModule(src, arch="compute_80", include_dirs=(str(tmp_path),))
        assert e.module is not d.module and has_float(e.binary, 2.5)
        # a list argument is memoized too (once the header is settled)
        settle()
        f = compiler.SourceModule(src, arch="compute_80", include_dirs=[str(tmp_path)])
        g = compiler.SourceModule(src, arch="compute_80", include_dirs=[str(tmp_path)])
        assert g.module is f.module
    finally:
        cuda.Context.pop()
