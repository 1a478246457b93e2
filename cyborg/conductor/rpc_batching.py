"""The API's writes on accelerator requests, joined into batch RPC calls.

An API process answers many HTTP requests at once: the creates, PATCHes
and DELETEs its threads make at the same moment go to a conductor in one
call each (``coalesce.Coalescer``), which applies them in one transaction
and answers each on its own. Every other call, and these when batching is
off, goes through ``rpcapi.ConductorAPI`` as it is.
"""
from collections.abc import Callable
from typing import Any

from cyborg import context as cyborg_context
from cyborg.common import exception
from cyborg.conductor import coalesce
from cyborg.conductor import rpcapi

Context = cyborg_context.RequestContext
# (context, profile name, project, all_projects, idempotency key)
_Create = tuple[Context, str, str | None, bool, str | None]
_Patch = tuple[Context, dict[str, dict[str, Any]], list[str], bool]
_Delete = tuple[Context, list[str] | None, str | None, str | None]

# Two batches of binds in flight: a bind batch spends most of its time
# waiting on the database's round trips (about 8 statements a bind, one
# after the other), which a second batch, on the other conductor,
# overlaps. 50 clients through one process, two conductors, back to back:
# 180 binds/s and a p99 of 395 ms with one, 259-314 and 305-364 ms with
# two, 238 and 678 ms with four.
BIND_BATCHES_IN_FLIGHT = 2


class BatchedWrites:
    """``arq_create``, ``arq_apply_patch`` and ``arq_delete`` of ``api``,
    with the calls of this process's threads that wait joined.

    ``create_batch`` > 1: up to that many creates leave in one
    ``arq_create_many`` (1.4, or 1.13 when one has an idempotency key);
    ``bind_batch`` > 1: up to that many PATCHes
    in one ``arq_apply_patches`` and DELETEs in one ``arq_delete_many``
    (1.11). At 1, or under an ``[upgrade_levels] conductor`` cap below
    that version, each call goes on its own through ``api``. A call that
    finds nothing waiting leaves at once, alone, as the plain call.
    """

    def __init__(self, api: rpcapi.ConductorAPI, create_batch: int = 1,
                 bind_batch: int = 1) -> None:
        self.api = api
        self._creates: coalesce.Coalescer[
            _Create, list[dict[str, Any]]] | None = None
        self._patches: coalesce.Coalescer[_Patch, None] | None = None
        self._deletes: coalesce.Coalescer[_Delete, None] | None = None
        if create_batch > 1 and api.can_send_version('1.4'):
            self._creates = coalesce.Coalescer(self._send_creates,
                                               create_batch)
        if bind_batch > 1 and api.can_send_version('1.11'):
            self._patches = coalesce.Coalescer(
                self._send_patches, bind_batch,
                in_flight=BIND_BATCHES_IN_FLIGHT)
            self._deletes = coalesce.Coalescer(self._send_deletes,
                                               bind_batch)

    def arq_create(self, context: Context, profile_name: str,
                   project_id: str | None, all_projects: bool = False,
                   idempotency_key: str | None = None
                   ) -> list[dict[str, Any]]:
        """As ``ConductorAPI.arq_create``."""
        if self._creates is None:
            return self.api.arq_create(context, profile_name, project_id,
                                       all_projects, idempotency_key)
        return self._creates.submit((context, profile_name, project_id,
                                     all_projects, idempotency_key))

    def arq_apply_patch(self, context: Context,
                        binds: dict[str, dict[str, Any]],
                        unbinds: list[str], live: bool = False) -> None:
        """As ``ConductorAPI.arq_apply_patch``."""
        if self._patches is None:
            return self.api.arq_apply_patch(context, binds, unbinds, live)
        return self._patches.submit((context, binds, unbinds, live))

    def arq_delete(self, context: Context, uuids: list[str] | None = None,
                   instance_uuid: str | None = None,
                   project_id: str | None = None) -> None:
        """As ``ConductorAPI.arq_delete``."""
        if self._deletes is None:
            return self.api.arq_delete(context, uuids, instance_uuid,
                                       project_id)
        return self._deletes.submit((context, uuids, instance_uuid,
                                     project_id))

    # What the Coalescers send: a batch of one as the plain call (with its
    # caller's context); more in one call made for several callers, with
    # an admin context of its own and each caller's request id in its item
    # for the logs.

    def _send_creates(self, creates: list[_Create]
                      ) -> list[list[dict[str, Any]] | Exception]:
        if len(creates) > 1:
            try:
                return self.api.arq_create_many(
                    cyborg_context.get_admin_context(),
                    [{'profile_name': profile_name, 'project_id': project_id,
                      'all_projects': all_projects,
                      'request_id': context.request_id,
                      # Only a create with a key carries one: a batch
                      # without any goes to conductors before 1.13.
                      **({} if key is None else {'idempotency_key': key})}
                     for context, profile_name, project_id, all_projects,
                     key in creates])
            except rpcapi.OlderConductor:
                pass
        return _each(self.api.arq_create, creates)

    def _send_patches(self, patches: list[_Patch]) -> list[None | Exception]:
        if len(patches) > 1:
            try:
                return self.api.arq_apply_patches(
                    cyborg_context.get_admin_context(),
                    [{'binds': binds, 'unbinds': unbinds, 'live': live,
                      'request_id': context.request_id}
                     for context, binds, unbinds, live in patches])
            except rpcapi.OlderConductor:
                pass
        return _each(self.api.arq_apply_patch, patches)

    def _send_deletes(self, deletes: list[_Delete]) -> list[None | Exception]:
        if len(deletes) > 1:
            try:
                return self.api.arq_delete_many(
                    cyborg_context.get_admin_context(),
                    [{'uuids': uuids, 'instance_uuid': instance_uuid,
                      'project_id': project_id,
                      'request_id': context.request_id}
                     for context, uuids, instance_uuid, project_id
                     in deletes])
            except rpcapi.OlderConductor:
                pass
        return _each(self.api.arq_delete, deletes)


def _each(call: Callable[..., Any], items: list[tuple[Any, ...]]) -> list[Any]:
    """``call(*item)`` for each item, in order: its result, or the
    CyborgException that refused it (any other error fails them all)."""
    results: list[Any] = []
    for item in items:
        try:
            results.append(call(*item))
        except exception.CyborgException as exc:
            results.append(exc)
    return results
