"""Ending binds left BindStarted: Bound, failed, or failed and owed to Nova.

A bind that needs the device's host ends here once its worker is done,
and its event is owed to Nova in the same transaction (``nova_events``).
A failure is owed to Nova before it is final: nova-compute counts
BindFailed as resolved when it reads the requests itself and boots the
server without the device, so a failed bind stays BindStarted, its handle
given back and nothing of the device's kept (``attach_handle_id`` NULL: a
bind still under way always holds one), until Nova has taken its
``failed`` event or the instance is gone (``settle_events``), whichever
conductor sends it; the stale-bind sweep ends what no conductor sent.
"""
import typing
from typing import Any

import sqlalchemy as sa

from cyborg import context as cyborg_context
from cyborg.db import models
from cyborg.db.api import arq_bindings
from cyborg.db.api import attach_handles
from cyborg.db.api import bind_decision
from cyborg.db.api import deployables
from cyborg.db.api import nova_events
from cyborg.db.api import reader
from cyborg.db.api import retry_on_deadlock
from cyborg.db.api import writer

ARQ = models.AcceleratorRequest


class Ended(typing.NamedTuple):
    """What ``finish_binds`` ended: each ARQ's new state, and the events
    owed to Nova for them, to send once committed."""

    states: dict[str, str]
    events: list[nova_events.Owed]


@retry_on_deadlock
@writer
def finish_binds(context: cyborg_context.RequestContext,
                 succeeded: list[dict[str, Any]],
                 failed: list[dict[str, Any]],
                 programs: dict[int, tuple[str, bool]] | None = None,
                 owed: bool = True,
                 reasons: dict[str, str] | None = None) -> Ended:
    """End binds that were BindStarted, each given as its job (ARQ uuid
    and attach handle id): Bound, or failed, giving back the handle as
    ``attach_handles.release`` does. A failed bind stays BindStarted
    without a handle while ``owed`` (its failure is yet to reach Nova, see
    ``settle_events``), and ends BindFailed at once otherwise. A bind ends
    only if its ARQ is still BindStarted with the handle the job took: one
    unbound or deleted meanwhile (and maybe bound again) is left alone,
    for the caller to undo what it made.

    ``programs`` maps deployables this worker programmed to (bitstream,
    whether it loaded). The result maps the ARQs changed to their state:
    Bound, BindFailed, or BindStarted for a failure owed; each owes Nova
    its event, ``completed`` or ``failed`` (with its reason from
    ``reasons``).
    """
    session = context.session
    for deployable_id, (bitstream, loaded) in (programs or {}).items():
        deployables.end_programming(session, deployable_id, bitstream,
                                    loaded)
    uuids = list(dict.fromkeys(j['arq_uuid'] for j in [*succeeded, *failed]))
    if not uuids:
        return Ended({}, [])
    end = bind_decision.ends(succeeded, failed, arq_bindings.held(
        session, sa.and_(ARQ.uuid.in_(uuids), ARQ.state == 'BindStarted')),
        owed, reasons or {})
    _end(session, end)
    return Ended(end.states, nova_events.owe(session, end.events))


def _end(session: sa.orm.Session, end: bind_decision.Ends) -> None:
    """End the binds as ``end`` says: Bound, or failed with their handles
    given back."""
    if end.bound:
        session.execute(sa.update(ARQ).where(
            ARQ.uuid.in_(end.bound), ARQ.state == 'BindStarted')
            .values(state='Bound'))
    if end.lost:
        # The worker removes what it may have made: not this caller's.
        attach_handles.release(session, [end.started[u] for u in end.lost])
        session.execute(sa.update(ARQ).where(
            ARQ.uuid.in_(end.lost), ARQ.state == 'BindStarted')
            .values(state=end.lost_state, attach_handle_id=None,
                    deployable_id=None))


def _owed(instances: dict[str, str]) -> sa.ColumnElement[bool]:
    """The failures of ``instances`` (ARQ uuid -> instance) still owed:
    BindStarted without a handle, for the same instance."""
    return sa.and_(
        ARQ.state == 'BindStarted', ARQ.attach_handle_id.is_(None),
        sa.or_(*(sa.and_(ARQ.uuid == uuid, ARQ.instance_uuid == instance)
                 for uuid, instance in instances.items())))


@retry_on_deadlock
@writer
def settle_events(context: cyborg_context.RequestContext,
                  done: list[nova_events.Owed],
                  retry: list[tuple[nova_events.Owed, float]],
                  unless_resolved: list[tuple[nova_events.Owed, float]]
                  ) -> dict[str, str]:
    """Record what Nova answered for events sent, in one transaction.

    ``done``: Nova answered for them, or nobody ever will: their rows go,
    and a failure still owed ends BindFailed. ``retry``: each is due
    again after its delay (seconds). ``unless_resolved``: failures Nova
    dropped (its instance on no host yet): sent again while their request
    is still owed, done once it reads BindFailed (nova-compute reads it
    then) or is gone. The failures ended BindFailed here (ARQ uuid ->
    reason), each once whoever else ends it (an unbind, a delete, the
    stale sweep)."""
    session = context.session
    failures = {o.arq_uuid: o.instance_uuid
                for o, _ in unless_resolved}
    owed = set(session.scalars(sa.select(ARQ.uuid).where(
        _owed(failures)))) if failures else set()
    done = done + [o for o, _ in unless_resolved if o.arq_uuid not in owed]
    retry = retry + [(o, d) for o, d in unless_resolved
                     if o.arq_uuid in owed]
    nova_events.delete(session, done)
    nova_events.retry(session, retry)
    ending = {o.arq_uuid: o.instance_uuid for o in done
              if o.status == nova_events.FAILED}
    if not ending:
        return {}
    uuids = list(session.scalars(
        sa.select(ARQ.uuid).where(_owed(ending)).with_for_update()))
    if uuids:
        session.execute(sa.update(ARQ).where(
            ARQ.uuid.in_(uuids), ARQ.state == 'BindStarted')
            .values(state='BindFailed'))
    reasons = {o.arq_uuid: o.reason or 'unknown' for o in done}
    return {uuid: reasons[uuid] for uuid in sorted(uuids)}


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
