"""pygpu.nccl.bootstrap: ranks from MPI or from the environment cluster
launchers set, the unique id handed over TCP; and, on 2 GPUs, NCCL forced
onto its network transport (what several machines use) in two processes.

Without a GPU: every launcher's variables, each bad environment's error,
the id exchange between threads over loopback.  On 2 GPUs (``gpu``): two
processes started as torchrun would start them, with NCCL_P2P_DISABLE=1,
NCCL_SHM_DISABLE=1 and the loopback interface."""

import os
import socket
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest

from pygpu import nccl as pnccl

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ---- the environment ----


def test_torchrun_environment():
    env = {
        "RANK": "3",
        "WORLD_SIZE": "4",
        "LOCAL_RANK": "1",
        "MASTER_ADDR": "n0",
        "MASTER_PORT": "29500",
    }
    assert pnccl.launch_env(env) == {
        "rank": 3,
        "nranks": 4,
        "local_rank": 1,
        "addr": "n0",
        "port": 29500,
        "source": "torchrun",
    }


def test_open_mpi_mpich_and_slurm_environments():
    ompi = {
        "OMPI_COMM_WORLD_RANK": "5",
        "OMPI_COMM_WORLD_SIZE": "8",
        "OMPI_COMM_WORLD_LOCAL_RANK": "1",
    }
    e = pnccl.launch_env(ompi)
    assert (e["rank"], e["nranks"], e["local_rank"], e["addr"], e["source"]) == (
        5,
        8,
        1,
        None,
        "Open MPI",
    )
    e = pnccl.launch_env({"PMI_RANK": "2", "PMI_SIZE": "3", "MPI_LOCALRANKID": "0"})
    assert (e["rank"], e["nranks"], e["local_rank"], e["source"]) == (2, 3, 0, "MPICH/Hydra")
    slurm = {
        "SLURM_PROCID": "7",
        "SLURM_NTASKS": "16",
        "SLURM_LOCALID": "3",
        "SLURM_JOB_NODELIST": "gpu[03-04,07],cpu1",
        "SLURM_JOB_ID": "123456",
    }
    e = pnccl.launch_env(slurm)
    assert (e["rank"], e["nranks"], e["local_rank"], e["source"]) == (7, 16, 3, "Slurm")
    assert e["addr"] == "gpu03" and e["port"] == 29500 + 123456 % 10000
    slurm.update(MASTER_ADDR="head", MASTER_PORT="4000")
    e = pnccl.launch_env(slurm)
    assert (e["addr"], e["port"]) == ("head", 4000)
    # torchrun's variables come first where both are set
    assert pnccl.launch_env({**ompi, "RANK": "0", "WORLD_SIZE": "1"})["source"] == "torchrun"
    assert pnccl.launch_env({}) is None
    assert pnccl._first_host("cpu1,gpu[1-2]") == "cpu1"


