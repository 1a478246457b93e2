"""Failed binds owed to Nova: their event is sent until Nova has it.

Nova 34 drops an ``accelerator-request-bound`` event for an instance that
is not on a host yet (207, code 422 for the event), and nova-compute, when
it reads the requests itself, counts BindFailed as resolved and boots the
server without the device. So a bind that fails on the device's host
stays BindStarted (unresolved: nova-compute waits for its event) with its
handle given back (``bind_ends.finish_binds``), and its ``failed`` event is
sent again, further and further apart, until Nova takes it (200, or 207
with code 200), the instance is gone (404), the request was unbound or
deleted, or ``[conductor] bind_timeout`` ends; only then does the request
read BindFailed. A Bound result is never sent again: nova-compute finds it
when it reads.

What is owed lives in the thread that sends it; a conductor that stops
leaves its requests BindStarted, for the stale-bind sweep to end. A
database row per owed event (an outbox) could take this module's list.
"""
import dataclasses
import logging
import threading
import time
from collections.abc import Collection

from oslo_config import cfg

from cyborg import context as cyborg_context
from cyborg.conductor import bind_events
from cyborg.conductor import nova_client
from cyborg.db.api import bind_ends

LOG = logging.getLogger(__name__)

# Seconds before the first resend, doubled after each one up to MAX_DELAY:
# nova-compute puts the instance on its host within a second or two of
# the bind, and a resend costs Nova a POST.
FIRST_DELAY = 0.5
MAX_DELAY = 8.0
# What Nova answers for an instance it does not know: it never will.
GONE = 404


@dataclasses.dataclass(frozen=True)
class Failure:
    """A failed bind whose event Nova is yet to take."""

    arq_uuid: str
    instance_uuid: str
    reason: str


def settled(outcome: nova_client.EventsOutcome,
            uuids: Collection[str]) -> set[str]:
    """The requests of ``uuids`` whose failure is told as far as it can
    be: Nova took the event, or does not know the instance. A 422 (not on
    a host yet), another code, or no answer at all leaves it owed."""
    return {uuid for uuid in uuids
            if uuid in outcome.accepted
            or outcome.rejected.get(uuid) == GONE}


class FailureDelivery:
    """Sends the ``failed`` events of binds until Nova has them."""

    def __init__(self, conf: cfg.ConfigOpts,
                 events: bind_events.BindEvents) -> None:
        self.conf = conf
        self.events = events
        # Set as the conductor stops: what is owed is left to the sweep.
        self.stopping = threading.Event()

    def deliver(self, failures: list[Failure], deadline: float
                ) -> dict[str, str]:
        """Tell Nova of ``failures`` until each is settled or
        ``deadline`` (``time.monotonic()``) passes, and end each
        BindFailed then; a request unbound or deleted meanwhile is
        dropped without an event. The requests ended here, by uuid
        (their state, BindFailed)."""
        context = cyborg_context.get_admin_context()
        owed = {f.arq_uuid: f.instance_uuid for f in failures}
        if not self.conf.nova.send_events:
            # Nobody to tell: nothing waits for the event either.
            return self._end(context, owed)
        ended: dict[str, str] = {}
        delay = FIRST_DELAY
        while True:
            left = bind_ends.owed_failures(context, owed)
            if set(owed) - left:
                LOG.debug('Accelerator request(s) %s were unbound, deleted '
                          'or ended elsewhere; Nova is not told they failed '
                          'from here.',
                          ', '.join(sorted(set(owed) - left)))
            owed = {u: i for u, i in owed.items() if u in left}
            if not owed:
                return ended
            outcome = self.events.notify(dict.fromkeys(owed, 'BindFailed'),
                                         owed)
            done = settled(outcome, owed)
            ended.update(self._end(context, {u: owed.pop(u) for u in done}))
            if not owed:
                return ended
            wait = min(delay, deadline - time.monotonic())
            if wait <= 0:
                break
            LOG.debug('Nova did not take the failure of accelerator '
                      'request(s) %s (%s); sending it again in %.1f s.',
                      ', '.join(sorted(owed)), outcome.rejected or
                      outcome.status, wait)
            if self.stopping.wait(wait):
                LOG.info('Stopping: accelerator request(s) %s stay '
                         'BindStarted, failed, until the stale-bind sweep '
                         'ends them.', ', '.join(sorted(owed)))
                return ended
            delay = min(delay * 2, MAX_DELAY)
        # A failure never final would leave nova-compute waiting until its
        # arq_binding_timeout; one read BindFailed is told, and at worst
        # read as resolved.
        LOG.warning('Nova did not take the failure of accelerator '
                    'request(s) %s before [conductor] bind_timeout ended '
                    '(their instances were on no host, or Nova did not '
                    'answer); they are BindFailed now.',
                    ', '.join(sorted(owed)))
        ended.update(self._end(context, owed))
        return ended

    @staticmethod
    def _end(context: cyborg_context.RequestContext,
             owed: dict[str, str]) -> dict[str, str]:
        return dict.fromkeys(bind_ends.end_failures(context, owed),
                             'BindFailed')
