"""Discovery passes and the decision to report them to the conductor."""
import hashlib
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from oslo_config import cfg

from cyborg import context as cyborg_context
from cyborg.accelerator import pci
from cyborg.accelerator.drivers.base import AcceleratorDriver
from cyborg.agent import cache as agent_cache
from cyborg.agent import layouts
from cyborg.common import device_report
from cyborg.common.device_report import DriverDevice
from cyborg.conductor import rpcapi as conductor_rpcapi

LOG = logging.getLogger(__name__)


class ResourceTracker:
    """Runs every driver and reports the host's devices when they change.

    A report goes to the conductor when its content hash differs from the
    last one the conductor accepted, and in any case every
    ``[agent] full_report_interval`` seconds.

    A report carries the state of every driver (``ok``, ``no devices`` or
    ``failed`` with its error). When a driver fails, the others' devices
    are reported as they found them and the failing driver's as the last
    report had them (see ``collect``): leaving them out would make the
    conductor delete devices that are probably still there.

    Each report and the hash of the last accepted one go to ``cache``
    (see ``cyborg.agent.cache``), so a restarted agent with the same
    inventory does not send it again; its first full report is then due
    ``full_report_interval`` seconds after the start.
    """

    def __init__(self, conf: cfg.ConfigOpts,
                 drivers: list[AcceleratorDriver],
                 conductor_api: conductor_rpcapi.ConductorAPI,
                 clock: Callable[[], float] = time.monotonic,
                 cache: agent_cache.AgentCache | None = None) -> None:
        self.conf = conf
        self.drivers = drivers
        self.conductor_api = conductor_api
        self.clock = clock
        self.cache = cache or agent_cache.AgentCache()
        self._lock = threading.Lock()
        # Driver name -> the error of a driver that failed its last pass.
        self._failing: dict[str, str] = {}
        # Driver name -> the devices of its last successful pass, which
        # health passes read (see cyborg.agent.health).
        self.discovered: dict[str, list[DriverDevice]] = {}
        # Reports the conductor accepted since the start: a health pass
        # sends every device's health again after one, as devices the
        # conductor did not know before have none yet.
        self.accepted = 0
        # Set by cyborg.agent.driver_control: the package version of each
        # driver by driver_name, and the driver_names an operator disabled
        # on this host, reported with the state 'disabled'.
        self.versions: dict[str, str] = {}
        self.disabled: set[str] = set()
        # Driver name -> why an enabled driver could not be loaded (after
        # a reload): reported failed, its last known devices kept.
        self.load_failed: dict[str, str] = {}
        # Driver name -> its entry of the last pass's ``drivers``.
        self.states: dict[str, dict[str, str]] = {}
        self._last_hash = self.cache.accepted_hash(_recipient(conf))
        self._last_sent = clock() if self._last_hash else None
        if self._last_hash:
            LOG.debug('The conductor accepted report %s before this agent '
                      'started; sending it again only if it changes.',
                      self._last_hash[:12])

    @property
    def hostname(self) -> str:
        return self.conf.agent.hostname or self.conf.host

    def collect(self) -> dict[str, Any]:
        """One discovery pass over every driver, as a report dict.

        A driver that raises contributes the devices it had in the last
        report (``cache.report``; none when there is no such report) and
        the state ``failed``; a device another driver now reports is not
        repeated.
        """
        devices: list[dict[str, Any]] = []
        states: dict[str, dict[str, str]] = {}
        failed: set[str] = set()
        # One scan of the PCI functions serves every driver.
        with pci.discovery_pass():
            for driver in self.drivers:
                name = type(driver).driver_name
                try:
                    typed = driver.discover()
                    found = [device.to_dict() for device in typed]
                    if self.conf.agent.new_device_state == 'enabled':
                        layouts.prepare_new(driver, typed, found,
                                            self.cache)
                    if _cleans_after_use(driver):
                        _mark_cleaning(found)
                except Exception as exc:
                    failed.add(name)
                    states[name] = {'state': 'failed',
                                    'error': self._failed(name, exc)}
                    continue
                if self._failing.pop(name, None) is not None:
                    LOG.info('Driver %s discovers devices again.', name)
                self.discovered[name] = typed
                devices.extend(found)
                states[name] = {'state': 'ok' if found else 'no devices'}
        for name, error in self.load_failed.items():
            if name not in states:
                failed.add(name)
                states[name] = {'state': 'failed', 'error': error}
        if failed:
            devices.extend(self._last_known(failed, devices))
        self.states = {name: dict(entry) for name, entry in states.items()}
        for name in self.disabled - set(states):
            states[name] = {'state': 'disabled'}
        for name, entry in states.items():
            if name in self.versions:
                entry['version'] = self.versions[name]
        report: dict[str, Any] = {'hostname': self.hostname,
                                  'devices': devices, 'drivers': states}
        # Sent only when it is not the default, so that conductors that do
        # not know the field accept the reports of default agents.
        if self.conf.agent.new_device_state == 'disabled':
            report['new_device_status'] = 'maintaining'
        return report

    def _failed(self, name: str, exc: Exception) -> str:
        """The error to report for driver ``name``; logged once per
        error, not at every pass."""
        error = f'{type(exc).__name__}: {exc}'
        error = error[:device_report.MAX_ERROR_LENGTH]
        if self._failing.get(name) != error:
            LOG.error('Driver %s failed to discover devices; its last '
                      'known devices are reported until it succeeds: %s',
                      name, error, exc_info=exc)
        else:
            LOG.debug('Driver %s still fails: %s', name, error)
        self._failing[name] = error
        return error

    def _last_known(self, failed: set[str],
                    found: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The devices of the ``failed`` drivers in the last report."""
        last = self.cache.report
        if last is None:
            return []
        taken = {device_report.canonical_json(d['controlpath_id'])
                 for d in found}
        kept = [device for device in last['devices']
                if any(dep['driver_name'] in failed
                       for dep in device['deployables'])
                and device_report.canonical_json(
                    device['controlpath_id']) not in taken]
        LOG.debug('Kept %d device(s) of failing driver(s) %s from the last '
                  'report.', len(kept), ', '.join(sorted(failed)))
        return kept

    def set_drivers(self, drivers: list[AcceleratorDriver],
                    disabled: set[str], versions: dict[str, str],
                    load_failed: dict[str, str] | None = None) -> None:
        """Run ``drivers`` from the next pass on; waits for a pass that
        runs. The devices of a driver no longer run leave the next report
        (the conductor keeps those still in use), but those of a driver in
        ``load_failed`` (name -> error), reported failed."""
        with self._lock:
            names = {type(d).driver_name for d in drivers}
            for gone in set(self.discovered) - names:
                del self.discovered[gone]
            for gone in set(self._failing) - names:
                del self._failing[gone]
            self.drivers = list(drivers)
            self.disabled = set(disabled)
            self.versions = dict(versions)
            self.load_failed = {
                name: error[:device_report.MAX_ERROR_LENGTH]
                for name, error in (load_failed or {}).items()}

    @property
    def pending(self) -> str | None:
        """The hash of the last report discovered but not accepted."""
        digest = self.cache.report_hash
        return digest if digest != self._last_hash else None

    def _full_report_due(self) -> bool:
        interval = self.conf.agent.full_report_interval
        return (interval > 0 and self._last_sent is not None
                and self.clock() - self._last_sent >= interval)

    def update(self, force: bool = False) -> dict[str, int] | None:
        """Discover and report if needed; returns what the conductor did.

        Returns None when nothing was sent.
        """
        with self._lock:
            report = self.collect()
            digest = device_report.report_hash(report)
            if (not force and digest == self._last_hash
                    and not self._full_report_due()):
                LOG.debug('Devices unchanged (%s); no report.', digest[:12])
                return None
            self.cache.record_report(report, digest)
            context = cyborg_context.get_admin_context()
            result = self.conductor_api.report_data(
                context, self.conf.host, report)
            self._last_hash = digest
            self._last_sent = self.clock()
            self.accepted += 1
            self.cache.record_accepted(_recipient(self.conf), digest)
            LOG.debug('Reported %d device(s): %s', len(report['devices']),
                      result)
            return result


def _cleans_after_use(driver: AcceleratorDriver) -> bool:
    """Whether ``[<driver group>] clean_after_use`` is set for the driver;
    False for a driver without lifecycle options (one built in a test)."""
    try:
        return driver.cleans_after_use
    except (AttributeError, cfg.NoSuchOptError, cfg.NoSuchGroupError):
        return False


def _mark_cleaning(devices: list[dict[str, Any]]) -> None:
    """Tell the conductor the handles of these devices are cleaned after
    use: the deployable attribute ``cleaning.ATTRIBUTE``, which a
    conductor reads when a request gives a handle back."""
    for device in devices:
        for deployable in device['deployables']:
            deployable['attributes']['clean_after_use'] = 'true'


def _recipient(conf: cfg.ConfigOpts) -> str:
    """To whom this agent's reports go: its host name at the conductors
    behind one messaging transport and exchange (hashed: the transport
    URL may hold a password)."""
    try:
        where = f'{conf.transport_url or ""} {conf.control_exchange}'
    except cfg.NoSuchOptError:
        # No transport configured in this process (tests, tools).
        where = ''
    digest = hashlib.sha256(where.encode()).hexdigest()[:16]
    return f'{conf.host} {digest}'
