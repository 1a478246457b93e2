"""/v1/accelerators: the legacy read-only view of deployables."""
import json

from cyborg.tests.functional.api.fixtures import ADMIN
from cyborg.tests.functional.api.fixtures import user

MISSING = '6ba7b810-9dad-11d1-80b4-00c04fd430c8'
FIELDS = {'uuid', 'name', 'device_uuid', 'device_type', 'vendor', 'host',
          'hostname', 'num_accelerators', 'acc_specs', 'links',
          'created_at', 'updated_at'}


def _fault(response):
    assert response.content_type == 'application/json'
    return json.loads(response.json['error_message'])['faultstring']


def test_list_and_show(api_all_dbs):
    api = api_all_dbs
    seeded = (api.seed('cmp1', count=2, hostname='node1')
              + api.seed('cmp2', count=1, hostname='node2'))
    body = api.app.get('/v1/accelerators', headers=ADMIN).json
    assert list(body) == ['accelerators']
    expected = {d['deployables'][0]['uuid']: d for d in seeded}
    assert [a['uuid'] for a in body['accelerators']] == list(expected)
    for accelerator in body['accelerators']:
        assert set(accelerator) == FIELDS
        device = expected[accelerator['uuid']]
        deployable = device['deployables'][0]
        assert accelerator['name'] == deployable['name']
        assert accelerator['device_uuid'] == device['uuid']
        assert (accelerator['device_type'], accelerator['vendor']) == (
            'FPGA', '0xabcd')
        assert accelerator['num_accelerators'] == (
            deployable['num_accelerators'])
        assert accelerator['acc_specs'] == {
            'rc': 'FPGA', 'trait0': 'CUSTOM_FAKE_DEVICE',
            'trait1': 'OWNER_CYBORG'}
    first = body['accelerators'][0]
    assert (first['host'], first['hostname']) == ('cmp1', 'node1')
    assert first['links'] == [{
        'rel': 'self',
        'href': f'http://localhost/v1/accelerators/{first["uuid"]}'}]
    shown = api.app.get(f'/v1/accelerators/{first["uuid"]}',
                        headers=ADMIN).json
    assert shown == first


def test_missing_is_404(api):
    api.seed('cmp1')
    response = api.app.get(f'/v1/accelerators/{MISSING}', headers=ADMIN,
                           status=404)
    assert f'Accelerator {MISSING} could not be found' in _fault(response)
    api.app.get('/v1/accelerators/not-a-uuid', headers=ADMIN, status=404)


def test_reads_only(api):
    [device] = api.seed('cmp1')
    uuid = device['deployables'][0]['uuid']
    api.app.post_json('/v1/accelerators', {'name': 'x'}, headers=ADMIN,
                      status=405)
    api.app.delete(f'/v1/accelerators/{uuid}', headers=ADMIN, status=405)


def test_deployable_policies_apply(api):
    api.seed('cmp1')
    response = api.app.get('/v1/accelerators',
                           headers=user('p1', 'member,reader'), status=403)
    assert 'cyborg:deployable:get_all' in _fault(response)
    manager = user('p1', 'manager,member,reader')
    assert len(api.app.get('/v1/accelerators',
                           headers=manager).json['accelerators']) == 1
    # Only the version document needs no token.
    api.app.get('/v1/accelerators', status=401)
    assert api.app.get('/v1').json['status'] == 'DEPRECATED'
