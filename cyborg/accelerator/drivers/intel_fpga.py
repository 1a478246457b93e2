"""A driver for Intel FPGA cards (PAC Arria 10, PAC N3000, PAC D5005, OFS
cards) driven by the kernel's DFL drivers or by OPAE's intel-fpga driver.

Each card's physical function (PF) is one device with one deployable,
named after the PF. A PF whose SR-IOV virtual functions are enabled lends
them out, one accelerator per VF, and never itself; a PF without VFs
lends itself out. The
FPGA's partial-reconfiguration interface id and the ids of the loaded
accelerator functions (AFUs) become traits, read from

* DFL: ``/sys/class/fpga_region/region*/compat_id`` and
  ``.../region*/dfl-port.*/afu_id``;
* OPAE: ``/sys/class/fpga/intel-fpga-dev.*/intel-fpga-fme.*/pr/
  interface_id`` and ``.../intel-fpga-port.*/afu_id``,

each class entry belonging to the PF its sysfs path lies under. The PF is
programmed with OPAE's ``fpgaconf`` (``[fpga] fpgaconf_path`` and
``fpgaconf_args``).

Health, besides the PCI layer's readings: the FPGA management engine's
(FME) global error registers and sensors
(Documentation/ABI/testing/sysfs-platform-dfl-fme), under the PF at
``fpga_region/region*/dfl-fme.*`` (DFL) or
``fpga/intel-fpga-dev.*/intel-fpga-fme.*`` (OPAE): ``errors/*`` hold
``0x%llx`` bit masks, non-zero while an error is latched.
``catfatal_errors`` (catastrophic or fatal: the card must be reset) makes
the card unhealthy; ``nonfatal_errors``, ``fme_errors`` and the PCIe
links' ``pcie0_errors``/``pcie1_errors`` degraded. The FME's hwmon
devices (``dfl_fme_thermal``, ``dfl_fme_power``) give its temperature and
power.
"""
import dataclasses
import glob
import os
import re

from oslo_config import cfg

from cyborg.accelerator import pci
from cyborg.accelerator import pci_health
from cyborg.accelerator.drivers import fpga_common
from cyborg.accelerator.drivers import pci_report
from cyborg.accelerator.drivers.base import function_trait
from cyborg.accelerator.drivers.base import trait_part
from cyborg.accelerator.drivers.pci_driver import Functions
from cyborg.accelerator.drivers.pci_driver import handle_address
from cyborg.accelerator.drivers.pci_driver import temperature_health
from cyborg.common import device_health
from cyborg.common.device_health import Health
from cyborg.common.device_health import Usage
from cyborg.common.device_report import DriverDevice

# PF device id -> the product's trait suffix. 0xbcce is the id every Open
# FPGA Stack card shares; its subsystem device id names the card.
PRODUCTS = {
    '0x09c4': 'PAC_ARRIA10',
    '0x0b30': 'PAC_N3000',
    '0x0b2b': 'PAC_D5005',
    '0xbcce': 'OFS',
}
OFS_PRODUCTS = {
    '0x138d': 'PAC_D5005',
    '0x1770': 'N6000',
    '0x1771': 'N6001',
    '0x17d4': 'C6100',
}
# A 128-bit id as sysfs prints it: 32 hex digits, sometimes as a UUID.
_ID_RE = re.compile(r'^[0-9a-f]{32}$')
# FME directories under a PF: DFL, then OPAE's intel-fpga driver.
FME_GLOBS = ('fpga_region/region*/dfl-fme.*',
             'fpga/intel-fpga-dev.*/intel-fpga-fme.*')
# FME error registers (errors/<name>) and the health a latched one gives.
FME_ERRORS = (('catfatal_errors', device_health.UNHEALTHY),
              ('nonfatal_errors', device_health.DEGRADED),
              ('fme_errors', device_health.DEGRADED),
              ('errors', device_health.DEGRADED),
              ('pcie0_errors', device_health.DEGRADED),
              ('pcie1_errors', device_health.DEGRADED))


@dataclasses.dataclass
class _FpgaIds:
    """The ids read from the FPGA class entries of one PF."""

    interface_ids: list[str] = dataclasses.field(default_factory=list)
    afu_ids: list[str] = dataclasses.field(default_factory=list)


def product_of(function: pci.PciFunction) -> str:
    """The product trait suffix of a PF this driver reports."""
    product = PRODUCTS[function.device_id]
    if product == 'OFS':
        return OFS_PRODUCTS.get(function.subsystem_device_id or '', product)
    return product


