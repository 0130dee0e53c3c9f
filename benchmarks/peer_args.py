"""What each binding does with three common mistakes, side by side.

    python3 benchmarks/peer_args.py

Through pygpu, CuPy RawKernel, cuda.core and PyCUDA (each that imports):
1. probe(int i, float f, short h, double *out) called with the plain Python
   values 7, 2.5 and -3: what the kernel received, or the exception;
2. the same kernel launched with a block of 2048 threads (the limit is 1024);
3. a NumPy (host) array passed where the kernel takes a device pointer;
4. a NumPy float64 scalar passed for the float parameter;
5. a kernel that includes a header from an -I directory, compiled, the
   header edited (VAL 1 -> VAL 22), and the same source compiled again in
   the same process: which value the second kernel writes (1 is stale).
Each probe runs in its own process.  The comparison chapter of the manual
quotes the result.
"""

import sys

import numpy as np

SRC = (
    'extern "C" __global__ void probe(int i, float f, short h, double *out)\n'
    '{ out[0] = i; out[1] = f; out[2] = h; }\n'
)
HSRC = (
    '#include "probe_val.h"\n'
    'extern "C" __global__ void probe(int i, float f, short h, double *out)\n'
    '{ out[0] = VAL; out[1] = 0; out[2] = 0; }\n'
)


def header_twice(build):
    """build(source, include_dir) -> a function that runs the kernel and
    returns out; compiles HSRC, edits the header, compiles it again."""
    import tempfile

    d = tempfile.mkdtemp()
    h = d + "/probe_val.h"
    with open(h, "w") as f:
        f.write("#define VAL 1\n")
    first = build(HSRC, d)()
    with open(h, "w") as f:
        f.write("#define VAL 22  /* edited */\n")
    second = build(HSRC, d)()
    return (first[0], second[0])


ARGS = "(7, 2.5, -3)"


def show(name, fn):
    try:
        got = fn()
        print("%-10s received %s" % (name, tuple(float(v) for v in got)))
    except Exception as e:
        msg = str(e).splitlines()[0] if str(e) else ""
        print("%-10s %s: %s" % (name, type(e).__name__, msg[:110]))


def via_pygpu(case):
    import pygpu.autoinit  # noqa: F401
    import pygpu.driver as cuda
    from pygpu.compiler import SourceModule

    if case == "header":

        def build(src, d):
            f = SourceModule(src, no_extern_c=True, options=["-I" + d]).get_function("probe")

            def run():
                out = np.zeros(3)
                f(7, 2.5, -3, cuda.Out(out), block=(1, 1, 1))
                return out

            return run

        return header_twice(build)
    f = SourceModule(SRC, no_extern_c=True).get_function("probe")
    out = np.zeros(3)
    if case == "f64":
        f(np.int32(7), np.float64(2.5), np.int16(-3), cuda.Out(out), block=(1, 1, 1))
    elif case == "numbers":
        f(7, 2.5, -3, cuda.Out(out), block=(1, 1, 1))
    elif case == "block":
        f(np.int32(7), np.float32(2.5), np.int16(-3), cuda.Out(out), block=(2048, 1, 1))
    else:
        f(np.int32(7), np.float32(2.5), np.int16(-3), out, block=(1, 1, 1))
    cuda.Context.synchronize()
    return out


def via_cupy(case):
    import cupy as cp

    if case == "header":

        def build(src, d):
            f = cp.RawModule(code=src, options=("-I" + d,)).get_function("probe")

            def run():
                out = cp.zeros(3, cp.float64)
                f((1,), (1,), (np.int32(7), np.float32(2.5), np.int16(-3), out))
                return out.get()

            return run

        return header_twice(build)
    f = cp.RawKernel(SRC, "probe")
    out = cp.zeros(3, cp.float64)
    if case == "f64":
        f((1,), (1,), (np.int32(7), np.float64(2.5), np.int16(-3), out))
    elif case == "numbers":
        f((1,), (1,), (7, 2.5, -3, out))
    elif case == "block":
        f((1,), (2048,), (np.int32(7), np.float32(2.5), np.int16(-3), out))
    else:
        f((1,), (1,), (np.int32(7), np.float32(2.5), np.int16(-3), np.zeros(3)))
    cp.cuda.Device().synchronize()
    return out.get()


