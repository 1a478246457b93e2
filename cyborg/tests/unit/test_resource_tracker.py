"""When the agent reports, and when it must not."""
import pytest

from cyborg.accelerator.drivers import fake
from cyborg.agent import resource_tracker
from cyborg.common import device_report
from cyborg.common.device_report import DriverAttachHandle
from cyborg.common.device_report import DriverDeployable
from cyborg.common.device_report import DriverDevice
from cyborg.common.device_report import pci_address
from cyborg.tests.utils import Clock


class RecordingConductor:
    """Stands in for the conductor RPC client at the process edge."""

    def __init__(self):
        self.reports = []

    def report_data(self, context, host, report):
        self.reports.append((host, report))
        return {'writes': 0}



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


class FlakyDriver(fake.FakeDriver):
    """One GPU at 0000:81:00.0 while ``failure`` is None; raises it
    otherwise."""

    driver_name = 'flaky'

    def __init__(self, conf, failure=None):
        super().__init__(conf)
        self.failure = failure

    def discover(self):
        if self.failure is not None:
            raise self.failure
        return [DriverDevice(
            type='GPU', vendor='0x10de', model='0x1eb8',
            controlpath_id=pci_address('0000', '81', '00', '0'),
            deployables=[DriverDeployable(
                name='cmp1_0000:81:00.0', num_accelerators=1,
                driver_name=self.driver_name,
                attach_handles=[DriverAttachHandle(
                    'PCI', pci_address('0000', '81', '00', '0'))])])]


def _addresses(report):
    return sorted(d['controlpath_id']['cpid_info']['bus']
                  for d in report['devices'])


def test_failing_driver_keeps_its_last_devices(conf):
    conf.set_override('host', 'cmp1')
    conductor = RecordingConductor()
    flaky = FlakyDriver(conf)
    t = resource_tracker.ResourceTracker(
        conf, [fake.FakeDriver(conf), flaky], conductor)
    t.update()
    [(_, first)] = conductor.reports
    assert _addresses(first) == ['0c', '81']
    assert first['drivers'] == {'fake': {'state': 'ok'},
                                'flaky': {'state': 'ok'}}

    # The healthy driver finds another card while the other one fails:
    # the new card is reported, and so is the failing driver's GPU.
    conf.set_override('device_count', 2, 'fake_driver')
    flaky.failure = OSError('sysfs went away')
    assert t.update() is not None
    report = conductor.reports[-1][1]
    assert _addresses(report) == ['0c', '0d', '81']
    assert report['drivers'] == {
        'fake': {'state': 'ok'},
        'flaky': {'state': 'failed', 'error': 'OSError: sysfs went away'}}
    device_report.validate_report('cmp1', report)
    # Nothing changed: nothing sent.
    assert t.update() is None

    # Back: its own devices again, and ok.
    flaky.failure = None
    t.update()
    report = conductor.reports[-1][1]
    assert _addresses(report) == ['0c', '0d', '81']
    assert report['drivers']['flaky'] == {'state': 'ok'}


def test_driver_failing_from_the_start_contributes_nothing(conf):
    conductor = RecordingConductor()
    t = resource_tracker.ResourceTracker(
        conf, [fake.FakeDriver(conf), BrokenDriver(conf)], conductor)
    t.update()
    [(_, report)] = conductor.reports
    assert _addresses(report) == ['0c']
    assert report['drivers']['broken'] == {
        'state': 'failed', 'error': 'OSError: sysfs went away'}


def test_driver_without_devices(conf):
    conductor = RecordingConductor()
    conf.set_override('device_count', 0, 'fake_driver')
    t = resource_tracker.ResourceTracker(conf, [fake.FakeDriver(conf)],
                                         conductor)
    t.update()
    assert conductor.reports[0][1]['drivers'] == {
        'fake': {'state': 'no devices'}}


def test_long_errors_are_cut(conf):
    conductor = RecordingConductor()
    t = resource_tracker.ResourceTracker(
        conf, [FlakyDriver(conf, RuntimeError('x' * 10000))], conductor)
    t.update()
    error = conductor.reports[0][1]['drivers']['flaky']['error']
    assert len(error) == device_report.MAX_ERROR_LENGTH
    assert error.startswith('RuntimeError: xxx')


def test_hostname_defaults_to_host(conf, tracker):
    t, conductor, clock = tracker
    t.update()
    assert conductor.reports[0][1]['hostname'] == 'cmp1'
