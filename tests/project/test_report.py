"""python -m pygpu's report (pygpu/__main__.py): --json, the sections, the
whole NVRTC error, and a source tree without a built extension (issue 33,
"Packaging and diagnostics").  No driver or GPU needed."""

import io
import json
import os
import shutil
import subprocess
import sys
import textwrap


from pygpu import __main__ as diag

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SECTIONS = ["pygpu", "driver", "system", "nvrtc", "nvcc", "cache", "headers"]


def _run(args, tmp_path, **env):
    return subprocess.run(
        [sys.executable, "-m", "pygpu"] + args,
        capture_output=True,
        text=True,
        timeout=300,
        env=dict(
            os.environ,
            PYGPU_LIBCUDA=str(tmp_path / "no-libcuda.so"),
            PYGPU_CACHE_DIR=str(tmp_path / "cache"),
            **env,
        ),
    )


def test_json_report_without_a_driver(tmp_path):
    import pygpu

    r = _run(["--json"], tmp_path)
    assert r.returncode == 0, r.stderr
    facts = json.loads(r.stdout)
    assert list(facts) == SECTIONS + ["todo"], list(facts)
    p = facts["pygpu"]
    assert p["version"] == pygpu.__version__ and p["extension_error"] is None
    assert p["python"] == "%d.%d.%d" % sys.version_info[:3]
    assert p["extension"].endswith(".so") and p["cuda_headers"].count(".") == 1
    # the other branches' sections: NVML's state (or why there is none), nvcc's
    assert facts["system"]["lines"] and all(isinstance(x, str) for x in facts["system"]["lines"])
    n = facts["nvcc"]
    assert n["env"] == "PYGPU_COMPILER" and n["backend"] in ("nvrtc", "nvcc", None)
    assert (n["path"] is None) == (n["version"] is None and n["error"] is None) or n["error"]
    d = facts["driver"]
    assert d["found"] is False and d["version"] is None and d["devices"] == []
    assert d["error"].startswith("CudaUnavailableError: ") and "no-libcuda.so" in d["error"]
    n = facts["nvrtc"]
    assert set(n) >= {"found", "version", "library", "archs", "error"}
    c = facts["cache"]
    assert c["dir"] == str(tmp_path / "cache") and c["entries"] == 0 and c["error"] is None
    h = facts["headers"]
    assert set(h) >= {"include_dirs", "arch", "compiles"}
    if n["found"]:
        assert set(h["compiles"]) == set(diag.HEADERS)
    assert any(t.startswith("no CUDA driver: install the NVIDIA driver") for t in facts["todo"])


