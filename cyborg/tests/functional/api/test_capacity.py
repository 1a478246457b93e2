"""/v2/capacity (microversion 2.7) through HTTP, on every database."""
import json

import pytest

from cyborg import context as cyborg_context
from cyborg.accelerator.drivers import fake
from cyborg.db.api import devices as devices_db
from cyborg.db.api import inventory
from cyborg.tests.functional.api.fixtures import ADMIN
from cyborg.tests.functional.api.fixtures import SERVICE
from cyborg.tests.functional.api.fixtures import user
from cyborg.tests.functional.api.fixtures import version

LATEST = version('2.7')
INSTANCE = '29901acf-5b5e-4a7f-8a3f-1b2c3d4e5f60'


def _get(api, query='', headers=LATEST, **kwargs):
    return api.app.get(f'/v2/capacity{query}', headers=headers, **kwargs)


def _rows(api, query=''):
    body = _get(api, query).json
    assert list(body) == ['capacity', 'group_by']
    return body['capacity']


def _fault(response):
    assert response.content_type == 'application/json'
    return json.loads(response.json['error_message'])['faultstring']


def _counts(key, value, total, used, reserved, unhealthy, available):
    return {key: value, 'total': total, 'used': used, 'reserved': reserved,
            'unhealthy': unhealthy, 'available': available}


def _bind(api, deployable, hostname, instance=INSTANCE):
    [arq] = api.app.post_json('/v2/accelerator_requests',
                              {'device_profile_name': 'dp1'},
                              headers=ADMIN, status=201).json['arqs']
    api.app.patch_json('/v2/accelerator_requests', {arq['uuid']: [
        {'path': '/hostname', 'op': 'add', 'value': hostname},
        {'path': '/device_rp_uuid', 'op': 'add',
         'value': deployable['rp_uuid']},
        {'path': '/instance_uuid', 'op': 'add', 'value': instance}]},
        headers=SERVICE, status=202)
    assert api.app.get(f'/v2/accelerator_requests/{arq["uuid"]}',
                       headers=ADMIN).json['state'] == 'Bound'


@pytest.fixture
def cloud(api_all_dbs):
    """node1 (cmp1): two FPGA cards of 4 accelerators, one in use and the
    other unhealthy, and a GPU of 2 vGPUs; node2 (cmp2): one FPGA card of
    4, in maintenance."""
    api = api_all_dbs
    api.conf.set_override('accelerators_per_device', 4, 'fake_driver')
    api.conf.set_override('vgpus_per_device', 2, 'fake_driver')
    api.conf.set_override('vgpu_device_count', 1, 'fake_driver')
    node1 = api.seed('cmp1', count=2, hostname='node1')
    api.conf.set_override('vgpu_device_count', 0, 'fake_driver')
    [node2] = api.seed('cmp2', count=1, hostname='node2')
    fpga0, fpga1 = [d for d in node1 if d['type'] == 'FPGA']
    api.dp('dp1')
    _bind(api, fpga0['deployables'][0], 'node1')
    devices_db.set_health(cyborg_context.get_admin_context(),
                          fpga1['uuid'], 'unhealthy', 'ECC errors')
    api.app.post(f'/v2/devices/{node2["uuid"]}/disable', headers=ADMIN,
                 status=200)
    return api


def test_by_host(cloud):
    body = _get(cloud).json
    assert body == {'capacity': [
        _counts('hostname', 'node1', 10, 1, 4, 4, 5),
        _counts('hostname', 'node2', 4, 0, 4, 0, 0)], 'group_by': 'host'}
    assert _get(cloud, '?group_by=host').json == body


def test_by_resource_class(cloud):
    assert _rows(cloud, '?group_by=resource_class') == [
        _counts('resource_class', 'FPGA', 12, 1, 8, 4, 3),
        _counts('resource_class', 'VGPU', 2, 0, 0, 0, 2)]


def test_by_trait(cloud):
    """A deployable counts under each of its traits; OWNER_CYBORG, which
    every provider has, once per deployable, whether or not the driver
    also names it."""
    assert _rows(cloud, '?group_by=trait') == [
        _counts('trait', 'CUSTOM_FAKE_DEVICE', 12, 1, 8, 4, 3),
        _counts('trait', 'CUSTOM_FAKE_VGPU', 2, 0, 0, 0, 2),
        _counts('trait', 'OWNER_CYBORG', 14, 1, 8, 4, 5)]


