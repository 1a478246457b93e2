"""/v2/deployables through HTTP: list, show and the program PATCH."""
import functools
import json
import time

import pytest

from cyborg import context as cyborg_context
from cyborg.accelerator.drivers import fake
from cyborg.accelerator.drivers.base import AcceleratorDriver
from cyborg.agent import service as agent_service
from cyborg.db.api import inventory
from cyborg.tests.fakes import fixtures
from cyborg.tests.functional.api.fixtures import ADMIN
from cyborg.tests.functional.api.fixtures import SERVICE
from cyborg.tests.functional.api.fixtures import user
from cyborg.tests.functional.api.fixtures import version

MISSING = '6ba7b810-9dad-11d1-80b4-00c04fd430c8'
IMAGE = 'f0e3a7a4-1a3b-4c5d-8e9f-0a1b2c3d4e5f'
FIELDS = {'uuid', 'parent_id', 'root_id', 'name', 'num_accelerators',
          'device_id', 'attributes_list', 'rp_uuid', 'driver_name',
          'bitstream_id', 'links', 'created_at', 'updated_at'}
FAKE_ATTRIBUTES = [{'rc': 'FPGA'}, {'trait0': 'CUSTOM_FAKE_DEVICE'},
                   {'trait1': 'OWNER_CYBORG'}]
PROGRAM = [{'path': '/program', 'op': 'replace',
            'value': [{'image_uuid': IMAGE}]}]


def _fault(response):
    assert response.content_type == 'application/json'
    return json.loads(response.json['error_message'])['faultstring']


def _list(api, query='', headers=ADMIN, **kwargs):
    return api.app.get(f'/v2/deployables{query}', headers=headers,
                       **kwargs).json


def _seed(api):
    """Two devices on agent cmp1 and one on cmp2, one deployable each."""
    return (api.seed('cmp1', count=2, hostname='node1')
            + api.seed('cmp2', count=1, hostname='node2'))


def test_list_envelope_fields_and_filters(api_all_dbs):
    api = api_all_dbs
    seeded = [d['deployables'][0] for d in _seed(api)]
    body = _list(api)
    assert list(body) == ['deployables']
    listed = body['deployables']
    assert {d['uuid'] for d in listed} == {d['uuid'] for d in seeded}
    dep = listed[0]
    assert set(dep) == FIELDS
    assert isinstance(dep['device_id'], int)
    assert dep['parent_id'] is None and dep['root_id'] is None
    assert dep['num_accelerators'] == 16
    assert dep['driver_name'] == 'fake'
    # A JSON string, not a list.
    assert isinstance(dep['attributes_list'], str)
    assert json.loads(dep['attributes_list']) == FAKE_ATTRIBUTES
    assert [link['rel'] for link in dep['links']] == ['self', 'bookmark']
    assert dep['links'][0]['href'].endswith(f'/v2/deployables/{dep["uuid"]}')
    assert dep['links'][1]['href'] == (
        f'http://localhost/deployables/{dep["uuid"]}')

    by_name = _list(api, f'?name={dep["name"]}')['deployables']
    assert [d['uuid'] for d in by_name] == [dep['uuid']]
    by_device = _list(api, f'?device_id={dep["device_id"]}')['deployables']
    assert [d['uuid'] for d in by_device] == [dep['uuid']]
    by_rp = _list(api, f'?rp_uuid={dep["rp_uuid"]}')['deployables']
    assert [d['uuid'] for d in by_rp] == [dep['uuid']]
    for query in ('?name=cmp1', f'?name={dep["name"]}x', '?device_id=999999',
                  f'?rp_uuid={MISSING}'):
        assert _list(api, query) == {'deployables': []}, query
    response = api.app.get('/v2/deployables?device_id=x', headers=ADMIN,
                           status=400)
    assert 'device_id' in _fault(response)


def test_each_deployable_has_its_own_attributes(api):
    api.seed('cmp1', count=3, hostname='node1')
    [first, second, third] = _list(api)['deployables']
    api.app.post_json('/v2/attributes',
                      {'deployable_uuid': second['uuid'], 'key': 'extra',
                       'value': 'x'}, headers=ADMIN, status=201)
    by_uuid = {d['uuid']: json.loads(d['attributes_list'])
               for d in _list(api)['deployables']}
    assert by_uuid[first['uuid']] == FAKE_ATTRIBUTES
    assert by_uuid[second['uuid']] == FAKE_ATTRIBUTES + [{'extra': 'x'}]
    assert by_uuid[third['uuid']] == FAKE_ATTRIBUTES
    shown = api.app.get(f'/v2/deployables/{second["uuid"]}',
                        headers=ADMIN).json
    assert json.loads(shown['attributes_list']) == by_uuid[second['uuid']]


