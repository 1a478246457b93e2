"""vGPUs on the SR-IOV VFs of NVIDIA GPUs (vGPU software 17 and later):
the files' format, discovery, layouts, and a VF given its type at bind and
taken back at release, over the emulated kernel and vGPU manager
(``harness/nvidia_vgpu_host.py``)."""
import sys

import pytest

from cyborg.accelerator.drivers import nvidia_gpu
from cyborg.accelerator.drivers import nvidia_vgpu
from cyborg.accelerator.drivers import pci_lifecycle
from cyborg.agent import cache as agent_cache
from cyborg.agent import layouts as agent_layouts
from cyborg.common import device_report
from cyborg.common import exception
from cyborg.db.api import attach_handles
from cyborg.tests.harness import nvidia_vgpu_host
from cyborg.tests.harness import nvml_double
from cyborg.tests.harness import sysfs_kernel
from cyborg.tests.harness.sysfs import pci_parts
from cyborg.tests.harness.sysfs import vf_addresses

H100 = '0000:3b:00.0'
TRAIT_10C = 'CUSTOM_NVIDIA_2330_H100XM_10C'
# What an L40S VF lists (the guide's example layout: header, then
# "<id>  : <name>" lines).
L40S_TEXT = ('ID    : vGPU Name\n'
             '1145  : NVIDIA L40S-1B\n'
             '1146  : NVIDIA L40S-2B\n'
             '1155  : NVIDIA L40S-48Q\n')


def _driver(conf, tree, types=(), addresses=()):
    conf.set_override('host', 'cmp1')
    conf.set_override('sysfs_root', tree.root, 'agent')
    conf.set_override('enabled_vgpu_types', list(types), 'gpu_devices')
    conf.set_override('vgpu_type_addresses', list(addresses), 'gpu_devices')
    return nvidia_gpu.NvidiaGpuDriver(conf)


def _vfs(n):
    return vf_addresses(H100, n)


@pytest.fixture
def h100(tree):
    """An H100 with 16 vGPU VFs, made before the kernel starts (a test
    asks for this fixture before ``kernel``)."""
    nvidia_vgpu_host.add_gpu(tree, H100, vfs=16)


def _handle_info(vf, type_id):
    return dict(pci_parts(vf), vgpu_type=type_id, managed='false',
                vfio_driver='nvidia')


def test_the_type_list_is_parsed_as_the_driver_writes_it():
    assert nvidia_vgpu.parse_types(L40S_TEXT) == [
        nvidia_vgpu.VgpuType('1145', 'NVIDIA L40S-1B'),
        nvidia_vgpu.VgpuType('1146', 'NVIDIA L40S-2B'),
        nvidia_vgpu.VgpuType('1155', 'NVIDIA L40S-48Q')]
    assert nvidia_vgpu.parse_types('ID    : vGPU Name\n') == []
    sizes = [nvidia_vgpu.VgpuType('1', n).framebuffer_gb for n in (
        'NVIDIA L40S-48Q', 'NVIDIA H100-3-40C', 'NVIDIA H100XM-10C', 'x')]
    assert sizes == [48, None, 10, None]


def test_a_gpu_without_a_type_is_reported_offering_nothing(conf, tree,
                                                           caplog):
    nvidia_vgpu_host.add_gpu(tree, H100, vfs=16)
    [gpu] = _driver(conf, tree).discover()
    assert (gpu.type, gpu.model, gpu.deployables) == ('GPU', '0x2330', [])
    assert gpu.std_board_info['vgpu_mode'] == 'sriov'
    assert 'gives it one of: 1008 (NVIDIA H100XM-10C)' in caplog.text


def test_a_configured_type_gives_one_vgpu_per_vf_the_framebuffer_holds(
        conf, tree):
    nvidia_vgpu_host.add_gpu(tree, H100, vfs=16)
    [gpu] = _driver(conf, tree, ['1008'], [f'1008:{H100}']).discover()
    [deployable] = gpu.deployables
    # 80 GB hold 8 vGPUs of 10 GB, though all 16 empty VFs list the type.
    assert deployable.num_accelerators == 8
    assert deployable.attributes == {
        'rc': 'VGPU', 'trait0': 'OWNER_CYBORG',
        'trait1': 'CUSTOM_GPU_NVIDIA', 'trait2': TRAIT_10C}
    assert [(h.attach_type, h.attach_info)
            for h in deployable.attach_handles] == [
        ('PCI', _handle_info(vf, '1008')) for vf in _vfs(8)]
    assert gpu.std_board_info['vgpu_type_name'] == 'NVIDIA H100XM-10C'
    device_report.validate_report('cmp1', {
        'hostname': 'cmp1', 'devices': [gpu.to_dict()]})


def test_vf_handles_are_bound_by_the_agent_and_mdevs_unchanged():
    vf = _handle_info(_vfs(1)[0], '1008')
    assert not attach_handles.instant('PCI', vf)
    assert not attach_handles.instant('PCI', device_report.canonical_json(
        vf))
    assert attach_handles.instant('PCI', '{"bus":"3b"}')
    assert not attach_handles.instant('MDEV', {'asked_type': 'nvidia-222'})


