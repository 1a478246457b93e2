"""Attach handles cleaned after use: ``cleaning``, ``maintenance``, free.

A handle is cleaned after use when its deployable carries the attribute
``clean_after_use=true`` (the agent reports it for the drivers whose
``[<driver group>] clean_after_use`` is set) or when the device-profile
group of the request that held it says ``accel:clean_after_use=true``.
Such a handle is not freed when its request lets go: in that transaction
it becomes ``cleaning`` and stays in use. A clean that succeeds frees it;
one that fails holds it in ``maintenance`` with the reason until an
operator retries or releases it. Placement reserves every handle in either
state (``providers.host_providers``), so each change here marks the
deployable's provider to be written again.

Every change is a compare-and-swap on ``clean_state`` and ``clean_since``
(the start of the current attempt, whole seconds: MariaDB's DATETIME keeps
no fraction), so two conductors never clean one handle at once and a
late answer never frees a handle another attempt owns.
"""
import json
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

AH = models.AttachHandle
Dep = models.Deployable
Device = models.Device
Attr = models.Attribute

# The deployable attribute an agent reports for drivers that clean after
# use, and the device-profile group key that asks for a clean.
ATTRIBUTE = 'clean_after_use'
PROFILE_KEY = 'accel:clean_after_use'
# clean_reason is a String(255).
_REASON_LENGTH = 255


def now() -> Any:
    """The time an attempt starts, as every backend stores it."""
    return timeutils.utcnow().replace(microsecond=0)


def driver_cleans() -> sa.ColumnElement[bool]:
    """Whether the attach handle's deployable (``AH.deployable_id``) is
    of a driver that cleans after use."""
    return sa.exists().where(Attr.deployable_id == AH.deployable_id,
                             Attr.key == ATTRIBUTE,
                             sa.func.lower(Attr.value) == 'true')


def wanted(group: str | None, handle: Any) -> bool:
    """Whether a handle given back by a request with device-profile group
    ``group`` (JSON) is cleaned first; ``handle`` has ``clean_after_use``
    (``driver_cleans``)."""
    if getattr(handle, 'clean_after_use', False):
        return True
    try:
        asked = json.loads(group or '{}').get(PROFILE_KEY, '')
    except (ValueError, AttributeError):
        return False
    return str(asked).strip().lower() == 'true'


def resync(session: sa.orm.Session, handle_ids: list[int]) -> list[str]:
    """Mark the providers of these handles' deployables to be written
    again; their hostnames. Ids read first: an UPDATE with a subquery on
    another table locks every attach handle on MySQL."""
    rows = session.execute(
        sa.select(Dep.id, Device.hostname)
        .join(Device, Device.id == Dep.device_id)
        .where(Dep.id.in_(sa.select(AH.deployable_id)
                          .where(AH.id.in_(handle_ids))))).all()
    if rows:
        session.execute(sa.update(Dep).where(
            Dep.id.in_([r.id for r in rows])).values(rp_synced=None))
    return sorted({r.hostname for r in rows})


def begin(session: sa.orm.Session, handle_ids: list[int]) -> list[str]:
    """Start cleaning handles a request gave back, in its transaction:
    they stay in use (an mdev's ``released_at`` kept: the clean waits for
    its removal). The hostnames whose placement changes."""
    if not handle_ids:
        return []
    session.execute(sa.update(AH).where(AH.id.in_(handle_ids)).values(
        in_use=True, clean_state='cleaning', clean_reason=None,
        clean_since=now()))
    return resync(session, handle_ids)


_COLUMNS = (AH.id, AH.uuid, AH.attach_type, AH.attach_info, AH.in_use,
            AH.clean_state, AH.clean_reason, AH.clean_since,
            Dep.uuid.label('deployable_uuid'), Dep.driver_name,
            Device.uuid.label('device_uuid'), Device.host,
            Device.hostname)


def _joined(select: sa.Select) -> sa.Select:
    return (select.select_from(AH).join(Dep, Dep.id == AH.deployable_id)
            .join(Device, Device.id == Dep.device_id))


def to_dict(row: Any) -> dict[str, Any]:
    return {'id': row.id, 'uuid': row.uuid, 'attach_type': row.attach_type,
            'attach_info': json.loads(row.attach_info),
            'in_use': bool(row.in_use), 'clean_state': row.clean_state,
            'clean_reason': row.clean_reason,
            'clean_since': row.clean_since,
            'deployable_uuid': row.deployable_uuid,
            'device_uuid': row.device_uuid, 'driver_name': row.driver_name,
            'host': row.host, 'hostname': row.hostname}


@reader
def to_clean(context: cyborg_context.RequestContext,
             handle_ids: list[int] | None = None,
             started_before: Any = None) -> list[dict[str, Any]]:
    """Handles ``cleaning`` and ready to clean (no mdev left to remove):
    those of ``handle_ids``, or those whose attempt started before
    ``started_before``."""
    where = [AH.clean_state == 'cleaning', AH.released_at.is_(None)]
    if handle_ids is not None:
        if not handle_ids:
            return []
        where.append(AH.id.in_(handle_ids))
    if started_before is not None:
        where.append(AH.clean_since < started_before)
    rows = context.session.execute(
        _joined(sa.select(*_COLUMNS)).where(*where).order_by(AH.id)).all()
    return [to_dict(r) for r in rows]


