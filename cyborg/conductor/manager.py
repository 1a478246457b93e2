"""Server side of the conductor RPC API."""
import functools
import logging
from collections.abc import Callable
from typing import Any

import futurist
import oslo_messaging as messaging
from oslo_config import cfg
from oslo_db import exception as db_exc

from cyborg import context as cyborg_context
from cyborg.agent import rpcapi as agent_rpcapi
from cyborg.common import device_health
from cyborg.common import device_report
from cyborg.common import exception
from cyborg.common import notifications
from cyborg.conductor import binding
from cyborg.conductor import cleaning
from cyborg.conductor import device_side
from cyborg.conductor import heartbeats
from cyborg.conductor import host_drivers
from cyborg.conductor import layouts
from cyborg.conductor import live_allocations
from cyborg.conductor import placement_sync
from cyborg.conductor import reports
from cyborg.db.api import arq_batches
from cyborg.db.api import arqs
from cyborg.db.api import attach_handles
from cyborg.db.api import attributes
from cyborg.db.api import deployables
from cyborg.db.api import device_profiles
from cyborg.db.api import devices
from cyborg.db.api import driver_states
from cyborg.db.api import inventory
from cyborg.db.api import services

LOG = logging.getLogger(__name__)


def placement_configured(conf: cfg.ConfigOpts) -> bool:
    """Whether [placement] names a way to reach placement at all."""
    return bool(conf.placement.auth_type or conf.placement.endpoint_override)


def _check_names(name: str, value: Any) -> None:
    if not isinstance(value, list) or not all(
            isinstance(v, str) for v in value):
        raise exception.Invalid(reason=f'{name} must be a list of strings')


def _check_from_agent(host: Any, validate: Callable[[str, Any], None],
                      payload: Any, what: str) -> None:
    """Raise InvalidReport, logged, unless ``host`` is a name and
    ``validate`` takes ``payload``."""
    try:
        if not isinstance(host, str) or not host:
            raise exception.InvalidReport(host=host,
                                          reason='host must be a name')
        validate(host, payload)
    except exception.InvalidReport as exc:
        LOG.error('Rejected %s: %s', what, exc)
        raise


def _digest(host: Any, report: Any) -> str | None:
    """The report's content hash; None when it is not well-formed enough
    to have one (validation then says what is wrong)."""
    if not isinstance(host, str):
        return None
    try:
        return device_report.report_hash(report)
    except (KeyError, TypeError, AttributeError, ValueError):
        return None


def _describe(error: exception.CyborgException) -> dict[str, Any]:
    """An error of one item of a batch, as ``rpcapi._rebuild`` takes it."""
    return {'type': type(error).__name__, 'message': error.message,
            'kwargs': error.kwargs}


def _answers(items: list[dict[str, Any]],
             results: list[Any]) -> list[dict[str, Any]]:
    """The answers of a batch call: ``{}`` for each item done, its error
    (``_describe``) for each refused alone."""
    answers: list[dict[str, Any]] = []
    for item, result in zip(items, results, strict=True):
        if isinstance(result, exception.CyborgException):
            LOG.debug('Request %s: %s', item.get('request_id'), result)
            answers.append({'error': _describe(result)})
        else:
            answers.append({})
    return answers


