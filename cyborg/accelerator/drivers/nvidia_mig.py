"""MIG (Multi-Instance GPU) partitioning of NVIDIA GPUs through NVML.

A GPU that supports MIG (A30, A100, H100, H200 and later; NVIDIA's MIG
User Guide, "Supported GPUs") offers two layout keys: ``mig_mode``
(``enabled`` or ``disabled``) and ``mig_partition``, the GPU instance
profiles the GPU is split into, e.g. ``["3g.40gb", "3g.40gb"]``. Only GPU
instances are made: a MIG-backed vGPU takes a whole GPU instance and its
guest makes its own compute instances.

Profiles are named as NVIDIA names them, ``<slices>g.<GB>gb`` with
``+me`` for the profiles with media extensions, from what NVML says of
the GPU (``nvmlDeviceGetGpuInstanceProfileInfo``): the profile's share of
the GPU's memory, rounded up to eighths, times the GPU's memory in whole
GiB, rounded half up (go-nvlib, ``pkg/nvlib/device/mig_profile.go``,
``getMigMemorySizeGB``). An H100 80GB so offers 1g.10gb, 1g.10gb+me,
1g.20gb, 2g.20gb, 3g.40gb, 4g.40gb and 7g.80gb, an H200 141GB 1g.18gb,
1g.35gb, 2g.35gb, 3g.71gb, 4g.71gb and 7g.141gb.

NVML's rules that shape what is done here (nvml.h, "Multi Instance GPU
Management", https://docs.nvidia.com/deploy/nvml-api/):

* the profiles can be read only while MIG mode is enabled
  (``NVML_ERROR_NOT_SUPPORTED`` otherwise), so a disabled GPU offers
  ``mig_mode`` alone until it is enabled;
* ``nvmlDeviceSetMigMode`` "may unbind or reset the device to activate
  the requested mode"; its activation status is ``NVML_ERROR_IN_USE``
  when the GPU is not idle and ``NVML_ERROR_RESET_REQUIRED`` where a
  reset is not exposed (pass-through). Hopper and later switch without a
  reset (``NVML_FI_DEV_IS_RESETLESS_MIG_SUPPORTED``); on the A100 and
  A30 the switch resets the GPU, which cyborg never does itself: it
  refuses and says how an operator does it;
* a GPU instance occupies memory slices (its placement); one cannot be
  created over another's (``nvmlDeviceGetGpuInstancePossiblePlacements``).
"""
import collections
import ctypes
import dataclasses
import logging
import math
import re
from collections.abc import Iterable
from typing import Any

from cyborg.accelerator.drivers import nvml
from cyborg.common import exception

LOG = logging.getLogger(__name__)

#: The layout keys of MIG.
LAYOUT_KEYS = ('mig_mode', 'mig_partition')
MODES = ('enabled', 'disabled')
ACTION = 'set the MIG layout'
# The GPU instance profile indexes (NVML_GPU_INSTANCE_PROFILE_*) whose
# profiles have media extensions, which NVIDIA names "+me" (go-nvlib,
# mig_profile.go, AttributeMediaExtensions).
_MEDIA_EXTENSIONS = ('NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV1',
                     'NVML_GPU_INSTANCE_PROFILE_2_SLICE_REV1')
# Profiles of other variants (Blackwell's GFX, NO_ME, ALL_ME) take the
# attribute from NVML's own name of the profile, e.g. "MIG 1g.24gb+gfx".
_VARIANTS = ('_GFX', '_NO_ME', '_ALL_ME')
# NVIDIA's MIG-backed vGPU types: "<board>-<slices>-<GB>C", "ME" added
# for a type with media extensions ("NVIDIA H100-3-40C", "A100-1-5CME");
# time-sliced ones are "<board>-<GB><series>", e.g. "NVIDIA H100-10C"
# (NVIDIA vGPU user guide, "Virtual GPU Types for Supported GPUs",
# https://docs.nvidia.com/vgpu/latest/grid-vgpu-user-guide/).
_MIG_VGPU_RE = re.compile(r'^(?:(?:GRID|NVIDIA)\s+)?\S+?-(\d+)-(\d+)C(ME)?$',
                          re.IGNORECASE)
_GIB = 1 << 30
_MIB = 1 << 20


