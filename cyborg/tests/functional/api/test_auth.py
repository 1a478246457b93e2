"""Authentication: keystonemiddleware in front of everything but versions."""
import json

import pytest
import webtest

from cyborg.api import app
from cyborg.tests.functional.api.fixtures import ADMIN


@pytest.fixture
def keystone_api(conf):
    conf.set_override('auth_strategy', 'keystone', 'api')
    conf.set_override('www_authenticate_uri', 'http://keystone.invalid/v3',
                      'keystone_authtoken')
    return webtest.TestApp(app.setup_app(conf))


@pytest.mark.parametrize('path', ['/v2/devices', '/v2/device_profiles',
                                  '/v2/accelerator_requests'])
def test_keystone_refuses_requests_without_a_token(keystone_api, path):
    response = keystone_api.get(path, status=401)
    assert response.content_type == 'application/json'
    fault = json.loads(response.json['error_message'])
    assert fault['faultcode'] == 'Client'
    assert response.headers['WWW-Authenticate'] == (
        'Keystone uri="http://keystone.invalid/v3"')


@pytest.mark.parametrize('path', ['/', '/v2', '/v2/'])
def test_version_documents_need_no_token(keystone_api, path):
    keystone_api.get(path, status=200)


def test_noauth_needs_some_token(api):
    response = api.app.get('/v2/device_profiles', status=401)
    fault = json.loads(response.json['error_message'])
    assert 'X-Auth-Token' in fault['faultstring']
    api.app.get('/v2/device_profiles', headers=ADMIN, status=200)


def test_oversize_body_is_413_and_writes_nothing(api):
    api.conf.set_override('max_request_body_size', 1024,
                          'oslo_middleware')
    big = [{'name': 'big', 'description': 'x' * 2048,
            'groups': [{'resources:FPGA': '1'}]}]
    response = api.app.post_json('/v2/device_profiles', big, headers=ADMIN,
                                 status=413)
    assert response.content_type == 'application/json'
    fault = json.loads(response.json['error_message'])
    assert 'too large' in fault['faultstring'].lower()
    assert api.app.get('/v2/device_profiles',
                       headers=ADMIN).json['device_profiles'] == []
