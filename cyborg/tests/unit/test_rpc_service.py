"""Periodic tasks on oslo.service looping calls: timing, triggers, stop;
and the bound on an idle listener's poll that lets a server stop at once."""
import logging
import threading
import time

from cyborg.common import rpc_service
from cyborg.tests.utils import wait_for


class Passes:
    """A pass that records when it ran and can be held while it runs."""

    def __init__(self, fail: bool = False) -> None:
        self.fail = fail
        self.started = 0
        self.running = 0
        self.most_at_once = 0
        self.release = threading.Event()
        self.release.set()
        self._lock = threading.Lock()

    def __call__(self) -> None:
        with self._lock:
            self.started += 1
            self.running += 1
            self.most_at_once = max(self.most_at_once, self.running)
        try:
            self.release.wait(10)
            if self.fail:
                raise RuntimeError('this pass fails')
        finally:
            with self._lock:
                self.running -= 1


def test_a_failed_pass_is_logged_and_the_task_goes_on(caplog):
    passes = Passes(fail=True)
    task = rpc_service.PeriodicTask('failing', passes, 0.05)
    task.start()
    try:
        wait_for(lambda: passes.started >= 3, 'three passes')
    finally:
        task.stop()
    failed = [r for r in caplog.records
              if r.levelno == logging.ERROR and 'failing' in r.getMessage()]
    assert len(failed) >= 2
    assert failed[0].exc_info[0] is RuntimeError


def test_triggers_during_a_pass_make_one_more_never_two_at_once():
    passes = Passes()
    task = rpc_service.PeriodicTask('report', passes, 3600)
    passes.release.clear()
    task.start()
    try:
        wait_for(lambda: passes.started == 1, 'the first pass')
        for _ in range(5):
            task.trigger()
        time.sleep(0.2)
        assert passes.started == 1
        passes.release.set()
        wait_for(lambda: passes.started == 2, 'one pass for the triggers')
        time.sleep(0.2)
        assert passes.started == 2
        task.trigger()
        wait_for(lambda: passes.started == 3, 'a pass for a later trigger')
    finally:
        task.stop()
    assert passes.most_at_once == 1


def test_stop_gives_a_pass_under_way_its_grace_only():
    passes = Passes()
    task = rpc_service.PeriodicTask('slow', passes, 3600)
    passes.release.clear()
    task.start()
    try:
        wait_for(lambda: passes.running == 1, 'a pass under way')
        started = time.monotonic()
        task.stop(grace=0.2)
        took = time.monotonic() - started
        assert 0.2 <= took < 2
        task.trigger()
    finally:
        passes.release.set()
    time.sleep(0.2)
    assert passes.started == 1


def test_stop_of_an_idle_task_returns_at_once():
    passes = Passes()
    task = rpc_service.PeriodicTask('idle', passes, 3600)
    task.start()
    wait_for(lambda: passes.started == 1 and passes.running == 0,
             'the first pass to end')
    started = time.monotonic()
    task.stop()
    assert time.monotonic() - started < 0.5


def test_next_delay_replaces_the_interval_when_it_answers():
    answers = iter([0.5, None])
    task = rpc_service.PeriodicTask('t', lambda: None, 7,
                                    next_delay=lambda: next(answers))
    assert task._tick() == 0.5
    assert task._tick() == 7
