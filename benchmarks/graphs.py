"""CUDA graphs: a chain of 100 small kernels, replayed, against the same
launches made eagerly, the same graph built and replayed from C, and
cuda.core's graph builder.

    python3 benchmarks/graphs.py [--nodes 100] [--replays 200] [--json out.json]

Every kernel is args3(float *p, int n, float a) <<<1, 32>>> (three
arguments, no work), so the figures are the cost of getting kernels onto the
GPU.  Measured, each the median of several bursts:

  replay_us_per_node  pygpu GraphExec.launch() of the 100-node graph, replays
                      times, then one synchronize; / (replays x nodes)
  eager_us_per_launch the same 100 launches through Function.__call__ on the
                      same stream, then one synchronize
  c_replay_us_per_node  the same graph built and replayed with cuGraph* from C
                      (benchmarks/graphs_c.c, built here with cc, in-process)
  build_ms            Graph() + 100 add_kernel_node (C: cuGraphCreate + 100
                      cuGraphAddKernelNode; cuda.core: capture 100 launch()es
                      into a GraphBuilder)
  instantiate_ms      Graph.instantiate() (C: cuGraphInstantiateWithFlags;
                      cuda.core: GraphBuilder.complete())
  update_ms           new arguments for all 100 nodes: 100
                      set_kernel_node_params (C: 100
                      cuGraphExecKernelNodeSetParams); and a whole-graph
                      update from a rebuilt graph (cuda.core: Graph.update()
                      from a rebuilt builder, its only update)

The goal (issue 15) is replay <= 1.0 us a node.  docs/graphs.md explains.
"""

import argparse
import ctypes
import json
import os
import statistics
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ARGS3 = 'extern "C" __global__ void args3(float *p, int n, float a) { if (n < 0) p[0] = a; }\n'


def median_s(fn, reps=7):
    ts = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return statistics.median(ts)


def cuda_root():
    for r in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if r and os.path.exists(os.path.join(r, "include", "cuda.h")):
            return r
    return "/usr/local/cuda"


def build_c():
    root = cuda_root()
    out = os.path.join(HERE, "build")
    os.makedirs(out, exist_ok=True)
    so = os.path.join(out, "graphs_c.so")
    libdirs = [os.path.join(root, "lib64"), os.path.join(root, "lib64", "stubs")]
    subprocess.run(
        [
            "cc",
            "-O2",
            "-shared",
            "-fPIC",
            "-o",
            so,
            os.path.join(HERE, "graphs_c.c"),
            "-I" + os.path.join(root, "include"),
        ]
        + ["-L" + d for d in libdirs]
        + ["-lcuda"],
        check=True,
    )
    lib = ctypes.CDLL(so)
    lib.graph_bench.restype = ctypes.c_int
    lib.graph_bench.argtypes = [
        ctypes.c_void_p,
        ctypes.c_ulonglong,
        ctypes.c_int,
        ctypes.c_float,
        ctypes.c_int,
        ctypes.c_int,
        ctypes.c_void_p,
        ctypes.POINTER(ctypes.c_double),
    ]
    return lib


def measure_pygpu(nodes, replays):
    import pygpu.driver as cuda
    from pygpu.compiler import SourceModule

    f = SourceModule(ARGS3, no_extern_c=True).get_function("args3")
    p = cuda.mem_alloc(1 << 16)
    s = cuda.Stream()
    n, a = np.int32(1000), np.float32(2.0)
    blk, grd = (32, 1, 1), (1, 1, 1)
    r = {}

    def build():
        g = cuda.Graph()
        prev = None
        ns = []
        for _ in range(nodes):
            prev = g.add_kernel_node(f, p, n, a, block=blk, grid=grd, dependencies=prev)
            ns.append(prev)
        return g, ns

    r["build_ms"] = 1e3 * median_s(build)
    g, ns = build()
    r["instantiate_ms"] = 1e3 * median_s(lambda: g.instantiate())
    exe = g.instantiate()
    a2 = np.float32(3.0)

    def update_nodes():
        for node in ns:
            exe.set_kernel_node_params(node, p, n, a2)

    r["update_ms"] = 1e3 * median_s(update_nodes)

    def rebuild_update():
        exe.update(build()[0])

    r["rebuild_update_ms"] = 1e3 * median_s(rebuild_update)
    exe.launch(s)
    s.synchronize()

    def replay():
        for _ in range(replays):
            exe.launch(s)
        s.synchronize()

    r["replay_us_per_node"] = 1e6 * median_s(replay) / (replays * nodes)

    def eager():
        for _ in range(replays):
            for _ in range(nodes):
                f(p, n, a, block=blk, grid=grd, stream=s)
        s.synchronize()

    eager()
    r["eager_us_per_launch"] = 1e6 * median_s(eager) / (replays * nodes)

    # the same graph from C, on the same function, memory and stream
    try:
        lib = build_c()
        best = None
        for _ in range(5):
            out = (ctypes.c_double * 4)()
            rc = lib.graph_bench(f.handle, int(p), int(n), float(a), nodes, replays, s.handle, out)
            if rc != 0:
                raise RuntimeError("graphs_c.c: CUresult %d" % rc)
            best = list(out) if best is None else [min(x, y) for x, y in zip(best, out)]
        r["c_build_ms"], r["c_instantiate_ms"], r["c_update_ms"] = (1e3 * x for x in best[:3])
        r["c_replay_us_per_node"] = 1e6 * best[3] / (replays * nodes)
    except Exception as e:  # no compiler, no libcuda stub
        r["c_error"] = str(e)
    return r


