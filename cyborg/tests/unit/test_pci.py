"""Reading PCI functions from fake sysfs trees and from this machine."""
import logging
import os

import pytest

from cyborg.accelerator import pci
from cyborg.tests.harness.sysfs import SysfsTree

PF = '0000:3b:00.0'
VFS = ['0000:3b:00.4', '0000:3b:00.5', '0000:3b:00.6']
LIVE_DEVICES = '/sys/bus/pci/devices'


@pytest.fixture
def gpu_tree(tree):
    """A T4-like GPU PF with three VFs offering vGPU types, and a NIC."""
    tree.add_function(PF, 0x10de, 0x1eb8, 0x030200, driver='nvidia',
                      numa_node=1, subsystem_vendor=0x10de,
                      subsystem_device=0x12a2, sriov_totalvfs=16)
    tree.add_vfs(PF, VFS, 0x10de, 0x1eb9, numa_node=1)
    tree.add_mdev_type(VFS[0], 'nvidia-222', 'GRID T4-1B', 0,
                       devices=['b1a2c3d4-0000-4000-8000-000000000001'])
    tree.add_mdev_type(VFS[0], 'nvidia-223', 'GRID T4-2B', 1)
    tree.add_function('0000:af:00.0', '0x8086', '0x1593', '0x020000',
                      driver='ice', numa_node=None, iommu_group=None)
    return tree


def test_pf_vfs_and_mdev_types_are_parsed(gpu_tree):
    bus = pci.PciBus(gpu_tree.root)
    functions = bus.functions()
    assert [f.address for f in functions] == [PF, *VFS, '0000:af:00.0']
    pf = functions[0]
    assert (pf.domain, pf.bus, pf.device, pf.function) == (
        '0000', '3b', '00', '0')
    assert (pf.vendor_id, pf.device_id, pf.class_code) == (
        '0x10de', '0x1eb8', '0x030200')
    assert (pf.subsystem_vendor_id, pf.subsystem_device_id) == (
        '0x10de', '0x12a2')
    assert pf.driver == 'nvidia'
    assert pf.numa_node == 1
    assert pf.iommu_group is not None
    assert not pf.is_vf and pf.physfn is None
    assert pf.virtfns == tuple(VFS)
    assert (pf.sriov_totalvfs, pf.sriov_numvfs) == (16, 3)
    assert pf.mdev_types == ()
    assert pf.sysfs_path == str(gpu_tree.device_dir(PF))
    assert pf.attach_info() == {'domain': '0000', 'bus': '3b',
                                'device': '00', 'function': '0'}
    assert pf.deployable_name('cmp1') == 'cmp1_0000:3b:00.0'
    assert pf.matches_class('0x0302') and pf.matches_class('03')
    assert not pf.matches_class('0x0300')
    assert pf.matches_address('0000:3B:*.*')
    assert not pf.matches_address('0000:3b:00.4')

    vf = functions[1]
    assert vf.is_vf and vf.physfn == PF
    assert vf.device_id == '0x1eb9' and vf.class_code == '0x030200'
    assert vf.driver is None
    assert vf.iommu_group not in (None, pf.iommu_group)
    assert vf.sriov_totalvfs is None and vf.virtfns == ()
    assert vf.mdev_types == (
        pci.MdevType('nvidia-222', 'GRID T4-1B', 0, 'vfio-pci',
                     ('b1a2c3d4-0000-4000-8000-000000000001',)),
        pci.MdevType('nvidia-223', 'GRID T4-2B', 1, 'vfio-pci', ()))
    assert vf.attach_info()['function'] == '4'

    nic = functions[-1]
    assert nic.numa_node is None and nic.iommu_group is None
    assert nic.subsystem_vendor_id is None

    assert bus.get('0000:3B:00.5') == functions[2]
    assert bus.get('0000:3b:00.7') is None
    assert bus.get('not-an-address') is None
    assert bus.class_dirs('mdev_bus') == [
        str(gpu_tree.path(f'sys/class/mdev_bus/{VFS[0]}'))]


def test_virtfns_are_in_index_order_not_name_order(tree):
    tree.add_function('0000:05:00.0', 0x8086, 0x1593, 0x020000)
    vfs = [f'0000:05:{d:02x}.{f}' for d in (1, 2) for f in range(8)]
    tree.add_vfs('0000:05:00.0', vfs, 0x8086, 0x1889)
    pf = pci.PciBus(tree.root).get('0000:05:00.0')
    # virtfn10 sorts before virtfn2 as a string.
    assert pf.virtfns == tuple(vfs)


def test_ids_are_normalised(tree):
    tree.add_function('0000:01:00.0', '0x10DE', '1EB8', '30200')
    function = pci.PciBus(tree.root).get('0000:01:00.0')
    assert (function.vendor_id, function.device_id, function.class_code) == (
        '0x10de', '0x1eb8', '0x030200')


