"""What must hold before an adoption changes anything.

An adoption renames the upstream tables, creates cyborg's schema and
copies the rows; anything that would make one of those steps fail is
found here first, by reading alone, so that ``adopt --dry-run`` names it
and ``adopt`` refuses before the first rename:

* ``in_the_way``: tables that cyborg's schema, or the renamed upstream
  tables, would need the names of;
* ``missing_columns``: upstream columns the adoption reads and a damaged
  schema lacks;
* ``leftover``: an unfinished adoption's state that its own steps could
  not have left;
* ``rows``: planned rows that cyborg's schema would refuse (a value it
  does not allow, too long a string, an empty required column, a link to
  a row that does not come across, a unique key held twice), each named
  by its upstream table and id with what to do about it.

All are pure functions over what was read.
"""
import collections
from collections.abc import Iterable
from collections.abc import Mapping
from typing import Any

import sqlalchemy as sa

from cyborg.db import adoption_plan
from cyborg.db import models
from cyborg.db import upstream

# Rows named per table, column and kind of problem.
_SHOWN = 5
_LEFTOVER = upstream.PREFIX + upstream.VERSION_TABLE


def ours() -> set[str]:
    """The tables cyborg's schema has, its version table included."""
    return set(models.Base.metadata.tables) | {upstream.VERSION_TABLE}


def in_the_way(existing: Iterable[str]) -> list[str]:
    """Tables of a database not yet renamed that stand where cyborg's
    schema or a renamed upstream table would go."""
    existing = set(existing)
    moved = {upstream.VERSION_TABLE, *upstream.UPSTREAM_TABLES}
    problems = [
        f'table {t} exists, and cyborg\'s schema creates a table of that '
        'name: it is not one of OpenStack Cyborg\'s, so rename or drop it '
        '(after a backup)' for t in sorted((ours() - moved) & existing)]
    problems += [
        f'table {upstream.PREFIX + t} exists, and the adoption sets table '
        f'{t} aside under that name: rename or drop it (after a backup)'
        for t in sorted(moved) if upstream.PREFIX + t in existing]
    return problems


def missing_columns(columns: Mapping[str, Iterable[str]]) -> list[str]:
    """Columns the adoption reads that the upstream tables lack.

    :param columns: upstream table (as named wherever it is now) -> the
        names of its columns.
    """
    problems = []
    for name, found in columns.items():
        table = name.removeprefix(upstream.PREFIX)
        for column in adoption_plan.COLUMNS[table]:
            if column not in set(found):
                problems.append(
                    f'table {name} has no column {column}, which '
                    f'{upstream.UPSTREAM_RELEASE}\'s has and the adoption '
                    'reads: its schema was changed; add the column back '
                    'as OpenStack Cyborg made it, or adopt from a backup '
                    'taken before the change')
    return problems


def leftover(revision: str | None, existing: Iterable[str],
             our_revision: str | None, our_revisions: set[str]
             ) -> list[str]:
    """What is wrong with an unfinished adoption's state.

    :param revision: what ``upstream_alembic_version`` holds (None when
        it does not hold exactly one row).
    :param existing: the database's tables.
    :param our_revision: what ``alembic_version`` holds, if it exists.
    """
    existing = set(existing)
    restore = ('it was not left by "cyborg-dbsync adopt": restore the '
               'database from its backup, or drop that table if nothing '
               'else was changed')
    if revision not in (upstream.UPSTREAM_HEAD, upstream.ADOPTED):
        held = 'no single row' if revision is None else repr(revision)
        return [f'table {_LEFTOVER} holds {held}, where an adoption '
                f'leaves {upstream.UPSTREAM_HEAD} (tables set aside) or '
                f'{upstream.ADOPTED!r} (rows copied): {restore}']
    problems = []
    if (upstream.VERSION_TABLE in existing
            and our_revision not in our_revisions):
        problems.append(
            f'table {_LEFTOVER} says an adoption is under way, but table '
            f'{upstream.VERSION_TABLE} holds {our_revision!r}, which is '
            f'not one of cyborg\'s revisions: {restore}')
    if revision == upstream.ADOPTED:
        if our_revision is None:
            problems.append(
                f'table {_LEFTOVER} says the rows were copied, but the '
                f'database has no cyborg schema: {restore}')
        return problems
    missing = [upstream.PREFIX + t for t in upstream.UPSTREAM_TABLES
               if upstream.PREFIX + t not in existing]
    if missing:
        problems.append(
            f'table {_LEFTOVER} says the OpenStack Cyborg tables were set '
            f'aside, but {", ".join(missing)} do not exist: {restore}')
    return problems


