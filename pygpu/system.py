"""The system's view of the GPUs, through NVML (docs/system.md).

NVIDIA's own Python binding of NVML, nvidia-ml-py (``import pynvml``), does
the talking; pygpu never declares an NVML function itself.  It is an
optional extra::

    pip install "pygpu[nvml]"          # or: pip install nvidia-ml-py

What NVML says is matched to pygpu's devices by UUID, never by index:
``CUDA_VISIBLE_DEVICES`` may hide devices or reorder them (and CUDA's
order is not NVML's), but a device's UUID is the same on both sides, MIG
instances included::

    from pygpu import system
    system.driver_version()            # '570.124.06'
    s = system.device(0)               # pygpu's device 0, whatever NVML calls it
    s.memory_used, s.temperature, s.power_draw
    for s in system.devices():         # every device pygpu sees
        print(s)

A :class:`DeviceStatus` is a snapshot taken when it was made
(``s.refresh()`` takes a new one); each figure a device or driver does not
report (NVML's NotSupported, a missing entry point, no permission) is
``None``, never an exception.  Without nvidia-ml-py, or without the
driver's libnvidia-ml.so.1, every call raises :class:`NVMLUnavailableError`
saying what to install.
"""

from __future__ import annotations

import threading
import uuid as _uuid
from typing import Any

from pygpu import driver as drv

__all__ = [
    "NVMLUnavailableError",
    "DeviceStatus",
    "MigDevice",
    "GpuProcess",
    "NvLink",
    "driver_version",
    "nvml_version",
    "cuda_driver_version",
    "device",
    "devices",
    "report_lines",
]

INSTALL = 'pip install "pygpu[nvml]" (or pip install nvidia-ml-py)'


class NVMLUnavailableError(ImportError, RuntimeError):
    """pygpu.system cannot run: nvidia-ml-py is not installed, or NVML
    (the driver's libnvidia-ml.so.1) cannot be loaded or started.  Both an
    ImportError and a RuntimeError, so either ``except`` catches it."""


_lock = threading.Lock()
_nvml = None  # the pynvml module, once nvmlInit() succeeded

# NVML's answers that mean "this figure is not available here": the
# figure becomes None.  Anything else (a lost GPU, ...) is raised.
_NOT_AVAILABLE = (
    "NVML_ERROR_NOT_SUPPORTED",
    "NVML_ERROR_FUNCTION_NOT_FOUND",
    "NVML_ERROR_NO_PERMISSION",
    "NVML_ERROR_NO_DATA",
    "NVML_ERROR_NOT_FOUND",
    "NVML_ERROR_NOT_READY",
)


def _load():
    """The started pynvml module (nvmlInit once a process), or
    NVMLUnavailableError."""
    global _nvml
    if _nvml is not None:
        return _nvml
    with _lock:
        if _nvml is not None:
            return _nvml
        try:
            import pynvml
        except ImportError as e:
            raise NVMLUnavailableError(
                "pygpu.system needs NVIDIA's NVML binding, nvidia-ml-py, which is "
                "not installed (%s): %s" % (e, INSTALL),
                name="pynvml",
            ) from None
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as e:
            code = getattr(e, "value", None)
            if code == getattr(pynvml, "NVML_ERROR_LIBRARY_NOT_FOUND", 12):
                why = (
                    "the NVIDIA driver's NVML library (libnvidia-ml.so.1) was not "
                    "found: install the NVIDIA driver (nvidia-smi uses the same "
                    "library)"
                )
            elif code == getattr(pynvml, "NVML_ERROR_DRIVER_NOT_LOADED", 9):
                why = (
                    "the NVIDIA kernel driver is not loaded (no GPU, or the driver is not running)"
                )
            else:
                why = "nvmlInit() failed"
            raise NVMLUnavailableError("NVML is not available: %s (%s)" % (why, e)) from e
        except OSError as e:  # a binding that lets the loader's error through
            raise NVMLUnavailableError(
                "NVML is not available: libnvidia-ml.so.1 could not be loaded (%s); "
                "install the NVIDIA driver" % e
            ) from e
        _nvml = pynvml
        return pynvml


