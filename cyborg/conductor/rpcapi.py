"""Client side of the conductor RPC API."""
import logging
from collections.abc import Callable
from typing import Any

import oslo_messaging as messaging
from oslo_config import cfg

from cyborg import context as cyborg_context
from cyborg.common import exception
from cyborg.common import rpc
from cyborg.conductor import coalesce

LOG = logging.getLogger(__name__)

Context = cyborg_context.RequestContext
# What ``ConductorAPI._call_newer`` returns when the call was not made.
NOT_TAKEN = object()


def _unavailable(reason: str) -> exception.ServiceUnavailable:
    return exception.ServiceUnavailable(
        reason=f'no cyborg-conductor answered: {reason}; retry later.')


class ConductorAPI:
    """Calls into any running conductor (topic ``cyborg-conductor``).

    API version history:

    * 1.0 - Initial version: ``report_data`` (an agent's inventory) and
      ``service_heartbeat``.
    * 1.1 - The API's writes, one call per HTTP request:
      ``device_profile_create``, ``device_profile_delete``, ``arq_create``,
      ``arq_apply_patch``, ``arq_delete``, ``device_set_status``,
      ``attribute_create``, ``attribute_delete``.
    * 1.2 - ``deployable_program``.
    * 1.3 - ``host_discover``.
    * 1.4 - ``arq_create_many``: the creates of several HTTP requests.
    * 1.5 - ``report_data`` reports may carry ``drivers``, the state of
      each enabled driver.
    * 1.6 - ``mdevs_owned`` and ``mdevs_removed``: an agent reconciles the
      mdevs it made with the requests that still hold them.
    * 1.7 - ``arq_delete`` takes ``project_id``: deleting by instance
      deletes only that project's requests.
    * 1.8 - Device health: ``device_health_update`` (an agent's readings
      that changed), ``device_set_health`` (an operator's) and
      ``host_bindings`` (who holds each device of a host, for metrics).
    * 1.9 - The device lifecycle: drivers managed per host, cleaning of
      attach handles after use, device layouts and preparation (see each
      method's docstring).
    * 1.10 - ``arq_apply_patch`` takes ``live``: binds to an instance
      that has bound requests (live attach), and unbinding a request
      that is not bound is refused.
    * 1.11 - ``arq_apply_patches`` and ``arq_delete_many``: the PATCHes
      and DELETEs of several HTTP requests, each answered on its own.
    """

    RPC_API_VERSION = '1.11'

    def __init__(self, conf: cfg.ConfigOpts, create_batch: int = 1,
                 bind_batch: int = 1) -> None:
        """``create_batch`` > 1: ``arq_create`` calls made at the same
        time by threads of this process go to a conductor together, up to
        that many per RPC call (see ``coalesce.Coalescer``); the same for
        ``arq_apply_patch`` and ``arq_delete`` with ``bind_batch``."""
        self.conf = conf
        target = messaging.Target(topic=rpc.CONDUCTOR_TOPIC,
                                  version=self.RPC_API_VERSION)
        self.client = rpc.get_client(
            target, version_cap=conf.upgrade_levels.conductor)
        self._creates: coalesce.Coalescer[
            tuple[Context, str, str | None], list[dict[str, Any]]] | None
        self._creates = (coalesce.Coalescer(self._create_many, create_batch)
                         if create_batch > 1 else None)
        self._patches: coalesce.Coalescer[
            tuple[Context, dict[str, dict[str, Any]], list[str], bool],
            None] | None
        # Two batches of binds in flight: a bind batch spends most of its
        # time waiting on the database's round trips (about 8 statements a
        # bind, one after the other), which a second batch, on the other
        # conductor, overlaps. 50 clients through one process, two
        # conductors, back to back: 180 binds/s and a p99 of 395 ms with
        # one, 259-314 and 305-364 ms with two, 238 and 678 ms with four.
        self._patches = (coalesce.Coalescer(self._apply_many, bind_batch,
                                            in_flight=2)
                         if bind_batch > 1 else None)
        self._deletes: coalesce.Coalescer[
            tuple[Context, list[str] | None, str | None, str | None],
            None] | None
        self._deletes = (coalesce.Coalescer(self._delete_many, bind_batch)
                         if bind_batch > 1 else None)

    def _call(self, context: Context, version: str, method: str,
              rpc_timeout: float | None = None, **kwargs: Any) -> Any:
        if not self.client.can_send_version(version):
            raise exception.ServiceUnavailable(
                reason=f'{method} needs conductor RPC {version} but '
                       f'[upgrade_levels] conductor is '
                       f'{self.client.version_cap}; raise it once every '
                       'conductor is upgraded.')
        return rpc.call(self.client, context, version, method, _unavailable,
                        timeout=rpc_timeout, **kwargs)

    def _call_newer(self, context: Context, version: str, method: str,
                    instead: str, **kwargs: Any) -> Any:
        """``_call`` at ``version``, or NOT_TAKEN when an ``[upgrade_levels]
        conductor`` cap is below it or a conductor refuses it (before
        doing anything; logged, with what the caller does ``instead``)."""
        if not self.client.can_send_version(version):
            return NOT_TAKEN
        try:
            return self._call(context, version, method, **kwargs)
        except (messaging.UnsupportedVersion, messaging.RemoteError) as exc:
            # Refused by the dispatcher; over a real broker it arrives as
            # a RemoteError.
            if getattr(exc, 'exc_type', 'UnsupportedVersion') != (
                    'UnsupportedVersion'):
                raise
        major, minor = version.split('.')
        LOG.warning('A conductor does not take RPC %s; %s. Until every '
                    'conductor is upgraded, set [upgrade_levels] conductor '
                    '= %s.%d.', version, instead, major, int(minor) - 1)
        return NOT_TAKEN

    def report_data(self, context: Context, host: str,
                    report: dict[str, Any]) -> dict[str, int]:
        """Make the database equal to ``report`` for ``host``; wait for it.

        Returns what changed (see ``ReportResult.to_dict``). The
        report's ``drivers`` go only to conductors of 1.5 or later: not
        at all under an ``[upgrade_levels] conductor`` cap below 1.5, and
        again without them when a conductor refuses 1.5. Their versions
        and 'disabled' states go only to conductors of 1.9 or later, the
        same way.
        """
        if isinstance(report, dict) and _has_lifecycle_drivers(report):
            answer = self._call_newer(
                context, '1.9', 'report_data',
                'reporting without driver versions and disabled drivers',
                host=host, report=report)
            if answer is not NOT_TAKEN:
                return answer
            report = dict(report, drivers={
                name: {k: v for k, v in entry.items() if k != 'version'}
                for name, entry in report['drivers'].items()
                if entry.get('state') != 'disabled'})
        if isinstance(report, dict) and 'drivers' in report:
            answer = self._call_newer(
                context, '1.5', 'report_data',
                'reporting without driver states', host=host, report=report)
            if answer is not NOT_TAKEN:
                return answer
            report = {k: v for k, v in report.items() if k != 'drivers'}
        return self._call(context, '1.0', 'report_data', host=host,
                          report=report)

    def service_heartbeat(self, context: Context, host: str, binary: str,
                          version: str, hostname: str | None = None) -> None:
        """Record that a service is alive; fire and forget."""
        cctxt = self.client.prepare(version='1.0')
        cctxt.cast(context, 'service_heartbeat', host=host, binary=binary,
                   version=version, hostname=hostname)

    def device_profile_create(self, context: Context,
                              values: dict[str, Any]) -> dict[str, Any]:
        return self._call(context, '1.1', 'device_profile_create',
                          values=values)

    def device_profile_delete(self, context: Context, uuids: list[str],
                              names: list[str]) -> None:
        """Delete every named profile, or none if one is missing."""
        return self._call(context, '1.1', 'device_profile_delete',
                          uuids=uuids, names=names)

    def arq_create(self, context: Context, profile_name: str,
                   project_id: str | None) -> list[dict[str, Any]]:
        """One accelerator request per accelerator the profile asks for."""
        if self._creates is not None and self.client.can_send_version('1.4'):
            return self._creates.submit((context, profile_name, project_id))
        return self._call(context, '1.1', 'arq_create',
                          profile_name=profile_name, project_id=project_id)

    def _create_many(self, requests: list[tuple[Context, str, str | None]]
                     ) -> list[list[dict[str, Any]] | Exception]:
        if len(requests) == 1:
            context, profile_name, project_id = requests[0]
            try:
                return [self._call(context, '1.1', 'arq_create',
                                   profile_name=profile_name,
                                   project_id=project_id)]
            except exception.CyborgException as exc:
                return [exc]
        # The call is made for several callers: an admin context of its
        # own, with each caller's request id in its item for the logs.
        answers = self._call(
            cyborg_context.get_admin_context(), '1.4', 'arq_create_many',
            requests=[{'profile_name': profile_name,
                       'project_id': project_id,
                       'request_id': context.request_id}
                      for context, profile_name, project_id in requests])
        return [answer['arqs'] if 'arqs' in answer
                else _rebuild(answer['error']) for answer in answers]

    def arq_apply_patch(self, context: Context,
                        binds: dict[str, dict[str, Any]],
                        unbinds: list[str], live: bool = False) -> None:
        """Bind and unbind a batch of accelerator requests; ``live``
        (1.10) as ``arq_bindings.apply_patch`` takes it."""
        if self._patches is not None and self.client.can_send_version(
                '1.11'):
            return self._patches.submit((context, binds, unbinds, live))
        return self._apply_one(context, binds, unbinds, live)

    def _apply_one(self, context: Context, binds: dict[str, dict[str, Any]],
                   unbinds: list[str], live: bool) -> None:
        if live:
            return self._call(context, '1.10', 'arq_apply_patch',
                              binds=binds, unbinds=unbinds, live=True)
        return self._call(context, '1.1', 'arq_apply_patch', binds=binds,
                          unbinds=unbinds)

    def _apply_many(self, patches: list[tuple[
            Context, dict[str, dict[str, Any]], list[str], bool]]
            ) -> list[None | Exception]:
        return self._each_or_batch(
            'arq_apply_patches', 'patches', patches,
            lambda binds, unbinds, live: {'binds': binds, 'unbinds': unbinds,
                                          'live': live},
            self._apply_one)

    def _each_or_batch(self, method: str, key: str,
                       items: list[tuple[Any, ...]],
                       payload: Callable[..., dict[str, Any]],
                       alone: Callable[..., None]) -> list[None | Exception]:
        """Answers for the ``(context, *arguments)`` items of a
        ``Coalescer``: one ``method`` call (1.11) taking each item's
        ``payload(*arguments)`` in the list ``key``, or, for one item or
        conductors before 1.11, ``alone(context, *arguments)`` for each."""
        if len(items) > 1:
            # The call is made for several callers: an admin context of
            # its own, with each caller's request id in its item.
            answers = self._call_newer(
                cyborg_context.get_admin_context(), '1.11', method,
                'sending each request on its own',
                **{key: [dict(payload(*arguments),
                              request_id=context.request_id)
                         for context, *arguments in items]})
            if answers is not NOT_TAKEN:
                return [_rebuild(answer['error']) if 'error' in answer
                        else None for answer in answers]
        results: list[None | Exception] = []
        for context, *arguments in items:
            try:
                alone(context, *arguments)
            except exception.CyborgException as exc:
                results.append(exc)
            else:
                results.append(None)
        return results

    def arq_delete(self, context: Context, uuids: list[str] | None = None,
                   instance_uuid: str | None = None,
                   project_id: str | None = None) -> None:
        """Unbind and delete requests by uuid, or by instance.

        By instance with ``project_id``, only that project's requests go;
        ``uuids`` then names those the caller found, which conductors
        before 1.7 (that would delete every project's) are sent instead.
        """
        if self._deletes is not None and self.client.can_send_version(
                '1.11'):
            return self._deletes.submit((context, uuids, instance_uuid,
                                         project_id))
        return self._delete_one(context, uuids, instance_uuid, project_id)

    def _delete_one(self, context: Context, uuids: list[str] | None,
                    instance_uuid: str | None, project_id: str | None
                    ) -> None:
        if instance_uuid is not None and project_id is not None:
            answer = self._call_newer(
                context, '1.7', 'arq_delete',
                "deleting the project's requests of the instance by uuid",
                instance_uuid=instance_uuid, project_id=project_id)
            if answer is not NOT_TAKEN or not uuids:
                return None
            instance_uuid = None
        return self._call(context, '1.1', 'arq_delete', uuids=uuids,
                          instance_uuid=instance_uuid)

    def _delete_many(self, deletes: list[tuple[
            Context, list[str] | None, str | None, str | None]]
            ) -> list[None | Exception]:
        return self._each_or_batch(
            'arq_delete_many', 'deletes', deletes,
            lambda uuids, instance, project: {
                'uuids': uuids, 'instance_uuid': instance,
                'project_id': project},
            self._delete_one)

    def device_set_status(self, context: Context, uuid: str,
                          status: str) -> None:
        """``enabled`` or ``maintaining`` (out of scheduling)."""
        return self._call(context, '1.1', 'device_set_status', uuid=uuid,
                          status=status)

    # Device layouts and preparation (1.9).

    def _device_action_timeout(self) -> float:
        # The conductor asks the agent what it offers (up to the RPC
        # timeout) and then waits for the change (up to the bind timeout).
        return (float(self.conf.conductor.bind_timeout)
                + 2 * self.conf.rpc_response_timeout + 30)

    def device_layout_options(self, context: Context, uuid: str
                              ) -> dict[str, Any]:
        """The device's layout and what its agent offers
        (``{'device_uuid', 'layout', 'layout_state', 'layout_reason',
        'options'}``); AgentUnavailable when its agent does not answer."""
        return self._call(context, '1.9', 'device_layout_options',
                          rpc_timeout=2 * self.conf.rpc_response_timeout,
                          uuid=uuid)

    def device_set_layout(self, context: Context, uuid: str,
                          layout: dict[str, Any] | None) -> dict[str, Any]:
        """Apply ``layout`` to the device through its agent (None: clear
        the desired layout); the device after. Invalid listing what is
        allowed, DeviceBusy naming the requests that use it,
        AgentUnavailable (nothing changed), LayoutFailed."""
        return self._call(context, '1.9', 'device_set_layout',
                          rpc_timeout=self._device_action_timeout(),
                          uuid=uuid, layout=layout)

    def device_enable(self, context: Context, uuid: str) -> None:
        """Prepare the device through its agent and enable it;
        PrepareFailed (it is in ``error``), AgentUnavailable (unchanged)."""
        self._call(context, '1.9', 'device_enable',
                   rpc_timeout=self._device_action_timeout(), uuid=uuid)

    def attribute_create(self, context: Context,
                         values: dict[str, Any]) -> dict[str, Any]:
        return self._call(context, '1.1', 'attribute_create', values=values)

    def attribute_delete(self, context: Context, uuid: str) -> None:
        return self._call(context, '1.1', 'attribute_delete', uuid=uuid)

    def deployable_program(self, context: Context, uuid: str,
                           image_uuid: str) -> None:
        """Program an idle FPGA deployable with a Glance image; waits up
        to the bind timeout for its agent (and the RPC timeout)."""
        # The conductor waits up to the bind timeout for the agent.
        timeout = self.conf.conductor.bind_timeout + 30
        return self._call(context, '1.2', 'deployable_program',
                          rpc_timeout=timeout, uuid=uuid,
                          image_uuid=image_uuid)

    def mdevs_owned(self, context: Context, host: str,
                    mdev_uuids: list[str]) -> list[str]:
        """Which of the mdevs named, made on ``host``, an accelerator
        request still holds."""
        return self._call(context, '1.6', 'mdevs_owned', host=host,
                          mdev_uuids=mdev_uuids)

    def mdevs_removed(self, context: Context, host: str,
                      mdev_uuids: list[str]) -> int:
        """Tell that ``host`` removed these mdevs; how many attach handles
        that waited for it were freed."""
        return self._call(context, '1.6', 'mdevs_removed', host=host,
                          mdev_uuids=mdev_uuids)

    def attach_handle_clean(self, context: Context, uuid: str
                            ) -> dict[str, Any]:
        """Clean again an attach handle held in maintenance after a failed
        clean; the handle, ``cleaning`` (the clean runs in the
        background). HandleNotInMaintenance in any other state."""
        return self._call(context, '1.9', 'attach_handle_clean', uuid=uuid)

    def attach_handle_release(self, context: Context, uuid: str
                              ) -> dict[str, Any]:
        """Free an attach handle held in maintenance without cleaning it;
        the handle. HandleNotInMaintenance in any other state."""
        return self._call(context, '1.9', 'attach_handle_release',
                          uuid=uuid)

    def device_health_update(self, context: Context, host: str,
                             updates: list[dict[str, Any]]) -> int:
        """Store the health ``host``'s agent read of the devices whose
        health changed (``device_health.HEALTH_UPDATE_SCHEMA``); how many
        devices' health changed. Placement follows before it returns."""
        return self._call(context, '1.8', 'device_health_update', host=host,
                          updates=updates)

    def device_set_health(self, context: Context, uuid: str,
                          state: str | None, reason: str | None
                          ) -> dict[str, Any]:
        """An operator's health for a device, or None to clear it;
        returns the device as ``devices.to_dict`` after the change."""
        return self._call(context, '1.8', 'device_set_health', uuid=uuid,
                          state=state, reason=reason)

    def host_bindings(self, context: Context, host: str
                      ) -> list[dict[str, Any]]:
        """Each device of ``host`` with its uuid and the instances and
        projects holding it (``devices.host_bindings``)."""
        return self._call(context, '1.8', 'host_bindings', host=host)

    def host_discover(self, context: Context, host: str) -> dict[str, int]:
        """Make the agent of ``host`` discover and report now; wait for it.

        Returns what its report changed, as ``report_data``. Raises
        AgentNotFound, AgentDown, or AgentUnavailable when the agent does
        not answer within the RPC timeout.
        """
        # The conductor waits up to the RPC timeout for the agent.
        timeout = self.conf.rpc_response_timeout + 30
        return self._call(context, '1.3', 'host_discover',
                          rpc_timeout=timeout, host=host)

    # Drivers managed per host (1.9).

    def host_drivers_list(self, context: Context, host: str
                          ) -> list[dict[str, Any]]:
        """Every driver installed on ``host``, from its live agent:
        ``{name, driver_name, version, enabled, state, error}``. Raises
        AgentNotFound, AgentUnavailable."""
        return self._call(context, '1.9', 'host_drivers_list',
                          rpc_timeout=self._agent_timeout(), host=host)

    def host_driver_set_enabled(self, context: Context, host: str,
                                name: str, enabled: bool) -> dict[str, Any]:
        """Enable or disable driver ``name`` on ``host``; its agent
        reports before this returns. Raises UnknownDriver, DriverInUse
        (a disable while requests hold its devices), DriverLoadFailed,
        AgentNotFound and AgentUnavailable."""
        return self._call(context, '1.9', 'host_driver_set_enabled',
                          rpc_timeout=self._agent_timeout(), host=host,
                          name=name, enabled=enabled)

    def host_drivers_reload(self, context: Context, host: str
                            ) -> list[dict[str, Any]]:
        """Reload the drivers of ``host`` from their installed
        packages; the new list."""
        return self._call(context, '1.9', 'host_drivers_reload',
                          rpc_timeout=self._agent_timeout(), host=host)

    def _agent_timeout(self) -> float:
        # The conductor waits up to the RPC timeout for the agent (twice
        # for an enable or disable: the list, then the change).
        return 2 * self.conf.rpc_response_timeout + 30


def _has_lifecycle_drivers(report: dict[str, Any]) -> bool:
    """Whether a report's ``drivers`` say what only 1.9 reads."""
    entries = report.get('drivers')
    return isinstance(entries, dict) and any(
        isinstance(e, dict)
        and ('version' in e or e.get('state') == 'disabled')
        for e in entries.values())


def _rebuild(error: dict[str, Any]) -> exception.CyborgException:
    """The exception a conductor described in an answer of a batch."""
    cls = getattr(exception, error['type'], None)
    if not (isinstance(cls, type)
            and issubclass(cls, exception.CyborgException)):
        cls = exception.CyborgException
    return cls(error['message'], **error.get('kwargs', {}))
