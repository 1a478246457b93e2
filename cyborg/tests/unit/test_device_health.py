"""Device health and usage of the PCI drivers, read from fake sysfs trees
laid out as the kernel lays them out. NVML is tested in
test_nvidia_gpu_health.py, the fake driver's faults in
test_fake_driver.py."""
import hashlib
import os
import sys

import pytest

from cyborg.accelerator import pci_health
from cyborg.accelerator.drivers import huawei_ascend
from cyborg.accelerator.drivers import inspur_fpga
from cyborg.accelerator.drivers import inspur_nvme_ssd
from cyborg.accelerator.drivers import intel_fpga
from cyborg.accelerator.drivers import intel_nic
from cyborg.accelerator.drivers import intel_qat
from cyborg.accelerator.drivers import nvidia_gpu
from cyborg.accelerator.drivers import pci_driver
from cyborg.accelerator.drivers import xilinx_fpga
from cyborg.common import exception
from cyborg.common.device_health import Health
from cyborg.tests.harness import fpga_hosts

GPU = '0000:3b:00.0'
SSD = '0000:62:00.0'
NPU = '0000:86:00.0'
NIC = '0000:17:00.0'
NIC_VFS = ['0000:17:01.0', '0000:17:01.1']
QAT = '0000:6b:00.0'
QAT_VFS = [f'0000:6b:0{1 + n // 8}.{n % 8}' for n in range(16)]


def _one(driver):
    [device] = driver.discover()
    return device


def _ssd(tree, conf, **aer):
    tree.add_function(SSD, 0x1bd4, 0x1001, 0x010802, driver='nvme')
    tree.set_link(SSD, '8.0 GT/s PCIe', 4)
    tree.add_aer(SSD, **aer)
    driver = inspur_nvme_ssd.InspurNvmeSsdDriver(conf)
    return driver, _one(driver)


# The PCI layer: parsing what the kernel writes


def test_aer_total_line_is_counted_not_the_bits():
    text = ('Receiver Error 2\nBad TLP 1\nBad DLLP 0\nRELAY_NUM Rollover 0\n'
            'Replay Timer Timeout 0\nAdvisory Non-Fatal 0\n'
            'Corrected Internal Error 0\nHeader Log Overflow 0\n'
            'TOTAL_ERR_COR 2')
    assert pci_health.parse_aer(text, 'TOTAL_ERR_COR') == 2
    with pytest.raises(ValueError, match='no TOTAL_ERR_FATAL'):
        pci_health.parse_aer('Undefined 0', 'TOTAL_ERR_FATAL')


@pytest.mark.parametrize('text,speed', [
    ('8.0 GT/s PCIe', 8.0), ('2.5 GT/s PCIe', 2.5), ('16 GT/s', 16.0),
    ('Unknown', None), ('Unknown speed', None), (None, None)])
def test_link_speed_in_every_kernel_format(text, speed):
    assert pci_health.parse_speed(text) == speed


def test_function_without_health_files_reads_empty(tree):
    tree.add_function(SSD, 0x1bd4, 0x1001, 0x010802)
    reading = pci_health.read_function(
        str(tree.device_dir(SSD)), SSD)
    assert reading == pci_health.Readings(SSD, None, None,
                                          pci_health.Sensors())


# PciDriver defaults


def test_clean_device_is_healthy_with_zero_counters(tree, host_conf):
    driver, device = _ssd(tree, host_conf)
    assert driver.health(device) == Health('healthy')
    usage = driver.usage(device)
    assert usage.counters == {'aer_correctable': 0, 'aer_nonfatal': 0,
                              'aer_fatal': 0}
    assert usage.temperature_celsius is None


def test_fatal_aer_is_unhealthy_and_nonfatal_degraded(tree, host_conf):
    driver, device = _ssd(tree, host_conf, fatal=1, nonfatal=3)
    health = driver.health(device)
    assert health.state == 'unhealthy'
    assert health.reason == f'1 fatal PCIe error(s) (AER) on {SSD}'
    tree.add_aer(SSD, nonfatal=3)
    assert driver.health(device) == Health(
        'degraded', f'3 non-fatal PCIe error(s) (AER) on {SSD}')


