"""Service records: conductors and agents and their heartbeats."""
import collections
import dataclasses
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
from cyborg.db.api import retry_on_deadlock
from cyborg.db.api import writer

# Hosts per IN (...) list: far below every database's limit on bound
# parameters (SQLite's 999 among them).
_IN_BATCH = 500


@dataclasses.dataclass(frozen=True)
class Beat:
    """One heartbeat: ``binary`` on ``host`` was alive at ``seen_at``."""

    host: str
    binary: str
    version: str
    hostname: str | None
    seen_at: datetime.datetime


def _latest(seen_at: datetime.datetime) -> sa.Case:
    """``last_seen_at`` moved to ``seen_at``, never back: a batch written
    late (another conductor's, or one retried after an error) does not
    undo a newer heartbeat."""
    column = models.Service.last_seen_at
    return sa.case((column > seen_at, column), else_=seen_at)


@retry_on_deadlock
@writer
def heartbeat_many(context: cyborg_context.RequestContext,
                   beats: list[Beat]) -> None:
    """Record every heartbeat of ``beats`` (created on first heartbeat).

    In a fixed number of statements whatever the number of beats: per
    binary, a SELECT of the known rows and one UPDATE of every one whose
    version and hostname stayed, stamped with the oldest ``seen_at`` of
    them; then one UPDATE per row whose version or hostname changed (an
    upgrade, a renamed node) and one INSERT of the new ones. Of several
    beats of one service the last counts.

    Two conductors write overlapping batches (a host's heartbeats go to
    any conductor): the SELECT locks the known rows in host order, so
    the second waits for the first instead of deadlocking with it.
    """
    latest = {(beat.host, beat.binary): beat for beat in beats}
    by_binary: dict[str, dict[str, Beat]] = collections.defaultdict(dict)
    for (host, binary), beat in sorted(latest.items()):
        by_binary[binary][host] = beat
    for binary, beats_of in by_binary.items():
        hosts = list(beats_of)
        for start in range(0, len(hosts), _IN_BATCH):
            _beat_binary(context.session, binary,
                         {h: beats_of[h]
                          for h in hosts[start:start + _IN_BATCH]})


def _beat_binary(session: sa.orm.Session, binary: str,
                 beats: dict[str, Beat]) -> None:
    known = {row.host: row for row in session.execute(
        sa.select(models.Service.host, models.Service.version,
                  models.Service.hostname)
        .where(models.Service.binary == binary,
               models.Service.host.in_(list(beats)))
        .order_by(models.Service.host).with_for_update())}
    same = [host for host, beat in beats.items() if host in known
            and (known[host].version, known[host].hostname)
            == (beat.version, beat.hostname)]
    if same:
        session.execute(
            sa.update(models.Service)
            .where(models.Service.binary == binary,
                   models.Service.host.in_(same))
            .values(last_seen_at=_latest(
                min(beats[host].seen_at for host in same))))
    for host in set(known) - set(same):
        _update(session, beats[host])
    new = [beat for host, beat in beats.items() if host not in known]
    if not new:
        return
    try:
        with session.begin_nested():
            session.execute(sa.insert(models.Service), [
                {'host': b.host, 'binary': b.binary, 'version': b.version,
                 'hostname': b.hostname, 'last_seen_at': b.seen_at}
                for b in new])
    except db_exc.DBDuplicateEntry:
        # Another conductor registered one of them since the SELECT.
        for beat in new:
            _register(session, beat)


def _update(session: sa.orm.Session, beat: Beat) -> int:
    return query.changed(session, sa.update(models.Service).where(
        models.Service.host == beat.host,
        models.Service.binary == beat.binary).values(
        version=beat.version, hostname=beat.hostname,
        last_seen_at=_latest(beat.seen_at)))


def _register(session: sa.orm.Session, beat: Beat) -> None:
    if _update(session, beat):
        return
    try:
        with session.begin_nested():
            session.add(models.Service(
                host=beat.host, binary=beat.binary, version=beat.version,
                hostname=beat.hostname, last_seen_at=beat.seen_at))
    except db_exc.DBDuplicateEntry:
        # Another conductor registered it between our UPDATE and INSERT.
        _update(session, beat)


def invalid_heartbeat(host: Any, version: Any, hostname: Any
                      ) -> str | None:
    """Why a heartbeat's values cannot be stored, or None."""
    for name, value, column, optional in (
            ('host', host, models.Service.host, False),
            ('version', version, models.Service.version, False),
            ('hostname', hostname, models.Service.hostname, True)):
        if value is None and optional:
            continue
        if not isinstance(value, str) or not value:
            return f'{name} must be a non-empty string'
        limit = query.max_chars(column)
        if limit is not None and len(value) > limit:
            return f'{name} is longer than {limit} characters'
    return None


def heartbeat(context: cyborg_context.RequestContext, host: str,
              binary: str, version: str, hostname: str | None = None
              ) -> None:
    """Record that ``binary`` on ``host`` is alive now (created on first
    call)."""
    heartbeat_many(context, [Beat(host, binary, version, hostname,
                                  timeutils.utcnow())])


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
def alive_hosts(context: cyborg_context.RequestContext, binary: str,
                down_time: int = 60) -> list[str]:
    """The hosts of ``binary`` whose last heartbeat is at most
    ``down_time`` seconds old, sorted."""
    return list(context.session.scalars(
        sa.select(models.Service.host).where(
            models.Service.binary == binary,
            models.Service.last_seen_at >= _down_after(down_time))
        .order_by(models.Service.host)))


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
