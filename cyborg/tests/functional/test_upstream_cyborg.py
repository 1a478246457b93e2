"""The upstream Cyborg harness: upstream's own migrations and services make
the databases that ``cyborg-dbsync adopt`` is to take over."""
import json
import uuid
from collections.abc import Iterator

import pytest

from cyborg.tests import conftest
from cyborg.tests import utils
from cyborg.tests.harness import upstream_cyborg
from cyborg.tests.harness import upstream_fill
from cyborg.tests.harness.placement_server import Placement
from cyborg.tests.harness.upstream_cyborg import upstream_venv  # noqa: F401

# Every test runs upstream's own commands from its environment.
pytestmark = pytest.mark.usefixtures('upstream_venv')

# Upstream's migrations and services on the two server databases (its
# migrations do not run on SQLite, see test_upstream_dbsync_fails_on_sqlite).
SERVERS = [pytest.param('mysql', marks=[pytest.mark.mysql,
                                        pytest.mark.flow]),
           pytest.param('postgresql', marks=[pytest.mark.postgresql,
                                             pytest.mark.flow])]


@pytest.fixture
def server_db_url(request, tmp_path) -> Iterator[str]:
    yield from conftest.empty_database_url(request.param, tmp_path)


# Upstream's head on PostgreSQL takes the repair; an older revision on
# MariaDB is what an operator is told to upgrade first. (Upstream's head
# on MariaDB is made for every adoption test.)
@pytest.mark.parametrize('server_db_url, revision', [
    pytest.param('postgresql', 'head', marks=pytest.mark.postgresql),
    pytest.param('mysql', '6c77bd6afea5', marks=pytest.mark.mysql)],
    indirect=['server_db_url'])
def test_migrate(server_db_url, revision, tmp_path):
    upstream_cyborg.migrate(server_db_url, tmp_path, revision)
    expected = upstream_cyborg.HEAD if revision == 'head' else revision
    assert upstream_cyborg.alembic_version(server_db_url) == [expected]


@pytest.mark.postgresql
@pytest.mark.parametrize('server_db_url', ['postgresql'], indirect=True)
def test_upstream_dbsync_fails_on_postgresql(server_db_url, tmp_path):
    done = upstream_cyborg.run_dbsync(server_db_url, tmp_path, 'upgrade')
    output = done.stdout + done.stderr
    assert done.returncode != 0, output
    assert 'PostgreSQL Enum type requires a name' in output, output[-2000:]
    # The whole upgrade was one transaction: nothing is left.
    assert utils.query(server_db_url, "SELECT tablename FROM pg_tables "
                                      "WHERE schemaname = 'public'") == []
    upstream_cyborg.dbsync(server_db_url, tmp_path,
                           upstream_cyborg.POSTGRESQL_LAST)
    assert upstream_cyborg.alembic_version(server_db_url) == [
        upstream_cyborg.POSTGRESQL_LAST]
    labels = {row['typname']: row['labels'].split(',') for row in utils.query(
        server_db_url,
        "SELECT t.typname, string_agg(e.enumlabel, ',' ORDER BY "
        "e.enumsortorder) AS labels FROM pg_type t JOIN pg_enum e "
        "ON e.enumtypid = t.oid GROUP BY t.typname")}
    assert labels['state'] == ['Initial', 'Bound', 'BindFailed']
    assert labels['device_type'] == ['GPU', 'FPGA']
    assert labels['attach_type'] == ['PCI', 'MDEV']


def test_upstream_dbsync_fails_on_sqlite(tmp_path):
    url = f'sqlite:///{tmp_path}/cyborg.sqlite'
    done = upstream_cyborg.run_dbsync(url, tmp_path, 'upgrade')
    assert done.returncode != 0
    assert 'near "ALTER": syntax error' in done.stderr, done.stderr[-2000:]
    assert upstream_cyborg.alembic_version(url) == [
        upstream_cyborg.SQLITE_LAST]


# On MariaDB: test_upstream_switch_over fills both databases again.
@pytest.mark.rabbit
@pytest.mark.parametrize('server_db_url', SERVERS[:1], indirect=True)
def test_fill(server_db_url, placement_url, rabbit_url, tmp_path):
    with upstream_fill.upstream_database(
            server_db_url, placement_url, rabbit_url,
            tmp_path / 'upstream') as filled:
        logs = filled.logs()
        assert upstream_cyborg.alembic_version(server_db_url) == [
            upstream_cyborg.HEAD]
        states = sorted(arq.state for arq in filled.arqs)
        assert states == sorted(
            ['Initial', 'Bound', 'Bound', 'Bound', 'Unbound', 'BindFailed',
             'BindStarted', 'Deleting']), logs

        # Read again from upstream's tables, not from the harness.
        arqs = {a['uuid']: a for a in utils.query(
            server_db_url,
            'SELECT a.uuid, a.state, a.instance_uuid, a.device_rp_uuid, '
            'a.attach_handle_id, a.deployable_id, h.in_use, h.uuid AS ah '
            'FROM extended_accelerator_requests a LEFT JOIN attach_handles '
            'h ON h.id = a.attach_handle_id')}
        assert {u: a['state'] for u, a in arqs.items()} == {
            arq.uuid: arq.state for arq in filled.arqs}
        (device,) = filled.devices
        (deployable,) = device.deployables
        assert deployable.name == upstream_fill.device_rp_name(
            filled.host)
        # Upstream names the provider's uuid after the deployable's name.
        assert deployable.rp_uuid == str(
            uuid.uuid3(uuid.NAMESPACE_DNS, deployable.name))
        assert len(deployable.handles) == upstream_fill.FAKE_HANDLES
        bound = filled.arqs_in('Bound')
        assert len({arq.instance_uuid for arq in bound}) == 2
        for arq in bound:
            row = arqs[arq.uuid]
            assert row['in_use'], (arq, logs)
            assert row['device_rp_uuid'] == deployable.rp_uuid, logs
            assert row['ah'] == arq.attach_handle_uuid, logs
            assert json.loads(arq.attach_info)['bus'] == '0c'
        in_use = {h.uuid for h in deployable.handles if h.in_use}
        assert in_use == {arq.attach_handle_uuid for arq in bound}, logs
        (started,) = filled.arqs_in('BindStarted')
        assert started.instance_uuid and started.attach_handle_uuid is None
        assert started.made_by == 'sql'
        for state in ('Initial', 'Unbound', 'Deleting'):
            (arq,) = filled.arqs_in(state)
            assert arq.instance_uuid is None and arq.attach_handle_uuid is None
        (failed,) = filled.arqs_in('BindFailed')
        assert failed.instance_uuid, logs
        assert failed.attach_handle_uuid is None, logs
        assert arqs[failed.uuid]['device_rp_uuid'] == deployable.rp_uuid

        names = {p.name: p for p in filled.profiles}
        assert names['upstream-fpga'].description
        assert any(k.startswith('trait:')
                   for k in names['upstream-fpga-trait'].groups[0])

        placement = Placement(placement_url)
        provider = placement.get(f'/resource_providers/{deployable.rp_uuid}')
        assert provider['name'] == deployable.name
        assert provider['parent_provider_uuid'] == filled.compute_node_uuid
        usages = placement.get(
            f'/resource_providers/{deployable.rp_uuid}/usages')['usages']
        assert usages == {'FPGA': len(bound)}
        for allocation in filled.allocations:
            held = placement.get(
                f'/allocations/{allocation.consumer_uuid}')['allocations']
            assert {rp: a['resources'] for rp, a in held.items()} == \
                allocation.resources
