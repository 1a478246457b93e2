"""Telling Nova that binds ended, with binds ended together in one POST.

Nova waits for an ``accelerator-request-bound`` event of each ARQ it bound
and did not find resolved. Events of binds that several threads end at
the same moment (PATCHes of a batch, background finishes) leave in one
POST: the POST costs the conductor and Nova more than the events in it.
"""
import logging

from cyborg.conductor import coalesce
from cyborg.conductor import nova_client

LOG = logging.getLogger(__name__)

# Lists of events (one per PATCH or background finish) sent in one POST
# to Nova at most: 64 PATCHes of an instance's few requests stay far below
# the size of body Nova's API takes (114 KiB by default).
EVENTS_PER_POST = 64


class BindEvents:
    """Sends the events of ended binds through ``nova``, joined."""

    def __init__(self, nova: nova_client.NovaClient) -> None:
        self.nova = nova
        self._queue: coalesce.Coalescer[
            list[nova_client.BindEvent], nova_client.EventsOutcome]
        self._queue = coalesce.Coalescer(self._post, EVENTS_PER_POST)

    def notify(self, states: dict[str, str],
               instances: dict[str, str]) -> nova_client.EventsOutcome:
        """Tell Nova the state each ARQ of ``states`` ended in, for its
        instance in ``instances`` (ARQs without one are left out); what
        Nova answered (see ``nova_client.EventsOutcome``)."""
        events = [nova_client.BindEvent(instance_uuid=instances[uuid],
                                        arq_uuid=uuid, state=state)
                  for uuid, state in sorted(states.items())
                  if instances.get(uuid)]
        if not events:
            return nova_client.EventsOutcome()
        # Sent after the RPC's answer, joined with others: a conductor
        # that dies in between leaves Nova waiting for a Bound one (a
        # failure stays owed, see bind_failures).
        LOG.debug('Nova events queued for accelerator request(s) %s.',
                  ', '.join(e.arq_uuid for e in events))
        return self._queue.submit(events)

    def _post(self, lists: list[list[nova_client.BindEvent]]
              ) -> list[nova_client.EventsOutcome | Exception]:
        outcome = self.nova.send_bound_events(
            [event for events in lists for event in events])
        return [outcome] * len(lists)