@retry_on_deadlock
@writer
def claim(context: cyborg_context.RequestContext, handle_id: int,
          since: Any) -> Any:
    """Take a ``cleaning`` handle for a new attempt: its new
    ``clean_since``, or None when another conductor took it first (or it
    is no longer cleaning)."""
    started = now()
    if started == since:
        return None
    won = query.changed(context.session, sa.update(AH).where(
        AH.id == handle_id, AH.clean_state == 'cleaning',
        AH.clean_since == since).values(clean_since=started))
    return started if won else None


@retry_on_deadlock
@writer
def finish(context: cyborg_context.RequestContext, handle_id: int,
           since: Any, error: str | None) -> list[str]:
    """End the attempt that started at ``since``: free the handle, or
    (``error``) hold it in maintenance with the reason. The hostnames
    whose placement changes; none when the attempt was not the handle's
    current one (another conductor's, or an operator released it)."""
    values: dict[str, Any] = (
        {'in_use': False, 'clean_state': None, 'clean_reason': None,
         'clean_since': None} if error is None else
        {'clean_state': 'maintenance',
         'clean_reason': error[:_REASON_LENGTH], 'clean_since': now()})
    done = query.changed(context.session, sa.update(AH).where(
        AH.id == handle_id, AH.clean_state == 'cleaning',
        AH.clean_since == since).values(**values))
    return resync(context.session, [handle_id]) if done else []


@retry_on_deadlock
@writer
def note(context: cyborg_context.RequestContext, handle_id: int,
         since: Any, reason: str) -> None:
    """Say why an attempt is waiting (its agent did not answer); the
    handle stays ``cleaning`` for a later attempt."""
    context.session.execute(sa.update(AH).where(
        AH.id == handle_id, AH.clean_state == 'cleaning',
        AH.clean_since == since).values(
            clean_reason=reason[:_REASON_LENGTH]))


def _operator_action(context: cyborg_context.RequestContext, uuid: str,
                     action: str, values: dict[str, Any]
                     ) -> tuple[dict[str, Any], list[str]]:
    session = context.session
    row = session.execute(sa.select(AH.id, AH.clean_state)
                          .where(AH.uuid == uuid)).first()
    if row is None:
        raise exception.ResourceNotFound(resource='Attach handle', id=uuid)
    done = query.changed(session, sa.update(AH).where(
        AH.id == row.id, AH.clean_state == 'maintenance').values(**values))
    if not done:
        state = session.scalar(sa.select(AH.clean_state)
                               .where(AH.id == row.id))
        raise exception.HandleNotInMaintenance(
            uuid=uuid, action=action,
            state=state or ('in use' if _in_use(session, row.id)
                            else 'free'))
    hostnames = resync(session, [row.id])
    return _get(session, row.id), hostnames


def _in_use(session: sa.orm.Session, handle_id: int) -> bool:
    return bool(session.scalar(sa.select(AH.in_use)
                               .where(AH.id == handle_id)))


def _get(session: sa.orm.Session, handle_id: int) -> dict[str, Any]:
    return to_dict(session.execute(
        _joined(sa.select(*_COLUMNS)).where(AH.id == handle_id)).one())


@retry_on_deadlock
@writer
def retry(context: cyborg_context.RequestContext, uuid: str
          ) -> tuple[dict[str, Any], list[str]]:
    """An operator's retry of a handle in maintenance: ``cleaning``
    again; the handle and the hostnames whose placement changes.
    HandleNotInMaintenance (409) in any other state."""
    return _operator_action(context, uuid, 'clean', {
        'clean_state': 'cleaning', 'clean_reason': None,
        'clean_since': now()})


@retry_on_deadlock
@writer
def release(context: cyborg_context.RequestContext, uuid: str
            ) -> tuple[dict[str, Any], list[str]]:
    """An operator gives a handle in maintenance back uncleaned: free
    again. HandleNotInMaintenance (409) in any other state."""
    return _operator_action(context, uuid, 'release', {
        'in_use': False, 'clean_state': None, 'clean_reason': None,
        'clean_since': None})


@reader
def hostnames(context: cyborg_context.RequestContext,
              handle_ids: list[int]) -> list[str]:
    """The compute nodes these handles are on."""
    if not handle_ids:
        return []
    return sorted(set(context.session.scalars(
        _joined(sa.select(Device.hostname)).where(AH.id.in_(handle_ids)))))


@reader
def get_all(context: cyborg_context.RequestContext,
            device_uuid: str | None = None, clean_state: str | None = None,
            size: int | None = None, marker: str | None = None
            ) -> tuple[list[dict[str, Any]], bool]:
    """Attach handles, of one device and in one clean state (``none``:
    not being cleaned) when given; see query.paginate."""
    select = _joined(sa.select(*_COLUMNS))
    if device_uuid is not None:
        select = select.where(Device.uuid == device_uuid)
    if clean_state == 'none':
        select = select.where(AH.clean_state.is_(None))
    elif clean_state is not None:
        select = select.where(AH.clean_state == clean_state)
    rows, more = query.paginate(context.session, select, AH, size, marker)
    return [to_dict(r) for r in rows], more
