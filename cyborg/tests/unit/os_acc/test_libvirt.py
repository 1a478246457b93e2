"""The libvirt plugin's ``<hostdev>`` elements, read back as Nova reads
them."""
import json
import subprocess
import sys
from xml.etree import ElementTree

from cyborg.os_acc import objects
from cyborg.os_acc.plugins import libvirt
from cyborg.tests import conftest
from cyborg.tests.unit.os_acc import fakes

MDEV_UUID = 'b2107403-110c-45b0-af87-7cc0d9f33a8d'
INSTANCE = objects.InstanceInfo(fakes.INSTANCE)


def _van(handle_type, info, **device_info):
    return objects.VAN(arq_uuid='a', instance_uuid=fakes.INSTANCE,
                       attach_handle_type=handle_type,
                       attach_handle_uuid=MDEV_UUID,
                       attach_handle_info=info, driver='d',
                       device_info=device_info)


def _plug(handle_type, info, **device_info):
    return libvirt.LibvirtPlugin().plug(
        INSTANCE, _van(handle_type, info, **device_info))


def _read(xml):
    """The element, and its ``<source><address>``."""
    hostdev = ElementTree.fromstring(xml)
    assert hostdev.tag == 'hostdev'
    [source] = list(hostdev)
    assert source.tag == 'source'
    [address] = list(source)
    assert address.tag == 'address'
    return hostdev, address


def test_pci():
    hostdev, address = _read(_plug('PCI', {
        'domain': '0000', 'bus': '0c', 'device': '00', 'function': '1'}))
    assert hostdev.attrib == {'mode': 'subsystem', 'type': 'pci',
                              'managed': 'yes'}
    assert address.attrib == {'domain': '0x0000', 'bus': '0x0c',
                              'slot': '0x00', 'function': '0x1'}


def test_pci_managed_false():
    hostdev, address = _read(_plug('PCI', {
        'domain': '0x0000', 'bus': 'AF', 'device': '1f', 'function': '7',
        'managed': 'false'}))
    assert hostdev.get('managed') == 'no'
    assert hostdev.get('type') == 'pci'
    assert address.attrib == {'domain': '0x0000', 'bus': '0xaf',
                              'slot': '0x1f', 'function': '0x7'}


def test_pci_managed_true_and_a_vmd_domain():
    hostdev, address = _read(_plug('PCI', {
        'domain': '10000', 'bus': '01', 'device': '00', 'function': '0',
        'managed': 'true'}))
    assert hostdev.get('managed') == 'yes'
    assert address.get('domain') == '0x10000'


def test_mdev():
    hostdev, address = _read(_plug(
        'MDEV', {'domain': '0000', 'bus': '3b', 'device': '00',
                 'function': '0', 'asked_type': 'nvidia-223'},
        mdev_uuid=MDEV_UUID, device_api='vfio-pci'))
    assert hostdev.attrib == {'mode': 'subsystem', 'type': 'mdev',
                              'managed': 'no', 'model': 'vfio-pci'}
    assert address.attrib == {'uuid': MDEV_UUID}


def test_mdev_model_follows_the_device_api():
    hostdev, _ = _read(_plug('MDEV', {}, mdev_uuid=MDEV_UUID,
                             device_api='vfio-ccw'))
    assert hostdev.get('model') == 'vfio-ccw'


def test_test_pci_attaches_nothing():
    assert _plug('TEST_PCI', {'domain': '0000', 'bus': '0c',
                              'device': '00', 'function': '1'}) is None


def test_describe():
    info = libvirt.LibvirtPlugin().describe()
    assert info.name == 'libvirt'
    assert info.attach_handle_types == ('MDEV', 'PCI', 'TEST_PCI')


# Nova's own classes, in a child process: nova registers its options on
# oslo.config's global CONF, whose names clash with cyborg's.
_NOVA_READER = '''
import json, sys
from lxml import etree
from nova.virt.libvirt import config
out = []
for kind, xml in json.load(sys.stdin):
    dev = (config.LibvirtConfigGuestHostdevPCI() if kind == 'pci'
           else config.LibvirtConfigGuestHostdevMDEV())
    dev.parse_dom(etree.fromstring(xml))
    out.append({k: getattr(dev, k, None) for k in (
        'mode', 'type', 'managed', 'domain', 'bus', 'slot', 'function',
        'model', 'uuid')})
json.dump(out, sys.stdout)
'''


def test_novas_libvirt_config_reads_them():
    conftest.require_module('nova')
    pci = _plug('PCI', {'domain': '0000', 'bus': '0c', 'device': '00',
                        'function': '1'})
    unmanaged = _plug('PCI', {'domain': '0000', 'bus': '0c', 'device': '00',
                              'function': '2', 'managed': 'false'})
    mdev = _plug('MDEV', {}, mdev_uuid=MDEV_UUID, device_api='vfio-pci')
    done = subprocess.run(
        [sys.executable, '-c', _NOVA_READER], capture_output=True,
        text=True, timeout=120, check=True,
        input=json.dumps([['pci', pci], ['pci', unmanaged],
                          ['mdev', mdev]]))
    read_pci, read_unmanaged, read_mdev = json.loads(done.stdout)
    assert read_pci == {'mode': 'subsystem', 'type': 'pci',
                        'managed': 'yes', 'domain': '0x0000',
                        'bus': '0x0c', 'slot': '0x00', 'function': '0x1',
                        'model': None, 'uuid': None}
    assert (read_unmanaged['managed'], read_unmanaged['function']) == (
        'no', '0x2')
    assert {k: read_mdev[k] for k in ('mode', 'type', 'managed', 'model',
                                      'uuid')} == {
        'mode': 'subsystem', 'type': 'mdev', 'managed': 'no',
        'model': 'vfio-pci', 'uuid': MDEV_UUID}
