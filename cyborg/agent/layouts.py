"""Device layouts and preparation on the agent's side.

The conductor decides (refusing a device in use, holding it back in
placement); the agent finds the device its driver discovers at the
control path given, checks the layout against what the driver offers,
keeps the desired layout in its cache *before* touching the device, and
applies it under the device's lock. Kept layouts are applied again when
the agent starts, before its first report (see ``AgentService.start``).
"""
import logging
from collections.abc import Callable
from typing import Any

from cyborg.accelerator.drivers.base import AcceleratorDriver
from cyborg.accelerator.drivers.base import act
from cyborg.agent import cache as agent_cache
from cyborg.common import exception
from cyborg.common.device_layout import check_shape
from cyborg.common.device_report import DriverDevice
from cyborg.common.device_report import canonical_json
from cyborg.common.device_report import check_layout

LOG = logging.getLogger(__name__)

def find_device(driver: AcceleratorDriver, controlpath_id: dict[str, str]
                ) -> DriverDevice:
    """The device ``driver`` discovers now at ``controlpath_id``."""
    wanted = canonical_json(controlpath_id)
    for device in driver.discover():
        if canonical_json(device.controlpath_id) == wanted:
            return device
    raise exception.DeviceActionError(
        action='find the device', device=wanted,
        reason=f'driver {driver.driver_name} discovers no device there')


def options(driver: AcceleratorDriver, device: DriverDevice
            ) -> dict[str, Any]:
    return dict(act(driver.layout_options, 'read the layout options',
                    canonical_json(device.controlpath_id), device))


# Adds what the driver needs beyond the layout (an FPGA image's file).
Resolver = Callable[[dict[str, Any]], dict[str, Any]]


def apply(driver: AcceleratorDriver, cache: agent_cache.AgentCache,
          controlpath_id: dict[str, str], layout: dict[str, Any],
          resolve: Resolver) -> None:
    """Check ``layout`` against the device's options, keep it, apply it.

    Kept first: an agent that dies while applying applies it again at its
    next start. The caller holds the device's lock.
    """
    check_shape(layout)
    device = find_device(driver, controlpath_id)
    check_layout(options(driver, device), layout)
    wanted = resolve(layout)
    kept = [e['layout'] for e in cache.layouts
            if canonical_json(e['controlpath_id'])
            == canonical_json(controlpath_id)]
    cache.record_layout(controlpath_id, driver.driver_name, layout)
    try:
        act(driver.apply_layout, 'apply the layout',
            canonical_json(controlpath_id), device, wanted)
    except exception.Invalid:
        # Refused before anything changed: keep what was kept before.
        cache.record_layout(controlpath_id, driver.driver_name,
                            kept[0] if kept else None)
        raise


def prepare(driver: AcceleratorDriver, device: DriverDevice) -> None:
    act(driver.prepare, 'prepare the device',
        canonical_json(device.controlpath_id), device)


def reapply(drivers: list[AcceleratorDriver],
            cache: agent_cache.AgentCache, resolve: Resolver) -> int:
    """Apply every kept layout again; how many were applied.

    A failure is logged and the layout stays kept: the conductor, which
    sees the device still ``applying``, drives it again or marks it
    failed (``[conductor] bind_timeout`` later).
    """
    by_name = {type(d).driver_name: d for d in drivers}
    applied = 0
    for entry in cache.layouts:
        device = canonical_json(entry['controlpath_id'])
        driver = by_name.get(entry['driver_name'])
        if driver is None:
            LOG.warning('Layout %s of %s not applied: driver %s is not '
                        'loaded.', entry['layout'], device,
                        entry['driver_name'])
            continue
        try:
            apply(driver, cache, entry['controlpath_id'], entry['layout'],
                  resolve)
        except Exception as exc:
            LOG.warning('Could not apply layout %s again on %s: %s',
                        entry['layout'], device, exc)
            continue
        LOG.info('Applied layout %s again on %s.', entry['layout'], device)
        applied += 1
    return applied


def prepare_new(driver: AcceleratorDriver, typed: list[DriverDevice],
                found: list[dict[str, Any]],
                cache: agent_cache.AgentCache) -> None:
    """Prepare the devices of a discovery pass not prepared before
    (``[agent] new_device_state = enabled``: they are enabled as they are
    found). One whose preparation fails goes into the report as
    ``status: error`` with the reason, and is tried again next pass.
    """
    for device, entry in zip(typed, found, strict=True):
        if cache.prepared(device.controlpath_id):
            continue
        try:
            prepare(driver, device)
        except Exception as exc:
            reason = str(exc)
            LOG.error('Could not prepare new device %s: %s',
                      canonical_json(device.controlpath_id), reason)
            entry['status'] = 'error'
            entry['status_reason'] = reason[:255]
            continue
        cache.record_prepared(device.controlpath_id)
