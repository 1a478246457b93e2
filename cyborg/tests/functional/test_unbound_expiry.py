"""Requests nothing bound are deleted after ``[conductor]
unbound_request_ttl``: by the conductor's periodic task, on SQLite,
MariaDB and PostgreSQL, by one live conductor at a time."""
import datetime
import logging
import threading

import pytest
import sqlalchemy as sa
from oslo_utils import timeutils

from cyborg import context as cyborg_context
from cyborg.common import notifications
from cyborg.conductor import unbound_expiry
from cyborg.db import models
from cyborg.db.api import arq_expiry
from cyborg.db.api import arqs
from cyborg.db.api import device_profiles
from cyborg.db.api import services

ARQ = models.AcceleratorRequest
HOUR = datetime.timedelta(hours=1)


@pytest.fixture
def ctx(conf, db_engine):
    context = cyborg_context.get_admin_context()
    device_profiles.create(context, {'name': 'dp', 'groups': [
        {'resources:FPGA': '1'}]})
    return context


def _make(ctx, engine, age: datetime.timedelta, count: int = 1,
          **values) -> list[str]:
    """``count`` requests created ``age`` ago, with ``values`` written
    over them (another state, a binding)."""
    made = [arqs.create(ctx, 'dp', 'p1')[0]['uuid'] for _ in range(count)]
    with engine.begin() as conn:
        conn.execute(sa.update(ARQ).where(ARQ.uuid.in_(made)).values(
            created_at=timeutils.utcnow() - age, **values))
    return made


def _left(engine) -> set[str]:
    with engine.connect() as conn:
        return set(conn.scalars(sa.select(ARQ.uuid)))


def _expiry(conf, **kwargs) -> unbound_expiry.UnboundExpiry:
    return unbound_expiry.UnboundExpiry(
        conf, notifications.get_notifier(conf, 'cyborg-conductor'),
        **kwargs)


def test_only_requests_never_bound_and_older_than_the_cutoff_go(
        conf, ctx, db_engine):
    old = _make(ctx, db_engine, 2 * HOUR, 2)
    young = _make(ctx, db_engine, HOUR - datetime.timedelta(minutes=1))
    instance = '6c0b1bd6-4c1f-4a43-9bfb-8a8a04b3e3d1'
    # Old, but bound once: they are an instance's, or were.
    kept = [*_make(ctx, db_engine, 2 * HOUR, state='Bound',
                   instance_uuid=instance, hostname='node1'),
            *_make(ctx, db_engine, 2 * HOUR, state='BindStarted',
                   instance_uuid=instance, hostname='node1'),
            *_make(ctx, db_engine, 2 * HOUR, state='BindFailed',
                   instance_uuid=instance, hostname='node1'),
            *_make(ctx, db_engine, 2 * HOUR, state='Unbound')]

    gone = arq_expiry.expire(ctx, timeutils.utcnow() - HOUR)

    assert sorted(a['uuid'] for a in gone) == sorted(old)
    assert {a['state'] for a in gone} == {'Deleted'}
    assert {a['device_profile_name'] for a in gone} == {'dp'}
    assert _left(db_engine) == {*young, *kept}


