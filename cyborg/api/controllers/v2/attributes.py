"""/v2/attributes: list, show, create and delete deployable attributes."""
from http import HTTPStatus
from typing import Any

import pecan
from pecan import rest
from wsme import types as wtypes

from cyborg.api.controllers import base
from cyborg.api.expose import expose
from cyborg.api.schemas import attributes as schema
from cyborg.common import exception
from cyborg.db.api import attributes


class Attribute(base.Resource):
    """An attribute as the API shows it."""

    uuid = wtypes.text
    # The deployable's integer id, as clients know it.
    deployable_id = int
    key = wtypes.text
    value = wtypes.text
    links = base.links_field('v2', 'attributes')
    created_at = base.timestamp_field()
    updated_at = base.timestamp_field()


class AttributeCollection(wtypes.Base):
    attributes = [Attribute]
    next = wtypes.text


class AttributesController(rest.RestController):

    @expose(AttributeCollection, wtypes.text, wtypes.text, wtypes.text,
            wtypes.text)
    def get_all(self, deployable_id: str | None = None,
                key: str | None = None, limit: str | None = None,
                marker: str | None = None) -> AttributeCollection:
        ctx = base.authorize('cyborg:attribute:get_all')
        page = base.Page(limit, marker)
        found, more = attributes.get_all(
            ctx, key=key,
            deployable_id=base.id_param(deployable_id, 'deployable_id',
                                        attributes.Attribute.deployable_id),
            size=page.size, marker=page.marker)
        return page.collection(AttributeCollection, 'attributes', Attribute,
                               'attributes', found, more)

    @expose(Attribute, wtypes.text)
    def get_one(self, uuid: str) -> Attribute:
        ctx = base.authorize('cyborg:attribute:get_one')
        return Attribute.from_dict(
            attributes.get(ctx, base.path_uuid(uuid, 'Attribute')))

    @expose(Attribute, body=base.jsontype, status_code=HTTPStatus.CREATED)
    def post(self, body: Any) -> Attribute:
        ctx = base.authorize('cyborg:attribute:create')
        values = schema.validate_create(body)
        created = pecan.request.conductor_api.attribute_create(ctx, values)
        return Attribute.from_dict(created)

    @expose(None, wtypes.text, status_code=HTTPStatus.NO_CONTENT)
    def delete(self, uuid: str | None = None) -> None:
        ctx = base.authorize('cyborg:attribute:delete')
        if uuid is None:
            raise exception.Invalid(
                reason='Name the attribute: DELETE /attributes/{uuid}.')
        pecan.request.conductor_api.attribute_delete(
            ctx, base.path_uuid(uuid, 'Attribute'))
