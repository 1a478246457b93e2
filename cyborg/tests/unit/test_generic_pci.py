"""The generic PCI driver on fake sysfs trees and on this machine."""
import collections
import json
import logging
import os

import pytest

from cyborg.accelerator import drivers
from cyborg.accelerator.drivers import generic_pci
from cyborg.common import device_report
from cyborg.common import exception
from cyborg.tests.harness.sysfs import SysfsTree

GPU = '0000:3b:00.0'
GPU_VFS = ['0000:3b:00.4', '0000:3b:00.5']
NIC = '0000:af:00.0'
NIC_VFS = ['0000:af:01.0', '0000:af:01.1']
VIRTIO_NET = '0000:00:03.0'
VIRTIO_BLK = '0000:00:04.0'
QAT = '0000:3d:00.0'
LIVE_DEVICES = '/sys/bus/pci/devices'


@pytest.fixture
def tree(tmp_path):
    tree = SysfsTree(tmp_path)
    tree.add_function('0000:00:00.0', 0x8086, 0x0d57, 0x060000)
    tree.add_function(VIRTIO_NET, 0x1af4, 0x1041, 0x020000,
                      driver='virtio-pci', numa_node=None,
                      subsystem_vendor=0x1af4, subsystem_device=0x1100)
    tree.add_function(VIRTIO_BLK, 0x1af4, 0x1042, 0x010000,
                      driver='virtio-pci', numa_node=None)
    tree.add_function(GPU, 0x10de, 0x1eb8, 0x030200, driver='nvidia',
                      sriov_totalvfs=16)
    tree.add_vfs(GPU, GPU_VFS, 0x10de, 0x1eb9)
    tree.add_function(QAT, 0x8086, 0x37c8, 0x0b4000, driver='c6xx',
                      numa_node=1)
    tree.add_function(NIC, 0x8086, 0x1593, 0x020000, driver='ice',
                      numa_node=1)
    tree.add_vfs(NIC, NIC_VFS, 0x8086, 0x1889, driver='vfio-pci',
                 numa_node=1)
    return tree


def _driver(conf, root, *specs):
    conf.set_override('host', 'cmp1')
    conf.set_override('sysfs_root', root, 'agent')
    conf.set_override('device_specs', [json.dumps(s) for s in specs],
                      'generic_pci')
    return generic_pci.GenericPciDriver(conf)


def _addresses(devices):
    return [d.deployables[0].name.split('_', 1)[1] for d in devices]


def test_matching_by_vendor_reports_whole_functions(conf, tree):
    devices = _driver(conf, tree.root, {'vendor_id': '0x1AF4'}).discover()
    assert _addresses(devices) == [VIRTIO_NET, VIRTIO_BLK]
    net = devices[0]
    assert (net.type, net.vendor, net.model) == ('PCI', '0x1af4', '0x1041')
    assert net.controlpath_id == {'domain': '0000', 'bus': '00',
                                  'device': '03', 'function': '0'}
    assert net.std_board_info == {
        'product_id': '0x1041', 'class_code': '0x020000',
        'subsystem_vendor_id': '0x1af4', 'subsystem_device_id': '0x1100',
        'kernel_driver': 'virtio-pci'}
    [deployable] = net.deployables
    assert deployable.name == 'cmp1_0000:00:03.0'
    assert deployable.num_accelerators == 1
    assert deployable.driver_name == 'generic_pci'
    assert deployable.attributes == {'rc': 'CUSTOM_PCI',
                                     'trait0': 'OWNER_CYBORG',
                                     'trait1': 'CUSTOM_PCI_1AF4_1041'}
    [handle] = deployable.attach_handles
    assert handle.attach_type == 'PCI'
    assert handle.attach_info == net.controlpath_id
    report = {'hostname': 'cmp1', 'devices': [d.to_dict() for d in devices]}
    device_report.validate_report('cmp1', report)


