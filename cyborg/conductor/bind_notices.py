"""The notifications of binds, unbinds and deletes, sent once committed."""
import logging
from collections.abc import Callable
from typing import Any

from oslo_config import cfg

from cyborg import context as cyborg_context
from cyborg.common import notifications
from cyborg.db.api import arqs

# The binder's logger: what operators filter on did not move with the
# code.
LOG = logging.getLogger('cyborg.conductor.binding')

Job = dict[str, Any]
# A notifier's method sending one ARQ's notification.
Send = Callable[[cyborg_context.RequestContext, dict[str, Any]], None]


def program_info(group: list[Job]) -> dict[str, Any]:
    """What a program notification says of the binds that program."""
    job = group[0]
    return {'deployable_uuid': job['deployable_uuid'],
            'deployable_name': job['deployable_name'],
            'host': job['host'], 'driver_name': job['driver_name'],
            'image_uuid': job['bitstream_id'],
            'arq_uuids': [j['arq_uuid'] for j in group]}


class BindNotices:
    """Tells listeners what binds, unbinds, deletes and the programming
    they did changed; a notification never fails what it tells of."""

    def __init__(self, conf: cfg.ConfigOpts) -> None:
        self.notifier = notifications.get_notifier(conf, 'cyborg-conductor')

    def requests(self, context: cyborg_context.RequestContext,
                 uuids: list[str] | None,
                 instance_uuid: str | None = None
                 ) -> dict[str, dict[str, Any]]:
        """The ARQs named (or the instance's) as they are now, by uuid;
        none are read while notifications are off."""
        if not self.notifier.enabled or not (uuids or instance_uuid):
            return {}
        try:
            if uuids is not None:
                found = arqs.get_by_uuids(context, uuids, missing_ok=True)
            else:
                found, _ = arqs.get_all(context, instance_uuid=instance_uuid)
        except Exception:
            # A notification never fails what it tells of.
            LOG.warning('Cannot read accelerator requests for their '
                        'notifications.', exc_info=True)
            return {}
        return {arq['uuid']: arq for arq in found}

    @staticmethod
    def announce(context: cyborg_context.RequestContext, send: Send,
                 before: dict[str, dict[str, Any]],
                 states: dict[str, str]) -> None:
        """An unbind's or delete's notifications (``send``: the
        notifier's ``arq_unbind`` or ``arq_delete``): each ARQ as it was
        before (``requests``), in its new state."""
        for uuid, arq in sorted(before.items()):
            if uuid in states:
                send(context, dict(arq, state=states[uuid]))

    def binds_ended(self, context: cyborg_context.RequestContext,
                    ended: dict[str, str], reasons: dict[str, str]) -> None:
        """``bind.end`` or ``bind.error`` for each bind that ended."""
        now = self.requests(context, list(ended))
        for uuid, state in sorted(ended.items()):
            if uuid not in now:
                continue  # deleted since
            arq = dict(now[uuid], state=state)
            if state == 'Bound':
                self.notifier.arq_bind_end(context, arq)
            else:
                self.notifier.arq_bind_error(
                    context, arq, reasons.get(uuid, 'unknown'))

    def program_start(self, context: cyborg_context.RequestContext,
                      group: list[Job]) -> None:
        self.notifier.program_start(context, program_info(group))

    def programs_ended(self, context: cyborg_context.RequestContext,
                       programs: dict[int, tuple[str, bool | None]],
                       groups: dict[int, list[Job]],
                       reasons: dict[str, str]) -> None:
        """``program.end`` or ``program.error`` for each deployable that
        binds programmed (``programs``: whether each got its bitstream;
        ``groups``: the binds of each)."""
        for deployable_id, (_, loaded) in programs.items():
            group = groups[deployable_id]
            if loaded:
                self.notifier.program_end(context, program_info(group))
            else:
                self.notifier.program_error(
                    context, program_info(group),
                    reasons.get(group[0]['arq_uuid'], 'unknown'))
