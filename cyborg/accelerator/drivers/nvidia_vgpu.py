"""NVIDIA vGPUs on SR-IOV virtual functions (vGPU software 17 and later on
Ada, Hopper and Blackwell GPUs): reading and setting a VF's vGPU type.

On these GPUs the vGPU manager no longer offers mediated devices. Each
virtual function of the GPU becomes one vGPU when it is given a vGPU type
through the ``nvidia`` directory the host driver adds to the VF's sysfs
entry, and is then passed through to the guest as a PCI device that stays
bound to the ``nvidia`` driver, which serves VFIO itself. The files, as
NVIDIA's Virtual GPU Software User Guide (vGPU 17.0 and later, "Creating
an NVIDIA vGPU on a Linux with KVM Hypervisor That Uses a Vendor-Specific
VFIO Framework", https://docs.nvidia.com/vgpu/18.0/grid-vgpu-user-guide/)
describes them:

* ``nvidia/creatable_vgpu_types``: a header line ``ID    : vGPU Name``,
  then one line per type the VF can take now, ``1145  : NVIDIA L40S-1B``.
  The list narrows as VFs of the GPU take types (the GPU's framebuffer is
  shared), down to the header alone on a GPU that is full, and is the
  header alone on a VF that has a type;
* ``nvidia/current_vgpu_type``: the id of the VF's type, ``0`` for none.
  Writing a type id creates the vGPU, writing ``0`` destroys it; the
  driver refuses a type on a VF that has one and ``0`` on a VF that has
  none (EPERM), and text that is not a number (EINVAL).

The guest's hostdev is therefore unmanaged (``managed='no'``), as NVIDIA
documents it: libvirt must not move the VF to ``vfio-pci``.
"""
import dataclasses
import os
import re
from collections.abc import Mapping

from oslo_config import cfg

from cyborg.accelerator import pci
from cyborg.accelerator.drivers import pci_lifecycle
from cyborg.common import exception

#: The attach-info key naming the vGPU type a VF handle gives its VF.
VGPU_TYPE = 'vgpu_type'
CREATABLE = 'nvidia/creatable_vgpu_types'
CURRENT = 'nvidia/current_vgpu_type'
NONE = '0'
_TYPE_LINE_RE = re.compile(r'^\s*(\d+)\s*:\s*(\S.*?)\s*$')
# Time-sliced types end in their framebuffer in GB and a series letter
# ("NVIDIA H100-10C", "NVIDIA L40S-1B"); MIG-backed ones name the slices
# first ("NVIDIA H100-3-40C"), and are sized by their GPU instance.
_TIME_SLICED_RE = re.compile(r'-(\d+)[A-Z]+$')
_MIG_BACKED_RE = re.compile(r'-\d+-\d+[A-Z]+$')


@dataclasses.dataclass(frozen=True)
class VgpuType:
    """A vGPU type as ``creatable_vgpu_types`` lists it."""

    type_id: str
    name: str

    @property
    def framebuffer_gb(self) -> int | None:
        """The framebuffer of a time-sliced type, from its name; None for
        a MIG-backed type or a name that does not say."""
        if _MIG_BACKED_RE.search(self.name):
            return None
        match = _TIME_SLICED_RE.search(self.name)
        return int(match.group(1)) if match else None


@dataclasses.dataclass(frozen=True)
class VfState:
    """One VF of an SR-IOV vGPU GPU: its vGPU type (None: none) and the
    types it can take now."""

    function: pci.PciFunction
    current: str | None
    creatable: tuple[VgpuType, ...]


def parse_types(text: str) -> list[VgpuType]:
    """The types of a ``creatable_vgpu_types`` text, header skipped."""
    return [VgpuType(m.group(1), m.group(2)) for line in text.splitlines()
            if (m := _TYPE_LINE_RE.match(line))]


def read_vf(bus: pci.PciBus, vf: pci.PciFunction) -> VfState | None:
    """The vGPU state of ``vf``; None when its driver gives it no vGPU
    files (not an SR-IOV vGPU VF, or the vGPU manager is not loaded)."""
    creatable = bus.read(os.path.join(vf.sysfs_path, CREATABLE))
    current = bus.read(os.path.join(vf.sysfs_path, CURRENT))
    if creatable is None or current is None:
        return None
    return VfState(vf, None if current == NONE else current,
                   tuple(parse_types(creatable)))


def gpu_vfs(bus: pci.PciBus, gpu: pci.PciFunction,
            functions: Mapping[str, pci.PciFunction] | None = None
            ) -> list[VfState]:
    """The vGPU state of each of ``gpu``'s VFs that has one, in VF
    order; empty for a GPU whose VFs are not vGPU VFs."""
    found = []
    for address in gpu.virtfns:
        vf = (functions.get(address) if functions is not None
              else bus.get(address))
        state = read_vf(bus, vf) if vf is not None else None
        if state is not None:
            found.append(state)
    return found


