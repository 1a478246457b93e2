"""A driver for Inspur NVMe SSDs, passed through to instances whole.

An NVMe function (class 0x010802) of vendor Inspur (0x1bd4) is one device
with one deployable and one attach handle; NVMe drives of other vendors
are left alone. A drive with SR-IOV virtual functions enabled is not
reported (its VFs are, each on its own).

Cleaning a drive formats every namespace with a user-data erase
(``nvme format --ses=1``), through the controller the kernel's nvme driver
made of the function (``/dev/nvme<N>``): a drive bound to vfio-pci has no
controller on the host and cannot be cleaned there.
"""
import os

from cyborg.accelerator import pci
from cyborg.accelerator.drivers import privileged
from cyborg.accelerator.drivers.base import trait_part
from cyborg.accelerator.drivers.pci_driver import Functions
from cyborg.accelerator.drivers.pci_driver import PciDriver
from cyborg.accelerator.drivers.pci_driver import handle_address
from cyborg.common import exception
from cyborg.common.device_report import DriverAttachHandle
from cyborg.common.device_report import DriverDevice

RESOURCE_CLASS = 'CUSTOM_SSD'
# Every namespace of the controller (NVMe base specification: NSID
# FFFFFFFFh addresses all namespaces).
ALL_NAMESPACES = '0xffffffff'


def product_trait(function: pci.PciFunction) -> str:
    """``CUSTOM_SSD_PRODUCT_ID_<DEVICE ID>``, e.g.
    ``CUSTOM_SSD_PRODUCT_ID_0001``: the trait device profiles written for
    earlier cyborg releases select a drive model by."""
    return f'CUSTOM_SSD_PRODUCT_ID_{trait_part(function.device_id[2:])}'


class InspurNvmeSsdDriver(PciDriver):
    """Reports every Inspur NVMe controller function."""

    driver_name = 'inspur_nvme_ssd'
    conf_group = 'ssd_devices'
    vendor_id = '0x1bd4'
    class_prefixes = ('0x010802',)
    noun = 'drive'

    def device(self, function: pci.PciFunction, functions: Functions
               ) -> DriverDevice | None:
        return self.whole_device(
            'SSD', function, RESOURCE_CLASS,
            ['OWNER_CYBORG', 'CUSTOM_SSD_INSPUR', product_trait(function)])

    def clean(self, handle: DriverAttachHandle) -> None:
        """Format every namespace of the drive with a user-data erase."""
        address = handle_address(handle.attach_info)
        if address is None:
            raise exception.DeviceActionError(
                action='format', device=str(handle.attach_info),
                reason='the attach handle names no PCI function')
        controllers = self._controllers(address)
        if not controllers:
            raise exception.DeviceActionError(
                action='format', device=address,
                reason='it has no NVMe controller on the host (is it bound '
                       'to the nvme driver rather than vfio-pci?)')
        options = self.conf.ssd_devices
        for controller in controllers:
            privileged.execute(
                [options.nvme_path, 'format', f'/dev/{controller}',
                 f'--namespace-id={ALL_NAMESPACES}', '--ses=1', '--force'],
                action='format', device=address,
                root_helper=self.conf.agent.root_helper,
                timeout=options.format_timeout)
        self.log.info('Formatted NVMe drive %s (%s).', address,
                      ', '.join(controllers))

    def _controllers(self, address: str) -> list[str]:
        try:
            return sorted(os.listdir(os.path.join(
                self.function_dir(address), 'nvme')))
        except OSError:
            return []
