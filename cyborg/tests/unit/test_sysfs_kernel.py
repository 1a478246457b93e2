"""The emulated kernel follows sysfs writes as the kernel does."""
import os
import pathlib
import time

import pytest

from cyborg.accelerator import pci
from cyborg.tests.harness import sysfs_kernel
from cyborg.tests.harness.sysfs import SysfsTree

PF = '0000:3b:00.0'
GPU = '0000:af:00.0'
UUID = '4b20d080-1b54-4048-85b3-a6a62d165c01'


def until(check, timeout=10.0):
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, 'the emulator did not act'
        time.sleep(0.01)


@pytest.fixture
def tree(tmp_path):
    tree = SysfsTree(tmp_path)
    tree.add_function(PF, 0x8086, 0x1593, 0x020000, driver='ice',
                      sriov_totalvfs=8)
    tree.add_function(GPU, 0x10de, 0x1eb8, 0x030200, driver='nvidia')
    tree.add_mdev_type(GPU, 'nvidia-222', 'GRID T4-1B', 2)
    return tree


def write(path: pathlib.Path, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_TRUNC)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def test_sriov_numvfs_creates_and_removes_vfs(tree):
    bus = pci.PciBus(tree.root)
    with sysfs_kernel.Kernel(tree.root):
        write(tree.device_dir(PF) / 'sriov_numvfs', '3')
        # The emulator writes sriov_numvfs back last, as the kernel's
        # write returns only once the VFs are there.
        until(lambda: len(bus.get(PF).virtfns) == 3
              and bus.get(PF).sriov_numvfs == 3)
        vfs = [bus.get(a) for a in bus.get(PF).virtfns]
        assert [vf.address for vf in vfs] == [
            '0000:3b:10.0', '0000:3b:10.1', '0000:3b:10.2']
        assert {(vf.physfn, vf.driver, vf.vendor_id) for vf in vfs} == {
            (PF, 'iavf', '0x8086')}
        write(tree.device_dir(PF) / 'sriov_numvfs', '0')
        until(lambda: not bus.get(PF).virtfns
              and bus.get(PF).sriov_numvfs == 0)
    assert bus.get('0000:3b:10.0') is None
    assert bus.get(PF).sriov_numvfs == 0


def test_sriov_offset_stride_and_vf_device_are_followed(tree):
    dev = tree.device_dir(PF)
    (dev / 'sriov_offset').write_text('8\n')
    (dev / 'sriov_stride').write_text('2\n')
    (dev / 'sriov_vf_device').write_text('1889\n')
    kernel = sysfs_kernel.Kernel(tree.root)
    kernel.prime()
    write(dev / 'sriov_numvfs', '2')
    kernel.step()
    bus = pci.PciBus(tree.root)
    assert bus.get(PF).virtfns == ('0000:3b:01.0', '0000:3b:01.2')
    assert bus.get('0000:3b:01.2').device_id == '0x1889'


@pytest.mark.parametrize('first, second, error', [
    ('9', None, 'ERANGE'),
    ('2', '4', 'EBUSY'),
    ('x', None, 'EINVAL'),
])
def test_refused_vf_counts_change_nothing(tree, first, second, error):
    kernel = sysfs_kernel.Kernel(tree.root)
    kernel.prime()
    numvfs = tree.device_dir(PF) / 'sriov_numvfs'
    write(numvfs, first)
    kernel.step()
    if second is not None:
        write(numvfs, second)
        kernel.step()
    before = 0 if second is None else int(first)
    assert numvfs.read_text().strip() == str(before)
    assert len(pci.PciBus(tree.root).get(PF).virtfns) == before
    assert sysfs_kernel.read_log(tree.root)[-1]['error'].startswith(error)


