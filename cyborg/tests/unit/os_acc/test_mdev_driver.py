"""The MDEV device half on fake sysfs trees."""
import errno

import pytest

from cyborg.accelerator import pci as pci_lib
from cyborg.os_acc import exception
from cyborg.os_acc import objects
from cyborg.os_acc.drivers import mdev
from cyborg.tests.harness.sysfs import SysfsTree
from cyborg.tests.unit.os_acc import fakes

GPU = '0000:3b:00.0'
OTHER_GPU = '0000:d8:00.0'
EXISTING = '4b20d080-1b54-4048-85b3-a6a62d165c01'
NEW = 'b2107403-110c-45b0-af87-7cc0d9f33a8d'
INFO = {'domain': '0000', 'bus': '3b', 'device': '00', 'function': '0',
        'asked_type': 'nvidia-223', 'vgpu_mark': 'nvidia-223_0'}


@pytest.fixture
def kernel(tmp_path):
    tree = SysfsTree(tmp_path)
    tree.add_function(GPU, 0x10de, 0x1eb8, 0x030200, driver='nvidia')
    tree.add_mdev_type(GPU, 'nvidia-222', 'GRID T4-1B', 16)
    tree.add_mdev_type(GPU, 'nvidia-223', 'GRID T4-2B', 7,
                       devices=[EXISTING])
    tree.add_function(OTHER_GPU, 0x10de, 0x1eb8, 0x030200, driver='nvidia')
    return fakes.FakeKernel(tree)


def _arq(mdev_uuid, **info):
    return objects.ARQ.from_dict(fakes.arq(
        'MDEV', info=dict(INFO, **info), attach_handle_uuid=mdev_uuid))


def _type(kernel, address, type_id):
    function = pci_lib.PciBus(kernel.root).get(address)
    return {t.type_id: t for t in function.mdev_types}[type_id]


def test_existing_mdev_is_used_and_kept(kernel):
    driver = mdev.MdevDriver(kernel)
    van = driver.prepare_van(_arq(EXISTING))
    assert van.device_info == {'parent': GPU, 'mdev_uuid': EXISTING,
                               'mdev_type': 'nvidia-223',
                               'device_api': 'vfio-pci', 'created': 'false'}
    driver.post_plug(van)
    driver.unprepare_van(van)
    assert kernel.writes == []
    assert EXISTING in _type(kernel, GPU, 'nvidia-223').devices


def test_missing_mdev_is_created_then_removed(kernel):
    driver = mdev.MdevDriver(kernel)
    van = driver.prepare_van(_arq(NEW))
    assert van.device_info['created'] == 'true'
    assert van.attach_handle_uuid == NEW
    created = _type(kernel, GPU, 'nvidia-223')
    assert created.devices == tuple(sorted([EXISTING, NEW]))
    assert created.available_instances == 6
    device = '/sys/devices/pci0000:00/' + GPU
    assert kernel.writes == [
        (f'{device}/mdev_supported_types/nvidia-223/create', NEW)]
    # Once more, as a retry would: it exists now, so is not created.
    assert driver.prepare_van(_arq(NEW)).device_info['created'] == 'false'

    kernel.writes.clear()
    driver.unprepare_van(objects.VAN.from_dict(van.to_dict()))
    assert kernel.writes == [(f'{device}/{NEW}/remove', '1')]
    after = _type(kernel, GPU, 'nvidia-223')
    assert after.devices == (EXISTING,)
    assert after.available_instances == 7
    # Removing what is gone succeeds.
    driver.unprepare_van(van)
    assert len(kernel.writes) == 1


def test_mdev_of_another_type(kernel):
    with pytest.raises(exception.DeviceError) as raised:
        mdev.MdevDriver(kernel).prepare_van(
            _arq(EXISTING, asked_type='nvidia-222'))
    assert str(raised.value) == (
        f'mdev {EXISTING} exists on {GPU} with type nvidia-223, not '
        'nvidia-222')


def test_mdev_under_another_parent(kernel):
    kernel.tree.add_mdev_type(OTHER_GPU, 'nvidia-223', None, 4,
                              devices=[NEW])
    kernel.tree.link(f'sys/bus/mdev/devices/{NEW}',
                     str(kernel.tree.device_dir(OTHER_GPU)
                         .relative_to(kernel.tree.base) / NEW))
    with pytest.raises(exception.DeviceError,
                       match=f'exists under another parent \\({OTHER_GPU}'):
        mdev.MdevDriver(kernel).prepare_van(_arq(NEW))
    assert kernel.writes == []


def test_type_not_offered(kernel):
    with pytest.raises(exception.DeviceError) as raised:
        mdev.MdevDriver(kernel).prepare_van(_arq(NEW, asked_type='nvidia-9'))
    assert str(raised.value) == (
        f'PCI function {GPU} offers no mdev type nvidia-9 (it offers: '
        'nvidia-222, nvidia-223)')


def test_missing_parent(kernel):
    with pytest.raises(exception.DeviceError,
                       match='parent PCI function 0000:3c:00.0 of mdev'):
        mdev.MdevDriver(kernel).prepare_van(_arq(NEW, bus='3c'))


def test_no_room_left(kernel):
    gpu = kernel.tree.device_dir(GPU).relative_to(kernel.tree.base)
    kernel.tree.write(f'{gpu}/mdev_supported_types/nvidia-223/'
                      'available_instances', 0)
    with pytest.raises(exception.DeviceError, match='has no room'):
        mdev.MdevDriver(kernel).prepare_van(_arq(NEW))
    assert kernel.writes == []


def test_kernel_refuses_the_create(kernel):
    device = '/sys/devices/pci0000:00/' + GPU
    kernel.refuse[f'{device}/mdev_supported_types/nvidia-223/create'] = (
        errno.EINVAL)
    with pytest.raises(exception.DeviceError, match='Invalid argument'):
        mdev.MdevDriver(kernel).prepare_van(_arq(NEW))
    assert _type(kernel, GPU, 'nvidia-223').devices == (EXISTING,)


@pytest.mark.parametrize('mdev_uuid, info, message', [
    (NEW, {'asked_type': ''}, 'no asked_type'),
    ('not-a-uuid', {}, "attach_handle_uuid is 'not-a-uuid', not an mdev"),
    (NEW, {'function': '8'}, "'function' is '8', larger than 0x7"),
])
def test_validate(kernel, mdev_uuid, info, message):
    with pytest.raises(ValueError, match=message):
        mdev.MdevDriver(kernel).validate(_arq(mdev_uuid, **info))
