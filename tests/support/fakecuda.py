"""The project's handle on the driver stand-in, now shipped to users as
pygpu.testing.standin (sources: pygpu/testing/csrc/fake_*.c, fakecuda.h).

    python3 tests/support/fakecuda.py build [PATH]    # prints the library's path

Without PATH it builds build/standin/libfakecuda.so (make test's STANDIN_RUN
loads that one through PYGPU_LIBCUDA).
"""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
# loaded by path, not through `import pygpu`: make sanitize builds the
# stand-in while pygpu's extension is an ASan build that only loads with the
# ASan runtime preloaded
import importlib.util  # noqa: E402

_spec = importlib.util.spec_from_file_location(
    "_pygpu_standin", os.path.join(ROOT, "pygpu", "testing", "standin.py")
)
_standin = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_standin)

DEPENDS, KINDS, LIBNAME, SOURCE, SOURCES = (
    _standin.DEPENDS,
    _standin.KINDS,
    _standin.LIBNAME,
    _standin.SOURCE,
    _standin.SOURCES,
)
STICKY_CODES, Launch, StandIn = _standin.STICKY_CODES, _standin.Launch, _standin.StandIn
active, include_dir = _standin.active, _standin.include_dir

DEFAULT_LIB = os.path.join(ROOT, "build", "standin", "libfakecuda.so")


def build(out=DEFAULT_LIB, cflags=None):
    """Compile the stand-in at out if it is missing, older than its sources
    or built with other flags; returns its path."""
    return _standin.build(out, cflags)


if __name__ == "__main__":
    if sys.argv[1:2] == ["build"] and len(sys.argv) <= 3:
        print(build(*sys.argv[2:3]))
    else:
        sys.exit("usage: python3 tests/support/fakecuda.py build [PATH]")
