"""Device-side work the conductor asks of an agent, over real RabbitMQ.

A real agent service (fake driver, downloads from a fake Glance over HTTP)
and a real conductor on SQLite answer ``AgentAPI`` calls.
"""
import concurrent.futures
import hashlib
import os
import threading
import time
import types
import uuid

import pytest

from cyborg import context as cyborg_context
from cyborg.accelerator.drivers import base
from cyborg.accelerator.drivers import fake
from cyborg.agent import rpcapi as agent_rpcapi
from cyborg.agent import service as agent_service
from cyborg.common import exception
from cyborg.common import glance_client
from cyborg.common import rpc
from cyborg.common import rpc_service
from cyborg.conductor import manager as conductor_manager
from cyborg.db.api import inventory
from cyborg.tests.fakes import fixtures
from cyborg.tests.functional.test_report_flow import rabbit_rpc  # noqa: F401

HOST = 'cmp-a'
FUNCTION = '5a1d-77e0-fa11'
TIMEOUT = 30


class SlowFakeDriver(fake.FakeDriver):
    """Programs take ``delay`` seconds; records how many overlapped."""

    delay = 0.0

    def __init__(self, conf):
        super().__init__(conf)
        self._count_lock = threading.Lock()
        self.active: dict[str, int] = {}
        self.most_per_card = 0
        self.most_at_once = 0

    def program(self, controlpath_id, deployable_name, image_path,
                bitstream):
        card = deployable_name
        with self._count_lock:
            self.active[card] = self.active.get(card, 0) + 1
            self.most_per_card = max(self.most_per_card, self.active[card])
            self.most_at_once = max(self.most_at_once,
                                    sum(self.active.values()))
        try:
            time.sleep(self.delay)
            super().program(controlpath_id, deployable_name, image_path,
                            bitstream)
        finally:
            with self._count_lock:
                self.active[card] -= 1


@pytest.fixture
def conductor(conf, rabbit_rpc, sqlite_engine):  # noqa: F811
    manager = conductor_manager.ConductorManager(conf)
    svc = rpc_service.RPCService(rpc.CONDUCTOR_TOPIC, 'ctl-test',
                                 manager.endpoints())
    svc.start()
    yield svc
    svc.stop()
    manager.stop()


@pytest.fixture
def agent(conf, conductor, fake_glance, tmp_path):
    """The agent service of HOST, as cyborg-agent builds it."""
    conf.set_override('host', HOST)
    conf.set_override('hostname', f'{HOST}.example', 'agent')
    conf.set_override('state_path', str(tmp_path / 'state'))
    conf.set_override('device_count', 2, 'fake_driver')
    conf.set_override('vgpu_device_count', 1, 'fake_driver')
    conf.set_override('program_log', str(tmp_path / 'program.log'),
                      'fake_driver')
    fixtures.glance_conf(conf, fake_glance)
    driver = SlowFakeDriver(conf)
    svc = agent_service.build(conf, loaded=[driver])
    manager = svc.agent.host
    manager.glance = glance_client.GlanceClient(conf, retry_delay=0.01)
    svc.start()
    ctx = cyborg_context.get_admin_context()
    api = agent_rpcapi.AgentAPI(conf)
    api.discover(ctx, HOST)
    fpgas, gpus = [], []
    for device in driver.discover():
        (fpgas if device.type == 'FPGA' else gpus).append(device)
    yield types.SimpleNamespace(api=api, ctx=ctx, driver=driver,
                                manager=manager, fpgas=fpgas, gpus=gpus,
                                log=str(tmp_path / 'program.log'))
    svc.stop()


def _program(agent, image_id, card=0, driver_name='fake', host=HOST,
             timeout=TIMEOUT):
    device = agent.fpgas[card]
    return agent.api.program_fpga(
        agent.ctx, host, device.controlpath_id, device.deployables[0].name,
        driver_name, image_id, timeout=timeout)


def _attributes(ctx, card):
    devices = [d for d in inventory.get_host_devices(ctx, HOST)
               if d['type'] == 'FPGA']
    return devices[card]['deployables'][0]['attributes']


def test_program_fpga_downloads_programs_and_reports(agent, fake_glance):
    data = os.urandom(256 * 1024)
    image = fake_glance.add_image(
        data, name='fn', properties={'accel:function_id': FUNCTION})
    trait = 'CUSTOM_FPGA_FUNCTION_ID_FAKE_5A1D77E0FA11'
    assert base.function_trait('fake', FUNCTION) == trait
    assert 'trait_function' not in _attributes(agent.ctx, 1)

    result = _program(agent, image['id'], card=1)

    assert result == {'bitstream_id': image['id'], 'reported': True}
    [call] = agent.driver.program_calls
    assert call['controlpath_id'] == agent.fpgas[1].controlpath_id
    assert call['deployable_name'] == agent.fpgas[1].deployables[0].name
    assert os.path.dirname(call['image_path']) == agent.manager.bitstream_dir
    with open(call['image_path'], 'rb') as f:
        assert f.read() == data
    assert call['image_sha256'] == hashlib.sha256(data).hexdigest()
    assert call['bitstream']['properties'] == {'accel:function_id': FUNCTION}
    assert fake.read_program_log(agent.log) == [call]
    # The report went out before the call returned.
    assert _attributes(agent.ctx, 1)['trait_function'] == trait
    assert 'trait_function' not in _attributes(agent.ctx, 0)

    # The same bitstream again: served from the agent's cache.
    _program(agent, image['id'], card=0)
    assert len(fake_glance.downloads()) == 1
    assert _attributes(agent.ctx, 0)['trait_function'] == trait


