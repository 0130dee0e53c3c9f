"""Import without a driver, the error classes, the loader's search order."""

import os
import subprocess
import sys
import textwrap

import pytest

import pygpu
import pygpu.driver as cuda
from pygpu import _driver, _loader

STUB = "/usr/local/cuda/lib64/stubs/libcuda.so"


def run_py(code, **env):
    e = dict(os.environ)
    e.update(env)
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=e,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_import_loads_no_cuda_library():
    r = run_py("""
        import pygpu, pygpu.driver, pygpu.compiler
        maps = open('/proc/self/maps').read()
        assert 'libcuda' not in maps, 'libcuda loaded at import'
        assert 'libnvrtc' not in maps, 'libnvrtc loaded at import'
        print('clean')
    """)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "clean"


def test_missing_driver_raises_the_documented_class_every_time():
    r = run_py(
        """
        import pygpu.driver as cuda
        for i in range(2):
            try:
                cuda.Device.count()
            except cuda.CudaUnavailableError as e:
                assert isinstance(e, cuda.Error) and isinstance(e, RuntimeError)
                print(e)
            else:
                raise SystemExit('no exception')
        try:
            cuda.mem_alloc(16)
        except cuda.CudaUnavailableError as e:
            print(e)
    """,
        PYGPU_LIBCUDA="/nonexistent/libcuda.so.1",
    )
    assert r.returncode == 0, r.stderr
    lines = r.stdout.strip().splitlines()
    assert len(lines) == 3
    assert lines[0] == lines[1] == lines[2]
    assert "/nonexistent/libcuda.so.1" in lines[0]
    assert "PYGPU_LIBCUDA" in lines[0]


