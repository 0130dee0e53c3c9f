"""Subclassing pygpu's types from Python, as PyCUDA's (Boost.Python) classes
allow: every C type of pygpu._driver is an acceptable base; a subclass
instance is made as the subclass, finds pygpu's module state (its type is not
one the module defined), takes every launch and copy path (a quick path keyed
on the exact type falls back to the full one), and dies cleanly (a heap
subclass with a __dict__ is a GC type even where its base is not).  The
Python-level classes PyCUDA users subclass (GPUArray, the kernel generators,
SourceModule) are subclassable too.

CPU tests need nothing; `driver`/`standin` tests run against the stand-in
(make test's second pass) or a GPU; `gpu` tests run kernels."""

import enum
import gc
import struct
import weakref

import numpy as np
import pytest

import pygpu.driver as cuda
from pygpu import _driver, compiler

C_TYPES = sorted(
    (
        o
        for o in vars(_driver).values()
        if isinstance(o, type) and not issubclass(o, (BaseException, enum.Enum))
    ),
    key=lambda t: t.__name__,
)
# made only by pygpu (factories, methods): Python cannot instantiate them, nor
# their subclasses (as PyCUDA's: "This class cannot be instantiated from Python")
FACTORY_MADE = {
    "BoundLaunch",
    "Context",
    "DeviceAllocation",
    "Function",
    "GraphExec",
    "GraphNode",
    "HostAllocation",
    "HostBlock",
    "Module",
}

KERNELS = r"""
struct alignas(64) TensorMap { unsigned long long opaque[16]; };
extern "C" __global__ void scale(float *x, float a, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] *= a;
}
extern "C" __global__ void add(const float *a, const float *b, float *out, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = a[i] + b[i];
}
extern "C" __global__ void takes(cudaTextureObject_t t, int n, cudaSurfaceObject_t s,
                                 const __grid_constant__ TensorMap m, float *out)
{
    out[n] = tex1Dfetch<float>(t, n) + (float)m.opaque[n];
    surf2Dwrite(1.0f, s, 0, 0);
}
"""


def _subclass(base, pass_args=True, **extra):
    """A subclass with a class attribute, an __init__ that passes the
    constructor's arguments on (as PyCUDA code calls Base.__init__) and sets
    instance attributes, and an overridden method (the first public one the
    base has)."""
    ns = {"kind": "sub-" + base.__name__}

    def __init__(self, *args, **kwargs):
        if pass_args:
            base.__init__(self, *args, **kwargs)
        else:
            base.__init__(self)
        self.tag = "made"
        self.me = self  # a cycle: the GC frees it

    ns["__init__"] = __init__
    meth = next(
        (
            n
            for n, v in vars(base).items()
            if not n.startswith("_")
            and callable(v)
            and not isinstance(v, type)
            and not isinstance(v, (classmethod, staticmethod))
            and type(v).__name__ == "method_descriptor"
        ),
        None,
    )
    if meth is not None:

        def over(self, *args, **kwargs):
            self.calls = getattr(self, "calls", 0) + 1
            return getattr(super(sub, self), meth)(*args, **kwargs)

        ns[meth] = over
    ns.update(extra)
    sub = type("My" + base.__name__, (base,), ns)
    return sub, meth


# ---- every C type, no driver needed ----


def test_every_c_type_is_listed():
    names = {t.__name__ for t in C_TYPES}
    assert {
        "Device",
        "Context",
        "Stream",
        "Event",
        "Module",
        "Function",
        "DeviceAllocation",
        "HostAllocation",
        "Array",
        "ArrayDescriptor",
        "ArrayDescriptor3D",
        "TextureObject",
        "SurfaceObject",
        "TensorMap",
        "Graph",
        "GraphNode",
        "GraphExec",
        "MemoryPool",
        "VirtualBuffer",
        "IPCMemoryHandle",
        "Linker",
        "BoundLaunch",
        "KernelTime",
        "TimeRange",
        "ArgumentHandler",
    } <= names
    assert FACTORY_MADE <= names


