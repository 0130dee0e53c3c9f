"""Run-time compilation of CUDA C++ through NVRTC, in-process, with a cache
that is never stale.

    from pygpu.compiler import SourceModule
    mod = SourceModule(source)            # PyCUDA-compatible
    f = mod.get_function("name")

compile() turns source into cubin or PTX bytes; it needs no GPU when arch is
given.  Results are cached in memory and on disk (pygpu.store), keyed by the
source, the options, the target architecture, NVRTC's version, the cache
schema and the state of every file the source's #include lines can reach.
"""

import hashlib
import os
import re
import sys
import tempfile
import threading
import warnings
from typing import Any as _Any, overload as _overload

from pygpu import _driver, _loader, _nvcc, _nvcc_compat, driver, profiler, store
from pygpu._errors import CompileError
from pygpu.store import CACHE_SCHEMA, Binary, default_cache_dir  # noqa: F401  (API)

# no "compile": `from pygpu.compiler import *` must not shadow the built-in
__all__ = [
    "SourceModule",
    "CompileError",
    "CompilerWarning",
    "nvrtc_version",
    "Binary",
    "kernel_source",
    "KERNEL_DIR",
    "supported_archs",
    "cache_info",
    "clear_cache",
    "default_cache_dir",
]

_lock = threading.RLock()
_nvrtc_path = None


class CompilerWarning(UserWarning):
    """NVRTC printed a warning while compiling."""


KERNEL_DIR = _loader.kernel_dir()


def kernel_source(name: str) -> str:
    """The text of one of the CUDA C files shipped in pygpu/kernels/
    (doublify.cu, elementwise.cu, matmul.cu, lombscargle.cu), for
    SourceModule or compile()."""
    path = os.path.join(KERNEL_DIR, name)
    if os.path.basename(name) != name or not os.path.isfile(path):
        raise ValueError(
            "no kernel file %r in %s (there are: %s)"
            % (
                name,
                KERNEL_DIR,
                ", ".join(sorted(f for f in os.listdir(KERNEL_DIR) if f.endswith(".cu"))),
            )
        )
    with open(path, encoding="utf-8") as f:
        return f.read()


def _ensure_nvrtc():
    global _nvrtc_path
    if _nvrtc_path is None:
        with _lock:
            if _nvrtc_path is None:
                _nvrtc_path = _loader.load_nvrtc()
    return _nvrtc_path


def nvrtc_version():
    """(major, minor) of the NVRTC library in use (loading it if needed)."""
    _ensure_nvrtc()
    return _driver._nvrtc_version()


def _loaded_nvrtc_file():
    """The file of the NVRTC library this process loaded (Linux), or None."""
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                path = line.rstrip("\n").split(" ")[-1]
                name = os.path.basename(path)
                if name.startswith("libnvrtc.so") or name.startswith("libnvrtc.alt.so"):
                    return path
    except OSError:
        pass
    return None


def _file_sig(path):
    st = os.stat(path)
    return [st.st_size, st.st_mtime_ns, st.st_ino]


def _nvrtc_fingerprint():
    """What decides which NVRTC library a new process would load: the
    variables the search reads, the loader's cache, the candidate files."""
    h = hashlib.sha256()
    for var in ("PYGPU_NVRTC", "CUDA_HOME", "CUDA_PATH", "LD_LIBRARY_PATH"):
        h.update(("%s=%s\0" % (var, os.environ.get(var, ""))).encode())
    for c in ["/etc/ld.so.cache"] + _loader.nvrtc_candidates():
        if os.path.isabs(c):
            try:
                h.update(("%s:%r\0" % (c, _file_sig(c))).encode())  # stat follows links
            except OSError:
                h.update(("%s:-\0" % c).encode())
    return h.hexdigest()[:32]


_key_version = None
_key_archs = None


def _nvrtc_facts_for_key(cache_dir):
    """(version, supported archs) of NVRTC, without opening the library (a
    cold dlopen costs milliseconds, and cuda-pathfinder's import tens) when
    an earlier process recorded them in the cache directory for this same
    environment and library file."""
    global _key_version, _key_archs
    if _key_version is not None and _key_archs is not None:
        return _key_version, _key_archs
    if _nvrtc_path is None and cache_dir:
        fp = _nvrtc_fingerprint()
        meta = store.read_record(cache_dir, "nvrtc-" + fp)
        found = store.read_version_record(cache_dir, fp, _file_sig)
        archs = meta.get("archs") if meta else None
        if found is not None and isinstance(archs, list) and all(type(a) is int for a in archs):
            _key_version, _key_archs = found, tuple(archs)
            return _key_version, _key_archs
        version, archs = tuple(nvrtc_version()), tuple(supported_archs())
        lib = _loaded_nvrtc_file()
        if lib:
            try:
                store.write_version_record(
                    cache_dir, fp, lib, _file_sig(lib), version, archs=list(archs)
                )
            except OSError:
                pass
        _key_version, _key_archs = version, archs
        return version, archs
    _key_version, _key_archs = tuple(nvrtc_version()), tuple(supported_archs())
    return _key_version, _key_archs


def _nvrtc_version_for_key(cache_dir):
    """NVRTC's version for the cache key (see _nvrtc_facts_for_key)."""
    return _nvrtc_facts_for_key(cache_dir)[0]


def supported_archs():
    """The sm_XY numbers this NVRTC can compile for, e.g. (75, 80, ..., 120)."""
    _ensure_nvrtc()
    return _driver._nvrtc_supported_archs()


# ---- architecture and target ----

_ARCH_RE = re.compile(r"(sm|compute)_(\d+[af]?)")


