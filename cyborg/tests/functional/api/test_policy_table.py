"""Who may do what: every API rule against every kind of caller.

Each row is a request and the status each caller gets. Rows run on a fresh
database holding one device, the profile ``dp1`` and one Initial
accelerator request of project p1.
"""
import json

import pytest

from cyborg.tests.functional.api.fixtures import ADMIN
from cyborg.tests.functional.api.fixtures import user

CALLERS = {
    'reader': user('p1', 'reader'),
    'member': user('p1', 'member,reader'),
    'manager': user('p1', 'manager,member,reader'),
    'other_project': user('p2', 'manager,member,reader'),
    'admin': ADMIN,
    'service': {'X-Auth-Token': 'nova:services', 'X-Roles': 'service',
                'X-Service-Roles': 'service'},
    'system_admin': dict(ADMIN, **{'OpenStack-System-Scope': 'all'}),
    'no_role': {'X-Auth-Token': 'nobody:p1'},
}

OK_READ_PROJECT = {'reader': 200, 'member': 200, 'manager': 200,
                   'other_project': 200, 'admin': 200, 'service': 200,
                   'system_admin': 403, 'no_role': 403}
MANAGER_READ = {'reader': 403, 'member': 403, 'manager': 200,
                'other_project': 200, 'admin': 200, 'service': 403,
                'system_admin': 403, 'no_role': 403}


def _admin_only(ok):
    return {'reader': 403, 'member': 403, 'manager': 403,
            'other_project': 403, 'admin': ok, 'service': 403,
            'system_admin': 403, 'no_role': 403}


# (name, method, path, body, expected status per caller[, microversion])
ROWS = [
    ('dp:get_all', 'GET', '/v2/device_profiles', None, OK_READ_PROJECT),
    ('dp:get_one', 'GET', '/v2/device_profiles/{dp}', None,
     OK_READ_PROJECT),
    ('dp:create', 'POST', '/v2/device_profiles',
     [{'name': 'new', 'groups': [{'resources:FPGA': '1'}]}],
     _admin_only(201)),
    ('dp:delete', 'DELETE', '/v2/device_profiles/{dp}', None,
     _admin_only(204)),
    ('dp:update', 'PATCH', '/v2/device_profiles/{dp}',
     [{'op': 'replace', 'path': '/is_public', 'value': False}],
     _admin_only(200), '2.10'),
    ('dp:project_list', 'GET', '/v2/device_profiles/{dp}/projects', None,
     _admin_only(200), '2.10'),
    ('dp:project_add', 'PUT', '/v2/device_profiles/{dp}/projects/p9', None,
     _admin_only(204), '2.10'),
    # p9 is not in the list: past the policy, 404.
    ('dp:project_remove', 'DELETE', '/v2/device_profiles/{dp}/projects/p9',
     None, _admin_only(404), '2.10'),
    # ARQs are project-owned: other projects do not see p1's request.
    ('arq:get_all', 'GET', '/v2/accelerator_requests', None,
     OK_READ_PROJECT),
    ('arq:get_one', 'GET', '/v2/accelerator_requests/{arq}', None,
     dict(OK_READ_PROJECT, other_project=404)),
    ('arq:create', 'POST', '/v2/accelerator_requests',
     {'device_profile_name': 'dp1'},
     {'reader': 403, 'member': 201, 'manager': 201, 'other_project': 201,
      'admin': 201, 'service': 201, 'system_admin': 403, 'no_role': 403}),
    ('arq:delete', 'DELETE', '/v2/accelerator_requests/{arq}', None,
     {'reader': 403, 'member': 204, 'manager': 204, 'other_project': 404,
      'admin': 204, 'service': 204, 'system_admin': 403, 'no_role': 403}),
    ('arq:update (bind)', 'PATCH', '/v2/accelerator_requests', 'bind',
     # Only a caller with a service token may bind.
     {'reader': 403, 'member': 403, 'manager': 403, 'other_project': 403,
      'admin': 403, 'service': 202, 'system_admin': 403, 'no_role': 403}),
    ('device:get_all', 'GET', '/v2/devices', None, MANAGER_READ),
    ('device:get_one', 'GET', '/v2/devices/{device}', None, MANAGER_READ),
    ('device:disable', 'POST', '/v2/devices/{device}/disable', None,
     _admin_only(200)),
    ('device:enable', 'POST', '/v2/devices/{device}/enable', None,
     _admin_only(200)),
    ('device:set_health', 'PUT', '/v2/devices/{device}/health',
     {'state': 'unhealthy'}, _admin_only(200), '2.6'),
    ('device:set_health (clear)', 'DELETE', '/v2/devices/{device}/health',
     None, _admin_only(200), '2.6'),
    ('device:impact', 'GET', '/v2/devices/{device}/impact', None,
     _admin_only(200), '2.6'),
    ('device:get_layout', 'GET', '/v2/devices/{device}/layout', None,
     _admin_only(200), '2.8'),
    ('device:set_layout (clear)', 'DELETE', '/v2/devices/{device}/layout',
     None, _admin_only(200), '2.8'),
    ('deployable:get_all', 'GET', '/v2/deployables', None, MANAGER_READ),
    ('deployable:get_one', 'GET', '/v2/deployables/{deployable}', None,
     MANAGER_READ),
    ('attribute:get_all', 'GET', '/v2/attributes', None, MANAGER_READ),
    ('attribute:create', 'POST', '/v2/attributes', 'attribute',
     _admin_only(201)),
    ('service:get_all', 'GET', '/v2/services', None, MANAGER_READ, '2.5'),
    ('driver:get_all', 'GET', '/v2/drivers', None, MANAGER_READ, '2.5'),
    # No agent of cmp1 registered: past the policy, 404.
    ('host:discover', 'POST', '/v2/hosts/cmp1/discover', None,
     _admin_only(404), '2.5'),
    ('host:driver_list', 'GET', '/v2/hosts/cmp1/drivers', None,
     _admin_only(404), '2.8'),
    ('host:driver_enable', 'POST',
     '/v2/hosts/cmp1/drivers/fake_driver/enable', None, _admin_only(404),
     '2.8'),
    ('host:driver_disable', 'POST',
     '/v2/hosts/cmp1/drivers/fake_driver/disable', None, _admin_only(404),
     '2.8'),
    ('host:driver_reload', 'POST', '/v2/hosts/cmp1/drivers/reload', None,
     _admin_only(404), '2.8'),
    ('capacity:get', 'GET', '/v2/capacity', None, MANAGER_READ, '2.7'),
    ('attach_handle:get_all', 'GET', '/v2/attach_handles', None,
     _admin_only(200), '2.8'),
    # The handle is free: past the policy, 409 (not in maintenance).
    ('attach_handle:clean', 'POST', '/v2/attach_handles/{handle}/clean',
     None, _admin_only(409), '2.8'),
    ('attach_handle:release', 'POST',
     '/v2/attach_handles/{handle}/release', None, _admin_only(409), '2.8'),
    ('deployable:get_all (v1)', 'GET', '/v1/accelerators', None,
     MANAGER_READ),
    ('deployable:get_one (v1)', 'GET', '/v1/accelerators/{deployable}',
     None, MANAGER_READ),
]

