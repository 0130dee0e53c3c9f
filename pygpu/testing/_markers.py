"""pygpu's pytest markers and their two spellings: pygpu_<name> always,
<name> (gpu, driver, ...) only in a project that opted in (pygpu_markers =
true in its pytest configuration): the plugin, loaded in every pytest run
beside pygpu, leaves other projects' markers alone.  Used by the plugin and
by fault isolation (_isolate)."""

_MARKERS = {
    "gpu": "gpu: needs a real CUDA GPU: runs kernels (skipped without one; a failure "
    "with --require-gpu or PYGPU_REQUIRE_GPU=1)",
    "driver": "driver: needs a CUDA driver, runs no kernel: runs on a GPU and against "
    "the driver stand-in",
    "standin": "standin: runs only against the driver stand-in (failure injection, "
    "recorded launches)",
    "leak_check": "leak_check: fail the test if it leaves pygpu handles (or, against the "
    "stand-in, driver handles) alive",
    "sticky_fault": "sticky_fault: the test provokes a sticky CUDA fault on purpose; the "
    "tests after it run in a fresh process",
}

_PREFIX = "pygpu_"


def markers_opted_in(config):
    """True when the project asked for the plain marker names
    (pygpu_markers = true in its ini file, or -o pygpu_markers=true)."""
    try:
        return bool(config.getini("pygpu_markers"))
    except ValueError:  # the option is not registered: plugin not loaded
        return False


def marker_kind(config, name):
    """pygpu's meaning of a marker name ('gpu', 'leak_check', ...), or None:
    pygpu_<name> always, <name> only in a project that opted in."""
    if name.startswith(_PREFIX) and name[len(_PREFIX) :] in _MARKERS:
        return name[len(_PREFIX) :]
    if name in _MARKERS and getattr(config, "_pygpu_plain_markers", False):
        return name
    return None


def closest_marker(item, kind):
    """The test's closest marker meaning `kind` ('leak_check',
    'sticky_fault'), in either spelling the project may use, or None."""
    for m in item.iter_markers():
        if marker_kind(item.config, m.name) == kind:
            return m
    return None
