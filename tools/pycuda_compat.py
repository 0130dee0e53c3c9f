"""PyCUDA's own test files, unmodified, on pygpu and on real PyCUDA, side by side.

    python tools/pycuda_compat.py [--sdist PATH] [--impl both|pygpu|pycuda]
                                  [--wheel-dir DIR] [--out PATH] [--baseline JSON]
    make pycuda-compat [PYCUDA_SDIST=...] [PYCUDA_WHEEL_DIR=...] [COMPAT_OUT=...]

1. Finds PyCUDA's sdist: --sdist / $PYCUDA_SDIST, else a copy cached in
   build/pycuda-compat/, else downloads it (the .tar.gz named in PyPI's JSON
   simple index; `pip download` would build its metadata, which needs CUDA).
2. Unpacks its test/ files into a temporary folder.  Nothing of PyCUDA is
   kept in this repository.
3. Runs test_gpuarray.py, test_cumath.py and test_driver.py with pytest in
   a fresh process each, under the import alias pycuda -> pygpu
   (``-p pygpu.pycuda_alias``, pygpu/pycuda_alias.py).
4. If a real PyCUDA is importable (installed, or from the wheels in
   --wheel-dir / $PYCUDA_WHEEL_DIR, installed with pip --no-index --target
   into build/pycuda-compat/), runs the same files on it in other processes.
5. Prints per file PyCUDA's passed/failed/skipped next to pygpu's, and the
   tests PyCUDA passes that pygpu does not (the porting gaps); writes the
   same as JSON and markdown (--out / $COMPAT_OUT: a .json or .md path, the
   other written beside it, or a folder).

Each test's outcome is recorded as it finishes (this file is also the small
pytest plugin that records them: ``-p pycuda_compat``), so a test that hangs
is killed after --test-timeout seconds, marked failed, and the file goes on
from the next test in a new process.

Without a GPU it says so and exits 0.
"""

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
VERSION = "2026.1"
FILES = ("test_gpuarray.py", "test_cumath.py", "test_driver.py")
INDEX_URL = "https://pypi.org/simple/pycuda/"
WORK = os.path.join(ROOT, "build", "pycuda-compat")
IMPLS = ("pycuda", "pygpu")
RECORD_ENV = "PYCUDA_COMPAT_RECORD"
TIMEOUT_ENV = "PYCUDA_COMPAT_TEST_TIMEOUT"
DONE_ENV = "PYCUDA_COMPAT_DONE"


class CompatError(Exception):
    """Something the runner needs is missing (the sdist, a test file)."""


# ---------------------------------------------------------------------------
# the recording plugin: loaded in the pytest processes with -p pycuda_compat
# (stdlib only at import: it also runs beside the real PyCUDA)


def _record(entry):
    path = os.environ.get(RECORD_ENV)
    if not path:
        return
    with open(path, "a") as f:
        f.write(json.dumps(entry) + "\n")
        f.flush()


def _message(report):
    lr = getattr(report, "longrepr", None)
    if lr is None:
        return ""
    if isinstance(lr, tuple) and len(lr) == 3:  # a skip: (file, line, reason)
        return str(lr[2])
    crash = getattr(getattr(lr, "reprcrash", None), "message", None)
    text = crash if crash else str(lr)
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    if crash:
        return lines[0][:300] if lines else ""
    errs = [ln[1:].strip() for ln in lines if ln.startswith("E ")]  # pytest's error lines
    return (errs[-1] if errs else (lines[-1] if lines else ""))[:300]


def pytest_runtest_logstart(nodeid, location):
    _record({"nodeid": nodeid, "when": "start"})


def pytest_runtest_logreport(report):
    entry = {
        "nodeid": report.nodeid,
        "when": report.when,
        "outcome": report.outcome,
        "duration": round(getattr(report, "duration", 0.0), 4),
    }
    if hasattr(report, "wasxfail"):
        entry["xfail"] = True
    if report.outcome != "passed":
        entry["message"] = _message(report)
    _record(entry)


