"""A stand-in for libnccl.so.2 (tests/support/fakenccl.c) and its ctypes
control side, for pygpu.nccl's tests without a GPU.

    python3 tests/support/fakenccl.py build [PATH]    # prints the library's path
"""

import ctypes
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
SOURCE = os.path.join(HERE, "fakenccl.c")
DEFAULT_LIB = os.path.join(ROOT, "build", "standin", "libfakenccl.so")

# ncclDataType_t and ncclRedOp_t values (nccl.h)
INT8, UINT8, INT32, UINT32, INT64, UINT64, FLOAT16, FLOAT32, FLOAT64 = range(9)
SUM, PROD, MAX, MIN, AVG = range(5)


def build(out=DEFAULT_LIB):
    """Compile the stand-in at out unless it is newer than its source;
    returns its path."""
    if not os.path.exists(out) or os.path.getmtime(out) < os.path.getmtime(SOURCE):
        os.makedirs(os.path.dirname(out), exist_ok=True)
        tmp = "%s.%d.tmp" % (out, os.getpid())
        subprocess.run(
            [
                os.environ.get("CC", "cc"),
                "-O1",
                "-g",
                "-Wall",
                "-shared",
                "-fPIC",
                "-o",
                tmp,
                SOURCE,
            ],
            check=True,
        )
        os.replace(tmp, out)
    return out


def driver_entry(libcuda, name):
    """The address of the driver stand-in's entry point `name` (its
    cuGetProcAddress: the library exports no other names)."""
    get = ctypes.CDLL(libcuda).cuGetProcAddress_v2
    fn, status = ctypes.c_void_p(), ctypes.c_int()
    rc = get(name.encode(), ctypes.byref(fn), 13000, ctypes.c_uint64(0), ctypes.byref(status))
    assert rc == 0 and fn.value, "the driver stand-in has no %s" % name
    return fn.value


class Call(ctypes.Structure):
    _fields_ = [
        ("name", ctypes.c_char * 32),
        ("send", ctypes.c_void_p),
        ("recv", ctypes.c_void_p),
        ("count", ctypes.c_size_t),
        ("type", ctypes.c_int),
        ("op", ctypes.c_int),
        ("root", ctypes.c_int),
        ("comm", ctypes.c_void_p),
        ("stream", ctypes.c_void_p),
        ("group_depth", ctypes.c_int),
    ]


class FakeNccl:
    """The loaded stand-in (the same library pygpu opened: dlopen of one
    path gives one copy)."""

    def __init__(self, path):
        self.path = path
        self.lib = ctypes.CDLL(path)
        self.lib.fake_comm_new.restype = ctypes.c_void_p
        self.lib.fake_comm_new.argtypes = [ctypes.c_int] * 3
        self.lib.fake_comm_free.argtypes = [ctypes.c_void_p]
        self.lib.fake_set_peer.argtypes = [ctypes.c_void_p]
        self.lib.fake_fail.argtypes = [ctypes.c_int, ctypes.c_char_p]
        self.lib.fake_set_device.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
        self._comms = []

    def comm(self, nranks=2, rank=0, device=0):
        """A communicator's raw handle (an int) playing `rank` of `nranks`."""
        h = self.lib.fake_comm_new(nranks, rank, device)
        self._comms.append(h)
        return h

    def set_peer(self, ptr):
        """The other ranks' data: a device (= host) address, or 0."""
        self.lib.fake_set_peer(ptr)

    def set_device(self, libcuda, handle):
        """Every later call makes the context `handle` (an int; None: stop)
        current, as NCCL's cudaSetDevice does; `libcuda`: the driver
        stand-in's path (its cuCtxSetCurrent does it)."""
        if handle is None:
            self.lib.fake_set_device(None, None)
            return
        self.lib.fake_set_device(driver_entry(libcuda, "cuCtxSetCurrent"), handle)

    def set_device_hook(self, fn):
        """fn() runs inside every later call, the GIL released around the
        call as pygpu releases it (as another thread would run then);
        set_device(None, None) stops it."""
        hook = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p)(lambda _p: (fn(), 0)[1])
        self._hook = hook  # alive while installed
        self.lib.fake_set_device(ctypes.cast(hook, ctypes.c_void_p).value, None)

    def fail(self, code, message=""):
        self.lib.fake_fail(code, message.encode())

    @property
    def last(self):
        return Call.in_dll(self.lib, "fake_last")

    @property
    def ncalls(self):
        return ctypes.c_int.in_dll(self.lib, "fake_ncalls").value

    @property
    def group_calls(self):
        return ctypes.c_int.in_dll(self.lib, "fake_group_calls").value

    def sent(self, nbytes):
        return bytes((ctypes.c_ubyte * 4096).in_dll(self.lib, "fake_sent"))[:nbytes]

    def close(self):
        for h in self._comms:
            self.lib.fake_comm_free(h)
        self._comms = []


if __name__ == "__main__":
    if sys.argv[1:2] == ["build"] and len(sys.argv) <= 3:
        print(build(*sys.argv[2:3]))
    else:
        sys.exit("usage: python3 tests/support/fakenccl.py build [PATH]")
