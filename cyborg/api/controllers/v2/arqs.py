"""/v2/accelerator_requests: create, list, show, bind/unbind, delete."""
from http import HTTPStatus
from typing import Any

import pecan
from oslo_config import cfg
from oslo_utils import uuidutils
from pecan import rest
from wsme import types as wtypes

from cyborg import context as cyborg_context
from cyborg.api import schemas
from cyborg.api.controllers import base
from cyborg.api.controllers.v2 import device_profiles
from cyborg.api.expose import expose
from cyborg.api.schemas import arqs as schema
from cyborg.api.versions import Microversion
from cyborg.common import exception
from cyborg.db.api import arqs as arq_db

SERVICE_TOKEN_MESSAGE = ('This operation requires a service token. Use the '
                         'Compute API to manage instance accelerators.')


class ARQ(base.Resource):
    """An accelerator request as the API shows it."""

    uuid = wtypes.text
    state = wtypes.text
    device_profile_name = wtypes.text
    device_profile_group_id = int
    hostname = wtypes.text
    device_rp_uuid = wtypes.text
    instance_uuid = wtypes.text
    project_id = wtypes.text
    attach_handle_type = wtypes.text
    attach_handle_uuid = wtypes.text
    attach_handle_info = {wtypes.text: wtypes.text}
    links = base.links_field('v2', 'accelerator_requests')
    created_at = base.timestamp_field()
    updated_at = base.timestamp_field()


class ARQCollection(wtypes.Base):
    arqs = [ARQ]
    next = wtypes.text


def _project_scope(ctx: cyborg_context.RequestContext) -> str | None:
    """None when the caller sees every project, else its own project."""
    if base.allowed('cyborg:arq:all_projects'):
        return None
    return ctx.project_id


def _service_token_roles() -> set[str]:
    try:
        return set(base.conf().keystone_authtoken.service_token_roles)
    except (cfg.NoSuchOptError, cfg.NoSuchGroupError):
        # keystonemiddleware registers its options only when it is used.
        return {'service'}


def _has_service_token(ctx: cyborg_context.RequestContext) -> bool:
    return bool(set(ctx.service_roles or []) & _service_token_roles())


def _instance_scope(ctx: cyborg_context.RequestContext) -> str | None:
    """The project bounding a read or delete of one instance's requests.

    Nova acts for its instances: after an administrator's evacuation or
    unshelve of a member's server, the server holds requests Nova made
    under the administrator's project, which the member's later reboot or
    delete must reach. A valid service token (keystonemiddleware sets
    ``X-Service-Roles`` only for one) reaches every project's; the user's
    token alone stays within its project.
    """
    if _has_service_token(ctx):
        return None
    return _project_scope(ctx)


def _require_service_token(ctx: cyborg_context.RequestContext,
                           message: str = SERVICE_TOKEN_MESSAGE) -> None:
    if (base.conf().api.require_service_token
            and not _has_service_token(ctx)):
        raise exception.Forbidden(message)


