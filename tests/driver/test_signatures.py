"""Text signatures come from one source of truth (issue 13): the C parsers.

For every public C-level callable of pygpu._driver (module functions, the
methods of its types, the constructors) the keywords its parser accepts are
read from src/**/*.c (a PyArg_ParseTupleAndKeywords kwlist with its ":name"
format, the keyword strings a METH_FASTCALL parser compares against, the
positional count of PyArg_ParseTuple/PyArg_UnpackTuple, METH_O, METH_NOARGS)
and compared with inspect.signature(): exactly those parameters take
keywords, the others are positional-only (marked with '/').  Then, against
the driver stand-in, each callable is called with every keyword its signature
lists; no call may fail for an unknown keyword.
"""

import inspect
import os
import re

import numpy as np
import pytest

import pygpu._driver as _driver
import pygpu.driver  # noqa: E402,F401  (the types' module: inspect evaluates defaults such as
#                     array_format.FLOAT there, and import pygpu alone no longer loads it)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SRC = os.path.join(ROOT, "src")
# an _ArrayOperator's array type: the slots it reads and copies (gpuarray._ATTRS)
_ARRAY_ATTRS = ("shape", "dtype", "strides", "size", "mem_size", "nbytes", "itemsize")
_ARRAY_ATTRS += ("allocator", "gpudata", "base", "_c", "_f")


def _read_sources():
    out = {}
    for folder, _, files in sorted(os.walk(SRC)):
        for name in sorted(files):
            if name.endswith((".c", ".h")):
                path = os.path.join(folder, name)
                with open(path) as f:
                    out[os.path.relpath(path, SRC)] = f.read()
    return out


SOURCES = _read_sources()
ALL_C = "\n".join(v for k, v in SOURCES.items() if k.endswith(".c"))

# every function definition in src/**/*.c: name -> body (C style: the name
# starts its line, or follows "static PyObject *" on the same line)
_DEF = re.compile(
    r"^(?:static )?(?:[A-Za-z_]\w*[ \*]+)*?(\w+)\(([^;{}()]*(?:\([^;{}()]*\)[^;{}()]*)*)\)\s*\{",
    re.M,
)
BODIES = {}
for _m in _DEF.finditer(ALL_C):
    _depth, _i = 1, _m.end()
    while _depth:
        _depth += {"{": 1, "}": -1}.get(ALL_C[_i], 0)
        _i += 1
    BODIES.setdefault(_m.group(1), ALL_C[_m.end() : _i - 1])


def _closure(fn, seen=None):
    """fn's body and the bodies of the functions it hands its arguments
    (args/kwds/kwnames) to, transitively."""
    seen = set() if seen is None else seen
    if fn in seen or fn not in BODIES:
        return ""
    seen.add(fn)
    body = BODIES[fn]
    parts = [body]
    for call in re.finditer(r"\b(\w+)\(([^;]*)", body):
        callee, argtext = call.groups()
        if callee in BODIES and re.search(r"\b(args|kwds|kwnames|kwargs|a)\b", argtext):
            parts.append(_closure(callee, seen))
    return "\n".join(parts)


def _strip_strings_concat(text):
    """Join adjacent C string literals ("a" "b" -> "ab")."""
    return re.sub(r'"\s*\n\s*"', "", re.sub(r'"\s+"', "", text))


class Expected:
    """What the C parser accepts: keyword names (in order), how many
    parameters are required, positional-only count (None: unknown), whether
    extra positionals are taken (*args)."""

    def __init__(self, keywords=(), required=None, positional=0, varargs=False, kwonly=()):
        self.keywords = list(keywords)
        self.required = required
        self.positional = positional
        self.varargs = varargs
        self.kwonly = list(kwonly)

    def __repr__(self):
        return "Expected(keywords=%r, required=%r, positional=%r, varargs=%r, kwonly=%r)" % (
            self.keywords,
            self.required,
            self.positional,
            self.varargs,
            self.kwonly,
        )


