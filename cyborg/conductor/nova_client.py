"""The conductor's client for Nova's ``accelerator-request-bound`` events."""
import dataclasses
import logging
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING
from typing import Any

from keystoneauth1 import adapter as ks_adapter
from keystoneauth1 import exceptions as ks_exc
from oslo_config import cfg

from cyborg.common import keystone

if TYPE_CHECKING:
    # What keystoneauth returns; cyborg does not use requests directly.
    import requests

LOG = logging.getLogger(__name__)

EVENT_NAME = 'accelerator-request-bound'
# Nova knows the event name only from 2.82 on; an older microversion fails
# the whole body's validation.
MICROVERSION = '2.82'
EVENTS_PATH = '/os-server-external-events'
# keystoneauth tries a post again after a connection failure or a server
# error, twice, 1.25 s apart: 3 tries and 2.5 s of waiting in all, long
# enough for a Nova API behind a restarting proxy to come back, short
# enough not to hold the conductor thread that ended the bind. The [nova]
# options of the same names, when set, take their place.
RETRIES = {
    'connect_retries': 2,
    'connect_retry_delay': 1.25,
    'status_code_retries': 2,
    'status_code_retry_delay': 1.25,
    # 5xx only: a 4xx (a bad token or microversion, a body Nova refuses,
    # 404 for instances that are all gone) gets the same answer again, and
    # three tries of it held the bind's thread 2.5 s for nothing. 200 and
    # 207 answer for each event; keystoneauth re-authenticates once on a
    # 401 and follows redirects itself.
    'retriable_status_codes': list(range(500, 600)),
}

# An ARQ's final state, as Nova's waiting compute reads it.
_EVENT_STATUS = {
    'Bound': 'completed',
    'BindFailed': 'failed',
    'Deleting': 'failed',
}


@dataclasses.dataclass(frozen=True)
class BindEvent:
    """The end of one ARQ's bind, for the instance it was bound to."""

    instance_uuid: str
    arq_uuid: str
    # The ARQ's final state: Bound, BindFailed or Deleting.
    state: str

    def __post_init__(self) -> None:
        if self.state not in _EVENT_STATUS:
            raise ValueError(f'ARQ {self.arq_uuid} in state {self.state} '
                             'has not ended a bind')

    @property
    def status(self) -> str:
        return _EVENT_STATUS[self.state]

    def body(self) -> dict[str, str]:
        """The event as Nova's API takes it."""
        return {'name': EVENT_NAME, 'server_uuid': self.instance_uuid,
                'tag': self.arq_uuid, 'status': self.status}


@dataclasses.dataclass
class EventsOutcome:
    """What became of one call to ``send_bound_events``.

    ``delivered`` means Nova answered 200 or 207, after keystoneauth's
    retries; ``accepted`` and ``rejected`` then list the ARQ uuids (event
    tags), the latter with the code Nova gave each event, or None where its
    answer did not mention the event. ``status`` is the last HTTP status
    seen, None when nothing was sent or no try got an answer.
    """

    delivered: bool = False
    status: int | None = None
    accepted: list[str] = dataclasses.field(default_factory=list)
    rejected: dict[str, int | None] = dataclasses.field(default_factory=dict)


class NovaClient:
    """Sends bind results to Nova's external events API.

    One client serves every conductor thread; the keystoneauth adapter (and
    with it the token and the connection pool) is made on first use, so
    that a conductor that never binds never authenticates.
    """

    def __init__(self, conf: cfg.ConfigOpts) -> None:
        self._conf = conf
        self._lock = threading.Lock()
        self._adapter: ks_adapter.Adapter | None = None

    def _get_adapter(self) -> ks_adapter.Adapter:
        with self._lock:
            if self._adapter is None:
                group = self._conf.nova
                retries = {name: value for name, value in RETRIES.items()
                           if group[name] is None}
                self._adapter = keystone.get_adapter(self._conf, 'nova',
                                                     **retries)
            return self._adapter

    def send_bound_events(self, events: Sequence[BindEvent]
                          ) -> EventsOutcome:
        """Tell Nova, in one request, that the binds of ``events`` ended.

        Never raises: Nova also reads the ARQs that are already resolved
        when it starts waiting, so a ``completed`` event not taken only
        matters to an instance that was waiting by then, and it must not
        turn a bind into a failure; the caller sends an event again while
        the outcome says Nova did not answer for it (``nova_outbox``).
        """
        outcome = EventsOutcome()
        if not events:
            return outcome
        arqs = [event.arq_uuid for event in events]
        if not self._conf.nova.send_events:
            LOG.debug('Not sending events for ARQs %s: [nova] send_events '
                      'is off', arqs)
            return outcome
        body = {'events': [event.body() for event in events]}
        try:
            # The header names Nova's API whatever [nova] service_type
            # the catalog lists it under.
            response = self._get_adapter().post(
                EVENTS_PATH, json=body, microversion=MICROVERSION,
                microversion_service_type='compute', raise_exc=False)
        except ks_exc.ClientException as exc:
            # Connection and timeout failures left after the retries,
            # authentication failures, and a [nova] group that cannot make
            # an adapter at all.
            failure = f'{type(exc).__name__}: {exc}'
        else:
            outcome.status = response.status_code
            if response.status_code in (200, 207):
                outcome.delivered = True
                self._read_answer(events, response, outcome)
                return outcome
            failure = f'HTTP {response.status_code}'
        # A warning, not an error: the events stay owed and are sent again
        # (nova_outbox), every 8 s at most while Nova stays away.
        LOG.warning('Nova did not take the events of ARQs %(arqs)s '
                    '(%(failure)s); they are sent again until it answers',
                    {'arqs': arqs, 'failure': failure})
        return outcome

    @staticmethod
    def _read_answer(events: Sequence[BindEvent],
                     response: 'requests.Response',
                     outcome: EventsOutcome) -> None:
        if response.status_code == 200:
            outcome.accepted = [event.arq_uuid for event in events]
            LOG.debug('Nova took the events of ARQs %s', outcome.accepted)
            return
        codes = _codes_by_tag(response)
        for event in events:
            code = codes.get(event.arq_uuid)
            args = {'arq': event.arq_uuid, 'instance': event.instance_uuid,
                    'code': code}
            if code == 200:
                outcome.accepted.append(event.arq_uuid)
                continue
            outcome.rejected[event.arq_uuid] = code
            if code == 422:
                # Nova dispatches events to the instance's host; before it
                # has one, its compute has not started waiting either, and
                # will read a Bound ARQ itself when it does. A failure is
                # sent again (nova_outbox): read, it would pass for
                # resolved.
                LOG.debug('Instance %(instance)s of ARQ %(arq)s is not on a '
                          'host yet; Nova reads the ARQ when it waits', args)
            elif code == 404:
                LOG.warning('Nova does not know instance %(instance)s, to '
                            'which ARQ %(arq)s was bound', args)
            else:
                LOG.error('Nova rejected the event of ARQ %(arq)s for '
                          'instance %(instance)s with code %(code)s', args)


def _codes_by_tag(response: 'requests.Response') -> dict[str, int]:
    """The per-event codes of a 207, by tag; empty when unreadable."""
    try:
        answered: Any = response.json()['events']
        return {event['tag']: event['code'] for event in answered
                if 'tag' in event and 'code' in event}
    except (ValueError, KeyError, TypeError):
        return {}
