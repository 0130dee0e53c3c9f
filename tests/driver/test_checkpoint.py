"""pygpu.checkpoint: locking, checkpointing, restoring and unlocking another
CUDA process by pid (docs/checkpoint.md).  On the stand-in a child process
is named a CUDA process and moved through the driver's states; on a GPU a
child holding device arrays, a stream and a compiled module is checkpointed
(its memory leaves the GPU), restored, and computes on with its data intact."""

import ctypes
import os
import subprocess
import sys
import textwrap
import uuid

import pytest

import pygpu.driver as cuda
from pygpu import checkpoint

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
S = checkpoint.ProcessState


@pytest.fixture
def child():
    """A live process that is not this one."""
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    yield p.pid
    p.kill()
    p.wait()


@pytest.fixture
def cuda_child(standin, child):
    """The child, named a CUDA process to the stand-in."""
    fn = standin.lib.fakecuda_cuda_process
    fn.argtypes = [ctypes.c_int, ctypes.c_int]
    assert fn(child, 1) == 0
    yield child
    fn(child, 0)


@pytest.mark.standin
def test_the_states_in_turn(ctx, cuda_child):
    pid = cuda_child
    assert checkpoint.state(pid) is S.RUNNING and str(S.RUNNING) == "RUNNING"
    checkpoint.lock(pid, timeout=2.5)
    assert checkpoint.state(pid) is S.LOCKED
    checkpoint.checkpoint(pid)
    assert checkpoint.state(pid) is S.CHECKPOINTED
    checkpoint.restore(pid)
    assert checkpoint.state(pid) is S.LOCKED
    assert checkpoint.restore_thread_id(pid) == pid
    checkpoint.unlock(pid)
    assert checkpoint.state(pid) is S.RUNNING
    with checkpoint.suspended(pid) as s:
        assert s.pid == pid and checkpoint.state(pid) is S.CHECKPOINTED
    assert checkpoint.state(pid) is S.RUNNING


@pytest.mark.standin
@pytest.mark.parametrize(
    "call,routine",
    [
        (checkpoint.checkpoint, "cuCheckpointProcessCheckpoint"),
        (checkpoint.restore, "cuCheckpointProcessRestore"),
        (checkpoint.unlock, "cuCheckpointProcessUnlock"),
    ],
)
def test_a_call_out_of_turn_is_the_drivers_illegal_state(ctx, cuda_child, call, routine):
    with pytest.raises(cuda.Error, match="%s failed: CUDA_ERROR_ILLEGAL_STATE" % routine) as e:
        call(cuda_child)
    assert e.value.routine == routine and e.value.name == "CUDA_ERROR_ILLEGAL_STATE"
    assert checkpoint.state(cuda_child) is S.RUNNING


@pytest.mark.standin
def test_locking_twice_is_refused(ctx, cuda_child):
    checkpoint.lock(cuda_child)
    with pytest.raises(cuda.Error, match="cuCheckpointProcessLock failed: CUDA_ERROR_ILLEGAL"):
        checkpoint.lock(cuda_child)
    checkpoint.unlock(cuda_child)


@pytest.mark.standin
def test_a_failed_checkpoint_unlocks_again(ctx, standin, cuda_child):
    standin.fail("cuCheckpointProcessCheckpoint")
    with pytest.raises(cuda.Error, match="cuCheckpointProcessCheckpoint failed: CUDA_ERROR_UNK"):
        with checkpoint.suspended(cuda_child):
            raise AssertionError("not reached")
    assert checkpoint.state(cuda_child) is S.RUNNING


@pytest.mark.standin
def test_restore_onto_other_gpus(ctx, standin, cuda_child):
    dev = ctx.get_device()
    checkpoint.suspend(cuda_child)
    with pytest.raises(TypeError, match="gpu_map's key must be a uuid.UUID, .* not int"):
        checkpoint.restore(cuda_child, {0: dev})
    assert checkpoint.state(cuda_child) is S.CHECKPOINTED
    other = uuid.uuid4()
    checkpoint.resume(cuda_child, {dev: "GPU-%s" % other})
    assert checkpoint.state(cuda_child) is S.RUNNING


@pytest.mark.standin
def test_refusals(ctx, standin, child):
    # a live process the driver does not know
    with pytest.raises(checkpoint.NotACudaProcessError, match="process %d is not a CUDA" % child):
        checkpoint.lock(child)
    with pytest.raises(ValueError, match="is not a CUDA process") as e:
        checkpoint.state(child)
    assert e.value.pid == child and isinstance(e.value.__cause__, cuda.Error)
    # no such process
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    with pytest.raises(ValueError, match="checkpoint.lock\\(\\): no process has pid %d" % dead.pid):
        checkpoint.lock(dead.pid)
    # this process
    with pytest.raises(ValueError, match="a process cannot checkpoint itself"):
        checkpoint.checkpoint(os.getpid())
    with pytest.raises(TypeError, match="pid must be an int, not str"):
        checkpoint.state(str(child))
    with pytest.raises(TypeError, match="pid must be an int, not bool"):
        checkpoint.state(True)
    with pytest.raises(ValueError, match="pid must be positive, not 0"):
        checkpoint.unlock(0)
    with pytest.raises(ValueError, match="timeout must be positive"):
        checkpoint.lock(child, timeout=0)
    # the C layer's own checks
    from pygpu import _driver

    with pytest.raises(ValueError, match="pid must be positive, not -3"):
        _driver._checkpoint_state(-3)
    with pytest.raises(TypeError, match="GPU pairs must be bytes of 32-byte"):
        _driver._checkpoint_restore(child, b"x" * 31)
    with pytest.raises(OverflowError, match="timeout_ms"):
        _driver._checkpoint_lock(child, -1)


