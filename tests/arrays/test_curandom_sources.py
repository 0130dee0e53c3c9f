"""PyCUDA's curandom source templates in pygpu.curandom: each generator
module PyCUDA builds from them compiles under NVRTC (to PTX, no GPU), the
MD5 fragment of PyCUDA's rand() computes MD5 (checked against hashlib by
compiling it as host C), and on a GPU a generator built from the templates
runs."""

import hashlib
import shutil
import struct
import subprocess

import numpy as np
import pytest

from pygpu import compiler, curandom

IV = (0x67452301, 0xEFCDAB89, 0x98BADCFE, 0x10325476)

GENERATORS = {
    # kind: (state type, vector type, extra sources, skip-ahead source, scramble type)
    "xorwow": (
        "curandStateXORWOW",
        "unsigned long long",
        curandom.xorwow_random_source + curandom.xorwow_skip_ahead_sequence_source,
        curandom.random_skip_ahead64_source,
        None,
    ),
    "mrg32k3a": (
        "curandStateMRG32k3a",
        "unsigned long long",
        curandom.mrg32k3a_random_source + curandom.mrg32k3a_skip_ahead_sequence_source,
        curandom.random_skip_ahead64_source,
        None,
    ),
    "sobol32": (
        "curandStateSobol32",
        "curandDirectionVectors32_t",
        curandom.sobol_random_source,
        curandom.random_skip_ahead32_source,
        None,
    ),
    "scrambled_sobol32": (
        "curandStateScrambledSobol32",
        "curandDirectionVectors32_t",
        curandom.scrambledsobol_random_source,
        curandom.random_skip_ahead32_source,
        "unsigned int",
    ),
    "sobol64": (
        "curandStateSobol64",
        "curandDirectionVectors64_t",
        curandom.sobol_random_source,
        curandom.random_skip_ahead64_source,
        None,
    ),
    "scrambled_sobol64": (
        "curandStateScrambledSobol64",
        "curandDirectionVectors64_t",
        curandom.scrambledsobol_random_source,
        curandom.random_skip_ahead64_source,
        "unsigned long long",
    ),
}


def _module_source(kind):
    state, vector, extra, skip, scramble = GENERATORS[kind]
    gens = [
        curandom.gen_template
        % dict(name="gen_uniform_float", state_type=state, out_type="float", suffix="_uniform"),
        curandom.gen_template
        % dict(
            name="gen_normal_double", state_type=state, out_type="double", suffix="_normal_double"
        ),
        curandom.gen_log_template
        % dict(
            name="gen_log_normal_float",
            state_type=state,
            out_type="float",
            in_type="float",
            suffix="_normal",
        ),
    ]
    if kind in ("xorwow", "mrg32k3a"):
        gens += [
            curandom.gen_poisson_template
            % dict(name="gen_poisson_uint", state_type=state, out_type="unsigned int", suffix=""),
            curandom.gen_poisson_inplace_template
            % dict(
                name="gen_poisson_inplace_float", state_type=state, inout_type="float", suffix=""
            ),
        ]
    keys = dict(state_type=state, vector_type=vector, generators="".join(gens))
    if scramble:
        keys["scramble_type"] = scramble
    return (curandom.random_source + extra + skip) % keys


def _ptx(src):
    try:
        return bytes(
            compiler.compile(
                src,
                arch="compute_90",
                target="ptx",
                include_dirs=curandom._curand_include_dirs(),
                cache_dir=False,
            )
        ).decode()
    except compiler.CompileError as e:
        if "curand_kernel.h" in str(e) and "cannot open" in str(e):
            pytest.skip("cuRAND's device headers are not installed here")
        raise


