"""/v2/attach_handles (microversion 2.8) through HTTP: the list and its
filters, and an operator's retry or release of a handle a failed clean
holds in maintenance.

The handles are put into maintenance the way production does it: an
accelerator request of a profile asking ``accel:clean_after_use=true`` is
bound and deleted while ``[fake_driver] clean_fail`` makes the agent's
clean (over RPC, the fake driver) fail.
"""
import json
import urllib.parse
from typing import Any

import pytest
import requests

from cyborg.tests.functional.api import contract
from cyborg.tests.functional.api import fixtures
from cyborg.tests.functional.api.fixtures import ADMIN
from cyborg.tests.functional.api.fixtures import SERVICE
from cyborg.tests.functional.api.fixtures import user
from cyborg.tests.functional.api.fixtures import version
from cyborg.tests.functional.clients.conftest import live_api  # noqa: F401
from cyborg.tests.utils import wait_for

V28 = version('2.8')
MISSING = '6ba7b810-9dad-11d1-80b4-00c04fd430c8'
INSTANCE = '29901acf-5b5e-4a7f-8a3f-1b2c3d4e5f60'
FIELDS = {'uuid', 'attach_type', 'attach_info', 'in_use', 'clean_state',
          'clean_reason', 'clean_since', 'deployable_uuid', 'device_uuid',
          'hostname'}
CLEANING_GROUP = {'resources:FPGA': '1',
                  'trait:CUSTOM_FAKE_DEVICE': 'required',
                  'accel:clean_after_use': 'true'}


def _fault(response: Any) -> str:
    assert response.content_type == 'application/json'
    fault: str = json.loads(response.json['error_message'])['faultstring']
    return fault


def _list(api: fixtures.API, query: str = '',
          headers: dict[str, str] = V28) -> list[dict[str, Any]]:
    body = api.app.get(f'/v2/attach_handles{query}', headers=headers).json
    handles: list[dict[str, Any]] = body['attach_handles']
    return handles


def _uuids(api: fixtures.API, query: str = '') -> list[str]:
    return [h['uuid'] for h in _list(api, query)]


def _action(api: fixtures.API, uuid: str, action: str,
            headers: dict[str, str] = V28, status: int = 200) -> Any:
    return api.app.post(f'/v2/attach_handles/{uuid}/{action}',
                        headers=headers, status=status)


def _seed(api: fixtures.API) -> list[dict[str, Any]]:
    """Two fake FPGA cards on node1 (agent cmp1), and the profile
    ``dpc`` whose requests clean their handle after use."""
    seeded = api.seed('cmp1', count=2, hostname='node1')
    api.dp('dpc', [CLEANING_GROUP])
    return seeded


def _bind(api: fixtures.API, rp_uuid: str) -> str:
    [arq] = api.app.post_json('/v2/accelerator_requests',
                              {'device_profile_name': 'dpc'},
                              headers=ADMIN, status=201).json['arqs']
    api.app.patch_json('/v2/accelerator_requests', {arq['uuid']: [
        {'path': '/hostname', 'op': 'add', 'value': 'node1'},
        {'path': '/device_rp_uuid', 'op': 'add', 'value': rp_uuid},
        {'path': '/instance_uuid', 'op': 'add', 'value': INSTANCE}]},
        headers=SERVICE, status=202)
    uuid: str = arq['uuid']
    return uuid


def _in_use(api: fixtures.API) -> list[dict[str, Any]]:
    return [h for h in _list(api) if h['in_use']]


def _into_maintenance(api: fixtures.API, device: dict[str, Any]
                      ) -> dict[str, Any]:
    """Bind a request to ``device`` and delete it while cleans fail: its
    handle ends in maintenance. The handle, as listed."""
    api.conf.set_override('clean_fail', True, 'fake_driver')
    arq = _bind(api, device['deployables'][0]['rp_uuid'])
    # As Nova deletes the requests of an instance: with a service token.
    api.app.delete(f'/v2/accelerator_requests/{arq}', headers=SERVICE,
                   status=204)
    wait_for(lambda: [h for h in _in_use(api)
                      if h['clean_state'] == 'maintenance'],
             'the failed clean')
    api.conf.set_override('clean_fail', False, 'fake_driver')
    (handle,) = _in_use(api)
    return handle


