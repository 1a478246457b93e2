"""The conductor's side of device layouts and preparation.

A layout change on an enabled device: ask the agent what the device
offers (a down agent is a 503 before anything is written; a value it
does not offer a 400 listing what it does), take the device
(``applying``: a 409 naming the requests that use it), publish the
reservation to placement, have the agent keep, apply and report it, then
end it (``applied`` or ``failed``) and publish again: the reservation is
lifted with the new inventory in one write.

On a device not enabled the layout is only checked and kept ``pending``:
``enable`` has the agent prepare the device and apply it, and a failed
one (``failed``) is tried again when the device is enabled again.

An agent that stops answering mid-change leaves the device ``applying``,
held back; it applies its kept layout again when it starts, and
``redrive`` (every ``REDRIVE_INTERVAL`` seconds) asks it again once
``[conductor] bind_timeout`` has passed, ending the change either way.
A conductor that stops mid-enable leaves the device ``preparing``, which
refuses every enable and layout change: past the same timeout ``redrive``
has the agent prepare it again, and enables it, or puts it in ``error``
with why (enabling it again tries again).
"""
import datetime
import logging
from collections.abc import Callable
from typing import Any

from oslo_config import cfg
from oslo_utils import timeutils

from cyborg import context as cyborg_context
from cyborg.agent import rpcapi as agent_rpcapi
from cyborg.common import device_layout
from cyborg.common import exception
from cyborg.common.device_report import check_layout
from cyborg.db.api import devices
from cyborg.db.api import layouts

LOG = logging.getLogger(__name__)

Context = cyborg_context.RequestContext
# Seconds between two looks for layout changes whose agent stopped.
REDRIVE_INTERVAL = 60
# Seconds to wait for an agent to read what a device offers, or to
# forget a layout: a sysfs read of milliseconds, behind at most a
# discovery pass under the device's lock.
OPTIONS_TIMEOUT = 30.0
# Errors of the agent that say the change itself failed.
_FAILED = (exception.DeviceActionError, exception.NotSupported)


