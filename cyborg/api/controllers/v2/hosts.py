"""/v2/hosts/{host}/discover (microversion 2.5): make an agent report now."""
from http import HTTPStatus
from typing import Any

import pecan
from pecan import rest
from wsme import types as wtypes

from cyborg.api.controllers import base
from cyborg.api.expose import expose


class Discovery(wtypes.Base):
    """What the agent's report changed in the database."""

    host = wtypes.text
    devices_added = int
    devices_updated = int
    devices_removed = int
    # Devices the host no longer reports but instances still hold.
    kept_in_use = int
    # Resource providers still to be written to placement; -1 when the
    # placement sync failed (the periodic sync tries again).
    placement_pending = int

    @classmethod
    def from_dict(cls, host: str, values: dict[str, Any]) -> 'Discovery':
        return cls(host=host, **{name: values.get(name, 0) for name in (
            'devices_added', 'devices_updated', 'devices_removed',
            'kept_in_use', 'placement_pending')})


class HostsController(rest.RestController):

    # POST /hosts/{host}/discover
    _custom_actions = {'discover': ['POST']}

    @expose(Discovery, wtypes.text, status_code=HTTPStatus.OK)
    def discover(self, host: str) -> Discovery:
        """Discover the host's devices now and wait for the report.

        404 when no agent registered on ``host``, 409 when its agent is
        down, 503 when it does not answer.
        """
        ctx = base.authorize('cyborg:host:discover')
        result = pecan.request.conductor_api.host_discover(ctx, host)
        return Discovery.from_dict(host, result)
