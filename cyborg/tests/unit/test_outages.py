"""Outages told apart from bugs, and logged once when they start and once
when they end, by periodic tasks and RPC handlers."""
import logging
from collections.abc import Iterator
from typing import Any

import oslo_messaging as messaging
import pytest
import sqlalchemy as sa
from amqp import exceptions as amqp_exceptions
from kombu import exceptions as kombu_exceptions
from oslo_db import exception as db_exc

from cyborg.common import exception
from cyborg.common import outages
from cyborg.common import rpc
from cyborg.common import rpc_service
from cyborg.tests.utils import wait_for

# What MariaDB's driver says when the server goes away mid-query.
GONE = sa.exc.OperationalError(
    'SELECT 1', {}, Exception(2013, 'Lost connection to server during '
                                    'query'))


def _raised(error: BaseException, cause: BaseException) -> BaseException:
    """``error`` raised from ``cause``, as ``raise error from cause``."""
    try:
        try:
            raise cause
        except BaseException as inner:
            raise error from inner
    except BaseException as outer:
        return outer


@pytest.fixture(autouse=True)
def tracker() -> Iterator[outages.Tracker]:
    outages.tracker.clear()
    yield outages.tracker
    outages.tracker.clear()


@pytest.mark.parametrize('error, kind', [
    (db_exc.DBConnectionError(GONE), outages.DATABASE),
    # oslo.db wraps an error it did not translate.
    (db_exc.DBError(GONE), outages.DATABASE),
    (GONE, outages.DATABASE),
    (exception.DatabaseUnavailable(), outages.DATABASE),
    # Raised in a conductor, as a caller sees it.
    (messaging.RemoteError('DBConnectionError', 'gone'), outages.DATABASE),
    (messaging.MessageDeliveryFailure('no broker'), outages.BUS),
    (kombu_exceptions.OperationalError('[Errno 111] refused'), outages.BUS),
    (_raised(exception.ServiceUnavailable(reason='not sent'),
             messaging.MessageDeliveryFailure('no broker')), outages.BUS),
    (_raised(exception.ServiceUnavailable(reason='no answer'),
             messaging.MessagingTimeout('60 s')), outages.PEER),
    (exception.MessageBusUnreachable(reason='no answer'), outages.BUS),
    # Bugs, whatever the words.
    (db_exc.DBDeadlock(GONE), None),
    (db_exc.DBDuplicateEntry(), None),
    (sa.exc.OperationalError('SELECT', {}, Exception('no such table')),
     None),
    (messaging.RemoteError('KeyError', 'x'), None),
    (KeyError('connection refused'), None),
])
def test_kind_of(error, kind):
    assert outages.kind_of(error) == kind


def test_one_warning_per_outage_and_one_line_when_it_ends(tracker, caplog):
    caplog.set_level(logging.DEBUG, logger='cyborg.common.outages')
    refused = db_exc.DBConnectionError('(2003, "Can\'t connect")')
    for where in ('task a', 'task b', 'RPC call c'):
        tracker.failed(outages.DATABASE, refused, where)
    tracker.ended(outages.BUS)
    [outage] = tracker.current().values()
    assert (outage.kind, outage.failures) == (outages.DATABASE, 3)
    tracker.ended(outages.DATABASE)
    tracker.ended(outages.DATABASE)
    assert tracker.current() == {}
    lines = [(r.levelname, r.getMessage()) for r in caplog.records]
    assert lines[0] == ('WARNING', (
        'The database cannot be reached (DBConnectionError: (2003, '
        '"Can\'t connect"), met by task a); what needs it fails until it '
        'is back, which is logged once.'))
    assert [level for level, _ in lines] == ['WARNING', 'DEBUG', 'DEBUG',
                                             'INFO']
    assert lines[-1][1].startswith('The database can be reached again, '
                                   'after 0 s and 3 failed attempts.')


class Flaky:
    """A pass that raises what ``errors`` holds, then succeeds."""

    def __init__(self, *errors: BaseException) -> None:
        self.errors = list(errors)
        self.passes = 0

    def __call__(self) -> None:
        self.passes += 1
        if self.errors:
            raise self.errors.pop(0)


def _records(caplog) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name.startswith('cyborg')
            and r.levelno >= logging.INFO]


