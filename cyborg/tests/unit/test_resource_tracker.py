"""When the agent reports, and when it must not."""
import pytest

from cyborg.accelerator.drivers import fake
from cyborg.agent import resource_tracker
from cyborg.common import exception


class RecordingConductor:
    """Stands in for the conductor RPC client at the process edge."""

    def __init__(self):
        self.reports = []

    def report_data(self, context, host, report):
        self.reports.append((host, report))
        return {'writes': 0}


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


class BrokenDriver(fake.FakeDriver):
    driver_name = 'broken'

    def discover(self):
        raise OSError('sysfs went away')


@pytest.fixture
def tracker(conf):
    conf.set_override('host', 'cmp1')
    conf.set_override('full_report_interval', 600, 'agent')
    conductor = RecordingConductor()
    clock = Clock()
    t = resource_tracker.ResourceTracker(conf, [fake.FakeDriver(conf)],
                                         conductor, clock=clock)
    return t, conductor, clock


def test_first_pass_reports_then_only_changes(conf, tracker):
    t, conductor, clock = tracker
    assert t.update() == {'writes': 0}
    assert t.update() is None
    clock.now += 599
    assert t.update() is None
    conf.set_override('device_count', 2, 'fake_driver')
    t.update()
    assert len(conductor.reports) == 2
    assert len(conductor.reports[1][1]['devices']) == 2
    assert conductor.reports[1][0] == 'cmp1'


def test_full_report_after_interval(tracker):
    t, conductor, clock = tracker
    t.update()
    clock.now += 600
    assert t.update() is not None
    assert t.update() is None
    assert len(conductor.reports) == 2


def test_full_reports_can_be_disabled(conf, tracker):
    t, conductor, clock = tracker
    conf.set_override('full_report_interval', 0, 'agent')
    t.update()
    clock.now += 10 ** 6
    assert t.update() is None
    assert len(conductor.reports) == 1


def test_failed_send_is_retried(tracker):
    t, conductor, clock = tracker

    def fail(*args):
        raise TimeoutError('conductor unreachable')

    t.conductor_api.report_data, original = fail, conductor.report_data
    with pytest.raises(TimeoutError):
        t.update()
    t.conductor_api.report_data = original
    assert t.update() is not None


def test_failing_driver_sends_nothing(conf):
    conductor = RecordingConductor()
    t = resource_tracker.ResourceTracker(
        conf, [fake.FakeDriver(conf), BrokenDriver(conf)], conductor)
    with pytest.raises(exception.DriverError) as err:
        t.update()
    assert 'broken' in str(err.value) and 'sysfs went away' in str(err.value)
    assert conductor.reports == []


def test_hostname_defaults_to_host(conf, tracker):
    t, conductor, clock = tracker
    t.update()
    assert conductor.reports[0][1]['hostname'] == 'cmp1'
