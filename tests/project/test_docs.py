"""The manual's code stays true to the code: every Python block in README.md
and docs/*.md parses, and the names it imports from pygpu exist.  (The
manual's build itself, `make docs`, runs in CI with warnings as errors.)"""

import ast
import glob
import importlib
import importlib.util
import os
import re

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PAGES = [os.path.join(ROOT, "README.md")] + sorted(glob.glob(os.path.join(ROOT, "docs", "*.md")))
BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)


def blocks():
    for page in PAGES:
        with open(page, encoding="utf-8") as f:
            text = f.read()
        for i, m in enumerate(BLOCK.finditer(text)):
            yield pytest.param(m.group(1), id="%s-%d" % (os.path.basename(page), i))


def test_there_are_python_blocks_to_check():
    assert len(list(blocks())) >= 10


@pytest.mark.parametrize("code", list(blocks()))
def test_python_blocks_parse_and_import_what_exists(code):
    # blocks that show two versions side by side are two columns of code
    if "# before" in code and "# after" in code:
        lines = code.splitlines()
        width = lines[0].index("# after")
        code = "\n".join([ln[:width].rstrip() for ln in lines] + [ln[width:] for ln in lines])
    tree = ast.parse(code)
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("pygpu"):
            mod = importlib.import_module(node.module)
            for alias in node.names:
                # a name of the module, or one of its submodules (from pygpu import mpi)
                assert (
                    hasattr(mod, alias.name)
                    or importlib.util.find_spec("%s.%s" % (node.module, alias.name)) is not None
                ), "%s has no %s" % (node.module, alias.name)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("pygpu") and alias.name != "pygpu.autoinit":
                    importlib.import_module(alias.name)


def test_examples_named_in_the_manual_exist():
    named = set()
    for page in PAGES:
        with open(page, encoding="utf-8") as f:
            named |= set(re.findall(r"examples/(\w+\.py)", f.read()))
    assert named
    named.discard("NAME.py")  # "python3 examples/NAME.py", the pattern
    missing = [n for n in sorted(named) if not os.path.exists(os.path.join(ROOT, "examples", n))]
    assert missing == []
