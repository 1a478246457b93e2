"""Project limits through HTTP: a create or a bind over a limit is a 403
naming it, Keystone unreachable a 503; oslo.limit's fixture stands in
for Keystone (functional/test_limits_flow.py runs a real one)."""
import json
import uuid

import pytest
from keystoneauth1 import exceptions as ks_exceptions
from oslo_limit import fixture as limit_fixture
from oslo_limit import limit  # noqa: F401  (registers [oslo_limit])

from cyborg.common import outages
from cyborg.tests.functional.api import fixtures
from cyborg.tests.functional.api.fixtures import SERVICE
from cyborg.tests.functional.api.fixtures import user

ARQS = '/v2/accelerator_requests'


@pytest.fixture
def limited(conf, sqlite_engine):
    """The API, its conductor enforcing the limits of a fake Keystone:
    2 requests and 1 FPGA for every project, 4 requests for p2."""
    conf.set_override('driver', 'unified_limits', 'quota')
    conf.set_override('endpoint_id', 'cyborg-endpoint', 'oslo_limit')
    keystone = limit_fixture.LimitFixture(
        {'accelerator_requests': 2, 'class:FPGA': 1},
        {'p2': {'accelerator_requests': 4}})
    keystone.setUp()
    try:
        for api in fixtures._api(conf, sqlite_engine):
            api.seed('cmp1', hostname='node1')
            api.dp('one', [{'resources:FPGA': '1'}])
            api.dp('two', [{'resources:FPGA': '2'}])
            yield api, keystone
    finally:
        keystone.cleanUp()
        outages.tracker.clear()


def _fault(response):
    assert response.content_type == 'application/json'
    return json.loads(response.json['error_message'])['faultstring']


def _create(api, profile, project, status=201):
    return api.app.post_json(ARQS, {'device_profile_name': profile},
                             headers=user(project), status=status)


def _bind_body(arqs, rp_uuid):
    instance = str(uuid.uuid4())
    return {a['uuid']: [
        {'path': '/hostname', 'op': 'add', 'value': 'node1'},
        {'path': '/device_rp_uuid', 'op': 'add', 'value': rp_uuid},
        {'path': '/instance_uuid', 'op': 'add', 'value': instance}]
        for a in arqs}


def test_a_create_over_the_limit_is_a_403_naming_it(limited):
    api, _ = limited
    _create(api, 'one', 'p1')
    fault = _fault(_create(api, 'two', 'p1', status=403))
    assert fault == ('Project p1 is over its limit of 2 for '
                     'accelerator_requests: it holds 1 and this request '
                     'makes 2.')
    # A project limit goes before the registered one.
    _create(api, 'two', 'p2')
    _create(api, 'two', 'p2')
    assert 'limit of 4' in _fault(_create(api, 'one', 'p2', status=403))
    assert len(api.app.get(ARQS, headers=user('p1')).json['arqs']) == 1


def test_a_bind_over_a_class_limit_is_a_403_and_writes_nothing(limited):
    api, _ = limited
    [device] = api.app.get('/v2/deployables', headers=fixtures.ADMIN
                           ).json['deployables']
    arqs = _create(api, 'two', 'p1').json['arqs']
    fault = _fault(api.app.patch_json(
        ARQS, _bind_body(arqs, device['rp_uuid']), headers=SERVICE,
        status=403))
    assert fault == ('Project p1 is over its limit of 1 for class:FPGA: '
                     'it holds 0 and this request binds 2.')
    assert {a['state'] for a in api.app.get(
        ARQS, headers=user('p1')).json['arqs']} == {'Initial'}
    api.app.patch_json(ARQS, _bind_body(arqs[:1], device['rp_uuid']),
                       headers=SERVICE, status=202)


def test_keystone_unreachable_is_a_503(limited):
    api, keystone = limited
    keystone.mock_conn.registered_limits.side_effect = (
        ks_exceptions.ConnectFailure('connection refused'))
    response = _create(api, 'one', 'p1', status=503)
    assert response.headers['Retry-After']
    assert _fault(response) == (
        'Service unavailable: cyborg cannot read the limits of project(s) '
        'p1 from Keystone (the identity service) to check this request; '
        'retry later.')
    assert api.app.get(ARQS, headers=user('p1')).json['arqs'] == []
