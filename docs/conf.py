"""Sphinx configuration of the pygpu manual.

Build it with ``make docs`` (installs pygpu with its ``docs`` extra, then
runs ``sphinx-build -W``: a warning fails the build).  The chapters are
Markdown (MyST); the API reference is generated from the docstrings of the
installed package, so the extension must be built first.
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

import pygpu  # noqa: E402

project = "pygpu"
author = "the pygpu developers"
copyright = "2026, the pygpu developers"
version = release = pygpu.__version__

extensions = [
    "sphinx.ext.autodoc",
    "myst_parser",
]
source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build"]

# Markdown: `[text](#some-heading)` and `[text](page.md#heading)` links work
# as on GitHub; tables, definition lists and colon fences are on.
myst_heading_anchors = 3
myst_enable_extensions = ["colon_fence", "deflist"]

# The reference follows the source's order (grouped by topic), shows the
# signatures the C functions declare in their docstrings, and never imports a
# CUDA library: importing pygpu loads none.
autodoc_member_order = "bysource"
autodoc_default_options = {"members": True}
autodoc_typehints = "none"
autoclass_content = "class"

# Every cross-reference must resolve (-n); the few that name outside types
# (NumPy, the standard library) are listed here rather than fetched over the
# network.
nitpicky = True
nitpick_ignore_regex = [
    (r"py:.*", r"(numpy|np)\..*"),
    (r"py:class", r"(int|float|bytes|str|bool|tuple|list|dict|object|callable|optional)"),
]

html_theme = "alabaster"
html_title = "pygpu %s" % release
html_static_path = []
