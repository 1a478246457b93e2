"""A driver for NVIDIA GPUs: passed through whole, or as vGPUs (mdevs).

Every NVIDIA VGA or 3D controller that is not an SR-IOV virtual function
is one device with one deployable. A GPU that ``[gpu_devices]`` gives no
vGPU type is one ``PGPU`` with a ``PCI`` attach handle, unless SR-IOV
VFs are enabled on it: it is then not reported, since its host driver
serves them and it cannot be passed through whole. A GPU given a type
is as many ``VGPU`` as it can host of that type, each an ``MDEV`` attach
handle whose uuid becomes the mediated device's uuid when it is bound.

GPUs with SR-IOV (Ampere and later, e.g. the A100) offer their vGPU types
on their virtual functions, one vGPU per VF, rather than on the GPU
itself; their handles then name the VF each vGPU is created on, which is
what the hypervisor needs as the mdev's parent, and never the GPU itself.
Virtual functions are never reported as devices of their own.

An mdev layout (``mdev_type``, ``mdev_count``) takes the place of the
configured type: the GPU then offers that many vGPUs of that type, or,
with ``mdev_count`` 0, is one whole PGPU again. The layouts and the
mdevs themselves are those of every mdev device (``mdev_driver``).
"""
import re

from oslo_config import cfg

from cyborg.accelerator import pci
from cyborg.accelerator.drivers import mdev_driver
from cyborg.accelerator.drivers import nvml
from cyborg.accelerator.drivers import pci_report
from cyborg.accelerator.drivers.base import trait_part
from cyborg.accelerator.drivers.mdev_driver import MdevDriver
from cyborg.accelerator.drivers.pci_driver import Functions
from cyborg.accelerator.drivers.pci_driver import handle_address
from cyborg.common import exception
from cyborg.common.device_health import Health
from cyborg.common.device_health import Usage
from cyborg.common.device_report import DriverDevice

VENDOR_ID = '0x10de'
#: VGA compatible controller, 3D controller.
GPU_CLASSES = ('0x0300', '0x0302')
TYPES_OPTION = '[gpu_devices] enabled_vgpu_types'
ADDRESSES_OPTION = '[gpu_devices] vgpu_type_addresses'
VENDOR_TRAIT = 'CUSTOM_GPU_NVIDIA'

# "GRID T4-1B" on older host drivers, "NVIDIA A40-8Q" on newer ones.
_NAME_PREFIX_RE = re.compile(r'^(?:GRID|NVIDIA)\s+', re.IGNORECASE)
_NOT_ALNUM_RE = re.compile(r'[^A-Z0-9]+')


def _invalid(option: str, value: str, reason: str) -> exception.Invalid:
    return exception.Invalid(reason=f'{option} {value!r}: {reason}')


def parse_vgpu_config(types: list[str], entries: list[str]
                      ) -> dict[str, str]:
    """The vGPU type of each GPU address in ``[gpu_devices]``; Invalid
    naming the option and the value when the configuration is wrong."""
    enabled = list(dict.fromkeys(t.strip() for t in types))
    for type_id in enabled:
        if not mdev_driver.TYPE_ID_RE.match(type_id):
            raise _invalid(TYPES_OPTION, type_id,
                           'not an mdev type name such as nvidia-222')
    by_address: dict[str, str] = {}
    mapped = set()
    for entry in entries:
        type_id, sep, addresses = entry.strip().partition(':')
        type_id = type_id.strip()
        if not sep or not addresses.strip():
            raise _invalid(ADDRESSES_OPTION, entry,
                           'expected <type>:<address>[,<address>...], e.g. '
                           'nvidia-222:0000:3b:00.0')
        if type_id not in enabled:
            raise _invalid(ADDRESSES_OPTION, entry,
                           f'type {type_id!r} is not in {TYPES_OPTION} '
                           f'({", ".join(enabled) or "empty"})')
        for address in addresses.split(','):
            address = address.strip().lower()
            if not pci.ADDRESS_RE.match(address):
                raise _invalid(ADDRESSES_OPTION, entry,
                               f'{address!r} is not a PCI address such as '
                               '0000:3b:00.0')
            other = by_address.setdefault(address, type_id)
            if other != type_id:
                raise _invalid(ADDRESSES_OPTION, entry,
                               f'{address} already serves type {other}; a '
                               'GPU serves one vGPU type')
        mapped.add(type_id)
    unmapped = [t for t in enabled if t not in mapped]
    if unmapped:
        raise _invalid(TYPES_OPTION, ','.join(enabled),
                       f'no GPU serves {", ".join(unmapped)}; name them in '
                       f'{ADDRESSES_OPTION}')
    return by_address


def vgpu_trait(product_id: str, mdev_type: pci.MdevType) -> str:
    """``CUSTOM_NVIDIA_<PRODUCT>_<TYPE NAME>``, e.g.
    ``CUSTOM_NVIDIA_1EB8_T4_1B`` for "GRID T4-1B" on a T4; the type id
    stands in for a type without a name."""
    name = _NAME_PREFIX_RE.sub('', (mdev_type.name or '').strip())
    part = _NOT_ALNUM_RE.sub('_', name.upper()).strip('_')
    if not part:
        part = _NOT_ALNUM_RE.sub('_', mdev_type.type_id.upper()).strip('_')
    return f'CUSTOM_NVIDIA_{trait_part(product_id[2:])}_{part}'[:255]