def test_list_fields_and_filters(api):
    first, second = _seed(api)
    handles = _list(api)
    assert handles
    for handle in handles:
        assert set(handle) == FIELDS
        assert (handle['in_use'], handle['clean_state'],
                handle['clean_reason'], handle['clean_since']) == (
            False, None, None, None)
        assert handle['hostname'] == 'node1'
        assert handle['device_uuid'] in (first['uuid'], second['uuid'])
    # In the order they were stored: the first device's first.
    of_first = _uuids(api, f'?device_uuid={first["uuid"]}')
    of_second = _uuids(api, f'?device_uuid={second["uuid"]}')
    assert of_first and of_second
    assert of_first + of_second == [h['uuid'] for h in handles]
    assert {h['deployable_uuid'] for h in _list(
        api, f'?device_uuid={first["uuid"]}')} == {
        d['uuid'] for d in first['deployables']}
    # Any form of the uuid.
    assert _uuids(api, f'?device_uuid={first["uuid"].upper()}') == of_first
    assert _uuids(api, f'?device_uuid={MISSING}') == []
    assert _uuids(api, '?clean_state=none') == [h['uuid'] for h in handles]
    assert _uuids(api, '?clean_state=cleaning') == []
    assert _uuids(api, '?clean_state=maintenance') == []


def test_pagination(api):
    _seed(api)
    everything = _uuids(api)
    assert len(everything) >= 2
    seen: list[str] = []
    query = '?limit=1&clean_state=none'
    while True:
        body = api.app.get(f'/v2/attach_handles{query}', headers=V28).json
        assert len(body['attach_handles']) == 1
        seen += [h['uuid'] for h in body['attach_handles']]
        if 'next' not in body:
            break
        # The next link keeps the filter.
        assert 'clean_state=none' in body['next']
        query = '?' + body['next'].split('?', 1)[1]
    assert seen == everything
    assert _uuids(api, f'?marker={everything[0]}') == everything[1:]
    response = api.app.get(f'/v2/attach_handles?marker={MISSING}',
                           headers=V28, status=400)
    assert MISSING in _fault(response)
    response = api.app.get('/v2/attach_handles?limit=0', headers=V28,
                           status=400)
    assert 'limit must be a positive integer' in _fault(response)


@pytest.mark.parametrize('query, message', [
    ('clean_state=bogus',
     "clean_state must be one of cleaning, maintenance, none, not 'bogus'"),
    ('clean_state=MAINTENANCE', 'clean_state must be one of cleaning, '
     'maintenance, none'),
    ('clean_state=', 'clean_state must be one of cleaning, maintenance, '
     'none'),
    ('device_uuid=not-a-uuid', 'device_uuid'),
    ('device_uuid=', 'device_uuid'),
])
def test_bad_filters_are_400(api, query, message):
    _seed(api)
    response = api.app.get(f'/v2/attach_handles?{query}', headers=V28,
                           status=400)
    assert message in _fault(response)