def _reset():
    """Forget the started binding (the tests swap pynvml for a fake)."""
    global _nvml
    with _lock:
        _nvml = None


def _codes(nvml):
    return {getattr(nvml, n) for n in _NOT_AVAILABLE if hasattr(nvml, n)}


def _get(nvml, fn, *args):
    """fn(*args), or None when NVML says the figure is not available."""
    try:
        return getattr(nvml, fn)(*args)
    except nvml.NVMLError as e:
        if getattr(e, "value", None) in _codes(nvml):
            return None
        raise
    except AttributeError:  # an older binding without the function
        if not hasattr(nvml, fn):
            return None
        raise


def _str(v):
    return v.decode() if isinstance(v, bytes) else v


def _norm_uuid(u):
    """A UUID's 32 hex digits: from a uuid.UUID, bytes, or NVML's
    'GPU-…'/'MIG-…' strings; None for a form that has none (the old
    'MIG-GPU-…/gi/ci' names)."""
    if u is None:
        return None
    if isinstance(u, _uuid.UUID):
        return u.hex
    if isinstance(u, (bytes, bytearray)) and len(u) == 16:
        return bytes(u).hex()
    s = _str(u).strip()
    for prefix in ("GPU-", "MIG-"):
        if s.upper().startswith(prefix):
            s = s[len(prefix) :]
            break
    try:
        return _uuid.UUID(s).hex
    except ValueError:
        return None


# ---- the system ----


def driver_version() -> str:
    """The NVIDIA driver's version, as nvidia-smi prints it ('570.124.06')."""
    nvml = _load()
    return _str(nvml.nvmlSystemGetDriverVersion())


def nvml_version() -> str:
    """NVML's version ('12.570.124.06')."""
    nvml = _load()
    return _str(nvml.nvmlSystemGetNVMLVersion())


def cuda_driver_version() -> int | None:
    """The CUDA version the driver supports, as an int (12080 for 12.8),
    as NVML reports it (pygpu.driver.get_driver_version() says the same
    from libcuda); None where NVML does not say."""
    nvml = _load()
    return _get(nvml, "nvmlSystemGetCudaDriverVersion")


# ---- the records ----


class _Record:
    """A small immutable record with a readable repr."""

    __slots__ = ()

    def __init__(self, **kw):
        for k in self.__slots__:
            object.__setattr__(self, k, kw.get(k))

    def __setattr__(self, name, value):
        raise AttributeError("%s is a snapshot: read-only" % type(self).__name__)

    def __repr__(self):
        return "%s(%s)" % (
            type(self).__name__,
            ", ".join("%s=%r" % (k, getattr(self, k)) for k in self.__slots__),
        )

    def __eq__(self, other):
        return type(other) is type(self) and all(
            getattr(self, k) == getattr(other, k) for k in self.__slots__
        )

    __hash__ = None  # type: ignore[assignment]  # unhashable, as == compares values


class GpuProcess(_Record):
    """A process using a GPU: pid, name (None where NVML may not say),
    used_memory in bytes (None where the driver does not count it, e.g. in
    a container or under MIG), kind ('compute' or 'graphics')."""

    __slots__ = ("pid", "name", "used_memory", "kind")
    pid: int
    name: str | None
    used_memory: int | None
    kind: str


class MigDevice(_Record):
    """A MIG instance of a GPU: its uuid ('MIG-…'), index on its GPU,
    gpu_instance_id, compute_instance_id, memory_total and memory_used in
    bytes."""

    __slots__ = (
        "uuid",
        "index",
        "gpu_instance_id",
        "compute_instance_id",
        "memory_total",
        "memory_used",
    )
    uuid: str | None
    index: int
    gpu_instance_id: int | None
    compute_instance_id: int | None
    memory_total: int | None
    memory_used: int | None


class NvLink(_Record):
    """One NVLink of a GPU: its link number, whether it is active, and the
    PCI bus id of the device at its other end (None when not reported)."""

    __slots__ = ("link", "active", "remote_pci_bus_id")
    link: int
    active: bool
    remote_pci_bus_id: str | None


