"""Sending the events owed to Nova, and recording what Nova answered.

Every ended bind owes Nova an ``accelerator-request-bound`` event, stored
with the bind's end (``cyborg.db.api.nova_events``). The conductor that
ended the bind sends its events once committed, joined with those other
threads end at the same moment in one POST (the POST costs the conductor
and Nova more than the events in it). Every conductor also looks for
events due again (``resend``, every ``[nova] event_resend_interval``):
those Nova did not answer for, and those of a conductor that stopped
before it recorded Nova's answer, whose claim ran out.

An event's row goes once Nova answered for it: taken (200, or 207 with
code 200 for it), or its instance unknown (404). Nova 34 drops an event
for an instance that is not on a host yet (422): harmless for
``completed`` (nova-compute reads a Bound request when it starts
waiting), not for ``failed``: nova-compute counts BindFailed as resolved
and would boot the server without its device. So a failed bind stays
BindStarted, and its event is sent again, further and further apart,
until Nova takes it, the instance is gone, the request is unbound or
deleted, or ``[conductor] bind_timeout`` from the failure ends; only then
does the request read BindFailed (``bind_ends.settle_events``). Any other
answer, or none, leaves the event owed, sent again with the same backoff
until Nova answers or the request is gone.
"""
import dataclasses
import datetime
import logging
from collections.abc import Callable

from oslo_config import cfg
from oslo_utils import timeutils

from cyborg import context as cyborg_context
from cyborg.conductor import coalesce
from cyborg.conductor import nova_client
from cyborg.db.api import bind_ends
from cyborg.db.api import nova_events

LOG = logging.getLogger(__name__)

Owed = nova_events.Owed

# Seconds before the first resend, doubled after each one up to MAX_DELAY:
# nova-compute puts the instance on its host within a second or two of
# the bind, and a resend costs Nova a POST.
FIRST_DELAY = 0.5
MAX_DELAY = 8.0
# What Nova answers for an instance it does not know (it never will), and
# for one that is on no host yet.
GONE = 404
NOT_ON_HOST = 422
# Lists of events (one per PATCH, background finish or resend pass) sent
# in one POST to Nova at most: 64 PATCHes of an instance's few requests
# stay far below the size of body Nova's API takes (114 KiB by default).
EVENTS_PER_POST = 64
# Events one resend pass claims at most: some 40 KiB of body.
CLAIM_LIMIT = 256
# The ARQ state each status tells of (``nova_client.BindEvent``).
_STATE = {nova_events.COMPLETED: 'Bound', nova_events.FAILED: 'BindFailed'}


def delay(attempts: int) -> float:
    """Seconds until the next try of an event tried ``attempts`` times."""
    return min(FIRST_DELAY * 2 ** max(attempts - 1, 0), MAX_DELAY)


@dataclasses.dataclass
class Verdict:
    """What to do with each event sent, given what Nova answered (see
    ``bind_ends.settle_events``)."""

    done: list[Owed] = dataclasses.field(default_factory=list)
    retry: list[tuple[Owed, float]] = dataclasses.field(default_factory=list)
    unless_resolved: list[tuple[Owed, float]] = dataclasses.field(
        default_factory=list)
    # Failures Nova did not take within the bind timeout (among ``done``).
    expired: list[str] = dataclasses.field(default_factory=list)


def judge(outcome: nova_client.EventsOutcome, rows: list[Owed],
          now: datetime.datetime, timeout: float) -> Verdict:
    """Sort ``rows`` by what Nova answered for each (``outcome``); a
    failure owed longer than ``timeout`` seconds is given up."""
    verdict = Verdict()
    accepted = set(outcome.accepted)
    for row in rows:
        code = 200 if row.arq_uuid in accepted else outcome.rejected.get(
            row.arq_uuid)
        wait = delay(row.attempts + 1)
        if code in (200, GONE) or (code == NOT_ON_HOST
                                   and row.status == nova_events.COMPLETED):
            verdict.done.append(row)
        elif row.status == nova_events.FAILED and row.created_at and (
                now - row.created_at).total_seconds() >= timeout:
            # A failure never final would leave nova-compute waiting until
            # its arq_binding_timeout; one read BindFailed is told, and at
            # worst read as resolved.
            verdict.done.append(row)
            verdict.expired.append(row.arq_uuid)
        elif code == NOT_ON_HOST:
            verdict.unless_resolved.append((row, wait))
        else:
            verdict.retry.append((row, wait))
    return verdict


class NovaOutbox:
    """Sends owed events through ``nova`` and settles them; ``failed``
    is called with the failures ended BindFailed (ARQ uuid -> reason)."""

    def __init__(self, conf: cfg.ConfigOpts, nova: nova_client.NovaClient,
                 failed: Callable[[dict[str, str]], None]) -> None:
        self.conf = conf
        self.nova = nova
        self.failed = failed
        self._queue: coalesce.Coalescer[list[Owed], None]
        self._queue = coalesce.Coalescer(self._post, EVENTS_PER_POST)

    def deliver(self, rows: list[Owed]) -> None:
        """Send these events (claimed by the caller) and record what Nova
        answered; what it did not take stays owed, for a resend."""
        if not rows:
            return
        LOG.debug('Nova events queued for accelerator request(s) %s.',
                  ', '.join(r.arq_uuid for r in rows))
        try:
            self._queue.submit(rows)
        except Exception:
            # The rows are still claimed: sent again once the claim ends.
            LOG.exception('Cannot record what Nova answered for the events '
                          'of accelerator request(s) %s; they are sent '
                          'again after [nova] event_claim_timeout.',
                          ', '.join(r.arq_uuid for r in rows))

    def resend(self) -> None:
        """One pass of the periodic resend: claim the events due and send
        them. A database that does not answer raises: the periodic task
        tells ``outages`` of it, which says so once."""
        context = cyborg_context.get_admin_context()
        rows = (nova_events.claim_due(context, CLAIM_LIMIT)
                if nova_events.any_due(context) else [])
        if rows:
            LOG.debug('Sending again the Nova events of accelerator '
                      'request(s) %s.', ', '.join(r.arq_uuid for r in rows))
            self.deliver(rows)

    def _post(self, lists: list[list[Owed]]) -> list[None | Exception]:
        rows = [row for owed in lists for row in owed]
        if self.conf.nova.send_events:
            outcome = self.nova.send_bound_events([
                nova_client.BindEvent(r.instance_uuid, r.arq_uuid,
                                      _STATE[r.status]) for r in rows])
        else:
            # Nobody to tell: nothing waits for the event either.
            outcome = nova_client.EventsOutcome(
                delivered=True, accepted=[r.arq_uuid for r in rows])
        verdict = judge(outcome, rows, timeutils.utcnow(),
                        float(self.conf.conductor.bind_timeout))
        if verdict.expired:
            LOG.warning('Nova did not take the failure of accelerator '
                        'request(s) %s before [conductor] bind_timeout '
                        'ended (their instances were on no host, or Nova '
                        'did not answer); they are BindFailed now.',
                        ', '.join(sorted(verdict.expired)))
        later = verdict.retry + verdict.unless_resolved
        if later:
            LOG.debug('Nova did not take the events of accelerator '
                      'request(s) %s (%s); sending them again in %.1f s at '
                      'the earliest.', ', '.join(r.arq_uuid for r, _ in later),
                      outcome.rejected or outcome.status,
                      min(d for _, d in later))
        ended = bind_ends.settle_events(
            cyborg_context.get_admin_context(), verdict.done, verdict.retry,
            verdict.unless_resolved)
        if ended:
            self.failed(ended)
        return [None] * len(lists)
