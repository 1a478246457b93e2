"""Validation of device-profile bodies and request groups."""
import json
import re
from typing import Any
from typing import cast

from cyborg.api import schemas
from cyborg.common import exception
from cyborg.db.api import device_profiles
from cyborg.db.api import query

DP = device_profiles.DP

# Every pattern here is matched with fullmatch: "$" would also match
# before a trailing newline.
NAME_RE = re.compile(r'[a-zA-Z0-9_-]+')
# A String(n) column, so a number of characters (max_chars says None only
# for Text).
NAME_MAX = cast(int, query.max_chars(DP.name))
DESCRIPTION_MAX = 4096
# Placement's standard resource classes that make sense for a device.
STANDARD_RESOURCE_CLASSES = frozenset([
    'FPGA', 'PGPU', 'VGPU', 'PCI_DEVICE', 'SRIOV_NET_VF',
    *device_profiles.AMOUNT_CLASSES])
CUSTOM_RE = re.compile(r'CUSTOM_[A-Z0-9_]+')
TRAIT_RE = re.compile(r'[A-Z][A-Z0-9_]*')
ACCEL_RE = re.compile(r'[A-Za-z0-9_.:-]+')
# The longest resource class or trait name placement takes; accel: names
# and values name image properties, which Glance bounds alike.
KEY_NAME_MAX = 255
ACCEL_VALUE_MAX = 255
# Keys of one group: its resources, traits and accel: settings.
GROUP_KEYS_MAX = 64
# The largest amount placement takes (the maximum integer of its schemas).
AMOUNT_MAX = 2147483647

PROFILE_SCHEMA: dict[str, Any] = {
    'type': 'object',
    'properties': {
        'name': {'type': 'string'},
        'uuid': {'type': 'string'},
        'description': schemas.column(DP.description, null=True,
                                      maxLength=DESCRIPTION_MAX),
        'groups': {'type': 'array',
                   'items': {'type': 'object',
                             'maxProperties': GROUP_KEYS_MAX,
                             'additionalProperties': {
                                 'type': ['string', 'integer']}}},
    },
    'additionalProperties': False,
}
# From microversion 2.10: whether every project may use the profile.
PRIVATE_PROFILE_SCHEMA: dict[str, Any] = dict(PROFILE_SCHEMA, properties={
    **PROFILE_SCHEMA['properties'], 'is_public': {'type': 'boolean'}})

# PATCH /device_profiles/{uuid_or_name}: a JSON patch (RFC 6902) of the
# one field that changes for now.
PATCH_SCHEMA: dict[str, Any] = {
    'type': 'array',
    'minItems': 1,
    'maxItems': 1,
    'items': {
        'type': 'object',
        'properties': {
            'op': {'enum': ['replace']},
            'path': {'enum': ['/is_public']},
            # Checked once the path is known: a value that does not fit
            # another path is no news to its sender.
            'value': {},
        },
        'required': ['op', 'path', 'value'],
        'additionalProperties': False,
    },
}
PATCH_EXAMPLE = '[{"op": "replace", "path": "/is_public", "value": false}]'

# A Keystone project id: 32 hexadecimal digits as Keystone makes them;
# letters, digits, "-" and "_" in at most 64 characters (the length of
# Keystone's id column) for those a deployment chose itself.
PROJECT_ID_RE = re.compile(r'[A-Za-z0-9_-]{1,64}')


def _count(value: str | int) -> int | None:
    """A resource count: a JSON integer, or ASCII digits in a string
    (surrounding blanks ignored); None for anything else. Beyond
    AMOUNT_MAX it is AMOUNT_MAX + 1, whatever the number of digits."""
    if isinstance(value, int):
        return value
    text = value.strip()
    if not re.fullmatch(r'[0-9]+', text):
        return None
    if len(text.lstrip('0')) > len(str(AMOUNT_MAX)):
        return AMOUNT_MAX + 1
    return int(text)


def _resource(where: str, name: str, raw_value: str | int) -> str:
    if not (name in STANDARD_RESOURCE_CLASSES or CUSTOM_RE.fullmatch(name)):
        raise exception.Invalid(
            reason=f'{where}: unknown resource class {schemas.shown(name)}; '
                   'use a standard class such as FPGA, PGPU or VGPU, or '
                   'CUSTOM_<NAME> in upper case.')
    count = _count(raw_value)
    if count is None or not 1 <= count <= AMOUNT_MAX:
        raise exception.Invalid(
            reason=f'{where}: resources:{name} must be a positive integer '
                   f'of at most {AMOUNT_MAX} (a JSON integer or ASCII '
                   f'digits), not {schemas.shown(raw_value)}.')
    return str(count)


