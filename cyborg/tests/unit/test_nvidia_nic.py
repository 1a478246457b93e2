"""The nvidia_nic driver on fake sysfs trees of ConnectX and BlueField
ports, with the emulated kernel (harness/sysfs_kernel.py) following its
sysfs writes and the emulated devlink (harness/devlink.py) answering its
devlink commands."""
import logging

import pytest

from cyborg.accelerator.drivers import devlink
from cyborg.accelerator.drivers import nvidia_nic
from cyborg.accelerator.drivers import pci_lifecycle
from cyborg.common import device_report
from cyborg.common import exception
from cyborg.common.device_health import Health
from cyborg.common.device_report import DriverAttachHandle
from cyborg.tests.harness import devlink as devlink_emulator
from cyborg.tests.harness import sysfs_kernel
from cyborg.tests.harness.sysfs import SysfsTree
from cyborg.tests.harness.sysfs import pci_parts as pci
from cyborg.tests.utils import Clock

CX6DX = '0000:3b:00.0'
CX6DX_PORT2 = '0000:3b:00.1'
BLUEFIELD = '0000:5e:00.0'
CX3 = '0000:af:00.0'
E810 = '0000:d8:00.0'


@pytest.fixture
def tree(tmp_path):
    tree = SysfsTree(tmp_path / 'host')
    devlink_emulator.add_mlx5_nic(tree, CX6DX, interface='ens1f0')
    devlink_emulator.add_mlx5_nic(tree, CX6DX_PORT2, interface='ens1f1',
                                  vhca_id=1)
    # A BlueField-2's host port while its Arm cores own the eswitch.
    devlink_emulator.add_mlx5_nic(tree, BLUEFIELD, device=0xa2d6,
                                  interface='ens5f0', eswitch_manager=False)
    # Neither is the driver's: a ConnectX-3 (mlx4) and an Intel E810.
    tree.add_function(CX3, 0x15b3, 0x1003, 0x020000, driver='mlx4_core')
    tree.add_function(E810, 0x8086, 0x1593, 0x020000, driver='ice')
    return tree


@pytest.fixture
def nic_conf(host_conf, tree, tmp_path):
    host_conf.set_override(
        'devlink_command', devlink_emulator.install(tmp_path / 'bin',
                                                    tree.root),
        'nvidia_nic_devices')
    host_conf.set_override('physical_device_mappings',
                           ['physnet1:ens1f0', 'physnet2:ens5f0'],
                           'nvidia_nic_devices')
    return host_conf



@pytest.fixture
def clock():
    return Clock()


@pytest.fixture
def driver(nic_conf, clock):
    return nvidia_nic.NvidiaNicDriver(nic_conf, clock=clock)


def only(devices, address):
    [device] = [d for d in devices if d.controlpath_id == pci(address)]
    return device


def commands(tree):
    return [e['argv'] for e in devlink_emulator.read_log(tree.root)]


def kernel_events(tree, event):
    return [e for e in sysfs_kernel.read_log(tree.root)
            if e['event'] == event]


# Discovery

def test_ports_without_vfs_are_passed_whole(driver, tree, caplog):
    with caplog.at_level(logging.WARNING, logger=nvidia_nic.__name__):
        devices = driver.discover()
    assert [d.controlpath_id for d in devices] == [
        pci(CX6DX), pci(CX6DX_PORT2), pci(BLUEFIELD)]
    device_report.validate_report('cmp1', {
        'hostname': 'cmp1', 'devices': [d.to_dict() for d in devices]})
    port = devices[0]
    assert (port.type, port.vendor, port.model) == ('NIC', '0x15b3',
                                                    '0x101d')
    assert port.std_board_info['product'] == 'ConnectX-6 Dx'
    assert port.std_board_info['interfaces'] == ['ens1f0']
    assert port.std_board_info['physical_network'] == 'physnet1'
    [deployable] = port.deployables
    assert deployable.attributes == {
        'rc': 'CUSTOM_NIC', 'trait0': 'OWNER_CYBORG', 'trait1': 'CUSTOM_PF',
        'trait2': 'CUSTOM_NIC_NVIDIA_CONNECTX6_DX',
        'trait3': 'CUSTOM_PHYSNET1'}
    [handle] = deployable.attach_handles
    assert handle.attach_info == dict(pci(CX6DX),
                                      physical_network='physnet1')
    assert devices[2].deployables[0].attributes['trait2'] == (
        'CUSTOM_NIC_NVIDIA_BLUEFIELD2')
    # The unmapped port is reported, without a physical network, and said
    # so once.
    assert 'physical_network' not in devices[1].std_board_info
    assert [r.getMessage() for r in caplog.records] == [
        'NVIDIA ConnectX-6 Dx port 0000:3b:00.1 (interfaces: ens1f1) is '
        'not in [nvidia_nic_devices] physical_device_mappings; its '
        'functions are reported without a physical network and cannot '
        'back Neutron ports.']


