"""pygpu in IPython/Jupyter: the %%cuda and %cuda_timeit magics, compile
errors in the user's own line numbers, reprs; a real notebook run by a real
kernel (nbclient + ipykernel)."""

import builtins
import os
import sys

import pytest

from pygpu import _display, compiler, tools

NOTEBOOK = os.path.join(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "notebooks", "pygpu_magic.ipynb"
)
BROKEN = "__global__ void k(float *x)\n{\n    x[0] = 1.0f +;\n}\n"


def test_sourcemodule_error_uses_the_users_line_numbers(tmp_cache):
    # before: "kernel.cu(4): error" and an excerpt showing the extern "C" { wrapper
    with pytest.raises(
        compiler.CompileError,
        match=r"kernel\.cu\(3\): error: expected an "
        r"expression",
    ) as ei:
        compiler.SourceModule(BROKEN, arch="sm_90")
    msg = str(ei.value)
    assert "->    3 |     x[0] = 1.0f +;" in msg
    assert "    1 | __global__ void k(float *x)" in msg
    assert 'extern "C"' not in msg and "kernel.cu(4)" not in msg
    # the object holds the user's own source and NVRTC's log in the user's numbers
    # (before: the wrapped source and "kernel.cu(4)", docs/jupyter.md said otherwise)
    assert ei.value.source == BROKEN
    assert "kernel.cu(3): error" in ei.value.log and "kernel.cu(4)" not in ei.value.log
    assert ei.value.stderr == ei.value.log


def test_compile_error_without_a_wrapper_is_unchanged(tmp_cache):
    with pytest.raises(compiler.CompileError, match=r"kernel\.cu\(3\): error") as ei:
        compiler.compile(BROKEN, arch="sm_90")
    assert "->    3 |     x[0] = 1.0f +;" in str(ei.value)


def test_compile_error_html_marks_the_users_line(tmp_cache):
    with pytest.raises(compiler.CompileError) as ei:
        compiler.SourceModule(BROKEN, arch="sm_90")
    h = _display.compile_error_html(ei.value)
    assert (
        '<tr style="background:#fdd"><td style="text-align:right;color:#888;'
        'padding-right:1em">3</td><td><code>    x[0] = 1.0f +;</code></td></tr>' in h
    )
    assert "<b>error</b>: expected an expression" in h
    assert "extern" not in h and "(1 error(s))" in h


def test_binary_repr_is_a_summary(tmp_cache):
    b = compiler.compile('extern "C" __global__ void k(float *x) { x[0] = 1; }', arch="sm_90")
    r = repr(b)
    assert r.startswith("<pygpu Binary: cubin for sm_90, ") and "sha256 " in r
    assert len(r) < 120 and "\\x" not in r
    assert b._repr_html_().startswith("<code>&lt;pygpu Binary: cubin for sm_90")
    assert bytes(b)[:4] == b"\x7fELF"  # still the bytes


def test_pool_reprs():
    assert (
        repr(tools.DeviceMemoryPool()) == "<DeviceMemoryPool: 0 active block(s), 0 held (0 bytes)>"
    )
    p = tools.PageLockedMemoryPool()
    p.stop_holding()
    assert repr(p) == "<PageLockedMemoryPool: 0 active block(s), 0 held (0 bytes), not holding>"


def test_star_import_keeps_the_builtin_compile():
    ns = {}
    exec("from pygpu.compiler import *", ns)
    assert "compile" not in ns and "SourceModule" in ns and "Binary" in ns
    assert compiler.compile is not builtins.compile


def test_kernels_in_finds_the_global_functions():
    from pygpu.ipython import kernels_in

    src = """
    __global__ void a(float *x, int n) { }
    extern "C" __global__ void __launch_bounds__(128) b(const double * __restrict__ y) { }
    template <typename T> __global__ void t(T *x) { }
    __device__ void helper(float x) { }
    __global__ void c(void) { }
    """
    assert kernels_in(src) == [
        ("a", ["float *x", "int n"]),
        ("b", ["const double * __restrict__ y"]),
        ("c", []),
    ]


