"""pygpu.system: NVML's view of the GPUs through nvidia-ml-py (docs/system.md).

Without a GPU a fake pynvml (tests/support/fakenvml.py) stands in: devices
are matched by UUID whatever the order, figures NVML does not support are
None, and a missing binding or library is one clear error.  On the
stand-in, pygpu's devices (their UUIDs) are matched into a reordered NVML.
On a GPU the figures are checked against nvidia-smi's."""

import csv
import io
import shutil
import subprocess
import sys
import uuid

import pytest

import fakenvml
from pygpu import system

U0, U1, U2 = (str(uuid.UUID(bytes=bytes(0x40 + i + 16 * d for i in range(16)))) for d in range(3))


class FakeDevice:
    """Stands in for pygpu's Device: what pygpu.system reads of one."""

    def __init__(self, u, ordinal):
        self.uuid = uuid.UUID(u)
        self.ordinal = ordinal


@pytest.fixture
def nvml(monkeypatch):
    """Install a fake pynvml made from the given GPUs; pygpu.system starts
    afresh (and again after the test)."""

    def install(gpus, **kw):
        m = fakenvml.module(gpus, **kw)
        monkeypatch.setitem(sys.modules, "pynvml", m)
        system._reset()
        return m

    yield install
    system._reset()


def test_versions(nvml):
    m = nvml([fakenvml.gpu("GPU-" + U0)])
    assert system.driver_version() == "570.124.06"
    assert system.nvml_version() == "12.570.124.06"
    assert system.cuda_driver_version() == 12080
    # nvmlInit once, however many calls
    system.driver_version()
    assert m.calls.count("nvmlInit") == 1


def test_bytes_from_an_old_binding(nvml):
    nvml([fakenvml.gpu(b"GPU-" + U0.encode(), name=b"Old")], driver=b"535.1")
    assert system.driver_version() == "535.1"
    s = system.device(FakeDevice(U0, 0))
    assert s.name == "Old" and s.uuid == "GPU-" + U0


def test_matched_by_uuid_not_index(nvml):
    """CUDA_VISIBLE_DEVICES=2,0 in effect: pygpu's device 0 is NVML's GPU 2,
    pygpu's device 1 is NVML's GPU 0; NVML's GPU 1 is hidden from CUDA."""
    nvml(
        [
            fakenvml.gpu("GPU-" + U1, name="first", temperature=30),
            fakenvml.gpu("GPU-" + U2, name="second", temperature=31),
            fakenvml.gpu("GPU-" + U0.upper(), name="third", temperature=32),
        ]
    )
    s = system.device(FakeDevice(U0, 0))
    assert (s.name, s.nvml_index, s.ordinal, s.temperature) == ("third", 2, 0, 32)
    s = system.device(FakeDevice(U1, 1))
    assert (s.name, s.nvml_index, s.ordinal, s.temperature) == ("first", 0, 1, 30)


def test_every_figure(nvml):
    g = fakenvml.gpu(
        "GPU-" + U0,
        name="NVIDIA H200",
        memory=(150 << 30, 3 << 30),
        utilization=(88, 41),
        power=(345678, 700000),
        ecc=(1, 0),
        ecc_errors=(3, 1),
        processes=((11, 1 << 30), (12, (1 << 64) - 1)),
        graphics_processes=((13, None),),
        process_names={11: "trainer", 13: "Xorg"},
        nvlinks=(1, 0, 1),
    )
    nvml([g])
    s = system.device(FakeDevice(U0, 0))
    assert s.memory_total == 150 << 30 and s.memory_used == 3 << 30
    assert s.memory_free == 147 << 30
    assert (s.utilization_gpu, s.utilization_memory) == (88, 41)
    assert (s.clock_graphics, s.clock_sm, s.clock_memory) == (1500, 1500, 2619)
    assert (s.clock_sm_max, s.clock_memory_max) == (1980, 2619)
    assert s.temperature == 41
    assert s.power_draw == pytest.approx(345.678) and s.power_limit == 700.0
    assert s.performance_state == 0
    assert (s.ecc_enabled, s.ecc_pending) == (True, False)
    assert (s.ecc_errors_corrected, s.ecc_errors_uncorrected) == (3, 1)
    assert (s.mig_enabled, s.mig_pending, s.mig_devices) == (False, False, ())
    assert s.processes == (
        system.GpuProcess(pid=11, name="trainer", used_memory=1 << 30, kind="compute"),
        system.GpuProcess(pid=12, name=None, used_memory=None, kind="compute"),
        system.GpuProcess(pid=13, name="Xorg", used_memory=None, kind="graphics"),
    )
    assert [(n.link, n.active) for n in s.nvlinks] == [(0, True), (1, False), (2, True)]
    assert s.nvlinks[0].remote_pci_bus_id == "00000000:80:00.0"
    assert s.nvlinks[1].remote_pci_bus_id is None
    assert s.is_mig is False and s.pci_bus_id == g["bus_id"]
    # a snapshot: read-only
    with pytest.raises(AttributeError, match="snapshot"):
        s.temperature = 0
    with pytest.raises(AttributeError):
        s.processes[0].pid = 1