def test_correctable_aer_only_counts(tree, host_conf):
    driver, device = _ssd(tree, host_conf, correctable=41)
    assert driver.health(device) == Health('healthy')
    assert driver.usage(device).counters['aer_correctable'] == 41


def test_narrower_or_slower_link_is_degraded_naming_both(tree, host_conf):
    driver, device = _ssd(tree, host_conf)
    tree.set_link(SSD, '8.0 GT/s PCIe', 2, max_width=4)
    assert driver.health(device) == Health(
        'degraded', f'PCIe link degraded: width x2 of x4 on {SSD}')
    tree.set_link(SSD, '2.5 GT/s PCIe', 4, max_speed='8.0 GT/s PCIe')
    assert driver.health(device).reason == (
        f'PCIe link degraded: speed 2.5 GT/s of 8 GT/s on {SSD}')


@pytest.mark.parametrize('millidegrees,state', [
    (84999, 'healthy'), (85000, 'degraded'), (94000, 'degraded'),
    (95000, 'unhealthy')])
def test_temperature_thresholds(tree, host_conf, millidegrees, state):
    driver, device = _ssd(tree, host_conf)
    tree.add_function_hwmon(SSD, 'nvme', [41000, millidegrees])
    assert driver.health(device).state == state
    assert driver.usage(device).temperature_celsius == millidegrees / 1000


def test_temperature_thresholds_are_configurable(tree, host_conf):
    host_conf.set_override('health_temperature_degraded', 50, 'agent')
    host_conf.set_override('health_temperature_unhealthy', 60, 'agent')
    driver, device = _ssd(tree, host_conf)
    tree.add_function_hwmon(SSD, 'nvme', [55000])
    health = driver.health(device)
    assert health.state == 'degraded'
    assert 'health_temperature_degraded (50 C)' in health.reason


def test_thresholds_in_the_wrong_order_fail_at_construction(tree,
                                                            host_conf):
    host_conf.set_override('health_temperature_degraded', 90, 'agent')
    host_conf.set_override('health_temperature_unhealthy', 80, 'agent')
    with pytest.raises(exception.Invalid, match='is above'):
        inspur_nvme_ssd.InspurNvmeSsdDriver(host_conf)


def test_hwmon_power_prefers_the_average(tree, host_conf):
    driver, device = _ssd(tree, host_conf)
    tree.add_function_hwmon(SSD, 'nvme', [40000], power_average=7_500_000,
                            power_input=9_000_000)
    assert driver.usage(device).power_watts == 7.5


def test_function_gone_is_unhealthy(tree, host_conf):
    driver, device = _ssd(tree, host_conf)
    tree.remove_function(SSD)
    assert driver.health(device) == Health(
        'unhealthy', f'PCI function {SSD} is gone')
    assert driver.usage(device) is None


def test_failing_read_raises_naming_the_file(tree, host_conf):
    driver, device = _ssd(tree, host_conf)
    tree.write(f'{tree._rel(SSD)}/aer_dev_fatal', 'Undefined 0')
    with pytest.raises(ValueError, match='aer_dev_fatal: no TOTAL_ERR'):
        driver.health(device)
    tree.remove(f'{tree._rel(SSD)}/aer_dev_fatal')
    tree.path(f'{tree._rel(SSD)}/aer_dev_fatal').mkdir()
    with pytest.raises(IsADirectoryError):
        driver.health(device)


@pytest.mark.parametrize('build,driver_class,address', [
    (fpga_hosts.add_u250, xilinx_fpga.XilinxFpgaDriver,
     fpga_hosts.U250_MGMT),
    (fpga_hosts.add_f10a, inspur_fpga.InspurFpgaDriver, fpga_hosts.F10A),
])
def test_fpga_families_use_the_defaults(tree, host_conf, build,
                                        driver_class, address):
    build(tree)
    tree.add_aer(address, fatal=2)
    driver = driver_class(host_conf)
    device = _one(driver)
    assert driver.health(device).state == 'unhealthy'
    assert driver.usage(device).counters['aer_fatal'] == 2


def test_npu_uses_the_defaults(tree, host_conf):
    tree.add_function(NPU, 0x19e5, 0xd100, 0x120000)
    tree.set_link(NPU, '8.0 GT/s PCIe', 8, max_width=16)
    driver = huawei_ascend.HuaweiAscendDriver(host_conf)
    assert driver.health(_one(driver)).state == 'degraded'


