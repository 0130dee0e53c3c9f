"""Array code inside a stream capture (issue 25's capture safety, issue 27's
array programs as CUDA graphs).

The rule (docs/graphs.md, "The default stream inside a capture"): in the
thread that captures a stream, the default stream is that stream, so array
code written without stream= is captured as written; its arrays are
allocated at once, outside the graph, and held by it.

`standin`-marked tests run against the driver stand-in, which records a
capture's work as nodes, runs no kernels, and rules as the driver does
that work on the legacy stream while a blocking stream captures
invalidates the capture.  `gpu`-marked tests replay captured array
programs on fresh random data and compare every element with NumPy and
with the same program run eagerly.
"""

import gc
import threading

import numpy as np
import pytest

import pygpu.driver as cuda
from pygpu import cumath, curandom, gpuarray, graphs
from pygpu.elementwise import ElementwiseKernel
from pygpu.reduction import ReductionKernel
from pygpu.scan import ExclusiveScanKernel, InclusiveScanKernel

N = 3000  # not a multiple of a block: the tails are exercised


def _kernels():
    """The generated kernels a program uses (built once per test)."""
    return {
        "axpb": ElementwiseKernel(
            "float *z, const float *x, const float *y, float a", "z[i] = a * x[i] + y[i]", "axpb"
        ),
        "sumsq": ReductionKernel(
            np.float32,
            neutral="0",
            reduce_expr="a+b",
            map_expr="x[i]*x[i]",
            arguments="const float *x",
        ),
        "incl": InclusiveScanKernel(np.float32, "a+b"),
        "excl": ExclusiveScanKernel(np.int32, "a+b", 0),
    }