def _format_units(fmt):
    """The number of values a PyArg format before and after '|' describes."""
    counts, part = [0, 0], 0
    i = 0
    while i < len(fmt):
        c = fmt[i]
        if c == "|":
            part = 1
        elif c == "$":
            pass
        elif c in "!&#*":
            pass
        elif c == "(":
            raise AssertionError("tuple formats are not handled: %r" % fmt)
        elif c in "sz" and fmt[i + 1 : i + 2] == "*":
            counts[part] += 1
            i += 1
        else:
            counts[part] += 1
        i += 1
    return counts


def _expected(name, func, flags):
    """Expected from the C function `func` registered as `name`."""
    flags = set(f.strip() for f in flags.split("|"))
    if "METH_NOARGS" in flags:
        return Expected()
    if "METH_O" in flags:
        return Expected(positional=1, required=1)
    body = _strip_strings_concat(_closure(func))
    formats = [f for f, n in re.findall(r'"([^":]*):(\w+)"', body) if n == name]
    fast = re.search(r"pygpu_fast_args\([^;]*?,\s*(\w+),\s*(\d+),\s*\w+\)", body)
    if "METH_FASTCALL" in flags and fast:
        # pygpu_fast_args(fname, args, nargs, kwnames, NAMES, NREQ, out)
        arr = re.search(
            r"static const char \*const %s\[\] = \{(.*?)\};" % fast.group(1), body, re.S
        )
        assert arr, "%s: the names of pygpu_fast_args not found in %s" % (name, func)
        return Expected(
            keywords=re.findall(r'"(\w+)"', arr.group(1)), required=int(fast.group(2)), positional=0
        )
    exact = re.search(r'nargs_check\("%s", n, (\d+)\)' % name, body)
    if "METH_FASTCALL" in flags and "METH_KEYWORDS" not in flags and exact:
        # nargs_check(name, nargs, N): exactly N positional arguments
        return Expected(required=int(exact.group(1)), positional=int(exact.group(1)))
    if "METH_FASTCALL" in flags and "METH_KEYWORDS" not in flags:
        return Expected(varargs=True, positional=None)  # positional only, as it likes
    if "METH_FASTCALL" in flags:
        keys = re.findall(r'PyUnicode_CompareWithASCIIString\(k, "(\w+)"\)', body)
        assert keys, "%s: no keyword parser found in %s" % (name, func)
        return Expected(varargs=True, kwonly=keys, positional=None)
    kw = re.search(r"static char \*kwlist\[\] = \{(.*?)\};", body, re.S)
    if "METH_KEYWORDS" in flags:
        assert kw, "%s: METH_KEYWORDS but no kwlist in %s" % (name, func)
        keywords = re.findall(r'"(\w*)"', kw.group(1))
        assert len(formats) == 1, "%s: format with ':%s' not found once: %r" % (name, name, formats)
        req, opt = _format_units(formats[0])
        assert req + opt == len(keywords), (name, formats[0], keywords)
        positional = sum(1 for k in keywords if k == "")
        assert "$" not in formats[0], "keyword-only parameters: extend this test"
        return Expected(keywords=keywords[positional:], required=req, positional=positional)
    # METH_VARARGS, positional only
    if formats:
        assert len(formats) == 1, (name, formats)
        req, opt = _format_units(formats[0])
        return Expected(required=req, positional=req + opt)
    unpack = re.search(r"PyArg_UnpackTuple\(args, [^,]+, (\d+), ([^,]+),", body)
    if unpack:
        lo, hi = unpack.group(1), unpack.group(2).strip()
        alt = re.fullmatch(r"async \? (\d+) : (\d+)", hi)
        if alt:  # do_memset(..., async): the _async variants take one more
            hi = alt.group(1) if name.endswith("_async") else alt.group(2)
        return Expected(required=int(lo), positional=int(hi))
    return Expected(varargs=True, positional=None)  # reads args as it likes


