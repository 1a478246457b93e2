"""attach and detach of some requests of a running instance: the libvirt
calls, their rollback, and the device halves, against a domain that
records what it is asked (the XML read back by Nova's own classes)."""
import json
import subprocess
import sys
from xml.etree import ElementTree

import pytest

from cyborg import os_acc
from cyborg.os_acc import base
from cyborg.os_acc import exception
from cyborg.os_acc import manager
from cyborg.os_acc import objects
from cyborg.os_acc.drivers import fake_pci
from cyborg.os_acc.drivers import mdev
from cyborg.os_acc.drivers import pci
from cyborg.os_acc.plugins import libvirt
from cyborg.tests import conftest
from cyborg.tests.harness.sysfs import SysfsTree
from cyborg.tests.unit.os_acc import fakes

VFS = ['0000:af:01.0', '0000:af:01.1', '0000:af:01.2']
GPU = '0000:3b:00.0'
INSTANCE = objects.InstanceInfo(fakes.INSTANCE, 'vm1')
BOTH = libvirt.AFFECT_LIVE | libvirt.AFFECT_CONFIG


class RecordingDomain:
    """A running libvirt domain: ``calls`` holds (method, xml, flags);
    ``refuse`` holds XML fragments whose attach or detach fails as
    libvirt fails it; ``keep`` those a guest OS does not let go."""

    def __init__(self):
        self.calls = []
        self.devices = []
        self.refuse = set()
        self.keep = set()

    def _refused(self, xml):
        return any(part in xml for part in self.refuse)

    def attachDeviceFlags(self, xml, flags=0):
        self.calls.append(('attach', xml, flags))
        if self._refused(xml):
            raise RuntimeError("unsupported configuration: host doesn't "
                               'support passthrough of host PCI devices')
        self.devices.append(xml)
        return 0

    def detachDeviceFlags(self, xml, flags=0):
        self.calls.append(('detach', xml, flags))
        if self._refused(xml):
            raise RuntimeError('device not found')
        if not any(part in xml for part in self.keep):
            self.devices.remove(xml)
        return 0

    def XMLDesc(self, flags=0):
        return (f'<domain><name>vm1</name><devices>'
                f'{"".join(self.devices)}</devices></domain>')


@pytest.fixture
def kernel(tmp_path):
    tree = SysfsTree(tmp_path)
    tree.add_function('0000:af:00.0', 0x8086, 0x1593, 0x020000,
                      driver='ice')
    tree.add_vfs('0000:af:00.0', VFS, 0x8086, 0x1889, driver='iavf')
    tree.add_function(GPU, 0x10de, 0x1eb8, 0x030200, driver='nvidia')
    tree.add_mdev_type(GPU, 'nvidia-223', 'GRID T4-2B', 8)
    kernel = fakes.FakeKernel(tree)
    kernel.load_driver('vfio-pci')
    return kernel


@pytest.fixture
def host(kernel):
    return manager.Manager([pci.PciDriver(kernel), mdev.MdevDriver(kernel),
                            fake_pci.FakePciDriver(kernel)],
                           [libvirt.LibvirtPlugin()])


def _unmanaged(address):
    request = fakes.arq('PCI', address=address)
    request['attach_handle_info']['managed'] = 'false'
    return request


def _vgpu():
    return fakes.arq('MDEV', info={'domain': '0000', 'bus': '3b',
                                   'device': '00', 'function': '0',
                                   'asked_type': 'nvidia-223'})


def _driver(kernel, address):
    return kernel.link_name(f'/sys/bus/pci/devices/{address}/driver')


def _source(xml):
    return ElementTree.fromstring(xml).find('source/address').attrib


def test_attach_and_detach(host, kernel):
    domain = RecordingDomain()
    vgpu = _vgpu()
    vans = host.attach(INSTANCE, [_unmanaged(VFS[0]), vgpu], 'libvirt',
                       domain)
    assert [(call, flags) for call, _, flags in domain.calls] == [
        ('attach', BOTH), ('attach', BOTH)]
    assert [v.config for v in vans] == [xml for _, xml, _ in domain.calls]
    assert _source(vans[0].config) == {'domain': '0x0000', 'bus': '0xaf',
                                       'slot': '0x01', 'function': '0x0'}
    assert _source(vans[1].config) == {
        'uuid': vgpu['attach_handle_uuid'].lower()}
    assert {v.device_state for v in vans} == {objects.DeviceState.PLUGGED}
    assert _driver(kernel, VFS[0]) == 'vfio-pci'
    host.detach(INSTANCE, vans, 'libvirt', domain)
    # Newest first, each with the XML it was attached with.
    assert domain.calls[2:] == [('detach', vans[1].config, BOTH),
                                ('detach', vans[0].config, BOTH)]
    assert domain.devices == []
    assert {v.device_state for v in vans} == {objects.DeviceState.RELEASED}
    assert _driver(kernel, VFS[0]) == 'iavf'
    assert not kernel.exists(
        f'/sys/bus/mdev/devices/{vgpu["attach_handle_uuid"].lower()}')