def test_not_supported_is_none(nvml):
    NS = fakenvml.NOT_SUPPORTED
    nvml(
        [
            fakenvml.gpu(
                "GPU-" + U0,
                utilization=NS,
                temperature=NS,
                power=fakenvml.Fail(fakenvml.NVML_ERROR_NO_PERMISSION),
                clocks={0: NS, 1: 1400, 2: NS},
                max_clocks=fakenvml.Fail(fakenvml.NVML_ERROR_FUNCTION_NOT_FOUND),
                pstate=NS,
                ecc=NS,
                mig=NS,
                processes=NS,
                graphics_processes=NS,
                nvlinks=NS,
            )
        ]
    )
    s = system.device(FakeDevice(U0, 0))
    for name in (
        "utilization_gpu",
        "utilization_memory",
        "temperature",
        "power_draw",
        "power_limit",
        "clock_graphics",
        "clock_memory",
        "clock_sm_max",
        "clock_memory_max",
        "performance_state",
        "ecc_enabled",
        "ecc_pending",
        "ecc_errors_corrected",
        "ecc_errors_uncorrected",
        "mig_enabled",
        "mig_pending",
        "processes",
        "nvlinks",
    ):
        assert getattr(s, name) is None, name
    assert s.clock_sm == 1400 and s.memory_total == 80 << 30
    text = repr(s)
    assert "n/a" in text and "Fake GPU" in text
    # an error that is not "not available" is raised, not hidden
    nvml([fakenvml.gpu("GPU-" + U0, temperature=fakenvml.Fail(fakenvml.NVML_ERROR_GPU_IS_LOST))])
    with pytest.raises(Exception, match="NVML error 15"):
        system.device(FakeDevice(U0, 0))


def test_temperature_from_the_call_the_driver_has(nvml):
    """nvmlDeviceGetTemperatureV where it answers; the older call where the
    binding lacks it or the driver does not know it."""
    ver = fakenvml.Fail(fakenvml.NVML_ERROR_FUNCTION_NOT_FOUND)
    nvml([fakenvml.gpu("GPU-" + U0, temperature=40, temperature_v=44)])
    assert system.device(FakeDevice(U0, 0)).temperature == 44
    m = nvml([fakenvml.gpu("GPU-" + U0, temperature=40, temperature_v=ver)])
    assert system.device(FakeDevice(U0, 0)).temperature == 40
    assert "nvmlDeviceGetTemperature" in m.calls
    nvml([fakenvml.gpu("GPU-" + U0, temperature=39)], temperature_v=False)
    assert system.device(FakeDevice(U0, 0)).temperature == 39
    lost = fakenvml.Fail(fakenvml.NVML_ERROR_GPU_IS_LOST)
    nvml([fakenvml.gpu("GPU-" + U0, temperature_v=lost)])
    with pytest.raises(Exception, match="NVML error 15"):
        system.device(FakeDevice(U0, 0))


def test_a_process_name_nvml_cannot_give(nvml):
    bad = fakenvml.Fail(fakenvml.NVML_ERROR_INVALID_ARGUMENT)
    nvml([fakenvml.gpu("GPU-" + U0, process_names={4242: bad})])
    (p,) = system.device(FakeDevice(U0, 0)).processes
    assert (p.pid, p.name, p.used_memory) == (4242, None, 512 << 20)


def test_mig_instances(nvml):
    """A GPU in MIG mode: its instances are listed, and a pygpu device that
    is a MIG instance (CUDA_VISIBLE_DEVICES=MIG-...) is matched by the
    instance's UUID, its memory the instance's, the rest its GPU's."""
    migs = (
        dict(uuid="MIG-" + U1, memory=(20 << 30, 1 << 20), gi=1, ci=0),
        dict(uuid="MIG-" + U2, memory=(40 << 30, 2 << 20), gi=2, ci=0),
    )
    nvml([fakenvml.gpu("GPU-" + U0, mig=(1, 1), migs=migs, temperature=55)])
    s = system.device(FakeDevice(U0, 0))
    assert s.mig_enabled is True and s.is_mig is False
    assert [(m.uuid, m.gpu_instance_id, m.memory_total) for m in s.mig_devices] == [
        ("MIG-" + U1, 1, 20 << 30),
        ("MIG-" + U2, 2, 40 << 30),
    ]
    m = system.device(FakeDevice(U2, 0))
    assert m.is_mig is True and m.uuid == "MIG-" + U2
    assert m.memory_total == 40 << 30 and m.temperature == 55 and m.nvml_index == 0
    assert "2 instances" in repr(s)


