"""os-acc's live attach and detach against a real libvirt daemon running a
tiny diskless QEMU guest under TCG (``libvirt_guest``): TEST_PCI requests
attach as emulated USB tablets, and a PCI request makes the real hostdev
XML, which libvirt refuses without VFIO: that real failure drives the
rollback.
"""
import pytest

from cyborg.os_acc import exception
from cyborg.os_acc import manager
from cyborg.os_acc import objects
from cyborg.os_acc.drivers import fake_pci
from cyborg.os_acc.drivers import pci
from cyborg.tests.harness.libvirt_guest import INACTIVE
from cyborg.tests.harness.libvirt_guest import EmulatedPlugin
from cyborg.tests.harness.libvirt_guest import connection  # noqa: F401
from cyborg.tests.harness.libvirt_guest import domain  # noqa: F401
from cyborg.tests.harness.sysfs import SysfsTree
from cyborg.tests.unit.os_acc import fakes

# One worker for every module on the libvirtd the first starts and its
# last stops (``libvirt_guest.connection``), so that none stops it under
# another (with --dist loadgroup).
pytestmark = pytest.mark.xdist_group('libvirtd')

VF = '0000:af:01.0'


@pytest.fixture
def plugin():
    return EmulatedPlugin()


@pytest.fixture
def host(tmp_path, plugin):
    tree = SysfsTree(tmp_path)
    tree.add_function('0000:af:00.0', 0x8086, 0x1593, 0x020000,
                      driver='ice')
    tree.add_vfs('0000:af:00.0', [VF], 0x8086, 0x1889, driver='iavf')
    kernel = fakes.FakeKernel(tree)
    return manager.Manager(
        [pci.PciDriver(kernel), fake_pci.FakePciDriver(kernel)], [plugin])


def _arq(instance, handle_type='TEST_PCI', **fields):
    return fakes.arq(handle_type, address=VF, instance_uuid=instance,
                     **fields)


def test_attach_detach_and_rollback_on_a_running_guest(
        host, plugin, domain):  # noqa: F811
    instance = objects.InstanceInfo(domain.UUIDString())
    first, second = _arq(instance.uuid), _arq(instance.uuid)
    vans = host.attach(instance, [first, second], 'libvirt', domain)
    both = {first['uuid'], second['uuid']}
    assert plugin.tablets(domain) == both
    assert plugin.tablets(domain, INACTIVE) == both

    host.detach(instance, [vans[0]], 'libvirt', domain)
    assert plugin.tablets(domain) == {second['uuid']}
    assert plugin.tablets(domain, INACTIVE) == {second['uuid']}
    assert vans[0].device_state == objects.DeviceState.RELEASED

    # The tablet goes in, then libvirt refuses the PCI function for
    # real: the tablet is taken out again, live and from the definition.
    third = _arq(instance.uuid)
    function = _arq(instance.uuid, 'PCI')
    with pytest.raises(exception.AttachFailed) as caught:
        host.attach(instance, [third, function], 'libvirt', domain)
    assert caught.value.arq == function['uuid']
    message = str(caught.value)
    assert 'failed at the live attach (plugin libvirt)' in message
    assert message.endswith('Everything this attach had done was undone.')
    assert plugin.tablets(domain) == {second['uuid']}
    assert plugin.tablets(domain, INACTIVE) == {second['uuid']}

    # A request whose VAN was not kept is detached as well.
    host.detach(instance, [second], 'libvirt', domain)
    assert plugin.tablets(domain) == set()
    assert plugin.tablets(domain, INACTIVE) == set()