def test_one_card_is_programmed_by_one_call_at_a_time(agent, fake_glance):
    agent.driver.delay = 0.3
    image = fake_glance.add_image(b'bits')
    with concurrent.futures.ThreadPoolExecutor(3) as pool:
        futures = [pool.submit(_program, agent, image['id'], card)
                   for card in (0, 0, 1)]
        results = [f.result(timeout=TIMEOUT) for f in futures]
    assert [r['bitstream_id'] for r in results] == [image['id']] * 3
    assert agent.driver.most_per_card == 1
    # Different cards are not held up by each other.
    assert agent.driver.most_at_once == 2
    trait = base.bitstream_trait('fake', image['id'])
    assert _attributes(agent.ctx, 0)['trait_function'] == trait


def test_mdevs_are_created_and_removed(agent):
    handle = agent.gpus[0].deployables[0].attach_handles[0]
    mdev = str(uuid.uuid4())
    calls = (agent.ctx, HOST, 'fake', handle.attach_info, mdev)

    assert agent.api.create_mdev(*calls, timeout=TIMEOUT) is None
    assert agent.driver.mdevs == {mdev: '1000:0c:00.0'}
    with pytest.raises(exception.DeviceActionError, match='already exists'):
        agent.api.create_mdev(*calls, timeout=TIMEOUT)
    agent.api.remove_mdev(*calls, timeout=TIMEOUT)
    agent.api.remove_mdev(*calls, timeout=TIMEOUT)
    assert agent.driver.mdevs == {}


def test_failures_come_back_as_cyborg_exceptions(agent, fake_glance, conf):
    image = fake_glance.add_image(b'bits')
    started = time.monotonic()
    with pytest.raises(exception.DeviceActionError) as err:
        _program(agent, image['id'], driver_name='nvidia')
    assert "no driver named 'nvidia'" in str(err.value)
    assert 'loaded: fake' in str(err.value)

    with pytest.raises(exception.BitstreamNotFound):
        _program(agent, str(uuid.uuid4()))

    fake_glance.corrupt_next_download(2)
    conf.set_override('download_retries', 1, 'glance')
    with pytest.raises(exception.BitstreamError, match='failed 2 time'):
        _program(agent, image['id'])

    conf.set_override('program_fail', True, 'fake_driver')
    with pytest.raises(exception.DeviceActionError, match='program_fail'):
        _program(agent, image['id'])
    assert fake.read_program_log(agent.log)[-1]['error']

    with pytest.raises(exception.Invalid, match='mdev_uuid'):
        agent.api.create_mdev(agent.ctx, HOST, 'fake', {'bus': '0c'},
                              'not-a-uuid', timeout=TIMEOUT)
    with pytest.raises(exception.DeviceActionError, match='no such fake'):
        agent.api.create_mdev(agent.ctx, HOST, 'fake', {'bus': '0c'},
                              str(uuid.uuid4()), timeout=TIMEOUT)
    assert time.monotonic() - started < 10
    assert agent.driver.loaded == {}


def test_unreachable_agents(agent, fake_glance, conf):
    image = fake_glance.add_image(b'bits')
    started = time.monotonic()
    with pytest.raises(exception.AgentUnavailable) as err:
        _program(agent, image['id'], host='cmp-gone')
    assert 'cmp-gone' in str(err.value)
    with pytest.raises(exception.AgentUnavailable):
        agent.api.remove_mdev(agent.ctx, 'cmp-gone', 'fake', {'bus': '0c'},
                              str(uuid.uuid4()), timeout=TIMEOUT)
    assert time.monotonic() - started < 5

    # An agent that takes longer than the caller waits.
    agent.driver.delay = 3
    with pytest.raises(exception.AgentUnavailable, match='within 1'):
        _program(agent, image['id'], timeout=1)


def test_capped_rpc_version_is_refused_before_sending(agent, conf):
    conf.set_override('agent', '1.0', 'upgrade_levels')
    api = agent_rpcapi.AgentAPI(conf)
    with pytest.raises(exception.NotSupported, match='program_fpga'):
        api.program_fpga(agent.ctx, HOST, {'bus': '0c'}, 'd', 'fake',
                         str(uuid.uuid4()), timeout=TIMEOUT)
    assert agent.driver.program_calls == []
