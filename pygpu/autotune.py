"""Run-time tuning: "Forget heuristics. Benchmark at run time and use
whatever works fastest" (PyCUDA's advice on metaprogramming)::

    from pygpu.tools import autotune

    launch = autotune(source, "scale", [out, x, np.float32(2), n],
                      space={"block": [64, 128, 256, 512, 1024]},
                      grid=lambda c: ((n + c["block"] - 1) // c["block"], 1),
                      outputs=[0])
    launch(out, x, np.float32(2), n)      # the fastest variant
    print(launch.format_table())          # what was measured

Each combination of the space's values is one variant.  A choice maps to
the build and the launch like this:

- ``block``: the block size (an int, or a tuple up to three);
- ``maxrregcount``: the option ``-maxrregcount=N``;
- ``options``: a list of extra NVRTC options;
- ``shared`` (optional): dynamic shared memory bytes;
- every other name becomes a ``-DNAME=value`` define, so a source can use
  ``__launch_bounds__(BLOCK)``, ``#if TILE == 16`` or ``scale<T_TILE>``.

``source`` and ``kernel`` may also be callables of the choice (PyCUDA-style
source generation); a ``kernel`` with ``{}`` fields is formatted with the
choice (``"tiled<{TILE}>"``, compiled as a name expression, so the source
needs no ``extern "C"``).  ``grid``, ``block`` and ``shared`` may be
callables of the choice too.

Each variant is compiled through the compile cache (SourceModule), run once
to check its outputs (when outputs are named), then timed with events on the
caller's own arguments: warm-up launches, then ``repeat`` timed launches,
the median kept.  A variant that fails to compile or to launch (too many
registers or threads for its block, too much shared memory) is skipped with
the reason in the table, and so is one whose outputs differ from the
reference (the first variant that ran, or ``reference=``).  Outputs are
filled with 0xFF bytes before each checking run, so a variant that writes
nothing cannot pass by leaving the previous one's results; arguments named
in ``inplace`` are saved first and restored before each checking run, and
once more at the end, so the caller's data is as it was.

The winner is remembered per device (name, compute capability, UUID), per
kernel (a hash of every variant's source and options, the kernel name and
the space), per argument shape class (each array's dtype and its sizes
rounded up to a power of two; scalars by type) and per way of checking
(which outputs and in-place arguments, the tolerances, and whether the
reference is the first variant or ``reference=`` arrays -- their dtypes and
shape classes, never their values), in memory and on disk in
``<compile cache>/autotune/``, so a later process launches it at once,
without timing.  A checked winner is served to other data only after one
checking launch on this call's arguments: its outputs are compared with
``reference=`` (or, without one, with those of the variant that was the
reference when it was tuned: one launch more, none when that variant is the
winner itself); if they differ, or it no longer compiles or launches, the
space is tuned again and the new winner stored.  ``PYGPU_DISABLE_CACHE=1``
or ``cache_dir=False`` keeps it in memory only.
"""

import hashlib
import itertools
import json
import os
import statistics
import threading

from typing import Any, Callable, Optional, Sequence

import numpy as np

from pygpu import driver, store
from pygpu._errors import CompileError

__all__ = ["autotune", "Tuned", "AutotuneError", "expand_space", "shape_class", "clear"]

SCHEMA = 2  # 2: keyed by how outputs are checked, not by the reference's bytes
_lock = threading.Lock()
# key -> (winner's index, table, index of the reference variant or None)
_memory: "dict[str, tuple[int, list[dict[str, Any]], int | None]]" = {}

#: CUresult codes after which the context cannot be used again: not a
#: variant's fault to skip, the tuning stops.
_STICKY = {700, 702, 710, 714, 715, 716, 717, 718, 719, 214}
_SPECIAL = ("block", "maxrregcount", "options", "shared")


class AutotuneError(RuntimeError):
    """No variant compiled, launched and (where checked) gave the right output;
    .table has the reasons."""

    def __init__(self, msg: str, table: "list[dict[str, Any]]") -> None:
        super().__init__(msg)
        self.table = table


# ---- the space ----


