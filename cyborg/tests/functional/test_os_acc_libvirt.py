"""os-acc's live attach and detach against a real libvirt daemon running a
tiny diskless QEMU guest under TCG.

There is no PCI device to pass through here, so the requests that must
attach are TEST_PCI ones given as emulated USB tablets (each at a USB
port of its own), which QEMU adds and removes without the guest's help; a PCI
request makes the real hostdev XML, which libvirt refuses without VFIO:
that real failure drives the rollback. Debian's libvirt and QEMU and
libvirt-python are installed if missing (``system_packages``), and the
daemon started if it is not running (``libvirtd``, as root); where that
cannot be done the test is skipped, or fails under
CYBORG_TEST_REQUIRE_SERVICES=1.
"""
import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from cyborg.os_acc import exception
from cyborg.os_acc import manager
from cyborg.os_acc import objects
from cyborg.os_acc.drivers import fake_pci
from cyborg.os_acc.drivers import pci
from cyborg.os_acc.plugins import libvirt as libvirt_plugin
from cyborg.tests import system_packages
from cyborg.tests.conftest import unavailable
from cyborg.tests.sysfs import SysfsTree
from cyborg.tests.unit.os_acc import fakes

URI = 'qemu:///system'
QEMU = '/usr/bin/qemu-system-x86_64'
VF = '0000:af:01.0'
# Tries, a second apart, for a daemon started here to answer.
START_TRIES = 30


def _open(libvirt: Any) -> Any:
    try:
        return libvirt.open(URI)
    except libvirt.libvirtError:
        return None


# Debian's libvirt and QEMU, and what building libvirt-python needs.
PACKAGES = ('libvirt-daemon-system', 'libvirt-daemon-driver-qemu',
            'qemu-system-x86', 'pkg-config', 'libvirt-dev', 'gcc')


@pytest.fixture(scope='module')
def connection() -> Iterator[Any]:
    system_packages.debian(*PACKAGES)
    system_packages.python('libvirt', 'libvirt-python>=9.0.0')
    import libvirt
    conn = _open(libvirt)
    started = None
    if conn is None:
        daemon = shutil.which('libvirtd')
        if daemon is None or not os.path.exists(QEMU) or os.geteuid() != 0:
            unavailable('libvirtd with QEMU', 'libvirtd or '
                        f'{QEMU} is not installed, or not root')
        for directory in ('/var/log/libvirt', '/run/libvirt'):
            os.makedirs(directory, exist_ok=True)
        subprocess.run(['virtlogd', '--daemon'], check=False)
        subprocess.run([daemon, '--daemon'], check=False)
        started = '/run/libvirtd.pid'
        for _ in range(START_TRIES):
            conn = _open(libvirt)
            if conn is not None:
                break
            subprocess.run(['sleep', '1'], check=True)
        if conn is None:
            unavailable('libvirtd', f'it did not answer on {URI}')
    try:
        yield conn
    finally:
        conn.close()
        if started and os.path.exists(started):
            with open(started) as pidfile:
                os.kill(int(pidfile.read().strip()), 15)


@pytest.fixture
def domain(connection) -> Iterator[Any]:
    """A persistent guest with no disk, booting nothing, under TCG."""
    instance = str(uuid.uuid4())
    guest = connection.defineXML(
        f"<domain type='qemu'><name>cyborg-test-{instance[:8]}</name>"
        f"<uuid>{instance}</uuid><memory unit='MiB'>64</memory>"
        "<vcpu>1</vcpu><os><type arch='x86_64' machine='pc'>hvm</type>"
        f"</os><devices><emulator>{QEMU}</emulator>"
        "<controller type='usb' model='qemu-xhci' ports='8'/>"
        "</devices></domain>")
    try:
        guest.create()
        yield guest
    finally:
        if guest.isActive():
            guest.destroy()
        guest.undefine()


class EmulatedPlugin(libvirt_plugin.LibvirtPlugin):
    """libvirt, giving each TEST_PCI request as a USB tablet at the port
    of its index in ``_ARQS``."""

    def plug(self, instance, van):
        if van.attach_handle_type == 'TEST_PCI':
            return (f"<input type='tablet' bus='usb'><address type='usb' "
                    f"bus='0' port='{_port(van.arq_uuid)}'/></input>")
        return super().plug(instance, van)


def _port(arq_uuid):
    return _ARQS.index(arq_uuid) + 1


@pytest.fixture
def host(tmp_path):
    tree = SysfsTree(tmp_path)
    tree.add_function('0000:af:00.0', 0x8086, 0x1593, 0x020000,
                      driver='ice')
    tree.add_vfs('0000:af:00.0', [VF], 0x8086, 0x1889, driver='iavf')
    kernel = fakes.FakeKernel(tree)
    return manager.Manager(
        [pci.PciDriver(kernel), fake_pci.FakePciDriver(kernel)],
        [EmulatedPlugin()])


def _tablets(domain, flags=0):
    """The requests of the guest's tablets: running, or (flags 2,
    VIR_DOMAIN_XML_INACTIVE) as defined."""
    xml = domain.XMLDesc(flags)
    return {arq for arq in _ARQS if f"port='{_port(arq)}'" in xml}


_ARQS: list[str] = []


def _arq(instance, handle_type='TEST_PCI', **fields):
    request = fakes.arq(handle_type, address=VF, instance_uuid=instance,
                        **fields)
    _ARQS.append(request['uuid'])
    return request


def test_attach_detach_and_rollback_on_a_running_guest(host, domain):
    instance = objects.InstanceInfo(domain.UUIDString())
    first, second = _arq(instance.uuid), _arq(instance.uuid)
    vans = host.attach(instance, [first, second], 'libvirt', domain)
    both = {first['uuid'], second['uuid']}
    assert _tablets(domain) == both
    assert _tablets(domain, 2) == both

    host.detach(instance, [vans[0]], 'libvirt', domain)
    assert _tablets(domain) == {second['uuid']}
    assert _tablets(domain, 2) == {second['uuid']}
    assert vans[0].device_state == objects.DeviceState.RELEASED

    # The tablet goes in, then libvirt refuses the PCI function for
    # real: the tablet is taken out again, live and from the definition.
    third = _arq(instance.uuid)
    function = _arq(instance.uuid, 'PCI')
    with pytest.raises(exception.AttachFailed) as caught:
        host.attach(instance, [third, function], 'libvirt', domain)
    assert caught.value.arq == function['uuid']
    message = str(caught.value)
    assert 'failed at the live attach (plugin libvirt)' in message
    assert message.endswith('Everything this attach had done was undone.')
    assert _tablets(domain) == {second['uuid']}
    assert _tablets(domain, 2) == {second['uuid']}

    # A request whose VAN was not kept is detached as well.
    host.detach(instance, [second], 'libvirt', domain)
    assert _tablets(domain) == set()
    assert _tablets(domain, 2) == set()
