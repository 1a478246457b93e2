"""/v2/attributes through HTTP: list, show, create (plain and wrapped)."""
import json

import pytest
import sqlalchemy as sa

from cyborg.db import models
from cyborg.tests.functional.api.fixtures import ADMIN
from cyborg.tests.functional.api.fixtures import user
from cyborg.tests.functional.api.fixtures import version

MISSING = '6ba7b810-9dad-11d1-80b4-00c04fd430c8'
FIELDS = {'uuid', 'deployable_id', 'key', 'value', 'links', 'created_at',
          'updated_at'}


def _fault(response):
    assert response.content_type == 'application/json'
    return json.loads(response.json['error_message'])['faultstring']


def _list(api, query='', headers=ADMIN, **kwargs):
    return api.app.get(f'/v2/attributes{query}', headers=headers,
                       **kwargs).json


@pytest.fixture
def deployable(api, sqlite_engine):
    """The one deployable of a seeded host, with its integer id."""
    dep = api.seed('cmp1', hostname='node1')[0]['deployables'][0]
    with sqlite_engine.connect() as conn:
        dep['id'] = conn.scalar(sa.select(models.Deployable.id).where(
            models.Deployable.uuid == dep['uuid']))
    return dep


def test_list_envelope_and_filters(api_all_dbs):
    api = api_all_dbs
    api.seed('cmp1', count=2, hostname='node1')
    body = _list(api)
    assert list(body) == ['attributes']
    listed = body['attributes']
    assert len(listed) == 6
    attribute = listed[0]
    assert set(attribute) == FIELDS
    assert isinstance(attribute['deployable_id'], int)
    assert attribute['links'][0]['href'].endswith(
        f'/v2/attributes/{attribute["uuid"]}')
    dep_id = attribute['deployable_id']
    of_one = _list(api, f'?deployable_id={dep_id}')['attributes']
    assert sorted(a['key'] for a in of_one) == ['rc', 'trait0', 'trait1']
    assert {a['deployable_id'] for a in of_one} == {dep_id}
    rcs = _list(api, '?key=rc')['attributes']
    assert [a['value'] for a in rcs] == ['FPGA', 'FPGA']
    [one] = _list(api, f'?deployable_id={dep_id}&key=trait0')['attributes']
    assert one['value'] == 'CUSTOM_FAKE_DEVICE'
    for query in ('?key=r', '?key=nope', '?deployable_id=999999'):
        assert _list(api, query) == {'attributes': []}, query
    api.app.get('/v2/attributes?deployable_id=x', headers=ADMIN, status=400)


def test_create_plain_show_and_delete(api, deployable):
    response = api.app.post_json(
        '/v2/attributes',
        {'deployable_id': deployable['id'], 'key': 'color', 'value': 'red'},
        headers=ADMIN, status=201)
    created = response.json
    assert set(created) == FIELDS
    assert created['deployable_id'] == deployable['id']
    assert (created['key'], created['value']) == ('color', 'red')
    assert created['created_at'].endswith('+00:00')
    shown = api.app.get(f'/v2/attributes/{created["uuid"]}',
                        headers=ADMIN).json
    assert shown == created
    response = api.app.delete(f'/v2/attributes/{created["uuid"]}',
                              headers=ADMIN, status=204)
    assert response.body == b''
    api.app.get(f'/v2/attributes/{created["uuid"]}', headers=ADMIN,
                status=404)
    api.app.delete(f'/v2/attributes/{created["uuid"]}', headers=ADMIN,
                   status=404)


def test_create_wrapped_as_the_sdk_sends_it(api, deployable):
    created = api.app.post_json(
        '/v2/attributes',
        {'attribute': {'deployable_id': deployable['id'], 'key': 'k1',
                       'value': 'v1'}},
        headers=ADMIN, status=201).json
    assert created['key'] == 'k1'
    by_uuid = api.app.post_json(
        '/v2/attributes',
        {'attribute': {'deployable_uuid': deployable['uuid'], 'key': 'k2',
                       'value': ''}},
        headers=ADMIN, status=201).json
    assert by_uuid['deployable_id'] == deployable['id']
    assert by_uuid['value'] == ''
    shown = api.app.get(f'/v2/deployables/{deployable["uuid"]}',
                        headers=ADMIN).json
    assert json.loads(shown['attributes_list'])[-2:] == [{'k1': 'v1'},
                                                         {'k2': ''}]


