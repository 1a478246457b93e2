"""What an agent reports: typed device descriptions and their wire format.

Drivers build :class:`DriverDevice` trees; the agent sends them as plain
JSON-able dicts; the conductor validates the dicts against ``REPORT_SCHEMA``
before it reads anything out of them.
"""
import collections
import dataclasses
import hashlib
import json
from typing import Any

import jsonschema

from cyborg.common import exception

# The values a report may hold. The database stores exactly these (the
# enum columns of cyborg.db.models are made of them), and agents and
# nova-compute load this module but never the DB layer.
DEVICE_TYPES = ('GPU', 'FPGA', 'AICHIP', 'QAT', 'NIC', 'SSD', 'PCI')
DEVICE_STATUSES = ('enabled', 'maintaining', 'preparing', 'error')
# The statuses a report may ask new devices to be stored with.
NEW_DEVICE_STATUSES = ('enabled', 'maintaining')
ATTACH_TYPES = ('PCI', 'MDEV', 'TEST_PCI')
CPID_TYPES = ('PCI',)
# How a driver of an agent fared in its last discovery pass, or that an
# operator turned it off on that host.
DRIVER_STATES = ('ok', 'no devices', 'failed', 'disabled')
# What an operator asked of a device's partitioning, and how far its
# agent got.
LAYOUT_STATES = ('pending', 'applying', 'applied', 'failed')
# An attach handle being cleaned after use, or held after a failed clean.
CLEAN_STATES = ('cleaning', 'maintenance')
# The attach-info key, and its value, of an MDEV attach handle whose mdev
# nova-compute creates itself (``[gpu_devices] mdev_creator`` and
# ``[generic_pci] mdev_creator`` set to ``nova``): its binds need no agent.
# Nova 34 never removes such an mdev; it reuses it for the handle's next
# instance, so cyborg leaves it alone too.
MDEV_CREATOR = 'mdev_creator'
NOVA_CREATES = 'nova'


#: The attach-info key of a PCI handle whose function the agent gives a
#: vGPU type when it is bound and takes it back when it is released (the
#: VFs of an SR-IOV vGPU GPU).
VGPU_TYPE = 'vgpu_type'


def nova_creates_mdev(attach_type: str, attach_info: dict[str, Any]
                      ) -> bool:
    """Whether nova-compute, not cyborg, creates the mdev of this attach
    handle (and cyborg never removes it)."""
    return (attach_type == 'MDEV'
            and attach_info.get(MDEV_CREATOR) == NOVA_CREATES)


def canonical_json(value: Any) -> str:
    """JSON with sorted keys and no spaces: equal values, equal strings."""
    return json.dumps(value, sort_keys=True, separators=(',', ':'))


def pci_address(domain: str, bus: str, device: str, function: str
                ) -> dict[str, str]:
    """A PCI address as attach-handle info: lower-case hex strings."""
    return {'domain': domain.lower(), 'bus': bus.lower(),
            'device': device.lower(), 'function': function.lower()}


@dataclasses.dataclass
class DriverAttachHandle:
    attach_type: str
    attach_info: dict[str, str]

    def to_dict(self) -> dict[str, Any]:
        return {'attach_type': self.attach_type,
                'attach_info': dict(self.attach_info)}