@pytest.mark.parametrize("kind", sorted(GENERATORS))
def test_generator_modules_compile(kind):
    ptx = _ptx(_module_source(kind))
    names = {line.split()[-1].rstrip("(") for line in ptx.splitlines() if ".entry" in line}
    want = {
        "prepare",
        "skip_ahead",
        "skip_ahead_array",
        "gen_uniform_float",
        "gen_normal_double",
        "gen_log_normal_float",
    }
    if kind in ("xorwow", "mrg32k3a"):
        want |= {
            "skip_ahead_sequence",
            "skip_ahead_sequence_array",
            "gen_poisson_uint",
            "gen_poisson_inplace_float",
        }
    if kind == "mrg32k3a":
        want |= {"skip_ahead_subsequence", "skip_ahead_subsequence_array"}
    assert want <= names, sorted(want - names)


def test_templates_take_pycudas_keys():
    assert set(_keys(curandom.gen_template)) == {"name", "state_type", "out_type", "suffix"}
    assert set(_keys(curandom.gen_log_template)) == {
        "name",
        "state_type",
        "out_type",
        "in_type",
        "suffix",
    }
    assert set(_keys(curandom.gen_poisson_inplace_template)) == {
        "name",
        "state_type",
        "inout_type",
        "suffix",
    }
    assert set(_keys(curandom.random_source)) == {"generators"}
    assert set(_keys(curandom.scrambledsobol_random_source)) == {
        "state_type",
        "vector_type",
        "scramble_type",
    }
    assert set(_keys(curandom.random_skip_ahead32_source)) == {"state_type"}


def _keys(template):
    import re

    return re.findall(r"%\((\w+)\)s", template)


def _md5_words(message55):
    """The 16 words of the one padded MD5 block of a 55-byte message."""
    block = message55 + b"\x80" + struct.pack("<Q", 8 * len(message55))
    assert len(block) == 64
    return struct.unpack("<16I", block)


def _md5_compress(words):
    """MD5's compression of one block from the initial state (RFC 1321)."""
    import math

    k = [int(abs(math.sin(j + 1)) * 2**32) & 0xFFFFFFFF for j in range(64)]
    s = [7, 12, 17, 22] * 4 + [5, 9, 14, 20] * 4 + [4, 11, 16, 23] * 4 + [6, 10, 15, 21] * 4
    a, b, c, d = IV
    m = 0xFFFFFFFF
    for j in range(64):
        if j < 16:
            f, g = (b & c) | (~b & d), j
        elif j < 32:
            f, g = (d & b) | (~d & c), (5 * j + 1) % 16
        elif j < 48:
            f, g = b ^ c ^ d, (3 * j + 5) % 16
        else:
            f, g = c ^ (b | (~d & m)), (7 * j) % 16
        x = (a + (f & m) + k[j] + words[g]) & m
        a, d, c, b = d, c, b, (b + (((x << s[j]) | (x >> (32 - s[j]))) & m)) & m
    return tuple((v + iv) & m for v, iv in zip((a, b, c, d), IV))


def test_md5_reference_is_md5():
    rng = np.random.default_rng()
    for _ in range(5):
        msg = rng.integers(0, 256, 55, dtype=np.uint8).tobytes()
        assert struct.pack("<4I", *_md5_compress(_md5_words(msg))) == hashlib.md5(msg).digest()


HOST_MD5 = r"""
#include <stdio.h>
#include <stdlib.h>
struct u3 { unsigned x, y, z; };
int main(int argc, char **argv)
{
    unsigned w[15];
    for (int k = 0; k < 15; k++) w[k] = (unsigned)strtoul(argv[k + 1], NULL, 10);
    struct u3 threadIdx = {w[0], w[1], w[2]}, blockIdx = {w[3], w[4], w[5]};
    struct u3 blockDim = {w[9], w[10], w[11]}, gridDim = {w[12], w[13], w[14]};
    unsigned seed = w[6], i = w[7], n = w[8];
    %s
    printf("%%u %%u %%u %%u\n", a, b, c, d);
    return 0;
}
"""


