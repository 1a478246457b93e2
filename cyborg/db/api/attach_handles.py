"""Attach handles: taking a free one, and giving it back.

A handle is taken with a compare-and-swap on ``in_use``. One that exists
on the device's host only while bound (an mdev) is not free when its
request goes away: it is *released* (``released_at``) and stays taken
until what was made there is confirmed removed, so that no other request
gets it while that may still exist.
"""
import json
import random
from typing import Any

import sqlalchemy as sa
from oslo_utils import timeutils

from cyborg import context as cyborg_context
from cyborg.common import device_report
from cyborg.db import models
from cyborg.db.api import GALERA
from cyborg.db.api import cleaning
from cyborg.db.api import query
from cyborg.db.api import reader
from cyborg.db.api import retry_on_deadlock
from cyborg.db.api import writer

AH = models.AttachHandle
ARQ = models.AcceleratorRequest
Dep = models.Deployable

# Attach types bound by handing out the handle alone.
INSTANT_TYPES = ('PCI', 'TEST_PCI')

# Where this process's next search for a free handle of each deployable
# starts: just past the handle it took last. A handle taken leaves behind
# an index entry for (deployable, free) that InnoDB keeps, delete-marked,
# until its purge thread gets to it; a search from the lowest id steps
# over every such entry, so under a steady stream of binds each bind cost
# more than the one before (MariaDB's CPU time per bind went from 1.4 to
# 4.7 ms over 10,000 binds to one deployable). Only a hint: a search that
# finds nothing past it starts over from the lowest id. It moves when the
# transaction that took the handle commits: a bind that is rolled back and
# retried searches from where it did the first time.
_search_from: dict[int, int] = {}
_TAKEN = 'cyborg_handles_taken'


def _note_taken(session: sa.orm.Session, deployable_id: int,
                handle_id: int) -> None:
    taken = session.info.get(_TAKEN)
    if taken is None:
        taken = session.info[_TAKEN] = {}
        sa.event.listen(session, 'after_commit', _move_search_hints)
        sa.event.listen(session, 'after_rollback', _drop_search_hints)
    taken[deployable_id] = handle_id + 1


def _move_search_hints(session: sa.orm.Session) -> None:
    _search_from.update(session.info.pop(_TAKEN, {}))


def _drop_search_hints(session: sa.orm.Session) -> None:
    session.info.pop(_TAKEN, None)


def _anywhere(session: sa.orm.Session, deployable_id: int) -> int:
    """A random id between the deployable's first and last handles'.

    A Galera node locks rows for its own transactions only: binds through
    two nodes both pass SKIP LOCKED on the same free handle, both take it,
    and the cluster aborts the second to commit (a certification
    conflict), which is then tried again. Searching from where each
    process took its last handle, every conductor binds at one frontier:
    38% of the tries collided (2,000 binds through three nodes to 1,600
    handles), and a bind could lose 11 times in a row. From a random
    handle, two binds meet only by chance, more often as the free handles
    run out: 7-12% of the tries.
    """
    first, last = session.execute(
        sa.select(sa.func.min(AH.id), sa.func.max(AH.id))
        .where(AH.deployable_id == deployable_id)).one()
    return random.randint(first, last) if first is not None else 0