def test_maintenance_then_retry_cleans(api):
    first, _ = _seed(api)
    handle = _into_maintenance(api, first)
    assert handle['device_uuid'] == first['uuid']
    assert '[fake_driver] clean_fail is set' in handle['clean_reason']
    assert handle['clean_since'].endswith('+00:00')
    assert _uuids(api, '?clean_state=maintenance') == [handle['uuid']]
    assert handle['uuid'] not in _uuids(api, '?clean_state=none')
    agent = api.start_agent('cmp1')
    driver = next(iter(agent.tracker.drivers))
    cleans = len([c for c in driver.lifecycle_calls
                  if c['action'] == 'clean'])
    response = _action(api, handle['uuid'], 'clean', status=202)
    assert response.content_type == 'application/json'
    answered = response.json
    assert set(answered) == FIELDS
    assert (answered['uuid'], answered['in_use'], answered['clean_state'],
            answered['clean_reason']) == (handle['uuid'], True, 'cleaning',
                                          None)
    # The clean runs on the host after the answer; then the handle is free.
    wait_for(lambda: not _in_use(api), 'the clean')
    calls = [c for c in driver.lifecycle_calls if c['action'] == 'clean']
    assert len(calls) == cleans + 1
    assert (calls[-1]['target'], calls[-1]['error']) == (
        handle['attach_info'], None)
    (after,) = [h for h in _list(api) if h['uuid'] == handle['uuid']]
    assert (after['in_use'], after['clean_state'], after['clean_since']) == (
        False, None, None)
    # Free now: neither action applies.
    for action in ('clean', 'release'):
        response = _action(api, handle['uuid'], action, status=409)
        assert (f'Attach handle {handle["uuid"]} is free; only a handle '
                'in maintenance') in _fault(response)


def test_release_from_maintenance(api):
    first, _ = _seed(api)
    handle = _into_maintenance(api, first)
    response = _action(api, handle['uuid'].upper(), 'release')
    released = response.json
    assert set(released) == FIELDS
    assert (released['uuid'], released['in_use'], released['clean_state'],
            released['clean_reason'], released['clean_since']) == (
        handle['uuid'], False, None, None, None)
    assert not _in_use(api)
    assert _uuids(api, '?clean_state=maintenance') == []
    response = _action(api, handle['uuid'], 'release', status=409)
    assert 'is free' in _fault(response)


def test_in_use_and_cleaning_are_409(api):
    first, _ = _seed(api)
    arq = _bind(api, first['deployables'][0]['rp_uuid'])
    (bound,) = _in_use(api)
    for action in ('clean', 'release'):
        response = _action(api, bound['uuid'], action, status=409)
        assert f'Attach handle {bound["uuid"]} is in use' in _fault(
            response)
    # A handle being cleaned: its agent takes 3 s (a few hundred times
    # what the two requests below take) over the clean.
    api.conf.set_override('action_seconds', 3, 'fake_driver')
    api.app.delete(f'/v2/accelerator_requests/{arq}', headers=SERVICE,
                   status=204)
    (being_cleaned,) = _list(api, '?clean_state=cleaning')
    assert being_cleaned['uuid'] == bound['uuid']
    for action in ('clean', 'release'):
        response = _action(api, bound['uuid'], action, status=409)
        assert (f'Attach handle {bound["uuid"]} is cleaning'
                in _fault(response))
    wait_for(lambda: not _in_use(api), 'the clean')


def test_unknown_handle_is_404(api):
    _seed(api)
    for action in ('clean', 'release'):
        response = _action(api, MISSING, action, status=404)
        assert MISSING in _fault(response)
        response = _action(api, 'not-a-uuid', action, status=404)
        assert 'not-a-uuid' in _fault(response)


@pytest.mark.parametrize('v', ['2.0', '2.5', '2.7'])
def test_below_2_8_the_paths_are_unknown(api, v):
    _seed(api)
    uuid = _list(api)[0]['uuid']
    for method, path in (('get', ''), ('post', f'/{uuid}/clean'),
                         ('post', f'/{uuid}/release')):
        response = getattr(api.app, method)(
            f'/v2/attach_handles{path}', headers=version(v), status=404)
        assert 'could not be found' in _fault(response)
    # Without a version header, as Nova asks: 2.0.
    api.app.get('/v2/attach_handles', headers=ADMIN, status=404)


