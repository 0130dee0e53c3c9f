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
"""
import enum
import os
import sys
import tempfile

from pygpu import _driver, _loader, compiler, driver

__all__ = ["DEFAULT_NVCC_FLAGS", "DynamicModule", "DynamicSourceModule", "jit_input_type",
           "translate_nvcc_options", "find_stdlib", "stdlib_dirs"]


def _default_flags():
    text = os.environ.get("PYGPU_DEFAULT_NVCC_FLAGS")
    if text is None:
        text = os.environ.get("PYCUDA_DEFAULT_NVCC_FLAGS", "")
    return [f for f in text.split() if f]


#: Options every DynamicSourceModule (and PyCUDA code that passes them on)
#: starts from: $PYGPU_DEFAULT_NVCC_FLAGS, else $PYCUDA_DEFAULT_NVCC_FLAGS,
#: split on white space; empty by default.  nvcc spellings are translated.
DEFAULT_NVCC_FLAGS = _default_flags()


class jit_input_type(enum.IntEnum):
    """What an input of the driver's linker is (CUjitInputType)."""
    CUBIN = 0
    PTX = 1
    FATBINARY = 2
    OBJECT = 3
    LIBRARY = 4


# nvcc options that take their value as the next word when not written
# with "=" (or glued, for -l/-L)
_HOST_WITH_VALUE = {"-Xcompiler", "--compiler-options", "-Xlinker", "--linker-options",
                    "-ccbin", "--compiler-bindir", "-odir", "--output-directory",
                    "-o", "--output-file", "-Xarchive", "--archive-options"}
_HOST_FLAGS = {"-m64", "--machine=64", "-shared", "--shared", "-c", "--compile", "-ptx",
               "--ptx", "-cubin", "--cubin", "-fatbin", "--fatbin", "-keep", "--keep",
               "-g", "--debug", "-cudart=static", "-cudart=shared", "-cudart=none",
               "--cudart=static", "--cudart=shared", "--cudart=none", "-lib", "--lib"}
_RDC_TRUE = {"-rdc=true", "--relocatable-device-code=true", "-dc", "--device-c"}


def translate_nvcc_options(options):
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
    out = {"nvrtc": [], "libraries": [], "library_dirs": [], "arch": None, "code": None,
           "dropped": []}
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
                    return o[len(f) + 1:], 1
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
        if o in ("-arch", "--gpu-architecture") or o.startswith(("-arch=",
                                                                 "--gpu-architecture=")):
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
            out["dropped"].extend(opts[i:i + used])
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


def stdlib_dirs(extra=()):
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
    seen = set()
    return [d for d in dirs if not (d in seen or seen.add(d))]


def find_stdlib(libname, extra_dirs=()):
    """The path of the static CUDA library libname ('cudadevrt' ->
    .../libcudadevrt.a); FileNotFoundError listing where it looked."""
    if not isinstance(libname, str):
        raise TypeError("add_stdlib() takes a library name (str) such as 'cudadevrt', "
                        "not %s" % type(libname).__name__)
    if not libname or "/" in libname or os.sep in libname or "\0" in libname:
        raise ValueError("add_stdlib() takes a library name such as 'cudadevrt', not %r "
                         "(use add_file() for a path)" % (libname,))
    fname = libname if libname.startswith("lib") and libname.endswith(".a") \
        else "lib%s.a" % libname
    dirs = stdlib_dirs(extra_dirs)
    for d in dirs:
        p = os.path.join(d, fname)
        if os.path.isfile(p):
            return p
    raise FileNotFoundError("the CUDA library %s (for add_stdlib(%r)) was not found; "
                            "looked in: %s (set cuda_libdir=, CUDA_HOME, or install "
                            "NVIDIA's CUDA runtime wheel)" % (fname, libname, ", ".join(dirs)))


# ---- DynamicModule ----