def test_matching_by_product_reports_the_configured_type(conf, tree):
    devices = _driver(conf, tree.root, {
        'vendor_id': '8086', 'product_id': '0x1889', 'type': 'NIC',
        'resource_class': 'SRIOV_NET_VF', 'traits': ['CUSTOM_E810_VF'],
    }).discover()
    assert _addresses(devices) == NIC_VFS
    assert {d.type for d in devices} == {'NIC'}
    vf = devices[1]
    assert vf.std_board_info['physical_function'] == NIC
    assert vf.std_board_info['numa_node'] == 1
    assert vf.deployables[0].attributes == {
        'rc': 'SRIOV_NET_VF', 'trait0': 'OWNER_CYBORG',
        'trait1': 'CUSTOM_PCI_8086_1889', 'trait2': 'CUSTOM_E810_VF'}
    assert vf.deployables[0].attach_handles[0].attach_info == {
        'domain': '0000', 'bus': 'af', 'device': '01', 'function': '1'}


def test_matching_by_class_prefix(conf, tree):
    driver = _driver(conf, tree.root, {'class': '0x0302', 'type': 'GPU'})
    devices = driver.discover()
    # VFs inherit their PF's class; the PF, which serves them, is not
    # passed through beside them.
    assert _addresses(devices) == GPU_VFS
    assert {d.type for d in devices} == {'GPU'}
    assert devices[0].deployables[0].attributes['rc'] == 'PGPU'
    network = _driver(conf, tree.root, {'class': '02'}).discover()
    assert _addresses(network) == [VIRTIO_NET, *NIC_VFS]


def test_pf_only_and_vf_only(conf, tree, caplog):
    pfs = _driver(conf, tree.root, {'class': '0x0302', 'type': 'GPU',
                                    'physical_function_only': True})
    # Not while its VFs are enabled: the PF is no whole device then.
    with caplog.at_level(logging.WARNING):
        assert _addresses(pfs.discover()) == []
    assert (f'PCI function {GPU} is not reported: SR-IOV virtual functions '
            'are enabled on it') in caplog.text
    tree.write(f'sys/bus/pci/devices/{GPU}/sriov_numvfs', 0)
    for n in range(len(GPU_VFS)):
        tree.remove(f'sys/bus/pci/devices/{GPU}/virtfn{n}')
    assert _addresses(pfs.discover()) == [GPU]
    vfs = _driver(conf, tree.root, {'class': '0x0302', 'type': 'GPU',
                                    'virtual_function_only': True})
    assert _addresses(vfs.discover()) == GPU_VFS


def test_matching_by_address_pattern(conf, tree):
    driver = _driver(conf, tree.root, {'address': '0000:AF:01.*'})
    assert _addresses(driver.discover()) == NIC_VFS
    driver = _driver(conf, tree.root, {'address': '0000:3[bd]:00.0',
                                       'type': 'QAT'})
    # The GPU serves VFs.
    assert _addresses(driver.discover()) == [QAT]


def test_first_matching_spec_wins(conf, tree):
    devices = _driver(
        conf, tree.root,
        {'vendor_id': '0x8086', 'product_id': '0x37c8', 'type': 'QAT'},
        {'vendor_id': '0x8086', 'class': '0x0b40', 'type': 'AICHIP'},
        {'address': '0000:00:04.0', 'type': 'SSD',
         'resource_class': 'CUSTOM_VIRTIO_DISK'},
    ).discover()
    assert [(d.type, d.deployables[0].attributes['rc']) for d in devices] == [
        ('SSD', 'CUSTOM_VIRTIO_DISK'), ('QAT', 'CUSTOM_QAT')]


def test_no_specs_reports_nothing(conf, tree):
    assert _driver(conf, tree.root).discover() == []


def test_devices_come_and_go_with_sysfs(conf, tree):
    driver = _driver(conf, tree.root, {'vendor_id': '0x1af4'})
    tree.remove_function(VIRTIO_BLK)
    tree.add_function('0000:00:05.0', 0x1af4, 0x1044, 0xffff00)
    tree.write(f'sys/bus/pci/devices/{VIRTIO_NET}/vendor', 'garbage')
    assert _addresses(driver.discover()) == ['0000:00:05.0']


def test_loaded_by_name_with_its_options(conf, tree):
    conf.set_override('enabled_drivers', ['generic_pci', 'fake_driver'],
                      'agent')
    _driver(conf, tree.root, {'vendor_id': '0x10de'})
    [driver, _] = drivers.load_drivers(conf)
    assert isinstance(driver, generic_pci.GenericPciDriver)
    assert _addresses(driver.discover()) == GPU_VFS


