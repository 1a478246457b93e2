"""Client side of the conductor RPC API."""
import logging
from typing import Any

import oslo_messaging as messaging
from oslo_config import cfg

from cyborg import context as cyborg_context
from cyborg.common import exception
from cyborg.common import rpc

LOG = logging.getLogger(__name__)

Context = cyborg_context.RequestContext


class OlderConductor(Exception):
    """A call not made: an ``[upgrade_levels] conductor`` cap is below its
    version, or a conductor refused the version before doing anything."""


# What a create does for a conductor before 1.12 (see arq_create).
_CREATE_AS_BEFORE = ('creating accelerator requests as before 1.12, with no '
                     'regard for private device profiles')
# What a create with an idempotency key gets from conductors before 1.13
# (see arq_create): a conductor that dropped the key would create anew
# what the client means to create once.
_KEY_REFUSED = ('creates with an Idempotency-Key (microversion 2.11) are '
                'refused until every cyborg-conductor takes RPC 1.13 and '
                '[upgrade_levels] conductor allows it; nothing was created')


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
    * 1.12 - Private device profiles: ``device_profile_create`` takes
      ``is_public`` in its values; ``device_profile_set_public``,
      ``device_profile_add_project``, ``device_profile_remove_project``;
      ``arq_create`` takes ``all_projects`` and ``arq_create_many``'s
      items carry it (without it, a caller sees only public profiles and
      those of its project).
    * 1.13 - ``arq_create`` takes ``idempotency_key`` and the items of
      ``arq_create_many`` may carry it: a create repeated with its key
      answers the requests the first made (``arqs.create_many``).
    """

    RPC_API_VERSION = '1.13'

    def __init__(self, conf: cfg.ConfigOpts) -> None:
        self.conf = conf
        target = messaging.Target(topic=rpc.CONDUCTOR_TOPIC,
                                  version=self.RPC_API_VERSION)
        self.client = rpc.get_client(
            target, version_cap=conf.upgrade_levels.conductor)

    def can_send_version(self, version: str) -> bool:
        """Whether ``[upgrade_levels] conductor`` lets calls of
        ``version`` go."""
        return bool(self.client.can_send_version(version))

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
        """``_call`` at ``version``; OlderConductor when an
        ``[upgrade_levels] conductor`` cap is below it or a conductor
        refuses it (before doing anything; logged, with what the caller
        does ``instead``)."""
        if not self.client.can_send_version(version):
            raise OlderConductor(version)
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
        raise OlderConductor(version)

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
            try:
                return self._call_newer(
                    context, '1.9', 'report_data',
                    'reporting without driver versions and disabled '
                    'drivers', host=host, report=report)
            except OlderConductor:
                report = dict(report, drivers={
                    name: {k: v for k, v in entry.items() if k != 'version'}
                    for name, entry in report['drivers'].items()
                    if entry.get('state') != 'disabled'})
        if isinstance(report, dict) and 'drivers' in report:
            try:
                return self._call_newer(
                    context, '1.5', 'report_data',
                    'reporting without driver states', host=host,
                    report=report)
            except OlderConductor:
                report = {k: v for k, v in report.items() if k != 'drivers'}
        return self._call(context, '1.0', 'report_data', host=host,
                          report=report)

    def service_heartbeat(self, context: Context, host: str, binary: str,
                          version: str, hostname: str | None = None) -> None:
        """Record that a service is alive; fire and forget.

        Sent with at most ``rpc.CALL_RETRY`` reconnections, as calls are:
        with oslo.messaging's default (for ever) a heartbeat pass would
        wait for the whole of a broker outage, and its task look stuck to
        the agent's liveness probe, instead of failing as an outage of the
        message bus.
        """
        cctxt = self.client.prepare(version='1.0', retry=rpc.CALL_RETRY)
        cctxt.cast(context, 'service_heartbeat', host=host, binary=binary,
                   version=version, hostname=hostname)

    def device_profile_create(self, context: Context,
                              values: dict[str, Any]) -> dict[str, Any]:
        """A private profile (``values['is_public']`` false) needs 1.12:
        a conductor before it would make it public. Values without
        ``is_public``, or with it true, go as 1.1 values."""
        if values.get('is_public', True):
            values = {k: v for k, v in values.items() if k != 'is_public'}
            return self._call(context, '1.1', 'device_profile_create',
                              values=values)
        return self._call(context, '1.12', 'device_profile_create',
                          values=values)

    def device_profile_delete(self, context: Context, uuids: list[str],
                              names: list[str]) -> None:
        """Delete every named profile, or none if one is missing."""
        return self._call(context, '1.1', 'device_profile_delete',
                          uuids=uuids, names=names)

    # Who may use a private profile (1.12): the profile is named by
    # ``uuid`` or ``name``.

    def device_profile_set_public(self, context: Context, is_public: bool,
                                  uuid: str | None = None,
                                  name: str | None = None
                                  ) -> dict[str, Any]:
        """Make a profile public or private; the profile after."""
        return self._call(context, '1.12', 'device_profile_set_public',
                          is_public=is_public, uuid=uuid, name=name)

    def device_profile_add_project(self, context: Context, project_id: str,
                                   uuid: str | None = None,
                                   name: str | None = None) -> None:
        """Add a project to a profile's access list (nothing if there)."""
        self._call(context, '1.12', 'device_profile_add_project',
                   project_id=project_id, uuid=uuid, name=name)

    def device_profile_remove_project(self, context: Context,
                                      project_id: str,
                                      uuid: str | None = None,
                                      name: str | None = None) -> None:
        """Take a project out of a profile's access list;
        DeviceProfileProjectNotFound when it is not in it."""
        self._call(context, '1.12', 'device_profile_remove_project',
                   project_id=project_id, uuid=uuid, name=name)

    # The API's writes on accelerator requests: one HTTP request per call,
    # or (1.4, 1.11) several in one call, each answered on its own (see
    # rpc_batching, which makes those batches).

    def arq_create(self, context: Context, profile_name: str,
                   project_id: str | None, all_projects: bool = False,
                   idempotency_key: str | None = None
                   ) -> list[dict[str, Any]]:
        """One accelerator request per accelerator the profile asks for.

        ``all_projects``: the caller may use every private profile, not
        only those of ``project_id`` (1.12). Under an ``[upgrade_levels]
        conductor`` cap below 1.12, or when a conductor refuses 1.12
        (logged), the call goes as 1.1, which conductors of 1.12 answer as
        for a caller of ``project_id`` alone, and those before it as they
        always did: the cap also refuses making a profile private, and
        the upgrade notes say to make none private before every conductor
        takes 1.12.

        ``idempotency_key`` (1.13): the requests an earlier create of the
        project made with the key, if any (``arqs.create_many``). A create
        with a key goes to no conductor that would drop the key and
        create again what the client means to create once: under a cap
        below 1.13, or when a conductor refuses 1.13, it is refused
        (ServiceUnavailable), nothing created.
        """
        if idempotency_key is not None:
            try:
                return self._call_newer(
                    context, '1.13', 'arq_create', _KEY_REFUSED,
                    profile_name=profile_name, project_id=project_id,
                    all_projects=all_projects,
                    idempotency_key=idempotency_key)
            except OlderConductor:
                raise exception.ServiceUnavailable(
                    reason=_KEY_REFUSED) from None
        try:
            return self._call_newer(
                context, '1.12', 'arq_create', _CREATE_AS_BEFORE,
                profile_name=profile_name, project_id=project_id,
                all_projects=all_projects)
        except OlderConductor:
            return self._call(context, '1.1', 'arq_create',
                              profile_name=profile_name,
                              project_id=project_id)

    def arq_create_many(self, context: Context,
                        requests: list[dict[str, Any]]
                        ) -> list[list[dict[str, Any]] | Exception]:
        """``arq_create`` for several HTTP requests (1.4): each of
        ``requests`` is ``{"profile_name", "project_id", "request_id"}``,
        and ``"all_projects"`` (1.12; dropped where ``arq_create`` drops
        it), and ``"idempotency_key"`` when it has one (1.13; when
        conductors do not take 1.13, OlderConductor, logged, and the
        caller sends each request on its own, see ``arq_create``). One
        result per request, in order: its requests, or the
        CyborgException that refused it alone."""
        if any('idempotency_key' in r for r in requests):
            answers = self._call_newer(context, '1.13', 'arq_create_many',
                                       _KEY_REFUSED, requests=requests)
        else:
            try:
                answers = self._call_newer(
                    context, '1.12', 'arq_create_many', _CREATE_AS_BEFORE,
                    requests=requests)
            except OlderConductor:
                answers = self._call(
                    context, '1.4', 'arq_create_many', requests=[
                        {k: v for k, v in r.items() if k != 'all_projects'}
                        for r in requests])
        return [answer['arqs'] if 'arqs' in answer
                else _rebuild(answer['error']) for answer in answers]

    def arq_apply_patch(self, context: Context,
                        binds: dict[str, dict[str, Any]],
                        unbinds: list[str], live: bool = False) -> None:
        """Bind and unbind a batch of accelerator requests; ``live``
        (1.10) as ``arq_bindings.apply_patch`` takes it."""
        if live:
            self._call(context, '1.10', 'arq_apply_patch', binds=binds,
                       unbinds=unbinds, live=True)
        else:
            self._call(context, '1.1', 'arq_apply_patch', binds=binds,
                       unbinds=unbinds)

    def arq_apply_patches(self, context: Context,
                          patches: list[dict[str, Any]]
                          ) -> list[Exception | None]:
        """``arq_apply_patch`` for several HTTP requests (1.11): each of
        ``patches`` is ``{"binds", "unbinds", "live", "request_id"}``.
        One result per PATCH, in order: None, or the CyborgException that
        refused it alone. OlderConductor (logged) when conductors do not
        take 1.11: the caller sends each PATCH on its own."""
        return _results(self._call_newer(
            context, '1.11', 'arq_apply_patches',
            'sending each request on its own', patches=patches))

    def arq_delete(self, context: Context, uuids: list[str] | None = None,
                   instance_uuid: str | None = None,
                   project_id: str | None = None) -> None:
        """Unbind and delete requests by uuid, or by instance.

        By instance with ``project_id``, only that project's requests go;
        ``uuids`` then names those the caller found, which conductors
        before 1.7 (that would delete every project's) are sent instead.
        """
        if instance_uuid is not None and project_id is not None:
            try:
                self._call_newer(
                    context, '1.7', 'arq_delete',
                    "deleting the project's requests of the instance by "
                    'uuid', instance_uuid=instance_uuid,
                    project_id=project_id)
                return None
            except OlderConductor:
                if not uuids:
                    return None
                instance_uuid = None
        self._call(context, '1.1', 'arq_delete', uuids=uuids,
                   instance_uuid=instance_uuid)
        return None

    def arq_delete_many(self, context: Context,
                        deletes: list[dict[str, Any]]
                        ) -> list[Exception | None]:
        """``arq_delete`` for several HTTP requests (1.11): each of
        ``deletes`` is ``{"uuids", "instance_uuid", "project_id",
        "request_id"}``; answered as ``arq_apply_patches``."""
        return _results(self._call_newer(
            context, '1.11', 'arq_delete_many',
            'sending each request on its own', deletes=deletes))

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


def _results(answers: list[dict[str, Any]]) -> list[Exception | None]:
    """The results of the answers of a batch call without a value."""
    return [_rebuild(answer['error']) if 'error' in answer else None
            for answer in answers]


def _rebuild(error: dict[str, Any]) -> exception.CyborgException:
    """The exception a conductor described in an answer of a batch."""
    cls = getattr(exception, error['type'], None)
    if not (isinstance(cls, type)
            and issubclass(cls, exception.CyborgException)):
        cls = exception.CyborgException
    return cls(error['message'], **error.get('kwargs', {}))
