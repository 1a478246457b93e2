"""Query helpers shared by the read modules: pagination by marker, and
what a column can hold."""
from typing import Any
from typing import cast

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql
from sqlalchemy.dialects import sqlite

from cyborg.common import exception

# What a TEXT column holds on MariaDB, in bytes of UTF-8 (PostgreSQL's and
# SQLite's hold more): the bound of every Text column on all three.
TEXT_BYTES = 65535

# The range of each integer type on MariaDB and PostgreSQL (SQLite's
# INTEGER holds 64 bits whatever the type); BigInteger and SmallInteger
# are subclasses of Integer, so they are looked for first.
_INTEGER_BITS = ((sa.BigInteger, 64), (sa.SmallInteger, 16),
                 (sa.Integer, 32))


def changed(session: Any, statement: sa.Executable) -> int:
    """Execute an UPDATE, INSERT or DELETE; how many rows it changed.

    Every state change is such a statement, conditional on what was read,
    and this count is how the caller learns whether it won.
    """
    result = cast(sa.CursorResult[Any], session.execute(statement))
    return result.rowcount


def insert_new(session: Any, model: Any, values: dict[str, Any],
               unique: str | tuple[str, ...]) -> bool:
    """Insert a row unless one with the same ``unique`` column (or
    columns, of one unique constraint) exists; whether it inserted one.

    The unique key decides between concurrent transactions: the second
    insert waits for the first to commit, then finds the row and inserts
    nothing (no IntegrityError to roll the caller's transaction back).
    """
    dialect = session.get_bind().dialect.name
    columns = [unique] if isinstance(unique, str) else list(unique)
    insert: sa.Insert
    if dialect == 'postgresql':
        insert = postgresql.insert(model).values(**values) \
            .on_conflict_do_nothing(index_elements=columns)
    elif dialect == 'sqlite':
        insert = sqlite.insert(model).values(**values) \
            .on_conflict_do_nothing(index_elements=columns)
    else:
        insert = sa.insert(model).values(**values).prefix_with('IGNORE')
    return bool(changed(session, insert))


def _type(column: Any) -> Any:
    """The SQL type of a mapped attribute (``Model.column``) or a Column.

    A mapped attribute's ``.type`` is found only after its own attributes
    and its comparator's miss: 7 us, where ``.expression.type`` (the
    Column; a Column's ``expression`` is itself) takes 0.06 us. The
    conductor checks three columns' lengths in every agent heartbeat it
    takes, so ``.type`` cost 40 us of the 0.6 ms a heartbeat costs it.
    """
    return column.expression.type


def max_chars(column: Any) -> int | None:
    """How many characters a String(n) column holds; None for Text."""
    type_ = _type(column)
    return None if isinstance(type_, sa.Text) else type_.length


def max_bytes(column: Any) -> int | None:
    """How many bytes of UTF-8 a Text column holds; None for String(n)."""
    return TEXT_BYTES if isinstance(_type(column), sa.Text) else None


def integer_range(column: Any) -> tuple[int, int]:
    """The smallest and largest value an integer column holds."""
    type_ = _type(column)
    for sa_type, bits in _INTEGER_BITS:
        if isinstance(type_, sa_type):
            return -2 ** (bits - 1), 2 ** (bits - 1) - 1
    raise TypeError(f'{column} is not an integer column')


def paginate(session: sa.orm.Session, query: sa.Select, model: Any,
             size: int | None, marker: str | int | None,
             marker_key: str = 'uuid',
             marker_where: sa.ColumnElement[bool] | None = None
             ) -> tuple[list[Any], bool]:
    """Rows of ``query`` ordered by id, after ``marker``, at most ``size``.

    ``marker`` is the ``marker_key`` column's value of the last row seen
    (tables without a uuid page by ``id``); with ``marker_where``, a row
    that does not meet it (one the caller may not see) is refused as a
    value no row has. Returns the rows and whether more follow. ``size``
    None means all.
    """
    query = query.order_by(model.id)
    if marker is not None:
        find = sa.select(model.id).where(getattr(model, marker_key) == marker)
        if marker_where is not None:
            find = find.where(marker_where)
        marker_id = session.scalar(find)
        if marker_id is None:
            raise exception.Invalid(
                reason=f'marker {marker} does not name an item of this list.')
        query = query.where(model.id > marker_id)
    if size is None:
        return list(session.execute(query)), False
    rows = list(session.execute(query.limit(size + 1)))
    return rows[:size], len(rows) > size
