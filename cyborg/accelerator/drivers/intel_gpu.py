"""A driver for Intel data-center GPUs (Data Center GPU Flex and Max, Arc
Pro B-series): passed through whole, or as their SR-IOV virtual functions.

Each GPU is lent as the ``sriov_gpu`` base describes: whole (``PGPU``)
while it has no VFs, else one ``VGPU`` per VF, the GPU itself never.

VFs are made through the GPU's ``sriov_numvfs`` (the ``vf_count`` layout)
when the ``xe`` driver drives it in SR-IOV PF mode: xe's ``struct
pci_driver`` has ``sriov_configure`` (``xe_pci_sriov_configure``, which
refuses a GPU not in PF mode), PF mode is on only for the platforms whose
descriptor has ``has_sriov`` (of these GPUs, Battlemage: ``bmg_desc`` in
drivers/gpu/drm/xe/xe_pci.c; not ``ats_m_desc``, and PVC is not in xe's
pciidlist), and xe lowers ``sriov_totalvfs`` to its module parameter
``max_vfs`` ("0 = no VFs [default]", xe_module.c;
``xe_sriov_pf_readiness`` in xe_sriov_pf.c), so the layout's range is what
xe will enable: load xe with ``max_vfs=<N>`` to offer VFs. Any other GPU
(a Flex or Max, or one the i915 driver drives) is lent as it is — whole,
or its VFs if another driver made them — without a ``vf_count`` layout:
upstream i915's ``struct pci_driver`` has no ``sriov_configure`` either, so
the kernel refuses ``sriov_numvfs`` with ENOENT (drivers/pci/iov.c). The
VFs of an xe PF bind to xe on the host (xe matches them by device id and
runs them in VF mode, xe_sriov.c).

Health: the PCI layer's AER counters, link and temperatures (xe's hwmon
has ``temp2_input``, package, and ``temp3_input``, VRAM, since Linux 6.15:
Documentation/ABI/testing/sysfs-driver-intel-xe-hwmon), and xe's
``survivability_mode`` file, present on the GPU's function only while its
firmware must be flashed again before it serves anything (the GPU is
wedged; xe_survivability_mode.c) — unhealthy. Neither xe nor i915 exposes
RAS error counters in sysfs: xe reports hardware errors through the DRM
RAS generic-netlink family (xe_hw_error.c) and a wedged GPU through a
``WEDGED`` uevent, neither of which a periodic read of sysfs sees; the
GPU's own AER counters are what this driver reads of its errors.

Usage: neither hwmon has a power reading (``power1_max`` is a limit), so
power is the change of ``energy1_input`` (the card's energy in
microjoules: sysfs-driver-intel-xe-hwmon, sysfs-driver-intel-i915-hwmon)
between two samples.

Cleaning (``[intel_gpu_devices] clean_after_use``) is a function-level
reset of the released function.
"""
import os
from typing import Any

from cyborg.accelerator import pci
from cyborg.accelerator.drivers import pci_lifecycle
from cyborg.accelerator.drivers import sriov_gpu
from cyborg.accelerator.drivers.pci_driver import handle_address
from cyborg.common import device_health
from cyborg.common.device_health import Health
from cyborg.common.device_report import DriverDevice

VENDOR_ID = '0x8086'
#: The host driver whose PFs make VFs through sriov_numvfs.
SRIOV_PF_DRIVER = 'xe'
# Physical functions by device id and the platform include/drm/intel/
# pciids.h names them after: INTEL_ATS_M150_IDS and INTEL_ATS_M75_IDS
# (Data Center GPU Flex), INTEL_PVC_IDS (Data Center GPU Max),
# INTEL_BMG_G21_IDS and the rest of INTEL_BMG_IDS (Battlemage, the Arc
# Pro B-series among them).
PRODUCTS = {
    '0x56c0': 'ATS_M150', '0x56c2': 'ATS_M150', '0x56c1': 'ATS_M75',
    **dict.fromkeys(
        ('0x0b69', '0x0b6e', '0x0bd4', '0x0bd5', '0x0bd6', '0x0bd7',
         '0x0bd8', '0x0bd9', '0x0bda', '0x0bdb', '0x0be0', '0x0be1',
         '0x0be5'), 'PVC'),
    **dict.fromkeys(
        ('0xe202', '0xe209', '0xe20b', '0xe20c', '0xe20d', '0xe210',
         '0xe211', '0xe212', '0xe216'), 'BMG_G21'),
    **dict.fromkeys(('0xe220', '0xe221', '0xe222', '0xe223'), 'BMG'),
}
#: The products xe drives in SR-IOV PF mode (``has_sriov``).
XE_SRIOV_PRODUCTS = frozenset({'BMG_G21', 'BMG'})
#: Present on an xe GPU whose firmware must be flashed again.
SURVIVABILITY_FILE = 'survivability_mode'


class IntelGpuDriver(sriov_gpu.SriovGpuDriver):
    """Reports Intel Data Center GPU Flex and Max and Battlemage GPUs, and
    sets the VF count of those xe drives as SR-IOV PFs."""

    driver_name = 'intel_gpu'
    conf_group = 'intel_gpu_devices'
    vendor_id = VENDOR_ID
    products = PRODUCTS
    device_ids = PRODUCTS
    vendor_trait = 'CUSTOM_GPU_INTEL'
    product_trait_prefix = 'CUSTOM_INTEL'
    family_name = 'Intel'
    sriov_layout = True

    def board_extra(self, pf: pci.PciFunction) -> dict[str, Any]:
        return ({'sriov_totalvfs': pf.sriov_totalvfs}
                if pf.sriov_totalvfs is not None else {})

    def layout_options(self, device: DriverDevice) -> dict[str, Any]:
        """``vf_count`` from 0 to ``sriov_totalvfs`` while xe drives a
        GPU it can be the SR-IOV PF of; nothing otherwise (see the
        module's docstring)."""
        pf = self.bus.get(self.control_function(device, 'read layouts'))
        if (pf is None or pf.driver != SRIOV_PF_DRIVER
                or PRODUCTS.get(pf.device_id) not in XE_SRIOV_PRODUCTS):
            return {}
        return dict(pci_lifecycle.vf_count_options(pf))

    def family_health(self, device: DriverDevice) -> list[Health]:
        address = handle_address(device.controlpath_id)
        if address is None:
            return []
        # The file's presence says it; reading it needs CAP_SYS_ADMIN.
        if os.path.lexists(os.path.join(self.function_dir(address),
                                        SURVIVABILITY_FILE)):
            return [Health(
                device_health.UNHEALTHY,
                f'Intel GPU {address} is in survivability mode: its '
                'firmware must be flashed again (xe survivability_mode)')]
        return []
