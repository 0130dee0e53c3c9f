"""PyCUDA's clients, unmodified, on real PyCUDA and on pygpu, side by side.

    python tools/pycuda_ecosystem.py [--reikna-sdist PATH] [--wheel-dir DIR]
            [--pycuda-sdist PATH] [--pycuda-wheel-dir DIR] [--impl both|pygpu|pycuda]
            [--clients reikna,examples] [--out DIR] [--time-budget S] [--resume]
    python tools/pycuda_ecosystem.py --fetch DIR [--python-version 3.12]
    make pycuda-ecosystem [REIKNA_SDIST=...] [ECOSYSTEM_WHEEL_DIR=...]
                          [PYCUDA_SDIST=...] [PYCUDA_WHEEL_DIR=...] [ECOSYSTEM_OUT=...]

The clients:

- reikna 0.9.0 (FFT, matrix products, reductions, random numbers on PyCUDA):
  its own test suite, from its sdist's test/ folder, on its CUDA backend:
  ``pytest test --api=cuda -m "not perf"`` inside the unpacked sdist, once
  with real PyCUDA and once through the alias pycuda -> pygpu
  (``-p pygpu.pycuda_alias``).  reikna needs mako (and markupsafe) and
  funcsigs besides NumPy; its tests need pytest and SciPy.
- PyCUDA's examples/ (from PyCUDA's sdist), each run as a program
  (``python prog.py``; on pygpu ``python -m pygpu.pycuda_alias prog.py``),
  except those that need a display (OpenGL/GLUT, Tk, Chaco) or a package
  missing from this machine (each says which).  matplotlib runs with
  MPLBACKEND=Agg.  A program passes on PyCUDA when it exits 0; on pygpu
  when it exits 0 and prints what PyCUDA printed (see compare_output: PyCUDA
  runs twice, and the numbers that differ between its own two runs, such as
  timings, random data and addresses, are not compared; the rest of the text
  must be equal, and every number PyCUDA printed the same twice equal to 5
  significant digits).

Where things come from (nothing is kept in this repository):
  reikna's sdist: --reikna-sdist / $REIKNA_SDIST, else the cached copy in
  build/pycuda-ecosystem/, else `pip download` (network).  Its dependencies:
  wheels in --wheel-dir / $ECOSYSTEM_WHEEL_DIR (pip install --no-index
  --target), else what the interpreter has.  PyCUDA and its sdist as
  tools/pycuda_compat.py finds them (--pycuda-sdist / $PYCUDA_SDIST,
  --pycuda-wheel-dir / $PYCUDA_WHEEL_DIR).  ``--fetch DIR`` downloads
  reikna's sdist and its dependencies' wheels (for --python-version, by
  default this interpreter's) into DIR and exits: that folder is what a
  machine without network is given.

It prints one table (per client, PyCUDA's pass count next to pygpu's) and
writes pycuda-ecosystem.json and .md into --out.  Robust to hangs (each test
has --test-timeout seconds, each program --example-timeout) and to crashes
(a test or program that kills its process is recorded, with its signal, and
the run goes on from the next one).  --time-budget stops cleanly after that
many seconds (the test in flight is run again next time); --resume then
carries on from the records in build/pycuda-ecosystem/records/.

Without a GPU it says so and exits 0 ($PYCUDA_COMPAT_ASSUME_GPU=1 skips the
check, for tests).
"""

import argparse
import ast
import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)

import pycuda_compat as compat  # noqa: E402  (the recording plugin, PyCUDA's wheels)

REIKNA_VERSION = "0.9.0"
# reikna's run-time dependencies besides NumPy (its setup.py); markupsafe is mako's
REIKNA_DEPS = ("mako>=1.0.0", "markupsafe", "funcsigs>=1.0.0")
# what some of PyCUDA's examples import (pure Python; cgen needs pytools)
EXAMPLE_DEPS = ("cgen", "pytools", "platformdirs", "siphash24", "typing_extensions")
REIKNA_ARGS = ("test", "--api=cuda", "-m", "not perf", "--continue-on-collection-errors")
WORK = os.path.join(ROOT, "build", "pycuda-ecosystem")
IMPLS = ("pycuda", "pygpu")
CLIENTS = ("reikna", "examples")
LABEL = {"pycuda": "PyCUDA", "pygpu": "pygpu"}
# imports that mean "needs a display": no headless run of these exists
DISPLAY_MODULES = ("OpenGL", "tkinter", "Tkinter", "ImageTk", "enthought", "pygame", "pycuda.gl")


class EcosystemError(Exception):
    """Something the runner needs is missing (an sdist, a wheel folder)."""


# ---------------------------------------------------------------------------
# fetching


def pip_download(args, dest, python=sys.executable):
    os.makedirs(dest, exist_ok=True)
    cmd = [python, "-m", "pip", "download", "-q", "--disable-pip-version-check", "-d", dest] + list(
        args
    )
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        last = (p.stderr.strip().splitlines() or ["exit status %d" % p.returncode])[-1]
        raise EcosystemError("pip download %s failed: %s" % (" ".join(args), last))


def platform_args(python_version):
    """pip download's options for the wheels of another interpreter (cp, x86_64
    Linux): the manylinux tags NumPy-era wheels carry."""
    if not python_version:
        return []
    out = ["--only-binary=:all:", "--python-version", python_version, "--implementation", "cp"]
    for tag in (
        "manylinux_2_28_x86_64",
        "manylinux_2_27_x86_64",
        "manylinux_2_17_x86_64",
        "manylinux2014_x86_64",
        "manylinux1_x86_64",
    ):
        out += ["--platform", tag]
    return out


