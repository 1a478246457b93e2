"""What each host's resource providers in placement should hold.

A deployable is one provider under its host's compute node. Its desired
state (name, resource class, inventory, traits) is derived from the
database here; ``rp_synced`` records the digest of the state last written
to placement, so a host whose digests all match needs no placement call.
"""
import dataclasses
import datetime
import hashlib
import json
import logging
from typing import Any

import sqlalchemy as sa
from oslo_utils import timeutils

from cyborg import context as cyborg_context
from cyborg.db import models
from cyborg.db.api import reader
from cyborg.db.api import writer

LOG = logging.getLogger(__name__)

Dep = models.Deployable
Device = models.Device
Removal = models.ProviderRemoval

OWNER_TRAIT = 'OWNER_CYBORG'
# Placement's limit on provider names.
_NAME_LENGTH = 200


@dataclasses.dataclass(frozen=True)
class Provider:
    """The desired state of one deployable's resource provider."""

    deployable_id: int
    uuid: str
    name: str
    hostname: str
    resource_class: str | None
    total: int
    reserved: int
    traits: frozenset[str]
    synced: str | None = None
    generation: int | None = None

    def inventories(self) -> dict[str, dict[str, Any]]:
        if not self.resource_class or self.total < 1:
            return {}
        return {self.resource_class: {
            'total': self.total, 'max_unit': self.total,
            'reserved': self.reserved, 'min_unit': 1, 'step_size': 1,
            'allocation_ratio': 1.0}}

    def digest(self) -> str:
        state = {'uuid': self.uuid, 'name': self.name,
                 'parent': self.hostname, 'inventories': self.inventories(),
                 'traits': sorted(self.traits)}
        return hashlib.sha256(json.dumps(state, sort_keys=True).encode()
                              ).hexdigest()

    @property
    def in_sync(self) -> bool:
        return self.synced == self.digest()


def provider_name(hostname: str, deployable_name: str) -> str:
    """The deployable's name, prefixed with the host's unless drivers
    already put it there: provider names are unique across a cloud."""
    if not deployable_name.startswith(hostname):
        deployable_name = f'{hostname}_{deployable_name}'
    return deployable_name[:_NAME_LENGTH]


def held_back() -> sa.ColumnElement[bool]:
    """Whether placement reserves all of a deployable's accelerators.

    Maintenance, a device gone while held, a device whose driver an
    operator turned off on its host, and an unhealthy device (a
    NoSchedule taint: held requests keep it) all reserve it. The capacity
    view (``capacity.get``) counts ``reserved`` by the same rule. So does
    a device whose layout is being changed (or failed to): its handles
    may not exist yet, or any more, until the agent has reported it.
    """
    return sa.or_(Device.status != 'enabled',
                  Device.health == 'unhealthy',
                  Dep.missing_since.is_not(None),
                  Dep.driver_disabled_since.is_not(None),
                  sa.func.coalesce(Device.layout_state, 'none').in_(
                      ('pending', 'applying', 'failed')))


def reserved() -> sa.ColumnElement[int]:
    """How many of a deployable's accelerators placement reserves: all of
    them while held back, else one per attach handle being cleaned after
    use or held in maintenance after a failed clean (``cleaning``), or
    released and waiting for its host to confirm its mdev removed
    (``attach_handles.release``), never more than it has. The capacity
    view counts the same way."""
    AH = models.AttachHandle
    unclean = (sa.select(sa.func.count(AH.id))
               .where(AH.deployable_id == Dep.id,
                      sa.or_(AH.clean_state.is_not(None),
                             AH.released_at.is_not(None)))
               .scalar_subquery())
    return sa.case((held_back(), Dep.num_accelerators),
                   (unclean > Dep.num_accelerators, Dep.num_accelerators),
                   else_=unclean)


@reader
def host_providers(context: cyborg_context.RequestContext, hostname: str
                   ) -> list[Provider]:
    """The desired provider of every deployable on ``hostname``."""
    session = context.session
    rows = session.execute(
        sa.select(Dep.id, Dep.rp_uuid, Dep.name, Dep.num_accelerators,
                  Dep.missing_since, Dep.rp_synced, Dep.rp_generation,
                  reserved().label('reserved'))
        .join(Device).where(Device.hostname == hostname,
                            Dep.rp_uuid.is_not(None))
        .order_by(Dep.id)).all()
    if not rows:
        return []
    classes: dict[int, str] = {}
    traits: dict[int, set[str]] = {row.id: {OWNER_TRAIT} for row in rows}
    attr = models.Attribute
    for dep_id, key, value in session.execute(
            sa.select(attr.deployable_id, attr.key, attr.value)
            .join(Dep).join(Device)
            .where(Device.hostname == hostname,
                   sa.or_(attr.key == 'rc', attr.key.startswith('trait')))):
        if key == 'rc':
            classes[dep_id] = value.strip()
        elif value.strip():
            traits[dep_id].add(value.strip())
    return [Provider(
        deployable_id=row.id, uuid=row.rp_uuid,
        name=provider_name(hostname, row.name), hostname=hostname,
        resource_class=classes.get(row.id), total=row.num_accelerators,
        reserved=int(row.reserved),
        traits=frozenset(traits[row.id]), synced=row.rp_synced,
        generation=row.rp_generation) for row in rows]


