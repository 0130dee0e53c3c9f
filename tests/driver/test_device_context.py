"""Devices and contexts on a real GPU."""

import os
import subprocess
import sys
import textwrap
import uuid

import pytest

import pygpu.driver as cuda

pytestmark = pytest.mark.driver


def test_device_queries(ctx):
    n = cuda.Device.count()
    assert n >= 1
    dev = cuda.Device(0)
    assert isinstance(dev.name(), str) and dev.name()
    major, minor = dev.compute_capability()
    assert major >= 5
    assert dev.total_memory() > 1 << 30
    assert isinstance(dev.uuid, uuid.UUID)
    bus = dev.pci_bus_id()
    assert cuda.Device(bus) == dev and hash(cuda.Device(bus)) == hash(dev)
    assert cuda.Device(0) != cuda.Device(n - 1) or n == 1
    assert "sm_%d%d" % (major, minor) in repr(dev)
    assert dev.max_threads_per_block == dev.get_attribute(
        cuda.device_attribute.MAX_THREADS_PER_BLOCK
    )
    attrs = dev.get_attributes()
    assert attrs[cuda.device_attribute.MULTIPROCESSOR_COUNT] == dev.multiprocessor_count > 0
    assert attrs[cuda.device_attribute.COMPUTE_CAPABILITY_MAJOR] == major
    with pytest.raises(AttributeError, match="device_attribute"):
        dev.no_such_attribute
    assert cuda.get_driver_version() >= 12000


def test_bad_devices():
    n = cuda.Device.count()
    with pytest.raises(ValueError, match="no CUDA device with ordinal %d: %d device" % (n, n)):
        cuda.Device(n)
    with pytest.raises(ValueError, match="ordinal -1"):
        cuda.Device(-1)
    with pytest.raises(ValueError, match="PCI bus id"):
        cuda.Device("0000:ff:1f.7")


def test_primary_context_is_the_default():
    r = subprocess.run(
        [
            sys.executable,
            "-c",
            textwrap.dedent("""
        import pygpu.driver as cuda
        assert cuda.Context.get_current() is None
        a = cuda.mem_alloc(64)          # first use makes the primary current
        c = cuda.Context.get_current()
        assert c is not None and c.is_primary and a.context is c
        assert c is cuda.Device(0).retain_primary_context()
        print("ok")
    """),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr


def test_make_context_push_pop(ctx):
    dev = cuda.Device(0)
    c = dev.make_context()
    try:
        assert cuda.Context.get_current() == c and not c.is_primary
        a = cuda.mem_alloc(256)
        assert a.context is c
        cuda.Context.pop()
        assert cuda.Context.get_current() == ctx
        with c:
            assert cuda.Context.get_current() == c
            assert cuda.Context.get_device() == dev
        assert cuda.Context.get_current() == ctx
    finally:
        c.detach()
    assert c.detached
    c.detach()  # idempotent
    with pytest.raises(cuda.LogicError, match="detached"):
        c.push()
    a.free()  # memory went with the context: silent


def test_limits_and_cache_config(ctx):
    # the printf FIFO can change only before a kernel that prints has run in
    # the context (the driver answers CUDA_ERROR_INVALID_VALUE after): a
    # context of its own keeps this test independent of the ones before it
    c = cuda.Device(0).make_context()
    try:
        old = cuda.Context.get_limit(cuda.limit.PRINTF_FIFO_SIZE)
        cuda.Context.set_limit(cuda.limit.PRINTF_FIFO_SIZE, 2 << 20)
        assert cuda.Context.get_limit(cuda.limit.PRINTF_FIFO_SIZE) == 2 << 20
        cuda.Context.set_limit(cuda.limit.PRINTF_FIFO_SIZE, old)
        assert cuda.Context.get_limit(cuda.limit.PRINTF_FIFO_SIZE) == old
    finally:
        cuda.Context.pop()
        c.detach()
    cuda.Context.set_cache_config(cuda.func_cache.PREFER_SHARED)
    assert cuda.Context.get_cache_config() in list(cuda.func_cache)
    cuda.Context.synchronize()


def test_pop_with_nothing_current():
    r = subprocess.run(
        [
            sys.executable,
            "-c",
            textwrap.dedent("""
        import pygpu.driver as cuda
        cuda.init()
        try:
            cuda.Context.pop()
        except cuda.LogicError as e:
            print(e)
    """),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "no context is current" in r.stdout, r.stderr


def test_exit_with_live_objects_is_silent():
    code = textwrap.dedent("""
        import numpy as np
        import pygpu.autoinit
        import pygpu.driver as cuda
        from pygpu.compiler import SourceModule
        a = cuda.mem_alloc(1 << 20)
        s = cuda.Stream()
        e = cuda.Event().record(s)
        h = cuda.pagelocked_empty((100,), np.float32)
        m = SourceModule("__global__ void k(float *x) { x[0] = 1; }")
        f = m.get_function("k")
        f(a, block=(1, 1, 1))
        c2 = cuda.Device(0).make_context()
        b = cuda.mem_alloc(4096)
        cycle = [a, b, s, e, h, m, f]
        cycle.append(cycle)
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout == "" and r.stderr == "", (r.stdout, r.stderr)


def test_multiple_threads_get_a_context(ctx):
    import threading

    results = []

    def work():
        a = cuda.mem_alloc(1024)  # no context on this thread yet
        results.append(cuda.Context.get_current() is not None and a.context.is_primary)

    ts = [threading.Thread(target=work) for _ in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert results == [True] * 4


def test_a_primary_context_retained_again_gets_its_own_kernels():
    # the primary context's handle comes back when it is retained after its
    # release, as a new Context: the kernel caches (the operators', the
    # memoized reductions') and captured() keyed by Context served the
    # detached one's kernels ("kernel 'pygpu_add': its context was detached")
    import numpy as np
    from pygpu import gpuarray, reduction

    rng = np.random.default_rng()
    h = rng.standard_normal(1000).astype(np.float32)
    p = cuda.Device(0).retain_primary_context()
    p.push()
    try:
        a = gpuarray.to_gpu(h)
        a + a
        k = reduction.get_sum_kernel(None, np.dtype(np.float32))
        del a
    finally:
        cuda.Context.pop()
    p.detach()
    q = cuda.Device(0).retain_primary_context()
    q.push()
    try:
        assert p.detached and not q.detached and q != p and p != q
        assert q.handle == p.handle and hash(q) == hash(p)
        b = gpuarray.to_gpu(h)
        c = b + b
        assert reduction.get_sum_kernel(None, np.dtype(np.float32)) is not k
        assert c.shape == (1000,) and c.dtype == np.float32
        if os.environ.get("PYGPU_LIBCUDA") is None:  # kernels run: check the values
            np.testing.assert_allclose(c.get(), h + h, rtol=1e-6)
            want = float((h + h).astype(np.float64).sum())
            np.testing.assert_allclose(float(c.sum().get()), want, rtol=1e-4, atol=1e-3)
    finally:
        cuda.Context.pop()
        q.detach()