_FIELDS = (
    # name, unit for the repr
    ("name", None),
    ("uuid", None),
    ("pci_bus_id", None),
    ("memory_total", "bytes"),
    ("memory_used", "bytes"),
    ("memory_free", "bytes"),
    ("utilization_gpu", "%"),
    ("utilization_memory", "%"),
    ("clock_graphics", "MHz"),
    ("clock_sm", "MHz"),
    ("clock_memory", "MHz"),
    ("clock_sm_max", "MHz"),
    ("clock_memory_max", "MHz"),
    ("temperature", "C"),
    ("power_draw", "W"),
    ("power_limit", "W"),
    ("performance_state", None),
    ("ecc_enabled", None),
    ("ecc_pending", None),
    ("ecc_errors_corrected", None),
    ("ecc_errors_uncorrected", None),
    ("mig_enabled", None),
    ("mig_pending", None),
    ("mig_devices", None),
    ("processes", None),
    ("nvlinks", None),
)


def _size(n):
    if n is None:
        return "n/a"
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return "%.1f %s" % (n / scale, unit)
    return "%d B" % n


class DeviceStatus:
    """A snapshot of one GPU as NVML sees it, matched to pygpu's device by
    UUID.  Attributes (None where the device or driver does not report
    them):

    device, ordinal: pygpu's Device and its ordinal (None for a GPU that
    CUDA_VISIBLE_DEVICES hides from CUDA); nvml_index: NVML's index of the
    GPU; name, uuid ('GPU-…' or 'MIG-…'), pci_bus_id; is_mig: whether this
    is a MIG instance (then the device-wide figures are its GPU's);
    memory_total, memory_used, memory_free (bytes); utilization_gpu,
    utilization_memory (percent over NVML's last sample period);
    clock_graphics, clock_sm, clock_memory and clock_sm_max,
    clock_memory_max (MHz); temperature (degrees C); power_draw,
    power_limit (watts); performance_state (0 to 15, P0 fastest);
    ecc_enabled, ecc_pending (the mode after the next reset),
    ecc_errors_corrected, ecc_errors_uncorrected (volatile counts);
    mig_enabled, mig_pending, mig_devices (a tuple of MigDevice); processes
    (a tuple of GpuProcess); nvlinks (a tuple of NvLink; None for a GPU
    without NVLink).
    """

    device: Any
    ordinal: int | None
    nvml_index: int
    is_mig: bool
    name: str | None
    uuid: str | None
    pci_bus_id: str | None
    memory_total: int | None
    memory_used: int | None
    memory_free: int | None
    utilization_gpu: int | None
    utilization_memory: int | None
    clock_graphics: int | None
    clock_sm: int | None
    clock_memory: int | None
    clock_sm_max: int | None
    clock_memory_max: int | None
    temperature: int | None
    power_draw: float | None
    power_limit: float | None
    performance_state: int | None
    ecc_enabled: bool | None
    ecc_pending: bool | None
    ecc_errors_corrected: int | None
    ecc_errors_uncorrected: int | None
    mig_enabled: bool | None
    mig_pending: bool | None
    mig_devices: tuple[MigDevice, ...]
    processes: tuple[GpuProcess, ...] | None
    nvlinks: tuple[NvLink, ...] | None

    def __init__(self, _values):
        self.__dict__.update(_values)

    def __setattr__(self, name, value):
        raise AttributeError("DeviceStatus is a snapshot: read-only (refresh() takes a new one)")

    def refresh(self) -> DeviceStatus:
        """A new snapshot of the same device."""
        if self.device is not None:
            return device(self.device)
        return _status_by_uuid(self.uuid, None)

    # ---- text
    def _rows(self):
        """(label, text) pairs, the figures as a person reads them."""

        def opt(v, fmt="%s"):
            return "n/a" if v is None else fmt % v

        rows = [
            ("name", opt(self.name)),
            ("uuid", opt(self.uuid)),
            ("pygpu ordinal", opt(self.ordinal)),
            ("NVML index", opt(self.nvml_index)),
            ("PCI bus id", opt(self.pci_bus_id)),
            (
                "memory",
                "%s used of %s (%s free)"
                % (_size(self.memory_used), _size(self.memory_total), _size(self.memory_free)),
            ),
            (
                "utilization",
                "GPU %s, memory %s"
                % (opt(self.utilization_gpu, "%d%%"), opt(self.utilization_memory, "%d%%")),
            ),
            (
                "clocks",
                "SM %s (max %s), memory %s (max %s), graphics %s"
                % (
                    opt(self.clock_sm, "%d MHz"),
                    opt(self.clock_sm_max, "%d MHz"),
                    opt(self.clock_memory, "%d MHz"),
                    opt(self.clock_memory_max, "%d MHz"),
                    opt(self.clock_graphics, "%d MHz"),
                ),
            ),
            ("temperature", opt(self.temperature, "%d C")),
            (
                "power",
                "%s of %s" % (opt(self.power_draw, "%.1f W"), opt(self.power_limit, "%.1f W")),
            ),
            ("performance state", opt(self.performance_state, "P%d")),
        ]
        if self.ecc_enabled is None:
            ecc = "n/a"
        else:
            ecc = "on" if self.ecc_enabled else "off"
            if self.ecc_pending is not None and self.ecc_pending != self.ecc_enabled:
                ecc += " (%s after reset)" % ("on" if self.ecc_pending else "off")
            if self.ecc_errors_corrected is not None or self.ecc_errors_uncorrected is not None:
                ecc += ", errors: %s corrected, %s uncorrected" % (
                    opt(self.ecc_errors_corrected),
                    opt(self.ecc_errors_uncorrected),
                )
        rows.append(("ECC", ecc))
        if self.mig_enabled is None:
            mig = "n/a"
        else:
            mig = "on" if self.mig_enabled else "off"
            if self.mig_pending is not None and self.mig_pending != self.mig_enabled:
                mig += " (%s after reset)" % ("on" if self.mig_pending else "off")
            if self.mig_devices:
                mig += ", %d instances: %s" % (
                    len(self.mig_devices),
                    ", ".join(
                        "%s (%s)" % (m.uuid, _size(m.memory_total)) for m in self.mig_devices
                    ),
                )
        rows.append(("MIG", mig))
        if self.processes is None:
            procs = "n/a"
        elif not self.processes:
            procs = "none"
        else:
            procs = ", ".join(
                "%d %s (%s%s)"
                % (
                    p.pid,
                    p.name or "?",
                    p.kind,
                    "" if p.used_memory is None else ", " + _size(p.used_memory),
                )
                for p in self.processes
            )
        rows.append(("processes", procs))
        if self.nvlinks is None:
            links = "n/a"
        else:
            active = [n for n in self.nvlinks if n.active]
            links = "%d of %d links active" % (len(active), len(self.nvlinks))
        rows.append(("NVLink", links))
        return rows

    def __repr__(self):
        head = "<pygpu.system.DeviceStatus %s" % (self.name or "?")
        if self.ordinal is not None:
            head += " (pygpu device %d)" % self.ordinal
        return head + "\n" + "\n".join("  %-17s %s" % r for r in self._rows()[1:]) + ">"

    def __str__(self):
        return self.__repr__()

    def _repr_markdown_(self) -> str:
        lines = ["**%s**" % (self.name or "GPU"), "", "| | |", "|---|---|"]
        lines += ["| %s | %s |" % (k, v.replace("|", "\\|")) for k, v in self._rows()[1:]]
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        import html

        cells = "".join(
            "<tr><th style='text-align:left'>%s</th><td style='text-align:left'>%s</td></tr>"
            % (html.escape(k), html.escape(v))
            for k, v in self._rows()[1:]
        )
        return "<table><caption><b>%s</b></caption>%s</table>" % (
            html.escape(self.name or "GPU"),
            cells,
        )


