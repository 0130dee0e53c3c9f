"""python -m pygpu: what pygpu found on this machine, and what to do about
anything missing.

Prints the versions, the CUDA driver (found or not, and where), each
device's name, compute capability and memory, the NVRTC library and its
version, the compile cache's directory and size, the CUDA header
directories and whether each header the manual promises compiles (NVRTC,
for the lowest architecture it supports).  Works, and exits 0, on a machine
without a driver or GPU: what is missing is reported with the command that
fixes it.  Imported from a source tree without a built extension it says
so, and what to do, and exits 1.

    python -m pygpu           the report, as text
    python -m pygpu --json    the same facts as one JSON object: a key for
                              each section, and "todo" (a list of strings)
"""

import json
import os
import platform
import sys

__all__ = [
    "report",
    "collect",
    "main",
    "section",
    "SECTIONS",
    "HEADERS",
    "NVRTC_REQUIREMENTS",
    "NVRTC_ADVICE",
    "probe_header",
    "nvidia_requirements",
]

# The headers docs/install.md promises with the [nvrtc] extra: each is
# compiled (NVRTC, no GPU needed), not looked for.  CUB is included by its
# device headers: CCCL refuses <cub/cub.cuh> as a whole under NVRTC.
HEADERS = ("cuda_fp16.h", "cooperative_groups.h", "cuda/std/complex", "cub/block/block_reduce.cuh")


def _version(dist):
    try:
        from importlib.metadata import version

        return version(dist)
    except Exception:
        return None


# What pyproject.toml's [nvrtc] extra installs (tests/project/test_packaging.py
# checks they agree): the command python -m pygpu gives works wherever pygpu
# itself came from (a clone, a wheel, an sdist; no index has pygpu).
NVRTC_REQUIREMENTS = ("cuda-toolkit[nvrtc,cudart,cccl]>=13.0,<14",)


def nvidia_requirements():
    """NVRTC_REQUIREMENTS as a pip command line's quoted arguments."""
    return " ".join("'%s'" % r for r in NVRTC_REQUIREMENTS)


# What to do without NVRTC or without the CUDA headers: the report's to-do
# lines, and the end of the CudaUnavailableError that a failed NVRTC search
# raises (src/core/loader.c; tests/project/test_report.py checks that the
# two say the same).
_WHEELS_ADVICE = (
    "pip install %s (NVIDIA's NVRTC, CUDA header and CCCL wheels: pygpu's [nvrtc] "
    "extra), or install the CUDA toolkit (and set CUDA_HOME to it)" % nvidia_requirements()
)
NVRTC_ADVICE = _WHEELS_ADVICE + ", or set PYGPU_NVRTC to libnvrtc.so's path"


def probe_header(header, arch):
    """None if a kernel that includes <header> (a str, or a tuple of them)
    compiles (NVRTC, for arch, through the compile cache), else the
    compiler's first error line."""
    from pygpu import compiler

    headers = (header,) if isinstance(header, str) else tuple(header)
    source = "".join("#include <%s>\n" % h for h in headers)
    source += "extern \"C\" __global__ void pygpu_probe() {}\n"
    try:
        compiler.compile(source, arch=arch, compiler="nvrtc")  # NVRTC's headers, whatever
    except compiler.CompileError as e:  # PYGPU_COMPILER says
        lines = [ln.strip() for ln in str(e).splitlines() if "error" in ln]
        return (lines or [_first_line(e)])[0]
    except Exception as e:
        return _first_line(e)
    return None


def _loaded_file(prefixes):
    """The path of the first mapped library whose name starts with one of
    prefixes (Linux: /proc/self/maps), or None."""
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                path = line.rstrip("\n").split(" ")[-1]
                if os.path.basename(path).startswith(prefixes):
                    return path
    except OSError:
        pass
    return None


