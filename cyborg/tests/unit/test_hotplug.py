"""PCI hot-plug events: one report per burst, their source, and life
without one."""
import contextlib
import errno
import logging
import queue
import threading
import time

import pytest
import pyudev

from cyborg.accelerator.drivers import fake
from cyborg.agent import hotplug
from cyborg.agent import service as agent_service
from cyborg.common import rpc_service
from cyborg.tests.unit.test_agent_cache import path  # noqa: F401
from cyborg.tests.unit.test_agent_cache import stub_conductor  # noqa: F401

DEBOUNCE = 0.3


class Events:
    """A synthetic udev: events put here come out of the monitor's source."""

    def __init__(self):
        self.queue = queue.Queue()

    def __iter__(self):
        return iter(self.queue.get, None)

    def put(self, action, name='0000:3b:00.0'):
        self.queue.put((action, name))

    def close(self):
        self.queue.put(None)


class Counter:
    """A task body that counts its runs."""

    def __init__(self):
        self.runs = 0
        self.changed = threading.Condition()

    def __call__(self):
        with self.changed:
            self.runs += 1
            self.changed.notify_all()

    def wait_for(self, runs, timeout=5):
        with self.changed:
            assert self.changed.wait_for(lambda: self.runs >= runs, timeout), (
                f'{self.runs} run(s), not {runs}')


@pytest.fixture
def events():
    source = Events()
    yield source
    source.close()


@contextlib.contextmanager
def watching(trigger, events):
    """A started monitor on ``events``; the source ends before it stops."""
    monitor = hotplug.HotplugMonitor(trigger, DEBOUNCE, events=events)
    assert monitor.start() is True
    try:
        yield monitor
    finally:
        if isinstance(events, Events):
            events.close()
        monitor.stop()


@pytest.fixture
def report_task():
    """A report task like the agent's: runs at start, then on trigger."""
    counter = Counter()
    task = rpc_service.PeriodicTask('agent-report', counter, 3600)
    task.start()
    counter.wait_for(1)
    yield task, counter
    task.stop()


def test_a_burst_of_events_triggers_one_report(events, report_task):
    task, counter = report_task
    with watching(task.trigger, events):
        # Sixteen virtual functions appear and are bound to their driver.
        for vf in range(16):
            events.put('add', f'0000:3b:02.{vf}')
            events.put('bind', f'0000:3b:02.{vf}')
        counter.wait_for(2)
        time.sleep(DEBOUNCE * 3)
    assert counter.runs == 2


def test_events_apart_trigger_one_report_each(events):
    counter = Counter()
    with watching(counter, events):
        for n, action in enumerate(('remove', 'unbind', 'change'), 1):
            events.put(action)
            counter.wait_for(n)
            time.sleep(DEBOUNCE * 2)
            assert counter.runs == n


def test_the_report_waits_for_the_window_to_close(events):
    counter = Counter()
    with watching(counter, events):
        started = time.monotonic()
        events.put('add')
        counter.wait_for(1)
        assert time.monotonic() - started >= DEBOUNCE


def test_other_events_are_ignored(events):
    counter = Counter()
    with watching(counter, events):
        for action in ('online', 'offline', 'move', 'bogus'):
            events.put(action)
        time.sleep(DEBOUNCE * 3)
        assert counter.runs == 0
        events.put('add')
        counter.wait_for(1)


def test_a_failing_trigger_does_not_stop_the_monitor(events, caplog):
    counter = Counter()
    calls = []

    def trigger():
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError('task gone')
        counter()

    with watching(trigger, events):
        with caplog.at_level(logging.ERROR):
            events.put('add')
            time.sleep(DEBOUNCE * 3)
        assert 'task gone' in caplog.text
        events.put('add')
        counter.wait_for(1)


@pytest.fixture(params=[True, False], ids=['udevd', 'no-udevd'])
def udevd(request, monkeypatch, tmp_path):
    """Whether udevd runs here, as its control socket tells."""
    if request.param:
        (tmp_path / 'control').touch()
    monkeypatch.setattr(pyudev.Context, 'run_path',
                        property(lambda self: str(tmp_path)))
    return request.param


@pytest.fixture
def netlink(monkeypatch):
    """Records the sources opened; those in ``failing`` raise EPERM."""
    real = pyudev.Monitor.from_netlink

    class Netlink:
        opened = []
        failing = set()

    def from_netlink(context, source='udev'):
        Netlink.opened.append(source)
        if source in Netlink.failing:
            raise OSError(errno.EPERM, 'Operation not permitted')
        return real(context, source=source)

    monkeypatch.setattr(pyudev.Monitor, 'from_netlink', from_netlink)
    return Netlink