@pytest.fixture
def shell(tmp_cache):
    pytest.importorskip("IPython")
    from IPython import get_ipython
    from IPython.testing.globalipapp import start_ipython

    ip = start_ipython() or get_ipython()
    ip.run_line_magic("load_ext", "pygpu")
    yield ip
    for name in ("saxpy", "k", "mod"):
        ip.user_ns.pop(name, None)


def test_cuda_magic_binds_kernels_without_a_gpu(shell, capsys, monkeypatch):
    monkeypatch.setenv("PYGPU_LIBCUDA", "/nonexistent/libcuda.so.1")
    if sys.modules["pygpu._driver"]._driver_loaded():
        pytest.skip("this process already loaded a driver")
    shell.run_cell_magic(
        "cuda",
        "--arch sm_80 -o -lineinfo",
        "__global__ void saxpy(float a, const float *x, float *y, int n)\n"
        "{ int i = threadIdx.x; if (i < n) y[i] = a * x[i] + y[i]; }\n",
    )
    assert "compiled for sm_80 (no GPU: not loaded): saxpy" in capsys.readouterr().out
    k = shell.user_ns["saxpy"]
    assert (
        repr(k) == "<pygpu kernel saxpy(float a, const float *x, float *y, int n), "
        "compiled only, no GPU>"
    )
    assert k.binary.arch == "sm_80" and k.binary.target == "cubin"
    import inspect

    assert (
        str(inspect.signature(k))
        == "(a, x, y, n, /, *, block, grid=(1, 1, 1), shared=0, stream=None, time_kernel=False)"
    )
    assert "block=(x, y, z), grid=(x, y, z)" in k.__doc__
    from pygpu import driver

    with pytest.raises(
        driver.CudaUnavailableError, match="saxpy was compiled \\(sm_80\\) but not loaded"
    ):
        k(1, 2, 3, 4, block=(1, 1, 1))


def test_cuda_magic_compile_error_shows_user_lines(shell, capsys):
    r = shell.run_cell("%%cuda --arch sm_90\n" + BROKEN)
    assert isinstance(r.error_in_exec, compiler.CompileError)
    out = capsys.readouterr().out
    assert "->    3 |     x[0] = 1.0f +;" in out and 'extern "C"' not in out


def test_cuda_magic_bad_arguments(shell):
    from pygpu.ipython import cuda_cell, cuda_timeit

    with pytest.raises(ValueError, match=r"%%cuda: bad arguments '--no-such'"):
        cuda_cell("--no-such", "", {})
    with pytest.raises(ValueError, match="%cuda_timeit: give a launch to time"):
        cuda_timeit("-n 5", {})
    with pytest.raises(ValueError, match="-n and -r must be >= 1, not 0 and 7"):
        cuda_timeit("-n 0 f()", {})


def test_pch_options():
    from pygpu.ipython import pch_options

    opts = pch_options("/tmp/x-cache")
    if tuple(compiler.nvrtc_version()) >= (12, 8):
        assert opts == ["-pch", "--pch-dir=/tmp/x-cache/pch", "--pch-messages=false"]
    else:
        assert opts == []


def _run_notebook():
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    pytest.importorskip("ipykernel")
    nb = nbformat.read(NOTEBOOK, as_version=4)
    client = nbclient.NotebookClient(
        nb,
        timeout=300,
        kernel_name="python3",
        resources={"metadata": {"path": os.path.dirname(NOTEBOOK)}},
    )
    client.execute()
    return nb.cells


