"""The intel_nic, intel_qat, inspur_nvme_ssd and huawei_ascend drivers on
fake sysfs trees of a host that has all their devices and some others."""
import collections
import logging

import pytest

from cyborg.accelerator import drivers
from cyborg.accelerator import pci
from cyborg.accelerator.drivers import huawei_ascend
from cyborg.accelerator.drivers import inspur_nvme_ssd
from cyborg.accelerator.drivers import intel_nic
from cyborg.accelerator.drivers import intel_qat
from cyborg.agent import resource_tracker
from cyborg.common import device_report
from cyborg.common import exception
from cyborg.tests.harness.sysfs import SysfsTree

E810 = '0000:17:00.0'
E810_VFS = ['0000:17:01.0', '0000:17:01.1']
E810_PORT2 = '0000:17:00.1'
X710 = '0000:3b:00.0'
X710_VFS = ['0000:3b:02.0', '0000:3b:02.1']
QAT = '0000:3d:00.0'
QAT_VFS = [f'0000:3d:0{1 + n // 8}.{n % 8}' for n in range(16)]
QAT_NO_VFS = '0000:3f:00.0'
INSPUR_SSD = '0000:5e:00.0'
OTHER_SSD = '0000:5f:00.0'
ASCEND = '0000:86:00.0'
HISI_ZIP = '0000:75:00.0'
PHYSNETS = ['physnet1:ens1f0', 'physnet-2:enp59s0f0|enp59s0f1']
FUNCTIONS = ['ipsec:enp59s0f0']


def _info(address, **extra):
    domain, bus, slot = address.split(':')
    device, function = slot.split('.')
    return dict(domain=domain, bus=bus, device=device, function=function,
                **extra)


def _add_netdev(tree, address, name):
    tree.add_class_entry('net', name, {'address': '3c:fd:fe:00:00:01'},
                         device_link=address)


def _add_others(tree):
    """What every host has and none of the four drivers reports."""
    tree.add_function('0000:00:00.0', 0x8086, 0x2020, 0x060000)
    tree.add_function('0000:00:03.0', 0x1af4, 0x1041, 0x020000,
                      driver='virtio-pci')
    # NVMe of another vendor, and a HiSilicon (Huawei) accelerator that
    # is not an NPU.
    tree.add_function(OTHER_SSD, 0x144d, 0xa824, 0x010802, driver='nvme')
    tree.add_function(HISI_ZIP, 0x19e5, 0xa250, 0x120000, driver='hisi_zip')
    # An Intel NIC the driver does not know (I350).
    tree.add_function('0000:02:00.0', 0x8086, 0x1521, 0x020000,
                      driver='igb')
    _add_netdev(tree, '0000:02:00.0', 'eno1')


@pytest.fixture
def tree(tmp_path):
    tree = SysfsTree(tmp_path)
    _add_others(tree)
    # E810-C for SFP: port 1 with two VFs (one bound to iavf, so it has a
    # netdev of its own), port 2 without VFs and without a mapping.
    tree.add_function(E810, 0x8086, 0x1593, 0x020000, driver='ice',
                      numa_node=0, subsystem_vendor=0x8086,
                      subsystem_device=0x0002, sriov_totalvfs=128)
    _add_netdev(tree, E810, 'ens1f0')
    tree.add_vfs(E810, E810_VFS[:1], 0x8086, 0x1889, driver='iavf')
    tree.add_vfs(E810, E810_VFS[1:], 0x8086, 0x1889, driver='vfio-pci')
    _add_netdev(tree, E810_VFS[0], 'ens1f0v0')
    tree.add_function(E810_PORT2, 0x8086, 0x1593, 0x020000, driver='ice')
    _add_netdev(tree, E810_PORT2, 'ens1f1')
    # X710 for 10GbE SFP+ with two 700-series VFs.
    tree.add_function(X710, 0x8086, 0x1572, 0x020000, driver='i40e',
                      numa_node=1, sriov_totalvfs=64)
    _add_netdev(tree, X710, 'enp59s0f0')
    tree.add_vfs(X710, X710_VFS, 0x8086, 0x154c, driver='vfio-pci',
                 numa_node=1)
    # C62x QAT: one endpoint with 16 VFs, one with none.
    tree.add_function(QAT, 0x8086, 0x37c8, 0x0b4000, driver='c6xx',
                      sriov_totalvfs=16)
    tree.add_vfs(QAT, QAT_VFS, 0x8086, 0x37c9, driver='vfio-pci')
    tree.add_function(QAT_NO_VFS, 0x8086, 0x37c8, 0x0b4000, driver='c6xx',
                      sriov_totalvfs=16)
    tree.add_function(INSPUR_SSD, 0x1bd4, 0x1001, 0x010802, driver='nvme',
                      numa_node=0)
    tree.add_function(ASCEND, 0x19e5, 0xd100, 0x120000,
                      driver='devdrv_device_driver', numa_node=1)
    return tree


