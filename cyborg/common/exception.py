"""cyborg's exceptions: one base class with a message format and an HTTP code.

The REST API maps ``code`` to the response status in one place; RPC servers
list the classes they may raise so that callers receive them as they are.
"""
from typing import Any


class CyborgException(Exception):
    """Base class: ``msg_fmt`` is filled in with the keyword arguments."""

    msg_fmt = 'An unknown error occurred.'
    code = 500

    def __init__(self, message: str | None = None, **kwargs: Any) -> None:
        self.kwargs = kwargs
        if message is None:
            try:
                message = self.msg_fmt % kwargs
            except (KeyError, TypeError):
                # A caller passed the wrong arguments; keep the template
                # rather than hiding the original error behind this one.
                message = self.msg_fmt
        self.message = message
        super().__init__(message)


class Invalid(CyborgException):
    msg_fmt = 'Invalid input: %(reason)s'
    code = 400


class InvalidReport(Invalid):
    msg_fmt = 'Invalid device report from host %(host)s: %(reason)s'


class NotFound(CyborgException):
    msg_fmt = 'The resource could not be found.'
    code = 404


class ResourceNotFound(NotFound):
    msg_fmt = '%(resource)s %(id)s could not be found.'


class DeviceProfileNotFound(NotFound):
    msg_fmt = 'Device profile %(name)s could not be found.'


class DeviceProfileProjectNotFound(NotFound):
    msg_fmt = ('Project %(project_id)s is not in the access list of device '
               'profile %(name)s.')


class ARQNotFound(NotFound):
    msg_fmt = 'Accelerator request(s) %(uuids)s could not be found.'


class NotAuthorized(CyborgException):
    msg_fmt = 'Not authorized.'
    code = 401


class Forbidden(CyborgException):
    msg_fmt = 'Forbidden: %(reason)s'
    code = 403


class PolicyNotAuthorized(Forbidden):
    msg_fmt = 'Access was denied to the following resource: %(action)s'


class OverLimit(Forbidden):
    """A create or a bind that would take a project over one of its
    limits (Keystone's unified limits, see ``cyborg.db.api.usage``):
    refused whole, nothing of it written. ``over`` lists each limit gone
    over as {resource, limit, usage, delta}."""

    msg_fmt = 'Project %(project)s is over a limit.'

    @classmethod
    def of(cls, project: str, over: list[dict[str, Any]],
           unregistered: frozenset[str] = frozenset()) -> 'OverLimit':
        """The refusal of ``project``'s write, from each limit it goes
        over; those of ``unregistered`` resources are 0 for want of a
        registered limit, which the message says."""
        sentences = []
        for item in over:
            asks = ('makes' if item['resource'] == 'accelerator_requests'
                    else 'binds')
            sentence = (f'Project {project} is over its limit of '
                        f'{item["limit"]} for {item["resource"]}: it holds '
                        f'{item["usage"]} and this request {asks} '
                        f'{item["delta"]}.')
            if item['resource'] in unregistered:
                sentence += (f' No limit is registered for '
                             f'{item["resource"]} in Keystone, which makes '
                             'it 0 ([quota] unified_limits_resource_list).')
            sentences.append(sentence)
        return cls(' '.join(sentences), project=project, over=over)


class NotAcceptable(CyborgException):
    msg_fmt = 'Not acceptable: %(reason)s'
    code = 406


class Locked(CyborgException):
    msg_fmt = 'Locked: %(reason)s'
    code = 423


class ServiceUnavailable(CyborgException):
    msg_fmt = 'Service unavailable: %(reason)s'
    code = 503


class DatabaseUnavailable(ServiceUnavailable):
    """The database cannot be reached; the driver's own error, which names
    hosts and addresses, is the ``__cause__`` and goes to the log only."""

    msg_fmt = ('Service unavailable: cyborg cannot reach its database; '
               'retry later.')


class MessageBusUnreachable(ServiceUnavailable):
    """A service's call to its own RPC server got no answer: the broker,
    or the process's link to it, does not carry messages."""

    msg_fmt = 'Service unavailable: the message bus: %(reason)s.'


