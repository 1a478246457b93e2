"""Validation of attribute bodies."""
from typing import Any

from cyborg.api import schemas
from cyborg.common import exception
from cyborg.db.api import attributes

Attribute = attributes.Attribute

CREATE_SCHEMA: dict[str, Any] = {
    'type': 'object',
    'properties': {
        'deployable_id': schemas.integer(Attribute.deployable_id),
        'deployable_uuid': {'type': 'string'},
        'key': schemas.column(Attribute.key, minLength=1),
        'value': schemas.column(Attribute.value),
    },
    'required': ['key', 'value'],
    'additionalProperties': False,
}


def validate_create(body: Any) -> dict[str, Any]:
    """The values of a create body, plain or wrapped as {"attribute": ..}.

    openstacksdk wraps the attribute; other clients send it plain.
    """
    if (isinstance(body, dict) and list(body) == ['attribute']
            and isinstance(body['attribute'], dict)):
        body = body['attribute']
    if not isinstance(body, dict):
        raise exception.Invalid(
            reason='The body must be an object such as {"deployable_id": 1, '
                   '"key": "k", "value": "v"}.')
    schemas.validate(CREATE_SCHEMA, body, 'Attribute')
    if ('deployable_id' in body) == ('deployable_uuid' in body):
        raise exception.Invalid(
            reason='Attribute: name its deployable with exactly one of '
                   '"deployable_id" (integer) and "deployable_uuid".')
    values = dict(body)
    if 'deployable_uuid' in values:
        values['deployable_uuid'] = schemas.check_uuid(
            values['deployable_uuid'], 'deployable_uuid')
    return values
