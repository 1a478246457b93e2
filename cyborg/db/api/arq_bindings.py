"""Binding, unbinding and deleting accelerator requests (ARQs).

Every state change is a conditional UPDATE on the state it comes from, an
attach handle is taken with a compare-and-swap on ``in_use`` (see
``attach_handles``), and an instance's claim and a deployable's programming
are taken the same way, so two conductors working on the same requests
never both succeed.
"""
import dataclasses
import json
import logging
import typing
from collections.abc import Callable
from typing import Any

import sqlalchemy as sa

from cyborg import context as cyborg_context
from cyborg.common import exception
from cyborg.db import models
from cyborg.db.api import attach_handles
from cyborg.db.api import bind_decision
from cyborg.db.api import claims
from cyborg.db.api import cleaning
from cyborg.db.api import deployables
from cyborg.db.api import nova_events
from cyborg.db.api import patch_decision
from cyborg.db.api import query
from cyborg.db.api import retry_on_deadlock
from cyborg.db.api import writer

LOG = logging.getLogger(__name__)

ARQ = models.AcceleratorRequest
AH = models.AttachHandle
Dep = models.Deployable

def _transition(session: sa.orm.Session, uuid: str, sources: tuple[str, ...],
                action: str, values: dict[str, Any]) -> None:
    done = query.changed(session, sa.update(ARQ).where(
        ARQ.uuid == uuid, ARQ.state.in_(sources)).values(**values))
    if not done:
        state = session.scalar(sa.select(ARQ.state).where(ARQ.uuid == uuid))
        raise exception.ARQBadState(uuid=uuid, state=state, action=action,
                                    expected=', '.join(sources))


@dataclasses.dataclass
class BindBatch:
    """What one PATCH or delete did: every ARQ's new state, the binds left
    to finish on the device's host (those now BindStarted), and the
    released attach handles whose mdevs the caller is to remove (see
    ``attach_handles.release``)."""

    states: dict[str, str] = dataclasses.field(default_factory=dict)
    instances: dict[str, str] = dataclasses.field(default_factory=dict)
    jobs: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    released: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    # Binds sent again exactly as they were applied, and (from 2.9)
    # unbinds of requests already Unbound: nothing changed.
    repeated: set[str] = dataclasses.field(default_factory=set)
    # Attach handles (ids) given back that start cleaning after use (see
    # ``cleaning``): the caller cleans them once committed.
    cleaning: list[int] = dataclasses.field(default_factory=list)
    # The ARQs unbound, as they were before (``Held``): a live detach
    # takes their resources out of their instances' allocations.
    unbound: dict[str, Any] = dataclasses.field(default_factory=dict)
    # The events owed to Nova for the binds that ended, written with them
    # (see ``nova_events``): the caller sends them once committed.
    owed: list[nova_events.Owed] = dataclasses.field(default_factory=list)

    @classmethod
    def merged(cls, batches: list['BindBatch']) -> 'BindBatch':
        """One batch doing what all of ``batches`` did (they name
        different ARQs and handles, being applied one after the other),
        but their ``jobs``: each PATCH's binds left to finish are finished
        together (see ``Binder._finish``), so they stay the caller's to
        take from each batch."""
        whole = cls()
        for batch in batches:
            whole.states.update(batch.states)
            whole.instances.update(batch.instances)
            whole.released.extend(batch.released)
            whole.repeated.update(batch.repeated)
            whole.cleaning.extend(batch.cleaning)
            whole.unbound.update(batch.unbound)
            whole.owed.extend(batch.owed)
        return whole

    @property
    def resolved(self) -> dict[str, str]:
        """ARQ uuid -> state of the binds that ended in this PATCH."""
        return {u: s for u, s in self.states.items()
                if s in ('Bound', 'BindFailed') and u not in self.repeated}


def _job(deployable: bind_decision.Target, handle: Any) -> dict[str, Any]:
    """What a worker needs to finish a bind on the device's host."""
    return {'host': deployable.host, 'deployable_id': deployable.id,
            'deployable_uuid': deployable.uuid,
            'deployable_name': deployable.name,
            'driver_name': deployable.driver_name,
            'controlpath_id': {
                'cpid_type': deployable.cpid_type,
                'cpid_info': json.loads(deployable.cpid_info)},
            'attach_type': handle.attach_type,
            'attach_handle_id': handle.id,
            'attach_handle_uuid': handle.uuid,
            'attach_info': json.loads(handle.attach_info)}