class DynamicModule:
    """Several sources, binaries and libraries linked into one Module, as
    pycuda.compiler.DynamicModule (through NVRTC and the driver's linker).

    add_source() compiles CUDA C to PTX (wrapped in extern "C" { } unless
    no_extern_c) and adds it; add_data()/add_file() add PTX, cubin, fatbin,
    object or library inputs (jit_input_type); add_stdlib('cudadevrt') adds
    a CUDA static library; link() links them and loads the result in the
    current context.  Each add_* and link() returns self.  nvcc is accepted
    for PyCUDA's sake and not used.  link_options: (jit_option, value)
    pairs for the linker; message_handler(success, info_log, error_log) is
    called when the link completes.
    """

    def __init__(self, nvcc="nvcc", link_options=None, keep=False, no_extern_c=False,
                 arch=None, code=None, cache_dir=None, include_dirs=(), message_handler=None,
                 log_verbose=False, cuda_libdir=None):
        options = list(link_options or ())
        if log_verbose:
            options.append((driver.jit_option.LOG_VERBOSE, 1))
        self.linker = _driver.Linker(message_handler, options)
        self.nvcc = nvcc
        self.keep = keep
        self.no_extern_c = no_extern_c
        self.arch = arch
        self.code = code
        self.cache_dir = cache_dir
        self.include_dirs = list(include_dirs or ())
        self.cuda_libdir = cuda_libdir
        self.module = None
        self._lowered = {}
        self._stdlibs = []          # paths of the libraries added
        self._library_dirs = []     # from -L in nvcc_options
        self._keep_dir = None

    def _open_linker(self, what):
        if self.linker is None:
            raise driver.LogicError("DynamicModule.%s(): already linked; make a new "
                                    "DynamicModule" % what)
        return self.linker

    def _keep(self, name, data):
        if self._keep_dir is None:
            self._keep_dir = tempfile.mkdtemp(prefix="pygpu-keep-")
            print("pygpu: keeping the link's sources and inputs in %s" % self._keep_dir,
                  file=sys.stderr)
        with open(os.path.join(self._keep_dir, os.path.basename(name)),
                  "w" if isinstance(data, str) else "wb") as f:
            f.write(data)

    def add_source(self, source, nvcc_options=(), name="kernel.ptx"):
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
            arch = "compute_" + arch[3:]      # the linker takes PTX: a virtual target
        if not self.no_extern_c:
            source = 'extern "C" {\n%s\n}\n' % source
        src_name = name[:-4] + ".cu" if name.endswith(".ptx") else name + ".cu"
        ptx = compiler.compile(source, options=t["nvrtc"], arch=arch, target="ptx",
                               include_dirs=self.include_dirs, cache_dir=self.cache_dir,
                               name=src_name)
        if self.keep:
            self._keep(src_name, source)
            self._keep(name, bytes(ptx))
        self._library_dirs += [d for d in t["library_dirs"] if d not in self._library_dirs]
        linker.add_data(bytes(ptx), jit_input_type.PTX, name)
        for lib in t["libraries"]:
            self.add_stdlib(lib)
        return self

    def add_data(self, data, input_type, name="unknown"):
        """Add bytes of input_type (a jit_input_type) under name."""
        self._open_linker("add_data").add_data(data, input_type, name)
        return self

    def add_file(self, filename, input_type):
        """Add the file filename of input_type (a jit_input_type)."""
        self._open_linker("add_file").add_file(filename, input_type)
        return self

    def add_stdlib(self, libname):
        """Add the CUDA static library lib<libname>.a (e.g. 'cudadevrt', the
        device runtime that kernels launching kernels need), found by
        stdlib_dirs(); a library already added is not added twice."""
        linker = self._open_linker("add_stdlib")
        extra = ([self.cuda_libdir] if self.cuda_libdir else []) + self._library_dirs
        path = find_stdlib(libname, extra)
        if path not in self._stdlibs:
            linker.add_file(path, jit_input_type.LIBRARY)
            self._stdlibs.append(path)
        return self

    def link(self):
        """Link the inputs and load the result into the linker's context."""
        linker = self._open_linker("link")
        image = linker.complete()
        if self.keep:
            self._keep("linked.cubin", image)
        self.module = linker.link_module()
        self.linker = None
        return self

    def _linked(self, what):
        if self.module is None:
            raise driver.LogicError("DynamicModule.%s(): call link() first" % what)
        return self.module

    def get_function(self, name):
        """The kernel called name (after link())."""
        self._linked("get_function")
        return compiler.SourceModule.get_function(self, name)

    def get_global(self, name):
        """(DeviceAllocation, nbytes) of a __device__ or __constant__ variable."""
        self._linked("get_global")
        return compiler.SourceModule.get_global(self, name)

    set_constant = compiler.SourceModule.set_constant
    get_constant = compiler.SourceModule.get_constant


class DynamicSourceModule(DynamicModule):
    """One source compiled as relocatable device code (-rdc=true), linked
    with the device runtime libcudadevrt (so its kernels can launch
    kernels) and loaded: pycuda.compiler.DynamicSourceModule."""

    def __init__(self, source, nvcc="nvcc", options=None, keep=False, no_extern_c=False,
                 arch=None, code=None, cache_dir=None, include_dirs=(), cuda_libdir=None):
        super().__init__(nvcc=nvcc, link_options=None, keep=keep, no_extern_c=no_extern_c,
                         arch=arch, code=code, cache_dir=cache_dir, include_dirs=include_dirs,
                         cuda_libdir=cuda_libdir)
        if options is None:
            options = DEFAULT_NVCC_FLAGS
        options = options.split() if isinstance(options, str) else list(options)
        if "-rdc=true" not in options:
            options.append("-rdc=true")
        self.add_source(source, nvcc_options=options)
        self.add_stdlib("cudadevrt")
        self.link()
