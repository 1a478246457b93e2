"""Alembic environment: runs cyborg's migrations against one database."""
from typing import Any

import sqlalchemy as sa
from alembic import context

from cyborg.conf import CONF
from cyborg.db import models

config = context.config
target_metadata = models.Base.metadata


def _url() -> str:
    return (config.get_main_option('sqlalchemy.url')
            or CONF.database.connection)


def _configure(dialect_name: str, **kwargs: Any) -> None:
    context.configure(
        target_metadata=target_metadata,
        # SQLite cannot ALTER most things; batch mode copies the table.
        render_as_batch=dialect_name == 'sqlite',
        compare_type=True,
        **kwargs)


def run_migrations_offline() -> None:
    """Print the SQL (``--sql``) instead of running it."""
    url = _url()
    _configure(sa.engine.make_url(url).get_backend_name(), url=url,
               literal_binds=True)
    with context.begin_transaction():
        context.run_migrations()


def _run(connection: sa.engine.Connection) -> None:
    _configure(connection.dialect.name, connection=connection)
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    """Migrate through the caller's connection, or through a new one."""
    connection = config.attributes.get('connection')
    if connection is not None:
        _run(connection)
        return
    engine = sa.create_engine(_url(), poolclass=sa.pool.NullPool)
    try:
        with engine.connect() as connection:
            _run(connection)
    finally:
        engine.dispose()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