class NvidiaGpuDriver(MdevDriver):
    """Reports NVIDIA GPUs as PGPUs or VGPUs, and creates and removes the
    vGPUs' mediated devices."""

    driver_name = 'nvidia_gpu'
    conf_group = 'gpu_devices'
    sriov_layout = True
    vendor_id = VENDOR_ID
    class_prefixes = GPU_CLASSES
    physical_only = True
    noun = 'GPU'
    mdev_noun = 'vGPU'
    parent_noun = 'NVIDIA function'
    # GPUs train their link down to 2.5 GT/s when idle.
    link_speed_varies = True

    def __init__(self, conf: cfg.ConfigOpts) -> None:
        super().__init__(conf)
        self.vgpu_types = parse_vgpu_config(
            conf.gpu_devices.enabled_vgpu_types,
            conf.gpu_devices.vgpu_type_addresses)
        self.nvml = nvml.Nvml()

    def default_mdev_type(self, address: str) -> str | None:
        return self.vgpu_types.get(address)

    def mdev_parent(self, function: pci.PciFunction) -> bool:
        return function.vendor_id == VENDOR_ID

    # Monitoring: NVML's readings on top of the PCI layer's.

    def family_health(self, device: DriverDevice) -> list[Health]:
        address = handle_address(device.controlpath_id)
        return self.nvml.health(address) if address else []

    def family_usage(self, device: DriverDevice) -> Usage | None:
        address = handle_address(device.controlpath_id)
        return self.nvml.usage(address) if address else None

    # Discovery

    def devices(self, matching: list[pci.PciFunction], functions: Functions
                ) -> list[DriverDevice | None]:
        self._check_addresses(functions)
        return super().devices(matching, functions)

    def device(self, gpu: pci.PciFunction, functions: Functions
               ) -> DriverDevice | None:
        layout = self.mdev_layouts.get(gpu.address)
        if layout is not None:
            # A layout takes the place of the configured type; a count of
            # 0 gives the GPU back whole.
            if not layout[1]:
                return self._pgpu(gpu)
            return self._vgpu(gpu, layout[0], functions, layout[1])
        type_id = self.vgpu_types.get(gpu.address)
        if type_id is None:
            return self._pgpu(gpu)
        return self._vgpu(gpu, type_id, functions)

    def _check_addresses(self, functions: Functions) -> None:
        for address, type_id in sorted(self.vgpu_types.items()):
            function = functions.get(address)
            if function is None or not self.of_family(function):
                self.warn('%s names %s for vGPU type %s, but there is no '
                          'NVIDIA GPU at that address.', ADDRESSES_OPTION,
                          address, type_id)
            elif function.is_vf:
                self.warn('%s names %s for vGPU type %s, but that is a '
                          'virtual function; name its GPU %s instead.',
                          ADDRESSES_OPTION, address, type_id,
                          function.physfn)

    def _pgpu(self, gpu: pci.PciFunction) -> DriverDevice | None:
        """The GPU passed through whole; None, with a warning, while its
        host driver serves VFs (vGPUs of an SR-IOV GPU)."""
        return self.whole_device(
            'GPU', gpu, 'PGPU',
            ['OWNER_CYBORG', VENDOR_TRAIT,
             f'CUSTOM_NVIDIA_{trait_part(gpu.device_id[2:])}'],
            remedy='set its sriov_numvfs to 0, or give it a vGPU type in '
                   f'{ADDRESSES_OPTION}')

    def _vgpu(self, gpu: pci.PciFunction, type_id: str,
              functions: Functions, count: int | None = None
              ) -> DriverDevice | None:
        """The GPU as vGPUs of ``type_id``, created on the GPU or on its
        VFs, at most ``count`` of them when a layout says so; None, with a
        warning, when neither offers the type."""
        vfs = [functions[vf] for vf in gpu.virtfns if vf in functions]
        parents = mdev_driver.parents(gpu, vfs, type_id)
        if not parents:
            self.warn('NVIDIA GPU %s is configured for vGPU type %s but '
                      'does not offer it (it offers: %s); it is not '
                      'reported until it does.', gpu.address, type_id,
                      ', '.join(mdev_driver.type_ids([gpu, *vfs]))
                      or 'none')
            return None
        handles = self.mdev_handles(parents, type_id, count)
        mdev_type = parents[0][1]
        traits = ['OWNER_CYBORG', VENDOR_TRAIT,
                  vgpu_trait(gpu.device_id, mdev_type)]
        deployable = self.deployable(gpu, 'VGPU', traits, handles)
        board = {'vgpu_type': type_id}
        if mdev_type.name:
            board['vgpu_type_name'] = mdev_type.name
        return pci_report.device('GPU', gpu, [deployable], **board)
