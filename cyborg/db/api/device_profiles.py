"""Device profiles: named lists of request groups that flavors refer to."""
import json
import uuid as uuid_lib
from typing import Any

import sqlalchemy as sa
from oslo_db import exception as db_exc

from cyborg import context as cyborg_context
from cyborg.common import exception
from cyborg.db import models
from cyborg.db.api import query
from cyborg.db.api import reader
from cyborg.db.api import writer

DP = models.DeviceProfile

# Standard resource classes whose amount counts no accelerator: a group
# asks for them along with a device (its display heads, its bandwidth),
# and no accelerator request is made for them.
AMOUNT_CLASSES = frozenset([
    'VGPU_DISPLAY_HEAD', 'NET_BW_EGR_KILOBIT_PER_SEC',
    'NET_BW_IGR_KILOBIT_PER_SEC', 'MEM_ENCRYPTION_CONTEXT'])
RESOURCES = 'resources:'


def accelerator_count(group: dict[str, str]) -> int:
    """How many accelerators, so accelerator requests, a request group
    asks for: the sum of its resources that are not amounts."""
    return sum(int(value) for key, value in group.items()
               if key.startswith(RESOURCES)
               and key[len(RESOURCES):] not in AMOUNT_CLASSES)


def too_many_accelerators(groups: list[dict[str, str]], per_group: int,
                          per_profile: int) -> str | None:
    """What is wrong when a group asks for more accelerators than
    ``per_group`` ([api] max_accelerators_per_group), or all of them for
    more than ``per_profile`` ([api] max_accelerators_per_profile; each
    accelerator is a request that every instance of the profile creates);
    None when nothing is."""
    counts = [accelerator_count(group) for group in groups]
    for index, count in enumerate(counts):
        if count > per_group:
            return (f'groups/{index} asks for {count} accelerators; a '
                    f'group asks for at most {per_group} ([api] '
                    'max_accelerators_per_group).')
    if sum(counts) > per_profile:
        return (f'the groups ask for {sum(counts)} accelerators; a device '
                f'profile asks for at most {per_profile} ([api] '
                'max_accelerators_per_profile).')
    return None


def to_dict(row: Any) -> dict[str, Any]:
    return {'uuid': row.uuid, 'name': row.name,
            'description': row.description,
            'groups': json.loads(row.groups),
            'created_at': row.created_at, 'updated_at': row.updated_at}


@reader
def get_all(context: cyborg_context.RequestContext,
            names: list[str] | None = None, size: int | None = None,
            marker: str | None = None) -> tuple[list[dict[str, Any]], bool]:
    """Profiles (with the given names), a page at a time; see paginate."""
    select = sa.select(DP)
    if names:
        select = sa.select(DP).where(DP.name.in_(names))
    rows, more = query.paginate(context.session, select, DP, size, marker)
    return [to_dict(row[0]) for row in rows], more


@reader
def get(context: cyborg_context.RequestContext, uuid: str | None = None,
        name: str | None = None) -> dict[str, Any]:
    where = DP.uuid == uuid if uuid is not None else DP.name == name
    row = context.session.scalar(sa.select(DP).where(where))
    if row is None:
        raise exception.DeviceProfileNotFound(name=uuid or name)
    return to_dict(row)


@writer
def create(context: cyborg_context.RequestContext,
           values: dict[str, Any]) -> dict[str, Any]:
    """Insert a validated profile; Conflict on a duplicate name or uuid."""
    dp_uuid = values.get('uuid') or str(uuid_lib.uuid4())
    row = DP(uuid=dp_uuid, name=values['name'],
             description=values.get('description'),
             groups=json.dumps(values['groups']))
    try:
        with context.session.begin_nested():
            context.session.add(row)
    except db_exc.DBDuplicateEntry:
        # The databases name the failed constraint differently (a column,
        # the constraint's name, or a part of it): look which one it was.
        if values.get('uuid') and context.session.scalar(
                sa.select(DP.id).where(DP.uuid == dp_uuid)) is not None:
            raise exception.DuplicateDeviceProfileUUID(uuid=dp_uuid) \
                from None
        raise exception.DuplicateDeviceProfileName(name=values['name']) \
            from None
    return to_dict(row)


@writer
def delete(context: cyborg_context.RequestContext, uuids: list[str],
           names: list[str]) -> None:
    """Delete every profile named, or none: NotFound lists the missing."""
    where = sa.or_(DP.uuid.in_(uuids), DP.name.in_(names))
    found = context.session.execute(
        sa.select(DP.id, DP.uuid, DP.name).where(where)).all()
    missing = (set(uuids) - {r.uuid for r in found}) | (
        set(names) - {r.name for r in found})
    if missing:
        raise exception.DeviceProfileNotFound(
            name=', '.join(sorted(missing)))
    context.session.execute(
        sa.delete(DP).where(DP.id.in_([r.id for r in found])))
