"""The objects of os-acc: accelerator requests as read, PCI addresses,
the instance, and the VAN that nova-compute keeps for each accelerator."""
import dataclasses
import enum
import re
import uuid as uuid_lib
from collections.abc import Mapping
from typing import Any
from typing import ClassVar
from typing import Protocol

from cyborg.os_acc import exception

BOUND = 'Bound'
_HEX_RE = re.compile(r'^(?:0x)?([0-9a-fA-F]+)$')
# The largest value of each PCI address part; domains beyond 16 bits
# exist on VMD controllers.
_PCI_FIELDS = (('domain', 0xffffffff), ('bus', 0xff), ('device', 0x1f),
               ('function', 0x7))


def is_uuid(value: object) -> bool:
    """Whether ``value`` is a string holding a UUID."""
    if not isinstance(value, str):
        return False
    try:
        uuid_lib.UUID(value)
    except ValueError:
        return False
    return True


class Instance(Protocol):
    """What os-acc needs of an instance: Nova's Instance object and
    :class:`InstanceInfo` both qualify."""

    @property
    def uuid(self) -> str: ...


@dataclasses.dataclass(frozen=True)
class InstanceInfo:
    """An instance as os-acc's plugins see it."""

    uuid: str
    name: str | None = None


@dataclasses.dataclass(frozen=True)
class PciAddress:
    """A PCI function's address, read from attach-handle info."""

    domain: int
    bus: int
    device: int
    function: int

    @classmethod
    def from_info(cls, info: Mapping[str, object]) -> 'PciAddress':
        """The address in ``info``'s ``domain``, ``bus``, ``device`` and
        ``function``: strings of hex digits, ``0x`` optional. ValueError
        says which field is missing or wrong."""
        parts = {}
        for name, largest in _PCI_FIELDS:
            if name not in info:
                raise ValueError(f'attach_handle_info has no {name!r}')
            value = info[name]
            if not isinstance(value, str):
                raise ValueError(
                    f'attach_handle_info {name!r} is {value!r} '
                    f'({type(value).__name__}), not a string of hex digits')
            match = _HEX_RE.match(value)
            if not match:
                raise ValueError(f'attach_handle_info {name!r} is {value!r}, '
                                 'not a string of hex digits')
            number = int(match.group(1), 16)
            if number > largest:
                raise ValueError(f'attach_handle_info {name!r} is {value!r}, '
                                 f'larger than {largest:#x}')
            parts[name] = number
        return cls(**parts)

    def __str__(self) -> str:
        """The kernel's name of the function, ``0000:0c:00.1``."""
        return (f'{self.domain:04x}:{self.bus:02x}:{self.device:02x}.'
                f'{self.function:x}')


def is_managed(info: Mapping[str, str]) -> bool:
    """A PCI handle's ``managed``: "true" (the default), libvirt detaches
    the function from its host driver itself, or "false"; ValueError
    otherwise."""
    value = info.get('managed', 'true')
    if value not in ('true', 'false'):
        raise ValueError(f'attach_handle_info managed is {value!r}, not '
                         '"true" or "false"')
    return value == 'true'


@dataclasses.dataclass(frozen=True)
class ARQ:
    """An accelerator request as the API returns it, its types checked.

    Only the fields os-acc uses are kept; ``attach_handle_info`` values
    are checked by the driver that handles the request.
    """

    uuid: str
    state: str
    instance_uuid: str | None
    attach_handle_type: str
    attach_handle_uuid: str | None
    attach_handle_info: Mapping[str, str]
    hostname: str | None = None
    device_profile_name: str | None = None

    @classmethod
    def from_dict(cls, value: object) -> 'ARQ':
        """The request in ``value`` (the API's JSON, or what Nova's
        client returned); ValueError says what is wrong with it."""
        if not isinstance(value, Mapping):
            raise ValueError(f'it is a {type(value).__name__}, not a mapping')
        if not is_uuid(value.get('uuid')):
            raise ValueError(f'its uuid is {value.get("uuid")!r}')

        def text(key: str, required: bool = False) -> str | None:
            found = value.get(key)
            if found in (None, '') and not required:
                return None
            if not isinstance(found, str) or not found:
                raise ValueError(f'{key} is {found!r}, not a string')
            return found

        state = text('state', required=True)
        handle_type = text('attach_handle_type', required=state == BOUND)
        info = value.get('attach_handle_info') or {}
        if not isinstance(info, Mapping):
            raise ValueError(f'attach_handle_info is {info!r}, not a mapping')
        for key, item in info.items():
            if not isinstance(key, str) or not isinstance(item, str):
                raise ValueError(
                    f'attach_handle_info {key!r} is {item!r} '
                    f'({type(item).__name__}), not a string')
        return cls(uuid=str(value['uuid']), state=str(state),
                   instance_uuid=text('instance_uuid'),
                   attach_handle_type=handle_type or '',
                   attach_handle_uuid=text('attach_handle_uuid'),
                   attach_handle_info=dict(info),
                   hostname=text('hostname'),
                   device_profile_name=text('device_profile_name'))