def take(session: sa.orm.Session, deployable_id: int
         ) -> sa.engine.Row | None:
    """Mark a free attach handle of the deployable in use, one its host
    still reports; the handle (id, uuid, type, info) or None.

    The fast path reads a candidate with ``SKIP LOCKED``, passing over the
    handles concurrent binds are taking. InnoDB may lock more rows than a
    scan returns, so finding nothing there is not the final word: the slow
    path waits for the handle's holder and reads what is still free then.
    The UPDATE stays a compare-and-swap on ``in_use``, and a handle that
    lost the race is not tried again, so the loop ends. The search starts
    past the last handle this process took (see ``_search_from``), or, on
    a Galera node, at a random one (see ``_anywhere``); then, if the fast
    path finds none there, from the first.
    """
    tried: list[int] = []
    if session.connection().info.get(GALERA):
        start = _anywhere(session, deployable_id)
    else:
        start = _search_from.get(deployable_id, 0)
    while True:
        free = (sa.select(AH.id, AH.uuid, AH.attach_type, AH.attach_info)
                .where(AH.deployable_id == deployable_id,
                       AH.in_use.is_(False), AH.missing_since.is_(None),
                       AH.id >= start, AH.id.not_in(tried))
                .order_by(AH.id).limit(1))
        candidate = session.execute(
            free.with_for_update(skip_locked=True)).first()
        if candidate is None and start:
            # Nothing free past the hint: search again from the first
            # handle, and wait for holders only on that search.
            start = 0
            continue
        if candidate is None:
            candidate = session.execute(free.with_for_update()).first()
        if candidate is None:
            return None
        taken = query.changed(session, sa.update(AH).where(
            AH.id == candidate.id, AH.in_use.is_(False)).values(in_use=True))
        if taken:
            _note_taken(session, deployable_id, candidate.id)
            return candidate
        tried.append(candidate.id)


def instant(attach_type: str, attach_info: str | dict[str, Any]) -> bool:
    """Whether a handle is bound by handing it out alone, and free again
    as soon as its request lets go of it: one of ``INSTANT_TYPES`` but a
    VF the agent gives a vGPU type (``device_report.VGPU_TYPE``), or an
    mdev nova-compute creates itself. ``attach_info`` as stored (JSON) or
    read."""
    if attach_type in INSTANT_TYPES:
        if isinstance(attach_info, str):
            # Most handles are whole functions: no JSON to parse for them.
            return f'"{device_report.VGPU_TYPE}"' not in attach_info
        return device_report.VGPU_TYPE not in attach_info
    if attach_type != 'MDEV':
        return False
    info = (json.loads(attach_info) if isinstance(attach_info, str)
            else attach_info)
    return device_report.nova_creates_mdev(attach_type, info)


def device_side(uuid: str | None, handle: Any) -> dict[str, Any]:
    """What the agent needs to remove an attach handle's mdev (or take
    back its VF's vGPU type)."""
    return {'arq_uuid': uuid, 'attach_handle_id': handle.handle_id,
            'attach_handle_uuid': handle.handle_uuid,
            'attach_info': json.loads(handle.attach_info),
            'driver_name': handle.driver_name, 'host': handle.host}


def release(session: sa.orm.Session, held: list[Any],
            cleaned: list[int] | None = None) -> list[dict[str, Any]]:
    """Give back the attach handles of ARQs going away: ``held`` are rows
    with the ARQ's ``uuid``, ``state``, ``device_profile_group``,
    ``handle_id`` and ``handle`` (its ``_handle_columns``, None for an
    ARQ without one).

    With ``cleaned`` (a list the ids are added to), a handle to clean
    after use (``cleaning.wanted``) is not freed but starts cleaning;
    one with an mdev is cleaned once the mdev is confirmed removed.

    A handle handed out alone (``instant``: PCI, or an mdev Nova removes
    itself) is free at once. Another one with state on the device's host
    (an mdev the agent made) is released: still taken, and reserved in
    placement (its provider is marked to be written again), until what
    was made there is confirmed removed (``free_released``). That removal
    is the caller's (the result, with what the agent needs), or, for an
    ARQ still BindStarted, that of the worker finishing the bind, which
    may create it after this.
    """
    free, kept, clean = [], [], []
    for arq in held:
        if arq.handle is None:
            continue
        if cleaned is not None and cleaning.wanted(arq.device_profile_group,
                                                   arq.handle):
            clean.append(arq.handle_id)
        if instant(arq.handle.attach_type, arq.handle.attach_info):
            if arq.handle_id not in clean:
                free.append(arq.handle_id)
        else:
            kept.append(arq)
    if free:
        # Ids already read: an UPDATE with a subquery on another table
        # scans, and on MySQL locks, every attach handle.
        session.execute(sa.update(AH).where(AH.id.in_(free))
                        .values(in_use=False, released_at=None))
    if kept:
        ids = [a.handle_id for a in kept]
        session.execute(sa.update(AH).where(AH.id.in_(ids)).values(
            released_at=timeutils.utcnow()))
        cleaning.resync(session, ids)
    if clean:
        assert cleaned is not None
        cleaning.begin(session, clean)
        cleaned.extend(clean)
    return [device_side(a.uuid, a.handle) for a in kept
            if a.state != 'BindStarted']