def _uuid_index(nvml):
    """{32 hex digits: (handle, parent handle or None, NVML index)} for
    every GPU NVML sees and every MIG instance on them."""
    out = {}
    for i in range(nvml.nvmlDeviceGetCount()):
        h = nvml.nvmlDeviceGetHandleByIndex(i)
        key = _norm_uuid(nvml.nvmlDeviceGetUUID(h))
        if key:
            out[key] = (h, None, i)
        mode = _get(nvml, "nvmlDeviceGetMigMode", h)
        if not mode or not mode[0]:
            continue
        for m, mh in _mig_handles(nvml, h):
            key = _norm_uuid(_get(nvml, "nvmlDeviceGetUUID", mh))
            if key:
                out[key] = (mh, h, i)
    return out


def _mig_handles(nvml, h):
    n = _get(nvml, "nvmlDeviceGetMaxMigDeviceCount", h) or 0
    for j in range(n):
        mh = _get(nvml, "nvmlDeviceGetMigDeviceHandleByIndex", h, j)
        if mh is not None:
            yield j, mh


def _temperature(nvml, g):
    """The GPU's temperature: nvmlDeviceGetTemperatureV where the binding
    and the driver have it, else the older call it replaces (deprecated,
    to go with CUDA 14)."""
    sensor = getattr(nvml, "NVML_TEMPERATURE_GPU", 0)
    if hasattr(nvml, "nvmlDeviceGetTemperatureV"):
        try:
            return nvml.nvmlDeviceGetTemperatureV(g, sensor)
        except nvml.NVMLError as e:
            fallback = {
                getattr(nvml, "NVML_ERROR_FUNCTION_NOT_FOUND", 13),
                getattr(nvml, "NVML_ERROR_ARGUMENT_VERSION_MISMATCH", 25),
            }
            if getattr(e, "value", None) not in fallback | _codes(nvml):
                raise
    return _get(nvml, "nvmlDeviceGetTemperature", g, sensor)


