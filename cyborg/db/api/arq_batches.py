"""Several HTTP requests' binds, unbinds or deletes in one transaction.

A conductor takes the PATCHes (or DELETEs) that an API process's threads
sent at the same moment in one RPC call (``[api] bind_batch_size``) and
applies them here together, each as ``arq_bindings`` applies one alone,
answering each exactly as if it had come alone.
"""
import logging
import typing
from collections.abc import Callable
from typing import Any

import sqlalchemy as sa

from cyborg import context as cyborg_context
from cyborg.common import exception
from cyborg.db.api import arq_bindings
from cyborg.db.api import retry_on_deadlock
from cyborg.db.api import usage
from cyborg.db.api import writer

LOG = logging.getLogger(__name__)


class Patch(typing.NamedTuple):
    """One PATCH of a batch: what ``apply_patch`` takes."""

    binds: dict[str, dict[str, Any]]
    unbinds: list[str]
    live: bool = False


class Delete(typing.NamedTuple):
    """One DELETE of a batch: what ``delete`` takes, and with an instance
    a project, whose requests of the instance alone go (None: every
    project's)."""

    uuids: list[str] | None = None
    instance_uuid: str | None = None
    project_id: str | None = None


Item = typing.TypeVar('Item')
Result = arq_bindings.BindBatch | exception.CyborgException


# What applies one item in the caller's transaction, within the limits.
One = Callable[
    [sa.orm.Session, Item, usage.Limits | None], arq_bindings.BindBatch]


def _batched(context: cyborg_context.RequestContext, items: list[Item],
             one: One[Item], limits: usage.Limits | None = None
             ) -> list[Result]:
    """``one`` for each of several HTTP requests' items; one result each,
    in order: what it did, or the CyborgException that refused it alone.

    All of them go in one transaction, as if applied one after the other.
    When one is refused, that transaction is rolled back and each is
    applied again in a transaction of its own, so that the others are
    answered exactly as if they had come alone: a refusal is rare (Nova
    sends what it created), so the usual batch pays one commit.

    An item meeting a project whose ``limits`` were not read rolls its
    transaction back; they are read, between transactions, and the
    transaction runs again: the items committed before it stay as they
    are (``usage.reading``).
    """
    known = [limits]

    def apply(todo: list[Item]) -> list[arq_bindings.BindBatch]:
        return usage.reading(known, lambda read: _together(context, todo,
                                                           one, read))

    if len(items) > 1:
        try:
            return list(apply(items))
        except exception.CyborgException as exc:
            LOG.debug('An item of a batch of %d was refused (%s); applying '
                      'each on its own.', len(items), exc)
    results: list[Result] = []
    for item in items:
        try:
            results.append(apply([item])[0])
        except exception.CyborgException as exc:
            results.append(exc)
    return results


@retry_on_deadlock
@writer
def _together(context: cyborg_context.RequestContext, items: list[Item],
              one: One[Item], limits: usage.Limits | None
              ) -> list[arq_bindings.BindBatch]:
    return [one(context.session, item, limits) for item in items]


def apply_patches(context: cyborg_context.RequestContext,
                  patches: list[Patch],
                  find_bitstream: Callable[[str], str] | None = None,
                  limits: usage.Limits | None = None) -> list[Result]:
    """``apply_patch`` for each of several PATCHes (see ``_batched``):
    with ``limits``, one that would take a project over a limit is
    refused alone (OverLimit), counted after those before it."""
    return _batched(context, patches,
                    lambda session, p, known: arq_bindings.apply_in(
                        session, p.binds, p.unbinds, find_bitstream, p.live,
                        known), limits)


def delete_many(context: cyborg_context.RequestContext,
                deletes: list[Delete]) -> list[Result]:
    """``delete`` for each of several DELETEs (see ``_batched``)."""
    return _batched(context, deletes,
                    lambda session, d, _: arq_bindings.delete_in(
                        session, d.uuids, d.instance_uuid, d.project_id))
