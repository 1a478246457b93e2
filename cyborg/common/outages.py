"""What this process cannot reach: one warning when an outage starts, one
line when it ends, and the state its health probe reports.

A periodic task or an RPC handler that meets an unreachable database or
broker fails on every pass or call, every few seconds, as long as the
outage lasts; a traceback each time (53 frames for a lost MariaDB
connection) buries what an operator needs, which is when it started and
when it ended. So a failure that ``kind_of`` recognises as an outage
goes to ``tracker`` instead of being logged: the first one of its kind
logs a WARNING, the next ones a DEBUG line, and the first success of a
task that proves the kind reachable (``ended``) logs one INFO line. Any
other exception is a bug and keeps its traceback.
"""
import dataclasses
import logging
import re
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import oslo_messaging as messaging
from kombu import exceptions as kombu_exceptions

from cyborg.common import exception

LOG = logging.getLogger(__name__)

# The kinds of outage: the process's database (conductors, the API), the
# message broker, the services it calls (an agent's conductors, a
# conductor's agents), which may answer no call while the broker works,
# and Keystone's limits (told by cyborg.conductor.limits).
DATABASE = 'database'
BUS = 'message bus'
PEER = 'RPC peer'
# Keystone, where a conductor reads project limits ([quota] driver).
KEYSTONE = 'identity service'

# oslo.db's names for "cannot connect, or lost the connection" (MariaDB
# 2002/2003/2006/2013, PostgreSQL disconnects), and for a database that is
# not there (SQLite: "unable to open database file"), and cyborg's own.
# Looked up in the modules this process loaded (``_loaded``): an agent
# never loads the database layer (test_import_boundaries), and none of
# its errors can reach it but as a conductor's RemoteError.
_DB_DOWN_NAMES = frozenset(('DBConnectionError', 'DBNonExistentDatabase',
                            'DatabaseUnavailable'))

# The same, said by the drivers, for OperationalErrors that arrive without
# oslo.db's translation (another engine, a DBError wrapping the driver's
# error, or a conductor's RemoteError).
_NO_SERVER = re.compile(
    r"can't connect|gone away|lost connection|connection refused|"
    r'could not connect|connection to server .* failed|'
    r'closed the connection|terminating connection|database system is|'
    r'unable to open database file', re.IGNORECASE)

# What a driver raises when it cannot send to the broker: oslo.messaging's
# own, and kombu's when a new pooled connection cannot be made.
_BUS_DOWN = (messaging.MessageDeliveryFailure,
             kombu_exceptions.OperationalError,
             exception.MessageBusUnreachable)
# What a call raises when the broker took it and no server answered.
_NO_ANSWER = (messaging.MessagingTimeout, messaging.MessageUndeliverable,
              exception.CallExpired)

# What sending on a connection the broker closed raises in py-amqp (its
# transport's "Server unexpectedly closed connection" is an OSError; kombu
# re-exports amqp's ConnectionError, RecoverableConnectionError's base),
# for ``LostReplies``; an OSError anywhere else says nothing of the broker.
_SEND_LOST = (OSError, kombu_exceptions.ConnectionError)
# oslo.messaging's RPC server logs this, with the traceback, when a
# handler's answer cannot be sent (rpc/server.py, _process_incoming).
_REPLY_LOGGER = 'oslo_messaging.rpc.server'
_REPLY_LOST = 'Can not send reply'

# How many causes ``kind_of`` follows: cyborg's ServiceUnavailable from
# rpc.call's MessagingTimeout, oslo.db's DBError from the driver's error.
_CHAIN = 4
# Characters of an error kept in a log line and in the probe's answer.
_ERROR_CHARS = 200


def _loaded(module: str, name: str) -> Any:
    """Class ``name`` of ``module`` if this process imported it, else
    None."""
    found = sys.modules.get(module)
    return getattr(found, name) if found is not None else None


def database_down(error: BaseException) -> bool:
    """Whether ``error`` says the database cannot be reached."""
    if isinstance(error, messaging.RemoteError):
        # Raised in a conductor; oslo_db's classes are not rebuilt here.
        return error.exc_type in _DB_DOWN_NAMES or (
            error.exc_type in ('OperationalError', 'DBError')
            and bool(_NO_SERVER.search(error.value or '')))
    if isinstance(error, exception.DatabaseUnavailable):
        return True
    db_error = _loaded('oslo_db.exception', 'DBError')
    if db_error is not None and isinstance(error, db_error):
        if any(cls.__name__ in _DB_DOWN_NAMES
               for cls in type(error).__mro__):
            return True
        deadlock = _loaded('oslo_db.exception', 'DBDeadlock')
        inner = error.inner_exception
        return (not isinstance(error, deadlock) and inner is not None
                and database_down(inner))
    operational = _loaded('sqlalchemy.exc', 'OperationalError')
    return operational is not None and isinstance(error, operational) and (
        bool(getattr(error, 'connection_invalidated', False))
        or bool(_NO_SERVER.search(str(error))))