@pytest.mark.parametrize("base", C_TYPES, ids=lambda t: t.__name__)
def test_every_c_type_is_an_acceptable_base(base):
    sub, meth = _subclass(base)
    assert issubclass(sub, base) and sub.__mro__[1] is base
    assert sub.kind == "sub-" + base.__name__
    if meth is not None:
        assert getattr(sub, meth) is not getattr(base, meth)
    # and a subclass of the subclass, with __slots__ (no __dict__ added)
    sub2 = type("Slotted", (sub,), {"__slots__": ("extra",)})
    assert issubclass(sub2, base)


@pytest.mark.parametrize("name", sorted(FACTORY_MADE))
def test_factory_made_types_are_not_instantiable_through_a_subclass(name):
    base = getattr(_driver, name)
    sub, _ = _subclass(base)
    with pytest.raises(TypeError, match="cannot create .*instances|not safe"):
        base()
    with pytest.raises(TypeError, match="cannot create .*instances|not safe"):
        sub()
    with pytest.raises(TypeError, match="cannot create .*instances|not safe"):
        base.__new__(sub)


def test_kernel_time_subclass():
    sub, _ = _subclass(cuda.KernelTime, pass_args=False)  # float's __init__: no arguments
    t = sub(0.25)
    assert isinstance(t, cuda.KernelTime) and isinstance(t, float) and t == 0.25
    assert t.tag == "made" and t() == 0.25 and type(t()) is float
    with pytest.raises(TypeError, match=r"KernelTime\(\) takes no arguments"):
        t(1)


def test_time_range_subclass():
    class Range(_driver.TimeRange):
        def __init__(self, name, color=None):
            _driver.TimeRange.__init__(self, name, color)
            self.entered = 0

        def __enter__(self):
            self.entered += 1
            return super().__enter__()

    r = Range("sub", "green")
    assert type(r) is Range and r.name == "sub"
    with r as got:
        assert got is r
    assert r.entered == 1

    @Range("deco")
    def f(x):
        return 2 * x

    assert f(21) == 42
    with pytest.raises(TypeError):
        Range(3)


def test_argument_handler_subclass_with_its_own_init():
    """reikna's Buffer(cuda.ArgumentHandler): an __init__ of its own."""

    class Buffer(cuda.ArgumentHandler):
        def __init__(self, size):
            self.size = size

    b = Buffer(64)
    assert isinstance(b, cuda.ArgumentHandler) and b.size == 64


def test_python_classes_are_subclassable():
    from pygpu import elementwise, gpuarray, reduction, scan
    from pygpu.compiler import SourceModule

    for base in (
        gpuarray.GPUArray,
        elementwise.ElementwiseKernel,
        reduction.ReductionKernel,
        scan.InclusiveScanKernel,
        scan.ExclusiveScanKernel,
        SourceModule,
        cuda.In,
        cuda.Out,
        cuda.InOut,
        cuda.PointerHolderBase,
    ):
        sub = type("My" + base.__name__, (base,), {"extra": 1})
        assert issubclass(sub, base) and sub.extra == 1


# ---- the driver (stand-in or GPU) ----


@pytest.fixture(scope="module")
def ptx():
    return bytes(compiler.compile(KERNELS, target="ptx", arch="compute_90"))


@pytest.mark.driver
def test_reikna_device_subclass(ctx):
    """reikna 0.9's cluda/cuda.py, verbatim: an instance attribute shadows
    the name() method."""

    class Device(cuda.Device):
        def __init__(self, device_num):
            cuda.Device.__init__(self, device_num)
            self.name = self.name()

    devices = [Device(num) for num in range(cuda.Device.count())]
    d, base = devices[0], cuda.Device(0)
    assert type(d) is Device and isinstance(d, cuda.Device)
    assert d.name == base.name() and isinstance(d.name, str)
    assert d == base and base == d and hash(d) == hash(base) and int(d) == 0
    assert d.ordinal == 0 and d.compute_capability() == base.compute_capability()
    # the attribute hook (tp_getattro) on a subclass instance
    assert (
        d.max_threads_per_block
        == base.max_threads_per_block
        == base.get_attribute(cuda.device_attribute.MAX_THREADS_PER_BLOCK)
        > 0
    )
    assert d.get_attributes() == base.get_attributes()
    with pytest.raises(
        AttributeError,
        match="'Device' object has no attribute 'no_such_thing' "
        r"\(nor is it a device_attribute name\)",
    ):
        d.no_such_thing
    assert d.retain_primary_context() == base.retain_primary_context()
    assert Device.count() == cuda.Device.count()
    assert "Device 0" in repr(d)
    assert str(d.pci_bus_id()) == base.pci_bus_id()


