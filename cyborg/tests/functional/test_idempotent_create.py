"""Creates with an idempotency key (microversion 2.11) in the database
layer, on SQLite, MariaDB and PostgreSQL: a key answers its first
create's requests, per project, for ``[conductor] unbound_request_ttl``,
and two creates with one key at the same time make one set."""
import concurrent.futures
import datetime
import threading

import pytest
import sqlalchemy as sa
from oslo_utils import timeutils

from cyborg import context as cyborg_context
from cyborg.common import exception
from cyborg.db import models
from cyborg.db.api import arqs
from cyborg.db.api import device_profiles
from cyborg.db.api import usage

ARQ = models.AcceleratorRequest
Create = arqs.Create


@pytest.fixture
def ctx(conf, db_engine):
    context = cyborg_context.get_admin_context()
    device_profiles.create(context, {'name': 'dp', 'groups': [
        {'resources:FPGA': '2'}]})
    device_profiles.create(context, {'name': 'other', 'groups': [
        {'resources:FPGA': '1'}]})
    return context


def _create(ctx, profile: str = 'dp', project: str | None = 'p1'
            ) -> list[dict]:
    """A create of ``profile`` for ``project`` with the key ``k``."""
    return arqs.create(ctx, profile, project, idempotency_key='k')


def _keyed_create(profile: str, project: str) -> arqs.Create:
    return Create(profile, project, idempotency_key='k')


def _uuids(made) -> list[str]:
    return [a['uuid'] for a in made]


def _keyed(engine) -> dict[tuple[str, str], list[str]]:
    """The requests of each (project, key), as stored."""
    found: dict[tuple[str, str], list[str]] = {}
    with engine.connect() as conn:
        for row in conn.execute(sa.select(
                ARQ.project_id, ARQ.idempotency_key, ARQ.uuid)
                .where(ARQ.idempotency_key.is_not(None)).order_by(ARQ.id)):
            found.setdefault((row.project_id, row.idempotency_key),
                             []).append(row.uuid)
    return found


def test_a_key_answers_its_first_create_in_its_project(ctx, db_engine):
    first = _create(ctx)
    assert len(first) == 2 and not isinstance(first, arqs.Replay)
    again = _create(ctx)
    assert isinstance(again, arqs.Replay)
    assert again == first
    # Another project's key is its own; no key, no replay.
    assert _uuids(_create(ctx, 'dp', 'p2')) != _uuids(first)
    assert _uuids(arqs.create(ctx, 'dp', 'p1')) != _uuids(first)
    with pytest.raises(exception.IdempotencyKeyReused,
                       match="'k' was used for device profile dp"):
        _create(ctx, 'other', 'p1')
    assert list(_keyed(db_engine)) == [('p1', 'k'), ('p2', 'k')]


def test_the_requests_answered_are_as_they_are_now(ctx, db_engine):
    first = _uuids(_create(ctx))
    instance = '0f0c8e0e-7a2a-4df0-9d0e-3f6a6b1f5b1e'
    with db_engine.begin() as conn:
        conn.execute(sa.update(ARQ).where(ARQ.uuid == first[0]).values(
            state='Bound', instance_uuid=instance, hostname='node1'))
        conn.execute(sa.delete(ARQ).where(ARQ.uuid == first[1]))
    [again] = _create(ctx)
    assert (again['uuid'], again['state'], again['instance_uuid']) == (
        first[0], 'Bound', instance)
    # Once none is left the key creates again.
    with db_engine.begin() as conn:
        conn.execute(sa.delete(ARQ))
    assert len(set(_uuids(_create(ctx))) - set(
        first)) == 2


def test_a_key_creates_again_after_the_ttl(conf, ctx, db_engine):
    first = _uuids(_create(ctx))
    ttl = conf.conductor.unbound_request_ttl
    with db_engine.begin() as conn:
        conn.execute(sa.update(ARQ).values(
            created_at=timeutils.utcnow() - datetime.timedelta(
                seconds=ttl - 60)))
    assert _uuids(_create(ctx)) == first
    with db_engine.begin() as conn:
        conn.execute(sa.update(ARQ).values(
            created_at=timeutils.utcnow() - datetime.timedelta(
                seconds=ttl + 1)))
    second = _uuids(_create(ctx))
    assert not set(second) & set(first)
    # The newer set answers from now on, though the first still exists
    # (bound requests outlive the TTL).
    assert _uuids(_create(ctx)) == second
    # With expiry off, a key answers as long as its requests exist.
    conf.set_override('unbound_request_ttl', 0, 'conductor')
    with db_engine.begin() as conn:
        for made, days in ((first, 401), (second, 400)):
            conn.execute(sa.update(ARQ).where(ARQ.uuid.in_(made)).values(
                created_at=timeutils.utcnow() - datetime.timedelta(
                    days=days)))
    assert _uuids(_create(ctx)) == second


