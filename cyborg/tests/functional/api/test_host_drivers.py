"""/v2/hosts/{host}/drivers (microversion 2.8): API → conductor → a real
agent service on the in-memory transport, on every database."""
import datetime
import importlib.metadata
import json

import pytest
import sqlalchemy as sa

from cyborg import context as cyborg_context
from cyborg.accelerator.drivers import fake
from cyborg.agent import service as agent_service
from cyborg.db import models
from cyborg.db.api import inventory
from cyborg.db.api import providers
from cyborg.db.api import services
from cyborg.tests.functional.api.fixtures import SERVICE
from cyborg.tests.functional.api.fixtures import user
from cyborg.tests.functional.api.fixtures import version

HOST = 'cmp8'
V28 = version('2.8')
VGPUS = {'mdev_type': fake.VGPU_TYPE, 'mdev_count': 2}
INSTANCE = '0d6b3c1e-7a52-4f7e-9d1b-6c2a3e4f5a61'
CYBORG_VERSION = importlib.metadata.version('cyborg')


def _fault(response):
    assert response.content_type == 'application/json'
    return json.loads(response.json['error_message'])['faultstring']


def _register(host=HOST):
    services.heartbeat(cyborg_context.get_admin_context(), host,
                       'cyborg-agent', '0.1.0', f'{host}.example')


def _start(api):
    svc = agent_service.build(api.conf)
    svc.start()
    return svc


def _agent(api, **fake_driver):
    """The agent of HOST as cyborg-agent builds it: [agent]
    enabled_drivers (fake_driver, with options ``fake_driver``), its
    cache in the test's state_path."""
    api.conf.set_override('host', HOST)
    api.conf.set_override('hostname', f'{HOST}.example', 'agent')
    for option, value in dict(fake_driver, device_count=2).items():
        api.conf.set_override(option, value, 'fake_driver')
    api.conf.set_override('periodic_interval', 3600, 'agent')
    api.conf.set_override('hotplug', False, 'agent')
    api.conf.set_override('health_interval', 0, 'agent')
    svc = _start(api)
    _register()
    svc.agent.tracker.update(force=True)
    try:
        yield api, svc
    finally:
        svc.stop()


@pytest.fixture
def agent(api_all_dbs):
    yield from _agent(api_all_dbs)


@pytest.fixture
def gpu_agent(api_all_dbs):
    """``agent``, its fake driver offering a GPU that takes layouts."""
    yield from _agent(api_all_dbs, vgpu_device_count=1, vgpus_per_device=4)


def _devices(host=HOST):
    return inventory.get_host_devices(cyborg_context.get_admin_context(),
                                      host)


def _reserved():
    """rp uuid -> (reserved, total) that placement is to hold."""
    return {p.uuid: (p.reserved, p.total) for p in providers.host_providers(
        cyborg_context.get_admin_context(), f'{HOST}.example')}


def _url(*parts):
    return '/'.join([f'/v2/hosts/{HOST}/drivers', *parts])


def _by_name(listing):
    return {d['name']: d for d in listing['drivers']}


def test_list_shows_every_installed_driver(agent):
    api, _ = agent
    listing = api.app.get(_url(), headers=V28).json
    assert listing['host'] == HOST
    found = _by_name(listing)
    installed = {e.name for e in importlib.metadata.entry_points(
        group='cyborg.accelerator.driver')}
    assert set(found) == installed
    assert found['fake_driver'] == {
        'name': 'fake_driver', 'driver_name': 'fake',
        'version': CYBORG_VERSION, 'enabled': True, 'state': 'ok',
        'error': None}
    assert found['intel_nic']['enabled'] is False
    assert found['intel_nic']['state'] is None
    assert found['intel_nic']['driver_name'] == 'intel_nic'


def test_disable_then_enable(agent):
    api, svc = agent
    assert len(_devices()) == 2
    change = api.app.post(_url('fake_driver', 'disable'), headers=V28,
                          status=200).json
    assert change == {'name': 'fake_driver', 'driver_name': 'fake',
                      'version': CYBORG_VERSION, 'enabled': False,
                      'state': 'disabled', 'error': None, 'host': HOST,
                      'changed': True, 'reported': True}
    # Its devices stay, reserved (see test_disable_keeps_identity).
    assert len(_devices()) == 2
    rows = {d['driver_name']: d for d in api.app.get(
        f'/v2/drivers?host={HOST}', headers=V28).json['drivers']}
    assert rows['fake']['state'] == 'disabled'
    assert rows['fake']['version'] == CYBORG_VERSION
    # Below 2.8 the version is not shown.
    assert 'version' not in api.app.get(
        f'/v2/drivers?host={HOST}', headers=version('2.7')).json[
            'drivers'][0]
    # Again: nothing to change.
    again = api.app.post(_url('fake_driver', 'disable'), headers=V28).json
    assert again['changed'] is False

    # Kept across a restart of the agent: the config file enables it.
    svc.stop()
    svc = _start(api)
    try:
        assert svc.agent.tracker.drivers == []
        assert _by_name(api.app.get(_url(), headers=V28).json)[
            'fake_driver']['state'] == 'disabled'
        change = api.app.post(_url('fake_driver', 'enable'), headers=V28,
                              status=200).json
        assert (change['enabled'], change['state'], change['changed']) == (
            True, 'ok', True)
        assert len(_devices()) == 2
    finally:
        svc.stop()