def test_policy(api):
    first, _ = _seed(api)
    handle = _into_maintenance(api, first)
    for headers in (user('p1', 'manager,member,reader'),
                    user('p1', 'member,reader'), user('p1', 'reader'),
                    SERVICE):
        headers = version('2.8', headers)
        response = api.app.get('/v2/attach_handles', headers=headers,
                               status=403)
        assert 'cyborg:attach_handle:get_all' in _fault(response)
        for action in ('clean', 'release'):
            response = _action(api, handle['uuid'], action, headers,
                               status=403)
            assert f'cyborg:attach_handle:{action}' in _fault(response)
    # Nothing changed.
    assert _uuids(api, '?clean_state=maintenance') == [handle['uuid']]


def test_no_conductor_is_503(api):
    first, _ = _seed(api)
    handle = _into_maintenance(api, first)
    api.conf.set_override('rpc_response_timeout', 1)
    api.stop_conductor()
    for action in ('clean', 'release'):
        response = _action(api, handle['uuid'], action, status=503)
        assert response.headers['Retry-After'] == '5'
        assert 'error_message' in response.json
    # The list is a read: no conductor needed; the handle is unchanged.
    (still,) = _list(api, '?clean_state=maintenance')
    assert still == handle


def test_answers_match_openapi(live_api):  # noqa: F811
    """Each status of the three operations, as a client gets it over
    HTTP, passes contract.CHECKS against openapi.yaml: documented status,
    headers and body, JSON errors."""
    first, _ = _seed(live_api)
    handle = _into_maintenance(live_api, first)
    free = _list(live_api, '?clean_state=none')[0]['uuid']
    schema = contract.load_schema(links=False)
    root = live_api.url[:-len('/v2')]
    member = version('2.8', user('p1'))

    def check(method: str, path: str, headers: dict[str, str],
              status: int, query: str = '') -> None:
        filled = path.format(uuid=handle['uuid'], free=free)
        url = root + filled + query
        response = requests.request(method, url, headers=headers,
                                    timeout=30)
        assert response.status_code == status, (method, url,
                                                response.text)
        template = ('/v2/attach_handles' if path == '/v2/attach_handles'
                    else '/v2/attach_handles/{uuid}/' + path.rsplit('/')[-1])
        operation = schema[template][method]
        params = ({} if path == '/v2/attach_handles'
                  else {'uuid': filled.split('/')[3]})
        case = operation.Case(headers=headers, path_parameters=params,
                              query=dict(urllib.parse.parse_qsl(query[1:])))
        case.validate_response(response, checks=contract.CHECKS)

    check('GET', '/v2/attach_handles', V28, 200)
    check('GET', '/v2/attach_handles', V28, 200,
          '?clean_state=maintenance&limit=1')
    check('GET', '/v2/attach_handles', V28, 400, '?clean_state=dirty')
    check('GET', '/v2/attach_handles', V28, 400, '?device_uuid=x')
    check('GET', '/v2/attach_handles', member, 403)
    check('GET', '/v2/attach_handles', version('2.7'), 404)
    check('GET', '/v2/attach_handles', version('2.99'), 406)
    for action in ('clean', 'release'):
        check('POST', f'/v2/attach_handles/{{free}}/{action}', V28, 409)
        check('POST', f'/v2/attach_handles/{MISSING}/{action}', V28, 404)
        check('POST', f'/v2/attach_handles/{{uuid}}/{action}', member, 403)
        check('POST', f'/v2/attach_handles/{{uuid}}/{action}',
              version('2.7'), 404)
    check('POST', '/v2/attach_handles/{uuid}/clean', V28, 202)
    wait_for(lambda: not _in_use(live_api), 'the clean')
    handle = _into_maintenance(live_api, first)
    check('POST', '/v2/attach_handles/{uuid}/release', V28, 200)
    handle = _into_maintenance(live_api, first)
    live_api.conf.set_override('rpc_response_timeout', 1)
    live_api.stop_conductor()
    for action in ('clean', 'release'):
        check('POST', f'/v2/attach_handles/{{uuid}}/{action}', V28, 503)