def test_empty_or_missing_tree_has_no_functions(tmp_path):
    assert pci.PciBus(str(tmp_path / 'nothing')).functions() == []
    tree = SysfsTree(tmp_path)
    assert pci.PciBus(tree.root).functions() == []
    assert pci.PciBus(tree.root).class_dirs('fpga_region') == []


@pytest.mark.parametrize('breakage, reason', [
    (lambda t, a: t.write(f'sys/bus/pci/devices/{a}/vendor', 'zz10'),
     'vendor'),
    (lambda t, a: t.write(f'sys/bus/pci/devices/{a}/device', '0x123456'),
     'device'),
    (lambda t, a: t.remove(f'sys/bus/pci/devices/{a}/device'), 'device'),
    (lambda t, a: t.remove(f'sys/bus/pci/devices/{a}/vendor'), 'vendor'),
    (lambda t, a: t.write(f'sys/bus/pci/devices/{a}/class', ''), 'class'),
    (lambda t, a: t.link(f'sys/bus/pci/devices/{a}/physfn',
                         'sys/devices/pci0000:00/0000:99:00.0'), 'physfn'),
    (lambda t, a: t.link(f'sys/bus/pci/devices/{a}', 'sys/devices/gone'),
     'no such directory'),
], ids=['non-hex vendor', 'long device', 'no device', 'no vendor',
        'empty class', 'dangling physfn', 'dangling bus link'])