def _identity(api):
    """By address: each device's uuid, health as an operator set it,
    layout, and its deployables' uuids and providers."""
    shown = {}
    for device in _devices():
        row = api.app.get(f'/v2/devices/{device["uuid"]}', headers=V28).json
        shown[json.dumps(device['controlpath_id'], sort_keys=True)] = (
            device['uuid'], row['health'], row['health_source'],
            row['layout'], row['layout_state'],
            sorted((d['uuid'], d['rp_uuid']) for d in device['deployables']))
    return shown


def test_disable_keeps_identity(gpu_agent):
    """A driver turned off and on again gives its devices back as they
    were: uuids, an operator's health override, a layout, providers."""
    api, _ = gpu_agent
    gpu = next(d for d in _devices() if d['type'] == 'GPU')
    api.app.put_json(f'/v2/devices/{gpu["uuid"]}/layout', VGPUS,
                     headers=V28, status=200)
    sick = next(d for d in _devices() if d['type'] != 'GPU')
    api.app.put_json(f'/v2/devices/{sick["uuid"]}/health',
                     {'state': 'unhealthy', 'reason': 'fan failure'},
                     headers=V28, status=200)
    before = _identity(api)
    assert len(before) == 3

    api.app.post(_url('fake_driver', 'disable'), headers=V28, status=200)
    # Kept as they were, every provider reserved whole.
    assert _identity(api) == before
    reserved = _reserved()
    assert len(reserved) >= 3
    assert all(r == total for r, total in reserved.values())

    api.app.post(_url('fake_driver', 'enable'), headers=V28, status=200)
    assert _identity(api) == before
    # Placement offers them again, but the device an operator marked
    # unhealthy.
    sick_rp = sick['deployables'][0]['rp_uuid']
    assert {rp: r for rp, (r, _) in _reserved().items()} == {
        rp: total if rp == sick_rp else 0
        for rp, (_, total) in _reserved().items()}


def _bind(api, rp_uuid):
    api.dp('dp1')
    [arq] = api.app.post_json('/v2/accelerator_requests',
                              {'device_profile_name': 'dp1'},
                              headers=version('2.8'), status=201).json['arqs']
    api.app.patch_json('/v2/accelerator_requests', {arq['uuid']: [
        {'path': '/hostname', 'op': 'add', 'value': f'{HOST}.example'},
        {'path': '/device_rp_uuid', 'op': 'add', 'value': rp_uuid},
        {'path': '/instance_uuid', 'op': 'add', 'value': INSTANCE}]},
        headers=SERVICE, status=202)
    return arq['uuid']


def test_disable_refused_while_in_use(agent):
    api, svc = agent
    busy = _devices()[0]
    arq = _bind(api, busy['deployables'][0]['rp_uuid'])
    response = api.app.post(_url('fake_driver', 'disable'), headers=V28,
                            status=409)
    fault = _fault(response)
    assert arq in fault
    assert 'Driver fake_driver cannot be disabled on host cmp8' in fault
    # Nothing was applied: the agent still runs it, the choice is not kept.
    assert len(svc.agent.tracker.drivers) == 1
    assert svc.agent.tracker.cache.driver_choices == {}
    assert len(_devices()) == 2

    # Released: the disable goes through, the devices stay, reserved.
    api.app.delete(f'/v2/accelerator_requests?arqs={arq}',
                   headers=dict(SERVICE, **V28), status=204)
    api.app.post(_url('fake_driver', 'disable'), headers=V28, status=200)
    assert len(_devices()) == 2
    assert all(reserved == total for reserved, total in _reserved().values())