def test_xilinx_user_function_is_read_too(tree, host_conf):
    fpga_hosts.add_u250(tree)
    tree.add_aer(fpga_hosts.U250_USER, nonfatal=1)
    driver = xilinx_fpga.XilinxFpgaDriver(host_conf)
    assert driver.health(_one(driver)).reason == (
        f'1 non-fatal PCIe error(s) (AER) on {fpga_hosts.U250_USER}')


# QAT: VFs read up to a bound, qat/state, telemetry


def _qat(tree, conf):
    tree.add_function(QAT, 0x8086, 0x4940, 0x0b4000, driver='4xxx',
                      sriov_totalvfs=16)
    tree.add_vfs(QAT, QAT_VFS, 0x8086, 0x4941, driver='vfio-pci')
    tree.set_qat_state(QAT, 'up')
    driver = intel_qat.IntelQatDriver(conf)
    return driver, _one(driver)


def test_qat_reads_its_pf_and_the_first_vfs_only(tree, host_conf):
    driver, device = _qat(tree, host_conf)
    assert driver.health_functions(device) == (
        [QAT] + QAT_VFS[:pci_driver.HANDLE_FUNCTIONS_READ])
    tree.add_aer(QAT_VFS[12], fatal=1)
    assert driver.health(device) == Health('healthy')
    tree.add_aer(QAT_VFS[3], fatal=1)
    assert driver.health(device).reason == (
        f'1 fatal PCIe error(s) (AER) on {QAT_VFS[3]}')


def test_vf_gone_degrades_the_device(tree, host_conf):
    driver, device = _qat(tree, host_conf)
    tree.remove_function(QAT_VFS[0])
    assert driver.health(device) == Health(
        'degraded', f'PCI function {QAT_VFS[0]} is gone')


def test_qat_down_is_unhealthy(tree, host_conf):
    driver, device = _qat(tree, host_conf)
    tree.set_qat_state(QAT, 'down')
    assert driver.health(device) == Health(
        'unhealthy', f'QAT endpoint {QAT} is down (qat/state)')


@pytest.mark.parametrize('control', [1, 3])
def test_qat_telemetry_usage(tree, host_conf, control):
    driver, device = _qat(tree, host_conf)
    tree.add_qat_telemetry(QAT, '4xxx', {
        'sample_cnt': 1200, 'pci_trans_cnt': 5, 'bw_in': 830,
        'bw_out': 790, 'util_cph0': 35, 'util_cph1': 61, 'util_ath0': 12,
        'exec_cph0': 4400}, control=control)
    usage = driver.usage(device)
    assert usage.utilization_percent == 61
    assert usage.counters['sample_cnt'] == 1200
    assert usage.gauges['bw_in'] == 830
    assert usage.gauges['exec_cph0'] == 4400


def test_qat_telemetry_off_or_malformed(tree, host_conf):
    driver, device = _qat(tree, host_conf)
    directory = tree.add_qat_telemetry(QAT, '4xxx', {'util_cph0': 35},
                                       control=0)
    assert driver.usage(device).utilization_percent is None
    (directory / 'control').write_text('1\n')
    (directory / 'device_data').write_text('util_cph0\n')
    with pytest.raises(ValueError, match='device_data'):
        driver.usage(device)


# NICs


def _nic(tree, conf, **interface):
    tree.add_function(NIC, 0x8086, 0x1593, 0x020000, driver='ice',
                      sriov_totalvfs=64)
    tree.add_vfs(NIC, NIC_VFS, 0x8086, 0x1889, driver='vfio-pci')
    tree.add_net_interface(NIC, 'ens1f0', **interface)
    conf.set_override('physical_device_mappings', ['physnet1:ens1f0'],
                      'nic_devices')
    driver = intel_nic.IntelNicDriver(conf)
    return driver, _one(driver)


def test_nic_statistics_are_counters(tree, host_conf):
    driver, device = _nic(tree, host_conf, statistics={
        'rx_bytes': 10_000, 'tx_bytes': 20_000, 'rx_errors': 1,
        'tx_dropped': 4})
    tree.add_aer(NIC, correctable=3)
    assert driver.health(device) == Health('healthy')
    counters = driver.usage(device).counters
    assert counters['rx_bytes'] == 10_000
    assert counters['tx_bytes'] == 20_000
    assert counters['rx_errors'] == 1
    assert counters['tx_dropped'] == 4
    assert counters['aer_correctable'] == 3


