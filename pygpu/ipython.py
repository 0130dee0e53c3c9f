"""pygpu in IPython and Jupyter: ``%load_ext pygpu``.

``%%cuda`` compiles the cell's CUDA C with SourceModule and binds each
``__global__`` function as a name in the notebook::

    %%cuda
    __global__ void saxpy(float a, const float *x, float *y, int n) { ... }

    saxpy(np.float32(2), x_gpu, y_gpu, np.int32(n), block=(256, 1, 1), grid=(g, 1, 1))

Options of the magic (``%%cuda --help``): ``-o/--option`` an NVRTC option
(repeat it), ``--arch``, ``--std``, ``-D NAME[=VALUE]``, ``-I DIR``,
``--no-extern-c`` (needed when the cell includes C++ headers such as CUB's:
then the kernels declared ``extern "C" __global__`` are bound),
``--name-expression EXPR``, ``--module NAME`` (bind the
SourceModule too), ``--no-pch`` (see below).  Without a GPU the cell is still
compiled (give ``--arch``, or sm_90 is used): the names are bound to kernels
that say, when called, that there is no GPU to run them on.

``%cuda_timeit [-n N] [-r R] [--stream EXPR] launch(...)`` runs the
launch N times between two CUDA events, R times, and reports the best and
the median time of one launch (device time, not Python's).

A ``CompileError`` shows the user's source with the failing lines marked,
in the cell's own line numbers; binaries, pools and the kernels bound by
the magic show a summary.

Precompiled headers: unless ``--no-pch``, the magic asks NVRTC (12.8 and
later) to precompile the headers a cell includes (``-pch --pch-dir=<cache>/pch
--pch-messages=false``); an edit-and-rerun of a cell that includes a large
header (CUB's block reductions) then recompiles in about a fifth of the
time.  The directory is a fixed one so that the options, which are part of
the compile cache's key, are the same in every session.
"""

import argparse
import builtins
import inspect
import os
import re
import shlex
import statistics

__all__ = [
    "load_ipython_extension",
    "unload_ipython_extension",
    "Kernel",
    "kernels_in",
    "kernels_of",
    "pch_options",
    "CudaMagics",
]

_GLOBAL_RE = re.compile(
    r"__global__\s+(?:__launch_bounds__\s*\([^)]*\)\s*)?void\s+"
    r"(?:__launch_bounds__\s*\([^)]*\)\s*)?([A-Za-z_]\w*)\s*\(([^)]*)\)"
)


_COMMENT_RE = re.compile(r'//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\\n])*"', re.S)
_DIRECTIVE_RE = re.compile(r"^[ \t]*#[^\n]*(?:\\\n[^\n]*)*", re.M)


def _code_only(source):
    """source with comments and preprocessor lines blanked (string literals
    kept), every character's offset unchanged."""

    def blank(m):
        t = m.group(0)
        if t.startswith('"'):
            return t
        return "".join(c if c == "\n" else " " for c in t)

    return _DIRECTIVE_RE.sub(blank, _COMMENT_RE.sub(blank, source))


def kernels_in(source, extern_c_only=False):
    """[(name, [C parameter declarations])] of the non-template __global__
    functions declared in source, in order (extern_c_only: those declared
    extern "C", the ones with unmangled names under --no-extern-c).  A
    reading of the text, for the kernels' signatures: comments and
    preprocessor lines are skipped; which kernels exist is the compiled
    binary's to say (kernels_of)."""
    source = _code_only(source)
    out = []
    for m in _GLOBAL_RE.finditer(source):
        if extern_c_only and not re.search(r'extern\s+"C"\s*$', source[: m.start()]):
            continue
        if source[max(0, m.start() - 200) : m.start()].rstrip().endswith(">"):
            continue  # template<...> __global__: needs a name expression
        params = [p.strip() for p in m.group(2).split(",") if p.strip() and p.strip() != "void"]
        if m.group(1) not in [n for n, _ in out]:
            out.append((m.group(1), params))
    return out


