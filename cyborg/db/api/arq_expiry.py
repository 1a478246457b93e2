"""Accelerator requests nothing bound: deleting those too old, a batch at
a time.

A request is abandoned when it is still ``Initial`` (never bound, so no
instance, handle, claim or owed event refers to it) longer after its
create than ``[conductor] unbound_request_ttl`` (see
``cyborg.conductor.unbound_expiry``). Each batch is one transaction: the
candidates are read locked, skipping rows another transaction holds (a
bind in flight, another conductor's batch), and deleted by a DELETE that
repeats the conditions, so a request bound in the meantime stays and the
requests returned are exactly those this transaction deleted.
"""
import datetime
import types
from typing import Any

import sqlalchemy as sa

from cyborg import context as cyborg_context
from cyborg.db import models
from cyborg.db.api import arqs
from cyborg.db.api import query
from cyborg.db.api import retry_on_deadlock
from cyborg.db.api import writer

ARQ = models.AcceleratorRequest

# Requests one transaction deletes at most. Its rows stay locked until it
# commits (a bind of one of them meanwhile passes over it, SKIP LOCKED).
# Out of 200,000 requests (tools/bench/expiry.py, two cores), a batch of
# 500 took 99 ms (p95 174) on MariaDB 10.11 and 44 ms (p95 56) on
# PostgreSQL 15, 4,300 and 11,000 requests a second; batches of 2,000
# and 5,000 deleted at most 47 % more a second and held their locks three
# to seven times longer at the 95th percentile (up to 950 ms), 100 cut
# the rate by a quarter to a half. 500 rows are also a small write set
# for a Galera cluster to certify, and 500 ids are within every
# database's limit on bound parameters (SQLite's old default is 999). A
# pass repeats batches until one is not full.
BATCH = 500


def _abandoned(cutoff: datetime.datetime) -> sa.ColumnElement[bool]:
    return sa.and_(ARQ.state == 'Initial', ARQ.instance_uuid.is_(None),
                   ARQ.created_at < cutoff)


@retry_on_deadlock
@writer
def expire(context: cyborg_context.RequestContext,
           cutoff: datetime.datetime, limit: int = BATCH
           ) -> list[dict[str, Any]]:
    """Delete at most ``limit`` requests still ``Initial`` that were
    created before ``cutoff``; those deleted, as they were
    (``arqs.to_dict``), ``state`` ``Deleted``.

    In no order: every one goes in its pass, and without an ORDER BY
    both MariaDB and PostgreSQL read the requests through the index on
    ``state`` (a pass that finds none reads the Initial requests, not the
    table, which an ORDER BY id made PostgreSQL scan).
    """
    session = context.session
    # Only the request's columns: an Initial request holds no handle, and
    # PostgreSQL refuses FOR UPDATE over the outer join of arqs._select.
    rows = session.execute(
        sa.select(ARQ.id, ARQ.uuid, ARQ.state, ARQ.device_profile_name,
                  ARQ.device_profile_group_id, ARQ.device_profile_group,
                  ARQ.hostname, ARQ.device_rp_uuid, ARQ.instance_uuid,
                  ARQ.project_id, ARQ.created_at, ARQ.updated_at)
        .where(_abandoned(cutoff)).limit(limit)
        .with_for_update(skip_locked=True)).all()
    if not rows:
        return []
    ids = [row.id for row in rows]
    deleted = query.changed(session, sa.delete(ARQ).where(
        ARQ.id.in_(ids), _abandoned(cutoff)))
    if deleted != len(rows):
        # Not while the rows are locked (SQLite has one writer at a time
        # instead); but a Galera node locks rows for its own transactions
        # only: whatever happened, what is gone now was deleted here.
        left = set(session.scalars(sa.select(ARQ.id).where(
            ARQ.id.in_(ids))))
        rows = [row for row in rows if row.id not in left]
    return [dict(arqs.to_dict(types.SimpleNamespace(
        **row._asdict(), ah_uuid=None, ah_type=None, ah_info=None)),
        state='Deleted') for row in rows]
