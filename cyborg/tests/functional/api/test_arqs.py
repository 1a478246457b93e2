"""/v2/accelerator_requests through HTTP: Nova's and the SDK's flows."""
import json
import uuid

import pytest

from cyborg.tests.fakes.fixtures import glance_conf
from cyborg.tests.functional.api.fixtures import ADMIN
from cyborg.tests.functional.api.fixtures import SERVICE
from cyborg.tests.functional.api.fixtures import user
from cyborg.tests.functional.api.fixtures import version

INSTANCE = '29901acf-5b5e-4a7f-8a3f-1b2c3d4e5f60'


def _fault(response):
    assert response.content_type == 'application/json'
    return json.loads(response.json['error_message'])['faultstring']


def _bind_body(arqs, hostname, rp_uuid, instance=INSTANCE):
    return {a['uuid']: [
        {'path': '/hostname', 'op': 'add', 'value': hostname},
        {'path': '/device_rp_uuid', 'op': 'add', 'value': rp_uuid},
        {'path': '/instance_uuid', 'op': 'add', 'value': instance}]
        for a in arqs}


def _create(api, name='dp1', headers=ADMIN):
    return api.app.post_json('/v2/accelerator_requests',
                             {'device_profile_name': name},
                             headers=headers, status=201).json['arqs']


@pytest.fixture
def seeded(api):
    devices = api.seed('cmp1', hostname='node1')
    api.dp('dp1')
    return devices[0]['deployables'][0]


def test_create_one_arq_per_accelerator_summed_over_groups(api):
    api.dp('multi', [{'resources:FPGA': '2', 'resources:CUSTOM_X': '1'},
                     {'resources:PGPU': '1'}])
    arqs = _create(api, 'multi')
    assert [a['device_profile_group_id'] for a in arqs] == [0, 0, 0, 1]
    arq = arqs[0]
    assert arq['state'] == 'Initial'
    assert arq['device_profile_name'] == 'multi'
    assert arq['attach_handle_type'] == ''
    assert arq['attach_handle_info'] == {}
    assert arq['attach_handle_uuid'] is None
    assert arq['hostname'] is None and arq['instance_uuid'] is None
    assert arq['project_id'] == 'admin'


@pytest.mark.parametrize('name', ['', 'fake_dp', '!@#$%^&*()=-[]'])
def test_create_with_unknown_profile_is_404(api, name):
    api.app.post_json('/v2/accelerator_requests',
                      {'device_profile_name': name}, headers=ADMIN,
                      status=404)


def test_create_body_errors(api):
    api.dp('dp1')
    api.app.post_json('/v2/accelerator_requests', {}, headers=ADMIN,
                      status=500)
    api.app.post_json('/v2/accelerator_requests', {},
                      headers=version('2.4'), status=400)
    api.app.post_json('/v2/accelerator_requests',
                      {'device_profile_name': 'dp1', 'extra': 1},
                      headers=ADMIN, status=400)
    # python-cyborgclient sends these as null
    arqs = api.app.post_json(
        '/v2/accelerator_requests',
        {'device_profile_name': 'dp1', 'device_profile_group_id': None,
         'image_uuid': None}, headers=ADMIN, status=201).json['arqs']
    assert len(arqs) == 1
    assert len(api.app.get('/v2/accelerator_requests',
                           headers=ADMIN).json['arqs']) == 1


