"""The base of the drivers of SR-IOV data-center GPUs: each GPU lent whole,
or as its virtual functions.

A GPU (its physical function) is one device with one deployable. Without
SR-IOV virtual functions enabled it is one ``PGPU``, its own function the
only attach handle. With VFs enabled each VF is one ``VGPU`` attach handle
and the GPU's own function is never one: it is the control path the host
driver schedules the VFs through, and handing it to an instance would give
that instance every other VF's memory and engines.

Why ``VGPU`` for a VF: placement's standard classes are ``PGPU`` (a whole
physical GPU) and ``VGPU`` (a share of one); a VF is such a share (its
engines are time-sliced or partitioned by the PF's firmware, its memory a
slice of the GPU's), whatever the attach type that hands it over, as the
nvidia_gpu driver's vGPUs on SR-IOV VFs are ``VGPU`` too. A flavor asking
``resources:PGPU=1`` thus never lands on a VF, nor ``VGPU=1`` on a whole
GPU.

Usage adds, to the PCI layer's readings, each labelled hwmon temperature of
the GPU (``temp<N>_label``, Documentation/hwmon/sysfs-interface.rst) as a
gauge, and the GPU's power from its hwmon energy counter
(``energy<N>_input``, microjoules) where the driver exposes no power
reading: the change between two samples over the time between them.
"""
import os
import re
import threading
import time
from collections.abc import Mapping
from typing import Any
from typing import ClassVar

from oslo_config import cfg

from cyborg.accelerator import pci
from cyborg.accelerator import pci_health
from cyborg.accelerator.drivers import pci_report
from cyborg.accelerator.drivers.base import trait_part
from cyborg.accelerator.drivers.pci_driver import Functions
from cyborg.accelerator.drivers.pci_driver import PciDriver
from cyborg.accelerator.drivers.pci_driver import handle_address
from cyborg.common.device_health import Usage
from cyborg.common.device_report import DriverDevice

#: The resource class of a GPU lent whole.
WHOLE_RESOURCE_CLASS = 'PGPU'
#: The resource class of each virtual function of a GPU.
VF_RESOURCE_CLASS = 'VGPU'
_TEMP_LABEL_RE = re.compile(r'^temp(\d+)_label$')
_ENERGY_RE = re.compile(r'^energy(\d+)_input$')
_NOT_GAUGE_CHARS = re.compile(r'[^a-z0-9_]+')


class SriovGpuDriver(PciDriver):
    """Reports the GPUs of ``products`` (PF device id: product name) and
    lends each whole or as its VFs; a subclass sets ``device_ids`` to the
    same ids."""

    #: PF device ids and the product each is.
    products: ClassVar[Mapping[str, str]]
    #: The trait every deployable carries, e.g. ``CUSTOM_GPU_AMD``.
    vendor_trait: ClassVar[str]
    #: The prefix of the product trait, e.g. ``CUSTOM_AMD``.
    product_trait_prefix: ClassVar[str]
    #: How the GPUs are named in warnings, e.g. ``AMD Instinct``.
    family_name: ClassVar[str]
    physical_only = True
    noun = 'GPU'
    # GPUs train their link down to 2.5 GT/s when idle.
    link_speed_varies = True

    def __init__(self, conf: cfg.ConfigOpts) -> None:
        super().__init__(conf)
        # The last energy reading of each GPU (microjoules, monotonic
        # seconds), from which the next sample's power is worked out.
        self._energy: dict[str, tuple[int, float]] = {}
        self._energy_lock = threading.Lock()

    def product_trait(self, product: str) -> str:
        """``<product_trait_prefix>_<PRODUCT>``, e.g. CUSTOM_AMD_MI300X."""
        return f'{self.product_trait_prefix}_{trait_part(product)}'

    def device(self, pf: pci.PciFunction, functions: Functions
               ) -> DriverDevice | None:
        product = self.products[pf.device_id]
        lent = self.lent_functions(
            pf, functions, f'{self.family_name} {product} GPU {pf.address}')
        if not lent:
            return None
        whole = lent == [pf]
        deployable = self.deployable(
            pf, WHOLE_RESOURCE_CLASS if whole else VF_RESOURCE_CLASS,
            ['OWNER_CYBORG', self.vendor_trait, self.product_trait(product)],
            [pci_report.pci_handle(f) for f in lent])
        return pci_report.device('GPU', pf, [deployable], product=product,
                                 **self.board_extra(pf))

    def board_extra(self, pf: pci.PciFunction) -> dict[str, Any]:
        """What the family adds to a GPU's ``std_board_info``."""
        return {}

    # Monitoring

    def hwmon_usage(self, device: DriverDevice) -> Usage | None:
        """Labelled temperatures as gauges and, where the GPU's hwmon has
        an energy counter, the power since the last sample and the
        counter itself (``energy_microjoules``)."""
        address = handle_address(device.controlpath_id)
        if address is None:
            return None
        hwmon = os.path.join(self.function_dir(address), 'hwmon')
        try:
            names = sorted(os.listdir(hwmon))
        except (FileNotFoundError, NotADirectoryError):
            # A VF, or a GPU its host driver does not monitor.
            return None
        gauges: dict[str, float] = {}
        energy: int | None = None
        for name in names:
            directory = os.path.join(hwmon, name)
            try:
                files = sorted(os.listdir(directory))
            except (FileNotFoundError, NotADirectoryError):
                continue
            gauges.update(_labelled_temperatures(directory, files))
            if energy is None:
                energy = _first_energy(directory, files)
        if energy is None:
            return Usage(gauges=gauges) if gauges else None
        return Usage(power_watts=self._power(address, energy),
                     counters={'energy_microjoules': energy},
                     gauges=gauges)

    def _power(self, address: str, energy: int) -> float | None:
        """Watts between the last reading of ``address``'s energy counter
        and ``energy``; None at the first, or after the counter went back
        (wrapped, or the driver was reloaded)."""
        now = time.monotonic()
        with self._energy_lock:
            last = self._energy.get(address)
            self._energy[address] = (energy, now)
        if last is None or energy < last[0] or now <= last[1]:
            return None
        return (energy - last[0]) / 1e6 / (now - last[1])

    def family_usage(self, device: DriverDevice) -> Usage | None:
        return self.hwmon_usage(device)


def _labelled_temperatures(directory: str, files: list[str]
                           ) -> dict[str, float]:
    present = set(files)
    gauges = {}
    for match in map(_TEMP_LABEL_RE.match, files):
        if not match or f'temp{match.group(1)}_input' not in present:
            continue
        label = pci_health.read_text(os.path.join(directory, match.group(0)))
        value = pci_health.read_int(
            os.path.join(directory, f'temp{match.group(1)}_input'))
        if label and value is not None:
            key = _NOT_GAUGE_CHARS.sub('_', label.lower()).strip('_')
            gauges[f'temperature_{key}_celsius'] = value / 1000
    return gauges


def _first_energy(directory: str, files: list[str]) -> int | None:
    """The lowest-numbered energy counter: the card's on xe and i915
    (energy1_input; energy2_input is the package's)."""
    channels = sorted((int(m.group(1)), m.group(0))
                      for m in map(_ENERGY_RE.match, files) if m)
    if not channels:
        return None
    return pci_health.read_int(os.path.join(directory, channels[0][1]))