class _Found:
    """Problems of one kind on one column, the first rows of each."""

    def __init__(self) -> None:
        self.lines: dict[tuple[str, ...], list[str]] = (
            collections.defaultdict(list))
        self.counts: collections.Counter[tuple[str, ...]] = (
            collections.Counter())

    def add(self, key: tuple[str, ...], line: str) -> None:
        self.counts[key] += 1
        if self.counts[key] <= _SHOWN:
            self.lines[key].append(line)

    def problems(self) -> list[str]:
        out = []
        for key, lines in self.lines.items():
            out += lines
            more = self.counts[key] - len(lines)
            if more:
                out.append(f'{key[0]}: {more} more row(s) with the same '
                           f'problem in {key[1]}')
        return out


def _column(table: str, column: str) -> str:
    source = adoption_plan.RENAMED.get((table, column))
    return column if source is None else f'{source} (cyborg\'s {column})'


class _Rule:
    """What cyborg's schema requires of one column's values."""

    def __init__(self, column: sa.Column[Any],
                 ids: Mapping[str, set[int]]) -> None:
        kind = column.type
        self.name = column.name
        self.required = not (column.nullable or column.primary_key)
        self.values = (tuple(kind.enums) if isinstance(kind, sa.Enum)
                       else None)
        self.length = (kind.length if isinstance(kind, sa.String)
                       and self.values is None else None)
        targets = [k.column.table.name for k in column.foreign_keys
                   if k.column.table.name in ids]
        self.target = targets[0] if targets else None
        self.ids = ids[self.target] if self.target else None

    def needed(self) -> bool:
        return bool(self.required or self.values or self.length
                    or self.target)

    def problem(self, value: Any) -> tuple[str, str] | None:
        """(kind, what is wrong and what to do), or None."""
        if value is None:
            if self.required:
                return 'null', ('is empty, and cyborg requires a value: '
                                'set one')
            return None
        if self.values is not None and value not in self.values:
            return 'value', (f'{value!r} is not one cyborg knows (it has '
                             f'{", ".join(self.values)}): set one of those')
        if (self.length and isinstance(value, str)
                and len(value) > self.length):
            return 'length', (f'is {len(value)} characters long (as cyborg '
                              f'stores it), and cyborg keeps at most '
                              f'{self.length}: shorten it')
        if self.ids is not None and value not in self.ids:
            return 'link', (
                f'{value} names no {adoption_plan.SOURCES[str(self.target)]} '
                'row that comes across (it does not exist, or cannot come '
                'across itself): set it to one that does')
        return None


def _unique_keys(table: sa.Table) -> list[tuple[str, ...]]:
    keys = [tuple(c.name for c in con.columns) for con in table.constraints
            if isinstance(con, sa.UniqueConstraint)]
    keys += [(c.name,) for c in table.columns if c.unique]
    return sorted(set(keys))


def rows(planned: Mapping[str, list[adoption_plan.Row]]) -> list[str]:
    """Planned rows (cyborg's table -> rows) that cyborg's schema would
    refuse, one line per row: upstream table, id, column, what is wrong
    and what to do."""
    found = _Found()
    ids = {name: {r['id'] for r in planned.get(name, [])}
           for name in adoption_plan.SOURCES}
    for name, source in adoption_plan.SOURCES.items():
        table = models.Base.metadata.tables[name]
        written = planned.get(name, [])
        present = set(written[0]) if written else set()
        rules = [rule for rule in (_Rule(c, ids) for c in table.columns)
                 if rule.name in present and rule.needed()]
        for row in written:
            for rule in rules:
                what = rule.problem(row[rule.name])
                if what is not None:
                    found.add((source, rule.name, what[0]),
                              f'{source} id {row["id"]}: '
                              f'{_column(name, rule.name)} {what[1]}, '
                              'or delete the row')
        for key in _unique_keys(table):
            _unique(found, name, key, written)
    return found.problems()


def _unique(found: _Found, name: str, key: tuple[str, ...],
            written: list[adoption_plan.Row]) -> None:
    source = adoption_plan.SOURCES[name]
    holders: dict[tuple[Any, ...], list[int]] = collections.defaultdict(list)
    for row in written:
        value = tuple(row.get(c) for c in key)
        if None not in value:
            holders[value].append(row['id'])
    for value, held in holders.items():
        if len(held) > 1:
            cols = ', '.join(_column(name, c) for c in key)
            vals = ', '.join(map(repr, value))
            if len(key) > 1:
                cols, vals = f'({cols})', f'({vals})'
            found.add((source, ','.join(key), 'unique'),
                      f'{source} ids {", ".join(map(str, held))}: all have '
                      f'{cols} = {vals}, which cyborg keeps unique: change '
                      'or delete all but one')
