"""Linking relocatable device code: PyCUDA's DynamicModule and
DynamicSourceModule over the driver's JIT linker (pygpu.driver.Linker,
cuLink*), with sources compiled by NVRTC in-process.

    from pygpu.compiler import DynamicModule, DynamicSourceModule
    mod = (DynamicModule()
           .add_source(outer, nvcc_options=["-rdc=true"])
           .add_source(inner, nvcc_options=["-rdc=true"])
           .add_stdlib("cudadevrt")         # the device runtime: kernels launching kernels
           .link())
    f = mod.get_function("outer")

    mod = DynamicSourceModule(source)       # -rdc=true, libcudadevrt, linked

No nvcc runs: options written for nvcc are translated (translate_nvcc_options;
the manual's "Linking" section lists what is dropped).

Linker is the one Python-facing linker: nvJitLink (libnvJitLink, loaded on
first use, no GPU needed) when it is found, the driver's cuLink* otherwise;
LTO-IR (compile(..., target="ltoir")) needs nvJitLink.

    a = compile(src_a, arch="sm_90", target="ltoir")
    b = compile(src_b, arch="sm_90", target="ltoir")
    cubin = Linker(arch="sm_90", lto=True).add(a).add(b).link()     # bytes
    mod = Linker(lto=True).add(a).add(b).load()                     # a Module

Linked results are cached like compiles (pygpu.store): the key covers every
input's content, the options, the architecture, the output kind and the
linker's version; a hit loads neither NVRTC nor nvJitLink.
"""

from typing import Any, Callable, Iterable, cast
import enum
import hashlib
import os
import sys
import tempfile
import threading

from pygpu import _driver, _loader, compiler, driver, store
from pygpu._errors import LinkError

__all__ = [
    "DEFAULT_NVCC_FLAGS",
    "DynamicModule",
    "DynamicSourceModule",
    "jit_input_type",
    "translate_nvcc_options",
    "find_stdlib",
    "stdlib_dirs",
    "Linker",
    "LinkError",
    "link",
    "nvjitlink_available",
    "nvjitlink_version",
    "INPUT_KINDS",
]


def _default_flags():
    text = os.environ.get("PYGPU_DEFAULT_NVCC_FLAGS")
    if text is None:
        text = os.environ.get("PYCUDA_DEFAULT_NVCC_FLAGS", "")
    return [f for f in text.split() if f]


#: Options every DynamicSourceModule (and PyCUDA code that passes them on)
#: starts from: $PYGPU_DEFAULT_NVCC_FLAGS, else $PYCUDA_DEFAULT_NVCC_FLAGS,
#: split on white space; empty by default.  nvcc spellings are translated.
DEFAULT_NVCC_FLAGS = _default_flags()


@_driver._enum_tables  # PyCUDA's .names and .values
class jit_input_type(enum.IntEnum):
    """What an input of the driver's linker is (CUjitInputType)."""

    CUBIN = 0
    PTX = 1
    FATBINARY = 2
    OBJECT = 3
    LIBRARY = 4


# nvcc options that take their value as the next word when not written
# with "=" (or glued, for -l/-L)
_HOST_WITH_VALUE = {
    "-Xcompiler",
    "--compiler-options",
    "-Xlinker",
    "--linker-options",
    "-ccbin",
    "--compiler-bindir",
    "-odir",
    "--output-directory",
    "-o",
    "--output-file",
    "-Xarchive",
    "--archive-options",
}
_HOST_FLAGS = {
    "-m64",
    "--machine=64",
    "-shared",
    "--shared",
    "-c",
    "--compile",
    "-ptx",
    "--ptx",
    "-cubin",
    "--cubin",
    "-fatbin",
    "--fatbin",
    "-keep",
    "--keep",
    "-g",
    "--debug",
    "-cudart=static",
    "-cudart=shared",
    "-cudart=none",
    "--cudart=static",
    "--cudart=shared",
    "--cudart=none",
    "-lib",
    "--lib",
}
_RDC_TRUE = {"-rdc=true", "--relocatable-device-code=true", "-dc", "--device-c"}


