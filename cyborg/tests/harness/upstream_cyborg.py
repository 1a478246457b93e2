"""Databases made by the real upstream OpenStack Cyborg 17.0.0, for tests.

``venv()`` installs ``openstack-cyborg`` from PyPI into a virtual
environment of its own, once per machine (``cached_venv``). ``dbsync``
runs upstream's own migrations on a database (to head, or to an older
revision); ``migrate`` does the same on PostgreSQL too, where upstream's
migrations cannot get to head alone (see POSTGRESQL_LAST); ``schema``
and ``copy_schema`` give an empty database upstream's schema at its head.
``upstream_fill`` runs upstream's services in that environment.

Where the environment cannot be built (no registry), the caller is
skipped, or failed under CYBORG_TEST_REQUIRE_SERVICES=1.
"""
import pathlib
import shutil
import subprocess
from typing import Any

import pytest
import sqlalchemy as sa

from cyborg.tests.harness import cached_venv
from cyborg.tests.harness import gate_stack

VERSION = '17.0.0'
# Upstream's alembic head at VERSION.
HEAD = 'b47c8f2d1e3a'
# Upstream's migrations, oldest first.
REVISIONS = (
    'f50980397351', 'd6f033d8fa5b', 'ede4e3f1a232', '589ff20545b7',
    'c1b5abada09c', '57539722e5cf', '22fb1af2d51e', '7b696fd94949',
    '62bcf2610c5d', '7a4fd0fc3f8c', '60d8ac91fd20', '7e6f1f107f2b',
    '899cead40bc9', '4cc1d79978fc', '6c77bd6afea5', '9625668549b5',
    'a35b4295a0e5', HEAD)
# On PostgreSQL upstream's dbsync reaches POSTGRESQL_LAST and no further:
# POSTGRESQL_BROKEN adds a column of an enum type without a name, which
# PostgreSQL cannot create, and the whole upgrade is rolled back (from an
# empty database, nothing is left). Its migrations also widen enums by
# MySQL's MODIFY alone, so PostgreSQL lacks these labels of its models.
POSTGRESQL_LAST = '4cc1d79978fc'
POSTGRESQL_BROKEN = '6c77bd6afea5'
POSTGRESQL_MISSING_LABELS = {
    'device_type': ('AICHIP', 'QAT', 'NIC', 'SSD', 'MDEV', 'PCI', 'NVME'),
    'attach_type': ('TEST_PCI',),
    'state': ('BindStarted', 'Unbound', 'Deleting'),
}
# On SQLite it stops after SQLITE_LAST (upstream's migrations use MySQL's
# ALTER ... MODIFY); SQLite keeps each migration's DDL, so the database is
# left at SQLITE_LAST.
SQLITE_LAST = 'ede4e3f1a232'
REQUIREMENTS = (f'openstack-cyborg=={VERSION}', 'pymysql', 'psycopg2-binary')
# Seconds for a dbsync.
DBSYNC_TIMEOUT = 120


@pytest.fixture(scope='session')
def upstream_venv() -> pathlib.Path:
    """Upstream's environment, built (or checked) once per process."""
    return venv()


def venv_path() -> pathlib.Path:
    return cached_venv.cache_dir() / f'openstack-cyborg-{VERSION}'


def venv() -> pathlib.Path:
    """The environment with upstream installed, built on first use."""
    return cached_venv.ensure(venv_path(), REQUIREMENTS,
                              'cyborg.cmd.dbsync, pymysql, psycopg2',
                              f'openstack-cyborg {VERSION}')


def write_config(workdir: pathlib.Path, database_url: str,
                 **sections: dict[str, Any]) -> pathlib.Path:
    """An upstream configuration file in ``workdir``: the database, logs to
    stderr, and ``sections`` over that."""
    conf: dict[str, dict[str, Any]] = {
        'DEFAULT': {'debug': 'true', 'use_stderr': 'true'},
        'database': {'connection': database_url},
        'oslo_concurrency': {'lock_path': str(workdir / 'locks')},
    }
    for name, values in sections.items():
        conf.setdefault(name, {}).update(values)
    return gate_stack.write_conf(workdir / 'cyborg.conf', conf)


def run_dbsync(database_url: str, workdir: pathlib.Path,
               *args: str) -> subprocess.CompletedProcess[str]:
    """Upstream's ``cyborg-dbsync <args>`` on ``database_url``, whatever
    its outcome."""
    conf = write_config(workdir, database_url)
    return subprocess.run(
        [str(venv() / 'bin' / 'cyborg-dbsync'), '--config-file', str(conf),
         *args], env=cached_venv.env(), capture_output=True, text=True,
        timeout=DBSYNC_TIMEOUT, check=False)


