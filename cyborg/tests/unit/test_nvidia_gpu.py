"""The NVIDIA GPU driver on fake sysfs trees: PGPUs, vGPUs, mdevs."""
import logging
import os
import stat

import pytest

from cyborg.accelerator import drivers
from cyborg.accelerator import pci
from cyborg.accelerator.drivers import nvidia_gpu
from cyborg.common import device_report
from cyborg.common import exception
from cyborg.tests.harness.sysfs import SysfsTree

T4 = '0000:3b:00.0'
T4_SPARE = '0000:5e:00.0'
A100 = '0000:41:00.0'
A100_VFS = ['0000:41:00.4', '0000:41:00.5', '0000:41:00.6', '0000:41:00.7',
            '0000:41:01.0', '0000:41:01.1', '0000:41:01.2', '0000:41:01.3']
RTX = '0000:65:00.0'
VIRTIO_GPU = '0000:00:02.0'
USED = ['8a4b0b3e-2c11-4f5a-9d1e-3b8f6f2a0001',
        '8a4b0b3e-2c11-4f5a-9d1e-3b8f6f2a0002']
NEW = '0f3e9a52-7d1c-4e8b-a6f0-5c2d9b7e1a33'
# (type, name, instances) as a T4 offers them on the vGPU host driver.
T4_TYPES = [('nvidia-222', 'GRID T4-1B', 16), ('nvidia-223', 'GRID T4-2B', 8),
            ('nvidia-224', 'GRID T4-2B4', 8), ('nvidia-225', 'GRID T4-1A', 16),
            ('nvidia-226', 'GRID T4-2A', 8), ('nvidia-227', 'GRID T4-4A', 4),
            ('nvidia-228', 'GRID T4-8A', 2), ('nvidia-229', 'GRID T4-16A', 1),
            ('nvidia-230', 'GRID T4-2Q', 8)]
# An A100 40GB offers one vGPU per VF; max_instance caps the GPU.
A100_TYPES = [('nvidia-472', 'GRID A100-4C', 10),
              ('nvidia-474', 'GRID A100-10C', 4),
              ('nvidia-476', 'GRID A100-40C', 1)]


def _description(instances):
    return (f'num_heads=1, frl_config=60, framebuffer={16384 // instances}M, '
            f'max_resolution=4096x2160, max_instance={instances}')


def _add_t4(tree, address, used=()):
    tree.add_function(address, 0x10de, 0x1eb8, 0x030200, driver='nvidia',
                      subsystem_vendor=0x10de, subsystem_device=0x12a2)
    for type_id, name, instances in T4_TYPES:
        devices = used if type_id == 'nvidia-222' else ()
        type_dir = tree.add_mdev_type(address, type_id, name,
                                      instances - len(devices),
                                      devices=devices)
        (type_dir / 'description').write_text(_description(instances))


def _add_a100_vfs(tree, used_vf=None):
    tree.add_vfs(A100, A100_VFS, 0x10de, 0x20f1, driver='nvidia',
                 numa_node=1)
    for vf in A100_VFS:
        for type_id, name, instances in A100_TYPES:
            devices = [USED[0]] if (vf, type_id) == used_vf else ()
            type_dir = tree.add_mdev_type(vf, type_id, name,
                                          0 if devices else 1,
                                          devices=devices)
            (type_dir / 'description').write_text(_description(instances))


@pytest.fixture
def tree(tmp_path):
    tree = SysfsTree(tmp_path / 'root')
    tree.add_function('0000:00:00.0', 0x8086, 0x2020, 0x060000)
    tree.add_function(VIRTIO_GPU, 0x1af4, 0x1050, 0x030000,
                      driver='virtio-pci', numa_node=None)
    tree.add_function('0000:00:03.0', 0x1234, 0x1111, 0x030000,
                      driver='bochs-drm', numa_node=None)
    _add_t4(tree, T4, used=USED)
    _add_t4(tree, T4_SPARE)
    tree.add_function(A100, 0x10de, 0x20f1, 0x030200, driver='nvidia',
                      numa_node=1, subsystem_vendor=0x10de,
                      subsystem_device=0x145f, sriov_totalvfs=20)
    tree.add_function(RTX, 0x10de, 0x24b0, 0x030000, driver='vfio-pci')
    tree.add_function('0000:65:00.1', 0x10de, 0x228b, 0x040300,
                      driver='vfio-pci')
    return tree


