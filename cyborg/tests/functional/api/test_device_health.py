"""Device health through HTTP (microversion 2.6): the fields, the filter,
the operator's setting and its clearing, and the impact dry run."""
import json
from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy as sa

from cyborg import context as cyborg_context
from cyborg.db import models
from cyborg.db.api import devices
from cyborg.tests.functional.api import fixtures
from cyborg.tests.functional.api.fixtures import ADMIN
from cyborg.tests.functional.api.fixtures import SERVICE
from cyborg.tests.functional.api.fixtures import user
from cyborg.tests.functional.api.fixtures import version
from cyborg.tests.harness import placement_server

MISSING = '6ba7b810-9dad-11d1-80b4-00c04fd430c8'
FIELDS = {'uuid', 'type', 'vendor', 'model', 'std_board_info',
          'vendor_board_info', 'hostname', 'status', 'links', 'created_at',
          'updated_at'}
HEALTH_FIELDS = {'health', 'health_reason', 'health_source',
                 'health_changed_at'}
V26 = version('2.6')
STATES = "['healthy', 'degraded', 'unhealthy', 'unknown']"


def _fault(response: Any) -> str:
    assert response.content_type == 'application/json'
    fault: str = json.loads(response.json['error_message'])['faultstring']
    return fault


def _show(api: fixtures.API, uuid: str, headers: dict[str, str] = V26
          ) -> dict[str, Any]:
    shown: dict[str, Any] = api.app.get(f'/v2/devices/{uuid}',
                                        headers=headers).json
    return shown


def _put(api: fixtures.API, uuid: str, body: Any,
         headers: dict[str, str] = V26, status: int = 200) -> Any:
    return api.app.put_json(f'/v2/devices/{uuid}/health', body,
                            headers=headers, status=status)


def _seed(api: fixtures.API) -> list[dict[str, Any]]:
    """Two devices on node1 (agent cmp1)."""
    return api.seed('cmp1', count=2, hostname='node1')


def test_health_is_shown_from_2_6_only(api):
    device = _seed(api)[0]
    uuid = device['uuid']
    for v in ('2.3', '2.4', '2.5'):
        listed = api.app.get('/v2/devices', headers=version(v)).json
        assert set(listed['devices'][0]) == FIELDS, v
        assert set(_show(api, uuid, version(v))) == FIELDS, v
    assert set(_show(api, uuid, ADMIN)) == FIELDS - {'status'}
    shown = _show(api, uuid)
    assert set(shown) == FIELDS | HEALTH_FIELDS
    # Health fields come after status, before links.
    keys = list(shown)
    assert keys[keys.index('status') + 1:keys.index('links')] == [
        'health', 'health_reason', 'health_source', 'health_changed_at']
    assert {k: shown[k] for k in HEALTH_FIELDS} == {
        'health': 'unknown', 'health_reason': None,
        'health_source': 'agent', 'health_changed_at': None}
    listed = api.app.get('/v2/devices', headers=version('2.7')).json
    assert set(listed['devices'][0]) == FIELDS | HEALTH_FIELDS


def test_responses_below_2_6_are_unchanged_by_health(api):
    """An operator's setting changes nothing a 2.5 client sees but the
    row's ``updated_at``."""
    uuid = _seed(api)[0]['uuid']

    def seen() -> dict[str, list[tuple[str, Any]]]:
        return {v: [item for item in api.app.get(
            f'/v2/devices/{uuid}', headers=version(v)).json.items()
            if item[0] != 'updated_at'] for v in ('2.0', '2.3', '2.5')}

    before = seen()
    _put(api, uuid, {'state': 'degraded', 'reason': 'ECC corrected'})
    assert seen() == before


