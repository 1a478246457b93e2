"""Capacity: the accelerators of every resource provider, counted in SQL
per host, resource class or trait as placement counts them."""
from typing import Any

import sqlalchemy as sa

from cyborg import context as cyborg_context
from cyborg.db import models
from cyborg.db.api import providers
from cyborg.db.api import reader

Dep = models.Deployable
Device = models.Device
Attr = models.Attribute
Handle = models.AttachHandle

# What ``group_by`` may be, and the key each group's row is named by.
GROUP_KEYS = {'host': 'hostname', 'resource_class': 'resource_class',
              'trait': 'trait'}
COUNTS = ('total', 'used', 'reserved', 'unhealthy', 'available')


def _per_deployable(hostname: str | None, resource_class: str | None,
                    type: str | None) -> sa.Subquery:
    """One row per deployable with a resource provider, after the
    filters: its host, resource class and the five counts."""
    rc = (sa.select(Attr.deployable_id, sa.func.trim(Attr.value).label('rc'))
          .where(Attr.key == 'rc').subquery('rc'))
    used = (sa.select(Handle.deployable_id,
                      sa.func.count(Handle.id).label('used'))
            # A handle being cleaned, held after a failed clean, or
            # released until its host confirms its mdev gone, is still in
            # use but no request's: placement reserves it.
            .where(Handle.in_use.is_(True), Handle.clean_state.is_(None),
                   Handle.released_at.is_(None))
            .group_by(Handle.deployable_id).subquery('used'))
    held = providers.held_back()
    in_use = sa.func.coalesce(used.c.used, 0)
    reserved = providers.reserved()
    select = (
        sa.select(
            Dep.id, Device.hostname, rc.c.rc.label('resource_class'),
            Dep.num_accelerators.label('total'),
            in_use.label('used'),
            reserved.label('reserved'),
            sa.case((Device.health == 'unhealthy', Dep.num_accelerators),
                    else_=0).label('unhealthy'),
            # Placement's capacity minus usage, per provider: nothing
            # while held back, never below zero.
            sa.case((held, 0),
                    (in_use + reserved >= Dep.num_accelerators, 0),
                    else_=Dep.num_accelerators - in_use - reserved
                    ).label('available'))
        .join(Device, Device.id == Dep.device_id)
        .outerjoin(rc, rc.c.deployable_id == Dep.id)
        .outerjoin(used, used.c.deployable_id == Dep.id)
        .where(Dep.rp_uuid.is_not(None)))
    if hostname is not None:
        select = select.where(Device.hostname == hostname)
    if resource_class is not None:
        select = select.where(rc.c.rc == resource_class)
    if type is not None:
        select = select.where(Device.type == type)
    return select.subquery('deployables')


def _traits() -> sa.Subquery:
    """(deployable id, trait) for every trait its provider has: the
    values of its ``trait*`` attributes, and OWNER_CYBORG."""
    value = sa.func.trim(Attr.value)
    return sa.union(
        sa.select(Attr.deployable_id, value.label('trait'))
        .where(Attr.key.startswith('trait'), value != ''),
        sa.select(Dep.id.label('deployable_id'),
                  sa.literal(providers.OWNER_TRAIT, sa.Text).label('trait')),
    ).subquery('traits')


def _select(group_by: str, hostname: str | None,
            resource_class: str | None, type: str | None,
            marker: str | None) -> sa.Select:
    """The grouped query of ``get``, ordered by key (null last), from
    after ``marker``."""
    deps = _per_deployable(hostname, resource_class, type)
    source: sa.FromClause
    if group_by == 'trait':
        traits = _traits()
        key = traits.c.trait
        source = deps.join(traits, traits.c.deployable_id == deps.c.id)
    else:
        key = deps.c[GROUP_KEYS[group_by]]
        source = deps
    select = (
        sa.select(key.label('key'),
                  *(sa.func.sum(deps.c[name]).label(name)
                    for name in COUNTS))
        .select_from(source).group_by(key)
        .order_by(key.is_(None), key))
    if marker is not None:
        # Keyset paging: the groups after the marker's key, whether or
        # not a group still has it (a host may lose its last deployable
        # between two pages). The null group (resource_class) sorts last,
        # so it always follows a marker, and is never one: as the last
        # row, no page follows it.
        select = select.where(sa.or_(key > marker, key.is_(None)))
    return select


def _as_dicts(rows: Any, key_name: str) -> list[dict[str, Any]]:
    return [dict({key_name: row.key},
                 **{name: int(row._mapping[name]) for name in COUNTS})
            for row in rows]


@reader
def get(context: cyborg_context.RequestContext, group_by: str = 'host',
        hostname: str | None = None, resource_class: str | None = None,
        type: str | None = None) -> list[dict[str, Any]]:
    """The counts of each group, ordered by its key (null last).

    Over the deployables with a resource provider, after the filters:
    ``total`` sums their accelerators (placement's inventory total);
    ``used`` counts their attach handles held by requests; ``reserved``
    sums the accelerators placement holds back (``providers.reserved``:
    all of a held-back deployable, else its handles being cleaned, in
    maintenance or released);
    ``unhealthy`` sums the accelerators of unhealthy devices; and
    ``available`` sums, per deployable, what placement could still
    allocate: nothing while held back, else total minus used and
    reserved (not below zero). Under ``trait`` a deployable counts once
    under each of its traits; under ``resource_class`` one without a
    class is in the null group.
    """
    select = _select(group_by, hostname, resource_class, type, None)
    return _as_dicts(context.session.execute(select), GROUP_KEYS[group_by])


@reader
def get_page(context: cyborg_context.RequestContext, group_by: str = 'host',
             hostname: str | None = None, resource_class: str | None = None,
             type: str | None = None, size: int | None = None,
             marker: str | None = None
             ) -> tuple[list[dict[str, Any]], bool]:
    """The groups of ``get`` after the one keyed ``marker``, at most
    ``size`` (all when None), and whether more follow. The database
    limits the grouped rows: no page reads the groups of another."""
    select = _select(group_by, hostname, resource_class, type, marker)
    if size is not None:
        select = select.limit(size + 1)
    rows = _as_dicts(context.session.execute(select), GROUP_KEYS[group_by])
    if size is None:
        return rows, False
    return rows[:size], len(rows) > size
