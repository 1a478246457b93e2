"""Binding as Nova drives it, through a conductor and an agent on RabbitMQ.

The conductor and the agent run in this process but talk over the real
broker; Nova's events endpoint and Glance are fakes on 127.0.0.1, and
placement is the real service.
"""
import datetime
import uuid
from typing import Any

import pytest
import sqlalchemy as sa
from oslo_utils import timeutils

from cyborg import context as cyborg_context
from cyborg.accelerator.drivers import fake
from cyborg.agent import service as agent_service
from cyborg.common import rpc
from cyborg.common import rpc_service
from cyborg.conductor import binding
from cyborg.conductor import manager as conductor_manager
from cyborg.conductor import rpcapi as conductor_rpcapi
from cyborg.db import models
from cyborg.db.api import arq_bindings
from cyborg.db.api import arqs
from cyborg.db.api import inventory
from cyborg.db.api import providers
from cyborg.tests import placement_server
from cyborg.tests.fakes import fixtures
from cyborg.tests.utils import wait_for


class Stack:
    """A conductor, an agent with the fake driver, and the fakes."""

    def __init__(self, conf, driver, nova, glance, placement, engine
                 ) -> None:
        self.conf = conf
        self.engine = engine
        self.driver = driver
        self.nova = nova
        self.glance = glance
        self.placement = placement
        self.api = conductor_rpcapi.ConductorAPI(conf)
        self.ctx = cyborg_context.get_admin_context()
        self.hostname = conf.agent.hostname

    def profile(self, name: str, group: dict[str, str]) -> str:
        self.api.device_profile_create(self.ctx, {'name': name,
                                                  'groups': [group]})
        return name

    def deployable(self, device_type: str) -> dict[str, Any]:
        for device in inventory.get_host_devices(self.ctx, self.conf.host):
            if device['type'] == device_type:
                return device['deployables'][0]
        raise AssertionError(f'no {device_type} on the host')

    def bind(self, profile: str, rp_uuid: str, count: int = 1,
             instance: str | None = None) -> tuple[str, list[str]]:
        instance = instance or str(uuid.uuid4())
        created = []
        for _ in range(count):
            created += [a['uuid'] for a in self.api.arq_create(
                self.ctx, profile, 'project')]
        self.api.arq_apply_patch(self.ctx, {u: {
            'hostname': self.hostname, 'device_rp_uuid': rp_uuid,
            'instance_uuid': instance} for u in created}, [])
        return instance, created

    def resolved(self, instance: str) -> list[dict[str, Any]]:
        found, _ = arqs.get_all(self.ctx, instance_uuid=instance)
        if all(a['state'] in arqs.RESOLVED for a in found):
            return found
        return []

    def events(self, instance: str) -> dict[str, str]:
        return {e['tag']: e['status'] for e in self.nova.events()
                if e['server_uuid'] == instance}


@pytest.fixture
def stack(conf, rabbit_url, db_engine, fake_nova, fake_glance,
          placement_url, placement, tmp_path):
    node = placement.create_compute_node()
    conf.set_override('host', f'agent-{node["name"]}')
    conf.set_override('hostname', node['name'], 'agent')
    conf.set_override('state_path', str(tmp_path))
    conf.set_override('device_count', 2, 'fake_driver')
    conf.set_override('accelerators_per_device', 2, 'fake_driver')
    conf.set_override('vgpu_device_count', 1, 'fake_driver')
    conf.set_override('bind_timeout', 20, 'conductor')
    fixtures.nova_conf(conf, fake_nova)
    fixtures.glance_conf(conf, fake_glance)
    placement_server.point_at(conf, placement_url)
    rpc.set_defaults(control_exchange=f'cyborg-test-{uuid.uuid4().hex[:8]}')
    rpc.init(conf, url=rabbit_url)
    conductor = rpc_service.RPCService(
        rpc.CONDUCTOR_TOPIC, 'conductor-test',
        [conductor_manager.ConductorManager(conf)])
    driver = fake.FakeDriver(conf)
    agent = agent_service.build(conf, loaded=[driver])
    conductor.start()
    agent.start()
    stack = Stack(conf, driver, fake_nova, fake_glance, placement,
                  db_engine)
    wait_for(lambda: inventory.get_host_devices(stack.ctx, conf.host))
    wait_for(lambda: all(p.in_sync for p in providers.host_providers(
        stack.ctx, node['name'])))
    try:
        yield stack
    finally:
        agent.stop()
        conductor.stop()
        for endpoint in conductor.endpoints:
            endpoint.binder.stop()
        rpc.cleanup()
        rpc.set_defaults()


