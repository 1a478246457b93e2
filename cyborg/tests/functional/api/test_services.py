"""/v2/services (microversion 2.5) through HTTP."""
import datetime
import json
import urllib.parse

import pytest
import sqlalchemy as sa

from cyborg import context as cyborg_context
from cyborg.db import models
from cyborg.db.api import services
from cyborg.tests.functional.api.fixtures import ADMIN
from cyborg.tests.functional.api.fixtures import user
from cyborg.tests.functional.api.fixtures import version

LATEST = version('2.5')
FIELDS = {'id', 'host', 'binary', 'hostname', 'version', 'state',
          'last_seen_at', 'created_at'}


def _fault(response):
    assert response.content_type == 'application/json'
    return json.loads(response.json['error_message'])['faultstring']


def _register(engine):
    """A conductor and two agents; the agent of cmp2 went silent."""
    ctx = cyborg_context.get_admin_context()
    services.heartbeat(ctx, 'ctl1', 'cyborg-conductor', '0.1.0')
    services.heartbeat(ctx, 'cmp1', 'cyborg-agent', '0.1.0', 'node1')
    services.heartbeat(ctx, 'cmp2', 'cyborg-agent', '0.1.0', 'node2')
    with engine.begin() as conn:
        conn.execute(sa.update(models.Service)
                     .where(models.Service.host == 'cmp2')
                     .values(last_seen_at=datetime.datetime(2020, 1, 1)))


def _list(api, query='', headers=LATEST, **kwargs):
    return api.app.get(f'/v2/services{query}', headers=headers,
                       **kwargs).json


def test_list_states_and_filters(api, sqlite_engine):
    _register(sqlite_engine)
    body = _list(api)
    assert list(body) == ['services']
    assert [(s['binary'], s['host'], s['hostname'], s['state'])
            for s in body['services']] == [
        ('cyborg-conductor', 'ctl1', None, 'up'),
        ('cyborg-agent', 'cmp1', 'node1', 'up'),
        ('cyborg-agent', 'cmp2', 'node2', 'down')]
    service = body['services'][1]
    assert set(service) == FIELDS
    assert service['version'] == '0.1.0'
    assert service['last_seen_at'].endswith('+00:00')
    assert body['services'][2]['last_seen_at'] == '2020-01-01T00:00:00+00:00'

    def hosts(query):
        return [s['host'] for s in _list(api, query)['services']]

    assert hosts('?binary=cyborg-agent') == ['cmp1', 'cmp2']
    assert hosts('?host=cmp2') == ['cmp2']
    assert hosts('?binary=cyborg-conductor&host=cmp1') == []
    assert hosts('?binary=nova-compute') == []


def test_down_time_follows_the_option(api, sqlite_engine, conf):
    _register(sqlite_engine)
    conf.set_override('service_down_time', 10 * 365 * 24 * 3600)
    assert {s['state'] for s in _list(api)['services']} == {'up'}


def test_pagination_by_id(api, sqlite_engine):
    _register(sqlite_engine)
    everything = [s['id'] for s in _list(api)['services']]
    first = _list(api, '?binary=cyborg-agent&limit=1')
    assert list(first) == ['services', 'next']
    assert [s['host'] for s in first['services']] == ['cmp1']
    query = urllib.parse.parse_qs(urllib.parse.urlsplit(first['next']).query)
    assert query == {'binary': ['cyborg-agent'], 'limit': ['1'],
                     'marker': [str(everything[1])]}
    second = api.app.get(first['next'].replace('http://localhost', ''),
                         headers=LATEST).json
    assert [s['host'] for s in second['services']] == ['cmp2']
    assert list(second) == ['services']
    # The marker is an id of the list, not a uuid.
    for query in ('limit=0', 'marker=x', 'marker=999',
                  'marker=6ba7b810-9dad-11d1-80b4-00c04fd430c8'):
        api.app.get(f'/v2/services?{query}', headers=LATEST, status=400)


@pytest.mark.parametrize('headers', [ADMIN, version('2.4')])
def test_missing_below_2_5(api, sqlite_engine, headers):
    _register(sqlite_engine)
    unknown = _fault(api.app.get('/v2/no_such_thing', headers=headers,
                                 status=404))
    response = api.app.get('/v2/services', headers=headers, status=404)
    assert _fault(response) == unknown


def test_unsupported_version_is_still_406(api):
    response = api.app.get('/v2/services', headers=version('2.99'),
                           status=406)
    assert '2.99' in _fault(response)


def test_readers_need_a_manager_role(api, sqlite_engine):
    _register(sqlite_engine)
    response = api.app.get('/v2/services', headers=version(
        '2.5', user('p1', 'member,reader')), status=403)
    assert 'cyborg:service:get_all' in _fault(response)
    assert len(_list(api, headers=version(
        '2.5', user('p1', 'manager,member,reader')))['services']) == 3
