"""A user's program over pygpu's documented API, for the type checkers only
(it is never run: tests/project/test_typing.py checks it with mypy --strict
and pyright).  Each function touches one area the manual documents; a name
pygpu leaves unannotated is an "untyped call" error here, an attribute the
checkers cannot see is an "has no attribute" error."""

from __future__ import annotations

from typing import Any

import numpy as np

import pygpu.driver as cuda
from pygpu import (
    autotune,
    characterize,
    checkpoint,
    cudacore,
    cumath,
    curandom,
    gl,
    gpuarray,
    ipc,
    linking,
    mpi,
    nccl,
    profiler,
    system,
    textures,
    tools,
)
from pygpu.compiler import SourceModule
from pygpu.elementwise import ElementwiseKernel
from pygpu.graphs import capture_graph, captured
from pygpu.reduction import ReductionKernel
from pygpu.scan import ExclusiveScanKernel, InclusiveScanKernel
from pygpu.sparse.cg import solve_pkt_with_cg
from pygpu.sparse.coordinate import CoordinateSpMV
from pygpu.sparse.operator import DiagonalPreconditioner
from pygpu.sparse.packeted import PacketedSpMV


def devices() -> list[str]:
    cuda.init()
    out: list[str] = []
    for i in range(cuda.Device.count()):
        dev = cuda.Device(i)
        major, minor = dev.compute_capability()
        attrs = dev.get_attributes()
        out.append("%s sm_%d%d %d %d" % (dev.name(), major, minor, dev.total_memory(), len(attrs)))
    return out


def contexts() -> int:
    ctx = cuda.Device(0).make_context()
    try:
        free, total = cuda.mem_get_info()
        handle: int = ctx.handle
        return free + total + handle + ctx.get_device().ordinal
    finally:
        ctx.pop()


def memory(a: np.ndarray[Any, np.dtype[np.float32]]) -> float:
    buf = cuda.mem_alloc(a.nbytes)
    cuda.memcpy_htod(buf, a)
    back = np.empty_like(a)
    cuda.memcpy_dtoh(back, buf)
    dev = cuda.to_device(a)
    host = cuda.from_device(dev, a.shape, a.dtype)
    locked = cuda.pagelocked_empty(a.shape, a.dtype)
    size: int = buf.size
    buf.free()
    return float(back.sum() + host.sum() + locked.sum()) + size


def streams_and_events() -> float:
    s = cuda.Stream()
    handle: tuple[int, int] = s.__cuda_stream__()
    start, stop = cuda.Event(), cuda.Event()
    start.record(s)
    stop.record(s)
    s.synchronize()
    stop.synchronize()
    return stop.time_since(start) + handle[1]


def kernels(a: np.ndarray[Any, np.dtype[np.float32]]) -> float:
    mod = SourceModule(
        """
        __global__ void twice(float *a, int n)
        {
            int i = blockIdx.x * blockDim.x + threadIdx.x;
            if (i < n) a[i] *= 2;
        }
        """
    )
    twice = mod.get_function("twice")
    twice(cuda.InOut(a), np.int32(a.size), block=(256, 1, 1), grid=(1, 1))
    twice.prepare("Pi")
    g = gpuarray.to_gpu(a)
    twice.prepared_call((1, 1), (256, 1, 1), g.gpudata, np.int32(a.size))
    regs: int = twice.num_regs
    return float(a.sum()) + regs


def arrays(a: np.ndarray[Any, np.dtype[np.float32]]) -> float:
    x = gpuarray.to_gpu(a)
    shape: tuple[int, ...] = x.shape
    n: int = x.size
    y = gpuarray.empty(shape, np.float32)
    y.fill(1.0)
    z = gpuarray.zeros_like(x) + 2 * x - y / 3
    w = gpuarray.arange(0, n, 1, dtype=np.float32).reshape(shape)
    v = gpuarray.if_positive(z, w, y)
    m = gpuarray.maximum(v, z)
    c = gpuarray.concatenate((m, v))
    host: np.ndarray[Any, Any] = c.get()
    dot = gpuarray.dot(x, y).get()
    total = gpuarray.sum(x).get()
    return float(host.sum() + dot + total) + x.nbytes + x.dtype.itemsize + len(x.strides)


