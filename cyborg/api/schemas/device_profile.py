"""Validation of device-profile bodies and request groups."""
import re
from typing import Any

from oslo_utils import uuidutils

from cyborg.api import schemas
from cyborg.api.controllers import base
from cyborg.common import exception

NAME_RE = re.compile(r'^[a-zA-Z0-9_-]+$')
NAME_MAX = 255
# Placement's standard resource classes that make sense for a device.
STANDARD_RESOURCE_CLASSES = frozenset([
    'FPGA', 'PGPU', 'VGPU', 'VGPU_DISPLAY_HEAD', 'PCI_DEVICE',
    'SRIOV_NET_VF', 'NET_BW_EGR_KILOBIT_PER_SEC',
    'NET_BW_IGR_KILOBIT_PER_SEC', 'MEM_ENCRYPTION_CONTEXT'])
CUSTOM_RE = re.compile(r'^CUSTOM_[A-Z0-9_]+$')
TRAIT_RE = re.compile(r'^[A-Z][A-Z0-9_]*$')
ACCEL_RE = re.compile(r'^accel:[A-Za-z0-9_.:-]+$')

PROFILE_SCHEMA: dict[str, Any] = {
    'type': 'object',
    'properties': {
        'name': {'type': 'string'},
        'uuid': {'type': 'string'},
        'description': {'type': ['string', 'null'], 'maxLength': 4096},
        'groups': {'type': 'array',
                   'items': {'type': 'object',
                             'additionalProperties': {
                                 'type': ['string', 'integer']}}},
    },
    'additionalProperties': False,
}


def _group(index: int, group: dict[str, Any]) -> dict[str, str]:
    """The group with normalised keys and string values, or Invalid."""
    result: dict[str, str] = {}
    where = f'groups/{index}'
    for raw_key, raw_value in group.items():
        prefix, sep, name = raw_key.partition(':')
        prefix, name = prefix.strip(), name.strip()
        value = str(raw_value).strip()
        if prefix == 'resources' and sep:
            if not (name in STANDARD_RESOURCE_CLASSES
                    or CUSTOM_RE.match(name)):
                raise exception.Invalid(
                    reason=f'{where}: unknown resource class {name!r}; use '
                           'a standard class such as FPGA, PGPU or VGPU, or '
                           'CUSTOM_<NAME> in upper case.')
            if not value.isdigit() or int(value) < 1:
                raise exception.Invalid(
                    reason=f'{where}: resources:{name} must be a positive '
                           f'integer, not {raw_value!r}.')
            key, value = f'resources:{name}', str(int(value))
        elif prefix == 'trait' and sep:
            if not TRAIT_RE.match(name) or len(name) > 255:
                raise exception.Invalid(
                    reason=f'{where}: {name!r} is not a trait name (upper '
                           'case letters, digits and underscores).')
            if value not in ('required', 'forbidden'):
                raise exception.Invalid(
                    reason=f'{where}: trait:{name} must be "required" or '
                           f'"forbidden", not {raw_value!r}.')
            key = f'trait:{name}'
        elif prefix == 'accel' and sep and ACCEL_RE.match(f'accel:{name}'):
            key = f'accel:{name}'
        else:
            raise exception.Invalid(
                reason=f'{where}: unknown key {raw_key!r}; keys are '
                       'resources:<CLASS>, trait:<TRAIT> or accel:<name>.')
        if key in result:
            raise exception.Invalid(reason=f'{where}: {key} appears twice.')
        result[key] = value
    if not any(k.startswith('resources:') for k in result):
        raise exception.Invalid(
            reason=f'{where}: a group needs at least one resources:<CLASS>.')
    if ('accel:bitstream_id' in result
            and 'accel:function_id' in result):
        raise exception.Invalid(
            reason=f'{where}: accel:bitstream_id and accel:function_id '
                   'exclude each other.')
    return result


def validate_create(body: Any) -> dict[str, Any]:
    """The profile to create from a POST body, or an error.

    Missing or empty names and groups, and an over-long name, are 500 before
    microversion 2.4 (the clients of those versions expect it) and 400
    from 2.4 on; everything else is 400 at every version.
    """
    if not isinstance(body, list) or len(body) != 1:
        raise exception.Invalid(
            reason='The body must be a JSON list holding exactly one device '
                   'profile, e.g. [{"name": "my-dp", "groups": '
                   '[{"resources:FPGA": "1"}]}].')
    profile = body[0]
    if not isinstance(profile, dict):
        raise exception.Invalid(reason='A device profile must be an object.')
    schemas.validate(PROFILE_SCHEMA, profile, 'Device profile')
    name = profile.get('name')
    if not name:
        raise base.legacy_error('A device profile needs a non-empty name.')
    if len(name) > NAME_MAX:
        raise base.legacy_error(
            f'A device profile name has at most {NAME_MAX} characters.')
    if not NAME_RE.match(name):
        raise exception.Invalid(
            reason=f'Device profile name {name!r} may only contain letters, '
                   'digits, "-" and "_".')
    if profile.get('uuid') is not None and not uuidutils.is_uuid_like(
            profile['uuid']):
        raise exception.Invalid(
            reason=f'uuid must be a UUID, not {profile["uuid"]!r}.')
    groups = profile.get('groups')
    if not groups or not all(groups):
        raise base.legacy_error(
            'A device profile needs a non-empty list of non-empty groups.')
    return {'name': name, 'uuid': profile.get('uuid'),
            'description': profile.get('description'),
            'groups': [_group(i, g) for i, g in enumerate(groups)]}
