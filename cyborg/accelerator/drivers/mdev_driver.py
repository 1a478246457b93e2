"""The base of the PCI drivers whose devices may be handed out as mediated
devices (mdevs), and the mdevs themselves.

A device offers mdevs when its function, or failing that its SR-IOV
virtual functions (GPUs with SR-IOV offer their vGPU types on their VFs,
one vGPU per VF), has ``mdev_supported_types``. An mdev layout
(``mdev_type``, ``mdev_count``) restricts such a device to ``mdev_count``
MDEV attach handles of ``mdev_type``, each naming the function its mdev is
created on; ``mdev_count`` 0 gives the device back whole. The mdevs
themselves are created when an instance is bound to a handle (the
handle's uuid becomes the mdev's) and removed when it is released: by the
agent, or, with the driver group's ``mdev_creator = nova``, by
nova-compute (Nova 2026.2 and later), which makes a persistent mdev from
the bound request's attach handle. The handles of such a driver say so in
their attach info (``"mdev_creator": "nova"``), which is how the conductor
knows their binds are instant and the agent that their mdevs are not its
own. Either way an mdev of the type that exists on the device counts as
one of its handles (the one it was created for), never as a foreign one.

Creating and removing mdevs writes to sysfs
(``mdev_supported_types/<type>/create``, the mdev's ``remove``), which
only root may do: an agent running as root writes the files itself, any
other agent through ``tee`` run by ``[agent] root_helper``.
"""
import errno
import os
import re
from collections.abc import Callable
from typing import Any
from typing import ClassVar

from oslo_config import cfg
from oslo_utils import uuidutils

from cyborg.accelerator import pci
from cyborg.accelerator.drivers import pci_lifecycle
from cyborg.accelerator.drivers.pci_driver import PciDriver
from cyborg.common import device_report
from cyborg.common import exception
from cyborg.common.device_report import DriverAttachHandle
from cyborg.common.device_report import DriverDevice
from cyborg.common.device_report import check_layout
from cyborg.conf import mdev as mdev_conf

#: An mdev type is a directory name: no '/', no '..', no ':'.
TYPE_ID_RE = re.compile(r'^[A-Za-z0-9][A-Za-z0-9_.+-]{0,99}$')
#: The layout keys of mdevs.
LAYOUT_KEYS = ('mdev_type', 'mdev_count')
_NOT_ALNUM_RE = re.compile(r'[^A-Z0-9]+')
# In a type's "description" (NVIDIA): "num_heads=4, ..., max_instance=16".
_MAX_INSTANCE_RE = re.compile(r'\bmax_instance=(\d+)')

#: A function and the mdev type it offers.
Parent = tuple[pci.PciFunction, pci.MdevType]


def offered(function: pci.PciFunction, type_id: str) -> pci.MdevType | None:
    """The mdev type ``type_id`` as ``function`` offers it, if it does."""
    return next((t for t in function.mdev_types if t.type_id == type_id),
                None)


def mdev_trait(type_id: str) -> str:
    """``CUSTOM_MDEV_<TYPE>``, e.g. ``CUSTOM_MDEV_I915_GVTG_V5_4``."""
    part = _NOT_ALNUM_RE.sub('_', type_id.upper()).strip('_')
    return f'CUSTOM_MDEV_{part}'[:255]


def type_ids(functions: list[pci.PciFunction]) -> list[str]:
    """Every mdev type ``functions`` offer, sorted."""
    return sorted({t.type_id for f in functions for t in f.mdev_types})


def parents(function: pci.PciFunction, vfs: list[pci.PciFunction],
            type_id: str) -> list[Parent]:
    """Where mdevs of ``type_id`` of the device are created: its function
    when it offers the type, else those of its ``vfs`` that do."""
    found = [(f, t) for f in [function] if (t := offered(f, type_id))]
    return found or [(f, t) for f in vfs if (t := offered(f, type_id))]


