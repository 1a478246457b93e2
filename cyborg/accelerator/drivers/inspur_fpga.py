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
import logging

from cyborg.accelerator import pci
from cyborg.accelerator.drivers import fpga_common
from cyborg.accelerator.drivers import pci_report
from cyborg.common.device_report import DriverDevice

LOG = logging.getLogger(__name__)
_warn = pci_report.WarnOnce(LOG)

VENDOR_ID = '0x1bd4'


def is_inspur_fpga(function: pci.PciFunction) -> bool:
    return (function.vendor_id == VENDOR_ID and not function.is_vf
            and function.matches_class(fpga_common.PROCESSING_ACCELERATOR))


class InspurFpgaDriver(fpga_common.FpgaDriver):
    """Inspur FPGA cards, one deployable per physical function."""

    driver_name = 'inspur_fpga'

    def discover(self) -> list[DriverDevice]:
        devices = [self._device(f) for f in self.bus.functions()
                   if is_inspur_fpga(f) and pci_report.passable(f, _warn)]
        LOG.debug('inspur_fpga found %d card(s).', len(devices))
        return devices

    def _device(self, function: pci.PciFunction) -> DriverDevice:
        traits = ['OWNER_CYBORG', 'CUSTOM_FPGA_INSPUR',
                  fpga_common.product_trait(function)]
        return pci_report.device('FPGA', function, [pci_report.deployable(
            function, self.hostname, self.driver_name,
            fpga_common.RESOURCE_CLASS, traits)])
