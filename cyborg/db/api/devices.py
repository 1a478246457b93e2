"""Devices: listing, showing, maintenance, and their health."""
import json
from typing import Any

import sqlalchemy as sa
from oslo_utils import timeutils

from cyborg import context as cyborg_context
from cyborg.common import device_health
from cyborg.common import exception
from cyborg.common.device_report import NEW_DEVICE_STATUSES
from cyborg.common.device_report import canonical_json
from cyborg.db import models
from cyborg.db.api import query
from cyborg.db.api import reader
from cyborg.db.api import writer

Device = models.Device
Dep = models.Deployable
ARQ = models.AcceleratorRequest
UNHEALTHY = device_health.UNHEALTHY


def to_dict(row: Any) -> dict[str, Any]:
    """A device row as a dict; the board infos stay JSON strings."""
    return {'id': row.id, 'uuid': row.uuid, 'type': row.type,
            'vendor': row.vendor, 'model': row.model,
            'std_board_info': row.std_board_info,
            'vendor_board_info': row.vendor_board_info,
            'host': row.host, 'hostname': row.hostname,
            'status': row.status, 'status_reason': row.status_reason,
            'layout': json.loads(row.layout) if row.layout else None,
            'layout_state': row.layout_state,
            'layout_reason': row.layout_reason,
            'layout_changed_at': row.layout_changed_at,
            'health': row.health,
            'health_reason': row.health_reason,
            'health_source': row.health_source,
            'health_changed_at': row.health_changed_at,
            'created_at': row.created_at, 'updated_at': row.updated_at}


@reader
def get_all(context: cyborg_context.RequestContext, type: str | None = None,
            vendor: str | None = None, hostname: str | None = None,
            health: str | None = None, size: int | None = None,
            marker: str | None = None
            ) -> tuple[list[dict[str, Any]], bool]:
    """Devices matching every filter given exactly; see query.paginate."""
    select = sa.select(Device)
    for column, value in ((Device.type, type), (Device.vendor, vendor),
                          (Device.hostname, hostname),
                          (Device.health, health)):
        if value is not None:
            select = select.where(column == value)
    rows, more = query.paginate(context.session, select, Device, size,
                                marker)
    return [to_dict(row[0]) for row in rows], more


@reader
def get(context: cyborg_context.RequestContext, uuid: str) -> dict[str, Any]:
    row = context.session.scalar(sa.select(Device).where(Device.uuid == uuid))
    if row is None:
        raise exception.ResourceNotFound(resource='Device', id=uuid)
    return to_dict(row)


@writer
def set_status(context: cyborg_context.RequestContext, uuid: str,
               status: str) -> str | None:
    """Set ``enabled`` or ``maintaining``; writes nothing if unchanged.

    Returns the device's compute node name when the status changed, whose
    providers in placement must then follow, else None.
    """
    # What an operator sets; ``preparing`` and ``error`` are the agent's.
    if status not in NEW_DEVICE_STATUSES:
        raise exception.Invalid(
            reason=f'device status must be one of '
                   f'{", ".join(NEW_DEVICE_STATUSES)}, not {status!r}.')
    current = context.session.execute(
        sa.select(Device.id, Device.status, Device.hostname)
        .where(Device.uuid == uuid)).first()
    if current is None:
        raise exception.ResourceNotFound(resource='Device', id=uuid)
    if current.status == status:
        return None
    context.session.execute(
        sa.update(Device).where(Device.id == current.id)
        .values(status=status))
    # Placement reserves a disabled device's inventory (see providers).
    context.session.execute(
        sa.update(models.Deployable)
        .where(models.Deployable.device_id == current.id)
        .values(rp_synced=None))
    return current.hostname


def _resync(session: Any, device_ids: list[int]) -> None:
    """Make placement rewrite these devices' providers, whose reserved
    amount follows ``status`` and ``health`` (see providers)."""
    if device_ids:
        session.execute(sa.update(Dep).where(Dep.device_id.in_(device_ids))
                        .values(rp_synced=None))


def _changed(row: Any, health: str, reason: str | None,
             source: str) -> dict[str, Any]:
    """The device dict after a health change, with what it was before."""
    after = dict(to_dict(row), health=health, health_reason=reason,
                 health_source=source)
    after['previous_health'] = row.health
    after['previous_health_reason'] = row.health_reason
    return after


@writer
def apply_agent_health(context: cyborg_context.RequestContext, host: str,
                       updates: list[dict[str, Any]]
                       ) -> list[dict[str, Any]]:
    """Store what ``host``'s agent read of its devices' health.

    ``updates`` hold ``controlpath_id``, ``state`` and ``reason`` (see
    ``device_health.HEALTH_UPDATE_SCHEMA``); devices the host does not
    have are skipped. Rows whose reading is unchanged are not written.
    Returns, for every device whose health as it counts changed (an
    operator's setting stands over the agent's), its dict after the change
    with ``previous_health`` and ``previous_health_reason``; a change into
    or out of ``unhealthy`` also marks its providers for placement.
    """
    wanted = {canonical_json(u['controlpath_id']): u for u in updates}
    if not wanted:
        return []
    session = context.session
    rows = session.execute(
        sa.select(Device, models.ControlpathID.cpid_type,
                  models.ControlpathID.cpid_info)
        .join(models.ControlpathID,
              models.ControlpathID.device_id == Device.id)
        .where(Device.host == host)).all()
    # To the second, as MariaDB's DATETIME keeps it.
    now = timeutils.utcnow().replace(microsecond=0)
    changed: list[dict[str, Any]] = []
    resync: list[int] = []
    for device, cpid_type, cpid_info in rows:
        update = wanted.get(canonical_json(
            {'cpid_type': cpid_type, 'cpid_info': json.loads(cpid_info)}))
        if update is None:
            continue
        state = update['state']
        reason = device_health.reason_text(update.get('reason') or '') or None
        if (device.agent_health, device.agent_health_reason) == (
                state, reason):
            continue
        values: dict[str, Any] = {'agent_health': state,
                                  'agent_health_reason': reason,
                                  'updated_at': now}
        if device.health_source == 'agent' and (
                device.health, device.health_reason) != (state, reason):
            values.update(health=state, health_reason=reason,
                          health_changed_at=now)
            changed.append(dict(_changed(device, state, reason, 'agent'),
                                health_changed_at=now, updated_at=now))
            if (state == UNHEALTHY) != (device.health == UNHEALTHY):
                resync.append(device.id)
        session.execute(sa.update(Device).where(Device.id == device.id)
                        .values(**values))
    _resync(session, resync)
    return changed


