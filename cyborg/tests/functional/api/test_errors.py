"""Errors that are not the client's: outages and bugs; and the one form
of every error body, whoever answers."""
import json
import re
import sys

import pytest
import webob
import webtest
from oslo_messaging._drivers import common as rpc_common

from cyborg.api import app
from cyborg.api.controllers import root
from cyborg.common import exception
from cyborg.conductor import rpcapi as conductor_rpcapi
from cyborg.db.api import device_profiles
from cyborg.tests.functional.api.fixtures import ADMIN
from cyborg.tests.functional.api.fixtures import user
from cyborg.tests.functional.api.fixtures import version


def _fault(response):
    assert response.content_type == 'application/json'
    return json.loads(response.json['error_message'])


def test_internal_errors_do_not_leak(api, monkeypatch, caplog):
    def broken(*args, **kwargs):
        raise RuntimeError('SELECT password FROM secrets')

    monkeypatch.setattr(device_profiles, 'get_all', broken)
    response = api.app.get('/v2/device_profiles', headers=ADMIN, status=500)
    fault = _fault(response)
    assert 'password' not in fault['faultstring']
    assert 'see the cyborg-api log' in fault['faultstring']
    assert fault['faultcode'] == 'Server'
    assert 'SELECT password FROM secrets' in caplog.text


def test_no_conductor_is_503(api):
    api.conf.set_override('rpc_response_timeout', 1)
    api.stop_conductor()
    response = api.app.post_json(
        '/v2/device_profiles',
        [{'name': 'x', 'groups': [{'resources:FPGA': '1'}]}],
        headers=ADMIN, status=503)
    assert 'no cyborg-conductor answered' in _fault(response)['faultstring']


def test_conductor_errors_keep_their_message_only(api, monkeypatch):
    # Over a real transport, an error a conductor raised is rebuilt with
    # the conductor's traceback in its str(); the client gets the message.
    try:
        raise exception.DuplicateDeviceProfileName(name='dup')
    except exception.DuplicateDeviceProfileName:
        sent = rpc_common.serialize_remote_exception(sys.exc_info())
    remote = rpc_common.deserialize_remote_exception(
        sent, ['cyborg.common.exception'])
    assert 'Traceback' in str(remote)

    def create(*args, **kwargs):
        raise remote

    monkeypatch.setattr(conductor_rpcapi.ConductorAPI,
                        'device_profile_create', create)
    response = api.app.post_json(
        '/v2/device_profiles',
        [{'name': 'dup', 'groups': [{'resources:FPGA': '1'}]}],
        headers=ADMIN, status=409)
    assert _fault(response)['faultstring'] == (
        'A device profile named dup already exists.')


def test_an_exception_outside_a_handler_is_a_json_500(api, monkeypatch,
                                                      caplog):
    def broken(*args, **kwargs):
        raise RuntimeError('secret in /etc/cyborg')

    # Not a WSME handler: pecan lets the exception out of the application.
    monkeypatch.setattr(root, 'version_document', broken)
    response = api.app.get('/', status=500)
    fault = _fault(response)
    request_id = response.headers['X-OpenStack-Request-Id']
    assert fault == {'faultcode': 'Server', 'debuginfo': None,
                     'faultstring': f'An unexpected error occurred (request '
                                    f'{request_id}); see the cyborg-api '
                                    'log.'}
    assert 'secret in /etc/cyborg' in caplog.text


@pytest.mark.parametrize('chunked', [False, True])
def test_413_says_the_limit_once(api, chunked):
    api.conf.set_override('max_request_body_size', 64, 'oslo_middleware')
    request = webob.Request.blank(
        '/v2/device_profiles', method='POST', body=b'[' + b' ' * 100 + b']',
        headers=dict(ADMIN, **{'Content-Type': 'application/json'}))
    if chunked:
        del request.environ['CONTENT_LENGTH']
        del request.environ['webob.is_body_seekable']
        request.environ['wsgi.input_terminated'] = True
    response = api.app.do_request(request, status=413)
    assert _fault(response)['faultstring'] == (
        'The request body is too large: send at most 64 bytes.')


