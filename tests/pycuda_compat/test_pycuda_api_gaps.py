"""Small PyCUDA API gaps found by running PyCUDA 2026.1's examples/ and
doc/ code through the alias (issue 24): the ArgumentHandler protocol of
In/Out/InOut, CudaModule as a base class, get_texref/get_surfref's error.
stand-in tests run the launch path (kernels do not run there: the copies
and the packed parameters are checked)."""

import struct

import numpy as np
import pytest

import pygpu.driver as cuda
from pygpu import compiler, elementwise

KERNEL = r"""
extern "C" __global__ void scale(float *x, float a, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] *= a;
}
"""


@pytest.fixture(scope="module")
def ptx():
    return bytes(compiler.compile(KERNEL, target="ptx", arch="compute_90"))


def _scale_params(ptr, a, n):
    return struct.pack("<Qfi", ptr, a, n)


@pytest.mark.driver
@pytest.mark.parametrize(
    "cls, copies_in, copies_out",
    [(cuda.In, True, False), (cuda.Out, False, True), (cuda.InOut, True, True)],
)
def test_in_out_have_pycudas_handler_protocol(cls, copies_in, copies_out, ctx, rng):
    """get_device_alloc(), pre_call(stream), post_call(stream) as PyCUDA's
    In/Out/InOut have them, for code that drives them itself."""
    h = rng.standard_normal(300).astype(np.float32)
    a = cls(h)
    assert a.dev_alloc is None
    dev = a.get_device_alloc()
    assert a.get_device_alloc() is dev and a.dev_alloc is dev
    marker = rng.standard_normal(300).astype(np.float32)
    cuda.memcpy_htod(dev, marker)
    a.pre_call(None)
    back = np.empty_like(h)
    cuda.memcpy_dtoh(back, dev)
    np.testing.assert_array_equal(back, h if copies_in else marker)
    other = rng.standard_normal(300).astype(np.float32)
    cuda.memcpy_htod(dev, other)
    a.post_call(None)
    np.testing.assert_array_equal(h, other if copies_out else a.array)
    assert isinstance(a, cuda.ArgumentHandler)


@pytest.mark.standin
def test_in_subclass_overriding_the_protocol_is_followed(standin, ctx, ptx, rng):
    """A subclass of In that overrides pre_call/post_call (PyCUDA's
    protocol) has them called around the launch, with its
    get_device_alloc() as the pointer; plain In/Out/InOut keep pygpu's
    path (a stream-ordered copy)."""
    events = []

    class Traced(cuda.InOut):
        def pre_call(self, stream):
            events.append(("pre", stream, standin.launches()))
            super().pre_call(stream)

        def post_call(self, stream):
            events.append(("post", stream, standin.launches()))
            super().post_call(stream)

    f = cuda.module_from_buffer(ptx).get_function("scale")
    h = rng.standard_normal(300).astype(np.float32)
    keep = h.copy()
    t = Traced(h)
    s = cuda.Stream()
    before = standin.launches()
    f(t, np.float32(2.0), np.int32(300), block=(128, 1, 1), grid=(3, 1), stream=s)
    assert events == [("pre", s, before), ("post", s, before + 1)]
    assert standin.last_launch().params == _scale_params(int(t.dev_alloc), 2.0, 300)
    # the kernel did not run on the stand-in: the copy in and back leave h
    np.testing.assert_array_equal(h, keep)
    # the plain types never call the protocol (their copies are pygpu's own)
    plain = cuda.InOut(h)
    f(plain, np.float32(2.0), np.int32(300), block=(128, 1, 1), grid=(3, 1))
    assert plain.dev_alloc is None and len(events) == 2


@pytest.mark.standin
def test_cudamodule_subclass_as_pycudas(standin, ctx, ptx):
    """PyCUDA code may subclass CudaModule, set self.module and call
    _bind_module(): get_function and get_global then work."""

    class FromBuffer(compiler.CudaModule):
        def __init__(self, image):
            self.module = cuda.module_from_buffer(image)
            self._bind_module()

    m = FromBuffer(ptx)
    assert isinstance(m, compiler.CudaModule)
    f = m.get_function("scale")
    assert isinstance(f, cuda.Function)
    with pytest.raises(
        cuda.LogicError,
        match="get_texref\\('tex'\\): texture and surface references were removed in CUDA 12",
    ):
        m.get_texref("tex")


def test_texture_references_are_a_clear_logic_error():
    msg = (
        r"^%s\('%s'\): texture and surface references were removed in CUDA 12, so no "
        r"module has one \(PyCUDA's call fails there too, with cuModule%s's 'named symbol "
        r"not found'\); pass a TextureObject or SurfaceObject to the kernel as a "
        r"cudaTextureObject_t / cudaSurfaceObject_t argument instead \(the manual's "
        r"'textures' chapter\)$"
    )
    m = compiler.CudaModule()
    with pytest.raises(cuda.LogicError, match=msg % ("get_texref", "tex", "GetTexRef")):
        m.get_texref("tex")
    with pytest.raises(cuda.LogicError, match=msg % ("get_surfref", "surf", "GetSurfRef")):
        m.get_surfref("surf")
    k = elementwise.ElementwiseKernel("float *x", "x[i] = 1")
    with pytest.raises(cuda.LogicError, match=msg % ("get_texref", "tex_a0", "GetTexRef")):
        k.get_texref("tex_a0")
    # PyCUDA code catches it as its driver error
    with pytest.raises(cuda.Error):
        m.get_texref("tex")


# ---- ReductionKernel(..., kernel_wrapper=) (PyCUDA's reduction-perf.py) ----


def _timer_wrapper(log):
    """PyCUDA's reduction-perf.py's wrap_with_timer, recording its calls."""

    def wrap(f):
        def result(*args, **kwargs):
            start, stop = cuda.Event(), cuda.Event()
            start.record()
            f(*args, **kwargs)
            stop.record()
            stop.synchronize()
            log.append((args[0], args[1], stop.time_since(start)))

        return result

    return wrap


@pytest.mark.standin
@pytest.mark.parametrize("n, stages", [(10, 1), (1_000_003, 2)])
def test_reduction_kernel_wrapper(n, stages, standin, ctx):
    from pygpu import gpuarray as ga
    from pygpu import reduction

    k = reduction.get_sum_kernel(None, np.dtype(np.float32))
    a = ga.zeros(n, np.float32)
    log = []
    before = standin.launches()
    r = k(a, kernel_wrapper=_timer_wrapper(log))
    assert r.shape == () and r.dtype == np.float32
    assert len(log) == stages == standin.launches() - before
    assert all(t >= 0 for _, _, t in log)
    assert log[-1][0] == (1, 1) or stages == 1
    with pytest.raises(TypeError, match="'int' object is not callable"):
        k(a, kernel_wrapper=lambda f: 5)


@pytest.mark.gpu
def test_reduction_kernel_wrapper_result(ctx, rng):
    from pygpu import gpuarray as ga
    from pygpu import reduction

    x = rng.standard_normal(1_000_003).astype(np.float32)
    y = rng.standard_normal(1_000_003).astype(np.float32)
    k = reduction.get_dot_kernel(np.float32, np.float32, np.float32)
    log = []
    r = k(ga.to_gpu(x), ga.to_gpu(y), kernel_wrapper=_timer_wrapper(log)).get()
    want = np.dot(x.astype(np.float64), y.astype(np.float64))
    assert abs(r - want) <= 1e-5 * np.abs(x * y).sum()
    assert len(log) == 2 and all(t > 0 for _, _, t in log)
