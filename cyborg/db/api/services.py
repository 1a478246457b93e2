"""Service records: conductors and agents and their heartbeats."""
import datetime
from typing import Any

import sqlalchemy as sa
from oslo_db import exception as db_exc
from oslo_utils import timeutils

from cyborg import context as cyborg_context
from cyborg.db import models
from cyborg.db.api import reader
from cyborg.db.api import writer


@writer
def heartbeat(context: cyborg_context.RequestContext, host: str,
              binary: str, version: str, hostname: str | None = None
              ) -> None:
    """Record that ``binary`` on ``host`` is alive (created on first call)."""
    now = timeutils.utcnow()
    values = {'last_seen_at': now, 'version': version, 'hostname': hostname}
    where = (models.Service.host == host) & (models.Service.binary == binary)
    updated = context.session.execute(
        sa.update(models.Service).where(where).values(**values)).rowcount
    if updated:
        return
    try:
        with context.session.begin_nested():
            context.session.add(models.Service(host=host, binary=binary,
                                               **values))
    except db_exc.DBDuplicateEntry:
        # Another conductor registered it between our UPDATE and INSERT.
        context.session.execute(
            sa.update(models.Service).where(where).values(**values))


def _as_dict(row: models.Service, down_after: datetime.datetime
             ) -> dict[str, Any]:
    return {'host': row.host, 'binary': row.binary,
            'hostname': row.hostname, 'version': row.version,
            'last_seen_at': row.last_seen_at,
            'alive': row.last_seen_at >= down_after,
            'created_at': row.created_at}


@reader
def get_all(context: cyborg_context.RequestContext,
            binary: str | None = None, down_time: int = 60
            ) -> list[dict[str, Any]]:
    """Every service, with ``alive`` from its last heartbeat."""
    query = sa.select(models.Service).order_by(models.Service.binary,
                                               models.Service.host)
    if binary is not None:
        query = query.where(models.Service.binary == binary)
    down_after = timeutils.utcnow() - datetime.timedelta(seconds=down_time)
    return [_as_dict(row, down_after)
            for row in context.session.scalars(query)]