@reader
def removals(context: cyborg_context.RequestContext,
             hostname: str) -> list[str]:
    """Providers of ``hostname`` waiting to be deleted from placement."""
    return list(context.session.scalars(
        sa.select(Removal.rp_uuid).where(Removal.hostname == hostname)
        .order_by(Removal.id)))


@reader
def pending_hostnames(context: cyborg_context.RequestContext,
                      written_before: datetime.datetime | None = None
                      ) -> list[str]:
    """Hosts with a provider not yet written, or one to delete; with
    ``written_before``, only those whose pending rows are older."""
    unsynced = (sa.select(Device.hostname).join(Dep)
                .where(Dep.rp_synced.is_(None), Dep.rp_uuid.is_not(None)))
    removing = sa.select(Removal.hostname)
    if written_before is not None:
        unsynced = unsynced.where(sa.func.coalesce(
            Dep.updated_at, Dep.created_at) < written_before)
        removing = removing.where(Removal.created_at < written_before)
    return sorted(context.session.scalars(
        sa.union(unsynced, removing)))


@reader
def all_hostnames(context: cyborg_context.RequestContext) -> list[str]:
    return sorted(context.session.scalars(
        sa.union(sa.select(Device.hostname), sa.select(Removal.hostname))))


@writer
def record(context: cyborg_context.RequestContext,
           states: list[tuple[int, str | None, int | None]]) -> None:
    """Store (deployable id, digest, generation) after placement calls;
    a None digest marks the provider as still to be written."""
    if states:
        context.session.execute(
            sa.update(Dep).execution_options(synchronize_session=False),
            [{'id': dep_id, 'rp_synced': digest, 'rp_generation': gen}
             for dep_id, digest, gen in states])


@writer
def forget_removals(context: cyborg_context.RequestContext,
                    rp_uuids: list[str]) -> None:
    if rp_uuids:
        context.session.execute(
            sa.delete(Removal).where(Removal.rp_uuid.in_(rp_uuids)))


def add_removals(session: sa.orm.Session, entries: dict[str, str]) -> None:
    """Queue providers (uuid: hostname) for deletion, in the caller's
    transaction; one already queued is left as it is."""
    if not entries:
        return
    queued = set(session.scalars(sa.select(Removal.rp_uuid).where(
        Removal.rp_uuid.in_(list(entries)))))
    now = timeutils.utcnow()
    rows = [{'rp_uuid': uuid, 'hostname': hostname, 'created_at': now}
            for uuid, hostname in entries.items() if uuid not in queued]
    if rows:
        session.execute(sa.insert(Removal), rows)


@writer
def queue_removals(context: cyborg_context.RequestContext,
                   entries: dict[str, str]) -> None:
    add_removals(context.session, entries)


@writer
def purge_released(context: cyborg_context.RequestContext) -> int:
    """Delete deployables their host no longer has, now that no request
    holds them, and devices left with none; returns how many deployables.

    Their providers are queued for removal from placement.
    """
    session = context.session
    dep, handle = models.Deployable, models.AttachHandle
    arq = models.AcceleratorRequest
    held = sa.select(arq.deployable_id).where(arq.deployable_id.is_not(None))
    busy = sa.select(handle.deployable_id).where(handle.in_use.is_(True))
    rows = session.execute(
        sa.select(dep.id, dep.rp_uuid, dep.device_id, models.Device.hostname)
        .join(models.Device)
        .where(dep.missing_since.is_not(None), dep.id.not_in(held),
               dep.id.not_in(busy))).all()
    if not rows:
        return 0
    ids = [r.id for r in rows]
    add_removals(session, {r.rp_uuid: r.hostname for r in rows
                           if r.rp_uuid})
    session.execute(sa.delete(models.Attribute).where(
        models.Attribute.deployable_id.in_(ids)))
    session.execute(sa.delete(handle).where(handle.deployable_id.in_(ids)))
    session.execute(sa.delete(dep).where(dep.id.in_(ids)))
    emptied = set(session.scalars(
        sa.select(models.Device.id).where(
            models.Device.id.in_({r.device_id for r in rows}),
            ~sa.exists().where(dep.device_id == models.Device.id))))
    if emptied:
        session.execute(sa.delete(models.ControlpathID).where(
            models.ControlpathID.device_id.in_(emptied)))
        session.execute(sa.delete(models.Device).where(
            models.Device.id.in_(emptied)))
    LOG.info('Removed %d deployable(s) that their hosts no longer have, '
             'now that no request holds them.', len(ids))
    return len(ids)
