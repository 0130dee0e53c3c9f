"""The opt-in nvcc back end: compile with the CUDA toolkit's nvcc in a
subprocess, as PyCUDA always did, for code that needs the host toolchain
(the host's C and C++ library headers, GCC's extensions).

SourceModule(..., compiler="nvcc"), compile(..., compiler="nvcc") or
PYGPU_COMPILER=nvcc choose it; NVRTC stays the default.  pygpu.compiler
keeps the cache (keyed by the back end, nvcc's file and version, so an NVRTC
binary is never served for an nvcc request nor the other way round) and the
errors (a CompileError with nvcc's output as its log).  This module only
finds nvcc, asks its version and runs it.  Plain Python: nothing here
touches the GPU.
"""

import hashlib
import os
import re
import shutil
import subprocess
import tempfile
import threading
from typing import Dict, List, Mapping, Optional, Sequence, Set, Tuple

from pygpu import store
from pygpu._errors import CompileError

__all__ = ["BACKENDS", "backend", "find", "tried", "version", "run", "ENV"]

#: the environment variable that picks the back end when none is given
ENV = "PYGPU_COMPILER"
BACKENDS = ("nvrtc", "nvcc")

_lock = threading.Lock()
_versions: Dict[Tuple[str, int, int], Tuple[int, int, str]] = {}
_recorded: Set[Tuple[str, Tuple[str, int, int]]] = set()  # (cache dir, nvcc) written there


def backend(compiler: Optional[str] = None, environ: Optional[Mapping[str, str]] = None) -> str:
    """'nvrtc' or 'nvcc': compiler when given, else $PYGPU_COMPILER, else
    'nvrtc'.  Anything else is a ValueError that names the choices."""
    env = os.environ if environ is None else environ
    where = "compiler="
    if compiler is None:
        compiler = env.get(ENV) or "nvrtc"
        where = "$%s" % ENV
    if not isinstance(compiler, str):
        raise TypeError("compiler must be 'nvrtc' or 'nvcc', not %s" % type(compiler).__name__)
    name = compiler.strip().lower()
    if name not in BACKENDS:
        raise ValueError("%s%r: the compiler must be 'nvrtc' (the default) or 'nvcc'"
                         % (where, compiler))  # fmt: skip
    return name


def _candidates(nvcc: Optional[str], environ: Mapping[str, str]) -> List[str]:
    """Where nvcc is looked for: nvcc itself (a path, or a name on PATH),
    then $CUDA_HOME/bin, $CUDA_PATH/bin, /usr/local/cuda/bin."""
    out = []
    if nvcc and nvcc != "nvcc":
        out.append(nvcc)
    out.append("nvcc")
    for var in ("CUDA_HOME", "CUDA_PATH"):
        root = environ.get(var)
        if root:
            out.append(os.path.join(root, "bin", "nvcc"))
    out.append("/usr/local/cuda/bin/nvcc")
    return out


def tried(nvcc: Optional[str] = None, environ: Optional[Mapping[str, str]] = None) -> List[str]:
    """The places find() looks, in order (for messages)."""
    env = os.environ if environ is None else environ
    return [c if os.sep in c else "%s on PATH" % c for c in _candidates(nvcc, env)]


def find(nvcc: Optional[str] = None, environ: Optional[Mapping[str, str]] = None) -> Optional[str]:
    """The absolute path of the nvcc to run, or None.  nvcc: PyCUDA's nvcc=
    (a path, or a command name looked up on PATH); when it is given and not
    the plain "nvcc", only it is tried."""
    env = os.environ if environ is None else environ
    cands = _candidates(nvcc, env)
    if nvcc and nvcc != "nvcc":
        cands = cands[:1]
    for c in cands:
        if os.sep in c:
            if os.path.isfile(c) and os.access(c, os.X_OK):
                return os.path.abspath(c)
        else:
            found = shutil.which(c, path=env.get("PATH"))
            if found:
                return os.path.abspath(found)
    return None


def missing_error(nvcc: Optional[str] = None) -> CompileError:
    """The CompileError of a compile asked of nvcc where there is none."""
    return CompileError(
        "the nvcc back end was asked for (compiler='nvcc' or $%s=nvcc) but nvcc "
        "was not found; tried: %s.  Install the CUDA toolkit, put its bin/ on PATH "
        "or set CUDA_HOME, pass nvcc='/path/to/nvcc', or compile with NVRTC "
        "(compiler='nvrtc', the default)" % (ENV, ", ".join(tried(nvcc)))
    )