def _target(session: sa.orm.Session, rp_uuid: str
            ) -> bind_decision.Target | None:
    """The deployable behind resource provider ``rp_uuid``, with its
    device and control path; None when none has it."""
    row = session.execute(
        sa.select(Dep.id, Dep.uuid, Dep.name, Dep.driver_name,
                  Dep.driver_disabled_since, models.Device.hostname,
                  models.Device.host,
                  models.Device.status, models.Device.health,
                  models.Device.health_reason,
                  models.ControlpathID.cpid_type,
                  models.ControlpathID.cpid_info)
        .join(models.Device, models.Device.id == Dep.device_id)
        .join(models.ControlpathID,
              models.ControlpathID.device_id == models.Device.id)
        .where(Dep.rp_uuid == rp_uuid)
    ).first()
    return None if row is None else bind_decision.Target._make(row)


def _read(session: sa.orm.Session, read: bind_decision.BindRead,
          need: bind_decision.Need,
          find_bitstream: Callable[[str], str] | None) -> None:
    """Read (or, for a handle, take) what ``decide`` needs next."""
    assert read.target is not None  # decide() refuses a missing one
    deployable_id = read.target.id
    if need is bind_decision.Need.BITSTREAM:
        read.looked_up = True
        try:
            if find_bitstream is None:
                raise exception.BitstreamNotFound(
                    reason='no image service to look functions up in')
            read.bitstream = find_bitstream(read.group['accel:function_id'])
        except exception.CyborgException as exc:
            read.lookup_error = str(exc)
    elif need is bind_decision.Need.LOCK:
        # Exclusive when the bind may program (see ``deployables``).
        read.state = deployables.lock(session, deployable_id,
                                      exclusive=bool(read.bitstream))
        read.layout_state = session.scalar(
            sa.select(models.Device.layout_state)
            .join(Dep, Dep.device_id == models.Device.id)
            .where(Dep.id == deployable_id))
    elif need is bind_decision.Need.HOLDERS:
        read.holders = deployables.holders(session, deployable_id)
    else:
        read.taken = True
        read.handle = attach_handles.take(session, deployable_id)


def _bind(session: sa.orm.Session, uuid: str, binding: dict[str, Any],
          group: dict[str, Any], batch: BindBatch,
          programming: dict[int, str],
          find_bitstream: Callable[[str], str] | None) -> str | None:
    """Bind one ARQ to the deployable behind its resource provider, or
    say why it cannot be (and leave it as it was).

    ``programming`` maps the deployables this batch programs to the
    bitstream they get, so that ARQs of one PATCH share a device being
    reprogrammed. ``find_bitstream`` turns an ``accel:function_id`` into
    the id of the image that provides it.
    """
    read = bind_decision.BindRead(
        binding['hostname'], group,
        _target(session, binding['device_rp_uuid']), programming,
        bitstream=group.get('accel:bitstream_id'))
    while isinstance(step := bind_decision.decide(read), bind_decision.Need):
        _read(session, read, step, find_bitstream)
    if isinstance(step, bind_decision.Refused):
        return step.reason
    _take(session, uuid, binding, read, step, batch, programming)
    return None


def _take(session: sa.orm.Session, uuid: str, binding: dict[str, Any],
          read: bind_decision.BindRead, bind: bind_decision.Bind,
          batch: BindBatch, programming: dict[int, str]) -> None:
    """Make the bind ``decide`` allowed, with the handle it took: start
    the programming it does (noted in the batch's ``programming``), and
    move the ARQ to its state."""
    deployable, handle, bitstream = read.target, read.handle, read.bitstream
    assert deployable is not None
    if bind.program and deployable.id not in programming:
        # A bind programs a deployable no other bind of the batch does
        # only when it has a bitstream to load.
        assert bitstream is not None
        deployables.start_programming(session, deployable.id, bitstream)
        programming[deployable.id] = bitstream
    values: dict[str, Any] = {
        'hostname': binding['hostname'],
        'device_rp_uuid': binding['device_rp_uuid'],
        'instance_uuid': binding['instance_uuid'],
        'attach_handle_id': handle.id, 'deployable_id': deployable.id}
    if binding.get('project_id'):
        values['project_id'] = binding['project_id']
    if (bind.program or bind.waits
            or not attach_handles.instant(handle.attach_type,
                                          handle.attach_info)):
        values['state'] = 'BindStarted'
        batch.jobs.append(dict(
            _job(deployable, handle), arq_uuid=uuid,
            instance_uuid=binding['instance_uuid'],
            bitstream_id=bitstream, program=bind.program,
            await_program=bind.waits))
    else:
        values['state'] = 'Bound'
    _transition(session, uuid, patch_decision.BINDABLE, 'binding', values)
    batch.states[uuid] = values['state']
    batch.instances[uuid] = binding['instance_uuid']