@retry_on_deadlock
@writer
def free_released(context: cyborg_context.RequestContext,
                  handle_ids: list[int]) -> list[int]:
    """Free released handles whose device-side state is confirmed gone;
    the ids of those no longer released. A handle not released (freed
    already, or bound again since) is left alone; one to clean after use
    stays taken, ``cleaning``, now ready for its clean
    (``cleaning.to_clean``). Their providers are marked to be written
    again: placement no longer reserves them for the release."""
    if not handle_ids:
        return []
    session = context.session
    ids = list(session.scalars(
        sa.select(AH.id).where(AH.id.in_(handle_ids),
                               AH.released_at.is_not(None))
        .order_by(AH.id).with_for_update()))
    if not ids:
        return []
    session.execute(sa.update(AH).where(
        AH.id.in_(ids), AH.clean_state.is_not(None))
        .values(released_at=None))
    session.execute(sa.update(AH).where(
        AH.id.in_(ids), AH.released_at.is_not(None))
        .values(in_use=False, released_at=None))
    cleaning.resync(session, ids)
    return ids


@reader
def released_handles(context: cyborg_context.RequestContext,
                     released_before: Any, also: list[int] | None = None
                     ) -> list[dict[str, Any]]:
    """Handles released before the time given, and those of ``also``
    (ids) released at all: their device-side state is yet to be confirmed
    removed."""
    since = AH.released_at < released_before
    if also:
        since = sa.or_(since, AH.id.in_(also))
    rows = context.session.execute(
        sa.select(AH.id.label('handle_id'),
                  AH.uuid.label('handle_uuid'), AH.attach_info,
                  Dep.driver_name, models.Device.host)
        .join(Dep, Dep.id == AH.deployable_id)
        .join(models.Device, models.Device.id == Dep.device_id)
        .where(AH.released_at.is_not(None), since)
        .order_by(AH.id)).all()
    return [device_side(None, r) for r in rows]


@reader
def owned_handles(context: cyborg_context.RequestContext, host: str,
                  handle_uuids: list[str]) -> list[str]:
    """Which of the host's attach handles named are held by an ARQ (and
    not released): the device-side state an agent is to keep."""
    if not handle_uuids:
        return []
    return list(context.session.scalars(
        sa.select(AH.uuid)
        .join(ARQ, ARQ.attach_handle_id == AH.id)
        .join(Dep, Dep.id == AH.deployable_id)
        .join(models.Device, models.Device.id == Dep.device_id)
        .where(AH.uuid.in_(handle_uuids), models.Device.host == host,
               AH.released_at.is_(None))))


@retry_on_deadlock
@writer
def free_removed(context: cyborg_context.RequestContext, host: str,
                 handle_uuids: list[str]) -> list[int]:
    """``free_released`` for an agent that removed what these handles
    of its host held."""
    if not handle_uuids:
        return []
    ids = list(context.session.scalars(
        sa.select(AH.id)
        .join(Dep, Dep.id == AH.deployable_id)
        .join(models.Device, models.Device.id == Dep.device_id)
        .where(AH.uuid.in_(handle_uuids), models.Device.host == host,
               AH.released_at.is_not(None))))
    return free_released(context, ids)
