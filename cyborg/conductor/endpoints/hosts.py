"""RPC endpoint of hosts: their agents' reports and heartbeats (1.0),
discovery on request (1.3) and who holds their devices (1.8)."""
import logging
from collections.abc import Callable
from typing import Any

import oslo_messaging as messaging
from oslo_config import cfg
from oslo_db import exception as db_exc

from cyborg import context as cyborg_context
from cyborg.agent import rpcapi as agent_rpcapi
from cyborg.common import device_report
from cyborg.common import exception
from cyborg.common import notifications
from cyborg.conductor import heartbeats
from cyborg.conductor import reports
from cyborg.conductor.endpoints import TARGET
from cyborg.conductor.endpoints import check_from_agent
from cyborg.conductor.endpoints import expose
from cyborg.db.api import devices
from cyborg.db.api import driver_states
from cyborg.db.api import inventory
from cyborg.db.api import services

LOG = logging.getLogger(__name__)

Context = cyborg_context.RequestContext


def _digest(host: Any, report: Any) -> str | None:
    """The report's content hash; None when it is not well-formed enough
    to have one (validation then says what is wrong)."""
    if not isinstance(host, str):
        return None
    try:
        return device_report.report_hash(report)
    except (KeyError, TypeError, AttributeError, ValueError):
        return None


class HostEndpoint:
    """Turns agent reports and heartbeats into database rows and
    publishes the reported hosts to placement."""

    target = TARGET

    host_bindings = staticmethod(expose(devices.host_bindings))

    def __init__(self, conf: cfg.ConfigOpts,
                 unchanged: reports.UnchangedReports,
                 beats: heartbeats.HeartbeatBatch,
                 notifier: notifications.Notifier,
                 sync_placement: Callable[[str], int],
                 agent_api: Callable[[], agent_rpcapi.AgentAPI]) -> None:
        self._conf = conf
        self._reports = unchanged
        self._heartbeats = beats
        self._notifier = notifier
        self._sync_placement = sync_placement
        self._agent_api = agent_api

    @messaging.expected_exceptions(exception.InvalidReport,
                                   exception.ReportConflict)
    def report_data(self, context: Context, host: str,
                    report: Any) -> dict[str, int]:
        digest = _digest(host, report)
        if digest is not None and self._reports.unchanged(context, host,
                                                          digest):
            # Validated when it was applied; nothing to write or publish.
            LOG.debug('Host %s: report %s unchanged.', host, digest[:12])
            return dict(inventory.ReportResult().to_dict(),
                        placement_pending=0)
        check_from_agent(host, device_report.validate_report, report,
                         'a device report')
        try:
            result = inventory.apply_report(context, host, report)
        except db_exc.DBDuplicateEntry as exc:
            # Resource-provider uuids derive from the placement node name,
            # so two agents configured with one node name collide here.
            conflict = exception.ReportConflict(
                host=host,
                reason=f'a device with the same address is already '
                       f'reported for node {report["hostname"]!r} '
                       f'({", ".join(exc.columns or [])} must be unique). '
                       'Give each agent its own [agent] hostname, the '
                       'hypervisor node name of its host.')
            LOG.error('Rejected a device report: %s', conflict)
            raise conflict from None
        if result.writes:
            LOG.info('Host %s: %d device(s) added, %d updated, %d removed'
                     '%s.', host, result.devices_added,
                     result.devices_updated, result.devices_removed,
                     f', {result.kept_in_use} kept while in use'
                     if result.kept_in_use else '')
        else:
            LOG.debug('Host %s: report unchanged.', host)
        self._notifier.device_create(context, result.added)
        self._notifier.device_update(context, result.updated)
        self._notifier.device_delete(context, result.removed)
        if 'drivers' in report:
            # Agents before RPC 1.5 send none: their rows stay as they are.
            driver_states.apply(context, host, report['drivers'])
        answer = result.to_dict()
        answer['placement_pending'] = self._sync_placement(
            report['hostname'])
        if digest is not None and not answer['placement_pending']:
            self._reports.applied(context, host, digest, report['hostname'])
        return answer

    def service_heartbeat(self, context: Context, host: str, binary: str,
                          version: str, hostname: str | None = None) -> None:
        if binary not in ('cyborg-agent',):
            LOG.error('Ignoring a heartbeat for unknown binary %r from %s',
                      binary, host)
            return
        problem = services.invalid_heartbeat(host, version, hostname)
        if problem:
            # Checked here: written in a batch, it would fail the batch.
            LOG.error('Ignoring a heartbeat from %r: %s', host, problem)
            return
        self._heartbeats.add(host, binary, version, hostname)

    @messaging.expected_exceptions(exception.CyborgException)
    def host_discover(self, context: Context,
                      host: str) -> dict[str, int] | None:
        """Make a registered, live agent discover and report now."""
        agent = services.get_agent(context, host,
                                   self._conf.service_down_time)
        if not agent['alive']:
            raise exception.AgentDown(
                host=host, last_seen=agent['last_seen_at'].isoformat(),
                down_time=self._conf.service_down_time)
        result = self._agent_api().discover(
            context, host, timeout=float(self._conf.rpc_response_timeout))
        LOG.debug('Host %s discovered on request: %s', host, result)
        return result
