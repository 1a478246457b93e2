"""Database access: one oslo.db enginefacade shared by every query module.

Query modules (one per noun) define plain functions that take a
:class:`cyborg.context.RequestContext` and decorate them with ``reader`` or
``writer``; the decorator opens (or joins) the transaction and puts the
session on ``context.session``.
"""
from typing import Any

from oslo_config import cfg
from oslo_db.sqlalchemy import enginefacade
import sqlalchemy as sa

main_context_manager = enginefacade.transaction_context()
reader = main_context_manager.reader
writer = main_context_manager.writer

_ENGINE_OPTIONS = ('connection', 'slave_connection', 'sqlite_synchronous',
                   'connection_recycle_time', 'max_pool_size',
                   'max_overflow', 'pool_timeout', 'max_retries',
                   'retry_interval', 'mysql_sql_mode',
                   'connection_debug', 'connection_trace')


def configure(conf: cfg.ConfigOpts) -> None:
    """Point the facade at ``[database]``; call once per process."""
    options: dict[str, Any] = {
        name: getattr(conf.database, name) for name in _ENGINE_OPTIONS
        if getattr(conf.database, name, None) is not None}
    options['sqlite_fk'] = True
    main_context_manager.configure(**options)


def get_engine() -> sa.engine.Engine:
    return main_context_manager.writer.get_engine()


def patch_engine(engine: sa.engine.Engine) -> Any:
    """Use ``engine`` for every transaction; returns a function that undoes it.

    For tests and the all-in-one service, which manage their own engine.
    """
    return main_context_manager.patch_engine(engine)
