"""mdev layouts of any PCI device offering mediated devices (the generic
driver's and the NVIDIA driver's), on fake sysfs trees the emulated kernel
follows: options, restricting a device to mdevs of one type, and
``mdev_count`` 0 giving it back whole."""
import json

import pytest

from cyborg.accelerator.drivers import generic_pci
from cyborg.accelerator.drivers import mdev_driver
from cyborg.accelerator.drivers import nvidia_gpu
from cyborg.accelerator.drivers import pci_lifecycle
from cyborg.common import device_report
from cyborg.common import exception
from cyborg.tests.harness import sysfs_kernel
from cyborg.tests.harness.sysfs import SysfsTree
from cyborg.tests.harness.sysfs import pci_parts as _pci

# An Intel iGPU with GVT-g: a display controller offering i915 types.
IGPU = '0000:00:02.0'
IGPU_TYPES = [('i915-GVTg_V5_4', 'GVTg_V5_4', 2),
              ('i915-GVTg_V5_8', 'GVTg_V5_8', 4)]
# A card offering its mdev types on its SR-IOV VFs, one mdev per VF.
CARD = '0000:5e:00.0'
CARD_VFS = ['0000:5e:00.1', '0000:5e:00.2', '0000:5e:00.3']
NIC = '0000:3b:00.0'
T4 = '0000:af:00.0'
T4_TYPES = [('nvidia-222', 'GRID T4-1B', 16), ('nvidia-223', 'GRID T4-2B', 8)]
MDEV = '4b20d080-1b54-4048-85b3-a6a62d165c01'


@pytest.fixture
def tree(tmp_path):
    tree = SysfsTree(tmp_path / 'host')
    tree.add_function(IGPU, 0x8086, 0x3e92, 0x030000, driver='i915')
    for type_id, name, instances in IGPU_TYPES:
        tree.add_mdev_type(IGPU, type_id, name, instances)
    tree.add_function(CARD, 0x1d0f, 0x7001, 0x120000, driver='card',
                      sriov_totalvfs=4)
    tree.add_vfs(CARD, CARD_VFS, 0x1d0f, 0x7002, driver='card')
    for vf in CARD_VFS:
        tree.add_mdev_type(vf, 'card-1', 'card slice', 1)
    tree.add_function(NIC, 0x1af4, 0x1041, 0x020000, driver='virtio-pci')
    tree.add_t4(T4, T4_TYPES)
    return tree


def _generic(conf, *specs):
    conf.set_override('device_specs', [json.dumps(s) for s in specs],
                      'generic_pci')
    return generic_pci.GenericPciDriver(conf)


def _only(driver, address):
    [device] = [d for d in driver.discover()
                if d.controlpath_id == _pci(address)]
    return device


def _validate(devices):
    device_report.validate_report('cmp1', {
        'hostname': 'cmp1', 'devices': [d.to_dict() for d in devices]})


def _mdevs_created(tree):
    return [e for e in sysfs_kernel.read_log(tree.root)
            if e['event'] == 'mdev_create']


# Shared pieces

@pytest.mark.parametrize('type_id, trait', [
    ('i915-GVTg_V5_4', 'CUSTOM_MDEV_I915_GVTG_V5_4'),
    ('nvidia-222', 'CUSTOM_MDEV_NVIDIA_222'),
    ('mtty-1', 'CUSTOM_MDEV_MTTY_1'),
])
def test_mdev_traits_are_valid_placement_traits(type_id, trait):
    assert mdev_driver.mdev_trait(type_id) == trait
    assert generic_pci.CUSTOM_RE.match(trait)


def test_mdevs_are_created_on_the_function_or_else_on_its_vfs(
        host_conf, tree):
    driver = _generic(host_conf, {'address': CARD})
    card = driver.bus.get(CARD)
    vfs = [driver.bus.get(vf) for vf in CARD_VFS]
    assert [f.address for f, _ in mdev_driver.parents(
        card, vfs, 'card-1')] == CARD_VFS
    assert mdev_driver.parents(card, vfs, 'card-2') == []
    igpu = driver.bus.get(IGPU)
    [(parent, mdev_type)] = mdev_driver.parents(igpu, [], 'i915-GVTg_V5_8')
    assert (parent.address, mdev_type.available_instances) == (IGPU, 4)


# The generic driver

def test_a_selected_function_with_mdev_types_offers_mdev_layouts(
        host_conf, tree):
    driver = _generic(host_conf, {'address': IGPU, 'type': 'GPU'},
                      {'address': CARD}, {'address': NIC})
    assert driver.layout_options(_only(driver, IGPU)) == {
        'mdev_type': {'i915-GVTg_V5_4': 2, 'i915-GVTg_V5_8': 4},
        'mdev_count': {'min': 0, 'max': 4}}
    # A function without mdev types has no layout at all.
    assert driver.layout_options(_only(driver, NIC)) == {}
    # The card's PF is not reported while its VFs are enabled; its VFs,
    # selected by the same address pattern of their own, are not either.
    assert [d.controlpath_id for d in driver.discover()] == [
        _pci(IGPU), _pci(NIC)]


