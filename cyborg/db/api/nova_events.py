"""Events owed to Nova: one row per ``accelerator-request-bound`` event.

A bind's event is written in the transaction that ends the bind (``owe``,
called by ``arq_bindings`` and ``bind_ends``), so an event is owed exactly
when its bind's end is committed, and deleted once Nova answered for it
(``bind_ends.settle_events``). An unbind or delete of the request drops
its row in its own transaction (``forget``): nothing is told of a request
that is gone.

A row is born claimed by the conductor that wrote it, which sends it
after the commit; the claim lasts ``[nova] event_claim_timeout``. A row
whose claim ran out (its conductor stopped before it recorded Nova's
answer), or that waits for its next try (Nova did not answer, or dropped
a failure), is taken by whichever conductor claims it first
(``claim_due``): a conditional UPDATE on ``next_attempt_at``, which one
transaction alone wins on SQLite, MariaDB and PostgreSQL alike.
"""
import dataclasses
import datetime
import uuid as uuid_lib
from collections.abc import Iterable

import sqlalchemy as sa
from oslo_utils import timeutils

from cyborg import context as cyborg_context
from cyborg.conf import CONF
from cyborg.db import models
from cyborg.db.api import query
from cyborg.db.api import reader
from cyborg.db.api import retry_on_deadlock
from cyborg.db.api import writer

NE = models.NovaEvent
ARQ = models.AcceleratorRequest

COMPLETED = 'completed'
FAILED = 'failed'


@dataclasses.dataclass(frozen=True)
class Owed:
    """One event owed to Nova, as its row holds it."""

    arq_uuid: str
    instance_uuid: str
    status: str
    # The claim under which its sender holds it.
    claim: str | None
    reason: str | None = None
    attempts: int = 0
    created_at: datetime.datetime | None = None


def _owed(row: NE) -> Owed:
    return Owed(row.arq_uuid, row.instance_uuid, row.status, row.claim,
                row.reason, row.attempts, row.created_at)


def _lease_end(now: datetime.datetime) -> datetime.datetime:
    return now + datetime.timedelta(seconds=CONF.nova.event_claim_timeout)


def owe(session: sa.orm.Session,
        events: Iterable[tuple[str, str | None, str, str | None]]
        ) -> list[Owed]:
    """Owe Nova the events (ARQ uuid, instance, status, reason) in the
    caller's transaction, claimed for the caller to send once committed;
    a request bound to no instance owes none. An event a request still
    owed is replaced by its new one."""
    reason_chars = query.max_chars(NE.reason)
    now = timeutils.utcnow()
    claim = str(uuid_lib.uuid4())
    owed = [Owed(arq, instance, status, claim,
                 reason[:reason_chars] if reason else None, 0, now)
            for arq, instance, status, reason in events if instance]
    if not owed:
        return []
    forget(session, [o.arq_uuid for o in owed])
    session.execute(sa.insert(NE), [
        {'arq_uuid': o.arq_uuid, 'instance_uuid': o.instance_uuid,
         'status': o.status, 'reason': o.reason, 'attempts': 0,
         'claim': claim, 'next_attempt_at': _lease_end(now),
         'created_at': now} for o in owed])
    return owed


def forget(session: sa.orm.Session, arq_uuids: Iterable[str]) -> None:
    """Drop whatever these requests owed, in the caller's transaction."""
    arq_uuids = list(arq_uuids)
    if arq_uuids:
        session.execute(sa.delete(NE).where(NE.arq_uuid.in_(arq_uuids)))


@reader
def any_due(context: cyborg_context.RequestContext) -> bool:
    """Whether an event is due to be sent (again): one indexed look."""
    return context.session.scalar(
        sa.select(NE.id).where(NE.next_attempt_at <= timeutils.utcnow())
        .limit(1)) is not None


@retry_on_deadlock
@writer
def claim_due(context: cyborg_context.RequestContext,
              limit: int) -> list[Owed]:
    """Claim up to ``limit`` events due to be sent, oldest due first.

    Rows whose request is gone, or bound to another instance, are deleted
    instead (an unbind or delete drops them already; this keeps a row
    from outliving its request whatever wrote it)."""
    session = context.session
    now = timeutils.utcnow()
    due = session.execute(
        sa.select(NE.id, NE.instance_uuid, ARQ.instance_uuid.label('bound'))
        .outerjoin(ARQ, ARQ.uuid == NE.arq_uuid)
        .where(NE.next_attempt_at <= now)
        .order_by(NE.next_attempt_at, NE.id).limit(limit)).all()
    gone = [r.id for r in due if r.bound != r.instance_uuid]
    if gone:
        session.execute(sa.delete(NE).where(NE.id.in_(gone),
                                            NE.next_attempt_at <= now))
    ids = [r.id for r in due if r.bound == r.instance_uuid]
    if not ids:
        return []
    claim = str(uuid_lib.uuid4())
    # Two conductors may have read the same rows: the second UPDATE finds
    # next_attempt_at moved on, and takes none of them.
    session.execute(sa.update(NE).where(NE.id.in_(ids),
                                        NE.next_attempt_at <= now)
                    .values(claim=claim, next_attempt_at=_lease_end(now)))
    return [_owed(row) for row in session.scalars(
        sa.select(NE).where(NE.claim == claim).order_by(NE.id))]


def _by_claim(rows: Iterable[Owed]) -> dict[str | None, list[str]]:
    claims: dict[str | None, list[str]] = {}
    for row in rows:
        claims.setdefault(row.claim, []).append(row.arq_uuid)
    return claims


def delete(session: sa.orm.Session, rows: Iterable[Owed]) -> None:
    """Delete the rows Nova answered for, those still under the claim
    they were sent with (one claimed again since is its new sender's)."""
    for claim, arq_uuids in _by_claim(rows).items():
        session.execute(sa.delete(NE).where(NE.arq_uuid.in_(arq_uuids),
                                            NE.claim == claim))


def retry(session: sa.orm.Session,
          rows: Iterable[tuple[Owed, float]]) -> None:
    """Give up the claim of rows Nova did not answer for: each is due
    again its delay (seconds) from now, for any conductor."""
    now = timeutils.utcnow()
    for row, delay in rows:
        session.execute(
            sa.update(NE).where(NE.arq_uuid == row.arq_uuid,
                                NE.claim == row.claim)
            .values(claim=None, attempts=row.attempts + 1,
                    next_attempt_at=now + datetime.timedelta(
                        seconds=delay)))


@reader
def get_all(context: cyborg_context.RequestContext) -> list[Owed]:
    """Every event owed, oldest first."""
    return [_owed(row) for row in context.session.scalars(
        sa.select(NE).order_by(NE.id))]
