"""openstacksdk's accelerator proxy (``conn.accelerator``) against the API.

Every proxy method, over HTTP, as the SDK (and so the ``openstack
accelerator`` commands) sends it, except ``update_deployable``, which
recurses forever inside the SDK. The wire shapes are checked on the server
side through ``live_api.seen``.
"""
from collections.abc import Iterator
from typing import Any

import pytest
from keystoneauth1 import service_token
from keystoneauth1 import session as ks_session
from keystoneauth1 import token_endpoint
from openstack import connection
from openstack import exceptions

from cyborg.tests.functional.clients.conftest import SERVICE_TOKEN

GROUPS = [{'resources:FPGA': '1', 'trait:CUSTOM_FAKE_DEVICE': 'required'}]
INSTANCE = '29901acf-5b5e-4a7f-8a3f-1b2c3d4e5f60'
MISSING = '9a1a5b1e-2f83-4f3f-a8b3-7b3cc1b5c7c9'

# The SDK's notices about its own future releases.
pytestmark = pytest.mark.filterwarnings(
    'ignore::PendingDeprecationWarning:openstack')


def _connect(live_api, **kwargs: Any) -> connection.Connection:
    """A connection as ``openstack --os-auth-type admin_token`` makes it:
    the endpoint of the auth plugin serves every service."""
    return connection.Connection(
        auth_type='admin_token',
        auth={'endpoint': live_api.url, 'token': 'admin'}, **kwargs)


@pytest.fixture
def conn(live_api) -> Iterator[connection.Connection]:
    """An administrator, with no microversion: the server's 2.0."""
    conn = _connect(live_api)
    yield conn
    conn.close()


@pytest.fixture
def conn_at(live_api) -> Iterator[Any]:
    """Connections with ``accelerator_default_microversion`` set."""
    opened = []

    def connect(microversion: str) -> connection.Connection:
        opened.append(_connect(
            live_api, accelerator_default_microversion=microversion))
        return opened[-1]

    yield connect
    for conn in opened:
        conn.close()


@pytest.fixture
def service_conn(live_api) -> Iterator[connection.Connection]:
    """The SDK as a service uses it: a keystoneauth session whose auth
    sends the user's token and a service token (X-Service-Token), as
    Nova's ``[service_user] send_service_user_token`` does. The SDK's own
    config has no way to add headers; a session is how a caller does it.
    """
    auth = service_token.ServiceTokenAuthWrapper(
        user_auth=token_endpoint.Token(live_api.url, 'admin'),
        service_auth=token_endpoint.Token(live_api.url, SERVICE_TOKEN))
    conn = connection.Connection(session=ks_session.Session(auth=auth))
    yield conn
    conn.close()


@pytest.fixture
def deployable(live_api) -> dict[str, Any]:
    """One fake FPGA on host cmp1 (hypervisor node1): its deployable."""
    # No agent answers for cmp1: programming is a 503.
    [device] = live_api.seed('cmp1', hostname='node1', agent=False)
    return dict(device['deployables'][0], device_uuid=device['uuid'])


def _last(live_api, method: str):
    return [s for s in live_api.seen if s.method == method][-1]


def _bind(rp_uuid: str) -> list[dict[str, str]]:
    return [{'op': 'add', 'path': '/hostname', 'value': 'node1'},
            {'op': 'add', 'path': '/device_rp_uuid', 'value': rp_uuid},
            {'op': 'add', 'path': '/instance_uuid', 'value': INSTANCE}]


# --- version discovery and microversions ----------------------------------

def test_version_discovery(live_api, conn):
    data = conn.accelerator.get_endpoint_data()
    assert data.api_version == (2, 0)
    assert data.min_microversion == (2, 0)
    assert data.max_microversion >= (2, 3)
    assert conn.accelerator.get_endpoint().rstrip('/') == live_api.url
    # The SDK's first request: the version document, with no token.
    first = live_api.seen[0]
    assert (first.method, first.path, first.status) == ('GET', '/v2', 200)
    assert 'x-auth-token' not in first.headers


def test_default_microversion_is_sent_on_every_request(live_api, conn_at,
                                                       deployable):
    # python-cyborgclient asks for 2.3 by default.
    conn = conn_at('2.3')
    [device] = conn.accelerator.devices()
    assert device.status == 'enabled'
    calls = [s for s in live_api.seen if s.path != '/v2']
    assert calls and all(s.headers['openstack-api-version'] ==
                         'accelerator 2.3' for s in calls)


def test_microversion_above_the_maximum_fails_before_any_call(live_api,
                                                              conn_at):
    conn = conn_at('2.99')
    with pytest.raises(exceptions.ConfigException, match='maximum of 2.'):
        list(conn.accelerator.devices())
    assert {s.path for s in live_api.seen} <= {'/v2', '/v2/'}


# --- device profiles --------------------------------------------------------