def test_one_key_twice_in_one_batch(ctx, db_engine):
    made, again, refused, elsewhere, plain = arqs.create_many(ctx, [
        _keyed_create('dp', 'p1'), _keyed_create('dp', 'p1'),
        _keyed_create('other', 'p1'), _keyed_create('dp', 'p2'),
        ('dp', 'p1')])
    assert isinstance(again, arqs.Replay) and again == made
    assert isinstance(refused, exception.IdempotencyKeyReused)
    assert not set(_uuids(elsewhere)) & set(_uuids(made))
    assert _keyed(db_engine) == {('p1', 'k'): _uuids(made),
                                 ('p2', 'k'): _uuids(elsewhere)}
    assert len(plain) == 2


def test_a_create_without_a_key_locks_nothing(ctx, db_engine):
    arqs.create_many(ctx, [('dp', 'p1'), Create('dp', 'p2')])
    with db_engine.connect() as conn:
        assert conn.scalar(sa.select(sa.func.count()).select_from(
            models.ProjectLock)) == 0
    _create(ctx, 'dp', 'p3')
    with db_engine.connect() as conn:
        assert list(conn.scalars(sa.select(
            models.ProjectLock.project_id))) == ['p3']


def test_concurrent_creates_with_one_key_make_one_set(ctx, db_engine):
    """The first create is held after its INSERT, before its commit; the
    second, in another transaction, waits for the project's lock and
    then finds what the first made. Without the lock it would find
    nothing yet and create a second set."""
    inserted = threading.Event()
    go_on = threading.Event()
    first_thread: list[int] = []

    def hold(conn, cursor, statement, *args):
        if (threading.get_ident() in first_thread
                and statement.startswith('INSERT INTO accelerator_requests')):
            inserted.set()
            assert go_on.wait(10)

    def create():
        return _uuids(_create(cyborg_context.get_admin_context()))

    def first():
        first_thread.append(threading.get_ident())
        return create()

    sa.event.listen(db_engine, 'after_cursor_execute', hold)
    try:
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            one = pool.submit(first)
            assert inserted.wait(10)
            two = pool.submit(create)
            # Time for the second to reach the lock (or, without it, to
            # read and insert its own set).
            done, _ = concurrent.futures.wait([two], timeout=0.5)
            go_on.set()
            assert one.result(10) == two.result(10)
    finally:
        go_on.set()
        sa.event.remove(db_engine, 'after_cursor_execute', hold)
    assert _keyed(db_engine) == {('p1', 'k'): one.result()}
    # The second did not answer before the first committed.
    assert not done


def test_many_concurrent_creates_with_one_key(ctx, db_engine):
    barrier = threading.Barrier(8)

    def create(_):
        barrier.wait(10)
        return _uuids(_create(cyborg_context.get_admin_context()))

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(create, range(8)))
    assert all(answer == answers[0] for answer in answers)
    assert _keyed(db_engine) == {('p1', 'k'): answers[0]}


def _limits(requests: int) -> usage.Limits:
    return usage.Limits({usage.REQUESTS: requests}, {'p1': {}})


def test_an_answer_again_counts_against_no_limit(ctx, db_engine):
    # dp makes two requests: p1 is then at its limit.
    first = arqs.create(ctx, 'dp', 'p1', idempotency_key='k',
                        limits=_limits(2))
    again = arqs.create(ctx, 'dp', 'p1', idempotency_key='k',
                        limits=_limits(2))
    assert isinstance(again, arqs.Replay) and again == first
    with pytest.raises(exception.OverLimit):
        arqs.create(ctx, 'other', 'p1', limits=_limits(2))


def test_a_refused_create_leaves_its_key_unused(ctx, db_engine):
    """One key twice in a batch: the first is over the limit, so the
    second, after it, creates as if the key were new."""
    refused, made = arqs.create_many(ctx, [
        _keyed_create('dp', 'p1'), _keyed_create('other', 'p1')],
        _limits(1))
    assert isinstance(refused, exception.OverLimit)
    assert len(made) == 1 and not isinstance(made, arqs.Replay)
    assert _keyed(db_engine) == {('p1', 'k'): _uuids(made)}


def test_a_key_of_no_project(ctx, db_engine):
    first = _create(ctx, 'dp', None)
    assert _create(ctx, 'dp', None) == first
    assert _uuids(_create(ctx)) != _uuids(first)
    with db_engine.connect() as conn:
        # The lock of the requests of no project, and p1's.
        assert sorted(conn.scalars(sa.select(
            models.ProjectLock.project_id))) == ['', 'p1']