def fetch(dest, python_version=None, version=REIKNA_VERSION):
    """reikna's sdist and the wheels of its (and the examples') dependencies
    into dest.  NumPy, SciPy and pytest are not fetched: the machine has them."""
    pip_download(["--no-deps", "--no-binary=:all:", "reikna==%s" % version], dest)
    for req in list(REIKNA_DEPS) + list(EXAMPLE_DEPS):
        try:
            pip_download(
                ["--no-deps"] + (platform_args(python_version) or ["--only-binary=:all:"]) + [req],
                dest,
            )
        except EcosystemError:
            # no wheel on the index (cgen has only an sdist): build one, which is
            # right for any Python only where the package is pure Python
            p = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "pip",
                    "wheel",
                    "-q",
                    "--no-deps",
                    "--disable-pip-version-check",
                    "-w",
                    dest,
                    req,
                ],
                capture_output=True,
                text=True,
            )
            if p.returncode != 0:
                raise EcosystemError(
                    "no wheel of %s, and pip wheel failed: %s"
                    % (req, (p.stderr.strip().splitlines() or ["?"])[-1])
                ) from None
            built = [
                f
                for f in os.listdir(dest)
                if f.endswith(".whl")
                and f.lower().startswith(re.split("[<>=]", req)[0].lower() + "-")
            ]
            if not all(f.endswith("-py3-none-any.whl") for f in built):
                raise EcosystemError(
                    "%s is not pure Python: built %s for this "
                    "interpreter only" % (req, ", ".join(built))
                )
    return sorted(os.listdir(dest))


def find_reikna_sdist(path=None, version=REIKNA_VERSION, work=WORK, wheel_dir=None, download=True):
    """reikna's sdist: `path`, else one in wheel_dir, else the cached copy,
    else downloaded (pip download --no-binary: the sdist only)."""
    name = "reikna-%s.tar.gz" % version
    if path:
        if not os.path.isfile(path):
            raise EcosystemError("no such sdist: %r" % path)
        return path
    for d in (wheel_dir, work):
        if d and os.path.isfile(os.path.join(d, name)):
            return os.path.join(d, name)
    if not download:
        raise EcosystemError("no reikna sdist (give REIKNA_SDIST=path/to/%s)" % name)
    try:
        pip_download(["--no-deps", "--no-binary=:all:", "reikna==%s" % version], work)
    except EcosystemError as e:
        raise EcosystemError(
            "%s; give REIKNA_SDIST=path/to/%s (python "
            "tools/pycuda_ecosystem.py --fetch DIR fetches it where the "
            "network allows)" % (e, name)
        ) from None
    return os.path.join(work, name)


def _safe_members(tf, prefix=None):
    for m in tf.getmembers():
        parts = m.name.split("/")
        if m.name.startswith("/") or ".." in parts or not (m.isfile() or m.isdir()):
            continue
        if prefix is not None and (len(parts) < 2 or parts[1] != prefix):
            continue
        yield m


def unpack(sdist, dest, only=None):
    """Extract the sdist (regular files and folders only, nothing outside
    dest) into dest; with `only`, just the top-level folder of that name.
    Returns the sdist's root folder."""
    try:
        tf = tarfile.open(sdist)
    except (OSError, tarfile.TarError) as e:
        raise EcosystemError("cannot read %r as a tar archive: %s" % (sdist, e)) from None
    with tf:
        members = list(_safe_members(tf, only))
        if not members:
            raise EcosystemError("%r has no %s" % (sdist, (only + "/ folder") if only else "files"))
        for m in members:
            target = os.path.join(dest, *m.name.split("/"))
            if m.isdir():
                os.makedirs(target, exist_ok=True)
                continue
            os.makedirs(os.path.dirname(target), exist_ok=True)
            with tf.extractfile(m) as src, open(target, "wb") as out:
                shutil.copyfileobj(src, out)
        return os.path.join(dest, members[0].name.split("/")[0])


# ---------------------------------------------------------------------------
# running a pytest suite (resumable; crashes, hangs and collection errors
# recorded)


def suite_outcomes(entries):
    """Per test (node id): outcome, message, duration, from the recorded
    entries.  A module that fails to collect is one failed entry under its
    own node id with the message "collection error: ...".  A test abandoned
    at the time budget is left out (it runs again on --resume)."""
    abandoned = set()
    fixed = []
    for e in entries:
        if e.get("when") == "abandon":
            abandoned.add(e["nodeid"])
            continue
        if e.get("when") == "collect":
            e = {
                "nodeid": e["nodeid"] or "<collect>",
                "when": "call",
                "outcome": "failed",
                "message": "collection error: " + e.get("message", ""),
                "collect": True,
            }
        elif e["nodeid"] in abandoned:
            abandoned.discard(e["nodeid"])
        fixed.append(e)
    tests = compat.outcomes(fixed)
    for nid in abandoned:
        tests.pop(nid, None)
    for e in fixed:
        if e.get("collect"):
            tests[e["nodeid"]]["collect"] = True
    return tests


def _append(path, entry):
    with open(path, "a") as f:
        f.write(json.dumps(entry) + "\n")