def _process_name(nvml, pid):
    """A process's name, or None: NVML may not know it (another
    container's, gone meanwhile), whatever error it says that with."""
    try:
        return _str(nvml.nvmlSystemGetProcessName(pid))
    except (nvml.NVMLError, AttributeError):
        return None


def _watts(mw):
    return None if mw is None else mw / 1000.0


def _processes(nvml, h):
    out = []
    seen = False
    for fn, kind in (
        ("nvmlDeviceGetComputeRunningProcesses", "compute"),
        ("nvmlDeviceGetGraphicsRunningProcesses", "graphics"),
    ):
        procs = _get(nvml, fn, h)
        if procs is None:
            continue
        seen = True
        for p in procs:
            used = getattr(p, "usedGpuMemory", None)
            # NVML_VALUE_NOT_AVAILABLE (ULL -1), or None from the binding
            if used is not None and used >= (1 << 63):
                used = None
            name = _process_name(nvml, p.pid)
            out.append(GpuProcess(pid=p.pid, name=name, used_memory=used, kind=kind))
    return tuple(out) if seen else None


def _nvlinks(nvml, h):
    n = getattr(nvml, "NVML_NVLINK_MAX_LINKS", 18)
    links = []
    for link in range(n):
        try:
            state = nvml.nvmlDeviceGetNvLinkState(h, link)
        except nvml.NVMLError:
            # a link number past the device's last (InvalidArgument), or a
            # device without NVLink (NotSupported)
            break
        except AttributeError:
            return None
        pci = None
        if state:
            info = _get(nvml, "nvmlDeviceGetNvLinkRemotePciInfo", h, link)
            pci = _str(getattr(info, "busId", None)) if info is not None else None
        links.append(NvLink(link=link, active=bool(state), remote_pci_bus_id=pci))
    return tuple(links) if links else None


