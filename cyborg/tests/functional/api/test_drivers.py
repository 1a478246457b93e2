"""/v2/drivers (microversion 2.5) through HTTP, on every database."""
import json

import pytest

from cyborg import context as cyborg_context
from cyborg.accelerator.drivers import fake
from cyborg.db.api import inventory
from cyborg.tests.functional.api.fixtures import ADMIN
from cyborg.tests.functional.api.fixtures import user
from cyborg.tests.functional.api.fixtures import version

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