def test_a_failed_attach_detaches_what_the_call_attached(host, kernel):
    domain = RecordingDomain()
    earlier = host.attach(INSTANCE, [fakes.arq('PCI', address=VFS[2])],
                          'libvirt', domain)
    first, second = _unmanaged(VFS[0]), _unmanaged(VFS[1])
    domain.refuse.add("bus='0xaf' slot='0x01' function='0x1'")
    domain.refuse.add('bus="0xaf" slot="0x01" function="0x1"')
    with pytest.raises(exception.AttachFailed) as caught:
        host.attach(INSTANCE, [first, second], 'libvirt', domain)
    assert caught.value.arq == second['uuid']
    assert str(caught.value) == (
        f'Attaching accelerator request {second["uuid"]} to running '
        f'instance {fakes.INSTANCE} failed at the live attach (plugin '
        "libvirt): unsupported configuration: host doesn't support "
        'passthrough of host PCI devices. Everything this attach had done '
        'was undone.')
    calls = [(call, _source(xml)['function']) for call, xml, _ in
             domain.calls[1:]]
    assert calls == [('attach', '0x0'), ('attach', '0x1'),
                     ('detach', '0x0')]
    # What was there before the call stays; the call's functions are
    # back with their host driver.
    assert domain.devices == [earlier[0].config]
    assert [_driver(kernel, a) for a in VFS[:2]] == ['iavf', 'iavf']


def test_a_device_the_guest_keeps_in_a_rollback_is_named(host, kernel):
    domain = RecordingDomain()
    domain.keep.add('function="0x0"')
    domain.refuse.add('function="0x1"')
    first, second = _unmanaged(VFS[0]), _unmanaged(VFS[1])
    with pytest.raises(exception.AttachFailed) as caught:
        host.attach(INSTANCE, [first, second], 'libvirt', domain)
    assert str(caught.value).endswith(
        f'was undone, except for {first["uuid"]} (still attached: instance '
        f'{fakes.INSTANCE} has not released the device yet (its guest OS '
        'must accept the unplug); detach it again later).')
    # Still in the guest, so still on vfio-pci; the other given back.
    assert [_driver(kernel, a) for a in VFS[:2]] == ['vfio-pci', 'iavf']


def test_a_device_half_failure_attaches_nothing(host, kernel):
    domain = RecordingDomain()
    kernel.refuse['/sys/bus/pci/drivers_probe'] = 19
    with pytest.raises(exception.AttachFailed) as caught:
        host.attach(INSTANCE, [fakes.arq('PCI', address=VFS[2]),
                               _unmanaged(VFS[0])], 'libvirt', domain)
    assert 'failed at the device half (driver pci)' in str(caught.value)
    assert domain.calls == []
    assert _driver(kernel, VFS[0]) == 'iavf'


def test_detach_of_requests_whose_vans_were_not_kept(host, kernel):
    domain = RecordingDomain()
    arqs = [fakes.arq('PCI', address=VFS[2]), fakes.arq('TEST_PCI')]
    host.attach(INSTANCE, arqs[:1], 'libvirt', domain)
    host.detach(INSTANCE, arqs, 'libvirt', domain)
    assert domain.devices == []
    # TEST_PCI has nothing in the guest to detach.
    assert [call for call, _, _ in domain.calls] == ['attach', 'detach']
    assert domain.calls[0][1] == domain.calls[1][1]


def test_detach_tries_every_device_and_names_those_kept(host, kernel):
    domain = RecordingDomain()
    vans = host.attach(INSTANCE, [_unmanaged(VFS[0]), _unmanaged(VFS[1])],
                       'libvirt', domain)
    domain.keep.add('function="0x0"')
    with pytest.raises(exception.DetachFailed) as caught:
        host.detach(INSTANCE, vans, 'libvirt', domain)
    assert str(caught.value).startswith(
        f'Detaching accelerator request(s) {vans[0].arq_uuid} from running '
        f'instance {fakes.INSTANCE} failed: {vans[0].arq_uuid}: still '
        'attached: ')
    assert [v.device_state for v in vans] == [
        objects.DeviceState.PLUGGED, objects.DeviceState.RELEASED]
    assert [_driver(kernel, a) for a in VFS[:2]] == ['vfio-pci', 'iavf']
    # Once the guest lets go, detaching again finishes it.
    domain.keep.clear()
    host.detach(INSTANCE, vans, 'libvirt', domain)
    assert domain.devices == []
    assert _driver(kernel, VFS[0]) == 'iavf'


