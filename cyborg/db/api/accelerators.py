"""Accelerators of the legacy v1 API: deployables with their device."""
from typing import Any

import sqlalchemy as sa

from cyborg import context as cyborg_context
from cyborg.common import exception
from cyborg.db import models
from cyborg.db.api import deployables
from cyborg.db.api import reader

Deployable = models.Deployable
Device = models.Device


def _select() -> sa.Select:
    return (sa.select(Deployable.id, Deployable.uuid, Deployable.name,
                      Deployable.num_accelerators, Deployable.created_at,
                      Deployable.updated_at, Device.uuid.label('device_uuid'),
                      Device.type, Device.vendor, Device.host,
                      Device.hostname)
            .join(Device, Device.id == Deployable.device_id))


def _to_dict(row: Any, attributes: list[dict[str, str]]) -> dict[str, Any]:
    specs: dict[str, str] = {}
    for attribute in attributes:
        specs.update(attribute)
    return {'uuid': row.uuid, 'name': row.name,
            'device_uuid': row.device_uuid, 'device_type': row.type,
            'vendor': row.vendor, 'host': row.host,
            'hostname': row.hostname,
            'num_accelerators': row.num_accelerators, 'acc_specs': specs,
            'created_at': row.created_at, 'updated_at': row.updated_at}


@reader
def get_all(context: cyborg_context.RequestContext) -> list[dict[str, Any]]:
    """Every deployable as an accelerator, ordered by id."""
    rows = list(context.session.execute(_select().order_by(Deployable.id)))
    attributes = deployables.attributes_of(context.session, [], rows)
    return [_to_dict(row, attributes[row.id]) for row in rows]


@reader
def get(context: cyborg_context.RequestContext, uuid: str) -> dict[str, Any]:
    row = context.session.execute(
        _select().where(Deployable.uuid == uuid)).first()
    if row is None:
        raise exception.ResourceNotFound(resource='Accelerator', id=uuid)
    attributes = deployables.attributes_of(context.session, [], [row])
    return _to_dict(row, attributes[row.id])