def test_duplicate_key_is_409_and_writes_nothing(api, deployable):
    before = _list(api)['attributes']
    for body in ({'deployable_id': deployable['id'], 'key': 'rc',
                  'value': 'GPU'},
                 {'deployable_uuid': deployable['uuid'], 'key': 'rc',
                  'value': 'GPU'}):
        response = api.app.post_json('/v2/attributes', body, headers=ADMIN,
                                     status=409)
        assert "'rc'" in _fault(response)
    assert _list(api)['attributes'] == before


def _bad_bodies(dep_id, dep_uuid):
    good = {'deployable_id': dep_id, 'key': 'k', 'value': 'v'}

    def but(**changes):
        body = dict(good, **changes)
        return {k: v for k, v in body.items() if v is not _DROP}

    return [
        [good],
        'a string',
        but(key=_DROP),
        but(value=_DROP),
        but(deployable_id=_DROP),
        but(deployable_uuid=dep_uuid),
        but(key=''),
        but(key='k' * 256),
        but(key=1),
        but(value=1),
        but(value=None),
        but(value='v' * 65536),
        # 65535 characters, but more bytes than a MySQL TEXT holds.
        but(value='\u00e9' * 40000),
        but(deployable_id='1'),
        but(deployable_id=True),
        but(deployable_id=0),
        but(deployable_id=2 ** 31),
        but(deployable_id=None),
        but(deployable_id=_DROP, deployable_uuid='not-a-uuid'),
        but(deployable_id=_DROP, deployable_uuid=MISSING),
        but(deployable_id=999999),
        but(extra='x'),
        {'attribute': good, 'extra': 1},
        {'attribute': [good]},
    ]


_DROP = object()
BAD_COUNT = len(_bad_bodies(1, MISSING))


@pytest.mark.parametrize('index', range(BAD_COUNT))
def test_bad_input_is_400_and_writes_nothing(api, deployable, index):
    body = _bad_bodies(deployable['id'], deployable['uuid'])[index]
    before = _list(api)['attributes']
    raw = json.dumps(body, ensure_ascii=False).encode()
    for headers in (ADMIN, version('2.4')):
        response = api.app.post('/v2/attributes', raw, headers=headers,
                                content_type='application/json', status=400)
        assert _fault(response).startswith('Invalid input')
    assert _list(api)['attributes'] == before


def test_missing_and_malformed_uuids_are_404(api, deployable):
    for uuid in (MISSING, 'not-a-uuid'):
        api.app.get(f'/v2/attributes/{uuid}', headers=ADMIN, status=404)
        response = api.app.delete(f'/v2/attributes/{uuid}', headers=ADMIN,
                                  status=404)
        assert uuid in _fault(response)


def test_policy(api, deployable):
    [attribute] = _list(api, '?key=rc')['attributes']
    one = f'/v2/attributes/{attribute["uuid"]}'
    body = {'deployable_id': deployable['id'], 'key': 'k', 'value': 'v'}
    for roles in ('reader', 'member,reader'):
        headers = user('p1', roles)
        response = api.app.get('/v2/attributes', headers=headers,
                               status=403)
        assert 'cyborg:attribute:get_all' in _fault(response)
        api.app.get(one, headers=headers, status=403)
    manager = user('p1', 'manager,member,reader')
    assert len(_list(api, headers=manager)['attributes']) == 3
    api.app.get(one, headers=manager, status=200)
    response = api.app.post_json('/v2/attributes', body, headers=manager,
                                 status=403)
    assert 'cyborg:attribute:create' in _fault(response)
    response = api.app.delete(one, headers=manager, status=403)
    assert 'cyborg:attribute:delete' in _fault(response)
    assert len(_list(api)['attributes']) == 3
    api.app.post_json('/v2/attributes', body, headers=ADMIN, status=201)
    api.app.delete(one, headers=ADMIN, status=204)


def test_pagination_from_2_4(api, deployable):
    everything = [a['uuid'] for a in _list(api)['attributes']]
    first = _list(api, '?limit=2', version('2.4'))
    assert list(first) == ['attributes', 'next']
    second = api.app.get(first['next'].replace('http://localhost', ''),
                         headers=version('2.4')).json
    assert list(second) == ['attributes']
    assert [a['uuid'] for a in first['attributes'] + second['attributes']
            ] == everything
    api.app.get('/v2/attributes?limit=2', headers=version('2.3'),
                status=406)


