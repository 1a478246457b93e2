"""Query helpers shared by the read modules: pagination by marker."""
from typing import Any

import sqlalchemy as sa

from cyborg.common import exception


def paginate(session: sa.orm.Session, query: sa.Select, model: Any,
             size: int | None, marker: str | int | None,
             marker_key: str = 'uuid') -> tuple[list[Any], bool]:
    """Rows of ``query`` ordered by id, after ``marker``, at most ``size``.

    ``marker`` is the ``marker_key`` column's value of the last row seen
    (tables without a uuid page by ``id``). Returns the rows and whether
    more follow. ``size`` None means all.
    """
    query = query.order_by(model.id)
    if marker is not None:
        marker_id = session.scalar(
            sa.select(model.id).where(getattr(model, marker_key) == marker))
        if marker_id is None:
            raise exception.Invalid(
                reason=f'marker {marker} does not name an item of this list.')
        query = query.where(model.id > marker_id)
    if size is None:
        return list(session.execute(query)), False
    rows = list(session.execute(query.limit(size + 1)))
    return rows[:size], len(rows) > size
