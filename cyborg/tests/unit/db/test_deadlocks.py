"""Transactions the database aborted for a deadlock: tried again, and
counted for the conductor's metrics."""
import pytest
from oslo_db import exception as db_exc
from prometheus_client import registry as prom_registry

from cyborg.conductor import metrics as conductor_metrics
from cyborg.db.api import deadlocks


@pytest.fixture
def counts(monkeypatch) -> deadlocks.Counts:
    """A count of this test's own, and no wait between tries."""
    fresh = deadlocks.Counts()
    monkeypatch.setattr(deadlocks, 'counts', fresh)
    monkeypatch.setattr(deadlocks, 'FIRST_WAIT', 0)
    return fresh


def _aborting(times: int):
    calls = []

    @deadlocks.retry_on_deadlock
    def take_handle(value: str) -> str:
        calls.append(value)
        if len(calls) <= times:
            raise db_exc.DBDeadlock()
        return value

    return take_handle, calls


def test_aborted_transactions_are_tried_again_and_counted(counts):
    take_handle, calls = _aborting(3)
    assert take_handle('h1') == 'h1'
    assert calls == ['h1'] * 4
    assert counts.snapshot() == {('take_handle', 'retried'): 3}


def test_gives_up_after_the_retries(counts):
    take_handle, calls = _aborting(deadlocks.RETRIES + 1)
    with pytest.raises(db_exc.DBDeadlock):
        take_handle('h1')
    assert len(calls) == deadlocks.RETRIES + 1
    assert counts.snapshot() == {
        ('take_handle', 'retried'): deadlocks.RETRIES,
        ('take_handle', 'failed'): 1}


def test_other_errors_are_not_retried(counts):
    @deadlocks.retry_on_deadlock
    def broken() -> None:
        calls.append(1)
        raise db_exc.DBDuplicateEntry()

    calls: list[int] = []
    with pytest.raises(db_exc.DBDuplicateEntry):
        broken()
    assert calls == [1]
    assert counts.snapshot() == {}


def test_conductor_serves_the_count(counts):
    take_handle, _ = _aborting(2)
    take_handle('h1')
    registry = prom_registry.CollectorRegistry()
    registry.register(conductor_metrics.DeadlockCollector())
    assert registry.get_sample_value(
        'cyborg_db_deadlocks_total',
        {'transaction': 'take_handle', 'outcome': 'retried'}) == 2
    # Served at 0 before any: every transaction wrapped, both outcomes.
    assert registry.get_sample_value(
        'cyborg_db_deadlocks_total',
        {'transaction': 'take_handle', 'outcome': 'failed'}) == 0
    assert registry.get_sample_value(
        'cyborg_db_deadlocks_total',
        {'transaction': 'heartbeat_many', 'outcome': 'retried'}) == 0