_RELEASE = re.compile(r"release (\d+)\.(\d+), V([\d.]+)")


def _file_sig(path: str) -> Tuple[int, int]:
    st = os.stat(path)
    return st.st_size, st.st_mtime_ns


def version(path: str, cache_dir: Optional[str] = None) -> Tuple[int, int, str]:
    """(major, minor, full version) of the nvcc at path, from
    ``nvcc --version``; remembered per file (size and mtime) in memory and,
    with cache_dir, in the compile cache's directory, so that a cache hit in a
    new process runs no nvcc at all."""
    sig = _file_sig(path)
    key = (path, sig[0], sig[1])
    name = "nvcc-" + hashlib.sha256(repr(key).encode()).hexdigest()[:32]
    found = _versions.get(key)
    if found is not None:
        if cache_dir and (cache_dir, key) not in _recorded:
            _recorded.add((cache_dir, key))
            store.write_record(cache_dir, name, {"file": path, "version": list(found)})
        return found
    if cache_dir:
        rec = store.read_record(cache_dir, name)
        v = rec.get("version") if rec else None
        if (
            isinstance(v, list)
            and len(v) == 3
            and type(v[0]) is int
            and type(v[1]) is int
            and isinstance(v[2], str)
        ):
            found = (v[0], v[1], v[2])
            _versions[key] = found
            return found
    try:
        r = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError) as e:
        raise CompileError("cannot run %s --version: %s" % (path, e)) from None
    m = _RELEASE.search(r.stdout)
    if r.returncode != 0 or m is None:
        raise CompileError(
            "%s --version did not say its release (exit status %d): %s"
            % (path, r.returncode, (r.stdout + r.stderr).strip()[:500])
        )
    found = (int(m.group(1)), int(m.group(2)), m.group(3))
    with _lock:
        _versions[key] = found
    if cache_dir:
        _recorded.add((cache_dir, key))
        store.write_record(cache_dir, name, {"file": path, "version": list(found)})
    return found


_ARCHS: Dict[str, Tuple[int, ...]] = {}


def archs(path: str) -> Tuple[int, ...]:
    """The sm_XY numbers this nvcc compiles for (``--list-gpu-arch``)."""
    found = _ARCHS.get(path)
    if found is None:
        r = subprocess.run([path, "--list-gpu-arch"], capture_output=True, text=True, timeout=60)
        nums = sorted({int(n) for n in re.findall(r"compute_(\d+)\b", r.stdout)})
        found = _ARCHS[path] = tuple(nums)
    return found


def run(
    path: str,
    text: str,
    name: str,
    opts: Sequence[str],
    target: str,
) -> Tuple[Optional[bytes], str, List[str], str, str]:
    """nvcc on text (written as name in a scratch folder) with opts, to
    target ('cubin' or 'ptx'): (the image or None when nvcc failed, its
    output with the scratch folder's name taken out, the command line, its
    stdout, its stderr).  nvcc that cannot be run at all is a CompileError."""
    if target not in ("cubin", "ptx"):
        raise ValueError(
            "the nvcc back end compiles to 'cubin' or 'ptx', not %r (use NVRTC for "
            "LTO-IR: compiler='nvrtc')" % (target,)
        )
    base = os.path.basename(name) or "kernel.cu"
    if not base.endswith(".cu"):
        base += ".cu"
    with tempfile.TemporaryDirectory(prefix="pygpu-nvcc-") as d:
        src = os.path.join(d, base)
        out = os.path.join(d, "kernel." + target)
        with open(src, "w", encoding="utf-8") as f:
            f.write(text)
        cmd = [path, "--" + target, *opts, "-o", out, src]
        try:
            r = subprocess.run(cmd, capture_output=True, cwd=d)
        except OSError as e:
            err = CompileError("cannot run %s: %s" % (path, e), cmd, None, str(e))
            err.routine = "nvcc"
            raise err from None
        stdout = r.stdout.decode("utf-8", "replace")
        stderr = r.stderr.decode("utf-8", "replace")
        log = (stdout + stderr).replace(src, base).replace(d + os.sep, "")
        image = None
        if r.returncode == 0 and os.path.isfile(out):
            with open(out, "rb") as f:
                image = f.read()
    store.stats["compiles"] += 1
    return image, log, cmd, stdout, stderr
