"""The device half of PCI attach handles: whole functions passed through.

A function must exist and be in an IOMMU group. With ``managed`` "true"
(the default) libvirt detaches it from its host driver itself; with
"false" libvirt expects it bound to vfio-pci already, so this driver binds
it (``driver_override``, ``unbind``, ``drivers_probe``), and gives it back
to its old driver when the VAN is released; unless the handle names the
host driver that serves VFIO for the function itself (``vfio_driver``,
e.g. ``nvidia`` for the VFs of an SR-IOV vGPU, as NVIDIA's vGPU 17
documentation has them passed through unmanaged on their own driver):
the function then stays on that driver.
"""
import logging
import os

from cyborg.os_acc import base
from cyborg.os_acc import exception
from cyborg.os_acc import objects

LOG = logging.getLogger(__name__)

VFIO = 'vfio-pci'
# Drivers that leave a function of an IOMMU group safe to give away.
_SAFE_DRIVERS = (VFIO, 'pci-stub')
_BRIDGE_CLASS = '0x0604'
_TRUE = 'true'
_FALSE = 'false'


class PciDriver(base.DeviceDriver):
    """Whole PCI functions, bound to vfio-pci when not managed by
    libvirt."""

    name = 'pci'
    attach_handle_types = frozenset({'PCI'})

    def validate(self, arq: objects.ARQ) -> None:
        objects.PciAddress.from_info(arq.attach_handle_info)
        objects.is_managed(arq.attach_handle_info)

    def prepare_van(self, arq: objects.ARQ) -> objects.VAN:
        address = str(objects.PciAddress.from_info(arq.attach_handle_info))
        managed = objects.is_managed(arq.attach_handle_info)
        function = self.sysfs.get(address)
        if function is None:
            raise exception.DeviceError(
                reason=f'PCI function {address} does not exist on this host')
        if function.iommu_group is None:
            raise exception.DeviceError(
                reason=f'PCI function {address} is in no IOMMU group; '
                       'passthrough needs the IOMMU on (intel_iommu=on)')
        van = self.new_van(arq, address=address,
                           managed=_TRUE if managed else _FALSE,
                           original_driver=function.driver or '',
                           rebound=_FALSE)
        own = arq.attach_handle_info.get('vfio_driver')
        if not managed and own and function.driver != own:
            raise exception.DeviceError(
                reason=f'PCI function {address} is bound to '
                       f'{function.driver or "no driver"}, not to {own}, '
                       'which serves it to guests')
        if not managed and not own and function.driver != VFIO:
            try:
                self._bind(address, function.sysfs_path, VFIO)
            except exception.DeviceError:
                self._give_back(address, function.sysfs_path,
                                function.driver)
                raise
            van.device_info['rebound'] = _TRUE
            LOG.info('PCI function %s moved from driver %s to %s for '
                     'accelerator request %s', address, function.driver,
                     VFIO, arq.uuid)
        return van

    def post_plug(self, van: objects.VAN) -> None:
        """An unmanaged function's IOMMU group must hold no other
        function that a host driver still uses: VFIO refuses such a
        group when the instance starts."""
        if van.device_info.get('managed') != _FALSE:
            return
        address = van.device_info['address']
        function = self.sysfs.get(address)
        group = function.iommu_group if function else None
        if group is None:
            raise exception.DeviceError(
                reason=f'PCI function {address} is gone or in no IOMMU group')
        users = []
        for member in self.sysfs.listdir(
                f'/sys/kernel/iommu_groups/{group}/devices'):
            other = self.sysfs.get(member)
            if (member == address or other is None or other.driver is None
                    or other.driver in _SAFE_DRIVERS
                    or other.matches_class(_BRIDGE_CLASS)):
                continue
            users.append(f'{member} ({other.driver})')
        if users:
            raise exception.DeviceError(
                reason=f'IOMMU group {group} of PCI function {address} also '
                       f'holds {", ".join(users)}, still used by the host; '
                       f'bind them to {VFIO} too or use managed "true"')

    def unprepare_van(self, van: objects.VAN) -> None:
        if van.device_info.get('rebound') != _TRUE:
            return
        address = van.device_info['address']
        original = van.device_info.get('original_driver') or None
        function = self.sysfs.get(address)
        if function is None:
            LOG.warning('PCI function %s of accelerator request %s is gone; '
                        'nothing to give back', address, van.arq_uuid)
            return
        if function.driver != VFIO:
            # Someone else bound it since: theirs to keep.
            LOG.debug('PCI function %s is bound to %s, not %s; leaving it',
                      address, function.driver, VFIO)
            return
        self._bind(address, function.sysfs_path, original)
        LOG.info('PCI function %s given back to driver %s after accelerator '
                 'request %s', address, original, van.arq_uuid)

    def _give_back(self, address: str, path: str,
                   original: str | None) -> None:
        """Undo a failed bind to vfio-pci, as far as it goes."""
        try:
            self._bind(address, path, original)
        except exception.DeviceError as exc:
            LOG.error('Cannot give PCI function %s back to driver %s: %s',
                      address, original, exc)

    def _bind(self, address: str, path: str, wanted: str | None) -> None:
        """Bind the function at ``address`` (sysfs directory ``path``) to
        driver ``wanted``; None leaves it with no driver."""
        driver_link = os.path.join(path, 'driver')
        current = self.sysfs.link_name(driver_link)
        if current == wanted:
            return
        if wanted is not None and not self.sysfs.exists(
                f'/sys/bus/pci/drivers/{wanted}'):
            raise exception.DeviceError(
                reason=f'cannot bind PCI function {address} to {wanted}: '
                       'that driver is not loaded')
        override = os.path.join(path, 'driver_override')
        # The override makes the probe pick ``wanted`` whatever the
        # function's ids are; it stays for vfio-pci, so that a later probe
        # does not hand the function back to a host driver, and is
        # cleared ("\n") otherwise.
        self.sysfs.write(override, wanted or '\n')
        try:
            if current is not None:
                self.sysfs.write(os.path.join(driver_link, 'unbind'),
                                 address)
            if wanted is not None:
                self.sysfs.write('/sys/bus/pci/drivers_probe', address)
        finally:
            if wanted not in (VFIO, None):
                self.sysfs.write(override, '\n')
        now = self.sysfs.link_name(driver_link)
        if now != wanted:
            raise exception.DeviceError(
                reason=f'PCI function {address} is bound to {now}, not '
                       f'{wanted}, after the rebind')