def test_a_port_with_vfs_lends_one_deployable_per_vf(driver, tree):
    vfs = ['0000:3b:00.2', '0000:3b:00.3']
    tree.add_vfs(CX6DX, vfs, 0x15b3, 0x101e, driver='mlx5_core')
    port = only(driver.discover(), CX6DX)
    assert [d.attach_handles[0].attach_info for d in port.deployables] == [
        dict(pci(vf), physical_network='physnet1') for vf in vfs]
    assert {d.attributes['trait1'] for d in port.deployables} == {
        'CUSTOM_VF'}
    # The VFs are no devices of their own.
    assert [d.controlpath_id for d in driver.discover()] == [
        pci(CX6DX), pci(CX6DX_PORT2), pci(BLUEFIELD)]


# Layouts: VF count and eswitch mode

def test_layout_options_offer_the_eswitch_where_devlink_reads_it(
        driver, tree, caplog):
    assert driver.layout_options(only(driver.discover(), CX6DX)) == {
        'vf_count': {'min': 0, 'max': 8},
        'eswitch_mode': {'legacy': 1, 'switchdev': 1}}
    with caplog.at_level(logging.WARNING, logger=nvidia_nic.__name__):
        options = driver.layout_options(only(driver.discover(), BLUEFIELD))
    assert options == {'vf_count': {'min': 0, 'max': 8}}
    assert 'kernel answers: Operation not supported' in caplog.text


def test_vfs_then_switchdev_and_back(driver, tree, kernel):
    device = only(driver.discover(), CX6DX)
    driver.apply_layout(device, {'vf_count': 4, 'eswitch_mode': 'switchdev'})
    assert devlink_emulator.eswitch_mode(tree.root, CX6DX) == 'switchdev'
    assert driver.devlink.eswitch_mode(CX6DX) == 'switchdev'
    port = only(driver.discover(), CX6DX)
    assert len(port.deployables) == 4
    # The VFs' representors are the port's netdevs now, but no interface
    # of the port: not listed, and their links (down until a VF is used)
    # do not make the port degraded.
    net = tree.device_dir(CX6DX) / 'net'
    assert sorted(p.name for p in net.iterdir()) == [
        'ens1f0', 'ens1f0_0', 'ens1f0_1', 'ens1f0_2', 'ens1f0_3']
    assert (net / 'ens1f0_2' / 'phys_port_name').read_text() == 'pf0vf2\n'
    assert port.std_board_info['interfaces'] == ['ens1f0']
    assert driver.health(port) == Health('healthy')
    sets = [c for c in commands(tree) if 'set' in c]
    assert sets == [['dev', 'eswitch', 'set', f'pci/{CX6DX}', 'mode',
                     'switchdev']]

    # Applied again (an agent restarting): nothing changes.
    driver.apply_layout(port, {'vf_count': 4, 'eswitch_mode': 'switchdev'})
    assert len([c for c in commands(tree) if 'set' in c]) == 1
    assert [e['count'] for e in kernel_events(tree, 'sriov_numvfs')] == [4]

    driver.apply_layout(port, {'vf_count': 0, 'eswitch_mode': 'legacy'})
    assert devlink_emulator.eswitch_mode(tree.root, CX6DX) == 'legacy'
    assert sorted(p.name for p in net.iterdir()) == ['ens1f0']
    [deployable] = only(driver.discover(), CX6DX).deployables
    assert deployable.attributes['trait1'] == 'CUSTOM_PF'


def test_vfs_created_in_switchdev_mode_get_representors(driver, tree,
                                                        kernel):
    device = only(driver.discover(), CX6DX)
    driver.apply_layout(device, {'eswitch_mode': 'switchdev'})
    driver.apply_layout(device, {'vf_count': 2})
    net = tree.device_dir(CX6DX) / 'net'
    assert sorted(p.name for p in net.iterdir()) == [
        'ens1f0', 'ens1f0_0', 'ens1f0_1']


