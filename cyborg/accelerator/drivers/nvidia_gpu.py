"""A driver for NVIDIA GPUs: passed through whole, or as vGPUs (mdevs, or
SR-IOV VFs given a vGPU type).

Every NVIDIA VGA or 3D controller that is not an SR-IOV virtual function
is one device with one deployable. A GPU that ``[gpu_devices]`` gives no
vGPU type is one ``PGPU`` with a ``PCI`` attach handle, unless SR-IOV
VFs are enabled on it: it is then not reported, since its host driver
serves them and it cannot be passed through whole. A GPU given a type
is as many ``VGPU`` as it can host of that type, each an ``MDEV`` attach
handle whose uuid becomes the mediated device's uuid when it is bound.

GPUs with SR-IOV on vGPU software before 17 (Ampere, e.g. the A100)
offer their vGPU types on their virtual functions, one vGPU per VF,
rather than on the GPU itself; their handles then name the VF each vGPU
is created on, which is what the hypervisor needs as the mdev's parent,
and never the GPU itself. Virtual functions are never reported as
devices of their own.

From vGPU software 17 on (Ada, Hopper, Blackwell) there are no mdevs: a
VF becomes a vGPU when it is given a vGPU type (``nvidia_vgpu``). Such a
GPU, given a type by a layout (``vgpu_type``, ``vgpu_count``) or by
``[gpu_devices]``, is as many ``VGPU`` as it can host of that type,
each a ``PCI`` attach handle of one VF that names the type: a bind gives
the VF its type, a release takes it back. The handle asks for the VF to
be passed through unmanaged on the ``nvidia`` driver, as NVIDIA
documents it. A MIG-backed type is offered as many times as the GPU's
MIG partition has GPU instances of its profile.

An mdev layout (``mdev_type``, ``mdev_count``) takes the place of the
configured type: the GPU then offers that many vGPUs of that type, or,
with ``mdev_count`` 0, is one whole PGPU again. The layouts and the
mdevs themselves are those of every mdev device (``mdev_driver``).
"""
import re
from typing import Any

from oslo_config import cfg

from cyborg.accelerator import pci
from cyborg.accelerator.drivers import mdev_driver
from cyborg.accelerator.drivers import nvidia_mig
from cyborg.accelerator.drivers import nvidia_vgpu
from cyborg.accelerator.drivers import nvml
from cyborg.accelerator.drivers import pci_report
from cyborg.accelerator.drivers.base import trait_part
from cyborg.accelerator.drivers.mdev_driver import MdevDriver
from cyborg.accelerator.drivers.pci_driver import Functions
from cyborg.accelerator.drivers.pci_driver import handle_address
from cyborg.common import device_report
from cyborg.common import exception
from cyborg.common.device_health import Health
from cyborg.common.device_health import Usage
from cyborg.common.device_report import DriverAttachHandle
from cyborg.common.device_report import DriverDevice
from cyborg.common.device_report import check_layout

VENDOR_ID = '0x10de'
#: VGA compatible controller, 3D controller.
GPU_CLASSES = ('0x0300', '0x0302')
TYPES_OPTION = '[gpu_devices] enabled_vgpu_types'
ADDRESSES_OPTION = '[gpu_devices] vgpu_type_addresses'
VENDOR_TRAIT = 'CUSTOM_GPU_NVIDIA'
#: The driver that serves VFIO for the VFs of an SR-IOV vGPU GPU.
VGPU_VF_DRIVER = 'nvidia'
#: The layout keys of vGPUs on SR-IOV VFs.
VGPU_LAYOUT_KEYS = ('vgpu_type', 'vgpu_count')

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