def test_set_and_clear(api):
    first, other = _seed(api)
    uuid = first['uuid']
    ctx = cyborg_context.get_admin_context()
    # The agent read the device as degraded.
    devices.apply_agent_health(ctx, 'cmp1', [{
        'controlpath_id': first['controlpath_id'], 'state': 'degraded',
        'reason': 'ECC corrected errors'}])
    assert _show(api, uuid)['health'] == 'degraded'
    response = _put(api, uuid, {'state': 'unhealthy',
                                'reason': 'fan failure'})
    assert response.content_type == 'application/json'
    answered = response.json
    assert answered['uuid'] == uuid
    assert set(answered) == FIELDS | HEALTH_FIELDS
    assert (answered['health'], answered['health_reason'],
            answered['health_source']) == ('unhealthy', 'fan failure',
                                           'operator')
    assert answered['health_changed_at'].endswith('+00:00')
    # The conductor stored it.
    assert _show(api, uuid) == answered
    stored = devices.get(ctx, uuid)
    assert (stored['health'], stored['health_source']) == (
        'unhealthy', 'operator')
    assert _show(api, other['uuid'])['health'] == 'unknown'
    # The agent's readings no longer count, but are kept.
    devices.apply_agent_health(ctx, 'cmp1', [{
        'controlpath_id': first['controlpath_id'], 'state': 'healthy',
        'reason': ''}])
    assert _show(api, uuid)['health'] == 'unhealthy'
    # Without a reason.
    answered = _put(api, uuid, {'state': 'degraded'}).json
    assert (answered['health'], answered['health_reason']) == (
        'degraded', None)
    response = api.app.delete(f'/v2/devices/{uuid}/health', headers=V26,
                              status=200)
    cleared = response.json
    assert (cleared['health'], cleared['health_reason'],
            cleared['health_source']) == ('healthy', None, 'agent')
    assert _show(api, uuid) == cleared
    # Clearing twice is fine.
    again = api.app.delete(f'/v2/devices/{uuid}/health', headers=V26).json
    assert again == cleared


def _mark_synced(engine: sa.engine.Engine) -> None:
    with engine.begin() as connection:
        connection.execute(sa.update(models.Deployable).values(
            rp_synced=sa.func.now()))


def _synced(engine: sa.engine.Engine, uuid: str) -> list[bool]:
    """Whether each deployable of the device is published to placement."""
    with engine.connect() as connection:
        return [value is not None for value in connection.scalars(
            sa.select(models.Deployable.rp_synced)
            .join(models.Device,
                  models.Deployable.device_id == models.Device.id)
            .where(models.Device.uuid == uuid))]


def test_unhealthy_marks_the_providers_for_placement(api, sqlite_engine):
    """Into or out of unhealthy, the device's providers are marked for
    placement (here without a placement service, so they stay marked for
    the periodic sync)."""
    uuid = _seed(api)[0]['uuid']
    _mark_synced(sqlite_engine)
    _put(api, uuid, {'state': 'degraded'})
    assert _synced(sqlite_engine, uuid) == [True]
    _put(api, uuid, {'state': 'unhealthy'})
    assert _synced(sqlite_engine, uuid) == [False]
    _mark_synced(sqlite_engine)
    api.app.delete(f'/v2/devices/{uuid}/health', headers=V26)
    assert _synced(sqlite_engine, uuid) == [False]


@pytest.fixture
def placed_api(conf, placement_url, sqlite_engine
               ) -> Iterator[fixtures.API]:
    """The API whose conductor writes to a real placement."""
    placement_server.point_at(conf, placement_url)
    yield from fixtures._api(conf, sqlite_engine)


def test_placement_follows(placed_api, placement):
    api = placed_api
    node = placement.create_compute_node()
    device = api.seed('cmp1', count=1, hostname=node['name'])[0]
    conductor = api.conductor_parts
    assert conductor.sync_placement(node['name']) == 0
    rp = device['deployables'][0]['rp_uuid']
    total = placement.inventories(rp)['FPGA']['total']
    assert placement.inventories(rp)['FPGA']['reserved'] == 0
    _put(api, device['uuid'], {'state': 'unhealthy', 'reason': 'AER'})
    # Placement followed before the answer.
    assert placement.inventories(rp)['FPGA']['reserved'] == total
    api.app.delete(f'/v2/devices/{device["uuid"]}/health', headers=V26)
    assert placement.inventories(rp)['FPGA']['reserved'] == 0
    # Disabled by an operator, the device stays reserved however healthy.
    api.app.post(f'/v2/devices/{device["uuid"]}/disable', headers=ADMIN)
    _put(api, device['uuid'], {'state': 'healthy'})
    assert placement.inventories(rp)['FPGA']['reserved'] == total


def test_health_filter(api):
    first, second = _seed(api)
    _put(api, first['uuid'], {'state': 'unhealthy'})

    def listed(query: str) -> list[str]:
        return [d['uuid'] for d in api.app.get(
            f'/v2/devices?{query}', headers=V26).json['devices']]

    assert listed('health=unhealthy') == [first['uuid']]
    assert listed('health=unknown') == [second['uuid']]
    assert listed('health=healthy') == []
    assert listed('health=unhealthy&hostname=node2') == []
    assert listed('health=unknown&limit=1') == [second['uuid']]
    for bad in ('bogus', 'UNHEALTHY', ''):
        response = api.app.get(f'/v2/devices?health={bad}', headers=V26,
                               status=400)
        assert ('health must be one of healthy, degraded, unhealthy, '
                'unknown') in _fault(response)
    response = api.app.get('/v2/devices?health=unhealthy',
                           headers=version('2.5'), status=406)
    assert 'needs microversion 2.6' in _fault(response)


