"""Validation of accelerator-request bodies: create and the bind PATCH;
and of a create's Idempotency-Key header."""
import re
from typing import Any

from cyborg.api import schemas
from cyborg.common import exception
from cyborg.db.api import arqs

ARQ = arqs.ARQ

CREATE_SCHEMA: dict[str, Any] = {
    'type': 'object',
    'properties': {
        'device_profile_name': schemas.column(ARQ.device_profile_name),
        # python-cyborgclient sends these two, always null.
        'device_profile_group_id': {'type': ['integer', 'null']},
        'image_uuid': {'type': ['string', 'null']},
    },
    'additionalProperties': False,
}

PATCH_PATHS = ('/hostname', '/device_rp_uuid', '/instance_uuid',
               '/project_id')
BIND_FIELDS = ('hostname', 'device_rp_uuid', 'instance_uuid')
UUID_FIELDS = ('device_rp_uuid', 'instance_uuid')
# What each value of a bind must fit in.
TEXT_FIELDS = {'hostname': ARQ.hostname, 'project_id': ARQ.project_id}

OPS_SCHEMA: dict[str, Any] = {
    'type': 'array',
    'minItems': 1,
    'maxItems': len(PATCH_PATHS),
    'items': {
        'type': 'object',
        'properties': {
            'op': {'enum': ['add', 'remove']},
            'path': {'enum': list(PATCH_PATHS)},
            # As long as the longest column; each value is checked against
            # its own once it is known whose it is.
            'value': {'type': ['string', 'null'], 'maxLength': max(
                schemas.column(c)['maxLength']
                for c in TEXT_FIELDS.values())},
        },
        'required': ['op', 'path'],
        'additionalProperties': False,
    },
}


def validate_create(body: Any, strict: bool) -> str:
    """The profile name of a create body (``strict``: microversion 2.4's
    400 for a missing name, not 2.0-2.3's 500)."""
    if not isinstance(body, dict):
        raise exception.Invalid(
            reason='The body must be an object such as '
                   '{"device_profile_name": "my-dp"}.')
    schemas.validate(CREATE_SCHEMA, body, 'Accelerator request')
    if 'device_profile_name' not in body:
        raise schemas.legacy_error(
            'An accelerator request needs "device_profile_name".', strict)
    return body['device_profile_name']


IDEMPOTENCY_KEY = 'Idempotency-Key'
KEY_MAX = schemas.column(ARQ.idempotency_key)['maxLength']
# draft-ietf-httpapi-idempotency-key-header, section 2: the value is a
# Structured Field String (RFC 8941, section 3.3.3), in double quotes with
# \" and \\ escaped; a key sent bare, as many clients send theirs, is
# taken as it is, unless it starts with a double quote (a quoted string
# gone wrong).
_SF_STRING = re.compile(r'"((?:[\x20\x21\x23-\x5b\x5d-\x7e]|\\["\\])*)"')
_PRINTABLE = re.compile(r'[\x20-\x7e]+')


def idempotency_key(value: str | None) -> str | None:
    """The key of a create's ``Idempotency-Key`` header (None without
    one): 1 to KEY_MAX printable ASCII characters, bare or quoted; Invalid
    otherwise."""
    if value is None:
        return None
    key: str | None = value.strip(' \t')
    if key and key[0] == '"':
        quoted = _SF_STRING.fullmatch(key)
        key = re.sub(r'\\(.)', r'\1', quoted.group(1)) if quoted else None
    if not (key and len(key) <= KEY_MAX and _PRINTABLE.fullmatch(key)):
        raise exception.Invalid(
            reason=f'The {IDEMPOTENCY_KEY} header must be 1 to {KEY_MAX} '
                   'printable ASCII characters, bare or as a quoted string '
                   '(draft-ietf-httpapi-idempotency-key-header); a UUID '
                   f'makes a good key. Got {schemas.shown(value)}.')
    return key


def _bind_values(uuid: str, ops: list[dict[str, Any]]) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for op in ops:
        field = op['path'][1:]
        if field in values:
            raise exception.Invalid(
                reason=f'{uuid}: {op["path"]} appears twice.')
        if 'value' not in op or op['value'] in (None, ''):
            raise exception.Invalid(
                reason=f'{uuid}: "add" of {op["path"]} needs a value.')
        values[field] = op['value']
    absent = [f for f in BIND_FIELDS if f not in values]
    if absent:
        raise exception.Invalid(
            reason=f'{uuid}: fields absent in patch: {", ".join(absent)}. '
                   'A bind adds /hostname, /device_rp_uuid and '
                   '/instance_uuid together.')
    for field in UUID_FIELDS:
        values[field] = schemas.check_uuid(values[field], f'{uuid}: {field}')
    for field, column in TEXT_FIELDS.items():
        if field in values:
            schemas.validate(schemas.column(column), values[field],
                             f'{uuid}: /{field}')
    return values


def validate_patch(body: Any, path_uuid: str | None
                   ) -> tuple[dict[str, dict[str, Any]], list[str]]:
    """(binds, unbinds) of a PATCH body ``{arq_uuid: [ops]}``.

    Each ARQ's ops are all ``add`` (a bind) or all ``remove`` (an unbind).
    """
    if not isinstance(body, dict) or not body:
        raise exception.Invalid(
            reason='The body must map accelerator request uuids to JSON '
                   'patches, e.g. {"<uuid>": [{"op": "add", "path": '
                   '"/hostname", "value": "node1"}, ...]}.')
    if len(body) > schemas.LIST_MAX:
        raise exception.Invalid(
            reason=f'The body names {len(body)} accelerator requests; at '
                   f'most {schemas.LIST_MAX} per request.')
    if path_uuid is not None and (
            len(body) != 1
            or schemas.canonical_uuid(next(iter(body)))
            != (schemas.canonical_uuid(path_uuid) or path_uuid)):
        raise exception.Invalid(
            reason=f'PATCH /accelerator_requests/{path_uuid} takes a body '
                   f'about {path_uuid} only.')
    binds: dict[str, dict[str, Any]] = {}
    unbinds: list[str] = []
    for key, ops in body.items():
        uuid = schemas.canonical_uuid(key)
        if uuid is None:
            raise exception.Invalid(
                reason=f'{schemas.shown(key)} is not an accelerator request '
                       'uuid.')
        if uuid in binds or uuid in unbinds:
            raise exception.Invalid(reason=f'{uuid} appears twice.')
        schemas.validate(OPS_SCHEMA, ops, f'Patch of {uuid}')
        kinds = {op['op'] for op in ops}
        if len(kinds) != 1:
            raise exception.Invalid(
                reason=f'{uuid}: the operations of one request must be all '
                       '"add" (bind) or all "remove" (unbind).')
        if kinds == {'remove'}:
            unbinds.append(uuid)
        else:
            binds[uuid] = _bind_values(uuid, ops)
    return binds, unbinds