def translate_nvcc_options(options: "str | Iterable[str] | None") -> "dict[str, Any]":
    """Split nvcc options into what NVRTC takes and what belongs elsewhere.

    Returns a dict: ``nvrtc`` (a list for NVRTC), ``libraries`` (names from
    -lNAME, to link with add_stdlib), ``library_dirs`` (-LDIR, searched
    first for them), ``arch`` (from -arch/--gpu-architecture, else None),
    ``code`` (from -code, else None) and ``dropped`` (host-side options
    that mean nothing to NVRTC: -Xcompiler/-Xlinker/-ccbin with their
    values, -O<n>, -g, -m64, -shared, -c, -ptx, -cubin, -fatbin, -keep,
    -cudart=...).  -rdc=true and -dc become NVRTC's -rdc=true.
    """
    if isinstance(options, str):
        options = options.split()
    out: "dict[str, Any]" = {
        "nvrtc": [],
        "libraries": [],
        "library_dirs": [],
        "arch": None,
        "code": None,
        "dropped": [],
    }
    opts = [str(o) for o in (options or ())]
    i = 0
    while i < len(opts):
        o = opts[i]
        nxt = opts[i + 1] if i + 1 < len(opts) else None

        def value(flag_names):
            """(value, words used) of an option spelled -x=V, -x V or (glued) -xV."""
            for f in flag_names:
                if o == f and nxt is not None:
                    return nxt, 2
                if o.startswith(f + "="):
                    return o[len(f) + 1 :], 1
            return None, 0

        if o in _RDC_TRUE:
            if "-rdc=true" not in out["nvrtc"]:
                out["nvrtc"].append("-rdc=true")
            i += 1
            continue
        if o.startswith("-l") and not o.startswith("-lineinfo") and len(o) > 2:
            out["libraries"].append(o[2:])
            i += 1
            continue
        if o in ("-l", "--library") or o.startswith("--library="):
            v, used = value(["-l", "--library"])
            if v is None:
                raise ValueError("nvcc option %r needs a library name" % o)
            out["libraries"].extend(x for x in v.split(",") if x)
            i += used
            continue
        if o.startswith("-L") and len(o) > 2:
            out["library_dirs"].append(o[2:])
            i += 1
            continue
        if o in ("-L", "--library-path") or o.startswith("--library-path="):
            v, used = value(["-L", "--library-path"])
            if v is None:
                raise ValueError("nvcc option %r needs a directory" % o)
            out["library_dirs"].extend(x for x in v.split(",") if x)
            i += used
            continue
        if o in ("-arch", "--gpu-architecture") or o.startswith(("-arch=", "--gpu-architecture=")):
            v, used = value(["-arch", "--gpu-architecture"])
            if v is None:
                raise ValueError("nvcc option %r needs an architecture" % o)
            out["arch"] = v
            i += used
            continue
        if o in ("-code", "--gpu-code") or o.startswith(("-code=", "--gpu-code=")):
            v, used = value(["-code", "--gpu-code"])
            if v is None:
                raise ValueError("nvcc option %r needs a code" % o)
            out["code"] = v.split(",")[0]
            i += used
            continue
        if o in _HOST_WITH_VALUE or any(o.startswith(f + "=") for f in _HOST_WITH_VALUE):
            used = 2 if o in _HOST_WITH_VALUE and nxt is not None else 1
            out["dropped"].extend(opts[i : i + used])
            i += used
            continue
        if o in _HOST_FLAGS or (len(o) == 3 and o.startswith("-O") and o[2].isdigit()):
            out["dropped"].append(o)
            i += 1
            continue
        out["nvrtc"].append(o)
        i += 1
    return out


# ---- the CUDA libraries for the linker (libcudadevrt.a) ----

_WHEEL_STATIC_DIRS = ("nvidia/cu13/lib", "nvidia/cuda_runtime/lib")


def stdlib_dirs(extra: "Iterable[str]" = ()) -> "list[str]":
    """The directories searched for lib<name>.a, in order: extra (cuda_libdir,
    -L), the folder of the NVRTC library in use (the same toolkit as the
    compiler), $CUDA_HOME, $CUDA_PATH, $CUDA_ROOT (lib64/, lib/),
    $CONDA_PREFIX/lib, NVIDIA's wheels on sys.path (nvidia/cu13/lib,
    nvidia/cuda_runtime/lib), $LD_LIBRARY_PATH, /usr/local/cuda/lib64,
    /usr/lib/x86_64-linux-gnu."""
    dirs = [os.fspath(d) for d in extra]
    nvrtc = compiler._loaded_nvrtc_file()
    if nvrtc:
        dirs.append(os.path.dirname(nvrtc))
    for var in ("CUDA_HOME", "CUDA_PATH", "CUDA_ROOT"):
        root = os.environ.get(var)
        if root:
            dirs += [os.path.join(root, "lib64"), os.path.join(root, "lib")]
    if os.environ.get("CONDA_PREFIX"):
        dirs.append(os.path.join(os.environ["CONDA_PREFIX"], "lib"))
    for rel in _WHEEL_STATIC_DIRS:
        dirs += _loader._site_dirs(sys.path, rel)
    dirs += [d for d in os.environ.get("LD_LIBRARY_PATH", "").split(os.pathsep) if d]
    dirs += ["/usr/local/cuda/lib64", "/usr/lib/x86_64-linux-gnu"]
    seen: "set[str]" = set()
    out = []
    for d in dirs:
        if d not in seen:
            seen.add(d)
            out.append(d)
    return out


def find_stdlib(libname: str, extra_dirs: "Iterable[str]" = ()) -> str:
    """The path of the static CUDA library libname ('cudadevrt' ->
    .../libcudadevrt.a); FileNotFoundError listing where it looked."""
    if not isinstance(libname, str):
        raise TypeError(
            "add_stdlib() takes a library name (str) such as 'cudadevrt', "
            "not %s" % type(libname).__name__
        )
    if not libname or "/" in libname or os.sep in libname or "\0" in libname:
        raise ValueError(
            "add_stdlib() takes a library name such as 'cudadevrt', not %r "
            "(use add_file() for a path)" % (libname,)
        )
    fname = libname if libname.startswith("lib") and libname.endswith(".a") else "lib%s.a" % libname
    dirs = stdlib_dirs(extra_dirs)
    for d in dirs:
        p = os.path.join(d, fname)
        if os.path.isfile(p):
            return p
    raise FileNotFoundError(
        "the CUDA library %s (for add_stdlib(%r)) was not found; "
        "looked in: %s (set cuda_libdir=, CUDA_HOME, or install "
        "NVIDIA's CUDA runtime wheel)" % (fname, libname, ", ".join(dirs))
    )