@pytest.mark.parametrize('body, message', [
    ({}, "'state' is a required property"),
    ({'state': 'bogus'}, f"'bogus' is not one of {STATES}"),
    ({'state': None}, f'None is not one of {STATES}'),
    ({'state': 'unhealthy', 'reason': 'x' * 256},
     'at reason: is longer than 255 characters'),
    ({'state': 'unhealthy', 'reason': 7}, 'at reason: 7 is not of type'),
    ({'state': 'unhealthy', 'why': 'x'}, "('why' was unexpected)"),
    ([{'state': 'unhealthy'}], 'is not of type'),
    ('unhealthy', 'is not of type'),
])
def test_set_health_body_errors(api, body, message):
    uuid = _seed(api)[0]['uuid']
    before = _show(api, uuid)
    response = _put(api, uuid, body, status=400)
    fault = _fault(response)
    assert fault.startswith('Invalid input: Device health')
    assert message in fault
    assert _show(api, uuid) == before


def test_reason_of_255_characters_is_kept(api):
    uuid = _seed(api)[0]['uuid']
    reason = 'é' * 255
    assert _put(api, uuid, {'state': 'degraded', 'reason': reason}
                ).json['health_reason'] == reason


def test_empty_body_and_missing_device(api):
    _seed(api)
    response = api.app.put(f'/v2/devices/{MISSING}/health', headers=V26,
                           status=400)
    assert 'Device health' in _fault(response)
    response = _put(api, MISSING, {'state': 'unhealthy'}, status=404)
    assert MISSING in _fault(response)
    response = api.app.delete(f'/v2/devices/{MISSING}/health',
                              headers=V26, status=404)
    assert MISSING in _fault(response)
    response = api.app.get(f'/v2/devices/{MISSING}/impact', headers=V26,
                           status=404)
    assert MISSING in _fault(response)
    for method in ('put_json', 'delete'):
        response = getattr(api.app, method)(
            '/v2/devices/not-a-uuid/health', headers=V26, status=404)
        assert 'not-a-uuid' in _fault(response)
    api.app.get('/v2/devices/not-a-uuid/impact', headers=V26, status=404)


@pytest.mark.parametrize('v', ['2.0', '2.3', '2.5'])
def test_below_2_6_the_paths_are_unknown(api, v):
    uuid = _seed(api)[0]['uuid']
    for method, path in (('put_json', 'health'), ('delete', 'health'),
                         ('get', 'impact'), ('post', 'impact'),
                         ('patch', 'health')):
        kwargs = {'params': {'state': 'unhealthy'}} if method == 'put_json' \
            else {}
        response = getattr(api.app, method)(
            f'/v2/devices/{uuid}/{path}', headers=version(v), status=404,
            **kwargs)
        assert 'could not be found' in _fault(response)
    assert _show(api, uuid)['health'] == 'unknown'


def test_other_methods_are_405(api):
    uuid = _seed(api)[0]['uuid']
    for method, path, allow in (
            ('get', 'health', 'PUT, DELETE, OPTIONS'),
            ('post', 'health', 'PUT, DELETE, OPTIONS'),
            ('patch', 'health', 'PUT, DELETE, OPTIONS'),
            ('put', 'impact', 'GET, HEAD, OPTIONS'),
            ('delete', 'impact', 'GET, HEAD, OPTIONS')):
        response = getattr(api.app, method)(
            f'/v2/devices/{uuid}/{path}', headers=V26, status=405)
        assert response.headers['Allow'] == allow
        assert 'does not serve' in _fault(response)
    options = api.app.options(f'/v2/devices/{uuid}/health', headers=V26)
    assert options.headers['Allow'] == 'PUT, DELETE, OPTIONS'