@pytest.fixture
def nic_conf(conf, tree):
    conf.set_override('host', 'cmp1')
    conf.set_override('sysfs_root', tree.root, 'agent')
    conf.set_override('physical_device_mappings', PHYSNETS, 'nic_devices')
    conf.set_override('function_device_mappings', FUNCTIONS, 'nic_devices')
    return conf


class _D:
    """Just a control path, for comparing device lists."""

    def __init__(self, address):
        self.controlpath_id = _info(address)


def _controlpaths(devices):
    return [device_report.canonical_json(d.controlpath_id) for d in devices]


def _validate(devices):
    device_report.validate_report(
        'cmp1',
        {'hostname': 'cmp1', 'devices': [d.to_dict() for d in devices]})


def test_nic_ports_and_vfs(nic_conf, tree, caplog):
    with caplog.at_level(logging.WARNING, logger=intel_nic.__name__):
        devices = intel_nic.IntelNicDriver(nic_conf).discover()
    assert _controlpaths(devices) == _controlpaths(
        [_D(E810), _D(E810_PORT2), _D(X710)])
    _validate(devices)
    e810, port2, x710 = devices
    assert (e810.type, e810.vendor, e810.model) == ('NIC', '0x8086', '0x1593')
    assert e810.std_board_info == {
        'product_id': '0x1593', 'class_code': '0x020000',
        'subsystem_vendor_id': '0x8086', 'subsystem_device_id': '0x0002',
        'numa_node': 0, 'kernel_driver': 'ice', 'product': 'E810',
        'interfaces': ['ens1f0'], 'physical_network': 'physnet1'}
    # One deployable, so one resource provider, per VF.
    assert [d.name for d in e810.deployables] == [
        f'cmp1_{a}' for a in E810_VFS]
    for deployable, address in zip(e810.deployables, E810_VFS, strict=True):
        assert deployable.num_accelerators == 1
        assert deployable.driver_name == 'intel_nic'
        assert deployable.attributes == {
            'rc': 'CUSTOM_NIC', 'trait0': 'OWNER_CYBORG',
            'trait1': 'CUSTOM_VF', 'trait2': 'CUSTOM_NIC_INTEL_E810',
            'trait3': 'CUSTOM_PHYSNET1'}
        [handle] = deployable.attach_handles
        assert handle.attach_type == 'PCI'
        assert handle.attach_info == _info(address,
                                           physical_network='physnet1')
    # A port without VFs is passed through whole; it has no mapping.
    [pf] = port2.deployables
    assert pf.name == f'cmp1_{E810_PORT2}'
    assert pf.attributes == {'rc': 'CUSTOM_NIC', 'trait0': 'OWNER_CYBORG',
                             'trait1': 'CUSTOM_PF',
                             'trait2': 'CUSTOM_NIC_INTEL_E810'}
    assert [h.attach_info for h in pf.attach_handles] == [_info(E810_PORT2)]
    assert 'physical_network' not in port2.std_board_info
    [warning] = [r.getMessage() for r in caplog.records]
    assert E810_PORT2 in warning and 'ens1f1' in warning
    assert 'physical_device_mappings' in warning
    # The X710's VFs, on a physical network whose name needs cleaning
    # up for its trait, with a function.
    assert [d.name for d in x710.deployables] == [
        f'cmp1_{a}' for a in X710_VFS]
    assert x710.deployables[1].attributes == {
        'rc': 'CUSTOM_NIC', 'trait0': 'OWNER_CYBORG', 'trait1': 'CUSTOM_VF',
        'trait2': 'CUSTOM_NIC_INTEL_X710', 'trait3': 'CUSTOM_PHYSNET2',
        'trait4': 'CUSTOM_IPSEC'}
    assert x710.deployables[1].attach_handles[0].attach_info == _info(
        X710_VFS[1], physical_network='physnet-2')
    assert x710.std_board_info['numa_node'] == 1