def expand_space(space: Any) -> "list[dict[str, Any]]":
    """The variants of space: a list of dicts, one per combination, in the
    order of the space's keys (the last key varies fastest)."""
    if not isinstance(space, dict) or not space:
        raise TypeError(
            "space must be a non-empty dict of name -> list of values, e.g. {'block': [128, 256]}"
        )
    names = list(space)
    values = []
    for k in names:
        if not isinstance(k, str) or not k.isidentifier():
            raise ValueError(
                "a space name must be an identifier (it can become -D%s=...): %r" % (k, k)
            )
        v = space[k]
        if isinstance(v, (str, bytes)) or not hasattr(v, "__iter__"):
            raise TypeError("space[%r] must be a list of values, not %s" % (k, type(v).__name__))
        v = list(v)
        if not v:
            raise ValueError("space[%r] is empty" % k)
        values.append(v)
    return [dict(zip(names, combo)) for combo in itertools.product(*values)]


def _call(x, choice):
    return x(choice) if callable(x) else x


def _dims(b, what):
    if isinstance(b, (int, np.integer)):
        return (int(b), 1, 1)
    b = tuple(int(v) for v in b)
    if not 1 <= len(b) <= 3:
        raise ValueError("%s must have one to three dimensions: %r" % (what, b))
    return b + (1,) * (3 - len(b))


def _build_spec(choice, source, kernel, options, block, grid, shared):
    """(source, options, kernel name, name_expressions, block, grid, shared) of
    one variant."""
    src = _call(source, choice)
    if not isinstance(src, str):
        raise TypeError(
            "source must be a str or a callable returning one, not %s" % type(src).__name__
        )
    opts = list(options)
    for k, v in choice.items():
        if k == "maxrregcount":
            opts.append("-maxrregcount=%d" % int(v))
        elif k == "options":
            opts += [v] if isinstance(v, str) else list(v)
        elif k not in _SPECIAL:
            opts.append("-D%s=%s" % (k, v))
    name = _call(kernel, choice)
    if not isinstance(name, str):
        raise TypeError(
            "kernel must be a str or a callable returning one, not %s" % type(name).__name__
        )
    if "{" in name:
        name = name.format(**choice)
    exprs = (name,) if "<" in name else ()
    b = _call(block, choice) if block is not None else choice.get("block")
    if b is None:
        raise ValueError("no block size: put 'block' in the space or pass block=")
    g = _call(grid, choice)
    if g is None:
        raise ValueError("no grid: pass grid= (a tuple, or a callable of the choice)")
    sh = _call(shared, choice) if shared is not None else choice.get("shared", 0)
    return src, opts, name, exprs, _dims(b, "block"), tuple(int(v) for v in g), int(sh)


# ---- the key ----


def _bucket(n):
    n = int(n)
    return 0 if n <= 0 else 1 << (n - 1).bit_length()


def shape_class(args: "Sequence[Any]") -> "tuple[Any, ...]":
    """The argument shape class of args: per array its dtype and sizes rounded
    up to powers of two, per scalar its type."""
    out: "list[tuple[Any, ...]]" = []
    for a in args:
        cai = getattr(a, "__cuda_array_interface__", None)
        if cai is not None:
            out.append(("a", np.dtype(cai["typestr"]).str, tuple(_bucket(s) for s in cai["shape"])))
        elif isinstance(a, np.ndarray):
            out.append(("h", a.dtype.str, tuple(_bucket(s) for s in a.shape)))
        elif isinstance(a, np.generic):
            out.append(("s", a.dtype.str))
        elif isinstance(a, (driver.In, driver.Out, driver.InOut)):
            arr = a.array
            out.append((type(a).__name__, arr.dtype.str, tuple(_bucket(s) for s in arr.shape)))
        elif isinstance(a, driver.DeviceAllocation):
            out.append(("p", _bucket(a.size)))
        else:
            out.append(("o", type(a).__name__))
    return tuple(out)


def _device_key():
    dev = driver.Context.get_device()  # the current context's (a primary one if none)
    try:
        uuid = str(dev.uuid)
    except driver.Error:
        uuid = "?"
    return "%s|%d.%d|%s" % ((dev.name(),) + tuple(dev.compute_capability()) + (uuid,))