@pytest.mark.parametrize(
    "env, message",
    [
        ({"RANK": "1"}, "RANK is set but WORLD_SIZE is not (torchrun's environment is incomplete)"),
        (
            {"OMPI_COMM_WORLD_SIZE": "2"},
            "OMPI_COMM_WORLD_SIZE is set but OMPI_COMM_WORLD_RANK is not (Open MPI's environment is incomplete)",
        ),
        ({"RANK": "one", "WORLD_SIZE": "2"}, "RANK='one' is not an integer (this process's rank)"),
        ({"RANK": "0", "WORLD_SIZE": "0"}, "WORLD_SIZE=0 must be at least 1 (the number of ranks)"),
        ({"RANK": "2", "WORLD_SIZE": "2"}, "RANK=2 is not a rank of WORLD_SIZE=2 (0 to 1)"),
        (
            {"SLURM_PROCID": "-1", "SLURM_NTASKS": "2"},
            "SLURM_PROCID=-1 must be at least 0 (this process's rank)",
        ),
        (
            {"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "h", "MASTER_PORT": "70000"},
            "MASTER_PORT=70000 is not a port",
        ),
        (
            {"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "h"},
            "MASTER_ADDR is set but MASTER_PORT is not",
        ),
        (
            {"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "x"},
            "LOCAL_RANK='x' is not an integer (the rank on this node)",
        ),
    ],
)
def test_a_bad_environment_names_the_variable(env, message):
    with pytest.raises(ValueError) as ei:
        pnccl.launch_env(env)
    assert str(ei.value) == "pygpu.nccl.bootstrap: " + message


def test_bootstrap_without_a_launcher_says_how_to_start_ranks():
    with pytest.raises(
        ValueError, match="pygpu.nccl.bootstrap: no launcher's environment: none of RANK/WORLD_SIZE"
    ):
        pnccl.bootstrap(environ={})


def test_bootstrap_under_mpirun_without_master_addr_or_mpi4py(monkeypatch):
    monkeypatch.setitem(sys.modules, "mpi4py", None)
    with pytest.raises(
        ValueError,
        match=r"Open MPI started 2 ranks but MASTER_ADDR is not set, and mpi4py is not "
        r"installed to share the id over MPI: set MASTER_ADDR",
    ):
        pnccl.bootstrap(environ={"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "2"})


def test_bootstrap_with_mpi_goes_through_from_mpi(monkeypatch):
    seen = []
    monkeypatch.setattr(
        pnccl, "from_mpi", lambda comm, device=None, stream=None: seen.append((comm, device)) or "c"
    )
    assert pnccl.bootstrap(mpi="COMM", device=1) == "c" and seen == [("COMM", 1)]


# ---- the id over TCP ----


def test_the_id_reaches_every_rank_over_loopback():
    port = _free_port()
    uid = np.random.default_rng().integers(0, 256, 128, dtype=np.uint8).tobytes()
    got = {}

    def rank(r):
        got[r] = pnccl.exchange_id(uid if r == 0 else None, r, 4, "127.0.0.1", port, timeout=30)

    threads = [threading.Thread(target=rank, args=(r,)) for r in (1, 2, 0, 3)]  # rank 0 not first
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert got == {0: uid, 1: uid, 2: uid, 3: uid}


def test_rank_0_skips_connections_that_are_not_ranks():
    """A port probe that closes at once, one that says nothing, one with
    another greeting and one claiming a rank that does not exist: rank 0
    skips each (the first ended its bootstrap with a ConnectionError before
    the fix) and still serves the real rank."""
    import struct

    port = _free_port()
    uid = np.random.default_rng().integers(0, 256, 128, dtype=np.uint8).tobytes()
    got = {}

    def rank0():
        try:
            got[0] = pnccl.exchange_id(uid, 0, 2, "127.0.0.1", port, timeout=60)
        except Exception as e:  # noqa: BLE001 - the test reads it
            got[0] = e

    t = threading.Thread(target=rank0)
    t.start()
    strays = []
    for _ in range(100):  # rank 0 listening
        try:
            socket.create_connection(("127.0.0.1", port), timeout=5).close()  # a probe
            break
        except OSError:
            threading.Event().wait(0.05)
    silent = socket.create_connection(("127.0.0.1", port), timeout=5)  # says nothing...
    strays.append(silent)
    other = socket.create_connection(("127.0.0.1", port), timeout=5)
    other.sendall(b"GET / HTTP/1.0\r\n\r\n")  # another protocol
    strays.append(other)
    silent.close()  # ... and closes
    bad = socket.create_connection(("127.0.0.1", port), timeout=5)
    bad.sendall(pnccl._MAGIC + struct.pack("!I", 7))  # no rank 7 of 2
    strays.append(bad)
    got[1] = pnccl.exchange_id(None, 1, 2, "127.0.0.1", port, timeout=30)
    t.join(60)
    for c in strays:
        c.close()
    assert got == {0: uid, 1: uid}


def test_rank_0_that_nobody_reaches_times_out_naming_the_missing_ranks():
    port = _free_port()
    with pytest.raises(
        TimeoutError, match=r"rank 0 waited 0.5 s on port %d; ranks \[1, 2\] did not connect" % port
    ):
        pnccl.exchange_id(bytes(128), 0, 3, "127.0.0.1", port, timeout=0.5)
    with pytest.raises(
        TimeoutError, match="rank 1 could not reach rank 0 at 127.0.0.1:%d in 0.5 s" % port
    ):
        pnccl.exchange_id(None, 1, 3, "127.0.0.1", port, timeout=0.5)
    with pytest.raises(ValueError, match="rank 0 needs the unique id's 128 bytes"):
        pnccl.exchange_id(b"short", 0, 2, "127.0.0.1", port)


# ---- two processes, NCCL on its network transport (2 GPUs) ----

RANK_MAIN = """
import sys
import numpy as np
from pygpu import gpuarray, nccl
comm = nccl.bootstrap()                       # RANK, WORLD_SIZE, MASTER_ADDR/PORT
comm.context.push()
rng = np.random.default_rng(int(sys.argv[1]) + comm.rank)
x = rng.standard_normal(1 << 18).astype(np.float32)
a = gpuarray.to_gpu(x)
comm.allreduce(a)
whole = gpuarray.empty(2 * x.size, np.float32)
comm.allgather(gpuarray.to_gpu(x), whole)
comm.synchronize()
np.save(sys.argv[2] + "/sum%d.npy" % comm.rank, a.get())
np.save(sys.argv[2] + "/x%d.npy" % comm.rank, x)
np.save(sys.argv[2] + "/whole%d.npy" % comm.rank, whole.get())
comm.destroy()
"""


@pytest.mark.gpu
def test_gpu_two_processes_over_the_network_transport(tmp_path):
    from pygpu import driver

    driver.init()
    if driver.Device.count() < 2:
        pytest.skip("needs 2 GPUs, %d visible" % driver.Device.count())
    pytest.importorskip("nccl.core", exc_type=ImportError)
    port = _free_port()
    seed = int(np.random.default_rng().integers(1 << 30))
    procs = []
    for r in range(2):
        env = dict(
            os.environ,
            RANK=str(r),
            WORLD_SIZE="2",
            LOCAL_RANK=str(r),
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT=str(port),
            NCCL_P2P_DISABLE="1",
            NCCL_SHM_DISABLE="1",
            NCCL_SOCKET_IFNAME="lo",
            NCCL_IB_DISABLE="1",
            NCCL_NVLS_ENABLE="0",
            NCCL_DEBUG="INFO",
        )
        procs.append(
            subprocess.Popen(
                [sys.executable, "-c", textwrap.dedent(RANK_MAIN), str(seed), str(tmp_path)],
                env=env,
                cwd=ROOT,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
        )
    outs = [p.communicate(timeout=300)[0] for p in procs]
    for r, (p, out) in enumerate(zip(procs, outs)):
        assert p.returncode == 0, "rank %d:\n%s" % (r, out[-4000:])
    # NCCL said it used its socket transport, not P2P or shared memory
    assert any("NET/Socket" in o for o in outs), outs[0][-4000:]
    xs = [np.load(tmp_path / ("x%d.npy" % r)) for r in range(2)]
    for r in range(2):
        np.testing.assert_allclose(np.load(tmp_path / ("sum%d.npy" % r)), xs[0] + xs[1], rtol=1e-6)
        np.testing.assert_array_equal(np.load(tmp_path / ("whole%d.npy" % r)), np.concatenate(xs))