class IntelFpgaDriver(fpga_common.FpgaDriver):
    """Intel FPGA cards: one deployable per PF, its VFs (or itself) as
    PCI attach handles, programmed with fpgaconf."""

    driver_name = 'intel_fpga'
    vendor_id = '0x8086'
    device_ids = PRODUCTS
    physical_only = True
    noun = 'card'

    def __init__(self, conf: cfg.ConfigOpts) -> None:
        super().__init__(conf)
        self.program_command = fpga_common.ProgramCommand(
            conf, 'fpgaconf_path', 'fpgaconf_args')

    def devices(self, matching: list[pci.PciFunction], functions: Functions
                ) -> list[DriverDevice | None]:
        ids = self._fpga_ids()
        return [self._card(pf, functions, ids.get(pf.address, _FpgaIds()))
                for pf in matching]

    def _card(self, pf: pci.PciFunction, functions: Functions,
              ids: _FpgaIds) -> DriverDevice | None:
        lent = self.lent_functions(pf, functions, f'Intel FPGA {pf.address}')
        if not lent:
            return None
        product = product_of(pf)
        traits = ['OWNER_CYBORG', 'CUSTOM_FPGA_INTEL',
                  f'CUSTOM_FPGA_INTEL_{product}']
        traits += [f'CUSTOM_FPGA_REGION_INTEL_{trait_part(i)}'
                   for i in ids.interface_ids]
        traits += [function_trait('INTEL', a) for a in ids.afu_ids]
        # Named after the PF, whichever functions it lends out.
        deployable = self.deployable(
            pf, fpga_common.RESOURCE_CLASS, traits,
            [pci_report.pci_handle(f) for f in lent])
        device = pci_report.device(
            'FPGA', pf, [deployable], product=product,
            virtual_functions=sum(f.is_vf for f in lent))
        if ids.interface_ids:
            device.vendor_board_info['interface_ids'] = ids.interface_ids
        if ids.afu_ids:
            device.vendor_board_info['afu_ids'] = ids.afu_ids
        return device

    # Monitoring

    def _fmes(self, device: DriverDevice) -> list[str]:
        address = handle_address(device.controlpath_id)
        if address is None:
            return []
        directory = self.function_dir(address)
        return sorted(path for pattern in FME_GLOBS
                      for path in glob.glob(os.path.join(directory,
                                                         pattern)))

    def family_health(self, device: DriverDevice) -> list[Health]:
        found = []
        options = self.conf.agent
        for fme in self._fmes(device):
            name = os.path.basename(fme)
            errors = os.path.join(fme, 'errors')
            first = pci_health.read_text(os.path.join(errors, 'first_error'))
            for register, state in FME_ERRORS:
                value = _register(os.path.join(errors, register))
                if value:
                    found.append(Health(
                        state, f'{name} {register} {value:#x} (first_error '
                               f'{first or "unknown"})'))
            found += temperature_health(
                pci_health.read_hwmon(fme).temperature_celsius, name,
                options.health_temperature_degraded,
                options.health_temperature_unhealthy)
        return found

    def family_usage(self, device: DriverDevice) -> Usage | None:
        sensors = [pci_health.read_hwmon(fme) for fme in self._fmes(device)]
        temperatures = [s.temperature_celsius for s in sensors
                        if s.temperature_celsius is not None]
        power = [s.power_watts for s in sensors if s.power_watts is not None]
        if not temperatures and not power:
            return None
        return Usage(temperature_celsius=max(temperatures, default=None),
                     power_watts=sum(power) if power else None)

    def _fpga_ids(self) -> dict[str, _FpgaIds]:
        """Interface and AFU ids per PF address, from both driver stacks.
        """
        found: dict[str, _FpgaIds] = {}
        sources = (
            ('fpga', 'intel-fpga-fme.*/pr/interface_id',
             'intel-fpga-port.*/afu_id'),
            ('fpga_region', 'compat_id', 'dfl-port.*/afu_id'),
        )
        for class_name, interface_glob, afu_glob in sources:
            for entry in self.bus.class_dirs(class_name):
                address = self.bus.address_of(entry)
                if address is None:
                    continue
                ids = found.setdefault(address, _FpgaIds())
                for path in sorted(glob.glob(
                        os.path.join(entry, interface_glob))):
                    self._add_id(ids.interface_ids, address, path)
                for path in sorted(glob.glob(os.path.join(entry, afu_glob))):
                    self._add_id(ids.afu_ids, address, path)
        return found

    def _add_id(self, ids: list[str], address: str, path: str) -> None:
        value = self.bus.read(path)
        if value is None:
            # Unset ids (a static region's compat_id, a port lent to a VF)
            # cannot be read; nothing is wrong.
            return
        normal = value.lower().replace('-', '')
        if not _ID_RE.match(normal):
            self.warn('Intel FPGA %s: ignoring %s: %r is not a 128-bit hex '
                      'id', address, path, value)
            return
        if normal not in ids:
            ids.append(normal)


def _register(path: str) -> int | None:
    """An FME error register (``0x%llx``); None when there is none."""
    text = pci_health.read_text(path)
    if text is None:
        return None
    try:
        return int(text, 16)
    except ValueError:
        raise ValueError(f'{path}: {text[:40]!r} is not a hex register'
                         ) from None