def _signal_name(status):
    if status is not None and status < 0:
        try:
            return "signal %s" % signal.Signals(-status).name
        except ValueError:
            return "signal %d" % -status
    return "exit status %s" % status


def run_suite(
    impl,
    cwd,
    args,
    env,
    record,
    test_timeout=300,
    hang_grace=60,
    startup_grace=300,
    log=None,
    python=sys.executable,
    deadline=None,
    done_file=None,
    workers=0,
):
    """Run pytest `args` in `cwd` (impl "pygpu": under the alias; "pycuda":
    plain), recording into `record` (JSON lines, kept: a later call resumes
    from it).  A process that records nothing for test_timeout + hang_grace
    seconds is killed and its test counts as hung; a process that dies counts
    its test as crashed; either way the rest run in a new process.  At
    `deadline` (time.monotonic()) the process is killed and its test left for
    the next call.  With `workers` > 0, pytest-xdist runs that many test
    processes (a crash is then xdist's to report, and a hang kills every
    test in flight).  Returns (tests, complete)."""
    env = dict(env)
    env[compat.RECORD_ENV] = record
    done_file = done_file or record + ".done"
    env[compat.DONE_ENV] = done_file
    env[compat.TIMEOUT_ENV] = str(int(test_timeout))
    env["PYTHONPATH"] = os.pathsep.join(
        [HERE] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    )
    env.setdefault("PYTHONUNBUFFERED", "1")
    base = [python, "-m", "pytest", "-q", "-rN", "-p", "no:cacheprovider", "-p", "pycuda_compat"]
    base += ["-p", "pygpu.pycuda_alias"] if impl == "pygpu" else ["-p", "no:pygpu"]
    if workers:
        base += ["-n", str(int(workers))]
    status = None
    for _attempt in range(10000):
        before = suite_outcomes(compat._read_records(record))
        finished = [nid for nid, t in before.items() if not t.get("collect")]
        with open(done_file, "w") as f:
            f.write("".join(nid + "\n" for nid in finished))
        if deadline is not None and time.monotonic() >= deadline:
            return before, False
        output = tempfile.TemporaryFile()
        proc = subprocess.Popen(
            base + list(args),
            cwd=cwd,
            env=env,
            stdout=output,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        why = compat.watch(proc, record, test_timeout, hang_grace, startup_grace, deadline)
        status = proc.returncode
        output.seek(0)
        text = output.read().decode("utf-8", "replace")
        output.close()
        if log:
            log.write(text)
            log.flush()
        after = suite_outcomes(compat._read_records(record))
        unfinished = [
            nid
            for nid, t in after.items()
            if nid not in before and t["message"].startswith("did not finish")
        ]
        if why == "budget":
            for nid in unfinished:
                _append(record, {"nodeid": nid, "when": "abandon"})
            return suite_outcomes(compat._read_records(record)), False
        new = [nid for nid in after if nid not in before]
        if not unfinished:
            if not after or (not new and status not in (0, 1, 5)):
                # nothing ran at all: the process died before its first test
                err = _error_line(text)
                _append(
                    record,
                    {
                        "nodeid": "<collect>",
                        "when": "collect",
                        "outcome": "failed",
                        "message": "pytest ran no test (%s)%s"
                        % (_signal_name(status), ": " + err if err else ""),
                    },
                )
            break
        for nid in unfinished:
            if why == "hung":
                msg = "hung: killed after %d s without progress" % (test_timeout + hang_grace)
            else:
                msg = "crashed: the test process died (%s)" % _signal_name(status)
            _append(record, {"nodeid": nid, "when": "call", "outcome": "failed", "message": msg})
    return suite_outcomes(compat._read_records(record)), True


def _error_line(text):
    """The last line of pytest's output that names an exception (an
    INTERNALERROR's, a conftest's), without its prefixes."""
    for line in reversed(text.splitlines()):
        line = re.sub(r"^(INTERNALERROR>|E)\s+", "", line.strip())
        if re.match(r"^[\w.]*(Error|Exception|Interrupt)\b.*:", line):
            return line[:300]
    return ""


def suite_counts(tests):
    c = {"passed": 0, "failed": 0, "skipped": 0}
    for t in tests.values():
        c[t["outcome"]] += 1
    return c


def suite_gaps(pc, pg):
    """(gaps, wins): tests PyCUDA passes that pygpu does not (with pygpu's
    outcome and message; a test pygpu never ran takes its module's
    collection error), and the other way round."""
    gaps, wins = [], []
    for nid, t in sorted(pc.items()):
        if t.get("collect"):
            continue
        mine = pg.get(nid)
        if mine is None:
            mod = nid.split("::")[0]
            err = pg.get(mod) or pg.get("<collect>")
            out, msg = "not run", (err or {}).get("message", "")
        else:
            out, msg = mine["outcome"], mine["message"]
        if t["outcome"] == "passed" and out != "passed":
            gaps.append({"test": nid, "pygpu": out, "message": msg})
        elif t["outcome"] != "passed" and out == "passed":
            wins.append({"test": nid, "pycuda": t["outcome"], "message": t["message"]})
    return gaps, wins


def gap_kinds(gaps, top=15):
    """The gaps' messages, grouped (numbers and quoted values masked), most
    frequent first: [(count, message)]."""
    groups = {}
    for g in gaps:
        key = re.sub(r"0x[0-9a-fA-F]+|\d+(\.\d+)?", "N", g["message"])[:160]
        groups.setdefault(key, [0, g["message"][:200]])[0] += 1
    return sorted(((n, m) for n, m in groups.values()), key=lambda x: -x[0])[:top]


# ---------------------------------------------------------------------------
# PyCUDA's examples as programs


def example_imports(path):
    """Every module a program imports (dotted names), from its syntax tree;
    None if it does not parse."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            tree = ast.parse(f.read(), path)
    except (SyntaxError, ValueError):
        return None
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module)
            # from pycuda import gl: a submodule, maybe
            if node.module == "pycuda":
                names.update("pycuda." + a.name for a in node.names)
    names.discard("__future__")
    return sorted(names)


def needs_display(imports):
    hit = [m for m in imports for d in DISPLAY_MODULES if m == d or m.startswith(d + ".")]
    return sorted(set(hit))


def missing_modules(names, env, cwd):
    """The top-level modules (besides pycuda) that the interpreter with
    `env` cannot find."""
    tops = sorted({n.split(".")[0] for n in names} - {"pycuda"})
    if not tops:
        return []
    code = (
        "import importlib.util, json, sys\n"
        "out = []\n"
        "for n in json.loads(sys.argv[1]):\n"
        "    try:\n"
        "        ok = importlib.util.find_spec(n) is not None\n"
        "    except (ImportError, ValueError):\n"
        "        ok = False\n"
        "    if not ok:\n"
        "        out.append(n)\n"
        "print(json.dumps(out))\n"
    )
    p = subprocess.run(
        [sys.executable, "-c", code, json.dumps(tops)],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
    )
    if p.returncode != 0:
        return tops
    return json.loads(p.stdout.strip().splitlines()[-1])


def list_examples(folder):
    """The .py programs under folder (relative paths), sorted."""
    out = []
    for d, dirs, files in os.walk(folder):
        dirs.sort()
        for f in sorted(files):
            if f.endswith(".py"):
                out.append(os.path.relpath(os.path.join(d, f), folder))
    return sorted(out)


def run_program(impl, folder, rel, env, timeout, python=sys.executable):
    """Run one example; {"status", "stdout", "stderr", "seconds", "verdict"}
    with verdict "ok", "failed", "crashed" or "hung"."""
    prog = os.path.join(folder, rel)
    cmd = [python] + (["-m", "pygpu.pycuda_alias"] if impl == "pygpu" else []) + [prog]
    t0 = time.monotonic()
    proc = subprocess.Popen(
        cmd,
        cwd=os.path.dirname(prog),
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=timeout)
        hung = False
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        out, err = proc.communicate()
        hung = True
    status = proc.returncode
    verdict = "hung" if hung else "ok" if status == 0 else "crashed" if status < 0 else "failed"
    return {
        "status": status,
        "verdict": verdict,
        "stdout": out.decode("utf-8", "replace")[-20000:],
        "stderr": err.decode("utf-8", "replace")[-4000:],
        "seconds": round(time.monotonic() - t0, 2),
    }


_NUM = re.compile(r"0x[0-9a-fA-F]+|[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?|\b(?:nan|inf)\b")


def _split(line):
    """(text with the numbers masked, [numbers as strings])."""
    return _NUM.sub("#", line.rstrip()), _NUM.findall(line)


def _close(a, b, digits=5):
    if a == b:
        return True
    try:
        x, y = float(a), float(b)
    except ValueError:
        return False
    if math.isnan(x) or math.isnan(y):
        return math.isnan(x) and math.isnan(y)
    return abs(x - y) <= 10.0 ** (1 - digits) * max(abs(x), abs(y)) + 1e-12


def compare_output(ref1, ref2, mine):
    """Whether `mine` prints what PyCUDA printed: None if so, else the first
    difference (one line).  ref1 and ref2 are PyCUDA's two runs: lines
    are compared one to one with their numbers masked (the text must be
    equal); a number that PyCUDA prints the same in both runs must be the
    same in mine to 5 significant digits, one that differs between them
    (timings, random data, addresses) is not compared.  Where PyCUDA's
    two runs do not even agree on the text, nothing is compared."""
    r1, r2, m = (s.rstrip("\n").splitlines() for s in (ref1, ref2, mine))
    s1, s2 = [_split(x) for x in r1], [_split(x) for x in r2]
    if [t for t, _ in s1] != [t for t, _ in s2] or any(
        len(a[1]) != len(b[1]) for a, b in zip(s1, s2)
    ):
        return None
    if len(m) != len(r1):
        return "prints %d lines where PyCUDA prints %d" % (len(m), len(r1))
    for i, (line, (t1, n1), (_t2, n2)) in enumerate(zip(m, s1, s2)):
        t, n = _split(line)
        if t != t1 or len(n) != len(n1):
            return "line %d: %r where PyCUDA prints %r" % (
                i + 1,
                line.strip()[:120],
                r1[i].strip()[:120],
            )
        for a, b, c in zip(n1, n2, n):
            if a == b and not _close(a, c):
                return "line %d: %s where PyCUDA prints %s (%r)" % (
                    i + 1,
                    c,
                    a,
                    r1[i].strip()[:120],
                )
    return None


def examples_report(results):
    """Per program: PyCUDA's and pygpu's pass (1/0/None), why not."""
    rows = {}
    for rel, r in sorted(results.items()):
        row = {"skip": r.get("skip")}
        pc = r.get("pycuda")
        pg = r.get("pygpu")
        if pc:
            row["pycuda"] = 1 if pc[0]["verdict"] == "ok" else 0
            if not row["pycuda"]:
                row["pycuda_why"] = _why(pc[0])
        if pg:
            ok = pg["verdict"] == "ok"
            why = None if ok else _why(pg)
            if ok and pc and pc[0]["verdict"] == "ok":
                ref2 = pc[1] if len(pc) > 1 else pc[0]
                diff = compare_output(pc[0]["stdout"], ref2["stdout"], pg["stdout"])
                if diff:
                    ok, why = False, "prints differently: " + diff
            row["pygpu"] = 1 if ok else 0
            if why:
                row["pygpu_why"] = why
        rows[rel] = row
    return rows


def _why(run):
    if run["verdict"] == "hung":
        return "hung: killed after %.0f s" % run["seconds"]
    if run["verdict"] == "crashed":
        return "crashed (%s)" % _signal_name(run["status"])
    lines = [ln for ln in run["stderr"].strip().splitlines() if ln.strip()]
    return "exit status %s: %s" % (run["status"], lines[-1][:200] if lines else "")


# ---------------------------------------------------------------------------
# the report


def build_report(suite, examples, meta):
    rep = {"meta": meta, "reikna": {}, "examples": {}}
    pc, pg = suite.get("pycuda"), suite.get("pygpu")
    for impl, tests in (("pycuda", pc), ("pygpu", pg)):
        if tests is not None:
            rep["reikna"][impl] = {
                "counts": suite_counts(tests),
                "tests": tests,
                "complete": suite.get(impl + "_complete", True),
            }
    if pc is not None and pg is not None:
        rep["reikna"]["gaps"], rep["reikna"]["wins"] = suite_gaps(pc, pg)
    if examples:
        rep["examples"] = {"programs": examples_report(examples), "runs": examples}
    return rep


def _pct(c):
    return "%d / %d / %d" % (c["passed"], c["failed"], c["skipped"])


def table(rep):
    """The one table: per client, PyCUDA's pass count next to pygpu's."""
    lines = ["| client | PyCUDA | pygpu | PyCUDA passes, pygpu not |", "|---|---|---|---|"]
    r = rep.get("reikna") or {}
    if "pycuda" in r or "pygpu" in r:
        cells = []
        for impl in IMPLS:
            if impl in r:
                s = _pct(r[impl]["counts"]) + " passed/failed/skipped"
                if not r[impl].get("complete", True):
                    s += " (incomplete)"
                cells.append(s)
            else:
                cells.append("-")
        gaps = str(len(r["gaps"])) if "gaps" in r else "-"
        lines.append(
            "| reikna %s tests (`--api=cuda -m \"not perf\"`) | %s | %s | %s |"
            % (rep["meta"].get("reikna_version", REIKNA_VERSION), cells[0], cells[1], gaps)
        )
    progs = (rep.get("examples") or {}).get("programs") or {}
    if progs:
        ran = {rel: p for rel, p in progs.items() if not p.get("skip")}
        tot = {
            impl: [
                sum(p.get(impl) or 0 for p in ran.values()),
                sum(1 for p in ran.values() if impl in p),
            ]
            for impl in IMPLS
        }
        both = [
            rel
            for rel, p in ran.items()
            if p.get("pycuda") == 1 and "pygpu" in p and p["pygpu"] != 1
        ]
        lines.append(
            "| PyCUDA examples (%d run, %d skipped) | %s | %s | %s |"
            % (
                len(ran),
                len(progs) - len(ran),
                *("%d / %d ran" % tuple(tot[i]) if tot[i][1] else "-" for i in IMPLS),
                len(both) if any("pycuda" in p for p in ran.values()) else "-",
            )
        )
        for rel, p in progs.items():
            if p.get("skip"):
                lines.append("| &nbsp; `%s` | skipped: %s | | |" % (rel, p["skip"]))
                continue
            cells = []
            for impl in IMPLS:
                if impl not in p:
                    cells.append("-")
                else:
                    why = p.get(impl + "_why")
                    cells.append(
                        ("pass" if p[impl] else "FAIL")
                        + (" (%s)" % why.replace("|", "\\|")[:120] if why else "")
                    )
            gap = "yes" if p.get("pycuda") == 1 and p.get("pygpu") == 0 else ""
            lines.append("| &nbsp; `%s` | %s | %s | %s |" % (rel, cells[0], cells[1], gap))
    return "\n".join(lines)


def markdown(rep):
    m = rep["meta"]
    out = [
        "# PyCUDA's clients on pygpu",
        "",
        "reikna %s's own tests and PyCUDA %s's examples, unmodified; pygpu through the "
        "alias pycuda -> pygpu. %s."
        % (
            m.get("reikna_version", REIKNA_VERSION),
            m.get("pycuda_version", compat.VERSION),
            m.get("where", ""),
        ),
        "",
    ]
    for impl in IMPLS:
        if m.get(impl):
            out.append("%s: %s  " % (LABEL[impl], m[impl]))
    for note in m.get("notes", []):
        out.append("- " + note)
    out += ["", table(rep), ""]
    r = rep.get("reikna") or {}
    if r.get("gaps"):
        out += [
            "## reikna: PyCUDA passes, pygpu does not (%d)" % len(r["gaps"]),
            "",
            "Grouped by message:",
            "",
        ]
        for n, msg in gap_kinds(r["gaps"]):
            out.append("- %d x %s" % (n, msg.replace("|", "\\|")))
        out += ["", "| test | pygpu | message |", "|---|---|---|"]
        for g in r["gaps"]:
            out.append(
                "| `%s` | %s | %s |"
                % (g["test"], g["pygpu"], g["message"].replace("|", "\\|")[:200])
            )
        out.append("")
    if r.get("wins"):
        out += [
            "## reikna: pygpu passes, PyCUDA does not (%d)" % len(r["wins"]),
            "",
            "| test | PyCUDA | message |",
            "|---|---|---|",
        ]
        for g in r["wins"]:
            out.append(
                "| `%s` | %s | %s |"
                % (g["test"], g["pycuda"], g["message"].replace("|", "\\|")[:200])
            )
        out.append("")
    for impl in IMPLS:
        for nid, t in sorted((r.get(impl) or {}).get("tests", {}).items()):
            if t.get("collect"):
                out.append("reikna on %s: %s: %s  " % (LABEL[impl], nid, t["message"][:300]))
    return "\n".join(out) + "\n"


def write_report(rep, out):
    md = markdown(rep)
    if out:
        os.makedirs(out, exist_ok=True)
        with open(os.path.join(out, "pycuda-ecosystem.json"), "w") as f:
            json.dump(rep, f, indent=1, sort_keys=True)
        with open(os.path.join(out, "pycuda-ecosystem.md"), "w") as f:
            f.write(md)
    return md


# ---------------------------------------------------------------------------
# environments


def _prepend(env, key, *paths):
    env[key] = os.pathsep.join(
        [p for p in paths if p] + [p for p in env.get(key, "").split(os.pathsep) if p]
    )


def pygpu_env(env, cwd):
    """env in which pygpu and its alias import (this checkout's pygpu where
    none is installed); (env, line) or raises EcosystemError."""
    env = dict(env)
    code = "import pygpu, pygpu.pycuda_alias; print(pygpu.__file__)"
    ok, line = compat.probe(code, env, cwd)
    if not ok and os.path.isdir(os.path.join(ROOT, "pygpu")):
        _prepend(env, "PYTHONPATH", ROOT)
        ok, line = compat.probe(code, env, cwd)
    if not ok:
        raise EcosystemError("pygpu is not importable: %s" % line)
    return env, line


def pycuda_env(env, wheel_dir, work, cwd, notes):
    """env in which the real PyCUDA imports; (env, line) or raises."""
    check = (
        "import pycuda, pycuda.driver, os; assert not pycuda.__file__.startswith(%r); "
        "print(pycuda.VERSION_TEXT, os.path.dirname(pycuda.__file__))" % os.path.join(ROOT, "pygpu")
    )
    site = compat.install_wheels(wheel_dir, work) if wheel_dir else None
    penv = compat.pycuda_env(env, site)
    ok, line = compat.probe(check, penv, cwd)
    if (
        not ok
        and "libcurand" in line
        and wheel_dir
        and os.path.isdir(os.path.join(wheel_dir, "nocurand"))
    ):
        site = compat.install_wheels(wheel_dir, work, variant="nocurand")
        penv = compat.pycuda_env(env, site)
        ok, line = compat.probe(check, penv, cwd)
        if ok:
            notes.append("PyCUDA is the build without cuRAND (no libcurand.so.10 here)")
    if not ok:
        raise EcosystemError(
            "not importable (%s)%s"
            % (line, "" if wheel_dir else "; give PYCUDA_WHEEL_DIR=folder of its wheels")
        )
    return penv, line


def deps_env(env, wheel_dir, work):
    """env with the wheels of wheel_dir (reikna's and the examples'
    dependencies) installed into work/ and on PYTHONPATH."""
    env = dict(env)
    if wheel_dir:
        if not any(f.endswith(".whl") for f in os.listdir(wheel_dir)):
            raise EcosystemError("no wheels in %r" % wheel_dir)
        site = compat.install_wheels(wheel_dir, os.path.join(work, "deps"))
        _prepend(env, "PYTHONPATH", site)
    env["MPLBACKEND"] = "Agg"
    env.pop("DISPLAY", None)
    env.pop("WAYLAND_DISPLAY", None)
    return env


# ---------------------------------------------------------------------------


def main(argv=None):
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    env_ = os.environ.get
    ap.add_argument(
        "--fetch",
        metavar="DIR",
        default=None,
        help="download reikna's sdist and its dependencies' wheels into DIR, exit",
    )
    ap.add_argument(
        "--python-version",
        default=None,
        help="with --fetch: wheels for this Python (e.g. 3.12), x86_64 Linux",
    )
    ap.add_argument("--reikna-sdist", default=env_("REIKNA_SDIST") or None)
    ap.add_argument("--reikna-version", default=REIKNA_VERSION)
    ap.add_argument(
        "--wheel-dir",
        default=env_("ECOSYSTEM_WHEEL_DIR") or None,
        help="wheels of reikna's and the examples' dependencies (and reikna's "
        "sdist), installed with pip --no-index --target",
    )
    ap.add_argument("--pycuda-sdist", default=env_("PYCUDA_SDIST") or None)
    ap.add_argument("--pycuda-wheel-dir", default=env_("PYCUDA_WHEEL_DIR") or None)
    ap.add_argument(
        "--impl", choices=("both", "pygpu", "pycuda"), default=env_("ECOSYSTEM_IMPL") or "both"
    )
    ap.add_argument(
        "--clients",
        default=env_("ECOSYSTEM_CLIENTS") or ",".join(CLIENTS),
        help="reikna, examples, or both (default %(default)s)",
    )
    ap.add_argument(
        "--pytest-args",
        default=None,
        help="reikna's pytest arguments (default: %s)" % " ".join(REIKNA_ARGS),
    )
    ap.add_argument(
        "--examples",
        default=None,
        help="only these examples (comma-separated paths under examples/)",
    )
    ap.add_argument(
        "--out",
        default=env_("ECOSYSTEM_OUT") or None,
        help="folder for pycuda-ecosystem.json and .md",
    )
    ap.add_argument(
        "--baseline",
        default=env_("ECOSYSTEM_BASELINE") or None,
        help="an earlier pycuda-ecosystem.json: its results stand in for an "
        "implementation or client not run now",
    )
    ap.add_argument("--test-timeout", type=int, default=int(env_("ECOSYSTEM_TEST_TIMEOUT") or 300))
    ap.add_argument(
        "--example-timeout", type=int, default=int(env_("ECOSYSTEM_EXAMPLE_TIMEOUT") or 180)
    )
    ap.add_argument(
        "--time-budget",
        type=float,
        default=float(env_("ECOSYSTEM_BUDGET") or 0),
        help="stop cleanly after this many seconds (0: no limit); --resume goes on",
    )
    ap.add_argument(
        "--records",
        default=env_("ECOSYSTEM_RECORDS") or None,
        help="where the records live (default build/pycuda-ecosystem/records); "
        "a folder under $OUT brings them back from a device run",
    )
    ap.add_argument(
        "--workers",
        type=int,
        default=int(env_("ECOSYSTEM_WORKERS") or 0),
        help="run reikna's tests in this many processes (pytest-xdist; PyCUDA's "
        "nvcc compiles are the slow part)",
    )
    ap.add_argument(
        "--resume",
        action="store_true",
        default=env_("ECOSYSTEM_RESUME", "") not in ("", "0"),
        help="keep the records of an earlier (budget-stopped) run and go on",
    )
    ap.add_argument(
        "--log",
        default=env_("ECOSYSTEM_LOG") or None,
        help="pytest's and the programs' output (default "
        "build/pycuda-ecosystem/pycuda-ecosystem.log)",
    )
    ap.add_argument("--work", default=WORK, help=argparse.SUPPRESS)
    ap.add_argument("--reikna-dir", default=None, help=argparse.SUPPRESS)  # tests: no sdist
    ap.add_argument("--examples-dir", default=None, help=argparse.SUPPRESS)  # tests: no sdist
    args = ap.parse_args(argv)

    if args.fetch:
        try:
            names = fetch(args.fetch, args.python_version, args.reikna_version)
        except EcosystemError as e:
            print("pycuda-ecosystem: %s" % e, file=sys.stderr)
            return 2
        print("pycuda-ecosystem: fetched into %s: %s" % (args.fetch, ", ".join(names)))
        return 0

    reason = compat.gpu_reason()
    if reason is not None:
        print(
            "pycuda-ecosystem: not run: this machine has no usable GPU (%s). reikna's "
            "tests and PyCUDA's examples need one; run it on a CUDA machine." % reason
        )
        return 0
    t_start = time.monotonic()
    deadline = t_start + args.time_budget if args.time_budget > 0 else None
    clients = [c for c in args.clients.split(",") if c]
    bad = [c for c in clients if c not in CLIENTS]
    if bad:
        print(
            "pycuda-ecosystem: unknown client(s) %s (reikna, examples)" % ", ".join(bad),
            file=sys.stderr,
        )
        return 2
    impls = IMPLS if args.impl == "both" else (args.impl,)
    work = args.work
    records = args.records or os.path.join(work, "records")
    if not args.resume:
        shutil.rmtree(records, ignore_errors=True)
    os.makedirs(records, exist_ok=True)
    os.makedirs(work, exist_ok=True)
    out = args.out
    if out:
        os.makedirs(out, exist_ok=True)
    log = open(args.log or os.path.join(work, "pycuda-ecosystem.log"), "a")
    notes = []
    meta = {
        "reikna_version": args.reikna_version,
        "pycuda_version": compat.VERSION,
        "notes": notes,
        "python": sys.version.split()[0],
        "date": time.strftime("%Y-%m-%d"),
        "where": compat._where(),
    }
    suite, examples = {}, {}

    def report():
        return write_report(build_report(suite, examples, meta), out)

    try:
        base_env = deps_env(dict(os.environ), args.wheel_dir, work)
        envs = {}
        for impl in impls:
            try:
                if impl == "pygpu":
                    envs[impl], meta[impl] = pygpu_env(base_env, work)
                else:
                    envs[impl], meta[impl] = pycuda_env(
                        base_env, args.pycuda_wheel_dir, os.path.join(work, "pycuda"), work, notes
                    )
            except (EcosystemError, compat.CompatError) as e:
                notes.append("%s was not run: %s" % (LABEL[impl], e))
    except (EcosystemError, compat.CompatError) as e:
        print("pycuda-ecosystem: %s" % e, file=sys.stderr)
        return 2

    # reikna
    if "reikna" in clients and envs:
        try:
            if args.reikna_dir:
                rdir = args.reikna_dir
            else:
                sdist = find_reikna_sdist(
                    args.reikna_sdist, args.reikna_version, work, args.wheel_dir
                )
                src = os.path.join(work, "src")
                shutil.rmtree(src, ignore_errors=True)
                os.makedirs(src)
                rdir = unpack(sdist, src)
        except EcosystemError as e:
            print("pycuda-ecosystem: %s" % e, file=sys.stderr)
            return 2
        pargs = args.pytest_args.split() if args.pytest_args else list(REIKNA_ARGS)
        for impl in impls:
            if impl not in envs:
                continue
            t0 = time.monotonic()
            print("%s: reikna's tests ..." % LABEL[impl], flush=True)
            log.write("\n==== reikna on %s: pytest %s\n" % (impl, " ".join(pargs)))
            log.flush()
            tests, complete = run_suite(
                impl,
                rdir,
                pargs,
                envs[impl],
                os.path.join(records, "reikna-%s.jsonl" % impl),
                args.test_timeout,
                log=log,
                deadline=deadline,
                done_file=os.path.join(work, "reikna-%s.done" % impl),
                workers=args.workers,
            )
            suite[impl], suite[impl + "_complete"] = tests, complete
            c = suite_counts(tests)
            print(
                "        %d passed, %d failed, %d skipped in %.0f s%s"
                % (
                    c["passed"],
                    c["failed"],
                    c["skipped"],
                    time.monotonic() - t0,
                    "" if complete else " (stopped at the time budget: --resume goes on)",
                ),
                flush=True,
            )
            report()

    # PyCUDA's examples
    if "examples" in clients and envs:
        try:
            if args.examples_dir:
                edir = args.examples_dir
            else:
                psdist = compat.find_sdist(
                    args.pycuda_sdist, compat.VERSION, os.path.join(work, "pycuda")
                )
                src = os.path.join(work, "pycuda-src")
                shutil.rmtree(src, ignore_errors=True)
                os.makedirs(src)
                edir = os.path.join(unpack(psdist, src, only="examples"), "examples")
        except (EcosystemError, compat.CompatError) as e:
            print("pycuda-ecosystem: %s" % e, file=sys.stderr)
            return 2
        progs = list_examples(edir)
        if args.examples:
            want = [p for p in args.examples.split(",") if p]
            progs = [p for p in progs if p in want]
        rec_path = os.path.join(records, "examples.json")
        examples.update(json.load(open(rec_path)) if os.path.exists(rec_path) else {})
        probe_env = next(iter(envs.values()))
        for rel in progs:
            r = examples.setdefault(rel, {})
            imports = example_imports(os.path.join(edir, rel))
            if imports is None:
                r["skip"] = "does not parse (Python 2?)"
                continue
            disp = needs_display(imports)
            if disp:
                r["skip"] = "needs a display (%s)" % ", ".join(disp)
                continue
            miss = missing_modules(imports, probe_env, edir)
            if miss:
                r["skip"] = "needs %s, missing here" % ", ".join(miss)
                continue
            for impl in impls:
                if impl not in envs or impl in r:
                    continue
                if deadline is not None and time.monotonic() >= deadline:
                    break
                runs = 2 if impl == "pycuda" else 1
                got = []
                for _ in range(runs):
                    got.append(run_program(impl, edir, rel, envs[impl], args.example_timeout))
                    if got[0]["verdict"] != "ok":
                        break
                r[impl] = got if impl == "pycuda" else got[0]
                log.write(
                    "\n==== %s on %s: %s\n%s\n%s\n"
                    % (
                        rel,
                        impl,
                        got[0]["verdict"],
                        got[0]["stdout"][-3000:],
                        got[0]["stderr"][-3000:],
                    )
                )
                log.flush()
                print("%s: %s: %s" % (LABEL[impl], rel, got[0]["verdict"]), flush=True)
            with open(rec_path, "w") as f:
                json.dump(examples, f)
        for rel in list(examples):
            if rel not in progs:
                del examples[rel]
        report()

    if args.baseline:
        with open(args.baseline) as f:
            base = json.load(f)
        for impl in IMPLS:
            if impl not in suite and impl in base.get("reikna", {}):
                suite[impl] = base["reikna"][impl]["tests"]
                suite[impl + "_complete"] = base["reikna"][impl].get("complete", True)
                notes.append(
                    "%s's reikna results are from %s (%s)"
                    % (LABEL[impl], args.baseline, base.get("meta", {}).get("date", "?"))
                )
        old = base.get("examples", {}).get("runs", {})
        used = False
        for rel, r in old.items():
            mine = examples.setdefault(rel, {})
            for key in ("skip",) + IMPLS:
                if key in r and key not in mine:
                    mine[key] = r[key]
                    used = True
        if used:
            notes.append("some examples' results are from %s" % args.baseline)
    log.close()
    md = report()
    print()
    print(table(build_report(suite, examples, meta)))
    r = build_report(suite, examples, meta)["reikna"]
    if r.get("gaps"):
        print("\nreikna: PyCUDA passes, pygpu does not (%d); most frequent:" % len(r["gaps"]))
        for n, msg in gap_kinds(r["gaps"], top=8):
            print("  %4d x %s" % (n, msg[:150]))
    for n in notes:
        print("note: " + n)
    if deadline is not None and time.monotonic() >= deadline:
        print(
            "\nstopped at the time budget (%.0f s): run again with --resume to go on"
            % args.time_budget
        )
    if out:
        print("\nwrote %s" % os.path.join(out, "pycuda-ecosystem.md"))
    del md
    return 0


if __name__ == "__main__":
    sys.exit(main())