def test_a_task_in_an_outage_logs_no_traceback(caplog):
    caplog.set_level(logging.INFO)
    flaky = Flaky(*[db_exc.DBConnectionError(GONE)] * 3)
    task = rpc_service.PeriodicTask('writer', flaky, 0.01)
    task.start()
    try:
        wait_for(lambda: flaky.passes >= 5, 'five passes')
    finally:
        task.stop()
    records = _records(caplog)
    assert [r.levelname for r in records] == ['WARNING', 'INFO'], [
        r.getMessage() for r in records]
    assert not any(r.exc_info for r in records)
    assert 'met by periodic task writer' in records[0].getMessage()
    assert task.last_error is None


def test_a_task_that_restores_a_kind_ends_an_outage_others_met(caplog):
    caplog.set_level(logging.INFO)
    outages.tracker.failed(outages.DATABASE, GONE, 'RPC call x')
    task = rpc_service.PeriodicTask('heartbeat', lambda: None, 3600,
                                    restores=(outages.DATABASE,))
    task.run()
    assert outages.tracker.current() == {}
    assert [r.levelname for r in _records(caplog)] == ['WARNING', 'INFO']


def test_a_bug_keeps_its_traceback_and_is_the_task_s_last_error(caplog):
    flaky = Flaky(KeyError('boom'))
    task = rpc_service.PeriodicTask('buggy', flaky, 3600)
    task.run()
    [record] = _records(caplog)
    assert record.levelname == 'ERROR'
    assert record.exc_info[0] is KeyError
    assert task.last_error == "KeyError: 'boom'"
    assert outages.tracker.current() == {}
    task.run()
    assert task.last_error is None


class _Incoming:
    """A ping as oslo.messaging's RPC server receives one, whose reply
    raises ``error`` (the broker closed the connection meanwhile)."""

    ctxt: dict[str, Any] = {}
    message = {'method': 'ping', 'args': {}, 'version': '1.0',
               'namespace': rpc_service.PING_NAMESPACE}
    msg_id = 'msg-1'
    client_timeout = None

    def __init__(self, error: BaseException) -> None:
        self.error = error

    def acknowledge(self) -> None:
        pass

    def reply(self, reply: Any = None, failure: Any = None) -> None:
        raise self.error


def _reply_fails(conf, error: BaseException) -> None:
    """oslo.messaging's RPC server handles a call whose reply raises
    ``error``, in a process that watches lost replies."""
    outages.watch_lost_replies()
    outages.watch_lost_replies()
    rpc.init(conf, url='fake://')
    try:
        server = rpc.get_server(messaging.Target(topic='t', server='s'),
                                [rpc_service.PingEndpoint()])
        server._process_incoming([_Incoming(error)])
    finally:
        rpc.cleanup()


def _raised_in_context(error: BaseException,
                       context: BaseException) -> BaseException:
    """``error`` raised while handling ``context``."""
    try:
        try:
            raise context
        except BaseException:
            raise error  # noqa: B904 - as py-amqp raises it
    except BaseException as outer:
        return outer


@pytest.mark.parametrize('error', [
    # py-amqp's transport when the broker closed the socket, raised while
    # it looked up the channel it lost (amqp/connection.py, channel()).
    _raised_in_context(OSError('Server unexpectedly closed connection'),
                       KeyError(None)),
    amqp_exceptions.RecoverableConnectionError('connection already closed'),
    kombu_exceptions.OperationalError('[Errno 111] Connection refused'),
])
def test_a_reply_the_broker_took_away_is_an_outage(conf, caplog, error):
    caplog.set_level(logging.DEBUG)
    _reply_fails(conf, error)
    assert not [r for r in caplog.records if r.exc_info]
    [warned] = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert warned.name == 'cyborg.common.outages'
    assert 'met by a reply to an RPC call' in warned.getMessage()
    [outage] = outages.tracker.current().values()
    assert outage.kind == outages.BUS


def test_a_reply_that_fails_otherwise_keeps_its_traceback(conf, caplog):
    _reply_fails(conf, TypeError('Object of type set is not JSON '
                                 'serializable'))
    [record] = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert record.name == 'oslo_messaging.rpc.server'
    assert record.exc_info[0] is TypeError
    assert outages.tracker.current() == {}
