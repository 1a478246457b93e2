"""/v2/drivers (microversion 2.5): what each agent's drivers found, and
how they last fared; their package versions from 2.8."""
from pecan import rest
from wsme import types as wtypes

from cyborg.api import schemas
from cyborg.api.controllers import base
from cyborg.api.expose import expose
from cyborg.api.versions import Microversion
from cyborg.common import exception
from cyborg.db import models
from cyborg.db.api import drivers


class Driver(base.Resource):
    """One driver on one agent host: what it reported there, and its
    state.

    Every driver an agent runs is listed, with or without devices, once
    the agent reported driver states; drivers of agents that report none
    are listed when they reported devices, with a null ``state``.
    """

    host = wtypes.text
    hostname = wtypes.text
    driver_name = wtypes.text
    devices = int
    deployables = int
    accelerators = int
    # 'ok', 'no devices' or 'failed', as the last report said, or (2.8)
    # 'disabled' by an operator on the host; the error of a failed
    # driver; since when it is in this state (for 'failed': the first
    # failure in a row).
    state = wtypes.text
    error = wtypes.text
    since = base.timestamp_field()
    # The version of the package the agent loaded the driver from (2.8;
    # null until an agent of 2.8 reported it).
    version = base.Field(wtypes.text, since=Microversion.LIFECYCLE)
    # 'up' or 'down' (no heartbeat for [DEFAULT] service_down_time: the
    # state is the last one the agent reported); null when no agent of
    # the host ever registered.
    agent_state = base.Field(wtypes.text, source='agent_alive',
                             convert=base.up_or_down)


class DriverCollection(wtypes.Base):
    drivers = [Driver]


class DriversController(rest.RestController):

    @expose(DriverCollection, wtypes.text, wtypes.text, wtypes.text)
    def get_all(self, host: str | None = None,
                driver_name: str | None = None,
                state: str | None = None) -> DriverCollection:
        """One row per (host, driver); a summary, so not paginated."""
        ctx = base.authorize('cyborg:driver:get_all')
        if state is not None and state not in models.DRIVER_STATES:
            raise exception.Invalid(
                reason=f'state must be one of '
                       f'{", ".join(models.DRIVER_STATES)}, not '
                       f'{schemas.shown(state)}.')
        found = drivers.get_all(ctx, host=host, driver_name=driver_name,
                                state=state,
                                down_time=base.conf().service_down_time)
        return DriverCollection(drivers=[Driver.from_dict(d)
                                         for d in found])
