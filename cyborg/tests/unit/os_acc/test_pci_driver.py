"""The PCI device half on fake sysfs trees."""
import errno

import pytest

from cyborg.accelerator import pci as pci_lib
from cyborg.os_acc import exception
from cyborg.os_acc import objects
from cyborg.os_acc.drivers import pci
from cyborg.tests.harness.sysfs import SysfsTree
from cyborg.tests.unit.os_acc import fakes

NIC = '0000:af:00.0'
VF = '0000:af:01.0'
VF2 = '0000:af:01.1'
GPU = '0000:3b:00.0'
GPU_AUDIO = '0000:3b:00.1'
NO_IOMMU = '0000:5e:00.0'


@pytest.fixture
def kernel(tmp_path):
    tree = SysfsTree(tmp_path)
    tree.add_function(NIC, 0x8086, 0x1593, 0x020000, driver='ice')
    tree.add_vfs(NIC, [VF, VF2], 0x8086, 0x1889, driver='iavf')
    tree.add_function(GPU, 0x10de, 0x1eb8, 0x030200, driver='nvidia',
                      iommu_group=40)
    tree.add_function(GPU_AUDIO, 0x10de, 0x10f8, 0x040300,
                      driver='snd_hda_intel', iommu_group=40)
    tree.add_function(NO_IOMMU, 0x1af4, 0x1041, 0x020000, iommu_group=None)
    kernel = fakes.FakeKernel(tree)
    kernel.load_driver('vfio-pci')
    return kernel


def _arq(address, **info):
    raw = fakes.arq('PCI', address=address)
    raw['attach_handle_info'].update(info)
    return objects.ARQ.from_dict(raw)


def _driver_of(kernel, address):
    return pci_lib.PciBus(kernel.root).get(address).driver


def test_managed_function_is_left_to_libvirt(kernel):
    driver = pci.PciDriver(kernel)
    van = driver.prepare_van(_arq(VF))
    assert van.driver == 'pci'
    assert van.device_info == {'address': VF, 'managed': 'true',
                               'original_driver': 'iavf',
                               'rebound': 'false'}
    driver.post_plug(van)
    driver.unprepare_van(van)
    assert kernel.writes == []
    assert _driver_of(kernel, VF) == 'iavf'


def test_unmanaged_function_is_bound_to_vfio_and_given_back(kernel):
    driver = pci.PciDriver(kernel)
    van = driver.prepare_van(_arq(VF, managed='false'))
    assert _driver_of(kernel, VF) == 'vfio-pci'
    assert van.device_info['rebound'] == 'true'
    device = '/sys/devices/pci0000:00/' + VF
    assert kernel.writes == [
        (f'{device}/driver_override', 'vfio-pci'),
        ('/sys/bus/pci/drivers/iavf/unbind', VF),
        ('/sys/bus/pci/drivers_probe', VF)]
    driver.post_plug(van)

    kernel.writes.clear()
    # As nova-compute would after a restart: from what it kept.
    driver.unprepare_van(objects.VAN.from_dict(van.to_dict()))
    assert _driver_of(kernel, VF) == 'iavf'
    assert kernel.writes == [
        (f'{device}/driver_override', 'iavf'),
        ('/sys/bus/pci/drivers/vfio-pci/unbind', VF),
        ('/sys/bus/pci/drivers_probe', VF),
        (f'{device}/driver_override', '\n')]
    # Again: nothing left to do.
    kernel.writes.clear()
    driver.unprepare_van(van)
    assert kernel.writes == []


def test_unmanaged_function_already_on_vfio_is_left_there(kernel):
    kernel.tree.bind(VF, 'vfio-pci')
    driver = pci.PciDriver(kernel)
    van = driver.prepare_van(_arq(VF, managed='false'))
    driver.unprepare_van(van)
    assert kernel.writes == []
    assert _driver_of(kernel, VF) == 'vfio-pci'


def test_unbound_function_goes_back_to_no_driver(kernel):
    kernel.tree.bind(VF, None)
    driver = pci.PciDriver(kernel)
    van = driver.prepare_van(_arq(VF, managed='false'))
    assert van.device_info['original_driver'] == ''
    assert _driver_of(kernel, VF) == 'vfio-pci'
    driver.unprepare_van(van)
    assert _driver_of(kernel, VF) is None


