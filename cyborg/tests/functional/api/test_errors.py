"""Errors that are not the client's: outages and bugs."""
import json
import sys

from oslo_messaging._drivers import common as rpc_common

from cyborg.common import exception
from cyborg.conductor import rpcapi as conductor_rpcapi
from cyborg.db.api import device_profiles
from cyborg.tests.functional.api.fixtures import ADMIN


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