class DeviceLayouts:
    """Layout changes and preparation, driven through the agents."""

    def __init__(self, conf: cfg.ConfigOpts,
                 agent_api: Callable[[], agent_rpcapi.AgentAPI],
                 sync_placement: Callable[[str], int]) -> None:
        self.conf = conf
        self._agent_api = agent_api
        self.sync_placement = sync_placement

    @property
    def agent_api(self) -> agent_rpcapi.AgentAPI:
        return self._agent_api()

    @property
    def timeout(self) -> float:
        return float(self.conf.conductor.bind_timeout)

    @property
    def options_timeout(self) -> float:
        # Never longer than a whole change may take.
        return min(OPTIONS_TIMEOUT, self.timeout)

    def options(self, context: Context, uuid: str) -> dict[str, Any]:
        """The device's layout, its state, and what its agent offers."""
        target = layouts.target(context, uuid)
        offered = self.agent_api.layout_options(
            context, target['host'], target['cpid_info'],
            target['driver_name'],
            timeout=self.options_timeout)
        return {'device_uuid': uuid, 'layout': target['layout'],
                'layout_state': target['layout_state'],
                'layout_reason': target['layout_reason'],
                'options': offered}

    def set(self, context: Context, uuid: str,
            layout: dict[str, Any] | None) -> dict[str, Any]:
        """Apply ``layout`` (None: clear it; the device stays as it is)."""
        if layout is not None:
            device_layout.check_shape(layout)
        # Asked first, also to clear: a down agent is a 503 before
        # anything is written.
        target = layouts.target(context, uuid)
        offered = self.agent_api.layout_options(
            context, target['host'], target['cpid_info'],
            target['driver_name'], timeout=self.options_timeout)
        if layout is not None:
            check_layout(offered, layout)
        before = layouts.begin_layout(context, uuid, layout)
        if layout is None:
            return self._clear(context, uuid, before)
        if before['status'] != 'enabled':
            # Kept ``pending``: the device's preparation applies it.
            LOG.info('Device %s: layout %s waits for the device to be '
                     'enabled.', uuid, layout)
            return devices.get(context, uuid)
        if self.sync_placement(before['hostname']) < 0:
            # Placement would go on offering handles about to change.
            layouts.restore_layout(context, before)
            raise exception.ServiceUnavailable(
                reason='placement could not be told to hold the device '
                       'back; nothing was changed, retry later')
        self._apply(context, before, layout)
        return devices.get(context, uuid)

    def _clear(self, context: Context, uuid: str,
               before: dict[str, Any]) -> dict[str, Any]:
        try:
            self.agent_api.apply_layout(
                context, before['host'], before['cpid_info'],
                before['driver_name'], None,
                timeout=self.options_timeout)
        except exception.AgentUnavailable:
            layouts.restore_layout(context, before)
            raise
        self.sync_placement(before['hostname'])
        LOG.info('Device %s: layout cleared.', uuid)
        return devices.get(context, uuid)

    def _apply(self, context: Context, target: dict[str, Any],
               layout: dict[str, Any]) -> None:
        """Have the agent apply ``layout``; end the change."""
        state, reason = 'failed', None
        try:
            self.agent_api.apply_layout(
                context, target['host'], target['cpid_info'],
                target['driver_name'], layout, timeout=self.timeout)
            state = 'applied'
        except exception.Invalid as exc:
            # Refused before the device was touched (its options changed
            # since they were read): as if never asked. A re-driven
            # change has nothing to go back to: it failed.
            if target['layout_state'] == layouts.APPLYING:
                reason = str(exc)
                raise
            state = 'restored'
            layouts.restore_layout(context, target)
            self.sync_placement(target['hostname'])
            raise
        except _FAILED as exc:
            reason = str(exc)
            raise exception.LayoutFailed(uuid=target['uuid'],
                                         reason=exc) from None
        except exception.AgentUnavailable as exc:
            # It may have kept the layout: it applies it at its start.
            state = layouts.APPLYING
            layouts.note_layout(
                context, target['id'],
                f'the agent did not answer ({exc}); it applies the layout '
                'when it starts')
            raise
        finally:
            if state in ('applied', 'failed'):
                layouts.finish_layout(context, target['id'], state, reason)
                self.sync_placement(target['hostname'])
        LOG.info('Device %s: layout %s applied.', target['uuid'], layout)

    def redrive(self) -> None:
        """Ask again about changes whose agent stopped answering."""
        context = cyborg_context.get_admin_context()
        older = timeutils.utcnow() - datetime.timedelta(seconds=self.timeout)
        for uuid in layouts.stale_layouts(context, older):
            target = layouts.target(context, uuid)
            try:
                self._apply(context, target, target['layout'])
            except exception.AgentUnavailable:
                LOG.warning('Device %s: its agent on %s still does not '
                            'answer; the layout change stays held back.',
                            uuid, target['host'])
            except exception.CyborgException as exc:
                LOG.error('Device %s: layout change failed: %s', uuid, exc)
        # The enable that began these ended with its conductor: the agent
        # call it made has timed out by now (its timeout is the same).
        for uuid in layouts.stale_preparations(context, older):
            self._redrive_preparation(context, uuid)

    def _redrive_preparation(self, context: Context, uuid: str) -> None:
        target = layouts.target(context, uuid)
        layout = (target['layout']
                  if target['layout_state'] == layouts.APPLYING else None)
        LOG.warning('Device %s: its preparation did not end (the conductor '
                    'that began it stopped); asking its agent on %s again.',
                    uuid, target['host'])
        try:
            self._prepare(context, target, layout)
        except exception.AgentUnavailable as exc:
            reason = (f'its preparation was interrupted and its agent did '
                      f'not answer ({exc}); enable it again')
            if layout is not None:
                layouts.finish_layout(context, target['id'], layouts.FAILED,
                                      reason)
            layouts.finish_prepare(context, target['id'], 'error', reason)
            self.sync_placement(target['hostname'])
            LOG.warning('Device %s: %s.', uuid, reason)
        except exception.CyborgException as exc:
            LOG.error('Device %s: %s', uuid, exc)

    def enable(self, context: Context, uuid: str) -> bool:
        """Prepare the device through its agent, apply the layout set
        while it was not enabled (or that failed), then enable it.

        False when it was enabled already. A down agent: AgentUnavailable
        and the status and layout stay. A failed preparation or layout:
        PrepareFailed, the device in ``error`` and the layout ``failed``,
        each with the reason; enabling it again tries both again.
        """
        before = layouts.begin_prepare(context, uuid)
        if before is None:
            return False
        layout = (before['layout'] if before['layout_state'] in (
            layouts.PENDING, layouts.FAILED) else None)
        try:
            self._prepare(context, before, layout)
        except exception.AgentUnavailable:
            layouts.finish_prepare(context, before['id'], before['status'],
                                   before['status_reason'])
            if layout is not None:
                layouts.restore_layout(context, before)
            raise
        return True

    def _prepare(self, context: Context, target: dict[str, Any],
                 layout: dict[str, Any] | None) -> None:
        """Have the agent prepare the device taken ``preparing`` (and
        apply ``layout``), then end it: ``enabled``, or ``error`` and
        PrepareFailed. AgentUnavailable is the caller's to end."""
        try:
            self.agent_api.prepare_device(
                context, target['host'], target['cpid_info'],
                target['driver_name'], layout, timeout=self.timeout)
        except (exception.Invalid, *_FAILED) as exc:
            if layout is not None:
                layouts.finish_layout(context, target['id'], layouts.FAILED,
                                      str(exc))
            layouts.finish_prepare(context, target['id'], 'error', str(exc))
            self.sync_placement(target['hostname'])
            raise exception.PrepareFailed(uuid=target['uuid'],
                                          reason=exc) from None
        if layout is not None:
            layouts.finish_layout(context, target['id'], 'applied', None)
        layouts.finish_prepare(context, target['id'], 'enabled', None)
        self.sync_placement(target['hostname'])
        LOG.info('Device %s prepared and enabled%s.', target['uuid'],
                 f' with layout {layout}' if layout is not None else '')
