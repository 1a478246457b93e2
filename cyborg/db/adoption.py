"""Taking over a database made by OpenStack Cyborg 17.0.0, in place.

The devices, their parts, the profiles and the accelerator requests keep
their ids and uuids; deployables keep their resource-provider uuids, so
the allocations Nova holds in placement stay valid. It runs in steps:

1. the upstream tables are renamed to ``upstream_<name>`` in one atomic
   step (a transaction on PostgreSQL and SQLite, one RENAME TABLE on
   MariaDB), its version table with them;
2. cyborg's schema is created by its own migrations;
3. the rows are copied in one transaction, which also marks the renamed
   version table ``adopted``;
4. the renamed tables (and PostgreSQL's enum types of them) are dropped.

Everything that would make a step fail is found before step 1, by
reading alone (``adoption_checks`` over the schema and the rows that
``adoption_plan`` would write); ``dry_run`` stops there and says what
would change, and ``adopt`` refuses there, changing nothing. Should a
step still fail before the copy is committed, the run undoes steps 1
and 2 (``_restore``). A run that was killed instead leaves the renamed
version table: the next run checks that what it finds is a state of its
own (``adoption_checks.leftover``), then carries on from there, or, if
the rows cannot come across, undoes steps 1 and 2. After step 3 it only
finishes step 4.
"""
import logging
import typing
from collections.abc import Callable

import sqlalchemy as sa

from cyborg.common import exception
from cyborg.conf import CONF
from cyborg.db import adoption_checks
from cyborg.db import adoption_plan
from cyborg.db import migration
from cyborg.db import models
from cyborg.db import upstream

LOG = logging.getLogger(__name__)


def _read(connection: sa.engine.Connection
          ) -> dict[str, list[adoption_plan.Row]]:
    """The upstream rows, from wherever a run left each table: only the
    columns the plan reads (``adoption_plan.COLUMNS``)."""
    existing = set(sa.inspect(connection).get_table_names())
    src = {}
    for table in upstream.UPSTREAM_TABLES:
        name = _where(table, existing)
        reflected = sa.Table(name, sa.MetaData(), autoload_with=connection)
        columns = [reflected.c[c] for c in adoption_plan.COLUMNS[table]]
        src[table] = [dict(r._mapping) for r in connection.execute(
            sa.select(*columns).order_by(reflected.c.id))]
    return src


def _where(table: str, existing: set[str]) -> str:
    """The name an upstream table has now."""
    moved = upstream.PREFIX + table
    return moved if moved in existing else table


def _check(connection: sa.engine.Connection, renamed: bool
           ) -> tuple[adoption_plan.Plan | None, list[str]]:
    """The plan and everything that would make an adoption fail:
    ``adoption_checks`` over the schema, then over the planned rows.

    :param renamed: whether an unfinished run has set the upstream
        tables aside already (cyborg's tables are then its own).
    """
    inspector = sa.inspect(connection)
    existing = set(inspector.get_table_names())
    problems = [] if renamed else adoption_checks.in_the_way(existing)
    problems += adoption_checks.missing_columns({
        name: [c['name'] for c in inspector.get_columns(name)]
        for name in (_where(t, existing) for t in upstream.UPSTREAM_TABLES)})
    if problems:
        return None, problems
    plan = adoption_plan.make_plan(_read(connection))
    plan.problems += adoption_checks.rows(plan.rows)
    return plan, plan.problems


def _leftover(connection: sa.engine.Connection, found: upstream.Found
              ) -> list[str]:
    """What is wrong with the state an unfinished run left."""
    existing = set(sa.inspect(connection).get_table_names())
    ours = (upstream.version_of(connection, upstream.VERSION_TABLE)
            if upstream.VERSION_TABLE in existing else None)
    return adoption_checks.leftover(found.revision, existing, ours,
                                    migration.our_revisions())


def _begin_ddl(connection: sa.engine.Connection) -> None:
    """Make the DDL that follows part of the connection's transaction on
    SQLite too, whose Python driver starts one only before DML: a
    rename stopped half-way must leave every table as it was."""
    if connection.dialect.name == 'sqlite':
        connection.exec_driver_sql('BEGIN')


def _rename_tables(connection: sa.engine.Connection,
                   names: list[tuple[str, str]]) -> None:
    quote = connection.dialect.identifier_preparer.quote
    if not names:
        return
    if connection.dialect.name == 'mysql':
        # One statement: MariaDB renames all tables or none.
        connection.execute(sa.text('RENAME TABLE ' + ', '.join(
            f'{quote(a)} TO {quote(b)}' for a, b in names)))
        return
    for old, new in names:
        connection.execute(sa.text(
            f'ALTER TABLE {quote(old)} RENAME TO {quote(new)}'))