def elementwise_and_reduction(a: np.ndarray[Any, np.dtype[np.float32]]) -> float:
    x = gpuarray.to_gpu(a)
    y = gpuarray.empty_like(x)
    axpy = ElementwiseKernel("float a, float *x, float *y", "y[i] = a * x[i]", "axpy")
    axpy(np.float32(2), x, y)
    dot = ReductionKernel(
        np.float32,
        neutral="0",
        reduce_expr="a+b",
        map_expr="x[i]*y[i]",
        arguments="float *x, float *y",
    )
    r = dot(x, y)
    scan = InclusiveScanKernel(np.float32, "a+b")
    scanned = scan(x)
    excl = ExclusiveScanKernel(np.float32, "a+b", "0")
    excl(y)
    return float(r.get()) + float(scanned.get().sum())


def math_and_random(n: int) -> float:
    x = curandom.rand((n,), np.float32)
    gen = curandom.XORWOWRandomNumberGenerator()
    g = gen.gen_uniform((n,), np.float32)
    s = cumath.sin(x) + cumath.exp(g)
    lo, hi = cumath.frexp(s)
    return float(s.get().sum() + lo.get().sum() + hi.get().sum())


def graphs(a: np.ndarray[Any, np.dtype[np.float32]]) -> float:
    x = gpuarray.to_gpu(a)
    y = gpuarray.to_gpu(a)
    s = cuda.Stream()
    with capture_graph(s) as cap:
        z = 2 * x + y
    assert cap.graph is not None
    exe = cap.graph.instantiate()
    exe.launch(s)
    s.synchronize()

    @captured
    def step(u: gpuarray.GPUArray, v: gpuarray.GPUArray) -> gpuarray.GPUArray:
        return u * v

    return float(z.get().sum()) + float(step(x, y).get().sum())


def pools(n: int) -> int:
    pool = tools.DeviceMemoryPool()
    block = pool.allocate(n)
    ctype: str = tools.dtype_to_ctype(np.float32)
    host = tools.PageLockedMemoryPool()
    h = host.allocate((n,), np.float32)
    return int(block) + len(ctype) + h.size + pool.held_blocks


def descriptors() -> int:
    desc = cuda.ArrayDescriptor()
    desc.width = 64
    desc.height = 64
    desc.format = cuda.array_format.FLOAT
    desc.num_channels = 1
    arr = cuda.Array(desc)
    return desc.width * desc.height + int(arr.handle)


def host_memory(n: int) -> float:
    a = cuda.aligned_zeros((n,), np.float32)
    m = cuda.managed_zeros((n,), np.float32)
    old = cuda.set_staging(threshold=1 << 20)
    cuda.set_staging(**old)
    major, minor, _ = cuda.get_version()
    return float(a.sum() + m.sum()) + major + minor + len(cuda.staging_settings())


def texture_arrays(a: np.ndarray[Any, np.dtype[np.float32]]) -> float:
    arr = textures.np_to_array(a.reshape(8, -1), "C")
    back = textures.array_to_np(arr)
    fmt = textures.dtype_to_array_format(np.float32)
    return float(back.sum()) + int(fmt) + textures.array_format_to_dtype(fmt).itemsize


def profiling_and_more(pid: int) -> int:
    profiler.mark("start")
    depth = profiler.range_push("work")
    profiler.range_pop()
    state = checkpoint.state(pid)
    pool = cuda.MemoryPool()
    handle = ipc.export_pool(pool)
    handle.close()
    return depth + int(state) + characterize.sizeof("float4") + characterize.platform_bits()


