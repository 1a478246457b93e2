"""A driver for Inspur NVMe SSDs, passed through to instances whole.

An NVMe function (class 0x010802) of vendor Inspur (0x1bd4) is one device
with one deployable and one attach handle; NVMe drives of other vendors
are left alone. A drive with SR-IOV virtual functions enabled is not
reported (its VFs are, each on its own).
"""
import logging

from oslo_config import cfg

from cyborg.accelerator import pci
from cyborg.accelerator.drivers import pci_report
from cyborg.accelerator.drivers.base import AcceleratorDriver
from cyborg.accelerator.drivers.base import trait_part
from cyborg.common.device_report import DriverDevice

LOG = logging.getLogger(__name__)
_warn = pci_report.WarnOnce(LOG)

VENDOR_ID = '0x1bd4'
NVME_CLASS = '0x010802'
RESOURCE_CLASS = 'CUSTOM_SSD'


def product_trait(function: pci.PciFunction) -> str:
    """``CUSTOM_SSD_PRODUCT_ID_<DEVICE ID>``, e.g.
    ``CUSTOM_SSD_PRODUCT_ID_0001``: the trait device profiles written for
    earlier cyborg releases select a drive model by."""
    return f'CUSTOM_SSD_PRODUCT_ID_{trait_part(function.device_id[2:])}'


class InspurNvmeSsdDriver(AcceleratorDriver):
    """Reports every Inspur NVMe controller function."""

    driver_name = 'inspur_nvme_ssd'

    def __init__(self, conf: cfg.ConfigOpts) -> None:
        super().__init__(conf)
        self.bus = pci.PciBus(conf.agent.sysfs_root)

    def discover(self) -> list[DriverDevice]:
        devices = []
        for function in self.bus.functions():
            if (function.vendor_id == VENDOR_ID
                    and function.class_code == NVME_CLASS
                    and pci_report.passable(function, _warn)):
                traits = ['OWNER_CYBORG', 'CUSTOM_SSD_INSPUR',
                          product_trait(function)]
                deployable = pci_report.deployable(
                    function, self.hostname, self.driver_name,
                    RESOURCE_CLASS, traits)
                devices.append(pci_report.device('SSD', function,
                                                 [deployable]))
        LOG.debug('inspur_nvme_ssd found %d drive(s).', len(devices))
        return devices