def _elf_entries(data):
    """The kernel (entry) names of a cubin: ELF symbols of type FUNC marked
    STO_CUDA_ENTRY, in symbol-table order."""
    import struct

    if data[4:5] != b"\x02" or data[5:6] != b"\x01":
        raise ValueError("not a 64-bit little-endian ELF image")
    (shoff,) = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
    secs = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
    names = []
    for _, typ, _, _, off, size, link, _, _, entsize in secs:
        if typ != 2 or not entsize:  # SHT_SYMTAB
            continue
        stroff = secs[link][4]
        for k in range(size // entsize):
            st_name, st_info, st_other = struct.unpack_from("<IBB", data, off + k * entsize)
            if st_info & 0xF == 2 and st_other & 0x10:  # STT_FUNC, STO_CUDA_ENTRY
                end = data.index(b"\0", stroff + st_name)
                names.append(data[stroff + st_name : end].decode("utf-8", "replace"))
    return names


_PTX_ENTRY_RE = re.compile(r"^\s*(?:\.visible\s+|\.weak\s+)*\.entry\s+([\w$.]+)", re.M)


def kernels_of(binary):
    """The kernel names a compiled binary holds (a cubin's entry symbols, a
    PTX module's .entry directives), as the driver will find them: what
    %%cuda binds.  Mangled (C++) names are included; a kernel that was
    commented out or removed by the preprocessor is not."""
    data = bytes(binary)
    if data[:4] == b"\x7fELF":
        return _elf_entries(data)
    return _PTX_ENTRY_RE.findall(data.decode("utf-8", "replace"))


# names a namespace's own machinery uses (Python's and IPython's): a kernel
# bound over one of them breaks the notebook
_RESERVED = frozenset(
    (
        "In",
        "Out",
        "get_ipython",
        "exit",
        "quit",
        "_",
        "__",
        "___",
        "_i",
        "_ii",
        "_iii",
        "_ih",
        "_oh",
        "_dh",
        "_sh",
    )
)
_RESERVED_RE = re.compile(r"__\w*__|_i?\d+")


def _check_bindable(name, what):
    if name in _RESERVED or _RESERVED_RE.fullmatch(name):
        raise ValueError(
            "%%%%cuda: %s %r would replace a name the notebook's namespace itself "
            "uses (dunder names, IPython's In/Out/_/_i/_N history, get_ipython, "
            "exit, quit); rename it" % (what, name)
        )


def _param_name(decl, i):
    m = re.search(r"([A-Za-z_]\w*)\s*(\[[^\]]*\])?\s*$", decl)
    name = m.group(1) if m else "arg%d" % i
    return name if name.isidentifier() and name not in ("const", "int", "float") else "arg%d" % i


_CALL_DOC = """
Call it as  {name}({args}, block=(x, y, z), grid=(x, y, z), shared=0,
            stream=None, time_kernel=False)

  block        threads per block (required); grid: blocks (default (1, 1, 1))
  shared       bytes of dynamic shared memory
  stream       a pygpu Stream (default: the null stream)
  time_kernel  True: wait for the kernel and return its time in seconds
Arguments: NumPy scalars or Python numbers (packed at each parameter's
width, checked against the kernel), device pointers (DeviceAllocation, any
__cuda_array_interface__ or __dlpack__ object), or cuda.In/Out/InOut around
host arrays (copied in and/or out around the launch).
"""


class Kernel:
    """A kernel bound by %%cuda: call it like a pygpu Function (it is one,
    .function, with the C signature as its documentation).

    kernel(*args, block=(x, y, z), grid=(x, y, z), shared=0, stream=None,
    time_kernel=False) launches it; see help(pygpu.driver.Function) and the
    manual's "Launching kernels" chapter.
    """

    def __init__(self, function, name, params, binary=None):
        self.function = function
        self.name = name
        # params None: the declaration was not found in the text (a macro made it)
        self.params = None if params is None else list(params)
        self.binary = binary
        shown = ", ".join(self.params) if self.params is not None else "..."
        sig = "__global__ void %s(%s)" % (name, shown)
        self.__doc__ = (
            sig
            + "\n"
            + _CALL_DOC.format(
                name=name,
                args=", ".join(_param_name(p, i) for i, p in enumerate(self.params))
                if self.params is not None
                else "*args",
            )
        )
        if self.params is None:
            pos = [inspect.Parameter("args", inspect.Parameter.VAR_POSITIONAL)]
        else:
            pos = [
                inspect.Parameter(_param_name(p, i), inspect.Parameter.POSITIONAL_ONLY)
                for i, p in enumerate(self.params)
            ]
        kw = [
            inspect.Parameter("block", inspect.Parameter.KEYWORD_ONLY),
            inspect.Parameter("grid", inspect.Parameter.KEYWORD_ONLY, default=(1, 1, 1)),
            inspect.Parameter("shared", inspect.Parameter.KEYWORD_ONLY, default=0),
            inspect.Parameter("stream", inspect.Parameter.KEYWORD_ONLY, default=None),
            inspect.Parameter("time_kernel", inspect.Parameter.KEYWORD_ONLY, default=False),
        ]
        try:
            self.__signature__ = inspect.Signature(pos + kw)
        except ValueError:  # repeated parameter names in odd C
            pass

    def __call__(self, *args, **kwargs):
        if self.function is None:
            from pygpu import driver

            raise driver.CudaUnavailableError(
                "%s was compiled (%s) but not loaded: there is no usable CUDA driver or GPU "
                "here" % (self.name, self.binary.arch if self.binary is not None else "?")
            )
        return self.function(*args, **kwargs)

    def __repr__(self):
        where = "loaded" if self.function is not None else "compiled only, no GPU"
        return "<pygpu kernel %s(%s), %s>" % (
            self.name,
            ", ".join(self.params) if self.params is not None else "...",
            where,
        )

    def _repr_pretty_(self, p, cycle):
        p.text(repr(self))


def pch_options(cache_dir=None):
    """NVRTC's automatic precompiled headers, kept in <cache>/pch (a fixed
    folder: the options are part of the compile cache's key); [] when the
    NVRTC in use is older than 12.8."""
    from pygpu import compiler

    try:
        if tuple(compiler.nvrtc_version()) < (12, 8):
            return []
    except Exception:
        return []
    d = os.path.join(cache_dir or compiler.default_cache_dir(), "pch")
    try:
        os.makedirs(d, exist_ok=True)
    except OSError:
        return []
    return ["-pch", "--pch-dir=" + d, "--pch-messages=false"]


def _cell_parser():
    p = argparse.ArgumentParser(
        prog="%%cuda", add_help=False, description="Compile the cell's CUDA C and bind its kernels."
    )
    p.add_argument("-o", "--option", action="append", default=[], dest="options")
    p.add_argument("--arch")
    p.add_argument("--std")
    p.add_argument("-D", action="append", default=[], dest="defines")
    p.add_argument("-I", action="append", default=[], dest="include_dirs")
    p.add_argument("--no-extern-c", action="store_true")
    p.add_argument("--name-expression", action="append", default=[], dest="name_expressions")
    p.add_argument("--module")
    p.add_argument("--no-pch", action="store_true")
    p.add_argument("--quiet", "-q", action="store_true")
    p.add_argument("--help", "-h", action="store_true")
    return p


def _parse(parser, line):
    tokens, out = shlex.split(line), []
    while tokens:  # "-o -lineinfo": the value of -o may start with a dash
        t = tokens.pop(0)
        if t in ("-o", "--option") and tokens:
            t = "--option=" + tokens.pop(0)
        out.append(t)
    try:
        return parser.parse_args(out)
    except SystemExit:  # argparse's way to report bad usage
        raise ValueError(
            "%s: bad arguments %r (%s)" % (parser.prog, line, parser.format_usage().strip())
        ) from None


def cuda_cell(line, cell, namespace):
    """What %%cuda does; returns {name: Kernel} (also bound in namespace)."""
    from pygpu import _loader, compiler, driver

    args = _parse(_cell_parser(), line)
    if args.help:
        print(__doc__)
        return {}
    if args.module:
        _check_bindable(args.module, "--module")
    options = list(args.options)
    if not args.no_pch and not any(o.startswith(("-pch", "--pch")) for o in options):
        options += pch_options()
    defines = dict((d.split("=", 1) + [None])[:2] for d in args.defines) or None
    kw = dict(
        options=options,
        no_extern_c=args.no_extern_c,
        arch=args.arch,
        include_dirs=args.include_dirs,
        std=args.std,
        defines=defines,
        name_expressions=args.name_expressions,
    )
    module = None
    try:
        module = compiler.SourceModule(cell, **kw)
        binary = module.binary
    except driver.CudaUnavailableError:
        # no driver or GPU: compile only (the same arguments as SourceModule's,
        # so the cache serves what it just compiled)
        binary = compiler.compile(
            cell,
            options=options,
            arch=args.arch or "sm_90",
            include_dirs=list(args.include_dirs) + _loader.cuda_include_dirs(),
            defines=defines,
            name_expressions=args.name_expressions,
            std=args.std,
            nvcc_compat=True,
            extern_c=not args.no_extern_c,
        )
    # the kernels are the binary's (what the driver loads), in the cell's
    # order where the text declares them; mangled C++ names (templates,
    # kernels outside extern "C" under --no-extern-c) are not bound
    declared = kernels_in(cell)
    order = {n: k for k, (n, _) in enumerate(declared)}
    params = dict(declared)
    names = [
        n for n in dict.fromkeys(kernels_of(binary)) if n.isidentifier() and not n.startswith("_Z")
    ]
    names.sort(key=lambda n: order.get(n, len(order)))
    for name in names:
        _check_bindable(name, "a kernel named")
    bound = {}
    for name in names:
        f = module.get_function(name) if module is not None else None
        bound[name] = Kernel(f, name, params.get(name), binary)
    namespace.update(bound)
    if args.module:
        namespace[args.module] = module
    if not args.quiet:
        print(
            "%s: %s"
            % (
                "compiled and loaded"
                if module is not None
                else "compiled for %s (no GPU: not loaded)" % binary.arch,
                ", ".join(bound) or "(no extern \"C\" kernels to bind)",
            )
        )
    return bound


def _timeit_parser():
    p = argparse.ArgumentParser(prog="%cuda_timeit", add_help=False)
    p.add_argument("-n", type=int, default=100)
    p.add_argument("-r", type=int, default=7)
    p.add_argument("--stream")
    p.add_argument("-q", "--quiet", action="store_true")
    return p


class TimeResult:
    """Times (seconds) of one launch: .best, .median, .all (one per run)."""

    def __init__(self, statement, times, n):
        self.statement, self.all, self.n = statement, list(times), n
        self.best = min(self.all)
        self.median = statistics.median(self.all)

    def __repr__(self):
        return "<%s: best %s, median %s per launch (%d runs of %d, CUDA events)>" % (
            self.statement,
            _fmt(self.best),
            _fmt(self.median),
            len(self.all),
            self.n,
        )

    def _repr_pretty_(self, p, cycle):
        p.text(repr(self))


def _fmt(s):
    for unit, scale in (("s", 1), ("ms", 1e3), ("us", 1e6)):
        if s * scale >= 1 or unit == "us":
            return "%.3g %s" % (s * scale, unit)


def cuda_timeit(line, namespace):
    """What %cuda_timeit does; returns a TimeResult."""
    from pygpu import driver

    # the statement is Python: split the magic's own flags off by hand
    tokens = line.strip().split(None)
    flags = []
    while tokens and tokens[0].startswith("-") and not tokens[0][1:2].isdigit():
        flag = tokens.pop(0)
        flags.append(flag)
        if flag in ("-n", "-r", "--stream") and tokens:
            flags.append(tokens.pop(0))
    args = _parse(_timeit_parser(), " ".join(flags))
    statement = line.strip()[len(" ".join(flags)) :].strip() if flags else line.strip()
    if not statement:
        raise ValueError(
            "%cuda_timeit: give a launch to time, e.g. "
            "%cuda_timeit f(x, block=(256, 1, 1), grid=(64, 1, 1))"
        )
    if args.n < 1 or args.r < 1:
        raise ValueError("%%cuda_timeit: -n and -r must be >= 1, not %d and %d" % (args.n, args.r))
    code = builtins.compile(statement, "<cuda_timeit>", "exec")
    stream = eval(args.stream, namespace) if args.stream else None
    start, end = driver.Event(), driver.Event()
    exec(code, namespace)  # warm-up: module load, first-launch costs
    driver.Context.synchronize()
    times = []
    for _ in range(args.r):
        start.record(stream)
        for _ in range(args.n):
            exec(code, namespace)
        end.record(stream)
        end.synchronize()
        times.append(start.time_till(end) / 1e3 / args.n)
    result = TimeResult(statement, times, args.n)
    if not args.quiet:
        print(repr(result)[1:-1])
    return result


def _show_compile_error(shell, etype, value, tb, tb_offset=None):
    """CompileError in IPython: the user's source with the failing lines
    marked (HTML in Jupyter), no Python traceback into pygpu."""
    from IPython.display import display

    display(_ErrorView(value))
    return None


class _ErrorView:
    def __init__(self, err):
        self.err = err

    def __repr__(self):
        from pygpu import _display

        return "CompileError: " + _display.compile_error_text(self.err)

    def _repr_pretty_(self, p, cycle):
        p.text(repr(self))

    def _repr_html_(self):
        from pygpu import _display

        return _display.compile_error_html(self.err)


try:
    from IPython.core.magic import Magics, cell_magic, line_magic, magics_class
except ImportError:  # the module imports without IPython; loading it needs it
    CudaMagics = None
else:

    @magics_class
    class CudaMagics(Magics):  # type: ignore[no-redef]  # None without IPython
        """%%cuda and %cuda_timeit (see pygpu.ipython)."""

        @cell_magic
        def cuda(self, line, cell):
            """Compile the cell's CUDA C (SourceModule) and bind its kernels as
            names; %%cuda --help lists the options."""
            cuda_cell(line, cell, self.shell.user_ns)

        @line_magic
        def cuda_timeit(self, line):
            """Time a launch with CUDA events: %cuda_timeit [-n N] [-r R]
            [--stream EXPR] f(args, block=..., grid=...)."""
            return cuda_timeit(line, self.shell.user_ns)


def load_ipython_extension(ip):
    """%load_ext pygpu: the magics, CompileError display, reprs."""
    if CudaMagics is None:
        raise ImportError("pygpu's IPython extension needs IPython")
    from pygpu import compiler

    ip.register_magics(CudaMagics)
    ip.set_custom_exc((compiler.CompileError,), _show_compile_error)


def unload_ipython_extension(ip):
    ip.set_custom_exc((), None)
