"""The device half of MDEV attach handles: mediated devices (vGPUs).

The attach handle's uuid is the mdev's uuid, its info the parent PCI
function and ``asked_type``. The mdev usually exists already (the agent
creates it when the request is bound); if it does not, it is created by
writing its uuid to the type's ``create``, and removed again when the VAN
is released. An mdev this driver did not create is left alone.
"""
import logging
import os

from cyborg.accelerator import pci
from cyborg.os_acc import base
from cyborg.os_acc import exception
from cyborg.os_acc import objects

LOG = logging.getLogger(__name__)

_TRUE = 'true'


class MdevDriver(base.DeviceDriver):
    """Mediated devices of the asked type under a parent PCI function."""

    name = 'mdev'
    attach_handle_types = frozenset({'MDEV'})

    def validate(self, arq: objects.ARQ) -> None:
        objects.PciAddress.from_info(arq.attach_handle_info)
        if not arq.attach_handle_info.get('asked_type'):
            raise ValueError('attach_handle_info has no asked_type (the mdev '
                             'type)')
        if not objects.is_uuid(arq.attach_handle_uuid):
            raise ValueError(f'attach_handle_uuid is '
                             f'{arq.attach_handle_uuid!r}, not an mdev uuid')

    def prepare_van(self, arq: objects.ARQ) -> objects.VAN:
        parent_address = str(objects.PciAddress.from_info(
            arq.attach_handle_info))
        mdev_uuid = str(arq.attach_handle_uuid).lower()
        asked = arq.attach_handle_info['asked_type']
        parent = self.sysfs.get(parent_address)
        if parent is None:
            raise exception.DeviceError(
                reason=f'the parent PCI function {parent_address} of mdev '
                       f'{mdev_uuid} does not exist on this host')
        types = {t.type_id: t for t in parent.mdev_types}
        mdev_type = types.get(asked)
        if mdev_type is None:
            raise exception.DeviceError(
                reason=f'PCI function {parent_address} offers no mdev type '
                       f'{asked} (it offers: {", ".join(types) or "none"})')
        created = self._ensure(parent, mdev_type, mdev_uuid)
        return self.new_van(arq, parent=parent_address, mdev_uuid=mdev_uuid,
                            mdev_type=asked,
                            device_api=mdev_type.device_api or 'vfio-pci',
                            created=_TRUE if created else 'false')

    def _ensure(self, parent: pci.PciFunction, mdev_type: pci.MdevType,
                mdev_uuid: str) -> bool:
        """Make sure mdev ``mdev_uuid`` of ``mdev_type`` exists under
        ``parent``; whether it had to be created."""
        for other in parent.mdev_types:
            if mdev_uuid in other.devices:
                if other.type_id != mdev_type.type_id:
                    raise exception.DeviceError(
                        reason=f'mdev {mdev_uuid} exists on '
                               f'{parent.address} with type '
                               f'{other.type_id}, not {mdev_type.type_id}')
                LOG.debug('mdev %s of type %s exists on %s', mdev_uuid,
                          mdev_type.type_id, parent.address)
                return False
        elsewhere = f'/sys/bus/mdev/devices/{mdev_uuid}'
        if self.sysfs.exists(elsewhere):
            raise exception.DeviceError(
                reason=f'mdev {mdev_uuid} exists under another parent '
                       f'({self.sysfs.address_of(elsewhere)}), not '
                       f'{parent.address}')
        if mdev_type.available_instances < 1:
            raise exception.DeviceError(
                reason=f'PCI function {parent.address} has no room for '
                       f'another mdev of type {mdev_type.type_id}')
        type_dir = os.path.join(parent.sysfs_path, 'mdev_supported_types',
                                mdev_type.type_id)
        self.sysfs.write(os.path.join(type_dir, 'create'), mdev_uuid)
        if not os.path.isdir(os.path.join(parent.sysfs_path, mdev_uuid)):
            raise exception.DeviceError(
                reason=f'mdev {mdev_uuid} was not created on '
                       f'{parent.address}')
        LOG.info('Created mdev %s of type %s on %s', mdev_uuid,
                 mdev_type.type_id, parent.address)
        return True

    def unprepare_van(self, van: objects.VAN) -> None:
        if van.device_info.get('created') != _TRUE:
            return
        parent = self.sysfs.get(van.device_info['parent'])
        mdev_uuid = van.device_info['mdev_uuid']
        if parent is None:
            LOG.warning('The parent %s of mdev %s is gone',
                        van.device_info['parent'], mdev_uuid)
            return
        mdev_dir = os.path.join(parent.sysfs_path, mdev_uuid)
        if not os.path.isdir(mdev_dir):
            return
        self.sysfs.write(os.path.join(mdev_dir, 'remove'), '1')
        LOG.info('Removed mdev %s from %s', mdev_uuid, parent.address)
