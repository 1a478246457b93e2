"""/v2/attach_handles (microversion 2.8): what instances get attached,
with their cleaning after use; retry or release one held in maintenance."""
from http import HTTPStatus

import pecan
from pecan import rest
from wsme import types as wtypes

from cyborg.api import schemas
from cyborg.api.controllers import base
from cyborg.api.expose import expose
from cyborg.common import exception
from cyborg.common.device_report import CLEAN_STATES
from cyborg.db.api import cleaning

# What ``clean_state`` may filter by: a state, or ``none`` for handles
# not being cleaned.
CLEAN_FILTERS = (*CLEAN_STATES, 'none')


class AttachHandle(base.Resource):
    """One attach handle: a PCI function or an mdev of a deployable."""

    uuid = wtypes.text
    attach_type = wtypes.text
    attach_info = wtypes.DictType(wtypes.text, wtypes.text)
    in_use = bool
    # 'cleaning' (after use; reserved in placement until it succeeds),
    # 'maintenance' (the clean failed; reserved until an operator retries
    # or releases it) or null; why; since when (the current attempt).
    clean_state = wtypes.text
    clean_reason = wtypes.text
    clean_since = base.timestamp_field()
    deployable_uuid = wtypes.text
    device_uuid = wtypes.text
    hostname = wtypes.text


class AttachHandleCollection(wtypes.Base):
    attach_handles = [AttachHandle]
    next = wtypes.text


class AttachHandlesController(rest.RestController):

    # POST /attach_handles/{uuid}/clean and /attach_handles/{uuid}/release.
    _custom_actions = {'clean': ['POST'], 'release': ['POST']}

    @expose(AttachHandleCollection, wtypes.text, wtypes.text, wtypes.text,
            wtypes.text)
    def get_all(self, device_uuid: str | None = None,
                clean_state: str | None = None, limit: str | None = None,
                marker: str | None = None) -> AttachHandleCollection:
        ctx = base.authorize('cyborg:attach_handle:get_all')
        if device_uuid is not None:
            device_uuid = schemas.check_uuid(device_uuid, 'device_uuid')
        if clean_state is not None and clean_state not in CLEAN_FILTERS:
            raise exception.Invalid(
                reason=f'clean_state must be one of '
                       f'{", ".join(CLEAN_FILTERS)}, not '
                       f'{schemas.shown(clean_state)}.')
        page = base.Page(limit, marker)
        found, more = cleaning.get_all(ctx, device_uuid=device_uuid,
                                       clean_state=clean_state,
                                       size=page.size, marker=page.marker)
        return page.collection(AttachHandleCollection, 'attach_handles',
                               AttachHandle, 'attach_handles', found, more)

    @expose(AttachHandle, wtypes.text, status_code=HTTPStatus.ACCEPTED)
    def clean(self, uuid: str) -> AttachHandle:
        """Clean again a handle in maintenance: 202, the handle now
        ``cleaning``; the clean runs on its host (409 in any other
        state)."""
        ctx = base.authorize('cyborg:attach_handle:clean')
        return AttachHandle.from_dict(
            pecan.request.conductor_api.attach_handle_clean(
                ctx, base.path_uuid(uuid, 'Attach handle')))

    @expose(AttachHandle, wtypes.text, status_code=HTTPStatus.OK)
    def release(self, uuid: str) -> AttachHandle:
        """Give a handle in maintenance back uncleaned: free again (409
        in any other state)."""
        ctx = base.authorize('cyborg:attach_handle:release')
        return AttachHandle.from_dict(
            pecan.request.conductor_api.attach_handle_release(
                ctx, base.path_uuid(uuid, 'Attach handle')))