def system_status() -> int:
    total = 0
    for s in system.devices():
        total += (s.memory_used or 0) + (s.ordinal or 0)
    version: str = system.driver_version()
    buf = cuda.mem_alloc(16)
    return total + len(version) + len(system.report_lines()) + int(cudacore.is_buffer(buf))


def opengl(handle: int) -> int:
    gl.init()
    buf = gl.BufferObject(handle)
    with buf.map() as m:
        ptr = m.device_ptr() + m.size()
    buf.unregister()
    return ptr


def mpi_staged(comm: Any, a: gpuarray.GPUArray) -> str:
    s = mpi.staged(comm)
    s.Send(a, dest=1)
    s.Recv(a, source=1)
    s.free()
    return s.path + str(mpi.cuda_aware())


def occupancy_and_tuning(a: gpuarray.GPUArray) -> int:
    dev = tools.DeviceData()
    occ = tools.OccupancyRecord(dev, dev.align_words(4) * 8, shared_mem=1024, registers=32)
    n = dev.align(1000) + dev.align_dtype(1000, 8) + dev.coalesce(100)
    n += tools.DeviceData.make_valid_tex_channel_count(3)

    @tools.mark_cuda_test
    def check() -> None:
        pass

    check()
    variants = autotune.expand_space({"block": [128, 256], "unroll": [1, 2]})
    shape = autotune.shape_class([a, np.float32(1.0)])
    autotune.clear(disk=False)
    return n + occ.tb_per_mp + len(variants) + len(shape)


def linked(source: str, ptx: bytes) -> int:
    opts = linking.translate_nvcc_options(["-O3", "-lcublas_device", "-arch=sm_90"])
    lk = linking.Linker(arch="sm_90", lto=True, message_handler=lambda ok, info, err: None)
    lk.add_source(source, options=["-O3"]).add_data(ptx, "ptx", name="k.ptx")
    lk.add_stdlib("cudadevrt")
    image = lk.link()
    mod = linking.DynamicModule(arch="sm_90").add_source(source).add_stdlib("cudadevrt").link()
    dyn = linking.DynamicSourceModule(source, options=["-O3"])
    f = dyn.get_function("k")
    g = mod.get_global("x")
    both = linking.link([image], arch="sm_90")
    found = linking.find_stdlib("cudadevrt", linking.stdlib_dirs())
    major, minor = linking.nvjitlink_version()
    return (
        len(opts)
        + len(bytes(both))
        + len(found)
        + major
        + minor
        + int(linking.nvjitlink_available())
        + len(repr((f, g, lk.load())))
    )


def collectives(a: gpuarray.GPUArray, out: gpuarray.GPUArray) -> str:
    comms = nccl.Communicator.init_all([0])
    with nccl.group(comms):
        for c in comms:
            c.allreduce(a, out, op="max")
    uid = nccl.unique_id()
    comm = nccl.Communicator.init(1, 0, uid, device=0)
    comm.broadcast(a, root=0)
    comm.reduce(a, out, root=0)
    comm.allgather(a, out)
    comm.reduce_scatter(out, a)
    comm.send(a, peer=0)
    comm.recv(out, peer=0)
    comm.synchronize()
    ranks = comm.rank + comm.nranks + comm.device
    comm.destroy()
    env = nccl.launch_env({"RANK": "0", "WORLD_SIZE": "1"})
    boot = nccl.bootstrap(timeout=10.0)
    return "%s %d %s %s %s" % (nccl.available(), ranks, env, boot, nccl.load())


def sparse_solve(mat: Any, b: gpuarray.GPUArray) -> float:
    spmv = PacketedSpMV(mat, True, np.float32)
    precon = DiagonalPreconditioner(spmv.permute(b))
    x, iterations, residuals = solve_pkt_with_cg(spmv, b, precon, tol=1e-6)
    coo = CoordinateSpMV(mat, np.float32)
    y = coo(x)
    return float(y.get().sum()) + iterations + residuals