def _parse_arch(arch):
    """'sm_90', 'compute_90', 'sm_90a', 90, (9, 0) -> ('sm'|'compute', '90a')"""
    if isinstance(arch, tuple) and len(arch) == 2:
        return "sm", "%d%d" % arch
    if isinstance(arch, int) and not isinstance(arch, bool):
        return "sm", str(arch)
    if isinstance(arch, str):
        m = _ARCH_RE.fullmatch(arch.strip())
        if m:
            return m.group(1), m.group(2)
    raise ValueError("arch must look like 'sm_90', 'compute_90', 90 or (9, 0), not %r" % (arch,))


_device_targets: "dict[_Any, _Any]" = {}


def _device_arch_and_target(target, cache_dir=None):
    """For the current device: the arch and target to build for (see the
    manual's 'Target choice').  NVRTC's version and architectures come from
    the cache directory's record when there is one (NVRTC stays unloaded on
    a cache hit)."""
    dev = driver.Context.get_device()
    key = (dev.ordinal, target)
    found = _device_targets.get(key)
    if found is not None:
        return found
    major, minor = dev.compute_capability()
    cc = major * 10 + minor
    drv = driver.get_driver_version()
    (nv_major, nv_minor), archs = _nvrtc_facts_for_key(cache_dir)
    nv = nv_major * 1000 + nv_minor * 10
    if drv // 1000 < nv_major:
        raise driver.CudaUnavailableError(
            "NVRTC %d.%d is newer than the CUDA driver, which supports CUDA %d.%d: its "
            "output cannot be loaded. Update the NVIDIA driver or use an NVRTC of CUDA "
            "%d (PYGPU_NVRTC, or pip install %s)"
            % (
                nv_major,
                nv_minor,
                drv // 1000,
                (drv % 1000) // 10,
                drv // 1000,
                _loader.nvrtc_pip_requirement(drv // 1000),
            )
        )
    if cc in archs and target in (None, "cubin"):
        # same major: a cubin from a newer minor NVRTC loads (minor version compatibility)
        result = ("sm_%d" % cc, "cubin")
    elif cc in archs:
        result = ("compute_%d" % cc, "ptx")
    else:
        if drv < nv:
            raise driver.CudaUnavailableError(
                "this GPU (sm_%d) is newer than NVRTC %d.%d knows, and the driver "
                "(CUDA %d.%d) is older than NVRTC, so it cannot JIT NVRTC's PTX either"
                % (cc, nv_major, nv_minor, drv // 1000, (drv % 1000) // 10)
            )
        best = max(a for a in archs if a <= cc) if any(a <= cc for a in archs) else max(archs)
        result = ("compute_%d" % best, "ptx")
    _device_targets[key] = result
    return result


# ---- compile ----


def _source_text(source):
    """The text of a source: a str, or any object whose str() is the source
    (cgen's and codepy's objects, as PyCUDA takes them)."""
    if type(source) is str:
        return source
    if isinstance(source, str):
        return str.__str__(source)
    if isinstance(source, (bytes, bytearray, memoryview)):
        raise TypeError(
            "source must be a str, not %s: decode it first (source.decode())"
            % type(source).__name__
        )
    if type(source).__str__ is object.__str__:
        raise TypeError(
            "source must be a str or an object whose str() is the source "
            "(such as a cgen or codepy object), not %s" % type(source).__name__
        )
    text = str(source)
    if not isinstance(text, str):  # pragma: no cover (str() always gives a str)
        raise TypeError("str(source) did not give a str")
    return text


_WRAP_OPEN = 'extern "C" {\n'
_WRAP_CLOSE = '\n}\n'


_PCH_OPTIONS = ("-pch", "--pch", "--create-pch", "--use-pch", "--create_pch", "--use_pch")


def _uses_pch(opts):
    return any(o.startswith(_PCH_OPTIONS) for o in opts)


def _prepare(source, nvcc_compat, wrap, pch, move_attributes=True):
    """The text NVRTC compiles for the user's source: with nvcc_compat, the
    struct attributes GCC reads after a closing brace moved where NVRTC reads
    them, and the names nvcc's host headers give put ahead (pygpu/_nvcc_compat.py);
    with wrap, SourceModule's extern "C" { } around it.  Each addition ends
    with ``#line 1``, so NVRTC numbers the user's lines as the user does.
    With precompiled headers (pch), which a #line turns off, the prelude is
    given as --pre-include instead (_compile) and the wrapper's line is
    mapped away afterwards."""
    if nvcc_compat and move_attributes:
        source = _nvcc_compat.gnu_attributes(source)
    if wrap:
        source = _WRAP_OPEN + ("" if pch else "#line 1\n") + source + _WRAP_CLOSE
    if nvcc_compat and not pch:
        source = _nvcc_compat.prelude() + source
    return source


def _format_error(log, source, name, offset=0):
    """The log, then each failing line of the user's source with its number
    (pygpu/_display.py).  offset: lines NVRTC counted before the user's first."""
    from pygpu import _display

    return _display.format_compile_error(log, source, name, offset=offset)


def _user_log(log, source, name, offset):
    """NVRTC's log in the user's line numbers."""
    if not offset:
        return log
    from pygpu import _display

    return _display.map_log(log, source, name, offset=offset)


def _build_options(options, arch_opt, include_dirs, defines, std, fast_math):
    opts = ["--gpu-architecture=" + arch_opt]
    if std:
        std = str(std)
        opts.append("--std=" + (std if std.startswith("c++") else "c++" + std))
    if fast_math:
        opts.append("--use_fast_math")
    for d in include_dirs:
        opts.append("--include-path=" + str(d))
    if defines:
        items = defines.items() if isinstance(defines, dict) else ((d, None) for d in defines)
        for k, v in items:
            opts.append("-D%s" % k if v is None else "-D%s=%s" % (k, v))
    opts.extend(options)
    if driver.CUDA_DEBUGGING and not {"-G", "--device-debug"} & set(opts):
        opts.append("--device-debug")  # set_debugging() / pygpu.debug: PyCUDA's -g -G
    for o in opts:
        if "\0" in o:
            raise ValueError(
                "compiler option %r contains a NUL character (NVRTC would stop "
                "reading it there)" % (o,)
            )
    return opts


def _no_nul(value, what):
    if "\0" in value:
        raise ValueError(
            "%s contains a NUL character at offset %d (NVRTC would stop "
            "reading it there): %r" % (what, value.index("\0"), value[:80])
        )
    return value


def _str_list(value, what, example):
    """A list of str from a sequence; a lone str (or bytes) is refused rather
    than taken letter by letter."""
    if isinstance(value, (str, bytes, bytearray, os.PathLike)):
        raise TypeError(
            "%s must be a list, not a single %s: write %s=[%r]"
            % (what, type(value).__name__, what, example if example else value)
        )
    out = []
    for v in value or ():
        v = os.fspath(v) if isinstance(v, os.PathLike) else v
        if not isinstance(v, str):
            raise TypeError("%s must hold str, not %s" % (what, type(v).__name__))
        out.append(_no_nul(v, "an entry of " + what))
    return out


def _check_defines(defines):
    if defines is None:
        return None
    if isinstance(defines, (str, bytes, bytearray)):
        raise TypeError(
            "defines must be a dict {name: value} or a list of names, not a "
            "single %s" % type(defines).__name__
        )
    items = defines.items() if isinstance(defines, dict) else [(d, None) for d in defines]
    out = {}
    for k, v in items:
        if not isinstance(k, str) or not k:
            raise TypeError("defines: a macro name must be a non-empty str, not %r" % (k,))
        _no_nul(k, "defines")
        if v is not None:
            _no_nul(str(v), "defines[%r]" % k)
        out[k] = v
    return out


_RDC_SPELLINGS = ("-rdc=true", "--relocatable-device-code=true", "-dc")
_DLTO_SPELLINGS = ("-dlto", "--dlink-time-opt")

_toolkit_dirs: "dict[_Any, _Any]" = {}


def _trusted_dirs(record_dir=None):
    """The CUDA toolkit include directories (the headers of the compiler
    itself), memoized per CUDA_HOME/CUDA_PATH."""
    env = (store.env_raw("CUDA_HOME"), store.env_raw("CUDA_PATH"))
    found = _toolkit_dirs.get(env)
    if found is None:
        found = tuple(_loader.cuda_include_dirs(record_dir=record_dir))
        _toolkit_dirs[env] = found
    return found


# compile()'s in-process memo: exact arguments -> (key, Deps), never filled
# with the cache off, emptied by clear_cache(), bounded.
_key_memo: "dict[_Any, _Any]" = {}
_MEMO_MAX = 4096


def _nvrtc(source, name, opts, name_expressions, target, arch_opt, user_source=None, offset=0):
    """NVRTC on source (the prepared text); a rejection is a CompileError
    about user_source (the user's own text, by default source), NVRTC's
    line numbers less offset."""
    _ensure_nvrtc()
    if profiler._annotate:  # pygpu.profiler.annotate_all: a range names the compile
        with profiler.time_range("compile " + name, "orange"):
            ok, log, image, lowered = _driver._nvrtc_compile(
                source, name, opts, [], name_expressions, target
            )
    else:
        ok, log, image, lowered = _driver._nvrtc_compile(
            source, name, opts, [], name_expressions, target
        )
    store.stats["compiles"] += 1
    if not ok:
        if user_source is None:
            user_source = source
        raise CompileError(
            _format_error(log, user_source, name, offset),
            list(opts),
            None,
            _user_log(log, user_source, name, offset),
            source=user_source,
            show_stderr=False,
        )
    if log.strip():
        if user_source is not None:
            log = _user_log(log, user_source, name, offset)
        warnings.warn("NVRTC: " + log.strip(), CompilerWarning, stacklevel=3)
    return store.make_binary(image, target, arch_opt, log, lowered)


def _compile(
    source,
    options,
    arch,
    target,
    include_dirs,
    defines,
    name_expressions,
    std,
    fast_math,
    cache_dir,
    name,
    rdc=False,
    nvcc_compat=False,
    wrap=False,
    backend="nvrtc",
    nvcc=None,
    info=None,
):
    """compile() itself; returns (Binary, Deps or None when not cacheable).
    wrap: SourceModule's extern "C" { }.  backend: 'nvrtc' or 'nvcc' (the
    nvcc to run: nvcc, else found by pygpu._nvcc.find).  info: a dict,
    filled with the text and options given to the compiler (keep=True)."""
    source = _source_text(source)
    _no_nul(source, "source")
    if not isinstance(name, str):
        raise TypeError("name must be a str, not %s" % type(name).__name__)
    _no_nul(name, "name")
    if isinstance(options, str):
        options = options.split()
    options = [str(o) for o in (options or ())]
    if target not in (None, "cubin", "ptx", "ltoir"):
        raise ValueError("target must be 'cubin', 'ptx' or 'ltoir', not %r" % (target,))
    # relocatable device code: -rdc=true (once); LTO-IR is NVRTC's -dlto
    # output, relocatable by nature
    if (rdc or target == "ltoir") and not any(o in _RDC_SPELLINGS for o in options):
        options.append("-rdc=true")
    if target == "ltoir" and not any(o in _DLTO_SPELLINGS for o in options):
        options.append("-dlto")
    include_dirs = _str_list(include_dirs, "include_dirs", None)
    name_expressions = tuple(_str_list(name_expressions, "name_expressions", None))
    defines = _check_defines(defines)
    cache = store.resolve_dir(cache_dir)
    if backend == "nvcc":
        return _compile_nvcc(
            source, options, arch, target, include_dirs, defines, name_expressions, std,
            fast_math, cache, name, wrap, nvcc, info,
        )  # fmt: skip
    if arch is None:
        if cache is None:
            _ensure_nvrtc()
        if target == "ltoir":
            arch_opt = _device_arch_and_target(None, cache)[0]
        else:
            arch_opt, target = _device_arch_and_target(target, cache)
    else:
        kind, num = _parse_arch(arch)
        arch_opt = "%s_%s" % (kind, num)
        if target is None:
            target = "cubin" if kind == "sm" else "ptx"
        elif target == "cubin" and kind == "compute":
            raise ValueError(
                "target='cubin' needs a real architecture such as 'sm_%s', not %r" % (num, arch_opt)
            )
    include_dirs = _loader.with_cuda_include_dirs(include_dirs, cache)
    name_expressions = tuple(name_expressions)
    opts = _build_options(options, arch_opt, include_dirs, defines, std, fast_math)
    user_source = source
    pch = (nvcc_compat or wrap) and _uses_pch(opts)
    if nvcc_compat and pch:
        opts.append(
            "--pre-include=" + os.path.join(_loader.libc_shim_dir(), _nvcc_compat.PRELUDE_HEADER)
        )
    offset = 1 if wrap and pch else 0
    if info is not None:
        info["text"] = _prepare(source, nvcc_compat, wrap, pch)
        info["options"] = list(opts)
    if cache is None:
        return _nvrtc(
            _prepare(source, nvcc_compat, wrap, pch),
            name,
            opts,
            name_expressions,
            target,
            arch_opt,
            user_source,
            offset,
        ), None

    memo_key = (source, tuple(opts), target, name_expressions, name, nvcc_compat, wrap)
    memo = _key_memo.get(memo_key)
    text = None
    if memo is not None and memo[1].valid():
        key, deps = memo
    else:
        # the key covers the prelude and wrapper as text, and the attribute
        # move by its version (a pure function of the source: done on a miss)
        key_text = _prepare(source, nvcc_compat, wrap, pch, move_attributes=False)
        try:
            deps = store.scan(key_text, opts, name, _trusted_dirs(cache))
        except store.Uncacheable as e:
            store.debug("not cached: %s" % e)
            store.stats["uncacheable"] += 1
            return _nvrtc(
                _prepare(source, nvcc_compat, wrap, pch),
                name,
                opts,
                name_expressions,
                target,
                arch_opt,
                user_source,
                offset,
            ), None
        nv = _nvrtc_version_for_key(cache)
        parts = (
            ["%d.%d" % nv, target, name, key_text, "%d" % len(opts)]
            + opts
            + ["%d" % len(name_expressions)]
            + list(name_expressions)
        )
        if nvcc_compat:
            parts.append(_nvcc_compat.ATTRIBUTES_VERSION)
        key = store.make_key(parts, deps)
        if not deps.racy:
            with _lock:
                if len(_key_memo) >= _MEMO_MAX:
                    _key_memo.clear()
                _key_memo[memo_key] = (key, deps)
    b = store.memory.get(key)
    if b is not None:
        store.stats["memory_hits"] += 1
        return b, deps
    store.debug("miss %s: not in memory" % key[:16])
    b = store.read_entry(cache, key)
    if b is not None:
        store.stats["disk_hits"] += 1
        store.memory[key] = b
        return b, deps
    store.stats["misses"] += 1
    if text is None:
        text = _prepare(source, nvcc_compat, wrap, pch)
    b = _nvrtc(text, name, opts, name_expressions, target, arch_opt, user_source, offset)
    if deps.racy or not deps.unchanged():
        # a file changed while it was read or compiled: what NVRTC read is
        # not known, so the result is not stored under either state
        store.debug("not cached %s: a header changed during the compile" % key[:16])
        store.stats["uncacheable"] += 1
        with _lock:
            _key_memo.pop(memo_key, None)
        return b, None
    store.memory[key] = b
    store.write_entry(cache, key, b)
    return b, deps


def _nvcc_target(path: str, target: "str | None") -> "tuple[str, str]":
    """(arch, target) for the current device with the nvcc at path: its
    cubin where nvcc knows the device's architecture, else PTX of the newest
    one it knows below it (as _device_arch_and_target does for NVRTC)."""
    dev = driver.Context.get_device()
    major, minor = dev.compute_capability()
    cc = major * 10 + minor
    archs = _nvcc.archs(path)
    if cc in archs and target in (None, "cubin"):
        return "sm_%d" % cc, "cubin"
    if cc in archs:
        return "compute_%d" % cc, "ptx"
    below = [a for a in archs if a <= cc]
    if not below:
        raise driver.CudaUnavailableError(
            "this GPU (sm_%d) is older than every architecture %s compiles for" % (cc, path)
        )
    return "compute_%d" % max(below), "ptx"


def _compile_nvcc(
    source: str,
    options: "list[str]",
    arch: object,
    target: "str | None",
    include_dirs: "list[str]",
    defines: "dict[str, object] | None",
    name_expressions: "tuple[str, ...]",
    std: "str | None",
    fast_math: bool,
    cache: "str | None",
    name: str,
    wrap: bool,
    nvcc: "str | None",
    info: "dict[str, object] | None",
) -> "tuple[Binary, store.Deps | None]":
    """_compile() with the nvcc back end: the same arguments, cache and
    errors, nvcc run in a subprocess (pygpu/_nvcc.py).  No prelude and no
    attribute move (nvcc is what they imitate), kernels/libc searched only
    after the host's headers, no name_expressions (NVRTC's lowering)."""
    path = _nvcc.find(nvcc)
    if path is None:
        raise _nvcc.missing_error(nvcc)
    if name_expressions:
        raise ValueError(
            "name_expressions are NVRTC's (it lowers the names); the nvcc back end has "
            "none: compile with compiler='nvrtc', or give the kernels extern \"C\" names"
        )
    if target == "ltoir":
        raise ValueError("target='ltoir' is NVRTC's (-dlto): compile with compiler='nvrtc'")
    if arch is None:
        arch_opt, target = _nvcc_target(path, target)
    else:
        kind, num = _parse_arch(arch)
        arch_opt = "%s_%s" % (kind, num)
        if target is None:
            target = "cubin" if kind == "sm" else "ptx"
        elif target == "cubin" and kind == "compute":
            raise ValueError(
                "target='cubin' needs a real architecture such as 'sm_%s', not %r" % (num, arch_opt)
            )
    opts = _build_options(options, arch_opt, include_dirs, defines, std, fast_math)
    # kernels/libc after the host's own headers (GCC's -idirafter): PyCUDA's
    # <pycuda-complex.hpp> is found, and no shim stands in for a host header
    libc = _loader.libc_shim_dir()
    opts += ["-Xcompiler", "-idirafter", "-Xcompiler", libc]
    text = _WRAP_OPEN + "#line 1\n" + source + _WRAP_CLOSE if wrap else source
    if info is not None:
        info["text"] = text
        info["options"] = list(opts)
    deps = key = None
    if cache is not None:
        toolkit = os.path.join(os.path.dirname(os.path.dirname(path)), "include")
        try:
            deps = store.scan(text, opts + ["--include-path=" + libc], name, (toolkit,))
        except store.Uncacheable as e:
            store.debug("not cached: %s" % e)
            store.stats["uncacheable"] += 1
        if deps is not None:
            version = _nvcc.version(path, cache)
            parts = ["nvcc", path, version[2], target, name, text, "%d" % len(opts)] + opts
            key = store.make_key(parts, deps)
            b = store.memory.get(key)
            if b is not None:
                store.stats["memory_hits"] += 1
                return b, deps
            b = store.read_entry(cache, key)
            if b is not None:
                store.stats["disk_hits"] += 1
                store.memory[key] = b
                return b, deps
            store.stats["misses"] += 1
    image, log, cmd, stdout, stderr = _nvcc.run(path, text, name, opts, target)
    if image is None:
        from pygpu import _display

        err = CompileError(
            _display.format_compile_error(log, source, name, compiler="nvcc"),
            cmd,
            stdout,
            stderr,
            log=log,
            source=source,
            show_stderr=False,
        )
        err.routine = "nvcc"
        raise err
    if log.strip():
        warnings.warn("nvcc: " + log.strip(), CompilerWarning, stacklevel=3)
    b = store.make_binary(image, target, arch_opt, log, {})
    if key is None or deps is None:
        return b, None
    if deps.racy or not deps.unchanged():
        store.debug("not cached %s: a header changed during the compile" % key[:16])
        store.stats["uncacheable"] += 1
        return b, None
    store.memory[key] = b
    store.write_entry(cache, key, b)
    return b, deps


def _pygpu_signature(
    source: object,
    options: "object" = (),
    arch: "object" = None,
    target: "str | None" = None,
    include_dirs: "object" = (),
    defines: "object" = None,
    name_expressions: "object" = (),
    std: "str | None" = None,
    fast_math: bool = False,
    cache_dir: "object" = None,
    name: str = "kernel.cu",
    rdc: bool = False,
    nvcc_compat: bool = True,
    extern_c: bool = False,
    *,
    compiler: "str | None" = None,
    nvcc: "str | None" = None,
    keep: bool = False,
    no_extern_c: "bool | None" = None,
    code: "object" = None,
) -> bytes:
    """compile()'s documented signature (its parameters are bound by hand:
    a str second positional argument is PyCUDA's nvcc, in PyCUDA's order)."""
    raise NotImplementedError  # (only inspect.signature reads it)


# the positional orders: pygpu's, and PyCUDA's compile(source, nvcc, options,
# keep, no_extern_c, arch, code, cache_dir, include_dirs, target)
_PYGPU_ORDER = (
    "options",
    "arch",
    "target",
    "include_dirs",
    "defines",
    "name_expressions",
    "std",
    "fast_math",
    "cache_dir",
    "name",
    "rdc",
    "nvcc_compat",
    "extern_c",
)
_PYCUDA_ORDER = (
    "nvcc",
    "options",
    "keep",
    "no_extern_c",
    "arch",
    "code",
    "cache_dir",
    "include_dirs",
    "target",
)
# keywords only PyCUDA's compile() has: any of them makes a call PyCUDA's
_PYCUDA_ONLY = ("nvcc", "keep", "no_extern_c", "code")


def _backend(compiler: "str | None", name_expressions: object = ()) -> str:
    """The back end of one compile: compiler= when given, else
    $PYGPU_COMPILER, else NVRTC.  A compile with name_expressions (NVRTC's
    lowered names: pygpu's own template kernels among them) stays with
    NVRTC when nvcc came from the environment only."""
    name = _nvcc.backend(compiler)
    if name == "nvcc" and compiler is None and name_expressions:
        return "nvrtc"
    return name


_PYGPU_DEFAULTS = {
    "options": (),
    "arch": None,
    "target": None,
    "include_dirs": (),
    "defines": None,
    "name_expressions": (),
    "std": None,
    "fast_math": False,
    "cache_dir": None,
    "name": "kernel.cu",
    "rdc": False,
    "nvcc_compat": True,
    "extern_c": False,
    "compiler": None,
}


@_overload
def compile(
    source: object,
    options: "list[str] | tuple[str, ...]" = ...,
    arch: object = ...,
    target: "str | None" = ...,
    include_dirs: object = ...,
    defines: object = ...,
    name_expressions: object = ...,
    std: "str | None" = ...,
    fast_math: bool = ...,
    cache_dir: object = ...,
    name: str = ...,
    rdc: bool = ...,
    nvcc_compat: bool = ...,
    extern_c: bool = ...,
    *,
    compiler: "str | None" = ...,
) -> Binary: ...
@_overload  # noqa: E302  (PyCUDA's positional order: a str second argument is nvcc)
def compile(
    source: object,
    nvcc: str,
    options: object = ...,
    keep: bool = ...,
    no_extern_c: bool = ...,
    arch: object = ...,
    code: object = ...,
    cache_dir: object = ...,
    include_dirs: object = ...,
    target: str = ...,
    *,
    compiler: "str | None" = ...,
) -> bytes: ...
@_overload  # noqa: E302  (PyCUDA's keywords)
def compile(
    source: object,
    *,
    nvcc: str = ...,
    options: object = ...,
    keep: bool = ...,
    no_extern_c: bool = ...,
    arch: object = ...,
    code: object = ...,
    cache_dir: object = ...,
    include_dirs: object = ...,
    target: str = ...,
    compiler: "str | None" = ...,
) -> bytes: ...
def compile(source: object, *args: _Any, **kwargs: _Any) -> "Binary | bytes":  # noqa: E302
    """Compile CUDA C++ source to cubin, PTX or LTO-IR bytes through NVRTC.

    compile(source, options=(), arch=None, target=None, include_dirs=(),
    defines=None, name_expressions=(), std=None, fast_math=False,
    cache_dir=None, name="kernel.cu", rdc=False, nvcc_compat=True,
    extern_c=False, \\*, compiler=None) -> Binary

    arch: 'sm_90', 'compute_90', 90 or (9, 0); None means the current
    device's (which needs a GPU).  target: 'cubin', 'ptx' or 'ltoir'; None
    picks cubin for a real arch and PTX for a virtual one.  'ltoir' is
    NVRTC's -dlto output (relocatable: -rdc=true), the input of link-time
    optimization by pygpu.linking.Linker (nvJitLink).  rdc=True compiles
    relocatable device code (-rdc=true): a kernel or __device__ function
    may then use what another file defines, resolved by a Linker.
    options are passed to NVRTC unchanged, and nothing else is added but
    what the arguments ask for: no hidden -ftz or fast math.  cache_dir: a
    directory, None for the default, False for no cache.  name: the file
    name NVRTC's messages use.  nvcc_compat=True (the default) compiles
    the source as SourceModule does: with the names nvcc's host headers give
    implicitly (uint, INT_MAX, M_PI, ...) and struct attributes read where
    GCC reads them; nvcc_compat=False compiles it as NVRTC reads it.  Either
    way the C and C++ headers of kernels/libc (<inttypes.h>, <type_traits>,
    ...) can be included.  extern_c=True wraps the source in extern "C" { } as SourceModule
    does (the messages keep the source's own line numbers).  source: a str,
    or an object whose str() is the source.  compiler: 'nvrtc' or 'nvcc'
    (the opt-in nvcc back end, a subprocess of the toolkit's nvcc, as PyCUDA
    compiles); None means $PYGPU_COMPILER, else NVRTC.  Returns a Binary
    (bytes) with .lowered_names for the name_expressions.

    PyCUDA's call, pycuda.compiler.compile(source, nvcc="nvcc",
    options=None, keep=False, no_extern_c=False, arch=None, code=None,
    cache_dir=None, include_dirs=[], target="cubin"), means what it means
    on PyCUDA: a call whose second positional argument is a str (PyCUDA's
    nvcc; the arguments then follow PyCUDA's order), or that names nvcc=,
    keep=, no_extern_c= or code=, or asks for target="fatbin", compiles as
    PyCUDA's compile() does -- extern "C" unless no_extern_c, with what nvcc
    gives a kernel implicitly, nvcc's options translated for NVRTC, target
    'cubin' by default, for the current device's architecture (nvcc's
    default, sm_75 under CUDA 13, where there is no device), keep=True
    keeping the files and printing PyCUDA's ``*** compiler output in DIR``
    -- and returns plain bytes.  nvcc is not run, unless compiler="nvcc"
    (or $PYGPU_COMPILER=nvcc) asks for the nvcc back end: then nvcc (when
    not the plain "nvcc") is the one run, else the one found on PATH,
    $CUDA_HOME/bin, /usr/local/cuda/bin (docs/compiling.md, "The nvcc back
    end").  compiler= is taken by both forms of the call.
    """
    pycuda_order = bool(args) and isinstance(args[0], (str, os.PathLike))
    order = _PYCUDA_ORDER if pycuda_order else _PYGPU_ORDER
    if len(args) > len(order):
        raise TypeError(
            "compile() takes from 1 to %d positional arguments but %d were given"
            % (len(order) + 1, len(args) + 1)
        )
    bound = dict(zip(order, args))
    for k, v in kwargs.items():
        if k not in _PYGPU_DEFAULTS and k not in _PYCUDA_ONLY:
            raise TypeError("compile() got an unexpected keyword argument %r" % (k,))
        if k in bound:
            raise TypeError("compile() got multiple values for argument %r" % (k,))
        bound[k] = v
    if pycuda_order or any(k in bound for k in _PYCUDA_ONLY) or bound.get("target") == "fatbin":
        return _pycuda_compile(source, **bound)
    a = dict(_PYGPU_DEFAULTS, **bound)
    backend = _backend(a["compiler"], a["name_expressions"])
    return _compile(
        source,
        a["options"],
        a["arch"],
        a["target"],
        a["include_dirs"],
        a["defines"],
        a["name_expressions"],
        a["std"],
        a["fast_math"],
        a["cache_dir"],
        a["name"],
        a["rdc"],
        a["nvcc_compat"],
        a["extern_c"],
        backend,
    )[0]


try:
    import inspect as _inspect

    compile.__signature__ = _inspect.signature(_pygpu_signature)  # type: ignore[attr-defined]
    del _inspect
except (ImportError, ValueError):  # pragma: no cover
    pass


# ---- PyCUDA's compile() ----


def _arch_arg(value, what):
    """'sm_90' / 'compute_90' from PyCUDA's arch= or code= (also 90, (9, 0))."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (str, int, tuple)):
        raise TypeError(
            "compile(): %s must be an architecture such as 'sm_90' (a str), "
            "not %s" % (what, type(value).__name__)
        )
    if isinstance(value, str) and "," in value:
        value = value.split(",")[0]  # nvcc's -code=sm_90,compute_90
    try:
        kind, num = _parse_arch(value)
    except ValueError:
        raise ValueError(
            "compile(): %s must look like 'sm_90' or 'compute_90', not %r" % (what, value)
        ) from None
    return "%s_%s" % (kind, num)


def _nvcc_default_arch(cache_dir, backend="nvrtc", nvcc=None):
    """The architecture PyCUDA's compile() gets with arch=None: the current
    device's (pygpu's rule: the default device's primary context), or
    where there is no driver or device nvcc's default (sm_75 from CUDA 13,
    sm_52 before), as the same toolkit's nvcc would pick.  backend: whose
    architectures count ('nvcc': the nvcc that nvcc names or find() finds)."""
    if backend == "nvcc":
        path = _nvcc.find(nvcc)
        if path is None:
            raise _nvcc.missing_error(nvcc)
        try:
            arch, _ = _nvcc_target(path, "cubin")
            return "sm_" + arch.split("_", 1)[1]
        except driver.Error:
            return "sm_%d" % (75 if _nvcc.version(path, cache_dir)[0] >= 13 else 52)
    try:
        arch, _ = _device_arch_and_target("cubin", cache_dir)
        return "sm_" + arch.split("_", 1)[1]
    except driver.Error:
        pass
    (major, _minor), archs = _nvrtc_facts_for_key(cache_dir)
    default = 75 if major >= 13 else 52
    if default not in archs:
        default = min(a for a in archs)
    return "sm_%d" % default


def _pycuda_compile(
    source,
    nvcc="nvcc",
    options=None,
    keep=False,
    no_extern_c=False,
    arch=None,
    code=None,
    cache_dir=None,
    include_dirs=None,
    target="cubin",
    defines=None,
    name_expressions=(),
    std=None,
    fast_math=False,
    name="kernel.cu",
    rdc=False,
    nvcc_compat=True,
    extern_c=None,
    compiler=None,
):
    """pycuda.compiler.compile(): plain bytes, as PyCUDA returns them."""
    from pygpu import linking

    if isinstance(nvcc, os.PathLike):
        nvcc = os.fspath(nvcc)
    if not isinstance(nvcc, str):
        raise TypeError(
            "compile(): nvcc must be the nvcc command as a str (PyCUDA's nvcc=; "
            "pygpu compiles with NVRTC and does not run it), not %s" % type(nvcc).__name__
        )
    if nvcc.startswith("-"):
        raise ValueError(
            "compile(): the second positional argument is PyCUDA's nvcc (the "
            "compiler's command), not an option: %r; give options as "
            "options=[%r]" % (nvcc, nvcc)
        )
    if target not in ("cubin", "ptx", "fatbin", "ltoir"):
        raise ValueError(
            "compile(): target must be 'cubin', 'ptx' or 'fatbin' (PyCUDA's "
            "targets) or 'ltoir', not %r" % (target,)
        )
    if extern_c is not None and no_extern_c is not None and bool(extern_c) == bool(no_extern_c):
        raise ValueError(
            "compile(): extern_c=%r and no_extern_c=%r say opposite things; "
            "give one of them" % (extern_c, no_extern_c)
        )
    wrap = not no_extern_c if no_extern_c is not None else bool(extern_c)
    if options is None:
        options = linking.DEFAULT_NVCC_FLAGS
    if (
        isinstance(options, (bytes, bytearray))
        or not isinstance(options, str)
        and not hasattr(options, "__iter__")
    ):
        raise TypeError(
            "compile(): options must be a list of str (nvcc's or NVRTC's "
            "options), not %s" % type(options).__name__
        )
    options = options.split() if isinstance(options, str) else list(options)
    for o in options:
        if not isinstance(o, str):
            raise TypeError("compile(): options must hold str, not %s: %r" % (type(o).__name__, o))
    t = linking.translate_nvcc_options(options)
    arch = _arch_arg(arch, "arch") or _arch_arg(t["arch"], "the option -arch")
    code = _arch_arg(code, "code") or _arch_arg(t["code"], "the option -code")
    if include_dirs is None:
        include_dirs = ()
    include_dirs = _str_list(include_dirs, "include_dirs", None)
    if driver.CUDA_DEBUGGING:  # as PyCUDA: kept, not cached (and -G: _build_options)
        keep, cache_dir = True, False
    if cache_dir is True:
        cache_dir = None
    real = next((a for a in (code, arch) if a is not None and a.startswith("sm_")), None)
    virtual = next((a for a in (arch, code) if a is not None and a.startswith("compute_")), None)
    if target in ("cubin", "fatbin") and real is None and virtual is not None:
        raise ValueError(
            "compile(): target=%r needs a real architecture (arch= or code= "
            "such as 'sm_%s'), not only %r" % (target, virtual[8:], virtual)
        )
    backend = _backend(compiler, name_expressions)
    if real is None and virtual is None:
        real = _nvcc_default_arch(store.resolve_dir(cache_dir), backend, nvcc)
    if target == "ptx":
        use, kind = (virtual or "compute_" + real[3:]), "ptx"
    elif target == "ltoir":
        use, kind = (real or virtual), "ltoir"
    else:
        use, kind = real, "cubin"
    args = (
        source,
        t["nvrtc"],
        use,
        kind,
        include_dirs,
        defines,
        name_expressions,
        std,
        fast_math,
        cache_dir,
        name,
        rdc,
        nvcc_compat,
        wrap,
        backend,
        nvcc,
    )
    kept = []
    if keep:
        binary = _compile_kept(args, kept)[0]
    else:
        binary = _compile(*args)[0]
    if target == "fatbin":
        ptx_args = list(args)
        ptx_args[2], ptx_args[3] = "compute_" + real[3:], "ptx"
        ptx = _compile(*ptx_args)[0]
        from pygpu import _fatbin

        fat = _fatbin.make_fatbin(binary, ptx, real[3:])
        if kept:
            with open(os.path.join(kept[0], "kernel.fatbin"), "wb") as f:
                f.write(fat)
        return fat
    return bytes(binary)


def cache_info(cache_dir=None):
    """Counts and sizes of the in-memory and on-disk caches."""
    return store.cache_info(cache_dir)


def clear_cache(cache_dir: "object" = None, disk: bool = True) -> None:
    """Empty the in-memory caches (binaries, keys, loaded modules) and
    (disk=True) the on-disk one."""
    with _lock:
        _key_memo.clear()
        _modules.clear()
        _images.clear()
    store.clear(cache_dir, disk)


# ---- PyCUDA's nvcc helpers, over NVRTC ----


def get_nvcc_version(nvcc="nvcc"):
    """PyCUDA asks nvcc --version; pygpu compiles with NVRTC in-process, so
    this names NVRTC's version (nvcc is not run) -- unless $PYGPU_COMPILER
    picks the nvcc back end: then it is that nvcc's ``--version`` output, as
    PyCUDA's."""
    if _nvcc.backend() == "nvcc":
        path = _nvcc.find(nvcc)
        if path is None:
            raise _nvcc.missing_error(nvcc)
        import subprocess

        r = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=60)
        return r.stdout
    return "NVRTC %d.%d (pygpu compiles in-process with NVRTC; %s is not run)" % (
        tuple(nvrtc_version()) + (nvcc,)
    )