def vgpu_trait(product_id: str, type_id: str, name: str | None) -> str:
    """``CUSTOM_NVIDIA_<PRODUCT>_<TYPE NAME>``, e.g.
    ``CUSTOM_NVIDIA_1EB8_T4_1B`` for "GRID T4-1B" on a T4, or
    ``CUSTOM_NVIDIA_2330_H100_10C`` for "NVIDIA H100-10C" on an H100; the
    type id stands in for a type without a name."""
    name = _NAME_PREFIX_RE.sub('', (name or '').strip())
    part = _NOT_ALNUM_RE.sub('_', name.upper()).strip('_')
    if not part:
        part = _NOT_ALNUM_RE.sub('_', type_id.upper()).strip('_')
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
        # The vGPU layouts of SR-IOV vGPU GPUs applied since the agent
        # started, by GPU address: (type id, count). Like the mdev
        # layouts, the agent applies the stored ones again when it starts.
        self.vgpu_layouts: dict[str, tuple[str, int]] = {}
        # Each SR-IOV vGPU GPU's framebuffer in GB, learnt from its type
        # names while none of its VFs had a type (they narrow after).
        self._framebuffer: dict[str, int] = {}
        self.mig = nvidia_mig.Mig(self.nvml)

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

    # MIG (nvidia_mig): its keys beside the mdev, VF and vGPU ones.

    def _apply_mig(self, device: DriverDevice, mig: dict[str, Any]) -> None:
        gpu, vfs = self._sriov_vfs(device, nvidia_mig.ACTION)
        address = self.control_function(device, nvidia_mig.ACTION)
        busy = [f'vGPUs of type {t}' for t in self._existing(gpu, None)]
        busy += [f'VF {s.function.address} (vGPU type {s.current})'
                 for s in vfs if s.current is not None]
        self.mig.apply(address, mig, busy + self.mig.processes(address))

    # Discovery

    def devices(self, matching: list[pci.PciFunction], functions: Functions
                ) -> list[DriverDevice | None]:
        self._check_addresses(functions)
        return super().devices(matching, functions)

    def device(self, gpu: pci.PciFunction, functions: Functions
               ) -> DriverDevice | None:
        vfs = nvidia_vgpu.gpu_vfs(self.bus, gpu, functions)
        if vfs:
            return self._sriov_vgpus(gpu, vfs)
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
                  vgpu_trait(gpu.device_id, mdev_type.type_id,
                             mdev_type.name)]
        deployable = self.deployable(gpu, 'VGPU', traits, handles)
        board = {'vgpu_type': type_id}
        if mdev_type.name:
            board['vgpu_type_name'] = mdev_type.name
        return pci_report.device('GPU', gpu, [deployable], **board)

    # vGPUs on SR-IOV VFs (vGPU software 17 and later)

    def _vgpu_choice(self, address: str) -> tuple[str | None, int | None]:
        """The vGPU type an SR-IOV vGPU GPU offers and at most how many:
        its layout's, else ``[gpu_devices]``'s (as many as fit)."""
        layout = self.vgpu_layouts.get(address)
        if layout is not None:
            return layout
        return self.vgpu_types.get(address), None

    def _vgpu_limit(self, gpu: pci.PciFunction,
                    vfs: list[nvidia_vgpu.VfState],
                    vgpu_type: nvidia_vgpu.VgpuType) -> int | None:
        """How many vGPUs of ``vgpu_type`` the GPU holds: for a MIG-backed
        type, the GPU instances of its profile the MIG partition has (none
        without one: the partition provides these types, whatever the VFs
        list); for a time-sliced one, NVML's limit for the board, or,
        without NVML, what the type names say (see
        ``nvidia_vgpu.framebuffer_limit``)."""
        profile = nvidia_mig.vgpu_profile(vgpu_type.name)
        if profile is not None:
            return self.mig.instances(gpu.address).count(profile)
        limit = self.nvml.vgpu_max_instances(gpu.address, vgpu_type.type_id)
        if limit is not None:
            return limit
        whole = nvidia_vgpu.whole_framebuffer(vfs)
        if whole:
            self._framebuffer[gpu.address] = whole
        return nvidia_vgpu.framebuffer_limit(
            vgpu_type, whole or self._framebuffer.get(gpu.address))

    def vgpu_capacity(self, gpu: pci.PciFunction,
                      vfs: list[nvidia_vgpu.VfState]) -> dict[str, int]:
        """How many vGPUs of each type the GPU's VFs can host now."""
        return {type_id: len(nvidia_vgpu.hosts(
                    vfs, type_id, self._vgpu_limit(gpu, vfs, vgpu_type)))
                for type_id, vgpu_type in nvidia_vgpu.offered(vfs).items()}

    def _sriov_vgpus(self, gpu: pci.PciFunction,
                     vfs: list[nvidia_vgpu.VfState]) -> DriverDevice:
        """The GPU as vGPUs of its chosen type, one per VF that has or can
        take it; without a type chosen, a device that offers nothing yet
        (there for its layout to be set)."""
        type_id, count = self._vgpu_choice(gpu.address)
        offered = nvidia_vgpu.offered(vfs)
        board = {'vgpu_mode': 'sriov'}
        if type_id is None or type_id not in offered:
            self.warn('NVIDIA GPU %s lends vGPUs on %d SR-IOV VFs but %s; '
                      'it offers none until a layout (vgpu_type, '
                      'vgpu_count) or %s gives it one of: %s.', gpu.address,
                      len(vfs),
                      'has no vGPU type' if type_id is None
                      else f'does not offer vGPU type {type_id} now',
                      ADDRESSES_OPTION,
                      ', '.join(f'{t.type_id} ({t.name})'
                                for t in offered.values()) or 'none')
            return pci_report.device('GPU', gpu, [], **board)
        vgpu_type = offered[type_id]
        limit = self._vgpu_limit(gpu, vfs, vgpu_type)
        if count is not None:
            limit = count if limit is None else min(limit, count)
        # A VF that has the type is always one: a layout never takes a
        # vGPU from under its user.
        chosen = nvidia_vgpu.hosts(vfs, type_id, limit)
        handles = [self._vgpu_handle(state.function, type_id)
                   for state in chosen]
        traits = ['OWNER_CYBORG', VENDOR_TRAIT,
                  vgpu_trait(gpu.device_id, type_id, vgpu_type.name)]
        board.update(vgpu_type=type_id, vgpu_type_name=vgpu_type.name)
        return pci_report.device(
            'GPU', gpu, [self.deployable(gpu, 'VGPU', traits, handles)],
            **board)

    @staticmethod
    def _vgpu_handle(vf: pci.PciFunction, type_id: str
                     ) -> DriverAttachHandle:
        # Unmanaged, on the nvidia driver, which serves VFIO for the VF.
        return pci_report.pci_handle(
            vf, **{device_report.VGPU_TYPE: type_id, 'managed': 'false',
                   'vfio_driver': VGPU_VF_DRIVER})

    def _sriov_vfs(self, device: DriverDevice, action: str
                   ) -> tuple[pci.PciFunction | None,
                              list[nvidia_vgpu.VfState]]:
        gpu = self.bus.get(self.control_function(device, action))
        return gpu, (nvidia_vgpu.gpu_vfs(self.bus, gpu) if gpu else [])

    def layout_options(self, device: DriverDevice) -> dict[str, Any]:
        options = super().layout_options(device)
        gpu, vfs = self._sriov_vfs(device, 'read layouts')
        capacity = self.vgpu_capacity(gpu, vfs) if gpu and vfs else {}
        if capacity:
            options['vgpu_type'] = capacity
            options['vgpu_count'] = {'min': 0,
                                     'max': max(capacity.values())}
        elif gpu is not None and not gpu.vfs_enabled and 'vf_count' in (
                options):
            # Its VFs list the vGPU types once they exist: a layout that
            # makes them may choose one, checked once they do (and
            # applied again, VFs first, after a reboot took them away).
            options['vgpu_type'] = options['vgpu_count'] = {
                'after': ['vf_count']}
        address = handle_address(device.controlpath_id)
        options.update(self.mig.layout_options(address) if address else {})
        return options

    def apply_layout(self, device: DriverDevice,
                     layout: dict[str, Any]) -> None:
        """Apply what the mdev layer knows first (``vf_count`` may create
        the VFs), then restrict an SR-IOV vGPU GPU to ``vgpu_count``
        vGPUs of ``vgpu_type`` (0: none). Refused while a VF has another
        type: a layout never takes a vGPU from under its user."""
        vgpu = {k: layout[k] for k in VGPU_LAYOUT_KEYS if k in layout}
        mig = {k: layout[k] for k in nvidia_mig.LAYOUT_KEYS if k in layout}
        rest = {k: v for k, v in layout.items()
                if k not in vgpu and k not in mig}
        if rest:
            super().apply_layout(device, rest)
        if mig:
            # Before the vGPU keys: MIG-backed types need the partition.
            self._apply_mig(device, mig)
        if not vgpu:
            return
        action = 'set the vGPU layout'
        gpu, vfs = self._sriov_vfs(device, action)
        if gpu is None or not vfs:
            raise exception.Invalid(
                reason=f'{self.noun} {device.controlpath_id} has no VFs '
                       'with NVIDIA vGPU types; enable them first '
                       '(vf_count)')
        capacity = self.vgpu_capacity(gpu, vfs)
        check_layout({'vgpu_type': capacity,
                      'vgpu_count': {'min': 0,
                                     'max': max(capacity.values())}}, vgpu)
        type_id, count = vgpu['vgpu_type'], vgpu['vgpu_count']
        if count > capacity[type_id]:
            raise exception.Invalid(
                reason=f'vgpu_count {count} is above the '
                       f'{capacity[type_id]} vGPUs of type {type_id} that '
                       f'{self.noun} {gpu.address} can host')
        kept = type_id if count else None
        others = sorted({s.current for s in vfs
                         if s.current is not None and s.current != kept})
        if others:
            raise exception.DeviceActionError(
                action=action, device=gpu.address,
                reason=f'VFs have vGPUs of type {", ".join(others)}')
        self.vgpu_layouts[gpu.address] = (type_id, count)
        self.log.info('%s %s offers %d vGPUs of type %s.', self.noun,
                      gpu.address, count, type_id)

    # The vGPU of a VF handle: given at bind, taken back at release (the
    # agent's mdev actions, which are a handle's device-side state).

    def _vgpu_vf(self, attach_info: dict[str, str], action: str
                 ) -> tuple[str, str]:
        """(VF address, type id) of a VF handle; DeviceActionError for one
        that names no NVIDIA vGPU VF."""
        address = handle_address(attach_info)
        type_id = attach_info.get(device_report.VGPU_TYPE, '')
        vf = self.bus.get(address) if address else None
        physfn = self.bus.get(vf.physfn) if vf and vf.physfn else None
        if vf is None or physfn is None or not self.matches(physfn):
            raise exception.DeviceActionError(
                action=action, device=str(attach_info),
                reason='it names no VF of an NVIDIA GPU')
        if not type_id.isdigit():
            raise exception.DeviceActionError(
                action=action, device=vf.address,
                reason=f'{type_id!r} is not a vGPU type id')
        return vf.address, type_id

    def create_mdev(self, attach_info: dict[str, str],
                    mdev_uuid: str) -> None:
        if device_report.VGPU_TYPE not in attach_info:
            super().create_mdev(attach_info, mdev_uuid)
            return
        address, type_id = self._vgpu_vf(attach_info, 'set the vGPU type')
        if nvidia_vgpu.set_type(self.conf, self.bus, address, type_id):
            self.log.info('VF %s is a vGPU of type %s for attach handle '
                          '%s.', address, type_id, mdev_uuid)

    def remove_mdev(self, attach_info: dict[str, str],
                    mdev_uuid: str) -> None:
        if device_report.VGPU_TYPE not in attach_info:
            super().remove_mdev(attach_info, mdev_uuid)
            return
        address, _ = self._vgpu_vf(attach_info, 'clear the vGPU type')
        if nvidia_vgpu.clear_type(self.conf, self.bus, address):
            self.log.info('VF %s has no vGPU any more (attach handle %s).',
                          address, mdev_uuid)

    def clean(self, handle: DriverAttachHandle) -> None:
        """A VF handle: its vGPU destroyed (released handles have none
        by now), then a function-level reset of the VF."""
        if (handle.attach_type == 'PCI'
                and device_report.VGPU_TYPE in handle.attach_info):
            address, _ = self._vgpu_vf(handle.attach_info, 'clean')
            nvidia_vgpu.clear_type(self.conf, self.bus, address)
        super().clean(handle)
