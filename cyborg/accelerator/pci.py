"""The host's PCI functions as drivers see them, read from sysfs.

On a live host (root ``/``) the functions are enumerated through udev
(pyudev); under any other root — a fake tree in tests, the host's sysfs
mounted into a container — the ``sys/bus/pci/devices`` directory is listed.
Either way each function's attributes are parsed by the same code, from
the same files the kernel writes.

A function whose sysfs entry cannot be understood (an id that is not hex,
a missing ``vendor`` file, a ``physfn`` link to nowhere) is left out with
a warning naming it: one odd device must not hide all the others.

Inside :func:`discovery_pass` the functions are read once: every driver of
an agent's discovery pass gets the same parsed list instead of reading
sysfs again.
"""
import contextlib
import dataclasses
import fnmatch
import logging
import os
import re
import threading
from collections.abc import Callable
from collections.abc import Iterator
from typing import TypeVar

from cyborg.common.device_report import pci_address

LOG = logging.getLogger(__name__)
_T = TypeVar('_T')

# A PCI function address as the kernel names it: domain (4 hex digits,
# more on VMD domains), bus, device, function.
ADDRESS_RE = re.compile(
    r'^(?P<domain>[0-9a-f]{4,8}):(?P<bus>[0-9a-f]{2}):'
    r'(?P<device>[0-1][0-9a-f])\.(?P<function>[0-7])$')
# Class code prefix of "Processing accelerators" (base class 0x12,
# subclass 00): FPGA cards and NPUs.
PROCESSING_ACCELERATOR = '0x1200'
_HEX_RE = re.compile(r'^(?:0x)?([0-9a-f]+)$')
_VIRTFN_RE = re.compile(r'^virtfn(\d+)$')

# Problems already logged as warnings; later passes log them at debug
# level, so that a periodic discovery does not repeat them every minute.
_warned: set[tuple[str, str]] = set()
_warned_lock = threading.Lock()

# The functions read during the current thread's discovery pass, by
# (root, udev); None outside a pass.
_pass = threading.local()


@contextlib.contextmanager
def discovery_pass() -> Iterator[None]:
    """Read each sysfs tree's PCI functions at most once in the block.

    Inside it, :meth:`PciBus.functions` and :meth:`PciBus.get` answer from
    the list the first ``functions`` call of the same tree parsed, so the
    drivers of one discovery pass share one scan (parsing a host's
    functions costs far more than any driver's own work). The list is
    dropped at the end of the block: the next pass sees devices that came
    and went. A nested block shares the outer one's scan.
    """
    if getattr(_pass, 'functions', None) is not None:
        yield
        return
    _pass.functions = {}
    try:
        yield
    finally:
        _pass.functions = None


def _warn_once(where: str, message: str, *args: object) -> None:
    text = message % args
    with _warned_lock:
        first = (where, text) not in _warned
        _warned.add((where, text))
    LOG.log(logging.WARNING if first else logging.DEBUG, '%s', text)


class _Malformed(Exception):
    """A function's sysfs entry cannot be parsed; the text says why."""


def parse_hex_id(value: str, digits: int) -> str:
    """``value`` (``0x10DE``, ``10de``) as ``0x`` + ``digits`` lower-case
    hex digits; ValueError when it is not hex or too long."""
    match = _HEX_RE.match(value.strip().lower())
    if not match or len(match.group(1).lstrip('0')) > digits:
        raise ValueError(f'{value.strip()!r} is not a {digits}-digit hex id')
    return f'0x{int(match.group(1), 16):0{digits}x}'