def dbsync(database_url: str, workdir: pathlib.Path,
           revision: str = 'head', command: str = 'upgrade') -> str:
    """Upstream's ``cyborg-dbsync upgrade`` (or ``stamp``) to ``revision``
    on ``database_url``, which must succeed; returns its output."""
    args = [command] + ([] if revision == 'head' else
                        ['--revision', revision])
    done = run_dbsync(database_url, workdir, *args)
    output = done.stdout + done.stderr
    assert done.returncode == 0, (
        f'upstream dbsync {" ".join(args)} failed:\n{output[-3000:]}')
    return output


def migrate(database_url: str, workdir: pathlib.Path,
            revision: str = 'head') -> None:
    """``dbsync``, also on PostgreSQL, where upstream's migrations stop
    after POSTGRESQL_LAST: past it, the schema is repaired by hand
    (``_repair_postgresql``) and upstream's dbsync stamped over the
    broken revision and run on from there."""
    if (not database_url.startswith('postgresql')
            or REVISIONS.index(revision if revision != 'head' else HEAD)
            <= REVISIONS.index(POSTGRESQL_LAST)):
        dbsync(database_url, workdir, revision)
        return
    dbsync(database_url, workdir, POSTGRESQL_LAST)
    _repair_postgresql(database_url)
    dbsync(database_url, workdir, POSTGRESQL_BROKEN, command='stamp')
    if revision != POSTGRESQL_BROKEN:
        dbsync(database_url, workdir, revision)


def _repair_postgresql(database_url: str) -> None:
    """What upstream's 17.0.0 models declare and its migrations never made
    on PostgreSQL: the labels its enum migrations add through MySQL's
    MODIFY only, and the device status column of POSTGRESQL_BROKEN, under
    the type name its model gives. Not upstream's: a PostgreSQL database
    of upstream 17.0.0 exists only with a repair like this one, whose
    details are whoever made it's."""
    engine = sa.create_engine(database_url, isolation_level='AUTOCOMMIT')
    try:
        with engine.connect() as conn:
            for type_name, labels in POSTGRESQL_MISSING_LABELS.items():
                for label in labels:
                    conn.execute(sa.text(
                        f"ALTER TYPE {type_name} ADD VALUE IF NOT EXISTS "
                        f"'{label}'"))
            conn.execute(sa.text(
                "CREATE TYPE device_status AS ENUM ('enabled', "
                "'maintaining')"))
            conn.execute(sa.text(
                'ALTER TABLE devices ADD COLUMN status device_status '
                'NOT NULL'))
    finally:
        engine.dispose()


def schema(database_url: str, workdir: pathlib.Path) -> None:
    """Upstream's empty schema at its head on ``database_url``: by its
    migrations on the servers (``migrate``), by its ``create_schema``
    (its models, stamped at its head) on SQLite, where its migrations
    stop at the first ALTER."""
    if database_url.startswith('sqlite'):
        dbsync(database_url, workdir, command='create_schema')
    else:
        migrate(database_url, workdir)


def copy_schema(source_url: str, target_url: str) -> None:
    """Make the empty database at ``target_url`` hold what the one at
    ``source_url`` holds (an upstream schema, made once by ``schema``):
    a tenth of the time of running upstream's dbsync again.

    PostgreSQL copies the database whole (``CREATE DATABASE ...
    TEMPLATE``); MariaDB runs each table's own ``SHOW CREATE TABLE`` and
    copies the rows; SQLite copies the file.
    """
    source = sa.engine.make_url(source_url)
    target = sa.engine.make_url(target_url)
    backend = source.get_backend_name()
    if backend == 'sqlite':
        shutil.copyfile(str(source.database), str(target.database))
        return
    if backend == 'postgresql':
        admin = sa.create_engine(target.set(database='postgres'),
                                 isolation_level='AUTOCOMMIT')
        try:
            with admin.connect() as conn:
                conn.execute(sa.text(f'DROP DATABASE {target.database}'))
                conn.execute(sa.text(
                    f'CREATE DATABASE {target.database} TEMPLATE '
                    f'{source.database}'))
        finally:
            admin.dispose()
        return
    engine = sa.create_engine(target)
    try:
        with engine.begin() as conn:
            conn.execute(sa.text('SET FOREIGN_KEY_CHECKS = 0'))
            tables = conn.scalars(sa.text(
                f'SHOW TABLES FROM `{source.database}`')).all()
            for table in tables:
                ddl = conn.execute(sa.text(
                    f'SHOW CREATE TABLE `{source.database}`.`{table}`')
                ).one()[1]
                conn.execute(sa.text(ddl))
                conn.execute(sa.text(
                    f'INSERT INTO `{table}` SELECT * FROM '
                    f'`{source.database}`.`{table}`'))
            conn.execute(sa.text('SET FOREIGN_KEY_CHECKS = 1'))
    finally:
        engine.dispose()


def alembic_version(database_url: str) -> list[str]:
    engine = sa.create_engine(database_url)
    try:
        with engine.connect() as conn:
            return [row[0] for row in conn.execute(
                sa.text('SELECT version_num FROM alembic_version'))]
    finally:
        engine.dispose()