def test_instant_binds_are_bound_and_reported_once(stack):
    rp = stack.deployable('FPGA')['rp_uuid']
    profile = stack.profile('two-fpgas', {'resources:FPGA': '2'})
    instance, created = stack.bind(profile, rp)
    bound = stack.resolved(instance)
    assert sorted(a['uuid'] for a in bound) == sorted(created)
    assert {a['state'] for a in bound} == {'Bound'}
    assert {a['attach_handle_type'] for a in bound} == {'TEST_PCI'}
    assert len({a['attach_handle_uuid'] for a in bound}) == 2
    assert wait_for(lambda: stack.events(instance)) == dict.fromkeys(
        created, 'completed')
    # One POST for the whole PATCH.
    assert len([p for p in stack.nova.posts()
                if any(e['server_uuid'] == instance
                       for e in p.body['events'])]) == 1
    stack.api.arq_delete(stack.ctx, instance_uuid=instance)
    stack.api.arq_delete(stack.ctx, instance_uuid=instance)
    assert arqs.get_all(stack.ctx, instance_uuid=instance)[0] == []
    assert stack.deployable('FPGA')['attach_handles']
    assert not any(h['in_use']
                   for h in stack.deployable('FPGA')['attach_handles'])


def test_exhausted_deployable_fails_and_nova_hears_it(stack):
    rp = stack.deployable('FPGA')['rp_uuid']
    profile = stack.profile('one-fpga', {'resources:FPGA': '1'})
    first, _ = stack.bind(profile, rp, count=2)
    assert {a['state'] for a in stack.resolved(first)} == {'Bound'}
    late, [arq] = stack.bind(profile, rp)
    assert [a['state'] for a in stack.resolved(late)] == ['BindFailed']
    assert wait_for(lambda: stack.events(late)) == {arq: 'failed'}


def test_fpga_bind_programs_through_the_agent(stack):
    image = stack.glance.add_image(
        b'bitstream-bytes', properties={'accel:function_id': 'f00d'})
    deployable = stack.deployable('FPGA')
    profile = stack.profile('programmed', {
        'resources:FPGA': '1', 'accel:bitstream_id': image['id']})
    instance, [arq] = stack.bind(profile, deployable['rp_uuid'])
    bound = wait_for(lambda: stack.resolved(instance))
    assert [a['state'] for a in bound] == ['Bound']
    assert wait_for(lambda: stack.events(instance)) == {arq: 'completed'}
    [call] = stack.driver.program_calls
    assert call['deployable_name'] == deployable['name']
    with open(call['image_path'], 'rb') as bitstream:
        assert bitstream.read() == b'bitstream-bytes'
    # The conductor knows what is loaded; placement has the function.
    assert inventory.get_host_devices(stack.ctx, stack.conf.host)
    loaded = [d for d in _deployables(stack) if d['uuid']
              == deployable['uuid']][0]
    assert loaded['bitstream_id'] == image['id']
    assert 'CUSTOM_FPGA_FUNCTION_ID_FAKE_F00D' in stack.placement.traits(
        deployable['rp_uuid'])
    # The same bitstream again needs no programming: an instant bind.
    again, _ = stack.bind(profile, deployable['rp_uuid'])
    assert [a['state'] for a in stack.resolved(again)] == ['Bound']
    assert len(stack.driver.program_calls) == 1


def test_fpga_bind_by_function_finds_the_image(stack):
    image = stack.glance.add_image(
        b'by-function', properties={'accel:function_id': 'beef'})
    rp = stack.deployable('FPGA')['rp_uuid']
    profile = stack.profile('by-function', {
        'resources:FPGA': '1', 'accel:function_id': 'beef'})
    instance, _ = stack.bind(profile, rp)
    assert [a['state'] for a in wait_for(
        lambda: stack.resolved(instance))] == ['Bound']
    assert stack.driver.program_calls[0]['bitstream']['id'] == image['id']


def test_failed_programming_frees_the_handle(stack):
    stack.conf.set_override('program_fail', True, 'fake_driver')
    image = stack.glance.add_image(b'x')
    deployable = stack.deployable('FPGA')
    profile = stack.profile('doomed', {
        'resources:FPGA': '1', 'accel:bitstream_id': image['id']})
    instance, [arq] = stack.bind(profile, deployable['rp_uuid'])
    failed = wait_for(lambda: stack.resolved(instance))
    assert [a['state'] for a in failed] == ['BindFailed']
    assert wait_for(lambda: stack.events(instance)) == {arq: 'failed'}
    assert not any(h['in_use'] for h in stack.deployable('FPGA')[
        'attach_handles'])


def test_vgpu_bind_creates_and_unbind_removes_the_mdev(stack):
    rp = stack.deployable('GPU')['rp_uuid']
    profile = stack.profile('vgpu', {'resources:VGPU': '1'})
    instance, [arq] = stack.bind(profile, rp)
    [bound] = wait_for(lambda: stack.resolved(instance))
    assert bound['state'] == 'Bound'
    assert bound['attach_handle_type'] == 'MDEV'
    assert bound['attach_handle_info']['asked_type'] == fake.VGPU_TYPE
    assert list(stack.driver.mdevs) == [bound['attach_handle_uuid']]
    assert wait_for(lambda: stack.events(instance)) == {arq: 'completed'}
    stack.api.arq_apply_patch(stack.ctx, {}, [arq])
    assert arqs.get(stack.ctx, arq)['state'] == 'Unbound'
    # Removed in the background: the unbind does not wait for it.
    wait_for(lambda: stack.driver.mdevs == {})