def offered(vfs: list[VfState]) -> dict[str, VgpuType]:
    """Every type the GPU's VFs have or can take, by id, in id order."""
    types: dict[str, VgpuType] = {}
    for state in vfs:
        for vgpu_type in state.creatable:
            types.setdefault(vgpu_type.type_id, vgpu_type)
    for state in vfs:
        if state.current is not None and state.current not in types:
            # A full GPU lists nothing: the type is known by its id only.
            types[state.current] = VgpuType(state.current, state.current)
    return dict(sorted(types.items(), key=lambda item: int(item[0])))


def hosts(vfs: list[VfState], type_id: str, limit: int | None
          ) -> list[VfState]:
    """The VFs that host a vGPU of ``type_id``: those that have it, then
    those that can take it, at most ``limit`` in all (what the GPU's
    framebuffer allows; every empty VF lists a type that fits once),
    in VF order."""
    have = [s for s in vfs if s.current == type_id]
    can = [s for s in vfs if s.current is None
           and any(t.type_id == type_id for t in s.creatable)]
    if limit is not None:
        can = can[:max(0, limit - len(have))]
    chosen = {s.function.address for s in have + can}
    return [s for s in vfs if s.function.address in chosen]


def whole_framebuffer(vfs: list[VfState]) -> int | None:
    """The GPU's framebuffer in GB, from the type names its VFs list
    while none has a type: the largest type is the whole GPU (``H100-80C``
    on an 80 GB H100). None once a VF has a type (the lists have narrowed)
    or when no name says."""
    if any(s.current is not None for s in vfs):
        return None
    return max((t.framebuffer_gb or 0 for s in vfs for t in s.creatable),
               default=0) or None


def framebuffer_limit(vgpu_type: VgpuType, whole_gb: int | None
                      ) -> int | None:
    """How many vGPUs of a time-sliced ``vgpu_type`` a GPU of
    ``whole_gb`` holds (80 // 10 = 8 of ``H100-10C``); None when either
    size is unknown."""
    size = vgpu_type.framebuffer_gb
    if not size or not whole_gb or whole_gb < size:
        return None
    return whole_gb // size


def _vf_dir(bus: pci.PciBus, address: str, action: str) -> str:
    vf = bus.get(address)
    if vf is None:
        raise exception.DeviceActionError(
            action=action, device=address, reason='the VF is gone')
    return vf.sysfs_path


def current_type(bus: pci.PciBus, address: str) -> str | None:
    """The vGPU type of the VF at ``address``; None for none."""
    value = bus.read(bus.path(f'/sys/bus/pci/devices/{address}/{CURRENT}'))
    return None if value in (None, NONE) else value


def _answered(bus: pci.PciBus, address: str) -> bool:
    """Whether the VF's ``current_vgpu_type`` reads as the driver prints
    it (a newline after the id) rather than as it was written (the bare
    id): the emulated kernel of the tests answers a write after
    ``write()`` returned, the real one before."""
    try:
        with open(bus.path(f'/sys/bus/pci/devices/{address}/{CURRENT}'),
                  encoding='utf-8') as f:
            return f.read().endswith('\n')
    except OSError:
        return True


def set_type(conf: cfg.ConfigOpts, bus: pci.PciBus, address: str,
             type_id: str) -> bool:
    """Give the VF at ``address`` vGPU type ``type_id``; False when it had
    it already. DeviceActionError when it has another type, or the
    driver did not create the vGPU (the GPU has no room left for it)."""
    action = 'set the vGPU type'
    directory = _vf_dir(bus, address, action)
    now = current_type(bus, address)
    if now == type_id:
        return False
    if now is not None:
        raise exception.DeviceActionError(
            action=action, device=address,
            reason=f'it has vGPU type {now}, not {type_id}')
    pci_lifecycle.write(conf, os.path.join(directory, CURRENT), type_id,
                        action, address)
    pci_lifecycle.wait_for(lambda: _answered(bus, address))
    if current_type(bus, address) != type_id:
        creatable = bus.read(os.path.join(directory, CREATABLE)) or ''
        listed = ', '.join(f'{t.type_id} ({t.name})'
                           for t in parse_types(creatable)) or 'none'
        raise exception.DeviceActionError(
            action=action, device=address,
            reason=f'the driver did not create a vGPU of type {type_id}; '
                   f'the VF can take: {listed}')
    return True


def clear_type(conf: cfg.ConfigOpts, bus: pci.PciBus, address: str) -> bool:
    """Destroy the vGPU of the VF at ``address`` (type ``0``); False when
    it had none."""
    action = 'clear the vGPU type'
    directory = _vf_dir(bus, address, action)
    if current_type(bus, address) is None:
        return False
    pci_lifecycle.write(conf, os.path.join(directory, CURRENT), NONE,
                        action, address)
    pci_lifecycle.wait_for(lambda: _answered(bus, address))
    if current_type(bus, address) is not None:
        raise exception.DeviceActionError(
            action=action, device=address,
            reason=f'it still has vGPU type {current_type(bus, address)} '
                   '(is a guest still using it?)')
    return True
