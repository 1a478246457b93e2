"""cyborg-dbsync on a database that is neither empty nor cyborg's.

Each case is made here by hand: what is refused, and that the message
names what was found. Telling what a database holds reads its tables the
same way on the three backends; the first case runs on each of them,
the others on SQLite. Adoption of a real OpenStack
Cyborg database is in test_adoption.py.
"""
import subprocess

import pytest
import sqlalchemy as sa

from cyborg.db import migration
from cyborg.db import upstream
from cyborg.tests import utils


def _tables(url: str) -> set[str]:
    engine = sa.create_engine(url)
    try:
        return set(sa.inspect(engine).get_table_names())
    finally:
        engine.dispose()


def _version_table(revision: str) -> tuple[str, str]:
    return ('CREATE TABLE alembic_version (version_num VARCHAR(32) '
            'NOT NULL PRIMARY KEY)',
            f"INSERT INTO alembic_version VALUES ('{revision}')")


def _one_line(result: subprocess.CompletedProcess) -> str:
    assert result.returncode == 1, result.stdout
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and 'Traceback' not in result.stderr, \
        result.stderr
    return lines[0]


def test_tables_without_a_version_are_refused(tmp_path, empty_db_url):
    utils.execute_sql(empty_db_url,
                      'CREATE TABLE instances (id INTEGER PRIMARY KEY)',
                      'CREATE TABLE flavors (id INTEGER PRIMARY KEY)')
    for command in ('upgrade', 'adopt'):
        line = _one_line(utils.dbsync(tmp_path, empty_db_url, command))
        assert '2 table(s) without a schema version: flavors, ' \
            'instances' in line, line
    assert _tables(empty_db_url) == {'flavors', 'instances'}


SQLITE = pytest.mark.parametrize('backend', ['sqlite'], indirect=True)


@SQLITE
def test_an_older_upstream_is_told_to_upgrade_first(tmp_path, empty_db_url):
    utils.execute_sql(empty_db_url, *_version_table('6c77bd6afea5'),
                      'CREATE TABLE devices (id INTEGER PRIMARY KEY)')
    for command in ('upgrade', 'adopt'):
        line = _one_line(utils.dbsync(tmp_path, empty_db_url, command))
        assert 'an OpenStack Cyborg database at migration 6c77bd6afea5' \
            in line, line
        assert f'({upstream.UPSTREAM_HEAD})' in line
        assert '"cyborg-dbsync upgrade" first' in line
    assert _tables(empty_db_url) == {'alembic_version', 'devices'}


@SQLITE
def test_an_unknown_revision_is_named(tmp_path, empty_db_url):
    utils.execute_sql(empty_db_url, *_version_table('deadbeef0042'))
    line = _one_line(utils.dbsync(tmp_path, empty_db_url, 'upgrade'))
    assert 'schema version deadbeef0042, which is neither' in line, line


@SQLITE
def test_upstream_head_without_its_tables(tmp_path, empty_db_url):
    utils.execute_sql(empty_db_url, *_version_table(upstream.UPSTREAM_HEAD))
    line = _one_line(utils.dbsync(tmp_path, empty_db_url, 'adopt'))
    assert 'without its tables devices, controlpath_ids' in line, line


@SQLITE
def test_adopt_on_an_empty_database_changes_nothing(tmp_path, empty_db_url):
    line = _one_line(utils.dbsync(tmp_path, empty_db_url, 'adopt'))
    assert 'it holds nothing, not an OpenStack Cyborg 17.0.0 database' \
        in line, line
    assert _tables(empty_db_url) == set()


@SQLITE
def test_adopt_on_ours_is_a_no_op(tmp_path, empty_db_url):
    migration.upgrade(url=empty_db_url)
    result = utils.dbsync(tmp_path, empty_db_url, 'adopt')
    assert result.returncode == 0, result.stderr
    assert "already has cyborg's schema (revision " \
        f'{migration.head()}): nothing to adopt' in result.stdout


@SQLITE
@pytest.mark.parametrize('command', ['upgrade', 'adopt --dry-run'])
def test_a_version_table_alone_counts_as_empty(tmp_path, empty_db_url,
                                               command):
    # What an upgrade interrupted before its first migration leaves.
    utils.execute_sql(empty_db_url,
                      'CREATE TABLE alembic_version (version_num '
                      'VARCHAR(32) NOT NULL PRIMARY KEY)')
    result = utils.dbsync(tmp_path, empty_db_url, *command.split())
    if command == 'upgrade':
        assert result.returncode == 0, result.stderr
        assert migration.version(empty_db_url) == migration.head()
    else:
        assert 'it holds nothing' in _one_line(result)