def test_policy(api):
    uuid = _seed(api)[0]['uuid']
    for headers in (user('p1', 'manager,member,reader'),
                    user('p1', 'member,reader'), SERVICE):
        headers = version('2.6', headers)
        response = _put(api, uuid, {'state': 'unhealthy'}, headers,
                        status=403)
        assert 'cyborg:device:set_health' in _fault(response)
        response = api.app.delete(f'/v2/devices/{uuid}/health',
                                  headers=headers, status=403)
        assert 'cyborg:device:set_health' in _fault(response)
        response = api.app.get(f'/v2/devices/{uuid}/impact',
                               headers=headers, status=403)
        assert 'cyborg:device:impact' in _fault(response)
    # A project manager still sees the health of a device.
    shown = _show(api, uuid, version('2.6', user('p1', 'manager')))
    assert shown['health'] == 'unknown'


def test_no_conductor_is_503(api):
    uuid = _seed(api)[0]['uuid']
    api.conf.set_override('rpc_response_timeout', 1)
    api.stop_conductor()
    for response in (
            _put(api, uuid, {'state': 'unhealthy'}, status=503),
            api.app.delete(f'/v2/devices/{uuid}/health', headers=V26,
                           status=503),
            api.app.post(f'/v2/devices/{uuid}/disable', headers=ADMIN,
                         status=503)):
        assert response.headers['Retry-After'] == '5'
        assert response.content_type == 'application/json'
        assert 'error_message' in response.json
    # A bad body is refused before any call.
    _put(api, uuid, {'state': 'sick'}, status=400)
    # The dry run is a read: no conductor needed.
    assert api.app.get(f'/v2/devices/{uuid}/impact', headers=V26).json[
        'arqs'] == []
    assert _show(api, uuid)['health'] == 'unknown'


def _bind(api: fixtures.API, project: str, rp_uuid: str,
          instance: str) -> str:
    [arq] = api.app.post_json('/v2/accelerator_requests',
                              {'device_profile_name': 'dp1'},
                              headers=user(project), status=201).json['arqs']
    api.app.patch_json('/v2/accelerator_requests', {arq['uuid']: [
        {'path': '/hostname', 'op': 'add', 'value': 'node1'},
        {'path': '/device_rp_uuid', 'op': 'add', 'value': rp_uuid},
        {'path': '/instance_uuid', 'op': 'add', 'value': instance}]},
        headers=SERVICE, status=202)
    uuid: str = arq['uuid']
    return uuid


INSTANCE_A = '29901acf-5b5e-4a7f-8a3f-1b2c3d4e5f60'
INSTANCE_B = '7a3e0d2c-91b4-4c57-a8f6-2d1e5b9c0f3a'


def test_impact_lists_the_bound_requests(api):
    busy, idle = _seed(api)
    api.dp('dp1')
    deployable = busy['deployables'][0]
    rp_uuid = deployable['rp_uuid']
    first = _bind(api, 'p1', rp_uuid, INSTANCE_B)
    second = _bind(api, 'p2', rp_uuid, INSTANCE_A)
    # Created but not bound: on no device.
    api.app.post_json('/v2/accelerator_requests',
                      {'device_profile_name': 'dp1'}, headers=user('p3'),
                      status=201)
    response = api.app.get(f'/v2/devices/{busy["uuid"]}/impact',
                           headers=V26)
    impact = response.json
    assert list(impact) == ['device_uuid', 'arqs', 'instances', 'projects']
    assert impact['device_uuid'] == busy['uuid']
    # Ordered by instance.
    assert impact['arqs'] == [
        {'uuid': second, 'state': 'Bound', 'instance_uuid': INSTANCE_A,
         'project_id': 'p2', 'device_profile_name': 'dp1',
         'deployable_uuid': deployable['uuid']},
        {'uuid': first, 'state': 'Bound', 'instance_uuid': INSTANCE_B,
         'project_id': 'p1', 'device_profile_name': 'dp1',
         'deployable_uuid': deployable['uuid']}]
    assert impact['instances'] == [INSTANCE_A, INSTANCE_B]
    assert impact['projects'] == ['p1', 'p2']
    assert api.app.get(f'/v2/devices/{idle["uuid"]}/impact',
                       headers=V26).json == {
        'device_uuid': idle['uuid'], 'arqs': [], 'instances': [],
        'projects': []}
    # A dry run: nothing changed.
    assert _show(api, busy['uuid'])['status'] == 'enabled'
    # Any form of the uuid; HEAD as GET.
    assert api.app.get(f'/v2/devices/{busy["uuid"].upper()}/impact',
                       headers=V26).json == impact
    head = api.app.head(f'/v2/devices/{busy["uuid"]}/impact', headers=V26)
    assert head.body == b''
    assert head.headers['Content-Length'] == response.headers[
        'Content-Length']
