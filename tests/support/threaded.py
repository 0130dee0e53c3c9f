"""A helper of the thread hammers (tests/arrays/test_gpu_stress.py,
tests/driver/test_driver_trust.py): run one body in several threads at once."""

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