def test_an_unknown_device(nvml):
    nvml([fakenvml.gpu("GPU-" + U1)])
    with pytest.raises(LookupError, match="no GPU with UUID %s" % U0):
        system.device(FakeDevice(U0, 3))


def test_bad_device_argument(nvml):
    nvml([fakenvml.gpu("GPU-" + U0)])
    with pytest.raises(TypeError, match="pygpu Device or an int"):
        system.device("GPU-0")
    with pytest.raises(TypeError, match="not bool"):
        system.device(True)


def test_without_the_binding(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml fails
    system._reset()
    try:
        for f in (system.driver_version, system.nvml_version, system.device, system.devices):
            with pytest.raises(system.NVMLUnavailableError) as e:
                f()
            assert 'pip install "pygpu[nvml]"' in str(e.value)
            assert "nvidia-ml-py" in str(e.value)
            assert isinstance(e.value, ImportError) and isinstance(e.value, RuntimeError)
        assert system.report_lines()[0].startswith("system (pygpu.system): not available")
    finally:
        system._reset()


@pytest.mark.parametrize(
    "code, what",
    [
        (fakenvml.NVML_ERROR_LIBRARY_NOT_FOUND, "libnvidia-ml.so.1"),
        (fakenvml.NVML_ERROR_DRIVER_NOT_LOADED, "kernel driver is not loaded"),
    ],
)
def test_without_the_library(nvml, code, what):
    nvml([], init=code)
    with pytest.raises(system.NVMLUnavailableError, match=what) as e:
        system.driver_version()
    assert isinstance(e.value, RuntimeError)
    # not cached as started: asked again, the same error
    with pytest.raises(system.NVMLUnavailableError, match=what):
        system.nvml_version()


def test_rich_reprs(nvml):
    nvml([fakenvml.gpu("GPU-" + U0, name="A <b> GPU", processes=())])
    s = system.device(FakeDevice(U0, 0))
    html = s._repr_html_()
    assert html.startswith("<table>") and "A &lt;b&gt; GPU" in html and "A <b> GPU" not in html
    assert "41 C" in html and "processes" in html
    md = s._repr_markdown_()
    assert md.startswith("**A <b> GPU**") and "| temperature | 41 C |" in md
    assert "| processes | none |" in md
    assert "(pygpu device 0)" in repr(s) and "1.0 GiB used of 80.0 GiB" in repr(s)


def test_the_real_binding_imports():
    """nvidia-ml-py, where installed, has every function pygpu.system calls
    (nothing runs: no GPU is needed)."""
    pynvml = pytest.importorskip("pynvml")
    names = [n for n in dir(fakenvml.module([])) if n.startswith("nvml")]
    assert len(names) > 20
    for name in names:
        assert hasattr(pynvml, name), name
    assert issubclass(pynvml.NVMLError, Exception)


# ---- on the stand-in: pygpu's own devices and their UUIDs ----


@pytest.mark.standin
def test_devices_in_pygpu_order(standin, nvml):
    """The stand-in's two devices (UUIDs 0x40.. and 0x50..) against an NVML
    that lists them the other way round with a third, hidden GPU."""
    import pygpu.driver as cuda

    cuda.init()
    u = [str(cuda.Device(i).uuid) for i in range(cuda.Device.count())]
    assert u[:2] == [U0, U1]
    nvml(
        [
            fakenvml.gpu("GPU-" + U2, name="hidden"),
            fakenvml.gpu("GPU-" + U1, name="one"),
            fakenvml.gpu("GPU-" + U0, name="zero"),
        ]
    )
    got = system.devices()
    assert [(s.name, s.ordinal, s.nvml_index) for s in got] == [("zero", 0, 2), ("one", 1, 1)]
    assert got[1].device == cuda.Device(1)
    every = system.devices(all=True)
    assert [(s.name, s.ordinal, s.device) for s in every][2:] == [("hidden", None, None)]
    assert system.device(1).name == "one" and system.device(cuda.Device(0)).name == "zero"
    assert got[0].refresh().name == "zero"
    lines = system.report_lines()
    assert lines[0] == "NVML 12.570.124.06, driver 570.124.06"
    assert lines[1].startswith("  device 0: 1.0 GiB used of 80.0 GiB, 41 C, 123 W")


# ---- on a GPU: the figures agree with nvidia-smi ----

SMI_FIELDS = "uuid,memory.total,driver_version,temperature.gpu,power.draw,ecc.mode.current"


def _smi():
    exe = shutil.which("nvidia-smi")
    if exe is None:
        pytest.skip("nvidia-smi is not on PATH")
    out = subprocess.run(
        [exe, "--query-gpu=" + SMI_FIELDS, "--format=csv,noheader,nounits"],
        check=True,
        capture_output=True,
        text=True,
        timeout=60,
    ).stdout
    rows = [[c.strip() for c in r] for r in csv.reader(io.StringIO(out)) if r]
    return {r[0]: dict(zip(SMI_FIELDS.split(","), r)) for r in rows}


@pytest.mark.gpu
def test_agrees_with_nvidia_smi(ctx):
    pytest.importorskip("pynvml")
    system._reset()
    smi = _smi()
    statuses = system.devices()
    assert statuses, "no device"
    for s in statuses:
        assert s.device is not None
        if s.is_mig:  # nvidia-smi --query-gpu lists whole GPUs only
            continue
        assert s.uuid in smi, (s.uuid, list(smi))
        row = smi[s.uuid]
        assert system.driver_version() == row["driver_version"]
        # nvidia-smi prints MiB
        assert int(row["memory.total"]) in (s.memory_total >> 20, round(s.memory_total / (1 << 20)))
        assert 0 <= s.memory_used <= s.memory_total
        if row["temperature.gpu"] not in ("[N/A]", "N/A"):
            assert abs(s.temperature - int(row["temperature.gpu"])) <= 5
        if row["power.draw"] not in ("[N/A]", "N/A"):
            # drawn a moment apart: within 25% or 30 W
            smi_w = float(row["power.draw"])
            assert abs(s.power_draw - smi_w) <= max(30.0, 0.25 * smi_w), (s.power_draw, smi_w)
            assert s.power_limit is None or 0 < s.power_draw <= s.power_limit * 1.5
        if row["ecc.mode.current"] in ("Enabled", "Disabled"):
            assert s.ecc_enabled is (row["ecc.mode.current"] == "Enabled")
        assert s.name == s.device.name() or s.is_mig
        assert s.clock_sm_max is None or s.clock_sm_max > 0
    mine = system.device(ctx.device)
    # this process holds a context; NVML's pids are the host's (not this
    # container's), so only their form is checked
    if mine.processes is not None:
        assert all(
            isinstance(p.pid, int) and p.kind in ("compute", "graphics") for p in mine.processes
        )
    assert system.nvml_version().endswith(system.driver_version())
    assert "pygpu device" in repr(mine) and mine._repr_html_().startswith("<table>")


@pytest.mark.standin
def test_python_m_pygpu_shows_the_system(tmp_path):
    """python -m pygpu's system section, with the fake NVML as the pynvml
    the process imports, over the stand-in's two devices."""
    import os

    import fakecuda

    support = os.path.dirname(os.path.abspath(fakenvml.__file__))
    (tmp_path / "pynvml.py").write_text(
        "import sys\nsys.path.insert(0, %r)\nimport fakenvml\n"
        "sys.modules[__name__] = fakenvml.module([fakenvml.gpu('GPU-%s', name='one'), "
        "fakenvml.gpu('GPU-%s', name='zero', temperature=63)])\n" % (support, U1, U0)
    )
    env = dict(os.environ, PYGPU_LIBCUDA=fakecuda.build(), PYTHONPATH=str(tmp_path))
    r = subprocess.run(
        [sys.executable, "-m", "pygpu"], env=env, capture_output=True, text=True, timeout=300
    )
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    i = lines.index("NVML 12.570.124.06, driver 570.124.06")
    assert lines[i + 1].startswith(
        "  device 0: 1.0 GiB used of 80.0 GiB, 63 C, 123 W, GPU 37% busy"
    )
    assert lines[i + 2].startswith("  device 1: 1.0 GiB used of 80.0 GiB, 41 C")
    # without the binding: one line saying what to install
    (tmp_path / "pynvml.py").write_text("raise ImportError('no pynvml here')\n")
    r = subprocess.run(
        [sys.executable, "-m", "pygpu"], env=env, capture_output=True, text=True, timeout=300
    )
    assert r.returncode == 0, r.stderr
    assert any(
        ln.startswith("system (pygpu.system): not available") and 'pip install "pygpu[nvml]"' in ln
        for ln in r.stdout.splitlines()
    ), r.stdout