def pytest_collectreport(report):
    if report.outcome == "failed":
        _record(
            {
                "nodeid": report.nodeid,
                "when": "collect",
                "outcome": "failed",
                "message": _message(report),
            }
        )


def pytest_collection_modifyitems(session, config, items):
    # a resumed run leaves out the tests already recorded (exact node ids:
    # pytest's --deselect matches prefixes, so test_log would take test_log10)
    path = os.environ.get(DONE_ENV)
    if not path:
        return
    with open(path) as f:
        done = set(f.read().splitlines())
    keep = [it for it in items if it.nodeid not in done]
    gone = [it for it in items if it.nodeid in done]
    if gone:
        config.hook.pytest_deselected(items=gone)
        items[:] = keep


def _on_alarm(signum, frame):
    import pytest

    pytest.fail(
        "timed out after %s s (pycuda_compat's per-test limit)" % os.environ.get(TIMEOUT_ENV),
        pytrace=False,
    )


def pytest_runtest_call(item):
    limit = int(os.environ.get(TIMEOUT_ENV, "0") or 0)
    if limit > 0 and hasattr(signal, "SIGALRM"):
        signal.signal(signal.SIGALRM, _on_alarm)
        signal.alarm(limit)


def pytest_runtest_teardown(item, nextitem):
    if hasattr(signal, "SIGALRM"):
        signal.alarm(0)


# ---------------------------------------------------------------------------
# the runner


def gpu_reason():
    """None if a CUDA GPU is usable here, else why not (one line).  Asks the
    driver (libcuda.so.1) directly, so neither pygpu nor the driver stand-in
    decides; $PYCUDA_COMPAT_ASSUME_GPU=1 skips the question (tests)."""
    if os.environ.get("PYCUDA_COMPAT_ASSUME_GPU", "") not in ("", "0"):
        return None
    import ctypes

    try:
        lib = ctypes.CDLL("libcuda.so.1")
    except OSError as e:
        return "no CUDA driver (libcuda.so.1: %s)" % e
    rc = lib.cuInit(0)
    if rc != 0:
        return "cuInit failed with CUDA error %d" % rc
    n = ctypes.c_int(0)
    rc = lib.cuDeviceGetCount(ctypes.byref(n))
    if rc != 0 or n.value == 0:
        return "no CUDA device is visible"
    return None


def sdist_url(index, version=VERSION):
    """The .tar.gz URL of `version` in a PEP 691 JSON simple-index document."""
    want = "pycuda-%s.tar.gz" % version
    for f in index.get("files", []):
        if f.get("filename") == want and not f.get("yanked"):
            return f["url"]
    raise CompatError("PyPI's index lists no %s" % want)


def find_sdist(path=None, version=VERSION, work=WORK, download=True):
    """The sdist's path: `path`, else the cached copy, else downloaded."""
    if path:
        if not os.path.isfile(path):
            raise CompatError("no such sdist: %r" % path)
        return path
    cached = os.path.join(work, "pycuda-%s.tar.gz" % version)
    if os.path.isfile(cached):
        return cached
    if not download:
        raise CompatError("no PyCUDA sdist (give PYCUDA_SDIST=path/to/pycuda-%s.tar.gz)" % version)
    import urllib.request

    try:
        req = urllib.request.Request(
            INDEX_URL, headers={"Accept": "application/vnd.pypi.simple.v1+json"}
        )
        with urllib.request.urlopen(req, timeout=30) as r:
            url = sdist_url(json.load(r), version)
        os.makedirs(work, exist_ok=True)
        tmp = cached + ".part"
        with urllib.request.urlopen(url, timeout=120) as r, open(tmp, "wb") as f:
            shutil.copyfileobj(r, f)
        os.replace(tmp, cached)
    except (OSError, ValueError) as e:
        raise CompatError(
            "could not download PyCUDA %s's sdist (%s); give "
            "PYCUDA_SDIST=path/to/pycuda-%s.tar.gz" % (version, e, version)
        ) from None
    return cached


