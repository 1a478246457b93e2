"""PCI hot-plug on this machine's real bus: a uevent makes the agent report.

Writing ``change`` to a PCI device's ``uevent`` file in sysfs makes the
kernel send that device's uevent again, as it does when a device appears;
with udevd running, udevd passes it on after its rules. The tests need a
PCI device and permission to write the file (root, sysfs mounted
read-write), and skip otherwise.
"""
import glob
import os
import threading

import pytest
import pyudev

from cyborg.accelerator.drivers import fake
from cyborg.agent import hotplug
from cyborg.agent import service as agent_service
from cyborg.tests.unit.test_agent_cache import path  # noqa: F401
from cyborg.tests.unit.test_agent_cache import stub_conductor  # noqa: F401

DEBOUNCE = 0.2
# The debounce window, and the rest for the report to go through RPC.
WAIT = 2


@pytest.fixture
def pci_uevent():
    """Sends a ``change`` uevent for a real PCI device when called."""
    files = sorted(glob.glob('/sys/bus/pci/devices/*/uevent'))
    if not files:
        pytest.skip('no PCI device in /sys/bus/pci/devices')
    if not os.access(files[0], os.W_OK):
        pytest.skip(f'{files[0]} is not writable')

    def send(uevent=files[0]):
        try:
            with open(uevent, 'w') as f:
                f.write('change')
        except OSError as exc:
            pytest.skip(f'cannot write {uevent}: {exc}')

    return send


# Devices outside the PCI bus whose uevent nothing acts on.
OTHER_UEVENTS = ('/sys/class/mem/null/uevent', '/sys/class/mem/zero/uevent')


def test_a_pci_uevent_runs_the_trigger(pci_uevent):
    triggered = threading.Event()
    monitor = hotplug.HotplugMonitor(triggered.set, DEBOUNCE)
    assert monitor.start() is True
    try:
        pci_uevent()
        assert triggered.wait(WAIT), 'no trigger after a PCI uevent'
    finally:
        monitor.stop()


def test_the_kernel_source_yields_pci_events_only(pci_uevent):
    """libudev's socket filter cannot read kernel uevents, so it lets them
    all through; what comes out must still be PCI only."""
    others = [p for p in OTHER_UEVENTS if os.access(p, os.W_OK)]
    if not others:
        pytest.skip('no writable uevent file outside the PCI bus')
    stopping = threading.Event()
    events = hotplug.listen(pyudev.Context(), 'kernel', stopping)
    # Ends the source, should nothing come.
    timer = threading.Timer(WAIT, stopping.set)
    timer.start()
    try:
        for uevent in others:
            with open(uevent, 'w') as f:
                f.write('change')
        pci_uevent()
        event = next(events, None)
    finally:
        timer.cancel()
        stopping.set()
    assert event is not None, 'no event after a PCI uevent'
    action, device = event
    assert (action, device.subsystem) == ('change', 'pci')


def test_a_pci_uevent_makes_the_agent_report(
        conf, path, stub_conductor, pci_uevent):  # noqa: F811
    """The whole path: uevent, monitor, report task, tracker, RPC."""
    conf.set_override('periodic_interval', 3600, 'agent')
    conf.set_override('hotplug_debounce', DEBOUNCE, 'agent')
    driver = fake.FakeDriver(conf)
    stub_conductor.driver = driver
    svc = agent_service.build(conf, loaded=[driver])
    svc.start()
    try:
        stub_conductor.wait_for(1)
        # A device appeared: only a hot-plug pass reports it before the
        # next periodic pass, an hour away.
        conf.set_override('device_count', 2, 'fake_driver')
        pci_uevent()
        stub_conductor.wait_for(2, timeout=WAIT)
    finally:
        svc.stop()
    assert [sum(d['type'] == 'FPGA' for d in r['devices'])
            for r in stub_conductor.reports] == [1, 2]
