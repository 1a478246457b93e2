"""A driver for Inspur FPGA accelerator cards (vendor 0x1bd4, class
"Processing accelerators", such as the F10A, 0x1bd4:0xa115).

Each card's physical function is one device with one single-accelerator
deployable passing the function through; one with SR-IOV virtual
functions enabled cannot be passed through whole and is not reported.
Inspur publishes no programming tool for these cards, so ``program`` is
not supported: a request to program one fails with NotSupported, naming
the driver. Inspur's NVMe drives share the vendor id but not the class,
and are not reported.
"""
from cyborg.accelerator import pci
from cyborg.accelerator.drivers import fpga_common
from cyborg.accelerator.drivers.pci_driver import Functions
from cyborg.common.device_report import DriverDevice


class InspurFpgaDriver(fpga_common.FpgaDriver):
    """Inspur FPGA cards, one deployable per physical function."""

    driver_name = 'inspur_fpga'
    vendor_id = '0x1bd4'
    class_prefixes = (pci.PROCESSING_ACCELERATOR,)
    physical_only = True
    noun = 'card'

    def device(self, function: pci.PciFunction, functions: Functions
               ) -> DriverDevice | None:
        return self.whole_device(
            'FPGA', function, fpga_common.RESOURCE_CLASS,
            ['OWNER_CYBORG', 'CUSTOM_FPGA_INSPUR',
             fpga_common.product_trait(function)])