def test_mdev_create_and_remove(tree):
    kernel = sysfs_kernel.Kernel(tree.root)
    kernel.prime()
    type_dir = tree.device_dir(GPU) / 'mdev_supported_types' / 'nvidia-222'
    write(type_dir / 'create', UUID)
    kernel.step()
    mdev = tree.path(f'sys/bus/mdev/devices/{UUID}')
    assert mdev.is_dir() and (tree.device_dir(GPU) / UUID).is_dir()
    offered = pci.PciBus(tree.root).get(GPU).mdev_types[0]
    assert (offered.available_instances, offered.devices) == (1, (UUID,))
    assert (type_dir / 'create').read_text() == ''
    write(mdev / 'remove', '1')
    kernel.step()
    assert not mdev.exists() and not (tree.device_dir(GPU) / UUID).exists()
    offered = pci.PciBus(tree.root).get(GPU).mdev_types[0]
    assert (offered.available_instances, offered.devices) == (2, ())


def test_mdev_create_beyond_available_instances_is_refused(tree):
    kernel = sysfs_kernel.Kernel(tree.root)
    kernel.prime()
    type_dir = tree.device_dir(GPU) / 'mdev_supported_types' / 'nvidia-222'
    (type_dir / 'available_instances').write_text('0\n')
    write(type_dir / 'create', UUID)
    kernel.step()
    assert not tree.path(f'sys/bus/mdev/devices/{UUID}').exists()
    assert sysfs_kernel.read_log(tree.root)[-1]['error'].startswith('EDQUOT')


def test_reset_is_recorded(tree):
    kernel = sysfs_kernel.Kernel(tree.root)
    kernel.prime()
    write(tree.device_dir(GPU) / 'reset', '1')
    kernel.step()
    assert sysfs_kernel.read_log(tree.root) == [
        {'event': 'reset', 'device': GPU}]
    assert (tree.device_dir(GPU) / 'reset').read_text() == ''


def test_driver_override_unbind_and_probe_move_the_driver(tree):
    tree.path('sys/bus/pci/drivers/vfio-pci').mkdir()
    kernel = sysfs_kernel.Kernel(tree.root)
    kernel.prime()
    kernel.step()
    bus = pci.PciBus(tree.root)
    write(tree.device_dir(GPU) / 'driver_override', 'vfio-pci')
    write(tree.path('sys/bus/pci/drivers/nvidia/unbind'), GPU)
    kernel.step()
    assert bus.get(GPU).driver is None
    write(tree.path('sys/bus/pci/drivers_probe'), GPU)
    kernel.step()
    assert bus.get(GPU).driver == 'vfio-pci'
    # Without an override, probing binds the driver it had before.
    write(tree.device_dir(GPU) / 'driver_override', '\n')
    write(tree.path('sys/bus/pci/drivers/vfio-pci/unbind'), GPU)
    kernel.step()
    write(tree.path('sys/bus/pci/drivers_probe'), GPU)
    kernel.step()
    assert bus.get(GPU).driver == 'vfio-pci'
    write(tree.path('sys/bus/pci/drivers/nvidia/unbind'), GPU)
    kernel.step()
    assert sysfs_kernel.read_log(tree.root)[-1]['error'].startswith('ENODEV')


def test_override_to_a_driver_not_loaded_leaves_it_unbound(tree):
    kernel = sysfs_kernel.Kernel(tree.root)
    kernel.prime()
    write(tree.device_dir(GPU) / 'driver_override', 'vfio-pci')
    write(tree.path('sys/bus/pci/drivers/nvidia/unbind'), GPU)
    kernel.step()
    write(tree.path('sys/bus/pci/drivers_probe'), GPU)
    kernel.step()
    assert pci.PciBus(tree.root).get(GPU).driver is None
    assert 'not loaded' in sysfs_kernel.read_log(tree.root)[-1]['error']


def test_runs_as_a_process_until_sigterm(tree):
    process = sysfs_kernel.spawn(tree.root)
    try:
        write(tree.device_dir(PF) / 'sriov_numvfs', '2')
        bus = pci.PciBus(tree.root)
        until(lambda: len(bus.get(PF).virtfns) == 2)
    finally:
        process.terminate()
        assert process.wait(10) == 0