def test_nova_bind_flow(api, seeded):
    arqs = _create(api)
    api.app.patch_json('/v2/accelerator_requests',
                       _bind_body(arqs, 'node1', seeded['rp_uuid']),
                       headers=SERVICE, status=202)
    listed = api.app.get(f'/v2/accelerator_requests?instance={INSTANCE}',
                         headers=SERVICE).json['arqs']
    [arq] = listed
    assert arq['state'] == 'Bound'
    assert arq['hostname'] == 'node1'
    assert arq['device_rp_uuid'] == seeded['rp_uuid']
    assert arq['attach_handle_type'] == 'TEST_PCI'
    info = arq['attach_handle_info']
    assert info == {'domain': '0000', 'bus': '0c', 'device': '00',
                    'function': '1'}
    freed = arq['attach_handle_uuid']
    assert all(isinstance(v, str) for v in info.values())
    resolved = api.app.get(f'/v2/accelerator_requests?instance={INSTANCE}'
                           '&bind_state=resolved', headers=SERVICE).json
    assert [a['uuid'] for a in resolved['arqs']] == [arq['uuid']]
    # Nova deletes by instance when the server goes; twice is fine.
    for _ in range(2):
        api.app.delete(f'/v2/accelerator_requests?instance={INSTANCE}',
                       headers=SERVICE, status=204)
    assert api.app.get('/v2/accelerator_requests',
                       headers=ADMIN).json['arqs'] == []
    # The handle is free again: binds that take every handle of the
    # deployable take it too (a search starts past the last handle taken,
    # so it comes last).
    handles = seeded['num_accelerators']
    taken = []
    for i in range(handles):
        again = _create(api)
        instance = f'00000000-0000-4000-8000-{i:012d}'
        api.app.patch_json('/v2/accelerator_requests',
                           _bind_body(again, 'node1', seeded['rp_uuid'],
                                      instance),
                           headers=SERVICE, status=202)
        arq = api.app.get(f'/v2/accelerator_requests/{again[0]["uuid"]}',
                          headers=SERVICE).json
        assert arq['state'] == 'Bound'
        taken.append(arq['attach_handle_uuid'])
    assert len(set(taken)) == handles
    assert taken[-1] == freed


def test_sdk_patch_and_delete_on_the_item(api, seeded):
    [arq] = _create(api)
    body = _bind_body([arq], 'node1', seeded['rp_uuid'])
    api.app.patch_json(f'/v2/accelerator_requests/{arq["uuid"]}', body,
                       headers=SERVICE, status=202)
    assert api.app.get(f'/v2/accelerator_requests/{arq["uuid"]}',
                       headers=ADMIN).json['state'] == 'Bound'
    unbind = {arq['uuid']: [{'op': 'remove', 'path': p} for p in
                            ('/hostname', '/instance_uuid',
                             '/device_rp_uuid')]}
    api.app.patch_json(f'/v2/accelerator_requests/{arq["uuid"]}', unbind,
                       headers=SERVICE, status=202)
    got = api.app.get(f'/v2/accelerator_requests/{arq["uuid"]}',
                      headers=ADMIN).json
    assert got['state'] == 'Unbound'
    assert got['instance_uuid'] is None and got['attach_handle_info'] == {}
    api.app.delete(f'/v2/accelerator_requests/{arq["uuid"]}',
                   headers=ADMIN, status=204)
    api.app.get(f'/v2/accelerator_requests/{arq["uuid"]}', headers=ADMIN,
                status=404)


def test_bind_needs_a_service_token(api, seeded):
    arqs = _create(api)
    body = _bind_body(arqs, 'node1', seeded['rp_uuid'])
    response = api.app.patch_json('/v2/accelerator_requests', body,
                                  headers=ADMIN, status=403)
    assert 'requires a service token' in _fault(response)
    response = api.app.delete(
        f'/v2/accelerator_requests?instance={INSTANCE}', headers=ADMIN,
        status=403)
    assert 'requires a service token' in _fault(response)
    api.conf.set_override('require_service_token', False, 'api')
    api.app.patch_json('/v2/accelerator_requests', body, headers=ADMIN,
                       status=202)


def test_deleting_a_bound_arq_needs_a_service_token(api, seeded):
    [arq] = _create(api)
    api.app.patch_json('/v2/accelerator_requests',
                       _bind_body([arq], 'node1', seeded['rp_uuid']),
                       headers=SERVICE, status=202)
    response = api.app.delete(
        f'/v2/accelerator_requests?arqs={arq["uuid"]}', headers=ADMIN,
        status=403)
    assert f'ARQ {arq["uuid"]} is bound to instance {INSTANCE}' in _fault(
        response)
    api.app.delete(f'/v2/accelerator_requests?arqs={arq["uuid"]}',
                   headers=SERVICE, status=204)


