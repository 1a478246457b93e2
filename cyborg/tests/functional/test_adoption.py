"""cyborg-dbsync adopt on schemas made by the real OpenStack Cyborg 17.0.0.

The schema comes from upstream's own migrations (``upstream_cyborg``);
the rows are written here, with the formats upstream's fake driver and
API write, so that each case is exact. The whole switch-over, with rows
made by upstream's own services, is in test_upstream_switch_over.py.
"""
import json
import uuid

import pytest
import sqlalchemy as sa

from cyborg import context as cyborg_context
from cyborg.common import exception
from cyborg.db import adoption
from cyborg.db import adoption_plan
from cyborg.db import migration
from cyborg.db import upstream
from cyborg.db.api import inventory
from cyborg.tests import conftest
from cyborg.tests import utils
from cyborg.tests.harness.upstream_cyborg import upstream_venv  # noqa: F401

pytestmark = pytest.mark.usefixtures('upstream_venv')

RP = '11111111-2222-3333-4444-555555555555'
INSTANCES = ('9a9a9a9a-0000-0000-0000-000000000001',
             '9a9a9a9a-0000-0000-0000-000000000002')
HOST = 'h1'
# (state, attach handle id, instance) of each request made.
REQUESTS = (('Bound', 1, 0), ('Bound', 2, 0), ('Bound', 3, 1),
            ('Initial', None, None), ('Unbound', None, None),
            ('BindFailed', None, 1), ('BindStarted', 4, 1),
            ('Deleting', None, None))


def _pci(device: int, function: int) -> str:
    # As upstream's fake driver writes it.
    return json.dumps({'domain': '0000', 'bus': '0c',
                       'device': str(device), 'function': str(function)})


