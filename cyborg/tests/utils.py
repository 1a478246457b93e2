"""Helpers shared by tests."""
import contextlib
import time
from collections.abc import Callable
from collections.abc import Iterator
from typing import TypeVar

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


T = TypeVar('T')


def wait_for(check: Callable[[], T], what: str = 'a condition',
             timeout: float = 30, interval: float = 0.05) -> T:
    """The first true value of ``check()``; AssertionError after
    ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f'timed out after {timeout:.0f}s waiting '
                                 f'for {what}')
        time.sleep(interval)