def test_nic_warning_for_an_unmapped_port_is_not_repeated(nic_conf, caplog):
    driver = intel_nic.IntelNicDriver(nic_conf)
    with caplog.at_level(logging.WARNING, logger=intel_nic.__name__):
        first = driver.discover()
        second = driver.discover()
    assert first == second
    assert len(caplog.records) == 1


def test_nic_port_without_netdev_is_reported_unmapped(nic_conf, tree, caplog):
    tree.bind(X710, 'vfio-pci')
    tree.remove('sys/class/net/enp59s0f0')
    tree.remove(f'sys/bus/pci/devices/{X710}/net')
    with caplog.at_level(logging.WARNING, logger=intel_nic.__name__):
        devices = intel_nic.IntelNicDriver(nic_conf).discover()
    x710 = devices[-1]
    assert x710.std_board_info['interfaces'] == []
    assert x710.deployables[0].attributes['trait2'] == 'CUSTOM_NIC_INTEL_X710'
    assert 'trait3' not in x710.deployables[0].attributes
    assert x710.deployables[0].attach_handles[0].attach_info == _info(
        X710_VFS[0])
    assert any(X710 in r.getMessage() and 'interfaces: none' in
               r.getMessage() for r in caplog.records)


def test_nic_malformed_vf_is_skipped_with_warning(nic_conf, tree, caplog):
    tree.write(f'sys/bus/pci/devices/{X710_VFS[0]}/device', 'vf?')
    with caplog.at_level(logging.WARNING):
        devices = intel_nic.IntelNicDriver(nic_conf).discover()
    assert [d.name for d in devices[-1].deployables] == [
        f'cmp1_{X710_VFS[1]}']
    assert any(X710_VFS[0] in r.getMessage() for r in caplog.records
               if r.levelno == logging.WARNING)


@pytest.mark.parametrize('option, value, message', [
    ('physical_device_mappings', 'physnet1', 'expected <physical_network>'),
    ('physical_device_mappings', ':ens1f0', 'expected <physical_network>'),
    ('physical_device_mappings', 'phys net:ens1f0', 'expected'),
    ('physical_device_mappings', 'physnet1:', "'' is not a network inter"),
    ('physical_device_mappings', 'physnet1:ens1f0||ens2', "'' is not"),
    ('physical_device_mappings', 'physnet1:an-interface-name-too-long',
     'is not a network interface name'),
    ('function_device_mappings', 'ip-sec:ens1f0', 'expected <function>'),
], ids=['no colon', 'no name', 'space', 'no interface', 'empty interface',
        'long interface', 'function'])
def test_nic_bad_mapping_fails_at_construction(nic_conf, option, value,
                                               message):
    nic_conf.set_override(option, ['physnet9:ens9', value], 'nic_devices')
    with pytest.raises(exception.Invalid) as err:
        intel_nic.IntelNicDriver(nic_conf)
    text = str(err.value)
    assert f'[nic_devices] {option} entry {value!r}' in text
    assert message in text