def _driver(conf, tree, types=(), addresses=(), root_helper=''):
    conf.set_override('host', 'cmp1')
    conf.set_override('sysfs_root', tree.root, 'agent')
    conf.set_override('root_helper', root_helper, 'agent')
    conf.set_override('enabled_vgpu_types', list(types), 'gpu_devices')
    conf.set_override('vgpu_type_addresses', list(addresses), 'gpu_devices')
    return nvidia_gpu.NvidiaGpuDriver(conf)


def _by_address(devices):
    return {d.deployables[0].name.split('_', 1)[1]: d for d in devices}


def _validate(devices):
    device_report.validate_report('cmp1', {
        'hostname': 'cmp1', 'devices': [d.to_dict() for d in devices]})


def _mdev(address, n, type_id):
    domain, bus, slot = address.split(':')
    device, function = slot.split('.')
    return {'domain': domain, 'bus': bus, 'device': device,
            'function': function, 'asked_type': type_id,
            'vgpu_mark': f'{type_id}_{n}'}


def test_gpus_without_a_vgpu_type_are_whole_pgpus(conf, tree):
    devices = _driver(conf, tree).discover()
    found = _by_address(devices)
    # Not the virtio/bochs VGA, the audio function or the A100's VFs.
    assert list(found) == [T4, A100, T4_SPARE, RTX]
    t4 = found[T4]
    assert (t4.type, t4.vendor, t4.model) == ('GPU', '0x10de', '0x1eb8')
    assert t4.controlpath_id == {'domain': '0000', 'bus': '3b',
                                 'device': '00', 'function': '0'}
    assert t4.std_board_info == {
        'product_id': '0x1eb8', 'class_code': '0x030200',
        'subsystem_vendor_id': '0x10de', 'subsystem_device_id': '0x12a2',
        'numa_node': 0, 'kernel_driver': 'nvidia'}
    [deployable] = t4.deployables
    assert (deployable.name, deployable.num_accelerators,
            deployable.driver_name) == ('cmp1_0000:3b:00.0', 1, 'nvidia_gpu')
    assert deployable.attributes == {
        'rc': 'PGPU', 'trait0': 'OWNER_CYBORG', 'trait1': 'CUSTOM_GPU_NVIDIA',
        'trait2': 'CUSTOM_NVIDIA_1EB8'}
    [handle] = deployable.attach_handles
    assert (handle.attach_type, handle.attach_info) == ('PCI',
                                                        t4.controlpath_id)
    rtx = found[RTX].deployables[0]
    assert rtx.attributes['trait2'] == 'CUSTOM_NVIDIA_24B0'
    assert found[RTX].std_board_info['class_code'] == '0x030000'
    _validate(devices)


def test_a_t4_with_a_vgpu_type_is_as_many_vgpus(conf, tree):
    driver = _driver(conf, tree, ['nvidia-222'], [f'nvidia-222:{T4}'])
    devices = driver.discover()
    found = _by_address(devices)
    assert list(found) == [T4, A100, T4_SPARE, RTX]
    t4 = found[T4]
    assert t4.controlpath_id['bus'] == '3b'
    assert t4.std_board_info['vgpu_type'] == 'nvidia-222'
    assert t4.std_board_info['vgpu_type_name'] == 'GRID T4-1B'
    [deployable] = t4.deployables
    # 14 free plus the 2 that exist.
    assert deployable.num_accelerators == 16
    assert deployable.attributes == {
        'rc': 'VGPU', 'trait0': 'OWNER_CYBORG', 'trait1': 'CUSTOM_GPU_NVIDIA',
        'trait2': 'CUSTOM_NVIDIA_1EB8_T4_1B'}
    assert [h.attach_type for h in deployable.attach_handles] == ['MDEV'] * 16
    assert [h.attach_info for h in deployable.attach_handles] == [
        _mdev(T4, n, 'nvidia-222') for n in range(16)]
    assert found[T4_SPARE].deployables[0].attributes['rc'] == 'PGPU'
    _validate(devices)

    # Creating an mdev moves an instance from free to used: same handles.
    type_dir = tree.device_dir(T4) / 'mdev_supported_types/nvidia-222'
    (type_dir / 'available_instances').write_text('13\n')
    (tree.device_dir(T4) / NEW).mkdir()
    (type_dir / 'devices' / NEW).symlink_to(tree.device_dir(T4) / NEW)
    again = _by_address(driver.discover())[T4].deployables[0]
    assert again.attach_handles == deployable.attach_handles


