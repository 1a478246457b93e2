"""Discovery passes and the decision to report them to the conductor."""
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from oslo_config import cfg

from cyborg import context as cyborg_context
from cyborg.accelerator import pci
from cyborg.accelerator.drivers.base import AcceleratorDriver
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
    """

    def __init__(self, conf: cfg.ConfigOpts,
                 drivers: list[AcceleratorDriver],
                 conductor_api: conductor_rpcapi.ConductorAPI,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.conf = conf
        self.drivers = drivers
        self.conductor_api = conductor_api
        self.clock = clock
        self._lock = threading.Lock()
        self._last_hash: str | None = None
        self._last_sent: float | None = None

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
        return {'hostname': self.hostname, 'devices': devices}

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
            context = cyborg_context.get_admin_context()
            result = self.conductor_api.report_data(
                context, self.conf.host, report)
            self._last_hash = digest
            self._last_sent = self.clock()
            LOG.debug('Reported %d device(s): %s', len(report['devices']),
                      result)
            return result
