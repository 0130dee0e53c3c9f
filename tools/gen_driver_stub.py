"""Write pygpu/_driver.pyi, the type stub of the C extension, from the built
module: every public name, each function's parameters from its text
signature, the enums' members, and the return types in RETURNS.

    python3 tools/gen_driver_stub.py          # rewrites pygpu/_driver.pyi

tests/project/test_packaging.py checks that the stub names exactly what the
extension has, so a new C function fails the suite until this is rerun.
"""

import enum
import inspect
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# name or Class.name -> return annotation; the rest return Any
RETURNS = {
    "_nvtx_attached": "bool",
    "_nvtx_push": "int",
    "_nvtx_pop": "int",
    "_nvtx_mark": "None",
    "_nvtx_set_wrapper": "None",
    "profiler_start": "None",
    "profiler_stop": "None",
    "init": "None",
    "get_driver_version": "int",
    "_driver_loaded": "bool",
    "_load_nvrtc": "str",
    "_nvrtc_version": "tuple[int, int]",
    "_nvrtc_supported_archs": "tuple[int, ...]",
    "_load_nvjitlink": "str",
    "_nvjitlink_loaded": "bool",
    "_nvjitlink_version": "tuple[int, int] | None",
    "_nvjitlink_result_name": "str",
    "mem_alloc": "DeviceAllocation",
    "mem_alloc_async": "DeviceAllocation",
    "mem_alloc_managed": "DeviceAllocation",
    "mem_alloc_pitch": "tuple[DeviceAllocation, int]",
    "mem_get_info": "tuple[int, int]",
    "module_from_buffer": "Module",
    "register_host_memory": "HostAllocation",
    "Device.name": "str",
    "Device.compute_capability": "tuple[int, int]",
    "Device.total_memory": "int",
    "Device.split_sms": "list[GreenContext]",
    "Device.sm_partitioning": "tuple[int, int, int]",
    "GreenContext.create_stream": "Stream",
    "_checkpoint_state": "int",
    "_checkpoint_restore_thread_id": "int",
    "Device.count": "int",
    "Device.get_attribute": "int",
    "Device.get_attributes": "dict[device_attribute, int]",
    "Device.pci_bus_id": "str",
    "Device.make_context": "Context",
    "Device.retain_primary_context": "Context",
    "Device.can_access_peer": "bool",
    "Context.get_current": "Context | None",
    "Context.get_device": "Device",
    "Context.push": "None",
    "Context.pop": "Context | None",
    "Context.synchronize": "None",
    "Context.detach": "None",
    "Context.get_limit": "int",
    "Context.set_limit": "None",
    "DeviceAllocation.free": "None",
    "Event.record": "Event",
    "Event.synchronize": "Event",
    "Event.query": "bool",
    "Event.time_since": "float",
    "Event.time_till": "float",
    "Stream.synchronize": "None",
    "Stream.is_done": "bool",
    "Stream.null": "Stream",
    "Stream.per_thread": "Stream",
    "Stream.from_handle": "Stream",
    "Module.get_function": "Function",
    "Module.get_global": "tuple[DeviceAllocation, int]",
    "Function.configure": "BoundLaunch",
    "Function.prepare": "Function",
    "Function.get_attribute": "int",
    "Function.prepared_timed_call": "Any",
    "Linker.add_data": "None",
    "Linker.add_file": "None",
    "Linker.close": "None",
    "Linker.complete": "bytes",
    "Linker.link_module": "Module",
    # graphs (src/graph/graph.c)
    "Stream.begin_capture": "None",
    "Stream.end_capture": "Graph",
    "Stream.is_capturing": "bool",
    "Graph.instantiate": "GraphExec",
    "Graph.nodes": "list[GraphNode]",
    "Graph.conditional_handle": "int",
    "Graph.add_dependencies": "None",
    "Graph.debug_dot": "None",
    **{
        "Graph.add_%s_node" % k: "GraphNode"
        for k in (
            "kernel",
            "memcpy",
            "memset",
            "host",
            "event_record",
            "event_wait",
            "child_graph",
            "empty",
            "mem_alloc",
            "mem_free",
            "conditional",
        )
    },
    "GraphExec.launch": "None",
    "GraphExec.upload": "None",
    "GraphExec.update": "None",
    "GraphExec.synchronize": "None",
    "GraphExec.set_kernel_node_params": "None",
    "memcpy_dtoa": "None",
    "memcpy_atod": "None",
    "memcpy_atoa": "None",
    "_memcpy_3d": "None",
    "_memcpy_3d_peer": "None",
    "mem_get_ipc_handle": "bytearray",
    "forked_from": "int | None",
    "Event.ipc_handle": "bytearray",
    "Event.from_ipc_handle": "Event",
    "IPCMemoryHandle.close": "None",
    "VirtualBuffer.grow": "None",
    "MemoryPool.allocate": "DeviceAllocation",
    "MemoryPool.export_pointer": "bytes",
    "MemoryPool.import_pointer": "DeviceAllocation",
    "MemoryPool.set_access": "None",
    "MemoryPool.destroy": "None",
    "_current_context": "Context | None",
    "_block_cache_trim": "int",
    "_block_cache_stats": "dict[str, int]",
    "_set_block_cache": "tuple[int, int]",
    "_block_cache_settings": "tuple[int, int]",
    "_host_block": "HostBlock",
    "host_cache_stats": "dict[str, int]",
    "free_host_cache": "int",
    "set_host_cache": "dict[str, int]",
    "_host_cache_after_fork": "None",
    "_host_cache_at_exit": "None",
    # PyCUDA's class members (tests/pycuda_compat/test_pycuda_members.py)
    "DeviceAllocation.as_buffer": "memoryview",
    "DeviceAllocation.attach": "None",
    "DeviceAllocation.get_device_pointer": "int",
    "HostAllocation.free": "None",
    "HostAllocation.unregister": "None",
    "HostAllocation.get_flags": "int",
    "Context.get_api_version": "int",
    "Context.get_shared_config": "shared_config | int",
    "Context.set_shared_config": "None",
    "_host_view": "memoryview",
}
ATTRS = {  # getset descriptors: Class.name -> annotation
    "HostAllocation.freed": "bool",
    "Device.ordinal": "int",
    "Device.uuid": "bytes",
    "Context.device": "Device",
    "Context.handle": "int",
    "Context.detached": "bool",
    "Context.is_primary": "bool",
    "DeviceAllocation.size": "int",
    "DeviceAllocation.freed": "bool",
    "DeviceAllocation.context": "Context",
    "Stream.handle": "int",
    "Event.handle": "int",
    "Module.handle": "int",
    "Module.context": "Context",
    "Function.handle": "int",
    "Function.name": "str",
    "Function.module": "Module",
    "Function.num_regs": "int",
    "HostAllocation.size": "int",
    "HostAllocation.address": "int",
    "Linker.closed": "bool",
    "Linker.context": "Context | None",
    "Linker.error_log": "str",
    "Linker.info_log": "str",
    "Graph.handle": "int",
    "Graph.callback_errors": "list[BaseException]",
    "Graph.parent": "Graph | None",
    "GraphExec.graph": "Graph",
    "GraphExec.handle": "int",
    "GraphExec.callback_errors": "list[BaseException]",
    "GraphNode.dependencies": "list[GraphNode]",
    "GraphNode.type": "int",
    "GraphNode.kind": "str",
    "GraphNode.graph": "Graph",
    "GraphNode.index": "int",
    "GraphNode.handle": "int",
    "GraphNode.function": "Function | None",
    "GraphNode.dptr": "int",
    "GraphNode.bytesize": "int",
    "GraphNode.bodies": "tuple[Graph, ...] | None",
    "VirtualBuffer.mapped": "int",
    "VirtualBuffer.reserved": "int",
    "VirtualBuffer.granularity": "int",
    "VirtualBuffer.shareable": "bool",
    "VirtualBuffer.device": "int",
    "VirtualBuffer.nchunks": "int",
    "MemoryPool.handle": "int",
    "MemoryPool.imported": "bool",
    "MemoryPool.ipc": "bool",
    "MemoryPool.device": "int",
    "HostBlock.address": "int",
    "HostBlock.size": "int",
    "HostBlock.mapped": "int",
    "HostBlock.reused": "bool",
    # struct members (PyMemberDef), PyCUDA's writable descriptor fields
    **{"ArrayDescriptor.%s" % f: "int" for f in ("width", "height", "format", "num_channels")},
    **{
        "ArrayDescriptor3D.%s" % f: "int"
        for f in ("width", "height", "depth", "format", "num_channels", "flags")
    },
    "TimeRange.name": "str",
    "_ArrayOperator.__name__": "str",
    "_ArrayOperator.__qualname__": "str",
}


