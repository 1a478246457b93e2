"""/v2/devices: list and show devices, take them out of scheduling; from
2.6 their health and the impact of taking one out."""
from http import HTTPStatus
from typing import Any

import pecan
from pecan import rest
from wsme import types as wtypes

from cyborg.api.controllers import base
from cyborg.api.expose import expose
from cyborg.api.schemas import devices as schema
from cyborg.api.versions import Microversion
from cyborg.common import device_layout
from cyborg.common import exception
from cyborg.db.api import devices


class Device(base.Resource):
    """A device as the API shows it; ``status`` from microversion 2.3,
    its health from 2.6."""

    uuid = wtypes.text
    type = wtypes.text
    vendor = wtypes.text
    model = wtypes.text
    # JSON documents sent as strings, as the clients expect.
    std_board_info = wtypes.text
    vendor_board_info = wtypes.text
    hostname = wtypes.text
    status = base.Field(wtypes.text, since=Microversion.DEVICE_STATUS)
    # healthy, degraded, unhealthy or unknown; why; who set it (the
    # agent, or an operator until cleared); when it last changed.
    health = base.Field(wtypes.text, since=Microversion.HEALTH)
    health_reason = base.Field(wtypes.text, since=Microversion.HEALTH)
    health_source = base.Field(wtypes.text, since=Microversion.HEALTH)
    health_changed_at = base.Field(wtypes.text, since=Microversion.HEALTH,
                                   convert=base.timestamp)
    # Why a device is in ``error`` (its preparation failed); the desired
    # layout, how far its agent got applying it, and why it failed.
    status_reason = base.Field(wtypes.text, since=Microversion.LIFECYCLE)
    layout = base.Field(base.jsontype, since=Microversion.LIFECYCLE)
    layout_state = base.Field(wtypes.text, since=Microversion.LIFECYCLE)
    layout_reason = base.Field(wtypes.text, since=Microversion.LIFECYCLE)
    layout_changed_at = base.Field(wtypes.text, since=Microversion.LIFECYCLE,
                                   convert=base.timestamp)
    links = base.links_field('v2', 'devices')
    created_at = base.timestamp_field()
    updated_at = base.timestamp_field()


class Layout(base.Resource):
    """A device's desired layout, its state, and what its agent offers
    (``AcceleratorDriver.layout_options``)."""

    device_uuid = wtypes.text
    layout = base.jsontype
    layout_state = wtypes.text
    layout_reason = wtypes.text
    options = base.jsontype


class DeviceCollection(wtypes.Base):
    # tempest checks that ``devices`` is the first key.
    devices = [Device]
    next = wtypes.text


class ImpactARQ(base.Resource):
    """An accelerator request that holds, or is binding, the device."""

    uuid = wtypes.text
    state = wtypes.text
    instance_uuid = wtypes.text
    project_id = wtypes.text
    device_profile_name = wtypes.text
    deployable_uuid = wtypes.text


def _impact_arqs(arqs: list[dict[str, Any]]) -> list[ImpactARQ]:
    return [ImpactARQ.from_dict(arq) for arq in arqs]


class Impact(base.Resource):
    """What taking the device out (disable, or set unhealthy) would
    touch: the requests on it, their instances and projects."""

    device_uuid = wtypes.text
    arqs = base.Field([ImpactARQ], convert=_impact_arqs)
    instances = [wtypes.text]
    projects = [wtypes.text]


def _empty_200() -> None:
    """Answer 200 with an empty body, as clients of enable/disable expect.

    pecan turns an empty 200 into a 204, except when the body is a
    generator; this one yields a single empty chunk.
    """
    pecan.response.app_iter = (chunk for chunk in (b'',))


