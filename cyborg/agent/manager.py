"""Server side of the agent RPC API, and the agent's periodic work."""
import errno
import logging
import os
import threading
from typing import Any

import oslo_messaging as messaging
from oslo_config import cfg
from oslo_utils import uuidutils

from cyborg import context as cyborg_context
from cyborg import version
from cyborg.accelerator.drivers.base import AcceleratorDriver
from cyborg.accelerator.drivers.base import act
from cyborg.agent import cache as agent_cache
from cyborg.agent import driver_control as agent_drivers
from cyborg.agent import layouts
from cyborg.agent import resource_tracker
from cyborg.common import exception
from cyborg.common import glance_client
from cyborg.common.device_report import DriverAttachHandle
from cyborg.common.device_report import DriverDevice
from cyborg.common.device_report import canonical_json
from cyborg.conductor import rpcapi as conductor_rpcapi

LOG = logging.getLogger(__name__)

Context = cyborg_context.RequestContext

# What a device-side action can raise back to the caller.
_ACTION_ERRORS = (exception.Invalid, exception.DeviceActionError,
                  exception.NotSupported)
# What a report raises when no conductor answers.
_UNREACHABLE = (exception.ServiceUnavailable, messaging.MessagingTimeout,
                messaging.MessageUndeliverable)
# Seconds before a first report no conductor took is tried again, doubled
# at each try up to [agent] periodic_interval: agents that start a few
# seconds before their conductors (a cloud booting, a conductor slow
# under load) are known once one listens, not a whole pass (60 s by
# default) later; one down for long gets a try a pass, as later reports.
FIRST_REPORT_RETRY = 1.0


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