@pytest.mark.driver
def test_device_subclass_forms(ctx):
    # the form: no base __init__ call (the object is made in __new__)
    class NoSuper(cuda.Device):
        def __init__(self, n):
            self.name = self.name()

    assert NoSuper(0).name == cuda.Device(0).name()

    # __getattr__ of its own, after the base hook's attribute names
    class Hooked(cuda.Device):
        def __getattr__(self, name):
            if name == "answer":
                return 42
            raise AttributeError(name)

    h = Hooked(0)
    assert h.answer == 42 and h.warp_size == cuda.Device(0).warp_size
    with pytest.raises(AttributeError, match="nothing_here"):
        h.nothing_here

    # __new__ of its own taking other arguments
    class ByName(cuda.Device):
        def __new__(cls, label):
            self = super().__new__(cls, 0)
            self.label = label
            return self

    b = ByName("first")
    assert b.label == "first" and b.ordinal == 0 and type(b) is ByName
    with pytest.raises(TypeError, match="Device\\(\\) takes an ordinal"):
        cuda.Device.__new__(ByName, 1.5)
    with pytest.raises(ValueError, match="no CUDA device with ordinal 99"):
        NoSuper(99)
    wr = weakref.ref(b)
    del b
    gc.collect()
    assert wr() is None


def _live(standin):
    """The stand-in's live handles but modules (a test keeps its kernels),
    after a collection: an earlier test's garbage in reference cycles (4
    allocations and an event, run after the pool and IPC tests) must not be
    counted in a test's base and then collected inside the test."""
    gc.collect()
    live = standin.live()
    del live["modules"]
    return live


def _scale_params(ptr, a, n):
    return struct.pack("<Qfi", ptr, a, n)


@pytest.mark.standin
def test_device_allocation_subclasses_in_launches_and_copies(standin, ctx, ptx, rng):
    """VirtualBuffer and IPCMemoryHandle subclasses: DeviceAllocation
    subclass instances, packed by every launch path as their address."""

    class Buffer(cuda.VirtualBuffer):
        def __init__(self, nbytes, label):
            cuda.VirtualBuffer.__init__(self, nbytes)
            self.label = label

        def __new__(cls, nbytes, label):
            return super().__new__(cls, nbytes)

        def grow(self, n):
            self.grown = n
            return super().grow(n)

    class Opened(cuda.IPCMemoryHandle):
        pass

    base = _live(standin)
    f = cuda.module_from_buffer(ptx).get_function("scale")
    x = rng.standard_normal(300).astype(np.float32)
    buf = Buffer(x.nbytes, "mine")
    assert type(buf) is Buffer and isinstance(buf, cuda.DeviceAllocation)
    assert buf.label == "mine" and buf.size >= x.nbytes and int(buf) != 0
    cai = buf.__cuda_array_interface__
    assert cai["data"][0] == int(buf) == buf.__index__()
    cuda.memcpy_htod(buf, x)
    back = np.empty_like(x)
    cuda.memcpy_dtoh(back, buf)
    np.testing.assert_array_equal(back, x)
    owner = cuda.to_device(x)
    opened = Opened(cuda.mem_get_ipc_handle(owner))
    assert type(opened) is Opened and int(opened) != 0
    for d in (buf, opened):
        want = _scale_params(int(d), 2.0, 300)
        f(d, 2.0, 300, block=(128, 1, 1), grid=(3, 1))  # Function.__call__
        assert standin.last_launch().params == want
        f(d, np.float32(2.0), np.int32(300), block=(128, 1, 1), grid=(3, 1))
        assert standin.last_launch().params == want
        f.configure((3, 1), (128, 1, 1))(d, 2.0, 300)  # BoundLaunch
        assert standin.last_launch().params == want
        f.prepare("Pfi")
        f.prepared_call((3, 1), (128, 1, 1), d, 2.0, 300)
        assert standin.last_launch().params == want
    # the exact type still takes the quick path with the same bytes
    f(owner, 2.0, 300, block=(128, 1, 1), grid=(3, 1))
    assert standin.last_launch().params == _scale_params(int(owner), 2.0, 300)
    buf.grow(2 * x.nbytes)
    assert buf.grown == 2 * x.nbytes and buf.size >= 2 * x.nbytes
    buf.free()
    with pytest.raises(cuda.LogicError, match="parameter 0 is a freed DeviceAllocation"):
        f(buf, 2.0, 300, block=(128, 1, 1), grid=(3, 1))
    opened.close()
    del buf, opened, owner, d
    gc.collect()
    assert _live(standin) == base