class DevicesController(rest.RestController):

    # POST /devices/{uuid}/disable and /devices/{uuid}/enable; GET
    # /devices/{uuid}/impact (2.6). PUT and DELETE of /devices/{uuid}/health
    # (2.6) reach ``put`` and ``delete``: pecan looks a custom action of
    # those methods up after the collection, not after the uuid.
    _custom_actions = {'disable': ['POST'], 'enable': ['POST'],
                       'impact': ['GET'], 'layout': ['GET']}

    @expose(DeviceCollection, wtypes.text, wtypes.text, wtypes.text,
            wtypes.text, wtypes.text, wtypes.text)
    def get_all(self, type: str | None = None, vendor: str | None = None,
                hostname: str | None = None, health: str | None = None,
                limit: str | None = None,
                marker: str | None = None) -> DeviceCollection:
        ctx = base.authorize('cyborg:device:get_all')
        if health is not None:
            base.require_version(Microversion.HEALTH,
                                 feature='The health filter')
        health = schema.health_filter(health)
        page = base.Page(limit, marker)
        found, more = devices.get_all(ctx, type=type, vendor=vendor,
                                      hostname=hostname, health=health,
                                      size=page.size, marker=page.marker)
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
        """Prepare the device through its agent, then schedule it.

        A failed preparation leaves the device in ``error`` with its
        reason: a 409 saying why from 2.8, the 200 of before below.
        """
        ctx = base.authorize('cyborg:device:enable')
        try:
            pecan.request.conductor_api.device_enable(
                ctx, base.path_uuid(uuid, 'Device'))
        except exception.PrepareFailed:
            if base.version_at_least(Microversion.LIFECYCLE):
                raise
        _empty_200()

    @expose(Impact, wtypes.text)
    def impact(self, uuid: str) -> Impact:
        """The dry run before taking the device out: a read, nothing
        changes."""
        ctx = base.authorize('cyborg:device:impact')
        return Impact.from_dict(
            devices.impact(ctx, base.path_uuid(uuid, 'Device')))

    @expose(Layout, wtypes.text)
    def layout(self, uuid: str) -> Layout:
        """``GET /devices/{uuid}/layout`` (2.8): asks the agent."""
        ctx = base.authorize('cyborg:device:get_layout')
        return Layout.from_dict(
            pecan.request.conductor_api.device_layout_options(
                ctx, base.path_uuid(uuid, 'Device')))

    @expose(Device, wtypes.text, wtypes.text, body=base.jsontype,
            status_code=HTTPStatus.OK)
    def put(self, uuid: str, action: str | None = None,
            body: Any = None) -> Device:
        """``PUT /devices/{uuid}/health``: the operator's health, which
        stands over the agent's readings until cleared. ``PUT
        /devices/{uuid}/layout`` (2.8): the desired layout, applied by
        the agent before the answer."""
        if action == 'layout':
            ctx = base.authorize('cyborg:device:set_layout')
            uuid = base.path_uuid(uuid, 'Device')
            layout = device_layout.check_shape(body)
            return Device.from_dict(
                pecan.request.conductor_api.device_set_layout(
                    ctx, uuid, layout))
        ctx = base.authorize('cyborg:device:set_health')
        uuid = _health_path(uuid, action)
        state, reason = schema.validate_health(body)
        return Device.from_dict(pecan.request.conductor_api.device_set_health(
            ctx, uuid, state, reason))

    @expose(Device, wtypes.text, wtypes.text, status_code=HTTPStatus.OK)
    def delete(self, uuid: str, action: str | None = None) -> Device:
        """``DELETE /devices/{uuid}/health``: clear the operator's health;
        the agent's last reading counts again. ``DELETE
        /devices/{uuid}/layout`` (2.8): forget the desired layout; the
        device stays as it is."""
        if action == 'layout':
            ctx = base.authorize('cyborg:device:set_layout')
            return Device.from_dict(
                pecan.request.conductor_api.device_set_layout(
                    ctx, base.path_uuid(uuid, 'Device'), None))
        ctx = base.authorize('cyborg:device:set_health')
        uuid = _health_path(uuid, action)
        return Device.from_dict(pecan.request.conductor_api.device_set_health(
            ctx, uuid, None, None))


def _health_path(uuid: str, action: str | None) -> str:
    """The device uuid of /devices/{uuid}/health, the one path PUT and
    DELETE serve here (middleware.routes lets no other through)."""
    if action != 'health':
        raise exception.NotFound('The only PUT and DELETE of a device are '
                                 'PUT and DELETE /devices/{uuid}/health '
                                 'and /devices/{uuid}/layout.')
    return base.path_uuid(uuid, 'Device')
