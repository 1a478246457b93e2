"""Accelerator requests (ARQs): creation, binding, unbinding, deletion.

Every state change is a conditional UPDATE on the state it comes from, and
an attach handle is taken with a compare-and-swap on ``in_use``, so two
conductors working on the same requests never both succeed.
"""
import dataclasses
import json
import logging
import types
import uuid as uuid_lib
from typing import Any

import sqlalchemy as sa
from oslo_utils import timeutils

from cyborg import context as cyborg_context
from cyborg.common import exception
from cyborg.db import models
from cyborg.db.api import query
from cyborg.db.api import reader
from cyborg.db.api import retry_on_deadlock
from cyborg.db.api import writer

LOG = logging.getLogger(__name__)

ARQ = models.AcceleratorRequest
AH = models.AttachHandle
Dep = models.Deployable

RESOLVED = ('Bound', 'BindFailed', 'Deleting')
BINDABLE = ('Initial', 'Unbound')
UNBINDABLE = ('Initial', 'BindStarted', 'Bound', 'BindFailed',
              'UnbindFailed', 'Unbound')

_COLUMNS = (ARQ.id, ARQ.uuid, ARQ.state, ARQ.device_profile_name,
            ARQ.device_profile_group_id, ARQ.device_profile_group,
            ARQ.hostname, ARQ.device_rp_uuid, ARQ.instance_uuid,
            ARQ.project_id, ARQ.created_at, ARQ.updated_at,
            AH.uuid.label('ah_uuid'), AH.attach_type.label('ah_type'),
            AH.attach_info.label('ah_info'))


def _select() -> sa.Select:
    """ARQs with their attach handle, in one query."""
    return sa.select(*_COLUMNS).select_from(ARQ).outerjoin(
        AH, AH.id == ARQ.attach_handle_id)


def to_dict(row: Any) -> dict[str, Any]:
    bound = row.state == 'Bound' and row.ah_uuid is not None
    return {
        'uuid': row.uuid, 'state': row.state,
        'device_profile_name': row.device_profile_name,
        'device_profile_group_id': row.device_profile_group_id,
        'device_profile_group': json.loads(row.device_profile_group),
        'hostname': row.hostname, 'device_rp_uuid': row.device_rp_uuid,
        'instance_uuid': row.instance_uuid, 'project_id': row.project_id,
        'attach_handle_type': row.ah_type if bound else '',
        'attach_handle_uuid': row.ah_uuid if bound else None,
        'attach_handle_info': json.loads(row.ah_info) if bound else {},
        'created_at': row.created_at, 'updated_at': row.updated_at,
    }


def _scoped(select: sa.Select, project_id: str | None) -> sa.Select:
    return select if project_id is None else select.where(
        ARQ.project_id == project_id)


@reader
def get_all(context: cyborg_context.RequestContext,
            project_id: str | None = None,
            instance_uuid: str | None = None, resolved_only: bool = False,
            size: int | None = None, marker: str | None = None
            ) -> tuple[list[dict[str, Any]], bool]:
    """ARQs, filtered in SQL; ``project_id`` None means every project."""
    select = _scoped(_select(), project_id)
    if instance_uuid is not None:
        select = select.where(ARQ.instance_uuid == instance_uuid)
    if resolved_only:
        select = select.where(ARQ.state.in_(RESOLVED))
    rows, more = query.paginate(context.session, select, ARQ, size, marker)
    return [to_dict(r) for r in rows], more


@reader
def count_unresolved(context: cyborg_context.RequestContext,
                     instance_uuid: str, project_id: str | None = None
                     ) -> int:
    select = _scoped(sa.select(sa.func.count()).select_from(ARQ).where(
        ARQ.instance_uuid == instance_uuid, ARQ.state.not_in(RESOLVED)),
        project_id)
    return context.session.scalar(select)


@reader
def get(context: cyborg_context.RequestContext, uuid: str,
        project_id: str | None = None) -> dict[str, Any]:
    row = context.session.execute(
        _scoped(_select(), project_id).where(ARQ.uuid == uuid)).first()
    if row is None:
        raise exception.ARQNotFound(uuids=uuid)
    return to_dict(row)