def _already_exists(exc: BaseException) -> bool:
    """Whether a failed mdev creation failed because the mdev exists:
    the kernel's EEXIST anywhere in the chain of causes, or a driver
    saying so."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, OSError) and seen.errno == errno.EEXIST:
            return True
        seen = seen.__cause__ or seen.__context__
    return 'already exists' in str(exc)


class AgentManager:
    """What the conductor can ask of this host's agent.

    The device-side actions that succeed are recorded in the tracker's
    cache (``cyborg.agent.cache``); ``restore_mdevs`` replays the mdevs.
    """

    target = messaging.Target(version='1.2')

    def __init__(self, conf: cfg.ConfigOpts,
                 tracker: resource_tracker.ResourceTracker,
                 conductor_api: conductor_rpcapi.ConductorAPI,
                 glance: glance_client.GlanceClient | None = None,
                 drivers: agent_drivers.DriverControl | None = None
                 ) -> None:
        self.conf = conf
        self.tracker = tracker
        self._drivers = drivers
        self.conductor_api = conductor_api
        self.glance = glance or glance_client.GlanceClient(conf)
        self._device_locks: dict[str, threading.Lock] = {}
        self._device_locks_guard = threading.Lock()
        # Tries of the first report no conductor took; whether a
        # conductor took one since this agent started.
        self._first_report_tries = 0
        self._first_report_taken = False

    @property
    def cache(self) -> agent_cache.AgentCache:
        return self.tracker.cache

    @property
    def bitstream_dir(self) -> str:
        """Where downloaded bitstreams are kept, and found again."""
        return os.path.join(self.conf.state_path, 'bitstreams')

    @messaging.expected_exceptions(exception.DriverError)
    def discover(self, context: Context) -> dict[str, int] | None:
        return self.tracker.update(force=True)

    # Drivers managed at runtime (1.2).

    @property
    def driver_control(self) -> agent_drivers.DriverControl:
        """The control of this agent's drivers; made on first use when
        the agent was assembled with drivers built by hand."""
        if self._drivers is None:
            self._drivers = agent_drivers.DriverControl.adopt(
                self.conf, self.tracker)
        return self._drivers

    def drivers_list(self, context: Context) -> list[dict[str, Any]]:
        """Every installed driver: ``{name, driver_name, version,
        enabled, state, error}`` (see ``DriverControl.entries``)."""
        return self.driver_control.entries()

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
        return self.driver_control.set_enabled(name, enabled)

    def drivers_reload(self, context: Context) -> list[dict[str, Any]]:
        """Re-read the entry points, re-import and reload the enabled
        drivers, report; the new list."""
        return self.driver_control.reload()

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
        device = canonical_json(controlpath_id)
        driver = self._driver(driver_name, 'program', device)
        bitstream = self.glance.get_image(bitstream_id)
        path = self.glance.download(bitstream, self.bitstream_dir)
        # Downloads may overlap; two programs of one device may not.
        with self._device_lock(device):
            LOG.info('Programming %s on %s with bitstream %s (%s)',
                     deployable_name, device, bitstream.id,
                     bitstream.function_id or 'no function id')
            act(driver.program, 'program', device, controlpath_id,
                deployable_name, path, bitstream.to_dict())
            self.cache.record_bitstream(controlpath_id, deployable_name,
                                        driver_name, bitstream.id)
        LOG.info('Programmed %s with bitstream %s', deployable_name,
                 bitstream.id)
        return {'bitstream_id': bitstream.id, 'reported': self._report()}

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
        driver = self._driver(driver_name, 'clean', device)
        with self._device_lock(device):
            LOG.info('Cleaning attach handle %s on %s', handle_uuid, device)
            act(driver.clean, 'clean', device,
                DriverAttachHandle(attach_type=attach_type,
                                   attach_info=dict(attach_info)))

    def _mdev_action(self, action: str, driver_name: str,
                     attach_info: dict[str, str], mdev_uuid: str) -> None:
        _check_string_map('attach_info', attach_info)
        _check_uuid('mdev_uuid', mdev_uuid)
        device = canonical_json(attach_info)
        driver = self._driver(driver_name, action, device)
        method = (driver.create_mdev if action == 'create mdev'
                  else driver.remove_mdev)
        LOG.debug('%s %s on %s', action, mdev_uuid, device)
        act(method, action, device, attach_info, mdev_uuid)
        if action == 'create mdev':
            self.cache.record_mdev(mdev_uuid, driver_name, attach_info)
        else:
            self.cache.forget_mdev(mdev_uuid)

    # Layouts and preparation (1.2).

    @messaging.expected_exceptions(*_ACTION_ERRORS)
    def layout_options(self, context: Context, controlpath_id: dict[str, str],
                       driver_name: str | None) -> dict[str, Any]:
        """What the device's partitioning may be (``{}``: none)."""
        _check_string_map('controlpath_id', controlpath_id)
        driver, found = self._layout_driver(driver_name, controlpath_id,
                                            'read the layout options')
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
        device = canonical_json(controlpath_id)
        driver, _ = self._layout_driver(driver_name, controlpath_id,
                                        'apply the layout')
        with self._device_lock(device):
            if layout is None:
                self.cache.record_layout(controlpath_id,
                                         type(driver).driver_name, None)
                LOG.info('Forgot the layout of %s.', device)
                return {'reported': True}
            LOG.info('Applying layout %s on %s', layout, device)
            layouts.apply(driver, self.cache, controlpath_id, layout,
                          self._resolve_layout)
        LOG.info('Applied layout %s on %s', layout, device)
        return {'reported': self._report()}

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
        device = canonical_json(controlpath_id)
        driver, found = self._layout_driver(driver_name, controlpath_id,
                                            'prepare the device')
        with self._device_lock(device):
            layouts.prepare(driver, found)
            self.cache.record_prepared(controlpath_id)
            if layout is not None:
                LOG.info('Applying layout %s on %s', layout, device)
                layouts.apply(driver, self.cache, controlpath_id, layout,
                              self._resolve_layout)
        LOG.info('Prepared %s.', device)
        if layout is None:
            return {'reported': True}
        return {'reported': self._report()}

    def _layout_driver(self, driver_name: str | None,
                       controlpath_id: dict[str, str], action: str
                       ) -> tuple[AcceleratorDriver, DriverDevice]:
        """The driver named, or (None: a device partitioned down to no
        deployable, which names no driver) the one that discovers the
        device; with the device as it discovers it now."""
        device = canonical_json(controlpath_id)
        if driver_name is not None:
            driver = self._driver(driver_name, action, device)
            return driver, layouts.find_device(driver, controlpath_id)
        for driver in self.tracker.drivers:
            try:
                return driver, layouts.find_device(driver, controlpath_id)
            except exception.DeviceActionError:
                continue
        raise exception.DeviceActionError(
            action=action, device=device,
            reason=f'no driver loaded on host {self.conf.host} discovers '
                   'the device')

    def reapply_layouts(self) -> int:
        """Apply the kept layouts again; run at start, before the first
        report (see ``layouts.reapply``)."""
        return layouts.reapply(list(self.tracker.drivers), self.cache,
                               self._resolve_layout)

    def _resolve_layout(self, layout: dict[str, Any]) -> dict[str, Any]:
        """The layout with the file of its FPGA region image, as
        ``program`` takes it; Invalid naming an image Glance lacks."""
        if 'region_image' not in layout:
            return dict(layout)
        try:
            bitstream = self.glance.get_image(layout['region_image'])
        except exception.BitstreamNotFound as exc:
            raise exception.Invalid(
                reason=f'region_image: {exc} Give the id of an FPGA image '
                       'in the image service.') from None
        try:
            path = self.glance.download(bitstream, self.bitstream_dir)
        except exception.BitstreamError as exc:
            raise exception.DeviceActionError(
                action='download the region image', device=bitstream.id,
                reason=str(exc)) from exc
        return dict(layout, image_path=path, bitstream=bitstream.to_dict())

    def restore_mdevs(self) -> int:
        """Make the mdevs this agent made what accelerator requests still
        hold; returns how many were created again.

        Run at start, before the first report and before RPC calls are
        served. The conductor says which recorded mdevs a request still
        holds: the others belong to requests unbound or deleted while this
        host could not be reached, or whose conductor stopped mid-bind, and
        are removed, and the conductor frees their handles. The rest are
        created again if a reboot lost them (one that still exists is
        fine). Without the conductor's answer every recorded mdev is kept.
        A failure is logged and the mdev stays recorded.
        """
        recorded = self.cache.mdevs
        if not recorded:
            return 0
        context = cyborg_context.get_admin_context()
        try:
            owned = set(self.conductor_api.mdevs_owned(
                context, self.conf.host, sorted(recorded)))
        except Exception as exc:
            LOG.warning('Cannot learn which of the %d recorded mdevs are '
                        'still in use (%s); keeping them all.',
                        len(recorded), exc)
            owned = set(recorded)
        removed = [mdev_uuid for mdev_uuid in sorted(set(recorded) - owned)
                   if self._remove_unowned(mdev_uuid, recorded[mdev_uuid])]
        if removed:
            try:
                self.conductor_api.mdevs_removed(context, self.conf.host,
                                                 removed)
            except Exception as exc:
                LOG.warning('Removed %d mdev(s) no request holds, but the '
                            'conductor did not hear of it (%s); it removes '
                            'them again later.', len(removed), exc)
        created = 0
        for mdev_uuid in sorted(owned & set(recorded)):
            created += self._recreate(mdev_uuid, recorded[mdev_uuid])
        return created

    def _remove_unowned(self, mdev_uuid: str, entry: dict[str, Any]
                        ) -> bool:
        device = canonical_json(entry['attach_info'])
        try:
            driver = self._driver(entry['driver_name'], 'remove mdev',
                                  device)
            driver.remove_mdev(entry['attach_info'], mdev_uuid)
        except Exception as exc:
            LOG.warning('Could not remove mdev %s on %s, which no request '
                        'holds (driver %s): %s', mdev_uuid, device,
                        entry['driver_name'], exc)
            return False
        self.cache.forget_mdev(mdev_uuid)
        LOG.info('Removed mdev %s on %s: no request holds it.', mdev_uuid,
                 device)
        return True

    def _recreate(self, mdev_uuid: str, entry: dict[str, Any]) -> int:
        driver_name = entry['driver_name']
        attach_info = entry['attach_info']
        device = canonical_json(attach_info)
        try:
            driver = self._driver(driver_name, 'create mdev', device)
            driver.create_mdev(attach_info, mdev_uuid)
        except Exception as exc:
            if _already_exists(exc):
                LOG.debug('mdev %s on %s still exists.', mdev_uuid, device)
            else:
                LOG.warning('Could not re-create mdev %s on %s (driver '
                            '%s): %s', mdev_uuid, device, driver_name, exc)
            return 0
        LOG.info('Re-created mdev %s on %s.', mdev_uuid, device)
        return 1

    def _driver(self, driver_name: str, action: str,
                device: str) -> AcceleratorDriver:
        loaded = [type(d).driver_name for d in self.tracker.drivers]
        for driver in self.tracker.drivers:
            if type(driver).driver_name == driver_name:
                return driver
        raise exception.DeviceActionError(
            action=action, device=device,
            reason=f'no driver named {driver_name!r} is loaded on host '
                   f'{self.conf.host} (loaded: {", ".join(loaded)})')

    def _device_lock(self, device: str) -> threading.Lock:
        with self._device_locks_guard:
            return self._device_locks.setdefault(device, threading.Lock())

    def _report(self) -> bool:
        """Report now, so that the device's new traits reach placement."""
        try:
            self.tracker.update(force=True)
        except (exception.CyborgException,
                messaging.MessagingException) as exc:
            LOG.warning('Inventory report after a device change failed '
                        '(%s); the next periodic report will carry it.',
                        exc)
            return False
        return True

    def periodic_report(self) -> None:
        try:
            self.tracker.update()
        except _UNREACHABLE as exc:
            pending = self.tracker.pending
            if not self.tracker.accepted:
                self._first_report_tries += 1
                LOG.warning('No conductor acknowledged the first inventory '
                            'report of this agent (try %d: %s); report %s '
                            'is tried again in %.0f s.',
                            self._first_report_tries, exc,
                            pending[:12] if pending else '-',
                            self.report_retry_delay())
                return
            LOG.warning('No conductor took the inventory report (%s); '
                        'report %s is kept and the next pass sends it.',
                        exc, pending[:12] if pending else '-')
            return
        if self.tracker.accepted and not self._first_report_taken:
            self._first_report_taken = True
            LOG.info('A conductor acknowledged the first inventory report '
                     'of this agent (%d failed tries before).',
                     self._first_report_tries)

    def report_retry_delay(self) -> float | None:
        """Seconds until the next report pass while the first report
        waits for a conductor; None otherwise (the task's interval)."""
        if self.tracker.accepted or not self._first_report_tries:
            return None
        return min(FIRST_REPORT_RETRY * 2 ** (self._first_report_tries - 1),
                   float(self.conf.agent.periodic_interval))

    def heartbeat(self) -> None:
        self.conductor_api.service_heartbeat(
            cyborg_context.get_admin_context(), self.conf.host,
            'cyborg-agent', version.version_string(),
            hostname=self.tracker.hostname)