def unpack_tests(sdist, dest):
    """Extract the regular files directly under the sdist's test/ folder into
    `dest`; returns their names."""
    names = []
    try:
        tf = tarfile.open(sdist)
    except (OSError, tarfile.TarError) as e:
        raise CompatError("cannot read %r as a tar archive: %s" % (sdist, e)) from None
    with tf:
        for m in tf.getmembers():
            parts = m.name.split("/")
            if len(parts) != 3 or parts[1] != "test" or not m.isfile():
                continue
            base = parts[2]
            if base in ("", ".", "..") or base.startswith("."):
                continue
            with tf.extractfile(m) as src, open(os.path.join(dest, base), "wb") as out:
                shutil.copyfileobj(src, out)
            names.append(base)
    if not names:
        raise CompatError("%r has no test/ folder" % sdist)
    return sorted(names)


def outcomes(entries):
    """Per test: {"outcome": passed|failed|skipped, "message", "duration"},
    from the recorded report entries (setup, call and teardown folded: any
    failure fails the test, else a skip skips it; an xfail counts as a skip).
    A collection error is under the key "<collect>"."""
    tests = {}
    for e in entries:
        nid, when = e["nodeid"], e["when"]
        if when == "collect":
            tests["<collect>"] = {"outcome": "failed", "message": e.get("message", "")}
            continue
        t = tests.setdefault(nid, {"outcome": None, "message": "", "duration": 0.0})
        if when == "start":
            continue
        t["duration"] = round(t["duration"] + e.get("duration", 0.0), 4)
        out = e["outcome"]
        if out == "failed":
            if t["outcome"] != "failed":
                t["message"] = e.get("message", "")
            t["outcome"] = "failed"
        elif out == "skipped" and t["outcome"] != "failed":
            t["outcome"] = "skipped"
            t["message"] = e.get("message", "") or ("xfail" if e.get("xfail") else "")
        elif out == "passed" and t["outcome"] is None and when == "call":
            t["outcome"] = "passed"
    for t in tests.values():
        if t["outcome"] is None:  # started, never finished: killed while hung
            t["outcome"] = "failed"
            t["message"] = t["message"] or "did not finish (the process died or hung)"
    return tests


def counts(tests):
    c = {"passed": 0, "failed": 0, "skipped": 0}
    for nid, t in tests.items():
        if nid != "<collect>":
            c[t["outcome"]] += 1
    return c


def _read_records(path):
    if not os.path.exists(path):
        return []
    out = []
    with open(path) as f:
        for line in f:
            try:
                out.append(json.loads(line))
            except ValueError:
                pass  # a line cut short by a kill
    return out


def watch(proc, record, test_timeout, hang_grace, startup_grace, deadline=None):
    """Wait for the pytest process `proc` (started in a session of its own)
    while it writes its record file.  It is killed, with its process group,
    when the record has not grown for test_timeout + hang_grace seconds
    (startup_grace more before its first record: pytest's start-up and
    collection, imports, a first compile) or at `deadline` (time.monotonic()).
    Returns why it stopped: "hung", "budget" or None (it ended by itself)."""
    start = os.path.getsize(record) if os.path.exists(record) else 0
    last, size = time.monotonic(), start
    why = None
    while proc.poll() is None:
        time.sleep(0.5)
        s = os.path.getsize(record) if os.path.exists(record) else 0
        limit = test_timeout + hang_grace + (startup_grace if s == start else 0)
        if s != size:
            size, last = s, time.monotonic()
        now = time.monotonic()
        if now - last > limit:
            why = "hung"
        elif deadline is not None and now >= deadline:
            why = "budget"
        if why:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait()
    return why