def _rename(connection: sa.engine.Connection) -> None:
    """Set the upstream tables aside, all at once (the version table
    first, for a driver that would not)."""
    _begin_ddl(connection)
    existing = set(sa.inspect(connection).get_table_names())
    _rename_tables(connection, [
        (n, upstream.PREFIX + n)
        for n in (upstream.VERSION_TABLE, *upstream.UPSTREAM_TABLES)
        if n in existing and upstream.PREFIX + n not in existing])
    if connection.dialect.name == 'postgresql':
        _rename_pg_relations(connection, aside=True)


def _restore(connection: sa.engine.Connection) -> None:
    """Undo an unfinished adoption that has not copied: drop what
    cyborg's migrations made and give the upstream tables their names
    back, the version table last so that a run stopped half-way still
    knows it. Only for a state ``_leftover`` accepted, where every table
    of cyborg's names is one the adoption made."""
    _begin_ddl(connection)
    existing = set(sa.inspect(connection).get_table_names())
    if upstream.PREFIX + upstream.VERSION_TABLE not in existing:
        return  # nothing was set aside
    # A table of an upstream name is cyborg's only once the upstream one
    # is set aside.
    moved = {upstream.VERSION_TABLE, *upstream.UPSTREAM_TABLES}
    made = sa.MetaData()
    made.reflect(connection, only=sorted(
        t for t in existing & adoption_checks.ours()
        if t not in moved or upstream.PREFIX + t in existing))
    made.drop_all(connection)
    _rename_tables(connection, [
        (upstream.PREFIX + n, n)
        for n in (*upstream.UPSTREAM_TABLES, upstream.VERSION_TABLE)
        if upstream.PREFIX + n in existing])
    if connection.dialect.name == 'postgresql':
        _rename_pg_relations(connection, aside=False)


def _rename_pg_relations(connection: sa.engine.Connection,
                         aside: bool) -> None:
    """Rename the indexes (with the keys they back) and id sequences of
    the upstream tables with them (``aside``: add the prefix, else take
    it off): PostgreSQL names them schema-wide, and cyborg's tables of
    the same names would want the same ones."""
    quote = connection.dialect.identifier_preparer.quote
    names = (upstream.VERSION_TABLE, *upstream.UPSTREAM_TABLES)
    tables = [upstream.PREFIX + t for t in names] if aside else list(names)
    relations = connection.execute(sa.text(
        "SELECT c.relname, c.relkind FROM pg_class c "
        "JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE n.nspname = current_schema() AND c.relkind IN ('i', 'S') "
        "AND starts_with(c.relname, :prefix) = :prefixed AND ("
        " (c.relkind = 'i' AND c.oid IN (SELECT indexrelid FROM pg_index"
        "  WHERE indrelid IN (SELECT oid FROM pg_class"
        "   WHERE relname = ANY(:tables)))) OR"
        " (c.relkind = 'S' AND c.oid IN (SELECT objid FROM pg_depend"
        "  WHERE classid = 'pg_class'::regclass AND deptype = 'a'"
        "  AND refobjid IN (SELECT oid FROM pg_class"
        "   WHERE relname = ANY(:tables)))))"),
        {'prefix': upstream.PREFIX, 'prefixed': not aside,
         'tables': tables}).all()
    for name, kind in relations:
        what = 'INDEX' if kind == 'i' else 'SEQUENCE'
        new = (upstream.PREFIX + name if aside
               else name.removeprefix(upstream.PREFIX))
        connection.execute(sa.text(
            f'ALTER {what} {quote(name)} RENAME TO {quote(new)}'))


def _copy(connection: sa.engine.Connection, plan: adoption_plan.Plan) -> None:
    dep = models.Deployable
    table = typing.cast(sa.Table, dep.__table__)
    # A second run finds what the first inserted; InnoDB checks the
    # deployables' links to each other row by row, so they go first.
    connection.execute(sa.update(dep).values(parent_id=None, root_id=None))
    for model in reversed(adoption_plan.TABLES):
        connection.execute(sa.delete(model))
    links = [{'b_id': r['id'], 'parent_id': r['parent_id'],
              'root_id': r['root_id']}
             for r in plan.rows['deployables']
             if r['parent_id'] or r['root_id']]
    for model in adoption_plan.TABLES:
        rows = plan.rows[model.__tablename__]
        if model is models.Deployable:
            rows = [dict(r, parent_id=None, root_id=None) for r in rows]
        if rows:
            connection.execute(sa.insert(model), rows)
    if links:
        connection.execute(
            sa.update(table).where(table.c.id == sa.bindparam('b_id'))
            .values(parent_id=sa.bindparam('parent_id'),
                    root_id=sa.bindparam('root_id')), links)
    if connection.dialect.name == 'postgresql':
        # Rows came with their ids: the next insert must not reuse one.
        for model in adoption_plan.TABLES:
            name = model.__tablename__
            connection.execute(sa.text(
                f"SELECT setval(pg_get_serial_sequence('{name}', 'id'), "
                f"COALESCE((SELECT MAX(id) FROM {name}), 0) + 1, false)"))
    connection.execute(sa.text(
        f'UPDATE {upstream.PREFIX}{upstream.VERSION_TABLE} '
        f"SET version_num = '{upstream.ADOPTED}'"))


