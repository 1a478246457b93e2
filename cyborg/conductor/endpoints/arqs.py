"""RPC endpoint of accelerator requests: the API's creates, binds and
deletes, one HTTP request per call or several (1.4, 1.11)."""
import logging
from typing import Any

import oslo_messaging as messaging

from cyborg import context as cyborg_context
from cyborg.common import exception
from cyborg.common import notifications
from cyborg.conductor import binding
from cyborg.conductor import limits as conductor_limits
from cyborg.conductor.endpoints import TARGET
from cyborg.db.api import arq_batches
from cyborg.db.api import arqs

LOG = logging.getLogger(__name__)

Context = cyborg_context.RequestContext


def _describe(error: exception.CyborgException) -> dict[str, Any]:
    """An error of one item of a batch, as ``rpcapi._rebuild`` takes it."""
    return {'type': type(error).__name__, 'message': error.message,
            'kwargs': error.kwargs}


def _answers(items: list[dict[str, Any]],
             results: list[Any]) -> list[dict[str, Any]]:
    """The answers of a batch call: ``{}`` for each item done, its error
    (``_describe``) for each refused alone."""
    answers: list[dict[str, Any]] = []
    for item, result in zip(items, results, strict=True):
        if isinstance(result, exception.CyborgException):
            LOG.debug('Request %s: %s', item.get('request_id'), result)
            answers.append({'error': _describe(result)})
        else:
            answers.append({})
    return answers


class ArqEndpoint:
    """Creates write the requests here; binds and deletes go to the
    binder, which finishes them on hosts and tells Nova."""

    target = TARGET

    def __init__(self, binder: binding.Binder,
                 notifier: notifications.Notifier,
                 limits: conductor_limits.KeystoneLimits | None = None
                 ) -> None:
        self._binder = binder
        self._notifier = notifier
        self._limits = limits

    @messaging.expected_exceptions(exception.CyborgException)
    def arq_create(self, context: Context, profile_name: str,
                   project_id: str | None, all_projects: bool = False,
                   idempotency_key: str | None = None
                   ) -> list[dict[str, Any]]:
        """``all_projects`` (1.12): the caller may use every private
        profile; without it (an API before 1.12), only the public ones
        and those of ``project_id``. ``idempotency_key`` (1.13): see
        ``arqs.create_many``."""
        created = conductor_limits.within(
            self._limits, lambda: [project_id],
            lambda limits: arqs.create(context, profile_name, project_id,
                                       all_projects, idempotency_key,
                                       limits=limits))
        self._announce(context, created)
        return list(created)

    @messaging.expected_exceptions(exception.CyborgException)
    def arq_create_many(self, context: Context,
                        requests: list[dict[str, Any]]
                        ) -> list[dict[str, Any]]:
        """``arq_create`` for several HTTP requests at once (1.4), each
        with its ``all_projects`` (1.12) and its ``idempotency_key`` if
        it has one (1.13).

        One answer per request, in order: ``{"arqs": [...]}``, or
        ``{"error": {"type", "message", "kwargs"}}`` for a request that
        failed alone. A database error fails the call, and so all of them.
        """
        created = conductor_limits.within(
            self._limits, lambda: [r['project_id'] for r in requests],
            lambda limits: arqs.create_many(context, [
                arqs.Create(r['profile_name'], r['project_id'],
                            bool(r.get('all_projects')),
                            r.get('idempotency_key')) for r in requests],
                limits))
        answers: list[dict[str, Any]] = []
        for request, result in zip(requests, created, strict=True):
            if isinstance(result, exception.CyborgException):
                LOG.debug('Request %s: %s', request.get('request_id'),
                          result)
                answers.append({'error': _describe(result)})
            else:
                self._announce(context, result)
                answers.append({'arqs': list(result)})
        return answers

    def _announce(self, context: Context,
                  created: list[dict[str, Any]]) -> None:
        """``arq.create`` for requests just made; none for those of an
        earlier create answered again (``arqs.Replay``)."""
        if not isinstance(created, arqs.Replay):
            self._notifier.arq_create(context, created)

    @messaging.expected_exceptions(exception.CyborgException)
    def arq_apply_patch(self, context: Context,
                        binds: dict[str, dict[str, Any]],
                        unbinds: list[str], live: bool = False) -> None:
        # The caller is answered nothing: the binder's batch stays here.
        self._binder.apply_patch(context, binds, unbinds, live=live)

    @messaging.expected_exceptions(exception.CyborgException)
    def arq_apply_patches(self, context: Context,
                          patches: list[dict[str, Any]]
                          ) -> list[dict[str, Any]]:
        """``arq_apply_patch`` for several HTTP requests at once (1.11):
        each of ``patches`` is ``{"binds", "unbinds", "live",
        "request_id"}``.

        One answer per PATCH, in order: ``{}``, or ``{"error": {"type",
        "message", "kwargs"}}`` for a PATCH refused alone. A database error
        fails the call, and so all of them.
        """
        return _answers(patches, self._binder.apply_patches(context, [
            arq_batches.Patch(p['binds'], p['unbinds'],
                              bool(p.get('live'))) for p in patches]))

    @messaging.expected_exceptions(exception.CyborgException)
    def arq_delete_many(self, context: Context,
                        deletes: list[dict[str, Any]]
                        ) -> list[dict[str, Any]]:
        """``arq_delete`` for several HTTP requests at once (1.11): each
        of ``deletes`` is ``{"uuids", "instance_uuid", "project_id",
        "request_id"}``; answered as ``arq_apply_patches``."""
        return _answers(deletes, self._binder.delete_many(context, [
            arq_batches.Delete(d.get('uuids'), d.get('instance_uuid'),
                               d.get('project_id')) for d in deletes]))

    @messaging.expected_exceptions(exception.CyborgException)
    def arq_delete(self, context: Context, uuids: list[str] | None = None,
                   instance_uuid: str | None = None,
                   project_id: str | None = None) -> None:
        """By uuid (the API checked the caller sees each), or by
        instance: then only ``project_id``'s requests (1.7), every
        project's when it is None."""
        if instance_uuid is not None and project_id is not None:
            found, _ = arqs.get_all(context, project_id, instance_uuid)
            if not found:
                return
            uuids = [arq['uuid'] for arq in found]
        self._binder.delete(context, uuids, instance_uuid)
