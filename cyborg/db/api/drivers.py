"""Drivers: what each agent's drivers found, and how they last fared."""
import datetime
from typing import Any

import sqlalchemy as sa
from oslo_utils import timeutils

from cyborg import context as cyborg_context
from cyborg.db import models
from cyborg.db.api import reader

ARQ = models.AcceleratorRequest
AttachHandle = models.AttachHandle
Deployable = models.Deployable
Device = models.Device
DriverState = models.DriverState
Service = models.Service


@reader
def get_all(context: cyborg_context.RequestContext, host: str | None = None,
            driver_name: str | None = None, state: str | None = None,
            down_time: int = 60) -> list[dict[str, Any]]:
    """One row per agent host and driver, ordered by host then driver.

    A (host, driver) has a row when its agent reported the driver's state
    (every enabled driver, with or without devices) or when deployables of
    the driver are stored for the host (reports of agents that send no
    states; devices kept while in use). Each row counts the devices,
    deployables and accelerators, in SQL, and carries the driver's
    ``state``, ``error`` and ``since`` (None without a state) and
    ``agent_alive`` (None when no agent of the host ever registered).
    """
    counts = (
        sa.select(Device.host, Deployable.driver_name,
                  sa.func.min(Device.hostname).label('hostname'),
                  sa.func.count(sa.distinct(Device.id)).label('devices'),
                  sa.func.count(Deployable.id).label('deployables'),
                  sa.func.sum(Deployable.num_accelerators)
                  .label('accelerators'))
        .join(Device, Device.id == Deployable.device_id)
        .where(*_filters(Device.host, Deployable.driver_name, host,
                         driver_name))
        .group_by(Device.host, Deployable.driver_name)
        .subquery('counts'))
    keys = sa.union(
        sa.select(DriverState.host, DriverState.driver_name).where(
            *_filters(DriverState.host, DriverState.driver_name, host,
                      driver_name)),
        sa.select(counts.c.host, counts.c.driver_name)).subquery('keys')
    select = (
        sa.select(keys.c.host, keys.c.driver_name,
                  sa.func.coalesce(counts.c.hostname,
                                   Service.hostname).label('hostname'),
                  counts.c.devices, counts.c.deployables,
                  counts.c.accelerators, DriverState.state,
                  DriverState.error, DriverState.since,
                  DriverState.version, Service.last_seen_at)
        .select_from(keys)
        .outerjoin(counts, (counts.c.host == keys.c.host)
                   & counts.c.driver_name.is_not_distinct_from(
                       keys.c.driver_name))
        .outerjoin(DriverState, (DriverState.host == keys.c.host)
                   & (DriverState.driver_name == keys.c.driver_name))
        .outerjoin(Service, (Service.host == keys.c.host)
                   & (Service.binary == 'cyborg-agent'))
        .order_by(keys.c.host, keys.c.driver_name))
    if state is not None:
        select = select.where(DriverState.state == state)
    down_after = timeutils.utcnow() - datetime.timedelta(seconds=down_time)
    return [{'host': row.host, 'hostname': row.hostname,
             'driver_name': row.driver_name,
             'devices': row.devices or 0,
             'deployables': row.deployables or 0,
             'accelerators': int(row.accelerators or 0),
             'state': row.state, 'error': row.error, 'since': row.since,
             'version': row.version,
             'agent_alive': (None if row.last_seen_at is None
                             else row.last_seen_at >= down_after)}
            for row in context.session.execute(select)]


@reader
def holding_arqs(context: cyborg_context.RequestContext, host: str,
                 driver_name: str) -> list[str]:
    """The uuids of the accelerator requests that hold, or are binding,
    a deployable of driver ``driver_name`` on ``host``, in order; and for
    handles in use that no request names (released, their mdev not yet
    removed), ``attach handle <uuid>``. One query."""
    of_driver = (Deployable.driver_name == driver_name) & (
        Device.host == host)
    arq_rows = (
        sa.select(ARQ.uuid.label('holder'))
        .join(Deployable, ARQ.deployable_id == Deployable.id)
        .join(Device, Device.id == Deployable.device_id)
        .where(of_driver))
    handle_rows = (
        sa.select(('attach handle ' + AttachHandle.uuid).label('holder'))
        .join(Deployable, AttachHandle.deployable_id == Deployable.id)
        .join(Device, Device.id == Deployable.device_id)
        .where(of_driver, AttachHandle.in_use.is_(True),
               ~sa.exists().where(ARQ.attach_handle_id == AttachHandle.id)))
    union = sa.union(arq_rows, handle_rows).subquery()
    return list(context.session.scalars(
        sa.select(union.c.holder).order_by(union.c.holder)))


def _filters(host_column: Any, name_column: Any, host: str | None,
             driver_name: str | None) -> list[sa.ColumnElement[bool]]:
    return [column == value for column, value in (
        (host_column, host), (name_column, driver_name))
        if value is not None]
