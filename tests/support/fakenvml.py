"""A fake ``pynvml`` (nvidia-ml-py's module) for pygpu.system's tests
without a GPU: the functions pygpu.system calls, over a list of GPUs
described by dicts.  A figure given as NOT_SUPPORTED (or any NVML error
code wrapped in Fail) makes its function raise NVMLError with that code,
as the real binding does.

    nvml = fakenvml.module([fakenvml.gpu("GPU-...", name="A"), ...])
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
"""

import types

NVML_SUCCESS = 0
NVML_ERROR_UNINITIALIZED = 1
NVML_ERROR_INVALID_ARGUMENT = 2
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NO_PERMISSION = 4
NVML_ERROR_NOT_FOUND = 6
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_FUNCTION_NOT_FOUND = 13
NVML_ERROR_GPU_IS_LOST = 15
NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25


class Fail:
    """A figure whose query fails with NVML error code `code`."""

    def __init__(self, code):
        self.code = code


NOT_SUPPORTED = Fail(NVML_ERROR_NOT_SUPPORTED)


def gpu(uuid, **kw):
    """A GPU's figures; every one can be overridden (or made a Fail)."""
    d = dict(
        uuid=uuid,
        name="Fake GPU",
        bus_id="00000000:%02X:00.0" % (abs(hash(uuid)) % 250),
        memory=(80 << 30, 1 << 30),  # total, used
        utilization=(37, 12),
        clocks={0: 1500, 1: 1500, 2: 2619},
        max_clocks={0: 1980, 1: 1980, 2: 2619},
        temperature=41,
        power=(123456, 700000),  # mW: usage, enforced limit
        pstate=0,
        ecc=(1, 1),
        ecc_errors=(0, 0),  # corrected, uncorrected
        mig=(0, 0),
        migs=(),  # MIG instance dicts: uuid, memory (total, used), gi, ci
        processes=((4242, 512 << 20),),
        graphics_processes=(),
        process_names={4242: "python3"},
        nvlinks=(1, 1, 0),  # each link's state; NOT_SUPPORTED for none
    )
    d.update(kw)
    return d


