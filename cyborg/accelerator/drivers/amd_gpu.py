"""A driver for AMD Instinct data-center GPUs: passed through whole, or as
the SR-IOV virtual functions AMD's GIM driver creates.

Each GPU is lent as the ``sriov_gpu`` base describes: whole (``PGPU``)
while it has no VFs, else one ``VGPU`` per VF, the GPU itself never.

VFs exist only as AMD's out-of-tree GIM module (github.com/amd/
MxGPU-Virtualization, ``gim_shim/gim_config.c``) makes them: it binds the
GPU as PCI driver ``gim`` and enables ``vf_num`` VFs per GPU when it loads
(module parameter, 1 to 31, default 1; the release notes name 1, or 8 in
CPX mode, for the MI300X). Neither ``gim`` nor ``amdgpu`` has a
``sriov_configure`` callback (``gim_drv.c``'s and ``amdgpu_drv.c``'s
``struct pci_driver``), so the kernel refuses a write to the GPU's
``sriov_numvfs`` with ENOENT ("driver does not support SR-IOV configuration
via sysfs", ``drivers/pci/iov.c``): this driver offers no ``vf_count``
layout, since it could not apply one. The VF count is set where GIM is
loaded (``modprobe gim vf_num=<N>``).

Health, besides the PCI layer's AER counters, link and temperatures:
amdgpu's RAS error counters (``ras/<block>_err_count``, amdgpu_ras.c "RAS
sysfs Error Count Interface"), read while amdgpu drives the GPU (not under
GIM, which keeps its own): ``ue: <n>`` uncorrectable errors mean data was
lost — unhealthy; ``de: <n>`` deferred errors (the poisoned data was not
consumed yet, written by the ACA-based GPUs such as the MI300) — degraded;
``ce: <n>`` correctable errors were repaired by ECC and only count (amdgpu
itself retires a page of memory that keeps failing, up to its
``bad_page_threshold``). "Query currently inaccessible" is what a counter
reads while a reset is under way — degraded, as the GPU serves nothing.
Usage adds amdgpu's ``gpu_busy_percent`` and ``mem_info_vram_used`` /
``mem_info_vram_total`` (bytes), the RAS counts as counters and the
labelled hwmon temperatures (edge, junction, mem; Documentation/gpu/
amdgpu/thermal.rst, amdgpu_pm.c "hwmon") as gauges. VFs have no hwmon.

Cleaning (``[amd_gpu_devices] clean_after_use``) is a function-level
reset of the released function, a VF's own reset, which GIM serves.
"""
import os
import re

from cyborg.accelerator import pci_health
from cyborg.accelerator.drivers import sriov_gpu
from cyborg.accelerator.drivers.pci_driver import handle_address
from cyborg.accelerator.drivers.pci_driver import merge_usage
from cyborg.common import device_health
from cyborg.common.device_health import Health
from cyborg.common.device_health import Usage
from cyborg.common.device_report import DriverDevice

VENDOR_ID = '0x1002'
# Physical functions by device id. The MI300 series from GIM's device
# table and marketing names (libgv/core/amdgv_device.c,
# amdgv_marketing_name.c; their VFs are 0x74b5 for the MI300X, 0x74b6 and
# 0x74bc for the MI308X, 0x74bd for the MI300X HF); the MI200 (Aldebaran)
# and MI100 (Arcturus) by the chip amdgpu's pciidlist names them
# (drivers/gpu/drm/amd/amdgpu/amdgpu_drv.c), lent whole.
PRODUCTS = {
    '0x74a1': 'MI300X', '0x74a5': 'MI325X', '0x74a9': 'MI300X_HF',
    '0x74a2': 'MI308X', '0x74a8': 'MI308X',
    '0x7408': 'ALDEBARAN', '0x740c': 'ALDEBARAN', '0x740f': 'ALDEBARAN',
    '0x7410': 'ALDEBARAN',
    '0x738c': 'ARCTURUS', '0x7388': 'ARCTURUS', '0x738e': 'ARCTURUS',
    '0x7390': 'ARCTURUS',
}
#: What a RAS counter reads while the GPU cannot be queried (a reset).
RAS_INACCESSIBLE = 'Query currently inaccessible'
_RAS_FILE_RE = re.compile(r'^(?P<block>[a-z0-9_]+)_err_count$')
_RAS_LINE_RE = re.compile(r'^(ue|ce|de): (\d+)$')


