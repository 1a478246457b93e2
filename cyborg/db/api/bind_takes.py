"""One bind taken: what ``bind_decision.decide`` asks for read, one step
at a time, and the handle and programming it decides taken.

``arq_bindings`` then moves the ARQ on, with the other requests of its
PATCH; a handle is taken with a compare-and-swap on ``in_use`` (see
``attach_handles``) and a deployable's programming under its lock (see
``deployables``), so two conductors never take the same.
"""
import json
import typing
from collections.abc import Callable
from typing import Any

import sqlalchemy as sa

from cyborg.common import exception
from cyborg.db import models
from cyborg.db.api import attach_handles
from cyborg.db.api import bind_decision
from cyborg.db.api import deployables

Dep = models.Deployable


class Taken(typing.NamedTuple):
    """A bind made: the ARQ's new values (its binding and state), and,
    for one left BindStarted, what a worker needs to finish it on the
    device's host."""

    values: dict[str, Any]
    job: dict[str, Any] | None


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


def take(session: sa.orm.Session, uuid: str, binding: dict[str, Any],
         group: dict[str, Any], programming: dict[int, str],
         find_bitstream: Callable[[str], str] | None
         ) -> Taken | bind_decision.Refused:
    """Take what the bind of ARQ ``uuid`` to the deployable behind its
    resource provider needs, or say why it cannot be (and take nothing).

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
        return step
    return _take(session, uuid, binding, read, step, programming)


def _take(session: sa.orm.Session, uuid: str, binding: dict[str, Any],
          read: bind_decision.BindRead, bind: bind_decision.Bind,
          programming: dict[int, str]) -> Taken:
    """Make the bind ``decide`` allowed, with the handle it took: start
    the programming it does (noted in ``programming``), and say what the
    ARQ becomes."""
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
        return Taken(dict(values, state='BindStarted'), dict(
            _job(deployable, handle), arq_uuid=uuid,
            instance_uuid=binding['instance_uuid'],
            bitstream_id=bitstream, program=bind.program,
            await_program=bind.waits))
    return Taken(dict(values, state='Bound'), None)
