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
from cyborg.accelerator import pci
from cyborg.accelerator.drivers.pci_driver import Functions
from cyborg.accelerator.drivers.pci_driver import PciDriver
from cyborg.common.device_report import DriverDevice

RESOURCE_CLASS = 'CUSTOM_NPU'
MODELS = {
    '0xd100': '310',
    '0xd500': '310P',
    '0xd801': '910',
    '0xd802': '910B',
}


class HuaweiAscendDriver(PciDriver):
    """Reports every Ascend 310, 310P, 910 and 910B function."""

    driver_name = 'huawei_ascend'
    conf_group = 'npu_devices'
    vendor_id = '0x19e5'
    device_ids = MODELS
    class_prefixes = (pci.PROCESSING_ACCELERATOR,)
    noun = 'NPU'

    def device(self, function: pci.PciFunction, functions: Functions
               ) -> DriverDevice | None:
        model = MODELS[function.device_id]
        return self.whole_device(
            'AICHIP', function, RESOURCE_CLASS,
            ['OWNER_CYBORG', f'CUSTOM_NPU_HUAWEI_ASCEND_{model}'],
            product=f'Ascend {model}')