@pytest.mark.standin
def test_pycuda_style_argument_handler_subclasses(standin, ctx, ptx):
    """PyCUDA's ArgumentHandler protocol for a subclass of one's own (reikna's
    Buffer): get_device_alloc() is the kernel's pointer, pre_call(stream)
    runs before the launch and post_call(stream) after it."""

    class Buffer(cuda.ArgumentHandler):
        def __init__(self, size):
            self._buffer = cuda.mem_alloc(size)
            self.size = size

        def __int__(self):
            return int(self._buffer)

        def get_device_alloc(self):
            return self._buffer

    class Hooked(Buffer):
        def pre_call(self, stream):
            self.events = [("pre", stream, standin.launches())]

        def post_call(self, stream):
            self.events.append(("post", stream, standin.launches()))

    class Bare(cuda.ArgumentHandler):
        pass

    f = cuda.module_from_buffer(ptx).get_function("scale")
    buf = Buffer(1200)
    f(buf, 2.0, 300, block=(128, 1, 1), grid=(3, 1))
    assert standin.last_launch().params == _scale_params(int(buf), 2.0, 300)
    h = Hooked(1200)
    s = cuda.Stream()
    before = standin.launches()
    f(h, 0.5, 300, block=(128, 1, 1), grid=(3, 1), stream=s)
    assert standin.last_launch().params == _scale_params(int(h), 0.5, 300)
    assert h.events == [("pre", s, before), ("post", s, before + 1)]
    with pytest.raises(
        TypeError, match="Bare is an ArgumentHandler without get_device_alloc\\(\\)"
    ):
        f(Bare(), 1.0, 1, block=(1, 1, 1))
    assert standin.launches() == before + 1


@pytest.mark.standin
def test_stream_and_event_subclasses(standin, ctx, ptx, rng):
    class MyStream(cuda.Stream):
        def __init__(self, flags=0, priority=0):
            super().__init__(flags, priority)
            self.synced = 0

        def synchronize(self):
            self.synced += 1
            return super().synchronize()

    class MyEvent(cuda.Event):
        def record(self, stream=None):
            self.recorded_on = stream
            return super().record(stream)

    base = _live(standin)
    f = cuda.module_from_buffer(ptx).get_function("scale")
    s = MyStream()
    assert type(s) is MyStream and isinstance(s, cuda.Stream) and s.synced == 0
    x = rng.standard_normal(300).astype(np.float32)
    d = cuda.mem_alloc(x.nbytes)
    cuda.memcpy_htod_async(d, x, s)
    f(d, 2.0, 300, block=(128, 1, 1), grid=(3, 1), stream=s)
    rec = standin.last_launch()
    assert rec.stream == s.handle and rec.params == _scale_params(int(d), 2.0, 300)
    launch = f.configure((3, 1), (128, 1, 1), stream=s)
    launch(d, 0.5, 300)
    assert standin.last_launch().stream == s.handle
    e, plain = MyEvent(), cuda.Event()
    e.record(s)
    assert e.recorded_on is s
    plain.record(s)
    s.wait_for_event(e)
    s.synchronize()
    assert s.synced == 1 and s.is_done()
    assert e.time_since(plain) == pytest.approx(-plain.time_since(e))
    assert isinstance(plain.time_till(e), float)
    back = np.empty_like(x)
    cuda.memcpy_dtoh_async(back, d, s)
    s.synchronize()
    np.testing.assert_array_equal(back, x)  # the stand-in runs no kernel
    n = MyStream.null()
    assert type(n) is MyStream and n.handle == cuda.Stream.null().handle
    # a capture on a subclass stream keeps the launch's arguments
    cs = MyStream()
    cs.begin_capture()
    f(d, 3.0, 300, block=(128, 1, 1), grid=(3, 1), stream=cs)
    g = cs.end_capture()
    nodes = g.nodes()
    assert len(nodes) == 1 and nodes[0].kind == "kernel"
    del s, cs, e, plain, launch, n, g, nodes
    gc.collect()
    assert standin.live()["streams"] == base["streams"]
    assert standin.live()["events"] == base["events"]


