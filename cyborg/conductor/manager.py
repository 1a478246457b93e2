"""Server side of the conductor RPC API."""
import logging
from typing import Any

import oslo_messaging as messaging
from oslo_config import cfg
from oslo_db import exception as db_exc

from cyborg import context as cyborg_context
from cyborg.common import device_report
from cyborg.common import exception
from cyborg.db.api import arqs
from cyborg.db.api import attributes
from cyborg.db.api import device_profiles
from cyborg.db.api import devices
from cyborg.db.api import inventory
from cyborg.db.api import services

LOG = logging.getLogger(__name__)


class ConductorManager:
    """Turns agent reports and heartbeats into database rows."""

    target = messaging.Target(version='1.1')

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

    # The API's writes (1.1). Each validates what only the database can
    # tell (existence, uniqueness, state) and raises a CyborgException that
    # the API maps to its status code.

    @messaging.expected_exceptions(exception.CyborgException)
    def device_profile_create(self, context: cyborg_context.RequestContext,
                              values: dict[str, Any]) -> dict[str, Any]:
        return device_profiles.create(context, values)

    @messaging.expected_exceptions(exception.CyborgException)
    def device_profile_delete(self, context: cyborg_context.RequestContext,
                              uuids: list[str], names: list[str]) -> None:
        device_profiles.delete(context, uuids, names)

    @messaging.expected_exceptions(exception.CyborgException)
    def arq_create(self, context: cyborg_context.RequestContext,
                   profile_name: str, project_id: str | None
                   ) -> list[dict[str, Any]]:
        return arqs.create(context, profile_name, project_id)

    @messaging.expected_exceptions(exception.CyborgException)
    def arq_apply_patch(self, context: cyborg_context.RequestContext,
                        binds: dict[str, dict[str, Any]],
                        unbinds: list[str]) -> None:
        arqs.apply_patch(context, binds, unbinds)

    @messaging.expected_exceptions(exception.CyborgException)
    def arq_delete(self, context: cyborg_context.RequestContext,
                   uuids: list[str] | None = None,
                   instance_uuid: str | None = None) -> None:
        arqs.delete(context, uuids, instance_uuid)

    @messaging.expected_exceptions(exception.CyborgException)
    def device_set_status(self, context: cyborg_context.RequestContext,
                          uuid: str, status: str) -> None:
        devices.set_status(context, uuid, status)

    @messaging.expected_exceptions(exception.CyborgException)
    def attribute_create(self, context: cyborg_context.RequestContext,
                         values: dict[str, Any]) -> dict[str, Any]:
        return attributes.create(context, values)

    @messaging.expected_exceptions(exception.CyborgException)
    def attribute_delete(self, context: cyborg_context.RequestContext,
                         uuid: str) -> None:
        attributes.delete(context, uuid)
