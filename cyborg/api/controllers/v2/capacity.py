"""/v2/capacity (microversion 2.7): how many accelerators there are, in
use, held back and free, per host, resource class or trait; paged from
2.12."""
from collections.abc import Mapping
from typing import Any

from pecan import rest
from wsme import exc as wsme_exc
from wsme import types as wtypes

from cyborg.api import schemas
from cyborg.api.controllers import base
from cyborg.api.expose import expose
from cyborg.api.versions import Microversion
from cyborg.common import exception
from cyborg.common.device_report import DEVICE_TYPES
from cyborg.db.api import capacity


class Capacity(base.Resource):
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

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> 'Capacity':
        # A row has the one key it is grouped by: the other two stay
        # unset, and out of the response.
        return cls(**values)


class CapacityCollection(wtypes.Base):
    capacity = [Capacity]
    group_by = wtypes.text
    # From 2.12, when more groups follow this page.
    next = wtypes.text


class CapacityController(rest.RestController):

    @expose(CapacityCollection, wtypes.text, wtypes.text, wtypes.text,
            wtypes.text, wtypes.text, wtypes.text)
    def get_all(self, group_by: str | None = None,
                hostname: str | None = None,
                resource_class: str | None = None,
                type: str | None = None, limit: str | None = None,
                marker: str | None = None) -> CapacityCollection:
        """One row per group, ordered by its key; from 2.12 a page of
        them after ``marker`` (the key of the last group seen)."""
        ctx = base.authorize('cyborg:capacity:get')
        if not base.version_at_least(Microversion.CAPACITY_PAGES):
            # What 2.7-2.11 answered before the parameters existed:
            # WSME's 400 for an argument the method does not take.
            unknown = [name for name, value in (('limit', limit),
                                                ('marker', marker))
                       if value is not None]
            if unknown:
                raise wsme_exc.UnknownArgument(', '.join(unknown))
        group_by = 'host' if group_by is None else group_by
        for name, value, allowed in (
                ('group_by', group_by, tuple(capacity.GROUP_KEYS)),
                ('type', type, DEVICE_TYPES)):
            if value is not None and value not in allowed:
                raise exception.Invalid(
                    reason=f'{name} must be one of {", ".join(allowed)}, '
                           f'not {schemas.shown(value)}.')
        page = base.Page(limit, marker, key=capacity.GROUP_KEYS[group_by])
        found, more = capacity.get_page(
            ctx, group_by=group_by, hostname=hostname,
            resource_class=resource_class, type=type, size=page.size,
            marker=page.marker if isinstance(page.marker, str) else None)
        result = page.collection(CapacityCollection, 'capacity', Capacity,
                                 'capacity', found, more)
        result.group_by = group_by
        return result
