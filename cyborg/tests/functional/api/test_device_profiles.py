"""/v2/device_profiles through HTTP, as tempest, the SDK and Nova use it."""
import json

import pytest

from cyborg.tests.functional.api.fixtures import ADMIN
from cyborg.tests.functional.api.fixtures import user
from cyborg.tests.functional.api.fixtures import version

GROUPS = [{'resources:FPGA': '1', 'trait:CUSTOM_FAKE_DEVICE': 'required'}]


def _fault(response):
    assert response.content_type == 'application/json'
    return json.loads(response.json['error_message'])['faultstring']


def _count(api):
    return len(api.app.get('/v2/device_profiles',
                           headers=ADMIN).json['device_profiles'])


def test_create_returns_the_bare_profile(api):
    body = [{'name': 'dp-test-create', 'groups': GROUPS,
             'description': 'for tests'}]
    response = api.app.post_json('/v2/device_profiles', body, headers=ADMIN,
                                 status=201)
    dp = response.json
    assert dp['name'] == 'dp-test-create'
    assert dp['groups'] == GROUPS
    assert dp['description'] == 'for tests'
    assert dp['links'][0]['href'].endswith(f'/v2/device_profiles/'
                                           f'{dp["uuid"]}')
    assert dp['created_at'].endswith('+00:00')


def test_groups_are_normalised_to_strings(api):
    image = 'F0E3A7A4-1A3B-4C5D-8E9F-0A1B2C3D4E5F'
    dp = api.app.post_json(
        '/v2/device_profiles',
        [{'name': 'n', 'groups': [{' resources:FPGA ': 2,
                                   'trait: CUSTOM_X': 'forbidden',
                                   'accel:bitstream_id': image}]}],
        headers=ADMIN).json
    assert dp['groups'] == [{'resources:FPGA': '2',
                             'trait:CUSTOM_X': 'forbidden',
                             'accel:bitstream_id': image.lower()}]


def test_list_with_name_filter_and_envelopes(api):
    a = api.dp('a')
    api.dp('b')
    api.dp('c')
    body = api.app.get('/v2/device_profiles', headers=ADMIN).json
    assert list(body) == ['device_profiles']
    assert [d['name'] for d in body['device_profiles']] == ['a', 'b', 'c']
    names = api.app.get('/v2/device_profiles?name=a,c',
                        headers=ADMIN).json['device_profiles']
    assert [d['name'] for d in names] == ['a', 'c']
    # Nova: exactly one profile for ?name=<dp>
    [one] = api.app.get('/v2/device_profiles?name=a',
                        headers=ADMIN).json['device_profiles']
    assert one['uuid'] == a['uuid']
    assert api.app.get('/v2/device_profiles?name=zzz',
                       headers=ADMIN).json == {'device_profiles': []}


def test_get_by_uuid_is_wrapped_and_by_name_needs_2_2(api):
    dp = api.dp('byname')
    got = api.app.get(f'/v2/device_profiles/{dp["uuid"]}', headers=ADMIN)
    assert got.json['device_profile']['name'] == 'byname'
    response = api.app.get('/v2/device_profiles/byname', headers=ADMIN,
                           status=406)
    assert '2.2' in _fault(response)
    # A 406 of a version that was served names it.
    assert response.headers['OpenStack-API-Version'] == 'accelerator 2.0'
    got = api.app.get('/v2/device_profiles/byname',
                      headers=version('2.2'))
    assert got.json['device_profile']['uuid'] == dp['uuid']
    api.app.get('/v2/device_profiles/missing', headers=version('2.2'),
                status=404)
    api.app.get('/v2/device_profiles/6ba7b810-9dad-11d1-80b4-00c04fd430c8',
                headers=ADMIN, status=404)


def test_delete_by_uuid_name_and_value(api):
    a, b, c, d = (api.dp(n) for n in 'abcd')
    api.app.delete(f'/v2/device_profiles/{a["uuid"]}', headers=ADMIN,
                   status=204)
    api.app.delete('/v2/device_profiles/b', headers=ADMIN, status=204)
    api.app.delete('/v2/device_profiles?value=c,d', headers=ADMIN,
                   status=204)
    assert _count(api) == 0
    assert b and c and d


def test_delete_errors(api):
    api.dp('keep')
    api.app.delete('/v2/device_profiles/', headers=ADMIN, status=400)
    response = api.app.delete('/v2/device_profiles?value=keep,missing1',
                              headers=ADMIN, status=404)
    assert 'missing1' in _fault(response)
    # Nothing was deleted: all or none.
    assert _count(api) == 1


@pytest.mark.parametrize('name', ['', 'x' * 256, None])
def test_legacy_500_for_bad_names_and_400_from_2_4(api, name):
    profile = {'groups': GROUPS}
    if name is not None:
        profile['name'] = name
    api.app.post_json('/v2/device_profiles', [profile], headers=ADMIN,
                      status=500)
    api.app.post_json('/v2/device_profiles', [profile],
                      headers=version('2.4'), status=400)
    assert _count(api) == 0


