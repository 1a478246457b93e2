"""Accelerator requests (ARQs): reading and creating them.

Binding, unbinding and deleting them is in ``arq_bindings``.
"""
import datetime
import json
import types
import typing
import uuid as uuid_lib
from typing import Any

import sqlalchemy as sa
from oslo_utils import timeutils

from cyborg import context as cyborg_context
from cyborg.common import exception
from cyborg.conf import CONF
from cyborg.db import models
from cyborg.db.api import device_profiles
from cyborg.db.api import project_locks
from cyborg.db.api import query
from cyborg.db.api import reader
from cyborg.db.api import retry_on_deadlock
from cyborg.db.api import usage
from cyborg.db.api import writer

ARQ = models.AcceleratorRequest
DP = models.DeviceProfile
DPP = models.DeviceProfileProject
AH = models.AttachHandle
Dep = models.Deployable

RESOLVED = ('Bound', 'BindFailed', 'Deleting')

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
    """ARQs, filtered in SQL; ``project_id`` None means every project.

    ``marker`` must name an ARQ the caller sees: another project's is
    refused as an unknown uuid is.
    """
    select = _scoped(_select(), project_id)
    if instance_uuid is not None:
        select = select.where(ARQ.instance_uuid == instance_uuid)
    if resolved_only:
        select = select.where(ARQ.state.in_(RESOLVED))
    if marker is not None:
        marker_id = context.session.scalar(_scoped(
            sa.select(ARQ.id), project_id).where(ARQ.uuid == marker))
        if marker_id is None:
            # As query.paginate answers a uuid nobody has.
            raise exception.Invalid(
                reason=f'marker {marker} does not name an item of this '
                       'list.')
        select, marker = select.where(ARQ.id > marker_id), None
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
                 project_id: str | None = None, missing_ok: bool = False
                 ) -> list[dict[str, Any]]:
    """The ARQs named, or ARQNotFound listing those not found (unless
    ``missing_ok``: those found)."""
    rows = context.session.execute(
        _scoped(_select(), project_id).where(ARQ.uuid.in_(uuids))).all()
    missing = set(uuids) - {r.uuid for r in rows}
    if missing and not missing_ok:
        raise exception.ARQNotFound(uuids=', '.join(sorted(missing)))
    return [to_dict(r) for r in rows]


class Create(typing.NamedTuple):
    """One HTTP request's create: the profile it names, the project that
    will own the requests, whether its caller sees every project
    (``cyborg:device_profile:all_projects``), so may use any profile (any
    other caller may use the public ones and the private ones whose
    access list holds ``project_id``), and the client's
    ``Idempotency-Key``, if any (microversion 2.11)."""

    profile_name: str
    project_id: str | None
    all_projects: bool = False
    idempotency_key: str | None = None


class Replay(list[dict[str, Any]]):
    """The requests an earlier create of the project made with the same
    idempotency key, as they are now: the answer again, nothing created
    (so nothing to announce, nothing counted against a limit)."""


def create(context: cyborg_context.RequestContext, profile_name: str,
           project_id: str | None, all_projects: bool = False,
           idempotency_key: str | None = None, *,
           limits: usage.Limits | None = None) -> list[dict[str, Any]]:
    """One Initial ARQ per accelerator of each group of the profile; with
    ``idempotency_key``, see ``create_many``."""
    created = create_many(context, [
        Create(profile_name, project_id, all_projects, idempotency_key)],
        limits)[0]
    if isinstance(created, exception.CyborgException):
        raise created
    return created


@retry_on_deadlock
@writer
def create_many(context: cyborg_context.RequestContext,
                requests: list[Create] | list[tuple[str, str | None]],
                limits: usage.Limits | None = None
                ) -> list[list[dict[str, Any]] | exception.CyborgException]:
    """``create`` for each ``Create`` of ``requests`` (a plain (profile
    name, project) is one whose caller does not see every project) in one
    transaction: one SELECT of the profiles and one INSERT of every ARQ.

    With ``limits`` (read before, see ``usage``), the requests' projects
    are locked and counted first, once, and the requests admitted in
    order: one that would take its project over ``accelerator_requests``
    is refused alone (OverLimit), and the next are counted without it.

    A request with an idempotency key that an earlier create of its
    project made requests with (``_earlier``) is answered those requests
    as they are now, a ``Replay``, or IdempotencyKeyReused if it names
    another profile. Only a batch with a key locks its projects for that
    (``project_locks``, before any other lock, in one order): two creates
    with one key, in two transactions, run one after the other, so the
    second finds what the first made. A create without a key pays for
    neither.

    Returns one item per request, in order: its ARQs, or
    DeviceProfileNotFound (also for a private profile the request may
    not use), Invalid, OverLimit or IdempotencyKeyReused, which fail that
    request alone.
    """
    return create_in(context.session, requests, limits)