def _check_mode(
    check: bool,
    outputs: "Sequence[int]",
    reference: "Optional[Sequence[Any]]",
    rtol: float,
    atol: float,
    inplace: "Sequence[int]" = (),
) -> "tuple[Any, ...]":
    """What a tuning checked and how, part of its key: a winner found
    without checking (check=False, or no outputs) is never served to a call
    that asks for checking, nor one checked on other outputs, in-place
    arguments or tolerances, or against another kind of reference.  The
    reference's values are not in it (a new call's data are checked by
    _recheck instead): its dtypes and shape classes are."""
    if not (check and outputs):
        return ("unchecked",)
    if reference is None:
        ref: "tuple[Any, ...]" = ("first variant",)
    else:
        ref = ("reference",) + tuple(
            (np.asarray(r).dtype.str, tuple(_bucket(n) for n in np.shape(r))) for r in reference
        )
    return ("checked", tuple(outputs), tuple(inplace), float(rtol), float(atol), ref)


def _tune_key(device_key, specs, space, shapes, key, mode=("unchecked",)):
    h = hashlib.sha256()
    for part in (
        "pygpu-autotune",
        SCHEMA,
        device_key,
        repr(space),
        repr(shapes),
        repr(key),
        repr(mode),
    ):
        h.update(repr(part).encode() + b"\0")
    for src, opts, name, exprs, b, g, sh in specs:
        h.update(hashlib.sha256(src.encode()).digest())
        h.update(repr((opts, name, exprs, b, sh)).encode() + b"\0")
    return h.hexdigest()


def _path(cache_dir, key):
    return os.path.join(cache_dir, "autotune", key[:2], key + ".json")


def _load(
    cache_dir: str, key: str, n: int, checked: bool = False
) -> "Optional[tuple[int, list[dict[str, Any]], Optional[int]]]":
    """(index, table, reference index) stored under key, or None (a damaged
    file is ignored, and so is an unchecked winner where checked=True asks
    for a checked one)."""
    try:
        with open(_path(cache_dir, key)) as f:
            rec = json.load(f)
        if rec.get("key") != key or rec.get("schema") != SCHEMA:
            return None
        if checked and rec.get("checked") is not True:
            return None
        index = rec["index"]
        if not isinstance(index, int) or not 0 <= index < n:
            return None
        ref_index = rec.get("ref_index")
        if ref_index is not None and (not isinstance(ref_index, int) or not 0 <= ref_index < n):
            return None
        return index, rec.get("table", []), ref_index
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def _save(
    cache_dir: str,
    key: str,
    index: int,
    table: "list[dict[str, Any]]",
    checked: bool = False,
    ref_index: "Optional[int]" = None,
) -> None:
    data = json.dumps(
        {
            "key": key,
            "schema": SCHEMA,
            "index": index,
            "table": table,
            "checked": bool(checked),
            "ref_index": ref_index,
        },
        default=repr,
        indent=1,
    ).encode()
    try:
        store._atomic_write(_path(cache_dir, key), data)
    except OSError as e:
        store.debug("autotune: could not write %s: %s" % (_path(cache_dir, key), e))


def clear(cache_dir: Any = None, disk: bool = True) -> None:
    """Forget the tuned choices in memory and (disk=True) on disk."""
    with _lock:
        _memory.clear()
    d = store.check_dir(cache_dir)
    if disk and d is not None:
        import shutil

        shutil.rmtree(os.path.join(d, "autotune"), ignore_errors=True)


# ---- device buffers for checking ----


def _view(a, what):
    """(pointer, nbytes, dtype, shape) of a device array argument."""
    cai = getattr(a, "__cuda_array_interface__", None)
    if cai is None:
        raise TypeError(
            "%s must be a device array (a GPUArray or an object with "
            "__cuda_array_interface__), not %s" % (what, type(a).__name__)
        )
    if cai.get("strides") is not None:
        dt = np.dtype(cai["typestr"])
        if tuple(cai["strides"]) != tuple(np.empty(cai["shape"], dt).strides):
            raise ValueError("%s must be C-contiguous" % what)
    dt = np.dtype(cai["typestr"])
    shape = tuple(cai["shape"])
    return int(cai["data"][0]), int(np.prod(shape, dtype=np.int64)) * dt.itemsize, dt, shape


def _read_outputs(args, outputs):
    """Host copies of the output arguments (after a synchronize)."""
    res = []
    for i in outputs:
        ptr, nbytes, dt, shape = _view(args[i], "output argument %d" % i)
        host = np.empty(shape, dt)
        if nbytes:
            driver.memcpy_dtoh(host, ptr)
        res.append(host)
    return res