@reader
def get_by_uuids(context: cyborg_context.RequestContext, uuids: list[str],
                 project_id: str | None = None) -> list[dict[str, Any]]:
    """The ARQs named, or ARQNotFound listing those not found."""
    rows = context.session.execute(
        _scoped(_select(), project_id).where(ARQ.uuid.in_(uuids))).all()
    missing = set(uuids) - {r.uuid for r in rows}
    if missing:
        raise exception.ARQNotFound(uuids=', '.join(sorted(missing)))
    return [to_dict(r) for r in rows]


def accelerator_count(group: dict[str, str]) -> int:
    """How many ARQs a request group needs: the sum of its resources."""
    return sum(int(v) for k, v in group.items()
               if k.startswith('resources:'))


@writer
def create(context: cyborg_context.RequestContext, profile_name: str,
           project_id: str | None) -> list[dict[str, Any]]:
    """One Initial ARQ per accelerator of each group of the profile."""
    created = create_many(context, [(profile_name, project_id)])[0]
    if isinstance(created, exception.CyborgException):
        raise created
    return created


@writer
def create_many(context: cyborg_context.RequestContext,
                requests: list[tuple[str, str | None]]
                ) -> list[list[dict[str, Any]] | exception.CyborgException]:
    """``create`` for each (profile name, project) of ``requests`` in one
    transaction: one SELECT of the profiles and one INSERT of every ARQ.

    Returns one item per request, in order: its ARQs, or
    DeviceProfileNotFound, which fails that request alone.
    """
    names = {name for name, _ in requests}
    profiles = {p.name: p for p in context.session.execute(
        sa.select(models.DeviceProfile.id, models.DeviceProfile.name,
                  models.DeviceProfile.groups)
        .where(models.DeviceProfile.name.in_(names)))}
    groups = {name: json.loads(p.groups) for name, p in profiles.items()}
    # Whole seconds, so what is returned now is what the database keeps
    # (MySQL rounds fractions of a DATETIME, MariaDB truncates them).
    now = timeutils.utcnow().replace(microsecond=0)
    results: list[list[dict[str, Any]] | exception.CyborgException] = []
    rows = []
    for profile_name, project_id in requests:
        profile = profiles.get(profile_name)
        if profile is None:
            results.append(exception.DeviceProfileNotFound(name=profile_name))
            continue
        mine = []
        for group_id, group in enumerate(groups[profile_name]):
            for _ in range(accelerator_count(group)):
                mine.append({'uuid': str(uuid_lib.uuid4()),
                             'state': 'Initial',
                             'project_id': project_id,
                             'device_profile_id': profile.id,
                             'device_profile_name': profile_name,
                             'device_profile_group_id': group_id,
                             'device_profile_group': json.dumps(group),
                             'created_at': now})
        rows.extend(mine)
        # The new rows are known in full; reading them back would cost a
        # query.
        results.append([to_dict(types.SimpleNamespace(
            **row, hostname=None, device_rp_uuid=None, instance_uuid=None,
            updated_at=None, ah_uuid=None, ah_type=None, ah_info=None))
            for row in mine])
    if rows:
        context.session.execute(sa.insert(ARQ), rows)
    return results


def _take_handle(session: sa.orm.Session, deployable_id: int
                 ) -> sa.engine.Row | None:
    """Mark a free attach handle of the deployable in use; its id or None.

    The fast path reads a candidate with ``SKIP LOCKED``, passing over the
    handles concurrent binds are taking. InnoDB may lock more rows than a
    scan returns, so finding nothing there is not the final word: the slow
    path waits for the handle's holder and reads what is still free then.
    The UPDATE stays a compare-and-swap on ``in_use``, and a handle that
    lost the race is not tried again, so the loop ends.
    """
    tried: list[int] = []
    while True:
        free = (sa.select(AH.id, AH.uuid, AH.attach_type, AH.attach_info)
                .where(AH.deployable_id == deployable_id,
                       AH.in_use.is_(False), AH.id.not_in(tried))
                .order_by(AH.id).limit(1))
        candidate = session.execute(
            free.with_for_update(skip_locked=True)).first()
        if candidate is None:
            candidate = session.execute(free.with_for_update()).first()
        if candidate is None:
            return None
        taken = session.execute(
            sa.update(AH).where(AH.id == candidate.id, AH.in_use.is_(False))
            .values(in_use=True)).rowcount
        if taken:
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
