"""A driver for Huawei Ascend NPUs (AI processors).

Each Ascend function is one device with one deployable and one attach
handle, in the resource class ``CUSTOM_NPU`` with the trait
``CUSTOM_NPU_HUAWEI_ASCEND_<MODEL>``: a device profile asks for
``resources:CUSTOM_NPU=1`` and, to pin the model,
``trait:CUSTOM_NPU_HUAWEI_ASCEND_910=required``. Other Huawei processing
accelerators (the HiSilicon ZIP, SEC and HPRE engines share the class
code) are not NPUs and are left alone: only known Ascend device ids match.
A function with SR-IOV virtual functions enabled is not reported (its VFs
are, each on its own).
"""
import logging

from oslo_config import cfg

from cyborg.accelerator import pci
from cyborg.accelerator.drivers import pci_report
from cyborg.accelerator.drivers.base import AcceleratorDriver
from cyborg.common.device_report import DriverDevice

LOG = logging.getLogger(__name__)
_warn = pci_report.WarnOnce(LOG)

VENDOR_ID = '0x19e5'
# Processing accelerators.
ACCELERATOR_CLASS = '0x1200'
RESOURCE_CLASS = 'CUSTOM_NPU'
MODELS = {
    '0xd100': '310',
    '0xd500': '310P',
    '0xd801': '910',
    '0xd802': '910B',
}


class HuaweiAscendDriver(AcceleratorDriver):
    """Reports every Ascend 310, 310P, 910 and 910B function."""

    driver_name = 'huawei_ascend'

    def __init__(self, conf: cfg.ConfigOpts) -> None:
        super().__init__(conf)
        self.bus = pci.PciBus(conf.agent.sysfs_root)

    def discover(self) -> list[DriverDevice]:
        devices = []
        for function in self.bus.functions():
            model = MODELS.get(function.device_id)
            if (model is None or function.vendor_id != VENDOR_ID
                    or not function.matches_class(ACCELERATOR_CLASS)
                    or not pci_report.passable(function, _warn)):
                continue
            traits = ['OWNER_CYBORG', f'CUSTOM_NPU_HUAWEI_ASCEND_{model}']
            deployable = pci_report.deployable(
                function, self.hostname, self.driver_name, RESOURCE_CLASS,
                traits)
            devices.append(pci_report.device(
                'AICHIP', function, [deployable], product=f'Ascend {model}'))
        LOG.debug('huawei_ascend found %d NPU(s).', len(devices))
        return devices