@pytest.mark.parametrize('state, message', [
    ({'offloaded_flows': 3},
     "Error: mlx5_core: Can't change mode, E-Switch is busy.\n"
     'kernel answers: Device or resource busy'),
    ({'active_traps': 1},
     "Error: mlx5_core: Can't change mode while devlink traps are "
     'active.\nkernel answers: Operation not supported'),
])
def test_what_mlx5_core_refuses_is_a_device_action_error(
        driver, tree, kernel, state, message):
    devlink_emulator.write_state(tree.root, CX6DX, dict(
        devlink_emulator.read_state(tree.root, CX6DX), **state))
    device = only(driver.discover(), CX6DX)
    with pytest.raises(exception.DeviceActionError) as caught:
        driver.apply_layout(device, {'vf_count': 2,
                                     'eswitch_mode': 'switchdev'})
    assert message in str(caught.value)
    assert 'devlink exited with status 1' in str(caught.value)
    # Refused first: the VF count did not change either.
    assert devlink_emulator.eswitch_mode(tree.root, CX6DX) == 'legacy'
    assert kernel_events(tree, 'sriov_numvfs') == []


@pytest.mark.parametrize('layout, allowed', [
    ({'eswitch_mode': 'offloads'}, 'legacy, switchdev'),
    ({'vf_count': 4, 'eswitch_mode': 'Switchdev'}, 'legacy, switchdev'),
    ({'vf_count': 9, 'eswitch_mode': 'switchdev'}, 'from 0 to 8'),
])
def test_bad_layouts_change_nothing(driver, tree, kernel, layout, allowed):
    device = only(driver.discover(), CX6DX)
    with pytest.raises(exception.Invalid, match=allowed):
        driver.apply_layout(device, layout)
    assert [c for c in commands(tree) if 'set' in c] == []
    assert kernel_events(tree, 'sriov_numvfs') == []


def test_a_port_without_eswitch_refuses_an_eswitch_layout(driver, tree):
    device = only(driver.discover(), BLUEFIELD)
    with pytest.raises(exception.Invalid, match="'eswitch_mode' is not "
                                                'one of vf_count'):
        driver.apply_layout(device, {'eswitch_mode': 'switchdev'})


def test_a_mode_devlink_does_not_read_back_is_an_error(nic_conf, tree,
                                                       tmp_path):
    # A devlink that accepts every set and always reads legacy.
    program = tmp_path / 'stuck-devlink'
    program.write_text(
        '#!/bin/sh\n'
        'if [ "$3" = set ]; then exit 0; fi\n'
        f'echo \'{{"dev":{{"pci/{CX6DX}":{{"mode":"legacy"}}}}}}\'\n')
    program.chmod(0o755)
    nic_conf.set_override('devlink_command', str(program),
                          'nvidia_nic_devices')
    driver = nvidia_nic.NvidiaNicDriver(nic_conf)
    device = only(driver.discover(), CX6DX)
    with pytest.raises(exception.DeviceActionError,
                       match='asked for switchdev, devlink reads legacy'):
        driver.apply_layout(device, {'eswitch_mode': 'switchdev'})


def test_eswitch_commands_run_through_the_root_helper(driver, tree,
                                                      monkeypatch):
    seen = []
    monkeypatch.setattr(
        devlink.privileged, 'execute',
        lambda argv, **kw: seen.append((argv[1:], kw['root_helper'])) or
        '{"dev":{"pci/%s":{"mode":"legacy"}},"health":{}}' % CX6DX)
    reader = devlink.Devlink('devlink', 'sudo')
    assert reader.eswitch_mode(CX6DX) == 'legacy'
    reader.set_eswitch_mode(CX6DX, 'switchdev')
    assert reader.health() == []
    assert seen == [
        (['-j', 'dev', 'eswitch', 'show', f'pci/{CX6DX}'], 'sudo'),
        (['dev', 'eswitch', 'set', f'pci/{CX6DX}', 'mode', 'switchdev'],
         'sudo'),
        (['-j', 'health', 'show'], '')]


# Health and usage

def _health_reads(tree):
    return len([c for c in commands(tree) if c[1:] == ['health', 'show']])


def test_a_reporter_in_error_degrades_fw_fatal_fails(driver, tree, clock):
    device = only(driver.discover(), CX6DX)
    assert driver.health(device) == Health('healthy')
    devlink_emulator.set_reporter(tree.root, CX6DX, 'tx', state='error',
                                  error=1)
    clock.now += 5
    health = driver.health(device)
    assert health.state == 'degraded'
    assert health.reason == (
        f'devlink health reporter tx of pci/{CX6DX}/65535 is in state '
        'error (1 error(s), 0 recovered)')
    devlink_emulator.set_reporter(tree.root, CX6DX, 'fw_fatal',
                                  state='error', error=1)
    clock.now += 5
    assert driver.health(device).state == 'unhealthy'
    # The other port's reporters are its own.
    assert driver.health(only(driver.discover(), CX6DX_PORT2)) == Health(
        'healthy')


