"""The migrations build exactly the schema of cyborg.db.models."""
from collections.abc import Iterator

import pytest
import sqlalchemy as sa
from alembic import autogenerate
from alembic import migration as alembic_migration
from alembic import util as alembic_util

from cyborg.common import exception
from cyborg.db import migration
from cyborg.db import models


@pytest.fixture
def engine(empty_db_url) -> Iterator[sa.engine.Engine]:
    """An engine on the empty database, for looking at what was built."""
    engine = sa.create_engine(empty_db_url, poolclass=sa.pool.NullPool)
    yield engine
    engine.dispose()


def _schema(engine: sa.engine.Engine) -> dict[str, object]:
    inspector = sa.inspect(engine)
    return {
        name: (
            [(c['name'], str(c['type']), c['nullable'])
             for c in inspector.get_columns(name)],
            sorted(i['name'] for i in inspector.get_indexes(name)),
            sorted(u['name'] for u in inspector.get_unique_constraints(name)),
            sorted(f['name'] for f in inspector.get_foreign_keys(name)),
        )
        for name in inspector.get_table_names()}


def test_upgrade_from_empty_to_head(empty_db_url, engine):
    assert migration.version(url=empty_db_url) is None

    migration.upgrade('head', url=empty_db_url)

    assert migration.version(url=empty_db_url) == migration.head()
    assert set(sa.inspect(engine).get_table_names()) == (
        set(models.Base.metadata.tables) | {'alembic_version'})


def test_models_match_migrations(empty_db_url, engine):
    migration.upgrade('head', url=empty_db_url)

    with engine.connect() as connection:
        context = alembic_migration.MigrationContext.configure(
            connection, opts={'compare_type': True})
        diff = autogenerate.compare_metadata(context, models.Base.metadata)

    assert diff == []


def test_check_constraints_match(empty_db_url, engine):
    # compare_metadata() does not look at CHECK constraints, which are all
    # that keeps a non-native enum column within its values.
    migration.upgrade('head', url=empty_db_url)
    inspector = sa.inspect(engine)

    for table in models.Base.metadata.sorted_tables:
        expected = {
            c.name: c.columns[0].type.enums for c in table.constraints
            if isinstance(c, sa.CheckConstraint)}
        reflected = {c['name']: c['sqltext']
                     for c in inspector.get_check_constraints(table.name)}
        assert sorted(reflected) == sorted(expected), table.name
        for name, values in expected.items():
            assert all(f"'{v}'" in reflected[name] for v in values), name


def test_check_constraint_rejects_unknown_value(empty_db_url, engine):
    migration.upgrade('head', url=empty_db_url)

    with engine.begin() as connection:
        services = sa.Table('services', sa.MetaData(),
                            autoload_with=connection)
    insert = services.insert().values(
        host='h', binary='cyborg-api', version='1',
        last_seen_at=sa.func.now(), created_at=sa.func.now())

    # MariaDB reports a failed CHECK as an OperationalError, the others as
    # an IntegrityError; each names the constraint.
    with pytest.raises(sa.exc.DBAPIError, match='ck_services_binary'):
        with engine.begin() as connection:
            connection.execute(insert)


def test_upgrade_twice_is_a_noop(empty_db_url, engine):
    migration.upgrade('head', url=empty_db_url)
    before = _schema(engine)

    migration.upgrade('head', url=empty_db_url)

    assert migration.version(url=empty_db_url) == migration.head()
    assert _schema(engine) == before


def test_stamp(empty_db_url, engine):
    migration.stamp('head', url=empty_db_url)

    assert migration.version(url=empty_db_url) == migration.head()
    # Stamping records the revision and runs nothing.
    assert sa.inspect(engine).get_table_names() == ['alembic_version']

    migration.stamp('base', url=empty_db_url)

    assert migration.version(url=empty_db_url) is None


def test_unknown_revision(empty_db_url):
    with pytest.raises(alembic_util.CommandError):
        migration.upgrade('nope', url=empty_db_url)
    with pytest.raises(alembic_util.CommandError):
        migration.stamp('nope', url=empty_db_url)


def test_unreachable_database_hides_the_password():
    url = 'mysql+pymysql://root:secret@127.0.0.1:1/nope'

    with pytest.raises(exception.DBNotReachable) as info:
        migration.version(url=url)

    assert info.value.kwargs['url'] == 'mysql+pymysql://root:***@127.0.0.1:1/nope'
    assert 'secret' not in str(info.value)
    assert '\n' not in info.value.kwargs['reason']


def test_sqlite_directory_is_created(tmp_path):
    url = f'sqlite:///{tmp_path}/state/db/cyborg.sqlite'

    migration.upgrade('head', url=url)

    assert (tmp_path / 'state' / 'db' / 'cyborg.sqlite').exists()
    assert migration.version(url=url) == migration.head()


def _host_columns() -> list[tuple[str, str]]:
    return [(table.name, column.name)
            for table in models.Base.metadata.sorted_tables
            for column in table.columns
            if isinstance(column.type, models.HostName)]


def test_host_names_compare_exactly(empty_db_url, engine):
    # MySQL's and MariaDB's default collations ignore case and trailing
    # spaces; every host column must not, on every database.
    migration.upgrade('head', url=empty_db_url)
    assert len(_host_columns()) == 7
    if engine.dialect.name == 'mysql':
        with engine.connect() as connection:
            found = dict(connection.execute(sa.text(
                'SELECT CONCAT(table_name, ".", column_name), collation_name'
                ' FROM information_schema.columns'
                ' WHERE table_schema = DATABASE()'
                " AND collation_name IS NOT NULL")).all())
        collation = models.host_collation(engine.dialect)
        assert {f'{t}.{c}': found[f'{t}.{c}'] for t, c in _host_columns()
                } == {f'{t}.{c}': collation for t, c in _host_columns()}
    services = models.Service.__table__
    with engine.begin() as connection:
        connection.execute(services.insert().values(
            host='relnode1', binary='cyborg-agent', version='1',
            hostname='Node1', last_seen_at=sa.func.now(),
            created_at=sa.func.now()))
        for host in ('RELNODE1', 'relnode1 ', 'relnode1  ', 'Relnode1'):
            assert connection.execute(sa.select(services.c.host).where(
                services.c.host == host)).all() == [], host
        assert connection.execute(sa.select(services.c.host).where(
            services.c.hostname == 'node1')).all() == []
        assert connection.execute(sa.select(services.c.host).where(
            services.c.host == 'relnode1')).all() == [('relnode1',)]
