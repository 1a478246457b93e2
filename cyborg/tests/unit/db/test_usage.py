"""Project limits in the transaction of the write they limit, on SQLite,
MariaDB and PostgreSQL: what a project holds, counted in SQL; creates and
binds admitted or refused; and concurrent writes that never go over."""
import concurrent.futures
import uuid

import pytest
import sqlalchemy as sa

from cyborg import context as cyborg_context
from cyborg.accelerator.drivers import fake
from cyborg.common import exception
from cyborg.db import api as db_api
from cyborg.db import models
from cyborg.db.api import arq_batches
from cyborg.db.api import arq_bindings
from cyborg.db.api import arqs
from cyborg.db.api import device_profiles
from cyborg.db.api import inventory
from cyborg.db.api import usage

ARQ = models.AcceleratorRequest
REQUESTS = usage.REQUESTS
FPGA = 'class:FPGA'
HANDLES = 16


@pytest.fixture
def seeded(conf, db_engine):
    """A fake FPGA card of HANDLES handles on node ``cmp1``, profiles
    ``one`` and ``two`` asking for one and two FPGAs; the provider's
    uuid."""
    ctx = cyborg_context.get_admin_context()
    conf.set_override('host', 'cmp1')
    conf.set_override('device_count', 1, 'fake_driver')
    conf.set_override('accelerators_per_device', HANDLES, 'fake_driver')
    inventory.apply_report(ctx, 'cmp1', {
        'hostname': 'cmp1',
        'devices': [d.to_dict() for d in fake.FakeDriver(conf).discover()]})
    for name, count in (('one', '1'), ('two', '2')):
        device_profiles.create(ctx, {'name': name,
                                     'groups': [{'resources:FPGA': count}]})
    [device] = inventory.get_host_devices(ctx, 'cmp1')
    return device['deployables'][0]['rp_uuid']


def _ctx():
    return cyborg_context.get_admin_context()


def _limits(registered, projects=('p1', 'p2')) -> usage.Limits:
    own = projects if isinstance(projects, dict) else {
        p: {} for p in projects}
    return usage.Limits(registered, own)


def _create(profile, project, count=1, limits=None) -> list[str]:
    return [a['uuid'] for _ in range(count)
            for a in arqs.create(_ctx(), profile, project, limits=limits)]


def _bind(rp_uuid, uuids, limits=None, instance=None, **extra):
    instance = instance or str(uuid.uuid4())
    return arq_bindings.apply_patch(_ctx(), {u: {
        'hostname': 'cmp1', 'device_rp_uuid': rp_uuid,
        'instance_uuid': instance, **extra} for u in uuids}, [],
        limits=limits)


def _count(projects, resources):
    with db_api.main_context_manager.reader.using(_ctx()) as session:
        return {p: dict(held)
                for p, held in usage.count(session, projects,
                                           resources).items()}


def _rows(engine, statement):
    with engine.connect() as conn:
        return conn.execute(statement).all()


def test_requests_in_any_state_and_devices_held_are_counted(seeded):
    mine = _create('one', 'p1', 3) + _create('two', 'p1')
    _create('one', 'p2')
    _bind(seeded, mine[:2])
    assert _count(['p1', 'p2', 'p3'], [REQUESTS, FPGA, 'class:VGPU']) == {
        'p1': {REQUESTS: 5, FPGA: 2}, 'p2': {REQUESTS: 1}, 'p3': {}}
    arq_bindings.apply_patch(_ctx(), {}, [mine[0]])
    assert _count(['p1'], [FPGA]) == {'p1': {FPGA: 1}}
    assert _count(['p1'], [REQUESTS]) == {'p1': {REQUESTS: 5}}


def test_creates_of_a_batch_are_admitted_in_order(seeded, db_engine):
    limits = _limits({REQUESTS: 5})
    results = arqs.create_many(_ctx(), [
        ('two', 'p1'), ('two', 'p1'), ('two', 'p1'), ('one', 'p1'),
        ('two', 'p2'), ('nope', 'p1')], limits)
    assert [len(r) if isinstance(r, list) else type(r).__name__
            for r in results] == [2, 2, 'OverLimit', 1, 2,
                                  'DeviceProfileNotFound']
    assert results[2].message == (
        'Project p1 is over its limit of 5 for accelerator_requests: it '
        'holds 4 and this request makes 2.')
    assert dict(_rows(db_engine, sa.select(ARQ.project_id, sa.func.count())
                      .group_by(ARQ.project_id))) == {'p1': 5, 'p2': 2}
    with pytest.raises(exception.OverLimit):
        _create('one', 'p1', limits=limits)


def test_writes_without_limits_lock_nothing(seeded, db_engine):
    _bind(seeded, _create('one', 'p1', 2))
    # Limits on, but nothing the write adds is limited (FPGAs are not).
    _bind(seeded, _create('one', 'p2'), _limits({REQUESTS: -1}))
    assert _rows(db_engine, sa.select(models.ProjectLock.project_id)) == []


