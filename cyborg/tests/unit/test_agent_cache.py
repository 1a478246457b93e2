"""The agent's local cache: the file, and what a restarted agent does."""
import json
import logging
import os
import threading
import uuid

import oslo_messaging as messaging
import pytest

from cyborg import context as cyborg_context
from cyborg.accelerator.drivers import fake
from cyborg.agent import cache as agent_cache
from cyborg.agent import manager as agent_manager
from cyborg.agent import resource_tracker
from cyborg.agent import service as agent_service
from cyborg.common import exception
from cyborg.common import rpc
from cyborg.common import rpc_service
from cyborg.tests.utils import InProcess

MDEV_A = '0b5e2c1a-7d4f-4f0e-9a61-3c2d1e0f9a01'
MDEV_B = '0b5e2c1a-7d4f-4f0e-9a61-3c2d1e0f9a02'
MDEV_C = '0b5e2c1a-7d4f-4f0e-9a61-3c2d1e0f9a03'


class RecordingConductor:
    """Stands in for the conductor RPC client at the process edge."""

    def __init__(self):
        self.reports = []
        self.failure = None

    def report_data(self, context, host, report):
        if self.failure is not None:
            raise self.failure
        self.reports.append((host, report))
        return {'writes': 0}

    # Every recorded mdev is held, unless ``released`` names it.
    released = frozenset()

    def mdevs_owned(self, context, host, mdev_uuids):
        return [m for m in mdev_uuids if m not in self.released]

    def mdevs_removed(self, context, host, mdev_uuids):
        self.removed = list(mdev_uuids)
        return len(mdev_uuids)


class Agent:
    """One run of an agent on the host: what cyborg-agent assembles,
    minus RPC, with the cache read from ``path``."""

    def __init__(self, conf, path, driver=None, conductor=None):
        self.driver = driver or fake.FakeDriver(conf)
        self.conductor = conductor or RecordingConductor()
        self.cache = agent_cache.AgentCache.load(path)
        self.tracker = resource_tracker.ResourceTracker(
            conf, [self.driver], self.conductor, cache=self.cache)
        self.manager = InProcess(agent_manager.AgentManager(
            conf, self.tracker, self.conductor, glance=object()))


class StubConductorEndpoint:
    """A conductor that records, for each report, the report and the
    mdevs the fake driver had when it came."""

    target = messaging.Target(version='1.2')

    def __init__(self):
        self.driver = None
        self.reports = []
        self.mdevs_seen = []
        self.arrived = threading.Condition()

    def report_data(self, context, host, report):
        with self.arrived:
            self.reports.append(report)
            self.mdevs_seen.append(dict(self.driver.mdevs))
            self.arrived.notify_all()
        return {'writes': 0}

    def service_heartbeat(self, context, host, binary, version,
                          hostname=None):
        pass

    def wait_for(self, count, timeout=10):
        with self.arrived:
            assert self.arrived.wait_for(
                lambda: len(self.reports) >= count, timeout), (
                f'{len(self.reports)} report(s), not {count}')


@pytest.fixture
def stub_conductor(conf):
    """A stub conductor on oslo.messaging's in-process transport."""
    rpc.set_defaults(control_exchange=f'cyborg-test-{uuid.uuid4().hex[:8]}')
    rpc.init(conf, url='fake://')
    endpoint = StubConductorEndpoint()
    svc = rpc_service.RPCService(rpc.CONDUCTOR_TOPIC, 'ctl-stub', [endpoint])
    svc.start()
    yield endpoint
    svc.stop()
    rpc.cleanup()
    rpc.set_defaults()


@pytest.fixture
def path(conf, tmp_path):
    conf.set_override('host', 'cmp1')
    conf.set_override('state_path', str(tmp_path / 'state'))
    conf.set_override('device_count', 1, 'fake_driver')
    conf.set_override('vgpu_device_count', 1, 'fake_driver')
    return agent_cache.cache_path(conf)


def _gpu_handle(driver, n=0):
    gpu = [d for d in driver.discover() if d.type == 'GPU'][0]
    return gpu.deployables[0].attach_handles[n].attach_info