def test_generic_device_restricted_to_mdevs_and_back_whole(
        host_conf, tree, kernel):
    driver = _generic(host_conf, {'address': IGPU, 'type': 'GPU',
                                  'traits': ['CUSTOM_IGPU']})
    device = _only(driver, IGPU)
    [whole] = device.deployables
    assert whole.attributes['rc'] == 'PGPU'
    assert [h.attach_type for h in whole.attach_handles] == ['PCI']

    driver.apply_layout(device, {'mdev_type': 'i915-GVTg_V5_8',
                                 'mdev_count': 3})
    device = _only(driver, IGPU)
    [deployable] = device.deployables
    assert deployable.name == whole.name
    assert deployable.attributes == {
        'rc': 'VGPU', 'trait0': 'OWNER_CYBORG',
        'trait1': 'CUSTOM_PCI_8086_3E92', 'trait2': 'CUSTOM_IGPU',
        'trait3': 'CUSTOM_MDEV_I915_GVTG_V5_8'}
    assert device.std_board_info['mdev_type'] == 'i915-GVTg_V5_8'
    assert [(h.attach_type, h.attach_info) for h in deployable.attach_handles
            ] == [('MDEV', dict(_pci(IGPU), asked_type='i915-GVTg_V5_8',
                                vgpu_mark=f'i915-GVTg_V5_8_{n}'))
                  for n in range(3)]
    _validate([device])
    # Applying it again changes nothing.
    driver.apply_layout(device, {'mdev_type': 'i915-GVTg_V5_8',
                                 'mdev_count': 3})
    assert _only(driver, IGPU).deployables == [deployable]

    # A bind creates the mdev; while it exists the device cannot be
    # given back whole, nor set to another type.
    handle = deployable.attach_handles[0]
    driver.create_mdev(handle.attach_info, MDEV)
    assert pci_lifecycle.wait_for(
        lambda: tree.path(f'sys/bus/mdev/devices/{MDEV}').exists())
    assert [e['type'] for e in _mdevs_created(tree)] == ['i915-GVTg_V5_8']
    for layout in ({'mdev_type': 'i915-GVTg_V5_8', 'mdev_count': 0},
                   {'mdev_type': 'i915-GVTg_V5_4', 'mdev_count': 1}):
        with pytest.raises(exception.DeviceActionError,
                           match='mdevs of type i915-GVTg_V5_8 exist'):
            driver.apply_layout(device, layout)
    assert driver.mdev_layouts == {IGPU: ('i915-GVTg_V5_8', 3)}
    # Fewer of the same type is fine: the mdev keeps its handle.
    driver.apply_layout(device, {'mdev_type': 'i915-GVTg_V5_8',
                                 'mdev_count': 1})
    assert len(_only(driver, IGPU).deployables[0].attach_handles) == 1

    driver.remove_mdev(handle.attach_info, MDEV)
    assert pci_lifecycle.wait_for(
        lambda: not tree.path(f'sys/bus/mdev/devices/{MDEV}').exists())
    driver.apply_layout(device, {'mdev_type': 'i915-GVTg_V5_8',
                                 'mdev_count': 0})
    assert _only(driver, IGPU).deployables == [whole]


def test_generic_mdevs_of_other_types_are_custom_mdev(host_conf, tree):
    driver = _generic(host_conf, {'address': IGPU})
    device = _only(driver, IGPU)
    assert device.deployables[0].attributes['rc'] == 'CUSTOM_PCI'
    driver.apply_layout(device, {'mdev_type': 'i915-GVTg_V5_4',
                                 'mdev_count': 2})
    device = _only(driver, IGPU)
    assert device.deployables[0].attributes['rc'] == 'CUSTOM_MDEV'
    assert device.deployables[0].num_accelerators == 2
    _validate([device])