def _same(got, want, rtol, atol):
    """None if got matches want, else the reason."""
    for k, (g, w) in enumerate(zip(got, want)):
        w = np.asarray(w)
        if g.shape != w.shape:
            return "output %d has shape %s, the reference %s" % (k, g.shape, w.shape)
        if g.dtype.kind in "fc":
            ok = np.isclose(g, w, rtol=rtol, atol=atol, equal_nan=True)
        else:
            ok = g == w
        if not np.all(ok):
            bad = int(np.size(ok) - np.count_nonzero(ok))
            return "wrong output %d: %d of %d elements differ" % (k, bad, g.size)
    return None


class _Saved:
    """Copies of the in-place arguments, to restore them."""

    def __init__(self, args, inplace):
        self.items = []
        for i in inplace:
            ptr, nbytes, _, _ = _view(args[i], "in-place argument %d" % i)
            copy = driver.mem_alloc(max(nbytes, 1))
            if nbytes:
                driver.memcpy_dtod(copy, ptr, nbytes)
            self.items.append((ptr, copy, nbytes))

    def restore(self):
        for ptr, copy, nbytes in self.items:
            if nbytes:
                driver.memcpy_dtod(ptr, copy, nbytes)


def _event_timer(run, choice, warmup, repeat, stream):
    """Median milliseconds of run() by events on stream."""
    for _ in range(warmup):
        run()
    start, stop = driver.Event(), driver.Event()
    times = []
    for _ in range(repeat):
        start.record(stream)
        run()
        stop.record(stream)
        stop.synchronize()
        times.append(stop.time_since(start))
    return statistics.median(times)


# ---- the launcher ----


class Tuned:
    """The fastest variant, ready to launch: call it with the kernel's
    arguments (and optionally stream=, grid=).

    .choice: the winning choice (a dict); .table: one row per variant (its
    choice, "ms" the median time or None, "status" "ok" or why it was
    skipped); .timed: False when the choice came from the memory or disk
    store; .rechecked: True when that stored choice was checked on this
    call's arguments first (a checked tuning); .function, .module, .block,
    .grid, .shared."""

    rechecked: bool = False

    def __init__(self, module, function, choice, block, grid, shared, table, timed, key):
        self.module = module
        self.function = function
        self.choice = dict(choice)
        self.block, self.grid, self.shared = block, grid, shared
        self.table = table
        self.timed = timed
        self.key = key

    def __call__(self, *args: "object", stream: "object" = None, grid: "object" = None) -> "object":
        return self.function(
            *args,
            block=self.block,
            grid=self.grid if grid is None else grid,
            shared=self.shared,
            stream=stream,
        )

    def format_table(self) -> str:
        """The measurements as text, fastest first, then the skipped."""
        names = list(self.table[0]["choice"]) if self.table else []
        rows = sorted(self.table, key=lambda r: (r["ms"] is None, r["ms"] or 0.0))
        w = [max(8, len(n)) for n in names]
        lines = [
            "  ".join("%-*s" % (k, n) for k, n in zip(w, names)) + "  %10s  %s" % ("ms", "status")
        ]
        for r in rows:
            mark = " <- chosen" if r["choice"] == self.choice and r["status"] == "ok" else ""
            ms = "%10.4f" % r["ms"] if r["ms"] is not None else "%10s" % "-"
            lines.append(
                "  ".join("%-*s" % (k, r["choice"][n]) for k, n in zip(w, names))
                + "  %s  %s%s" % (ms, r["status"], mark)
            )
        if not self.timed and self.rechecked:
            lines.append(
                "(chosen from the stored tuning and checked on this call's arguments; "
                "nothing was timed in this process)"
            )
        elif not self.timed:
            lines.append("(chosen from the stored tuning; nothing was timed in this process)")
        return "\n".join(lines)

    def __repr__(self):
        return "<Tuned %s %s>" % (
            self.function.name if hasattr(self.function, "name") else "",
            self.choice,
        )


def _compile_variant(spec, no_extern_c, arch, include_dirs, cache_dir):
    from pygpu.compiler import SourceModule

    src, opts, name, exprs, _, _, _ = spec
    mod = SourceModule(
        src,
        options=opts,
        no_extern_c=no_extern_c or bool(exprs),
        arch=arch,
        include_dirs=include_dirs,
        name_expressions=exprs,
        cache_dir=cache_dir,
    )
    return mod, mod.get_function(name)