def _files(path):
    return sorted(os.listdir(os.path.dirname(path)))


def test_round_trip(path):
    cache = agent_cache.AgentCache.load(path)
    assert cache.report is None and cache.mdevs == {}
    report = {'hostname': 'cmp1', 'devices': []}
    cache.record_report(report, 'h1')
    cache.record_accepted('cmp1 x', 'h1')
    cache.record_bitstream({'bus': '0c'}, 'dep', 'fake', 'img-1')
    cache.record_bitstream({'bus': '0c'}, 'dep', 'fake', 'img-2')
    cache.record_mdev(MDEV_A, 'fake', {'bus': '0c', 'asked_type': 't'})
    cache.record_mdev(MDEV_B, 'fake', {'bus': '0d', 'asked_type': 't'})
    cache.forget_mdev(MDEV_B)

    again = agent_cache.AgentCache.load(path)
    assert again.report == report
    assert again.report_hash == 'h1'
    assert again.accepted_hash('cmp1 x') == 'h1'
    assert again.accepted_hash('cmp2 x') is None
    assert again.bitstreams == [{'controlpath_id': {'bus': '0c'},
                                 'deployable_name': 'dep',
                                 'driver_name': 'fake',
                                 'bitstream_id': 'img-2'}]
    assert again.mdevs == {MDEV_A: {'driver_name': 'fake',
                                    'attach_info': {'bus': '0c',
                                                    'asked_type': 't'}}}
    assert _files(path) == ['agent-cache.json']
    with open(path, encoding='utf-8') as f:
        assert json.load(f)['version'] == agent_cache.FORMAT_VERSION


def test_a_cache_without_a_path_writes_nothing(tmp_path):
    cache = agent_cache.AgentCache()
    cache.record_mdev(MDEV_A, 'fake', {'bus': '0c'})
    assert list(cache.mdevs) == [MDEV_A]
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize('failing', ['fsync', 'replace'])
def test_a_failed_write_leaves_the_old_file_whole(path, monkeypatch, caplog,
                                                  failing):
    cache = agent_cache.AgentCache.load(path)
    cache.record_mdev(MDEV_A, 'fake', {'bus': '0c'})
    with open(path, 'rb') as f:
        before = f.read()

    def fail(*args):
        raise OSError(28, 'No space left on device')

    with monkeypatch.context() as patch, caplog.at_level(logging.ERROR):
        patch.setattr(os, failing, fail)
        cache.record_mdev(MDEV_B, 'fake', {'bus': '0d'})
    assert 'No space left on device' in caplog.text
    with open(path, 'rb') as f:
        assert f.read() == before
    # No half-written temporary file is left behind either.
    assert _files(path) == ['agent-cache.json']
    # The agent goes on; the next change writes both.
    assert set(cache.mdevs) == {MDEV_A, MDEV_B}
    cache.record_mdev(MDEV_C, 'fake', {'bus': '0e'})
    assert set(agent_cache.AgentCache.load(path).mdevs) == {
        MDEV_A, MDEV_B, MDEV_C}


CORRUPT = {
    'not json': b'{"version": 1, "mdevs": {',
    'not utf-8': b'\xff\xfe\x00garbage',
    'a list': b'[]',
    'missing keys': b'{"version": 1}',
    'other version': json.dumps(dict(
        agent_cache._empty(), version=99)).encode(),
    'mdev key not a uuid': json.dumps(dict(
        agent_cache._empty(),
        mdevs={'x': {'driver_name': 'fake', 'attach_info': {}}})).encode(),
    'attach info not strings': json.dumps(dict(
        agent_cache._empty(),
        mdevs={MDEV_A: {'driver_name': 'fake',
                        'attach_info': {'bus': 12}}})).encode(),
}