def _text(cell):
    parts = []
    prev_stream = False
    for o in cell.outputs:
        if o.output_type == "stream":
            # one print() may arrive as several stream messages when the
            # machine is busy: they are one text
            if prev_stream:
                parts[-1] += o.text
            else:
                parts.append(o.text)
            prev_stream = True
            continue
        prev_stream = False
        if o.output_type in ("execute_result", "display_data"):
            parts.append(o.data.get("text/plain", ""))
        elif o.output_type == "error":
            parts.append("%s: %s" % (o.ename, o.evalue))
    return "\n".join(parts)


def _html(cell):
    return "\n".join(
        o.data.get("text/html", "")
        for o in cell.outputs
        if o.output_type in ("execute_result", "display_data")
    )


def test_notebook_in_a_real_kernel(tmp_path, monkeypatch):
    monkeypatch.setenv("PYGPU_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("PYGPU_LIBCUDA", str(tmp_path / "no-driver" / "libcuda.so.1"))
    monkeypatch.delenv("PYGPU_REQUIRE_GPU", raising=False)
    cells = _run_notebook()
    by = {i: _text(c) for i, c in enumerate(cells) if c.cell_type == "code"}
    assert "GPU: False" in by[1]
    assert "compiled for sm_90 (no GPU: not loaded): saxpy" in by[2]
    assert (
        by[3] == "<pygpu kernel saxpy(float a, const float *x, float *y, int n), "
        "compiled only, no GPU>"
    )
    assert by[4].startswith("<pygpu Binary: cubin for sm_90, ")
    assert _html(cells[4]).startswith("<code>&lt;pygpu Binary: cubin for sm_90")
    # the compile error: the user's line 4, HTML with the line marked, no wrapper
    err = cells[5]
    assert (
        "CompileError: NVRTC compilation failed:\nkernel.cu(4): error: expected an "
        "expression" in by[5]
    )
    assert "->    4 |     x[i] = 1.0f +;" in by[5] and 'extern "C"' not in by[5]
    assert (
        '<td style="text-align:right;color:#888;padding-right:1em">4</td><td><code>    '
        'x[i] = 1.0f +;</code>' in _html(err)
    )
    assert by[6] == "<DeviceMemoryPool: 0 active block(s), 0 held (0 bytes)>"
    assert by[7] == "compile is the built-in: True\n"
    assert by[8] == "no GPU: saxpy was compiled, not run\n"


@pytest.mark.gpu
def test_notebook_runs_the_kernel_on_a_gpu(tmp_path, monkeypatch):
    monkeypatch.setenv("PYGPU_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("PYGPU_REQUIRE_GPU", "1")
    cells = _run_notebook()
    by = {i: _text(c) for i, c in enumerate(cells) if c.cell_type == "code"}
    assert "GPU: True" in by[1]
    assert "compiled and loaded: saxpy" in by[2]
    assert by[3].endswith(", loaded>")
    assert "kernel.cu(4): error" in by[5]
    assert by[8] == "saxpy matches NumPy on 100003 elements\n"
    assert by[9] == "timed: 3 runs\n"


def test_kernels_in_extern_c_only():
    from pygpu.ipython import kernels_in

    src = (
        '#include <cub/block/block_reduce.cuh>\n'
        'extern "C" __global__ void bsum(const float *x) { }\n'
        '__global__ void mangled(float *x) { }\n'
    )
    assert kernels_in(src, extern_c_only=True) == [("bsum", ["const float *x"])]


# ---- issue 25: the kernels are the compiled module's; reserved names refused ----


def _no_driver(monkeypatch):
    monkeypatch.setenv("PYGPU_LIBCUDA", "/nonexistent/libcuda.so.1")
    if sys.modules["pygpu._driver"]._driver_loaded():
        pytest.skip("this process already loaded a driver")


CELL_12 = (
    '#include <gate_helper.h>\n'
    '__global__ void after_include(float *x, int n) { x[0] = helper(n); }\n'
    '// __global__ void commented(float *x) { }\n'
    '/* __global__ void\n   blocked(int n) { } */\n'
    '#if 0\n__global__ void preprocessed_away(int n) { }\n#endif\n'
    '#define MAKE(name) __global__ void name(int *p) { p[0] = 1; }\n'
    'MAKE(from_macro)\n'
    '__global__ void last(double *y) { y[0] = 2.0; }\n'
)


def _header(tmp_path):
    (tmp_path / "gate_helper.h").write_text(
        "__device__ inline float helper(int n) { return (float) n; }\n"
    )
    return str(tmp_path)


def _check_cell_12(ns, bound):
    assert list(bound) == ["after_include", "last", "from_macro"]
    assert set(ns) == {"after_include", "last", "from_macro"}
    assert bound["after_include"].params == ["float *x", "int n"]
    assert bound["from_macro"].params is None
    assert repr(bound["from_macro"]).startswith("<pygpu kernel from_macro(...)")
    import inspect

    assert str(inspect.signature(bound["from_macro"])).startswith("(*args, block")


def test_cuda_magic_binds_what_the_binary_holds_without_a_gpu(tmp_cache, tmp_path, monkeypatch):
    """Issue 25 defect 12: an #include right before a kernel hid it, and a
    commented-out kernel was bound (then failed to load with a GPU)."""
    from pygpu.ipython import cuda_cell

    _no_driver(monkeypatch)
    ns = {}
    bound = cuda_cell("--arch sm_80 -q -I " + _header(tmp_path), CELL_12, ns)
    _check_cell_12(ns, bound)


@pytest.mark.standin
def test_cuda_magic_binds_what_the_module_holds(standin, ctx, tmp_cache, tmp_path):
    from pygpu.ipython import cuda_cell

    ns = {}
    bound = cuda_cell("-q -I " + _header(tmp_path), CELL_12, ns)  # no LogicError
    _check_cell_12(ns, bound)
    assert all(k.function is not None for k in bound.values())


def test_kernels_of_reads_cubin_and_ptx(tmp_cache):
    from pygpu.ipython import kernels_of

    src = (
        'extern "C" __global__ void foo(float *x) { x[0] = 1; }\n'
        '__device__ int helper(int a) { return a + 1; }\n'
        'extern "C" __global__ void bar(int *n) { n[0] = helper(n[0]); }\n'
        'template <class T> __global__ void tk(T *x) { }\n'
        'template __global__ void tk<float>(float *);\n'
    )
    for arch in ("sm_90", "compute_90"):
        b = compiler.compile(src, arch=arch)
        assert sorted(kernels_of(b)) == ["_Z2tkIfEvPT_", "bar", "foo"], arch


@pytest.mark.parametrize(
    "name",
    [
        "__builtins__",
        "__name__",
        "__doc__",
        "In",
        "Out",
        "__",
        "_i",
        "_ih",
        "_oh",
        "_5",
        "_i12",
        "get_ipython",
        "exit",
    ],
)
def test_cuda_magic_refuses_names_the_namespace_uses(tmp_cache, monkeypatch, name):
    """Issue 25 defect 13: a kernel named __builtins__ replaced the
    namespace's builtins (every later cell failed)."""
    from pygpu.ipython import cuda_cell

    _no_driver(monkeypatch)
    ns = {"__builtins__": builtins, "keep": 1}
    cell = (
        "__global__ void fine(int *p) { }\n__global__ void %s(float *x) { x[0] = 1.0f; }\n" % name
    )
    with pytest.raises(
        ValueError,
        match=r"%%%%cuda: a kernel named '%s' would replace a name "
        r"the notebook's namespace itself uses" % name,
    ):
        cuda_cell("--arch sm_80 -q", cell, ns)
    assert ns == {"__builtins__": builtins, "keep": 1}  # nothing bound
    with pytest.raises(ValueError, match=r"--module '%s' would replace a name" % name):
        cuda_cell("--arch sm_80 -q --module %s" % name, "__global__ void fine(int *p) { }", ns)
    assert ns == {"__builtins__": builtins, "keep": 1}
