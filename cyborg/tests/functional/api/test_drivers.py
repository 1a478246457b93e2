"""/v2/drivers (microversion 2.5) through HTTP, on every database."""
import datetime
import json

import pytest
from oslo_utils import timeutils

from cyborg import context as cyborg_context
from cyborg.accelerator.drivers import fake
from cyborg.agent import resource_tracker
from cyborg.conductor import rpcapi as conductor_rpcapi
from cyborg.db.api import inventory
from cyborg.db.api import services
from cyborg.tests.functional.api.fixtures import ADMIN
from cyborg.tests.functional.api.fixtures import user
from cyborg.tests.functional.api.fixtures import version
from cyborg.tests.unit.test_resource_tracker import FlakyDriver

LATEST = version('2.5')


def _list(api, query='', headers=LATEST, **kwargs):
    return api.app.get(f'/v2/drivers{query}', headers=headers,
                       **kwargs).json


def _report_two_drivers(api):
    """cmp3 (node3): two cards of the fake driver and one card that a
    driver named ``other`` reported."""
    api.conf.set_override('device_count', 3, 'fake_driver')
    devices = [d.to_dict() for d in fake.FakeDriver(api.conf).discover()]
    for deployable in devices[2]['deployables']:
        deployable['driver_name'] = 'other'
        deployable['num_accelerators'] = 1
        del deployable['attach_handles'][1:]
    inventory.apply_report(cyborg_context.get_admin_context(), 'cmp3',
                           {'hostname': 'node3', 'devices': devices})


def test_counts_per_host_and_driver(api_all_dbs):
    api = api_all_dbs
    api.seed('cmp1', count=2, hostname='node1')
    api.seed('cmp2', count=1, hostname='node2')
    _report_two_drivers(api)
    per_card = api.conf.fake_driver.accelerators_per_device
    body = _list(api)
    assert list(body) == ['drivers']
    # Reports without driver states, and no agent registered.
    unknown = {'state': None, 'error': None, 'since': None,
               'agent_state': None}
    assert [{k: d.pop(k) for k in unknown} for d in body['drivers']] == [
        unknown] * 4
    assert body['drivers'] == [
        {'host': 'cmp1', 'hostname': 'node1', 'driver_name': 'fake',
         'devices': 2, 'deployables': 2, 'accelerators': 2 * per_card},
        {'host': 'cmp2', 'hostname': 'node2', 'driver_name': 'fake',
         'devices': 1, 'deployables': 1, 'accelerators': per_card},
        {'host': 'cmp3', 'hostname': 'node3', 'driver_name': 'fake',
         'devices': 2, 'deployables': 2, 'accelerators': 2 * per_card},
        {'host': 'cmp3', 'hostname': 'node3', 'driver_name': 'other',
         'devices': 1, 'deployables': 1, 'accelerators': 1}]

    def rows(query):
        return [(d['host'], d['driver_name'])
                for d in _list(api, query)['drivers']]

    assert rows('?host=cmp3') == [('cmp3', 'fake'), ('cmp3', 'other')]
    assert rows('?driver_name=other') == [('cmp3', 'other')]
    assert rows('?host=cmp1&driver_name=fake') == [('cmp1', 'fake')]
    assert rows('?host=cmp9') == []


def test_empty_without_devices(api):
    assert _list(api) == {'drivers': []}


@pytest.mark.parametrize('headers', [ADMIN, version('2.4')])
def test_missing_below_2_5(api, headers):
    api.seed('cmp1')
    api.app.get('/v2/drivers', headers=headers, status=404)


def test_readers_need_a_manager_role(api):
    api.seed('cmp1')
    response = api.app.get('/v2/drivers', headers=version(
        '2.5', user('p1', 'member,reader')), status=403)
    fault = json.loads(response.json['error_message'])['faultstring']
    assert 'cyborg:driver:get_all' in fault
    assert len(_list(api, headers=version(
        '2.5', user('p1', 'manager,member,reader')))['drivers']) == 1