def test_filters(cloud):
    assert _rows(cloud, '?hostname=node2') == [
        _counts('hostname', 'node2', 4, 0, 4, 0, 0)]
    assert _rows(cloud, '?resource_class=VGPU') == [
        _counts('hostname', 'node1', 2, 0, 0, 0, 2)]
    assert _rows(cloud, '?type=GPU&group_by=resource_class') == [
        _counts('resource_class', 'VGPU', 2, 0, 0, 0, 2)]
    assert _rows(cloud, '?type=FPGA&hostname=node1&group_by=trait') == [
        _counts('trait', 'CUSTOM_FAKE_DEVICE', 8, 1, 4, 4, 3),
        _counts('trait', 'OWNER_CYBORG', 8, 1, 4, 4, 3)]
    assert _rows(cloud, '?hostname=node9') == []
    assert _rows(cloud, '?resource_class=PGPU&group_by=trait') == []


def test_back_in_service(cloud):
    """Out of maintenance and healthy again, node2's card is free."""
    [node2] = cloud.app.get('/v2/devices?hostname=node2',
                            headers=ADMIN).json['devices']
    cloud.app.post(f'/v2/devices/{node2["uuid"]}/enable', headers=ADMIN,
                   status=200)
    assert _rows(cloud, '?hostname=node2') == [
        _counts('hostname', 'node2', 4, 0, 0, 0, 4)]


def test_empty(api):
    assert _get(api).json == {'capacity': [], 'group_by': 'host'}
    assert _get(api, '?group_by=trait').json == {'capacity': [],
                                                 'group_by': 'trait'}


def test_a_missing_deployable_in_use_is_held_back(api):
    """The host lost the card while an instance holds it: placement
    reserves all of it, and nothing is available."""
    api.conf.set_override('accelerators_per_device', 4, 'fake_driver')
    [card] = api.seed('cmp1', count=1, hostname='node1')
    api.dp('dp1')
    _bind(api, card['deployables'][0], 'node1')
    assert _rows(api) == [_counts('hostname', 'node1', 4, 1, 0, 0, 3)]
    inventory.apply_report(cyborg_context.get_admin_context(), 'cmp1',
                           {'hostname': 'node1', 'devices': []})
    assert _rows(api) == [_counts('hostname', 'node1', 4, 1, 4, 0, 0)]


def test_a_deployable_without_a_resource_class(api):
    """It is in the null group, listed last."""
    api.conf.set_override('accelerators_per_device', 2, 'fake_driver')
    api.conf.set_override('device_count', 2, 'fake_driver')
    cards = [d.to_dict() for d in fake.FakeDriver(api.conf).discover()]
    del cards[0]['deployables'][0]['attributes']['rc']
    inventory.apply_report(cyborg_context.get_admin_context(), 'cmp1',
                           {'hostname': 'node1', 'devices': cards})
    assert _rows(api, '?group_by=resource_class') == [
        _counts('resource_class', 'FPGA', 2, 0, 0, 0, 2),
        _counts('resource_class', None, 2, 0, 0, 0, 2)]


@pytest.mark.parametrize('headers', [ADMIN, version('2.5'),
                                     version('2.6')])
def test_missing_below_2_7(api, headers):
    api.seed('cmp1')
    _get(api, headers=headers, status=404)
    _get(api, '?group_by=trait', headers=headers, status=404)


def test_readers_need_a_manager_role(api):
    api.seed('cmp1')
    response = _get(api, headers=version('2.7', user('p1', 'member,reader')),
                    status=403)
    assert 'cyborg:capacity:get' in _fault(response)
    assert len(_get(api, headers=version(
        '2.7', user('p1', 'manager,member,reader'))).json['capacity']) == 1


@pytest.mark.parametrize('query,named', [
    ('?group_by=resource-class', "group_by must be one of host, "
                                 "resource_class, trait, not "
                                 "'resource-class'."),
    ('?group_by=', "group_by must be one of host, resource_class, trait"),
    ('?group_by=HOST', "group_by must be one of"),
    ('?type=TPU', "type must be one of GPU, FPGA, AICHIP, QAT, NIC, SSD, "
                  "PCI, not 'TPU'."),
])
def test_bad_input_is_400(api, query, named):
    response = _get(api, query, status=400)
    assert named in _fault(response)


PAGES = version('2.12')


