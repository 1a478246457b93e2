"""Binding as Nova drives it, through a conductor and an agent on RabbitMQ.

The conductor and the agent run in this process but talk over the real
broker; Nova's events endpoint and Glance are fakes on 127.0.0.1, and
placement is the real service. Each test runs on one database, named in
its ``parametrize`` line, and on all three under ``tox -e flows``
(``gate_stack.backends``).
"""
import datetime
import logging
import uuid
from typing import Any

import pytest
import sqlalchemy as sa
from oslo_utils import timeutils

from cyborg import context as cyborg_context
from cyborg.accelerator.drivers import fake
from cyborg.agent import service as agent_service
from cyborg.common import exception
from cyborg.common import rpc
from cyborg.common import rpc_service
from cyborg.conductor import manager as conductor_manager
from cyborg.conductor import nova_outbox
from cyborg.conductor import rpcapi as conductor_rpcapi
from cyborg.db import models
from cyborg.db.api import arq_bindings
from cyborg.db.api import arqs
from cyborg.db.api import inventory
from cyborg.db.api import nova_events
from cyborg.db.api import providers
from cyborg.tests.fakes import fixtures
from cyborg.tests.harness import gate_stack
from cyborg.tests.harness import placement_server
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
    conf.set_override('event_resend_interval', 0.05, 'nova')
    fixtures.nova_conf(conf, fake_nova)
    fixtures.glance_conf(conf, fake_glance)
    placement_server.point_at(conf, placement_url)
    rpc.set_defaults(control_exchange=f'cyborg-test-{uuid.uuid4().hex[:8]}')
    rpc.init(conf, url=rabbit_url)
    manager = conductor_manager.ConductorManager(conf)
    # The resends of events owed to Nova, as conductor_service.build runs
    # them.
    conductor = rpc_service.RPCService(
        rpc.CONDUCTOR_TOPIC, 'conductor-test', manager.endpoints(),
        [rpc_service.PeriodicTask('nova-events', manager.binder.outbox.resend,
                                  conf.nova.event_resend_interval)])
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
        conductor.stop()
        # What binds left to do asks the agent (a clean waits up to
        # cleaning.CLEAN_TIMEOUT, 600 s, for one that stopped): first.
        manager.binder.stop()
        agent.stop()
        manager.stop()
        rpc.cleanup()
        rpc.set_defaults()


@pytest.mark.parametrize('backend', gate_stack.backends('sqlite'),
                         indirect=True)
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


@pytest.mark.parametrize('backend', gate_stack.backends('mysql'),
                         indirect=True)
def test_exhausted_deployable_refuses_the_bind(stack):
    rp = stack.deployable('FPGA')['rp_uuid']
    profile = stack.profile('one-fpga', {'resources:FPGA': '1'})
    first, _ = stack.bind(profile, rp, count=2)
    assert {a['state'] for a in stack.resolved(first)} == {'Bound'}
    assert wait_for(lambda: stack.events(first))
    late = str(uuid.uuid4())
    with pytest.raises(exception.BindRefused,
                       match='no free attach handle') as refused:
        stack.bind(profile, rp, instance=late)
    # The answer is the failure: nothing written, nothing told to Nova.
    [arq] = [a for a in arqs.get_all(stack.ctx)[0]
             if a['uuid'] in str(refused.value)]
    assert (arq['state'], arq['instance_uuid']) == ('Initial', None)
    assert stack.events(late) == {}


@pytest.mark.parametrize('backend', gate_stack.backends('postgresql'),
                         indirect=True)
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


@pytest.mark.parametrize('backend', gate_stack.backends('sqlite'),
                         indirect=True)
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


@pytest.mark.parametrize('backend', gate_stack.backends('mysql'),
                         indirect=True)
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


@pytest.fixture
def fast_resends(monkeypatch):
    """Events owed to Nova sent again within tenths of a second (the
    stack's resend pass runs every 0.05 s)."""
    monkeypatch.setattr(nova_outbox, 'FIRST_DELAY', 0.05)
    monkeypatch.setattr(nova_outbox, 'MAX_DELAY', 0.2)


def _failing_bind(stack, name: str, instance: str) -> str:
    """A bind whose programming fails on the host; its ARQ."""
    stack.conf.set_override('program_fail', True, 'fake_driver')
    image = stack.glance.add_image(b'x')
    profile = stack.profile(name, {
        'resources:FPGA': '1', 'accel:bitstream_id': image['id']})
    _, [arq] = stack.bind(profile, stack.deployable('FPGA')['rp_uuid'],
                          instance=instance)
    return arq


def _owed(stack, arq: str) -> bool:
    """Failed, unresolved as Nova reads it, and holding nothing."""
    found = arqs.get(stack.ctx, arq)
    return (found['state'], found['attach_handle_uuid']) == (
        'BindStarted', None) and not any(
        h['in_use'] for h in stack.deployable('FPGA')['attach_handles'])


@pytest.mark.parametrize('backend', gate_stack.backends('postgresql'),
                         indirect=True)
def test_a_failure_nova_drops_is_sent_until_nova_takes_it(stack,
                                                          fast_resends):
    # Nova 34 drops the event of an instance not on a host yet (422), and
    # nova-compute would boot the server without its device if it read
    # BindFailed: the request stays unresolved until Nova has the event.
    instance = str(uuid.uuid4())
    stack.nova.answer(instance, 422)
    arq = _failing_bind(stack, 'dropped', instance)
    wait_for(lambda: len(stack.nova.codes(arq)) >= 3)
    assert _owed(stack, arq)
    assert stack.resolved(instance) == []
    # nova-compute claimed the instance: the next event is taken.
    stack.nova.answer(instance, 200)
    wait_for(lambda: arqs.get(stack.ctx, arq)['state'] == 'BindFailed')
    codes = stack.nova.codes(arq)
    assert set(codes[:-1]) == {422} and codes[-1] == 200
    assert stack.events(instance) == {arq: 'failed'}