def test_an_a100_serves_vgpus_through_its_virtual_functions(conf, tree):
    _add_a100_vfs(tree, used_vf=(A100_VFS[2], 'nvidia-474'))
    driver = _driver(conf, tree, ['nvidia-474', 'nvidia-222'],
                     [f'nvidia-474:{A100}', f'nvidia-222:{T4_SPARE}'])
    devices = driver.discover()
    found = _by_address(devices)
    assert list(found) == [T4, A100, T4_SPARE, RTX]
    a100 = found[A100]
    assert (a100.model, a100.controlpath_id['bus']) == ('0x20f1', '41')
    assert a100.std_board_info['numa_node'] == 1
    [deployable] = a100.deployables
    assert deployable.name == 'cmp1_0000:41:00.0'
    assert deployable.attributes == {
        'rc': 'VGPU', 'trait0': 'OWNER_CYBORG', 'trait1': 'CUSTOM_GPU_NVIDIA',
        'trait2': 'CUSTOM_NVIDIA_20F1_A100_10C'}
    # Eight VFs say one is free, but 40GB holds four A100-10C: the VF in
    # use and the first three free ones, each the parent of its vGPU.
    assert deployable.num_accelerators == 4
    assert [h.attach_info for h in deployable.attach_handles] == [
        _mdev(vf, n, 'nvidia-474') for n, vf in enumerate(A100_VFS[:4])]
    spare = found[T4_SPARE].deployables[0]
    assert spare.num_accelerators == 16
    assert spare.attach_handles[0].attach_info == _mdev(T4_SPARE, 0,
                                                        'nvidia-222')
    _validate(devices)


def test_a_gpu_not_offering_its_type_is_left_out_until_it_does(
        conf, tree, caplog):
    driver = _driver(conf, tree, ['nvidia-474'], [f'nvidia-474:{A100}'])
    with caplog.at_level(logging.WARNING):
        assert A100 not in _by_address(driver.discover())
    assert (f'NVIDIA GPU {A100} is configured for vGPU type nvidia-474 but '
            'does not offer it (it offers: none)') in caplog.text
    # Once SR-IOV is enabled the VFs offer it.
    _add_a100_vfs(tree)
    deployable = _by_address(driver.discover())[A100].deployables[0]
    assert deployable.num_accelerators == 4

    # Without a vGPU type the A100 is no whole GPU while its VFs are
    # enabled.
    driver = _driver(conf, tree, ['nvidia-474'], [f'nvidia-474:{T4}'])
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        assert list(_by_address(driver.discover())) == [T4_SPARE, RTX]
    assert 'it offers: nvidia-222, nvidia-223' in caplog.text
    assert (f'PCI function {A100} is not reported: SR-IOV virtual '
            'functions are enabled on it') in caplog.text


def test_configured_addresses_without_a_gpu_are_warned_about_once(
        conf, tree, caplog):
    _add_a100_vfs(tree)
    driver = _driver(conf, tree, ['nvidia-222', 'nvidia-474'], [
        f'nvidia-222:{T4},{VIRTIO_GPU}, 0000:99:00.0',
        f'nvidia-474:{A100_VFS[0]}'])
    with caplog.at_level(logging.WARNING):
        devices = driver.discover()
    warnings = [r.getMessage() for r in caplog.records
                if r.levelno == logging.WARNING]
    assert warnings == [
        f'[gpu_devices] vgpu_type_addresses names {VIRTIO_GPU} for vGPU type '
        'nvidia-222, but there is no NVIDIA GPU at that address.',
        f'[gpu_devices] vgpu_type_addresses names {A100_VFS[0]} for vGPU type '
        'nvidia-474, but that is a virtual function; name its GPU '
        f'{A100} instead.',
        '[gpu_devices] vgpu_type_addresses names 0000:99:00.0 for vGPU type '
        'nvidia-222, but there is no NVIDIA GPU at that address.',
        f'PCI function {A100} is not reported: SR-IOV virtual functions are '
        'enabled on it, so it cannot be passed through whole; set its '
        'sriov_numvfs to 0, or give it a vGPU type in [gpu_devices] '
        'vgpu_type_addresses.']
    found = _by_address(devices)
    assert found[T4].deployables[0].attributes['rc'] == 'VGPU'
    # Its VFs are enabled but it is given no type: neither vGPUs nor a
    # whole GPU.
    assert A100 not in found
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        driver.discover()
    assert caplog.records == []


