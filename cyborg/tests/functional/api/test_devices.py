"""/v2/devices through HTTP, as tempest, the SDK and the CLI use it."""
import json
import urllib.parse

import pytest

from cyborg.tests.functional.api.fixtures import ADMIN
from cyborg.tests.functional.api.fixtures import user
from cyborg.tests.functional.api.fixtures import version

MISSING = '6ba7b810-9dad-11d1-80b4-00c04fd430c8'
FIELDS = {'uuid', 'type', 'vendor', 'model', 'std_board_info',
          'vendor_board_info', 'hostname', 'links', 'created_at',
          'updated_at'}


def _fault(response):
    assert response.content_type == 'application/json'
    return json.loads(response.json['error_message'])['faultstring']


def _list(api, query='', headers=ADMIN, **kwargs):
    return api.app.get(f'/v2/devices{query}', headers=headers,
                       **kwargs).json


def _seed(api):
    """Two devices on node1 (agent cmp1), one on node2 (agent cmp2)."""
    return (api.seed('cmp1', count=2, hostname='node1')
            + api.seed('cmp2', count=1, hostname='node2'))


def test_list_envelope_fields_and_exact_filters(api_all_dbs):
    api = api_all_dbs
    seeded = _seed(api)
    body = _list(api)
    assert list(body) == ['devices']
    assert ({d['uuid'] for d in body['devices']}
            == {d['uuid'] for d in seeded})
    device = body['devices'][0]
    assert set(device) == FIELDS
    assert device['type'] == 'FPGA'
    assert json.loads(device['std_board_info']) == {
        'controller': 'Processing accelerators', 'product_id': '0xfa4e'}
    assert json.loads(device['vendor_board_info']) == {
        'firmware': 'fake-1.0'}
    assert device['links'] == [{
        'rel': 'self',
        'href': f'http://localhost/v2/devices/{device["uuid"]}'}]
    assert device['created_at'].endswith('+00:00')

    def hostnames(query):
        return sorted(d['hostname'] for d in _list(api, query)['devices'])

    assert hostnames('?hostname=node1') == ['node1', 'node1']
    assert hostnames('?type=FPGA&hostname=node2') == ['node2']
    assert hostnames('?vendor=0xabcd') == ['node1', 'node1', 'node2']
    # (MySQL's default collation also matches other letter cases.)
    for query in ('?type=GPU', '?vendor=0xabc',
                  '?hostname=node', '?hostname=cmp1', '?type=NOPE'):
        assert _list(api, query) == {'devices': []}, query


def test_status_is_shown_from_2_3(api):
    device = _seed(api)[0]
    for v in ('2.0', '2.2'):
        assert 'status' not in _list(api, headers=version(v))['devices'][0]
        assert 'status' not in api.app.get(
            f'/v2/devices/{device["uuid"]}', headers=version(v)).json
    listed = _list(api, headers=version('2.3'))['devices'][0]
    assert listed['status'] == 'enabled'
    assert set(listed) == FIELDS | {'status'}
    shown = api.app.get(f'/v2/devices/{device["uuid"]}',
                        headers=version('2.4')).json
    assert shown['status'] == 'enabled'


def test_show_is_bare_and_missing_is_404(api):
    device = _seed(api)[0]
    shown = api.app.get(f'/v2/devices/{device["uuid"]}', headers=ADMIN).json
    assert shown['uuid'] == device['uuid']
    assert set(shown) == FIELDS
    response = api.app.get(f'/v2/devices/{MISSING}', headers=ADMIN,
                           status=404)
    assert MISSING in _fault(response)
    api.app.get('/v2/devices/not-a-uuid', headers=ADMIN, status=404)


def _status(api, uuid):
    return api.app.get(f'/v2/devices/{uuid}',
                       headers=version('2.3')).json['status']