def test_longest_key_and_value_are_stored(api_all_dbs):
    api = api_all_dbs
    dep = api.seed('cmp1', hostname='node1')[0]['deployables'][0]
    body = {'deployable_uuid': dep['uuid'], 'key': 'k' * 255,
            'value': '\u00e9' * 32767}
    created = api.app.post('/v2/attributes',
                           json.dumps(body, ensure_ascii=False).encode(),
                           headers=ADMIN, content_type='application/json',
                           status=201).json
    shown = api.app.get(f'/v2/attributes/{created["uuid"]}',
                        headers=ADMIN).json
    assert (shown['key'], shown['value']) == (body['key'], body['value'])


def _report_again(api, host='cmp1', hostname='node1', change=None):
    """The fake driver's report of ``host`` applied again, as the agent's
    next periodic report would be; ``change`` edits it first."""
    from cyborg import context as cyborg_context
    from cyborg.accelerator.drivers import fake
    from cyborg.db.api import inventory
    api.conf.set_override('host', host)
    devices = [d.to_dict() for d in fake.FakeDriver(api.conf).discover()]
    if change:
        change(devices)
    return inventory.apply_report(cyborg_context.get_admin_context(), host,
                                  {'hostname': hostname, 'devices': devices})


def test_reports_keep_what_an_operator_set(api_all_dbs, db_engine):
    api = api_all_dbs
    dep = api.seed('cmp1', hostname='node1')[0]['deployables'][0]
    driver_keys = set(dep['attributes'])
    with db_engine.connect() as conn:
        dep_id = conn.scalar(sa.select(models.Deployable.id).where(
            models.Deployable.uuid == dep['uuid']))
    mine = api.app.post_json('/v2/attributes', {
        'deployable_id': dep_id, 'key': 'trait_ops',
        'value': 'CUSTOM_OPERATOR_TRAIT'}, headers=ADMIN, status=201).json
    # The operator's value of a key the driver reports too wins.
    taken = next(iter(sorted(driver_keys)))
    api.app.delete(f'/v2/attributes/{_uuid_of(api, dep_id, taken)}',
                   headers=ADMIN, status=204)
    api.app.post_json('/v2/attributes', {
        'deployable_id': dep_id, 'key': taken, 'value': 'operator value'},
        headers=ADMIN, status=201)

    result = _report_again(api)

    assert result.devices_updated == 0 and result.writes == 0
    listed = {a['key']: a for a in _list(
        api, f'?deployable_id={dep_id}')['attributes']}
    assert listed['trait_ops']['uuid'] == mine['uuid']
    assert listed['trait_ops']['value'] == 'CUSTOM_OPERATOR_TRAIT'
    assert listed[taken]['value'] == 'operator value'
    assert set(listed) == driver_keys | {'trait_ops'}


def test_a_driver_attribute_the_host_stops_reporting_goes(api_all_dbs,
                                                          db_engine):
    api = api_all_dbs
    dep = api.seed('cmp1', hostname='node1')[0]['deployables'][0]
    gone = next(iter(sorted(dep['attributes'])))

    def drop(devices):
        del devices[0]['deployables'][0]['attributes'][gone]

    result = _report_again(api, change=drop)

    assert result.devices_updated == 1
    listed = _list(api)['attributes']
    assert gone not in {a['key'] for a in listed}


def test_a_removed_deployable_takes_the_operators_attributes(api_all_dbs,
                                                             db_engine):
    api = api_all_dbs
    dep = api.seed('cmp1', hostname='node1')[0]['deployables'][0]
    with db_engine.connect() as conn:
        dep_id = conn.scalar(sa.select(models.Deployable.id).where(
            models.Deployable.uuid == dep['uuid']))
    api.app.post_json('/v2/attributes', {
        'deployable_id': dep_id, 'key': 'note', 'value': 'rack 4'},
        headers=ADMIN, status=201)

    result = _report_again(api, change=lambda devices: devices.clear())

    assert result.devices_removed == 1
    assert _list(api)['attributes'] == []


def _uuid_of(api, dep_id, key):
    return next(a['uuid'] for a in _list(
        api, f'?deployable_id={dep_id}')['attributes'] if a['key'] == key)
