"""CUDA graphs when the driver fails: a driver without the graph entry
points loses graphs (or conditional nodes) and nothing else, and every
driver call of the graph scenarios failing once in turn raises a clean
error and leaves nothing behind (the stand-in's failure injection).
"""

import gc
import os
import sys

import numpy as np
import pytest

import pygpu.driver as cuda
from pygpu.compiler import SourceModule

from graph_shared import KERNELS, live_graphs as _live_graphs, unraisable as _unraisable


def _run(code, **env):
    import subprocess
    import textwrap

    e = dict(os.environ)
    e.update(env)
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=e,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.standin
def test_driver_without_graphs_keeps_the_rest(standin):
    """A driver lacking a graph entry point loses graphs, with a clear
    error, and nothing else; one lacking conditional nodes, only those."""
    r = _run(
        """
    import numpy as np
    import pygpu.driver as cuda
    cuda.init()
    cuda.Device(0).retain_primary_context().push()
    d = cuda.to_device(np.arange(4, dtype=np.float32))
    print(cuda.from_device(d, 4, np.float32).sum())
    for make in (cuda.Graph, lambda: cuda.Stream().begin_capture()):
        try:
            make()
        except cuda.LogicError as e:
            print(type(e).__name__, e)
    """,
        FAKECUDA_HIDE="cuGraphExecUpdate",
    )
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == "6.0"
    want = (
        "LogicError CUDA graphs need the driver entry point cuGraphExecUpdate, which "
        "this driver does not provide (a CUDA 11.4 or newer driver has it)"
    )
    assert lines[1:] == [want, want]
    r = _run(
        """
    import pygpu.driver as cuda
    cuda.init()
    cuda.Device(0).retain_primary_context().push()
    g = cuda.Graph()
    g.add_empty_node()
    try:
        g.conditional_handle()
    except cuda.LogicError as e:
        print(e)
    """,
        FAKECUDA_HIDE="cuGraphConditionalHandleCreate",
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout == "conditional graph nodes need a CUDA 12.3 or newer driver\n"


def _scenarios(mod_src):
    rng = np.random.default_rng()

    def explicit():
        m = SourceModule(mod_src, no_extern_c=True)
        f = m.get_function("scale")
        x = rng.standard_normal(64).astype(np.float32)
        out = np.zeros_like(x)
        d = cuda.mem_alloc(x.nbytes)
        g = cuda.Graph()
        a = g.add_memcpy_node(d, x)
        b = g.add_kernel_node(f, d, np.float32(2), np.int32(64), block=(64, 1, 1), dependencies=a)
        c = g.add_memset_node(d, 0, 4, dependencies=b)
        e = g.add_memcpy_node(out, d, dependencies=c)
        g.add_host_node(lambda: None, dependencies=e)
        g.add_dependencies(a, e)
        al = g.add_mem_alloc_node(64)
        g.add_mem_free_node(al, dependencies=al)
        g.nodes()
        e.dependencies
        g.debug_dot(os.devnull)
        exe = g.instantiate()
        exe.upload()
        exe.launch()
        exe.synchronize()
        want = x.copy()
        want[0] = 0
        np.testing.assert_array_equal(out, want)
        return exe

    def capture():
        s = cuda.Stream()
        x = rng.standard_normal(64).astype(np.float32)
        out = np.zeros_like(x)
        d = cuda.mem_alloc(x.nbytes)
        s.begin_capture()
        try:
            cuda.memcpy_htod_async(d, x, s)
            cuda.memcpy_dtoh_async(out, d, s)
        finally:
            g = s.end_capture()
        s.is_capturing()
        exe = g.instantiate()
        exe.launch(s)
        np.testing.assert_array_equal(out, x)
        return exe

    def update():
        m = SourceModule(mod_src, no_extern_c=True)
        f = m.get_function("scale")
        d = cuda.mem_alloc(64)
        gs = []
        for a in (1.0, 2.0):
            g = cuda.Graph()
            gs.append((g, g.add_kernel_node(f, d, a, 16, block=(16, 1, 1))))
        exe = gs[0][0].instantiate()
        exe.update(gs[1][0])
        exe.set_kernel_node_params(gs[0][1], d, 3.0, 16)
        s = cuda.Stream()
        s.begin_capture()
        try:
            f(d, 1.0, 16, block=(16, 1, 1), stream=s)
        finally:
            cg = s.end_capture()
        ce = cg.instantiate()
        ce.set_kernel_node_params(cg.nodes()[0], d, 2.0, 16, function=f)
        ce.launch(s)
        return exe, ce

    def conditional():
        g = cuda.Graph()
        h = g.conditional_handle(default=0)
        node = g.add_conditional_node(h, "if")
        node.bodies[0].add_empty_node()
        e = cuda.Event()
        g.add_event_record_node(e, dependencies=node)
        g.add_child_graph_node(cuda.Graph(), dependencies=node)
        return g.instantiate()

    return {"explicit": explicit, "capture": capture, "update": update, "conditional": conditional}


GRAPH_RELEASES = {
    "cuGraphDestroy",
    "cuGraphExecDestroy",
    "cuEventDestroy",
    "cuStreamDestroy",
    "cuMemFree",
    "cuModuleUnload",
    "cuEventSynchronize",
    "cuCtxPushCurrent",
    "cuCtxPopCurrent",
    "cuCtxGetCurrent",
    # best effort around the calls that are unsafe during a capture
    # (a free relaxes this thread's capture mode, then restores it)
    "cuThreadExchangeStreamCaptureMode",
}


@pytest.mark.standin
@pytest.mark.parametrize("scenario", ["explicit", "capture", "update", "conditional"])
def test_failure_injection_at_every_call(standin, ctx, scenario):
    """Each driver call of the scenario fails once in turn: a cuda.Error with
    that code, no unraisable error, and no graph, exec, stream or allocation
    left behind."""
    op = _scenarios(KERNELS)[scenario]

    def run():
        r = op()
        del r
        gc.collect()

    def live():
        d = standin.live()
        d["graphs"], d["execs"] = _live_graphs(standin)
        return d

    run()
    base = live()
    _, trace = standin.trace(run)
    assert live() == base
    seen, sites = {}, []
    for name in trace:
        seen[name] = seen.get(name, 0) + 1
        sites.append((name, seen[name]))
    assert any(n.startswith("cuGraph") for n, _ in sites)
    unraisable, old = _unraisable()
    try:
        for name, k in sites:
            where = "%s: call %d of %s" % (scenario, k, name)
            stale = standin.stale()
            standin.fail(name, k, 999)
            err = None
            try:
                run()
            except cuda.Error as e:
                err = (e.code, e.routine, str(e))
            finally:
                standin.cancel()
                while cuda.Context.get_current() not in (None, ctx):
                    cuda.Context.pop()
                if cuda.Context.get_current() is None:
                    ctx.push()
            gc.collect()
            assert standin.fired(), where + ": the call did not happen"
            if err is None:
                assert name in GRAPH_RELEASES, where + ": the failure was lost"
            else:
                assert err[0] == 999 and err[2].startswith(err[1]), where + ": %r" % (err,)
            assert not unraisable, "%s: %r" % (where, unraisable[0].exc_value)
            assert standin.stale() == stale, where + ": a dead handle was used"
            now = live()
            leaked = {x: now[x] - base[x] for x in now if now[x] != base[x]}
            if name in GRAPH_RELEASES:
                # a failed release (or the push before it) loses that handle, as a
                # real driver would; a GraphExec's is two (the exec and its event), a
                # Graph's takes its mem_alloc nodes' memory with it
                assert (
                    sum(leaked.values()) <= 1
                    or leaked == {"execs": 1, "events": 1}
                    or leaked == {"graphs": 1, "device": 1}
                ), where + ": %s" % leaked
            else:
                assert not leaked, where + ": leaked %s" % leaked
            base = now
    finally:
        sys.unraisablehook = old
