"""Concurrent binds on every database: each gets its own attach handle."""
import concurrent.futures
import uuid

import sqlalchemy as sa

from cyborg import context as cyborg_context
from cyborg.accelerator.drivers import fake
from cyborg.common import exception
from cyborg.db import api as db_api
from cyborg.db import models
from cyborg.db.api import arq_bindings
from cyborg.db.api import arqs
from cyborg.db.api import attach_handles
from cyborg.db.api import device_profiles
from cyborg.db.api import inventory


def _seed(conf, handles):
    conf.set_override('host', 'cmp1')
    conf.set_override('accelerators_per_device', handles, 'fake_driver')
    report = {'hostname': 'node1',
              'devices': [d.to_dict()
                          for d in fake.FakeDriver(conf).discover()]}
    ctx = cyborg_context.get_admin_context()
    inventory.apply_report(ctx, 'cmp1', report)
    device_profiles.create(ctx, {'name': 'dp', 'groups': [
        {'resources:FPGA': '1'}]})
    return inventory.get_host_devices(ctx, 'cmp1')[0]['deployables'][0]


def test_parallel_binds_take_distinct_handles(conf, db_engine):
    workers, requests_ = 8, 12
    deployable = _seed(conf, handles=10)
    ctx = cyborg_context.get_admin_context()
    created = [arqs.create(ctx, 'dp', 'p1')[0]['uuid']
               for _ in range(requests_)]

    def bind(arq_uuid):
        binding = {'hostname': 'node1',
                   'device_rp_uuid': deployable['rp_uuid'],
                   'instance_uuid': str(uuid.uuid4())}
        try:
            outcome = arq_bindings.apply_patch(
                cyborg_context.get_admin_context(), {arq_uuid: binding}, [])
        except exception.BindRefused as exc:
            assert 'no free attach handle' in str(exc)
            return 'refused'
        return outcome.states[arq_uuid]

    with concurrent.futures.ThreadPoolExecutor(workers) as pool:
        futures = [pool.submit(bind, u) for u in created]
        done, pending = concurrent.futures.wait(futures, timeout=60)
    assert not pending, 'binds did not finish: a lock is never released'
    states = sorted(f.result() for f in done)
    assert states == ['Bound'] * 10 + ['refused'] * 2
    with db_engine.connect() as conn:
        held = conn.execute(
            sa.select(models.AcceleratorRequest.attach_handle_id).where(
                models.AcceleratorRequest.state == 'Bound')).scalars().all()
        in_use = conn.scalar(sa.select(sa.func.count()).where(
            models.AttachHandle.in_use.is_(True)))
    assert len(set(held)) == 10
    assert in_use == 10


def test_search_starts_past_the_last_handle_taken_then_wraps(conf,
                                                             db_engine):
    attach_handles._search_from.clear()
    deployable = _seed(conf, handles=3)
    # Not a Galera node: see test_galera_binding for those.
    with db_engine.connect() as conn:
        assert not conn.info.get(db_api.GALERA)
    ctx = cyborg_context.get_admin_context()

    def bind():
        arq = arqs.create(ctx, 'dp', 'p1')[0]['uuid']
        binding = {'hostname': 'node1',
                   'device_rp_uuid': deployable['rp_uuid'],
                   'instance_uuid': str(uuid.uuid4())}
        try:
            state = arq_bindings.apply_patch(ctx, {arq: binding},
                                             []).states[arq]
        except exception.BindRefused:
            state = 'refused'
        with db_engine.connect() as conn:
            handle = conn.scalar(
                sa.select(models.AcceleratorRequest.attach_handle_id)
                .where(models.AcceleratorRequest.uuid == arq))
        return arq, state, handle

    first, _, h1 = bind()
    _, _, h2 = bind()
    assert h2 > h1
    # The first handle is free again, but the search goes on past h2.
    arq_bindings.delete(ctx, uuids=[first])
    _, _, h3 = bind()
    assert h3 > h2
    # Nothing is free past h3: the search starts over and finds h1.
    _, state, again = bind()
    assert (state, again) == ('Bound', h1)
    _, state, none = bind()
    assert (state, none) == ('refused', None)
    # A hint past every handle (another process took the last one) still
    # finds a free handle below it.
    with db_engine.connect() as conn:
        deployable_id = conn.scalar(
            sa.select(models.Deployable.id)
            .where(models.Deployable.rp_uuid == deployable['rp_uuid']))
    attach_handles._search_from[deployable_id] = 10 ** 9
    with db_engine.begin() as conn:
        conn.execute(sa.update(models.AttachHandle)
                     .where(models.AttachHandle.id == h2)
                     .values(in_use=False))
    _, state, found = bind()
    assert (state, found) == ('Bound', h2)
    # The hint moves when the transaction that took a handle commits, not
    # when it is rolled back (a bind retried after a deadlock searches
    # from where it did the first time).
    with db_engine.begin() as conn:
        conn.execute(sa.update(models.AttachHandle)
                     .where(models.AttachHandle.id == h3)
                     .values(in_use=False))
    before = dict(attach_handles._search_from)
    with sa.orm.Session(db_engine) as session:
        assert attach_handles.take(session, deployable_id) is not None
        session.rollback()
    assert attach_handles._search_from == before
    with sa.orm.Session(db_engine) as session:
        taken = attach_handles.take(session, deployable_id)
        session.commit()
    assert attach_handles._search_from[deployable_id] == taken.id + 1