class DeviceState(str, enum.Enum):
    """Where a VAN's device half is."""

    #: ``prepare_van`` made the attach handle ready for the instance.
    PREPARED = 'prepared'
    #: ``post_plug`` accepted it: the instance can use it.
    PLUGGED = 'plugged'
    #: ``unprepare_van`` gave it back to the host.
    RELEASED = 'released'


def _str_dict(value: object, name: str) -> dict[str, str]:
    if not isinstance(value, Mapping) or not all(
            isinstance(k, str) and isinstance(v, str)
            for k, v in value.items()):
        raise ValueError(f'{name} is not a mapping of strings to strings')
    return dict(value)


def _optional_str(value: object, name: str) -> str | None:
    if value is not None and not isinstance(value, str):
        raise ValueError(f'{name} is {value!r}, not a string')
    return value


@dataclasses.dataclass
class VAN:
    """A Virtual Accelerator Nexus: one accelerator request attached to
    one instance, with what each half did.

    nova-compute keeps it (``to_dict`` is JSON-able) and gives it back to
    :func:`cyborg.os_acc.unplug`, possibly from another process.
    ``device_info`` is the device-half driver's record of what it changed
    on the host, to undo it; ``config`` is what the instance plugin made
    (for libvirt, a ``<hostdev>`` element), None when there is nothing to
    attach.

    Version history: 1.0 — the first version.
    """

    VERSION: ClassVar[str] = '1.0'

    arq_uuid: str
    instance_uuid: str
    attach_handle_type: str
    attach_handle_uuid: str | None
    attach_handle_info: dict[str, str]
    driver: str
    device_state: DeviceState = DeviceState.PREPARED
    device_info: dict[str, str] = dataclasses.field(default_factory=dict)
    plugin: str | None = None
    config: str | None = None

    @classmethod
    def for_arq(cls, arq: ARQ, driver: str, **device_info: str) -> 'VAN':
        """A prepared VAN of ``arq`` made by ``driver``."""
        return cls(arq_uuid=arq.uuid, instance_uuid=arq.instance_uuid or '',
                   attach_handle_type=arq.attach_handle_type,
                   attach_handle_uuid=arq.attach_handle_uuid,
                   attach_handle_info=dict(arq.attach_handle_info),
                   driver=driver, device_info=device_info)

    def to_dict(self) -> dict[str, Any]:
        """The VAN as JSON-able data, with its ``version``."""
        data = dataclasses.asdict(self)
        data['device_state'] = self.device_state.value
        data['version'] = self.VERSION
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> 'VAN':
        """The VAN that ``to_dict`` of this or an older version of the
        same major version gave; fields unknown to this version (a newer
        minor version) are ignored. Raises InvalidVAN."""
        label = data.get('arq_uuid') if isinstance(data, Mapping) else None
        try:
            return cls._from_dict(data)
        except (ValueError, KeyError, TypeError) as exc:
            raise exception.InvalidVAN(van=label or '?',
                                       reason=str(exc)) from exc

    @classmethod
    def _from_dict(cls, data: Mapping[str, Any]) -> 'VAN':
        version = data.get('version')
        if not isinstance(version, str) or not re.match(r'^\d+\.\d+$',
                                                        version):
            raise ValueError(f'its version is {version!r}')
        if version.split('.')[0] != cls.VERSION.split('.')[0]:
            raise ValueError(f'version {version} is not compatible with '
                             f'this os-acc (VAN {cls.VERSION})')
        for key in ('arq_uuid', 'instance_uuid', 'attach_handle_type',
                    'driver'):
            if not isinstance(data.get(key), str):
                raise ValueError(f'{key} is {data.get(key)!r}')
        return cls(
            arq_uuid=data['arq_uuid'], instance_uuid=data['instance_uuid'],
            attach_handle_type=data['attach_handle_type'],
            attach_handle_uuid=_optional_str(data.get('attach_handle_uuid'),
                                             'attach_handle_uuid'),
            attach_handle_info=_str_dict(data.get('attach_handle_info'),
                                         'attach_handle_info'),
            driver=data['driver'],
            device_state=DeviceState(data.get('device_state')),
            device_info=_str_dict(data.get('device_info', {}),
                                  'device_info'),
            plugin=_optional_str(data.get('plugin'), 'plugin'),
            config=_optional_str(data.get('config'), 'config'))


@dataclasses.dataclass(frozen=True)
class ExtensionInfo:
    """A loaded driver or plugin and the attach-handle types it takes."""

    name: str
    attach_handle_types: tuple[str, ...]
    description: str


@dataclasses.dataclass(frozen=True)
class HostInfo:
    """What os-acc can do on this host (:func:`cyborg.os_acc.host_info`).
    """

    drivers: tuple[ExtensionInfo, ...]
    plugins: tuple[ExtensionInfo, ...]

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)
