"""The instance half for libvirt: a ``<hostdev>`` element per VAN.

PCI functions become ``<hostdev mode='subsystem' type='pci'>`` with the
address in ``0x`` hex (the handle's ``device`` is libvirt's ``slot``) and
``managed`` as the handle asks; mdevs become ``<hostdev mode='subsystem'
type='mdev'>`` naming the mdev by uuid, with the model of the mdev type's
device API. TEST_PCI handles name functions that do not exist, so, as in
Nova, nothing is attached for them.

On a running guest (``attach``, ``detach``) each element goes through the
domain's ``attachDeviceFlags`` and ``detachDeviceFlags``, live and in the
persistent definition at once.
"""
from typing import Protocol
from typing import runtime_checkable
from xml.etree import ElementTree

from cyborg.os_acc import base
from cyborg.os_acc import exception
from cyborg.os_acc import objects

# libvirt's virDomainModificationImpact, without importing libvirt: the
# running guest, and the definition it starts from next time.
AFFECT_LIVE = 1
AFFECT_CONFIG = 2


@runtime_checkable
class Domain(Protocol):
    """What the plugin uses of a ``libvirt.virDomain``."""

    def attachDeviceFlags(self, xml: str, flags: int = 0) -> int: ...

    def detachDeviceFlags(self, xml: str, flags: int = 0) -> int: ...

    def XMLDesc(self, flags: int = 0) -> str: ...


def _domain(guest: object) -> Domain:
    if not isinstance(guest, Domain):
        raise TypeError(f'the guest is a {type(guest).__name__}, not a '
                        'libvirt virDomain')
    return guest


def _identity(element: ElementTree.Element) -> dict[str, str] | None:
    """What tells ``element``'s device apart in a domain, as libvirt
    matches it: its source address (a hostdev), else its address in the
    guest; None when it has neither."""
    for path in ('source/address', 'address'):
        found = element.find(path)
        if found is not None:
            return dict(found.attrib)
    return None


def in_domain(domain_xml: str, device_xml: str) -> bool:
    """Whether the domain of ``domain_xml`` holds the device of
    ``device_xml``, found by its source address or guest address."""
    device = ElementTree.fromstring(device_xml)
    wanted = _identity(device)
    if wanted is None:
        return False
    return any(_identity(found) == wanted for found in
               ElementTree.fromstring(domain_xml).iterfind(
                   f'devices/{device.tag}'))


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

    live = True

    def check_guest(self, guest: object) -> None:
        _domain(guest)

    def attach(self, instance: objects.Instance, van: objects.VAN,
               guest: object) -> None:
        if van.config is not None:
            _domain(guest).attachDeviceFlags(van.config,
                                             AFFECT_LIVE | AFFECT_CONFIG)

    def detach(self, instance: objects.Instance, van: objects.VAN,
               guest: object) -> None:
        """Ask libvirt to detach, then look: a guest may not let go of a
        PCI device (its OS must answer the unplug), and libvirt returns
        once it has asked."""
        if van.config is None:
            return
        domain = _domain(guest)
        domain.detachDeviceFlags(van.config, AFFECT_LIVE | AFFECT_CONFIG)
        if in_domain(domain.XMLDesc(0), van.config):
            raise exception.DeviceError(
                reason=f'instance {instance.uuid} has not released the '
                       'device yet (its guest OS must accept the unplug); '
                       'detach it again later')
