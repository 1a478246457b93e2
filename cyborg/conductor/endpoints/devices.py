"""RPC endpoint of devices: their status (1.1), layouts and preparation
(1.9) and health (1.8)."""
import logging
from collections.abc import Callable
from typing import Any

import oslo_messaging as messaging

from cyborg import context as cyborg_context
from cyborg.common import device_health
from cyborg.common import exception
from cyborg.common import notifications
from cyborg.conductor import layouts
from cyborg.conductor.endpoints import TARGET
from cyborg.conductor.endpoints import check_from_agent
from cyborg.conductor.endpoints import expose
from cyborg.db.api import devices

LOG = logging.getLogger(__name__)

Context = cyborg_context.RequestContext


class DeviceEndpoint:
    """Writes the devices' rows; placement follows for the hosts whose
    inventory changed. Layouts go through ``layouts.DeviceLayouts``."""

    target = TARGET

    def __init__(self, device_layouts: layouts.DeviceLayouts,
                 notifier: notifications.Notifier,
                 sync_placement: Callable[[str], int]) -> None:
        self._layouts = device_layouts
        self._notifier = notifier
        self._sync_placement = sync_placement
        self.device_layout_options = expose(device_layouts.options)
        self.device_set_layout = expose(device_layouts.set)

    @messaging.expected_exceptions(exception.CyborgException)
    def device_set_status(self, context: Context, uuid: str,
                          status: str) -> None:
        hostname = devices.set_status(context, uuid, status)
        if hostname:
            self._sync_placement(hostname)

    @messaging.expected_exceptions(exception.CyborgException)
    def device_enable(self, context: Context, uuid: str) -> None:
        # The caller is answered nothing, not whether a layout waited.
        self._layouts.enable(context, uuid)

    @messaging.expected_exceptions(exception.InvalidReport)
    def device_health_update(self, context: Context, host: str,
                             updates: Any) -> int:
        check_from_agent(host, device_health.validate_update, updates,
                         'a device health update')
        changed = devices.apply_agent_health(context, host, updates)
        self._health_changed(context, changed)
        return len(changed)

    @messaging.expected_exceptions(exception.CyborgException)
    def device_set_health(self, context: Context, uuid: str,
                          state: str | None,
                          reason: str | None) -> dict[str, Any]:
        device, _ = devices.set_health(context, uuid, state, reason)
        changed = [device] if (
            device['previous_health'], device['previous_health_reason']
        ) != (device['health'], device['health_reason']) else []
        self._health_changed(context, changed)
        return {k: v for k, v in device.items()
                if not k.startswith('previous_')}

    def _health_changed(self, context: Context,
                        changed: list[dict[str, Any]]) -> None:
        """Log and announce each change; publish at once the hosts where
        a device went into or out of ``unhealthy``, the only change that
        moves placement's ``reserved`` (the database marked just those
        devices' providers)."""
        for device in changed:
            log = (LOG.warning if device['health'] == device_health.UNHEALTHY
                   else LOG.info)
            log('Device %s on %s is %s (was %s)%s.', device['uuid'],
                device['hostname'], device['health'],
                device['previous_health'],
                f': {device["health_reason"]}'
                if device['health_reason'] else '')
            self._notifier.device_health_update(
                context, {k: v for k, v in device.items()
                          if not k.startswith('previous_')},
                device['previous_health'], device['previous_health_reason'])
        unhealthy = device_health.UNHEALTHY
        for hostname in sorted({
                d['hostname'] for d in changed
                if (d['health'] == unhealthy)
                != (d['previous_health'] == unhealthy)}):
            self._sync_placement(hostname)
