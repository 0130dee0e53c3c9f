"""Thread helpers of the tests: run one body in several threads at once
(the thread hammers: tests/arrays/test_gpu_stress.py,
tests/driver/test_driver_trust.py), and a thread that keeps its target's
result or exception for the test to read."""

import threading

import pygpu.driver as cuda


def run_in_threads(ctx, count, work):
    """Run work(tid) for tid in range(count), each in a thread of its own
    with `ctx` pushed (popped after); the main thread waits for them all and
    fails with every thread's exception, if any."""
    errors = []

    def run(tid):
        try:
            ctx.push()
            work(tid)
        except BaseException as e:  # reported by the main thread
            errors.append((tid, e))
        finally:
            cuda.Context.pop()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


class Thread(threading.Thread):
    """A daemon thread running fn(); .result is what it returned, .error
    what it raised (None if nothing)."""

    def __init__(self, fn):
        super().__init__(daemon=True)
        self.fn, self.result, self.error = fn, None, None

    def run(self):
        try:
            self.result = self.fn()
        except BaseException as e:  # noqa: B036 - handed to the test
            self.error = e
