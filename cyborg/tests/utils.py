"""Helpers shared by tests."""
import contextlib
from collections.abc import Iterator

import sqlalchemy as sa


@contextlib.contextmanager
def count_writes(engine: sa.engine.Engine) -> Iterator[list[str]]:
    """Collect every INSERT, UPDATE and DELETE sent on ``engine``."""
    statements: list[str] = []

    def _record(conn, cursor, statement, parameters, context, executemany):
        verb = statement.lstrip().split(None, 1)[0].upper()
        if verb in ('INSERT', 'UPDATE', 'DELETE'):
            statements.append(statement)

    sa.event.listen(engine, 'before_cursor_execute', _record)
    try:
        yield statements
    finally:
        sa.event.remove(engine, 'before_cursor_execute', _record)