def test_device_profiles(live_api, conn, conn_at):
    dp = conn.accelerator.create_device_profile(
        name='dp1', groups=GROUPS, description='one FPGA')
    assert (dp.name, dp.groups, dp.description) == ('dp1', GROUPS,
                                                    'one FPGA')
    assert dp.uuid and dp.created_at
    post = _last(live_api, 'POST')
    assert (post.path, post.status) == ('/v2/device_profiles', 201)
    conn.accelerator.create_device_profile(name='dp2', groups=GROUPS)

    assert sorted(p.name for p in conn.accelerator.device_profiles()) == [
        'dp1', 'dp2']
    # The SDK filters lists itself: no query reaches the server.
    assert [p.uuid for p in conn.accelerator.device_profiles(name='dp1')
            ] == [dp.uuid]
    assert _last(live_api, 'GET').query == ''

    got = conn.accelerator.get_device_profile(dp.uuid)
    assert (got.uuid, got.name, got.groups) == (dp.uuid, 'dp1', GROUPS)
    # A name needs 2.2; below it the server's 406 text reaches the user.
    got = conn_at('2.2').accelerator.get_device_profile('dp1')
    assert got.uuid == dp.uuid
    with pytest.raises(exceptions.HttpException) as raised:
        conn.accelerator.get_device_profile('dp1')
    assert raised.value.status_code == 406
    assert 'microversion 2.2' in raised.value.details

    conn.accelerator.delete_device_profile(dp.uuid)
    conn.accelerator.delete_device_profile('dp2')
    assert list(conn.accelerator.device_profiles()) == []


def test_device_profile_errors(conn):
    conn.accelerator.create_device_profile(name='dp1', groups=GROUPS)
    with pytest.raises(exceptions.ConflictException):
        conn.accelerator.create_device_profile(name='dp1', groups=GROUPS)
    with pytest.raises(exceptions.BadRequestException) as raised:
        conn.accelerator.create_device_profile(
            name='bad', groups=[{'resources:FPGA': 'x'}])
    assert 'resources:FPGA' in raised.value.details

    with pytest.raises(exceptions.NotFoundException) as raised:
        conn.accelerator.get_device_profile(MISSING)
    # The faultstring of the server's error body is the SDK's message.
    assert MISSING in raised.value.details
    assert 'could not be found' in raised.value.details
    with pytest.raises(exceptions.NotFoundException):
        conn.accelerator.delete_device_profile(MISSING, ignore_missing=False)
    assert conn.accelerator.delete_device_profile(MISSING) is None


# --- accelerator requests ---------------------------------------------------

def test_accelerator_request_bind_unbind_delete(live_api, conn,
                                                service_conn, deployable):
    conn.accelerator.create_device_profile(name='dp1', groups=GROUPS)
    arq = conn.accelerator.create_accelerator_request(
        device_profile_name='dp1')
    assert (arq.state, arq.device_profile_name,
            arq.device_profile_group_id) == ('Initial', 'dp1', 0)
    assert arq.hostname is None and arq.attach_handle_info == {}
    assert _last(live_api, 'POST').status == 201
    assert [a.uuid for a in conn.accelerator.accelerator_requests()] == [
        arq.uuid]

    # Binding is for Nova, with a service token.
    with pytest.raises(exceptions.ForbiddenException) as raised:
        conn.accelerator.patch_accelerator_request(
            arq.uuid, _bind(deployable['rp_uuid']))
    assert 'requires a service token' in raised.value.details
    service_conn.accelerator.patch_accelerator_request(
        arq.uuid, _bind(deployable['rp_uuid']))
    patch = _last(live_api, 'PATCH')
    assert patch.path == f'/v2/accelerator_requests/{arq.uuid}'
    assert patch.headers['x-service-token'] == SERVICE_TOKEN
    assert patch.status == 202

    bound = conn.accelerator.get_accelerator_request(arq.uuid)
    assert (bound.state, bound.hostname, bound.device_rp_uuid,
            bound.instance_uuid) == ('Bound', 'node1',
                                     deployable['rp_uuid'], INSTANCE)
    assert bound.attach_handle_type == 'TEST_PCI'
    assert bound.attach_handle_info == {'domain': '0000', 'bus': '0c',
                                        'device': '00', 'function': '1'}

    with pytest.raises(exceptions.ForbiddenException) as raised:
        conn.accelerator.delete_accelerator_request(arq.uuid)
    assert f'is bound to instance {INSTANCE}' in raised.value.details

    # What `openstack accelerator arq unbind` sends.
    service_conn.accelerator.patch_accelerator_request(
        arq.uuid, [{'op': 'remove', 'path': p} for p in
                   ('/hostname', '/instance_uuid', '/device_rp_uuid')])
    unbound = conn.accelerator.get_accelerator_request(arq.uuid)
    assert unbound.state == 'Unbound'
    assert unbound.instance_uuid is None
    assert unbound.attach_handle_info == {}

    assert conn.accelerator.delete_accelerator_request(arq.uuid) is None
    delete = _last(live_api, 'DELETE')
    assert (delete.path, delete.status) == (
        f'/v2/accelerator_requests/{arq.uuid}', 204)
    assert list(conn.accelerator.accelerator_requests()) == []