class Held(typing.NamedTuple):
    """An ARQ locked for a change, with the handle it holds, if any."""

    id: int
    uuid: str
    state: str
    instance_uuid: str | None
    hostname: str | None
    device_rp_uuid: str | None
    device_profile_group: str
    handle_id: int | None
    handle: Any = None


def held(session: sa.orm.Session, where: Any) -> list[Held]:
    """The ARQs matching ``where``, locked, with their handles.

    Only the ARQ rows are locked (MariaDB would lock every joined row of a
    locking join); handles are read after, by id.
    """
    rows = session.execute(
        sa.select(ARQ.id, ARQ.uuid, ARQ.state, ARQ.instance_uuid,
                  ARQ.hostname, ARQ.device_rp_uuid,
                  ARQ.device_profile_group, ARQ.attach_handle_id)
        .where(where).with_for_update()).all()
    ids = [r.attach_handle_id for r in rows if r.attach_handle_id]
    handles = {h.handle_id: h for h in session.execute(
        sa.select(AH.id.label('handle_id'), AH.uuid.label('handle_uuid'),
                  AH.attach_type, AH.attach_info, Dep.driver_name,
                  models.Device.host,
                  cleaning.driver_cleans().label('clean_after_use'))
        .join(Dep, Dep.id == AH.deployable_id)
        .join(models.Device, models.Device.id == Dep.device_id)
        .where(AH.id.in_(ids)))} if ids else {}
    return [Held(*r[:-1], r.attach_handle_id,
                 handles.get(r.attach_handle_id)) for r in rows]


UNBOUND = {'state': 'Unbound', 'hostname': None, 'device_rp_uuid': None,
           'instance_uuid': None, 'attach_handle_id': None,
           'deployable_id': None}


@retry_on_deadlock
@writer
def apply_patch(context: cyborg_context.RequestContext,
                binds: dict[str, dict[str, Any]], unbinds: list[str],
                find_bitstream: Callable[[str], str] | None = None,
                live: bool = False) -> BindBatch:
    """Bind and unbind in one transaction (see ``apply_in``)."""
    return apply_in(context.session, binds, unbinds, find_bitstream, live)


def apply_in(session: sa.orm.Session, binds: dict[str, dict[str, Any]],
             unbinds: list[str], find_bitstream: Callable[[str], str] | None,
             live: bool) -> BindBatch:
    """Bind and unbind, in the caller's transaction: read the requests
    named, locked; decide what the PATCH does (``patch_decision.plan``,
    which says the rules); unbind; take the instances' claims; bind.

    A bind that cannot be made (see ``bind_decision.decide``) refuses the
    whole PATCH with BindRefused, naming each such bind and why, and
    nothing is written. A bind that needs the device's host (an FPGA to
    program, a vGPU to create) is left BindStarted with its handle taken,
    for the conductor to finish. Every unbind ends Unbound; one holding
    an mdev releases it (see ``attach_handles.release``): the caller has
    it removed on its host.
    """
    found = {row.uuid: row
             for row in held(session, ARQ.uuid.in_([*binds, *unbinds]))}
    plan = patch_decision.plan(found, binds, unbinds, live)
    if plan.refused is not None:
        raise plan.refused
    batch = BindBatch(states=dict(plan.same),
                      repeated={*plan.same, *plan.again})
    _unbind(session, plan.unbinds, found, batch)
    _claim(session, plan.binds, live)
    if plan.stuck is not None:
        raise plan.stuck
    _bind_all(session, plan.binds, found, batch, find_bitstream)
    batch.owed = nova_events.owe(session, [
        (uuid, batch.instances[uuid], nova_events.COMPLETED, None)
        for uuid in sorted(batch.resolved)])
    return batch