def test_show_is_bare_and_missing_is_404(api):
    dep = _seed(api)[0]['deployables'][0]
    shown = api.app.get(f'/v2/deployables/{dep["uuid"]}', headers=ADMIN).json
    assert set(shown) == FIELDS
    assert shown['uuid'] == dep['uuid']
    assert shown['name'] == dep['name']
    assert shown['rp_uuid'] == dep['rp_uuid']
    response = api.app.get(f'/v2/deployables/{MISSING}', headers=ADMIN,
                           status=404)
    assert MISSING in _fault(response)
    api.app.get('/v2/deployables/not-a-uuid', headers=ADMIN, status=404)


def test_pagination_from_2_4_keeps_attributes_per_page(api):
    api.seed('cmp1', count=5, hostname='node1')
    everything = [d['uuid'] for d in _list(api)['deployables']]
    api.app.post_json('/v2/attributes',
                      {'deployable_uuid': everything[2], 'key': 'extra',
                       'value': 'x'}, headers=ADMIN, status=201)
    seen = []
    page = _list(api, '?limit=2', version('2.4'))
    while True:
        assert list(page)[0] == 'deployables'
        for dep in page['deployables']:
            seen.append(dep['uuid'])
            extra = [{'extra': 'x'}] if dep['uuid'] == everything[2] else []
            assert json.loads(dep['attributes_list']) == (
                FAKE_ATTRIBUTES + extra)
        if 'next' not in page:
            break
        page = api.app.get(page['next'].replace('http://localhost', ''),
                           headers=version('2.4')).json
    assert seen == everything
    api.app.get('/v2/deployables?limit=2', headers=version('2.3'),
                status=406)


def test_policy(api):
    dep = _seed(api)[0]['deployables'][0]
    one = f'/v2/deployables/{dep["uuid"]}'
    for roles in ('reader', 'member,reader'):
        headers = user('p1', roles)
        response = api.app.get('/v2/deployables', headers=headers,
                               status=403)
        assert 'cyborg:deployable:get_all' in _fault(response)
        api.app.get(one, headers=headers, status=403)
    manager = user('p1', 'manager,member,reader')
    assert len(_list(api, headers=manager)['deployables']) == 3
    api.app.get(one, headers=manager, status=200)
    response = api.app.patch_json(f'{one}/program', PROGRAM,
                                  headers=manager, status=403)
    assert 'cyborg:deployable:program' in _fault(response)


@pytest.fixture
def agent(api, fake_glance):
    """The agent of host cmp1 (node node1) with the fake driver, on the
    API's transport, [glance] pointing at a fake image service; returns
    the deployable it reported, the driver and the fake."""
    fixtures.glance_conf(api.conf, fake_glance)
    api.conf.set_override('host', 'cmp1')
    api.conf.set_override('hostname', 'node1', 'agent')
    driver = fake.FakeDriver(api.conf)
    svc = agent_service.build(api.conf, loaded=[driver])
    svc.start()
    ctx = cyborg_context.get_admin_context()
    deadline = time.monotonic() + 30
    while not inventory.get_host_devices(ctx, 'cmp1'):
        assert time.monotonic() < deadline, 'the agent reported nothing'
        time.sleep(0.05)
    dep = inventory.get_host_devices(ctx, 'cmp1')[0]['deployables'][0]
    yield dep, driver, fake_glance
    svc.stop()


@pytest.mark.parametrize('suffix', ['/program', '/program/{uuid}'])
def test_program_loads_the_image_through_the_agent(api, agent, suffix):
    dep, driver, glance = agent
    image = glance.add_image(b'bits', image_id=IMAGE)
    path = f'/v2/deployables/{dep["uuid"]}' + suffix.format(uuid=dep['uuid'])
    body = api.app.patch_json(path, PROGRAM, headers=ADMIN, status=200).json
    assert body['uuid'] == dep['uuid']
    assert body['bitstream_id'] == image['id']
    [call] = driver.program_calls
    assert call['deployable_name'] == dep['name']
    shown = api.app.get(f'/v2/deployables/{dep["uuid"]}', headers=ADMIN)
    assert shown.json['bitstream_id'] == IMAGE


def test_program_is_409_without_driver_support(api, agent, monkeypatch):
    dep, driver, glance = agent
    glance.add_image(b'bits', image_id=IMAGE)
    monkeypatch.setattr(driver, 'program', functools.partial(
        AcceleratorDriver.program, driver))
    response = api.app.patch_json(f'/v2/deployables/{dep["uuid"]}/program',
                                  PROGRAM, headers=ADMIN, status=409)
    message = _fault(response)
    assert dep['uuid'] in message
    assert 'driver fake' in message
    assert 'no programming support' in message
    shown = api.app.get(f'/v2/deployables/{dep["uuid"]}', headers=ADMIN)
    assert shown.json['bitstream_id'] is None