def run_file(
    impl,
    testdir,
    name,
    env,
    test_timeout=300,
    hang_grace=60,
    log=None,
    python=sys.executable,
    startup_grace=120,
):
    """Run one test file with pytest in fresh processes (`impl` "pygpu": under
    the alias; "pycuda": plain) and return its tests' outcomes.  A process
    that records nothing for test_timeout + hang_grace seconds is killed; the
    test it was in counts as failed and the rest run in a new process."""
    record = os.path.join(testdir, ".record-%s-%s.jsonl" % (impl, name))
    if os.path.exists(record):
        os.remove(record)
    env = dict(env)
    env[RECORD_ENV] = record
    done_file = record[: -len(".jsonl")] + ".done"
    env[DONE_ENV] = done_file
    env[TIMEOUT_ENV] = str(int(test_timeout))
    env["PYTHONPATH"] = os.pathsep.join(
        [HERE] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    )
    env.setdefault("PYTHONUNBUFFERED", "1")
    base = [
        python,
        "-m",
        "pytest",
        "-q",
        "-rN",
        "-p",
        "no:cacheprovider",
        "-p",
        "pycuda_compat",
        "--rootdir",
        testdir,
    ]
    if impl == "pygpu":
        base += ["-p", "pygpu.pycuda_alias"]
    else:
        base += ["-p", "no:pygpu"]  # pygpu's own plugin has no business here
    status = None
    for _attempt in range(1000):
        done = outcomes(_read_records(record))
        if "<collect>" in done:
            break
        with open(done_file, "w") as f:
            f.write("".join(nid + "\n" for nid in done))
        proc = subprocess.Popen(
            base + [name],
            cwd=testdir,
            env=env,
            stdout=log or subprocess.DEVNULL,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        killed = watch(proc, record, test_timeout, hang_grace, startup_grace) == "hung"
        status = proc.returncode
        after = outcomes(_read_records(record))
        unfinished = [
            nid
            for nid, t in after.items()
            if nid not in done and t["message"].startswith("did not finish")
        ]
        if not unfinished or len(after) == len(done):
            # the file ran to its end (or no progress was made: stop rather than loop)
            break
        # a test hung (killed) or crashed its process: it fails, the rest go on
        for nid in unfinished:
            if killed:
                msg = "hung: killed after %d s without progress" % (test_timeout + hang_grace)
            else:
                msg = "crashed: the test process died (exit status %s)" % status
            _record_to(record, {"nodeid": nid, "when": "call", "outcome": "failed", "message": msg})
    result = outcomes(_read_records(record))
    if not result:
        result["<collect>"] = {
            "outcome": "failed",
            "message": "pytest ran no test (exit status %s)" % status,
        }
    return result


def _record_to(path, entry):
    with open(path, "a") as f:
        f.write(json.dumps(entry) + "\n")


def install_wheels(wheel_dir, work=WORK, python=sys.executable, variant=None, deps_only=False):
    """pip install --no-index --no-deps --target the wheels in wheel_dir
    (top level only); returns the target folder.  With `variant` (a
    subfolder of wheel_dir, e.g. "nocurand"), PyCUDA's wheel comes from
    there instead.  With deps_only, everything but PyCUDA itself (its test
    files import pytools, so pygpu's run needs that too)."""
    wheels = sorted(
        os.path.join(wheel_dir, f)
        for f in os.listdir(wheel_dir)
        if f.endswith(".whl") and not (deps_only and f.startswith("pycuda-"))
    )
    if variant:
        alt = os.path.join(wheel_dir, variant)
        repl = sorted(
            os.path.join(alt, f)
            for f in os.listdir(alt)
            if f.startswith("pycuda-") and f.endswith(".whl")
        )
        if not repl:
            raise CompatError("no PyCUDA wheel in %r" % alt)
        wheels = [w for w in wheels if not os.path.basename(w).startswith("pycuda-")] + repl
    if not wheels:
        raise CompatError("no wheels in %r" % wheel_dir)
    target = os.path.join(work, "pycuda-deps-site" if deps_only else "pycuda-site")
    stamp = os.path.join(target, ".wheels")
    want = "\n".join(wheels)
    if os.path.exists(stamp) and open(stamp).read() == want:
        return target
    shutil.rmtree(target, ignore_errors=True)
    os.makedirs(target)
    p = subprocess.run(
        [
            python,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-index",
            "--no-deps",
            "--no-compile",
            "--disable-pip-version-check",
            "--target",
            target,
        ]
        + wheels,
        capture_output=True,
        text=True,
    )
    if p.returncode != 0:
        raise CompatError(
            "pip could not install the wheels in %r: %s"
            % (wheel_dir, (p.stderr.strip().splitlines() or ["?"])[-1])
        )
    with open(stamp, "w") as f:
        f.write(want)
    return target


def _curand_dirs():
    """Folders holding libcurand.so.10 (PyCUDA's _driver needs it), for
    LD_LIBRARY_PATH where the loader would not find it."""
    cands = [
        os.path.join(r, sub)
        for r in (os.environ.get("CUDA_HOME"), "/usr/local/cuda")
        if r
        for sub in ("lib64", "lib", "targets/x86_64-linux/lib")
    ]
    import site

    for sp in site.getsitepackages() + [site.getusersitepackages()]:
        cands += [
            os.path.join(sp, "nvidia", "cu13", "lib"),
            os.path.join(sp, "nvidia", "curand", "lib"),
        ]
    return [d for d in cands if os.path.exists(os.path.join(d, "libcurand.so.10"))]


def pycuda_env(env, site_dir=None):
    env = dict(env)
    if site_dir:
        env["PYTHONPATH"] = os.pathsep.join(
            [site_dir] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
        )
    if shutil.which("nvcc", path=env.get("PATH")) is None:  # PyCUDA compiles with nvcc
        for d in (os.path.join(env.get("CUDA_HOME") or "/usr/local/cuda", "bin"),):
            if os.path.exists(os.path.join(d, "nvcc")):
                env["PATH"] = d + os.pathsep + env.get("PATH", "")
    extra = _curand_dirs()
    if extra:
        env["LD_LIBRARY_PATH"] = os.pathsep.join(
            [p for p in env.get("LD_LIBRARY_PATH", "").split(os.pathsep) if p] + extra
        )
    return env


def probe(code, env, cwd):
    """Run `code` in a fresh interpreter; (ok, last line of its output)."""
    p = subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=cwd, capture_output=True, text=True
    )
    lines = (p.stdout if p.returncode == 0 else p.stderr).strip().splitlines()
    return p.returncode == 0, (lines[-1] if lines else "exit status %d" % p.returncode)