@pytest.mark.skipif(not os.path.exists(STUB), reason="the toolkit's stub libcuda is not at " + STUB)
def test_stub_driver_is_reported_as_no_driver():
    r = run_py(
        """
        import pygpu.driver as cuda
        try:
            cuda.init()
        except cuda.CudaUnavailableError as e:
            print(e.code, e.routine, '|', e)
    """,
        PYGPU_LIBCUDA=STUB,
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("34 cuInit |"), r.stdout
    assert "stub library" in r.stdout


@pytest.mark.parametrize(
    "code,cls,name",
    [
        (2, cuda.MemoryError, "CUDA_ERROR_OUT_OF_MEMORY"),
        (1, cuda.LogicError, "CUDA_ERROR_INVALID_VALUE"),
        (400, cuda.LogicError, "CUDA_ERROR_INVALID_HANDLE"),
        (700, cuda.LaunchError, "CUDA_ERROR_ILLEGAL_ADDRESS"),
        (719, cuda.LaunchError, "CUDA_ERROR_LAUNCH_FAILED"),
        (999, cuda.RuntimeError, "CUDA_ERROR_UNKNOWN"),
    ],
)
def test_error_mapping(code, cls, name):
    with pytest.raises(cls) as ei:
        _driver._raise_for_code(code, "cuSomething")
    e = ei.value
    assert type(e) is cls
    assert isinstance(e, cuda.Error)
    assert (e.code, e.name, e.routine) == (code, name, "cuSomething")
    assert str(e).startswith("cuSomething failed: %s" % name)


def test_builtin_bases():
    assert issubclass(cuda.MemoryError, MemoryError)
    assert issubclass(cuda.RuntimeError, RuntimeError)
    assert not issubclass(cuda.LogicError, RuntimeError)
    assert cuda.Error.code is None and cuda.Error.name is None


def test_sticky_error_says_the_context_is_unusable():
    with pytest.raises(cuda.LaunchError, match="context is now unusable"):
        _driver._raise_for_code(700, "cuCtxSynchronize")


def test_nvrtc_candidates_order(tmp_path):
    # cuda-pathfinder's order: the environment's wheels win over the system
    # loader path (LD_LIBRARY_PATH) and over CUDA_HOME
    wheel = tmp_path / "site" / "nvidia" / "cu13" / "lib"
    wheel.mkdir(parents=True)
    (wheel / "libnvrtc.so.13").write_bytes(b"")
    (wheel / "libnvrtc-builtins.so.13.0").write_bytes(b"")
    (wheel / "libnvrtc.alt.so.13").write_bytes(b"")
    env = {
        "PYGPU_NVRTC": "/x/libnvrtc.so",
        "CUDA_HOME": "/opt/cuda13",
        "CUDA_PATH": "/opt/cp",
        "CONDA_PREFIX": "/opt/conda",
        "LD_LIBRARY_PATH": "/sys/lib",
    }
    c = _loader.nvrtc_candidates(env, [str(tmp_path / "site")])
    assert c[0] == "/x/libnvrtc.so"
    assert c[1] == str(wheel / "libnvrtc.so.13")
    i_conda = c.index("/opt/conda/lib/libnvrtc.so.13")
    i_soname = c.index("libnvrtc.so.13")
    i_home = c.index("/opt/cuda13/lib64/libnvrtc.so.13")
    i_path = c.index("/opt/cp/lib64/libnvrtc.so.13")
    i_usr = c.index("/usr/local/cuda/lib64/libnvrtc.so.13")
    assert 1 < i_conda < i_soname < i_home < i_path < i_usr
    assert not any("builtins" in x or ".alt." in x for x in c)
    assert len(c) == len(set(c))


def test_nvrtc_candidates_without_environment():
    c = _loader.nvrtc_candidates({}, [])
    assert c[0] == "libnvrtc.so.13"
    assert c[-1] == "/usr/local/cuda/lib64/libnvrtc.so"


def test_load_nvrtc_failure_lists_what_was_tried():
    r = run_py("""
        from pygpu import _driver
        try:
            _driver._load_nvrtc(['/nope/libnvrtc.so.13', '/also/not/here.so'])
        except _driver.CudaUnavailableError as e:
            print(e)
    """)
    assert r.returncode == 0, r.stderr
    assert "/nope/libnvrtc.so.13" in r.stdout and "/also/not/here.so" in r.stdout
    assert "CUDA_HOME" in r.stdout


def test_enums_and_version():
    assert cuda.device_attribute.MAX_THREADS_PER_BLOCK == 1
    assert cuda.function_attribute.NUM_REGS == 4
    assert cuda.error_code.CUDA_ERROR_OUT_OF_MEMORY == 2
    assert cuda.get_version()[0] >= 12
    assert pygpu.__version__


def test_device_rejects_bad_types_before_touching_the_driver():
    with pytest.raises(TypeError, match="ordinal"):
        cuda.Device(1.5)
    with pytest.raises(TypeError):
        cuda.Device(None)


def test_text_signatures():
    import inspect

    assert str(inspect.signature(cuda.mem_alloc)) == "(nbytes, /)"
    assert "stream=None" in str(inspect.signature(cuda.memcpy_htod_async))
    assert "message_handler=None" in str(inspect.signature(cuda.module_from_buffer))


def test_every_public_callable_has_a_signature():
    """The manual's API reference shows a signature for each function and
    method, C ones included (from their __text_signature__)."""
    import inspect
    import pygpu.compiler
    import pygpu.tools

    missing, checked = [], 0
    for mod in (cuda, pygpu.compiler, pygpu.tools):
        for name in getattr(mod, "__all__", None) or dir(mod):
            obj = getattr(mod, name)
            if (
                name.startswith("_")
                or inspect.ismodule(obj)
                or hasattr(obj, "__members__")
                or (isinstance(obj, type) and issubclass(obj, (BaseException, bytes)))
            ):
                continue
            targets = [(name, obj)] if callable(obj) else []
            if isinstance(obj, type):
                targets += [
                    ("%s.%s" % (name, m), getattr(obj, m))
                    for m, v in vars(obj).items()
                    if not m.startswith("_") and (callable(v) or isinstance(v, classmethod))
                ]
            for what, f in targets:
                checked += 1
                try:
                    inspect.signature(f)
                except (ValueError, TypeError):
                    missing.append("%s.%s" % (mod.__name__, what))
    assert checked > 120
    assert missing == []


def test_compile_error_is_also_in_driver_as_in_pycuda():
    import pygpu.compiler

    assert cuda.CompileError is pygpu.compiler.CompileError
    assert issubclass(cuda.CompileError, cuda.Error)
    with pytest.raises(AttributeError, match="has no attribute 'gpuarray'"):
        cuda.gpuarray


def test_star_import_exports_the_python_helpers_too():
    ns = {}
    exec("from pygpu.driver import *", ns)
    assert {
        "to_device",
        "from_device",
        "In",
        "Out",
        "InOut",
        "pagelocked_empty",
        "Memcpy2D",
        "mem_alloc",
        "Stream",
        "host_alloc_flags",
    } <= set(ns)
    assert not any(n.startswith("_") for n in ns if n != "__builtins__")


def test_in_out_wrappers_check_their_arrays():
    import numpy as np

    a = np.arange(12.0).reshape(3, 4)
    with pytest.raises(ValueError, match="not contiguous"):
        cuda.In(a[:, ::2])
    with pytest.raises(TypeError, match="NumPy array"):
        cuda.InOut([1, 2, 3])
    ro = np.arange(4.0)
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        cuda.Out(ro)
    cuda.In(ro)  # read-only is fine for input
    assert isinstance(cuda.InOut(a), cuda.ArgumentHandler)