@pytest.mark.parametrize('content', CORRUPT.values(), ids=CORRUPT.keys())
def test_a_corrupt_cache_is_set_aside(conf, path, caplog, content):
    os.makedirs(os.path.dirname(path))
    with open(path, 'wb') as f:
        f.write(content)
    with caplog.at_level(logging.WARNING):
        agent = Agent(conf, path)
    [record] = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert path in record.getMessage()
    assert 'empty cache' in record.getMessage()
    [aside] = [f for f in _files(path)
               if f.startswith('agent-cache.json.corrupt-')]
    with open(os.path.join(os.path.dirname(path), aside), 'rb') as f:
        assert f.read() == content
    # The agent goes on with an empty cache, and writes a good one.
    assert agent.manager.restore_mdevs() == 0
    assert agent.tracker.update() is not None
    assert agent_cache.AgentCache.load(path).report_hash is not None


def test_an_unreadable_cache_is_set_aside(conf, path, caplog):
    os.makedirs(path)  # reading a directory fails like a bad disk would
    with caplog.at_level(logging.WARNING):
        agent = Agent(conf, path)
    assert 'agent-cache.json' in caplog.text
    assert agent.cache.mdevs == {}
    assert os.path.isfile(path) is False
    agent.tracker.update()
    assert os.path.isfile(path)


def test_restart_recreates_the_recorded_mdevs(conf, path, caplog):
    ctx = cyborg_context.get_admin_context()
    first = Agent(conf, path)
    handles = [_gpu_handle(first.driver, n) for n in range(3)]
    for mdev, handle in zip((MDEV_A, MDEV_B, MDEV_C), handles, strict=True):
        first.manager.create_mdev(ctx, 'fake', handle, mdev)
    first.manager.remove_mdev(ctx, 'fake', handles[1], MDEV_B)
    parent = first.driver.mdevs[MDEV_A]

    # An agent restart: the mdevs are still there, which is fine.
    with caplog.at_level(logging.DEBUG):
        same_host = Agent(conf, path, driver=first.driver)
        assert same_host.manager.restore_mdevs() == 0
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert set(first.driver.mdevs) == {MDEV_A, MDEV_C}

    # A reboot: the driver finds no mdevs; the agent creates them again,
    # but not the one it removed.
    rebooted = Agent(conf, path)
    assert rebooted.driver.mdevs == {}
    assert rebooted.manager.restore_mdevs() == 2
    assert rebooted.driver.mdevs == {MDEV_A: parent, MDEV_C: parent}


def test_restart_removes_the_mdevs_no_request_holds(conf, path):
    ctx = cyborg_context.get_admin_context()
    first = Agent(conf, path)
    for n, mdev in enumerate((MDEV_A, MDEV_B, MDEV_C)):
        first.manager.create_mdev(ctx, 'fake', _gpu_handle(first.driver, n),
                                  mdev)
    # MDEV_B's request was deleted while this host could not be reached.
    first.conductor.released = frozenset({MDEV_B})
    again = Agent(conf, path, driver=first.driver,
                  conductor=first.conductor)
    assert again.manager.restore_mdevs() == 0
    assert set(first.driver.mdevs) == {MDEV_A, MDEV_C}
    assert first.conductor.removed == [MDEV_B]
    assert set(again.cache.mdevs) == {MDEV_A, MDEV_C}


def test_without_the_conductor_every_recorded_mdev_is_kept(conf, path,
                                                           caplog):
    ctx = cyborg_context.get_admin_context()
    first = Agent(conf, path)
    first.manager.create_mdev(ctx, 'fake', _gpu_handle(first.driver, 0),
                              MDEV_A)
    first.conductor.failure = OSError('no conductor')
    first.conductor.mdevs_owned = first.conductor.report_data
    rebooted = Agent(conf, path, conductor=first.conductor)
    with caplog.at_level(logging.WARNING):
        assert rebooted.manager.restore_mdevs() == 1
    assert list(rebooted.driver.mdevs) == [MDEV_A]
    assert 'keeping them all' in caplog.text