@dataclasses.dataclass(frozen=True)
class MdevType:
    """A mediated-device type a PCI function offers
    (``mdev_supported_types/<type_id>``)."""

    #: The directory name, e.g. ``nvidia-223``.
    type_id: str
    #: The contents of ``name`` (e.g. ``GRID T4-1B``), if there is one.
    name: str | None
    available_instances: int
    #: e.g. ``vfio-pci``.
    device_api: str | None
    #: UUIDs of the mdevs of this type that exist now, sorted.
    devices: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class PciFunction:
    """One PCI function; hex fields are lower case, ids ``0x``-prefixed."""

    #: ``0000:3b:00.0``
    address: str
    domain: str
    bus: str
    device: str
    function: str
    #: ``0x10de``
    vendor_id: str
    device_id: str
    #: ``0x030200``: base class, subclass, programming interface.
    class_code: str
    subsystem_vendor_id: str | None
    subsystem_device_id: str | None
    #: The bound kernel driver, e.g. ``vfio-pci``.
    driver: str | None
    numa_node: int | None
    iommu_group: str | None
    #: The physical function's address when this is an SR-IOV VF.
    physfn: str | None
    #: Addresses of this PF's VFs, in VF index order.
    virtfns: tuple[str, ...]
    sriov_totalvfs: int | None
    sriov_numvfs: int | None
    mdev_types: tuple[MdevType, ...]
    #: The absolute, resolved path of the device's sysfs directory.
    sysfs_path: str

    @property
    def is_vf(self) -> bool:
        return self.physfn is not None

    @property
    def vfs_enabled(self) -> bool:
        """Whether SR-IOV VFs are enabled on this PF, counting those whose
        sysfs entries cannot be read. Its host driver then serves them: it
        is no longer a whole device to pass through."""
        return bool(self.virtfns or self.sriov_numvfs)

    def attach_info(self) -> dict[str, str]:
        """The function as PCI attach-handle (and control path) info:
        ``{"domain": "0000", "bus": "3b", "device": "00", "function": "0"}``.
        """
        return pci_address(self.domain, self.bus, self.device, self.function)

    def deployable_name(self, hostname: str) -> str:
        """The name of a deployable made of this function on ``hostname``:
        ``<hostname>_<address>``, unique across hosts."""
        return f'{hostname}_{self.address}'

    def matches_class(self, prefix: str) -> bool:
        """Whether the class code starts with ``prefix`` (``0x0302``,
        ``0302``, ``0x03``: base class, then subclass, then interface)."""
        wanted = prefix.strip().lower()
        if not wanted.startswith('0x'):
            wanted = '0x' + wanted
        return self.class_code.startswith(wanted)

    def matches_address(self, pattern: str) -> bool:
        """Whether the address matches the shell-style ``pattern``
        (``0000:3b:*.*``)."""
        return fnmatch.fnmatchcase(self.address, pattern.lower())