@dataclasses.dataclass(frozen=True)
class Profile:
    """A GPU instance profile as NVML gives it."""

    name: str
    id: int
    #: How many GPU instances of the profile the GPU can hold.
    count: int
    #: Where one may be placed: (first memory slice, memory slices).
    placements: tuple[tuple[int, int], ...] = ()


@dataclasses.dataclass(frozen=True)
class Instance:
    """A GPU instance that exists on the GPU."""

    profile: str
    id: int
    start: int
    size: int
    handle: Any = dataclasses.field(default=None, compare=False)


def profile_name(slices: int, memory_mb: int, total_bytes: int,
                 suffix: str = '') -> str:
    """NVIDIA's name of a profile of ``slices`` compute slices and
    ``memory_mb`` MiB on a GPU of ``total_bytes``: its memory share rounded
    up to eighths times the GPU's whole GiB, rounded half up (go-nvlib's
    getMigMemorySizeGB, whose Go math.Round rounds half away from zero:
    4/8 of an H200's 141 GiB is 71, not Python's round() 70)."""
    share = math.ceil(memory_mb * _MIB / total_bytes * 8) / 8
    total_gb = -(-total_bytes // _GIB)
    return f'{slices}g.{math.floor(share * total_gb + 0.5)}gb{suffix}'


def vgpu_profile(type_name: str) -> str | None:
    """The MIG profile a MIG-backed vGPU type needs, e.g. ``3g.40gb`` for
    "NVIDIA H100-3-40C"; None for a time-sliced type ("NVIDIA H100-10C")."""
    match = _MIG_VGPU_RE.match(type_name.strip())
    if match is None:
        return None
    slices, gb, media = match.groups()
    return f'{int(slices)}g.{int(gb)}gb' + ('+me' if media else '')


def _suffix(lib: Any, index_name: str, info: Any) -> str | None:
    if index_name in _MEDIA_EXTENSIONS:
        return '+me'
    if not index_name.endswith(_VARIANTS):
        return ''
    # A variant cyborg has no rule for: NVML's own name says it.
    name = bytes(getattr(info, 'name', b'')).decode(errors='replace')
    match = re.search(r'gb([+-][a-z.]+)$', name.strip())
    return match.group(1) if match else None


def read_profiles(lib: Any, handle: Any) -> list[Profile]:
    """The GPU instance profiles of a GPU whose MIG mode is enabled,
    without their placements."""
    total = int(lib.nvmlDeviceGetMemoryInfo(handle).total)
    indexes = sorted((value, name) for name, value in vars(lib).items()
                     if name.startswith('NVML_GPU_INSTANCE_PROFILE_')
                     and name != 'NVML_GPU_INSTANCE_PROFILE_COUNT')
    found: dict[str, Profile] = {}
    for index, index_name in indexes:
        try:
            info = lib.nvmlDeviceGetGpuInstanceProfileInfo(handle, index)
        except lib.NVMLError as exc:
            # NOT_SUPPORTED: not on this GPU; INVALID_ARGUMENT: an index
            # newer than the host's driver.
            if exc.value not in (lib.NVML_ERROR_NOT_SUPPORTED,
                                 lib.NVML_ERROR_INVALID_ARGUMENT):
                raise
            continue
        suffix = _suffix(lib, index_name, info)
        if suffix is None or not info.instanceCount:
            continue
        name = profile_name(int(info.sliceCount), int(info.memorySizeMB),
                            total, suffix)
        if name in found:
            LOG.debug('GPU instance profiles %d and %d are both %s; the '
                      'first is offered.', found[name].id, info.id, name)
            continue
        found[name] = Profile(name, int(info.id), int(info.instanceCount))
    return list(found.values())


def _placements(lib: Any, handle: Any, profile: Profile) -> Profile:
    count = ctypes.c_uint(0)
    lib.nvmlDeviceGetGpuInstancePossiblePlacements(
        handle, profile.id, None, ctypes.byref(count))
    array = (lib.c_nvmlGpuInstancePlacement_t * max(1, count.value))()
    lib.nvmlDeviceGetGpuInstancePossiblePlacements(
        handle, profile.id, array, ctypes.byref(count))
    return dataclasses.replace(profile, placements=tuple(
        (int(array[i].start), int(array[i].size))
        for i in range(count.value)))


def read_instances(lib: Any, handle: Any, profiles: Iterable[Profile]
                   ) -> list[Instance]:
    """The GPU instances on a GPU whose MIG mode is enabled, by memory
    slice."""
    found = []
    for profile in profiles:
        count = ctypes.c_uint(profile.count)
        array = (lib.c_nvmlGpuInstance_t * max(1, profile.count))()
        lib.nvmlDeviceGetGpuInstances(handle, profile.id, array,
                                      ctypes.byref(count))
        for i in range(count.value):
            info = lib.nvmlGpuInstanceGetInfo(array[i])
            found.append(Instance(profile.name, int(info.id),
                                  int(info.placement.start),
                                  int(info.placement.size), array[i]))
    return sorted(found, key=lambda i: (i.start, i.id))


def _place(names: list[str], profiles: dict[str, Profile],
           taken: set[int]) -> list[tuple[str, tuple[int, int]]] | None:
    """Placements for ``names`` in the memory slices not ``taken``, the
    largest first; None when they do not fit (a search: at most 7
    instances of at most 7 placements each)."""
    if not names:
        return []
    name, rest = names[0], names[1:]
    for start, size in profiles[name].placements:
        slices = set(range(start, start + size))
        if slices & taken:
            continue
        placed = _place(rest, profiles, taken | slices)
        if placed is not None:
            return [(name, (start, size)), *placed]
    return None


def plan(existing: list[Instance], wanted: list[str],
         profiles: dict[str, Profile]
         ) -> tuple[list[Instance], list[tuple[str, tuple[int, int]]]]:
    """(instances to destroy, (profile, placement) to create) that turn
    ``existing`` into ``wanted``, keeping what can be kept; Invalid naming
    the set when it does not fit on the GPU."""
    counts = collections.Counter(wanted)
    for name, count in sorted(counts.items()):
        if name not in profiles:
            raise exception.Invalid(
                reason=f'mig_partition: {name!r} is not one of the GPU '
                       f'instance profiles of the GPU '
                       f'({", ".join(sorted(profiles))})')
        if count > profiles[name].count:
            raise exception.Invalid(
                reason=f'mig_partition: the GPU holds at most '
                       f'{profiles[name].count} GPU instance(s) of {name}, '
                       f'not {count}')
    order = sorted(wanted, key=lambda n: (-max(
        (s for _, s in profiles[n].placements), default=0), n))
    kept: list[Instance] = []
    left = collections.Counter(wanted)
    for instance in existing:
        if left[instance.profile]:
            left[instance.profile] -= 1
            kept.append(instance)
    new = []
    for name in order:
        if left[name]:
            left[name] -= 1
            new.append(name)
    taken = {s for i in kept for s in range(i.start, i.start + i.size)}
    placed = _place(new, profiles, taken)
    if placed is not None:
        return [i for i in existing if i not in kept], placed
    # Kept instances may sit where the new ones must go: place the whole
    # set afresh, keeping the instances that are where it puts them.
    placed = _place(order, profiles, set())
    if placed is None:
        raise exception.Invalid(
            reason=f'mig_partition {sorted(wanted)} does not fit on the '
                   'GPU: its GPU instances would overlap in memory '
                   'slices')
    same = {(i.profile, (i.start, i.size)): i for i in existing}
    kept = [same[p] for p in placed if p in same]
    return ([i for i in existing if i not in kept],
            [p for p in placed if p not in same])


class Mig:
    """MIG mode and GPU instances of NVIDIA GPUs, over the driver's NVML
    (nvml.Nvml: initialised once, its lock serialising every call)."""

    def __init__(self, reader: nvml.Nvml) -> None:
        self.nvml = reader

    def layout_options(self, address: str) -> dict[str, Any]:
        """``mig_mode`` and ``mig_partition``: while MIG is enabled
        ``{"profiles": {<name>: <most instances>}}``, else ``{"after":
        ["mig_mode"]}``; ``{}`` when NVML is unavailable, does not see the
        GPU, or the GPU has no MIG."""
        return self.nvml.call(address, self._options) or {}

    def _options(self, lib: Any, handle: Any) -> dict[str, Any]:
        mode = _mode(lib, handle)
        if mode is None:
            return {}
        options: dict[str, Any] = {'mig_mode': {m: 1 for m in MODES}}
        if mode[0] == lib.NVML_DEVICE_MIG_ENABLE:
            profiles = read_profiles(lib, handle)
            if profiles:
                options['mig_partition'] = {
                    'profiles': {p.name: p.count for p in profiles}}
        else:
            # NVML reads the profiles only once MIG is on: a layout that
            # turns it on may partition too, checked once it is on.
            options['mig_partition'] = {'after': ['mig_mode']}
        return options

    def instances(self, address: str) -> list[str]:
        """The profiles of the GPU's GPU instances, by memory slice; none
        while MIG is disabled, unsupported or NVML unavailable."""
        def read(lib: Any, handle: Any) -> list[str]:
            mode = _mode(lib, handle)
            if mode is None or mode[0] != lib.NVML_DEVICE_MIG_ENABLE:
                return []
            return [i.profile for i in read_instances(
                lib, handle, read_profiles(lib, handle))]
        return self.nvml.call(address, read) or []

    def processes(self, address: str) -> list[str]:
        """The compute processes running on the GPU, as what holds it."""
        def read(lib: Any, handle: Any) -> list[str]:
            try:
                found = lib.nvmlDeviceGetComputeRunningProcesses(handle)
            except lib.NVMLError as exc:
                if exc.value == lib.NVML_ERROR_NOT_SUPPORTED:
                    return []
                raise
            return [f'compute process {p.pid}' for p in found]
        return self.nvml.call(address, read) or []

    def apply(self, address: str, layout: dict[str, Any],
              busy: list[str]) -> None:
        """Set the GPU's ``mig_mode`` and ``mig_partition`` as ``layout``
        says (a key left out keeps what the GPU has). ``busy`` names what
        uses the GPU (vGPUs, compute processes): while it is non-empty no
        change is made. Idempotent: what exists is kept. Invalid for
        values the GPU does not offer, DeviceActionError when the GPU
        cannot be changed now, both before anything is changed."""
        mode = layout.get('mig_mode')
        wanted = layout.get('mig_partition')
        if mode is not None and mode not in MODES:
            raise exception.Invalid(
                reason=f'mig_mode {mode!r} is not one of '
                       f'{", ".join(MODES)}')
        if mode == 'disabled' and wanted:
            raise exception.Invalid(
                reason='mig_partition needs mig_mode enabled, not disabled')

        def run(lib: Any, handle: Any) -> bool:
            _Change(lib, handle, address, busy).apply(mode, wanted)
            return True

        if not self.nvml.call(address, run):
            raise exception.DeviceActionError(
                action=ACTION, device=address,
                reason='NVML does not see the GPU (no NVIDIA driver with '
                       'NVML on the host, nvidia-ml-py missing from the '
                       "agent's environment, or the GPU is bound to "
                       'vfio-pci)')


def _mode(lib: Any, handle: Any) -> tuple[int, int] | None:
    """(current, pending) MIG mode; None for a GPU without MIG."""
    try:
        current, pending = lib.nvmlDeviceGetMigMode(handle)
    except lib.NVMLError as exc:
        if exc.value == lib.NVML_ERROR_NOT_SUPPORTED:
            return None
        raise
    return int(current), int(pending)


class _Change:
    """One application of a MIG layout to one GPU, with NVML's lock held."""

    def __init__(self, lib: Any, handle: Any, address: str,
                 busy: list[str]) -> None:
        self.lib = lib
        self.handle = handle
        self.address = address
        self.busy = busy

    def fail(self, reason: str) -> exception.DeviceActionError:
        return exception.DeviceActionError(action=ACTION,
                                           device=self.address,
                                           reason=reason)

    def apply(self, mode: str | None, wanted: list[str] | None) -> None:
        lib = self.lib
        state = _mode(lib, self.handle)
        if state is None:
            raise exception.Invalid(
                reason=f'GPU {self.address} does not support MIG')
        enabled = state[0] == lib.NVML_DEVICE_MIG_ENABLE
        if mode == 'disabled' and enabled:
            # Its GPU instances go first: NVML refuses to switch a GPU
            # holding them.
            self.partition([])
            self.set_mode(lib.NVML_DEVICE_MIG_DISABLE, state)
            return
        if mode == 'enabled' and not enabled:
            self.set_mode(lib.NVML_DEVICE_MIG_ENABLE, state)
            enabled = True
        if wanted is None:
            return
        if not enabled:
            raise exception.Invalid(
                reason=f'mig_partition needs MIG mode enabled, and GPU '
                       f'{self.address} has it disabled: set mig_mode '
                       'enabled too')
        self.partition(wanted)

    def check_idle(self, what: str) -> None:
        if self.busy:
            raise self.fail(f'{what} while the GPU is in use ('
                            f'{", ".join(self.busy)}); try again once '
                            'they are gone')

    def set_mode(self, mode: int, state: tuple[int, int]) -> None:
        """Switch from the current mode to ``mode``, refusing where that
        needs a reset: one already pending (the GPU waits for it), or a
        GPU that cannot switch without one."""
        lib = self.lib
        name = 'enabled' if mode == lib.NVML_DEVICE_MIG_ENABLE else \
            'disabled'
        self.check_idle(f'MIG mode cannot become {name}')
        if state[1] == mode or not self.resetless():
            raise self.fail(self.reset_reason(name))
        status = lib.nvmlDeviceSetMigMode(self.handle, mode)
        if status == lib.NVML_ERROR_RESET_REQUIRED:
            raise self.fail(self.reset_reason(name))
        if status == lib.NVML_ERROR_IN_USE:
            raise self.fail(f'MIG mode cannot become {name}: NVML says the '
                            'GPU is in use (NVML_ERROR_IN_USE); idle it and '
                            'apply the layout again')
        if status != lib.NVML_SUCCESS:
            raise self.fail(f'NVML did not switch MIG mode to {name}: '
                            f'{lib.NVMLError(status)}')
        LOG.info('MIG mode of GPU %s is now %s.', self.address, name)

    def reset_reason(self, name: str) -> str:
        return (f'MIG mode can become {name} only with a GPU reset (an A100 '
                'or A30, or a GPU whose reset the platform does not '
                'expose), and cyborg never resets a GPU itself: run '
                f'"nvidia-smi -i {self.address} -mig '
                f'{int(name == "enabled")}" while it is idle (then reset '
                'it or reboot), and apply the layout again')

    def resetless(self) -> bool:
        """Whether the GPU switches MIG mode without a reset (Hopper and
        later); False where NVML cannot say (older drivers)."""
        lib = self.lib
        try:
            value = lib.nvmlDeviceGetFieldValues(
                self.handle, [lib.NVML_FI_DEV_IS_RESETLESS_MIG_SUPPORTED])[0]
        except lib.NVMLError as exc:
            LOG.debug('GPU %s: resetless MIG unknown: %s', self.address, exc)
            return False
        return (value.nvmlReturn == lib.NVML_SUCCESS
                and int(value.value.uiVal) == 1)

    def partition(self, wanted: list[str]) -> None:
        lib = self.lib
        profiles = read_profiles(lib, self.handle)
        existing = read_instances(lib, self.handle, profiles)
        by_name = {p.name: _placements(lib, self.handle, p)
                   for p in profiles}
        destroy, create = plan(existing, wanted, by_name)
        if not destroy and not create:
            return
        self.check_idle(f'the MIG partition cannot change from '
                        f'{[i.profile for i in existing]} to {wanted}')
        for instance in destroy:
            try:
                lib.nvmlGpuInstanceDestroy(instance.handle)
            except lib.NVMLError as exc:
                raise self.fail(
                    f'NVML did not destroy GPU instance {instance.id} '
                    f'({instance.profile}): {exc} (one in use holds compute '
                    'instances or a vGPU)') from exc
            LOG.info('Destroyed GPU instance %d (%s) of GPU %s.',
                     instance.id, instance.profile, self.address)
        for name, (start, size) in create:
            placement = lib.c_nvmlGpuInstancePlacement_t(start, size)
            try:
                lib.nvmlDeviceCreateGpuInstanceWithPlacement(
                    self.handle, by_name[name].id, ctypes.byref(placement))
            except lib.NVMLError as exc:
                raise self.fail(f'NVML did not create a GPU instance of '
                                f'{name} at memory slice {start}: '
                                f'{exc}') from exc
            LOG.info('Created a GPU instance of %s at memory slice %d of '
                     'GPU %s.', name, start, self.address)
