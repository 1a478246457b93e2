"""Database access: one oslo.db enginefacade shared by every query module.

Query modules (one per noun) define plain functions that take a
:class:`cyborg.context.RequestContext` and decorate them with ``reader`` or
``writer``; the decorator opens (or joins) the transaction and puts the
session on ``context.session``.
"""
from typing import Any

import sqlalchemy as sa
from oslo_config import cfg
from oslo_db.sqlalchemy import enginefacade
from oslo_db.sqlalchemy import orm

from cyborg import context as cyborg_context
from cyborg.common import patches
from cyborg.common import profiler
from cyborg.db.api import deadlocks

# Each transaction rides on the request context (``context.session``).
enginefacade.transaction_context_provider(cyborg_context.RequestContext)
main_context_manager = enginefacade.transaction_context()
reader = main_context_manager.reader
writer = main_context_manager.writer

# For transactions that lock rows other transactions also lock (binding
# takes attach handles), and for every write on a Galera cluster: a
# transaction aborted for a deadlock or a certification conflict is tried
# again from the start (see deadlocks).
retry_on_deadlock = deadlocks.retry_on_deadlock

# Set in a connection's ``info`` (``Session.connection().info``): whether
# it is to a node of a Galera cluster, whose nodes lock rows for their own
# transactions only (see attach_handles.take).
GALERA = 'cyborg_galera'

_ENGINE_OPTIONS = ('connection', 'slave_connection', 'sqlite_synchronous',
                   'connection_recycle_time', 'max_pool_size',
                   'max_overflow', 'pool_timeout', 'mysql_sql_mode',
                   'connection_debug', 'connection_trace')


def _tune_engine(engine: sa.engine.Engine) -> None:
    """Make all three databases isolate transactions alike.

    PostgreSQL runs at READ COMMITTED. MySQL/MariaDB default to REPEATABLE
    READ, whose plain SELECTs keep showing a snapshot (a loop re-reading a
    row another transaction changed would see the old value forever) and
    whose gap locks make concurrent writers wait on rows they never touch;
    their connections are set to READ COMMITTED too, and note whether
    they are to a Galera node (``GALERA``). SQLite serialises
    writers (see _serialize_sqlite_writers).
    """
    if engine.dialect.name == 'mysql':
        @sa.event.listens_for(engine, 'connect')
        def _read_committed(dbapi_connection: Any, record: Any) -> None:
            cursor = dbapi_connection.cursor()
            try:
                cursor.execute(
                    'SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED')
                cursor.execute("SHOW VARIABLES LIKE 'wsrep_on'")
                found = cursor.fetchone()
            finally:
                cursor.close()
            record.info[GALERA] = bool(found) and found[1] == 'ON'

        # Connections pooled before the listener (oslo.db tries one when
        # it creates the engine) are dropped, so every one gets it.
        engine.dispose()
    _serialize_sqlite_writers(engine)


def _serialize_sqlite_writers(engine: sa.engine.Engine) -> None:
    """Make SQLite transactions take the write lock when they begin.

    SQLite refuses (instead of waiting) a transaction that read and then
    wants to write while another connection writes; beginning with BEGIN
    IMMEDIATE makes the second transaction wait its turn instead. Only the
    embedded (all-in-one) database is affected.
    """
    if engine.dialect.name != 'sqlite':
        return

    @sa.event.listens_for(engine, 'connect')
    def _no_implicit_begin(dbapi_connection: Any, record: Any) -> None:
        dbapi_connection.isolation_level = None

    @sa.event.listens_for(engine, 'begin')
    def _begin_immediate(connection: Any) -> None:
        # Connections opened before these listeners (oslo.db checks the
        # database when it creates the engine) still begin implicitly.
        connection.connection.dbapi_connection.isolation_level = None
        connection.exec_driver_sql('BEGIN IMMEDIATE')


main_context_manager.append_on_engine_create(_tune_engine)


def connection_url(url: str) -> str:
    """``url``, naming the utf8mb4 character set when it is MySQL's and
    names none.

    oslo.db otherwise connects with ``utf8``, MySQL's three-byte subset:
    a character beyond U+FFFF (an emoji in a description, a filter value)
    then fails the statement instead of being stored or compared.
    """
    parsed = sa.engine.make_url(url)
    if (parsed.get_backend_name() != 'mysql'
            or 'charset' in parsed.query):
        return url
    return parsed.update_query_dict({'charset': 'utf8mb4'}).render_as_string(
        hide_password=False)


def configure(conf: cfg.ConfigOpts) -> None:
    """Point the facade at ``[database]``; call once per process."""
    options: dict[str, Any] = {
        name: getattr(conf.database, name) for name in _ENGINE_OPTIONS
        if getattr(conf.database, name, None) is not None}
    for name in ('connection', 'slave_connection'):
        if options.get(name):
            options[name] = connection_url(options[name])
    options['sqlite_fk'] = True
    # The engine is made by the first transaction, inside a request or an
    # RPC call. oslo.db would first try a connection up to [database]
    # max_retries times, retry_interval apart (100 s by default), holding
    # that call, and every other behind its lock, on each call while the
    # database is down. Without it each transaction connects when it
    # needs to, fails at once during an outage (the API answers 503) and
    # works again as soon as the database is back; pooled connections are
    # checked before use (oslo.db's pool_pre_ping).
    options['max_retries'] = 0
    main_context_manager.configure(**options)
    if profiler.traces_sql(conf):
        main_context_manager.append_on_engine_create(profiler.trace_engine)


def get_engine() -> sa.engine.Engine:
    return main_context_manager.writer.get_engine()


def patch_engine(engine: sa.engine.Engine) -> Any:
    """Use ``engine`` for every transaction; returns a function that undoes it.

    For tests and the all-in-one service, which manage their own engine.
    """
    # Unlike the facade's own patch_engine() this never starts the
    # configured factory, so no engine is made for [database] connection.
    _tune_engine(engine)
    maker = orm.get_maker(engine=engine, expire_on_commit=False)
    factory = patches.transaction_factory(engine, maker,
                                          main_context_manager)
    return main_context_manager.patch_factory(factory)


@reader
def ping(context: cyborg_context.RequestContext) -> str:
    """One round trip to the database; its dialect's name. Raises
    oslo.db's DBConnectionError when it cannot be reached."""
    context.session.execute(sa.text('SELECT 1'))
    return str(context.session.get_bind().dialect.name)