def test_keystone_401_is_its_message(conf):
    conf.set_override('auth_strategy', 'keystone', 'api')
    conf.set_override('www_authenticate_uri', 'http://keystone.invalid/v3',
                      'keystone_authtoken')
    keystone = webtest.TestApp(app.setup_app(conf))
    response = keystone.get('/v2/devices', status=401)
    assert _fault(response)['faultstring'] == (
        'The request you have made requires authentication.')


# The statuses webob repeats in the bodies it makes.
_ECHO = re.compile(r'\b[1-5]\d\d [A-Z][a-z]+')


def _requests(api):
    """A request for each error status the API answers, as a client can
    provoke it."""
    profile = api.dp('dp1')
    json_headers = dict(ADMIN, **{'Content-Type': 'application/json'})
    return [
        (400, 'POST', '/v2/device_profiles', b'[{', json_headers),
        (400, 'GET', '/v2/devices?limit=x', None, version('2.4')),
        (401, 'GET', '/v2/devices', None, {}),
        (403, 'GET', '/v2/devices', None, user('p1', '')),
        (404, 'GET', '/v2/x/y/z', None, ADMIN),
        (404, 'GET', '/v1/nope', None, ADMIN),
        (404, 'GET', '/nope', None, ADMIN),
        (404, 'GET', '/v2/services', None, ADMIN),
        (404, 'GET', f'/v2/device_profiles/{"0" * 8}-0000-4000-8000-'
                     f'{"0" * 12}', None, ADMIN),
        (405, 'PUT', '/v2/devices', b'{}', json_headers),
        (405, 'POST', f'/v2/device_profiles/{profile["uuid"]}', b'{}',
         json_headers),
        (406, 'GET', '/v2', None, {'OpenStack-API-Version':
                                   'accelerator 9.0'}),
        (406, 'GET', '/v2/devices', None, dict(ADMIN, Accept='text/html')),
        (409, 'POST', '/v2/device_profiles', json.dumps(
            [{'name': 'dp1', 'groups': [{'resources:FPGA': '1'}]}]).encode(),
         json_headers),
        (413, 'POST', '/v2/device_profiles', b'[' + b' ' * 200000 + b']',
         json_headers),
        (415, 'POST', '/v2/device_profiles', b'a=1',
         dict(ADMIN, **{'Content-Type': 'multipart/form-data'})),
        (500, 'POST', '/v2/device_profiles', json.dumps(
            [{'name': '', 'groups': []}]).encode(), json_headers),
    ]


def test_every_error_is_one_json_sentence(api):
    for status, method, path, body, headers in _requests(api):
        response = api.app.request(path, method=method, body=body,
                                   headers=headers, expect_errors=True)
        where = (method, path, response.body[:300])
        assert response.status_int == status, where
        message = _fault(response)['faultstring']
        assert not _ECHO.search(message), where
        assert '<' not in message and '{"' not in message, where


@pytest.mark.parametrize('case', ['bad-name', 'duplicate-uuid'])
def test_a_legacy_500_is_one_warning(api, caplog, case):
    # Below 2.4 a bad name, or a uuid taken (which the conductor finds),
    # is the client's error, answered with the 500 those clients expect:
    # a warning with the request id and the cause, no traceback.
    profile = {'name': '', 'groups': [{'resources:FPGA': '1'}]}
    if case == 'duplicate-uuid':
        profile.update(name='other', uuid=api.dp('taken')['uuid'])
    caplog.set_level('DEBUG')
    response = api.app.post_json('/v2/device_profiles', [profile],
                                 headers=ADMIN, status=500)
    fault = _fault(response)
    assert fault['faultcode'] == 'Server'
    assert 'Traceback' not in fault['faultstring']
    request_id = response.headers['X-OpenStack-Request-Id']
    assert not [r for r in caplog.records if r.levelname in ('ERROR',
                                                             'CRITICAL')]
    [warning] = [r for r in caplog.records if r.levelname == 'WARNING'
                 and request_id in r.getMessage()]
    message = warning.getMessage()
    assert fault['faultstring'] in message
    assert '\n' not in message
    assert warning.exc_info is None