def test_trees_without_nvidia_gpus_yield_nothing(conf, tmp_path):
    tree = SysfsTree(tmp_path)
    assert _driver(conf, tree).discover() == []
    tree.add_function(VIRTIO_GPU, 0x1af4, 0x1050, 0x030000)
    tree.add_function('0000:00:04.0', 0x10de, 0x10f0, 0x040300)
    assert _driver(conf, tree).discover() == []


def test_malformed_devices_and_types_are_skipped(conf, tree, caplog):
    tree.write(f'sys/bus/pci/devices/{RTX}/class', 'display')
    types = 'mdev_supported_types'
    (tree.device_dir(T4) / types / 'nvidia-222/available_instances'
     ).write_text('many\n')
    (tree.device_dir(T4_SPARE) / types / 'nvidia-223/name').unlink()
    _add_a100_vfs(tree)
    tree.remove_function(A100_VFS[1])
    driver = _driver(conf, tree, ['nvidia-222', 'nvidia-223', 'nvidia-472'],
                     [f'nvidia-222:{T4}', f'nvidia-223:{T4_SPARE}',
                      f'nvidia-472:{A100}'])
    with caplog.at_level(logging.WARNING):
        found = _by_address(driver.discover())
    assert list(found) == [A100, T4_SPARE]
    assert f'Skipping PCI function {RTX}' in caplog.text
    assert 'ignoring mdev type nvidia-222' in caplog.text
    assert f'NVIDIA GPU {T4} is configured for vGPU type nvidia-222' in (
        caplog.text)
    assert 'ignoring VF: virtfn1 link points to nowhere' in caplog.text
    # A type without a name is known by its id.
    assert found[T4_SPARE].deployables[0].attributes['trait2'] == (
        'CUSTOM_NVIDIA_1EB8_NVIDIA_223')
    # A VF gone from sysfs costs one vGPU, not the GPU.
    handles = found[A100].deployables[0].attach_handles
    assert [h.attach_info['vgpu_mark'] for h in handles] == [
        f'nvidia-472_{n}' for n in range(7)]
    assert [h.attach_info['function'] for h in handles] == [
        '4', '6', '7', '0', '1', '2', '3']


@pytest.mark.parametrize('name, type_id, trait', [
    ('GRID T4-1B', 'nvidia-222', 'CUSTOM_NVIDIA_1EB8_T4_1B'),
    ('NVIDIA A40-8Q', 'nvidia-560', 'CUSTOM_NVIDIA_1EB8_A40_8Q'),
    ('GRID A100-1-5C', 'nvidia-470', 'CUSTOM_NVIDIA_1EB8_A100_1_5C'),
    ('GRID RTX6000-4Q (vCS)', 'nvidia-257',
     'CUSTOM_NVIDIA_1EB8_RTX6000_4Q_VCS'),
    (None, 'nvidia-223', 'CUSTOM_NVIDIA_1EB8_NVIDIA_223'),
    ('  ', 'nvidia-223', 'CUSTOM_NVIDIA_1EB8_NVIDIA_223'),
])
def test_vgpu_traits_are_valid_placement_traits(name, type_id, trait):
    mdev_type = pci.MdevType(type_id=type_id, name=name,
                             available_instances=1, device_api='vfio-pci')
    assert nvidia_gpu.vgpu_trait('0x1eb8', mdev_type.type_id,
                                 mdev_type.name) == trait