def _hosts(api, count):
    """``count`` hosts of one FPGA card each, named out of order."""
    names = [f'node{n:02d}' for n in range(count)]
    for n, name in enumerate(reversed(names)):
        api.seed(f'cmp{n}', count=1, hostname=name)
    return names


def test_pages_by_host(api_all_dbs):
    """Every host once, in order, three at a time, by following next."""
    api = api_all_dbs
    names = _hosts(api, 7)
    seen, sizes, path = [], [], '/v2/capacity?group_by=host&limit=3'
    while path:
        body = api.app.get(path, headers=PAGES).json
        assert body['group_by'] == 'host'
        seen += [row['hostname'] for row in body['capacity']]
        sizes.append(len(body['capacity']))
        path = body.get('next')
        if path:
            assert path.startswith('http://localhost/v2/capacity?')
            assert path.endswith(
                f'group_by=host&limit=3&marker={seen[-1]}')
            path = path[len('http://localhost'):]
    assert seen == names
    assert sizes == [3, 3, 1]


def test_the_last_page_has_no_next(api):
    _hosts(api, 4)
    body = _get(api, '?limit=2&marker=node01', headers=PAGES).json
    assert [r['hostname'] for r in body['capacity']] == ['node02', 'node03']
    assert 'next' not in body
    assert _get(api, '?limit=2&marker=node03', headers=PAGES).json == {
        'capacity': [], 'group_by': 'host'}


def test_a_marker_no_group_has(api):
    """Paging goes on after a host that lost its last card."""
    _hosts(api, 3)
    assert [r['hostname'] for r in _get(
        api, '?marker=node00x', headers=PAGES).json['capacity']] == [
        'node01', 'node02']


def test_without_limit_or_marker_2_12_lists_all(api):
    _hosts(api, 3)
    body = _get(api, headers=PAGES).json
    assert len(body['capacity']) == 3 and 'next' not in body


def test_the_limit_is_capped(api):
    api.conf.set_override('max_limit', 2, 'api')
    _hosts(api, 3)
    body = _get(api, '?limit=50', headers=PAGES).json
    assert len(body['capacity']) == 2
    assert body['next'].endswith('limit=2&marker=node01')


def test_pages_by_resource_class_end_with_the_null_group(api):
    api.conf.set_override('vgpu_device_count', 1, 'fake_driver')
    api.conf.set_override('device_count', 2, 'fake_driver')
    cards = [d.to_dict() for d in fake.FakeDriver(api.conf).discover()]
    del cards[0]['deployables'][0]['attributes']['rc']
    inventory.apply_report(cyborg_context.get_admin_context(), 'cmp1',
                           {'hostname': 'node1', 'devices': cards})
    first = _get(api, '?group_by=resource_class&limit=1',
                 headers=PAGES).json
    assert [r['resource_class'] for r in first['capacity']] == ['FPGA']
    assert first['next'].endswith('marker=FPGA')
    second = _get(api, '?group_by=resource_class&limit=1&marker=FPGA',
                  headers=PAGES).json
    assert [r['resource_class'] for r in second['capacity']] == ['VGPU']
    last = _get(api, '?group_by=resource_class&limit=1&marker=VGPU',
                headers=PAGES).json
    assert [r['resource_class'] for r in last['capacity']] == [None]
    assert 'next' not in last


def test_pages_by_trait(api):
    api.seed('cmp1', count=1, hostname='node1')
    body = _get(api, '?group_by=trait&limit=1&marker=CUSTOM_FAKE_DEVICE',
                headers=PAGES).json
    assert [r['trait'] for r in body['capacity']] == ['OWNER_CYBORG']
    assert 'next' not in body


@pytest.mark.parametrize('limit', ['0', '-1', 'x', '1.5', ''])
def test_a_bad_limit_is_400(api, limit):
    response = _get(api, f'?limit={limit}', headers=PAGES, status=400)
    assert 'limit must be' in _fault(response)


@pytest.mark.parametrize('query,names', [
    ('?limit=1', 'limit'), ('?marker=node1', 'marker'),
    ('?limit=1&marker=node1', 'limit, marker')])
def test_below_2_12_paging_is_an_unknown_argument(api, query, names):
    """As 2.7-2.11 answered before 2.12 named them."""
    api.seed('cmp1', count=1, hostname='node1')
    response = _get(api, query, headers=version('2.11'), status=400)
    assert _fault(response) == f'Unknown argument: "{names}"'
    assert 'next' not in _get(api, headers=version('2.11')).json