def _drop(connection: sa.engine.Connection) -> None:
    existing = set(sa.inspect(connection).get_table_names())
    quote = connection.dialect.identifier_preparer.quote
    for table in reversed(upstream.UPSTREAM_TABLES):
        if upstream.PREFIX + table in existing:
            connection.execute(sa.text(
                f'DROP TABLE {quote(upstream.PREFIX + table)}'))
    if connection.dialect.name == 'postgresql':
        for name in upstream.PG_ENUM_TYPES:
            connection.execute(sa.text(
                f'DROP TYPE IF EXISTS {quote(name)}'))
    # Last: while it is there, a run knows an adoption is unfinished.
    connection.execute(sa.text(
        f'DROP TABLE {upstream.PREFIX}{upstream.VERSION_TABLE}'))


def _reason(plan: adoption_plan.Plan | None, problems: list[str]) -> str:
    what = ('these rows cannot come across: ' if plan is not None else
            f'its tables are not as {upstream.UPSTREAM_RELEASE} left them: ')
    return what + '; '.join(problems) + '.'


def adopt(url: str | None = None, dry_run: bool = False,
          say: Callable[[str], None] = print) -> adoption_plan.Plan | None:
    """Take over the OpenStack Cyborg 17.0.0 database at ``url``.

    Returns the plan carried out (or, with ``dry_run``, that would be);
    None when there was nothing left to copy.

    :raises cyborg.common.exception.AdoptionRefused: when the database
        is not one to adopt, or holds rows that cannot come across.
    :raises cyborg.common.exception.AdoptionRolledBack: when an
        unfinished adoption, or this one, could not copy and gave the
        upstream tables their names back.
    :raises cyborg.common.exception.DBNotReachable: on a failed connect.
    """
    url = url or CONF.database.connection
    safe = migration.safe_url(url)
    with migration.connect(url) as connection:
        found = upstream.recognise(connection, migration.our_revisions())
        if found.kind is upstream.Kind.OURS:
            say(f'The database at {safe} already has cyborg\'s schema '
                f'(revision {found.revision}): nothing to adopt.')
            return None
        if found.kind not in (upstream.Kind.UPSTREAM,
                              upstream.Kind.ADOPTING):
            raise exception.AdoptionRefused(
                url=safe, reason=f'it holds {found.description or "nothing"}'
                f', not an {upstream.UPSTREAM_RELEASE} database.')
        renamed = found.kind is upstream.Kind.ADOPTING
        if renamed:
            problems = _leftover(connection, found)
            if problems:
                raise exception.AdoptionRefused(
                    url=safe, reason='; '.join(problems) + '.')
        copied = found.revision == upstream.ADOPTED
        plan, problems = None, []
        if not copied:
            plan, problems = _check(connection, renamed)
    if problems:
        if renamed and not dry_run:
            # An earlier run set the tables aside and could not copy:
            # undo it rather than leave the database half-adopted.
            with migration.connect(url) as connection:
                _restore(connection)
            raise exception.AdoptionRolledBack(
                url=safe, reason=_reason(plan, problems))
        raise exception.AdoptionRefused(url=safe,
                                        reason=_reason(plan, problems))
    if dry_run:
        if plan is None:
            say(f'The database at {safe} holds a finished copy; the '
                'adoption would drop the upstream tables left over.')
        return plan
    if not copied:
        plan = _set_aside_and_copy(url)
    with migration.connect(url) as connection:
        _drop(connection)
    return plan


def _set_aside_and_copy(url: str) -> adoption_plan.Plan:
    """Rename, migrate and copy; on any failure, give the upstream tables
    their names back (a failure of that too leaves a state the next run
    finishes or restores)."""
    safe = migration.safe_url(url)
    try:
        with migration.connect(url) as connection:
            _rename(connection)
        LOG.info('Set the upstream tables aside as %s*.', upstream.PREFIX)
        with migration.connect(url) as connection:
            migration.upgrade_on(connection)
        with migration.connect(url) as connection:
            # Checked again in the copy's transaction: what is copied is
            # what is there.
            plan, problems = _check(connection, renamed=True)
            if plan is None or problems:
                raise exception.AdoptionRefused(
                    url=safe, reason=_reason(plan, problems))
            _copy(connection, plan)
    except Exception as exc:
        LOG.debug('Adoption failed before its copy was committed',
                  exc_info=True)
        if isinstance(exc, exception.AdoptionRefused):
            reason = exc.kwargs['reason']
        else:
            cause = getattr(exc, 'orig', None) or exc
            reason = ('it failed before its copy was committed: '
                      + (' '.join(str(cause).split())
                         or type(cause).__name__) + '.')
        with migration.connect(url) as connection:
            _restore(connection)
        raise exception.AdoptionRolledBack(url=safe, reason=reason) from exc
    LOG.info('Copied the rows into cyborg\'s tables.')
    return plan
