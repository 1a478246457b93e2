"""Agents' full reports that change nothing, answered without the work.

An agent sends its full report every ``[agent] full_report_interval``
even when nothing changed, so that a conductor repairs what went wrong.
Applied, an unchanged report of 8 devices costs a conductor ~25 ms of
CPU (schema validation, reading every row of the host, the placement
state) to write nothing. ``UnchangedReports`` remembers, per host, the
content hash of the last report this conductor applied and the host's
inventory ``Stamp`` (``host_rows.stamp``) after it; a report with the
same hash, while the stamp is the same, is answered from that: the rows
are what applying it would make them, and there is nothing to publish.

The stamp changes with every write to the host's rows, whoever makes it
(another conductor, an operator, a bind), because every write stamps
its rows. Two limits keep that true: a stamp is kept only when its
newest row is ``STAMP_MARGIN`` older than the moment it was read, so
that a write committed later, stamped by a clock a little behind, or in
MariaDB's whole seconds, still moves it; and only when nothing is
unsettled (providers not in placement yet, parts kept missing while in
use), which only the full path finishes.

The memory is per conductor and a host's reports go to any conductor:
each conductor learns a host from one full report of it while its rows
are settled, and keeps it while the stamp stays (a report another
conductor answered, or applied without a write, keeps it). With N
conductors a host pays about 2N - 1 full reports after a restart, then
none until its rows change; a bind on its devices changes them too.
"""
import datetime
import logging
import threading

from oslo_utils import timeutils

from cyborg import context as cyborg_context
from cyborg.db.api import host_rows

LOG = logging.getLogger(__name__)

# Clock skew between conductors (NTP keeps it far below a second),
# MariaDB's whole-second DATETIME and a writing transaction that commits
# several seconds after it stamped its rows, with room to spare.
STAMP_MARGIN = datetime.timedelta(seconds=10)


class UnchangedReports:
    """Per host: the hash of its last applied report and its stamp then."""

    def __init__(self, margin: datetime.timedelta = STAMP_MARGIN) -> None:
        self.margin = margin
        self._lock = threading.Lock()
        self._known: dict[str, tuple[str, str, host_rows.Stamp]] = {}

    def unchanged(self, context: cyborg_context.RequestContext, host: str,
                  digest: str) -> bool:
        """Whether applying a report of hash ``digest`` would change
        nothing: one indexed SELECT when this conductor applied that
        report last, none otherwise."""
        with self._lock:
            known = self._known.get(host)
        if known is None or known[0] != digest:
            return False
        if host_rows.stamp(context, host, known[1]) == known[2]:
            return True
        LOG.debug('Host %s changed since its last report; applying it.',
                  host)
        self.forget(host)
        return False

    def applied(self, context: cyborg_context.RequestContext, host: str,
                digest: str, hostname: str) -> None:
        """Report ``digest`` of ``host`` (compute node ``hostname``) was
        applied and its providers synced as far as they could be."""
        read_at = timeutils.utcnow()
        stamp = host_rows.stamp(context, host, hostname)
        settled = not stamp.unsettled and (
            stamp.newest is None or stamp.newest < read_at - self.margin)
        with self._lock:
            if settled:
                self._known[host] = (digest, hostname, stamp)
            else:
                self._known.pop(host, None)

    def forget(self, host: str) -> None:
        with self._lock:
            self._known.pop(host, None)