class CallExpired(ServiceUnavailable):
    """An RPC call reached its server after its deadline
    (``cyborg.common.rpc_deadline``)."""

    msg_fmt = ('Service unavailable: the RPC call %(method)s reached its '
               'server after its deadline; nothing was done.')


class LimitsUnavailable(ServiceUnavailable):
    """Keystone could not say a project's limits while limits are on
    (``[quota] driver``): nothing is written unchecked. What went wrong,
    which may name hosts, goes to the conductor's log."""

    msg_fmt = ('Service unavailable: cyborg cannot read the limits of '
               'project(s) %(projects)s from Keystone (the identity '
               'service) to check this request; retry later.')


class IdempotencyKeyReused(CyborgException):
    """A create whose Idempotency-Key an earlier create of the project
    used for another device profile (microversion 2.11): 422, as
    draft-ietf-httpapi-idempotency-key-header answers a key reused with
    another request body."""

    msg_fmt = ('Idempotency-Key %(key)r was used for device profile '
               '%(used)s by an earlier create of this project, not for '
               '%(asked)s; send another key to create requests of '
               '%(asked)s.')
    code = 422


class LegacyServerError(CyborgException):
    """An error that API versions before 2.4 answer with 500, as clients
    written against them (and their tests) expect; 2.4 answers 400."""

    msg_fmt = '%(reason)s'
    code = 500


class Conflict(CyborgException):
    msg_fmt = 'Conflict: %(reason)s'
    code = 409


class ARQBadState(Conflict):
    msg_fmt = ('Accelerator request %(uuid)s is %(state)s; %(action)s needs '
               'one of: %(expected)s.')


class BindRefused(Conflict):
    """Binds that cannot be made with the devices as they are: the whole
    PATCH is refused and nothing of it is written, so that its caller
    (nova-conductor) gets the failure while it can still act on it.

    Nova's ``bind_arqs`` turns any answer that is not 2xx into
    AcceleratorRequestBindingFailed, deletes the requests and fails the
    build (or its reschedule) without looking at the code; 409 is the one
    that says what happened: the PATCH is well formed, and the device,
    its handles or the images are not in a state to serve it now.
    """

    msg_fmt = ('Cannot bind accelerator request(s) %(uuids)s; nothing of '
               'this PATCH was applied. %(reasons)s')

    @classmethod
    def of(cls, refusals: dict[str, str]) -> 'BindRefused':
        """The refusal of a PATCH, from why each request cannot bind."""
        return cls(uuids=', '.join(sorted(refusals)),
                   reasons=' '.join(
                       f'Accelerator request {uuid}: {why.rstrip(".")}.'
                       for uuid, why in sorted(refusals.items())))


class DuplicateDeviceProfileName(Conflict):
    msg_fmt = 'A device profile named %(name)s already exists.'


class DuplicateDeviceProfileUUID(Conflict):
    msg_fmt = 'A device profile with uuid %(uuid)s already exists.'


class ProgramNotSupported(Conflict):
    msg_fmt = ('Deployable %(uuid)s (driver %(driver)s) cannot be '
               'programmed: the driver has no programming support.')


class ProgramFailed(Conflict):
    msg_fmt = 'Programming deployable %(uuid)s failed: %(reason)s'


class DeployableBusy(Conflict):
    msg_fmt = 'Deployable %(uuid)s cannot be programmed now: %(reason)s.'


class DeviceBusy(Conflict):
    msg_fmt = 'Device %(uuid)s cannot %(action)s now: %(reason)s.'


class LayoutFailed(Conflict):
    msg_fmt = ('The layout of device %(uuid)s failed and the device is held '
               'back: %(reason)s. Set a layout again, or clear it.')


class PrepareFailed(Conflict):
    msg_fmt = ('Device %(uuid)s could not be prepared and is in error: '
               '%(reason)s. Fix the cause and enable it again.')


class HandleNotInMaintenance(Conflict):
    msg_fmt = ('Attach handle %(uuid)s is %(state)s; only a handle in '
               'maintenance (after a failed clean) can be given to '
               '%(action)s.')


