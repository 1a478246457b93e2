"""What must hold before an adoption changes anything, from names and
planned rows given as plain data."""
from cyborg.db import adoption_checks
from cyborg.db import adoption_plan
from cyborg.db import upstream
from cyborg.tests.unit.db.test_adoption_plan import _rows

OURS = {'ours-1'}


def test_tables_in_the_way_are_named():
    existing = {*upstream.UPSTREAM_TABLES, 'alembic_version', 'services',
                'upstream_attributes', 'unrelated'}
    assert adoption_checks.in_the_way(existing) == [
        "table services exists, and cyborg's schema creates a table of "
        "that name: it is not one of OpenStack Cyborg's, so rename or drop "
        'it (after a backup)',
        'table upstream_attributes exists, and the adoption sets table '
        'attributes aside under that name: rename or drop it (after a '
        'backup)']
    assert adoption_checks.in_the_way(
        {*upstream.UPSTREAM_TABLES, 'alembic_version'}) == []


def test_a_missing_column_is_named_with_its_table():
    columns = {t: list(c) for t, c in adoption_plan.COLUMNS.items()}
    columns['upstream_devices'] = [
        c for c in columns.pop('devices') if c != 'vendor']
    [problem] = adoption_checks.missing_columns(columns)
    assert problem.startswith('table upstream_devices has no column vendor,')


def test_a_leftover_version_must_be_one_an_adoption_leaves():
    renamed = {upstream.PREFIX + t for t in upstream.UPSTREAM_TABLES}
    leftover = adoption_checks.leftover
    assert leftover(upstream.UPSTREAM_HEAD, renamed, None, OURS) == []
    assert leftover(upstream.UPSTREAM_HEAD, renamed | {'alembic_version'},
                    'ours-1', OURS) == []
    assert leftover(upstream.ADOPTED, {'alembic_version'}, 'ours-1',
                    OURS) == []
    [garbage] = leftover('garbage', renamed, None, OURS)
    assert "holds 'garbage'" in garbage
    [several] = leftover(None, renamed, None, OURS)
    assert 'holds no single row' in several
    [missing] = leftover(upstream.UPSTREAM_HEAD,
                         renamed - {'upstream_attributes'}, None, OURS)
    assert 'but upstream_attributes do not exist' in missing
    [foreign] = leftover(upstream.UPSTREAM_HEAD,
                         renamed | {'alembic_version'},
                         upstream.UPSTREAM_HEAD, OURS)
    assert "table alembic_version holds 'b47c8f2d1e3a'" in foreign
    [no_schema] = leftover(upstream.ADOPTED, set(), None, OURS)
    assert 'the database has no cyborg schema' in no_schema


def test_rows_cyborg_refuses_are_named_by_table_id_and_column():
    src = _rows()
    src['devices'][0]['vendor'] = 'v' * 256
    src['attributes'][0].update(deployable_id=7, key='other')
    src['deployables'].append(dict(src['deployables'][0], id=2,
                                   uuid='dep-2', rp_uuid=None))
    plan = adoption_plan.make_plan(src)
    assert adoption_checks.rows(plan.rows) == [
        'devices id 1: vendor is 256 characters long (as cyborg stores '
        'it), and cyborg keeps at most 255: shorten it, or delete the row',
        "deployables ids 1, 2: all have (device_id, name) = (1, "
        "'h1_FakeDevice'), which cyborg keeps unique: change or delete all "
        'but one',
        'attributes id 1: deployable_id 7 names no deployables row that '
        'comes across (it does not exist, or cannot come across itself): '
        'set it to one that does, or delete the row']


def test_a_long_list_of_refused_rows_is_cut():
    src = _rows()
    src['extended_accelerator_requests'] = [
        dict(src['extended_accelerator_requests'][1], id=n,
             uuid=f'arq-{n}', state='Frozen') for n in range(1, 9)]
    problems = adoption_checks.rows(adoption_plan.make_plan(src).rows)
    assert len(problems) == 6
    assert problems[0].startswith(
        "extended_accelerator_requests id 1: state 'Frozen' is not one")
    assert problems[-1] == ('extended_accelerator_requests: 3 more row(s) '
                            'with the same problem in state')
