"""python -m pygpu: what pygpu found on this machine, and what to do about
anything missing.

Prints the versions, the CUDA driver (found or not, and where), each
device's name, compute capability and memory, the NVRTC library and its
version, the CUDA header directories and whether each header the manual
promises compiles (NVRTC, for the lowest architecture it supports), the
compile cache's directory and size.  Works, and exits 0, on a machine without a driver or GPU: what is
missing is reported with the command that fixes it.
"""

import os
import platform
import sys

__all__ = ["report", "main", "HEADERS", "NVRTC_REQUIREMENTS", "probe_header", "nvidia_requirements"]

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


def probe_header(header, arch):
    """None if a kernel that includes <header> (a str, or a tuple of them)
    compiles (NVRTC, for arch, through the compile cache), else the
    compiler's first error line."""
    from pygpu import compiler

    headers = (header,) if isinstance(header, str) else tuple(header)
    source = "".join("#include <%s>\n" % h for h in headers)
    source += "extern \"C\" __global__ void pygpu_probe() {}\n"
    try:
        compiler.compile(source, arch=arch)
    except compiler.CompileError as e:
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


def report(out=None):
    """Write the report to out (default sys.stdout); returns the list of
    problems found (empty when everything needed to compile and run is
    there)."""
    out = sys.stdout if out is None else out
    todo = []

    def say(line=""):
        out.write(line + "\n")

    import pygpu
    from pygpu import _driver, _loader

    say("pygpu %s  (%s)" % (pygpu.__version__, os.path.dirname(os.path.abspath(pygpu.__file__))))
    say("Python %s, %s %s" % (platform.python_version(), platform.system(), platform.machine()))
    say("NumPy %s" % (_version("numpy") or "not installed"))
    pf = _loader.pathfinder()
    say(
        "cuda-pathfinder %s"
        % (
            (_version("cuda-pathfinder") or "installed")
            if pf is not None
            else "not installed (the plain search is used)"
        )
    )
    v = _driver.CUDA_HEADER_VERSION
    say("built against CUDA %d.%d headers" % (v // 1000, (v % 1000) // 10))

    # ---- the driver and the devices
    say()
    driver_ok = False
    try:
        _driver.init()
        dv = _driver.get_driver_version()
        where = os.environ.get("PYGPU_LIBCUDA") or _loaded_file(("libcuda.so",)) or "libcuda.so.1"
        say("driver: CUDA %d.%d (%d), %s" % (dv // 1000, (dv % 1000) // 10, dv, where))
        driver_ok = True
    except Exception as e:
        say("driver: not found (%s)" % _first_line(e))
        todo.append(
            "no CUDA driver: install the NVIDIA driver (it provides libcuda.so.1) to "
            "run kernels; compiling needs none (pygpu.compiler.compile(..., arch=...))"
        )
    if driver_ok:
        try:
            n = _driver.Device.count()
        except Exception as e:
            n = 0
            say("devices: could not be counted (%s)" % _first_line(e))
        if n == 0:
            say("devices: none visible")
            todo.append("no CUDA device is visible (check CUDA_VISIBLE_DEVICES and nvidia-smi)")
        for i in range(n):
            try:
                d = _driver.Device(i)
                major, minor = d.compute_capability()
                say(
                    "device %d: %s, compute capability %d.%d (sm_%d%d), %s"
                    % (i, d.name(), major, minor, major, minor, _size(d.total_memory()))
                )
            except Exception as e:
                say("device %d: %s" % (i, _first_line(e)))
                continue
            try:
                sms, minimum, align = d.sm_partitioning()
                say(
                    "  green contexts: %d SMs, split_sms() partitions of %d+ in multiples of %d"
                    % (sms, minimum, align)
                )
            except Exception as e:
                say("  green contexts: not available (%s)" % _first_line(e))
        try:
            _driver._checkpoint_state(os.getpid())
            say("checkpoint/restore (pygpu.checkpoint): available")
        except Exception as e:  # the driver's error answers too: the entry points are there
            missing = isinstance(e, _driver.LogicError) and not getattr(e, "routine", None)
            say(
                "checkpoint/restore (pygpu.checkpoint): %s"
                % ("not available (%s)" % _first_line(e) if missing else "available")
            )

    # ---- the system through NVML (pygpu.system; the [nvml] extra)
    say()
    from pygpu import system

    for line in system.report_lines():
        say(line)

    # ---- NVRTC
    say()
    nvrtc_major = None
    archs = []
    try:
        from pygpu import compiler

        path = compiler._ensure_nvrtc()
        nvrtc_major, nvrtc_minor = compiler.nvrtc_version()
        say(
            "NVRTC: %d.%d, %s"
            % (nvrtc_major, nvrtc_minor, _loaded_file(("libnvrtc.so", "libnvrtc.alt.so")) or path)
        )
        archs = compiler.supported_archs()
        say("  compiles for sm_%d ... sm_%d" % (min(archs), max(archs)))
    except Exception as e:
        say("NVRTC: not found (%s)" % _first_line(e))
        todo.append(
            "no NVRTC, so no compiling: pip install %s (NVIDIA's wheels: pygpu's "
            "[nvrtc] extra), or install the CUDA toolkit, or set PYGPU_NVRTC to "
            "libnvrtc.so" % nvidia_requirements()
        )
    if driver_ok and nvrtc_major is not None:
        dv = _driver.get_driver_version()
        if dv // 1000 < nvrtc_major:
            todo.append(
                "NVRTC %d is newer than the driver's CUDA %d: its output will not load; "
                "update the driver or pip install %s"
                % (nvrtc_major, dv // 1000, _loader.nvrtc_pip_requirement(dv // 1000))
            )

    # the compile cache as found (the header probes below may add entries)
    try:
        from pygpu import compiler

        cache = compiler.cache_info()
    except Exception as e:
        cache = e

    # ---- headers
    say()
    dirs = _loader.cuda_include_dirs()
    if dirs:
        say("CUDA headers: %s" % dirs[0])
        for d in dirs[1:]:
            say("              %s" % d)
    else:
        say("CUDA headers: not found")
    if archs:
        arch = "sm_%d" % min(archs)
        failed = []
        # one compile for all of them; one each only when that fails
        together = probe_header(HEADERS, arch) is None
        for h in HEADERS:
            why = None if together else probe_header(h, arch)
            say("  <%s> %s" % (h, "compiles" if why is None else "does not compile: " + why))
            if why is not None:
                failed.append(h)
        if failed:
            todo.append(
                "kernels that #include %s will not compile: pip install %s (NVIDIA's "
                "NVRTC, CUDA header and CCCL wheels: pygpu's [nvrtc] extra), or install "
                "the CUDA toolkit, or set CUDA_HOME"
                % (", ".join("<%s>" % h for h in failed), nvidia_requirements())
            )
    else:
        say("  (no NVRTC: the headers were not compiled)")

    # ---- the compile cache
    say()
    try:
        if isinstance(cache, Exception):
            raise cache
        info = cache
        if os.environ.get("PYGPU_DISABLE_CACHE", "") not in ("", "0"):
            say("compile cache: disabled (PYGPU_DISABLE_CACHE)")
        else:
            say(
                "compile cache: %s, %d entries, %s (limit %s)"
                % (
                    info["dir"],
                    info["disk_entries"],
                    _size(info["disk_bytes"]),
                    _size(info["size_cap"]),
                )
            )
    except Exception as e:
        say("compile cache: %s" % _first_line(e))

    say()
    if todo:
        say("to do:")
        for t in todo:
            say("  - " + t)
    else:
        say("everything pygpu needs was found.")
    return todo


def main(argv=None):
    args = sys.argv[1:] if argv is None else argv
    if args and args[0] in ("-h", "--help"):
        print(__doc__.strip())
        return 0
    report()
    return 0


if __name__ == "__main__":
    sys.exit(main())
