"""SourceModule and CudaModule (pycuda.compiler's), with SourceModule's memo
of loaded modules.

Part of pygpu.compiler, which re-exports every name defined here; the
compiler's own names are reached through it at call time (`_c.name`), so a
test's monkeypatch of pygpu.compiler reaches SourceModule too."""

import os
import tempfile
from typing import Any as _Any

from pygpu import _nvcc, driver, profiler, store
from pygpu import compiler as _c
from pygpu._errors import CompileError

# ---- SourceModule ----

# SourceModule's memo: (exact arguments, current Context) -> _Loaded.  Only
# primary contexts are remembered (pygpu keeps those for the process anyway,
# so the memo extends no context's life); a module whose context was
# detached is never served.  Never filled with the cache off; emptied by
# clear_cache(); bounded.
_modules: "dict[_Any, _Any]" = {}
_images: "dict[_Any, _Any]" = {}  # (primary Context, image digest) -> Module
_get_current = driver.Context.get_current


_environ, _DISABLE, _OFF = store.environ_data, store.DISABLE_KEY, store.OFF
_COMPILER_KEY = store.env_key(_nvcc.ENV)  # PYGPU_COMPILER, read on SourceModule's warm path


def _memo_key(args):
    """SourceModule's arguments made hashable (lists as tuples, a dict of
    defines as its items), or None."""
    out = []
    for a in args:
        if isinstance(a, list):
            a = ("list",) + tuple(a)
        elif isinstance(a, dict):
            a = ("dict",) + tuple(a.items())
        out.append(a)
    out = tuple(out)
    try:
        hash(out)
    except TypeError:
        return None
    return out


class _Loaded:
    __slots__ = ("binary", "source", "module", "lowered", "ctx", "deps", "env")

    def __init__(self, sm, deps, env):
        # a SourceModule's own four fields, set again on a hit (not its whole
        # __dict__: a subclass's attributes are the new instance's)
        self.binary, self.source, self.module, self.lowered = (
            sm.binary,
            sm.source,
            sm.module,
            sm._lowered,
        )
        self.ctx = sm.module.context
        self.deps = deps  # Deps or None (no file can change the result)
        self.env = env  # CUDA_HOME/CUDA_PATH (they pick the include dirs), with deps


def _compile_kept(args, dirs=None):
    """_compile(*args) for keep=True: the text NVRTC compiles (kernel.cu),
    its options (kernel.options, one a line), the binary (kernel.cubin or
    kernel.ptx) and, for a cubin, the PTX of the same source (kernel.ptx) are
    kept in a new directory, named on stdout as PyCUDA names its own
    ("*** compiler output in DIR"); a rejected source leaves NVRTC's log
    there (kernel.log)."""
    d = tempfile.mkdtemp(prefix="pygpu-keep-")
    print("*** compiler output in %s" % d)
    if dirs is not None:
        dirs.append(d)
    info = {}
    try:
        binary, deps = _c._compile(*args, info=info)
    except CompileError as e:
        _keep_write(d, info, None)
        with open(os.path.join(d, "kernel.log"), "w", encoding="utf-8") as f:
            f.write(e.log or "")
        raise
    _keep_write(d, info, binary)
    if binary.target == "cubin" and binary.arch.startswith("sm_"):
        ptx_args = list(args)
        ptx_args[2], ptx_args[3] = "compute_" + binary.arch[3:], "ptx"
        try:
            ptx = _c._compile(*ptx_args)[0]
        except CompileError:  # pragma: no cover (the cubin compiled)
            ptx = None
        if ptx is not None:
            with open(os.path.join(d, "kernel.ptx"), "wb") as f:
                f.write(ptx)
    return binary, deps


def _keep_write(d, info, binary):
    if "text" in info:
        with open(os.path.join(d, "kernel.cu"), "w", encoding="utf-8") as f:
            f.write(info["text"])
        with open(os.path.join(d, "kernel.options"), "w", encoding="utf-8") as f:
            f.write("".join(o + "\n" for o in info["options"]))
    if binary is not None:
        with open(os.path.join(d, "kernel." + binary.target), "wb") as f:
            f.write(binary)


_NO_TEXREFS = (
    "%s(%r): texture and surface references were removed in CUDA 12, so no "
    "module has one (PyCUDA's call fails there too, with cuModule%s's "
    "'named symbol not found'); pass a TextureObject or SurfaceObject to the "
    "kernel as a cudaTextureObject_t / cudaSurfaceObject_t argument instead "
    "(the manual's 'textures' chapter)"
)