def _checking_run(
    run: "Callable[[], None]",
    args: "Sequence[Any]",
    outputs: "Sequence[int]",
    saved: "Optional[_Saved]",
) -> "list[np.ndarray]":
    """One checking launch: the in-place arguments restored, the outputs
    filled with 0xFF bytes (so that a variant that writes nothing cannot pass
    on what another left), run(), then host copies of the outputs."""
    if saved is not None:
        saved.restore()
    for j in outputs:
        ptr, nbytes, _, _ = _view(args[j], "output argument %d" % j)
        if nbytes:
            driver.memset_d8(ptr, 0xFF, nbytes)
    run()
    driver.Context.synchronize()
    return _read_outputs(args, outputs)


def _recheck(
    specs: "Sequence[tuple[Any, ...]]",
    index: int,
    ref_index: "Optional[int]",
    args: "Sequence[Any]",
    outputs: "Sequence[int]",
    inplace: "Sequence[int]",
    reference: "Optional[Sequence[Any]]",
    rtol: float,
    atol: float,
    stream: object,
    build: "Callable[[tuple[Any, ...]], tuple[Any, Any]]",
) -> "tuple[Optional[str], Any]":
    """A stored checked winner tried on this call's arguments: (None, its
    (module, function)) when its outputs match this call's reference, else
    (why not, None).  The reference is reference= (one launch), or the
    output of the variant that was the reference when the winner was tuned
    (one launch more; none at all when that is the winner itself).  The
    in-place arguments are as they were afterwards."""
    saved = _Saved(args, inplace) if inplace else None
    try:
        want = [np.asarray(r) for r in reference] if reference is not None else None
        if want is None and (ref_index is None or ref_index == index):
            return None, build(specs[index])
        launches: "list[int]" = [index]
        if want is None and ref_index is not None:  # the reference variant first
            launches.insert(0, ref_index)
        got = None
        built = None
        for i in launches:
            try:
                built = build(specs[i])
            except CompileError as e:
                return "variant %d does not compile: %s" % (i, _first_line(e.log or str(e))), None
            f = built[1]
            b, g, sh = specs[i][4], specs[i][5], specs[i][6]

            def run(f: Any = f, b: Any = b, g: Any = g, sh: Any = sh) -> None:
                f(*args, block=b, grid=g, shared=sh, stream=stream)

            try:
                got = _checking_run(run, args, outputs, saved)
            except driver.Error as e:
                if getattr(e, "code", None) in _STICKY:
                    raise
                return "variant %d does not launch: %s" % (i, _first_line(e)), None
            except ValueError as e:
                return "variant %d does not launch: %s" % (i, _first_line(e)), None
            if want is None:
                want = got
        why = _same(got, want, rtol, atol)
        return (why, None) if why is not None else (None, built)
    finally:
        if saved is not None:
            saved.restore()


def _first_line(e):
    text = str(e).strip().splitlines()
    return text[0] if text else type(e).__name__


