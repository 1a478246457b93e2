"""The amd_gpu and intel_gpu drivers on fake sysfs trees: discovery,
health, layouts and cleaning, the layouts and cleans followed by the
emulated kernel (cyborg.tests.harness.sysfs_kernel)."""
import logging

import pytest

from cyborg.accelerator.drivers import amd_gpu
from cyborg.accelerator.drivers import intel_gpu
from cyborg.accelerator.drivers import pci_lifecycle
from cyborg.common import device_health
from cyborg.common import device_report
from cyborg.common import exception
from cyborg.common.device_report import DriverAttachHandle
from cyborg.tests.harness import sysfs_kernel
from cyborg.tests.harness.sysfs import SysfsTree
from cyborg.tests.harness.sysfs import pci_parts as pci

MI300X = '0000:05:00.0'
MI300X_GIM = '0000:15:00.0'
MI300X_VF = '0000:15:02.0'
MI210 = '0000:25:00.0'
RADEON = '0000:35:00.0'
B60 = '0000:4d:00.0'
FLEX = '0000:5d:00.0'
FLEX_I915 = '0000:6d:00.0'


@pytest.fixture
def tree(tmp_path):
    tree = SysfsTree(tmp_path / 'host')
    tree.add_amd_instinct(MI300X)
    tree.add_amd_instinct(MI300X_GIM, driver='gim', vfs=[MI300X_VF])
    tree.add_amd_instinct(MI210, device=0x740f)
    # A Radeon RX 6950 XT (Sienna Cichlid in amdgpu_drv.c): not ours.
    tree.add_function(RADEON, 0x1002, 0x73a5, 0x030000, driver='amdgpu')
    # A Battlemage card xe drives as SR-IOV PF with max_vfs=4.
    tree.add_intel_gpu(B60, device=0xe211, class_code=0x030000,
                       sriov_totalvfs=4)
    tree.add_intel_gpu(FLEX)
    tree.add_intel_gpu(FLEX_I915, device=0x56c1, driver='i915')
    return tree


def only(devices, address):
    [device] = [d for d in devices if d.controlpath_id == pci(address)]
    return device


def handles(device):
    [deployable] = device.deployables
    return [h.attach_info for h in deployable.attach_handles]


def events(tree, event):
    return [e for e in sysfs_kernel.read_log(tree.root)
            if e['event'] == event]


def _validate(devices):
    device_report.validate_report(
        'cmp1',
        {'hostname': 'cmp1', 'devices': [d.to_dict() for d in devices]})


# Discovery

def test_amd_gpus_whole_or_as_their_vfs(host_conf, tree, caplog):
    with caplog.at_level(logging.WARNING):
        devices = amd_gpu.AmdGpuDriver(host_conf).discover()
    _validate(devices)
    assert sorted(d.controlpath_id['bus'] for d in devices) == [
        '05', '15', '25']
    whole = only(devices, MI300X)
    assert handles(whole) == [pci(MI300X)]
    assert whole.deployables[0].attributes == {
        'rc': 'PGPU', 'trait0': 'OWNER_CYBORG', 'trait1': 'CUSTOM_GPU_AMD',
        'trait2': 'CUSTOM_AMD_MI300X'}
    assert whole.std_board_info['kernel_driver'] == 'amdgpu'
    # Under GIM the VF is lent, never the GPU it belongs to.
    split = only(devices, MI300X_GIM)
    assert handles(split) == [pci(MI300X_VF)]
    assert split.deployables[0].attributes['rc'] == 'VGPU'
    assert split.deployables[0].name == f'cmp1_{MI300X_GIM}'
    mi210 = only(devices, MI210)
    assert mi210.deployables[0].attributes['trait2'] == (
        'CUSTOM_AMD_ALDEBARAN')
    assert not caplog.records


def test_intel_gpus_whole_or_as_their_vfs(host_conf, tree):
    tree.add_vfs(FLEX, ['0000:5d:00.1', '0000:5d:00.2'], 0x8086, 0x56c0,
                 driver='xe')
    devices = intel_gpu.IntelGpuDriver(host_conf).discover()
    _validate(devices)
    assert len(devices) == 3
    b60 = only(devices, B60)
    assert handles(b60) == [pci(B60)]
    assert b60.deployables[0].attributes == {
        'rc': 'PGPU', 'trait0': 'OWNER_CYBORG',
        'trait1': 'CUSTOM_GPU_INTEL', 'trait2': 'CUSTOM_INTEL_BMG_G21'}
    assert b60.std_board_info['sriov_totalvfs'] == 4
    flex = only(devices, FLEX)
    assert handles(flex) == [pci('0000:5d:00.1'), pci('0000:5d:00.2')]
    assert flex.deployables[0].attributes['rc'] == 'VGPU'
    assert (only(devices, FLEX_I915).deployables[0].attributes['trait2']
            == 'CUSTOM_INTEL_ATS_M75')