def compare(results, files):
    """The report: per file and impl, counts; gaps (PyCUDA passes, pygpu
    does not) and wins (pygpu passes, PyCUDA does not)."""
    report = {"files": {}, "gaps": [], "wins": []}
    for name in files:
        entry = {}
        for impl in IMPLS:
            tests = results.get(impl, {}).get(name)
            if tests is None:
                continue
            entry[impl] = {"counts": counts(tests), "tests": tests}
            if "<collect>" in tests:
                entry[impl]["collect_error"] = tests["<collect>"]["message"]
        report["files"][name] = entry
        pc = entry.get("pycuda", {}).get("tests")
        pg = entry.get("pygpu", {}).get("tests")
        if pc is None or pg is None:
            continue
        for nid, t in sorted(pc.items()):
            if nid == "<collect>":
                continue
            mine = pg.get(nid)
            mine_out = mine["outcome"] if mine else "not run"
            if t["outcome"] == "passed" and mine_out != "passed":
                msg = mine["message"] if mine else (pg.get("<collect>") or {}).get("message", "")
                report["gaps"].append({"test": nid, "pygpu": mine_out, "message": msg})
            elif t["outcome"] != "passed" and mine_out == "passed":
                report["wins"].append(
                    {"test": nid, "pycuda": t["outcome"], "message": t["message"]}
                )
    return report


def _cell(entry, impl):
    if impl not in entry:
        return "-"
    c = entry[impl]["counts"]
    s = "%d / %d / %d" % (c["passed"], c["failed"], c["skipped"])
    if entry[impl].get("collect_error"):
        s += " (collection error)"
    return s


