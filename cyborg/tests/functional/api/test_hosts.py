"""POST /v2/hosts/{host}/discover (microversion 2.5): API → conductor →
a real agent service, in one process on the in-memory transport."""
import datetime
import json

import pytest
import sqlalchemy as sa

from cyborg import context as cyborg_context
from cyborg.accelerator.drivers import fake
from cyborg.agent import manager as agent_manager
from cyborg.agent import resource_tracker
from cyborg.common import rpc
from cyborg.common import rpc_service
from cyborg.conductor import rpcapi as conductor_rpcapi
from cyborg.db import models
from cyborg.db.api import inventory
from cyborg.db.api import services
from cyborg.tests.functional.api.fixtures import ADMIN
from cyborg.tests.functional.api.fixtures import user
from cyborg.tests.functional.api.fixtures import version

HOST = 'cmp7'
LATEST = version('2.5')


def _fault(response):
    assert response.content_type == 'application/json'
    return json.loads(response.json['error_message'])['faultstring']


def _register(host=HOST):
    services.heartbeat(cyborg_context.get_admin_context(), host,
                       'cyborg-agent', '0.1.0', f'{host}.example')


@pytest.fixture
def agent(api):
    """The agent of HOST with the fake driver, registered and listening."""
    api.conf.set_override('host', HOST)
    api.conf.set_override('hostname', f'{HOST}.example', 'agent')
    api.conf.set_override('device_count', 2, 'fake_driver')
    conductor_api = conductor_rpcapi.ConductorAPI(api.conf)
    tracker = resource_tracker.ResourceTracker(
        api.conf, [fake.FakeDriver(api.conf)], conductor_api)
    agent = agent_manager.AgentManager(api.conf, tracker, conductor_api)
    svc = rpc_service.RPCService(rpc.AGENT_TOPIC, HOST, agent.endpoints())
    svc.start()
    _register()
    try:
        yield svc
    finally:
        svc.stop()


def _discover(api, host=HOST, headers=LATEST, **kwargs):
    return api.app.post(f'/v2/hosts/{host}/discover', headers=headers,
                        **kwargs)


def test_discover_reports_what_changed(api, agent):
    ctx = cyborg_context.get_admin_context()
    assert inventory.get_host_devices(ctx, HOST) == []
    response = _discover(api, status=200)
    assert response.json == {'host': HOST, 'devices_added': 2,
                             'devices_updated': 0, 'devices_removed': 0,
                             'kept_in_use': 0, 'placement_pending': 0}
    assert len(inventory.get_host_devices(ctx, HOST)) == 2
    # Asked again: a full report that changes nothing.
    api.conf.set_override('device_count', 1, 'fake_driver')
    assert _discover(api).json['devices_removed'] == 1
    assert _discover(api).json == {
        'host': HOST, 'devices_added': 0, 'devices_updated': 0,
        'devices_removed': 0, 'kept_in_use': 0, 'placement_pending': 0}


def test_unknown_host_is_404(api, agent):
    response = _discover(api, host='cmp-unknown', status=404)
    assert 'No cyborg-agent has registered on host cmp-unknown' in (
        _fault(response))


def test_down_agent_is_409(api, sqlite_engine):
    _register()
    with sqlite_engine.begin() as conn:
        conn.execute(sa.update(models.Service).values(
            last_seen_at=datetime.datetime(2020, 1, 1)))
    fault = _fault(_discover(api, status=409))
    assert f'The cyborg-agent on host {HOST} is down' in fault
    assert '2020-01-01T00:00:00' in fault


def test_silent_agent_is_503(api):
    """Registered and up, but nothing listens: no answer in time."""
    _register()
    api.conf.set_override('rpc_response_timeout', 1)
    fault = _fault(_discover(api, status=503))
    assert f'The cyborg-agent on host {HOST} is unavailable' in fault
    assert 'within 1.0s' in fault


def test_capped_conductor_rpc_is_503(api, agent):
    api.conf.set_override('conductor', '1.2', 'upgrade_levels')
    fault = _fault(_discover(api, status=503))
    assert 'host_discover needs conductor RPC 1.3' in fault


@pytest.mark.parametrize('headers', [ADMIN, version('2.4')])
def test_missing_below_2_5(api, headers):
    _register()
    _discover(api, headers=headers, status=404)


def test_only_administrators(api):
    _register()
    manager = version('2.5', user('p1', 'manager,member,reader'))
    response = _discover(api, headers=manager, status=403)
    assert 'cyborg:host:discover' in _fault(response)
    # Only POST .../discover exists.
    api.app.get(f'/v2/hosts/{HOST}/discover', headers=LATEST, status=405)
