"""The suite compiles into its own cache (tests/conftest.py), never into
the user's ~/.cache/pygpu."""

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_the_suite_compiles_into_its_own_cache(tmp_path):
    env = dict(os.environ, HOME=str(tmp_path), PYTHONPATH=ROOT)
    for var in ("PYGPU_CACHE_DIR", "PYCUDA_CACHE_DIR", "XDG_CACHE_HOME"):
        env.pop(var, None)
    code = (
        "import sys; sys.path.insert(0, 'tests'); import conftest\n"
        "from pygpu import compiler, store\n"
        "compiler.compile('__global__ void k(int *p) { p[0] = %d; }', arch='sm_90')\n"
        "print(store.default_cache_dir())\n" % os.getpid()
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    used = out.stdout.strip().splitlines()[-1]
    assert used == os.path.join(ROOT, "build", "test-cache")
    assert os.path.isdir(used) and os.listdir(used)
    # the user's default place was not made
    assert not (tmp_path / ".cache").exists()