@pytest.mark.parametrize('types, entries, message', [
    (['nvidia/../x'], [], "enabled_vgpu_types 'nvidia/../x': not an mdev"),
    (['nvidia-222'], ['nvidia-222'],
     "vgpu_type_addresses 'nvidia-222': expected <type>:<address>"),
    (['nvidia-222'], ['nvidia-222: '], 'expected <type>:<address>'),
    (['nvidia-222'], [f'nvidia-223:{T4}'],
     "type 'nvidia-223' is not in [gpu_devices] enabled_vgpu_types "
     '(nvidia-222)'),
    (['nvidia-222'], ['nvidia-222:3b:00.0'],
     "'3b:00.0' is not a PCI address"),
    (['nvidia-222', 'nvidia-223'],
     [f'nvidia-222:{T4}', f'nvidia-223:{T4_SPARE},{T4.upper()}'],
     f'{T4} already serves type nvidia-222'),
    (['nvidia-222', 'nvidia-223'], [f'nvidia-222:{T4}'],
     'no GPU serves nvidia-223'),
], ids=['type', 'no colon', 'no address', 'not enabled', 'short address',
        'two types', 'unmapped'])
def test_invalid_configuration_fails_at_construction(conf, tree, types,
                                                     entries, message):
    with pytest.raises(exception.Invalid) as err:
        _driver(conf, tree, types, entries)
    assert message in str(err.value)


def test_loaded_by_name_and_bad_configuration_stops_loading(conf, tree):
    conf.set_override('enabled_drivers', ['nvidia_gpu'], 'agent')
    [driver] = drivers.load_drivers(conf)
    assert isinstance(driver, nvidia_gpu.NvidiaGpuDriver)
    conf.set_override('enabled_vgpu_types', ['nvidia-222'], 'gpu_devices')
    with pytest.raises(exception.DriverError) as err:
        drivers.load_drivers(conf)
    assert 'no GPU serves nvidia-222' in str(err.value)


# Mediated devices

def _create_file(tree, address, type_id):
    return tree.device_dir(address) / 'mdev_supported_types' / type_id / (
        'create')


def _bus_link(tree, address, uuid):
    parent = tree.device_dir(address).relative_to(tree.base)
    tree.link(f'sys/bus/mdev/devices/{uuid}', f'{parent}/{uuid}')


def test_create_mdev_writes_the_uuid_to_the_types_create_file(conf, tree):
    _add_a100_vfs(tree)
    driver = _driver(conf, tree)
    driver.create_mdev(_mdev(T4, 3, 'nvidia-223'), NEW.upper())
    assert _create_file(tree, T4, 'nvidia-223').read_text() == NEW
    driver.create_mdev(_mdev(A100_VFS[5], 0, 'nvidia-474'), NEW)
    assert _create_file(tree, A100_VFS[5], 'nvidia-474').read_text() == NEW
    assert _create_file(tree, A100_VFS[4], 'nvidia-474').read_text() == ''


def test_create_mdev_that_exists_does_nothing(conf, tree):
    _bus_link(tree, T4, USED[0])
    _driver(conf, tree).create_mdev(_mdev(T4, 0, 'nvidia-222'), USED[0])
    assert _create_file(tree, T4, 'nvidia-222').read_text() == ''


@pytest.mark.parametrize('attach_info, uuid, message', [
    (_mdev(T4, 0, 'nvidia-223'), USED[0],
     f'a different mdev {USED[0]} is in the way, on {T4}'),
    (_mdev(T4_SPARE, 0, 'nvidia-222'), USED[1],
     f'a different mdev {USED[1]} is in the way, on {T4}'),
    (_mdev(T4, 0, 'nvidia-474'), NEW, 'it offers no mdev type nvidia-474'),
    (_mdev(T4, 0, '../nvidia-222'), NEW, "'../nvidia-222' is not an mdev"),
    (_mdev(VIRTIO_GPU, 0, 'nvidia-222'), NEW,
     f'there is no NVIDIA function at {VIRTIO_GPU}'),
    (_mdev('0000:3c:00.0', 0, 'nvidia-222'), NEW, 'no NVIDIA function'),
    ({'asked_type': 'nvidia-222'}, NEW, 'names no PCI function'),
    (dict(_mdev(T4, 0, 'nvidia-222'), bus='3b/..'), NEW,
     "'0000:3b/..:00.0' is not a PCI address"),
    (_mdev(T4, 0, 'nvidia-222'), 'not-a-uuid', 'is not a UUID'),
], ids=['type in use', 'other gpu', 'unknown type', 'bad type', 'not nvidia',
        'no function', 'no address', 'bad address', 'bad uuid'])
