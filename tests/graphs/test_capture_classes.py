"""Capture safety at the driver table (src/core/cuda_api.h, pygpu.h's
accessors, graph/capture.c's pygpu_capture_gate; docs/design.md).

Every driver entry point carries its capture class where it is declared
(ANY, STREAM, LEGACY, RELAX) and the table names its slot after it, so the
only way to call a STREAM or LEGACY entry point is through the gate: inside
a capture, each public entry point that reaches one is recorded into the
graph or raises LogicError before the driver -- never an invalidated
capture.  Before, memset_d2d8/16/32 (and their _async forms given no
stream) and ManagedAllocation.attach() with no stream reached the driver
inside a capture (CUDA_ERROR_STREAM_CAPTURE_IMPLICIT, then _INVALIDATED at
end_capture, on an H200).

The stand-in models the rules: legacy-stream work while a blocking stream
of the context captures invalidates that capture, and end_capture() then
fails, so a case that reaches the driver fails here as it would on a GPU.
"""

import os
import re
import threading

import numpy as np
import pytest

import pygpu.driver as cuda
from pygpu import graphs

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SRC = os.path.join(ROOT, "src")
CLASSES = ("ANY", "STREAM", "LEGACY", "RELAX")


def _c_sources():
    out = {}
    for folder, _, files in os.walk(SRC):
        for name in files:
            if name.endswith((".c", ".h")):
                path = os.path.join(folder, name)
                with open(path) as f:
                    out[os.path.relpath(path, SRC)] = f.read()
    return out


SOURCES = _c_sources()
TABLE = dict(
    (name, cls)
    for name, cls in re.findall(
        r"CU_(?:REQUIRED|OPTIONAL)\((cu\w+), \d+, (\w+)\)",
        SOURCES[os.path.join("core", "cuda_api.h")],
    )
)


def test_every_entry_point_carries_a_capture_class():
    api = SOURCES[os.path.join("core", "cuda_api.h")]
    entries = re.findall(r"CU_(?:REQUIRED|OPTIONAL)\((cu\w+)[,)]", api)
    assert len(entries) > 150 and len(entries) == len(TABLE)
    assert set(TABLE.values()) <= set(CLASSES)
    # the synchronous copies and fills, the context-wide wait: LEGACY
    for name in ("cuMemcpyHtoD", "cuMemsetD2D8", "cuMemsetD32", "cuCtxSynchronize", "cuMemcpy3D"):
        assert TABLE[name] == "LEGACY", name
    for name in ("cuMemsetD2D8Async", "cuStreamAttachMemAsync", "cuMemcpyDtoHAsync"):
        assert TABLE[name] == "STREAM", name
    for name in ("cuMemAlloc", "cuMemFree", "cuModuleLoadDataEx", "cuMemHostAlloc"):
        assert TABLE[name] == "RELAX", name


def test_no_binding_reaches_a_classed_slot_but_through_its_accessor():
    """The slots of STREAM, LEGACY and RELAX entry points are named after
    their class (pygpu.h): a call by the plain name does not compile, and
    no file but pygpu.h and the loader names a slot itself (a NULL check
    goes through PYGPU_CU_HAVE)."""
    bad = []
    for path, text in SOURCES.items():
        if path in ("pygpu.h", os.path.join("core", "loader.c")):
            continue
        for m in re.finditer(r"\bcu\.(?:stream|legacy|relax)_\w+|PYGPU_CU_SLOT_\w+", text):
            bad.append("%s: %s" % (path, m.group(0)))
    assert bad == []
    for name, cls in TABLE.items():
        if cls == "ANY":
            continue
        for path, text in SOURCES.items():
            assert not re.search(r"\bcu\.%s\s*\(" % name, text), (path, name)


def test_every_kernel_launch_goes_through_the_one_sink():
    """cuLaunchKernel and cuLaunchKernelEx are called in one function,
    launch.c's pygpu_launch_enqueue."""
    calls = []
    for path, text in SOURCES.items():
        for m in re.finditer(r"\bcu\.(cuLaunchKernel(?:Ex)?)\(", text):
            start = text.rfind("\n{\n", 0, m.start())
            fn = re.findall(r"\n(\w+)\([^)]*$", text[:start].rsplit(";", 1)[-1], re.S)
            head = text[: start + 1].rsplit("\n\n", 1)[-1]
            calls.append((path, re.search(r"^(\w+)\(", head, re.M).group(1), m.group(1), fn))
    assert {(p, f) for p, f, _, _ in calls} == {
        (os.path.join("launch", "launch.c"), "pygpu_launch_enqueue")
    }
    assert {c for _, _, c, _ in calls} == {"cuLaunchKernel", "cuLaunchKernelEx"}


# ---- the walk: every public entry point that reaches a STREAM or LEGACY
# entry point, inside a capture ----

N = 256


