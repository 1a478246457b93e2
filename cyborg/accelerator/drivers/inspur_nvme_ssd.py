"""A driver for Inspur NVMe SSDs, passed through to instances whole.

An NVMe function (class 0x010802) of vendor Inspur (0x1bd4) is one device
with one deployable and one attach handle; NVMe drives of other vendors
are left alone. A drive with SR-IOV virtual functions enabled is not
reported (its VFs are, each on its own).
"""
from cyborg.accelerator import pci
from cyborg.accelerator.drivers.base import trait_part
from cyborg.accelerator.drivers.pci_driver import Functions
from cyborg.accelerator.drivers.pci_driver import PciDriver
from cyborg.common.device_report import DriverDevice

RESOURCE_CLASS = 'CUSTOM_SSD'


def product_trait(function: pci.PciFunction) -> str:
    """``CUSTOM_SSD_PRODUCT_ID_<DEVICE ID>``, e.g.
    ``CUSTOM_SSD_PRODUCT_ID_0001``: the trait device profiles written for
    earlier cyborg releases select a drive model by."""
    return f'CUSTOM_SSD_PRODUCT_ID_{trait_part(function.device_id[2:])}'


class InspurNvmeSsdDriver(PciDriver):
    """Reports every Inspur NVMe controller function."""

    driver_name = 'inspur_nvme_ssd'
    vendor_id = '0x1bd4'
    class_prefixes = ('0x010802',)
    noun = 'drive'

    def device(self, function: pci.PciFunction, functions: Functions
               ) -> DriverDevice | None:
        return self.whole_device(
            'SSD', function, RESOURCE_CLASS,
            ['OWNER_CYBORG', 'CUSTOM_SSD_INSPUR', product_trait(function)])
