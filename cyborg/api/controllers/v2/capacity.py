"""/v2/capacity (microversion 2.7): how many accelerators there are, in
use, held back and free, per host, resource class or trait."""
from pecan import rest
from wsme import types as wtypes

from cyborg.api import schemas
from cyborg.api.controllers import base
from cyborg.api.expose import expose
from cyborg.common import exception
from cyborg.common.device_report import DEVICE_TYPES
from cyborg.db.api import capacity


class Capacity(wtypes.Base):
    """One group's accelerators (see ``capacity.get``). Its key is the
    one attribute of the three that is set, as grouped: the others are
    left out of the response."""

    hostname = wtypes.text
    resource_class = wtypes.text
    trait = wtypes.text
    total = int
    used = int
    reserved = int
    unhealthy = int
    available = int


class CapacityCollection(wtypes.Base):
    capacity = [Capacity]
    group_by = wtypes.text


class CapacityController(rest.RestController):

    @expose(CapacityCollection, wtypes.text, wtypes.text, wtypes.text,
            wtypes.text)
    def get_all(self, group_by: str | None = None,
                hostname: str | None = None,
                resource_class: str | None = None,
                type: str | None = None) -> CapacityCollection:
        """One row per group; a summary, so not paginated."""
        ctx = base.authorize('cyborg:capacity:get')
        group_by = 'host' if group_by is None else group_by
        for name, value, allowed in (
                ('group_by', group_by, tuple(capacity.GROUP_KEYS)),
                ('type', type, DEVICE_TYPES)):
            if value is not None and value not in allowed:
                raise exception.Invalid(
                    reason=f'{name} must be one of {", ".join(allowed)}, '
                           f'not {schemas.shown(value)}.')
        found = capacity.get(ctx, group_by=group_by, hostname=hostname,
                             resource_class=resource_class, type=type)
        return CapacityCollection(
            capacity=[Capacity(**row) for row in found],
            group_by=group_by)
