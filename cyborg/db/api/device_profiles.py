"""Device profiles: named lists of request groups that flavors refer to."""
import json
import uuid as uuid_lib
from typing import Any

import sqlalchemy as sa
from oslo_db import exception as db_exc
from oslo_utils import timeutils

from cyborg import context as cyborg_context
from cyborg.common import exception
from cyborg.db import models
from cyborg.db.api import query
from cyborg.db.api import reader
from cyborg.db.api import writer

DP = models.DeviceProfile
DPP = models.DeviceProfileProject

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


def accelerator_classes(group: dict[str, str]) -> list[str]:
    """The resource class of each accelerator a request group asks for,
    one per accelerator request (``accelerator_count`` of them)."""
    return [key[len(RESOURCES):] for key, value in group.items()
            if key.startswith(RESOURCES)
            and key[len(RESOURCES):] not in AMOUNT_CLASSES
            for _ in range(int(value))]


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
            'is_public': row.is_public,
            'created_at': row.created_at, 'updated_at': row.updated_at}


def visible(project_id: str | None) -> sa.ColumnElement[bool] | None:
    """The condition on a profile row that a caller of ``project_id``
    may see and use it: public, or private with the project in its access
    list (a correlated EXISTS on the list's unique key, so a list of
    profiles is still one query). None, no condition, for a caller who
    sees every project (``project_id`` None)."""
    if project_id is None:
        return None
    return sa.or_(DP.is_public == sa.true(), sa.exists().where(
        DPP.device_profile_id == DP.id, DPP.project_id == project_id))


def _named(uuid: str | None, name: str | None) -> sa.ColumnElement[bool]:
    return DP.uuid == uuid if uuid is not None else DP.name == name


@reader
def get_all(context: cyborg_context.RequestContext,
            names: list[str] | None = None, size: int | None = None,
            marker: str | None = None, project_id: str | None = None
            ) -> tuple[list[dict[str, Any]], bool]:
    """Profiles (with the given names), a page at a time; see paginate.

    Only those a caller of ``project_id`` may see (``visible``; None:
    every profile); a marker naming another is refused as an unknown
    one.
    """
    select = sa.select(DP)
    if names:
        select = select.where(DP.name.in_(names))
    condition = visible(project_id)
    if condition is not None:
        select = select.where(condition)
    rows, more = query.paginate(context.session, select, DP, size, marker,
                                marker_where=condition)
    return [to_dict(row[0]) for row in rows], more


@reader
def get(context: cyborg_context.RequestContext, uuid: str | None = None,
        name: str | None = None, project_id: str | None = None
        ) -> dict[str, Any]:
    """The profile of ``uuid`` or ``name``; DeviceProfileNotFound, the
    same, when a caller of ``project_id`` may not see it (``visible``)."""
    select = sa.select(DP).where(_named(uuid, name))
    condition = visible(project_id)
    if condition is not None:
        select = select.where(condition)
    row = context.session.scalar(select)
    if row is None:
        raise exception.DeviceProfileNotFound(name=uuid or name)
    return to_dict(row)


@writer
def create(context: cyborg_context.RequestContext,
           values: dict[str, Any]) -> dict[str, Any]:
    """Insert a validated profile; Conflict on a duplicate name or uuid.
    It is public unless ``values`` has ``is_public`` false (RPC 1.12)."""
    dp_uuid = values.get('uuid') or str(uuid_lib.uuid4())
    row = DP(uuid=dp_uuid, name=values['name'],
             description=values.get('description'),
             groups=json.dumps(values['groups']),
             is_public=values.get('is_public', True))
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
    """Delete every profile named, or none: NotFound lists the missing.
    Their access lists go with them (ON DELETE CASCADE)."""
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


# Who may use a profile: whether it is public, and the projects of its
# access list, which counts while it is private. Administrators (RPC 1.12)
# change both through the conductor.

def _profile_id(session: sa.orm.Session, uuid: str | None,
                name: str | None) -> int:
    found = session.scalar(sa.select(DP.id).where(_named(uuid, name)))
    if found is None:
        raise exception.DeviceProfileNotFound(name=uuid or name)
    return found


@writer
def set_public(context: cyborg_context.RequestContext, is_public: bool,
               uuid: str | None = None, name: str | None = None
               ) -> dict[str, Any]:
    """Make the profile of ``uuid`` or ``name`` public or private; the
    profile after. Its access list stays as it is."""
    row = context.session.scalar(sa.select(DP).where(_named(uuid, name)))
    if row is None:
        raise exception.DeviceProfileNotFound(name=uuid or name)
    row.is_public = is_public
    context.session.flush()
    return to_dict(row)


@reader
def get_projects(context: cyborg_context.RequestContext,
                 uuid: str | None = None, name: str | None = None
                 ) -> list[str]:
    """The projects of the profile's access list, in order."""
    profile_id = _profile_id(context.session, uuid, name)
    return list(context.session.scalars(
        sa.select(DPP.project_id).where(DPP.device_profile_id == profile_id)
        .order_by(DPP.project_id)))


@writer
def add_project(context: cyborg_context.RequestContext, project_id: str,
                uuid: str | None = None, name: str | None = None) -> None:
    """Add ``project_id`` to the profile's access list; nothing when it
    is there already (its unique key decides between concurrent adds)."""
    profile_id = _profile_id(context.session, uuid, name)
    query.insert_new(context.session, DPP, {
        'device_profile_id': profile_id, 'project_id': project_id,
        'created_at': timeutils.utcnow()},
        ('device_profile_id', 'project_id'))


@writer
def remove_project(context: cyborg_context.RequestContext, project_id: str,
                   uuid: str | None = None, name: str | None = None) -> None:
    """Take ``project_id`` out of the profile's access list;
    DeviceProfileProjectNotFound when it is not in it."""
    profile_id = _profile_id(context.session, uuid, name)
    if not query.changed(context.session, sa.delete(DPP).where(
            DPP.device_profile_id == profile_id,
            DPP.project_id == project_id)):
        raise exception.DeviceProfileProjectNotFound(
            project_id=project_id, name=uuid or name)
