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
from cyborg.common import device_report
from cyborg.common import exception
from cyborg.conductor import rpcapi as conductor_rpcapi

LOG = logging.getLogger(__name__)


class ResourceTracker:
    """Runs every driver and reports the host's devices when they change.

    A report goes to the conductor when its content hash differs from the
    last one the conductor accepted, and in any case every
    ``[agent] full_report_interval`` seconds. When a driver fails nothing is
    sent: a partial report would make the conductor delete devices that are
    still there.

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
        """One discovery pass over every driver, as a report dict."""
        devices = []
        # One scan of the PCI functions serves every driver.
        with pci.discovery_pass():
            for driver in self.drivers:
                try:
                    found = driver.discover()
                except Exception as exc:
                    raise exception.DriverError(
                        driver=type(driver).driver_name, reason=exc) from exc
                devices.extend(device.to_dict() for device in found)
        report: dict[str, Any] = {'hostname': self.hostname,
                                  'devices': devices}
        # Sent only when it is not the default, so that conductors that do
        # not know the field accept the reports of default agents.
        if self.conf.agent.new_device_state == 'disabled':
            report['new_device_status'] = 'maintaining'
        return report

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
            self.cache.record_accepted(_recipient(self.conf), digest)
            LOG.debug('Reported %d device(s): %s', len(report['devices']),
                      result)
            return result


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