def _size(n):
    for unit in ("bytes", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return ("%d %s" % (n, unit)) if unit == "bytes" else ("%.1f %s" % (n, unit))
        n /= 1024.0
    return str(n)


def _first_line(e):
    text = str(e).strip()
    return "%s: %s" % (type(e).__name__, text.splitlines()[0] if text else "")


def _error(e):
    """An exception as the report keeps it: its type and its whole message
    (a failed search lists every path it tried)."""
    return "%s: %s" % (type(e).__name__, str(e).strip())


def _cuda_version(v):
    return "%d.%d" % (v // 1000, (v % 1000) // 10)


# ---- the sections

#: name -> (collect, render), in the report's order.  collect(report) returns
#: the section's facts: a dict of JSON values (str, int, float, bool, None,
#: lists and dicts of them); it may read the sections collected before it
#: (report.sections) and add to report.todo.  render(facts) returns the
#: section's lines of text.  A section whose collect raises is reported as
#: {"error": "..."} and the others go on.
SECTIONS: "dict[str, tuple]" = {}


def section(name, render, after=None):
    """Register collect (the decorated function) as the report section
    `name`, shown as text by render; sections appear in the order they are
    registered, or right after the section named `after` (e.g. a "system"
    section after "driver")."""

    def register(collect):
        items = [(k, v) for k, v in SECTIONS.items() if k != name]
        at = len(items)
        if after is not None:
            at = [k for k, _ in items].index(after) + 1
        items.insert(at, (name, (collect, render)))
        SECTIONS.clear()
        SECTIONS.update(items)
        return collect

    return register


class _Report:
    def __init__(self):
        self.sections = {}
        self.todo = []

    def extension(self):
        """pygpu._driver, or None where it cannot be imported (the pygpu
        section says why)."""
        if self.sections.get("pygpu", {}).get("extension_error") is not None:
            return None
        return _import_driver()


_NO_EXTENSION = "pygpu's C extension is not importable"


def _import_driver():
    from pygpu import _driver

    return _driver


def _indent(text, prefix):
    """text's lines after the first, indented by prefix (a multi-line error
    kept whole in one entry of the report)."""
    lines = text.splitlines() or [""]
    return "\n".join([lines[0]] + [prefix + ln for ln in lines[1:]])


def _render_pygpu(f):
    lines = [
        "pygpu %s  (%s)" % (f["version"], f["path"]),
        "Python %s, %s %s" % (f["python"], f["system"], f["machine"]),
        "NumPy %s" % (f["numpy"] or "not installed"),
        "cuda-pathfinder %s"
        % (
            (f["cuda_pathfinder"] or "installed")
            if f["cuda_pathfinder_importable"]
            else "not installed (the plain search is used)"
        ),
    ]
    if f["extension_error"] is not None:
        lines.append("C extension: not importable (%s)" % _indent(f["extension_error"], "    "))
    else:
        lines.append("built against CUDA %s headers" % f["cuda_headers"])
    return lines


@section("pygpu", _render_pygpu)
def _collect_pygpu(report):
    import pygpu

    facts = {
        "version": pygpu.__version__,
        "path": os.path.dirname(os.path.abspath(pygpu.__file__)),
        "python": platform.python_version(),
        "executable": sys.executable,
        "system": platform.system(),
        "machine": platform.machine(),
        "numpy": _version("numpy"),
        "cuda_pathfinder": _version("cuda-pathfinder"),
        "cuda_pathfinder_importable": False,
        "extension": None,
        "extension_error": None,
        "cuda_headers": None,
    }
    from pygpu import _loader  # imports no extension

    facts["cuda_pathfinder_importable"] = _loader.pathfinder() is not None
    try:
        _driver = _import_driver()
    except ImportError as e:
        # a source tree without a build (pygpu/_extension.py says which and what to do)
        facts["extension_error"] = str(e)
        report.todo.append(str(e))
        return facts
    facts["extension"] = _driver.__file__
    facts["cuda_headers"] = _cuda_version(_driver.CUDA_HEADER_VERSION)
    return facts


def _render_driver(f):
    if f.get("skipped"):
        return ["driver: not checked (%s)" % f["skipped"]]
    if not f["found"]:
        return ["driver: not found (%s)" % _indent(f["error"], "    ")]
    lines = ["driver: CUDA %s (%d), %s" % (_cuda_version(f["version"]), f["version"], f["library"])]
    if f["devices_error"] is not None:
        lines.append("devices: could not be counted (%s)" % f["devices_error"])
    if not f["devices"]:
        lines.append("devices: none visible")
    for d in f["devices"]:
        if "error" in d:
            lines.append("device %d: %s" % (d["index"], d["error"]))
            continue
        lines.append(
            "device %d: %s, compute capability %s (%s), %s"
            % (d["index"], d["name"], d["compute_capability"], d["arch"], _size(d["total_memory"]))
        )
        g = d["green_contexts"]
        if "error" in g:
            lines.append("  green contexts: not available (%s)" % g["error"])
        else:
            lines.append(
                "  green contexts: %d SMs, split_sms() partitions of %d+ in multiples of %d"
                % (g["sms"], g["min_sms"], g["sm_alignment"])
            )
    c = f["checkpoint"] or {"available": False, "error": "not checked"}
    lines.append(
        "checkpoint/restore (pygpu.checkpoint): %s"
        % ("available" if c["available"] else "not available (%s)" % c["error"])
    )
    return lines


@section("driver", _render_driver)
def _collect_driver(report):
    facts = {
        "found": False,
        "version": None,
        "library": None,
        "error": None,
        "devices": [],
        "devices_error": None,
        "checkpoint": None,
    }
    _driver = report.extension()
    if not _driver:
        facts["skipped"] = _NO_EXTENSION
        return facts
    try:
        _driver.init()
        dv = _driver.get_driver_version()
    except Exception as e:
        facts["error"] = _error(e)
        report.todo.append(
            "no CUDA driver: install the NVIDIA driver (it provides libcuda.so.1) to "
            "run kernels; compiling needs none (pygpu.compiler.compile(..., arch=...))"
        )
        return facts
    facts.update(
        found=True,
        version=dv,
        library=os.environ.get("PYGPU_LIBCUDA") or _loaded_file(("libcuda.so",)) or "libcuda.so.1",
    )
    try:
        n = _driver.Device.count()
    except Exception as e:
        n = 0
        facts["devices_error"] = _first_line(e)
    if n == 0:
        report.todo.append("no CUDA device is visible (check CUDA_VISIBLE_DEVICES and nvidia-smi)")
    for i in range(n):
        try:
            d = _driver.Device(i)
            major, minor = d.compute_capability()
            dev = {
                "index": i,
                "name": d.name(),
                "compute_capability": "%d.%d" % (major, minor),
                "arch": "sm_%d%d" % (major, minor),
                "total_memory": d.total_memory(),
            }
        except Exception as e:
            facts["devices"].append({"index": i, "error": _first_line(e)})
            continue
        try:
            sms, minimum, align = d.sm_partitioning()
            dev["green_contexts"] = {"sms": sms, "min_sms": minimum, "sm_alignment": align}
        except Exception as e:
            dev["green_contexts"] = {"error": _first_line(e)}
        facts["devices"].append(dev)
    try:
        _driver._checkpoint_state(os.getpid())
        facts["checkpoint"] = {"available": True, "error": None}
    except Exception as e:  # the driver's error answers too: the entry points are there
        missing = isinstance(e, _driver.LogicError) and not getattr(e, "routine", None)
        facts["checkpoint"] = {
            "available": not missing,
            "error": _first_line(e) if missing else None,
        }
    return facts


def _render_nvrtc(f):
    if f.get("skipped"):
        return ["NVRTC: not checked (%s)" % f["skipped"]]
    if not f["found"]:
        return ["NVRTC: not found (%s)" % _indent(f["error"], "    ")]
    return [
        "NVRTC: %s, %s" % (f["version"], f["library"]),
        "  compiles for sm_%d ... sm_%d" % (min(f["archs"]), max(f["archs"])),
    ]


@section("nvrtc", _render_nvrtc)
def _collect_nvrtc(report):
    facts = {"found": False, "version": None, "library": None, "archs": [], "error": None}
    if not report.extension():
        facts["skipped"] = _NO_EXTENSION
        return facts
    from pygpu import _loader

    try:
        from pygpu import compiler

        path = compiler._ensure_nvrtc()
        major, minor = compiler.nvrtc_version()
        facts.update(
            found=True,
            version="%d.%d" % (major, minor),
            library=_loaded_file(("libnvrtc.so", "libnvrtc.alt.so")) or path,
            archs=sorted(compiler.supported_archs()),
        )
    except Exception as e:
        facts["error"] = _error(e)
        report.todo.append("no NVRTC, so no compiling: " + NVRTC_ADVICE)
        return facts
    drv = report.sections.get("driver", {})
    if drv.get("found"):
        dv = drv["version"]
        if dv // 1000 < major:
            report.todo.append(
                "NVRTC %d is newer than the driver's CUDA %d: its output will not load; "
                "update the driver or pip install %s"
                % (major, dv // 1000, _loader.nvrtc_pip_requirement(dv // 1000))
            )
    return facts


def _render_system(f):
    if f.get("skipped"):
        return ["system (pygpu.system): not checked (%s)" % f["skipped"]]
    return list(f["lines"])


@section("system", _render_system, after="driver")
def _collect_system(report):
    # NVML through pygpu.system (the [nvml] extra); its lines say what is missing
    if not report.extension():
        return {"skipped": _NO_EXTENSION, "lines": []}
    from pygpu import system

    return {"lines": system.report_lines()}


def _render_nvcc(f):
    if f["path"] is None:
        lines = [
            "nvcc: not found (needed only for compiler='nvcc'; tried %s)" % ", ".join(f["tried"])
        ]
    elif f["error"] is not None:
        lines = ["nvcc: %s does not run (%s)" % (f["path"], f["error"])]
    else:
        lines = ["nvcc: %s, %s" % (f["version"], f["path"])]
    if f["backend"] is not None:
        lines.append(
            "  kernels compile with %s%s"
            % (
                "nvcc" if f["backend"] == "nvcc" else "NVRTC",
                " (%s=nvcc)" % f["env"]
                if f["backend"] == "nvcc"
                else " (compiler='nvcc' or %s=nvcc for nvcc)" % f["env"],
            )
        )
    return lines


@section("nvcc", _render_nvcc, after="nvrtc")
def _collect_nvcc(report):
    # the opt-in back end (compiler="nvcc", PYGPU_COMPILER=nvcc)
    from pygpu import _nvcc

    facts = {"path": None, "version": None, "backend": None, "env": _nvcc.ENV, "error": None}
    try:
        facts["backend"] = _nvcc.backend()
    except (TypeError, ValueError) as e:
        report.todo.append(str(e))
    facts["path"] = path = _nvcc.find()
    facts["tried"] = list(_nvcc.tried())
    if path is not None:
        try:
            facts["version"] = _nvcc.version(path)[2]
        except Exception as e:
            facts["error"] = _first_line(e)
    if facts["backend"] == "nvcc" and path is None:
        report.todo.append(
            "%s=nvcc but no nvcc was found: install the CUDA toolkit (or put its bin/ on "
            "PATH, or set CUDA_HOME), or unset %s to compile with NVRTC" % (_nvcc.ENV, _nvcc.ENV)
        )
    return facts


def _render_cache(f):
    if f.get("skipped"):
        return ["compile cache: not checked (%s)" % f["skipped"]]
    if f["error"] is not None:
        return ["compile cache: %s" % f["error"]]
    if f["disabled"]:
        return ["compile cache: disabled (PYGPU_DISABLE_CACHE)"]
    return [
        "compile cache: %s, %d entries, %s (limit %s)"
        % (f["dir"], f["entries"], _size(f["bytes"]), _size(f["limit"]))
    ]


@section("cache", _render_cache)
def _collect_cache(report):
    # before the header probes, which may add entries
    facts = {
        "dir": None,
        "entries": None,
        "bytes": None,
        "limit": None,
        "disabled": False,
        "error": None,
    }
    if not report.extension():
        facts["skipped"] = _NO_EXTENSION
        return facts
    try:
        from pygpu import compiler

        info = compiler.cache_info()
        facts.update(
            dir=info["dir"],
            entries=info["disk_entries"],
            bytes=info["disk_bytes"],
            limit=info["size_cap"],
            disabled=os.environ.get("PYGPU_DISABLE_CACHE", "") not in ("", "0"),
        )
    except Exception as e:
        facts["error"] = _first_line(e)
    return facts


def _render_headers(f):
    if f.get("skipped"):
        return ["CUDA headers: not checked (%s)" % f["skipped"]]
    dirs = f["include_dirs"]
    lines = ["CUDA headers: %s" % dirs[0]] if dirs else ["CUDA headers: not found"]
    lines += ["              %s" % d for d in dirs[1:]]
    if f["arch"] is None:
        lines.append("  (no NVRTC: the headers were not compiled)")
    for h, why in f["compiles"].items():
        lines.append("  <%s> %s" % (h, "compiles" if why is None else "does not compile: " + why))
    return lines


@section("headers", _render_headers)
def _collect_headers(report):
    facts = {"include_dirs": [], "arch": None, "compiles": {}}
    if not report.extension():
        facts["skipped"] = _NO_EXTENSION
        return facts
    from pygpu import _loader

    archs = report.sections.get("nvrtc", {}).get("archs") or []
    facts["include_dirs"] = list(_loader.cuda_include_dirs())
    if not archs:
        return facts
    arch = facts["arch"] = "sm_%d" % min(archs)
    # one compile for all of them; one each only when that fails
    together = probe_header(HEADERS, arch) is None
    for h in HEADERS:
        facts["compiles"][h] = None if together else probe_header(h, arch)
    failed = [h for h, why in facts["compiles"].items() if why is not None]
    if failed:
        report.todo.append(
            "kernels that #include %s will not compile: %s"
            % (", ".join("<%s>" % h for h in failed), _WHEELS_ADVICE)
        )
    return facts


# ---- the report


def collect():
    """The report as a dict: one key for each section (SECTIONS' names, in
    order) holding its facts, and "todo": the problems found, each with
    what to do (empty when everything needed to compile and run is there).
    Every value is plain JSON."""
    r = _Report()
    for name, (fn, _render) in SECTIONS.items():
        try:
            r.sections[name] = fn(r)
        except Exception as e:  # one broken section must not hide the others
            r.sections[name] = {"error": _error(e)}
    out = dict(r.sections)
    out["todo"] = list(r.todo)
    return out


def _render(name, facts):
    render = SECTIONS[name][1]
    if set(facts) == {"error"}:
        return ["%s: could not be checked (%s)" % (name, _indent(facts["error"], "    "))]
    try:
        return render(facts)
    except Exception as e:
        return ["%s: could not be shown (%s)" % (name, _first_line(e))]


def report(out=None, facts=None):
    """Write the report as text to out (default sys.stdout); returns the
    list of problems found (empty when everything needed to compile and run
    is there).  facts: what collect() returned (collected now by default)."""
    out = sys.stdout if out is None else out
    facts = collect() if facts is None else facts
    blocks = ["\n".join(_render(name, facts[name])) for name in SECTIONS if name in facts]
    out.write("\n\n".join(blocks) + "\n\n")
    todo = facts["todo"]
    if todo:
        out.write("to do:\n")
        for t in todo:
            out.write("  - " + _indent(t, "    ") + "\n")
    else:
        out.write("everything pygpu needs was found.\n")
    return todo


def main(argv=None):
    args = sys.argv[1:] if argv is None else argv
    if args and args[0] in ("-h", "--help"):
        print(__doc__.strip())
        return 0
    unknown = [a for a in args if a != "--json"]
    if unknown:
        sys.stderr.write("python -m pygpu: unknown argument %s (see --help)\n" % unknown[0])
        return 2
    facts = collect()
    if "--json" in args:
        json.dump(facts, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        report(facts=facts)
    # 1: pygpu cannot work at all here (no C extension); what is missing
    # beyond that (a driver, NVRTC) is a to-do, not a failure
    return 1 if facts.get("pygpu", {}).get("extension_error") else 0


if __name__ == "__main__":
    sys.exit(main())