T0 = datetime.datetime(2026, 11, 24, 9, 0, 0)


def _at(seconds):
    return (T0 + datetime.timedelta(seconds=seconds)).isoformat() + '+00:00'


class EmptyDriver(fake.FakeDriver):
    driver_name = 'empty'

    def discover(self):
        return []


@pytest.fixture
def clock():
    timeutils.set_time_override(T0)
    yield timeutils.advance_time_seconds
    timeutils.clear_time_override()


def test_driver_states(api_all_dbs, clock):
    """An agent with three drivers reports through the conductor RPC
    API; one fails, is still failing later, then recovers; then the
    agent stops."""
    api = api_all_dbs
    api.conf.set_override('host', 'cmp1')
    api.conf.set_override('hostname', 'node1', 'agent')
    flaky = FlakyDriver(api.conf)
    tracker = resource_tracker.ResourceTracker(
        api.conf, [fake.FakeDriver(api.conf), flaky, EmptyDriver(api.conf)],
        conductor_rpcapi.ConductorAPI(api.conf))
    ctx = cyborg_context.get_admin_context()

    def heartbeat():
        services.heartbeat(ctx, 'cmp1', 'cyborg-agent', '0.1.0', 'node1')

    def states(query='?host=cmp1'):
        return {d['driver_name']: (d['state'], d['error'], d['since'],
                                   d['agent_state'], d['devices'])
                for d in _list(api, query)['drivers']}

    heartbeat()
    tracker.update()
    per_card = api.conf.fake_driver.accelerators_per_device
    assert _list(api)['drivers'] == [
        {'host': 'cmp1', 'hostname': 'node1', 'driver_name': 'empty',
         'devices': 0, 'deployables': 0, 'accelerators': 0,
         'state': 'no devices', 'error': None, 'since': _at(0),
         'agent_state': 'up'},
        {'host': 'cmp1', 'hostname': 'node1', 'driver_name': 'fake',
         'devices': 1, 'deployables': 1, 'accelerators': per_card,
         'state': 'ok', 'error': None, 'since': _at(0),
         'agent_state': 'up'},
        {'host': 'cmp1', 'hostname': 'node1', 'driver_name': 'flaky',
         'devices': 1, 'deployables': 1, 'accelerators': 1,
         'state': 'ok', 'error': None, 'since': _at(0),
         'agent_state': 'up'}]

    clock(30)
    heartbeat()
    flaky.failure = OSError('sysfs went away')
    tracker.update()
    assert states() == {
        'empty': ('no devices', None, _at(0), 'up', 0),
        'fake': ('ok', None, _at(0), 'up', 1),
        # Failing, and its device is still there.
        'flaky': ('failed', 'OSError: sysfs went away', _at(30), 'up', 1)}
    assert states('?state=failed') == {
        'flaky': ('failed', 'OSError: sysfs went away', _at(30), 'up', 1)}
    assert list(states('?state=no%20devices')) == ['empty']
    assert list(states('?host=cmp1&driver_name=empty')) == ['empty']

    # Still failing with another error: failing since the first one.
    clock(30)
    heartbeat()
    flaky.failure = OSError('device or resource busy')
    tracker.update()
    assert states()['flaky'] == ('failed', 'OSError: device or resource '
                                 'busy', _at(30), 'up', 1)

    # Recovered.
    clock(30)
    heartbeat()
    flaky.failure = None
    tracker.update()
    assert states()['flaky'] == ('ok', None, _at(90), 'up', 1)

    # The agent stops: the last states stay, and say the agent is down.
    clock(api.conf.service_down_time + 1)
    assert {name: s[0] for name, s in states().items()} == {
        'empty': 'no devices', 'fake': 'ok', 'flaky': 'ok'}
    assert {s[3] for s in states().values()} == {'down'}


def test_bad_state_filter_is_400(api):
    response = api.app.get('/v2/drivers?state=broken', headers=LATEST,
                           status=400)
    fault = json.loads(response.json['error_message'])['faultstring']
    assert "'broken'" in fault and 'no devices' in fault