@pytest.mark.standin
def test_resource_subclasses_pack_as_resources(standin, ctx, ptx, rng):
    class Descr(cuda.ArrayDescriptor):
        def __init__(self, *args):
            super().__init__(*args)
            self.note = "2d"

    class Descr3(cuda.ArrayDescriptor3D):
        pass

    class MyArray(cuda.Array):
        def __init__(self, descriptor):
            super().__init__(descriptor)
            self.desc_used = descriptor

    class Tex(cuda.TextureObject):
        pass

    class Surf(cuda.SurfaceObject):
        def __init__(self, array):
            super().__init__(array)
            self.array_used = array

    class Map(cuda.TensorMap):
        pass

    a = rng.standard_normal((4, 8)).astype(np.float32)
    dsc = Descr(8, 4, cuda.array_format.FLOAT, 1)
    assert dsc.note == "2d" and repr(dsc).startswith("ArrayDescriptor(")
    d3 = Descr3(8, 4, 0, cuda.array_format.FLOAT, 1, cuda.array3d_flags.SURFACE_LDST)
    assert repr(d3).startswith("ArrayDescriptor3D(")
    ary = MyArray(dsc)
    assert type(ary) is MyArray and ary.desc_used is dsc
    c = cuda.Memcpy2D()
    c.set_src_host(a)
    c.set_dst_array(ary)
    c.width_in_bytes = c.src_pitch = 32
    c.height = 4
    c(aligned=True)
    np.testing.assert_array_equal(cuda.array_to_np(ary), a)
    assert ary.get_descriptor().width == 8
    sary = MyArray(d3)
    assert sary.get_descriptor_3d().flags == cuda.array3d_flags.SURFACE_LDST
    t, s = Tex(ary), Surf(sary)
    assert t.resource is ary and s.array_used is sary
    d = cuda.mem_alloc(64 * 64 * 4)
    m = Map(d, (16, 8), shape=(64, 64), dtype=np.float32, swizzle=0)
    assert m.tensor is d and len(bytes(m)) == 128
    f = cuda.module_from_buffer(ptx).get_function("takes")
    n = int(rng.integers(0, 1000))
    for call in (
        lambda: f(t, n, s, m, d, block=(1, 1, 1)),
        lambda: f.configure((1, 1), (1, 1, 1))(t, n, s, m, d),
    ):
        call()
        p = standin.last_launch().params
        assert len(p) == 200
        assert p[0:8] == t.handle.to_bytes(8, "little")
        assert p[8:12] == n.to_bytes(4, "little")
        assert p[16:24] == s.handle.to_bytes(8, "little")
        assert p[64:192] == bytes(m)
        assert p[192:200] == int(d).to_bytes(8, "little")
    g = cuda.module_from_buffer(ptx).get_function("scale")
    with pytest.raises(
        TypeError,
        match="kernel 'scale': parameter 0 is 8 bytes but a TensorMap is a 128-byte CUtensorMap",
    ):
        g(m, 1.0, 1, block=(1, 1, 1))
    with pytest.raises(
        TypeError,
        match="parameter 1 is 4 bytes but a test_subclass.Tex is "
        "a 64-bit cudaTextureObject_t|parameter 1 is 4 bytes "
        "but a Tex is a 64-bit cudaTextureObject_t",
    ):
        g(d, t, 1, block=(1, 1, 1))
    t.free()
    with pytest.raises(cuda.LogicError, match="the TextureObject was freed"):
        f(t, n, s, m, d, block=(1, 1, 1))


