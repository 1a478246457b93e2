"""/v2/drivers (microversion 2.5): what each agent's drivers found."""
from typing import Any

from pecan import rest
from wsme import types as wtypes

from cyborg.api.controllers import base
from cyborg.api.expose import expose
from cyborg.db.api import drivers


class Driver(wtypes.Base):
    """One driver on one agent host and what it reported there.

    Only drivers that reported devices are listed: the database keeps
    what agents found, not which drivers they loaded.
    """

    host = wtypes.text
    hostname = wtypes.text
    driver_name = wtypes.text
    devices = int
    deployables = int
    accelerators = int

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> 'Driver':
        return cls(**values)


class DriverCollection(wtypes.Base):
    drivers = [Driver]


class DriversController(rest.RestController):

    @expose(DriverCollection, wtypes.text, wtypes.text)
    def get_all(self, host: str | None = None,
                driver_name: str | None = None) -> DriverCollection:
        """One row per (host, driver); a summary, so not paginated."""
        ctx = base.authorize('cyborg:driver:get_all')
        found = drivers.get_all(ctx, host=host, driver_name=driver_name)
        return DriverCollection(drivers=[Driver.from_dict(d)
                                         for d in found])