class MdevDriver(PciDriver):
    """A PciDriver whose devices an mdev layout may restrict to mdevs of
    one type; a subclass reports a device in that form through
    ``mdev_handles`` when ``mdev_layout`` says so."""

    #: What one mdev of the devices is called in messages.
    mdev_noun: ClassVar[str] = 'mdev'
    #: What a function mdevs may be created on is called in messages.
    parent_noun: ClassVar[str] = 'function of this driver'

    def __init__(self, conf: cfg.ConfigOpts) -> None:
        super().__init__(conf)
        # The mdev layouts applied since the agent started, by device
        # address: (type, count), a count of 0 for the device given back
        # whole. The agent re-applies the stored layouts after a restart,
        # so they need not outlive the process.
        self.mdev_layouts: dict[str, tuple[str, int]] = {}

    @property
    def nova_creates(self) -> bool:
        """Whether nova-compute creates the mdevs, which cyborg then
        never removes (``[<conf_group>] mdev_creator = nova``)."""
        return (self.conf_group is not None
                and self.conf[self.conf_group].mdev_creator
                == mdev_conf.NOVA)

    def default_mdev_type(self, address: str) -> str | None:
        """The mdev type the configuration gives the device at
        ``address`` before any layout; none by default."""
        return None

    def mdev_parent(self, function: pci.PciFunction) -> bool:
        """Whether mdevs of this driver may be created on ``function``."""
        return self.of_family(function)

    # Discovery

    def mdev_layout(self, address: str) -> tuple[str, int] | None:
        """The mdev layout applied to the device at ``address`` (type,
        count); None when none is, or when it gave the device back
        whole."""
        layout = self.mdev_layouts.get(address)
        return layout if layout and layout[1] else None

    def mdev_handles(self, found: list[Parent], type_id: str,
                     count: int | None = None) -> list[DriverAttachHandle]:
        """The MDEV attach handles of ``type_id`` of a device, created on
        the ``found`` parents (see ``parents``), at most ``count`` of them
        when a layout says so."""
        hosts = self.mdev_hosts(found)
        if count is not None:
            # The layout restricts what is offered; the mdevs themselves
            # are still created when an instance is bound to a handle.
            hosts = hosts[:count]
        # Nova's own handles, so that switching changes every handle: one
        # in use stays with whoever created its mdev until released.
        owner = ({device_report.MDEV_CREATOR: device_report.NOVA_CREATES}
                 if self.nova_creates else {})
        handles = []
        for n, parent in enumerate(hosts):
            info = parent.attach_info()
            info.update(asked_type=type_id, vgpu_mark=f'{type_id}_{n}',
                        **owner)
            handles.append(DriverAttachHandle(attach_type='MDEV',
                                              attach_info=info))
        return handles

    def mdev_hosts(self, found: list[Parent]) -> list[pci.PciFunction]:
        """One parent per mdev the device can host: each existing mdev of
        the type, then free instances up to the type's ``max_instance``
        (VFs each say one is free, even when a GPU has memory for fewer
        vGPUs than it has VFs), in parent order."""
        used: list[pci.PciFunction] = []
        free: list[pci.PciFunction] = []
        for parent, mdev_type in found:
            used += [parent] * len(mdev_type.devices)
            free += [parent] * max(0, mdev_type.available_instances)
        limit = self._max_instance(*found[0])
        if limit is not None:
            free = free[:max(0, limit - len(used))]
        order = {p.address: i for i, (p, _) in enumerate(found)}
        return sorted(used + free, key=lambda p: order[p.address])

    def _max_instance(self, parent: pci.PciFunction,
                      mdev_type: pci.MdevType) -> int | None:
        description = self.bus.read(os.path.join(
            parent.sysfs_path, 'mdev_supported_types', mdev_type.type_id,
            'description')) or ''
        match = _MAX_INSTANCE_RE.search(description)
        return int(match.group(1)) if match else None

    # Layouts: a VF count (PciDriver), and which mdev type and how many
    # mdevs of it the device offers.

    def _vfs(self, function: pci.PciFunction) -> list[pci.PciFunction]:
        return [f for a in function.virtfns if (f := self.bus.get(a))]

    def mdev_capacity(self, function: pci.PciFunction) -> dict[str, int]:
        """How many mdevs of each type the device of ``function`` (or its
        VFs) can host."""
        vfs = self._vfs(function)
        return {type_id: len(self.mdev_hosts(parents(function, vfs,
                                                     type_id)))
                for type_id in type_ids([function, *vfs])}

    def layout_options(self, device: DriverDevice) -> dict[str, Any]:
        options = super().layout_options(device)
        function = self.bus.get(self.control_function(device,
                                                      'read layouts'))
        capacity = self.mdev_capacity(function) if function else {}
        if capacity:
            options['mdev_type'] = capacity
            options['mdev_count'] = {'min': 0,
                                     'max': max(capacity.values())}
        return options

    def apply_layout(self, device: DriverDevice,
                     layout: dict[str, Any]) -> None:
        """Apply ``vf_count`` first (VFs may be what hosts the mdevs),
        then restrict the device to ``mdev_count`` mdevs of
        ``mdev_type``, or give it back whole with ``mdev_count`` 0."""
        mdev = {k: layout[k] for k in LAYOUT_KEYS if k in layout}
        rest = {k: v for k, v in layout.items() if k not in mdev}
        check_layout(self.layout_options(device), layout)
        if rest:
            super().apply_layout(device, rest)
        if not mdev:
            return
        action = f'set the {self.mdev_noun} layout'
        address = self.control_function(device, action)
        function = self.bus.get(address)
        capacity = self.mdev_capacity(function) if function else {}
        current = self.mdev_layouts.get(address)
        type_id = mdev.get('mdev_type') or (
            current[0] if current else self.default_mdev_type(address))
        where = f'{self.noun} {address}'
        if type_id not in capacity:
            raise exception.Invalid(
                reason=f'mdev_type {type_id!r} is not one of '
                       f'{", ".join(sorted(capacity)) or "(none)"} that '
                       f'{where} offers')
        count = mdev.get('mdev_count', capacity[type_id])
        if count > capacity[type_id]:
            raise exception.Invalid(
                reason=f'mdev_count {count} is above the {capacity[type_id]}'
                       f' {self.mdev_noun}s of type {type_id} that {where} '
                       'can host')
        existing = self._existing(function, type_id if count else None)
        if existing:
            raise exception.DeviceActionError(
                action=action, device=address,
                reason=f'mdevs of type {", ".join(existing)} exist on it')
        self.mdev_layouts[address] = (type_id, count)
        if count:
            self.log.info('%s offers %d %ss of type %s.', where, count,
                          self.mdev_noun, type_id)
        else:
            self.log.info('%s is offered whole again.', where)

    def _existing(self, function: pci.PciFunction | None,
                  kept: str | None) -> list[str]:
        """The mdev types other than ``kept`` with mdevs on the device of
        ``function`` or its VFs (every type with mdevs when ``kept`` is
        None): a layout cannot take them away from under their user."""
        if function is None:
            return []
        return sorted({t.type_id for f in [function, *self._vfs(function)]
                       for t in f.mdev_types
                       if t.devices and t.type_id != kept})

    # Mediated devices

    def clean(self, handle: DriverAttachHandle) -> None:
        """An MDEV handle: remove its mdev (``mdev_uuid`` in the attach
        info, the handle's uuid) and create it again, which hands the next
        tenant an mdev whose memory the host driver cleared; one that
        does not exist holds nothing to clean. An mdev nova-compute
        creates is never touched: Nova removed it with its instance, and
        the next one it creates starts cleared. A PCI handle (a whole
        device): function-level reset."""
        if handle.attach_type != 'MDEV':
            super().clean(handle)
            return
        if device_report.nova_creates_mdev(handle.attach_type,
                                           handle.attach_info):
            self.log.debug('The mdev of %s is nova-compute\'s: nothing to '
                           'clean.', handle.attach_info)
            return
        mdev_uuid = handle.attach_info.get('mdev_uuid', '')
        parent, _, mdev_uuid = self._mdev_target(
            'clean mdev', handle.attach_info, mdev_uuid, need_type=True)
        mdev_dir = self.bus.path(f'/sys/bus/mdev/devices/{mdev_uuid}')
        if not os.path.isdir(mdev_dir):
            self.log.debug('mdev %s on %s does not exist: nothing to '
                           'clean.', mdev_uuid, parent)
            return
        self.remove_mdev(handle.attach_info, mdev_uuid)
        self._wait('clean mdev', parent, lambda: not os.path.isdir(mdev_dir),
                   f'mdev {mdev_uuid} is still there after remove')
        self.create_mdev(handle.attach_info, mdev_uuid)
        self._wait('clean mdev', parent, lambda: os.path.isdir(mdev_dir),
                   f'mdev {mdev_uuid} was not created again')

    @staticmethod
    def _wait(action: str, device: str, done: Callable[[], bool],
              reason: str) -> None:
        if not pci_lifecycle.wait_for(done):
            raise exception.DeviceActionError(action=action, device=device,
                                              reason=reason)

    def _mdev_target(self, action: str, attach_info: dict[str, str],
                     mdev_uuid: str, need_type: bool
                     ) -> tuple[str, str, str]:
        """(parent address, mdev type, uuid) of an MDEV attach handle;
        DeviceActionError for one whose mdev nova-compute creates and
        removes, which the agent never does."""
        def fail(reason: str) -> exception.DeviceActionError:
            return exception.DeviceActionError(
                action=action, device=str(attach_info), reason=reason)

        if device_report.nova_creates_mdev('MDEV', attach_info):
            raise fail('nova-compute creates the mdevs of this attach '
                       'handle; cyborg does not manage them')
        try:
            address = '{domain}:{bus}:{device}.{function}'.format(
                **attach_info).lower()
        except (KeyError, TypeError, ValueError):
            raise fail('the attach handle names no PCI function') from None
        type_id = attach_info.get('asked_type', '')
        if not pci.ADDRESS_RE.match(address):
            raise fail(f'{address!r} is not a PCI address')
        if (need_type or type_id) and not TYPE_ID_RE.match(type_id):
            raise fail(f'{type_id!r} is not an mdev type')
        if not uuidutils.is_uuid_like(mdev_uuid):
            raise fail(f'{mdev_uuid!r} is not a UUID')
        function = self.bus.get(address)
        if function is None or not self.mdev_parent(function):
            raise fail(f'there is no {self.parent_noun} at {address}')
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
            self.log.debug('mdev %s of type %s exists on %s.', mdev_uuid,
                           type_id, parent)
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
        self.log.info('Created mdev %s of type %s on %s.', mdev_uuid,
                      type_id, parent)

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
            self.log.info('Removed mdev %s from %s.', mdev_uuid, parent)
            return
        self.log.debug('mdev %s on %s is already gone.', mdev_uuid, parent)