def test_layout_options_and_a_layout_restricting_the_gpu(conf, tree):
    nvidia_vgpu_host.add_gpu(tree, H100, vfs=16)
    driver = _driver(conf, tree)
    [gpu] = driver.discover()
    assert driver.layout_options(gpu) == {
        'vf_count': {'min': 0, 'max': 16},
        'vgpu_type': {'1008': 8, '1009': 5, '1010': 4, '1011': 2,
                      '1012': 1},
        'vgpu_count': {'min': 0, 'max': 8}}
    driver.apply_layout(gpu, {'vgpu_type': '1010', 'vgpu_count': 3})
    [gpu] = driver.discover()
    assert [h.attach_info['vgpu_type']
            for h in gpu.deployables[0].attach_handles] == ['1010'] * 3
    for layout, says in [({'vgpu_type': '1012', 'vgpu_count': 2},
                          'above the 1 vGPUs of type 1012'),
                         ({'vgpu_type': '999', 'vgpu_count': 1},
                          "vgpu_type '999' is not one of 1008, 1009"),
                         ({'vgpu_type': '1008', 'vgpu_count': 9},
                          'from 0 to 8')]:
        with pytest.raises(exception.Invalid, match=says):
            driver.apply_layout(gpu, layout)
    driver.apply_layout(gpu, {'vgpu_type': '1010', 'vgpu_count': 0})
    [gpu] = driver.discover()
    assert gpu.deployables[0].attach_handles == []


@pytest.fixture
def h100_without_vfs(tree):
    nvidia_vgpu_host.add_gpu(tree, H100)


def test_enabling_vfs_and_choosing_a_type_in_one_layout(
        conf, tree, h100_without_vfs, kernel):
    driver = _driver(conf, tree)
    [gpu] = driver.discover()
    assert gpu.deployables[0].attributes['rc'] == 'PGPU'
    options = driver.layout_options(gpu)
    # The types are the VFs' to list: offered with the VFs.
    assert options['vgpu_type'] == {'after': ['vf_count']}
    with pytest.raises(exception.Invalid, match='once vf_count is applied'):
        device_report.check_layout(options, {'vgpu_type': '1011',
                                             'vgpu_count': 2})
    layout = {'vf_count': 16, 'vgpu_type': '1011', 'vgpu_count': 2}
    device_report.check_layout(options, layout)
    driver.apply_layout(gpu, layout)
    [gpu] = driver.discover()
    assert [h.attach_info['function'] for h in
            gpu.deployables[0].attach_handles] == ['0', '1']


def test_a_bind_gives_the_vf_its_type_and_a_release_takes_it_back(
        conf, tree, h100, kernel):
    driver = _driver(conf, tree, ['1011'], [f'1011:{H100}'])
    [gpu] = driver.discover()
    first, second = (h.attach_info for h in
                     gpu.deployables[0].attach_handles)
    driver.create_mdev(first, 'handle-1')
    driver.create_mdev(first, 'handle-1')  # already its type: nothing
    assert nvidia_vgpu.current_type(driver.bus, _vfs(1)[0]) == '1011'
    # The others now list only what fits beside one 40 GB vGPU.
    listed = (tree.device_dir(_vfs(2)[1]) / nvidia_vgpu.CREATABLE
              ).read_text()
    assert nvidia_vgpu.parse_types(listed) == [
        nvidia_vgpu.VgpuType('1011', 'NVIDIA H100XM-40C')]
    # Bound or not, the GPU keeps offering its two 40 GB vGPUs.
    [gpu] = driver.discover()
    assert [h.attach_info for h in
            gpu.deployables[0].attach_handles] == [first, second]
    driver.create_mdev(second, 'handle-2')
    with pytest.raises(exception.DeviceActionError,
                       match='did not create a vGPU of type 1011; the VF '
                             'can take: none'):
        driver.create_mdev(_handle_info(_vfs(3)[2], '1011'), 'handle-3')
    with pytest.raises(exception.DeviceActionError,
                       match='it has vGPU type 1011, not 1008'):
        driver.create_mdev(_handle_info(_vfs(1)[0], '1008'), 'handle-1')
    with pytest.raises(exception.DeviceActionError,
                       match='VFs have vGPUs of type 1011'):
        driver.apply_layout(gpu, {'vgpu_type': '1011', 'vgpu_count': 0})
    driver.remove_mdev(first, 'handle-1')
    driver.remove_mdev(first, 'handle-1')  # none left: nothing
    assert nvidia_vgpu.current_type(driver.bus, _vfs(1)[0]) is None
    events = [(e['event'], e['device'], e.get('type'), e.get('error', ''))
              for e in sysfs_kernel.read_log(tree.root)
              if e['event'] == 'vgpu_type']
    assert events == [
        ('vgpu_type', _vfs(1)[0], '1011', ''),
        ('vgpu_type', _vfs(2)[1], '1011', ''),
        ('vgpu_type', _vfs(3)[2], None,
         'EINVAL: vGPU type 1011 is not creatable on the VF'),
        ('vgpu_type', _vfs(1)[0], '0', '')]