def test_nic_interface_mapped_twice_fails(nic_conf):
    nic_conf.set_override('physical_device_mappings',
                          ['physnet1:ens1f0', 'physnet2:ens2f0|ens1f0'],
                          'nic_devices')
    with pytest.raises(exception.Invalid, match='interface ens1f0 is already '
                       'mapped to physnet1'):
        intel_nic.IntelNicDriver(nic_conf)


def test_bad_mapping_stops_driver_loading(nic_conf):
    nic_conf.set_override('enabled_drivers', ['intel_qat', 'intel_nic'],
                          'agent')
    nic_conf.set_override('physical_device_mappings', ['ens1f0'],
                          'nic_devices')
    with pytest.raises(exception.DriverError) as err:
        drivers.load_drivers(nic_conf)
    assert 'physical_device_mappings' in str(err.value)


def test_qat_endpoint_with_16_vfs_and_one_without(nic_conf):
    devices = intel_qat.IntelQatDriver(nic_conf).discover()
    assert _controlpaths(devices) == _controlpaths([_D(QAT), _D(QAT_NO_VFS)])
    _validate(devices)
    qat, bare = devices
    assert (qat.type, qat.vendor, qat.model) == ('QAT', '0x8086', '0x37c8')
    assert qat.std_board_info == {
        'product_id': '0x37c8', 'class_code': '0x0b4000', 'numa_node': 0,
        'kernel_driver': 'c6xx', 'product': 'C62X'}
    [deployable] = qat.deployables
    assert deployable.name == f'cmp1_{QAT}'
    assert deployable.num_accelerators == 16
    assert deployable.driver_name == 'intel_qat'
    assert deployable.attributes == {
        'rc': 'CUSTOM_QAT', 'trait0': 'OWNER_CYBORG', 'trait1': 'CUSTOM_QAT',
        'trait2': 'CUSTOM_QAT_C62X'}
    assert {h.attach_type for h in deployable.attach_handles} == {'PCI'}
    assert [h.attach_info for h in deployable.attach_handles] == [
        _info(a) for a in QAT_VFS]
    assert QAT_VFS[8] == '0000:3d:02.0'
    [deployable] = bare.deployables
    assert (deployable.name, deployable.num_accelerators) == (
        f'cmp1_{QAT_NO_VFS}', 1)
    assert [h.attach_info for h in deployable.attach_handles] == [
        _info(QAT_NO_VFS)]


def test_qat_malformed_vfs_are_skipped(nic_conf, tree, caplog):
    tree.write(f'sys/bus/pci/devices/{QAT_VFS[3]}/vendor', '')
    driver = intel_qat.IntelQatDriver(nic_conf)
    with caplog.at_level(logging.WARNING):
        [qat, _] = driver.discover()
    assert qat.deployables[0].num_accelerators == 15
    assert _info(QAT_VFS[3]) not in [
        h.attach_info for h in qat.deployables[0].attach_handles]
    assert any(QAT_VFS[3] in r.getMessage() for r in caplog.records)
    # Every VF unreadable: the PF, owned by the host driver, is not
    # offered in their place.
    for address in QAT_VFS:
        tree.write(f'sys/bus/pci/devices/{address}/class', 'x')
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger=intel_qat.__name__):
        assert _controlpaths(driver.discover()) == _controlpaths(
            [_D(QAT_NO_VFS)])
    assert any(f'Skipping QAT C62X endpoint {QAT}' in r.getMessage()
               for r in caplog.records)