CASES = [pytest.param(row, caller, id=f'{row[0]}-{caller}')
         for row in ROWS for caller in CALLERS]


@pytest.mark.parametrize('row, caller', CASES)
def test_policy(api, row, caller):
    name, method, path, body, expected, *microversion = row
    device = api.seed('cmp1', hostname='node1')[0]
    deployable = device['deployables'][0]
    dp = api.dp('dp1')
    [arq] = api.app.post_json('/v2/accelerator_requests',
                              {'device_profile_name': 'dp1'},
                              headers=user('p1')).json['arqs']
    if body == 'bind':
        body = {arq['uuid']: [
            {'op': 'add', 'path': '/hostname', 'value': 'node1'},
            {'op': 'add', 'path': '/device_rp_uuid',
             'value': deployable['rp_uuid']},
            {'op': 'add', 'path': '/instance_uuid',
             'value': '29901acf-5b5e-4a7f-8a3f-1b2c3d4e5f60'}]}
    elif body == 'attribute':
        body = {'deployable_uuid': deployable['uuid'], 'key': 'k',
                'value': 'v'}
    handle = api.app.get('/v2/attach_handles', headers=dict(
        ADMIN, **{'OpenStack-API-Version': 'accelerator 2.8'})
    ).json['attach_handles'][0]
    url = path.format(dp=dp['uuid'], arq=arq['uuid'],
                      device=device['uuid'], deployable=deployable['uuid'],
                      handle=handle['uuid'])
    extra = {}
    if body is not None:
        extra = {'body': json.dumps(body).encode(),
                 'content_type': 'application/json'}
    headers = dict(CALLERS[caller])
    if microversion:
        headers['OpenStack-API-Version'] = f'accelerator {microversion[0]}'
    response = api.app.request(url, method=method, headers=headers,
                               expect_errors=True, **extra)
    assert response.status_int == expected[caller], response.body
