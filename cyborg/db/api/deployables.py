"""Deployables: the schedulable parts of devices, with their attributes."""
import json
from typing import Any

import sqlalchemy as sa

from cyborg import context as cyborg_context
from cyborg.common import exception
from cyborg.db import models
from cyborg.db.api import query
from cyborg.db.api import reader
from cyborg.db.api import writer

Deployable = models.Deployable
Attribute = models.Attribute


def to_dict(row: Any, attributes: list[dict[str, str]] | None = None
            ) -> dict[str, Any]:
    """A deployable row as a dict.

    ``attributes_list`` is a JSON string of single-key dicts, e.g.
    ``[{"rc": "FPGA"}]``, as the clients of this API expect.
    """
    return {'id': row.id, 'uuid': row.uuid, 'name': row.name,
            'parent_id': row.parent_id, 'root_id': row.root_id,
            'num_accelerators': row.num_accelerators,
            'device_id': row.device_id, 'rp_uuid': row.rp_uuid,
            'driver_name': row.driver_name,
            'bitstream_id': row.bitstream_id,
            'attributes_list': json.dumps(attributes or []),
            'created_at': row.created_at, 'updated_at': row.updated_at}


def attributes_of(session: sa.orm.Session, where: list[Any],
                  rows: list[Any]) -> dict[int, list[dict[str, str]]]:
    """The attributes of ``rows``, a page of ``where`` ordered by id.

    One query whatever the page size: the page is exactly the deployables
    matching ``where`` between its first and last id, so no list of ids
    is sent.
    """
    found: dict[int, list[dict[str, str]]] = {row.id: [] for row in rows}
    if not rows:
        return found
    for deployable_id, key, value in session.execute(
            sa.select(Attribute.deployable_id, Attribute.key,
                      Attribute.value)
            .join(Deployable, Deployable.id == Attribute.deployable_id)
            .where(*where,
                   Deployable.id.between(rows[0].id, rows[-1].id))
            .order_by(Attribute.id)):
        # A deployable committed since the page was read may fall in the
        # range; it is not on the page.
        if deployable_id in found:
            found[deployable_id].append({key: value})
    return found


@reader
def get_all(context: cyborg_context.RequestContext, name: str | None = None,
            device_id: int | None = None, rp_uuid: str | None = None,
            size: int | None = None, marker: str | None = None
            ) -> tuple[list[dict[str, Any]], bool]:
    """Deployables matching every filter given exactly; see paginate."""
    where = [column == value for column, value in (
        (Deployable.name, name), (Deployable.device_id, device_id),
        (Deployable.rp_uuid, rp_uuid)) if value is not None]
    rows, more = query.paginate(context.session,
                                sa.select(Deployable).where(*where),
                                Deployable, size, marker)
    found = [row[0] for row in rows]
    attributes = attributes_of(context.session, where, found)
    return [to_dict(d, attributes[d.id]) for d in found], more


@reader
def get(context: cyborg_context.RequestContext, uuid: str) -> dict[str, Any]:
    row = context.session.scalar(
        sa.select(Deployable).where(Deployable.uuid == uuid))
    if row is None:
        raise exception.ResourceNotFound(resource='Deployable', id=uuid)
    attributes = attributes_of(context.session, [], [row])
    return to_dict(row, attributes[row.id])


@reader
def program_target(context: cyborg_context.RequestContext, uuid: str
                   ) -> dict[str, Any]:
    """What programming the deployable needs: its agent's host, driver,
    control path, and how many of its attach handles are in use."""
    row = context.session.execute(
        sa.select(Deployable.id, Deployable.name, Deployable.driver_name,
                  Deployable.bitstream_id, models.Device.host,
                  models.ControlpathID.cpid_info)
        .join(models.Device, models.Device.id == Deployable.device_id)
        .join(models.ControlpathID,
              models.ControlpathID.device_id == models.Device.id)
        .where(Deployable.uuid == uuid)).first()
    if row is None:
        raise exception.ResourceNotFound(resource='Deployable', id=uuid)
    handle = models.AttachHandle
    in_use = context.session.scalar(
        sa.select(sa.func.count()).select_from(handle).where(
            handle.deployable_id == row.id, handle.in_use.is_(True)))
    return {'id': row.id, 'name': row.name, 'driver_name': row.driver_name,
            'bitstream_id': row.bitstream_id, 'host': row.host,
            'cpid_info': json.loads(row.cpid_info), 'in_use': in_use}


@writer
def set_bitstream(context: cyborg_context.RequestContext,
                  deployable_id: int, bitstream_id: str) -> None:
    context.session.execute(
        sa.update(Deployable).where(Deployable.id == deployable_id)
        .values(bitstream_id=bitstream_id))