def test_delete_removes_the_mdev(stack):
    rp = stack.deployable('GPU')['rp_uuid']
    profile = stack.profile('vgpu2', {'resources:VGPU': '2'})
    instance, _ = stack.bind(profile, rp)
    wait_for(lambda: stack.resolved(instance))
    assert len(stack.driver.mdevs) == 2
    stack.api.arq_delete(stack.ctx, instance_uuid=instance)
    wait_for(lambda: stack.driver.mdevs == {})


def test_unreachable_agent_fails_the_bind(stack):
    rp = stack.deployable('GPU')['rp_uuid']
    # The agent of the device's host is gone.
    stack.conf.set_override('bind_timeout', 3, 'conductor')
    ctx = stack.ctx
    _execute(stack, sa.update(models.Device)
             .where(models.Device.type == 'GPU')
             .values(host='agent-that-left'))
    profile = stack.profile('lonely', {'resources:VGPU': '1'})
    instance, [arq] = stack.bind(profile, rp)
    assert [a['state'] for a in wait_for(
        lambda: stack.resolved(instance))] == ['BindFailed']
    assert wait_for(lambda: stack.events(instance)) == {arq: 'failed'}
    assert arqs.get(ctx, arq)['attach_handle_uuid'] is None


def test_binds_of_a_stopped_conductor_fail_after_the_timeout(stack):
    rp = stack.deployable('FPGA')['rp_uuid']
    image = stack.glance.add_image(b'y')
    profile = stack.profile('stale', {
        'resources:FPGA': '1', 'accel:bitstream_id': image['id']})
    ctx = stack.ctx
    [arq] = arqs.create(ctx, profile, 'project')
    instance = str(uuid.uuid4())
    # A bind left BindStarted, as by a conductor that stopped mid-way:
    # the database alone, no conductor to finish it.
    batch = arq_bindings.apply_patch(ctx, {arq['uuid']: {
        'hostname': stack.hostname, 'device_rp_uuid': rp,
        'instance_uuid': instance}}, [])
    assert batch.states == {arq['uuid']: 'BindStarted'}
    binder = binding.Binder(stack.conf)
    binder.fail_stale_binds()
    assert arqs.get(ctx, arq['uuid'])['state'] == 'BindStarted'
    stack.conf.set_override('bind_timeout', 1, 'conductor')
    _execute(stack, sa.update(models.AcceleratorRequest)
             .where(models.AcceleratorRequest.uuid == arq['uuid'])
             .values(updated_at=timeutils.utcnow()
                     - datetime.timedelta(seconds=120)))
    binder.fail_stale_binds()
    assert arqs.get(ctx, arq['uuid'])['state'] == 'BindFailed'
    assert wait_for(lambda: stack.events(instance)) == {
        arq['uuid']: 'failed'}
    binder.stop()


def _execute(stack, statement):
    with stack.engine.begin() as conn:
        conn.execute(statement)


def _deployables(stack):
    from cyborg.db.api import deployables
    return deployables.get_all(stack.ctx)[0]


def test_unbind_that_cannot_remove_the_mdev_keeps_the_handle(stack):
    rp = stack.deployable('GPU')['rp_uuid']
    profile = stack.profile('sticky', {'resources:VGPU': '1'})
    instance, [arq] = stack.bind(profile, rp)
    [bound] = wait_for(lambda: stack.resolved(instance))
    stack.conf.set_override('bind_timeout', 2, 'conductor')
    gpu = sa.update(models.Device).where(models.Device.type == 'GPU')
    _execute(stack, gpu.values(host='agent-that-left'))
    # The unbind is done at once; the removal fails in the background.
    stack.api.arq_apply_patch(stack.ctx, {}, [arq])
    assert arqs.get(stack.ctx, arq)['state'] == 'Unbound'
    # The vGPU may still exist: its handle is not handed out again.
    with stack.engine.connect() as conn:
        in_use = conn.scalars(sa.select(models.AttachHandle.uuid).where(
            models.AttachHandle.in_use.is_(True))).all()
    assert in_use == [bound['attach_handle_uuid']]
    assert list(stack.driver.mdevs) == [bound['attach_handle_uuid']]
    # Once the host is back, the stale sweep finishes the job.
    _execute(stack, gpu.values(host=stack.conf.host))
    _execute(stack, sa.update(models.AttachHandle).values(
        released_at=timeutils.utcnow() - datetime.timedelta(hours=1)))
    binder = binding.Binder(stack.conf)
    binder.fail_stale_binds()
    binder.stop()
    assert stack.driver.mdevs == {}
    assert not any(h['in_use']
                   for h in stack.deployable('GPU')['attach_handles'])