def test_disable_and_enable_round_trip(api):
    device, other = _seed(api)[:2]
    uuid = device['uuid']
    response = api.app.post(f'/v2/devices/{uuid}/disable', headers=ADMIN,
                            status=200)
    assert response.body == b''
    assert _status(api, uuid) == 'maintaining'
    assert _status(api, other['uuid']) == 'enabled'
    # Disabling twice is fine.
    api.app.post(f'/v2/devices/{uuid}/disable', headers=ADMIN, status=200)
    assert _status(api, uuid) == 'maintaining'
    maintaining = _list(api, '?hostname=node1', version('2.3'))['devices']
    assert sorted(d['status'] for d in maintaining) == [
        'enabled', 'maintaining']
    response = api.app.post(f'/v2/devices/{uuid}/enable', headers=ADMIN,
                            status=200)
    assert response.body == b''
    assert _status(api, uuid) == 'enabled'


def test_disable_keeps_through_agent_reports(api):
    device = _seed(api)[0]
    api.app.post(f'/v2/devices/{device["uuid"]}/disable', headers=ADMIN)
    _seed(api)
    assert _status(api, device['uuid']) == 'maintaining'


@pytest.mark.parametrize('action', ['disable', 'enable'])
def test_enable_disable_of_unknown_device_is_404(api, action):
    _seed(api)
    response = api.app.post(f'/v2/devices/{MISSING}/{action}',
                            headers=ADMIN, status=404)
    assert MISSING in _fault(response)
    api.app.post(f'/v2/devices/not-a-uuid/{action}', headers=ADMIN,
                 status=404)


def test_policy(api):
    device = _seed(api)[0]
    one = f'/v2/devices/{device["uuid"]}'
    for roles in ('reader', 'member,reader'):
        headers = user('p1', roles)
        response = api.app.get('/v2/devices', headers=headers, status=403)
        assert 'cyborg:device:get_all' in _fault(response)
        api.app.get(one, headers=headers, status=403)
        api.app.post(f'{one}/disable', headers=headers, status=403)
    manager = user('p1', 'manager,member,reader')
    assert len(_list(api, headers=manager)['devices']) == 3
    api.app.get(one, headers=manager, status=200)
    for action in ('disable', 'enable'):
        response = api.app.post(f'{one}/{action}', headers=manager,
                                status=403)
        assert f'cyborg:device:{action}' in _fault(response)
    assert _status(api, device['uuid']) == 'enabled'


def test_pagination_from_2_4(api):
    api.seed('cmp1', count=5, hostname='node1')
    api.seed('cmp2', count=1, hostname='node2')
    everything = [d['uuid'] for d in _list(api)['devices']]
    first = _list(api, '?hostname=node1&limit=2', version('2.4'))
    assert list(first) == ['devices', 'next']
    assert [d['uuid'] for d in first['devices']] == everything[:2]
    query = urllib.parse.parse_qs(urllib.parse.urlsplit(first['next']).query)
    assert query == {'hostname': ['node1'], 'limit': ['2'],
                     'marker': [everything[1]]}
    seen = [d['uuid'] for d in first['devices']]
    page = first
    while 'next' in page:
        path = page['next'].replace('http://localhost', '')
        page = api.app.get(path, headers=version('2.4')).json
        seen += [d['uuid'] for d in page['devices']]
    assert seen == everything[:5]
    assert list(page) == ['devices']
    # Without limit or marker, everything (and no next link).
    assert list(_list(api, headers=version('2.4'))) == ['devices']


def test_pagination_needs_2_4_and_valid_values(api):
    _seed(api)
    response = api.app.get('/v2/devices?limit=1', headers=version('2.3'),
                           status=406)
    assert '2.4' in _fault(response)
    api.app.get(f'/v2/devices?marker={MISSING}', headers=ADMIN, status=406)
    for query in ('limit=0', 'limit=x', 'marker=bad', f'marker={MISSING}'):
        api.app.get(f'/v2/devices?{query}', headers=version('2.4'),
                    status=400)