def test_text_and_json_say_the_same(tmp_path, monkeypatch):
    monkeypatch.setenv("PYGPU_LIBCUDA", str(tmp_path / "none.so"))
    monkeypatch.setenv("PYGPU_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(diag, "probe_header", lambda h, arch: None)  # no compiles
    facts = diag.collect()
    json.dumps(facts)  # plain JSON throughout
    out = io.StringIO()
    todo = diag.report(out, facts=facts)
    text = out.getvalue()
    assert todo == facts["todo"]
    assert text.startswith("pygpu %s  (%s)" % (facts["pygpu"]["version"], facts["pygpu"]["path"]))
    # (in-process: a driver this process loaded before stays loaded, whatever
    # PYGPU_LIBCUDA says now; the subprocess tests see none)
    d = facts["driver"]
    if d["found"]:
        assert "\ndriver: " in text and d["error"] is None
    else:
        assert "driver: not found (%s)" % d["error"] in text
    for t in todo:
        assert "  - " + t in text


def test_help_and_unknown_arguments(tmp_path):
    r = _run(["--help"], tmp_path)
    assert r.returncode == 0 and "--json" in r.stdout, r.stdout
    r = _run(["--jsn"], tmp_path)
    assert r.returncode == 2 and "unknown argument --jsn" in r.stderr, r.stderr


def test_a_section_is_one_entry_of_a_dict(monkeypatch):
    # how another section (NVML's "system") joins: registered in order, in
    # the text and in the JSON; one that raises is reported, the rest goes on
    monkeypatch.setattr(diag, "SECTIONS", dict(diag.SECTIONS))
    monkeypatch.setattr(diag, "probe_header", lambda h, arch: None)  # no compiles
    monkeypatch.setenv("PYGPU_LIBCUDA", "/nonexistent/libcuda.so")

    @diag.section("extra", lambda f: ["extra: %d GPUs, %s" % (f["n"], f["what"])])
    def _extra(report):
        assert "found" in report.sections["driver"]  # earlier sections are there
        report.todo.append("extra: do this")
        return {"n": 0, "what": "nothing"}

    @diag.section("broken", lambda f: ["never"])
    def _broken(report):
        raise OSError("cannot read /dev/nvidiactl")

    @diag.section("early", lambda f: ["early: %s" % f["ok"]], after="driver")
    def _early(report):
        assert "nvrtc" not in report.sections
        return {"ok": True}

    facts = diag.collect()
    assert list(facts)[:3] == ["pygpu", "driver", "early"]
    assert list(facts)[-3:] == ["extra", "broken", "todo"]
    assert facts["extra"] == {"n": 0, "what": "nothing"} and "extra: do this" in facts["todo"]
    assert facts["broken"] == {"error": "OSError: cannot read /dev/nvidiactl"}
    out = io.StringIO()
    diag.report(out, facts=facts)
    text = out.getvalue()
    assert "\nextra: 0 GPUs, nothing\n" in text
    assert "\nbroken: could not be checked (OSError: cannot read /dev/nvidiactl)\n" in text
    assert text.index("CUDA headers") < text.index("extra:") < text.index("to do:")
    assert text.index("driver: ") < text.index("\nearly: True\n") < text.index("NVRTC: ")


NO_NVRTC = textwrap.dedent(
    """
    import json, sys
    from pygpu import _loader, __main__ as diag
    # only places that hold no NVRTC: the real search's failure, from the C loader
    _loader.nvrtc_candidates = lambda *a, **k: ["/nope/libnvrtc.so.13", "/also/not/here.so"]
    _loader.pathfinder = lambda: None
    if sys.argv[1:] == ["--json"]:
        print(json.dumps(diag.collect()))
    else:
        diag.report()
    """
)


def test_without_nvrtc_the_whole_error_and_one_advice(tmp_path):
    env = dict(os.environ, PYGPU_LIBCUDA=str(tmp_path / "none.so"), PYGPU_CACHE_DIR=str(tmp_path))
    env.pop("PYGPU_NVRTC", None)
    r = subprocess.run(
        [sys.executable, "-c", NO_NVRTC], capture_output=True, text=True, env=env, timeout=300
    )
    assert r.returncode == 0, r.stderr
    out = r.stdout
    # every place tried is kept (it was cut to the first line)
    assert "NVRTC: not found (CudaUnavailableError: NVRTC (the CUDA runtime compiler) " in out, out
    assert "    /nope/libnvrtc.so.13: " in out and "    /also/not/here.so: " in out, out
    # the exception and the to-do line recommend the same thing: the [nvrtc] extra
    assert "To compile kernels: " + diag.NVRTC_ADVICE + ")" in out, out
    assert "  - no NVRTC, so no compiling: " + diag.NVRTC_ADVICE + "\n" in out, out
    assert "nvidia-cuda-nvrtc" not in out
    assert "pip install 'cuda-toolkit[nvrtc,cudart,cccl]>=13.0,<14' (" in diag.NVRTC_ADVICE
    r = subprocess.run(
        [sys.executable, "-c", NO_NVRTC, "--json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    facts = json.loads(r.stdout)
    assert facts["nvrtc"]["found"] is False
    err = facts["nvrtc"]["error"]
    assert "/nope/libnvrtc.so.13" in err and "/also/not/here.so" in err and diag.NVRTC_ADVICE in err
    assert facts["headers"]["arch"] is None and facts["headers"]["compiles"] == {}


# ---- a source tree without a built extension


def _copy_package(dest, source_tree=True, extra_so=None):
    """pygpu's package folder without any built extension, in dest (with
    the build files beside it when source_tree): what a clone is after
    `pip install .`."""
    shutil.copytree(
        os.path.join(ROOT, "pygpu"),
        dest / "pygpu",
        ignore=shutil.ignore_patterns("*.so", "__pycache__"),
    )
    if source_tree:
        for f in ("setup.py", "pyproject.toml"):
            shutil.copy(os.path.join(ROOT, f), dest / f)
        (dest / "src").mkdir()
    if extra_so:
        (dest / "pygpu" / extra_so).write_bytes(b"not for this Python")
    # NumPy's folder on the path, not site-packages' .pth files (-S): an
    # editable install's finder would find the checkout's extension
    import numpy

    return dict(
        os.environ,
        PYTHONPATH=os.pathsep.join([str(dest), os.path.dirname(os.path.dirname(numpy.__file__))]),
    )


def _py(code, env, cwd, *args):
    return subprocess.run(
        [sys.executable, "-S"] + list(args) + (["-c", code] if code else []),
        capture_output=True,
        text=True,
        env=env,
        cwd=str(cwd),
        timeout=300,
    )


def test_import_from_a_source_tree_says_so(tmp_path):
    env = _copy_package(tmp_path)
    # import pygpu alone loads no extension: it works
    r = _py("import pygpu; print(pygpu.__file__)", env, tmp_path)
    assert r.returncode == 0 and r.stdout.startswith(str(tmp_path)), r.stderr
    for code in (
        "import pygpu.driver",
        "from pygpu import _driver",
        "from pygpu._driver import Error",
        "import pygpu._driver",
    ):
        r = _py(code, env, tmp_path)
        assert r.returncode == 1, (code, r.stdout, r.stderr)
        last = r.stderr.strip().splitlines()[-1]
        assert last.startswith("ImportError: cannot import pygpu._driver, pygpu's C extension: ")
        assert "you are importing pygpu from its source directory %s" % tmp_path in last, last
        assert "run Python from another directory" in last, last
        assert "cd %s && %s -m pip install -e ." % (tmp_path, sys.executable) in last, last
        assert "cannot import name" not in r.stderr


def test_python_m_pygpu_in_a_source_tree(tmp_path):
    env = _copy_package(tmp_path)
    r = _py(None, env, tmp_path, "-m", "pygpu")
    assert r.returncode == 1, r.stderr
    assert "Traceback" not in r.stderr, r.stderr
    assert r.stdout.startswith("pygpu ")
    assert "C extension: not importable (cannot import pygpu._driver" in r.stdout, r.stdout
    assert "source directory %s" % tmp_path in r.stdout
    assert "driver: not checked (pygpu's C extension is not importable)" in r.stdout
    r = _py(None, env, tmp_path, "-m", "pygpu", "--json")
    assert r.returncode == 1, r.stderr
    facts = json.loads(r.stdout)
    assert facts["pygpu"]["extension"] is None
    assert "pip install -e ." in facts["pygpu"]["extension_error"]
    assert facts["todo"] == [facts["pygpu"]["extension_error"]]
    assert facts["driver"]["skipped"] and facts["driver"]["found"] is False


def test_an_extension_built_for_another_python_is_named(tmp_path):
    env = _copy_package(tmp_path, extra_so="_driver.cpython-30-x86_64-linux-gnu.so")
    r = _py("import pygpu.driver", env, tmp_path)
    last = r.stderr.strip().splitlines()[-1]
    assert "not built for this Python" in last and "_driver.cpython-30-x86_64-linux-gnu.so" in last
    assert "Python %d.%d (%s) needs _driver." % (sys.version_info[:2] + (sys.executable,)) in last


def test_an_incomplete_install_is_not_called_a_source_tree(tmp_path):
    env = _copy_package(tmp_path, source_tree=False)
    r = _py("import pygpu.driver", env, tmp_path)
    last = r.stderr.strip().splitlines()[-1]
    assert "source directory" not in last, last
    assert "pygpu was imported from %s" % (tmp_path / "pygpu") in last, last
    assert "-m pip install --force-reinstall" in last, last


def test_the_finder_answers_only_for_the_extension():
    import importlib.util

    import pygpu

    finders = [f for f in sys.meta_path if getattr(f, "_pygpu_finder", False)]
    # appended at import: after every finder there was then (here, pytest's
    # and the editable install's); one only
    assert len(finders) == 1
    assert importlib.util.find_spec("pygpu_no_such_module") is None
    assert importlib.util.find_spec("pygpu.no_such_module") is None
    pygpu._install_missing_extension_finder()  # as a reload of pygpu does: still one
    assert len([f for f in sys.meta_path if getattr(f, "_pygpu_finder", False)]) == 1
