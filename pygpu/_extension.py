"""Why pygpu's C extension (pygpu._driver) cannot be imported, in words a
user can act on (pygpu/__init__.py's last finder on sys.meta_path raises
ImportError with this message).

The common case is a clone: ``pip install .`` installs pygpu into
site-packages, but Python run from the clone's root imports the clone's
``pygpu/`` folder first (the current directory leads sys.path), and that
folder has no built extension.  NumPy says the same of its own source tree.
"""

import importlib.machinery
import os
import sys

__all__ = ["missing_extension_message", "is_source_tree"]


def is_source_tree(root):
    """True if root looks like pygpu's checkout (or an unpacked sdist): the
    build files and the C sources beside the package."""
    return (
        os.path.isfile(os.path.join(root, "setup.py"))
        and os.path.isfile(os.path.join(root, "pyproject.toml"))
        and os.path.isdir(os.path.join(root, "src"))
    )


def _built_for_other_pythons(pkg_dir):
    try:
        names = os.listdir(pkg_dir)
    except OSError:
        return []
    return sorted(
        n
        for n in names
        if n.startswith("_driver.") and n.endswith((".so", ".pyd")) and n != "_driver.pyi"
    )


def missing_extension_message(pkg_dir):
    """The message for a pygpu package folder pkg_dir with no importable
    _driver extension for this interpreter."""
    pkg_dir = os.path.abspath(pkg_dir)
    root = os.path.dirname(pkg_dir)
    wanted = "_driver" + importlib.machinery.EXTENSION_SUFFIXES[0]
    this = "Python %d.%d (%s)" % (sys.version_info[0], sys.version_info[1], sys.executable)
    others = _built_for_other_pythons(pkg_dir)
    if others:
        where = "where it is not built for this Python (%s holds %s; %s needs %s)" % (
            pkg_dir,
            ", ".join(others),
            this,
            wanted,
        )
    else:
        where = "where it is not built (%s has no %s)" % (pkg_dir, wanted)
    if is_source_tree(root):
        return (
            "cannot import pygpu._driver, pygpu's C extension: you are importing pygpu "
            "from its source directory %s, %s. To use the pygpu installed by "
            "pip install ., run Python from another directory; to work on the source, "
            "build the extension in place: cd %s && %s -m pip install -e ."
            % (root, where, root, sys.executable or "python")
        )
    return (
        "cannot import pygpu._driver, pygpu's C extension: pygpu was imported from %s, "
        "%s. This installation of pygpu is incomplete or was built for another "
        "Python: reinstall pygpu with this Python (%s -m pip install --force-reinstall "
        "followed by the wheel, sdist or folder it came from)"
        % (pkg_dir, where, sys.executable or "python")
    )