def test_the_source_is_udevd_where_it_runs_else_the_kernel(
        udevd, netlink, caplog):
    monitor = hotplug.HotplugMonitor(lambda: None, DEBOUNCE)
    with caplog.at_level(logging.DEBUG, logger=hotplug.__name__):
        assert monitor.start() is True
    monitor.stop()
    if udevd:
        assert netlink.opened == ['udev']
        assert "Watching udevd's PCI events" in caplog.text
    else:
        assert netlink.opened == ['kernel']
        info = [r.getMessage() for r in caplog.records
                if r.levelno == logging.INFO]
        assert len(info) == 1
        assert 'udevd does not run here' in info[0]
        assert "kernel's PCI uevents" in info[0]
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


@pytest.mark.parametrize('udevd', [True], indirect=True, ids=['udevd'])
def test_the_kernel_serves_when_udevds_socket_fails(udevd, netlink, caplog):
    netlink.failing.add('udev')
    monitor = hotplug.HotplugMonitor(lambda: None, DEBOUNCE)
    with caplog.at_level(logging.INFO, logger=hotplug.__name__):
        assert monitor.start() is True
    monitor.stop()
    assert netlink.opened == ['udev', 'kernel']
    [info] = caplog.records
    assert info.levelno == logging.INFO
    assert "kernel's PCI uevents" in info.getMessage()
    assert 'udev: PermissionError' in info.getMessage()


def test_when_no_source_opens_the_monitor_warns_once(udevd, netlink,
                                                     caplog):
    netlink.failing.update(('udev', 'kernel'))
    counter = Counter()
    monitor = hotplug.HotplugMonitor(counter, DEBOUNCE)
    with caplog.at_level(logging.INFO, logger=hotplug.__name__):
        assert monitor.start() is False
    monitor.stop()
    assert netlink.opened == (['udev', 'kernel'] if udevd else ['kernel'])
    [warning] = caplog.records
    assert warning.levelno == logging.WARNING
    message = warning.getMessage()
    assert 'periodic discovery pass' in message
    for source in netlink.opened:
        assert f'{source}: PermissionError: [Errno 1]' in message
    assert counter.runs == 0


@pytest.mark.parametrize('where, error', [
    ('from_netlink', OSError(errno.EPERM, 'Operation not permitted')),
    ('from_netlink', OSError(errno.EPROTONOSUPPORT,
                             'Protocol not supported')),
    ('context', ImportError('Unable to find libudev')),
], ids=['no-permission', 'no-netlink', 'no-libudev'])
def test_without_udev_the_monitor_warns_once(monkeypatch, caplog, udevd,
                                             where, error):
    def fail(*args, **kwargs):
        raise error

    if where == 'context':
        monkeypatch.setattr(pyudev, 'Context', fail)
    else:
        monkeypatch.setattr(pyudev.Monitor, 'from_netlink', fail)
    counter = Counter()
    monitor = hotplug.HotplugMonitor(counter, DEBOUNCE)
    with caplog.at_level(logging.WARNING):
        assert monitor.start() is False
    monitor.stop()
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1
    assert 'periodic discovery pass' in warnings[0].getMessage()
    assert str(error) in warnings[0].getMessage()
    assert counter.runs == 0


def test_a_source_that_breaks_ends_with_a_warning(caplog):
    def broken():
        yield 'add', 'x'
        raise OSError(errno.ENOBUFS, 'No buffer space available')

    counter = Counter()
    with caplog.at_level(logging.WARNING), watching(counter, broken()):
        # The event read before the failure still counts.
        counter.wait_for(1)
    assert 'Stopped watching PCI hot-plug events' in caplog.text


def test_the_udev_monitor_starts_and_stops(caplog):
    """On this machine's real udev socket, when it has one."""
    monitor = hotplug.HotplugMonitor(lambda: None, DEBOUNCE)
    with caplog.at_level(logging.WARNING):
        watching = monitor.start()
    assert watching or 'not available' in caplog.text
    started = time.monotonic()
    monitor.stop()
    assert time.monotonic() - started < 3


def test_the_agent_reports_a_hotplugged_device_at_once(
        conf, path, stub_conductor, events):  # noqa: F811
    conf.set_override('periodic_interval', 3600, 'agent')
    conf.set_override('hotplug_debounce', DEBOUNCE, 'agent')
    driver = fake.FakeDriver(conf)
    stub_conductor.driver = driver
    svc = agent_service.build(conf, loaded=[driver], hotplug_events=events)
    svc.start()
    try:
        stub_conductor.wait_for(1)
        conf.set_override('device_count', 2, 'fake_driver')
        events.put('add')
        events.put('bind')
        stub_conductor.wait_for(2, timeout=DEBOUNCE + 5)
    finally:
        events.close()
        svc.stop()
    assert [sum(d['type'] == 'FPGA' for d in r['devices'])
            for r in stub_conductor.reports] == [1, 2]


def test_hotplug_can_be_turned_off(conf, path, stub_conductor):  # noqa: F811
    conf.set_override('hotplug', False, 'agent')
    svc = agent_service.build(conf, loaded=[fake.FakeDriver(conf)])
    assert svc.monitor is None