def test_clean_takes_the_type_back_and_resets_the_vf(conf, tree, h100,
                                                     kernel):
    driver = _driver(conf, tree)
    info = _handle_info(_vfs(1)[0], '1012')
    driver.create_mdev(info, 'handle-1')
    driver.clean(device_report.DriverAttachHandle(attach_type='PCI',
                                                  attach_info=info))
    assert nvidia_vgpu.current_type(driver.bus, _vfs(1)[0]) is None

    def events():
        return [e['event'] for e in sysfs_kernel.read_log(tree.root)
                if e['device'] == _vfs(1)[0]]

    # The reset is the kernel's, after write() returned.
    assert pci_lifecycle.wait_for(lambda: len(events()) == 3)
    assert events() == ['vgpu_type', 'vgpu_type', 'reset']


@pytest.mark.parametrize('written, error', [
    ('abc', 'EINVAL: not a number'),
    ('0', 'EPERM: the VF has no vGPU'),
])
def test_the_emulated_manager_refuses_what_the_driver_refuses(
        tree, written, error):
    nvidia_vgpu_host.add_gpu(tree, H100, vfs=1)
    vf = _vfs(1)[0]
    (tree.device_dir(vf) / nvidia_vgpu.CURRENT).write_text(written)
    logged = []
    nvidia_vgpu_host.follow(tree, H100, lambda *a, **k: logged.append(k))
    assert logged == [{'asked': written, 'error': error}]
    assert (tree.device_dir(vf) / nvidia_vgpu.CURRENT).read_text() == '0\n'


def test_handles_naming_no_nvidia_vf_are_refused(conf, tree):
    nvidia_vgpu_host.add_gpu(tree, H100, vfs=1)
    driver = _driver(conf, tree)
    for info, says in [(_handle_info(H100, '1008'), 'names no VF'),
                       (_handle_info(_vfs(1)[0], 'x'), "'x' is not a vGPU")]:
        with pytest.raises(exception.DeviceActionError, match=says):
            driver.create_mdev(info, 'handle')


def test_a_reboot_gets_the_vfs_and_their_type_back(conf, tree,
                                                   h100_without_vfs,
                                                   kernel):
    # What the agent kept is applied again at its start, VFs first, on a
    # GPU whose VFs the reboot took away.
    driver = _driver(conf, tree)
    [gpu] = driver.discover()
    cache = agent_cache.AgentCache()
    cache.record_layout(gpu.controlpath_id, 'nvidia_gpu', {
        'vf_count': 16, 'vgpu_type': '1010', 'vgpu_count': 2})
    assert agent_layouts.reapply([driver], cache, lambda layout: layout) == 1
    [gpu] = driver.discover()
    assert [h.attach_info['vgpu_type'] for h in
            gpu.deployables[0].attach_handles] == ['1010', '1010']


def test_nvml_says_how_many_vgpus_a_type_holds(conf, tree, h100,
                                               monkeypatch):
    # The board's limits as NVML gives them; after a restart with a VF
    # typed, the narrowed lists no longer say, and NVML still does.
    state = f'{tree.root}/nvml.json'
    nvml_double.write_state(state, {H100: nvml_double.gpu(
        'H100-80GB', vgpu_max_instances={
            '1008': 8, '1009': 4, '1010': 4, '1011': 2, '1012': 1})})
    monkeypatch.setitem(sys.modules, 'pynvml', nvml_double.module(state))
    driver = _driver(conf, tree)
    [gpu] = driver.discover()
    # 80 // 16 is 5 by the names; the board holds 4 of 16 GB.
    assert driver.layout_options(gpu)['vgpu_type']['1009'] == 4
    (tree.device_dir(_vfs(1)[0]) / nvidia_vgpu.CURRENT).write_text('1010\n')
    # The manager's lists, narrowed by the 20 GB vGPU.
    for vf in _vfs(16)[1:]:
        (tree.device_dir(vf) / nvidia_vgpu.CREATABLE).write_text(
            nvidia_vgpu_host.HEADER + '\n1010  : NVIDIA H100XM-20C\n')
    restarted = _driver(conf, tree, ['1010'], [f'1010:{H100}'])
    [gpu] = restarted.discover()
    assert gpu.deployables[0].num_accelerators == 4


def test_a_vf_with_the_type_stays_a_handle_under_a_smaller_count(
        conf, tree, h100):
    # VF 5 has the type (a vGPU made before the layout): it is one of the
    # two handles, whatever its place among the VFs.
    (tree.device_dir(_vfs(6)[5]) / nvidia_vgpu.CURRENT).write_text('1010\n')
    driver = _driver(conf, tree)
    [gpu] = driver.discover()
    driver.apply_layout(gpu, {'vgpu_type': '1010', 'vgpu_count': 2})
    [gpu] = driver.discover()
    assert [h.attach_info['function'] for h in
            gpu.deployables[0].attach_handles] == ['0', '5']