class PciBus:
    """The PCI functions and device classes of sysfs under ``sysfs_root``.

    ``udev`` chooses how functions are enumerated: through pyudev or by
    listing ``sys/bus/pci/devices``; by default pyudev when the root is
    ``/``. Nothing is cached outside :func:`discovery_pass`: each call
    reads sysfs again.
    """

    def __init__(self, sysfs_root: str = '/', udev: bool | None = None
                 ) -> None:
        self.root = os.path.realpath(sysfs_root)
        self.udev = self.root == '/' if udev is None else udev

    def path(self, kernel_path: str) -> str:
        """Where the kernel's ``kernel_path`` (``/sys/class/fpga``) is in
        this tree. A path already inside the tree is returned unchanged.
        """
        if self._inside(kernel_path):
            return kernel_path
        return os.path.join(self.root, kernel_path.lstrip('/'))

    def _inside(self, path: str) -> bool:
        return (os.path.isabs(path) and self.root != '/'
                and (path + '/').startswith(self.root + '/'))

    def read(self, path: str) -> str | None:
        """The stripped text of the file at ``path`` (see :meth:`path`),
        or None when it cannot be read."""
        try:
            with open(self.path(path), encoding='utf-8') as f:
                return f.read().strip()
        except (OSError, UnicodeDecodeError):
            return None

    def class_dirs(self, name: str) -> list[str]:
        """The entries of ``/sys/class/<name>`` (``fpga_region``,
        ``mdev_bus``, ...), as paths in this tree, sorted."""
        directory = self.path(f'/sys/class/{name}')
        try:
            entries = os.listdir(directory)
        except OSError:
            return []
        return [os.path.join(directory, e) for e in sorted(entries)]

    def address_of(self, path: str) -> str | None:
        """The PCI function that ``path`` (a class entry, say) belongs to:
        the last PCI address in its resolved path, or None."""
        resolved = os.path.realpath(self.path(path))
        for part in reversed(resolved.split('/')):
            if ADDRESS_RE.match(part):
                return part
        return None

    def functions(self) -> list[PciFunction]:
        """Every PCI function that can be parsed, sorted by address."""
        scanned = getattr(_pass, 'functions', None)
        key = (self.root, self.udev)
        if scanned is not None and key in scanned:
            return list(scanned[key])
        found = []
        for address, path in self._device_dirs():
            try:
                found.append(_parse(address, path))
            except _Malformed as exc:
                _warn_once(path, 'Skipping PCI function %s (%s): %s',
                           address, path, exc)
        found.sort(key=lambda f: f.address)
        if scanned is not None:
            scanned[key] = tuple(found)
        return found

    def get(self, address: str) -> PciFunction | None:
        """The function at ``address``, or None if there is none or it
        cannot be parsed."""
        address = address.lower()
        scanned = getattr(_pass, 'functions', None)
        if scanned is not None and (self.root, self.udev) in scanned:
            return next((f for f in scanned[(self.root, self.udev)]
                         if f.address == address), None)
        path = self.path(f'/sys/bus/pci/devices/{address}')
        if not ADDRESS_RE.match(address) or not os.path.lexists(path):
            return None
        try:
            return _parse(address, os.path.realpath(path))
        except _Malformed as exc:
            _warn_once(path, 'Skipping PCI function %s (%s): %s', address,
                       path, exc)
            return None

    def _device_dirs(self) -> list[tuple[str, str]]:
        """(address, resolved sysfs directory) of every function."""
        if self.udev:
            try:
                return _udev_device_dirs()
            except Exception as exc:
                # pyudev missing or udev unusable (some containers):
                # sysfs holds the same list.
                _warn_once('udev', 'Cannot enumerate PCI devices through '
                           'udev (%s); listing sysfs instead.', exc)
        directory = os.path.realpath(self.path('/sys/bus/pci/devices'))
        try:
            names = sorted(os.listdir(directory))
        except OSError:
            return []
        return [(name, _follow(os.path.join(directory, name)))
                for name in names]


def _udev_device_dirs() -> list[tuple[str, str]]:
    import pyudev

    return [(device.sys_name, device.sys_path) for device in
            pyudev.Context().list_devices(subsystem='pci')]


def _text(path: str, name: str) -> str | None:
    try:
        with open(os.path.join(path, name), encoding='utf-8') as f:
            return f.read().strip()
    except (OSError, UnicodeDecodeError):
        return None


def _required_id(path: str, name: str, digits: int) -> str:
    value = _text(path, name)
    if value is None:
        raise _Malformed(f'cannot read {name}')
    try:
        return parse_hex_id(value, digits)
    except ValueError as exc:
        raise _Malformed(f'{name}: {exc}') from None


def _optional_id(path: str, name: str, digits: int) -> str | None:
    value = _text(path, name)
    if value is None:
        return None
    try:
        return parse_hex_id(value, digits)
    except ValueError as exc:
        _warn_once(path, 'PCI function %s: ignoring %s: %s',
                   os.path.basename(path), name, exc)
        return None


def _optional_hex4(path: str, name: str) -> str | None:
    return _optional_id(path, name, 4)


def _optional_int(path: str, name: str) -> int | None:
    value = _text(path, name)
    if value is None:
        return None
    try:
        return int(value)
    except ValueError:
        _warn_once(path, 'PCI function %s: ignoring %s: %r is not an '
                   'integer', os.path.basename(path), name, value)
        return None


