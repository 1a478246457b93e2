"""/v2/attributes: list, show, create and delete deployable attributes."""
from http import HTTPStatus
from typing import Any

import pecan
from oslo_utils import uuidutils
from pecan import rest
from wsme import types as wtypes

from cyborg.api import schemas
from cyborg.api.controllers import base
from cyborg.api.controllers import link
from cyborg.api.expose import expose
from cyborg.common import exception
from cyborg.db.api import attributes

# The value column is a TEXT: 65535 bytes on MySQL.
MAX_VALUE_BYTES = 65535

CREATE_SCHEMA: dict[str, Any] = {
    'type': 'object',
    'properties': {
        'deployable_id': {'type': 'integer', 'minimum': 1,
                          'maximum': 2 ** 31 - 1},
        'deployable_uuid': {'type': 'string'},
        'key': {'type': 'string', 'minLength': 1, 'maxLength': 255},
        'value': {'type': 'string', 'maxLength': MAX_VALUE_BYTES},
    },
    'required': ['key', 'value'],
    'additionalProperties': False,
}


class Attribute(wtypes.Base):
    """An attribute as the API shows it."""

    uuid = wtypes.text
    # The deployable's integer id, as clients know it.
    deployable_id = int
    key = wtypes.text
    value = wtypes.text
    links = base.LIST_OF_STRING_DICTS
    created_at = wtypes.text
    updated_at = wtypes.text

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> 'Attribute':
        return cls(uuid=values['uuid'],
                   deployable_id=values['deployable_id'],
                   key=values['key'], value=values['value'],
                   links=[link.make_link('self', 'v2', 'attributes',
                                         values['uuid'])],
                   created_at=base.timestamp(values['created_at']),
                   updated_at=base.timestamp(values['updated_at']))


class AttributeCollection(wtypes.Base):
    attributes = [Attribute]
    next = wtypes.text


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
    if 'deployable_uuid' in body:
        base.check_uuid(body['deployable_uuid'], 'deployable_uuid')
    if len(body['value'].encode('utf-8')) > MAX_VALUE_BYTES:
        raise exception.Invalid(
            reason=f'Attribute: value is longer than {MAX_VALUE_BYTES} '
                   'bytes in UTF-8.')
    values = dict(body)
    if 'deployable_id' in values:
        values['deployable_id'] = int(values['deployable_id'])
    return values


def _not_found(uuid: str) -> exception.CyborgException:
    return exception.ResourceNotFound(resource='Attribute', id=uuid)


class AttributesController(rest.RestController):

    @expose(AttributeCollection, wtypes.text, wtypes.text, wtypes.text,
            wtypes.text)
    def get_all(self, deployable_id: str | None = None,
                key: str | None = None, limit: str | None = None,
                marker: str | None = None) -> AttributeCollection:
        ctx = base.authorize('cyborg:attribute:get_all')
        page = base.Page(limit, marker)
        found, more = attributes.get_all(
            ctx, deployable_id=base.int_param(deployable_id, 'deployable_id'),
            key=key, size=page.size, marker=page.marker)
        return page.collection(AttributeCollection, 'attributes', Attribute,
                               'attributes', found, more)

    @expose(Attribute, wtypes.text)
    def get_one(self, uuid: str) -> Attribute:
        ctx = base.authorize('cyborg:attribute:get_one')
        if not uuidutils.is_uuid_like(uuid):
            raise _not_found(uuid)
        return Attribute.from_dict(attributes.get(ctx, uuid))

    @expose(Attribute, body=base.jsontype, status_code=HTTPStatus.CREATED)
    def post(self, body: Any) -> Attribute:
        ctx = base.authorize('cyborg:attribute:create')
        values = validate_create(body)
        created = pecan.request.conductor_api.attribute_create(ctx, values)
        return Attribute.from_dict(created)

    @expose(None, wtypes.text, status_code=HTTPStatus.NO_CONTENT)
    def delete(self, uuid: str | None = None) -> None:
        ctx = base.authorize('cyborg:attribute:delete')
        if uuid is None:
            raise exception.Invalid(
                reason='Name the attribute: DELETE /attributes/{uuid}.')
        if not uuidutils.is_uuid_like(uuid):
            raise _not_found(uuid)
        pecan.request.conductor_api.attribute_delete(ctx, uuid)