def _states(api):
    return {a['uuid']: (a['state'], a['instance_uuid']) for a in api.app.get(
        '/v2/accelerator_requests', headers=ADMIN).json['arqs']}


def _refused(api, body):
    """PATCH ``body``: refused with 409, and why."""
    return _fault(api.app.patch_json('/v2/accelerator_requests', body,
                                     headers=SERVICE, status=409))


def test_a_bind_that_cannot_be_made_refuses_its_patch(api, seeded):
    # Nova turns an error answer into AcceleratorRequestBindingFailed and
    # fails the build; a 202 followed by BindFailed booted the server
    # without its device.
    arqs = _create(api)
    other_rp = str(uuid.uuid4())
    fault = _refused(api, _bind_body(arqs, 'node1', other_rp))
    assert fault == (
        f'Cannot bind accelerator request(s) {arqs[0]["uuid"]}; nothing of '
        'this PATCH was applied. Accelerator request '
        f'{arqs[0]["uuid"]}: no deployable has this resource provider.')
    arq = api.app.get(f'/v2/accelerator_requests/{arqs[0]["uuid"]}',
                      headers=ADMIN).json
    assert (arq['state'], arq['instance_uuid'], arq['hostname'],
            arq['device_rp_uuid']) == ('Initial', None, None, None)
    assert arq['attach_handle_info'] == {}
    # The same requests bind once the PATCH names what exists.
    api.app.patch_json('/v2/accelerator_requests',
                       _bind_body(arqs, 'node1', seeded['rp_uuid']),
                       headers=SERVICE, status=202)
    assert _states(api) == {arqs[0]['uuid']: ('Bound', INSTANCE)}


def test_one_refused_bind_refuses_every_bind_of_its_patch(api):
    api.conf.set_override('accelerators_per_device', 1, 'fake_driver')
    first, second = (d['deployables'][0]
                     for d in api.seed('cmp1', count=2, hostname='node1'))
    api.dp('dp1')
    taken, good, short = _create(api), _create(api), _create(api)
    api.app.patch_json('/v2/accelerator_requests',
                       _bind_body(taken, 'node1', first['rp_uuid'],
                                  str(uuid.uuid4())),
                       headers=SERVICE, status=202)
    body = {**_bind_body(good, 'node1', second['rp_uuid']),
            **_bind_body(short, 'node1', first['rp_uuid'])}
    fault = _refused(api, body)
    assert fault.endswith(
        f'Accelerator request {short[0]["uuid"]}: the deployable has no '
        'free attach handle.')
    assert good[0]['uuid'] not in fault.partition('applied.')[2]
    states = _states(api)
    assert states[good[0]['uuid']] == ('Initial', None)
    assert states[short[0]['uuid']] == ('Initial', None)
    # The handle the good bind took in the refused PATCH was given back.
    api.app.patch_json('/v2/accelerator_requests',
                       _bind_body(good, 'node1', second['rp_uuid']),
                       headers=SERVICE, status=202)
    assert _states(api)[good[0]['uuid']] == ('Bound', INSTANCE)


def test_each_reason_is_named(api, seeded):
    arqs = _create(api) + _create(api)
    other = str(uuid.uuid4())
    body = {**_bind_body(arqs[:1], 'node2', seeded['rp_uuid']),
            **_bind_body(arqs[1:], 'node1', other)}
    fault = _refused(api, body)
    first, second = sorted(a['uuid'] for a in arqs)
    assert f'request(s) {first}, {second};' in fault
    assert (f'Accelerator request {arqs[0]["uuid"]}: the deployable is on '
            'node1, not node2.') in fault
    assert (f'Accelerator request {arqs[1]["uuid"]}: no deployable has '
            'this resource provider.') in fault
    assert set(_states(api).values()) == {('Initial', None)}


