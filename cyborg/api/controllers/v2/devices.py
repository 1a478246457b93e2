"""/v2/devices: list and show devices, take them out of scheduling."""
from http import HTTPStatus

import pecan
from pecan import rest
from wsme import types as wtypes

from cyborg.api.controllers import base
from cyborg.api.expose import expose
from cyborg.db.api import devices

# Microversion that added ``status``.
STATUS_VERSION = (2, 3)


class Device(base.Resource):
    """A device as the API shows it; ``status`` from microversion 2.3."""

    uuid = wtypes.text
    type = wtypes.text
    vendor = wtypes.text
    model = wtypes.text
    # JSON documents sent as strings, as the clients expect.
    std_board_info = wtypes.text
    vendor_board_info = wtypes.text
    hostname = wtypes.text
    status = base.Field(wtypes.text, since=STATUS_VERSION)
    links = base.links_field('v2', 'devices')
    created_at = base.timestamp_field()
    updated_at = base.timestamp_field()


class DeviceCollection(wtypes.Base):
    # tempest checks that ``devices`` is the first key.
    devices = [Device]
    next = wtypes.text


def _empty_200() -> None:
    """Answer 200 with an empty body, as clients of enable/disable expect.

    pecan turns an empty 200 into a 204, except when the body is a
    generator; this one yields a single empty chunk.
    """
    pecan.response.app_iter = (chunk for chunk in (b'',))


class DevicesController(rest.RestController):

    # POST /devices/{uuid}/disable and /devices/{uuid}/enable
    _custom_actions = {'disable': ['POST'], 'enable': ['POST']}

    @expose(DeviceCollection, wtypes.text, wtypes.text, wtypes.text,
            wtypes.text, wtypes.text)
    def get_all(self, type: str | None = None, vendor: str | None = None,
                hostname: str | None = None, limit: str | None = None,
                marker: str | None = None) -> DeviceCollection:
        ctx = base.authorize('cyborg:device:get_all')
        page = base.Page(limit, marker)
        found, more = devices.get_all(ctx, type=type, vendor=vendor,
                                      hostname=hostname, size=page.size,
                                      marker=page.marker)
        return page.collection(DeviceCollection, 'devices', Device,
                               'devices', found, more)

    @expose(Device, wtypes.text)
    def get_one(self, uuid: str) -> Device:
        ctx = base.authorize('cyborg:device:get_one')
        return Device.from_dict(
            devices.get(ctx, base.path_uuid(uuid, 'Device')))

    @expose(None, wtypes.text, status_code=HTTPStatus.OK)
    def disable(self, uuid: str) -> None:
        """Maintenance: the device's accelerators are not scheduled."""
        ctx = base.authorize('cyborg:device:disable')
        pecan.request.conductor_api.device_set_status(
            ctx, base.path_uuid(uuid, 'Device'), 'maintaining')
        _empty_200()

    @expose(None, wtypes.text, status_code=HTTPStatus.OK)
    def enable(self, uuid: str) -> None:
        ctx = base.authorize('cyborg:device:enable')
        pecan.request.conductor_api.device_set_status(
            ctx, base.path_uuid(uuid, 'Device'), 'enabled')
        _empty_200()
