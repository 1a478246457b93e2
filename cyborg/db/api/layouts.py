"""A device's desired layout and its preparation: the conductor's state
for the agent actions that apply and prepare it.

Both follow ``deployables.begin_program``: a conditional write takes the
device (``layout_state = applying``, or ``status = preparing``), which
holds it back in placement (``providers.held_back``) and refuses binds
(``arq_bindings``); the conductor asks the agent; a second write ends it.
"""
import datetime
import json
from typing import Any

import sqlalchemy as sa
from oslo_utils import timeutils

from cyborg import context as cyborg_context
from cyborg.common import exception
from cyborg.db import models
from cyborg.db.api import deployables
from cyborg.db.api import query
from cyborg.db.api import reader
from cyborg.db.api import writer

Device = models.Device
Dep = models.Deployable
Cpid = models.ControlpathID

APPLYING = 'applying'
# Set while the device is not enabled: applied as it is enabled.
PENDING = 'pending'
FAILED = 'failed'
# The layout states in which placement offers nothing of the device.
HELD_BACK = (PENDING, APPLYING)


def _resync(session: Any, device_id: int) -> None:
    """Make placement rewrite the device's providers (reserved follows
    ``status`` and ``layout_state``)."""
    session.execute(sa.update(Dep).where(Dep.device_id == device_id)
                    .values(rp_synced=None))


def _target(session: Any, uuid: str) -> dict[str, Any]:
    row = session.execute(
        sa.select(Device.id, Device.host, Device.hostname, Device.status,
                  Device.status_reason, Device.layout, Device.layout_state,
                  Device.layout_reason, Device.layout_changed_at,
                  Cpid.cpid_info)
        .outerjoin(Cpid, Cpid.device_id == Device.id)
        .where(Device.uuid == uuid)).first()
    if row is None:
        raise exception.ResourceNotFound(resource='Device', id=uuid)
    # A device partitioned down to no deployable names no driver: the
    # agent then finds the driver that discovers it.
    driver_name = session.scalar(
        sa.select(Dep.driver_name).where(Dep.device_id == row.id)
        .order_by(Dep.id).limit(1))
    return {'id': row.id, 'uuid': uuid, 'host': row.host,
            'hostname': row.hostname, 'status': row.status,
            'status_reason': row.status_reason,
            'layout': json.loads(row.layout) if row.layout else None,
            'layout_state': row.layout_state,
            'layout_reason': row.layout_reason,
            'layout_changed_at': row.layout_changed_at,
            'cpid_info': json.loads(row.cpid_info or '{}'),
            'driver_name': driver_name}


@reader
def target(context: cyborg_context.RequestContext, uuid: str
           ) -> dict[str, Any]:
    """What the agent needs to act on the device, and its states."""
    return _target(context.session, uuid)


def _holders(session: Any, device_id: int) -> list[str]:
    """Who holds a handle of the device, each deployable locked
    exclusively first, so no bind takes one until this transaction ends."""
    held: list[str] = []
    for dep_id in session.scalars(sa.select(Dep.id)
                                  .where(Dep.device_id == device_id)
                                  .order_by(Dep.id)):
        deployables.lock(session, dep_id, exclusive=True)
        held.extend(deployables.holders(session, dep_id))
    return held


@writer
def begin_layout(context: cyborg_context.RequestContext, uuid: str,
                 layout: dict[str, Any] | None) -> dict[str, Any]:
    """Take the device for a layout change (``layout`` None: clearing).

    DeviceBusy naming the accelerator requests while any handle of the
    device is in use, or while another change or its preparation is under
    way. Setting marks it ``applying`` when the device is enabled, else
    ``pending``: its preparation applies it. Returns the target as it was
    before, to put back when the agent cannot be reached.
    """
    session = context.session
    before = _target(session, uuid)
    action = 'change its layout' if layout is not None else (
        'clear its layout')
    held = _holders(session, before['id'])
    if held:
        raise exception.DeviceBusy(
            uuid=uuid, action=action,
            reason=f'accelerator request(s) {", ".join(held)} use it; '
                   'unbind or delete them first')
    if before['layout_state'] == APPLYING:
        raise exception.DeviceBusy(
            uuid=uuid, action=action,
            reason=f'layout {json.dumps(before["layout"])} is being '
                   f'applied since {before["layout_changed_at"]}')
    if before['status'] == 'preparing':
        raise exception.DeviceBusy(uuid=uuid, action=action,
                                   reason='it is being prepared')
    now = timeutils.utcnow().replace(microsecond=0)
    state = APPLYING if before['status'] == 'enabled' else PENDING
    values: dict[str, Any] = (
        {'layout': json.dumps(layout, sort_keys=True),
         'layout_state': state, 'layout_reason': None,
         'layout_changed_at': now} if layout is not None else
        {'layout': None, 'layout_state': None, 'layout_reason': None,
         'layout_changed_at': now})
    session.execute(sa.update(Device).where(Device.id == before['id'])
                    .values(**values))
    _resync(session, before['id'])
    return before


