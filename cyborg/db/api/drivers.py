"""Drivers: what each agent's drivers found, counted from the deployables."""
from typing import Any

import sqlalchemy as sa

from cyborg import context as cyborg_context
from cyborg.db import models
from cyborg.db.api import reader

Deployable = models.Deployable
Device = models.Device


@reader
def get_all(context: cyborg_context.RequestContext, host: str | None = None,
            driver_name: str | None = None) -> list[dict[str, Any]]:
    """One row per agent host and driver that reported deployables.

    Counted in SQL: the devices, deployables and accelerators of each
    (host, driver_name), ordered by host then driver name. A driver that
    is loaded but found nothing has no deployable, so it has no row.
    """
    where = [column == value for column, value in (
        (Device.host, host), (Deployable.driver_name, driver_name))
        if value is not None]
    select = (
        sa.select(Device.host, Deployable.driver_name,
                  sa.func.min(Device.hostname).label('hostname'),
                  sa.func.count(sa.distinct(Device.id)).label('devices'),
                  sa.func.count(Deployable.id).label('deployables'),
                  sa.func.sum(Deployable.num_accelerators)
                  .label('accelerators'))
        .join(Device, Device.id == Deployable.device_id)
        .where(*where)
        .group_by(Device.host, Deployable.driver_name)
        .order_by(Device.host, Deployable.driver_name))
    return [{'host': row.host, 'hostname': row.hostname,
             'driver_name': row.driver_name, 'devices': row.devices,
             'deployables': row.deployables,
             'accelerators': int(row.accelerators or 0)}
            for row in context.session.execute(select)]
