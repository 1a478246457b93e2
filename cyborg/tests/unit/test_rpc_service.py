"""Periodic tasks on oslo.service looping calls: timing, triggers, stop;
and the bound on an idle listener's poll that lets a server stop at once;
the bus probe's deadline of its own."""
import logging
import threading
import time
from collections.abc import Iterator

import pytest

from cyborg.common import exception
from cyborg.common import outages
from cyborg.common import rpc
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


def test_a_pass_that_fails_after_its_task_stopped_logs_no_traceback(
        caplog):
    # The process is going away: a pass that outlived stop()'s grace
    # fails on what stop's caller tore down next (rpc.cleanup() leaves a
    # bus ping no connection pool: AttributeError).
    passes = Passes(fail=True)
    task = rpc_service.PeriodicTask('late', passes, 3600)
    passes.release.clear()
    caplog.set_level(logging.DEBUG, logger=rpc_service.__name__)
    task.start()
    wait_for(lambda: passes.running == 1, 'a pass under way')
    task.stop(grace=0)
    passes.release.set()
    wait_for(lambda: passes.running == 0, 'the pass to end')
    wait_for(lambda: any('late' in r.getMessage() for r in caplog.records),
             'the pass\'s log line')
    [line] = [r for r in caplog.records if 'late' in r.getMessage()]
    assert line.levelno == logging.DEBUG
    assert line.exc_info is None
    assert 'this pass fails' in line.getMessage()
    assert task.last_error is None


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


class Pings:
    """``rpc.call`` for the bus probe: each call waits until ``answer``
    is set (as the first call of a process does while oslo.messaging
    declares its reply queue with the broker away), then raises ``error``
    if there is one."""

    def __init__(self, error: Exception | None = None) -> None:
        self.error = error
        self.calls = 0
        self.answer = threading.Event()

    def __call__(self, client, context, version, method, **kwargs):
        self.calls += 1
        assert (method, kwargs['server']) == ('ping', 'host-1')
        self.answer.wait(10)
        if self.error is not None:
            raise self.error
        return True


@pytest.fixture
def pings(monkeypatch) -> Iterator[Pings]:
    monkeypatch.setattr(rpc_service, 'PING_TIMEOUT', 0.1)
    monkeypatch.setattr(rpc_service, 'PING_SLACK', 0.05)
    monkeypatch.setattr(rpc, 'get_client', lambda target: target)
    found = Pings()
    monkeypatch.setattr(rpc, 'call', found)
    outages.tracker.clear()
    yield found
    found.answer.set()
    outages.tracker.clear()


def test_a_ping_still_under_way_is_an_outage_and_is_not_sent_twice(pings):
    task = rpc_service.bus_probe('topic-1', 'host-1', 3600)
    task.run()
    [outage] = outages.tracker.current().values()
    assert outage.kind == outages.BUS
    assert 'has not come back' in outage.error
    task.run()
    assert (pings.calls, outages.tracker.current()[outages.BUS].failures) \
        == (1, 2)
    pings.answer.set()
    # The call comes back: the pass waiting for it ends the outage, and
    # the next pass sends a new one.
    wait_for(lambda: (task.run(), not outages.tracker.current())[1],
             'the outage to end')
    assert pings.calls == 1
    task.run()
    assert pings.calls == 2


def test_a_ping_that_fails_in_time_reports_its_own_error(pings):
    pings.error = exception.MessageBusUnreachable(reason='not sent')
    pings.answer.set()
    rpc_service.bus_probe('topic-1', 'host-1', 3600).run()
    [outage] = outages.tracker.current().values()
    assert (outage.kind, outage.failures) == (outages.BUS, 1)
    assert 'not sent' in outage.error
