"""Binding, unbinding and deleting accelerator requests (ARQs).

Every state change is a conditional UPDATE on the state it comes from, an
attach handle is taken with a compare-and-swap on ``in_use`` (see
``attach_handles``, through ``bind_takes``), and an instance's claim and a
deployable's programming are taken the same way, so two conductors working
on the same requests never both succeed.
"""
import collections
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
from cyborg.db.api import bind_takes
from cyborg.db.api import claims
from cyborg.db.api import cleaning
from cyborg.db.api import nova_events
from cyborg.db.api import patch_decision
from cyborg.db.api import query
from cyborg.db.api import retry_on_deadlock
from cyborg.db.api import usage
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
    # Whose it is, and the class of its device: what its bind counts
    # against (see ``usage``).
    project_id: str | None = None
    resource_class: str | None = None


def held(session: sa.orm.Session, where: Any) -> list[Held]:
    """The ARQs matching ``where``, locked, with their handles.

    Only the ARQ rows are locked (MariaDB would lock every joined row of a
    locking join); handles are read after, by id.
    """
    rows = session.execute(
        sa.select(ARQ.id, ARQ.uuid, ARQ.state, ARQ.instance_uuid,
                  ARQ.hostname, ARQ.device_rp_uuid,
                  ARQ.device_profile_group, ARQ.attach_handle_id,
                  ARQ.project_id, ARQ.resource_class)
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
    return [Held(r.id, r.uuid, r.state, r.instance_uuid, r.hostname,
                 r.device_rp_uuid, r.device_profile_group,
                 r.attach_handle_id, handles.get(r.attach_handle_id),
                 r.project_id, r.resource_class) for r in rows]


UNBOUND = {'state': 'Unbound', 'hostname': None, 'device_rp_uuid': None,
           'instance_uuid': None, 'attach_handle_id': None,
           'deployable_id': None}


@retry_on_deadlock
@writer
def apply_patch(context: cyborg_context.RequestContext,
                binds: dict[str, dict[str, Any]], unbinds: list[str],
                find_bitstream: Callable[[str], str] | None = None,
                live: bool = False, limits: usage.Limits | None = None
                ) -> BindBatch:
    """Bind and unbind in one transaction (see ``apply_in``)."""
    return apply_in(context.session, binds, unbinds, find_bitstream, live,
                    limits)


def apply_in(session: sa.orm.Session, binds: dict[str, dict[str, Any]],
             unbinds: list[str], find_bitstream: Callable[[str], str] | None,
             live: bool, limits: usage.Limits | None = None) -> BindBatch:
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

    With ``limits`` (read before, see ``usage``), binds that would take a
    project over a limit refuse the whole PATCH with OverLimit, nothing
    written (``_admit``), counted once the unbinds are made.
    """
    found = {row.uuid: row
             for row in held(session, ARQ.uuid.in_([*binds, *unbinds]))}
    plan = patch_decision.plan(found, binds, unbinds, live)
    if plan.refused is not None:
        raise plan.refused
    asks = _asks(plan.binds, found)
    if limits is not None:
        # Before anything is written: the caller reads what is missing.
        usage.known(limits, asks)
    batch = BindBatch(states=dict(plan.same),
                      repeated={*plan.same, *plan.again})
    _unbind(session, plan.unbinds, found, batch)
    _claim(session, plan.binds, live)
    if plan.stuck is not None:
        raise plan.stuck
    if limits is not None:
        _admit(session, limits, asks)
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


def _asks(binds: dict[str, dict[str, Any]], found: dict[str, Held]
          ) -> list[usage.Ask]:
    """What ``binds`` add to each project (see ``usage.admit``): each
    bind of a request holding no device adds a device of its class to the
    project it ends in (the one a ``project_id`` of the bind names, else
    its own), and a request a bind moves to another project adds a
    request there."""
    asks: dict[str, collections.Counter[str]] = collections.defaultdict(
        collections.Counter)
    for uuid, binding in binds.items():
        row = found[uuid]
        project = binding.get('project_id') or row.project_id
        if project is None:
            continue
        if row.handle_id is None and row.resource_class:
            asks[project][usage.resource_of(row.resource_class)] += 1
        if project != row.project_id:
            asks[project][usage.REQUESTS] += 1
    return sorted(asks.items())


def _admit(session: sa.orm.Session, limits: usage.Limits,
           asks: list[usage.Ask]) -> None:
    """OverLimit when ``asks`` would take a project over a limit."""
    refused = [refusal for refusal in usage.admit(session, limits, asks)
               if refusal is not None]
    if refused:
        raise refused[0]


def _bind_all(session: sa.orm.Session, binds: dict[str, dict[str, Any]],
              found: dict[str, Held], batch: BindBatch,
              find_bitstream: Callable[[str], str] | None) -> None:
    """Make every bind (see ``bind_takes.take``) and move its ARQ on;
    BindRefused naming each that cannot be made."""
    programming: dict[int, str] = {}
    refusals: dict[str, str] = {}
    # Taking handles deployable by deployable, in one order for every
    # transaction, keeps concurrent batches from locking in a cycle.
    for uuid, binding in sorted(
            binds.items(), key=lambda item: (item[1]['device_rp_uuid'],
                                             item[0])):
        made = bind_takes.take(
            session, uuid, binding,
            json.loads(found[uuid].device_profile_group), programming,
            find_bitstream)
        if isinstance(made, bind_decision.Refused):
            LOG.info('Accelerator request %s cannot bind to provider %s: '
                     '%s.', uuid, binding['device_rp_uuid'], made.reason)
            refusals[uuid] = made.reason
            continue
        if made.job is not None:
            batch.jobs.append(made.job)
        _transition(session, uuid, patch_decision.BINDABLE, 'binding',
                    made.values)
        batch.states[uuid] = made.values['state']
        batch.instances[uuid] = binding['instance_uuid']
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
    to the instance (one project's, see ``endpoints.arqs``, ``arq_delete``).
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
