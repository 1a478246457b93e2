"""Unbinding and deleting requests while their host is lost.

On every database with a real placement. The agent is the real
``AgentManager`` over the fake driver (one GPU offering one vGPU), reached
without a message bus: ``EdgeAgent`` stands at the RPC edge and can be
``down`` (its service record says so) or ``silent`` (it is called, and
the call hangs until the test lets it fail, as an RPC to a dead host
does). Nova's evacuation deletes the instance's requests, and a
shelve-offload unbinds them, while the host is gone: both answer at once,
the vGPU's handle stays taken and reserved in placement, and it is free
and offered again only once the agent, back, has removed the mdev.
"""
import datetime
import threading
import uuid

import oslo_messaging as messaging
import pytest
import sqlalchemy as sa
from oslo_utils import timeutils

from cyborg import context as cyborg_context
from cyborg.accelerator.drivers import fake
from cyborg.agent import cache as agent_cache
from cyborg.agent import manager as agent_manager
from cyborg.agent import resource_tracker
from cyborg.common import exception
from cyborg.conductor import manager as conductor_manager
from cyborg.db import models
from cyborg.db.api import arqs
from cyborg.db.api import capacity
from cyborg.db.api import device_profiles
from cyborg.db.api import inventory
from cyborg.db.api import services
from cyborg.tests.fakes import fixtures
from cyborg.tests.harness import placement_server
from cyborg.tests.utils import InProcess
from cyborg.tests.utils import wait_for

AH = models.AttachHandle


class DirectConductor:
    """The agent's conductor client, calling the conductor in process."""

    def __init__(self) -> None:
        self.conductor: InProcess | None = None

    def report_data(self, context, host, report):
        return self.conductor.report_data(context, host, report)

    def mdevs_owned(self, context, host, mdev_uuids):
        return self.conductor.mdevs_owned(context, host, mdev_uuids)

    def mdevs_removed(self, context, host, mdev_uuids):
        return self.conductor.mdevs_removed(context, host, mdev_uuids)


class EdgeAgent:
    """The agent RPC client: the real agent manager, ``down``, or
    ``silent`` (each call waits for ``gate``, then times out)."""

    def __init__(self, manager: InProcess) -> None:
        self.manager = manager
        self.mode = 'up'
        self.calls: list[str] = []
        self.gate = threading.Event()
        self.waiting = threading.Event()

    def _call(self, method, host, *args):
        self.calls.append(method)
        if self.mode == 'down':
            raise exception.AgentUnavailable(host=host,
                                             reason='nothing listens')
        if self.mode == 'silent':
            self.waiting.set()
            assert self.gate.wait(60)
            raise messaging.MessagingTimeout('no reply')
        try:
            return getattr(self.manager, method)(None, *args)
        except messaging.ExpectedException as exc:
            raise exc.exc_info[1] from None

    def create_mdev(self, context, host, driver_name, attach_info,
                    mdev_uuid, timeout):
        return self._call('create_mdev', host, driver_name, attach_info,
                          mdev_uuid)

    def remove_mdev(self, context, host, driver_name, attach_info,
                    mdev_uuid, timeout):
        return self._call('remove_mdev', host, driver_name, attach_info,
                          mdev_uuid)


class Host:
    """A conductor and one host's agent, and what the tests look at."""

    def __init__(self, conf, engine, placement, node, tmp_path) -> None:
        self.conf = conf
        self.engine = engine
        self.placement = placement
        self.node = node
        self.ctx = cyborg_context.get_admin_context()
        direct = DirectConductor()
        self.driver = fake.FakeDriver(conf)
        tracker = resource_tracker.ResourceTracker(
            conf, [self.driver], direct,
            cache=agent_cache.AgentCache(str(tmp_path / 'cache.json')))
        self.agent = EdgeAgent(
            InProcess(agent_manager.AgentManager(conf, tracker, direct)))
        self.conductor = InProcess(conductor_manager.ConductorManager(
            conf, agent_api=self.agent))
        direct.conductor = self.conductor
        tracker.update(force=True)
        self.alive()
        [gpu] = [d for d in inventory.get_host_devices(self.ctx, conf.host)
                 if d['type'] == 'GPU']
        [self.deployable] = gpu['deployables']
        self.rp = self.deployable['rp_uuid']
        device_profiles.create(self.ctx, {
            'name': 'vgpu', 'groups': [{'resources:VGPU': '1'}]})

    def alive(self, seconds_ago: int = 0) -> None:
        """A heartbeat of the agent, as of ``seconds_ago``."""
        services.heartbeat(self.ctx, self.conf.host, 'cyborg-agent', '1')
        with self.engine.begin() as conn:
            conn.execute(sa.update(models.Service).values(
                last_seen_at=timeutils.utcnow()
                - datetime.timedelta(seconds=seconds_ago)))

    def lose(self) -> None:
        """The host is lost: no heartbeat for an hour, nothing answers."""
        self.alive(seconds_ago=3600)
        self.agent.mode = 'down'

    def back(self) -> None:
        """The host's agent starts again and reconciles (it heartbeats
        as it starts)."""
        self.agent.mode = 'up'
        self.alive()
        self.agent.manager.restore_mdevs()

    def bind(self) -> tuple[str, str]:
        """A new instance with one vGPU request; (instance, ARQ)."""
        [arq] = arqs.create(self.ctx, 'vgpu', 'project')
        instance = str(uuid.uuid4())
        self.conductor.arq_apply_patch(self.ctx, {arq['uuid']: {
            'hostname': self.node['name'], 'device_rp_uuid': self.rp,
            'instance_uuid': instance}}, [])
        wait_for(lambda: self.state(arq['uuid']) != 'BindStarted')
        return instance, arq['uuid']

    def state(self, arq: str) -> str:
        return arqs.get(self.ctx, arq)['state']

    def handle(self):
        with self.engine.connect() as conn:
            return conn.execute(sa.select(AH.uuid, AH.in_use,
                                          AH.released_at)).one()

    def drain(self) -> None:
        """Wait for the work queued in the conductor's one worker."""
        for _ in range(2):
            self.conductor.binder.executor.submit(lambda: None).result()

    def reserved(self) -> int:
        return self.placement.inventories(self.rp)['VGPU']['reserved']

    def held_back(self) -> None:
        """The handle is taken by no request, not offered, not bindable."""
        handle = self.handle()
        assert handle.in_use and handle.released_at is not None
        assert list(self.driver.mdevs) == [handle.uuid]
        assert self.reserved() == 1
        [row] = capacity.get(self.ctx, group_by='resource_class')
        assert (row['used'], row['reserved'], row['available']) == (0, 1, 0)
        [arq] = arqs.create(self.ctx, 'vgpu', 'project')
        with pytest.raises(messaging.ExpectedException) as raised:
            self.conductor.arq_apply_patch(self.ctx, {arq['uuid']: {
                'hostname': self.node['name'], 'device_rp_uuid': self.rp,
                'instance_uuid': str(uuid.uuid4())}}, [])
        refused = raised.value.exc_info[1]
        assert isinstance(refused, exception.BindRefused)
        assert 'no free attach handle' in str(refused)
        assert self.state(arq['uuid']) == 'Initial'
        self.conductor.arq_delete(self.ctx, [arq['uuid']], None)

    def in_service(self) -> None:
        """The handle is free and offered, and binds again."""
        handle = self.handle()
        assert not handle.in_use and handle.released_at is None
        assert self.driver.mdevs == {}
        assert self.reserved() == 0
        instance, arq = self.bind()
        assert self.state(arq) == 'Bound'
        self.conductor.arq_delete(self.ctx, None, instance)
        self.drain()