def measure_cuda_core(nodes, replays):
    try:
        try:
            from cuda.core import Device, LaunchConfig, Program, ProgramOptions, launch
        except ImportError:
            from cuda.core.experimental import Device, LaunchConfig, Program, ProgramOptions, launch
    except ImportError:
        return None
    r = {}
    try:
        dev = Device()
        dev.set_current()
        stream = dev.create_stream()
        arch = "sm_" + "".join(str(x) for x in dev.compute_capability)
        k = (
            Program(ARGS3, code_type="c++", options=ProgramOptions(arch=arch))
            .compile("cubin")
            .get_kernel("args3")
        )
        buf = dev.allocate(1 << 16, stream=stream)
        cfg = LaunchConfig(grid=1, block=32)
        n = np.int32(1000)

        def build(a=np.float32(2.0)):
            gb = stream.create_graph_builder()
            gb.begin_building()
            for _ in range(nodes):
                launch(gb, cfg, k, buf, n, a)
            gb.end_building()
            return gb

        r["build_ms"] = 1e3 * median_s(build)
        gb = build()
        r["instantiate_ms"] = 1e3 * median_s(lambda: gb.complete())
        graph = gb.complete()
        r["rebuild_update_ms"] = 1e3 * median_s(lambda: graph.update(build(np.float32(3.0))))
        graph.launch(stream)
        stream.sync()

        def replay():
            for _ in range(replays):
                graph.launch(stream)
            stream.sync()

        r["replay_us_per_node"] = 1e6 * median_s(replay) / (replays * nodes)
    except Exception as e:  # an API this version lacks
        r["error"] = "%s: %s" % (type(e).__name__, e)
    return r


def table(res, nodes):
    p, c = res["pygpu"], res.get("cuda.core") or {}
    rows = [
        (
            "replay, us a kernel node (goal <= 1.0)",
            "replay_us_per_node",
            "c_replay_us_per_node",
            "replay_us_per_node",
            1,
        ),
        ("eager launches, us a launch", "eager_us_per_launch", None, None, 1),
        ("build %d nodes, ms" % nodes, "build_ms", "c_build_ms", "build_ms", 1),
        ("instantiate, ms", "instantiate_ms", "c_instantiate_ms", "instantiate_ms", 1),
        ("update %d kernel nodes, ms" % nodes, "update_ms", "c_update_ms", None, 1),
        ("rebuild + whole-graph update, ms", "rebuild_update_ms", None, "rebuild_update_ms", 1),
    ]
    print("%-42s %10s %10s %10s %8s" % ("", "pygpu", "C", "cuda.core", "pygpu/C"))
    for label, pk, ck, ok, _ in rows:
        pv = p.get(pk)
        cv = p.get(ck) if ck else None
        ov = c.get(ok) if ok else None
        fmt = lambda v: "%10.3f" % v if isinstance(v, float) else "%10s" % "-"
        ratio = "%8.2f" % (pv / cv) if pv and cv else "%8s" % "-"
        print("%-42s %s %s %s %s" % (label, fmt(pv), fmt(cv), fmt(ov), ratio))
    if "c_error" in p:
        print("C helper:", p["c_error"])
    if res.get("cuda.core") is None:
        print("cuda.core: not installed")
    elif "error" in c:
        print("cuda.core:", c["error"])
    eager, replay = p.get("eager_us_per_launch"), p.get("replay_us_per_node")
    if eager and replay:
        print(
            "a graph replays %d kernels %.1fx faster than launching them" % (nodes, eager / replay)
        )


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--nodes", type=int, default=100)
    ap.add_argument("--replays", type=int, default=200)
    ap.add_argument("--json")
    args = ap.parse_args()
    import pygpu.driver as cuda

    cuda.init()
    ctx = cuda.Device(0).retain_primary_context()
    ctx.push()
    try:
        res = {
            "device": cuda.Device(0).name(),
            "nodes": args.nodes,
            "replays": args.replays,
            "pygpu": measure_pygpu(args.nodes, args.replays),
        }
    finally:
        cuda.Context.pop()
    res["cuda.core"] = measure_cuda_core(args.nodes, args.replays)
    print(
        "%s, %d kernel nodes, %d replays (Python %s)"
        % (res["device"], args.nodes, args.replays, sys.version.split()[0])
    )
    table(res, args.nodes)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
