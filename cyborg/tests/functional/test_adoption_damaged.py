"""cyborg-dbsync adopt on damaged OpenStack Cyborg 17.0.0 databases.

Each database is the seeded upstream schema of test_adoption.py, damaged
by direct SQL the way a hand-edited or half-restored database is: the
dry run must name what is wrong, and adopt must refuse before it renames
anything. A failure after the renames gives the upstream tables their
names back, whether it happens in the run itself or is found by the
next one.
"""
import pytest
import sqlalchemy as sa
from sqlalchemy import event

from cyborg.common import exception
from cyborg.db import adoption
from cyborg.db import migration
from cyborg.db import upstream
from cyborg.tests import utils
from cyborg.tests.functional.test_adoption import _dump
from cyborg.tests.functional.test_adoption import _seed
from cyborg.tests.harness.upstream_cyborg import upstream_venv  # noqa: F401

pytestmark = pytest.mark.usefixtures('upstream_venv')

# The seeded request made Initial (test_adoption.REQUESTS), and attribute.
INITIAL_ARQ = 4
ATTRIBUTE = 2



def _unknown_state(url: str, backend: str) -> None:
    # Upstream's column is an enum on the servers: widened as a hand
    # repair would, so that it can hold a state cyborg does not have.
    widen = {'mysql': 'MODIFY state VARCHAR(32) NOT NULL',
             'postgresql': 'ALTER COLUMN state TYPE VARCHAR(32)'}
    widened = ([f'ALTER TABLE extended_accelerator_requests '
                f'{widen[backend]}'] if backend in widen else [])
    utils.execute_sql(url, *widened,
                      "UPDATE extended_accelerator_requests SET state = "
                      f"'Frozen' WHERE id = {INITIAL_ARQ}")


def _broken_link(url: str, backend: str) -> None:
    # What a restore with checks off leaves (SQLite's are off already).
    off = {'mysql': 'SET FOREIGN_KEY_CHECKS = 0',
           'postgresql': 'SET session_replication_role = replica'}
    utils.execute_sql(url, *([off[backend]] if backend in off else []),
                      f'UPDATE attributes SET deployable_id = 99 '
                      f'WHERE id = {ATTRIBUTE}')


def _long_key(url: str, backend: str) -> None:
    # Upstream's key is TEXT; cyborg's holds 255 characters.
    engine = sa.create_engine(url)
    try:
        attributes = sa.Table('attributes', sa.MetaData(),
                              autoload_with=engine)
        with engine.begin() as conn:
            conn.execute(sa.update(attributes).where(
                attributes.c.id == ATTRIBUTE).values(key='k' * 300))
    finally:
        engine.dispose()


def _table(name: str):
    def make(url: str, backend: str) -> None:
        utils.execute_sql(url,
                          f'CREATE TABLE {name} (id INTEGER PRIMARY KEY)')
    return make


def _no_column(url: str, backend: str) -> None:
    utils.execute_sql(url, 'ALTER TABLE devices DROP COLUMN model')


def _leftover(holds: str):
    def make(url: str, backend: str) -> None:
        utils.execute_sql(url, 'CREATE TABLE upstream_alembic_version '
                          '(version_num VARCHAR(32) NOT NULL)',
                          'INSERT INTO upstream_alembic_version '
                          f"VALUES ('{holds}')")
    return make


_STATE = (f"extended_accelerator_requests id {INITIAL_ARQ}: state 'Frozen' "
          'is not one cyborg knows (it has Initial, BindStarted, Bound, '
          'Unbound, BindFailed, UnbindFailed, Deleting): set one of those, '
          'or delete the row')


def _both(*damages):
    def make(url: str, backend: str) -> None:
        for damage in damages:
            damage(url, backend)
    return make


