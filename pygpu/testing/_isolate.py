"""Fault isolation: after a sticky CUDA fault the session goes on in a fresh
process.

A sticky fault (CUDA_ERROR_ILLEGAL_ADDRESS, _LAUNCH_FAILED, a device-side
assert, ...) leaves the context unusable, and on recent GPUs the driver
refuses even a reset of the primary context: every later test in the process
would fail.  So:

1. Detection.  After each test's call, if pygpu loaded the driver: the
   test's own exception, when it is a pygpu error with a sticky code, and a
   probe of the current context (cuCtxSynchronize; against the driver
   stand-in its sticky state, which has no side effect).  Nothing is asked
   when the test did not load the driver, so CPU tests pay nothing.
2. The faulting test fails alone: its own error says what happened; a test
   that passed (it caught the error, or never synchronized) gets a teardown
   error naming the fault, unless it is marked sticky_fault.
3. The rest goes on in a fresh process.  From the next test on, this
   process (the pytest main process, or an xdist worker) runs nothing
   itself: it starts a child pytest with the same arguments and working
   directory (`-n0` added under xdist, its own --basetemp), which collects
   the same tests and then serves them one at a time: this process sends a
   node id (and the next one, so fixtures are torn down as usual), the child
   runs the normal test protocol and sends back every report, serialized by
   pytest's own pytest_report_to_serializable; this process logs them as its
   own (terminal, junitxml, -x, xdist's controller all see them).  A child
   that faults in turn reports it and exits; the next test gets a new child.
   A child that dies (a crash, a signal) fails the test it was running, and
   the next test gets a new child.  A child writes no report file of its
   own (--junitxml, from the command line or addopts): its reports reach
   the file through this process, which writes the whole session once.
"""

import json
import os
import subprocess
import sys
import tempfile

import pytest

from pygpu.testing import _markers

from pygpu.testing import standin as _standin

SERVE_ENV = "PYGPU_TESTING_SERVE"


def poisoned(config):
    """Why the process's driver is unusable (a str), or None."""
    iso = config.pluginmanager.get_plugin("pygpu-isolation")
    return iso.poisoned if iso is not None else None


def _sticky_error(exc):
    """'CUDA_ERROR_...: text' if exc is a pygpu error with a sticky code."""
    code = getattr(exc, "code", None)
    if code in _standin.STICKY_CODES and "pygpu._driver" in sys.modules:
        if isinstance(exc, sys.modules["pygpu._driver"].Error):
            return "%s (%s)" % (_standin.STICKY_CODES[code], str(exc).splitlines()[0])
    return None


def _probe():
    """The sticky fault the current context is in, or None; asks nothing of a
    process whose driver pygpu has not loaded."""
    drv = sys.modules.get("pygpu._driver")
    if drv is None or not drv._driver_loaded():
        return None
    if _standin.active():
        code = _standin.StandIn().sticky()
        if code:
            return "%s (the driver stand-in's injected sticky error)" % (
                _standin.STICKY_CODES.get(code, "CUresult %d" % code)
            )
        return None
    try:
        if drv.Context.get_current() is None:
            return None
        drv.Context.synchronize()
    except drv.Error as e:
        return _sticky_error(e)
    return None