def _follow(path: str) -> str:
    """``path`` (in a resolved directory) with its symlink, if it is one,
    followed. The targets of sysfs links are real directories, so this is
    ``os.path.realpath`` at a fraction of the cost: realpath examines every
    component of the path, which made it a third of a scan's time."""
    try:
        target = os.readlink(path)
    except OSError:
        return path
    return os.path.normpath(os.path.join(os.path.dirname(path), target))


def _link_name(path: str, name: str) -> str | None:
    """The last component of symlink ``name``'s target, if it is one."""
    try:
        return os.path.basename(os.readlink(os.path.join(path, name)))
    except OSError:
        return None


def _linked_function(path: str, name: str) -> str:
    """The address of the existing function that link ``name`` points to.
    """
    target = _follow(os.path.join(path, name))
    address = os.path.basename(target)
    if not os.path.isdir(target) or not ADDRESS_RE.match(address):
        raise _Malformed(f'{name} link points to nowhere '
                         f'({_link_name(path, name)})')
    return address


def _virtfns(path: str, entries: set[str]) -> tuple[str, ...]:
    indexed = []
    for entry in entries:
        match = _VIRTFN_RE.match(entry)
        if not match:
            continue
        try:
            indexed.append((int(match.group(1)),
                            _linked_function(path, entry)))
        except _Malformed as exc:
            # The VF itself is missing; the PF and its other VFs are not.
            _warn_once(path, 'PCI function %s: ignoring VF: %s',
                       os.path.basename(path), exc)
    return tuple(address for _, address in sorted(indexed))


def _mdev_types(path: str) -> tuple[MdevType, ...]:
    types_dir = os.path.join(path, 'mdev_supported_types')
    try:
        type_ids = sorted(os.listdir(types_dir))
    except OSError:
        return ()
    types = []
    for type_id in type_ids:
        type_path = os.path.join(types_dir, type_id)
        available = _optional_int(type_path, 'available_instances')
        if available is None:
            _warn_once(type_path, 'PCI function %s: ignoring mdev type %s: '
                       'no valid available_instances',
                       os.path.basename(path), type_id)
            continue
        try:
            devices = tuple(sorted(os.listdir(
                os.path.join(type_path, 'devices'))))
        except OSError:
            devices = ()
        types.append(MdevType(
            type_id=type_id, name=_text(type_path, 'name') or None,
            available_instances=available,
            device_api=_text(type_path, 'device_api') or None,
            devices=devices))
    return tuple(types)


def _parse(address: str, path: str) -> PciFunction:
    """The function at ``address`` whose sysfs directory is ``path``
    (resolved)."""
    address = address.lower()
    match = ADDRESS_RE.match(address)
    if not match:
        raise _Malformed('not a PCI function address')
    try:
        # Optional attributes are read only when listed: a scan opens a
        # dozen files per function, and failed opens cost as much.
        entries = set(os.listdir(path))
    except OSError:
        raise _Malformed('no such directory') from None

    def optional(read: Callable[[str, str], _T], name: str) -> _T | None:
        return read(path, name) if name in entries else None

    numa_node = optional(_optional_int, 'numa_node')
    return PciFunction(
        address=address,
        vendor_id=_required_id(path, 'vendor', 4),
        device_id=_required_id(path, 'device', 4),
        class_code=_required_id(path, 'class', 6),
        subsystem_vendor_id=optional(_optional_hex4, 'subsystem_vendor'),
        subsystem_device_id=optional(_optional_hex4, 'subsystem_device'),
        driver=optional(_link_name, 'driver'),
        numa_node=None if numa_node is None or numa_node < 0 else numa_node,
        iommu_group=optional(_link_name, 'iommu_group'),
        physfn=optional(_linked_function, 'physfn'),
        virtfns=_virtfns(path, entries),
        sriov_totalvfs=optional(_optional_int, 'sriov_totalvfs'),
        sriov_numvfs=optional(_optional_int, 'sriov_numvfs'),
        mdev_types=(_mdev_types(path) if 'mdev_supported_types' in entries
                    else ()),
        sysfs_path=path,
        **match.groupdict())
