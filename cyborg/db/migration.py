"""Schema migrations: the alembic commands behind cyborg-dbsync."""
import contextlib
import os
from collections.abc import Callable
from collections.abc import Iterator
from typing import Any

import sqlalchemy as sa
from alembic import command
from alembic import config as alembic_config
from alembic import migration as alembic_migration
from alembic import script as alembic_script

from cyborg.common import exception
from cyborg.conf import CONF
from cyborg.db import upstream

_SCRIPT_LOCATION = 'cyborg.db:alembic'

# What a failed connect attempt raises: the driver's error wrapped by
# SQLAlchemy, a driver that is not installed, or a socket error that a
# driver let through.
_CONNECT_ERRORS = (sa.exc.SQLAlchemyError, ImportError, OSError)


def _config() -> alembic_config.Config:
    config = alembic_config.Config()
    config.set_main_option('script_location', _SCRIPT_LOCATION)
    return config


def _script() -> alembic_script.ScriptDirectory:
    return alembic_script.ScriptDirectory.from_config(_config())


def safe_url(url: str) -> str:
    try:
        return sa.engine.make_url(url).render_as_string(hide_password=True)
    except sa.exc.ArgumentError:
        return url


def _one_line(exc: BaseException) -> str:
    # A DBAPI error carries the driver's own message; SQLAlchemy's wrapper
    # adds the statement and a link, which say nothing about a connect.
    reason = getattr(exc, 'orig', None) or exc
    return ' '.join(str(reason).split()) or type(reason).__name__


def _make_sqlite_dir(url: sa.engine.URL) -> None:
    database = url.database
    if (url.get_backend_name() != 'sqlite' or not database
            or database == ':memory:' or url.query.get('uri')):
        return
    os.makedirs(os.path.dirname(os.path.abspath(database)), exist_ok=True)


@contextlib.contextmanager
def connect(url: str | None) -> Iterator[sa.engine.Connection]:
    """A connection in a transaction, or DBNotReachable."""
    url = url or CONF.database.connection
    engine = None
    try:
        try:
            parsed = sa.engine.make_url(url)
            _make_sqlite_dir(parsed)
            engine = sa.create_engine(parsed, poolclass=sa.pool.NullPool)
            connection = engine.connect()
        except _CONNECT_ERRORS as exc:
            raise exception.DBNotReachable(
                url=safe_url(url), reason=_one_line(exc)) from exc
        with connection, connection.begin():
            yield connection
    finally:
        if engine is not None:
            engine.dispose()


def our_revisions() -> set[str]:
    """The ids of every migration in the source tree."""
    return {script.revision for script in _script().walk_revisions()}


def recognise(url: str | None = None) -> upstream.Found:
    """What the database at ``url`` holds.

    :raises cyborg.common.exception.DBNotReachable: on a failed connect.
    """
    with connect(url) as connection:
        return upstream.recognise(connection, our_revisions())


def _refuse_foreign(connection: sa.engine.Connection, url: str) -> None:
    found = upstream.recognise(connection, our_revisions())
    if found.kind in (upstream.Kind.EMPTY, upstream.Kind.OURS):
        return
    if found.kind in (upstream.Kind.UPSTREAM, upstream.Kind.ADOPTING):
        advice = ('Run "cyborg-dbsync adopt" to take it over (after a '
                  'backup; "cyborg-dbsync adopt --dry-run" shows what '
                  'would change).')
    else:
        advice = ('Point [database] connection at an empty database or '
                  'at cyborg\'s own.')
    raise exception.ForeignDatabase(url=safe_url(url),
                                    found=found.description, advice=advice)


def _run(url: str | None, cmd: Callable[..., object], *args: Any,
         refuse_foreign: bool = False, **kwargs: Any) -> None:
    """Run an alembic command on a connection to ``url``."""
    with connect(url) as connection:
        if refuse_foreign:
            _refuse_foreign(connection, url or CONF.database.connection)
        config = _config()
        config.attributes['connection'] = connection
        cmd(config, *args, **kwargs)


def upgrade(revision: str = 'head', url: str | None = None) -> None:
    """Upgrade the database at ``url`` to ``revision``.

    :param revision: an alembic revision id, ``head`` or a relative
        step such as ``+1``.
    :param url: the database URL; ``[database] connection`` when None.
    :raises cyborg.common.exception.DBNotReachable: on a failed connect.
    :raises alembic.util.CommandError: for an unknown revision.
    :raises cyborg.common.exception.ForeignDatabase: when the database
        is neither empty nor cyborg's.
    """
    _run(url, command.upgrade, revision, refuse_foreign=True)


def upgrade_on(connection: sa.engine.Connection,
               revision: str = 'head') -> None:
    """Upgrade through ``connection``, whatever else the database holds:
    for an adoption, which has set the other tables aside."""
    config = _config()
    config.attributes['connection'] = connection
    command.upgrade(config, revision)


def stamp(revision: str, url: str | None = None) -> None:
    """Record ``revision`` as the database's version, running nothing.

    For a database whose tables were created by other means.

    :raises cyborg.common.exception.DBNotReachable: on a failed connect.
    :raises alembic.util.CommandError: for an unknown revision.
    """
    _run(url, command.stamp, revision)


def version(url: str | None = None) -> str | None:
    """The database's current revision; None when it has none yet.

    :raises cyborg.common.exception.DBNotReachable: on a failed connect.
    """
    with connect(url) as connection:
        context = alembic_migration.MigrationContext.configure(connection)
        return context.get_current_revision()


def head() -> str:
    """The newest revision in the source tree."""
    current = _script().get_current_head()
    if current is None:
        raise RuntimeError('cyborg/db/alembic/versions holds no migration')
    return current


def revision(message: str, autogenerate: bool = False,
             url: str | None = None) -> None:
    """Write a new migration script under ``cyborg/db/alembic/versions``.

    Revision ids are sequential (``0002``, ``0003``, ...) so that the
    history reads in order. With ``autogenerate``, the script holds the
    difference between the models and the database at ``url``, which must
    be at head.

    :raises cyborg.common.exception.DBNotReachable: on a failed connect.
    """
    rev_id = '%04d' % (len(list(_script().walk_revisions())) + 1)
    if autogenerate:
        _run(url, command.revision, message=message, autogenerate=True,
             rev_id=rev_id)
    else:
        command.revision(_config(), message=message, rev_id=rev_id)