def _tables():
    """(owner, entries) for every PyMethodDef table; owner is the module
    or a type of pygpu._driver."""
    found = []
    for fname, text in SOURCES.items():
        if not fname.endswith(".c"):
            continue
        text = re.sub(r"#define KW \(METH_VARARGS \| METH_KEYWORDS\)", "", text)
        macros = dict(re.findall(r"#define (\w+) \((METH_[A-Z_ |]+)\)", SOURCES[fname]))
        for tm in re.finditer(r"static PyMethodDef (\w+)\[\] = \{(.*?)\n\};", text, re.S):
            table, content = tm.groups()
            if re.search(r"PyModule_AddFunctions\(m, %s\)" % table, text):
                owner = _driver
            else:
                slots = re.search(
                    r"static PyType_Slot (\w+)\[\] = \{[^;]*?\{Py_tp_methods, %s\}" % table,
                    text,
                    re.S,
                )
                assert slots, "%s: table %s has no owner" % (fname, table)
                spec = re.search(
                    r'"pygpu\.driver\.(\w+)",[^;]*?\b%s\b' % slots.group(1), text, re.S
                )
                owner = getattr(_driver, spec.group(1))
            for em in re.finditer(r'\{\s*"(\w+)",\s*([^,]+),\s*([A-Z_ |]+),', content):
                name, fexpr, flags = em.groups()
                flags = " | ".join(macros.get(f.strip(), f.strip()) for f in flags.split("|"))
                func = re.search(r"(\w+)\)?\s*$", fexpr.strip()).group(1)
                found.append((owner, name, func, flags))
    return found


def _constructors():
    """(type, tp_new function) for the types Python code can construct."""
    out = []
    for fname, text in SOURCES.items():
        for sm in re.finditer(r"static PyType_Slot (\w+)\[\] = \{(.*?)\n\};", text, re.S):
            slots, content = sm.groups()
            new = re.search(r"\{Py_tp_new, (\w+)\}", content)
            if not new:
                continue
            spec = re.search(r'"pygpu\.driver\.(\w+)",[^;]*?\b%s\b' % slots, text, re.S)
            out.append((getattr(_driver, spec.group(1)), new.group(1)))
    return out


METHODS = [t for t in _tables() if not t[1].startswith("_") or t[1].startswith("__")]
CONSTRUCTORS = _constructors()


def _params(obj):
    """The parameters a caller passes: inspect.signature without $self."""
    ts = obj.__text_signature__
    assert ts, "%r has no text signature" % (obj,)
    params = list(inspect.signature(obj).parameters.values())
    if ts.startswith("($self"):
        params = params[1:]
    return params


def _check(label, params, exp):
    P = inspect.Parameter
    kinds = [p.kind for p in params]
    keyword_names = [p.name for p in params if p.kind == P.POSITIONAL_OR_KEYWORD]
    kwonly = [p.name for p in params if p.kind == P.KEYWORD_ONLY]
    posonly = [p for p in params if p.kind == P.POSITIONAL_ONLY]
    assert keyword_names == exp.keywords, "%s: signature takes keywords %r, the parser %r" % (
        label,
        keyword_names,
        exp.keywords,
    )
    assert kwonly == exp.kwonly, "%s: keyword-only %r, the parser %r" % (label, kwonly, exp.kwonly)
    assert (P.VAR_POSITIONAL in kinds) == exp.varargs, "%s: *args %r, the parser %r" % (
        label,
        P.VAR_POSITIONAL in kinds,
        exp.varargs,
    )
    assert P.VAR_KEYWORD not in kinds, "%s: **kwargs in the signature" % label
    if exp.positional is not None:
        assert len(posonly) == exp.positional, "%s: %d positional-only, the parser %d" % (
            label,
            len(posonly),
            exp.positional,
        )
    if exp.required is not None:
        required = [
            p.name
            for p in params
            if p.default is P.empty and p.kind in (P.POSITIONAL_ONLY, P.POSITIONAL_OR_KEYWORD)
        ]
        assert len(required) == exp.required, "%s: required %r, the parser requires %d" % (
            label,
            required,
            exp.required,
        )