def text_params(textsig):
    """The parameters of a text signature ("(handle, flags=ipc_mem_flags.X)"),
    each Any, defaults as ...: inspect cannot evaluate every default (an enum
    member of the module), ast reads them all."""
    import ast

    text = textsig.replace("$", "")
    fn = ast.parse("def f%s: pass" % text).body[0]
    a = fn.args
    out = []
    posonly, regular = list(a.posonlyargs), list(a.args)
    every = posonly + regular
    defaults = [None] * (len(every) - len(a.defaults)) + list(a.defaults)
    for i, (arg, d) in enumerate(zip(every, defaults)):
        if arg.arg in ("self", "cls", "type", "module"):
            continue
        out.append("%s: Any%s" % (arg.arg, "" if d is None else " = ..."))
        if posonly and arg is posonly[-1]:
            out.append("/")
    if a.vararg:
        out.append("*%s: Any" % a.vararg.arg)
    elif a.kwonlyargs:
        out.append("*")
    for arg, d in zip(a.kwonlyargs, a.kw_defaults):
        out.append("%s: Any%s" % (arg.arg, "" if d is None else " = ..."))
    if a.kwarg:
        out.append("**%s: Any" % a.kwarg.arg)
    return out


def disjoint_base(t):
    """PEP 800: whether instances of t have a layout of their own (CPython's
    shape_differs(), as mypy.stubtest reads it): @disjoint_base in the stub."""
    base = t.__base__
    if base is None:
        return False
    if sys.version_info >= (3, 12) or t.__itemsize__ or base.__itemsize__:
        return t.__basicsize__ != base.__basicsize__ or t.__itemsize__ != base.__itemsize__
    size, word = t.__basicsize__, 8 if sys.maxsize > 2**32 else 4
    if not base.__weakrefoffset__ and t.__weakrefoffset__ + word == size:
        size -= word
    if not base.__dictoffset__ and t.__dictoffset__ + word == size:
        size -= word
    return size != base.__basicsize__