@pytest.mark.parametrize('change, reason', [
    ('disable', 'the device is disabled'),
    ('unhealthy', 'the device is unhealthy: fan failure'),
])
def test_a_device_that_cannot_serve_refuses(api, change, reason):
    [device] = api.seed('cmp1', hostname='node1')
    api.dp('dp1')
    if change == 'disable':
        api.app.post(f'/v2/devices/{device["uuid"]}/disable',
                     headers=ADMIN, status=200)
    else:
        api.app.put_json(f'/v2/devices/{device["uuid"]}/health',
                         {'state': 'unhealthy', 'reason': 'fan failure'},
                         headers=version('2.6'), status=200)
    arqs = _create(api)
    fault = _refused(api, _bind_body(arqs, 'node1',
                                     device['deployables'][0]['rp_uuid']))
    assert fault.endswith(f'{arqs[0]["uuid"]}: {reason}.')
    assert _states(api) == {arqs[0]['uuid']: ('Initial', None)}


def test_a_function_no_image_provides_refuses(api, seeded, fake_glance):
    glance_conf(api.conf, fake_glance)
    fake_glance.add_image(b'x', properties={'accel:function_id': 'other'})
    api.dp('fn', [{'resources:FPGA': '1',
                   'accel:function_id': 'no-such-function'}])
    arqs = _create(api, 'fn')
    fault = _refused(api, _bind_body(arqs, 'node1', seeded['rp_uuid']))
    assert fault.endswith(
        f'{arqs[0]["uuid"]}: no image provides function no-such-function: '
        'Bitstream with accel:function_id=no-such-function (0 images found) '
        'could not be found in the image service.')
    assert _states(api) == {arqs[0]['uuid']: ('Initial', None)}


def test_no_free_handle_refuses_the_patch(api):
    api.conf.set_override('accelerators_per_device', 1, 'fake_driver')
    dep = api.seed('cmp1', hostname='node1')[0]['deployables'][0]
    api.dp('dp1')
    first, second = _create(api), _create(api)
    api.app.patch_json('/v2/accelerator_requests',
                       _bind_body(first, 'node1', dep['rp_uuid']),
                       headers=SERVICE, status=202)
    other = '11111111-2222-3333-4444-555555555555'
    fault = _refused(api, _bind_body(second, 'node1', dep['rp_uuid'], other))
    assert fault.endswith('the deployable has no free attach handle.')
    assert _states(api) == {first[0]['uuid']: ('Bound', INSTANCE),
                            second[0]['uuid']: ('Initial', None)}
    # Nova deletes the requests of a refused PATCH.
    api.app.delete(f'/v2/accelerator_requests?arqs={second[0]["uuid"]}',
                   headers=SERVICE, status=204)


def test_instance_with_arqs_cannot_bind_more(api, seeded):
    first, second = _create(api), _create(api)
    api.app.patch_json('/v2/accelerator_requests',
                       _bind_body(first, 'node1', seeded['rp_uuid']),
                       headers=SERVICE, status=202)
    response = api.app.patch_json(
        '/v2/accelerator_requests',
        _bind_body(second, 'node1', seeded['rp_uuid']), headers=SERVICE,
        status=400)
    assert _fault(response) == (
        f'Invalid input: Cannot bind accelerator requests to instance '
        f"{INSTANCE}: bind all of an instance's accelerator requests in one "
        'PATCH.')


def test_rebinding_a_bound_arq_is_409(api, seeded):
    arqs = _create(api)
    body = _bind_body(arqs, 'node1', seeded['rp_uuid'])
    api.app.patch_json('/v2/accelerator_requests', body, headers=SERVICE,
                       status=202)
    other = _bind_body(arqs, 'node1', seeded['rp_uuid'],
                       '11111111-2222-3333-4444-555555555555')
    api.app.patch_json('/v2/accelerator_requests', other, headers=SERVICE,
                       status=409)


