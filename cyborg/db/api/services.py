"""Service records: conductors and agents and their heartbeats."""
import datetime
from typing import Any

import sqlalchemy as sa
from oslo_db import exception as db_exc
from oslo_utils import timeutils

from cyborg import context as cyborg_context
from cyborg.common import exception
from cyborg.db import models
from cyborg.db.api import query
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
    updated = query.changed(context.session, sa.update(models.Service)
                            .where(where).values(**values))
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
    return {'id': row.id, 'host': row.host, 'binary': row.binary,
            'hostname': row.hostname, 'version': row.version,
            'last_seen_at': row.last_seen_at,
            'alive': row.last_seen_at >= down_after,
            'created_at': row.created_at}


def _down_after(down_time: int) -> datetime.datetime:
    """The oldest heartbeat after which a service still counts as up."""
    return timeutils.utcnow() - datetime.timedelta(seconds=down_time)


def _select(binary: str | None, host: str | None) -> sa.Select:
    where = [column == value for column, value in (
        (models.Service.binary, binary), (models.Service.host, host))
        if value is not None]
    return sa.select(models.Service).where(*where)


@reader
def get_all(context: cyborg_context.RequestContext,
            binary: str | None = None, down_time: int = 60
            ) -> list[dict[str, Any]]:
    """Every service, with ``alive`` from its last heartbeat."""
    select = _select(binary, None).order_by(models.Service.binary,
                                            models.Service.host)
    down_after = _down_after(down_time)
    return [_as_dict(row, down_after)
            for row in context.session.scalars(select)]


@reader
def get_page(context: cyborg_context.RequestContext,
             binary: str | None = None, host: str | None = None,
             down_time: int = 60, size: int | None = None,
             marker: int | None = None
             ) -> tuple[list[dict[str, Any]], bool]:
    """Services matching the filters, by id; see query.paginate."""
    rows, more = query.paginate(context.session, _select(binary, host),
                                models.Service, size, marker, 'id')
    down_after = _down_after(down_time)
    return [_as_dict(row[0], down_after) for row in rows], more


@reader
def get_agent(context: cyborg_context.RequestContext, host: str,
              down_time: int = 60) -> dict[str, Any]:
    """The agent of ``host``; AgentNotFound if none ever registered."""
    row = context.session.scalar(_select('cyborg-agent', host))
    if row is None:
        raise exception.AgentNotFound(host=host)
    return _as_dict(row, _down_after(down_time))


@reader
def down_agents(context: cyborg_context.RequestContext, hosts: list[str],
                down_time: int = 60) -> set[str]:
    """Which of ``hosts`` have an agent whose last heartbeat is older
    than ``down_time`` seconds. A host whose agent never registered is
    not among them: nothing says it is down."""
    if not hosts:
        return set()
    return set(context.session.scalars(
        sa.select(models.Service.host).where(
            models.Service.binary == 'cyborg-agent',
            models.Service.host.in_(hosts),
            models.Service.last_seen_at < _down_after(down_time))))
