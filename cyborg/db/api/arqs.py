"""Accelerator requests (ARQs): creation, binding, unbinding, deletion.

Every state change is a conditional UPDATE on the state it comes from, and
an attach handle is taken with a compare-and-swap on ``in_use``, so two
conductors working on the same requests never both succeed.
"""
import json
import types
import uuid as uuid_lib
from typing import Any

import sqlalchemy as sa
from oslo_utils import timeutils

from cyborg import context as cyborg_context
from cyborg.common import exception
from cyborg.db import models
from cyborg.db.api import query
from cyborg.db.api import reader
from cyborg.db.api import retry_on_deadlock
from cyborg.db.api import writer

ARQ = models.AcceleratorRequest
AH = models.AttachHandle

RESOLVED = ('Bound', 'BindFailed', 'Deleting')
BINDABLE = ('Initial', 'Unbound')
UNBINDABLE = ('Initial', 'BindStarted', 'Bound', 'BindFailed',
              'UnbindFailed', 'Unbound')

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
    """ARQs, filtered in SQL; ``project_id`` None means every project."""
    select = _scoped(_select(), project_id)
    if instance_uuid is not None:
        select = select.where(ARQ.instance_uuid == instance_uuid)
    if resolved_only:
        select = select.where(ARQ.state.in_(RESOLVED))
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
                 project_id: str | None = None) -> list[dict[str, Any]]:
    """The ARQs named, or ARQNotFound listing those not found."""
    rows = context.session.execute(
        _scoped(_select(), project_id).where(ARQ.uuid.in_(uuids))).all()
    missing = set(uuids) - {r.uuid for r in rows}
    if missing:
        raise exception.ARQNotFound(uuids=', '.join(sorted(missing)))
    return [to_dict(r) for r in rows]


def accelerator_count(group: dict[str, str]) -> int:
    """How many ARQs a request group needs: the sum of its resources."""
    return sum(int(v) for k, v in group.items()
               if k.startswith('resources:'))


@writer
def create(context: cyborg_context.RequestContext, profile_name: str,
           project_id: str | None) -> list[dict[str, Any]]:
    """One Initial ARQ per accelerator of each group of the profile."""
    profile = context.session.execute(
        sa.select(models.DeviceProfile.id, models.DeviceProfile.groups)
        .where(models.DeviceProfile.name == profile_name)).first()
    if profile is None:
        raise exception.DeviceProfileNotFound(name=profile_name)
    # Whole seconds, so what is returned now is what the database keeps
    # (MySQL rounds fractions of a DATETIME, MariaDB truncates them).
    now = timeutils.utcnow().replace(microsecond=0)
    rows = []
    for group_id, group in enumerate(json.loads(profile.groups)):
        for _ in range(accelerator_count(group)):
            rows.append({'uuid': str(uuid_lib.uuid4()), 'state': 'Initial',
                         'project_id': project_id,
                         'device_profile_id': profile.id,
                         'device_profile_name': profile_name,
                         'device_profile_group_id': group_id,
                         'device_profile_group': json.dumps(group),
                         'created_at': now})
    if rows:
        context.session.execute(sa.insert(ARQ), rows)
    # The new rows are known in full; reading them back would cost a query.
    return [to_dict(types.SimpleNamespace(
        **row, hostname=None, device_rp_uuid=None, instance_uuid=None,
        updated_at=None, ah_uuid=None, ah_type=None, ah_info=None))
        for row in rows]


def _free_handles(deployable_id: int, tried: list[int]) -> sa.Select:
    return (sa.select(AH.id)
            .where(AH.deployable_id == deployable_id, AH.in_use.is_(False),
                   AH.id.not_in(tried))
            .order_by(AH.id))


def _take_handle(session: sa.orm.Session, deployable_id: int
                 ) -> int | None:
    """Mark a free attach handle of the deployable in use; its id or None.

    The fast path reads a candidate with ``SKIP LOCKED``, passing over the
    handles concurrent binds are taking. InnoDB may lock more rows than a
    scan returns, so finding nothing there is not the final word: the slow
    path waits for the handle's holder and reads what is still free then.
    The UPDATE stays a compare-and-swap on ``in_use``, and a handle that
    lost the race is not tried again, so the loop ends.
    """
    tried: list[int] = []
    while True:
        free = (sa.select(AH.id)
                .where(AH.deployable_id == deployable_id,
                       AH.in_use.is_(False), AH.id.not_in(tried))
                .order_by(AH.id).limit(1))
        candidate = session.scalar(free.with_for_update(skip_locked=True))
        if candidate is None:
            candidate = session.scalar(free.with_for_update())
        if candidate is None:
            return None
        taken = session.execute(
            sa.update(AH).where(AH.id == candidate, AH.in_use.is_(False))
            .values(in_use=True)).rowcount
        if taken:
            return candidate
        tried.append(candidate)


