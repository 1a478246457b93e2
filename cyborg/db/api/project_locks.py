"""Project locks: one project's limited writes, one after the other.

A write that a project's limits bound (a create counted against
``accelerator_requests``, a bind against ``class:<RC>``), or that must
find an earlier write of the project (a create repeated with its
idempotency key), first locks the project's row here, inserting it the
first time. A second such write of the project waits for the first to
commit, so that what it counts includes what the first wrote: without
the lock, two creates could both count 9 of a limit of 10 and both
write. Writes of different projects do not wait for each other.
"""
import datetime

import sqlalchemy as sa
from oslo_utils import timeutils

from cyborg.db import models
from cyborg.db.api import query

Lock = models.ProjectLock


def lock(session: sa.orm.Session, project_ids: set[str | None]) -> None:
    """Lock the rows of ``project_ids`` (None, a request of no project,
    needs none) until the caller's transaction ends, in one order so that
    two writes locking several projects cannot wait on each other."""
    now = timeutils.utcnow().replace(microsecond=0)
    for project_id in sorted(p for p in project_ids if p is not None):
        # The row exists but for a project's first limited write: one
        # statement then, the insert only when there was none to write.
        if not _write(session, project_id, now) and not query.insert_new(
                session, Lock, {'project_id': project_id,
                                'created_at': now}, 'project_id'):
            # Another write inserted it meanwhile, and has committed.
            _write(session, project_id, now)


def _write(session: sa.orm.Session, project_id: str,
           now: datetime.datetime) -> bool:
    """Lock the project's row by writing it; whether there was one.

    A write, not SELECT ... FOR UPDATE: a Galera node locks rows for its
    own transactions only, and certifies written rows alone, so two
    writes of the project through two nodes both counted 9 of a limit of
    10 and both wrote (12 requests of a limit of 10, 60 creates through
    three nodes). Written, the row makes the second to commit fail
    certification and try again (``deadlocks``), counting the first's.
    The value always changes: a row written with what it holds is no
    change, and no write to certify.
    """
    return bool(query.changed(session, sa.update(Lock).where(
        Lock.project_id == project_id).values(updated_at=sa.case(
            (Lock.updated_at == now, now + datetime.timedelta(seconds=1)),
            else_=now))))
