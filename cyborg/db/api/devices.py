"""Devices: listing, showing, and taking them in and out of maintenance."""
from typing import Any

import sqlalchemy as sa

from cyborg import context as cyborg_context
from cyborg.common import exception
from cyborg.db import models
from cyborg.db.api import query
from cyborg.db.api import reader
from cyborg.db.api import writer

Device = models.Device


def to_dict(row: Any) -> dict[str, Any]:
    """A device row as a dict; the board infos stay JSON strings."""
    return {'id': row.id, 'uuid': row.uuid, 'type': row.type,
            'vendor': row.vendor, 'model': row.model,
            'std_board_info': row.std_board_info,
            'vendor_board_info': row.vendor_board_info,
            'host': row.host, 'hostname': row.hostname,
            'status': row.status,
            'created_at': row.created_at, 'updated_at': row.updated_at}


@reader
def get_all(context: cyborg_context.RequestContext, type: str | None = None,
            vendor: str | None = None, hostname: str | None = None,
            size: int | None = None, marker: str | None = None
            ) -> tuple[list[dict[str, Any]], bool]:
    """Devices matching every filter given exactly; see query.paginate."""
    select = sa.select(Device)
    for column, value in ((Device.type, type), (Device.vendor, vendor),
                          (Device.hostname, hostname)):
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
    if status not in models.DEVICE_STATUSES:
        raise exception.Invalid(
            reason=f'device status must be one of '
                   f'{", ".join(models.DEVICE_STATUSES)}, not {status!r}.')
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
