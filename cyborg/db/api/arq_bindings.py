"""Binding, unbinding and deleting accelerator requests (ARQs).

Every state change is a conditional UPDATE on the state it comes from, and
an attach handle is taken with a compare-and-swap on ``in_use``, so two
conductors working on the same requests never both succeed.
"""
import dataclasses
import json
import logging
from typing import Any

import sqlalchemy as sa

from cyborg import context as cyborg_context
from cyborg.common import exception
from cyborg.db import models
from cyborg.db.api import reader
from cyborg.db.api import retry_on_deadlock
from cyborg.db.api import writer

LOG = logging.getLogger(__name__)

ARQ = models.AcceleratorRequest
AH = models.AttachHandle
Dep = models.Deployable

BINDABLE = ('Initial', 'Unbound')
UNBINDABLE = ('Initial', 'BindStarted', 'Bound', 'BindFailed',
              'UnbindFailed', 'Unbound')


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


def _take_handle(session: sa.orm.Session, deployable_id: int
                 ) -> sa.engine.Row | None:
    """Mark a free attach handle of the deployable in use; its id or None.

    The fast path reads a candidate with ``SKIP LOCKED``, passing over the
    handles concurrent binds are taking. InnoDB may lock more rows than a
    scan returns, so finding nothing there is not the final word: the slow
    path waits for the handle's holder and reads what is still free then.
    The UPDATE stays a compare-and-swap on ``in_use``, and a handle that
    lost the race is not tried again, so the loop ends. The search starts
    past the last handle this process took (see ``_search_from``), then,
    if the fast path finds none there, from the first.
    """
    tried: list[int] = []
    start = _search_from.get(deployable_id, 0)
    while True:
        free = (sa.select(AH.id, AH.uuid, AH.attach_type, AH.attach_info)
                .where(AH.deployable_id == deployable_id,
                       AH.in_use.is_(False), AH.id >= start,
                       AH.id.not_in(tried))
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
        taken = session.execute(
            sa.update(AH).where(AH.id == candidate.id, AH.in_use.is_(False))
            .values(in_use=True)).rowcount
        if taken:
            _note_taken(session, deployable_id, candidate.id)
            return candidate
        tried.append(candidate.id)


def _transition(session: sa.orm.Session, uuid: str, sources: tuple[str, ...],
                action: str, values: dict[str, Any]) -> None:
    done = session.execute(
        sa.update(ARQ).where(ARQ.uuid == uuid, ARQ.state.in_(sources))
        .values(**values)).rowcount
    if not done:
        state = session.scalar(sa.select(ARQ.state).where(ARQ.uuid == uuid))
        raise exception.ARQBadState(uuid=uuid, state=state, action=action,
                                    expected=', '.join(sources))


@dataclasses.dataclass
class BindBatch:
    """What one PATCH did: every ARQ's new state, and the binds left to
    finish on the device's host (those now BindStarted)."""

    states: dict[str, str] = dataclasses.field(default_factory=dict)
    instances: dict[str, str] = dataclasses.field(default_factory=dict)
    jobs: list[dict[str, Any]] = dataclasses.field(default_factory=list)

    @property
    def resolved(self) -> dict[str, str]:
        """ARQ uuid -> state of the binds that ended in this PATCH."""
        return {u: s for u, s in self.states.items()
                if s in ('Bound', 'BindFailed')}


# Attach types bound by handing out the handle alone.
INSTANT_TYPES = ('PCI', 'TEST_PCI')


def _bind(session: sa.orm.Session, uuid: str, binding: dict[str, Any],
          group: dict[str, Any], batch: BindBatch,
          programming: dict[int, str | None]) -> None:
    """Bind one ARQ to the deployable behind its resource provider.

    ``programming`` maps deployables this batch programs to the bitstream
    they get, so that ARQs of one PATCH can share a reprogrammed device.
    """
    deployable = session.execute(
        sa.select(Dep.id, Dep.name, Dep.driver_name, Dep.bitstream_id,
                  models.Device.hostname, models.Device.host,
                  models.Device.status, models.ControlpathID.cpid_type,
                  models.ControlpathID.cpid_info)
        .join(models.Device, models.Device.id == Dep.device_id)
        .join(models.ControlpathID,
              models.ControlpathID.device_id == models.Device.id)
        .where(Dep.rp_uuid == binding['device_rp_uuid'])
    ).first()
    values: dict[str, Any] = {
        'hostname': binding['hostname'],
        'device_rp_uuid': binding['device_rp_uuid'],
        'instance_uuid': binding['instance_uuid']}
    if binding.get('project_id'):
        values['project_id'] = binding['project_id']
    bitstream = group.get('accel:bitstream_id')
    function = group.get('accel:function_id')
    reason = None
    if deployable is None:
        reason = 'no deployable has this resource provider'
    elif deployable.hostname != binding['hostname']:
        reason = f'the deployable is on {deployable.hostname}'
    elif deployable.status != 'enabled':
        reason = 'the device is disabled'
    elif bitstream and function:
        reason = ('the profile names both accel:bitstream_id and '
                  'accel:function_id')
    elif bitstream and bitstream != deployable.bitstream_id and (
            programming.get(deployable.id, bitstream) != bitstream
            or (deployable.id not in programming
                and _in_use(session, deployable.id))):
        reason = (f'bitstream {bitstream} cannot be loaded while the '
                  'device serves other requests')
    handle = None
    if reason is None:
        handle = _take_handle(session, deployable.id)
        if handle is None:
            reason = 'the deployable has no free attach handle'
    if reason is not None:
        LOG.info('Accelerator request %s cannot bind to provider %s: %s.',
                 uuid, binding['device_rp_uuid'], reason)
        values['state'] = 'BindFailed'
    else:
        program = function or (bitstream if bitstream
                               != deployable.bitstream_id else None)
        values.update(attach_handle_id=handle.id,
                      deployable_id=deployable.id)
        if program or handle.attach_type not in INSTANT_TYPES:
            values['state'] = 'BindStarted'
            if program:
                programming[deployable.id] = bitstream
            batch.jobs.append({
                'arq_uuid': uuid, 'instance_uuid': binding['instance_uuid'],
                'host': deployable.host, 'deployable_id': deployable.id,
                'deployable_name': deployable.name,
                'driver_name': deployable.driver_name,
                'loaded_bitstream_id': deployable.bitstream_id,
                'controlpath_id': {
                    'cpid_type': deployable.cpid_type,
                    'cpid_info': json.loads(deployable.cpid_info)},
                'bitstream_id': bitstream, 'function_id': function,
                'attach_type': handle.attach_type,
                'attach_handle_uuid': handle.uuid,
                'attach_info': json.loads(handle.attach_info)})
        else:
            values['state'] = 'Bound'
    _transition(session, uuid, BINDABLE, 'binding', values)
    batch.states[uuid] = values['state']
    batch.instances[uuid] = binding['instance_uuid']


def _in_use(session: sa.orm.Session, deployable_id: int) -> bool:
    return session.scalar(sa.select(sa.func.count()).select_from(AH).where(
        AH.deployable_id == deployable_id, AH.in_use.is_(True))) > 0


def _release(session: sa.orm.Session, handle_ids: list[int | None]) -> None:
    """Free the given attach handles (None entries are skipped).

    Callers pass ids they already read: an UPDATE with a subquery on
    another table scans, and on MySQL locks, every attach handle.
    """
    ids = [i for i in handle_ids if i is not None]
    if ids:
        session.execute(sa.update(AH).where(AH.id.in_(ids))
                        .values(in_use=False))


@retry_on_deadlock
@writer
def apply_patch(context: cyborg_context.RequestContext,
                binds: dict[str, dict[str, Any]], unbinds: list[str],
                unbind_failed: list[str] | None = None) -> BindBatch:
    """Bind and unbind in one transaction.

    A bind whose resource provider has no deployable on that host, whose
    device is disabled or has no free attach handle ends BindFailed; one
    that needs the device's host (an FPGA to program, a vGPU to create)
    is left BindStarted with its handle taken, for the conductor to finish.
    ``unbind_failed`` are unbinds whose device-side cleanup failed: they
    end UnbindFailed and keep their handle.
    """
    session = context.session
    uuids = list(binds) + list(unbinds)
    found = {row.uuid: row for row in session.execute(
        sa.select(ARQ.uuid, ARQ.attach_handle_id, ARQ.device_profile_group)
        .where(ARQ.uuid.in_(uuids)).with_for_update())}
    missing = set(uuids) - set(found)
    if missing:
        raise exception.ARQNotFound(uuids=', '.join(sorted(missing)))
    instances = {b['instance_uuid'] for b in binds.values()}
    if instances:
        taken = session.execute(
            sa.select(ARQ.instance_uuid, ARQ.uuid).where(
                ARQ.instance_uuid.in_(instances),
                ARQ.uuid.not_in(list(unbinds)))).first()
        if taken is not None:
            raise exception.Invalid(
                reason=f'Instance {taken.instance_uuid} already has '
                       'accelerator requests. Cannot bind additional '
                       'ARQs.')
    batch = BindBatch()
    failed = set(unbind_failed or ())
    released = [u for u in unbinds if u not in failed]
    if released:
        _release(session, [found[u].attach_handle_id for u in released])
    for uuid in unbinds:
        if uuid in failed:
            _transition(session, uuid, UNBINDABLE, 'unbinding',
                        {'state': 'UnbindFailed'})
            batch.states[uuid] = 'UnbindFailed'
            continue
        _transition(session, uuid, UNBINDABLE, 'unbinding', {
            'state': 'Unbound', 'hostname': None,
            'device_rp_uuid': None, 'instance_uuid': None,
            'attach_handle_id': None, 'deployable_id': None})
        batch.states[uuid] = 'Unbound'
    # Taking handles deployable by deployable, in one order for every
    # transaction, keeps concurrent batches from locking in a cycle.
    programming: dict[int, str | None] = {}
    for uuid, binding in sorted(
            binds.items(), key=lambda item: (item[1]['device_rp_uuid'],
                                             item[0])):
        _bind(session, uuid, binding,
              json.loads(found[uuid].device_profile_group), batch,
              programming)
    return batch


@retry_on_deadlock
@writer
def delete(context: cyborg_context.RequestContext,
           uuids: list[str] | None = None,
           instance_uuid: str | None = None) -> int:
    """Free their handles and delete ARQs; returns how many.

    By uuid every one must exist (ARQNotFound otherwise, nothing deleted);
    by instance, none is fine.
    """
    session = context.session
    if uuids is not None:
        where = ARQ.uuid.in_(uuids)
    else:
        where = ARQ.instance_uuid == instance_uuid
    rows = session.execute(
        sa.select(ARQ.id, ARQ.uuid, ARQ.attach_handle_id).where(where)
        .with_for_update()).all()
    if uuids is not None:
        missing = set(uuids) - {r.uuid for r in rows}
        if missing:
            raise exception.ARQNotFound(uuids=', '.join(sorted(missing)))
    ids = [r.id for r in rows]
    if ids:
        _release(session, [r.attach_handle_id for r in rows])
        session.execute(sa.delete(ARQ).where(ARQ.id.in_(ids)))
    return len(ids)


@retry_on_deadlock
@writer
def finish_binds(context: cyborg_context.RequestContext,
                 succeeded: list[str], failed: list[str],
                 bitstreams: dict[int, str] | None = None) -> dict[str, str]:
    """End binds that were BindStarted: Bound or BindFailed (whose handle
    is freed). ``bitstreams`` records what programming loaded on which
    deployable. An ARQ unbound or deleted meanwhile is left alone; the
    result maps the ARQs actually ended to their state.
    """
    session = context.session
    for deployable_id, bitstream in (bitstreams or {}).items():
        session.execute(sa.update(Dep).where(Dep.id == deployable_id)
                        .values(bitstream_id=bitstream))
    uuids = list(succeeded) + list(failed)
    if not uuids:
        return {}
    started = {row.uuid: row.attach_handle_id for row in session.execute(
        sa.select(ARQ.uuid, ARQ.attach_handle_id)
        .where(ARQ.uuid.in_(uuids), ARQ.state == 'BindStarted')
        .with_for_update())}
    ended: dict[str, str] = {}
    bound = [u for u in succeeded if u in started]
    if bound:
        session.execute(sa.update(ARQ).where(
            ARQ.uuid.in_(bound), ARQ.state == 'BindStarted')
            .values(state='Bound'))
        ended.update(dict.fromkeys(bound, 'Bound'))
    lost = [u for u in failed if u in started]
    if lost:
        _release(session, [started[u] for u in lost])
        session.execute(sa.update(ARQ).where(
            ARQ.uuid.in_(lost), ARQ.state == 'BindStarted')
            .values(state='BindFailed', attach_handle_id=None,
                    deployable_id=None))
        ended.update(dict.fromkeys(lost, 'BindFailed'))
    return ended


@reader
def stale_binds(context: cyborg_context.RequestContext,
                started_before: Any) -> dict[str, str | None]:
    """ARQ uuid -> instance of binds BindStarted since before the time
    given: their conductor stopped, or their host never answered."""
    return dict(context.session.execute(
        sa.select(ARQ.uuid, ARQ.instance_uuid).where(
            ARQ.state == 'BindStarted',
            sa.func.coalesce(ARQ.updated_at, ARQ.created_at)
            < started_before)).all())


@reader
def device_side_handles(context: cyborg_context.RequestContext,
                        uuids: list[str] | None = None,
                        instance_uuid: str | None = None
                        ) -> list[dict[str, Any]]:
    """The ARQs (by uuid or instance) holding a handle that exists on the
    host only while bound (an mdev), with what the agent needs to remove
    it."""
    where = (ARQ.uuid.in_(uuids) if uuids is not None
             else ARQ.instance_uuid == instance_uuid)
    rows = context.session.execute(
        sa.select(ARQ.uuid, AH.uuid.label('handle_uuid'), AH.attach_info,
                  Dep.driver_name, models.Device.host)
        .join(AH, AH.id == ARQ.attach_handle_id)
        .join(Dep, Dep.id == AH.deployable_id)
        .join(models.Device, models.Device.id == Dep.device_id)
        .where(where, AH.attach_type.not_in(INSTANT_TYPES))).all()
    return [{'arq_uuid': r.uuid, 'attach_handle_uuid': r.handle_uuid,
             'attach_info': json.loads(r.attach_info),
             'driver_name': r.driver_name, 'host': r.host} for r in rows]


@reader
def handles_in_use(context: cyborg_context.RequestContext,
                   deployable_id: int, besides: list[str]) -> int:
    """How many of the deployable's handles are in use, not counting the
    handles named (by uuid)."""
    return context.session.scalar(
        sa.select(sa.func.count()).select_from(AH).where(
            AH.deployable_id == deployable_id, AH.in_use.is_(True),
            AH.uuid.not_in(besides)))


@writer
def mark_deleting(context: cyborg_context.RequestContext,
                  uuids: list[str]) -> None:
    """Deleting: their device-side cleanup is under way."""
    if uuids:
        context.session.execute(sa.update(ARQ).where(
            ARQ.uuid.in_(uuids), ARQ.state != 'Deleting')
            .values(state='Deleting'))