def test_malformed_function_is_skipped_with_warning(tree, caplog, breakage,
                                                    reason):
    tree.add_function('0000:01:00.0', 0x1af4, 0x1000, 0x020000)
    tree.add_function('0000:02:00.0', 0x1af4, 0x1001, 0x010000)
    breakage(tree, '0000:02:00.0')
    bus = pci.PciBus(tree.root)
    with caplog.at_level(logging.WARNING, logger='cyborg.accelerator.pci'):
        functions = bus.functions()
    assert [f.address for f in functions] == ['0000:01:00.0']
    warnings = [r.getMessage() for r in caplog.records
                if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert '0000:02:00.0' in warnings[0] and reason in warnings[0]
    assert bus.get('0000:02:00.0') is None


def test_removed_vf_leaves_its_pf_and_siblings(tree, caplog):
    tree.add_function(PF, 0x8086, 0x1593, 0x020000)
    tree.add_vfs(PF, VFS, 0x8086, 0x1889)
    tree.remove_function(VFS[1])
    with caplog.at_level(logging.WARNING, logger='cyborg.accelerator.pci'):
        functions = pci.PciBus(tree.root).functions()
    assert [f.address for f in functions] == [PF, VFS[0], VFS[2]]
    assert functions[0].virtfns == (VFS[0], VFS[2])
    assert PF in caplog.text and 'virtfn1' in caplog.text


def test_removed_pf_makes_its_vfs_skipped(tree, caplog):
    tree.add_function(PF, 0x8086, 0x1593, 0x020000, driver='ice')
    tree.add_vfs(PF, VFS[:1], 0x8086, 0x1889, driver='iavf')
    tree.remove_function(PF)
    assert not tree.path(f'sys/bus/pci/drivers/ice/{PF}').exists()
    with caplog.at_level(logging.WARNING, logger='cyborg.accelerator.pci'):
        assert pci.PciBus(tree.root).functions() == []
    assert VFS[0] in caplog.text and 'physfn' in caplog.text


def test_odd_optional_values_are_ignored_not_fatal(tree, caplog):
    tree.add_function(PF, 0x10de, 0x1eb8, 0x030200, numa_node=0,
                      subsystem_vendor='n/a', sriov_totalvfs=4)
    tree.write(f'sys/bus/pci/devices/{PF}/numa_node', 'x')
    tree.write(f'sys/bus/pci/devices/{PF}/sriov_numvfs', '')
    tree.add_mdev_type(PF, 'nvidia-1', None, 'many', device_api=None)
    tree.add_mdev_type(PF, 'nvidia-2', None, 2, device_api=None)
    with caplog.at_level(logging.WARNING, logger='cyborg.accelerator.pci'):
        [function] = pci.PciBus(tree.root).functions()
    assert function.numa_node is None
    assert function.subsystem_vendor_id is None
    assert function.sriov_numvfs is None and function.sriov_totalvfs == 4
    assert function.mdev_types == (pci.MdevType('nvidia-2', None, 2, None),)
    for name in ('numa_node', 'subsystem_vendor', 'sriov_numvfs',
                 'nvidia-1'):
        assert name in caplog.text


def test_repeated_problems_warn_once(tree, caplog):
    tree.add_function('0000:02:00.0', 'nope', 0x1001, 0x010000)
    bus = pci.PciBus(tree.root)
    with caplog.at_level(logging.DEBUG, logger='cyborg.accelerator.pci'):
        bus.functions()
        bus.functions()
    levels = [r.levelno for r in caplog.records]
    assert levels == [logging.WARNING, logging.DEBUG]


def test_class_entries_and_their_devices(tree):
    tree.add_function(PF, 0x8086, 0x0b30, 0x120000)
    region = tree.add_class_entry(
        'fpga_region', 'region0', {'compat_id': '0x1234',
                                   'pr/interface_id': 'abcd'},
        device_link=PF)
    tree.add_class_entry('fpga_bridge', 'br0', {'state': 'enabled'})
    bus = pci.PciBus(tree.root)
    [entry] = bus.class_dirs('fpga_region')
    assert os.path.realpath(entry) == str(region)
    assert bus.address_of(entry) == PF
    assert bus.address_of('/sys/class/fpga_region/region0') == PF
    assert bus.read(f'{entry}/compat_id') == '0x1234'
    assert bus.read('/sys/class/fpga_region/region0/pr/interface_id') == (
        'abcd')
    assert bus.read('/sys/class/fpga_region/region0/nothing') is None
    [bridge] = bus.class_dirs('fpga_bridge')
    assert bus.address_of(bridge) is None
    assert bus.path('/sys/class/fpga') == str(tree.path('sys/class/fpga'))


def test_tree_mirrors_kernel_layout(tree):
    tree.add_function(PF, 0x8086, 0x1593, 0x020000, driver='ice',
                      iommu_group=7)
    tree.add_vfs(PF, VFS[:1], 0x8086, 0x1889)
    bus_link = tree.path(f'sys/bus/pci/devices/{PF}')
    assert bus_link.is_symlink()
    assert os.readlink(bus_link) == f'../../../devices/pci0000:00/{PF}'
    dev = tree.device_dir(PF)
    assert os.readlink(dev / 'driver') == '../../../bus/pci/drivers/ice'
    assert os.readlink(dev / 'iommu_group') == (
        '../../../kernel/iommu_groups/7')
    assert os.readlink(dev / 'virtfn0') == f'../{VFS[0]}'
    assert os.readlink(tree.device_dir(VFS[0]) / 'physfn') == f'../{PF}'
    assert (dev / 'vendor').read_text() == '0x8086\n'
    assert (dev / 'class').read_text() == '0x020000\n'
    assert 'PCI_SLOT_NAME=0000:3b:00.0\n' in (dev / 'uevent').read_text()
    assert 'DRIVER=ice\n' in (dev / 'uevent').read_text()


def _live_addresses() -> list[str]:
    try:
        return sorted(os.listdir(LIVE_DEVICES))
    except OSError:
        return []


@pytest.mark.skipif(not _live_addresses(),
                    reason='this machine has no PCI bus in /sys')
def test_live_host_through_udev_matches_sysfs():
    bus = pci.PciBus('/')
    assert bus.udev
    through_udev = bus.functions()
    listed = pci.PciBus('/', udev=False).functions()
    assert through_udev == listed
    # Every function this machine has, read here without the layer.
    assert [f.address for f in through_udev] == _live_addresses()
    for function in through_udev:
        path = os.path.join(LIVE_DEVICES, function.address)
        with open(os.path.join(path, 'vendor')) as f:
            assert int(f.read(), 16) == int(function.vendor_id, 16)
        with open(os.path.join(path, 'device')) as f:
            assert int(f.read(), 16) == int(function.device_id, 16)
        with open(os.path.join(path, 'class')) as f:
            assert int(f.read(), 16) == int(function.class_code, 16)
        assert function.sysfs_path == os.path.realpath(path)
        driver = os.path.join(path, 'driver')
        assert function.driver == (
            os.path.basename(os.readlink(driver))
            if os.path.islink(driver) else None)


def test_a_discovery_pass_reads_sysfs_once(tree, monkeypatch):
    tree.add_function(PF, 0x8086, 0x1593, 0x020000)
    tree.add_vfs(PF, VFS[:1], 0x8086, 0x1889)
    parsed = []
    parse = pci._parse
    monkeypatch.setattr(pci, '_parse',
                        lambda a, p: parsed.append(a) or parse(a, p))
    with pci.discovery_pass():
        first = pci.PciBus(tree.root).functions()
        tree.add_function('0000:01:00.0', 0x1af4, 0x1000, 0x020000)
        with pci.discovery_pass():
            # Another driver's bus over the same tree, in a nested block.
            assert pci.PciBus(tree.root).functions() == first
        assert pci.PciBus(tree.root).get(VFS[0]) == first[1]
        assert pci.PciBus(tree.root).get('0000:01:00.0') is None
    assert parsed == [PF, VFS[0]]
    # The next pass sees the function added since.
    with pci.discovery_pass():
        assert [f.address for f in pci.PciBus(tree.root).functions()] == [
            '0000:01:00.0', PF, VFS[0]]
    assert pci.PciBus(tree.root).get('0000:01:00.0') is not None
    assert len(parsed) == 6