def test_program_refuses_a_device_in_use(api, agent):
    dep, driver, glance = agent
    glance.add_image(b'bits', image_id=IMAGE)
    api.dp('one', [{'resources:FPGA': '1'}])
    [arq] = api.app.post_json('/v2/accelerator_requests',
                              {'device_profile_name': 'one'},
                              headers=ADMIN).json['arqs']
    api.app.patch_json('/v2/accelerator_requests', {arq['uuid']: [
        {'path': '/hostname', 'op': 'add', 'value': 'node1'},
        {'path': '/device_rp_uuid', 'op': 'add', 'value': dep['rp_uuid']},
        {'path': '/instance_uuid', 'op': 'add', 'value': MISSING}]},
        headers=SERVICE, status=202)
    bound = api.app.get(f'/v2/accelerator_requests/{arq["uuid"]}',
                        headers=ADMIN).json
    assert bound['state'] == 'Bound', bound
    response = api.app.patch_json(f'/v2/deployables/{dep["uuid"]}/program',
                                  PROGRAM, headers=ADMIN, status=409)
    message = _fault(response)
    assert f'accelerator request(s) {arq["uuid"]} use it' in message
    assert 'unbind them first' in message
    assert driver.program_calls == []


def test_program_with_an_unknown_image_is_400(api, agent):
    dep, driver, _ = agent
    response = api.app.patch_json(f'/v2/deployables/{dep["uuid"]}/program',
                                  PROGRAM, headers=ADMIN, status=400)
    assert IMAGE in _fault(response)
    assert driver.program_calls == []


def test_program_without_its_agent_is_503(api):
    # The fake transport cannot tell that no agent listens; the conductor
    # gives up after the bind timeout.
    api.conf.set_override('bind_timeout', 1, 'conductor')
    dep = api.seed('cmp1', hostname='node1',
                   agent=False)[0]['deployables'][0]
    response = api.app.patch_json(f'/v2/deployables/{dep["uuid"]}/program',
                                  PROGRAM, headers=ADMIN, status=503)
    assert 'cmp1' in _fault(response)


BAD_PROGRAM_BODIES = [
    {},
    [],
    PROGRAM * 2,
    [{'path': '/other', 'op': 'replace',
      'value': [{'image_uuid': IMAGE}]}],
    [{'path': '/program', 'op': 'add', 'value': [{'image_uuid': IMAGE}]}],
    [{'path': '/program', 'op': 'replace'}],
    [{'path': '/program', 'op': 'replace', 'value': {'image_uuid': IMAGE}}],
    [{'path': '/program', 'op': 'replace', 'value': []}],
    [{'path': '/program', 'op': 'replace', 'value': [{}]}],
    [{'path': '/program', 'op': 'replace',
      'value': [{'image_uuid': IMAGE}, {'image_uuid': IMAGE}]}],
    [{'path': '/program', 'op': 'replace',
      'value': [{'image_uuid': 'not-a-uuid'}]}],
    [{'path': '/program', 'op': 'replace', 'value': [{'image_uuid': 7}]}],
    [{'path': '/program', 'op': 'replace',
      'value': [{'image_uuid': IMAGE, 'extra': 1}]}],
    [{'path': '/program', 'op': 'replace',
      'value': [{'image_uuid': IMAGE}], 'from': '/x'}],
]


@pytest.mark.parametrize('body', BAD_PROGRAM_BODIES)
def test_program_body_is_validated(api, body):
    dep = _seed(api)[0]['deployables'][0]
    response = api.app.patch_json(f'/v2/deployables/{dep["uuid"]}/program',
                                  body, headers=ADMIN, status=400)
    assert _fault(response).startswith('Invalid input')


def test_program_paths_and_unknown_deployables(api):
    dep = _seed(api)[0]['deployables'][0]
    uuid = dep['uuid']
    api.app.patch_json(f'/v2/deployables/{MISSING}/program', PROGRAM,
                       headers=ADMIN, status=404)
    api.app.patch_json('/v2/deployables/not-a-uuid/program', PROGRAM,
                       headers=ADMIN, status=404)
    api.app.patch_json(f'/v2/deployables/{uuid}', PROGRAM, headers=ADMIN,
                       status=405)
    api.app.patch_json(f'/v2/deployables/{uuid}/other', PROGRAM,
                       headers=ADMIN, status=404)
    api.app.patch_json(f'/v2/deployables/{uuid}/program/{MISSING}', PROGRAM,
                       headers=ADMIN, status=404)
    response = api.app.patch(f'/v2/deployables/{uuid}/program',
                             b'not json', headers=ADMIN,
                             content_type='application/json', status=400)
    assert response.content_type == 'application/json'



@pytest.mark.parametrize('path, name', [
    ('/v2/deployables?device_id=', 'device_id'),
    ('/v2/attributes?deployable_id=', 'deployable_id')])
def test_integer_filters_on_every_database(api_all_dbs, path, name):
    """An id no row can have (outside 1 to the column's maximum) and a
    value that is not a decimal integer are a 400 naming the parameter;
    an id in range that nothing has matches nothing."""
    key = path.split('/')[2].split('?')[0]
    assert api_all_dbs.app.get(path + '2147483647',
                               headers=ADMIN).json[key] == []
    for value in ('99999999999', '-1', '0', '0x10'):
        response = api_all_dbs.app.get(path + value, headers=ADMIN,
                                       status=400)
        assert name in _fault(response)