def test_md5_code_computes_md5(tmp_path):
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler here")
    src = tmp_path / "md5.c"
    src.write_text(HOST_MD5 % curandom.md5_code)
    exe = tmp_path / "md5"
    r = subprocess.run([cc, "-O1", "-o", str(exe), str(src)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    rng = np.random.default_rng()
    for _ in range(4):
        msg = rng.integers(0, 256, 55, dtype=np.uint8).tobytes()
        words = _md5_words(msg)
        assert words[15] == 0  # the fragment's sixteenth word is 0
        out = subprocess.run(
            [str(exe)] + [str(v) for v in words[:15]], capture_output=True, text=True, check=True
        ).stdout.split()
        assert struct.pack("<4I", *map(int, out)) == hashlib.md5(msg).digest()


def test_md5_code_compiles_in_an_elementwise_kernel():
    src = (
        'extern "C" __global__ void k(unsigned int *dest, unsigned int seed, '
        'unsigned int n) { unsigned int i = blockIdx.x * blockDim.x + threadIdx.x; '
        'if (i < n) {' + curandom.md5_code + ' dest[i] = a ^ b ^ c ^ d; } }'
    )
    assert ".entry k" in _ptx(src)


@pytest.mark.gpu
def test_md5_code_on_the_gpu(ctx, rng):
    import pygpu.driver as cuda
    from pygpu.compiler import SourceModule

    src = (
        '__global__ void k(unsigned int *dest, unsigned int seed, unsigned int n) {'
        ' unsigned int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) {'
        + curandom.md5_code
        + ' dest[4*i] = a; dest[4*i+1] = b; dest[4*i+2] = c;'
        ' dest[4*i+3] = d; } }'
    )
    f = SourceModule(src).get_function("k")
    n, seed = 200, int(rng.integers(0, 2**31))
    out = np.zeros(4 * n, np.uint32)
    f(cuda.Out(out), np.uint32(seed), np.uint32(n), block=(64, 1, 1), grid=(4, 1))
    want = []
    for i in range(n):
        words = (i % 64, 0, 0, i // 64, 0, 0, seed, i, n, 64, 1, 1, 4, 1, 1, 0)
        want.extend(_md5_compress(words))
    np.testing.assert_array_equal(out, np.array(want, np.uint32))


@pytest.mark.gpu
def test_a_generator_built_from_the_templates_runs(ctx, rng):
    import pygpu.driver as cuda
    from pygpu.compiler import SourceModule

    mod = SourceModule(
        _module_source("xorwow"), no_extern_c=True, include_dirs=curandom._curand_include_dirs()
    )
    nstates = 1024
    states = cuda.mem_alloc(64 * nstates)  # curandStateXORWOW is 48 bytes
    seeds = rng.integers(0, 2**63, nstates, dtype=np.uint64)
    prepare = mod.get_function("prepare")
    prepare(states, np.uintp(nstates), cuda.In(seeds), np.uintp(0), block=(256, 1, 1), grid=(4, 1))
    n = 100000
    out = np.zeros(n, np.float32)
    gen = mod.get_function("gen_uniform_float")
    gen(states, cuda.Out(out), np.uintp(n), block=(256, 1, 1), grid=(4, 1))
    assert ((out > 0) & (out <= 1)).all()
    assert abs(out.mean() - 0.5) < 0.01 and abs(out.var() - 1 / 12) < 0.005
    # the same seeds again give the same numbers
    prepare(states, np.uintp(nstates), cuda.In(seeds), np.uintp(0), block=(256, 1, 1), grid=(4, 1))
    again = np.zeros(n, np.float32)
    gen(states, cuda.Out(again), np.uintp(n), block=(256, 1, 1), grid=(4, 1))
    np.testing.assert_array_equal(out, again)
    # in-place Poisson: each value's lambda is the value itself
    lam = np.full(n, 7.0, np.float32)
    mod.get_function("gen_poisson_inplace_float")(
        states, cuda.InOut(lam), np.uintp(n), block=(256, 1, 1), grid=(4, 1)
    )
    assert (lam == np.round(lam)).all() and abs(lam.mean() - 7.0) < 0.1