def _setup(rng):
    x = rng.standard_normal(N).astype(np.float32)
    d = cuda.mem_alloc(x.nbytes)
    e = cuda.mem_alloc(x.nbytes)
    cuda.memcpy_htod(d, x)
    pd, pitch = cuda.mem_alloc_pitch(64, 8, 4)
    m = cuda.mem_alloc_managed(4096)
    return {"x": x, "out": np.empty_like(x), "d": d, "e": e, "pd": pd, "pitch": pitch, "m": m}


def _copy2d(v, **call):
    c = cuda.Memcpy2D()
    c.set_src_device(v["pd"])
    c.set_dst_device(v["pd"])
    c.src_pitch = c.dst_pitch = v["pitch"]
    c.width_in_bytes, c.height = 32, 4
    c.dst_y = 4
    c(**call) if call else c(aligned=True)


# case -> (the call, the entry points it reaches)
CASES = {
    "memcpy_htod": (lambda v: cuda.memcpy_htod(v["d"], v["x"]), ["cuMemcpyHtoD"]),
    "memcpy_htod_async": (
        lambda v: cuda.memcpy_htod_async(v["d"], v["x"]),
        ["cuMemcpyHtoDAsync"],
    ),
    "memcpy_dtoh": (lambda v: cuda.memcpy_dtoh(v["out"], v["d"]), ["cuMemcpyDtoH"]),
    "memcpy_dtoh_async": (
        lambda v: cuda.memcpy_dtoh_async(v["out"], v["d"]),
        ["cuMemcpyDtoHAsync"],
    ),
    "memcpy_dtod": (lambda v: cuda.memcpy_dtod(v["e"], v["d"], 64), ["cuMemcpyDtoD"]),
    "memcpy_dtod_async": (
        lambda v: cuda.memcpy_dtod_async(v["e"], v["d"], 64),
        ["cuMemcpyDtoDAsync"],
    ),
    "memcpy_peer": (lambda v: cuda.memcpy_peer(v["e"], v["d"], 64), ["cuMemcpyPeer"]),
    "memcpy_peer_async": (
        lambda v: cuda.memcpy_peer_async(v["e"], v["d"], 64),
        ["cuMemcpyPeerAsync"],
    ),
    "memset_d8": (lambda v: cuda.memset_d8(v["d"], 7, 64), ["cuMemsetD8"]),
    "memset_d16": (lambda v: cuda.memset_d16(v["d"], 7, 32), ["cuMemsetD16"]),
    "memset_d32": (lambda v: cuda.memset_d32(v["d"], 7, 16), ["cuMemsetD32"]),
    "memset_d8_async": (lambda v: cuda.memset_d8_async(v["d"], 7, 64), ["cuMemsetD8Async"]),
    "memset_d16_async": (lambda v: cuda.memset_d16_async(v["d"], 7, 32), ["cuMemsetD16Async"]),
    "memset_d32_async": (lambda v: cuda.memset_d32_async(v["d"], 7, 16), ["cuMemsetD32Async"]),
    "memset_d2d8": (lambda v: cuda.memset_d2d8(v["pd"], v["pitch"], 7, 16, 4), ["cuMemsetD2D8"]),
    "memset_d2d16": (
        lambda v: cuda.memset_d2d16(v["pd"], v["pitch"], 7, 8, 4),
        ["cuMemsetD2D16"],
    ),
    "memset_d2d32": (
        lambda v: cuda.memset_d2d32(v["pd"], v["pitch"], 7, 4, 4),
        ["cuMemsetD2D32"],
    ),
    "memset_d2d8_async": (
        lambda v: cuda.memset_d2d8_async(v["pd"], v["pitch"], 7, 16, 4),
        ["cuMemsetD2D8Async"],
    ),
    "memset_d2d16_async": (
        lambda v: cuda.memset_d2d16_async(v["pd"], v["pitch"], 7, 8, 4),
        ["cuMemsetD2D16Async"],
    ),
    "memset_d2d32_async": (
        lambda v: cuda.memset_d2d32_async(v["pd"], v["pitch"], 7, 4, 4),
        ["cuMemsetD2D32Async"],
    ),
    "Memcpy2D": (lambda v: _copy2d(v), ["cuMemcpy2D", "cuMemcpy2DAsync"]),
    "Context.synchronize": (lambda v: cuda.Context.synchronize(), ["cuCtxSynchronize"]),
    "ManagedAllocation.attach": (
        lambda v: v["m"].attach(cuda.mem_attach_flags.GLOBAL),
        ["cuStreamAttachMemAsync"],
    ),
    "mem_prefetch": (lambda v: cuda.mem_prefetch(v["m"], 4096), ["cuMemPrefetchAsync"]),
}
# reached by tests/graphs/test_capture_ops.py's
# test_what_the_array_layer_cannot_capture_is_refused_by_name (Memcpy3D and
# the linear array copies), which runs the same rule
ELSEWHERE = {
    "cuMemcpy3D",
    "cuMemcpy3DAsync",
    "cuMemcpy3DPeer",
    "cuMemcpy3DPeerAsync",
    "cuMemcpyDtoA",
    "cuMemcpyAtoD",
    "cuMemcpyAtoA",
}


