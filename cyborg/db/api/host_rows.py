"""A host's device rows, read by identity in a fixed number of queries.

A device is keyed by its control path, a deployable by its name within
the device, an attribute by its key, an attach handle by its attach info;
with them come the ids of the parts that accelerator requests still use.
``stamp`` tells in one query whether any of them changed.
Plain rows, not ORM objects: a host can have thousands of them and
nothing here needs the identity map.
"""
import dataclasses
import datetime
import json
from typing import Any

import sqlalchemy as sa

from cyborg import context as cyborg_context
from cyborg.common.device_report import canonical_json
from cyborg.db import models
from cyborg.db.api import reader

Row = sa.engine.Row


@dataclasses.dataclass
class DeployableRows:
    row: Row
    # What the driver reported; reports add, change and remove these.
    attributes: dict[str, Row] = dataclasses.field(default_factory=dict)
    # What POST /v2/attributes added; reports leave them alone.
    operator_attributes: dict[str, Row] = dataclasses.field(
        default_factory=dict)
    handles: dict[str, Row] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class DeviceRows:
    row: Row
    cpid: Row
    deployables: dict[str, DeployableRows] = dataclasses.field(
        default_factory=dict)


@dataclasses.dataclass
class HostRows:
    devices: dict[str, DeviceRows]
    busy_handles: set[int]
    busy_deployables: set[int]


def cpid_key(cpid_type: str, cpid_info: str | dict[str, str]) -> str:
    if isinstance(cpid_info, str):
        cpid_info = json.loads(cpid_info)
    return canonical_json({'cpid_type': cpid_type, 'cpid_info': cpid_info})


def _columns(model: type[models.Base]) -> list[sa.ColumnElement[Any]]:
    return list(model.__table__.columns)


def load(session: sa.orm.Session, host: str) -> HostRows:
    """The host's rows by identity, plus the ids that requests still use."""
    on_host = models.Device.host == host
    devices = {d.id: d for d in session.execute(
        sa.select(*_columns(models.Device)).where(on_host))}
    if not devices:
        return HostRows({}, set(), set())
    by_device: dict[int, DeviceRows] = {}
    for cpid in session.execute(
            sa.select(*_columns(models.ControlpathID))
            .join(models.Device).where(on_host)):
        by_device[cpid.device_id] = DeviceRows(devices[cpid.device_id],
                                               cpid)
    deployables: dict[int, DeployableRows] = {}
    for dep in session.execute(
            sa.select(*_columns(models.Deployable))
            .join(models.Device).where(on_host)):
        entry = by_device.get(dep.device_id)
        if entry is not None:
            deployables[dep.id] = entry.deployables.setdefault(
                dep.name, DeployableRows(dep))
    for attr in session.execute(
            sa.select(*_columns(models.Attribute))
            .join(models.Deployable).join(models.Device).where(on_host)):
        dep_rows = deployables.get(attr.deployable_id)
        if dep_rows is not None:
            mine = (dep_rows.operator_attributes
                    if attr.source == models.ATTRIBUTE_SET_BY_OPERATOR
                    else dep_rows.attributes)
            mine[attr.key] = attr
    busy_handles: set[int] = set()
    busy_deployables: set[int] = set()
    for handle in session.execute(
            sa.select(*_columns(models.AttachHandle))
            .join(models.Deployable).join(models.Device).where(on_host)):
        if handle.deployable_id in deployables:
            deployables[handle.deployable_id].handles[
                handle.attach_info] = handle
            if handle.in_use:
                busy_handles.add(handle.id)
                busy_deployables.add(handle.deployable_id)
    arq = models.AcceleratorRequest
    for handle_id, deployable_id in session.execute(
            sa.select(arq.attach_handle_id, models.Deployable.id)
            .join(models.Deployable,
                  models.Deployable.id == arq.deployable_id)
            .join(models.Device).where(on_host)):
        if handle_id is not None:
            busy_handles.add(handle_id)
        busy_deployables.add(deployable_id)
    return HostRows(
        {cpid_key(e.cpid.cpid_type, e.cpid.cpid_info): e
         for e in by_device.values()}, busy_handles, busy_deployables)


@dataclasses.dataclass(frozen=True)
class Stamp:
    """What changes whenever a row of the host's inventory changes.

    ``rows`` counts them (a delete lowers it), ``newest`` is their
    latest ``created_at`` or ``updated_at`` (an insert or an update moves
    it, as every write stamps its rows; see ``Base``). ``unsettled``
    counts what the next report or placement pass may still change on its
    own: deployables not in placement yet, parts kept missing while in
    use, providers waiting for removal.
    """

    rows: int
    newest: datetime.datetime | None
    unsettled: int


def _part(model: type[models.Base], unsettled: sa.ColumnElement[Any]
          ) -> sa.Select[Any]:
    return sa.select(model.created_at.label('created_at'),
                     model.updated_at.label('updated_at'),
                     unsettled.label('unsettled'))


def _flag(condition: sa.ColumnElement[bool]) -> sa.ColumnElement[int]:
    return sa.case((condition, 1), else_=0)


@reader
def stamp(context: cyborg_context.RequestContext, host: str,
          hostname: str) -> Stamp:
    """The host's inventory stamp, in one SELECT (indexed by host)."""
    on_host = models.Device.host == host
    dep, handle = models.Deployable, models.AttachHandle
    none = sa.literal(0)
    parts = sa.union_all(
        _part(models.Device, none).where(on_host),
        _part(models.ControlpathID, none).join(models.Device).where(on_host),
        _part(dep, _flag(sa.or_(
            dep.missing_since.is_not(None),
            sa.and_(dep.rp_uuid.is_not(None), dep.rp_synced.is_(None)))))
        .join(models.Device).where(on_host),
        _part(models.Attribute, none).join(dep).join(models.Device)
        .where(on_host),
        _part(handle, _flag(handle.missing_since.is_not(None)))
        .join(dep).join(models.Device).where(on_host),
        _part(models.DriverState, none)
        .where(models.DriverState.host == host),
        _part(models.ProviderRemoval, sa.literal(1))
        .where(models.ProviderRemoval.hostname == hostname),
    ).subquery()
    rows, created, updated, unsettled = context.session.execute(
        sa.select(sa.func.count(), sa.func.max(parts.c.created_at),
                  sa.func.max(parts.c.updated_at),
                  sa.func.sum(parts.c.unsettled))).one()
    newest = max((t for t in (created, updated) if t is not None),
                 default=None)
    return Stamp(rows, newest, int(unsettled or 0))
