"""Concurrent binds on every database: each gets its own attach handle."""
import concurrent.futures
import uuid

import sqlalchemy as sa

from cyborg import context as cyborg_context
from cyborg.accelerator.drivers import fake
from cyborg.db import models
from cyborg.db.api import arq_bindings
from cyborg.db.api import arqs
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
        return arq_bindings.apply_patch(cyborg_context.get_admin_context(),
                                {arq_uuid: binding}, []).states[arq_uuid]

    with concurrent.futures.ThreadPoolExecutor(workers) as pool:
        futures = [pool.submit(bind, u) for u in created]
        done, pending = concurrent.futures.wait(futures, timeout=60)
    assert not pending, 'binds did not finish: a lock is never released'
    states = sorted(f.result() for f in done)
    assert states == ['BindFailed'] * 2 + ['Bound'] * 10
    with db_engine.connect() as conn:
        held = conn.execute(
            sa.select(models.AcceleratorRequest.attach_handle_id).where(
                models.AcceleratorRequest.state == 'Bound')).scalars().all()
        in_use = conn.scalar(sa.select(sa.func.count()).where(
            models.AttachHandle.in_use.is_(True)))
    assert len(set(held)) == 10
    assert in_use == 10
