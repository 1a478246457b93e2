"""/v2/deployables: list and show deployables; the FPGA program PATCH."""
from typing import Any

import pecan
from pecan import rest
from wsme import types as wtypes

from cyborg.api import schemas
from cyborg.api.controllers import base
from cyborg.api.expose import expose
from cyborg.api.schemas import deployables as schema
from cyborg.common import exception
from cyborg.db.api import deployables


class Deployable(base.Resource):
    """A deployable as the API shows it."""

    uuid = wtypes.text
    parent_id = int
    root_id = int
    name = wtypes.text
    num_accelerators = int
    # The device's integer id, as clients know it.
    device_id = int
    # A JSON string of single-key objects, e.g. '[{"rc": "FPGA"}]'.
    attributes_list = wtypes.text
    rp_uuid = wtypes.text
    driver_name = wtypes.text
    bitstream_id = wtypes.text
    links = base.links_field('v2', 'deployables', bookmark=True)
    created_at = base.timestamp_field()
    updated_at = base.timestamp_field()


class DeployableCollection(wtypes.Base):
    # tempest checks that ``deployables`` is the first key.
    deployables = [Deployable]
    next = wtypes.text


class DeployablesController(rest.RestController):

    @expose(DeployableCollection, wtypes.text, wtypes.text, wtypes.text,
            wtypes.text, wtypes.text)
    def get_all(self, name: str | None = None, device_id: str | None = None,
                rp_uuid: str | None = None, limit: str | None = None,
                marker: str | None = None) -> DeployableCollection:
        ctx = base.authorize('cyborg:deployable:get_all')
        page = base.Page(limit, marker)
        found, more = deployables.get_all(
            ctx, name=name, rp_uuid=rp_uuid,
            device_id=base.id_param(device_id, 'device_id',
                                    deployables.Deployable.device_id),
            size=page.size, marker=page.marker)
        return page.collection(DeployableCollection, 'deployables',
                               Deployable, 'deployables', found, more)

    @expose(Deployable, wtypes.text)
    def get_one(self, uuid: str) -> Deployable:
        ctx = base.authorize('cyborg:deployable:get_one')
        return Deployable.from_dict(
            deployables.get(ctx, base.path_uuid(uuid, 'Deployable')))

    @expose(Deployable, wtypes.text, wtypes.text, wtypes.text,
            body=base.jsontype)
    def patch(self, uuid: str, action: str | None = None,
              again: str | None = None, body: Any = None) -> Deployable:
        """``PATCH /deployables/{uuid}/program``: program an FPGA.

        openstacksdk sends ``/deployables/{uuid}/program/{uuid}``, the
        uuid twice; that path is accepted too.
        """
        ctx = base.authorize('cyborg:deployable:program')
        if action != 'program' or (
                again is not None
                and schemas.canonical_uuid(again)
                != schemas.canonical_uuid(uuid)):
            raise exception.NotFound(
                'The only PATCH of a deployable is '
                'PATCH /deployables/{uuid}/program.')
        uuid = base.path_uuid(uuid, 'Deployable')
        image_uuid = schema.validate_program(body)
        deployables.get(ctx, uuid)
        pecan.request.conductor_api.deployable_program(ctx, uuid,
                                                       image_uuid)
        return Deployable.from_dict(deployables.get(ctx, uuid))