def test_missing_function(kernel):
    with pytest.raises(exception.DeviceError,
                       match='PCI function 0000:0c:00.1 does not exist'):
        pci.PciDriver(kernel).prepare_van(_arq('0000:0c:00.1'))


def test_function_in_no_iommu_group(kernel):
    with pytest.raises(exception.DeviceError, match='in no IOMMU group'):
        pci.PciDriver(kernel).prepare_van(_arq(NO_IOMMU))


def test_vfio_not_loaded_leaves_the_host_driver(kernel):
    kernel.tree.remove('sys/bus/pci/drivers/vfio-pci')
    with pytest.raises(exception.DeviceError,
                       match='to vfio-pci: that driver is not loaded'):
        pci.PciDriver(kernel).prepare_van(_arq(VF, managed='false'))
    assert kernel.writes == []
    assert _driver_of(kernel, VF) == 'iavf'


def test_failed_bind_gives_the_function_back(kernel):
    kernel.refuse['/sys/bus/pci/drivers_probe'] = errno.ENODEV
    with pytest.raises(exception.DeviceError, match='No such device'):
        pci.PciDriver(kernel).prepare_van(_arq(VF, managed='false'))
    assert _driver_of(kernel, VF) == 'iavf'
    device = '/sys/devices/pci0000:00/' + VF
    assert kernel.writes == [
        (f'{device}/driver_override', 'vfio-pci'),
        ('/sys/bus/pci/drivers/iavf/unbind', VF),
        ('/sys/bus/pci/drivers_probe', VF),
        (f'{device}/driver_override', 'iavf'),
        ('/sys/bus/pci/drivers_probe', VF),
        (f'{device}/driver_override', '\n')]


def test_iommu_group_shared_with_a_host_driver(kernel):
    driver = pci.PciDriver(kernel)
    van = driver.prepare_van(_arq(GPU, managed='false'))
    with pytest.raises(exception.DeviceError) as raised:
        driver.post_plug(van)
    assert str(raised.value) == (
        'IOMMU group 40 of PCI function 0000:3b:00.0 also holds '
        '0000:3b:00.1 (snd_hda_intel), still used by the host; bind them '
        'to vfio-pci too or use managed "true"')
    # Once the audio function is given to the instance as well, it is
    # viable.
    driver.prepare_van(_arq(GPU_AUDIO, managed='false'))
    driver.post_plug(van)


@pytest.mark.parametrize('info, message', [
    ({'managed': 'no'}, "managed is 'no', not \"true\" or \"false\""),
    ({'bus': '0xg1'}, "'bus' is '0xg1', not a string of hex digits"),
    ({'device': '20'}, "'device' is '20', larger than 0x1f"),
])
def test_validate(kernel, info, message):
    with pytest.raises(ValueError) as raised:
        pci.PciDriver(kernel).validate(_arq(VF, **info))
    assert message in str(raised.value)


def test_a_vf_served_by_its_own_vfio_driver_stays_on_it(kernel):
    # An SR-IOV vGPU VF: unmanaged, and the nvidia driver serves VFIO.
    kernel.tree.add_vfs(GPU, ['0000:3b:10.0'], 0x10de, 0x2330,
                        driver='nvidia')
    driver = pci.PciDriver(kernel)
    van = driver.prepare_van(_arq('0000:3b:10.0', managed='false',
                                  vfio_driver='nvidia'))
    driver.post_plug(van)
    driver.unprepare_van(van)
    assert van.device_info['rebound'] == 'false'
    assert kernel.writes == []
    assert _driver_of(kernel, '0000:3b:10.0') == 'nvidia'


def test_a_vf_not_on_the_driver_that_serves_it_is_refused(kernel):
    driver = pci.PciDriver(kernel)
    with pytest.raises(exception.DeviceError,
                       match='bound to iavf, not to nvidia'):
        driver.prepare_van(_arq(VF, managed='false', vfio_driver='nvidia'))
    assert kernel.writes == []