def module(
    gpus, driver="570.124.06", nvml="12.570.124.06", cuda=12080, init=None, temperature_v=True
):
    """A module standing in for pynvml over `gpus` (dicts from gpu()).
    init: an NVML error code nvmlInit() fails with; temperature_v: whether
    it has nvmlDeviceGetTemperatureV (a gpu's temperature_v, else its
    temperature)."""
    m = types.ModuleType("pynvml")
    m.__file__ = __file__
    for k, v in globals().items():
        if k.startswith("NVML_"):
            setattr(m, k, v)
    m.NVML_TEMPERATURE_GPU = 0
    m.NVML_CLOCK_GRAPHICS, m.NVML_CLOCK_SM, m.NVML_CLOCK_MEM = 0, 1, 2
    m.NVML_MEMORY_ERROR_TYPE_CORRECTED, m.NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 0, 1
    m.NVML_VOLATILE_ECC = 0
    m.NVML_NVLINK_MAX_LINKS = 18
    m.calls = []
    m.initialised = 0

    class NVMLError(Exception):
        def __init__(self, value):
            super().__init__(value)
            self.value = value

        def __str__(self):
            return "NVML error %d" % self.value

    m.NVMLError = NVMLError

    def val(v):
        if isinstance(v, Fail):
            raise NVMLError(v.code)
        return v

    class Handle:
        def __init__(self, d, parent=None):
            self.d, self.parent = d, parent

    gpu_handles = [Handle(g) for g in gpus]
    for h in gpu_handles:
        h.migs = [Handle(mg, h) for mg in h.d.get("migs", ())]

    def check_init():
        if not m.initialised:
            raise NVMLError(NVML_ERROR_UNINITIALIZED)

    def fn(f):
        def wrapped(*a):
            m.calls.append(f.__name__)
            check_init()
            return f(*a)

        wrapped.__name__ = f.__name__
        setattr(m, f.__name__, wrapped)
        return wrapped

    def nvmlInit():
        m.calls.append("nvmlInit")
        if init is not None:
            raise NVMLError(init)
        m.initialised += 1

    m.nvmlInit = nvmlInit

    @fn
    def nvmlSystemGetDriverVersion():
        return val(driver)

    @fn
    def nvmlSystemGetNVMLVersion():
        return val(nvml)

    @fn
    def nvmlSystemGetCudaDriverVersion():
        return val(cuda)

    @fn
    def nvmlDeviceGetCount():
        return len(gpu_handles)

    @fn
    def nvmlDeviceGetHandleByIndex(i):
        if not 0 <= i < len(gpu_handles):
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        return gpu_handles[i]

    @fn
    def nvmlDeviceGetUUID(h):
        return val(h.d["uuid"])

    @fn
    def nvmlDeviceGetName(h):
        return val(h.d.get("name", "Fake MIG"))

    @fn
    def nvmlDeviceGetPciInfo(h):
        return types.SimpleNamespace(busId=val(h.d["bus_id"]))

    @fn
    def nvmlDeviceGetMemoryInfo(h, version=None):
        total, used = val(h.d["memory"])
        return types.SimpleNamespace(total=total, used=used, free=total - used)

    @fn
    def nvmlDeviceGetUtilizationRates(h):
        g, mem = val(h.d["utilization"])
        return types.SimpleNamespace(gpu=g, memory=mem)

    @fn
    def nvmlDeviceGetClockInfo(h, kind):
        return val(val(h.d["clocks"])[kind])

    @fn
    def nvmlDeviceGetMaxClockInfo(h, kind):
        return val(val(h.d["max_clocks"])[kind])

    @fn
    def nvmlDeviceGetTemperature(h, sensor):
        return val(h.d["temperature"])

    if temperature_v:

        @fn
        def nvmlDeviceGetTemperatureV(h, sensor):
            return val(val(h.d.get("temperature_v", h.d["temperature"])))

    @fn
    def nvmlDeviceGetPowerUsage(h):
        return val(h.d["power"])[0]

    @fn
    def nvmlDeviceGetEnforcedPowerLimit(h):
        return val(h.d["power"])[1]

    @fn
    def nvmlDeviceGetPerformanceState(h):
        return val(h.d["pstate"])

    @fn
    def nvmlDeviceGetEccMode(h):
        return list(val(h.d["ecc"]))

    @fn
    def nvmlDeviceGetTotalEccErrors(h, kind, counter):
        return val(h.d["ecc_errors"])[kind]

    @fn
    def nvmlDeviceGetMigMode(h):
        if h.parent is not None:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        return list(val(h.d["mig"]))

    @fn
    def nvmlDeviceGetMaxMigDeviceCount(h):
        return 7 if val(h.d["mig"])[0] else 0

    @fn
    def nvmlDeviceGetMigDeviceHandleByIndex(h, j):
        if j >= len(h.migs):
            raise NVMLError(NVML_ERROR_NOT_FOUND)
        return h.migs[j]

    @fn
    def nvmlDeviceGetGpuInstanceId(h):
        return h.d["gi"]

    @fn
    def nvmlDeviceGetComputeInstanceId(h):
        return h.d["ci"]

    def procs(h, key):
        return [
            types.SimpleNamespace(pid=pid, usedGpuMemory=used)
            for pid, used in val(h.d.get(key, ()))
        ]

    @fn
    def nvmlDeviceGetComputeRunningProcesses(h):
        return procs(h, "processes")

    @fn
    def nvmlDeviceGetGraphicsRunningProcesses(h):
        return procs(h, "graphics_processes")

    @fn
    def nvmlSystemGetProcessName(pid):
        for h in gpu_handles:
            names = h.d.get("process_names", {})
            if pid in names:
                return val(names[pid])
        raise NVMLError(NVML_ERROR_NOT_FOUND)

    @fn
    def nvmlDeviceGetNvLinkState(h, link):
        links = val(h.d["nvlinks"])
        if link >= len(links):
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        return links[link]

    @fn
    def nvmlDeviceGetNvLinkRemotePciInfo(h, link):
        return types.SimpleNamespace(busId="00000000:%02X:00.0" % (0x80 + link))

    return m
