"""docs/install.md's table of environment variables lists exactly the
PYGPU_ variables pygpu reads (issue 33).

The rule: a variable is pygpu's, and so in the table, when code that ships
reads it: the package (pygpu/**/*.py, its pytest plugin and driver stand-in
included: PYGPU_REQUIRE_GPU, PYGPU_STANDIN_DIR are for users' test suites
too), the C extension (src/**/*.c, *.h), the kernels (kernels/**) and the
build (setup.py, tools/pygpu_build_backend.py).  "Reads" means the name is
a whole string literal there ("PYGPU_name", as os.environ.get("PYGPU_name"),
getenv("PYGPU_name") or env_size("PYGPU_name", ...) take it); a name only
inside longer text (a message, a kernel's #define) is not a read.
Variables read only by pygpu's own tests and tools (tests/, tools/ but the
backend: PYGPU_FUZZ_SEED, ...) are not in the table; docs/testing.md has
them.  INTERNAL lists the literals that are not settings, with the reason.
"""

import glob
import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

#: literals that name no user setting
INTERNAL = {
    # a C macro setup.py defines when NVTX's headers are found
    "PYGPU_HAVE_NVTX": "setup.py's -D for the C build",
    # the plugin's handshake with the child process it starts itself
    "PYGPU_TESTING_SERVE": "pygpu/testing/_isolate.py's parent-to-child marker",
}

LITERAL = re.compile(r"""(?<![\w"'])["'](PYGPU_[A-Z0-9_]+)["'](?![\w"'])""")


def shipped_files():
    pats = [
        "pygpu/**/*.py",
        "src/**/*.c",
        "src/**/*.h",
        "pygpu/**/*.c",
        "pygpu/**/*.h",
        "kernels/**/*",
        "setup.py",
        "tools/pygpu_build_backend.py",
    ]
    out = set()
    for p in pats:
        out.update(f for f in glob.glob(os.path.join(ROOT, p), recursive=True) if os.path.isfile(f))
    return sorted(f for f in out if not f.endswith((".pyi", ".so", ".pyc")))


def read_names():
    """{name: [files reading it]} over shipped_files()."""
    names = {}
    for f in shipped_files():
        with open(f, encoding="utf-8", errors="replace") as fh:
            text = fh.read()
        for name in LITERAL.findall(text):
            names.setdefault(name, []).append(os.path.relpath(f, ROOT))
    return names


def table_names():
    """The names in the first column of docs/install.md's environment table."""
    with open(os.path.join(ROOT, "docs", "install.md"), encoding="utf-8") as f:
        text = f.read()
    part = text[text.index("## Environment variables") :]
    rows = [ln for ln in part.splitlines() if ln.startswith("| `")]
    assert rows, "no table under '## Environment variables' in docs/install.md"
    names = []
    for row in rows:
        first = row.split("|")[1]
        names += re.findall(r"`(PYGPU_[A-Z0-9_]+)(?:=[^`]*)?`", first)
    return names


def test_the_scan_finds_what_it_should():
    names = read_names()
    # a Python read, a C getenv, a C helper's argument, the build's
    for n in ("PYGPU_NVRTC", "PYGPU_LIBCUDA", "PYGPU_STAGING_COLD", "PYGPU_BUILD_NVTX"):
        assert n in names, n
    # kernel-source macros inside longer literals are not reads
    assert not [n for n in names if n.startswith(("PYGPU_CUMATH", "PYGPU_CURAND_"))], names
    assert set(INTERNAL) <= set(names), "an INTERNAL name is no longer in the code: drop it"


def test_install_md_lists_exactly_the_variables_pygpu_reads():
    documented = table_names()
    dup = sorted({n for n in documented if documented.count(n) > 1})
    assert not dup, "docs/install.md's table lists these twice: %s" % ", ".join(dup)
    read = read_names()
    wanted = set(read) - set(INTERNAL)
    missing = sorted(wanted - set(documented))
    extra = sorted(set(documented) - wanted)
    msg = []
    if missing:
        msg.append(
            "read by the code but not in docs/install.md's environment table (add a row): "
            + "; ".join("%s (%s)" % (n, ", ".join(sorted(set(read[n])))) for n in missing)
        )
    if extra:
        msg.append(
            "in docs/install.md's environment table but read nowhere in pygpu's shipped "
            "code (drop the row, or add the name to INTERNAL's reasons if it is a "
            "literal that is not a setting): " + ", ".join(extra)
        )
    assert not msg, "\n".join(msg)


def test_test_only_variables_are_in_testing_md():
    # the suite's own knobs: read under tests/, documented with the tests
    found = set()
    for f in glob.glob(os.path.join(ROOT, "tests", "**", "*.py"), recursive=True):
        if os.path.samefile(f, __file__):
            continue
        with open(f, encoding="utf-8") as fh:
            for m in re.finditer(
                r"(?:environ\.get|environ\[|getenv)\(?\s*[\"'](PYGPU_[A-Z0-9_]+)", fh.read()
            ):
                found.add(m.group(1))
    test_only = found - set(read_names())
    with open(os.path.join(ROOT, "docs", "testing.md"), encoding="utf-8") as f:
        testing = f.read()
    missing = sorted(n for n in test_only if n not in testing)
    assert not missing, "read by tests/ only, not in docs/testing.md: %s" % ", ".join(missing)