@writer
def set_health(context: cyborg_context.RequestContext, uuid: str,
               state: str | None, reason: str | None
               ) -> tuple[dict[str, Any], bool]:
    """An operator sets the device's health (it stands over the agent's
    readings), or clears it with ``state`` None (the agent's last reading
    counts again).

    Returns the device's dict after, with ``previous_health`` and
    ``previous_health_reason``, and whether placement must follow (the
    device went into or out of ``unhealthy``). Nothing is written when
    nothing changes.
    """
    if state is not None and state not in device_health.HEALTH_STATES:
        raise exception.Invalid(
            reason=f'health state must be one of '
                   f'{", ".join(device_health.HEALTH_STATES)}, not '
                   f'{state!r}.')
    session = context.session
    device = session.scalar(sa.select(Device).where(Device.uuid == uuid))
    if device is None:
        raise exception.ResourceNotFound(resource='Device', id=uuid)
    if state is None:
        source = 'agent'
        state, reason = device.agent_health, device.agent_health_reason
    else:
        source = 'operator'
        reason = device_health.reason_text(reason or '') or None
    after = _changed(device, state, reason, source)
    if (device.health, device.health_reason, device.health_source) == (
            state, reason, source):
        return after, False
    flips = (state == UNHEALTHY) != (device.health == UNHEALTHY)
    now = timeutils.utcnow().replace(microsecond=0)
    values: dict[str, Any] = {'health': state, 'health_reason': reason,
                              'health_source': source, 'updated_at': now}
    after['updated_at'] = now
    if (device.health, device.health_reason) != (state, reason):
        values['health_changed_at'] = after['health_changed_at'] = now
    session.execute(sa.update(Device).where(Device.id == device.id)
                    .values(**values))
    if flips:
        _resync(session, [device.id])
    return after, flips


@reader
def impact(context: cyborg_context.RequestContext, uuid: str
           ) -> dict[str, Any]:
    """What taking the device out would touch: the accelerator requests
    that hold or are binding one of its deployables, their instances and
    projects. A dry run: nothing is changed."""
    session = context.session
    device_id = session.scalar(sa.select(Device.id).where(Device.uuid == uuid))
    if device_id is None:
        raise exception.ResourceNotFound(resource='Device', id=uuid)
    rows = session.execute(
        sa.select(ARQ.uuid, ARQ.state, ARQ.instance_uuid, ARQ.project_id,
                  ARQ.device_profile_name, Dep.uuid.label('deployable'))
        .join(Dep, ARQ.deployable_id == Dep.id)
        .where(Dep.device_id == device_id)
        .order_by(ARQ.instance_uuid, ARQ.uuid)).all()
    arqs = [{'uuid': r.uuid, 'state': r.state,
             'instance_uuid': r.instance_uuid, 'project_id': r.project_id,
             'device_profile_name': r.device_profile_name,
             'deployable_uuid': r.deployable} for r in rows]
    return {'device_uuid': uuid, 'arqs': arqs,
            'instances': sorted({a['instance_uuid'] for a in arqs
                                 if a['instance_uuid']}),
            'projects': sorted({a['project_id'] for a in arqs
                                if a['project_id']})}


@reader
def host_bindings(context: cyborg_context.RequestContext, host: str
                  ) -> list[dict[str, Any]]:
    """Every device of ``host``: its control path, uuid, and the instances
    and projects whose requests hold it (metrics label series by them)."""
    session = context.session
    devices: dict[int, dict[str, Any]] = {}
    for row in session.execute(
            sa.select(Device.id, Device.uuid, models.ControlpathID.cpid_type,
                      models.ControlpathID.cpid_info)
            .join(models.ControlpathID,
                  models.ControlpathID.device_id == Device.id)
            .where(Device.host == host)):
        devices[row.id] = {
            'uuid': row.uuid,
            'controlpath_id': {'cpid_type': row.cpid_type,
                               'cpid_info': json.loads(row.cpid_info)},
            'instances': [], 'projects': []}
    for row in session.execute(
            sa.select(Dep.device_id, ARQ.instance_uuid, ARQ.project_id)
            .distinct().join(Dep, ARQ.deployable_id == Dep.id)
            .join(Device, Dep.device_id == Device.id)
            .where(Device.host == host, ARQ.instance_uuid.is_not(None))
            .order_by(Dep.device_id, ARQ.instance_uuid)):
        entry = devices[row.device_id]
        entry['instances'].append(row.instance_uuid)
        entry['projects'].append(row.project_id or '')
    return list(devices.values())