def test_the_walk_covers_every_stream_and_legacy_entry_point():
    covered = {e for _, entries in CASES.values() for e in entries} | ELSEWHERE
    classed = {n for n, c in TABLE.items() if c in ("STREAM", "LEGACY")}
    assert classed - covered == set(), "add a case for each new STREAM/LEGACY entry point"


@pytest.mark.standin
@pytest.mark.parametrize("case", sorted(CASES))
def test_inside_a_capture_each_call_is_recorded_or_refused_never_invalidating(
    standin, ctx, rng, case
):
    call, _ = CASES[case]
    v = _setup(rng)
    s = cuda.Stream()
    refused = None
    with graphs.capture_graph(s) as cap:
        try:
            call(v)
        except cuda.LogicError as e:
            refused = str(e)
    # the capture ended, valid (an invalidated one raises at its end)
    assert cap.graph is not None
    if refused is not None:
        assert "captur" in refused, refused
    cap.graph.instantiate()


@pytest.mark.standin
@pytest.mark.parametrize(
    "case",
    sorted(
        c
        for c in CASES
        if any(e in ("cuMemsetD2D8", "cuStreamAttachMemAsync") or "D2D" in e for e in CASES[c][1])
    ),
)
def test_the_reported_calls_inside_a_capture(standin, ctx, rng, case):
    """memset_d2d* (sync and _async with no stream) are captured on the
    capturing stream, as memset_d8() is; attach() with no stream is refused
    by name.  Before, each reached the driver and invalidated the capture."""
    call, _ = CASES[case]
    v = _setup(rng)
    s = cuda.Stream()
    with graphs.capture_graph(s) as cap:
        if case == "ManagedAllocation.attach":
            with pytest.raises(
                cuda.LogicError, match=r"^attach\(\): a stream of this context is capturing"
            ):
                call(v)
        else:
            call(v)
    kinds = [n.kind for n in cap.graph.nodes()] if case != "ManagedAllocation.attach" else []
    if case != "ManagedAllocation.attach":
        assert kinds and set(kinds) == {"memset"}, kinds  # (the stand-in: a node a row)


@pytest.mark.standin
@pytest.mark.parametrize(
    "case", ["memset_d2d8", "memcpy_dtod", "memset_d32", "Context.synchronize"]
)
def test_legacy_stream_work_in_another_thread_is_refused_while_a_blocking_stream_captures(
    standin, ctx, rng, case
):
    call, _ = CASES[case]
    v = _setup(rng)
    seen = []

    def other():
        ctx.push()
        try:
            call(v)
            seen.append(None)
        except cuda.LogicError as e:
            seen.append(str(e))
        finally:
            cuda.Context.pop()

    s = cuda.Stream()
    with graphs.capture_graph(s) as cap:
        t = threading.Thread(target=other)
        t.start()
        t.join()
    assert cap.graph is not None
    assert seen and seen[0] is not None and "capturing" in seen[0], seen


@pytest.mark.gpu
def test_gpu_2d_memsets_and_attach_inside_a_capture_leave_it_valid(ctx, rng):
    """On a GPU: memset_d2d8 (synchronous) and memset_d2d32_async given no
    stream are captured on the capturing stream and replay; attach() with no
    stream is refused by name; the capture ends valid and its replay writes
    exactly the rectangles (checked against NumPy on random contents)."""
    rows, width = 6, 48
    dev, pitch = cuda.mem_alloc_pitch(width, rows, 4)
    start = rng.integers(0, 256, pitch * rows, dtype=np.uint8)
    cuda.memcpy_htod(dev, start)
    m = cuda.mem_alloc_managed(4096)
    s = cuda.Stream()
    with graphs.capture_graph(s) as cap:
        cuda.memset_d2d8(dev, pitch, 0x5A, 16, 3)
        cuda.memset_d2d32_async(int(dev) + 3 * pitch, pitch, 0x01020304, 4, 2)
        with pytest.raises(cuda.LogicError, match=r"^attach\(\): a stream of this context"):
            m.attach(cuda.mem_attach_flags.GLOBAL)
    exe = cap.graph.instantiate()
    got = np.empty_like(start)
    cuda.memcpy_dtoh(got, dev)
    np.testing.assert_array_equal(got, start)  # captured, not run
    exe.launch(s)
    s.synchronize()
    cuda.memcpy_dtoh(got, dev)
    want = start.copy().reshape(rows, pitch)
    want[:3, :16] = 0x5A
    want[3:5, :16] = np.frombuffer(np.array([0x01020304] * 4, "<u4").tobytes(), np.uint8)
    np.testing.assert_array_equal(got.reshape(rows, pitch), want)
