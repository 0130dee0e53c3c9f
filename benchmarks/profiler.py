"""What an NVTX range costs: pygpu.profiler.time_range and mark, with no
profiler attached (the goal: under 0.2 us each) and with a counting NVTX
injection library attached (tests/support/nvtx_record.c, writing each event to a
file, so an upper bound of a real tool's cost), next to an empty `with`.
NVTX is a CPU-side API: no GPU is needed.

    python3 benchmarks/profiler.py [--child]
"""

import os
import subprocess
import sys
import tempfile
import timeit

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
N = 200000


def measure():
    import contextlib
    from pygpu import profiler

    r = profiler.time_range("bench")
    null = contextlib.nullcontext()
    g = {
        "r": r,
        "tr": profiler.time_range,
        "mark": profiler.mark,
        "null": null,
        "push": profiler.range_push,
        "pop": profiler.range_pop,
    }

    @profiler.time_range("deco")
    def deco():
        pass

    def plain():
        pass

    g["deco"], g["plain"] = deco, plain
    cases = [
        ("empty with (nullcontext)", "with null: pass"),
        ("with r: (a made range)", "with r: pass"),
        ("with time_range('x'):", "with tr('x'): pass"),
        ("with time_range('x', 'green'):", "with tr('x', 'green'): pass"),
        ("mark('x')", "mark('x')"),
        ("range_push + range_pop", "push('x'); pop()"),
        ("decorated call - plain call", None),
    ]
    out = []
    for name, stmt in cases:
        if stmt is None:
            d = min(timeit.repeat("deco()", globals=g, number=N, repeat=5))
            p = min(timeit.repeat("plain()", globals=g, number=N, repeat=5))
            out.append((name, (d - p) / N * 1e6))
        else:
            out.append((name, min(timeit.repeat(stmt, globals=g, number=N, repeat=5)) / N * 1e6))
    return profiler.attached(), out


def child():
    attached, rows = measure()
    print(attached)
    for name, us in rows:
        print("%s\t%.4f" % (name, us))


def run(env):
    r = subprocess.run(
        [sys.executable, __file__, "--child"], env=env, capture_output=True, text=True, timeout=600
    )
    if r.returncode != 0:
        sys.exit(r.stderr)
    lines = r.stdout.splitlines()
    return lines[0] == "True", [tuple(line.split("\t")) for line in lines[1:]]


def main():
    from pygpu import profiler

    print("NVTX compiled in: %s" % profiler.NVTX_AVAILABLE)
    env = {k: v for k, v in os.environ.items() if k != "NVTX_INJECTION64_PATH"}
    attached, quiet = run(env)
    counted = None
    with tempfile.TemporaryDirectory() as d:
        sys.path.insert(0, os.path.join(ROOT, "tests"))
        try:
            import test_profiler

            lib = test_profiler.build_recorder(d)
        except BaseException as e:  # pytest.skip is a BaseException
            print("(no recording injection library: %s)" % e)
            lib = None
        if lib is not None:
            env2 = dict(env, NVTX_INJECTION64_PATH=lib, NVTX_RECORD_FILE=os.path.join(d, "ev"))
            att2, counted = run(env2)
            assert att2, "the injection library did not attach"
    assert not attached
    print("\n%-34s %14s %16s" % ("us per operation", "no profiler", "recording tool"))
    for i, (name, us) in enumerate(quiet):
        tool = "%16.3f" % float(counted[i][1]) if counted else "%16s" % "-"
        print("%-34s %14.3f %s" % (name, float(us), tool))
    print("\n(a range is one enter plus one exit; goal: under 0.2 us each with no profiler)")


if __name__ == "__main__":
    if sys.argv[1:] == ["--child"]:
        child()
    else:
        main()