def test_a_request_bound_as_the_driver_goes_off_stays_bound(agent):
    """A bind that lands between the conductor's check and the agent's
    disable: the request stays Bound to its handle, the device is kept
    reserved, and no new bind can take it until the driver is back."""
    api, svc = agent
    busy, idle = _devices()
    arq = _bind(api, busy['deployables'][0]['rp_uuid'])
    # The agent turns the driver off as the conductor had allowed it.
    svc.agent.host.driver_control.set_enabled('fake_driver', False)

    shown = api.app.get(f'/v2/accelerator_requests/{arq}', headers=V28).json
    assert shown['state'] == 'Bound' and shown['attach_handle_info']
    assert [d['uuid'] for d in _devices()] == [busy['uuid'], idle['uuid']]
    assert all(r == total for r, total in _reserved().values())
    api.dp('dp2')
    [other] = api.app.post_json('/v2/accelerator_requests',
                                {'device_profile_name': 'dp2'},
                                headers=V28, status=201).json['arqs']
    refused = api.app.patch_json('/v2/accelerator_requests', {other['uuid']: [
        {'path': '/hostname', 'op': 'add', 'value': f'{HOST}.example'},
        {'path': '/device_rp_uuid', 'op': 'add',
         'value': idle['deployables'][0]['rp_uuid']},
        {'path': '/instance_uuid', 'op': 'add',
         'value': '7e1d2c3b-4a5f-4b6c-8d7e-9f0a1b2c3d4e'}]},
        headers=dict(SERVICE, **V28), expect_errors=True)
    assert refused.status_int >= 400
    assert 'its driver fake is disabled on cmp8' in refused.text

    svc.agent.host.driver_control.set_enabled('fake_driver', True)
    assert api.app.get(f'/v2/accelerator_requests/{arq}',
                       headers=V28).json['state'] == 'Bound'
    assert [d['uuid'] for d in _devices()] == [busy['uuid'], idle['uuid']]
    # Off again while bound: the request can still be deleted, and the
    # device stays, reserved.
    svc.agent.host.driver_control.set_enabled('fake_driver', False)
    api.app.delete(f'/v2/accelerator_requests?arqs={arq}',
                   headers=dict(SERVICE, **V28), status=204)
    assert [d['uuid'] for d in _devices()] == [busy['uuid'], idle['uuid']]
    assert all(r == total for r, total in _reserved().values())


def test_unknown_driver_is_400_listing_the_installed(agent):
    api, svc = agent
    fault = _fault(api.app.post(_url('no_such', 'enable'), headers=V28,
                                status=400))
    assert 'No driver named no_such is installed on host cmp8' in fault
    assert 'fake_driver' in fault and 'intel_nic' in fault
    assert svc.agent.tracker.cache.driver_choices == {}


def test_reload(agent):
    api, svc = agent
    before = svc.agent.tracker.drivers[0]
    listing = api.app.post(_url('reload'), headers=V28, status=200).json
    assert _by_name(listing)['fake_driver']['enabled'] is True
    # A new instance of the driver, from the re-imported module.
    [after] = svc.agent.tracker.drivers
    assert after is not before
    assert len(_devices()) == 2


def test_agent_down_is_503_and_changes_nothing(api, sqlite_engine):
    _register()
    with sqlite_engine.begin() as conn:
        conn.execute(sa.update(models.Service).values(
            last_seen_at=datetime.datetime(2020, 1, 1)))
    for method, parts in (('get', ()), ('post', ('fake_driver', 'disable')),
                          ('post', ('reload',))):
        response = getattr(api.app, method)(_url(*parts), headers=V28,
                                            status=503)
        fault = _fault(response)
        assert f'The cyborg-agent on host {HOST} is unavailable' in fault
        assert '2020-01-01T00:00:00' in fault


def test_silent_agent_is_503(api):
    _register()
    api.conf.set_override('rpc_response_timeout', 1)
    fault = _fault(api.app.get(_url(), headers=V28, status=503))
    assert 'within 1.0s' in fault


def test_a_host_name_matches_exactly(agent):
    """A name that differs from the registered one in case or trailing
    spaces is another host, with no agent: 404 on every database (MySQL
    and MariaDB compare ignoring both unless told otherwise)."""
    api, svc = agent
    # Before, the database found cmp8 and the call went to an agent
    # named as typed, which nobody serves: a 503 after this timeout.
    api.conf.set_override('rpc_response_timeout', 1)
    for typed in ('CMP8', 'Cmp8', 'cmp8%20', 'cmp8%20%20'):
        for method, path in (
                ('get', f'/v2/hosts/{typed}/drivers'),
                ('post', f'/v2/hosts/{typed}/drivers/reload'),
                ('post', f'/v2/hosts/{typed}/drivers/fake_driver/disable'),
                ('post', f'/v2/hosts/{typed}/discover')):
            call = getattr(api.app, method)
            response = call(path, headers=V28, expect_errors=True)
            assert response.status_int == 404, (path, response.body)
    assert svc.agent.tracker.cache.driver_choices == {}
    api.app.get(_url(), headers=V28, status=200)


def test_unknown_host_is_404(api):
    api.app.get('/v2/hosts/nowhere/drivers', headers=V28, status=404)


@pytest.mark.parametrize('parts', [(), ('reload',), ('x', 'enable')])
def test_missing_below_2_8(api, parts):
    _register()
    method = api.app.get if not parts else api.app.post
    method(_url(*parts), headers=version('2.7'), status=404)


def test_only_administrators(api):
    _register()
    member = version('2.8', user('p1', 'manager,member,reader'))
    for method, parts, action in (
            ('get', (), 'driver_list'),
            ('post', ('fake_driver', 'enable'), 'driver_enable'),
            ('post', ('fake_driver', 'disable'), 'driver_disable'),
            ('post', ('reload',), 'driver_reload')):
        response = getattr(api.app, method)(_url(*parts), headers=member,
                                            status=403)
        assert f'cyborg:host:{action}' in _fault(response)