def _causes(error: BaseException) -> Iterator[BaseException]:
    found: BaseException | None = error
    for _ in range(_CHAIN):
        if found is None:
            return
        yield found
        found = found.__cause__ or found.__context__


def kind_of(error: BaseException) -> str | None:
    """The kind of outage ``error`` (or what caused it) says this process
    is in; None when it says nothing of the kind (a bug)."""
    for cause in _causes(error):
        if database_down(cause):
            return DATABASE
        if isinstance(cause, _BUS_DOWN):
            return BUS
        if isinstance(cause, _NO_ANSWER):
            return PEER
    return None


def describe(error: BaseException) -> str:
    """``error`` in one short line, for a log line or the probe."""
    text = ' '.join(str(error).split())
    if len(text) > _ERROR_CHARS:
        text = text[:_ERROR_CHARS] + '...'
    return f'{type(error).__name__}: {text}' if text else type(
        error).__name__


@dataclasses.dataclass
class Outage:
    """An outage under way: since when, how often it was met, the last
    error that said so."""

    kind: str
    # time.time() of the first failure, for the probe's answer.
    since: float
    # time.monotonic() of the same, for durations.
    started: float
    failures: int
    error: str


class Tracker:
    """The outages of one process, by kind."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._outages: dict[str, Outage] = {}

    def failed(self, kind: str, error: BaseException, where: str) -> None:
        """``where`` (a task, an RPC method) met an outage of ``kind``."""
        text = describe(error)
        with self._lock:
            outage = self._outages.get(kind)
            if outage is not None:
                outage.failures += 1
                outage.error = text
            else:
                self._outages[kind] = Outage(kind, time.time(),
                                             time.monotonic(), 1, text)
        if outage is not None:
            LOG.debug('%s: the %s is still unreachable (%s)', where, kind,
                      text)
            return
        LOG.warning('The %s cannot be reached (%s, met by %s); what needs '
                    'it fails until it is back, which is logged once.',
                    kind, text, where)

    def ended(self, kind: str) -> None:
        """Something that needs ``kind`` succeeded: its outage is over."""
        with self._lock:
            outage = self._outages.pop(kind, None)
        if outage is not None:
            LOG.info('The %s can be reached again, after %.0f s and %d '
                     'failed attempts.', kind,
                     time.monotonic() - outage.started, outage.failures)

    def handled(self, error: BaseException, where: str) -> bool:
        """Record ``error`` met by ``where`` if it is an outage; whether
        it was one (False: a bug, for the caller to log)."""
        kind = kind_of(error)
        if kind is None:
            return False
        self.failed(kind, error, where)
        return True

    def current(self) -> dict[str, Outage]:
        """The outages under way, by kind (copies)."""
        with self._lock:
            return {kind: dataclasses.replace(outage)
                    for kind, outage in self._outages.items()}

    def clear(self) -> None:
        """Forget every outage (a process that starts anew, a test)."""
        with self._lock:
            self._outages.clear()


# The process's outages: its tasks, its RPC server and its probe share them.
tracker = Tracker()


class LostReplies(logging.Filter):
    """Replies the broker took away with it, told to ``tracker``.

    When the broker goes while a handler's answer is being sent,
    oslo.messaging logs an ERROR with a 40-line traceback for that reply
    (for each of the replies in flight then); the caller gets no answer
    and retries after its timeout, as for any message lost in an outage.
    Such a record becomes a failure of the message bus, logged once with
    the outage; one whose error is not a lost connection is kept.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        if error is None or not str(record.msg).startswith(_REPLY_LOST):
            return True
        if not any(isinstance(cause, _SEND_LOST) or kind_of(cause) == BUS
                   for cause in _causes(error)):
            return True
        tracker.failed(BUS, error, 'a reply to an RPC call')
        return False


def watch_lost_replies() -> None:
    """Have oslo.messaging's RPC server tell lost replies to
    ``tracker`` (once per process, however often it is called)."""
    logger = logging.getLogger(_REPLY_LOGGER)
    if not any(isinstance(found, LostReplies) for found in logger.filters):
        logger.addFilter(LostReplies())