def test_a_recovered_error_degrades_until_the_next_reading(driver, tree,
                                                           clock):
    device = only(driver.discover(), CX6DX)
    assert driver.health(device) == Health('healthy')
    devlink_emulator.set_reporter(tree.root, CX6DX, 'rx', error=2,
                                  recover=2)
    clock.now += 5
    health = driver.health(device)
    assert health.state == 'degraded'
    assert 'reporter rx' in health.reason and 'now recovered' in (
        health.reason)
    clock.now += 5
    assert driver.health(device) == Health('healthy')


def test_one_reading_serves_every_port_for_the_interval(driver, tree,
                                                        clock):
    devices = driver.discover()
    for _ in range(3):
        for device in devices:
            driver.health(device)
            driver.usage(device)
        clock.now += 1
    assert _health_reads(tree) == 1
    clock.now += 2
    driver.health(devices[0])
    assert _health_reads(tree) == 2


def test_interval_0_reads_no_reporters(nic_conf, tree, clock):
    nic_conf.set_override('devlink_health_interval', 0,
                          'nvidia_nic_devices')
    driver = nvidia_nic.NvidiaNicDriver(nic_conf, clock=clock)
    devlink_emulator.set_reporter(tree.root, CX6DX, 'fw_fatal',
                                  state='error', error=1)
    assert driver.health(only(driver.discover(), CX6DX)) == Health(
        'healthy')
    assert _health_reads(tree) == 0


def test_without_devlink_health_stands_on_link_and_pci(nic_conf, tree,
                                                       tmp_path, caplog):
    nic_conf.set_override('devlink_command', str(tmp_path / 'no-devlink'),
                          'nvidia_nic_devices')
    driver = nvidia_nic.NvidiaNicDriver(nic_conf)
    device = only(driver.discover(), CX6DX)
    with caplog.at_level(logging.WARNING, logger=nvidia_nic.__name__):
        assert driver.health(device) == Health('healthy')
    assert 'cannot be read' in caplog.text
    (tree.device_dir(CX6DX) / 'net' / 'ens1f0' / 'operstate').write_text(
        'down\n')
    health = driver.health(device)
    assert health.state == 'degraded'
    assert health.reason.startswith('interface ens1f0 link is down')


def test_usage_counts_interfaces_and_reporter_errors(driver, tree):
    statistics = tree.device_dir(CX6DX) / 'net' / 'ens1f0' / 'statistics'
    (statistics / 'rx_bytes').write_text('4096\n')
    devlink_emulator.set_reporter(tree.root, CX6DX, 'tx', error=3,
                                  recover=3)
    counters = driver.usage(only(driver.discover(), CX6DX)).counters
    assert counters['rx_bytes'] == 4096
    assert counters['devlink_tx_errors'] == 3
    assert counters['devlink_fw_fatal_errors'] == 0


def test_health_json_of_devlink_is_read_as_printed():
    text = ('{"health":{"pci/0000:3b:00.0":[{"reporter":"fw","state":'
            '"healthy","error":0,"recover":0,"auto_dump":true}],'
            '"pci/0000:3b:00.0/65535":[{"reporter":"tx","state":"error",'
            '"error":4,"recover":3,"last_dump_date":"2024-01-02",'
            '"last_dump_time":"10:11:12","grace_period":500,'
            '"auto_recover":true,"auto_dump":true}],'
            '"auxiliary/mlx5_core.eth.0":[{"reporter":"rx","state":'
            '"healthy","error":0,"recover":0}]}}')
    reporters = devlink.parse_health(text)
    assert [(r.address, r.name, r.state, r.errors, r.recovers)
            for r in reporters] == [
        (CX6DX, 'fw', 'healthy', 0, 0), (CX6DX, 'tx', 'error', 4, 3),
        (None, 'rx', 'healthy', 0, 0)]
    with pytest.raises(ValueError, match='without reporter'):
        devlink.parse_health('{"health":{"pci/x":[{"reporter":"fw"}]}}')
    with pytest.raises(ValueError, match='not JSON'):
        devlink.parse_health('Failed to connect to devlink Netlink')


# Cleaning

def test_clean_resets_the_vf(driver, tree, kernel):
    device = only(driver.discover(), CX6DX)
    driver.apply_layout(device, {'vf_count': 2})
    port = only(driver.discover(), CX6DX)
    handle = port.deployables[1].attach_handles[0]
    assert (tree.device_dir('0000:3b:10.1') / 'reset').exists()
    driver.clean(DriverAttachHandle(attach_type='PCI',
                                    attach_info=handle.attach_info))
    assert pci_lifecycle.wait_for(lambda: kernel_events(tree, 'reset') == [
        {'event': 'reset', 'device': '0000:3b:10.1'}])
