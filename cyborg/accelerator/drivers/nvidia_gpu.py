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

Creating and removing mdevs writes to sysfs
(``mdev_supported_types/<type>/create``, the mdev's ``remove``), which
only root may do: an agent running as root writes the files itself, any
other agent through ``tee`` run by ``[agent] root_helper``.
"""
import errno
import logging
import os
import re
from typing import Any

from oslo_config import cfg
from oslo_utils import uuidutils

from cyborg.accelerator import pci
from cyborg.accelerator.drivers import nvml
from cyborg.accelerator.drivers import pci_lifecycle
from cyborg.accelerator.drivers import pci_report
from cyborg.accelerator.drivers.base import trait_part
from cyborg.accelerator.drivers.pci_driver import Functions
from cyborg.accelerator.drivers.pci_driver import PciDriver
from cyborg.accelerator.drivers.pci_driver import handle_address
from cyborg.common import exception
from cyborg.common.device_health import Health
from cyborg.common.device_health import Usage
from cyborg.common.device_report import DriverAttachHandle
from cyborg.common.device_report import DriverDevice
from cyborg.common.device_report import check_layout

LOG = logging.getLogger(__name__)

VENDOR_ID = '0x10de'
#: VGA compatible controller, 3D controller.
GPU_CLASSES = ('0x0300', '0x0302')
TYPES_OPTION = '[gpu_devices] enabled_vgpu_types'
ADDRESSES_OPTION = '[gpu_devices] vgpu_type_addresses'
VENDOR_TRAIT = 'CUSTOM_GPU_NVIDIA'

# An mdev type is a directory name: no '/', no '..', no ':'.
_TYPE_ID_RE = re.compile(r'^[A-Za-z0-9][A-Za-z0-9_.+-]{0,99}$')
# "GRID T4-1B" on older host drivers, "NVIDIA A40-8Q" on newer ones.
_NAME_PREFIX_RE = re.compile(r'^(?:GRID|NVIDIA)\s+', re.IGNORECASE)
_NOT_ALNUM_RE = re.compile(r'[^A-Z0-9]+')
# In a type's "description": "num_heads=4, ..., max_instance=16".
_MAX_INSTANCE_RE = re.compile(r'\bmax_instance=(\d+)')


def _invalid(option: str, value: str, reason: str) -> exception.Invalid:
    return exception.Invalid(reason=f'{option} {value!r}: {reason}')


def parse_vgpu_config(types: list[str], entries: list[str]
                      ) -> dict[str, str]:
    """The vGPU type of each GPU address in ``[gpu_devices]``; Invalid
    naming the option and the value when the configuration is wrong."""
    enabled = list(dict.fromkeys(t.strip() for t in types))
    for type_id in enabled:
        if not _TYPE_ID_RE.match(type_id):
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


def _offered(function: pci.PciFunction, type_id: str
             ) -> pci.MdevType | None:
    return next((t for t in function.mdev_types if t.type_id == type_id),
                None)


class NvidiaGpuDriver(PciDriver):
    """Reports NVIDIA GPUs as PGPUs or VGPUs, and creates and removes the
    vGPUs' mediated devices."""

    driver_name = 'nvidia_gpu'
    conf_group = 'gpu_devices'
    sriov_layout = True
    vendor_id = VENDOR_ID
    class_prefixes = GPU_CLASSES
    physical_only = True
    noun = 'GPU'
    # GPUs train their link down to 2.5 GT/s when idle.
    link_speed_varies = True

    def __init__(self, conf: cfg.ConfigOpts) -> None:
        super().__init__(conf)
        self.vgpu_types = parse_vgpu_config(
            conf.gpu_devices.enabled_vgpu_types,
            conf.gpu_devices.vgpu_type_addresses)
        # The mdev layouts applied since the agent started, by GPU
        # address: (type, vGPU count). They take the place of the
        # configured type; the agent re-applies the stored layouts after a
        # restart, so they need not outlive the process.
        self.mdev_layouts: dict[str, tuple[str, int]] = {}
        self.nvml = nvml.Nvml()

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
        type_id = layout[0] if layout else self.vgpu_types.get(gpu.address)
        if type_id is None:
            return self._pgpu(gpu)
        return self._vgpu(gpu, type_id, functions,
                          layout[1] if layout else None)

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
        parents = [(f, t) for f in [gpu] if (t := _offered(f, type_id))]
        if not parents:
            parents = [(f, t) for f in vfs if (t := _offered(f, type_id))]
        if not parents:
            offered = sorted({t.type_id for f in [gpu, *vfs]
                              for t in f.mdev_types})
            self.warn('NVIDIA GPU %s is configured for vGPU type %s but '
                      'does not offer it (it offers: %s); it is not '
                      'reported until it does.', gpu.address, type_id,
                      ', '.join(offered) or 'none')
            return None
        handles = []
        hosts = self._vgpu_parents(parents)
        if count is not None:
            # The layout restricts what is offered; the mdevs themselves
            # are still created when an instance is bound to a handle.
            hosts = hosts[:count]
        for n, parent in enumerate(hosts):
            info = parent.attach_info()
            info.update(asked_type=type_id, vgpu_mark=f'{type_id}_{n}')
            handles.append(DriverAttachHandle(attach_type='MDEV',
                                              attach_info=info))
        mdev_type = parents[0][1]
        traits = ['OWNER_CYBORG', VENDOR_TRAIT,
                  vgpu_trait(gpu.device_id, mdev_type)]
        deployable = self.deployable(gpu, 'VGPU', traits, handles)
        board = {'vgpu_type': type_id}
        if mdev_type.name:
            board['vgpu_type_name'] = mdev_type.name
        return pci_report.device('GPU', gpu, [deployable], **board)

    def _vgpu_parents(self, parents: list[tuple[pci.PciFunction,
                                                pci.MdevType]]
                      ) -> list[pci.PciFunction]:
        """One parent per vGPU the GPU can host: each existing mdev of the
        type, then free instances up to the type's ``max_instance`` (VFs
        each say one is free, even when the GPU has memory for fewer
        vGPUs than it has VFs), in parent order."""
        used: list[pci.PciFunction] = []
        free: list[pci.PciFunction] = []
        for parent, mdev_type in parents:
            used += [parent] * len(mdev_type.devices)
            free += [parent] * max(0, mdev_type.available_instances)
        limit = self._max_instance(*parents[0])
        if limit is not None:
            free = free[:max(0, limit - len(used))]
        order = {p.address: i for i, (p, _) in enumerate(parents)}
        return sorted(used + free, key=lambda p: order[p.address])

    def _max_instance(self, parent: pci.PciFunction,
                      mdev_type: pci.MdevType) -> int | None:
        description = self.bus.read(os.path.join(
            parent.sysfs_path, 'mdev_supported_types', mdev_type.type_id,
            'description')) or ''
        match = _MAX_INSTANCE_RE.search(description)
        return int(match.group(1)) if match else None

    # Layouts: a VF count (PciDriver), and which vGPU type and how many
    # vGPUs of it the GPU offers.

    def _mdev_parents(self, gpu: pci.PciFunction
                      ) -> list[pci.PciFunction]:
        vfs = [f for a in gpu.virtfns if (f := self.bus.get(a))]
        return [gpu] + vfs

    def mdev_capacity(self, gpu: pci.PciFunction) -> dict[str, int]:
        """How many vGPUs of each type the GPU (or its VFs) can host."""
        capacity: dict[str, int] = {}
        parents = self._mdev_parents(gpu)
        type_ids = sorted({t.type_id for f in parents for t in f.mdev_types})
        for type_id in type_ids:
            offered = [(f, t) for f in parents if (t := _offered(f, type_id))]
            capacity[type_id] = len(self._vgpu_parents(offered))
        return capacity

    def layout_options(self, device: DriverDevice) -> dict[str, Any]:
        options = super().layout_options(device)
        gpu = self.bus.get(self.control_function(device, 'read layouts'))
        capacity = self.mdev_capacity(gpu) if gpu else {}
        if capacity:
            options['mdev_type'] = capacity
            options['mdev_count'] = {'min': 1,
                                     'max': max(capacity.values())}
        return options

    def apply_layout(self, device: DriverDevice,
                     layout: dict[str, Any]) -> None:
        """Apply ``vf_count`` first (VFs may be what hosts the vGPUs),
        then restrict the GPU to ``mdev_count`` vGPUs of ``mdev_type``."""
        mdev = {k: layout[k] for k in ('mdev_type', 'mdev_count')
                if k in layout}
        rest = {k: v for k, v in layout.items() if k not in mdev}
        check_layout(self.layout_options(device), layout)
        if rest:
            super().apply_layout(device, rest)
        if not mdev:
            return
        address = self.control_function(device, 'set the vGPU layout')
        gpu = self.bus.get(address)
        capacity = self.mdev_capacity(gpu) if gpu else {}
        current = self.mdev_layouts.get(address)
        type_id = mdev.get('mdev_type') or (
            current[0] if current else self.vgpu_types.get(address))
        if type_id not in capacity:
            raise exception.Invalid(
                reason=f'mdev_type {type_id!r} is not one of '
                       f'{", ".join(sorted(capacity)) or "(none)"} that GPU '
                       f'{address} offers')
        count = mdev.get('mdev_count', capacity[type_id])
        if count > capacity[type_id]:
            raise exception.Invalid(
                reason=f'mdev_count {count} is above the {capacity[type_id]}'
                       f' vGPUs of type {type_id} that GPU {address} can '
                       'host')
        other = sorted({t.type_id for f in self._mdev_parents(gpu)
                        for t in f.mdev_types
                        if t.devices and t.type_id != type_id}) if gpu else []
        if other:
            raise exception.DeviceActionError(
                action='set the vGPU layout', device=address,
                reason=f'mdevs of type {", ".join(other)} exist on it')
        self.mdev_layouts[address] = (type_id, count)
        LOG.info('GPU %s offers %d vGPUs of type %s.', address, count,
                 type_id)

    def clean(self, handle: DriverAttachHandle) -> None:
        """An MDEV handle: remove its mdev (``mdev_uuid`` in the attach
        info, the handle's uuid) and create it again, which hands the next
        tenant a vGPU whose memory the host driver cleared; one that
        does not exist holds nothing to clean. A PCI handle (a whole
        GPU): function-level reset."""
        if handle.attach_type != 'MDEV':
            super().clean(handle)
            return
        mdev_uuid = handle.attach_info.get('mdev_uuid', '')
        parent, _, mdev_uuid = self._mdev_target(
            'clean mdev', handle.attach_info, mdev_uuid, need_type=True)
        mdev_dir = self.bus.path(f'/sys/bus/mdev/devices/{mdev_uuid}')
        if not os.path.isdir(mdev_dir):
            LOG.debug('mdev %s on %s does not exist: nothing to clean.',
                      mdev_uuid, parent)
            return
        self.remove_mdev(handle.attach_info, mdev_uuid)
        if not pci_lifecycle.wait_for(lambda: not os.path.isdir(mdev_dir)):
            raise exception.DeviceActionError(
                action='clean mdev', device=parent,
                reason=f'mdev {mdev_uuid} is still there after remove')
        self.create_mdev(handle.attach_info, mdev_uuid)
        if not pci_lifecycle.wait_for(lambda: os.path.isdir(mdev_dir)):
            raise exception.DeviceActionError(
                action='clean mdev', device=parent,
                reason=f'mdev {mdev_uuid} was not created again')

    # Mediated devices

    def _mdev_target(self, action: str, attach_info: dict[str, str],
                     mdev_uuid: str, need_type: bool
                     ) -> tuple[str, str, str]:
        """(parent address, mdev type, uuid) of an MDEV attach handle."""
        def fail(reason: str) -> exception.DeviceActionError:
            return exception.DeviceActionError(
                action=action, device=str(attach_info), reason=reason)

        try:
            address = '{domain}:{bus}:{device}.{function}'.format(
                **attach_info).lower()
        except (KeyError, TypeError, ValueError):
            raise fail('the attach handle names no PCI function') from None
        type_id = attach_info.get('asked_type', '')
        if not pci.ADDRESS_RE.match(address):
            raise fail(f'{address!r} is not a PCI address')
        if (need_type or type_id) and not _TYPE_ID_RE.match(type_id):
            raise fail(f'{type_id!r} is not an mdev type')
        if not uuidutils.is_uuid_like(mdev_uuid):
            raise fail(f'{mdev_uuid!r} is not a UUID')
        function = self.bus.get(address)
        if function is None or function.vendor_id != VENDOR_ID:
            raise fail(f'there is no NVIDIA function at {address}')
        return address, type_id, mdev_uuid.lower()

    def _write(self, path: str, text: str, action: str, device: str
               ) -> None:
        pci_lifecycle.write(self.conf, path, text, action, device)

    def create_mdev(self, attach_info: dict[str, str],
                    mdev_uuid: str) -> None:
        action = 'create mdev'
        parent, type_id, mdev_uuid = self._mdev_target(
            action, attach_info, mdev_uuid, need_type=True)
        parent_dir = self.bus.path(f'/sys/class/mdev_bus/{parent}')
        type_dir = os.path.join(parent_dir, 'mdev_supported_types', type_id)
        if not os.path.isdir(type_dir):
            raise exception.DeviceActionError(
                action=action, device=parent,
                reason=f'it offers no mdev type {type_id}')
        mine = os.path.join(type_dir, 'devices', mdev_uuid)
        if os.path.lexists(mine):
            LOG.debug('mdev %s of type %s exists on %s.', mdev_uuid, type_id,
                      parent)
            return
        for existing in (self.bus.path(f'/sys/bus/mdev/devices/{mdev_uuid}'),
                         os.path.join(parent_dir, mdev_uuid)):
            if os.path.lexists(existing):
                raise exception.DeviceActionError(
                    action=action, device=parent,
                    reason=f'a different mdev {mdev_uuid} is in the way, on '
                           f'{self.bus.address_of(existing)}')
        try:
            self._write(os.path.join(type_dir, 'create'), mdev_uuid, action,
                        parent)
        except exception.DeviceActionError as exc:
            cause = exc.__cause__
            if (isinstance(cause, OSError) and cause.errno == errno.EEXIST
                    and os.path.lexists(mine)):
                return
            raise
        LOG.info('Created mdev %s of type %s on %s.', mdev_uuid, type_id,
                 parent)

    def remove_mdev(self, attach_info: dict[str, str],
                    mdev_uuid: str) -> None:
        action = 'remove mdev'
        parent, _, mdev_uuid = self._mdev_target(
            action, attach_info, mdev_uuid, need_type=False)
        for mdev_dir in (
                self.bus.path(f'/sys/bus/mdev/devices/{mdev_uuid}'),
                self.bus.path(f'/sys/class/mdev_bus/{parent}/{mdev_uuid}')):
            if not os.path.isdir(mdev_dir):
                continue
            owner = self.bus.address_of(mdev_dir)
            if owner != parent:
                raise exception.DeviceActionError(
                    action=action, device=parent,
                    reason=f'mdev {mdev_uuid} belongs to {owner}')
            try:
                self._write(os.path.join(mdev_dir, 'remove'), '1', action,
                            parent)
            except exception.DeviceActionError as exc:
                cause = exc.__cause__
                if isinstance(cause, OSError) and cause.errno == errno.ENOENT:
                    break
                raise
            LOG.info('Removed mdev %s from %s.', mdev_uuid, parent)
            return
        LOG.debug('mdev %s on %s is already gone.', mdev_uuid, parent)
