"""Run-time compilation of CUDA C++ through NVRTC, in-process, with a cache
that is never stale.

    from pygpu.compiler import SourceModule
    mod = SourceModule(source)            # PyCUDA-compatible
    f = mod.get_function("name")

compile() turns source into cubin or PTX bytes; it needs no GPU when arch is
given.  Results are cached in memory and on disk, keyed by the source, the
options, the target architecture, NVRTC's version, the cache schema and the
contents of every user header the source includes.
"""
import hashlib
import json
import os
import re
import sys
import tempfile
import threading
import warnings

from pygpu import _driver, _loader, driver

__all__ = ["compile", "SourceModule", "CompileError", "CompilerWarning", "nvrtc_version",
           "kernel_source", "KERNEL_DIR",
           "supported_archs", "cache_info", "clear_cache", "default_cache_dir"]

CACHE_SCHEMA = 1
_MAGIC = b"PYGPUC1\n"
_lock = threading.RLock()
_nvrtc_path = None


class CompileError(driver.Error):
    """NVRTC rejected the source.  .log is NVRTC's log, .source the source it
    compiled, .options the options; the message shows the failing lines."""

    def __init__(self, message, log="", source="", options=()):
        super().__init__(message)
        self.log = log
        self.source = source
        self.options = list(options)
        self.routine = "nvrtcCompileProgram"


class CompilerWarning(UserWarning):
    """NVRTC printed a warning while compiling."""


KERNEL_DIR = _loader.kernel_dir()


def kernel_source(name):
    """The text of one of the CUDA C files shipped in pygpu/kernels/
    (doublify.cu, elementwise.cu, matmul.cu, lombscargle.cu), for
    SourceModule or compile()."""
    path = os.path.join(KERNEL_DIR, name)
    if os.path.basename(name) != name or not os.path.isfile(path):
        raise ValueError("no kernel file %r in %s (there are: %s)"
                         % (name, KERNEL_DIR, ", ".join(sorted(
                             f for f in os.listdir(KERNEL_DIR) if f.endswith(".cu")))))
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
                h.update(("%s:%r\0" % (c, _file_sig(c))).encode())   # stat follows links
            except OSError:
                h.update(("%s:-\0" % c).encode())
    return h.hexdigest()[:32]


_key_version = None


def _nvrtc_version_for_key(cache_dir):
    """NVRTC's version for the cache key, without opening the library (a
    cold dlopen costs milliseconds) when an earlier process recorded it in
    the cache directory for this same environment and library file."""
    global _key_version
    if _key_version is not None:
        return _key_version
    if _nvrtc_path is None and cache_dir:
        rec = os.path.join(cache_dir, "nvrtc-%s.json" % _nvrtc_fingerprint())
        try:
            with open(rec) as f:
                meta = json.load(f)
            if _file_sig(meta["file"]) == meta["sig"]:
                _key_version = tuple(meta["version"])
                return _key_version
        except (OSError, ValueError, KeyError, TypeError):
            pass
        version = nvrtc_version()
        lib = _loaded_nvrtc_file()
        if lib:
            try:
                os.makedirs(cache_dir, exist_ok=True)
                fd, tmp = tempfile.mkstemp(dir=cache_dir, prefix=".tmp-")
                with os.fdopen(fd, "w") as f:
                    json.dump({"file": lib, "sig": _file_sig(lib), "version": list(version)}, f)
                os.replace(tmp, rec)
            except OSError:
                pass
        _key_version = tuple(version)
        return _key_version
    _key_version = tuple(nvrtc_version())
    return _key_version


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


_device_targets = {}


