"""Accelerator requests (ARQs): reading and creating them.

Binding, unbinding and deleting them is in ``arq_bindings``.
"""
import json
import types
import uuid as uuid_lib
from typing import Any

import sqlalchemy as sa
from oslo_utils import timeutils

from cyborg import context as cyborg_context
from cyborg.common import exception
from cyborg.conf import CONF
from cyborg.db import models
from cyborg.db.api import device_profiles
from cyborg.db.api import query
from cyborg.db.api import reader
from cyborg.db.api import writer

ARQ = models.AcceleratorRequest
AH = models.AttachHandle
Dep = models.Deployable

RESOLVED = ('Bound', 'BindFailed', 'Deleting')

_COLUMNS = (ARQ.id, ARQ.uuid, ARQ.state, ARQ.device_profile_name,
            ARQ.device_profile_group_id, ARQ.device_profile_group,
            ARQ.hostname, ARQ.device_rp_uuid, ARQ.instance_uuid,
            ARQ.project_id, ARQ.created_at, ARQ.updated_at,
            AH.uuid.label('ah_uuid'), AH.attach_type.label('ah_type'),
            AH.attach_info.label('ah_info'))


def _select() -> sa.Select:
    """ARQs with their attach handle, in one query."""
    return sa.select(*_COLUMNS).select_from(ARQ).outerjoin(
        AH, AH.id == ARQ.attach_handle_id)


def to_dict(row: Any) -> dict[str, Any]:
    bound = row.state == 'Bound' and row.ah_uuid is not None
    return {
        'uuid': row.uuid, 'state': row.state,
        'device_profile_name': row.device_profile_name,
        'device_profile_group_id': row.device_profile_group_id,
        'device_profile_group': json.loads(row.device_profile_group),
        'hostname': row.hostname, 'device_rp_uuid': row.device_rp_uuid,
        'instance_uuid': row.instance_uuid, 'project_id': row.project_id,
        'attach_handle_type': row.ah_type if bound else '',
        'attach_handle_uuid': row.ah_uuid if bound else None,
        'attach_handle_info': json.loads(row.ah_info) if bound else {},
        'created_at': row.created_at, 'updated_at': row.updated_at,
    }


def _scoped(select: sa.Select, project_id: str | None) -> sa.Select:
    return select if project_id is None else select.where(
        ARQ.project_id == project_id)


@reader
def get_all(context: cyborg_context.RequestContext,
            project_id: str | None = None,
            instance_uuid: str | None = None, resolved_only: bool = False,
            size: int | None = None, marker: str | None = None
            ) -> tuple[list[dict[str, Any]], bool]:
    """ARQs, filtered in SQL; ``project_id`` None means every project.

    ``marker`` must name an ARQ the caller sees: another project's is
    refused as an unknown uuid is.
    """
    select = _scoped(_select(), project_id)
    if instance_uuid is not None:
        select = select.where(ARQ.instance_uuid == instance_uuid)
    if resolved_only:
        select = select.where(ARQ.state.in_(RESOLVED))
    if marker is not None:
        marker_id = context.session.scalar(_scoped(
            sa.select(ARQ.id), project_id).where(ARQ.uuid == marker))
        if marker_id is None:
            # As query.paginate answers a uuid nobody has.
            raise exception.Invalid(
                reason=f'marker {marker} does not name an item of this '
                       'list.')
        select, marker = select.where(ARQ.id > marker_id), None
    rows, more = query.paginate(context.session, select, ARQ, size, marker)
    return [to_dict(r) for r in rows], more


@reader
def count_unresolved(context: cyborg_context.RequestContext,
                     instance_uuid: str, project_id: str | None = None
                     ) -> int:
    select = _scoped(sa.select(sa.func.count()).select_from(ARQ).where(
        ARQ.instance_uuid == instance_uuid, ARQ.state.not_in(RESOLVED)),
        project_id)
    return context.session.scalar(select)