class ARQsController(rest.RestController):

    @expose(ARQCollection, body=base.jsontype,
            status_code=HTTPStatus.CREATED)
    def post(self, body: Any) -> ARQCollection:
        ctx = base.authorize('cyborg:arq:create')
        name = schema.validate_create(body, base.strict())
        # Before 2.11 the header is ignored, as it always was.
        key = schema.idempotency_key(pecan.request.headers.get(
            schema.IDEMPOTENCY_KEY)) if base.version_at_least(
                Microversion.IDEMPOTENT_CREATE) else None
        created = pecan.request.arq_writes.arq_create(
            ctx, name, ctx.project_id, device_profiles.sees_every_profile(),
            idempotency_key=key)
        return ARQCollection(arqs=[ARQ.from_dict(a) for a in created])

    @expose(ARQCollection, wtypes.text, wtypes.text, wtypes.text,
            wtypes.text)
    def get_all(self, instance: str | None = None,
                bind_state: str | None = None, limit: str | None = None,
                marker: str | None = None) -> ARQCollection:
        ctx = base.authorize('cyborg:arq:get_all')
        page = base.Page(limit, marker)
        if bind_state is not None and bind_state != 'resolved':
            raise base.legacy_error(
                f'bind_state must be "resolved", not {bind_state!r}.')
        if instance is not None:
            instance = schemas.check_uuid(instance, 'instance')
            project = _instance_scope(ctx)
        else:
            project = _project_scope(ctx)
        resolved = bind_state == 'resolved'
        if (resolved and instance is not None
                and arq_db.count_unresolved(ctx, instance, project)):
            raise exception.Locked(
                reason=f'Accelerator requests of instance {instance} are '
                       'still being bound.')
        found, more = arq_db.get_all(
            ctx, project, instance,
            resolved_only=resolved and instance is None,
            size=page.size, marker=page.marker)
        return page.collection(ARQCollection, 'arqs', ARQ,
                               'accelerator_requests', found, more)

    @expose(ARQ, wtypes.text)
    def get_one(self, uuid: str) -> ARQ:
        ctx = base.authorize('cyborg:arq:get_one')
        if not uuidutils.is_uuid_like(uuid):
            raise exception.ARQNotFound(uuids=uuid)
        return ARQ.from_dict(arq_db.get(ctx, uuid, _project_scope(ctx)))

    @expose(None, wtypes.text, body=base.jsontype,
            status_code=HTTPStatus.ACCEPTED)
    def patch(self, uuid: str | None = None, body: Any = None) -> None:
        ctx = base.authorize('cyborg:arq:update')
        binds, unbinds = schema.validate_patch(body, uuid)
        if any('project_id' in b for b in binds.values()):
            base.require_version(Microversion.PROJECT_ID,
                                 'The /project_id operation')
            base.authorize('cyborg:arq:set_project')
        _require_service_token(ctx)
        project = _project_scope(ctx)
        if project is not None:
            # Every request must be the caller's: 404 otherwise. A caller
            # who sees every project (Nova) gets the same 404 from the
            # conductor, which looks for them all in its transaction: the
            # look-up here was two thirds of the API's time per bind
            # (py-spy, 50 concurrent binds).
            arq_db.get_by_uuids(ctx, list(binds) + unbinds, project)
        pecan.request.arq_writes.arq_apply_patch(
            ctx, binds, unbinds,
            live=base.version_at_least(Microversion.LIVE_ATTACH))

    @expose(None, wtypes.text, wtypes.text, wtypes.text,
            status_code=HTTPStatus.NO_CONTENT)
    def delete(self, uuid: str | None = None, arqs: str | None = None,
               instance: str | None = None) -> None:
        ctx = base.authorize('cyborg:arq:delete')
        uuids = base.split_list(arqs) if arqs is not None else []
        if uuid is not None:
            uuids.append(uuid)
        if bool(uuids) == (instance is not None):
            raise base.legacy_error(
                'Name the accelerator requests to delete with ?arqs=<uuid>,'
                '<uuid> (or in the path), or ?instance=<uuid>; not both.')
        api = pecan.request.arq_writes
        if instance is not None:
            instance = schemas.check_uuid(instance, 'instance')
            _require_service_token(ctx)
            project = _instance_scope(ctx)
            mine = None
            if project is not None:
                # Only the caller's requests go; none is fine, as for an
                # instance nobody knows.
                found = arq_db.get_all(ctx, project, instance)[0]
                mine = [a['uuid'] for a in found]
                if not mine:
                    return
            api.arq_delete(ctx, uuids=mine, instance_uuid=instance,
                           project_id=project)
            return
        bad = [u for u in uuids if not uuidutils.is_uuid_like(u)]
        if bad:
            raise exception.ARQNotFound(uuids=', '.join(bad))
        found = arq_db.get_by_uuids(ctx, uuids, _project_scope(ctx))
        for arq in found:
            if arq['instance_uuid']:
                _require_service_token(
                    ctx, f'ARQ {arq["uuid"]} is bound to instance '
                         f'{arq["instance_uuid"]}. Use the Compute API to '
                         'manage instance accelerators.')
        api.arq_delete(ctx, uuids=uuids)