def create_in(session: sa.orm.Session,
              requests: list[Create] | list[tuple[str, str | None]],
              limits: usage.Limits | None = None
              ) -> list[list[dict[str, Any]] | exception.CyborgException]:
    """``create_many`` in the caller's transaction.

    A request with the project and key of one before it in ``requests``
    (two HTTP requests of one client's retry, joined in one batch) is
    answered after the others, as by a later transaction: what the first
    made, or, if that was refused, what it makes itself.
    """
    creates = [Create(*r) for r in requests]
    first, later = _repeats(creates)
    if later:
        answers = dict(zip(first, create_in(
            session, [creates[i] for i in first], limits), strict=True))
        answers.update(zip(later, create_in(
            session, [creates[i] for i in later], limits), strict=True))
        return [answers[i] for i in range(len(creates))]
    earlier = _earlier(session, creates)
    answered = [_again(create, earlier.get((create.project_id,
                                            create.idempotency_key)))
                for create in creates]
    fresh = iter(_made(session, [create for create, again in zip(
        creates, answered, strict=True) if again is None]))
    made = [next(fresh) if again is None else again for again in answered]
    if limits is not None:
        # Every statement sees what was committed before it (READ
        # COMMITTED, see cyborg.db.api): counted once the lock is held,
        # a project's requests include those of the write that held it
        # before. A replay adds nothing.
        refusals = usage.admit(session, limits, [
            (create.project_id, {usage.REQUESTS: len(arqs)})
            if isinstance(arqs, list) and not isinstance(arqs, Replay)
            else (None, {})
            for create, arqs in zip(creates, made, strict=True)])
        made = [refusal or arqs for arqs, refusal in zip(made, refusals,
                                                         strict=True)]
    rows = [row for arqs in made if isinstance(arqs, list)
            and not isinstance(arqs, Replay) for row in arqs]
    if rows:
        session.execute(sa.insert(ARQ), rows)
    # The new rows are known in full; reading them back would cost a
    # query.
    return [[to_dict(types.SimpleNamespace(
        **row, hostname=None, device_rp_uuid=None, instance_uuid=None,
        updated_at=None, ah_uuid=None, ah_type=None, ah_info=None))
        for row in arqs] if isinstance(arqs, list)
        and not isinstance(arqs, Replay) else arqs for arqs in made]


def _repeats(creates: list[Create]) -> tuple[list[int], list[int]]:
    """The indexes of ``creates`` without and with the (project, key) of
    one before them."""
    seen: set[tuple[str | None, str]] = set()
    first: list[int] = []
    later: list[int] = []
    for index, create in enumerate(creates):
        if create.idempotency_key is None:
            first.append(index)
            continue
        key = (create.project_id, create.idempotency_key)
        (later if key in seen else first).append(index)
        seen.add(key)
    return first, later


# The lock of the requests of no project (an admin's token without one):
# no Keystone project has an empty id.
_NO_PROJECT = ''


def _earlier(session: sa.orm.Session, creates: list[Create]
             ) -> dict[tuple[str | None, str | None], list[dict[str, Any]]]:
    """The requests made by an earlier create with the key of each of
    ``creates`` that has one, by (project, key), as they are now, read
    once the projects of ``creates`` are locked.

    An earlier create counts for ``[conductor] unbound_request_ttl``
    seconds (for ever at 0), as long as one of its requests exists: after
    that the key makes new requests. Should a key have made several sets
    in that time (the TTL raised since), the newest answers.
    """
    keyed: dict[str | None, set[str]] = {}
    for create in creates:
        if create.idempotency_key is not None:
            keyed.setdefault(create.project_id, set()).add(
                create.idempotency_key)
    if not keyed:
        return {}
    # Every project of the batch, not only those with a key: usage.admit
    # locks its own later, and locks taken in two sorted passes could
    # wait on each other's.
    project_locks.lock(session, {
        _NO_PROJECT if create.project_id is None else create.project_id
        for create in creates})
    select = _select().add_columns(ARQ.idempotency_key).where(sa.or_(*(
        sa.and_(ARQ.project_id.is_(None) if project is None
                else ARQ.project_id == project,
                ARQ.idempotency_key.in_(keys))
        for project, keys in keyed.items())))
    ttl = CONF.conductor.unbound_request_ttl
    if ttl:
        # What unbound_expiry keeps (it deletes those created before
        # now - ttl): a key answers as long as its requests would.
        select = select.where(ARQ.created_at >= timeutils.utcnow()
                              - datetime.timedelta(seconds=ttl))
    found: dict[tuple[str | None, str | None], list[Any]] = {}
    for row in session.execute(select.order_by(ARQ.created_at, ARQ.id)):
        mine = found.setdefault((row.project_id, row.idempotency_key), [])
        if mine and mine[0].created_at != row.created_at:
            # A newer create with the key.
            mine.clear()
        mine.append(row)
    return {key: [to_dict(r) for r in rows] for key, rows in found.items()}