@pytest.fixture
def host(conf, placement, placement_url, db_engine, fake_nova, tmp_path):
    placement_server.point_at(conf, placement_url)
    fixtures.nova_conf(conf, fake_nova)
    node = placement.create_compute_node()
    conf.set_override('host', f'agent-{node["name"]}')
    conf.set_override('hostname', node['name'], 'agent')
    conf.set_override('device_count', 0, 'fake_driver')
    conf.set_override('vgpu_device_count', 1, 'fake_driver')
    conf.set_override('vgpus_per_device', 1, 'fake_driver')
    # One worker: what it was given runs in order (``Host.drain``).
    conf.set_override('bind_workers', 1, 'conductor')
    made = Host(conf, db_engine, placement, node, tmp_path)
    yield made
    made.agent.gate.set()
    made.conductor.binder.stop()


def test_delete_by_instance_with_the_host_down_asks_no_agent(host):
    instance, arq = host.bind()
    assert host.state(arq) == 'Bound'
    host.lose()
    host.agent.calls.clear()
    host.conductor.arq_delete(host.ctx, None, instance)
    assert arqs.get_all(host.ctx, instance_uuid=instance)[0] == []
    host.drain()
    assert host.agent.calls == []
    host.held_back()
    # Nova deletes again as it cleans up: nothing left, nothing changes.
    host.conductor.arq_delete(host.ctx, None, instance)
    host.back()
    host.in_service()


def test_unbind_with_the_host_down_ends_unbound(host):
    _, arq = host.bind()
    host.lose()
    host.conductor.arq_apply_patch(host.ctx, {}, [arq])
    assert host.state(arq) == 'Unbound'
    host.drain()
    assert 'remove_mdev' not in host.agent.calls
    host.held_back()
    host.back()
    host.in_service()
    # The request unbound binds again, as on unshelve.
    host.conductor.arq_apply_patch(host.ctx, {arq: {
        'hostname': host.node['name'], 'device_rp_uuid': host.rp,
        'instance_uuid': str(uuid.uuid4())}}, [])
    wait_for(lambda: host.state(arq) == 'Bound')


def test_a_host_not_yet_known_down_never_holds_the_answer(host):
    instance, _ = host.bind()
    # The agent died a moment ago: its record still says up, and the
    # removal's RPC hangs until its timeout.
    host.agent.mode = 'silent'
    host.conductor.arq_delete(host.ctx, None, instance)
    # Answered while the removal still waits, in the background.
    assert host.agent.waiting.wait(60)
    assert not host.agent.gate.is_set()
    host.agent.gate.set()
    host.drain()
    host.lose()
    host.held_back()
    host.back()
    host.in_service()


def test_the_stale_sweep_removes_what_an_agent_back_still_holds(host):
    _, arq = host.bind()
    host.agent.mode = 'silent'
    host.conductor.arq_apply_patch(host.ctx, {}, [arq])
    assert host.state(arq) == 'Unbound'
    host.agent.gate.set()
    host.drain()
    host.lose()
    # The sweep asks no agent that is down.
    past = timeutils.utcnow() - datetime.timedelta(hours=1)
    with host.engine.begin() as conn:
        conn.execute(sa.update(AH).where(AH.released_at.is_not(None))
                     .values(released_at=past))
    host.agent.calls.clear()
    host.conductor.binder.fail_stale_binds()
    assert host.agent.calls == []
    host.held_back()
    # Back, without a restart that reconciles (the agent's cache was
    # lost): the next sweep removes the mdev and frees the handle.
    host.agent.mode = 'up'
    host.alive()
    with host.engine.begin() as conn:
        conn.execute(sa.update(AH).where(AH.released_at.is_not(None))
                     .values(released_at=past))
    host.conductor.binder.fail_stale_binds()
    host.drain()
    host.in_service()