def _label(owner, name):
    return name if owner is _driver else "%s.%s" % (owner.__name__, name)


def test_the_parser_scan_found_everything():
    """The scan saw every public callable of the module (a table it missed
    would be a callable this test does not check)."""
    seen = {(o, n) for o, n, _, _ in METHODS}
    for n in dir(_driver):
        obj = getattr(_driver, n)
        if n.startswith("_") or isinstance(obj, type):
            continue
        if callable(obj):
            assert (_driver, n) in seen, n
    for n in dir(_driver):
        tp = getattr(_driver, n)
        if (
            not isinstance(tp, type)
            or not tp.__module__.startswith("pygpu")
            or issubclass(tp, BaseException)
            or hasattr(tp, "__members__")
        ):
            continue
        for m, v in vars(tp).items():
            if m.startswith("_") and not m.startswith("__"):
                continue  # private helpers (pygpu.ipc's), as for module functions
            if type(v).__name__ in ("method_descriptor", "classmethod_descriptor"):
                assert (tp, m) in seen, "%s.%s" % (n, m)
    assert len(METHODS) > 60 and len(CONSTRUCTORS) >= 3


@pytest.mark.parametrize(
    "owner,name,func,flags", METHODS, ids=["%s" % _label(o, n) for o, n, _, _ in METHODS]
)
def test_signature_matches_the_parser(owner, name, func, flags):
    obj = getattr(owner, name)
    _check(_label(owner, name), _params(obj), _expected(name, func, flags))


@pytest.mark.parametrize("tp,func", CONSTRUCTORS, ids=[t.__name__ for t, _ in CONSTRUCTORS])
def test_constructor_signature_matches_the_parser(tp, func):
    assert tp.__text_signature__, "%s: no text signature in tp_doc" % tp.__name__
    params = list(inspect.signature(tp).parameters.values())
    _check(tp.__name__, params, _expected(tp.__name__, func, "METH_VARARGS | METH_KEYWORDS"))


def test_function_call_keywords_are_the_documented_launch_keywords():
    """Function.__call__'s keywords: PYGPU_LAUNCH_KEYWORDS (src/pygpu.h), the
    names launch.c's parser compares against, and the Function doc agree."""
    m = re.search(
        r'#define PYGPU_LAUNCH_KEYWORDS\s*\\?\s*((?:"[^"]*"\s*\\?\s*)+)',
        SOURCES[os.path.join("launch", "launch.h")],
    )
    declared = "".join(re.findall(r'"([^"]*)"', m.group(1))).split(", ")
    body = BODIES["pygpu_config_from_kwargs"]
    parsed = list(
        dict.fromkeys(re.findall(r'PyUnicode_CompareWithASCIIString\(k, "(\w+)"\)', body))
    )
    assert sorted(parsed) == sorted(declared)
    doc = _driver.Function.__doc__
    call = re.search(r"``f\(\*args, (.*?)\)``", doc, re.S)
    assert call, doc
    documented = re.findall(r"(\w+)=", call.group(1))
    assert documented == declared, (documented, declared)


# ---- every keyword the signatures list is taken (against the stand-in) ----

KERNEL = r"""
extern "C" __global__ void k(float *x, int n) { }
"""


@pytest.fixture(scope="module")
def kernel_ptx():
    from pygpu import compiler

    return bytes(compiler.compile(KERNEL, target="ptx", arch="compute_90"))