def _unbind(session: sa.orm.Session, unbinds: list[str],
            found: dict[str, Held], batch: BindBatch) -> None:
    """Unbind ``unbinds``, give back their handles, forget the events
    they were owed and drop the claims no request holds any more."""
    for uuid in unbinds:
        _transition(session, uuid, patch_decision.UNBINDABLE, 'unbinding',
                    UNBOUND)
        batch.states[uuid] = 'Unbound'
        batch.unbound[uuid] = found[uuid]
    batch.released = attach_handles.release(
        session, [found[uuid] for uuid in unbinds], cleaned=batch.cleaning)
    # An unbound request is owed nothing any more, whatever was pending.
    nova_events.forget(session, unbinds)
    claims.drop(session, {found[u].instance_uuid for u in unbinds})


def _claim(session: sa.orm.Session, binds: dict[str, dict[str, Any]],
           live: bool) -> None:
    """Take the claim of each instance ``binds`` bind to, or join it
    (``patch_decision.claim``)."""
    for instance in sorted({b['instance_uuid'] for b in binds.values()}):
        step = patch_decision.claim(instance, claims.take(session, instance),
                                    live)
        if step is patch_decision.Claim.JOIN:
            claims.join(session, instance, patch_decision.BOUND_TO, {
                u: b for u, b in binds.items()
                if b['instance_uuid'] == instance})
        elif isinstance(step, exception.CyborgException):
            raise step


def _bind_all(session: sa.orm.Session, binds: dict[str, dict[str, Any]],
              found: dict[str, Held], batch: BindBatch,
              find_bitstream: Callable[[str], str] | None) -> None:
    """Make every bind (see ``_bind``); BindRefused naming each that
    cannot be made."""
    programming: dict[int, str] = {}
    refusals: dict[str, str] = {}
    # Taking handles deployable by deployable, in one order for every
    # transaction, keeps concurrent batches from locking in a cycle.
    for uuid, binding in sorted(
            binds.items(), key=lambda item: (item[1]['device_rp_uuid'],
                                             item[0])):
        reason = _bind(session, uuid, binding,
                       json.loads(found[uuid].device_profile_group), batch,
                       programming, find_bitstream)
        if reason is not None:
            LOG.info('Accelerator request %s cannot bind to provider %s: '
                     '%s.', uuid, binding['device_rp_uuid'], reason)
            refusals[uuid] = reason
    if refusals:
        # Every bind is still tried, so that the answer names each one
        # that cannot be; raising rolls back what the others took.
        raise exception.BindRefused.of(refusals)


@retry_on_deadlock
@writer
def delete(context: cyborg_context.RequestContext,
           uuids: list[str] | None = None,
           instance_uuid: str | None = None) -> BindBatch:
    """Delete ARQs and give back their handles, in one transaction;
    ``released`` lists the mdevs the caller is to remove (see
    ``attach_handles.release``).

    By uuid every one must exist (ARQNotFound otherwise, nothing deleted);
    by instance, none is fine. Both given: those of ``uuids`` still bound
    to the instance (one project's, see ``ConductorManager.arq_delete``).
    """
    return delete_in(context.session, uuids, instance_uuid)


def delete_in(session: sa.orm.Session, uuids: list[str] | None,
              instance_uuid: str | None, project_id: str | None = None
              ) -> BindBatch:
    """``delete`` in the caller's transaction; by instance with
    ``project_id``, that project's requests of the instance only."""
    where: list[sa.ColumnElement[bool]] = []
    if uuids is not None:
        where.append(ARQ.uuid.in_(uuids))
    if instance_uuid is not None:
        where.append(ARQ.instance_uuid == instance_uuid)
        if project_id is not None:
            where.append(ARQ.project_id == project_id)
    if not where:
        # Never "every unbound request" (instance_uuid IS NULL).
        raise exception.Invalid(reason='Name the accelerator requests to '
                                       'delete, or their instance.')
    rows = held(session, sa.and_(*where))
    if instance_uuid is None:
        missing = set(uuids or ()) - {r.uuid for r in rows}
        if missing:
            raise exception.ARQNotFound(uuids=', '.join(sorted(missing)))
    batch = BindBatch()
    if rows:
        batch.released = attach_handles.release(session, rows,
                                                cleaned=batch.cleaning)
        session.execute(sa.delete(ARQ).where(
            ARQ.id.in_([r.id for r in rows])))
        nova_events.forget(session, [r.uuid for r in rows])
        claims.drop(session, {r.instance_uuid for r in rows})
        batch.states = dict.fromkeys((r.uuid for r in rows), 'Deleted')
    return batch