@dataclasses.dataclass
class DriverDeployable:
    name: str
    num_accelerators: int
    driver_name: str
    attributes: dict[str, str] = dataclasses.field(default_factory=dict)
    attach_handles: list[DriverAttachHandle] = dataclasses.field(
        default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {'name': self.name,
                'num_accelerators': self.num_accelerators,
                'driver_name': self.driver_name,
                'attributes': dict(self.attributes),
                'attach_handles': [h.to_dict() for h in self.attach_handles]}


@dataclasses.dataclass
class DriverDevice:
    type: str
    vendor: str
    model: str
    controlpath_id: dict[str, str]
    std_board_info: dict[str, Any] = dataclasses.field(default_factory=dict)
    vendor_board_info: dict[str, Any] = dataclasses.field(
        default_factory=dict)
    deployables: list[DriverDeployable] = dataclasses.field(
        default_factory=list)
    cpid_type: str = 'PCI'
    # What the device's partitioning may be (AcceleratorDriver.
    # layout_options), filled in by the agent; empty for devices without
    # one, and then left out of the report so reports stay as they were.
    layout_options: dict[str, Any] = dataclasses.field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        result: dict[str, Any] = {
            'type': self.type,
            'vendor': self.vendor,
            'model': self.model,
            'std_board_info': dict(self.std_board_info),
            'vendor_board_info': dict(self.vendor_board_info),
            'controlpath_id': {'cpid_type': self.cpid_type,
                               'cpid_info': dict(self.controlpath_id)},
            'deployables': [d.to_dict() for d in self.deployables]}
        if self.layout_options:
            result['layout_options'] = dict(self.layout_options)
        return result


def check_layout(options: dict[str, Any], layout: dict[str, Any]) -> None:
    """Raise Invalid naming what is allowed when ``layout`` asks for
    something ``options`` (a driver's ``layout_options``) does not offer.

    ``{"min": a, "max": b}`` allows the integers a..b; a dict of names
    (mdev types with their instance counts) allows those names; a
    ``{"deployables": [...]}`` entry allows any image id string (Glance
    says whether the image exists); ``{"profiles": {name: count}}`` (MIG
    GPU instance profiles) allows a list of those names, each at most
    ``count`` times; ``{"after": [keys]}`` is a key the device offers once
    those keys are applied (a vGPU type once the VFs exist, a MIG
    partition once MIG mode is on), allowed in a layout that sets one of
    them, where the driver checks it after applying them.
    """
    if not options:
        raise exception.Invalid(reason='the device cannot be partitioned')
    for key, value in layout.items():
        allowed = options.get(key)
        if allowed is None:
            raise exception.Invalid(
                reason=f'layout key {key!r} is not one of '
                       f'{", ".join(sorted(options))}')
        if 'after' in allowed:
            if not any(first in layout for first in allowed['after']):
                raise exception.Invalid(
                    reason=f'{key} is offered once '
                           f'{" or ".join(allowed["after"])} is applied: '
                           'set it in the same layout')
        elif 'min' in allowed and 'max' in allowed:
            if (not isinstance(value, int) or isinstance(value, bool)
                    or not allowed['min'] <= value <= allowed['max']):
                raise exception.Invalid(
                    reason=f'{key} {value!r} is not an integer from '
                           f'{allowed["min"]} to {allowed["max"]}')
        elif 'deployables' in allowed:
            if not isinstance(value, str) or not value:
                raise exception.Invalid(
                    reason=f'{key} {value!r} is not an image id')
        elif 'profiles' in allowed:
            _check_profiles(key, value, allowed['profiles'])
        elif value not in allowed:
            raise exception.Invalid(
                reason=f'{key} {value!r} is not one of '
                       f'{", ".join(sorted(allowed))}')


def _check_profiles(key: str, value: Any, profiles: dict[str, int]
                    ) -> None:
    allowed = ', '.join(f'{name} (at most {count})'
                        for name, count in sorted(profiles.items()))
    if not isinstance(value, list) or not all(
            isinstance(item, str) for item in value):
        raise exception.Invalid(
            reason=f'{key} {value!r} is not a list of: {allowed}')
    counts = collections.Counter(value)
    wrong = [f'{name} (not offered)' if name not in profiles
             else f'{count} of {name}'
             for name, count in sorted(counts.items())
             if count > profiles.get(name, 0)]
    if wrong:
        raise exception.Invalid(
            reason=f'{key} {value!r} asks for {", ".join(wrong)}; '
                   f'allowed: {allowed or "none"}')


_NAME = {'type': 'string', 'minLength': 1, 'maxLength': 255}
# The longest error a driver state carries; agents cut longer ones.
MAX_ERROR_LENGTH = 4096
_STRING_MAP = {'type': 'object',
               'additionalProperties': {'type': 'string', 'maxLength': 255}}

REPORT_SCHEMA: dict[str, Any] = {
    'type': 'object',
    'required': ['hostname', 'devices'],
    'additionalProperties': False,
    'properties': {
        'hostname': _NAME,
        # The status of devices the conductor stores for the first time
        # ([agent] new_device_state); absent means 'enabled'.
        'new_device_status': {'enum': list(NEW_DEVICE_STATUSES)},
        # The state of every enabled driver in this discovery pass, and of
        # the drivers an operator disabled on the host ('disabled'), by
        # driver name (conductor RPC 1.5; absent from older agents and
        # from reports to older conductors). ``error`` comes with
        # ``failed`` and only with it.
        'drivers': {
            'type': 'object',
            'propertyNames': {'minLength': 1, 'maxLength': 100},
            'additionalProperties': {
                'type': 'object',
                'additionalProperties': False,
                'required': ['state'],
                'properties': {
                    'state': {'enum': list(DRIVER_STATES)},
                    'error': {'type': 'string',
                              'maxLength': MAX_ERROR_LENGTH},
                    # The version of the package the driver comes from
                    # (conductor RPC 1.9, as the state 'disabled').
                    'version': {'type': 'string', 'minLength': 1,
                                'maxLength': 64},
                },
                'if': {'properties': {'state': {'const': 'failed'}}},
                'then': {'required': ['error']},
                'else': {'not': {'required': ['error']}},
            },
        },
        'devices': {
            'type': 'array',
            'items': {
                'type': 'object',
                'additionalProperties': False,
                'required': ['type', 'vendor', 'model', 'controlpath_id',
                             'deployables'],
                'properties': {
                    'type': {'enum': list(DEVICE_TYPES)},
                    'vendor': _NAME,
                    'model': _NAME,
                    'std_board_info': {'type': 'object'},
                    'vendor_board_info': {'type': 'object'},
                    # A device whose preparation at discovery failed
                    # ([agent] new_device_state = enabled), and why;
                    # stored for devices new to the conductor.
                    'status': {'const': 'error'},
                    'status_reason': {'type': 'string', 'maxLength': 255},
                    'controlpath_id': {
                        'type': 'object',
                        'additionalProperties': False,
                        'required': ['cpid_type', 'cpid_info'],
                        'properties': {
                            'cpid_type': {'enum': list(CPID_TYPES)},
                            'cpid_info': dict(_STRING_MAP, minProperties=1),
                        },
                    },
                    'deployables': {
                        'type': 'array',
                        'items': {
                            'type': 'object',
                            'additionalProperties': False,
                            'required': ['name', 'num_accelerators',
                                         'driver_name', 'attach_handles'],
                            'properties': {
                                'name': _NAME,
                                'num_accelerators': {'type': 'integer',
                                                     'minimum': 0},
                                'driver_name': {'type': 'string',
                                                'maxLength': 100},
                                'attributes': _STRING_MAP,
                                'attach_handles': {
                                    'type': 'array',
                                    'items': {
                                        'type': 'object',
                                        'additionalProperties': False,
                                        'required': ['attach_type',
                                                     'attach_info'],
                                        'properties': {
                                            'attach_type': {'enum': list(
                                                ATTACH_TYPES)},
                                            'attach_info': _STRING_MAP,
                                        },
                                    },
                                },
                            },
                        },
                    },
                },
            },
        },
    },
}

_VALIDATOR = jsonschema.Draft202012Validator(REPORT_SCHEMA)


def check_schema(validator: jsonschema.protocols.Validator, host: str,
                 payload: Any) -> None:
    """Raise InvalidReport naming where ``payload`` first breaks the
    schema of ``validator``."""
    error = jsonschema.exceptions.best_match(validator.iter_errors(payload))
    if error is not None:
        where = '/'.join(str(p) for p in error.absolute_path) or '(top)'
        raise exception.InvalidReport(host=host,
                                      reason=f'{where}: {error.message}')


def validate_report(host: str, report: Any) -> None:
    """Raise InvalidReport naming the first problem found in ``report``."""
    check_schema(_VALIDATOR, host, report)
    seen_devices: set[str] = set()
    for device in report['devices']:
        key = canonical_json(device['controlpath_id'])
        if key in seen_devices:
            raise exception.InvalidReport(
                host=host, reason=f'two devices share control path {key}')
        seen_devices.add(key)
        names = [d['name'] for d in device['deployables']]
        if len(names) != len(set(names)):
            raise exception.InvalidReport(
                host=host, reason=f'device {key} repeats a deployable name')
        for deployable in device['deployables']:
            infos = [canonical_json(h['attach_info'])
                     for h in deployable['attach_handles']]
            if len(infos) != len(set(infos)):
                raise exception.InvalidReport(
                    host=host, reason=f'deployable {deployable["name"]} '
                                      'repeats an attach handle')
            for info in infos:
                if len(info) > 255:
                    raise exception.InvalidReport(
                        host=host, reason=f'attach info too long: {info}')


def report_hash(report: dict[str, Any]) -> str:
    """A content hash that ignores ordering of devices and their parts."""
    return hashlib.sha256(canonical_json(_normalized(report)).encode()
                          ).hexdigest()


def _normalized(report: dict[str, Any]) -> dict[str, Any]:
    devices = []
    for device in report['devices']:
        deployables = []
        for dep in device['deployables']:
            handles = sorted(dep['attach_handles'], key=canonical_json)
            deployables.append(dict(dep, attach_handles=handles))
        deployables.sort(key=lambda d: d['name'])
        devices.append(dict(device, deployables=deployables))
    devices.sort(key=lambda d: canonical_json(d['controlpath_id']))
    return dict(report, devices=devices)