# ---- Linker: nvJitLink, or the driver's cuLink* ----

#: What a Linker input can be.  An int jit_input_type (the driver's
#: CUjitInputType, 0..4) is taken too.
INPUT_KINDS = ("cubin", "ptx", "ltoir", "fatbin", "object", "library")
_JL_KIND = {"cubin": 1, "ptx": 2, "ltoir": 3, "fatbin": 4, "object": 5, "library": 6}
_DRIVER_KIND = {"cubin": 0, "ptx": 1, "fatbin": 2, "object": 3, "library": 4}
_FROM_JIT = {0: "cubin", 1: "ptx", 2: "fatbin", 3: "object", 4: "library"}
_SUFFIX_KIND = {
    ".cubin": "cubin",
    ".ptx": "ptx",
    ".ltoir": "ltoir",
    ".lto": "ltoir",
    ".fatbin": "fatbin",
    ".o": "object",
    ".obj": "object",
    ".a": "library",
    ".lib": "library",
}
_BACKENDS = (None, "nvjitlink", "driver")

_jl_lock = threading.Lock()
_jl_loaded = None  # path once loaded
_jl_error = None  # the CudaUnavailableError of a failed load
_jl_key_version: dict[Any, Any] = {}  # cache dir -> (major, minor) for keys, without loading


def _ensure_nvjitlink():
    """Load nvJitLink once; its path, or raise the (remembered)
    CudaUnavailableError saying where it looked."""
    global _jl_loaded, _jl_error
    if _jl_loaded is not None:
        return _jl_loaded
    with _jl_lock:
        if _jl_loaded is None:
            if _jl_error is not None:
                raise _jl_error
            try:
                _jl_loaded = _loader.load_nvjitlink()
            except driver.CudaUnavailableError as e:
                _jl_error = e
                raise
    return _jl_loaded


def nvjitlink_available() -> bool:
    """Whether nvJitLink can be loaded (loading it)."""
    try:
        _ensure_nvjitlink()
    except driver.CudaUnavailableError:
        return False
    return True


def nvjitlink_version() -> "tuple[int, int]":
    """(major, minor) of the nvJitLink library in use (loading it);
    CudaUnavailableError when there is none."""
    _ensure_nvjitlink()
    v = _driver._nvjitlink_version()
    return (int(v[0]), int(v[1])) if v is not None else (12, 0)


def _jl_fingerprint():
    """What decides which nvJitLink a new process would load (the
    variables the search reads and the candidate files), as for NVRTC."""
    h = hashlib.sha256(b"nvjitlink\0")
    for var in (
        "PYGPU_NVJITLINK",
        "CUDA_HOME",
        "CUDA_PATH",
        "LD_LIBRARY_PATH",
        "CONDA_PREFIX",
        "PYGPU_NO_PATHFINDER",
    ):
        h.update(("%s=%s\0" % (var, os.environ.get(var, ""))).encode())
    for c in ["/etc/ld.so.cache"] + _loader.nvjitlink_candidates(with_nvrtc=False):
        if os.path.isabs(c):
            try:
                h.update(("%s:%r\0" % (c, compiler._file_sig(c))).encode())
            except OSError:
                h.update(("%s:-\0" % c).encode())
    return h.hexdigest()[:32]


def _jl_version_for_key(cache_dir):
    """nvJitLink's version for a cache key: from the record an earlier
    process left in the cache directory for this environment (no dlopen),
    else by loading the library (and recording it).  None when nvJitLink
    cannot be loaded."""
    found = _jl_key_version.get(cache_dir)
    if found is not None:
        return found
    fp = None
    if cache_dir and _jl_loaded is None:
        fp = _jl_fingerprint()
        found = store.read_version_record(cache_dir, fp, compiler._file_sig, kind="nvjitlink")
        if found is not None:
            _jl_key_version[cache_dir] = found
            return found
    try:
        version = nvjitlink_version()
    except driver.CudaUnavailableError:
        return None
    if fp is not None:
        lib = _loader._loaded_library("libnvJitLink.so")
        if lib:
            try:
                store.write_version_record(
                    cache_dir, fp, lib, compiler._file_sig(lib), version, kind="nvjitlink"
                )
            except OSError:
                pass
    _jl_key_version[cache_dir] = version
    return version


_file_digests: dict[Any, Any] = {}