def _mig_devices(nvml, h):
    out = []
    for j, mh in _mig_handles(nvml, h):
        mem = _get(nvml, "nvmlDeviceGetMemoryInfo", mh)
        out.append(
            MigDevice(
                uuid=_str(_get(nvml, "nvmlDeviceGetUUID", mh)),
                index=j,
                gpu_instance_id=_get(nvml, "nvmlDeviceGetGpuInstanceId", mh),
                compute_instance_id=_get(nvml, "nvmlDeviceGetComputeInstanceId", mh),
                memory_total=None if mem is None else mem.total,
                memory_used=None if mem is None else mem.used,
            )
        )
    return tuple(out)


def _pair(v):
    """NVML's (current, pending) pairs as two bools (None, None when n/a)."""
    if v is None:
        return None, None
    cur, pending = v
    return bool(cur), bool(pending)


def _snapshot(nvml, h, parent, index, dev, ordinal):
    """Every figure of the GPU behind handle h (for a MIG instance, the
    device-wide figures come from its GPU, parent)."""
    g = parent if parent is not None else h  # the physical GPU
    mem = _get(nvml, "nvmlDeviceGetMemoryInfo", h)
    util = _get(nvml, "nvmlDeviceGetUtilizationRates", g)
    pci = _get(nvml, "nvmlDeviceGetPciInfo", g)
    ecc_enabled, ecc_pending = _pair(_get(nvml, "nvmlDeviceGetEccMode", g))
    mig_enabled, mig_pending = _pair(_get(nvml, "nvmlDeviceGetMigMode", g))
    clk = getattr(nvml, "NVML_CLOCK_GRAPHICS", 0), getattr(nvml, "NVML_CLOCK_SM", 1)
    clk_mem = getattr(nvml, "NVML_CLOCK_MEM", 2)
    if ecc_enabled:
        err_u = getattr(nvml, "NVML_MEMORY_ERROR_TYPE_UNCORRECTED", 1)
        err_c = getattr(nvml, "NVML_MEMORY_ERROR_TYPE_CORRECTED", 0)
        vol = getattr(nvml, "NVML_VOLATILE_ECC", 0)
        corrected = _get(nvml, "nvmlDeviceGetTotalEccErrors", g, err_c, vol)
        uncorrected = _get(nvml, "nvmlDeviceGetTotalEccErrors", g, err_u, vol)
    else:
        corrected = uncorrected = None
    values = dict(
        device=dev,
        ordinal=ordinal,
        nvml_index=index,
        is_mig=parent is not None,
        name=_str(_get(nvml, "nvmlDeviceGetName", h)),
        uuid=_str(_get(nvml, "nvmlDeviceGetUUID", h)),
        pci_bus_id=_str(getattr(pci, "busId", None)) if pci is not None else None,
        memory_total=None if mem is None else mem.total,
        memory_used=None if mem is None else mem.used,
        memory_free=None if mem is None else mem.free,
        utilization_gpu=None if util is None else util.gpu,
        utilization_memory=None if util is None else util.memory,
        clock_graphics=_get(nvml, "nvmlDeviceGetClockInfo", g, clk[0]),
        clock_sm=_get(nvml, "nvmlDeviceGetClockInfo", g, clk[1]),
        clock_memory=_get(nvml, "nvmlDeviceGetClockInfo", g, clk_mem),
        clock_sm_max=_get(nvml, "nvmlDeviceGetMaxClockInfo", g, clk[1]),
        clock_memory_max=_get(nvml, "nvmlDeviceGetMaxClockInfo", g, clk_mem),
        temperature=_temperature(nvml, g),
        power_draw=_watts(_get(nvml, "nvmlDeviceGetPowerUsage", g)),
        power_limit=_watts(_get(nvml, "nvmlDeviceGetEnforcedPowerLimit", g)),
        performance_state=_get(nvml, "nvmlDeviceGetPerformanceState", g),
        ecc_enabled=ecc_enabled,
        ecc_pending=ecc_pending,
        ecc_errors_corrected=corrected,
        ecc_errors_uncorrected=uncorrected,
        mig_enabled=mig_enabled,
        mig_pending=mig_pending,
        mig_devices=_mig_devices(nvml, g) if mig_enabled else (),
        processes=_processes(nvml, h),
        nvlinks=_nvlinks(nvml, g),
    )
    return DeviceStatus(values)