class ReportConflict(Conflict):
    msg_fmt = ('The device report from host %(host)s conflicts with what '
               'another host reported: %(reason)s')


class PlacementError(CyborgException):
    """Placement answered with an error; ``code`` is its error code."""

    msg_fmt = ('Placement %(method)s %(url)s failed with %(status)s '
               '%(error_code)s: %(detail)s')

    @property
    def error_code(self) -> str:
        return self.kwargs.get('error_code', '')


class PlacementGenerationConflict(PlacementError):
    """Another writer changed the provider since its generation was read."""


class PlacementProviderInUse(PlacementError):
    """The provider (or an inventory) still has allocations."""


class PlacementNoRoom(PlacementError):
    """An allocation asks a provider for more than it has free, or for a
    resource class it has no inventory of."""


class ComputeNodeNotFound(NotFound):
    msg_fmt = ('No compute node resource provider named %(hostname)s in '
               'placement yet.')


class DriverNotFound(CyborgException):
    msg_fmt = ('Unknown accelerator driver(s) in [agent] enabled_drivers: '
               '%(names)s. Available drivers: %(available)s.')


class DriverError(CyborgException):
    msg_fmt = 'Driver %(driver)s failed: %(reason)s'


class UnknownDriver(Invalid):
    msg_fmt = ('No driver named %(name)s is installed on host %(host)s; '
               'installed: %(installed)s.')


class DriverLoadFailed(Conflict):
    msg_fmt = ('Driver %(name)s cannot be loaded on host %(host)s; nothing '
               'changed: %(reason)s')


class DriverInUse(Conflict):
    msg_fmt = ('Driver %(name)s cannot be disabled on host %(host)s while '
               'accelerator requests hold its devices: %(arqs)s. Unbind or '
               'delete them first.')


class DBNotReachable(CyborgException):
    msg_fmt = 'Cannot reach the database at %(url)s: %(reason)s'


class ForeignDatabase(CyborgException):
    """A database that holds something a migration was not written for."""

    msg_fmt = 'The database at %(url)s holds %(found)s. %(advice)s'


class AdoptionRefused(CyborgException):
    msg_fmt = ('Cannot adopt the database at %(url)s: %(reason)s '
               'Nothing was changed.')


class AdoptionRolledBack(AdoptionRefused):
    """An adoption that had set the upstream tables aside and gave them
    their names back."""

    msg_fmt = ('Cannot adopt the database at %(url)s: %(reason)s Its '
               'OpenStack Cyborg tables have their own names back and '
               "cyborg's tables were dropped: the database is as it was "
               'before the adoption started. Fix what is named and run '
               '"cyborg-dbsync adopt" again.')


class NotSupported(CyborgException):
    msg_fmt = '%(what)s is not supported.'


class AgentUnavailable(ServiceUnavailable):
    msg_fmt = 'The cyborg-agent on host %(host)s is unavailable: %(reason)s'


class AgentNotFound(NotFound):
    msg_fmt = ('No cyborg-agent has registered on host %(host)s (agents '
               'register with their [DEFAULT] host).')


class AgentDown(Conflict):
    msg_fmt = ('The cyborg-agent on host %(host)s is down: its last '
               'heartbeat was at %(last_seen)s, more than %(down_time)s '
               'seconds ago ([DEFAULT] service_down_time).')


class BitstreamNotFound(NotFound):
    msg_fmt = 'Bitstream %(what)s could not be found in the image service.'


class BitstreamError(CyborgException):
    msg_fmt = 'Bitstream %(what)s: %(reason)s'


class DeviceActionError(CyborgException):
    """Device-side work (programming an FPGA, creating a mediated device)
    failed; ``action`` and ``device`` say which, when the raiser knows."""

    msg_fmt = 'Cannot %(action)s on %(device)s: %(reason)s'

    def __init__(self, message: str | None = None, **kwargs: Any) -> None:
        if message is None and not {'action', 'device'} <= kwargs.keys():
            message = f'Device action failed: {kwargs.get("reason")}'
        super().__init__(message, **kwargs)