def test_a_bind_sent_again_is_accepted_and_changes_nothing(api, seeded):
    # Nova repeats a PATCH whose answer it lost (a 503 after a conductor
    # stopped), whether or not it was applied.
    arqs = _create(api)
    body = _bind_body(arqs, 'node1', seeded['rp_uuid'])
    api.app.patch_json('/v2/accelerator_requests', body, headers=SERVICE,
                       status=202)
    url = f'/v2/accelerator_requests/{arqs[0]["uuid"]}'
    before = api.app.get(url, headers=ADMIN).json
    assert before['state'] == 'Bound'
    api.app.patch_json('/v2/accelerator_requests', body, headers=SERVICE,
                       status=202)
    assert api.app.get(url, headers=ADMIN).json == before


def test_resolved_with_unresolved_arqs_is_423(api, seeded):
    # A bound ARQ is resolved; one still Initial is not.
    arqs = _create(api)
    api.app.get(f'/v2/accelerator_requests?instance={INSTANCE}'
                '&bind_state=resolved', headers=ADMIN, status=200)
    assert api.app.get('/v2/accelerator_requests?bind_state=resolved',
                       headers=ADMIN).json['arqs'] == []
    api.app.patch_json('/v2/accelerator_requests',
                       _bind_body(arqs, 'node1', seeded['rp_uuid']),
                       headers=SERVICE, status=202)
    resolved = api.app.get('/v2/accelerator_requests?bind_state=resolved',
                           headers=ADMIN).json['arqs']
    assert [a['state'] for a in resolved] == ['Bound']
    api.app.get('/v2/accelerator_requests?bind_state=bound', headers=ADMIN,
                status=500)
    api.app.get('/v2/accelerator_requests?bind_state=bound',
                headers=version('2.4'), status=400)


def test_423_while_an_instance_arq_is_binding(api, sqlite_engine):
    import sqlalchemy as sa

    from cyborg.db import models
    api.dp('dp1')
    [arq] = _create(api)
    with sqlite_engine.begin() as conn:
        conn.execute(sa.update(models.AcceleratorRequest).values(
            state='BindStarted', instance_uuid=INSTANCE))
    api.app.get(f'/v2/accelerator_requests?instance={INSTANCE}'
                '&bind_state=resolved', headers=ADMIN, status=423)
    assert arq


@pytest.mark.parametrize('body, message', [
    ([], 'must map'),
    ({'not-a-uuid': []}, 'not an accelerator request uuid'),
    ({INSTANCE: []}, 'should be non-empty'),
    ({INSTANCE: [{'op': 'replace', 'path': '/hostname', 'value': 'x'}]},
     'replace'),
    ({INSTANCE: [{'op': 'add', 'path': '/state', 'value': 'x'}]},
     '/state'),
    ({INSTANCE: [{'op': 'add', 'path': '/hostname', 'value': 'x'}]},
     'fields absent'),
    ({INSTANCE: [{'op': 'add', 'path': '/hostname', 'value': 'x'},
                 {'op': 'remove', 'path': '/instance_uuid'}]},
     'all "add"'),
    ({INSTANCE: [{'op': 'add', 'path': '/hostname', 'value': 'h'},
                 {'op': 'add', 'path': '/device_rp_uuid', 'value': 'x'},
                 {'op': 'add', 'path': '/instance_uuid',
                  'value': INSTANCE}]}, 'must be a UUID'),
])
def test_bad_patches_are_400(api, body, message):
    response = api.app.patch_json('/v2/accelerator_requests', body,
                                  headers=SERVICE, status=400)
    assert message in _fault(response)


def test_patch_of_unknown_arq_is_404(api, seeded):
    body = _bind_body([{'uuid': str(uuid.uuid4())}], 'node1',
                      seeded['rp_uuid'])
    api.app.patch_json('/v2/accelerator_requests', body, headers=SERVICE,
                       status=404)