@pytest.mark.parametrize('spec, message', [
    ('{"vendor_id": "0x1af4"', 'not JSON'),
    ('["0x1af4"]', 'not a JSON object'),
    ('{"vendor_id": "0x1af4", "vendor": "x"}', 'unknown key(s) vendor'),
    ('{"vendor_id": "0xzz"}', "vendor_id: '0xzz' is not a 4-digit hex"),
    ('{"vendor_id": 6900}', 'vendor_id must be a string'),
    ('{"vendor_id": "0x1af4", "product_id": "0x12345"}', 'product_id'),
    ('{"class": "0x030"}', "class '0x030' is not a hex class code prefix"),
    ('{"address": "0000:3b:00.0; rm"}', 'is not a PCI address pattern'),
    ('{"type": "GPU"}', 'at least one of vendor_id'),
    ('{"vendor_id": "0x10de", "type": "gpu"}', "type 'gpu' is not one of"),
    ('{"vendor_id": "0x10de", "resource_class": "VGPU"}',
     "resource_class 'VGPU' is neither"),
    ('{"vendor_id": "0x10de", "resource_class": "CUSTOM_gpu"}',
     "resource_class 'CUSTOM_gpu'"),
    ('{"vendor_id": "0x10de", "traits": "CUSTOM_A"}',
     'traits must be a list'),
    ('{"vendor_id": "0x10de", "traits": ["HW_GPU"]}',
     "trait 'HW_GPU' is not CUSTOM_"),
    ('{"vendor_id": "0x10de", "virtual_function_only": "yes"}',
     'virtual_function_only must be true or false'),
    ('{"vendor_id": "0x10de", "virtual_function_only": true, '
     '"physical_function_only": true}', 'exclude each other'),
], ids=['json', 'list', 'unknown key', 'vendor hex', 'vendor int',
        'long product', 'class', 'address', 'no selector', 'type', 'rc std',
        'rc custom', 'traits str', 'trait', 'flag', 'both flags'])
def test_invalid_specs_fail_at_construction(conf, tree, spec, message):
    conf.set_override('device_specs', ['{"vendor_id": "0x1af4"}', spec],
                      'generic_pci')
    with pytest.raises(exception.Invalid) as err:
        generic_pci.GenericPciDriver(conf)
    text = str(err.value)
    assert '[generic_pci] device_specs entry 2' in text
    assert spec in text
    assert message in text


def test_invalid_spec_stops_driver_loading(conf):
    conf.set_override('enabled_drivers', ['generic_pci'], 'agent')
    conf.set_override('device_specs', ['{"vendor_id": "nvidia"}'],
                      'generic_pci')
    with pytest.raises(exception.DriverError) as err:
        drivers.load_drivers(conf)
    assert '[generic_pci] device_specs entry 1' in str(err.value)
    assert 'nvidia' in str(err.value)


def _live_vendors() -> dict[str, list[str]]:
    """PCI addresses of this machine by vendor id, read straight from
    sysfs."""
    by_vendor = collections.defaultdict(list)
    try:
        addresses = sorted(os.listdir(LIVE_DEVICES))
    except OSError:
        return {}
    for address in addresses:
        try:
            with open(os.path.join(LIVE_DEVICES, address, 'vendor')) as f:
                by_vendor[f'0x{int(f.read(), 16):04x}'].append(address)
        except (OSError, ValueError):
            continue
    return dict(by_vendor)


@pytest.mark.skipif(not _live_vendors(),
                    reason='this machine has no PCI bus in /sys')
def test_live_host_devices_are_discovered_through_udev(conf):
    by_vendor = _live_vendors()
    # virtio devices when this is a VM, else the vendor with most functions.
    vendor = ('0x1af4' if '0x1af4' in by_vendor
              else max(by_vendor, key=lambda v: len(by_vendor[v])))
    conf.set_override('host', 'live1')
    conf.set_override('device_specs',
                      [json.dumps({'vendor_id': vendor})], 'generic_pci')
    driver = generic_pci.GenericPciDriver(conf)
    assert driver.bus.udev
    devices = driver.discover()
    assert _addresses(devices) == by_vendor[vendor]
    for device in devices:
        assert device.vendor == vendor
        address = device.deployables[0].name.split('_', 1)[1]
        domain, bus, slot = address.split(':')
        assert device.controlpath_id == {
            'domain': domain, 'bus': bus, 'device': slot.split('.')[0],
            'function': slot.split('.')[1]}
    device_report.validate_report(
        'live1', {'hostname': 'live1',
                  'devices': [d.to_dict() for d in devices]})
