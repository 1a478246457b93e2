"""Instance claims: which project's accelerator requests an instance
holds.

A claim row per instance, unique on its uuid, is taken by the first
PATCH that binds requests to the instance; a later PATCH binding more
to it is refused, or, from microversion 2.9 (a live attach), may join
requests of the same project on the same host. The claim goes with the
instance's last request. Requests of two projects thus never share a
server, whatever order concurrent PATCHes commit in.
"""
from typing import Any

import sqlalchemy as sa
from oslo_utils import timeutils

from cyborg.common import exception
from cyborg.db import models
from cyborg.db.api import query

ARQ = models.AcceleratorRequest
Claim = models.InstanceClaim


def take(session: sa.orm.Session, instance_uuid: str) -> bool:
    """Insert the instance's claim; False if it has one already (see
    ``query.insert_new``)."""
    return query.insert_new(session, Claim, {
        'instance_uuid': instance_uuid,
        'created_at': timeutils.utcnow()}, 'instance_uuid')


def join(session: sa.orm.Session, instance_uuid: str,
         bound_states: tuple[str, ...],
         binds: dict[str, dict[str, Any]]) -> None:
    """Let ``binds`` join the requests that ``instance_uuid``'s claim
    already holds (a live attach): only requests of the same project, on
    the host of those in ``bound_states`` already; Conflict otherwise.

    The claim's row and the instance's requests are read locked, so that
    a concurrent bind or unbind of the instance waits for this one.
    """
    session.execute(sa.select(Claim.id).where(
        Claim.instance_uuid == instance_uuid).with_for_update())
    held = session.execute(
        sa.select(ARQ.uuid, ARQ.project_id, ARQ.hostname, ARQ.state)
        .where(ARQ.instance_uuid == instance_uuid,
               ARQ.uuid.not_in(list(binds)))
        .with_for_update()).all()
    if not held:
        # A claim whose requests are going: nobody else holds the instance.
        return
    projects = {row.project_id for row in held}
    joining = {row.uuid: row.project_id for row in session.execute(
        sa.select(ARQ.uuid, ARQ.project_id).where(
            ARQ.uuid.in_(list(binds))))}
    for uuid, binding in sorted(binds.items()):
        project = binding.get('project_id') or joining.get(uuid)
        if projects != {project}:
            # Named as the caller sent it; the other project stays unnamed.
            raise exception.Conflict(
                reason=f'Cannot bind accelerator request {uuid} to instance '
                       f'{instance_uuid}: the instance holds accelerator '
                       'requests of another project. Bind it to an '
                       'instance of its own project.')
    hosts = sorted({row.hostname for row in held
                    if row.hostname and row.state in bound_states})
    for uuid, binding in sorted(binds.items()):
        if hosts and binding['hostname'] not in hosts:
            raise exception.Conflict(
                reason=f'Cannot bind accelerator request {uuid} to instance '
                       f'{instance_uuid} on host {binding["hostname"]}: the '
                       f'instance\'s other accelerator requests are bound on '
                       f'{", ".join(hosts)}, where the instance runs. Bind it '
                       'to a device of that host.')


def drop(session: sa.orm.Session, instances: set[str | None]) -> None:
    """Delete the claims of the instances given that no ARQ refers to
    any more."""
    named = [i for i in instances if i]
    if named:
        session.execute(sa.delete(Claim).where(
            Claim.instance_uuid.in_(named),
            ~sa.exists().where(ARQ.instance_uuid == Claim.instance_uuid)))