def test_create_mdev_refuses(conf, tree, attach_info, uuid, message):
    _bus_link(tree, T4, USED[1])
    with pytest.raises(exception.DeviceActionError) as err:
        _driver(conf, tree).create_mdev(attach_info, uuid)
    assert message in str(err.value)
    for address in (T4, T4_SPARE):
        for type_id, _, _ in T4_TYPES:
            assert _create_file(tree, address, type_id).read_text() == ''


def test_create_mdev_write_errors_are_raised(conf, tree):
    create = _create_file(tree, T4, 'nvidia-223')
    create.unlink()
    create.mkdir()
    with pytest.raises(exception.DeviceActionError) as err:
        _driver(conf, tree).create_mdev(_mdev(T4, 0, 'nvidia-223'), NEW)
    assert f"Cannot create mdev on {T4}: cannot write '{NEW}' to " in (
        str(err.value))
    assert 'Is a directory' in str(err.value)


def test_remove_mdev_writes_1_to_its_remove_file(conf, tree):
    remove = tree.device_dir(T4) / USED[0] / 'remove'
    driver = _driver(conf, tree)
    driver.remove_mdev(_mdev(T4, 0, 'nvidia-222'), USED[0])
    assert remove.read_text() == '1'
    remove.write_text('')
    _bus_link(tree, T4, USED[0])
    driver.remove_mdev(_mdev(T4, 0, 'nvidia-222'), USED[0])
    assert remove.read_text() == '1'


def test_remove_mdev_that_is_gone_does_nothing(conf, tree):
    _driver(conf, tree).remove_mdev(_mdev(T4, 0, 'nvidia-222'), NEW)
    _driver(conf, tree).remove_mdev(_mdev(T4, 0, 'nvidia-222'), NEW)


def test_remove_mdev_refuses_another_gpus_mdev_and_write_errors(conf, tree):
    remove = tree.device_dir(T4) / USED[0] / 'remove'
    _bus_link(tree, T4, USED[0])
    driver = _driver(conf, tree)
    with pytest.raises(exception.DeviceActionError) as err:
        driver.remove_mdev(_mdev(T4_SPARE, 0, 'nvidia-222'), USED[0])
    assert f'mdev {USED[0]} belongs to {T4}' in str(err.value)
    assert remove.read_text() == ''
    remove.unlink()
    remove.mkdir()
    with pytest.raises(exception.DeviceActionError) as err:
        driver.remove_mdev(_mdev(T4, 0, 'nvidia-222'), USED[0])
    assert "cannot write '1'" in str(err.value)


@pytest.fixture
def helper(tmp_path, monkeypatch):
    """A root helper that records its arguments, then runs them; the
    agent is made to look unprivileged."""
    script = tmp_path / 'helper'
    script.write_text('#!/bin/sh\n'
                      f'echo "$@" >> {tmp_path}/helper.log\n'
                      'case "$2" in *nvidia-229*) echo denied >&2; exit 1;;'
                      ' esac\n'
                      'exec "$@"\n')
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setattr(os, 'geteuid', lambda: 1000)
    return script


def test_unprivileged_agents_write_through_the_root_helper(conf, tree,
                                                           helper):
    driver = _driver(conf, tree, root_helper=str(helper))
    create = _create_file(tree, T4, 'nvidia-223')
    driver.create_mdev(_mdev(T4, 0, 'nvidia-223'), NEW)
    assert create.read_text() == NEW
    remove = tree.device_dir(T4) / USED[0] / 'remove'
    driver.remove_mdev(_mdev(T4, 0, 'nvidia-222'), USED[0])
    assert remove.read_text() == '1'
    log = (helper.parent / 'helper.log').read_text().splitlines()
    parent = tree.path(f'sys/class/mdev_bus/{T4}')
    assert log == [f'tee {parent}/mdev_supported_types/nvidia-223/create',
                   f'tee {parent}/{USED[0]}/remove']
    with pytest.raises(exception.DeviceActionError) as err:
        driver.create_mdev(_mdev(T4, 0, 'nvidia-229'), NEW)
    assert 'tee exited with status 1: denied' in str(err.value)