def _group(index: int, group: dict[str, Any]) -> dict[str, str]:
    """The group with normalised keys and string values, or Invalid."""
    result: dict[str, str] = {}
    where = f'groups/{index}'
    for raw_key, raw_value in group.items():
        prefix, sep, name = raw_key.partition(':')
        prefix, name = prefix.strip(), name.strip()
        if len(name) > KEY_NAME_MAX:
            raise exception.Invalid(
                reason=f'{where}: {schemas.shown(raw_key)}: the name after '
                       f'"{prefix}:" has at most {KEY_NAME_MAX} '
                       'characters.')
        if prefix == 'resources' and sep:
            key = f'resources:{name}'
            value = _resource(where, name, raw_value)
        elif prefix == 'trait' and sep:
            if not TRAIT_RE.fullmatch(name):
                raise exception.Invalid(
                    reason=f'{where}: {schemas.shown(name)} is not a trait '
                           'name (upper case letters, digits and '
                           'underscores).')
            key, value = f'trait:{name}', str(raw_value).strip()
            if value not in ('required', 'forbidden'):
                raise exception.Invalid(
                    reason=f'{where}: trait:{name} must be "required" or '
                           f'"forbidden", not {schemas.shown(raw_value)}.')
        elif prefix == 'accel' and sep and ACCEL_RE.fullmatch(name):
            key, value = f'accel:{name}', str(raw_value).strip()
            if len(value) > ACCEL_VALUE_MAX:
                raise exception.Invalid(
                    reason=f'{where}: {key} has at most {ACCEL_VALUE_MAX} '
                           'characters.')
            if key == 'accel:bitstream_id':
                # A Glance image; deployables keep it in a uuid column.
                value = schemas.check_uuid(value, f'{where}: {key}')
        else:
            raise exception.Invalid(
                reason=f'{where}: unknown key {schemas.shown(raw_key)}; '
                       'keys are resources:<CLASS>, trait:<TRAIT> or '
                       'accel:<name>.')
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


def _groups(groups: list[dict[str, Any]], limits: Any
            ) -> list[dict[str, str]]:
    """The normalised groups, within the ``[api]`` ``limits``, or
    Invalid."""
    most = limits.max_groups_per_profile
    if len(groups) > most:
        raise exception.Invalid(
            reason=f'A device profile has at most {most} groups ([api] '
                   f'max_groups_per_profile), not {len(groups)}.')
    result = [_group(i, g) for i, g in enumerate(groups)]
    problem = device_profiles.too_many_accelerators(
        result, limits.max_accelerators_per_group,
        limits.max_accelerators_per_profile)
    if problem:
        raise exception.Invalid(reason=f'Device profile: {problem}')
    # As the groups column (Text) stores them: JSON in ASCII, one byte a
    # character.
    size, room = len(json.dumps(result)), cast(int, query.max_bytes(DP.groups))
    if size > room:
        raise exception.Invalid(
            reason=f'The groups take {size} bytes as JSON; a device profile '
                   f'holds at most {room}.')
    return result


def validate_create(body: Any, strict: bool, limits: Any,
                    private: bool = False) -> dict[str, Any]:
    """The profile to create from a POST body, or an error.

    Missing or empty names and groups, and an over-long name, are 500 before
    microversion 2.4 (the clients of those versions expect it) and 400
    from 2.4 on (``strict``); everything else is 400 at every version.
    ``limits`` is the ``[api]`` group of the app's configuration.
    ``private``: from 2.10 a body may say ``is_public`` (true when it does
    not); before, the field is refused as any unknown one is.
    """
    if not isinstance(body, list) or len(body) != 1:
        raise exception.Invalid(
            reason='The body must be a JSON list holding exactly one device '
                   'profile, e.g. [{"name": "my-dp", "groups": '
                   '[{"resources:FPGA": "1"}]}].')
    profile = body[0]
    if not isinstance(profile, dict):
        raise exception.Invalid(reason='A device profile must be an object.')
    schemas.validate(PRIVATE_PROFILE_SCHEMA if private else PROFILE_SCHEMA,
                     profile, 'Device profile')
    name = profile.get('name')
    if not name:
        raise schemas.legacy_error(
            'A device profile needs a non-empty name.', strict)
    if len(name) > NAME_MAX:
        raise schemas.legacy_error(
            f'A device profile name has at most {NAME_MAX} characters.',
            strict)
    if not NAME_RE.fullmatch(name):
        raise exception.Invalid(
            reason=f'Device profile name {schemas.shown(name)} may only '
                   'contain letters, digits, "-" and "_".')
    uuid = profile.get('uuid')
    if uuid is not None:
        uuid = schemas.check_uuid(uuid, 'uuid')
    groups = profile.get('groups')
    if not groups or not all(groups):
        raise schemas.legacy_error(
            'A device profile needs a non-empty list of non-empty groups.',
            strict)
    values = {'name': name, 'uuid': uuid,
              'description': profile.get('description'),
              'groups': _groups(groups, limits)}
    if private:
        values['is_public'] = profile.get('is_public', True)
    return values


def validate_patch(body: Any) -> bool:
    """Whether the profile is to be public, from a PATCH body (the one
    change a profile takes), or Invalid saying what the body must be."""
    what = f'Device profile patch (send {PATCH_EXAMPLE})'
    schemas.validate(PATCH_SCHEMA, body, what)
    schemas.validate({'type': 'boolean'}, body[0]['value'],
                     f'{what} at 0/value')
    return bool(body[0]['value'])


def check_project_id(value: str) -> str:
    """A project id of a path, or Invalid (400) saying what one is."""
    if not PROJECT_ID_RE.fullmatch(value):
        raise exception.Invalid(
            reason=f'project_id must be a Keystone project ID: 1 to 64 '
                   f'letters, digits, "-" or "_", such as '
                   f'"8f3c0e1d2b4a49c7a1e5d6f708192a3b"; not '
                   f'{schemas.shown(value)}.')
    return value