def _values(cuda, ctx, ptx):
    """Plausible values by parameter name, so each call gets past its
    argument checks and reaches the driver."""
    dev = cuda.mem_alloc(256)
    other = cuda.mem_alloc(256)
    managed = cuda.mem_alloc_managed(256)
    stream = cuda.Stream()
    event = cuda.Event()
    module = cuda.module_from_buffer(ptx)
    function = module.get_function("k")
    host = np.zeros(64, np.float32)
    keep = [dev, other, managed, stream, event, module, function, host]
    by_name = {
        "flags": 0,
        "priority": 0,
        "stream": stream,
        "device": 0,
        "nbytes": 64,
        "block_size": 32,
        "dynamic_shared": 0,
        "block_size_limit": 0,
        "arg_types": "Pi",
        "grid": (1, 1),
        "block": (32, 1, 1),
        "shared": 0,
        "shared_size": 0,
        "size": 64,
        "dest_context": ctx,
        "src_context": ctx,
        "data": ptx,
        "options": None,
        "message_handler": None,
        "reset": False,
        "handle": 0,
        "owner": None,
        "ary": np.zeros(16, np.float32),
        "ptr": managed,
        # graphs
        "value": 0,
        "count": 8,
        "element_size": 4,
        "dependencies": None,
        "callback": lambda: None,
        "event": event,
        "graph": cuda.Graph(),
        "default": 0,
        "assign_default": True,
        "kind": "if",
        "mode": 0,
        "function": function,
        "path": os.devnull,
    }
    special = {
        ("array", "index"): 0,
        ("array", "level"): 0,  # RegisteredMapping.array
        ("get_attributes", "every"): True,
        ("RegisteredBuffer", "gl_handle"): 4,
        ("RegisteredImage", "gl_handle"): 4,
        ("RegisteredImage", "target"): 0x0DE1,  # GL_TEXTURE_2D (the stand-in's)
        ("mem_alloc_managed", "flags"): cuda.mem_attach_flags.GLOBAL,
        ("TimeRange", "name"): "range",
        ("TimeRange", "color"): "green",
        ("memcpy_htod", "dest"): dev,
        ("memcpy_htod", "src"): host,
        ("memcpy_htod_async", "dest"): dev,
        ("memcpy_htod_async", "src"): host,
        ("memcpy_dtoh", "dest"): host,
        ("memcpy_dtoh", "src"): dev,
        ("memcpy_dtoh_async", "dest"): host,
        ("memcpy_dtoh_async", "src"): dev,
        ("memcpy_dtod", "dest"): dev,
        ("memcpy_dtod", "src"): other,
        ("memcpy_dtod_async", "dest"): dev,
        ("memcpy_dtod_async", "src"): other,
        ("memcpy_peer", "dest"): dev,
        ("memcpy_peer", "src"): other,
        ("memcpy_peer_async", "dest"): dev,
        ("memcpy_peer_async", "src"): other,
        ("add_memcpy_node", "dest"): dev,
        ("add_memcpy_node", "src"): host,
        ("add_memset_node", "dest"): dev,
        ("add_conditional_node", "size"): 1,
        ("add_mem_free_node", "ptr"): cuda.mem_alloc_async(64, stream),
        # None: keep the host cache's limits as they are
        ("set_host_cache", "max_bytes"): None,
        ("set_host_cache", "max_blocks"): None,
    }
    # CUDA arrays, textures, surfaces, tensor maps (src/texture/cuarray.c, texobj.c, tensormap.c)
    from pygpu import gpuarray

    g2 = gpuarray.to_gpu(np.zeros((8, 64), np.float32))
    g3 = gpuarray.to_gpu(np.zeros((1, 8, 64), np.float32))
    surf = cuda.Array(
        cuda.ArrayDescriptor3D(8, 4, 0, cuda.array_format.FLOAT, 1, cuda.array3d_flags.SURFACE_LDST)
    )
    keep += [g2, g3, surf]
    by_name.update(
        {
            "width": 8,
            "height": 4,
            "depth": 0,
            "format": cuda.array_format.FLOAT,
            "num_channels": 1,
            "descriptor": cuda.ArrayDescriptor(8, 4, cuda.array_format.FLOAT, 1),
            "array": surf,
            "resource": g2,
            "address_mode": cuda.address_mode.CLAMP,
            "filter_mode": cuda.filter_mode.LINEAR,
            "read_mode": cuda.read_mode.ELEMENT_TYPE,
            "normalized_coords": False,
            "border_color": (0.0, 0.0, 0.0, 0.0),
            "shape": (8, 64),
            "pitch": 256,
            "tensor": g2,
            "box": (8, 8),
            "strides": (256, 4),
            "dtype": np.float32,
            "data_type": cuda.tensor_map_data_type.FLOAT32,
            "element_strides": (1, 1),
            "interleave": 0,
            "swizzle": 0,
            "l2_promotion": 0,
            "oob_fill": 0,
            "lower_corner": (0,),
            "upper_corner": (0,),
            "channels_per_pixel": 4,
            "pixels_per_column": 8,
        }
    )
    # the linear copies with a 1-D array side (memcpy_dtoa/atod/atoa)
    lin = [cuda.Array(cuda.ArrayDescriptor(64, 0, cuda.array_format.FLOAT, 1)) for _ in "ab"]
    keep += lin
    for fn, args in (
        ("memcpy_dtoa", dict(ary=lin[0], index=0, src=dev, len=64)),
        ("memcpy_atod", dict(dest=dev, ary=lin[0], index=0, len=64)),
        ("memcpy_atoa", dict(dest=lin[0], dest_index=0, src=lin[1], src_index=0, len=64)),
    ):
        special.update({(fn, k): v for k, v in args.items()})
    special.update(
        {
            ("im2col", "tensor"): g3,
            ("im2col", "shape"): (1, 8, 64),
            ("im2col", "strides"): (2048, 256, 4),
            ("im2col", "element_strides"): (1, 1, 1),
        }
    )
    graph = by_name["graph"]
    by_name["handle"] = 0
    special[("add_conditional_node", "handle")] = graph.conditional_handle()
    # green contexts (test_green_contexts.py): a split of 8 SMs
    special[("split_sms", "counts")] = [8]
    # processes and several GPUs (test_multi.py): a pool, one imported from
    # it, a pointer to share, a growable buffer
    pool = cuda.MemoryPool()
    pooled = pool.allocate(256)
    from pygpu import ipc

    handle = ipc.export_pool(pool)
    _MULTI.update(
        {
            _driver.MemoryPool: pool,
            (_driver.MemoryPool, "import_pointer"): ipc.import_pool(handle),
            _driver.VirtualBuffer: cuda.VirtualBuffer(64),
        }
    )
    keep += [pool, pooled, handle]
    by_name.update(
        {"reserve": 0, "shareable": False, "ipc": True, "max_size": 0, "readwrite": True}
    )
    special.update(
        {
            ("import_pointer", "data"): pool.export_pointer(pooled),
            ("IPCMemoryHandle", "handle"): cuda.mem_get_ipc_handle(other),
            ("grow", "nbytes"): 1 << 20,
        }
    )
    # memset_d2d* and initialize_profiler (src/memory/memset.c)
    for bits in (8, 16, 32):
        for fn in ("memset_d2d%d" % bits, "memset_d2d%d_async" % bits):
            special.update(
                {
                    (fn, "dest"): dev,
                    (fn, "pitch"): 64,
                    (fn, "data"): 0,
                    (fn, "width"): 4,
                    (fn, "height"): 2,
                }
            )
    special.update(
        {
            ("initialize_profiler", "config_file"): os.devnull,
            ("initialize_profiler", "output_file"): os.devnull,
            ("initialize_profiler", "output_mode"): 0,
        }
    )
    # PyCUDA's ManagedAllocation methods (as_buffer, attach) on managed memory
    _MULTI[_driver.DeviceAllocation] = managed
    by_name.update({"offset": 0, "mem_flags": cuda.mem_attach_flags.GLOBAL})
    # the array operators' C path (src/launch/fastops.c; made by pygpu.gpuarray)
    special.update(
        {
            ("_ArrayOperator", k): v
            for k, v in dict(
                name="_add",
                fallback=lambda x, y: None,
                array_type=type("A", (), {"__slots__": _ARRAY_ATTRS}),
                default_allocator=None,
                attrs=_ARRAY_ATTRS,
                tables_of=None,
                mode=0,
            ).items()
        }
    )
    return by_name, special, keep, function