def compile_plain(source, options, keep, nvcc, cache_dir, target="cubin"):
    """pycuda.compiler.compile_plain: source compiled as it is (no extern "C"
    wrapper) to target ('cubin', 'ptx' or 'fatbin') through NVRTC and the
    cache, with what nvcc gives a kernel implicitly (nvcc_compat); the
    architecture comes from options (-arch, -code), else the current
    device's, else nvcc's default; nvcc's host-side options are dropped
    (pygpu.linking.translate_nvcc_options).  keep=True keeps the source and
    binaries as SourceModule's does; nvcc is not run.  Returns bytes."""
    if target not in ("cubin", "ptx", "fatbin"):
        raise ValueError(
            "compile_plain(): target must be 'cubin', 'ptx' or 'fatbin', not %r" % (target,)
        )
    return _pycuda_compile(source, nvcc, options, keep, True, None, None, cache_dir, None, target)


__all__ += ["CudaModule", "get_nvcc_version", "compile_plain"]


# ---- linking (pygpu/linking.py): PyCUDA's names, re-exported lazily so that
# the layers stay compiler <- linking ----

_LINKING_NAMES = ("DEFAULT_NVCC_FLAGS", "DynamicModule", "DynamicSourceModule", "jit_input_type")
__all__ += list(_LINKING_NAMES)