def _device_arch_and_target(target):
    """For the current device: the arch and target to build for (see the
    manual's 'Target choice')."""
    dev = driver.Context.get_device()
    key = (dev.ordinal, target)
    found = _device_targets.get(key)
    if found is not None:
        return found
    major, minor = dev.compute_capability()
    cc = major * 10 + minor
    drv = driver.get_driver_version()
    nv_major, nv_minor = nvrtc_version()
    nv = nv_major * 1000 + nv_minor * 10
    if drv // 1000 < nv_major:
        raise driver.CudaUnavailableError(
            "NVRTC %d.%d is newer than the CUDA driver, which supports CUDA %d.%d: its "
            "output cannot be loaded. Update the NVIDIA driver or use an NVRTC of CUDA "
            "%d (PYGPU_NVRTC, or pip install %s)"
            % (nv_major, nv_minor, drv // 1000, (drv % 1000) // 10, drv // 1000,
               _loader.nvrtc_pip_requirement(drv // 1000)))
    archs = supported_archs()
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
                % (cc, nv_major, nv_minor, drv // 1000, (drv % 1000) // 10))
        best = max(a for a in archs if a <= cc) if any(a <= cc for a in archs) else max(archs)
        result = ("compute_%d" % best, "ptx")
    _device_targets[key] = result
    return result


# ---- headers ----

_INCLUDE_RE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*([<"])([^>"]+)[>"]', re.M)
_scan_memo = {}


def _includes(text):
    found = _scan_memo.get(text)
    if found is None:
        found = tuple((m.group(1) == '"', m.group(2).strip()) for m in _INCLUDE_RE.finditer(text))
        if len(_scan_memo) > 4096:
            _scan_memo.clear()
        _scan_memo[text] = found
    return found


def _option_include_dirs(options):
    dirs = []
    it = iter(options)
    for o in it:
        if o in ("-I", "--include-path"):
            dirs.append(next(it, ""))
        elif o.startswith("--include-path="):
            dirs.append(o.split("=", 1)[1])
        elif o.startswith("-I"):
            dirs.append(o[2:])
    return dirs


def _resolve_headers(source, include_dirs):
    """Every user header reachable from source through #include (in any
    #if branch: over-approximating is safe), as [(path, bytes)], found in
    include_dirs (and, for quoted includes, the including file's folder).
    Headers found nowhere there (CUDA's, the C++ library's) are NVRTC's."""
    seen = {}
    stack = [(None, source)]
    while stack:
        here, text = stack.pop()
        for quoted, name in _includes(text):
            dirs = ([here] if (quoted and here) else []) + list(include_dirs)
            for d in dirs:
                path = os.path.normpath(os.path.join(d, name))
                if path in seen:
                    break
                if os.path.isfile(path):
                    with open(path, "rb") as f:
                        data = f.read()
                    seen[path] = data
                    stack.append((os.path.dirname(path), data.decode("utf-8", "replace")))
                    break
    return sorted(seen.items())


# ---- the cache ----

def default_cache_dir():
    """$PYGPU_CACHE_DIR, else $XDG_CACHE_HOME/pygpu, else ~/.cache/pygpu."""
    d = os.environ.get("PYGPU_CACHE_DIR")
    if d:
        return d
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "pygpu")


_memory = {}
_stats = {"memory_hits": 0, "disk_hits": 0, "misses": 0, "compiles": 0}


def _debug(msg):
    if os.environ.get("PYGPU_CACHE_DEBUG"):
        print("pygpu cache: " + msg, file=sys.stderr)


def _cache_disabled(cache_dir):
    return cache_dir is False or os.environ.get("PYGPU_DISABLE_CACHE", "") not in ("", "0")


def _cache_cap():
    try:
        return int(os.environ.get("PYGPU_CACHE_SIZE", str(1 << 30)))
    except ValueError:
        return 1 << 30


class Binary(bytes):
    """Compiled cubin or PTX: bytes with .target, .arch, .log and
    .lowered_names (name expression -> mangled name)."""
    target = arch = log = ""
    lowered_names = {}
    _digest = None      # SHA-256 of the image, computed once for the module cache

    def digest(self):
        if self._digest is None:
            self._digest = hashlib.sha256(self).digest()
        return self._digest


def _make_binary(image, target, arch, log, lowered):
    b = Binary(image)
    b.target, b.arch, b.log, b.lowered_names = target, arch, log, dict(lowered)
    return b


def _entry_path(cache_dir, key):
    return os.path.join(cache_dir, key[:2], key + ".bin")


def _read_entry(cache_dir, key):
    path = _entry_path(cache_dir, key)
    try:
        with open(path, "rb") as f:
            blob = f.read()
    except OSError:
        _debug("miss %s: no entry at %s" % (key[:16], path))
        return None
    try:
        if not blob.startswith(_MAGIC):
            raise ValueError("bad magic")
        digest, payload = blob[len(_MAGIC):len(_MAGIC) + 32], blob[len(_MAGIC) + 32:]
        if hashlib.sha256(payload).digest() != digest:
            raise ValueError("checksum mismatch")
        hlen = int.from_bytes(payload[:4], "little")
        meta = json.loads(payload[4:4 + hlen].decode("utf-8"))
        image = payload[4 + hlen:]
        if meta.get("key") != key or len(image) != meta.get("size"):
            raise ValueError("entry does not match its key")
    except (ValueError, UnicodeDecodeError) as e:
        _debug("miss %s: damaged entry %s (%s): recompiling" % (key[:16], path, e))
        try:
            os.unlink(path)
        except OSError:
            pass
        return None
    try:
        os.utime(path)   # least-recently-used order
    except OSError:
        pass
    return _make_binary(image, meta["target"], meta["arch"], meta.get("log", ""),
                        meta.get("lowered", {}))


def _write_entry(cache_dir, key, b):
    meta = json.dumps({"key": key, "size": len(b), "target": b.target, "arch": b.arch,
                       "log": b.log, "lowered": b.lowered_names}).encode("utf-8")
    payload = len(meta).to_bytes(4, "little") + meta + bytes(b)
    blob = _MAGIC + hashlib.sha256(payload).digest() + payload
    path = _entry_path(cache_dir, key)
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".tmp-")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(blob)
            os.replace(tmp, path)   # atomic: readers see all or nothing
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise
    except OSError as e:
        _debug("could not write %s: %s" % (path, e))
        return
    _evict(cache_dir, keep=path)


def _entries(cache_dir):
    out = []
    try:
        subs = os.listdir(cache_dir)
    except OSError:
        return out
    for sub in subs:
        d = os.path.join(cache_dir, sub)
        if len(sub) != 2 or not os.path.isdir(d):
            continue
        for name in os.listdir(d):
            if name.endswith(".bin"):
                p = os.path.join(d, name)
                try:
                    st = os.stat(p)
                except OSError:
                    continue
                out.append((st.st_mtime, st.st_size, p))
    return out


def _evict(cache_dir, keep=None):
    """Delete least-recently-used entries until the total is under the cap;
    the entry just written (keep) stays."""
    cap = _cache_cap()
    entries = _entries(cache_dir)
    total = sum(e[1] for e in entries)
    if total <= cap:
        return
    for mtime, size, p in sorted(entries):
        if p == keep:
            continue
        try:
            os.unlink(p)
            total -= size
            _debug("evicted %s" % p)
        except OSError:
            pass
        if total <= cap:
            break


def cache_info(cache_dir=None):
    """Counts and sizes of the in-memory and on-disk caches."""
    d = default_cache_dir() if cache_dir in (None, True) else cache_dir
    entries = _entries(d) if d else []
    return {"dir": d, "disk_entries": len(entries), "disk_bytes": sum(e[1] for e in entries),
            "memory_entries": len(_memory), "size_cap": _cache_cap(), **_stats}


def clear_cache(cache_dir=None, disk=True):
    """Empty the in-memory cache and (disk=True) the on-disk one."""
    with _lock:
        _memory.clear()
        _key_memo.clear()
        _modules.clear()
    if disk:
        d = default_cache_dir() if cache_dir in (None, True) else cache_dir
        for _, _, p in _entries(d):
            try:
                os.unlink(p)
            except OSError:
                pass


# ---- compile ----

def _format_error(log, source, name):
    """The log, then each failing line of the source with its number."""
    lines = source.splitlines()
    shown = []
    for m in re.finditer(r"%s\((\d+)\): (error|warning)" % re.escape(name), log):
        n = int(m.group(1))
        if m.group(2) == "error" and n not in shown:
            shown.append(n)
    parts = ["NVRTC compilation failed:", log.strip()]
    for n in shown[:10]:
        lo, hi = max(1, n - 2), min(len(lines), n + 2)
        parts.append("")
        for i in range(lo, hi + 1):
            parts.append("%s%5d | %s" % ("->" if i == n else "  ", i, lines[i - 1]))
    return "\n".join(parts)


_key_memo = {}


def _stat_sig(paths):
    sig = []
    for p in paths:
        try:
            st = os.stat(p)
            sig.append((st.st_mtime_ns, st.st_size))
        except OSError:
            sig.append(None)
    return tuple(sig)


def _build_options(options, arch_opt, include_dirs, defines, std, fast_math):
    opts = ["--gpu-architecture=" + arch_opt]
    if std:
        opts.append("--std=" + (std if std.startswith("c++") else "c++" + str(std)))
    if fast_math:
        opts.append("--use_fast_math")
    for d in include_dirs:
        opts.append("--include-path=" + str(d))
    if defines:
        items = defines.items() if isinstance(defines, dict) else ((d, None) for d in defines)
        for k, v in items:
            opts.append("-D%s" % k if v is None else "-D%s=%s" % (k, v))
    opts.extend(options)
    return opts


def compile(source, options=(), arch=None, target=None, include_dirs=(), defines=None,
            name_expressions=(), std=None, fast_math=False, cache_dir=None, name="kernel.cu"):
    """Compile CUDA C++ source to cubin or PTX bytes through NVRTC.

    arch: 'sm_90', 'compute_90', 90 or (9, 0); None means the current
    device's (which needs a GPU).  target: 'cubin' or 'ptx'; None picks cubin
    for a real arch and PTX for a virtual one.  options are passed to NVRTC
    unchanged, and nothing else is added but what the arguments ask for:
    no hidden -ftz or fast math.  Returns a Binary (bytes) with
    .lowered_names for the name_expressions.
    """
    if not isinstance(source, str):
        raise TypeError("source must be a str, not %s" % type(source).__name__)
    if isinstance(options, str):
        options = options.split()
    options = [str(o) for o in (options or ())]
    if target not in (None, "cubin", "ptx"):
        raise ValueError("target must be 'cubin' or 'ptx', not %r" % (target,))
    if arch is None:
        _ensure_nvrtc()
        arch_opt, target = _device_arch_and_target(target)
    else:
        kind, num = _parse_arch(arch)
        arch_opt = "%s_%s" % (kind, num)
        if target is None:
            target = "cubin" if kind == "sm" else "ptx"
        elif target == "cubin" and kind == "compute":
            raise ValueError("target='cubin' needs a real architecture such as 'sm_%s', "
                             "not %r" % (num, arch_opt))
    include_dirs = _loader.with_cuda_include_dirs(include_dirs)
    name_expressions = tuple(name_expressions)
    opts = _build_options(options, arch_opt, include_dirs, defines, std, fast_math)
    disabled = _cache_disabled(cache_dir)
    memo_key = (source, tuple(opts), target, name_expressions, name)
    with _lock:
        memo = _key_memo.get(memo_key)
    if memo is not None and _stat_sig(memo[1]) == memo[2]:
        key = memo[0]
    else:
        headers = _resolve_headers(source, include_dirs + _option_include_dirs(options))
        nv = _nvrtc_version_for_key(None if disabled else
                                    (default_cache_dir() if cache_dir in (None, True)
                                     else str(cache_dir)))
        h = hashlib.sha256()
        for part in (str(CACHE_SCHEMA), "%d.%d" % nv, target, name, source,
                     "\0".join(opts), "\0".join(name_expressions)):
            h.update(part.encode("utf-8"))
            h.update(b"\0\1")
        for path, data in headers:
            h.update(path.encode("utf-8"))
            h.update(b"\0")
            h.update(hashlib.sha256(data).digest())
        key = h.hexdigest()
        paths = [p for p, _ in headers]
        with _lock:
            if len(_key_memo) > 4096:
                _key_memo.clear()
            _key_memo[memo_key] = (key, paths, _stat_sig(paths))
    if not disabled:
        b = _memory.get(key)
        if b is not None:
            _stats["memory_hits"] += 1
            return b
        _debug("miss %s: not in memory" % key[:16])
        d = default_cache_dir() if cache_dir in (None, True) else str(cache_dir)
        b = _read_entry(d, key)
        if b is not None:
            _stats["disk_hits"] += 1
            _memory[key] = b
            return b
    _stats["misses"] += 1
    _ensure_nvrtc()
    ok, log, image, lowered = _driver._nvrtc_compile(source, name, opts, [], name_expressions,
                                                     target)
    _stats["compiles"] += 1
    if not ok:
        raise CompileError(_format_error(log, source, name), log, source, opts)
    if log.strip():
        warnings.warn("NVRTC: " + log.strip(), CompilerWarning, stacklevel=2)
    b = _make_binary(image, target, arch_opt, log, lowered)
    if not disabled:
        _memory[key] = b
        _write_entry(d, key, b)
    return b


# ---- SourceModule ----

_modules = {}


class SourceModule:
    """Compile CUDA C source and load it into the current context, as
    pycuda.compiler.SourceModule does (through NVRTC, with the cache).

    The source is wrapped in extern "C" { } unless no_extern_c=True; the
    CUDA include directory is added when found.  get_function() also takes a
    template expression listed in name_expressions ("scale<float>").
    """

    def __init__(self, source, options=None, no_extern_c=False, arch=None, code=None,
                 include_dirs=(), cache_dir=None, keep=False, name_expressions=(),
                 std=None, fast_math=False, defines=None, target=None):
        if not no_extern_c:
            source = 'extern "C" {\n%s\n}\n' % source
        dirs = list(include_dirs) + _loader.cuda_include_dirs()
        options = list(options or ())
        if arch is None and code is not None:
            arch = code
        self.binary = compile(source, options=options, arch=arch, target=target,
                              include_dirs=dirs, defines=defines,
                              name_expressions=name_expressions, std=std,
                              fast_math=fast_math, cache_dir=cache_dir)
        self.source = source
        if keep:
            d = tempfile.mkdtemp(prefix="pygpu-keep-")
            with open(os.path.join(d, "kernel.cu"), "w") as f:
                f.write(source)
            with open(os.path.join(d, "kernel." + self.binary.target), "wb") as f:
                f.write(self.binary)
            print("pygpu: kept the source and %s in %s" % (self.binary.target, d),
                  file=sys.stderr)
        ctx = driver.Context.get_current()
        if ctx is None:
            driver.init()
            self.module = driver.module_from_buffer(self.binary)
            ctx = self.module.context
        else:
            mkey = (ctx, self.binary.digest())
            mod = _modules.get(mkey)
            if mod is None or ctx.detached:
                mod = driver.module_from_buffer(self.binary)
                _modules[mkey] = mod
            self.module = mod
        self._lowered = self.binary.lowered_names

    def get_function(self, name):
        """The kernel called name, or registered as name in name_expressions."""
        return self.module.get_function(self._lowered.get(name, name))

    def get_global(self, name):
        """(DeviceAllocation, nbytes) of a __device__ or __constant__ variable."""
        return self.module.get_global(self._lowered.get(name, name))

    def set_constant(self, name, ary, stream=None):
        """Copy a NumPy array into a __constant__ (or __device__) variable."""
        ptr, nbytes = self.get_global(name)
        if ary.nbytes != nbytes:
            raise ValueError("%s is %d bytes but the array is %d bytes"
                             % (name, nbytes, ary.nbytes))
        if stream is None:
            driver.memcpy_htod(ptr, ary)
        else:
            driver.memcpy_htod_async(ptr, ary, stream)

    def get_constant(self, name, dtype, shape=None):
        """A NumPy array with the contents of a __constant__ variable."""
        import numpy as np
        ptr, nbytes = self.get_global(name)
        dtype = np.dtype(dtype)
        out = np.empty(shape if shape is not None else nbytes // dtype.itemsize, dtype)
        if out.nbytes != nbytes:
            raise ValueError("%s is %d bytes, not %d" % (name, nbytes, out.nbytes))
        driver.memcpy_dtoh(out, ptr)
        return out