@pytest.mark.parametrize('backend', gate_stack.backends('sqlite'),
                         indirect=True)
def test_a_failure_taken_after_a_few_422s(stack, fast_resends):
    instance = str(uuid.uuid4())
    stack.nova.answer(instance, 422, times=3)
    arq = _failing_bind(stack, 'few', instance)
    [failed] = wait_for(lambda: stack.resolved(instance))
    assert (failed['state'], failed['attach_handle_uuid']) == (
        'BindFailed', None)
    assert stack.nova.codes(arq) == [422, 422, 422, 200]


@pytest.mark.parametrize('backend', gate_stack.backends('mysql'),
                         indirect=True)
def test_a_failure_for_an_instance_nova_does_not_know_ends(stack,
                                                           fast_resends):
    instance = str(uuid.uuid4())
    stack.nova.answer(instance, 404)
    arq = _failing_bind(stack, 'gone', instance)
    [failed] = wait_for(lambda: stack.resolved(instance))
    assert failed['state'] == 'BindFailed'
    assert stack.nova.codes(arq) == [404]


@pytest.mark.parametrize('backend', gate_stack.backends('postgresql'),
                         indirect=True)
def test_a_failure_nova_never_takes_ends_with_the_timeout(stack,
                                                          fast_resends):
    stack.conf.set_override('bind_timeout', 2, 'conductor')
    instance = str(uuid.uuid4())
    stack.nova.answer(instance, 422)
    arq = _failing_bind(stack, 'never', instance)
    [failed] = wait_for(lambda: stack.resolved(instance), timeout=30)
    assert failed['state'] == 'BindFailed'
    codes = stack.nova.codes(arq)
    assert len(codes) >= 2 and set(codes) == {422}


@pytest.mark.parametrize('backend', gate_stack.backends('sqlite'),
                         indirect=True)
@pytest.mark.parametrize('action', ['delete', 'unbind', 'sweep'])
def test_what_ends_an_owed_failure_first_wins(stack, fast_resends, caplog,
                                              action):
    caplog.set_level(logging.INFO)
    instance = str(uuid.uuid4())
    stack.nova.answer(instance, 422)
    arq = _failing_bind(stack, f'raced-{action}', instance)
    wait_for(lambda: len(stack.nova.codes(arq)) >= 2)
    assert _owed(stack, arq)
    if action == 'delete':
        stack.api.arq_delete(stack.ctx, instance_uuid=instance)
    elif action == 'unbind':
        stack.api.arq_apply_patch(stack.ctx, {}, [arq])
    else:
        # A conductor that stopped owed it: the sweep ends it, once.
        _execute(stack, sa.update(models.AcceleratorRequest)
                 .where(models.AcceleratorRequest.uuid == arq)
                 .values(updated_at=timeutils.utcnow()
                         - datetime.timedelta(seconds=120)))
        sweeper = conductor_manager.ConductorManager(stack.conf).binder
        sweeper.fail_stale_binds()
        sweeper.stop()
    # The unbind or delete dropped the event owed in its transaction; the
    # sweep's own event went, got 422 for a request that reads BindFailed
    # (nova-compute reads it), and was dropped too.
    wait_for(lambda: not [e for e in nova_events.get_all(stack.ctx)
                          if e.arq_uuid == arq])
    sent = len(stack.nova.codes(arq))
    # A resend pass finds nothing of it to send.
    resender = conductor_manager.ConductorManager(stack.conf).binder
    resender.outbox.resend()
    resender.stop()
    assert len(stack.nova.codes(arq)) == sent
    state = {'delete': None, 'unbind': 'Unbound', 'sweep': 'BindFailed'}
    found = arqs.get_all(stack.ctx)[0]
    assert {a['uuid']: a['state'] for a in found}.get(arq) == state[action]
    if action == 'sweep':
        # The sweep told Nova; the resends did not end it again.
        assert 'is BindFailed' not in caplog.text
        assert 'were binding for longer' in caplog.text


@pytest.mark.parametrize('backend', gate_stack.backends('mysql'),
                         indirect=True)
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


@pytest.mark.parametrize('backend', gate_stack.backends('postgresql'),
                         indirect=True)
def test_delete_removes_the_mdev(stack):
    rp = stack.deployable('GPU')['rp_uuid']
    profile = stack.profile('vgpu2', {'resources:VGPU': '2'})
    instance, _ = stack.bind(profile, rp)
    wait_for(lambda: stack.resolved(instance))
    assert len(stack.driver.mdevs) == 2
    stack.api.arq_delete(stack.ctx, instance_uuid=instance)
    wait_for(lambda: stack.driver.mdevs == {})


@pytest.mark.parametrize('backend', gate_stack.backends('sqlite'),
                         indirect=True)
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


@pytest.mark.parametrize('backend', gate_stack.backends('mysql'),
                         indirect=True)
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
    binder = conductor_manager.ConductorManager(stack.conf).binder
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


@pytest.mark.parametrize('backend', gate_stack.backends('postgresql'),
                         indirect=True)
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
    binder = conductor_manager.ConductorManager(stack.conf).binder
    binder.fail_stale_binds()
    binder.stop()
    assert stack.driver.mdevs == {}
    assert not any(h['in_use']
                   for h in stack.deployable('GPU')['attach_handles'])
