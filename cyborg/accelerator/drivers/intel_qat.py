"""A driver for Intel QuickAssist Technology (QAT) crypto and compression
accelerators.

Each QAT physical function is one device with one deployable. Instances
get SR-IOV virtual functions: the PF's VFs are the deployable's attach
handles, one accelerator each, and the PF is never one of them. A PF
without VFs is passed through whole, as the only attach handle.
"""
from cyborg.accelerator import pci
from cyborg.accelerator.drivers import pci_report
from cyborg.accelerator.drivers.pci_driver import Functions
from cyborg.accelerator.drivers.pci_driver import PciDriver
from cyborg.common.device_report import DriverDevice

RESOURCE_CLASS = 'CUSTOM_QAT'
# Physical functions by device id (their VFs, found through the PF's
# virtfn links, are 0x0443, 0x37c9, 0x19e3, 0x18a1, 0x4941, 0x4943 and
# 0x4945 respectively).
PRODUCTS = {
    '0x0435': 'DH895XCC',
    '0x37c8': 'C62X',
    '0x19e2': 'C3XXX',
    '0x18a0': 'C4XXX',
    '0x4940': '4XXX',
    '0x4942': '401XX',
    '0x4944': '402XX',
}


class IntelQatDriver(PciDriver):
    """Reports Intel QAT endpoints (DH895xCC, C3xxx, C4xxx, C62x, 4xxx)."""

    driver_name = 'intel_qat'
    vendor_id = '0x8086'
    device_ids = PRODUCTS
    physical_only = True
    noun = 'endpoint'

    def device(self, pf: pci.PciFunction, functions: Functions
               ) -> DriverDevice | None:
        product = PRODUCTS[pf.device_id]
        lent = self.lent_functions(pf, functions,
                                   f'QAT {product} endpoint {pf.address}')
        if not lent:
            return None
        traits = ['OWNER_CYBORG', 'CUSTOM_QAT', f'CUSTOM_QAT_{product}']
        deployable = self.deployable(
            pf, RESOURCE_CLASS, traits,
            [pci_report.pci_handle(f) for f in lent])
        return pci_report.device('QAT', pf, [deployable], product=product)