def autotune(
    source: str,
    kernel: str,
    args: "Sequence[Any]",
    space: "object",
    grid: "object" = None,
    block: "object" = None,
    shared: "object" = None,
    options: "object" = (),
    outputs: "Sequence[int]" = (),
    inplace: "Sequence[int]" = (),
    reference: "Optional[Sequence[Any]]" = None,
    check: bool = True,
    rtol: float = 1e-5,
    atol: float = 1e-8,
    warmup: int = 2,
    repeat: int = 10,
    stream: "object" = None,
    no_extern_c: bool = False,
    arch: "object" = None,
    include_dirs: "object" = (),
    cache_dir: "object" = None,
    key: "object" = None,
    timer: "Optional[Callable[[Any, Any], float]]" = None,
) -> "Tuned":
    """Compile, check and time every variant of space on args; return the
    fastest as a Tuned launcher (see the module's docstring).

    outputs: indices of args the kernel writes (checked against the first
    variant that ran, or against reference: a list of arrays, one per
    output).  inplace: indices of args that are read and written (saved,
    and restored before each check and at the end).  check=False skips
    checking.  key: anything hashable that should also tell tunings apart
    (the shape class covers dtypes and sizes).  timer(run, choice) -> ms
    replaces the event timing (tests)."""
    variants = expand_space(space)
    args = list(args)
    outputs = [int(i) for i in outputs]
    inplace = [int(i) for i in inplace]
    for i in outputs + inplace:
        if not -len(args) <= i < len(args):
            raise IndexError("argument index %d is out of range for %d arguments" % (i, len(args)))
    if reference is not None and len(reference) != len(outputs):
        raise ValueError("reference has %d arrays for %d outputs" % (len(reference), len(outputs)))
    specs = [_build_spec(c, source, kernel, options, block, grid, shared) for c in variants]
    disk = store.resolve_dir(cache_dir)
    refs = reference
    argv: "list[Any]" = args
    mode = _check_mode(check, outputs, refs, rtol, atol, inplace)
    checked = mode[0] == "checked"
    k = _tune_key(_device_key(), specs, space, shape_class(args), key, mode)

    def build(spec: "tuple[Any, ...]") -> "tuple[Any, Any]":
        return _compile_variant(spec, no_extern_c, arch, include_dirs, cache_dir)

    with _lock:
        hit = _memory.get(k)
    if hit is None and disk is not None:
        hit = _load(disk, k, len(variants), checked)
        if hit is not None:
            with _lock:
                _memory[k] = hit
    if hit is not None:
        index, table, ref_index = hit
        if checked:
            why, built_hit = _recheck(
                specs,
                index,
                ref_index,
                argv,
                outputs,
                inplace,
                refs,
                rtol,
                atol,
                stream,
                build,
            )
            if why is None:
                mod, f = built_hit
                s = specs[index]
                t = Tuned(mod, f, variants[index], s[4], s[5], s[6], table, False, k)
                t.rechecked = True
                return t
            store.debug(
                "autotune: the stored winner %s fails here (%s): tuning again"
                % (variants[index], why)
            )
        else:
            mod, f = build(specs[index])
            s = specs[index]
            return Tuned(mod, f, variants[index], s[4], s[5], s[6], table, False, k)

    table = []
    ref = [np.asarray(r) for r in reference] if reference is not None else None
    saved = _Saved(args, inplace) if inplace else None
    best = None
    ref_index = None
    built = {}
    try:
        for i, (choice, spec) in enumerate(zip(variants, specs)):
            row: "dict[str, Any]" = {"choice": choice, "ms": None, "status": "ok"}
            table.append(row)
            try:
                mod, f = _compile_variant(spec, no_extern_c, arch, include_dirs, cache_dir)
            except CompileError as e:
                row["status"] = "compile error: " + _first_line(e.log or str(e))
                continue
            b, g, sh = spec[4], spec[5], spec[6]

            def run(f=f, b=b, g=g, sh=sh):
                f(*args, block=b, grid=g, shared=sh, stream=stream)

            try:
                if check and outputs:
                    got = _checking_run(run, argv, outputs, saved)
                    if ref is None:
                        ref = got
                        ref_index = i
                    else:
                        why = _same(got, ref, rtol, atol)
                        if why is not None:
                            row["status"] = why
                            continue
                ms = (timer or (lambda r, c: _event_timer(r, c, warmup, repeat, stream)))(
                    run, choice
                )
            except driver.Error as e:
                if getattr(e, "code", None) in _STICKY:
                    raise
                row["status"] = "launch error: " + _first_line(e)
                continue
            except ValueError as e:  # pygpu's own checks of the configuration
                row["status"] = "launch error: " + _first_line(e)
                continue
            row["ms"] = float(ms)
            built[i] = (mod, f)
            if best is None or row["ms"] < table[best]["ms"]:
                best = i
    finally:
        if saved is not None:
            saved.restore()
    if best is None:
        raise AutotuneError(
            "no variant of %r ran correctly:\n  %s"
            % (specs[0][2], "\n  ".join("%s: %s" % (r["choice"], r["status"]) for r in table)),
            table,
        )
    with _lock:
        _memory[k] = (best, table, ref_index)
    if disk is not None:
        _save(disk, k, best, table, checked, ref_index)
    mod, f = built[best]
    s = specs[best]
    return Tuned(mod, f, variants[best], s[4], s[5], s[6], table, True, k)
