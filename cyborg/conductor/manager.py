"""Server side of the conductor RPC API."""
import logging
from typing import Any

import oslo_messaging as messaging
from oslo_config import cfg
from oslo_db import exception as db_exc

from cyborg import context as cyborg_context
from cyborg.common import device_report
from cyborg.common import exception
from cyborg.db.api import inventory
from cyborg.db.api import services

LOG = logging.getLogger(__name__)


class ConductorManager:
    """Turns agent reports and heartbeats into database rows."""

    target = messaging.Target(version='1.0')

    def __init__(self, conf: cfg.ConfigOpts) -> None:
        self.conf = conf

    @messaging.expected_exceptions(exception.InvalidReport,
                                   exception.ReportConflict)
    def report_data(self, context: cyborg_context.RequestContext,
                    host: str, report: Any) -> dict[str, int]:
        if not isinstance(host, str) or not host:
            raise exception.InvalidReport(host=host,
                                          reason='host must be a name')
        try:
            device_report.validate_report(host, report)
        except exception.InvalidReport as exc:
            LOG.error('Rejected a device report: %s', exc)
            raise
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
        return result.to_dict()

    def service_heartbeat(self, context: cyborg_context.RequestContext,
                          host: str, binary: str, version: str,
                          hostname: str | None = None) -> None:
        if binary not in ('cyborg-agent',):
            LOG.error('Ignoring a heartbeat for unknown binary %r from %s',
                      binary, host)
            return
        services.heartbeat(context, host, binary, version, hostname)
