"""/v1/accelerators: the deployables, read as the v1 API showed them.

A read-only view for tools written against v1: each deployable is an
accelerator, its attributes gathered into ``acc_specs``. The v2 API
(``/v2/deployables``, ``/v2/devices``) is the one to use.
"""
from oslo_utils import uuidutils
from pecan import rest
from wsme import types as wtypes

from cyborg.api.controllers import base
from cyborg.api.expose import expose
from cyborg.common import exception
from cyborg.db.api import accelerators


class Accelerator(base.Resource):
    """A deployable with its device's type, vendor and host."""

    uuid = wtypes.text
    name = wtypes.text
    device_uuid = wtypes.text
    device_type = wtypes.text
    vendor = wtypes.text
    host = wtypes.text
    hostname = wtypes.text
    num_accelerators = int
    # The deployable's attributes, e.g. {"rc": "FPGA", "trait0": ...}.
    acc_specs = wtypes.DictType(wtypes.text, wtypes.text)
    links = base.links_field('v1', 'accelerators')
    created_at = base.timestamp_field()
    updated_at = base.timestamp_field()


class AcceleratorCollection(wtypes.Base):
    accelerators = [Accelerator]


class AcceleratorsController(rest.RestController):
    """Reads only, under the deployable read policies."""

    @expose(AcceleratorCollection)
    def get_all(self) -> AcceleratorCollection:
        ctx = base.authorize('cyborg:deployable:get_all')
        return AcceleratorCollection(accelerators=[
            Accelerator.from_dict(a) for a in accelerators.get_all(ctx)])

    @expose(Accelerator, wtypes.text)
    def get_one(self, uuid: str) -> Accelerator:
        ctx = base.authorize('cyborg:deployable:get_one')
        if not uuidutils.is_uuid_like(uuid):
            raise exception.ResourceNotFound(resource='Accelerator', id=uuid)
        return Accelerator.from_dict(accelerators.get(ctx, uuid))