def __getattr__(name):
    if name in _LINKING_NAMES:
        from pygpu import linking

        return getattr(linking, name)
    raise AttributeError("module %r has no attribute %r" % (__name__, name))


def preprocess_source(source, options, nvcc):
    """The source after nvcc's preprocessor (``nvcc --preprocess``, as
    PyCUDA's preprocess_source; pygpu itself never needs it).  options:
    nvcc's options (-I, -D, ...); nvcc: the nvcc to run (a path or a name
    on PATH).  A failure is a CompileError with PyCUDA's command_line and
    stderr attributes."""
    import subprocess

    fd, path = tempfile.mkstemp(suffix=".cu")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(str(source))
        cmdline = [
            nvcc,
            "--preprocess",
            *[str(o) for o in (options or ())],
            path,
            "--compiler-options",
            "-EP" if sys.platform == "win32" else "-P",
        ]
        try:
            r = subprocess.run(cmdline, capture_output=True)
        except OSError as e:
            err = CompileError(
                "nvcc preprocessing of %s failed: cannot run %s (%s)" % (path, nvcc, e)
            )
            err.command_line, err.stdout, err.stderr = cmdline, None, str(e)
            raise err from None
        if r.returncode != 0:
            stderr = r.stderr.decode("utf-8", "replace")
            err = CompileError("nvcc preprocessing of %s failed\n%s" % (path, stderr))
            err.command_line, err.stdout, err.stderr = cmdline, r.stdout, stderr
            raise err
        out = r.stdout.decode("utf-8")
        if len(out) < 0.5 * len(str(source)):
            raise RuntimeError(
                "nvcc preprocessing of %s returned less than half the "
                "source: %d characters of %d" % (path, len(out), len(source))
            )
        return out
    finally:
        try:
            os.unlink(path)
        except OSError:
            pass


# SourceModule and CudaModule (pygpu/_compile/sourcemodule.py), re-exported
from pygpu._compile.sourcemodule import (  # noqa: E402, F401
    CudaModule,
    SourceModule,
    _COMPILER_KEY,
    _DISABLE,
    _Loaded,
    _NO_TEXREFS,
    _OFF,
    _compile_kept,
    _environ,
    _get_current,
    _images,
    _keep_write,
    _memo_key,
    _modules,
)