def _again(create: Create, earlier: list[dict[str, Any]] | None
           ) -> Replay | exception.CyborgException | None:
    """What answers ``create`` instead of new requests, given what an
    earlier create with its key made (None: nothing, or no key)."""
    if not earlier:
        return None
    used = earlier[0]['device_profile_name']
    if used != create.profile_name:
        return exception.IdempotencyKeyReused(
            key=create.idempotency_key, used=used, asked=create.profile_name)
    return Replay(earlier)


def _made(session: sa.orm.Session, requests: list[Create]
          ) -> list[list[dict[str, Any]] | exception.CyborgException]:
    """The rows each of ``requests`` would insert, or what refuses it: one
    SELECT of the profiles (``_profiles``)."""
    profiles, allowed = _profiles(session, requests)
    groups = {name: json.loads(p.groups) for name, p in profiles.items()}
    # Whole seconds, so what is returned now is what the database keeps
    # (MySQL rounds fractions of a DATETIME, MariaDB truncates them).
    now = timeutils.utcnow().replace(microsecond=0)
    results: list[list[dict[str, Any]] | exception.CyborgException] = []
    for request in requests:
        profile_name, project_id = request.profile_name, request.project_id
        profile = profiles.get(profile_name)
        if profile is None or not may_use(request, bool(profile.is_public),
                                          allowed):
            results.append(exception.DeviceProfileNotFound(name=profile_name))
            continue
        # A profile stored before the limits were lowered makes no more
        # requests than a new one could.
        problem = device_profiles.too_many_accelerators(
            groups[profile_name], CONF.api.max_accelerators_per_group,
            CONF.api.max_accelerators_per_profile)
        if problem:
            results.append(exception.Invalid(
                reason=f'device profile {profile_name}: {problem}'))
            continue
        mine = []
        for group_id, group in enumerate(groups[profile_name]):
            for resource_class in device_profiles.accelerator_classes(
                    group):
                mine.append({'uuid': str(uuid_lib.uuid4()),
                             'state': 'Initial',
                             'project_id': project_id,
                             'device_profile_id': profile.id,
                             'device_profile_name': profile_name,
                             'device_profile_group_id': group_id,
                             'device_profile_group': json.dumps(group),
                             'resource_class': resource_class,
                             'idempotency_key': request.idempotency_key,
                             'created_at': now})
        results.append(mine)
    return results


def _profiles(session: sa.orm.Session, requests: list[Create]
              ) -> tuple[dict[str, Any], set[tuple[str, str]]]:
    """The profiles ``requests`` name, by name, and the (profile name,
    project) pairs of their access lists that matter to the requests, from
    one SELECT.

    Each profile comes with the rows of its access list that hold the
    project of a request whose caller does not see every project: an
    outer join on the list's unique key, so a profile is one row per such
    project, or one row. When no request of the batch sees every project,
    the query itself leaves out the private profiles none of them may use.
    """
    scoped = {r.project_id or '' for r in requests if not r.all_projects}
    select = sa.select(
        DP.id, DP.name, DP.groups, DP.is_public,
        DPP.project_id.label('allowed_project')).outerjoin(
            DPP, sa.and_(DPP.device_profile_id == DP.id,
                         DPP.project_id.in_(scoped))).where(
        DP.name.in_({r.profile_name for r in requests}))
    if not any(r.all_projects for r in requests):
        select = select.where(sa.or_(DP.is_public == sa.true(),
                                     DPP.project_id.is_not(None)))
    profiles: dict[str, Any] = {}
    allowed: set[tuple[str, str]] = set()
    for row in session.execute(select):
        profiles[row.name] = row
        if row.allowed_project is not None:
            allowed.add((row.name, row.allowed_project))
    return profiles, allowed


def may_use(request: Create, is_public: bool,
            allowed: set[tuple[str, str]]) -> bool:
    """Whether ``request`` may create from its profile, public or not,
    given the (profile name, project) pairs of the access lists."""
    return (request.all_projects or is_public
            or (request.profile_name, request.project_id or '') in allowed)


@reader
def count_by_state(context: cyborg_context.RequestContext) -> dict[str, int]:
    """How many ARQs each state has, every project's, in one GROUP BY;
    states no ARQ is in are left out."""
    rows = context.session.execute(
        sa.select(ARQ.state, sa.func.count()).group_by(ARQ.state))
    return {state: count for state, count in rows}
