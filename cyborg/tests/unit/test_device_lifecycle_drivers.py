"""Layouts, preparation and cleaning of the PCI drivers, on fake sysfs
trees the emulated kernel (cyborg.tests.harness.sysfs_kernel) follows."""
import pytest

from cyborg.accelerator.drivers import inspur_fpga
from cyborg.accelerator.drivers import inspur_nvme_ssd
from cyborg.accelerator.drivers import intel_fpga
from cyborg.accelerator.drivers import intel_nic
from cyborg.accelerator.drivers import intel_qat
from cyborg.accelerator.drivers import nvidia_gpu
from cyborg.accelerator.drivers import pci_lifecycle
from cyborg.common import exception
from cyborg.common.device_report import DriverAttachHandle
from cyborg.tests.harness import sysfs_kernel
from cyborg.tests.harness.fpga_hosts import ARRIA10
from cyborg.tests.harness.fpga_hosts import HOST
from cyborg.tests.harness.fpga_hosts import by_address
from cyborg.tests.harness.fpga_hosts import configure
from cyborg.tests.harness.fpga_hosts import fpga_host
from cyborg.tests.harness.sysfs import SysfsTree
from cyborg.tests.harness.sysfs import pci_parts as pci
from cyborg.tests.unit.test_fpga_programming import fake_tool

E810 = '0000:3b:00.0'
QAT = '0000:6b:00.0'
T4 = '0000:af:00.0'
SSD = '0000:d8:00.0'
MDEV = '4b20d080-1b54-4048-85b3-a6a62d165c01'
# (type, name, instances) of a T4 on the vGPU host driver.
T4_TYPES = [('nvidia-222', 'GRID T4-1B', 16), ('nvidia-223', 'GRID T4-2B', 8),
            ('nvidia-230', 'GRID T4-2Q', 8)]


@pytest.fixture
def tree(tmp_path):
    tree = SysfsTree(tmp_path / 'host')
    tree.add_function(E810, 0x8086, 0x1593, 0x020000, driver='ice',
                      sriov_totalvfs=8)
    (tree.device_dir(E810) / 'sriov_vf_device').write_text('1889\n')
    tree.add_function(QAT, 0x8086, 0x4940, 0x0b4000, driver='qat_4xxx',
                      sriov_totalvfs=16)
    tree.add_t4(T4, T4_TYPES)
    tree.add_function(SSD, 0x1bd4, 0x1001, 0x010802, driver='nvme')
    (tree.device_dir(SSD) / 'nvme' / 'nvme3').mkdir(parents=True)
    return tree


def events(tree, event):
    return [e for e in sysfs_kernel.read_log(tree.root)
            if e['event'] == event]


def only(devices, address):
    [device] = [d for d in devices if d.controlpath_id == pci(address)]
    return device


# SR-IOV layouts

def test_e810_from_0_to_8_vfs_and_back(host_conf, tree, kernel):
    driver = intel_nic.IntelNicDriver(host_conf)
    device = only(driver.discover(), E810)
    assert driver.layout_options(device) == {
        'vf_count': {'min': 0, 'max': 8}}
    driver.apply_layout(device, {'vf_count': 8})
    device = only(driver.discover(), E810)
    assert len(device.deployables) == 8
    assert {d.attributes['trait1'] for d in device.deployables} == {
        'CUSTOM_VF'}
    # Changing between two non-zero counts goes through 0.
    driver.apply_layout(device, {'vf_count': 2})
    assert [e['count'] for e in events(tree, 'sriov_numvfs')] == [8, 0, 2]
    # Idempotent: the same count writes nothing.
    driver.apply_layout(device, {'vf_count': 2})
    assert len(events(tree, 'sriov_numvfs')) == 3
    driver.apply_layout(device, {'vf_count': 0})
    [deployable] = only(driver.discover(), E810).deployables
    assert deployable.attributes['trait1'] == 'CUSTOM_PF'


