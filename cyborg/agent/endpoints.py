"""The agent's RPC endpoints, one per noun; ``rpcapi.AgentAPI`` is their
client. Every endpoint serves the client's ``RPC_API_VERSION`` (see
``cyborg.conductor.endpoints`` for why one version for all); the public
attributes of an endpoint are its RPC methods."""
import logging
from typing import Any

import oslo_messaging as messaging
from oslo_utils import uuidutils

from cyborg import context as cyborg_context
from cyborg.accelerator.drivers.base import act
from cyborg.agent import devices
from cyborg.agent import layouts
from cyborg.agent import rpcapi
from cyborg.common import exception
from cyborg.common.device_report import DriverAttachHandle
from cyborg.common.device_report import canonical_json

LOG = logging.getLogger(__name__)

Context = cyborg_context.RequestContext

TARGET = messaging.Target(version=rpcapi.AgentAPI.RPC_API_VERSION)

# What a device-side action can raise back to the caller.
_ACTION_ERRORS = (exception.Invalid, exception.DeviceActionError,
                  exception.NotSupported)


def _check_string_map(name: str, value: Any) -> None:
    if (not isinstance(value, dict) or not value
            or not all(isinstance(k, str) and isinstance(v, str)
                       for k, v in value.items())):
        raise exception.Invalid(
            reason=f'{name} must be a non-empty map of strings, not '
                   f'{value!r}')


def _check_string(name: str, value: Any) -> None:
    if not isinstance(value, str) or not value:
        raise exception.Invalid(
            reason=f'{name} must be a non-empty string, not {value!r}')


def _check_uuid(name: str, value: Any) -> None:
    if not uuidutils.is_uuid_like(value):
        raise exception.Invalid(reason=f'{name} must be a UUID, not '
                                       f'{value!r}')


class HostEndpoint:
    """Discovery on the conductor's request (1.0)."""

    target = TARGET

    def __init__(self, host: devices.HostDevices) -> None:
        self._host = host

    @messaging.expected_exceptions(exception.DriverError)
    def discover(self, context: Context) -> dict[str, int] | None:
        return self._host.tracker.update(force=True)


class DriverEndpoint:
    """Drivers managed at runtime (1.2), through ``DriverControl``."""

    target = TARGET

    def __init__(self, host: devices.HostDevices) -> None:
        self._host = host

    def drivers_list(self, context: Context) -> list[dict[str, Any]]:
        """Every installed driver: ``{name, driver_name, version,
        enabled, state, error}`` (see ``DriverControl.entries``)."""
        return self._host.driver_control.entries()

    @messaging.expected_exceptions(exception.Invalid,
                                   exception.DriverLoadFailed)
    def driver_set_enabled(self, context: Context, name: str,
                           enabled: bool) -> dict[str, Any]:
        """Enable or disable driver ``name`` on this host, keep the
        choice across restarts and report."""
        _check_string('name', name)
        if not isinstance(enabled, bool):
            raise exception.Invalid(
                reason=f'enabled must be true or false, not {enabled!r}')
        return self._host.driver_control.set_enabled(name, enabled)

    def drivers_reload(self, context: Context) -> list[dict[str, Any]]:
        """Re-read the entry points, re-import and reload the enabled
        drivers, report; the new list."""
        return self._host.driver_control.reload()