def test_project_id_op_needs_2_1_and_admin(api, seeded):
    arqs = _create(api)
    body = _bind_body(arqs, 'node1', seeded['rp_uuid'])
    body[arqs[0]['uuid']].append({'op': 'add', 'path': '/project_id',
                                  'value': 'p9'})
    api.app.patch_json('/v2/accelerator_requests', body, headers=SERVICE,
                       status=406)
    api.app.patch_json('/v2/accelerator_requests', body,
                       headers=version('2.1', SERVICE), status=403)
    admin_service = dict(ADMIN, **{'X-Service-Roles': 'service'})
    api.app.patch_json('/v2/accelerator_requests', body,
                       headers=version('2.1', admin_service), status=202)
    arq = api.app.get(f'/v2/accelerator_requests/{arqs[0]["uuid"]}',
                      headers=ADMIN).json
    assert (arq['state'], arq['project_id']) == ('Bound', 'p9')


def test_delete_by_arqs_is_all_or_nothing(api):
    api.dp('dp1')
    a, b = _create(api), _create(api)
    missing = str(uuid.uuid4())
    response = api.app.delete(
        f'/v2/accelerator_requests?arqs={a[0]["uuid"]}%2C{missing}',
        headers=ADMIN, status=404)
    assert missing in _fault(response)
    assert len(api.app.get('/v2/accelerator_requests',
                           headers=ADMIN).json['arqs']) == 2
    api.app.delete(f'/v2/accelerator_requests?arqs={a[0]["uuid"]}%2C'
                   f'{b[0]["uuid"]}', headers=ADMIN, status=204)
    assert api.app.get('/v2/accelerator_requests',
                       headers=ADMIN).json['arqs'] == []
    api.app.delete('/v2/accelerator_requests', headers=ADMIN, status=500)
    api.app.delete('/v2/accelerator_requests', headers=version('2.4'),
                   status=400)
    api.app.delete('/v2/accelerator_requests?arqs=nope', headers=ADMIN,
                   status=404)


def test_projects_see_only_their_own_arqs(api):
    api.dp('dp1')
    mine = _create(api, headers=user('p1'))
    theirs = _create(api, headers=user('p2'))
    seen = api.app.get('/v2/accelerator_requests',
                       headers=user('p1')).json['arqs']
    assert [a['uuid'] for a in seen] == [mine[0]['uuid']]
    api.app.get(f'/v2/accelerator_requests/{theirs[0]["uuid"]}',
                headers=user('p1'), status=404)
    api.app.delete(f'/v2/accelerator_requests/{theirs[0]["uuid"]}',
                   headers=user('p1'), status=404)
    assert len(api.app.get('/v2/accelerator_requests',
                           headers=ADMIN).json['arqs']) == 2
    assert len(api.app.get('/v2/accelerator_requests',
                           headers=SERVICE).json['arqs']) == 2
    # A reader may look but not create.
    api.app.post_json('/v2/accelerator_requests',
                      {'device_profile_name': 'dp1'},
                      headers=user('p1', 'reader'), status=403)


def test_arq_keeps_its_group_when_the_profile_goes(api):
    api.dp('dp1')
    [arq] = _create(api)
    api.app.delete('/v2/device_profiles/dp1', headers=ADMIN, status=204)
    got = api.app.get(f'/v2/accelerator_requests/{arq["uuid"]}',
                      headers=ADMIN).json
    assert got['device_profile_name'] == 'dp1'


def test_pagination_of_arqs(api):
    api.dp('five', [{'resources:FPGA': '5'}])
    created = _create(api, 'five')
    page = api.app.get('/v2/accelerator_requests?limit=3',
                       headers=version('2.4')).json
    assert [a['uuid'] for a in page['arqs']] == [
        a['uuid'] for a in created[:3]]
    assert 'marker=' in page['next']
    rest = api.app.get(page['next'].replace('http://localhost', ''),
                       headers=version('2.4')).json
    assert [a['uuid'] for a in rest['arqs']] == [
        a['uuid'] for a in created[3:]]
    assert 'next' not in rest
