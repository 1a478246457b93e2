"""The instance half for libvirt: a ``<hostdev>`` element per VAN.

PCI functions become ``<hostdev mode='subsystem' type='pci'>`` with the
address in ``0x`` hex (the handle's ``device`` is libvirt's ``slot``) and
``managed`` as the handle asks; mdevs become ``<hostdev mode='subsystem'
type='mdev'>`` naming the mdev by uuid, with the model of the mdev type's
device API. TEST_PCI handles name functions that do not exist, so, as in
Nova, nothing is attached for them.
"""
from xml.etree import ElementTree

from cyborg.os_acc import base
from cyborg.os_acc import objects


def _hostdev(hostdev_type: str, managed: bool, **extra: str
             ) -> tuple[ElementTree.Element, ElementTree.Element]:
    """A ``<hostdev>`` element, and its ``<source>``."""
    attributes = {'mode': 'subsystem', 'type': hostdev_type,
                  'managed': 'yes' if managed else 'no', **extra}
    hostdev = ElementTree.Element('hostdev', attributes)
    return hostdev, ElementTree.SubElement(hostdev, 'source')


def pci_hostdev(address: objects.PciAddress, managed: bool = True) -> str:
    """The ``<hostdev>`` of PCI function ``address``."""
    hostdev, source = _hostdev('pci', managed)
    ElementTree.SubElement(
        source, 'address', domain=f'0x{address.domain:04x}',
        bus=f'0x{address.bus:02x}', slot=f'0x{address.device:02x}',
        function=f'0x{address.function:x}')
    return ElementTree.tostring(hostdev, encoding='unicode')


def mdev_hostdev(mdev_uuid: str, model: str = 'vfio-pci') -> str:
    """The ``<hostdev>`` of mdev ``mdev_uuid``; libvirt never manages
    mdevs."""
    hostdev, source = _hostdev('mdev', False, model=model)
    ElementTree.SubElement(source, 'address', uuid=mdev_uuid)
    return ElementTree.tostring(hostdev, encoding='unicode')


class LibvirtPlugin(base.InstancePlugin):
    """libvirt guests: ``<hostdev>`` elements for PCI functions and
    mdevs."""

    name = 'libvirt'
    attach_handle_types = frozenset({'PCI', 'MDEV', 'TEST_PCI'})

    def plug(self, instance: objects.Instance,
             van: objects.VAN) -> str | None:
        if van.attach_handle_type == 'PCI':
            return pci_hostdev(
                objects.PciAddress.from_info(van.attach_handle_info),
                objects.is_managed(van.attach_handle_info))
        if van.attach_handle_type == 'MDEV':
            return mdev_hostdev(
                van.device_info.get('mdev_uuid')
                or str(van.attach_handle_uuid),
                van.device_info.get('device_api', 'vfio-pci'))
        return None