def test_mdevs_that_cannot_be_recreated_are_logged_and_kept(conf, path,
                                                            caplog):
    ctx = cyborg_context.get_admin_context()
    first = Agent(conf, path)
    first.manager.create_mdev(ctx, 'fake', _gpu_handle(first.driver, 0),
                              MDEV_A)
    first.manager.create_mdev(ctx, 'fake', _gpu_handle(first.driver, 1),
                              MDEV_B)
    first.cache.record_mdev(MDEV_C, 'nvidia', {'bus': '0c'})
    # The GPU is gone after the reboot.
    conf.set_override('vgpu_device_count', 0, 'fake_driver')
    rebooted = Agent(conf, path)
    with caplog.at_level(logging.WARNING):
        assert rebooted.manager.restore_mdevs() == 0
    warnings = [r.getMessage() for r in caplog.records
                if r.levelno == logging.WARNING]
    assert len(warnings) == 3
    for mdev, why in ((MDEV_A, 'no such fake GPU'),
                      (MDEV_B, 'no such fake GPU'),
                      (MDEV_C, "no driver named 'nvidia'")):
        assert any(mdev in w and why in w for w in warnings), warnings
    # Still recorded: the unbind that removes them finds them.
    assert set(rebooted.cache.mdevs) == {MDEV_A, MDEV_B, MDEV_C}
    assert rebooted.tracker.update() is not None


def test_a_failed_action_records_nothing(conf, path):
    ctx = cyborg_context.get_admin_context()
    agent = Agent(conf, path)
    handle = _gpu_handle(agent.driver)
    agent.manager.create_mdev(ctx, 'fake', handle, MDEV_A)
    # The RPC endpoint wraps what it raises for the RPC server.
    with pytest.raises(messaging.ExpectedException) as err:
        agent.manager.create_mdev(ctx, 'fake', {'bus': '0c'}, MDEV_B)
    assert err.value.exc_info[0] is exception.DeviceActionError
    conf.set_override('vgpu_device_count', 0, 'fake_driver')
    with pytest.raises(messaging.ExpectedException):
        agent.manager.remove_mdev(ctx, 'fake', handle, MDEV_A)
    assert list(agent_cache.AgentCache.load(path).mdevs) == [MDEV_A]


def test_an_accepted_report_is_not_sent_again_after_restart(conf, path):
    first = Agent(conf, path)
    assert first.tracker.update() is not None
    assert len(first.conductor.reports) == 1

    again = Agent(conf, path)
    assert again.tracker.update() is None
    assert again.conductor.reports == []
    # A change is sent, and the new hash is what counts at the next start.
    conf.set_override('device_count', 2, 'fake_driver')
    assert again.tracker.update() is not None
    assert Agent(conf, path).tracker.update() is None


def test_a_full_report_is_due_an_interval_after_restart(conf, path):
    conf.set_override('full_report_interval', 600, 'agent')
    Agent(conf, path).tracker.update()
    now = [5000.0]
    again = Agent(conf, path)
    again.tracker = resource_tracker.ResourceTracker(
        conf, [again.driver], again.conductor, clock=lambda: now[0],
        cache=again.cache)
    assert again.tracker.update() is None
    now[0] += 600
    assert again.tracker.update() is not None


def test_the_accepted_hash_counts_only_for_its_recipient(conf, path):
    Agent(conf, path).tracker.update()
    conf.set_override('host', 'cmp2')
    renamed = Agent(conf, path)
    assert renamed.tracker.update() is not None
    assert renamed.conductor.reports[0][0] == 'cmp2'


@pytest.mark.parametrize('failure', [
    exception.ServiceUnavailable(reason='no cyborg-conductor answered'),
    messaging.MessagingTimeout('timed out'),
    messaging.MessageUndeliverable(Exception('no queue'), 'cyborg', 'x',
                                   'report_data'),
], ids=['unavailable', 'timeout', 'undeliverable'])
def test_a_report_no_conductor_took_is_kept_and_sent(conf, path, caplog,
                                                     failure):
    agent = Agent(conf, path)
    agent.conductor.failure = failure
    with caplog.at_level(logging.WARNING):
        agent.manager.periodic_report()
    assert ('No conductor acknowledged the first inventory report'
            in caplog.text)
    pending = agent.tracker.pending
    assert pending is not None
    assert pending[:12] in caplog.text
    with open(path, encoding='utf-8') as f:
        stored = json.load(f)
    assert stored['report']['hash'] == pending
    assert stored['accepted'] is None

    # The agent restarts while the conductor is still away, then it is
    # back: the report goes out, and is no longer pending.
    restarted = Agent(conf, path)
    assert restarted.tracker.pending == pending
    restarted.manager.periodic_report()
    assert len(restarted.conductor.reports) == 1
    assert restarted.tracker.pending is None