def test_binds_over_a_class_limit_refuse_the_patch(seeded, db_engine):
    limits = _limits({REQUESTS: 10}, {'p1': {FPGA: 2}, 'p2': {}})
    mine = _create('one', 'p1', 3)
    with pytest.raises(exception.OverLimit) as raised:
        _bind(seeded, mine, limits)
    assert raised.value.message == (
        'Project p1 is over its limit of 2 for class:FPGA: it holds 0 and '
        'this request binds 3.')
    assert {r.state for r in _rows(db_engine, sa.select(ARQ.state))} == {
        'Initial'}
    instance = str(uuid.uuid4())
    _bind(seeded, mine[:2], limits, instance)
    # Sent again (Nova retries a PATCH that timed out): not a new device.
    assert _bind(seeded, mine[:2], limits, instance).repeated == set(
        mine[:2])
    with pytest.raises(exception.OverLimit, match='it holds 2 and this '
                                                  'request binds 1'):
        _bind(seeded, mine[2:], limits)
    arq_bindings.apply_patch(_ctx(), {}, [mine[0]])
    _bind(seeded, mine[2:], limits)


def test_a_bind_counts_against_the_project_it_ends_in(seeded):
    limits = _limits({REQUESTS: 10}, {'p1': {}, 'p2': {FPGA: 0}})
    [arq] = _create('one', 'p1')
    with pytest.raises(exception.OverLimit) as raised:
        _bind(seeded, [arq], limits, project_id='p2')
    assert raised.value.message.startswith(
        'Project p2 is over its limit of 0 for class:FPGA')
    limits = _limits({REQUESTS: 1}, {'p1': {}, 'p2': {}})
    _create('one', 'p2')
    # The request moved to p2 is one request more there.
    with pytest.raises(exception.OverLimit, match='accelerator_requests'):
        _bind(seeded, [arq], limits, project_id='p2')
    with pytest.raises(usage.LimitsMissing):
        _bind(seeded, [arq], _limits({}, ['p1']), project_id='p3')


def test_a_batch_reads_the_limits_it_finds_missing(seeded, db_engine):
    """A PATCH of a batch meeting a project whose limits were not read
    rolls back, they are read, and it runs again; a PATCH refused before
    it is answered as if alone."""
    asked = []

    def reader(projects):
        asked.append(set(projects))
        return _limits({REQUESTS: 10}, {p: {FPGA: 1} for p in projects})

    limits = usage.Limits({REQUESTS: 10}, {'p1': {}}, reader=reader)
    [mine], [theirs] = _create('one', 'p1'), _create('one', 'p2')
    [extra] = _create('one', 'p2')
    patch = arq_batches.Patch
    binding = {'hostname': 'cmp1', 'device_rp_uuid': seeded}
    results = arq_batches.apply_patches(_ctx(), [
        patch({str(uuid.uuid4()): {**binding, 'instance_uuid': 'i0'}}, []),
        patch({mine: {**binding, 'instance_uuid': 'i1'}}, []),
        patch({theirs: {**binding, 'instance_uuid': 'i2'}}, []),
        patch({extra: {**binding, 'instance_uuid': 'i3'}}, [])],
        limits=limits)
    assert [type(r).__name__ for r in results] == [
        'ARQNotFound', 'BindBatch', 'BindBatch', 'OverLimit']
    assert asked == [{'p2'}]
    assert dict(_rows(db_engine, sa.select(ARQ.uuid, ARQ.state))) == {
        mine: 'Bound', theirs: 'Bound', extra: 'Initial'}


def _concurrently(calls):
    """Run the calls in threads of their own, all at once; each one's
    result or exception."""
    with concurrent.futures.ThreadPoolExecutor(len(calls)) as pool:
        futures = [pool.submit(call) for call in calls]
        outcomes = []
        for future in futures:
            try:
                outcomes.append(future.result(timeout=120))
            except exception.CyborgException as exc:
                outcomes.append(exc)
        return outcomes


def test_concurrent_creates_never_go_over(seeded, db_engine):
    limits = _limits({REQUESTS: 10}, ['p1'])
    outcomes = _concurrently([
        lambda: _create('one', 'p1', limits=limits) for _ in range(50)])
    assert sum(isinstance(o, list) for o in outcomes) == 10
    assert all(isinstance(o, (list, exception.OverLimit))
               for o in outcomes), outcomes
    assert _rows(db_engine, sa.select(sa.func.count()).select_from(ARQ)) \
        == [(10,)]


def test_concurrent_binds_never_go_over(seeded, db_engine):
    limits = _limits({REQUESTS: 20}, {'p1': {FPGA: 5}})
    mine = _create('one', 'p1', 12)
    outcomes = _concurrently([
        lambda u=u: _bind(seeded, [u], limits) for u in mine])
    assert sum(isinstance(o, arq_bindings.BindBatch)
               for o in outcomes) == 5
    assert all(isinstance(o, (arq_bindings.BindBatch, exception.OverLimit))
               for o in outcomes), outcomes
    assert _count(['p1'], [FPGA]) == {'p1': {FPGA: 5}}