def test_duplicate_name_409_and_uuid_legacy_500(api):
    dp = api.dp('dup')
    api.app.post_json('/v2/device_profiles', [{'name': 'dup',
                                               'groups': GROUPS}],
                      headers=ADMIN, status=409)
    again = [{'name': 'other', 'uuid': dp['uuid'], 'groups': GROUPS}]
    api.app.post_json('/v2/device_profiles', again, headers=ADMIN,
                      status=500)
    api.app.post_json('/v2/device_profiles', again, headers=version('2.4'),
                      status=409)
    assert _count(api) == 1


def test_duplicate_uuid_is_told_from_duplicate_name_on_every_db(api_all_dbs):
    # MariaDB names the unique constraint, not the column, in its error.
    api = api_all_dbs
    dp = api.dp('dup-uuid')
    again = [{'name': 'other', 'uuid': dp['uuid'], 'groups': GROUPS}]
    api.app.post_json('/v2/device_profiles', again, headers=ADMIN,
                      status=500)
    response = api.app.post_json('/v2/device_profiles', again,
                                 headers=version('2.4'), status=409)
    assert dp['uuid'] in response.text
    assert _count(api) == 1


@pytest.mark.parametrize('body, message', [
    ({'name': 'x', 'groups': GROUPS}, 'JSON list'),
    ([], 'JSON list'),
    ([{'name': 'a', 'groups': GROUPS}, {'name': 'b', 'groups': GROUPS}],
     'exactly one'),
    ([{'name': 'bad name!', 'groups': GROUPS}], 'may only contain'),
    ([{'name': 'x', 'groups': GROUPS, 'colour': 'red'}], 'colour'),
    ([{'name': 'x', 'groups': [{'resources:fpga': '1'}]}],
     'unknown resource class'),
    ([{'name': 'x', 'groups': [{'resources:FPGA': '0'}]}],
     'positive integer'),
    ([{'name': 'x', 'groups': [{'resources:FPGA': 'one'}]}],
     'positive integer'),
    ([{'name': 'x', 'groups': [{'resources:FPGA': '1',
                                'trait:CUSTOM_X': 'preferred'}]}],
     '"required" or'),
    ([{'name': 'x', 'groups': [{'resources:FPGA': '1', 'color': 'x'}]}],
     'unknown key'),
    ([{'name': 'x', 'groups': [{'trait:CUSTOM_X': 'required'}]}],
     'at least one resources'),
    ([{'name': 'x', 'uuid': 'not-a-uuid', 'groups': GROUPS}], 'UUID'),
    ([{'name': 'x', 'groups': 'FPGA'}], 'groups'),
])
def test_bad_bodies_are_400_and_write_nothing(api, body, message):
    response = api.app.post_json('/v2/device_profiles', body,
                                 headers=ADMIN, status=400)
    assert message in _fault(response)
    assert _count(api) == 0


def test_malformed_json_is_400(api):
    response = api.app.post('/v2/device_profiles', '[{"name": ',
                            headers=dict(ADMIN,
                                         **{'Content-Type':
                                            'application/json'}),
                            status=400)
    assert 'JSON' in _fault(response)


def test_policy(api):
    api.dp('seen')
    reader = user(roles='reader')
    assert api.app.get('/v2/device_profiles', headers=reader).json[
        'device_profiles']
    response = api.app.post_json('/v2/device_profiles',
                                 [{'name': 'x', 'groups': GROUPS}],
                                 headers=user(roles='member,reader'),
                                 status=403)
    assert 'cyborg:device_profile:create' in _fault(response)
    api.app.delete('/v2/device_profiles/seen', headers=user(), status=403)
    api.app.get('/v2/device_profiles', headers={'X-Auth-Token': 'x:y'},
                status=403)
    api.app.get('/v2/device_profiles', status=401)


def test_pagination_from_2_4(api):
    for i in range(5):
        api.dp(f'p{i}')
    api.app.get('/v2/device_profiles?limit=2', headers=ADMIN, status=406)
    page = api.app.get('/v2/device_profiles?limit=2',
                       headers=version('2.4')).json
    assert [d['name'] for d in page['device_profiles']] == ['p0', 'p1']
    names = []
    url = '/v2/device_profiles?limit=2'
    while url:
        page = api.app.get(url, headers=version('2.4')).json
        names += [d['name'] for d in page['device_profiles']]
        url = page.get('next', '').replace('http://localhost', '')
    assert names == [f'p{i}' for i in range(5)]
    api.app.get('/v2/device_profiles?limit=0', headers=version('2.4'),
                status=400)
    api.app.get('/v2/device_profiles?marker=nope', headers=version('2.4'),
                status=400)
