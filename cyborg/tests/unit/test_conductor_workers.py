"""The conductor's worker pool stops with work that submits more work.

A handle's mdev removal, once its handle is freed, submits the handle's
clean to the same pool (``DeviceSide.free`` -> ``Cleaner.start``).
futurist's ``shutdown(wait=True)`` (3.4, 3.5) waits for its queue while
it holds the lock ``submit`` takes, so a stop that came while such work
ran used to wait for ever.
"""

import threading
import time

from cyborg.conductor import workers


def test_stop_runs_work_that_submits_more_and_returns():
    pool = workers.Workers(max_workers=2)
    stopping = threading.Event()
    ran: list[str] = []

    def second() -> None:
        ran.append('second')

    def first() -> None:
        stopping.wait(10)
        # Long enough for the stopping thread to be inside shutdown.
        time.sleep(0.2)
        pool.submit(second)
        ran.append('first')

    pool.submit(first)
    stopper = threading.Thread(target=pool.shutdown, daemon=True)
    stopping.set()
    stopper.start()
    # A deadlock detector, not a timing: the work takes 0.2 s.
    stopper.join(30)
    assert not stopper.is_alive(), 'shutdown waited for ever'
    assert ran == ['first', 'second']


def test_submit_after_stop_is_refused():
    pool = workers.Workers(max_workers=1)
    pool.shutdown()
    try:
        pool.submit(lambda: None)
    except RuntimeError:
        pass
    else:
        raise AssertionError('a stopped pool took work')
