"""/v2/device_profiles: create, list, show and delete device profiles;
from 2.10 make them private and manage who may use them."""
from http import HTTPStatus
from typing import Any

import pecan
from pecan import rest
from wsme import types as wtypes

from cyborg import context as cyborg_context
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
    # False: only the projects of its access list may see and use it (and
    # whoever sees every project).
    is_public = base.Field(bool, since=Microversion.PRIVATE_PROFILES)
    created_at = base.timestamp_field()
    updated_at = base.timestamp_field()
    links = base.links_field('v2', 'device_profiles')


class DeviceProfileCollection(wtypes.Base):
    device_profiles = [DeviceProfile]
    next = wtypes.text


class DeviceProfileEnvelope(wtypes.Base):
    """``GET /device_profiles/{id}`` wraps the profile, as clients expect."""

    device_profile = DeviceProfile


class ProjectCollection(wtypes.Base):
    """``GET /device_profiles/{uuid_or_name}/projects``."""

    projects = [wtypes.text]


def sees_every_profile() -> bool:
    """Whether the caller may see and use every private device profile
    (``cyborg:device_profile:all_projects``)."""
    return base.allowed('cyborg:device_profile:all_projects')


def profile_scope(ctx: cyborg_context.RequestContext) -> str | None:
    """None when the caller may see and use every device profile, else
    the project whose private profiles it may (an empty one for a caller
    of no project: the public profiles alone)."""
    if sees_every_profile():
        return None
    return ctx.project_id or ''


def _named(uuid_or_name: str) -> dict[str, str | None]:
    """A profile of a path, as the database layer and the conductor name
    it: ``uuid`` (canonical) or ``name``."""
    uuid = schemas.canonical_uuid(uuid_or_name)
    if uuid is not None:
        return {'uuid': uuid, 'name': None}
    return {'uuid': None, 'name': uuid_or_name}


class ProjectsController(rest.RestController):
    """``/device_profiles/{uuid_or_name}/projects[/{project_id}]`` (2.10):
    the projects that may use a private profile."""

    def __init__(self, uuid_or_name: str) -> None:
        self.profile = _named(uuid_or_name)

    @expose(ProjectCollection)
    def get_all(self) -> ProjectCollection:
        ctx = base.authorize('cyborg:device_profile:project_list')
        return ProjectCollection(projects=device_profiles.get_projects(
            ctx, **self.profile))

    @expose(None, wtypes.text, status_code=HTTPStatus.NO_CONTENT)
    def put(self, project_id: str) -> None:
        """Add the project; nothing changes when it is there already."""
        ctx = base.authorize('cyborg:device_profile:project_add')
        pecan.request.conductor_api.device_profile_add_project(
            ctx, schema.check_project_id(project_id), **self.profile)

    @expose(None, wtypes.text, status_code=HTTPStatus.NO_CONTENT)
    def delete(self, project_id: str) -> None:
        """Take the project out; 404 when it is not in the list."""
        ctx = base.authorize('cyborg:device_profile:project_remove')
        pecan.request.conductor_api.device_profile_remove_project(
            ctx, schema.check_project_id(project_id), **self.profile)


class DeviceProfilesController(rest.RestController):

    @pecan.expose()
    def _lookup(self, uuid_or_name: str, *remainder: str
                ) -> tuple[ProjectsController, tuple[str, ...]] | None:
        """``/device_profiles/{uuid_or_name}/projects...``: root.ROUTES
        lets it through from 2.10, and no other path below a profile."""
        if not remainder or remainder[0] != 'projects':
            return None
        return ProjectsController(uuid_or_name), remainder[1:]

    @expose(DeviceProfile, body=base.jsontype,
            status_code=HTTPStatus.CREATED)
    def post(self, body: Any) -> DeviceProfile:
        ctx = base.authorize('cyborg:device_profile:create')
        values = schema.validate_create(
            body, base.strict(), base.conf().api,
            private=base.version_at_least(Microversion.PRIVATE_PROFILES))
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
                                              page.marker, profile_scope(ctx))
        return page.collection(DeviceProfileCollection, 'device_profiles',
                               DeviceProfile, 'device_profiles', found, more)

    @expose(DeviceProfileEnvelope, wtypes.text)
    def get_one(self, uuid_or_name: str) -> DeviceProfileEnvelope:
        ctx = base.authorize('cyborg:device_profile:get_one')
        named = _named(uuid_or_name)
        if named['uuid'] is None:
            base.require_version(Microversion.PROFILE_BY_NAME,
                                 'Showing a device profile by name')
        found = device_profiles.get(ctx, project_id=profile_scope(ctx),
                                    **named)
        return DeviceProfileEnvelope(
            device_profile=DeviceProfile.from_dict(found))

    @expose(DeviceProfile, wtypes.text, body=base.jsontype,
            status_code=HTTPStatus.OK)
    def patch(self, uuid_or_name: str, body: Any = None) -> DeviceProfile:
        """Make the profile public or private (2.10): a JSON patch of
        ``/is_public``. Its access list stays as it is."""
        base.require_version(Microversion.PRIVATE_PROFILES,
                             'Changing a device profile (PATCH)')
        ctx = base.authorize('cyborg:device_profile:update')
        is_public = schema.validate_patch(body)
        return DeviceProfile.from_dict(
            pecan.request.conductor_api.device_profile_set_public(
                ctx, is_public, **_named(uuid_or_name)))

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