def parse_ras_count(path: str, text: str) -> dict[str, int] | None:
    """An ``<block>_err_count`` file's ``ue``, ``ce`` (and ``de``)
    counts; None for "Query currently inaccessible"; ValueError naming
    ``path`` for anything else."""
    if text == RAS_INACCESSIBLE:
        return None
    counts = {}
    for line in text.splitlines():
        match = _RAS_LINE_RE.match(line.strip())
        if not match:
            raise ValueError(f'{path}: {line[:60]!r} is not "ue|ce|de: <n>"')
        counts[match.group(1)] = int(match.group(2))
    if 'ue' not in counts or 'ce' not in counts:
        raise ValueError(f'{path}: no ue and ce counts')
    return counts


class AmdGpuDriver(sriov_gpu.SriovGpuDriver):
    """Reports AMD Instinct GPUs (MI300 series, MI200, MI100) and the VFs
    GIM enabled on them."""

    driver_name = 'amd_gpu'
    conf_group = 'amd_gpu_devices'
    vendor_id = VENDOR_ID
    products = PRODUCTS
    device_ids = PRODUCTS
    vendor_trait = 'CUSTOM_GPU_AMD'
    product_trait_prefix = 'CUSTOM_AMD'
    family_name = 'AMD Instinct'
    # GIM sets the VF count when it loads; the kernel refuses
    # sriov_numvfs (see the module's docstring).
    sriov_layout = False

    def _ras(self, device: DriverDevice
             ) -> tuple[str, dict[str, dict[str, int] | None]] | None:
        """The GPU's address and its RAS counts by block (None: cannot be
        queried now); None when amdgpu exposes no RAS directory."""
        address = handle_address(device.controlpath_id)
        if address is None:
            return None
        directory = os.path.join(self.function_dir(address), 'ras')
        try:
            files = sorted(os.listdir(directory))
        except (FileNotFoundError, NotADirectoryError):
            return None
        counts: dict[str, dict[str, int] | None] = {}
        for filename in files:
            match = _RAS_FILE_RE.match(filename)
            if not match:
                continue
            path = os.path.join(directory, filename)
            text = pci_health.read_text(path)
            if text is not None:
                counts[match.group('block')] = parse_ras_count(path, text)
        return address, counts

    def family_health(self, device: DriverDevice) -> list[Health]:
        ras = self._ras(device)
        if ras is None:
            return []
        address, counts = ras
        found = []
        if any(c is None for c in counts.values()):
            found.append(Health(
                device_health.DEGRADED,
                f'AMD GPU {address}: RAS error counts cannot be queried '
                '(a GPU reset is under way)'))
        read = {block: c for block, c in counts.items() if c is not None}
        uncorrectable = {b: c['ue'] for b, c in read.items() if c['ue']}
        deferred = {b: c['de'] for b, c in read.items() if c.get('de')}
        if uncorrectable:
            found.append(Health(
                device_health.UNHEALTHY,
                f'AMD GPU {address}: uncorrectable RAS errors '
                f'({_by_block(uncorrectable)})'))
        if deferred:
            found.append(Health(
                device_health.DEGRADED,
                f'AMD GPU {address}: deferred RAS errors '
                f'({_by_block(deferred)})'))
        return found

    def family_usage(self, device: DriverDevice) -> Usage | None:
        hwmon = self.hwmon_usage(device)
        address = handle_address(device.controlpath_id)
        if address is None:
            return hwmon
        directory = self.function_dir(address)
        busy = pci_health.read_int(os.path.join(directory,
                                                'gpu_busy_percent'))
        used = pci_health.read_int(os.path.join(directory,
                                                'mem_info_vram_used'))
        total = pci_health.read_int(os.path.join(directory,
                                                 'mem_info_vram_total'))
        counters: dict[str, int] = {}
        ras = self._ras(device)
        for block, counts in sorted((ras[1] if ras else {}).items()):
            for kind, value in (counts or {}).items():
                counters[f'ras_{block}_{kind}'] = value
                counters[f'ras_{kind}'] = counters.get(f'ras_{kind}',
                                                       0) + value
        own = Usage(utilization_percent=busy, memory_used_bytes=used,
                    memory_total_bytes=total, counters=counters)
        return merge_usage(hwmon, own)


def _by_block(counts: dict[str, int]) -> str:
    return ', '.join(f'{block} {n}' for block, n in sorted(counts.items()))