_MULTI = {}


def _keyword_calls(cuda, ctx, function):
    """(label, callable) for every public callable whose signature has a
    keyword-capable parameter, bound to a live receiver."""
    peer_ctx = cuda.Device(1).retain_primary_context()
    graph = cuda.Graph()
    node = graph.add_kernel_node(function, cuda.mem_alloc(64), 4, block=(32, 1, 1))
    receivers = {
        _driver.Function: function,
        _driver.Event: cuda.Event(),
        _driver.Stream: cuda.Stream(),
        _driver.Device: cuda.Device(0),
        _driver.Context: ctx,
        _driver.TensorMap: _driver.TensorMap,
        _driver.Graph: graph,
        _driver.GraphExec: graph.instantiate(),
        "node": node,
    }
    if hasattr(_driver, "GreenContext"):
        receivers[_driver.GreenContext] = cuda.Device(0).split_sms([8])[0]
    if hasattr(_driver, "RegisteredBuffer"):
        # the stand-in takes any GL buffer name (n is n*256 bytes)
        rb = _driver.RegisteredBuffer(4)
        ri = _driver.RegisteredImage(4, 0x0DE1)  # GL_TEXTURE_2D
        receivers.update(
            {
                _driver.RegisteredBuffer: rb,
                _driver.RegisteredObject: rb,
                _driver.RegisteredImage: ri,
                _driver.RegisteredMapping: rb.map(),
                (_driver.RegisteredMapping, "array"): ri.map(),
            }
        )
    receivers.update(_MULTI)
    out = []
    for owner, name, _, _ in METHODS:
        obj = getattr(owner, name)
        params = _params(obj)
        if not any(p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) for p in params):
            continue
        if owner is not _driver:
            obj = getattr(receivers.get((owner, name), receivers.get(owner)), name)
        out.append((_label(owner, name), name, obj, params))
    for tp, _ in CONSTRUCTORS:
        if tp.__name__ in ("NcclComm", "NcclGroup"):
            continue  # needs NCCL loaded, a communicator (tests/multi/test_nccl_c.py)
        out.append((tp.__name__, tp.__name__, tp, list(inspect.signature(tp).parameters.values())))
    return out, peer_ctx, receivers