@writer
def restore_layout(context: cyborg_context.RequestContext,
                   before: dict[str, Any]) -> None:
    """Put back what ``begin_layout`` changed: nothing reached the
    device (the agent did not answer before acting)."""
    session = context.session
    session.execute(
        sa.update(Device).where(Device.id == before['id'])
        .values(layout=json.dumps(before['layout'], sort_keys=True)
                if before['layout'] is not None else None,
                layout_state=before['layout_state'],
                layout_reason=before['layout_reason'],
                layout_changed_at=before['layout_changed_at']))
    _resync(session, before['id'])


@writer
def finish_layout(context: cyborg_context.RequestContext, device_id: int,
                  state: str, reason: str | None) -> bool:
    """End the change: ``applied``, or ``failed`` with why (still held
    back until the layout is cleared or set again). Whether the device
    was still ``applying`` (a re-drive may have ended it)."""
    session = context.session
    done = query.changed(session, sa.update(Device).where(
        Device.id == device_id, Device.layout_state == APPLYING).values(
            layout_state=state, layout_reason=(reason or '')[:255] or None,
            layout_changed_at=timeutils.utcnow().replace(microsecond=0)))
    _resync(session, device_id)
    return bool(done)


@writer
def note_layout(context: cyborg_context.RequestContext, device_id: int,
                reason: str) -> None:
    """Say why a change stays ``applying`` (its agent did not answer)."""
    context.session.execute(
        sa.update(Device).where(Device.id == device_id,
                                Device.layout_state == APPLYING)
        .values(layout_reason=reason[:255]))


@reader
def stale_layouts(context: cyborg_context.RequestContext,
                  older_than: datetime.datetime) -> list[str]:
    """The devices ``applying`` since before ``older_than``, but those
    being prepared: their preparation applies the layout
    (``stale_preparations``)."""
    return list(context.session.scalars(
        sa.select(Device.uuid).where(Device.layout_state == APPLYING,
                                     Device.layout_changed_at < older_than,
                                     Device.status != 'preparing')
        .order_by(Device.id)))


@reader
def stale_preparations(context: cyborg_context.RequestContext,
                       older_than: datetime.datetime) -> list[str]:
    """The devices ``preparing`` since before ``older_than``.

    ``updated_at`` is when ``begin_prepare`` wrote, or later: any other
    write to the device moves it, which only delays the sweep, never
    starts it early.
    """
    return list(context.session.scalars(
        sa.select(Device.uuid).where(Device.status == 'preparing',
                                     Device.updated_at < older_than)
        .order_by(Device.id)))


@writer
def begin_prepare(context: cyborg_context.RequestContext, uuid: str
                  ) -> dict[str, Any] | None:
    """Take the device for its preparation as an operator enables it:
    ``preparing`` (held back), and a layout set while it was not enabled
    (``pending``) or that failed ``applying`` with it. None when it is
    already enabled; DeviceBusy while another preparation runs."""
    session = context.session
    before = _target(session, uuid)
    if before['status'] == 'enabled':
        return None
    if before['status'] == 'preparing':
        raise exception.DeviceBusy(uuid=uuid, action='be enabled',
                                   reason='it is being prepared')
    values: dict[str, Any] = {'status': 'preparing', 'status_reason': None}
    if before['layout'] is not None and before['layout_state'] in (
            PENDING, FAILED):
        values.update(layout_state=APPLYING, layout_reason=None,
                      layout_changed_at=timeutils.utcnow().replace(
                          microsecond=0))
    session.execute(sa.update(Device).where(Device.id == before['id'])
                    .values(**values))
    _resync(session, before['id'])
    return before


@writer
def finish_prepare(context: cyborg_context.RequestContext, device_id: int,
                   status: str, reason: str | None) -> None:
    """``enabled``; ``error`` with why; or the status it had before, when
    the agent could not be asked."""
    session = context.session
    session.execute(
        sa.update(Device).where(Device.id == device_id,
                                Device.status == 'preparing')
        .values(status=status, status_reason=(reason or '')[:255] or None))
    _resync(session, device_id)