# name -> (damage, what the dry run and adopt must say). Damages that
# one run reports together share a database: a dbsync is 2 s of CPU.
DAMAGES = {
    'rows cyborg refuses': (
        _both(_unknown_state, _broken_link, _long_key), (
            _STATE,
            f'attributes id {ATTRIBUTE}: deployable_id 99 names no '
            'deployables row that comes across',
            f'attributes id {ATTRIBUTE}: key is 300 characters long (as '
            'cyborg stores it), and cyborg keeps at most 255: shorten it, '
            'or delete the row')),
    'tables in the way': (
        _both(_table('services'), _table('upstream_devices')), (
            "table services exists, and cyborg's schema creates a table of "
            'that name',
            'table upstream_devices exists, and the adoption sets table '
            'devices aside under that name')),
    'missing column': (
        _no_column, (
            'table devices has no column model, which OpenStack Cyborg '
            "17.0.0's has",)),
    'leftover version of no adoption': (
        _leftover('garbage'), (
            "table upstream_alembic_version holds 'garbage', where an "
            "adoption leaves b47c8f2d1e3a (tables set aside) or 'adopted'",)),
    'leftover version without renamed tables': (
        _leftover(upstream.UPSTREAM_HEAD), (
            'table upstream_alembic_version says the OpenStack Cyborg tables '
            'were set aside, but upstream_devices, upstream_controlpath_ids',
            )),
}


@pytest.mark.parametrize('damage', DAMAGES)
def test_the_dry_run_names_the_damage_and_adopt_changes_nothing(
        tmp_path, backend, upstream_url, damage):
    _seed(upstream_url)
    damage_fn, said = DAMAGES[damage]
    damage_fn(upstream_url, backend)
    before = _dump(upstream_url)
    for args in (('adopt', '--dry-run'), ('adopt',)):
        result = utils.dbsync(tmp_path, upstream_url, *args)
        assert result.returncode == 1, result.stdout
        stderr = ' '.join(result.stderr.split())
        for line in said:
            assert line in stderr, stderr
        assert 'Nothing was changed.' in stderr
        # Every table under its own name, every row as it was.
        assert _dump(upstream_url) == before


def _indexes(url: str) -> dict[str, list[str]]:
    """Each table's index names: PostgreSQL's are renamed with them."""
    engine = sa.create_engine(url)
    try:
        inspector = sa.inspect(engine)
        return {t: sorted(str(i['name']) for i in inspector.get_indexes(t))
                for t in inspector.get_table_names()}
    finally:
        engine.dispose()


def test_a_failure_in_the_copy_gives_the_tables_their_names_back(
        tmp_path, upstream_url, monkeypatch):
    made = _seed(upstream_url)
    before, indexes = _dump(upstream_url), _indexes(upstream_url)
    copy = adoption._copy

    def failing_copy(connection, plan):
        # Some rows are in when the requests' insert fails.
        def fail(conn, cursor, statement, *args):
            if statement.startswith('INSERT INTO accelerator_requests'):
                raise RuntimeError('the injected failure')
        event.listen(connection, 'before_cursor_execute', fail)
        copy(connection, plan)

    monkeypatch.setattr(adoption, '_copy', failing_copy)
    with pytest.raises(exception.AdoptionRolledBack,
                       match='the injected failure'):
        adoption.adopt(upstream_url, say=lambda _: None)
    assert _dump(upstream_url) == before
    assert _indexes(upstream_url) == indexes

    monkeypatch.undo()
    result = utils.dbsync(tmp_path, upstream_url, 'adopt')
    assert result.returncode == 0, result.stderr
    arqs = _dump(upstream_url)['accelerator_requests']
    assert sorted(r['uuid'] for r in arqs) == sorted(
        made['extended_accelerator_requests'])


def test_a_rerun_that_cannot_copy_gives_the_tables_their_names_back(
        tmp_path, backend, upstream_url):
    _seed(upstream_url)
    _unknown_state(upstream_url, backend)
    before, indexes = _dump(upstream_url), _indexes(upstream_url)
    # What a run killed after its renames and migrations leaves.
    with migration.connect(upstream_url) as conn:
        adoption._rename(conn)
    with migration.connect(upstream_url) as conn:
        migration.upgrade_on(conn)
    half = _dump(upstream_url)

    dry = utils.dbsync(tmp_path, upstream_url, 'adopt', '--dry-run')
    assert dry.returncode == 1
    assert _STATE in ' '.join(dry.stderr.split())
    assert _dump(upstream_url) == half

    result = utils.dbsync(tmp_path, upstream_url, 'adopt')
    assert result.returncode == 1
    stderr = ' '.join(result.stderr.split())
    assert _STATE in stderr
    assert ('Its OpenStack Cyborg tables have their own names back and '
            "cyborg's tables were dropped") in stderr
    assert _dump(upstream_url) == before
    assert _indexes(upstream_url) == indexes