def _seed(url: str) -> dict[str, list[str]]:
    """Upstream rows: one fake FPGA with 16 handles (3 marked in use by
    Bound requests, 1 by a BindStarted one, 1 by none), a profile and a
    request in every state. Returns the uuids made, per table."""
    engine = sa.create_engine(url)
    meta = sa.MetaData()
    meta.reflect(engine)
    made: dict[str, list[str]] = {}

    def insert(conn, table, rows):
        for row in rows:
            row.setdefault('uuid', str(uuid.uuid4()))
            conn.execute(sa.insert(meta.tables[table]).values(
                created_at=sa.func.now(), **row))
        made[table] = [r['uuid'] for r in rows]

    with engine.begin() as conn:
        insert(conn, 'devices', [dict(
            id=1, type='FPGA', vendor='0xABCD', model='miss model info',
            std_board_info='{"device_id": "0xabcd"}',
            vendor_board_info='fake_vendor_info', hostname=HOST,
            status='enabled')])
        insert(conn, 'controlpath_ids', [dict(
            id=1, device_id=1, cpid_type='PCI',
            cpid_info='{"domain":"0000","bus":"0c","device":"00",'
                      '"function":"0"}')])
        insert(conn, 'deployables', [dict(
            id=1, name=f'{HOST}_FakeDevice', num_accelerators=16,
            device_id=1, rp_uuid=RP, driver_name='fake')])
        insert(conn, 'attributes', [
            dict(id=1, deployable_id=1, key='traits1',
                 value='CUSTOM_FAKE_DEVICE'),
            dict(id=2, deployable_id=1, key='rc', value='FPGA')])
        insert(conn, 'attach_handles', [dict(
            id=fn, deployable_id=1, cpid_id=1, in_use=fn <= 5,
            attach_type='TEST_PCI', attach_info=_pci(fn // 8, fn % 8))
            for fn in range(1, 17)])
        insert(conn, 'device_profiles', [dict(
            id=1, name='fpga', description='one FPGA',
            profile_json=json.dumps({'groups': [{
                'resources:FPGA': '1',
                'trait:CUSTOM_FAKE_DEVICE': 'required'}]}))])
        insert(conn, 'extended_accelerator_requests', [dict(
            id=n, project_id='p1', state=state, device_profile_id=1,
            device_profile_group_id=0, substate='Initial',
            hostname=HOST if instance is not None else None,
            device_rp_uuid=RP if instance is not None else None,
            instance_uuid=(INSTANCES[instance] if instance is not None
                           else None),
            attach_handle_id=handle, deployable_id=1 if handle else None)
            for n, (state, handle, instance) in enumerate(REQUESTS, 1)])
    engine.dispose()
    return made


def _dump(url: str) -> dict[str, list[dict]]:
    """Every table's rows, in id order where there is one."""
    engine = sa.create_engine(url)
    meta = sa.MetaData()
    meta.reflect(engine)
    try:
        with engine.connect() as conn:
            return {name: [dict(r._mapping) for r in conn.execute(
                sa.select(table).order_by(*table.primary_key.columns))]
                    for name, table in meta.tables.items()}
    finally:
        engine.dispose()


def _enum_types(url: str) -> list[str]:
    if not url.startswith('postgresql'):
        return []
    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            return list(conn.scalars(sa.text(
                "SELECT typname FROM pg_type t JOIN pg_namespace n ON "
                "n.oid = t.typnamespace WHERE t.typtype = 'e' AND "
                "n.nspname = current_schema()")))
    finally:
        engine.dispose()


def test_dry_run_says_what_and_changes_nothing(tmp_path, upstream_url):
    _seed(upstream_url)
    before = _dump(upstream_url)
    result = utils.dbsync(tmp_path, upstream_url, 'adopt', '--dry-run')
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert 'these rows would come across with their ids, uuids and ' \
        'resource-provider uuids' in out
    for line in ('devices: 1', 'deployables: 1', 'attach_handles: 16',
                 'accelerator_requests: 8', 'instance_claims: 2',
                 'accelerator requests by state: BindFailed 1, BindStarted '
                 '1, Bound 3, Deleting 1, Initial 1, Unbound 1',
                 '16 attach handle address(es) rewritten',
                 '1 attach handle(s) marked in use without a request '
                 'holding them become free',
                 'Dry run: nothing was changed.'):
        assert line in out, out
    assert _dump(upstream_url) == before


def test_rows_come_across_and_the_next_report_matches_them(
        tmp_path, upstream_url, conf):
    made = _seed(upstream_url)
    upgrade = utils.dbsync(tmp_path, upstream_url, 'upgrade')
    assert upgrade.returncode == 1
    assert 'holds an OpenStack Cyborg 17.0.0 database. Run "cyborg-dbsync ' \
        'adopt"' in upgrade.stderr

    result = utils.dbsync(tmp_path, upstream_url, 'adopt')
    assert result.returncode == 0, result.stderr
    assert f"cyborg's revision {migration.head()}" in result.stdout
    found = migration.recognise(upstream_url)
    assert (found.kind, found.revision) == (upstream.Kind.OURS,
                                            migration.head())
    assert _enum_types(upstream_url) == []
    tables = set(_dump(upstream_url))
    assert not {t for t in tables if t.startswith(upstream.PREFIX)}

    with conftest.wired_engine(upstream_url):
        ctx = cyborg_context.get_admin_context()
        [device] = inventory.get_host_devices(ctx, HOST)
        assert device['uuid'] == made['devices'][0]
        [dep] = device['deployables']
        assert (dep['uuid'], dep['rp_uuid']) == (made['deployables'][0], RP)
        handles = {h['uuid']: h for h in dep['attach_handles']}
        assert set(handles) == set(made['attach_handles'])
        in_use = sorted(made['attach_handles'].index(u) + 1
                        for u, h in handles.items() if h['in_use'])
        assert in_use == [1, 2, 3, 4]
        arqs = _dump(upstream_url)['accelerator_requests']
        assert len(arqs) == len(REQUESTS)

        # Cyborg's fake driver names the same device's deployable by its
        # address; the report matches it by its handles all the same.
        report = {'hostname': HOST, 'devices': [{
            'type': 'FPGA', 'vendor': '0xABCD', 'model': 'miss model info',
            'std_board_info': {}, 'vendor_board_info': {},
            'controlpath_id': {'cpid_type': 'PCI', 'cpid_info': {
                'domain': '0000', 'bus': '0c', 'device': '00',
                'function': '0'}},
            'deployables': [{
                'name': f'{HOST}_0000:0c:00.0', 'num_accelerators': 16,
                'driver_name': 'fake',
                'attributes': {'rc': 'FPGA',
                               'trait0': 'CUSTOM_FAKE_DEVICE'},
                'attach_handles': [{
                    'attach_type': 'TEST_PCI', 'attach_info': {
                        'domain': '0000', 'bus': '0c',
                        'device': f'{fn // 8:02x}',
                        'function': f'{fn % 8:x}'}}
                    for fn in range(1, 17)]}]}]}
        result = inventory.apply_report(ctx, HOST, report)
        assert (result.devices_added, result.devices_removed) == (0, 0)
        [after] = inventory.get_host_devices(ctx, HOST)
        [dep_after] = after['deployables']
        assert (after['uuid'], dep_after['uuid'], dep_after['rp_uuid']) == (
            device['uuid'], dep['uuid'], RP)
        assert {h['uuid'] for h in dep_after['attach_handles']} == set(
            handles)
        assert sum(h['in_use'] for h in dep_after['attach_handles']) == 4

        # Ids continue after the adopted ones.
        report['devices'][0]['controlpath_id']['cpid_info']['bus'] = '0d'
        report['devices'][0]['deployables'][0]['name'] = 'second'
        for handle in report['devices'][0]['deployables'][0][
                'attach_handles']:
            handle['attach_info']['bus'] = '0d'
        inventory.apply_report(ctx, HOST, report)
        assert len(inventory.get_host_devices(ctx, HOST)) == 2

    again = utils.dbsync(tmp_path, upstream_url, 'adopt')
    assert again.returncode == 0, again.stderr
    assert 'nothing to adopt' in again.stdout


def test_rows_that_cannot_come_across_refuse_it_all(tmp_path,
                                                    upstream_url):
    made = _seed(upstream_url)
    engine = sa.create_engine(upstream_url)
    with engine.begin() as conn:
        # Two requests holding one handle.
        conn.execute(sa.text(
            'UPDATE extended_accelerator_requests SET attach_handle_id = 1,'
            " deployable_id = 1 WHERE state = 'BindStarted'"))
    engine.dispose()
    before = _dump(upstream_url)
    for args in (('adopt', '--dry-run'), ('adopt',)):
        result = utils.dbsync(tmp_path, upstream_url, *args)
        assert result.returncode == 1
        arqs = made['extended_accelerator_requests']
        assert (f'cannot come across: attach handles held by two accelerator '
                f'requests: {arqs[0]} and {arqs[6]}. Nothing was changed.'
                ) in result.stderr, result.stderr
    assert _dump(upstream_url) == before


# Where an adoption can stop: after each of its steps.
STOPS = ('renamed', 'schema', 'copied', 'one table dropped')


@pytest.mark.parametrize('stop', STOPS)
def test_an_interrupted_adoption_finishes(tmp_path, upstream_url, stop):
    made = _seed(upstream_url)
    with migration.connect(upstream_url) as conn:
        adoption._rename(conn)
    if stop != 'renamed':
        with migration.connect(upstream_url) as conn:
            migration.upgrade_on(conn)
    if stop in ('copied', 'one table dropped'):
        with migration.connect(upstream_url) as conn:
            adoption._copy(conn, adoption_plan.make_plan(adoption._read(conn)))
    if stop == 'one table dropped':
        with migration.connect(upstream_url) as conn:
            conn.execute(sa.text(f'DROP TABLE {upstream.PREFIX}reservations'))
    assert migration.recognise(upstream_url).kind is upstream.Kind.ADOPTING
    with pytest.raises(exception.ForeignDatabase,
                       match='an adoption of an OpenStack Cyborg 17.0.0 '
                             'database that has not finished'):
        migration.upgrade(url=upstream_url)

    # In this process: the command's output is checked above.
    adoption.adopt(upstream_url, say=lambda _: None)
    dump = _dump(upstream_url)
    assert not [t for t in dump if t.startswith(upstream.PREFIX)]
    assert migration.version(upstream_url) == migration.head()
    uuids = sorted(r['uuid'] for r in dump['accelerator_requests'])
    assert uuids == sorted(made['extended_accelerator_requests'])
    assert len(dump['attach_handles']) == 16
    assert len(dump['instance_claims']) == 2
