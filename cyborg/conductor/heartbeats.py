"""Agents' heartbeats, taken by RPC and written in batches.

A heartbeat written as it comes costs a transaction: at 1,000 hosts
beating every 10 s that is 100 transactions a second for nothing but a
timestamp. The conductor keeps the heartbeats it takes in memory instead,
the last one per service, and writes all of them about once every
``FLUSH_INTERVAL`` seconds with ``services.heartbeat_many`` (a few
statements, whatever their number), and at its stop.

Liveness: a heartbeat reaches the database at most ``FLUSH_INTERVAL``
(plus one write) after it arrived, stamped with the time of the oldest
heartbeat of its batch, so at most that much older than it is. Against
``[DEFAULT] service_down_time`` (60 s by default, at least several
heartbeat intervals) one second of delay changes nothing for the users of
``services.down_agents`` (host loss, evacuation): an agent is found down
at most a second later or earlier than it would otherwise be.

The last heartbeat of each service stays in memory too (``last_seen``),
for the metrics: no database read is needed to say which agents beat.
"""
import datetime
import logging
import threading

from oslo_utils import timeutils

from cyborg import context as cyborg_context
from cyborg.common import outages
from cyborg.db.api import services

LOG = logging.getLogger(__name__)

# Seconds between two writes of the heartbeats taken: at 10,000 hosts
# beating every 10 s, a batch of ~1,000 rows, split between conductors.
FLUSH_INTERVAL = 1.0


class HeartbeatBatch:
    """Heartbeats waiting to be written; a thread writes them.

    The thread starts with the first heartbeat, so that a conductor
    manager serving RPC without its service's periodic tasks (the
    all-in-one service, tests) records them too.
    """

    def __init__(self, interval: float = FLUSH_INTERVAL) -> None:
        self.interval = interval
        self._lock = threading.Lock()
        # One flush at a time: the thread's and stop()'s.
        self._flushing = threading.Lock()
        self._pending: dict[tuple[str, str], services.Beat] = {}
        # The last heartbeat this conductor took of each service, kept
        # after it is written: one entry per service, ~200 bytes each.
        self._last: dict[tuple[str, str], services.Beat] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def add(self, host: str, binary: str, version: str,
            hostname: str | None) -> None:
        """Take a heartbeat of ``binary`` on ``host`` received now."""
        beat = services.Beat(host, binary, version, hostname,
                             timeutils.utcnow())
        with self._lock:
            self._pending[(host, binary)] = beat
            self._last[(host, binary)] = beat
            if self._thread is None and not self._stop.is_set():
                self._thread = threading.Thread(
                    target=self._run, name='heartbeat-batch', daemon=True)
                self._thread.start()
            stopped = self._stop.is_set()
        if stopped:
            # Taken after stop() by a straggling RPC thread.
            self.flush()

    def last_seen(self, binary: str) -> dict[str, datetime.datetime]:
        """When this conductor last took a heartbeat of each ``binary``,
        by its hostname (its host where it sent none), in UTC."""
        with self._lock:
            return {beat.hostname or beat.host: beat.seen_at
                    for (_, kind), beat in self._last.items()
                    if kind == binary}

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.flush()

    def flush(self) -> int:
        """Write the heartbeats taken so far; how many were written.

        When the write fails they are kept, behind any newer heartbeat of
        the same service, for the next flush."""
        with self._flushing:
            with self._lock:
                beats, self._pending = list(self._pending.values()), {}
            if not beats:
                return 0
            try:
                services.heartbeat_many(cyborg_context.get_admin_context(),
                                        beats)
            except Exception as exc:
                if not outages.tracker.handled(exc, 'the heartbeat writer'):
                    LOG.exception('Writing %d heartbeat(s) failed; retrying '
                                  'in %s s.', len(beats), self.interval)
                with self._lock:
                    for beat in beats:
                        self._pending.setdefault((beat.host, beat.binary),
                                                 beat)
                return 0
            LOG.debug('Wrote %d heartbeat(s).', len(beats))
            outages.tracker.ended(outages.DATABASE)
            return len(beats)

    def stop(self) -> None:
        """Write what is pending; from now on each heartbeat at once."""
        self._stop.set()
        with self._lock:
            thread = self._thread
        if thread is not None:
            thread.join(self.interval + 5)
        self.flush()