def _cuda_device(dev):
    """pygpu's Device for dev: a Device (or anything with a uuid), an int
    ordinal, or None (the current context's device, else device 0)."""
    if dev is None:
        drv.init()
        ctx = drv.Context.get_current()
        return ctx.device if ctx is not None else drv.Device(0)
    if isinstance(dev, bool):
        raise TypeError("device must be a pygpu Device or an int ordinal, not bool")
    if isinstance(dev, int):
        drv.init()
        return drv.Device(dev)
    if hasattr(dev, "uuid"):
        return dev
    raise TypeError("device must be a pygpu Device or an int ordinal, not %s" % type(dev).__name__)


def _ordinal(dev):
    v = getattr(dev, "ordinal", None)
    return v if isinstance(v, int) else None


def _status_by_uuid(u, dev):
    nvml = _load()
    key = _norm_uuid(u)
    index = _uuid_index(nvml)
    if key not in index:
        raise LookupError(
            "NVML knows no GPU with UUID %s (pygpu device %s); NVML sees %d "
            "GPU(s) and MIG instance(s)"
            % (u, _ordinal(dev) if dev is not None else "?", len(index))
        )
    h, parent, i = index[key]
    return _snapshot(nvml, h, parent, i, dev, _ordinal(dev) if dev is not None else None)


def device(dev: object = None) -> DeviceStatus:
    """A DeviceStatus of pygpu's device dev (a Device, an ordinal, or None
    for the current context's device), matched to NVML's GPU by UUID."""
    _load()  # the missing-NVML error first, before any CUDA call
    d = _cuda_device(dev)
    return _status_by_uuid(d.uuid, d)


def devices(all: bool = False) -> list[DeviceStatus]:
    """A DeviceStatus for each device pygpu sees, in pygpu's order.  With
    all=True, the GPUs NVML sees that CUDA does not (hidden by
    CUDA_VISIBLE_DEVICES) follow, with device and ordinal None."""
    nvml = _load()
    index = _uuid_index(nvml)
    out, used = [], set()
    drv.init()
    for i in range(drv.Device.count()):
        d = drv.Device(i)
        key = _norm_uuid(d.uuid)
        if key not in index:
            raise LookupError("NVML knows no GPU with pygpu device %d's UUID %s" % (i, key))
        h, parent, k = index[key]
        used.add(key)
        out.append(_snapshot(nvml, h, parent, k, d, i))
    if all:
        for key, (h, parent, k) in sorted(index.items(), key=lambda kv: kv[1][2]):
            if key not in used and parent is None:
                out.append(_snapshot(nvml, h, None, k, None, None))
    return out


def report_lines() -> list[str]:
    """The lines of ``python -m pygpu``'s system section: NVML's driver
    version and each visible device's state, or why there is none."""
    try:
        lines = ["NVML %s, driver %s" % (nvml_version(), driver_version())]
    except NVMLUnavailableError as e:
        return ["system (pygpu.system): not available (%s)" % str(e).splitlines()[0]]
    try:
        for s in devices():
            lines.append(
                "  device %d: %s used of %s, %s, %s, GPU %s busy, ECC %s, MIG %s, %s process(es)"
                % (  # type: ignore[str-format]  # ordinal: set for a device
                    s.ordinal,
                    _size(s.memory_used),
                    _size(s.memory_total),
                    "n/a" if s.temperature is None else "%d C" % s.temperature,
                    "n/a" if s.power_draw is None else "%.0f W" % s.power_draw,
                    "n/a" if s.utilization_gpu is None else "%d%%" % s.utilization_gpu,
                    "n/a" if s.ecc_enabled is None else ("on" if s.ecc_enabled else "off"),
                    "n/a" if s.mig_enabled is None else ("on" if s.mig_enabled else "off"),
                    "n/a" if s.processes is None else len(s.processes),
                )
            )
    except Exception as e:
        lines.append(
            "  devices: %s: %s" % (type(e).__name__, str(e).splitlines()[0] if str(e) else "")
        )
    return lines
