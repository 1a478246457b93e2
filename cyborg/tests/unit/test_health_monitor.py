"""Health passes: what the agent sends, and when it sends nothing."""
import oslo_messaging as messaging
import pytest

from cyborg.accelerator.drivers import fake
from cyborg.agent import health
from cyborg.agent import resource_tracker
from cyborg.common.device_health import Health
from cyborg.common.device_health import Usage
from cyborg.tests.utils import Clock


class Conductor:
    """Stands in for the conductor RPC client at the process edge."""

    def __init__(self):
        self.reports = []
        self.updates = []
        self.binding_calls = 0
        self.down = None
        self.bindings = []

    def report_data(self, context, host, report):
        self.reports.append(report)
        return {'writes': 1}

    def device_health_update(self, context, host, updates):
        if self.down:
            raise self.down
        self.updates.append((host, updates))
        return len(updates)

    def host_bindings(self, context, host):
        self.binding_calls += 1
        return self.bindings


class Sick(fake.FakeDriver):
    """The fake driver, with the health and usage a test sets."""

    driver_name = 'sick'
    readings: dict[str, Health] = {}
    broken = ''

    def health(self, device):
        if self.broken:
            raise OSError(self.broken)
        slot = '{bus}'.format(**device.controlpath_id)
        return self.readings.get(slot, Health('healthy'))

    def usage(self, device):
        return Usage(temperature_celsius=41.0, counters={'aer_fatal': 0})


class Silent(fake.FakeDriver):
    driver_name = 'silent'

    def health(self, device):
        return None


class Sink:
    def __init__(self):
        self.passes = []

    def update(self, samples):
        self.passes.append(samples)


class Notifier:
    enabled = True

    def __init__(self):
        self.sent = []

    def device_usage(self, context, host, samples):
        self.sent.append((host, samples))



@pytest.fixture
def agent(conf):
    conf.set_override('host', 'cmp1')
    conf.set_override('device_count', 2, 'fake_driver')
    Sick.readings = {}
    Sick.broken = ''
    conductor = Conductor()
    tracker = resource_tracker.ResourceTracker(conf, [Sick(conf)],
                                               conductor)
    tracker.update()
    sink, notifier, clock = Sink(), Notifier(), Clock()
    monitor = health.HealthMonitor(conf, tracker, conductor, metrics=sink,
                                   notifier=notifier, clock=clock)
    return monitor, tracker, conductor, sink, notifier, clock


def test_first_pass_sends_all_then_only_changes(agent):
    monitor, tracker, conductor, *_ = agent
    monitor.run()
    (host, updates), = conductor.updates
    assert host == 'cmp1'
    assert [u['state'] for u in updates] == ['healthy', 'healthy']
    assert updates[0]['controlpath_id']['cpid_type'] == 'PCI'
    monitor.run()
    assert len(conductor.updates) == 1
    Sick.readings = {'0d': Health('unhealthy', 'AER: 1 fatal error')}
    monitor.run()
    (_, updates), = conductor.updates[1:]
    sick = {'domain': '0000', 'bus': '0d', 'device': '00', 'function': '0'}
    assert updates == [{
        'controlpath_id': {'cpid_type': 'PCI', 'cpid_info': sick},
        'state': 'unhealthy', 'reason': 'AER: 1 fatal error'}]


def test_accepted_report_sends_everything_again(agent):
    monitor, tracker, conductor, *_ = agent
    monitor.run()
    tracker.update(force=True)
    monitor.run()
    assert [len(u) for _, u in conductor.updates] == [2, 2]


def test_unsent_changes_are_sent_by_the_next_pass(agent, caplog):
    monitor, tracker, conductor, *_ = agent
    conductor.down = TimeoutError('no conductor answered')
    monitor.run()
    monitor.run()
    assert conductor.updates == []
    assert caplog.text.count('No conductor took') == 1
    conductor.down = None
    monitor.run()
    assert len(conductor.updates) == 1


def test_failing_read_is_unknown_and_logged_once(agent, caplog):
    monitor, tracker, conductor, sink, *_ = agent
    Sick.broken = 'aer_dev_fatal: Input/output error'
    samples = monitor.run()
    monitor.run()
    assert {s.health.state for s in samples} == {'unknown'}
    assert 'Input/output error' in samples[0].health.reason
    assert samples[0].usage is None
    assert caplog.text.count('could not read the health') == 2


def test_driver_without_health_is_unknown(conf):
    conf.set_override('host', 'cmp1')
    conductor = Conductor()
    tracker = resource_tracker.ResourceTracker(conf, [Silent(conf)],
                                               conductor)
    tracker.update()
    monitor = health.HealthMonitor(conf, tracker, conductor)
    (sample,) = monitor.run()
    assert sample.health == Health(
        'unknown', 'driver silent does not read device health')
    # No metrics and no notifications: nobody asks who holds devices.
    assert conductor.binding_calls == 0


def test_samples_get_labels_and_go_to_metrics_and_notifications(agent):
    monitor, tracker, conductor, sink, notifier, clock = agent
    first = tracker.discovered['sick'][0]
    conductor.bindings = [{
        'uuid': 'd0', 'controlpath_id': {'cpid_type': 'PCI',
                                         'cpid_info': first.controlpath_id},
        'instances': ['i1'], 'projects': ['p1']}]
    samples = monitor.run()
    assert (samples[0].device_uuid, samples[0].instances,
            samples[0].projects) == ('d0', ['i1'], ['p1'])
    assert samples[1].device_uuid is None
    assert samples[0].address == '0000:0c:00.0'
    assert samples[0].usage.temperature_celsius == 41.0
    assert sink.passes == [samples]
    assert notifier.sent == [('cmp1', samples)]
    # Who holds what is looked up once a minute, not at every pass.
    monitor.run()
    assert conductor.binding_calls == 1
    clock.now += health.BINDINGS_INTERVAL
    monitor.run()
    assert conductor.binding_calls == 2


def test_usage_is_sampled_every_usage_interval(agent, conf):
    monitor, tracker, conductor, sink, notifier, clock = agent
    conf.set_override('usage_interval', 10, 'agent')
    reads = []
    real_usage = Sick.usage

    def counted(self, device):
        reads.append(device)
        return real_usage(self, device)

    Sick.usage = counted
    try:
        monitor.run()
        clock.now += 9
        samples = monitor.run()
        # The metrics keep showing the last sample in between.
        assert samples[0].usage.temperature_celsius == 41.0
        assert (len(reads), len(notifier.sent), len(sink.passes)) == (
            2, 1, 2)
        clock.now += 1
        monitor.run()
        assert (len(reads), len(notifier.sent)) == (4, 2)
    finally:
        Sick.usage = real_usage


def test_older_conductors_are_asked_again_minutes_later(agent, caplog):
    monitor, tracker, conductor, sink, notifier, clock = agent
    conductor.down = messaging.RemoteError(
        'UnsupportedVersion', 'Endpoint does not support RPC version 1.8')
    monitor.run()
    conductor.down = None
    clock.now += health.OLDER_CONDUCTOR_WAIT - 1
    monitor.run()
    assert conductor.updates == []
    assert 'conductors before RPC 1.8' in caplog.text
    clock.now += 1
    monitor.run()
    assert len(conductor.updates) == 1
