"""python -m pygpu: what pygpu found on this machine, and what to do about
anything missing.

Prints the versions, the CUDA driver (found or not, and where), each
device's name, compute capability and memory, the NVRTC library and its
version, the CUDA header directories, the compile cache's directory and
size.  Works, and exits 0, on a machine without a driver or GPU: what is
missing is reported with the command that fixes it.
"""
import os
import platform
import sys

__all__ = ["report", "main"]

_HEADERS = ("cuda_fp16.h", "cooperative_groups.h", "cuda/std/complex", "cub/cub.cuh")


def _version(dist):
    try:
        from importlib.metadata import version
        return version(dist)
    except Exception:
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
    say("cuda-pathfinder %s" % ((_version("cuda-pathfinder") or "installed") if pf is not None
                                else "not installed (the plain search is used)"))
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
        todo.append("no CUDA driver: install the NVIDIA driver (it provides libcuda.so.1) to "
                    "run kernels; compiling needs none (pygpu.compiler.compile(..., arch=...))")
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
                say("device %d: %s, compute capability %d.%d (sm_%d%d), %s"
                    % (i, d.name(), major, minor, major, minor, _size(d.total_memory())))
            except Exception as e:
                say("device %d: %s" % (i, _first_line(e)))

    # ---- NVRTC
    say()
    nvrtc_major = None
    try:
        from pygpu import compiler
        path = compiler._ensure_nvrtc()
        nvrtc_major, nvrtc_minor = compiler.nvrtc_version()
        say("NVRTC: %d.%d, %s" % (nvrtc_major, nvrtc_minor,
                                   _loaded_file(("libnvrtc.so", "libnvrtc.alt.so")) or path))
        archs = compiler.supported_archs()
        say("  compiles for sm_%d ... sm_%d" % (min(archs), max(archs)))
    except Exception as e:
        say("NVRTC: not found (%s)" % _first_line(e))
        todo.append("no NVRTC, so no compiling: pip install 'pygpu[nvrtc]' (NVIDIA's "
                    "wheels), or install the CUDA toolkit, or set PYGPU_NVRTC to libnvrtc.so")
    if driver_ok and nvrtc_major is not None:
        dv = _driver.get_driver_version()
        if dv // 1000 < nvrtc_major:
            todo.append("NVRTC %d is newer than the driver's CUDA %d: its output will not load; "
                        "update the driver or pip install %s"
                        % (nvrtc_major, dv // 1000, _loader.nvrtc_pip_requirement(dv // 1000)))

    # ---- headers
    say()
    dirs = _loader.cuda_include_dirs()
    if dirs:
        say("CUDA headers: %s" % dirs[0])
        for d in dirs[1:]:
            say("              %s" % d)
    else:
        say("CUDA headers: not found")
    missing = [h for h in _HEADERS if not any(os.path.isfile(os.path.join(d, h)) for d in dirs)]
    say("  " + ", ".join("<%s> %s" % (h, "missing" if h in missing else "ok") for h in _HEADERS))
    if missing:
        todo.append("kernels that #include %s will not compile: pip install 'pygpu[cccl]' "
                    "(NVIDIA's header wheels), or install the CUDA toolkit, or set CUDA_HOME"
                    % ", ".join("<%s>" % h for h in missing))

    # ---- the compile cache
    say()
    try:
        from pygpu import compiler
        info = compiler.cache_info()
        if os.environ.get("PYGPU_DISABLE_CACHE", "") not in ("", "0"):
            say("compile cache: disabled (PYGPU_DISABLE_CACHE)")
        else:
            say("compile cache: %s, %d entries, %s (limit %s)"
                % (info["dir"], info["disk_entries"], _size(info["disk_bytes"]),
                   _size(info["size_cap"])))
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