@pytest.mark.parametrize('layout, allowed', [
    ({'vf_count': 9}, 'from 0 to 8'),
    ({'vf_count': -1}, 'from 0 to 8'),
    ({'vf_count': '4'}, 'from 0 to 8'),
    ({'mdev_count': 4}, 'one of vf_count'),
])
def test_bad_vf_layouts_name_what_is_allowed(host_conf, tree, kernel,
                                             layout, allowed):
    driver = intel_nic.IntelNicDriver(host_conf)
    device = only(driver.discover(), E810)
    with pytest.raises(exception.Invalid, match=allowed):
        driver.apply_layout(device, layout)
    assert events(tree, 'sriov_numvfs') == []


def test_a_kernel_that_does_not_follow_is_a_device_action_error(
        host_conf, tree, monkeypatch):
    # No emulated kernel runs: the write lands and nothing follows.
    monkeypatch.setattr(pci_lifecycle, 'READBACK_SECONDS', 0.2)
    driver = intel_nic.IntelNicDriver(host_conf)
    device = only(driver.discover(), E810)
    with pytest.raises(exception.DeviceActionError,
                       match='asked for 8 VFs, sriov_numvfs reads 8 with 0'):
        driver.apply_layout(device, {'vf_count': 8})


def test_qat_vfs_bound_to_vfio_pci(host_conf, tree, kernel):
    tree.path('sys/bus/pci/drivers/vfio-pci').mkdir(parents=True)
    host_conf.set_override('vfio_bind', True, 'qat_devices')
    driver = intel_qat.IntelQatDriver(host_conf)
    device = only(driver.discover(), QAT)
    assert driver.layout_options(device) == {
        'vf_count': {'min': 0, 'max': 16}}
    driver.apply_layout(device, {'vf_count': 4})
    device = only(driver.discover(), QAT)
    handles = device.deployables[0].attach_handles
    assert len(handles) == 4
    vfs = [driver.bus.get(pci_lifecycle_address(h)) for h in handles]
    assert {vf.driver for vf in vfs} == {'vfio-pci'}
    # The VF driver the PF's driver autoprobed was unbound first.
    assert {e['driver'] for e in events(tree, 'unbind')} == {'qat_4xxxvf'}


def pci_lifecycle_address(handle):
    return '{domain}:{bus}:{device}.{function}'.format(**handle.attach_info)


# Preparation

def test_prepare_binds_to_vfio_pci_only_when_asked(host_conf, tree, kernel):
    tree.path('sys/bus/pci/drivers/vfio-pci').mkdir(parents=True)
    driver = inspur_nvme_ssd.InspurNvmeSsdDriver(host_conf)
    device = only(driver.discover(), SSD)
    driver.prepare(device)
    assert driver.bus.get(SSD).driver == 'nvme'
    host_conf.set_override('vfio_bind', True, 'ssd_devices')
    driver.prepare(device)
    assert driver.bus.get(SSD).driver == 'vfio-pci'
    driver.prepare(device)
    assert len(events(tree, "bind")) == 1, sysfs_kernel.read_log(tree.root)


def test_prepare_without_vfio_pci_loaded_fails(host_conf, tree, kernel,
                                               monkeypatch):
    monkeypatch.setattr(pci_lifecycle, 'READBACK_SECONDS', 0.5)
    host_conf.set_override('vfio_bind', True, 'ssd_devices')
    driver = inspur_nvme_ssd.InspurNvmeSsdDriver(host_conf)
    with pytest.raises(exception.DeviceActionError,
                       match='bound to no driver after drivers_probe'):
        driver.prepare(only(driver.discover(), SSD))


# mdev layouts

def test_t4_restricted_to_4_vgpus_of_one_type(host_conf, tree, kernel):
    driver = nvidia_gpu.NvidiaGpuDriver(host_conf)
    device = only(driver.discover(), T4)
    assert device.deployables[0].attributes['rc'] == 'PGPU'
    assert driver.layout_options(device) == {
        'mdev_type': {'nvidia-222': 16, 'nvidia-223': 8, 'nvidia-230': 8},
        'mdev_count': {'min': 0, 'max': 16}}
    driver.apply_layout(device, {'mdev_type': 'nvidia-223',
                                 'mdev_count': 4})
    device = only(driver.discover(), T4)
    [deployable] = device.deployables
    assert deployable.attributes['rc'] == 'VGPU'
    assert [h.attach_info['asked_type'] for h in deployable.attach_handles
            ] == ['nvidia-223'] * 4
    # The mdevs are still created at bind time, on the handles offered.
    handle = deployable.attach_handles[0]
    driver.create_mdev(handle.attach_info, MDEV)
    pci_lifecycle.wait_for(lambda: events(tree, 'mdev_create') != [])
    assert [e['type'] for e in events(tree, 'mdev_create')] == [
        'nvidia-223']