def test_attach_checks_everything_first(host):
    domain = RecordingDomain()
    with pytest.raises(exception.InvalidARQ):
        host.attach(INSTANCE, [fakes.arq('PCI', address=VFS[0]),
                               fakes.arq('PCI', state='Unbound')],
                    'libvirt', domain)
    with pytest.raises(TypeError, match='not a libvirt virDomain'):
        host.attach(INSTANCE, [fakes.arq('PCI', address=VFS[0])],
                    'libvirt', object())
    with pytest.raises(exception.InvalidVAN):
        host.detach(INSTANCE, [objects.VAN(
            arq_uuid='a', instance_uuid='other', attach_handle_type='PCI',
            attach_handle_uuid=None, attach_handle_info={}, driver='pci')],
            'libvirt', domain)
    assert domain.calls == []


class BootOnly(base.InstancePlugin):
    """A hypervisor whose devices are given at boot only."""

    name = 'boot_only'
    attach_handle_types = frozenset({'PCI'})

    def plug(self, instance, van):
        return 'config'


def test_a_plugin_without_live_attach_is_refused(kernel):
    host = manager.Manager([pci.PciDriver(kernel)], [BootOnly()])
    with pytest.raises(exception.NotLive, match='boot_only cannot attach'):
        host.attach(INSTANCE, [fakes.arq('PCI', address=VFS[0])],
                    'boot_only', RecordingDomain())
    vans = host.plug(INSTANCE, [fakes.arq('PCI', address=VFS[0])],
                     'boot_only')
    with pytest.raises(NotImplementedError):
        BootOnly().attach(INSTANCE, vans[0], RecordingDomain())


def test_public_attach_and_detach(kernel):
    os_acc.initialize(reset=True, sysfs_root=kernel.root,
                      drivers=['pci', 'test_pci'], plugins=['libvirt'])
    try:
        domain = RecordingDomain()
        vans = os_acc.attach(INSTANCE, [fakes.arq('PCI', address=VFS[2])],
                             guest=domain)
        assert [call for call, _, _ in domain.calls] == ['attach']
        # The VANs kept as JSON serve as well.
        kept = [objects.VAN.from_dict(json.loads(json.dumps(v.to_dict())))
                for v in vans]
        os_acc.detach(INSTANCE, kept, guest=domain)
        assert domain.devices == []
    finally:
        os_acc._manager = None


def test_in_domain():
    hostdev = libvirt.pci_hostdev(objects.PciAddress(0, 0xaf, 1, 0))
    live = ("<domain><devices><hostdev mode='subsystem' type='pci' "
            "managed='yes'><driver name='vfio'/><source><address "
            "domain='0x0000' bus='0xaf' slot='0x01' function='0x0'/>"
            "</source><alias name='hostdev0'/><address type='pci' "
            "domain='0x0000' bus='0x00' slot='0x05' function='0x0'/>"
            '</hostdev></devices></domain>')
    assert libvirt.in_domain(live, hostdev)
    assert not libvirt.in_domain(live, libvirt.pci_hostdev(
        objects.PciAddress(0, 0xaf, 1, 1)))
    assert not libvirt.in_domain(live, libvirt.mdev_hostdev(
        '0e2a6c4b-1b66-4f3e-9a55-5b9a5a3c2f10'))


_NOVA_READER = '''
import json, sys
from lxml import etree
from nova.virt.libvirt import config
out = []
for xml in json.load(sys.stdin):
    element = etree.fromstring(xml)
    dev = (config.LibvirtConfigGuestHostdevPCI()
           if element.get('type') == 'pci'
           else config.LibvirtConfigGuestHostdevMDEV())
    dev.parse_dom(element)
    out.append([dev.type, getattr(dev, 'function', None),
                getattr(dev, 'uuid', None)])
json.dump(out, sys.stdout)
'''


def test_nova_reads_what_the_domain_was_given(host):
    conftest.require_module('nova')
    domain = RecordingDomain()
    vgpu = _vgpu()
    host.attach(INSTANCE, [_unmanaged(VFS[1]), vgpu], 'libvirt', domain)
    done = subprocess.run(
        [sys.executable, '-c', _NOVA_READER], capture_output=True,
        text=True, timeout=120, check=True,
        input=json.dumps([xml for _, xml, _ in domain.calls]))
    assert json.loads(done.stdout) == [
        ['pci', '0x1', None],
        ['mdev', None, vgpu['attach_handle_uuid'].lower()]]
