"""The /healthcheck backends: the cache every check goes through, and the
database and message bus checks against a real SQLite database and a real
RabbitMQ (or a port where nothing listens)."""
import logging
import threading

import pytest
from oslo_config import cfg

from cyborg.api import health_backends
from cyborg.common import outages
from cyborg.common import rpc
from cyborg.conf import healthcheck
from cyborg.tests import conftest
from cyborg.tests import utils
from cyborg.tests.harness import gate_stack


def test_a_result_serves_until_it_is_older_than_the_ttl():
    clock = utils.Clock(100.0)
    calls = []
    check = health_backends.CachedCheck(
        'database', lambda: calls.append(1) or 'mysql', 5.0, clock)
    first = check()
    assert (first.available, first.reason) == (True, 'OK')
    assert first.details == 'database OK: mysql (0.0 s ago)'
    clock.now += 4.9
    assert check().details == 'database OK: mysql (4.9 s ago)'
    assert len(calls) == 1
    clock.now += 0.1
    assert check().details == 'database OK: mysql (0.0 s ago)'
    assert len(calls) == 2


def test_a_failure_is_unavailable_and_logged_once_per_outage(caplog):
    caplog.set_level(logging.INFO, outages.__name__)
    clock = utils.Clock(100.0)
    up = [False]

    def reach() -> str:
        if not up[0]:
            raise ConnectionRefusedError(111, 'Connection refused')
        return 'RabbitMQ at 127.0.0.1:5672'

    outages.tracker.clear()
    check = health_backends.CachedCheck(outages.BUS, reach, 0.0, clock)
    for _ in range(3):
        down = check()
    assert (down.available, down.reason) == (False,
                                             'MESSAGE BUS UNREACHABLE')
    assert down.details.startswith(
        'message bus unreachable: ConnectionRefusedError')
    up[0] = True
    assert check().available
    messages = [(r.levelname, r.getMessage()) for r in caplog.records
                if r.name == outages.__name__ and r.levelno >= logging.INFO]
    assert [level for level, _ in messages] == ['WARNING', 'INFO']
    assert messages[0][1].startswith(
        'The message bus cannot be reached (ConnectionRefusedError')
    assert 'met by the health check' in messages[0][1]
    assert messages[1][1].startswith(
        'The message bus can be reached again, after 0 s and 3 failed')


def test_a_request_during_a_check_gets_the_last_result():
    """While one thread waits on a hung database, the others answer the
    last result at once instead of queueing behind it."""
    clock = utils.Clock(100.0)
    entered, release = threading.Event(), threading.Event()
    results = iter(['first', 'second'])

    def slow() -> str:
        value = next(results)
        if value == 'second':
            entered.set()
            assert release.wait(10)
        return value

    check = health_backends.CachedCheck('database', slow, 1.0, clock)
    assert check().details.startswith('database OK: first')
    clock.now += 2
    waiting = threading.Thread(target=check)
    waiting.start()
    assert entered.wait(10)
    try:
        assert check().details == 'database OK: first (2.0 s ago)'
    finally:
        release.set()
        waiting.join(10)
    assert check().details == 'database OK: second (0.0 s ago)'


def _conf() -> cfg.ConfigOpts:
    conf = cfg.ConfigOpts()
    healthcheck.register_opts(conf)
    conf([])
    return conf


@pytest.fixture
def transport():
    conf = _conf()

    def init(url: str) -> cfg.ConfigOpts:
        rpc.init(conf, url=url)
        return conf

    yield init
    rpc.cleanup()


def test_the_bus_check_reaches_rabbitmq(transport):
    if not utils.port_open(conftest.RABBIT_URL, 5672):
        conftest.unavailable('RabbitMQ',
                             f'nothing listens at {conftest.RABBIT_URL}')
    conf = transport(conftest.RABBIT_URL)
    result = health_backends.MessageBusCheck(conf, {}).healthcheck(6666)
    assert result.available, result.details
    assert result.details.startswith('message bus OK: RabbitMQ at ')


def test_the_bus_check_fails_at_once_where_nothing_listens(transport):
    port = gate_stack.free_port()
    conf = transport(f'rabbit://guest:guest@127.0.0.1:{port}/')
    result = health_backends.MessageBusCheck(conf, {}).healthcheck(6666)
    assert (result.available, result.reason) == (
        False, 'MESSAGE BUS UNREACHABLE')
    assert 'OperationalError' in result.details


def test_the_in_process_bus_has_no_broker(transport):
    conf = transport('fake://')
    result = health_backends.MessageBusCheck(conf, {}).healthcheck(6666)
    assert result.available
    assert 'the fake driver' in result.details


def test_the_database_check(sqlite_engine):
    conf = _conf()
    result = health_backends.DatabaseCheck(conf, {}).healthcheck(6666)
    assert result.available
    assert result.details.startswith('database OK: sqlite')