@pytest.mark.standin
def test_graph_pool_and_linker_subclasses(standin, ctx, ptx, rng):
    class MyGraph(cuda.Graph):
        def __init__(self):
            super().__init__()
            self.added = []

        def add_kernel_node(self, *args, **kwargs):
            node = super().add_kernel_node(*args, **kwargs)
            self.added.append(node)
            return node

    class Pool(cuda.MemoryPool):
        def allocate(self, n, stream=None):
            self.last = n
            return super().allocate(n, stream)

    class Buffer(cuda.VirtualBuffer):
        pass

    base = _live(standin)
    f = cuda.module_from_buffer(ptx).get_function("scale")
    g = MyGraph()
    assert type(g) is MyGraph and g.added == []
    buf = Buffer(1200)
    node = g.add_kernel_node(f, buf, 2.0, 300, block=(128, 1, 1), grid=(3, 1))
    assert g.added == [node] and node.graph is g and node.function is f
    exe = g.instantiate()
    exe.launch()
    exe.synchronize()
    assert standin.last_launch().params == _scale_params(int(buf), 2.0, 300)
    pool = Pool()
    a = pool.allocate(4096)
    assert pool.last == 4096 and isinstance(a, cuda.DeviceAllocation) and a.size == 4096
    x = rng.standard_normal(1024).astype(np.float32)
    cuda.memcpy_htod(a, x)
    back = np.empty_like(x)
    cuda.memcpy_dtoh(back, a)
    np.testing.assert_array_equal(back, x)

    class Link(_driver.Linker):
        def __init__(self, handler=None, options=None):
            super().__init__(handler, options)
            self.inputs = 0

        def add_data(self, *args):
            self.inputs += 1
            return super().add_data(*args)

    link = Link()
    assert type(link) is Link and link.inputs == 0 and not link.closed
    link.close()
    assert link.closed
    del g, node, exe, buf, pool, a, link
    gc.collect()
    assert _live(standin) == base


@pytest.mark.standin
def test_subclass_instances_in_cycles_are_collected(standin, ctx):
    """A heap subclass adds a __dict__ (a GC type over a non-GC base): the
    instances in reference cycles are collected and their handles released."""
    base = _live(standin)
    refs = []
    for b, args in (
        (cuda.Stream, ()),
        (cuda.Event, ()),
        (cuda.VirtualBuffer, (4096,)),
        (cuda.MemoryPool, ()),
        (cuda.Graph, ()),
        (cuda.Array, (cuda.ArrayDescriptor(8, 4, cuda.array_format.FLOAT, 1),)),
    ):
        sub, _ = _subclass(b)
        o = sub(*args)
        assert o.tag == "made" and o.me is o and type(o) is sub
        refs.append(weakref.ref(o))
        del o
    gc.collect()
    assert [r() for r in refs] == [None] * len(refs)
    assert _live(standin) == base


@pytest.mark.standin
def test_python_level_subclasses_on_the_standin(standin, ctx, rng):
    from pygpu import elementwise, gpuarray, reduction, scan
    from pygpu.compiler import SourceModule

    class Tagged(gpuarray.GPUArray):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.tag = "tagged"

    x = rng.standard_normal(100).astype(np.float32)
    g = Tagged(x.shape, x.dtype)
    g.set(x)
    assert type(g) is Tagged and g.tag == "tagged"
    np.testing.assert_array_equal(g.get(), x)
    # a view is a GPUArray, as PyCUDA's views are (a subclass's constructor
    # may take other arguments: reikna's Array rewraps its views itself)
    assert type(g[10:20]) is gpuarray.GPUArray
    np.testing.assert_array_equal(g[10:20].get(), x[10:20])

    class Mod(SourceModule):
        def __init__(self, source, **kwargs):
            super().__init__(source, **kwargs)
            self.source_text = source

    m = Mod(KERNELS, no_extern_c=True)
    f = m.get_function("scale")
    f(g, np.float32(2.0), np.int32(100), block=(128, 1, 1))
    assert standin.last_launch().params == _scale_params(int(g.gpudata), 2.0, 100)
    assert m.source_text == KERNELS

    class Ew(elementwise.ElementwiseKernel):
        def __call__(self, *args, **kwargs):
            self.called = True
            return super().__call__(*args, **kwargs)

    k = Ew("float *y, const float *x, float a", "y[i] = a * x[i]", "sub_axpy")
    y = gpuarray.empty_like(g)
    k(y, g, np.float32(3.0))
    assert k.called and standin.last_launch().name.startswith("sub_axpy")

    class Red(reduction.ReductionKernel):
        pass

    class Inc(scan.InclusiveScanKernel):
        pass

    class Exc(scan.ExclusiveScanKernel):
        pass

    r = Red(np.float32, "0", "a+b", "x[i]", "const float *x")
    i = Inc(np.float32, "a+b")
    e = Exc(np.float32, "a+b", "0")
    assert isinstance(r, reduction.ReductionKernel) and isinstance(i, scan.InclusiveScanKernel)
    assert isinstance(e, scan.ExclusiveScanKernel)