def test_accelerator_request_errors(conn):
    with pytest.raises(exceptions.NotFoundException):
        conn.accelerator.create_accelerator_request(
            device_profile_name='fake_dp')
    with pytest.raises(exceptions.NotFoundException) as raised:
        conn.accelerator.get_accelerator_request(MISSING)
    assert MISSING in raised.value.details
    with pytest.raises(exceptions.NotFoundException):
        conn.accelerator.delete_accelerator_request(MISSING,
                                                    ignore_missing=False)
    assert conn.accelerator.delete_accelerator_request(MISSING) is None


# --- devices, deployables, attributes ---------------------------------------

def test_devices(live_api, conn, conn_at, deployable):
    # Enabling a device prepares it through its agent.
    live_api.start_agent('cmp1')
    [device] = conn.accelerator.devices()
    assert (device.uuid, device.type, device.hostname) == (
        deployable['device_uuid'], 'FPGA', 'node1')
    assert device.status is None  # only from 2.3
    got = conn.accelerator.get_device(device.uuid)
    assert (got.uuid, got.vendor, got.model) == (
        device.uuid, device.vendor, device.model)
    with pytest.raises(exceptions.NotFoundException) as raised:
        conn.accelerator.get_device(MISSING)
    assert MISSING in raised.value.details

    if not hasattr(conn.accelerator, 'enable_device'):
        pytest.skip('this openstacksdk has no enable_device/disable_device')
    at_2_3 = conn_at('2.3')
    conn.accelerator.disable_device(device.uuid)
    post = _last(live_api, 'POST')
    assert (post.path, post.status) == (
        f'/v2/devices/{device.uuid}/disable', 200)
    assert at_2_3.accelerator.get_device(device.uuid).status == 'maintaining'
    conn.accelerator.enable_device(device)
    assert at_2_3.accelerator.get_device(device.uuid).status == 'enabled'
    # The SDK does not look at the status of these calls; the server
    # still answers 404 for an unknown device.
    conn.accelerator.enable_device(MISSING)
    assert _last(live_api, 'POST').status == 404


def test_deployables(live_api, conn, deployable):
    [listed] = conn.accelerator.deployables()
    assert listed.id == deployable['uuid']
    got = conn.accelerator.get_deployable(deployable['uuid'])
    assert (got.id, got.name, got.num_accelerators) == (
        deployable['uuid'], deployable['name'],
        deployable['num_accelerators'])
    with pytest.raises(exceptions.NotFoundException):
        conn.accelerator.get_deployable(MISSING)

    # The SDK sends PATCH /deployables/<u>/program/<u>; the route takes it
    # and asks the device's agent, of which there is none here.
    live_api.conf.set_override('bind_timeout', 1, 'conductor')
    with pytest.raises(exceptions.HttpException) as raised:
        conn.accelerator.patch_deployable(deployable['uuid'], [
            {'op': 'replace', 'path': '/program',
             'value': [{'image_uuid': MISSING}]}])
    assert raised.value.status_code == 503
    assert 'is unavailable' in raised.value.details
    assert _last(live_api, 'PATCH').path == (
        f'/v2/deployables/{deployable["uuid"]}/program/'
        f'{deployable["uuid"]}')


def test_attributes(live_api, conn, deployable):
    seeded = list(conn.accelerator.attributes())
    assert {a.key: a.value for a in seeded} == deployable['attributes']
    # Clients know a deployable's integer id only from its attributes.
    [deployable_id] = {a.deployable_id for a in seeded}

    created = conn.accelerator.create_attribute(
        deployable_id=deployable_id, key='region', value='rack-1')
    assert (created.deployable_id, created.key, created.value) == (
        deployable_id, 'region', 'rack-1')
    post = _last(live_api, 'POST')
    assert (post.path, post.status) == ('/v2/attributes', 201)
    got = conn.accelerator.get_attribute(created.uuid)
    assert (got.uuid, got.key, got.value) == (created.uuid, 'region',
                                              'rack-1')
    assert created.uuid in {a.uuid for a in conn.accelerator.attributes()}

    conn.accelerator.delete_attribute(created)
    assert _last(live_api, 'DELETE').status == 204
    with pytest.raises(exceptions.NotFoundException) as raised:
        conn.accelerator.get_attribute(created.uuid)
    assert created.uuid in raised.value.details
    with pytest.raises(exceptions.NotFoundException):
        conn.accelerator.delete_attribute(created.uuid, ignore_missing=False)
    assert len(list(conn.accelerator.attributes())) == len(seeded)
