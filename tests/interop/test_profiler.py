"""pygpu.profiler: NVTX ranges and marks, seen by an NVTX injection library
(tests/support/nvtx_record.c, the way Nsight Systems attaches), and
cuProfilerStart/Stop against the stand-in.  Their cost is measured in
benchmarks/profiler.py, not asserted here."""

import importlib.util
import os
import subprocess
import sys
import textwrap

import pytest

from pygpu import _driver, profiler

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # tests/
ROOT = os.path.dirname(HERE)
RECORDER = os.path.join(HERE, "support", "nvtx_record.c")


def nvtx_include_dir():
    spec = importlib.util.spec_from_file_location(
        "_pygpu_build_backend", os.path.join(ROOT, "tools", "pygpu_build_backend.py")
    )
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.nvtx_include_dir()


def build_recorder(folder):
    """Compile tests/support/nvtx_record.c into folder; returns the library's path."""
    inc = nvtx_include_dir()
    if inc is None:
        pytest.skip("no NVTX headers to build the recording injection library with")
    out = os.path.join(str(folder), "libnvtx_record.so")
    r = subprocess.run(
        [
            os.environ.get("CC", "cc"),
            "-shared",
            "-fPIC",
            "-O1",
            "-std=gnu11",
            "-Wall",
            "-Werror",
            "-I",
            inc,
            "-o",
            out,
            RECORDER,
            "-lpthread",
        ],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stderr
    return out


def run_recorded(tmp_path, code):
    """Run code in a new interpreter with the recorder attached; returns
    (stdout, the recorded lines)."""
    lib = build_recorder(tmp_path)
    record = tmp_path / "events.txt"
    env = dict(os.environ, NVTX_INJECTION64_PATH=lib, NVTX_RECORD_FILE=str(record))
    r = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    lines = record.read_text().splitlines() if record.exists() else []
    return r.stdout, lines


needs_nvtx = pytest.mark.skipif(
    not profiler.NVTX_AVAILABLE, reason="pygpu was built without the NVTX headers"
)

SCRIPT = """
    import threading
    from pygpu import profiler as p
    print("attached", p.attached())
    print("main", threading.get_native_id())
    with p.time_range("outer", "green") as r:
        assert r.name == "outer"
        with p.time_range("inner", 0x123456):
            p.mark("m1", "#0000ff")
        try:
            with p.time_range("boom"):
                raise KeyError("x")
        except KeyError:
            pass

    @p.time_range("deco", color="red")
    def f(n):
        return f(n - 1) + 1 if n else 0
    assert f(2) == 2 and f.__name__ == "f"

    @p.time_range("fails")
    def g():
        raise ValueError("from g")
    try:
        g()
    except ValueError as e:
        assert str(e) == "from g"
    print("depth", p.range_push("manual", 0x80FF0000), p.range_pop())

    barrier = threading.Barrier(4)
    ids = {}
    def worker(i):
        barrier.wait()          # all alive at once: their thread ids differ
        ids[i] = threading.get_native_id()
        with p.time_range("t%d" % i):
            for k in range(20):
                with p.time_range("t%d.%d" % (i, k)):
                    p.mark("t%d.m%d" % (i, k))
        barrier.wait()
    ts = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    for t in ts: t.start()
    for t in ts: t.join()
    for i in sorted(ids):
        print("thread", i, ids[i])
"""


def events_by_thread(lines):
    out = {}
    for line in lines:
        parts = line.split(" ", 5 if line.startswith("push") else 4)
        if parts[0] in ("push", "pop", "mark"):
            out.setdefault(int(parts[1]), []).append(parts)
    return out


@needs_nvtx
def test_ranges_reach_an_attached_profiler_in_order(tmp_path):
    out, lines = run_recorded(tmp_path, SCRIPT)
    info = [line.split() for line in out.splitlines()]
    assert info[0] == ["attached", "True"]
    main = int(info[1][1])
    assert lines[:2] == ["init", "domain pygpu"], lines[:5]
    assert lines.count("domain pygpu") == 1
    by = events_by_thread(lines)
    ev = [" ".join(e[:1] + e[2:]) for e in by[main]]
    assert ev == [
        "push pygpu 0 ff76b900 outer",
        "push pygpu 1 ff123456 inner",
        "mark pygpu ff0000ff m1",
        "pop pygpu 1",
        "push pygpu 1 - boom",
        "pop pygpu 1",  # the exception popped it
        "pop pygpu 0",
        "push pygpu 0 ffd62728 deco",
        "push pygpu 1 ffd62728 deco",
        "push pygpu 2 ffd62728 deco",
        "pop pygpu 2",
        "pop pygpu 1",
        "pop pygpu 0",
        "push pygpu 0 - fails",
        "pop pygpu 0",
        "push pygpu 0 80ff0000 manual",
        "pop pygpu 0",
    ], ev
    assert ["depth", "0", "0"] in info  # the tool's depths reach range_push/pop
    workers = {int(x[1]): int(x[2]) for x in info if x[0] == "thread"}
    assert len(workers) == 4 and len(set(workers.values())) == 4
    for i, tid in workers.items():
        ev = [" ".join(e[:1] + e[2:]) for e in by[tid]]
        want = ["push pygpu 0 - t%d" % i]
        for k in range(20):
            want += [
                "push pygpu 1 - t%d.%d" % (i, k),
                "mark pygpu - t%d.m%d" % (i, k),
                "pop pygpu 1",
            ]
        want += ["pop pygpu 0"]
        assert ev == want, (i, ev[:6])
    assert set(by) == {main} | set(workers.values())


@needs_nvtx
def test_annotate_all_names_compiles(tmp_path):
    out, lines = run_recorded(
        tmp_path,
        """
        from pygpu import compiler, profiler
        src = 'extern "C" __global__ void k(float *p) { p[0] = 1; }'
        compiler.compile(src, arch="compute_80", target="ptx", cache_dir=False)
        profiler.annotate_all(True)
        assert profiler.annotating()
        compiler.compile(src, arch="compute_80", target="ptx", cache_dir=False, name="mine.cu")
        profiler.annotate_all(False)
        compiler.compile(src + " ", arch="compute_80", target="ptx", cache_dir=False)
    """,
    )
    pushes = [line.split(" ", 5)[5] for line in lines if line.startswith("push")]
    assert pushes == ["compile mine.cu"], lines


@needs_nvtx
def test_pygpu_nvtx_env_turns_annotation_on(tmp_path):
    lib = build_recorder(tmp_path)
    env = dict(
        os.environ, NVTX_INJECTION64_PATH=lib, PYGPU_NVTX="1", NVTX_RECORD_FILE=str(tmp_path / "ev")
    )
    r = subprocess.run(
        [sys.executable, "-c", "from pygpu import profiler; print(profiler.annotating())"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0 and r.stdout == "True\n", r.stderr


def test_no_profiler_attached_in_this_process():
    if os.environ.get("NVTX_INJECTION64_PATH"):
        pytest.skip("a profiler is attached to this test run")
    assert profiler.attached() is False
    with profiler.time_range("quiet"):
        profiler.mark("nothing")
    assert profiler.range_push("x") < 0 and profiler.range_pop() < 0


def test_range_is_a_reusable_context_manager_and_decorator():
    r = profiler.time_range("step", color=0x00FF00)
    assert r.name == "step" and r.color == 0xFF00FF00
    assert repr(r) == "time_range('step', color=0xff00ff00)"
    assert (
        repr(profiler.time_range("n")) == "time_range('n')"
        and profiler.time_range("n").color is None
    )
    with r as same:
        with r:
            assert same is r
    calls = []

    @r
    def work(a, b=2):
        "doc"
        calls.append((a, b))
        return a * b

    assert work(3) == 6 and work(2, b=5) == 10 and calls == [(3, 2), (2, 5)]
    assert work.__name__ == "work" and work.__doc__ == "doc" and work.__wrapped__ is not None
    with pytest.raises(ZeroDivisionError, match="division by zero"):
        with profiler.time_range("err"):
            1 / 0


@pytest.mark.parametrize(
    "color, argb",
    [
        ("green", 0xFF76B900),
        ("#102030", 0xFF102030),
        (0x10203040, 0x10203040),
        (0xABCDEF, 0xFFABCDEF),
        (0, 0xFF000000),
        (None, None),
    ],
)
def test_colors(color, argb):
    assert profiler.time_range("c", color).color == argb
    profiler.mark("c", color)


@pytest.mark.parametrize(
    "args, exc, match",
    [
        ((b"x",), TypeError, "a range or mark name must be a str, not bytes"),
        ((None,), TypeError, "a range or mark name must be a str, not NoneType"),
        (("a\0b",), ValueError, "cannot contain a NUL character"),
        (("x", "mauve"), ValueError, "unknown color 'mauve'"),
        (("x", "#12345g"), ValueError, "unknown color '#12345g'"),
        (("x", -1), ValueError, r"color must be 0xRRGGBB or 0xAARRGGBB"),
        (("x", 1 << 32), ValueError, r"color must be 0xRRGGBB or 0xAARRGGBB"),
        (("x", 1 << 80), ValueError, r"color must be 0xRRGGBB or 0xAARRGGBB"),
        (("x", 1.5), TypeError, "color must be None, an int 0xRRGGBB or a str, not float"),
        (("x", True), TypeError, "color must be None, an int 0xRRGGBB or a str, not bool"),
    ],
)
def test_bad_names_and_colors(args, exc, match):
    with pytest.raises(exc, match=match):
        profiler.time_range(*args)
    with pytest.raises(exc, match=match):
        profiler.mark(*args)
    with pytest.raises(exc, match=match):
        profiler.range_push(*args)


def test_decorator_misuse():
    r = profiler.time_range("d")
    for args, kwargs in [((), {}), ((1,), {}), ((len, len), {}), ((len,), {"x": 1})]:
        with pytest.raises(TypeError, match="a time_range decorates one function"):
            r(*args, **kwargs)
    with pytest.raises(TypeError, match="missing required argument 'name'|'name'"):
        profiler.time_range()


def test_range_object_is_not_mutable():
    r = profiler.time_range("fixed")
    with pytest.raises(AttributeError):
        r.name = "other"

    class Sub(profiler.time_range):  # an acceptable base, as every type (test_subclass.py)
        pass

    with pytest.raises(AttributeError):
        Sub("fixed").name = "other"


# ---- cuProfilerStart/Stop ----


@pytest.mark.standin
def test_start_stop_against_the_standin(standin, ctx):
    profiler.start()
    assert standin.lib.fakecuda_live(b"profiler") == 1
    profiler.start()  # again: no error
    profiler.stop()
    assert standin.lib.fakecuda_live(b"profiler") == 0
    import pygpu.driver as cuda

    standin.fail("cuProfilerStart", 1, 201)
    with pytest.raises(
        cuda.LogicError, match="cuProfilerStart failed: CUDA_ERROR_INVALID_CONTEXT"
    ) as ei:
        profiler.start()
    assert ei.value.routine == "cuProfilerStart"
    assert standin.lib.fakecuda_live(b"profiler") == 0


@pytest.mark.standin
def test_start_without_the_entry_point():
    code = textwrap.dedent("""
        import pygpu.driver as cuda
        from pygpu import profiler
        try:
            profiler.start()
        except cuda.LogicError as e:
            print(type(e).__name__, e)
    """)
    env = dict(os.environ, FAKECUDA_HIDE="cuProfilerStart")
    r = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout == "LogicError cuProfilerStart is not available in this CUDA driver\n"


def test_start_without_a_driver(monkeypatch):
    if _driver._driver_loaded():
        pytest.skip("the driver is loaded in this process")
    code = "from pygpu import profiler\nprofiler.start()"
    env = dict(os.environ, PYGPU_LIBCUDA="/nonexistent/libcuda.so.1")
    r = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60
    )
    assert r.returncode == 1
    assert (
        "CudaUnavailableError: no CUDA driver: could not load /nonexistent/libcuda.so.1" in r.stderr
    ), r.stderr