def test_a_gpu_whose_vfs_cannot_be_read_is_not_lent(host_conf, tree,
                                                    caplog):
    tree.remove_function(MI300X_VF)
    with caplog.at_level(logging.WARNING):
        devices = amd_gpu.AmdGpuDriver(host_conf).discover()
    assert MI300X_GIM not in [d.controlpath_id for d in devices]
    assert len(devices) == 2
    assert 'VFs are enabled but none can be read' in caplog.text


# Health and usage: AMD

def test_amd_healthy_with_its_readings(host_conf, tree):
    driver = amd_gpu.AmdGpuDriver(host_conf)
    device = only(driver.discover(), MI300X)
    assert driver.health(device).state == device_health.HEALTHY
    usage = driver.usage(device)
    assert usage.temperature_celsius == 45.0
    assert usage.power_watts == 150.0
    assert usage.memory_total_bytes == 205822885888
    assert usage.gauges == {'temperature_edge_celsius': 38.0,
                            'temperature_junction_celsius': 45.0,
                            'temperature_mem_celsius': 40.0}
    assert usage.counters['ras_ue'] == 0


@pytest.mark.parametrize('ras, state, reason', [
    ({'umc': (1, 7)}, device_health.UNHEALTHY,
     'uncorrectable RAS errors (umc 1)'),
    ({'umc': (0, 3, 2), 'gfx': (0, 0, 0)}, device_health.DEGRADED,
     'deferred RAS errors (umc 2)'),
    ({'umc': (0, 250), 'sdma': (0, 1)}, device_health.HEALTHY, ''),
    ({'umc': amd_gpu.RAS_INACCESSIBLE}, device_health.DEGRADED,
     'a GPU reset is under way'),
])
def test_amd_ras_counts(host_conf, tmp_path, ras, state, reason):
    tree = SysfsTree(tmp_path)
    tree.add_amd_instinct(MI300X, ras=ras)
    host_conf.set_override('sysfs_root', tree.root, 'agent')
    driver = amd_gpu.AmdGpuDriver(host_conf)
    [device] = driver.discover()
    health = driver.health(device)
    assert health.state == state
    assert reason in health.reason


def test_amd_correctable_errors_are_counted(host_conf, tmp_path):
    tree = SysfsTree(tmp_path)
    tree.add_amd_instinct(MI300X, ras={'umc': (0, 250), 'sdma': (0, 1, 0)})
    host_conf.set_override('sysfs_root', tree.root, 'agent')
    driver = amd_gpu.AmdGpuDriver(host_conf)
    [device] = driver.discover()
    counters = driver.usage(device).counters
    assert (counters['ras_umc_ce'], counters['ras_ce'],
            counters['ras_de']) == (250, 251, 0)


def test_amd_malformed_ras_count_cannot_be_told(host_conf, tmp_path):
    tree = SysfsTree(tmp_path)
    tree.add_amd_instinct(MI300X, ras={'umc': 'ue 1'})
    host_conf.set_override('sysfs_root', tree.root, 'agent')
    driver = amd_gpu.AmdGpuDriver(host_conf)
    [device] = driver.discover()
    with pytest.raises(ValueError, match='umc_err_count'):
        driver.health(device)


def test_amd_under_gim_has_only_the_pci_readings(host_conf, tree):
    driver = amd_gpu.AmdGpuDriver(host_conf)
    device = only(driver.discover(), MI300X_GIM)
    tree.add_aer(MI300X_GIM, fatal=1)
    health = driver.health(device)
    assert health.state == device_health.UNHEALTHY
    assert 'fatal PCIe error' in health.reason
    usage = driver.usage(device)
    assert (usage.temperature_celsius, usage.gauges) == (None, {})


# Health and usage: Intel

def test_intel_survivability_mode_is_unhealthy(host_conf, tmp_path):
    tree = SysfsTree(tmp_path)
    tree.add_intel_gpu(B60, device=0xe211, survivability=True)
    host_conf.set_override('sysfs_root', tree.root, 'agent')
    driver = intel_gpu.IntelGpuDriver(host_conf)
    [device] = driver.discover()
    health = driver.health(device)
    assert health.state == device_health.UNHEALTHY
    assert 'firmware must be flashed' in health.reason


def test_intel_power_from_the_energy_counter(host_conf, tree):
    driver = intel_gpu.IntelGpuDriver(host_conf)
    device = only(driver.discover(), B60)
    first = driver.usage(device)
    assert (first.power_watts, first.temperature_celsius) == (None, 52.0)
    assert first.counters == {'energy_microjoules': 1_000_000}
    [energy] = tree.device_dir(B60).glob('hwmon/hwmon*/energy1_input')
    energy.write_text('61000000\n')
    second = driver.usage(device)
    assert second.counters == {'energy_microjoules': 61_000_000}
    assert second.power_watts > 0
    # A counter that went back (the driver reloaded) gives no power.
    energy.write_text('5\n')
    assert driver.usage(device).power_watts is None