class ConductorManager:
    """Turns agent reports and heartbeats into database rows, publishes
    them to placement and binds accelerator requests."""

    target = messaging.Target(version='1.11')

    def __init__(self, conf: cfg.ConfigOpts,
                 placement: placement_sync.PlacementSync | None = None,
                 agent_api: agent_rpcapi.AgentAPI | None = None) -> None:
        self.conf = conf
        if placement is None and placement_configured(conf):
            placement = placement_sync.PlacementSync(conf)
        self.placement = placement
        # Made on first use: a conductor's RPC transport exists by then.
        self.agent_api: Callable[[], agent_rpcapi.AgentAPI] = (
            functools.cache(functools.partial(agent_rpcapi.AgentAPI, conf))
            if agent_api is None else lambda: agent_api)
        # What binds, unbinds and deletes leave to do once committed.
        workers = futurist.ThreadPoolExecutor(
            max_workers=conf.conductor.bind_workers)
        self.cleaner = cleaning.Cleaner(conf, workers, self.agent_api,
                                        self.sync_placement)
        self.binder = binding.Binder(
            conf, workers, device_side.DeviceSide(
                conf, workers, self.agent_api, self.cleaner),
            allocations=None if placement is None else
            live_allocations.LiveAllocations(conf, placement.client))
        self.layouts = layouts.DeviceLayouts(conf, self.agent_api,
                                             self.sync_placement)
        self.notifier = notifications.get_notifier(conf, 'cyborg-conductor')
        self.heartbeats = heartbeats.HeartbeatBatch()
        self.reports = reports.UnchangedReports()

    def sync_placement(self, hostname: str) -> int:
        """Publish the host's changes; the providers still pending."""
        if self.placement is None:
            return 0
        try:
            return self.placement.sync_host(hostname).pending
        except Exception:
            # The database is right; the periodic pass tries again.
            LOG.exception('Placement sync of host %s failed', hostname)
            return -1

    @messaging.expected_exceptions(exception.InvalidReport,
                                   exception.ReportConflict)
    def report_data(self, context: cyborg_context.RequestContext,
                    host: str, report: Any) -> dict[str, int]:
        digest = _digest(host, report)
        if digest is not None and self.reports.unchanged(context, host,
                                                         digest):
            # Validated when it was applied; nothing to write or publish.
            LOG.debug('Host %s: report %s unchanged.', host, digest[:12])
            return dict(inventory.ReportResult().to_dict(),
                        placement_pending=0)
        _check_from_agent(host, device_report.validate_report, report,
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
        self.notifier.device_create(context, result.added)
        self.notifier.device_update(context, result.updated)
        self.notifier.device_delete(context, result.removed)
        if 'drivers' in report:
            # Agents before RPC 1.5 send none: their rows stay as they are.
            driver_states.apply(context, host, report['drivers'])
        answer = result.to_dict()
        answer['placement_pending'] = self.sync_placement(report['hostname'])
        if digest is not None and not answer['placement_pending']:
            self.reports.applied(context, host, digest, report['hostname'])
        return answer

    def service_heartbeat(self, context: cyborg_context.RequestContext,
                          host: str, binary: str, version: str,
                          hostname: str | None = None) -> None:
        if binary not in ('cyborg-agent',):
            LOG.error('Ignoring a heartbeat for unknown binary %r from %s',
                      binary, host)
            return
        problem = services.invalid_heartbeat(host, version, hostname)
        if problem:
            # Checked here: written in a batch, it would fail the batch.
            LOG.error('Ignoring a heartbeat from %r: %s', host, problem)
            return
        self.heartbeats.add(host, binary, version, hostname)

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
        created = arqs.create(context, profile_name, project_id)
        self.notifier.arq_create(context, created)
        return created

    @messaging.expected_exceptions(exception.CyborgException)
    def arq_create_many(self, context: cyborg_context.RequestContext,
                        requests: list[dict[str, Any]]
                        ) -> list[dict[str, Any]]:
        """``arq_create`` for several HTTP requests at once (1.4).

        One answer per request, in order: ``{"arqs": [...]}``, or
        ``{"error": {"type", "message", "kwargs"}}`` for a request that
        failed alone. A database error fails the call, and so all of them.
        """
        created = arqs.create_many(
            context, [(r['profile_name'], r['project_id'])
                      for r in requests])
        answers = []
        for request, result in zip(requests, created, strict=True):
            if isinstance(result, exception.CyborgException):
                LOG.debug('Request %s: %s', request.get('request_id'),
                          result)
                answers.append({'error': _describe(result)})
            else:
                self.notifier.arq_create(context, result)
                answers.append({'arqs': result})
        return answers

    @messaging.expected_exceptions(exception.CyborgException)
    def arq_apply_patch(self, context: cyborg_context.RequestContext,
                        binds: dict[str, dict[str, Any]],
                        unbinds: list[str], live: bool = False) -> None:
        self.binder.apply_patch(context, binds, unbinds, live=live)

    @messaging.expected_exceptions(exception.CyborgException)
    def arq_apply_patches(self, context: cyborg_context.RequestContext,
                          patches: list[dict[str, Any]]
                          ) -> list[dict[str, Any]]:
        """``arq_apply_patch`` for several HTTP requests at once (1.11):
        each of ``patches`` is ``{"binds", "unbinds", "live",
        "request_id"}``.

        One answer per PATCH, in order: ``{}``, or ``{"error": {"type",
        "message", "kwargs"}}`` for a PATCH refused alone. A database error
        fails the call, and so all of them.
        """
        return _answers(patches, self.binder.apply_patches(context, [
            arq_batches.Patch(p['binds'], p['unbinds'],
                              bool(p.get('live'))) for p in patches]))

    @messaging.expected_exceptions(exception.CyborgException)
    def arq_delete_many(self, context: cyborg_context.RequestContext,
                        deletes: list[dict[str, Any]]
                        ) -> list[dict[str, Any]]:
        """``arq_delete`` for several HTTP requests at once (1.11): each
        of ``deletes`` is ``{"uuids", "instance_uuid", "project_id",
        "request_id"}``; answered as ``arq_apply_patches``."""
        return _answers(deletes, self.binder.delete_many(context, [
            arq_batches.Delete(d.get('uuids'), d.get('instance_uuid'),
                               d.get('project_id')) for d in deletes]))

    @messaging.expected_exceptions(exception.CyborgException)
    def arq_delete(self, context: cyborg_context.RequestContext,
                   uuids: list[str] | None = None,
                   instance_uuid: str | None = None,
                   project_id: str | None = None) -> None:
        """By uuid (the API checked the caller sees each), or by
        instance: then only ``project_id``'s requests (1.7), every
        project's when it is None."""
        if instance_uuid is not None and project_id is not None:
            found, _ = arqs.get_all(context, project_id, instance_uuid)
            if not found:
                return
            uuids = [arq['uuid'] for arq in found]
        self.binder.delete(context, uuids, instance_uuid)

    @messaging.expected_exceptions(exception.CyborgException)
    def device_set_status(self, context: cyborg_context.RequestContext,
                          uuid: str, status: str) -> None:
        hostname = devices.set_status(context, uuid, status)
        if hostname:
            self.sync_placement(hostname)

    # Device layouts and preparation (1.9).

    @messaging.expected_exceptions(exception.CyborgException)
    def device_layout_options(self, context: cyborg_context.RequestContext,
                              uuid: str) -> dict[str, Any]:
        return self.layouts.options(context, uuid)

    @messaging.expected_exceptions(exception.CyborgException)
    def device_set_layout(self, context: cyborg_context.RequestContext,
                          uuid: str, layout: dict[str, Any] | None
                          ) -> dict[str, Any]:
        return self.layouts.set(context, uuid, layout)

    @messaging.expected_exceptions(exception.CyborgException)
    def device_enable(self, context: cyborg_context.RequestContext,
                      uuid: str) -> None:
        self.layouts.enable(context, uuid)

    # Device health (1.8).

    @messaging.expected_exceptions(exception.InvalidReport)
    def device_health_update(self, context: cyborg_context.RequestContext,
                             host: str, updates: Any) -> int:
        _check_from_agent(host, device_health.validate_update, updates,
                          'a device health update')
        changed = devices.apply_agent_health(context, host, updates)
        self._health_changed(context, changed)
        return len(changed)

    @messaging.expected_exceptions(exception.CyborgException)
    def device_set_health(self, context: cyborg_context.RequestContext,
                          uuid: str, state: str | None,
                          reason: str | None) -> dict[str, Any]:
        device, _ = devices.set_health(context, uuid, state, reason)
        changed = [device] if (
            device['previous_health'], device['previous_health_reason']
        ) != (device['health'], device['health_reason']) else []
        self._health_changed(context, changed)
        return {k: v for k, v in device.items()
                if not k.startswith('previous_')}

    def _health_changed(self, context: cyborg_context.RequestContext,
                        changed: list[dict[str, Any]]) -> None:
        """Log and announce each change; publish at once the hosts where
        a device went into or out of ``unhealthy``, the only change that
        moves placement's ``reserved`` (the database marked just those
        devices' providers)."""
        for device in changed:
            log = (LOG.warning if device['health'] == device_health.UNHEALTHY
                   else LOG.info)
            log('Device %s on %s is %s (was %s)%s.', device['uuid'],
                device['hostname'], device['health'],
                device['previous_health'],
                f': {device["health_reason"]}'
                if device['health_reason'] else '')
            self.notifier.device_health_update(
                context, {k: v for k, v in device.items()
                          if not k.startswith('previous_')},
                device['previous_health'], device['previous_health_reason'])
        unhealthy = device_health.UNHEALTHY
        for hostname in sorted({
                d['hostname'] for d in changed
                if (d['health'] == unhealthy)
                != (d['previous_health'] == unhealthy)}):
            self.sync_placement(hostname)

    @messaging.expected_exceptions(exception.CyborgException)
    def host_bindings(self, context: cyborg_context.RequestContext,
                      host: str) -> list[dict[str, Any]]:
        return devices.host_bindings(context, host)

    @messaging.expected_exceptions(exception.CyborgException)
    def attribute_create(self, context: cyborg_context.RequestContext,
                         values: dict[str, Any]) -> dict[str, Any]:
        return attributes.create(context, values)

    @messaging.expected_exceptions(exception.CyborgException)
    def attribute_delete(self, context: cyborg_context.RequestContext,
                         uuid: str) -> None:
        attributes.delete(context, uuid)

    @messaging.expected_exceptions(exception.CyborgException)
    def deployable_program(self, context: cyborg_context.RequestContext,
                           uuid: str, image_uuid: str) -> None:
        """Load a Glance image onto an idle FPGA through its agent.

        The deployable is taken for programming first (a conditional
        UPDATE; DeployableBusy while any of its handles is in use or
        another programming runs), so that no bind lands on it until the
        programming has ended; binds that arrive meanwhile wait for it.
        """
        target = deployables.begin_program(context, uuid, image_uuid)
        program = {'deployable_uuid': uuid, 'deployable_name': target['name'],
                   'host': target['host'],
                   'driver_name': target['driver_name'],
                   'image_uuid': image_uuid, 'arq_uuids': []}
        self.notifier.program_start(context, program)
        try:
            self._program(context, uuid, image_uuid, target)
        except Exception as exc:
            # _program has ended the programming in the database.
            self.notifier.program_error(context, program, str(exc))
            raise
        self.notifier.program_end(context, program)
        LOG.info('Deployable %s programmed with image %s.', uuid,
                 image_uuid)

    def _program(self, context: cyborg_context.RequestContext, uuid: str,
                 image_uuid: str, target: dict[str, Any]) -> None:
        """Have the agent load the image; end the programming begun."""
        # Until the agent has answered, the device's content is unknown.
        loaded: bool | None = False
        try:
            self.agent_api().program_fpga(
                context, target['host'], target['cpid_info'],
                target['name'], target['driver_name'], image_uuid,
                timeout=float(self.conf.conductor.bind_timeout))
            loaded = True
        except exception.NotSupported:
            loaded = None
            raise exception.ProgramNotSupported(
                uuid=uuid, driver=target['driver_name']) from None
        except exception.BitstreamNotFound as exc:
            loaded = None
            raise exception.Invalid(reason=f'image_uuid: {exc}') from None
        except exception.BitstreamError as exc:
            loaded = None
            raise exception.ProgramFailed(uuid=uuid, reason=exc) from None
        except exception.DeviceActionError as exc:
            raise exception.ProgramFailed(uuid=uuid, reason=exc) from None
        finally:
            deployables.finish_program(context, target['id'], image_uuid,
                                       loaded)

    # An agent's reconcile of the mdevs it made (1.6).

    @messaging.expected_exceptions(exception.CyborgException)
    def mdevs_owned(self, context: cyborg_context.RequestContext, host: str,
                    mdev_uuids: list[str]) -> list[str]:
        _check_names('mdev_uuids', mdev_uuids)
        return attach_handles.owned_handles(context, host, mdev_uuids)

    @messaging.expected_exceptions(exception.CyborgException)
    def mdevs_removed(self, context: cyborg_context.RequestContext,
                      host: str, mdev_uuids: list[str]) -> int:
        _check_names('mdev_uuids', mdev_uuids)
        freed = attach_handles.free_removed(context, host, mdev_uuids)
        if freed:
            LOG.info('Host %s removed the mediated devices of %d released '
                     'attach handle(s); they are free (or cleaning, when '
                     'cleaned after use).', host, len(freed))
        self.cleaner.handles_returned(context, freed)
        return len(freed)

    # Attach handles cleaned after use (1.9).

    @messaging.expected_exceptions(exception.CyborgException)
    def attach_handle_clean(self, context: cyborg_context.RequestContext,
                            uuid: str) -> dict[str, Any]:
        """Clean a handle held in maintenance again (HandleNotInMaintenance
        otherwise); it is returned ``cleaning``."""
        return self.cleaner.retry(context, uuid)

    @messaging.expected_exceptions(exception.CyborgException)
    def attach_handle_release(self, context: cyborg_context.RequestContext,
                              uuid: str) -> dict[str, Any]:
        """Free a handle held in maintenance without cleaning it."""
        return self.cleaner.release(context, uuid)

    @messaging.expected_exceptions(exception.CyborgException)
    def host_discover(self, context: cyborg_context.RequestContext,
                      host: str) -> dict[str, int] | None:
        """Make a registered, live agent discover and report now."""
        agent = services.get_agent(context, host,
                                   self.conf.service_down_time)
        if not agent['alive']:
            raise exception.AgentDown(
                host=host, last_seen=agent['last_seen_at'].isoformat(),
                down_time=self.conf.service_down_time)
        result = self.agent_api().discover(
            context, host, timeout=float(self.conf.rpc_response_timeout))
        LOG.debug('Host %s discovered on request: %s', host, result)
        return result

    # Drivers managed per host (1.9); see host_drivers.

    @property
    def _host_drivers(self) -> host_drivers.HostDrivers:
        return host_drivers.HostDrivers(self.conf, self.agent_api())

    @messaging.expected_exceptions(exception.CyborgException)
    def host_drivers_list(self, context: cyborg_context.RequestContext,
                          host: str) -> list[dict[str, Any]]:
        return self._host_drivers.installed(context, host)

    @messaging.expected_exceptions(exception.CyborgException)
    def host_driver_set_enabled(self, context: cyborg_context.RequestContext,
                                host: str, name: str, enabled: bool
                                ) -> dict[str, Any]:
        return self._host_drivers.set_enabled(context, host, name, enabled)

    @messaging.expected_exceptions(exception.CyborgException)
    def host_drivers_reload(self, context: cyborg_context.RequestContext,
                            host: str) -> list[dict[str, Any]]:
        return self._host_drivers.reload(context, host)
