"""Attributes: key/value facts about deployables (resource class, traits)."""
import uuid as uuid_lib
from typing import Any

import sqlalchemy as sa
from oslo_db import exception as db_exc

from cyborg import context as cyborg_context
from cyborg.common import exception
from cyborg.db import models
from cyborg.db.api import query
from cyborg.db.api import reader
from cyborg.db.api import writer

Attribute = models.Attribute
Deployable = models.Deployable


def to_dict(row: Any) -> dict[str, Any]:
    """An attribute row; ``deployable_id`` is the deployable's integer id."""
    return {'uuid': row.uuid, 'deployable_id': row.deployable_id,
            'key': row.key, 'value': row.value,
            'created_at': row.created_at, 'updated_at': row.updated_at}


@reader
def get_all(context: cyborg_context.RequestContext,
            deployable_id: int | None = None, key: str | None = None,
            size: int | None = None, marker: str | None = None
            ) -> tuple[list[dict[str, Any]], bool]:
    """Attributes matching every filter given exactly; see paginate."""
    select = sa.select(Attribute)
    if deployable_id is not None:
        select = select.where(Attribute.deployable_id == deployable_id)
    if key is not None:
        select = select.where(Attribute.key == key)
    rows, more = query.paginate(context.session, select, Attribute, size,
                                marker)
    return [to_dict(row[0]) for row in rows], more


@reader
def get(context: cyborg_context.RequestContext, uuid: str) -> dict[str, Any]:
    row = context.session.scalar(
        sa.select(Attribute).where(Attribute.uuid == uuid))
    if row is None:
        raise exception.ResourceNotFound(resource='Attribute', id=uuid)
    return to_dict(row)


@writer
def create(context: cyborg_context.RequestContext,
           values: dict[str, Any]) -> dict[str, Any]:
    """Add ``key`` = ``value`` to a deployable.

    The deployable is named by ``deployable_id`` (its integer id) or by
    ``deployable_uuid``; Invalid if it does not exist, Conflict if it
    already has ``key``.
    """
    if values.get('deployable_uuid') is not None:
        where = Deployable.uuid == values['deployable_uuid']
        named = values['deployable_uuid']
    else:
        where = Deployable.id == values['deployable_id']
        named = values['deployable_id']
    deployable_id = context.session.scalar(
        sa.select(Deployable.id).where(where))
    if deployable_id is None:
        raise exception.Invalid(reason=f'deployable {named} does not exist.')
    row = Attribute(uuid=str(uuid_lib.uuid4()), deployable_id=deployable_id,
                    key=values['key'], value=values['value'],
                    source=models.ATTRIBUTE_SET_BY_OPERATOR)
    try:
        with context.session.begin_nested():
            context.session.add(row)
    except db_exc.DBDuplicateEntry:
        raise exception.Conflict(
            reason=f'deployable {named} already has an attribute '
                   f'{values["key"]!r}.') from None
    except db_exc.DBReferenceError:
        # The agent's report removed the deployable meanwhile.
        raise exception.Invalid(
            reason=f'deployable {named} does not exist.') from None
    return to_dict(row)


@writer
def delete(context: cyborg_context.RequestContext, uuid: str) -> None:
    deleted = query.changed(context.session, sa.delete(Attribute).where(
        Attribute.uuid == uuid))
    if not deleted:
        raise exception.ResourceNotFound(resource='Attribute', id=uuid)