class DeviceEndpoint:
    """Programming (1.1), layouts and preparation (1.2) of a device."""

    target = TARGET

    def __init__(self, host: devices.HostDevices) -> None:
        self._host = host

    @messaging.expected_exceptions(*_ACTION_ERRORS,
                                   exception.BitstreamNotFound,
                                   exception.BitstreamError)
    def program_fpga(self, context: Context, controlpath_id: dict[str, str],
                     deployable_name: str, driver_name: str,
                     bitstream_id: str) -> dict[str, Any]:
        """Load image ``bitstream_id`` onto a deployable, then report.

        Returns ``{'bitstream_id': ..., 'reported': bool}``; ``reported``
        is False when the device was programmed but the inventory report
        that follows failed (the next periodic report carries it).
        """
        _check_string_map('controlpath_id', controlpath_id)
        _check_string('deployable_name', deployable_name)
        _check_string('bitstream_id', bitstream_id)
        host = self._host
        device = canonical_json(controlpath_id)
        driver = host.driver(driver_name, 'program', device)
        bitstream = host.glance.get_image(bitstream_id)
        path = host.glance.download(bitstream, host.bitstream_dir)
        # Downloads may overlap; two programs of one device may not.
        with host.lock(device):
            LOG.info('Programming %s on %s with bitstream %s (%s)',
                     deployable_name, device, bitstream.id,
                     bitstream.function_id or 'no function id')
            act(driver.program, 'program', device, controlpath_id,
                deployable_name, path, bitstream.to_dict())
            host.cache.record_bitstream(controlpath_id, deployable_name,
                                        driver_name, bitstream.id)
        LOG.info('Programmed %s with bitstream %s', deployable_name,
                 bitstream.id)
        return {'bitstream_id': bitstream.id, 'reported': host.report()}

    @messaging.expected_exceptions(*_ACTION_ERRORS)
    def layout_options(self, context: Context, controlpath_id: dict[str, str],
                       driver_name: str | None) -> dict[str, Any]:
        """What the device's partitioning may be (``{}``: none)."""
        _check_string_map('controlpath_id', controlpath_id)
        driver, found = self._host.layout_driver(
            driver_name, controlpath_id, 'read the layout options')
        return layouts.options(driver, found)

    @messaging.expected_exceptions(*_ACTION_ERRORS)
    def apply_layout(self, context: Context, controlpath_id: dict[str, str],
                     driver_name: str | None,
                     layout: dict[str, Any] | None) -> dict[str, Any]:
        """Keep and apply ``layout`` (None: forget the kept one, leaving
        the device as it is), then report, so the conductor holds the
        device's new deployables and handles when this returns.

        Returns ``{'reported': bool}`` as ``program_fpga``.
        """
        _check_string_map('controlpath_id', controlpath_id)
        host = self._host
        device = canonical_json(controlpath_id)
        driver, _ = host.layout_driver(driver_name, controlpath_id,
                                       'apply the layout')
        with host.lock(device):
            if layout is None:
                host.cache.record_layout(controlpath_id,
                                         type(driver).driver_name, None)
                LOG.info('Forgot the layout of %s.', device)
                return {'reported': True}
            LOG.info('Applying layout %s on %s', layout, device)
            layouts.apply(driver, host.cache, controlpath_id, layout,
                          host.resolve_layout)
        LOG.info('Applied layout %s on %s', layout, device)
        return {'reported': host.report()}

    @messaging.expected_exceptions(*_ACTION_ERRORS)
    def prepare_device(self, context: Context,
                       controlpath_id: dict[str, str],
                       driver_name: str | None,
                       layout: dict[str, Any] | None = None
                       ) -> dict[str, Any]:
        """Run the driver's ``prepare`` as an operator enables the device,
        then keep and apply ``layout``, the one the operator set while the
        device was not enabled (None: none waits; the kept one, if any,
        stays as applied).

        Returns ``{'reported': bool}`` as ``apply_layout``.
        """
        _check_string_map('controlpath_id', controlpath_id)
        host = self._host
        device = canonical_json(controlpath_id)
        driver, found = host.layout_driver(driver_name, controlpath_id,
                                           'prepare the device')
        with host.lock(device):
            layouts.prepare(driver, found)
            host.cache.record_prepared(controlpath_id)
            if layout is not None:
                LOG.info('Applying layout %s on %s', layout, device)
                layouts.apply(driver, host.cache, controlpath_id, layout,
                              host.resolve_layout)
        LOG.info('Prepared %s.', device)
        if layout is None:
            return {'reported': True}
        return {'reported': host.report()}


class AttachHandleEndpoint:
    """What binds and cleaning do to attach handles: mdevs (1.1) and
    cleaning after use (1.2)."""

    target = TARGET

    def __init__(self, host: devices.HostDevices) -> None:
        self._host = host

    @messaging.expected_exceptions(*_ACTION_ERRORS)
    def create_mdev(self, context: Context, driver_name: str,
                    attach_info: dict[str, str], mdev_uuid: str) -> None:
        """Create mediated device ``mdev_uuid`` for an MDEV attach handle."""
        self._mdev_action('create mdev', driver_name, attach_info, mdev_uuid)

    @messaging.expected_exceptions(*_ACTION_ERRORS)
    def remove_mdev(self, context: Context, driver_name: str,
                    attach_info: dict[str, str], mdev_uuid: str) -> None:
        """Remove mediated device ``mdev_uuid``; a missing one is fine."""
        self._mdev_action('remove mdev', driver_name, attach_info, mdev_uuid)

    @messaging.expected_exceptions(*_ACTION_ERRORS)
    def clean_handle(self, context: Context, driver_name: str,
                     attach_type: str, attach_info: dict[str, str],
                     handle_uuid: str) -> None:
        """Clean an attach handle after use with its driver's ``clean``,
        under the lock of the handle's function (1.2): two cleans of one
        function, sent again by a conductor that stopped waiting, never
        overlap."""
        _check_string('attach_type', attach_type)
        _check_string_map('attach_info', attach_info)
        _check_uuid('handle_uuid', handle_uuid)
        device = canonical_json(attach_info)
        driver = self._host.driver(driver_name, 'clean', device)
        with self._host.lock(device):
            LOG.info('Cleaning attach handle %s on %s', handle_uuid, device)
            act(driver.clean, 'clean', device,
                DriverAttachHandle(attach_type=attach_type,
                                   attach_info=dict(attach_info)))

    def _mdev_action(self, action: str, driver_name: str,
                     attach_info: dict[str, str], mdev_uuid: str) -> None:
        _check_string_map('attach_info', attach_info)
        _check_uuid('mdev_uuid', mdev_uuid)
        device = canonical_json(attach_info)
        driver = self._host.driver(driver_name, action, device)
        method = (driver.create_mdev if action == 'create mdev'
                  else driver.remove_mdev)
        LOG.debug('%s %s on %s', action, mdev_uuid, device)
        act(method, action, device, attach_info, mdev_uuid)
        if action == 'create mdev':
            self._host.cache.record_mdev(mdev_uuid, driver_name, attach_info)
        else:
            self._host.cache.forget_mdev(mdev_uuid)


def all_endpoints(host: devices.HostDevices) -> list[object]:
    """The agent's RPC endpoints over ``host``."""
    return [HostEndpoint(host), DriverEndpoint(host), DeviceEndpoint(host),
            AttachHandleEndpoint(host)]