@pytest.mark.parametrize('interface', [
    {'operstate': 'down', 'carrier': 0},
    {'operstate': 'down', 'carrier': None},
    {'operstate': 'lowerlayerdown', 'carrier': 1},
    {'operstate': 'up', 'carrier': 0}])
def test_nic_link_down_is_degraded(tree, host_conf, interface):
    driver, device = _nic(tree, host_conf, **interface)
    health = driver.health(device)
    assert health.state == 'degraded'
    assert health.reason.startswith('interface ens1f0 link is down')


# Intel FPGA: the FME


def test_fme_errors_and_sensors(tree, host_conf):
    fpga_hosts.add_n3000(tree)
    fpga_hosts.add_n3000_health(tree)
    driver = intel_fpga.IntelFpgaDriver(host_conf)
    device = _one(driver)
    assert driver.health(device) == Health('healthy')
    usage = driver.usage(device)
    assert usage.temperature_celsius == 52.0
    assert usage.power_watts == 61.5
    fme = fpga_hosts.n3000_fme(tree)
    tree.add_fme_errors(fme, nonfatal_errors=0x4, first_error=0x4)
    assert driver.health(device) == Health(
        'degraded', 'dfl-fme.0 nonfatal_errors 0x4 (first_error 0x4)')
    tree.add_fme_errors(fme, catfatal_errors=0x800, first_error=0x800)
    assert driver.health(device).state == 'unhealthy'


def test_fme_temperature_uses_the_thresholds(tree, host_conf):
    fpga_hosts.add_n3000(tree)
    fpga_hosts.add_n3000_health(tree, temperature=96000)
    driver = intel_fpga.IntelFpgaDriver(host_conf)
    health = driver.health(_one(driver))
    assert health.state == 'unhealthy'
    assert health.reason.startswith('dfl-fme.0 at 96 C')


# Nothing is written


def _snapshot(root):
    found = {}
    for directory, _, files in os.walk(root):
        for name in files:
            path = os.path.join(directory, name)
            with open(path, 'rb') as f:
                found[path] = (hashlib.sha256(f.read()).hexdigest(),
                               os.stat(path).st_mtime_ns)
    return found


def test_health_and_usage_never_write(tree, host_conf, monkeypatch):
    import builtins

    fpga_hosts.add_n3000(tree)
    fpga_hosts.add_n3000_health(tree, nonfatal_errors=1)
    _qat(tree, host_conf)
    tree.add_qat_telemetry(QAT, '4xxx', {'util_cph0': 3})
    _nic(tree, host_conf, operstate='down')
    _ssd(tree, host_conf, fatal=1)
    monkeypatch.setitem(sys.modules, 'pynvml', None)
    tree.add_function(GPU, 0x10de, 0x1eb8, 0x030200, driver='nvidia')
    tree.add_aer(GPU)
    tree.set_link(GPU, '2.5 GT/s PCIe', 16, max_speed='8.0 GT/s PCIe')
    drivers = [intel_fpga.IntelFpgaDriver(host_conf),
               intel_qat.IntelQatDriver(host_conf),
               intel_nic.IntelNicDriver(host_conf),
               inspur_nvme_ssd.InspurNvmeSsdDriver(host_conf),
               nvidia_gpu.NvidiaGpuDriver(host_conf)]
    discovered = [(d, device) for d in drivers for device in d.discover()]
    before = _snapshot(tree.root)
    opened = []
    real_open = builtins.open

    def checking_open(file, mode='r', *args, **kwargs):
        opened.append(str(file))
        assert not set(mode) & set('wax+'), f'{file} opened with {mode}'
        return real_open(file, mode, *args, **kwargs)

    monkeypatch.setattr(builtins, 'open', checking_open)
    states = [(d.health(device).state, d.usage(device) is not None)
              for d, device in discovered]
    monkeypatch.setattr(builtins, 'open', real_open)
    assert len(states) == 5
    assert {s for s, _ in states} == {'degraded', 'unhealthy', 'healthy'}
    assert any(path.endswith('device_data') for path in opened)
    assert _snapshot(tree.root) == before