def _transition(session: sa.orm.Session, uuid: str, sources: tuple[str, ...],
                action: str, values: dict[str, Any]) -> None:
    done = session.execute(
        sa.update(ARQ).where(ARQ.uuid == uuid, ARQ.state.in_(sources))
        .values(**values)).rowcount
    if not done:
        state = session.scalar(sa.select(ARQ.state).where(ARQ.uuid == uuid))
        raise exception.ARQBadState(uuid=uuid, state=state, action=action,
                                    expected=', '.join(sources))


def _bind(session: sa.orm.Session, uuid: str, binding: dict[str, Any]
          ) -> str:
    """Bind one ARQ to the deployable behind its resource provider."""
    deployable = session.execute(
        sa.select(models.Deployable.id, models.Device.hostname,
                  models.Device.status)
        .join(models.Device)
        .where(models.Deployable.rp_uuid == binding['device_rp_uuid'])
    ).first()
    values: dict[str, Any] = {
        'hostname': binding['hostname'],
        'device_rp_uuid': binding['device_rp_uuid'],
        'instance_uuid': binding['instance_uuid']}
    if binding.get('project_id'):
        values['project_id'] = binding['project_id']
    handle_id = None
    if (deployable is not None and deployable.status == 'enabled'
            and deployable.hostname == binding['hostname']):
        handle_id = _take_handle(session, deployable.id)
    if handle_id is None:
        values['state'] = 'BindFailed'
    else:
        values.update(state='Bound', attach_handle_id=handle_id,
                      deployable_id=deployable.id)
    _transition(session, uuid, BINDABLE, 'binding', values)
    return values['state']


def _release(session: sa.orm.Session, handle_ids: list[int | None]) -> None:
    """Free the given attach handles (None entries are skipped).

    Callers pass ids they already read: an UPDATE with a subquery on
    another table scans, and on MySQL locks, every attach handle.
    """
    ids = [i for i in handle_ids if i is not None]
    if ids:
        session.execute(sa.update(AH).where(AH.id.in_(ids))
                        .values(in_use=False))


@retry_on_deadlock
@writer
def apply_patch(context: cyborg_context.RequestContext,
                binds: dict[str, dict[str, Any]], unbinds: list[str]
                ) -> dict[str, str]:
    """Bind and unbind in one transaction; returns each ARQ's new state.

    A bind whose resource provider has no deployable on that host, whose
    device is disabled or has no free attach handle ends BindFailed.
    """
    session = context.session
    uuids = list(binds) + list(unbinds)
    found = {row.uuid: row for row in session.execute(
        sa.select(ARQ.uuid, ARQ.attach_handle_id).where(ARQ.uuid.in_(uuids))
        .with_for_update())}
    missing = set(uuids) - set(found)
    if missing:
        raise exception.ARQNotFound(uuids=', '.join(sorted(missing)))
    instances = {b['instance_uuid'] for b in binds.values()}
    if instances:
        taken = session.execute(
            sa.select(ARQ.instance_uuid, ARQ.uuid).where(
                ARQ.instance_uuid.in_(instances),
                ARQ.uuid.not_in(list(unbinds)))).first()
        if taken is not None:
            raise exception.Invalid(
                reason=f'Instance {taken.instance_uuid} already has '
                       'accelerator requests. Cannot bind additional '
                       'ARQs.')
    states: dict[str, str] = {}
    if unbinds:
        _release(session, [found[u].attach_handle_id for u in unbinds])
        for uuid in unbinds:
            _transition(session, uuid, UNBINDABLE, 'unbinding', {
                'state': 'Unbound', 'hostname': None,
                'device_rp_uuid': None, 'instance_uuid': None,
                'attach_handle_id': None, 'deployable_id': None})
            states[uuid] = 'Unbound'
    # Taking handles deployable by deployable, in one order for every
    # transaction, keeps concurrent batches from locking in a cycle.
    for uuid, binding in sorted(
            binds.items(), key=lambda item: (item[1]['device_rp_uuid'],
                                             item[0])):
        states[uuid] = _bind(session, uuid, binding)
    return states


@retry_on_deadlock
@writer
def delete(context: cyborg_context.RequestContext,
           uuids: list[str] | None = None,
           instance_uuid: str | None = None) -> int:
    """Free their handles and delete ARQs; returns how many.

    By uuid every one must exist (ARQNotFound otherwise, nothing deleted);
    by instance, none is fine.
    """
    session = context.session
    if uuids is not None:
        where = ARQ.uuid.in_(uuids)
    else:
        where = ARQ.instance_uuid == instance_uuid
    rows = session.execute(
        sa.select(ARQ.id, ARQ.uuid, ARQ.attach_handle_id).where(where)
        .with_for_update()).all()
    if uuids is not None:
        missing = set(uuids) - {r.uuid for r in rows}
        if missing:
            raise exception.ARQNotFound(uuids=', '.join(sorted(missing)))
    ids = [r.id for r in rows]
    if ids:
        _release(session, [r.attach_handle_id for r in rows])
        session.execute(sa.delete(ARQ).where(ARQ.id.in_(ids)))
    return len(ids)
