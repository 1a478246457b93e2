"""A driver for Intel QuickAssist Technology (QAT) crypto and compression
accelerators.

Each QAT physical function is one device with one deployable. Instances
get SR-IOV virtual functions: the PF's VFs are the deployable's attach
handles, one accelerator each, and the PF is never one of them. A PF
without VFs is passed through whole, as the only attach handle.
"""
import logging

from oslo_config import cfg

from cyborg.accelerator import pci
from cyborg.accelerator.drivers import pci_report
from cyborg.accelerator.drivers.base import AcceleratorDriver
from cyborg.common.device_report import DriverDevice

LOG = logging.getLogger(__name__)

VENDOR_ID = '0x8086'
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


class IntelQatDriver(AcceleratorDriver):
    """Reports Intel QAT endpoints (DH895xCC, C3xxx, C4xxx, C62x, 4xxx)."""

    driver_name = 'intel_qat'

    def __init__(self, conf: cfg.ConfigOpts) -> None:
        super().__init__(conf)
        self.bus = pci.PciBus(conf.agent.sysfs_root)
        self._warn = pci_report.WarnOnce(LOG)

    def discover(self) -> list[DriverDevice]:
        by_address = {f.address: f for f in self.bus.functions()}
        devices = []
        for function in by_address.values():
            if (not function.is_vf and function.vendor_id == VENDOR_ID
                    and function.device_id in PRODUCTS):
                device = self._device(function, by_address)
                if device is not None:
                    devices.append(device)
        LOG.debug('intel_qat found %d endpoint(s).', len(devices))
        return devices

    def _device(self, pf: pci.PciFunction,
                by_address: dict[str, pci.PciFunction]
                ) -> DriverDevice | None:
        product = PRODUCTS[pf.device_id]
        vfs = [by_address[a] for a in pf.virtfns if a in by_address]
        for address in pf.virtfns:
            if address not in by_address:
                self._warn('QAT %s endpoint %s: skipping VF %s, whose sysfs '
                           'entry cannot be read.', product, pf.address,
                           address)
        if pf.vfs_enabled and not vfs:
            # The host driver owns the PF while VFs exist: it cannot be
            # passed through in their place.
            self._warn('Skipping QAT %s endpoint %s: its VFs are enabled '
                       'but none can be read.', product, pf.address)
            return None
        handles = [pci_report.pci_handle(f) for f in vfs or [pf]]
        traits = ['OWNER_CYBORG', 'CUSTOM_QAT', f'CUSTOM_QAT_{product}']
        deployable = pci_report.deployable(
            pf, self.hostname, self.driver_name, RESOURCE_CLASS, traits,
            handles)
        return pci_report.device('QAT', pf, [deployable], product=product)