def params(obj, is_method):
    try:
        sig = inspect.signature(obj)
    except (TypeError, ValueError):
        return ("self, " if is_method else "") + "*args: Any, **kwargs: Any"
    out = []
    for p in sig.parameters.values():
        if p.name in ("self", "cls", "$module", "module"):
            out.append(p.name if is_method else None)
            continue
        text = p.name
        if p.kind is p.VAR_POSITIONAL:
            text = "*" + p.name + ": Any"
        elif p.kind is p.VAR_KEYWORD:
            text = "**" + p.name + ": Any"
        else:
            text += ": Any" + ("" if p.default is p.empty else " = ...")
        out.append(text)
    if is_method and (not out or out[0] not in ("self", "cls")):
        out.insert(0, "self")
    names = [o for o in out if o is not None]
    # keep the positional-only marker where the C signature has one
    kinds = [p.kind for p in sig.parameters.values() if p.name not in ("$module", "module")]
    if inspect.Parameter.POSITIONAL_ONLY in kinds:
        last = max(i for i, k in enumerate(kinds) if k is inspect.Parameter.POSITIONAL_ONLY)
        if (
            is_method
            and names
            and names[0] in ("self", "cls")
            and list(sig.parameters)[0] not in ("self", "cls")
        ):
            last += 1
        names.insert(last + 1, "/")
    kw = [p.kind for p in sig.parameters.values()]
    if inspect.Parameter.KEYWORD_ONLY in kw and inspect.Parameter.VAR_POSITIONAL not in kw:
        first = next(
            i
            for i, n in enumerate(names)
            if n != "/"
            and sig.parameters.get(n.split(":")[0].lstrip("*")) is not None
            and sig.parameters[n.split(":")[0].lstrip("*")].kind is inspect.Parameter.KEYWORD_ONLY
        )
        names.insert(first, "*")
    return ", ".join(names)


