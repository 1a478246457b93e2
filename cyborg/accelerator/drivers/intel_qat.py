"""A driver for Intel QuickAssist Technology (QAT) crypto and compression
accelerators.

Each QAT physical function is one device with one deployable. Instances
get SR-IOV virtual functions: the PF's VFs are the deployable's attach
handles, one accelerator each, and the PF is never one of them. A PF
without VFs is passed through whole, as the only attach handle.

Health: besides the PCI layer's readings, ``qat/state`` (4xxx and later,
Documentation/ABI/testing/sysfs-driver-qat) "down" means the endpoint
serves nothing — unhealthy. Usage: the telemetry of 4xxx endpoints
(Documentation/ABI/testing/debugfs-driver-qat_telemetry), which the
kernel only puts in debugfs (``[agent] debugfs_path``), as
``qat_<device>_<address>/telemetry/device_data``: read only when an
operator has turned it on; a file holding ``<counter> <current>`` lines,
or ``<counter> <current> <min> <max> <avg>`` when averaging.
"""
import glob
import os

from cyborg.accelerator import pci
from cyborg.accelerator import pci_health
from cyborg.accelerator.drivers import pci_report
from cyborg.accelerator.drivers.pci_driver import Functions
from cyborg.accelerator.drivers.pci_driver import PciDriver
from cyborg.accelerator.drivers.pci_driver import handle_address
from cyborg.common import device_health
from cyborg.common.device_health import Health
from cyborg.common.device_health import Usage
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
# The telemetry counter that only grows: samples taken since telemetry
# was turned on. The others are values of the last sample (a slice's
# utilisation, bandwidth, latency, executions in the last second).
TELEMETRY_COUNTERS = ('sample_cnt',)


class IntelQatDriver(PciDriver):
    """Reports Intel QAT endpoints (DH895xCC, C3xxx, C4xxx, C62x, 4xxx)."""

    driver_name = 'intel_qat'
    conf_group = 'qat_devices'
    sriov_layout = True
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

    # Monitoring

    def family_health(self, device: DriverDevice) -> list[Health]:
        address = handle_address(device.controlpath_id)
        if address is None:
            return []
        state = pci_health.read_text(
            os.path.join(self.function_dir(address), 'qat', 'state'))
        if state == 'down':
            return [Health(device_health.UNHEALTHY,
                           f'QAT endpoint {address} is down (qat/state)')]
        return []

    def family_usage(self, device: DriverDevice) -> Usage | None:
        address = handle_address(device.controlpath_id)
        if address is None:
            return None
        values = self._telemetry(address)
        if not values:
            return None
        utilization = [v for k, v in values.items() if k.startswith('util_')]
        return Usage(
            # The busiest slice: an endpoint configured for one service
            # leaves the other services' slices idle.
            utilization_percent=max(utilization, default=None),
            counters={k: int(values[k]) for k in TELEMETRY_COUNTERS
                      if k in values},
            gauges={k: v for k, v in values.items()
                    if k not in TELEMETRY_COUNTERS})

    def _telemetry(self, address: str) -> dict[str, float]:
        """The current value of every telemetry counter of the endpoint;
        empty when it has no telemetry, or telemetry is off."""
        root = self.bus.path(self.conf.agent.debugfs_path)
        for directory in sorted(glob.glob(
                os.path.join(root, f'qat_*_{address}', 'telemetry'))):
            control = pci_health.read_text(os.path.join(directory,
                                                        'control'))
            if control in (None, '0'):
                return {}
            path = os.path.join(directory, 'device_data')
            return parse_telemetry(path, pci_health.read_text(path) or '')
        return {}


def parse_telemetry(path: str, text: str) -> dict[str, float]:
    """``<counter> <current> [<min> <max> <avg>]`` lines as {counter:
    current}; ValueError naming ``path`` on a line that is not."""
    values = {}
    for line in text.splitlines():
        fields = line.split()
        if not fields:
            continue
        try:
            values[fields[0]] = float(fields[1])
        except (IndexError, ValueError):
            raise ValueError(f'{path}: {line[:60]!r} is not '
                             '"<counter> <value>"') from None
    return values
