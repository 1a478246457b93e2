"""mdevs that nova-compute creates (``mdev_creator = nova``): what the
mdev drivers report, and that the agent leaves those mdevs alone.

Nova creating an mdev is emulated the way libvirt does it: a write of the
handle's uuid to the type's ``create`` file, which the emulated kernel
(``cyborg.tests.harness.sysfs_kernel``) follows, one ``step`` at a time.
"""
import json

import oslo_messaging as messaging
import pytest

from cyborg import context as cyborg_context
from cyborg.accelerator.drivers import generic_pci
from cyborg.accelerator.drivers import nvidia_gpu
from cyborg.agent import manager as agent_manager
from cyborg.agent import resource_tracker
from cyborg.agent.cache import AgentCache
from cyborg.common import device_report
from cyborg.common import exception
from cyborg.db.api import attach_handles
from cyborg.tests.harness import sysfs_kernel
from cyborg.tests.harness.sysfs import SysfsTree
from cyborg.tests.harness.sysfs import pci_parts as _pci
from cyborg.tests.utils import InProcess

T4 = '0000:af:00.0'
T4_TYPES = [('nvidia-222', 'GRID T4-1B', 4), ('nvidia-223', 'GRID T4-2B', 2)]
# A card offering its mdev type on its SR-IOV VFs, one mdev per VF.
CARD = '0000:5e:00.0'
CARD_VFS = ['0000:5e:00.1', '0000:5e:00.2', '0000:5e:00.3']
NOVA_MDEV = '6d7e3b2a-1c4f-4a8e-9b0d-2f3e4a5b6c01'
OWNER = {'mdev_creator': 'nova'}


@pytest.fixture
def tree(tmp_path):
    tree = SysfsTree(tmp_path / 'host')
    tree.add_t4(T4, T4_TYPES)
    tree.add_function(CARD, 0x1d0f, 0x7001, 0x120000, driver='card',
                      sriov_totalvfs=4)
    tree.add_vfs(CARD, CARD_VFS, 0x1d0f, 0x7002, driver='card')
    for vf in CARD_VFS:
        tree.add_mdev_type(vf, 'card-1', 'card slice', 1)
    return tree


@pytest.fixture
def kernel(tree):
    kernel = sysfs_kernel.Kernel(tree.root)
    kernel.prime()
    return kernel


def _nvidia(conf, creator, type_id='nvidia-222'):
    conf.set_override('mdev_creator', creator, 'gpu_devices')
    conf.set_override('enabled_vgpu_types', [type_id], 'gpu_devices')
    conf.set_override('vgpu_type_addresses', [f'{type_id}:{T4}'],
                      'gpu_devices')
    return nvidia_gpu.NvidiaGpuDriver(conf)


def _generic(conf, creator):
    conf.set_override('mdev_creator', creator, 'generic_pci')
    conf.set_override('device_specs', [json.dumps({'address': CARD})],
                      'generic_pci')
    return generic_pci.GenericPciDriver(conf)


def _deployable(driver, address):
    [device] = [d for d in driver.discover()
                if d.controlpath_id == _pci(address)]
    device_report.validate_report('cmp1', {
        'hostname': 'cmp1', 'devices': [device.to_dict()]})
    [deployable] = device.deployables
    return deployable


def _nova_creates(tree, kernel, handle, mdev_uuid):
    """What nova-compute does for a bound handle: create the mdev of
    ``asked_type`` on the parent function the handle names."""
    info = handle.attach_info
    parent = '{domain}:{bus}:{device}.{function}'.format(**info)
    create = (tree.device_dir(parent) / 'mdev_supported_types'
              / info['asked_type'] / 'create')
    create.write_text(mdev_uuid)
    kernel.step()
    assert tree.path(f'sys/bus/mdev/devices/{mdev_uuid}').exists()


def test_nova_mode_handles_carry_what_nova_creates_the_mdev_from(
        host_conf, tree, kernel):
    cyborg_handles = _deployable(_nvidia(host_conf, 'cyborg'),
                                 T4).attach_handles
    driver = _nvidia(host_conf, 'nova')
    deployable = _deployable(driver, T4)
    assert deployable.attributes['rc'] == 'VGPU'
    assert deployable.attributes['trait0'] == 'OWNER_CYBORG'
    # The spec's fields: the parent's PCI address parts and asked_type,
    # all strings; and who creates the mdev. Cyborg mode is as before.
    assert [h.attach_info for h in deployable.attach_handles] == [
        dict(_pci(T4), asked_type='nvidia-222', vgpu_mark=f'nvidia-222_{n}',
             **OWNER) for n in range(4)]
    assert [h.attach_info for h in cyborg_handles] == [
        dict(_pci(T4), asked_type='nvidia-222', vgpu_mark=f'nvidia-222_{n}')
        for n in range(4)]
    assert all(device_report.nova_creates_mdev(h.attach_type, h.attach_info)
               for h in deployable.attach_handles)
    assert not any(device_report.nova_creates_mdev(h.attach_type,
                                                   h.attach_info)
                   for h in cyborg_handles)

    # Nova's mdevs for bound handles are the handles' own: the device
    # offers as many as before (available_instances and the existing
    # mdevs of the type add up to max_instance), no more, no fewer.
    _nova_creates(tree, kernel, deployable.attach_handles[0], NOVA_MDEV)
    type_dir = tree.device_dir(T4) / 'mdev_supported_types/nvidia-222'
    assert (type_dir / 'available_instances').read_text().strip() == '3'
    assert _deployable(driver, T4).attach_handles == (
        deployable.attach_handles)
    others = ['6d7e3b2a-1c4f-4a8e-9b0d-2f3e4a5b6c0' + str(n)
              for n in range(2, 5)]
    for handle, mdev_uuid in zip(deployable.attach_handles[1:], others,
                                 strict=True):
        _nova_creates(tree, kernel, handle, mdev_uuid)
    assert _deployable(driver, T4).attach_handles == (
        deployable.attach_handles)
    # The layout options still see the whole device's capacity.
    device = [d for d in driver.discover()
              if d.controlpath_id == _pci(T4)][0]
    assert driver.layout_options(device)['mdev_type'] == {
        'nvidia-222': 4, 'nvidia-223': 2}