@pytest.mark.parametrize('layout, allowed', [
    ({'mdev_type': 'nvidia-999', 'mdev_count': 1},
     'not one of nvidia-222, nvidia-223, nvidia-230'),
    ({'mdev_type': 'nvidia-223', 'mdev_count': 9},
     'above the 8 vGPUs of type nvidia-223'),
    ({'mdev_type': 'nvidia-222', 'mdev_count': 17}, 'from 0 to 16'),
])
def test_bad_mdev_layouts_name_what_is_allowed(host_conf, tree, layout,
                                               allowed):
    driver = nvidia_gpu.NvidiaGpuDriver(host_conf)
    device = only(driver.discover(), T4)
    with pytest.raises(exception.Invalid, match=allowed):
        driver.apply_layout(device, layout)
    assert driver.mdev_layouts == {}


def test_mdev_layout_refused_while_mdevs_of_another_type_exist(
        host_conf, tree, kernel):
    driver = nvidia_gpu.NvidiaGpuDriver(host_conf)
    device = only(driver.discover(), T4)
    driver.apply_layout(device, {'mdev_type': 'nvidia-222', 'mdev_count': 2})
    handle = only(driver.discover(), T4).deployables[0].attach_handles[0]
    driver.create_mdev(handle.attach_info, MDEV)
    pci_lifecycle.wait_for(
        lambda: tree.path(f'sys/bus/mdev/devices/{MDEV}').exists())
    with pytest.raises(exception.DeviceActionError,
                       match='mdevs of type nvidia-222 exist'):
        driver.apply_layout(device, {'mdev_type': 'nvidia-223'})


# Cleaning

def test_mdev_clean_destroys_and_recreates(host_conf, tree, kernel):
    driver = nvidia_gpu.NvidiaGpuDriver(host_conf)
    device = only(driver.discover(), T4)
    driver.apply_layout(device, {'mdev_type': 'nvidia-230', 'mdev_count': 1})
    [handle] = only(driver.discover(), T4).deployables[0].attach_handles
    driver.create_mdev(handle.attach_info, MDEV)
    pci_lifecycle.wait_for(
        lambda: tree.path(f'sys/bus/mdev/devices/{MDEV}').exists())
    driver.clean(DriverAttachHandle(
        'MDEV', dict(handle.attach_info, mdev_uuid=MDEV)))
    assert [(e['event'], e['uuid']) for e in sysfs_kernel.read_log(tree.root)
            if e['event'].startswith('mdev')] == [
        ('mdev_create', MDEV), ('mdev_remove', MDEV), ('mdev_create', MDEV)]
    assert tree.path(f'sys/bus/mdev/devices/{MDEV}').is_dir()


def test_pci_clean_is_a_function_level_reset(host_conf, tree, kernel):
    driver = intel_nic.IntelNicDriver(host_conf)
    driver.clean(DriverAttachHandle('PCI', pci(E810)))
    pci_lifecycle.wait_for(lambda: events(tree, 'reset') != [])
    assert events(tree, 'reset') == [{'event': 'reset', 'device': E810}]


def test_clean_of_a_function_without_reset_fails(host_conf, tree, kernel):
    (tree.device_dir(E810) / 'reset').unlink()
    driver = intel_nic.IntelNicDriver(host_conf)
    with pytest.raises(exception.DeviceActionError,
                       match='no reset method'):
        driver.clean(DriverAttachHandle('PCI', pci(E810)))


def test_nvme_clean_formats_every_namespace(host_conf, tree, tmp_path):
    tool, argv = fake_tool(tmp_path, 'nvme')
    host_conf.set_override('nvme_path', tool, 'ssd_devices')
    driver = inspur_nvme_ssd.InspurNvmeSsdDriver(host_conf)
    driver.clean(DriverAttachHandle('PCI', pci(SSD)))
    assert argv.read_text().splitlines() == [
        'format', '/dev/nvme3', '--namespace-id=0xffffffff', '--ses=1',
        '--force']