def markdown(report, meta):
    lines = ["# PyCUDA's tests on pygpu", ""]
    lines.append(
        "PyCUDA %s test files, unmodified; pygpu through the alias pycuda -> pygpu. "
        "%s." % (meta.get("pycuda_version", VERSION), meta.get("where", ""))
    )
    for impl, label in (("pycuda", "PyCUDA"), ("pygpu", "pygpu")):
        if meta.get(impl):
            lines += ["", "%s: %s" % (label, meta[impl])]
    for note in meta.get("notes", []):
        lines.append("")
        lines.append("- " + note)
    lines += [
        "",
        "| file | PyCUDA passed / failed / skipped | pygpu passed / failed / skipped "
        "| PyCUDA passes, pygpu not | pygpu passes, PyCUDA not |",
        "|---|---|---|---|---|",
    ]
    tot = {impl: {"passed": 0, "failed": 0, "skipped": 0} for impl in IMPLS}
    for name, entry in report["files"].items():
        gaps = sum(1 for g in report["gaps"] if g["test"].split("::")[0] == name)
        wins = sum(1 for g in report["wins"] if g["test"].split("::")[0] == name)
        both = "pycuda" in entry and "pygpu" in entry
        lines.append(
            "| %s | %s | %s | %s | %s |"
            % (
                name,
                _cell(entry, "pycuda"),
                _cell(entry, "pygpu"),
                gaps if both else "-",
                wins if both else "-",
            )
        )
        for impl in IMPLS:
            if impl in entry:
                for k, v in entry[impl]["counts"].items():
                    tot[impl][k] += v
    ran = {impl: any(impl in e for e in report["files"].values()) for impl in IMPLS}
    both = ran["pycuda"] and ran["pygpu"]
    lines.append(
        "| **all** | %s | %s | %s | %s |"
        % tuple(
            ["%(passed)d / %(failed)d / %(skipped)d" % tot[i] if ran[i] else "-" for i in IMPLS]
            + [str(len(report[k])) if both else "-" for k in ("gaps", "wins")]
        )
    )
    for name, entry in report["files"].items():
        for impl in IMPLS:
            if entry.get(impl, {}).get("collect_error"):
                lines += [
                    "",
                    "%s on %s: collection error: %s" % (name, impl, entry[impl]["collect_error"]),
                ]
    if report["gaps"]:
        lines += [
            "",
            "## Porting gaps: PyCUDA passes, pygpu does not (%d)" % len(report["gaps"]),
            "",
            "| test | pygpu | message |",
            "|---|---|---|",
        ]
        for g in report["gaps"]:
            lines.append(
                "| `%s` | %s | %s |"
                % (g["test"], g["pygpu"], g["message"].replace("|", "\\|")[:200])
            )
    if report["wins"]:
        lines += [
            "",
            "## pygpu passes, PyCUDA does not (%d)" % len(report["wins"]),
            "",
            "| test | PyCUDA | message |",
            "|---|---|---|",
        ]
        for g in report["wins"]:
            lines.append(
                "| `%s` | %s | %s |"
                % (g["test"], g["pycuda"], g["message"].replace("|", "\\|")[:200])
            )
    return "\n".join(lines) + "\n"


def out_paths(out):
    """(json path, markdown path) for --out."""
    if out.endswith(".json"):
        return out, out[:-5] + ".md"
    if out.endswith(".md"):
        return out[:-3] + ".json", out
    return os.path.join(out, "pycuda-compat.json"), os.path.join(out, "pycuda-compat.md")