@reader
def get(context: cyborg_context.RequestContext, uuid: str,
        project_id: str | None = None) -> dict[str, Any]:
    row = context.session.execute(
        _scoped(_select(), project_id).where(ARQ.uuid == uuid)).first()
    if row is None:
        raise exception.ARQNotFound(uuids=uuid)
    return to_dict(row)


@reader
def get_by_uuids(context: cyborg_context.RequestContext, uuids: list[str],
                 project_id: str | None = None, missing_ok: bool = False
                 ) -> list[dict[str, Any]]:
    """The ARQs named, or ARQNotFound listing those not found (unless
    ``missing_ok``: those found)."""
    rows = context.session.execute(
        _scoped(_select(), project_id).where(ARQ.uuid.in_(uuids))).all()
    missing = set(uuids) - {r.uuid for r in rows}
    if missing and not missing_ok:
        raise exception.ARQNotFound(uuids=', '.join(sorted(missing)))
    return [to_dict(r) for r in rows]


@writer
def create(context: cyborg_context.RequestContext, profile_name: str,
           project_id: str | None) -> list[dict[str, Any]]:
    """One Initial ARQ per accelerator of each group of the profile."""
    created = create_many(context, [(profile_name, project_id)])[0]
    if isinstance(created, exception.CyborgException):
        raise created
    return created


@writer
def create_many(context: cyborg_context.RequestContext,
                requests: list[tuple[str, str | None]]
                ) -> list[list[dict[str, Any]] | exception.CyborgException]:
    """``create`` for each (profile name, project) of ``requests`` in one
    transaction: one SELECT of the profiles and one INSERT of every ARQ.

    Returns one item per request, in order: its ARQs, or
    DeviceProfileNotFound, which fails that request alone.
    """
    names = {name for name, _ in requests}
    profiles = {p.name: p for p in context.session.execute(
        sa.select(models.DeviceProfile.id, models.DeviceProfile.name,
                  models.DeviceProfile.groups)
        .where(models.DeviceProfile.name.in_(names)))}
    groups = {name: json.loads(p.groups) for name, p in profiles.items()}
    # Whole seconds, so what is returned now is what the database keeps
    # (MySQL rounds fractions of a DATETIME, MariaDB truncates them).
    now = timeutils.utcnow().replace(microsecond=0)
    results: list[list[dict[str, Any]] | exception.CyborgException] = []
    rows = []
    for profile_name, project_id in requests:
        profile = profiles.get(profile_name)
        if profile is None:
            results.append(exception.DeviceProfileNotFound(name=profile_name))
            continue
        # A profile stored before the limits were lowered makes no more
        # requests than a new one could.
        problem = device_profiles.too_many_accelerators(
            groups[profile_name], CONF.api.max_accelerators_per_group,
            CONF.api.max_accelerators_per_profile)
        if problem:
            results.append(exception.Invalid(
                reason=f'device profile {profile_name}: {problem}'))
            continue
        mine = []
        for group_id, group in enumerate(groups[profile_name]):
            for _ in range(device_profiles.accelerator_count(group)):
                mine.append({'uuid': str(uuid_lib.uuid4()),
                             'state': 'Initial',
                             'project_id': project_id,
                             'device_profile_id': profile.id,
                             'device_profile_name': profile_name,
                             'device_profile_group_id': group_id,
                             'device_profile_group': json.dumps(group),
                             'created_at': now})
        rows.extend(mine)
        # The new rows are known in full; reading them back would cost a
        # query.
        results.append([to_dict(types.SimpleNamespace(
            **row, hostname=None, device_rp_uuid=None, instance_uuid=None,
            updated_at=None, ah_uuid=None, ah_type=None, ah_info=None))
            for row in mine])
    if rows:
        context.session.execute(sa.insert(ARQ), rows)
    return results


@reader
def count_by_state(context: cyborg_context.RequestContext) -> dict[str, int]:
    """How many ARQs each state has, every project's, in one GROUP BY;
    states no ARQ is in are left out."""
    rows = context.session.execute(
        sa.select(ARQ.state, sa.func.count()).group_by(ARQ.state))
    return {state: count for state, count in rows}