def main():
    sys.path.insert(0, ROOT)
    from pygpu import _driver

    lines = [
        '"""Type stub of pygpu._driver, the C extension (generated by',
        'tools/gen_driver_stub.py from the built module; rerun it after changing',
        'the C API)."""',
        "import enum",
        "from typing import Any, ClassVar",
        "",
        "from typing_extensions import Self, disjoint_base",
        "",
    ]
    names = sorted(n for n in dir(_driver) if not n.startswith("__"))
    for n in names:
        o = getattr(_driver, n)
        if isinstance(o, type) and issubclass(o, enum.Enum):
            lines.append("class %s(enum.IntEnum):" % n)
            for m in o.__members__:
                lines.append("    %s = %d" % (m, int(o.__members__[m])))
            # PyCUDA's tables of the members by name and by value
            if isinstance(vars(o).get("names"), dict):
                lines.append("    names: ClassVar[dict[str, %s]]" % n)
            if isinstance(vars(o).get("values"), dict):
                lines.append("    values: ClassVar[dict[int, %s]]" % n)
            lines.append("")
        elif isinstance(o, type):
            bases = [
                ("builtins." if b.__module__ == "builtins" else "") + b.__name__
                for b in o.__bases__
                if b is not object
            ]
            if disjoint_base(o) and not issubclass(o, BaseException):
                lines.append("@disjoint_base")
            lines.append("class %s%s:" % (n, "(%s)" % ", ".join(bases) if bases else ""))
            body = []
            if issubclass(o, BaseException):
                for a in ("code", "name", "routine"):
                    if a in vars(o) or any(a in vars(b) for b in o.__mro__[1:-1]):
                        if a in vars(o):
                            body.append(
                                "    %s: %s" % (a, "int | None" if a == "code" else "str | None")
                            )
            for m, v in sorted(vars(o).items()):
                # __init__: the one line inserted below (a type's own tp_init
                # slot, for subclasses, would otherwise give a second)
                if m.startswith("__") and m not in (
                    "__call__",
                    "__enter__",
                    "__exit__",
                    "__int__",
                    "__index__",
                    "__cuda_array_interface__",
                    "__cuda_stream__",
                    "__bytes__",
                    "__name__",
                    "__qualname__",
                ):
                    continue
                # the private methods too: pygpu's own modules call them
                # (ipc: MemoryPool._export_fd), and mypy checks those calls
                if m.startswith("_") and not m.startswith("__") and not callable(v):
                    continue
                key = "%s.%s" % (n, m)
                if type(v).__name__ == "member_descriptor":
                    # a C struct member (PyMemberDef): a plain attribute
                    body.append("    %s: %s" % (m, ATTRS.get(key, "Any")))
                elif type(v).__name__ == "getset_descriptor":
                    body.append("    @property")
                    body.append("    def %s(self) -> %s: ..." % (m, ATTRS.get(key, "Any")))
                elif type(v).__name__ == "classmethod_descriptor":
                    body.append("    @classmethod")
                    p = params(getattr(o, m), True).replace("self", "cls", 1)
                    body.append("    def %s(%s) -> %s: ..." % (m, p, RETURNS.get(key, "Any")))
                elif m == "__enter__":
                    body.append("    def __enter__(self) -> %s: ..." % n)
                elif m == "__exit__":
                    body.append("    def __exit__(self, *exc: object) -> None: ...")
                elif m in ("__int__", "__index__"):
                    body.append("    def %s(self) -> int: ..." % m)
                elif m == "__bytes__":
                    body.append("    def __bytes__(self) -> bytes: ...")
                elif m == "__cuda_stream__":
                    body.append("    def __cuda_stream__(self) -> tuple[int, int]: ...")
                elif m == "__call__":
                    body.append("    def __call__(self, *args: Any, **kwargs: Any) -> Any: ...")
                elif callable(v):
                    body.append(
                        "    def %s(%s) -> %s: ..." % (m, params(v, True), RETURNS.get(key, "Any"))
                    )
            # the constructor: its parameters from the type's text signature
            # (tp_doc's first line "Name(args)\n--\n\n"), as __init__ where
            # the type has tp_init, else as __new__
            textsig = getattr(o, "__text_signature__", None)
            if isinstance(textsig, str):
                p = ", ".join(text_params(textsig))
                if o.__init__ is not object.__init__:
                    body.insert(
                        0, "    def __init__(self%s) -> None: ..." % (", " + p if p else "")
                    )
                else:
                    body.insert(0, "    def __new__(cls%s) -> Self: ..." % (", " + p if p else ""))
            elif "__new__" in vars(o) or o.__init__ is not object.__init__:
                body.insert(0, "    def __init__(self, *args: Any, **kwargs: Any) -> None: ...")
            lines.extend(body or ["    ..."])
            lines.append("")
        elif callable(o):
            lines.append("def %s(%s) -> %s: ..." % (n, params(o, False), RETURNS.get(n, "Any")))
        else:
            lines.append("%s: %s" % (n, type(o).__name__))
    text = "\n".join(lines).rstrip() + "\n"
    if "builtins." in text:
        text = text.replace("import enum\n", "import builtins\nimport enum\n", 1)
    with open(os.path.join(ROOT, "pygpu", "_driver.pyi"), "w") as f:
        f.write(text)


if __name__ == "__main__":
    main()
