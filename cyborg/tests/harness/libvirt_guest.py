"""A tiny diskless QEMU guest under TCG on a real libvirt daemon, and a
libvirt plugin that gives it TEST_PCI requests as emulated USB tablets.

There is no PCI device to pass through here, so the requests that must
attach are TEST_PCI ones given as USB tablets (each at a USB port of its
own), which QEMU adds and removes without the guest's help; a PCI request
makes the real hostdev XML, which libvirt refuses without VFIO. Debian's
libvirt and QEMU and libvirt-python are installed if missing
(``system_packages``), and the daemon started if it is not running
(``libvirtd``, as root); where that cannot be done the test is skipped,
or fails under CYBORG_TEST_REQUIRE_SERVICES=1. Test modules import the
``connection`` and ``domain`` fixtures.
"""
import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from cyborg.os_acc import objects
from cyborg.os_acc.plugins import libvirt as libvirt_plugin
from cyborg.tests.conftest import unavailable
from cyborg.tests.harness import system_packages

URI = 'qemu:///system'
QEMU = '/usr/bin/qemu-system-x86_64'
# Tries, a second apart, for a daemon started here to answer.
START_TRIES = 30
# USB ports of the guest's controller, so tablets at once.
USB_PORTS = 8
# XMLDesc's VIR_DOMAIN_XML_INACTIVE: the persistent definition.
INACTIVE = 2

# Debian's libvirt and QEMU, and what building libvirt-python needs.
PACKAGES = ('libvirt-daemon-system', 'libvirt-daemon-driver-qemu',
            'qemu-system-x86', 'pkg-config', 'libvirt-dev', 'gcc')


def _open(libvirt: Any) -> Any:
    try:
        return libvirt.open(URI)
    except libvirt.libvirtError:
        return None


@pytest.fixture(scope='module')
def connection() -> Iterator[Any]:
    system_packages.debian(*PACKAGES)
    system_packages.python('libvirt', 'libvirt-python>=9.0.0')
    import libvirt
    conn = _open(libvirt)
    if conn is None:
        daemon = shutil.which('libvirtd')
        if daemon is None or not os.path.exists(QEMU) or os.geteuid() != 0:
            unavailable('libvirtd with QEMU', 'libvirtd or '
                        f'{QEMU} is not installed, or not root')
        for directory in ('/var/log/libvirt', '/run/libvirt'):
            os.makedirs(directory, exist_ok=True)
        subprocess.run(['virtlogd', '--daemon'], check=False)
        subprocess.run([daemon, '--daemon'], check=False)
        for _ in range(START_TRIES):
            conn = _open(libvirt)
            if conn is not None:
                break
            subprocess.run(['sleep', '1'], check=True)
        if conn is None:
            unavailable('libvirtd', f'it did not answer on {URI}')
    # A libvirtd started here is left running for the next module and
    # run: stopped at one module's end and started again for the next,
    # its connections were lost mid-call ("End of file while reading
    # data").
    try:
        yield conn
    finally:
        conn.close()


@pytest.fixture
def domain(connection) -> Iterator[Any]:
    """A persistent guest with no disk, booting nothing, under TCG."""
    instance = str(uuid.uuid4())
    guest = connection.defineXML(
        f"<domain type='qemu'><name>cyborg-test-{instance[:8]}</name>"
        f"<uuid>{instance}</uuid><memory unit='MiB'>64</memory>"
        "<vcpu>1</vcpu><os><type arch='x86_64' machine='pc'>hvm</type>"
        f"</os><devices><emulator>{QEMU}</emulator>"
        f"<controller type='usb' model='qemu-xhci' ports='{USB_PORTS}'/>"
        "</devices></domain>")
    try:
        guest.create()
        yield guest
    finally:
        if guest.isActive():
            guest.destroy()
        guest.undefine()


class EmulatedPlugin(libvirt_plugin.LibvirtPlugin):
    """libvirt, giving each TEST_PCI request as a USB tablet at a port of
    its own: the first request it sees at port 1, the next at 2, and so
    on."""

    def __init__(self) -> None:
        super().__init__()
        self.requests: list[str] = []

    def port(self, arq_uuid: str) -> int:
        if arq_uuid not in self.requests:
            self.requests.append(arq_uuid)
        return self.requests.index(arq_uuid) + 1

    def plug(self, instance: objects.Instance,
             van: objects.VAN) -> str | None:
        if van.attach_handle_type == 'TEST_PCI':
            return (f"<input type='tablet' bus='usb'><address type='usb' "
                    f"bus='0' port='{self.port(van.arq_uuid)}'/></input>")
        return super().plug(instance, van)

    def tablets(self, domain: Any, flags: int = 0) -> set[str]:
        """The requests of the guest's tablets: running, or (flags
        INACTIVE) as defined."""
        xml = domain.XMLDesc(flags)
        return {arq for arq in self.requests
                if f"port='{self.port(arq)}'" in xml}
