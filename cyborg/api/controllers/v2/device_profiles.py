"""/v2/device_profiles: create, list, show and delete device profiles."""
from http import HTTPStatus
from typing import Any

import pecan
from pecan import rest
from wsme import types as wtypes

from cyborg.api import schemas
from cyborg.api.controllers import base
from cyborg.api.expose import expose
from cyborg.api.schemas import device_profiles as schema
from cyborg.api.versions import Microversion
from cyborg.common import exception
from cyborg.db.api import device_profiles


class DeviceProfile(base.Resource):
    """A device profile as the API shows it."""

    uuid = wtypes.text
    name = wtypes.text
    description = wtypes.text
    groups = base.LIST_OF_STRING_DICTS
    created_at = base.timestamp_field()
    updated_at = base.timestamp_field()
    links = base.links_field('v2', 'device_profiles')


class DeviceProfileCollection(wtypes.Base):
    device_profiles = [DeviceProfile]
    next = wtypes.text


class DeviceProfileEnvelope(wtypes.Base):
    """``GET /device_profiles/{id}`` wraps the profile, as clients expect."""

    device_profile = DeviceProfile


class DeviceProfilesController(rest.RestController):

    @expose(DeviceProfile, body=base.jsontype,
            status_code=HTTPStatus.CREATED)
    def post(self, body: Any) -> DeviceProfile:
        ctx = base.authorize('cyborg:device_profile:create')
        values = schema.validate_create(body, base.strict(), base.conf().api)
        try:
            created = pecan.request.conductor_api.device_profile_create(
                ctx, values)
        except exception.DuplicateDeviceProfileUUID as exc:
            # Clients of 2.0-2.3 expect a server error for this one.
            if not base.strict():
                # Not str(exc): over RPC it ends with the conductor's
                # traceback.
                raise exception.LegacyServerError(
                    reason=exc.message) from None
            raise
        return DeviceProfile.from_dict(created)

    @expose(DeviceProfileCollection, wtypes.text, wtypes.text,
            wtypes.text)
    def get_all(self, name: str | None = None, limit: str | None = None,
                marker: str | None = None) -> DeviceProfileCollection:
        ctx = base.authorize('cyborg:device_profile:get_all')
        page = base.Page(limit, marker)
        names = base.split_list(name, 'name') if name is not None else None
        if name is not None and not names:
            return DeviceProfileCollection(device_profiles=[])
        found, more = device_profiles.get_all(ctx, names, page.size,
                                              page.marker)
        return page.collection(DeviceProfileCollection, 'device_profiles',
                               DeviceProfile, 'device_profiles', found, more)

    @expose(DeviceProfileEnvelope, wtypes.text)
    def get_one(self, uuid_or_name: str) -> DeviceProfileEnvelope:
        ctx = base.authorize('cyborg:device_profile:get_one')
        uuid = schemas.canonical_uuid(uuid_or_name)
        if uuid is not None:
            found = device_profiles.get(ctx, uuid=uuid)
        else:
            base.require_version(Microversion.PROFILE_BY_NAME,
                                 'Showing a device profile by name')
            found = device_profiles.get(ctx, name=uuid_or_name)
        return DeviceProfileEnvelope(
            device_profile=DeviceProfile.from_dict(found))

    @expose(None, wtypes.text, wtypes.text,
            status_code=HTTPStatus.NO_CONTENT)
    def delete(self, uuid_or_name: str | None = None,
               value: str | None = None) -> None:
        ctx = base.authorize('cyborg:device_profile:delete')
        items = base.split_list(value, 'value') if value is not None else []
        if uuid_or_name is not None:
            items.append(uuid_or_name)
        if not items:
            raise exception.Invalid(
                reason='Name the device profiles to delete: '
                       'DELETE /device_profiles/{uuid or name} or '
                       'DELETE /device_profiles?value=name1,name2.')
        canonical = [(item, schemas.canonical_uuid(item)) for item in items]
        uuids = [uuid for _, uuid in canonical if uuid is not None]
        names = [item for item, uuid in canonical if uuid is None]
        pecan.request.conductor_api.device_profile_delete(ctx, uuids, names)