KEYWORD_ERRORS = re.compile(
    r"unexpected keyword argument|is an invalid keyword argument|"
    r"takes no keyword|got multiple values|keyword argument"
)


@pytest.mark.standin
def test_every_listed_keyword_is_accepted(standin, ctx, kernel_ptx):
    import pygpu.driver as cuda

    by_name, special, keep, function = _values(cuda, ctx, kernel_ptx)
    calls, peer_ctx, receivers = _keyword_calls(cuda, ctx, function)
    P = inspect.Parameter
    ok, checked = 0, 0
    for label, name, obj, params in calls:
        if label == "Context.enable_peer_access":
            by_name_local = dict(by_name, peer=peer_ctx)
        elif label == "Device":
            by_name_local = dict(by_name, device=0)
        else:
            by_name_local = by_name
        positional = [p for p in params if p.kind == P.POSITIONAL_ONLY]
        keywords = [p for p in params if p.kind in (P.POSITIONAL_OR_KEYWORD, P.KEYWORD_ONLY)]
        pos_values = [special.get((name, p.name), by_name_local.get(p.name)) for p in positional]
        if label.startswith("Function.prepared"):
            pos_values = [(1, 1), (32, 1, 1)] + ([by_name["stream"]] if "async" in label else [])
            pos_values += [keep[0], 4]
        if label == "Graph.add_kernel_node":  # *args: the kernel's
            pos_values = [function, keep[0], 4]
        if label == "GraphExec.set_kernel_node_params":
            pos_values = [receivers["node"], keep[0], 4]
        for kw in keywords:
            assert kw.name in by_name_local or (name, kw.name) in special, (
                "%s: no plausible value for %r; add one" % (label, kw.name)
            )
        # each keyword on its own (the required ones given by keyword too),
        # then all of them at once
        required = [p for p in keywords if p.default is P.empty]
        trials = [required + [k] for k in keywords if k not in required] + [keywords]
        for trial in trials:
            kwargs = {
                p.name: special[(name, p.name)]
                if (name, p.name) in special
                else by_name_local[p.name]
                for p in trial
            }
            checked += 1
            try:
                result = obj(*pos_values, **kwargs)
            except Exception as e:
                assert not KEYWORD_ERRORS.search(str(e)), "%s(**%r): %s: %s" % (
                    label,
                    sorted(kwargs),
                    type(e).__name__,
                    e,
                )
                pytest.fail(
                    "%s(**%r) failed: %s: %s" % (label, sorted(kwargs), type(e).__name__, e)
                )
            else:
                ok += 1
                if label == "Context.enable_peer_access":
                    ctx.disable_peer_access(peer_ctx)
                if label == "Stream.begin_capture":
                    obj.__self__.end_capture()
                if label == "RegisteredMapping.unmap":  # map again for the next trial
                    obj = obj.__self__.resource.map().unmap
                del result
    assert checked == ok and checked > 40