class _Child:
    """A child pytest serving test ids over two pipes."""

    def __init__(self, config, number):
        r1, w1 = os.pipe()  # to the child
        r2, w2 = os.pipe()  # from the child
        env = dict(os.environ)
        env[SERVE_ENV] = "%d:%d" % (r1, w2)
        args = [sys.executable, "-m", "pytest"] + [str(a) for a in config.invocation_params.args]
        if config.pluginmanager.hasplugin("xdist"):
            args += ["-n", "0"]
        try:
            base = config._tmp_path_factory.getbasetemp()
            args.append("--basetemp=%s" % os.path.join(str(base), "pygpu-fresh-%d" % number))
        except Exception:  # no tmp_path plugin
            pass
        self.log = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(
            args,
            cwd=str(config.invocation_params.dir),
            env=env,
            pass_fds=(r1, w2),
            stdin=subprocess.DEVNULL,
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        os.close(r1)
        os.close(w2)
        self.tx = os.fdopen(w1, "w", buffering=1)
        self.rx = os.fdopen(r2, "r")

    def send(self, msg):
        try:
            self.tx.write(json.dumps(msg) + "\n")
            self.tx.flush()
            return True
        except OSError:  # the child is gone
            return False

    def recv(self):
        line = self.rx.readline()
        return json.loads(line) if line else None

    def output_tail(self, n=3000):
        self.log.seek(0)
        return self.log.read().decode("utf-8", "replace")[-n:]

    def close(self):
        self.send({"quit": True})
        for f in (self.tx, self.rx):
            try:
                f.close()
            except OSError:
                pass
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


class Isolation:
    """The plugin object (registered as 'pygpu-isolation')."""

    def __init__(self, config):
        self.config = config
        self.poisoned = None
        self.faults = 0
        self.children = 0
        self.child = None
        serve = os.environ.pop(SERVE_ENV, None)  # not for our own children
        self.serving = None
        if serve:
            r, w = (int(x) for x in serve.split(":"))
            self.serving = (os.fdopen(r, "r"), os.fdopen(w, "w", buffering=1))

    # -- detection --

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item, call):
        outcome = yield
        rep = outcome.get_result()
        if call.when == "call" and rep.failed:
            item._pygpu_call_failed = True
        if call.when == "call" and call.excinfo is not None and self.poisoned is None:
            why = _sticky_error(call.excinfo.value)
            if why:
                self._poison(why)
                item._pygpu_fault_reported = True
        if call.when == "teardown" and getattr(item, "_pygpu_fault_note", None):
            rep.sections.append(("pygpu fault isolation", item._pygpu_fault_note))

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_teardown(self, item, nextitem):
        fresh = None
        if self.poisoned is None:
            fresh = _probe()
            if fresh:
                self._poison(fresh)
        elif getattr(item, "_pygpu_fault_reported", False):
            fresh = self.poisoned
        outcome = yield
        if not fresh:
            return
        item._pygpu_fault_note = (
            "the CUDA context of this process is unusable after %s: the tests after this "
            "one run in a fresh process" % fresh
        )
        if getattr(item, "_pygpu_fault_reported", False):
            return  # the test failed with the fault itself
        if _markers.closest_marker(item, "sticky_fault") is not None:
            return
        passed_call = not getattr(item, "_pygpu_call_failed", False)
        if passed_call and outcome.excinfo is None:
            err = pytest.fail.Exception(
                "pygpu: the test left its CUDA context with a sticky fault, %s; the tests after "
                "it run in a fresh process (mark the test sticky_fault if that is on purpose)"
                % fresh,
                pytrace=False,
            )
            if hasattr(outcome, "force_exception"):
                outcome.force_exception(err)
            else:
                raise err

    def pytest_runtest_logreport(self, report):
        if self.serving is not None:
            data = self.config.hook.pytest_report_to_serializable(config=self.config, report=report)
            self._serve_send({"report": data})

    def _poison(self, why):
        self.poisoned = why
        self.faults += 1

    # -- the process that hands the rest over --

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_protocol(self, item, nextitem):
        if self.poisoned is None or self.serving is not None:
            return None
        ihook = item.ihook
        ihook.pytest_runtest_logstart(nodeid=item.nodeid, location=item.location)
        self._run_in_child(item, nextitem)
        ihook.pytest_runtest_logfinish(nodeid=item.nodeid, location=item.location)
        return True

    def _run_in_child(self, item, nextitem):
        if self.child is None:
            self.children += 1
            self.child = _Child(self.config, self.children)
        child = self.child
        phases = set()
        ok = child.send({"run": item.nodeid, "next": nextitem.nodeid if nextitem else None})
        while ok:
            msg = child.recv()
            if msg is None:
                break
            if "report" in msg:
                rep = self.config.hook.pytest_report_from_serializable(
                    config=self.config, data=msg["report"]
                )
                phases.add(rep.when)
                item.ihook.pytest_runtest_logreport(report=rep)
            elif "done" in msg:
                if msg.get("poisoned"):
                    self.faults += 1
                    child.close()
                    self.child = None
                return
        # the child died
        child.proc.wait()
        rc = child.proc.returncode
        tail = child.output_tail()
        child.close()
        self.child = None
        when = "teardown" if "call" in phases else "call" if "setup" in phases else "setup"
        from _pytest.reports import TestReport

        rep = TestReport(
            item.nodeid,
            item.location,
            {k: 1 for k in item.keywords},
            "failed",
            "pygpu fault isolation: the fresh process running this test died "
            "(exit status %s); the tests after it run in another one.\n"
            "Its last output:\n%s" % (rc, tail),
            when,
        )
        item.ihook.pytest_runtest_logreport(report=rep)

    # -- the child that serves tests --

    @pytest.hookimpl(trylast=True)
    def pytest_sessionstart(self, session):
        if self.serving is None:
            return
        # its reports go to the driving process, which logs them as its own:
        # a --junitxml of the child's would overwrite the session's file
        # with the tests after the fault only
        config = self.config
        try:
            from _pytest.junitxml import xml_key  # pytest 7+
        except ImportError:
            xml_key = None
        xml = config.stash.get(xml_key, None) if xml_key is not None else None
        if xml is not None:
            del config.stash[xml_key]
        else:
            xml = getattr(config, "_xml", None)  # older pytest
            if xml is not None:
                del config._xml
        if xml is not None and config.pluginmanager.is_registered(xml):
            config.pluginmanager.unregister(xml)

    def _serve_send(self, msg):
        try:
            self.serving[1].write(json.dumps(msg, default=repr) + "\n")
            self.serving[1].flush()
        except OSError:
            os._exit(3)  # the driving process is gone

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtestloop(self, session):
        if self.serving is None:
            return None
        if session.testsfailed and not session.config.option.continue_on_collection_errors:
            raise session.Interrupted("%d errors during collection" % session.testsfailed)
        items = {it.nodeid: it for it in session.items}
        while True:
            line = self.serving[0].readline()
            if not line:
                break
            msg = json.loads(line)
            if msg.get("quit"):
                break
            item = items.get(msg["run"])
            if item is None:
                from _pytest.reports import TestReport

                rep = TestReport(
                    msg["run"],
                    (msg["run"], None, msg["run"]),
                    {},
                    "failed",
                    "pygpu fault isolation: the fresh process did not collect this test",
                    "setup",
                )
                self.pytest_runtest_logreport(rep)
            else:
                nxt = items.get(msg["next"]) if msg.get("next") else None
                item.config.hook.pytest_runtest_protocol(item=item, nextitem=nxt)
            self._serve_send({"done": True, "poisoned": self.poisoned})
            if self.poisoned:
                break
        return True

    # -- end --

    def pytest_sessionfinish(self, session):
        if self.child is not None:
            self.child.close()
            self.child = None

    def pytest_terminal_summary(self, terminalreporter):
        if self.faults and self.serving is None:
            terminalreporter.write_sep(
                "-",
                "pygpu: %d sticky CUDA fault(s); the session went on in %d fresh "
                "process(es)" % (self.faults, self.children),
            )