def test_nvme_clean_failures(host_conf, tree, tmp_path):
    tool, _ = fake_tool(tmp_path, 'nvme', exit_code=1,
                        stderr='NVMe status: ACCESS_DENIED')
    host_conf.set_override('nvme_path', tool, 'ssd_devices')
    driver = inspur_nvme_ssd.InspurNvmeSsdDriver(host_conf)
    with pytest.raises(exception.DeviceActionError, match='ACCESS_DENIED'):
        driver.clean(DriverAttachHandle('PCI', pci(SSD)))
    (tree.device_dir(SSD) / 'nvme' / 'nvme3').rmdir()
    with pytest.raises(exception.DeviceActionError,
                       match='no NVMe controller'):
        driver.clean(DriverAttachHandle('PCI', pci(SSD)))


@pytest.fixture
def fpga_tree(tmp_path):
    return fpga_host(tmp_path / 'fpga')


def test_fpga_clean_reflashes_the_golden_image(conf, fpga_tree, tmp_path):
    tool, argv = fake_tool(tmp_path, 'fpgaconf')
    golden = tmp_path / 'golden.gbs'
    golden.write_bytes(b'golden')
    configure(conf, fpga_tree.root, fpgaconf_path=tool)
    driver = intel_fpga.IntelFpgaDriver(conf)
    card = by_address(driver.discover())[ARRIA10]
    handle = card.deployables[0].attach_handles[0]
    with pytest.raises(exception.DeviceActionError,
                       match='golden_images has no image for intel_fpga'):
        driver.clean(handle)
    conf.set_override('golden_images', {'intel_fpga': str(golden)}, 'fpga')
    driver.clean(handle)
    assert argv.read_text().splitlines()[-1] == str(golden)


def test_fpga_a_driver_cannot_program_cleans_with_a_reset(host_conf, tree):
    f10a = '0000:5e:00.0'
    tree.add_function(f10a, 0x1bd4, 0xa115, 0x120000, driver='vfio-pci')
    driver = inspur_fpga.InspurFpgaDriver(host_conf)
    [card] = driver.discover()
    # Nothing to load a region image with: no layout is offered.
    assert driver.layout_options(card) == {}
    with sysfs_kernel.Kernel(tree.root):
        driver.clean(card.deployables[0].attach_handles[0])
        pci_lifecycle.wait_for(lambda: events(tree, 'reset') != [])
    assert events(tree, 'reset') == [{'event': 'reset', 'device': f10a}]


def test_fpga_region_image_layout_programs_every_region(conf, fpga_tree,
                                                        tmp_path):
    tool, argv = fake_tool(tmp_path, 'fpgaconf')
    image = tmp_path / 'image.gbs'
    image.write_bytes(b'image')
    configure(conf, fpga_tree.root, fpgaconf_path=tool)
    driver = intel_fpga.IntelFpgaDriver(conf)
    device = by_address(driver.discover())[ARRIA10]
    assert driver.layout_options(device) == {
        'region_image': {'deployables': [f'{HOST}_{ARRIA10}']}}
    with pytest.raises(exception.DeviceActionError, match='no downloaded'):
        driver.apply_layout(device, {'region_image': 'a-uuid'})
    with pytest.raises(exception.Invalid, match='not one of region_image'):
        driver.apply_layout(device, {'vf_count': 1})
    driver.apply_layout(device, {'region_image': 'a-uuid',
                                 'image_path': str(image),
                                 'bitstream': {'id': 'a-uuid'}})
    assert argv.read_text().splitlines()[-1] == str(image)


def test_cleans_after_use_follows_the_driver_group(host_conf):
    driver = intel_nic.IntelNicDriver(host_conf)
    assert not driver.cleans_after_use
    host_conf.set_override('clean_after_use', True, 'nic_devices')
    assert driver.cleans_after_use
    assert not intel_qat.IntelQatDriver(host_conf).cleans_after_use