@pytest.mark.standin
def test_launch_keywords_are_accepted(standin, ctx, kernel_ptx):
    """Function.__call__ takes each of PYGPU_LAUNCH_KEYWORDS; an unknown one
    is refused naming them."""
    import pygpu.driver as cuda

    f = cuda.module_from_buffer(kernel_ptx).get_function("k")
    d = cuda.mem_alloc(64)
    values = {
        "grid": (2, 1),
        "shared": 16,
        "stream": cuda.Stream(),
        "time_kernel": True,
        "cluster": (1, 1, 1),
        "cooperative": True,
        "pdl": True,
    }
    declared = re.search(r"``f\(\*args, (.*?)\)``", _driver.Function.__doc__, re.S).group(1)
    names = re.findall(r"(\w+)=", declared)
    assert set(names) == set(values) | {"block"}
    for key, value in values.items():
        n = standin.launches()
        f(d, 4, block=(32, 1, 1), **{key: value})
        assert standin.launches() == n + 1, key
    with pytest.raises(
        TypeError,
        match=r"kernel 'k' got an unexpected keyword argument "
        r"'blocks' \(launch options: block, grid, shared, "
        r"stream, time_kernel, cluster, cooperative, pdl\)",
    ):
        f(d, 4, blocks=(32, 1, 1))


@pytest.mark.parametrize(
    "fn", ["memcpy_htod", "memcpy_dtoh_async", "memcpy_dtod", "memcpy_peer_async"]
)
def test_fast_parser_errors_match_cpython(fn):
    """The copies parse their arguments with pygpu_fast_args (no tuple or
    dict per call); a wrong call gets the TypeError CPython's parser gives,
    before anything else is looked at."""
    f = getattr(_driver, fn)
    with pytest.raises(
        TypeError,
        match=r"^%s\(\) got an unexpected keyword argument "
        r"'strem'$" % fn,
    ):
        f(1, 2, 3, strem=None)
    with pytest.raises(TypeError, match=r"^%s\(\) got multiple values for argument 'src'$" % fn):
        f(1, 2, src=3)
    with pytest.raises(TypeError, match=r"^%s\(\) missing required argument 'src' \(pos 2\)$" % fn):
        f(1)
    with pytest.raises(
        TypeError,
        match=r"^%s\(\) missing required argument 'dest' "
        r"\(pos 1\)$" % fn,
    ):
        f(src=1)
    with pytest.raises(TypeError, match=r"^%s\(\) takes at most \d arguments \(9 given\)$" % fn):
        f(*range(9))
