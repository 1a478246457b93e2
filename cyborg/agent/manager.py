"""The agent's start-up and periodic work: the mdevs and layouts made
again at start, the inventory report and the heartbeat. Its RPC
endpoints are ``cyborg.agent.endpoints``."""
import errno
import logging
from typing import Any

import oslo_messaging as messaging
from oslo_config import cfg

from cyborg import context as cyborg_context
from cyborg import version
from cyborg.agent import devices
from cyborg.agent import driver_control as agent_drivers
from cyborg.agent import endpoints
from cyborg.agent import layouts
from cyborg.agent import resource_tracker
from cyborg.common import exception
from cyborg.common import glance_client
from cyborg.common.device_report import canonical_json
from cyborg.conductor import rpcapi as conductor_rpcapi

LOG = logging.getLogger(__name__)

# What a report raises when no conductor answers.
_UNREACHABLE = (exception.ServiceUnavailable, messaging.MessagingTimeout,
                messaging.MessageUndeliverable)
# Seconds before a first report no conductor took is tried again, doubled
# at each try up to [agent] periodic_interval: agents that start a few
# seconds before their conductors (a cloud booting, a conductor slow
# under load) are known once one listens, not a whole pass (60 s by
# default) later; one down for long gets a try a pass, as later reports.
FIRST_REPORT_RETRY = 1.0


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
    """The agent's parts (``host``, the tracker, the conductor client)
    and what it does on its own; ``endpoints`` serve the conductor's
    calls over the same parts.

    ``restore_mdevs`` replays the mdevs the cache recorded.
    """

    def __init__(self, conf: cfg.ConfigOpts,
                 tracker: resource_tracker.ResourceTracker,
                 conductor_api: conductor_rpcapi.ConductorAPI,
                 glance: glance_client.GlanceClient | None = None,
                 drivers: agent_drivers.DriverControl | None = None
                 ) -> None:
        self.conf = conf
        self.tracker = tracker
        self.conductor_api = conductor_api
        self.host = devices.HostDevices(conf, tracker, glance, drivers)
        # Tries of the first report no conductor took; whether a
        # conductor took one since this agent started.
        self._first_report_tries = 0
        self._first_report_taken = False

    def endpoints(self) -> list[object]:
        """The RPC endpoints, one per noun, over ``host``."""
        return endpoints.all_endpoints(self.host)

    def reapply_layouts(self) -> int:
        """Apply the kept layouts again; run at start, before the first
        report (see ``layouts.reapply``)."""
        return layouts.reapply(list(self.tracker.drivers), self.host.cache,
                               self.host.resolve_layout)

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
        recorded = self.host.cache.mdevs
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
            driver = self.host.driver(entry['driver_name'],
                                      'remove mdev', device)
            driver.remove_mdev(entry['attach_info'], mdev_uuid)
        except Exception as exc:
            LOG.warning('Could not remove mdev %s on %s, which no request '
                        'holds (driver %s): %s', mdev_uuid, device,
                        entry['driver_name'], exc)
            return False
        self.host.cache.forget_mdev(mdev_uuid)
        LOG.info('Removed mdev %s on %s: no request holds it.', mdev_uuid,
                 device)
        return True

    def _recreate(self, mdev_uuid: str, entry: dict[str, Any]) -> int:
        driver_name = entry['driver_name']
        attach_info = entry['attach_info']
        device = canonical_json(attach_info)
        try:
            driver = self.host.driver(driver_name, 'create mdev', device)
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