class CudaModule:
    """The base of SourceModule and DynamicModule, as pycuda.compiler.CudaModule
    (isinstance checks in PyCUDA code, and PyCUDA's own subclasses of it:
    a subclass sets self.module to a loaded driver.Module and gets
    get_function, get_global, get_texref and get_surfref)."""

    module: "_Any" = None

    def _bind_module(self):
        """PyCUDA's hook after self.module is set; here the methods read
        self.module on each call, so nothing needs binding."""

    def get_function(self, name: str) -> "driver.Function":
        """The kernel called name."""
        return self.module.get_function(name)

    def get_global(self, name):
        """(DeviceAllocation, nbytes) of a __device__ or __constant__ variable."""
        return self.module.get_global(name)

    def get_texref(self, name):
        """PyCUDA's texture references: gone since CUDA 12 (LogicError)."""
        raise driver.LogicError(_NO_TEXREFS % ("get_texref", name, "GetTexRef"))

    def get_surfref(self, name):
        """PyCUDA's surface references: gone since CUDA 12 (LogicError)."""
        raise driver.LogicError(_NO_TEXREFS % ("get_surfref", name, "GetSurfRef"))


class SourceModule(CudaModule):
    """Compile CUDA C source and load it into the current context, as
    pycuda.compiler.SourceModule does (through NVRTC, with the cache).

    The source (a str, or any object whose str() is the source, such as
    cgen's) is wrapped in extern "C" { } unless no_extern_c=True; the CUDA
    include directory is added when found.  nvcc_compat (default True) gives
    the kernel what nvcc would: the names its host headers declare (uint,
    INT_MAX, M_PI, ...) and struct attributes read where GCC reads them.
    keep=True keeps the source, the options and the binaries in a new
    directory and prints ``*** compiler output in DIR``, as PyCUDA does.
    compiler="nvcc" (or $PYGPU_COMPILER=nvcc) compiles with the toolkit's
    nvcc in a subprocess instead of NVRTC, as PyCUDA does, for code that
    needs the host toolchain: nvcc= (PyCUDA's path to nvcc) is then the one
    run (else nvcc on PATH, $CUDA_HOME/bin, /usr/local/cuda/bin); the same
    cache (keyed by the back end) and CompileError.  With NVRTC, nvcc= is
    accepted and not used.
    get_function() also takes a template expression listed in
    name_expressions ("scale<float>").
    """

    def __init__(
        self,
        source: object,
        nvcc: "str | None" = "nvcc",
        options: "object" = None,
        keep: bool = False,
        no_extern_c: bool = False,
        arch: "object" = None,
        code: "object" = None,
        cache_dir: "object" = None,
        include_dirs: "object" = (),
        *,
        name_expressions: "object" = (),
        std: "str | None" = None,
        fast_math: bool = False,
        defines: "object" = None,
        target: "str | None" = None,
        nvcc_compat: bool = True,
        compiler: "str | None" = None,
    ) -> None:
        # PyCUDA's positional order (source, nvcc, options, keep, no_extern_c,
        # arch, code, cache_dir, include_dirs); nvcc: PyCUDA's path to nvcc,
        # accepted and unused (NVRTC compiles)
        if include_dirs is None:
            include_dirs = ()
        if type(source) is not str:
            # a code generator's object: its text now (it may change later)
            source = _c._source_text(source)
        backend = (
            "nvrtc"
            if compiler is None and _environ.get(_COMPILER_KEY) in (None, b"", "")
            else _c._backend(compiler, name_expressions)
        )
        # the warm path: the same arguments again, in the same live context
        try:
            ctx = _get_current()
        except driver.CudaUnavailableError:
            ctx = None
        try:
            memo_key = (
                source,
                options,
                no_extern_c,
                arch,
                code,
                include_dirs,
                cache_dir,
                keep,
                name_expressions,
                std,
                fast_math,
                defines,
                target,
                nvcc_compat,
                backend,
                nvcc if backend == "nvcc" else None,
                ctx,
            )
            hit = _modules.get(memo_key)
        except TypeError:  # a list or dict argument
            memo_key = _memo_key(
                (
                    source,
                    options,
                    no_extern_c,
                    arch,
                    code,
                    include_dirs,
                    cache_dir,
                    keep,
                    name_expressions,
                    std,
                    fast_math,
                    defines,
                    target,
                    nvcc_compat,
                    backend,
                    nvcc if backend == "nvcc" else None,
                    ctx,
                )
            )
            hit = None if memo_key is None else _modules.get(memo_key)
        if (
            hit is not None
            and not hit.ctx.detached
            and _environ.get(_DISABLE) in _OFF
            and (
                hit.deps is None
                or (
                    hit.deps.valid()
                    and hit.env == (store.env_raw("CUDA_HOME"), store.env_raw("CUDA_PATH"))
                )
            )
        ):
            # four plain stores: cheaper than filling a dict (this path is timed)
            self.binary = hit.binary
            self.source = hit.source
            self.module = hit.module
            self._lowered = hit.lowered
            return
        self._build(
            source,
            options,
            no_extern_c,
            arch,
            code,
            include_dirs,
            cache_dir,
            keep,
            name_expressions,
            std,
            fast_math,
            defines,
            target,
            nvcc_compat,
            memo_key,
            backend,
            nvcc,
        )

    def _build(
        self,
        source,
        options,
        no_extern_c,
        arch,
        code,
        include_dirs,
        cache_dir,
        keep,
        name_expressions,
        std,
        fast_math,
        defines,
        target,
        nvcc_compat,
        memo_key,
        backend="nvrtc",
        nvcc=None,
    ):
        source = _c._source_text(source)
        dirs = _c._str_list(include_dirs, "include_dirs", None)
        if backend == "nvrtc":  # nvcc knows its own toolkit's headers
            dirs += list(_c._trusted_dirs(store.resolve_dir(cache_dir)))
        if isinstance(options, str):
            options = options.split()
        options = list(options or ())
        if arch is None and code is not None:
            arch = code
        args = (
            source,
            options,
            arch,
            target,
            dirs,
            defines,
            name_expressions,
            std,
            fast_math,
            cache_dir,
            "kernel.cu",
            False,
            nvcc_compat,
            not no_extern_c,
            backend,
            nvcc,
        )
        if keep:
            binary, deps = _compile_kept(args)
        else:
            binary, deps = _c._compile(*args)
        self.binary = binary
        self.source = source if no_extern_c else _c._WRAP_OPEN + source + _c._WRAP_CLOSE
        ctx = _get_current()
        if ctx is None:
            driver.init()
        # one loaded module per image and primary context, whichever
        # arguments produced it (same memo rules as below)
        image_key = (ctx, binary.digest()) if ctx is not None and ctx.is_primary else None
        mod = _images.get(image_key) if image_key is not None and deps is not None else None
        if mod is None or mod.context.detached:
            if profiler._annotate:
                with profiler.time_range("load module", "orange"):
                    mod = driver.module_from_buffer(binary)
            else:
                mod = driver.module_from_buffer(binary)
            if image_key is not None and deps is not None and mod.context == ctx:
                with _c._lock:
                    if len(_images) >= _c._MEMO_MAX:
                        _images.clear()
                    _images[image_key] = mod
        self.module = mod
        self._lowered = binary.lowered_names
        ctx = self.module.context
        if (
            memo_key is not None
            and not keep
            and ctx.is_primary
            and memo_key[-1] == ctx
            and (deps is not None and not deps.racy)
        ):
            with _c._lock:
                if len(_modules) >= _c._MEMO_MAX:
                    _modules.clear()
                _modules[memo_key] = _Loaded(
                    self,
                    deps if deps.records else None,
                    (store.env_raw("CUDA_HOME"), store.env_raw("CUDA_PATH")),
                )

    def get_function(self, name: str) -> "driver.Function":
        """The kernel called name, or registered as name in name_expressions:
        this SourceModule's own Function (the same one on each call), so
        that its prepare() is never another SourceModule's, even where both
        share one loaded image (identical binaries)."""
        fns = self.__dict__.setdefault("_functions", {})
        f = fns.get(name)
        if f is None:
            f = fns[name] = self.module._new_function(self._lowered.get(name, name))
        return f

    def get_global(self, name):
        """(DeviceAllocation, nbytes) of a __device__ or __constant__ variable."""
        return self.module.get_global(self._lowered.get(name, name))

    def set_constant(self, name, ary, stream=None):
        """Copy a NumPy array into a __constant__ (or __device__) variable."""
        ptr, nbytes = self.get_global(name)
        if ary.nbytes != nbytes:
            raise ValueError(
                "%s is %d bytes but the array is %d bytes" % (name, nbytes, ary.nbytes)
            )
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