def _file_digest(path, cache_dir):
    """SHA-256 (hex) of a file's content for a cache key.  The content is
    read once per (path, stat) and remembered in this process and, when the
    file was not changing while read, in the cache directory, so a new
    process does not hash libcudadevrt.a (1 MB) again."""
    st = os.stat(path)
    sig = [os.path.realpath(path), st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]
    memo_key = tuple(sig)
    found = _file_digests.get(memo_key)
    if found is not None:
        return found
    rec = "file-" + hashlib.sha256(repr(sig).encode()).hexdigest()[:32]
    meta = store.read_record(cache_dir, rec) if cache_dir else None
    if meta is not None and meta.get("sig") == sig and isinstance(meta.get("sha256"), str):
        _file_digests[memo_key] = meta["sha256"]
        return meta["sha256"]
    with open(path, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()
        st2 = os.fstat(f.fileno())
    if (st2.st_ino, st2.st_size, st2.st_mtime_ns, st2.st_ctime_ns) != (
        st.st_ino,
        st.st_size,
        st.st_mtime_ns,
        st.st_ctime_ns,
    ):
        raise store.Uncacheable("%s changed while it was read" % path)
    if not store._recent(st2, __import__("time").time_ns()):
        _file_digests[memo_key] = digest
        if cache_dir:
            store.write_record(cache_dir, rec, {"sig": sig, "sha256": digest})
    return digest


def _input_kind(input_type, payload, is_file, what):
    """An input's kind (one of INPUT_KINDS) from input_type: a name, a
    jit_input_type, or None (a Binary's .target, or a file's suffix)."""
    if input_type is None:
        if isinstance(payload, store.Binary) and payload.target in INPUT_KINDS:
            return payload.target
        if is_file:
            suffix = os.path.splitext(os.fspath(payload))[1].lower()
            if suffix in _SUFFIX_KIND:
                return _SUFFIX_KIND[suffix]
            raise ValueError(
                "%s: cannot tell the kind of %r from its suffix; pass "
                "input_type (one of %s)" % (what, os.fspath(payload), ", ".join(INPUT_KINDS))
            )
        raise ValueError(
            "%s: pass input_type (one of %s) for data that is not a "
            "pygpu Binary" % (what, ", ".join(INPUT_KINDS))
        )
    if isinstance(input_type, str):
        k = input_type.lower()
        if k in ("fatbinary",):
            k = "fatbin"
        if k in INPUT_KINDS:
            return k
        raise ValueError(
            "%s: input_type %r is not one of %s" % (what, input_type, ", ".join(INPUT_KINDS))
        )
    if isinstance(input_type, int) and not isinstance(input_type, bool):
        if int(input_type) in _FROM_JIT:
            return _FROM_JIT[int(input_type)]
        raise ValueError(
            "%s: input_type %d is not a jit_input_type (0..4); LTO-IR is "
            "input_type='ltoir'" % (what, input_type)
        )
    raise TypeError(
        "%s: input_type must be a name such as 'ltoir' or a jit_input_type, "
        "not %s" % (what, type(input_type).__name__)
    )


def _driver_options(options):
    """nvJitLink-style string options as the driver linker's (jit_option,
    value) pairs, for the few both understand; ValueError for the rest."""
    jo = driver.jit_option
    out = []
    for o in options:
        if o == "-lineinfo":
            out.append((jo.GENERATE_LINE_INFO, 1))
        elif o in ("-g", "-G"):
            out.append((jo.GENERATE_DEBUG_INFO, 1))
        elif len(o) == 3 and o.startswith("-O") and o[2].isdigit():
            out.append((jo.OPTIMIZATION_LEVEL, int(o[2])))
        elif o.startswith("-maxrregcount="):
            out.append((jo.MAX_REGISTERS, int(o.split("=", 1)[1])))
        elif o == "-verbose":
            out.append((jo.LOG_VERBOSE, 1))
        else:
            raise ValueError(
                "Linker option %r has no equivalent in the driver's linker "
                "(cuLink*), which links here because nvJitLink is not used; "
                "it takes -lineinfo, -g, -O<n>, -maxrregcount=N, -verbose" % (o,)
            )
    return out


def _device_sm():
    major, minor = driver.Context.get_device().compute_capability()
    return "sm_%d%d" % (major, minor)


_arch_memo: dict[Any, Any] = {}
_IMMUTABLE = (bytes, store.Binary)


def _norm_arch(arch):
    if arch is None:
        return None
    try:
        return _arch_memo[arch]
    except (KeyError, TypeError):
        pass
    kind, num = compiler._parse_arch(arch)
    out = "sm_" + num  # nvJitLink links for a real architecture
    if isinstance(arch, (str, int, tuple)) and len(_arch_memo) < 64:
        _arch_memo[arch] = out
    return out


class Linker:
    """Link device code into one cubin (or PTX): LTO-IR, PTX, cubin, fatbin,
    object and library inputs.

        Linker(arch="sm_90", lto=True).add(a).add(b).link()   -> Binary (cubin)
        Linker(lto=True).add(a).add(b).load()                 -> Module

    backend: None picks nvJitLink (libnvJitLink, no GPU needed) when it is
    found and the driver's cuLink* (the current context's device)
    otherwise; 'nvjitlink' or 'driver' insists.  LTO-IR inputs and lto=True
    need nvJitLink.  arch: 'sm_90', 90 or (9, 0); None means the current
    device's.  options: nvJitLink's options as str ('-O3', '-lineinfo',
    '-g', '-maxrregcount=N', ...); driver_options: (jit_option, value)
    pairs for the driver's linker.  target: 'cubin', or 'ptx' (nvJitLink
    with lto only).  cache_dir: as for compile() (None the default, False
    none): a linked result is cached under every input's content, the
    options, the architecture, the target and the linker's version.
    message_handler(success, info_log, error_log) is called after a link
    that ran (not on a cache hit).  Each add* returns the Linker.
    """

    def __init__(
        self,
        arch: "str | None" = None,
        options: "str | Iterable[str]" = (),
        lto: bool = False,
        target: str = "cubin",
        backend: "str | None" = None,
        cache_dir: Any = None,
        message_handler: "Callable[[bool, str, str], object] | None" = None,
        driver_options: "Iterable[Any]" = (),
    ) -> None:
        if backend not in _BACKENDS:
            raise ValueError("backend must be None, 'nvjitlink' or 'driver', not %r" % (backend,))
        if target not in ("cubin", "ptx"):
            raise ValueError("target must be 'cubin' or 'ptx', not %r" % (target,))
        if target == "ptx" and not lto:
            raise ValueError("target='ptx' needs lto=True (nvJitLink writes PTX only from LTO-IR)")
        if message_handler is not None and not callable(message_handler):
            raise TypeError(
                "message_handler must be callable or None, not %s" % type(message_handler).__name__
            )
        if isinstance(options, str):
            options = options.split()
        self.options = compiler._str_list(options, "options", "-O3") if options else []
        self.driver_options = list(driver_options) if driver_options else []
        self.arch = _norm_arch(arch)
        self.lto = bool(lto)
        self.target = target
        self.backend = backend
        self.cache_dir = store.check_dir(cache_dir)  # checked now, used at link()
        self.message_handler = message_handler
        self.inputs: "list[tuple[str, Any, str]]" = []  # (kind, bytes or path, name)
        self._files: "list[bool]" = []  # is_file, parallel to inputs
        self._jl_inputs: "list[Any]" = []  # the inputs as _nvjitlink_link takes them
        self.info_log = self.error_log = ""
        self.used_backend: "str | None" = None
        self.from_cache = False

    def __repr__(self) -> str:
        return "<pygpu.linking.Linker %s, %d input(s)%s>" % (
            self.arch or "for the current device",
            len(self.inputs),
            ", lto" if self.lto else "",
        )

    def add_data(self, data: Any, input_type: Any = None, name: "str | None" = None) -> "Linker":
        """Add bytes (a Binary from compile() knows its kind; otherwise
        input_type names it: 'ltoir', 'ptx', 'cubin', 'fatbin', 'object',
        'library', or a jit_input_type)."""
        if isinstance(data, str):
            raise TypeError("Linker.add_data() takes bytes; encode PTX text first")
        if input_type is None and type(data) is store.Binary and data.target in INPUT_KINDS:
            kind = data.target  # the common case, the fewest steps: links are timed
        else:
            kind = _input_kind(input_type, data, False, "Linker.add_data()")
        # bytes and Binary cannot change; anything else (a subclass may define
        # __buffer__) is copied once, so the key and the link see the same bytes
        raw = data if type(data) in _IMMUTABLE else bytes(memoryview(data).cast("B"))
        if not raw:
            raise ValueError(
                "Linker.add_data(): the %s input %s is empty" % (kind, name or "(unnamed)")
            )
        if kind == "ptx":
            raw = raw.rstrip(b"\0")
            if b"\0" in raw:
                raise ValueError(
                    "Linker.add_data(): the PTX input %s is not text (a NUL "
                    "byte at offset %d)" % (name, raw.index(b"\0"))
                )
            raw += b"\0"
        if name is None:
            name = "input%d.%s" % (len(self.inputs), kind)
        if not isinstance(name, str):
            raise TypeError("name must be a str, not %s" % type(name).__name__)
        self.inputs.append((kind, raw, name))
        self._files.append(False)
        self._jl_inputs.append((_JL_KIND[kind], raw, name, False))
        return self

    add = add_data

    def add_file(self, path: "str | os.PathLike[str]", input_type: Any = None) -> "Linker":
        """Add the file at path (its kind from input_type, else its suffix:
        .ltoir .ptx .cubin .fatbin .o .a)."""
        p = os.fspath(path)
        if isinstance(p, bytes):
            p = os.fsdecode(p)
        kind = _input_kind(input_type, p, True, "Linker.add_file()")
        if not os.path.exists(p):
            raise FileNotFoundError(2, "No such file or directory", p)
        if not os.path.isfile(p):
            raise IsADirectoryError(21, "Is a directory", p)
        path = os.path.abspath(p)
        self.inputs.append((kind, path, os.path.basename(p)))
        self._files.append(True)
        self._jl_inputs.append((_JL_KIND[kind], path, os.path.basename(p), True))
        return self

    def add_stdlib(self, libname: str, extra_dirs: "Iterable[str]" = ()) -> "Linker":
        """Add the CUDA static library lib<libname>.a (find_stdlib)."""
        return self.add_file(find_stdlib(libname, extra_dirs), "library")

    def add_source(
        self, source: Any, options: "list[str] | tuple[str, ...]" = (), **compile_args: Any
    ) -> "Linker":
        """Compile source with compile() (LTO-IR when lto, else relocatable
        PTX) for this Linker's architecture and add it."""
        arch = self.arch or _device_sm()
        target = "ltoir" if self.lto else "ptx"
        compile_args.setdefault(
            "cache_dir", self.cache_dir if self.cache_dir is not None else False
        )
        name = compile_args.pop("name", "source%d.cu" % len(self.inputs))
        b = compiler.compile(
            source,
            options=options,
            target=target,
            rdc=True,
            name=name,
            arch=arch if self.lto else "compute_" + arch[3:],
            **compile_args,
        )
        return self.add_data(b, target, name)

    # -- linking --

    def _choose(self, cache):
        """(backend, version) without loading a library when a record says."""
        needs_jl = self.lto or any(k == "ltoir" for k, _, _ in self.inputs)
        if self.backend == "driver":
            if needs_jl:
                what = "lto=True" if self.lto else "an LTO-IR input"
                raise LinkError(
                    "Linker(backend='driver'): %s needs nvJitLink; the "
                    "driver's linker (cuLink*) takes no LTO-IR" % what
                )
            return "driver", None
        if self.driver_options and self.backend is None and not needs_jl:
            return "driver", None
        version = _jl_version_for_key(cache)
        if version is not None:
            return "nvjitlink", version
        if self.backend == "nvjitlink" or needs_jl:
            what = (
                ("lto=True" if self.lto else "LTO-IR inputs") if needs_jl else "backend='nvjitlink'"
            )
            try:
                _ensure_nvjitlink()
            except driver.CudaUnavailableError as e:
                raise driver.CudaUnavailableError(
                    "%s needs nvJitLink, which was not found (the driver's linker takes "
                    "no LTO-IR): %s" % (what, e)
                ) from None
        return "driver", None

    def _key(self, backend, version, arch, cache):
        parts = [
            "link",
            backend,
            "%d.%d" % version if version else "",
            arch or "",
            self.target,
            "lto" if self.lto else "",
            "%d" % len(self.options),
        ]
        parts += self.options
        parts += [repr(self.driver_options), "%d" % len(self.inputs)]
        for (kind, payload, name), is_file in zip(self.inputs, self._files):
            digest = (
                _file_digest(payload, cache) if is_file else hashlib.sha256(payload).hexdigest()
            )
            parts += [kind, name, "F" if is_file else "D", digest]
        return store.make_key(parts, store.Deps())

    def link(self) -> Any:
        """Link: the cubin (or PTX) as a Binary (bytes, .target, .arch).  A
        failed link raises LinkError with the linker's error log."""
        if not self.inputs:
            raise driver.LogicError("Linker.link(): nothing to link; add inputs first")
        cache = self.cache_dir
        if (
            cache is None
            and _jl_loaded is not None
            and (self.backend == "nvjitlink" or (self.backend is None and not self.driver_options))
        ):
            # no cache, nvJitLink loaded: the link and nothing else.  This code
            # runs with the caches cold (the link before evicted them), where
            # each Python step costs a memory access: 50 us a link on an H200
            # host before this path was made short
            arch = self.arch or _device_sm()
            self.used_backend = "nvjitlink"
            return store.make_binary(self._link_jl(arch), self.target, arch, self.info_log, {})
        if cache is not None and store.env_disabled():
            cache = None
        backend, version = self._choose(cache)
        if backend == "driver":
            # the driver links in (and for) the current context: not cached,
            # as a module load is not
            arch, cache = None, None
        else:
            arch = self.arch or _device_sm()
        key = None
        if cache is not None:
            try:
                key = self._key(backend, version, arch, cache)
            except store.Uncacheable as e:
                store.debug("link not cached: %s" % e)
        self.used_backend = backend
        if key is not None:
            b = store.memory.get(key)
            if b is None:
                b = store.read_entry(cache, key)
                if b is not None:
                    store.stats["disk_hits"] += 1
                    store.memory[key] = b
            else:
                store.stats["memory_hits"] += 1
            if b is not None:
                self.from_cache = True
                return b
            store.stats["misses"] += 1
        image = self._link_jl(arch) if backend == "nvjitlink" else self._link_driver()
        b = store.make_binary(image, self.target, arch or "", self.info_log, {})
        if key is not None:
            store.memory[key] = b
            store.write_entry(cache, key, b)
        return b

    def _report(self, ok):
        if self.message_handler is not None:
            self.message_handler(ok, self.info_log, self.error_log)

    def _link_jl(self, arch):
        if _jl_loaded is None:
            _ensure_nvjitlink()
        opts = ["-arch=" + arch]
        if self.lto:
            opts.append("-lto")
        if self.target == "ptx":
            opts.append("-ptx")
        if self.options:
            opts += self.options
        inputs = self._jl_inputs
        ok, image, info, err, routine, code, failed = _driver._nvjitlink_link(
            opts, inputs, self.target
        )
        self.info_log, self.error_log = info, err
        self._report(ok)
        if not ok:
            name = _driver._nvjitlink_result_name(code)
            where = "; input %s" % inputs[failed][2] if failed >= 0 else ""
            raise LinkError(
                "%s failed: %s%s%s"
                % (
                    routine,
                    name,
                    where,
                    "\nnvJitLink error log:\n" + err.rstrip() if err.strip() else "",
                ),
                log=err,
                info_log=info,
                routine=routine,
                code=code,
                name=name,
                input=inputs[failed][2] if failed >= 0 else None,
            )
        return image

    def _link_driver(self):
        options = _driver_options(self.options) + self.driver_options
        seen = []

        def handler(ok, info, err):
            seen.append((ok, info, err))

        L = _driver.Linker(handler, options)
        try:
            for (kind, payload, name), is_file in zip(self.inputs, self._files):
                if is_file:
                    L.add_file(payload, _DRIVER_KIND[kind])
                else:
                    L.add_data(payload, _DRIVER_KIND[kind], name)
            try:
                image = L.complete()
            finally:
                if seen:
                    _, self.info_log, self.error_log = seen[-1]
                    self._report(seen[-1][0])
        finally:
            L.close()
        return image

    def load(self) -> Any:
        """link(), then load the image into the current context: a Module."""
        return driver.module_from_buffer(self.link())


def link(
    inputs: "Iterable[Any]",
    arch: "str | None" = None,
    options: "str | Iterable[str]" = (),
    lto: bool = False,
    target: str = "cubin",
    backend: "str | None" = None,
    cache_dir: Any = None,
) -> Any:
    """Link inputs (Binary objects from compile(), or (data, input_type)
    pairs, or file paths) with a Linker; the cubin (or PTX) as a Binary."""
    L = Linker(
        arch=arch, options=options, lto=lto, target=target, backend=backend, cache_dir=cache_dir
    )
    for x in inputs:
        if isinstance(x, (str, os.PathLike)):
            L.add_file(x)
        elif isinstance(x, tuple):
            L.add_data(*x)
        else:
            L.add_data(x)
    return L.link()


# ---- DynamicModule ----


class DynamicModule(compiler.CudaModule):
    """Several sources, binaries and libraries linked into one Module, as
    pycuda.compiler.DynamicModule (through NVRTC and a Linker).

    add_source() compiles CUDA C to relocatable PTX (wrapped in extern "C"
    { } unless no_extern_c) and adds it; add_data()/add_file() add PTX,
    cubin, fatbin, object or library inputs (jit_input_type, or a name such
    as 'ltoir'); add_stdlib('cudadevrt') adds a CUDA static library; link()
    links them (Linker: nvJitLink when found, else the driver's cuLink*;
    backend= insists on one) and loads the result in the current context.
    Each add_* and link() returns self.  nvcc is accepted for PyCUDA's sake
    and not used.  link_options: (jit_option, value) pairs for the driver's
    linker (they pick it); message_handler(success, info_log, error_log) is
    called when the link completes.
    """

    def __init__(
        self,
        nvcc: str = "nvcc",
        link_options: "Iterable[Any] | None" = None,
        keep: bool = False,
        no_extern_c: bool = False,
        arch: "str | None" = None,
        code: "str | None" = None,
        cache_dir: Any = None,
        include_dirs: "Iterable[str]" = (),
        message_handler: "Callable[[bool, str, str], object] | None" = None,
        log_verbose: bool = False,
        cuda_libdir: "str | None" = None,
        backend: "str | None" = None,
    ) -> None:
        options = list(link_options or ())
        if log_verbose:
            options.append((driver.jit_option.LOG_VERBOSE, 1))
        link_arch = arch or code
        if link_arch is not None and str(link_arch).startswith("compute_"):
            link_arch = "sm_" + str(link_arch)[8:]
        self.linker: "Linker | None" = Linker(
            arch=link_arch,
            backend=backend,
            cache_dir=cache_dir,
            message_handler=message_handler,
            driver_options=options,
        )
        self.nvcc = nvcc
        self.keep = keep
        self.no_extern_c = no_extern_c
        self.arch = arch
        self.code = code
        self.cache_dir = cache_dir
        self.include_dirs = list(include_dirs or ())
        self.cuda_libdir = cuda_libdir
        self.module = None
        self._lowered: "dict[str, str]" = {}
        self._stdlibs: "list[str]" = []  # paths of the libraries added
        self._library_dirs: "list[str]" = []  # from -L in nvcc_options
        self._keep_dir = None

    def _open_linker(self, what):
        if self.linker is None:
            raise driver.LogicError(
                "DynamicModule.%s(): already linked; make a new DynamicModule" % what
            )
        return self.linker

    def _keep(self, name, data):
        if self._keep_dir is None:
            self._keep_dir = tempfile.mkdtemp(prefix="pygpu-keep-")
            print(
                "pygpu: keeping the link's sources and inputs in %s" % self._keep_dir,
                file=sys.stderr,
            )
        with open(
            os.path.join(self._keep_dir, os.path.basename(name)),
            "w" if isinstance(data, str) else "wb",
        ) as f:
            f.write(data)

    def add_source(
        self, source: str, nvcc_options: "str | Iterable[str]" = (), name: str = "kernel.ptx"
    ) -> "DynamicModule":
        """Compile source (CUDA C) with NVRTC to PTX and add it under name.
        nvcc_options are translated (translate_nvcc_options): -lNAME links
        lib NAME (add_stdlib), -arch picks the architecture."""
        linker = self._open_linker("add_source")
        if not isinstance(source, str):
            raise TypeError("source must be a str, not %s" % type(source).__name__)
        if not isinstance(name, str):
            raise TypeError("name must be a str, not %s" % type(name).__name__)
        t = translate_nvcc_options(nvcc_options)
        arch = t["arch"] or self.arch or t["code"] or self.code
        if arch is not None and arch.startswith("sm_"):
            arch = "compute_" + arch[3:]  # the linker takes PTX: a virtual target
        if not self.no_extern_c:
            source = 'extern "C" {\n%s\n}\n' % source
        src_name = name[:-4] + ".cu" if name.endswith(".ptx") else name + ".cu"
        ptx = compiler.compile(
            source,
            options=t["nvrtc"],
            arch=arch,
            target="ptx",
            include_dirs=self.include_dirs,
            cache_dir=self.cache_dir,
            name=src_name,
        )
        if self.keep:
            self._keep(src_name, source)
            self._keep(name, bytes(ptx))
        self._library_dirs += [d for d in t["library_dirs"] if d not in self._library_dirs]
        linker.add_data(bytes(ptx), "ptx", name)
        for lib in t["libraries"]:
            self.add_stdlib(lib)
        return self

    def add_data(self, data: Any, input_type: Any, name: str = "unknown") -> "DynamicModule":
        """Add bytes of input_type (a jit_input_type, or 'ltoir' ...) under name."""
        if input_type is None or isinstance(input_type, bool):
            raise TypeError(
                "DynamicModule.add_data(): input_type must be a jit_input_type "
                "(or a name such as 'ltoir'), not %s" % type(input_type).__name__
            )
        self._open_linker("add_data").add_data(data, input_type, name)
        return self

    def add_file(self, filename: "str | os.PathLike[str]", input_type: Any) -> "DynamicModule":
        """Add the file filename of input_type (a jit_input_type, or 'ltoir' ...)."""
        self._open_linker("add_file").add_file(filename, input_type)
        return self

    def add_stdlib(self, libname: str) -> "DynamicModule":
        """Add the CUDA static library lib<libname>.a (e.g. 'cudadevrt', the
        device runtime that kernels launching kernels need), found by
        stdlib_dirs(); a library already added is not added twice."""
        linker = self._open_linker("add_stdlib")
        extra = ([self.cuda_libdir] if self.cuda_libdir else []) + self._library_dirs
        path = find_stdlib(libname, extra)
        if path not in self._stdlibs:
            linker.add_file(path, "library")
            self._stdlibs.append(path)
        return self

    def link(self) -> "DynamicModule":
        """Link the inputs and load the result into the current context."""
        linker = self._open_linker("link")
        image = linker.link()
        if self.keep:
            self._keep("linked.cubin", bytes(image))
        self.module = driver.module_from_buffer(image)
        self.linker = None
        return self

    def _linked(self, what):
        if self.module is None:
            raise driver.LogicError("DynamicModule.%s(): call link() first" % what)
        return self.module

    def get_function(self, name: str) -> Any:
        """The kernel called name (after link())."""
        self._linked("get_function")
        return cast(Any, compiler.SourceModule).get_function(self, name)

    def get_global(self, name: str) -> Any:
        """(DeviceAllocation, nbytes) of a __device__ or __constant__ variable."""
        self._linked("get_global")
        return cast(Any, compiler.SourceModule).get_global(self, name)

    set_constant = compiler.SourceModule.set_constant
    get_constant = compiler.SourceModule.get_constant


class DynamicSourceModule(DynamicModule):
    """One source compiled as relocatable device code (-rdc=true), linked
    with the device runtime libcudadevrt (so its kernels can launch
    kernels) and loaded: pycuda.compiler.DynamicSourceModule."""

    def __init__(
        self,
        source: str,
        nvcc: str = "nvcc",
        options: "str | Iterable[str] | None" = None,
        keep: bool = False,
        no_extern_c: bool = False,
        arch: "str | None" = None,
        code: "str | None" = None,
        cache_dir: Any = None,
        include_dirs: "Iterable[str]" = (),
        cuda_libdir: "str | None" = None,
        backend: "str | None" = None,
    ) -> None:
        super().__init__(
            nvcc=nvcc,
            link_options=None,
            keep=keep,
            no_extern_c=no_extern_c,
            arch=arch,
            code=code,
            cache_dir=cache_dir,
            include_dirs=include_dirs,
            cuda_libdir=cuda_libdir,
            backend=backend,
        )
        if options is None:
            options = DEFAULT_NVCC_FLAGS
        options = options.split() if isinstance(options, str) else list(options)
        if "-rdc=true" not in options:
            options.append("-rdc=true")
        self.add_source(source, nvcc_options=options)
        self.add_stdlib("cudadevrt")
        self.link()