def main(argv=None):
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--sdist",
        default=os.environ.get("PYCUDA_SDIST") or None,
        help="PyCUDA's sdist (.tar.gz); default: $PYCUDA_SDIST, a cached copy "
        "in build/pycuda-compat/, or a download from PyPI",
    )
    ap.add_argument("--version", default=VERSION, help="PyCUDA's version (default %(default)s)")
    ap.add_argument(
        "--impl",
        choices=("both", "pygpu", "pycuda"),
        default=os.environ.get("COMPAT_IMPL") or "both",
    )
    ap.add_argument(
        "--files", default=",".join(FILES), help="test files, comma-separated (default %(default)s)"
    )
    ap.add_argument(
        "--wheel-dir",
        default=os.environ.get("PYCUDA_WHEEL_DIR") or None,
        help="wheels of PyCUDA and its dependencies, installed with pip "
        "--no-index --target for PyCUDA's run ($PYCUDA_WHEEL_DIR)",
    )
    ap.add_argument(
        "--out",
        default=os.environ.get("COMPAT_OUT") or None,
        help="write the report here: a .json or .md path (the other beside "
        "it) or a folder ($COMPAT_OUT)",
    )
    ap.add_argument(
        "--baseline",
        default=os.environ.get("COMPAT_BASELINE") or None,
        help="a JSON report of an earlier run: its PyCUDA (or pygpu) results "
        "stand in for an implementation not run now",
    )
    ap.add_argument(
        "--test-timeout",
        type=int,
        default=int(os.environ.get("COMPAT_TEST_TIMEOUT") or 300),
        help="seconds a test may take (default %(default)s)",
    )
    ap.add_argument("--work", default=WORK, help=argparse.SUPPRESS)
    ap.add_argument("--test-dir", default=None, help=argparse.SUPPRESS)  # tests: no sdist
    ap.add_argument("--log", default=None, help="append pytest's own output here")
    args = ap.parse_args(argv)

    reason = gpu_reason()
    if reason is not None:
        print(
            "pycuda-compat: not run: this machine has no usable GPU (%s). PyCUDA's tests "
            "need one; run it on a CUDA machine." % reason
        )
        return 0
    files = [f for f in args.files.split(",") if f]
    notes = []
    tmp = tempfile.mkdtemp(prefix="pycuda-compat-")
    try:
        if args.test_dir:
            for f in os.listdir(args.test_dir):
                if os.path.isfile(os.path.join(args.test_dir, f)):
                    shutil.copy(os.path.join(args.test_dir, f), tmp)
        else:
            try:
                sdist = find_sdist(args.sdist, args.version, args.work)
                unpack_tests(sdist, tmp)
            except CompatError as e:
                print("pycuda-compat: %s" % e, file=sys.stderr)
                return 2
        missing = [f for f in files if not os.path.exists(os.path.join(tmp, f))]
        if missing:
            print("pycuda-compat: the sdist has no %s" % ", ".join(missing), file=sys.stderr)
            return 2
        with open(os.path.join(tmp, "pytest.ini"), "w") as f:
            f.write("[pytest]\n")  # pins pytest's rootdir here, away from any other ini
        log = open(args.log, "a") if args.log else None
        env = dict(os.environ)
        results, meta = (
            {},
            {
                "pycuda_version": args.version,
                "notes": notes,
                "python": sys.version.split()[0],
                "date": time.strftime("%Y-%m-%d"),
            },
        )
        baseline = None
        if args.baseline:
            with open(args.baseline) as f:
                baseline = json.load(f)

        impls = IMPLS if args.impl == "both" else (args.impl,)
        if "pygpu" in impls:
            ok, line = probe(
                "import pygpu, pygpu.pycuda_alias, os; print(pygpu.__file__)", env, tmp
            )
            if not ok and os.path.isdir(os.path.join(ROOT, "pygpu")):
                env["PYTHONPATH"] = os.pathsep.join(
                    [ROOT] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
                )
                ok, line = probe(
                    "import pygpu, pygpu.pycuda_alias; print(pygpu.__file__)", env, tmp
                )
            if not ok:
                print("pycuda-compat: pygpu is not importable: %s" % line, file=sys.stderr)
                return 2
            meta["pygpu"] = line
            if args.wheel_dir:
                deps = install_wheels(args.wheel_dir, args.work, deps_only=True)
                env["PYTHONPATH"] = os.pathsep.join(
                    [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p] + [deps]
                )
            results["pygpu"] = {}
            for name in files:
                t0 = time.monotonic()
                print("pygpu:  %s ..." % name, flush=True)
                results["pygpu"][name] = run_file(
                    "pygpu", tmp, name, env, args.test_timeout, log=log
                )
                print(
                    "        %s in %.0f s"
                    % (_fmt_counts(results["pygpu"][name]), time.monotonic() - t0),
                    flush=True,
                )
                write_report(results, files, meta, args.out)
        if "pycuda" in impls:
            site_dir = None
            penv = env
            check = (
                "import pycuda, pycuda.driver, os; assert not "
                "pycuda.__file__.startswith(%r); print(pycuda.VERSION_TEXT, "
                "os.path.dirname(pycuda.__file__))" % os.path.join(ROOT, "pygpu")
            )
            try:
                if args.wheel_dir:
                    site_dir = install_wheels(args.wheel_dir, args.work)
                penv = pycuda_env(env, site_dir)
                ok, line = probe(check, penv, tmp)
                nocurand = args.wheel_dir and os.path.isdir(
                    os.path.join(args.wheel_dir, "nocurand")
                )
                if not ok and "libcurand" in line and nocurand:
                    # no libcurand.so.10 on this machine: PyCUDA built without cuRAND
                    site_dir = install_wheels(args.wheel_dir, args.work, variant="nocurand")
                    penv = pycuda_env(env, site_dir)
                    ok, line = probe(check, penv, tmp)
                    if ok:
                        notes.append(
                            "PyCUDA is the build without cuRAND (no libcurand.so.10 "
                            "here): its Sobol generators cannot work"
                        )
            except CompatError as e:
                ok, line = False, str(e)
            if ok:
                meta["pycuda"] = line
                results["pycuda"] = {}
                for name in files:
                    t0 = time.monotonic()
                    print("PyCUDA: %s ..." % name, flush=True)
                    results["pycuda"][name] = run_file(
                        "pycuda", tmp, name, penv, args.test_timeout, log=log
                    )
                    print(
                        "        %s in %.0f s"
                        % (_fmt_counts(results["pycuda"][name]), time.monotonic() - t0),
                        flush=True,
                    )
                    write_report(results, files, meta, args.out)
            else:
                notes.append(
                    "PyCUDA itself was not run: not importable (%s)%s"
                    % (
                        line,
                        "" if args.wheel_dir else "; give PYCUDA_WHEEL_DIR=folder of its wheels",
                    )
                )
        if baseline:
            for impl in IMPLS:
                if impl in results:
                    continue
                got = {
                    n: e[impl]["tests"]
                    for n, e in baseline.get("files", {}).items()
                    if impl in e and n in files
                }
                if got:
                    results[impl] = got
                    notes.append(
                        "%s's results are from %s (%s)"
                        % (
                            "PyCUDA" if impl == "pycuda" else "pygpu",
                            args.baseline,
                            baseline.get("meta", {}).get("date", "?"),
                        )
                    )
        if log:
            log.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    meta["where"] = _where()
    md = write_report(results, files, meta, args.out)
    print()
    print(md)
    if args.out:
        print("wrote %s and %s" % out_paths(args.out))
    return 0


def write_report(results, files, meta, out):
    """Build the report; write it to `out` (if given); return its markdown.
    Also called after each file, so a run cut short leaves what it has."""
    report = compare(results, files)
    report["meta"] = meta
    md = markdown(report, meta)
    if out:
        jp, mp = out_paths(out)
        for p in (jp, mp):
            if os.path.dirname(p):
                os.makedirs(os.path.dirname(p), exist_ok=True)
        with open(jp, "w") as f:
            json.dump(report, f, indent=1, sort_keys=True)
        with open(mp, "w") as f:
            f.write(md)
    return md


def _fmt_counts(tests):
    c = counts(tests)
    s = "%(passed)d passed, %(failed)d failed, %(skipped)d skipped" % c
    if "<collect>" in tests:
        s += "; collection error: " + tests["<collect>"]["message"]
    return s


def _where():
    try:
        p = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
        )
        if p.returncode == 0 and p.stdout.strip():
            return "on " + p.stdout.strip().splitlines()[0] + ", Python " + sys.version.split()[0]
    except (OSError, subprocess.SubprocessError):
        pass
    return "Python " + sys.version.split()[0]


if __name__ == "__main__":
    sys.exit(main())