def test_a_pass_deletes_batch_after_batch(conf, ctx, db_engine, caplog):
    old = _make(ctx, db_engine, 3 * HOUR, 5)
    young = _make(ctx, db_engine, datetime.timedelta(minutes=5))
    statements: list[str] = []

    def seen(conn, cursor, statement, *args):
        if statement.startswith('DELETE FROM accelerator_requests'):
            statements.append(statement)

    sa.event.listen(db_engine, 'before_cursor_execute', seen)
    try:
        # One batch: at most its size.
        first = arq_expiry.expire(ctx, timeutils.utcnow() - HOUR, limit=2)
        assert len(first) == 2 and {a['uuid'] for a in first} <= set(old)
        conf.set_override('host', 'ctl1')
        with caplog.at_level(logging.INFO, unbound_expiry.__name__):
            assert _expiry(conf, batch=2).sweep() == 3
    finally:
        sa.event.remove(db_engine, 'before_cursor_execute', seen)
    # 2, then the pass's 2 + 1: it ends with the batch that was not full.
    assert len(statements) == 3
    assert _left(db_engine) == set(young)
    [line] = [r.getMessage() for r in caplog.records
              if r.name == unbound_expiry.__name__]
    assert line.startswith('Deleted 3 accelerator request(s) never bound '
                           'within [conductor] unbound_request_ttl (3600 s)')
    age = int(line.rsplit('was ', 1)[1].split(' ')[0])
    assert 3 * 3600 <= age < 3 * 3600 + 60
    # Nothing to delete: nothing logged.
    caplog.clear()
    with caplog.at_level(logging.INFO, unbound_expiry.__name__):
        assert _expiry(conf).sweep() == 0
    assert not [r for r in caplog.records
                if r.name == unbound_expiry.__name__]


def test_a_ttl_of_zero_keeps_every_request(conf, ctx, db_engine):
    old = _make(ctx, db_engine, 1000 * HOUR)
    conf.set_override('unbound_request_ttl', 0, 'conductor')
    assert _expiry(conf).sweep() == 0
    assert _left(db_engine) == set(old)


def test_one_live_conductor_sweeps(conf, ctx, db_engine):
    old = _make(ctx, db_engine, 2 * HOUR)
    conductors = ('ctl1', 'ctl2', 'ctl3')
    for host in conductors:
        services.heartbeat(ctx, host, 'cyborg-conductor', '1.0')
    expiry = _expiry(conf)

    def owners(hosts):
        mine = []
        for host in hosts:
            conf.set_override('host', host)
            if expiry.mine(ctx):
                mine.append(host)
        return mine

    [owner] = owners(conductors)
    others = [h for h in conductors if h != owner]
    for host in others:
        conf.set_override('host', host)
        assert expiry.sweep() == 0
    assert _left(db_engine) == set(old)

    # The owner stops: once its heartbeat is stale, one of the others
    # sweeps.
    with db_engine.begin() as conn:
        conn.execute(sa.update(models.Service).where(
            models.Service.host == owner).values(
                last_seen_at=timeutils.utcnow() - datetime.timedelta(
                    seconds=conf.service_down_time + 1)))
    [heir] = owners(others)
    conf.set_override('host', heir)
    assert expiry.sweep() == 1
    assert _left(db_engine) == set()


@pytest.mark.parametrize('backend', ['mysql', 'postgresql'])
def test_a_request_a_bind_holds_is_left_to_the_bind(conf, ctx, db_engine):
    """A bind locks its requests first (``arq_bindings.held``): the sweep
    passes over them instead of waiting, and once the bind committed
    they are no longer Initial."""
    held, free = _make(ctx, db_engine, 2 * HOUR, 2)
    locked = threading.Event()
    release = threading.Event()

    def bind():
        with db_engine.begin() as conn:
            conn.execute(sa.select(ARQ.id).where(ARQ.uuid == held)
                         .with_for_update())
            locked.set()
            assert release.wait(10)
            conn.execute(sa.update(ARQ).where(ARQ.uuid == held).values(
                state='Bound', hostname='node1',
                instance_uuid='2b8bd2b8-2a5e-4b0e-8d0c-6a4bde7e4ec3'))

    binder = threading.Thread(target=bind)
    binder.start()
    try:
        assert locked.wait(10)
        gone = arq_expiry.expire(ctx, timeutils.utcnow() - HOUR)
    finally:
        release.set()
        binder.join(10)
    assert [a['uuid'] for a in gone] == [free]
    assert arq_expiry.expire(ctx, timeutils.utcnow() - HOUR) == []
    assert _left(db_engine) == {held}
