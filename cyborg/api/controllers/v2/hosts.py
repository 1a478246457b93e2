"""/v2/hosts/{host}/discover (microversion 2.5): make an agent report now;
/v2/hosts/{host}/drivers (2.8): see ``host_drivers``."""
from http import HTTPStatus

import pecan
from pecan import rest
from wsme import types as wtypes

from cyborg.api.controllers import base
from cyborg.api.controllers.v2 import host_drivers
from cyborg.api.expose import expose


def _count() -> base.Field:
    # 0 for a count the agent's answer lacks.
    return base.Field(int, default=0)


class Discovery(base.Resource):
    """What the agent's report changed in the database."""

    host = wtypes.text
    devices_added = _count()
    devices_updated = _count()
    devices_removed = _count()
    # Devices the host no longer reports but instances still hold.
    kept_in_use = _count()
    # Resource providers still to be written to placement; -1 when the
    # placement sync failed (the periodic sync tries again).
    placement_pending = _count()


class HostsController(rest.RestController):

    # POST /hosts/{host}/discover
    _custom_actions = {'discover': ['POST']}

    @pecan.expose()
    def _lookup(self, host: str, *remainder: str
                ) -> tuple[host_drivers.HostDriversController,
                           tuple[str, ...]] | None:
        """``/hosts/{host}/drivers...``; None for the other paths below
        a host, which the custom actions serve (pecan asks here first when
        a path has more segments than the action's arguments)."""
        if not remainder or remainder[0] != 'drivers':
            return None
        return host_drivers.HostDriversController(host), remainder[1:]

    @expose(Discovery, wtypes.text, status_code=HTTPStatus.OK)
    def discover(self, host: str) -> Discovery:
        """Discover the host's devices now and wait for the report.

        404 when no agent registered on ``host``, 409 when its agent is
        down, 503 when it does not answer.
        """
        ctx = base.authorize('cyborg:host:discover')
        result = pecan.request.conductor_api.host_discover(ctx, host)
        return Discovery.from_dict(dict(result, host=host))
