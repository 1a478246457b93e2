"""Ending binds left BindStarted: Bound, failed, or failed and owed to Nova.

A bind that needs the device's host ends here once its worker is done. A
failure is owed to Nova before it is final: nova-compute counts BindFailed
as resolved when it reads the requests itself and boots the server without
the device, so a failed bind stays BindStarted, its handle given back and
nothing of the device's kept (``attach_handle_id`` NULL: a bind still under
way always holds one), until Nova has taken its ``failed`` event or the
instance is gone (``end_failures``). The conductor that tells Nova owns it
meanwhile; the stale-bind sweep ends what a stopped conductor left.
"""
from typing import Any

import sqlalchemy as sa

from cyborg import context as cyborg_context
from cyborg.db import models
from cyborg.db.api import arq_bindings
from cyborg.db.api import attach_handles
from cyborg.db.api import deployables
from cyborg.db.api import reader
from cyborg.db.api import retry_on_deadlock
from cyborg.db.api import writer

ARQ = models.AcceleratorRequest


@retry_on_deadlock
@writer
def finish_binds(context: cyborg_context.RequestContext,
                 succeeded: list[dict[str, Any]],
                 failed: list[dict[str, Any]],
                 programs: dict[int, tuple[str, bool]] | None = None,
                 owed: bool = True) -> dict[str, str]:
    """End binds that were BindStarted, each given as its job (ARQ uuid
    and attach handle id): Bound, or failed, giving back the handle as
    ``attach_handles.release`` does. A failed bind stays BindStarted
    without a handle while ``owed`` (its failure is yet to reach Nova, see
    ``end_failures``), and ends BindFailed at once otherwise. A bind ends
    only if its ARQ is still BindStarted with the handle the job took: one
    unbound or deleted meanwhile (and maybe bound again) is left alone,
    for the caller to undo what it made.

    ``programs`` maps deployables this worker programmed to (bitstream,
    whether it loaded). The result maps the ARQs changed to their state:
    Bound, BindFailed, or BindStarted for a failure owed.
    """
    session = context.session
    for deployable_id, (bitstream, loaded) in (programs or {}).items():
        deployables.end_programming(session, deployable_id, bitstream,
                                    loaded)
    jobs = {j['arq_uuid']: j for j in [*succeeded, *failed]}
    if not jobs:
        return {}
    started = {row.uuid: row for row in arq_bindings.held(session, sa.and_(
        ARQ.uuid.in_(list(jobs)), ARQ.state == 'BindStarted'))
        if row.handle_id == jobs[row.uuid]['attach_handle_id']}
    ended: dict[str, str] = {}
    bound = [j['arq_uuid'] for j in succeeded if j['arq_uuid'] in started]
    if bound:
        session.execute(sa.update(ARQ).where(
            ARQ.uuid.in_(bound), ARQ.state == 'BindStarted')
            .values(state='Bound'))
        ended.update(dict.fromkeys(bound, 'Bound'))
    lost = [j['arq_uuid'] for j in failed if j['arq_uuid'] in started]
    if lost:
        # The worker removes what it may have made: not this caller's.
        attach_handles.release(session, [started[u] for u in lost])
        state = 'BindStarted' if owed else 'BindFailed'
        session.execute(sa.update(ARQ).where(
            ARQ.uuid.in_(lost), ARQ.state == 'BindStarted')
            .values(state=state, attach_handle_id=None, deployable_id=None))
        ended.update(dict.fromkeys(lost, state))
    return ended


def _owed(instances: dict[str, str]) -> sa.ColumnElement[bool]:
    """The failures of ``instances`` (ARQ uuid -> instance) still owed:
    BindStarted without a handle, for the same instance."""
    return sa.and_(
        ARQ.state == 'BindStarted', ARQ.attach_handle_id.is_(None),
        sa.or_(*(sa.and_(ARQ.uuid == uuid, ARQ.instance_uuid == instance)
                 for uuid, instance in instances.items())))


@reader
def owed_failures(context: cyborg_context.RequestContext,
                  instances: dict[str, str]) -> set[str]:
    """Which of the failures of ``instances`` (ARQ uuid -> instance) are
    still owed to Nova: not unbound, deleted or ended since."""
    if not instances:
        return set()
    return set(context.session.scalars(
        sa.select(ARQ.uuid).where(_owed(instances))))


@retry_on_deadlock
@writer
def end_failures(context: cyborg_context.RequestContext,
                 instances: dict[str, str]) -> list[str]:
    """End BindFailed the failures of ``instances`` (ARQ uuid ->
    instance) still owed: Nova has them, or nobody can have them any
    more. Those ended, each once whoever else ends it (the stale sweep)."""
    if not instances:
        return []
    session = context.session
    uuids = list(session.scalars(
        sa.select(ARQ.uuid).where(_owed(instances)).with_for_update()))
    if uuids:
        session.execute(sa.update(ARQ).where(
            ARQ.uuid.in_(uuids), ARQ.state == 'BindStarted')
            .values(state='BindFailed'))
    return sorted(uuids)


@reader
def stale_binds(context: cyborg_context.RequestContext,
                started_before: Any
                ) -> dict[str, tuple[str | None, int | None]]:
    """ARQ uuid -> (instance, attach handle id) of binds BindStarted since
    before the time given: their conductor stopped, or their host never
    answered (failures owed to Nova among them, with no handle)."""
    return {row.uuid: (row.instance_uuid, row.attach_handle_id)
            for row in context.session.execute(
                sa.select(ARQ.uuid, ARQ.instance_uuid, ARQ.attach_handle_id)
                .where(ARQ.state == 'BindStarted',
                       sa.func.coalesce(ARQ.updated_at, ARQ.created_at)
                       < started_before))}
