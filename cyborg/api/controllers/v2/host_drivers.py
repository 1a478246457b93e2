"""/v2/hosts/{host}/drivers (microversion 2.8): the drivers installed on
one agent host, enabled and disabled there at runtime, and reloaded."""
from http import HTTPStatus
from typing import Any

import pecan
from pecan import rest
from wsme import types as wtypes

from cyborg.api import schemas
from cyborg.api.controllers import base
from cyborg.api.expose import expose
from cyborg.common import exception

# Entry-point names are Python identifiers in practice; the longest a
# driver_states row holds.
MAX_NAME_LENGTH = 100


class HostDriver(base.Resource):
    """One driver installed on the host, as its agent sees it now."""

    # The entry-point name ([agent] enabled_drivers names drivers by it)
    # and the name its devices and reports carry.
    name = wtypes.text
    driver_name = wtypes.text
    # The version of the package the driver comes from.
    version = wtypes.text
    enabled = bool
    # ok, no devices or failed (the last discovery pass; null before the
    # first), disabled (turned off by an operator), failed with ``error``
    # when it cannot be loaded.
    state = wtypes.text
    error = wtypes.text


class HostDriverChange(HostDriver):
    """The driver after an enable or disable."""

    host = wtypes.text
    # Whether the request changed anything (false: already so).
    changed = bool
    # Whether the agent's report after the change reached a conductor
    # (false: the next periodic report carries it).
    reported = bool


class HostDriverCollection(wtypes.Base):
    host = wtypes.text
    drivers = [HostDriver]


def _collection(host: str, found: list[dict[str, Any]]
                ) -> HostDriverCollection:
    return HostDriverCollection(
        host=host, drivers=[HostDriver.from_dict(d) for d in found])


def _name(value: str) -> str:
    if not value or len(value) > MAX_NAME_LENGTH:
        raise exception.Invalid(
            reason=f'the driver name must be 1 to {MAX_NAME_LENGTH} '
                   f'characters, not {schemas.shown(value)}.')
    return value


class HostDriversController(rest.RestController):
    """The drivers of ``host``; every call asks its agent (404 when no
    agent registered there, 503 when it is down or does not answer)."""

    # POST /hosts/{host}/drivers/{name}/enable, .../{name}/disable and
    # /hosts/{host}/drivers/reload.
    _custom_actions = {'enable': ['POST'], 'disable': ['POST'],
                       'reload': ['POST']}

    def __init__(self, host: str) -> None:
        self.host = host

    @expose(HostDriverCollection)
    def get_all(self) -> HostDriverCollection:
        ctx = base.authorize('cyborg:host:driver_list')
        return _collection(self.host, pecan.request.conductor_api
                           .host_drivers_list(ctx, self.host))

    def _set(self, name: str, enabled: bool) -> HostDriverChange:
        ctx = base.authorize('cyborg:host:driver_enable' if enabled
                             else 'cyborg:host:driver_disable')
        result = pecan.request.conductor_api.host_driver_set_enabled(
            ctx, self.host, _name(name), enabled)
        return HostDriverChange.from_dict(dict(result, host=self.host))

    @expose(HostDriverChange, wtypes.text, status_code=HTTPStatus.OK)
    def enable(self, name: str) -> HostDriverChange:
        """Load the driver and keep it enabled on this host."""
        return self._set(name, True)

    @expose(HostDriverChange, wtypes.text, status_code=HTTPStatus.OK)
    def disable(self, name: str) -> HostDriverChange:
        """Unload the driver; its devices leave (409 naming the requests
        while any holds one)."""
        return self._set(name, False)

    @expose(HostDriverCollection, status_code=HTTPStatus.OK)
    def reload(self) -> HostDriverCollection:
        """Load the drivers again from the installed packages."""
        ctx = base.authorize('cyborg:host:driver_reload')
        return _collection(self.host, pecan.request.conductor_api
                           .host_drivers_reload(ctx, self.host))
