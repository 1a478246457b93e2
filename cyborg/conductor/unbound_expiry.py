"""Deleting the accelerator requests that nothing bound.

Nova creates an instance's requests and binds them in the same
nova-conductor call, seconds apart, and deletes them itself when a build
fails; a request still ``Initial`` long after its create was abandoned (a
client that went away, a failure between the create and the bind) and
would be kept for ever. Every ``INTERVAL`` seconds one conductor deletes
those older than ``[conductor] unbound_request_ttl`` (0: none), a batch
per transaction (``arq_expiry``), and sends ``accelerator.arq.delete``
with reason ``expired`` for each.

One conductor at a time: the one the ring of the live conductors gives
``RING_KEY`` (``hash_ring.live_conductors``). When it stops, the next
one takes the key once its heartbeat is stale; while two conductors
both think it theirs (one just started), their batches skip each other's
locked rows and a row gone is deleted by no one else, so nothing is
deleted or announced twice.
"""
import datetime
import logging
from collections.abc import Callable

from oslo_config import cfg
from oslo_utils import timeutils

from cyborg import context as cyborg_context
from cyborg.common import notifications
from cyborg.conductor import hash_ring
from cyborg.db.api import arq_expiry

LOG = logging.getLogger(__name__)

# Seconds between two passes: a request goes at most this long after its
# TTL, and a pass costs the owner one indexed SELECT when nothing is due.
INTERVAL = 60
# Batches one pass deletes at most (10,000 requests): a backlog (the
# first pass after an upgrade, with requests left from years before)
# goes over several passes, each well within the time after which a
# periodic task is called stuck (rpc_service.STUCK_INTERVALS).
MAX_BATCHES = 20
# What the ring of the live conductors is asked who owns.
RING_KEY = 'unbound-request-expiry'
REASON = 'expired'


class UnboundExpiry:
    """The periodic deletion of abandoned requests (``sweep``)."""

    def __init__(self, conf: cfg.ConfigOpts,
                 notifier: notifications.Notifier,
                 clock: Callable[[], datetime.datetime] = timeutils.utcnow,
                 batch: int = arq_expiry.BATCH) -> None:
        self.conf = conf
        self.notifier = notifier
        self.clock = clock
        self.batch = batch

    def mine(self, context: cyborg_context.RequestContext) -> bool:
        """Whether this conductor sweeps now."""
        ring = hash_ring.live_conductors(context, self.conf)
        return ring.owner(RING_KEY) == self.conf.host

    def sweep(self) -> int:
        """One pass: how many requests it deleted. A database that does
        not answer raises: the periodic task tells ``outages``."""
        ttl = self.conf.conductor.unbound_request_ttl
        context = cyborg_context.get_admin_context()
        if not ttl or not self.mine(context):
            return 0
        now = self.clock()
        cutoff = now - datetime.timedelta(seconds=ttl)
        deleted = 0
        oldest: datetime.datetime | None = None
        for _ in range(MAX_BATCHES):
            expired = arq_expiry.expire(context, cutoff, self.batch)
            for arq in expired:
                self.notifier.arq_delete(context, arq, reason=REASON)
            deleted += len(expired)
            if expired:
                first = min(arq['created_at'] for arq in expired)
                oldest = first if oldest is None else min(oldest, first)
            if len(expired) < self.batch:
                break
        if deleted and oldest is not None:
            LOG.info('Deleted %d accelerator request(s) never bound within '
                     '[conductor] unbound_request_ttl (%d s); the oldest '
                     'was %d s old.', deleted, ttl,
                     (now - oldest).total_seconds())
        return deleted