def test_nova_mode_mdevs_on_vfs_keep_their_handles(host_conf, tree, kernel):
    driver = _generic(host_conf, 'nova')
    # Not reported whole while its VFs are enabled: its layout is set as
    # the agent would, from an earlier report.
    device = device_report.DriverDevice(
        type='PCI', vendor='0x1d0f', model='0x7001',
        controlpath_id=_pci(CARD))
    driver.apply_layout(device, {'mdev_type': 'card-1', 'mdev_count': 3})
    deployable = _deployable(driver, CARD)
    assert deployable.attributes['rc'] == 'CUSTOM_MDEV'
    assert 'OWNER_CYBORG' in deployable.attributes.values()
    assert [h.attach_info for h in deployable.attach_handles] == [
        dict(_pci(vf), asked_type='card-1', vgpu_mark=f'card-1_{n}', **OWNER)
        for n, vf in enumerate(CARD_VFS)]
    # Nova's mdev takes the one instance its VF has: still that handle.
    _nova_creates(tree, kernel, deployable.attach_handles[1], NOVA_MDEV)
    assert _deployable(driver, CARD).attach_handles == (
        deployable.attach_handles)


def test_nova_mode_reports_no_handle_of_a_type_not_offered(host_conf, tree,
                                                           caplog):
    # nova-compute could not create it: the device is left out, so no
    # bind can get such a handle.
    driver = _nvidia(host_conf, 'nova', type_id='nvidia-474')
    assert [d for d in driver.discover()
            if d.controlpath_id == _pci(T4)] == []
    assert (f'NVIDIA GPU {T4} is configured for vGPU type nvidia-474 but '
            'does not offer it (it offers: nvidia-222, nvidia-223)'
            ) in caplog.text


def test_the_driver_never_creates_removes_or_cleans_novas_mdevs(
        host_conf, tree, kernel):
    driver = _nvidia(host_conf, 'nova')
    handle = _deployable(driver, T4).attach_handles[0]
    for method in (driver.create_mdev, driver.remove_mdev):
        with pytest.raises(exception.DeviceActionError,
                           match='nova-compute creates the mdevs'):
            method(handle.attach_info, NOVA_MDEV)
    _nova_creates(tree, kernel, handle, NOVA_MDEV)
    driver.clean(device_report.DriverAttachHandle(
        'MDEV', dict(handle.attach_info, mdev_uuid=NOVA_MDEV)))
    kernel.step()
    assert [e['event'] for e in sysfs_kernel.read_log(tree.root)] == [
        'mdev_create']
    assert tree.path(f'sys/bus/mdev/devices/{NOVA_MDEV}').exists()


class _Conductor:
    """The conductor's RPC client, at the process edge: every recorded
    mdev is held."""

    def report_data(self, context, host, report):
        return {'writes': 0}

    def mdevs_owned(self, context, host, mdev_uuids):
        return list(mdev_uuids)

    def mdevs_removed(self, context, host, mdev_uuids):
        raise AssertionError('nothing is to be removed')


def test_the_agent_leaves_novas_mdevs_alone_at_start(
        host_conf, tree, kernel, tmp_path):
    driver = _nvidia(host_conf, 'nova')
    handle = _deployable(driver, T4).attach_handles[0]
    conductor = _Conductor()
    cache = AgentCache.load(str(tmp_path / 'cache.json'))
    tracker = resource_tracker.ResourceTracker(host_conf, [driver],
                                               conductor, cache=cache)
    agent = InProcess(agent_manager.AgentManager(host_conf, tracker,
                                                 conductor, glance=object()))
    ctx = cyborg_context.get_admin_context()
    # A conductor of an older release asking anyway is refused, and the
    # agent records nothing to restore.
    with pytest.raises(messaging.ExpectedException) as raised:
        agent.create_mdev(ctx, 'nvidia_gpu', handle.attach_info, NOVA_MDEV)
    assert 'nova-compute creates the mdevs' in str(raised.value.exc_info[1])
    assert cache.mdevs == {}
    _nova_creates(tree, kernel, handle, NOVA_MDEV)
    assert agent.restore_mdevs() == 0
    kernel.step()
    assert tree.path(f'sys/bus/mdev/devices/{NOVA_MDEV}').exists()
    assert [e['event'] for e in sysfs_kernel.read_log(tree.root)] == [
        'mdev_create']


@pytest.mark.parametrize('attach_type, attach_info, instant', [
    ('PCI', '{}', True),
    ('TEST_PCI', {}, True),
    ('MDEV', {'asked_type': 'nvidia-222'}, False),
    ('MDEV', '{"asked_type":"nvidia-222","mdev_creator":"cyborg"}', False),
    ('MDEV', '{"asked_type":"nvidia-222","mdev_creator":"nova"}', True),
    ('MDEV', dict(OWNER), True),
    ('PCI', dict(OWNER), True),
])
def test_which_handles_bind_instantly(attach_type, attach_info, instant):
    assert attach_handles.instant(attach_type, attach_info) is instant


def test_mdev_creator_accepts_cyborg_or_nova(conf):
    for group in ('gpu_devices', 'generic_pci'):
        assert conf[group].mdev_creator == 'cyborg'
        with pytest.raises(ValueError):
            conf.set_override('mdev_creator', 'libvirt', group)