def test_generic_mdevs_on_the_vfs_of_a_selected_pf(host_conf, tree, kernel):
    driver = _generic(host_conf, {'address': CARD})
    # Not reported while its VFs are enabled, so its layout is set
    # through the agent's cache of an earlier report: as the agent would.
    device = device_report.DriverDevice(
        type='PCI', vendor='0x1d0f', model='0x7001',
        controlpath_id=_pci(CARD))
    assert driver.layout_options(device) == {
        'mdev_type': {'card-1': 3}, 'mdev_count': {'min': 0, 'max': 3}}
    driver.apply_layout(device, {'mdev_type': 'card-1', 'mdev_count': 2})
    [deployable] = _only(driver, CARD).deployables
    handles = deployable.attach_handles
    assert [h.attach_info for h in handles] == [
        dict(_pci(vf), asked_type='card-1', vgpu_mark=f'card-1_{n}')
        for n, vf in enumerate(CARD_VFS[:2])]
    # The VF of a selected PF is a parent mdevs may be created on.
    driver.create_mdev(handles[1].attach_info, MDEV)
    assert pci_lifecycle.wait_for(lambda: _mdevs_created(tree) != [])
    assert _mdevs_created(tree)[0]['device'] == CARD_VFS[1]


def test_generic_mdevs_only_on_selected_functions(host_conf, tree):
    driver = _generic(host_conf, {'address': NIC})
    with pytest.raises(exception.DeviceActionError,
                       match=f'there is no function selected by .* at '
                             f'{IGPU}'):
        driver.create_mdev(dict(_pci(IGPU), asked_type='i915-GVTg_V5_4'),
                           MDEV)


@pytest.mark.parametrize('layout, allowed', [
    ({'mdev_type': 'nvidia-222', 'mdev_count': 1},
     'not one of i915-GVTg_V5_4, i915-GVTg_V5_8'),
    ({'mdev_type': 'i915-GVTg_V5_4', 'mdev_count': 3},
     'above the 2 mdevs of type i915-GVTg_V5_4 that matching function'),
    ({'mdev_type': 'i915-GVTg_V5_8', 'mdev_count': 5}, 'from 0 to 4'),
    ({'mdev_type': 'i915-GVTg_V5_8', 'mdev_count': -1}, 'from 0 to 4'),
])
def test_bad_generic_mdev_layouts_name_what_is_allowed(host_conf, tree,
                                                       layout, allowed):
    driver = _generic(host_conf, {'address': IGPU})
    with pytest.raises(exception.Invalid, match=allowed):
        driver.apply_layout(_only(driver, IGPU), layout)
    assert driver.mdev_layouts == {}


def test_a_type_no_longer_offered_leaves_the_device_out(host_conf, tree,
                                                        caplog):
    driver = _generic(host_conf, {'address': IGPU})
    driver.apply_layout(_only(driver, IGPU), {
        'mdev_type': 'i915-GVTg_V5_4', 'mdev_count': 1})
    tree.remove(f'{tree.device_dir(IGPU).relative_to(tree.base)}/'
                'mdev_supported_types/i915-GVTg_V5_4')
    assert driver.discover() == []
    assert (f'PCI function {IGPU} was set to mdev type i915-GVTg_V5_4 but '
            'no longer offers it (it offers: i915-GVTg_V5_8)') in caplog.text


# The NVIDIA driver: the same layouts

def test_mdev_count_0_gives_a_configured_t4_back_whole(
        host_conf, tree, kernel):
    host_conf.set_override('enabled_vgpu_types', ['nvidia-222'],
                           'gpu_devices')
    host_conf.set_override('vgpu_type_addresses', [f'nvidia-222:{T4}'],
                           'gpu_devices')
    driver = nvidia_gpu.NvidiaGpuDriver(host_conf)
    device = _only(driver, T4)
    assert device.deployables[0].num_accelerators == 16
    assert driver.layout_options(device)['mdev_count'] == {'min': 0,
                                                           'max': 16}
    driver.apply_layout(device, {'mdev_type': 'nvidia-223', 'mdev_count': 0})
    [deployable] = _only(driver, T4).deployables
    assert deployable.attributes == {
        'rc': 'PGPU', 'trait0': 'OWNER_CYBORG', 'trait1': 'CUSTOM_GPU_NVIDIA',
        'trait2': 'CUSTOM_NVIDIA_1EB8'}
    assert [h.attach_type for h in deployable.attach_handles] == ['PCI']

    driver.apply_layout(device, {'mdev_type': 'nvidia-222', 'mdev_count': 4})
    [deployable] = _only(driver, T4).deployables
    assert deployable.attributes['trait2'] == 'CUSTOM_NVIDIA_1EB8_T4_1B'
    driver.create_mdev(deployable.attach_handles[0].attach_info, MDEV)
    assert pci_lifecycle.wait_for(
        lambda: tree.path(f'sys/bus/mdev/devices/{MDEV}').exists())
    with pytest.raises(exception.DeviceActionError,
                       match='set the vGPU layout on 0000:af:00.0: mdevs of '
                             'type nvidia-222 exist on it'):
        driver.apply_layout(device, {'mdev_type': 'nvidia-222',
                                     'mdev_count': 0})
    assert driver.mdev_layouts == {T4: ('nvidia-222', 4)}
