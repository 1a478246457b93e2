"""Deployables: the schedulable parts of devices, with their attributes."""
import json
from typing import Any

import sqlalchemy as sa
from oslo_utils import timeutils

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


# Device-side work on a deployable (the ``action`` column). Binds and
# programs exclude each other through the deployable's row: a program
# locks it exclusively, checks that no attach handle is in use and sets
# ``action``; a bind locks it shared (exclusively when it may program) and
# takes a handle only while no program runs that it cannot wait for. On
# SQLite, where these locks do not exist, every writer transaction is
# serialised (see cyborg.db.api).
PROGRAMMING = 'programming'


def lock(session: sa.orm.Session, deployable_id: int, exclusive: bool
         ) -> Any:
    """Lock the deployable's row for this transaction; its programming
    state (``action``, ``action_bitstream_id``, ``bitstream_id``)."""
    return session.execute(
        sa.select(Deployable.action, Deployable.action_bitstream_id,
                  Deployable.bitstream_id)
        .where(Deployable.id == deployable_id)
        .with_for_update(read=not exclusive)).one()


def holders(session: sa.orm.Session, deployable_id: int) -> list[str]:
    """Who holds the deployable's attach handles in use: an accelerator
    request's uuid, or ``released`` for a handle whose request went away
    while what it made on the host is not yet confirmed removed."""
    handle = models.AttachHandle
    arq = models.AcceleratorRequest
    return [uuid or 'released' for uuid in session.scalars(
        sa.select(arq.uuid).select_from(handle)
        .outerjoin(arq, arq.attach_handle_id == handle.id)
        .where(handle.deployable_id == deployable_id,
               handle.in_use.is_(True))
        .order_by(handle.id))]


def start_programming(session: sa.orm.Session, deployable_id: int,
                      bitstream_id: str) -> bool:
    """Mark the deployable being programmed with ``bitstream_id``, if no
    other device-side work is under way; whether it was marked. The caller
    holds the row's exclusive lock and has checked ``holders``."""
    return bool(query.changed(
        session, sa.update(Deployable)
        .where(Deployable.id == deployable_id, Deployable.action.is_(None))
        .values(action=PROGRAMMING, action_bitstream_id=bitstream_id,
                action_since=timeutils.utcnow())))


def end_programming(session: sa.orm.Session, deployable_id: int,
                    bitstream_id: str, loaded: bool | None) -> bool:
    """End programming with ``bitstream_id``. ``loaded``: True, the
    deployable holds it; False, the device failed or did not answer, and
    what it holds is unknown (a half-written device is not trusted to hold
    what it held before); None, the device was not touched. Whether this
    programming was still the deployable's (the stale sweep may have ended
    it)."""
    values: dict[str, Any] = {'action': None, 'action_bitstream_id': None,
                              'action_since': None}
    if loaded is not None:
        values['bitstream_id'] = bitstream_id if loaded else None
    return bool(query.changed(
        session, sa.update(Deployable)
        .where(Deployable.id == deployable_id,
               Deployable.action == PROGRAMMING,
               Deployable.action_bitstream_id == bitstream_id)
        .values(**values)))


@writer
def begin_program(context: cyborg_context.RequestContext, uuid: str,
                  bitstream_id: str) -> dict[str, Any]:
    """Take the deployable for programming it with ``bitstream_id`` (an
    operator's request); what the agent needs to do it.

    DeployableBusy while any of its attach handles is in use or another
    programming runs: reprogramming would pull the device from under
    instances, or two images would be written at once.
    """
    session = context.session
    row = session.execute(
        sa.select(Deployable.id, Deployable.name, Deployable.driver_name,
                  models.Device.host, models.ControlpathID.cpid_info)
        .join(models.Device, models.Device.id == Deployable.device_id)
        .join(models.ControlpathID,
              models.ControlpathID.device_id == models.Device.id)
        .where(Deployable.uuid == uuid)).first()
    if row is None:
        raise exception.ResourceNotFound(resource='Deployable', id=uuid)
    state = lock(session, row.id, exclusive=True)
    if state.action is not None:
        raise exception.DeployableBusy(
            uuid=uuid, reason=f'it is being programmed with '
                              f'{state.action_bitstream_id}')
    held = holders(session, row.id)
    if held:
        raise exception.DeployableBusy(
            uuid=uuid, reason=f'accelerator request(s) {", ".join(held)} '
                              'use it; unbind them first')
    start_programming(session, row.id, bitstream_id)
    return {'id': row.id, 'name': row.name, 'driver_name': row.driver_name,
            'host': row.host, 'cpid_info': json.loads(row.cpid_info)}


@writer
def finish_program(context: cyborg_context.RequestContext,
                   deployable_id: int, bitstream_id: str,
                   loaded: bool | None) -> None:
    """End what ``begin_program`` started (see ``end_programming``)."""
    end_programming(context.session, deployable_id, bitstream_id, loaded)


@reader
def programming_state(context: cyborg_context.RequestContext,
                      deployable_id: int) -> Any:
    """The deployable's ``action`` and ``bitstream_id`` as committed."""
    return context.session.execute(
        sa.select(Deployable.action, Deployable.bitstream_id)
        .where(Deployable.id == deployable_id)).one()


@writer
def end_stale_programming(context: cyborg_context.RequestContext,
                          started_before: Any) -> list[str]:
    """End programming that began before the time given (its conductor
    stopped mid-way); the device's content is then unknown. The uuids of
    the deployables."""
    session = context.session
    stale = session.execute(
        sa.select(Deployable.id, Deployable.uuid,
                  Deployable.action_bitstream_id)
        .where(Deployable.action.is_not(None),
               Deployable.action_since < started_before)).all()
    return [row.uuid for row in stale
            if end_programming(session, row.id, row.action_bitstream_id,
                               loaded=False)]
