"""Validation of the deployable program PATCH."""
from typing import Any

from cyborg.api import schemas

# [{"path": "/program", "op": "replace", "value": [{"image_uuid": u}]}]
PROGRAM_SCHEMA: dict[str, Any] = {
    'type': 'array',
    'minItems': 1,
    'maxItems': 1,
    'items': {
        'type': 'object',
        'properties': {
            'path': {'const': '/program'},
            'op': {'const': 'replace'},
            'value': {
                'type': 'array',
                'minItems': 1,
                'maxItems': 1,
                'items': {
                    'type': 'object',
                    'properties': {'image_uuid': {'type': 'string'}},
                    'required': ['image_uuid'],
                    'additionalProperties': False,
                },
            },
        },
        'required': ['path', 'op', 'value'],
        'additionalProperties': False,
    },
}


def validate_program(body: Any) -> str:
    """The image uuid of a program PATCH body, in canonical form: the
    deployable keeps it in a uuid column."""
    schemas.validate(PROGRAM_SCHEMA, body, 'Program request')
    return schemas.check_uuid(body[0]['value'][0]['image_uuid'], 'image_uuid')