def via_cuda_core(case):
    try:
        from cuda.core import Device, LaunchConfig, Program, ProgramOptions, launch
    except ImportError:
        from cuda.core.experimental import Device, LaunchConfig, Program, ProgramOptions, launch
    import cupy as cp

    dev = Device()
    dev.set_current()
    s = dev.create_stream()
    arch = "sm_" + "".join(str(x) for x in dev.compute_capability)
    if case == "header":

        def build(src, d):
            k = (
                Program(src, code_type="c++", options=ProgramOptions(arch=arch, include_path=d))
                .compile("cubin")
                .get_kernel("probe")
            )

            def run():
                out = cp.zeros(3, cp.float64)
                launch(
                    s,
                    LaunchConfig(grid=1, block=1),
                    k,
                    np.int32(7),
                    np.float32(2.5),
                    np.int16(-3),
                    out.data.ptr,
                )
                s.sync()
                return out.get()

            return run

        return header_twice(build)
    k = (
        Program(SRC, code_type="c++", options=ProgramOptions(arch=arch))
        .compile("cubin")
        .get_kernel("probe")
    )
    out = cp.zeros(3, cp.float64)
    if case == "f64":
        launch(
            s,
            LaunchConfig(grid=1, block=1),
            k,
            np.int32(7),
            np.float64(2.5),
            np.int16(-3),
            out.data.ptr,
        )
    elif case == "numbers":
        launch(s, LaunchConfig(grid=1, block=1), k, 7, 2.5, -3, out.data.ptr)
    elif case == "block":
        launch(
            s,
            LaunchConfig(grid=1, block=2048),
            k,
            np.int32(7),
            np.float32(2.5),
            np.int16(-3),
            out.data.ptr,
        )
    else:
        launch(
            s,
            LaunchConfig(grid=1, block=1),
            k,
            np.int32(7),
            np.float32(2.5),
            np.int16(-3),
            np.zeros(3),
        )
    s.sync()
    return out.get()


def via_pycuda(case):
    import pycuda.autoprimaryctx  # noqa: F401
    import pycuda.driver as drv
    from pycuda.compiler import SourceModule

    if case == "header":

        def build(src, d):
            f = SourceModule(src, no_extern_c=True, include_dirs=[d]).get_function("probe")

            def run():
                out = np.zeros(3)
                f(np.int32(7), np.float32(2.5), np.int16(-3), drv.Out(out), block=(1, 1, 1))
                return out

            return run

        return header_twice(build)
    f = SourceModule(SRC, no_extern_c=True).get_function("probe")
    out = np.zeros(3)
    if case == "f64":
        f(np.int32(7), np.float64(2.5), np.int16(-3), drv.Out(out), block=(1, 1, 1))
    elif case == "numbers":
        f(7, 2.5, -3, drv.Out(out), block=(1, 1, 1))
    elif case == "block":
        f(np.int32(7), np.float32(2.5), np.int16(-3), drv.Out(out), block=(2048, 1, 1))
    else:
        f(np.int32(7), np.float32(2.5), np.int16(-3), out, block=(1, 1, 1))
    drv.Context.synchronize()
    return out


PROBES = {"pygpu": via_pygpu, "cupy": via_cupy, "cuda.core": via_cuda_core, "pycuda": via_pycuda}
CASES = (
    ("numbers", "probe(int i, float f, short h, double *out) called with " + ARGS),
    ("block", "the same launched with a block of 2048 threads"),
    ("host", "a NumPy (host) array passed for double *out"),
    ("f64", "np.float64(2.5) passed for float f (with np.int32(7), np.int16(-3))"),
    ("header", "VAL from an included header, before and after editing it (1 -> 22)"),
)


def main():
    if len(sys.argv) == 3:  # one probe, in its own process (a fault is sticky)
        show(sys.argv[1], lambda: PROBES[sys.argv[1]](sys.argv[2]))
        return 0
    import subprocess

    for case, title in CASES:
        print(title + ":")
        for name in PROBES:
            r = subprocess.run(
                [sys.executable, __file__, name, case], capture_output=True, text=True
            )
            out = r.stdout.strip() or (
                "%-10s exited %d: %s"
                % (name, r.returncode, (r.stderr.strip().splitlines() or [""])[-1][:110])
            )
            print("  " + out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