def test_inspur_ssd_only(nic_conf):
    devices = inspur_nvme_ssd.InspurNvmeSsdDriver(nic_conf).discover()
    _validate(devices)
    [ssd] = devices
    assert (ssd.type, ssd.vendor, ssd.model) == ('SSD', '0x1bd4', '0x1001')
    assert ssd.controlpath_id == _info(INSPUR_SSD)
    assert ssd.std_board_info == {
        'product_id': '0x1001', 'class_code': '0x010802', 'numa_node': 0,
        'kernel_driver': 'nvme'}
    [deployable] = ssd.deployables
    assert (deployable.name, deployable.num_accelerators,
            deployable.driver_name) == (f'cmp1_{INSPUR_SSD}', 1,
                                        'inspur_nvme_ssd')
    assert deployable.attributes == {
        'rc': 'CUSTOM_SSD', 'trait0': 'OWNER_CYBORG',
        'trait1': 'CUSTOM_SSD_INSPUR', 'trait2': 'CUSTOM_SSD_PRODUCT_ID_1001'}
    [handle] = deployable.attach_handles
    assert (handle.attach_type, handle.attach_info) == ('PCI',
                                                        _info(INSPUR_SSD))


def test_ascend_310_reaches_placement_with_a_resource_class(nic_conf):
    devices = huawei_ascend.HuaweiAscendDriver(nic_conf).discover()
    _validate(devices)
    [npu] = devices
    assert (npu.type, npu.vendor, npu.model) == ('AICHIP', '0x19e5', '0xd100')
    assert npu.controlpath_id == _info(ASCEND)
    assert npu.std_board_info == {
        'product_id': '0xd100', 'class_code': '0x120000', 'numa_node': 1,
        'kernel_driver': 'devdrv_device_driver', 'product': 'Ascend 310'}
    [deployable] = npu.deployables
    # Named after the host, so two hosts' NPUs never share a name.
    assert (deployable.name, deployable.num_accelerators,
            deployable.driver_name) == (f'cmp1_{ASCEND}', 1, 'huawei_ascend')
    assert deployable.attributes == {
        'rc': 'CUSTOM_NPU', 'trait0': 'OWNER_CYBORG',
        'trait1': 'CUSTOM_NPU_HUAWEI_ASCEND_310'}
    assert [h.attach_info for h in deployable.attach_handles] == [
        _info(ASCEND)]


def test_all_four_together_report_each_function_once(nic_conf):
    nic_conf.set_override('enabled_drivers', [
        'intel_nic', 'intel_qat', 'inspur_nvme_ssd', 'huawei_ascend'],
        'agent')
    loaded = drivers.load_drivers(nic_conf)
    devices = [d for driver in loaded for d in driver.discover()]
    _validate(devices)
    handles = [device_report.canonical_json(
        {k: h.attach_info[k] for k in ('domain', 'bus', 'device',
                                       'function')})
        for d in devices for dep in d.deployables
        for h in dep.attach_handles]
    assert len(handles) == len(set(handles)) == 2 + 1 + 2 + 16 + 1 + 1 + 1
    names = [dep.name for d in devices for dep in d.deployables]
    assert len(names) == len(set(names))


def test_an_agent_pass_reads_each_function_once(nic_conf, monkeypatch):
    nic_conf.set_override('enabled_drivers', [
        'intel_nic', 'intel_qat', 'inspur_nvme_ssd', 'huawei_ascend'],
        'agent')
    tracker = resource_tracker.ResourceTracker(
        nic_conf, drivers.load_drivers(nic_conf), None)
    parsed = collections.Counter()
    parse = pci._parse
    monkeypatch.setattr(pci, '_parse',
                        lambda a, p: parsed.update([a]) or parse(a, p))
    report = tracker.collect()
    assert len(report['devices']) == 3 + 2 + 1 + 1
    assert set(parsed.values()) == {1}
    tracker.collect()
    assert set(parsed.values()) == {2}


@pytest.mark.parametrize('driver_class', [
    intel_nic.IntelNicDriver, intel_qat.IntelQatDriver,
    inspur_nvme_ssd.InspurNvmeSsdDriver, huawei_ascend.HuaweiAscendDriver])
def test_host_without_their_devices(conf, tmp_path, driver_class):
    tree = SysfsTree(tmp_path)
    _add_others(tree)
    conf.set_override('sysfs_root', tree.root, 'agent')
    assert driver_class(conf).discover() == []