# Layouts

def test_amd_offers_no_vf_count(host_conf, tree, kernel):
    driver = amd_gpu.AmdGpuDriver(host_conf)
    device = only(driver.discover(), MI300X_GIM)
    assert driver.layout_options(device) == {}
    with pytest.raises(exception.NotSupported):
        driver.apply_layout(device, {'vf_count': 2})
    assert events(tree, 'sriov_numvfs') == []


@pytest.mark.parametrize('address', [MI300X, MI300X_GIM])
def test_kernel_refuses_sriov_numvfs_of_gim_and_amdgpu(
        host_conf, tree, kernel, address, monkeypatch):
    monkeypatch.setattr(pci_lifecycle, 'READBACK_SECONDS', 1.0)
    # What an operator writing sriov_numvfs by hand would see.
    bus = amd_gpu.AmdGpuDriver(host_conf).bus
    count = 0 if address == MI300X_GIM else 2
    with pytest.raises(exception.DeviceActionError, match='asked for'):
        pci_lifecycle.set_vf_count(host_conf, bus, address, count)
    [refused] = events(tree, 'sriov_numvfs')
    assert refused['error'].startswith('ENOENT')


def test_intel_b60_from_0_to_4_vfs_and_back(host_conf, tree, kernel):
    driver = intel_gpu.IntelGpuDriver(host_conf)
    device = only(driver.discover(), B60)
    assert driver.layout_options(device) == {
        'vf_count': {'min': 0, 'max': 4}}
    driver.apply_layout(device, {'vf_count': 4})
    device = only(driver.discover(), B60)
    assert len(handles(device)) == 4
    assert pci(B60) not in handles(device)
    assert device.deployables[0].attributes['rc'] == 'VGPU'
    vf = driver.bus.get('{domain}:{bus}:{device}.{function}'.format(
        **handles(device)[0]))
    assert (vf.driver, vf.device_id) == ('xe', '0xe211')
    driver.apply_layout(device, {'vf_count': 0})
    device = only(driver.discover(), B60)
    assert handles(device) == [pci(B60)]
    assert [e['count'] for e in events(tree, 'sriov_numvfs')] == [4, 0]


def test_intel_vf_count_above_max_vfs_is_refused(host_conf, tree, kernel):
    driver = intel_gpu.IntelGpuDriver(host_conf)
    device = only(driver.discover(), B60)
    with pytest.raises(exception.Invalid, match='from 0 to 4'):
        driver.apply_layout(device, {'vf_count': 5})
    assert events(tree, 'sriov_numvfs') == []


def test_intel_vf_count_only_where_xe_is_the_pf(host_conf, tree, tmp_path):
    driver = intel_gpu.IntelGpuDriver(host_conf)
    devices = driver.discover()
    # A Flex on xe (no SR-IOV PF mode there) and one on i915.
    assert driver.layout_options(only(devices, FLEX)) == {}
    assert driver.layout_options(only(devices, FLEX_I915)) == {}
    # xe loaded with max_vfs=0 leaves sriov_totalvfs at 0.
    other = SysfsTree(tmp_path / 'other')
    other.add_intel_gpu(B60, device=0xe211, sriov_totalvfs=0)
    host_conf.set_override('sysfs_root', other.root, 'agent')
    driver = intel_gpu.IntelGpuDriver(host_conf)
    [device] = driver.discover()
    assert driver.layout_options(device) == {
        'vf_count': {'min': 0, 'max': 0}}


# Cleaning

@pytest.mark.parametrize('driver_class, address', [
    (amd_gpu.AmdGpuDriver, MI300X_VF),
    (intel_gpu.IntelGpuDriver, B60),
])
def test_clean_is_a_function_level_reset(host_conf, tree, kernel,
                                         driver_class, address):
    driver = driver_class(host_conf)
    driver.clean(DriverAttachHandle('PCI', pci(address)))
    pci_lifecycle.wait_for(lambda: events(tree, 'reset') != [])
    assert events(tree, 'reset') == [{'event': 'reset', 'device': address}]


def test_cleans_after_use_follows_the_groups(host_conf):
    assert not amd_gpu.AmdGpuDriver(host_conf).cleans_after_use
    host_conf.set_override('clean_after_use', True, 'amd_gpu_devices')
    host_conf.set_override('clean_after_use', True, 'intel_gpu_devices')
    assert amd_gpu.AmdGpuDriver(host_conf).cleans_after_use
    assert intel_gpu.IntelGpuDriver(host_conf).cleans_after_use