@pytest.mark.standin
@pytest.mark.parametrize(
    "hidden,call",
    [
        ("cuCheckpointProcessGetState", "state"),
        ("cuCheckpointProcessLock", "lock"),
        ("cuCheckpointProcessCheckpoint", "checkpoint"),
        ("cuCheckpointProcessRestore", "restore"),
        ("cuCheckpointProcessUnlock", "unlock"),
        ("cuCheckpointProcessGetRestoreThreadId", "restore_thread_id"),
    ],
)
def test_a_driver_older_than_12_8(tmp_path, child, hidden, call):
    sys.path.insert(0, os.path.join(ROOT, "tests", "support"))
    import fakecuda

    code = textwrap.dedent(
        """
        import ctypes, os, pygpu.driver as d
        from pygpu import checkpoint
        d.init()
        lib = ctypes.CDLL(os.environ["PYGPU_LIBCUDA"])
        lib.fakecuda_cuda_process(%d, 1)
        try:
            checkpoint.%s(%d)
        except d.LogicError as e:
            print(e)
        """
        % (child, call, child)
    )
    env = dict(os.environ, PYGPU_LIBCUDA=fakecuda.build(), FAKECUDA_HIDE=hidden)
    r = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == (
        "checkpoint.%s() (a CUDA 12.8 driver or newer) needs %s, which this CUDA driver "
        "does not provide" % ("state" if hidden.endswith("GetState") else call, hidden)
    )


# ---- on a GPU

CHILD = r"""
import sys
import numpy as np
import pygpu.autoinit
import pygpu.driver as cuda
from pygpu import gpuarray
from pygpu.compiler import SourceModule

rng = np.random.default_rng(1234)
n = 64 << 20  # 256 MiB a float32 array
a_h = rng.standard_normal(n, dtype=np.float32)
b_h = rng.integers(0, 2**32, n, dtype=np.uint32)
a, b = gpuarray.to_gpu(a_h), gpuarray.to_gpu(b_h)
s = cuda.Stream()
mod = SourceModule('''
extern "C" __global__ void axpb(float *y, const float *x, float k, int n)
{ int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] = k * x[i] + 1.0f; }
''')
f = mod.get_function("axpb")
cuda.Context.synchronize()
print("ready", flush=True)
assert sys.stdin.readline().strip() == "go"
# every byte as it was
assert np.array_equal(a.get(), a_h) and np.array_equal(b.get(), b_h)
y = gpuarray.empty_like(a)
f(y, a, np.float32(3.0), np.int32(n), block=(256, 1, 1), grid=((n + 255) // 256, 1), stream=s)
s.synchronize()
# the kernel's k * x + 1 is one fused multiply-add: rounded once, as in float64
np.testing.assert_array_equal(y.get(), (3.0 * a_h.astype(np.float64) + 1.0).astype(np.float32))
print("intact", flush=True)
"""


@pytest.mark.gpu
def test_checkpoint_and_restore_a_child_with_device_arrays(ctx):
    if cuda.get_driver_version() < 12080:
        pytest.skip("checkpoint needs a CUDA 12.8 driver")
    p = subprocess.Popen(
        [sys.executable, "-c", CHILD],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert p.stdout.readline().strip() == "ready", p.stderr.read()
        assert checkpoint.state(p.pid) is S.RUNNING
        free_before, _ = cuda.mem_get_info()
        checkpoint.lock(p.pid, timeout=30)
        assert checkpoint.state(p.pid) is S.LOCKED
        checkpoint.checkpoint(p.pid)
        assert checkpoint.state(p.pid) is S.CHECKPOINTED
        free_out, _ = cuda.mem_get_info()
        # the child's 512 MiB of arrays (and its context) left the GPU
        assert free_out - free_before >= 500 << 20, (free_before, free_out)
        checkpoint.restore(p.pid)
        assert checkpoint.state(p.pid) is S.LOCKED
        free_back, _ = cuda.mem_get_info()
        assert free_out - free_back >= 500 << 20
        checkpoint.unlock(p.pid)
        assert checkpoint.state(p.pid) is S.RUNNING
        out, err = p.communicate("go\n", timeout=300)
        assert p.returncode == 0, err
        assert out.strip() == "intact"
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