# ---- on a GPU: kernels run on subclass instances ----


@pytest.mark.gpu
def test_gpu_kernel_on_device_allocation_subclass(ctx, ptx, rng):
    class Buffer(cuda.VirtualBuffer):
        def __init__(self, nbytes):
            super().__init__(nbytes)
            self.label = "vb"

    f = cuda.module_from_buffer(ptx).get_function("scale")
    add = cuda.module_from_buffer(ptx).get_function("add")
    n = 5000
    x = rng.standard_normal(n).astype(np.float32)
    y = rng.standard_normal(n).astype(np.float32)
    bx, by, bo = Buffer(x.nbytes), Buffer(y.nbytes), Buffer(x.nbytes)
    cuda.memcpy_htod(bx, x)
    cuda.memcpy_htod(by, y)
    f(bx, np.float32(1.5), np.int32(n), block=(256, 1, 1), grid=((n + 255) // 256, 1))
    add(bx, by, bo, n, block=(256, 1, 1), grid=((n + 255) // 256, 1))
    out = np.empty_like(x)
    cuda.memcpy_dtoh(out, bo)
    np.testing.assert_allclose(out, x * np.float32(1.5) + y, rtol=1e-6)

    # through the CUDA Array Interface, as a foreign array would pass it
    class Cai:
        def __init__(self, buf):
            self.__cuda_array_interface__ = {
                "data": (int(buf), False),
                "shape": (n,),
                "typestr": "<f4",
                "version": 3,
            }

    f(Cai(bo), np.float32(2.0), np.int32(n), block=(256, 1, 1), grid=((n + 255) // 256, 1))
    cuda.memcpy_dtoh(out, bo)
    np.testing.assert_allclose(out, 2 * (x * np.float32(1.5) + y), rtol=1e-6)


@pytest.mark.gpu
def test_gpu_subclass_stream_graph_and_gpuarray(ctx, ptx, rng):
    from pygpu import gpuarray

    class MyStream(cuda.Stream):
        pass

    class MyGraph(cuda.Graph):
        pass

    class Tagged(gpuarray.GPUArray):
        pass

    f = cuda.module_from_buffer(ptx).get_function("scale")
    n = 4096
    x = rng.standard_normal(n).astype(np.float32)
    g = Tagged(x.shape, x.dtype)
    g.set(x)
    s = MyStream()
    f(g, np.float32(3.0), np.int32(n), block=(256, 1, 1), grid=(n // 256, 1), stream=s)
    s.synchronize()
    np.testing.assert_allclose(g.get(), 3 * x, rtol=1e-6)
    graph = MyGraph()
    graph.add_kernel_node(
        f, g.gpudata, np.float32(0.5), np.int32(n), block=(256, 1, 1), grid=(n // 256, 1)
    )
    exe = graph.instantiate()
    exe.launch(s)
    s.synchronize()
    np.testing.assert_allclose(g.get(), 1.5 * x, rtol=1e-6)
    h = g + g
    assert isinstance(h, gpuarray.GPUArray)
    np.testing.assert_allclose(h.get(), 3 * x, rtol=1e-6)