def test_the_first_report_is_retried_with_backoff(conf, path, caplog):
    conf.set_override('periodic_interval', 5, 'agent')
    agent = Agent(conf, path)
    agent.conductor.failure = messaging.MessagingTimeout('timed out')
    assert agent.manager.report_retry_delay() is None
    delays = []
    for _ in range(5):
        agent.manager.periodic_report()
        delays.append(agent.manager.report_retry_delay())
    # 1 s, doubling, never longer than a pass.
    assert delays == [1.0, 2.0, 4.0, 5.0, 5.0]
    agent.conductor.failure = None
    with caplog.at_level(logging.INFO):
        agent.manager.periodic_report()
    assert agent.manager.report_retry_delay() is None
    assert ('acknowledged the first inventory report of this agent (5 '
            'failed tries before)') in caplog.text


def test_driver_failing_at_start_reports_the_cached_devices(conf, path):
    Agent(conf, path).tracker.update()
    cached = Agent(conf, path).cache.report['devices']
    assert len(cached) == 2

    class BrokenDriver(fake.FakeDriver):
        def discover(self):
            raise OSError('sysfs went away')

    # After a restart, the driver fails before it ever succeeded: the
    # devices it reported last time are reported again, not dropped.
    broken = Agent(conf, path, driver=BrokenDriver(conf))
    assert broken.tracker.update(force=True) is not None
    [(_, report)] = broken.conductor.reports
    assert report['devices'] == cached
    assert report['drivers'] == {'fake': {
        'state': 'failed', 'error': 'OSError: sysfs went away'}}
    assert broken.cache.report['devices'] == cached


def test_new_device_state_is_part_of_the_report(conf, path):
    agent = Agent(conf, path)
    agent.tracker.update()
    assert 'new_device_status' not in agent.conductor.reports[0][1]
    conf.set_override('new_device_state', 'disabled', 'agent')
    assert agent.tracker.update() is not None
    assert agent.conductor.reports[1][1]['new_device_status'] == (
        'maintaining')
    assert agent.tracker.update() is None


def test_programmed_bitstreams_are_recorded(conf, path, tmp_path):
    class Glance:
        def get_image(self, image_id):
            return type('Bitstream', (), {
                'id': image_id, 'function_id': None,
                'to_dict': lambda self: {'id': image_id}})()

        def download(self, bitstream, directory):
            image = tmp_path / 'image.bin'
            image.write_bytes(b'bits')
            return str(image)

    agent = Agent(conf, path)
    agent.manager.host.glance = Glance()
    card = [d for d in agent.driver.discover() if d.type == 'FPGA'][0]
    image = str(uuid.uuid4())
    agent.manager.program_fpga(
        cyborg_context.get_admin_context(), card.controlpath_id,
        card.deployables[0].name, 'fake', image)
    assert agent_cache.AgentCache.load(path).bitstreams == [{
        'controlpath_id': card.controlpath_id,
        'deployable_name': card.deployables[0].name,
        'driver_name': 'fake', 'bitstream_id': image}]


def test_mdevs_exist_again_before_the_first_report(conf, path,
                                                   stub_conductor):
    conf.set_override('periodic_interval', 3600, 'agent')
    driver = fake.FakeDriver(conf)
    stub_conductor.driver = driver
    handle = _gpu_handle(driver)
    agent_cache.AgentCache(path).record_mdev(MDEV_A, 'fake', handle)
    svc = agent_service.build(conf, loaded=[driver], hotplug_events=[])
    svc.start()
    try:
        stub_conductor.wait_for(1)
    finally:
        svc.stop()
    assert stub_conductor.mdevs_seen == [{MDEV_A: '1000:0c:00.0'}]
