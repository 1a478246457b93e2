"""Taking over a database made by OpenStack Cyborg 17.0.0, in place.

The devices, their parts, the profiles and the accelerator requests keep
their ids and uuids; deployables keep their resource-provider uuids, so
the allocations Nova holds in placement stay valid. It runs in steps
that a second run can resume after any interruption:

1. the upstream tables are renamed to ``upstream_<name>`` in one atomic
   statement (a transaction on PostgreSQL and SQLite, one RENAME TABLE
   on MariaDB), its version table with them;
2. cyborg's schema is created by its own migrations;
3. the rows are copied in one transaction, which also marks the renamed
   version table ``adopted``: until then, a second run empties cyborg's
   tables and copies again;
4. the renamed tables (and PostgreSQL's enum types of them) are dropped.

Everything that cannot be carried is found before step 1, by reading
alone (``adoption_plan``); ``dry_run`` stops there and says what would
change.
"""
import logging
import typing
from collections.abc import Callable

import sqlalchemy as sa

from cyborg.common import exception
from cyborg.conf import CONF
from cyborg.db import adoption_plan
from cyborg.db import migration
from cyborg.db import models
from cyborg.db import upstream

LOG = logging.getLogger(__name__)


def _read(connection: sa.engine.Connection
          ) -> dict[str, list[adoption_plan.Row]]:
    """The upstream rows, from wherever a run left each table."""
    existing = set(sa.inspect(connection).get_table_names())
    src = {}
    for table in upstream.UPSTREAM_TABLES:
        name = (upstream.PREFIX + table
                if upstream.PREFIX + table in existing else table)
        reflected = sa.Table(name, sa.MetaData(), autoload_with=connection)
        src[table] = [dict(r._mapping) for r in connection.execute(
            sa.select(reflected).order_by(reflected.c.id))]
    return src


def _rename(connection: sa.engine.Connection) -> None:
    """Rename what is not renamed yet, the version table first: SQLite
    runs each ALTER on its own, and a run that stopped half-way must
    still be known for an adoption."""
    existing = set(sa.inspect(connection).get_table_names())
    names = [n for n in (upstream.VERSION_TABLE, *upstream.UPSTREAM_TABLES)
             if n in existing and upstream.PREFIX + n not in existing]
    quote = connection.dialect.identifier_preparer.quote
    if connection.dialect.name == 'mysql':
        if names:
            # One statement: MariaDB renames all tables or none.
            connection.execute(sa.text('RENAME TABLE ' + ', '.join(
                f'{quote(n)} TO {quote(upstream.PREFIX + n)}'
                for n in names)))
        return
    for name in names:
        connection.execute(sa.text(
            f'ALTER TABLE {quote(name)} RENAME TO '
            f'{quote(upstream.PREFIX + name)}'))
    if connection.dialect.name == 'postgresql':
        _rename_pg_relations(connection)


def _rename_pg_relations(connection: sa.engine.Connection) -> None:
    """Rename the indexes (with the keys they back) and id sequences of
    the renamed tables: PostgreSQL names them schema-wide, and cyborg's
    tables of the same names would want the same ones."""
    quote = connection.dialect.identifier_preparer.quote
    tables = [upstream.PREFIX + t
              for t in (upstream.VERSION_TABLE, *upstream.UPSTREAM_TABLES)]
    relations = connection.execute(sa.text(
        "SELECT c.relname, c.relkind FROM pg_class c "
        "JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE n.nspname = current_schema() AND c.relkind IN ('i', 'S') "
        "AND NOT starts_with(c.relname, :prefix) AND ("
        " (c.relkind = 'i' AND c.oid IN (SELECT indexrelid FROM pg_index"
        "  WHERE indrelid IN (SELECT oid FROM pg_class"
        "   WHERE relname = ANY(:tables)))) OR"
        " (c.relkind = 'S' AND c.oid IN (SELECT objid FROM pg_depend"
        "  WHERE classid = 'pg_class'::regclass AND deptype = 'a'"
        "  AND refobjid IN (SELECT oid FROM pg_class"
        "   WHERE relname = ANY(:tables)))))"),
        {'prefix': upstream.PREFIX, 'tables': tables}).all()
    for name, kind in relations:
        what = 'INDEX' if kind == 'i' else 'SEQUENCE'
        connection.execute(sa.text(
            f'ALTER {what} {quote(name)} RENAME TO '
            f'{quote(upstream.PREFIX + name)}'))


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


def adopt(url: str | None = None, dry_run: bool = False,
          say: Callable[[str], None] = print) -> adoption_plan.Plan | None:
    """Take over the OpenStack Cyborg 17.0.0 database at ``url``.

    Returns the plan carried out (or, with ``dry_run``, that would be);
    None when there was nothing left to copy.

    :raises cyborg.common.exception.AdoptionRefused: when the database
        is not one to adopt, or holds rows that cannot come across.
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
        copied = found.revision == upstream.ADOPTED
        plan = None
        if not copied:
            plan = adoption_plan.make_plan(_read(connection))
            if plan.problems:
                raise exception.AdoptionRefused(
                    url=safe, reason='these rows cannot come across: '
                    + '; '.join(plan.problems) + '.')
    if dry_run:
        if plan is None:
            say(f'The database at {safe} holds a finished copy; the '
                'adoption would drop the upstream tables left over.')
        return plan
    if not copied:
        with migration.connect(url) as connection:
            _rename(connection)
        LOG.info('Set the upstream tables aside as %s*.', upstream.PREFIX)
        with migration.connect(url) as connection:
            migration.upgrade_on(connection)
        with migration.connect(url) as connection:
            # Read again in the copy's transaction: what is copied is
            # what is there.
            plan = adoption_plan.make_plan(_read(connection))
            if plan.problems:
                raise exception.AdoptionRefused(
                    url=safe, reason='; '.join(plan.problems) + '.')
            _copy(connection, plan)
        LOG.info('Copied the rows into cyborg\'s tables.')
    with migration.connect(url) as connection:
        _drop(connection)
    return plan
