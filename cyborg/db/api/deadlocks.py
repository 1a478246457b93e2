"""Deadlocks: transactions the database aborted, retried and counted.

On one MariaDB or PostgreSQL server a deadlock is rare: the transactions
that take attach handles lock rows in one order. On a Galera cluster
every node locks its own rows only, so two conductors writing through two
nodes may both take the same free handle; the second to commit fails the
cluster's certification, which MariaDB reports as a deadlock (error
1213, oslo.db's DBDeadlock), and so is a transaction a replicated write
aborts on its node ("wsrep aborted transaction", also 1213). Either way
nothing of it was written, and the whole transaction is tried again.

Each process counts what it retried and what it gave up on, by
transaction (``counts``); a conductor serves the count as
``cyborg_db_deadlocks_total``.
"""
import collections
import functools
import logging
import random
import threading
import time
from collections.abc import Callable
from typing import Any
from typing import TypeVar

from oslo_db import exception as db_exc

LOG = logging.getLogger(__name__)

# Tries after the first, as oslo.db's wrap_db_retry was given before.
# With the waits below a transaction waits at most 6.55 s in all (3.3 s
# on average) before it gives up: three conductors binding 2,000 requests
# through three Galera nodes to one deployable had 159-279 tries aborted
# and none given up; a conflict that outlasts 10 retries is a livelock to
# report, not to hide.
RETRIES = 10
# Seconds: the first wait is at most FIRST_WAIT, and each next one at most
# twice the last, never more than MAX_WAIT. The wait is random within that
# bound, so that transactions that collided do not collide again (as
# oslo.db's wrap_db_retry does for a deadlock).
FIRST_WAIT = 0.05
MAX_WAIT = 1.0
OUTCOMES = ('retried', 'failed')

F = TypeVar('F', bound=Callable[..., Any])


class Counts:
    """Deadlocks by (transaction, outcome) since the process started."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: collections.Counter[tuple[str, str]] = (
            collections.Counter())

    def add(self, transaction: str, outcome: str) -> None:
        with self._lock:
            self._counts[transaction, outcome] += 1

    def snapshot(self) -> dict[tuple[str, str], int]:
        with self._lock:
            return dict(self._counts)


counts = Counts()
# The name of every transaction ``retry_on_deadlock`` wraps, known once
# its module is imported: the metrics serve each at 0 from the start, so
# that rate() sees a first deadlock as an increase from 0, and a
# dashboard has series before any.
transactions: set[str] = set()


def retry_on_deadlock(func: F) -> F:
    """Call ``func`` again, after a short random wait, while the database
    aborts it for a deadlock, up to RETRIES times.

    Put it outside ``writer``, so that each try is a new transaction.
    """
    name = func.__name__
    transactions.add(name)

    @functools.wraps(func)
    def retried(*args: Any, **kwargs: Any) -> Any:
        bound = FIRST_WAIT
        for attempt in range(RETRIES + 1):
            try:
                return func(*args, **kwargs)
            except db_exc.DBDeadlock as exc:
                if attempt == RETRIES:
                    counts.add(name, 'failed')
                    LOG.warning('Transaction %s was aborted for a deadlock '
                                '%d times; giving up: %s', name,
                                attempt + 1, exc)
                    raise
                counts.add(name, 'retried')
                LOG.debug('Transaction %s was aborted for a deadlock '
                          '(try %d); retrying: %s', name, attempt + 1, exc)
                time.sleep(random.uniform(0, bound))
                bound = min(bound * 2, MAX_WAIT)
        raise AssertionError('unreachable')

    return retried  # type: ignore[return-value]