def _program(k, x, y, xi, gen=None):
    """Every kind of array operation, on the default stream: returns the
    named results (GPUArrays)."""
    out = {}
    out["add"] = x + y
    out["scaled"] = x * 2
    out["rsub"] = 1.5 - x
    out["div"] = x / (y + 3)
    out["less"] = x < y
    out["as64"] = x.astype(np.float64)
    filled = gpuarray.empty_like(x)
    filled.fill(np.float32(0.25))
    out["filled"] = filled
    out["copy"] = x.copy()
    part = gpuarray.zeros_like(x)
    part[: N // 2] = y[: N // 2]
    out["part"] = part
    z = gpuarray.empty_like(x)
    k["axpb"](z, x, y, np.float32(-0.5))
    out["axpb"] = z
    out["sumsq"] = k["sumsq"](x)
    out["sum"] = gpuarray.sum(x)
    out["dot"] = gpuarray.dot(x, y)
    out["max"] = gpuarray.max(y)
    out["min"] = gpuarray.min(y)
    out["incl"] = k["incl"](x.copy())
    out["excl"] = k["excl"](xi.copy())
    out["sin"] = cumath.sin(x)
    out["exp"] = cumath.exp(y)
    out["fmod"] = cumath.fmod(y, x + 2)
    out["rand"] = curandom.rand((N,), np.float32)
    if gen is not None:
        g = gpuarray.empty_like(x)
        gen.fill_uniform(g)
        out["gen"] = g
    return out


def _want(x, y, xi):
    """NumPy's answers for _program (rand and gen: checked by range)."""
    f32 = np.float32
    part = np.zeros_like(x)
    part[: N // 2] = y[: N // 2]
    return {
        "add": x + y,
        "scaled": x * f32(2),
        "rsub": f32(1.5) - x,
        "div": x / (y + f32(3)),
        "less": x < y,
        "as64": x.astype(np.float64),
        "filled": np.full_like(x, 0.25),
        "copy": x,
        "part": part,
        "axpb": f32(-0.5) * x + y,
        "sumsq": np.sum(x.astype(np.float64) ** 2),
        "sum": np.sum(x, dtype=np.float64),
        "dot": np.dot(x.astype(np.float64), y.astype(np.float64)),
        "max": y.max(),
        "min": y.min(),
        "incl": np.cumsum(x, dtype=np.float64),
        "excl": np.concatenate([[0], np.cumsum(xi)[:-1]]).astype(np.int32),
        "sin": np.sin(x),
        "exp": np.exp(y),
        "fmod": np.fmod(y, x + f32(2)),
    }


def _check(got, want, what):
    for name, w in want.items():
        g = got[name]
        if name in ("sumsq", "sum", "dot", "incl"):
            np.testing.assert_allclose(g, w, rtol=2e-4, atol=2e-3, err_msg=what + ": " + name)
        elif name in (
            "less",
            "excl",
            "filled",
            "copy",
            "part",
            "max",
            "min",
            "as64",
            "scaled",
            "rsub",
        ):
            np.testing.assert_array_equal(g, w, err_msg=what + ": " + name)
        else:
            np.testing.assert_allclose(g, w, rtol=2e-6, atol=2e-6, err_msg=what + ": " + name)
    for name in ("rand", "gen"):
        if name in got:
            assert got[name].dtype == np.float32 and got[name].shape == (N,)
            assert 0 <= got[name].min() and got[name].max() <= 1, what + ": " + name
            assert np.unique(got[name]).size > N // 2, what + ": " + name


def _inputs(rng):
    x = rng.standard_normal(N).astype(np.float32)
    y = rng.standard_normal(N).astype(np.float32)
    xi = rng.integers(-1000, 1000, N).astype(np.int32)
    return x, y, xi


# ---------------------------------------------------------------- stand-in


@pytest.mark.standin
def test_every_array_operation_is_recorded_by_a_capture(standin, ctx, rng):
    """Before the rule, the first operation's launch on the legacy stream
    failed (CUDA_ERROR_STREAM_CAPTURE_IMPLICIT) and invalidated the capture.
    Now each operation given no stream is a node of the capturing stream's
    graph: nothing runs while capturing, the graph has as many kernel nodes
    as the eager run made launches, no allocation is a graph node, and a
    replay launches them all."""
    k = _kernels()
    x, y, xi = _inputs(rng)
    gx, gy, gxi = gpuarray.to_gpu(x), gpuarray.to_gpu(y), gpuarray.to_gpu(xi)
    gen = curandom.XORWOWRandomNumberGenerator(
        lambda count: gpuarray.to_gpu(np.full(count, 7, np.int32))
    )
    before = standin.launches()
    eager = _program(k, gx, gy, gxi, gen)  # compiles everything
    n_eager = standin.launches() - before
    assert n_eager >= len(eager)
    s = cuda.Stream()
    before = standin.launches(), standin.calls("cuMemAllocAsync")
    with graphs.capture_graph(s) as cap:
        captured = _program(k, gx, gy, gxi, gen)
    assert (standin.launches(), standin.calls("cuMemAllocAsync")) == before  # nothing ran
    kinds = [n.kind for n in cap.graph.nodes()]
    assert kinds.count("kernel") == n_eager, kinds
    assert "mem_alloc" not in kinds and "mem_free" not in kinds
    assert set(kinds) <= {"kernel", "memcpy", "memset"}, kinds
    # the results are ordinary memory, there before the graph first runs:
    # copies (which the stand-in does run) read them after the capture
    for name, a in captured.items():
        assert a.gpudata.freed is False, name
    exe = cap.graph.instantiate()
    exe.launch(s)
    s.synchronize()
    np.testing.assert_array_equal(captured["copy"].get(), x)  # a memcpy node ran
    del eager, captured, exe, cap
    gc.collect()


@pytest.mark.standin
def test_capture_keeps_temporaries_and_frees_arrays_dropped_inside(standin, ctx, rng):
    """A temporary that dies during the capture keeps its memory while the
    graph lives (the graph holds it, also when the captured work is a copy
    given int addresses, as the array layer's copies are: before, the copy
    node wrote freed memory on replay); an array made before the capture and
    dropped inside it (a stream-ordered allocation on the legacy stream,
    whose free would invalidate the capture) is freed when the capture
    ends."""
    x = gpuarray.to_gpu(rng.standard_normal(N).astype(np.float32))
    (x * 2 + 1).get()  # compile
    old = x * 3  # made before the capture
    live = standin.live()["device"]
    s = cuda.Stream()
    with graphs.capture_graph(s) as cap:
        y = (x * 2) + 1  # x * 2 is a temporary
        t = x.copy()  # a memcpy node given int addresses
        del old, t  # old: freed on the legacy stream, deferred
        gc.collect()
        assert standin.live()["device"] == live + 3  # y and the temporaries
    assert standin.live()["device"] == live + 2  # old's free ran after the capture
    exe = cap.graph.instantiate()
    del cap
    gc.collect()
    assert standin.live()["device"] == live + 2  # the graph holds the temporaries
    exe.launch(s)
    s.synchronize()
    del exe
    gc.collect()
    assert standin.live()["device"] == live  # the temporary went with the graph
    del y
    gc.collect()
    assert standin.live()["device"] == live - 1


@pytest.mark.standin
def test_the_quick_launch_paths_are_captured(standin, ctx):
    """A kernel called with a cached (block, grid) pair and no stream takes
    the quick path eagerly; inside a capture it is a node of the capturing
    stream's graph (and the arguments are kept), and after the capture the
    quick path launches on the legacy stream again."""
    from pygpu.compiler import SourceModule

    f = SourceModule("__global__ void k(float *x, int n) { }").get_function("k")
    d = cuda.mem_alloc(64)
    blk, grd = (32, 1, 1), (1, 1)
    f(d, np.int32(16), block=blk, grid=grd)
    f.prepare("Pi")
    f.prepared_call(grd, blk, d, 16)
    bound = f.configure(grd, blk)
    bound(d, 16)
    assert standin.last_launch().stream == 0
    s = cuda.Stream()
    before = standin.launches()
    with graphs.capture_graph(s) as cap:
        f(d, np.int32(16), block=blk, grid=grd)
        f.prepared_call(grd, blk, d, 16)
        f.prepared_async_call(grd, blk, None, d, 16)
        bound(d, 16)
        f(d, np.int32(16), block=blk, grid=grd, stream=cuda.Stream.null())
    assert standin.launches() == before
    assert [n.kind for n in cap.graph.nodes()] == ["kernel"] * 5
    del d
    gc.collect()
    exe = cap.graph.instantiate()
    exe.launch(s)
    s.synchronize()
    d2 = cuda.mem_alloc(64)
    before = standin.launches()
    f(d2, np.int32(16), block=blk, grid=grd)
    assert standin.launches() == before + 1 and standin.last_launch().stream == 0


@pytest.mark.standin
def test_kernels_compiled_and_loaded_inside_a_capture(standin, ctx, rng):
    """A kernel compiled and its module loaded inside the capture (an array
    operation's first use): the capture stays valid and records it."""
    from pygpu.compiler import SourceModule

    tag = int(rng.integers(1 << 30))
    s = cuda.Stream()
    d = cuda.mem_alloc(64)
    with graphs.capture_graph(s) as cap:
        f = SourceModule(
            "__global__ void fresh_%d(float *x) { x[0] = %d; }" % (tag, tag)
        ).get_function("fresh_%d" % tag)
        f(d, block=(1, 1, 1))
        k = ElementwiseKernel("float *z", "z[i] = %d" % tag, "fresh_ew_%d" % tag)
        k(gpuarray.empty(16, np.float32))
    assert [n.kind for n in cap.graph.nodes()] == ["kernel", "kernel"]


@pytest.mark.standin
def test_another_threads_legacy_work_is_refused_and_the_capture_goes_on(standin, ctx, rng):
    """In another thread the default stream is the legacy one, which would
    wait for the blocking capturing stream: an array operation there is a
    LogicError naming the kernel, raised before the driver (it used to
    reach it and invalidate the capture)."""
    x = gpuarray.to_gpu(rng.standard_normal(N).astype(np.float32))
    (x + x).get()
    s = cuda.Stream()
    seen = []

    def other():
        ctx.push()
        try:
            x + x
        except cuda.LogicError as e:
            seen.append(str(e))
        finally:
            cuda.Context.pop()

    with graphs.capture_graph(s) as cap:
        y = x * 2
        t = threading.Thread(target=other)
        t.start()
        t.join()
    assert len(seen) == 1 and seen[0].startswith("kernel '"), seen
    assert seen[0].endswith(
        "a stream of this context is capturing a graph in another thread, "
        "and a launch on the legacy default stream would wait for it "
        "(CUDA_ERROR_STREAM_CAPTURE_IMPLICIT, which would invalidate the "
        "capture); pass stream=, or launch it before or after the capture"
    )
    assert [n.kind for n in cap.graph.nodes()] == ["kernel"]
    del y


@pytest.mark.standin
def test_what_cannot_run_inside_a_capture_is_refused_by_name(standin, ctx, rng):
    """Blocking transfers, synchronizing, zeroed managed memory, timed
    launches and In/Out/InOut arguments are refused before the driver; the
    capture goes on and its graph replays."""
    x = gpuarray.to_gpu(rng.standard_normal(N).astype(np.float32))
    host = np.empty(N, np.float32)
    (x + 1).get()
    s = cuda.Stream()
    from pygpu.compiler import SourceModule

    f = SourceModule("__global__ void k(float *x) { }").get_function("k")
    calls = {
        n: standin.calls(n)
        for n in (
            "cuMemcpyDtoH",
            "cuMemcpyHtoD",
            "cuCtxSynchronize",
            "cuStreamSynchronize",
            "cuMemAllocManaged",
        )
    }
    with graphs.capture_graph(s) as cap:
        y = x + 1
        with pytest.raises(
            cuda.LogicError,
            match=r"^memcpy_dtoh\(\): this thread is capturing "
            r"a graph, and inside the capture the default "
            r"stream is the capturing stream",
        ):
            y.get()
        with pytest.raises(cuda.LogicError, match=r"^memcpy_htod\(\): this thread is capturing"):
            x.set(host)
        with pytest.raises(cuda.LogicError, match=r"^memcpy_htod\(\): this thread is capturing"):
            gpuarray.to_gpu(host)
        with pytest.raises(
            cuda.LogicError,
            match=r"^Context.synchronize\(\): a stream of this "
            r"context is capturing a graph",
        ):
            cuda.Context.synchronize()
        with pytest.raises(
            cuda.LogicError,
            match=r"^managed_zeros\(\): a stream of this "
            r"context is capturing a graph",
        ):
            cuda.managed_zeros(16, np.float32)
        with pytest.raises(
            cuda.LogicError,
            match=r"^kernel 'k': time_kernel=True waits for "
            r"the launch, but the stream is capturing",
        ):
            f(y, block=(1, 1, 1), time_kernel=True)
        for wrap in (cuda.In, cuda.Out, cuda.InOut):
            with pytest.raises(
                cuda.LogicError,
                match=r"^kernel 'k': parameter 0: In/Out/InOut "
                r"copy synchronously around the launch, "
                r"which this thread is capturing",
            ):
                f(wrap(host), block=(1, 1, 1))
        y.get_async(ary=host)  # captured: the replay writes host
    assert {n: standin.calls(n) for n in calls} == calls
    assert [n.kind for n in cap.graph.nodes()] == ["kernel", "memcpy"]
    cap.graph.instantiate().launch(s)
    s.synchronize()


@pytest.mark.standin
def test_every_allocation_kind_inside_a_capture(standin, ctx):
    """Each allocation pygpu makes is made at once inside a capture, in
    GLOBAL and THREAD_LOCAL modes (cuMemHostAlloc, cuMemAllocManaged and
    cuMemAllocPitch would invalidate it on an H100), except a stream-ordered
    allocation given the capturing stream, which is a graph node."""
    for mode in (cuda.capture_mode.GLOBAL, cuda.capture_mode.THREAD_LOCAL):
        s = cuda.Stream()
        other = cuda.Stream()
        with graphs.capture_graph(s, mode=mode) as cap:
            made = [
                cuda.mem_alloc(256),
                cuda.mem_alloc_async(256),
                cuda.mem_alloc_async(256, other),
                cuda.mem_alloc_managed(256),
                cuda.mem_alloc_pitch(64, 4, 4)[0],
                gpuarray.empty(64, np.float32).gpudata,
                gpuarray.zeros(64, np.float32).gpudata,
            ]
            pinned = cuda.pagelocked_empty(64, np.float32)
            managed = cuda.managed_empty(64, np.float32)
            node = cuda.mem_alloc_async(256, s)
            cuda.memset_d8_async(node, 1, 256, s)
            node.free()
            for a in made:
                a.free()
            del pinned, managed
            gc.collect()
        assert [n.kind for n in cap.graph.nodes()] == ["memset", "mem_alloc", "memset", "mem_free"]


# ---------------------------------------------------------------- GPU


@pytest.mark.gpu
def test_gpu_captured_array_program_replays_like_numpy_and_eager(ctx, rng):
    """Every operation kind captured once, replayed on new data written into
    the inputs in place: each replay equals NumPy element by element, and
    the captured results equal the eager run's on the same data."""
    k = _kernels()
    x, y, xi = _inputs(rng)
    gx, gy, gxi = gpuarray.to_gpu(x), gpuarray.to_gpu(y), gpuarray.to_gpu(xi)
    np.random.seed(1234)
    eager = {n: a.get() for n, a in _program(k, gx, gy, gxi).items()}
    _check(eager, _want(x, y, xi), "eager")
    s = cuda.Stream()
    np.random.seed(1234)  # rand(): the same seed as eager
    with graphs.capture_graph(s) as cap:
        captured = _program(k, gx, gy, gxi)
    exe = cap.graph.instantiate()
    exe.launch(s)
    s.synchronize()
    got = {n: a.get() for n, a in captured.items()}
    for name in eager:  # the same data: the eager results
        if name == "incl":  # a float scan's look-back may add in another order
            np.testing.assert_allclose(got[name], eager[name], rtol=1e-5, atol=1e-4, err_msg=name)
        else:
            np.testing.assert_array_equal(got[name], eager[name], err_msg=name)
    for rep in range(3):
        x, y, xi = _inputs(rng)
        gx.set(x)
        gy.set(y)
        gxi.set(xi)
        exe.launch(s)
        s.synchronize()
        got = {n: a.get() for n, a in captured.items()}
        _check(got, _want(x, y, xi), "replay %d" % rep)
        np.testing.assert_array_equal(got["rand"], eager["rand"])  # the seed is captured


@pytest.mark.gpu
def test_gpu_generator_fill_continues_its_sequence_on_each_replay(ctx):
    """A generator's state lives on the GPU: replaying a captured
    fill_uniform gives the numbers the next eager calls would."""
    n = 1 << 14

    def seeds(count):
        return gpuarray.to_gpu(np.full(count, 20261125, np.int32))

    eager_gen = curandom.XORWOWRandomNumberGenerator(seeds)
    cap_gen = curandom.XORWOWRandomNumberGenerator(seeds)
    want = []
    out = gpuarray.empty(n, np.float32)
    for _ in range(3):
        eager_gen.fill_uniform(out)
        want.append(out.get())
    assert not np.array_equal(want[0], want[1])
    target = gpuarray.empty(n, np.float32)
    s = cuda.Stream()
    with graphs.capture_graph(s) as cap:
        cap_gen.fill_uniform(target)
        doubled = target * 2
    exe = cap.graph.instantiate()
    for w in want:
        exe.launch(s)
        s.synchronize()
        np.testing.assert_array_equal(target.get(), w)
        np.testing.assert_array_equal(doubled.get(), w * 2)
        assert 0 < w.min() and w.max() <= 1


@pytest.mark.gpu
def test_gpu_capture_compiles_inside_and_keeps_temporaries(ctx, rng):
    """Kernels compiled for the first time inside the capture (module
    loading is legal during a capture), temporaries that die inside the
    block, and an array made before it and dropped inside: the replays are
    right and the capture is not invalidated."""
    x = rng.standard_normal(N).astype(np.float64)
    gx = gpuarray.to_gpu(x)
    old = gpuarray.to_gpu(x)
    expr = "z[i] = x[i] * %r + 1.0" % float(rng.uniform(1, 2))
    s = cuda.Stream()
    with graphs.capture_graph(s) as cap:
        fresh = ElementwiseKernel("double *z, const double *x", expr, "fresh_capture_kernel")
        z = gpuarray.empty_like(gx)
        fresh(z, gx)  # compiled and loaded inside the capture
        w = cumath.tanh((z - 1) * 0.5) + gx * gx  # temporaries die here
        del old
    exe = cap.graph.instantiate()
    a = float(expr.split("*")[1].split("+")[0])
    for _ in range(3):
        x = rng.standard_normal(N)
        gx.set(x)
        exe.launch(s)
        s.synchronize()
        np.testing.assert_allclose(z.get(), x * a + 1.0, rtol=1e-14, atol=1e-14)
        np.testing.assert_allclose(w.get(), np.tanh((x * a) * 0.5) + x * x, rtol=1e-12, atol=1e-12)


# ---------------------------------------------------------------- captured()


def _step_fn(calls):
    def step(x, y, alpha, scale=1.0):
        calls.append(alpha)
        z = alpha * x + y
        return {"z": z * scale, "total": gpuarray.sum(z), "peak": gpuarray.max(cumath.fabs(y))}

    return step


@pytest.mark.standin
def test_captured_function_captures_once_per_signature(standin, ctx, rng):
    calls = []
    step = graphs.captured(_step_fn(calls))
    x, y = (gpuarray.to_gpu(rng.standard_normal(N).astype(np.float32)) for _ in range(2))
    begin, launch = standin.calls("cuStreamBeginCapture"), standin.calls("cuGraphLaunch")
    out = step(x, y, 2.0)
    assert calls == [2.0, 2.0]  # the warm-up, then the capture
    assert standin.calls("cuStreamBeginCapture") == begin + 1
    assert standin.calls("cuGraphLaunch") == launch + 1
    (entry,) = step.graphs.values()
    assert [k.kind for k in entry.graph.nodes()].count("kernel") >= 4
    # the same signature: inputs copied into the graph's buffers, one launch,
    # the same output arrays
    x2, y2 = (rng.standard_normal(N).astype(np.float32) for _ in range(2))
    gx2, gy2 = gpuarray.to_gpu(x2), gpuarray.to_gpu(y2)
    again, trace = standin.trace(lambda: step(gx2, y=gy2, alpha=2.0))
    assert again is out and calls == [2.0, 2.0]
    # a replay's work: two copies in and one graph launch, whatever the
    # function does (no kernel launch, no allocation)
    work = [t for t in trace if t not in ("cuCtxGetCurrent", "cuEventRecord")]
    assert work == ["cuMemcpyDtoD", "cuMemcpyDtoD", "cuGraphLaunch"], trace
    assert standin.calls("cuStreamBeginCapture") == begin + 1
    assert standin.calls("cuGraphLaunch") == launch + 2
    np.testing.assert_array_equal(entry.inputs[0].get(), x2)
    np.testing.assert_array_equal(entry.inputs[1].get(), y2)
    # another value, shape or keyword: another graph
    step(x, y, 3.0)
    step(x[: N // 2], y[: N // 2], 3.0)
    step(x, y, 3.0, scale=0.5)
    assert len(step.graphs) == 4 and calls.count(3.0) == 6
    assert "4 graph(s)" in repr(step)
    step.clear()
    assert step.graphs == {}
    with pytest.raises(
        TypeError,
        match=r"^captured: argument 2 is a list, which is neither a "
        r"GPUArray nor hashable; arguments other than GPUArrays "
        r"are part of the signature a graph is captured for$",
    ):
        step(x, y, [1.0])

    @graphs.captured
    def not_arrays(a):
        return 1.0

    with pytest.raises(
        TypeError,
        match=r"captured: .*not_arrays must return GPUArrays \(one, "
        r"or a tuple, list or dict of them\) or None, not float",
    ):
        not_arrays(x)

    # a captured function called inside a capture: its graph launch is refused
    step(x, y, 2.0)
    s = cuda.Stream()
    with pytest.raises(
        cuda.LogicError,
        match=r"^GraphExec.launch\(\): this thread is "
        r"capturing a graph, and inside the capture the "
        r"default stream is the capturing stream; a graph "
        r"is not launched into a capture: add it as a "
        r"child graph node \(Graph.add_child_graph_node\), "
        r"or launch it after end_capture\(\)$",
    ):
        with graphs.capture_graph(s):
            step(x, y, 2.0)
    assert not s.is_capturing()

    @graphs.captured
    def waits(a):
        b = a + 1
        b.get()
        return b

    with pytest.raises(cuda.LogicError, match=r"^memcpy_dtoh\(\): this thread is capturing"):
        waits(x)
    assert waits.graphs == {}


@pytest.mark.gpu
def test_gpu_captured_function_equals_numpy_on_every_call(ctx, rng):
    calls = []
    step = graphs.captured(_step_fn(calls))
    for n in (N, 1 << 16, N):
        for _ in range(3):
            x = rng.standard_normal(n).astype(np.float32)
            y = rng.standard_normal(n).astype(np.float32)
            alpha = np.float32(0.75)
            out = step(gpuarray.to_gpu(x), gpuarray.to_gpu(y), alpha, scale=2.0)
            z = alpha * x + y
            np.testing.assert_allclose(out["z"].get(), z * np.float32(2), rtol=1e-6, atol=1e-6)
            np.testing.assert_allclose(
                out["total"].get(), z.astype(np.float64).sum(), rtol=1e-4, atol=1e-3
            )
            assert out["peak"].get() == np.abs(y).max()
    assert len(step.graphs) == 2 and len(calls) == 4
